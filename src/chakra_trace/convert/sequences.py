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

from ..errors import ChakraError
from ..schema.wire import ranges
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


MAX_THREAD_PAIRS = 1 << 22  # (thread, thread, name) terms the thread pairing may sum (a few thousand in practice)


def _counts(th: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each (thread, name code) of a sequence with its count, sorted by code then thread."""
    if not th.size:
        return th, codes, th
    o = np.lexsort((th, codes))
    t, c = th[o], codes[o]
    first = np.r_[True, (t[1:] != t[:-1]) | (c[1:] != c[:-1])]
    at = np.flatnonzero(first)
    return t[at], c[at], np.diff(np.r_[at, t.size])


def _pair_threads(hth, hc, kth, kc, source: str = "") -> list[tuple[int, int]]:
    """Host threads with Kineto threads: by tid where both traces name the same tids, else
    greedily by the number of op names they share (with multiplicity), most first, then by
    tids. The shared counts come from one join of both sides' (thread, name) counts on the name
    (a loop over thread pairs, each masking every op, was host threads x Kineto threads x ops);
    past `MAX_THREAD_PAIRS` terms (thousands of threads on each side sharing names) a
    ChakraError names the traces (`source`)."""
    hs, ks = np.unique(hth), np.unique(kth)
    if hs.size and set(hs.tolist()) == set(ks.tolist()):
        return [(t, t) for t in hs.tolist()]
    ht, hcode, hn = _counts(hth, hc)
    kt, kcode, kn = _counts(kth, kc)
    lo = np.searchsorted(kcode, hcode, "left")
    reps = np.searchsorted(kcode, hcode, "right") - lo
    terms = int(reps.sum())
    if terms > MAX_THREAD_PAIRS:
        raise ChakraError(
            f"{source or 'host and Kineto traces'}: {hs.size:,} host threads and {ks.size:,} Kineto threads share op "
            f"names {terms:,} times over, more than the {MAX_THREAD_PAIRS:,} the thread pairing compares"
        )
    h_at = np.repeat(np.arange(ht.size), reps)
    k_at = ranges(lo, reps)
    shared = np.minimum(hn[h_at], kn[k_at])
    pair = np.searchsorted(hs, ht[h_at]) * max(ks.size, 1) + np.searchsorted(ks, kt[k_at])
    keys, inv = np.unique(pair, return_inverse=True)
    score = np.zeros(keys.size, np.int64)
    np.add.at(score, inv.reshape(-1), shared)
    a, b = keys // max(ks.size, 1), keys % max(ks.size, 1)  # (hs and ks ascending: the tids' order)
    used_h: set[int] = set()
    used_k: set[int] = set()
    pairs = []
    for i in np.lexsort((b, a, -score)).tolist():
        x, y = int(hs[a[i]]), int(ks[b[i]])
        if x not in used_h and y not in used_k:
            used_h.add(x)
            used_k.add(y)
            pairs.append((x, y))
    return pairs


def _groups(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Positions of each value of ``keys`` (ascending within a value), in one sort."""
    o = np.argsort(keys, kind="stable")
    k = keys[o]
    cut = np.flatnonzero(k[1:] != k[:-1]) + 1
    return {int(g[0]): p for g, p in zip(np.split(k, cut), np.split(o, cut))} if o.size else {}


_MAX_PAIRS_SCORED = 8  # iteration pairs whose names are compared per shift (evenly spaced)


def _pair_iterations(hseg, hc, kseg, kc, anchors) -> tuple[list[tuple[int, int]], int]:
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
    hist: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def counts(side: int, x: int) -> tuple[np.ndarray, np.ndarray]:
        """The names of an iteration and how often each occurs (sparse: a dense count per
        iteration was iterations x names)."""
        if (side, x) not in hist:
            g, codes = (hg, hc) if side == 0 else (kg, kc)
            hist[side, x] = np.unique(codes[g[x]], return_counts=True)
        return hist[side, x]

    def shared(a: int, b: int) -> int:
        (ca, na), (cb, nb) = counts(0, a), counts(1, b)
        _, ia, ib = np.intersect1d(ca, cb, assume_unique=True, return_indices=True)
        return int(np.minimum(na[ia], nb[ib]).sum())

    best: tuple[tuple[int, int], int, tuple[int, int]] = ((-1, -1), 0, (0, 0))
    shifts = list(range(-(len(hi) - 1), len(ki))) if hi and ki else []
    if votes:  # the links by ids decide
        top = max(votes.values())
        shifts = [d for d in sorted(votes) if votes[d] == top and -(len(hi) - 1) <= d < len(ki)]
    for s in shifts:  # (the host iterations paired as a range: a list per shift was shifts x iterations)
        i_lo, i_hi = max(0, -s), min(len(hi), len(ki) - s)
        n = i_hi - i_lo
        kept = votes.get(s, 0)
        pick: range | list[int] = range(i_lo, i_hi)
        if n > _MAX_PAIRS_SCORED:
            pick = [i_lo + int(j) for j in np.linspace(0, n - 1, _MAX_PAIRS_SCORED)]
        total = sum(shared(hi[i], ki[i + s]) for i in pick)
        score = (kept, total * n // len(pick))
        if score > best[0] or (score == best[0] and abs(s) < abs(best[1])):
            best = (score, s, (i_lo, i_hi))
    s = best[1]
    pairs = [(hi[i], ki[i + s]) for i in range(*best[2])]
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
    source: str = ""  # the two traces, for errors


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
    source = f"{getattr(host, 'path', None) or 'the host trace'} and {getattr(k, 'path', None) or 'the Kineto trace'}"
    return Sequences(order, korder, hc, kc, hth, kth, hseg, kseg, hrank, krank, len(table), same, marks, source)


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
    threads = _pair_threads(seq.hth, hc, seq.kth, kc, seq.source)
    iters, shift = _pair_iterations(hseg, hc, kseg, kc, anchors)
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
