"""Checking traces and workloads for problems that break simulators and analyzers, and repairing
the unambiguous ones.

Every check is vectorized over the columns; Python loops run only over problems found (and,
for graphs whose dependencies do not all point to earlier rows, over the edges in Kahn's
algorithm). An `Issue` says what is wrong, how often, and on which nodes (a sample);
`fix_trace` repairs only what has one right answer and says what it changed.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..schema.enums import (
    ATTR_MEMBER, RESERVED_NODE_TYPES, Attr, CollectiveType, NodeType, collective_name,
)
from ..schema.trace import Trace

SAMPLE = 20  # node ids kept per issue
ABSURD_BYTES = 1 << 50  # 1 PiB: no single tensor or message is this large
ERROR, WARNING = "error", "warning"

_NODE_TYPES = np.array(sorted(int(t) for t in NodeType), np.int64)
_COLL_TYPES = np.array(sorted(int(t) for t in CollectiveType), np.int64)


# --------------------------------------------------------------------------- results


@dataclass
class Issue:
    """One kind of problem: how often it occurs and on which nodes (a sample of ids)."""

    severity: str  # "error" | "warning"
    code: str  # e.g. "missing-ctrl-dep"
    count: int
    message: str
    node_ids: list[int] = field(default_factory=list)  # sample, at most SAMPLE
    rank: int | None = None
    fixable: bool = False  # `fix_trace` repairs it
    details: dict[str, Any] = field(default_factory=dict)  # code-specific numbers and samples

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Report:
    """The issues found in a trace or workload."""

    issues: list[Issue] = field(default_factory=list)
    nodes: int = 0  # nodes checked
    ranks: list[int] = field(default_factory=list)  # ranks checked (empty: one trace, rank unknown)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == WARNING]

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not self.errors

    @property
    def fixable(self) -> list[Issue]:
        return [i for i in self.issues if i.fixable]

    def codes(self) -> dict[str, int]:
        """Total count per issue code."""
        out: dict[str, int] = {}
        for i in self.issues:
            out[i.code] = out.get(i.code, 0) + i.count
        return out

    def get(self, code: str, rank: int | None = None) -> Issue | None:
        """The first issue with this code (and rank, if given)."""
        for i in self.issues:
            if i.code == code and (rank is None or i.rank == rank):
                return i
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "errors": len(self.errors), "warnings": len(self.warnings),
                "nodes": self.nodes, "ranks": list(self.ranks),
                "issues": [i.to_dict() for i in self.issues]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_pandas(self):
        """The issues as a DataFrame, one row per issue (needs pandas)."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover
            from ..errors import ChakraError

            raise ChakraError("to_pandas() needs pandas: pip install 'chakra-trace[pandas]'") from None
        cols = ["severity", "code", "rank", "count", "fixable", "message", "node_ids"]
        return pd.DataFrame([{c: getattr(i, c) for c in cols} for i in self.issues], columns=cols)

    def summary_line(self) -> str:
        ne, nw = len(self.errors), len(self.warnings)
        where = f"{self.nodes:,} nodes" + (f" on {len(self.ranks)} ranks" if len(self.ranks) > 1 else "")
        if not self.issues:
            return f"OK: no issues in {where}"
        head = "INVALID" if ne else "OK"
        return f"{head}: {ne} error{'s' * (ne != 1)}, {nw} warning{'s' * (nw != 1)} in {where}"

    def render(self) -> str:
        """Plain-text rendering: one line per issue, then the summary line."""
        lines = []
        for i in self.issues:
            rank = "" if i.rank is None else f"[rank {i.rank}] "
            fix = " (fixable)" if i.fixable else ""
            lines.append(f"{i.severity:<7} {i.code:<24} {i.count:>10,}  {rank}{i.message}{fix}")
        lines.append(self.summary_line())
        return "\n".join(lines)

    __str__ = render

    def sort(self) -> "Report":
        """Errors first; otherwise keep the order the checks ran in."""
        self.issues.sort(key=lambda i: i.severity != ERROR)
        return self


# --------------------------------------------------------------------------- helpers


def _ids(a) -> list[int]:
    """A sorted, de-duplicated sample of node ids as plain ints."""
    a = np.unique(np.asarray(a, np.uint64))
    return [int(x) for x in a[:SAMPLE]]


def _fmt_ids(ids: list[int], total: int | None = None) -> str:
    s = ", ".join(str(i) for i in ids[:8])
    total = len(ids) if total is None else total
    return s + (f", … ({total - 8:,} more)" if total > 8 else "")


def _n(k: int, noun: str, verb: str | None = None, plural: str | None = None) -> str:
    """"1 node has" / "3 nodes have": a count with its noun and (optionally) an agreeing verb."""
    out = f"{k:,} {noun if k == 1 else (plural or noun + 's')}"
    if verb:
        out += " " + (verb if k != 1 else {"have": "has"}.get(verb, verb + "s"))
    return out


