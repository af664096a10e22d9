"""Reference curves for "is my loss normal?": validation loss by step for each documented preset, over several seeds.

Writes `transformerbook/results/reference_curves.json`; the chapter 08b plots it and `transformerbook train` compares
each evaluation with the band (the smallest and largest seed) of its preset. Each seed is one full run of the preset
through `training.train` (the CLI's code path), evaluated every `--eval-interval` steps.

    python experiments/reference_curves.py --presets baby-gpt-char --seeds 1337 1 2
    python experiments/reference_curves.py --presets bpe-gpt2 --seeds 1337 1 2
    python experiments/reference_curves.py --presets gpu-shakespeare-char-cpu --seeds 1337

The names are those of `RUNS`: a preset of `training.PRESETS` and the settings changed from it. Two of them are the
presets unchanged; "gpu-shakespeare-char-cpu" is the GPU recipe's model and code path at a size two CPU cores
finish in minutes (see `RUNS`), the stand-in the chapter shows while the book has no GPU to run the recipe itself.

Each entry records the command that made it, its preset, its overrides, its model (`GPTConfig.to_dict()`) and its
date. A finished (name, seed) is kept in the JSON and skipped on the next call, so an interrupted sweep continues;
an entry whose recorded model is not the preset's model now is measured again (entries made before the model was
recorded are kept as they are).
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import torch

from transformerbook.data import RESULTS_DIR, save_result
from transformerbook.lm_head import GPT
from transformerbook.training import load_dataset, preset_configs, train

NAME = "reference_curves"

# name -> (preset, the settings changed from it). The GPU recipe (6 layers, d_model 384, context 256, batch 64,
# dropout 0.2, 5,000 steps: about 9e15 FLOPs with its evaluations) is out of reach of two CPU cores, which compute
# a few hundred of its tokens per second. "gpu-shakespeare-char-cpu" keeps its model, data, optimizer, dropout and
# code path and shrinks the work about 1,800-fold, to a few minutes on one core: 4 windows per step instead of 64,
# 60 steps with the warm-up and the cosine compressed into them, evaluations of 4 batches of 4 windows (instead of 200
# of 64) every 20 steps.
RUNS = {
    "baby-gpt-char": ("baby-gpt-char", {}),
    "bpe-gpt2": ("bpe-gpt2", {}),
    "gpu-shakespeare-char-cpu": ("gpu-shakespeare-char", dict(batch_size=4, max_iters=60, lr_decay_iters=60,
                                                              warmup_iters=6, eval_interval=20, eval_iters=4)),
}
DEFAULT_EVAL_INTERVAL = 125  # for the runs whose overrides do not set one


def run_configs(name: str, seed: int, eval_interval: int | None = None) -> tuple:
    """(model_cfg, train_cfg, tokenizer) of the run `name` of `RUNS` with this seed. `ValueError` for an unknown name.
    `eval_interval`, when given, replaces the run's own (its overrides', else `DEFAULT_EVAL_INTERVAL`)."""
    if name not in RUNS: raise ValueError(f"unknown run {name!r}; known: {list(RUNS)}")
    preset, overrides = RUNS[name]
    overrides = {"eval_interval": DEFAULT_EVAL_INTERVAL, **overrides, "seed": seed}
    if eval_interval is not None: overrides["eval_interval"] = eval_interval
    model_cfg, train_cfg = preset_configs(preset, **overrides)
    return model_cfg, train_cfg, "gpt2" if model_cfg.vocab_size > 256 else "char"


def run_one(name: str, seed: int, eval_interval: int | None = None) -> dict:
    model_cfg, train_cfg, tokenizer = run_configs(name, seed, eval_interval)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=list(RUNS), choices=list(RUNS), metavar="NAME",
                   help=f"runs of RUNS: {', '.join(RUNS)} (default all)")
    p.add_argument("--seeds", nargs="+", type=int, default=[1337, 1, 2])
    p.add_argument("--eval-interval", type=int, default=None,
                   help=f"evaluate every N steps (default: the run's own, else {DEFAULT_EVAL_INTERVAL})")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    path = RESULTS_DIR/f"{NAME}.json"
    data = json.loads(path.read_text()) if path.is_file() else {"results": {}}
    torch.set_num_threads(1)
    command = "python experiments/reference_curves.py " + " ".join(sys.argv[1:] if argv is None else argv)
    for name in args.presets:
        preset, overrides = RUNS[name]
        entry = data["results"].setdefault(name, {"runs": {}})
        model = run_configs(name, args.seeds[0])[0].to_dict()
        if entry.get("model", model) != model:  # the preset's model changed since: its old curves no longer apply
            print(f"{name}: the preset's model changed, its {len(entry['runs'])} seed(s) are measured again",
                  file=sys.stderr, flush=True)
            entry = data["results"][name] = {"runs": {}}
        for seed in args.seeds:
            if str(seed) in entry["runs"]: continue
            print(f"{name} seed {seed} ...", file=sys.stderr, flush=True)
            entry["runs"][str(seed)] = run_one(name, seed, args.eval_interval)
            train_cfg = run_configs(name, seed, args.eval_interval)[1]
            entry.update(summarise(entry["runs"]), eval_interval=train_cfg.eval_interval, preset=preset,
                         overrides=overrides, model=model, command=command, created=datetime.date.today().isoformat())
            # the file's own command, seeds and date: every entry's command, all seeds, the latest date
            data.update(command=" ; ".join(dict.fromkeys(e["command"] for e in data["results"].values())),
                        seeds=sorted({int(s) for e in data["results"].values() for s in e["runs"]}),
                        created=datetime.date.today().isoformat())
            save_result(path, data)  # after every seed, atomically: a killed run keeps the seeds already done
            last = entry["runs"][str(seed)]
            print(f"  final val loss {last['val_loss'][-1]:.4f} in {last['seconds']} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
