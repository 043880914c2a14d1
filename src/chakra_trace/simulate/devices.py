"""Named devices for the roofline compute model, so "this job on an H100" is one word.

A host-only trace of a GPU job has no kernel times: its device ops carry FLOPs (`num_ops`)
and bytes (`tensor_size`), and the simulator's roofline (``roofline_enabled``, ``peak_perf``,
``local_mem_bw`` of the system config) costs each as max(FLOPs / peak, bytes / bandwidth).
`with_device` sets those three from a preset. Figures are the vendors' datasheet peaks
(dense, no sparsity), so simulated times are lower bounds a real kernel rarely reaches:

- h100: NVIDIA H100 SXM5, 989 TFLOPS dense BF16/FP16 tensor core, 3.35 TB/s HBM3
  (NVIDIA H100 Tensor Core GPU datasheet, 2023).
- h200: NVIDIA H200 SXM, 989 TFLOPS dense BF16, 4.8 TB/s HBM3e (NVIDIA H200 datasheet, 2024).
- a100: NVIDIA A100 SXM4 80 GB, 312 TFLOPS dense BF16/FP16 tensor core, 2.039 TB/s HBM2e
  (NVIDIA A100 datasheet, 2021).
- v100: NVIDIA V100 SXM2, 125 TFLOPS FP16 tensor core, 900 GB/s HBM2 (V100 datasheet, 2018).
- cpu: a two-socket server CPU, ~3 TFLOPS FP32 (2 x 32 cores x 2.4 GHz x 2 AVX-512 FMA
  units x 16 lanes x 2) and ~300 GB/s (2 x 8 channels DDR5-4800, 38.4 GB/s each).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ChakraError
from .config import SystemConfig

__all__ = ["DEVICES", "Device", "device", "with_device"]


@dataclass(frozen=True)
class Device:
    """A device of the roofline model: peak compute (TFLOPS) and memory bandwidth (GB/s)."""

    name: str
    description: str
    peak_tflops: float
    mem_bw_gbs: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("h100", "NVIDIA H100 SXM5 (dense BF16, HBM3)", 989.0, 3350.0),
        Device("h200", "NVIDIA H200 SXM (dense BF16, HBM3e)", 989.0, 4800.0),
        Device("a100", "NVIDIA A100 SXM4 80 GB (dense BF16, HBM2e)", 312.0, 2039.0),
        Device("v100", "NVIDIA V100 SXM2 (FP16 tensor core, HBM2)", 125.0, 900.0),
        Device("cpu", "two-socket server CPU (FP32 AVX-512, 16 channels DDR5)", 3.0, 300.0),
    )
}


def device(name: str | Device) -> Device:
    """The preset called ``name`` (case-insensitive)."""
    if isinstance(name, Device):
        return name
    try:
        return DEVICES[name.lower()]
    except KeyError:
        raise ChakraError(f"unknown device {name!r}; devices: {', '.join(DEVICES)}") from None


def with_device(system: SystemConfig, dev: str | Device) -> SystemConfig:
    """``system`` with the roofline model on, at the device's peak and memory bandwidth."""
    d = device(dev)
    return dataclasses.replace(system, roofline_enabled=True, peak_perf=d.peak_tflops, local_mem_bw=d.mem_bw_gbs)
