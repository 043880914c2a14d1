"""The data model of a PyTorch host execution trace: the columns `read_host_trace` fills.

It exists so that code using a host trace (the converter, replay) depends on what a trace
holds, not on how the JSON is scanned: `HostTrace` (one row per node: ids, names, call-tree
parents, the integer attribute columns, op schemas, sparse attributes, process groups) and
`HostTensors` (every tensor argument, flattened, CSR by node), with the views that rebuild a
node as ``json.load`` gives it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...schema.trace import id_index, rows_of

NESTED = "nested"  # schema >= 1.0.2: inputs/outputs dicts, attrs list, ctrl_deps
FLAT = "flat"  # schema 1.0.1: parent, input_shapes/input_types, attributes as plain keys

#: Integer node attributes kept as dense columns (with a presence bit each).
INT_COLUMNS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")

PROCESS_GROUP_INIT = "## process_group:init ##"
_PROCESS_NAMES = ("[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_graph|process]")
_THREAD_NAMES = ("[pytorch|profiler|execution_trace|thread]", "[pytorch|profiler|execution_graph|thread]")


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
class SparseColumn:
    """One attribute (or unknown node key) over the rows that have it."""

    rows: np.ndarray  # int64, ascending
    kind: str  # "int" (int64 values), "str" (int32 codes into HostTrace.strings) or "obj" (objects)
    values: np.ndarray
    type: str | None = None  # declared attr type ("uint64", "string", ...), first seen


class NameColumn:
    """Op names as a code per row (``name``) into a table (``names``): what the converter looks
    names up in, shared by the host trace and the Kineto-only view of one."""

    names: list[str]
    name: np.ndarray

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


def _no_rows() -> np.ndarray:
    return np.zeros(0, np.int64)


@dataclass(eq=False)
class HostTrace(NameColumn):
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
    layouts: np.ndarray = field(default_factory=_no_rows, repr=False)  # int8 per node: 0 nested, 1 flat
    _tm: np.ndarray = field(default_factory=_no_rows, repr=False)
    _ints: np.ndarray = field(default_factory=_no_rows, repr=False)
    _int_ptr: np.ndarray = field(default_factory=_no_rows, repr=False)
    _objs: list = field(default_factory=list, repr=False)
    _obj_ptr: np.ndarray = field(default_factory=_no_rows, repr=False)
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

    def _values(self, sp: SparseColumn) -> np.ndarray:
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
