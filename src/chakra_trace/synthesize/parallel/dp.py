"""Data-parallel gradient synchronization of one pipeline stage.

DDP (zero 0): gradients are all-reduced in buckets, as torch's DistributedDataParallel does in
steady state. After its first iteration DDP rebuilds its buckets in the order the gradients
became ready in backward (`Reducer::rebuild_buckets`): parameters are taken in that order (the
order their post-accumulate-grad hooks fired, which the capture records), a bucket closes once it
holds at least its cap, the first cap being `first_bucket_bytes` (1 MiB when bucket_cap_mb is the
default 25, else the cap itself) and the others `bucket_bytes`; buckets hold one dtype each. A
bucket's all-reduce (comm_size: its bytes) waits for the ops that wrote its gradients in the last
micro-batch (earlier micro-batches accumulate, as under `no_sync`), so it overlaps the rest of the
backward; an optimizer op waits for the buckets holding its module's parameters. Parameters split
by tensor parallelism count their shard (bytes / tp).

ZeRO-1 and ZeRO-2 (zero 1, 2; DeepSpeed's stages, Megatron's distributed optimizer): DDP's buckets,
all-reduced (1) or reduce-scattered (2; comm_size: the bucket's bytes); each rank runs the
optimizer on its 1/dp of the parameters (FLOPs and bytes / dp), then every bucket's updated
parameters are all-gathered (comm_size: the shard each rank holds, ceil(bytes / dp)) once the
optimizer ops of its modules ran.

Expert parallelism: a mixture's expert parameters are bucketed apart from the others (in the same
order, with the same caps), each rank's share of them (bytes / ep), and synchronized over the
expert-data-parallel group (the dp / ep replicas holding the same experts; none when that is
one); ZeRO shards their optimizer over it (the optimizer's FLOPs and bytes / ep / (dp / ep)).

FSDP (zero 3): a unit per layer plus one for everything else. Per micro-batch, a unit's parameters
are all-gathered before its forward and again before its backward (comm_size: the shard each rank
holds, ceil(bytes / dp)), the next unit's gather issued when the previous unit starts (one unit
of prefetch), and its gradients reduce-scattered (comm_size: the whole unit's bytes) once its
backward wrote them; the optimizer works on the shard (FLOPs and bytes / dp).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .layout import Layout
from .master import layer_path


@dataclass
class Bucket:
    nbytes: int = 0
    producers: list[int] = field(default_factory=list)  # master rows that write its gradients
    modules: set[str] = field(default_factory=set)
    params: list[str] = field(default_factory=list)


def stage_params(lay: Layout, stage: int):
    return [p for p in lay.master.params if p.producer >= 0 and lay.stage_of_param(p) == stage]


def rank_grad_bytes(lay: Layout, p) -> int:
    """Bytes of parameter ``p``'s gradient on one rank: split as TP splits it, experts over ep."""
    return p.nbytes // lay.param_div.get(p.name, 1) // (lay.plan.ep if lay.is_expert_param(p) else 1)


def buckets(lay: Layout, stage: int, experts: bool = False) -> list[Bucket]:
    """The stage's DDP buckets of its experts' parameters or of the others, in all-reduce order
    (see the module docstring)."""
    plan = lay.plan
    params = sorted(
        (p for p in stage_params(lay, stage) if lay.is_expert_param(p) == experts), key=lambda p: (p.ready, p.producer)
    )
    limits = [plan.first_bucket_bytes]
    open_: dict[int, Bucket] = {}  # dtype itemsize -> the bucket being filled
    level: dict[int, int] = {}
    done: list[Bucket] = []
    for p in params:
        b = open_.setdefault(p.itemsize, Bucket())
        b.nbytes += rank_grad_bytes(lay, p)
        b.producers.append(p.producer)
        b.modules.add(p.module)
        b.params.append(p.name)
        cap = limits[0] if level.get(p.itemsize, 0) == 0 else plan.bucket_bytes
        if b.nbytes >= cap:
            done.append(open_.pop(p.itemsize))
            level[p.itemsize] = level.get(p.itemsize, 0) + 1
    done.extend(b for b in open_.values() if b.params)
    return done


@dataclass
class Units:
    """FSDP units of a stage: which unit each master row and module belongs to, each unit's
    parameter bytes, and the rows after which its gradients are complete."""

    of_row: dict[int, str]
    size: dict[str, int]
    dp: int
    producers: dict[str, list[int]]
    rs_after: dict[int, list[str]]

    def unit_of(self, row: int) -> str | None:
        return self.of_row.get(row)

    def unit_of_module(self, module: str) -> str | None:
        u = layer_path(module) or "rest"
        return u if u in self.size else None

    def gather_size(self, unit: str) -> int:
        return -(-self.size[unit] // self.dp)


def fsdp_units(lay: Layout, stage: int) -> Units:
    m = lay.master
    size: dict[str, int] = {}
    producers: dict[str, list[int]] = {}
    for p in stage_params(lay, stage):
        u = layer_path(p.module) or "rest"
        size[u] = size.get(u, 0) + p.nbytes // lay.param_div.get(p.name, 1)
        producers.setdefault(u, []).append(p.producer)
    of_row = {}
    for r in range(len(m)):
        u = layer_path(m.module[r]) or "rest"
        if u in size:
            of_row[r] = u
    rs_after: dict[int, list[str]] = {}
    for u, prods in producers.items():
        rs_after.setdefault(max(prods), []).append(u)
    return Units(of_row, size, lay.plan.dp_cp, producers, rs_after)


__all__ = ["Bucket", "buckets", "fsdp_units", "Units"]
