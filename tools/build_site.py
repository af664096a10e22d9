"""Build the book's website (offline-capable HTML) from the notebooks, with Sphinx + myst-nb.

    python tools/build_site.py                 # use the outputs saved in the notebooks
    python tools/build_site.py --execute       # execute every notebook first (all cells, incl. slow/exercise)

Steps: (optionally) execute `nbs/**.ipynb` into `_build/executed/`; translate each notebook for myst-nb
(`tools/nb2myst.py`) into `_build/myst/`, adding the table of contents (home page, chapters in file-name order,
then the exercise checkers as an appendix) to the home page; run Sphinx with `site/conf.py` into `_site/`; write
each page as Markdown too (`_site/attention.html.md`, where the module docstrings' `Docs:` lines point).
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
import warnings
from pathlib import Path

import nbformat
from nbformat.v4 import new_markdown_cell

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))  # sibling scripts; tools/ is not a package
import execute_nbs  # noqa: E402
import explorers  # noqa: E402
import figures  # noqa: E402
import nb2myst  # noqa: E402

CONF_DIR = ROOT / "site"
HOME = "index"
CHECKS = "checks"  # nbs/checks/: the exercise checkers, listed as an appendix
_BLOCK_ATTRS = re.compile(r"^\{\.[\w-]+\}[ \t]*\n", re.M)
ASSET_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}  # images that markdown cells may reference


def book_notebooks(nbs: Path) -> tuple[Path | None, list[Path], list[Path]]:
    "The home page (`index.ipynb`, or None), the chapters in file-name order, and the checker notebooks."
    chapters = sorted(p for p in nbs.glob("*.ipynb") if p.stem != HOME)
    home = nbs / f"{HOME}.ipynb"
    return (home if home.is_file() else None), chapters, sorted((nbs / CHECKS).glob("*.ipynb"))


def toctree(entries: list[str], caption: str) -> str:
    "A hidden MyST toctree: sphinx-book-theme shows it as a captioned section of the left navigation."
    return "```{toctree}\n:hidden:\n:maxdepth: 2\n:caption: " + caption + "\n\n" + "\n".join(entries) + "\n```"


def home_page(home: Path | None, chapters: list[str], checks: list[str], title: str):
    "The translated home notebook (or a minimal one with `title`) with the book's table of contents appended."
    nb = (nb2myst.translate(nbformat.read(home, as_version=4)) if home
          else nbformat.v4.new_notebook(cells=[new_markdown_cell(f"# {title}")]))
    nb.cells.append(new_markdown_cell(toctree(chapters, "Chapters")))
    if checks:
        nb.cells.append(new_markdown_cell(toctree(checks, "Appendix: exercise checkers")))
    return nb


def prepare_sources(nbs: Path, src_root: Path, dst: Path, title: str,
                    book: tuple[Path | None, list[Path], list[Path]]) -> list[Path]:
    """Translate the `book` (home, chapters, checks: see `book_notebooks`; read from `src_root`, laid out like `nbs`)
    into `dst`, with the toctree; copy images; delete files in `dst` without a source. Returns the written files."""
    home, chapters, checks = book

    def docs(paths: list[Path]) -> list[str]:  # Sphinx document names, e.g. "checks/01_attention"
        return [p.relative_to(nbs).with_suffix("").as_posix() for p in paths]

    written, labels = [], {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for nb_path in chapters + checks:
            rel = nb_path.relative_to(nbs)
            nb = figures.translate(nbformat.read(src_root / rel, as_version=4), nb2myst.translate)
            for label in nb2myst.box_labels(nb):
                labels.setdefault(label, []).append(str(rel))
            nb2myst.write_notebook(nb, dst / rel)
            written.append(dst / rel)
        index = dst / f"{HOME}.ipynb"
        home_nb = home_page(home and src_root / home.relative_to(nbs), docs(chapters), docs(checks), title)
        nb2myst.write_notebook(home_nb, index)
        written.append(index)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if clashes := {k: v for k, v in labels.items() if len(v) > 1}:
        raise SystemExit("error: exercise numbers must be unique in the book; these are repeated: "
                         + "; ".join(f"{k} in {', '.join(v)}" for k, v in clashes.items()))
    for asset in (p for p in nbs.rglob("*") if p.suffix.lower() in ASSET_SUFFIXES and p.is_file()):
        out = dst / asset.relative_to(nbs)
        if not out.exists() or out.stat().st_mtime < asset.stat().st_mtime:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(asset, out)
        written.append(out)
    keep = set(written)
    for stale in [p for p in dst.rglob("*") if p.is_file() and p not in keep]:
        stale.unlink()
    return written


def _markdown_view(nb):
    "A copy of a translated notebook as a text reader sees the page: hidden inputs/outputs, images and HTML dropped."
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":  # MyST block attributes (`{.lead}`) style the HTML only
            cell.source = _BLOCK_ATTRS.sub("", cell.source)
        if cell.cell_type != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        if "remove-input" in tags:
            cell.source = ""
        kept = []
        for o in ([] if "remove-output" in tags else cell.get("outputs", [])):
            if o.output_type in ("execute_result", "display_data"):
                data = o.get("data", {})
                if any(k.startswith("image/") for k in data) or not ({"text/plain", "text/markdown"} & set(data)):
                    continue  # a plot (its text/plain is only "<Figure ...>") or a widget/HTML-only output
                o.data = {k: v for k, v in data.items() if k in ("text/plain", "text/markdown")}
            kept.append(o)
        cell.outputs = kept
    nb.cells = [c for c in nb.cells if c.source.strip() or c.get("outputs")]
    return nb


def markdown_copies(myst: Path, out: Path, pages: list[Path]) -> list[Path]:
    """Write every page also as Markdown at `<nbdev name>.html.md` in `out` (`01_attention` -> `attention.html.md`,
    `checks/01_attention` -> `checks/attention.html.md`): the address that the `Docs:` line nbdev appends to each
    module docstring points to (nbdev's convention for readers that want text, e.g. LLMs). Returns the files written."""
    from nbconvert import MarkdownExporter
    from nbdev.config import nbpath2html
    exporter, written = MarkdownExporter(), []
    for page in (p for p in pages if p.suffix == ".ipynb"):
        body, _ = exporter.from_notebook_node(_markdown_view(nbformat.read(page, as_version=4)))
        dst = out / f"{nbpath2html(page.relative_to(myst)).as_posix()}.md"
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(body, encoding="utf-8")
        written.append(dst)
    return written


def run_sphinx(src: Path, out: Path, doctrees: Path) -> int:
    """Build HTML from `src` into `out` with `site/conf.py`; only warnings and errors are printed. Returns the exit code.

    Serial on purpose: on the 2-core machines `-j auto` was no faster, and its errors are harder to read."""
    from sphinx.cmd.build import build_main
    return build_main(["-b", "html", "-q", "-c", str(CONF_DIR), "-d", str(doctrees), str(src), str(out)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execute", action="store_true", help="execute every notebook first (into _build/executed/)")
    ap.add_argument("--workers", type=int, default=2, help="notebooks executed at once")
    ap.add_argument("--out", type=Path, default=ROOT / "_site", help="output folder (default: _site)")
    ap.add_argument("--nbs", type=Path, default=ROOT / "nbs", help="notebook folder (default: nbs)")
    ap.add_argument("--build", type=Path, default=ROOT / "_build", help="intermediate files (default: _build)")
    ap.add_argument("--title", default="transformerbook", help="title of the home page when nbs has no index.ipynb")
    args = ap.parse_args(argv)
    nbs, build = args.nbs.resolve(), args.build.resolve()

    start = time.perf_counter()
    book = book_notebooks(nbs)  # listed once: notebooks added meanwhile wait for the next build
    src_root = nbs
    if args.execute:
        src_root = build / "executed"
        print(f"Executing the notebooks into {src_root} ...", flush=True)
        paths = [str(p) for p in [book[0], *book[1], *book[2]] if p]
        if execute_nbs.main([*paths, "--out", str(src_root), "--root", str(nbs), "--workers", str(args.workers)]):
            print("error: some notebooks failed to execute (see above); the site was not built", file=sys.stderr)
            return 1
    pages = prepare_sources(nbs, src_root, build / "myst", args.title, book)
    figures.report_stand_ins([src_root / p.relative_to(nbs) for p in book[1]])  # GPT-2 stand-ins (05-07)
    print(f"Translated {sum(p.suffix == '.ipynb' for p in pages)} notebooks; running Sphinx ...", flush=True)
    code = run_sphinx(build / "myst", args.out, build / "doctrees")
    if code:
        print(f"error: Sphinx failed (exit code {code})", file=sys.stderr)
        return code
    markdown_copies(build / "myst", args.out, pages)
    explorers.write_data(args.out / "_static" / "explorers" / "data")  # in-page explorers (cached)
    if (nbs / "llms.txt").is_file():  # nbdev-export's index of the modules and their Markdown pages
        shutil.copy2(nbs / "llms.txt", args.out / "llms.txt")
    print(f"Built {args.out}/ in {time.perf_counter() - start:.0f} s. Open {args.out / 'index.html'} in a browser, "
          f"or serve it: python -m http.server --directory {args.out} --bind 127.0.0.1 8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
