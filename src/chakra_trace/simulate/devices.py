"""A named device as the simulator's roofline compute model, so "this job on an H100" is one word.

A host-only trace of a GPU job has no kernel times: its device ops carry FLOPs (`num_ops`)
and bytes (`tensor_size`), and the simulator's roofline (``roofline_enabled``, ``peak_perf``,
``local_mem_bw`` of the system config) costs each as max(FLOPs / peak, bytes / bandwidth).
`with_device` sets those three from a device of `schema.devices` (the datasheet presets the
roofline analysis uses too, or "cpu": this machine's CPU), so simulated times are lower bounds
a real kernel rarely reaches. The peak is the node's element type's (its ``dtype`` attribute:
FP32 work at the FP32 peak, BF16 at the BF16 one, TF32 per ``fp32_as``, `schema.compute_types`),
the device's default type's for a node without one (counted in the result's
``compute_types``); under ASTRA-sim's rules, and with a system file's own ``peak-perf``, one
peak for every node.

Nothing such a job cannot answer is answered with 0 (`recorded_answer`): "recorded" on a job
without recorded durations is refused; its collectives, without recorded times, are costed
from their sizes on the device's own interconnect (`DeviceSpec.link_bw`, the datasheet's NVLink
or Infinity Fabric bandwidth per direction, on one switch of the job's ranks, with
`LINK_LATENCY_NS` assumed), or refused where the device table has no such figure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import ChakraError
from ..schema.compute_types import DeviceCompute
from ..schema.devices import DEVICES, DeviceSpec, device_spec
from ..schema.enums import Attr, NodeType
from ..schema.kernel_models import KernelModel, kernel_model
from .config import SystemConfig

__all__ = ["LINK_LATENCY_NS", "Untimed", "recorded_answer", "untimed", "untimed_compute", "with_device"]

#: Latency (ns) of a device's interconnect when collectives without recorded times are costed on
#: it: datasheets give none; the dgx presets' NVSwitch figure, an assumption the notes name.
LINK_LATENCY_NS = 250.0


def with_device(
    system: SystemConfig,
    dev: str | DeviceSpec,
    efficiency: float = 1.0,
    *,
    fp32_as: str = "pytorch",
    kernels: bool | KernelModel = False,
) -> SystemConfig:
    """``system`` with the roofline model on, at the device's peak (TFLOPS) and memory
    bandwidth (GB/s) times `efficiency`: the share of both roofs real kernels reach (one figure
    for every op, a guess; the kernel model, ``kernels``, needs none). ``peak_perf`` is the device's default type's peak (what an
    untyped node runs at); ``device_compute`` carries its per-type peaks, so that each node with
    a ``dtype`` runs at its type's (`schema.compute_types`; ``fp32_as``: which FP32 ops run as
    TF32, "pytorch" for PyTorch's defaults). ASTRA-sim's rules use ``peak_perf`` for all.
    ``kernels``: cost nodes by the device's kernel model (`schema.kernel_models`, `simulate.kernels`:
    achievable matmul rates with tile and wave fill, fused attention, memory-bound kernels at
    achievable bandwidth, launch gaps) instead of the roofline; True: the preset's model."""
    if not 0 < efficiency <= 1:
        raise ChakraError(f"device efficiency must be in (0, 1], got {efficiency}")
    d = device_spec(dev)
    km: KernelModel | None = None
    if isinstance(kernels, KernelModel):
        km = kernels
    elif kernels:
        key = dev if isinstance(dev, str) else next((k for k, v in DEVICES.items() if v == d), d.name)
        km = kernel_model(str(key))
    return dataclasses.replace(
        system,
        roofline_enabled=True,
        peak_perf=d.peak_flops * efficiency / 1e12,
        local_mem_bw=d.mem_bw * efficiency / 1e9,
        device_compute=DeviceCompute(d, efficiency, fp32_as, km),
    )


def untimed_compute(workload) -> bool:
    """Whether a job's compute nodes carry FLOPs and no recorded time (`chakra capture`,
    `chakra parallelize`; its first rank's trace says): simulating it needs a device to cost them."""
    if not len(workload):
        return False
    t = workload.traces[min(workload.ranks)]
    comp = (t.types == NodeType.COMP_NODE) & (t.num_ops > 0)
    return bool(comp.any()) and not bool(t.duration[comp].any())


_COMM = np.array([NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE])


@dataclass(frozen=True)
class Untimed:
    """What a job's recorded times leave unknown, over all its ranks: nodes, those with a
    recorded duration, communication nodes (and bytes) with and without one, and compute nodes
    with neither a duration nor FLOPs or bytes a device could cost them by."""

    nodes: int = 0
    timed: int = 0
    comm: int = 0
    comm_timed: int = 0
    comm_untimed_bytes: int = 0
    compute_uncosted: int = 0

    @property
    def comm_untimed(self) -> int:
        return self.comm - self.comm_timed


