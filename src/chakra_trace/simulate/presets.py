"""Named hypothetical systems, so "what if this job ran on a torus / a DGX pod" is one word.

Each preset is a network (ASTRA-sim's analytical model: per dimension a topology, NPU count,
bandwidth in GB/s per NPU link and latency in ns) and a system layer (collective algorithm
per dimension, chunking). Figures are round numbers of the class of machine named, not a
vendor's measurement: edit a copy (`preset(name).network`, `dataclasses.replace`) or write
the YAML/JSON files for anything precise.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import ChakraError
from ..io.workload import read_comm_groups
from ..schema.devices import DeviceSpec, device_spec
from ..synthesize.scale import data_parallel
from .clusters import CLUSTERS
from .config import Network, SystemConfig
from .devices import recorded_answer, with_device
from .nccl import Cluster
from .peers import job_groups, job_npus
from .simulator import SimulationWarning, simulate


@dataclass(frozen=True)
class SystemPreset:
    """A named system. Without a network: the job's own ranks, every node at its recorded time,
    communication as recorded or free (``comm`` "recorded" or "ideal", `simulator.COMM_MODELS`),
    or with ``link`` (GB/s, ns) on one switch of as many NPUs as the job has ranks, or with
    ``cluster`` on a real machine of as many nodes as the job fills, communication as NCCL
    runs it there (comm "nccl", `nccl`, `clusters`)."""

    name: str
    description: str
    network: Network | None
    system: SystemConfig
    comm: str = "network"
    link: tuple[float, float] | None = None
    device: DeviceSpec | None = None  # its compute's device (`with_compute`); its link costs untimed comm
    cluster: Cluster | None = None  # a real machine (`clusters`): nodes, NVLink, NICs; comm "nccl"

    @property
    def npus(self) -> int | None:
        """NPUs of the system (None: as many as the job has ranks)."""
        return self.network.npus if self.network is not None else None


def preset_system(algorithms: list[str]) -> SystemConfig:
    """The presets' system configuration with `algorithms` (one per network dimension) for every
    collective: LIFO, 10 ns endpoint delay, 4 splits, one active chunk, localBWAware."""
    return SystemConfig.from_dict(
        {
            "scheduling-policy": "LIFO",
            "endpoint-delay": 10,
            "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 4,
            "collective-optimization": "localBWAware",
            "local-mem-bw": 1600,
            **{f"{c}-implementation": algorithms for c in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")},
        }
    )


def _presets() -> dict[str, SystemPreset]:
    def p(name, description, topology, npus, bandwidth, latency, algorithms):
        return SystemPreset(
            name, description, Network.simple(topology, npus, bandwidth, latency), preset_system(algorithms)
        )

    return {
        x.name: x
        for x in (
            p("ring-8", "8 NPUs on one bidirectional ring, 50 GB/s links, 500 ns", "Ring", 8, 50, 500, ["ring"]),
            p(
                "torus-8x8",
                "64 NPUs on an 8x8 2D torus (TPU-pod-like), 100 GB/s per link, 500 ns per hop",
                ["Ring", "Ring"],
                [8, 8],
                [100, 100],
                [500, 500],
                ["ring", "ring"],
            ),
            p(
                "dgx-8x8",
                "64 GPUs as 8 DGX-class nodes: an NVSwitch inside a node (400 GB/s, 250 ns), a "
                "switched 400 Gb/s fabric between nodes (50 GB/s per GPU, 2 µs)",
                ["Switch", "Switch"],
                [8, 8],
                [400, 50],
                [250, 2000],
                ["direct", "ring"],
            ),
            p(
                "dgx-8x128",
                "1,024 GPUs as 128 DGX-class nodes (as dgx-8x8, wider)",
                ["Switch", "Switch"],
                [8, 128],
                [400, 50],
                [250, 2000],
                ["direct", "ring"],
            ),
            p(
                "torus-4x4x4",
                "64 NPUs on a 4x4x4 3D torus, 50 GB/s per link, 300 ns per hop",
                ["Ring", "Ring", "Ring"],
                [4, 4, 4],
                [50, 50, 50],
                [300, 300, 300],
                ["ring", "ring", "ring"],
            ),
            SystemPreset(
                "recorded",
                "the job as recorded: its own ranks, every node (collectives included) takes its recorded "
                "time; the baseline the other systems compare with",
                None,
                preset_system(["ring"]),
                comm="recorded",
            ),
            SystemPreset(
                "switch",
                "the job's own ranks on one switch, 50 GB/s links, 500 ns: its communication on a "
                "network, whatever its rank count",
                None,
                preset_system(["ring"]),
                link=(50, 500),
            ),
            SystemPreset(
                "ideal",
                "the job's own ranks on an ideal network: compute as recorded, communication free once "
                "every member is there (a lower bound no network beats)",
                None,
                preset_system(["ring"]),
                comm="ideal",
            ),
            *(_machine(c) for c in CLUSTERS.values()),
        )
    }


def _machine(c: Cluster) -> SystemPreset:
    """A real machine (`clusters`) as a preset: its network as NCCL costs it, its GPU's kernel
    model for compute nodes (`simulate.kernels`, as `with_compute` sets it; --device replaces it)."""
    assert c.device is not None
    about = c.fabric + "; communication as NCCL runs it, compute by the GPU's kernel model"
    p = SystemPreset(c.name, about, None, preset_system(["ring"]), comm="nccl")
    system = with_device(p.system, c.device, kernels=True)
    return dataclasses.replace(p, system=system, device=device_spec(c.device), cluster=c)


PRESETS = _presets()


def preset(name: str) -> SystemPreset:
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ChakraError(f"unknown system preset {name!r}; presets: {', '.join(PRESETS)}") from None


def resolve(spec: str | SystemPreset) -> SystemPreset:
    """A preset name, or "NETWORK.yaml,SYSTEM.json" (ASTRA-sim's files), as a SystemPreset."""
    if isinstance(spec, SystemPreset):
        return spec
    if "," in spec:
        net, _, sys_ = spec.partition(",")
        return _astra_files(net.strip(), sys_.strip())
    return preset(spec)


def _astra_files(net: str, sys_: str) -> SystemPreset:
    """ASTRA-sim's network YAML and system JSON as a system (named for the network file)."""
    return SystemPreset(Path(net).stem, f"{net} with {sys_}", Network.from_yaml(net), SystemConfig.from_json(sys_))


def step_changes(original, changed, systems=("recorded", "switch"), **kw) -> list[dict]:
    """The simulated step of a job and of a changed copy of it (obfuscated, transformed) on each
    system: [{"system", "original_ns", "changed_ns", "change"}], change relative."""
    out = []
    for spec in systems:
        a, b = (int(simulate_on(w, spec, **kw).recording_ns) for w in (original, changed))
        out.append({"system": resolve(spec).name, "original_ns": a, "changed_ns": b, "change": b / a - 1 if a else 0.0})
    return out


def simulate_on(workload, system: str | SystemPreset, **kw):
    """Simulate a recorded job on another system: scaled out data-parallel when the system
    has more NPUs than the job has ranks (`synthesize.scale.data_parallel`). Returns the
    SimResult; its ``traces`` say which recorded rank each NPU ran."""

    p, notes = recorded_answer(workload, resolve(system))  # (never a 0 that means "unknown")
    groups = kw.get("comm_groups")
    groups = read_comm_groups(groups) if isinstance(groups, (str, os.PathLike)) else groups
    # the job's NPUs: its ranks and those its groups name (absent ones: symmetric copies, `peers`)
    n = job_npus(workload.traces, job_groups(workload, groups)) if len(workload) else 1
    if p.network is None:  # the job's own ranks
        if p.cluster is not None:  # on as many nodes of a real machine as they fill
            net = Network.simple("FullyConnected", n, 1, 0)
            res = simulate(workload, net, p.system, comm="nccl", cluster=p.cluster.sized(n), **kw)
        elif p.link is not None:
            res = simulate(workload, Network.simple("Switch", n, *p.link), p.system, **kw)
        else:
            res = simulate(workload, Network.simple("FullyConnected", n, 1, 0), p.system, comm=p.comm, **kw)
    else:
        if len(workload) not in (1, p.network.npus) and n != p.network.npus:
            workload = data_parallel(workload, p.network.npus)
        res = simulate(workload, p.network, p.system, **kw)
    res.warnings.extend(notes)
    return res


def simulate_each(workload, systems, *, keep_going: bool = True, progress=None, **kw) -> tuple[dict, dict[str, str]]:
    """Simulate a job on each system: ({label: SimResult}, {label: why} of the systems it cannot
    run on; with ``keep_going`` False the first such error is raised). Every system is resolved
    before the first simulation; simulation notes stay in each result's ``warnings`` rather than
    being emitted as they happen. ``progress(1)`` after each system."""
    presets = [resolve(spec) for spec in systems]
    done, failed = {}, {}
    for p in presets:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SimulationWarning)
                done[p.name] = simulate_on(workload, p, **kw)
        except ChakraError as e:
            if not keep_going:
                raise
            failed[p.name] = str(e)
        if progress:
            progress(1)
    return done, failed


