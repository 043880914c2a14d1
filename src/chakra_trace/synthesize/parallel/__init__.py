"""Parallelization: a captured master trace (one logical device) -> one trace per rank of a
TP x CP x PP x DP (x EP) plan, with communicator groups (`parallelize`).

The rules, each in its module: rank order and groups (`plan`), which ops run where and how
tensor parallelism divides them (`layout`), pipeline schedules (`pp`), DDP buckets and FSDP units
(`dp`), the per-stage program with its collectives and sends (`build`). Sizes:

- the master trace's batch is one data-parallel replica's batch; with pipeline parallelism it is
  split into M micro-batches, each op's FLOPs and bytes shared exactly among them (the shares sum
  to the master's value);
- TP all-reduce (Megatron): batch x seq x hidden x dtype bytes per micro-batch (comm_size, the
  bytes each rank holds), after every row-parallel linear in forward and after every group of
  column-parallel linears' input gradient in backward: 2 per layer per direction; with sequence
  parallelism each becomes a reduce-scatter (comm_size: those bytes) and an all-gather
  (comm_size: bytes / tp, its input). Vocab-parallel embedding: one all-reduce of its output in
  forward; LM head: one of its input gradient in backward; the cross entropy: three all-reduces
  of 4 bytes per token (max logit, target logit, sum of exponentials), Megatron's reductions;
- PP send/receive: the layer output (micro-batch x seq x hidden x dtype; / tp with sequence
  parallelism), tag m in forward and M + m in backward for micro-batch m;
- EP all-to-all (a mixture of experts' token dispatch and combine, and their gradients): see
  `layout`;
- CP (context parallelism): every rank holds seq / cp tokens of each sequence, so the sizes above
  and the work divide by cp; attention's K/V exchange (Transformer Engine's ring, or Llama 3's
  all-gather): see `cp`;
- DP: see `dp`;
- activation recomputation (`Plan.recompute`): before each micro-batch's backward of a layer,
  its forward ops run again ("full") or only its core attention ("selective": the ops of a
  module named `core_attention`, none where that is a fused attention op, which recomputes
  inside its own backward) -- phase "recompute", their TP/EP collectives with them -- and the
  backward reads their results; their FLOPs are counted apart (`recompute_flops`).

Durations are left to the simulator's device model: every compute node keeps num_ops and
tensor_size and says duration_unknown; node shapes are dropped (they describe the unsplit op).
Ranks that differ only by their TP rank, CP rank or DP replica run one program: their traces share every
column but their communicator ids and peers.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ...io.workload import Workload
from ...schema.trace import Trace
from .build import DP, EDP, EP, TP, StageBuilder, StageStats, rank_trace
from .cp import CP
from .cp import rank_trace as cp_rank_trace
from .layout import layout
from .master import FWD, OPT, ParallelizeError, read_master
from .plan import CP_COMM, RECOMPUTE, SCHEDULES, Plan

SCHEMA = "chakra-trace parallelize 1"


@dataclass
class Parallelized:
    """The per-rank workload and what each stage holds (every rank of a stage alike)."""

    workload: Workload
    plan: Plan
    stages: list[StageStats]
    master_flops: int
    master_flops_by_phase: dict[str, int] = field(default_factory=dict)
    master_expert_optimizer_flops: int = 0  # of the optimizer's, on a mixture's experts

    def stage_of(self, rank: int) -> int:
        return self.plan.coords(rank)[1]

    @property
    def total_flops(self) -> int:
        """FLOPs over every rank."""
        return sum(s.flops for s in self.stages) * self.plan.tp * self.plan.dp_cp

    @property
    def recompute_flops(self) -> int:
        """Of total_flops, the recomputed forwards'."""
        return sum(s.recompute_flops for s in self.stages) * self.plan.tp * self.plan.dp_cp

    def to_dict(self) -> dict:
        plan = self.plan
        fb = self.master_flops - self.master_flops_by_phase.get("optimizer", 0)
        opt = self.master_flops_by_phase.get("optimizer", 0) - self.master_expert_optimizer_flops
        expert_opt = self.master_expert_optimizer_flops
        # the optimizer once per replica and CP rank (experts': per expert-DP replica), or once in all
        # under ZeRO/FSDP
        expected = plan.dp * fb + (opt + expert_opt if plan.zero else plan.dp_cp * opt + plan.edp * expert_opt)
        return {
            "plan": {**asdict(plan), "micro_batches": plan.m, "ranks": plan.ranks},
            "ranks": plan.ranks,
            "groups": len(self.workload.groups),
            "master_flops": self.master_flops,
            "total_flops": self.total_flops,
            "recompute_flops": self.recompute_flops,
            # beyond dp x the master's work (the optimizer as `expected` counts it) and recomputation
            "redundant_flops": self.total_flops - expected - self.recompute_flops,
            "stages": [
                {
                    "stage": p,
                    "ranks": [
                        plan.rank(t, p, d, c) for d in range(plan.dp) for c in range(plan.cp) for t in range(plan.tp)
                    ],
                    **asdict(s),
                }
                for p, s in enumerate(self.stages)
            ],
        }


