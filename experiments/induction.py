"""Induction heads forming during training: the phase change of chapter 11 ("Inside a trained model").

Trains `interpret.induction_configs()`'s 2-layer character model on TinyShakespeare with
`interpret.repeat_segment_batch` (a text segment of random length and place followed by its copy), stopping every
`--every` steps to save a snapshot of the weights (`interpret.induction_run`, cached: the stages resume each other, so
the weights are those of one uninterrupted run; `interpret.induction_model()` is its last snapshot). At every snapshot
it records `interpret.induction_metrics`: validation
loss, loss on the first and second copy of repeated text and of repeated random characters, and every head's
previous-token, first-token, newline and induction scores. It does the same for the same run with the baby GPT's
learning rate (1e-3 instead of 3e-3), in which no induction head formed in the committed run (one seed); for the
same budget with chapter 12's parts (`induction_configs("llama")`: RMSNorm, rotary positions, SwiGLU, 2 key/value
heads); and it measures the cached
baby GPT (`training.shakespeare_model("char")`) the same way, as the model trained on ordinary text only.

Writes `transformerbook/results/induction.json`. The snapshots live in the model cache (`cache_dir()/models/
induction-stages-<hash>`), so a second run only re-measures them. Training took about 25 minutes per run on a
2-core machine shared with other jobs; measuring takes under a minute.

    python experiments/induction.py                      # the committed results
    python experiments/induction.py --max-iters 100 --out /tmp/slice.json   # the first 100 steps (the test's slice)

The learning-rate schedule always ends at step 3,000, so a shorter run is the first steps of the committed one.
"""
import argparse
import sys
from pathlib import Path

from transformerbook.environment import weights_sha256
from transformerbook.data import RESULTS_DIR, experiment_record, save_result
from transformerbook.interpret import INDUCTION_BATCH, induction_configs, induction_metrics, induction_run
from transformerbook.training import load_dataset, load_model, shakespeare_model

BABY_LR = {"learning_rate": 1e-3, "min_lr": 1e-4}  # the baby GPT's schedule, for comparison


ARMS = (("snapshots", "gpt2", {}), ("baby_lr", "gpt2", BABY_LR), ("llama", "llama", {}))  # name, style, overrides


def run(max_iters: int = 3000, every: int = 100, seed: int = 1337, out_dir: Path | None = None,
        baby: bool = True, compare_lr: bool = True, llama: bool = True) -> dict:
    "Train in stages (or reuse the cached snapshots), measure every snapshot; the results dict of the JSON file."
    model_cfg, train_cfg = induction_configs(max_iters=max_iters, seed=seed)  # the cosine ends at step 3000 anyway
    tok, _, val_ids = load_dataset("tinyshakespeare", "char")
    newline_id = tok.encode("\n")[0]
    results = {"model_config": model_cfg.to_dict(), "train_config": train_cfg.to_dict(), "every": every,
               "batch_fn": INDUCTION_BATCH, "llama_model_config": induction_configs("llama")[0].to_dict()}
    for name, style, overrides in ARMS:  # the recipe, the baby GPT's learning rate, the Llama-style model
        if (name == "baby_lr" and not compare_lr) or (name == "llama" and not llama): continue
        run_dir = None if out_dir is None else Path(out_dir)/name
        snapshots = induction_run(every, run_dir, progress=sys.stderr.isatty(), style=style, max_iters=max_iters,
                                  seed=seed, **overrides)
        rows = []
        for step, path in snapshots:
            model = load_model(path)[0]
            rows.append({"step": step, **induction_metrics(model, val_ids, newline_id)})
            if name in ("snapshots", "llama"):  # the last snapshot's hash stays
                results.setdefault("weights_sha256", {})["final" if name == "snapshots" else "llama"] = \
                    weights_sha256(model)
            print(f"{name} step {step:5d}: val {rows[-1]['val_loss']:.3f}, repeated text {rows[-1]['text_first']:.3f} "
                  f"-> {rows[-1]['text_second']:.3f}, max induction score {max(map(max, rows[-1]['induction'])):.3f}")
        results[name] = rows
    results["baby_lr_config"] = BABY_LR
    if baby:
        baby_model = shakespeare_model("char", progress=False)[0]
        results["baby"] = induction_metrics(baby_model, val_ids, newline_id)
        results.setdefault("weights_sha256", {})["baby"] = weights_sha256(baby_model)
    return results

def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-iters", type=int, default=3000, help="training steps (default: 3000)")
    parser.add_argument("--every", type=int, default=100, help="steps between snapshots (default: 100)")
    parser.add_argument("--seed", type=int, default=1337, help="training seed (default: 1337, the book's)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR/"induction.json", help="where the JSON goes")
    parser.add_argument("--no-baby", action="store_true", help="skip measuring the cached baby GPT")
    args = parser.parse_args(argv)
    command = "python experiments/induction.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    results = run(args.max_iters, args.every, args.seed, baby=not args.no_baby)
    doc = experiment_record(command, [args.seed], results)
    save_result(args.out, doc)
    print(f"wrote {args.out}")

if __name__ == "__main__":
    main()
