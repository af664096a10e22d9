"""The package, the README and the notebooks stay in step: notebooks are the single source."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NOTEBOOKS = sorted((ROOT / "nbs").rglob("*.ipynb"))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory):
    "A copy of the project's sources in which nbdev-export and nbdev-clean may run without touching the checkout."
    dst = tmp_path_factory.mktemp("sync") / "project"
    dst.mkdir()
    shutil.copy(ROOT / "pyproject.toml", dst)
    shutil.copytree(ROOT / "nbs", dst / "nbs", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT / "transformerbook", dst / "transformerbook", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_nbdev_export_would_not_change_the_package(fresh_copy):
    before = _tree(fresh_copy / "transformerbook")
    subprocess.run([BIN / "nbdev-export"], cwd=fresh_copy, check=True, capture_output=True)
    after = _tree(fresh_copy / "transformerbook")
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"transformerbook/ is out of step with nbs/ (run nbdev-export and commit): {changed}"


def test_notebooks_are_clean(fresh_copy):
    before = {p: p.read_bytes() for p in sorted((fresh_copy / "nbs").rglob("*.ipynb"))}
    subprocess.run([BIN / "nbdev-clean", "--fname", str(fresh_copy / "nbs")], cwd=fresh_copy, check=True,
                   capture_output=True)
    dirty = [str(p.relative_to(fresh_copy)) for p, b in before.items() if p.read_bytes() != b]
    assert not dirty, f"notebooks not cleaned (run nbdev-clean --fname <nb>): {dirty}"


def test_readme_matches_index_notebook():
    r = subprocess.run([sys.executable, ROOT / "tools" / "make_readme.py", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


CHAPTERS = [p for p in NOTEBOOKS if p.parent.name == "nbs" and p.stem[:2].isdigit()]


@pytest.mark.parametrize("nb", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_saved_with_outputs(nb):
    "The website renders saved outputs, so every chapter is committed executed (code cells carry outputs)."
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    with_outputs = [c for c in code if c.get("outputs")]
    assert with_outputs, f"{nb.name} has no saved outputs: run `make outputs NB={nb.relative_to(ROOT)}`"


@pytest.mark.parametrize("nb", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_title_summary_and_exercises(nb):
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    assert md and md[0].startswith("# ") and "\n> " in md[0], f"{nb.name}: first cell must be '# Title' + '> summary'"
    text = "\n".join(md)
    if nb.stem not in {"00_notation", "00a_data", "00b_environment", "08a_cli"}:
        assert "## Summary" in text and "## Exercises" in text, f"{nb.name} lacks '## Summary' or '## Exercises'"
        assert text.count("### Exercise ") >= 3, f"{nb.name} has fewer than 3 exercises"


MODULES = sorted(p for p in (ROOT / "transformerbook").rglob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: ".".join(p.relative_to(ROOT).with_suffix("").parts))
def test_module_docstring_names_every_public_function_and_class(path):
    """`help(module)` starts from its docstring: each notebook's `#| export` "In the package" cell must name every
    public function and class it exports (constants in CAPITALS excepted), so the overview cannot fall behind."""
    import ast
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    assert "**In the package**" in doc, f"{path.name}: its notebook has no `#| export` 'In the package' cell"
    exported = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "__all__" for t in n.targets))
    missing = [name for name in exported if not name.isupper() and f"`{name}" not in doc]
    assert not missing, f"{path.name}: the module docstring does not mention {missing}"


def test_package_docstring_lists_every_module():
    import transformerbook
    listed = set(__import__("re").findall(r"^- `(transformerbook[\w.]*)`", transformerbook.__doc__,
                                          flags=__import__("re").M))
    expected = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in MODULES}
    assert listed == expected, f"missing {sorted(expected - listed)}, extra {sorted(listed - expected)}"


def _package_names_used(path: Path) -> list[tuple[str, str]]:
    "(module, name) for every `from transformerbook.m import name` and `alias.name` of an imported package module."
    import ast
    tree, aliases, used = ast.parse(path.read_text(encoding="utf-8")), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("transformerbook.")})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformerbook"):
            used += [(node.module, a.name) for a in node.names]
    used += [(aliases[n.value.id], n.attr) for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases]
    return used


def _missing_names(path: Path) -> list[str]:
    "The `transformerbook` names `path` uses that the package does not have (neither an attribute nor a submodule)."
    import importlib
    def has(module: str, name: str) -> bool:
        mod = importlib.import_module(module)
        is_package = hasattr(mod, "__path__")  # a name after a package may be a submodule not imported yet
        return hasattr(mod, name) or (is_package and importlib.util.find_spec(f"{module}.{name}") is not None)
    return [f"{module}.{name}" for module, name in _package_names_used(path) if not has(module, name)]


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.py")) + sorted((ROOT / "bench").glob("*.py")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_experiments_and_benchmarks_use_only_names_the_package_has(path):
    """`make experiments` and `make bench` run scripts that the quick tests import only in part; a name the package
    no longer has (renamed in a notebook) must fail here, not an hour into a run."""
    assert not _missing_names(path), f"{path.name} uses names the package no longer has: {_missing_names(path)}"


def test_the_name_check_finds_a_renamed_function(tmp_path):
    "Chapter 12's experiment once patched `multihead.attention_weights` after it had gone: the check sees that."
    script = tmp_path / "old.py"
    script.write_text("import transformerbook.multihead as multihead\nfrom transformerbook.lm_head import GPT, Gone\n"
                      "original = multihead.attention_weights\nmultihead.split_heads\n")
    assert _missing_names(script) == ["transformerbook.lm_head.Gone", "transformerbook.multihead.attention_weights"]
