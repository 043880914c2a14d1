"""Constructors of the blocks and sections the reports share, so that each report says what it
shows rather than spelling out the schema's dicts (`checks` documents the fields)."""

from __future__ import annotations

from collections.abc import Iterable


def section(sid: str, title: str, blocks: list[dict]) -> dict:
    return {"id": sid, "title": title, "blocks": blocks}


def why_section(sid: str, title: str, reason: str) -> dict:
    """A section that cannot be shown, saying why in its place."""
    return section(sid, title, [text(f"Not shown: {reason}.")])


def text(body: str, *, warn: bool = False) -> dict:
    """A paragraph; `warn`: set apart as a warning (a flag the reader must not miss)."""
    return {"type": "text", "text": body, "warn": True} if warn else {"type": "text", "text": body}


def kv(items: Iterable[tuple[str, object]]) -> dict:
    """Figures as cards: (label, value) pairs."""
    return {"type": "kv", "items": [[k, v] for k, v in items]}


def table(
    caption: str,
    columns: list[tuple[str, str, str]],
    rows: list[dict],
    max_rows: int | None = None,
    bars: Iterable[str] = (),
) -> dict:
    """A table block: ``columns`` as (row key, label, format) where the format ("us", "bytes",
    "pct", ...) says how the page writes the number and so its unit; `bars`: keys of columns
    whose numbers are also drawn as bars (scaled to the column's largest)."""
    bar = set(bars)
    block: dict = {
        "type": "table",
        "caption": caption,
        "columns": [
            {"key": k, "label": label, "format": f, **({"bar": True} if k in bar else {})} for k, label, f in columns
        ],
        "rows": rows,
    }
    if max_rows is not None:
        block["max_rows"] = max_rows
    return block


def intervals(title: str, rows: list[dict], *, unit: str = "", log: bool = False, groups: Iterable[str] = ()) -> dict:
    """Samples with their median's and mean's confidence intervals, a row each: rows of
    {"label", "note", "group" (index into `groups`), "samples", "outliers" (indices into samples),
    "median", "median_ci", "mean_ci"}; `unit` as a chart's ("s": seconds, written as durations)."""
    return {"type": "intervals", "title": title, "unit": unit, "log": log, "groups": list(groups), "rows": rows}
