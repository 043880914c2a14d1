"""Checks of one rank's trace: ids, dependencies, cycles, node types and attributes.

Every check is vectorized over the columns; Python loops run only over problems found (and,
for graphs whose dependencies do not all point to earlier rows, over the edges in Kahn's
algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..schema.enums import ATTR_MEMBER, RESERVED_NODE_TYPES, Attr, CollectiveType, NodeType
from ..schema.node import COLUMN_BY_NAME
from ..schema.proto import ATTR_MEMBER_BY_FIELD
from ..schema.trace import Trace
from .attrs import KNOWN, ExtraAttrs, extra_attrs, present
from .report import ERROR, SAMPLE, WARNING, Issue, ValidationReport, count_noun, format_ids, sample_ids

ABSURD_BYTES = 1 << 50  # 1 PiB: no single tensor or message is this large

_NODE_TYPES = np.array(sorted(int(t) for t in NodeType), np.int64)
_COLL_TYPES = np.array(sorted(int(t) for t in CollectiveType), np.int64)


class _Checker:
    """Collects the issues of one trace."""

    def __init__(self, trace: Trace, rank: int | None):
        self.t = trace
        self.rank = rank
        self.issues: list = []  # Issue, or where deferred (`_unranked`) what `_check_peers` checks
        self.defer_peers = False

    def add(
        self, severity: str, code: str, count: int, message: str, node_ids=(), *, fixable: bool = False, **details: Any
    ) -> None:
        self.issues.append(
            Issue(
                severity,
                code,
                int(count),
                message,
                sample_ids(node_ids) if len(node_ids) else [],
                self.rank,
                fixable,
                details,
            )
        )


@dataclass
class Edges:
    """Dependency entries of one kind, resolved to rows."""

    src: np.ndarray  # dependent row
    dst: np.ndarray  # dependency row, -1 if missing
    ids: np.ndarray  # dependency id
    missing: np.ndarray
    self_dep: np.ndarray
    duplicate: np.ndarray  # repeats an earlier entry of the same node


def edges(trace: Trace, kind: str) -> Edges:
    src, dst, ids = trace.dep_rows(kind)
    missing = dst < 0
    self_dep = ids == trace.ids[src]
    duplicate = np.zeros(ids.size, bool)
    multi = np.flatnonzero(np.diff(trace.data_indptr if kind == "data" else trace.ctrl_indptr)[src] > 1)
    if multi.size:  # only nodes with several entries can repeat one
        order = multi[np.lexsort((ids[multi], src[multi]))]  # stable: a run starts with its earliest entry
        same = (src[order][1:] == src[order][:-1]) & (ids[order][1:] == ids[order][:-1])
        duplicate[order[1:][same]] = True
    return Edges(src, dst, ids, missing, self_dep, duplicate)


def host_collectives(trace: Trace, has_type: np.ndarray, has_size: np.ndarray) -> np.ndarray:
    """COMM_COLL nodes that are host-side launch ops: no comm_type, no comm_size, is_cpu_op true."""
    cpu = trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op
    return (trace.types == NodeType.COMM_COLL_NODE) & ~has_type & ~has_size & cpu


#: The columns the checks read but the peers' values: what they find there is found once for the
#: ranks of a parallelized job that share a program (their traces share every other column)
_SOURCES = tuple(k for k in Trace.ARRAYS if k not in (Attr.COMM_SRC, Attr.COMM_DST))


def validate_trace(trace: Trace, rank: int | None = None) -> ValidationReport:
    """Check one rank's trace: ids, dependencies, cycles, node types and attributes."""
    found = trace.cached(("validate",), _SOURCES, lambda: _unranked(trace))
    c = _Checker(trace, rank)
    for item in found:
        if isinstance(item, Issue):
            c.issues.append(replace(item, rank=rank, node_ids=list(item.node_ids), details=dict(item.details)))
        else:
            _check_peers(c, *item)
    return ValidationReport(c.issues, nodes=len(trace), ranks=[] if rank is None else [rank]).sort()


def _unranked(trace: Trace) -> list:
    """The issues of `validate_trace` but their rank, in order, with a placeholder where the
    peers' values are checked (`_check_peers`)."""
    c = _Checker(trace, None)
    c.defer_peers = True
    t = trace
    kinds = {"data": edges(t, "data"), "ctrl": edges(t, "ctrl")}
    _check_ids(c)
    _check_deps(c, kinds)
    _check_cycles(c)
    _check_types(c)
    extra = extra_attrs(t)
    _check_noncanonical(c, extra)
    _check_comm(c, extra)
    _check_sizes(c)
    return c.issues


