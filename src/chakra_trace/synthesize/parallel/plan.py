"""A parallelism plan and the ranks and communicator groups it makes.

Ranks are numbered with tensor-parallel ranks consecutive (so a TP group sits inside one node of
a DGX-like system), then context-parallel ranks, then pipeline stages, then data-parallel
replicas:

    rank = t + tp * (c + cp * (p + pp * d))    (t: TP rank, c: CP rank, p: stage, d: DP replica)

This is the order of the Llama 3 paper (§3.3.2: "[TP, CP, PP, DP]", innermost first). Megatron
Core's default (`parallel_state.initialize_model_parallel(order="tp-cp-ep-dp-pp")`, innermost
first) agrees on tp then cp but puts the pipeline stages outermost; with cp = 1 the numbering is
this module's earlier t + tp * (p + pp * d), unchanged.

Expert parallelism splits the data-parallel replicas into expert groups of `ep` consecutive
replicas, d = e + ep * j (e: expert rank): the replicas of one expert group hold different
experts and exchange tokens by all-to-all; those with the same e hold the same experts and
synchronize their gradients (the expert-data-parallel group, dp / ep replicas; Megatron-LM's
`expert_data_parallel` group).

Groups (ASTRA-sim's communicator-group file, ids from 1): one TP group per (c, p, d) -- ranks
t = 0..tp-1 --, then one DP group per (t, p) -- replicas d = 0..dp-1, and with context
parallelism every CP rank c of them: Megatron's `data_parallel_group_with_context_parallel`, over
which gradients are reduced, since CP ranks hold the same parameters --, then with ep > 1 one
EP group per (t, p, j) -- e = 0..ep-1 -- and, with dp / ep > 1, one expert-DP group per (t, p, e)
-- j = 0..dp/ep-1 --, then with cp > 1 and K/V all-gathered one CP group per (t, p, d) -- c =
0..cp-1, the ranks that exchange K and V (`cp`). Pipeline stages talk by send/receive between
(t, c, p, d) and (t, c, p +- 1, d), and so does Transformer Engine's K/V ring between (t, c, p,
d) and (t, c +- 1, p, d): they need no group.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .master import ParallelizeError

SCHEDULES = ("1f1b", "gpipe")
RECOMPUTE = ("none", "full", "selective")
CP_COMM = ("p2p", "all-gather")  # Transformer Engine's cp_comm_type "p2p" and "all_gather"
GRAD_ACCUM = ("fused", "add")
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
    micro-batches a multiple of pp); `cp`: context-parallel ranks, each holding seq / cp tokens
    of every sequence, K and V exchanged as `cp_comm` says ("p2p": Transformer Engine's ring,
    "all-gather": Llama 3's; see `cp`); `fp8`: the linear layers' matrix multiplies (forward, input and
    weight gradients) in FP8, as Transformer Engine runs them (their nodes' ``dtype`` is "fp8", so a
    device costs them at its FP8 rate; attention's batched matmuls, norms and the rest keep the
    captured type; bytes stay the captured ones), each forward linear not fed by a norm and each
    input-gradient GEMM preceded by Transformer Engine's cast-transpose of its input to FP8; `overlap_param_gather` (ZeRO 1/2): each bucket's
    parameter all-gather at the start of the step before its modules' first forward instead of
    after the optimizer -- Megatron-Core's --overlap-param-gather in its steady state, where the
    gathers overlap the next step's forward; `p2p_blocking`: each schedule step waits for its
    pipeline sends to complete before the next one starts (Megatron-LM until 2023: its
    `_communicate` waits on every request of a `batch_isend_irecv`); `scatter_gather` (TP without
    SP): each TP rank sends 1/tp of a pipeline message and the receivers all-gather it over the TP
    group (Narayanan et al. 2021, section 4.1); `grad_accum`: how the gradients of a replica's
    micro-batches add up: "fused" (inside the weight-gradient GEMM, which accumulates into the
    gradient buffer: Megatron-Core's gradient accumulation fusion; no kernel of its own) or "add"
    (PyTorch autograd's accumulation, and Megatron-LM's before gradient accumulation fusion: from the
    second micro-batch on, an elementwise add of each parameter's new gradient into the accumulated
    one after its chunk's backward: read both, write one)."""

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
    cp: int = 1
    cp_comm: str = "p2p"
    fp8: bool = False
    overlap_param_gather: bool = False
    p2p_blocking: bool = False
    scatter_gather: bool = False
    grad_accum: str = "fused"

    def __post_init__(self) -> None:
        for k in ("tp", "pp", "dp", "ep", "cp"):
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
        if self.overlap_param_gather and self.zero not in (1, 2):
            raise ParallelizeError("overlapping the parameter all-gather needs ZeRO 1 or 2 (the distributed optimizer)")
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
        if self.cp_comm not in CP_COMM:
            raise ParallelizeError(f"cp_comm {self.cp_comm!r}: expected one of {', '.join(CP_COMM)}")
        if self.grad_accum not in GRAD_ACCUM:
            raise ParallelizeError(f"grad_accum {self.grad_accum!r}: expected one of {', '.join(GRAD_ACCUM)}")
        if self.cp > 1 and self.ep > 1:
            raise ParallelizeError("context parallelism with expert parallelism is not modelled: use ep 1 with cp > 1")

    @property
    def ranks(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def dp_cp(self) -> int:
        """Ranks that hold the same parameter shard: dp x cp (Megatron's data-parallel group with
        context parallelism), over which gradients are reduced and ZeRO / FSDP shard."""
        return self.dp * self.cp

    def fields(self) -> dict:
        """The plan's fields, without the context-parallel ones when cp is 1 and without fp8 when
        off (so a trace's plan metadata is what it was before they existed)."""
        d = asdict(self)
        if self.cp == 1:
            del d["cp"], d["cp_comm"]
        if not self.fp8:
            del d["fp8"]
        for k in ("overlap_param_gather", "p2p_blocking", "scatter_gather"):
            if not d[k]:
                del d[k]
        if self.grad_accum == "fused":
            del d["grad_accum"]
        return d

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

    def rank(self, t: int, p: int, d: int, c: int = 0) -> int:
        return t + self.tp * (c + self.cp * (p + self.pp * d))

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(t, p, d) of a rank (its CP rank: `cp_rank`)."""
        tc = self.tp * self.cp
        return rank % self.tp, (rank // tc) % self.pp, rank // (tc * self.pp)

    def cp_rank(self, rank: int) -> int:
        return (rank // self.tp) % self.cp

    def tp_group(self, p: int, d: int, c: int = 0) -> str:
        return str(1 + c + self.cp * (p + self.pp * d))

    def dp_group(self, t: int, p: int) -> str:
        """The data-parallel group (with cp > 1: with context parallelism, dp x cp ranks)."""
        return str(1 + self.cp * self.pp * self.dp + t + self.tp * p)

    def cp_group(self, t: int, p: int, d: int) -> str:
        base = 1 + self.cp * self.pp * self.dp + self.tp * self.pp
        return str(base + t + self.tp * (p + self.pp * d))

    def ep_group(self, t: int, p: int, d: int) -> str:
        return str(1 + self.pp * self.dp + self.tp * self.pp + t + self.tp * (p + self.pp * (d // self.ep)))

    def edp_group(self, t: int, p: int, d: int) -> str:
        base = 1 + self.pp * self.dp + self.tp * self.pp * (1 + self.edp)
        return str(base + t + self.tp * (p + self.pp * (d % self.ep)))

    def groups(self) -> dict[str, list[int]]:
        """Communicator groups (id -> ranks) the plan's collectives use: TP groups when tp > 1, DP
        groups when dp x cp > 1, EP groups when ep > 1, expert-DP groups when ep > 1 and dp / ep >
        1, CP groups when cp > 1 and cp_comm is "all-gather"."""
        out: dict[str, list[int]] = {}
        cps = range(self.cp)
        if self.tp > 1:
            for d in range(self.dp):
                for p in range(self.pp):
                    for c in cps:
                        out[self.tp_group(p, d, c)] = [self.rank(t, p, d, c) for t in range(self.tp)]
        if self.dp_cp > 1:
            for p in range(self.pp):
                for t in range(self.tp):
                    out[self.dp_group(t, p)] = [self.rank(t, p, d, c) for d in range(self.dp) for c in cps]
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
        if self.cp > 1 and self.cp_comm == "all-gather":
            for d in range(self.dp):
                for p in range(self.pp):
                    for t in range(self.tp):
                        out[self.cp_group(t, p, d)] = [self.rank(t, p, d, c) for c in cps]
        return out

    def describe(self) -> str:
        parts = [f"TP {self.tp}", f"PP {self.pp}", f"DP {self.dp}"] + ([f"EP {self.ep}"] if self.ep > 1 else [])
        if self.cp > 1:
            parts.insert(1, f"CP {self.cp} ({self.cp_comm})")
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
        if self.overlap_param_gather:
            parts.append("parameter gathers overlapping the forward")
        if self.p2p_blocking:
            parts.append("blocking pipeline sends")
        if self.scatter_gather and self.tp > 1 and not self.sp:
            parts.append("scatter/gather pipeline messages")
        if self.grad_accum == "add" and self.m > 1:
            parts.append("gradients accumulated by separate adds")
        parts.append(
            "FSDP"
            if self.zero == 3
            else f"DDP buckets {self.bucket_mb:g} MiB" + (f", ZeRO-{self.zero}" if self.zero else "")
        )
        return ", ".join(parts)


__all__ = ["Plan", "SCHEDULES", "RECOMPUTE", "CP_COMM", "GRAD_ACCUM"]
