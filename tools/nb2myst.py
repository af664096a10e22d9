"""Translate an executed nbdev notebook into a notebook that myst-nb renders cleanly (the website's source).

nbdev's own site generator is Quarto, which understands cell options such as `#| echo: false`, Pandoc attributes
and `:::` fenced divs. Sphinx + myst-nb does not, so this module rewrites a notebook for it (see CONTRIBUTING.md):

- `#| hide` and `#| default_exp` cells are dropped; every `#|` line is removed from the cells that stay;
  `#| echo: false` -> cell tag `remove-input`, `#| output: false` -> `remove-output`, `#| code-fold: true` ->
  `hide-input` (the source folded behind a click, as Quarto's option does: input checks a reader may skip).
- after each `#| export` cell, the API doc of each public function/class it defines (nbdev's `show_doc`
  markdown, imported from the exported module) is inserted as a MyST admonition with class `api`.
- `### Exercise N.M — Title` ... `#### Solution` ... (or `Question` / `Answer`) become sphinx-exercise gated
  directives, so the code cells between them stay inside the boxes (`N.M` as the chapter numbers it: `3.2`,
  `5a.1`); a `#### Hint` cell becomes a collapsed hint; `--no-solutions` leaves solutions and answers out.
- ipywidgets outputs and widget state are dropped (the offline site loads no widget JavaScript); a `True`/`False`
  result under a checker call (saved before checkers returned a `Verdict`, which displays as nothing) is dropped;
  ANSI escapes are stripped from streams and tracebacks.
- the first cell's `> summary` becomes a lead paragraph; Quarto-only markup (`{#id .class}` attributes,
  `:::` divs, callouts) becomes MyST or is removed.
- the reading path: the "You will learn" cell and then the "**In the package**" list follow the title; cells that
  are only imports or only tests (`test_eq`, `test_fail`, `test_close`, `assert_close`, `assert`) are folded behind
  "Show imports" / "Show tests" toggles; API boxes under the code that defines them leave out its signature.

    python tools/nb2myst.py nbs/01_attention.ipynb _build/myst/01_attention.ipynb
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import warnings
from pathlib import Path

import nbformat
from fastcore.nbio import NbCell
from markdown_it import MarkdownIt
from nbdev.showdoc import show_doc, showdoc_nm

LIB = "transformerbook"  # the package `#| default_exp` modules live in
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
EXPORT_DIRECTIVES = {"export", "exports"}  # followed by API docs; `exporti` (internal) is shown without them
# Calls that make a cell a test cell (folded on the site): fastcore.test's and torch.testing's.
TEST_FUNCTIONS = {"test_eq", "test_ne", "test_fail", "test_close", "test_is", "test_eq_type", "test_stdout",
                  "test_warns", "test_shuffled", "assert_close"}

_DIRECTIVE_LINE = re.compile(r"^[ \t]*#\|.*(?:\n|$)", re.M)
_ANSI = re.compile(r"\x1b(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")
_SHOW_DOC_CALL = re.compile(r"\bshow_doc\(\s*([\w.]+)")
# `### Exercise 1.2 — Scale the scores (★☆☆)` / `### Question 1.4 — Swap x2 and x3 (poll)`; the number is the
# chapter's (as its file name gives it: 5a, 08b -> 8b, 11a) and the exercise's, dot-separated: `5a.1`, `12.3`, `A.2`.
_BOX_NUMBER = r"[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)+"
_BOX_START = re.compile(
    rf"\A\s*###[ \t]+(Exercise|Question)[ \t]+({_BOX_NUMBER})[ \t]*(?:[—–:-]+[ \t]*(.*?))?[ \t]*$", re.M)
_BOX_LIKE = re.compile(r"\A\s*###[ \t]+(?:Exercise|Question)\b.*$", re.M)  # to warn about unrecognised ones
_SOLUTION_START = re.compile(r"\A\s*####[ \t]+(Solution|Answer)\b.*$", re.M)
_HINT_START = re.compile(r"\A\s*####[ \t]+(Hint\b.*?)[ \t]*$", re.M)  # `#### Hint` or `#### Hint 2: shapes`
_LABEL_PREFIX = {"Exercise": "ex", "Question": "q", "Solution": "sol", "Answer": "ans"}
_SECTION_HEADING = re.compile(r"\A\s*#{2,3}[ \t]")  # a cell starting with `##`/`###` ends an open box
_SUMMARY = re.compile(r"^(?:>[ \t]?.*(?:\n|$))+", re.M)
# Quarto/Pandoc markup
_HEADING_ATTRS = re.compile(r"^(#{1,6}[ \t].*?)[ \t]*\{([#.][^{}]*|[\w-]+=[^{}]*)\}[ \t]*$", re.M)
_LINK_ATTRS = re.compile(r"(\]\([^)\s]*(?:\s+\"[^\"]*\")?\))\{(?:[#.][^{}]*|[^{}]*=[^{}]*)\}")
_SOURCE_LINK = re.compile(r"^(\[source\]\(.*\))$", re.M)  # show_doc's link to the code on GitHub
_SIGNATURE = re.compile(r"^```python\n.*?^```[ \t]*\n?", re.M | re.S)  # show_doc's signature block
_DIV_FENCE = re.compile(r"^(:{3,})[ \t]*(\{[^}]*\}|[\w-]+)?[ \t]*$")
_CALLOUT = re.compile(r"\.callout-(note|tip|warning|important|caution)\b")
_CALLOUT_TITLE = re.compile(r"title=\"([^\"]*)\"")


# ---------------------------------------------------------------------------------------------- cells

def _markdown_cell(source: str):
    "A new markdown cell without an id: `translate` numbers new cells, so the output is reproducible."
    return nbformat.from_dict({"cell_type": "markdown", "metadata": {}, "source": source})


def directives(cell) -> dict[str, str]:
    "The cell's nbdev directives (`#|` comment lines and the `nbdev` metadata key), parsed by nbdev itself."
    if cell.cell_type != "code":
        return {}
    return NbCell(0, {"cell_type": "code", "source": cell.source, "metadata": dict(cell.metadata)}).directives


def strip_directives(source: str) -> str:
    "`source` without any `#|` line (nbdev and Quarto cell options), trailing blank lines removed."
    return _DIRECTIVE_LINE.sub("", source).rstrip()


def clean_outputs(outputs: list) -> list:
    "Outputs without ipywidgets views, with ANSI escapes removed from streams and tracebacks."
    kept = []
    for out in outputs:
        if WIDGET_MIME in out.get("data", {}):
            continue
        if out.output_type == "stream":
            out.text = _ANSI.sub("", out.text)
        elif out.output_type == "error":
            out.traceback = [_ANSI.sub("", line) for line in out.traceback]
        elif "text/markdown" in out.get("data", {}):
            out.data["text/markdown"] = clean_markdown_output(out.data["text/markdown"])
        kept.append(out)
    return kept


# ------------------------------------------------------------------------------------ Quarto markup

def clean_quarto(md: str) -> str:
    """Markdown with Quarto/Pandoc-only markup translated to MyST or removed.

    `## Title {#id .class}` -> `(id)=` label + `## Title`; `[text](url){target=...}` -> `[text](url)`;
    `::: {.callout-note title="T"}` -> a MyST admonition; any other `:::` div fence is dropped (its content kept)."""
    md = _HEADING_ATTRS.sub(_heading_without_attrs, md)
    md = _LINK_ATTRS.sub(r"\1", md)
    out, stack = [], []  # stack: for each open div, whether its closing fence is kept
    for line in md.split("\n"):
        m = _DIV_FENCE.match(line)
        if not m:
            out.append(line)
        elif m.group(2) and re.fullmatch(r"\{\w[\w-]*\}", m.group(2)):  # MyST's own `:::{note}`: keep it
            stack.append(True)
            out.append(line)
        elif m.group(2):  # a Quarto div `::: {.class}` or `::: class`
            callout = _CALLOUT.search(m.group(2))
            stack.append(bool(callout))
            if callout:
                title = _CALLOUT_TITLE.search(m.group(2))
                out += ([f"{m.group(1)}{{admonition}} {title.group(1)}", f":class: {callout.group(1)}"] if title
                        else [f"{m.group(1)}{{{callout.group(1)}}}"])
        elif stack and stack.pop():  # the closing fence of a callout
            out.append(m.group(1))
    return "\n".join(out)


def _heading_without_attrs(m: re.Match) -> str:
    ident = re.search(r"#([\w:-]+)", m.group(2))
    return f"({ident.group(1)})=\n{m.group(1)}" if ident else m.group(1)


def clean_markdown_output(md: str) -> str:
    "A `text/markdown` output made renderable: `show_doc` output becomes an API box, other markdown is cleaned."
    return api_box(md) if md.lstrip().startswith("---") else clean_quarto(md)


# ---------------------------------------------------------------------------------------- API docs

def api_box(showdoc_md: str, signature: bool = True) -> str:
    """nbdev `show_doc` markdown as a MyST admonition of class `api` titled with the object's name; without its
    signature (the code block) if not `signature`, e.g. right under the code that defines the object."""
    body = showdoc_md.strip().removeprefix("---").strip().replace("#LNone", "")  # no line number known
    heading = re.search(r"^#{1,6}[ \t]+(.+?)[ \t]*$", body, re.M)
    name = heading.group(1) if heading else "API"
    if heading:
        body = body[:heading.start()] + body[heading.end():]
    if not signature:
        body = _SIGNATURE.sub("", body, count=1)
    body = _SOURCE_LINK.sub(r"{.api-source}\n\1", clean_quarto(body).strip())  # styled: floats right
    longest = max((len(run) for run in re.findall(r"~+", body)), default=0)
    fence = "~" * max(3, longest + 1)  # a tilde fence: its title may hold backticks, and ``` code blocks nest inside
    return f"{fence}{{admonition}} `{name}`\n:class: api\n\n{body}\n{fence}"


def public_names(source: str) -> list[str]:
    "Names of the public functions and classes defined at the top level of `source` (`Class.method` for `@patch`)."
    try:
        tree = ast.parse(strip_directives(source))
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            nm = showdoc_nm(node)
            names += nm if isinstance(nm, list) else [nm]
    return names


def api_docs(source: str, module: str | None, lib: str = LIB, skip: set[str] = frozenset(),
             signature: bool = True) -> str | None:
    """Markdown with an API box for each public object defined in the exported cell `source`, or None if there is none;
    the boxes leave the signature out if not `signature` (when the cell's code is shown just above them)."""
    names = [n for n in public_names(source) if n not in skip]
    if not names:
        return None
    if module is None:
        warnings.warn(f"an exported cell defines {names} but the notebook has no `#| default_exp`")
        return None
    try:
        mod = importlib.import_module(f"{lib}.{module}")
    except ImportError as e:
        warnings.warn(f"cannot import {lib}.{module} for its API docs (run nbdev-export first): {e}")
        return None
    boxes = []
    for name in names:
        obj = mod
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            warnings.warn(f"{lib}.{module} has no {name}; is the exported module up to date (nbdev-export)?")
            continue
        md = show_doc(obj, name=name)._repr_markdown_()
        if inspect.isclass(obj):  # nbdev renders a class's signature as `def Name(...)`
            md = md.replace(f"def {name.rsplit('.', 1)[-1]}(", f"class {name.rsplit('.', 1)[-1]}(", 1)
        boxes.append(api_box(md, signature))
    return "\n\n".join(boxes) or None


# ------------------------------------------------------------------------------------- scaffolding

def _is_test(node: ast.stmt) -> bool:
    "An `assert`, a call of a test function (`test_eq(...)`, `torch.testing.assert_close(...)`), or a loop of them."
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.For):
        return all(map(_is_test, node.body)) and not node.orelse
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in TEST_FUNCTIONS
    return False


