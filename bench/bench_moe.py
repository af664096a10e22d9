"""Time the book's `MoEFeedForward` against Hugging Face's `MixtralSparseMoeBlock` with the same weights, in the same
process.

    python bench/bench_moe.py                      # default sweep: well under a minute on 2 cores
    python bench/bench_moe.py --tokens 256 2048 --n-experts 8 --top-k 2 --threads 2

For each number of tokens N (one sequence of N tokens) it times the forward pass (inference mode) and the forward +
backward pass of both layers, SwiGLU experts without biases, on identical inputs. Hugging Face's experts run with
`--hf-impl` (default "eager": its loop over the experts with `index_add_`; transformers 5 also offers fused kernels
such as "grouped_mm" or "batched_mm" where the installed version and device support them).

It prints median times from `torch.utils.benchmark` and the ratio book / HF (> 1: the book is slower). Outputs are
compared before timing so that a faster-but-wrong layer cannot win. This is a benchmark, not a test: the numbers
depend on the machine and its load.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils import benchmark

from common import measure
from transformerbook.moe import MoEFeedForward, copy_to_mixtral


def hf_block(moe: MoEFeedForward, impl: str) -> nn.Module:
    "A transformers `MixtralSparseMoeBlock` holding `moe`'s weights, its experts run by implementation `impl`."
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    hf_config = MixtralConfig(hidden_size=moe.d_model, intermediate_size=moe.d_ff, num_local_experts=moe.n_experts,
                           num_experts_per_tok=moe.top_k)
    hf_config._experts_implementation = impl
    return copy_to_mixtral(moe, MixtralSparseMoeBlock(hf_config))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[64, 512, 2048], help="tokens N per call (B=1, T=N)")
    ap.add_argument("--d-model", type=int, default=256, help="model width D")
    ap.add_argument("--d-ff", type=int, default=512, help="expert width F")
    ap.add_argument("--n-experts", type=int, default=8, help="experts E")
    ap.add_argument("--top-k", type=int, default=2, help="experts per token K")
    ap.add_argument("--hf-impl", default="eager", help="transformers experts implementation (eager, grouped_mm, ...)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per measurement")
    ap.add_argument("--min-run-time", type=float, default=0.2, help="seconds per measurement")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    ours = MoEFeedForward(args.d_model, args.d_ff, args.n_experts, args.top_k)
    theirs = hf_block(ours, args.hf_impl)
    results, rows = [], []
    for n in args.tokens:
        x = torch.randn(1, n, args.d_model)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)
        x_grad = x.clone().requires_grad_()
        env = dict(ours=ours, theirs=theirs, x=x, x_grad=x_grad, torch=torch)
        pairs = {
            "forward": ("with torch.inference_mode(): ours(x)", "with torch.inference_mode(): theirs(x)"),
            "forward + backward": ("ours(x_grad).sum().backward()", "theirs(x_grad).sum().backward()"),
        }
        for what, (book_stmt, hf_stmt) in pairs.items():
            label = f"MoE E={args.n_experts} K={args.top_k} D={args.d_model} F={args.d_ff}"
            m_book = measure(book_stmt, env, args.threads, args.min_run_time, label, f"N={n} {what}", "book")
            m_hf = measure(hf_stmt, env, args.threads, args.min_run_time, label, f"N={n} {what}", f"HF {args.hf_impl}")
            results += [m_book, m_hf]
            rows.append((n, what, m_book.median * 1e3, m_hf.median * 1e3))
    benchmark.Compare(results).print()
    print(f"{'N':>6}  {'pass':<20} {'book ms':>9} {'HF ms':>9} {'book / HF':>10}")
    for n, what, book_ms, hf_ms in rows:
        print(f"{n:>6}  {what:<20} {book_ms:>9.3f} {hf_ms:>9.3f} {book_ms / hf_ms:>10.2f}")


if __name__ == "__main__":
    main()