def parallelize(master: Trace, plan: Plan) -> Workload:
    """The per-rank traces of `plan` from a captured master trace (see the module docstring)."""
    return parallelize_detailed(master, plan).workload


def parallelize_detailed(master: Trace, plan: Plan, progress: Callable[[int, int], None] | None = None) -> Parallelized:
    """`parallelize`, with what was made (per stage, FLOPs). `progress(done, total)`: after each
    pipeline stage is built and each rank's trace made (stages + ranks in all)."""
    enabled = gc.isenabled()
    gc.disable()  # millions of node objects, none in a cycle: collections would only rescan them (half the time)
    try:
        return _parallelize(master, plan, progress or (lambda done, total: None))
    finally:
        if enabled:
            gc.enable()


def _parallelize(master: Trace, plan: Plan, progress: Callable[[int, int], None]) -> Parallelized:
    m = read_master(master)
    if plan.dp_cp > 1 and not m.params:
        raise ParallelizeError(
            "data parallelism needs the master trace's parameters (sizes, gradient producers), which this "
            "trace does not list: capture it again with this version of `chakra capture`"
        )
    if m.batch % plan.m:
        raise ParallelizeError(f"the batch of {m.batch} does not split into {plan.m} micro-batches")
    lay = layout(m, plan)
    about = {"schema": SCHEMA, "plan": json.dumps({**plan.fields(), "micro_batches": plan.m}, sort_keys=True)}
    for a in master.metadata.attr:
        if a.name == "capture":
            about["capture"] = a.string_val
    templates: list[Trace] = []
    stats: list[StageStats] = []
    for p in range(plan.pp):
        sb = StageBuilder(lay, p, {**about, "stage": p})
        templates.append(sb.build())
        stats.append(sb.stats)
        progress(p + 1, plan.pp + plan.ranks)
    traces: dict[int, Trace] = {}
    for d in range(plan.dp):
        for p in range(plan.pp):
            for c in range(plan.cp):
                for t in range(plan.tp):
                    names = {
                        TP: plan.tp_group(p, d, c),
                        DP: plan.dp_group(t, p),
                        EP: plan.ep_group(t, p, d),
                        EDP: plan.edp_group(t, p, d),
                    }
                    if plan.cp == 1:
                        traces[plan.rank(t, p, d)] = rank_trace(templates[p], names, t + plan.tp * plan.pp * d, plan.tp)
                    else:
                        names[CP] = plan.cp_group(t, p, d)
                        traces[plan.rank(t, p, d, c)] = cp_rank_trace(templates[p], names, plan, t, p, d, c)
                    progress(plan.pp + len(traces), plan.pp + plan.ranks)
    by_phase = {"forward": 0, "backward": 0, "optimizer": 0}
    expert_opt = 0
    for ph, v, ex in zip(m.phase.tolist(), m.num_ops, lay.expert.tolist()):
        by_phase[("forward", "backward", "optimizer")[ph]] += v
        expert_opt += v if ph == OPT and ex else 0
    return Parallelized(
        workload=Workload(dict(sorted(traces.items())), plan.groups()),
        plan=plan,
        stages=stats,
        master_flops=sum(m.num_ops),
        master_flops_by_phase=by_phase,
        master_expert_optimizer_flops=expert_opt,
    )


__all__ = [
    "parallelize",
    "parallelize_detailed",
    "Parallelized",
    "Plan",
    "ParallelizeError",
    "SCHEDULES",
    "RECOMPUTE",
    "CP_COMM",
    "FWD",
    "OPT",
]
