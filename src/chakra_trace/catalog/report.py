"""The fleet report: one self-contained HTML page (no scripts, no external assets) with the
fleet in numbers, fleet-wide imbalance, the top collectives by bytes and the trends by date and
tag. Plain string templates over the named queries, so the catalog needs no plotting stack."""

from __future__ import annotations

import html
import os
from pathlib import Path

from ..io.et import atomic_output
from . import queries

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:left;font-size:.9em}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;height:.7em;background:#c0392b;margin-right:.4em;vertical-align:middle}
.ok{color:#2e7d32}.bad{color:#c0392b}
"""


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    return str(v)


def _table(con, sql: str, limit: int | None = 50, bar: str | None = None) -> str:
    """Rows of a query as an HTML table; `bar`: a column drawn as a bar beside its value."""
    cur = con.execute(queries.limited(sql, limit))
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    if not rows:
        return "<p class=ok>none</p>"
    top = max((abs(r[cols.index(bar)] or 0) for r in rows), default=0) if bar in cols else 0
    out = ["<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"]
    for r in rows:
        cells = []
        for c, v in zip(cols, r):
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            text = html.escape(_fmt(v))
            if c == "job_id" and isinstance(v, str) and len(v) > 12:  # the whole hash on hover
                text = f'<span title="{text}">{text[:12]}…</span>'
            if c == bar and top and num:
                text = f'<span class=bar style="width:{100 * abs(v) / top:.0f}px"></span>{text}'
            cells.append(f"<td class=n>{text}</td>" if num else f"<td>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table>"


def render(con, title: str = "Fleet report", limit: int = 50) -> str:
    """The report's HTML."""
    fleet = dict(zip([d[0] for d in con.execute(queries.FLEET).description], con.execute(queries.FLEET).fetchone()))
    flagged = fleet["imbalanced_collectives"] or 0
    verdict = (
        f"<p class=bad>{flagged:,} imbalanced collective instances in {fleet['imbalanced_jobs']:,} jobs</p>"
        if flagged
        else "<p class=ok>no imbalanced collectives</p>"
    )
    sections = [
        ("Fleet", _table(con, queries.FLEET, None) + verdict),
        (
            f"Imbalanced collectives (largest gap first, top {limit})",
            "<p>Collective instances whose members moved different bytes (all_to_allv: uneven splits), "
            "as <code>analyze.collectives.imbalance</code> finds them; <em>outliers</em> are the ranks "
            "off the instance's median.</p>" + _table(con, queries.IMBALANCE, limit, bar="bytes_gap"),
        ),
        ("Ranks that stand out most often", _table(con, queries.OUTLIER_RANKS, limit, bar="times")),
        ("Collective types by bytes", _table(con, queries.TOP_TYPES, None, bar="bytes")),
        (f"Largest collective instances (top {limit})", _table(con, queries.TOP_COLLECTIVES, limit, bar="bytes_total")),
        ("By date", _table(con, queries.BY_DATE, None, bar="coll_bytes")),
        ("By tag", _table(con, queries.BY_TAG, 200, bar="jobs")),
        (f"Ops by time (top {limit})", _table(con, queries.TOP_OPS, limit, bar="duration_us")),
    ]
    body = "\n".join(f"<h2>{html.escape(h)}</h2>\n{s}" for h, s in sections)
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def write_report(con, path: str | os.PathLike, title: str = "Fleet report", limit: int = 50) -> Path:
    """Render and write atomically."""
    text = render(con, title, limit)
    with atomic_output(path, compress=False) as f:
        f.write(text.encode())
    return Path(path)
