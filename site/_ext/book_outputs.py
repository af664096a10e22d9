"""Printed tables keep their columns on a phone.

`book.css` wraps every cell output, so that a long message or a printed tensor never makes a page wider than the
screen. A table printed with aligned columns (a results table, a profiler's summary) is the exception: wrapped at
400 px its rows break in the middle and its columns no longer line up. This extension marks such outputs with the
class `table-output`, and `book.css` lets them keep their lines and scroll sideways inside their own box, as the
code cells do; the theme makes a box that scrolls focusable, so a keyboard can scroll it too.
"""
from __future__ import annotations

import re

from docutils import nodes

_GAP = re.compile(r"(?<=\S) {2,}(?=\S)")  # two or more spaces between two words: a column boundary


def is_table(text: str, min_rows: int = 3) -> bool:
    "Whether printed `text` is a table: at least `min_rows` lines with two or more column gaps (2+ spaces) each."
    return sum(len(_GAP.findall(line)) >= 2 for line in text.splitlines()) >= min_rows


def mark_tables(app, doctree, docname) -> None:
    "Add the class `table-output` to every cell output that `is_table` (Sphinx `doctree-resolved`)."
    for block in doctree.findall(nodes.literal_block):
        if "output" in block["classes"] and is_table(block.astext()):
            block["classes"].append("table-output")


def setup(app):
    app.connect("doctree-resolved", mark_tables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
