"""A parallelism plan and the ranks and communicator groups it makes.

Ranks are numbered in Megatron-LM's order: tensor-parallel ranks are consecutive (so a TP group
sits inside one node of a DGX-like system), then pipeline stages, then data-parallel replicas:

    rank = t + tp * (p + pp * d)        (t: TP rank, p: pipeline stage, d: DP replica)

Expert parallelism splits the data-parallel replicas into expert groups of `ep` consecutive
replicas, d = e + ep * j (e: expert rank): the replicas of one expert group hold different
experts and exchange tokens by all-to-all; those with the same e hold the same experts and
synchronize their gradients (the expert-data-parallel group, dp / ep replicas; Megatron-LM's
`expert_data_parallel` group).

Groups (ASTRA-sim's communicator-group file, ids from 1): one TP group per (p, d) -- ranks
t = 0..tp-1 --, then one DP group per (t, p) -- replicas d = 0..dp-1 --, then with ep > 1 one
EP group per (t, p, j) -- e = 0..ep-1 -- and, with dp / ep > 1, one expert-DP group per (t, p, e)
-- j = 0..dp/ep-1. Pipeline stages talk by send/receive between (t, p, d) and (t, p +- 1, d), so
they need no group.
"""

from __future__ import annotations

from dataclasses import dataclass

from .master import ParallelizeError

SCHEDULES = ("1f1b", "gpipe")
RECOMPUTE = ("none", "full", "selective")
DDP_FIRST_BUCKET_MB = 1.0  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (1 MiB), with the default cap
DDP_BUCKET_MB = 25.0  # DistributedDataParallel's default bucket_cap_mb


