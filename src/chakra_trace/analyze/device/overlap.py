"""How much communication hides behind computation, and what the host saw of it.

HTA's ``get_comm_comp_overlap``: per rank, the time during which both a communication kernel
and a computation kernel run (the union of each, intersected) over the union of the
communication kernels: ``comp_comm_overlap_ratio`` (HTA reports it in % as
``comp_comm_overlap_pctg``; undefined, None here, without communication).

Next to it, communication as the device sees it and as the host's calls saw it:
``device_comm_us`` is the union of communication activity on the device's streams (NCCL
kernels; on a CPU trace, the backend's ops on its worker threads, e.g. ``gloo:all_reduce`` on
``pt_gloo_runloop``; a Chakra trace's communication stream); ``host_call_us`` the union of the
host's collective calls (``c10d::allreduce_``, ``record_param_comms``, ``nccl:all_reduce``, ...)
that no other collective call encloses, on the threads that are not the backend's workers.
With an asynchronous backend these differ: the host call only enqueues the collective (and
returns) while the device or worker thread runs it, often much longer, overlapped with compute.
The c10d call of the main thread, which a CPU timeline lists as communication, is counted as a
host call here, not as device communication.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...intervals import length, union
from ...io.collective_names import is_backend_op_name, is_comm_op_name
from ...table import Tables
from ...timeline.job import COMM, COMPUTE, JobTimeline, RankTimeline
from .stats import by_key
from .temporal import segments

__all__ = ["comm_overlap"]


def _flags(names: list[str], test) -> np.ndarray:
    return np.fromiter((test(n) for n in names), bool, len(names))


def _is_host_comm(name: str) -> bool:
    return is_comm_op_name(name) or name == "record_param_comms"


def _device_comm(t: RankTimeline) -> tuple[np.ndarray, np.ndarray]:
    """Rows of device-side communication, and the worker threads (CPU traces) they ran on."""
    comm = t.kind == COMM
    if t.source != "kineto-cpu":
        return comm, np.zeros(0, np.int64)
    backend = _flags(t.names, is_backend_op_name)[t.name] & comm
    workers = np.unique(t.stream[backend])
    return comm & np.isin(t.stream, workers), workers


def _host_calls(t: RankTimeline, workers: np.ndarray) -> np.ndarray:
    """Rows of `t.host`: outermost collective calls on threads other than the workers."""
    h = t.host
    if not len(h):
        return np.zeros(0, np.int64)
    comm = _flags(t.names, _is_host_comm)[h.name]
    inside = np.zeros(len(h), bool)  # some enclosing op is a collective call too
    cur = h.parent.copy()
    while (cur >= 0).any():
        ok = cur >= 0
        inside[ok] |= comm[cur[ok]]
        cur = np.where(ok, h.parent[np.maximum(cur, 0)], -1)
    return np.flatnonzero(comm & ~inside & ~np.isin(h.thread, workers))


def _rank(t: RankTimeline) -> tuple[dict, list[dict]]:
    dev, workers = _device_comm(t)
    take = dev | (t.kind == COMPUTE)
    seg, mask = segments(t.start[take], t.end[take], t.kind[take])
    comm = int(seg[(mask & (1 << COMM)) > 0].sum())
    both = int(seg[((mask & (1 << COMM)) > 0) & ((mask & (1 << COMPUTE)) > 0)].sum())
    compute = int(seg[(mask & (1 << COMPUTE)) > 0].sum())
    ratio = both / comm if comm else None
    calls = _host_calls(t, workers)
    h = t.host
    hs, he = h.start[calls], h.start[calls] + h.dur[calls]
    row = {
        "rank": t.rank,
        "comp_comm_overlap_ratio": ratio,
        "comp_comm_overlap_pctg": 100.0 * ratio if ratio is not None else None,
        "compute_us": compute / 1e3,
        "device_comm_us": comm / 1e3,
        "device_comm_sum_us": int(t.dur[dev].sum()) / 1e3,
        "device_comm_activities": int(dev.sum()),
        "overlapped_us": both / 1e3,
        "exposed_comm_us": (comm - both) / 1e3,
        "host_calls": int(calls.size),
        "host_call_us": length(union(hs, he)) / 1e3,
        "host_call_sum_us": int(h.dur[calls].sum()) / 1e3,
    }
    groups, st = by_key(h.name[calls], h.dur[calls])
    names = np.asarray(t.names, dtype=object)
    by_name: list[dict[str, Any]] = [
        {
            "rank": t.rank,
            "name": str(names[g]),
            "count": int(c),
            "sum_us": int(s) / 1e3,
            "mean_us": float(m) / 1e3,
            "max_us": int(x) / 1e3,
        }
        for g, c, s, m, x in zip(groups.tolist(), st["count"], st["sum"], st["mean"], st["max"])
    ]
    by_name.sort(key=lambda r: -r["sum_us"])
    return row, by_name


def comm_overlap(job: JobTimeline) -> Tables:
    """Per rank (``ranks``): HTA's computation/communication overlap, communication time on
    the device next to the host's collective calls; ``host_calls``: those calls by name.
    Times in µs (see the module doc)."""
    ranks, calls = [], []
    for t in job:
        row, by_name = _rank(t)
        ranks.append(row)
        calls += by_name
    return Tables({"ranks": ranks, "host_calls": calls}, {"source": job.source, "ranks": len(job)})
