"""The host time of the original that the replay of its ops does not spend: a tensor subclass's
dispatch, found by comparing the recording with passes of the replay profiled the same way.

A replay runs each recorded top-level op on plain tensors. An op the original ran on a tensor
subclass (DTensor: tensor parallel, FSDP2's parameters) also ran the subclass's Python dispatch
inside it (DTensor's sharding propagation, redistribution, local calls), and Python next to it
(`from_local`, `to_local`, hooks): the tp corpus job's `aten::linear` takes ten times its
plain-tensor time, and its replay of the ops alone runs 55-60% short. That time cannot be read
off the recording, which ran under the execution-trace observer and the profiler: they cost
10-25 µs per recorded event here and made the corpus's profiled steps 2-7x the unprofiled ones.

So the replay is calibrated (`calibrate`): after its warm-up it runs plain passes and passes
under the same observer and profiler, and compares like with like, per op k:

    inside(k)  = (recorded duration - time blocked on peers) - r * (profiled replay duration - blocked)
                 - c * (events nested in the recording - in the profiled replay)
    between(k) = (recorded gap before k - profiled replay gap) - c0 * (events starting in the
                 recorded gap - in the replayed one) - o

c is the profiling's cost per event of the replay ((profiled pass - plain pass) / its events),
c0 its cost per event without arguments (measured on empty ranges), r and o the recorded /
replayed ratio of op durations and the offset of gaps where both ran the same code (the
original's data were colder in cache, its memory fresh). What is kept is what a subclass
dispatch explains: inside an op whose recording nests more events than its replay (the
dispatch's own calls), and between ops next to one. Elsewhere both ran the same code and the
differences are the recording's noise and the profiler's uneven cost per event: on the
single-rank gpt2 job, the gaps' differences summed to 1-2 ms per step against a real
difference of 0.4-0.5 ms, so they are not spent.

Waiting for another rank is not host work: blocking ops (waits, barriers, c10d:: and gloo: calls) count for
nothing, their time inside a recorded op is taken out, a gap after a collective wait or across
a profiler step is not used, and an op or gap that overlaps a collective's work on the gloo
thread is not a sample (the host may have been waiting). The recording is one noisy sample per
op, so each op takes the median of its kind (its name and recorded event count; for gaps, the
op and the one before it), and a negative difference is carried against later positive ones:
the replay spends, op by op, what is owed so far, never less than nothing.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..convert.link import Link
from ..io.kineto import KinetoTrace, read_kineto

#: names of ops that can block on another rank: their time is not the rank's own work
BLOCKING = re.compile(r"wait|barrier|^c10d::|^gloo:|nccl", re.IGNORECASE)


@dataclass(frozen=True)
class Events:
    """The CPU events of a Kineto trace nested per thread: per event (Kineto row), how many
    events it holds and how long it was blocked in blocking descendants (ns)."""

    nested: np.ndarray  # int64 per Kineto row (0 for events that are not CPU X events)
    blocked: np.ndarray  # int64 ns per Kineto row
    key: np.ndarray  # sorted composite (thread, start) keys of the CPU events
    span: int  # the key's per-thread stride
    origin: int  # the earliest CPU event's start (ns): key = thread * span + (start - origin)
    thread: np.ndarray  # thread key per Kineto row

    def starts_between(self, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Number of CPU events of `thread` that start in [lo, hi) (ns, Kineto clock)."""

        def at(t):
            return thread * self.span + np.clip(np.asarray(t, np.int64) - self.origin, 0, self.span - 1)

        return np.maximum(np.searchsorted(self.key, at(hi), "left") - np.searchsorted(self.key, at(lo), "left"), 0)


