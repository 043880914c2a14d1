"""What the catalog keeps of one job, extracted in a worker process: per-rank counts, ops by
name, every collective instance with each member's size, imbalance findings and breakdowns.

Everything is numpy columns (one array per table column; a list column is (offsets, values)),
so a worker pickles a job's features cheaply and the writer concatenates many jobs into one
Arrow batch. The analyses are the project's own: instances are matched as
`analyze.collectives` matches them (`schema.groups.group_rows`: the k-th collective a rank
issues on a group is instance k), imbalance findings are `analyze.collectives.imbalance`
(tolerance 0) run only on jobs where a vectorized pre-check finds sizes that differ or
all_to_allv splits (the only inputs it can flag), and breakdowns are `analyze.breakdown`'s
per-rank columns. A trace shared by many ranks (a synthetic data-parallel job) is summarized once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analyze.arrivals import comm_split
from ..analyze.breakdown import COLUMNS as BREAKDOWN_COLUMNS
from ..analyze.breakdown import rank_breakdown
from ..analyze.collectives import imbalance
from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.enums import Attr, CollectiveType, NodeType, collective_name, node_type_name
from ..schema.groups import rows_by_group
from ..schema.trace import Trace
from .digest import workload_digest

Columns = dict[str, Any]  # column -> np.ndarray, or (offsets, values) for a list column

_COMM = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


@dataclass
class JobFeatures:
    """One job's rows: `job` holds the jobs-table scalars, `tables` the other tables' columns
    (without job_id, which the writer adds)."""

    job_id: str
    name: str
    source: str
    job: dict[str, Any]
    tables: dict[str, Columns] = field(default_factory=dict)

    def rows(self, table: str) -> int:
        cols = self.tables.get(table)
        if not cols:
            return 0
        first = next(iter(cols.values()))
        return len(first[0]) - 1 if isinstance(first, tuple) else len(first)


def _sizes(t: Trace) -> np.ndarray:
    return np.where(t.has(Attr.COMM_SIZE), t.comm_size, 0).astype(np.int64)


def _rank_counts(t: Trace) -> dict[str, int]:
    size = _sizes(t)
    coll = t.types == NodeType.COMM_COLL_NODE
    p2p = (t.types == NodeType.COMM_SEND_NODE) | (t.types == NodeType.COMM_RECV_NODE)
    return {
        "nodes": len(t),
        "comp_nodes": int((t.types == NodeType.COMP_NODE).sum()),
        "comm_nodes": int(((t.types >= min(_COMM)) & (t.types <= max(_COMM))).sum()),
        "coll_nodes": int(coll.sum()),
        "coll_bytes": int(size[coll].sum()),
        "p2p_bytes": int(size[p2p].sum()),
        "duration_us": int(t.duration.sum(dtype=np.uint64)),
    }


def _segments(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sort order, unique keys, segment starts) of `keys`."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if k.size else np.zeros(0, np.int64)
    return order, k[starts], starts


def _trace_ops(t: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(names, type codes, count, duration_us, bytes) per distinct (name, type) of one trace."""
    key = (t.name_codes.astype(np.int64) << 32) | t.types.astype(np.uint32).astype(np.int64)
    order, uk, starts = _segments(key)
    if not uk.size:
        z = np.zeros(0, np.int64)
        return np.zeros(0, object), z, z, z, z
    count = np.diff(np.r_[starts, key.size])
    dur = np.add.reduceat(t.duration.astype(np.int64)[order], starts)
    byt = np.add.reduceat(_sizes(t)[order], starts)
    names = np.asarray(t.names, dtype=object)[uk >> 32]
    return names, uk & 0xFFFFFFFF, count, dur, byt


def _ops(distinct: dict[int, Trace], mult: dict[int, int]) -> Columns:
    """Ops by (name, type) summed over ranks (a trace run by m ranks counts m times)."""
    parts = [(_trace_ops(t), mult[k]) for k, t in distinct.items()]
    names = np.concatenate([p[0] for p, _ in parts])
    types = np.concatenate([p[1] for p, _ in parts])
    count, dur, byt = (np.concatenate([p[i] * m for p, m in parts]) for i in (2, 3, 4))
    ranks = np.concatenate([np.full(p[0].size, m, np.int64) for p, m in parts])
    if len(parts) > 1:  # the same op on traces of different ranks: one row
        _, name_ix = np.unique(names.astype(str), return_inverse=True)
        order, _, starts = _segments((name_ix.astype(np.int64) << 32) | types)
        names, types = names[order][starts], types[order][starts]
        count, dur, byt, ranks = (np.add.reduceat(a[order], starts) for a in (count, dur, byt, ranks))
    codes, inv = np.unique(types, return_inverse=True)
    type_names = np.array([node_type_name(int(v)) for v in codes], dtype=object)[inv]
    return {
        "name": names,
        "type": type_names,
        "count": count,
        "ranks": ranks.astype(np.int32),
        "duration_us": dur,
        "bytes": byt,
    }


