"""How long each kernel took to launch, and how long it waited to run: HTA's
``get_cuda_kernel_launch_stats`` on the columns of `timeline`.

Every GPU activity launched by a known runtime call (``correlation`` matched) gives:

- CPU duration: the runtime call's duration (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ...);
- GPU duration: the kernel's (or copy's) own duration;
- launch delay: from the end of the runtime call to the start of the kernel, clipped at 0
  (HTA's definition: ``kernel ts - runtime ts - runtime dur``).

Three kinds of outliers, as HTA defines them: short kernels (the launch took at most the runtime
cutoff and the kernel ran shorter than its launch took), runtime calls over the runtime cutoff,
and launch delays over the delay cutoff. HTA's cutoffs are in microseconds (50 and 100); here
every time is in nanoseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...table import Tables
from ...timeline.job import KINDS, MEMORY, JobTimeline, RankTimeline
from .stats import group_stats, rows

#: HTA's defaults: ``runtime_cutoff=50`` us, ``launch_delay_cutoff=100`` us.
RUNTIME_CUTOFF_NS = 50_000
LAUNCH_DELAY_CUTOFF_NS = 100_000

NO_LAUNCHES = "no launch records: the timeline holds no runtime calls matched to device activity"


def as_job(job: JobTimeline | RankTimeline) -> JobTimeline:
    """A `JobTimeline` of one rank's timeline, or the job itself."""
    return JobTimeline({job.rank: job}) if isinstance(job, RankTimeline) else job


def launch_stats(
    job: JobTimeline | RankTimeline,
    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS,
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS,
    include_memory: bool = True,
    include_graphs: bool = False,
    per_kernel: bool = True,
) -> Tables:
    """Launch statistics of every rank: tables ``launches`` (one row per launched activity, when
    `per_kernel`), ``ranks`` (counts, median/p95 of each duration) and ``kernels`` (per rank and
    kernel name). `include_memory` False leaves out memcpy/memset (HTA's
    ``include_memory_events``). A runtime call that launched several activities (a CUDA graph
    launch) is left out unless `include_graphs`, as HTA leaves out ``cudaGraphLaunch``."""
    job = as_job(job)
    summary: dict[str, Any] = {
        "runtime_cutoff_ns": int(runtime_cutoff_ns),
        "launch_delay_cutoff_ns": int(launch_delay_cutoff_ns),
    }
    per, ranks, kernels = [], [], []
    n_all = n_short = n_rt = n_delay = 0
    for t in job:
        m = (t.launch_start >= 0) & (t.launch_dur >= 0)
        if not include_memory:
            m &= t.kind != MEMORY
        if not include_graphs:
            m &= ~multi_launched(t.correlation)
        idx = np.flatnonzero(m)
        if not idx.size:
            continue
        cpu, gpu = t.launch_dur[idx], t.dur[idx]
        delay = np.maximum(t.start[idx] - t.launch_start[idx] - cpu, 0)
        short = (cpu <= runtime_cutoff_ns) & (gpu < cpu)
        rt_out = cpu > runtime_cutoff_ns
        delay_out = delay > launch_delay_cutoff_ns
        n_all += idx.size
        n_short, n_rt, n_delay = n_short + short.sum(), n_rt + rt_out.sum(), n_delay + delay_out.sum()
        if per_kernel:
            per += rows({
                "rank": np.full(idx.size, t.rank), "stream": t.stream[idx], "correlation": t.correlation[idx],
                "name": t.name_of(t.name[idx]), "kind": np.asarray(KINDS, object)[t.kind[idx]],
                "launch_start_ns": t.launch_start[idx], "cpu_duration_ns": cpu, "gpu_duration_ns": gpu,
                "launch_delay_ns": delay, "short_kernel": short, "runtime_outlier": rt_out, "delay_outlier": delay_out,
            })  # fmt: skip
        z = np.zeros(idx.size, np.int64)
        row = {"rank": t.rank, "kernels": int(idx.size), "short_kernels": int(short.sum()),
               "runtime_outliers": int(rt_out.sum()), "launch_delay_outliers": int(delay_out.sum())}  # fmt: skip
        for label, v in (("cpu_duration", cpu), ("gpu_duration", gpu), ("launch_delay", delay)):
            s = group_stats(v, z, 1)
            row.update({f"{label}_{k}_ns": float(s[k][0]) for k in ("mean", "p50", "p95", "max")})
            row[f"{label}_total_ns"] = int(v.sum())
        ranks.append(row)
        kernels += _per_name(t, idx, cpu, gpu, delay, short, rt_out, delay_out)
    if not n_all:
        summary["note"] = NO_LAUNCHES
        return Tables({"launches": [], "ranks": [], "kernels": []}, summary)
    summary.update(
        kernels=int(n_all), short_kernels=int(n_short), runtime_outliers=int(n_rt), launch_delay_outliers=int(n_delay)
    )
    tables = (
        {"launches": per, "ranks": ranks, "kernels": kernels} if per_kernel else {"ranks": ranks, "kernels": kernels}
    )
    return Tables(tables, summary)


def multi_launched(corr: np.ndarray) -> np.ndarray:
    """Where a correlation id (>= 0) is shared by several activities: one runtime call (a CUDA
    graph launch) that launched many."""
    u, inv, n = np.unique(corr, return_inverse=True, return_counts=True)
    return (n[inv.reshape(-1)] > 1) & (corr >= 0)


def _per_name(t: RankTimeline, idx, cpu, gpu, delay, short, rt_out, delay_out) -> list[dict]:
    codes, g = np.unique(t.name[idx], return_inverse=True)
    g = g.reshape(-1)
    n = codes.size
    sc, sg, sd = group_stats(cpu, g, n), group_stats(gpu, g, n), group_stats(delay, g, n)
    kind = np.zeros(n, np.int64)
    kind[g] = t.kind[idx]
    order = np.lexsort((codes, -sg["sum"]))

    def cnt(mask):
        return np.bincount(g, weights=mask, minlength=n).astype(np.int64)[order]

    return rows({
        "rank": np.full(n, t.rank), "name": t.name_of(codes[order]), "kind": np.asarray(KINDS, object)[kind[order]],
        "count": sc["count"][order], "gpu_total_ns": sg["sum"][order].astype(np.int64), "gpu_mean_ns": sg["mean"][order],
        "cpu_total_ns": sc["sum"][order].astype(np.int64), "cpu_mean_ns": sc["mean"][order],
        "cpu_p50_ns": sc["p50"][order], "cpu_max_ns": sc["max"][order], "launch_delay_mean_ns": sd["mean"][order],
        "launch_delay_p50_ns": sd["p50"][order], "launch_delay_p95_ns": sd["p95"][order],
        "launch_delay_max_ns": sd["max"][order], "short_kernels": cnt(short), "runtime_outliers": cnt(rt_out),
        "launch_delay_outliers": cnt(delay_out),
    })  # fmt: skip
