"Unit tests of `tools/nb2myst.py`, the translation of nbdev notebooks for myst-nb, on small synthetic notebooks."
from __future__ import annotations

import re
import sys
import textwrap

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import nb2myst


def sources(nb) -> str:
    return "\n".join(c.source for c in nb.cells)


def code_cell(nb, text: str):
    return next(c for c in nb.cells if c.cell_type == "code" and text in c.source)


def test_directives_are_stripped_and_become_tags(sample_chapter):
    nb = nb2myst.translate(sample_chapter)
    assert "#|" not in sources(nb)
    assert code_cell(nb, "plt.plot").metadata.tags == ["remove-input"]
    assert code_cell(nb, "print('hidden output')").metadata.tags == ["remove-output"]
    assert code_cell(nb, "raise NotImplementedError").source.startswith("def add_one")  # `#| exercise` removed


def test_hidden_and_default_exp_cells_are_dropped():
    nb = nb2myst.translate(new_notebook(cells=[
        new_code_cell("#| default_exp attention"), new_code_cell("#| hide\nimport secret"),
        new_code_cell("#|hide\nx = 1"), new_code_cell("y = 2")]))
    assert [c.source for c in nb.cells] == ["y = 2"]


def test_exported_markdown_cell_keeps_its_text_without_the_directive():
    nb = nb2myst.translate(new_notebook(cells=[
        new_markdown_cell("# Title\n> summary"), new_markdown_cell("#| export\n**In the package**: `f`."),
        new_code_cell("y = 2")]))
    assert "#|" not in sources(nb)
    assert any(c.cell_type == "markdown" and c.source == "**In the package**: `f`." for c in nb.cells)


def test_directive_in_metadata_is_honoured():
    cell = new_code_cell("x = 1", metadata={"nbdev": {"hide": "true"}})
    assert nb2myst.translate(new_notebook(cells=[cell, new_code_cell("y = 2")])).cells[0].source == "y = 2"


def test_widget_outputs_and_state_dropped_other_outputs_kept(sample_chapter):
    nb = nb2myst.translate(sample_chapter)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not any(nb2myst.WIDGET_MIME in o.get("data", {}) for o in outputs)
    assert "widgets" not in nb.metadata
    assert code_cell(nb, "widgets.IntSlider").outputs == []
    assert "image/svg+xml" in code_cell(nb, "plt.plot").outputs[0].data


def test_ansi_escapes_stripped():
    err = new_output("error", ename="ValueError", evalue="bad", traceback=["\x1b[0;31mValueError\x1b[0m: bad"])
    nb = nb2myst.translate(new_notebook(cells=[new_code_cell("f()", outputs=[err])]))
    assert nb.cells[0].outputs[0].traceback == ["ValueError: bad"]


def test_title_summary_becomes_lead_paragraph(sample_chapter):
    first = nb2myst.translate(sample_chapter).cells[0].source
    assert first.startswith("# Site sample chapter\n")
    assert "\n{.lead}\nA synthetic chapter" in first and "\n>" not in first


def test_exercise_and_solution_are_gated_around_their_code(sample_chapter):
    nb = nb2myst.translate(sample_chapter)
    kinds = []
    for c in nb.cells:
        m = re.match(r"~~~\{(\w+-\w+)\}", c.source)
        kinds.append(m.group(1) if m else "code" if c.cell_type == "code" else "md")
    i = kinds.index("exercise-start")
    assert kinds[i:i + 6] == ["exercise-start", "code", "code", "exercise-end", "solution-start", "code"]
    assert kinds[i + 6:] == ["solution-end", "exercise-start", "exercise-end", "solution-start", "solution-end"]
    start = nb.cells[i].source
    assert start.startswith("~~~{exercise-start} Exercise 99.1 — Add one (★☆☆)\n"
                            ":label: ex-99-1\n:nonumber:\n~~~")
    assert nb.cells[i + 4].source.startswith("~~~{solution-start} ex-99-1\n:label: sol-99-1\n:class: dropdown\n~~~")
    assert nb2myst.box_labels(nb) == ["ex-99-1", "sol-99-1", "q-99-2", "ans-99-2"]


