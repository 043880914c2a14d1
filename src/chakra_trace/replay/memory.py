"""The memory a replay of host traces takes, known from the traces before anything runs.

A rank holds, for the whole replay: every storage the selected ops read, once, as large as its
largest view (`tensors.StoragePlan`), and the integer inputs, which get memory of their own (index
tensors, `indices.py`). While it runs, an op's outputs live until the next op returns, and one
replayed with autograd keeps what its backward would need (about as much again): the largest
such pair of ops counts. The runtime (the interpreter, torch, a process group) adds
`RUNTIME_BYTES`. All ranks run on this machine, so their sum must fit the memory available when
the replay starts (MemAvailable, and RLIMIT_AS where set); `tensors.MAX_BYTES_ENV` sets a limit
per rank on the tensors instead.

The storage bound alone let a 16 GB plan through on a machine of that much physical memory (the
limit was physical memory, per rank, whatever else was in use or how many ranks shared it) and
left out the outputs and the separately made inputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ChakraError
from ..io.memory import available_bytes, env_int
from .tensors import MAX_BYTES_ENV, StoragePlan, Unreplayable, split_list_type, split_top_level, tensor_bytes

RUNTIME_BYTES = 512 << 20
"""A replay rank's own memory before any tensor (Python, torch's libraries, a gloo group)."""

_ALIAS = re.compile(r"Tensor\([a-z]")


@dataclass
class MemoryEstimate:
    """Bytes one rank's replay holds (see the module docstring)."""

    storages: int = 0
    own_inputs: int = 0  # integer inputs, made apart from the storages
    outputs: int = 0  # the largest outputs held at once (two ops, autograd's saved tensors)
    runtime: int = RUNTIME_BYTES

    @property
    def tensors(self) -> int:
        return self.storages + self.own_inputs + self.outputs

    @property
    def total(self) -> int:
        return self.tensors + self.runtime

    def text(self) -> str:
        return (
            f"{gib(self.total)} ({gib(self.storages)} of recorded storages, {gib(self.own_inputs)} of integer "
            f"inputs, {gib(self.outputs)} of op outputs, {gib(self.runtime)} of runtime)"
        )


def gib(n: float) -> str:
    return f"{n / 2**30:,.3g} GiB"


def _returns_new(schema: str) -> list[bool]:
    """Per return of an op schema's text: does it make a new tensor (not an alias of an input)?"""
    ret = schema.rsplit("->", 1)[-1].strip()
    ret = ret[1:-1] if ret.startswith("(") and ret.endswith(")") else ret
    return [not _ALIAS.search(p) for p in split_top_level(ret)]


def _walk(v, shape, stride, type_str: str):
    """(value, shape, stride, type) of every tensor of a recorded argument (lists flattened)."""
    if type_str.startswith("Tensor"):
        yield v, shape, stride, type_str
        return
    elems = split_list_type(type_str)
    if elems and isinstance(v, list):
        n = len(v)
        shapes = shape if isinstance(shape, list) and len(shape) == n else [[]] * n
        strides = stride if isinstance(stride, list) and len(stride) == n else [None] * n
        types = elems if len(elems) == n else [elems[0]] * n
        for x, sh, st, t in zip(v, shapes, strides, types):
            yield from _walk(x, sh, st, t)


def _bytes(v, shape, stride, type_str: str):
    try:
        return tensor_bytes(v, shape, stride, type_str)
    except (Unreplayable, TypeError, ValueError):  # (not replayed: nothing allocated for it)
        return None


def _at(xs, k):
    return xs[k] if isinstance(xs, list) and k < len(xs) else None


def estimate(h, rows, plan: StoragePlan | None = None) -> MemoryEstimate:
    """The memory of replaying rows `rows` of host trace `h` (`HostTrace`); ``plan``: reserve the
    storages there (else a fresh one). No torch needed: the launcher checks it before any rank
    starts."""
    plan = plan if plan is not None else StoragePlan()
    own = 0
    made: list[int] = []
    for r in rows:
        inputs, outputs = h.io(int(r))
        for k, (v, shp, t) in enumerate(zip(inputs["values"], inputs["shapes"], inputs["types"])):
            for x, s, st, tt in _walk(v, shp, _at(inputs["strides"], k), t):
                got = _bytes(x, s, st, tt)
                if got is not None:
                    plan.storages.setdefault(got[0], [0, False])
                    e = plan.storages[got[0]]
                    e[0], e[1] = max(e[0], got[1]), e[1] or got[3]
                    own += got[2] if got[3] else 0
        new = _returns_new(str(h.attr(int(r), "op_schema") or ""))
        out = 0
        for k, (v, shp, t) in enumerate(zip(outputs["values"], outputs["shapes"], outputs["types"])):
            if k < len(new) and not new[k]:
                continue
            for x, s, st, tt in _walk(v, shp, _at(outputs["strides"], k), t):
                got = _bytes(x, s, st, tt)
                out += got[2] if got is not None else 0
        made.append(out)
    peak = max((a + 2 * b for a, b in zip([0, *made], made)), default=0)
    return MemoryEstimate(plan.total, own, peak)


def tensor_limit() -> int | None:
    """The per-rank limit on a replay's tensors from `MAX_BYTES_ENV`, None when unset."""
    return env_int(MAX_BYTES_ENV, "a positive number of bytes")


def check(estimates: list[MemoryEstimate], source: str) -> list[int]:
    """ChakraError, before anything is allocated, when the ranks' estimates (one per rank, all on
    this machine) do not fit; else the bytes of tensors each rank may hold (its estimate and an
    equal part of what is left, for the rank's own checks as it plans: `HostReplay(memory_limit=...)`)."""
    limit = tensor_limit()
    worst = max(estimates, key=lambda e: e.total)
    if limit is not None:
        if worst.tensors > limit:
            raise ChakraError(
                f"{source}: replaying it needs {gib(worst.tensors)} of tensors per rank ({gib(worst.storages)} of "
                f"recorded storages, {gib(worst.own_inputs)} of integer inputs, {gib(worst.outputs)} of op outputs), "
                f"over the limit of {gib(limit)} per rank ({MAX_BYTES_ENV}); select fewer ops (--select, --steps)"
            )
        return [limit] * len(estimates)
    avail = available_bytes()
    total = sum(e.total for e in estimates)
    if total > avail:
        n = len(estimates)
        each = f" on each of {n} ranks" if n > 1 else ""
        raise ChakraError(
            f"{source}: replaying it needs {gib(total)} of memory{each and ' in all'}, {worst.text()}{each}, "
            f"over the limit of {gib(avail)} (the memory available now; {MAX_BYTES_ENV} sets a limit per rank "
            "instead); select fewer ops (--select, --steps) or replay on fewer ranks"
        )
    spare = (avail - total) // len(estimates)
    return [e.tensors + spare for e in estimates]
