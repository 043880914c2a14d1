"""`chakra parallelize --cp`: context parallelism as Megatron-LM runs it with Transformer Engine.

The tiny preset of examples/models/gpt.py (grouped-query attention: 4 query heads, 2 key/value
heads) is captured once. Expected values come from the model's configuration and the captured
ops' module names, never from the pass: each CP rank does 1/cp of every forward and backward op
(attention included: causal load balancing), the model's own ops (RoPE tables) whole, the
optimizer whole; K and V cross the CP group as Transformer Engine's ring (cp - 1 sends in
forward; K/V, K/V + dK/dV, dK/dV in backward) or as Llama 3's all-gather / reduce-scatter; the
gradients are reduced over dp x cp ranks.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed; capturing needs it")
pytestmark = pytest.mark.torch

from chakra_trace.capture import capture, load_build  # noqa: E402
from chakra_trace.cli import main  # noqa: E402
from chakra_trace.io.workload import Workload  # noqa: E402
from chakra_trace.schema.enums import CollectiveType, NodeType  # noqa: E402
from chakra_trace.simulate.config import Network  # noqa: E402
from chakra_trace.simulate.devices import with_device  # noqa: E402
from chakra_trace.simulate.presets import resolve, simulate_on  # noqa: E402
from chakra_trace.simulate.simulator import simulate  # noqa: E402
from chakra_trace.synthesize.parallel import ParallelizeError, Plan, parallelize, parallelize_detailed  # noqa: E402
from chakra_trace.validate.workload import validate_workload  # noqa: E402
from test_parallelize import BATCH, GPT, HIDDEN, ITEM, LAYERS, SEQ, _attrs, _colls  # noqa: E402

HEADS, KV_HEADS = 4, 2  # the tiny preset
HEAD_DIM = HIDDEN // HEADS
KV = 2 * BATCH * SEQ * KV_HEADS * HEAD_DIM * ITEM  # K and V of the whole batch (before GQA's expansion)


@pytest.fixture(scope="module")
def tiny():
    return capture(load_build(f"{GPT}:build"), {"preset": "tiny"}, batch=BATCH, seq=SEQ)


def _split_by_tp(module: str) -> bool:
    """Megatron's TP regions (attention, MLP) and vocab-parallel modules."""
    parts = module.split(".")
    return module in ("embed", "lm_head", "loss") or "attn" in parts or "mlp" in parts


def _per_rank(tiny, tp: int, cp: int, key: str) -> int:
    """One rank's FLOPs or bytes: forward and backward ops / cp (the model's own ops whole), the
    TP-split ones / tp as well; the optimizer / tp where split, never / cp."""
    total = 0
    for op in tiny.ops:
        div = tp if _split_by_tp(op.module) else 1
        if op.phase != "optimizer" and op.module != "":
            div *= cp
        total += getattr(op, key) // div
    return total


CP_PLANS = [
    Plan(cp=2),
    Plan(tp=2, cp=2),
    Plan(cp=4, cp_comm="all-gather"),
    Plan(tp=2, cp=2, pp=2, dp=2, sp=True, recompute="full"),
    Plan(cp=2, pp=2, micro_batches=4, virtual_stages=2, dp=2, zero=1),
    Plan(cp=2, dp=2, zero=3),
    Plan(tp=2, cp=2, dp=2, zero=2, cp_comm="all-gather"),
]


@pytest.mark.parametrize("plan", CP_PLANS, ids=lambda p: p.describe())
def test_cp_plans_validate(tiny, plan):
    if plan.virtual_stages > 1:
        master = capture(load_build(f"{GPT}:build"), {"preset": "tiny", "layers": 4}, batch=BATCH, seq=SEQ).trace
    else:
        master = tiny.trace
    w = parallelize(master, plan)
    assert w.ranks == list(range(plan.ranks))
    rep = validate_workload(w)
    assert not rep.issues, [str(i) for i in rep.issues[:5]]
    for g, members in w.groups.items():
        assert sorted(r for r, t in w.traces.items() if g in t.groups) == members


