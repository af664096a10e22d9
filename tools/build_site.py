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
import math
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
import live_assets  # noqa: E402
import nb2myst  # noqa: E402

CONF_DIR = ROOT / "site"
HOME = "index"
CHECKS = "checks"  # nbs/checks/: the exercise checkers, listed as an appendix
_BLOCK_ATTRS = re.compile(r"^\{\.[\w-]+\}[ \t]*\n", re.M)
ASSET_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}  # images that markdown cells may reference
DOWNLOADS = "_notebooks"  # copies of the notebooks that pages offer for download (excluded from Sphinx's sources)
BRANCH = "main"  # the repository branch that the GitHub and Colab links open
COLAB = "https://colab.research.google.com/github/"
SEARCH_NOTE = (":::{note}\nThe search box works when the site is opened from its files, but the snippets under each "
               "result need the site served: run `make serve` and open <http://127.0.0.1:8000>.\n:::")
WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE = 200, 15  # reading speeds behind each chapter's "about N minutes"


def book_notebooks(nbs: Path) -> tuple[Path | None, list[Path], list[Path]]:
    "The home page (`index.ipynb`, or None), the chapters in file-name order, and the checker notebooks."
    chapters = sorted(p for p in nbs.glob("*.ipynb") if p.stem != HOME)
    home = nbs / f"{HOME}.ipynb"
    return (home if home.is_file() else None), chapters, sorted((nbs / CHECKS).glob("*.ipynb"))


def toctree(entries: list[str], caption: str) -> str:
    "A hidden MyST toctree: sphinx-book-theme shows it as a captioned section of the left navigation."
    return "```{toctree}\n:hidden:\n:maxdepth: 2\n:caption: " + caption + "\n\n" + "\n".join(entries) + "\n```"


def chapter_number(stem: str) -> str | None:
    "The chapter number in a notebook file name, as its exercises use it: `05a_tokenization` -> `5a`, `11_x` -> `11`."
    m = re.match(r"(\d+)([a-z]*)_", stem)
    return f"{int(m.group(1))}{m.group(2)}" if m else None


def notebook_title(nb) -> str | None:
    "The text of the notebook's first `# Title` heading, or None."
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (m := re.search(r"^#[ \t]+(.+?)[ \t]*$", cell.source, re.M)):
            return m.group(1)
    return None


def numbered_entry(doc: str, nb) -> str:
    "A toctree entry for page `doc` titled with its chapter number: `5a. Tokenization <05a_tokenization>`."
    number, title = chapter_number(doc.rsplit("/", 1)[-1]), notebook_title(nb)
    if not (number and title):
        return doc
    title = title.replace("<", "\\<")  # `<` would start the target of the entry
    return f"{number}. {title} <{doc}>"


def repository_url(root: Path = ROOT) -> str | None:
    "The project's `[project.urls] Repository` in `pyproject.toml` (the one setting all notebook links derive from)."
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        import tomllib  # Python >= 3.11
        url = tomllib.loads(text).get("project", {}).get("urls", {}).get("Repository", "")
    except ModuleNotFoundError:  # Python 3.10: the one line is enough
        url = (m := re.search(r'^Repository\s*=\s*"([^"]*)"', text, re.M)) and m.group(1) or ""
    return url.rstrip("/") or None


def runnable_links(rel: Path, repo: str | None, nbs_dir: str = "nbs") -> str:
    """MyST for the links to a runnable copy of notebook `rel` (relative to the notebook folder): a download of the
    `.ipynb` (served by the site itself), the file in the repository `repo`, and, for a GitHub repository, Colab."""
    path = rel.as_posix()
    links = [f"{{download}}`Download the notebook <{'/' + DOWNLOADS + '/' + path}>`"]
    if repo:
        links.append(f"[View it in the repository]({repo}/blob/{BRANCH}/{nbs_dir}/{path})")
        if m := re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?", repo):
            links.append(f"[Open in Colab]({COLAB}{m.group(1)}/blob/{BRANCH}/{nbs_dir}/{path})")
    return " · ".join(links)


def reading_minutes(nb) -> int:
    """Minutes to read a translated notebook's prose (`WORDS_PER_MINUTE`) and shown code (`CODE_LINES_PER_MINUTE`),
    rounded up to 5; outputs and folded cells (imports, tests) are not counted."""
    words = sum(len(re.findall(r"\w+", c.source)) for c in nb.cells if c.cell_type == "markdown"
                and not c.source.startswith("~~~{admonition}"))  # API boxes are reference, not reading
    lines = sum(len(c.source.splitlines()) for c in nb.cells if c.cell_type == "code"
                and not {"remove-input", "hide-input"} & set(c.metadata.get("tags", [])))
    return max(5, 5 * math.ceil((words / WORDS_PER_MINUTE + lines / CODE_LINES_PER_MINUTE) / 5))


