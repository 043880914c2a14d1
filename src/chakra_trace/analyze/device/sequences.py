"""Which kernels run one after another, and which host op launched which kernels.

`frequent_sequences` answers two questions:

- with ``op``: HTA's ``get_frequent_cuda_kernel_sequences``. The host ops whose name holds
  ``op``, at the shallowest depth any of them has, that launched at least ``length`` kernels
  (anywhere below them) are the roots; each root's pattern is its name followed by the names of
  its kernels in start order; identical patterns are counted, with their total GPU time (the
  kernels' durations) and CPU time (the roots' durations).
- without: the most frequent runs of ``length`` consecutive activities on each stream (n-grams,
  overlapping windows counted), with their busy time and the gaps between their kernels: the
  candidates for fusion.

`op_kernel_map` maps each host op name to the kernels launched inside it, by the innermost op
around the launch and by the outermost (below a ``ProfilerStep#N`` annotation).

Sequences are counted without Python loops over kernels: names are codes, a window's key is
built one position at a time (previous key x names + next code, renumbered densely with
``np.unique`` so it never overflows int64), and counts come from ``np.unique``.
"""

from __future__ import annotations

import re

import numpy as np

from ...table import Tables
from ...timeline.job import KINDS, JobTimeline, RankTimeline
from .launches import as_job
from .stats import rows

_STEP = re.compile(r"^ProfilerStep#\d+$")
NO_HOST = "no host ops: the timeline does not say which host op launched each activity"


def _depth(t: RankTimeline) -> np.ndarray:
    """Nesting depth of each host op (0 at the top of its thread)."""
    parent = t.host.parent
    depth = np.zeros(len(t.host), np.int64)
    cur = parent.copy()
    live = np.flatnonzero(cur >= 0)
    while live.size:
        depth[live] += 1
        cur[live] = parent[cur[live]]
        live = live[cur[live] >= 0]
    return depth


