"""Kineto (PyTorch profiler) traces alone -> a Chakra job, for users without host execution traces.

Most users have only what the profiler writes (what Holistic Trace Analysis reads). This module
builds the same job `convert.pytorch` builds from a host trace plus its Kineto trace, from the
Kineto trace alone: the Kineto CPU events (``cpu_op`` / ``user_annotation``) play the host ops,
so the PyTorch converter's rules apply unchanged (which ops become nodes, `[host]` gaps, thread
and stream order, launch edges, synchronization edges, gloo worker-thread collectives,
``TIME_ORIGIN`` / ``STEP_BOUNDS``, ``pg_config``), and both conversions of one run agree.

What is read, and how reliably (per rank, `KinetoRankReport` says which way each was found):

- **Op nesting** (exact): CPU events nested by time per thread (`io.kineto.interval_parents`); the
  outermost ops inside the ``ProfilerStep#N`` windows become nodes (the span of the CPU events
  when there are none).
- **GPU work** (exact where recorded): kernels / memcpy / memset per (device, stream), each
  after the CPU op whose runtime call launched it (``correlation`` -> runtime call -> enclosing
  CPU op, `link.link`); a host op that waited in ``cudaStreamSynchronize`` /
  ``cudaDeviceSynchronize`` / a blocking copy depends on the GPU work that had ended by then;
  where the profiler recorded ``Stream Wait Event``s (``enable_cuda_sync_events``), the first
  GPU op on the waiting stream after the wait depends on the last one on the awaited stream.
- **Collective type**: from the op name (``c10d::allreduce_``, ``gloo:all_gather``,
  ``nccl:all_reduce``) or the NCCL kernel name (``ncclDevKernel_AllReduce_...``), by
  `collectives.classify`: exact.
- **Message size**: exact where ``record_param_comms`` recorded ``In msg nelems`` and
  ``dtype`` (NCCL jobs of recent PyTorch). Otherwise from the recorded input shapes
  (``Input Dims``, needs ``record_shapes=True``) of the c10d op: the element count is exact; a
  ``TensorList`` argument carries no dtype in Kineto, so the element size is taken from the
  backend op that ran it (``gloo:all_reduce`` records ``float``), else from the op's other
  tensors, else assumed 4 bytes (float32; counted as ``assumed_dtype``). Without shapes the
  size is 0 (``unknown``).
- **Backend op <-> c10d op** (gloo runs the collective on a worker thread): the backend op
  nested in a c10d op of the same kind, else the earliest unpaired c10d op of the same kind and
  element count that started before it (gloo serves a group's work in order).
- **Send/recv peers and tags**: the c10d op's ``Concrete Inputs`` (the peer rank argument, as
  the program passed it: the rank within the process group). Exact where recorded.
- **Process groups**: ``distributedInfo.pg_config``; gloo collectives name no group, and are
  assigned to the declared groups by matching the ranks' collective sequences
  (`schema.groups.resolve_unnamed_groups`, as for host traces).
- **Ranks**: ``distributedInfo.rank``, else the ``rank<r>`` in the file name, else the order of
  the files; the ranks' clocks are placed by ``baseTimeNanoseconds`` (``TIME_ORIGIN``).
- **FLOPs and bytes** of COMP nodes: from ``Input Dims`` / ``Input type`` where
  ``record_shapes`` was on. Kineto records inputs only, so bytes count inputs (the host trace
  adds outputs), and an op whose FLOPs depend on its output shape is costed from its inputs.

A GPU-only trace (runtime calls and GPU activity, no CPU op: the profiler ran without CPU
activities, or a tool kept the device side) is still a trace: its job is the GPU activities, one
node each on its stream, in stream order (no host node exists to launch them), in a window that
is the whole recording; the report says the host side was not recorded (`host_recorded`). A
file with neither CPU ops nor GPU activity is refused, naming what it holds.

A folder of Kineto traces only (``rank<r>.kineto.json[.gz]``, no host traces) opens with
`Workload.open` through this converter (`read_kineto_folder`), so every command takes it.

Missing compared with a host trace: output shapes, tensor ids (so no data dependencies beyond
execution order), op schemas, argument values other than ``Concrete Inputs``, ops outside the
profiler window, and ops the profiler did not record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import warnings
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from ..io.cache import cached_trace
from ..io.collect_folder import is_kineto_folder, kineto_files, rank_files, trace_rank
from ..io.collective_names import SCALAR_TYPE_BYTES, TENSOR_TYPE_BYTES, classify, is_comm_op_name
from ..io.kineto import CPU_CATS, GPU_CATS, RUNTIME_CATS, KinetoTrace, read_kineto
from ..io.kineto_formats import SYNC_CATS, describe_contents, gpu_only_note, no_gpu_note
from ..io.nesting import interval_parents
from ..io.pytorch_host.model import HostTensors, NameColumn
from ..io.workload import Progress, Workload, register_source, select_ranks
from ..schema.enums import STEP_BOUNDS, TIME_ORIGIN
from ..schema.groups import resolve_unnamed_groups
from ..schema.trace import Trace
from .comm_choice import INPUT_ARG
from .conservation import GpuTime
from .gpu_work import GpuWork
from .host_rows import ns_to_us
from .link import link
from .pytorch import converter_stamp
from .rank_graph import GraphBuilder
from .report import ConversionReport, ConversionWarning, WaitTime

__all__ = [
    "KinetoJobReport",
    "KinetoRankReport",
    "convert_kineto",
    "convert_kineto_trace",
    "read_kineto_folder",
]

# record_param_comms args in Kineto -> the host trace's attribute names (what the converter reads)
_RPC_ARGS = {
    "collective_name": "Collective name",
    "in_msg_nelems": "In msg nelems",
    "out_msg_nelems": "Out msg nelems",
    "dtype": "dtype",
    "in_split_size": "In split size",
    "out_split_size": "Out split size",
    "pg_name": "Process Group Name",
    "pg_desc": "Process Group Description",
    "group_size": "Group size",
}
_LIST_TYPES = ("TensorList", "GenericList")
_STREAM_WAIT = "Stream Wait Event"  # cuda_sync events (profiler's enable_cuda_sync_events)
_ASSUMED_ITEMSIZE = 4  # float32: a TensorList whose dtype nothing in the trace tells
_PAIR_WINDOW = 64  # unpaired c10d ops of a kind a backend op may be paired with (gloo serves in order)


def _wants_args(name: str) -> bool:
    """Events whose recorded arguments the conversion reads: communication and ATen ops."""
    return name.startswith("aten::") or _wants_comm_args(name)


def _wants_comm_args(name: str) -> bool:
    """Only what message sizes, peers, groups and stream waits need (``shapes=False``)."""
    return name in ("record_param_comms", _STREAM_WAIT) or is_comm_op_name(name)


@dataclass
class KinetoRankReport:
    """What one rank's Kineto trace held and how its collectives were sized."""

    rank: int
    path: str
    cpu_ops: int = 0
    threads: int = 0
    gpu_events: dict[str, int] = field(default_factory=dict)  # by category (kernel, gpu_memcpy, ...)
    gpu_nodes: int = 0  # GPU events that became nodes (launched inside the recorded window)
    gpu_time: GpuTime | None = None  # GPU busy time per stream, in the file and kept (None: no GPU work)
    waits: WaitTime = field(default_factory=WaitTime)  # blocked time converted as dependencies
    runtime_calls: int = 0
    sync_markers: dict[str, int] = field(default_factory=dict)  # device-side sync markers by name: not work
    sync_marker_us: float = 0.0  # their summed duration (a stream waiting), not GPU time
    stream_waits: int = 0  # stream-to-stream edges from recorded Stream Wait Events
    steps: int = 0
    nodes: int = 0
    node_types: dict[str, int] = field(default_factory=dict)
    collectives: dict[str, int] = field(default_factory=dict)  # by type, in the converted trace
    collective_sizes: list[tuple[str, int]] = field(default_factory=list)  # (type, bytes) in order
    p2p: dict[str, int] = field(default_factory=dict)  # send / recv nodes
    sizes_from: dict[str, int] = field(default_factory=dict)  # how communication op sizes were found
    comm_kernels: dict[str, int] = field(default_factory=dict)  # communication kernels: library, type and size from
    with_shapes: bool = False  # the profiler recorded input shapes (record_shapes=True)
    host_recorded: bool = True  # False: a GPU-only trace (no CPU ops): nodes are the GPU activities
    span_us: float = 0.0
    steps_us: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["collective_sizes"] = [list(x) for x in self.collective_sizes]
        d["gpu_time"] = self.gpu_time.to_dict() if self.gpu_time is not None else None
        d["waits"] = self.waits.to_dict()
        return d


