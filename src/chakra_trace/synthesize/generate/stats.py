"""The statistics a generated job is judged by, on plain numpy: op mix, distribution distances,
and graph shape (critical-path share, parallelism profile, fan-in/out).

Distances: total variation between op mixes (half the L1 distance of the shares, 0..1);
Wasserstein-1 and Kolmogorov-Smirnov between samples of log values (durations as log(1 + µs),
sizes as log2(1 + bytes)), computed exactly from the sorted samples (scipy.stats gives the same
numbers; it is not needed). A job's graph shape is computed per rank on its dependency DAG
alone (no resources): the critical-path share is the longest duration-weighted dependency chain
over the sum of durations (1 for a chain, small for wide graphs), and the parallelism profile
the distribution of ops in flight over time when every op starts as soon as its dependencies end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ...io.workload import Workload
from ...schema.enums import NodeType
from ...schema.trace import Trace
from .program import op_class

PROFILE_POINTS = 65  # quantiles of the in-flight count (time-weighted) kept per rank
COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


def _distinct(w: Workload) -> list[tuple[Trace, int]]:
    """Each distinct trace object of a workload with the number of ranks running it."""
    seen: dict[int, list] = {}
    for t in w.traces.values():
        seen.setdefault(id(t), [t, 0])[1] += 1
    return [(t, n) for t, n in seen.values()]


def ops(t: Trace) -> np.ndarray:
    """Rows that are operations (every node but METADATA)."""
    return np.flatnonzero(t.types != NodeType.METADATA_NODE)


def op_mix(w: Workload) -> Counter:
    """Ops per op class ("<node type>:<name, digits folded>") over every rank."""
    out: Counter = Counter()
    for t, n in _distinct(w):
        rows = ops(t)
        pairs = np.stack([t.name_codes[rows].astype(np.int64), t.types[rows].astype(np.int64)], axis=1)
        uniq, counts = np.unique(pairs, axis=0, return_counts=True)
        for (c, typ), k in zip(uniq.tolist(), counts.tolist()):
            out[f"{typ}:{op_class(t.names[c])}"] += k * n
    return out


def tv(a: Counter | dict, b: Counter | dict) -> float:
    """Total variation distance between two op mixes (counts or shares)."""
    sa, sb = float(sum(a.values())) or 1.0, float(sum(b.values())) or 1.0
    return 0.5 * sum(abs(a.get(k, 0) / sa - b.get(k, 0) / sb) for k in sorted(set(a) | set(b)))


def log_durations(w: Workload) -> np.ndarray:
    """log(1 + µs) of every op's duration, every rank."""
    parts = []
    for t, n in _distinct(w):
        parts.extend([np.log1p(t.duration[ops(t)].astype(np.float64))] * n)
    return np.concatenate(parts) if parts else np.zeros(0)


def log_sizes(w: Workload) -> np.ndarray:
    """log2(1 + bytes) of every collective's and send/receive's size, every rank."""
    parts = []
    for t, n in _distinct(w):
        m = np.isin(t.types, COMM_TYPES)
        parts.extend([np.log2(1.0 + np.maximum(t.comm_size[m].astype(np.float64), 0.0))] * n)  # (negative: 0)
    return np.concatenate(parts) if parts else np.zeros(0)


def _cdfs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y = np.sort(x), np.sort(y)
    grid = np.union1d(x, y)
    return grid, np.searchsorted(x, grid, side="right") / x.size, np.searchsorted(y, grid, side="right") / y.size


def wasserstein(x: np.ndarray, y: np.ndarray) -> float | None:
    """Wasserstein-1 distance between two samples (None if either is empty)."""
    if x.size == 0 or y.size == 0:
        return None
    grid, fx, fy = _cdfs(x, y)
    return float(np.sum(np.abs(fx - fy)[:-1] * np.diff(grid)))


def ks(x: np.ndarray, y: np.ndarray) -> float | None:
    """Kolmogorov-Smirnov statistic between two samples (None if either is empty)."""
    if x.size == 0 or y.size == 0:
        return None
    _, fx, fy = _cdfs(x, y)
    return float(np.max(np.abs(fx - fy)))


