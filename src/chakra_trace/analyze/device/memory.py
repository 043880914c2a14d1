"""Device memory over time, and HTA's trace counters.

`memory_timeline` reads the ``[memory]`` events the PyTorch profiler writes with
``profile_memory=True`` (one per allocation or free: bytes, then the allocator's total allocated
and reserved bytes on that device). A trace recorded without them gives empty tables and a
summary that says so: never a series of zeros.

`counters` computes HTA's two counters (``trace_counters``) as step functions, one point per
change:

- queue length per stream: the launches not yet started, +1 when the runtime call that launches
  an activity begins and -1 when the activity starts on the device (HTA's definition); summary
  statistics over the points, as HTA's ``get_queue_length_summary`` (``describe``), plus the
  time-weighted mean and the time spent at or above ``max_queue_length`` (HTA's
  ``get_time_spent_blocked_on_full_queue``);
- memory bandwidth per copy kind (``Memcpy HtoD``, ``Memcpy DtoH``, ``Memcpy DtoD``, ``Memset``):
  each copy adds bytes / duration (GB/s) while it runs; summary over the non-zero points, as
  HTA's ``get_memory_bw_summary``, plus the bytes moved and the busy time.

With ``bin_ns`` the series tables hold the time-weighted mean of each bin (bins aligned to
multiples of ``bin_ns``) instead of every change; the summaries still use the change points.
At equal times, decrements come first (a copy ends, or a kernel starts, before the next begins).
"""

from __future__ import annotations

import numpy as np

from ...table import Tables
from ...timeline.job import MEMORY, JobTimeline, RankTimeline
from .launches import NO_LAUNCHES, as_job, multi_launched
from .stats import group_stats, rows

#: HTA's ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``.
MAX_QUEUE_LENGTH = 1024
NO_MEMORY = "no [memory] events: the trace was recorded without profile_memory=True"
_DESCRIBE = ("count", "mean", "std", "min", "p25", "p50", "p75", "max")
_DEVICE_TYPES = {0: "cpu", 1: "cuda"}


def _device_label(dtype: int, dev: int) -> str:
    name = _DEVICE_TYPES.get(dtype, f"device_type{dtype}")
    return name if dev < 0 else f"{name}:{dev}"


def memory_timeline(job: JobTimeline | RankTimeline) -> Tables:
    """Allocated and reserved bytes per rank and device: tables ``devices`` (peaks, allocation
    and free counts and bytes) and ``series`` (every ``[memory]`` event, in time order)."""
    job = as_job(job)
    devices: list[dict] = []
    series: list[dict] = []
    for t in job:
        m = t.memory
        if not m or not m["ts"].size:
            continue
        order = np.lexsort((m["ts"], m["device"], m["device_type"]))
        c = {k: v[order] for k, v in m.items()}
        pair = np.stack([c["device_type"], c["device"]], axis=1)
        keys, g = np.unique(pair, axis=0, return_inverse=True)
        g = g.reshape(-1)
        n = len(keys)
        label = [_device_label(int(a), int(b)) for a, b in keys]
        series += rows({
            "rank": np.full(g.size, t.rank), "device": np.asarray(label, object)[g], "ts_ns": c["ts"],
            "bytes": c["bytes"], "allocated": c["allocated"], "reserved": c["reserved"],
        })  # fmt: skip
        alloc, free = c["bytes"] > 0, c["bytes"] < 0
        first = np.concatenate(([0], np.cumsum(np.bincount(g, minlength=n))[:-1]))
        last = np.concatenate((first[1:], [g.size])) - 1
        # the peak's row: the first maximum of each device's run (rows are sorted by device)
        pk = np.lexsort((np.arange(g.size), -c["allocated"], g))[first]
        devices += rows({
            "rank": np.full(n, t.rank), "device": label, "events": np.bincount(g, minlength=n),
            "allocations": np.bincount(g, weights=alloc, minlength=n).astype(np.int64),
            "allocated_bytes": _sums(np.where(alloc, c["bytes"], 0), first),
            "frees": np.bincount(g, weights=free, minlength=n).astype(np.int64),
            "freed_bytes": -_sums(np.where(free, c["bytes"], 0), first),
            "peak_allocated": c["allocated"][pk], "peak_allocated_ts_ns": c["ts"][pk],
            "peak_reserved": np.maximum.reduceat(c["reserved"], first), "first_allocated": c["allocated"][first],
            "last_allocated": c["allocated"][last], "first_ts_ns": c["ts"][first], "last_ts_ns": c["ts"][last],
        })  # fmt: skip
    summary = {"memory_events": len(series)} if series else {"memory_events": 0, "note": NO_MEMORY}
    return Tables({"devices": devices, "series": series}, summary)