def test_solution_ends_at_next_section_and_exercise_without_solution_is_closed():
    nb = nb2myst.translate(new_notebook(cells=[
        new_markdown_cell("### Exercise 2.1 — First"), new_code_cell("stub()"),
        new_markdown_cell("#### Solution"), new_code_cell("solve()"),
        new_markdown_cell("## Further reading\n\nMore."),
        new_markdown_cell("### Exercise 2.2 — No solution given"), new_code_cell("stub2()")]))
    texts = [c.source.split("\n")[0] for c in nb.cells]
    assert texts == ["~~~{exercise-start} Exercise 2.1 — First", "stub()", "~~~{exercise-end}",
                     "~~~{solution-start} ex-2-1", "solve()", "~~~{solution-end}", "## Further reading",
                     "~~~{exercise-start} Exercise 2.2 — No solution given", "stub2()", "~~~{exercise-end}"]


@pytest.mark.parametrize("md, expected", [
    ("## Softmax {#sec-softmax}", "(sec-softmax)=\n## Softmax"),
    ("## Keep $e^{x}$", "## Keep $e^{x}$"),
    ("[src](https://x.org/a.py){target=\"_blank\"}", "[src](https://x.org/a.py)"),
    ("::: {.callout-tip}\nTip text\n:::", ":::{tip}\nTip text\n:::"),
    ("::: {.callout-warning title=\"Careful\"}\nText\n:::", ":::{admonition} Careful\n:class: warning\nText\n:::"),
    ("::: {.column-margin}\nAside\n:::", "Aside"),
    (":::{note}\nMyST's own fence\n:::", ":::{note}\nMyST's own fence\n:::"),
    ("::: {.callout-note}\n::: {.inner}\nx\n:::\n:::", ":::{note}\nx\n:::"),
])
def test_quarto_markup_is_translated(md, expected):
    assert nb2myst.clean_quarto(md) == expected


