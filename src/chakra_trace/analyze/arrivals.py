"""When each communication's last peer arrived, on the job's clock: what splits communication
time into waiting for peers (arrival skew, which no network removes) and transfer (what a
faster network shortens), for the breakdown and the collective statistics.

A collective instance is the k-th typed collective each member issues on a group (as
validation and `collective_stats` match them); its members wait from their own arrival
(the node's start) to the last member's, and transfer after. A receive waits for its send
(`timeline.matching`); a send is all transfer.
"""

from __future__ import annotations

import numpy as np

from ..intervals import transfer_split
from ..schema.groups import rows_by_group_per_rank
from ..schema.resources import comm_mask, compute_mask
from ..schema.trace import Trace
from ..timeline.clock import rank_offsets_ns
from ..timeline.matching import p2p_rows, pair_p2p


def job_clock(workload, align: str = "auto") -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Every rank's (start, end) in ns on the job's clock (`timeline.clock.rank_offsets_ns`)."""
    offsets = rank_offsets_ns(workload, align)
    out = {}
    for r, t in workload.traces.items():
        start = t.start.astype(np.int64) * 1000 + offsets[r]
        out[r] = (start, start + t.duration.astype(np.int64) * 1000)
    return out


def last_arrivals(traces: dict[int, Trace], starts: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Per rank, per row: when the last peer of a collective or receive arrived (its starts,
    on one clock), -1 for every other row (and for a row whose peers are unknown)."""
    out = {r: np.full(len(t), -1, np.int64) for r, t in traces.items()}
    per_group: dict[str, list[tuple[int, np.ndarray]]] = {}
    for rank, by_group in rows_by_group_per_rank(traces).items():
        for g, rows in by_group.items():
            per_group.setdefault(g, []).append((rank, rows))
    for members in per_group.values():
        k = max(rows.size for _, rows in members)
        last = np.full(k, -1, np.int64)
        for rank, rows in members:  # the k-th instance: the latest start over its members
            np.maximum(last[: rows.size], starts[rank][rows], out=last[: rows.size])
        for rank, rows in members:
            out[rank][rows] = last[: rows.size]
    cols = [(r, p2p_rows(t, r)) for r, t in traces.items()]
    if cols:
        c = {k: np.concatenate([x[k] for _, x in cols]) for k in ("row", "recv", "src", "dst", "tag")}
        owner = np.concatenate([np.full(x["row"].size, r, np.int64) for r, x in cols])
        at = np.concatenate([starts[r][x["row"]] for r, x in cols])
        sends, recvs = pair_p2p(c["src"], c["dst"], c["tag"], c["row"], c["recv"])
        for rank in np.unique(owner[recvs]).tolist():  # a receive's peer arrives when its send starts
            mine = owner[recvs] == rank
            out[rank][c["row"][recvs[mine]]] = at[sends[mine]]
    return out


def comm_split(workload, align: str = "auto") -> dict[int, dict[str, int]]:
    """Per rank: its communication time (ns) split into transfer and waiting for peers, and
    the exposed part of each (`intervals.transfer_split`), from the recorded times."""
    clock = job_clock(workload, align)
    ready = last_arrivals(workload.traces, {r: s for r, (s, _e) in clock.items()})
    return {
        r: transfer_split(clock[r][0], clock[r][1], ready[r], compute_mask(t), comm_mask(t))
        for r, t in workload.traces.items()
    }
