"""Chapter 11b's third way to adapt a model: in-context learning (the few-shot setting of Brown et al. 2020), measured
on the speaker task of `finetune.speaker_chunks` beside the fine-tuned head of `experiments/finetune_selection.py`.

The baby GPT recipe (`recipes.baby_gpt_configs(65)`: 4 layers, 4 heads, d_model 128, lr 1e-3 -> 1e-4, char
tokenizer, the same TinyShakespeare training split) with a context of `--context-length` (1024) characters instead
of 64, so that 8 demonstrations and the query fit (a demonstration is about 76 characters), and rotary positions.
It is trained once, for `--max-iters` (2,000) steps of `--batch-size` (2) windows, 4.1 million characters against
the baby GPT's 1.5 million, in the shared model cache (`training.cached_run`, prefix "shakespeare-char-long"); its
best validation loss is recorded beside the 64-character baby GPT's.

The evaluation: for each of `--n-test` test pieces of `speaker_chunks(val_text, tok, val_fraction=0.3)` (the test
pieces of `experiments/finetune_selection.py`'s fine-tuned heads; a seeded sample, or all), k = 0
... 8 demonstrations "NAME:\\n<piece>\\n\\n" in TinyShakespeare's own format, drawn uniformly at random (not
balanced) from the heads' *training* pieces, seeded per test piece, the first k of the same 8 for every k (so the k
are paired), then the query. Each of the 4 candidates is "NAME:\\n<piece>", the name first as in the text, scored by
one forward pass: the "joint" score log P(NAME:\\n<piece> | demos) (chapter 11a's likelihood classifier) and the
"channel" score log P(<piece> | demos, NAME:\\n), which leaves out the name's own prior (Min et al. 2022's noisy
channel; a PMI-style score like 11a's calibrated one). A control at k = 8 shuffles the demonstrations' names (each
demonstration gets the name of one of the k demonstrations drawn at random with replacement, possibly its own; a
variant of Min et al. 2022's random labels): if accuracy holds with wrong labels,
what the demonstrations teach is not the mapping from piece to name.
Writes transformerbook/results/icl.json: accuracy with a 95% Wilson interval per k and score, chance and the
most-frequent-speaker rate.

    python experiments/icl.py                                   # the committed results
Also records `slice_run()`: 3 training steps in a temporary folder, 4 test pieces, k = 0 and 1, the scores
themselves, which `tests/test_icl.py` re-runs (a few seconds).
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from transformerbook.checkpoints import load_checkpoint, load_model
from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.evaluation import accuracy_with_ci
from transformerbook.finetune import speaker_chunks
from transformerbook.recipes import baby_gpt_configs, preset_configs
from transformerbook.corpus import load_dataset
from transformerbook.lm_head import GPT
from transformerbook.training import cached_run, cached_run_dir, shakespeare_model, train

NAME = "icl"
MAX_K = 8
PREFIX = "shakespeare-char-long"


def configs(context_length: int = 1024, max_iters: int = 2000, batch_size: int = 2) -> tuple:
    """The baby GPT's recipe with a longer context and rotary positions (chapter 12; a learned table of 1,024 rows
    would see its late rows rarely): (GPTConfig, TrainConfig). The decay ends at 2,000 steps whatever `max_iters`."""
    model_cfg, train_cfg = baby_gpt_configs(65, max_iters=max_iters, lr_decay_iters=2000, batch_size=batch_size)
    return dataclasses.replace(model_cfg, context_length=context_length, positional="rotary"), train_cfg


def long_context_model(model_cfg, train_cfg, progress: bool = True) -> tuple:
    "Trained once, in the shared model cache: (GPT in eval mode with the run's best weights, tokenizer, run folder)."
    path = cached_run(PREFIX, model_cfg, train_cfg, "char", {"tokenizer": "char"}, progress,
                      desc=f"training the {model_cfg.context_length}-character model (once)")
    return *load_model(path.parent), path.parent


def best_val_loss(path) -> float:
    "The lowest validation loss a cached run recorded (nats per character)."
    return min(load_checkpoint(path)["history"]["val_loss"])


def pieces_as_text(split: tuple, tok) -> list:
    "(token_ids, padding_mask, labels) of `speaker_chunks` as [(piece, label)]."
    ids, mask, labels = split
    return [(tok.decode(r[m].tolist()), int(y)) for r, m, y in zip(ids, mask, labels)]


def demonstrations(train: list, n: int, seed: int) -> list:
    "`n` (piece, label) demonstrations drawn uniformly at random from the training pieces, seeded."
    return random.Random(seed).sample(train, n)


def prompt_text(demos: list, names: list) -> str:
    "'\\n\\n' then each demonstration as 'NAME:\\n<piece>\\n\\n', TinyShakespeare's format."
    return "\n\n" + "".join(f"{names[y]}:\n{p}\n\n" for p, y in demos)


@torch.no_grad()
def candidate_scores(model, tok, prompt: str, piece: str, names: list) -> tuple:
    """(joint, channel), each (C,) float: log P(NAME:\\n<piece> | prompt) and log P(<piece> | prompt, NAME:\\n) for each
    name, from one forward pass per candidate. `ValueError` if a row does not fit in the model's context."""
    rows, starts = [], []
    for name in names:
        head, tail = tok.encode(prompt), tok.encode(f"{name}:\n")
        rows.append(head + tail + tok.encode(piece))
        starts.append((len(head), len(head) + len(tail)))
    T = model.config.context_length
    if max(map(len, rows)) > T: raise ValueError(f"a row of {max(map(len, rows))} characters exceeds the context {T}")
    L = max(map(len, rows))
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    for r, row in enumerate(rows): ids[r, :len(row)] = torch.tensor(row)
    logp = F.log_softmax(model(ids[:, :-1]).float(), -1).gather(-1, ids[:, 1:, None])[..., 0]  # (C, L-1)
    joint = torch.stack([logp[r, s - 1:len(row) - 1].sum() for r, (row, (s, _)) in enumerate(zip(rows, starts))])
    channel = torch.stack([logp[r, s - 1:len(row) - 1].sum() for r, (row, (_, s)) in enumerate(zip(rows, starts))])
    return joint, channel


