"""Two traces side by side: which ops got slower or faster, which appeared or went away, and
how the whole workload (span, compute, communication, collectives) moved.

Ops are matched by (node type, name), over all ranks or per rank: a run before and after a
change, or two ranks of one job, compare without any node-level correspondence. Times are
the recorded durations, summed per op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..io.workload import Workload
from ..schema.enums import Attr, NodeType, collective_name, node_type_name
from ..schema.trace import Trace
from ..table import Table, Tabular
from .breakdown import rank_breakdown

STATUSES = ("added", "removed", "slower", "faster", "same")


def merge_names(tables: list[list[str]]) -> tuple[np.ndarray, list[np.ndarray]]:
    """One sorted name table for several traces' string tables, and for each table the code
    of each of its entries in the merged one (so `maps[i][t.name_codes]` recodes a trace)."""
    if not tables:
        return np.zeros(0, object), []
    flat = np.empty(sum(len(tb) for tb in tables), object)
    flat[:] = [s for tb in tables for s in tb]
    table, inv = np.unique(flat, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    bounds = np.cumsum([0] + [len(tb) for tb in tables])
    return table.astype(object), [inv[bounds[i] : bounds[i + 1]] for i in range(len(tables))]


def _type_table(traces: list[Trace]) -> np.ndarray:
    """Sorted distinct node types of several traces (the usual small range without a sort)."""
    lo = min((int(t.types.min()) for t in traces if len(t)), default=0)
    hi = max((int(t.types.max()) for t in traces if len(t)), default=0)
    if hi - lo < 1 << 12:
        seen = np.zeros(hi - lo + 1, bool)
        for t in traces:
            seen[t.types.astype(np.int64) - lo] = True
        return np.flatnonzero(seen).astype(np.int64) + lo
    return np.unique(np.concatenate([np.unique(t.types) for t in traces])).astype(np.int64)


def _as_workload(x: Workload | Trace) -> Workload:
    return Workload({0: x}) if isinstance(x, Trace) else x


@dataclass
class TraceDiff(Tabular):
    """``rows``: one dict per (node type, name[, rank]) with count_a/b, total_us_a/b,
    mean_us_a/b, delta_us (b - a), ratio (b / a, None when a is 0) and status; largest
    |delta| first. ``summary``: whole-workload metrics side by side, collectives per
    (group, type) and how many rows have each status."""

    rows: list[dict]
    summary: dict[str, Any]
    labels: tuple[str, str] = ("A", "B")
    threshold: float = 0.05
    min_us: float = 1.0
    by_rank: bool = False

    def _with(self, *status: str) -> list[dict]:
        return [r for r in self.rows if r["status"] in status]

    def added(self) -> list[dict]:
        """Ops only in B."""
        return self._with("added")

    def removed(self) -> list[dict]:
        """Ops only in A."""
        return self._with("removed")

    def changed(self) -> list[dict]:
        """Ops on both sides whose time moved beyond the threshold (slower or faster)."""
        return self._with("slower", "faster")

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": list(self.labels),
            "threshold": self.threshold,
            "min_us": self.min_us,
            "by_rank": self.by_rank,
            "summary": self.summary,
            "rows": self.rows,
        }

    def to_table(self) -> Table:
        """One row per op (node type, name[, rank]), largest |delta| first."""
        cols = (["rank"] if self.by_rank else []) + list(_ROW_COLUMNS)
        return Table.from_records(self.rows, cols, title=f"{self.labels[1]} vs {self.labels[0]}")


_ROW_COLUMNS = (
    "name",
    "type",
    "count_a",
    "count_b",
    "total_us_a",
    "total_us_b",
    "mean_us_a",
    "mean_us_b",
    "delta_us",
    "ratio",
    "status",
)


def _side_totals(w: Workload) -> dict[str, Any]:

    per = [rank_breakdown(w.traces[r]) for r in w.ranks]
    return {
        "nodes": sum(len(t) for t in w.traces.values()),
        "ranks": len(w),
        "span_us": max((p["span_us"] for p in per), default=0),
        "compute_us": sum(p["compute_us"] for p in per),
        "comm_us": sum(p["comm_us"] for p in per),
        "exposed_comm_us": sum(p["exposed_comm_us"] for p in per),
    }


def _collectives(w: Workload) -> dict[tuple[str, str], tuple[int, int]]:
    """(group, type) -> (count, bytes) over all ranks; "" is the unnamed group."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for t in w.traces.values():
        coll = t.types == NodeType.COMM_COLL_NODE
        if not coll.any():
            continue
        groups = np.asarray([*t.groups, ""], dtype=object)
        gcode = np.where(t.has(Attr.PG_NAME), t.pg_name, len(t.groups))[coll]
        ctype = np.where(t.has(Attr.COMM_TYPE), t.comm_type, -1)[coll]
        size = np.where(t.has(Attr.COMM_SIZE), t.comm_size, 0)[coll]
        keys, inv, counts = np.unique(
            np.stack([gcode.astype(np.int64), ctype.astype(np.int64)], 1),
            axis=0,
            return_inverse=True,
            return_counts=True,
        )
        nbytes = np.bincount(inv.reshape(-1), weights=size.astype(np.float64), minlength=len(keys))
        for (g, c), n, nb in zip(keys.tolist(), counts.tolist(), nbytes.tolist()):
            key = (str(groups[g]), "MISSING_COMM_TYPE" if c < 0 else collective_name(c))
            n0, b0 = out.get(key, (0, 0))
            out[key] = (n0 + n, b0 + int(nb))
    return out


