"""The per-thread, per-iteration op sequences of a host trace and a Kineto trace, aligned.

Why: where no id joins the two traces, their order does (`convert.align`). This module
builds what is aligned:

- host ops in call order per thread: a pre-order walk of the ET call tree, siblings by node
  id (ids grow in execution order whether a schema numbers nodes on entry or on exit);
- Kineto CPU ops per thread by start (the outer op first when two start together);
- iterations on both sides: ``ProfilerStep#N`` where both have them (host side by node id:
  an op belongs to the step whose first op precedes it; Kineto side by time), else the
  optimizer steps ("Optimizer.step#..."), else the whole trace. The host ET may record
  another iteration than the Kineto window: host iteration i is paired with Kineto
  iteration i + s, s the shift whose pairs share the most op names;
- threads: paired by tid where both traces name the same tids, else greedily by the number
  of op names they share.

Names are compared with a trailing ``#<number>`` removed (ProfilerStep#6 is ProfilerStep#2
of another window).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .align import MAX_D, align

__all__ = ["Sequences", "align_traces", "build", "consistent", "host_preorder"]

_NUM = re.compile(r"#\d+$")
_STEP = "ProfilerStep#"
_OPT = "Optimizer.step#"


def host_preorder(host) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Real (not synthetic) host rows in call order, and per row the smallest and largest
    node id of its subtree (-1 for rows not reached from a root, e.g. on a parent loop).

    Vectorized by depth: subtree sizes bottom-up, then each row's place = its parent's + 1 +
    the sizes of its earlier siblings (by id), top-down; one numpy pass per tree level."""
    n = len(host)
    syn = host.synthetic
    ids = np.asarray(host.ids, np.int64)
    par = np.where(host.parent >= 0, host.rows(np.maximum(host.parent, 0)), -1) if n else np.zeros(0, np.int64)
    par = np.where((par >= 0) & syn[np.maximum(par, 0)], -1, par)
    par[syn] = -2  # not in any tree
    rows = np.flatnonzero(~syn)
    depth = np.zeros(n, np.int64)
    live = rows[par[rows] >= 0]
    anc = par[live]
    for _ in range(rows.size + 1):
        if not live.size:
            break
        depth[live] += 1
        anc = par[anc]
        keep = anc >= 0
        live, anc = live[keep], anc[keep]
    ok = np.zeros(n, bool)
    ok[rows] = True
    if live.size:  # on or under a parent loop: reached from no root
        ok[live] = False
        bad = np.zeros(n, bool)
        bad[live] = True
        for _ in range(n):  # rows below them too
            more = ok & (par >= 0) & bad[np.maximum(par, 0)]
            if not more.any():
                break
            ok[more] = False
            bad[more] = True
    rows = rows[ok[rows]]
    d = depth[rows]
    by_depth = np.argsort(d, kind="stable")
    cuts = np.flatnonzero(np.diff(d[by_depth])) + 1
    levels = np.split(rows[by_depth], cuts) if rows.size else []
    size = np.zeros(n, np.int64)
    size[rows] = 1
    lo = np.full(n, -1, np.int64)
    hi = np.full(n, -1, np.int64)
    lo[rows] = ids[rows]
    hi[rows] = ids[rows]
    for lv in levels[:0:-1]:  # deepest first; the roots fold into nothing
        p = par[lv]
        np.add.at(size, p, size[lv])
        np.minimum.at(lo, p, lo[lv])
        np.maximum.at(hi, p, hi[lv])
    o = rows[np.lexsort((ids[rows], par[rows]))]
    sz = size[o]
    cs = np.cumsum(sz) - sz  # sizes before each row overall
    first = np.r_[True, par[o][1:] != par[o][:-1]] if o.size else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(first, np.arange(o.size), 0)) if o.size else o
    off = np.zeros(n, np.int64)
    off[o] = cs - cs[group_start]
    place = np.zeros(n, np.int64)
    for k, lv in enumerate(levels):
        place[lv] = off[lv] if k == 0 else place[par[lv]] + 1 + off[lv]
    return rows[np.argsort(place[rows], kind="stable")], lo, hi


