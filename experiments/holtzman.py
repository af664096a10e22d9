"""Holtzman et al. (2020) Table 1, as the notes print it (Fig. 19.4), re-measured on the book's character-level
Shakespeare model: every decoding row, scored by the perplexity of the continuations under the model, self-BLEU-4
between the continuations (word level) and the fraction of repeated word 3-grams.

    python experiments/holtzman.py                       # writes transformerbook/results/holtzman.json
    python experiments/holtzman.py --n-prompts 2 --out /tmp/h.json   # a quick look

The prompts are evenly spaced passages of the held-out 10% of TinyShakespeare; prompt i is decoded with its own
generator seeded `seed * 1000 + i`, so any one prompt's row can be re-run alone (tests/test_fidelity.py does).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from transformerbook.environment import weights_sha256
from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.sampling import beam_search, generate, perplexity, repeated_ngram_fraction, self_bleu
from transformerbook.training import shakespeare_model

# Notes Fig. 19.4 = Holtzman et al. 2020, Table 1: perplexity of 5,000 GPT-2 Large generations, per BPE token.
PUBLISHED_PERPLEXITY = {"Human": 12.38, "Greedy": 1.50, "Beam, b=16": 1.48, "Stochastic Beam, b=16": 19.20,
                        "Pure Sampling": 22.73, "Sampling, t=0.9": 10.25, "Top-k=40": 6.88, "Top-k=640": 13.82,
                        "Top-k=40, t=0.7": 3.48, "Nucleus p=0.95": 13.13}
# Holtzman's row -> how the book decodes it: generate(**kwargs), or beam_search(num_beams=16) (stochastic: seeded).
METHODS = {"Greedy": ("generate", dict(temperature=0)),
           "Beam, b=16": ("beam", dict(num_beams=16)),
           "Stochastic Beam, b=16": ("stochastic beam", dict(num_beams=16)),
           "Pure Sampling": ("generate", dict()),
           "Sampling, t=0.9": ("generate", dict(temperature=0.9)),
           "Top-k=40": ("generate", dict(top_k=40)),
           "Top-k=640": ("generate", dict(top_k=640)),
           "Top-k=40, t=0.7": ("generate", dict(top_k=40, temperature=0.7)),
           "Nucleus p=0.95": ("generate", dict(top_p=0.95))}


def prompts_and_humans(tok, n_prompts: int, prompt_chars: int, new_chars: int) -> tuple[list, list]:
    "`n_prompts` evenly spaced held-out passages: their first `prompt_chars` characters, and the passages themselves."
    _, val_text = train_val_split(load_tinyshakespeare())
    starts = torch.linspace(0, len(val_text) - prompt_chars - new_chars - 1, n_prompts).long().tolist()
    return ([tok.encode(val_text[s:s + prompt_chars]) for s in starts],
            [tok.encode(val_text[s:s + prompt_chars + new_chars]) for s in starts])


def decode(lm, method: str, prompt: list[int], new_chars: int, seed: int) -> list[int]:
    "Prompt + continuation of one prompt by one of `METHODS`, with a generator seeded `seed`."
    kind, kw = METHODS[method]
    g = torch.Generator().manual_seed(seed)
    if kind == "generate": return generate(lm, prompt, new_chars, generator=g, **kw)[0].tolist()
    seq, _ = beam_search(lm, prompt, new_chars, generator=g if kind == "stochastic beam" else None, **kw)
    return seq.tolist()


def row_stats(lm, tok, rows: list[list[int]], prompt_chars: int) -> dict:
    "Per-text perplexity (per character) and repeated word 3-grams of the continuations, and their self-BLEU-4."
    words = [tok.decode(r[prompt_chars:]).split() for r in rows]
    return {"perplexity": [perplexity(lm, r, prompt_length=prompt_chars) for r in rows],
            "repeated_3grams": [repeated_ngram_fraction(w, 3) for w in words],
            "self_bleu4": self_bleu(words, 4)}


def run(n_prompts: int = 16, prompt_chars: int = 32, new_chars: int = 192, seed: int = 0, methods=None) -> dict:
    lm, tok = shakespeare_model("char", progress=False)
    prompts, humans = prompts_and_humans(tok, n_prompts, prompt_chars, new_chars)
    results = {"Human": row_stats(lm, tok, humans, prompt_chars)}
    samples = {"Human": tok.decode(humans[0][prompt_chars:])}
    for method in methods or METHODS:
        rows = [decode(lm, method, p, new_chars, seed * 1000 + i) for i, p in enumerate(prompts)]
        results[method] = row_stats(lm, tok, rows, prompt_chars)
        samples[method] = tok.decode(rows[0][prompt_chars:])
        print(f"{method:<24} perplexity {sum(results[method]['perplexity']) / n_prompts:6.2f}", file=sys.stderr)
    return {"n_prompts": n_prompts, "prompt_chars": prompt_chars, "new_chars": new_chars,
            "published_perplexity": PUBLISHED_PERPLEXITY, "rows": results, "first_samples": samples,
            "weights_sha256": weights_sha256(lm)}  # the model these numbers hold for, to the digit


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--prompt-chars", type=int, default=32)
    ap.add_argument("--new-chars", type=int, default=192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "holtzman.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = run(args.n_prompts, args.prompt_chars, args.new_chars, args.seed)
    record = experiment_record("python experiments/holtzman.py" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
                               [args.seed], results)
    save_result(args.out, record)  # atomic: a killed run leaves the old file
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