@dataclass
class KinetoJobReport:
    """Per-rank reports of a Kineto-only conversion, and what was inferred across ranks."""

    ranks: dict[int, KinetoRankReport] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": {str(r): rep.to_dict() for r, rep in self.ranks.items()}, "notes": list(self.notes)}


# ------------------------------------------------------------------------------------ the host view
def _concrete(v: Any) -> Any:
    """A ``Concrete Inputs`` entry (text) as the host trace would hold it: int, bool, float, list, None."""
    if not isinstance(v, str):
        return v
    s = v.strip()
    if s == "":
        return None
    if s in ("True", "False"):
        return s == "True"
    try:
        return json.loads(s)
    except ValueError:
        return s


class _KinetoHost(NameColumn):
    """The Kineto CPU events seen as a host execution trace (what `rank_graph.GraphBuilder` reads): row i
    is CPU event ``rows[i]``; ids are rows, call-tree parents come from nesting by time, tensors
    from the recorded input shapes, attributes from the recorded ``record_param_comms`` args."""

    def __init__(self, kin: KinetoTrace, rows: np.ndarray, start: np.ndarray, end: np.ndarray, tid: np.ndarray):
        self.kin = kin
        self.krow = rows
        self.path = kin.path
        self.schema = "kineto"
        n = rows.size
        self.ids = np.arange(n, dtype=np.int64)
        self.names = kin.names
        self.name = kin.name[rows]
        self.tid = tid
        self.parent = interval_parents(start, end, tid)
        self.rf_id = np.where(kin.rf_id[rows] >= 0, kin.rf_id[rows], 0)
        self._has_rf = kin.rf_id[rows] >= 0
        self.op_schema = np.full(n, -1, np.int32)
        self.strings: list[str] = []
        self.process_groups = [g for g in kin.pg_config if isinstance(g, dict)]
        self.synthetic = np.zeros(n, bool)
        self.args = [kin.args.get(int(r)) or {} for r in rows.tolist()]
        self.with_shapes = np.fromiter(("Input Dims" in a for a in self.args), bool, n)
        self.start = start
        self.sizes_from: Counter = Counter()

    def __len__(self) -> int:
        return int(self.ids.size)

    def has(self, col: str) -> np.ndarray:
        if col == "rf_id":
            return self._has_rf
        return np.zeros(len(self), bool)

    def rows(self, node_ids) -> np.ndarray:
        ids = np.asarray(node_ids, np.int64)
        return np.where((ids >= 0) & (ids < len(self)), ids, -1)

    def row(self, node_id: int) -> int:
        if not 0 <= int(node_id) < len(self):
            raise KeyError(f"no node with id {node_id}")
        return int(node_id)

    def attr(self, i: int, name: str, default: Any = None) -> Any:
        key = _RPC_ARGS.get(name)
        if key is None:
            return default
        v = self.args[int(i)].get(key)
        return default if v is None else v

    def io(self, i: int) -> tuple[dict, dict]:
        a = self.args[int(i)]
        ins = {
            "values": [_concrete(v) for v in a.get("Concrete Inputs") or []],
            "shapes": a.get("Input Dims") or [],
            "types": a.get("Input type") or [],
            "strides": a.get("Input Strides"),
        }
        return ins, {"values": [], "shapes": [], "types": [], "strides": None}

    def stream_waits(self) -> list[tuple[int, int, int, int]]:
        """(device, waiting stream, awaited stream, ns) of each recorded ``Stream Wait Event``."""
        kin = self.kin
        code = kin.name_code(_STREAM_WAIT)
        out = []
        for r in np.flatnonzero(kin.name == code).tolist() if code >= 0 else []:
            a = kin.args.get(r) or {}
            awaited = a.get("wait_on_stream")
            waiting = a.get("stream", int(kin.stream[r]))
            if isinstance(awaited, int) and awaited >= 0 and isinstance(waiting, int) and awaited != waiting:
                dev = a.get("device", int(kin.device[r]))
                out.append((int(dev) if isinstance(dev, int) else -1, waiting, awaited, int(kin.ts[r])))
        return out

    # ------------------------------------------------------------------ tensors
    def build_tensors(self) -> None:
        """`tensors` from ``Input Dims`` / ``Input type``, with the c10d op of each backend op
        (gloo:, nccl:) sharing a tensor id with it, which is how the converter pairs them."""
        pairs = self._pair_backend_ops()
        dtype_of = {c: self._first_item(b) for b, c in pairs.items()}
        rows: list[int] = []
        out_arg: list[int] = []
        elem: list[int] = []
        itemsize: list[int] = []
        types: list[int] = []
        shapes: list[list[int]] = []
        output: list[bool] = []
        type_codes: dict[str, int] = {}
        common = self._common_itemsize()
        for i, a in enumerate(self.args):
            dims, tys = a.get("Input Dims"), a.get("Input type")
            if not isinstance(dims, list) or not isinstance(tys, list):
                continue
            mine0 = len(rows)
            for k, (d, t) in enumerate(zip(dims, tys)):
                if not isinstance(t, str):
                    continue
                if t in TENSOR_TYPE_BYTES and _is_shape(d):
                    rows.append(i)
                    out_arg.append(k)
                    elem.append(0)
                    itemsize.append(TENSOR_TYPE_BYTES[t])
                    types.append(type_codes.setdefault(f"Tensor({t})", len(type_codes)))
                    shapes.append(d)
                    output.append(False)
                elif t in _LIST_TYPES and isinstance(d, list):
                    size, how = self._list_itemsize(i, dtype_of, common)
                    for e, sh in enumerate(d):
                        if _is_shape(sh):
                            rows.append(i)
                            out_arg.append(k)
                            elem.append(e)
                            itemsize.append(size)
                            types.append(type_codes.setdefault(f"{t}({how})", len(type_codes)))
                            shapes.append(sh)
                            output.append(False)
            mine = [shapes[k] for k in range(mine0, len(rows)) if elem[k] == 0]
            out = _matmul_output(self.names[self.name[i]], mine)
            if out is not None:  # Kineto records no outputs: a matmul's FLOPs need its output shape
                rows.append(i)
                out_arg.append(0)
                elem.append(0)
                itemsize.append(itemsize[-1])
                types.append(types[-1])
                shapes.append(out)
                output.append(True)
        n = len(self)
        m = len(rows)
        row = np.asarray(rows, np.int64)
        nd = np.asarray([len(s) for s in shapes], np.int64)
        shape_indptr = np.zeros(m + 1, np.int64)
        np.cumsum(nd, out=shape_indptr[1:])
        dims_flat = np.asarray([x for s in shapes for x in s], np.int64)
        numel = np.asarray([prod(s) if s else 1 for s in shapes], np.int64)
        tensor_id = np.arange(m, dtype=np.int64) + (1 << 40)  # unique: Kineto records no tensor ids
        first = np.searchsorted(row, np.arange(n + 1))
        for b, c in pairs.items():  # the backend op's tensors are the c10d op's input
            key = classify(self.names[self.name[c]]).key
            arg = INPUT_ARG.get(key, 0)
            sel = [k for k in range(first[c], first[c + 1]) if out_arg[k] == arg] or list(range(first[c], first[c + 1]))
            if sel:
                tensor_id[first[b] : first[b + 1]] = tensor_id[sel[0]]
        self.tensors = HostTensors(
            indptr=first.astype(np.int64),
            row=row,
            output=np.asarray(output, bool),
            arg=np.asarray(out_arg, np.int32),
            elem=np.asarray(elem, np.int32),
            tensor_id=tensor_id,
            storage_id=tensor_id.copy(),
            offset=np.zeros(m, np.int64),
            numel=numel,
            itemsize=np.asarray(itemsize, np.int64),
            device=np.zeros(m, np.int16),
            devices=[""],
            type=np.asarray(types, np.int32),
            types=list(type_codes),
            shape_indptr=shape_indptr,
            shape_dims=dims_flat,
            has_shape=np.ones(m, bool),
            stride_indptr=np.zeros(m + 1, np.int64),
            stride_dims=np.zeros(0, np.int64),
            has_stride=np.zeros(m, bool),
        )
        self._count_sizes(pairs)

    def _first_item(self, i: int) -> int | None:
        a = self.args[i]
        for t in a.get("Input type") or []:
            if isinstance(t, str) and t in TENSOR_TYPE_BYTES:
                return TENSOR_TYPE_BYTES[t]
        return None

    def _common_itemsize(self) -> int:
        c: Counter = Counter()
        for a in self.args:
            for t in a.get("Input type") or []:
                if isinstance(t, str) and t in TENSOR_TYPE_BYTES and t != "long int" and t != "bool":
                    c[TENSOR_TYPE_BYTES[t]] += 1
        return c.most_common(1)[0][0] if c else _ASSUMED_ITEMSIZE

    def _list_itemsize(self, i: int, dtype_of: dict, common: int) -> tuple[int, str]:
        """Element size of a TensorList argument of op i, and how it was found."""
        if dtype_of.get(i):
            return dtype_of[i], "backend"
        rpc = self._rpc_child(i)
        if rpc is not None and str(self.args[rpc].get("dtype")) in SCALAR_TYPE_BYTES:
            return SCALAR_TYPE_BYTES[str(self.args[rpc].get("dtype"))], "recorded"
        own = self._first_item(i)
        if own:
            return own, "own"
        return common, "assumed"

    def _rpc_child(self, i: int) -> int | None:
        if not hasattr(self, "_rpc"):
            self._rpc: dict[int, int] = {}
            for j in self.names_of("record_param_comms").tolist():
                if self.parent[j] >= 0:
                    self._rpc.setdefault(int(self.parent[j]), j)
        return self._rpc.get(int(i))

    def _comm_rows(self) -> tuple[list[int], list[int]]:
        """(c10d ops, backend ops) that are communication, each by start time."""
        names = self.names
        c10d: list[int] = []
        backend: list[int] = []
        for i in np.flatnonzero(_name_table(names, self.name, is_comm_op_name)).tolist():
            nm = names[self.name[i]]
            if not classify(nm).is_comm:
                continue
            (c10d if nm.startswith("c10d::") else backend).append(i)
        c10d.sort(key=lambda i: (int(self.start[i]), i))
        backend.sort(key=lambda i: (int(self.start[i]), i))
        return c10d, backend

    def _numel(self, i: int) -> int | None:
        """Elements of the first tensor argument of op i (inside a list too), None if not recorded."""
        for d, t in zip(self.args[i].get("Input Dims") or [], self.args[i].get("Input type") or []):
            if t in TENSOR_TYPE_BYTES and _is_shape(d):
                return prod(d) if d else 1
            if t in _LIST_TYPES and isinstance(d, list) and d and _is_shape(d[0]):
                return prod(d[0]) if d[0] else 1
        return None

    def _pair_backend_ops(self) -> dict[int, int]:
        """{backend op: the c10d op that issued it}: the c10d op it is nested in, else the earliest
        unpaired one of the same kind (and element count, when both are recorded) that started
        before it, among the next `_PAIR_WINDOW` unpaired ones of its kind."""
        c10d, backend = self._comm_rows()
        key = {i: classify(self.names[self.name[i]]).key for i in c10d + backend}
        is_c10d = set(c10d)
        pairs: dict[int, int] = {}
        taken: set[int] = set()
        for b in backend:  # nested first: a c10d op that waited for its own backend op
            p, hops = int(self.parent[b]), 0
            while p >= 0 and hops < 4:
                if p in is_c10d and key[p] == key[b] and p not in taken:
                    pairs[b] = p
                    taken.add(p)
                    break
                p, hops = int(self.parent[p]), hops + 1
        by_key: dict[str, list[int]] = {}
        for c in c10d:
            by_key.setdefault(key[c], []).append(c)
        heads: dict[str, int] = {}  # per list: everything before it is taken
        for b in backend:  # then in order: same kind first, else what gloo runs a kind as
            if b not in pairs:
                m = self._fifo_match(b, by_key.get(key[b], []), key[b], heads, taken)
                m = m if m is not None else self._fifo_match(b, c10d, "", heads, taken, same_size_only=True)
                if m is not None:
                    pairs[b] = m
                    taken.add(m)
        return pairs

    def _fifo_match(
        self, b: int, cands: list[int], name: str, heads: dict, taken: set[int], same_size_only: bool = False
    ) -> int | None:
        """The c10d op (of `cands`, by start) that issued backend op b: among the first
        `_PAIR_WINDOW` unpaired ones that started before it, the first whose input has b's
        element count, else (unless `same_size_only`) the first. Gloo runs some collectives as
        others (reduce_scatter as all_reduce), so across kinds only the element count pairs."""
        k = heads.get(name, 0)
        while k < len(cands) and cands[k] in taken:
            k += 1
        heads[name] = k
        nb = self._numel(b)
        first = None
        seen = 0
        for c in cands[k : k + 4 * _PAIR_WINDOW]:
            if self.start[c] > self.start[b] or seen >= _PAIR_WINDOW:
                break
            if c in taken:
                continue
            seen += 1
            if nb is not None and self._input_numel(c) == nb:
                return c
            first = c if first is None else first
        return None if same_size_only else first

    def _input_numel(self, c: int) -> int | None:
        """Elements of the argument of c10d op c that holds the data it moves (its "input")."""
        arg = INPUT_ARG.get(classify(self.names[self.name[c]]).key, 0)
        dims = self.args[c].get("Input Dims") or []
        tys = self.args[c].get("Input type") or []
        if arg < len(dims) and arg < len(tys):
            d, t = dims[arg], tys[arg]
            if t in TENSOR_TYPE_BYTES and _is_shape(d):
                return prod(d) if d else 1
            if t in _LIST_TYPES and isinstance(d, list) and d and _is_shape(d[0]):
                return prod(d[0]) if d[0] else 1
        return self._numel(c)

    def _count_sizes(self, pairs: dict[int, int]) -> None:
        """How the size of each communication op could be found (for the report)."""
        c10d, backend = self._comm_rows()
        issued = set(pairs.values())
        for i in c10d + [b for b in backend if b not in pairs]:
            rpc = self._rpc_child(i)
            if rpc is not None and self.args[rpc].get("In msg nelems") is not None and self.args[rpc].get("dtype"):
                self.sizes_from["record_param_comms"] += 1
                continue
            s = self.tensors.of(i)
            if s.stop == s.start:
                self.sizes_from["unknown"] += 1
                continue
            how = self.tensors.types[int(self.tensors.type[s.start])]
            if how.endswith("(assumed)"):
                self.sizes_from["shapes, assumed_dtype"] += 1
            elif how.endswith("(backend)") or (i in issued and how.startswith(_LIST_TYPES)):
                self.sizes_from["shapes, dtype of the backend op"] += 1
            else:
                self.sizes_from["shapes and dtype"] += 1


