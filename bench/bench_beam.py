"""Beam search speed: the KV cache's speed-up, and tokens/s against Hugging Face `generate(num_beams=K)`, for a
GPT-2-style and a Llama-style model (the same small random models as `bench_generate.py`, loaded into the book's `GPT`
with `pretrained.from_pretrained`, so both libraries run the same weights).

`sampling.beam_search` is timed with the cache (one new token per beam per step; the default) and without it
(`use_kv_cache=False`: the whole window of every beam at every step), on the book's own attention ("ours") and with
`fused=True` ("fused"), against `generate(num_beams=K, do_sample=False)`. No EOS, so every search runs exactly
`new tokens` steps (Hugging Face with `min_new_tokens` set). Tokens/s counts the tokens of the returned sequence;
every ratio compares two measurements taken in this run. Not a test.

    .venv/bin/python bench/bench_beam.py [--threads N] [--repeats R] [--models gpt2 llama] [--new-tokens 32 128]
                                         [--num-beams K]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).parent))
from bench_generate import best_times, build_models  # noqa: E402

from transformerbook.sampling import beam_search  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (all contenders in turn); best is kept")
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"], choices=["gpt2", "llama"])
    parser.add_argument("--new-tokens", nargs="+", type=int, default=[32, 128], help="lengths to time")
    parser.add_argument("--num-beams", type=int, default=4, help="K")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    K = args.num_beams
    for kind in args.models:
        hf, ours, fused = build_models(kind)
        V = ours.config.vocab_size
        prompt = torch.randint(0, V, (1, 16), generator=torch.Generator().manual_seed(1))
        hf_beam = lambda n: hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                        min_new_tokens=n, num_beams=K, do_sample=False, pad_token_id=0)[0]
        print(f"\n{kind}-style: 4 layers, d_model 128, vocab {V:,}; prompt 16 tokens; beam search K={K}; "
              f"{args.threads} thread(s), best of {args.repeats}")
        print(f"{'new tokens':>10} | {'cached tok/s':>12} | {'uncached tok/s':>14} | {'cache speed-up':>14} | "
              f"{'fused tok/s':>11} | {'HF tok/s':>8} | {'cached / HF':>11} | {'fused / HF':>10} | same tokens")
        for n in args.new_tokens:
            with torch.no_grad():
                mine, theirs = beam_search(ours, prompt[0], n, K)[0], hf_beam(n)
                same = torch.equal(mine, theirs) and torch.equal(beam_search(ours, prompt[0], n, K,
                                                                             use_kv_cache=False)[0], theirs)
                t = best_times({"cached": lambda: beam_search(ours, prompt[0], n, K),
                                "plain": lambda: beam_search(ours, prompt[0], n, K, use_kv_cache=False),
                                "fused": lambda: beam_search(fused, prompt[0], n, K),
                                "hf": lambda: hf_beam(n)}, args.repeats)
            print(f"{n:>10} | {n / t['cached']:>12.0f} | {n / t['plain']:>14.0f} | {t['plain'] / t['cached']:>13.1f}x"
                  f" | {n / t['fused']:>11.0f} | {n / t['hf']:>8.0f} | {t['hf'] / t['cached']:>10.2f}x | "
                  f"{t['hf'] / t['fused']:>9.2f}x | {same}")


if __name__ == "__main__":
    main()
