"""Print the installer options that make the lock's CPU build of torch (`torch==X+cpu`, Linux) installable.

`python tools/torch_index.py requirements-lock.txt` prints `--find-links DIR` when a folder pip already reads
(`find-links` in pip's configuration or `$PIP_FIND_LINKS`) holds that wheel for this Python, otherwise PyTorch's CPU
index (`--extra-index-url https://download.pytorch.org/whl/cpu`), and nothing off Linux (the lock pins PyPI's torch
there). So an install never waits on a host it does not need: the machine with a local wheel never asks PyTorch's
index, and a laptop gets the `+cpu` build from where PyTorch publishes it. Used by `make env`, `make lock`,
`make test-latest` and `make test-oldest`; stdlib only (it runs before the venv has anything)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip_find_links() -> list[Path]:
    "The local folders pip reads wheels from: `find-links` of every pip configuration file, then `$PIP_FIND_LINKS`."
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    links = [v for k, v in re.findall(r"^(\S+)='(.*)'$", out, re.M) if k.endswith("find-links")]
    links += [os.environ.get("PIP_FIND_LINKS", "")]
    return [Path(p) for v in links for p in v.split() if p and "://" not in p and Path(p).is_dir()]


def torch_options(lock: Path, platform: str = sys.platform) -> list[str]:
    "The options for `pip install`/`uv pip` that make the lock's torch findable (see the module docstring)."
    pins = re.findall(r"^torch==(\S+\+cpu)\b", lock.read_text(encoding="utf-8"), re.M) if lock.is_file() else []
    if not (pins and platform.startswith("linux")):
        return []
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for folder in pip_find_links():
        if any(tag in w.name for v in pins for w in folder.glob(f"torch-{v}-*.whl")):
            return ["--find-links", str(folder)]
    return ["--extra-index-url", TORCH_CPU_INDEX]


if __name__ == "__main__":
    print(" ".join(torch_options(Path(sys.argv[1] if len(sys.argv) > 1 else "requirements-lock.txt"))))
