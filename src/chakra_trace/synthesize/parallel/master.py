"""What a parallelization pass reads from a captured master trace (`chakra capture`).

Each node of a master trace carries its phase (forward / backward / optimizer), its module path
(`layers.3.attn.q_proj`, `embed`, `lm_head`, `loss`, "" for the model's own forward) and its
FLOPs and bytes; the trace's `capture` metadata gives the batch, the sequence length and, per
trainable parameter, its size and the backward op that wrote its gradient. From these this module
derives, once per master trace:

- the layer of each op: the first number in its module path (`layers.3...` -> 3);
- where each module that is no layer runs: before the first layer in forward order ("pre":
  embeddings), after the last ("post": final norm, LM head, loss), or, for the root module's own
  ops (""), wherever their results are used (RoPE tables feed every layer; an op whose results
  only an optimizer reads stays on the first stage);
- the Megatron roles of linear layers by their names: column-parallel (`q_proj`, `k_proj`,
  `v_proj`, `gate_proj`, `up_proj`, ...) and row-parallel (`o_proj`, `down_proj`, ...), and each
  layer's tensor-parallel region (the modules holding them: `attn`, `mlp`);
- attention modules that project inside one forward, with no linear submodule called (torch's
  `nn.MultiheadAttention` applies its packed in-projection and its `out_proj` weight itself), by
  their module type: the whole module is a tensor-parallel region;
- a mixture of experts by its module name: a module called `experts` holds every expert's
  weights, and what runs inside it runs on the tokens routed to them;
- a layer's core attention by its module name (`core_attention`, Megatron-LM's): what
  selective activation recomputation runs again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...io.documents import load_json, short
from ...schema import proto as pb
from ...schema.enums import NodeType
from ...schema.trace import Trace
from .gemm import master_dims

PHASES = ("forward", "backward", "optimizer")
FWD, BWD, OPT = 0, 1, 2

#: leaf names of column-parallel linears (output features split over TP ranks)
COLUMN = frozenset(
    {"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "c_attn", "c_fc", "query", "key", "value"}
    | {"wq", "wk", "wv", "w1", "w3", "fc1", "linear1", "dense_h_to_4h", "query_key_value"}
)
#: leaf names of row-parallel linears (input features split; their output is summed over TP ranks)
ROW = frozenset({"o_proj", "down_proj", "out_proj", "c_proj", "wo", "w2", "fc2", "linear2", "dense_4h_to_h", "dense"})

#: module types that hold column- and row-parallel projections but call no linear submodule
ATTENTION = frozenset({"MultiheadAttention"})

#: module names of a layer's core attention (Megatron-LM's `core_attention`: Q·Kᵀ, softmax, dropout,
#: ·V), what selective activation recomputation runs again
CORE_ATTENTION = frozenset({"core_attention"})

#: module names holding a mixture's experts (their parameters split over expert-parallel ranks)
EXPERTS = frozenset({"experts"})

_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")

#: bytes per element of the dtypes a capture writes ("Tensor(c10::BFloat16)")
_ITEMSIZE = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}


class ParallelizeError(ChakraError):
    """A master trace or plan that cannot be parallelized as asked."""


def capture_json(text: str, what: str) -> Any:
    """JSON the capture wrote into the trace (its metadata, a node's shapes), read as data from
    a shared file: nesting too deep or an over-long integer is a one-line ParallelizeError."""
    try:
        return load_json(text, what)
    except ChakraError as e:
        raise ParallelizeError(str(e)) from None


def layer_of(module: str) -> int | None:
    m = _LAYER.search(module)
    if not m:
        return None
    if len(m.group(1)) > 12:  # (a trillion layers: not a model; int() of 5,000 digits is refused)
        raise ParallelizeError(f"module {short(module)}: layer number {short(m.group(1))} is out of range")
    return int(m.group(1))


def expert_region(module: str) -> str | None:
    """`layers.3.moe.experts` for `layers.3.moe.experts.up_proj`; None outside experts."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part in EXPERTS:
            return ".".join(parts[: i + 1])
    return None


def in_core_attention(module: str) -> bool:
    """Whether a module path is inside a core-attention module (`layers.3.attn.core_attention`)."""
    return any(part in CORE_ATTENTION for part in module.split("."))


def leaf(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def layer_path(module: str) -> str | None:
    """`layers.3` for `layers.3.attn.q_proj` (the path up to the layer number)."""
    m = _LAYER.search(module)
    return module[: m.end(1)] if m else None


@dataclass
class Param:
    name: str
    module: str
    numel: int
    itemsize: int
    producer: int  # row of the backward op that wrote its gradient, -1 if none
    ready: int  # place in the order the gradients were accumulated (DDP's hooks fire), -1 if none

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass
class Master:
    """A master trace as rows: per row its phase, module, layer, FLOPs, bytes and data deps."""

    trace: Trace
    phase: np.ndarray  # int8: FWD / BWD / OPT
    module: list[str]
    layer: np.ndarray  # int64, -1 outside layers
    num_ops: list[int]
    nbytes: list[int]
    deps: list[list[int]]  # dependency rows
    names: list[str]
    ops: list[str]
    batch: int
    seq: int
    layers: int
    params: list[Param]
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (shapes, types) JSON of each row's outputs
    gemm: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)  # matmul rows' (batch, M, N, K)
    dtypes: list[str | None] = field(default_factory=list)  # each row's element type (`dtype`), None unknown
    place: dict[str, str] = field(default_factory=dict)  # non-layer module -> "pre" / "post" / "root"
    module_types: dict[str, str] = field(default_factory=dict)  # module path -> its class name
    consumers: list[list[int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.phase)

    def out_bytes(self, row: int) -> int:
        """Bytes of the first output of a row (shape x dtype, as the capture recorded it)."""
        shapes_json, types_json = self.outputs[row]
        if not shapes_json:
            return 0
        node = f"node {int(self.trace.ids[row])}"
        shapes, types = (
            capture_json(shapes_json, f"{node} output shapes"),
            capture_json(types_json, f"{node} output types"),
        )
        if not shapes or not types:
            return 0
        t0 = types[0] if isinstance(types, list) else None
        size = _ITEMSIZE.get(t0[len("Tensor(") : -1]) if isinstance(t0, str) and t0.startswith("Tensor(") else None
        if size is None:
            raise ParallelizeError(f"{node}: output type {short(t0)} has no known size")
        dims = shapes[0] if isinstance(shapes, list) else None
        if not isinstance(dims, list) or not all(type(x) is int and 0 <= x < 1 << 40 for x in dims) or len(dims) > 64:
            raise ParallelizeError(f"{node}: output shape {short(dims)} is not a list of sizes")
        return int(np.prod(dims, dtype=np.int64)) * size

    def is_real(self, row: int) -> bool:
        """Moves data (not a view or a metadata query)."""
        return self.nbytes[row] > 0 or self.num_ops[row] > 0


def read_master(trace: Trace) -> Master:
    """The rows of a captured master trace (see the module docstring). Raises ParallelizeError when
    the trace is no capture: no `capture` metadata, or nodes without phase and module."""
    about = _about(trace)
    n = len(trace)
    if np.any(trace.types != NodeType.COMP_NODE):
        raise ParallelizeError("a master trace holds compute nodes only (one logical device); this one communicates")
    phases, module, ops, outputs, types, gemm, dtypes = _node_fields(trace)
    if n and (None in phases or None in module):
        raise ParallelizeError("the master trace's nodes lack `phase`/`module` (capture it with `chakra capture`)")
    code = {p: i for i, p in enumerate(PHASES)}
    try:
        phase = np.array([code[p] for p in phases], np.int8)
    except KeyError as e:
        raise ParallelizeError(f"unknown phase {e.args[0]!r}") from None
    layer = np.array([-1 if (x := layer_of(m)) is None else x for m in module], np.int64)
    dep_src, dep_row, _ = trace.dep_rows("data")
    deps: list[list[int]] = [[] for _ in range(n)]
    consumers: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(dep_src.tolist(), dep_row.tolist()):
        if d >= 0:
            deps[s].append(d)
            consumers[d].append(s)
    names = trace.name_array.tolist()
    index = {int(i): r for r, i in enumerate(trace.ids.tolist())}
    params = [
        Param(name, name.rpartition(".")[0], int(numel), int(size), index.get(int(prod), -1), int(ready))
        for name, numel, size, prod, ready in about.get("parameters", [])
    ]
    m = Master(
        trace=trace,
        phase=phase,
        module=module,
        layer=layer,
        num_ops=[int(x) for x in trace.num_ops.tolist()],
        nbytes=[int(x) for x in trace.tensor_size.tolist()],
        deps=deps,
        names=[str(x) for x in names],
        ops=[o if o is not None else str(nm) for o, nm in zip(ops, names)],
        outputs=outputs,
        gemm=gemm,
        dtypes=dtypes,
        batch=int(about["batch"]),
        seq=int(about["seq"]),
        layers=int(layer.max()) + 1 if (layer >= 0).any() else 0,
        params=params,
        consumers=consumers,
        module_types={mod: t for mod, t in zip(module, types) if mod is not None and t is not None},
    )
    m.place = _places(m)
    return m


def _node_fields(trace: Trace) -> tuple[list, list, list, list, list, dict, list]:
    """(phase, module, op, (output shapes, types), module type) of every node, the matmuls'
    (batch, M, N, K) by row (`gemm.master_dims`) and every node's element type, from its kept wire bytes: one protobuf parse per
    node (decoding these string attributes column by column is far slower)."""
    ex, ip = trace.extra.tobytes(), trace.extra_indptr.tolist()
    node = pb.Node.FromString
    keys = ("phase", "module", "op", "module_type", "dtype")
    phases, modules, ops, outputs, types, dtypes = [], [], [], [], [], []
    gemm: dict[int, tuple[int, int, int, int]] = {}
    for i in range(len(trace)):
        msg = node(ex[ip[i] : ip[i + 1]])
        a = {x.name: x.string_val for x in msg.attr if x.name in keys}
        phases.append(a.get("phase"))
        modules.append(a.get("module"))
        ops.append(a.get("op"))
        types.append(a.get("module_type"))
        dtypes.append(a.get("dtype"))
        outputs.append((msg.outputs.shapes, msg.outputs.types))
        dims = master_dims(str(a.get("op") or msg.name), msg.inputs.shapes)
        if dims is not None:
            gemm[i] = dims
    return phases, modules, ops, outputs, types, gemm, dtypes


def _about(trace: Trace) -> dict:
    """The capture metadata: batch and seq (positive integers) and the parameters, each
    [name, numel, itemsize, producer node id, ready order] (`capture.step`)."""
    for a in trace.metadata.attr:
        if a.name == "capture":
            about = capture_json(a.string_val, "capture metadata")
            if not isinstance(about, dict) or "batch" not in about or "seq" not in about:
                raise ParallelizeError("the master trace's capture metadata has no batch/seq")
            for key in ("batch", "seq"):
                v = about[key]
                if type(v) is not int or not 1 <= v < 1 << 40:
                    raise ParallelizeError(f"capture metadata: {key} {short(v)} is not a positive integer")
            params = about.get("parameters", [])
            if not isinstance(params, list):
                raise ParallelizeError(f"capture metadata: parameters {short(params)} is not a list")
            for i, p in enumerate(params):
                ok = isinstance(p, list) and len(p) == 5 and isinstance(p[0], str)
                if not ok or not all(type(x) is int and -(1 << 62) < x < 1 << 62 for x in p[1:]) or min(p[1:3]) < 0:
                    raise ParallelizeError(
                        f"capture metadata: parameter {i} is {short(p)}, expected "
                        "[name, numel, itemsize, producer node id, ready order]"
                    )
            return about
    raise ParallelizeError(
        "not a master trace: no `capture` metadata (make one with `chakra capture MODEL.py:build ... -o MASTER.et`)"
    )


def _places(m: Master) -> dict[str, str]:
    """Non-layer modules: "pre" (first forward use before the first layer's), "post" (after),
    "root" (the model's own ops, "")."""
    layer_rows = np.flatnonzero((m.layer >= 0) & (m.phase == FWD))
    first = int(layer_rows[0]) if layer_rows.size else len(m)
    place: dict[str, str] = {"": "root"}
    for r in range(len(m)):
        mod = m.module[r]
        if m.phase[r] != FWD or m.layer[r] >= 0 or mod in place:
            continue
        place[mod] = "pre" if r < first else "post"
    return place


__all__ = [
    "Master",
    "Param",
    "read_master",
    "ParallelizeError",
    "COLUMN",
    "ROW",
    "EXPERTS",
    "ATTENTION",
    "PHASES",
    "FWD",
    "BWD",
    "OPT",
    "expert_region",
]
