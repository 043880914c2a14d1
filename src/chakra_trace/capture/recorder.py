"""The dispatch-level recorder: every aten op a step runs, as one captured node, without its math.

`Recorder` is a `TorchDispatchMode` stacked above `FakeTensorMode`: each op reaches it after
autograd has decomposed composite ops (so `aten::linear` arrives as `aten::t` + `aten::addmm`,
backward ops arrive as the kernels the autograd engine calls), it lets the fake mode compute the
output's shape and dtype (no data, no memory), and keeps a `CapturedOp`:

- data dependencies by tensor storage: an input depends on the op that last wrote its storage
  (an output, or an input written in place); an op that writes in place also depends on the ops
  that read the storage since its last write (they must run first). Ops that only make views
  (`aten::view`, `aten::t`, ...) are kept, cost nothing, and are never producers: whoever reads a
  view depends on the op that wrote the data, so dropping views (``fold_views``) loses no edge.
- the phase (forward / backward / optimizer) the caller sets, and the module path: in forward the
  innermost module running (global module hooks); in backward the module whose forward created
  the autograd node the engine is running (each module's forward hook labels the autograd nodes
  its forward made).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from . import cost as C

# Ops that only mark a point in a profile: no data, no node.
_SKIP_NAMESPACES = {"profiler", "prim"}


@dataclass
class CapturedOp:
    """One dispatched op: what a master-trace node is made of."""

    id: int
    name: str  # aten overload, e.g. "aten::add.Tensor"
    phase: str
    module: str
    module_type: str
    deps: list[int]
    in_shapes: list
    in_types: list
    out_shapes: list
    out_types: list
    flops: int
    bytes: int
    flops_source: str
    view: bool
    extra: dict[str, Any] = field(default_factory=dict)
    values: list = field(default_factory=list)  # per input, its value as `plain` keeps it


def _type_string(t: Any) -> str:
    """ "Tensor(float)" as PyTorch's execution trace writes a tensor's type."""
    return f"Tensor({_DTYPE_NAMES.get(str(t.dtype), str(t.dtype).replace('torch.', ''))})"


# torch dtype -> the C type name PyTorch's execution trace records (what convert.flops reads)
_DTYPE_NAMES = {
    "torch.float32": "float",
    "torch.float64": "double",
    "torch.float16": "c10::Half",
    "torch.bfloat16": "c10::BFloat16",
    "torch.int64": "long int",
    "torch.int32": "int",
    "torch.int16": "short int",
    "torch.int8": "signed char",
    "torch.uint8": "unsigned char",
    "torch.bool": "bool",
    "torch.complex64": "c10::complex<float>",
    "torch.complex128": "c10::complex<double>",
    "torch.float8_e4m3fn": "c10::Float8_e4m3fn",
    "torch.float8_e5m2": "c10::Float8_e5m2",
}


_WRAPPED = {bool: "Tensor(bool)", int: "Tensor(long int)", float: "Tensor(double)"}


def plain(x: Any) -> Any:
    """An argument's value as JSON keeps it: numbers, booleans and (nested) lists of them; None for
    tensors and anything else (dtypes, devices, strings): no cost rule reads those, and a
    capture's shape rules check that (`capture.rules`)."""
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, (list, tuple)):
        items = [plain(v) for v in x]
        return items if all(v is not None for v in items) else None
    return None


def _describe(x: Any, is_tensor) -> tuple[Any, str]:
    """(shape, type string) of one argument or result as an execution trace records it."""
    if is_tensor(x):
        return list(x.shape), _type_string(x)
    if isinstance(x, (list, tuple)) and x and all(is_tensor(v) for v in x):
        return [list(v.shape) for v in x], "GenericList[" + ",".join(_type_string(v) for v in x) + "]"
    if isinstance(x, bool):
        return [], "Bool"
    if isinstance(x, int):
        return [], "Int"
    if isinstance(x, float):
        return [], "Double"
    if x is None:
        return [], "None"
    if isinstance(x, (list, tuple)):
        return [[] for _ in x], "GenericList[" + ",".join(_describe(v, is_tensor)[1] for v in x) + "]"
    return [], type(x).__name__