def _lift(t: RankTimeline, rows_: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Walk each host row up its parents while ``stop[row]`` is False."""
    out = rows_.copy()
    live = np.flatnonzero(~stop[out])
    while live.size:
        out[live] = t.host.parent[out[live]]
        live = live[~stop[out[live]]]
    return out


def _renumber(prev: np.ndarray, nxt: np.ndarray, base: int) -> np.ndarray:
    return np.unique(prev * base + nxt, return_inverse=True)[1].reshape(-1)


def frequent_sequences(
    job: JobTimeline | RankTimeline, length: int = 3, top_k: int | None = 10, op: str | None = None, kinds=None
) -> Tables:
    """Frequent kernel sequences: per host op `op` (HTA's definition, see the module doc) or,
    without `op`, per stream. `kinds` (of `timeline.KINDS` codes) keeps only those activities;
    `top_k` None keeps every pattern (per stream without `op`)."""
    job = as_job(job)
    out: list[dict] = []
    summary: dict = {"length": int(length), "op": op}
    for t in job:
        if kinds is not None:
            t = t.select(np.isin(t.kind, list(kinds)))
        out += _op_patterns(t, op, length, top_k, summary) if op else _ngrams(t, length, top_k)
    if not out:
        summary.setdefault("note", f"no sequence of {length} activities" + (f" under a host op '{op}'" if op else ""))
    return Tables({"sequences": out}, summary)


def _ngrams(t: RankTimeline, k: int, top_k: int | None) -> list[dict]:
    m = len(t) - k + 1
    if m <= 0 or k < 1:
        return []
    base = max(len(t.names), 1)
    ids = t.name[:m].astype(np.int64)
    for j in range(1, k):
        ids = _renumber(ids, t.name[j : j + m].astype(np.int64), base)
    streams, sidx = np.unique(t.stream, return_inverse=True)
    sidx = sidx.reshape(-1)
    ok = np.flatnonzero(sidx[:m] == sidx[k - 1 :])  # the window stays on one stream
    if not ok.size:
        return []
    keys, first, inv, count = np.unique(
        sidx[ok] * (int(ids.max()) + 1) + ids[ok], return_index=True, return_inverse=True, return_counts=True
    )
    inv = inv.reshape(-1)
    cs = np.concatenate(([0], np.cumsum(t.dur)))
    busy = np.bincount(inv, weights=(cs[ok + k] - cs[ok]).astype(np.float64))
    span = np.bincount(inv, weights=(t.end[ok + k - 1] - t.start[ok]).astype(np.float64))
    where = ok[first]  # the first window of each pattern
    stream_busy = np.bincount(sidx, weights=t.dur.astype(np.float64))[sidx[where]]
    order = np.lexsort((where, -busy, -count, sidx[where]))
    if top_k is not None:
        s = sidx[where][order]
        nth = np.arange(order.size) - np.searchsorted(s, s, "left")
        order = order[nth < top_k]
    seq = [t.name_of(t.name[i : i + k]).tolist() for i in where[order].tolist()]
    return rows({
        "rank": np.full(order.size, t.rank), "stream": streams[sidx[where[order]]],
        "pattern": ["|".join(s) for s in seq], "kernels": seq, "count": count[order],
        "busy_ns": busy[order].astype(np.int64), "mean_busy_ns": busy[order] / count[order],
        "span_ns": span[order].astype(np.int64), "gap_ns": (span - busy)[order].astype(np.int64),
        "stream_share": busy[order] / np.maximum(stream_busy[order], 1),
    })  # fmt: skip


def _op_patterns(t: RankTimeline, op: str, k: int, top_k: int | None, summary: dict) -> list[dict]:
    h = t.host
    codes = np.asarray([i for i, n in enumerate(t.names) if op in n], np.int64)
    cand = np.flatnonzero(np.isin(h.name, codes)) if len(h) and codes.size else np.zeros(0, np.int64)
    launched = np.flatnonzero(t.op >= 0)
    if not cand.size or not launched.size:
        if not len(h) or not launched.size:
            summary["note"] = NO_HOST
        return []
    depth = _depth(t)
    d = int(depth[cand].min())
    roots = cand[depth[cand] == d]
    kern = launched[depth[t.op[launched]] >= d]
    anc = _lift(t, t.op[kern], depth <= d)  # each kernel's ancestor at depth d
    slot = np.full(len(h), -1, np.int64)
    slot[roots] = np.arange(roots.size)
    g = slot[anc]
    kern, g = kern[g >= 0], g[g >= 0]
    n = np.bincount(g, minlength=roots.size)
    keep = n >= k
    summary.setdefault("roots", {})[t.rank] = int(keep.sum())
    kern, g = kern[keep[g]], g[keep[g]]
    if not kern.size:
        return []
    o = np.lexsort((t.start[kern], g))
    kern, g = kern[o], g[o]
    used, g = np.unique(g, return_inverse=True)  # the kept roots, densely numbered
    g = g.reshape(-1)
    r = roots[used]
    cnt = np.bincount(g)
    pos = np.arange(g.size) - np.concatenate(([0], np.cumsum(cnt)[:-1]))[g]
    # a root's pattern id, one kernel position at a time (roots that ended keep theirs)
    ids = h.name[r].astype(np.int64)
    base = max(len(t.names), 1)
    by_pos = np.argsort(pos, kind="stable")
    edges = np.concatenate(([0], np.cumsum(np.bincount(pos))))
    for j in range(edges.size - 1):
        at = by_pos[edges[j] : edges[j + 1]]
        ids[g[at]] = _renumber(ids[g[at]], t.name[kern[at]].astype(np.int64), base)
    _, first, inv, count = np.unique(
        cnt * (int(ids.max()) + 1) + ids, return_index=True, return_inverse=True, return_counts=True
    )
    inv = inv.reshape(-1)
    gpu = np.bincount(inv, weights=np.bincount(g, weights=t.dur[kern].astype(np.float64)))
    cpu = np.bincount(inv, weights=h.dur[r].astype(np.float64))
    starts = np.concatenate(([0], np.cumsum(cnt)))
    cut = np.sort(count)[::-1][min(top_k, count.size) - 1] if top_k else 0
    pick = np.flatnonzero(count >= cut)
    seqs = {int(p): [t.names[h.name[r[first[p]]]]] + t.name_of(t.name[kern[starts[first[p]] : starts[first[p] + 1]]]).tolist() for p in pick}  # fmt: skip
    pats = {p: "|".join(s) for p, s in seqs.items()}
    top: list[int] = sorted(pick.tolist(), key=lambda p: (-count[p], pats[p]))[:top_k]
    return rows({
        "rank": np.full(len(top), t.rank), "op": [seqs[p][0] for p in top], "pattern": [pats[p] for p in top],
        "kernels": [seqs[p][1:] for p in top], "count": count[top], "gpu_duration_ns": gpu[top].astype(np.int64),
        "cpu_duration_ns": cpu[top].astype(np.int64),
    })  # fmt: skip


def op_kernel_map(job: JobTimeline | RankTimeline) -> Tables:
    """Host op name -> the kernels launched inside it: table ``ops`` by the innermost op around
    each launch, ``top_ops`` by the outermost one (below a profiler step), and ``pairs``: one row
    per (level, op, kernel name) with its count and GPU time."""
    job = as_job(job)
    out: dict[str, list[dict]] = {"ops": [], "top_ops": [], "pairs": []}
    for t in job:
        x = np.flatnonzero(t.op >= 0)
        if not x.size or not len(t.host):
            continue
        step = np.fromiter((bool(_STEP.match(n)) for n in t.names), bool, len(t.names))[t.host.name]
        parent = t.host.parent
        at_top = parent < 0
        at_top[~at_top] = step[parent[~at_top]]
        for level, op_rows in (("ops", t.op[x]), ("top_ops", _lift(t, t.op[x], at_top | step))):
            out[level] += _map(t, x, op_rows, level, out["pairs"])
    summary = {} if out["ops"] else {"note": NO_HOST}
    return Tables(out, summary)


def _map(t: RankTimeline, x: np.ndarray, op_rows: np.ndarray, level: str, pairs: list) -> list[dict]:
    ops, oi = np.unique(t.host.name[op_rows], return_inverse=True)
    oi = oi.reshape(-1)
    dur = t.dur[x].astype(np.float64)
    gpu = np.bincount(oi, weights=dur)
    kernels = np.bincount(oi)
    pairs_ = np.unique(oi * (len(t.host) + 1) + op_rows, return_counts=True)[0]  # (counts: numpy's fast path)
    calls = np.bincount(pairs_ // (len(t.host) + 1), minlength=ops.size)
    kinds = np.zeros((ops.size, len(KINDS)))
    np.add.at(kinds, (oi, t.kind[x]), dur)
    pk, pi, pc = np.unique(oi * len(t.names) + t.name[x], return_inverse=True, return_counts=True)
    pg = np.bincount(pi.reshape(-1), weights=dur)
    po, pn = pk // len(t.names), pk % len(t.names)
    o = np.lexsort((pn, -pg, po))
    pairs += rows({
        "rank": np.full(o.size, t.rank), "level": [level] * o.size, "op": t.name_of(ops[po[o]]),
        "kernel": t.name_of(pn[o]), "count": pc[o], "gpu_total_ns": pg[o].astype(np.int64),
    })  # fmt: skip
    names = t.name_of(pn[o])
    split = np.searchsorted(po[o], np.arange(ops.size + 1))
    order = np.lexsort((ops, -gpu))
    return rows({
        "rank": np.full(ops.size, t.rank), "op": t.name_of(ops[order]), "count": kernels[order],
        "calls": calls[order], "gpu_total_ns": gpu[order].astype(np.int64), "gpu_mean_ns": (gpu / kernels)[order],
        **{f"{k}_ns": kinds[order, i].astype(np.int64) for i, k in enumerate(KINDS)},
        "kernel_names": [names[split[i] : split[i + 1]].tolist() for i in order.tolist()],
    })  # fmt: skip
