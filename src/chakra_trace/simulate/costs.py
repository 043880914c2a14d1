"""What a node costs on its own: its recorded time, the roofline's, a memory access's.

Pure: one array per trace, worked out before the run (`Static`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..schema.enums import Attr, NodeType
from ..schema.trace import Trace
from .config.values import MAX_NS
from .network import ClockOverflow, as_ns
from .rules import Rules


def remote(memory) -> bool:
    """Whether memory nodes go to remote (expansion or pool) memory."""
    return memory is not None and memory.memory_type != "NO_MEMORY_EXPANSION"


def us_to_ns(t: Trace, us: np.ndarray, what: str) -> np.ndarray:
    """A recorded µs column in int64 ns, refusing (naming the node) what the clock cannot hold:
    uint64 µs times 1000 would wrap, and a duration of 2^64 - 1 µs finish at 0."""
    if us.size and int(us.max()) >= MAX_NS // 1000:
        row = int(np.argmax(us))
        raise ClockOverflow(
            f"node {int(t.ids[row])} ({t.names[t.name_codes[row]]!r}): {what} of {int(us[row]):,} µs overflows the simulated "
            "clock (int64 ns, at most 2^62 ns, 146 years)"
        )
    return us.astype(np.int64) * 1000


def durations(t: Trace, system, memory, *, comm: str, rules: Rules, warn: Callable[[str], None]) -> np.ndarray:
    """Time of each node in ns: the recorded one, or the roofline's (compute nodes with
    FLOPs, in every comm model: a device preset costs them) or the memory model's
    (communication nodes: the recorded time, used by the `recorded` model only)."""
    s = system
    dur = us_to_ns(t, t.duration, "duration")
    if getattr(s, "roofline_enabled", False):
        ops = t.num_ops.astype(float)
        size = t.tensor_size.astype(float)
        comp = t.types == NodeType.COMP_NODE
        if not rules.roofline_cpu_ops:  # ASTRA-sim replays a CPU op's recorded time, roofline or not
            comp &= ~(t.has(Attr.IS_CPU_OP) & t.is_cpu_op)
        has = t.has(Attr.NUM_OPS) & (ops > 0)
        peak = float(s.peak_perf) * 1e3  # TFLOPS -> FLOP per ns
        bw = float(s.local_mem_bw)  # GB/s -> bytes per ns
        with np.errstate(divide="ignore", invalid="ignore"):
            perf = np.where(size > 0, np.minimum(peak, bw * ops / np.where(size > 0, size, 1)), peak)
            roof = np.floor(ops / perf)
        roof = as_ns(np.where(has & comp, roof, 0), "a roofline compute time")
        dur = np.where(has & comp, roof, dur)
        # a device op of a host-only trace that moves data but does no arithmetic (copies, fills)
        unknown = t.attr_array("duration_unknown")[1]
        if unknown.any():
            mem_only = unknown & comp & ~has & (size > 0) & (dur == 0)
            dur = np.where(mem_only, as_ns(np.floor(size / bw), "a memory-bound device time"), dur)
    if comm != "network":
        return dur
    if rules.least_node_ns:
        dur = np.maximum(dur, rules.least_node_ns)
    mem = (t.types == NodeType.MEM_LOAD_NODE) | (t.types == NodeType.MEM_STORE_NODE)
    if mem.any():
        dur[mem] = memory_time(t.tensor_size[mem].astype(float), system, memory, rules=rules, warn=warn)
    return dur


def memory_time(nbytes: np.ndarray, system, memory, *, rules: Rules, warn: Callable[[str], None]) -> np.ndarray:
    """Time of a memory node: ASTRA-sim's remote-memory runtime (latency + bytes at the
    remote bandwidth), or bytes at the local bandwidth without memory expansion."""
    m = memory
    if remote(memory):
        return as_ns(int(m.remote_mem_latency) + np.floor(nbytes / float(m.remote_mem_bw)), "a remote-memory access")
    bw = float(system.local_mem_bw)
    if bw <= 0:
        warn("memory nodes take no time: the system config gives no local-mem-bw")
        return np.zeros(nbytes.shape, np.int64)
    if rules.astra_limits:
        warn("memory nodes without memory expansion (ASTRA-sim stops here): costed at local-mem-bw")
    return as_ns(np.floor(nbytes / bw), "a memory access")
