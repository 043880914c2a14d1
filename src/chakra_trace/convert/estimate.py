"""Times for host ops that no Kineto event explains, so that they are kept, not dropped.

Why: a host op without a Kineto event (another iteration, an op the profiler did not
record) is still work the job did, and a collective among them is what cross-rank analysis
needs. Each such op gets:

- a duration: the median of the linked ops of the same name, else the cost model's
  (FLOPs at `CPU_FLOPS` plus bytes at `CPU_BYTES`, as the caller computes them), else
  `DEFAULT_NS`; an op whose children take longer lasts as long as they do;
- a place: right after its preceding sibling on its thread (the parent's start for a first
  child; for leading ops with no earlier sibling, just before the first sibling that has a
  time), so call order and nesting hold. A run of such ops between two timed siblings that
  would not fit between them is shrunk to fit.

The converted nodes of these ops carry ``duration_estimated`` (bool, true).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .sequences import host_preorder

__all__ = ["CPU_BYTES", "CPU_FLOPS", "DEFAULT_NS", "estimate_durations", "place_unlinked", "time_unlinked"]

#: Rates for an op the trace has no timed example of: a conservative single CPU core.
CPU_FLOPS = 20e9  # FLOP/s
CPU_BYTES = 10e9  # bytes/s
DEFAULT_NS = 1_000  # an op nothing is known of: 1 µs, the order of a framework dispatch


def estimate_durations(
    names: np.ndarray, linked: np.ndarray, duration: np.ndarray, rows: np.ndarray, cost: Callable | None = None
) -> np.ndarray:
    """Estimated ns of each of ``rows`` (host rows): the median linked duration of its name
    code (``names`` are codes per row), else the cost model (``cost(rows) -> (flops, bytes)``,
    flops -1 when unknown), else `DEFAULT_NS`."""
    out = np.full(rows.size, -1, np.int64)
    lk = np.flatnonzero(linked)
    if lk.size and rows.size:
        o = lk[np.argsort(names[lk], kind="stable")]
        c = names[o]
        u, first = np.unique(c, return_index=True)
        bounds = np.r_[first, c.size]
        med = np.array([np.median(duration[o[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])], np.float64)
        i = np.searchsorted(u, names[rows])
        hit = (i < u.size) & (u[np.minimum(i, max(u.size - 1, 0))] == names[rows])
        out[hit] = np.rint(med[i[hit]]).astype(np.int64)
    miss = np.flatnonzero(out < 0)
    if miss.size and cost is not None:
        flops, nbytes = cost(rows[miss])
        t = np.maximum(flops, 0) / CPU_FLOPS * 1e9 + np.maximum(nbytes, 0) / CPU_BYTES * 1e9
        known = (flops >= 0) | (nbytes > 0)
        out[miss[known]] = np.rint(t[known]).astype(np.int64)
    out[out < 0] = DEFAULT_NS
    return out


def place_unlinked(
    host, order: np.ndarray, start: np.ndarray, end: np.ndarray, linked: np.ndarray, est: np.ndarray, origin: int
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ns) of every row in ``order`` (host rows in call order) that is not
    ``linked``: ``est`` ns long (per host row), placed after its preceding sibling. Rows that
    are linked keep ``start``/``end``. ``origin``: where a thread none of whose ops is timed
    starts. Returns new start and end arrays."""
    n = len(host)
    s = start.copy()
    e = end.copy()
    syn = host.synthetic
    par = np.where(host.parent >= 0, host.rows(np.maximum(host.parent, 0)), -1) if n else np.zeros(0, np.int64)
    par = np.where((par >= 0) & syn[np.maximum(par, 0)], -1, par)
    tid = np.asarray(host.tid, np.int64)
    # siblings in call order: children of each row, and the roots of each thread
    kids: dict[tuple[int, int], list[int]] = {}
    for r, p, t in zip(order.tolist(), par[order].tolist(), tid[order].tolist()):
        kids.setdefault((p, t) if p < 0 else (p, 0), []).append(r)
    # duration of an untimed op: at least the time of its children
    need = est.astype(np.int64).copy()
    for r in order[::-1].tolist():
        c = kids.get((r, 0))
        if c and not linked[r]:
            total = sum(int(e[x] - s[x]) if linked[x] else int(need[x]) for x in c)
            if total > need[r]:
                need[r] = total
    lk = linked.tolist()
    todo: list[tuple[list[int], int | None, int | None]] = []
    for (p, _t), c in kids.items():
        if p < 0:
            todo.append((c, None, None))
    while todo:
        sib, lo, hi = todo.pop()
        _place_siblings(sib, lo, hi, lk, s, e, need, origin)
        for r in sib:
            c = kids.get((r, 0))
            if c:
                todo.append((c, int(s[r]), int(e[r])))
    return s, e


