"""Benchmark: our pure-Python BPE against tiktoken, on the same text in the same run. Not a test.

1. Encoding throughput (MB/s) of GPT-2's BPE on all of TinyShakespeare (1.1 MB): `BPETokenizer.from_gpt2()` (a
   fresh chunk cache, then a warm one) against `tiktoken` (Rust) and tiktoken's own pure-Python educational encoder.
2. BPE training time: `BPETokenizer.train` against `tiktoken._educational.bpe_train` (the only trainer tiktoken ships;
   it recounts every pair after every merge), same text prefix, same regex, same vocabulary size.

    TRANSFORMERBOOK_DATA=../shared/data python bench/bench_tokenization.py [--train-chars 100000] [--vocab-size 300]
"""
from __future__ import annotations

import argparse
import time

from transformerbook.data import GPT2_PAT_STR, gpt2_encoding, load_tinyshakespeare
from transformerbook.tokenization import BPETokenizer


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    "Best wall time (seconds) over `repeat` runs, and the last result."
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def encode_without_cache(tok: BPETokenizer, text: str) -> list[int]:
    "What `tok.encode_ordinary` does without its chunk cache: merge every chunk from its bytes."
    return [i for chunk in tok._chunks(text) for i in tok._encode_chunk(chunk.encode("utf-8"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-chars", type=int, default=100_000, help="training prefix of TinyShakespeare (characters)")
    ap.add_argument("--vocab-size", type=int, default=300, help="vocabulary size for the training comparison")
    ap.add_argument("--edu-encode-chars", type=int, default=20_000,
                    help="prefix for tiktoken's educational encoder (it is slow)")
    args = ap.parse_args()

    text = load_tinyshakespeare()
    mb = len(text.encode("utf-8")) / 1e6
    enc = gpt2_encoding()

    print(f"== GPT-2 BPE encoding, TinyShakespeare ({mb:.2f} MB) ==")
    t_tk, ref = timed(lambda: enc.encode_ordinary(text), repeat=3)
    ours = BPETokenizer.from_gpt2()
    t_cold, ids = timed(lambda: ours.encode_ordinary(text))  # cache starts empty
    t_warm, ids = timed(lambda: ours.encode_ordinary(text), repeat=3)  # every chunk already cached
    assert ids == ref, "our ids differ from tiktoken's"
    n_nc = len(text) // 10  # without the cache every chunk is merged from scratch: slow, so a prefix
    t_nc, _ = timed(lambda: encode_without_cache(ours, text[:n_nc]))
    rows = [("tiktoken (Rust)", mb / t_tk), ("ours, empty cache", mb / t_cold), ("ours, warm cache", mb / t_warm),
            ("ours, no cache (10% prefix)", (len(text[:n_nc].encode()) / 1e6) / t_nc)]
    try:
        from tiktoken._educational import SimpleBytePairEncoding
        edu = SimpleBytePairEncoding(pat_str=GPT2_PAT_STR, mergeable_ranks=enc._mergeable_ranks)
        part = text[:args.edu_encode_chars]
        t_edu, edu_ids = timed(lambda: edu.encode(part, visualise=None))
        assert edu_ids == enc.encode_ordinary(part)
        rows.append((f"tiktoken educational ({len(part):,} chars)", (len(part.encode()) / 1e6) / t_edu))
    except ImportError:
        print("tiktoken._educational is not available; skipping its encoder")
    for name, mbps in rows:
        print(f"  {name:<36}{mbps:>9.2f} MB/s   tiktoken is {rows[0][1] / mbps:>7.1f}x faster")

    n, vs = args.train_chars, args.vocab_size
    part = text[:n]
    print(f"== BPE training: {n:,} characters, vocab_size {vs} ({vs - 256} merges), GPT-2 regex ==")
    t_ours, tok = timed(lambda: BPETokenizer().train(part, vs))
    print(f"  ours (BPETokenizer.train)             {t_ours:>8.2f} s")
    try:
        from tiktoken._educational import bpe_train
        t_edu, ranks = timed(lambda: bpe_train(part, vs, GPT2_PAT_STR, visualise=None))
        same_tokens = set(ranks) == {tok.vocab[i] for i in range(vs)}
        print(f"  tiktoken._educational.bpe_train       {t_edu:>8.2f} s   ours is {t_edu / t_ours:.1f}x faster"
              f"  (same token set: {same_tokens}; tie-breaking rules differ)")
    except ImportError:
        print("  tiktoken._educational is not available: no peer trainer; our time is reported alone")


if __name__ == "__main__":
    main()