def _matmul_output(name: str, ins: list[list[int]]) -> list[int] | None:
    """The output shape of a matrix product from its input shapes (None: not one, or not known)."""
    if name in ("aten::addmm", "aten::baddbmm"):
        ins = ins[1:]  # (bias, a, b)
    if len(ins) < 2:
        return None
    a, b = ins[0], ins[1]
    if name in ("aten::mm", "aten::addmm") and len(a) == 2 and len(b) == 2:
        return [a[0], b[1]]
    if name in ("aten::bmm", "aten::baddbmm") and len(a) == 3 and len(b) == 3:
        return [a[0], a[1], b[2]]
    if name == "aten::linear" and a and len(b) == 2:
        return [*a[:-1], b[0]]
    if name == "aten::matmul" and a and b:
        if len(b) == 1:
            return a[:-1]
        if len(a) == 1:
            return [*b[:-2], b[-1]]
        batch = a[:-2] if len(a) >= len(b) else b[:-2]
        return [*batch, a[-2], b[-1]]
    return None


def _is_shape(s: Any) -> bool:
    return isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in s)


def _positions_by(keys: list) -> dict[Any, np.ndarray]:
    """The positions of each key, ascending: one pass."""
    out: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return {k: np.asarray(v, np.int64) for k, v in out.items()}


