"""Chapter 11b's "Pre-trained against random" with a validation split, early stopping and a learning rate chosen per
arm (CS182 "Pre-training vs. fine-tuning"; Devlin et al. 2019 §4 choose the fine-tuning rate on a development set).

The speaker task of `finetune.speaker_chunks` on the validation split of TinyShakespeare, with `--val-fraction`
(0.3) of each speaker's training speeches moved to a validation split; the test pieces are those of
`experiments/finetune.py`. Four arms: the same `SequenceClassifier` head on the pre-trained baby GPT
(`training.shakespeare_model("char")`) or on a freshly initialised one of the same shape, training the head only or
the whole model. For each arm and each rate of its grid (head only: 1e-3, 3e-3, 1e-2; whole model: 1e-4, 3e-4,
1e-3), seed 0 trains with AdamW (batch 32) and `finetune.EarlyStopping` (validation loss every 25 steps,
patience 4, at most `--max-steps` 300 steps, the fixed length of `experiments/finetune.py`), and the rate with the
lowest best validation loss is the arm's choice. Then every seed of `--seeds` trains at the chosen rate the same
way. Each run records its best step, its best validation loss and accuracy, and the test accuracy of its best
parameters with a 95% Wilson interval.
Writes transformerbook/results/finetune_selection.json. About 10 minutes of CPU time (the arms are independent:
`--arms` runs some of them, and `--merge` joins the JSON files of such partial runs into one).

    python experiments/finetune_selection.py                    # the committed results
    python experiments/finetune_selection.py --arms "pre-trained/head only" --seeds 0 --out /tmp/slice.json
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.evaluation import accuracy_with_ci
from transformerbook.finetune import EarlyStopping, SequenceClassifier, classify, finetune_classifier, freeze_body
from transformerbook.finetune import speaker_chunks
from transformerbook.lm_head import GPT
from transformerbook.training import shakespeare_model

NAME = "finetune_selection"
LR_GRID = {"head only": (1e-3, 3e-3, 1e-2), "whole model": (1e-4, 3e-4, 1e-3)}
ARMS = ("pre-trained/head only", "random/head only", "pre-trained/whole model", "random/whole model")


def one_run(pretrained: GPT, task: dict, body: str, what: str, lr: float, seed: int, max_steps: int,
            eval_every: int = 25, patience: int = 4, batch_size: int = 32) -> dict:
    "One early-stopped fine-tuning run: its best step, validation loss and accuracy, and its test accuracy."
    torch.manual_seed(seed)  # the random body (if any), then the head: the same head for both bodies
    net = copy.deepcopy(pretrained) if body == "pre-trained" else GPT(pretrained.config)
    torch.manual_seed(seed)
    classifier = SequenceClassifier(net, len(task["names"]))
    if what == "head only": freeze_body(classifier)
    stopper = EarlyStopping(task["val"], eval_every, patience)
    losses = finetune_classifier(classifier, *task["train"], max_iters=max_steps, batch_size=batch_size,
                                 learning_rate=lr, generator=torch.Generator().manual_seed(seed), callback=stopper)
    stopper.restore(classifier)
    val_acc = accuracy_with_ci(classify(classifier, *task["val"][:2]), task["val"][2])["accuracy"]
    test = accuracy_with_ci(classify(classifier, *task["test"][:2]), task["test"][2])
    return {"body": body, "train": what, "lr": lr, "seed": seed, "steps_run": len(losses),
            "best_step": stopper.best_step, "best_val_loss": stopper.best_val_loss, "val_accuracy": val_acc,
            "val_curve": [[s, round(v, 5)] for s, v in zip(stopper.steps, stopper.val_loss)], **test}


def run(seeds=(0, 1), arms=ARMS, max_steps: int = 300, val_fraction: float = 0.3, lrs=None) -> dict:
    "Choose each arm's rate on the validation split (seed 0), then train every seed at it; `lrs` limits the grid."
    pretrained, tok = shakespeare_model("char", progress=False)
    _, val_text = train_val_split(load_tinyshakespeare())
    task = speaker_chunks(val_text, tok, val_fraction=val_fraction)
    counts = torch.bincount(task["test"][2], minlength=len(task["names"]))
    out = {"names": task["names"], "val_fraction": val_fraction, "max_steps": max_steps, "eval_every": 25,
           "patience": 4, "batch_size": 32, "lr_grid": LR_GRID,
           **{f"n_{k}": len(task[k][2]) for k in ("train", "val", "test")},
           "majority": counts.max().item() / len(task["test"][2]), "uniform": 1 / len(task["names"]),
           "selection": [], "runs": [], "chosen_lr": {}}
    for arm in arms:
        body, what = arm.split("/")
        grid = [one_run(pretrained, task, body, what, lr, seeds[0], max_steps) for lr in LR_GRID[what]
                if lrs is None or lr in lrs]
        for r in grid: print(json.dumps({k: v for k, v in r.items() if k != "val_curve"}), file=sys.stderr, flush=True)
        best = min(grid, key=lambda r: r["best_val_loss"])
        out["selection"] += grid
        out["chosen_lr"][arm] = best["lr"]
        out["runs"].append(best)  # seed 0 at the chosen rate is already trained
        for seed in seeds[1:]:
            out["runs"].append(one_run(pretrained, task, body, what, best["lr"], seed, max_steps))
            print(json.dumps({k: v for k, v in out["runs"][-1].items() if k != "val_curve"}), file=sys.stderr,
                  flush=True)
    return out


def merge(docs: list) -> tuple:
    "The results and command of partial runs (`--arms`), joined in the order of ARMS."
    results = {**docs[0]["results"], "selection": [], "runs": [], "chosen_lr": {}}
    for doc in docs: results["selection"] += doc["results"]["selection"]
    arm = lambda r: f"{r['body']}/{r['train']}"
    for name in ARMS:  # the rate with the lowest best validation loss over every partial run's grid
        grid = [r for r in results["selection"] if arm(r) == name]
        if grid: results["chosen_lr"][name] = min(grid, key=lambda r: r["best_val_loss"])["lr"]
    for doc in docs:
        for r in doc["results"]["runs"] + doc["results"]["selection"]:
            if results["chosen_lr"][arm(r)] == r["lr"] and r not in results["runs"]: results["runs"].append(r)
    order = lambda r: (ARMS.index(arm(r)), r["lr"], r["seed"])
    for key in ("selection", "runs"): results[key].sort(key=order)
    return results, " && ".join(doc["command"] for doc in docs)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="the first one chooses the rates")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--val-fraction", type=float, default=0.3)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR/f"{NAME}.json")
    parser.add_argument("--lrs", type=float, nargs="+", help="only these rates of the grid")
    parser.add_argument("--merge", type=Path, nargs="+", help="join these JSON files of partial runs into --out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.merge:
        docs = [json.loads(p.read_text()) for p in args.merge]
        results, command = merge(docs)
        args.seeds = docs[0]["seeds"]
    else:
        results = run(tuple(args.seeds), tuple(args.arms), args.max_steps, args.val_fraction, args.lrs)
        command = "python experiments/finetune_selection.py" + "".join(
            f" {a!r}" if " " in a else f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    doc = experiment_record(command, args.seeds, results)
    save_result(args.out, doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