def scaffolding(source: str) -> str | None:
    """`"imports"` if the code is only imports, `"tests"` if it is only tests (nbdev-style `test_eq`/`test_fail`/
    `test_close`/`assert_close` calls and `assert`s, possibly with imports), else None: such cells are folded."""
    try:
        body = ast.parse(strip_directives(source)).body
    except SyntaxError:
        return None
    if not body:
        return None
    imports = [isinstance(n, (ast.Import, ast.ImportFrom)) for n in body]
    if all(imports):
        return "imports"
    if all(i or _is_test(n) for i, n in zip(imports, body)):
        return "tests"
    return None


# ---------------------------------------------------------------------------------------- exercises

def ends_with_checker_call(source: str) -> bool:
    "Whether the cell's last statement is a call of an exercise checker (`check_...(...)`)."
    try:
        body = ast.parse(strip_directives(source)).body
    except SyntaxError:
        return False
    if not body or not isinstance(body[-1], ast.Expr) or not isinstance(call := body[-1].value, ast.Call):
        return False
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return name.startswith("check_")


def _bool_result(out) -> bool:
    """A `True`/`False` execute_result: what a checker call left before checkers returned a `Verdict` (which displays
    as nothing); dropped from checker cells of notebooks whose saved outputs predate it."""
    return out.output_type == "execute_result" and out.get("data", {}).get("text/plain") in ("True", "False")