@pytest.fixture
def fake_lib(tmp_path, monkeypatch):
    "An importable package `fakebook` with module `checks.toy`, standing in for an nbdev-exported module."
    pkg = tmp_path / "fakebook" / "checks"
    pkg.mkdir(parents=True)
    (tmp_path / "fakebook" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "toy.py").write_text(textwrap.dedent('''
        def add(a: int,  # first
                b: int,  # second
               ) -> int:
            "Add `a` and `b`."
            return a + b

        class Box:
            "A box."
            def __init__(self, size: int): self.size = size

        def _private(): pass
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fakebook"
    for name in [m for m in sys.modules if m.startswith("fakebook")]:
        del sys.modules[name]


def test_export_cells_get_api_docs_of_public_objects(fake_lib):
    src = "#| export\ndef add(a, b): return a + b\nclass Box: pass\ndef _private(): pass"
    nb = nb2myst.translate(new_notebook(cells=[new_code_cell("#| default_exp checks.toy"), new_code_cell(src),
                                               new_code_cell("#| exporti\ndef helper(): pass")]), lib=fake_lib)
    assert [c.cell_type for c in nb.cells] == ["code", "markdown", "code"]  # no API doc after `exporti`
    doc = nb.cells[1].source
    assert doc.startswith("~~~{admonition} `add`\n:class: api\n") and doc.count(":class: api") == 2
    assert "*Add `a` and `b`.*" in doc and "*A box.*" in doc
    assert "def add(" not in doc and "class Box(" not in doc, "the signature repeats the code right above the box"
    assert "_private" not in doc
    hidden = nb2myst.translate(new_notebook(cells=[new_code_cell("#| default_exp checks.toy"),
                                                   new_code_cell("#| export\n#| echo: false\n" + src)]), lib=fake_lib)
    doc = hidden.cells[1].source  # the code is not shown: the box gives the signature
    assert "def add(" in doc and "# first" in doc and "class Box(" in doc
    for raw in ("---", "{target=", ":::", "#LNone"):
        assert raw not in doc


def test_missing_module_warns_instead_of_failing():
    nb = new_notebook(cells=[new_code_cell("#| default_exp not_there"), new_code_cell("#| export\ndef f(): pass")])
    with pytest.warns(UserWarning, match="cannot import"):
        out = nb2myst.translate(nb, lib="no_such_package_xyz")
    assert [c.source for c in out.cells] == ["def f(): pass"]


def test_translate_file_writes_only_on_change(tmp_path, sample_chapter):
    src, dst = tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb"
    nbformat.write(sample_chapter, src)
    assert nb2myst.translate_file(src, dst) is True
    assert nb2myst.translate_file(src, dst) is False
    nbformat.validate(nbformat.read(dst, as_version=4))


def test_answer_in_the_same_cell_as_its_question_is_split_out():
    nb = nb2myst.translate(new_notebook(cells=[
        new_markdown_cell("### Question 1.1 — Rows? (poll)\n\nRows or columns?\n\n#### Answer\n\nRows.\n\n"
                          "```python\n## not a heading\n```"),
        new_code_cell("check()")]))
    texts = [c.source for c in nb.cells]
    assert texts[0].startswith("~~~{exercise-start} Question 1.1 — Rows? (poll)")
    assert texts[0].endswith("Rows or columns?")
    assert texts[1] == "~~~{exercise-end}\n~~~"
    assert texts[2].startswith("~~~{solution-start} q-1-1\n:label: ans-1-1") and "## not a heading" in texts[2]
    assert texts[3:] == ["check()", "~~~{solution-end}\n~~~"]


@pytest.mark.parametrize("number", ["5a.1", "8b.2", "11.3", "11a.4", "12.10", "A.1"])
def test_exercise_numbers_of_any_chapter_are_boxed(number):
    nb = nb2myst.translate(new_notebook(cells=[
        new_markdown_cell(f"### Exercise {number} — Title (★☆☆)"), new_code_cell("stub()"),
        new_markdown_cell("#### Solution"), new_code_cell("solve()"),
        new_markdown_cell(f"### Question {number}0 — Why? (poll)"), new_markdown_cell("#### Answer\n\nBecause.")]))
    dashed = number.replace(".", "-")
    assert nb.cells[0].source.startswith(f"~~~{{exercise-start}} Exercise {number} — Title (★☆☆)\n"
                                         f":label: ex-{dashed}\n")
    assert nb2myst.box_labels(nb) == [f"ex-{dashed}", f"sol-{dashed}", f"q-{dashed}0", f"ans-{dashed}0"]
    assert not any(c.source.startswith("####") for c in nb.cells), "a Solution/Answer heading was left bare"


def test_unrecognised_exercise_heading_warns():
    with pytest.warns(UserWarning, match="not boxed"):
        nb2myst.translate(new_notebook(cells=[new_markdown_cell("### Exercise one — no number")]))


def test_hint_is_a_collapsed_dropdown_inside_the_exercise_before_the_solution():
    nb = nb2myst.translate(new_notebook(cells=[
        new_markdown_cell("### Exercise 5a.1 — Merge"), new_code_cell("stub()"),
        new_markdown_cell("#### Hint\n\nCount the pairs first."), new_markdown_cell("#### Hint 2: ties\n\nLowest."),
        new_markdown_cell("#### Solution"), new_code_cell("solve()")]))
    texts = [c.source for c in nb.cells]
    assert texts[2] == "~~~{admonition} Hint\n:class: dropdown hint\n\nCount the pairs first.\n~~~"
    assert texts[3].startswith("~~~{admonition} Hint 2: ties\n:class: dropdown hint\n")
    assert texts[4] == "~~~{exercise-end}\n~~~" and texts[5].startswith("~~~{solution-start} ex-5a-1")


def test_without_solutions_the_solution_cells_are_left_out(sample_chapter):
    nb = nb2myst.translate(sample_chapter, solutions=False)
    text = sources(nb)
    assert "solution-start" not in text and "return x + 1" not in text and "counting starts at zero" not in text
    assert nb2myst.box_labels(nb) == ["ex-99-1", "q-99-2"]
    assert "raise NotImplementedError" in text and "Why would anyone add one?" in text  # the exercises stay
    after = new_notebook(cells=[new_markdown_cell("### Exercise 1.1 — A"), new_markdown_cell("#### Solution"),
                                new_code_cell("secret()"), new_markdown_cell("## Next section"),
                                new_code_cell("kept()")])
    assert [c.source for c in nb2myst.translate(after, solutions=False).cells][-2:] == ["## Next section", "kept()"]


def test_stale_bool_result_of_a_checker_call_is_dropped():
    result = lambda text: new_output("execute_result", data={"text/plain": text}, execution_count=1)
    pass_line = new_output("stream", name="stdout", text="PASS  Exercise 4.1\n")
    nb = nb2myst.translate(new_notebook(cells=[
        new_code_cell("#| exercise\ncheck_layer_norm(layer_norm)", outputs=[pass_line, result("True")]),
        new_code_cell("checks.check_pack(pack)", outputs=[result("False")]),
        new_code_cell("x = 1\nx > 0", outputs=[result("True")])]))
    assert [len(c.outputs) for c in nb.cells] == [1, 0, 1]  # only checker calls lose their result
    assert nb.cells[0].outputs[0].text.startswith("PASS")


@pytest.mark.parametrize("source, kind", [
    ("from __future__ import annotations\n\nimport torch\nfrom torch import nn", "imports"),
    ("#| export\nimport math", "imports"),
    ("test_eq(f(1), 2)\ntest_fail(lambda: f(-1), contains='x')", "tests"),
    ("from fastcore.test import test_eq\ntest_eq(1, 1)\nassert 2 > 1", "tests"),
    ("torch.testing.assert_close(a, b)\nfor i in range(3):\n    test_close(g(i), i)", "tests"),
    ("x = f(1)\ntest_eq(x, 2)", None),
    ("print(f(1))", None),
    ("check_attention(my_attention)", None),
    ("def f(): pass", None),
    ("", None),
])
def test_scaffolding_kinds(source, kind):
    assert nb2myst.scaffolding(source) == kind


def test_import_and_test_cells_are_folded_behind_toggles():
    nb = nb2myst.translate(new_notebook(cells=[
        new_code_cell("import torch"), new_code_cell("test_eq(1 + 1, 2)"), new_code_cell("y = 2\nprint(y)"),
        new_code_cell("#| echo: false\nimport torch")]))
    assert nb.cells[0].metadata == {"tags": ["hide-input"], "mystnb": {"code_prompt_show": "Show imports",
                                                                        "code_prompt_hide": "Hide imports"}}
    assert nb.cells[1].metadata.mystnb.code_prompt_show == "Show tests"
    assert nb.cells[2].metadata == {}
    assert nb.cells[3].metadata == {"tags": ["remove-input"]}  # already hidden: not folded


def test_reading_order_puts_goals_then_api_list_after_the_title():
    nb = nb2myst.translate(new_notebook(cells=[
        new_markdown_cell("# T\n> summary"), new_markdown_cell("#| export\n**In the package**: `f`."),
        new_code_cell("import torch"), new_markdown_cell("**You will learn**\n\n- a\n\n## First section\n\nText"),
        new_code_cell("x = 1"), new_markdown_cell("You will learn nothing here.")]))
    texts = [c.source.split("\n")[0] for c in nb.cells]
    assert texts == ["# T", "**You will learn**", "**In the package**: `f`.", "import torch", "## First section",
                     "x = 1", "You will learn nothing here."]


def test_install_cell_is_added_once_before_the_first_code_cell():
    import add_install_cell
    nb = new_notebook(cells=[new_markdown_cell("# T"), new_code_cell("#| default_exp x"), new_code_cell("y = 1")])
    src = add_install_cell.install_source("https://github.com/o/r")
    assert add_install_cell.add_install_cell(nb, src) is True
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "code"] and nb.cells[1].source == src
    assert add_install_cell.add_install_cell(nb, src) is False  # idempotent
    newer = add_install_cell.install_source("https://github.com/o/r2")
    assert add_install_cell.add_install_cell(nb, newer) is True and len(nb.cells) == 4 and nb.cells[1].source == newer
    assert '%pip install --quiet "transformerbook @ git+https://github.com/o/r2"' in newer
    assert nb2myst.translate(nb).cells[1].source == "y = 1"  # `#| hide`: not on the site


def test_every_chapter_installs_the_package_when_missing():
    "Each chapter's first code cell installs the package from `[project.urls] Repository` (Colab, downloads)."
    import add_install_cell
    assert add_install_cell.main(["--check"]) == 0, "run `python tools/add_install_cell.py`"