def untimed(workload) -> Untimed:
    """Count what the recorded times of ``workload`` (a `Workload`) leave unknown (`Untimed`)."""
    n = timed = comm = comm_timed = comm_bytes = uncosted = 0
    for r in workload.ranks:
        t = workload.traces[r]
        busy = t.duration > 0
        is_comm = np.isin(t.types, _COMM)
        n += len(t)
        timed += int(busy.sum())
        comm += int(is_comm.sum())
        comm_timed += int((is_comm & busy).sum())
        comm_bytes += int(t.comm_size[is_comm & ~busy].astype(np.int64).sum())
        comp = t.types == NodeType.COMP_NODE
        costable = t.has(Attr.NUM_OPS) & (t.num_ops > 0) | t.has(Attr.TENSOR_SIZE) & (t.tensor_size > 0)
        uncosted += int((comp & ~busy & ~costable).sum())
    return Untimed(n, timed, comm, comm_timed, comm_bytes, uncosted)


def _refuse_transformed(workload, preset) -> None:
    """ "recorded" keeps every node's recorded wait after its dependencies and each rank's
    recorded start; a job whose node times or sizes a what-if transform changed
    (`Trace.transformed`) no longer matches its recorded start times, so the waits would grow by
    whatever the transform took away (a 2x faster compute shows as idle): refused, with why."""
    if not (preset.network is None and preset.link is None and preset.comm == "recorded"):
        return
    for rank, t in sorted(workload.traces.items()):
        if t.transformed and t.timed:
            raise ChakraError(
                f"rank {rank} was changed after the recording ({'; '.join(t.transformed)}), so its recorded "
                f"start times no longer match its nodes: the {preset.name!r} system keeps recorded waits and "
                "would turn the change into idle time; simulate it on 'ideal', 'switch' or a network preset"
            )


def recorded_answer(workload, preset):
    """``preset`` (a `presets.SystemPreset`) as it can answer for ``workload``, and notes saying
    what its answer leaves out; raises ChakraError where the answer would be a 0 standing for
    "unknown":

    - no node has a recorded duration and no device costs compute: "recorded" and "ideal"
      (every time as recorded) are refused, a network system notes that compute counts 0;
    - "recorded" with a device, on a job whose communication has no recorded time: costed from
      its sizes on one switch of the job's ranks at the device's interconnect bandwidth
      (`DeviceSpec.link_bw`), or refused when the device table has none;
    - "recorded" on a job a what-if transform changed (`_refuse_transformed`) is refused;
    - what stays 0 is said: communication "recorded" without a time, compute nodes neither
      timed nor costable, collectives on a single NPU."""
    _refuse_transformed(workload, preset)
    u = untimed(workload)
    notes: list[str] = []
    if not u.nodes:
        return preset, notes
    own_ranks = preset.network is None and preset.link is None
    replays = own_ranks and preset.comm in ("recorded", "ideal")
    roof = bool(preset.system.roofline_enabled)
    names = ", ".join(k for k in DEVICES if k != "cpu")
    if not u.timed and not roof:
        if replays:
            raise ChakraError(
                f"the job's {u.nodes:,} nodes carry no recorded durations (a host-only trace?): the "
                f"{preset.name!r} system replays recorded times and would answer 0 ns; cost them on a device "
                f"with --device NAME ({names}), and a network with --system"
            )
        notes.append(
            f"no node carries a recorded duration and no device costs compute: compute counts 0 ns "
            f"(--device NAME costs it: {names})"
        )
    dev = getattr(preset, "device", None)
    single = len(workload) == 1 and (preset.network is None or preset.network.npus == 1)
    if own_ranks and preset.comm == "recorded" and u.comm and not u.comm_timed:
        if single:  # no peer: nothing to cost on any interconnect (said below)
            pass
        elif roof:
            if dev is None or dev.link_bw is None:
                what = dev.name if dev is not None else "the device"
                raise ChakraError(
                    f"the job's {u.comm:,} communication nodes ({u.comm_untimed_bytes:,} B) carry no recorded "
                    f"time and {what} has no interconnect figure in the device table: name a system to cost "
                    "them on (--system switch, another preset, or ASTRA-sim's network and system files)"
                )
            gbps = dev.link_bw / 1e9
            preset = dataclasses.replace(preset, link=(gbps, LINK_LATENCY_NS), comm="network")
            notes.append(
                f"communication: {u.comm:,} nodes ({u.comm_untimed_bytes:,} B) carry no recorded time; costed "
                f"from their sizes on one switch of the job's ranks at {dev.name}'s {gbps:g} GB/s per direction "
                f"({dev.link}) and {LINK_LATENCY_NS:g} ns (assumed)"
            )
        else:
            notes.append(
                f"communication: {u.comm:,} nodes ({u.comm_untimed_bytes:,} B) carry no recorded time and count "
                "0 ns on the recorded system; --device NAME or a --system costs them from their sizes"
            )
    elif own_ranks and preset.comm == "recorded" and u.comm_untimed and u.comm_untimed_bytes:
        notes.append(
            f"communication: {u.comm_untimed:,} of {u.comm:,} nodes ({u.comm_untimed_bytes:,} B) carry no "
            "recorded time and count 0 ns"
        )
    if roof and u.compute_uncosted:
        notes.append(
            f"{u.compute_uncosted:,} compute nodes carry neither a recorded duration nor FLOPs or bytes to cost: "
            "0 ns each (unknown)"
        )
    on_network = preset.comm == "network" or not own_ranks
    if single and u.comm and (on_network or (preset.comm == "recorded" and not u.comm_timed)):
        notes.append(
            f"the job has one rank: its {u.comm:,} communication nodes run on one NPU with no peer and move "
            "nothing (0 ns)"
        )
    return preset, notes
