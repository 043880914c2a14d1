"""Timelines of a workload for Perfetto (https://ui.perfetto.dev) and chrome://tracing.

One core, `build_timeline`, lays every timed node out as a slice: a process per rank (or
simulated NPU) and a track per thread, GPU stream or resource, and links the members of each
collective instance, and each send with its receive, by flows. `timeline()` formats it as
Chrome Trace Event JSON (times in µs, as that format requires), the one export: `chakra
timeline` writes it and the HTML report embeds it (its canvas draws from it and its download
button saves it). Everything per node is computed with numpy; Python touches a node only to
build its output record.

Perfetto wants the slices of one track properly nested (two slices either disjoint or one
inside the other), so slices that partially overlap on a track (recorded times are rounded
to whole µs; concurrent receives) are spread over extra lanes ("cpu #2", ...).
"""

from __future__ import annotations

import gc
import heapq
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..document import compact_json
from ..errors import ChakraError
from ..io.et import atomic_output
from ..io.workload import Workload
from ..schema.enums import Attr, NodeType, collective_name, node_type_name
from ..schema.groups import rows_by_group
from ..schema.resources import KIND_NAMES
from ..schema.trace import Trace
from ..table import Table, Tabular
from ..timeline.clock import rank_offsets_ns
from ..timeline.matching import p2p_rows, pair_p2p

__all__ = ["Timeline", "assign_lanes", "build_timeline", "timeline", "timeline_json", "write_timeline"]

RESOURCES = KIND_NAMES  # the tracks of a rank without threads or streams: the simulator's resources
COMPUTE, CPU, COMM, OTHER = range(4)
ALIGN = ("auto", "origin", "collectives", "none")
# track classes, in display order within a process
THREAD, STREAM, RESOURCE = range(3)
NEST_LANES = 8  # lanes that keep nesting; past them, lanes hold disjoint slices (bounded work)
_COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


