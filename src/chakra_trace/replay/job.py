"""Replay a recorded PyTorch job: every rank's host trace in its own process on 127.0.0.1
(gloo on CPU, NCCL on GPUs), compute and collectives together, timed by `measure`.

A collection folder (`chakra collect`) gives one trace per rank. One trace alone is replayed
on as many ranks as its default process group had (SPMD: every rank runs the same ops), so a
single rank's trace of a 2-GPU job still exercises its collectives.
"""

from __future__ import annotations

import glob
import json
import os
import re
import time
from typing import Any

from ..errors import ChakraError
from ..io.memory import env_int
from ..io.pytorch_host import read_host_trace
from . import _standalone as rt
from .budget import Budget, BudgetSpent, slowest_text
from .energy import gpu_of, rank_meter
from .environment import environment
from .export import export_script
from .launch import RankFailed, progress_reporter, run_ranks, stop_together
from .measure import measure
from .memory import check as check_memory
from .memory import estimate
from .operators import HostReplay, ReplayConfig, Selection
from .result import ReplayResult

_RANK_FILE = re.compile(r"rank(\d+)\.et\.json(\.gz)?$")
MAX_RANKS_ENV = "CHAKRA_REPLAY_MAX_RANKS"
MAX_ATTEMPTS = 5
"""Times `replay_host` starts the job again after a collective failed (without it, on every rank)."""
MAX_RANKS = 64
"""The most ranks (one process each) a replay starts when the world size comes from the traces
(recorded group size, rank files) rather than --world-size: a trace is data, and a recorded
group_size of 10**6 must not start a million processes. `MAX_RANKS_ENV` overrides it."""


def max_ranks() -> int:
    return env_int(MAX_RANKS_ENV) or MAX_RANKS


def host_traces(source) -> dict[int, str]:
    """{rank: host trace path} of a collection folder, a list of paths, or one path."""
    if isinstance(source, (list, tuple)):
        return {r: os.fspath(p) for r, p in enumerate(source)}
    source = os.fspath(source)
    if os.path.isdir(source):
        found = {}
        for p in glob.glob(os.path.join(source, "*.et.json*")):
            m = _RANK_FILE.search(os.path.basename(p))
            if m:
                found[int(m.group(1))] = _inside(source, p)
        if not found:
            raise ChakraError(f"{source}: no rank<r>.et.json[.gz] host traces (a `chakra collect` folder)")
        return dict(sorted(found.items()))
    if not os.path.exists(source):
        raise ChakraError(f"{source}: no such file or folder")
    return {0: source}


def kineto_for(et_path: str) -> str | None:
    """The Kineto trace recorded beside a host trace: rank0.et.json.gz -> rank0.kineto.json.gz
    (`chakra collect`), linear_et.json.gz -> linear_kineto.json.gz (PARAM's public traces)."""
    for sep in (".", "_"):
        base = re.sub(rf"\{sep}et\.json(\.gz)?$", "", et_path)
        if base == et_path:
            continue
        for suffix in (f"{sep}kineto.json.gz", f"{sep}kineto.json"):
            if os.path.exists(base + suffix):
                return _inside(os.path.dirname(et_path) or ".", base + suffix)
    return None


