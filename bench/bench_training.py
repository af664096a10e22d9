"""Training throughput of nanoGPT's baby GPT on character-level TinyShakespeare, measured in one process for three
models with the same architecture and the same training step: the book's from-scratch code, the book's model with
torch's fused kernels (`GPTConfig(fused=True)`, the training path), and Hugging Face's `GPT2LMHeadModel` (the peer).

    python bench/bench_training.py                   # 100 timed steps per variant (after 10 warm-up steps)
    python bench/bench_training.py --full            # the whole 2000-step anchor run (fused), with its validation loss
    python bench/bench_training.py --seeds 1 2 3     # the anchor once per seed: how much the final loss varies by seed
    python bench/bench_training.py --seeds 1 2 --peer  # ... and Hugging Face's GPT-2 trained the same way, same seeds

Every call also times one AdamW step over the baby GPT's parameters two ways: torch's fused kernel (what
`configure_optimizer` uses) against the per-parameter loop that `torch.optim.AdamW` runs on a CPU by default.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.training import (baby_gpt_configs, configure_optimizer, get_batch, load_dataset, lr_at, train)


class HFPeer(nn.Module):
    """Hugging Face's GPT-2 built with a `GPTConfig`'s sizes (learned positions, pre-norm, tanh GELU, biases, tied
    embeddings, GPT-2's initialisation), returning logits like `GPT`, so the book's `train` loop can train it."""
    def __init__(self, model_cfg: GPTConfig):
        super().__init__()
        self.config = model_cfg  # `train` reads model_cfg.context_length
        self.hf = GPT2LMHeadModel(GPT2Config(
            vocab_size=model_cfg.vocab_size, n_positions=model_cfg.context_length, n_embd=model_cfg.d_model,
            n_layer=model_cfg.n_layers, n_head=model_cfg.n_heads, n_inner=model_cfg.d_ff,
            activation_function="gelu_new",
            resid_pdrop=model_cfg.dropout, embd_pdrop=model_cfg.dropout, attn_pdrop=model_cfg.dropout,
            layer_norm_epsilon=model_cfg.norm_eps, tie_word_embeddings=model_cfg.tie_weights,
            bos_token_id=None, eos_token_id=None,  # GPT-2's 50256 is outside a character vocabulary
            attn_implementation="sdpa"))  # torch's fused attention, like the book's fused path

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.hf(token_ids).logits


def build(kind: str, model_cfg: GPTConfig) -> nn.Module:
    "kind: 'book' (from-scratch code), 'fused' (the training path) or 'hf' (Hugging Face's GPT-2)."
    if kind == "hf": return HFPeer(model_cfg)
    return GPT(GPTConfig(**{**model_cfg.to_dict(), "fused": kind == "fused"}))


def steps_per_second(kind: str, model_cfg: GPTConfig, train_cfg, train_ids, n_steps: int, warmup: int = 10) -> float:
    "Optimizer steps per second of the training loop's inner step (batch, forward, loss, backward, clip, AdamW)."
    torch.manual_seed(0)
    model = build(kind, model_cfg).train()
    opt = configure_optimizer(model, train_cfg)
    gen = torch.Generator().manual_seed(0)
    T = model_cfg.context_length
    for i in range(warmup + n_steps):
        if i == warmup: start = time.perf_counter()
        for g in opt.param_groups: g["lr"] = lr_at(i, train_cfg)
        token_ids, targets = get_batch(train_ids, train_cfg.batch_size, T, gen)
        loss = F.cross_entropy(model(token_ids).flatten(0, 1), targets.flatten())
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
    token_ids, targets = ids[:n * T].view(n, T), ids[1:n * T + 1].view(n, T)  # (n, T) windows, shifted targets
    model.eval()
    total = sum(F.cross_entropy(model(token_ids[i:i + batch_size]).flatten(0, 1), targets[i:i + batch_size].flatten(),
                                reduction="sum").item() for i in range(0, n, batch_size))
    return total / (n * T)


def seed_sweep(seeds: list[int], train_ids, val_ids, vocab_size: int, kinds: tuple = ("fused",)) -> None:
    """Train the anchor once per seed and model kind (same seed: same batches); print the 20-batch estimate nanoGPT
    reports and the exact whole-split loss, then each kind's mean and spread."""
    results = {kind: ([], []) for kind in kinds}
    for seed in seeds:
        for kind in kinds:
            model_cfg, train_cfg = baby_gpt_configs(vocab_size, seed=seed)
            torch.manual_seed(seed)
            model = build(kind, model_cfg)
            start = time.perf_counter()
            history = train(model, train_ids, val_ids, train_cfg, progress=False)
            finals, fulls = results[kind]
            finals.append(history.val_loss[-1])
            fulls.append(full_split_loss(model, val_ids))
            print(f"  {kind:5s} seed {seed:5d}: val loss {finals[-1]:.4f} (20 batches), {fulls[-1]:.4f} (whole split), "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    for kind, (finals, fulls) in results.items():
        for name, xs in (("20-batch estimate", finals), ("whole split", fulls)):
            t = torch.tensor(xs)
            std = t.std().item() if len(xs) > 1 else float("nan")
            print(f"  {kind:5s} {name}: mean {t.mean().item():.4f}, std {std:.4f}, min {t.min().item():.4f}, "
                  f"max {t.max().item():.4f} over {len(xs)} seeds (nanoGPT reports 1.88 from one run)")


def adamw_step_ms(model_cfg: GPTConfig, train_cfg, fused: bool, repeats: int = 7, steps: int = 20) -> float:
    "Median milliseconds of one AdamW step over GPT(model_cfg)'s parameters (random gradients), fused or not."
    torch.manual_seed(0)
    model = GPT(model_cfg)
    for p in model.parameters(): p.grad = torch.randn_like(p)
    groups = configure_optimizer(model, train_cfg).param_groups
    opt = torch.optim.AdamW([{k: v for k, v in g.items() if k in ("params", "weight_decay")} for g in groups],
                            lr=train_cfg.learning_rate, betas=(train_cfg.beta1, train_cfg.beta2), fused=fused,
                            foreach=False if not fused else None)
    times = []
    for _ in range(repeats + 1):  # the first round warms up (allocates the moments)
        start = time.perf_counter()
        for _ in range(steps): opt.step()
        times.append((time.perf_counter() - start) / steps * 1e3)
    return sorted(times[1:])[len(times[1:]) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="timed steps per variant")
    ap.add_argument("--full", action="store_true", help="also run the full 2000-step anchor and report its time")
    ap.add_argument("--seeds", type=int, nargs="+", help="train the full anchor once per seed and compare final losses")
    ap.add_argument("--peer", action="store_true", help="with --seeds: also train Hugging Face's GPT-2 on each seed")
    args = ap.parse_args()
    tok, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    model_cfg, train_cfg = baby_gpt_configs(tok.vocab_size)
    tokens_per_step = train_cfg.batch_size * model_cfg.context_length
    print(f"baby GPT: {GPT(model_cfg).n_params() / 1e6:.2f}M parameters, {tokens_per_step} tokens/step, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rates = {}
    names = {"book": "book code", "fused": "fused kernels", "hf": "HF GPT-2"}
    for kind, name in names.items():
        rates[kind] = steps_per_second(kind, model_cfg, train_cfg, train_ids, args.steps)
        print(f"  {name:14s} {rates[kind]:7.2f} steps/s  {rates[kind] * tokens_per_step:9.0f} tokens/s  "
              f"(2000 steps ≈ {2000 / rates[kind]:.0f} s)", flush=True)
    print(f"  ratios: fused / book {rates['fused'] / rates['book']:.2f}x, "
          f"fused / HF GPT-2 {rates['fused'] / rates['hf']:.2f}x")
    loop, fused = (adamw_step_ms(model_cfg, train_cfg, f) for f in (False, True))
    print(f"  AdamW step: per-parameter loop {loop:.2f} ms, fused kernel {fused:.2f} ms: {loop / fused:.2f}x faster")
    if args.full:
        torch.manual_seed(train_cfg.seed)
        model = GPT(model_cfg)
        start = time.perf_counter()
        history = train(model, train_ids, val_ids, train_cfg, progress=False)
        seconds = time.perf_counter() - start
        print(f"  full anchor run: {seconds:.0f} s wall, "
              f"{train_cfg.max_iters * tokens_per_step / seconds:.0f} tokens/s, "
              f"final val loss {history.val_loss[-1]:.4f} (nanoGPT 1.88)")
    if args.seeds:
        seed_sweep(args.seeds, train_ids, val_ids, tok.vocab_size, ("fused", "hf") if args.peer else ("fused",))


if __name__ == "__main__":
    main()