@dataclass
class _ExtraAttrs:
    """Known attributes found in a trace's extras: row, vocabulary index, member field number."""

    rows: np.ndarray
    name: np.ndarray  # index into _KNOWN
    canonical: np.ndarray  # written with the member other tools read
    member: np.ndarray  # field number of the value member (0: no value)

    def present(self, attr: str) -> np.ndarray:
        return self.rows[self.name == _KNOWN.index(attr)]


_KNOWN = list(ATTR_MEMBER)


def _extra_attrs(trace: Trace) -> _ExtraAttrs:
    """Scan the extras (vectorized, as `extra_attr_array` does) for the attribute vocabulary."""
    from ..io.wire import I64, WT_LEN, WT_VARINT, equals_literal, scan_fields
    from ..schema.proto import ATTR_MEMBERS

    e = np.zeros(0, np.int64)
    empty = _ExtraAttrs(e, e, np.zeros(0, bool), e)
    if trace.extra.size == 0:
        return empty
    buf = trace.extra
    f = scan_fields(buf, trace.extra_indptr[:-1], trace.extra_indptr[1:])
    a = np.flatnonzero((f.number == 10) & (f.wtype == WT_LEN))
    if not a.size:
        return empty
    sub = scan_fields(buf, f.data[a], f.end[a])
    nr = np.flatnonzero((sub.number == 1) & (sub.wtype == WT_LEN))
    name_idx = np.full(a.size, -1, np.int64)
    nd, nl = sub.data[nr], sub.value[nr].astype(I64)
    for k, name in enumerate(_KNOWN):
        hit = equals_literal(buf, nd, nl, name.encode())
        name_idx[sub.msg[nr[hit]]] = k
    known = np.flatnonzero(name_idx >= 0)
    if not known.size:
        return empty
    # the oneof member: the last value field of the attribute (protobuf semantics); 0 = no value
    vr = np.flatnonzero(sub.number >= 3)
    member_num = np.zeros(a.size, np.int64)
    member_wt = np.zeros(a.size, np.int8)
    member_num[sub.msg[vr]] = sub.number[vr]
    member_wt[sub.msg[vr]] = sub.wtype[vr]
    want_num = np.array([ATTR_MEMBERS[ATTR_MEMBER[n]][0] for n in _KNOWN], np.int64)
    want_wt = np.array([WT_LEN if (ATTR_MEMBERS[ATTR_MEMBER[n]][2] or ATTR_MEMBERS[ATTR_MEMBER[n]][1]
                                   in ("string", "bytes")) else WT_VARINT for n in _KNOWN], np.int8)
    nk = name_idx[known]
    canonical = (member_num[known] == want_num[nk]) & (member_wt[known] == want_wt[nk])
    return _ExtraAttrs(f.msg[a[known]].astype(np.int64), nk, canonical, member_num[known])


def _present(t: Trace, extra: _ExtraAttrs, attr: str) -> np.ndarray:
    """Nodes carrying a known attribute, as a column or in the extras (any member)."""
    m = t.has(attr)
    rows = extra.present(attr)
    if rows.size:
        m = m.copy()
        m[rows] = True
    return m


class _Checker:
    """Collects the issues of one trace."""

    def __init__(self, trace: Trace, rank: int | None):
        self.t = trace
        self.rank = rank
        self.issues: list[Issue] = []

    def add(self, severity: str, code: str, count: int, message: str, node_ids=(), *, fixable: bool = False,
            **details: Any) -> None:
        self.issues.append(Issue(severity, code, int(count), message, _ids(node_ids) if len(node_ids) else [],
                                 self.rank, fixable, details))


# --------------------------------------------------------------------------- one trace


@dataclass
class _Edges:
    """Dependency entries of one kind, resolved to rows."""

    src: np.ndarray  # dependent row
    dst: np.ndarray  # dependency row, -1 if missing
    ids: np.ndarray  # dependency id
    missing: np.ndarray
    self_dep: np.ndarray
    duplicate: np.ndarray  # repeats an earlier entry of the same node


def _edges(trace: Trace, kind: str) -> _Edges:
    src, dst, ids = trace.dep_rows(kind)
    missing = dst < 0
    self_dep = ids == trace.ids[src]
    duplicate = np.zeros(ids.size, bool)
    multi = np.flatnonzero(np.diff(trace.data_indptr if kind == "data" else trace.ctrl_indptr)[src] > 1)
    if multi.size:  # only nodes with several entries can repeat one
        order = multi[np.lexsort((ids[multi], src[multi]))]  # stable: a run starts with its earliest entry
        same = (src[order][1:] == src[order][:-1]) & (ids[order][1:] == ids[order][:-1])
        duplicate[order[1:][same]] = True
    return _Edges(src, dst, ids, missing, self_dep, duplicate)


def _host_collectives(trace: Trace, has_type: np.ndarray, has_size: np.ndarray) -> np.ndarray:
    """COMM_COLL nodes that are host-side launch ops: no comm_type, no comm_size, is_cpu_op true."""
    cpu = trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op
    return (trace.types == NodeType.COMM_COLL_NODE) & ~has_type & ~has_size & cpu


