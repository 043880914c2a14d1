"""The columnar trace model: one rank's graph of operations, hot data in numpy arrays.

A node is a row. Dependencies are CSR (indptr + flat ids). The attributes that simulators
and analyzers read (`COLUMN_ATTRS`) are typed columns with a presence bit each; everything
else a node carries (inputs/outputs, other attributes, doc strings, unknown fields) stays as
its original protobuf field bytes in `extra`, so nothing is lost and nothing is decoded
until asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from . import codec
from . import proto as pb
from .enums import ATTR_MEMBER, STEP_BOUNDS, TIME_ORIGIN, TRANSFORMED, Attr, NodeType, collective_name, node_type_name
from .graph import DepGraph
from .node import COLUMN_ATTRS, COLUMN_BY_NAME, Node, node_bytes, pb_to_node
from .wire import I64, Rows, ranges


def id_index(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted ids, their rows): what `rows_of` searches. Stable, so a repeated id finds its first row."""
    order = np.argsort(ids, kind="stable")
    return ids[order], order


def rows_of(index: tuple[np.ndarray, np.ndarray], ids) -> np.ndarray:
    """Row of each id in an `id_index` (-1 where absent)."""
    sorted_ids, order = index
    ids = np.asarray(ids, sorted_ids.dtype)
    if sorted_ids.size == 0:
        return np.full(ids.shape, -1, np.int64)
    pos = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    return np.where(sorted_ids[pos] == ids, order[pos], -1).astype(np.int64)


def _csr(lists: Iterable[Iterable[int]], n: int) -> tuple[np.ndarray, np.ndarray]:
    lens = np.zeros(n, np.int64)
    flat: list[int] = []
    for i, deps in enumerate(lists):
        deps = list(deps)
        lens[i] = len(deps)
        flat.extend(deps)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=indptr[1:])
    return indptr, np.asarray(flat, np.uint64)


def _empty_indptr(n: int) -> np.ndarray:
    return np.zeros(n + 1, np.int64)


