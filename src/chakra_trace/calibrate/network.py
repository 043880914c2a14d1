"""The fitted collectives as a network the simulator takes: one Switch of the job's ranks whose
link latency and bandwidth make the simulator's ring collectives reproduce the measured times
as closely as one network can (least squares on relative error over every measured collective
and size at that rank count).

The simulator's time for a collective of S bytes is affine in the link latency L and in 1 / B
(`probe` reads its coefficients off the simulator itself, so the mapping follows whatever the
simulator does: reduction time, endpoint delay, per-step costs). A single (L, B) cannot match
every collective when the backend runs each with its own algorithm (gloo's broadcast sends from
the root to every peer, its all-gather rings): the misfit per collective is kept (`residuals`)
and the cost table (`table` comm mode of `predict`) is the alternative."""

from __future__ import annotations

import numpy as np

from ..simulate import simulate
from ..simulate.config import Network, SystemConfig
from ..synthesize.patterns import collective
from .fit import AlphaBeta

#: Chakra's collective names for the measured torch.distributed calls.
CHAKRA_NAME = {
    "all_reduce": "ALL_REDUCE",
    "all_gather": "ALL_GATHER",
    "reduce_scatter": "REDUCE_SCATTER",
    "broadcast": "BROADCAST",
    "all_to_all": "ALL_TO_ALL",
}

_HUGE_GBPS = 1e12  # a link this fast moves a message in no time


def system_config() -> dict:
    """The system layer a profile's network runs with: ring everywhere, one chunk per
    collective, no endpoint delay (the fitted latency holds it)."""
    return {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 0,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1,
        "collective-optimization": "baseline",
        "local-mem-bw": 1600,
        **{f"{c}-implementation": ["ring"] for c in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")},
    }


def simulated_ns(kind: str, ranks: int, nbytes: int, latency_ns: float, bandwidth_gbps: float) -> int:
    """The simulator's time for one collective on a Switch of `ranks` with these links."""
    net = Network.simple("Switch", ranks, bandwidth_gbps, latency_ns)
    res = simulate(collective(ranks, CHAKRA_NAME[kind], int(nbytes)), net, SystemConfig.from_dict(system_config()))
    return int(res.recording_ns)


def probe(kind: str, ranks: int, nbytes: int) -> tuple[float, float, float]:
    """(t0, a, b): the simulator's time is t0 + a * L + b / B (L in ns, B in GB/s)."""
    t0 = simulated_ns(kind, ranks, nbytes, 0.0, _HUGE_GBPS)
    a = (simulated_ns(kind, ranks, nbytes, 1e6, _HUGE_GBPS) - t0) / 1e6
    b = float(simulated_ns(kind, ranks, nbytes, 0.0, 1.0) - t0)
    return float(t0), a, b


def fit_network(fits: list[AlphaBeta], ranks: int) -> dict:
    """The Switch link (latency ns, bandwidth GB/s) that best reproduces the measured medians of
    every collective at `ranks`, with each collective's relative residuals on it."""
    rows, rhs, weights, keys = [], [], [], []
    for f in fits:
        if f.ranks != ranks:
            continue
        for s, t in zip(f.sizes, f.measured_ns):
            t0, a, b = probe(f.collective, ranks, s)
            rows.append([a, b])
            rhs.append(t - t0)
            weights.append(1.0 / t)
            keys.append((f.collective, s, t))
    if not rows:
        raise ValueError(f"no fits at {ranks} ranks")
    A = np.asarray(rows) * np.asarray(weights)[:, None]
    (lat, inv_bw), *_ = np.linalg.lstsq(A, np.asarray(rhs) * np.asarray(weights), rcond=None)
    lat, inv_bw = max(float(lat), 0.0), max(float(inv_bw), 1e-12)
    bw = 1.0 / inv_bw
    residuals: dict[str, list[float]] = {}
    for (kind, _s, t), (a, b), r in zip(keys, rows, rhs):
        residuals.setdefault(kind, []).append((a * lat + b * inv_bw + (t - r)) / t - 1)
    return {
        "ranks": ranks,
        "network": Network.simple("Switch", ranks, bw, lat).to_dict(),
        "system": system_config(),
        "latency_ns": lat,
        "bandwidth_gbps": bw,
        "residuals": residuals,
    }