def _inside(folder: str, path: str) -> str:
    """`path`, when it is a regular file that resolves inside `folder`: a collection folder is data
    from someone else, and a link in it to ~/.ssh/id_rsa or /dev/zero is not a trace to read."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real, top]) != top or not os.path.isfile(real):
        raise ChakraError(
            f"{path}: links to {real}, not a file in {folder}; a collection folder's traces must be in it"
        )
    return path


def recorded_world_size(et_path: str) -> int:
    """Ranks of the default process group the trace recorded (1 when it recorded none)."""
    return _recorded(et_path)[0]


def _recorded(et_path: str, h=None) -> tuple[int, bool]:
    """(ranks of the recorded default process group, whether the trace has collectives)."""

    h = h if h is not None else read_host_trace(et_path)
    size = 1
    for r in h.pg_init_rows.tolist():
        for v in h.io(int(r))[0]["values"]:
            try:
                groups = json.loads(v) if isinstance(v, str) else []
            except ValueError:
                continue
            for g in groups if isinstance(groups, list) else []:
                if isinstance(g, dict) and str(g.get("pg_name")) == "0":
                    n = g.get("group_size") or 1
                    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                        raise ChakraError(
                            f"{et_path}: process group 0 has group_size {n!r}; expected a positive integer"
                        )
                    size = max(size, n)
    return size, any(str(n).startswith("c10d::") for n in h.names)


def replay_host(
    source,
    *,
    world_size: int | None = None,
    device: str = "cpu",
    backend: str | None = None,
    steps=None,
    select: str | None = None,
    config=None,
    threads: int = 1,
    timeout_s: float = 900,
    warmup: int = 3,
    budget_s: float = 20.0,
    target_rel_ci: float = 0.02,
    max_repeats: int = 200,
    min_repeats: int = 5,
    warmup_s: float = 1.0,
    export: str | os.PathLike | None = None,
    progress=None,
    collective_timeout_s: float = 60.0,
    host_gaps: bool = True,
):
    """Replay recorded host traces (see `host_traces`) as a benchmark; returns a ReplayResult
    whose ``step`` is the time per recorded step (the slowest rank's, ranks in lockstep).
    ``warmup_s``: untimed passes for about this long first (then ``warmup`` more inside
    `measure`). ``export``: also write the replay as a standalone benchmark script.
    ``progress(n)``: called as rank 0 takes its timed samples (see `run_ranks`). ``host_gaps``:
    also spend the original's host time that the replayed ops lack, calibrated after the warm-up
    (`host_gaps.py`; needs the Kineto trace beside each host trace; the result's ``host_gaps``
    says what each rank emulated).

    An op that fails on a rank, at any stage, is left out there and reported (the coverage's
    reasons). A collective that fails (or is not done within ``collective_timeout_s``, as when a
    peer could not start it) would leave its peers waiting: the job is started again without
    it on every rank (up to `MAX_ATTEMPTS` times), and it is reported as failed."""

    traces = host_traces(source)
    paths = [traces[r] for r in sorted(traces)]
    first = read_host_trace(paths[0]) if len(paths) == 1 else None
    lone = _recorded(paths[0], first) if len(paths) == 1 else None  # (world size, collectives?) read once
    if world_size is None:
        world_size = len(paths) if lone is None else lone[0]
        if world_size > max_ranks():
            where = f"{len(paths)} rank traces" if lone is None else "a recorded world size"
            raise ChakraError(
                f"{os.fspath(source) if not isinstance(source, (list, tuple)) else paths[0]}: {where} of "
                f"{world_size} ranks, over the limit of {max_ranks()} processes ({MAX_RANKS_ENV}); "
                "give --world-size to replay it on that many ranks anyway"
            )
    backend = backend or ("nccl" if device.startswith("cuda") else "gloo")
    cfg = vars(config) if config is not None else None
    opts: dict[str, Any] = {
        "device": device,
        "steps": list(steps) if steps is not None else None,
        "select": select,
        "config": cfg,
        "threads": threads,
        "warmup": warmup,
        "budget_s": budget_s,
        "target_rel_ci": target_rel_ci,
        "max_repeats": max_repeats,
        "min_repeats": min_repeats,
        "plan": export is not None,
        "warmup_s": warmup_s,
        "collective_timeout_s": collective_timeout_s,
        "drop_collectives": {},
        "host_gaps": bool(host_gaps),
    }
    label = os.fspath(source) if not isinstance(source, (list, tuple)) else paths[0]
    # what every rank will hold, from the traces: refused here, before any rank starts, when it does not fit
    est = memory_estimates(paths, world_size, steps, select, config, {paths[0]: first} if first else None)
    del first
    if est and not device.startswith("cuda"):  # (on GPUs each rank checks its device's free memory)
        opts["memory_limit"] = dict(enumerate(check_memory(est, label)))
    for attempt in range(MAX_ATTEMPTS + 1):
        try:
            outs = run_ranks(
                "chakra_trace.replay.job:rank_main",
                world_size,
                args=(paths, opts),
                backend=backend,
                device=device,
                timeout_s=timeout_s,
                env={"OMP_NUM_THREADS": str(threads)},
                init_group=world_size > 1 or lone is None or lone[1],
                progress=progress,
            )
            break
        except RankFailed as e:
            k = (e.payload or {}).get("collective")
            if not isinstance(k, int) or k in opts["drop_collectives"] or attempt == MAX_ATTEMPTS:
                raise
            opts["drop_collectives"][k] = f"{e.payload['reason']} (on rank {e.rank}; replayed again without it)"
    if export is not None:
        export_script(
            [o.pop("plan") for o in outs],
            export,
            name=f"replay of {os.path.basename(label)}",
            source=label,
            steps_per_run=outs[0]["steps_per_run"],
        )
    return ReplayResult.from_ranks("ops", label, device, backend, outs)


def memory_estimates(paths: list[str], world_size: int, steps=None, select=None, config=None, read=None) -> list:
    """Each rank's `memory.estimate` (rank r replays paths[r % len(paths)]) from the traces alone;
    ``read``: {path: HostTrace} already read. A trace that cannot be read is left to its rank,
    which reports it as its error (and counts as the largest of the others meanwhile)."""
    per_path = {}
    for p in dict.fromkeys(paths[r % len(paths)] for r in range(world_size)):
        try:
            h = (read or {}).get(p) or read_host_trace(p)
        except ChakraError:
            continue
        per_path[p] = estimate(h, Selection.of(h, steps, select).planned(h, config))
    if not per_path:
        return []
    worst = max(per_path.values(), key=lambda e: e.total)
    return [per_path.get(paths[r % len(paths)], worst) for r in range(world_size)]


CALIBRATION_PASSES = 5
"""`HostReplay.calibrate`'s passes (3 plain, 2 profiled)."""
PROFILED_OP_S = 5e-4
"""What the profiler adds per replayed op in a profiled pass (its events: the op and its children)."""


def calibrate_host_gaps(rep: HostReplay, sync, decide, budget: Budget, per: float) -> None:
    """`rep.calibrate` when its passes, and two timed ones after them, fit before the budget's hard
    end on every rank (they run collectives: every rank calibrates, or none); otherwise its host
    time is not emulated, and ``host_gaps_info`` says why."""
    cost = CALIBRATION_PASSES * per + 2 * len(rep.plan["ops"]) * PROFILED_OP_S
    # (every rank asks, whatever it has; the grace may be spent on it: a few passes of a small replay.
    # The estimate comes from passes on a machine that may be busier now: leave as much again, since a
    # calibration that leaves no timed pass turns an optional refinement into a failed run)
    short = decide(2 * (cost + 2 * per) > budget.hard - time.perf_counter())
    if short and rep.emulate_host_gaps and rep.kineto is not None and rep.plan["ops"]:
        rep.host_gaps_info["note"] = (
            f"host time not calibrated: its passes (about {cost:.3g} s) do not fit in what is left of the time "
            "budget (--budget-s)"
        )
        return
    rep.calibrate(sync)


def control_group(rep: HostReplay, rank: int, world_size: int):
    """The process group of the replay's own agreements (failed collectives, warm-up passes,
    samples), apart from the replayed collectives so that one a rank leaves out never pairs with
    one of them; None on one rank. A collective one rank cannot plan is left out on every rank
    here: its peers would wait for it."""
    if world_size <= 1:
        return None
    import torch.distributed as dist

    ctl = dist.new_group(backend="gloo")
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, rep.failed_collectives(), group=ctl)
    union = {k: f"{why} (on rank {r})" for r, d in enumerate(gathered) for k, why in d.items() if r != rank}
    rep.drop_collectives({k: why for k, why in union.items() if k not in rep.failed_collectives()})
    return ctl