def add_chapter_header(nb, links: str | None) -> None:
    "Put the reading time and the `links` line under the title and summary (lead) of translated notebook `nb`."
    cell = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    if cell is None:
        return
    meta = "{.chapter-meta}\n" + f"**About {reading_minutes(nb)} minutes** to read" + (f" · {links}" if links else "")
    src = cell.source
    end = m.end() if (m := re.search(r"\{\.lead\}\n.*?(?:\n[ \t]*\n|\Z)", src, re.S)) else len(src.split("\n", 1)[0])
    cell.source = (src[:end].rstrip() + "\n\n" + meta + "\n\n" + src[end:].lstrip()).rstrip()


def home_page(home: Path | None, chapters: list[str], checks: list[str], title: str):
    "The translated home notebook (or a minimal one with `title`) with the book's table of contents (entries) appended."
    nb = (nb2myst.translate(nbformat.read(home, as_version=4)) if home
          else nbformat.v4.new_notebook(cells=[new_markdown_cell(f"# {title}")]))
    nb.cells.append(new_markdown_cell(SEARCH_NOTE))
    nb.cells.append(new_markdown_cell(toctree(chapters, "Chapters")))
    if checks:
        nb.cells.append(new_markdown_cell(toctree(checks, "Appendix: exercise checkers")))
    return nb


def prepare_sources(nbs: Path, src_root: Path, dst: Path, title: str,
                    book: tuple[Path | None, list[Path], list[Path]], solutions: bool = True) -> list[Path]:
    """Translate the `book` (home, chapters, checks: see `book_notebooks`; read from `src_root`, laid out like `nbs`)
    into `dst`, with the toctree (chapters titled with their numbers); copy images; delete files in `dst` without a
    source. With `solutions=False`, exercise solutions are left out. Returns the written files."""
    home, chapters, checks = book

    def doc(path: Path) -> str:  # Sphinx document name, e.g. "checks/01_attention"
        return path.relative_to(nbs).with_suffix("").as_posix()

    written, labels, entries, repo = [], {}, {}, repository_url()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for nb_path in chapters + checks:
            rel = nb_path.relative_to(nbs)
            original = nbformat.read(src_root / rel, as_version=4)
            nb = figures.translate(original, lambda n: nb2myst.translate(n, solutions=solutions))
            for label in nb2myst.box_labels(nb):
                labels.setdefault(label, []).append(str(rel))
            # The runnable copy: the notebook itself (without solutions in a build without them; then no links to
            # the repository's copy, which has them).
            copy = original if solutions else nb2myst.without_solutions(original)
            nb2myst.write_notebook(copy, dst / DOWNLOADS / rel)
            written.append(dst / DOWNLOADS / rel)
            add_chapter_header(nb, runnable_links(rel, repo if solutions else None))
            nb2myst.write_notebook(nb, dst / rel)
            written.append(dst / rel)
            entries[nb_path] = numbered_entry(doc(nb_path), nb) if nb_path in chapters else doc(nb_path)
        index = dst / f"{HOME}.ipynb"
        home_nb = home_page(home and src_root / home.relative_to(nbs), [entries[p] for p in chapters],
                            [entries[p] for p in checks], title)
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
    for page in (p for p in pages if p.suffix == ".ipynb" and p.relative_to(myst).parts[0] != DOWNLOADS):
        body, _ = exporter.from_notebook_node(_markdown_view(nbformat.read(page, as_version=4)))
        dst = out / f"{nbpath2html(page.relative_to(myst)).as_posix()}.md"
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(body, encoding="utf-8")
        written.append(dst)
    return written


def run_sphinx(src: Path, out: Path, doctrees: Path) -> int:
    """Build HTML from `src` into `out` with `site/conf.py`; only warnings and errors are printed. Returns the exit
    code.

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
    ap.add_argument("--no-solutions", action="store_true",
                    help="leave the exercises' solutions and the questions' answers out of the site (`SOLUTIONS=0`)")
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
    pages = prepare_sources(nbs, src_root, build / "myst", args.title, book, solutions=not args.no_solutions)
    figures.report_stand_ins([src_root / p.relative_to(nbs) for p in book[1]])  # GPT-2 stand-ins (05-07)
    n_pages = sum(p.suffix == ".ipynb" and DOWNLOADS not in p.parts for p in pages)
    print(f"Translated {n_pages} notebooks; running Sphinx ...", flush=True)
    code = run_sphinx(build / "myst", args.out, build / "doctrees")
    if code:
        print(f"error: Sphinx failed (exit code {code})", file=sys.stderr)
        return code
    markdown_copies(build / "myst", args.out, pages)
    explorers.write_data(args.out / "_static" / "explorers" / "data")  # in-page explorers (cached)
    live_assets.write_live(args.out / "_static")  # the live explorers' runtime and models; prints their size
    if (nbs / "llms.txt").is_file():  # nbdev-export's index of the modules and their Markdown pages
        shutil.copy2(nbs / "llms.txt", args.out / "llms.txt")
    print(f"Built {args.out}/ in {time.perf_counter() - start:.0f} s. Open {args.out / 'index.html'} in a browser, "
          f"or serve it: python -m http.server --directory {args.out} --bind 127.0.0.1 8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
