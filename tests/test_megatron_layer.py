"""Megatron-LM's GPT layer in examples/models/gpt.py (unfused core attention, dropout, the fused
kernels) and selective activation recomputation (`Plan(recompute="selective")`).

Expected values are hand counts of what each kernel reads and writes and Megatron-LM's FLOPs
formula (Narayanan et al. 2021, eq. 3), computed here from the configuration, never from the
code under test.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed; capturing needs it")
pytestmark = pytest.mark.torch

from chakra_trace.capture import capture, load_build  # noqa: E402
from chakra_trace.cli import main  # noqa: E402
from chakra_trace.synthesize.parallel import ParallelizeError, Plan, parallelize_detailed  # noqa: E402
from test_capture import tiny_lm  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "models" / "gpt.py"
B, S, L, H, A, V = 2, 16, 2, 64, 4, 256  # batch, seq, layers, hidden, heads, vocab
F = 4 * H  # the MLP's width
HALF, MASK = 2, 1  # bytes per fp16 element and per mask element
MEGATRON = {"preset": "megatron-sc21", "layers": L, "hidden": H, "heads": A, "vocab": V, "max_seq": 64}


@pytest.fixture(scope="module")
def build():
    return load_build(f"{GPT}:build")


@pytest.fixture(scope="module")
def megatron(build):
    return capture(build, MEGATRON, batch=B, seq=S, dtype="float16", optimizer=None)


def _layer0(r, phase: str) -> list:
    return [op for op in r.ops if op.phase == phase and op.module.startswith("layers.0") and not op.view]


def _named(ops: list, name: str) -> list:
    return [op for op in ops if op.name.split(".")[0] == name]


def test_each_fused_kernel_is_one_node_with_the_kernels_bytes(megatron):
    """Per layer and micro-batch: one node per Megatron kernel, its bytes what the kernel reads and
    writes (fp16 activations, one-byte dropout masks), its FLOPs per element the sum of the rules
    of the ops it fuses."""
    fwd, bwd = _layer0(megatron, "forward"), _layer0(megatron, "backward")
    t, scores = B * S, B * A * S * S  # tokens; attention scores of the layer
    expected = {  # (phase, op) -> (count, bytes each, FLOPs each)
        ("forward", "megatron::scaled_upper_triang_masked_softmax"): (1, 2 * scores * HALF, 7 * scores),
        ("backward", "megatron::scaled_upper_triang_masked_softmax_backward"): (1, 3 * scores * HALF, 5 * scores),
        ("forward", "aten::native_dropout"): (1, 2 * scores * HALF + scores * MASK, 4 * scores),
        ("backward", "aten::native_dropout_backward"): (1, 2 * scores * HALF + scores * MASK, scores),
        ("forward", "megatron::bias_gelu"): (1, (2 * t * F + F) * HALF, 9 * t * F),
        ("backward", "megatron::bias_gelu_backward"): (1, (3 * t * F + F) * HALF, 11 * t * F),
        ("forward", "megatron::bias_dropout_add"): (2, (3 * t * H + H) * HALF + t * H * MASK, 4 * t * H),
        ("backward", "megatron::bias_dropout_add_backward"): (2, 2 * t * H * HALF + t * H * MASK, t * H),
        # Q·Kᵀ by baddbmm with beta 0: Q and K read, the scores written (the buffer is not read)
        ("forward", "aten::baddbmm"): (1, (2 * t * H + scores) * HALF, 2 * B * S * S * H),
        ("forward", "aten::bmm"): (1, (scores + 2 * t * H) * HALF, 2 * B * S * S * H),
        ("forward", "aten::native_layer_norm"): (2, None, None),
    }
    for (phase, name), (count, nbytes, flops) in expected.items():
        ops = _named(fwd if phase == "forward" else bwd, name)
        assert len(ops) == count, (phase, name)
        for op in ops:
            if nbytes is not None:
                assert op.bytes == nbytes, (phase, name)
                assert op.flops == flops, (phase, name)
    # nothing unfused left where a kernel is: no gelu, softmax or separate bias add in the layer
    names = Counter(op.name.split(".")[0] for op in fwd)
    assert not {"aten::gelu", "aten::_softmax", "aten::masked_fill", "aten::masked_fill_"} & set(names)
    assert names["aten::addmm"] == 1  # only the QKV projection adds its bias in its GEMM (one GEMM for Q, K, V)
    assert {op.module for op in _named(fwd, "aten::baddbmm") + _named(fwd, "aten::bmm")} == {
        "layers.0.attn.core_attention"
    }


def test_matmul_flops_are_megatrons_formula(megatron):
    """Forward + backward matmul FLOPs = 72·B·s·l·h²·(1 + s/6h + V/12lh) exactly (no
    recomputation); the rest (norms, softmax, dropout, GeLU, loss) is a small addition."""
    megatron_formula = 72 * B * S * L * H * H * (1 + S / (6 * H) + V / (12 * L * H))
    by_phase = megatron.flops_by_phase()
    matmul = sum(op.flops for op in megatron.ops if op.flops_source == "torch")
    assert matmul == round(megatron_formula)
    assert megatron_formula < by_phase["forward"] + by_phase["backward"] < 1.1 * megatron_formula


def test_unfused_attention_without_fusion(build):
    """attention unfused, fused none: masked_fill + softmax + native_dropout, the bias adds in
    the GEMMs, dropout and add on each residual branch."""
    cfg = {**MEGATRON, "fused": "none", "fused_qkv": False}
    r = capture(build, cfg, batch=B, seq=S, optimizer=None)
    fwd = Counter(op.name.split(".")[0] for op in _layer0(r, "forward"))
    assert fwd["aten::masked_fill_"] == fwd["aten::_softmax"] == fwd["aten::baddbmm"] == 1
    assert fwd["aten::native_dropout"] == 3  # attention probabilities and the two residual branches
    assert fwd["aten::addmm"] == 6 and fwd["aten::gelu"] == 1  # q, k, v, o, up, down with their bias
    assert not any(op.name.startswith("megatron::") for op in r.ops)


def test_refusals(build):
    with pytest.raises(ValueError, match="need bias"):
        build(**{**MEGATRON, "bias": False})
    with pytest.raises(ValueError, match="attention 'flash'"):
        build(**{**MEGATRON, "attention": "flash"})
    with pytest.raises(ValueError, match="fused_qkv needs"):
        build(**{**MEGATRON, "kv_heads": 2})


def test_kernels_gradients(build):
    """The ops' own backward formulas against autograd's numerical gradients (float64); the ops
    are registered when gpt.py loads."""
    ops = torch.ops.megatron
    x = torch.randn(3, 2, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    res = torch.randn(3, 2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: ops.bias_gelu(a, b), (x, bias))
    assert torch.autograd.gradcheck(lambda a, b, c: ops.bias_dropout_add(a, b, c, 0.0)[0], (x, bias, res))
    scores = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: ops.scaled_upper_triang_masked_softmax(s, 0.5), (scores,))
    probs = ops.scaled_upper_triang_masked_softmax(scores, 0.5)
    assert torch.allclose(probs, torch.softmax((0.5 * scores).masked_fill(torch.ones(4, 4).triu(1).bool(), -1e9), -1))


# --------------------------------------------------------------------------- selective recomputation


@pytest.fixture(scope="module")
def unfused(build):
    return capture(build, MEGATRON, batch=B, seq=S)


def _recomputed(res) -> Counter:
    t = res.workload.traces[0]
    phase = t.attr_array("phase")[0].tolist()
    module = t.attr_array("module")[0].tolist()
    return Counter((m, n) for ph, m, n in zip(phase, module, t.name_array.tolist()) if ph == "recompute")


def test_selective_recomputes_the_core_attention(unfused):
    M, tp = 2, 2
    plans = {r: Plan(tp=tp, pp=2, micro_batches=M, recompute=r) for r in ("none", "selective", "full")}
    res = {r: parallelize_detailed(unfused.trace, p) for r, p in plans.items()}
    selective, full = _recomputed(res["selective"]), _recomputed(res["full"])
    assert selective and not selective - full and full - selective  # a strict subset of full's ops
    assert {m for m, _ in selective} == {"layers.0.attn.core_attention"}  # stage 0 holds layer 0
    core = [op for op in unfused.ops if op.phase == "forward" and "core_attention" in op.module.split(".")]
    d = res["selective"].to_dict()
    assert d["recompute_flops"] == tp * sum(op.flops // tp for op in core)  # the core's forward, once
    matmuls = sum(op.flops for op in core if op.name.split(".")[0] in ("aten::baddbmm", "aten::bmm"))
    assert matmuls == 4 * B * S * S * H * L  # Q·Kᵀ and ·V: 4·b·s²·h per layer
    assert d["total_flops"] == res["none"].to_dict()["total_flops"] + d["recompute_flops"]
    assert 0 < d["recompute_flops"] < res["full"].to_dict()["recompute_flops"]


def test_selective_adds_nothing_to_fused_attention(build):
    """SDPA recomputes its scores inside its own backward: selective recomputation adds nothing."""
    r = capture(build, {**MEGATRON, "attention": "sdpa"}, batch=B, seq=S, optimizer=None)
    res = parallelize_detailed(r.trace, Plan(pp=2, recompute="selective"))
    assert res.to_dict()["recompute_flops"] == 0 and not _recomputed(res)


def test_selective_needs_a_core_attention():
    r = capture(tiny_lm, batch=2, seq=8, optimizer=None)  # torch's MultiheadAttention
    with pytest.raises(ParallelizeError, match="core_attention"):
        parallelize_detailed(r.trace, Plan(recompute="selective"))


def test_cli_recompute_selective(unfused, tmp_path, capsys):
    from chakra_trace.io.et import write_trace

    master = tmp_path / "m.et"
    write_trace(unfused.trace, master)
    assert main(["parallelize", str(master), "--pp", "2", "--recompute", "selective", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["recompute_flops"] > 0


def test_rescaled_megatron_capture_equals_a_capture_there(build):
    """`--shape-rules` and `chakra transform`: the fused kernels are costed by name, so a rescaled
    master holds what a capture at that batch and sequence holds."""
    from chakra_trace.synthesize.transforms import rescale

    base = capture(build, MEGATRON, batch=4, seq=16, dtype="float16", shape_rules=True, fold_views=True)
    assert base.shape_rules["without_rule"] == 0
    real = capture(build, MEGATRON, batch=2, seq=32, dtype="float16", shape_rules=True, fold_views=True)
    got = rescale(base.trace, 2, 32)
    assert got.num_ops.tolist() == real.trace.num_ops.tolist()
    assert got.tensor_size.tolist() == real.trace.tensor_size.tolist()
