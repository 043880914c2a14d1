"""No silent zeros (issue 30, item 5): a host-only trace of a GPU job has no recorded times, so
"recorded" refuses it, a device costs its collectives from their sizes on the device's own
interconnect, and the roofline costs each op at the peak of its type, from the datasheet table."""

from __future__ import annotations

import gzip
import json
import warnings

import numpy as np
import pytest

from chakra_trace.analyze.roofline import roofline
from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.errors import ChakraError
from chakra_trace.io.et import write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.devices import DEVICES, DTYPES, device_spec
from chakra_trace.schema.enums import NodeType
from chakra_trace.simulate.presets import choose_system, simulate_on
from conftest import DATA, SHARED, run_cli


def _host_only(paths) -> Workload:
    """Host execution traces converted without Kineto: no recorded times."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Workload({r: convert_pytorch(p, rank=r)[0] for r, p in enumerate(paths)})


@pytest.fixture(scope="module")
def ddp_host():
    return _host_only([DATA / f"ddp_rank{r}.et.json.gz" for r in (0, 1)])


def _raw_nodes(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["nodes"]


def test_raw_host_traces_record_no_durations():
    """Ground truth from the files: a host ET has no duration on any node (so nothing to replay)."""
    for r in (0, 1):
        nodes = _raw_nodes(DATA / f"ddp_rank{r}.et.json.gz")
        assert nodes and not any("dur" in n or any(a["name"] == "dur" for a in n.get("attrs", [])) for n in nodes)


# (a) ------------------------------------------------------------------ recorded without times


def test_recorded_refuses_a_job_without_durations(ddp_host):
    for system in ("recorded", "ideal"):
        with pytest.raises(ChakraError, match=r"no recorded durations.*would answer 0 ns.*--device"):
            simulate_on(ddp_host, system)


def test_recorded_refusal_is_one_line_on_the_cli(ddp_host, tmp_path, capsys):
    prefix = tmp_path / "ddp"
    for r, t in ddp_host.traces.items():
        write_trace(t, f"{prefix}.{r}.et")
    rc, out, err = run_cli(["simulate", str(prefix), "--system", "recorded"], capsys)
    assert rc != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no recorded durations" in lines[0] and "--device" in lines[0]


def test_a_network_system_says_compute_is_unknown(ddp_host):
    res = simulate_on(ddp_host, "switch")
    assert any("no node carries a recorded duration" in w for w in res.warnings)


@pytest.mark.parametrize("name", ["resnet_et.json.gz"])
def test_recorded_refuses_the_public_host_only_gpu_trace(name):
    path = SHARED / "param" / name
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    assert not any("dur" in n for n in _raw_nodes(path))
    wl = _host_only([path])
    with pytest.raises(ChakraError, match="no recorded durations"):
        simulate_on(wl, "recorded")
    res = simulate_on(wl, choose_system(None, device="h100"))  # a device answers, and says what it cannot
    assert res.step_ns > 0
    assert any("one rank" in w for w in res.warnings)


# (b) ------------------------------------------------------------------ collectives from their sizes


def test_a_device_costs_untimed_collectives_on_its_interconnect(ddp_host):
    before = {r: int(t.duration.sum()) for r, t in ddp_host.traces.items()}
    res = simulate_on(ddp_host, choose_system(None, device="h100"))
    bw = DEVICES["h100"].link_bw  # bytes/s per direction: NVLink 4, 900 GB/s bidirectional
    assert bw == 450e9
    sized = [c for c in res.collectives if c.bytes > 0]
    raw = sum(n["name"].startswith("c10d::") for n in _raw_nodes(DATA / "ddp_rank0.et.json.gz"))
    assert len(res.collectives) == raw and sized
    for c in sized:  # two ranks: each sends at least half of its buffer over the link
        assert c.end_ns - c.start_ns >= c.bytes / 2 / bw * 1e9, c
    assert "recorded" not in res.mode
    assert any("costed from their sizes" in w and "450 GB/s" in w for w in res.warnings)
    assert before == {r: int(t.duration.sum()) for r, t in ddp_host.traces.items()}  # the job is not changed


def test_a_device_without_an_interconnect_figure_asks_for_a_system(ddp_host):
    assert DEVICES["mi250x"].link_bw is None
    with pytest.raises(ChakraError, match="no interconnect figure.*--system"):
        simulate_on(ddp_host, choose_system(None, device="mi250x"))
    res = simulate_on(ddp_host, choose_system("switch", device="mi250x"))  # a named network costs them
    assert all(c.end_ns > c.start_ns for c in res.collectives if c.bytes > 0)


def test_recorded_communication_stays_recorded(ddp_pair):
    """A job whose collectives were timed (host + Kineto) keeps its recorded communication."""
    comm = [t.types == NodeType.COMM_COLL_NODE for t in ddp_pair.traces.values()]
    assert all((t.duration[c] > 0).any() for t, c in zip(ddp_pair.traces.values(), comm))
    res = simulate_on(ddp_pair, choose_system(None, device="h100"))
    assert res.mode.endswith("/recorded")
    assert not any("costed from their sizes" in w for w in res.warnings)


def test_the_cli_json_carries_the_notes(ddp_host, tmp_path, capsys):
    prefix = tmp_path / "ddp"
    for r, t in ddp_host.traces.items():
        write_trace(t, f"{prefix}.{r}.et")
    rc, out, _ = run_cli(["simulate", str(prefix), "--device", "h100", "--json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc["recording_ns"] > 0 and any("costed from their sizes" in w for w in doc["warnings"])


# (c) ------------------------------------------------------------------ dtype-aware roofline


def _gemm(dtype: str | None, n: int = 4096, itemsize: int = 2):
    b = TraceBuilder()
    kw = {} if dtype is None else {"dtype": dtype}
    b.comp("aten::mm", 0, num_ops=2 * n**3, tensor_size=3 * n * n * itemsize, **kw)
    return b.build()


def test_an_fp32_gemm_costs_the_datasheet_ratio_more_than_bf16_on_h100():
    h100 = device_spec("h100")
    fp32 = roofline(_gemm("fp32", itemsize=4), h100)
    bf16 = roofline(_gemm("bf16"), h100)
    assert fp32.bound.tolist() == bf16.bound.tolist() == ["compute"]
    # NVIDIA H100 SXM datasheet: FP32 67 TFLOPS, BF16 Tensor Core 1,979 with sparsity = 989.4 dense
    assert fp32.roof_time_us[0] / bf16.roof_time_us[0] == pytest.approx(989.4 / 67)
    assert fp32.peak_dtype.tolist() == ["fp32"] and bf16.peak_dtype.tolist() == ["bf16"]
    assert fp32.coverage["dtype_unknown"] == bf16.coverage["dtype_unknown"] == 0


def test_an_op_without_a_type_is_counted_and_costed_at_the_default():
    rf = roofline(_gemm(None), "h100")
    assert rf.dtype.tolist() == ["unknown"] and rf.coverage["dtype_unknown"] == 1
    assert rf.peak_flops[0] == DEVICES["h100"].peak_flops and rf.coverage["default_dtype"] == "bf16"
    assert rf.summary()["by_dtype"]["unknown"]["ops"] == 1


def test_a_type_without_a_datasheet_peak_falls_back_and_is_counted():
    rf = roofline(_gemm("bf16"), "v100")  # V100: no BF16 tensor cores
    assert rf.peak_dtype.tolist() == ["fp32"] and rf.peak_flops[0] == 15.7e12
    assert rf.coverage["dtype_fallback"] == 1


def test_peaks_follow_the_datasheets_order():
    """FP64 <= FP32 <= TF32 <= BF16 = FP16 <= FP8 (<= INT8) where a datasheet gives both."""
    order = ["fp64", "fp32", "tf32", "bf16", "fp8"]
    for key, d in DEVICES.items():
        p = dict(d.peaks)
        assert p and set(p) <= set(DTYPES), key
        assert d.peak_for(d.default_dtype)[0] == d.peak_flops, key
        given = [p[x] for x in order if x in p]
        assert given == sorted(given), key
        if "bf16" in p and "fp16" in p:
            assert p["bf16"] == p["fp16"], key
        if "int8" in p and "fp16" in p:
            assert p["int8"] >= p["fp16"], key
    # datasheet facts, not the ordering: FP64 (tensor / matrix) equals FP32 on these
    for key in ("h100", "h200", "a100", "mi300x", "mi250x", "mi210"):
        assert dict(DEVICES[key].peaks)["fp64"] == dict(DEVICES[key].peaks)["fp32"], key
    assert DEVICES["b200"].peak_for("fp64")[0] * 2 < DEVICES["b200"].peak_for("fp32")[0] + 1e12  # 37 vs 75


def _first_float_input(node) -> str | None:
    for t in node.get("inputs", {}).get("types", []):
        if t.startswith("Tensor(") and t[7:-1] in ("float", "double", "c10::Half", "c10::BFloat16"):
            return {"float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16"}[t[7:-1]]
    return None


@pytest.mark.parametrize("name", ["mlp_rank0.et.json.gz", "transformer_rank0.et.json.gz"])
def test_converted_ops_carry_their_recorded_type(name):
    """Every converted op with a type has the first floating input type the raw file records for
    an op of that name (these models are FP32 throughout), and the roofline costs it at that peak."""
    path = DATA / name
    raw: dict[str, set] = {}
    for n in _raw_nodes(path):
        d = _first_float_input(n)
        if d is not None:
            raw.setdefault(n["name"], set()).add(d)
    wl = _host_only([path])
    rf = roofline(wl, "h100")
    typed = rf.dtype != "unknown"
    assert typed.any()
    for op, d in zip(rf.name[typed].tolist(), rf.dtype[typed].tolist()):
        if op in raw:
            assert d in raw[op], (op, d)
    fp32 = rf.dtype == "fp32"
    assert fp32.any() and np.all(rf.peak_flops[fp32] == 67e12)
    s = rf.summary()
    assert sum(v["ops"] for v in s["by_dtype"].values()) == s["ops"] == len(rf)
    assert s["dtype_unknown"] == int((~typed).sum())
