"""`chakra parallelize`: a captured master trace as per-rank traces of a parallelism plan.

The tiny preset of examples/models/gpt.py is captured once; each plan's workload must validate,
its FLOPs must add up to the master's (plus the redundant work each rule states, computed here
from module names, independently of the pass), and its collectives and sends must have the sizes
of Megatron-LM's formulas. The DDP plan on the corpus's TinyLM must issue the all-reduces the
recorded DDP job issued (tests/data/corpus/ddp: bucket_cap_mb=0.1, 2 ranks).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed; capturing needs it")
pytestmark = pytest.mark.torch

from chakra_trace.capture import capture, load_build  # noqa: E402
from chakra_trace.cli import main  # noqa: E402
from chakra_trace.io.workload import Workload  # noqa: E402
from chakra_trace.schema.builder import TraceBuilder  # noqa: E402
from chakra_trace.schema.enums import CollectiveType, NodeType  # noqa: E402
from chakra_trace.simulate.config import Network  # noqa: E402
from chakra_trace.simulate.devices import with_device  # noqa: E402
from chakra_trace.simulate.presets import resolve, simulate_on  # noqa: E402
from chakra_trace.simulate.simulator import simulate  # noqa: E402
from chakra_trace.synthesize.parallel import ParallelizeError, Plan, parallelize, parallelize_detailed  # noqa: E402
from chakra_trace.synthesize.parallel.pp import interleaved, schedule  # noqa: E402
from chakra_trace.validate.workload import validate_workload  # noqa: E402
from test_capture import tiny_lm  # noqa: E402  (the corpus TinyLM, as the DDP job recorded it)

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "models" / "gpt.py"
JOBS = ROOT / "benchmarks" / "corpus" / "jobs"
DDP_RECORDING = ROOT / "tests" / "data" / "corpus" / "ddp" / "rank0.et.json.gz"
BATCH, SEQ, HIDDEN, LAYERS, ITEM = 4, 16, 64, 2, 4  # the tiny preset, float32


@pytest.fixture(scope="module")
def tiny():
    return capture(load_build(f"{GPT}:build"), {"preset": "tiny"}, batch=BATCH, seq=SEQ)


def _attrs(t, name):
    vals, has = t.attr_array(name)
    return [v if h else None for v, h in zip(vals.tolist(), has.tolist())]


def _colls(t, ctype=None, group_kind=None):
    """(name, comm_size) of a trace's collectives in order."""
    rows = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    names = t.name_array
    out = []
    for r in rows.tolist():
        if ctype is not None and int(t.comm_type[r]) != ctype:
            continue
        if group_kind is not None and not str(names[r]).startswith(group_kind):
            continue
        out.append((str(names[r]), int(t.comm_size[r])))
    return out


def _flops(w: Workload) -> int:
    return sum(int(t.num_ops[t.types == NodeType.COMP_NODE].sum()) for t in w.traces.values())


PLANS = [
    Plan(dp=2),
    Plan(tp=2),
    Plan(pp=2),
    Plan(tp=2, pp=2, dp=2),
    Plan(tp=2, sp=True),
    Plan(dp=2, zero=3),
    Plan(dp=2, zero=1),
    Plan(tp=2, pp=2, dp=2, zero=2),
    Plan(pp=2, schedule="gpipe", micro_batches=4),
    Plan(tp=2, pp=2, dp=2, sp=True, zero=3, micro_batches=4),
    Plan(tp=2, pp=2, dp=2, recompute="full"),
    Plan(dp=2, zero=3, recompute="full"),
]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_plans_validate(tiny, plan):
    w = parallelize(tiny.trace, plan)
    assert w.ranks == list(range(plan.ranks))
    rep = validate_workload(w)
    assert not rep.issues, [str(i) for i in rep.issues[:5]]
    for g, members in w.groups.items():  # every group's members name it, and only they
        assert sorted(r for r, t in w.traces.items() if g in t.groups) == members


def test_a_layernorm_gpt_validates_under_every_sync():
    """LayerNorm's weight and bias gradients come from one op: a bucket lists it once."""
    cfg = {"preset": "tiny", "norm": "layer", "mlp": "gelu", "positions": "learned", "bias": True, "tie": True}
    master = capture(load_build(f"{GPT}:build"), cfg, batch=BATCH, seq=SEQ).trace
    for plan in (Plan(dp=2), Plan(dp=2, zero=1), Plan(tp=2, pp=2, dp=2, zero=2), Plan(dp=2, zero=3)):
        rep = validate_workload(parallelize(master, plan))
        assert not rep.issues, (plan.describe(), [str(i) for i in rep.issues[:3]])


