"""The fleet report: a document (`chakra_trace.document`) of the fleet in numbers, fleet-wide
imbalance, the top collectives by bytes and the trends by date and tag, written by the one report
renderer as a self-contained page. Tables straight from the named queries, so the catalog needs
no plotting stack."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from ..document import kv, section, table, text, write_html
from . import queries


def _cell(v):
    """A DuckDB value as a table cell: numbers and text as they are, lists joined, dates as text."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return v.isoformat() if isinstance(v, (datetime.date, datetime.datetime)) else str(v)


def _format(values: list) -> str:
    """A column's format: int or float when every value is one (None aside), else text."""
    kinds = {type(v) for v in values if v is not None}
    return "int" if kinds == {int} else "float" if kinds and kinds <= {int, float} else "str"


#: a job's content id, 64 hex digits, is shown by its first 12 (unique in any fleet this size;
#: `chakra catalog query` gives it whole)
ID_DIGITS = 12


def _rows(con, sql: str, limit: int | None) -> tuple[list[str], list[dict]]:
    cur = con.execute(queries.limited(sql, limit))
    cols = [d[0] for d in cur.description]
    rows = [{c: _cell(v) for c, v in zip(cols, r)} for r in cur.fetchall()]
    for r in rows:
        if isinstance(r.get("job_id"), str):
            r["job_id"] = r["job_id"][:ID_DIGITS]
    return cols, rows


def _table(con, sql: str, limit: int | None = 50, bar: str | None = None) -> dict:
    """Rows of a query as a table block ("none" when there are none); `bar`: a column whose
    numbers are drawn as bars beside them."""
    cols, rows = _rows(con, sql, limit)
    if not rows:
        return text("none")
    columns = [(c, c, _format([r[c] for r in rows])) for c in cols]
    return table("", columns, rows, bars=[bar] if bar else [])


def document(con, title: str = "Fleet report", limit: int = 50) -> dict:
    """The report's document."""
    (fleet,) = _rows(con, queries.FLEET, None)[1]
    flagged = fleet["imbalanced_collectives"] or 0
    verdict = (
        text(f"{flagged:,} imbalanced collective instances in {fleet['imbalanced_jobs']:,} jobs", warn=True)
        if flagged
        else text("no imbalanced collectives")
    )
    parts = [
        ("fleet", "Fleet", [kv(fleet.items()), verdict]),
        (
            "imbalance",
            f"Imbalanced collectives (largest gap first, top {limit})",
            [
                text(
                    "Collective instances whose members moved different bytes (all_to_allv: uneven splits), "
                    "as analyze.collectives.imbalance finds them; outliers are the ranks off the instance's median."
                ),
                _table(con, queries.IMBALANCE, limit, bar="bytes_gap"),
            ],
        ),
        ("outlier-ranks", "Ranks that stand out most often", [_table(con, queries.OUTLIER_RANKS, limit, bar="times")]),
        ("top-types", "Collective types by bytes", [_table(con, queries.TOP_TYPES, None, bar="bytes")]),
        (
            "top-collectives",
            f"Largest collective instances (top {limit})",
            [_table(con, queries.TOP_COLLECTIVES, limit, bar="bytes_total")],
        ),
        ("by-date", "By date", [_table(con, queries.BY_DATE, None, bar="coll_bytes")]),
        ("by-tag", "By tag", [_table(con, queries.BY_TAG, 200, bar="jobs")]),
        ("top-ops", f"Ops by time (top {limit})", [_table(con, queries.TOP_OPS, limit, bar="duration_us")]),
    ]
    return {"title": title, "sections": [section(sid, head, blocks) for sid, head, blocks in parts]}


def write_report(con, path: str | os.PathLike, title: str = "Fleet report", limit: int = 50) -> Path:
    """Render and write atomically."""
    return write_html(document(con, title, limit), path)