class Trace:
    """One rank's execution trace.

    Columns (length n): ``ids`` (uint64), ``types`` (int32 NodeType), ``name_codes`` (int32
    into ``names``), ``start``/``duration`` (uint64 µs), ``ctrl_indptr``/``ctrl`` and
    ``data_indptr``/``data`` (CSR of dependency ids), ``present`` (uint16 bit per
    COLUMN_ATTR) and one array per COLUMN_ATTR, ``extra``/``extra_indptr``/``extra_split``
    (raw wire fields kept losslessly; bytes before ``extra_split`` precede attributes).

    ``placed_rows``/``placed_bits``/``placed_offsets`` keep attribute order on the rare nodes
    whose column attributes did not come first (in COLUMN_ATTRS order): each entry says that
    column attribute ``bit`` of row ``row`` sat ``offset`` bytes into that row's other
    attributes (entries of a row in their original order).
    """

    # the columns (set in __init__ from ARRAYS; declared here for readers and type checkers)
    ids: np.ndarray
    types: np.ndarray
    name_codes: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    ctrl_indptr: np.ndarray
    ctrl: np.ndarray
    data_indptr: np.ndarray
    data: np.ndarray
    present: np.ndarray
    is_cpu_op: np.ndarray
    num_ops: np.ndarray
    tensor_size: np.ndarray
    comm_type: np.ndarray
    comm_size: np.ndarray
    comm_priority: np.ndarray
    comm_src: np.ndarray
    comm_dst: np.ndarray
    comm_tag: np.ndarray
    pg_name: np.ndarray
    extra: np.ndarray
    extra_indptr: np.ndarray
    extra_split: np.ndarray

    ARRAYS = (
        "ids",
        "types",
        "name_codes",
        "start",
        "duration",
        "ctrl_indptr",
        "ctrl",
        "data_indptr",
        "data",
        "present",
        *(c.name for c in COLUMN_ATTRS),
        "extra",
        "extra_indptr",
        "extra_split",
    )

    def __init__(
        self,
        n: int = 0,
        *,
        metadata=None,
        names: list[str] | None = None,
        groups: list[str] | None = None,
        placed: tuple | None = None,
        **arrays: np.ndarray,
    ):
        self.metadata = metadata if metadata is not None else pb.GlobalMetadata()
        self.names: list[str] = names if names is not None else []
        self.groups: list[str] = groups if groups is not None else []
        defaults = {
            "ids": np.zeros(n, np.uint64),
            "types": np.zeros(n, np.int32),
            "name_codes": np.zeros(n, np.int32),
            "start": np.zeros(n, np.uint64),
            "duration": np.zeros(n, np.uint64),
            "ctrl_indptr": _empty_indptr(n),
            "ctrl": np.zeros(0, np.uint64),
            "data_indptr": _empty_indptr(n),
            "data": np.zeros(0, np.uint64),
            "present": np.zeros(n, np.uint16),
            "extra": np.zeros(0, np.uint8),
            "extra_indptr": _empty_indptr(n),
            "extra_split": np.zeros(n, np.uint32),
        }
        for c in COLUMN_ATTRS:
            defaults[c.name] = np.zeros(n, c.dtype)
        unknown = set(arrays) - set(defaults)
        if unknown:
            raise TypeError(f"unknown trace columns: {sorted(unknown)}")
        defaults.update(arrays)
        for k in self.ARRAYS:
            setattr(self, k, defaults[k])
        if not self.names:
            self.names = [""]
        if placed is None:
            placed = (np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint32))
        self.placed_rows, self.placed_bits, self.placed_offsets = (
            np.asarray(placed[0], np.int64),
            np.asarray(placed[1], np.uint8),
            np.asarray(placed[2], np.uint32),
        )
        self._check_shapes()
        self._derived: dict[Any, tuple[tuple, Any]] = {}
        self._group_index: tuple[list[str], int, dict[str, int]] | None = None  # (`group_code`)

    # ------------------------------------------------------------------ basics
    def _check_shapes(self) -> None:
        n = self.ids.size
        for k in self.ARRAYS:
            a = getattr(self, k)
            want = n + 1 if k.endswith("indptr") else n
            if k in ("ctrl", "data", "extra"):
                continue
            if a.shape != (want,):
                raise ValueError(f"column {k} has shape {a.shape}, expected ({want},)")
        for ip, flat in (("ctrl_indptr", "ctrl"), ("data_indptr", "data"), ("extra_indptr", "extra")):
            if getattr(self, ip)[-1] != getattr(self, flat).size:
                raise ValueError(f"{ip}[-1] does not match the length of {flat}")

    @property
    def placed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.placed_rows, self.placed_bits, self.placed_offsets

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def num_nodes(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return f"<Trace {len(self)} nodes, {self.data.size} data deps, {self.ctrl.size} ctrl deps>"

    def copy(self) -> Trace:
        meta = pb.GlobalMetadata()
        meta.CopyFrom(self.metadata)
        return Trace(
            len(self),
            metadata=meta,
            names=list(self.names),
            groups=list(self.groups),
            placed=tuple(a.copy() for a in self.placed),
            **{k: getattr(self, k).copy() for k in self.ARRAYS},
        )

    def nbytes(self) -> int:
        """Memory held by the columns and string tables."""
        total = sum(getattr(self, k).nbytes for k in self.ARRAYS)
        total += sum(sys.getsizeof(s) for s in self.names) + 8 * len(self.names)
        total += sum(sys.getsizeof(s) for s in self.groups) + 8 * len(self.groups)
        return total

    # ------------------------------------------------------------------ derived columns
    @property
    def time_origin_ns(self) -> int | None:
        """Where time 0 lies on the recording's clock (the converter's `time_origin_ns`
        metadata; ranks on one host share the clock), or None."""
        for a in self.metadata.attr:
            if a.name == TIME_ORIGIN:
                return int(a.int64_val)
        return None

    @property
    def step_bounds_us(self) -> np.ndarray | None:
        """The recorded steps as k + 1 cut points (µs on this trace's time line; the converter's
        `step_bounds_us` metadata, from the profiler's step windows), or None."""
        for a in self.metadata.attr:
            if a.name == STEP_BOUNDS:
                return np.asarray(a.int64_list.values, np.int64)
        return None

    @property
    def recorded_steps(self) -> int | None:
        """How many training steps the trace recorded: its profiler step windows
        (`step_bounds_us`), else its distinct ProfilerStep# annotations; None when it has neither."""
        bounds = self.step_bounds_us
        if bounds is not None and bounds.size >= 2:
            return int(bounds.size - 1)
        marked = {n for n in self.names if n.startswith("ProfilerStep#")}
        used = set(np.unique(self.name_codes).tolist()) if marked else set()
        k = sum(1 for i, n in enumerate(self.names) if n in marked and i in used)
        return k or None

    @property
    def transformed(self) -> list[str]:
        """The what-if transforms applied since the recording (`TRANSFORMED` metadata, in
        order; `synthesize.transforms`), [] for a trace as recorded."""
        return [str(v) for a in self.metadata.attr if a.name == TRANSFORMED for v in a.string_list.values]

    def mark_transformed(self, what: str) -> None:
        """Add `what` to `transformed` (in place: call it on a copy)."""
        for a in self.metadata.attr:
            if a.name == TRANSFORMED:
                a.string_list.values.append(what)
                return
        self.metadata.attr.add(name=TRANSFORMED).string_list.values.append(what)

    @property
    def timed(self) -> bool:
        """Whether the nodes carry recorded start times. Converters that record none (the
        reference PyTorch converter) leave every start at 0 while durations are set."""
        busy = self.duration > 0
        return int(busy.sum()) <= 1 or bool(self.start[busy].any())

    @property
    def name_array(self) -> np.ndarray:
        """Node names as an object array (built on demand)."""
        return np.asarray(self.names, dtype=object)[self.name_codes]

    def has(self, attr: str) -> np.ndarray:
        """Boolean mask of nodes that carry a column attribute."""
        return (self.present & np.uint16(1 << COLUMN_BY_NAME[attr].bit)) != 0

    def ctrl_deps(self, i: int) -> np.ndarray:
        return self.ctrl[self.ctrl_indptr[i] : self.ctrl_indptr[i + 1]]

    def data_deps(self, i: int) -> np.ndarray:
        return self.data[self.data_indptr[i] : self.data_indptr[i + 1]]

    def cached(self, key: Any, sources: tuple[str, ...], make):
        """Something derived from the columns `sources`, computed once while those columns stay
        the same objects (replacing a column recomputes it; edit arrays in place only before use)."""
        arrays = tuple(getattr(self, s) for s in sources)
        hit = self._derived.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], arrays)):
            return hit[1]
        value = make()
        self._derived[key] = (arrays, value)
        return value

    def share_derived(self, other: Trace) -> None:
        """Share `cached` values with `other`, a trace sharing some of this one's columns: a value
        derived from columns both hold is computed once for both (each value still checks that
        its source columns are its caller's)."""
        self._derived = other._derived

    def index_of(self, ids) -> np.ndarray:
        """Row index of each id (-1 where the id is not in the trace). Duplicates: first row."""
        return rows_of(self.cached("index", ("ids",), lambda: id_index(self.ids)), ids)

    def graph(self, kinds: tuple[str, ...] = ("data", "ctrl")) -> DepGraph:
        """The row-level dependency graph over `kinds` (data and control by default), cached."""
        kinds = tuple(kinds)
        sources = ("ids", *(a for k in kinds for a in (f"{k}_indptr", k)))
        return self.cached(("graph", kinds), sources, lambda: DepGraph.of(self, kinds))

    def row(self, node_id: int) -> int:
        i = int(self.index_of([node_id])[0])
        if i < 0:
            raise KeyError(f"no node with id {node_id}")
        return i

    def dep_rows(self, kind: str = "data") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edges as row indices: (dependent row, dependency row or -1 if missing, dependency id)."""
        indptr, flat = (self.data_indptr, self.data) if kind == "data" else (self.ctrl_indptr, self.ctrl)
        src = np.repeat(np.arange(len(self), dtype=np.int64), np.diff(indptr))
        return src, self.index_of(flat), flat

    # ------------------------------------------------------------------ node access
    def node(self, i: int) -> Node:
        """Row i as a plain `Node` (every field and attribute, decoded)."""
        return pb_to_node(pb.Node.FromString(codec.encode_rows(self, np.array([i]))[0]))

    def node_by_id(self, node_id: int) -> Node:
        return self.node(self.row(node_id))

    def __iter__(self) -> Iterator[Node]:
        for m in codec.iter_pb(self):
            yield pb_to_node(m)

    def attr(self, i: int, name: str, default: Any = None) -> Any:
        """Value of attribute `name` on row i (column or extra), or `default`."""
        c = COLUMN_BY_NAME.get(name)
        if c is not None and self.present[i] & (1 << c.bit):
            v = getattr(self, name)[i]
            return self.groups[v] if name == Attr.PG_NAME else v.item()
        if self.extra_indptr[i] == self.extra_indptr[i + 1]:
            return default
        return self.node(i).attr(name, default)

    def attr_array(self, name: str, dtype=None) -> tuple[np.ndarray, np.ndarray]:
        """(values, present mask) of an attribute over all nodes, decoded vectorized."""
        c = COLUMN_BY_NAME.get(name)
        if c is not None:
            vals = getattr(self, name)
            if name == Attr.PG_NAME:
                vals = np.asarray(self.groups, dtype=object)[vals] if self.groups else np.full(len(self), "", object)
            return vals, self.has(name)
        return codec.extra_attr_array(self, name, dtype)

    def attr_column(self, name: str, dtype=None) -> tuple[np.ndarray, np.ndarray]:
        """`attr_array`, decoded once while the trace's attributes stay the same (for checks that
        ask per communicator group: hundreds of groups on a 1,024-rank job). Read-only arrays."""
        if name in COLUMN_BY_NAME:  # (a column: nothing to decode, and its values are not among the sources)
            return self.attr_array(name, dtype)
        return self.cached(
            ("attr_array", name, dtype), ("extra", "extra_indptr", "present"), lambda: self.attr_array(name, dtype)
        )

    # ------------------------------------------------------------------ summaries
    def node_type_counts(self) -> dict[str, int]:
        vals, counts = np.unique(self.types, return_counts=True)
        return {node_type_name(int(v)): int(c) for v, c in zip(vals, counts)}

    def collectives(self) -> dict[str, dict[str, int]]:
        """Collective count and bytes by type (COMM_COLL nodes)."""
        coll = self.types == NodeType.COMM_COLL_NODE
        out: dict[str, dict[str, int]] = {}
        ctype = np.where(self.has(Attr.COMM_TYPE), self.comm_type, -1)[coll]
        size = np.where(self.has(Attr.COMM_SIZE), self.comm_size, 0)[coll]
        for t in np.unique(ctype):
            m = ctype == t
            key = "MISSING_COMM_TYPE" if t < 0 else collective_name(int(t))
            out[key] = {"count": int(m.sum()), "bytes": int(size[m].sum())}
        return out

    # ------------------------------------------------------------------ editing
    def take(self, rows) -> Trace:
        """A new trace with the given rows (boolean mask or indices), in that order."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        arrays = {}
        for k in self.ARRAYS:
            if k.endswith("indptr") or k in ("ctrl", "data", "extra"):
                continue
            arrays[k] = getattr(self, k)[rows]
        for ip, flat in (("ctrl_indptr", "ctrl"), ("data_indptr", "data"), ("extra_indptr", "extra")):
            indptr = getattr(self, ip)
            arrays[ip], arrays[flat] = _take_csr(indptr, getattr(self, flat), rows)
        meta = pb.GlobalMetadata()
        meta.CopyFrom(self.metadata)
        placed = self.placed
        if placed[0].size:  # rows may repeat or reorder: map every placement to each new row
            order = np.argsort(rows, kind="stable")
            lo = np.searchsorted(rows[order], placed[0], side="left")
            hi = np.searchsorted(rows[order], placed[0], side="right")
            reps = hi - lo
            entry = np.repeat(np.arange(placed[0].size), reps)
            new_rows = order[ranges(lo, reps)]
            by = np.lexsort((entry, new_rows))  # group by new row, original entry order inside
            placed = (new_rows[by], placed[1][entry][by], placed[2][entry][by])
        return Trace(
            rows.size, metadata=meta, names=list(self.names), groups=list(self.groups), placed=placed, **arrays
        )

    def slice(self, start: int, stop: int) -> Trace:
        """Rows start..stop as a trace of views (no copy of the columns)."""
        start, stop = max(0, start), min(len(self), stop)
        arrays = {}
        for k in self.ARRAYS:
            if not (k.endswith("indptr") or k in ("ctrl", "data", "extra")):
                arrays[k] = getattr(self, k)[start:stop]
        for ip, flat in (("ctrl_indptr", "ctrl"), ("data_indptr", "data"), ("extra_indptr", "extra")):
            indptr = getattr(self, ip)[start : stop + 1]
            arrays[ip] = indptr - indptr[0]
            arrays[flat] = getattr(self, flat)[indptr[0] : indptr[-1]]
        keep = (self.placed_rows >= start) & (self.placed_rows < stop)
        placed = (self.placed_rows[keep] - start, self.placed_bits[keep], self.placed_offsets[keep])
        return Trace(
            stop - start, metadata=self.metadata, names=self.names, groups=self.groups, placed=placed, **arrays
        )

    def with_deps(self, kind: str, keep: np.ndarray) -> Trace:
        """A copy keeping only the dependency entries (flat positions) where keep is True."""
        out = self.copy()
        ip, flat = ("data_indptr", "data") if kind == "data" else ("ctrl_indptr", "ctrl")
        indptr = getattr(self, ip)
        owner = np.repeat(np.arange(len(self)), np.diff(indptr))
        counts = np.bincount(owner[keep], minlength=len(self))
        new_indptr = np.zeros(len(self) + 1, np.int64)
        np.cumsum(counts, out=new_indptr[1:])
        setattr(out, ip, new_indptr)
        setattr(out, flat, getattr(self, flat)[keep])
        return out

    def set_attr(self, name: str, values, rows=None) -> None:
        """Set a column attribute on rows (all rows if None), marking it present."""
        c = COLUMN_BY_NAME[name]
        rows = np.arange(len(self)) if rows is None else np.asarray(rows)
        if name == Attr.PG_NAME:
            values = np.broadcast_to(np.asarray(values, dtype=object), rows.shape)
            values = np.array([self.group_code(str(v)) for v in values], np.int32)
        getattr(self, name)[rows] = values
        self.present[rows] |= np.uint16(1 << c.bit)

    def clear_attr(self, name: str, rows=None) -> None:
        c = COLUMN_BY_NAME[name]
        rows = slice(None) if rows is None else rows
        self.present[rows] &= np.uint16(~(1 << c.bit) & 0xFFFF)
        getattr(self, name)[rows] = 0

    def group_code(self, pg_name: str) -> int:
        """The code of a group name in `groups` (its first copy), appending a new name: O(1) per
        call from a dict beside the list (`groups.index` per row made setting 100,000 group names
        quadratic). The dict follows the list while it is the same object of the same length;
        replace the list (`t.groups = [...]`) rather than editing its items in place."""
        groups = self.groups
        index = getattr(self, "_group_index", None)
        if index is None or index[0] is not groups or index[1] != len(groups):
            lookup: dict[str, int] = {}
            for i, g in enumerate(groups):
                lookup.setdefault(g, i)
            index = self._group_index = (groups, len(groups), lookup)
        lookup = index[2]
        code = lookup.get(pg_name)
        if code is not None and groups[code] == pg_name:
            return code
        if code is not None:  # an item edited in place: look again
            self._group_index = None
            return self.group_code(pg_name)
        groups.append(pg_name)
        lookup[pg_name] = len(groups) - 1
        self._group_index = (groups, len(groups), lookup)
        return len(groups) - 1

    # ------------------------------------------------------------------ comparison
    def equals(self, other: Trace) -> bool:
        """Same nodes and metadata (string tables may be coded differently)."""
        return not self.differences(other, limit=1)

    def differences(self, other: Trace, limit: int = 10) -> list[str]:
        out: list[str] = []
        if self.metadata.SerializeToString(deterministic=True) != other.metadata.SerializeToString(deterministic=True):
            out.append("global metadata differs")
        if len(self) != len(other):
            return out + [f"node count {len(self)} != {len(other)}"]
        if not np.array_equal(self.name_array, other.name_array):
            i = int(np.flatnonzero(self.name_array != other.name_array)[0])
            out.append(f"row {i}: name {self.name_array[i]!r} != {other.name_array[i]!r}")
        for k in self.ARRAYS:
            if k in ("name_codes", Attr.PG_NAME):
                continue
            a, b = getattr(self, k), getattr(other, k)
            if k in COLUMN_BY_NAME:
                bit = np.uint16(1 << COLUMN_BY_NAME[k].bit)
                a = np.where(self.present & bit, a, 0)
                b = np.where(other.present & bit, b, 0)
            if a.shape != b.shape or not np.array_equal(a, b):
                out.append(f"column {k} differs")
        if any(not np.array_equal(a, b) for a, b in zip(self.placed, other.placed)):
            out.append("attribute placement differs")
        pa, pb_ = self.attr_array(Attr.PG_NAME), other.attr_array(Attr.PG_NAME)
        if not np.array_equal(np.where(pa[1], pa[0], ""), np.where(pb_[1], pb_[0], "")):
            out.append("column pg_name differs")
        return out[:limit]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], metadata=None) -> Trace:
        """Build a trace from `Node` objects (or protobuf Node messages)."""
        cache: dict = {}  # (each distinct attribute serialized once: `node_bytes`)
        payloads = [n.SerializeToString() if hasattr(n, "SerializeToString") else node_bytes(n, cache) for n in nodes]
        return cls.from_messages(payloads, metadata=metadata)

    @classmethod
    def from_messages(cls, payloads: list[bytes], metadata=None) -> Trace:
        """Decode serialized Node messages (an error names the message and the byte in it)."""
        return cls.from_decoded(codec.decode_messages(payloads, metadata=metadata))

    @classmethod
    def decode(
        cls,
        buf: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        *,
        metadata=None,
        names: tuple[list[str], dict] | None = None,
        groups: tuple[list[str], dict] | None = None,
    ) -> Trace:
        """Decode the Node messages buf[starts[i]:ends[i]] (see `codec.decode_nodes`)."""
        return cls.from_decoded(codec.decode_nodes(buf, starts, ends, metadata=metadata, names=names, groups=groups))

    @classmethod
    def from_decoded(cls, d: codec.Decoded) -> Trace:
        return cls(d.n, metadata=d.metadata, names=d.names, groups=d.groups, placed=d.placed, **d.columns)

    @classmethod
    def from_columns(
        cls,
        names: list[str],
        name_codes,
        types,
        *,
        ids=None,
        start=None,
        duration=None,
        data: tuple | None = None,
        ctrl: tuple | None = None,
        attrs: dict[str, tuple] | None = None,
        metadata=None,
    ) -> Trace:
        """A trace from whole columns: the bulk counterpart of `TraceBuilder`, for converters.

        ``data``/``ctrl`` are CSR pairs (indptr, dependency ids). ``attrs`` maps an attribute
        name to ``(values, mask)``: numbers per row, or for strings ``((codes, table), mask)``
        with codes into the list ``table``. Column attributes fill their columns; the others
        are encoded once, with the vocabulary's member (else int64/bool/string by dtype).
        """
        n = len(name_codes)
        arrays: dict[str, np.ndarray] = {
            "ids": np.arange(n, dtype=np.uint64) if ids is None else np.asarray(ids, np.uint64),
            "name_codes": np.asarray(name_codes, np.int32),
            "types": np.asarray(types, np.int32),
            "start": np.zeros(n, np.uint64) if start is None else np.asarray(start, np.uint64),
            "duration": np.zeros(n, np.uint64) if duration is None else np.asarray(duration, np.uint64),
            "present": np.zeros(n, np.uint16),
        }
        for key, csr in (("data", data), ("ctrl", ctrl)):
            if csr is not None:
                arrays[f"{key}_indptr"] = np.asarray(csr[0], np.int64)
                arrays[key] = np.asarray(csr[1], np.uint64)
        groups: list[str] = []
        extras = []
        for name, (values, mask) in (attrs or {}).items():
            mask = np.asarray(mask, bool)
            strings = isinstance(values, tuple)
            c = COLUMN_BY_NAME.get(name)
            if c is not None:
                if name == Attr.PG_NAME:  # the table becomes the trace's group table
                    values, groups = values[0], list(values[1])
                col = np.zeros(n, c.dtype)
                col[mask] = np.asarray(values)[mask]
                arrays[name] = col
                arrays["present"][mask] |= np.uint16(1 << c.bit)
                continue
            if strings:
                member, (values, table) = "string_val", values
            else:
                values = np.asarray(values)
                table = None
                member = ATTR_MEMBER.get(name) or ("bool_val" if values.dtype == bool else "int64_val")
            extras.append(codec.attribute_rows(name, member, values, mask, table))
        if extras:
            ex = Rows.concat(extras)
            indptr = np.zeros(n + 1, np.int64)
            np.cumsum(ex.lens, out=indptr[1:])
            arrays.update(extra=np.asarray(ex.data, np.uint8), extra_indptr=indptr)
        return cls(n, metadata=metadata, names=list(names), groups=groups, **arrays)  # type: ignore[arg-type]  # columns only

    @classmethod
    def concat(cls, traces: list[Trace], *, consume: bool = False) -> Trace:
        """Rows of several traces one after another (metadata from the first).

        With consume=True each input column is released as soon as it is copied, so the peak
        memory is the result plus one column (the inputs are unusable afterwards).
        """
        if not traces:
            return cls(0)
        first = traces[0]
        name_lookup = {"": 0}
        group_lookup: dict[str, int] = {}
        name_maps, group_maps = [], []
        row_counts = [len(t) for t in traces]
        for t in traces:
            name_maps.append(np.array([name_lookup.setdefault(s, len(name_lookup)) for s in t.names], np.int32))
            group_maps.append(
                np.array([group_lookup.setdefault(s, len(group_lookup)) for s in t.groups] or [0], np.int32)
            )
        out = {}
        for k in cls.ARRAYS:
            parts = []
            for t, nmap, gmap in zip(traces, name_maps, group_maps):
                a = getattr(t, k)
                if k == "name_codes":
                    a = nmap[a]
                elif k == Attr.PG_NAME and len(t.groups):
                    a = gmap[a]
                parts.append(a)
                if consume:
                    setattr(t, k, None)
            if k.endswith("indptr"):
                acc, shifted = 0, [np.zeros(1, I64)]
                for p in parts:
                    shifted.append(p[1:] + acc)
                    acc += int(p[-1])
                parts = shifted
            out[k] = np.concatenate(parts)
            del parts
        names = [""] * len(name_lookup)
        for s, c in name_lookup.items():
            names[c] = s
        groups = [""] * len(group_lookup)
        for s, c in group_lookup.items():
            groups[c] = s
        row0 = 0
        pieces: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
        for t, count in zip(traces, row_counts):
            pieces[0].append(t.placed_rows + row0)
            pieces[1].append(t.placed_bits)
            pieces[2].append(t.placed_offsets)
            row0 += count
        placed = tuple(np.concatenate(p) for p in pieces)
        return cls(out["ids"].size, metadata=first.metadata, names=names, groups=groups, placed=placed, **out)


def _take_csr(indptr: np.ndarray, flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lens = np.diff(indptr)[rows]
    new_indptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lens, out=new_indptr[1:])
    return new_indptr, flat[ranges(indptr[:-1][rows], lens)]