def _torch_transformer():
    """A language model of PyTorch's own nn.TransformerEncoder: its attention is an
    nn.MultiheadAttention, which applies its projections without calling a linear submodule."""
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(500, HIDDEN)
            block = nn.TransformerEncoderLayer(HIDDEN, 4, 4 * HIDDEN, dropout=0.0, batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(block, LAYERS, enable_nested_tensor=False)
            self.head = nn.Linear(HIDDEN, 500)

        def forward(self, tokens):
            return self.head(
                self.encoder(
                    self.embed(tokens),
                    is_causal=True,
                    mask=nn.Transformer.generate_square_subsequent_mask(tokens.shape[1]),
                )
            )

    def inputs(b, s):
        t = torch.randint(0, 500, (b, s + 1))
        return (t[:, :-1],), t[:, 1:]

    return LM(), inputs, lambda out, tgt: torch.nn.functional.cross_entropy(out.reshape(-1, 500), tgt.reshape(-1))


def test_torch_multihead_attention_is_a_tensor_parallel_region():
    """Not our model: torch's TransformerEncoderLayer. Its MultiheadAttention splits over TP
    ranks (heads), with an all-reduce where its output and its input's gradient leave it; only
    norms and residual adds stay whole."""
    res = capture(_torch_transformer, batch=BATCH, seq=SEQ)
    w = parallelize(res.trace, Plan(tp=2))
    assert not validate_workload(w).issues
    ars = _colls(w.traces[0], CollectiveType.ALL_REDUCE)
    act = BATCH * SEQ * HIDDEN * ITEM
    assert [s for n, s in ars if n.startswith("tp_fwd")] == [act] * (2 * LAYERS)
    assert [s for n, s in ars if n.startswith("tp_bwd")] == [act] * (2 * LAYERS)
    whole = sum(op.flops for op in res.ops if "self_attn" in op.module.split("."))
    per_rank = _flops(w) // 2
    attn = sum(op.flops // 2 for op in res.ops if "self_attn" in op.module.split("."))
    assert whole > 0 and per_rank <= res.flops - whole + attn + len(res.ops)


def test_ranks_and_groups_in_megatron_order():
    plan = Plan(tp=2, pp=3, dp=2)
    assert [plan.coords(r) for r in (0, 1, 2, 5, 6, 11)] == [
        (0, 0, 0),
        (1, 0, 0),
        (0, 1, 0),
        (1, 2, 0),
        (0, 0, 1),
        (1, 2, 1),
    ]
    groups = plan.groups()
    assert groups[plan.tp_group(1, 1)] == [8, 9]  # TP: consecutive ranks
    assert groups[plan.dp_group(1, 2)] == [5, 11]  # DP: one rank per replica
    assert len(groups) == 3 * 2 + 2 * 3


def test_data_parallel_runs_the_master_on_every_rank(tiny):
    w = parallelize(tiny.trace, Plan(dp=2))
    for t in w.traces.values():
        comp = t.types == NodeType.COMP_NODE
        assert int(t.num_ops[comp].sum()) == tiny.flops
        assert int(t.tensor_size[comp].sum()) == sum(op.bytes for op in tiny.ops)
    (ar,) = _colls(w.traces[0], CollectiveType.ALL_REDUCE)  # 156,480 fp32 gradients fit DDP's 1 MiB first bucket
    assert ar[1] == tiny.params * 4


def _replicated_under_tp(op) -> bool:
    """Ops Megatron runs whole on every TP rank: outside attention/MLP (norms, residual adds,
    the model's own ops) and not vocab-parallel (embedding, LM head, loss)."""
    m = op.module
    if m in ("embed", "lm_head", "loss"):
        return False
    parts = m.split(".")
    return "attn" not in parts and "mlp" not in parts


def test_tensor_parallel_flops_and_all_reduces(tiny):
    tp = 2
    w = parallelize(tiny.trace, Plan(tp=tp))
    replicated = sum(op.flops for op in tiny.ops if _replicated_under_tp(op))
    shards = sum(op.flops // tp for op in tiny.ops if not _replicated_under_tp(op))  # (a 1-FLOP step count: 0)
    assert _flops(w) == tp * (replicated + shards)
    assert tiny.flops - (replicated + tp * shards) == sum(
        op.flops % tp for op in tiny.ops if not _replicated_under_tp(op)
    )
    for t in w.traces.values():
        ars = _colls(t, CollectiveType.ALL_REDUCE)
        act = BATCH * SEQ * HIDDEN * ITEM  # b x s x h x dtype
        fwd = [s for n, s in ars if n.startswith("tp_fwd")]
        bwd = [s for n, s in ars if n.startswith("tp_bwd")]
        assert fwd == [act] * (2 * LAYERS) and bwd == [act] * (2 * LAYERS)  # 2 per layer per direction
        assert [s for n, s in ars if n.startswith("tp_embed")] == [act]
        assert [s for n, s in ars if n.startswith("tp_head")] == [act]
        assert [s for n, s in ars if n.startswith("tp_loss")] == [BATCH * SEQ * 4] * 3


def test_sequence_parallel_pairs_have_the_all_reduce_volume(tiny):
    tp = 4
    w = parallelize(tiny.trace, Plan(tp=tp, sp=True))
    t = w.traces[1]
    act = BATCH * SEQ * HIDDEN * ITEM
    rs = _colls(t, CollectiveType.REDUCE_SCATTER)
    ag = _colls(t, CollectiveType.ALL_GATHER)
    assert len(rs) == len(ag) == 4 * LAYERS + 2
    assert {s for _, s in rs} == {act} and {s for _, s in ag} == {act // tp}
    # norms and residuals run on 1/tp of the sequence: only the model's own ops stay whole
    own = sum(op.flops for op in tiny.ops if op.module == "" or op.module == "norm" and op.phase != "optimizer")
    opt_replicated = sum(op.flops for op in tiny.ops if op.phase == "optimizer" and _replicated_under_tp(op))
    fb_split = tiny.flops - own - opt_replicated
    per_rank = int(t.num_ops[t.types == NodeType.COMP_NODE].sum())
    assert abs(per_rank - (fb_split / tp + own + opt_replicated)) < 64  # (per-op rounding down of / tp)


def test_pipeline_stages_sends_and_schedule(tiny):
    M = 4
    w = parallelize(tiny.trace, Plan(pp=2, micro_batches=M))
    root = sum(op.flops for op in tiny.ops if op.module == "")  # RoPE tables: computed on both stages
    assert root > 0 and _flops(w) == tiny.flops + root
    act = BATCH // M * SEQ * HIDDEN * ITEM
    for r, peer in ((0, 1), (1, 0)):
        t = w.traces[r]
        for kind, col in ((NodeType.COMM_SEND_NODE, t.comm_dst), (NodeType.COMM_RECV_NODE, t.comm_src)):
            rows = t.types == kind
            assert rows.sum() == M and set(col[rows].tolist()) == {peer} and set(t.comm_size[rows].tolist()) == {act}
    stage0 = w.traces[0]
    mb, phase = _attrs(stage0, "micro_batch"), _attrs(stage0, "phase")
    order = []
    for m, p in zip(mb, phase):
        if m is not None and p is not None and (not order or order[-1] != (p, m)):
            order.append((p, m))
    assert order == [("forward", 0), ("forward", 1), ("backward", 0), ("forward", 2), ("backward", 1)] + [
        ("forward", 3),
        ("backward", 2),
        ("backward", 3),
    ]


def test_schedules():
    assert schedule("gpipe", 0, 2, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert schedule("1f1b", 3, 4, 3) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]  # last stage: no warm-up
    assert schedule("1f1b", 0, 4, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # warm-up capped by M


def test_interleaved_schedule_is_megatrons():
    """Megatron-LM's interleaved 1F1B (P 2, M 4, V 2): stage 0 warms up with (P - 1)·2 + (V - 1)·P
    = 4 forwards over both chunks, backwards take the chunks in reverse, every (phase,
    micro-batch, chunk) once; with M = P every forward comes first."""
    order = interleaved(0, 2, 4, 2)
    assert order[:4] == [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1)]
    assert order[4:6] == [(0, 2, 0), (1, 0, 1)] and order[-1] == (1, 3, 0)
    for stage in range(3):
        o = interleaved(stage, 3, 6, 2)
        assert sorted(o) == sorted((ph, mb, c) for ph in (0, 1) for mb in range(6) for c in range(2))
        for ph in (0, 1):  # each chunk's micro-batches in order
            for c in range(2):
                assert [mb for p, mb, k in o if p == ph and k == c] == list(range(6))
    assert [ph for ph, _, _ in interleaved(1, 2, 2, 2)] == [0] * 4 + [1] * 4


@pytest.fixture(scope="module")
def tiny4():
    return capture(load_build(f"{GPT}:build"), {"preset": "tiny", "layers": 4}, batch=BATCH, seq=SEQ)


def test_interleaved_pipeline_chunks_sends_and_bubble(tiny4):
    """Virtual stages: stage p holds layers p and p + 2 (P 2, V 2), each micro-batch crosses
    every stage boundary V times; the work is the plain schedule's, and with compute dominating
    the step is shorter (the bubble shrinks)."""
    M, P = 4, 2
    plain = parallelize_detailed(tiny4.trace, Plan(pp=P, micro_batches=M))
    inter = parallelize_detailed(tiny4.trace, Plan(pp=P, micro_batches=M, virtual_stages=2))
    assert not validate_workload(inter.workload).issues
    assert inter.total_flops == plain.total_flops
    t0 = inter.workload.traces[0]
    layers = {md.split(".")[1] for md in _attrs(t0, "module") if md and md.startswith("layers.")}
    assert layers == {"0", "2"}
    for r in (0, 1):  # 3 boundaries between the 4 virtual stages, crossed M times each way: 6M over 2 stages
        t = inter.workload.traces[r]
        assert int((t.types == NodeType.COMM_SEND_NODE).sum()) == 3 * M
        assert int((t.types == NodeType.COMM_RECV_NODE).sum()) == 3 * M
    slow = dataclasses.replace(resolve("ring-8").system, roofline_enabled=True, peak_perf=0.01, local_mem_bw=0.01)
    steps = [simulate(par.workload, Network.simple("Ring", P, 50, 500), slow).step_ns for par in (plain, inter)]
    assert steps[1] < steps[0]
    full = Plan(tp=2, pp=2, dp=2, sp=True, micro_batches=4, virtual_stages=2, recompute="full", zero=1)
    w = parallelize(tiny4.trace, full)
    assert not validate_workload(w).issues and simulate_on(w, resolve("ring-8")).step_ns > 0
    with pytest.raises(ParallelizeError, match="multiple"):
        Plan(pp=2, micro_batches=3, virtual_stages=2)
    with pytest.raises(ParallelizeError, match="chunks"):
        parallelize(tiny4.trace, Plan(pp=4, micro_batches=4, virtual_stages=2))


@pytest.mark.parametrize("sizes,dp", [([2, 4], 2), ([2, 2], 1)])
def test_symmetric_ranks_simulate_as_every_rank(tiny4, sizes, dp):
    """TP ranks of a stage (and DP replicas) run one program on their own groups and peers: one NPU
    per node of a replica is simulated for all, and every result is the full run's (the records
    of the groups it did not run included); the ranks share their derived tables (validated
    once) without sharing their peers."""
    plan = Plan(tp=2, pp=2, dp=dp, micro_batches=4, virtual_stages=2, recompute="full")
    w = parallelize(tiny4.trace, plan)
    net = Network.simple(["Switch", "Switch"], sizes, [300, 25], [250, 2000])
    system = resolve("dgx-8x8").system
    fast = simulate(w, net, system)
    full = simulate(w, net, system, shortcuts=False)
    assert "turned by 1 in every block of 2 NPUs" in fast.shortcuts[0], fast.shortcuts
    assert fast.events * 2 * dp == full.events
    for f in ("finish_ns", "exposed_comm_ns", "compute_ns", "comm_ns", "overlap_ns", "other_ns", "idle_ns"):
        assert getattr(fast, f).tolist() == getattr(full, f).tolist(), f
    key = lambda c: (c.group, c.index)  # noqa: E731
    assert sorted(fast.collectives, key=key) == sorted(full.collectives, key=key)
    assert fast.compute_types == full.compute_types
    t0, t1 = w.traces[0], w.traces[1]
    assert t0.graph() is t1.graph() and not np.array_equal(t0.comm_dst, w.traces[2].comm_dst)


def test_micro_batch_shares_sum_exactly(tiny):
    w = parallelize(tiny.trace, Plan(pp=1, micro_batches=4))
    assert _flops(w) == tiny.flops


def test_combined_plan_accounts_for_every_flop(tiny):
    plan = Plan(tp=2, pp=2, dp=2)
    res = parallelize_detailed(tiny.trace, plan)
    tp = plan.tp
    replicated = sum(op.flops for op in tiny.ops if _replicated_under_tp(op))
    shards = sum(op.flops // tp for op in tiny.ops if not _replicated_under_tp(op))
    root = sum(op.flops for op in tiny.ops if op.module == "")
    # per replica: every TP rank runs the replicated ops and its shard of the others; RoPE (the
    # model's own ops) on both stages
    per_replica = tp * (replicated + shards + root)
    assert _flops(res.workload) == plan.dp * per_replica
    assert res.to_dict()["redundant_flops"] == plan.dp * (per_replica - tiny.flops)


def test_full_recompute_runs_each_layers_forward_again(tiny):
    """Full activation recomputation: before each micro-batch's backward the stage's layer ops run
    again (their TP collectives too), the backward reads them, and they cost their FLOPs more; an
    FSDP unit is gathered once for its recomputation and backward."""
    M, tp = 2, 2
    base = parallelize_detailed(tiny.trace, Plan(tp=tp, pp=2, micro_batches=M))
    res = parallelize_detailed(tiny.trace, Plan(tp=tp, pp=2, micro_batches=M, recompute="full"))
    layer_fwd = sum(
        op.flops if _replicated_under_tp(op) else op.flops // tp
        for op in tiny.ops
        if op.phase == "forward" and op.module.startswith("layers.")
    )
    d = res.to_dict()
    assert d["recompute_flops"] == tp * layer_fwd  # every layer once per micro-batch, split over M exactly
    assert d["total_flops"] == base.to_dict()["total_flops"] + d["recompute_flops"]
    assert d["redundant_flops"] == base.to_dict()["redundant_flops"]
    t = res.workload.traces[0]
    phase = _attrs(t, "phase")
    ids = t.ids.tolist()
    redone = {i for i, ph in zip(ids, phase) if ph == "recompute"}
    tp_fwd = [n for n, _ in _colls(t) if n.startswith("tp_fwd")]
    assert len(tp_fwd) == 2 * len([n for n, _ in _colls(base.workload.traces[0]) if n.startswith("tp_fwd")])
    # a backward reads its micro-batch's recomputed layer ops, never their first forward's
    mb = dict(zip(ids, _attrs(t, "micro_batch")))
    first_fwd = {
        i for i, ph, md in zip(ids, phase, _attrs(t, "module")) if ph == "forward" and md.startswith("layers.")
    }
    reads = {(mb[ids[r]], int(d)) for r, ph in enumerate(phase) if ph == "backward" for d in t.data_deps(r)}
    assert {d for _, d in reads} & redone
    assert not {d for m, d in reads if d in first_fwd and mb[d] == m}
    step = {
        p.recompute: simulate_on(parallelize(tiny.trace, p), resolve("ring-8")).step_ns
        for p in (Plan(tp=2, pp=2, dp=2), Plan(tp=2, pp=2, dp=2, recompute="full"))
    }
    assert step["full"] > step["none"]
    fsdp = [
        _colls(parallelize(tiny.trace, Plan(dp=2, zero=3, recompute=r)).traces[0], CollectiveType.ALL_GATHER)
        for r in ("none", "full")
    ]
    assert fsdp[0] == fsdp[1]


def test_fsdp_gathers_and_scatters_every_parameter(tiny):
    dp = 2
    w = parallelize(tiny.trace, Plan(dp=dp, zero=3))
    t = w.traces[0]
    total = tiny.params * 4
    ag = _colls(t, CollectiveType.ALL_GATHER)
    rs = _colls(t, CollectiveType.REDUCE_SCATTER)
    assert sum(s for n, s in ag if n.endswith("fwd")) == total // dp  # each rank holds 1/dp of the parameters
    assert sum(s for n, s in ag if n.endswith("bwd")) == total // dp
    assert sum(s for _, s in rs) == total
    opt = sum(op.flops for op in tiny.ops if op.phase == "optimizer")
    per_rank = int(t.num_ops[t.types == NodeType.COMP_NODE].sum())
    assert abs(per_rank - (tiny.flops - opt + opt / dp)) < len(tiny.ops)  # optimizer on the shard


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_shards_the_optimizer_and_gathers_each_bucket(tiny, zero):
    """ZeRO-1/2: DDP's buckets (all-reduced, or reduce-scattered at stage 2), the optimizer on the
    rank's 1/dp, then each bucket's parameters all-gathered (the shard each rank holds), after
    the optimizer ops of the bucket's modules."""
    dp = 4
    ddp = parallelize(tiny.trace, Plan(dp=dp)).traces[0]
    t = parallelize(tiny.trace, Plan(dp=dp, zero=zero)).traces[0]
    sync = _colls(ddp, CollectiveType.ALL_REDUCE)
    grads = _colls(t, CollectiveType.REDUCE_SCATTER if zero == 2 else CollectiveType.ALL_REDUCE)
    assert [s for _, s in grads] == [s for _, s in sync]  # the same buckets, in the same order
    ag = _colls(t, CollectiveType.ALL_GATHER)
    assert [s for _, s in ag] == [-(-s // dp) for _, s in sync] and all(
        n == f"zero{zero}_param_all_gather" for n, _ in ag
    )
    opt = sum(op.flops for op in tiny.ops if op.phase == "optimizer")
    per_rank = int(t.num_ops[t.types == NodeType.COMP_NODE].sum())
    assert abs(per_rank - (tiny.flops - opt + opt / dp)) < len(tiny.ops)  # optimizer on the shard
    coll = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    gathers = coll[t.comm_type[coll] == CollectiveType.ALL_GATHER]
    phase = dict(zip(t.ids.tolist(), _attrs(t, "phase")))
    for r in gathers.tolist():  # each waits for optimizer ops only
        assert {phase[int(d)] for d in t.data_deps(r)} == {"optimizer"}


@pytest.mark.parametrize("zero", [1, 2])
def test_overlapped_parameter_gathers_come_before_each_modules_first_forward(tiny, zero):
    """Megatron-Core's --overlap-param-gather in its steady state: the same gathers (sizes, in
    forward order: the reverse of the buckets'), issued at the step's start, one after the other;
    every first-micro-batch forward op of a bucket's module waits for its gather; the optimizer is
    followed by none; and the step is never longer than with the gathers after the optimizer."""
    dp = 4
    after = parallelize(tiny.trace, Plan(dp=dp, zero=zero)).traces[0]
    early = parallelize(tiny.trace, Plan(dp=dp, zero=zero, overlap_param_gather=True)).traces[0]
    ag_after = _colls(after, CollectiveType.ALL_GATHER)
    ag_early = _colls(early, CollectiveType.ALL_GATHER)
    assert [s for _, s in ag_early] == [s for _, s in reversed(ag_after)]
    coll = np.flatnonzero(early.types == NodeType.COMM_COLL_NODE)
    gathers = coll[early.comm_type[coll] == CollectiveType.ALL_GATHER].tolist()
    ids = early.ids.tolist()
    for prev, g in zip(gathers, gathers[1:]):  # a chain, nothing else before them
        assert set(early.data_deps(g)) == {ids[prev]}
    assert not len(early.data_deps(gathers[0]))
    phase = _attrs(early, "phase")
    waiting = {ids[g]: 0 for g in gathers}
    for r in range(len(early)):
        for d in early.data_deps(r):
            if int(d) in waiting:
                assert phase[r] == "forward"
                waiting[int(d)] += 1
    assert all(waiting.values())  # every gather is waited for by a forward op
    net = Network.simple("Switch", dp, 50, 500)
    steps = [
        simulate(Workload({r: parallelize(tiny.trace, plan).traces[r] for r in range(dp)}, plan.groups()), net,
                 with_device(resolve("switch").system, "a100")).step_ns
        for plan in (Plan(dp=dp, zero=zero), Plan(dp=dp, zero=zero, overlap_param_gather=True))
    ]  # fmt: skip
    assert steps[1] <= steps[0]
    with pytest.raises(ParallelizeError, match="ZeRO 1 or 2"):
        Plan(dp=dp, overlap_param_gather=True)


def test_refusals(tiny):
    with pytest.raises(ParallelizeError, match="micro-batches"):
        parallelize(tiny.trace, Plan(pp=2, micro_batches=3))
    with pytest.raises(ParallelizeError, match="pipeline stages"):
        parallelize(tiny.trace, Plan(pp=4))
    with pytest.raises(ParallelizeError, match="schedule"):
        Plan(schedule="zigzag")
    w = parallelize(tiny.trace, Plan(dp=2))
    with pytest.raises(ParallelizeError, match="compute nodes only"):  # a rank's trace, not the master
        parallelize(w.traces[0], Plan(dp=2))
    b = TraceBuilder()
    b.comp("mm", 10, num_ops=100)
    with pytest.raises(ParallelizeError, match="not a master trace"):
        parallelize(b.build(), Plan(dp=2))


def test_simulates_on_a_preset(tiny):
    w = parallelize(tiny.trace, Plan(tp=2, pp=2, dp=2))
    res = simulate_on(w, resolve("ring-8"))
    assert res.step_ns > 0 and len(res.finish_ns) == 8


def test_cli_writes_ranks_and_groups(tiny, tmp_path, capsys):
    master = tmp_path / "tiny.et"
    from chakra_trace.io.et import write_trace

    write_trace(tiny.trace, master)
    prefix = tmp_path / "out" / "job"
    rc = main(["parallelize", str(master), "--tp", "2", "--pp", "2", "--dp", "2", "-o", str(prefix), "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ranks"] == 8 and d["groups"] == 8 and len(d["stages"]) == 2
    groups = json.loads((tmp_path / "out" / "job.comm_groups.json").read_text())
    assert groups == {str(k): v for k, v in Plan(tp=2, pp=2, dp=2).groups().items()}
    back = Workload.open(prefix)
    assert back.ranks == list(range(8))
    rc = main(["simulate", str(prefix), "--system", "ring-8", "--device", "h100", "--json"])
    assert rc == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["recording_ns"] > 0


# --------------------------------------------------------------------------- DDP against a recording


def _recorded_all_reduces(path: Path, step: str = "ProfilerStep#2") -> list[int]:
    """Bytes of the gradient all-reduces DDP issued in one recorded step, in order."""
    nodes = json.loads(gzip.decompress(path.read_bytes()))["nodes"]
    by_id = {n["id"]: n for n in nodes}
    (root,) = [n for n in nodes if n["name"] == step]

    def in_step(n):
        while n is not None:
            if n["id"] == root["id"]:
                return True
            parent = by_id.get(n["ctrl_deps"])
            n = parent if parent is not n else None  # (the trace's root is its own parent)
        return False

    out = []
    for n in sorted(nodes, key=lambda n: n["id"]):
        if n["name"] == "c10d::allreduce_" and in_step(n):
            (shape,) = n["inputs"]["shapes"][0]
            assert n["inputs"]["types"][0] == "GenericList[Tensor(float)]"
            out.append(int(np.prod(shape)) * 4)
    return out


def test_ddp_buckets_equal_the_recorded_jobs():
    """The corpus's DDP job (TinyLM, bucket_cap_mb=0.1, 8 x 32 tokens per rank, 2 ranks): DDP's
    steady-state buckets, rebuilt in the order gradients became ready, and their all-reduces."""
    res = capture(tiny_lm, batch=8, seq=32)
    w = parallelize(res.trace, Plan(dp=2, bucket_mb=0.1))
    recorded = [_recorded_all_reduces(DDP_RECORDING.with_name(f"rank{r}.et.json.gz")) for r in (0, 1)]
    assert recorded[0] == recorded[1] and len(recorded[0]) == 4
    for r in (0, 1):
        ours = [s for _, s in _colls(w.traces[r], CollectiveType.ALL_REDUCE)]
        assert ours == recorded[r]  # count, sizes and order


def test_a_master_without_its_parameters_is_refused_for_data_parallelism(tiny):
    """An older capture lists no parameters: DP would get no gradient all-reduces, so it is refused."""
    import json as _json

    from chakra_trace.schema import proto as pb

    old = tiny.trace.copy()
    meta = pb.GlobalMetadata()
    meta.CopyFrom(old.metadata)
    for a in meta.attr:
        if a.name == "capture":
            about = _json.loads(a.string_val)
            about.pop("parameters", None)
            a.string_val = _json.dumps(about)
    old.metadata = meta
    with pytest.raises(ParallelizeError, match="parameters"):
        parallelize(old, Plan(dp=2))
    assert len(parallelize(old, Plan(tp=2))) == 2  # (tensor parallelism needs none)


# --------------------------------------------------------------------------- expert parallelism

EXPERTS, TOP_K = 4, 2  # the tiny-moe preset


@pytest.fixture(scope="module")
def tiny_moe():
    return capture(load_build(f"{GPT}:build"), {"preset": "tiny-moe"}, batch=BATCH, seq=SEQ)


def _in_experts(module: str) -> bool:
    return "experts" in module.split(".")


@pytest.mark.parametrize(
    "plan",
    [Plan(dp=4, ep=2), Plan(dp=2, ep=2, zero=2), Plan(tp=2, pp=2, dp=4, ep=2, zero=1), Plan(tp=2, dp=4, ep=4, sp=True)],
    ids=lambda p: p.describe(),
)
def test_expert_parallel_plans_validate(tiny_moe, plan):
    w = parallelize(tiny_moe.trace, plan)
    rep = validate_workload(w)
    assert not rep.issues, [str(i) for i in rep.issues[:5]]
    for g, members in w.groups.items():
        assert sorted(r for r, t in w.traces.items() if g in t.groups) == members


def test_expert_groups_are_consecutive_replicas():
    plan = Plan(tp=2, pp=1, dp=8, ep=4)
    groups = plan.groups()
    assert groups[plan.ep_group(1, 0, 5)] == [9, 11, 13, 15]  # replicas 4..7 of TP rank 1
    assert groups[plan.edp_group(1, 0, 5)] == [3, 11]  # replicas 1 and 5: the same experts
    assert len(groups) == 8 + 2 + 2 * 2 + 2 * 4
    assert sorted(map(int, groups)) == list(range(1, len(groups) + 1))
    with pytest.raises(ParallelizeError, match="divide"):
        Plan(dp=6, ep=4)
    with pytest.raises(ParallelizeError, match="FSDP"):
        Plan(dp=4, ep=2, zero=3)


def test_expert_parallel_all_to_alls_and_shards(tiny_moe):
    """Each MoE layer exchanges tokens x top_k x hidden bytes per micro-batch four times (dispatch
    and combine, and their gradients); expert parameters are bucketed apart, 1/ep of them per
    rank, over the expert-DP group; the experts' optimizer runs on 1/ep; the experts' forward and
    backward FLOPs per rank are the master's (every rank runs its experts on tokens from ep ranks)."""
    ep, dp, M = 2, 4, 2
    plan = Plan(dp=dp, ep=ep, micro_batches=M)
    w = parallelize(tiny_moe.trace, plan)
    t = w.traces[3]
    a2a = _colls(t, CollectiveType.ALL_TO_ALL)
    copies = BATCH // M * SEQ * TOP_K * HIDDEN * ITEM
    assert [s for _, s in a2a] == [copies] * (4 * LAYERS * M)
    assert [n for n, _ in a2a[:2]] == ["ep_dispatch_all_to_all", "ep_combine_all_to_all"]
    assert {n for n, _ in a2a[-2:]} == {"ep_combine_grad_all_to_all", "ep_dispatch_grad_all_to_all"}
    pg = _attrs(t, "pg_name")
    kinds: dict[str, set] = {}
    for name, group in zip(t.name_array.tolist(), pg):
        if group is not None:
            kinds.setdefault(str(name), set()).add(group)
    assert kinds["ep_dispatch_all_to_all"] == {plan.ep_group(0, 0, 3)}
    assert kinds["edp_bucket_all_reduce"] == {plan.edp_group(0, 0, 3)}
    assert kinds["dp_bucket_all_reduce"] == {plan.dp_group(0, 0)}
    about = json.loads(next(a.string_val for a in tiny_moe.trace.metadata.attr if a.name == "capture"))
    expert_bytes = sum(numel * size for name, numel, size, *_ in about["parameters"] if _in_experts(name))
    other_bytes = sum(numel * size for name, numel, size, *_ in about["parameters"] if not _in_experts(name))
    assert expert_bytes > 0
    assert sum(s for n, s in _colls(t) if n == "edp_bucket_all_reduce") == expert_bytes // ep
    assert sum(s for n, s in _colls(t) if n == "dp_bucket_all_reduce") == other_bytes
    ops = tiny_moe.ops
    expert_opt = sum(op.flops for op in ops if op.phase == "optimizer" and _in_experts(op.module))
    fb_experts = sum(op.flops for op in ops if op.phase != "optimizer" and _in_experts(op.module))
    comp = t.types == NodeType.COMP_NODE
    per_rank = int(t.num_ops[comp].sum())
    assert expert_opt > 0 and abs(per_rank - (tiny_moe.flops - expert_opt + expert_opt / ep)) < len(ops)
    phase, module = _attrs(t, "phase"), _attrs(t, "module")
    got = sum(
        f
        for f, ph, md, c in zip(t.num_ops.tolist(), phase, module, comp.tolist())
        if c and ph != "optimizer" and md and _in_experts(md)
    )
    assert got == fb_experts  # shared over micro-batches exactly, not divided by ep


def test_expert_parallel_shortcut_equals_the_full_run(tiny_moe):
    w = parallelize(tiny_moe.trace, Plan(tp=2, dp=32, ep=4))
    system = resolve("dgx-8x8")
    system = dataclasses.replace(system, system=with_device(system.system, "h100"))
    fast = simulate_on(w, system)
    full = simulate_on(w, system, shortcuts=False)
    assert fast.shortcuts and fast.step_ns == full.step_ns
    assert fast.finish_ns.tolist() == full.finish_ns.tolist()


def test_expert_parallelism_needs_experts(tiny):
    with pytest.raises(ParallelizeError, match="mixture of experts"):
        parallelize(tiny.trace, Plan(dp=2, ep=2))


def test_fp8_linears_run_at_fp8_with_transformer_engines_casts():
    """Plan.fp8: the layers' linears (not the LM head, not attention's batched matmuls) carry
    dtype fp8; before each forward linear not fed by a norm, and each backward input-gradient GEMM,
    a cast-transpose of 4 bytes per element of the GEMM's token-rows input; nothing without fp8."""
    cfg = {"layers": 2, "hidden": 64, "heads": 4, "ffn": 172, "vocab": 512, "fused": "te"}
    master = capture(load_build(f"{GPT}:build"), cfg, batch=BATCH, seq=SEQ, dtype="bfloat16", fold_views=True).trace
    plain = parallelize(master, Plan(tp=2, micro_batches=2)).traces[0]
    fp8 = parallelize(master, Plan(tp=2, micro_batches=2, fp8=True)).traces[0]
    assert "fp8_cast_transpose" not in set(map(str, plain.name_array))
    names = [str(x) for x in fp8.name_array]
    dtype = _attrs(fp8, "dtype")
    module = _attrs(fp8, "module")
    m = fp8.attr_array("gemm_m", np.int64)[0]
    k = fp8.attr_array("gemm_k", np.int64)[0]
    ids = fp8.ids.tolist()
    casts = [r for r, n in enumerate(names) if n == "fp8_cast_transpose"]
    assert casts
    for r in range(len(fp8)):
        if dtype[r] == "fp8":
            assert module[r].startswith("layers.") and names[r] in ("aten::mm", "aten::addmm")
    for c in casts:  # each feeds one FP8 GEMM whose rows are tokens, of its input's size
        users = [r for r in range(len(fp8)) if ids[c] in set(fp8.data_deps(r).tolist())]
        assert len(users) == 1 and dtype[users[0]] == "fp8"
        g = users[0]
        assert int(fp8.tensor_size[c]) == 4 * int(m[g]) * int(k[g])
    assert {module[c].rsplit(".", 1)[-1] for c in casts if _attrs(fp8, "phase")[c] == "forward"} == {
        "o_proj",
        "down_proj",
    }


def test_blocking_scatter_gather_pipeline_messages(tiny):
    """Megatron-LM's 2021 pipeline messages: with scatter/gather each TP rank sends 1/tp of the
    activation and the receiver all-gathers it over its TP group before using it; with blocking
    sends the next schedule step waits for them; blocking is never faster."""
    base = Plan(tp=2, pp=2, micro_batches=4)
    plain = parallelize(tiny.trace, base)
    sg = parallelize(tiny.trace, dataclasses.replace(base, scatter_gather=True, p2p_blocking=True))
    for r in (0, 2):  # a rank of each stage
        a, b = plain.traces[r], sg.traces[r]
        sa = a.comm_size[(a.types == NodeType.COMM_SEND_NODE) | (a.types == NodeType.COMM_RECV_NODE)]
        sb = b.comm_size[(b.types == NodeType.COMM_SEND_NODE) | (b.types == NodeType.COMM_RECV_NODE)]
        assert len(sa) == len(sb) and (sb * 2 == sa).all()
        names = [str(x) for x in b.name_array]
        ids = b.ids.tolist()
        for i in np.flatnonzero(b.types == NodeType.COMM_RECV_NODE).tolist():
            users = [j for j in range(len(b)) if ids[i] in set(b.data_deps(j).tolist())]
            assert [names[j] for j in users] in (["pp_gather_activation"], ["pp_gather_gradient"])
        for i in np.flatnonzero(b.types == NodeType.COMM_SEND_NODE).tolist():  # a later step waits for it
            assert any(ids[i] in set(b.data_deps(j).tolist()) for j in range(len(b))) or i == max(
                np.flatnonzero(b.types == NodeType.COMM_SEND_NODE).tolist()
            )
    net = Network.simple(["Switch", "Switch"], [2, 2], [100, 10], [500, 2000])
    system = with_device(resolve("switch").system, "a100")
    blocking = parallelize(tiny.trace, dataclasses.replace(base, p2p_blocking=True))
    assert simulate(blocking, net, system).step_ns >= simulate(plain, net, system).step_ns


@pytest.mark.parametrize(
    "plan",
    [
        dict(pp=2, dp=2, micro_batches=4),
        dict(pp=2, dp=2, micro_batches=4, virtual_stages=2),
        dict(tp=2, dp=2, micro_batches=4),
    ],
)
def test_gradient_accumulation_adds(tiny4, plan):
    """`grad_accum="add"`: from the second micro-batch on, one add per chunk, over the micro-batch
    the rank's gradient bytes three times (read both, write one: the DP buckets hold those
    gradients), which the buckets' all-reduces wait for; the FLOPs are the fused plan's, the job
    validates, and it is never faster."""
    fused = parallelize_detailed(tiny4.trace, Plan(**plan))
    added = parallelize_detailed(tiny4.trace, Plan(grad_accum="add", **plan))
    p = added.plan
    assert added.total_flops == fused.total_flops and not validate_workload(added.workload).issues
    for rank in (0, p.ranks - 1):
        t = added.workload.traces[rank]
        names = t.name_array
        rows = np.flatnonzero(names == "grad_accumulate")
        assert rows.size == (p.m - 1) * p.virtual_stages
        grads = int(t.comm_size[names == "dp_bucket_all_reduce"].sum())
        assert grads > 0 and int(t.tensor_size[rows].sum()) == 3 * grads * (p.m - 1)
        accum_ids = set(t.ids[rows].tolist())
        for r in np.flatnonzero(names == "dp_bucket_all_reduce"):
            deps = set(t.data[t.data_indptr[r] : t.data_indptr[r + 1]].tolist())
            assert deps & accum_ids, "a bucket's all-reduce waits for its gradients' last accumulation"
    system = resolve("dgx-b200")
    a, f = (simulate_on(x.workload, system).recording_ns for x in (added, fused))
    assert a > f
    assert Plan(grad_accum="add", **plan).fields()["grad_accum"] == "add" and "grad_accum" not in Plan(**plan).fields()
    with pytest.raises(ParallelizeError, match="grad_accum"):
        Plan(grad_accum="sum")