def validate_trace(trace: Trace, rank: int | None = None) -> Report:
    """Check one rank's trace: ids, dependencies, cycles, node types and attributes."""
    c = _Checker(trace, rank)
    t = trace
    kinds = {"data": _edges(t, "data"), "ctrl": _edges(t, "ctrl")}
    _check_ids(c)
    _check_deps(c, kinds)
    _check_cycles(c, kinds)
    _check_types(c)
    extra = _extra_attrs(t)
    _check_noncanonical(c, extra)
    _check_comm(c, extra)
    _check_sizes(c)
    return Report(c.issues, nodes=len(t), ranks=[] if rank is None else [rank]).sort()


def _check_ids(c: _Checker) -> None:
    ids = c.t.ids
    if ids.size < 2 or (ids[1:] > ids[:-1]).all():
        return
    s = np.sort(ids)
    dup = np.unique(s[1:][s[1:] == s[:-1]])
    if dup.size:
        rows = int(np.isin(ids, dup).sum())
        c.add(ERROR, "duplicate-id", dup.size,
              f"{_n(dup.size, 'node id', 'appear')} on more than one node ({rows:,} nodes); dependencies on "
              f"them are ambiguous: {_fmt_ids(_ids(dup), dup.size)}", dup)


_WORD = {"data": "data", "ctrl": "control"}


def _check_deps(c: _Checker, kinds: dict[str, "_Edges"]) -> None:
    t = c.t
    for kind, e in kinds.items():
        m = e.missing
        if not m.any():
            continue
        k = int(m.sum())
        targets = np.unique(e.ids[m])
        dependents = np.unique(e.src[m])
        c.add(WARNING, f"missing-{kind}-dep", k,
              f"{_n(k, f'{_WORD[kind]} dependency', None, f'{_WORD[kind]} dependencies')} (of "
              f"{_n(dependents.size, 'node')}) {'points' if k == 1 else 'point'} to {_n(targets.size, 'id')} "
              f"not in the trace (e.g. "
              f"{_fmt_ids(_ids(targets), targets.size)}); ASTRA-sim aborts on them",
              t.ids[dependents], fixable=True, dependents=int(dependents.size),
              missing_targets=int(targets.size), missing_ids=_ids(targets))
    for code, attr, what in (("self-dep", "self_dep", "of a node on itself (a simulator that resolves them "
                                                      "waits forever)"),
                             ("duplicate-dep", "duplicate", "repeat an earlier entry of the same node")):
        masks = {k: getattr(e, attr) & ~e.missing & (~e.self_dep if attr == "duplicate" else True)
                 for k, e in kinds.items()}
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
        c.add(WARNING, code, total, f"{parts} {noun} {what}", t.ids[rows], fixable=True, **by)


def _check_cycles(c: _Checker, kinds: dict[str, "_Edges"]) -> None:
    """Cycles over data and control dependencies together (ASTRA-sim resolves both)."""
    t = c.t
    n = len(t)
    keep = {k: ~e.missing & ~e.self_dep for k, e in kinds.items()}
    src = np.concatenate([e.src[keep[k]] for k, e in kinds.items()])
    dst = np.concatenate([e.dst[keep[k]] for k, e in kinds.items()])
    found = find_cycle(n, src, dst, t.ids)
    if found is None:
        return
    cycle, blocked = found
    kinds_of = _edge_kinds(t, cycle + cycle[:1] if len(cycle) <= 1000 else cycle[:1001])
    ids = [int(x) for x in t.ids[cycle]]
    shown = "".join(f"{a} -{k}-> " for a, k in zip(ids[:SAMPLE], kinds_of)) + \
        (f"{ids[0]}" if len(ids) <= SAMPLE else "…")
    e = kinds["data"]
    data_acyclic = any("ctrl" in k for k in kinds_of) and \
        find_cycle(n, e.src[keep["data"]], e.dst[keep["data"]], t.ids) is None
    note = "; data dependencies alone are acyclic" if data_acyclic else ""
    c.add(ERROR, "cycle", blocked,
          f"dependency cycle of {_n(len(ids), 'node')}: {shown} (each depends on the next){note}; "
          f"{_n(blocked, 'node')} on or behind cycles can never run", t.ids[cycle], fixable=bool(data_acyclic),
          cycle=ids[:1000], edge_kinds=kinds_of[:1000], cycle_length=len(ids), blocked_nodes=blocked,
          data_acyclic=bool(data_acyclic))


def _check_types(c: _Checker) -> None:
    t = c.t
    types = t.types.astype(np.int64)
    reserved = (types >= min(RESERVED_NODE_TYPES)) & (types <= max(RESERVED_NODE_TYPES))
    bad = ((types < _NODE_TYPES[0]) | (types > _NODE_TYPES[-1])) & ~reserved
    for code, sev, m, what in (
        ("invalid-node-type", ERROR, bad, "a type outside NodeType: {}"),
        ("reserved-node-type", WARNING, reserved,
         "a node type reserved by an upstream proposal ({}); other tools do not know it"),
        ("untyped-node", WARNING, types == NodeType.INVALID_NODE,
         "type INVALID_NODE ({}, the default when unset); simulators skip or reject it"),
    ):
        if m.any():
            vals = np.unique(types[m])
            k = int(m.sum())
            c.add(sev, code, k, f"{_n(k, 'node', 'have')} " + what.format(", ".join(str(v) for v in vals[:10])),
                  t.ids[m], values=[int(v) for v in vals[:SAMPLE]])


