"""Collectives across the ranks of a job: statistics per group and rank, and message-size
imbalance (the k-th collective of a group should move the same bytes on every member; a
rank that sends more is a straggler in waiting).

Collective instances are matched the way the ranks run them: the k-th typed COMM_COLL node
a rank issues on a group is instance k of that group.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..schema.enums import Attr, CollectiveType, NodeType, collective_name
from ..schema.groups import collective_instances
from ..schema.trace import Trace
from ..table import Column, Table, Tabular
from .arrivals import job_clock, last_arrivals

# bus bandwidth = algorithm bandwidth x factor(n), as NCCL's tests report it
_BUS_FACTOR = {
    "ALL_REDUCE": lambda n: 2 * (n - 1) / n,
    "ALL_GATHER": lambda n: (n - 1) / n,
    "REDUCE_SCATTER": lambda n: (n - 1) / n,
    "REDUCE_SCATTER_BLOCK": lambda n: (n - 1) / n,
    "ALL_TO_ALL": lambda n: (n - 1) / n,
}


def bus_factor(ctype: str, n: int) -> float:
    """Bus bandwidth / algorithm bandwidth of a `ctype` collective over `n` members (NCCL's)."""
    return _BUS_FACTOR.get(ctype, lambda n: 1.0)(max(n, 1))


@dataclass
class CollectiveStats(Tabular):
    """One record per (collective instance, rank): group, index, type, rank, bytes,
    duration_us, wait_us (from this rank's arrival to the last member's, on the job's clock:
    waiting for peers), transfer_us (the rest: duration = wait + transfer), node_id,
    group_size. ``summary()`` aggregates per group, type and rank; its bandwidths divide the
    bytes by the transfer time only (waiting for a late peer is no measure of the network)."""

    records: list[dict] = field(default_factory=list)

    def summary(self) -> list[dict]:
        out: dict[tuple, dict] = {}
        for r in self.records:
            key = (r["group"], r["type"], r["rank"])
            s = out.setdefault(
                key,
                {
                    "group": r["group"],
                    "type": r["type"],
                    "rank": r["rank"],
                    "count": 0,
                    "bytes": 0,
                    "time_us": 0,
                    "transfer_us": 0.0,
                    "wait_us": 0.0,
                    "group_size": r["group_size"],
                },
            )
            s["count"] += 1
            s["bytes"] += r["bytes"]
            s["time_us"] += r["duration_us"]
            s["transfer_us"] += r.get("transfer_us", r["duration_us"])
            s["wait_us"] += r.get("wait_us", 0.0)
        for s in out.values():
            secs = s["transfer_us"] / 1e6
            s["algbw_GBps"] = s["bytes"] / secs / 1e9 if secs > 0 else None
            factor = _BUS_FACTOR.get(s["type"], lambda n: 1.0)(max(s["group_size"], 1))
            # a group of one (a lone rank's file: its peers are unknown) has no bus bandwidth
            known = s["algbw_GBps"] is not None and s["group_size"] > 1
            s["busbw_GBps"] = s["algbw_GBps"] * factor if known else None
        return sorted(out.values(), key=lambda s: (s["group"], s["type"], s["rank"]))

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "instances": self.records}

    def to_table(self) -> Table:
        """One row per (collective instance, rank)."""
        return Table.from_records(self.records, title="collective instances")

    def summary_table(self) -> Table:
        """`summary()`: one row per group, type and rank (group "" is every rank: shown as "all")."""
        return Table.from_records(
            self.summary(),
            _SUMMARY_COLUMNS,
            title="collectives",
            spec={"group": Column(format=_group), "transfer_us": _TENTHS, "wait_us": _TENTHS},
        )

    def summary_frame(self):
        """`summary_table` as a pandas DataFrame."""
        return self.summary_table().to_pandas()


_SUMMARY_COLUMNS = (
    "group",
    "type",
    "rank",
    "count",
    "bytes",
    "time_us",
    "transfer_us",
    "wait_us",
    "group_size",
    "algbw_GBps",
    "busbw_GBps",
)


_TENTHS = Column(format=",.1f")


def _group(name: str) -> str:
    return name or "all"


@dataclass
class Imbalance:
    """One collective instance whose members do not move the same bytes."""

    group: str
    index: int
    type: str
    bytes: dict[int, int]  # rank -> comm_size
    median: float
    spread: float  # max / min (inf when a member moves nothing)
    outliers: list[int]  # ranks whose size differs from the group's median
    node_ids: dict[int, int]
    peer_bytes: dict[int, list[float]] | None = None  # all_to_allv: bytes to each peer, per rank
    received: dict[int, float] | None = None  # all_to_allv: bytes each member receives (its peers' splits)

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["bytes"] = {str(k): v for k, v in self.bytes.items()}
        d["node_ids"] = {str(k): v for k, v in self.node_ids.items()}
        if self.peer_bytes is not None:
            d["peer_bytes"] = {str(k): v for k, v in self.peer_bytes.items()}
        if self.received is not None:
            d["received"] = {str(k): v for k, v in self.received.items()}
        d["spread"] = None if self.spread == float("inf") else self.spread
        return d


