"""What each of a recorded job's ops costs on this machine: the job replayed, unprofiled.

`replay_times` runs the job's host traces as `chakra replay` does (`replay.operators.HostReplay`,
one process per rank on 127.0.0.1, gloo, one intra-op thread, the same warm-up, the host time
the recording's tensor-subclass dispatch spent calibrated with `HostReplay.calibrate` and spent
before each op), then times passes op by op (`HostReplay.run_step(stamps=...)`). An op's time is
what the pass spent on it apart from waiting for a peer: from the end of the op before (the
replay's own Python between calls) through its calibrated host time to its return. A
collective's call is its launch on the host; its transfer and the wait for it are left to the
simulator. Per op: the median over the passes, the whole rescaled so that its sum is the median
of the passes' sums (an op's median alone leaves out the rare slow pass that a step pays).

A rank's timing is keyed by the ops' `rf_id` (the record-function id that the host trace and
the converted Chakra trace both carry), so `node_ns` puts it in the Chakra nodes. Timings are
kept in the user's cache (`io.cache`: `replay-times.<key>.json`, key: the traces' bytes, the rank
count, threads, this machine and the library's versions): predicting the same job again does not
replay it again.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io import cache
from ..io.pytorch_host import read_host_trace
from ..replay import _standalone as rt
from ..replay.budget import Budget, BudgetSpent, slowest_text
from ..replay.environment import environment
from ..replay.job import (
    _recorded,
    calibrate_host_gaps,
    control_group,
    host_traces,
    kineto_for,
    max_ranks,
    memory_estimates,
)
from ..replay.launch import progress_reporter, run_ranks, stop_together
from ..replay.measure import Measurement
from ..replay.memory import check as check_memory
from ..replay.operators import HostReplay
from ..schema.enums import NodeType
from ..schema.trace import Trace

SCHEMA = "chakra-replay-times/2"
_MEMO: dict[str, dict[int, RankTiming]] = {}


@dataclass(frozen=True)
class RankTiming:
    """One rank's replayed ops: ``rf_id`` and ``ns`` (per op, per pass of ``steps`` recorded
    steps); ``pass_ns``: the passes' sums (their median is ``ns.sum()``); ``ci_ns``: its 95% CI;
    ``host_ns``: how much of it is the calibrated host time (per pass); ``wait_ns``: the median
    time a pass waited for peers (not in ``ns``)."""

    rf_id: np.ndarray
    ns: np.ndarray
    pass_ns: list[float]
    ci_ns: tuple[float, float]
    steps: int
    host_ns: float = 0.0
    wait_ns: float = 0.0
    coverage: dict = field(default_factory=dict)
    ancestors: list[list[int]] = field(default_factory=list)  # per op: its callers' rf_ids, innermost first
    waits_ns: np.ndarray | None = None  # per op: median time the pass waited for peers right before it

    @property
    def total_ns(self) -> float:
        return float(self.ns.sum())

    @property
    def rel_ci(self) -> tuple[float, float]:
        """The CI's ends relative to the total (low <= 1 <= high)."""
        t = self.total_ns
        if t <= 0:
            return 1.0, 1.0
        return min(self.ci_ns[0] / t, 1.0), max(self.ci_ns[1] / t, 1.0)

    def to_dict(self) -> dict:
        return {
            "rf_id": self.rf_id.tolist(),
            "ns": [round(float(x), 1) for x in self.ns],
            "pass_ns": self.pass_ns,
            "ci_ns": list(self.ci_ns),
            "steps": self.steps,
            "host_ns": self.host_ns,
            "wait_ns": self.wait_ns,
            "coverage": self.coverage,
            "ancestors": self.ancestors,
            "waits_ns": None if self.waits_ns is None else [round(float(x), 1) for x in self.waits_ns],
        }

    @classmethod
    def from_dict(cls, d: dict) -> RankTiming:
        return cls(
            np.asarray(d["rf_id"], np.int64),
            np.asarray(d["ns"], np.float64),
            [float(x) for x in d["pass_ns"]],
            (float(d["ci_ns"][0]), float(d["ci_ns"][1])),
            int(d["steps"]),
            float(d.get("host_ns", 0.0)),
            float(d.get("wait_ns", 0.0)),
            dict(d.get("coverage") or {}),
            [[int(x) for x in a] for a in d.get("ancestors", [])],
            None if d.get("waits_ns") is None else np.asarray(d["waits_ns"], np.float64),
        )


def timing_of(
    rf_id,
    own: np.ndarray,
    host_ns: float,
    steps: int,
    waits: list[float],
    coverage: dict,
    ancestors=(),
    op_waits=None,
) -> RankTiming:
    """`RankTiming` from per-pass own times (passes x ops, ns): per-op medians scaled so that they
    sum to the median of the passes' sums."""

    own = np.asarray(own, np.float64)
    sums = own.sum(axis=1)
    med = np.median(own, axis=0)
    target = float(np.median(sums))
    ns = med * (target / med.sum()) if med.sum() > 0 else med
    m = Measurement(samples=sums.tolist())
    ci = m.ci95_median or m.ci95_mean or (target, target)
    return RankTiming(
        np.asarray(rf_id, np.int64),
        ns,
        sums.tolist(),
        (float(ci[0]), float(ci[1])),
        steps,
        host_ns,
        float(np.median(waits)) if len(waits) else 0.0,
        coverage,
        [list(a) for a in ancestors],
        None if op_waits is None else np.median(np.asarray(op_waits, np.float64), axis=0),
    )