def _check_comm(c: _Checker, extra: "_ExtraAttrs") -> None:
    t = c.t

    def has(attr: str) -> np.ndarray:
        return _present(t, extra, attr)

    has_type, has_size = has(Attr.COMM_TYPE), has(Attr.COMM_SIZE)
    bad = t.has(Attr.COMM_TYPE) & ((t.comm_type < _COLL_TYPES[0]) | (t.comm_type > _COLL_TYPES[-1]))
    if bad.any():
        vals = np.unique(t.comm_type[bad])
        k = int(bad.sum())
        c.add(ERROR, "invalid-comm-type", k,
              f"{_n(k, 'node', 'have')} a comm_type outside CollectiveCommType: "
              f"{', '.join(str(v) for v in vals[:10])}", t.ids[bad], values=[int(v) for v in vals[:SAMPLE]])

    coll = t.types == NodeType.COMM_COLL_NODE
    host = _host_collectives(t, has_type, has_size)
    if host.any():
        k = int(host.sum())
        names = sorted(set(t.name_array[host][:200].tolist()))
        c.add(WARNING, "collective-missing-type", k,
              f"{_n(k, 'COMM_COLL node')} without comm_type or comm_size {'is a' if k == 1 else 'are'} host-side "
              f"launch op{'s' * (k != 1)} (is_cpu_op; e.g. {', '.join(repr(x) for x in names[:2])}); other tools "
              f"read {'it' if k == 1 else 'them'} as 0-byte ALL_REDUCE", t.ids[host], fixable=True, host_side=True)
    for code, m, what in (
        ("collective-missing-type", coll & ~has_type & ~host, "no comm_type; other tools read ALL_REDUCE"),
        ("collective-missing-size", coll & ~has_size & ~host, "no comm_size; simulators move 0 bytes"),
    ):
        if m.any():
            k = int(m.sum())
            c.add(WARNING, code, k, f"{_n(k, 'COMM_COLL node', 'have')} {what}", t.ids[m],
                  **({"host_side": False} if code == "collective-missing-type" else {}))

    for node_type, attr, word in ((NodeType.COMM_SEND_NODE, Attr.COMM_DST, "COMM_SEND"),
                                  (NodeType.COMM_RECV_NODE, Attr.COMM_SRC, "COMM_RECV")):
        is_t = t.types == node_type
        for code, sev, m, what in (
            ("p2p-missing-peer", ERROR, is_t & ~has(attr), f"no {attr}; other tools read rank 0"),
            ("invalid-peer", ERROR, is_t & t.has(attr) & (getattr(t, attr) < 0), f"a negative {attr}"),
            ("p2p-missing-size", WARNING, is_t & ~has(Attr.COMM_SIZE), "no comm_size; simulators move 0 bytes"),
        ):
            if m.any():
                k = int(m.sum())
                c.add(sev, code, k, f"{_n(k, word + ' node', 'have')} {what}", t.ids[m], attr=attr)


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
    for code, sev, found, what in (("negative-size", ERROR, neg, "a negative size"),
                                   ("absurd-size", WARNING, absurd, "a size over 1 PiB (2**50 bytes)")):
        if found:
            m = np.logical_or.reduce([x[1] for x in found])
            by = {a: int(x.sum()) for a, x in found}
            k = int(m.sum())
            c.add(sev, code, k, f"{_n(k, 'node', 'have')} {what}: " + ", ".join(f"{a} ({v:,})" for a, v in by.items()),
                  t.ids[m], by_attr=by)


def _check_noncanonical(c: _Checker, extra: _ExtraAttrs) -> None:
    from ..schema.proto import ATTR_MEMBER_BY_FIELD

    t = c.t
    bad = ~extra.canonical
    members = extra.member
    if bad.any():
        by: dict[str, dict[str, int]] = {}
        for k, num in zip(*np.unique(np.stack([extra.name[bad], members[bad]]), axis=1)):
            mem = ATTR_MEMBER_BY_FIELD.get(int(num), "no value") if num else "no value"
            by.setdefault(_KNOWN[int(k)], {})[mem] = int(((extra.name == k) & (members == num) & bad).sum())
        rows = np.unique(extra.rows[bad])
        desc = "; ".join(f"{a} as {', '.join(f'{m} ({v:,})' for m, v in d.items())} (expected {ATTR_MEMBER[a]})"
                         for a, d in by.items())
        k = int(bad.sum())
        c.add(WARNING, "noncanonical-member", k,
              f"{_n(k, 'attribute')} of the Chakra vocabulary (on {_n(rows.size, 'node')}) "
              f"{'uses' if k == 1 else 'use'} a member other tools do not read (they read 0): {desc}",
              t.ids[rows], by_attr=by)
    # a known attribute with the right member in the extras while the column also holds it: a repeat
    if extra.rows.size:
        from ..schema.trace import COLUMN_BY_NAME

        rep = np.zeros(extra.rows.size, bool)
        for name in COLUMN_BY_NAME:
            m = extra.canonical & (extra.name == _KNOWN.index(name))
            if m.any():
                rep[m] = t.has(name)[extra.rows[m]]
        if rep.any():
            names = sorted({_KNOWN[int(k)] for k in np.unique(extra.name[rep])})
            k = int(rep.sum())
            c.add(WARNING, "duplicate-attr", k,
                  f"{_n(k, 'attribute', 'repeat')} one already on the node ({', '.join(names)}); tools may read "
                  f"either value", t.ids[extra.rows[rep]], attrs=names)