def with_compute(
    p: SystemPreset, device, efficiency: float = 1.0, *, fp32_as: str = "pytorch", kernels: bool = False
) -> SystemPreset:
    """The preset with its compute costed at ``device``'s roofline times ``efficiency``, each
    node at its type's peak (``fp32_as``: `schema.compute_types`; `devices.with_device`), or by
    the device's kernel model (``kernels``: `simulate.kernels`), on a network or on the job's own
    ranks alike: what `chakra simulate --device`, the report's costing of untimed compute and a
    sweep's ``device`` axis all mean."""
    system = with_device(p.system, device, efficiency, fp32_as=fp32_as, kernels=kernels)
    return dataclasses.replace(p, system=system, device=device_spec(device))


def choose_system(
    system: str | None,
    network: str | os.PathLike | None = None,
    *,
    device=None,
    efficiency: float = 1.0,
    fp32_as: str | None = None,
    kernels: bool | None = None,
) -> SystemPreset:
    """The one reading of "simulate on this system" (`chakra simulate`, the report, the analyses'
    --simulate): a preset name, "NETWORK.yaml,SYSTEM.json", or a system JSON with ``network``
    (ASTRA-sim's two files, the same as the comma form); with ``device``, its compute at that
    device's roofline times ``efficiency`` (`with_compute`; ``fp32_as``: which FP32 ops run as TF32,
    None for PyTorch's defaults; ``kernels``: by its kernel model instead of its roofline, None:
    on a real machine's preset (`clusters`) yes, elsewhere no), and a device alone means the job's
    own ranks at their recorded times ("recorded")."""
    if efficiency != 1.0 and device is None:
        raise ChakraError("an efficiency scales a device's roofline: give the device too")
    if fp32_as is not None and device is None:
        raise ChakraError("fp32_as says at which peak a device runs FP32 work: give the device too")
    if kernels and device is None:
        raise ChakraError("the kernel model is a device's: give the device too")
    if system is None and network is None and device is not None:
        system = "recorded"
    if system is None:
        raise ChakraError(f"no system: a preset ({', '.join(PRESETS)}) or a system JSON with its network")
    if network is not None:
        if not os.path.isfile(system):
            raise ChakraError(
                f"a network goes with a system JSON file; {system!r} is not a file (a preset has its own network)"
            )
        p = _astra_files(os.fspath(network), system)
    elif os.path.isfile(system) and system.lower() not in PRESETS and "," not in system:
        raise ChakraError(f"{system} is a system config: give its network too (--network NET.yml)")
    else:
        p = resolve(system)
    if device is None:
        return p
    if kernels is None:
        kernels = p.cluster is not None
    return with_compute(p, device, efficiency, fp32_as=fp32_as or "pytorch", kernels=kernels)
