"""Accessible names that match what a reader sees, fixed in the built pages (WCAG 2.5.3 "Label in Name").

axe-core's rule `label-content-name-mismatch` failed on every page with the pinned themes:
- myst-nb's folded cells render `<summary aria-label="Toggle hidden content">` while the summary shows "Show code
  cell source": a speech-input user who says what they see ("click show code cell source") reaches nothing. Without
  the `aria-label` the summary's name is its visible text.
- pydata-sphinx-theme's search field is a `<button aria-label="Search">` showing "Search" and the shortcut
  "Ctrl+K": the name drops the shortcut it shows. Without the `aria-label` the name is the visible text.
The icon-only search button keeps its label (it shows no text). `tests/test_site.py` runs axe-core on every page.
"""
from __future__ import annotations

import re
from pathlib import Path

_FIXES = [
    (re.compile(r'(<summary)\s+aria-label="Toggle hidden content"'), r"\1"),
    (re.compile(r'(<button class="btn search-button-field search-button__button[^"]*"[^>]*?)\s+aria-label="Search"'),
     r"\1"),
]


def fix_page(html: str) -> str:
    "The page with the mismatched `aria-label`s above removed."
    for pattern, repl in _FIXES:
        html = pattern.sub(repl, html)
    return html


def fix_site(app, exception) -> None:
    "Rewrite every built HTML page with `fix_page` (Sphinx `build-finished`)."
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = fix_page(text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


def setup(app):
    app.connect("build-finished", fix_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