def test_ranks_and_groups_tp_cp_pp_dp():
    """rank = t + tp * (c + cp * (p + pp * d)); a CP group per (t, p, d), the data-parallel group
    with context parallelism per (t, p): dp x cp ranks."""
    plan = Plan(tp=2, cp=2, pp=2, dp=2, cp_comm="all-gather")
    assert plan.ranks == 16
    for r in range(16):
        t, p, d = plan.coords(r)
        assert plan.rank(t, p, d, plan.cp_rank(r)) == r
    assert (plan.coords(13), plan.cp_rank(13)) == ((1, 1, 1), 0)
    groups = plan.groups()
    assert groups[plan.cp_group(1, 1, 1)] == [13, 15]
    assert groups[plan.dp_group(0, 1)] == [4, 6, 12, 14]  # d x c
    assert groups[plan.tp_group(0, 0, 1)] == [2, 3]
    assert len(groups) == 8 + 4 + 8
    assert sorted(map(int, groups)) == list(range(1, len(groups) + 1))
    # the DP-with-CP group (gradients), and the CP group of all-gathers (the ring's sends need none)
    ring, gather = Plan(cp=2), Plan(cp=2, cp_comm="all-gather")
    assert ring.groups() == {ring.dp_group(0, 0): [0, 1]}
    assert gather.groups() == {gather.dp_group(0, 0): [0, 1], gather.cp_group(0, 0, 0): [0, 1]}


