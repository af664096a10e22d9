"""Write README.md from nbs/index.ipynb, so the two never drift (nbdev's own `nbdev-readme` needs Quarto), and put the
versions the book was last tested with (read from the lock) where the notebook says `<!-- tested-versions -->`.

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
LOCK = ROOT / "transformerbook" / "requirements-lock.txt"
MARKER = "<!-- tested-versions -->"
BANNER = "<!-- Generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file. -->\n\n"


def _name(requirement: str) -> str:
    "The normalised project name at the start of a requirement (`Jinja2>=3` -> `jinja2`)."
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9._-]+)", requirement).group(1)).lower()


def tested_versions(lock: Path = LOCK, pyproject: Path = ROOT / "pyproject.toml") -> str:
    """Markdown naming the lock's version of every direct dependency in `pyproject` (with the platform where the lock
    pins several), and how many packages the lock pins in all."""
    import tomllib
    pins: dict[str, list[tuple[str, str]]] = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"([A-Za-z0-9._-]+)==(\S+)(?:\s*;\s*(.*?))?\s*(?:#.*)?$", line):
            pins.setdefault(_name(m[1]), []).append((m[2], (m[3] or "").strip()))
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {}).values()
    direct = [*project["dependencies"], *[r for extra in extras for r in extra]]
    names = sorted({_name(r) for r in direct} & set(pins))
    shown = ["`" + name + " " + " / ".join(v + (f" ({m})" if m else "") for v, m in pins[name]) + "`" for name in names]
    return (f"The book was last tested with these versions (from the lock, which pins {len(pins)} packages in all): "
            + ", ".join(shown) + ".")


def render(index: Path = ROOT / "nbs" / "index.ipynb", lock: Path = LOCK) -> str:
    """The README text: the notebook's markdown cells, with links to chapter notebooks made relative to the repo root
    and the tested versions (`tested_versions`) in place of the marker."""
    nb = nbformat.read(index, as_version=4)
    parts = [c.source.strip() for c in nb.cells if c.cell_type == "markdown"]
    text = ("\n\n".join(parts) + "\n").replace(MARKER, tested_versions(lock))
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
