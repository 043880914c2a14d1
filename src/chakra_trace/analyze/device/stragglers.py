"""Stragglers: the ranks that arrive last at collectives, and what their lateness cost the others.

A collective cannot finish before its last member arrives, so every other member waits for it.
Each collective instance is matched across the ranks, and per instance: when each rank arrived
(the op's start), which rank came last, how late it was against the median arrival, and how
long every rank waited for the last one. Per rank: how often it was last, and the lateness it
caused, the time the others waited on it alone (its arrival minus the second-latest arrival,
summed over the instances where it was last alone: a tie for last counts for nobody), as time
and as a fraction of its window (the profiler steps, or the span of its activity). A rank is a straggler when the lateness it
caused reaches ``threshold`` of its window and ``dominance`` times the mean caused by each
other rank: ranks that take turns being last (jitter) are not stragglers, one that is late
again and again is.

Matching rule: the collectives of each rank are put on channels, and the k-th op of a channel
on every rank that has the channel is instance k of it, in order of start time.

- GPU Kineto traces: a channel is an NCCL/RCCL kernel name on a CUDA stream (stream ids are
  the same on every rank when the job creates its communicators the same way); when the ranks'
  communication streams differ, the kernel name alone.
- CPU Kineto traces (gloo): the backend ops on the worker threads (``gloo:all_reduce``), the
  channel their collective (``allreduce``); gloo runs a group's collectives in order on
  whichever worker thread is free, so the thread is not part of the channel.
- Chakra traces: the COMM nodes, the channel their collective (``c10d::allreduce_`` and
  ``gloo:all_reduce`` are both ``allreduce``).

Point-to-point ops (send, recv) outside GPU kernels are not collectives and are skipped
(counted). Process groups are not told apart (the timeline does not carry them): a job whose
disjoint groups run the same collective on the same channel mixes their instances. Where ranks
hold different counts of a channel, instances are matched in order up to the smallest count
and the difference is reported (``mismatches``); a channel that only one rank has is not
matched.

Clocks: Kineto traces of one host share a clock. Chakra traces at recorded times start at 0 on
every rank: pass ``offsets`` (`timeline.clock.rank_offsets_ns` of the workload: the recorded
time origins) to put them on one clock. Without them, ``align="auto"`` aligns a recorded
timeline whose ranks all start at the same instant by the collectives' ends (blocking
collectives end together on every member: each rank's offset is the median of its ends'
difference from the instances' median end), a rough fix: gloo's ops end several ms apart
(``end_spread_ns`` says how well ends agree).
"""

from __future__ import annotations

import numpy as np

from ...errors import ChakraError
from ...io.collective_names import classify, is_backend_op_name
from ...table import Tables
from ...timeline.job import COMM, JobTimeline, RankTimeline

ALIGN_CHOICES = ("auto", "none", "ends")


def _collectives(t: RankTimeline, by_stream: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows, channel labels) of a rank's collectives, and how many p2p ops were skipped."""
    rows = np.flatnonzero(t.kind == COMM)
    codes, inv = np.unique(t.name[rows], return_inverse=True)
    label = np.empty(codes.size, object)
    keep = np.ones(codes.size, bool)
    p2p = np.zeros(codes.size, bool)
    gpu = t.source == "kineto-gpu"
    names = [t.names[c] for c in codes.tolist()]
    backend_only = t.source == "kineto-cpu" and any(is_backend_op_name(n) for n in names)
    for i, n in enumerate(names):
        if gpu:
            label[i] = n
            continue
        kind = classify(n)
        p2p[i] = kind.p2p is not None
        keep[i] = not p2p[i] and (not backend_only or is_backend_op_name(n))
        label[i] = kind.key or n
    skipped = int(p2p[inv].sum())
    rows, inv = rows[keep[inv]], inv[keep[inv]]
    labels = label[inv]
    if gpu and by_stream:
        labels = np.asarray([f"stream {s}: {n}" for s, n in zip(t.stream[rows].tolist(), labels.tolist())], object)
    return rows, labels, skipped


