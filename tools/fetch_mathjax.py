"""Install the site's browser assets from npm into `site/node_modules`: MathJax 3, so the website typesets math
offline, axe-core, the accessibility engine that `tests/test_site.py` runs on every page, and onnxruntime-web, which
runs the book's models in the live explorers (`tools/live_assets.py` copies its WebAssembly build into the site).

`site/package.json` pins the versions and `site/package-lock.json` locks them; `npm ci` installs exactly that.
Idempotent: when every pinned version is already installed this returns at once without calling npm.
Without npm it only warns (exit 0): the site then loads MathJax from its CDN, which works for online readers.

    python tools/fetch_mathjax.py
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent.parent / "site"
MATHJAX_DIR = SITE / "node_modules" / "mathjax"


def wanted_version() -> str:
    "The MathJax version pinned in `site/package.json`."
    return json.loads((SITE / "package.json").read_text())["dependencies"]["mathjax"]


def installed_version() -> str | None:
    "The MathJax version in `site/node_modules`, or None when it is missing or incomplete."
    pkg = MATHJAX_DIR / "package.json"
    if not pkg.is_file() or not (MATHJAX_DIR / "es5" / "tex-mml-chtml.js").is_file():
        return None
    return json.loads(pkg.read_text()).get("version")


def missing_packages() -> list[str]:
    "The packages of `site/package.json` whose pinned version is not the one installed in `site/node_modules`."
    wanted = json.loads((SITE / "package.json").read_text())["dependencies"]
    missing = []
    for name, version in wanted.items():
        pkg = SITE / "node_modules" / name / "package.json"
        if not pkg.is_file() or json.loads(pkg.read_text()).get("version") != version:
            missing.append(name)
    if "mathjax" not in missing and installed_version() is None:  # present but incomplete
        missing.append("mathjax")
    return missing


def main() -> int:
    want = wanted_version()
    if not missing_packages():
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("warning: npm not found; the website will load MathJax from its CDN (math needs a network "
              "connection when reading). Install Node.js/npm and rerun `python tools/fetch_mathjax.py`.",
              file=sys.stderr)
        return 0
    cmd = [npm, "ci" if (SITE / "package-lock.json").is_file() else "install",
           "--prefix", str(SITE), "--no-audit", "--no-fund", "--loglevel=error"]
    print(f"Installing {', '.join(missing_packages())} into {(SITE / 'node_modules').relative_to(SITE.parent)}",
          flush=True)
    done = subprocess.run(cmd, cwd=SITE)
    if done.returncode != 0 or installed_version() != want:
        print(f"warning: `{' '.join(cmd)}` failed; the website will load MathJax from its CDN.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
