"""Roofline of a workload's compute ops: where each op sits against a device's compute and
memory roofs, from the FLOPs (`num_ops`) and bytes (`tensor_size`) the trace records.

An op's arithmetic intensity I = FLOPs / bytes decides which roof limits it: below the
ridge point (peak FLOP/s / memory bandwidth) it cannot go faster than bandwidth x I
(memory bound), above it the peak (compute bound). Comparing the FLOP/s an op achieved in
the trace (FLOPs / recorded duration) with that roof shows how far it is from the device's
limit, and FLOPs / roof is the time it would take at the roof.

The achieved rate uses each node's own recorded duration: on a GPU trace whose FLOPs sit on
the host ops (as the PyTorch converter writes them), that is the host-side time of the op.

The compute roof is the device's peak for the op's type (its ``dtype`` attribute, written by
`chakra convert pytorch` from the op's recorded input types, `convert.dtypes`): FP32 work at the
FP32 peak, BF16 at the BF16 one (`DeviceSpec.peak_for`; `schema.devices` lists the datasheet
figures). An op without a ``dtype`` is costed at the device's ``default_dtype`` peak (BF16 on
accelerators, FP32 on CPUs, the old single roof) and counted (``dtype_unknown``); one whose type
has no datasheet peak on the device (BF16 on a V100, int64) at the next wider type's, counted
too (``dtype_fallback``). TF32 tensor-core use is a global switch the trace does not record:
``fp32_as`` says which FP32 ops run at the TF32 peak, PyTorch's defaults unless told (FP32
convolutions as TF32 on NVIDIA Ampere and later, FP32 matmuls as FP32), the rule the simulator
follows too (`schema.compute_types`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.compute_types import fp32_as_rule, node_peaks
from ..schema.devices import DEVICES, DeviceSpec, device_spec, host_cpu
from ..schema.enums import Attr, NodeType
from ..schema.resources import ACCEL, node_kinds
from ..schema.trace import Trace
from ..table import Table, Tabular
from .diff import merge_names

__all__ = [
    "DEVICES",
    "DeviceSpec",
    "Roofline",
    "default_device",
    "device_spec",
    "host_cpu",
    "roofline",
    "roofline_device",
]


def default_device(workload: Workload | Trace) -> DeviceSpec:
    """The device to draw when none is named: this machine's CPU for a CPU-only trace (its
    compute ran on a CPU, most likely this kind); a trace with accelerator kernels raises
    ChakraError, since it does not say which accelerator ran them."""
    traces = workload.traces.values() if isinstance(workload, Workload) else [workload]
    if any((node_kinds(t) == ACCEL).any() for t in traces):
        raise ChakraError(
            "the trace ran on an accelerator it does not name: pass --device (h100, a100, ...) or "
            "--peak-tflops and --mem-bw-gbps"
        )
    return host_cpu()


def roofline_device(
    workload: Workload | Trace, device: str | DeviceSpec | None = None, peak_tflops=None, mem_bw_gbps=None
) -> DeviceSpec:
    """The device a roofline is drawn for: ``device`` (a name or spec) with ``peak_tflops`` /
    ``mem_bw_gbps`` overriding its roofs; both roofs alone make a device; neither: `default_device`."""
    if device is None and (peak_tflops is None or mem_bw_gbps is None):
        device = default_device(workload)
    return device_spec(device, peak_tflops=peak_tflops, mem_bw_gbps=mem_bw_gbps)


_COLUMNS = (
    "rank",
    "row",
    "node_id",
    "name",
    "dtype",
    "peak_dtype",
    "flops",
    "bytes",
    "intensity",
    "duration_us",
    "achieved_flops",
    "attainable_flops",
    "bound",
    "efficiency",
    "roof_time_us",
)


def _num(v: float) -> float | None:
    """JSON-safe float: NaN and infinities become None."""
    v = float(v)
    return v if math.isfinite(v) else None


@dataclass
class Roofline(Tabular):
    """Per-op columns (numpy arrays of equal length, one entry per COMP node with FLOPs and
    bytes): rank, row, node_id, name, flops, bytes, intensity (FLOP/B), duration_us (as
    recorded, 0 when none), achieved_flops and efficiency (NaN when the duration is 0), attainable_flops (the
    roof at the op's intensity), bound ("memory"/"compute"), roof_time_us (time at the roof);
    dtype (the op's compute type, "unknown" when the trace gives none), peak_dtype and peak_flops
    (the type whose peak its compute roof is, and that peak: `DeviceSpec.peak_for`).
    ``coverage`` says how many COMP nodes (and how much of their time) had counts, and how many
    ops had no type (``dtype_unknown``) or a type without a peak on the device (``dtype_fallback``)."""

    device: DeviceSpec
    rank: np.ndarray
    row: np.ndarray
    node_id: np.ndarray
    name: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    intensity: np.ndarray
    duration_us: np.ndarray
    achieved_flops: np.ndarray
    attainable_flops: np.ndarray
    bound: np.ndarray
    efficiency: np.ndarray
    roof_time_us: np.ndarray
    dtype: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    peak_dtype: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    peak_flops: np.ndarray = field(default_factory=lambda: np.zeros(0))
    coverage: dict[str, Any] = field(default_factory=dict)
    name_codes: np.ndarray | None = field(default=None, repr=False)  # into name_table: groups by_name
    name_table: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.flops.size)

    @property
    def skipped(self) -> int:
        """COMP nodes without FLOP and byte counts (not on the roofline)."""
        return int(self.coverage.get("skipped", 0))

    @property
    def records(self) -> list[dict]:
        """One dict per op (JSON-safe: NaN as None)."""
        return self.to_table().records()

    def by_name(self) -> list[dict]:
        """Per op name: count, flops, bytes, time_us (recorded), intensity (total FLOPs / total
        bytes), achieved (FLOPs of the timed ops / their time), attainable, efficiency, bound,
        roof_time_us; most time first."""
        if not len(self):
            return []
        if self.name_codes is not None and self.name_table is not None:
            used, inv = np.unique(self.name_codes, return_inverse=True)
            names = self.name_table[used]
        else:
            names, inv = np.unique(self.name.astype(str), return_inverse=True)
        inv = inv.reshape(-1)
        k = names.size
        timed = self.duration_us > 0
        count = np.bincount(inv, minlength=k)
        flops = np.bincount(inv, weights=self.flops.astype(np.float64), minlength=k)
        nbytes = np.bincount(inv, weights=self.bytes.astype(np.float64), minlength=k)
        time_us = np.bincount(inv, weights=np.where(timed, self.duration_us, 0.0), minlength=k)
        timed_flops = np.bincount(inv, weights=np.where(timed, self.flops, 0).astype(np.float64), minlength=k)
        roof_us = np.bincount(inv, weights=self.roof_time_us, minlength=k)
        intensity = flops / nbytes
        peaks = (
            self.peak_flops
            if self.peak_flops.size == self.flops.size
            else np.full(self.flops.size, self.device.peak_flops)
        )
        # the compute roof of a name whose ops differ in type: the rate that does its FLOPs in the
        # time each at its own peak takes
        at_peak = np.bincount(inv, weights=self.flops.astype(np.float64) / peaks, minlength=k)
        hi, lo = np.zeros(k), np.full(k, np.inf)
        np.maximum.at(hi, inv, peaks)
        np.minimum.at(lo, inv, peaks)
        with np.errstate(divide="ignore", invalid="ignore"):
            mixed = np.where(at_peak > 0, flops / at_peak, self.device.peak_flops)
        peak = np.where(hi == lo, hi, mixed)  # (exact where every op of the name has one peak)
        attainable = np.minimum(peak, self.device.mem_bw * intensity)
        with np.errstate(divide="ignore", invalid="ignore"):
            achieved = np.where(time_us > 0, timed_flops / (time_us * 1e-6), np.nan)
        efficiency = achieved / attainable
        bound = np.where(intensity < peak / self.device.mem_bw, "memory", "compute")
        order = np.lexsort((np.arange(k), -flops, -time_us))
        return [
            {
                "name": str(names[i]),
                "count": int(count[i]),
                "flops": float(flops[i]),
                "bytes": float(nbytes[i]),
                "time_us": float(time_us[i]),
                "intensity": float(intensity[i]),
                "achieved": _num(achieved[i]),
                "attainable": float(attainable[i]),
                "peak": float(peak[i]),
                "efficiency": _num(efficiency[i]),
                "bound": str(bound[i]),
                "roof_time_us": float(roof_us[i]),
            }
            for i in order.tolist()
        ]

    def summary(self) -> dict[str, Any]:
        """Coverage and totals: ops on the roofline, COMP nodes skipped, FLOPs, bytes, time."""
        timed = self.duration_us > 0
        mem = self.bound == "memory"
        return {
            **self.coverage,
            "timed_ops": int(timed.sum()),
            "memory_bound": int(mem.sum()),
            "compute_bound": int((~mem).sum()),
            "flops": float(self.flops.sum()),
            "bytes": float(self.bytes.sum()),
            "time_us": float(self.duration_us[timed].sum()),
            "roof_time_us": float(self.roof_time_us.sum()),
            "by_dtype": self.by_dtype(),
        }

    def by_dtype(self) -> dict[str, dict[str, Any]]:
        """Per compute type ("unknown": none in the trace; "fp32 as tf32": FP32 ops at the TF32
        peak, `schema.compute_types`): ops, FLOPs, the type whose peak costs them and that peak
        (FLOP/s)."""
        out: dict[str, dict[str, Any]] = {}
        if not self.dtype.size:
            return out
        label = np.where((self.dtype == "fp32") & (self.peak_dtype == "tf32"), "fp32 as tf32", self.dtype)
        for d in sorted(set(label.tolist())):
            m = label == d
            i = int(np.flatnonzero(m)[0])
            out[str(d)] = {
                "ops": int(m.sum()),
                "flops": float(self.flops[m].sum()),
                "peak_dtype": str(self.peak_dtype[i]),
                "peak_flops": float(self.peak_flops[i]),
            }
        return out

    def to_dict(self, ops: bool = True) -> dict[str, Any]:
        d = {"device": self.device.to_dict(), "summary": self.summary(), "by_name": self.by_name()}
        if ops:
            d["ops"] = self.records
        return d

    def to_table(self) -> Table:
        """One row per op (`_COLUMNS`)."""
        return Table({c: getattr(self, c) for c in _COLUMNS}, title=f"roofline on {self.device.name}")


def roofline(workload: Workload | Trace, device: str | DeviceSpec = "h100", *, fp32_as: str = "pytorch") -> Roofline:
    """Every COMP node (all ranks) with num_ops > 0 and tensor_size > 0 against `device`'s roofs,
    each at its type's peak (``fp32_as``: which FP32 ops at the TF32 one, `schema.compute_types`)."""

    dev = device_spec(device)
    if isinstance(workload, Trace):
        workload = Workload({0: workload})
    traces = [workload.traces[r] for r in workload.ranks]
    table, maps = merge_names([t.names for t in traces])
    parts: dict[str, list[np.ndarray]] = {
        c: []
        for c in ("rank", "row", "node_id", "code", "flops", "bytes", "dur", "dtype", "peak_type", "peak", "fallback")
    }
    dtype_names: dict[str, int] = {"unknown": 0}
    peak_names: dict[str, int] = {}
    comp_nodes = ops = comp_us = covered_us = 0
    for r, t, m in zip(workload.ranks, traces, maps):
        comp = t.types == NodeType.COMP_NODE
        ok = comp & t.has(Attr.NUM_OPS) & t.has(Attr.TENSOR_SIZE) & (t.num_ops > 0) & (t.tensor_size > 0)
        rows = np.flatnonzero(ok)
        comp_nodes += int(comp.sum())
        ops += rows.size
        comp_us += int(t.duration[comp].sum())
        covered_us += int(t.duration[rows].sum())
        parts["rank"].append(np.full(rows.size, r, np.int64))
        parts["row"].append(rows.astype(np.int64))
        parts["node_id"].append(t.ids[rows].astype(np.uint64))
        parts["code"].append(m[t.name_codes[rows]].astype(np.int64))
        parts["flops"].append(t.num_ops[rows].astype(np.int64))
        parts["bytes"].append(t.tensor_size[rows].astype(np.uint64))
        parts["dur"].append(t.duration[rows].astype(np.float64))
        p = node_peaks(t, dev, fp32_as)
        remap = np.array([dtype_names.setdefault(x, len(dtype_names)) for x in p.dtypes] or [0], np.int64)
        parts["dtype"].append(np.where(p.known[rows], remap[p.dtype[rows]], 0))
        premap = np.array([peak_names.setdefault(x, len(peak_names)) for x in p.names], np.int64)
        parts["peak_type"].append(premap[p.peak[rows]])
        parts["peak"].append(p.flops[rows])
        parts["fallback"].append(p.fallback[rows])
    dtypes = {
        "rank": np.int64,
        "row": np.int64,
        "node_id": np.uint64,
        "code": np.int64,
        "flops": np.int64,
        "bytes": np.uint64,
        "dur": np.float64,
        "dtype": np.int64,
        "peak_type": np.int64,
        "peak": np.float64,
        "fallback": bool,
    }
    cat = {k: np.concatenate(v) if v else np.zeros(0, dtypes[k]) for k, v in parts.items()}
    f, b = cat["flops"].astype(np.float64), cat["bytes"].astype(np.float64)
    intensity = f / b
    dnames = np.array(list(dtype_names), object)
    dcode = cat["dtype"]
    peak = cat["peak"]
    attainable = np.minimum(peak, dev.mem_bw * intensity)
    with np.errstate(divide="ignore"):
        achieved = np.where(cat["dur"] > 0, f / (cat["dur"] * 1e-6), np.nan)
    coverage = {
        "comp_nodes": comp_nodes,
        "ops": ops,
        "skipped": comp_nodes - ops,
        "comp_time_us": comp_us,
        "covered_time_us": covered_us,
        # ops the trace gives no type for: costed at the device's default_dtype peak
        "dtype_unknown": int((dcode == 0).sum()),
        "default_dtype": dev.default_dtype,
        # ops whose type has no datasheet peak on the device: costed at a wider type's
        "dtype_fallback": int(cat["fallback"].sum()),
        "fp32_as": fp32_as_rule(dev, fp32_as),
    }
    return Roofline(
        device=dev,
        rank=cat["rank"],
        row=cat["row"],
        node_id=cat["node_id"],
        name=table[cat["code"]],
        flops=cat["flops"],
        bytes=cat["bytes"],
        intensity=intensity,
        duration_us=cat["dur"],
        achieved_flops=achieved,
        attainable_flops=attainable,
        bound=np.where(intensity < peak / dev.mem_bw, "memory", "compute"),
        efficiency=achieved / attainable,
        roof_time_us=f / attainable * 1e6,
        dtype=dnames[dcode],
        peak_dtype=np.array(list(peak_names), object)[cat["peak_type"]],
        peak_flops=peak,
        coverage=coverage,
        name_codes=cat["code"],
        name_table=table,
    )