def _summary(wa: Workload, wb: Workload, labels) -> dict[str, Any]:
    sa, sb = _side_totals(wa), _side_totals(wb)
    metrics = [
        {"metric": k, "a": sa[k], "b": sb[k], "delta": sb[k] - sa[k], "ratio": sb[k] / sa[k] if sa[k] else None}
        for k in sa
    ]
    ca, cb = _collectives(wa), _collectives(wb)
    colls = []
    for key in sorted(set(ca) | set(cb)):
        (na, ba), (nb, bb) = ca.get(key, (0, 0)), cb.get(key, (0, 0))
        colls.append(
            {
                "group": key[0],
                "type": key[1],
                "count_a": na,
                "count_b": nb,
                "bytes_a": ba,
                "bytes_b": bb,
                "changed": (na, ba) != (nb, bb),
            }
        )
    return {"labels": list(labels), "metrics": metrics, "collectives": colls}


def diff(
    a: Workload | Trace,
    b: Workload | Trace,
    *,
    threshold: float = 0.05,
    min_us: float = 1.0,
    labels: tuple[str, str] = ("A", "B"),
    by_rank: bool = False,
) -> TraceDiff:
    """Compare B against A per (node type, op name) over all ranks (per rank with `by_rank`).
    An op on both sides is "same" when its total time moved by at most `threshold` of A's
    total or by less than `min_us`, else "slower"/"faster"; "added" is only in B, "removed"
    only in A."""
    wa, wb = _as_workload(a), _as_workload(b)
    sides = [(0, r, wa.traces[r]) for r in wa.ranks] + [(1, r, wb.traces[r]) for r in wb.ranks]
    table, maps = merge_names([t.names for _, _, t in sides])
    rank_keys = sorted({r if by_rank else 0 for _, r, _ in sides})
    rank_pos = {r: i for i, r in enumerate(rank_keys)}
    type_table = _type_table([t for _, _, t in sides])
    n_types, n_names = len(type_table), max(len(table), 1)
    keys, side, dur = [], [], []
    for (s, r, t), m in zip(sides, maps):  # one int64 key per node: (rank, type, name)
        p = rank_pos[r if by_rank else 0]
        tcode = np.searchsorted(type_table, t.types).astype(np.int64)
        keys.append((p * n_types + tcode) * n_names + m[t.name_codes])
        side.append(np.full(len(t), s, np.int8))
        dur.append(t.duration.astype(np.float64))
    K = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    S = np.concatenate(side) if side else np.zeros(0, np.int8)
    D = np.concatenate(dur) if dur else np.zeros(0)
    ukey, inv = np.unique(K, return_inverse=True)
    inv = inv.reshape(-1)
    k = len(ukey)
    uk = np.stack(
        [
            np.asarray(rank_keys, np.int64)[ukey // (n_types * n_names)],
            type_table[ukey // n_names % n_types],
            ukey % n_names,
        ],
        1,
    )
    ia, ib = S == 0, S == 1
    count_a = np.bincount(inv[ia], minlength=k)
    count_b = np.bincount(inv[ib], minlength=k)
    tot_a = np.bincount(inv[ia], weights=D[ia], minlength=k)
    tot_b = np.bincount(inv[ib], weights=D[ib], minlength=k)
    delta = tot_b - tot_a
    same = (np.abs(delta) < min_us) | (np.abs(delta) <= threshold * tot_a)
    status = np.select([count_a == 0, count_b == 0, same, delta > 0], ["added", "removed", "same", "slower"], "faster")
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_a = np.where(count_a > 0, tot_a / count_a, np.nan)
        mean_b = np.where(count_b > 0, tot_b / count_b, np.nan)
        ratio = np.where(tot_a > 0, tot_b / tot_a, np.nan)
    order = np.lexsort((uk[:, 1], uk[:, 2], uk[:, 0], -np.abs(delta))) if k else np.zeros(0, np.int64)
    type_names = {int(v): node_type_name(int(v)) for v in np.unique(uk[:, 1]).tolist()}

    def num(v: float):
        return None if np.isnan(v) else float(v)

    rows = []
    for i in order.tolist():
        row: dict[str, Any] = {"rank": int(uk[i, 0])} if by_rank else {}
        row.update(
            name=str(table[uk[i, 2]]),
            type=type_names[int(uk[i, 1])],
            count_a=int(count_a[i]),
            count_b=int(count_b[i]),
            total_us_a=int(tot_a[i]),
            total_us_b=int(tot_b[i]),
            mean_us_a=num(mean_a[i]),
            mean_us_b=num(mean_b[i]),
            delta_us=int(delta[i]),
            ratio=num(ratio[i]),
            status=str(status[i]),
        )
        rows.append(row)
    summary = _summary(wa, wb, labels)
    summary["status"] = {s: int((status == s).sum()) for s in STATUSES}
    return TraceDiff(rows, summary, (labels[0], labels[1]), threshold, min_us, by_rank)


__all__ = ["diff", "TraceDiff", "merge_names", "STATUSES"]
