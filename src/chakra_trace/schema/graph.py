"""A trace's dependency graph over rows: the one place its edges, orders and cycles are computed.

Edges go from a dependent row (`src`) to the row it depends on (`dst`), data dependencies
first, then control ones, each in entry order. Dependencies on ids that are not in the trace
(`missing`) and on the node itself (`self_deps`) are not edges; they are counted, so a
simulator can still refuse to run what they block. Everything derived (CSR lists, in-degree,
topological order, cycles, strongly connected components) is computed on first use.
"""

from __future__ import annotations

import heapq
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ChakraError

if TYPE_CHECKING:
    from .trace import Trace

KINDS = ("data", "ctrl")


def _csr(key: np.ndarray, value: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`value` grouped by `key` (stable, so entry order is kept within a row) as (indptr, values)."""
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(key, minlength=n), out=indptr[1:])
    return indptr, value[np.argsort(key, kind="stable")]


class DepGraph:
    """Row-level dependencies of one trace (`Trace.graph()` builds and caches it)."""

    def __init__(
        self,
        n: int,
        src: np.ndarray,
        dst: np.ndarray,
        ids: np.ndarray | None = None,
        *,
        missing: int = 0,
        self_deps: np.ndarray | None = None,
    ):
        """Edges as given: row src[k] depends on row dst[k] (both in 0..n-1). `ids` (default: the
        rows) break ties in `order()`; `missing` and `self_deps` count what is not an edge."""
        self.n = int(n)
        self.src = np.asarray(src, np.int64)
        self.dst = np.asarray(dst, np.int64)
        self.ids = np.arange(self.n, dtype=np.uint64) if ids is None else ids
        self.missing = int(missing)
        self.self_deps = np.zeros(self.n, np.int64) if self_deps is None else self_deps

    @classmethod
    def of(cls, trace: Trace, kinds: tuple[str, ...] = KINDS) -> DepGraph:
        """The dependencies of `kinds` ("data", "ctrl") of a trace."""
        n = len(trace)
        parts = [trace.dep_rows(k) for k in kinds]
        src = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        dst = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        dep_ids = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.uint64)
        missing = dst < 0
        self_dep = ~missing & (dep_ids == trace.ids[src])
        keep = ~missing & ~self_dep
        return cls(
            n,
            src[keep],
            dst[keep],
            trace.ids,
            missing=int(missing.sum()),
            self_deps=np.bincount(src[self_dep], minlength=n).astype(np.int64),
        )

    # ------------------------------------------------------------------ adjacency
    @cached_property
    def preds(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, rows): the rows each row depends on, in entry order."""
        return _csr(self.src, self.dst, self.n)

    @cached_property
    def succs(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, rows): the rows that depend on each row, in edge order."""
        return _csr(self.dst, self.src, self.n)

    @cached_property
    def indegree(self) -> np.ndarray:
        """Number of dependency edges of each row (repeated entries count once each)."""
        return np.bincount(self.src, minlength=self.n).astype(np.int64)

    # ------------------------------------------------------------------ order
    def _id_order(self) -> np.ndarray | None:
        """Rows by id when that order already respects every edge (the common case), else None."""
        by_id = np.argsort(self.ids, kind="stable")
        if self.src.size == 0:
            return by_id
        pos = np.empty(self.n, np.int64)
        pos[by_id] = np.arange(self.n)
        return by_id if bool((pos[self.dst] < pos[self.src]).all()) else None

    def kahn(self) -> np.ndarray:
        """Rows in a topological order, dependencies first and the lowest id first among ready
        rows. Rows on or behind a cycle never become ready, so the order is shorter than n when
        there is one."""
        fast = self._id_order()
        if fast is not None:
            return fast
        indptr, succ = self.succs
        ip, children = indptr.tolist(), succ.tolist()
        ids = self.ids.tolist()
        deg = self.indegree.tolist()
        heap = [(ids[r], r) for r in np.flatnonzero(self.indegree == 0).tolist()]
        heapq.heapify(heap)
        out: list[int] = []
        push, pop = heapq.heappush, heapq.heappop
        while heap:
            _, r = pop(heap)
            out.append(r)
            for c in children[ip[r] : ip[r + 1]]:
                deg[c] -= 1
                if deg[c] == 0:
                    push(heap, (ids[c], c))
        return np.asarray(out, np.int64)

    @cached_property
    def _order(self) -> np.ndarray:
        return self.kahn()

    def order(self, partial: bool = False) -> np.ndarray:
        """Every row in topological order (lowest id first among ready rows); ChakraError on a
        cycle (``partial``: the rows that can run, without the ones on or behind a cycle)."""
        out = self._order
        if out.size < self.n and not partial:
            stuck = np.ones(self.n, bool)
            stuck[out] = False
            ids = np.sort(self.ids[stuck])
            shown = ", ".join(str(int(i)) for i in ids[:10]) + (", ..." if ids.size > 10 else "")
            raise ChakraError(
                f"dependency cycle: {ids.size} nodes on or behind it never become ready "
                f"(ids {shown}); `chakra validate` shows one"
            )
        return out

    # ------------------------------------------------------------------ cycles
    def cycle(self) -> tuple[list[int], int] | None:
        """One dependency cycle, or None if the graph is acyclic: (its rows, each depending on the
        next; how many rows can never run because they are on or behind a cycle)."""
        src, dst = self.src, self.dst
        if src.size == 0 or (dst < src).all() or (self.ids[dst] < self.ids[src]).all():
            return None  # rows, or ids, are a topological order
        ran = self._order
        if ran.size == self.n:
            return None
        left = np.ones(self.n, bool)
        left[ran] = False
        # every remaining row has a remaining dependency: follow them until one repeats
        e = left[src] & left[dst]
        pred = np.full(self.n, -1, np.int64)
        pred[src[e]] = dst[e]  # any remaining dependency will do
        v = int(np.flatnonzero(left)[0])
        seen: dict[int, int] = {}
        path: list[int] = []
        while v not in seen:
            seen[v] = len(path)
            path.append(v)
            v = int(pred[v])
        return path[seen[v] :], int(left.sum())

    @cached_property
    def scc(self) -> np.ndarray:
        """Strongly connected component of each row (iterative Tarjan). An edge lies on a cycle
        exactly when both its ends share a component."""
        n = self.n
        indptr, preds = self.preds
        ipl, adj = indptr.tolist(), preds.tolist()
        index = [-1] * n
        low = [0] * n
        on_stack = [False] * n
        label = [-1] * n
        stack: list[int] = []
        counter = comp = 0
        for root in range(n):
            if index[root] >= 0:
                continue
            work = [(root, ipl[root])]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack[root] = True
            while work:
                v, k = work[-1]
                if k < ipl[v + 1]:
                    work[-1] = (v, k + 1)
                    w = adj[k]
                    if index[w] < 0:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on_stack[w] = True
                        work.append((w, ipl[w]))
                    elif on_stack[w] and index[w] < low[v]:
                        low[v] = index[w]
                    continue
                work.pop()
                if work:
                    u = work[-1][0]
                    if low[v] < low[u]:
                        low[u] = low[v]
                if low[v] == index[v]:
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        label[w] = comp
                        if w == v:
                            break
                    comp += 1
        return np.asarray(label, np.int64)
