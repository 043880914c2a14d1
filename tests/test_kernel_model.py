"""The device kernel model (`schema.kernel_models`, `simulate.kernels`): each compute node as a
GPU's kernels run it. Invariants over every node of parallelized jobs rather than values for one:
never faster than the datasheet roofline, more work never faster, a faster device never slower,
a GEMM's recorded dimensions agree with its FLOPs; and the one value the model is built to
reproduce: the matmul benchmark's best shape runs at its measured rate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.errors import ChakraError
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.devices import device_spec
from chakra_trace.schema.kernel_models import KERNEL_MODELS, KernelModel, gemm_quantization, kernel_model
from chakra_trace.simulate.costs import durations, typed_peaks
from chakra_trace.simulate.devices import with_device
from chakra_trace.simulate.kernels import ATTENTION, GEMM, OTHER, kernel_ns, op_classes
from chakra_trace.simulate.presets import preset_system
from chakra_trace.simulate.rules import DEFAULT

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "models" / "gpt.py"


def _system(dev: str, kernels: bool):
    return with_device(preset_system(["ring"]), dev, kernels=kernels)


def _node_ns(trace, dev: str, kernels: bool) -> np.ndarray:
    s = _system(dev, kernels)
    return durations(
        trace, s, None, comm="recorded", rules=DEFAULT, warn=lambda m: None, peaks=typed_peaks(trace, s, DEFAULT)
    )


def _gemm_trace(shapes, name="aten::mm"):
    b = TraceBuilder()
    for m, n, k in shapes:
        b.add(
            name,
            num_ops=2 * m * n * k,
            tensor_size=2 * (m * k + k * n + m * n),
            gemm_m=m,
            gemm_n=n,
            gemm_k=k,
            duration_unknown=True,
            is_cpu_op=False,
        )
    return b.build()


def test_quantization_is_a_share():
    assert gemm_quantization(256 * 4, 128 * 27, 1, 108, (256, 128)) == 1.0  # 108 whole tiles: one full wave
    assert gemm_quantization(256 * 4 + 1, 128 * 27, 1, 108, (256, 128)) < 0.9  # a row of tiles mostly padding
    rng = np.random.default_rng(0)
    for m, n, b in rng.integers(1, 20000, size=(200, 3)):
        q = gemm_quantization(int(m), int(n), int(b % 8 + 1), 132, (128, 256))
        assert 0 < q <= 1


@pytest.mark.parametrize("dev", sorted(KERNEL_MODELS))
def test_the_benchmarks_best_shape_runs_at_its_measured_rate(dev):
    km = KERNEL_MODELS[dev]
    m, n, k = km.gemm_shape
    (ns,) = kernel_ns(
        _gemm_trace([(m, n, k)]), np.array([True]), km, device_spec(dev), None
    )  # the device's default type: bf16
    assert ns - km.launch_ns == pytest.approx(2 * m * n * k / km.gemm_rate("bf16") * 1e9, rel=1e-9)


@pytest.mark.parametrize("dev", sorted(KERNEL_MODELS))
def test_parameters_are_below_the_datasheet(dev):
    km, spec = KERNEL_MODELS[dev], device_spec(dev)
    best = gemm_quantization(km.gemm_shape[0], km.gemm_shape[1], 1, km.sms, km.tile, km.gemm_shape[2])
    for dtype, rate in km.gemm:
        assert rate / best <= spec.peak_for(dtype)[0], dtype  # a full SM never beats the datasheet
    assert km.vector <= spec.peak_for("bf16")[0]
    assert {"gemm", "mem", "attention", "launch_ns", "sms", "tile"} <= dict(km.sources).keys()


def test_unknown_device_and_bad_figures_are_refused():
    with pytest.raises(ChakraError, match="no kernel model for device 'v100'"):
        kernel_model("v100")
    with pytest.raises(ChakraError, match="mem must be in"):
        KernelModel("x", 1, (1, 1), (("bf16", 1.0),), (1, 1, 1), 0.5, 1.5, 1.0, 0.0)


def test_more_work_is_never_faster():
    shapes = [(m, n, 4096) for m in (128, 1000, 2048, 4097, 8192) for n in (64, 1024, 3000, 12288)]
    base = _node_ns(_gemm_trace(shapes), "a100", True)
    bigger = _node_ns(_gemm_trace([(m + 64, n, k) for m, n, k in shapes]), "a100", True)
    deeper = _node_ns(_gemm_trace([(m, n, 2 * k) for m, n, k in shapes]), "a100", True)
    assert (bigger >= base).all() and (deeper >= base).all()


@pytest.fixture(scope="module")
def job():
    pytest.importorskip("torch", reason="capturing needs PyTorch")
    from chakra_trace.capture import capture, load_build
    from chakra_trace.synthesize.parallel import Plan, parallelize_detailed

    cfg = {"layers": 2, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1024}
    master = capture(load_build(f"{GPT}:build"), cfg, batch=8, seq=128, dtype="bfloat16", fold_views=True).trace
    return parallelize_detailed(master, Plan(tp=2, pp=2, dp=1, micro_batches=4, recompute="full"))


@pytest.mark.torch
def test_every_gemm_carries_dimensions_that_give_its_flops(job):
    n_gemm = 0
    for t in job.workload.traces.values():
        cls = op_classes(t)
        m, has = t.attr_array("gemm_m", np.int64)
        n = t.attr_array("gemm_n", np.int64)[0]
        k = t.attr_array("gemm_k", np.int64)[0]
        b, has_b = t.attr_array("gemm_batch", np.int64)
        b = np.where(has_b, b, 1)
        matmul = (cls == GEMM) & (t.num_ops > 0)
        assert (has == matmul).all()  # every matmul, nothing else
        assert (2 * b[has] * m[has] * n[has] * k[has] == t.num_ops[has]).all()
        n_gemm += int(has.sum())
    assert n_gemm


@pytest.mark.torch
@pytest.mark.parametrize("dev", sorted(KERNEL_MODELS))
def test_kernels_are_never_faster_than_the_roofline(job, dev):
    for t in job.workload.traces.values():
        roof = _node_ns(t, dev, False)
        kern = _node_ns(t, dev, True)
        assert (kern >= roof).all()
        comp = (t.num_ops > 0) | (t.tensor_size > 0)
        assert (kern[comp] >= KERNEL_MODELS[dev].launch_ns).all()


@pytest.mark.torch
def test_op_classes_of_a_captured_step(job):
    t = job.workload.traces[0]
    cls = op_classes(t)
    names = t.name_array
    assert {str(x) for x in names[cls == ATTENTION]} <= {
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    }
    assert (cls == ATTENTION).any() and (cls == GEMM).any() and (cls == OTHER).any()


@pytest.mark.torch
def test_a_faster_device_is_never_slower(job):
    from chakra_trace.simulate.config import Network
    from chakra_trace.simulate.simulator import simulate

    net = Network.simple("Switch", 4, 400, 250)
    steps = {
        dev: simulate(job.workload, net, with_device(preset_system(["ring"]), dev, kernels=True)).step_ns
        for dev in ("a100", "h100", "b200")
    }
    assert steps["b200"] <= steps["h100"] <= steps["a100"]
    roof = simulate(job.workload, net, with_device(preset_system(["ring"]), "a100")).step_ns
    assert steps["a100"] >= roof  # the kernel model is no lower bound's equal


@pytest.mark.torch
def test_cli_compute_model(job, tmp_path, capsys):
    from chakra_trace.cli import main

    prefix = tmp_path / "job"
    job.workload.save(prefix, groups=job.workload.groups)
    steps = {}
    for model in ("roofline", "kernels"):
        args = ["simulate", str(prefix), "--system", "switch", "--device", "a100", "--compute-model", model, "--json"]
        assert main(args) == 0
        steps[model] = json.loads(capsys.readouterr().out)["recording_ns"]
    assert math.isfinite(steps["kernels"]) and steps["kernels"] > steps["roofline"]
    assert main(["simulate", str(prefix), "--system", "switch", "--compute-model", "kernels"]) == 2
    assert "give --device too" in capsys.readouterr().err


def test_a_gemm_without_dimensions_runs_at_the_measured_rate():
    b = TraceBuilder()
    b.add("aten::mm", num_ops=2 * 8192**3, tensor_size=3 * 2 * 8192**2, duration_unknown=True, is_cpu_op=False)
    t = b.build()
    km = KERNEL_MODELS["h100"]
    (ns,) = kernel_ns(t, np.array([True]), km, device_spec("h100"), None)
    assert ns - km.launch_ns == pytest.approx(2 * 8192**3 / km.gemm_rate("bf16") * 1e9, rel=1e-9)


def test_backward_autograd_nodes_are_costed_as_their_forwards_kernels():
    """A converted PyTorch trace names a backward by its autograd node: a matmul's gradient runs
    matmuls, attention's runs attention, not elementwise kernels on the vector units."""
    b = TraceBuilder()
    for name in (
        "autograd::engine::evaluate_function: MmBackward0",
        "autograd::engine::evaluate_function: ConvolutionBackward0",
        "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
        "autograd::engine::evaluate_function: AddBackward0",
        "aten::addmm",
        "aten::_scaled_dot_product_flash_attention_backward",
    ):
        b.add(name, num_ops=1, duration_unknown=True, is_cpu_op=False)
    assert op_classes(b.build()).tolist() == [GEMM, GEMM, ATTENTION, OTHER, GEMM, ATTENTION]
