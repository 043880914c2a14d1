"""A document rendered as one self-contained HTML file.

The file must open anywhere, offline and years later, so nothing is fetched: the CSS and the
vanilla-JS renderer (assets/) are inlined, and the document itself is embedded as JSON that the
script draws from (SVG charts, a canvas timeline). The document is checked first (`checks`), so
that a malformed one fails here with its section and block named rather than as a blank chart
in a browser.
"""

from __future__ import annotations

import html
import json
import os
import re
from functools import lru_cache
from pathlib import Path

from ..errors import ChakraError
from ..io.et import atomic_output
from .checks import check_document

_ASSETS = Path(__file__).with_name("assets")


def render_html(doc: dict) -> str:
    """The document as one HTML page; raises ChakraError naming the section and block at fault."""
    data = check_document(doc)
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # Inside <script>, "</" could close the element and "<!--" changes how the parser looks for
    # the end; both stay valid JSON once escaped.
    payload = payload.replace("</", "<\\/").replace("<!--", "\\u003c!--")
    css, js = _assets()
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(data['title'])}</title>\n<style>\n{css}</style>\n</head>\n<body>\n"
        "<noscript><p>This report draws its content with JavaScript; enable it to see the report.</p></noscript>\n"
        f'<script type="application/json" id="report-data">{payload}</script>\n'
        f"<script>\n{js}</script>\n</body>\n</html>\n"
    )


def write_html(doc: dict, path: str | os.PathLike) -> Path:
    """Renders `doc` and writes it to `path` atomically (UTF-8; gzip when the name ends in .gz)."""

    path = Path(path)
    text = render_html(doc)
    with atomic_output(path, compress=path.suffix == ".gz") as f:
        f.write(text.encode("utf-8"))
    return path


@lru_cache(maxsize=1)
def _assets() -> tuple[str, str]:
    """The CSS and JS without comments, indentation and blank lines (a third smaller).

    The assets keep to two rules that make this safe: no "/*" inside a string or regex, and
    "//" comments only on lines of their own.
    """
    out = []
    for name in ("report.css", "report.js"):
        text = (_ASSETS / name).read_text(encoding="utf-8")
        if re.search(r"</(script|style)|<!--", text, re.IGNORECASE):
            raise ChakraError(f"{_ASSETS / name}: must not contain '</script', '</style' or '<!--'")
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
        lines = (line.strip() for line in text.splitlines())
        out.append("".join(line + "\n" for line in lines if line and not line.startswith("//")))
    return out[0], out[1]