def _check_ids(c: _Checker) -> None:
    ids = c.t.ids
    if ids.size < 2 or (ids[1:] > ids[:-1]).all():
        return
    s = np.sort(ids)
    dup = np.unique(s[1:][s[1:] == s[:-1]])
    if dup.size:
        rows = int(np.isin(ids, dup).sum())
        c.add(
            ERROR,
            "duplicate-id",
            dup.size,
            f"{count_noun(dup.size, 'node id', 'appear')} on more than one node ({rows:,} nodes); dependencies on "
            f"them are ambiguous: {format_ids(sample_ids(dup), dup.size)}",
            dup,
        )


_WORD = {"data": "data", "ctrl": "control"}


def _check_deps(c: _Checker, kinds: dict[str, Edges]) -> None:
    t = c.t
    for kind, e in kinds.items():
        m = e.missing
        if not m.any():
            continue
        k = int(m.sum())
        targets = np.unique(e.ids[m])
        dependents = np.unique(e.src[m])
        c.add(
            WARNING,
            f"missing-{kind}-dep",
            k,
            f"{count_noun(k, f'{_WORD[kind]} dependency', None, f'{_WORD[kind]} dependencies')} (of "
            f"{count_noun(dependents.size, 'node')}) {'points' if k == 1 else 'point'} to {count_noun(targets.size, 'id')} "
            f"not in the trace (e.g. "
            f"{format_ids(sample_ids(targets), targets.size)}); ASTRA-sim aborts on them",
            t.ids[dependents],
            fixable=True,
            dependents=int(dependents.size),
            missing_targets=int(targets.size),
            missing_ids=sample_ids(targets),
        )
    for code, severity, attr, what in (  # a self-dependency never resolves: an error that --fix repairs
        ("self-dep", ERROR, "self_dep", "of a node on itself (a simulator that resolves them waits forever)"),
        ("duplicate-dep", WARNING, "duplicate", "repeat an earlier entry of the same node"),
    ):
        masks = {
            k: getattr(e, attr) & ~e.missing & (~e.self_dep if attr == "duplicate" else True) for k, e in kinds.items()
        }
        by = {k: int(m.sum()) for k, m in masks.items()}
        total = sum(by.values())
        if not total:
            continue
        rows = np.concatenate([kinds[k].src[m] for k, m in masks.items()])
        parts = " and ".join(f"{v:,} {_WORD[k]}" for k, v in by.items() if v)
        noun = "dependency" if total == 1 else "dependencies"
        if code == "duplicate-dep":
            noun = "dependency entry" if total == 1 else "dependency entries"
            what = ("repeats" if total == 1 else "repeat") + " an earlier entry of the same node"
        c.add(severity, code, total, f"{parts} {noun} {what}", t.ids[rows], fixable=True, **by)


def _check_cycles(c: _Checker) -> None:
    """Cycles over data and control dependencies together (ASTRA-sim resolves both)."""
    t = c.t
    found = t.graph().cycle()
    if found is None:
        return
    cycle, blocked = found
    kinds_of = _edge_kinds(t, cycle + cycle[:1] if len(cycle) <= 1000 else cycle[:1001])
    ids = [int(x) for x in t.ids[cycle]]
    shown = "".join(f"{a} -{k}-> " for a, k in zip(ids[:SAMPLE], kinds_of)) + (
        f"{ids[0]}" if len(ids) <= SAMPLE else "…"
    )
    data_acyclic = any("ctrl" in k for k in kinds_of) and t.graph(("data",)).cycle() is None
    note = "; data dependencies alone are acyclic" if data_acyclic else ""
    c.add(
        ERROR,
        "cycle",
        blocked,
        f"dependency cycle of {count_noun(len(ids), 'node')}: {shown} (each depends on the next){note}; "
        f"{count_noun(blocked, 'node')} on or behind cycles can never run",
        t.ids[cycle],
        fixable=bool(data_acyclic),
        cycle=ids[:1000],
        edge_kinds=kinds_of[:1000],
        cycle_length=len(ids),
        blocked_nodes=blocked,
        data_acyclic=bool(data_acyclic),
    )


