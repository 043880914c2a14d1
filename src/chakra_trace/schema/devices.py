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

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ChakraError

__all__ = ["DEVICES", "IDLE_FRACTION", "DeviceSpec", "device_spec", "host_cpu"]

#: Idle power as a share of the TDP where a preset gives none: an assumption (see the module
#: docstring), named here so that reports can say it.
IDLE_FRACTION = 0.15


@dataclass(frozen=True)
class DeviceSpec:
    """A device's roofs: peak FLOP/s and memory bandwidth (bytes/s); its power (W) when known."""

    name: str
    peak_flops: float  # FLOP/s
    mem_bw: float  # bytes/s
    tdp_w: float | None = None  # W while computing (datasheet TDP / TBP)
    idle_w: float | None = None  # W while idle (None: IDLE_FRACTION x tdp_w)

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
        }


_T, _G = 1e12, 1e9
# Dense (no structured sparsity) BF16/FP16 tensor-core peak and HBM bandwidth per device.
DEVICES: dict[str, DeviceSpec] = {
    # NVIDIA Tesla V100 (SXM2) datasheet: 125 TFLOPS tensor performance (FP16), 900 GB/s HBM2;
    # max power consumption 300 W.
    "v100": DeviceSpec("NVIDIA V100-SXM2", 125 * _T, 900 * _G, 300.0),
    # NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM: BF16 312 TFLOPS (624 with sparsity), 2,039 GB/s;
    # max TDP 400 W.
    "a100": DeviceSpec("NVIDIA A100-SXM4-80GB", 312 * _T, 2039 * _G, 400.0),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM: BF16 1,979 TFLOPS with sparsity (989.4 dense), 3.35 TB/s;
    # max TDP up to 700 W (configurable).
    "h100": DeviceSpec("NVIDIA H100-SXM5", 989.4 * _T, 3350 * _G, 700.0),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: BF16 1,979 TFLOPS with sparsity (989.4 dense), 4.8 TB/s;
    # max TDP up to 700 W (configurable).
    "h200": DeviceSpec("NVIDIA H200-SXM", 989.4 * _T, 4800 * _G, 700.0),
    # NVIDIA HGX B200 datasheet (per GPU, 1,000 W): BF16 4.5 PFLOPS with sparsity (2.25 dense), 8 TB/s HBM3e.
    "b200": DeviceSpec("NVIDIA B200", 2250 * _T, 8000 * _G, 1000.0),
    # AMD Instinct MI300X datasheet: peak BF16 1,307.4 TFLOPS dense (2,614.9 with sparsity), 5.3 TB/s HBM3;
    # 750 W peak total board power.
    "mi300x": DeviceSpec("AMD MI300X", 1307.4 * _T, 5300 * _G, 750.0),
    # Google Cloud TPU v5e documentation, per chip: 197 TFLOPS bf16, 819 GB/s HBM2 (no published
    # chip power: energy needs an explicit figure).
    "tpu-v5e": DeviceSpec("Google TPU v5e", 197 * _T, 819 * _G),
    # A 2-socket server of Intel Xeon Platinum 8380 (Intel ARK: 40 cores, 2.3 GHz base, two
    # AVX-512 FMA units, 8 channels DDR4-3200 per socket), FP32: 2 x 40 cores x 2.3 GHz x 64
    # FLOP/cycle = 11.8 TFLOP/s and 2 x 8 x 25.6 GB/s = 409.6 GB/s; TDP 270 W per socket (Intel ARK).
    "xeon-8380x2": DeviceSpec("2-socket Intel Xeon Platinum 8380 (FP32)", 11.776 * _T, 409.6 * _G, 540.0),
    # "cpu" resolves to this machine's CPU (`host_cpu`); this is what it falls back to where
    # /proc/cpuinfo cannot be read: a server-class figure, named as the assumption it is.
    "cpu": DeviceSpec("generic CPU (assumed 11.8 TFLOP/s FP32, 409.6 GB/s, 540 W)", 11.776 * _T, 409.6 * _G, 540.0),
}

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
        base.tdp_w,
        base.idle_w,
    )
