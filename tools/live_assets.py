"""The files behind the website's live explorers (07's distribution and sampler, 11's heads and logit lens): ONNX
Runtime Web's single-threaded WebAssembly build, copied from `site/node_modules/onnxruntime-web` (pinned in
`site/package.json`, installed by `tools/fetch_mathjax.py`) into `_static/ort/`, and the two exported models
(`transformerbook.live.live_file`: exported once per checkpoint into the book's cache) into `_static/live/`.
`tools/build_site.py` calls `write_live` after Sphinx and prints the total download size the live explorers add.

The WebAssembly binary (14 MB) and the models are written gzip-compressed (`.gz`, about 60% smaller) and the page
decompresses them with the browser's own `DecompressionStream`, so a reader downloads the compressed bytes from any
server: `make serve`'s `http.server` and most static hosts do not compress `.wasm` or `.onnx` themselves.

Without the npm package or a model, the explorers say why and show the numbers computed when the site was built.

    python tools/live_assets.py _site/_static
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORT_DIST = ROOT / "site" / "node_modules" / "onnxruntime-web" / "dist"
# ort.wasm.min.js: the runtime without WebGPU/WebGL (sets window.ort); it imports the .mjs, which loads the .wasm
RUNTIME_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
GZIPPED = (".wasm", ".onnx")  # written as <name>.gz: the page fetches these compressed (live.js, fetchGzipped)
BUDGET_BYTES = 15_000_000  # issue 24: what the live explorers add to a reader's download stays under 15 MB


def _copy(src: Path, dst: Path) -> tuple[str, int]:
    """Copy `src` to `dst` (gzip-compressed, as `<name>.gz`, for the kinds in GZIPPED) unless an up-to-date copy is
    there; returns (the name written, its size in bytes). Written to a temporary file first, then renamed."""
    if src.suffix in GZIPPED: dst = dst.with_name(dst.name + ".gz")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime or \
            (src.suffix not in GZIPPED and dst.stat().st_size != src.stat().st_size):
        tmp = dst.with_name(dst.name + ".tmp")
        if src.suffix in GZIPPED:  # mtime=0: the same bytes on every build
            tmp.write_bytes(gzip.compress(src.read_bytes(), compresslevel=9, mtime=0))
        else:
            shutil.copy2(src, tmp)
        tmp.replace(dst)
    return dst.name, dst.stat().st_size


def write_live(static: Path | str, verbose: bool = True) -> dict[str, int]:
    """Copy the runtime into `static/ort/` and the live models (`<name>.onnx.gz`, `<name>.json`) into `static/live/`.
    Returns {relative path: bytes} of what a reader downloads (the compressed sizes); prints the total against the
    15 MB budget, and the uncompressed size."""
    start, static, files, unpacked = time.perf_counter(), Path(static), {}, 0
    sources = []
    if all((ORT_DIST / f).is_file() for f in RUNTIME_FILES):
        sources += [(ORT_DIST / f, static / "ort" / f) for f in RUNTIME_FILES]
    else:
        print("warning: onnxruntime-web is not installed in site/node_modules (run `python tools/fetch_mathjax.py`, "
              "needs npm): the live explorers will show their precomputed numbers", file=sys.stderr)
    try:
        from transformerbook import live
        for name in live.LIVE_MODELS:
            onnx_file = live.live_file(name)
            sources += [(f, static / "live" / f.name) for f in (onnx_file, onnx_file.with_suffix(".json"))]
            if live.live_info(name)["stand_in"]:
                print(f"Stand-in: the live {name} explorer runs {live.STAND_IN}", flush=True)
    except ImportError as e:  # onnx / onnxscript are documentation dependencies (pip install -e ".[docs]")
        print(f"warning: the live models were not exported ({e}); the live explorers will show their precomputed "
              "numbers", file=sys.stderr)
    for src, dst in sources:
        written, size = _copy(src, dst)
        files[f"{dst.parent.name}/{written}"], unpacked = size, unpacked + src.stat().st_size
    if verbose:
        total = sum(files.values())
        part = lambda folder: sum(v for k, v in files.items() if k.startswith(folder)) / 1e6  # noqa: E731
        print(f"Live explorers: {len(files)} files, {total / 1e6:.1f} MB to download (budget "
              f"{BUDGET_BYTES / 1e6:.0f} MB): runtime {part('ort/'):.1f} MB + models {part('live/'):.1f} MB, the "
              f"binary ones gzip-compressed ({unpacked / 1e6:.1f} MB unpacked); in {static}, written in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("static", type=Path, help="the built site's _static folder")
    write_live(ap.parse_args(argv).static)
    return 0


if __name__ == "__main__":
    sys.exit(main())
