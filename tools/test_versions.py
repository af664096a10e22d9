"""`make test-latest` / `make test-oldest`: run the whole suite on the newest (or the oldest) versions that
`pyproject.toml` allows, in a venv of its own, and report what differs from the lock.

    python tools/test_versions.py latest   # uv pip compile --upgrade: the newest release inside every bound
    python tools/test_versions.py oldest   # uv pip compile --resolution lowest-direct: each direct dependency's floor

Steps: compile `reports/<run>-requirements.txt` with uv (site/constraints.txt still applies: the site's toolchain is
pinned on purpose), build `.venv-<run>` with exactly that (`uv pip sync`), then lint, `nbdev-test` and pytest (junit
XML) under `nice`. The report (`reports/<run>-report.txt`, also printed) lists the packages whose versions differ from
the lock, the notebooks and tests whose outcome differs from the locked run's (`reports/test-lock.xml`, written by
`make test`; without it, from "every test passes", which is what `make test` promises on the lock), and the wall time
of each step. Exit status 1 when lint or a notebook fails, or a test fails, errors or is gone where the baseline ran
it (`worse`); a test skipped here and not in the baseline is reported but is no failure: the suite's skips are
conditions of the machine or the venv (no CUDA; a venv that is not the lock), which a fresh clone without a locked
report always meets. Only uv and the standard library are needed to start.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from torch_index import torch_options  # noqa: E402

REPORTS = ROOT / "reports"
RESOLUTION = {"latest": ["--upgrade"], "oldest": ["--upgrade", "--resolution", "lowest-direct"]}
NBDEV_FAILED = "nbdev Tests Failed On The Following Notebooks:"


def junit_outcomes(path: Path) -> dict[str, str]:
    """`{test id: outcome}` from a pytest junit XML file; outcome is passed, failed, error or skipped. `make test` runs
    pytest-xdist with `--dist loadgroup`, which ends each name with `@group` (the module); this run's pytest has no
    groups, so the suffix is dropped and the two reports name a test alike."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = re.sub(r"@\w+$", "", case.get("name", ""))  # "test_x[a-b]@test_mod" -> "test_x[a-b]"
        test = f"{case.get('classname', '')}::{name}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[test] = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(kinds[0] if kinds else "",
                                                                                           "passed")
    return outcomes


def changed_outcomes(run: dict[str, str], baseline: dict[str, str] | None) -> list[tuple[str, str, str]]:
    """`(test, baseline outcome, this run's outcome)` for every test whose outcome differs, sorted. Without a baseline
    the lock's promise stands in for it: every test passes (so a skip is reported too)."""
    if baseline is None:
        return sorted((t, "passed", o) for t, o in run.items() if o != "passed")
    tests = sorted(set(run) | set(baseline))
    return [(t, baseline.get(t, "absent"), run.get(t, "absent")) for t in tests
            if baseline.get(t, "absent") != run.get(t, "absent")]


