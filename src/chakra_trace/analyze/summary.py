"""What a trace holds, in numbers: node kinds, edges, collectives, time span."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..schema.enums import Attr, NodeType, collective_name
from ..schema.node import attribute_value
from ..schema.trace import Trace


@dataclass
class TraceSummary:
    nodes: int
    node_types: dict[str, int]
    data_edges: int
    ctrl_edges: int
    collectives: dict[str, dict[str, int]]  # by CollectiveType name: count, bytes
    collectives_by_group: dict[str, dict[str, dict[str, int]]]  # pg_name -> type -> count, bytes
    collectives_missing_type: int
    point_to_point: dict[str, dict[str, int]]  # SEND/RECV: count, bytes
    cpu_ops: int
    start_us: int | None
    end_us: int | None
    span_us: int | None
    total_duration_us: int
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _metadata_dict(trace: Trace) -> dict[str, Any]:

    out: dict[str, Any] = {}
    if trace.metadata.version:
        out["version"] = trace.metadata.version
    for a in trace.metadata.attr:
        out[a.name] = attribute_value(a)[0]
    return out


def _count_bytes(mask: np.ndarray, size: np.ndarray) -> dict[str, int]:
    return {"count": int(mask.sum()), "bytes": int(size[mask].sum())}


def _totals(keys: list[np.ndarray], size: np.ndarray) -> list[tuple[list[int], int, int]]:
    """(key values, count, sum of `size`) per distinct key tuple, keys ascending: one sort for
    every group at once (a mask per group cost groups x nodes). Sums are exact Python ints."""
    if not size.size:
        return []
    order = np.lexsort(keys[::-1])
    ks = [k[order] for k in keys]
    new = np.zeros(size.size, bool)
    new[0] = True
    for k in ks:
        new[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], size.size)
    sizes = size[order]
    # (np.add.reduceat wraps at 64 bits: sums in Python when values are large enough for that)
    big = max(int(sizes.max()), -int(sizes.min())) > (1 << 62) // sizes.size
    if big:
        sums = [sum(sizes[a:b].tolist()) for a, b in zip(starts.tolist(), ends.tolist())]
    else:
        sums = np.add.reduceat(sizes, starts).tolist()
    cols = [k[starts].tolist() for k in ks]
    return [([c[i] for c in cols], int(ends[i] - starts[i]), int(sums[i])) for i in range(starts.size)]


def summarize(trace: Trace) -> TraceSummary:
    types = trace.types
    size = np.where(trace.has(Attr.COMM_SIZE), trace.comm_size, 0)
    has_type = trace.has(Attr.COMM_TYPE)
    coll = types == NodeType.COMM_COLL_NODE
    typed = coll & has_type
    ctype = trace.comm_type[typed].astype(np.int64)
    tsize = size[typed]
    collectives = {collective_name(t): {"count": n, "bytes": b} for (t,), n, b in _totals([ctype], tsize)}
    by_group: dict[str, dict[str, dict[str, int]]] = {}
    pg = np.where(trace.has(Attr.PG_NAME), trace.pg_name, -1)[typed].astype(np.int64)
    for (g, t), n, b in _totals([pg, ctype], tsize):
        gname = trace.groups[g] if g >= 0 else ""
        by_group.setdefault(gname, {})[collective_name(t)] = {"count": n, "bytes": b}
    p2p = {}
    for key, nt in (("SEND", NodeType.COMM_SEND_NODE), ("RECV", NodeType.COMM_RECV_NODE)):
        m = types == nt
        if m.any():
            p2p[key] = _count_bytes(m, size)
    timed = trace.start > 0
    start: int | None = None  # traces without start times (many converters) have no span to report
    end: int | None = None
    span: int | None = None
    if timed.any():
        start = int(trace.start[timed].min())
        end = int((trace.start + trace.duration)[timed].max())
        span = end - start
    return TraceSummary(
        nodes=len(trace),
        node_types={k: v for k, v in sorted(trace.node_type_counts().items(), key=lambda kv: _type_order(kv[0]))},
        data_edges=int(trace.data.size),
        ctrl_edges=int(trace.ctrl.size),
        collectives=collectives,
        collectives_by_group=by_group,
        collectives_missing_type=int((coll & ~has_type).sum()),
        point_to_point=p2p,
        cpu_ops=int((trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op).sum()),
        start_us=start,
        end_us=end,
        span_us=span,
        total_duration_us=int(trace.duration.sum()),
        metadata=_metadata_dict(trace),
    )


def _type_order(name: str) -> int:
    try:
        return int(NodeType[name])
    except KeyError:
        return 1 << 30


def summarize_workload(workload) -> dict[int, TraceSummary]:
    """Summary of every rank of a Workload."""
    return {r: summarize(workload[r]) for r in workload.ranks}
