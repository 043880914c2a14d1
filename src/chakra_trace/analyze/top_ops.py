"""Which operations the step spends its time in, and which of them it actually waits for.

Total time says where the work is; exposed time (the part of an operation on the job's
critical path) says what would shorten the step if it got faster. An op can be large and
fully hidden (a gradient all-reduce under backward compute) or small and fully exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.enums import node_type_name
from ..schema.trace import Trace
from ..table import Column, Table, Tabular
from .critical_path import JobCriticalPath, job_critical_path

_COLUMNS = ("name", "type", "count", "ranks", "total_us", "mean_us", "max_us", "exposed_us", "exposed_share")


@dataclass
class TopOps(Tabular):
    """One row per (op name, node type), over every rank, biggest first by ``by``.
    ``exposed_share`` is the exposed time over the step (the critical path's length)."""

    rows: list[dict] = field(default_factory=list)
    by: str = "total"
    source: str = "recorded"
    recording_us: float = 0.0  # the job's span (the whole recording), what exposed shares divide

    @property
    def step_us(self) -> float:
        """Deprecated alias of `recording_us`."""
        return self.recording_us

    def to_dict(self) -> dict:
        return {"by": self.by, "source": self.source, "recording_us": self.recording_us, "ops": self.rows}

    def to_table(self) -> Table:
        """One row per (op name, node type), in the order ranked."""
        return Table.from_records(
            self.rows,
            _COLUMNS,
            title=f"top operations by {self.by} time ({self.source}; µs)",
            spec={"exposed_share": Column(format=".2%")},
        )


def top_ops(
    workload: Workload | Trace,
    result=None,
    *,
    by: str = "total",
    n: int | None = 20,
    path: JobCriticalPath | None = None,
) -> TopOps:
    """Ops by total or exposed time (``by``: "total", "exposed" or "count"), from the
    recorded times or a simulation ``result``. Exposed time needs the job critical path
    (computed here unless given); a workload without recorded times and without a result
    reports total time only."""
    if by not in ("total", "exposed", "count"):
        raise ValueError(f"by must be 'total', 'exposed' or 'count', not {by!r}")
    if isinstance(workload, Trace):
        workload = Workload({0: workload})
    if result is not None:
        per_rank = {
            r: (t, _ran_durations(result.nodes[r]))
            for r, t in (
                result.traces or {r: workload.traces.get(r, workload.traces.get(0)) for r in result.nodes}
            ).items()
        }
    else:
        per_rank = {r: (t, t.duration.astype(np.int64) * 1000) for r, t in workload.traces.items()}
    if path is None:
        try:
            path = job_critical_path(workload, result)
        except ChakraError:  # no recorded times: totals only
            pass
    agg: dict[tuple[str, int], list] = {}  # (name, type) -> [count, total_ns, max_ns, ranks]
    for t, dur in per_rank.values():
        ran = dur >= 0
        # (name, type) pairs: any int32 type, even one outside NodeType, keeps its own key
        key = t.name_codes.astype(np.int64) << 32 | (t.types.astype(np.int64) & 0xFFFFFFFF)
        keys, inv = np.unique(key[ran], return_inverse=True)
        inv = inv.reshape(-1)
        count = np.bincount(inv, minlength=keys.size)
        total = np.bincount(inv, weights=dur[ran], minlength=keys.size)
        mx = np.zeros(keys.size, np.int64)
        np.maximum.at(mx, inv, dur[ran])
        for k, c, s, m in zip(keys.tolist(), count.tolist(), total.tolist(), mx.tolist()):
            a = agg.setdefault((t.names[k >> 32], int(np.int32(np.uint32(k & 0xFFFFFFFF)))), [0, 0, 0, 0])
            a[0] += c
            a[1] += s
            a[2] = max(a[2], m)
            a[3] += 1
    exposed: dict[tuple[str, str], int] = {}
    if path is not None and len(path):
        c = path.columns
        for name, typ, ns in zip(c["name"].tolist(), c["type"].tolist(), c["time_ns"].tolist()):
            exposed[(name, typ)] = exposed.get((name, typ), 0) + ns
    step = path.length_ns if path is not None else 0
    rows = []
    for (name, typ), (c, total, mx, nranks) in agg.items():
        e = exposed.get((name, node_type_name(typ)))
        rows.append(
            {
                "name": name,
                "type": node_type_name(typ),
                "count": c,
                "ranks": nranks,
                "total_us": total / 1000,
                "mean_us": total / c / 1000 if c else 0.0,
                "max_us": mx / 1000,
                "exposed_us": (e or 0) / 1000 if path is not None else None,
                "exposed_share": (e or 0) / step if step else None,
            }
        )
    sort = {"total": "total_us", "exposed": "exposed_us", "count": "count"}[by]
    rows.sort(key=lambda r: (-(r[sort] or 0), -r["total_us"], r["name"]))
    return TopOps(rows[:n] if n else rows, by, "simulated" if result is not None else "recorded", step / 1000)


def _ran_durations(node_times) -> np.ndarray:
    start, end, _kind = node_times
    return np.where(end >= 0, end - start, -1).astype(np.int64)
