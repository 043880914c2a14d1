"""How busy each network dimension was in a simulation, from the collectives it ran.

The analytical network does not keep per-link counters (only the aware mode times links), so
the traffic is counted from each collective's phases (``CollectiveRecord.algorithm``,
"op:algorithm@dN" joined by "+"): per member, a phase over p NPUs sends (p - 1) / p of the
data it works on (twice for an all-reduce), a reduce-scatter leaves 1/p of it and the
all-gather over the same dimension restores it. Utilization of a dimension = bytes each NPU
sent on it / (its link bandwidth x the simulated step): the mean share of the step its links
were busy.
"""

from __future__ import annotations

import re

import numpy as np

_PHASE = re.compile(r"(\w+):(\w+)@d(\d+)")


def phase_bytes(record, shape: tuple[int, ...]) -> dict[int, float]:
    """Bytes one member of `record` sends on each dimension (network of `shape`)."""
    size = float(record.bytes)
    reduced: list[int] = []
    out: dict[int, float] = {}
    for op, _alg, d in _PHASE.findall(record.algorithm):
        dim = int(d)
        p = shape[dim] if dim < len(shape) else 1
        if p <= 1:
            continue
        if op == "all_gather" and dim in reduced:
            reduced.remove(dim)
            size *= p
        sent = size * (p - 1) / p * (2 if op == "all_reduce" else 1)
        if op == "reduce_scatter":
            reduced.append(dim)
            size /= p
        out[dim] = out.get(dim, 0.0) + sent
    return out


def dimension_utilization(result, network) -> list[dict]:
    """Per dimension of `network`: its topology, size, bandwidth (GB/s) and latency (ns), the
    bytes each NPU sent on it (mean over NPUs) and its utilization over the simulated step."""
    shape = tuple(d.npus for d in network.dims)
    total = max(network.npus, 1)
    sent = np.zeros(len(shape))
    for rec in result.collectives:
        for dim, b in phase_bytes(rec, shape).items():
            sent[dim] += b * rec.npus / total
    step_s = max(result.recording_ns, 1) / 1e9
    return [
        {
            "dim": i,
            "topology": d.topology,
            "npus": d.npus,
            "bandwidth_GBps": d.bandwidth,
            "latency_ns": d.latency,
            "bytes_per_npu": float(sent[i]),
            "utilization": float(sent[i] / (d.bandwidth * 1e9 * step_s)),
        }
        for i, d in enumerate(network.dims)
    ]