@pytest.mark.parametrize("tp,cp", [(1, 2), (2, 2), (1, 4), (2, 4)])
def test_flops_and_bytes_per_rank(tiny, tp, cp):
    res = parallelize_detailed(tiny.trace, Plan(tp=tp, cp=cp))
    flops, nbytes = _per_rank(tiny, tp, cp, "flops"), _per_rank(tiny, tp, cp, "bytes")
    for t in res.workload.traces.values():
        comp = t.types == NodeType.COMP_NODE
        assert int(t.num_ops[comp].sum()) == flops
        assert int(t.tensor_size[comp].sum()) == nbytes
    # attention's share: the master's / (tp x cp), split into cp equal ring steps
    sdpa = [op for op in tiny.ops if op.name.startswith("aten::_scaled_dot_product") and op.phase == "forward"]
    t0 = res.workload.traces[0]
    ops = _attrs(t0, "op")
    steps = [int(f) for f, o in zip(t0.num_ops.tolist(), ops) if o == sdpa[0].name]
    assert len(steps) == cp * LAYERS and sum(steps) == sum(op.flops // (tp * cp) for op in sdpa)
    # over all ranks: the master's forward and backward (less per-op rounding), the RoPE tables on
    # every CP rank, the optimizer on every CP rank
    d = res.to_dict()
    opt = sum(op.flops for op in tiny.ops if op.phase == "optimizer")
    assert d["total_flops"] == tp * cp * flops
    assert d["redundant_flops"] == d["total_flops"] - (tiny.flops - opt) - cp * opt


def test_activations_and_gemms_hold_seq_over_cp_tokens(tiny):
    tp, cp, M = 2, 2, 2
    w = parallelize(tiny.trace, Plan(tp=tp, cp=cp, pp=2, micro_batches=M))
    act = BATCH * SEQ * HIDDEN * ITEM // cp
    t = w.traces[0]
    ars = _colls(t, CollectiveType.ALL_REDUCE)
    assert {s for n, s in ars if n.startswith(("tp_fwd", "tp_bwd", "tp_embed"))} == {act // M}
    assert [s for n, s in _colls(w.traces[2 * tp], CollectiveType.ALL_REDUCE) if n.startswith("tp_loss")] == [
        BATCH * SEQ * 4 // cp // M
    ] * (3 * M)
    sends = t.types == NodeType.COMM_SEND_NODE
    pp_sends = [int(s) for s, n in zip(t.comm_size[sends].tolist(), t.name_array[sends]) if n.startswith("pp_")]
    assert pp_sends == [act // M] * M
    # a forward linear's M is the rank's tokens of one micro-batch (q_proj: hidden -> heads x head_dim / tp)
    ms = _attrs(t, "gemm_m")
    dims = {
        (m, n, k)
        for m, n, k, md, ph in zip(
            ms, _attrs(t, "gemm_n"), _attrs(t, "gemm_k"), _attrs(t, "module"), _attrs(t, "phase")
        )
        if md == "layers.0.attn.q_proj" and ph == "forward" and m is not None
    }
    assert dims == {(BATCH * SEQ // M // cp, HIDDEN // tp, HIDDEN)}


def _ring(t):
    """(name, size, peer) of a trace's CP sends and receives in order."""
    out = []
    for r in np.flatnonzero((t.types == NodeType.COMM_SEND_NODE) | (t.types == NodeType.COMM_RECV_NODE)).tolist():
        name = str(t.name_array[r])
        if name.startswith("cp_"):
            send = int(t.types[r]) == NodeType.COMM_SEND_NODE
            out.append((name, int(t.comm_size[r]), int(t.comm_dst[r] if send else t.comm_src[r])))
    return out


@pytest.mark.parametrize("cp", [2, 4])
def test_p2p_ring_of_k_and_v(tiny, cp):
    """Transformer Engine's AttnFuncWithCPAndKVP2P: per layer cp - 1 sends of this rank's K and V
    in forward; in backward K/V, then K/V with dK/dV (2x) cp - 2 times, then dK/dV: 2 (cp - 1)
    KV in all. Sends go to the next CP rank, receives come from the previous one."""
    tp = 2
    plan = Plan(tp=tp, cp=cp)
    w = parallelize(plan=plan, master=tiny.trace)
    kv = KV // (tp * cp)  # GQA: the key/value heads, this TP rank's, this CP rank's tokens
    for rank in (1, plan.rank(1, 0, 0, cp - 1)):
        c = plan.cp_rank(rank)
        nxt, prv = plan.rank(1, 0, 0, (c + 1) % cp), plan.rank(1, 0, 0, (c - 1) % cp)
        ring = _ring(w.traces[rank])
        fwd = [(n, s) for n, s, _ in ring if n == "cp_kv_send"][: LAYERS * (cp - 1)]
        assert fwd == [("cp_kv_send", kv)] * (LAYERS * (cp - 1))
        bwd_sends = [s for n, s, _ in ring if n.endswith("send")][LAYERS * (cp - 1) :]
        assert bwd_sends == ([kv] + [2 * kv] * (cp - 2) + [kv]) * LAYERS
        assert sum(bwd_sends) == LAYERS * 2 * (cp - 1) * kv
        assert {p for n, _, p in ring if n.endswith("send")} == {nxt}
        assert {p for n, _, p in ring if n.endswith("recv")} == {prv}
        assert [s for n, s, _ in ring if n.endswith("recv")] == [s for n, s, _ in ring if n.endswith("send")]


def test_all_gather_of_k_and_v(tiny):
    """Llama 3's (Transformer Engine's AttnFuncWithCPAndKVAllGather): all-gathers of K and of V
    before the forward and again before the backward (comm_size: the rank's chunk), reduce-scatters
    of dK and dV after it (comm_size: the gathered bytes), all in the CP group."""
    tp, cp = 2, 4
    plan = Plan(tp=tp, cp=cp, cp_comm="all-gather")
    w = parallelize(tiny.trace, plan)
    t = w.traces[3]
    half = KV // (tp * cp) // 2
    ag = [s for n, s in _colls(t, CollectiveType.ALL_GATHER) if n.startswith("cp_")]
    rs = [s for n, s in _colls(t, CollectiveType.REDUCE_SCATTER) if n.startswith("cp_")]
    assert ag == [half] * (4 * LAYERS)
    assert rs == [cp * half] * (2 * LAYERS)
    assert not _ring(t)
    groups = {g for g, n in zip(_attrs(t, "pg_name"), t.name_array.tolist()) if str(n).startswith("cp_")}
    assert groups == {plan.cp_group(1, 0, 0)}
    assert w.groups[plan.cp_group(1, 0, 0)] == [1, 3, 5, 7]


def test_gradients_reduce_over_dp_and_cp(tiny):
    """Megatron reduces gradients over the data-parallel group with context parallelism: with
    dp 1 the CP ranks still all-reduce; ZeRO shards over dp x cp."""
    for plan in (Plan(cp=2), Plan(cp=2, dp=2)):
        w = parallelize(tiny.trace, plan)
        t = w.traces[1]
        (ar,) = _colls(t, CollectiveType.ALL_REDUCE)
        assert ar[1] == tiny.params * ITEM
        pg = {g for g, n in zip(_attrs(t, "pg_name"), t.name_array.tolist()) if n == "dp_bucket_all_reduce"}
        assert [len(w.groups[g]) for g in pg] == [plan.dp * plan.cp]
    t = parallelize(tiny.trace, Plan(cp=2, dp=2, zero=1)).traces[0]
    assert [s for _, s in _colls(t, CollectiveType.ALL_GATHER)] == [-(-tiny.params * ITEM // 4)]


def test_cp_simulates_both_ways(tiny):
    slow = dataclasses.replace(resolve("ring-8").system, roofline_enabled=True, peak_perf=0.01, local_mem_bw=0.01)
    for comm in ("p2p", "all-gather"):
        plan = Plan(tp=2, cp=2, pp=2, micro_batches=2, cp_comm=comm)
        res = simulate(parallelize(tiny.trace, plan), Network.simple("Ring", plan.ranks, 50, 500), slow)
        assert res.step_ns > 0 and len(res.finish_ns) == plan.ranks


def test_refusals(tiny):
    with pytest.raises(ParallelizeError, match="load-balanced"):
        parallelize(tiny.trace, Plan(cp=3))  # 16 tokens into 6 chunks
    with pytest.raises(ParallelizeError, match="load-balanced"):
        parallelize(tiny.trace, Plan(cp=16))
    with pytest.raises(ParallelizeError, match="cp_comm"):
        Plan(cp=2, cp_comm="ring")
    with pytest.raises(ParallelizeError, match="expert"):
        Plan(cp=2, dp=2, ep=2)
    unfused = capture(load_build(f"{GPT}:build"), {"preset": "tiny", "attention": "unfused"}, batch=BATCH, seq=SEQ)
    with pytest.raises(ParallelizeError, match="fused attention"):
        parallelize(unfused.trace, Plan(cp=2))


def test_cp_1_writes_the_plan_as_before(tiny):
    """A plan without context parallelism writes no cp fields into its traces' metadata (so its
    traces are byte for byte the ones written before CP existed: tests/test_parallelize.py)."""
    for plan, has in ((Plan(tp=2), False), (Plan(tp=2, cp=2), True)):
        meta = {a.name: a.string_val for a in parallelize(tiny.trace, plan).traces[0].metadata.attr}
        assert ("cp" in json.loads(meta["plan"])) == has


def test_cli(tiny, tmp_path, capsys):
    from chakra_trace.io.et import write_trace

    master = tmp_path / "tiny.et"
    write_trace(tiny.trace, master)
    prefix = tmp_path / "out" / "job"
    argv = ["parallelize", str(master), "--tp", "2", "--cp", "2", "--cp-comm", "all-gather", "--dp", "2"]
    assert main([*argv, "-o", str(prefix), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    plan = Plan(tp=2, cp=2, dp=2, cp_comm="all-gather")
    assert d["ranks"] == 8 and d["plan"]["cp"] == 2 and d["stages"][0]["ranks"] == list(range(8))
    groups = json.loads((tmp_path / "out" / "job.comm_groups.json").read_text())
    assert groups == {str(k): v for k, v in plan.groups().items()}
    assert Workload.open(prefix).ranks == list(range(8))
    assert main(["parallelize", str(master), "--cp", "3"]) != 0
    assert "load-balanced" in capsys.readouterr().err


def test_symmetry_shortcut_equals_the_full_run(tiny):
    """Replicas of one CP ring run one schedule: the simulator's symmetric-NPU shortcut (ring peers
    shifted with the rest) gives the full run's times."""
    w = parallelize(tiny.trace, Plan(tp=2, cp=4, dp=8))
    system = resolve("dgx-8x8")
    system = dataclasses.replace(system, system=with_device(system.system, "h100"))
    fast, full = simulate_on(w, system), simulate_on(w, system, shortcuts=False)
    assert fast.shortcuts and fast.step_ns == full.step_ns
    assert fast.finish_ns.tolist() == full.finish_ns.tolist()