def _name_table(names: list[str], codes: np.ndarray, pred) -> np.ndarray:
    table = np.fromiter((bool(pred(s)) for s in names), bool, len(names))
    return table[codes] if table.size else np.zeros(codes.size, bool)


class _KinetoConverter(GraphBuilder):
    """The PyTorch converter, with a collective's stream-to-stream waits recorded by the profiler."""

    def _sync_edges(self, tl, out_src: list, out_dst: list) -> None:
        """Also stream-to-stream waits (``Stream Wait Event``, recorded with the profiler's
        ``enable_cuda_sync_events``): the first GPU op on the waiting stream after the wait
        depends on the last one on the awaited stream that started before it, where that one
        had ended by then. (Edges as arrays appended to out_src, out_dst.)"""
        super()._sync_edges(tl, out_src, out_dst)
        waits = self.h.stream_waits()
        if not waits or not tl.n_gpu:
            return
        gk = np.flatnonzero(tl.is_gpu)  # in time order
        idx = tl.src[gk]
        dev, stream = tl.gpu["device"][idx], tl.gpu["stream"][idx]
        s, e, ids = tl.s[gk], tl.e[gk], tl.ids[gk]
        # each stream's ops (of one device, and of any), in time order, with their starts: a wait
        # looks its two streams up (a mask, or a copy of a stream's starts, per wait was waits x ops)
        on_stream = {k: (p, s[p]) for k, p in _positions_by(stream.tolist()).items()}
        on_device = {k: (p, s[p]) for k, p in _positions_by(list(zip(dev.tolist(), stream.tolist()))).items()}
        none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        src, dst = [], []
        for d, waiting, awaited, t in waits:
            if d < 0:
                (prod, ps), (cons, cs) = on_stream.get(awaited, none), on_stream.get(waiting, none)
            else:
                (prod, ps), (cons, cs) = on_device.get((d, awaited), none), on_device.get((d, waiting), none)
            p = int(np.searchsorted(ps, t, "right"))  # started at or before the wait
            c = int(np.searchsorted(cs, t, "left"))  # started at or after it
            if p and c < cons.size and e[prod[p - 1]] <= s[cons[c]]:
                src.append(int(ids[cons[c]]))
                dst.append(int(ids[prod[p - 1]]))
                self.stream_wait_edges = getattr(self, "stream_wait_edges", 0) + 1
        out_src.append(np.asarray(src, np.int64))
        out_dst.append(np.asarray(dst, np.int64))

    def _cost_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """FLOPs are unknown (-1) for ops whose shapes were not recorded (not 0 from no tensors)."""
        flops, nbytes = super()._cost_rows(rows)
        flops[~self.h.with_shapes[rows]] = -1
        return flops, nbytes