def _marked(names: list[str], codes: np.ndarray, prefix: str) -> np.ndarray:
    table = np.fromiter((s.startswith(prefix) for s in names), bool, len(names))
    return table[codes] if table.size else np.zeros(codes.size, bool)


def _segments(host, order, lo, hi, k, kp) -> tuple[np.ndarray, np.ndarray, str]:
    """Iteration of each host row in ``order`` and of each Kineto row in ``kp`` (-1: before the
    first step), and which marks made them."""
    hname = host.name[order]
    kname = k.name[kp]
    ids = np.asarray(host.ids, np.int64)[order]
    ts = k.ts[kp]
    for prefix in (_STEP, _OPT):
        hm = _marked(host.names, hname, prefix)
        km = _marked(k.names, kname, prefix)
        if hm.any() and km.any():
            break
    else:
        return np.zeros(order.size, np.int64), np.zeros(kp.size, np.int64), "none"
    if prefix == _STEP:  # an op belongs to the step whose first op precedes it
        hb = np.unique(lo[order[hm]])
        kb = np.unique(ts[km])
        return np.searchsorted(hb, ids, "right") - 1, np.searchsorted(kb, ts, "right") - 1, "ProfilerStep"
    hb = np.unique(hi[order[hm]])  # an iteration ends with its optimizer step
    kb = np.unique(k.ts[kp[km]] + np.maximum(k.dur[kp[km]], 0))
    return np.searchsorted(hb, ids, "left"), np.searchsorted(kb, ts, "left"), "optimizer"


def _overlap(a: np.ndarray, b: np.ndarray, size: int) -> int:
    """Op names two code sequences share, counted with multiplicity (an upper bound of their LCS)."""
    if a.size == 0 or b.size == 0:
        return 0
    return int(np.minimum(np.bincount(a, minlength=size), np.bincount(b, minlength=size)).sum())


def _pair_threads(hth, hc, kth, kc, size) -> list[tuple[int, int]]:
    hs, ks = np.unique(hth).tolist(), np.unique(kth).tolist()
    if hs and set(hs) == set(ks):
        return [(t, t) for t in hs]
    scores = []
    for a in hs:
        ca = hc[hth == a]
        for b in ks:
            s = _overlap(ca, kc[kth == b], size)
            if s:
                scores.append((s, a, b))
    used_h: set[int] = set()
    used_k: set[int] = set()
    pairs = []
    for _, a, b in sorted(scores, key=lambda x: (-x[0], x[1], x[2])):
        if a not in used_h and b not in used_k:
            used_h.add(a)
            used_k.add(b)
            pairs.append((a, b))
    return pairs


