"""The critical path: the chain of dependent nodes whose durations add up to the longest time.

With unlimited parallelism a trace cannot finish sooner than its critical path, so for a
trace converted from a real run the critical path should reproduce the measured step time.
Dependencies are data and control dependencies together (what ASTRA-sim resolves);
dependencies on nodes that are not in the trace are ignored.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError
from ..schema.trace import Trace


@dataclass
class CriticalPath:
    length_us: int  # sum of durations along the path
    rows: np.ndarray  # rows of the path, first to last
    ids: np.ndarray  # their node ids
    finish_us: np.ndarray = field(repr=False)  # earliest finish of every row (durations + dependencies)

    def to_pandas(self, trace: Trace):
        import pandas as pd

        return pd.DataFrame({
            "id": self.ids, "name": trace.name_array[self.rows], "type": trace.types[self.rows],
            "duration_us": trace.duration[self.rows], "finish_us": self.finish_us[self.rows],
        })


def _dependency_csr(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Predecessor rows of every row (data and control), as CSR over rows; missing deps dropped."""
    n = len(trace)
    src_d, dst_d, _ = trace.dep_rows("data")
    src_c, dst_c, _ = trace.dep_rows("ctrl")
    src = np.concatenate([src_d, src_c])
    dst = np.concatenate([dst_d, dst_c])
    keep = (dst >= 0) & (dst != src)
    src, dst = src[keep], dst[keep]
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


def critical_path(trace: Trace) -> CriticalPath:
    """Longest duration-weighted dependency chain (raises ChakraError on a dependency cycle)."""
    n = len(trace)
    if n == 0:
        return CriticalPath(0, np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
    indptr, preds = _dependency_csr(trace)
    if preds.size == 0 or (preds < np.repeat(np.arange(n), np.diff(indptr))).all():
        order = range(n)  # rows are already a topological order
    else:
        order = _topological_order(n, indptr, preds)
    ip = indptr.tolist()
    pl = preds.tolist()
    fin = [0] * n
    bp = [-1] * n
    dl = trace.duration.astype(np.int64).tolist()
    for v in order:
        a, b = ip[v], ip[v + 1]
        start, arg = 0, -1
        for k in range(a, b):
            p = pl[k]
            if arg < 0 or fin[p] > start:
                start, arg = fin[p], p
        fin[v] = start + dl[v]
        bp[v] = arg
    finish = np.asarray(fin, np.int64)
    best_pred = np.asarray(bp, np.int64)
    last = int(np.argmax(finish))
    path = [last]
    while best_pred[path[-1]] >= 0:
        path.append(int(best_pred[path[-1]]))
    rows = np.asarray(path[::-1], np.int64)
    return CriticalPath(int(finish[last]), rows, trace.ids[rows], finish)


def _topological_order(n: int, indptr: np.ndarray, preds: np.ndarray) -> list[int]:
    owner = np.repeat(np.arange(n), np.diff(indptr))
    succ_order = np.argsort(preds, kind="stable")
    succ = owner[succ_order].tolist()
    sptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(preds, minlength=n), out=sptr[1:])
    sp = sptr.tolist()
    indeg = np.diff(indptr).tolist()
    ready = [v for v in range(n) if indeg[v] == 0]
    out: list[int] = []
    while ready:
        v = ready.pop()
        out.append(v)
        for k in range(sp[v], sp[v + 1]):
            w = succ[k]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if len(out) != n:
        raise ChakraError(f"the dependencies form a cycle ({n - len(out)} nodes on or behind it); "
                          "run `chakra validate` to see one")
    return out
