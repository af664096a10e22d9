"""Chapter 11b's two measurements: what bidirectional context buys a masked character model, and what pre-training
buys a small fine-tuned head (CS182 "Pre-training vs. fine-tuning"; MIT 6.390 §11.3.2; Devlin et al. 2019).

- "mlm": 2,000 positions drawn (seeded) from TinyShakespeare's validation split. The masked model
  (`finetune.masked_char_model`, the baby GPT's recipe with causal=False, trained once and cached) reads 32
  characters before each position, [MASK] at it and r after it (r in `--right`); the causal baby GPT
  (`training.shakespeare_model("char")`) reads the 64 or 32 characters before it. Both in nats per character and
  top-1 accuracy, plus a few held-out passages with 15% of their characters filled in by the masked model.
- "finetune": `finetune.speaker_chunks` on the validation split (4 speakers); the same `SequenceClassifier` head
  on the pre-trained baby GPT and on a freshly initialised one of the same shape, training the head only (lr 1e-3)
  or the whole model (lr 1e-4, and 1e-3 for seed 0), 300 steps of 32 pieces: held-out accuracy with a 95% Wilson
  interval for each run.
Writes transformerbook/results/finetune.json. About 15 minutes of CPU time (the whole-model runs dominate), plus
the masked model's training the first time.
"""
from __future__ import annotations

import argparse
import copy
import json

import torch

from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.evaluation import accuracy_with_ci
from transformerbook.finetune import (MASK_ID, SequenceClassifier, classify, fill_masks, finetune_classifier,
                                      freeze_body, masked_char_losses, mlm_corrupt, next_char_losses, speaker_chunks)
from transformerbook.lm_head import GPT
from transformerbook.training import load_dataset, shakespeare_model

NAME = "finetune"


def run_mlm(n_positions: int = 2000, right=(0, 1, 2, 4, 8, 16, 31), left: int = 32, seed: int = 0,
            n_examples: int = 3) -> dict:
    "Masked vs causal losses on the same held-out positions, and filled-in passages."
    from transformerbook.finetune import masked_char_model
    masked, tok = masked_char_model(progress=False)
    causal, _ = shakespeare_model("char", progress=False)
    _, _, val = load_dataset("tinyshakespeare", "char")
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(64, len(val) - max(right), (n_positions,), generator=g)  # (N,)
    out = {"n_positions": n_positions, "left": left, "right": list(right), "masked_nats": [], "masked_accuracy": [],
           "causal_nats": {}, "causal_accuracy": {}}
    for r in right:
        losses = masked_char_losses(masked, val, positions, MASK_ID, left, r)
        out["masked_nats"].append(losses.mean().item())
        out["masked_accuracy"].append(_top1(masked, val, positions, left, r))
    for k in (64, 32):
        out["causal_nats"][str(k)] = next_char_losses(causal, val, positions, k).mean().item()
        out["causal_accuracy"][str(k)] = _top1(causal, val, positions, k, None)
    out["filled"] = []
    for i in range(n_examples):
        start = 2000 + 9000 * i
        passage = val[None, start:start + 64]  # (1, 64)
        holes, targets = mlm_corrupt(passage, MASK_ID, 65, torch.Generator().manual_seed(seed + i))
        holes = torch.where(targets != -100, MASK_ID, passage)  # every chosen character becomes a hole
        filled = fill_masks(masked, holes, MASK_ID)
        chosen = targets != -100
        out["filled"].append({"original": tok.decode(passage[0].tolist()),
                              "masked": "".join("_" if t == MASK_ID else tok.decode([t]) for t in holes[0].tolist()),
                              "filled": tok.decode(filled[0].tolist()), "n_masked": int(chosen.sum()),
                              "correct": int((filled[chosen] == passage[chosen]).sum())})
    return out


@torch.no_grad()
def _top1(model, data, positions, left: int, right: int | None) -> float:
    "Top-1 accuracy at the positions: masked (right given) or causal (right None)."
    if right is None:
        logits = model(data[positions[:, None] + torch.arange(-left, 0)])[:, -1]
    else:
        windows = data[positions[:, None] + torch.arange(-left, right + 1)]
        windows[:, left] = MASK_ID
        logits = model(windows)[:, left, :MASK_ID]
    return (logits.argmax(-1) == data[positions]).float().mean().item()


SETTINGS = (("pre-trained", "head only", 1e-3), ("random", "head only", 1e-3),  # (body, what is trained, lr)
            ("pre-trained", "whole model", 1e-4), ("random", "whole model", 1e-4),
            ("pre-trained", "whole model", 1e-3), ("random", "whole model", 1e-3))
HIGH_LR_SEEDS = (0,)  # the whole model at the pre-training peak learning rate: one seed (it is the slowest run)


def run_finetune(seeds=(0, 1, 2), steps: int = 300, batch_size: int = 32, settings=SETTINGS) -> dict:
    """The same head on a pre-trained and on a random body, head only or whole model, for each seed. The head is
    trained at the pre-training peak rate 1e-3; the whole model at the schedule's final rate 1e-4 (fine-tuning
    usually uses a lower rate than pre-training), and, for seed 0 only, at 1e-3 as well."""
    pretrained, tok = shakespeare_model("char", progress=False)
    _, val_text = train_val_split(load_tinyshakespeare())
    task = speaker_chunks(val_text, tok)
    (train_ids, train_mask, train_labels), (test_ids, test_mask, test_labels) = task["train"], task["test"]
    counts = torch.bincount(test_labels, minlength=len(task["names"]))
    out = {"names": task["names"], "n_train": len(train_labels), "n_test": len(test_labels),
           "test_counts": counts.tolist(), "majority": counts.max().item() / len(test_labels),
           "uniform": 1 / len(task["names"]), "steps": steps, "batch_size": batch_size, "runs": []}
    for body_name, train_what, lr in settings:
        for seed in seeds if (train_what, lr) != ("whole model", 1e-3) else [s for s in seeds if s in HIGH_LR_SEEDS]:
            torch.manual_seed(seed)  # the random body (if any), then the head: the same head for both bodies
            body = copy.deepcopy(pretrained) if body_name == "pre-trained" else GPT(pretrained.config)
            torch.manual_seed(seed)
            classifier = SequenceClassifier(body, len(task["names"]))
            if train_what == "head only": freeze_body(classifier)
            losses = finetune_classifier(classifier, train_ids, train_mask, train_labels, max_iters=steps,
                                         batch_size=batch_size, learning_rate=lr,
                                         generator=torch.Generator().manual_seed(seed))
            acc = accuracy_with_ci(classify(classifier, test_ids, test_mask), test_labels)
            run = {"body": body_name, "train": train_what, "lr": lr, "seed": seed, **acc,
                   "final_train_loss": losses[-1]}
            print(json.dumps(run), flush=True)
            out["runs"].append(run)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--positions", type=int, default=2000)
    parser.add_argument("--out", default=str(RESULTS_DIR/f"{NAME}.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {"mlm": run_mlm(args.positions), "finetune": run_finetune(tuple(args.seeds), args.steps)}
    command = "python experiments/finetune.py" + (f" --seeds {' '.join(map(str, args.seeds))}"
                                                  if args.seeds != [0, 1, 2] else "")
    record = experiment_record(command, args.seeds, results)
    save_result(args.out, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
