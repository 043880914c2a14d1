"""Recreate the tensors a host execution trace recorded, without the model.

A recorded tensor is `[tensor_id, storage_id, offset, numel, itemsize, device]` plus its
shape, dtype and strides. Views share a storage, so every storage is allocated once, big
enough for every view of it the replayed ops read, and each input becomes `as_strided` on it:
in-place ops on views then write where the original did. Integer tensors are filled within
their recorded `tensor_range` (token ids stay valid indices); floats get small random values.
"""

from __future__ import annotations

import json
import math
import re

_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "long": "int64",
    "int64_t": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}
_ITEMSIZE = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip
_UNDEFINED = "nullptr (uninitialized)"
_TENSOR = re.compile(r"^Tensor\((.*)\)$")


class Unreplayable(Exception):
    """An input that cannot be recreated (a process group object, an unknown dtype, ...)."""


def tensor_dtype(type_str: str):
    """torch dtype of a recorded "Tensor(float)" type, None for an undefined tensor."""
    import torch

    m = _TENSOR.match(type_str)
    inner = m.group(1) if m else type_str
    if inner == _UNDEFINED:
        return None
    name = _DTYPES.get(inner)
    if name is None or not hasattr(torch, name):
        raise Unreplayable(f"unknown tensor dtype {inner!r}")
    return getattr(torch, name)