def _sums(v: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Exact sums of int64 `v` over the runs starting at `first` (float weights lose bytes past
    2**53, and a sum past 2**63 does not fit: then Python integers)."""
    if v.size and max(int(v.max()), -int(v.min())) > (1 << 62) // v.size:
        return np.asarray([sum(part.tolist()) for part in np.split(v, first[1:])], dtype=object)
    return np.add.reduceat(v, first) if v.size else np.zeros(first.size, np.int64)


def _steps(group, ts, delta):
    """Change points of step functions (one per group): sorted by (group, ts, delta), value after
    each change, for deltas that sum to zero per group."""
    o = np.lexsort((delta, ts, group))
    g, d = group[o], delta[o]
    c = np.cumsum(d)
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    base = np.repeat(c[first] - d[first], np.diff(np.r_[first, g.size]))  # restart each group at 0
    return g, ts[o], c - base


def _bins(g, ts, v, bin_ns: int):
    """Time-weighted mean of each group's step function over bins aligned to multiples of
    `bin_ns`, from the bin of its first point to the bin of its last. One pass per group."""
    out_g, out_t, out_v = [], [], []
    bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        t, val = ts[a:b], v[a:b].astype(np.float64)
        cum = np.r_[0.0, np.cumsum(val[:-1] * np.diff(t))]  # integral up to each point
        edges = np.arange(t[0] // bin_ns, t[-1] // bin_ns + 2, dtype=np.int64) * bin_ns
        i = np.searchsorted(t, edges, "right") - 1
        j = np.maximum(i, 0)
        area = np.where(i < 0, 0.0, cum[j] + val[j] * (edges - t[j]))
        out_g.append(np.full(edges.size - 1, g[a]))
        out_t.append(edges[:-1])
        out_v.append(np.diff(area) / bin_ns)
    return np.concatenate(out_g), np.concatenate(out_t), np.concatenate(out_v)


def _copy_kind(name: str) -> str:
    """HTA's copy kinds: ``Memset``, ``Memcpy XtoY`` (the name's first 11 characters), else
    ``Memcpy Unknown``."""
    if name.startswith("Memset"):
        return "Memset"
    return name[:11] if name.startswith("Memcpy") else "Memcpy Unknown"


def counters(
    job: JobTimeline | RankTimeline, bin_ns: int | None = None, max_queue_length: int = MAX_QUEUE_LENGTH
) -> Tables:
    """Queue length per stream and memory bandwidth per copy kind (see the module doc): tables
    ``queue_length``, ``queue_summary``, ``memory_bw`` and ``memory_bw_summary``."""
    job = as_job(job)
    out: dict[str, list[dict]] = {"queue_length": [], "queue_summary": [], "memory_bw": [], "memory_bw_summary": []}
    for t in job:
        _queue(t, bin_ns, max_queue_length, out)
        _bandwidth(t, bin_ns, out)
    summary: dict = {"bin_ns": bin_ns, "max_queue_length": max_queue_length}
    if not out["queue_summary"]:
        summary["queue_note"] = NO_LAUNCHES
    if not out["memory_bw_summary"]:
        summary["memory_bw_note"] = "no memory copies or sets with a known size"
    return Tables(out, summary)


def _describe(values, g, n) -> dict:
    s = group_stats(values, g, n, (0.25, 0.5, 0.75))
    return {k: s[k] for k in _DESCRIBE}


def _queue(t: RankTimeline, bin_ns, max_q: int, out: dict) -> None:
    x = np.flatnonzero((t.launch_start >= 0) & ~multi_launched(t.correlation))
    if not x.size:
        return
    one = np.ones(x.size, np.int64)
    g, ts, q = _steps(np.r_[t.stream[x], t.stream[x]], np.r_[t.launch_start[x], t.start[x]], np.r_[one, -one])
    streams, gi = np.unique(g, return_inverse=True)
    gi = gi.reshape(-1)
    n = streams.size
    same = np.r_[gi[1:] == gi[:-1], False]
    held = np.where(same, np.r_[ts[1:], ts[-1]] - ts, 0)  # how long each value holds
    span = np.bincount(gi, weights=held, minlength=n)
    full = np.bincount(gi, weights=np.where(q >= max_q, held, 0), minlength=n)
    window = max(t.window[1] - t.window[0], 1)
    out["queue_summary"] += rows({
        "rank": np.full(n, t.rank), "stream": streams, **_describe(q, gi, n),
        "time_weighted_mean": np.bincount(gi, weights=q * held, minlength=n) / np.maximum(span, 1),
        "duration_at_max_ns": full.astype(np.int64), "relative_duration_at_max": full / window,
    })  # fmt: skip
    if bin_ns:
        gi, ts, q = _bins(gi, ts, q, int(bin_ns))
    out["queue_length"] += rows(
        {"rank": np.full(ts.size, t.rank), "stream": streams[gi], "ts_ns": ts, "queue_length": q}
    )


def _bandwidth(t: RankTimeline, bin_ns, out: dict) -> None:
    x = np.flatnonzero((t.kind == MEMORY) & (t.bytes >= 0))
    if not x.size:
        return
    kinds, ki = np.unique([_copy_kind(s) for s in t.names], return_inverse=True)
    k = ki.reshape(-1)[t.name[x]]
    dur = np.where(t.dur[x] > 0, t.dur[x], 1000)  # as HTA, a copy of 0 us lasts 1 us
    bw = t.bytes[x] / dur  # bytes per ns = GB/s
    g, ts, v = _steps(np.r_[k, k], np.r_[t.start[x], t.start[x] + dur], np.r_[bw, -bw])
    v[np.abs(v) < 1e-9] = 0.0  # rounding left by +bw, -bw
    used, gi = np.unique(g, return_inverse=True)
    gi = gi.reshape(-1)
    n = used.size
    pos = v > 0
    kb = np.unique(k, return_inverse=True)[1].reshape(-1)
    out["memory_bw_summary"] += rows({
        "rank": np.full(n, t.rank), "name": kinds[used], **_describe(v[pos], gi[pos], n),
        "bytes": np.bincount(kb, weights=t.bytes[x], minlength=n).astype(np.int64),
        "busy_ns": np.bincount(kb, weights=dur, minlength=n).astype(np.int64),
        "copies": np.bincount(kb, minlength=n),
    })  # fmt: skip
    if bin_ns:
        gi, ts, v = _bins(gi, ts, v, int(bin_ns))
    out["memory_bw"] += rows(
        {"rank": np.full(ts.size, t.rank), "name": kinds[used][gi], "ts_ns": ts, "memory_bw_gbps": v}
    )