@dataclass
class ImbalanceReport(Tabular):
    """Collective instances checked, the imbalanced ones, and per rank how often it stood out."""

    checked: int
    imbalanced: list[Imbalance]
    tolerance: float

    def by_rank(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for x in self.imbalanced:
            for r in x.outliers:
                out[r] = out.get(r, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "tolerance": self.tolerance,
            "imbalanced": [x.to_dict() for x in self.imbalanced],
            "outlier_ranks": {str(k): v for k, v in self.by_rank().items()},
        }

    def to_table(self) -> Table:
        """One row per (imbalanced instance, member rank): the bytes it moves, and whether it stands out."""
        rows = [
            {
                "group": x.group,
                "index": x.index,
                "type": x.type,
                "rank": r,
                "bytes": b,
                "median": x.median,
                "outlier": r in x.outliers,
            }
            for x in self.imbalanced
            for r, b in x.bytes.items()
        ]
        return Table.from_records(rows, title="imbalanced collectives")

    def matrix(self):
        """Bytes per (instance, rank): the heatmap of an imbalance plot (instances as rows)."""
        import pandas as pd

        return pd.DataFrame({f"{x.group or 'all'}#{x.index} {x.type}": x.bytes for x in self.imbalanced}).T


def _instances(workload, members: dict[str, list[int]] | None = None) -> dict[tuple[str, int], dict[int, int]]:
    """(group, index) -> {rank: row} for every group the workload's collectives use (`members`:
    `Workload.all_groups()`, when the caller has it: read once, not per instance)."""
    return collective_instances(workload.traces, workload.all_groups() if members is None else members)


def collective_stats(workload) -> CollectiveStats:
    records = []
    members = workload.all_groups()
    instances = _instances(workload, members)
    sized = {id(t): t.has(Attr.COMM_SIZE) for t in workload.traces.values()}
    waits = _waits_ns(workload)
    for (g, k), rows in sorted(instances.items()):
        size = len(members[g])
        for rank, row in sorted(rows.items()):
            t = workload.traces[rank]
            wait_us = float(waits[rank][row]) / 1000 if waits is not None else 0.0
            records.append(
                {
                    "group": g,
                    "index": k,
                    "type": collective_name(int(t.comm_type[row])),
                    "rank": rank,
                    "bytes": int(t.comm_size[row]) if sized[id(t)][row] else 0,
                    "duration_us": int(t.duration[row]),
                    "wait_us": wait_us,
                    "transfer_us": int(t.duration[row]) - wait_us,
                    "node_id": int(t.ids[row]),
                    "group_size": size,
                }
            )
    return CollectiveStats(records)


def _waits_ns(workload) -> dict[int, np.ndarray] | None:
    """Per rank and row: how long a collective waited for its last member (ns, within its
    duration; `arrivals`), None for a job without recorded times."""
    if not any(t.timed for t in workload.traces.values()):
        return None
    clock = job_clock(workload)
    ready = last_arrivals(workload.traces, {r: s for r, (s, _e) in clock.items()})
    return {r: np.clip(ready[r], s, e) - s for r, (s, e) in clock.items()}


def _peer_bytes(t: Trace, row: int) -> list[float] | None:
    """An all_to_allv's bytes to each peer, from its recorded split sizes (None otherwise)."""
    if int(t.comm_type[row]) != CollectiveType.ALL_TO_ALL or t.extra_indptr[row] == t.extra_indptr[row + 1]:
        return None
    raw = t.attr(row, "in_split_size")
    try:
        split = json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, RecursionError):  # not JSON, a hostile integer or nesting: no split
        return None
    if not isinstance(split, list) or not split or not all(isinstance(x, (int, float)) for x in split):
        return None
    total = sum(split)
    return [float(x) * int(t.comm_size[row]) / total for x in split] if total else [0.0] * len(split)


def _received(members: list[int], peers: dict[int, list[float]]) -> dict[int, float] | None:
    """Bytes each member of an all_to_allv receives: what every member's split sends it (splits
    in member order), or None unless every member recorded one split per member."""
    if set(peers) != set(members) or any(len(peers[r]) != len(members) for r in members):
        return None
    return {m: float(sum(peers[s][j] for s in members)) for j, m in enumerate(members)}


