"""Chapter 9's L(N) sweep: the five GPTs of `scaling.SWEEP` (about 13 thousand to 0.8 million non-embedding
parameters), each trained on the same 1.15M characters of TinyShakespeare with `scaling.sweep_train_cfg`, with their
N, D, exact training FLOPs C and final losses; and the slice that tests/test_scaling.py re-runs (the smallest model
for `SLICE_STEPS` steps, its schedule compressed into them).

    python experiments/scaling_sweep.py      # writes transformerbook/results/scaling_sweep.json (396 s on 2 cores)

Every run goes through `scaling.scaling_run`, so it is trained once and cached: a second call reads the checkpoints,
and an interrupted sweep resumes where it stopped. The runs are seeded (`TrainConfig.seed`) and use one torch thread.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

from transformerbook.data import RESULTS_DIR, experiment_record, save_result
from transformerbook.scaling import SWEEP, scaling_run, sweep_model_cfg, sweep_train_cfg

NAME = "scaling_sweep"
SLICE_STEPS = 300


def slice_train_cfg():
    "`sweep_train_cfg` over `SLICE_STEPS` steps: the same warm-up, the cosine decay compressed into the shorter run."
    return replace(sweep_train_cfg, max_iters=SLICE_STEPS, lr_decay_iters=SLICE_STEPS, eval_interval=SLICE_STEPS)


def run_one(shape: tuple, train_cfg) -> dict:
    "One model of the sweep: `scaling_run`'s N, D, C and losses, with its shape and its `GPTConfig.to_dict()`."
    model_cfg = sweep_model_cfg(*shape)
    return {"shape": list(shape), "model": model_cfg.to_dict(), **scaling_run(model_cfg, train_cfg)}


def run() -> dict:
    runs = []
    for shape in SWEEP:
        runs.append(run_one(shape, sweep_train_cfg))
        print(f"{shape}: N = {runs[-1]['n_params']:,}, val {runs[-1]['val_loss']:.4f}", file=sys.stderr)
    return {"train_config": sweep_train_cfg.to_dict(), "runs": runs,
            "slice": {"train_config": slice_train_cfg().to_dict(), **run_one(SWEEP[0], slice_train_cfg())}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / f"{NAME}.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = run()
    record = experiment_record("python experiments/scaling_sweep.py" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
                               [sweep_train_cfg.seed], results)
    save_result(args.out, record)  # atomic: a killed run leaves the old file
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
