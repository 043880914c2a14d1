"""Which kernels (device activities) take the time, by kind and by name.

HTA's ``get_gpu_kernel_breakdown`` gives two tables. Its kernel-type table is the union of
each type's kernels, split by which types run at once ("COMPUTATION overlapping
COMMUNICATION", ...), summed over ranks: ours is ``kind_overlap`` (per rank) and
``kind_overlap_all``. Its per-kernel table groups each rank's kernels of a type by name and
keeps the ``num_kernels`` (10) longest in total, also bounded by a ``duration_ratio`` rule,
folding the rest into "others"; when it folds, its max/min/mean/std are taken over the
per-name totals rather than over kernels, and memory kernels are left out by default.

Ours (``kernels``): per rank and kind (memory included), the ``top_k`` names longest in total
and "others"; count, sum, mean, max, min and sample std over the individual activities, and
the share of that rank's time of that kind. ``duration_ratio`` (None by default) applies
HTA's extra rule for which names are kept. ``kinds`` / ``kinds_all``: the plain sum of
durations per kind (overlapping activities counted each), so the kinds add up to the total
activity time. Times in µs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...table import Tables
from ...timeline.job import KINDS, JobTimeline, RankTimeline
from .stats import by_key
from .temporal import segments

__all__ = ["kernel_breakdown", "overlap_label"]


def overlap_label(mask: int) -> str:
    """HTA's name for a set of kinds running at once: "computation overlapping communication"."""
    return " overlapping ".join(k for i, k in enumerate(KINDS) if mask & (1 << i))


def _keep(sums: np.ndarray, kind: np.ndarray, top_k: int, duration_ratio: float | None) -> np.ndarray:
    """Which name groups (sorted by kind, then total descending) keep their own row."""
    first = np.flatnonzero(np.r_[True, kind[1:] != kind[:-1]])
    n = np.diff(np.r_[first, kind.size])
    pos = np.arange(kind.size) - np.repeat(first, n)
    keep = pos < top_k
    if duration_ratio is not None:
        for a, c in zip(first.tolist(), n.tolist()):
            if c > top_k:  # HTA folds only when a kind has more names than top_k
                cum = np.cumsum(sums[a : a + c])
                keep[a : a + c] &= cum <= np.quantile(cum, duration_ratio)
    return keep


def _rank_rows(t: RankTimeline, top_k: int, duration_ratio: float | None) -> list[dict]:
    if not len(t):
        return []
    nn = max(len(t.names), 1)
    key = t.kind.astype(np.int64) * nn + t.name
    uniq, inv = np.unique(key, return_inverse=True)
    sums = np.bincount(inv, weights=t.dur).astype(np.int64)
    gkind = uniq // nn
    order = np.lexsort((uniq % nn, -sums, gkind))  # by kind, total descending, name
    keep = _keep(sums[order], gkind[order], top_k, duration_ratio)
    # output row of each name group: its own (kept), or its kind's "others" (id uniq.size + kind)
    out = np.empty(uniq.size, np.int64)
    out[order] = np.where(keep, order, uniq.size + gkind[order])
    groups, st = by_key(out[inv.reshape(-1)], t.dur)
    kind_total = np.bincount(t.kind, weights=t.dur, minlength=len(KINDS))
    names = np.asarray(t.names, dtype=object)
    rows: list[dict[str, Any]] = []
    for i, g in enumerate(groups.tolist()):
        k = g - uniq.size if g >= uniq.size else int(gkind[g])
        name = "others" if g >= uniq.size else str(names[uniq[g] % nn])
        rows.append({
            "rank": t.rank, "kind": KINDS[k], "name": name, "count": int(st["count"][i]),
            "sum_us": int(st["sum"][i]) / 1e3, "mean_us": float(st["mean"][i]) / 1e3,
            "max_us": int(st["max"][i]) / 1e3, "min_us": int(st["min"][i]) / 1e3, "std_us": None if np.isnan(st["std"][i]) else float(st["std"][i]) / 1e3,
            "percentage": float(100.0 * st["sum"][i] / kind_total[k]) if kind_total[k] else 0.0,
        })  # fmt: skip
    rows.sort(key=lambda r: (KINDS.index(r["kind"]), r["name"] == "others", -r["sum_us"]))
    return rows


def _kind_rows(count: np.ndarray, total: np.ndarray, extra: dict) -> list[dict]:
    whole = total.sum()
    return [
        {**extra, "kind": KINDS[k], "count": int(count[k]), "sum_us": int(total[k]) / 1e3,
         "percentage": float(100.0 * total[k] / whole) if whole else 0.0}
        for k in range(len(KINDS))
    ]  # fmt: skip


def _overlap_rows(time: np.ndarray, extra: dict) -> list[dict]:
    whole = time[1:].sum()  # busy time: segments where some kind runs (mask 0 is idle)
    return [
        {**extra, "kind": overlap_label(m), "time_us": int(time[m]) / 1e3,
         "percentage": float(100.0 * time[m] / whole) if whole else 0.0}
        for m in np.argsort(-time, kind="stable").tolist()
        if m and time[m] > 0
    ]  # fmt: skip


def kernel_breakdown(job: JobTimeline, top_k: int = 10, duration_ratio: float | None = None) -> Tables:
    """Device time per kind (``kinds``, ``kinds_all``), per set of kinds running at once
    (``kind_overlap``, ``kind_overlap_all``: HTA's kernel-type table) and per name with the
    `top_k` longest of each kind and rank kept (``kernels``). See the module doc."""
    kinds, overlap, kernels = [], [], []
    all_count, all_sum, all_time = np.zeros(len(KINDS), np.int64), np.zeros(len(KINDS), np.int64), np.zeros(8, np.int64)
    for t in job:
        count = np.bincount(t.kind, minlength=len(KINDS))
        total = np.bincount(t.kind, weights=t.dur, minlength=len(KINDS)).astype(np.int64)
        all_count, all_sum = all_count + count, all_sum + total
        kinds += _kind_rows(count, total, {"rank": t.rank})
        seg, mask = segments(t.start, t.end, t.kind)
        time = np.bincount(mask, weights=seg, minlength=8).astype(np.int64)
        all_time += time
        overlap += _overlap_rows(time, {"rank": t.rank})
        kernels += _rank_rows(t, top_k, duration_ratio)
    tables = {
        "kinds": kinds,
        "kinds_all": _kind_rows(all_count, all_sum, {}),
        "kind_overlap": overlap,
        "kind_overlap_all": _overlap_rows(all_time, {}),
        "kernels": kernels,
    }
    summary = {"source": job.source, "ranks": len(job), "activities": int(all_count.sum()),
               "total_time_us": int(all_sum.sum()) / 1e3, "top_k": top_k}  # fmt: skip
    return Tables(tables, summary)