def imbalance(workload, tolerance: float = 0.0) -> ImbalanceReport:
    """Every collective instance whose members' sizes differ by more than `tolerance`
    (relative to the median), with the ranks that stand out. An all_to_allv is judged from
    both sides: bytes each rank sends (its total, and ``peer_bytes`` to every peer) and bytes
    each receives (``received``: its peers' splits toward it). A hot receiver (above the
    median) stands out even when every rank sends the same split list; uneven splits whose totals balance on both sides
    still flag the ranks that sent them."""
    found, checked = [], 0

    def outside(values: dict[int, float], med: float | None = None) -> list[int]:
        med = float(np.median(list(values.values()))) if med is None else med
        return [r for r, v in values.items() if abs(v - med) > tolerance * max(med, 1)]

    members = workload.all_groups()
    instances = _instances(workload, members)
    for (g, k), rows in sorted(instances.items()):
        checked += 1
        sizes = {r: int(workload.traces[r].comm_size[row]) for r, row in rows.items()}
        peers = {r: p for r, row in rows.items() if (p := _peer_bytes(workload.traces[r], row)) is not None}
        received = _received(list(members[g]), peers) if peers else None
        vals = [float(v) for v in sizes.values()]
        med = float(statistics.median(vals))  # (numpy's costs ~20 µs a call: seconds over 100,000 instances)
        off = set(outside({r: float(v) for r, v in sizes.items()}, med))
        if received:  # a hot receiver (a cold one does not slow the collective)
            rmed = float(np.median(list(received.values())))
            off |= {r for r in outside(received) if received[r] > rmed}
        skew = [r for r, p in peers.items() if max(p) - min(p) > tolerance * max(float(np.median(p)), 1)]
        if not off and not skew:
            continue
        lo, hi = min(vals), max(vals)
        t0 = workload.traces[next(iter(rows))]
        found.append(
            Imbalance(
                g,
                k,
                collective_name(int(t0.comm_type[rows[next(iter(rows))]])),
                sizes,
                med,
                float("inf") if lo == 0 and hi > 0 else (hi / lo if lo else 1.0),
                sorted(off or set(skew)),
                {r: int(workload.traces[r].ids[row]) for r, row in rows.items()},
                peers or None,
                received,
            )
        )
    return ImbalanceReport(checked, found, tolerance)


@dataclass
class CommMatrix(Tabular):
    """Bytes each rank sends to each other rank (rows: senders, columns: receivers)."""

    ranks: list[int]
    bytes: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "bytes": self.bytes.tolist()}

    def to_table(self) -> Table:
        """One row per sender (the index, ``from``), one column per receiver (named by its rank)."""
        to = {str(r): self.bytes[:, i] for i, r in enumerate(self.ranks)}
        whole = Column(format=_whole_bytes)
        return Table(
            {"from": np.asarray(self.ranks, np.int64), **to},
            title="bytes sent (rows: from, columns: to)",
            index="from",
            spec=dict.fromkeys(to, whole),
        )


def _whole_bytes(v: float) -> str:
    return f"{int(v):,}"


def communication_matrix(workload) -> CommMatrix:
    """Bytes between every pair of ranks, from point-to-point sends and from each collective
    as a ring over its group in listed order (the pattern the simulator uses for groups):
    all-reduce sends 2(p-1)/p of its size to the next member, reduce-scatter (p-1)/p,
    all-gather (p-1) times its per-rank input, broadcast/reduce/gather/scatter their size;
    all-to-all sends size/p to every other member (all_to_allv: its recorded splits)."""
    ranks = workload.ranks
    pos = {r: i for i, r in enumerate(ranks)}
    m = np.zeros((len(ranks), len(ranks)))
    groups = workload.all_groups()
    instances = _instances(workload, groups)
    in_job = {g: [r for r in ranks_ if r in pos] for g, ranks_ in groups.items()}
    where = {g: {r: i for i, r in reversed(list(enumerate(ms)))} for g, ms in in_job.items()}  # (first place)
    for (g, _k), rows in instances.items():
        members = in_job[g]
        p = len(members)
        if p < 2:
            continue
        for rank, row in rows.items():
            t = workload.traces[rank]
            size, kind = float(t.comm_size[row]), collective_name(int(t.comm_type[row]))
            i = where[g].get(rank)
            if i is None:
                continue
            if kind == "ALL_TO_ALL":
                peer = _peer_bytes(t, row)
                sends = peer if peer is not None and len(peer) == p else [size / p] * p
                for j, b in zip(members, sends):
                    if j != rank:
                        m[pos[rank], pos[j]] += b
                continue
            share = {
                "ALL_REDUCE": 2 * (p - 1) / p * size,
                "REDUCE_SCATTER": (p - 1) / p * size,
                "REDUCE_SCATTER_BLOCK": (p - 1) / p * size,
                "ALL_GATHER": (p - 1) * size,
                "BARRIER": 0.0,
            }.get(kind, size)
            m[pos[rank], pos[members[(i + 1) % p]]] += share
    for rank in ranks:
        t = workload.traces[rank]
        for row in np.flatnonzero(t.types == NodeType.COMM_SEND_NODE).tolist():
            dst = int(t.comm_dst[row])
            if dst in pos:
                m[pos[rank], pos[dst]] += float(t.comm_size[row])
    return CommMatrix(ranks, m)
