"""Which PyTorch op is which collective, and how many bytes it moves.

Collective names arrive in several spellings: `c10d::allreduce_` (the dispatcher op, gloo and
NCCL), `nccl:all_reduce` / `gloo:all_gather` (the backend child), the `collective_name` of
`record_param_comms` (`allreduce`, `_allgather_base`, `all_to_allv`, ...), and GPU kernel names
(`ncclDevKernel_AllReduce_Sum_f32_RING_LL`). All normalize to one key here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..schema.enums import CollectiveType

# normalized key -> collective type
_COLLECTIVES = {
    "allreduce": CollectiveType.ALL_REDUCE,
    "reduce": CollectiveType.REDUCE,
    "allgather": CollectiveType.ALL_GATHER,
    "gather": CollectiveType.GATHER,
    "scatter": CollectiveType.SCATTER,
    "broadcast": CollectiveType.BROADCAST,
    "alltoall": CollectiveType.ALL_TO_ALL,
    "alltoallv": CollectiveType.ALL_TO_ALL,
    # PyTorch's reduce_scatter(_tensor) are equal-block; simulators (ASTRA-sim) implement
    # REDUCE_SCATTER, so that is what they map to. Only an explicit "block" name maps to 8.
    "reducescatter": CollectiveType.REDUCE_SCATTER,
    "reducescatterblock": CollectiveType.REDUCE_SCATTER_BLOCK,
    "barrier": CollectiveType.BARRIER,
    "monitoredbarrier": CollectiveType.BARRIER,
}
_SEND = {"send", "isend"}
_RECV = {"recv", "irecv", "recvanysource"}
_SENDRECV = {"sendrecv"}
# Host-side bookkeeping that shares the collective namespace but moves no data.
_NOT_COMM = {
    "wait",
    "init",
    "coalesced",
    "startcoalescing",
    "endcoalescing",
    "getrank",
    "getworldsize",
    "newgroup",
    "destroy",
    "abort",
    "shutdown",
    "barrierwait",
}

_KERNEL = re.compile(r"^nccl(?:dev)?kernel_([a-z]+)", re.IGNORECASE)
_SUFFIXES = ("tensorcoalesced", "intotensorcoalesced", "coalesced", "intotensor", "tensor", "base")


@dataclass(frozen=True)
class CommKind:
    """What an op name denotes: a collective (`collective` set), point-to-point, or nothing."""

    collective: int | None = None
    p2p: str | None = None  # "send", "recv" or "sendrecv"
    key: str = ""  # the normalized name

    @property
    def is_comm(self) -> bool:
        return self.collective is not None or self.p2p is not None


def normalize(name: str) -> str:
    """`c10d::_allgather_base_` -> `allgather`, `nccl:all_reduce` -> `allreduce`, ..."""
    s = name.strip()
    m = _KERNEL.match(s)
    if m:
        s = m.group(1)
    else:
        for prefix in ("c10d::", "nccl:", "gloo:", "mpi:", "ucc:", "xccl:"):
            if s.lower().startswith(prefix):
                s = s[len(prefix) :]
                break
    key = re.sub(r"[^a-z0-9]", "", s.lower())
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix) and key[: -len(suffix)] in _KNOWN_STEMS:
                key = key[: -len(suffix)]
                changed = True
    return key


_KNOWN_STEMS = set(_COLLECTIVES) | _SEND | _RECV | _SENDRECV


def classify(name: str) -> CommKind:
    """The communication an op name denotes (CommKind() when it is not communication)."""
    key = normalize(name)
    if key in _COLLECTIVES:
        return CommKind(int(_COLLECTIVES[key]), None, key)
    if key in _SEND:
        return CommKind(None, "send", key)
    if key in _RECV:
        return CommKind(None, "recv", key)
    if key in _SENDRECV:
        return CommKind(None, "sendrecv", key)
    return CommKind(key=key)


def is_comm_op_name(name: str) -> bool:
    """Whether a host op name belongs to the collective namespace (c10d::, nccl:, gloo:, ...)."""
    low = name.lower()
    return low.startswith(("c10d::", "nccl:", "gloo:", "mpi:", "ucc:")) or bool(_KERNEL.match(name))


def is_backend_op_name(name: str) -> bool:
    """Whether a host op is the backend's part of a collective (gloo:all_reduce, nccl:send, ...),
    not the c10d op that queued it nor the record_param_comms range around it."""
    return is_comm_op_name(name) and not name.startswith("c10d::") and name != "record_param_comms"


def is_bookkeeping(name: str) -> bool:
    return normalize(name) in _NOT_COMM


# record_param_comms `dtype` (c10::ScalarType names) -> bytes per element
SCALAR_TYPE_BYTES = {
    "Byte": 1,
    "Char": 1,
    "Short": 2,
    "Int": 4,
    "Long": 8,
    "Half": 2,
    "Float": 4,
    "Double": 8,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Bool": 1,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "BFloat16": 2,
    "QUInt4x2": 1,
    "QUInt2x4": 1,
    "Bits1x8": 1,
    "Bits2x4": 1,
    "Bits4x2": 1,
    "Bits8": 1,
    "Bits16": 2,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "Float8_e8m0fnu": 1,
}

# ET tensor type strings `Tensor(<c++ type>)` -> bytes per element
TENSOR_TYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::complex<c10::Half>": 4,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "c10::qint8": 1,
    "c10::quint8": 1,
    "c10::qint32": 4,
}


def tensor_itemsize(type_string: str) -> int | None:
    """Bytes per element of an ET type string such as `Tensor(float)` (None if not a tensor)."""
    if not type_string.startswith("Tensor(") or not type_string.endswith(")"):
        return None
    return TENSOR_TYPE_BYTES.get(type_string[7:-1])


def message_bytes(collective: int | None, in_bytes: int, out_bytes: int) -> int:
    """comm_size for a collective (None: a send or receive), in Chakra's convention.

    All-reduce, reduce, broadcast, all-to-all, reduce-scatter and gather are sized by their input;
    all-gather by the per-rank input (what each rank contributes); scatter by the per-rank output;
    barrier moves nothing.
    """
    if collective == CollectiveType.BARRIER:
        return 0
    if collective == CollectiveType.SCATTER:
        return out_bytes
    return in_bytes
