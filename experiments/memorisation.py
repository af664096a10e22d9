"""Memorisation of the book's character model along training (chapter 11a, J&M 10.10, Carlini et al. 2021).

Two runs of nanoGPT's baby GPT, each stopped at every snapshot step (a resumed run is bit-for-bit the
uninterrupted one): "full", trained on the whole training split exactly as `training.shakespeare_model("char")` is
(2,000 steps of 12 x 64 characters: about 1.5 passes over 1 MB), and "small", the same recipe on only the first
`--small-chars` characters of the training split (about 30 passes over 50,000 characters: a model that can
memorise). At every snapshot it measures
- the fraction of 20- and 50-character spans of sampled text (8 samples x 1,000 characters from "\\n", at each
  temperature) found verbatim in the training split and in the validation split;
- extraction: greedy continuations of 32 characters from the first 32 characters of 100 training speeches, and of
  100 validation speeches as the control, that reproduce the speech exactly.
Writes transformerbook/results/memorisation.json. About 5 minutes of CPU time.
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from transformerbook.data import RESULTS_DIR, load_tinyshakespeare, train_val_split
from transformerbook.evaluation import extraction_matches, speeches, verbatim_fraction
from transformerbook.lm_head import GPT
from transformerbook.sampling import generate
from transformerbook.training import baby_gpt_configs, load_dataset, load_model, train

NAME = "memorisation"


def passages(text: str, n: int, length: int, seed: int) -> list:
    "n speeches (or all, if fewer) of at least `length` characters, drawn with a fixed seed."
    bodies = [body for _, _, body in speeches(text) if len(body) >= length]
    return random.Random(seed).sample(bodies, min(n, len(bodies)))


def measure(model, tok, train_text: str, val_text: str, temperatures, n_samples: int, sample_chars: int,
            n_passages: int, seed: int) -> dict:
    "The verbatim-span fractions per temperature and the extraction rates of one model."
    verbatim = {}
    for t in temperatures:
        gen = torch.Generator().manual_seed(seed)
        ids = generate(model, [tok.encode("\n")] * n_samples, sample_chars, temperature=t, generator=gen)
        samples = [tok.decode(row[1:].tolist()) for row in ids]
        verbatim[str(t)] = {f"{split}_{span}": verbatim_fraction(samples, corpus, span)
                            for split, corpus in (("train", train_text), ("val", val_text)) for span in (20, 50)}
    ext = {}
    for split, text in (("train", train_text), ("val", val_text)):
        probe = passages(text, n_passages, 64, seed)
        ext[f"extraction_{split}"] = sum(extraction_matches(model, tok, probe, 32, 32)) / len(probe)
    return {"verbatim": verbatim, **ext}


def run(steps, temperatures, train_chars: int | None = None, n_samples: int = 16, sample_chars: int = 1000,
        n_passages: int = 200, seed: int = 0, out_dir: str | None = None) -> dict:
    "Train with snapshots on the first `train_chars` characters of the training split (None = all of it)."
    text = load_tinyshakespeare()
    train_text, val_text = train_val_split(text)
    model_cfg, train_cfg = baby_gpt_configs(65)  # the recipe of shakespeare_model("char")
    tok, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    if train_chars is not None: train_text, train_ids = train_text[:train_chars], train_ids[:train_chars]
    heldout = [val_text[i:i + 1000] for i in range(0, len(val_text) - 1000, 7000)]  # real unseen text, 16 pieces
    results = {"train_chars": len(train_text), "heldout_in_train_20": verbatim_fraction(heldout, train_text, 20),
               "heldout_in_train_50": verbatim_fraction(heldout, train_text, 50), "snapshots": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(out_dir or tmp)
        for i, step in enumerate(steps):
            cfg = replace(train_cfg, max_iters=step, lr_decay_iters=train_cfg.max_iters)  # the full run's schedule
            torch.manual_seed(cfg.seed)
            hist = train(GPT(model_cfg), train_ids, val_ids, cfg, out_dir=out, tokenizer=tok, resume=i > 0,
                         progress=False)
            model, tok = load_model(out)
            snap = {"step": step, "val_loss": hist.val_loss[-1], "train_loss": hist.train_loss[-1],
                    **measure(model, tok, train_text, val_text, temperatures, n_samples, sample_chars, n_passages, seed)}
            print(json.dumps(snap), file=sys.stderr, flush=True)
            results["snapshots"].append(snap)
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, nargs="+", default=[250, 500, 1000, 2000])
    p.add_argument("--n-samples", type=int, default=8, help="samples of 1,000 characters per temperature")
    p.add_argument("--n-passages", type=int, default=100, help="speeches per split in the extraction test")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 0.8, 1.0])
    p.add_argument("--small-chars", type=int, default=50_000, help="training characters of the small run")
    p.add_argument("--seed", type=int, default=0, help="sampling and passage seed (training uses the recipe's seed)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    common = dict(n_samples=args.n_samples, n_passages=args.n_passages, seed=args.seed)
    results = {"full": run(args.steps, args.temperatures, **common),
               "small": run(args.steps, args.temperatures, train_chars=args.small_chars, **common)}
    command = "python experiments/memorisation.py " + " ".join(sys.argv[1:] if argv is None else argv)
    doc = {"command": command.strip(), "seeds": [args.seed], "created": datetime.date.today().isoformat(),
           "results": results}
    path = RESULTS_DIR/f"{NAME}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