# ------------------------------------------------------------------------------------ one rank
def convert_kineto_trace(
    path: str | os.PathLike | KinetoTrace, *, rank: int | None = None, shapes: bool = True
) -> tuple[Trace, KinetoRankReport]:
    """One rank's Kineto trace (a path, plain or gzip, or a `KinetoTrace` read with
    ``args_for``) -> its Chakra trace and a report of what was found. ``shapes=False`` reads
    the recorded arguments of communication ops only (several times faster on large traces;
    FLOPs and the bytes of compute ops are then unknown)."""
    kin = path if isinstance(path, KinetoTrace) else read_kineto(path, args_for=_args_pred(shapes))
    if rank is None:
        rank = kin.rank
    if rank is None:
        m = re.search(r"rank[_-]?(\d+)", os.path.basename(kin.path))
        rank = int(m.group(1)) if m else 0
    rep = KinetoRankReport(rank=int(rank), path=kin.path)
    is_x = kin.ph == ord("X")
    rows = np.flatnonzero(kin.mask(CPU_CATS) & is_x)
    gpu = np.flatnonzero(kin.mask(GPU_CATS) & is_x)
    if rows.size == 0 and gpu.size == 0:
        raise TraceFormatError(
            kin.path,
            f"holds {describe_contents(kin.category_counts())}: no CPU op (cpu_op / user_annotation) "
            "and no GPU activity (kernel, gpu_memcpy, gpu_memset), nothing a job could be made of",
        )
    start = kin.ts[rows].astype(np.int64)
    end = start + np.maximum(kin.dur[rows], 0)
    tid = kin.tid[rows].astype(np.int64)
    host = _KinetoHost(kin, rows, start, end, tid)
    host.build_tensors()
    rep.cpu_ops = int(rows.size)
    rep.threads = int(np.unique(tid).size)
    rep.gpu_events = dict(Counter(kin.cats[c] for c in kin.cat[gpu].tolist()))
    rep.runtime_calls = int(np.count_nonzero(kin.mask(RUNTIME_CATS) & is_x))
    sync = np.flatnonzero(kin.mask(SYNC_CATS) & is_x)  # (event_wait, event_record, ...: not work, not nodes)
    codes, counts = np.unique(kin.name[sync], return_counts=True)
    rep.sync_markers = {kin.names[c]: int(n) for c, n in zip(codes.tolist(), counts.tolist())}
    rep.sync_marker_us = float(np.maximum(kin.dur[sync], 0).sum()) / 1000
    rep.with_shapes = bool(host.with_shapes.any())
    rep.sizes_from = dict(host.sizes_from)

    # every CPU event is its own host op: link by a synthetic key that is the row itself, so the
    # GPU work is attached (correlation -> runtime call -> enclosing CPU op) as for a host trace
    key = np.full(len(kin), -1, np.int64)
    key[rows] = np.arange(rows.size)
    kin_keyed = dataclasses.replace(kin, rf_id=key)
    lk = link(host.ids, host.ids, host.name_array, kin_keyed, method="rf_id")

    gpu_work = GpuWork(kin_keyed, lk) if lk.gpu_event.size else None
    steps = kin.steps()
    if not rows.size:  # GPU-only (the host side was not recorded): the window is the whole recording
        rep.host_recorded = False
        rep.warnings.append(gpu_only_note(kin.category_counts()))
        steps = [(-1, *_recording_span(kin))]
    elif not steps:  # no step bounds the recorded window: it holds every CPU op and GPU launch
        launched = gpu_work.launch_span() if gpu_work is not None else None
        lo, hi = int(start.min()), int(end.max())
        steps = [(-1, lo, hi) if launched is None else (-1, min(lo, launched[0]), max(hi, launched[1]))]
    user_annotation = kin.cat[rows] == kin.cat_code("user_annotation")
    conv_report = ConversionReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConversionWarning)
        conv = _KinetoConverter(host, start, end, tid, user_annotation, steps, conv_report)
        conv.gpu = gpu_work
        trace = conv.run(interval_parents)
    rep.warnings += [str(w.message) for w in caught if issubclass(w.category, ConversionWarning)]
    note = no_gpu_note(kin.category_counts()) if gpu.size == 0 else None
    if note:
        rep.warnings.append(note)
    trace.metadata.attr.add(name="rank").int64_val = int(rank)
    base_ns = kin.base_time_ns or 0
    lo, hi = conv.window
    trace.metadata.attr.add(name=TIME_ORIGIN).int64_val = int(base_ns + lo)
    step_starts = ns_to_us(np.array([s for _, s, _ in conv.steps] + [hi], np.int64)) - ns_to_us(np.array(lo))
    bounds = sorted(set(step_starts.tolist()))
    trace.metadata.attr.add(name=STEP_BOUNDS).int64_list.values.extend(bounds)
    rep.steps = len(kin.steps())
    rep.stream_waits = getattr(conv, "stream_wait_edges", 0)
    rep.nodes = len(trace)
    rep.gpu_nodes = int(trace.attr_array("stream", np.int64)[1].sum())
    rep.node_types = trace.node_type_counts()
    rep.collective_sizes = list(conv_report.collectives)
    rep.collectives = dict(Counter(t for t, _ in conv_report.collectives))
    rep.comm_kernels = dict(conv_report.comm_kernels)
    rep.p2p = {k: v for k, v in rep.node_types.items() if k in ("COMM_SEND_NODE", "COMM_RECV_NODE")}
    rep.gpu_time = conv_report.gpu_time
    rep.waits = conv_report.waits
    rep.span_us = conv_report.span_us
    rep.steps_us = conv_report.steps_us
    return trace, rep


