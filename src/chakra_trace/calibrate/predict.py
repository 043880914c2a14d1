"""`predict()`: a job's step time on a calibrated system, with a band.

The job (recorded, or synthesized: a capture rescaled to another batch, a recording scaled out
data-parallel to more ranks) is costed with the profile: compute nodes by what the job's own ops
take when replayed here, unprofiled (``compute="replay"``, `replayed.py`; the default for a
recording), by the measured compute model (``"model"``), or as recorded; collectives on the
fitted network (``comm="network"``) or by the fitted alpha-beta line of their type and group
size (``comm="table"``: the simulator's `recorded` mode on those times, no recorded waits). The
band is two more simulations at the low and high ends of the calibration: the network
slower/faster by the fits' median residual, the replayed times at the ends of their 95% CI
(the model's per-op time at the ends of its CI). It says how uncertain the measurements are, not
how wrong the model may be (`benchmarks/predict_bench.py` measures that)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload, sniff
from ..replay.job import host_traces, max_ranks
from ..schema.enums import TIME_ORIGIN, Attr, NodeType, collective_name
from ..schema.resources import host_gap_mask
from ..schema.trace import Trace
from ..simulate import simulate
from ..synthesize.scale import data_parallel
from ..synthesize.transforms import rescale
from .fit import AlphaBeta
from .profile import SystemProfile
from .replayed import RankTiming, node_ns, replay_times

COMPUTE_MODES = ("auto", "replay", "model", "recorded")
COMM_MODES = ("network", "table", "replay")


@dataclass(frozen=True)
class Prediction:
    step_ms: float
    low_ms: float
    high_ms: float
    ranks: int
    steps: int  # recorded steps the simulated span holds
    compute: str
    comm: str
    detail: dict = field(default_factory=dict)

    @property
    def band_ms(self) -> list[float]:
        return [self.low_ms, self.high_ms]

    def to_dict(self) -> dict:
        return {
            "step_ms": self.step_ms,
            "band_ms": self.band_ms,
            "ranks": self.ranks,
            "steps": self.steps,
            "compute": self.compute,
            "comm": self.comm,
            **self.detail,
        }


def _rounded_us(ns: np.ndarray) -> np.ndarray:
    """ns as whole µs (the trace's unit) whose running sum stays within 1 µs of the exact one,
    so that thousands of ops of a few µs each are not all rounded the same way."""
    cum = np.rint(np.cumsum(ns) / 1000.0)
    return np.diff(np.r_[0.0, cum]).clip(0).astype(np.uint64)


def _without_origin(t: Trace) -> None:
    keep = [a for a in t.metadata.attr if a.name != TIME_ORIGIN]
    del t.metadata.attr[:]
    t.metadata.attr.extend(keep)


def _costed(
    wl: Workload,
    profile: SystemProfile,
    compute: str,
    comm: str,
    op_ns: float,
    cscale: float,
    nscale: float,
    replayed: dict[int, tuple[np.ndarray, np.ndarray, float]] | None = None,
) -> tuple[Workload, dict[int, dict]]:
    """A copy of the job with the profile's times in its nodes, and per rank what its compute
    nodes sum to (µs: ``replayed`` from the replay, ``model`` from the compute model).
    ``replayed``: {rank: (ns per node, mask of the nodes the replay timed, scale)} (`node_ns`)."""
    out: dict[int, Trace] = {}
    sums: dict[int, dict] = {}
    done: dict = {}
    n = len(wl)
    members = wl.all_groups() if comm == "table" else {}  # (once: `group_ranks` per row read every trace)
    for r, t in wl.traces.items():
        if comm == "network" and compute == "recorded":
            out[r] = t
            continue
        rep = replayed[r] if replayed is not None else None
        key: tuple = (id(t), id(rep[0]) if rep else 0, rep[2] if rep else 0.0)
        if comm == "table":
            key = (-1 - r,)  # (a group's size may depend on the rank)
        if key in done:
            out[r], sums[r] = done[key]
            continue
        c = t.copy()
        comp = c.types == NodeType.COMP_NODE
        hit = np.zeros(len(c), bool)
        if compute in ("model", "replay"):
            ns = profile.compute.node_ns(c, op_ns, cscale)
            if rep is not None:
                rns, hit, scale = rep
                gap = host_gap_mask(c)
                ns = np.where(hit, rns * scale, np.where(gap, 0.0, ns))
            c.duration[comp] = _rounded_us(ns[comp])
        if comm == "table":
            c.duration[:] = _table_us(c, wl, profile, n, nscale, members)
        if comm in ("table", "replay"):
            c.start[:] = 0  # no recorded waits: every node starts as its dependencies end
            _without_origin(c)
        dur = c.duration.astype(np.int64)
        s = {"replayed_us": int(dur[comp & hit].sum()), "model_us": int(dur[comp & ~hit].sum())}
        done[key] = (c, s)
        out[r], sums[r] = c, s
    return Workload(out, dict(wl.groups)), sums


def _table_us(
    t: Trace, wl: Workload, profile: SystemProfile, n: int, scale: float, members: dict[str, list[int]]
) -> np.ndarray:
    """Durations with each collective and send/receive at its fitted alpha-beta time.
    `members`: `wl.all_groups()`; fits are looked up once per (collective, group size)."""
    dur = t.duration.copy()
    coll = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    p2p = np.flatnonzero((t.types == NodeType.COMM_SEND_NODE) | (t.types == NodeType.COMM_RECV_NODE))
    has_pg = t.has(Attr.PG_NAME)
    fits: dict[tuple[str, int], AlphaBeta | None] = {}
    for r in coll:
        size = n
        if has_pg[r]:
            name = t.groups[int(t.pg_name[r])]
            size = len(members[name] if name in members else wl.group_ranks(name)) or n
        kind = collective_name(int(t.comm_type[r])).lower()
        if (kind, size) not in fits:
            fits[(kind, size)] = profile.fit(kind, size)
        f = fits[(kind, size)]
        if f is None:
            continue  # not measured: as recorded
        dur[r] = int(round(float(f.predict_ns(float(t.comm_size[r]))) * scale / 1000))
    f = profile.fit("broadcast", 2)  # a point-to-point message: one root, one receiver
    if f is not None and p2p.size:
        dur[p2p] = np.rint(f.predict_ns(t.comm_size[p2p].astype(float)) * scale / 1000).astype(np.uint64)
    return dur


def prepare(job, *, ranks: int | None = None, batch: int | None = None) -> Workload:
    """The job as it would run: a capture rescaled to `batch`, scaled out to `ranks`."""
    wl = Workload.open(job) if isinstance(job, (str, os.PathLike)) else Workload.of(job)
    if batch is not None:
        try:
            wl = rescale(wl, batch=batch)
        except ChakraError as e:
            raise ChakraError(
                f"--batch needs a master trace captured with shape rules (`chakra capture --shape-rules`): {e}"
            ) from None
    if ranks is not None and ranks != len(wl):
        wl = data_parallel(wl, ranks)
    return wl


def recorded_steps(wl: Workload) -> int:
    """How many training steps each trace holds (its recorded step bounds; 1 without)."""
    for t in wl.traces.values():
        b = t.step_bounds_us
        if b is not None and len(b) > 1:
            return len(b) - 1
    return 1


def replayable(job) -> bool:
    """Whether `job` names host traces that `compute="replay"` can replay (a `chakra collect`
    folder or host trace files), as opposed to converted traces or a job in memory."""
    if not isinstance(job, (str, os.PathLike)):
        return False
    try:
        traces = host_traces(job)
    except ChakraError:
        return False
    return all(sniff(p) == "pytorch-host" for p in traces.values())


def predict(
    job,
    profile: SystemProfile | str | os.PathLike,
    *,
    ranks: int | None = None,
    batch: int | None = None,
    compute: str = "auto",
    comm: str = "network",
    replay_budget_s: float = 4.0,
    use_cache: bool = True,
    refresh: bool = False,
    say=None,
    progress=None,
) -> Prediction:
    """Step time (ms) of `job` on the calibrated system, with the band of the measurements.

    ``compute``: "replay" times the job's ops by replaying its host traces here, on the rank
    count predicted for (`replayed.replay_times`, cached beside the traces; more ranks than
    `replay.job.max_ranks()` replay at the recorded count); "model" the profile's compute
    model; "recorded" the recorded durations; "auto" is "replay" for a recording that can be
    replayed (`replayable`, no ``batch``) and "model" otherwise. ``replay_budget_s``: seconds
    of timed passes per replay; ``use_cache``/``refresh``: read the kept timing / replay again;
    ``progress(n)``: the replay's timed passes so far (rank 0's)."""
    if compute not in COMPUTE_MODES or comm not in COMM_MODES:
        raise ChakraError(f"predict: compute is one of {COMPUTE_MODES}, comm one of {COMM_MODES}")
    if not isinstance(profile, SystemProfile):
        profile = SystemProfile.load(profile)
    if compute == "auto":
        compute = "replay" if batch is None and replayable(job) else "model"
    if batch is not None and compute in ("recorded", "replay"):
        raise ChakraError(f"predict: a rescaled job has no {compute} durations; use the compute model")
    if comm == "replay" and compute != "replay":
        raise ChakraError("predict: comm='replay' (the waits the replay measured) needs compute='replay'")
    if compute == "replay" and not replayable(job):
        raise ChakraError(
            "predict: compute='replay' needs the job's PyTorch host traces (a `chakra collect` folder "
            "or rank<r>.et.json[.gz] files); use compute='model'"
        )
    base = prepare(job, batch=batch)
    wl = prepare(base, ranks=ranks)
    n = len(wl)
    steps = recorded_steps(wl)
    detail: dict = {"profile_backend": profile.backend, "profile_ranks": profile.nearest_ranks(n)}
    replayed = None
    rel = {r: (1.0, 1.0) for r in wl.traces}
    if compute == "replay":
        world = n if n <= max_ranks() else len(base)
        timings = replay_times(
            job, world, budget_s=replay_budget_s, use_cache=use_cache, refresh=refresh, say=say, progress=progress
        )
        replayed = {}
        per_rank = []
        for r, t in wl.traces.items():
            tm: RankTiming = timings[r % len(timings)]
            ns, hit, lost = node_ns(t, tm, waits=comm == "replay")
            replayed[r] = (ns, hit, 1.0)
            rel[r] = tm.rel_ci
            per_rank.append(
                {
                    "rank": r,
                    "replayed_ms_per_step": tm.total_ns / tm.steps / 1e6,
                    "ci_ms_per_step": [x / tm.steps / 1e6 for x in tm.ci_ns],
                    "host_time_ms_per_step": tm.host_ns / tm.steps / 1e6,
                    "waited_ms_per_step": tm.wait_ns / tm.steps / 1e6,
                    "unplaced_ms_per_step": lost / tm.steps / 1e6,
                    "passes": len(tm.pass_ns),
                }
            )
        detail["replay"] = {"ranks": world, "per_rank": per_rank}
    spread = profile.spread
    ci = profile.compute.op_ci_ns
    op = profile.compute.op_ns
    ends = {
        "point": (op, 1.0, 1.0, 0),
        "low": (min(ci[0], op) if ci else op, 1.0 - spread["compute"], 1.0 - spread["comm"], 0),
        "high": (max(ci[1], op) if ci else op, 1.0 + spread["compute"], 1.0 + spread["comm"], 1),
    }
    got = {}
    for name, (op_ns, cscale, nscale, side) in ends.items():
        rep = None
        if replayed is not None:
            rep = {r: (ns, hit, 1.0 if name == "point" else rel[r][side]) for r, (ns, hit, _) in replayed.items()}
        costed, sums = _costed(wl, profile, compute, comm, op_ns, cscale, nscale, rep)
        if comm == "network":
            res = simulate(costed, profile.network(n, nscale), profile.system())
        elif comm == "replay":  # (the collectives' cost is in the waits the replay measured)
            res = simulate(costed, profile.network(n), profile.system(), comm="ideal")
        else:
            res = simulate(costed, profile.network(n), profile.system(), comm="recorded")
        got[name] = res.recording_ns / steps / 1e6
        if name == "point":
            detail["compute_ms"] = [float(x) / 1e6 for x in res.compute_ns]
            detail["node_compute_ms"] = [
                (sums[r]["replayed_us"] + sums[r]["model_us"]) / 1e3 if r in sums else None for r in sorted(wl.traces)
            ]
            detail["replayed_compute_ms"] = [
                sums[r]["replayed_us"] / 1e3 if r in sums else 0.0 for r in sorted(wl.traces)
            ]
            detail["exposed_comm_ms"] = [float(x) / 1e6 for x in res.exposed_comm_ns]
    point = got["point"]
    return Prediction(point, min(got.values()), max(got.values()), n, steps, compute, comm, detail)
