"""Where each rank's step goes, from the recorded times: compute, communication, how much of
it overlaps, the exposed part, and idle time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..intervals import busy
from ..io.workload import Workload
from ..schema.resources import comm_mask, compute_mask
from ..schema.trace import Trace
from ..table import Table, Tabular
from .arrivals import comm_split

COLUMNS = ("span_us", "compute_us", "comm_us", "overlap_us", "exposed_comm_us", "other_us", "idle_us")
#: comm = transfer + peer wait; exposed comm = exposed transfer + exposed peer wait (`arrivals`)
SPLIT_COLUMNS = ("transfer_us", "peer_wait_us", "exposed_transfer_us", "exposed_peer_wait_us")


@dataclass
class Breakdown(Tabular):
    """Per rank (µs): span (first start to last end), compute, comm, overlap (both at once),
    exposed comm (comm not hidden behind compute), other (busy with neither: host work while
    the accelerator waits, memory nodes), idle (nothing running); compute + exposed comm +
    other + idle = span. Compute is the accelerator's COMP nodes when the trace has any (GPU
    traces), else every COMP node (`schema.resources.compute_mask`), recorded and simulated alike.
    Communication splits into transfer (after the last peer arrived: what a faster network
    shortens) and peer wait (waiting for a late peer: arrival skew, which it does not), and
    so does the exposed part: comm = transfer + peer wait, exposed comm = exposed transfer +
    exposed peer wait (recorded: `arrivals.comm_split`, ranks on the job's clock)."""

    rows: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.rows}

    @classmethod
    def from_simulation(cls, result) -> Breakdown:
        """The same columns from a SimResult (a simulated step starts at 0, so span = finish)."""
        cols = zip(
            result.finish_ns,
            result.compute_ns,
            result.comm_ns,
            result.overlap_ns,
            result.exposed_comm_ns,
            result.other_ns,
            result.idle_ns,
        )
        split = zip(result.transfer_ns, result.peer_wait_ns, result.exposed_transfer_ns, result.exposed_peer_wait_ns)
        return cls(
            [
                {
                    "rank": npu,
                    **{k: float(v) / 1000 for k, v in zip(COLUMNS, vals)},
                    **{k: float(v) / 1000 for k, v in zip(SPLIT_COLUMNS, parts)},
                }
                for npu, (vals, parts) in enumerate(zip(cols, split))
            ]
        )

    def to_table(self) -> Table:
        """One row per rank (the index)."""
        keys = ["rank", *COLUMNS, *(k for k in SPLIT_COLUMNS if self.rows and k in self.rows[0])]
        return Table.from_records(self.rows, keys, title="per-rank breakdown (µs)", index="rank")


def rank_breakdown(trace: Trace) -> dict[str, int]:
    start = trace.start.astype(np.int64)
    b = busy(start, start + trace.duration.astype(np.int64), compute_mask(trace), comm_mask(trace))
    return {
        "span_us": b["finish"] - b["start"],
        "compute_us": b["compute"],
        "comm_us": b["comm"],
        "overlap_us": b["overlap"],
        "exposed_comm_us": b["exposed"],
        "other_us": b["other"],
        "idle_us": b["idle"],
    }


def breakdown(workload: Workload | Trace) -> Breakdown:
    """From the recorded times (a workload without any raises ChakraError: simulate it and
    use `Breakdown.from_simulation`)."""
    if isinstance(workload, Trace):
        workload = Workload({0: workload})
    if not any(t.timed for t in workload.traces.values()):
        raise ChakraError(
            "the workload has no recorded start times (all 0): simulate it (`--simulate SYSTEM`; "
            "in Python, Breakdown.from_simulation(result))"
        )
    split = comm_split(workload)
    return Breakdown(
        [
            {
                "rank": r,
                **rank_breakdown(workload.traces[r]),
                **{f"{k}_us": v / 1000 for k, v in split[r].items()},
            }
            for r in workload.ranks
        ]
    )