def stragglers(
    job: JobTimeline,
    *,
    threshold: float = 0.02,
    dominance: float = 2.0,
    align: str = "auto",
    offsets: dict[int, int] | None = None,
) -> Tables:
    """Collective arrivals across the ranks of `job` (see the module doc for the matching rule).

    Tables: ``ranks`` (rank, instances, times_last, caused_ns, caused_frac, waited_ns,
    waited_frac, mean_late_ns, window_ns, straggler), ``instances`` (channel, index, ranks,
    last_rank, median_arrival_ns, last_arrival_ns, late_vs_median_ns, caused_ns, spread_ns,
    end_spread_ns), ``arrivals`` (channel, index, rank, arrival_ns, wait_ns, last) and
    ``mismatches`` (channel, rank, count, matched, extra). Times are ns from the earliest arrival.
    ``align``: "auto", "none" or "ends" (see the module doc); ``offsets``: ns added to each
    rank's times (overrides ``align``)."""
    if align not in ALIGN_CHOICES:
        raise ChakraError(f"align: one of {ALIGN_CHOICES}, not {align!r}")
    ranks = [t.rank for t in job]
    gpu_streams = [frozenset(t.stream[t.kind == COMM].tolist()) for t in job if t.source == "kineto-gpu"]
    by_stream = len(set(gpu_streams)) <= 1
    per = [_collectives(t, by_stream) for t in job]
    channels = sorted({str(c) for _, labels, _ in per for c in labels.tolist()})
    R, C = len(ranks), len(channels)
    chan = np.asarray(channels, object)
    counts = np.zeros((R, C), np.int64)
    keyed = []
    for ri, (t, (rows, labels, _)) in enumerate(zip(job, per)):
        code = np.searchsorted(chan, labels) if rows.size else np.zeros(0, np.int64)
        order = np.lexsort((t.start[rows], code))
        rows, code = rows[order], code[order]
        counts[ri] = np.bincount(code, minlength=C)
        first = np.concatenate([[0], np.cumsum(counts[ri])[:-1]])
        keyed.append((rows, code, np.arange(rows.size) - first[code]))
    present = counts > 0
    matched = np.where(present.sum(0) >= 2, np.where(present, counts, np.iinfo(np.int64).max).min(0), 0)
    offset = np.concatenate([[0], np.cumsum(matched)])
    n = int(offset[-1])
    arrive, end = np.full((n, R), np.nan), np.full((n, R), np.nan)
    base = min((int(t.start[rows].min()) for t, (rows, _, _) in zip(job, keyed) if rows.size), default=0)
    for ri, (t, (rows, code, k)) in enumerate(zip(job, keyed)):
        ok = k < matched[code]
        idx = offset[code[ok]] + k[ok]
        arrive[idx, ri] = (t.start[rows[ok]] - base).astype(np.float64)
        end[idx, ri] = (t.start[rows[ok]] + t.dur[rows[ok]] - base).astype(np.float64)
    starts = {t.window[0] for t in job}
    how = align if align != "auto" else "ends" if job.source == "recorded" and len(starts) == 1 and R > 1 else "none"
    shift = np.zeros(R)
    if offsets is not None:
        how, shift = "offsets", np.asarray([float(offsets.get(r, 0)) for r in ranks])
    elif how == "ends" and n:
        diff = np.nanmedian(end, axis=1, keepdims=True) - end
        has = ~np.isnan(diff).all(0)
        shift[has] = np.nanmedian(diff[:, has], axis=0)
    if how != "none" and n:
        lo = np.nanmin(arrive + shift)
        arrive, end = arrive + shift - lo, end + shift - lo
    return _tables(job, ranks, chan, counts, matched, arrive, end, per, (threshold, dominance), how, shift)