def _recording_span(kin: KinetoTrace) -> tuple[int, int]:
    """First start and last end (ns) of every timed event of the file: the recorded window of a
    trace whose host side was not recorded (no step, no CPU op bounds it)."""
    x = np.flatnonzero(kin.ph == ord("X"))
    s = kin.ts[x].astype(np.int64)
    return int(s.min()), int((s + np.maximum(kin.dur[x], 0)).max())


# ------------------------------------------------------------------------------------ a whole job
def _args_pred(shapes: bool):
    return _wants_args if shapes else _wants_comm_args


def convert_kineto(
    inputs: list[str | os.PathLike] | str | os.PathLike, *, shapes: bool = True, on_rank_done=None
) -> tuple[Workload, KinetoJobReport]:
    """Kineto traces of one job (one per rank, or a folder) -> a `Workload` and a report.

    Ranks come from each trace's ``distributedInfo`` (else ``rank<r>`` in the file name, else
    the order given); collectives that name no process group are assigned to the declared
    groups by matching the ranks' collective sequences. ``on_rank_done(rank, report)`` is
    called as each rank is converted; ``shapes`` as in `convert_kineto_trace`."""
    files = kineto_files(inputs)
    traces: dict[int, Trace] = {}
    paths: dict[int, Path] = {}
    report = KinetoJobReport()
    for k, p in enumerate(files):
        kin = read_kineto(p, args_for=_args_pred(shapes))
        rank = trace_rank(kin, p, k, paths)
        if kin.rank is None:
            report.notes.append(f"{p}: no distributedInfo.rank; taken as rank {rank}")
        trace, rep = convert_kineto_trace(kin, rank=rank)
        traces[rank] = trace
        paths[rank] = p
        report.ranks[rank] = rep
        if on_rank_done is not None:
            on_rank_done(rank, rep)
    if len(traces) > 1:
        report.notes.extend(resolve_unnamed_groups(traces, paths=paths))
    report.ranks = dict(sorted(report.ranks.items()))
    return Workload(dict(sorted(traces.items())), paths=paths), report


# ------------------------------------------------------------------------------------ Workload.open
def read_kineto_folder(folder: Path, progress: Progress | None = None, ranks: list[int] | None = None) -> Workload:
    """Every rank (or `ranks`) of a folder of Kineto traces only, converted one after another and kept
    in the user's cache, `io.cache` (what `Workload.open` does with such a folder)."""
    found = {r: Path(f["kineto"]) for r, f in rank_files(folder).items() if "kineto" in f}
    files = select_ranks(folder, found, ranks)
    traces = {}
    for r, p in files.items():

        def convert(r=r, p=p) -> Trace:
            with progress(f"converting rank {r}", p) if progress else nullcontext():
                return convert_kineto_trace(p, rank=r)[0]

        traces[r] = cached_trace([p], f"kineto-rank{r}", convert, stamp=converter_stamp())
    if len(traces) > 1:
        resolve_unnamed_groups(traces, paths=files)
    return Workload(traces, paths=dict(files))


register_source(is_kineto_folder, read_kineto_folder)