def _ids_note(ids: np.ndarray) -> str:
    """Which nodes, as ' (node id 7)' or ' (node ids 7, 9, ...)': for errors a simulator cannot run past."""
    return f" (node id{'s' if ids.size > 1 else ''} {format_ids(sample_ids(ids), ids.size)})"


def _check_types(c: _Checker) -> None:
    t = c.t
    types = t.types.astype(np.int64)
    reserved = (types >= min(RESERVED_NODE_TYPES)) & (types <= max(RESERVED_NODE_TYPES))
    bad = ((types < _NODE_TYPES[0]) | (types > _NODE_TYPES[-1])) & ~reserved
    for code, sev, m, what in (
        ("invalid-node-type", ERROR, bad, "a type outside NodeType: {}{ids}"),
        (
            "reserved-node-type",
            WARNING,
            reserved,
            "a node type reserved by an upstream proposal ({}); other tools do not know it",
        ),
        (
            "untyped-node",
            WARNING,
            types == NodeType.INVALID_NODE,
            "type INVALID_NODE ({}, the default when unset); simulators skip or reject it",
        ),
    ):
        if m.any():
            vals = np.unique(types[m])
            k = int(m.sum())
            c.add(
                sev,
                code,
                k,
                f"{count_noun(k, 'node', 'have')} "
                + what.format(", ".join(str(v) for v in vals[:10]), ids=_ids_note(t.ids[m])),
                t.ids[m],
                values=[int(v) for v in vals[:SAMPLE]],
            )


def _check_comm(c: _Checker, extra: ExtraAttrs) -> None:
    t = c.t

    def has(attr: str) -> np.ndarray:
        return present(t, extra, attr)

    has_type, has_size = has(Attr.COMM_TYPE), has(Attr.COMM_SIZE)
    bad = t.has(Attr.COMM_TYPE) & ((t.comm_type < _COLL_TYPES[0]) | (t.comm_type > _COLL_TYPES[-1]))
    if bad.any():
        vals = np.unique(t.comm_type[bad])
        k = int(bad.sum())
        c.add(
            ERROR,
            "invalid-comm-type",
            k,
            f"{count_noun(k, 'node', 'have')} a comm_type outside CollectiveCommType: "
            f"{', '.join(str(v) for v in vals[:10])}{_ids_note(t.ids[bad])}",
            t.ids[bad],
            values=[int(v) for v in vals[:SAMPLE]],
        )

    coll = t.types == NodeType.COMM_COLL_NODE
    host = host_collectives(t, has_type, has_size)
    if host.any():
        k = int(host.sum())
        names = sorted(set(t.name_array[host][:200].tolist()))
        c.add(
            WARNING,
            "collective-missing-type",
            k,
            f"{count_noun(k, 'COMM_COLL node')} without comm_type or comm_size {'is a' if k == 1 else 'are'} host-side "
            f"launch op{'s' * (k != 1)} (is_cpu_op; e.g. {', '.join(repr(x) for x in names[:2])}); other tools "
            f"read {'it' if k == 1 else 'them'} as 0-byte ALL_REDUCE",
            t.ids[host],
            fixable=True,
            host_side=True,
        )
    for code, m, what in (
        ("collective-missing-type", coll & ~has_type & ~host, "no comm_type; other tools read ALL_REDUCE"),
        ("collective-missing-size", coll & ~has_size & ~host, "no comm_size; simulators move 0 bytes"),
    ):
        if m.any():
            k = int(m.sum())
            c.add(
                WARNING,
                code,
                k,
                f"{count_noun(k, 'COMM_COLL node', 'have')} {what}",
                t.ids[m],
                **({"host_side": False} if code == "collective-missing-type" else {}),
            )

    for node_type, attr, word in (
        (NodeType.COMM_SEND_NODE, Attr.COMM_DST, "COMM_SEND"),
        (NodeType.COMM_RECV_NODE, Attr.COMM_SRC, "COMM_RECV"),
    ):
        is_t = t.types == node_type
        m = is_t & ~has(attr)
        if m.any():
            k = int(m.sum())
            what = f"no {attr}; other tools read rank 0"
            c.add(ERROR, "p2p-missing-peer", k, f"{count_noun(k, word + ' node', 'have')} {what}", t.ids[m], attr=attr)
        if c.defer_peers:
            c.issues.append((node_type, attr, word))
        else:
            _check_peers(c, node_type, attr, word)
        m = is_t & ~has(Attr.COMM_SIZE)
        if m.any():
            k = int(m.sum())
            what = "no comm_size; simulators move 0 bytes"
            c.add(
                WARNING, "p2p-missing-size", k, f"{count_noun(k, word + ' node', 'have')} {what}", t.ids[m], attr=attr
            )


