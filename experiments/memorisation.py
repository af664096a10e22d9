"""Memorisation of the book's character model, and of one trained to memorise (chapter 11a; J&M 10.10; Carlini et al.
2021).

Two models of the same architecture (nanoGPT's baby GPT, `training.baby_gpt_configs`):
- "full": the book's model, `training.shakespeare_model("char")` (2,000 steps of 12 x 64 characters over the 1 MB
  training split, about 1.5 passes), loaded from the shared cache (trained once if missing);
- "small": the same recipe on only the first `--small-chars` (20,000) characters of the training split, its cosine
  schedule ending at the last of `--steps` (800 steps: about 30 passes over its data), stopped at every snapshot step
  (a resumed run is bit-for-bit the uninterrupted one);
- "tiny": the same on the first `--tiny-chars` (5,000) characters, 1,000 steps (about 150 passes).
At each snapshot it measures
- the fraction of 20- and 50-character pieces of sampled text (64 samples x 500 characters from "\\n", at each
  temperature: 1,600 and 640 pieces, enough to bound a rate of zero below 0.24% and 0.6%) found verbatim in the
  model's training text and in the validation split;
- extraction: greedy continuations of 32 characters from the first 32 characters of up to 100 training speeches, and
  of 100 validation speeches as the control, that reproduce the speech exactly.
Writes transformerbook/results/memorisation.json, with the sampling settings under "settings". About 30 minutes of
CPU time (sampling 64 x 500 characters at three temperatures, nine snapshots).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from dataclasses import replace

import torch

from transformerbook.data import RESULTS_DIR, experiment_record, load_tinyshakespeare, save_result, train_val_split
from transformerbook.evaluation import extraction_matches, speeches, verbatim_fraction
from transformerbook.lm_head import GPT
from transformerbook.sampling import generate
from transformerbook.training import baby_gpt_configs, cached_run, load_checkpoint, load_dataset, load_model, train

NAME = "memorisation"
SAMPLE_CHARS = 500  # characters per sample


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


def _snapshot(model, tok, step: int, hist, train_text: str, val_text: str, temperatures, n_samples: int,
              sample_chars: int, n_passages: int, seed: int) -> dict:
    snap = {"step": step, "val_loss": hist["val_loss"][-1], "train_loss": hist["train_loss"][-1],
            **measure(model, tok, train_text, val_text, temperatures, n_samples, sample_chars, n_passages, seed)}
    print(json.dumps(snap), file=sys.stderr, flush=True)
    return snap


def run(steps, temperatures, train_chars: int | None = None, n_samples: int = 8, sample_chars: int = SAMPLE_CHARS,
        n_passages: int = 100, seed: int = 0, schedule_end: int | None = None) -> dict:
    """train_chars=None: the book's cached model (`shakespeare_model("char")`, trained once), one snapshot at its
    last step. Otherwise the same recipe on the first `train_chars` characters of the training split, its cosine
    schedule ending at `schedule_end` (default steps[-1]), with a snapshot at each of `steps`."""
    text = load_tinyshakespeare()
    train_text, val_text = train_val_split(text)
    model_cfg, train_cfg = baby_gpt_configs(65)  # the recipe of shakespeare_model("char")
    heldout = [val_text[i:i + 1000] for i in range(0, len(val_text) - 1000, 7000)]  # real unseen text, 16 pieces
    common = dict(temperatures=temperatures, n_samples=n_samples, sample_chars=sample_chars, n_passages=n_passages,
                  seed=seed)
    if train_chars is None:
        path = cached_run("shakespeare-char", model_cfg, train_cfg, "char", {"tokenizer": "char"}, progress=False)
        model, tok = load_model(path, latest=True)  # the model at its last step (a run folder's default is its best)
        ckpt = load_checkpoint(path)
        snaps = [_snapshot(model, tok, ckpt["step"], ckpt["history"], train_text, val_text, **common)]
    else:
        tok, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
        train_text, train_ids = train_text[:train_chars], train_ids[:train_chars]
        snaps = []
        with tempfile.TemporaryDirectory() as out:
            for i, step in enumerate(steps):
                stage_train_cfg = replace(train_cfg, max_iters=step, lr_decay_iters=schedule_end or steps[-1],
                                          warmup_iters=min(100, steps[0]))
                torch.manual_seed(stage_train_cfg.seed)
                hist = train(GPT(model_cfg), train_ids, val_ids, stage_train_cfg, out_dir=out, tokenizer=tok,
                             resume=i > 0, progress=False)
                model, tok = load_model(out, latest=True)  # this snapshot, not the best so far
                snaps.append(_snapshot(model, tok, step, hist.to_dict(), train_text, val_text, **common))
    return {"train_chars": len(train_text), "heldout_in_train_20": verbatim_fraction(heldout, train_text, 20),
            "heldout_in_train_50": verbatim_fraction(heldout, train_text, 50), "snapshots": snaps}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, nargs="+", default=[100, 200, 400, 800], help="snapshots of the small run")
    p.add_argument("--n-samples", type=int, default=64, help="samples of 500 characters per temperature")
    p.add_argument("--n-passages", type=int, default=100, help="speeches per split in the extraction test")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.5, 0.8, 1.0])
    p.add_argument("--small-chars", type=int, default=20_000, help="training characters of the small run")
    p.add_argument("--tiny-chars", type=int, default=5_000, help="training characters of the tiny run")
    p.add_argument("--tiny-steps", type=int, nargs="+", default=[100, 250, 500, 1000], help="snapshots of the tiny run")
    p.add_argument("--seed", type=int, default=0, help="sampling and passage seed (training uses the recipe's seed)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    common = dict(n_samples=args.n_samples, n_passages=args.n_passages, seed=args.seed)
    results = {"settings": {"n_samples": args.n_samples, "sample_chars": SAMPLE_CHARS, "n_passages": args.n_passages,
                            "temperatures": args.temperatures, "seed": args.seed},
               "full": run(None, args.temperatures, **common),
               "small": run(args.steps, args.temperatures, train_chars=args.small_chars, **common),
               "tiny": run(args.tiny_steps, args.temperatures, train_chars=args.tiny_chars, **common)}
    command = "python experiments/memorisation.py " + " ".join(sys.argv[1:] if argv is None else argv)
    doc = experiment_record(command.strip(), [args.seed], results)
    path = RESULTS_DIR/f"{NAME}.json"
    save_result(path, doc)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
