"""Shared fixtures: one torch thread for every test, the `tools/` scripts on `sys.path`, a synthetic chapter for the
site tests, one headless Chromium for every browser test (`chrome`), and each module's xdist group."""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_experiment(name: str):
    "The module `experiments/<name>.py` (the experiments are scripts, not a package), for a test to re-run a slice."
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"{name}_experiment", ROOT/"experiments"/f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
sys.path.insert(0, str(ROOT / "tools"))  # tools/ holds scripts, not a package


def _svg_plot() -> str:
    "A small matplotlib line plot as SVG text, as the book's notebooks store plots (tools/execute_nbs.py)."
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2), dpi=60)
    ax.plot([0, 1, 2, 3], [0, 1, 4, 9])
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue().decode()


SAMPLE_TABLE = "\n".join(f"{name:24}{tps:>14,}{mfu:>10.1%}{ratio:>12.2f}   (median of {n} passes, quiet machine)"
                         for name, tps, mfu, ratio, n in [("float32, 1 process", 12441, 0.644, 1.0, 3),
                                                          ("bfloat16 autocast", 12370, 0.640, 0.99, 3),
                                                          ("float32 compiled", 12714, 0.658, 1.02, 3)]) + "\n"
SAMPLE_MESSAGE = "note: " + " ".join(["this long message is one line of prose that a phone must wrap"] * 3) + "\n"


def make_sample_chapter():
    """An executed nbdev chapter with every construct the site translates: title + summary, math, hidden and
    `echo: false` cells, a PNG plot, a widget output, ANSI output, a printed table and a long printed line, an
    exercise with a solution, a question with an answer. Its exercise numbers (99.x) cannot clash with the book's."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
    code = lambda src, *outs: new_code_cell(src, outputs=list(outs), execution_count=1)
    stream = lambda text: new_output("stream", name="stdout", text=text)
    return new_notebook(cells=[
        new_markdown_cell("# Site sample chapter\n> A synthetic chapter that exercises every site feature."),
        code("#| hide\nimport math"),
        new_markdown_cell("Softmax turns scores $s_i$ into weights:\n\n"
                          "$$\nw_i = \\frac{e^{s_i}}{\\sum_j e^{s_j}}\n$$\n\n"
                          "::: {.callout-note}\nA Quarto callout.\n:::"),
        code("#| echo: false\nimport matplotlib.pyplot as plt\nplt.plot([0, 1, 2, 3], [0, 1, 4, 9]);",
             new_output("display_data", data={"image/svg+xml": _svg_plot(), "text/plain": "<Figure size 180x120>"})),
        code("#| output: false\nprint('hidden output')", stream("hidden output\n")),
        code("import ipywidgets as widgets\nwidgets.IntSlider()",
             new_output("execute_result", data={"application/vnd.jupyter.widget-view+json":
                                                {"model_id": "abc", "version_major": 2, "version_minor": 0},
                                                "text/plain": "IntSlider(value=0)"}, execution_count=1)),
        code("print('\\x1b[31mred\\x1b[0m text')", stream("\x1b[31mred\x1b[0m text\n")),
        code("print_table()", stream(SAMPLE_TABLE)),  # a printed table: it scrolls on a phone (book_outputs.py)
        code("print(message)", stream(SAMPLE_MESSAGE)),  # a long line that is not a table: it wraps
        new_markdown_cell("## Exercises"),
        new_markdown_cell("### Exercise 99.1 — Add one (★☆☆)\n\nWrite `add_one(x)` that returns `x + 1`."),
        code("#| exercise\ndef add_one(x):\n    raise NotImplementedError"),
        code("#| exercise\nprint('NOT YET: add_one raises NotImplementedError')",
             stream("NOT YET: add_one raises NotImplementedError\n")),
        new_markdown_cell("#### Solution\n\nAdd one:"),
        code("def add_one(x):\n    return x + 1\nprint('PASS: add_one is correct')",
             stream("PASS: add_one is correct\n")),
        new_markdown_cell("### Question 99.2 — Why add one? (poll)\n\nWhy would anyone add one?"),
        new_markdown_cell("#### Answer\n\nBecause counting starts at zero."),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                 "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}})


# `make test` runs pytest in several processes (pytest-xdist, `-n $(WORKERS) --dist loadgroup --no-loadscope-reorder`).
# Each test module stays in one process, so its module fixtures are built once and tests that share a resource
# (torchrun's ports, a cached model being trained) never run side by side. The longest modules are queued first, in
# this order, and the short ones fill in after, in collection order. The site's starts in one process and builds the
# site (`book`, 49 s unloaded) that the explorers' reads too; the other process starts with the torchrun tests, which
# need no site, and takes the explorers' next, by when the site is built (queued second, the explorers' waited 41-49 s
# for it on the lock). Before the site was shared each process built its own: pytest 750 s; shared, 649 s
# (2026-11-28, 2 cores).
LONGEST_FIRST = ("test_site", "test_distributed", "test_explorers")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Give every test the xdist group of its module and queue the `LONGEST_FIRST` modules first. It must run before
    xdist's own hook, which reads the marks into the node ids (after it, the groups were silently ignored); pytest 9.2
    broke that reading too, hence `pytest<9.2` (pyproject.toml). `test_environment` checks that the groups hold."""
    module = {item: item.module.__name__.rsplit(".", 1)[-1] for item in items}
    for item in items: item.add_marker(pytest.mark.xdist_group(module[item]))
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(module[item], len(rank)))  # stable: the rest keep their order


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    "The tests use tiny models: one torch thread is as fast, and far faster when other processes share the 2 cores."
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def sample_chapter():
    "A fresh copy of the synthetic chapter (see `make_sample_chapter`)."
    return make_sample_chapter()


def chromium() -> str:
    "Path of the Chromium the browser tests drive: `$CHROMIUM`, or the first one installed; the test fails without one."
    for path in [os.environ.get("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser",
                 "/usr/bin/google-chrome"]:
        if path and os.access(path, os.X_OK):
            return path
    pytest.fail("The browser tests need Chromium: run `make browser` (apt-get install chromium), "
                "or set CHROMIUM=/path/to/chrome")


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def chrome():
    """One headless Chromium for the whole session, shared by every browser test (`test_site`, `test_explorers`).
    Playwright's sync API runs one asyncio loop per process: a second `sync_playwright()` started while the first is
    open fails ("Sync API inside the asyncio loop"), so there is exactly one, here. Each test file opens its own
    contexts (fresh profiles) on it."""
    from playwright.sync_api import sync_playwright
    exe = chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def book(tmp_path_factory, worker_id):
    """The whole book's site (test_site.build_book): (output folder, page names, nbs folder), built once per run. Under
    xdist the first worker to ask builds it in the folder all workers share and the other waits on a file lock (the
    pattern pytest-xdist documents): each worker built its own before, 49 s unloaded, twice on the two cores.
    Tests read the site and never write into it."""
    import test_site
    if worker_id == "master": return test_site.build_book(tmp_path_factory.mktemp("site"))
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp().parent  # one per run, the parent of each worker's own
    with FileLock(shared/"book.lock"):
        if not (shared/"book"/"built").is_file():
            test_site.build_book(shared/"book")
            (shared/"book"/"built").touch()  # a failed build leaves no mark: the next worker tries again
    return test_site.build_book(shared/"book", build=False)
