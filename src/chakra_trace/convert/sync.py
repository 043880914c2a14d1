"""Which GPU work a host op that synchronized waits for, as few edges and little work as exact.

A host op that waited inside a runtime call (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
``cudaEventSynchronize``, a blocking copy) depends on each stream's last op that had started
before the host op and had ended when the call returned (`rank_graph.GraphBuilder._sync_edges`).

Asked of every synchronizing op and every stream, that is syncs x streams edges and look-ups (a
223 KB gzip Kineto file of 8,000 synchronizing threads and 8,001 streams: 64 million edges,
220 s, 10 GB). Two facts make the edges few:

- A host op reaches every earlier op of its thread through the thread's order edges, so once a
  synchronizing op depends on a stream's op, later ones of that thread need no edge to it: per
  thread, each stream op gets at most one edge, from the first synchronizing op that finds it
  last on its stream and ended. (Where a backend op's order edge skips its issuer, the thread's
  order is not a chain: the next synchronizing op starts afresh.)
- A stream op is last on its stream from its position to the next op's, so the ops a
  synchronizing op looks at are the streams' last ops before the thread's first synchronizing
  op and the stream ops that start between its first and last: no look-up per (op, stream).

The converted graph orders the same nodes as before (the same node reaches the same stream
ops). The look-ups are counted before any is made; past `limit` (4 per node of the trace plus
2^22, or ``$CHAKRA_TRACE_MAX_SYNC_LOOKUPS``) the trace is refused with the figures.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ChakraError
from ..schema.wire import ranges

LIMIT_ENV = "CHAKRA_TRACE_MAX_SYNC_LOOKUPS"
NONE = np.iinfo(np.int64).min  # (no call returned inside the op)


def limit(nodes: int) -> int:
    """Look-ups the synchronization edges of a trace of `nodes` nodes may take."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if not raw:
        return 4 * nodes + (1 << 22)
    try:
        value = int(raw)
    except ValueError:
        raise ChakraError(f"${LIMIT_ENV}: expected a number of look-ups, got {raw[:40]!r}") from None
    if value < 0:
        raise ChakraError(f"${LIMIT_ENV}: expected a number of look-ups >= 0, got {value}")
    return value


def waited_until(s: np.ndarray, e: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Per host op (start s, end e; one thread), when the last synchronizing call inside it that
    had returned by the op's end returned: the largest t1 of a call with s <= t0 and t1 <= e
    (calls sorted by t0). `NONE` where none did."""
    a = np.searchsorted(t0, s, "left")
    b = np.searchsorted(t0, e, "right")
    n = b - a
    out = np.full(s.size, NONE, np.int64)
    if int(n.sum()) <= 4 * (s.size + t0.size):  # ops of a thread do not overlap: a call lies in one or two
        owner = np.repeat(np.arange(s.size), n)
        j = ranges(a, n)
        ok = t1[j] <= e[owner]
        np.maximum.at(out, owner[ok], t1[j][ok])
        return out
    return _waited_until_nested(a, b, e, t1, out)


def _waited_until_nested(a, b, e, t1, out) -> np.ndarray:
    """`waited_until` for ops that overlap (each call inside many): ops by end, calls by return,
    a segment tree of the returned calls by position, O((ops + calls) log calls)."""
    m = t1.size
    size = 1 << max(m - 1, 0).bit_length()
    tree = [NONE] * (2 * size)
    by_end = np.argsort(t1, kind="stable").tolist()
    t1l = t1.tolist()
    p = 0
    for k in np.argsort(e, kind="stable").tolist():
        ek = int(e[k])
        while p < m and t1l[by_end[p]] <= ek:
            i = by_end[p] + size
            tree[i] = t1l[by_end[p]]
            i >>= 1
            while i:
                tree[i] = max(tree[2 * i], tree[2 * i + 1])
                i >>= 1
            p += 1
        lo, hi, best = int(a[k]) + size, int(b[k]) + size, NONE
        while lo < hi:
            if lo & 1:
                best = max(best, tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                best = max(best, tree[hi])
            lo >>= 1
            hi >>= 1
        out[k] = best
    return out


def _first_at_least(u: np.ndarray, i0: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each query, the first i >= i0 with u[i] >= x (u.size where none): a descent over
    maxima of power-of-two blocks, one numpy pass per level."""
    m = u.size
    table = [u]
    while (1 << len(table)) <= m:
        prev, h = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-h], prev[h:]))
    pos = i0.copy()
    for lv in range(len(table) - 1, -1, -1):
        step = 1 << lv
        t = table[lv]
        fits = pos + step <= m
        below = np.zeros(pos.size, bool)
        below[fits] = t[pos[fits]] < x[fits]
        pos[below] += step
    return pos