def rank_main(rank: int, world_size: int, paths: list[str], opts: dict) -> dict:
    """One rank of `replay_host` (runs inside the process group `run_ranks` set up)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(opts["threads"]))
    path = paths[rank % len(paths)]
    device = opts["device"]
    if device.startswith("cuda"):
        device = f"cuda:{torch.cuda.current_device()}"
    cfg = ReplayConfig(**opts["config"]) if opts["config"] else None
    h = read_host_trace(path)
    budget = Budget(float(opts["budget_s"]))  # (from here on: preparing, warm-up, calibration, samples)
    rep = HostReplay(
        h,
        device=device,
        steps=opts["steps"],
        select=opts["select"],
        config=cfg,
        kineto=kineto_for(path),
        drop_collectives=opts.get("drop_collectives"),
        host_gaps=bool(opts.get("host_gaps", True)),
        memory_limit=(opts.get("memory_limit") or {}).get(rank),
        deadline=budget.hard,
    )
    rep.collective_timeout_s = float(opts.get("collective_timeout_s", 60.0))
    ctl = control_group(rep, rank, world_size)
    decide = stop_together(ctl, device="cpu") if ctl is not None else stop_together(device="cpu")

    def sync() -> None:  # samples start together and end when the slowest rank is done
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if world_size > 1:
            dist.barrier(group=ctl)

    rep.stage = "warm-up"
    warm_until = budget.start + budget.seconds / 2  # (at most half the budget before timing)
    per = rt.warm_up(rep.run_step, float(opts.get("warmup_s", 1.0)), dist, device.startswith("cuda"), ctl, warm_until)
    calibrate_host_gaps(rep, sync, decide, budget, per)
    rep.stage = "timed run"
    meter = rank_meter(rank, gpu_of(device) if device.startswith("cuda") else None)
    warmup = int(opts["warmup"])
    if decide(budget.left() < (warmup + 2) * per):  # (no room for more untimed passes: on every rank)
        warmup = 0
    m = None
    for _ in range(3):  # an op that fails in a timed pass spoils the samples before it: measure again
        before = len(rep.failures())
        got = measure(
            rep.run_step,
            name=f"rank {rank}",
            warmup=warmup,
            budget_s=budget.seconds,
            target_rel_ci=float(opts["target_rel_ci"]),
            max_repeats=int(opts["max_repeats"]),
            min_repeats=int(opts["min_repeats"]),
            sync=sync,
            decide=decide,
            on_sample=progress_reporter(),
            meter=meter,
            origin=budget.start,
            deadline=budget.hard,
        )
        m = got if got.n or m is None else m  # (a measurement cut to nothing keeps the one before)
        if not decide(len(rep.failures()) == before or budget.left() <= 0):  # (every rank measures as often)
            continue
        break
    assert m is not None
    if not m.n:
        raise BudgetSpent(
            f"{path}: no timed pass of the replay finished within the time budget of {budget.seconds:g} s "
            f"(and {budget.grace:g} s of grace): one pass takes about {per:.3g} s{slowest_text(rep.slowest)}; "
            "give a larger budget (--budget-s) or replay fewer ops (--select, --steps)"
        )
    if rep.slowest and rep.slowest[0] > budget.seconds:
        m.note = "; ".join(x for x in (m.note, slowest_text(rep.slowest)[2:] + ", more than the budget") if x)
    m.env = environment(device)
    recorded = rep.recorded_step_s()
    out = {
        "trace": path,
        "measurement": m.to_dict(),
        "steps_per_run": rep.steps_per_run,
        "steps": rep.steps,
        "coverage": {**rep.coverage.to_dict(), "waits": rep.waits},
        "recorded_step_s": recorded,
        "recorded_basis": rep.recorded_basis,
        "host_gaps": rep.host_gaps_info,
    }
    if opts.get("plan"):
        out["plan"] = rep.plan
    return out
