"""Which resource of its NPU each node occupies: the one-at-a-time rule that the simulator, the
critical path and the timelines share."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .enums import Attr, NodeType

if TYPE_CHECKING:
    from .trace import Trace

ACCEL, CPU, COMM, FREE = 0, 1, 2, 3  # accelerator compute, host compute, collective or send, anything else
KIND_NAMES = ("compute", "cpu", "comm", "other")


def node_kinds(trace: Trace) -> np.ndarray:
    """The resource each row occupies: ACCEL, CPU, COMM (collectives and sends) or FREE."""
    types = trace.types
    cpu = trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op
    kind = np.full(len(trace), FREE, np.int8)
    kind[(types == NodeType.COMP_NODE) & ~cpu] = ACCEL
    kind[(types == NodeType.COMP_NODE) & cpu] = CPU
    kind[(types == NodeType.COMM_COLL_NODE) | (types == NodeType.COMM_SEND_NODE)] = COMM
    return kind
