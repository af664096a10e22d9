"""Where the book's GPU step loses to nanoGPT's, measured in one process (issue 27). The recipe's model is built by the
book (its `gpu-shakespeare-char` preset) and by nanoGPT's own `model.py` (as its `train.py` builds it: no biases, exact
GELU), each compiled and trained by the same bare loop (bf16 autocast, the float32 cross-entropy, backward,
`clip_grad_norm_`, fused AdamW) on the same batches, already on the device; then the book's model once more through the
book's whole `training.train_step` (host-side id checks, pinned copies, the on-device finiteness switch). Printed:
milliseconds per step (the device synchronized only at the ends of each block of steps; blocks of the models in turns,
the median block), the ratios to nanoGPT, and per model a `torch.profiler` summary: CUDA kernel time per step, the
GPU's busy fraction, kernel launches, and the top kernels. Two more of the book's models on request:
`--with-biases` (GPT-2's biases and tanh GELU, the preset before 2026-11-27) and `--cudagraphs` (compiled with
`mode="reduce-overhead"`: forward and backward replayed as CUDA graphs, one launch each).

    python bench/bench_step_peer.py --nanogpt .peers/nanoGPT --device cuda --dtype bfloat16 --compile --cudagraphs
    python bench/bench_step_peer.py --nanogpt .peers/nanoGPT --preset baby-gpt-char --steps 5 --blocks 1   # a trial

`--nanogpt` is a checkout of github.com/karpathy/nanoGPT (only its `model.py` is imported). With `--out DIR` each
model's profiler table is written to DIR/profile_<name>.txt and the figures to DIR/step_peer.json.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from transformerbook.lm_head import GPT
from transformerbook.training import configure_optimizer, get_batch, load_dataset, preset_configs, train_step


def nanogpt_model(path: Path, model_cfg, bias: bool):
    "nanoGPT's `GPT` from `path/model.py`, configured as the book's `model_cfg` (nanoGPT's names)."
    spec = importlib.util.spec_from_file_location("nanogpt_model", path / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.GPTConfig(block_size=model_cfg.context_length, vocab_size=model_cfg.vocab_size,
                           n_layer=model_cfg.n_layers, n_head=model_cfg.n_heads, n_embd=model_cfg.d_model,
                           dropout=model_cfg.dropout, bias=bias)
    return module.GPT(cfg)


def bare_step(model, compiled, opt, autocast, x, y, nano: bool, clip: float, graphs: bool = False):
    """One step of the loop every model gets: forward, the float32 cross-entropy, backward, clipping, AdamW. `graphs`:
    the model replays CUDA graphs, and a new step must be marked before its forward."""
    if graphs: torch.compiler.cudagraph_mark_step_begin()
    with autocast:
        if nano: loss = compiled(x, y)[1]
        else: loss = F.cross_entropy(compiled(x).flatten(0, 1).float(), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanogpt", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    ap.add_argument("--preset", default="gpu-shakespeare-char")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=50, help="steps per timed block")
    ap.add_argument("--blocks", type=int, default=3, help="timed blocks per model, the models in turns")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation)")
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--with-biases", action="store_true", help="also the book's model with GPT-2's biases, tanh GELU")
    ap.add_argument("--cudagraphs", action="store_true", help="also the book's model compiled for CUDA graphs")
    args = ap.parse_args()
    if not (args.nanogpt / "model.py").exists(): ap.error(f"--nanogpt {args.nanogpt}: no model.py there")
    if args.cudagraphs and not (args.compile and args.device.startswith("cuda")):
        ap.error("--cudagraphs needs --compile and a CUDA --device")
    if min(args.steps, args.blocks, args.profile_steps) < 1 or args.warmup < 0:
        ap.error("--steps, --blocks and --profile-steps must be >= 1, --warmup >= 0")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # as nanoGPT's train.py
    _, train_ids, _ = load_dataset("tinyshakespeare", "char")
    model_cfg, train_cfg = preset_configs(args.preset)
    train_cfg = replace(train_cfg, dtype=args.dtype, compile=args.compile)
    autocast = torch.autocast(device.type, dtype=getattr(torch, args.dtype), enabled=args.dtype != "float32")
    gen = torch.Generator().manual_seed(0)
    B, T = train_cfg.batch_size, model_cfg.context_length
    batches = [tuple(t.contiguous().to(device) for t in get_batch(train_ids, B, T, gen)) for _ in range(8)]
    host_batches = [get_batch(train_ids, B, T, gen) for _ in range(8)]

    builds = {"book": lambda: GPT(model_cfg)}
    if args.with_biases: builds["book, biases"] = lambda: GPT(replace(model_cfg, bias=True, activation="gelu_tanh"))
    if args.cudagraphs: builds["book, CUDA graphs"] = lambda: GPT(model_cfg)
    builds["nanoGPT"] = lambda: nanogpt_model(args.nanogpt, model_cfg, bias=model_cfg.bias)
    models = {}  # name -> (model, what the loop calls, its optimizer, nanoGPT's call, CUDA graphs)
    for name, build in builds.items():
        torch.manual_seed(0)
        model = build().to(device).train()
        graphs = name == "book, CUDA graphs"
        compiled = torch.compile(model, mode="reduce-overhead" if graphs else None) if args.compile else model
        models[name] = (model, compiled, configure_optimizer(model, train_cfg), name == "nanoGPT", graphs)
    book_model, book_compiled, book_opt, _, _ = models["book"]

    def run(name: str, n: int, offset: int = 0) -> None:
        if name == "book train_step":
            for i in range(n):
                x, y = host_batches[(offset + i) % len(host_batches)]
                train_step(book_compiled, book_opt, x, y, train_cfg, train_cfg.learning_rate)
            return
        model, compiled, opt, nano, graphs = models[name]
        for i in range(n):
            x, y = batches[(offset + i) % len(batches)]
            bare_step(model, compiled, opt, autocast, x, y, nano, train_cfg.grad_clip, graphs)

    def sync() -> None:
        if device.type == "cuda": torch.cuda.synchronize(device)

    names = [*models, "book train_step"]
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{args.preset} (bias={model_cfg.bias}, {model_cfg.activation}); {device} ({card}), "
          f"{args.dtype}{', compiled' if args.compile else ''}; torch {torch.__version__}; "
          f"{train_cfg.batch_size * model_cfg.context_length} tokens/step", flush=True)
    for name in list(names):
        t0 = time.perf_counter()
        try:
            run(name, args.warmup)
            sync()
        except Exception as e:  # an experimental variant that fails is reported and left out, the others go on
            if name in ("book", "nanoGPT", "book train_step"): raise
            print(f"  {name} failed, left out: {type(e).__name__}: {str(e)[:300]}", flush=True)
            names.remove(name)
            continue
        print(f"  warm-up of {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    ms = {name: [] for name in names}
    for b in range(args.blocks):
        for name in names:
            sync()
            t0 = time.perf_counter()
            run(name, args.steps, offset=b)
            sync()
            ms[name].append((time.perf_counter() - t0) / args.steps * 1e3)
    median = {name: statistics.median(v) for name, v in ms.items()}
    for name in names:
        print(f"{name:18} {median[name]:7.2f} ms/step  ({median[name] / median['nanoGPT']:.3f} x nanoGPT; blocks "
              + ", ".join(f"{v:.2f}" for v in ms[name]) + ")", flush=True)

    profiles = {}
    for name in names:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        sync()
        t0 = time.perf_counter()
        with profile(activities=activities) as prof:
            run(name, args.profile_steps)
            sync()
        wall_ms = (time.perf_counter() - t0) / args.profile_steps * 1e3
        averages = prof.key_averages()
        kernels = sorted((e for e in averages if e.device_type == DeviceType.CUDA),
                         key=lambda e: -e.self_device_time_total)
        kernel_ms = sum(e.self_device_time_total for e in kernels) / 1e3 / args.profile_steps
        launches = sum(e.count for e in kernels) / args.profile_steps
        top = [(e.key[:90], round(e.self_device_time_total / 1e3 / args.profile_steps, 3),
                e.count // args.profile_steps) for e in kernels[:12]]
        profiles[name] = {"wall_ms": round(wall_ms, 3), "kernel_ms": round(kernel_ms, 3),
                          "kernels_per_step": launches, "top": top}
        busy = f", GPU busy {kernel_ms / wall_ms:.0%}" if device.type == "cuda" else ""
        print(f"profile {name}: {wall_ms:.2f} ms/step under the profiler, kernels {kernel_ms:.2f} ms/step "
              f"({launches:.0f} launches){busy}", flush=True)
        for key, kms, count in top[:8]:
            print(f"    {kms:7.3f} ms  x{count:<4} {key}")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
            (args.out / f"profile_{re.sub(r'[^A-Za-z0-9]+', '_', name)}.txt").write_text(
                averages.table(sort_by=sort, row_limit=40, max_name_column_width=90))
    if args.out:
        (args.out / "step_peer.json").write_text(json.dumps(
            {"command": " ".join(sys.argv), "torch": torch.__version__, "ms_per_step": ms, "median": median,
             "profiles": profiles}, indent=1))


if __name__ == "__main__":
    main()
