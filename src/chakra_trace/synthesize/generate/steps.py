"""A recording of several training steps as one job per step: the unit a generator learns from.

The PyTorch converter keeps the profiler's step windows (`Trace.step_bounds_us`). Each rank's
ops are assigned to the window their start falls in (ops before the first cut to the first
step, after the last to the last), METADATA nodes to every step, and dependencies that cross
a cut are dropped: a step starts from what its own ops need. A trace without step windows is
one step. Each step's trace carries its own window only (its two bounds): a copy of all k
bounds in each of k steps made memory grow with k^2.
"""

from __future__ import annotations

import numpy as np

from ...io.workload import Workload
from ...schema import proto as pb
from ...schema.enums import STEP_BOUNDS, NodeType
from ...schema.trace import Trace


def _cut(t: Trace, rows: np.ndarray) -> Trace:
    out = t.take(rows)
    for kind in ("data", "ctrl"):
        flat = getattr(out, kind)
        if flat.size:
            out = out.with_deps(kind, np.isin(flat, out.ids))
    return out


def _without_bounds(t: Trace) -> Trace:
    """`t` (its columns shared, not copied) with metadata that lacks the step bounds."""
    meta = pb.GlobalMetadata()
    meta.CopyFrom(t.metadata)  # (once per trace)
    for i in reversed([i for i, a in enumerate(meta.attr) if a.name == STEP_BOUNDS]):
        del meta.attr[i]
    view = t.slice(0, len(t))
    view.metadata = meta
    return view


def _step(base: Trace, rows: np.ndarray, lo: int, hi: int) -> Trace:
    """The trace of one step: `rows` of `base`, with the window lo..hi as its step bounds."""
    out = _cut(base, rows)
    out.metadata.attr.add(name=STEP_BOUNDS).int64_list.values.extend([lo, hi])
    return out


def step_count(w: Workload) -> int:
    """The recorded steps of a job (the fewest over its ranks; 1 without step windows)."""
    counts = []
    for t in w.traces.values():
        b = t.step_bounds_us
        counts.append(max(b.size - 1, 1) if b is not None and b.size >= 2 else 1)
    return min(counts, default=1)


def split_steps(w: Workload) -> list[Workload]:
    """One workload per recorded step (see the module docstring); [w] when it has one step."""
    k = step_count(w)
    if k <= 1:
        return [w]
    out: list[dict[int, Trace]] = [{} for _ in range(k)]
    done: dict[int, list[Trace]] = {}
    for r, t in w.traces.items():
        if id(t) not in done:
            bounds = t.step_bounds_us
            assert bounds is not None
            meta = t.types == NodeType.METADATA_NODE
            step = np.searchsorted(bounds[1:-1], t.start.astype(np.int64), side="right")
            step = np.minimum(step, k - 1)
            other = np.flatnonzero(~meta)  # each step's rows from one sort (a mask per step: steps x nodes)
            by_step = other[np.argsort(step[other], kind="stable")]
            parts = np.split(by_step, np.searchsorted(step[by_step], np.arange(1, k)))
            keep = np.flatnonzero(meta)
            base = _without_bounds(t)
            b = bounds.tolist()
            b[k] = b[-1]  # (a rank with more windows than the job: its last step runs to its end)
            done[id(t)] = [_step(base, np.sort(np.concatenate([keep, p])), b[i], b[i + 1]) for i, p in enumerate(parts)]
        for i in range(k):
            out[i][r] = done[id(t)][i]
    return [Workload(traces, dict(w.groups), dict(w.paths)) for traces in out]