def worse(changed: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    "The changed outcomes that fail the run: a test that now fails, errors or is absent (a new skip is only reported)."
    return [c for c in changed if c[2] in ("failed", "error", "absent")]


def failed_notebooks(log: str) -> list[str]:
    "The notebooks `nbdev-test` lists as failed at the end of its output `log` (none: an empty list)."
    if NBDEV_FAILED not in log:
        return []
    return [line.strip() for line in log.split(NBDEV_FAILED, 1)[1].splitlines()
            if line.strip().endswith(".ipynb")]


def run_step(name: str, cmd: list[str], log: Path, env: dict, timings: dict) -> int:
    "Run `cmd` (niced) with its output in `log`; record its wall time under `name`; return its exit status."
    start = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.run(["nice", "-n", "10", *cmd], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    timings[name] = time.monotonic() - start
    print(f"  {name}: exit {code} in {timings[name]:.0f} s (log: {log.relative_to(ROOT)})", flush=True)
    return code


def build_venv(run: str, timings: dict) -> Path:
    "Compile this run's requirements and build `.venv-<run>` with exactly them; return its python."
    venv, reqs = ROOT / f".venv-{run}", REPORTS / f"{run}-requirements.txt"
    torch = torch_options(ROOT / "constraints-torch.txt")
    start = time.monotonic()
    subprocess.run(["uv", "pip", "compile", "pyproject.toml", "--extra", "dev", "--extra", "docs",
                    "-c", "site/constraints.txt", "--python", sys.executable, *torch, *RESOLUTION[run],
                    "--quiet", "-o", str(reqs)], cwd=ROOT, check=True)
    subprocess.run(["uv", "venv", "--quiet", "--clear", "--seed", "--python", sys.executable, str(venv)], cwd=ROOT,
                   check=True)
    python = venv / "bin" / "python"
    subprocess.run(["uv", "pip", "sync", "--quiet", "--python", str(python), *torch, str(reqs)], cwd=ROOT, check=True)
    subprocess.run(["uv", "pip", "install", "--quiet", "--python", str(python), "--no-deps", "-e", "."], cwd=ROOT,
                   check=True)
    subprocess.run([str(python), "tools/fetch_mathjax.py"], cwd=ROOT, check=True)
    timings["install"] = time.monotonic() - start
    print(f"  install: {timings['install']:.0f} s ({reqs.relative_to(ROOT)})", flush=True)
    return python


def version_differences(python: Path) -> list[list]:
    "The `(package, installed, locked)` triples of `transformerbook.environment.lock_differences`, from `python`."
    code = ("import json; from transformerbook.environment import *; "
            "print(json.dumps(lock_differences(installed_versions(), read_lock())))")
    return json.loads(subprocess.run([str(python), "-c", code], cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout)


def report(run: str, versions: list, notebooks: list[str], tests: list, baseline: Path | None,
           timings: dict, lint: int) -> str:
    "The text of the run's report."
    lines = [f"make test-{run}: {len(versions)} package(s) differ from the lock"]
    width = max([len(v[0]) for v in versions] + [1])
    lines += [f"  {n:<{width}}  {have or 'not installed':<16} (lock: {want or 'not in the lock'})"
              for n, have, want in versions]
    lines.append(f"lint (ruff): {'passed' if lint == 0 else 'FAILED'}")
    lines.append(f"notebooks (nbdev-test) that failed, all of which pass on the lock: {notebooks or 'none'}")
    source = baseline.relative_to(ROOT) if baseline else "no locked report (make test writes one): every test passes"
    lines.append(f"pytest tests whose outcome changed (baseline: {source}): {len(tests) or 'none'}")
    lines += [f"  {t}: {was} -> {now}" + ("" if (t, was, now) in worse(tests) else " (reported, not a failure)")
              for t, was, now in tests]
    lines.append("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return "\n".join(lines)


def main(run: str) -> int:
    if run not in RESOLUTION:
        raise SystemExit(f"usage: {sys.argv[0]} latest|oldest (not {run!r})")
    REPORTS.mkdir(exist_ok=True)
    timings, start = {}, time.monotonic()
    print(f"make test-{run}: building .venv-{run}", flush=True)
    python = build_venv(run, timings)
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(python.parent.parent), "OMP_NUM_THREADS": os.environ.get("NB_THREADS", "1")}
    workers = os.environ.get("WORKERS", "2")
    lint = run_step("lint", [str(python.parent / "ruff"), "check", "."], REPORTS / f"{run}-lint.log", env, timings)
    nbdev = run_step("nbdev-test", [str(python.parent / "nbdev-test"), "--n-workers", workers, "--timing"],
                     REPORTS / f"{run}-nbdev.log", env, timings)
    xml = REPORTS / f"{run}-pytest.xml"
    run_step("pytest", [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"],
             REPORTS / f"{run}-pytest.log", env, timings)
    timings["total"] = time.monotonic() - start
    baseline = REPORTS / "test-lock.xml"
    baseline = baseline if baseline.is_file() else None
    tests = changed_outcomes(junit_outcomes(xml) if xml.is_file() else {},
                             junit_outcomes(baseline) if baseline else None)
    notebooks = failed_notebooks((REPORTS / f"{run}-nbdev.log").read_text(errors="replace"))
    if nbdev and not notebooks:  # it stopped before its summary (a notebook's kernel could not start, say)
        notebooks = [f"nbdev-test stopped with exit {nbdev} before listing failures: see {run}-nbdev.log"]
    text = report(run, version_differences(python), notebooks, tests, baseline, timings, lint)
    (REPORTS / f"{run}-report.txt").write_text(text + "\n")
    print(text)
    return 1 if (worse(tests) or notebooks or lint) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