def _groups(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of each value of ``keys`` (ascending within a value), in one sort."""
    o = np.argsort(keys, kind="stable")
    k = keys[o]
    cut = np.flatnonzero(k[1:] != k[:-1]) + 1
    return {int(g[0]): p for g, p in zip(np.split(k, cut), np.split(o, cut))} if o.size else {}


_MAX_PAIRS_SCORED = 8  # iteration pairs whose names are compared per shift (evenly spaced)


def _pair_iterations(hseg, hc, kseg, kc, size, anchors) -> tuple[list[tuple[int, int]], int]:
    """Host iteration i with Kineto iteration i + s: the shift s that keeps the most links
    already made by ids (``anchors``: {(host segment, Kineto segment): links}), else the one
    whose pairs share the most op names (a few pairs per shift), then the smallest."""
    hg, kg = _groups(hseg), _groups(kseg)
    hi = sorted(set(hg) - {-1})
    ki = sorted(set(kg) - {-1})
    h_idx = {a: i for i, a in enumerate(hi)}
    k_idx = {b: j for j, b in enumerate(ki)}
    votes: dict[int, int] = {}
    for (a, b), c in anchors.items():
        if a in h_idx and b in k_idx:
            d = k_idx[b] - h_idx[a]
            votes[d] = votes.get(d, 0) + c
    hist: dict[tuple[int, int], np.ndarray] = {}

    def counts(side: int, x: int) -> np.ndarray:
        if (side, x) not in hist:
            g, codes = (hg, hc) if side == 0 else (kg, kc)
            hist[side, x] = np.bincount(codes[g[x]], minlength=size)
        return hist[side, x]

    best: tuple[tuple[int, int], int, list] = ((-1, -1), 0, [])
    shifts = list(range(-(len(hi) - 1), len(ki))) if hi and ki else []
    if votes:  # the links by ids decide
        top = max(votes.values())
        shifts = [d for d in sorted(votes) if votes[d] == top and -(len(hi) - 1) <= d < len(ki)]
    for s in shifts:
        pairs = [(hi[i], ki[i + s]) for i in range(max(0, -s), min(len(hi), len(ki) - s))]
        kept = votes.get(s, 0)
        pick = pairs
        if len(pairs) > _MAX_PAIRS_SCORED:
            pick = [pairs[int(j)] for j in np.linspace(0, len(pairs) - 1, _MAX_PAIRS_SCORED)]
        shared = sum(int(np.minimum(counts(0, a), counts(1, b)).sum()) for a, b in pick)
        score = (kept, shared * len(pairs) // len(pick))
        if score > best[0] or (score == best[0] and abs(s) < abs(best[1])):
            best = (score, s, pairs)
    pairs = list(best[2])
    if -1 in hg and -1 in kg:
        pairs.append((-1, -1))
    return pairs, best[1]


@dataclass(eq=False)
class Sequences:
    """Both traces as ordered sequences: host rows in call order (``order``) and Kineto CPU
    positions (into ``cpu_rows``) in time order (``korder``), with name codes, threads and
    iterations; ``hrank``/``krank`` give each row's / position's place in its order (-1)."""

    order: np.ndarray
    korder: np.ndarray
    hc: np.ndarray
    kc: np.ndarray
    hth: np.ndarray
    kth: np.ndarray
    hseg: np.ndarray
    kseg: np.ndarray
    hrank: np.ndarray
    krank: np.ndarray
    size: int
    same_tids: bool
    marks: str


def build(host, k, cpu_rows: np.ndarray) -> Sequences:
    order, lo, hi = host_preorder(host)
    kp = cpu_rows[np.lexsort((np.arange(cpu_rows.size), -k.dur[cpu_rows], k.ts[cpu_rows]))]
    kpos_of_row = np.full(len(k), -1, np.int64)
    kpos_of_row[cpu_rows] = np.arange(cpu_rows.size)
    table: dict[str, int] = {}
    h_lut = np.array([table.setdefault(_NUM.sub("#", s), len(table)) for s in host.names], np.int64)
    k_lut = np.array([table.setdefault(_NUM.sub("#", s), len(table)) for s in k.names], np.int64)
    hc = h_lut[host.name[order]] if order.size else np.zeros(0, np.int64)
    kc = k_lut[k.name[kp]] if kp.size else np.zeros(0, np.int64)
    hth = np.asarray(host.tid, np.int64)[order]
    ktid = k.tid[kp].astype(np.int64)
    same = bool(hth.size) and set(np.unique(hth).tolist()) == set(np.unique(ktid).tolist())
    if same or not kp.size:
        kth = ktid
    else:  # one key per (pid, tid) of the CPU ops only (`KinetoTrace.thread_keys` sorts every event)
        pair = k.pid[kp].astype(np.int64) * (1 << 32) + (ktid & 0xFFFFFFFF)
        kth = np.unique(pair, return_inverse=True)[1].reshape(-1).astype(np.int64)
    hseg, kseg, marks = _segments(host, order, lo, hi, k, kp)
    hrank = np.full(len(host), -1, np.int64)
    hrank[order] = np.arange(order.size)
    korder = kpos_of_row[kp]
    krank = np.full(cpu_rows.size, -1, np.int64)
    krank[korder] = np.arange(korder.size)
    return Sequences(order, korder, hc, kc, hth, kth, hseg, kseg, hrank, krank, len(table), same, marks)


def _lis(y: list[int]) -> list[int]:
    """Indices of a longest strictly increasing subsequence of y (patience sorting)."""
    tails: list[int] = []
    tail_idx: list[int] = []
    prev = [-1] * len(y)
    for i, v in enumerate(y):
        j = bisect.bisect_left(tails, v)
        if j == len(tails):
            tails.append(v)
            tail_idx.append(i)
        else:
            tails[j] = v
            tail_idx[j] = i
        prev[i] = tail_idx[j - 1] if j else -1
    out = []
    i = tail_idx[-1] if tail_idx else -1
    while i >= 0:
        out.append(i)
        i = prev[i]
    return out[::-1]


def consistent(seq: Sequences, rows: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """Mask of the links (host row -> Kineto position) that keep both orders: per pair of
    threads, the longest set of links whose host and Kineto orders agree. Links by an id that
    only coincides (same name, same number, another iteration) cross the true ones and go."""
    keep = np.zeros(rows.size, bool)
    hr = seq.hrank[rows]
    kr = seq.krank[kpos]
    ok = (hr >= 0) & (kr >= 0)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return keep
    ht = seq.hth[hr[idx]]
    kt = seq.kth[kr[idx]]
    o = idx[np.lexsort((hr[idx], kt, ht))]
    grp = np.stack([seq.hth[hr[o]], seq.kth[kr[o]]], axis=1)
    cut = np.flatnonzero((grp[1:] != grp[:-1]).any(axis=1)) + 1
    for g in np.split(o, cut):
        keep[g[_lis(kr[g].tolist())]] = True
    return keep


def align_traces(
    seq: Sequences, pos: np.ndarray, free_k: np.ndarray, real: np.ndarray, *, max_d: int = MAX_D
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Host rows and the positions in ``cpu_rows`` they align to, where both are still free
    (``pos`` < 0 and ``real``; ``free_k``); and what was aligned: thread and iteration pairs,
    and how many ops the paired iterations hold on each side."""
    order, korder = seq.order, seq.korder
    hseg, kseg, hc, kc = seq.hseg, seq.kseg, seq.hc, seq.kc
    linked = np.flatnonzero(pos >= 0)
    lh, lk_ = seq.hrank[linked], seq.krank[pos[linked]]
    ok = (lh >= 0) & (lk_ >= 0)
    anchors: dict[tuple[int, int], int] = {}
    if ok.any():
        span = int(kseg.max(initial=0)) + 2
        key, cnt = np.unique((hseg[lh[ok]] + 1) * span + (kseg[lk_[ok]] + 1), return_counts=True)
        anchors = {(int(x // span) - 1, int(x % span) - 1): int(c) for x, c in zip(key.tolist(), cnt.tolist())}
    threads = _pair_threads(seq.hth, hc, seq.kth, kc, seq.size)
    iters, shift = _pair_iterations(hseg, hc, kseg, kc, seq.size, anchors)
    out_h: list[np.ndarray] = []
    out_k: list[np.ndarray] = []
    complete = True
    # only the (thread, iteration) pieces that hold host ops still unlinked are aligned
    todo = (pos[order] < 0) & real[order]
    nseg = int(max(hseg.max(initial=0), kseg.max(initial=0))) + 2
    hgrp = _groups(seq.hth * nseg + (hseg + 1)) if order.size else {}
    kgrp = _groups(seq.kth * nseg + (kseg + 1)) if korder.size else {}
    for a, b in threads:
        for sa, sb in iters:
            ha = hgrp.get(a * nseg + sa + 1)
            kb = kgrp.get(b * nseg + sb + 1)
            if ha is None or kb is None or not todo[ha].any():
                continue
            ia, ib, done = align(hc[ha], kc[kb], max_d)
            complete &= done
            rows = order[ha[ia]]
            kpos = korder[kb[ib]]
            ok = (pos[rows] < 0) & real[rows] & free_k[kpos]
            out_h.append(rows[ok])
            out_k.append(kpos[ok])
    info = {
        "host_ops_in_iterations": int(np.isin(hseg, [a for a, _ in iters]).sum()) if iters else 0,
        "kineto_ops_in_iterations": int(np.isin(kseg, [b for _, b in iters]).sum()) if iters else 0,
        "threads": [[int(a), int(b)] for a, b in threads],
        "iterations": [[int(a), int(b)] for a, b in iters],
        "iteration_marks": seq.marks,
        "iteration_shift": int(shift),
        "complete": bool(complete),
    }
    if not out_h:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), info
    return np.concatenate(out_h), np.concatenate(out_k), info