@dataclass
class Timeline(Tabular):
    """Slices, tracks and flows of one timeline, as arrays (times in ns).

    Per slice (sorted by track, start, longest first): ``track`` (index into ``tracks``),
    ``start_ns``, ``dur_ns``, ``name`` (into ``names``), ``kind`` (into ``kinds``, the Chrome
    category "type,resource"), ``node_id``/``node_type`` (-1 unknown), ``row`` (trace row),
    ``comm_type``/``comm_bytes``/``group`` (-1 / into ``groups`` for collectives, sends and
    receives). Per flow edge (sorted by ``flow_id``; the edges of one id share their source):
    ``flow_src``/``flow_dst`` (slice indices), ``flow_src_ns``/``flow_dst_ns`` (points inside
    those slices), ``flow_name`` (into ``names``), ``flow_cat`` (0 collective, 1 send/recv).
    """

    source: str
    tracks: list[dict]
    names: list[str]
    kinds: list[str]
    groups: list[str]
    track: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    node_id: np.ndarray
    node_type: np.ndarray
    row: np.ndarray
    comm_type: np.ndarray
    comm_bytes: np.ndarray
    group: np.ndarray
    flow_id: np.ndarray
    flow_src: np.ndarray
    flow_dst: np.ndarray
    flow_src_ns: np.ndarray
    flow_dst_ns: np.ndarray
    flow_name: np.ndarray
    flow_cat: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.track.size)

    # ------------------------------------------------------------------ formats
    def to_chrome(self) -> dict[str, Any]:
        """Chrome Trace Event JSON: "M" metadata naming processes and tracks, an "X" event
        per slice, "s"/"f" flow events (``bp: "e"``: bound to the enclosing slice)."""
        with _no_gc():
            return self._chrome()

    def _chrome(self) -> dict[str, Any]:
        events: list[dict] = []
        procs: dict[int, str] = {}
        for tr in self.tracks:
            procs.setdefault(tr["pid"], tr["process"])
        for pid, pname in procs.items():
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for i, tr in enumerate(self.tracks):
            events.append(
                {"ph": "M", "name": "thread_name", "pid": tr["pid"], "tid": tr["tid"], "args": {"name": tr["name"]}}
            )
            events.append(
                {"ph": "M", "name": "thread_sort_index", "pid": tr["pid"], "tid": tr["tid"], "args": {"sort_index": i}}
            )
        pids = np.array([tr["pid"] for tr in self.tracks], np.int64)
        tids = np.array([tr["tid"] for tr in self.tracks], np.int64)
        names = np.asarray(self.names, dtype=object)
        kinds = np.asarray(self.kinds, dtype=object)
        types, inv = np.unique(self.node_type, return_inverse=True)
        tnames = np.asarray([node_type_name(v) for v in types.tolist()], dtype=object)[inv.reshape(-1)]
        args = [
            {"node_id": i, "type": ty} if i >= 0 else {"row": r}
            for i, ty, r in zip(self.node_id.tolist(), tnames.tolist(), self.row.tolist())
        ]
        comm = np.flatnonzero(self.comm_bytes >= 0)
        groups = np.asarray(self.groups + [""], dtype=object)
        for j, ct, b, g, ty in zip(
            comm.tolist(),
            self.comm_type[comm].tolist(),
            self.comm_bytes[comm].tolist(),
            groups[self.group[comm]].tolist(),
            self.node_type[comm].tolist(),
        ):
            a = args[j]
            if ty == NodeType.COMM_COLL_NODE:
                a["comm_type"] = collective_name(ct) if ct >= 0 else None
                a["group"] = g or "all"
            a["bytes"] = b
        events.extend(
            {"ph": "X", "pid": p, "tid": t, "ts": s, "dur": d, "name": n, "cat": c, "args": a}
            for p, t, s, d, n, c, a in zip(
                pids[self.track].tolist(),
                tids[self.track].tolist(),
                _us(self.start_ns),
                _us(self.dur_ns),
                names[self.name].tolist(),
                kinds[self.kind].tolist(),
                args,
            )
        )
        if self.flow_id.size:
            first = np.flatnonzero(np.r_[True, self.flow_id[1:] != self.flow_id[:-1]])
            cats = np.array(["collective", "p2p"], dtype=object)
            src_tr, dst_tr = self.track[self.flow_src], self.track[self.flow_dst]
            events.extend(
                {"ph": "s", "id": i, "pid": p, "tid": t, "ts": s, "name": n, "cat": c}
                for i, p, t, s, n, c in zip(
                    self.flow_id[first].tolist(),
                    pids[src_tr[first]].tolist(),
                    tids[src_tr[first]].tolist(),
                    _us(self.flow_src_ns[first]),
                    names[self.flow_name[first]].tolist(),
                    cats[self.flow_cat[first]].tolist(),
                )
            )
            events.extend(
                {"ph": "f", "bp": "e", "id": i, "pid": p, "tid": t, "ts": s, "name": n, "cat": c}
                for i, p, t, s, n, c in zip(
                    self.flow_id.tolist(),
                    pids[dst_tr].tolist(),
                    tids[dst_tr].tolist(),
                    _us(self.flow_dst_ns),
                    names[self.flow_name].tolist(),
                    cats[self.flow_cat].tolist(),
                )
            )
        return {"traceEvents": events, "displayTimeUnit": "ns", "metadata": dict(self.metadata)}

    def to_table(self) -> Table:
        """One row per slice: pid, track, ts_us, dur_us, name, kind, node_id."""
        pids = np.array([tr["pid"] for tr in self.tracks], np.int64)
        tnames = np.asarray([tr["name"] for tr in self.tracks], dtype=object)
        return Table(
            {
                "pid": pids[self.track] if self.tracks else np.zeros(0, np.int64),
                "track": tnames[self.track] if self.tracks else np.zeros(0, object),
                "ts_us": self.start_ns / 1000,
                "dur_us": self.dur_ns / 1000,
                "name": np.asarray(self.names, dtype=object)[self.name],
                "kind": np.asarray(self.kinds, dtype=object)[self.kind],
                "node_id": self.node_id,
            },
            title="timeline slices",
        )


