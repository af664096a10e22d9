"""Give every chapter notebook a hidden first code cell that installs the book's package when it is missing.

A chapter downloaded from the website or opened in Colab (the links under each chapter's title) runs in a fresh
environment without `transformerbook`; this cell installs it from the repository (`[project.urls] Repository` in
`pyproject.toml`) there, and does nothing where the package is already installed (`make env`, the tests). It is
`#| hide`, so the website does not show it. Idempotent: an existing install cell is updated in place.

    python tools/add_install_cell.py               # every chapter in nbs/ (not index.ipynb, not nbs/checks/)
    python tools/add_install_cell.py nbs/07_sampling.ipynb --check   # exit 1 if a notebook lacks the current cell
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))
import build_site  # noqa: E402  (the repository setting and the list of chapters)

MARKER = "# Fresh environments (Colab, a downloaded notebook): install the book's package if it is missing."


def install_source(repo: str, package: str = "transformerbook") -> str:
    "The install cell's code for the package `package` published at git repository `repo`."
    return (f"#| hide\n{MARKER}\ntry:\n    import {package}  # noqa: F401 (is it installed?)\nexcept ImportError:\n"
            f"    %pip install --quiet \"{package} @ git+{repo}\"")


def add_install_cell(nb, source: str) -> bool:
    "Put `source` in the install cell of `nb`, inserting the cell just before the first code cell. True if changed."
    existing = next((c for c in nb.cells if c.cell_type == "code" and MARKER in c.source), None)
    if existing is not None:
        if existing.source == source:
            return False
        existing.source = source
        return True
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    cell = nbformat.v4.new_code_cell(source)
    cell.id = "install0"
    nb.cells.insert(first_code, cell)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter in nbs/")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs the cell")
    args = ap.parse_args(argv)
    repo = build_site.repository_url()
    if not repo:
        print("error: pyproject.toml has no [project.urls] Repository", file=sys.stderr)
        return 1
    source = install_source(repo)
    paths = args.notebooks or build_site.book_notebooks(ROOT / "nbs")[1]
    stale = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if add_install_cell(nb, source):
            stale.append(path)
            if not args.check:
                nbformat.write(nb, path)
    for path in stale:
        print(f"{'needs' if args.check else 'updated'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