def evaluate(model, tok, task: dict, n_test: int, ks, seed: int = 0, shuffled_k: int | None = MAX_K) -> dict:
    "Accuracy per k (and of the shuffled-label control at `shuffled_k`) for the joint and channel scores."
    train, test = pieces_as_text(task["train"], tok), pieces_as_text(task["test"], tok)
    order = random.Random(seed).sample(range(len(test)), min(n_test or len(test), len(test)))  # seeded; all: shuffled
    test = [test[i] for i in order]
    answers = [y for _, y in test]
    settings = [(k, False) for k in ks] + ([(shuffled_k, True)] if shuffled_k is not None else [])
    preds = {s: {"joint": [], "channel": []} for s in settings}
    for i, (piece, _) in enumerate(test):
        demos = demonstrations(train, max(k for k, _ in settings), seed * 100_000 + i)
        for k, shuffled in settings:
            d = demos[:k]
            if shuffled:
                rng = random.Random(seed * 100_000 + i + 1)
                d = [(p, d[rng.randrange(len(d))][1]) for p, _ in d]
            joint, channel = candidate_scores(model, tok, prompt_text(d, task["names"]), piece, task["names"])
            preds[k, shuffled]["joint"].append(int(joint.argmax()))
            preds[k, shuffled]["channel"].append(int(channel.argmax()))
        if i % 20 == 0: print(f"{i + 1}/{len(test)} test pieces", file=sys.stderr, flush=True)
    counts = torch.bincount(torch.tensor(answers), minlength=len(task["names"]))
    return {"n_test": len(test), "test_indices": order, "answers": answers,
            "predictions": {f"{k}{'/shuffled' * sh}": p for (k, sh), p in preds.items()},
            "majority": counts.max().item() / len(test),
            "uniform": 1 / len(task["names"]), "names": task["names"],
            "by_k": [{"k": k, **{s: accuracy_with_ci(preds[k, False][s], answers) for s in ("joint", "channel")}}
                     for k in ks],
            "shuffled_labels": None if shuffled_k is None else
            {"k": shuffled_k, **{s: accuracy_with_ci(preds[shuffled_k, True][s], answers)
                                 for s in ("joint", "channel")}}}