def events(k: KinetoTrace) -> Events:
    cpu = np.flatnonzero(k.mask(("cpu_op", "user_annotation"), "X"))
    thread = k.thread_keys()
    nested = np.zeros(len(k), np.int64)
    blocked = np.zeros(len(k), np.int64)
    if not cpu.size:
        return Events(nested, blocked, np.zeros(0, np.int64), 1, 0, thread)
    origin = int(k.ts[cpu].min())
    span = int(k.end[cpu].max()) - origin + 2
    order = cpu[np.lexsort((-k.dur[cpu], k.ts[cpu], thread[cpu]))]
    t = thread[order]
    start = t * span + (k.ts[order] - origin)
    end = t * span + (k.end[order] - origin)
    nested[order] = np.searchsorted(start, end, "left") - np.arange(order.size) - 1
    # blocking events that no blocking event encloses: their time, summed over each event's span
    names = np.asarray([bool(BLOCKING.search(n)) for n in k.names], bool)
    block = names[k.name[order]] if len(k.names) else np.zeros(order.size, bool)
    prev_end = np.maximum.accumulate(np.where(block, end, -1))
    inner = np.zeros(order.size, bool)
    inner[1:] = block[1:] & (prev_end[:-1] > start[1:])
    outer = block & ~inner
    cs = np.concatenate([[0], np.cumsum(np.where(outer, k.dur[order], 0))])
    lo, hi = np.arange(order.size), np.searchsorted(start, end, "left")
    blocked[order] = cs[hi] - cs[lo]
    return Events(nested, blocked, start, span, origin, thread)


PROBE = "chakra::calibration_probe"
"""The name of the empty events `profiled_pass` records to price an event without arguments."""


def _probe(n: int) -> float:
    """Seconds for `n` empty record_function ranges."""
    from torch.autograd.profiler import record_function

    t0 = time.perf_counter()
    for _ in range(n):
        with record_function(PROBE):
            pass
    return time.perf_counter() - t0


def profiled_pass(run_once: Callable[[], object], probes: int = 1000) -> tuple[KinetoTrace, float, float]:
    """One pass of `run_once` under the execution-trace observer and the CPU profiler, as
    `chakra collect` records (`collect.recorder`, shapes recorded), read back as a Kineto trace;
    the pass's seconds (profiling on, its start-up and export not counted); and the seconds per
    event without arguments (an autograd wrapper, an annotation) that the profiling costs,
    measured on `probes` empty ranges recorded after the pass."""
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    plain = _probe(probes)
    with tempfile.TemporaryDirectory(prefix="chakra-calibrate-") as tmp:
        et = ExecutionTraceObserver().register_callback(os.path.join(tmp, "et.json"))
        try:
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=et) as prof:
                t0 = time.perf_counter()
                run_once()
                seconds = time.perf_counter() - t0
                profiled = _probe(probes)
            path = os.path.join(tmp, "kineto.json")
            prof.export_chrome_trace(path)
        finally:
            et.unregister_callback()
        return read_kineto(path), seconds, max(profiled - plain, 0.0) / max(probes, 1)


def main_thread_events(k: KinetoTrace) -> np.ndarray:
    """Rows of the CPU events of the thread that has the most (the one that ran the replay)."""
    cpu = np.flatnonzero(k.mask(("cpu_op", "user_annotation"), "X"))
    if not cpu.size:
        return cpu
    thread = k.thread_keys()[cpu]
    return cpu[thread == np.bincount(thread).argmax()]


def match_calls(k: KinetoTrace, names: list[str]) -> np.ndarray:
    """The Kineto row of each replayed call (-1 if none): in call order, the first event of its
    op name on the busiest thread that starts at or after the previous match ended."""
    cpu = main_thread_events(k)
    out = np.full(len(names), -1, np.int64)
    if not cpu.size:
        return out
    cpu = cpu[np.argsort(k.ts[cpu], kind="stable")]
    by_name: dict[str, np.ndarray] = {}
    codes = k.name[cpu]
    order = np.argsort(codes, kind="stable")  # (by name, each in time order: a mask per name is names x events)
    uniq, first = np.unique(codes[order], return_index=True)
    for code, part in zip(uniq.tolist(), np.split(cpu[order], first[1:])):
        by_name[k.names[code]] = part
    pos = dict.fromkeys(by_name, 0)
    last_end = np.iinfo(np.int64).min
    for i, name in enumerate(names):
        rows = by_name.get(name)
        if rows is None:
            continue
        p = pos[name] + int(np.searchsorted(k.ts[rows[pos[name] :]], last_end, "left"))
        if p < rows.size:
            out[i] = rows[p]
            pos[name] = p + 1
            last_end = int(k.end[rows[p]])
    return out


