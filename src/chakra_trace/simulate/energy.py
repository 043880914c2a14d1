"""Energy of a simulated step, so that a design choice can be weighed in joules as well as seconds.

The model, per NPU over the step T (the simulated step: every NPU is held until the last one
finishes), with the device's idle and active power (`schema.devices`: datasheet TDP, idle a
documented share of it) and a per-bit energy per network level:

    idle     = P_idle x T
    compute  = (P_active - P_idle) x compute busy time (``SimResult.compute_ns``)
    comm     = sum over dimensions d of bits sent on d x e_d (pJ/bit) + P_static,d x T
    total    = idle + compute + comm

An NPU that only communicates draws idle power; what its links spend is the comm term. Bits
sent per dimension are counted as the utilization report does (`utilization.phase_bytes`: each
collective's phases), point-to-point sends on every dimension where source and destination
differ. A collective record does not name its members, so its traffic is shared among NPUs in
proportion to their communication time (the totals are exact; the per-NPU split is an estimate).

Per-bit energy by level (`LINK_PJ_PER_BIT`; dimension 0 is the scale-up level, the others
scale-out; override with ``pj_per_bit``). These are order-of-magnitude defaults, not a vendor's
measurement of a given machine:

- scale-up (NVLink / ICI class: electrical SerDes through a switch or chip to chip): 5 pJ/bit.
  NVIDIA gives 1.3 pJ/bit for its on-package NVLink-C2C (Grace Hopper announcement, GTC 2022)
  and calls it 25x PCIe Gen 5's; board-level links sit between the two: a few times the C2C figure.
- scale-out (NIC + optics + switch, InfiniBand / Ethernet class): 40 pJ/bit. An 800G OSFP
  optical module draws about 15 W (vendors' datasheets), ~19 pJ/bit at 800 Gb/s; a hop has one
  at each end, plus the NIC and switch ASICs: about 40 pJ/bit.

Link static power (NICs, switch ports kept lit) is ``static_w`` per NPU per dimension, 0 unless given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..schema.devices import IDLE_FRACTION, DeviceSpec, device_spec
from ..schema.enums import Attr, NodeType
from ..schema.resources import compute_mask
from ..table import Column, Table, Tabular
from .result import SimResult
from .utilization import phase_bytes

__all__ = ["LINK_PJ_PER_BIT", "EnergyReport", "energy", "link_levels"]

#: pJ per bit moved, by network level (see the module docstring for the sources).
LINK_PJ_PER_BIT = {"scale-up": 5.0, "scale-out": 40.0}
CATEGORIES = ("compute", "communication", "idle")
_PJ = 1e-12


def link_levels(dims: int) -> list[str]:
    """The level of each network dimension: the first scale-up, the others scale-out."""
    return ["scale-up" if d == 0 else "scale-out" for d in range(max(dims, 1))]


@dataclass
class EnergyReport(Tabular):
    """Joules of one simulated recording (``recording_s`` long, ``steps`` training steps where the
    job says), per NPU and by category (``compute``: above-idle power while computing;
    ``communication``: bits moved x pJ/bit + link static power; ``idle``: idle power over the
    recording), with the figures that made them. ``flops``: the recording's FLOPs where the traces
    carry them (None otherwise)."""

    device: str
    active_w: float
    idle_w: float
    recording_s: float
    compute_j: np.ndarray  # per NPU
    comm_j: np.ndarray
    idle_j: np.ndarray
    levels: list[str] = field(default_factory=list)  # per network dimension
    pj_per_bit: list[float] = field(default_factory=list)
    static_w: list[float] = field(default_factory=list)
    bytes_per_dim: list[float] = field(default_factory=list)  # summed over NPUs
    flops: float | None = None
    steps: int | None = None  # training steps in the recording (None: unknown)

    @property
    def step_s(self) -> float:
        """Deprecated alias of `recording_s` (the whole recording)."""
        return self.recording_s

    @property
    def j_per_step(self) -> float | None:
        """Joules of one training step (the recording's over its steps), None when unknown."""
        return self.total_j / self.steps if self.steps else None

    @property
    def npus(self) -> int:
        return int(self.compute_j.size)

    @property
    def per_npu_j(self) -> np.ndarray:
        return self.compute_j + self.comm_j + self.idle_j

    @property
    def by_category(self) -> dict[str, float]:
        return {
            "compute": float(self.compute_j.sum()),
            "communication": float(self.comm_j.sum()),
            "idle": float(self.idle_j.sum()),
        }

    @property
    def total_j(self) -> float:
        return float(sum(self.by_category.values()))

    @property
    def avg_power_w(self) -> float | None:
        """Mean power of the whole system over the recording (W); None for an empty one."""
        return self.total_j / self.recording_s if self.recording_s > 0 else None

    @property
    def steps_per_j(self) -> float | None:
        """Performance per watt: (steps / s) / W = steps per joule (a recording of unknown steps
        counts as one)."""
        return (self.steps or 1) / self.total_j if self.total_j > 0 else None

    @property
    def flop_per_j(self) -> float | None:
        return self.flops / self.total_j if self.flops is not None and self.total_j > 0 else None

    def to_dict(self) -> dict[str, Any]:
        per = self.per_npu_j
        return {
            "device": self.device,
            "active_w": self.active_w,
            "idle_w": self.idle_w,
            "npus": self.npus,
            "recording_s": self.recording_s,
            "steps": self.steps,
            "total_j": self.total_j,
            "j_per_step": self.j_per_step,
            "per_npu_j_mean": float(per.mean()) if per.size else 0.0,
            "per_npu_j_max": float(per.max()) if per.size else 0.0,
            "by_category_j": self.by_category,
            "avg_power_w": self.avg_power_w,
            "steps_per_j": self.steps_per_j,
            "flops": self.flops,
            "flop_per_j": self.flop_per_j,
            "links": [
                {"dim": d, "level": lv, "pj_per_bit": e, "static_w": s, "bytes": b}
                for d, (lv, e, s, b) in enumerate(zip(self.levels, self.pj_per_bit, self.static_w, self.bytes_per_dim))
            ],
        }

    def to_table(self) -> Table:
        """One row per NPU (the index): joules by category and in total."""
        joules = Column(unit="J", format=",.4g")
        cols = {"compute_j": self.compute_j, "comm_j": self.comm_j, "idle_j": self.idle_j, "total_j": self.per_npu_j}
        return Table(
            {"npu": np.arange(self.npus), **cols}, title="energy per NPU", index="npu", spec=dict.fromkeys(cols, joules)
        )

    def _per_step(self) -> str:
        per = self.j_per_step
        return f" ({self.steps} steps: {per:,.4g} J per step)" if per is not None else " (steps unknown)"

    def summary(self) -> str:
        c = self.by_category
        t = self.total_j or 1.0
        power = f"{self.avg_power_w:,.0f} W" if self.avg_power_w is not None else "-"
        line = (
            f"energy {self.total_j:,.4g} J per recording{self._per_step()} "
            f"({self.total_j / max(self.npus, 1):,.4g} J per NPU), "
            f"average {power} on {self.npus} x {self.device}: compute {c['compute'] / t:.0%}, "
            f"communication {c['communication'] / t:.0%}, idle {c['idle'] / t:.0%}"
        )
        if self.flop_per_j is not None:
            line += f"; {self.flop_per_j / 1e9:,.4g} GFLOP/J"
        return line


def _per_dim(name: str, v: float | list[float] | None, default: list[float]) -> list[float]:
    if v is None:
        return default
    out = [float(x) for x in v] if isinstance(v, (list, tuple)) else [float(v)] * len(default)
    if len(out) != len(default) or not all(math.isfinite(x) and x >= 0 for x in out):
        raise ChakraError(f"{name}: expected {len(default)} non-negative numbers (one per dimension), got {v!r}")
    return out


def _coords(npus: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    stride = np.concatenate(([1], np.cumprod(shape)[:-1])).astype(np.int64)
    return (npus[..., None] // stride) % np.asarray(shape, np.int64)


def traffic(result: SimResult, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes sent per dimension: (collectives, summed over members: shape (dims,)),
    (point-to-point sends per NPU: shape (npus, dims))."""
    npus = int(result.finish_ns.size)
    coll = np.zeros(len(shape))
    for rec in result.collectives:
        by_dim = phase_bytes(rec, shape)
        if not by_dim and rec.npus > 1:  # recorded times: no phases; a ring's volume on the top level
            p = rec.npus
            by_dim = {len(shape) - 1: rec.bytes * (p - 1) / p * (2 if rec.type.upper() == "ALL_REDUCE" else 1)}
        for d, b in by_dim.items():
            coll[d] += b * rec.npus
    p2p = np.zeros((npus, len(shape)))
    for npu, tr in result.traces.items():
        if npu >= npus or npu not in result.nodes:
            continue
        ran = result.nodes[npu][0] >= 0
        send = ran & (tr.types == NodeType.COMM_SEND_NODE) & tr.has(Attr.COMM_DST)
        if not send.any():
            continue
        dst = tr.comm_dst[send].astype(np.int64) % max(npus, 1)
        crossed = _coords(dst, shape) != _coords(np.array([npu]), shape)  # (sends, dims)
        p2p[npu] += (crossed * tr.comm_size[send].astype(float)[:, None]).sum(axis=0)
    return coll, p2p


def _flops(result: SimResult, npus: int) -> float | None:
    total, seen = 0.0, False
    for npu in range(npus):
        tr = result.traces.get(npu)
        if tr is None:
            return None
        m = compute_mask(tr) & tr.has(Attr.NUM_OPS)
        if m.any():
            seen = True
            total += float(tr.num_ops[m].sum())
    return total if seen else None


def energy(
    result: SimResult,
    device: str | DeviceSpec = "h100",
    network=None,
    *,
    active_w: float | None = None,
    idle_w: float | None = None,
    pj_per_bit: float | list[float] | None = None,
    static_w: float | list[float] | None = None,
) -> EnergyReport:
    """The energy of ``result``'s step on ``device`` (a preset name or a DeviceSpec) over
    ``network`` (a `simulate.config.Network`; None: one scale-up level of all NPUs). ``active_w`` /
    ``idle_w`` override the device's power (W); ``pj_per_bit`` and ``static_w`` (W per NPU) set the
    links' figures, one value or one per dimension. See the module docstring for the model."""
    dev = device_spec(device)
    active = dev.tdp_w if active_w is None else float(active_w)
    idle = float(idle_w) if idle_w is not None else dev.idle_power_w
    if idle is None and active is not None:  # a device without a published figure, given one
        idle = IDLE_FRACTION * active
    if active is None or idle is None:
        raise ChakraError(f"device {dev.name!r} has no published power: give active_w (and idle_w) in W")
    if not (math.isfinite(active) and math.isfinite(idle) and 0 <= idle <= active):
        raise ChakraError(f"device power must satisfy 0 <= idle ({idle} W) <= active ({active} W)")
    npus = int(result.finish_ns.size)
    shape = tuple(int(d.npus) for d in network.dims) if network is not None else (max(npus, 1),)
    levels = link_levels(len(shape))
    pj = _per_dim("pj_per_bit", pj_per_bit, [LINK_PJ_PER_BIT[lv] for lv in levels])
    static = _per_dim("static_w", static_w, [0.0] * len(shape))
    step_s = result.recording_ns / 1e9  # (the whole recording)
    coll, p2p = traffic(result, shape)
    e_bit = np.asarray(pj) * 8 * _PJ  # J per byte, per dimension
    comm_ns = np.asarray(result.comm_ns, float)
    share = comm_ns / comm_ns.sum() if comm_ns.sum() > 0 else np.full(npus, 1.0 / max(npus, 1))
    comm_j = share * float(coll @ e_bit) + p2p @ e_bit + sum(static) * step_s
    return EnergyReport(
        device=dev.name,
        active_w=float(active),
        idle_w=float(idle),
        recording_s=step_s,
        steps=result.steps,
        compute_j=(active - idle) * np.asarray(result.compute_ns, float) / 1e9,
        comm_j=np.asarray(comm_j, float).reshape(npus),
        idle_j=np.full(npus, idle * step_s),
        levels=levels,
        pj_per_bit=pj,
        static_w=static,
        bytes_per_dim=(coll + p2p.sum(axis=0)).tolist(),
        flops=_flops(result, npus),
    )