def _check_peers(c: _Checker, node_type: int, attr: str, word: str) -> None:
    """Sends and receives naming a negative peer (the one check of a peer's value)."""
    t = c.t
    m = (t.types == node_type) & t.has(attr) & (getattr(t, attr) < 0)
    if m.any():
        k = int(m.sum())
        c.add(
            ERROR, "invalid-peer", k, f"{count_noun(k, word + ' node', 'have')} a negative {attr}", t.ids[m], attr=attr
        )


def _check_sizes(c: _Checker) -> None:
    t = c.t
    neg, absurd = [], []
    for attr in (Attr.COMM_SIZE, Attr.TENSOR_SIZE, Attr.NUM_OPS):
        p = t.has(attr)
        v = getattr(t, attr)
        v = v.view(np.int64) if v.dtype == np.uint64 else v  # a uint64 >= 2**63 is a wrapped negative
        m = p & (v < 0)
        if m.any():
            neg.append((attr, m))
        if attr != Attr.NUM_OPS:  # bytes
            m = p & (v > ABSURD_BYTES)
            if m.any():
                absurd.append((attr, m))
    for code, sev, found, what in (
        ("negative-size", ERROR, neg, "a negative size"),
        ("absurd-size", WARNING, absurd, "a size over 1 PiB (2**50 bytes)"),
    ):
        if found:
            m = np.logical_or.reduce([x[1] for x in found])
            by = {a: int(x.sum()) for a, x in found}
            k = int(m.sum())
            c.add(
                sev,
                code,
                k,
                f"{count_noun(k, 'node', 'have')} {what}: " + ", ".join(f"{a} ({v:,})" for a, v in by.items()),
                t.ids[m],
                by_attr=by,
            )


def _check_noncanonical(c: _Checker, extra: ExtraAttrs) -> None:
    t = c.t
    bad = ~extra.canonical
    members = extra.member
    if bad.any():
        by: dict[str, dict[str, int]] = {}
        for k, num in zip(*np.unique(np.stack([extra.name[bad], members[bad]]), axis=1)):
            mem = ATTR_MEMBER_BY_FIELD.get(int(num), "no value") if num else "no value"
            by.setdefault(KNOWN[int(k)], {})[mem] = int(((extra.name == k) & (members == num) & bad).sum())
        rows = np.unique(extra.rows[bad])
        desc = "; ".join(
            f"{a} as {', '.join(f'{m} ({v:,})' for m, v in d.items())} (expected {ATTR_MEMBER[a]})"
            for a, d in by.items()
        )
        k = int(bad.sum())
        c.add(
            WARNING,
            "noncanonical-member",
            k,
            f"{count_noun(k, 'attribute')} of the Chakra vocabulary (on {count_noun(rows.size, 'node')}) "
            f"{'uses' if k == 1 else 'use'} a member other tools do not read (they read 0): {desc}",
            t.ids[rows],
            by_attr=by,
        )
    # a known attribute with the right member in the extras while the column also holds it: a repeat
    if extra.rows.size:
        rep = np.zeros(extra.rows.size, bool)
        for name in COLUMN_BY_NAME:
            m = extra.canonical & (extra.name == KNOWN.index(name))
            if m.any():
                rep[m] = t.has(name)[extra.rows[m]]
        if rep.any():
            names = sorted({KNOWN[int(k)] for k in np.unique(extra.name[rep])})
            k = int(rep.sum())
            c.add(
                WARNING,
                "duplicate-attr",
                k,
                f"{count_noun(k, 'attribute', 'repeat')} one already on the node ({', '.join(names)}); tools may read "
                f"either value",
                t.ids[extra.rows[rep]],
                attrs=names,
            )


def _edge_kinds(t: Trace, cycle: list[int]) -> list[str]:
    """For each step of a path of rows (each depends on the next): "data", "ctrl" or "data+ctrl"."""
    out = []
    for a, b in zip(cycle, cycle[1:]):
        dep = t.ids[b]
        k = [name for name, fn in (("data", t.data_deps), ("ctrl", t.ctrl_deps)) if (fn(a) == dep).any()]
        out.append("+".join(k))
    return out