def _directive_block(name: str, argument: str = "", **options: str) -> str:
    "A MyST directive without content; fenced with tildes, since a title may contain backticks."
    opts = "".join(f":{k}:{' ' + v if v else ''}\n" for k, v in options.items())
    return f"~~~{{{name}}}{' ' + argument if argument else ''}\n{opts}~~~"


def split_at_headings(cells: list) -> list:
    "Markdown cells split so that each heading starts a cell (found by markdown-it, so code blocks are skipped)."
    parser, out = MarkdownIt("commonmark"), []
    for cell in cells:
        if cell.cell_type != "markdown":
            out.append(cell)
            continue
        lines = cell.source.splitlines(keepends=True)
        starts = [t.map[0] for t in parser.parse(cell.source) if t.type == "heading_open" and t.map[0] > 0]
        if not starts:
            out.append(cell)
            continue
        bounds = [0, *starts, len(lines)]
        cell.source = "".join(lines[:starts[0]]).rstrip()
        out += [cell] + [_markdown_cell("".join(lines[a:b]).rstrip()) for a, b in zip(bounds[1:], bounds[2:])]
    return out


def gate_exercises(cells: list, solutions: bool = True) -> list:
    """Wrap exercises/questions and their solutions/answers in sphinx-exercise gated directives.

    `### Exercise N.M — Title` opens `exercise-start` (label `ex-N-M`; questions get `q-N-M`; `N.M` may be `5a.1`),
    closed right before `#### Solution`/`#### Answer` (or the next `##`/`###` heading), which opens `solution-start`
    (a dropdown) closed before the next `##`/`###` heading or at the end of the notebook. A `#### Hint` markdown cell
    inside an exercise becomes a collapsed "Hint" dropdown (shown before the solution). With `solutions=False` the
    solutions and answers (their cells) are left out. Expects `split_at_headings` cells."""
    out, open_box, label = [], None, None

    def close():
        nonlocal open_box
        if open_box != "dropped":
            out.append(_markdown_cell(_directive_block(f"{open_box}-end")))
        open_box = None

    for cell in cells:
        if cell.cell_type == "markdown":
            start, solution = _BOX_START.match(cell.source), _SOLUTION_START.match(cell.source)
            if open_box == "exercise" and (solution or _SECTION_HEADING.search(cell.source)):
                close()
            elif open_box in ("solution", "dropped") and _SECTION_HEADING.search(cell.source):
                close()
            if start:
                kind, number, title = start.groups()
                label = f"{_LABEL_PREFIX[kind]}-{number.replace('.', '-')}"
                head = f"{kind} {number}" + (f" — {title}" if title else "")
                cell.source = _directive_block("exercise-start", head, label=label, nonumber="") \
                    + cell.source[start.end():]
                open_box = "exercise"
            elif solution and label and open_box is None:
                own_label = _LABEL_PREFIX[solution.group(1)] + label[label.index("-"):]  # ex-1-2 -> sol-1-2
                cell.source = _directive_block("solution-start", label, label=own_label, **{"class": "dropdown"}) \
                    + cell.source[solution.end():]
                open_box, label = ("solution" if solutions else "dropped"), None
            elif (hint := _HINT_START.match(cell.source)) and open_box == "exercise":
                cell.source = _hint_block(hint.group(1), cell.source[hint.end():].strip())
            elif _BOX_LIKE.match(cell.source):
                warnings.warn(f"not boxed (expected `### Exercise N.M — Title`): {_BOX_LIKE.match(cell.source)[0]!r}")
        if open_box != "dropped":
            out.append(cell)
    if open_box:
        close()
    return out