def _trace_collectives(t: Trace, gindex: dict[str, int], by_group: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """One trace's typed collectives as (group index, instance k, bytes, duration, type) columns,
    and whether an all_to_all among them carries attributes beyond the columns."""
    parts = list(by_group.items())
    rows = np.concatenate([r for _, r in parts]).astype(np.int64)
    lens = np.array([r.size for _, r in parts], np.int64)
    gi = np.repeat(np.array([gindex[g] for g, _ in parts], np.int64), lens)
    ix = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    ctype = t.comm_type[rows].astype(np.int64)
    a2a = ctype == CollectiveType.ALL_TO_ALL
    split = bool(a2a.any() and (t.extra_indptr[rows + 1] != t.extra_indptr[rows])[a2a].any())
    return gi, ix, _sizes(t)[rows], t.duration[rows].astype(np.int64), ctype, np.array(split)


def _collectives(w: Workload) -> tuple[Columns, bool]:
    """Every collective instance with its members' sizes, and whether any instance could be
    imbalanced (sizes differ, or an all_to_all carries attributes beyond the columns: splits).
    Instances in group-name order, then k, members by rank: one sort over every group (a pass
    per group costs groups x nodes)."""
    distinct = {id(t): t for t in w.traces.values()}
    by_group = {k: rows_by_group(t) for k, t in distinct.items()}
    gnames = sorted({g for by in by_group.values() for g in by})
    if not gnames:
        return {}, False
    gindex = {g: i for i, g in enumerate(gnames)}
    per_trace = {k: _trace_collectives(t, gindex, by_group[k]) for k, t in distinct.items() if by_group[k]}
    present = [r for r in w.ranks if id(w.traces[r]) in per_trace]
    suspect = any(bool(c[5]) for c in per_trace.values())
    gi, ix, by, du, ct = (np.concatenate([per_trace[id(w.traces[r])][i] for r in present]) for i in range(5))
    rk = np.concatenate([np.full(per_trace[id(w.traces[r])][0].size, r, np.int64) for r in present])
    order = np.lexsort((rk, ix, gi))
    gi, ix, rk, by, du, ct = gi[order], ix[order], rk[order], by[order], du[order], ct[order]
    starts = np.flatnonzero(np.r_[True, (ix[1:] != ix[:-1]) | (gi[1:] != gi[:-1])])
    n = np.diff(np.r_[starts, ix.size])
    lo, hi = np.minimum.reduceat(by, starts), np.maximum.reduceat(by, starts)
    suspect = suspect or bool((lo != hi).any())
    sb = by[np.lexsort((by, ix, gi))]  # sizes ascending within each instance: the median
    all_groups = w.all_groups()
    group_size = np.array([len(all_groups[g]) for g in gnames], np.int64)
    out: Columns = {
        "pg": np.array(gnames, dtype=object)[gi[starts]],
        "idx": ix[starts],
        "type": ct[starts],
        "group_size": group_size[gi[starts]],
        "members": n,
        "bytes_min": lo,
        "bytes_max": hi,
        "bytes_median": (sb[starts + (n - 1) // 2] + sb[starts + n // 2]) / 2,
        "bytes_total": np.add.reduceat(by, starts),
        "duration_max_us": np.maximum.reduceat(du, starts),
    }
    codes, inv = np.unique(out["type"], return_inverse=True)
    out["type"] = np.array([collective_name(int(c)) for c in codes], dtype=object)[inv]
    offsets = np.r_[0, np.cumsum(out["members"])].astype(np.int64)
    out["imbalanced"] = np.zeros(offsets.size - 1, bool)
    out["rank_ids"] = (offsets, rk.astype(np.int32))
    out["rank_bytes"] = (offsets, by)
    out["rank_durations_us"] = (offsets, du)
    return out, suspect


def _findings(w: Workload, coll: Columns) -> Columns:
    """analyze.collectives.imbalance as rows; marks the flagged instances in `coll`."""
    found = imbalance(w).imbalanced
    rows = [
        (x.group, x.index, x.type, r, b, x.median, x.spread, r in x.outliers) for x in found for r, b in x.bytes.items()
    ]
    flagged = {(x.group, x.index) for x in found}
    coll["imbalanced"] = np.array([(g, int(k)) in flagged for g, k in zip(coll["pg"], coll["idx"])], bool)
    pg, idx, typ, rank, byt, med, spread, out = zip(*rows) if rows else ((),) * 8
    return {
        "pg": np.array(pg, dtype=object),
        "idx": np.array(idx, np.int64),
        "type": np.array(typ, dtype=object),
        "rank": np.array(rank, np.int64),
        "bytes": np.array(byt, np.int64),
        "median": np.array(med, np.float64),
        "spread": np.array([np.nan if s == float("inf") else s for s in spread], np.float64),
        "outlier": np.array(out, bool),
    }


#: Largest sum or time the catalog takes (its columns are BIGINT; kept well below 2^63 so sums of
#: sums over ranks and jobs in SQL do not overflow either).
MAX_TOTAL = 1 << 62


def _check_fits(distinct: dict[int, Trace], mult: dict[int, int]) -> None:
    """Refuse a job whose durations, times or sizes, summed as the tables sum them, pass
    `MAX_TOTAL` (64-bit fields in a trace can hold up to 2^64 - 1)."""
    totals = {"node durations": 0.0, "message sizes": 0.0}
    for k, t in distinct.items():
        totals["node durations"] += float(t.duration.astype(np.float64).sum()) * mult[k]
        totals["message sizes"] += float(_raw_sizes(t).sum()) * mult[k]
        if len(t) and float((t.start.astype(np.float64) + t.duration.astype(np.float64)).max()) > MAX_TOTAL:
            raise ChakraError("a node ends after 2^62 µs (start + duration), more than the catalog's columns hold")
    for what, total in totals.items():
        if total > MAX_TOTAL:
            raise ChakraError(f"{what} sum to {total:.3g}, more than the 2^62 the catalog's columns hold")


def _raw_sizes(t: Trace) -> np.ndarray:
    return np.where(t.has(Attr.COMM_SIZE), t.comm_size.astype(np.float64), 0.0)


def extract(name: str, w: Workload, source: str = "") -> JobFeatures:
    """Every table's rows for one job (ChakraError when its sums do not fit the catalog)."""
    ranks = w.ranks
    distinct: dict[int, Trace] = {}
    mult: dict[int, int] = {}
    for r in ranks:
        t = w.traces[r]
        distinct.setdefault(id(t), t)
        mult[id(t)] = mult.get(id(t), 0) + 1
    _check_fits(distinct, mult)
    counts = {k: _rank_counts(t) for k, t in distinct.items()}
    per_rank = [counts[id(w.traces[r])] for r in ranks]
    tables: dict[str, Columns] = {
        "ranks": {"rank": np.array(ranks, np.int64)}
        | {c: np.array([p[c] for p in per_rank], np.int64) for c in next(iter(counts.values()), {})},
        "ops": _ops(distinct, mult) if distinct else {},
    }
    coll, suspect = _collectives(w)
    tables["collectives"] = coll
    if suspect:
        tables["imbalance"] = _findings(w, coll)
    span = None
    if any(t.timed for t in distinct.values()):  # as analyze.breakdown decides
        bd = {k: rank_breakdown(t) for k, t in distinct.items()}
        rows = [bd[id(w.traces[r])] for r in ranks]
        split = comm_split(w)  # (on the job's clock: every rank's own, not one per distinct trace)
        tables["breakdowns"] = (
            {"rank": np.array(ranks, np.int64)}
            | {c: np.array([int(b[c]) for b in rows], np.int64) for c in BREAKDOWN_COLUMNS}
            | {f"{k}_us": np.array([round(split[r][k] / 1000) for r in ranks], np.int64) for k in split[ranks[0]]}
        )
        span = int(tables["breakdowns"]["span_us"].max()) if ranks else None
    job = {
        "ranks": len(ranks),
        "nodes": sum(p["nodes"] for p in per_rank),
        "comp_nodes": sum(p["comp_nodes"] for p in per_rank),
        "comm_nodes": sum(p["comm_nodes"] for p in per_rank),
        "collectives": len(coll["idx"]) if coll else 0,
        "coll_bytes": sum(p["coll_bytes"] for p in per_rank),
        "p2p_bytes": sum(p["p2p_bytes"] for p in per_rank),
        "imbalanced": int(coll["imbalanced"].sum()) if coll else 0,
        "span_us": span,
    }
    return JobFeatures(workload_digest(w), name, source, job, tables)