def _tables(job, ranks, chan, counts, matched, arrive, end, per, verdict_by, how, shift) -> Tables:
    threshold, dominance = verdict_by
    n, R = arrive.shape
    inst_chan = np.repeat(np.arange(chan.size), matched)
    index = np.arange(n) - np.repeat(np.cumsum(matched) - matched, matched)
    there = ~np.isnan(arrive)
    filled = np.where(there, arrive, -np.inf)
    srt = np.sort(filled, axis=1)
    last = srt[:, -1] if n else np.zeros(0)
    second = srt[:, -2] if n and R > 1 else last
    last_rank = np.argmax(filled, axis=1) if n else np.zeros(0, np.int64)
    with np.errstate(all="ignore"):
        median = np.nanmedian(arrive, axis=1) if n else np.zeros(0)
        end_spread = np.nanmax(end, axis=1) - np.nanmin(end, axis=1) if n else np.zeros(0)
        first = np.nanmin(arrive, axis=1) if n else np.zeros(0)
    caused = last - second
    wait = last[:, None] - arrive
    times_last = np.bincount(last_rank[caused > 0], minlength=R)  # a tie for last counts for nobody
    caused_r = np.bincount(last_rank, weights=caused, minlength=R)
    waited_r = np.nansum(wait, axis=0) if n else np.zeros(R)
    inst_r = there.sum(0)
    late_r = np.nansum(arrive - median[:, None], axis=0) / np.maximum(inst_r, 1) if n else np.zeros(R)
    window = np.asarray([max(t.window[1] - t.window[0], 0) for t in job], np.float64)
    safe = np.where(window > 0, window, np.nan)
    caused_frac, waited_frac = caused_r / safe, waited_r / safe
    others = (caused_r.sum() - caused_r) / max(R - 1, 1)
    verdict = (caused_r > 0) & (np.nan_to_num(caused_frac) >= threshold) & (caused_r >= dominance * others)
    rk = np.asarray(ranks, np.int64)

    def i64(a):
        return np.rint(np.nan_to_num(a)).astype(np.int64).tolist()

    def frac(a):
        return [None if np.isnan(x) else float(x) for x in a.tolist()]

    rank_rows = _rows(
        rank=rk.tolist(), instances=inst_r.tolist(), times_last=times_last.tolist(), caused_ns=i64(caused_r),
        caused_frac=frac(caused_frac), waited_ns=i64(waited_r), waited_frac=frac(waited_frac),
        mean_late_ns=i64(late_r), window_ns=i64(window), straggler=verdict.tolist(),
    )  # fmt: skip
    inst_rows = _rows(
        channel=chan[inst_chan].tolist(), index=index.tolist(), ranks=there.sum(1).tolist(),
        last_rank=rk[last_rank].tolist(), median_arrival_ns=i64(median), last_arrival_ns=i64(last),
        late_vs_median_ns=i64(last - median), caused_ns=i64(caused), spread_ns=i64(last - first),
        end_spread_ns=i64(end_spread),
    )  # fmt: skip
    ii, rr = np.nonzero(there)
    arr_rows = _rows(
        channel=chan[inst_chan[ii]].tolist(), index=index[ii].tolist(), rank=rk[rr].tolist(),
        arrival_ns=i64(arrive[ii, rr]), wait_ns=i64(wait[ii, rr]), last=(last_rank[ii] == rr).tolist(),
    )  # fmt: skip
    uneven = [c for c in range(chan.size) if (counts[:, c] != counts[:, c].max()).any()]
    mis = [
        {"channel": str(chan[c]), "rank": int(rk[r]), "count": int(counts[r, c]), "matched": int(matched[c]),
         "extra": int(counts[r, c] - matched[c])}
        for c in uneven for r in range(len(ranks))
    ]  # fmt: skip
    order = np.argsort(-caused_r, kind="stable")
    summary = {
        "source": job.source,
        "ranks": len(ranks),
        "channels": int((matched > 0).sum()),
        "instances": n,
        "unmatched_ops": int((counts - np.minimum(counts, matched)).sum()),
        "p2p_skipped": int(sum(s for _, _, s in per)),
        "threshold": threshold,
        "dominance": dominance,
        "align": how,
        "clock_offsets_ns": {int(r): int(round(s)) for r, s in zip(ranks, shift.tolist())} if how != "none" else {},
        "median_end_spread_ns": int(np.nanmedian(end_spread)) if n else 0,
        "stragglers": [int(rk[i]) for i in order.tolist() if verdict[i]],
        "worst_rank": int(rk[order[0]]) if n and caused_r[order[0]] > 0 else None,
    }
    return Tables({"ranks": rank_rows, "instances": inst_rows, "arrivals": arr_rows, "mismatches": mis}, summary)


def _rows(**cols) -> list[dict]:
    keys = list(cols)
    return [dict(zip(keys, vals)) for vals in zip(*cols.values())]


__all__ = ["ALIGN_CHOICES", "stragglers"]
