"""Named devices: peak compute and memory bandwidth, for the roofline analysis
(`analyze.roofline`) and the simulator's roofline compute model (`simulate.devices`), so "this
job on an H100" is one word and both mean the same H100.

Figures are the vendors' datasheet peaks (dense, no sparsity): times at these roofs are lower
bounds a real kernel rarely reaches. "cpu" is this machine's CPU (`host_cpu`).

Power, for the simulator's energy model (`simulate.energy`): ``tdp_w`` is the datasheet's maximum
board / module power (TDP, or AMD's TBP), drawn while computing; ``idle_w`` the power of an idle
device, `IDLE_FRACTION` of it unless a preset states its own (vendors do not publish idle power;
nvidia-smi on an idle SXM GPU typically reads 10-20% of the TDP). None: not known, and the energy
model then asks for a figure rather than guessing one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..errors import ChakraError

__all__ = ["ANY_DTYPE", "DEVICES", "DTYPES", "IDLE_FRACTION", "DeviceSpec", "device_spec", "host_cpu"]

#: Idle power as a share of the TDP where a preset gives none: an assumption (see the module
#: docstring), named here so that reports can say it.
IDLE_FRACTION = 0.15


#: `DeviceSpec.default_dtype` of a device given by one peak (--peak-tflops): it holds for every type.
ANY_DTYPE = "any"

#: Other spellings of the compute types (numpy / torch names) as `DTYPES` names.
_CANON = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
}  # fmt: skip


@dataclass(frozen=True)
class DeviceSpec:
    """A device's roofs: peak FLOP/s and memory bandwidth (bytes/s); its power (W) when known."""

    name: str
    peak_flops: float  # FLOP/s
    mem_bw: float  # bytes/s
    tdp_w: float | None = None  # W while computing (datasheet TDP / TBP)
    idle_w: float | None = None  # W while idle (None: IDLE_FRACTION x tdp_w)
    # FLOP/s per compute type (`DTYPES`), dense datasheet peaks; empty: ``peak_flops`` for every type
    peaks: tuple[tuple[str, float], ...] = ()
    default_dtype: str = "bf16"  # the type ``peak_flops`` is the peak of; stands for an unknown type
    link_bw: float | None = None  # bytes/s per direction of the scale-up interconnect; None: unknown
    link: str = ""  # what ``link_bw`` is, with its source
    # FP32 convolutions run on TF32 tensor cores by default: cuDNN on NVIDIA Ampere and later
    # (PyTorch's ``torch.backends.cudnn.allow_tf32`` defaults to True); TF32 is opt-in on ROCm
    tf32_conv: bool = False

    def peak_for(self, dtype: str | None) -> tuple[float, str]:
        """(FLOP/s, the type whose peak it is) for work of element type ``dtype``: its own peak;
        a type the datasheet gives none for, the next wider one's (`_WIDER`; fp32 for integer
        and other types); None (unknown): ``default_dtype``'s, i.e. ``peak_flops``."""
        table = dict(self.peaks)
        if not table:
            return self.peak_flops, self.default_dtype
        d = self.default_dtype if dtype is None else _CANON.get(dtype, dtype)
        while d not in table:
            d = _WIDER.get(d, "fp32" if d != "fp32" else "")
            if not d:
                return self.peak_flops, self.default_dtype
        return table[d], d

    @property
    def idle_power_w(self) -> float | None:
        """Idle power (W): the preset's own, else `IDLE_FRACTION` of the TDP; None when unknown."""
        if self.idle_w is not None:
            return self.idle_w
        return None if self.tdp_w is None else IDLE_FRACTION * self.tdp_w

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roof bends from memory to compute bound."""
        return self.peak_flops / self.mem_bw

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "peak_flops": self.peak_flops,
            "mem_bw": self.mem_bw,
            "ridge": self.ridge,
            "tdp_w": self.tdp_w,
            "idle_w": self.idle_power_w,
            "peaks": dict(self.peaks),
            "default_dtype": self.default_dtype,
            "link_bw": self.link_bw,
            "link": self.link,
            "tf32_conv": self.tf32_conv,
        }


_T, _G = 1e12, 1e9

#: Compute types a device's datasheet gives a peak for, narrowest last. A node's ``dtype``
#: attribute (written by `chakra convert pytorch` from its inputs' recorded types) names one
#: of these or another element type (int64, bool, ...), which `DeviceSpec.peak_for` maps.
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
#: The next wider type whose peak stands in where a datasheet gives none for a type (V100 has
#: no BF16 tensor cores: BF16 work runs at most at its FP32 rate).
_WIDER = {"fp8": "fp16", "int8": "fp16", "fp16": "bf16", "bf16": "fp32", "tf32": "fp32", "fp64": "fp32"}


def _peaks(**tflops: float) -> tuple[tuple[str, float], ...]:
    return tuple((k, v * _T) for k, v in tflops.items())


# Per device: dense (no 2:4 structured sparsity) datasheet peaks per compute type, in TFLOPS,
# the highest the datasheet gives for that type (tensor / matrix cores where it lists them:
# FP64 is the FP64 Tensor Core or FP64 Matrix figure), HBM bandwidth, power, and the scale-up
# interconnect (NVLink / Infinity Fabric) per GPU and direction: the datasheet's aggregate
# bidirectional figure halved. Sparse figures, where a datasheet gives only those, are halved.
DEVICES: dict[str, DeviceSpec] = {}


def _add(key: str, *args, **kw) -> None:
    DEVICES[key] = DeviceSpec(*args, **kw)


# NVIDIA Tesla V100 datasheet (SXM2; "NVIDIA TESLA V100 GPU ACCELERATOR", 2018): double precision
# 7.8, single precision 15.7, tensor performance 125 TFLOPS (FP16 tensor cores; no BF16, TF32,
# FP8 or INT8 tensor figure); 900 GB/s HBM2; NVLink 300 GB/s; 300 W.
_add(
    "v100", "NVIDIA V100-SXM2", 125 * _T, 900 * _G, 300.0,
    peaks=_peaks(fp64=7.8, fp32=15.7, fp16=125), default_dtype="fp16",
    link_bw=150 * _G, link="NVLink 2: 300 GB/s bidirectional (V100 datasheet)",
)  # fmt: skip
# NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): FP64 Tensor Core 19.5, FP32 19.5, TF32 156
# (312 sparse), BF16/FP16 312 (624 sparse), INT8 624 TOPS (1,248 sparse); 2,039 GB/s; NVLink
# 600 GB/s; max TDP 400 W. No FP8.
_add(
    "a100", "NVIDIA A100-SXM4-80GB", 312 * _T, 2039 * _G, 400.0,
    peaks=_peaks(fp64=19.5, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
    link_bw=300 * _G, link="NVLink 3: 600 GB/s bidirectional (A100 datasheet)", tf32_conv=True,
)  # fmt: skip
# NVIDIA H100 Tensor Core GPU datasheet (SXM): FP64 Tensor Core 67, FP32 67, TF32 989 / BF16 1,979
# / FP16 1,979 / FP8 3,958 / INT8 3,958 with sparsity, i.e. 494.7 / 989.4 / 989.4 / 1,978.9 /
# 1,978.9 dense (NVIDIA H100 whitepaper); 3.35 TB/s; NVLink 900 GB/s; up to 700 W.
_add(
    "h100", "NVIDIA H100-SXM5", 989.4 * _T, 3350 * _G, 700.0,
    peaks=_peaks(fp64=67, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    link_bw=450 * _G, link="NVLink 4: 900 GB/s bidirectional (H100 datasheet)", tf32_conv=True,
)  # fmt: skip
# NVIDIA H100 Tensor Core GPU datasheet (PCIe): FP64 Tensor Core 51, FP32 51, TF32 756 / BF16
# 1,513 / FP16 1,513 / FP8 3,026 / INT8 3,026 with sparsity (half dense); 2 TB/s; NVLink bridge
# 600 GB/s; 300-350 W.
_add(
    "h100-pcie", "NVIDIA H100-PCIe", 756.5 * _T, 2000 * _G, 350.0,
    peaks=_peaks(fp64=51, fp32=51, tf32=378, bf16=756.5, fp16=756.5, fp8=1513, int8=1513),
    link_bw=300 * _G, link="NVLink bridge: 600 GB/s bidirectional (H100 PCIe datasheet)", tf32_conv=True,
)  # fmt: skip
# NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100 SXM's compute (FP64 Tensor Core 67, FP32
# 67, TF32 989 / BF16 1,979 / FP8 3,958 / INT8 3,958 with sparsity); 4.8 TB/s; NVLink 900 GB/s;
# up to 700 W.
_add(
    "h200", "NVIDIA H200-SXM", 989.4 * _T, 4800 * _G, 700.0,
    peaks=_peaks(fp64=67, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
    link_bw=450 * _G, link="NVLink 4: 900 GB/s bidirectional (H200 datasheet)", tf32_conv=True,
)  # fmt: skip
# NVIDIA HGX B200 datasheet, per GPU (1,000 W): FP64/FP64 Tensor Core 37, FP32 75, TF32 2.2 PF /
# FP16/BF16 4.5 PF / FP8 9 PF / INT8 9 POPS with sparsity (half dense); 8 TB/s HBM3e; NVLink 5
# 1.8 TB/s.
_add(
    "b200", "NVIDIA B200", 2250 * _T, 8000 * _G, 1000.0,
    peaks=_peaks(fp64=37, fp32=75, tf32=1100, bf16=2250, fp16=2250, fp8=4500, int8=4500),
    link_bw=900 * _G, link="NVLink 5: 1.8 TB/s bidirectional (HGX B200 datasheet)", tf32_conv=True,
)  # fmt: skip
# AMD Instinct MI300X datasheet: peak FP64 Matrix 163.4, FP32 Matrix 163.4, TF32 653.7, FP16/BF16
# 1,307.4, FP8 2,614.9, INT8 2,614.9 TOPS (dense; twice with sparsity); 5.3 TB/s HBM3; 750 W;
# 7 Infinity Fabric links at 128 GB/s peak each (896 GB/s aggregate bidirectional).
_add(
    "mi300x", "AMD MI300X", 1307.4 * _T, 5300 * _G, 750.0,
    peaks=_peaks(fp64=163.4, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9),
    link_bw=448 * _G, link="Infinity Fabric: 7 x 128 GB/s bidirectional (MI300X datasheet)",
)  # fmt: skip
# AMD Instinct MI250X datasheet (OAM module of two GCDs): FP64/FP32 Matrix 95.7, FP16/BF16 383,
# INT8 383 TOPS; 3.2768 TB/s; 560 W. PyTorch sees each GCD as one GPU (one rank): this preset is
# one GCD, half of every module figure. No TF32 or FP8. The module's 8 Infinity Fabric links
# include the GCD-to-GCD ones: no per-GCD figure, so no link (a system must be named).
_add(
    "mi250x", "AMD MI250X (one GCD: half the OAM module)", 191.5 * _T, 1638.4 * _G, 280.0,
    peaks=_peaks(fp64=47.85, fp32=47.85, bf16=191.5, fp16=191.5, int8=191.5),
)  # fmt: skip
# AMD Instinct MI210 datasheet (PCIe): FP64/FP32 Matrix 45.3, FP16/BF16 181.0, INT8 181.0 TOPS;
# 1.6384 TB/s HBM2e; 300 W; up to 3 Infinity Fabric links at 100 GB/s peak each (bridge).
_add(
    "mi210", "AMD MI210", 181 * _T, 1638.4 * _G, 300.0,
    peaks=_peaks(fp64=45.3, fp32=45.3, bf16=181, fp16=181, int8=181),
    link_bw=150 * _G, link="Infinity Fabric bridge: 3 x 100 GB/s bidirectional (MI210 datasheet)",
)  # fmt: skip
# Google Cloud TPU v5e documentation, per chip: 197 TFLOPS bf16, 394 TOPS int8, 819 GB/s HBM2
# (no published chip power: energy needs an explicit figure; no FP32 figure).
_add("tpu-v5e", "Google TPU v5e", 197 * _T, 819 * _G, peaks=_peaks(bf16=197, int8=394))
# A 2-socket server of Intel Xeon Platinum 8380 (Intel ARK: 40 cores, 2.3 GHz base, two
# AVX-512 FMA units, 8 channels DDR4-3200 per socket), FP32: 2 x 40 cores x 2.3 GHz x 64
# FLOP/cycle = 11.8 TFLOP/s (FP64 half of it) and 2 x 8 x 25.6 GB/s = 409.6 GB/s; TDP 270 W per
# socket (Intel ARK). No BF16 / AMX units (Ice Lake): narrower types run at the FP32 rate.
_add(
    "xeon-8380x2", "2-socket Intel Xeon Platinum 8380 (FP32)", 11.776 * _T, 409.6 * _G, 540.0,
    peaks=_peaks(fp64=5.888, fp32=11.776), default_dtype="fp32",
)  # fmt: skip
# "cpu" resolves to this machine's CPU (`host_cpu`); this is what it falls back to where
# /proc/cpuinfo cannot be read: a server-class figure, named as the assumption it is.
_add(
    "cpu", "generic CPU (assumed 11.8 TFLOP/s FP32, 409.6 GB/s, 540 W)", 11.776 * _T, 409.6 * _G, 540.0,
    peaks=_peaks(fp64=5.888, fp32=11.776), default_dtype="fp32",
)  # fmt: skip

#: Presets of a known CPU by a substring of its /proc/cpuinfo model name.
_CPU_MODELS = {"Platinum 8380": "xeon-8380x2"}
_ASSUMED_GBPS_PER_CORE = 10.0  # memory bandwidth is not in /proc/cpuinfo: a round per-core figure
# nor is power: the Xeon 8380's 270 W TDP over its 40 cores (Intel ARK), per logical CPU listed
_ASSUMED_W_PER_CORE = 270.0 / 40


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
    tdp = cores * _ASSUMED_W_PER_CORE
    return DeviceSpec(
        f"this machine's CPU, {model}: {cores} cores x {mhz / 1000:.2f} GHz x {per_cycle} FP32 FLOP/cycle "
        f"({isa}) = {peak / _T:.2f} TFLOP/s; memory bandwidth assumed {bw / _G:g} GB/s, power {tdp:g} W",
        peak,
        bw,
        tdp,
        peaks=(("fp64", peak / 2), ("fp32", peak)),  # FMA units run FP64 at half the FP32 lanes
        default_dtype="fp32",
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
        return DeviceSpec(
            f"custom ({peak_tflops:g} TFLOP/s, {mem_bw_gbps:g} GB/s)",
            peak_tflops * _T,
            mem_bw_gbps * _G,
            default_dtype=ANY_DTYPE,
        )
    if peak_tflops is None and mem_bw_gbps is None:
        return base
    return dataclasses.replace(  # a peak given is the one peak of every type
        base,
        name=f"{base.name} (custom)",
        peak_flops=base.peak_flops if peak_tflops is None else peak_tflops * _T,
        mem_bw=base.mem_bw if mem_bw_gbps is None else mem_bw_gbps * _G,
        peaks=base.peaks if peak_tflops is None else (),
        default_dtype=base.default_dtype if peak_tflops is None else ANY_DTYPE,
    )