def node_ns(t: Trace, timing: RankTiming, waits: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
    """(ns per node of `t`, mask of the COMP nodes that got replayed time, ns of replayed ops
    with no node): each replayed op's time goes to the COMP node of its `rf_id`, or else of its
    nearest caller that is one (the converted trace keeps the outermost recorded range, such as
    the autograd engine's `evaluate_function: MmBackward0` around a backward `aten::mm`).
    `[host]` nodes get nothing: the replay's time between ops is in the op after it. ``waits``:
    each op's time also holds what the replay waited for peers right before it (`comm="replay"`)."""
    comp = t.types == NodeType.COMP_NODE
    rf, has = t.attr_column("rf_id")
    rf = np.asarray(rf, np.int64)
    live = comp & np.asarray(has, bool)
    where = {int(x): i for i, x in zip(np.flatnonzero(live).tolist(), rf[live].tolist())}
    out = np.zeros(len(t), np.float64)
    hit = np.zeros(len(t), bool)
    lost = 0.0
    chains = timing.ancestors or [[]] * len(timing.ns)
    each = timing.ns
    if waits and timing.waits_ns is not None:
        each = timing.ns + timing.waits_ns
    for own, up, ns in zip(timing.rf_id.tolist(), chains, each.tolist()):
        i = where.get(own)
        if i is None:
            i = next((where[a] for a in up if a in where), None)
        if i is None:
            lost += ns
            continue
        out[i] += ns
        hit[i] = True
    return out, hit, lost


# ------------------------------------------------------------------ running the replay


def _stamp(world: int, threads: int, host_gaps: bool, budget_s: float) -> str:
    import torch

    env = environment()
    return json.dumps(
        [
            SCHEMA,
            world,
            threads,
            host_gaps,
            budget_s,
            torch.__version__,
            env.get("chakra_trace"),
            platform.node(),
            env.get("cpu_model"),
            env.get("logical_cpus"),
        ]  # fmt: skip
    )


def _sources(traces: dict[int, str]) -> list[Path]:

    out = []
    for p in traces.values():
        out.append(Path(p))
        k = kineto_for(p)
        if k:
            out.append(Path(k))
    return out


def replay_times(
    source,
    world_size: int | None = None,
    *,
    threads: int = 1,
    host_gaps: bool = True,
    budget_s: float = 4.0,
    min_passes: int = 10,
    max_passes: int = 400,
    warmup_s: float = 1.0,
    use_cache: bool = True,
    refresh: bool = False,
    timeout_s: float = 900,
    say=None,
    progress=None,
) -> dict[int, RankTiming]:
    """{rank: RankTiming} of the job's host traces (a `chakra collect` folder, or host trace
    files) replayed on `world_size` ranks here (default: its recorded ranks; rank r replays
    trace r mod the traces, as `chakra replay` does): timed passes for about `budget_s` after the
    warm-up and the host-time calibration. Kept in the user's cache (see the module
    docstring) unless ``use_cache`` is False or `CHAKRA_TRACE_CACHE=0`; ``refresh``: replay
    again even when kept (and keep the new timing). ``progress(n)``: rank 0's timed passes so far.
    """

    traces = host_traces(source)
    paths = [traces[r] for r in sorted(traces)]
    if world_size is None:
        world_size = len(paths) if len(paths) > 1 else _recorded(paths[0])[0]
    if world_size > max_ranks():
        raise ChakraError(f"replay timing: {world_size} ranks is over the limit of {max_ranks()} processes")
    srcs = _sources(traces)
    key = cache.cache_key(srcs, _stamp(world_size, threads, host_gaps, budget_s))
    entry = f"replay-times.{key}.json"
    keep = use_cache and cache.enabled()
    if keep and not refresh and key in _MEMO:
        return _MEMO[key]
    kept = cache.load(entry) if keep and not refresh else None
    if kept is not None:
        try:
            d = json.loads(kept)
            if d.get("schema") == SCHEMA:
                got = {int(r): RankTiming.from_dict(x) for r, x in d["ranks"].items()}
                _MEMO[key] = got
                return got
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # damaged: replay again
    # what every rank will hold: refused here, before any rank starts, when it does not fit
    est = memory_estimates(paths, world_size)
    memory_limit = dict(enumerate(check_memory(est, paths[0]))) if est else None
    if say:
        say(f"replaying {len(paths)} trace(s) on {world_size} ranks to time their ops (once; cached)")
    opts = {
        "threads": threads,
        "host_gaps": host_gaps,
        "budget_s": budget_s,
        "min_passes": min_passes,
        "max_passes": max_passes,
        "warmup_s": warmup_s,
        "memory_limit": memory_limit,
    }
    outs = run_ranks(
        "chakra_trace.calibrate.replayed:rank_main",
        world_size,
        args=(paths, opts),
        backend="gloo",
        device="cpu",
        timeout_s=timeout_s,
        env={"OMP_NUM_THREADS": str(threads)},
        progress=progress,
    )
    got = {
        r: timing_of(
            o["rf_id"],
            np.asarray(o["own_ns"]),
            o["host_ns"],
            o["steps"],
            o["wait_ns"],
            o["coverage"],
            o["ancestors"],
            o["op_wait_ns"],
        )
        for r, o in enumerate(outs)
    }
    if keep:
        _MEMO[key] = got
        d = {"schema": SCHEMA, "world_size": world_size, "ranks": {str(r): t.to_dict() for r, t in got.items()}}
        cache.store(entry, json.dumps(d).encode())
    return got


def rank_main(rank: int, world_size: int, paths: list[str], opts: dict) -> dict:
    """One rank of `replay_times` (inside the process group `run_ranks` set up): the setup of
    `replay.job.rank_main`, then timed passes op by op."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(opts["threads"]))
    path = paths[rank % len(paths)]
    h = read_host_trace(path)
    # (a bound on the whole rank, generous: the timed passes take about budget_s, after the warm-up and
    # the calibration; past its hard end, passes are cut short and the timing stops)
    budget = Budget(max(4 * float(opts["budget_s"]), 60.0))
    rep = HostReplay(
        h,
        device="cpu",
        kineto=kineto_for(path),
        host_gaps=bool(opts["host_gaps"]),
        memory_limit=(opts.get("memory_limit") or {}).get(rank),
        deadline=budget.hard,
    )
    rep.collective_timeout_s = 60.0
    ctl = control_group(rep, rank, world_size)  # (as `chakra replay`)
    multi = ctl is not None
    decide = stop_together(ctl, device="cpu")
    report = progress_reporter() if rank == 0 else None  # (rank 0's passes: `replay_times`' progress)

    def sync() -> None:
        if multi:
            dist.barrier(group=ctl)

    rep.stage = "warm-up"
    warm_until = budget.start + budget.seconds / 2
    per = rt.warm_up(rep.run_step, float(opts["warmup_s"]), dist if multi else None, False, ctl, warm_until)
    calibrate_host_gaps(rep, sync, decide, budget, per)
    rep.stage = "timed run"
    ids: list = []
    own: list[list[float]] = []
    op_waits: list[list[float]] = []
    waits: list[float] = []
    t_end = time.perf_counter() + float(opts["budget_s"])
    while True:
        ops: Any = rep.plan["ops"]  # (the plan holds mixed values)
        plan: list[dict] = list(ops)
        stamps: list = []
        sync()
        t0 = time.perf_counter()
        whole = rep.run_step(stamps=stamps)
        t1 = time.perf_counter()
        if not whole:  # (cut short by the budget: not a pass; every rank stops, at the latest once cut too)
            if decide(True):
                break
            continue
        row = np.zeros(len(plan))
        blocked = np.zeros(len(plan))
        prev = t0
        for k, a, b, c in stamps:
            row[k] += (a - prev) + (c - b)
            blocked[k] += b - a
            prev = c
        if stamps:  # (the waits at the end of the pass: on its last op)
            blocked[stamps[-1][0]] += t1 - prev
        if ids != [op["node_id"] for op in plan]:  # (the first pass, or an op was dropped: start again)
            ids, own, waits, op_waits = [op["node_id"] for op in plan], [], [], []
        own.append((row * 1e9).tolist())
        op_waits.append((blocked * 1e9).tolist())
        waits.append((t1 - t0 - row.sum()) * 1e9)
        n = len(own)
        if report is not None:
            report(n)
        late = time.perf_counter() > budget.hard
        if decide(
            late or n >= int(opts["max_passes"]) or (n >= int(opts["min_passes"]) and time.perf_counter() > t_end)
        ):
            break
    if not own:
        raise BudgetSpent(
            f"{path}: no pass of the replay finished within its time budget (about {per:.3g} s a pass"
            f"{slowest_text(rep.slowest)})"
        )
    h = rep.h
    index = {int(i): r for r, i in enumerate(h.ids.tolist())}
    parent = h.parent.astype(np.int64)
    rf, ancestors = [], []
    for i in ids:
        at = index.get(int(i))
        rf.append(int(h.rf_id[at]) if at is not None else -1)
        up: list[int] = []
        while at is not None and len(up) < 32:
            at = index.get(int(parent[at])) if parent[at] >= 0 else None
            if at is not None:
                up.append(int(h.rf_id[at]))
        ancestors.append(up)
    host_s = sum(float(op.get("host_gap_us", 0.0)) for op in plan) * 1e-6
    return {
        "rf_id": rf,
        "ancestors": ancestors,
        "own_ns": own,
        "op_wait_ns": op_waits,
        "wait_ns": waits,
        "host_ns": host_s * 1e9,
        "steps": rep.steps_per_run,
        "coverage": {
            "replayed": rep.coverage.replayed,
            "total": rep.coverage.total,
            "host_gaps": {k: v for k, v in rep.host_gaps_info.items() if k != "calibration"},
        },
    }