@dataclass(frozen=True)
class Plan:
    """TP x PP x DP with its options. `micro_batches` (default: pp) split the master trace's batch
    (the batch of one data-parallel replica); `zero` 0 (DDP: all-reduced gradient buckets of
    `bucket_mb` MiB), 1 (DDP's buckets all-reduced, the optimizer on each rank's shard, the
    updated parameters all-gathered per bucket), 2 (as 1 with the buckets reduce-scattered) or 3
    (FSDP: all-gather parameters, reduce-scatter gradients); `sp`:
    Megatron's sequence parallelism; `first_bucket_mb`: DDP's smaller first bucket (default: 1 MiB
    when `bucket_mb` is DDP's default 25, else `bucket_mb`, as DDP does); `ep`: expert-parallel
    ranks (a divisor of dp; the master trace must hold a mixture of experts); `recompute`: "full"
    runs every layer's forward again before its micro-batch's backward (Megatron-LM's full
    activation recomputation), "selective" only each layer's core attention (Korthikanti et al.
    2022: Q·Kᵀ, softmax, dropout, ·V; a module named `core_attention`); a fused attention op
    (SDPA) recomputes its scores inside its captured backward already, so selective recomputation
    adds nothing there (`layout._recomputed`); `virtual_stages`:
    chunks of layers per pipeline stage for Megatron-LM's interleaved 1F1B schedule (`pp`;
    micro-batches a multiple of pp); `fp8`: the linear layers' matrix multiplies (forward, input and
    weight gradients) in FP8, as Transformer Engine runs them (their nodes' ``dtype`` is "fp8", so a
    device costs them at its FP8 rate; attention's batched matmuls, norms and the rest keep the
    captured type; bytes stay the captured ones)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    sp: bool = False
    schedule: str = "1f1b"
    micro_batches: int | None = None
    zero: int = 0
    bucket_mb: float = DDP_BUCKET_MB
    first_bucket_mb: float | None = None
    recompute: str = "none"
    virtual_stages: int = 1
    fp8: bool = False

    def __post_init__(self) -> None:
        for k in ("tp", "pp", "dp", "ep"):
            if getattr(self, k) < 1:
                raise ParallelizeError(f"{k} must be at least 1 (got {getattr(self, k)})")
        if self.schedule not in SCHEDULES:
            raise ParallelizeError(f"schedule {self.schedule!r}: expected one of {', '.join(SCHEDULES)}")
        if self.recompute not in RECOMPUTE:
            raise ParallelizeError(f"recompute {self.recompute!r}: expected one of {', '.join(RECOMPUTE)}")
        if self.zero not in (0, 1, 2, 3):
            raise ParallelizeError(f"zero {self.zero}: expected 0 (DDP), 1, 2 (ZeRO stages) or 3 (FSDP)")
        if self.micro_batches is not None and self.micro_batches < 1:
            raise ParallelizeError(f"micro_batches must be at least 1 (got {self.micro_batches})")
        if self.virtual_stages < 1:
            raise ParallelizeError(f"virtual_stages must be at least 1 (got {self.virtual_stages})")
        if self.virtual_stages > 1:
            if self.pp < 2 or self.schedule != "1f1b":
                raise ParallelizeError("virtual stages (an interleaved schedule) need pp > 1 and the 1f1b schedule")
            if self.m % self.pp:
                raise ParallelizeError(
                    f"an interleaved schedule runs micro-batches in groups of pp: {self.m} is no multiple of {self.pp}"
                )
        if self.bucket_mb <= 0:
            raise ParallelizeError(f"bucket_mb must be positive (got {self.bucket_mb})")
        if self.dp % self.ep:
            raise ParallelizeError(f"ep {self.ep} must divide dp {self.dp} (expert groups are made of replicas)")
        if self.ep > 1 and self.zero == 3:
            raise ParallelizeError("expert parallelism with FSDP (zero 3) is not modelled: use zero 0, 1 or 2")

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def edp(self) -> int:
        """Replicas holding the same experts (the expert-data-parallel group's size)."""
        return self.dp // self.ep

    @property
    def m(self) -> int:
        """Micro-batches per step."""
        return self.micro_batches if self.micro_batches is not None else self.pp

    @property
    def bucket_bytes(self) -> int:
        return int(self.bucket_mb * (1 << 20))

    @property
    def first_bucket_bytes(self) -> int:
        if self.first_bucket_mb is not None:
            return int(self.first_bucket_mb * (1 << 20))
        return int((DDP_FIRST_BUCKET_MB if self.bucket_mb == DDP_BUCKET_MB else self.bucket_mb) * (1 << 20))

    def rank(self, t: int, p: int, d: int) -> int:
        return t + self.tp * (p + self.pp * d)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(t, p, d) of a rank."""
        return rank % self.tp, (rank // self.tp) % self.pp, rank // (self.tp * self.pp)

    def tp_group(self, p: int, d: int) -> str:
        return str(1 + p + self.pp * d)

    def dp_group(self, t: int, p: int) -> str:
        return str(1 + self.pp * self.dp + t + self.tp * p)

    def ep_group(self, t: int, p: int, d: int) -> str:
        return str(1 + self.pp * self.dp + self.tp * self.pp + t + self.tp * (p + self.pp * (d // self.ep)))

    def edp_group(self, t: int, p: int, d: int) -> str:
        base = 1 + self.pp * self.dp + self.tp * self.pp * (1 + self.edp)
        return str(base + t + self.tp * (p + self.pp * (d % self.ep)))

    def groups(self) -> dict[str, list[int]]:
        """Communicator groups (id -> ranks) the plan's collectives use: TP groups when tp > 1, DP
        groups when dp > 1, EP groups when ep > 1, expert-DP groups when ep > 1 and dp / ep > 1."""
        out: dict[str, list[int]] = {}
        if self.tp > 1:
            for d in range(self.dp):
                for p in range(self.pp):
                    out[self.tp_group(p, d)] = [self.rank(t, p, d) for t in range(self.tp)]
        if self.dp > 1:
            for p in range(self.pp):
                for t in range(self.tp):
                    out[self.dp_group(t, p)] = [self.rank(t, p, d) for d in range(self.dp)]
        if self.ep > 1:
            for d in range(0, self.dp, self.ep):
                for p in range(self.pp):
                    for t in range(self.tp):
                        out[self.ep_group(t, p, d)] = [self.rank(t, p, d + e) for e in range(self.ep)]
            if self.edp > 1:
                for e in range(self.ep):
                    for p in range(self.pp):
                        for t in range(self.tp):
                            out[self.edp_group(t, p, e)] = [self.rank(t, p, e + self.ep * j) for j in range(self.edp)]
        return out

    def describe(self) -> str:
        parts = [f"TP {self.tp}", f"PP {self.pp}", f"DP {self.dp}"] + ([f"EP {self.ep}"] if self.ep > 1 else [])
        if self.sp:
            parts.append("SP")
        if self.pp > 1:
            parts.append(f"{self.schedule} x {self.m} micro-batches")
            if self.virtual_stages > 1:
                parts.append(f"interleaved x {self.virtual_stages} chunks")
        if self.recompute != "none":
            parts.append(f"{self.recompute} recompute")
        if self.fp8:
            parts.append("FP8 linears")
        parts.append(
            "FSDP"
            if self.zero == 3
            else f"DDP buckets {self.bucket_mb:g} MiB" + (f", ZeRO-{self.zero}" if self.zero else "")
        )
        return ", ".join(parts)


__all__ = ["Plan", "SCHEDULES", "RECOMPUTE"]
