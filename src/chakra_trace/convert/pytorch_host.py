"""Reader for PyTorch host execution traces (the ``ExecutionTraceObserver`` JSON), into columns.

``read_host_trace(path)`` reads a plain or gzipped ET JSON of any schema from ``1.0.1`` (flat:
``parent``, ``input_shapes``, attributes as plain keys) through ``1.1.1`` (nested ``inputs`` /
``outputs`` dicts, ``attrs`` list, ``strides``) and later ones with a recognizable layout. The
layout is detected from each node's structure, never from the version string. Unknown node
keys and attributes are kept.

How it stays fast and small without ``json.load``-ing the document:

* The ``nodes`` array is streamed in blocks (gzip is decompressed on a thread). Nodes are cut
  at the separator the file uses between its first two nodes (PyTorch writes every node in
  the same multi-line layout), and a piece is only ever accepted as a node once it is known to
  be exactly one valid JSON object. Files in another layout (minified, re-indented) fall back
  to exact scanning with the C JSON scanner, node by node.
* A node is stored as a *template* plus its numbers. The template key is the node's text with
  every digit replaced by ``0``: nodes of one op with the same digit counts share it, and a
  PyTorch trace repeats a handful of node shapes. The first node with a new key is decoded with
  ``json`` and compiled (which number goes where: id, parent, attributes, tensor fields,
  shape dims...). Every later node with that key is decoded without Python work per number:
  the digits are read for a whole block at once with numpy. Digits inside strings (``cuda:0``,
  op schemas) are checked against the template, and a node whose strings differ gets a variant
  template.
* Columns (ids, parents, attributes, flattened tensors) are then gathered from the numbers
  with per-template index tables, vectorized over all nodes.

``HostTrace.node(i)`` rebuilds node ``i`` as the exact dict ``json.load`` would give; the
tests check that for every node of every sample.
"""

from __future__ import annotations

import gc
import json
import operator
import os
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from json.scanner import make_scanner
from typing import Any

import numpy as np

from .._native import load as load_native
from ..errors import TraceFormatError
from ..io.stream import Limits, Prefetch, open_binary
from ..schema.trace import id_index, rows_of
from ..schema.wire import ranges

_native = load_native("chakra_trace.convert._host")  # optional C kernels; None: the numpy/Python path

__all__ = [
    "HostTensors",
    "HostTrace",
    "TruncatedTraceWarning",
    "read_host_trace",
    "INT_COLUMNS",
    "PROCESS_GROUP_INIT",
    "NESTED",
    "FLAT",
]

NESTED = "nested"  # schema >= 1.0.2: inputs/outputs dicts, attrs list, ctrl_deps
FLAT = "flat"  # schema 1.0.1: parent, input_shapes/input_types, attributes as plain keys

#: Integer node attributes kept as dense columns (with a presence bit each).
INT_COLUMNS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
_COLS = ("id", "parent") + INT_COLUMNS  # slot-table column order
_NCOL = len(_COLS)
_COL_INDEX = {c: i for i, c in enumerate(_COLS)}
_ATTR_COL = {c: _COL_INDEX[c] for c in INT_COLUMNS}

PROCESS_GROUP_INIT = "## process_group:init ##"
_PROCESS_NAMES = ("[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_graph|process]")
_THREAD_NAMES = ("[pytorch|profiler|execution_trace|thread]", "[pytorch|profiler|execution_graph|thread]")

_NESTED_KEYS = frozenset(("id", "name", "ctrl_deps", "inputs", "outputs", "attrs"))
_FLAT_KEYS = frozenset(
    (
        "id",
        "name",
        "parent",
        "inputs",
        "input_shapes",
        "input_types",
        "input_strides",
        "outputs",
        "output_shapes",
        "output_types",
        "output_strides",
    )
)

BLOCK = 4 << 20
_MASK = bytes.maketrans(b"0123456789", b"0000000000")
_MASKED = operator.methodcaller("translate", _MASK)
_WS = re.compile(rb"[ \t\n\r]*")
_STR_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"')
_RUN_B = re.compile(rb"[0-9]+")
_RUN_S = re.compile(r"[0-9]+")
_MAX_INT_DIGITS = 18  # longer integers are kept as text (they may not fit int64)
_INCOMPLETE_SLACK = 1 << 16


class TruncatedTraceWarning(UserWarning):
    """``read_host_trace(..., salvage=True)`` kept only the nodes before a truncation or error."""


class _Const(float):
    """NaN / Infinity written as JSON literals (no digits in the text)."""


_DECODER = json.JSONDecoder(parse_constant=_Const)
_SCAN = make_scanner(json.JSONDecoder())


# ---------------------------------------------------------------------------------------------
# public model


@dataclass(eq=False)
class HostTensors:
    """Every tensor argument of every node, flattened (also inside GenericList / Tuple), CSR by node.

    Tensor ``k`` belongs to node ``row[k]``; node ``i`` owns ``indptr[i]:indptr[i+1]``, in
    document order (inputs first). A tensor value in the trace is
    ``[tensor_id, storage_id, offset, numel, itemsize, device]`` (``device`` is missing in some
    old traces: code of ``""``). ``arg`` is the top-level argument index, ``elem`` the index of
    the tensor among the tensors of that argument (``GenericList[Tensor,...]``). ``type`` codes
    into ``types`` (e.g. ``"Tensor(float)"``). Shapes and strides are CSR too:
    ``shape_indptr[k]:shape_indptr[k+1]`` into ``shape_dims`` (``has_shape[k]`` False where the
    trace has no usable shape); strides likewise (schema >= 1.1.1).
    Undefined tensors appear as ``Tensor(nullptr (uninitialized))`` with numel 0 and device "".
    """

    indptr: np.ndarray
    row: np.ndarray
    output: np.ndarray  # bool: True for outputs
    arg: np.ndarray  # int32
    elem: np.ndarray  # int32
    tensor_id: np.ndarray  # int64
    storage_id: np.ndarray
    offset: np.ndarray
    numel: np.ndarray
    itemsize: np.ndarray
    device: np.ndarray  # int16 codes into devices
    devices: list[str]
    type: np.ndarray  # int32 codes into types
    types: list[str]
    shape_indptr: np.ndarray
    shape_dims: np.ndarray
    has_shape: np.ndarray
    stride_indptr: np.ndarray
    stride_dims: np.ndarray
    has_stride: np.ndarray

    def __len__(self) -> int:
        return int(self.row.size)

    @property
    def nbytes_data(self) -> np.ndarray:
        """numel * itemsize of each tensor (bytes it spans)."""
        return self.numel * self.itemsize

    def of(self, i: int) -> slice:
        """Slice of node i's tensors."""
        return slice(int(self.indptr[i]), int(self.indptr[i + 1]))

    def shape(self, k: int) -> tuple[int, ...] | None:
        if not self.has_shape[k]:
            return None
        return tuple(int(x) for x in self.shape_dims[self.shape_indptr[k] : self.shape_indptr[k + 1]])

    def stride(self, k: int) -> tuple[int, ...] | None:
        if not self.has_stride[k]:
            return None
        return tuple(int(x) for x in self.stride_dims[self.stride_indptr[k] : self.stride_indptr[k + 1]])

    def nbytes(self) -> int:
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray))


@dataclass(eq=False)
class _Sparse:
    """One attribute (or unknown node key) over the rows that have it."""

    rows: np.ndarray  # int64, ascending
    kind: str  # "int" (int64 values), "str" (int32 codes into HostTrace.strings) or "obj" (objects)
    values: np.ndarray
    type: str | None = None  # declared attr type ("uint64", "string", ...), first seen


