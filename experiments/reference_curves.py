"""Reference curves for "is my loss normal?": validation loss by step for each documented preset, over several seeds.

Writes `transformerbook/results/reference_curves.json`; the chapter 08b plots it and `transformerbook train` compares
each evaluation with the band (the smallest and largest seed) of its preset. Each seed is one full run of the preset
through `training.train` (the CLI's code path), evaluated every `--eval-interval` steps.

    python experiments/reference_curves.py --presets baby-gpt-char --seeds 1337 1 2

A finished (preset, seed) is kept in the JSON and skipped on the next call, so an interrupted sweep continues.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import torch

from transformerbook.data import RESULTS_DIR
from transformerbook.lm_head import GPT
from transformerbook.training import load_dataset, preset_configs, train

NAME = "reference_curves"


def run_one(preset: str, seed: int, eval_interval: int) -> dict:
    model_cfg, train_cfg = preset_configs(preset, seed=seed, eval_interval=eval_interval)
    tokenizer = "gpt2" if model_cfg.vocab_size > 256 else "char"
    tok, train_ids, val_ids = load_dataset("tinyshakespeare", tokenizer)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    history = train(GPT(model_cfg), train_ids, val_ids, train_cfg, progress=False)
    return {"steps": history.steps, "val_loss": history.val_loss, "train_loss": history.train_loss,
            "seconds": round(time.perf_counter() - t0, 1)}


def summarise(runs: dict) -> dict:
    "Median and band (min, max over seeds) of the validation loss at each evaluated step."
    curves = list(runs.values())
    steps = curves[0]["steps"]
    cols = [[c["val_loss"][i] for c in curves] for i in range(len(steps))]
    return {"steps": steps, "median": [statistics.median(c) for c in cols], "low": [min(c) for c in cols],
            "high": [max(c) for c in cols]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["baby-gpt-char", "bpe-gpt2", "gpu-shakespeare-char-cpu"])
    p.add_argument("--seeds", nargs="+", type=int, default=[1337, 1, 2])
    p.add_argument("--eval-interval", type=int, default=125)
    args = p.parse_args(argv)
    path = RESULTS_DIR/f"{NAME}.json"
    data = json.loads(path.read_text()) if path.is_file() else {"results": {}}
    torch.set_num_threads(1)
    for preset in args.presets:
        entry = data["results"].setdefault(preset, {"runs": {}})
        for seed in args.seeds:
            if str(seed) in entry["runs"]: continue
            print(f"{preset} seed {seed} ...", file=sys.stderr, flush=True)
            entry["runs"][str(seed)] = run_one(preset, seed, args.eval_interval)
            entry.update(summarise(entry["runs"]), eval_interval=args.eval_interval)
            seeds = sorted({int(s) for e in data["results"].values() for s in e["runs"]})
            data.update(command="python experiments/reference_curves.py " + " ".join(sys.argv[1:]), seeds=seeds,
                        created=datetime.date.today().isoformat())
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            tmp.replace(path)
            last = entry["runs"][str(seed)]
            print(f"  final val loss {last['val_loss'][-1]:.4f} in {last['seconds']} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
