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
HOST_GAP = "[host]"  # the name of the PyTorch converter's nodes for time outside any recorded op


def node_kinds(trace: Trace) -> np.ndarray:
    """The resource each row occupies: ACCEL, CPU, COMM (collectives and sends) or FREE."""
    types = trace.types
    cpu = trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op
    kind = np.full(len(trace), FREE, np.int8)
    kind[(types == NodeType.COMP_NODE) & ~cpu] = ACCEL
    kind[(types == NodeType.COMP_NODE) & cpu] = CPU
    kind[(types == NodeType.COMM_COLL_NODE) | (types == NodeType.COMM_SEND_NODE)] = COMM
    return kind


def astra_kinds(trace: Trace) -> np.ndarray:
    """ASTRA-sim's resources (its HardwareResource): a node marked is_cpu_op, of any type, takes
    the CPU; a COMP node the accelerator; a receive nothing; anything else (collectives, sends,
    memory loads and stores) the one communication slot."""
    types = trace.types
    kind = np.full(len(trace), COMM, np.int8)
    kind[types == NodeType.COMP_NODE] = ACCEL
    kind[types == NodeType.COMM_RECV_NODE] = FREE
    kind[trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op] = CPU
    return kind


def node_lanes(trace: Trace) -> np.ndarray:
    """Where each row ran, as recorded: its GPU stream, else its host thread (-1: not recorded).
    Work on different lanes ran concurrently (a gloo worker thread beside the training loop,
    an NCCL stream beside the compute stream), so the one-at-a-time rule holds per lane."""
    lane = np.full(len(trace), -1, np.int64)
    for name, tag in ((Attr.TID, 0), (Attr.STREAM, 1)):  # a stream overrides the thread
        vals, has = trace.attr_array(name, np.int64)
        lane[has] = vals[has].astype(np.int64) * 2 + tag
    return lane


def node_slots(trace: Trace, lanes: bool = True, kind: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The resource slot each row occupies and each slot's kind: (slot per row, kind per slot).
    A slot is a kind (`node_kinds`, or the given one per row) on one lane (`node_lanes`; one lane
    per kind when ``lanes`` is False, as ASTRA-sim has it); FREE rows share one slot. Slots are
    numbered in kind order."""
    kind = node_kinds(trace) if kind is None else kind
    lane = node_lanes(trace) if lanes else np.zeros(len(trace), np.int64)
    lane = np.where(kind == FREE, -1, lane)
    _, code = np.unique(lane, return_inverse=True)
    key = kind.astype(np.int64) * (int(code.max(initial=0)) + 1) + code.reshape(-1)
    uniq, slot = np.unique(key, return_inverse=True)
    return slot.reshape(-1).astype(np.int64), (uniq // (int(code.max(initial=0)) + 1)).astype(np.int8)


def host_gap_mask(trace: Trace) -> np.ndarray:
    """The `[host]` rows: time outside any recorded op, as the PyTorch converter writes it."""
    if HOST_GAP not in trace.names:
        return np.zeros(len(trace), bool)
    return trace.name_codes == trace.names.index(HOST_GAP)


def compute_mask(trace: Trace) -> np.ndarray:
    """The rows a breakdown counts as compute: accelerator COMP nodes when the trace has any
    (GPU traces: host ops only launch them), else every COMP node (CPU-only jobs) but the
    `[host]` gaps the PyTorch converter writes for time outside any recorded op (Python,
    the data loader, waiting for a collective: not compute that hides communication)."""
    comp = (trace.types == NodeType.COMP_NODE) & ~host_gap_mask(trace)
    accel = comp & ~(trace.has(Attr.IS_CPU_OP) & trace.is_cpu_op)
    return accel if accel.any() else comp


def comm_mask(trace: Trace) -> np.ndarray:
    """Collectives, sends and receives."""
    return np.isin(trace.types, (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))
