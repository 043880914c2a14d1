"""Which interval encloses which, per thread: the call tree of a thread's ops (and its runtime
launches) from their start and end times alone, as every Kineto reader needs it."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._native import load as load_native

_native = load_native("chakra_trace.io._kineto")  # its `nest` sweep; None: the Python path


def interval_parents(starts: Any, ends: Any, tids: Any) -> np.ndarray:
    """Innermost enclosing interval of each interval on the same thread (-1 if none).

    ``starts``/``ends``/``tids`` are equal-length integer arrays (``tids`` is any per-thread
    key, e.g. `KinetoTrace.thread_keys()`). Interval j encloses i when they share a tid, j
    is open when i starts (``starts[j] <= starts[i] < ends[j]``) and i ends no later than j
    (``ends[i] <= ends[j]``). So intervals that only touch (``ends[j] == starts[i]``) are
    siblings, a zero-length interval at the start of another is its child and one at its end
    is not, and of two identical intervals the earlier index is the parent. An interval that
    partly overlaps an open one (which a thread's call stack never produces, but clock
    rounding can) gets the innermost open interval that really encloses it.

    One O(n log n) sort, then a linear sweep with a stack per thread.
    """
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    tids = np.asarray(tids)
    n = starts.size
    if ends.size != n or tids.size != n:
        raise ValueError("starts, ends and tids must have the same length")
    parent = np.full(n, -1, np.int64)
    if n == 0:
        return parent
    if np.any(ends < starts):
        raise ValueError("an interval ends before it starts")
    order = np.lexsort((np.arange(n), -ends, starts, tids))
    t = tids[order]
    # thread boundaries in sorted order
    cut = np.flatnonzero(t[1:] != t[:-1]) + 1
    if _native is not None:  # the same sweep in C
        out_arr = np.frombuffer(
            _native.nest(
                np.ascontiguousarray(starts[order]),
                np.ascontiguousarray(ends[order]),
                np.concatenate(([0], cut, [n])).astype(np.int64),
            ),
            np.int64,
        )
    else:
        out_arr = _sweep(starts[order].tolist(), ends[order].tolist(), [0, *cut.tolist(), n])
    has = out_arr >= 0
    res_sorted = np.full(n, -1, np.int64)
    res_sorted[has] = order[out_arr[has]]
    parent[order] = res_sorted
    return parent


def _sweep(s: list, e: list, bounds: list) -> np.ndarray:
    """Parent position of each sorted interval: one stack per thread."""
    n = len(s)
    out = [-1] * n
    for b0, b1 in zip(bounds[:-1], bounds[1:]):
        stack: list[int] = []
        pop = stack.pop
        push = stack.append
        for k in range(b0, b1):
            sk = s[k]
            while stack and e[stack[-1]] <= sk:
                pop()
            if stack:
                ek = e[k]
                top = stack[-1]
                if e[top] >= ek:
                    out[k] = top
                else:  # partial overlap: look further down for a real container
                    for j in range(len(stack) - 2, -1, -1):
                        p = stack[j]
                        if e[p] >= ek and e[p] > sk:
                            out[k] = p
                            break
            push(k)
    return np.asarray(out, np.int64)
