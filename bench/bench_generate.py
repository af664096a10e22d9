"""Generation speed: the KV cache's speed-up, and tokens/s against Hugging Face `GPT2LMHeadModel.generate`.

A small random GPT-2-shaped model (4 layers, d_model 128, context 1024, GPT-2's vocabulary) is built in Hugging Face,
saved, and loaded into the book's `GPT` with `GPT.from_pretrained`, so both libraries run the same weights. Greedy
decoding is timed for 64, 256 and 512 new tokens after a 16-token prompt; every result is printed as a ratio of two
measurements taken in this run (absolute numbers depend on the machine and its load). Not a test.

    .venv/bin/python bench/bench_generate.py [--threads N] [--repeats R]
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from transformerbook.lm_head import GPT
from transformerbook.sampling import generate

NEW_TOKENS = (64, 256, 512)


def best_time(fn, repeats: int) -> float:
    "Smallest wall-clock time of `repeats` calls, in seconds (the least disturbed by other processes)."
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def build_models(seed: int = 0) -> tuple[GPT2LMHeadModel, GPT]:
    "A random HF GPT-2 (4 layers, 4 heads, d_model 128) and the book's GPT loaded from its saved folder."
    torch.manual_seed(seed)
    hf_cfg = GPT2Config(n_layer=4, n_head=4, n_embd=128, n_positions=1024, vocab_size=50257,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    hf = GPT2LMHeadModel(hf_cfg).eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = GPT.from_pretrained(folder, local_files_only=True).eval()
    return hf, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for a model this small)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per measurement; the best is kept")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf, ours = build_models()
    prompt = torch.randint(0, 50257, (1, 16), generator=torch.Generator().manual_seed(1))
    print(f"model: 4 layers, d_model 128, vocab 50257, {ours.n_params():,} parameters; prompt 16 tokens; greedy; "
          f"{args.threads} thread(s), best of {args.repeats}")
    print(f"{'new tokens':>10} | {'ours cached tok/s':>17} | {'cache speed-up':>14} | {'HF tok/s':>9} | "
          f"{'ours / HF':>9} | same tokens")
    for n in NEW_TOKENS:
        with torch.no_grad():
            out_cached = generate(ours, prompt, n, temperature=0)
            out_hf = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, use_cache=True, pad_token_id=0)
        t_cached = best_time(lambda: generate(ours, prompt, n, temperature=0, use_kv_cache=True), args.repeats)
        t_plain = best_time(lambda: generate(ours, prompt, n, temperature=0, use_kv_cache=False), args.repeats)
        t_hf = best_time(lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                             min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0),
                         args.repeats)
        same = torch.equal(out_cached, out_hf)
        print(f"{n:>10} | {n / t_cached:>17.0f} | {t_plain / t_cached:>13.1f}x | {n / t_hf:>9.0f} | "
              f"{t_hf / t_cached:>8.2f}x | {same}")


if __name__ == "__main__":
    main()
