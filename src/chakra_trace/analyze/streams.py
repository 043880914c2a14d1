"""GPU busy time per stream of a Chakra job, from its recorded times: how long each (device,
stream) ran something, overlapping work counted once. Converted Kineto traces give every GPU
activity a node with ``stream`` and ``device`` attributes; this is what the conversion's
`convert.conservation.GpuTime` says it kept, measured on the job itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..intervals import length, union
from ..io.workload import Workload
from ..schema.trace import Trace
from ..table import Column, Table, Tabular


@dataclass
class StreamBusy(Tabular):
    """One row per (rank, device, stream): GPU nodes and busy time (µs, union of their intervals)."""

    rows: list[dict] = field(default_factory=list)

    def busy_us(self, rank: int | None = None) -> dict[tuple[int, int], int]:
        """{(device, stream): busy µs} of one rank (the first when not given)."""
        if rank is None and self.rows:
            rank = self.rows[0]["rank"]
        return {(r["device"], r["stream"]): r["busy_us"] for r in self.rows if r["rank"] == rank}

    def to_dict(self) -> dict[str, Any]:
        return {"streams": self.rows}

    def to_table(self) -> Table:
        return Table.from_records(
            self.rows,
            ["rank", "device", "stream", "nodes", "busy_us"],
            title="GPU busy time per stream",
            index=("rank", "device", "stream"),
            spec={"busy_us": Column(unit="µs", format=",d")},
        )


def trace_stream_busy(trace: Trace) -> list[dict]:
    """Rows of `StreamBusy` for one trace (rank 0): nodes with a ``stream`` attribute, grouped
    by (``device``, ``stream``), busy time from their recorded start and duration (µs)."""
    stream, on = trace.attr_array("stream", np.int64)
    device, has_dev = trace.attr_array("device", np.int64)
    idx = np.flatnonzero(on)
    if not idx.size:
        return []
    dev = np.where(has_dev[idx], device[idx], -1).astype(np.int64)
    pairs = np.stack([dev, stream[idx].astype(np.int64)], axis=1)
    keys, inv = np.unique(pairs, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    start = trace.start.astype(np.int64)[idx]
    end = start + trace.duration.astype(np.int64)[idx]
    out = []
    for k, (d, s) in enumerate(keys.tolist()):
        m = inv == k
        out.append(
            {
                "rank": 0,
                "device": int(d),
                "stream": int(s),
                "nodes": int(m.sum()),
                "busy_us": length(union(start[m], end[m])),
            }
        )
    return out


def stream_busy(workload: Workload | Trace) -> StreamBusy:
    """GPU busy time per (rank, device, stream) at the recorded times of a job or one trace."""
    if isinstance(workload, Trace):
        return StreamBusy(trace_stream_busy(workload))
    rows = []
    for r in workload.ranks:
        rows += [{**row, "rank": r} for row in trace_stream_busy(workload.traces[r])]
    return StreamBusy(rows)
