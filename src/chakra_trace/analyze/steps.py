"""The training steps inside a recording, and where each step's time goes.

A recording usually holds several steps (the profiler's ProfilerStep#N windows). The PyTorch
converter keeps their bounds (`Trace.step_bounds_us`); traces without them may hold
ProfilerStep# nodes; otherwise the steps are found back from what repeats: the compute ops of one rank, in start order, are the same names once per step. A
rank's time line is cut at the start of each step's first op (the first step from the rank's
first start, the last to its last end), so the steps' parts add up to the whole recording.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..intervals import union
from ..io.workload import Workload
from ..schema.resources import comm_mask, compute_mask
from ..schema.trace import Trace
from ..table import Table, Tabular
from .breakdown import COLUMNS

_STEP_PREFIX = "ProfilerStep#"


@dataclass
class Steps:
    """One rank's steps: ``bounds`` (µs, k + 1 cut points: step i is [bounds[i], bounds[i+1]))
    and how they were found (``method``), or a single window and why not (``method``)."""

    bounds: np.ndarray
    method: str

    def __len__(self) -> int:
        return max(len(self.bounds) - 1, 0)


def find_steps(trace: Trace) -> Steps:
    """The steps of one timed rank (see the module docstring)."""
    start = trace.start.astype(np.int64)
    end = start + trace.duration.astype(np.int64)
    ran = end > start
    if not ran.any():
        return Steps(np.zeros(0, np.int64), "no recorded times")
    lo, hi = int(start[ran].min()), int(end[ran].max())
    recorded = trace.step_bounds_us
    if recorded is not None and recorded.size >= 2:
        cuts = recorded[(recorded > lo) & (recorded < hi)]
        return Steps(np.concatenate([[lo], cuts, [hi]]), "the profiler's step windows (recorded)")
    names = trace.names
    marked = [i for i, n in enumerate(names) if n.startswith(_STEP_PREFIX)]
    if marked:
        rows = np.flatnonzero(np.isin(trace.name_codes, marked) & ran)
        cuts = np.unique(start[rows])
        return Steps(np.concatenate([[lo], cuts[cuts > lo], [hi]]), "ProfilerStep annotations")
    rows = np.flatnonzero(compute_mask(trace) & ran)
    rows = rows[np.argsort(start[rows], kind="stable")]
    seq = trace.name_codes[rows]
    n = len(seq)
    for k in range(n // 2, 1, -1):  # the most repeats: a step's own repeated layers do not repeat the whole
        if n % k == 0 and (seq.reshape(k, -1) == seq[: n // k]).all():
            firsts = start[rows[:: n // k]]
            return Steps(np.concatenate([[lo], firsts[1:], [hi]]), "the compute ops repeat once per step")
    return Steps(np.array([lo, hi]), "one window: the compute ops do not repeat as whole steps")


@dataclass
class StepBreakdown(Tabular):
    """Per rank and step (µs): the `Breakdown` columns of each step's window, and a row per rank
    for the whole recording (``step`` "all"), whose parts are the sums of its steps."""

    rows: list[dict] = field(default_factory=list)
    methods: dict[int, str] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """Steps found on every rank (the fewest, when ranks disagree)."""
        counts = [sum(1 for r in self.rows if r["rank"] == rank and r["step"] != "all") for rank in self.methods]
        return min(counts) if counts else 0

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "methods": {str(k): v for k, v in self.methods.items()}}

    def to_table(self) -> Table:
        """One row per rank and step (the index: rank, step)."""
        return Table.from_records(
            self.rows, ["rank", "step", *COLUMNS], title="per-step breakdown (µs)", index=["rank", "step"]
        )


def step_breakdown(workload: Workload | Trace) -> StepBreakdown:
    """`find_steps` on every timed rank, and each step's breakdown (nodes clipped to it)."""
    workload = Workload.of(workload)
    out = StepBreakdown()
    for r in workload.ranks:
        t = workload.traces[r]
        if not t.timed:
            continue
        steps = find_steps(t)
        out.methods[r] = steps.method
        if not len(steps):
            continue
        start = t.start.astype(np.int64)
        end = start + t.duration.astype(np.int64)
        parts = _per_window(start, end, compute_mask(t), comm_mask(t), steps.bounds)
        total = dict.fromkeys(COLUMNS, 0)
        for i in range(len(steps)):
            a, b = int(steps.bounds[i]), int(steps.bounds[i + 1])
            compute, comm, both, other = (int(x[i]) for x in parts)
            row = {
                "span_us": b - a,
                "compute_us": compute,
                "comm_us": comm,
                "overlap_us": both,
                "exposed_comm_us": comm - both,
                "other_us": other,
                # before the window's first op or after its last counts as idle too
                "idle_us": b - a - (compute + comm - both + other),
            }
            for k in COLUMNS:
                total[k] += row[k]
            out.rows.append({"rank": r, "step": str(i + 1), **row})
        out.rows.append({"rank": r, "step": "all", **total})
    return out


def _per_window(
    start: np.ndarray, end: np.ndarray, comp: np.ndarray, comm: np.ndarray, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window [bounds[i], bounds[i+1]): compute, communication, their overlap and other busy
    time (`intervals.busy` of the nodes clipped to the window). The unions are built once and
    measured at every bound: clipping commutes with union, so a recording of 50,000 steps costs
    one sort, where clipping the nodes per step cost steps x nodes."""
    ran = end >= start
    cu = union(start[ran & comp], end[ran & comp])
    mu = union(start[ran & comm], end[ran & comm])
    allu = union(start[ran], end[ran])
    both = _intersection(cu, mu)

    def per(iv: np.ndarray) -> np.ndarray:  # (a window whose end is before its start holds nothing)
        return np.maximum(np.diff(_measure_to(iv, bounds)), 0)

    c, m, b, a = per(cu), per(mu), per(both), per(allu)
    return c, m, b, a - (c + m - b)


def _measure_to(iv: np.ndarray, x: np.ndarray) -> np.ndarray:
    """How much of the disjoint sorted intervals `iv` lies before each point of x."""
    if not iv.size:
        return np.zeros(x.size, np.int64)
    s, e = iv[:, 0], iv[:, 1]
    before = np.concatenate([[0], np.cumsum(e - s)])  # length of the intervals before each one
    last = np.searchsorted(s, x, side="right") - 1  # the interval starting last at or before x
    at = np.maximum(last, 0)
    return np.where(last >= 0, before[at] + np.clip(np.minimum(x, e[at]) - s[at], 0, None), 0)


def _intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The intervals two disjoint sorted unions share (disjoint, sorted), as `intervals.overlap`
    measures them."""
    if not a.size or not b.size:
        return np.zeros((0, 2), np.int64)
    pts = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    delta = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.full(len(b), 2), np.full(len(b), -2)])
    order = np.lexsort((delta, pts))  # at equal times, ends before starts
    pts, depth = pts[order], np.cumsum(delta[order])
    both = np.flatnonzero(depth[:-1] == 3)  # inside one interval of each
    return np.stack([pts[both], pts[both + 1]], axis=1)
