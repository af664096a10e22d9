"""The files behind the website's live explorers (07's distribution and sampler, 11's heads and logit lens): ONNX
Runtime Web's single-threaded WebAssembly build, copied from `site/node_modules/onnxruntime-web` (pinned in
`site/package.json`, installed by `tools/fetch_mathjax.py`) into `_static/ort/`, and the two exported models
(`transformerbook.live.live_file`: exported once per checkpoint into the book's cache) into `_static/live/`.
`tools/build_site.py` calls `write_live` after Sphinx and prints the total download size the live explorers add.

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


def _copy(src: Path, dst: Path) -> int:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.stat().st_size != src.stat().st_size or dst.stat().st_mtime < src.stat().st_mtime:
        shutil.copy2(src, dst)
    return dst.stat().st_size


def write_live(static: Path | str, verbose: bool = True) -> dict[str, int]:
    """Copy the runtime into `static/ort/` and the live models (`<name>.onnx`, `<name>.json`) into `static/live/`.
    Returns {relative path: bytes} of what a reader downloads; prints the total (and gzip-compressed) size."""
    start, static, files = time.perf_counter(), Path(static), {}
    if all((ORT_DIST / f).is_file() for f in RUNTIME_FILES):
        for f in RUNTIME_FILES:
            files[f"ort/{f}"] = _copy(ORT_DIST / f, static / "ort" / f)
    else:
        print("warning: onnxruntime-web is not installed in site/node_modules (run `python tools/fetch_mathjax.py`, "
              "needs npm): the live explorers will show their precomputed numbers", file=sys.stderr)
    try:
        from transformerbook import live
        for name in live.LIVE_MODELS:
            onnx_file = live.live_file(name)
            files[f"live/{onnx_file.name}"] = _copy(onnx_file, static / "live" / onnx_file.name)
            meta = onnx_file.with_suffix(".json")
            files[f"live/{meta.name}"] = _copy(meta, static / "live" / meta.name)
            if live.live_info(name)["stand_in"]:
                print(f"Stand-in: the live {name} explorer runs {live.STAND_IN}", flush=True)
    except ImportError as e:  # onnx / onnxscript are documentation dependencies (pip install -e ".[docs]")
        print(f"warning: the live models were not exported ({e}); the live explorers will show their precomputed "
              "numbers", file=sys.stderr)
    if verbose:
        total = sum(files.values())
        packed = sum(len(gzip.compress((static / f).read_bytes(), 6)) for f in files)
        print(f"Live explorers: {len(files)} files, {total / 1e6:.1f} MB to download (runtime "
              f"{sum(v for k, v in files.items() if k.startswith('ort/')) / 1e6:.1f} MB + models "
              f"{sum(v for k, v in files.items() if k.startswith('live/')) / 1e6:.1f} MB; {packed / 1e6:.1f} MB "
              f"gzip-compressed) in {static}, written in {time.perf_counter() - start:.1f} s", flush=True)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("static", type=Path, help="the built site's _static folder")
    write_live(ap.parse_args(argv).static)
    return 0


if __name__ == "__main__":
    sys.exit(main())
