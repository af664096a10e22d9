"""Where the time of one training step goes, on the current device (issue 27): the step split into data, forward,
backward, optimizer and host waits, tokens/s and MFU from the book's own FLOP count (`scale.model_flops_per_token`),
the host reads per step of `training.train` (counted, not timed), and the wall time of `train` and of one evaluation.

    python bench/bench_step.py                                   # baby GPT on the CPU (one thread)
    python bench/bench_step.py --preset gpu-shakespeare-char --device cuda --dtype bfloat16 --compile --peak-tflops 989

The phase split synchronizes the device between phases (on a GPU that itself costs time: the split says where the
work is, the un-split `train` wall time says what a run costs). "host wait" is the time `loss.item()` blocks for.
On a CPU every operation finishes before Python goes on, so a host read costs only its own call; on a GPU it waits
for every queued kernel and leaves the GPU idle while Python prepares the next step.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from transformerbook.lm_head import GPT
from transformerbook.scale import count_host_reads, matmul_peak_flops, mfu, model_flops_per_token
from transformerbook.training import (configure_optimizer, estimate_loss, get_batch, load_dataset, lr_at,
                                      preset_configs, train)


def _sync(device: torch.device) -> None:
    if device.type == "cuda": torch.cuda.synchronize(device)


def _tick(device: torch.device) -> float:
    "The time once the device has finished its queued work."
    _sync(device)
    return time.perf_counter()


def phase_split(model_cfg, train_cfg, train_ids, device, n_steps: int, warmup: int) -> dict:
    "Median milliseconds per phase of one step (device synchronized between phases), over `n_steps` after `warmup`."
    torch.manual_seed(0)
    model = GPT(model_cfg).to(device).train()
    step_model = torch.compile(model) if train_cfg.compile else model
    opt = configure_optimizer(model, train_cfg)
    gen = torch.Generator().manual_seed(0)
    T = model_cfg.context_length
    ac = torch.autocast(device.type, dtype=getattr(torch, train_cfg.dtype), enabled=train_cfg.dtype != "float32")
    times = {k: [] for k in ("data", "forward", "backward", "optimizer", "host wait", "step")}
    for i in range(warmup + n_steps):
        t0 = _tick(device)
        token_ids, targets = get_batch(train_ids, train_cfg.batch_size, T, gen)
        token_ids, targets = token_ids.to(device), targets.to(device)
        t1 = _tick(device)
        with ac:
            loss = F.cross_entropy(step_model(token_ids).flatten(0, 1).float(), targets.flatten())
        t2 = _tick(device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = _tick(device)
        for g in opt.param_groups: g["lr"] = lr_at(i, train_cfg)
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        opt.step()
        t4 = _tick(device)
        loss.item()
        t5 = time.perf_counter()
        if i >= warmup:
            for k, (a, b) in {"data": (t0, t1), "forward": (t1, t2), "backward": (t2, t3), "optimizer": (t3, t4),
                              "host wait": (t4, t5), "step": (t0, t5)}.items():
                times[k].append((b - a) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def train_wall(model_cfg, train_cfg, train_ids, val_ids, device, n_steps: int) -> tuple:
    """(seconds of `train` for `n_steps` steps with one evaluation at the end, seconds of that evaluation alone,
    host reads per step, host reads of one evaluation, the count by caller)."""
    from dataclasses import replace
    train_cfg = replace(train_cfg, max_iters=n_steps, lr_decay_iters=n_steps, warmup_iters=min(train_cfg.warmup_iters,
                  n_steps // 10), eval_interval=n_steps)
    torch.manual_seed(0)
    model = GPT(model_cfg).to(device)
    with count_host_reads() as counts:
        start = _tick(device)
        history = train(model, train_ids, val_ids, train_cfg, progress=False)
        wall = _tick(device) - start
    with count_host_reads() as eval_counts:
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=getattr(torch, train_cfg.dtype), enabled=train_cfg.dtype != "float32"):
            estimate_loss(model, {"train": train_ids, "val": val_ids}, train_cfg.batch_size, train_cfg.eval_iters)
        eval_s = _tick(device) - start
    n_eval_reads = sum(eval_counts.values())
    per_step = (sum(counts.values()) - 2 * n_eval_reads) / n_steps  # train evaluates at step 0 and at the end
    return wall, eval_s, per_step, n_eval_reads, counts, history


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="baby-gpt-char")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=100, help="timed steps of the phase split")
    ap.add_argument("--train-steps", type=int, default=200, help="steps of the timed `train` run")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="the device's peak for the dtype (datasheet); default: a measured float32 matmul")
    args = ap.parse_args()
    device = torch.device(args.device)
    tok, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    model_cfg, train_cfg = preset_configs(args.preset)
    from dataclasses import replace
    train_cfg = replace(train_cfg, dtype=args.dtype, compile=args.compile)
    tokens_per_step = train_cfg.batch_size * model_cfg.context_length
    fpt = model_flops_per_token(model_cfg)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else matmul_peak_flops(device=device)
    print(f"{args.preset}: {GPT(model_cfg).n_params() / 1e6:.2f}M parameters, {tokens_per_step} tokens/step, "
          f"{fpt / 1e6:.2f} MFLOP/token; {device} "
          f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"{args.dtype}{', compiled' if args.compile else ''}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; peak {peak / 1e12:.3f} TFLOP/s "
          f"({'datasheet' if args.peak_tflops else 'measured float32 matmul'})")
    ms = phase_split(model_cfg, train_cfg, train_ids, device, args.steps, warmup=10)
    tps = tokens_per_step / (ms["step"] / 1e3)
    print("phase split (median ms per step): " + ", ".join(f"{k} {v:.2f}" for k, v in ms.items())
          + f"; {tps:,.0f} tokens/s, MFU {mfu(tps, fpt, peak):.1%}")
    wall, eval_s, per_step, n_eval_reads, counts, history = train_wall(model_cfg, train_cfg, train_ids, val_ids,
                                                                        device, args.train_steps)
    tps = tokens_per_step * args.train_steps / (wall - 2 * eval_s)
    print(f"train(): {args.train_steps} steps in {wall:.2f} s with 2 evaluations of {eval_s:.2f} s each; "
          f"{tps:,.0f} tokens/s between evaluations, MFU {mfu(tps, fpt, peak):.1%}; "
          f"val loss {history.val_loss[-1]:.4f}")
    print(f"host reads: {per_step:.2f} per training step, {n_eval_reads} per evaluation; by caller: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
