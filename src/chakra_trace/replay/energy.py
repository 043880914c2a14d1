"""Energy of replayed samples from the machine's own counters, so a benchmark can say joules as
well as seconds.

Two sources, both cumulative counters read before and after each timed sample (`EnergyMeter`,
used by `measure.measure(meter=...)`):

- RAPL through Linux powercap (``/sys/class/powercap/intel-rapl:*``; AMD CPUs expose theirs
  through the same interface on recent kernels): each ``package-N`` zone's ``energy_uj`` plus its
  ``dram`` subzone (``core``/``uncore`` are parts of the package and are not added again; ``psys``
  only when there is no package zone). A counter wraps at ``max_energy_range_uj``: one wrap per
  sample is undone, more cannot be seen (a 200 W package wraps a 262 kJ range every ~20 minutes).
  ``energy_uj`` is readable by root only on many systems (CVE-2020-8694): such a zone is absent,
  with the reason. ``CHAKRA_POWERCAP_ROOT`` (or ``root=``) points at another tree (tests).
- NVML (``pynvml``, imported only when asked and installed): each GPU's total energy since the
  driver loaded (mJ; Volta and newer).

RAPL counts the whole machine's CPU packages, not one process: a replay reads it on one rank
only. An absent counter is reported as absent with why, never as zero. Counters update about
every millisecond (RAPL) or tens of milliseconds (NVML): samples shorter than that read coarse
or zero energy, so compare medians of many samples.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "POWERCAP_ENV",
    "Counter",
    "EnergyMeter",
    "gpu_of",
    "nvml_counters",
    "rank_meter",
    "rapl_counters",
    "rapl_status",
]

POWERCAP_ENV = "CHAKRA_POWERCAP_ROOT"
DEFAULT_ROOT = "/sys/class/powercap"


@dataclass
class Counter:
    """One cumulative energy counter: ``read()`` gives joules so far; past ``wrap_j`` it starts
    again from 0 (None: never wraps)."""

    label: str  # "rapl:package-0", "rapl:package-0/dram", "nvml:0"
    read: Callable[[], float]
    wrap_j: float | None = None


def _root(root: str | os.PathLike | None) -> Path:
    return Path(root if root is not None else os.environ.get(POWERCAP_ENV) or DEFAULT_ROOT)


def _text(path: Path) -> str:
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def _uj_reader(path: Path) -> Callable[[], float]:
    def read() -> float:
        return int(_text(path)) / 1e6

    return read


def _zone(path: Path, label: str) -> tuple[Counter | None, dict]:
    """A zone's counter, or None and why (unreadable, malformed)."""
    info = {"zone": label, "path": str(path)}
    try:
        value = int(_text(path / "energy_uj"))
    except PermissionError:
        return None, {**info, "reason": "energy_uj not readable (permission denied: root-only on this kernel)"}
    except (OSError, ValueError) as e:
        return None, {**info, "reason": f"energy_uj unreadable ({e})"}
    try:
        wrap = int(_text(path / "max_energy_range_uj")) / 1e6
    except (OSError, ValueError):
        wrap = None  # (a wrap would then read as a negative delta: refused in `EnergyMeter.joules`)
    return Counter(f"rapl:{label}", _uj_reader(path / "energy_uj"), wrap), {**info, "energy_uj": value, "wrap_j": wrap}


def _zone_name(path: Path) -> str:
    try:
        return _text(path / "name")
    except OSError:
        return path.name


