"""Sphinx extension: the `{explorer}` directive places an in-page explorer (no kernel, no network).

    ```{explorer} sampling
    ```

writes `<div class="tb-explorer" data-explorer="sampling">` and, on that page only, loads
`_static/explorers/explorers.js`, `explorers.css` and the data script `_static/explorers/data/sampling.js`, which
`tools/explorers.py` writes into the built site (`tools/build_site.py` calls it after Sphinx); a page with a live
explorer (`LIVE`, running a model with ONNX Runtime Web) also loads `_static/explorers/live.js`. Names are the keys
of `tools/explorers.py`'s `NAMES`; an unknown name is a build error. Every page also gets `_static/figures.css`
(figures of `tools/figures.py`: plots saved at 2x keep their aspect ratio on narrow screens), and figures are
numbered by chapter (`chapter_figure_numbers`).
"""
from __future__ import annotations

import re
from html import escape

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

NAMES = ("sampling", "attention", "positional", "bpe", "moe", "chinchilla", "inside")  # as tools/explorers.py
LIVE = {"sampling", "inside"}  # run a model in the page: _static/explorers/live.js (tools/live_assets.py)


class ExplorerDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self):
        name = self.arguments[0].strip()
        if name not in NAMES:
            raise self.error(f"unknown explorer {name!r}; known: {', '.join(NAMES)}")
        names = getattr(self.env, "tb_explorers", {})
        names.setdefault(self.env.docname, set()).add(name)
        self.env.tb_explorers = names
        html = (f'<div class="tb-explorer" data-explorer="{escape(name)}" role="group" '
                f'aria-label="interactive explorer: {escape(name)}">'
                '<noscript><p class="tbx-fallback">This explorer runs in the page with JavaScript; '
                'the static figure above shows its default view.</p></noscript>'
                '<p class="tbx-fallback" hidden>The explorer\'s data is missing from this build '
                '(build the site with tools/build_site.py).</p></div>')
        return [nodes.raw("", html, format="html")]


def _purge(app, env, docname):
    getattr(env, "tb_explorers", {}).pop(docname, None)


def _merge(app, env, docnames, other):
    env.tb_explorers = getattr(env, "tb_explorers", {})
    env.tb_explorers.update({d: other.tb_explorers[d] for d in docnames if d in getattr(other, "tb_explorers", {})})


def _page_assets(app, pagename, templatename, context, doctree):
    names = getattr(app.env, "tb_explorers", {}).get(pagename)
    if not names:
        return
    app.add_css_file("explorers/explorers.css")
    for name in sorted(names):
        app.add_js_file(f"explorers/data/{name}.js")
    if names & LIVE:
        app.add_js_file("explorers/live.js")  # before explorers.js, which starts every explorer
    app.add_js_file("explorers/explorers.js")


_CHAPTER = re.compile(r"^(\d+)([a-z]?)_")  # "07_sampling" -> ("07", ""), "05a_tokenization" -> ("05", "a")


def chapter_figure_numbers(app, env):
    """Number each chapter's figures by its chapter, as the exercises are: Figure 7.2 is the second figure of
    `07_sampling`, Figure 5a.1 the first of `05a_tokenization` (Sphinx's `numfig` alone counts through the whole
    book). Pages whose name has no chapter number keep Sphinx's numbers. Returns the documents renumbered."""
    changed = []
    for docname, kinds in getattr(env, "toc_fignumbers", {}).items():
        m = _CHAPTER.match(docname)
        figs = kinds.get("figure", {})
        if not m or not figs:
            continue
        chapter = f"{int(m.group(1))}{m.group(2)}"
        for i, fig_id in enumerate(sorted(figs, key=figs.get), 1):
            figs[fig_id] = (chapter, i)
        changed.append(docname)
    return changed


def setup(app):
    app.connect("env-get-updated", chapter_figure_numbers, priority=900)  # after Sphinx's own numbering (500)
    app.add_css_file("figures.css")  # every page: 2x plots and diagrams keep their aspect ratio (tools/figures.py)
    app.add_directive("explorer", ExplorerDirective)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("html-page-context", _page_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