@contextmanager
def _no_gc():
    """Millions of new dicts and lists trigger the cycle collector over and over (about
    3x the build time); none of them form cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _us(ns: np.ndarray) -> list:
    """ns -> µs values for JSON: integers when exact (Perfetto reads those without rounding)."""
    ns = np.asarray(ns, np.int64)
    if not (ns % 1000).any():
        return (ns // 1000).tolist()
    return (ns / 1000).tolist()


# ---------------------------------------------------------------------- public entry points
def timeline(
    workload, result=None, *, align: str = "auto", flows: bool = True, max_events: int | None = None
) -> dict[str, Any]:
    """Chrome Trace Event JSON of a recorded workload (``result`` None) or of a simulation
    (``result`` a `SimResult`; ``workload`` may then be None). See `build_timeline`."""
    return build_timeline(workload, result, align=align, flows=flows, max_events=max_events).to_chrome()


def timeline_json(doc: dict) -> bytes:
    """A timeline document as the bytes of its file: compact JSON (what `write_timeline` writes
    and the report's download button saves)."""
    return compact_json(doc)


def write_timeline(doc: dict, path: str | os.PathLike) -> Path:
    """Write a timeline document atomically as compact JSON (gzip when the name ends in .gz)."""

    path = Path(path)
    with atomic_output(path) as f:
        f.write(timeline_json(doc))
    return path


def build_timeline(
    workload, result=None, *, align: str = "auto", flows: bool = True, max_events: int | None = None
) -> Timeline:
    """Lay out a workload's timeline.

    Recorded (``result`` None): every node with a duration, at its recorded start plus its
    rank's clock offset (`timeline.clock.rank_offsets_ns` with ``align``); a track per thread
    (``tid``) or GPU stream (``stream``) where the trace names one, else per resource.
    Simulated: every node the simulator ran, at its simulated time; a track per resource.
    ``max_events`` keeps only the longest slices (said in ``metadata``)."""
    if isinstance(workload, Trace):
        workload = Workload({0: workload})
    if workload is None and result is None:
        raise ChakraError("timeline: give a workload, a simulation result, or both")
    if align not in ALIGN:
        raise ChakraError(f"timeline: align must be one of {', '.join(ALIGN)}, not {align!r}")
    if max_events is not None and max_events < 0:
        raise ChakraError(f"timeline: max_events must be >= 0, not {max_events}")
    with _no_gc():
        if result is None:
            parts, meta = _recorded_parts(workload, align)
        else:
            parts, meta = _simulated_parts(workload, result)
        return _assemble(parts, meta, flows=flows, max_events=max_events)


# ---------------------------------------------------------------------- per-trace columns
class _Static:
    """What the timeline needs of one trace, computed once however many ranks share it."""

    def __init__(self, t: Trace, names: _Strings):
        n = len(t)
        self.trace = t
        types = t.types
        cpu = t.has(Attr.IS_CPU_OP) & t.is_cpu_op
        comp = types == NodeType.COMP_NODE
        res = np.full(n, OTHER, np.int64)
        res[comp & ~cpu] = COMPUTE
        res[comp & cpu] = CPU
        res[np.isin(types, _COMM_TYPES)] = COMM
        self.resource = res
        self.types = types.astype(np.int64)
        self.ids = t.ids.astype(np.int64)
        self.name = names.codes(t.names)[t.name_codes] if n else np.zeros(0, np.int64)
        is_comm = np.isin(types, _COMM_TYPES)
        self.comm_type = np.where((types == NodeType.COMM_COLL_NODE) & t.has(Attr.COMM_TYPE), t.comm_type, -1).astype(
            np.int64
        )
        self.comm_bytes = np.where(is_comm, np.where(t.has(Attr.COMM_SIZE), t.comm_size, 0), -1).astype(np.int64)
        self.pg = np.where(t.has(Attr.PG_NAME), t.pg_name, -1).astype(np.int64)
        self._tracks: tuple[np.ndarray, list[tuple[int, int, int]]] | None = None

    def recorded_tracks(self) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """Per row a code into a table of track keys (class, a, b): thread (tid), stream
        (device or -1, stream) or resource."""
        if self._tracks is None:
            t, n = self.trace, len(self.trace)
            key = np.zeros((n, 3), np.int64)
            key[:, 0] = RESOURCE
            key[:, 1] = self.resource
            tid, has_tid = _int_attr(t, Attr.TID)
            stream, has_stream = _int_attr(t, Attr.STREAM)
            if has_stream.any():
                device, has_dev = _int_attr(t, "device")
            else:
                device, has_dev = np.zeros(n, np.int64), np.zeros(n, bool)
            th = has_tid & ~has_stream
            key[th, 0], key[th, 1] = THREAD, tid[th]
            key[has_stream, 0] = STREAM
            key[has_stream, 1] = np.where(has_dev, device, -1)[has_stream]
            key[has_stream, 2] = stream[has_stream]
            code, first = _factorize([key[:, 0], key[:, 1], key[:, 2]])
            self._tracks = (code, [tuple(x) for x in key[first].tolist()])
        return self._tracks


def _int_attr(t: Trace, name: str) -> tuple[np.ndarray, np.ndarray]:
    n = len(t)
    if not t.extra.size:
        return np.zeros(n, np.int64), np.zeros(n, bool)
    try:
        vals, present = t.attr_array(name, np.int64)
    except (TypeError, ValueError):  # not an integer attribute here: not a thread or stream id
        return np.zeros(n, np.int64), np.zeros(n, bool)
    return np.asarray(vals, np.int64), np.asarray(present, bool)


def _factorize(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes of rows by several integer columns (lexicographic order), and a row of
    each code: 1-D sorts only (a 2-D unique sorts whole rows, far slower)."""
    n = cols[0].size
    code = np.zeros(n, np.int64)
    for c in cols:
        values, inv = np.unique(c, return_inverse=True)
        _, code = np.unique(code * values.size + inv.reshape(-1), return_inverse=True)
        code = code.reshape(-1)
    first = np.zeros(int(code.max()) + 1 if n else 0, np.int64)
    first[code[::-1]] = np.arange(n)[::-1]
    return code, first


class _Strings:
    """One string table for the whole timeline."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.cache: dict[int, tuple[Any, np.ndarray]] = {}  # keeps the table alive so its id stays its own

    def code(self, s: str) -> int:
        return self.index.setdefault(s, len(self.index))

    def codes(self, table) -> np.ndarray:
        key = id(table)
        if key not in self.cache:
            self.cache[key] = (table, np.array([self.code(str(s)) for s in table], np.int64))
        return self.cache[key][1]

    @property
    def table(self) -> list[str]:
        return list(self.index)


@dataclass
class _Part:
    """The slices of one process (rank or NPU)."""

    pid: int
    rows: np.ndarray
    start: np.ndarray  # ns
    dur: np.ndarray  # ns
    resource: np.ndarray
    track_code: np.ndarray  # per slice, into track_table
    track_table: list[tuple[int, int, int]]  # (class, a, b) track keys
    name: np.ndarray
    static: _Static | None
    order: np.ndarray | None = None  # simulated: rows by issue time (instance numbering)


@dataclass
class _Parts:
    source: str
    process: str  # "rank" or "NPU"
    strings: _Strings
    parts: list[_Part]


def _recorded_parts(workload: Workload, align: str) -> tuple[_Parts, dict]:

    try:
        offsets = rank_offsets_ns(workload, align)
    except ValueError as e:
        raise ChakraError(f"timeline: cannot align ranks with align={align!r}: {e}") from None
    strings = _Strings()
    statics: dict[int, _Static] = {}
    parts, untimed = [], []
    for r in workload.ranks:
        t = workload.traces[r]
        st = statics.get(id(t))
        if st is None:
            st = statics[id(t)] = _Static(t, strings)
        rows = np.flatnonzero(t.duration > 0)
        if not t.timed:  # durations but no start times: nothing to lay out
            untimed.append(r)
            rows = rows[:0]
        start = t.start[rows].astype(np.int64) * 1000 + int(offsets.get(r, 0))
        code, table = st.recorded_tracks()
        parts.append(
            _Part(
                r,
                rows,
                start,
                t.duration[rows].astype(np.int64) * 1000,
                st.resource[rows],
                code[rows],
                table,
                st.name[rows],
                st,
            )
        )
    meta: dict[str, Any] = {
        "source": "recorded",
        "align": align,
        "offsets_ns": {str(r): int(o) for r, o in offsets.items()},
    }
    if untimed:
        meta["untimed_ranks"] = untimed
        meta["warnings"] = [
            f"rank(s) {_short(untimed)} record durations but no start times (every node at 0): "
            "left out; `chakra simulate --timeline` lays such a workload out"
        ]
    return _Parts("recorded", "rank", strings, parts), meta


def _short(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)})" if len(ranks) > 8 else "")