def _last_at_least(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each query, the last i in [lo, hi) with values[i] >= x (-1: none): `_first_at_least`
    over the values reversed."""
    n = values.size
    i = n - 1 - _first_at_least(np.ascontiguousarray(values[::-1]), n - np.asarray(hi, np.int64), x)
    return np.where(i >= lo, i, -1)


class StreamTails:
    """The GPU ops of a timeline grouped by stream, to find which op was last on each stream at
    a position and where each op stops being last."""

    def __init__(self, pos: np.ndarray, key: np.ndarray, n_pos: int):
        self.pos = pos  # positions of the GPU ops, ascending
        order = np.argsort(key, kind="stable")
        k = key[order]
        same = k[1:] == k[:-1]
        self.next = np.full(pos.size, n_pos, np.int64)  # position of the next op on its stream
        self.next[order[:-1][same]] = pos[order[1:][same]]
        first = np.r_[True, ~same] if k.size else np.zeros(0, bool)
        stream = np.cumsum(first) - 1  # dense stream number, per op in `order`
        self._order = order
        self._keyed = stream * (n_pos + 1) + pos[order]  # ascending
        firsts = order[first]
        by_first = np.argsort(pos[firsts], kind="stable")
        self._first_pos = pos[firsts][by_first]
        self._first_stream = stream[first][by_first]
        self._span = n_pos + 1
        self.streams = int(first.sum())

    def started_before(self, p: int) -> int:
        """Streams with an op before position p."""
        return int(np.searchsorted(self._first_pos, p))

    def last_before(self, p: int) -> np.ndarray:
        """Each stream's last op before position p (indices into `pos`)."""
        s = self._first_stream[: self.started_before(p)]
        at = np.searchsorted(self._keyed, s * self._span + p) - 1
        return self._order[at]

    def between(self, lo: int, hi: int) -> np.ndarray:
        """The ops at positions strictly between lo and hi."""
        return np.arange(np.searchsorted(self.pos, lo, "right"), np.searchsorted(self.pos, hi, "left"))


def segments(k: np.ndarray, breaks: np.ndarray) -> list[slice]:
    """The runs of one thread's synchronizing ops (positions k, ascending) within which each
    reaches the ones before it: a run ends before an op when a position in (previous, op]
    is in `breaks` (sorted: ops whose order edge skips the op before them)."""
    if not k.size:
        return []
    seen = np.searchsorted(breaks, k, "right")
    cut = np.flatnonzero(seen[1:] != seen[:-1]) + 1
    bounds = [0, *cut.tolist(), k.size]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def lookups(tails: StreamTails, k: np.ndarray) -> int:
    """Stream ops a run (positions k) looks at: the streams' last ops before its first op, and
    the ops between its first and last."""
    first, last = int(k[0]), int(k[-1])
    return (
        tails.started_before(first)
        + int(np.searchsorted(tails.pos, last, "left"))
        - int(np.searchsorted(tails.pos, first, "right"))
    )


def edges(tails: StreamTails, e: np.ndarray, k: np.ndarray, until: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One run: synchronizing ops at positions k (ascending) that waited until `until`; stream
    ops of end e (per GPU op). Returns (run index, GPU op index) of the edges: each stream op
    that is last on its stream at some op of the run and had ended by its wait, from the
    first such op."""
    cand = np.concatenate([tails.last_before(int(k[0])), tails.between(int(k[0]), int(k[-1]))])
    if not cand.size:
        return cand, cand
    i0 = np.searchsorted(k, tails.pos[cand], "right")  # the first op after it
    i1 = np.searchsorted(k, tails.next[cand], "left")  # ops before the next on its stream
    live = i0 < i1
    cand, i0, i1 = cand[live], i0[live], i1[live]
    at = _first_at_least(until, i0, e[cand])
    ok = at < i1
    return at[ok], cand[ok]


def after_the_wait(
    start: np.ndarray, dur: np.ndarray, indptr: np.ndarray, preds: np.ndarray, device: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Start and duration of each node once a host op that waited for the GPU keeps only the time
    after its wait: a synchronizing op (``aten::item``, a blocking copy) depends on GPU work that
    ended while it sat inside the call, so it starts when that work ended and runs to its recorded
    end. With its whole recorded duration after the dependency the op would end late by the time
    it waited, in the `recorded` replay and in every what-if (a faster GPU would not shorten it).

    ``indptr``/``preds``: each node's predecessors (`data_deps` CSR); ``device``: which nodes are
    GPU work. Times in the trace's unit; nodes that waited for nothing are unchanged."""
    start, dur = np.asarray(start, np.int64), np.asarray(dur, np.int64)
    n = start.size
    preds = np.asarray(preds, np.int64)
    if not preds.size:
        return start, dur
    node = np.repeat(np.arange(n), np.diff(indptr))
    on_gpu = device[preds] & ~device[node]
    if not on_gpu.any():
        return start, dur
    end = start + dur
    ready = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ready, node[on_gpu], end[preds[on_gpu]])
    late = ready > start
    new_start = np.where(late, np.minimum(ready, end), start)
    return new_start, np.where(late, end - new_start, dur)