def quantiles(x: np.ndarray, k: int) -> list[float]:
    """k evenly spaced quantiles of a sample (empty for an empty sample)."""
    if x.size == 0:
        return []
    return np.quantile(x, np.linspace(0, 1, k)).tolist()


def quantile_distance(qa: list[float], qb: list[float]) -> float | None:
    """Wasserstein-1 between two distributions given by quantiles on one grid."""
    if not qa or not qb:
        return None
    return float(np.mean(np.abs(np.asarray(qa) - np.asarray(qb))))


@dataclass
class GraphShape:
    """One job's graph statistics, rank-weighted means: critical-path share, the time-weighted
    quantiles of ops in flight, and the in/out-degree histograms (0, 1, 2, 3, 4+)."""

    cp_share: float | None
    inflight_q: np.ndarray
    fan_in: np.ndarray
    fan_out: np.ndarray


def _rank_shape(t: Trace) -> GraphShape:
    rows = ops(t)
    keep = np.zeros(len(t), bool)
    keep[rows] = True
    g = t.graph()
    e = keep[g.src] & keep[g.dst]
    src, dst = g.src[e], g.dst[e]
    fan_in = np.bincount(np.minimum(np.bincount(src, minlength=len(t))[rows], 4), minlength=5).astype(np.float64)
    fan_out = np.bincount(np.minimum(np.bincount(dst, minlength=len(t))[rows], 4), minlength=5).astype(np.float64)
    dur = t.duration.astype(np.float64)
    work = float(dur[rows].sum())
    order = g.order(partial=True).tolist()
    ip, pred = g.preds
    ipl, predl, durl = ip.tolist(), pred.tolist(), dur.tolist()
    keepl = keep.tolist()
    start = [0.0] * len(t)
    finish = [0.0] * len(t)
    for v in order:
        s = 0.0
        for u in predl[ipl[v] : ipl[v + 1]]:
            if keepl[u] and finish[u] > s:
                s = finish[u]
        start[v] = s
        finish[v] = s + durl[v]
    st, fi = np.asarray(start)[rows], np.asarray(finish)[rows]
    span = float(fi.max()) if fi.size else 0.0
    fan_in, fan_out = fan_in / max(rows.size, 1), fan_out / max(rows.size, 1)
    if work <= 0 or span <= 0:
        return GraphShape(None, np.zeros(PROFILE_POINTS), fan_in, fan_out)
    busy = fi > st
    times = np.concatenate([st[busy], fi[busy]])
    delta = np.concatenate([np.ones(int(busy.sum())), -np.ones(int(busy.sum()))])
    o = np.argsort(times, kind="stable")
    times, level = times[o], np.cumsum(delta[o])
    lengths = np.diff(times)
    counts = level[:-1]
    m = lengths > 0
    counts, lengths = counts[m], lengths[m]
    cum = np.cumsum(lengths) / lengths.sum()
    grid = np.linspace(0, 1, PROFILE_POINTS)
    q = counts[np.minimum(np.searchsorted(cum, grid, side="left"), counts.size - 1)]
    return GraphShape(span / work, q.astype(np.float64), fan_in, fan_out)


def graph_shape(w: Workload) -> GraphShape:
    """The job's graph statistics (see the module docstring), over its distinct rank traces."""
    parts = [(_rank_shape(t), n) for t, n in _distinct(w)]
    if not parts:
        return GraphShape(None, np.zeros(PROFILE_POINTS), np.zeros(5), np.zeros(5))
    weights = np.asarray([n for _, n in parts], np.float64)
    cps = [(g.cp_share, n) for g, n in parts if g.cp_share is not None]
    cp = sum(c * n for c, n in cps) / sum(n for _, n in cps) if cps else None

    def mean(arrays: list[np.ndarray]) -> np.ndarray:
        return np.average(np.stack(arrays), axis=0, weights=weights)

    return GraphShape(
        cp_share=cp,
        inflight_q=mean([g.inflight_q for g, _ in parts]),
        fan_in=mean([g.fan_in for g, _ in parts]),
        fan_out=mean([g.fan_out for g, _ in parts]),
    )
