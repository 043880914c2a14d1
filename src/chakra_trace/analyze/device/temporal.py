"""Where each rank's device time goes: computation, communication, memory or idle.

Two tables per rank. ``hta`` answers HTA's ``get_temporal_breakdown``: over the span from the
first activity's start to the last one's end (``kernel_time``), ``idle_time`` is the part no
activity covers (the span less the union of all activities), ``compute_time`` the union of
computation activities and ``non_compute_time`` the rest (some activity, none of it
computation). ``ranks`` (and ``streams``, one stream at a time) splits the rank's analysed
``window`` instead, activities clipped to it, into four disjoint parts that add up to the
window exactly: time when any computation runs is ``computation``; time with communication
but no computation is ``communication``; time with only memory activity is ``memory``; the
rest is ``idle`` (precedence computation > communication > memory for overlapped time).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...table import Tables
from ...timeline.job import COMM, COMPUTE, KINDS, MEMORY, JobTimeline, RankTimeline

__all__ = ["segments", "split", "temporal_breakdown"]

_PARTS = (*KINDS, "idle")


def segments(start: np.ndarray, end: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The elementary segments between consecutive activity bounds: their lengths and, as a
    bitmask (``1 << kind``), which kinds run during each (0: none)."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if not start.size:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8)
    pts = np.concatenate([start, end])
    order = np.argsort(pts, kind="stable")
    mask = np.zeros(pts.size - 1, np.uint8)
    for k in (COMPUTE, COMM, MEMORY):
        on = (kind == k).astype(np.int32)
        running = np.cumsum(np.concatenate([on, -on])[order])[:-1]
        mask |= (running > 0).astype(np.uint8) << k
    return np.diff(pts[order]), mask


def _precedence(mask: np.ndarray) -> np.ndarray:
    """Index into `_PARTS` of each segment: the first kind running by precedence, else idle."""
    return np.where(
        mask & (1 << COMPUTE), COMPUTE, np.where(mask & (1 << COMM), COMM, np.where(mask & (1 << MEMORY), MEMORY, 3))
    )


def split(start: np.ndarray, end: np.ndarray, kind: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """ns of computation, communication, memory, idle in [lo, hi) (activities clipped to it),
    by precedence; the four add up to ``hi - lo``."""
    s, e = np.clip(start, lo, hi), np.clip(end, lo, hi)
    keep = e > s
    seg, mask = segments(s[keep], e[keep], kind[keep])
    out = np.bincount(_precedence(mask), weights=seg, minlength=4).astype(np.int64)
    out[3] = max(hi - lo, 0) - int(out[:3].sum())
    return out


def _hta_row(t: RankTimeline) -> dict:
    seg, mask = segments(t.start, t.end, t.kind)
    span = int(t.end.max() - t.start.min()) if len(t) else 0
    busy = int(seg[mask > 0].sum())
    compute = int(seg[(mask & (1 << COMPUTE)) > 0].sum())
    idle, non_compute = span - busy, busy - compute
    row: dict[str, Any] = {"rank": t.rank}
    for name, v in (("idle_time", idle), ("compute_time", compute), ("non_compute_time", non_compute)):
        row[f"{name}_us"] = v / 1e3
    row["kernel_time_us"] = span / 1e3
    for name, v in (("idle_time", idle), ("compute_time", compute), ("non_compute_time", non_compute)):
        row[f"{name}_pctg"] = 100.0 * v / span if span else None
    return row


def _parts_row(parts: np.ndarray, lo: int, hi: int) -> dict:
    total = max(hi - lo, 0)
    row: dict[str, float | None] = {"window_us": total / 1e3}
    row.update({f"{p}_us": int(v) / 1e3 for p, v in zip(_PARTS, parts)})
    row.update({f"{p}_pct": 100.0 * int(v) / total if total else None for p, v in zip(_PARTS, parts)})
    return row


def temporal_breakdown(job: JobTimeline) -> Tables:
    """Per rank, HTA's temporal breakdown (``hta``) and the window split four ways (``ranks``,
    and per stream: ``streams``). Times in µs, percentages in % (see the module doc)."""
    hta, ranks, streams = [], [], []
    for t in job:
        hta.append(_hta_row(t))
        lo, hi = t.window
        end = t.end
        ranks.append({"rank": t.rank, **_parts_row(split(t.start, end, t.kind, lo, hi), lo, hi)})
        bounds: np.ndarray | list[int] = (
            np.flatnonzero(np.r_[True, t.stream[1:] != t.stream[:-1], True]) if len(t) else []
        )
        for a, b in zip(bounds[:-1], bounds[1:]):  # rows are sorted by (stream, start)
            s = int(t.stream[a])
            parts = split(t.start[a:b], end[a:b], t.kind[a:b], lo, hi)
            streams.append(
                {"rank": t.rank, "stream": s, "stream_label": t.stream_label(s), **_parts_row(parts, lo, hi)}
            )
    summary = {"source": job.source, "ranks": len(job), "precedence": "computation > communication > memory"}
    return Tables({"hta": hta, "ranks": ranks, "streams": streams}, summary)
