"""Figures and explorers in the website's translation of a notebook (called by `tools/build_site.py` around
`nb2myst.translate`, which drops every `#|` line and cell metadata but cell tags, so the options are read first).

Cell options (Quarto's names where Quarto has one), on code cells:

- `#| fig-cap: text` and `#| fig-alt: text`: the cell's plot becomes a numbered figure with that caption (MyST
  markdown) and that alt text (what the plot shows, for readers who cannot see it); myst-nb's `mystnb` metadata.
  Each is one line; a line over 120 columns ends in `  # noqa: E501`, which is not part of the text.
- `#| explorer: NAME`: the cell is a Jupyter (ipywidgets) explorer: on the site its code is folded behind a toggle
  (myst-nb's `hide-input` tag; widget outputs are already dropped) and the in-page explorer NAME follows it.
- `#| explorer-after: NAME`: the in-page explorer NAME follows this cell, which is shown as usual.

Markdown cells that hold only an image, optionally followed by a paragraph starting with `Figure:`, become a MyST
`{figure}` (numbered, captioned, with the image's alt text):

    ![A transformer block, pre-norm and post-norm](figures/block.svg)

    Figure: The two placements of layer normalisation in a block.
"""
from __future__ import annotations

import re

import nbformat

OPTIONS = ("fig-cap", "fig-alt", "explorer", "explorer-after")
# A value may end in a noqa comment for E501: the option stays one line (as read here), and the lint passes.
_OPTION = re.compile(r"^[ \t]*#\|[ \t]*(" + "|".join(map(re.escape, OPTIONS)) + r")[ \t]*:[ \t]*(.*?)"
                     r"(?:[ \t]+#[ \t]*noqa:[ \t]*E501)?[ \t]*$", re.M)
_IMAGE_FIGURE = re.compile(r"\A\s*!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)\s*"
                           r"(?:\n\s*\n\s*Figure:[ \t]*(?P<cap>.+?))?\s*\Z", re.S)


def cell_options(source: str) -> dict[str, str]:
    "The figure/explorer options of a code cell's `#|` lines (quotes around a value are removed)."
    return {k: v[1:-1] if len(v) > 1 and v[0] == v[-1] and v[0] in "'\"" else v for k, v in _OPTION.findall(source)}


def _markdown(source: str):
    return nbformat.from_dict({"cell_type": "markdown", "metadata": {}, "source": source})


def explorer_cell(name: str):
    "A markdown cell with the `{explorer}` directive (site/_ext/book_explorers.py)."
    return _markdown(f"```{{explorer}} {name}\n```")


def image_figure(source: str) -> str | None:
    "A MyST `{figure}` for a markdown cell that is only an image (and a `Figure:` caption), else None."
    m = _IMAGE_FIGURE.match(source)
    if not m:
        return None
    alt, cap = m["alt"].strip(), (m["cap"] or "").strip()
    alt_line = f":alt: {alt}\n" if alt else ""
    return f"```{{figure}} {m['src']}\n{alt_line}\n{cap or alt}\n```"


def translate(nb, base_translate):
    "`base_translate(nb)` (nb2myst's), then the figure and explorer options of `nb`'s cells applied to the result."
    options = {c.get("id"): o for c in nb.cells if c.cell_type == "code" and (o := cell_options(c.source))}
    out = base_translate(nb)
    cells = []
    for cell in out.cells:
        o = options.get(cell.get("id"), {}) if cell.cell_type == "code" else {}
        if cell.cell_type == "markdown" and (fig := image_figure(cell.source)):
            cell.source = fig
        if "fig-cap" in o or "fig-alt" in o:
            mystnb = cell.metadata.setdefault("mystnb", {})
            if "fig-cap" in o:
                mystnb["figure"] = {"caption": o["fig-cap"]}
            if "fig-alt" in o:
                mystnb["image"] = {"alt": o["fig-alt"]}
        if "explorer" in o:
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
            cell.metadata["mystnb"] = {**cell.metadata.get("mystnb", {}),
                                       "code_prompt_show": "Show the Jupyter (ipywidgets) version of this explorer"}
        cells.append(cell)
        for key in ("explorer", "explorer-after"):
            if key in o:
                new = explorer_cell(o[key])
                new["id"] = f"{cell.get('id', 'cell')}-explorer"
                cells.append(new)
    out.cells = cells
    return out


STAND_IN = "Stand-in:"  # how a demo cell says that a model stands in for GPT-2 (05, 06, 07)


def stand_in_pages(notebooks) -> list[str]:
    "The stems of the `notebooks` (paths) whose saved outputs contain a line starting with `Stand-in:`."
    pages = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                         if o.get("output_type") == "stream")
        if any(line.startswith(STAND_IN) for line in text.splitlines()):
            pages.append(path.stem)
    return pages


def report_stand_ins(notebooks) -> None:
    "Print which pages ran their GPT-2 demos on a stand-in model (`make book`'s log)."
    pages = stand_in_pages(notebooks)
    print("GPT-2 demos ran on a stand-in model (GPT-2's weights unavailable) on: " + ", ".join(pages) if pages
          else "GPT-2 demos: no page used a stand-in model", flush=True)
