"""Tokens/s and MFU of the baby GPT's training step on this machine: float32, bfloat16 autocast, torch.compile, and
1 vs 2 data-parallel processes (gloo). Writes `transformerbook/results/scale_throughput.json` (chapter 08b's table).

Each setting runs `training.train` for `--steps` steps and times every step (between successive batch draws); the
median step time after `--skip` steps (compilation, warm-up) gives tokens/s, robust to other jobs on a shared machine.
The settings are run `--repeats` times in turn; each row keeps every pass's tokens/s and their median.
MFU is relative to the best float32 matmul rate measured here (the same contention applies to both). A control row
times the bare step of chapter 08b's live cell (forward, backward, AdamW on one fixed batch, no `train` around it) in
the same process right after the first row, so the two ways of timing can be compared under nearly the same load; the
highest 1-minute load average at the end of a row's timing (over the passes), and the load at the start and end of the
run, are saved beside the rows (on a machine shared with other jobs, they say how quiet the measurements were). So
are the CPU's model and whether it has bfloat16 instructions (AVX512-BF16, AMX-BF16): without them autocast's bfloat16
matrix products run far slower than float32's, so the bfloat16 row says little without it. The book's build
machines differ from day to day, so the file keeps one run per kind of CPU (model name, instruction sets and torch
version): a run replaces the entry of its own kind and leaves the others, and chapter 08b sets them side by side.

    python experiments/scale_throughput.py --steps 40 --skip 10
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from transformerbook.data import RESULTS_DIR, experiment_record, machine_record, save_result
from transformerbook.lm_head import GPT
from transformerbook.scale import matmul_peak_flops, mfu, model_flops_per_token
from transformerbook.training import baby_gpt_configs, get_batch, load_dataset, train

NAME = "scale_throughput"


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


def settings_once(steps: int, skip: int) -> dict:
    "One pass over the settings, in the table's order: {setting: (median seconds per step, load average after it)}."
    def timed(times): return statistics.median(times[skip:]), os.getloadavg()[0]
    out = {"float32, 1 process": timed(step_times(steps)),
           "float32, 1 process, bare step": timed(bare_step_times(steps))}  # the control, right after the first row
    for setting, kw in (("bfloat16 autocast, 1 process", {"dtype": "bfloat16"}),
                        ("float32 compiled, 1 process", {"compile": True})):
        out[setting] = timed(step_times(steps, **kw))
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(2, tmp, steps), nprocs=2, join=True, start_method="spawn")
        out["float32, 2 processes (gloo)"] = timed(json.loads(Path(tmp, "times.json").read_text()))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--skip", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3, help="passes over all the settings, one after another")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.skip < 0 or args.steps <= args.skip + 1:
        p.error(f"need --repeats >= 1 and --steps > --skip + 1 >= 1 (timed steps to take a median of); got "
                f"--repeats {args.repeats}, --steps {args.steps}, --skip {args.skip}")
    torch.set_num_threads(1)
    model_cfg, train_cfg = baby_gpt_configs()
    tokens_per_step = train_cfg.batch_size * model_cfg.context_length
    flops = model_flops_per_token(model_cfg)
    load_before = os.getloadavg()[0]
    peak = matmul_peak_flops(1024, repeats=20)
    passes = []
    for i in range(args.repeats):
        passes.append(settings_once(args.steps, args.skip))
        print(f"pass {i + 1}:", {s: round(tokens_per_step / t) for s, (t, _) in passes[-1].items()}, file=sys.stderr)
    rows = []
    for setting in passes[0]:
        each = [round(tokens_per_step / one[setting][0], 1) for one in passes]
        tps = statistics.median(each)
        rows.append({"setting": setting, "tokens_per_s": tps, "mfu": round(mfu(tps, flops, peak), 4),
                     "load_average": round(max(one[setting][1] for one in passes), 2), "tokens_per_s_repeats": each})
    command = "python experiments/scale_throughput.py " + " ".join(sys.argv[1:] if argv is None else argv)
    run = {"created": datetime.date.today().isoformat(), "command": command, "machine": machine_record(),
           "threads_per_process": 1, "peak_flops": peak, "flops_per_token": flops, "tokens_per_step": tokens_per_step,
           "steps": args.steps, "skipped": args.skip, "repeats": args.repeats, "rows": rows,
           "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    path = RESULTS_DIR/f"{NAME}.json"
    earlier = json.loads(path.read_text())["results"]["machines"] if path.is_file() else []
    save_result(path, experiment_record(command, [1337], {"machines": merge_run(earlier, run)}))


def machine_kind(run: dict) -> tuple:
    "What makes two runs comparable: the CPU's model name and instruction sets, and the torch build."
    machine = run["machine"]
    return machine["cpu_model"], tuple(machine["instruction_sets"]), machine["torch"]


def merge_run(earlier: list, run: dict) -> list:
    "The runs to keep: `run` in place of an earlier run on the same kind of machine, after the others otherwise."
    kept = [r for r in earlier if machine_kind(r) != machine_kind(run)]
    same = [i for i, r in enumerate(earlier) if machine_kind(r) == machine_kind(run)]
    return kept[:same[0]] + [run] + kept[same[0]:] if same else kept + [run]


if __name__ == "__main__":
    main()
