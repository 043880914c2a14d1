"""A synthetic fleet: many different training jobs, made in seconds, for studying a fleet of
traces (representative subsets: `analyze.select`) without a cluster's worth of recordings.

Each job is drawn from one family with its own seeded parameters: data-parallel training steps
(`patterns.training_step`, sometimes with compute sped up or gradients compressed by
`transforms`), FSDP-like steps (all-gather before each layer, reduce-scatter after its
backward), mixture-of-experts steps (all-to-all around each expert block), GPipe-like pipelines
(sends and receives between stages, replicated by `scale.data_parallel`), lone collectives
(`patterns.collective`: the microbenchmarks a fleet also runs) and, given captured master
traces, `parallel.parallelize` plans (TP x PP x DP on 64 ranks, ZeRO stages, sequence
parallelism) timed on a device preset by `transforms.on_device`.

Every job has a power-of-two rank count up to 64, and its communicators either span every rank
or, for parallelized plans, fill exactly 64: so each job runs on a 64-NPU system preset
(`simulate.presets`, `torus-8x8`, `dgx-8x8`), scaled out data-parallel where it has fewer
ranks. Job i depends only on (seed, i): the first 100 jobs of a fleet of 1,000 are the fleet of
100 with the same seed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..io.workload import Workload
from ..schema.builder import TraceBuilder
from ..schema.trace import Trace
from .parallel import Plan, parallelize
from .patterns import collective, training_step
from .scale import data_parallel
from .transforms import on_device, scale_collectives, speed_up_compute

#: families and how often each is drawn (parallel only when master traces are given)
FAMILY_WEIGHTS = {"ddp": 0.3, "fsdp": 0.2, "moe": 0.15, "pipeline": 0.15, "collective": 0.05, "parallel": 0.15}
NPUS = 64  # the largest job; every job's ranks divide it
_DEVICES = ("v100", "a100", "h100")


@dataclass
class FleetJob:
    """One job of a synthetic fleet: its name, family, the parameters it was drawn with, and
    its workload."""

    name: str
    family: str
    params: dict[str, Any]
    workload: Workload = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "ranks": len(self.workload), "params": self.params}


def synthetic_fleet(n: int, seed: int = 0, masters: Sequence[Trace] = ()) -> Iterator[FleetJob]:
    """Yield `n` jobs (see the module docstring), lazily: a caller that computes features or
    simulates job by job holds one workload at a time. `masters`: captured master traces
    (`chakra capture`) for the `parallel` family; without them that family is not drawn."""
    families = [f for f in FAMILY_WEIGHTS if masters or f != "parallel"]
    p = np.array([FAMILY_WEIGHTS[f] for f in families])
    p /= p.sum()
    plans: dict[tuple[int, Plan], Workload] = {}  # (master, plan) -> parallelized, shared by jobs
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        family = families[int(rng.choice(len(families), p=p))]
        params, workload = _MAKERS[family](rng, masters, plans)
        yield FleetJob(f"{family}-{i:05d}", family, params, workload)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _npus(rng: np.random.Generator, lo: int = 2) -> int:
    choices = [2**e for e in range(lo.bit_length() - 1, NPUS.bit_length())]
    return int(rng.choice(choices))


def _ddp(rng, masters, plans) -> tuple[dict, Workload]:
    prm: dict[str, Any] = {
        "npus": _npus(rng),
        "layers": int(rng.integers(4, 65)),
        "comp_us": int(_log_uniform(rng, 10, 2000)),
        "bytes": int(_log_uniform(rng, 2**16, 2**28)),
    }
    w = training_step(prm["npus"], prm["layers"], prm["comp_us"], prm["bytes"])
    if rng.random() < 0.5:
        prm["speedup"] = round(_log_uniform(rng, 1, 4), 2)
        w = speed_up_compute(w, prm["speedup"])
    if rng.random() < 0.3:
        prm["compression"] = float(rng.choice([0.25, 0.5]))
        w = scale_collectives(w, prm["compression"])
    return prm, w


def _fsdp(rng, masters, plans) -> tuple[dict, Workload]:
    """Per layer: all-gather its parameters, then forward; backward in reverse: all-gather again,
    backward (2 x forward), reduce-scatter its gradients."""
    prm: dict[str, Any] = {
        "npus": _npus(rng),
        "layers": int(rng.integers(4, 49)),
        "comp_us": int(_log_uniform(rng, 20, 3000)),
        "bytes": int(_log_uniform(rng, 2**18, 2**28)),
    }
    b = TraceBuilder()
    prev: list[int] = []
    for i in range(prm["layers"]):
        ag = b.collective("ALL_GATHER", prm["bytes"], name=f"ag_fwd{i}", deps=prev)
        prev = [b.comp(f"fwd{i}", prm["comp_us"], deps=[ag, *prev])]
    for i in reversed(range(prm["layers"])):
        ag = b.collective("ALL_GATHER", prm["bytes"], name=f"ag_bwd{i}", deps=prev)
        prev = [b.comp(f"bwd{i}", 2 * prm["comp_us"], deps=[ag, *prev])]
        b.collective("REDUCE_SCATTER", prm["bytes"], name=f"rs{i}", deps=prev)
    t = b.build()
    return prm, Workload(dict.fromkeys(range(prm["npus"]), t))


def _moe(rng, masters, plans) -> tuple[dict, Workload]:
    """Per layer: attention, all-to-all (dispatch), experts, all-to-all (combine); backward the
    same in reverse at 2 x compute; the dense gradients all-reduced at the end."""
    prm: dict[str, Any] = {
        "npus": _npus(rng, 4),
        "layers": int(rng.integers(2, 33)),
        "attn_us": int(_log_uniform(rng, 20, 1000)),
        "expert_us": int(_log_uniform(rng, 20, 2000)),
        "tokens_bytes": int(_log_uniform(rng, 2**16, 2**26)),
        "dense_bytes": int(_log_uniform(rng, 2**20, 2**28)),
    }
    b = TraceBuilder()
    prev: list[int] = []
    for phase, scale in (("fwd", 1), ("bwd", 2)):
        layers = range(prm["layers"]) if phase == "fwd" else reversed(range(prm["layers"]))
        for i in layers:
            x = b.comp(f"{phase}_attn{i}", scale * prm["attn_us"], deps=prev)
            x = b.collective("ALL_TO_ALL", prm["tokens_bytes"], name=f"{phase}_dispatch{i}", deps=[x])
            x = b.comp(f"{phase}_experts{i}", scale * prm["expert_us"], deps=[x])
            prev = [b.collective("ALL_TO_ALL", prm["tokens_bytes"], name=f"{phase}_combine{i}", deps=[x])]
    b.collective("ALL_REDUCE", prm["dense_bytes"], name="dense_grads", deps=prev)
    t = b.build()
    return prm, Workload(dict.fromkeys(range(prm["npus"]), t))


def _pipeline(rng, masters, plans) -> tuple[dict, Workload]:
    """GPipe: every micro-batch's forward through the stages (receive, compute, send), then every
    backward in reverse (2 x compute); then the gradients all-reduced over every rank. Replicated
    data-parallel to `replicas` x `stages` ranks."""
    stages = int(rng.choice([2, 4, 8]))
    prm: dict[str, Any] = {
        "stages": stages,
        "replicas": int(rng.choice([r for r in (1, 2, 4, 8) if r * stages <= NPUS])),
        "micro_batches": int(rng.integers(2, 17)),
        "comp_us": int(_log_uniform(rng, 20, 2000)),
        "act_bytes": int(_log_uniform(rng, 2**16, 2**26)),
        "grad_bytes": int(_log_uniform(rng, 2**20, 2**28)),
    }
    m = prm["micro_batches"]
    traces = {}
    for s in range(stages):
        b = TraceBuilder()
        prev: list[int] = []
        for mb in range(m):
            deps = [b.recv(s - 1, prm["act_bytes"], tag=mb, deps=prev)] if s > 0 else prev
            prev = [b.comp(f"fwd{mb}", prm["comp_us"], deps=deps)]
            if s < stages - 1:
                b.send(s + 1, prm["act_bytes"], tag=mb, deps=prev)
        for mb in reversed(range(m)):
            deps = [b.recv(s + 1, prm["act_bytes"], tag=m + mb, deps=prev)] if s < stages - 1 else prev
            prev = [b.comp(f"bwd{mb}", 2 * prm["comp_us"], deps=deps)]
            if s > 0:
                b.send(s - 1, prm["act_bytes"], tag=m + mb, deps=prev)
        b.collective("ALL_REDUCE", prm["grad_bytes"], name="grads", deps=prev)
        traces[s] = b.build()
    w = Workload(traces)
    return prm, data_parallel(w, stages * prm["replicas"]) if prm["replicas"] > 1 else w


def _collective(rng, masters, plans) -> tuple[dict, Workload]:
    prm: dict[str, Any] = {
        "npus": _npus(rng),
        "type": str(rng.choice(["ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"])),
        "bytes": int(_log_uniform(rng, 2**10, 2**30)),
    }
    return prm, collective(prm["npus"], prm["type"], prm["bytes"])


def _parallel(rng, masters, plans) -> tuple[dict, Workload]:
    """A plan of one of the masters on 64 ranks, or data parallelism alone on fewer, timed at a
    device's roofline with a drawn kernel efficiency."""
    which = int(rng.integers(len(masters)))
    tp = int(rng.choice([1, 2, 4, 8]))
    pp = int(rng.choice([1, 2]))
    dp = NPUS // (tp * pp) if rng.random() < 0.7 else int(rng.choice([2, 4, 8, 16]))
    if tp == 1 and pp == 1:
        dp = max(dp, 2)
    zero = int(rng.choice([0, 1, 2, 3])) if dp > 1 and pp == 1 else 0
    sp = bool(tp > 1 and rng.random() < 0.5)
    if tp * pp * dp != NPUS:  # fewer ranks: data parallelism alone scales out on any system
        tp, pp, sp = 1, 1, False
    plan = Plan(tp=tp, pp=pp, dp=dp, zero=zero, sp=sp, micro_batches=2 * pp if pp > 1 else None)
    prm: dict[str, Any] = {
        "master": which,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "zero": zero,
        "sp": sp,
        "device": str(rng.choice(_DEVICES)),
        "efficiency": round(float(rng.uniform(0.3, 0.7)), 2),
    }
    key = (which, plan)
    if key not in plans:
        plans[key] = parallelize(masters[which], plan)
    return prm, on_device(plans[key], prm["device"], prm["efficiency"])


_MAKERS = {
    "ddp": _ddp,
    "fsdp": _fsdp,
    "moe": _moe,
    "pipeline": _pipeline,
    "collective": _collective,
    "parallel": _parallel,
}

__all__ = ["FAMILY_WEIGHTS", "FleetJob", "synthetic_fleet"]