def make_recorder():
    """The recorder class (built on first use: torch is imported only when capturing)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    is_tensor = torch.is_tensor

    class Recorder(TorchDispatchMode):
        """Records each op; `phase`, `modules` (the running module stack) and `labels` (autograd
        node -> module path) are set by the capture driving it."""

        def __init__(self) -> None:
            super().__init__()
            self.ops: list[CapturedOp] = []
            self.phase = "forward"
            self.modules: list[tuple[str, str]] = []  # (path, type name), innermost last
            self.labels: dict[Any, tuple[str, str]] = {}  # autograd node -> (path, type name)
            self._writer: dict[int, tuple[Any, int]] = {}  # storage key -> (storage, producer id)
            self._readers: dict[int, list[int]] = {}  # storage key -> readers since its last write
            self._ids = itertools.count()
            self.owners: dict[int, tuple[str, str]] = {}  # id(parameter) -> its module
            self.storage_owner: dict[int, tuple[str, str]] = {}  # optimizer phase: storage -> module

        # -- storages
        def _key(self, t: Any) -> tuple[int, Any] | None:
            try:
                s = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return None
            return s._cdata, s

        def _where(self, in_tensors: list, out_tensors: list) -> tuple[str, str]:
            if self.phase == "backward":
                node = torch._C._current_autograd_node()
                if node is None:  # outside the engine: the seed gradient of the loss
                    return ("loss", "")
                if node in self.labels:
                    return self.labels[node]
                variable = getattr(node, "variable", None)  # AccumulateGrad: the parameter's module
                return self.owners.get(id(variable), ("", ""))
            if self.phase == "optimizer":  # the module of the parameter (or its grad, or state) updated
                owners = {
                    self.storage_owner[k[0]] for t in in_tensors if (k := self._key(t)) and k[0] in self.storage_owner
                }
                if len(owners) == 1:  # (a foreach op over many modules' tensors stays the optimizer's)
                    (where,) = owners
                    for o in out_tensors:
                        ko = self._key(o)
                        if ko is not None:
                            self.storage_owner.setdefault(ko[0], where)
                    return where
            return self.modules[-1] if self.modules else ("", "")

        def own(self, tensors: list, where: tuple[str, str]) -> None:
            """Say that these tensors' storages belong to a module (for the optimizer's ops)."""
            for t in tensors:
                k = self._key(t)
                if k is not None:
                    self.storage_owner[k[0]] = where

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func.namespace in _SKIP_NAMESPACES:
                return out
            self.record(func, args, kwargs, out)
            return out

        def record(self, func, args, kwargs, out) -> None:
            schema = func._schema
            view = C.is_view(func)
            name = C.op_name(func)
            node_id = next(self._ids)
            # inputs: positional then keyword, as the schema orders them
            flat_args = list(args) + [kwargs[a.name] for a in schema.arguments[len(args) :] if a.name in kwargs]
            written: set[int] = set()
            for a, x in zip(schema.arguments, flat_args):
                if a.alias_info is not None and a.alias_info.is_write:
                    for t in x if isinstance(x, (list, tuple)) else (x,):
                        k = self._key(t) if is_tensor(t) else None
                        if k is not None:
                            written.add(k[0])
            deps: dict[int, None] = {}
            in_tensors: list[Any] = []
            for x in flat_args:
                for t in x if isinstance(x, (list, tuple)) else (x,):
                    if not is_tensor(t):
                        continue
                    in_tensors.append(t)
                    k = self._key(t)
                    if k is None:
                        continue
                    w = self._writer.get(k[0])
                    if w is not None:
                        deps[w[1]] = None
                    if k[0] in written:  # a write waits for the reads before it
                        for r in self._readers.pop(k[0], ()):
                            deps[r] = None
                    elif not view:
                        self._readers.setdefault(k[0], []).append(node_id)
            outs = out if isinstance(out, (list, tuple)) else (out,)
            out_tensors = [t for t in outs if is_tensor(t)]
            if not view:
                for t in out_tensors:
                    k = self._key(t)
                    if k is not None:
                        self._writer[k[0]] = (k[1], node_id)
                        if k[0] not in written:
                            self._readers.pop(k[0], None)
            deps.pop(node_id, None)
            # a Python number given for a Tensor argument is a "wrapped number": eager passes it as a
            # 0-dim tensor (float -> double, int -> long) that the op reads; a trace records it so
            in_desc: list[tuple[Any, str]] = []
            ins: list[tuple[list[int], int]] = []
            for a, x in zip(schema.arguments, flat_args):
                if isinstance(x, (bool, int, float)) and isinstance(a.type, torch._C.TensorType):
                    in_desc.append(([], _WRAPPED[type(x)]))
                    ins.append(([], 1 if isinstance(x, bool) else 8))
                    continue
                in_desc.append(_describe(x, is_tensor))
                for t in x if isinstance(x, (list, tuple)) else (x,):
                    if is_tensor(t):
                        ins.append((list(t.shape), t.element_size()))
            out_desc = [_describe(x, is_tensor) for x in outs]
            outs_sz = [(list(t.shape), t.element_size()) for t in out_tensors]
            singles = [list(x.shape) for x in flat_args if is_tensor(x)]
            values = [x if not is_tensor(x) else None for x in flat_args]
            flops, nbytes, source = C.cost(
                name, func._overloadpacket, args, kwargs, out, ins, outs_sz, singles, values, view
            )
            path, mtype = self._where(in_tensors, out_tensors)
            self.ops.append(
                CapturedOp(
                    id=node_id,
                    name=func.name(),
                    phase=self.phase,
                    module=path,
                    module_type=mtype,
                    deps=sorted(deps),
                    in_shapes=[d[0] for d in in_desc],
                    in_types=[d[1] for d in in_desc],
                    out_shapes=[d[0] for d in out_desc],
                    out_types=[d[1] for d in out_desc],
                    flops=flops,
                    bytes=nbytes,
                    flops_source=source,
                    view=view,
                    values=[plain(v) for v in values],
                )
            )

    return Recorder


def label_autograd(outputs: Any, inputs: Any, where: tuple[str, str], labels: dict) -> None:
    """Label the autograd nodes a module's forward created with its path: those reachable from its
    outputs before its inputs' own nodes. Inner modules' hooks run first and keep their labels."""
    import torch
    from torch.utils._pytree import tree_leaves

    stop = {t.grad_fn for t in tree_leaves(inputs) if torch.is_tensor(t) and t.grad_fn is not None}
    todo: list[Any] = [t.grad_fn for t in tree_leaves(outputs) if torch.is_tensor(t) and t.grad_fn is not None]
    seen: set = set()
    while todo:
        node = todo.pop()
        if node is None or node in seen or node in stop:
            continue
        seen.add(node)
        if type(node).__name__ == "AccumulateGrad":
            continue
        labels.setdefault(node, where)
        todo.extend(n for n, _ in node.next_functions)


__all__ = ["CapturedOp", "make_recorder", "label_autograd"]
