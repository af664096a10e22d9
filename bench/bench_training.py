"""Training throughput of nanoGPT's baby GPT on character-level TinyShakespeare, with the book's attention and with
torch's fused scaled_dot_product_attention, measured in the same run.

    python bench/bench_training.py               # 100 timed steps per variant (after 10 warm-up steps)
    python bench/bench_training.py --full        # the whole 2000-step anchor run (fused), with its validation loss
    python bench/bench_training.py --seeds 1 2 3 # the anchor once per seed: how much the final loss varies by seed
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.training import (baby_gpt_configs, configure_optimizer, get_batch, load_dataset, lr_at, train)


def steps_per_second(model_cfg: GPTConfig, train_cfg, train_ids, n_steps: int, warmup: int = 10) -> float:
    "Optimizer steps per second of the training loop's inner step (batch, forward, loss, backward, clip, AdamW)."
    torch.manual_seed(0)
    model = GPT(model_cfg).train()
    opt = configure_optimizer(model, train_cfg)
    gen = torch.Generator().manual_seed(0)
    T = model_cfg.context_length
    for i in range(warmup + n_steps):
        if i == warmup: start = time.perf_counter()
        for g in opt.param_groups: g["lr"] = lr_at(i, train_cfg)
        x, y = get_batch(train_ids, train_cfg.batch_size, T, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        opt.step()
    return n_steps / (time.perf_counter() - start)


@torch.no_grad()
def full_split_loss(model: GPT, ids: torch.Tensor, batch_size: int = 256) -> float:
    "Mean next-token loss (nats) over every non-overlapping window of a split: no sampling noise."
    T = model.config.context_length
    n = (len(ids) - 1) // T
    x, y = ids[:n * T].view(n, T), ids[1:n * T + 1].view(n, T)  # (n, T) windows and their shifted targets
    model.eval()
    total = sum(F.cross_entropy(model(x[i:i + batch_size]).flatten(0, 1), y[i:i + batch_size].flatten(),
                                reduction="sum").item() for i in range(0, n, batch_size))
    return total / (n * T)


def seed_sweep(seeds: list[int], train_ids, val_ids, vocab_size: int) -> None:
    "Train the anchor once per seed; print the 20-batch estimate nanoGPT reports and the exact full-split loss."
    finals, fulls = [], []
    for seed in seeds:
        model_cfg, train_cfg = baby_gpt_configs(vocab_size, seed=seed)
        torch.manual_seed(seed)
        model = GPT(model_cfg)
        history = train(model, train_ids, val_ids, train_cfg, progress=False)
        finals.append(history.val_loss[-1])
        fulls.append(full_split_loss(model, val_ids))
        print(f"  seed {seed:5d}: val loss {finals[-1]:.4f} (20 batches), {fulls[-1]:.4f} (whole split)")
    for name, xs in (("20-batch estimate", finals), ("whole split", fulls)):
        t = torch.tensor(xs)
        std = t.std().item() if len(xs) > 1 else float("nan")
        print(f"  {name}: mean {t.mean().item():.4f}, std {std:.4f}, min {t.min().item():.4f}, max {t.max().item():.4f} "
              f"over {len(xs)} seeds (nanoGPT reports 1.88 from one run)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="timed steps per variant")
    ap.add_argument("--full", action="store_true", help="also run the full 2000-step anchor and report its time")
    ap.add_argument("--seeds", type=int, nargs="+", help="train the full anchor once per seed and compare final losses")
    args = ap.parse_args()
    tok, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    model_cfg, train_cfg = baby_gpt_configs(tok.vocab_size)
    tokens_per_step = train_cfg.batch_size * model_cfg.context_length
    print(f"baby GPT: {GPT(model_cfg).n_params() / 1e6:.2f}M parameters, {tokens_per_step} tokens/step, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rates = {}
    for name, fused in (("book attention", False), ("fused SDPA", True)):
        rates[name] = steps_per_second(GPTConfig(**{**model_cfg.to_dict(), "fused_attention": fused}), train_cfg,
                                       train_ids, args.steps)
        print(f"  {name:15s} {rates[name]:7.2f} steps/s  {rates[name] * tokens_per_step:9.0f} tokens/s  "
              f"(2000 steps ≈ {2000 / rates[name]:.0f} s)")
    print(f"  ratio fused / book: {rates['fused SDPA'] / rates['book attention']:.2f}x")
    if args.full:
        torch.manual_seed(train_cfg.seed)
        model = GPT(model_cfg)
        start = time.perf_counter()
        history = train(model, train_ids, val_ids, train_cfg, progress=False)
        seconds = time.perf_counter() - start
        print(f"  full anchor run: {seconds:.0f} s wall, {train_cfg.max_iters * tokens_per_step / seconds:.0f} tokens/s, "
              f"final val loss {history.val_loss[-1]:.4f} (nanoGPT 1.88)")


    if args.seeds:
        seed_sweep(args.seeds, train_ids, val_ids, tok.vocab_size)


if __name__ == "__main__":
    main()