@dataclass(eq=False)
class HostTrace:
    """A PyTorch host execution trace, one row per node, in file order.

    Metadata: ``schema`` (the version string as written), ``layout`` (``"nested"``, ``"flat"``
    or ``"mixed"``: detected from the nodes), ``metadata`` (every top-level key but ``nodes``,
    in file order: schema, pid, time, start_ts, finish_ts and any other).

    Per node (length n): ``ids`` (int64), ``name`` (int32 codes into ``names``), ``parent``
    (the call-tree parent from ``ctrl_deps`` / ``parent``; -1 when none), ``rf_id``,
    ``fw_parent``, ``seq_id``, ``scope``, ``tid``, ``fw_tid`` (int64, 0 where absent:
    ``has(col)`` says where present), ``op_schema`` (int32 codes into ``strings``, -1 when
    absent). Every other attribute (kernel_backend, kernel_file, tensor_range, the NCCL
    ``record_param_comms`` ones such as collective_name, dtype, in_msg_nelems, pg_name, ...,
    and any unknown one) is a sparse column: ``attr_names``, ``attr_array(name)``,
    ``attr_rows(name)``, ``attr(i, name)``. Unknown top-level node keys: ``key_names``,
    ``key_rows(name)``. Tensors: ``tensors`` (`HostTensors`). ``node(i)`` gives node i as
    the exact dict ``json.load`` gives; ``io(i)`` its inputs/outputs in one normalized form.

    ``process_groups``: the list decoded from ``## process_group:init ##`` nodes (pg_name,
    pg_desc, backend_config, ranks, group_size, ...). ``salvaged``: the file was cut short or
    broken and only the complete nodes before that point are here.
    """

    path: str
    schema: str | None
    layout: str
    metadata: dict[str, Any]
    ids: np.ndarray
    name: np.ndarray
    names: list[str]
    parent: np.ndarray
    rf_id: np.ndarray
    fw_parent: np.ndarray
    seq_id: np.ndarray
    scope: np.ndarray
    tid: np.ndarray
    fw_tid: np.ndarray
    present: np.ndarray  # uint8, bit j for INT_COLUMNS[j]
    op_schema: np.ndarray
    strings: list[str]
    tensors: HostTensors
    process_groups: list[dict] = field(default_factory=list)
    salvaged: bool = False
    layouts: np.ndarray = field(default=None, repr=False)  # int8 per node: 0 nested, 1 flat
    _tm: np.ndarray = field(default=None, repr=False)
    _ints: np.ndarray = field(default=None, repr=False)
    _int_ptr: np.ndarray = field(default=None, repr=False)
    _objs: list = field(default_factory=list, repr=False)
    _obj_ptr: np.ndarray = field(default=None, repr=False)
    _tables: Any = field(default=None, repr=False)
    _attrs: dict = field(default_factory=dict, repr=False)
    _keys: dict = field(default_factory=dict, repr=False)
    _index: Any = field(default=None, repr=False)

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def num_nodes(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return (
            f"<HostTrace {os.path.basename(self.path)!s}: {len(self)} nodes, schema {self.schema!r}, "
            f"{self.layout} layout, {len(self.tensors)} tensors>"
        )

    @property
    def pid(self):
        return self.metadata.get("pid")

    @property
    def time(self):
        return self.metadata.get("time")

    @property
    def start_ts(self):
        return self.metadata.get("start_ts")

    @property
    def finish_ts(self):
        return self.metadata.get("finish_ts")

    def has(self, col: str) -> np.ndarray:
        """Where an integer attribute column (rf_id, fw_parent, seq_id, scope, tid, fw_tid) is present."""
        return (self.present & np.uint8(1 << INT_COLUMNS.index(col))) != 0

    @property
    def name_array(self) -> np.ndarray:
        return np.asarray(self.names, dtype=object)[self.name]

    def names_of(self, name: str) -> np.ndarray:
        """Rows whose node name is `name`."""
        try:
            code = self.names.index(name)
        except ValueError:
            return np.zeros(0, np.int64)
        return np.flatnonzero(self.name == code)

    @property
    def process_row(self) -> int:
        """Row of the synthetic process node (-1 if none)."""
        rows = np.concatenate([self.names_of(n) for n in _PROCESS_NAMES])
        return int(rows.min()) if rows.size else -1

    @property
    def thread_rows(self) -> np.ndarray:
        return np.sort(np.concatenate([self.names_of(n) for n in _THREAD_NAMES]))

    @property
    def pg_init_rows(self) -> np.ndarray:
        return self.names_of(PROCESS_GROUP_INIT)

    @property
    def synthetic(self) -> np.ndarray:
        """Mask of the synthetic process / thread / process-group nodes."""
        m = np.zeros(len(self), bool)
        pr = self.process_row
        if pr >= 0:
            m[pr] = True
        m[self.thread_rows] = True
        m[self.pg_init_rows] = True
        return m

    def rows(self, node_ids) -> np.ndarray:
        """Row of each node id (-1 where absent; the first row if an id repeats)."""
        if self._index is None:
            self._index = id_index(self.ids)
        return rows_of(self._index, node_ids)

    def row(self, node_id: int) -> int:
        r = int(self.rows([node_id])[0])
        if r < 0:
            raise KeyError(f"no node with id {node_id}")
        return r

    # ------------------------------------------------------------------ nodes
    def node(self, i: int) -> dict:
        """Node i as the plain dict ``json.load`` gives for it (rebuilt from its template and numbers)."""
        i = int(i)
        if i < 0:
            i += len(self)
        return json.loads(self._node_text(i))

    def node_by_id(self, node_id: int) -> dict:
        return self.node(self.row(node_id))

    def _node_text(self, i: int) -> bytes:
        tb = self._tables
        t = int(self._tm[i])
        b = bytearray(tb.keys[t])
        p, c = int(tb.i_ptr.v[t]), int(tb.i_cnt.v[t])
        vals = self._ints[self._int_ptr[i] : self._int_ptr[i] + c].tolist()
        for s, ln, v in zip(tb.i_start.v[p : p + c].tolist(), tb.i_len.v[p : p + c].tolist(), vals):
            d = str(abs(v)).encode()
            if len(d) != ln:
                d = d.rjust(ln, b"0")
            b[s : s + ln] = d
        p, c = int(tb.v_ptr.v[t]), int(tb.v_cnt.v[t])
        if c:
            pos = tb.v_pos.v[p : p + c]
            arr = np.frombuffer(b, np.uint8)
            arr[pos] = tb.v_byte.v[p : p + c]
        p, c = int(tb.o_ptr.v[t]), int(tb.o_cnt.v[t])
        if c:
            raws = self._objs[self._obj_ptr[i] : self._obj_ptr[i] + c]
            for s, e, raw in zip(tb.o_start.v[p : p + c].tolist(), tb.o_end.v[p : p + c].tolist(), raws):
                b[s:e] = raw
        return b"{" + bytes(b) + b"}"

    def __iter__(self) -> Iterator[dict]:
        for i in range(len(self)):
            yield self.node(i)

    def io(self, i: int) -> tuple[dict, dict]:
        """(inputs, outputs) of node i as ``{"values", "shapes", "types", "strides"}`` dicts, any layout.

        Missing lists are empty; ``strides`` is None where the trace has none (schema < 1.1.1).
        """
        d = self.node(i)
        out = []
        if self.layouts[i] == 1:
            for k, pre in (("inputs", "input"), ("outputs", "output")):
                out.append(
                    {
                        "values": d.get(k, []),
                        "shapes": d.get(pre + "_shapes", []),
                        "types": d.get(pre + "_types", []),
                        "strides": d.get(pre + "_strides"),
                    }
                )
        else:
            for k in ("inputs", "outputs"):
                x = d.get(k) or {}
                out.append(
                    {
                        "values": x.get("values", []),
                        "shapes": x.get("shapes", []),
                        "types": x.get("types", []),
                        "strides": x.get("strides"),
                    }
                )
        return out[0], out[1]

    # ------------------------------------------------------------------ attributes
    @property
    def attr_names(self) -> list[str]:
        """Names of the sparse attributes (everything but the dense columns and op_schema)."""
        return list(self._attrs)

    @property
    def key_names(self) -> list[str]:
        """Unknown top-level node keys (nested layout), kept as sparse columns."""
        return list(self._keys)

    def attr_type(self, name: str) -> str | None:
        """The declared type of a sparse attribute (first seen; None in the flat layout)."""
        sp = self._attrs.get(name)
        return sp.type if sp is not None else None

    def _values(self, sp: _Sparse) -> np.ndarray:
        if sp.kind == "str":
            return np.asarray(self.strings, dtype=object)[sp.values] if len(self.strings) else sp.values.astype(object)
        return sp.values

    def attr_rows(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows that carry attribute `name`, its values there): int64 for integers, objects otherwise."""
        if name in INT_COLUMNS:
            m = self.has(name)
            return np.flatnonzero(m), getattr(self, name)[m]
        if name == "op_schema":
            rows = np.flatnonzero(self.op_schema >= 0)
            return rows, np.asarray(self.strings, dtype=object)[self.op_schema[rows]]
        sp = self._attrs.get(name)
        if sp is None:
            return np.zeros(0, np.int64), np.zeros(0, object)
        return sp.rows, self._values(sp)

    def attr_array(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(values over all nodes, present mask). Integers give int64 (0 where absent), others objects (None)."""
        rows, vals = self.attr_rows(name)
        mask = np.zeros(len(self), bool)
        mask[rows] = True
        if vals.dtype == object:
            out = np.full(len(self), None, object)
        else:
            out = np.zeros(len(self), vals.dtype)
        out[rows] = vals
        return out, mask

    def attr(self, i: int, name: str, default: Any = None) -> Any:
        """Attribute `name` of node i (dense column, op_schema or sparse), or `default`."""
        if name in INT_COLUMNS:
            return int(getattr(self, name)[i]) if self.has(name)[i] else default
        if name == "op_schema":
            c = self.op_schema[i]
            return self.strings[c] if c >= 0 else default
        sp = self._attrs.get(name)
        if sp is None:
            return default
        p = int(np.searchsorted(sp.rows, i))
        if p >= sp.rows.size or sp.rows[p] != i:
            return default
        v = sp.values[p]
        if sp.kind == "str":
            return self.strings[v]
        return v.item() if isinstance(v, np.generic) else v

    def key_rows(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows, values) of an unknown top-level node key."""
        sp = self._keys.get(name)
        if sp is None:
            return np.zeros(0, np.int64), np.zeros(0, object)
        return sp.rows, self._values(sp)

    def nbytes(self) -> int:
        """Memory held by the columns, number store and tables (approximate for Python objects)."""

        total = 0
        for v in vars(self).values():
            if isinstance(v, np.ndarray):
                total += v.nbytes
        total += self.tensors.nbytes()
        for d in (self._attrs, self._keys):
            for sp in d.values():
                total += sp.rows.nbytes + (sp.values.nbytes if sp.values.dtype != object else 8 * sp.values.size)
        total += sum(sys.getsizeof(s) for s in self.names) + sum(sys.getsizeof(s) for s in self.strings)
        total += sum(sys.getsizeof(o) for o in self._objs)
        if self._tables is not None:
            total += self._tables.nbytes()
        return total


# ---------------------------------------------------------------------------------------------
# templates


class _Grow:
    """Append-only numpy array: values are pushed to a list and moved into the array when read."""

    __slots__ = ("a", "n", "pend")

    def __init__(self, dtype, cap: int = 256):
        self.a = np.empty(cap, dtype)
        self.n = 0
        self.pend: list = []

    def __len__(self) -> int:
        return self.n + len(self.pend)

    def push(self, v) -> None:
        self.pend.append(v)

    def add(self, vals) -> None:
        self.pend.extend(vals)

    def _flush(self) -> None:
        k = len(self.pend)
        need = self.n + k
        if need > self.a.size:
            b = np.empty(max(need, 2 * self.a.size), self.a.dtype)
            b[: self.n] = self.a[: self.n]
            self.a = b
        self.a[self.n : need] = self.pend
        self.n = need
        self.pend = []

    @property
    def v(self) -> np.ndarray:
        if self.pend:
            self._flush()
        return self.a[: self.n]

    def nbytes(self) -> int:
        return self.a.nbytes


class _NodeError(Exception):
    """A node that is valid JSON but not a valid ET node (raised as TraceFormatError by the reader)."""

    def __init__(self, message: str, node_id=None):
        super().__init__(message)
        self.message, self.node_id = message, node_id


def _tname(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


_ELEM_CACHE: dict[str, list[str] | None] = {}


def _elem_types(t: str) -> list[str] | None:
    """Element types of a container type string: ``GenericList[Int,Tensor(float)]`` -> [Int, Tensor(float)]."""
    r = _ELEM_CACHE.get(t)
    if r is not None or t in _ELEM_CACHE:
        return r
    out = None
    b = t.find("[")
    if b > 0 and t.endswith("]"):
        out = []
        depth = 0
        cur = b + 1
        inner_end = len(t) - 1
        for k in range(b + 1, inner_end):
            c = t[k]
            if c in "[(":
                depth += 1
            elif c in "])":
                depth -= 1
            elif c == "," and depth == 0:
                out.append(t[cur:k].strip())
                cur = k + 1
        if cur < inner_end:
            out.append(t[cur:inner_end].strip())
    if len(_ELEM_CACHE) > 100_000:
        _ELEM_CACHE.clear()
    _ELEM_CACHE[t] = out
    return out


class _Tables:
    """All templates: text keys, number-slot layouts (per template) and roles (shared by templates).

    A template says where the numbers of a node text are (positions depend on digit counts);
    its *role* says what they mean (which slot is the id, the parent, a tensor field...) and
    holds the node's strings. Templates that differ only in digit counts share one role.
    """

    def __init__(self):
        g = _Grow
        self.keys: list[bytes] = []
        self.tmap: dict[bytes, int] = {}  # masked text -> template
        self.vmap: dict[tuple[int, bytes], int] = {}  # (template, digits inside strings) -> variant
        self.dmap: dict[bytes, int] = {}  # text without digits -> base template (for derivation)
        self.base_info: dict[int, tuple] = {}
        # per template
        self.role = g(np.int32)
        self.i_ptr, self.i_cnt = g(np.int64), g(np.int32)
        self.v_ptr, self.v_cnt = g(np.int64), g(np.int32)
        self.o_ptr, self.o_cnt = g(np.int64), g(np.int32)
        # integer slots (read vectorized), digits inside strings (checked), numbers kept as text
        self.i_start, self.i_len, self.i_neg = g(np.int32), g(np.int8), g(np.bool_)
        self.v_pos, self.v_byte = g(np.int32), g(np.uint8)
        self.o_start, self.o_end = g(np.int32), g(np.int32)
        # per role
        self.cols = g(np.int32)  # _NCOL per role: slot of id, parent, rf_id, ... (-1 absent)
        self.r_name, self.r_ops, self.r_layout = g(np.int32), g(np.int32), g(np.int8)
        self.d_ptr, self.d_cnt = g(np.int64), g(np.int32)
        # tensor descriptors (per role)
        self.d_io, self.d_arg, self.d_elem = g(np.int8), g(np.int32), g(np.int32)
        self.d_f = [g(np.int32) for _ in range(5)]
        self.d_dev, self.d_type = g(np.int16), g(np.int32)
        self.d_sh_ptr, self.d_sh_cnt, self.d_st_ptr, self.d_st_cnt = g(np.int64), g(np.int32), g(np.int64), g(np.int32)
        self.sh_slots, self.st_slots = g(np.int32), g(np.int32)
        # string tables
        self.names: list[str] = []
        self.name_codes: dict[str, int] = {}
        self.strings: list[str] = []
        self.string_codes: dict[str, int] = {}
        self.devices: list[str] = []
        self.device_codes: dict[str, int] = {}
        self.ttypes: list[str] = []
        self.ttype_codes: dict[str, int] = {}
        # sparse attributes / unknown keys: name -> {role: (kind, payload)}; declared types
        self.attrs: dict[str, dict[int, tuple]] = {}
        self.attr_types: dict[str, str] = {}
        self.xkeys: dict[str, dict[int, tuple]] = {}
        self.n_roles = 0
        self.n_derived = 0
        self._runs_cache: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def nbytes(self) -> int:

        total = sum(sys.getsizeof(k) for k in self.keys)
        for v in vars(self).values():
            if isinstance(v, _Grow):
                total += v.nbytes()
        total += sum(x.nbytes() for x in self.d_f)
        for info in self.base_info.values():
            total += sum(x.nbytes for x in info if isinstance(x, np.ndarray))
        return total

    @staticmethod
    def _code(table: list, codes: dict, s: str) -> int:
        c = codes.get(s)
        if c is None:
            c = codes[s] = len(table)
            table.append(s)
        return c

    def string(self, s: str) -> int:
        return self._code(self.strings, self.string_codes, s)

    @staticmethod
    def _runs(mkey: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of every run of digits (zeros in the masked text)."""
        a = np.frombuffer(mkey, np.uint8) == 48
        if not a.size:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        d = np.flatnonzero(a[1:] != a[:-1]) + 1
        if a[0]:
            d = np.concatenate(([0], d))
        if a[-1]:
            d = np.concatenate((d, [a.size]))
        return d[0::2], d[1::2]

    # -------------------------------------------------------------- lookup
    def lookup_miss(self, piece: bytes, mkey: bytes) -> int | None:
        """Template for a node text whose masked key is not known yet (derive or compile)."""
        dkey = mkey.translate(None, b"0")
        b = self.dmap.get(dkey)
        if b is not None:
            t = self._derive(b, piece, mkey)
            if t is not None:
                self.tmap[mkey] = t
                return t
        t = self.compile(piece, mkey)
        if t is not None:
            self.dmap.setdefault(dkey, t)
        return t

    def _derive(self, b: int, piece: bytes, mkey: bytes) -> int | None:
        """A template for mkey from base template b: same text but for the number of digits in numbers."""
        nruns, doff_b, i_run, s_run, s_len_b, o_r0, o_r1, o_neg, role, i_neg, v_byte = self.base_info[b]
        starts, ends = self._runs(mkey)
        if starts.size != nruns:
            return None
        lens = ends - starts
        if (starts - (np.cumsum(lens) - lens)).tobytes() != doff_b:
            return None  # the digits sit elsewhere in the text
        if s_run.size and lens[s_run].tobytes() != s_len_b:
            return None  # a string changed: compile it
        il = lens[i_run]
        if il.size and il.max() > _MAX_INT_DIGITS:
            return None
        if o_r0.size and np.any((lens[o_r0] > 1) & (np.frombuffer(piece, np.uint8)[starts[o_r0]] == 48)):
            return None  # leading zero: let the compiler reject it
        t = len(self.keys)
        self.keys.append(mkey)
        self.role.push(role)
        self.i_ptr.push(len(self.i_start))
        self.i_cnt.push(len(i_neg))
        self.i_start.add(starts[i_run].tolist())
        self.i_len.add(il.tolist())
        self.i_neg.add(i_neg)
        self.v_ptr.push(len(self.v_pos))
        self.v_cnt.push(len(v_byte))
        if v_byte:
            self.v_pos.add(ranges(starts[s_run], lens[s_run]).tolist())
            self.v_byte.add(v_byte)
        self.o_ptr.push(len(self.o_start))
        self.o_cnt.push(int(o_r0.size))
        if o_r0.size:
            self.o_start.add((starts[o_r0] - o_neg).tolist())
            self.o_end.add(ends[o_r1].tolist())
        self.n_derived += 1
        return t

    # -------------------------------------------------------------- compile
    def compile(self, piece: bytes, mkey: bytes, register: bool = True) -> int | None:
        """Compile a node text (without its outer braces) into a new template and role.

        Returns the template id, or None if ``{piece}`` is not exactly one JSON object (the
        caller then rescans exactly). Raises _NodeError for valid JSON that is no ET node, and
        UnicodeDecodeError for bad UTF-8.
        """
        text = piece.decode("utf-8")
        try:
            obj = _DECODER.decode("{" + text + "}")
        except ValueError:
            return None
        if type(obj) is not dict:
            return None
        st_arr, en_arr = self._runs(mkey)
        starts, ends = st_arr.tolist(), en_arr.tolist()
        if b"\\" in piece:  # escapes: count the runs in each string as written
            str_runs = [len(_RUN_B.findall(m.group())) for m in _STR_TOKEN.finditer(piece)]
        else:
            str_runs = None
        islots: list[tuple[int, int, bool]] = []
        i_run: list[int] = []
        oslots: list[tuple[int, int]] = []
        o_runs: list[tuple[int, int, int]] = []
        vruns: list[int] = []
        ri = 0
        si = 0
        cache = self._runs_cache
        nmk = len(mkey)

        def walk(v):
            nonlocal ri, si
            t = type(v)
            if t is int:
                s = starts[ri]
                e = ends[ri]
                neg = s > 0 and piece[s - 1] == 45
                if e - s > _MAX_INT_DIGITS:
                    oslots.append((s - neg, e))
                    o_runs.append((ri, ri, neg))
                    ri += 1
                    return -len(oslots)
                islots.append((s, e - s, neg))
                i_run.append(ri)
                ri += 1
                return len(islots) - 1
            if t is str:
                if str_runs is not None:
                    n = str_runs[si]
                    si += 1
                else:
                    n = cache.get(v)
                    if n is None:
                        n = len(_RUN_S.findall(v))
                        if len(cache) > 200_000:
                            cache.clear()
                        cache[v] = n
                if n:
                    vruns.extend(range(ri, ri + n))
                    ri += n
                return None
            if t is list:
                out = []
                for x in v:
                    if type(x) is int and ends[ri] - starts[ri] <= _MAX_INT_DIGITS:
                        s = starts[ri]
                        islots.append((s, ends[ri] - s, s > 0 and piece[s - 1] == 45))
                        i_run.append(ri)
                        ri += 1
                        out.append(len(islots) - 1)
                    else:
                        out.append(walk(x))
                return out
            if t is dict:
                out = {}
                for k, x in v.items():
                    walk(k)
                    out[k] = walk(x)
                return out
            if t is float:
                s = starts[ri]
                e = ends[ri]
                r0 = ri
                ri += 1
                while e < nmk and mkey[e] in (46, 101, 69):  # . e E: the number goes on
                    e = ends[ri]
                    ri += 1
                neg = s > 0 and piece[s - 1] == 45
                oslots.append((s - neg, e))
                o_runs.append((r0, ri - 1, neg))
                return -len(oslots)
            return None  # true / false / null / NaN / Infinity: no digits

        try:
            skel = walk(obj)
        except IndexError:
            skel = None
        if skel is None or ri != len(starts) or (str_runs is not None and si != len(str_runs)):
            raise _NodeError("node object has duplicate keys (cannot keep it losslessly)", _safe_id(obj))
        # the node is valid: a new role, then the template
        role = self._role(obj, skel)
        tid = len(self.keys)
        self.keys.append(mkey)
        self.role.push(role)
        self.i_ptr.push(len(self.i_start))
        self.i_cnt.push(len(islots))
        if islots:
            s_, l_, n_ = zip(*islots)
            self.i_start.add(s_)
            self.i_len.add(l_)
            self.i_neg.add(n_)
        vpos = [p for r in vruns for p in range(starts[r], ends[r])]
        self.v_ptr.push(len(self.v_pos))
        self.v_cnt.push(len(vpos))
        if vpos:
            self.v_pos.add(vpos)
            self.v_byte.add([piece[p] for p in vpos])
        self.o_ptr.push(len(self.o_start))
        self.o_cnt.push(len(oslots))
        if oslots:
            s_, e_ = zip(*oslots)
            self.o_start.add(s_)
            self.o_end.add(e_)
        if register:
            self.tmap.setdefault(mkey, tid)
            lens = en_arr - st_arr
            o = np.array(o_runs, np.int64).reshape(-1, 3)
            s_run = np.array(vruns, np.int64)
            self.base_info[tid] = (
                len(starts),
                (st_arr - (np.cumsum(lens) - lens)).tobytes(),
                np.array(i_run, np.int64),
                s_run,
                lens[s_run].tobytes(),
                o[:, 0].copy(),
                o[:, 1].copy(),
                o[:, 2].copy(),
                role,
                [x[2] for x in islots],
                [piece[p] for p in vpos],
            )
        return tid

    def _role(self, obj: dict, skel: dict) -> int:
        nested, cols, name_code, ops_code, descs, sparse_a, sparse_k = self._analyze(obj, skel)
        role = self.n_roles
        self.n_roles += 1
        self.d_ptr.push(len(self.d_io))
        self.d_cnt.push(len(descs))
        if descs:
            dev_code = self.device_codes
            type_code = self.ttype_codes
            for io, arg, elem, f, dev, ttype, shape, stride in descs:
                self.d_io.push(io)
                self.d_arg.push(arg)
                self.d_elem.push(elem)
                for j in range(5):
                    self.d_f[j].push(f[j])
                c = dev_code.get(dev)
                self.d_dev.push(c if c is not None else self._code(self.devices, dev_code, dev))
                c = type_code.get(ttype)
                self.d_type.push(c if c is not None else self._code(self.ttypes, type_code, ttype))
                self.d_sh_ptr.push(len(self.sh_slots))
                self.d_sh_cnt.push(-1 if shape is None else len(shape))
                if shape:
                    self.sh_slots.add(shape)
                self.d_st_ptr.push(len(self.st_slots))
                self.d_st_cnt.push(-1 if stride is None else len(stride))
                if stride:
                    self.st_slots.add(stride)
        self.cols.add(cols)
        self.r_name.push(name_code)
        self.r_ops.push(ops_code)
        self.r_layout.push(0 if nested else 1)
        for nm, spec, ty in sparse_a:
            self.attrs.setdefault(nm, {})[role] = spec
            if ty is not None and nm not in self.attr_types:
                self.attr_types[nm] = ty
        for nm, spec in sparse_k:
            self.xkeys.setdefault(nm, {})[role] = spec
        return role

    def _spec(self, v, sv) -> tuple:
        t = type(v)
        if t is int:
            return ("i", sv) if sv >= 0 else ("o", -sv - 1)
        if t is str:
            return ("s", self.string(v))
        if t is float:
            return ("o", -sv - 1)
        if t is _Const:
            return ("c", float(v))
        if v is None or t is bool:
            return ("c", v)
        return ("t", None)

    def _analyze(self, o: dict, sk: dict):
        node_id = _safe_id(o)
        inputs = o.get("inputs")
        if isinstance(inputs, dict) or "attrs" in o or "ctrl_deps" in o:
            nested = True
        elif isinstance(inputs, list) or "input_shapes" in o or "parent" in o:
            nested = False
        else:
            nested = True
        cols = [-1] * _NCOL
        # id
        if "id" not in o:
            raise _NodeError("node has no 'id'")
        v = o["id"]
        if type(v) is not int:
            raise _NodeError(f"expected an integer 'id', got {_tname(v)}", None)
        if sk["id"] < 0:
            raise _NodeError("'id' does not fit in 64 bits", None)
        cols[0] = sk["id"]
        # name
        nm = o.get("name", "")
        if type(nm) is not str:
            raise _NodeError(f"expected a string 'name', got {_tname(nm)}", node_id)
        name_code = self._code(self.names, self.name_codes, nm)
        # parent
        pk = "ctrl_deps" if (nested and "ctrl_deps" in o) or "parent" not in o else "parent"
        v = o.get(pk)
        if v is not None:
            if type(v) is not int:
                raise _NodeError(f"expected an integer '{pk}' (the parent node id), got {_tname(v)}", node_id)
            if sk[pk] < 0:
                raise _NodeError(f"'{pk}' does not fit in 64 bits", node_id)
            cols[1] = sk[pk]
        ops_code = -1
        sparse_a: list = []
        sparse_k: list = []

        def attr(name, v, sv, ty):
            nonlocal ops_code
            c = _ATTR_COL.get(name)
            if c is not None:
                if type(v) is int:
                    if sv < 0:
                        raise _NodeError(f"attribute '{name}' does not fit in 64 bits", node_id)
                    cols[c] = sv
                elif v is not None:
                    raise _NodeError(f"expected an integer attribute '{name}', got {_tname(v)}", node_id)
            elif name == "op_schema":
                if type(v) is str:
                    ops_code = self.string(v)
                elif v is not None:
                    raise _NodeError(f"expected a string attribute 'op_schema', got {_tname(v)}", node_id)
            else:
                sparse_a.append((name, self._spec(v, sv), ty))

        if nested:
            attrs = o.get("attrs", [])
            if type(attrs) is not list:
                raise _NodeError(f"expected 'attrs' to be a list, got {_tname(attrs)}", node_id)
            sattrs = sk.get("attrs") or []
            for j, a in enumerate(attrs):
                if type(a) is not dict or type(a.get("name")) is not str:
                    raise _NodeError(f"attrs[{j}]: expected an object with a string 'name'", node_id)
                ty = a.get("type")
                attr(a["name"], a.get("value"), sattrs[j].get("value"), ty if type(ty) is str else None)
            for k, v in o.items():
                if k not in _NESTED_KEYS:
                    sparse_k.append((k, self._spec(v, sk[k])))
        else:
            for k, v in o.items():
                if k not in _FLAT_KEYS:
                    attr(k, v, sk[k], None)
        descs: list = []
        for io in (0, 1):
            key = "inputs" if io == 0 else "outputs"
            pre = "input" if io == 0 else "output"
            if nested:
                d = o.get(key)
                if d is None:
                    continue
                if type(d) is not dict:
                    raise _NodeError(
                        f"expected '{key}' to be an object with values/shapes/types, got {_tname(d)}", node_id
                    )
                sd = sk[key]
                where = key + "."
                vals, types, shapes, strides = (
                    d.get("values", []),
                    d.get("types", []),
                    d.get("shapes"),
                    d.get("strides"),
                )
                svals, sshapes, sstrides = sd.get("values"), sd.get("shapes"), sd.get("strides")
                names = ("values", "types", "shapes", "strides")
            else:
                if key not in o:
                    continue
                where = ""
                vals, types = o.get(key), o.get(pre + "_types", [])
                shapes, strides = o.get(pre + "_shapes"), o.get(pre + "_strides")
                svals, sshapes, sstrides = sk.get(key), sk.get(pre + "_shapes"), sk.get(pre + "_strides")
                names = (key, pre + "_types", pre + "_shapes", pre + "_strides")
            for nm_, lst in zip(names, (vals, types, shapes, strides)):
                if lst is not None and type(lst) is not list:
                    raise _NodeError(f"expected '{where}{nm_}' to be a list, got {_tname(lst)}", node_id)
            n = len(types)
            for nm_, lst in zip(names, (vals, shapes, strides)):
                if lst is not None and len(lst) != n:
                    raise _NodeError(f"'{where}{nm_}' has {len(lst)} entries but '{where}{names[1]}' has {n}", node_id)
            for arg, t in enumerate(types):
                if type(t) is not str:
                    raise _NodeError(f"'{where}{names[1]}[{arg}]': expected a type string, got {_tname(t)}", node_id)
                if "Tensor" in t:
                    self._tensors(
                        t,
                        vals[arg],
                        svals[arg],
                        shapes[arg] if shapes is not None else None,
                        sshapes[arg] if shapes is not None else None,
                        strides[arg] if strides is not None else None,
                        sstrides[arg] if strides is not None else None,
                        io,
                        arg,
                        [0],
                        descs,
                    )
        return nested, cols, name_code, ops_code, descs, sparse_a, sparse_k

    @staticmethod
    def _dims(v, sv):
        """Slots of a list of integers (a shape or strides), or None."""
        if type(v) is not list:
            return None
        for x, s in zip(v, sv):
            if type(x) is not int or s < 0:
                return None
        return tuple(sv)

    def _tensors(self, t, v, sv, sh, ssh, st, sst, io, arg, counter, descs) -> None:
        if t.startswith("Tensor"):
            if type(v) is list and 5 <= len(v) <= 6:
                for k in range(5):
                    if type(v[k]) is not int or sv[k] < 0:
                        return
                if len(v) == 6:
                    if type(v[5]) is not str:
                        return
                    dev = v[5]
                else:
                    dev = ""
                descs.append((io, arg, counter[0], sv[:5], dev, t, self._dims(sh, ssh), self._dims(st, sst)))
                counter[0] += 1
            return
        if type(v) is not list:
            return
        ets = _elem_types(t)
        if not ets:
            return
        last = len(ets) - 1
        shl = type(sh) is list
        stl = type(st) is list
        for j, x in enumerate(v):
            tj = ets[j] if j <= last else ets[last]  # lists over 4096 entries are truncated
            if "Tensor" not in tj:
                continue
            a = shl and j < len(sh)
            b = stl and j < len(st)
            self._tensors(
                tj,
                x,
                sv[j],
                sh[j] if a else None,
                ssh[j] if a else None,
                st[j] if b else None,
                sst[j] if b else None,
                io,
                arg,
                counter,
                descs,
            )


def _safe_id(o) -> int | None:
    v = o.get("id") if isinstance(o, dict) else None
    return v if type(v) is int else None


# ---------------------------------------------------------------------------------------------
# input


class _Blocks:
    """Decompressed data of a file in pieces. Data read before an error is handed out before the error.

    Plain files are read into one reused buffer (no fresh memory per block). gzip is
    decompressed ahead on a thread (stream.Prefetch).
    """

    def __init__(self, path: str, block: int, limits: Limits | None):
        f, gz = open_binary(path, limits)
        self.gz = gz
        self._f = f
        self._prefetch = Prefetch(f.raw, owner=f) if gz else None
        if not gz:
            self._tmp = bytearray(block)
            self._view = memoryview(self._tmp)

    def next(self):
        """Next piece of data (bytes-like, valid until the next call); empty at the end.

        Raises the reader's error (a TraceFormatError) once the data before it was handed out.
        """
        if self._prefetch is None:
            n = self._f.readinto(self._tmp)
            return self._view[:n]
        return self._prefetch.next()

    def close(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()
        else:
            self._f.close()


class _Stop(Exception):
    """Salvage: stop reading nodes here."""

    def __init__(self, error: TraceFormatError):
        super().__init__(str(error))
        self.error = error


class _Reader:
    def __init__(self, path: str, salvage: bool, block: int, limits: Limits | None):
        self.path = path
        self.salvage = salvage
        self.block = block
        self.src = _Blocks(path, block, limits)
        self.kind = "decompressed byte" if self.src.gz else "byte"
        self.raw = bytearray()  # the text not consumed yet (reused: no fresh memory per block)
        self.base = 0  # file offset of raw[0]
        self.eof = False
        self.gz_error: TraceFormatError | None = None
        self._text: str | None = None
        self.tb = _Tables()
        self.count = 0  # nodes stored
        self.out_tm: list[np.ndarray] = []
        self.out_ints: list[np.ndarray] = []
        self.objs: list[bytes] = []
        self.pend_s: list[int] = []  # exact-mode pieces waiting for extraction (start, end)
        self.pend_e: list[int] = []
        self.metadata: dict[str, Any] = {}

    # -------------------------------------------------------------- buffer
    def more(self) -> bool:
        """Append about one block of data; False at the end of the file."""
        if self.eof:
            return False
        got = 0
        while got < self.block:
            try:
                blk = self.src.next()
            except TraceFormatError as e:
                if self.salvage or "ends early" in e.reason:
                    self.gz_error = e  # a truncated gzip stream: read the JSON up to there
                    blk = b""
                else:
                    raise
            if not len(blk):
                if not got:
                    self.eof = True
                    return False
                break
            self.raw += blk
            got += len(blk)
        self._text = None
        return True

    def drop(self, n: int) -> None:
        if n:
            del self.raw[:n]
            self.base += n
            self._text = None

    def text(self) -> str:
        if self._text is None:
            self._text = self.raw.decode("latin-1")  # one char per byte: offsets stay byte offsets
        return self._text

    def error(self, msg: str, rel: int | None = None, node_id=None) -> TraceFormatError:
        off = None if rel is None else self.base + rel
        if self.gz_error is not None and "ends early" in self.gz_error.reason:
            msg += " (the gzip stream is truncated too)"
        return TraceFormatError(self.path, msg, offset=off, offset_kind=self.kind, node_id=node_id)

    def skip_ws(self, pos: int) -> int:
        """Position of the next non-space byte (reading more as needed); len(raw) at the end of the file."""
        while True:
            p = _WS.match(self.raw, pos).end()
            if p < len(self.raw) or not self.more():
                return p

    def scan(self, pos: int, what: str):
        """Exactly decode one JSON value at pos (reading more as needed): (value, end)."""
        while True:
            try:
                return _SCAN(self.text(), pos)
            except StopIteration as e:
                epos, reason = e.value, f"expected {what}"
            except json.JSONDecodeError as e:
                epos, reason = e.pos, e.msg
            n = len(self.raw)
            if not self.eof and (epos >= n - _INCOMPLETE_SLACK or reason.startswith("Unterminated string")):
                if self.more():
                    continue
            if self.eof and epos >= n - 1:
                reason = f"{reason}: the file ends inside {what} (truncated)"
            raise self.error(f"invalid JSON: {reason}", epos)

    def try_scan(self, pos: int) -> int | None:
        """End of the JSON value at pos; None if it may just be cut off by the end of the buffer."""
        try:
            return _SCAN(self.text(), pos)[1]
        except StopIteration as e:
            epos, reason = e.value, ""
        except json.JSONDecodeError as e:
            epos, reason = e.pos, e.msg
        if not self.eof and (epos >= len(self.raw) - _INCOMPLETE_SLACK or reason.startswith("Unterminated string")):
            return None
        return self.scan(pos, "a node object")[1]  # raises the error

    def expect(self, pos: int, chars: bytes, what: str) -> tuple[int, int]:
        """Skip spaces, check the next byte is one of chars: (byte, position after it)."""
        pos = self.skip_ws(pos)
        if pos >= len(self.raw):
            raise self.error(f"invalid JSON: the file ends where {what} was expected (truncated)", pos)
        c = self.raw[pos]
        if c not in chars:
            raise self.error(f"invalid JSON: expected {what}, found {chr(c)!r}", pos)
        return c, pos + 1

    # -------------------------------------------------------------- document
    def read(self) -> HostTrace:
        try:
            return self._read()
        finally:
            self.src.close()

    def _read(self) -> HostTrace:
        self.more()
        pos = self.skip_ws(0)
        if pos >= len(self.raw):
            raise self.error("the file is empty", 0)
        if self.raw[pos] != 0x7B:
            raise self.error("not an execution trace: expected a JSON object", pos)
        pos, found = self.members(pos + 1, first=True)
        stop: _Stop | None = None
        if found:
            try:
                pos = self.nodes(pos)
                pos, again = self.members(pos, first=False)
                if again:
                    raise self.error("a second 'nodes' array", pos)
                pos = self.skip_ws(pos)
                if pos < len(self.raw):
                    raise self.error("invalid JSON: extra data after the document", pos)
            except _Stop as s:
                stop = s
            except TraceFormatError as e:
                if not self.salvage:
                    raise
                stop = _Stop(e)
        elif not self.salvage:
            raise self.error("no 'nodes' array in the document")
        if stop is not None:
            try:  # complete nodes scanned before the break
                self.flush()
            except (_Stop, TraceFormatError):
                pass
        if self.gz_error is not None and stop is None:
            if not self.salvage:
                raise self.gz_error
            stop = _Stop(self.gz_error)
        host = self.finish(salvaged=stop is not None)
        if stop is not None:
            warnings.warn(
                f"{self.path}: {stop.error.reason} at {stop.error.offset_kind} offset {stop.error.offset}; "
                f"kept the {len(host)} complete nodes before it",
                TruncatedTraceWarning,
                stacklevel=3,
            )
        return host

    def members(self, pos: int, first: bool) -> tuple[int, bool]:
        """Parse top-level members into metadata until the 'nodes' array opens or the object closes.

        Returns (position after '[' of nodes, True) or (position after the closing '}', False).
        """
        if first:
            p = self.skip_ws(pos)
            if p < len(self.raw) and self.raw[p] == 0x7D:
                return p + 1, False
        else:
            c, pos = self.expect(pos, b",}", "',' or '}' after the nodes array")
            if c == 0x7D:
                return pos, False
        while True:
            _, p = self.expect(pos, b'"', "a key string")
            key, p = self.scan(p - 1, "a key string")
            _, p = self.expect(p, b":", "':'")
            if key == "nodes":
                _, p = self.expect(p, b"[", "'[' opening the nodes array")
                return p, True
            p = self.skip_ws(p)
            val, p = self.scan(p, f"the value of '{key}'")
            self.metadata[key] = val
            c, pos = self.expect(p, b",}", "',' or '}'")
            if c == 0x7D:
                return pos, False

    # -------------------------------------------------------------- nodes
    def nodes(self, pos: int) -> int:
        """Read the nodes array from just after '['. Returns the position after ']'."""
        pos = self.skip_ws(pos)
        if pos < len(self.raw) and self.raw[pos] == 0x5D:
            return pos + 1
        # the first node exactly; the separator between nodes 1 and 2 drives the fast path
        status, pos, sep_start = self.exact(pos, one=True)
        if status == "end":
            return pos
        sep = None
        if sep_start is not None:
            s = bytes(self.raw[sep_start - 1 : pos + 1])  # "}" + spaces "," spaces + "{"
            if s.startswith(b"}") and s.endswith(b"{") and s.strip(b"} \t\r\n{") == b",":
                sep = s
        while True:
            if sep is not None:
                status, pos = self.split(pos, sep)
            else:
                status, pos, _ = self.exact(pos)
            if status == "end":
                return pos
            # everything before pos is done
            self.flush()
            self.drop(pos)
            pos = 0
            if status == "resume":  # back to the fast path after a few exact nodes
                continue
            if not self.more():
                # end of file: the rest (last node, "]", tail) exactly
                status, pos, _ = self.exact(pos, final=True)
                return pos

    def split(self, pos: int, sep: bytes) -> tuple[str, int]:
        """Fast path over the buffer from the '{' at pos. Returns ("more", pos) or ("end", pos)."""
        pos = _WS.match(self.raw, pos).end()
        if pos >= len(self.raw):
            return "more", pos
        if self.raw[pos] != 0x7B:  # "]" or something unexpected
            status, p, _ = self.exact(pos)
            return status, p
        tb = self.tb
        cut = err = None
        if _native is not None:  # cut and keyed in C: Python sees each distinct key once
            starts, lens, codes, first = (
                np.frombuffer(x, t)
                for x, t in zip(_native.split_pieces(self.raw, pos + 1, sep), (np.int64, np.int64, np.int32, np.int64))
            )
            k = starts.size
            if k <= 0:
                return "more", pos
            keys = [
                bytes(self.raw[a : a + n]).translate(_MASK)
                for a, n in zip(starts[first].tolist(), lens[first].tolist())
            ]
            tids_u = [tb.tmap.get(key) for key in keys]
            for u, j in enumerate(first.tolist()):  # new keys, in order of first appearance
                if tids_u[u] is None:
                    try:
                        tids_u[u] = self.compile(int(starts[j]), int(starts[j] + lens[j]), keys[u], self.count + j)
                    except TraceFormatError as e:
                        err = e
                    if tids_u[u] is None:
                        cut = j
                        break
            tids = np.array([-1 if t is None else t for t in tids_u], np.int64)[codes[:cut]]
            cut = k if cut is None else cut
        else:
            starts, lens, tids, cut, err = self._split_python(pos, sep)
            if starts is None:
                return "more", pos
            k = starts.size
        if cut:
            self.extract(starts[:cut], lens[:cut], np.asarray(tids[:cut], np.int64))
        if err is not None:
            self.fail(err)
        if cut < k:  # not one JSON object: rescan exactly from there
            # pieces before it were fine: an odd separator, go back to splitting soon; else stay exact
            status, p, _ = self.exact(int(starts[cut]) - 1, limit=8 if cut else None)
            return status, p
        return "more", int(starts[k - 1] + lens[k - 1] + len(sep)) - 1

    def _split_python(self, pos: int, sep: bytes) -> tuple:
        """split_pieces without the C kernel: (starts, lens, template ids, cut, error)."""
        if pos == 0:  # split the whole buffer (no copy), then drop the first "{"
            parts = self.raw.split(sep)
            parts[0] = parts[0][1:]
        else:
            parts = self.raw[pos + 1 :].split(sep)
        k = len(parts) - 1
        if k <= 0:
            return None, None, None, 0, None
        del parts[-1]
        tb = self.tb
        lens = np.fromiter(map(len, parts), np.int64, k)
        parts = list(map(_MASKED, map(bytes, parts)))  # the template keys
        starts = np.empty(k, np.int64)
        starts[0] = pos + 1
        np.cumsum(lens[:-1] + len(sep), out=starts[1:])
        starts[1:] += pos + 1
        tids = list(map(tb.tmap.get, parts))
        cut = k
        err = None
        if None in tids:
            j = tids.index(None)
            while True:
                t = tb.tmap.get(parts[j])
                if t is None:
                    s = int(starts[j])
                    try:
                        t = self.compile(s, s + len(parts[j]), parts[j], self.count + j)
                    except TraceFormatError as e:
                        err = e
                        t = None
                    if t is None:
                        cut = j
                        break
                tids[j] = t
                try:
                    j = tids.index(None, j + 1)
                except ValueError:
                    break
        return starts, lens, tids, cut, err

    def exact(
        self, pos: int, one: bool = False, final: bool = False, limit: int | None = None
    ) -> tuple[str, int, int | None]:
        """Nodes one by one with the JSON scanner, from the '{' (or spaces) at pos.

        Stops at "]" ("end"), when the next node is not complete in the buffer ("more"; unless
        `final`), after one node if `one` (then also returns where the separator begins), or
        after `limit` nodes ("resume").
        """
        done = 0
        while True:
            if limit is not None and done >= limit:
                return "resume", _WS.match(self.raw, pos).end(), None
            pos = self.skip_ws(pos) if final or one else _WS.match(self.raw, pos).end()
            if pos >= len(self.raw):
                if final or self.eof:
                    raise self.error("the file ends inside the nodes array (truncated)", pos)
                return "more", pos, None
            c = self.raw[pos]
            if c != 0x7B:
                if c == 0x5D and not one:
                    self.flush()
                    return "end", pos + 1, None
                raise self.error(f"invalid JSON: expected a node object, found {chr(c)!r}", pos)
            if not (final or one):
                end = self.try_scan(pos)
                if end is None:  # not complete in the buffer
                    return "more", pos, None
            else:
                try:
                    _, end = self.scan(pos, "a node object")
                except TraceFormatError as e:
                    self.fail(e)
            self.pend_s.append(pos + 1)
            self.pend_e.append(end - 1)
            if final:
                self.flush()
            c, p = self.expect(end, b",]", "',' or ']' after a node")
            if c == 0x5D:
                self.flush()
                return "end", p, None
            if one:
                self.flush()
                q = self.skip_ws(p)
                return "next", q, end
            pos = p
            done += 1

    def flush(self) -> None:
        if not self.pend_s:
            return
        starts = np.array(self.pend_s, np.int64)
        ends = np.array(self.pend_e, np.int64)
        self.pend_s, self.pend_e = [], []
        tb = self.tb
        tids = np.empty(starts.size, np.int64)
        for j in range(starts.size):
            s, e = int(starts[j]), int(ends[j])
            key = bytes(self.raw[s:e]).translate(_MASK)
            t = tb.tmap.get(key)
            if t is None:
                try:
                    t = self.compile(s, e, key, self.count + j)
                except TraceFormatError as err:
                    if j:
                        self.extract(starts[:j], ends[:j] - starts[:j], tids[:j])
                    self.fail(err)
                if t is None:  # cannot happen: the scanner accepted it
                    if j:
                        self.extract(starts[:j], ends[:j] - starts[:j], tids[:j])
                    self.fail(self.error("invalid JSON in a node", s - 1))
            tids[j] = t
        self.extract(starts, ends - starts, tids)

    def fail(self, err: TraceFormatError):
        if self.salvage:
            raise _Stop(err)
        raise err

    def compile(self, s: int, e: int, key: bytes, index: int, register: bool = True) -> int | None:
        piece = bytes(self.raw[s:e])
        try:
            if register:
                return self.tb.lookup_miss(piece, key)
            return self.tb.compile(piece, key, register=False)
        except UnicodeDecodeError as u:
            raise self.error(f"node #{index}: invalid UTF-8 ({u.reason})", s + u.start) from None
        except _NodeError as ne:
            raise self.error(f"node #{index}: {ne.message}", s - 1, node_id=ne.node_id) from None

    def extract(self, starts: np.ndarray, lens: np.ndarray, tids: np.ndarray) -> None:
        """Read the numbers of complete nodes (pieces at starts, templates tids) vectorized; store them."""
        tb = self.tb
        k = starts.size
        a = np.frombuffer(self.raw, np.uint8)
        cnt = tb.i_cnt.v[tids]
        idx = ranges(tb.i_ptr.v[tids], cnt)
        pos = np.repeat(starts, cnt) + tb.i_start.v[idx]
        ln = tb.i_len.v[idx]
        vals = a[pos].astype(np.int64)
        vals -= 48
        multi = np.flatnonzero(ln > 1)
        if multi.size:
            bad = multi[vals[multi] == 0]
            if bad.size:  # "01" is no JSON number
                j = int(np.searchsorted(np.cumsum(cnt), bad[0], side="right"))
                if j:
                    self.extract(starts[:j], lens[:j], tids[:j])
                self.fail(self.error(f"node #{self.count}: invalid JSON number (leading zero)", int(pos[bad[0]])))
            sel = multi
            d = 1
            while sel.size:
                vals[sel] = vals[sel] * 10 + a[pos[sel] + d] - 48
                d += 1
                sel = sel[ln[sel] > d]
        neg = tb.i_neg.v[idx]
        if neg.any():
            np.negative(vals, out=vals, where=neg)
        # digits inside strings must be the template's
        vcnt = tb.v_cnt.v[tids]
        if vcnt.any():
            vidx = ranges(tb.v_ptr.v[tids], vcnt)
            vpos = np.repeat(starts, vcnt) + tb.v_pos.v[vidx]
            got = a[vpos]
            bad = got != tb.v_byte.v[vidx]
            if bad.any():
                vend = np.cumsum(vcnt)
                nodes = np.unique(np.searchsorted(vend, np.flatnonzero(bad), side="right"))
                for j in nodes.tolist():
                    j0 = int(vend[j] - vcnt[j])
                    base = int(tids[j])
                    vk = (base, got[j0 : int(vend[j])].tobytes())
                    v = tb.vmap.get(vk)
                    if v is None:
                        s = int(starts[j])
                        try:
                            v = self.compile(s, s + int(lens[j]), tb.keys[base], self.count + j, register=False)
                        except TraceFormatError as err:
                            v, fail = None, err
                        else:
                            fail = (
                                None
                                if v is not None
                                else self.error(f"node #{self.count + j}: invalid JSON in a node", s - 1)
                            )
                        if fail is not None:
                            if j:
                                self.extract(starts[:j], lens[:j], tids[:j])
                            self.fail(fail)
                        tb.vmap[vk] = v
                    tids[j] = v
        # numbers kept as text
        ocnt = tb.o_cnt.v[tids]
        if ocnt.any():
            raw = self.raw
            for j in np.flatnonzero(ocnt).tolist():
                t = int(tids[j])
                p, c = int(tb.o_ptr.v[t]), int(tb.o_cnt.v[t])
                s0 = int(starts[j])
                for s, e in zip(tb.o_start.v[p : p + c].tolist(), tb.o_end.v[p : p + c].tolist()):
                    self.objs.append(bytes(raw[s0 + s : s0 + e]))
        self.out_tm.append(tids.astype(np.int32))
        self.out_ints.append(vals)
        self.count += k

    # -------------------------------------------------------------- columns
    def finish(self, salvaged: bool) -> HostTrace:
        tb = self.tb
        n = self.count
        tm = np.concatenate(self.out_tm) if self.out_tm else np.zeros(0, np.int32)
        ints = np.concatenate(self.out_ints) if self.out_ints else np.zeros(0, np.int64)
        self.out_tm, self.out_ints = [], []
        int_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(tb.i_cnt.v[tm], out=int_ptr[1:])
        obj_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(tb.o_cnt.v[tm], out=obj_ptr[1:])
        nr = tb.n_roles
        cols = tb.cols.v.reshape(nr, _NCOL) if nr else np.zeros((0, _NCOL), np.int32)
        rl = tb.role.v[tm] if n else np.zeros(0, np.int32)
        rows_all = np.arange(n, dtype=np.int64)
        col_vals = []
        present = np.zeros(n, np.uint8)
        for c in range(_NCOL):
            sl = cols[rl, c]
            has = sl >= 0
            out = np.full(n, -1 if c == 1 else 0, np.int64)
            r = rows_all[has]
            out[r] = ints[int_ptr[r] + sl[r]]
            col_vals.append(out)
            if c >= 2:
                present |= has.astype(np.uint8) << np.uint8(c - 2)
        # tensors
        dcnt = tb.d_cnt.v[rl].astype(np.int64)
        t_indptr = np.zeros(n + 1, np.int64)
        np.cumsum(dcnt, out=t_indptr[1:])
        d = ranges(tb.d_ptr.v[rl], dcnt)
        t_row = np.repeat(rows_all, dcnt)
        tbase = int_ptr[t_row]
        f = [ints[tbase + tb.d_f[j].v[d]] for j in range(5)]
        sh_indptr, sh_dims, has_sh = self._dims(ints, tbase, tb.d_sh_ptr.v[d], tb.d_sh_cnt.v[d], tb.sh_slots.v)
        st_indptr, st_dims, has_st = self._dims(ints, tbase, tb.d_st_ptr.v[d], tb.d_st_cnt.v[d], tb.st_slots.v)
        tensors = HostTensors(
            indptr=t_indptr,
            row=t_row,
            output=tb.d_io.v[d].astype(bool),
            arg=tb.d_arg.v[d].copy(),
            elem=tb.d_elem.v[d].copy(),
            tensor_id=f[0],
            storage_id=f[1],
            offset=f[2],
            numel=f[3],
            itemsize=f[4],
            device=tb.d_dev.v[d].copy(),
            devices=tb.devices,
            type=tb.d_type.v[d].copy(),
            types=tb.ttypes,
            shape_indptr=sh_indptr,
            shape_dims=sh_dims,
            has_shape=has_sh,
            stride_indptr=st_indptr,
            stride_dims=st_dims,
            has_stride=has_st,
        )
        layouts = tb.r_layout.v[rl]
        lay = set(np.unique(layouts).tolist())
        layout = "mixed" if len(lay) > 1 else (FLAT if lay == {1} else NESTED)
        if ints.size and ints.min() >= -(1 << 31) and ints.max() < (1 << 31):
            ints = ints.astype(np.int32)  # the number store, kept for node(i): half the memory
        schema = self.metadata.get("schema")
        host = HostTrace(
            path=self.path,
            schema=schema if isinstance(schema, str) else None,
            layout=layout,
            metadata=self.metadata,
            ids=col_vals[0],
            name=tb.r_name.v[rl],
            names=tb.names,
            parent=col_vals[1],
            rf_id=col_vals[2],
            fw_parent=col_vals[3],
            seq_id=col_vals[4],
            scope=col_vals[5],
            tid=col_vals[6],
            fw_tid=col_vals[7],
            present=present,
            op_schema=tb.r_ops.v[rl],
            strings=tb.strings,
            tensors=tensors,
            salvaged=salvaged,
            layouts=layouts,
            _tm=tm,
            _ints=ints,
            _int_ptr=int_ptr,
            _objs=self.objs,
            _obj_ptr=obj_ptr,
            _tables=tb,
        )
        host._attrs = {nm: self._sparse(host, rl, per_r, nm, True) for nm, per_r in tb.attrs.items()}
        host._keys = {nm: self._sparse(host, rl, per_r, nm, False) for nm, per_r in tb.xkeys.items()}
        host.process_groups = self._process_groups(host)
        return host

    @staticmethod
    def _dims(ints, tbase, ptr, cnt, slots):
        has = cnt >= 0
        c = np.where(has, cnt, 0).astype(np.int64)
        indptr = np.zeros(c.size + 1, np.int64)
        np.cumsum(c, out=indptr[1:])
        sidx = ranges(ptr, c)
        dims = ints[np.repeat(tbase, c) + slots[sidx]].astype(np.int64) if sidx.size else np.zeros(0, np.int64)
        return indptr, dims, has

    def _sparse(self, host: HostTrace, rl: np.ndarray, per_r: dict, name: str, is_attr: bool) -> _Sparse:
        tb = self.tb
        nr = tb.n_roles
        kinds = {spec[0] for spec in per_r.values()}
        rids = np.fromiter(per_r.keys(), np.int64, len(per_r))
        sel = np.zeros(nr, bool)
        sel[rids] = True
        rows = np.flatnonzero(sel[rl])
        ty = tb.attr_types.get(name) if is_attr else None
        rt = rl[rows]
        if kinds == {"i"}:
            slot = np.full(nr, -1, np.int64)
            slot[rids] = [spec[1] for spec in per_r.values()]
            vals = host._ints[host._int_ptr[rows] + slot[rt]].astype(np.int64)
            return _Sparse(rows, "int", vals, ty)
        if kinds == {"s"}:
            code = np.full(nr, -1, np.int32)
            code[rids] = [spec[1] for spec in per_r.values()]
            return _Sparse(rows, "str", code[rt], ty)
        vals = np.empty(rows.size, object)
        for j, (r, t) in enumerate(zip(rows.tolist(), rt.tolist())):
            kind, payload = per_r[t]
            if kind == "i":
                v = int(host._ints[host._int_ptr[r] + payload])
            elif kind == "s":
                v = tb.strings[payload]
            elif kind == "c":
                v = payload
            elif kind == "o":
                v = json.loads(host._objs[host._obj_ptr[r] + payload])
            else:  # a list or object: take it from the rebuilt node
                d = host.node(r)
                if is_attr and host.layouts[r] == 0:
                    v = None
                    for a in d.get("attrs", []):
                        if a.get("name") == name:
                            v = a.get("value")
                else:
                    v = d.get(name)
            vals[j] = v
        return _Sparse(rows, "obj", vals, ty)

    def _process_groups(self, host: HostTrace) -> list[dict]:
        groups: list[dict] = []
        for r in host.pg_init_rows.tolist():
            values = host.io(r)[0]["values"]
            if not values or not isinstance(values[0], str):
                raise TraceFormatError(
                    self.path,
                    f"node #{r}: '{PROCESS_GROUP_INIT}' should carry a JSON string describing the process groups",
                    node_id=int(host.ids[r]),
                )
            try:
                desc = json.loads(values[0])
            except ValueError as e:
                raise TraceFormatError(
                    self.path,
                    f"node #{r}: the process-group description is not valid JSON ({e})",
                    node_id=int(host.ids[r]),
                ) from None
            if isinstance(desc, dict):
                desc = [desc]
            if not isinstance(desc, list) or not all(isinstance(g, dict) for g in desc):
                raise TraceFormatError(
                    self.path,
                    f"node #{r}: the process-group description should be a list of objects",
                    node_id=int(host.ids[r]),
                )
            groups.extend(desc)
        return groups


def read_host_trace(
    path: str | os.PathLike, *, salvage: bool = False, limits: Limits | None = None, block_size: int = BLOCK
) -> HostTrace:
    """Read a PyTorch host execution trace (ET JSON, plain or gzip) into a `HostTrace`.

    Any schema from 1.0.1 (flat) to 1.1.1 (nested) and later ones with either layout; the
    version string is recorded, never checked. Bad input raises a one-line `TraceFormatError`
    naming the file, the byte offset (of the decompressed data for gzip) and the node. With
    ``salvage=True`` a truncated or broken file gives the complete nodes before the break and a
    `TruncatedTraceWarning` saying how many were kept.
    """
    path = os.fspath(path)
    enabled = gc.isenabled()
    gc.disable()  # nothing read here forms cycles; collections would only rescan the tables
    try:
        return _Reader(path, salvage, max(int(block_size), 64), limits).read()
    finally:
        if enabled:
            gc.enable()
