"""Sphinx configuration of the transformerbook website.

`tools/build_site.py` translates the notebooks into `_build/myst/` and runs Sphinx on that folder with this
configuration (`-c site`). MathJax 3 is served from the site itself (installed by `tools/fetch_mathjax.py`),
so a page makes no request to another host; without it, pages fall back to the MathJax CDN.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent
sys.path.insert(0, str(SITE / "_ext"))
MATHJAX = SITE / "node_modules" / "mathjax" / "es5"
# The parts of MathJax's es5 build that the `tex-mml-chtml` combined component loads lazily (TeX extensions,
# CommonHTML fonts, menu/accessibility); the other combined builds and SVG output are not copied.
MATHJAX_PARTS = ["tex-mml-chtml.js", "input", "output/chtml", "output/chtml.js", "ui", "a11y", "sre", "adaptors"]
MATHJAX_CDN = "https://cdn.jsdelivr.net/npm/mathjax@3.2.2/es5/tex-mml-chtml.js"

project = "transformerbook"
author = "transformerbook authors"
copyright = "the transformerbook authors, Apache-2.0"

extensions = ["myst_nb", "sphinx_exercise", "sphinx_togglebutton", "sphinx_copybutton", "book_exercises"]
extensions += ["book_explorers"]  # site/_ext/book_explorers.py: the `{explorer}` directive (data: tools/explorers.py)
extensions += ["book_accessibility"]  # site/_ext/book_accessibility.py: accessible names that match the visible text
extensions += ["book_outputs"]  # site/_ext/book_outputs.py: printed tables scroll sideways instead of wrapping
numfig = True  # figures with a caption are numbered (tools/figures.py: `#| fig-cap:`)
numfig_format = {"figure": "Figure %s"}
exclude_patterns = ["**/.ipynb_checkpoints", "_notebooks"]  # _notebooks: the downloadable copies

# myst-nb: the notebooks are executed (or not) before Sphinx runs.
nb_execution_mode = "off"
nb_merge_streams = True
nb_ipywidgets_js = {}  # widget outputs are dropped by nb2myst; never load widget JavaScript from a CDN
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "attrs_block"]
myst_heading_anchors = 3

# sphinx-exercise: each solution follows its exercise, titled "Solution".
exercise_style = "solution_follow_exercise"

html_theme = "sphinx_book_theme"
html_title = "transformerbook"
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_favicon = "_static/favicon.svg"  # without one, browsers request /favicon.ico and log a 404
# Workaround: the visible sidebar toggles get no handler in the pinned themes (see the file).
html_js_files = ["sidebar-toggles.js"]
# Search: sections rank above the checker appendix and the contents page; snippets without TeX (see the file).
html_search_scorer = str(SITE / "_static" / "search-scorer.js")
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_context = {"default_mode": "auto"}  # the theme logs an error for an unset mode on a first visit

if (MATHJAX / "tex-mml-chtml.js").is_file():
    mathjax_path = "mathjax/tex-mml-chtml.js"  # relative to _static/, copied there by `copy_mathjax`
else:
    mathjax_path = MATHJAX_CDN
# textmacros: `\&`, `\%`, ... inside `\text{...}` (e.g. "J\&M eq. 10.16").
mathjax3_config = {"loader": {"load": ["[tex]/textmacros"]}, "tex": {"packages": {"[+]": ["textmacros"]}}}


def copy_mathjax(app, exception) -> None:
    "Copy the parts of the local MathJax that pages load (about 8 MB) into the built site's `_static/mathjax/`."
    if exception is not None or app.builder.format != "html" or mathjax_path == MATHJAX_CDN:
        return
    dest = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        src = MATHJAX / part
        if src.is_dir():
            shutil.copytree(src, dest / part, dirs_exist_ok=True)
        else:
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / part)


def setup(app):
    if mathjax_path == MATHJAX_CDN:
        from sphinx.util import logging
        logging.getLogger(__name__).warning(
            "MathJax is not installed in site/node_modules (run `python tools/fetch_mathjax.py`, needs npm); "
            "the pages load it from its CDN, so math needs a network connection")
    app.connect("build-finished", copy_mathjax)