def slice_run(n_steps: int = 3, n_test: int = 4, ks=(0, 1)) -> dict:
    """The cheap slice the tests re-run: the same model trained for `n_steps` in a temporary folder (seeded, no
    cache; one evaluation batch), scored on `n_test` test pieces at `ks`: the joint and channel scores, rounded."""
    model_cfg, train_cfg = configs()
    train_cfg = dataclasses.replace(train_cfg, max_iters=n_steps, eval_iters=1, eval_interval=n_steps)
    tok, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    torch.manual_seed(train_cfg.seed)
    model = GPT(model_cfg)
    with tempfile.TemporaryDirectory() as out:
        train(model, train_ids, val_ids, train_cfg, out_dir=out, tokenizer=tok, progress=False)
    model.eval()
    _, val_text = train_val_split(load_tinyshakespeare())
    task = speaker_chunks(val_text, tok, val_fraction=0.3)
    train_pieces, test = pieces_as_text(task["train"], tok), pieces_as_text(task["test"], tok)
    scores = []
    for i, (piece, _) in enumerate(test[:n_test]):
        demos = demonstrations(train_pieces, max(ks), i)
        for k in ks:
            joint, channel = candidate_scores(model, tok, prompt_text(demos[:k], task["names"]), piece, task["names"])
            scores.append({"piece": i, "k": k, "joint": [round(x, 4) for x in joint.tolist()],
                           "channel": [round(x, 4) for x in channel.tolist()]})
    return {"n_steps": n_steps, "n_test": n_test, "ks": list(ks), "scores": scores}


def run(context_length=1024, max_iters=2000, batch_size=2, n_test=None, ks=tuple(range(MAX_K + 1)), seed=0,
        shuffled_k=MAX_K, progress=True) -> dict:
    "Train (once) the long-context model, then measure k-shot accuracy on the speaker task."
    model_cfg, train_cfg = configs(context_length, max_iters, batch_size)
    model, tok, folder = long_context_model(model_cfg, train_cfg, progress)
    _, val_text = train_val_split(load_tinyshakespeare())
    task = speaker_chunks(val_text, tok, val_fraction=0.3)  # finetune_selection's: its test pieces, its training ones
    shakespeare_model("char", progress=False)  # the baby GPT's own cached run, for its validation loss
    baby = cached_run_dir("shakespeare-char", *preset_configs("baby-gpt-char"), {"tokenizer": "char"})
    return {"context_length": context_length, "max_iters": max_iters, "batch_size": batch_size,
            "train_characters": max_iters * batch_size * context_length,
            "baby_gpt_train_characters": 2000 * 12 * 64, "n_params": sum(p.numel() for p in model.parameters()),
            "model_config": model_cfg.to_dict(),
            "val_loss": best_val_loss(folder/"ckpt.pt"), "baby_gpt_val_loss": best_val_loss(baby/"ckpt.pt"),
            "demonstrations": "uniform random draws from the training pieces (not balanced), seeded per test piece",
            **evaluate(model, tok, task, n_test, ks, seed, shuffled_k), "slice": slice_run()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context-length", type=int, default=1024)
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--n-test", type=int, default=None, help="test pieces scored (a seeded sample; default all)")
    parser.add_argument("--ks", type=int, nargs="+", default=list(range(MAX_K + 1)), help="numbers of demonstrations")
    parser.add_argument("--seed", type=int, default=0, help="which test pieces and demonstrations")
    parser.add_argument("--no-shuffled", action="store_true", help="skip the shuffled-label control")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR/f"{NAME}.json")
    args = parser.parse_args(argv)
    if min(args.ks) < 0 or max(args.ks) > MAX_K: parser.error(f"--ks {args.ks} must lie in 0..{MAX_K}")
    torch.set_num_threads(1)
    results = run(args.context_length, args.max_iters, args.batch_size, args.n_test, tuple(args.ks), args.seed,
                  None if args.no_shuffled else MAX_K)
    command = "python experiments/icl.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    save_result(args.out, experiment_record(command, [args.seed], results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
