"""Why each stream sits idle between its activities: host wait, kernel wait, or other.

HTA's ``get_idle_time_breakdown``: on each stream, the gap before each kernel (after the
previous one ended) is *host wait* when the runtime call that launched the kernel began after
the previous kernel ended (the host was late to enqueue it), else *kernel wait* when the gap
is under ``consecutive_kernel_delay`` (the launch overhead of back-to-back kernels), else
*other* (waiting on an event, another stream, ...). HTA's default threshold is 30 in the
trace's unit, microseconds for Kineto traces (its docstring says nanoseconds), hence our
default of 30,000 ns. Where HTA takes the previous kernel's end, we take the latest end so
far on the stream, so overlapping activities give no negative gaps; HTA analyses rank 0 by
default, we every rank.

Streams without launch information (a CPU trace's threads, a Chakra trace's streams) cannot
tell host wait: their gaps are kernel wait or other by the threshold alone (``launch_known``
is False on them, ``host_wait`` is 0).
"""

from __future__ import annotations

import numpy as np

from ...table import Tables
from ...timeline.job import JobTimeline, RankTimeline
from .stats import by_key

__all__ = ["CATEGORIES", "HTA_CONSECUTIVE_KERNEL_DELAY_NS", "idle_breakdown"]

CATEGORIES = ("host_wait", "kernel_wait", "other")
HOST_WAIT, KERNEL_WAIT, OTHER = 0, 1, 2
HTA_CONSECUTIVE_KERNEL_DELAY_NS = 30_000


def _gaps(t: RankTimeline, delay_ns: int):
    """Per gap (every activity but a stream's first): its stream's index, length (ns), category."""
    first = np.flatnonzero(np.r_[True, t.stream[1:] != t.stream[:-1]])  # rows sorted by (stream, start)
    bounds = np.r_[first, len(t)]
    end = t.end
    reach = np.concatenate(
        [np.maximum.accumulate(end[a:b]) for a, b in zip(bounds[:-1], bounds[1:])] or [np.zeros(0, np.int64)]
    )
    has_gap = np.ones(len(t), bool)
    has_gap[first] = False
    rows = np.flatnonzero(has_gap)
    prev = reach[rows - 1]
    gap = np.maximum(t.start[rows] - prev, 0)
    launch = t.launch_start[rows]
    host = (launch >= 0) & (launch > prev)
    cat = np.where(host, HOST_WAIT, np.where(gap < delay_ns, KERNEL_WAIT, OTHER))
    sidx = np.searchsorted(first, rows, "right") - 1
    return first, bounds, reach, sidx, gap, cat


def _rank(t: RankTimeline, delay_ns: int) -> tuple[list[dict], list[dict], list[dict], np.ndarray | None]:
    if not len(t):
        return [], [], [], None
    first, bounds, reach, sidx, gap, cat = _gaps(t, delay_ns)
    ns = first.size
    key = sidx * 3 + cat
    time = np.bincount(key, weights=gap, minlength=ns * 3).astype(np.int64).reshape(ns, 3)
    groups, st = by_key(key, gap)
    st["median"] = st["p50"]
    at = {int(g): i for i, g in enumerate(groups.tolist())}
    known = np.add.reduceat((t.launch_start >= 0).astype(np.int64), first) > 0
    idle, intervals, streams = [], [], []
    for i, a in enumerate(first.tolist()):
        s = int(t.stream[a])
        base = {"rank": t.rank, "stream": s, "stream_label": t.stream_label(s)}
        tot = int(time[i].sum())
        for c, name in enumerate(CATEGORIES):
            v = int(time[i, c])
            idle.append({**base, "idle_category": name, "idle_time_us": v / 1e3,
                         "idle_time_ratio": v / tot if tot else None})  # fmt: skip
            j = at.get(i * 3 + c)
            stats: dict[str, float | None] = {"count": int(st["count"][j]) if j is not None else 0}
            for m in ("mean", "median", "min", "max"):
                stats[f"{m}_us"] = float(st[m][j]) / 1e3 if j is not None else None
            intervals.append({**base, "idle_category": name, **stats})
        b = int(bounds[i + 1])
        span = int(reach[b - 1] - t.start[a])
        streams.append({**base, "activities": b - a, "launch_known": bool(known[i]), "span_us": span / 1e3,
                        "busy_us": (span - tot) / 1e3, "idle_us": tot / 1e3,
                        **{f"{n}_us": int(time[i, c]) / 1e3 for c, n in enumerate(CATEGORIES)}})  # fmt: skip
    return idle, intervals, streams, time.sum(axis=0)


def idle_breakdown(job: JobTimeline, consecutive_kernel_delay_ns: int = HTA_CONSECUTIVE_KERNEL_DELAY_NS) -> Tables:
    """Idle gaps between consecutive activities of each stream of each rank, by category
    (see the module doc): ``idle`` (HTA's table: time and share per stream and category),
    ``intervals`` (count, mean, median, min, max gap per stream and category), ``streams``
    (span, busy, idle and each category per stream) and ``ranks`` (the streams summed)."""
    idle: list[dict] = []
    intervals: list[dict] = []
    streams: list[dict] = []
    ranks: list[dict] = []
    for t in job:
        i, iv, s, tot = _rank(t, int(consecutive_kernel_delay_ns))
        idle, intervals, streams = idle + i, intervals + iv, streams + s
        tot = np.zeros(3, np.int64) if tot is None else tot
        whole = int(tot.sum())
        row = {"rank": t.rank, "idle_us": whole / 1e3, "launch_known": bool((t.launch_start >= 0).any())}
        for c, n in enumerate(CATEGORIES):
            row[f"{n}_us"] = int(tot[c]) / 1e3
            row[f"{n}_ratio"] = int(tot[c]) / whole if whole else None
        ranks.append(row)
    summary = {"source": job.source, "ranks": len(job), "consecutive_kernel_delay_ns": int(consecutive_kernel_delay_ns)}
    return Tables({"idle": idle, "intervals": intervals, "streams": streams, "ranks": ranks}, summary)