# --------------------------------------------------------------------------- cycles


def _edge_kinds(t: Trace, cycle: list[int]) -> list[str]:
    """For each step of a path of rows (each depends on the next): "data", "ctrl" or "data+ctrl"."""
    out = []
    for a, b in zip(cycle, cycle[1:]):
        dep = t.ids[b]
        k = [name for name, fn in (("data", t.data_deps), ("ctrl", t.ctrl_deps)) if (fn(a) == dep).any()]
        out.append("+".join(k))
    return out


def kahn_order(n: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """Rows in a topological order (Kahn's algorithm over CSR lists), dependencies first.
    Edges go from a dependent row `src` to its dependency row `dst`; rows on or behind a
    cycle never become ready, so the order is shorter than n when there is one."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    indeg = np.bincount(src, minlength=n)
    succ = src[np.argsort(dst, kind="stable")].tolist()
    ip = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ip[1:])
    ipl = ip.tolist()
    deg = indeg.tolist()
    stack = np.flatnonzero(indeg == 0).tolist()
    out: list[int] = []
    while stack:
        v = stack.pop()
        out.append(v)
        for k in range(ipl[v], ipl[v + 1]):
            w = succ[k]
            deg[w] -= 1
            if deg[w] == 0:
                stack.append(w)
    return out


def find_cycle(n: int, src: np.ndarray, dst: np.ndarray, ids: np.ndarray | None = None
               ) -> tuple[list[int], int] | None:
    """One dependency cycle among n rows, or None if the graph is acyclic.

    Edges are (dependent row `src`, dependency row `dst`), all resolved (no -1) and without
    self-loops. Returns (rows of one cycle, each depending on the next; number of rows that
    can never run because they are on or behind a cycle).
    """
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    if src.size == 0 or (dst < src).all():
        return None  # rows are a topological order
    if ids is not None and (ids[dst] < ids[src]).all():
        return None  # ids are a topological order
    ran = kahn_order(n, src, dst)
    if len(ran) == n:
        return None
    left = np.ones(n, bool)
    left[ran] = False
    # every remaining row has a remaining dependency: follow them until one repeats
    e = left[src] & left[dst]
    pred = np.full(n, -1, np.int64)
    s_e, d_e = src[e], dst[e]
    pred[s_e] = d_e  # any remaining dependency will do
    v = int(np.flatnonzero(left)[0])
    seen: dict[int, int] = {}
    path: list[int] = []
    while v not in seen:
        seen[v] = len(path)
        path.append(v)
        v = int(pred[v])
    return path[seen[v]:], int(left.sum())


def scc_labels(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Strongly connected component of each row (iterative Tarjan over CSR lists).

    Edges go from a dependent row `src` to its dependency row `dst`; an edge lies on a cycle
    exactly when both ends share a component.
    """
    order = np.argsort(src, kind="stable")
    adj = dst[order].tolist()
    ip = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ip[1:])
    ipl = ip.tolist()
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    label = [-1] * n
    stack: list[int] = []
    counter = comp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, ipl[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, k = work[-1]
            if k < ipl[v + 1]:
                work[-1] = (v, k + 1)
                w = adj[k]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, ipl[w]))
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    label[w] = comp
                    if w == v:
                        break
                comp += 1
    return np.asarray(label, np.int64)


def _ctrl_edges_on_cycles(trace: Trace) -> tuple[np.ndarray, int] | None:
    """Control entries that lie on a dependency cycle, when the data dependencies alone are acyclic.

    Dropping exactly these is the one repair that keeps every data dependency (what simulators
    must respect) and every control dependency not on a cycle; the result is acyclic because
    what stays inside a component is data edges only. None when there is nothing to do or
    the data dependencies are cyclic themselves (then no repair is unambiguous).
    """
    n = len(trace)
    kinds = {k: _edges(trace, k) for k in ("data", "ctrl")}
    ok = {k: ~e.missing & ~e.self_dep for k, e in kinds.items()}
    d, c = kinds["data"], kinds["ctrl"]
    src = np.concatenate([d.src[ok["data"]], c.src[ok["ctrl"]]])
    dst = np.concatenate([d.dst[ok["data"]], c.dst[ok["ctrl"]]])
    found = find_cycle(n, src, dst, trace.ids)
    if found is None or find_cycle(n, d.src[ok["data"]], d.dst[ok["data"]], trace.ids) is not None:
        return None
    labels = scc_labels(n, src, dst)
    sizes = np.bincount(labels)
    on_cycle = ok["ctrl"] & (labels[c.src] == labels[np.maximum(c.dst, 0)]) & (sizes[labels[c.src]] > 1)
    return on_cycle, found[1]