def _hint_block(title: str, body: str) -> str:
    "A collapsed admonition (sphinx-togglebutton dropdown) titled `title` holding the markdown `body`."
    longest = max((len(run) for run in re.findall(r"^~+", body, re.M)), default=0)
    fence = "~" * max(3, longest + 1)
    return f"{fence}{{admonition}} {title}\n:class: dropdown hint\n\n{body}\n{fence}"


def without_solutions(nb):
    """A copy of an nbdev notebook (not translated) without its solutions and answers: from each `#### Solution` /
    `#### Answer` that follows an exercise or question to the next `##`/`###` heading; the rest is kept as it is."""
    nb = nbformat.from_dict(nb)
    cells, in_box, dropping = [], False, False
    for cell in split_at_headings(nb.cells):
        if cell.cell_type == "markdown":
            if _SECTION_HEADING.search(cell.source):
                dropping, in_box = False, bool(_BOX_START.match(cell.source))
            elif in_box and _SOLUTION_START.match(cell.source):
                dropping = True
        if not dropping:
            cells.append(cell)
    for i, cell in enumerate(cells):
        cell.setdefault("id", f"nosol-{i}")
    nb.cells = cells
    return nb


def box_labels(nb) -> list[str]:
    "The labels of the exercise and solution boxes in a translated notebook (they must be unique in the book)."
    return [label for c in nb.cells if c.cell_type == "markdown"
            for label in re.findall(r"^~~~\{(?:exercise|solution)-start\}.*\n:label: (\S+)$", c.source, re.M)]