def split_top_level(text: str) -> list[str]:
    """`text` cut at the commas outside brackets and parentheses (the last part may be empty)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch in "[("
        depth -= ch in "])"
        cur += ch
    out.append(cur)
    return out


def split_list_type(type_str: str) -> list[str] | None:
    """Element types of "GenericList[A,B]" / "Tuple[A,B]" (nesting-aware), None otherwise."""
    for prefix in ("GenericList[", "Tuple["):
        if type_str.startswith(prefix) and type_str.endswith("]"):
            out = split_top_level(type_str[len(prefix) : -1])
            return out if out[-1] else out[:-1]
    return None


def contiguous_strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(list(shape)):
        out.append(acc)
        acc *= max(int(d), 1)
    return out[::-1]


MAX_BYTES_ENV = "CHAKRA_REPLAY_MAX_BYTES"
"""Environment variable: the most bytes of tensors a replay may allocate per rank (its storages,
the inputs made apart from them and the ops' outputs; see `memory.py`). Without it, the limit is
the memory available when the replay starts, shared by its ranks. A trace is data: a recorded
shape of [1e12] must be refused before anything is allocated, not take the machine down."""


def recorded_dtype(type_str: str) -> str | None:
    """The torch dtype name of a recorded "Tensor(float)" type ("float32"), None for an undefined
    tensor; `Unreplayable` for one the replay does not know. No torch needed."""
    m = _TENSOR.match(type_str)
    inner = m.group(1) if m else type_str
    if inner == _UNDEFINED:
        return None
    name = _DTYPES.get(inner)
    if name is None:
        raise Unreplayable(f"unknown tensor dtype {inner!r}")
    return name


def tensor_bytes(value, shape, stride, type_str: str) -> tuple[str, int, int, bool] | None:
    """(storage id, bytes its storage needs for this view, bytes of the view itself, integer dtype?)
    of one recorded tensor, None for an undefined or malformed one; `Unreplayable` for nonsense."""
    dtype = recorded_dtype(type_str)
    if dtype is None or not isinstance(value, list) or len(value) < 6:
        return None
    _tid, sid, offset, numel, itemsize, _dev = value[:6]
    _check_ints(value, dtype)
    shape, stride = _shape_stride(shape, stride)
    if any(d < 0 for d in shape) or any(s < 0 for s in stride):
        raise Unreplayable(f"negative shape {shape} or stride {stride}")
    extent = 0 if any(d == 0 for d in shape) else 1 + sum((d - 1) * s for d, s in zip(shape, stride))
    need = (int(offset) + max(extent, int(numel))) * int(itemsize)
    integer = not (dtype.startswith(("float", "bfloat", "complex")))
    return str(sid), max(need, int(itemsize)), extent * int(itemsize), integer


class StoragePlan:
    """Sizes of the storages a replay needs: `reserve` every recorded tensor, then `specs`
    says how to rebuild each one (see `_standalone.value`)."""

    def __init__(self):
        self.storages: dict = {}  # storage id -> [nbytes, integer]

    def reserve(self, value, shape, stride, type_str: str) -> None:
        got = tensor_bytes(value, shape, stride, type_str)
        if got is None:
            return
        sid, need, _view, integer = got
        st = self.storages.setdefault(sid, [0, False])
        st[0] = max(st[0], need)
        st[1] = st[1] or integer

    @property
    def total(self) -> int:
        return sum(n for n, _ in self.storages.values())

    def tensor_spec(self, value, shape, stride, type_str: str, value_range=None, fresh: bool = False):
        """The plan entry of one recorded tensor (None for an undefined tensor)."""
        dtype = tensor_dtype(type_str)
        if dtype is None:
            return None
        if not isinstance(value, list) or len(value) < 6:
            raise Unreplayable(f"tensor value {value!r} is not [id, storage, offset, numel, itemsize, device]")
        _tid, sid, offset, _numel, itemsize, _dev = value[:6]
        _check_ints(value, dtype)
        shape, stride = _shape_stride(shape, stride)
        if any(d < 0 for d in shape) or any(s < 0 for s in stride):
            raise Unreplayable(f"negative shape {shape} or stride {stride}")
        rng = list(value_range) if value_range is not None else None
        return {"t": [str(sid), shape, stride, int(offset), str(dtype).replace("torch.", ""), rng, bool(fresh)]}


def _check_ints(value: list, dtype) -> None:
    """A recorded tensor's offset, numel and itemsize are non-negative integers, and the itemsize
    is its dtype's (a trace is data: anything else is not replayed rather than allocated).
    ``dtype``: a torch dtype or its name."""
    _tid, _sid, offset, numel, itemsize = value[:5]
    for what, v in (("offset", offset), ("numel", numel), ("itemsize", itemsize)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise Unreplayable(f"tensor {what} {v!r} is not a non-negative integer")
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if _ITEMSIZE.get(name) != itemsize:
        raise Unreplayable(f"itemsize {itemsize} does not match dtype {dtype}")


def _shape_stride(shape, stride) -> tuple[list[int], list[int]]:
    shape = [int(x) for x in shape] if isinstance(shape, list) and all(isinstance(x, int) for x in shape) else []
    stride = (
        [int(x) for x in stride] if _is_int_list(stride) and len(stride) == len(shape) else contiguous_strides(shape)
    )
    return shape, stride


def _is_int_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) for x in v)


def tensor_ranges(raw) -> dict[int, tuple[int, int]]:
    """A recorded `tensor_range` attribute ('{"0":[0,127]}') as {input index: (lo, hi)}."""
    if not raw:
        return {}
    try:
        d = json.loads(raw) if isinstance(raw, str) else raw
        return {int(k): (int(v[0]), int(v[1])) for k, v in d.items()}
    except (ValueError, TypeError, KeyError, IndexError):
        return {}


def scalar(value, type_str: str):
    """A recorded non-tensor value as Python: non-finite doubles come as strings."""
    if value == "<None>" or type_str == "None":
        return None
    if value == "<Object>":
        raise Unreplayable(f"an opaque {type_str or 'object'} argument (e.g. a process group) is not recorded")
    if type_str == "Double":
        x = float(value) if not isinstance(value, str) else float(value.replace("infinity", "inf"))
        return x if math.isfinite(x) else {"f": str(x)}  # (JSON has no inf/nan)
    if type_str == "Int":
        return int(value) if not isinstance(value, str) else int(float(value))
    if type_str == "Bool":
        return bool(value)
    if isinstance(value, float) and not math.isfinite(value):
        return {"f": str(value)}
    return value