# --------------------------------------------------------------------------- repair


def fix_trace(trace: Trace) -> tuple[Trace, list[str]]:
    """A repaired copy and what changed. Only unambiguous repairs:

    - drop data/control dependencies on nodes not in the trace,
    - drop dependencies of a node on itself,
    - drop exact repeats of a dependency entry within a node,
    - when the data dependencies alone are acyclic, drop the control dependencies that lie on
      a cycle (both ends in one strongly connected component): the only choice-free way out,
    - retype host-side COMM_COLL nodes (is_cpu_op, neither comm_type nor comm_size, such as
      ``c10d::allreduce_``; the GPU node carries the collective) to COMP_NODE.

    Duplicate ids, cycles through data dependencies and invalid values are left alone (they
    stay reported).
    """
    out = trace.copy()
    changes: list[str] = []
    n = len(trace)
    for kind, word in (("data", "data"), ("ctrl", "control")):
        e = _edges(trace, kind)
        drop = e.missing | e.self_dep | e.duplicate
        if not drop.any():
            continue
        ip, flat = (kind + "_indptr", kind)
        counts = np.bincount(e.src[~drop], minlength=n)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        setattr(out, ip, indptr)
        setattr(out, flat, getattr(trace, flat)[~drop])
        miss = int(e.missing.sum())
        self_ = int((e.self_dep & ~e.missing).sum())
        dup = int((e.duplicate & ~e.missing & ~e.self_dep).sum())
        if miss:
            changes.append(f"dropped {_n(miss, f'{word} dependency', plural=f'{word} dependencies')} on "
                           f"{_n(np.unique(e.ids[e.missing]).size, 'missing node')}")
        if self_:
            changes.append(f"dropped {_n(self_, f'{word} self-dependency', plural=f'{word} self-dependencies')}")
        if dup:
            changes.append("dropped " + _n(dup, f"repeated {word} dependency entry",
                                           plural=f"repeated {word} dependency entries"))
    out._index = None
    cyclic = _ctrl_edges_on_cycles(out)
    if cyclic is not None:
        on_cycle, blocked = cyclic
        out = out.with_deps("ctrl", ~on_cycle)
        changes.append(f"dropped {_n(int(on_cycle.sum()), 'control dependency', plural='control dependencies')} "
                       f"that lie on dependency cycles (the data dependencies alone are acyclic; "
                       f"{_n(blocked, 'node')} could never run)")

    extra = _extra_attrs(trace)
    host = _host_collectives(trace, _present(trace, extra, Attr.COMM_TYPE), _present(trace, extra, Attr.COMM_SIZE))
    if host.any():
        out.types[host] = NodeType.COMP_NODE
        names = sorted(set(trace.name_array[host][:200].tolist()))
        changes.append(f"retyped {_n(int(host.sum()), 'host-side COMM_COLL node')} (is_cpu_op, neither "
                       f"comm_type nor comm_size, e.g. {', '.join(repr(x) for x in names[:3])}) to COMP_NODE")
    return out, changes


# --------------------------------------------------------------------------- workloads


def validate_workload(workload) -> Report:
    """Check every rank, then that ranks agree: collective sequences per communicator group and
    send/receive pairs."""
    issues: list[Issue] = []
    nodes = 0
    for r in workload.ranks:
        rep = validate_trace(workload.traces[r], rank=r)
        issues.extend(rep.issues)
        nodes += rep.nodes
    issues.extend(_check_groups(workload))
    issues.extend(_check_p2p(workload))
    return Report(issues, nodes=nodes, ranks=list(workload.ranks)).sort()


