"""What a node costs on its own: its recorded time, the roofline's, a memory access's.

Pure: one array per trace, worked out before the run (`Static`). The roofline's compute peak is
each node's element type's where the system was set from a device (`SystemConfig.device_compute`,
`typed_peaks`) and the rules cost by type (not ASTRA-sim's: ``Rules.dtype_peaks``); else, and for
a node without a type, the system's one ``peak_perf``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..schema.compute_types import NodePeaks, node_peaks
from ..schema.enums import Attr, NodeType
from ..schema.trace import Trace
from .config.values import MAX_NS
from .kernels import kernel_ns
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


def roofline_nodes(t: Trace, rules: Rules) -> np.ndarray:
    """The compute nodes the roofline costs: COMP nodes with FLOPs (not CPU ops under ASTRA-sim's
    rules, which replay their recorded time)."""
    comp = t.types == NodeType.COMP_NODE
    if not rules.roofline_cpu_ops:
        comp &= ~(t.has(Attr.IS_CPU_OP) & t.is_cpu_op)
    return comp & t.has(Attr.NUM_OPS) & (t.num_ops > 0)


def typed_peaks(t: Trace, system, rules: Rules) -> NodePeaks | None:
    """Each node's peak by its element type (`schema.compute_types.node_peaks`) where ``system``
    was set from a device (`SystemConfig.device_compute`) whose ``peak_perf`` it still has and
    ``rules`` cost by type; None: one ``peak_perf`` for every node (`one_peak_reason`)."""
    return (
        None
        if one_peak_reason(system, rules)
        else node_peaks(t, system.device_compute.device, system.device_compute.fp32_as)
    )


def one_peak_reason(system, rules: Rules) -> str:
    """Why ``system`` costs every compute node at its one ``peak_perf`` ("" where it costs each
    at its type's peak)."""
    dc = getattr(system, "device_compute", None)
    if not getattr(system, "roofline_enabled", False):
        return "no roofline"
    if dc is None:
        return "the system's peak-perf (no device): one peak for every type"
    if not rules.dtype_peaks:
        return f"{rules.name} rules: one peak-perf for every type, as ASTRA-sim"
    if float(system.peak_perf) != dc.device.peak_flops * dc.efficiency / 1e12:
        return f"peak-perf {system.peak_perf:g} TFLOPS is not {dc.device.name}'s: one peak for every type"
    return ""


def durations(
    t: Trace,
    system,
    memory,
    *,
    comm: str,
    rules: Rules,
    warn: Callable[[str], None],
    peaks: NodePeaks | None = None,
) -> np.ndarray:
    """Time of each node in ns: the recorded one, or the roofline's (compute nodes with
    FLOPs, in every comm model: a device preset costs them; at each node's type's peak where
    ``peaks`` (`typed_peaks`) gives one, else at ``peak_perf``) or the memory model's
    (communication nodes: the recorded time, used by the `recorded` model only)."""
    s = system
    dur = us_to_ns(t, t.duration, "duration")
    if getattr(s, "roofline_enabled", False):
        ops = t.num_ops.astype(float)
        size = t.tensor_size.astype(float)
        comp = t.types == NodeType.COMP_NODE
        costed = roofline_nodes(t, rules)
        peak: float | np.ndarray = float(s.peak_perf) * 1e3  # TFLOPS -> FLOP per ns
        if peaks is not None:  # a node without a type: peak_perf, exactly as with one peak
            peak = np.where(peaks.known, s.device_compute.peak_tflops(peaks) * 1e3, peak)
        bw = float(s.local_mem_bw)  # GB/s -> bytes per ns
        with np.errstate(divide="ignore", invalid="ignore"):
            perf = np.where(size > 0, np.minimum(peak, bw * ops / np.where(size > 0, size, 1)), peak)
            roof = np.floor(ops / perf)
        roof = as_ns(np.where(costed, roof, 0), "a roofline compute time")
        dur = np.where(costed, roof, dur)
        # a device op of a host-only trace that moves data but does no arithmetic (copies, fills)
        unknown = t.attr_array("duration_unknown")[1]
        mem_only = np.zeros(len(t), bool)
        if unknown.any():
            has = t.has(Attr.NUM_OPS) & (ops > 0)
            if not rules.roofline_cpu_ops:
                comp &= ~(t.has(Attr.IS_CPU_OP) & t.is_cpu_op)
            mem_only = unknown & comp & ~has & (size > 0) & (dur == 0)
            dur = np.where(mem_only, as_ns(np.floor(size / bw), "a memory-bound device time"), dur)
        dc = getattr(s, "device_compute", None)
        if dc is not None and dc.kernels is not None and peaks is not None:
            rows = costed | mem_only
            k = kernel_ns(t, rows, dc.kernels, dc.device, peaks, dc.efficiency)
            dur = np.where(rows, as_ns(np.floor(k), "a kernel-model compute time"), dur)
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


def compute_types(system, rules: Rules, runs: list[tuple[Trace, NodePeaks | None, int]]) -> dict:
    """At which peaks the roofline costed a run's compute nodes, over its NPUs: ``runs`` is (trace,
    its `typed_peaks`, how many NPUs ran it). Empty without a roofline. ``per_dtype``: each node at
    its type's peak, else ``why`` not; ``nodes`` costed, ``dtype_unknown`` without a type (at the
    device's default type's peak), ``dtype_fallback`` at a wider type's, ``tf32`` FP32 nodes at the
    TF32 peak; ``by_peak``: nodes and FLOPs per type whose peak costed them."""
    if not getattr(system, "roofline_enabled", False):
        return {}
    why = one_peak_reason(system, rules)
    dc = system.device_compute
    out: dict = {"per_dtype": not why, "peak_perf_tflops": float(system.peak_perf)}
    if dc is not None:
        out.update(
            device=dc.device.name,
            efficiency=dc.efficiency,
            default_dtype=dc.device.default_dtype,
            fp32_as=dc.fp32_as,
            rule=dc.rule,
        )
    if why:
        out["why"] = why
    nodes = unknown = fallback = tf32 = 0
    by_peak: dict[str, dict[str, int]] = {}
    for t, peaks, k in runs:
        costed = roofline_nodes(t, rules)
        n = int(costed.sum())
        nodes += k * n
        if peaks is None:
            b = by_peak.setdefault("one peak", {"nodes": 0, "flops": 0})
            b["nodes"] += k * n
            b["flops"] += k * int(t.num_ops[costed].sum())
            continue
        unknown += k * int((costed & ~peaks.known).sum())
        fallback += k * int((costed & peaks.fallback).sum())
        tf32 += k * int((costed & peaks.tf32).sum())
        for code, name in enumerate(peaks.names):
            m = costed & (peaks.peak == code)
            if m.any():
                b = by_peak.setdefault(name, {"nodes": 0, "flops": 0})
                b["nodes"] += k * int(m.sum())
                b["flops"] += k * int(t.num_ops[m].sum())
    out.update(nodes=nodes, by_peak=by_peak)
    if not why:
        out.update(dtype_unknown=unknown, dtype_fallback=fallback, tf32=tf32)
    return out


def compute_type_notes(summary: dict) -> list[str]:
    """What `compute_types` leaves to an assumption, as result warnings (never silent)."""
    if not summary or not summary.get("nodes"):
        return []
    if not summary["per_dtype"]:
        if "device" not in summary:
            return []
        return [f"compute: {summary['nodes']:,} nodes at one peak ({summary['why']})"]
    notes = []
    n, dev = summary["nodes"], summary["device"]
    if summary["dtype_unknown"]:
        notes.append(
            f"compute: {summary['dtype_unknown']:,} of {n:,} costed nodes carry no dtype: costed at {dev}'s "
            f"{summary['default_dtype']} peak"
        )
    if summary["dtype_fallback"]:
        notes.append(
            f"compute: {summary['dtype_fallback']:,} of {n:,} costed nodes have a type {dev} gives no peak "
            "for: costed at a wider type's"
        )
    return notes
