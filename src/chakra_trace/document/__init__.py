"""One document model for every report: a title and sections of typed blocks (text, figures,
tables, charts, timelines, confidence intervals), checked in Python and rendered by one
self-contained HTML renderer. `chakra report`, `chakra bench report` and `chakra catalog report`
all build a document; none writes HTML of its own."""

from __future__ import annotations

from .blocks import intervals, kv, section, table, text, why_section
from .checks import BLOCK_TYPES, FORMATS, MAX_TEXT, check_document, compact_json
from .render import render_html, write_html

__all__ = [
    "BLOCK_TYPES",
    "FORMATS",
    "MAX_TEXT",
    "check_document",
    "compact_json",
    "intervals",
    "kv",
    "render_html",
    "section",
    "table",
    "text",
    "why_section",
    "write_html",
]