def _collective_seq(t: Trace, group: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(comm_type, comm_size or -1, node id) of the typed collectives a rank issues on a group."""
    from .collectives import group_rows

    m = group_rows(t, group)
    size = np.where(t.has(Attr.COMM_SIZE), t.comm_size, -1)
    return t.comm_type[m].astype(np.int64), size[m].astype(np.int64), t.ids[m]


def _bytes(size: int) -> str:
    return f"{size:,} B" if size >= 0 else "no comm_size"


def _describe(ct: int, size: int) -> str:
    return f"{collective_name(ct)} of {size:,} B" if size >= 0 else f"{collective_name(ct)} (no comm_size)"


def _rank_list(ranks: list[int]) -> str:
    s = ", ".join(str(r) for r in ranks[:10])
    more = f", … ({len(ranks) - 10} more)" if len(ranks) > 10 else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + s + more


def _check_groups(workload) -> list[Issue]:
    issues: list[Issue] = []
    label = lambda g: "the all-ranks group" if g == "" else f"group {g!r}"  # noqa: E731
    for g, members in workload.all_groups().items():
        absent = [r for r in members if r not in workload.traces]
        if absent:
            issues.append(Issue(WARNING, "group-missing-rank", len(absent),
                                f"{label(g)} lists {_rank_list(absent)} with no trace; their collectives "
                                f"are not checked", [], None, False, {"group": g, "ranks": absent}))
        if g in workload.groups:
            outside = [r for r in workload.ranks if r not in members
                       and _collective_seq(workload.traces[r], g)[0].size]
            for r in outside:
                ids = _collective_seq(workload.traces[r], g)[2]
                issues.append(Issue(ERROR, "not-in-group", int(ids.size),
                                    f"rank {r} issues {_n(int(ids.size), 'collective')} on {label(g)}, "
                                    f"which does not include it", _ids(ids), r, False, {"group": g}))
        present = [r for r in members if r in workload.traces]
        if len(present) < 2:
            continue
        seqs = {r: _collective_seq(workload.traces[r], g) for r in present}
        ref = present[0]
        rt, rs, _ = seqs[ref]
        first = None
        for r in present[1:]:
            t_, s_, _ = seqs[r]
            L = min(rt.size, t_.size)
            d = np.flatnonzero((rt[:L] != t_[:L]) | (rs[:L] != s_[:L]))
            if d.size and (first is None or d[0] < first):
                first = int(d[0])
        if first is not None:
            by: dict[str, list[int]] = {}
            ids: list[int] = []
            what = set()
            per_rank = {}
            for r in present:
                t_, s_, i_ = seqs[r]
                if first < t_.size:
                    key = _describe(int(t_[first]), int(s_[first]))
                    ids.append(int(i_[first]))
                    per_rank[r] = {"comm_type": collective_name(int(t_[first])), "comm_size": int(s_[first]),
                                   "node_id": int(i_[first])}
                    if first < rt.size:
                        if t_[first] != rt[first]:
                            what.add("comm_type")
                        if s_[first] != rs[first]:
                            what.add("comm_size")
                else:
                    key = f"nothing (only {_n(int(t_.size), 'collective')})"
                    per_rank[r] = None
                by.setdefault(key, []).append(r)
            parts = "; ".join(f"{_rank_list(rs_)}: {k}" for k, rs_ in by.items())
            issues.append(Issue(ERROR, "group-mismatch", 1,
                                f"{label(g)}: collective #{first} differs in {' and '.join(sorted(what))}: "
                                f"{parts}", ids[:SAMPLE], None, False,
                                {"group": g, "position": first, "differs": sorted(what), "ranks": per_rank}))
        lens = {r: int(seqs[r][0].size) for r in present}
        if len(set(lens.values())) > 1:
            by_len: dict[int, list[int]] = {}
            for r, k in lens.items():
                by_len.setdefault(k, []).append(r)
            parts = "; ".join(f"{_rank_list(rs_)}: {k:,}" for k, rs_ in sorted(by_len.items()))
            issues.append(Issue(ERROR, "group-count-mismatch", len(set(lens.values())),
                                f"{label(g)}: ranks issue different numbers of collectives: {parts}", [], None,
                                False, {"group": g, "lengths": {str(r): k for r, k in lens.items()}}))
    return issues


def _p2p(t: Trace, rank: int, node_type: int, peer_attr: str):
    m = (t.types == node_type) & t.has(peer_attr)
    k = int(m.sum())
    tag = np.where(t.has(Attr.COMM_TAG), t.comm_tag, 0)[m].astype(np.int64)
    size = np.where(t.has(Attr.COMM_SIZE), t.comm_size, -1)[m].astype(np.int64)
    return (np.full(k, rank, np.int64), getattr(t, peer_attr)[m].astype(np.int64), tag, size, t.ids[m],
            np.flatnonzero(m))


def _check_p2p(workload) -> list[Issue]:
    issues: list[Issue] = []
    ranks = np.array(workload.ranks, np.int64)
    sends, recvs = [], []
    for r in workload.ranks:
        t = workload.traces[r]
        sends.append(_p2p(t, r, NodeType.COMM_SEND_NODE, Attr.COMM_DST))
        recvs.append(_p2p(t, r, NodeType.COMM_RECV_NODE, Attr.COMM_SRC))
    if not sends:
        return issues
    cat = lambda parts: [np.concatenate([p[j] for p in parts]) for j in range(6)]  # noqa: E731
    s_rank, s_peer, s_tag, s_size, s_id, s_row = cat(sends)
    r_rank, r_peer, r_tag, r_size, r_id, r_row = cat(recvs)
    if not s_rank.size and not r_rank.size:
        return issues
    # peers that are not in the workload
    for name, rk, peer, ids, word in (("send", s_rank, s_peer, s_id, "to"), ("recv", r_rank, r_peer, r_id, "from")):
        bad = ~np.isin(peer, ranks) & (peer >= 0)
        for r in np.unique(rk[bad]).tolist():
            m = bad & (rk == r)
            issues.append(Issue(ERROR, "unknown-peer", int(m.sum()),
                                f"{_n(int(m.sum()), 'COMM_' + name.upper() + ' node')} {word} "
                                f"{_rank_list(np.unique(peer[m]).tolist())}, not in the workload",
                                _ids(ids[m]), r, False, {"kind": name, "peers": np.unique(peer[m]).tolist()[:SAMPLE]}))
    # match in order per (src, dst, tag): the k-th send with a key pairs with the k-th receive
    s_ok = np.isin(s_peer, ranks)
    r_ok = np.isin(r_peer, ranks)
    S = (s_rank[s_ok], s_peer[s_ok], s_tag[s_ok], s_size[s_ok], s_id[s_ok], s_row[s_ok])
    R = (r_peer[r_ok], r_rank[r_ok], r_tag[r_ok], r_size[r_ok], r_id[r_ok], r_row[r_ok])  # as (src, dst, ...)

    def nth(src, dst, tag, row):
        o = np.lexsort((row, tag, dst, src))
        k = np.zeros(src.size, np.int64)
        if src.size:
            so, do, to = src[o], dst[o], tag[o]
            new = np.ones(src.size, bool)
            new[1:] = (so[1:] != so[:-1]) | (do[1:] != do[:-1]) | (to[1:] != to[:-1])
            start = np.maximum.accumulate(np.where(new, np.arange(src.size), 0))
            k[o] = np.arange(src.size) - start
        return k

    ks = nth(S[0], S[1], S[2], S[5])
    kr = nth(R[0], R[1], R[2], R[5])
    ns, nr = S[0].size, R[0].size
    key = [np.concatenate([a, b]) for a, b in zip((S[0], S[1], S[2], ks), (R[0], R[1], R[2], kr))]
    kind = np.concatenate([np.zeros(ns, np.int8), np.ones(nr, np.int8)])
    o = np.lexsort((kind, key[3], key[2], key[1], key[0]))
    same = np.ones(max(o.size - 1, 0), bool)
    for a in key:
        same &= a[o][1:] == a[o][:-1]
    pair = same & (kind[o][:-1] == 0) & (kind[o][1:] == 1)
    matched = np.zeros(ns + nr, bool)
    matched[o[:-1][pair]] = True
    matched[o[1:][pair]] = True
    sm, rm = matched[:ns], matched[ns:]
    # sizes of matched pairs
    ps, pr = o[:-1][pair], o[1:][pair] - ns
    diff = S[3][ps] != R[3][pr]
    if diff.any():
        ex = [f"rank {int(S[0][a])} → {int(S[1][a])} tag {int(S[2][a])}: send {_bytes(int(S[3][a]))} (node "
              f"{int(S[4][a])}), recv {_bytes(int(R[3][b]))} (node {int(R[4][b])})"
              for a, b in zip(ps[diff][:3], pr[diff][:3])]
        issues.append(Issue(ERROR, "p2p-size-mismatch", int(diff.sum()),
                            f"{_n(int(diff.sum()), 'send/receive pair', 'disagree')} on comm_size: "
                            + "; ".join(ex), _ids(S[4][ps[diff]]), None, False,
                            {"pairs": [{"src": int(S[0][a]), "dst": int(S[1][a]), "tag": int(S[2][a]),
                                        "send_node": int(S[4][a]), "recv_node": int(R[4][b]),
                                        "send_size": int(S[3][a]), "recv_size": int(R[3][b])}
                                       for a, b in zip(ps[diff][:SAMPLE], pr[diff][:SAMPLE])]}))
    for code, X, m, own, word, other in (("unmatched-send", S, ~sm, 0, "COMM_SEND", "receive"),
                                         ("unmatched-recv", R, ~rm, 1, "COMM_RECV", "send")):
        for r in np.unique(X[own][m]).tolist():
            mr = m & (X[own] == r)
            chans = np.unique(np.stack([X[1 - own][mr], X[2][mr]]), axis=1)
            desc = []
            for peer, tag in chans.T[:3].tolist():
                k = int((mr & (X[1 - own] == peer) & (X[2] == tag)).sum())
                desc.append(f"{k:,} {'to' if own == 0 else 'from'} rank {peer} tag {tag}")
            more = f", … ({chans.shape[1] - 3} more channels)" if chans.shape[1] > 3 else ""
            issues.append(Issue(ERROR, code, int(mr.sum()),
                                f"{_n(int(mr.sum()), word + ' node', 'have')} no matching {other} "
                                f"(matched in order per source, destination and tag): {'; '.join(desc)}{more}",
                                _ids(X[4][mr]), r, False,
                                {"channels": [{"peer": int(p), "tag": int(tg)}
                                              for p, tg in chans.T[:SAMPLE].tolist()]}))
    return issues


__all__ = ["Issue", "Report", "validate_trace", "validate_workload", "fix_trace", "find_cycle", "SAMPLE",
           "ABSURD_BYTES"]