def _medians(keys: list, values: np.ndarray, clean: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Each valid entry replaced by the median of the clean entries of its key (0 where its key
    has none); 0 elsewhere."""
    groups: dict = defaultdict(list)
    for i in np.flatnonzero(clean).tolist():
        groups[keys[i]].append(float(values[i]))
    med = {key: statistics.median(v) for key, v in groups.items()}
    return np.array([med.get(keys[i], 0.0) if valid[i] else 0.0 for i in range(len(keys))], np.float64)


class CollectiveWork:
    """When the trace's collectives were in flight (gloo's worker-thread events): a rank's host
    may have been blocked on one of them at any time in between."""

    def __init__(self, k: KinetoTrace):
        work = np.array([n.startswith("gloo:") for n in k.names], bool)
        rows = np.flatnonzero((k.ph == ord("X")) & (work[k.name] if len(k.names) else False))
        rows = rows[np.argsort(k.ts[rows], kind="stable")]
        self.start = k.ts[rows]
        self.max_end = np.maximum.accumulate(k.end[rows]) if rows.size else np.zeros(0, np.int64)

    def overlaps(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per interval [lo, hi]: does some collective's work overlap it?"""
        i = np.searchsorted(self.start, hi, "left")
        return (i > 0) & (self.max_end[np.maximum(i - 1, 0)] > lo) if self.start.size else np.zeros(len(lo), bool)


def _owed(signed: np.ndarray) -> np.ndarray:
    """Non-negative time to spend before each op: what is owed so far, a surplus carried forward
    (spent by op k = the most ever owed up to k)."""
    spent = np.maximum.accumulate(np.maximum(np.cumsum(signed), 0.0))
    return np.diff(spent, prepend=0.0)


@dataclass
class Calibration:
    """What `calibrate` found, per replayed op and in total (seconds)."""

    gaps: np.ndarray  # seconds to spend before each call
    per_event_s: float  # the instrumentation's cost per event of the replay (ops with arguments)
    per_empty_event_s: float  # and per event without arguments
    inside_ops_s: float  # sum of the per-op medians inside ops (signed)
    between_ops_s: float  # and between ops
    matched: int  # calls found in the profiled pass
    op_ratio: float  # recorded / replayed duration of ops that ran the same code
    gap_offset_s: float  # recorded - replayed gap between such ops, with no event in between

    def to_dict(self, steps: int) -> dict:
        n = max(steps, 1)
        return {
            "per_event_us": round(self.per_event_s * 1e6, 3),
            "per_empty_event_us": round(self.per_empty_event_s * 1e6, 3),
            "inside_ops_ms_per_step": round(self.inside_ops_s * 1e3 / n, 3),
            "between_ops_ms_per_step": round(self.between_ops_s * 1e3 / n, 3),
            "calls_matched": self.matched,
            "same_op_ratio": round(self.op_ratio, 4),
            "same_gap_offset_us": round(self.gap_offset_s * 1e6, 3),
        }


def calibrate(
    run_once: Callable[[], object],
    names: list[str],
    recorded: KinetoTrace,
    lk: Link,
    step: np.ndarray,
    waits: np.ndarray,
    sync: Callable[[], None] = lambda: None,
    passes: int = 3,
) -> Calibration:
    """The host time to spend before each call of a replay pass (`run_once`).

    ``names``: each call's op name as the profiler writes it ("aten::linear"); ``lk``: the
    recorded Kineto event of each call (`waits.link_rows`); ``step``: each call's profiler step;
    ``waits``: True where the call waits for a collective first. ``sync``: run before each pass
    (a barrier: every rank runs the same passes, their collectives must pair)."""
    plain = []
    for _ in range(passes):
        sync()
        t0 = time.perf_counter()
        run_once()
        plain.append(time.perf_counter() - t0)
    profiled, empty = [], []
    for _ in range(max(passes - 1, 1)):
        sync()
        cal, seconds, per_empty = profiled_pass(run_once)
        profiled.append(seconds)
        empty.append(per_empty)
    got = match_calls(cal, names)
    pair = _Pair(recorded, events(recorded), np.asarray(lk.event, np.int64), cal, events(cal), got)
    main = main_thread_events(cal)
    main_events = int((cal.name[main] != cal.name_code(PROBE)).sum())
    c = max((statistics.median(profiled) - statistics.median(plain)) / max(main_events, 1), 0.0)
    c_empty = statistics.median(empty)
    blocking = np.array([bool(BLOCKING.search(n)) for n in names], bool)
    work = CollectiveWork(recorded)
    inside, dn, ratio = _inside(pair, names, blocking, work, c)
    between, offset = _between(pair, names, blocking, work, c_empty, dn, np.asarray(step), np.asarray(waits, bool))
    return Calibration(
        gaps=_owed(inside + between),
        per_event_s=c,
        per_empty_event_s=c_empty,
        inside_ops_s=float(inside.sum()),
        between_ops_s=float(between.sum()),
        matched=int((got >= 0).sum()),
        op_ratio=ratio,
        gap_offset_s=offset,
    )


