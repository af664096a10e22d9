"""GPT-2 style vs each modern piece alone vs all of them, on character-level TinyShakespeare (chapter 12).

Tiny models (2 layers, d_model 64, 4 heads, context 64), the same steps, batches and seeds for every variant. Each
variant's d_ff is chosen so that its parameter count is the nearest to the GPT-2 baseline's (SwiGLU starts from
d_ff = 8/3·d_model; rotary drops the learned position table and GQA halves the key/value heads, so their MLPs widen a
little to make up for it). Records the final validation loss (nats per
character) and the training speed (tokens/s, 1 thread) per seed. A second, short run at a high learning rate tracks
the largest attention logit |q·k|/√d_head with and without QK-norm.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python experiments/modern_ablation.py [--steps 300] [--seeds 0 1 2]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from transformerbook.data import RESULTS_DIR, experiment_record, save_result
from transformerbook.lm_head import GPT, GPTConfig, eval_mode
from transformerbook.training import TrainConfig, get_batch, load_dataset, train

BASE = GPTConfig(vocab_size=65, context_length=64, d_model=64, n_heads=4, n_layers=2, dropout=0.0)
VARIANTS = {  # name -> the switches changed from GPT-2 (BASE)
    "gpt2": {},
    "rmsnorm": {"normalization": "rms"},
    "rotary": {"positional": "rotary"},
    "swiglu": {"activation": "swiglu", "d_ff": 8 * 64 // 3},
    "gqa": {"n_kv_heads": 2},
    "qk_norm": {"qk_norm": True},
    "no_bias": {"bias": False},
    "all": {"normalization": "rms", "positional": "rotary", "activation": "swiglu", "d_ff": 8 * 64 // 3,
            "n_kv_heads": 2, "qk_norm": True, "bias": False},
}


def n_params(model_cfg: GPTConfig) -> int:
    "Parameters of GPT(model_cfg), counted without allocating the weights."
    with torch.device("meta"): return GPT(model_cfg).n_params()


def matched_config(name: str) -> GPTConfig:
    "BASE with the variant's switches and the d_ff whose parameter count is the nearest to BASE's."
    model_cfg = replace(BASE, **VARIANTS[name])
    target, start = n_params(BASE), model_cfg.d_ff
    return min((replace(model_cfg, d_ff=f) for f in range(start - 40, start + 41)),
               key=lambda c: abs(n_params(c) - target))


def run_variant(name: str, seed: int, steps: int, data) -> dict:
    "Train one variant for `steps` steps; its final validation loss, parameter count and training tokens/s."
    _, train_ids, val_ids = data
    model_cfg = matched_config(name)
    train_cfg = TrainConfig(max_iters=steps, batch_size=12, learning_rate=3e-3, min_lr=3e-4,
                            warmup_iters=min(50, steps), eval_interval=steps, eval_iters=20, seed=seed)
    torch.manual_seed(seed)
    model = GPT(model_cfg)
    start = time.perf_counter()
    history = train(model, train_ids, val_ids, train_cfg, progress=False)
    seconds = time.perf_counter() - start
    return {"val_loss": history.val_loss[-1], "train_loss": history.train_loss[-1], "n_params": model.n_params(),
            "d_ff": model_cfg.d_ff, "tokens_per_s": steps * train_cfg.batch_size * model_cfg.context_length / seconds}


def max_logit_run(qk_norm: bool, seed: int, steps: int, lr: float, data) -> list[float]:
    """Largest |q·k|/√d_head over all layers, heads and pairs (before the causal mask) of a fixed probe batch, every 10
    steps of a run with a constant high learning rate (AdamW, no clipping, no weight decay). The scores are read at
    each attention layer's observation point `attn.scores` (chapter 3)."""
    _, train_ids, val_ids = data
    model_cfg = replace(BASE, qk_norm=qk_norm)
    torch.manual_seed(seed)
    model = GPT(model_cfg)
    probe = torch.stack([train_ids[i:i + 64] for i in range(0, 64 * 8, 64)])  # (8, 64) fixed windows
    seen: list[float] = []
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)  # constant lr, no clipping
    gen, curve = torch.Generator().manual_seed(seed), []
    for step in range(steps + 1):
        if step % 10 == 0:
            hooks = [block.attn.scores.register_forward_hook(lambda m, args, s: seen.append(s.abs().max().item()))
                     for block in model.blocks]  # (B, H, T, T) scaled scores of each layer
            try:
                with torch.no_grad(), eval_mode(model): model(probe)
            finally:
                for hook in hooks: hook.remove()
            curve.append(max(seen))
            seen.clear()
        if step == steps: break
        token_ids, targets = get_batch(train_ids, 12, model_cfg.context_length, gen)  # (B, T), (B, T)
        loss = F.cross_entropy(model(token_ids).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return curve


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--logit-steps", type=int, default=200, help="steps of the high-learning-rate QK-norm run")
    parser.add_argument("--logit-lr", type=float, default=3e-2, help="its constant learning rate")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "modern_ablation.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = load_dataset("tinyshakespeare", "char")
    results = {"variants": {name: VARIANTS[name] for name in args.variants}, "runs": {}, "max_logit": {}}
    run_variant("gpt2", 0, 20, data)  # warm-up (allocator, kernels), so the first variant's tokens/s is not penalised
    for name in args.variants:
        results["runs"][name] = [run_variant(name, seed, args.steps, data) for seed in args.seeds]
        print(name, [round(r["val_loss"], 4) for r in results["runs"][name]], flush=True)
    for qk in (False, True):
        results["max_logit"]["qk_norm" if qk else "plain"] = max_logit_run(qk, args.seeds[0], args.logit_steps,
                                                                           args.logit_lr, data)
    results.update(steps=args.steps, logit_steps=args.logit_steps, logit_lr=args.logit_lr, base=BASE.to_dict())
    out = experiment_record("python experiments/modern_ablation.py " + " ".join(argv if argv is not None else
                                                                               sys.argv[1:]), args.seeds, results)
    save_result(args.out, out)  # atomic: a killed run leaves the old file
    return out


if __name__ == "__main__":
    main()