def rapl_counters(root: str | os.PathLike | None = None) -> tuple[list[Counter], dict]:
    """The RAPL counters to sum (packages and their DRAM) and a status: ``available``, ``root``,
    ``zones`` (each: zone, path, and energy_uj or the reason it is absent), ``reason`` when none."""
    base = _root(root)
    status: dict = {"root": str(base), "zones": [], "available": False}
    if not base.is_dir():
        status["reason"] = f"no {base} (no powercap interface: a VM or a kernel without intel_rapl)"
        return [], status
    tops = sorted(p for p in base.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not tops:
        status["reason"] = f"{base} has no intel-rapl zones"
        return [], status
    named = [(p, _zone_name(p)) for p in tops]
    packages = [(p, n) for p, n in named if n.startswith("package")] or [(p, n) for p, n in named if n == "psys"]
    counters: list[Counter] = []
    for top, name in packages:
        picked = [(top, name)]
        for sub in sorted(top.glob(f"{top.name}:*")):
            sub_name = _zone_name(sub)
            if sub_name == "dram":
                picked.append((sub, f"{name}/dram"))
        for path, label in picked:
            c, info = _zone(path, label)
            status["zones"].append(info)
            if c is not None:
                counters.append(c)
    status["available"] = bool(counters)
    if not counters:
        reasons = "; ".join(f"{z['zone']}: {z['reason']}" for z in status["zones"] if "reason" in z)
        status["reason"] = reasons or f"{base}: no package zone"
    return counters, status


def rapl_status(root: str | os.PathLike | None = None) -> dict:
    """What RAPL this machine exposes (see `rapl_counters`)."""
    return rapl_counters(root)[1]


def nvml_counters(devices: list[int | str] | None = None) -> tuple[list[Counter], dict]:
    """NVML energy counters of ``devices`` (NVML indices or PCI bus ids; None: every GPU), and a
    status (``available``, ``reason`` when none)."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return [], {"available": False, "reason": "pynvml is not installed (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
        ids = list(range(pynvml.nvmlDeviceGetCount())) if devices is None else list(devices)
        counters = []
        for d in ids:
            if isinstance(d, str):
                h = pynvml.nvmlDeviceGetHandleByPciBusId(d)
            else:
                h = pynvml.nvmlDeviceGetHandleByIndex(int(d))
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # (raises on GPUs before Volta)

            def read(h=h) -> float:
                return pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3

            counters.append(Counter(f"nvml:{d}", read))
    except pynvml.NVMLError as e:
        return [], {"available": False, "reason": f"NVML: {e}"}
    if not counters:
        return [], {"available": False, "reason": "NVML sees no GPU"}
    return counters, {"available": True, "devices": [c.label for c in counters]}


@dataclass
class EnergyMeter:
    """Counters read before and after each timed sample. ``reason``: why there are none (or why a
    read failed midway): the measurement then reports energy as absent, never as zero."""

    counters: list[Counter] = field(default_factory=list)
    reason: str | None = None
    status: dict = field(default_factory=dict)

    @classmethod
    def auto(
        cls, *, rapl: bool = True, nvml: list[int | str] | None | bool = False, root: str | os.PathLike | None = None
    ) -> EnergyMeter:
        """RAPL (``rapl``) and NVML (``nvml``: True for every GPU, or a list of devices) counters
        that can be read here."""
        counters: list[Counter] = []
        status: dict = {}
        if rapl:
            c, status["rapl"] = rapl_counters(root)
            counters += c
        if nvml is not False:
            c, status["nvml"] = nvml_counters(None if nvml is True or nvml is None else list(nvml))
            counters += c
        reasons = "; ".join(f"{k}: {v['reason']}" for k, v in status.items() if not v.get("available"))
        if not status:
            reasons = "no energy source asked for"
        return cls(counters, None if counters else reasons, status)

    @property
    def available(self) -> bool:
        return bool(self.counters) and self.reason is None

    @property
    def source(self) -> str | None:
        """The counters summed, e.g. "rapl:package-0+rapl:package-0/dram+nvml:0"."""
        return "+".join(c.label for c in self.counters) if self.available else None

    def read(self) -> np.ndarray | None:
        """Every counter's joules so far; None (and ``reason`` set) when one cannot be read."""
        try:
            return np.array([c.read() for c in self.counters], dtype=np.float64)
        except (OSError, ValueError) as e:
            self.reason = f"a counter became unreadable during the measurement ({e})"
            return None

    def joules(self, before: np.ndarray | None, after: np.ndarray | None) -> float | None:
        """Energy between two readings, summed over counters, a wrapped counter undone."""
        if before is None or after is None:
            return None
        d = after - before
        for i, c in enumerate(self.counters):
            if d[i] < 0:
                if c.wrap_j is None:
                    self.reason = f"{c.label} went backwards and has no max_energy_range_uj to undo a wrap"
                    return None
                d[i] += c.wrap_j
        return float(d.sum())


def rank_meter(rank: int, gpu: int | str | None = None) -> EnergyMeter:
    """The meter of one rank of a replayed job on this machine: RAPL on rank 0 only (it counts
    every CPU package, whichever rank runs there), NVML for the rank's own GPU (``gpu``: its NVML
    index or PCI bus id; None on CPU). The ranks' energies then add up without counting twice."""
    if rank != 0 and gpu is None:
        return EnergyMeter([], "RAPL is read on rank 0 only (it counts the whole machine) and this rank has no GPU")
    return EnergyMeter.auto(rapl=rank == 0, nvml=[gpu] if gpu is not None else False)


def gpu_of(torch_device) -> str | None:
    """The PCI bus id NVML knows a torch CUDA device by (torch and NVML may number GPUs apart)."""
    import torch

    props = torch.cuda.get_device_properties(torch_device)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