def _simulated_parts(workload: Workload | None, result) -> tuple[_Parts, dict]:
    strings = _Strings()
    statics: dict[int, _Static] = {}
    sim_traces = getattr(result, "traces", None) or {}
    wl = workload.traces if workload is not None else {}
    single = wl.get(0) if len(wl) == 1 else None  # one trace for many NPUs: every NPU ran it
    parts = []
    for npu in sorted(result.nodes):
        start, end, kind = result.nodes[npu]
        t = sim_traces.get(npu)
        if t is None:
            t = wl.get(npu, single)
        if t is not None and len(t) != len(start):
            t = None
        rows = np.flatnonzero(end >= 0)
        res = np.asarray(kind, np.int64)[rows]
        st = None
        if t is not None:
            st = statics.get(id(t))
            if st is None:
                st = statics[id(t)] = _Static(t, strings)
            res = np.where(st.types[rows] == NodeType.COMM_RECV_NODE, COMM, res)  # a receive is communication
            name = st.name[rows]
        elif result.names.get(npu) is not None:
            table, inv = np.unique(np.asarray(result.names[npu], dtype=object).astype(str), return_inverse=True)
            name = strings.codes(list(table))[inv.reshape(-1)][rows]
        else:
            name = np.array([strings.code(str(r)) for r in rows.tolist()], np.int64)
        s = np.asarray(start, np.int64)
        order = np.lexsort((np.arange(s.size), np.where(end >= 0, s, np.iinfo(np.int64).max)))
        parts.append(
            _Part(
                int(npu),
                rows,
                s[rows],
                (np.asarray(end, np.int64) - s)[rows],
                res,
                res,
                [(RESOURCE, k, 0) for k in range(len(RESOURCES))],
                name,
                st,
                order,
            )
        )
    return _Parts("simulated", "NPU", strings, parts), {"source": "simulated", "mode": getattr(result, "mode", "")}


