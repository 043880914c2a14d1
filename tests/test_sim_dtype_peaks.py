"""The simulator's compute with a device is dtype-aware (issue 30, item 5): a node with a ``dtype``
runs at its type's datasheet peak (TF32 per the ``fp32_as`` rule), one without at the device's
default, counted; ASTRA-sim's rules and a system file's own peak-perf keep one peak for all."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import warnings

import numpy as np
import pytest

from chakra_trace.convert import rank_graph
from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.errors import ChakraError
from chakra_trace.io.et import write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.codec import extra_attr_strings
from chakra_trace.schema.devices import DEVICES, DTYPES, device_spec
from chakra_trace.simulate import simulate
from chakra_trace.simulate.config import Network, SystemConfig
from chakra_trace.simulate.presets import choose_system, simulate_on
from conftest import DATA, SHARED, run_cli

FLOPS = 2 * 4096**3  # one 4096^3 GEMM; no bytes: compute bound on every device
EFFICIENCY = 0.5


def _job(kinds: list[tuple[str, str | None]]) -> Workload:
    """One independent compute node per (op name, dtype), FLOPS each, no bytes."""
    b = TraceBuilder()
    for name, dtype in kinds:
        b.comp(name, 0, num_ops=FLOPS, **({} if dtype is None else {"dtype": dtype}))
    return Workload({0: b.build()})


def _node_ns(res) -> np.ndarray:
    start, end, _ = res.nodes[0]
    return end - start


def _formula_ns(peak_flops: float, efficiency: float = EFFICIENCY) -> int:
    """FLOPs over the peak times the efficiency, in whole ns (the simulator's TFLOPS arithmetic)."""
    return math.floor(FLOPS / (peak_flops * efficiency / 1e12 * 1e3))


def _run(wl, system, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_on(wl, system, **kw)


@pytest.mark.parametrize("key", sorted(DEVICES))
def test_each_dtype_runs_at_its_datasheet_peak(key):
    dev = device_spec(key)  # ("cpu": this machine's)
    wl = _job([("aten::mm", d) for d in DTYPES])
    res = _run(wl, choose_system(None, device=key, efficiency=EFFICIENCY))
    got = _node_ns(res)
    for d, ns in zip(DTYPES, got.tolist()):
        assert ns == _formula_ns(dev.peak_for(d)[0]), (key, d)
    c = res.compute_types
    assert c["per_dtype"] and c["nodes"] == len(DTYPES) and c["dtype_unknown"] == 0
    assert c["dtype_fallback"] == sum(dev.peak_for(d)[1] != d for d in DTYPES)
    assert sum(v["flops"] for v in c["by_peak"].values()) == FLOPS * len(DTYPES)


@pytest.mark.parametrize("key", sorted(DEVICES))
def test_a_wider_type_is_never_faster(key):
    """fp64 >= fp32 >= fp32 convolution (TF32 where cuDNN uses it) >= bf16 >= fp16 >= fp8, in time,
    wherever the datasheet peaks are ordered (`test_no_silent_zeros`: they are, for every preset)."""
    chain = [("aten::mm", "fp64"), ("aten::mm", "fp32"), ("aten::conv2d", "fp32")]
    chain += [("aten::mm", d) for d in ("bf16", "fp16", "fp8")]
    res = _run(_job(chain), choose_system(None, device=key))
    ns = _node_ns(res).tolist()
    assert ns == sorted(ns, reverse=True), (key, ns)


def test_tf32_follows_pytorch_defaults_and_the_option():
    """PyTorch defaults: cuDNN convolutions TF32 (allow_tf32 True), cuBLAS matmuls FP32 (False since
    1.12); only NVIDIA presets run convolutions as TF32 by default (TF32 is opt-in on ROCm)."""
    wl = _job([("aten::mm", "fp32"), ("aten::conv2d", "fp32"), ("aten::relu_", "fp32")])
    h100 = dict(DEVICES["h100"].peaks)
    expect = {
        None: (h100["fp32"], h100["tf32"], h100["fp32"]),
        "tf32": (h100["tf32"], h100["tf32"], h100["fp32"]),
        "fp32": (h100["fp32"], h100["fp32"], h100["fp32"]),
    }
    for rule, peaks in expect.items():
        res = _run(wl, choose_system(None, device="h100", efficiency=EFFICIENCY, fp32_as=rule))
        assert _node_ns(res).tolist() == [_formula_ns(p) for p in peaks], rule
        assert res.compute_types["fp32_as"] == (rule or "pytorch")
        assert res.compute_types["tf32"] == sum(p == h100["tf32"] for p in peaks)
    mi = dict(DEVICES["mi300x"].peaks)
    res = _run(wl, choose_system(None, device="mi300x", efficiency=EFFICIENCY))
    assert _node_ns(res).tolist() == [_formula_ns(mi["fp32"])] * 3
    res = _run(wl, choose_system(None, device="mi300x", efficiency=EFFICIENCY, fp32_as="tf32"))
    assert _node_ns(res).tolist() == [_formula_ns(mi["tf32"])] * 2 + [_formula_ns(mi["fp32"])]
    v100 = dict(DEVICES["v100"].peaks)  # no TF32 peak: FP32 whatever the rule
    res = _run(wl, choose_system(None, device="v100", efficiency=EFFICIENCY, fp32_as="tf32"))
    assert _node_ns(res).tolist() == [_formula_ns(v100["fp32"])] * 3
    with pytest.raises(ChakraError, match="fp32_as"):
        choose_system(None, device="h100", fp32_as="fp16")
    with pytest.raises(ChakraError, match="give the device"):
        choose_system("switch", fp32_as="tf32")


@pytest.mark.parametrize("key", ["h100", "a100", "v100", "mi300x"])
def test_astra_rules_cost_every_dtype_at_one_peak(key):
    wl = _job([("aten::mm", d) for d in DTYPES] + [("aten::conv2d", "fp32")])
    system = choose_system("switch", device=key, efficiency=EFFICIENCY)
    res = _run(wl, system, compat=True)
    one = _formula_ns(DEVICES[key].peak_flops)
    assert _node_ns(res).tolist() == [one] * (len(DTYPES) + 1)
    c = res.compute_types
    assert not c["per_dtype"] and "astra" in c["why"] and list(c["by_peak"]) == ["one peak"]
    assert any("at one peak" in w for w in res.warnings)


def test_a_system_files_peak_perf_is_one_peak(tmp_path):
    """A system JSON with its own peak-perf (not from --device): every node at it, default rules too."""
    sys_ = {"roofline-enabled": 1, "peak-perf": 100, "local-mem-bw": 1000, "all-reduce-implementation": ["ring"]}
    (tmp_path / "sys.json").write_text(json.dumps(sys_))
    system = SystemConfig.from_json(tmp_path / "sys.json")
    assert system.device_compute is None
    wl = _job([("aten::mm", d) for d in DTYPES])
    res = simulate(wl, Network.simple("Switch", 1, 50, 500), system)
    assert _node_ns(res).tolist() == [_formula_ns(100e12, 1.0)] * len(DTYPES)
    assert not res.compute_types["per_dtype"] and "no device" in res.compute_types["why"]
    # a device's system whose peak-perf was changed afterwards: that peak, for every type
    dev = choose_system("switch", device="h100").system
    changed = dataclasses.replace(dev, peak_perf=100.0)
    with pytest.warns(UserWarning, match="at one peak"):
        res = simulate(wl, Network.simple("Switch", 1, 50, 500), changed)
    assert _node_ns(res).tolist() == [_formula_ns(100e12, 1.0)] * len(DTYPES)
    assert "not NVIDIA H100" in res.compute_types["why"]


def test_untyped_nodes_cost_exactly_as_with_one_peak(monkeypatch):
    """Without dtype attributes the device's per-type peaks change nothing: the default type's peak
    is peak_perf, node for node and NPU for NPU, on a real two-rank job and a synthetic one."""
    b = TraceBuilder()
    for k in range(5):
        b.comp("aten::mm", 0, num_ops=FLOPS * (k + 1), tensor_size=3 * 4096 * 4096 * (k + 1))
    # the DDP host traces converted as before the dtype attribute existed: no op has a type
    monkeypatch.setattr(
        rank_graph, "node_dtypes", lambda tensors, folded, order: (np.full(len(folded), -1, np.int64), [])
    )
    ddp = _host_only([DATA / f"ddp_rank{r}.et.json.gz" for r in (0, 1)])
    assert not any(extra_attr_strings(t, "dtype")[2].any() for t in ddp.traces.values())
    for wl in (Workload({0: b.build()}), ddp):
        for key in ("h100", "v100", "mi250x", "cpu"):
            p = choose_system("switch", device=key, efficiency=EFFICIENCY)
            old = dataclasses.replace(p, system=dataclasses.replace(p.system, device_compute=None))
            new_res, old_res = _run(wl, p), _run(wl, old)
            assert new_res.compute_types["per_dtype"] and not old_res.compute_types["per_dtype"]
            assert new_res.compute_types["dtype_unknown"] == new_res.compute_types["nodes"] > 0
            for r in new_res.nodes:
                for a, b_ in zip(new_res.nodes[r], old_res.nodes[r]):
                    assert np.array_equal(a, b_), key
            assert new_res.finish_ns.tolist() == old_res.finish_ns.tolist()
            assert any("carry no dtype" in w for w in new_res.warnings)


def _host_only(paths) -> Workload:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Workload({r: convert_pytorch(p, rank=r)[0] for r, p in enumerate(paths)})


# ------------------------------------------------------------------ the real host trace

_FLOATING = {"float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16"}


def _raw_types(path) -> dict[tuple[int, str], str | None]:
    """(rf_id, name) -> the type of the node's first floating input tensor, from the raw file."""
    with gzip.open(path, "rt") as f:
        nodes = json.load(f)["nodes"]
    out = {}
    for n in nodes:
        rf = next((a["value"] for a in n.get("attrs", []) if a["name"] == "rf_id"), None)
        first = None
        for ty in n.get("inputs", {}).get("types", []):
            if ty.startswith("Tensor(") and ty[7:-1] in _FLOATING:
                first = _FLOATING[ty[7:-1]]
                break
        out[(rf, n["name"])] = first
    return out


@pytest.mark.parametrize("rule", [None, "fp32", "tf32"])
def test_the_public_resnet_host_trace_costs_fp32_at_fp32_peaks(rule, tmp_path, capsys):
    path = SHARED / "param" / "resnet_et.json.gz"
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    raw = _raw_types(path)
    wl = _host_only([path])
    res = _run(wl, choose_system(None, device="h100", fp32_as=rule))
    t = res.traces[0]
    dur = _node_ns(res)
    peaks, dev = dict(DEVICES["h100"].peaks), DEVICES["h100"]
    rf, has_rf = t.attr_array("rf_id")
    ops, size = t.num_ops.astype(float), t.tensor_size.astype(float)
    checked = {"fp32": 0, "tf32": 0}
    for i in np.flatnonzero(has_rf & (t.num_ops > 0)).tolist():
        name = t.names[t.name_codes[i]]
        d = raw.get((int(rf[i]), name))
        # a backward node records no tensor: its type is its folded ops' (tests/test_folded_dtypes.py),
        # its class the differentiated op's (ConvolutionBackward0 a convolution, AddmmBackward0 a matmul)
        backward = name.startswith("autograd::engine::evaluate_function: ")
        if d is None and not backward:
            continue
        assert d in ("fp32", None), (name, d)  # the model is FP32 throughout
        conv = "conv" in name or "ConvolutionBackward" in name
        mm = name in ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul") or name.endswith(": AddmmBackward0")
        tf32 = (rule == "tf32" and (conv or mm)) or (rule is None and conv)
        peak = peaks["tf32" if tf32 else "fp32"] / 1e12 * 1e3  # FLOP per ns
        perf = min(peak, dev.mem_bw / 1e9 * ops[i] / size[i]) if size[i] > 0 else peak
        assert abs(int(dur[i]) - math.floor(ops[i] / perf)) <= 1, (name, rule)
        checked["tf32" if tf32 else "fp32"] += 1
    assert checked["fp32"] > 100 and (checked["tf32"] > 100) == (rule != "fp32")
    c = res.compute_types
    assert c["per_dtype"] and c["fp32_as"] == (rule or "pytorch")
    assert c["nodes"] == sum(v["nodes"] for v in c["by_peak"].values())
    assert c["dtype_unknown"] == 0 and "bf16" not in c["by_peak"]  # every costed node has a type
    # the CLI says it, in text and JSON
    write_trace(wl.traces[0], tmp_path / "resnet.0.et")
    argv = ["simulate", str(tmp_path / "resnet.0.et"), "--device", "h100", *(["--fp32-as", rule] if rule else [])]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0 and "compute peaks per dtype" in out and "carry no dtype" not in err
    rc, out, _ = run_cli([*argv, "--json"], capsys)
    assert rc == 0 and json.loads(out)["compute_types"] == json.loads(json.dumps(c))


def test_fp32_as_needs_a_device_on_the_cli(tmp_path, capsys):
    b = TraceBuilder()
    b.comp("aten::mm", 5, num_ops=FLOPS, dtype="fp32")
    write_trace(b.build(), tmp_path / "j.0.et")
    rc, _, err = run_cli(["simulate", str(tmp_path / "j.0.et"), "--system", "switch", "--fp32-as", "tf32"], capsys)
    assert rc != 0 and "--device" in err


@pytest.mark.parametrize("rule", ["pytorch", "tf32", "fp32"])
def test_the_simulator_and_the_roofline_analysis_agree_op_by_op(rule):
    """One rule for both: every op on the roofline (`analyze.roofline`) takes its roof time in the
    simulation with the same device, to the nanosecond (the simulator floors to whole ns)."""
    from chakra_trace.analyze.roofline import roofline

    path = SHARED / "param" / "resnet_et.json.gz"
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    wl = _host_only([path])
    rf = roofline(wl, "h100", fp32_as=rule)
    res = _run(wl, choose_system(None, device="h100", fp32_as=None if rule == "pytorch" else rule))
    assert res.traces[0] is wl.traces[0] or len(res.traces[0]) == len(wl.traces[0])
    sim = _node_ns(res)[rf.row]
    assert np.all(np.abs(sim - np.floor(rf.roof_time_us * 1e3)) <= 1)
    conv = np.char.find(rf.name.astype(str), "conv") >= 0
    assert np.all((rf.peak_dtype[conv & (rf.dtype == "fp32")] == "tf32") == (rule != "fp32"))
    assert rf.coverage["fp32_as"].startswith(rule)


def test_the_on_device_what_if_uses_the_same_peaks():
    from chakra_trace.synthesize.transforms import on_device

    wl = _job([("aten::mm", "fp32"), ("aten::mm", "bf16"), ("aten::conv2d", "fp32"), ("aten::mm", None)])
    out = on_device(wl, "h100").traces[0]
    p = dict(DEVICES["h100"].peaks)
    want = [p["fp32"], p["bf16"], p["tf32"], DEVICES["h100"].peak_flops]
    assert out.duration.tolist() == [max(math.ceil(FLOPS / x * 1e6), 1) for x in want]