# ------------------------------------------------------------------------------------------ notebook

def title_cell(cell) -> None:
    "Turn the first cell's `> summary` (under `# Title`) into a lead paragraph (class `lead`)."
    if cell.cell_type == "markdown" and re.match(r"\s*#[ \t]", cell.source):
        cell.source = _SUMMARY.sub(lambda m: "\n{.lead}\n" + re.sub(r"^>[ \t]?", "", m.group(0), flags=re.M),
                                   cell.source, count=1)


def reading_order(cells: list) -> list:
    """The opening in reading order: the title cell, then the "You will learn" cell, then the "**In the package**"
    API list, then everything else as it was (imports included). Only cells before the first `##` section move."""
    first = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), None)
    if first is None:
        return cells
    end = next((i for i, c in enumerate(cells) if i > first and c.cell_type == "markdown"
                and re.match(r"\s*##[ \t]", c.source)), len(cells))
    markdown = [c for c in cells[first + 1:end] if c.cell_type == "markdown"]
    moved = ([c for c in markdown if "You will learn" in c.source][:1]
             + [c for c in markdown if c.source.lstrip().startswith("**In the package**")][:1])
    rest = [c for c in cells[first + 1:] if not any(c is m for m in moved)]
    return cells[:first + 1] + moved + rest


