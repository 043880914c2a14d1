"""Roofline of a workload's compute ops: where each op sits against a device's compute and
memory roofs, from the FLOPs (`num_ops`) and bytes (`tensor_size`) the trace records.

An op's arithmetic intensity I = FLOPs / bytes decides which roof limits it: below the
ridge point (peak FLOP/s / memory bandwidth) it cannot go faster than bandwidth x I
(memory bound), above it the peak (compute bound). Comparing the FLOP/s an op achieved in
the trace (FLOPs / recorded duration) with that roof shows how far it is from the device's
limit, and FLOPs / roof is the time it would take at the roof.

The achieved rate uses each node's own recorded duration: on a GPU trace whose FLOPs sit on
the host ops (as the PyTorch converter writes them), that is the host-side time of the op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.enums import Attr, NodeType
from ..schema.resources import ACCEL, node_kinds
from ..schema.trace import Trace
from .diff import merge_names


@dataclass(frozen=True)
class DeviceSpec:
    """A device's roofs: peak FLOP/s and memory bandwidth (bytes/s)."""

    name: str
    peak_flops: float  # FLOP/s
    mem_bw: float  # bytes/s

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roof bends from memory to compute bound."""
        return self.peak_flops / self.mem_bw

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "peak_flops": self.peak_flops, "mem_bw": self.mem_bw, "ridge": self.ridge}


_T, _G = 1e12, 1e9
# Dense (no structured sparsity) BF16/FP16 tensor-core peak and HBM bandwidth per device.
DEVICES: dict[str, DeviceSpec] = {
    # NVIDIA Tesla V100 (SXM2) datasheet: 125 TFLOPS tensor performance (FP16), 900 GB/s HBM2.
    "v100": DeviceSpec("NVIDIA V100-SXM2", 125 * _T, 900 * _G),
    # NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM: BF16 312 TFLOPS (624 with sparsity), 2,039 GB/s.
    "a100": DeviceSpec("NVIDIA A100-SXM4-80GB", 312 * _T, 2039 * _G),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM: BF16 1,979 TFLOPS with sparsity (989.4 dense), 3.35 TB/s.
    "h100": DeviceSpec("NVIDIA H100-SXM5", 989.4 * _T, 3350 * _G),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: BF16 1,979 TFLOPS with sparsity (989.4 dense), 4.8 TB/s.
    "h200": DeviceSpec("NVIDIA H200-SXM", 989.4 * _T, 4800 * _G),
    # NVIDIA HGX B200 datasheet (per GPU, 1,000 W): BF16 4.5 PFLOPS with sparsity (2.25 dense), 8 TB/s HBM3e.
    "b200": DeviceSpec("NVIDIA B200", 2250 * _T, 8000 * _G),
    # AMD Instinct MI300X datasheet: peak BF16 1,307.4 TFLOPS dense (2,614.9 with sparsity), 5.3 TB/s HBM3.
    "mi300x": DeviceSpec("AMD MI300X", 1307.4 * _T, 5300 * _G),
    # Google Cloud TPU v5e documentation, per chip: 197 TFLOPS bf16, 819 GB/s HBM2.
    "tpu-v5e": DeviceSpec("Google TPU v5e", 197 * _T, 819 * _G),
    # A 2-socket server of Intel Xeon Platinum 8380 (Intel ARK: 40 cores, 2.3 GHz base, two
    # AVX-512 FMA units, 8 channels DDR4-3200 per socket), FP32: 2 x 40 cores x 2.3 GHz x 64
    # FLOP/cycle = 11.8 TFLOP/s and 2 x 8 x 25.6 GB/s = 409.6 GB/s.
    "xeon-8380x2": DeviceSpec("2-socket Intel Xeon Platinum 8380 (FP32)", 11.776 * _T, 409.6 * _G),
    # "cpu" resolves to this machine's CPU (`host_cpu`); this is what it falls back to where
    # /proc/cpuinfo cannot be read: a server-class figure, named as the assumption it is.
    "cpu": DeviceSpec("generic CPU (assumed 11.8 TFLOP/s FP32, 409.6 GB/s)", 11.776 * _T, 409.6 * _G),
}

#: Presets of a known CPU by a substring of its /proc/cpuinfo model name.
_CPU_MODELS = {"Platinum 8380": "xeon-8380x2"}
_ASSUMED_GBPS_PER_CORE = 10.0  # memory bandwidth is not in /proc/cpuinfo: a round per-core figure


def _fp32_flop_per_cycle(flags: set[str]) -> tuple[int, str]:
    """FP32 FLOP per cycle and core from the vector extensions, two FMA units assumed."""
    if "avx512f" in flags:
        return 64, "AVX-512 FMA"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2 FMA"
    if "avx" in flags:
        return 16, "AVX"
    return 8, "SSE"


def host_cpu(cpuinfo: str | None = None) -> DeviceSpec:
    """This machine's CPU as a roofline device: its preset when /proc/cpuinfo names a CPU that
    has one, else an estimate named as one (cores x clock x FP32 FLOP/cycle of its vector
    extensions, a per-core memory bandwidth assumed), so that no report names hardware that
    is not there. Without /proc/cpuinfo: the generic "cpu" figure."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return DEVICES["cpu"]
    model, mhz, cores = "", 0.0, 0
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            cores += 1
        elif key == "model name" and not model:
            model = value
        elif key == "cpu MHz" and not mhz:
            try:
                mhz = float(value)
            except ValueError:
                pass
        elif key == "flags" and not flags:
            flags = set(value.split())
    for part, name in _CPU_MODELS.items():
        if part in model:
            return DEVICES[name]
    if not (model and mhz > 0 and cores):
        return DEVICES["cpu"]
    per_cycle, isa = _fp32_flop_per_cycle(flags)
    peak = cores * mhz * 1e6 * per_cycle
    bw = cores * _ASSUMED_GBPS_PER_CORE * _G
    return DeviceSpec(
        f"this machine's CPU, {model}: {cores} cores x {mhz / 1000:.2f} GHz x {per_cycle} FP32 FLOP/cycle "
        f"({isa}) = {peak / _T:.2f} TFLOP/s; memory bandwidth assumed {bw / _G:g} GB/s",
        peak,
        bw,
    )


