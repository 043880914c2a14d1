"""A named device as the simulator's roofline compute model, so "this job on an H100" is one word.

A host-only trace of a GPU job has no kernel times: its device ops carry FLOPs (`num_ops`)
and bytes (`tensor_size`), and the simulator's roofline (``roofline_enabled``, ``peak_perf``,
``local_mem_bw`` of the system config) costs each as max(FLOPs / peak, bytes / bandwidth).
`with_device` sets those three from a device of `schema.devices` (the datasheet presets the
roofline analysis uses too, or "cpu": this machine's CPU), so simulated times are lower bounds
a real kernel rarely reaches.
"""

from __future__ import annotations

import dataclasses

from ..errors import ChakraError
from ..schema.devices import DeviceSpec, device_spec
from ..schema.enums import NodeType
from .config import SystemConfig

__all__ = ["untimed_compute", "with_device"]


def with_device(system: SystemConfig, dev: str | DeviceSpec, efficiency: float = 1.0) -> SystemConfig:
    """``system`` with the roofline model on, at the device's peak (TFLOPS) and memory
    bandwidth (GB/s) times `efficiency`: the share of both roofs real kernels reach (one figure
    for every op; e.g. 0.55 puts Megatron-LM's published 22B step on A100s within 0.1%,
    `benchmarks/published.py`)."""
    if not 0 < efficiency <= 1:
        raise ChakraError(f"device efficiency must be in (0, 1], got {efficiency}")
    d = device_spec(dev)
    return dataclasses.replace(
        system,
        roofline_enabled=True,
        peak_perf=d.peak_flops * efficiency / 1e12,
        local_mem_bw=d.mem_bw * efficiency / 1e9,
    )


def untimed_compute(workload) -> bool:
    """Whether a job's compute nodes carry FLOPs and no recorded time (`chakra capture`,
    `chakra parallelize`; its first rank's trace says): simulating it needs a device to cost them."""
    if not len(workload):
        return False
    t = workload.traces[min(workload.ranks)]
    comp = (t.types == NodeType.COMP_NODE) & (t.num_ops > 0)
    return bool(comp.any()) and not bool(t.duration[comp].any())
