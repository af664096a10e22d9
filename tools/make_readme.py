"""Write README.md from nbs/index.ipynb, so the two never drift (nbdev's own `nbdev-readme` needs Quarto).

    python tools/make_readme.py          # write README.md
    python tools/make_readme.py --check  # exit 1 if README.md is out of date
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BANNER = "<!-- Generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file. -->\n\n"


def render(index: Path = ROOT / "nbs" / "index.ipynb") -> str:
    "The README text: the notebook's markdown cells, with links to chapter notebooks made relative to the repo root."
    nb = nbformat.read(index, as_version=4)
    parts = [c.source.strip() for c in nb.cells if c.cell_type == "markdown"]
    text = "\n\n".join(parts) + "\n"
    return BANNER + re.sub(r"\]\((?!https?:|/|#)([^)]+\.ipynb)\)", r"](nbs/\1)", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that README.md is up to date")
    args = ap.parse_args(argv)
    readme, text = ROOT / "README.md", render()
    if args.check:
        if not readme.exists() or readme.read_text(encoding="utf-8") != text:
            print("README.md is out of date with nbs/index.ipynb: run `python tools/make_readme.py`", file=sys.stderr)
            return 1
        return 0
    readme.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
