"""Time the book's attention and multi-head attention against PyTorch's fused kernels, in the same process.

    python bench/bench_attention.py              # default sweep: well under a minute on 2 cores
    python bench/bench_attention.py --T 128 1024 --threads 2 --min-run-time 0.5

For each sequence length T it times, on identical inputs and with a causal mask:

- `transformerbook.attention.scaled_dot_product_attention` vs `torch.nn.functional.scaled_dot_product_attention`;
- `transformerbook.multihead.MultiHeadAttention` vs `torch.nn.MultiheadAttention` with copied weights (eval mode,
  need_weights=False, so torch may take its fused fast path).

It prints median times from `torch.utils.benchmark` and the ratio book / torch (> 1: the book is slower). Outputs are
compared before timing so that a faster-but-wrong kernel cannot win. This is a benchmark, not a test: the numbers
depend on the machine and its load.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import benchmark

from common import measure
from transformerbook.attention import scaled_dot_product_attention
from transformerbook.masking import causal_mask
from transformerbook.multihead import MultiHeadAttention


def to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    "nn.MultiheadAttention with the same weights (in_proj_weight stacks [W_Q; W_K; W_V])."
    theirs = nn.MultiheadAttention(mha.d_model, mha.n_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        theirs.out_proj.load_state_dict(mha.out_proj.state_dict())
    return theirs.eval()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--T", type=int, nargs="+", default=[128, 512, 1024], help="sequence lengths")
    ap.add_argument("--batch", type=int, default=1, help="batch size B")
    ap.add_argument("--d-model", type=int, default=256, help="model width D")
    ap.add_argument("--n-heads", type=int, default=4, help="number of heads H")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per measurement")
    ap.add_argument("--min-run-time", type=float, default=0.2, help="seconds per measurement")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    B, D, H = args.batch, args.d_model, args.n_heads
    mha = MultiHeadAttention(D, H).eval()
    theirs = to_torch(mha)
    rows, results = [], []
    with torch.inference_mode():
        for T in args.T:
            x = torch.randn(B, T, D)
            q, k, v = (torch.randn(B, H, T, D // H) for _ in range(3))
            mask = causal_mask(T)
            not_mask = ~mask  # nn.MultiheadAttention: True = NOT allowed
            torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask),
                                       F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
            torch.testing.assert_close(mha(x, mask=mask), theirs(x, x, x, attn_mask=not_mask, need_weights=False)[0],
                                       atol=1e-4, rtol=1e-4)
            env = dict(book_sdpa=scaled_dot_product_attention, F=F, q=q, k=k, v=v, mask=mask, not_mask=not_mask,
                       mha=mha, theirs=theirs, x=x)
            pairs = {
                "attention (B, H, T, Dh)": ("book_sdpa(q, k, v, mask)",
                                            "F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
                "multi-head (B, T, D)": ("mha(x, mask=mask)",
                                         "theirs(x, x, x, attn_mask=not_mask, need_weights=False)"),
            }
            for what, (book_stmt, torch_stmt) in pairs.items():
                m_book = measure(book_stmt, env, args.threads, args.min_run_time, what, f"T={T}", "book")
                m_torch = measure(torch_stmt, env, args.threads, args.min_run_time, what, f"T={T}", "torch")
                results += [m_book, m_torch]
                rows.append((what, T, m_book.median * 1e3, m_torch.median * 1e3))

    print(f"B={B}, d_model={D}, n_heads={H}, causal mask, float32, {args.threads} thread(s), torch {torch.__version__}")
    print(f"{'':24} {'T':>6} {'book ms':>10} {'torch ms':>10} {'book/torch':>11}")
    for what, T, book_ms, torch_ms in rows:
        print(f"{what:24} {T:>6} {book_ms:10.3f} {torch_ms:10.3f} {book_ms / torch_ms:10.2f}x")
    print()
    benchmark.Compare(results).print()


if __name__ == "__main__":
    main()
