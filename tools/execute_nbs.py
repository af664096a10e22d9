"""Execute the book's notebooks with nbclient, in place or into an output folder.

Every cell runs, including `#| slow` and `#| exercise` cells (the site shows their outputs), so this is what
`make book` uses; `nbdev-test` is the faster check that skips those flags.

    python tools/execute_nbs.py --inplace nbs/01_attention.ipynb
    python tools/execute_nbs.py --out _build/executed nbs
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from filelock import FileLock
from nbclient import NotebookClient

# Kernels are started one at a time across the worker processes: two kernels started at the same moment could pick
# the same free TCP ports, and one then sat idle with its client waiting (seen twice in `make book`, Session 5).
START_LOCK = Path(tempfile.gettempdir()) / "transformerbook-kernel-start.lock"
# Started before the others, in this order: the chapters that train a model into the cache that other chapters load.
# A chapter that asks for a model another one is training waits for it on the run's lock, its core idle. In the
# alphabetical order, 05b_word2vec waited 243 s for 07_sampling's character model (a cold `make book`, 2026-11-27);
# with 11_inside first, 11_inside waited 246 s for it (its first slow cell shows the baby GPT's heads). So 07_sampling
# (the character model, 240 s; 05b, 08, 11, 11b, 13 and the live page load it) goes first, 11b_finetune (the masked
# model, 259 s, then the character model) beside it, and 11_inside (the induction model, 466 s) next.
TRAINS_FIRST = ("07_sampling.ipynb", "11b_finetune.ipynb", "11_inside.ipynb")


def notebooks(paths: list[str]) -> list[Path]:
    "The `.ipynb` files named by `paths` (folders are searched recursively), sorted, checkpoints excluded."
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += [f for f in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in f.parts]
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise SystemExit(f"error: {p} is not a notebook or a folder")
    return sorted(found)


def queue(srcs: list[Path], root: Path) -> list[Path]:
    "`srcs` in the order they start: `root`'s `TRAINS_FIRST` chapters first, the rest as given (a stable sort)."
    rank = {name: k for k, name in enumerate(TRAINS_FIRST)}
    first = lambda src: rank.get(src.name, len(rank)) if src.resolve().parent == root.resolve() else len(rank)
    return sorted(srcs, key=first)


def drop_profiler_chatter(nb) -> None:
    """Remove the `USDT:... profiler_start` / `profiler_stop` lines that torch's profiler (kineto, pytorch/kineto#1325)
    writes to stderr from C++ on every `torch.profiler.profile`: they cannot be switched off and are not the cell's
    output. Other stderr output is kept."""
    for cell in nb.cells:
        outs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = "".join(line for line in out["text"].splitlines(keepends=True) if not line.startswith("USDT:"))
                if not text: continue
                out["text"] = text
            outs.append(out)
        if "outputs" in cell: cell["outputs"] = outs


def execute(src: Path, dst: Path, timeout: int) -> tuple[str, float, str | None]:
    "Execute `src` (working directory = its folder) and write the result to `dst`; returns (name, seconds, error)."
    nb = nbformat.read(src, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(src.parent)}},
                            # the kernel app's own start-up warnings (e.g. "running over TCP without encryption" for
                            # this local, short-lived kernel) are noise in the build log; cell warnings are kept
                            extra_arguments=["--IPKernelApp.log_level=ERROR",
                                             # plots as SVG: vector lines and text, sharp at any width and
                                             # screen density (tests/test_site.py); a stable id salt and no
                                             # date in the file, so re-executing leaves unchanged plots unchanged
                                             "--InlineBackend.figure_formats=svg",
                                             "--InlineBackend.rc={'svg.hashsalt': 'transformerbook'}",
                                             "--InlineBackend.print_figure_kwargs="
                                             "{'bbox_inches': 'tight', 'metadata': {'Date': None}}"])
    error = None
    try:
        with FileLock(START_LOCK):  # held until the kernel answers, so the next kernel's ports are chosen after
            client.km = client.create_kernel_manager()
            client.start_new_kernel()
            client.start_new_kernel_client()  # waits for the kernel to be ready
        client.execute()  # uses the kernel started above and shuts it down at the end
    except Exception as e:  # keep going: report every failing notebook, not only the first
        error = f"{type(e).__name__}: {str(e)[-2000:]}"
    drop_profiler_chatter(nb)
    if error and dst.resolve() == src.resolve():  # in place: a failed run keeps the notebook's saved outputs
        dst = Path(tempfile.gettempdir()) / f"{src.stem}.failed.ipynb"
        error += f"\n(the notebook was left as it was; the failed run is in {dst})"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, dst)  # atomic: a failed write never leaves a half-written notebook
    return str(src), time.perf_counter() - start, error


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="notebooks or folders of notebooks")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--inplace", action="store_true", help="overwrite each notebook with its executed version")
    where.add_argument("--out", type=Path, help="write executed copies here, keeping paths relative to nbs/")
    ap.add_argument("--root", type=Path, default=Path("nbs"), help="folder that --out paths are relative to")
    ap.add_argument("--workers", type=int, default=2, help="notebooks executed at once")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    args = ap.parse_args(argv)

    srcs = queue(notebooks(args.paths), args.root)
    dsts = [s if args.inplace else args.out / s.resolve().relative_to(args.root.resolve()) for s in srcs]
    failed = []
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for name, secs, err in pool.map(execute, srcs, dsts, [args.timeout] * len(srcs)):
            print(f"{'FAILED' if err else 'ok':6} {secs:7.1f} s  {name}", flush=True)
            if err:
                failed.append((name, err))
    for name, err in failed:
        print(f"\n--- {name} ---\n{err}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
