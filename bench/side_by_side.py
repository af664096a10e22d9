"""The book's `transformerbook train` against nanoGPT's `train.py` on the same recipe, each as a whole process, in
turns (A B A B ...): wall and CPU seconds, every validation loss each prints, the best one and its step, and the
ratios pair by pair (issue 27; bench/README.md, "Training"). No peer runs in the same process here: the two are
separate programs, and what is compared is what a reader waits for, start-up, data and compilation included.

    # the baby GPT on one CPU thread (the CLI's defaults against nanoGPT's README settings for a CPU)
    python bench/side_by_side.py --nanogpt PATH/TO/nanoGPT --pairs 2
    # the GPU recipe (chapter 08b): gpu-shakespeare-char against config/train_shakespeare_char.py, bf16, compiled
    python bench/side_by_side.py --nanogpt PATH/TO/nanoGPT --gpu --pairs 1
    # the same with the book's step replayed as CUDA graphs (nanoGPT's command unchanged)
    python bench/side_by_side.py --nanogpt PATH/TO/nanoGPT --gpu --compile-mode reduce-overhead

`--nanogpt` is a checkout of github.com/karpathy/nanoGPT. Its `data/shakespeare_char/` is prepared with nanoGPT's
own `prepare.py` from the book's copy of TinyShakespeare when the .bin files are missing (not timed). nanoGPT's
`train.py` defaults to `bias=False`; the baby GPT has GPT-2's biases, so on the CPU it gets `--bias=True` (its GPU
config keeps nanoGPT's own settings, which the book's preset copies: no biases, exact GELU, since 2026-11-27).
`--compile-mode` is passed to the book's command only (torch.compile's mode; nanoGPT's `train.py` has no such
option). `--max-iters N` shortens both runs alike (a trial of the script, not a comparison of quality).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

EVAL_LINE = re.compile(r"^step ([\d,]+): train loss ([\d.]+)[^,]*, val loss ([\d.]+)", re.M)

BABY_NANOGPT = ["--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                "--lr_decay_iters=2000", "--dropout=0.0", "--bias=True"]


def evaluations(log: str) -> list[tuple[int, float, float]]:
    """(step, train loss, val loss) of every evaluation line a run printed. Both programs print
    `step N: train loss X, val loss Y` (the book adds bits per byte in brackets; its closing summary line repeats
    the last evaluation and is dropped)."""
    seen, out = set(), []
    for step, tr, va in EVAL_LINE.findall(log):
        key = int(step.replace(",", ""))
        if key not in seen:
            seen.add(key)
            out.append((key, float(tr), float(va)))
    return out


def commands(args, out: Path) -> tuple[list[str], list[str], dict]:
    "The book's command, nanoGPT's, and the environment both run in."
    book = [sys.executable, "-m", "transformerbook", "train", "--out", str(out / "book"), "--force", "--no-progress"]
    nano = [sys.executable, "train.py", "config/train_shakespeare_char.py", f"--out_dir={out / 'nanogpt'}"]
    env = dict(os.environ)
    if args.gpu:
        book += ["--preset", "gpu-shakespeare-char", "--device", "cuda", "--dtype", "bfloat16", "--compile"]
        if getattr(args, "compile_mode", None): book += ["--compile-mode", args.compile_mode]
        nano += ["--device=cuda", "--dtype=bfloat16", "--compile=True"]
    else:
        env["OMP_NUM_THREADS"] = "1"
        nano += BABY_NANOGPT
    if args.max_iters is not None:
        book += ["--max-iters", str(args.max_iters), "--lr-decay-iters", str(args.max_iters)]
        nano += [f"--max_iters={args.max_iters}", f"--lr_decay_iters={args.max_iters}"]
    return book, nano, env


def timed(cmd: list[str], cwd: Path, env: dict, log: Path) -> dict:
    "Run `cmd` to its end; wall and CPU seconds (its own and its children's), its exit status and evaluations."
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    evals = evaluations(log.read_text(errors="replace"))
    best = min(evals, key=lambda e: e[2]) if evals else None
    return {"rc": rc, "wall_s": round(wall, 2), "cpu_s": round(after.ru_utime - before.ru_utime +
                                                               after.ru_stime - before.ru_stime, 2),
            "best_val": best and best[2], "best_step": best and best[0], "evals": evals, "log": str(log)}


def prepare_nanogpt_data(nanogpt: Path) -> None:
    "nanoGPT's `prepare.py` on the book's copy of TinyShakespeare, once (nanoGPT downloads it only when it is absent)."
    folder = nanogpt / "data" / "shakespeare_char"
    if (folder / "train.bin").exists() and (folder / "val.bin").exists(): return
    from transformerbook.data import data_path
    shutil.copyfile(data_path("tinyshakespeare.txt"), folder / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nanogpt", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    ap.add_argument("--gpu", action="store_true", help="the GPU recipe (gpu-shakespeare-char, bf16, compiled)")
    ap.add_argument("--pairs", type=int, default=1, help="book/nanoGPT pairs, run in turns")
    ap.add_argument("--max-iters", type=int, default=None, help="shorten both runs (a trial of the script)")
    ap.add_argument("--compile-mode", default=None, help="with --gpu: torch.compile's mode for the book's run")
    ap.add_argument("--out", type=Path, default=Path("side_by_side_out"), help="logs, checkpoints and results.json")
    args = ap.parse_args(argv)
    if not (args.nanogpt / "train.py").exists(): ap.error(f"--nanogpt {args.nanogpt}: no train.py there")
    if args.pairs < 1: ap.error(f"--pairs={args.pairs} must be >= 1")
    if args.compile_mode and not args.gpu: ap.error(f"--compile-mode={args.compile_mode} needs --gpu")
    if args.max_iters is not None and args.max_iters < 1: ap.error(f"--max-iters={args.max_iters} must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    prepare_nanogpt_data(args.nanogpt)
    book, nano, env = commands(args, args.out.resolve())
    runs = []
    for i in range(args.pairs):
        a = timed(book, Path.cwd(), env, args.out / f"book_{i}.log")
        b = timed(nano, args.nanogpt, env, args.out / f"nanogpt_{i}.log")
        runs.append({"book": a, "nanogpt": b})
        print(f"pair {i + 1}: book {a['wall_s']:.1f} s wall, {a['cpu_s']:.1f} s CPU, best val {a['best_val']} "
              f"(step {a['best_step']}), exit {a['rc']}; nanoGPT {b['wall_s']:.1f} s wall, {b['cpu_s']:.1f} s CPU, "
              f"best val {b['best_val']} (step {b['best_step']}), exit {b['rc']}", flush=True)
    ratio = {k: statistics.median(r["book"][k] / r["nanogpt"][k] for r in runs) for k in ("wall_s", "cpu_s")}
    result = {"command": " ".join(sys.argv), "book_cmd": book, "nanogpt_cmd": nano, "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if args.gpu else "cpu", "date": time.strftime("%Y-%m-%d"),
              "runs": runs, "median_ratio": ratio}
    (args.out / "results.json").write_text(json.dumps(result, indent=1))
    print(f"book / nanoGPT, median over {args.pairs} pair(s): wall {ratio['wall_s']:.3f}, CPU {ratio['cpu_s']:.3f}; "
          f"best val loss {runs[-1]['book']['best_val']} vs {runs[-1]['nanogpt']['best_val']}")
    return 0 if all(r[k]["rc"] == 0 for r in runs for k in r) else 1


if __name__ == "__main__":
    sys.exit(main())
