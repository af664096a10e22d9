"""Helpers shared by the benchmarks in `bench/` (imported as a sibling module: run the scripts as
`python bench/X.py`)."""
from __future__ import annotations

from torch.utils import benchmark


def measure(stmt: str, env: dict, threads: int, min_run_time: float, label: str, sub_label: str, desc: str):
    "A torch.utils.benchmark Measurement of `stmt`, run on `threads` threads for at least `min_run_time` seconds."
    timer = benchmark.Timer(stmt=stmt, globals=env, num_threads=threads, label=label, sub_label=sub_label,
                            description=desc)
    return timer.blocked_autorange(min_run_time=min_run_time)
