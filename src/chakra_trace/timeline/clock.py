"""One clock for every rank of a job.

A converted trace starts at time 0 on each rank, so comparing ranks needs each rank's
offset. The converter records where time 0 lies on the profiler's clock (`time_origin_ns`),
which ranks on one host share. Without it (other converters, several hosts), a collective's
members finish at nearly the same instant, so the median difference of their end times
estimates the offset.
"""

from __future__ import annotations

import numpy as np

from ..io.workload import Workload
from ..schema.enums import TIME_ORIGIN
from ..schema.groups import rows_by_group_per_rank
from ..schema.trace import Trace


def rank_offsets_ns(workload: Workload, how: str = "auto") -> dict[int, int]:
    """Offset (ns) to add to each rank's times to put them on the job's clock, the earliest
    rank at 0. ``how``: "origin" (recorded time origins), "collectives" (align collective
    ends), "none", or "auto" (origins when every rank has one, else collectives)."""
    ranks = workload.ranks
    if how == "none" or len(ranks) <= 1:
        return {r: 0 for r in ranks}
    by_origin = origin_offsets_ns(workload.traces)
    if how == "origin" and by_origin is None:
        missing = [r for r in ranks if workload.traces[r].time_origin_ns is None]
        raise ValueError(f"ranks {missing} have no {TIME_ORIGIN} metadata")
    if how == "origin" or (how == "auto" and by_origin is not None):
        assert by_origin is not None
        return by_origin
    return _by_collectives(workload)


def origin_offsets_ns(traces: dict[int, Trace]) -> dict[int, int] | None:
    """Each rank's recorded time origin (ns) after the earliest one's; None unless every rank
    records one (ranks of one host share the profiler's clock)."""
    origins = {r: t.time_origin_ns for r, t in traces.items()}
    known = {r: o for r, o in origins.items() if o is not None}
    if len(known) < len(origins) or not known:
        return None
    lo = min(known.values())
    return {r: int(o - lo) for r, o in known.items()}


def _by_collectives(workload: Workload) -> dict[int, int]:

    ranks = workload.ranks
    ends: dict[tuple[str, int], dict[int, int]] = {}
    by_group = rows_by_group_per_rank(workload.traces)
    for g, members in workload.all_groups().items():
        for r in members:
            t = workload.traces.get(r)
            if t is None or g not in by_group[r]:
                continue
            rows = by_group[r][g]
            e = (t.start[rows].astype(np.int64) + t.duration[rows].astype(np.int64)) * 1000
            for k, v in enumerate(e.tolist()):
                ends.setdefault((g, k), {})[r] = v
    having: dict[int, list[dict[int, int]]] = {}  # rank -> the instances it is in
    for inst in ends.values():
        for r in inst:
            having.setdefault(r, []).append(inst)
    # breadth-first from the lowest rank over "shares an instance" so every connected rank gets an offset
    offset = {ranks[0]: 0}
    frontier = [ranks[0]]
    while frontier:
        nxt = []
        for a in frontier:
            diffs: dict[int, list[int]] = {}
            for inst in having.get(a, ()):
                for b, v in inst.items():
                    if b not in offset:
                        diffs.setdefault(b, []).append(inst[a] + offset[a] - v)
            for b, d in diffs.items():
                offset[b] = int(np.median(d))
                nxt.append(b)
        frontier = nxt
    lo = min(offset.values())
    return {r: offset.get(r, lo) - lo for r in ranks}
