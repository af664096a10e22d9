"""The package's layout: every import between modules points to an earlier chapter or the same one (no arrow back,
so no cycle), measured with the same walk as `tools/code_metrics.py` (issue 17)."""
import ast
import importlib
import importlib.util
import json
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "transformerbook"
_spec = importlib.util.spec_from_file_location("code_metrics", ROOT / "tools" / "code_metrics.py")
metrics = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(metrics)

MODULES = sorted(p for p in PACKAGE.glob("*.py") if p.stem not in ("_modidx", "__init__"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_every_module_has_a_place_in_the_chapter_order(path):
    "A module from a non-chapter notebook (no number) must be placed beside its chapter, else it would sort last."
    place = metrics.chapter_of(path)
    assert place[:2].isdigit() or path.stem == "__main__", f"{path.stem}: add it to CHAPTER_ORDER ({place!r})"


MAX_MODULE_LINES = 600  # STYLE.md: "a room is one idea and fits in a sitting (about 600 lines at most)"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_every_module_fits_in_a_sitting(path):
    "A module past the limit holds more than one idea (issue 23): split it by idea, as chapter 8's four rooms are."
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert n_lines <= MAX_MODULE_LINES, f"{path.name} has {n_lines} lines (> {MAX_MODULE_LINES}): split it by idea"


def test_import_arrows_point_to_earlier_chapters():
    arrows = metrics.import_arrows(PACKAGE)
    assert len(arrows) > 30  # the walk sees the imports (lazy ones inside functions included)
    backward = [f"{a}:{line} -> {b}" for a, b, line, forward in arrows if not forward]
    assert not backward, f"imports from a later chapter: {backward}"


def test_the_walk_finds_lazy_and_absolute_imports(tmp_path):
    "The walk would catch the old arrow: a lazy `from transformerbook.pretrained import ...` inside a method."
    source = ("def f():\n    from transformerbook.pretrained import from_pretrained\n"
              "from .masking import causal_mask\nimport transformerbook.data\n")
    found = metrics.imported_modules(ast.parse(source))
    assert sorted(found) == [(2, "pretrained"), (3, "masking"), (4, "data")]
    (tmp_path / "lm_head.py").write_text("# File to edit: ../nbs/06_lm_head.ipynb\n" + source)
    (tmp_path / "pretrained.py").write_text("# File to edit: ../nbs/pretrained.ipynb\nfrom .lm_head import GPT\n")
    (tmp_path / "masking.py").write_text("# File to edit: ../nbs/02_masking.ipynb\n")
    (tmp_path / "data.py").write_text("# File to edit: ../nbs/00a_data.ipynb\n")
    arrows = {(a, b): forward for a, b, _, forward in metrics.import_arrows(tmp_path)}
    assert arrows == {("lm_head", "pretrained"): False, ("lm_head", "masking"): True, ("lm_head", "data"): True,
                      ("pretrained", "lm_head"): True}


def test_the_model_module_does_not_know_about_hugging_face_loading():
    import transformerbook.lm_head as lm_head
    assert not hasattr(lm_head.GPT, "from_pretrained") and not hasattr(lm_head.GPTConfig, "from_hf")
    assert "pretrained" not in {m for _, m in metrics.imported_modules(ast.parse((PACKAGE / "lm_head.py").read_text()))}


def _cell(source: str, kind: str = "code") -> dict:
    return {"cell_type": kind, "source": source.splitlines(keepends=True)}


def test_the_rhythm_rule_catches_long_cells_and_cells_without_examples():
    "The rule itself can fail: a long exported cell, and two exported cells with only prose or hidden code between."
    long_cell = _cell("#| export\n" + "x = 1\n" * metrics.MAX_EXPORT_LINES)
    lengths, problems = metrics.notebook_rhythm([long_cell, _cell("x")])
    assert lengths == [metrics.MAX_EXPORT_LINES + 1] and len(problems) == 1 and "over" in problems[0]
    f, g = _cell("#| export\ndef f(): pass"), _cell("#| exporti\ndef _g(): pass")
    prose, hidden, example = _cell("Now g.", "markdown"), _cell("#| hide\nf()"), _cell("test_eq(f(), None)")
    assert len(metrics.notebook_rhythm([f, prose, hidden, g, example])[1]) == 1
    assert metrics.notebook_rhythm([f, example, g, example])[1] == []
    # exempt: an exported cell of imports only, and a folded guard right after the function it guards
    imports = _cell("#| export\nimport torch\nfrom torch import (\n    nn)")
    guard = _cell("#| exporti\n#| code-fold: true\nx = 1")
    assert metrics.notebook_rhythm([imports, f, guard, example, g, example])[1] == []


@pytest.mark.parametrize("name", [p.name for p in metrics.chapter_notebooks(ROOT)])
def test_notebook_rhythm(name):
    "STYLE.md: export cells stay short, each followed by an example or a test the reader sees (issue 17)."
    lengths, problems = metrics.rhythm(ROOT)[name]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", sorted((ROOT / "nbs" / "checks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_checker_appendix_cells_are_short(path):
    """The checker appendices keep their exported cells to the chapters' length too (their examples are the tests of
    tests/test_checkers.py, so only the length rule applies)."""
    lengths, _ = metrics.notebook_rhythm(json.loads(path.read_text(encoding="utf-8"))["cells"])
    assert lengths and max(lengths) <= metrics.MAX_EXPORT_LINES, f"{path.name}: cells of {sorted(lengths)[-3:]} lines"


REEXPORT_CLAIM = r"transformerbook\.(\w+)`; chapter \w+'s `transformerbook\.(\w+)` re-exports every name"


def test_companion_pages_are_re_exported_as_their_pages_say():
    "A companion page that says its chapter's module re-exports every name: each name of its `__all__` is there."
    claims = [m.groups() for nb in sorted((ROOT / "nbs").glob("*.ipynb"))
              for m in re.finditer(REEXPORT_CLAIM, nb.read_text(encoding="utf-8"))]
    assert len(claims) >= 5, claims  # chat, checkpoints, corpus, kv_cache, recipes
    for room, chapter in claims:
        names = importlib.import_module(f"transformerbook.{room}").__all__
        missing = [n for n in names if not hasattr(importlib.import_module(f"transformerbook.{chapter}"), n)]
        assert not missing, f"transformerbook.{chapter} does not re-export {missing} of transformerbook.{room}"


def test_names_an_in_the_package_paragraph_lists_are_public():
    "A function or class a chapter's 'In the package' paragraph names, defined in that module, is in its `__all__`."
    checked, private = 0, []
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] != "markdown" or "**In the package** (`transformerbook." not in text:
                continue
            module = importlib.import_module("transformerbook." + re.search(r"`transformerbook\.(\w+)`", text)[1])
            for name in sorted(set(re.findall(r"`([A-Za-z]\w*)", text))):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    obj = getattr(module, name, None)
                deprecated = caught or (getattr(obj, "__doc__", None) or "").startswith("Deprecated")
                if callable(obj) and getattr(obj, "__module__", None) == module.__name__ and not deprecated:
                    checked += 1
                    if name not in module.__all__: private.append(f"{nb.stem}: {module.__name__}.{name}")
    assert checked > 100, checked
    assert not private, f"named as the package's but not exported (#| exporti?): {private}"