@dataclass
class _Pair:
    """Each call's recorded event and its event in the profiled replay (rows; -1 none)."""

    rec: KinetoTrace
    rec_ev: Events
    rec_row: np.ndarray
    cal: KinetoTrace
    cal_ev: Events
    cal_row: np.ndarray

    def __post_init__(self):
        self.ok = (self.rec_row >= 0) & (self.cal_row >= 0)
        self.r, self.c = np.maximum(self.rec_row, 0), np.maximum(self.cal_row, 0)


def _inside(p: _Pair, names, blocking, work: CollectiveWork, c: float):
    """Per call: the untraced time inside it (s), the recorded minus replayed event count, and
    the recorded / replayed duration of ops that ran the same code (their cache and memory
    differ: the original's data were colder, its memory fresh), which scales the replay's."""
    rec_op = (p.rec.dur[p.r] - p.rec_ev.blocked[p.r]).astype(np.float64)
    cal_op = (p.cal.dur[p.c] - p.cal_ev.blocked[p.c]).astype(np.float64)
    dn = p.rec_ev.nested[p.r] - p.cal_ev.nested[p.c]
    valid = p.ok & ~blocking & (cal_op > 0)
    same = valid & (dn == 0)
    ratio = float(np.median(rec_op[same] / cal_op[same])) if same.sum() >= 10 else 1.0
    inside = (rec_op - ratio * cal_op) / 1e9 - c * dn
    clean = valid & ~work.overlaps(p.rec.ts[p.r], p.rec.end[p.r])
    keys = list(zip(names, p.rec_ev.nested[p.r].tolist()))
    inside = _medians(keys, inside, clean, valid)
    inside[dn <= 0] = 0.0  # the same code ran (see the module docstring)
    return inside, dn, ratio


def _between(p: _Pair, names, blocking, work: CollectiveWork, c: float, dn, step, waits):
    """Per call: the untraced time between it and the call before (s), and the recorded minus
    replayed gap between ops that ran the same code with no event between them (taken off).
    ``c``: the profiling's cost per event without arguments (those between ops are wrappers
    and annotations: the autograd engine's, DTensor's, FSDP's)."""
    prev = np.r_[-1, np.arange(len(names) - 1)]
    q = np.maximum(prev, 0)
    pr, pc = p.r[q], p.c[q]
    rec, cal = p.rec, p.cal
    cont = (  # a gap of the same thread and step, not a wait for a peer
        p.ok
        & (prev >= 0)
        & p.ok[q]
        & ~blocking
        & ~blocking[q]
        & ~waits
        & (step == step[q])
        & (p.rec_ev.thread[p.r] == p.rec_ev.thread[pr])
        & (rec.ts[p.r] >= rec.end[pr])
        & (cal.ts[p.c] >= cal.end[pc])
    )
    dm = p.rec_ev.starts_between(p.rec_ev.thread[p.r], rec.end[pr], rec.ts[p.r]) - p.cal_ev.starts_between(
        p.cal_ev.thread[p.c], cal.end[pc], cal.ts[p.c]
    )
    between = ((rec.ts[p.r] - rec.end[pr]) - (cal.ts[p.c] - cal.end[pc])) / 1e9 - c * dm
    plain = cont & (dm == 0) & (dn == 0) & (dn[q] == 0)
    offset = float(np.median(between[plain])) if plain.sum() >= 10 else 0.0
    clean = cont & ~work.overlaps(rec.end[pr], rec.ts[p.r])
    keys = [(names[int(k)] if k >= 0 else "", n) for k, n in zip(prev.tolist(), names)]
    between = _medians(keys, between - offset, clean, cont)
    # kept only next to an op that ran a tensor subclass's dispatch (see the module docstring)
    between[~((dn > 0) | (dn[q] > 0))] = 0.0
    return between, offset