# ---------------------------------------------------------------------- assembly
def _assemble(P: _Parts, meta: dict, *, flows: bool, max_events: int | None) -> Timeline:
    parts = P.parts
    sizes = np.array([p.rows.size for p in parts], np.int64)
    total = int(sizes.sum())

    def cat(f):
        return np.concatenate([f(p) for p in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)

    part_of = np.repeat(np.arange(len(parts)), sizes)
    rows, start, dur = cat(lambda p: p.rows), cat(lambda p: p.start), cat(lambda p: p.dur)
    resource, name = cat(lambda p: p.resource), cat(lambda p: p.name)
    # base tracks (pid, class, a, b) in sorted order; each part's codes map onto them
    table = sorted({(p.pid, *k) for p in parts for k in p.track_table})
    where = {k: i for i, k in enumerate(table)}
    base_all = cat(
        lambda p: (
            # tuple(): mypy takes `*` in a subscript for 3.11 syntax, even in parentheses
            np.array([where[tuple((p.pid, *k))] for k in p.track_table], np.int64)[p.track_code]
            if p.track_code.size
            else np.zeros(0, np.int64)
        )
    )

    def per_static(attr, missing=-1):
        return cat(
            lambda p: (
                getattr(p.static, attr)[p.rows] if p.static is not None else np.full(p.rows.size, missing, np.int64)
            )
        )

    node_id, ntype = per_static("ids"), per_static("types")
    comm_type, comm_bytes, pg = per_static("comm_type"), per_static("comm_bytes"), per_static("pg")

    keep = np.arange(total)
    if max_events is not None and total > max_events:
        keep = np.sort(np.argsort(-dur, kind="stable")[:max_events])
        meta["capped"] = True
        meta["note"] = f"kept the {max_events:,} longest of {total:,} slices (max_events)"
    meta["slices"], meta["kept"] = total, int(keep.size)

    # slices by base track, start, longest first; then lanes
    base = base_all[keep]
    s, e = start[keep], start[keep] + dur[keep]
    order = np.lexsort((keep, -e, s, base))
    keep, base, s, e = keep[order], base[order], s[order], e[order]
    lane = _lanes_sorted(base, s, e, resource[keep] == COMM)  # communication: flow endpoints
    width = int(lane.max()) + 1 if lane.size else 1
    final, track = np.unique(base * width + lane, return_inverse=True)
    track = track.reshape(-1)
    order = np.lexsort((np.arange(keep.size), -e, s, track))  # lanes of a base track follow it
    keep, track, s, e = keep[order], track[order], s[order], e[order]

    tracks = []
    for i, (b, ln) in enumerate(zip((final // width).tolist(), (final % width).tolist())):
        p, cls, a, bb = table[b]
        label = _track_name(cls, a, bb)
        tracks.append(
            {"pid": p, "tid": i + 1, "name": label if ln == 0 else f"{label} #{ln + 1}", "process": f"{P.process} {p}"}
        )

    # categories: "type,resource" (resource alone when the node type is unknown)
    kt = ntype[keep]
    kvals, kind = np.unique((np.maximum(kt, -1) + 1) * 4 + resource[keep], return_inverse=True)
    kinds = [RESOURCES[v % 4] if v < 4 else f"{_short_type(v // 4 - 1)},{RESOURCES[v % 4]}" for v in kvals.tolist()]

    groups = sorted({g for p in parts if p.static is not None for g in p.static.trace.groups})
    gidx = _group_map(parts, groups)
    group = np.full(keep.size, len(groups), np.int64)  # -> "" in to_chrome's table
    if keep.size:
        src_part = part_of[keep]
        pgk = pg[keep]
        has = pgk >= 0
        group[has] = gidx[src_part[has], pgk[has]]

    tl = Timeline(
        P.source,
        tracks,
        [],
        kinds,
        groups,
        track,
        s,
        e - s,
        name[keep],
        kind.reshape(-1).astype(np.int64),
        node_id[keep],
        ntype[keep],
        rows[keep],
        comm_type[keep],
        comm_bytes[keep],
        group,
        np.zeros(0, np.int64),  # flow_id
        np.zeros(0, np.int64),  # flow_src
        np.zeros(0, np.int64),  # flow_dst
        np.zeros(0, np.int64),  # flow_src_ns
        np.zeros(0, np.int64),  # flow_dst_ns
        np.zeros(0, np.int64),  # flow_name
        np.zeros(0, np.int64),  # flow_cat
        metadata=meta,
    )
    if flows and keep.size:
        _add_flows(tl, P, part_of[keep])
    tl.names = P.strings.table
    meta["flows"] = int(np.unique(tl.flow_id).size)
    return tl


def _group_map(parts: list[_Part], groups: list[str]) -> np.ndarray:
    """(part, local pg code) -> index into `groups`."""
    width = max([len(p.static.trace.groups) for p in parts if p.static is not None] + [1])
    out = np.full((len(parts), width), len(groups), np.int64)
    pos = {g: i for i, g in enumerate(groups)}
    for i, p in enumerate(parts):
        if p.static is not None:
            for c, g in enumerate(p.static.trace.groups):
                out[i, c] = pos[g]
    return out


def _short_type(t: int) -> str:
    name = node_type_name(t)
    return name[:-5].lower() if name.endswith("_NODE") else name.lower()


def _track_name(cls: int, a: int, b: int) -> str:
    if cls == THREAD:
        return f"thread {a}"
    if cls == STREAM:
        return f"stream {b}" if a < 0 else f"device {a} stream {b}"
    return RESOURCES[a] if 0 <= a < len(RESOURCES) else f"resource {a}"


# ---------------------------------------------------------------------- lanes
def assign_lanes(start, end, track=None, pinned=None) -> np.ndarray:
    """Lane of each interval (input order) so that the intervals of one (track, lane) are
    properly nested: any two are disjoint or one contains the other. A ``pinned`` interval
    (a flow endpoint) gets no child that starts when it starts, so a point just inside it is
    inside it alone. Deterministic; lane 0 whenever a track has no overlap at all."""
    s, e = np.asarray(start, np.int64), np.asarray(end, np.int64)
    tr = np.zeros(s.size, np.int64) if track is None else np.asarray(track, np.int64)
    pin = np.zeros(s.size, bool) if pinned is None else np.asarray(pinned, bool)
    order = np.lexsort((np.arange(s.size), -e, s, tr))
    out = np.empty(s.size, np.int64)
    out[order] = _lanes_sorted(tr[order], s[order], e[order], pin[order])
    return out


def _lanes_sorted(track: np.ndarray, s: np.ndarray, e: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """Lanes of intervals sorted by (track, start, end descending): one sorted pass per track
    that has an overlap; tracks without any stay on lane 0 (vectorized check)."""
    n = s.size
    lanes = np.zeros(n, np.int64)
    if n < 2:
        return lanes
    bounds = np.r_[0, np.flatnonzero(track[1:] != track[:-1]) + 1, n]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if b - a < 2:
            continue
        reach = np.maximum.accumulate(e[a : b - 1])
        if (s[a + 1 : b] >= reach).all():
            continue  # nothing overlaps
        lanes[a:b] = _greedy(s[a:b].tolist(), e[a:b].tolist(), pinned[a:b].tolist())
    return lanes


def _greedy(s: list[int], e: list[int], pinned: list[bool]) -> list[int]:
    """First fit over NEST_LANES lanes that keep nesting (a stack of open intervals each);
    past those, lanes of disjoint intervals taken lowest free first (heaps): O(n log n)."""
    out = [0] * len(s)
    stacks: list[list[tuple[int, int, bool]]] = []  # open (end, start, pinned), innermost last
    busy: list[tuple[int, int]] = []  # (end, overflow lane)
    free: list[int] = []
    opened = 0
    for i, (si, ei, pi) in enumerate(zip(s, e, pinned)):
        for lane, st in enumerate(stacks):
            while st and st[-1][0] <= si:
                st.pop()
            if not st or (ei <= st[-1][0] and not (st[-1][2] and st[-1][1] == si < ei)):
                st.append((ei, si, pi))
                out[i] = lane
                break
        else:
            if len(stacks) < NEST_LANES:
                stacks.append([(ei, si, pi)])
                out[i] = len(stacks) - 1
                continue
            while busy and busy[0][0] <= si:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, opened = opened, opened + 1
            heapq.heappush(busy, (ei, lane))
            out[i] = NEST_LANES + lane
    return out


# ---------------------------------------------------------------------- flows
def _add_flows(tl: Timeline, P: _Parts, ev_part: np.ndarray) -> None:
    """Collective instances (k-th collective of a group on each member) and send -> receive
    pairs (k-th of each (src, dst, tag)), as flow edges between their slices."""
    parts = P.parts
    n = len(tl)
    # slice of each (part, row): sorted keys for lookup
    max_row = int(max([p.static.ids.size for p in parts if p.static is not None] + [int(tl.row.max()) + 1]))
    ev_key = ev_part * (max_row + 1) + tl.row
    key_order = np.argsort(ev_key, kind="stable")
    sorted_keys = ev_key[key_order]

    def slice_of(part_idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        k = part_idx * (max_row + 1) + rows
        pos = np.minimum(np.searchsorted(sorted_keys, k), max(n - 1, 0))
        return np.where(sorted_keys[pos] == k, key_order[pos], -1) if n else np.full(k.shape, -1)

    # a point inside each slice but before its first child that starts later (Perfetto binds a
    # flow to the deepest slice open at its time; instants at the slice's start have closed by then)
    s, e, tr = tl.start_ns, tl.start_ns + tl.dur_ns, tl.track
    change = np.r_[np.flatnonzero((tr[1:] != tr[:-1]) | (s[1:] != s[:-1])) + 1, n]
    later = change[np.searchsorted(change, np.arange(n), side="right")]  # next slice starting after this one
    nxt = np.where(
        (later < n) & (tr[np.minimum(later, n - 1)] == tr), s[np.minimum(later, n - 1)], np.iinfo(np.int64).max
    )
    gap_hi = np.where(nxt < e, nxt, e)

    edges = []  # (flow id, src slice, dst slice, name, cat) arrays; ids are made unique below
    coll = _collective_members(P)
    if coll is not None:
        part_idx, rows, gcode, k, gnames = coll
        ev = slice_of(part_idx, rows)
        ok = ev >= 0
        ev, gcode, k = ev[ok], gcode[ok], k[ok]
        order = np.lexsort((ev_part[ev], s[ev], k, gcode))  # the earliest member is the source
        ev, gcode, k = ev[order], gcode[order], k[order]
        inst = np.cumsum(np.r_[True, (gcode[1:] != gcode[:-1]) | (k[1:] != k[:-1])]) - 1
        starts = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
        member = np.r_[False, inst[1:] == inst[:-1]]  # every member but the source
        if member.any():
            fid = inst[member]
            used = np.unique(fid)
            first = ev[starts[used]]
            labels = [
                f"{gnames[g] or 'all'}#{kk} {collective_name(ct) if ct >= 0 else 'collective'}"
                for g, kk, ct in zip(
                    gcode[starts[used]].tolist(), k[starts[used]].tolist(), tl.comm_type[first].tolist()
                )
            ]
            codes = np.array([P.strings.code(x) for x in labels], np.int64)
            pos = np.searchsorted(used, fid)
            edges.append((fid, ev[starts[fid]], ev[member], codes[pos], np.zeros(fid.size, np.int64)))
    p2p = _p2p_pairs(P)
    if p2p is not None:
        (sp, sr), (rp, rr), (triples, which) = p2p
        se, re = slice_of(sp, sr), slice_of(rp, rr)
        ok = (se >= 0) & (re >= 0)
        codes = np.array([P.strings.code(f"send {a}->{b} tag {c}") for a, b, c in triples.tolist()], np.int64)
        edges.append((np.flatnonzero(ok), se[ok], re[ok], codes[which[ok]], np.ones(int(ok.sum()), np.int64)))
    edges = [x for x in edges if x[0].size]
    if not edges:
        return
    base, ids = 0, []
    for x in edges:
        ids.append(x[0] + base)
        base += int(x[0].max()) + 1
    fid = np.concatenate(ids)
    src, dst, fname, fcat = (np.concatenate([x[i] for x in edges]).astype(np.int64) for i in range(1, 5))
    # targets: middle of the slice's free part after the source starts; source: before all of them
    lo = np.maximum(s[dst], s[src])
    hi = np.where(gap_hi[dst] > lo, gap_hi[dst], e[dst])
    good = hi > lo
    fid, src, dst, fname, fcat, lo, hi = (x[good] for x in (fid, src, dst, fname, fcat, lo, hi))
    if not fid.size:
        return
    dst_ns = lo + (hi - lo) // 2
    first = np.flatnonzero(np.r_[True, fid[1:] != fid[:-1]])
    earliest = np.minimum.reduceat(dst_ns, first)
    a = src[first]
    room = np.minimum(np.maximum(gap_hi[a], s[a] + 1), earliest) - s[a]
    src_ns = np.repeat(s[a] + np.maximum(room, 0) // 2, np.diff(np.r_[first, fid.size]))
    _, fid = np.unique(fid, return_inverse=True)  # dense ids 0..flows-1
    tl.flow_id, tl.flow_src, tl.flow_dst = fid.reshape(-1), src, dst
    tl.flow_src_ns, tl.flow_dst_ns, tl.flow_name, tl.flow_cat = src_ns, dst_ns, fname, fcat


def _collective_members(P: _Parts):
    """(part index, row, group code, instance k, group names) of every typed collective."""

    names: set[str] = set()
    for p in P.parts:
        if p.static is None:
            continue
        t = p.static.trace
        typed = (t.types == NodeType.COMM_COLL_NODE) & t.has(Attr.COMM_TYPE)
        has_pg = t.has(Attr.PG_NAME)
        names.update(t.groups[c] for c in np.unique(t.pg_name[typed & has_pg]).tolist())
        if (typed & ~has_pg).any():
            names.add("")
    if not names:
        return None
    gnames = sorted(names)
    gindex = {g: gi for gi, g in enumerate(gnames)}
    cache: dict[int, dict[str, np.ndarray]] = {}  # `rows_by_group` per trace: a pass per group is groups x nodes
    out: list[list[np.ndarray]] = [[], [], [], []]
    for i, p in enumerate(P.parts):
        if p.static is None:
            continue
        t = p.static.trace
        by_group = cache.get(id(t))
        if by_group is None:
            by_group = cache[id(t)] = rows_by_group(t)
        parts = sorted(((gindex[g], r) for g, r in by_group.items() if g in gindex and r.size), key=lambda x: x[0])
        if not parts:
            continue
        lens = np.array([r.size for _, r in parts], np.int64)
        rows = np.concatenate([r for _, r in parts]).astype(np.int64)
        gi = np.repeat(np.array([g for g, _ in parts], np.int64), lens)
        if p.order is not None:  # simulated: the simulator numbers instances in issue order
            rank = np.empty(p.order.size, np.int64)
            rank[p.order] = np.arange(p.order.size)
            rows = rows[np.lexsort((rank[rows], gi))]
        out[0].append(np.full(rows.size, i, np.int64))
        out[1].append(rows)
        out[2].append(gi)
        out[3].append(np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens))
    if not out[0]:
        return None
    return (*(np.concatenate(x) for x in out), gnames)


def _p2p_pairs(P: _Parts):
    """Matched (send part, row), (recv part, row) arrays and their (src, dst, tag) table and
    index, paired by `timeline.matching.pair_p2p` (each part in trace order, or issue order
    when simulated)."""
    cols: dict[str, list] = {k: [] for k in ("src", "dst", "tag", "seq", "recv", "part", "row")}
    for i, p in enumerate(P.parts):
        if p.static is None:
            continue
        ops = p2p_rows(p.static.trace, p.pid)
        if not ops["row"].size:
            continue
        for k in ("src", "dst", "tag", "recv", "row"):
            cols[k].append(ops[k])
        cols["seq"].append(ops["row"] if p.order is None else np.argsort(p.order)[ops["row"]])
        cols["part"].append(np.full(ops["row"].size, i, np.int64))
    if not cols["row"]:
        return None
    c = {k: np.concatenate(v) for k, v in cols.items()}
    snd, rcv = pair_p2p(c["src"], c["dst"], c["tag"], c["seq"], c["recv"])
    if not snd.size:
        return None
    triples, which = np.unique(
        np.column_stack([c["src"][snd], c["dst"][snd], c["tag"][snd]]), axis=0, return_inverse=True
    )
    return (c["part"][snd], c["row"][snd]), (c["part"][rcv], c["row"][rcv]), (triples, which.reshape(-1))