def _place_siblings(sib: list[int], lo, hi, lk: list, s: np.ndarray, e: np.ndarray, need: np.ndarray, origin: int):
    """Place the untimed ones of one sibling list between their timed neighbours (and within
    the parent's [lo, hi] when the parent has a time)."""
    k = 0
    m = len(sib)
    while k < m:
        if lk[sib[k]]:
            k += 1
            continue
        j = k
        while j < m and not lk[sib[j]]:
            j += 1
        run = sib[k:j]
        left = int(e[sib[k - 1]]) if k > 0 else lo
        right = int(s[sib[j]]) if j < m else hi
        total = sum(int(need[r]) for r in run)
        if left is None and right is None:
            left = origin
        if left is None:  # leading run: end where the first timed sibling starts
            left = right - total
        scale = 1.0
        if right is not None and total > right - left:
            scale = max(right - left, 0) / total if total else 0.0
        t = left
        for r in run:
            d = int(need[r] * scale) if scale != 1.0 else int(need[r])
            s[r] = t
            e[r] = t + d
            t += d
        k = j


def _usual_thread(host_tid: np.ndarray, tid: np.ndarray, on: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per host thread of the rows `on` (sorted), the Kineto thread most of them ran on (the
    lowest among equals): one sort, not a pass over the trace per thread."""
    ht, kt = host_tid[on], tid[on]
    if not on.size:
        return ht, kt
    order = np.lexsort((kt, ht))
    ht, kt = ht[order], kt[order]
    cut = np.flatnonzero(np.r_[True, (ht[1:] != ht[:-1]) | (kt[1:] != kt[:-1])])
    count = np.diff(np.r_[cut, ht.size])
    ht, kt = ht[cut], kt[cut]
    best = np.lexsort((kt, -count, ht))
    ht, kt = ht[best], kt[best]
    first = np.r_[True, ht[1:] != ht[:-1]]
    return ht[first], kt[first]


def time_unlinked(
    host, start: np.ndarray, end: np.ndarray, tid: np.ndarray, linked: np.ndarray, duration, origin: int, cost
) -> tuple[np.ndarray, tuple[int, int] | None]:
    """Time every real host op that is not ``linked``, in place in ``start``/``end``/``tid``:
    durations by `estimate_durations` (``duration``: ns of the linked ops; ``cost(rows)``: the
    cost model), places by `place_unlinked`, and the Kineto thread its host thread's linked ops
    ran on. Returns those rows and the span they cover (None: none placed)."""
    rows = np.flatnonzero(~linked & ~host.synthetic)
    dur = np.where(linked, np.maximum(duration, 0), 0)
    est = np.zeros(len(host), np.int64)
    est[rows] = estimate_durations(host.name, linked, dur, rows, cost)
    s, e = place_unlinked(host, host_preorder(host)[0], start, end, linked, est, origin)
    start[rows], end[rows] = s[rows], e[rows]
    keys, vals = _usual_thread(host.tid, tid, np.flatnonzero(linked & np.isin(host.tid, host.tid[rows])))
    if keys.size:
        at = np.minimum(np.searchsorted(keys, host.tid[rows]), keys.size - 1)
        hit = keys[at] == host.tid[rows]
        tid[rows[hit]] = vals[at[hit]]
    placed = rows[end[rows] >= 0]
    cover = (int(start[placed].min()), int(end[placed].max())) if placed.size else None
    return rows, cover
