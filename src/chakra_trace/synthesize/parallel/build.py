"""One pipeline stage's program as a trace template: its micro-batches in schedule order, the
tensor-parallel collectives inside them, the sends and receives between stages, the gradient
synchronization and the optimizer. Every TP rank and DP replica of a stage runs this program;
`rank_trace` gives each its own communicator ids and peers while sharing every other column.

Template conventions: collectives name the placeholder groups TP / DP / EP / EDP (tensor, data,
expert and expert-data parallel), and sends and receives name the peer's pipeline stage in
comm_dst / comm_src.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

from ...schema.builder import TraceBuilder
from ...schema.enums import CollectiveType, NodeType
from ...schema.trace import Trace
from ..scale import with_peers
from .cp import CP
from .cp import emit as cp_emit
from .dp import Bucket, buckets, fsdp_units, rank_grad_bytes, stage_params
from .gemm import rank_dims
from .layout import Layout
from .master import BWD, FWD, OPT
from .pp import interleaved, schedule

TP, DP, EP, EDP = "__tp__", "__dp__", "__ep__", "__edp__"
_LABEL = {TP: "TP", DP: "DP", EP: "EP", EDP: "EDP", CP: "CP"}
AR, RS, AG = CollectiveType.ALL_REDUCE, CollectiveType.REDUCE_SCATTER, CollectiveType.ALL_GATHER
A2A = CollectiveType.ALL_TO_ALL
RECOMPUTE = 3  # key of a recomputed forward's ids (next to FWD, BWD, OPT)
LOSS_REDUCTIONS = 3  # vocab-parallel cross entropy: max logit, target logit, sum of exponentials
LOSS_BYTES = 4  # ... each one fp32 value per token


@dataclass
class StageStats:
    nodes: int = 0
    flops: int = 0
    bytes: int = 0
    recompute_flops: int = 0  # of flops: forwards run again before their backward
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)  # "TP ALL_REDUCE" -> count, bytes
    p2p: dict[str, int] = field(default_factory=dict)

    def add_coll(self, group: str, ctype: CollectiveType, size: int) -> None:
        k = f"{_LABEL[group]} {ctype.name}"
        d = self.collectives.setdefault(k, {"count": 0, "bytes": 0})
        d["count"] += 1
        d["bytes"] += int(size)


class StageBuilder:
    def __init__(self, lay: Layout, stage: int, metadata: dict):
        self.lay, self.m, self.plan, self.stage = lay, lay.master, lay.plan, stage
        self.b = TraceBuilder(metadata=metadata)
        self.stats = StageStats()
        m, pp = self.m, self.plan.pp
        self.rows = {
            ph: [r for r in range(len(m)) if m.phase[r] == ph and stage in lay.stages[r]] for ph in (FWD, BWD, OPT)
        }
        # rows by (phase, chunk): a row runs in the first chunk of this stage that holds it
        self.chunk_rows: dict[tuple[int, int], list[int]] = {}
        for ph in (FWD, BWD):
            for r in self.rows[ph]:
                chunk = min(v // pp for v in lay.vstages[r] if v % pp == stage)
                self.chunk_rows.setdefault((ph, chunk), []).append(r)
        self.maps: dict[tuple[int, int], dict[int, int]] = {}
        # activation recomputation: each layer's forward (full) or core attention (selective)
        # again before the layer's backward
        self.recompute_rows: dict[int, list[int]] = {}
        for r in self.rows[FWD]:
            if lay.recomputed[r]:
                self.recompute_rows.setdefault(int(m.layer[r]), []).append(r)
        M = self.plan.m
        self.M = M
        act = lay.master_act_bytes
        self.act = act // M // (self.plan.tp if self.plan.sp else 1)
        self.tp_on, self.dp_on = self.plan.tp > 1, self.plan.dp_cp > 1
        self.param_gather: dict[str, int] = {}  # module -> its bucket's early all-gather (`_early_param_gathers`)
        self.fwd_after: dict[int, list[tuple[CollectiveType, int, str, str]]] = {}
        self.bwd_after: dict[int, list[tuple[CollectiveType, int, str, str]]] = {}
        if self.tp_on:
            self._tp_points()
        for r, exchanges in lay.ep_after.items():  # after TP's all-reduce of the same op
            after = self.fwd_after if m.phase[r] == FWD else self.bwd_after
            after.setdefault(r, []).extend((A2A, size // M, name, EP) for size, name in exchanges)
        self.buckets: list[Bucket] = []  # DDP / ZeRO buckets, then the experts' (expert-DP group)
        self.expert_buckets: list[Bucket] = []
        self.units = None
        if self.dp_on and self.plan.zero < 3:
            self.buckets = buckets(lay, stage)
            if self.plan.edp > 1:
                self.expert_buckets = buckets(lay, stage, experts=True)
        elif self.dp_on:
            self.units = fsdp_units(lay, stage)

    # ------------------------------------------------------------------ TP collectives
    def _pair(self, size: int, name: str) -> list[tuple[CollectiveType, int, str, str]]:
        """An all-reduce of `size` bytes of the whole micro-batch, or with sequence parallelism a
        reduce-scatter of it and an all-gather back (comm_size: its input, size / tp per rank)."""
        if self.plan.sp:
            return [(RS, size, f"{name}_reduce_scatter", TP), (AG, size // self.plan.tp, f"{name}_all_gather", TP)]
        return [(AR, size, f"{name}_all_reduce", TP)]

    def _tp_points(self) -> None:
        lay, M = self.lay, self.M
        for lc in lay.layer_comm.values():
            size = lc.act_bytes // M
            for r in lc.fwd_after:
                self.fwd_after.setdefault(r, []).extend(self._pair(size, "tp_fwd"))
            for r in lc.bwd_after:
                self.bwd_after.setdefault(r, []).extend(self._pair(size, "tp_bwd"))
        for r, size in lay.vocab_fwd_after:
            self.fwd_after.setdefault(r, []).extend(self._pair(size // M, "tp_embed"))
        for r, size in lay.vocab_bwd_after:
            self.bwd_after.setdefault(r, []).extend(self._pair(size // M, "tp_head_bwd"))
        if lay.loss_after is not None:
            per = lay.tokens // self.plan.cp // M * LOSS_BYTES
            self.fwd_after.setdefault(lay.loss_after, []).extend(
                (AR, per, f"tp_loss_all_reduce{i}", TP) for i in range(LOSS_REDUCTIONS)
            )

    # ------------------------------------------------------------------ nodes
    def coll(self, ctype: CollectiveType, size: int, group: str, name: str, deps, **kw) -> int:
        self.stats.add_coll(group, ctype, size)
        # (deps listed once: a bucket's parameters may share the op that wrote their gradients)
        return self.b.collective(
            ctype, max(int(size), 0), name=name, deps=list(dict.fromkeys(deps)), pg_name=group, **kw
        )

    def block(
        self,
        ph: int,
        mb: int,
        head: list[int],
        chunk: int = 0,
        recompute: int | None = None,
        gathers: dict[str, int] | None = None,
    ) -> tuple[int | None, int | None]:
        """Emit one micro-batch's forward (FWD) or backward (BWD) of a chunk of the stage's layers
        (all of them unless the schedule interleaves), or the optimizer (OPT, mb -1);
        `recompute`: layer `recompute`'s forward again, as activation recomputation runs it
        before the layer's backward (which then reads its results). `head`: what the block's
        first ops wait for; `gathers`: FSDP units already gathered (unit -> collective id), shared
        by a recomputation and its backward. Returns (id of its last real op, its last id)."""
        m, lay, M = self.m, self.lay, self.M
        redo = recompute is not None
        if recompute is not None:
            rows = self.recompute_rows[recompute]
        else:
            rows = self.rows[OPT] if ph == OPT else self.chunk_rows.get((ph, chunk), [])
        # ids of a micro-batch's ops, over its chunks (a later chunk reads an earlier one's root ops)
        own = self.maps.setdefault((RECOMPUTE if redo else ph, mb), {})
        use: dict[int, int] = {}
        lookups = [self.maps.get((FWD, mb), {})]
        if ph == BWD:
            lookups = [self.maps.setdefault((RECOMPUTE, mb), {}), self.maps.get((FWD, mb), {}), own]
        redone: set[int] = set()
        waits: list[int] = []
        if ph == OPT:
            last = self.order[-1][1] if self.order else 0
            lookups = [self.maps.get((BWD, last), {}), self.maps.get((FWD, last), {})]
        after = self.fwd_after if ph == FWD else self.bwd_after if ph == BWD else {}
        units = self.units
        unit_gather: dict[str, int] = {} if gathers is None else gathers
        prev_gather: int | None = None
        unit_started: dict[str, int] = {}
        rs_after = units.rs_after if (units is not None and ph == BWD) else {}
        tail = None
        last_id = None
        b = self.b
        for r in rows:
            layer = int(m.layer[r])
            if ph == BWD and layer in self.recompute_rows and layer not in redone:  # its forward first
                redone.add(layer)
                start = head if last_id is None else [last_id]
                _, redone_last = self.block(FWD, mb, start, chunk, recompute=layer, gathers=unit_gather)
                waits = [] if redone_last is None else [redone_last]
            deps: list[int] = waits
            waits = []
            inside = False
            for d in m.deps[r]:
                nid = use.get(d)
                if nid is not None:
                    inside = True
                else:
                    for table in lookups:
                        nid = table.get(d)
                        if nid is not None:
                            break
                if nid is not None:
                    deps.append(nid)
            if not inside:
                deps.extend(head)
                if ph == OPT:
                    deps.extend(self.opt_waits(r))
            if ph == FWD and mb == 0 and not redo and self.param_gather:
                g = self.param_gather.get(m.module[r])
                if g is not None:  # its parameters, gathered (the step before's optimizer updated them)
                    deps.append(g)
            if units is not None and ph != OPT:
                u = units.unit_of(r)
                if u is not None:
                    if u not in unit_gather:
                        gdeps = [] if prev_gather is None else [prev_gather]
                        gdeps += [unit_started[k] for k in list(unit_started)[-1:]]
                        g = self.coll(
                            AG,
                            units.gather_size(u),
                            DP,
                            f"fsdp_all_gather_{'fwd' if ph == FWD and not redo else 'bwd'}",
                            gdeps,
                        )
                        unit_gather[u] = prev_gather = g
                    if not any(units.unit_of(d) == u and d in use for d in m.deps[r]):
                        deps.append(unit_gather[u])
            v_ops, v_bytes = m.num_ops[r], m.nbytes[r]
            dv = int(lay.div[r])
            dims = m.gemm.get(r)
            if ph == OPT:
                od = self.opt_div(r)
                ops, nbytes = v_ops // dv // od, v_bytes // dv // od
            else:
                ops, nbytes = _part(v_ops // dv, mb, M), _part(v_bytes // dv, mb, M)
                if dims is not None:
                    c = int(lay.cp_div[r])
                    dims = rank_dims(dims, lay.tokens, M, dv // c, c)
            attrs: dict = dict(
                duration_unknown=True,
                op=m.ops[r],
                phase="recompute" if redo else ("forward", "backward", "optimizer")[ph],
                module=m.module[r],
                micro_batch=mb if ph != OPT else None,
                gemm_batch=dims[0] if dims is not None and dims[0] > 1 else None,
                gemm_m=dims[1] if dims is not None else None,
                gemm_n=dims[2] if dims is not None else None,
                gemm_k=dims[3] if dims is not None else None,
                dtype="fp8" if self._fp8(r, dims) else (m.dtypes[r] if m.dtypes else None),
            )
            cast = self._fp8_cast_bytes(r, ph, dims)
            if cast:  # Transformer Engine's cast(-transpose) of the GEMM's input to FP8: a kernel of its own
                deps = [
                    b.add(
                        "fp8_cast_transpose",
                        NodeType.COMP_NODE,
                        data_deps=dict.fromkeys(deps),
                        is_cpu_op=False,
                        tensor_size=cast,
                        duration_unknown=True,
                        op="te::cast_transpose",
                        phase=attrs["phase"],
                        module=m.module[r],
                        micro_batch=mb,
                    )
                ]
                self.stats.bytes += cast
            kv = lay.cp_kv.get(r)
            if kv is None:
                nid = b.add(
                    m.names[r],
                    NodeType.COMP_NODE,
                    data_deps=dict.fromkeys(deps),
                    is_cpu_op=False,
                    num_ops=ops,
                    tensor_size=nbytes,
                    **attrs,
                )
            else:  # context parallelism: attention with its K/V exchange
                nid = cp_emit(self, r, ph, deps, ops, nbytes, _part(kv, mb, M), m.names[r], attrs)
            self.stats.flops += ops
            self.stats.bytes += nbytes
            if redo:
                self.stats.recompute_flops += ops
            own[r] = use[r] = nid
            if units is not None and ph != OPT:
                u = units.unit_of(r)
                if u is not None and u not in unit_started:
                    unit_started[u] = nid
            last_id = nid
            if m.is_real(r):
                tail = nid
            prev = nid
            for ctype, size, name, group in after.get(r, ()):
                prev = self.coll(ctype, size, group, name, [prev])
            if prev != nid:
                use[r] = tail = last_id = prev
            for u in rs_after.get(r, ()):  # FSDP: this unit's gradients are all written
                assert units is not None
                prods = [own[p] for p in units.producers[u] if p in own]
                g = self.coll(RS, units.size[u], DP, "fsdp_reduce_scatter", prods)
                self.rs_ids.setdefault(u, []).append(g)
        return tail, last_id

    def _fp8(self, r: int, dims) -> bool:
        """Whether row ``r`` runs in FP8 under the plan: a transformer layer's linear (a matmul of
        one batch), as Transformer Engine's FP8 recipe runs them (the LM head stays in BF16)."""
        return bool(self.plan.fp8 and dims is not None and dims[0] == 1 and self.m.layer[r] >= 0)

    def _fp8_cast_bytes(self, r: int, ph: int, dims) -> int:
        """Bytes of the FP8 cast-transpose Transformer Engine runs before an FP8 GEMM whose rows are
        the tokens (a forward linear: its input; a backward input-gradient GEMM: the output
        gradient, cast once for it and the weight gradient): 2 read + 1 written + 1 transposed per
        element. None where the input arrives in FP8 already (a forward linear after a norm: TE's
        LayerNormLinear casts in the norm's kernel) and for the other GEMMs (weight gradients
        reuse the cast)."""
        m = self.m
        if ph == OPT or not self._fp8(r, dims):
            return 0
        master = m.gemm[r]
        if master[1] != self.lay.tokens:  # the token dimension is not the rows: a weight gradient
            return 0
        if ph == FWD and any(_is_norm_op(m.ops[d]) for d in m.deps[r]):
            return 0
        return 4 * dims[1] * dims[3]

    def opt_div(self, r: int) -> int:
        """What divides an optimizer op's work: its experts' share (1 / ep) and under ZeRO the
        shard of its data-parallel group (1 / dp, or 1 / (dp / ep) for experts' parameters)."""
        plan = self.plan
        zero = self.dp_on and plan.zero > 0
        if self.lay.expert[r]:
            return plan.ep * (plan.edp if zero else 1)
        return plan.dp_cp if zero else 1

    def opt_waits(self, r: int) -> list[int]:
        """What an optimizer op waits for beyond its data: its parameters' gradient buckets'
        all-reduces (DDP) or its unit's last reduce-scatter (FSDP)."""
        mod = self.m.module[r]
        if self.units is not None:
            u = self.units.unit_of_module(mod)
            return self.rs_ids.get(u, [])[-1:] if u is not None else []
        return self.bucket_of_module.get(mod, [])

    def build(self) -> Trace:
        plan, M, b = self.plan, self.M, self.b
        if plan.virtual_stages > 1:
            self.order = interleaved(self.stage, plan.pp, M, plan.virtual_stages)
        else:
            self.order = [(ph, mb, 0) for ph, mb in schedule(plan.schedule, self.stage, plan.pp, M)]
        self.rs_ids: dict[str, list[int]] = {}
        self.bucket_of_module: dict[str, list[int]] = {}
        groups = plan.groups()
        if groups:  # the whole job's communicators, as the PyTorch converter declares them (same on every rank)
            config = [{"pg_name": g, "ranks": members} for g, members in groups.items()]
            b.add("process_groups", NodeType.METADATA_NODE, pg_config=json.dumps(config, separators=(",", ":")))
        prev_tail: int | None = None
        self.param_gather = self._early_param_gathers()
        accum = self._accum_bytes() if plan.grad_accum == "add" and M > 1 else {}
        accum_last: dict[int, int] = {}  # chunk -> its accumulation add of the last micro-batch
        P, last_v = plan.pp, plan.pp * plan.virtual_stages - 1
        sent: list[int] = []  # with blocking sends: the step's sends the next step waits for
        for ph, mb, chunk in self.order:
            v = chunk * P + self.stage  # this step's virtual stage; its neighbours v - 1 and v + 1
            head = ([] if prev_tail is None else [prev_tail]) + sent
            sent = []
            if ph == FWD and v > 0:
                head.append(self._recv(v - 1, mb, chunk, FWD, "pp_recv_activation"))
            if ph == BWD and v < last_v:
                head.append(self._recv(v + 1, mb, chunk, BWD, "pp_recv_gradient"))
            tail, last_id = self.block(ph, mb, head, chunk=chunk)
            if ph == BWD and mb > 0 and accum.get(chunk):  # its gradients added to the earlier micro-batches'
                deps = [x for x in (tail, last_id) if x is not None][:1]
                last_id = b.add(
                    "grad_accumulate",
                    NodeType.COMP_NODE,
                    data_deps=dict.fromkeys(deps),
                    is_cpu_op=False,
                    tensor_size=3 * accum[chunk],
                    duration_unknown=True,
                    op="aten::add_",
                    phase="backward",
                    micro_batch=mb,
                )
                accum_last[chunk] = last_id
            end = tail if tail is not None else last_id
            out = [] if end is None else [end]
            if ph == FWD and v < last_v:
                sent.append(self._send(v + 1, mb, FWD, "pp_send_activation", out))
            if ph == BWD and v > 0:
                sent.append(self._send(v - 1, mb, BWD, "pp_send_gradient", out))
            if not plan.p2p_blocking:
                sent = []
            prev_tail = last_id if last_id is not None else prev_tail
        zero = plan.zero if self.buckets or self.expert_buckets else 0
        # (group, its size, name infix, buckets): the buckets of DDP / ZeRO, then the experts'
        synced = [(DP, plan.dp_cp, "", self.buckets), (EDP, plan.edp, "expert_", self.expert_buckets)]
        # one collective per bucket once the last micro-batch wrote its gradients
        last_bwd = self.maps.get((BWD, self.order[-1][1]), {})
        for group, _, infix, bks in synced:
            if zero == 2:
                kind, name = RS, f"zero2_{infix}bucket_reduce_scatter"
            else:
                kind, name = AR, f"{'edp' if infix else 'dp'}_bucket_all_reduce"
            for i, bk in enumerate(bks):
                deps = [last_bwd[p] for p in bk.producers if p in last_bwd]
                deps += sorted({accum_last[c] for p in bk.producers if (c := self.bwd_chunk.get(p)) in accum_last})
                ar = self.coll(kind, bk.nbytes, group, name, deps, bucket=i)
                for mod in bk.modules:
                    self.bucket_of_module.setdefault(mod, []).append(ar)
        head = [] if prev_tail is None else [prev_tail]
        self.block(OPT, -1, head)
        if zero in (1, 2) and not plan.overlap_param_gather:  # each bucket's updated parameters, from their owners
            opt = self.maps[(OPT, -1)]
            for group, size, infix, bks in synced:
                for i, bk in enumerate(bks):
                    deps = [nid for r, nid in opt.items() if self.m.module[r] in bk.modules]
                    self.coll(AG, -(-bk.nbytes // size), group, f"zero{zero}_{infix}param_all_gather", deps, bucket=i)
        trace = b.build()
        self.stats.nodes = len(trace)
        return trace

    @cached_property
    def bwd_chunk(self) -> dict[int, int]:
        """Backward row -> the chunk of the stage's layers it runs in."""
        return {r: c for (ph, c), rows in self.chunk_rows.items() if ph == BWD for r in rows}

    def _accum_bytes(self) -> dict[int, int]:
        """Per chunk, the bytes of this rank's gradients its backward writes (parameters split as
        the plan splits them): what each later micro-batch's accumulation adds."""
        chunk_of = self.bwd_chunk
        out: dict[int, int] = {}
        for p in stage_params(self.lay, self.stage):
            c = chunk_of.get(p.producer)
            if c is not None:
                out[c] = out.get(c, 0) + rank_grad_bytes(self.lay, p)
        return out

    def _early_param_gathers(self) -> dict[str, int]:
        """With ZeRO 1/2 and `Plan.overlap_param_gather` (Megatron-Core's --overlap-param-gather):
        each bucket's parameter all-gather at the start of the step, in forward order, one after
        the other, and {module: its gather} so that the module's first forward waits for it -- the
        steady state, where the gathers of the step's updated parameters overlap the next step's
        forward. {} otherwise."""
        plan = self.plan
        if plan.zero not in (1, 2) or not plan.overlap_param_gather or not self.dp_on:
            return {}
        out: dict[str, int] = {}
        for group, size, infix, bks in (
            (DP, plan.dp_cp, "", self.buckets),
            (EDP, plan.edp, "expert_", self.expert_buckets),
        ):
            prev: list[int] = []
            for i in reversed(range(len(bks))):  # buckets fill in backward order: forward needs the last first
                bk = bks[i]
                g = self.coll(
                    AG, -(-bk.nbytes // size), group, f"zero{plan.zero}_{infix}param_all_gather", prev, bucket=i
                )
                prev = [g]
                for mod in bk.modules:
                    out.setdefault(mod, g)
        return out

    def _tag(self, mb: int, chunk: int, ph: int) -> int:
        """A send's tag, from the micro-batch, the receiving chunk and the direction: unique
        between two stages (with one chunk: mb forward, M + mb backward)."""
        return mb + self.M * (2 * chunk + (ph == BWD))

    def _scattered(self) -> bool:
        """Megatron-LM's scatter/gather of pipeline messages (Narayanan et al. 2021, section 4.1):
        each TP rank sends 1/tp of the activation (which every TP rank holds whole without
        sequence parallelism) and the receivers all-gather it over NVLink."""
        plan = self.plan
        return plan.scatter_gather and plan.tp > 1 and not plan.sp

    def _p2p_size(self) -> int:
        return self.act // self.plan.tp if self._scattered() else self.act

    def _recv(self, peer_v: int, mb: int, chunk: int, ph: int, name: str) -> int:
        size = self._p2p_size()
        self._p2p("recv", size)
        P = self.plan.pp
        rid = self.b.recv(peer_v % P, size, tag=self._tag(mb, chunk, ph), name=name, micro_batch=mb)
        if self._scattered():  # the pieces of the TP ranks, gathered
            rid = self.coll(AG, size, TP, "pp_gather_" + name.removeprefix("pp_recv_"), [rid], micro_batch=mb)
        return rid

    def _send(self, peer_v: int, mb: int, ph: int, name: str, deps: list[int]) -> int:
        size = self._p2p_size()
        self._p2p("send", size)
        P = self.plan.pp
        tag = self._tag(mb, peer_v // P, ph)
        return self.b.send(peer_v % P, size, tag=tag, name=name, deps=deps, micro_batch=mb)

    def _p2p(self, kind: str, size: int) -> None:
        d = self.stats.p2p
        d[f"{kind}s"] = d.get(f"{kind}s", 0) + 1
        d[f"{kind}_bytes"] = d.get(f"{kind}_bytes", 0) + size


def _is_norm_op(op: str) -> bool:
    return "norm" in op.lower()


def _part(v: int, mb: int, M: int) -> int:
    """Micro-batch mb's share of v: the shares of all M sum to v exactly."""
    return v * (mb + 1) // M - v * mb // M


def rank_trace(template: Trace, groups: dict[str, str], peer_base: int, peer_stride: int) -> Trace:
    """`template` for one rank: placeholder groups renamed, peers' stages made ranks
    (rank = peer_base + peer_stride * stage); every other column shared with the template."""
    return with_peers(template, peer_base, peer_stride, [groups.get(g, g) for g in template.groups])


__all__ = ["StageBuilder", "StageStats", "rank_trace", "TP", "DP", "EP", "EDP", "CP"]
