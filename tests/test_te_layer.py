"""Megatron-Core's layer with Transformer Engine's kernels in examples/models/gpt.py (`"fused":
"te"`, examples/models/te_kernels.py) and the distributed optimizer's fused Adam.

Expected bytes are hand counts of what each kernel reads and writes (bf16 activations, fp32
statistics, angles, softmax, main weights and moments), computed here from the configuration,
never from the code under test; the kernels' arithmetic is checked against autograd's numerical
gradients and against PyTorch's own ops.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed; capturing needs it")
pytestmark = pytest.mark.torch

from chakra_trace.capture import capture, load_build  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"
GPT = MODELS / "gpt.py"
B, S, L, H, A, F, V = 2, 16, 2, 64, 4, 128, 256  # batch, seq, layers, hidden, heads, ffn, vocab
D = H // A  # head dim
BF, FP = 2, 4  # bytes per bf16 and fp32 element
T = B * S  # tokens
LLAMA = {"layers": L, "hidden": H, "heads": A, "ffn": F, "vocab": V}
GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


@pytest.fixture(scope="module")
def build():
    return load_build(f"{GPT}:build")


@pytest.fixture(scope="module")
def tk(build):
    sys.path.insert(0, str(MODELS))  # (gpt.py imported it as te_kernels)
    try:
        import te_kernels
    finally:
        sys.path.remove(str(MODELS))
    return te_kernels


def _capture(build, config: dict, **kw):
    return capture(build, config, batch=B, seq=S, dtype="bfloat16", fold_views=True, **kw)


@pytest.fixture(scope="module")
def te(build, tk):
    return _capture(build, {**LLAMA, "fused": "te"}, optimizer=tk.DistributedFusedAdam)


@pytest.fixture(scope="module")
def unfused(build):
    return _capture(build, LLAMA, optimizer=None)


def _ops(r, phase: str, module: str = "layers.0") -> list:
    return [op for op in r.ops if op.phase == phase and op.module.startswith(module)]


def _names(ops: list) -> Counter:
    return Counter(op.name.split(".")[0] for op in ops)


def test_each_te_kernel_is_one_node_with_the_kernels_bytes(te):
    """Per layer and micro-batch: one node per kernel, its bytes what the kernel reads and writes,
    its FLOPs per element the sum of the rules of the unfused ops it replaces."""
    th, tf = T * H, T * F
    expected = {  # (phase, op) -> (count, bytes each, FLOPs each)
        # x, weight read; y, rstd (fp32 per token) written
        ("forward", "te::rmsnorm_fwd"): (2, 2 * th * BF + H * BF + T * FP, 4 * th),
        # dy, x, rstd, weight read; dx, dweight written
        ("backward", "te::rmsnorm_bwd"): (2, 3 * th * BF + T * FP + 2 * H * BF, 10 * th),
        # one per tensor (q, then k): t and the fp32 (s, d) angles read, out written
        ("forward", "te::fused_rope_fwd"): (2, 2 * th * BF + S * D * FP, 4 * th),
        ("backward", "te::fused_rope_bwd"): (2, 2 * th * BF + S * D * FP, 4 * th),
        ("forward", "te::swiglu"): (1, 3 * tf * BF, 6 * tf),  # gate, up read; out written
        ("backward", "te::swiglu_bwd"): (1, 5 * tf * BF, 9 * tf),  # dy, gate, up read; dgate, dup
    }
    fwd, bwd = _ops(te, "forward"), _ops(te, "backward")
    for (phase, name), (count, nbytes, flops) in expected.items():
        ops = [op for op in (fwd if phase == "forward" else bwd) if op.name.split(".")[0] == name]
        assert len(ops) == count, (phase, name)
        assert all(op.bytes == nbytes and op.flops == flops for op in ops), (phase, name)
    # nothing of the unfused norm, RoPE or activation left in the layer
    left = set(_names(fwd)) | set(_names(bwd))
    unfused = {"aten::pow", "aten::rsqrt", "aten::mean", "aten::_to_copy", "aten::cat", "aten::neg", "aten::silu"}
    assert not left & (unfused | {"aten::silu_backward", "aten::slice_backward", "aten::mul"})
    # the final norm is TE's too
    assert _names(_ops(te, "forward", "norm"))["te::rmsnorm_fwd"] == 1


def test_the_loss_is_megatrons_fused_cross_entropy(te):
    """Three forward kernels and one backward kernel over the (t, V) logits, in fp32: the bf16
    logits read and written as fp32, then fp32 passes; no log_softmax / nll_loss."""
    tv = T * V
    got = {op.name.split(".")[0]: op.bytes for op in te.ops if op.module == "loss" and op.name.startswith("te::")}
    assert got == {
        "te::ce_logits_max": tv * BF + tv * FP + T * FP,  # logits read; fp32 copy and row max written
        "te::ce_exp_sum": 2 * tv * FP + T * 8 + T * FP + 2 * T * FP,  # + targets and max read; exp, [picked; sum]
        "te::ce_softmax_loss": 2 * tv * FP + 2 * T * FP + T * FP,  # exp, [picked; sum] read; softmax, loss
        "te::ce_bwd": tv * FP + T * 8 + T * FP + tv * BF,  # softmax, targets, dloss read; bf16 grad written
    }
    assert not {"aten::_log_softmax", "aten::nll_loss_forward"} & set(_names(te.ops))


def test_matmul_flops_are_unchanged(te, unfused):
    """The fusions touch no GEMM and no attention: their FLOPs are the unfused capture's, op for
    op; the step has fewer nodes and fewer bytes outside them."""

    def part(r, phases=("forward", "backward")):
        ops = [op for op in r.ops if op.phase in phases]
        mm = Counter((op.module, op.name, op.flops) for op in ops if op.name.split(".")[0] in GEMMS)
        attn = [op.flops for op in ops if "scaled_dot_product" in op.name]
        other = sum(
            op.bytes for op in ops if op.name.split(".")[0] not in GEMMS and "scaled_dot_product" not in op.name
        )
        return mm, attn, other, len(ops)

    mm_te, attn_te, other_te, n_te = part(te)
    mm_un, attn_un, other_un, n_un = part(unfused)
    assert mm_te == mm_un and attn_te == attn_un
    assert n_te < n_un
    layer = [
        sum(op.bytes for op in _ops(r, ph) if op.flops_source != "torch")
        for r in (te, unfused)
        for ph in ("forward", "backward")
    ]
    assert layer[0] < layer[2] / 2 and layer[1] < layer[3] / 2  # forward and backward of a layer


def test_layernorm_and_squared_relu(build):
    """Nemotron-4's kind of layer: TE's LayerNorm and the fused squared ReLU."""
    r = _capture(build, {**LLAMA, "norm": "layer", "mlp": "squared_relu", "fused": "te"}, optimizer=None)
    th, tf = T * H, T * F
    fwd, bwd = _ops(r, "forward"), _ops(r, "backward")
    expected = {  # (ops, name) -> (count, bytes, FLOPs)
        ("f", "te::layernorm_fwd"): (2, 2 * th * BF + 2 * H * BF + 2 * T * FP, 8 * th),  # x, w, b; y, mu, rstd
        ("b", "te::layernorm_bwd"): (
            2,
            3 * th * BF + 2 * T * FP + 3 * H * BF,
            14 * th,
        ),  # dy, x, mu, rstd, w; dx, dw, db
        ("f", "te::squared_relu"): (1, 2 * tf * BF, 2 * tf),
        ("b", "te::squared_relu_bwd"): (1, 3 * tf * BF, 3 * tf),
    }
    for (which, name), (count, nbytes, flops) in expected.items():
        ops = [op for op in (fwd if which == "f" else bwd) if op.name.split(".")[0] == name]
        assert len(ops) == count and all(op.bytes == nbytes and op.flops == flops for op in ops), name
    assert not {"aten::relu", "aten::square", "aten::pow", "aten::native_layer_norm"} & set(_names(fwd))


def _check_adam(r):
    """The distributed optimizer's fused Adam: one op per parameter, in its module, reading the
    bf16 gradient and the fp32 main weight and moments, writing them and the bf16 weight (28
    bytes a parameter, 11 FLOPs)."""
    opt = [op for op in r.ops if op.phase == "optimizer" and op.name.split(".")[0] == "te::fused_adam"]
    params = {}
    for a in r.trace.metadata.attr:
        if a.name == "capture":
            params = {p[0]: int(p[1]) for p in json.loads(a.string_val)["parameters"]}
    assert len(opt) == len(params)  # (the embedding and the LM head are not tied here)
    by_module = Counter(op.module for op in opt)
    assert by_module == Counter(name.rpartition(".")[0] for name in params)
    assert sorted(op.bytes for op in opt) == sorted(n * (BF + 3 * FP + 3 * FP + BF) for n in params.values())
    assert sorted(op.flops for op in opt) == sorted(11 * n for n in params.values())
    assert len([op for op in r.ops if op.phase == "optimizer"]) == len(opt)  # nothing else: no copies


def test_fused_adam_by_class_and_by_name(te, build):
    """By class, and by FILE.py:CLASS (the command line's form)."""
    _check_adam(te)
    by_name = _capture(build, {**LLAMA, "layers": 1}, optimizer=f"{MODELS / 'te_kernels.py'}:DistributedFusedAdam")
    _check_adam(by_name)


def test_refusals(build):
    with pytest.raises(ValueError, match="expected none, megatron or te"):
        build(**{**LLAMA, "fused": "apex"})
    from chakra_trace.capture.step import CaptureError

    with pytest.raises(CaptureError, match="not a torch.optim.Optimizer"):
        capture(build, LLAMA, batch=1, seq=4, optimizer=dict)


def test_kernels_against_autograd_and_torch(tk):
    """Each op's own backward against autograd's numerical gradients (float64), and the forward
    against PyTorch's ops."""
    ops = torch.ops.te
    f64 = dict(dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 2, 6, **f64)
    w, b = torch.randn(6, **f64), torch.randn(6, **f64)
    assert torch.autograd.gradcheck(lambda a, c: ops.rmsnorm_fwd(a, c, 1e-5)[0], (x, w))
    assert torch.allclose(ops.rmsnorm_fwd(x, w, 1e-5)[0], torch.nn.functional.rms_norm(x, (6,), w, 1e-5))
    assert torch.autograd.gradcheck(lambda a, c, d: ops.layernorm_fwd(a, c, d, 1e-5)[0], (x, w, b))
    assert torch.allclose(ops.layernorm_fwd(x, w, b, 1e-5)[0], torch.nn.functional.layer_norm(x, (6,), w, b, 1e-5))
    freqs = torch.rand(4, 6, dtype=torch.float64)
    for seq_first, shape in ((False, (2, 3, 4, 6)), (True, (4, 2, 3, 6))):
        t = torch.randn(*shape, **f64)
        assert torch.autograd.gradcheck(lambda a, sf=seq_first: ops.fused_rope_fwd(a, freqs, sf), (t,))
    t = torch.randn(2, 3, 4, 6, dtype=torch.float64)
    rotated = torch.cat((-t[..., 3:], t[..., :3]), -1)
    assert torch.allclose(ops.fused_rope_fwd(t, freqs, False), t * freqs.cos() + rotated * freqs.sin())
    g, u = torch.randn(3, 5, **f64), torch.randn(3, 5, **f64)
    assert torch.autograd.gradcheck(lambda a, c: ops.swiglu(a, c), (g, u))
    assert torch.allclose(ops.swiglu(g, u), torch.nn.functional.silu(g) * u)
    assert torch.autograd.gradcheck(lambda a: ops.squared_relu(a), (g,))
    logits, target = torch.randn(2, 3, 7, **f64), torch.randint(0, 7, (2, 3))
    assert torch.autograd.gradcheck(lambda a: tk.cross_entropy(a, target), (logits,))
    assert torch.allclose(
        tk.cross_entropy(logits, target), torch.nn.functional.cross_entropy(logits.view(-1, 7), target.view(-1))
    )


def test_fused_adam_is_adamw(tk):
    """Two steps of the fused optimizer (fp32 weights) = two steps of torch's AdamW."""
    torch.manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(5, 3))
    p2 = torch.nn.Parameter(p1.detach().clone())
    ours = tk.DistributedFusedAdam([p1], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ref = torch.optim.AdamW([p2], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for _ in range(2):
        grad = torch.randn(5, 3)
        p1.grad, p2.grad = grad.clone(), grad.clone()
        ours.step()
        ref.step()
    assert torch.allclose(p1, p2, atol=1e-6)


def test_rescaled_te_capture_equals_a_capture_there(build, tk):
    """The kernels are costed by name: a rescaled master holds what a capture there holds."""
    from chakra_trace.synthesize.transforms import rescale

    kw = dict(dtype="bfloat16", shape_rules=True, fold_views=True, optimizer=tk.DistributedFusedAdam)
    base = capture(build, {**LLAMA, "fused": "te"}, batch=4, seq=16, **kw)
    assert base.shape_rules["without_rule"] == 0
    real = capture(build, {**LLAMA, "fused": "te"}, batch=2, seq=32, **kw)
    got = rescale(base.trace, 2, 32)
    assert got.num_ops.tolist() == real.trace.num_ops.tolist()
    assert got.tensor_size.tolist() == real.trace.tensor_size.tolist()


def test_parallelizes(te):
    """TP, PP and the distributed optimizer over a TE capture: every fused-Adam op sharded."""
    from chakra_trace.synthesize.parallel import Plan, parallelize_detailed

    d = parallelize_detailed(te.trace, Plan(tp=2, pp=2, dp=2, zero=1, micro_batches=2)).to_dict()
    assert d["total_flops"] > 0