def translate(nb, lib: str = LIB, solutions: bool = True):
    "A copy of notebook `nb` (nbformat v4) rewritten for myst-nb (with its solutions if `solutions`); see module doc."
    nb = nbformat.from_dict(nb)
    module = next((d["default_exp"] for c in nb.cells if "default_exp" in (d := directives(c))), None)
    shown = {name for c in nb.cells if c.cell_type == "code" for name in _SHOW_DOC_CALL.findall(c.source)}
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "raw":  # nbdev/Quarto front matter or raw output: nothing for the reader
            continue
        if cell.cell_type == "markdown":  # `#| export` on a markdown cell puts it in the module docstring
            cell.source = clean_quarto(strip_directives(cell.source))
            cell.metadata = {}
            cells.append(cell)
            continue
        d = directives(cell)
        if "hide" in d or "default_exp" in d or d.get("include") == "false":
            continue
        tags = [t for t in cell.metadata.get("tags", []) if t.startswith(("remove", "hide"))]
        tags += ["remove-input"] if d.get("echo") == "false" else []
        tags += ["remove-output"] if d.get("output") == "false" else []
        tags += ["hide-input"] if d.get("code-fold") in ("", "true") else []  # nbdev reads `true` as ""
        cell.metadata = {"tags": tags} if tags else {}
        if (kind := scaffolding(cell.source)) and "remove-input" not in tags:  # folded behind a "Show ..." toggle
            cell.metadata = {"tags": tags + ["hide-input"],
                             "mystnb": {"code_prompt_show": f"Show {kind}", "code_prompt_hide": f"Hide {kind}"}}
        doc = (api_docs(cell.source, module, lib, skip=shown, signature="remove-input" in tags)
               if EXPORT_DIRECTIVES & d.keys() else None)
        cell.source = strip_directives(cell.source)
        cell.outputs = clean_outputs(cell.outputs)
        if ends_with_checker_call(cell.source):
            cell.outputs = [o for o in cell.outputs if not _bool_result(o)]
        if cell.source or cell.outputs:
            cells.append(cell)
        if doc:
            cells.append(_markdown_cell(doc))
    first_md = next((c for c in cells if c.cell_type == "markdown"), None)
    if first_md:
        title_cell(first_md)
    nb.cells = gate_exercises(reading_order(split_at_headings(cells)), solutions)
    for i, cell in enumerate(nb.cells):  # nbformat 4.5 requires ids on every cell; deterministic for new ones
        cell.setdefault("id", f"nb2myst-{i}")
    nb.nbformat_minor = max(nb.nbformat_minor, 5)
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    nb.metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})  # unexecuted notebooks
    return nb


def write_notebook(nb, path: Path | str) -> bool:
    "Write `nb` to `path` unless the file already holds it (so Sphinx rebuilds only changed pages). True if written."
    text, path = nbformat.writes(nb), Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def translate_file(src: Path | str, dst: Path | str, lib: str = LIB, solutions: bool = True) -> bool:
    "Translate notebook `src` into `dst` (rewritten only if its content changes). True if written."
    return write_notebook(translate(nbformat.read(src, as_version=4), lib, solutions), dst)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="executed nbdev notebook")
    ap.add_argument("dst", type=Path, help="notebook to write for myst-nb")
    ap.add_argument("--lib", default=LIB, help="package that `#| default_exp` modules belong to")
    ap.add_argument("--no-solutions", action="store_true", help="leave the solutions and answers out")
    args = ap.parse_args(argv)
    translate_file(args.src, args.dst, args.lib, solutions=not args.no_solutions)


if __name__ == "__main__":
    main()