def device_spec(
    spec: str | DeviceSpec | None = None, *, peak_tflops: float | None = None, mem_bw_gbps: float | None = None
) -> DeviceSpec:
    """A preset by name (case-insensitive; "cpu": this machine's CPU, `host_cpu`), a DeviceSpec
    as is, or one from an explicit peak (TFLOP/s) and bandwidth (GB/s). Given with a preset, an explicit figure overrides it."""
    base: DeviceSpec | None
    if isinstance(spec, DeviceSpec):
        base = spec
    elif spec is not None and str(spec).strip().lower() == "cpu":
        base = host_cpu()
    elif spec is not None:
        base = DEVICES.get(str(spec).strip().lower())
        if base is None:
            raise ChakraError(
                f"unknown device {spec!r}; presets: {', '.join(DEVICES)} "
                "(or give a peak in TFLOP/s and a memory bandwidth in GB/s)"
            )
    elif peak_tflops is None or mem_bw_gbps is None:
        raise ChakraError(
            "a device needs a preset name or both a peak (TFLOP/s) and a memory bandwidth (GB/s); "
            f"presets: {', '.join(DEVICES)}"
        )
    else:
        base = None
    for label, v in (("peak TFLOP/s", peak_tflops), ("memory bandwidth GB/s", mem_bw_gbps)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ChakraError(f"device {label} must be a positive number, got {v!r}")
    if base is None:
        assert peak_tflops is not None and mem_bw_gbps is not None  # checked above
        return DeviceSpec(f"custom ({peak_tflops:g} TFLOP/s, {mem_bw_gbps:g} GB/s)", peak_tflops * _T, mem_bw_gbps * _G)
    if peak_tflops is None and mem_bw_gbps is None:
        return base
    return DeviceSpec(
        f"{base.name} (custom)",
        base.peak_flops if peak_tflops is None else peak_tflops * _T,
        base.mem_bw if mem_bw_gbps is None else mem_bw_gbps * _G,
    )


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


_COLUMNS = (
    "rank",
    "row",
    "node_id",
    "name",
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
class Roofline:
    """Per-op columns (numpy arrays of equal length, one entry per COMP node with FLOPs and
    bytes): rank, row, node_id, name, flops, bytes, intensity (FLOP/B), duration_us (as
    recorded, 0 when none), achieved_flops and efficiency (NaN when the duration is 0), attainable_flops (the
    roof at the op's intensity), bound ("memory"/"compute"), roof_time_us (time at the roof).
    ``coverage`` says how many COMP nodes (and how much of their time) had counts."""

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
        cols = {c: getattr(self, c).tolist() for c in _COLUMNS}
        out = [dict(zip(_COLUMNS, vals)) for vals in zip(*(cols[c] for c in _COLUMNS))]
        for r in out:
            for k in ("achieved_flops", "efficiency"):
                r[k] = _num(r[k])
        return out

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
        attainable = np.minimum(self.device.peak_flops, self.device.mem_bw * intensity)
        with np.errstate(divide="ignore", invalid="ignore"):
            achieved = np.where(time_us > 0, timed_flops / (time_us * 1e-6), np.nan)
        efficiency = achieved / attainable
        bound = np.where(intensity < self.device.ridge, "memory", "compute")
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
        }

    def to_dict(self, ops: bool = True) -> dict[str, Any]:
        d = {"device": self.device.to_dict(), "summary": self.summary(), "by_name": self.by_name()}
        if ops:
            d["ops"] = self.records
        return d

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame({c: getattr(self, c) for c in _COLUMNS})


def roofline(workload: Workload | Trace, device: str | DeviceSpec = "h100") -> Roofline:
    """Every COMP node (all ranks) with num_ops > 0 and tensor_size > 0 against `device`'s roofs."""

    dev = device_spec(device)
    if isinstance(workload, Trace):
        workload = Workload({0: workload})
    traces = [workload.traces[r] for r in workload.ranks]
    table, maps = merge_names([t.names for t in traces])
    parts: dict[str, list[np.ndarray]] = {c: [] for c in ("rank", "row", "node_id", "code", "flops", "bytes", "dur")}
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
    dtypes = {
        "rank": np.int64,
        "row": np.int64,
        "node_id": np.uint64,
        "code": np.int64,
        "flops": np.int64,
        "bytes": np.uint64,
        "dur": np.float64,
    }
    cat = {k: np.concatenate(v) if v else np.zeros(0, dtypes[k]) for k, v in parts.items()}
    f, b = cat["flops"].astype(np.float64), cat["bytes"].astype(np.float64)
    intensity = f / b
    attainable = np.minimum(dev.peak_flops, dev.mem_bw * intensity)
    with np.errstate(divide="ignore"):
        achieved = np.where(cat["dur"] > 0, f / (cat["dur"] * 1e-6), np.nan)
    coverage = {
        "comp_nodes": comp_nodes,
        "ops": ops,
        "skipped": comp_nodes - ops,
        "comp_time_us": comp_us,
        "covered_time_us": covered_us,
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
        bound=np.where(intensity < dev.ridge, "memory", "compute"),
        efficiency=achieved / attainable,
        roof_time_us=f / attainable * 1e6,
        coverage=coverage,
        name_codes=cat["code"],
        name_table=table,
    )
