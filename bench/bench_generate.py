"""Generation speed: the KV cache's speed-up, and tokens/s against Hugging Face `generate`, for a GPT-2-style and a
Llama-style model.

Each small random model (4 layers, d_model 128, context 1024) is built in Hugging Face (`GPT2LMHeadModel` with GPT-2's
vocabulary; `LlamaForCausalLM` with 4 query heads, 2 key/value heads, SwiGLU, RMSNorm and rotary positions, vocabulary
32,000), saved, and loaded into the book's `GPT` with `pretrained.from_pretrained` (which reads either kind),
so both libraries run the same weights. "ours" is that model as loaded (the book's own attention and LayerNorm code);
"ours, fused" is the same weights with `fused=True` (torch's attention and LayerNorm kernels), which is what inference
should use. Greedy decoding is timed for 64, 256 and 512 new tokens after a 16-token prompt; every result is printed as
a ratio of two measurements taken in this run (absolute numbers depend on the machine and its load). Not a test.

    .venv/bin/python bench/bench_generate.py [--threads N] [--repeats R] [--models gpt2 llama] [--new-tokens 64 256]
                                             [--no-plain] [--profile]

`--no-plain` leaves out generation without the cache (the slowest contender; its column then shows "-"). Where the
time goes, before and after the KV cache was pre-allocated and the decode loop stopped checking its inputs at every
step, is written up in `bench/README.md`.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from transformerbook.lm_head import GPT
from transformerbook.pretrained import from_pretrained
from transformerbook.sampling import generate, kv_cache_bytes

NEW_TOKENS = (64, 256, 512)


def best_times(fns: dict, repeats: int) -> dict:
    """Smallest wall-clock time of each callable over `repeats` rounds, in seconds. The callables take turns within a
    round, so a change in the machine's load affects all of them alike instead of whichever ran during it."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: min(ts) for name, ts in times.items()}


def build_models(kind: str, seed: int = 0) -> tuple[torch.nn.Module, GPT, GPT]:
    "A random HF model, the book's GPT loaded from its saved folder, and the same weights with fused kernels."
    torch.manual_seed(seed)
    if kind == "gpt2":
        hf = GPT2LMHeadModel(GPT2Config(n_layer=4, n_head=4, n_embd=128, n_positions=1024, vocab_size=50257,
                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    else:
        hf = LlamaForCausalLM(LlamaConfig(vocab_size=32000, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024))
    hf.eval()
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = from_pretrained(folder, local_files_only=True).eval()
    fused = GPT(replace(ours.config, fused=True)).eval()
    fused.load_state_dict(ours.state_dict())
    return hf, ours, fused


def kv_bytes_check(model: GPT) -> str:
    "KV-cache bytes per token measured on the model after 16 tokens, against the formula."
    from transformerbook.sampling import KVCache
    cache = KVCache(model.config.n_layers)
    with torch.no_grad(): model(torch.zeros(1, 16, dtype=torch.long), kv_cache=cache)
    measured, formula = cache.n_bytes // 16, kv_cache_bytes(model.config, 1)
    assert measured == formula, (measured, formula)
    return f"KV cache {measured:,} bytes/token measured = {formula:,} by the formula"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for a model this small)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed rounds (all contenders in turn); the best is kept")
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"], choices=["gpt2", "llama"])
    parser.add_argument("--new-tokens", nargs="+", type=int, default=list(NEW_TOKENS), help="lengths to time")
    parser.add_argument("--no-plain", action="store_true", help="skip generation without the KV cache")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's top operators for 64 tokens")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    for kind in args.models:
        hf, ours, fused = build_models(kind)
        V = ours.config.vocab_size
        prompt = torch.randint(0, V, (1, 16), generator=torch.Generator().manual_seed(1))
        hf_gen = lambda n: hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                       min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0)
        print(f"\n{kind}-style: 4 layers, d_model 128, vocab {V:,}, {ours.n_params():,} parameters; prompt 16 tokens; "
              f"greedy; {args.threads} thread(s), best of {args.repeats}; {kv_bytes_check(ours)}")
        if args.profile:
            from torch.profiler import ProfilerActivity, profile
            for name, fn in (("ours, fused", lambda: generate(fused, prompt, 64, temperature=0)),
                             ("HF", lambda: hf_gen(64))):
                with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof: fn()
                print(f"--- profile: {name}, 64 tokens")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
                counts = {e.key: e.count for e in prof.key_averages()}
                print("per generated token: " + ", ".join(
                    f"{op} {counts.get(op, 0) / 64:.1f}" for op in ("aten::cat", "aten::_local_scalar_dense",
                                                                     "aten::index")) +
                      f", all operators {sum(counts.values()) / 64:.0f}")
        print(f"{'new tokens':>10} | {'ours tok/s':>10} | {'fused tok/s':>11} | {'cache speed-up':>14} | "
              f"{'HF tok/s':>9} | {'ours / HF':>9} | {'fused / HF':>10} | same tokens")
        for n in args.new_tokens:
            with torch.no_grad():
                same = torch.equal(generate(ours, prompt, n, temperature=0), hf_gen(n)) and \
                       torch.equal(generate(fused, prompt, n, temperature=0), hf_gen(n))
            contenders = {"ours": lambda: generate(ours, prompt, n, temperature=0),
                          "fused": lambda: generate(fused, prompt, n, temperature=0),
                          "hf": lambda: hf_gen(n)}
            if not args.no_plain:
                contenders["plain"] = lambda: generate(ours, prompt, n, temperature=0, use_kv_cache=False)
            t = best_times(contenders, args.repeats)
            t_ours, t_fused, t_hf = t["ours"], t["fused"], t["hf"]
            speed_up = "-" if args.no_plain else f"{t['plain'] / t_ours:.1f}x"
            print(f"{n:>10} | {n / t_ours:>10.0f} | {n / t_fused:>11.0f} | {speed_up:>14} | "
                  f"{n / t_hf:>9.0f} | {t_hf / t_ours:>8.2f}x | {t_hf / t_fused:>9.2f}x | {same}")


if __name__ == "__main__":
    main()
