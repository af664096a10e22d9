"""Tokens/s and MFU of the baby GPT's training step on this machine: float32, bfloat16 autocast, torch.compile, and
1 vs 2 data-parallel processes (gloo). Writes `transformerbook/results/scale_throughput.json` (chapter 08b's table).

Each setting runs `training.train` for `--steps` steps and times every step (between successive batch draws); the
median step time after `--skip` steps (compilation, warm-up) gives tokens/s, robust to other jobs on a shared machine.
MFU is relative to the best float32 matmul rate measured here (the same contention applies to both). A control row
times the bare step of chapter 08b's live cell (forward, backward, AdamW on one fixed batch, no `train` around it) in
the same process right after the first row, so the two ways of timing can be compared under nearly the same load; the
1-minute load average when each row's timing ended, and at the start and end of the run, is saved beside the rows (on a
machine shared with other jobs, it says how quiet each measurement was). So is the CPU's model and whether it has
bfloat16 instructions (AVX512-BF16, AMX-BF16): without them autocast's bfloat16 matrix products run far slower than
float32's (10x on the AMD EPYC of 2026-11-28), with them about as fast, so the bfloat16 row says little without it.

    python experiments/scale_throughput.py --steps 40 --skip 10
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from transformerbook.data import RESULTS_DIR, experiment_record, save_result
from transformerbook.lm_head import GPT
from transformerbook.scale import matmul_peak_flops, mfu, model_flops_per_token
from transformerbook.training import baby_gpt_configs, get_batch, load_dataset, train

NAME = "scale_throughput"


def cpu() -> dict:
    "The CPU's model name and which of its vector and bfloat16 instruction sets torch can use, from /proc/cpuinfo."
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return {"model": platform.processor() or "unknown", "bf16_instructions": None, "instruction_sets": []}
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = next((set(line.split(":", 1)[1].split()) for line in info.splitlines() if line.startswith("flags")), set())
    return {"model": model or "unknown", "bf16_instructions": bool(flags & {"avx512_bf16", "amx_bf16"}),
            "instruction_sets": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})}


def step_times(steps: int, **overrides) -> list:
    "Seconds of each training step: the time between successive batch draws."
    model_cfg, train_cfg = baby_gpt_configs(max_iters=steps, eval_interval=steps, eval_iters=1, **overrides)
    _, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    stamps = []
    def timed_batch(*a):
        stamps.append(time.perf_counter())
        return get_batch(*a)
    torch.manual_seed(0)
    train(GPT(model_cfg), train_ids, val_ids, train_cfg, progress=False, batch_fn=timed_batch)
    return [b - a for a, b in zip(stamps, stamps[1:])]


def bare_step_times(steps: int) -> list:
    "Seconds of each bare step (forward, backward, AdamW on one fixed batch): what chapter 08b's live cell times."
    import torch.nn.functional as F
    from transformerbook.training import configure_optimizer
    model_cfg, train_cfg = baby_gpt_configs()
    _, train_ids, _ = load_dataset("tinyshakespeare", "char")
    torch.manual_seed(0)
    model = GPT(model_cfg)
    optimizer = configure_optimizer(model, train_cfg)
    token_ids, targets = get_batch(train_ids, train_cfg.batch_size, model_cfg.context_length,
                                   torch.Generator().manual_seed(0))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        F.cross_entropy(model(token_ids).flatten(0, 1), targets.flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times


def _worker(rank, world, tmp, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rdzv", rank=rank, world_size=world)
    try:
        times = step_times(steps)
        if rank == 0: Path(tmp, "times.json").write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--skip", type=int, default=10)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model_cfg, train_cfg = baby_gpt_configs()
    tokens_per_step = train_cfg.batch_size * model_cfg.context_length
    flops = model_flops_per_token(model_cfg)
    load_before = os.getloadavg()[0]
    peak = matmul_peak_flops(1024, repeats=20)
    rows = []
    def add(setting, times, load):
        tps = tokens_per_step / statistics.median(times[args.skip:])
        rows.append({"setting": setting, "tokens_per_s": round(tps, 1), "mfu": round(mfu(tps, flops, peak), 4),
                     "load_average": round(load, 2)})
        print(rows[-1], file=sys.stderr, flush=True)
    add("float32, 1 process", step_times(args.steps), os.getloadavg()[0])
    add("float32, 1 process, bare step", bare_step_times(args.steps), os.getloadavg()[0])  # the control, right after
    for setting, kw in (("bfloat16 autocast, 1 process", {"dtype": "bfloat16"}),
                        ("float32 compiled, 1 process", {"compile": True})):
        add(setting, step_times(args.steps, **kw), os.getloadavg()[0])
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(2, tmp, args.steps), nprocs=2, join=True, start_method="spawn")
        add("float32, 2 processes (gloo)", json.loads(Path(tmp, "times.json").read_text()), os.getloadavg()[0])
    result = experiment_record(
        "python experiments/scale_throughput.py " + " ".join(sys.argv[1:]), [1337],
        {"machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
                    "1 thread per process, shared with other jobs", "cpu": cpu(),
         "peak_flops": peak, "flops_per_token": flops, "tokens_per_step": tokens_per_step, "steps": args.steps,
         "skipped": args.skip, "rows": rows, "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
    save_result(RESULTS_DIR/f"{NAME}.json", result)


if __name__ == "__main__":
    main()
