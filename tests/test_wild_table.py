"""benchmarks/wild_table.py measures what `convert kineto` keeps of a trace from the wild: its row's
invariants on two small public traces of ../shared/traces/gpu-wild (read in place). The file's
figures are plain Python over the raw JSON; the converted figures go through the library."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from functools import cache
from pathlib import Path

import pytest

from conftest import SHARED

ROOT = Path(__file__).resolve().parents[1]
WILD = SHARED / "gpu-wild"
SMALL = ["hta_triton_example.json.gz", "hta_event_sync_multistream.json.gz"]  # 2 and 3 KB gzipped


@cache
def _wild():
    spec = importlib.util.spec_from_file_location("wild_table", ROOT / "benchmarks" / "wild_table.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_union_of_intervals():
    assert _wild().union_us([(5, 6), (0, 2), (1, 3), (2, 2.5)]) == 4
    assert _wild().union_us([]) == 0


def test_communication_names():
    comm = _wild().COMM_RE
    for name in [
        "ncclDevKernel_Generic",
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8(ncclDevComm*)",
        "void dpsk::ep::internode::combine<false, 8>",
        "void deep_ep::intranode::dispatch<8>",
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>",
        "mscclKernel_Sum_half_Simple_false",
    ]:
        assert comm.search(name), name
    assert _wild().kernel_label("void (anonymous namespace)::multimem_all_reduce_kernel<float, 16>(float*)") == (
        "multimem_all_reduce_kernel"
    )
    for name in ["_combined_routing_compute", "triton_poi_fused_add_0", "void at::native::reduce_kernel<512, 1>"]:
        assert not comm.search(name), name


@pytest.mark.parametrize("name", SMALL)
def test_row_invariants(name):
    path = WILD / name
    if not path.exists():
        pytest.skip(f"needs {path}: ../shared beside the checkout (CI has it)")
    row = _wild().measure(path)
    assert "conv_error" not in row, row.get("conv_error")
    raw, conv = row["raw"], row["conv"]
    # the file's figures against a few lines here: GPU events of the raw JSON, summed
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    gpu = [
        e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    assert raw["gpu_sum_us"] == pytest.approx(sum(e["dur"] for e in gpu))
    assert raw["gpu_union_us"] > 0 and raw["gpu_union_us"] <= raw["gpu_sum_us"] + 1e-6
    rounding = conv["gpu_nodes"]  # converted times are whole µs
    assert conv["kept_union_us"] <= raw["gpu_union_us"] + rounding
    assert conv["kept_sum_us"] <= raw["gpu_sum_us"] + rounding
    assert conv["gpu_nodes"] <= conv["gpu_events"]
    for share in (raw["comm_share"], conv["comm_share"]):
        assert 0.0 <= share <= 1.0
    assert raw["comm_kernels"] == 0  # neither trace has a communication kernel
    text = _wild().markdown([row])
    assert text.count("\n") == 2 and name in text


def test_a_failure_is_a_row(tmp_path):
    bad = tmp_path / "bad.json"  # (a kernel alone would be a GPU-only trace: converted)
    bad.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "ts": 1, "dur": 2, "pid": 0, "tid": 7}]}'
    )
    row = _wild().measure(bad, simulate=False)
    assert row["raw"]["gpu_union_us"] == 0
    assert "holds 1 cuda_runtime events: no CPU op" in row["conv_error"]
    assert "fails:" in _wild().markdown([row])
    not_trace = tmp_path / "other.json"
    not_trace.write_text('{"a": 1}')
    rows = _wild().collect([str(tmp_path)], simulate=False)
    assert {Path(r["file"]).name: ("skipped" in r) for r in rows} == {"bad.json": False, "other.json": True}


# what benchmarks/tracelens_side.py wrote for gpu-wild/hta_nccl_parser.json.gz (TraceLens 171dd74; µs, rounded)
TRACELENS_OUT = {
    "trace": "/tmp/wild_tl_x/trace.json.gz",
    "version": "0.1.0",
    "load": {"ok": True, "s": 1.6},
    "timeline": {
        "all": {
            "ok": True,
            "s": 0.1,
            "us": {
                "computation_time": 116046.56,
                "exposed_comm_time": 39529.33,
                "exposed_memcpy_time": 1924.19,
                "busy_time": 157500.08,
                "idle_time": 503050.93,
                "total_time": 660551.01,
                "total_comm_time": 46876.49,
                "total_memcpy_time": 2262.85,
            },
        },
    },
}
TRACELENS_OUT["timeline"]["linked"] = TRACELENS_OUT["timeline"]["all"]  # every kernel there is linked


def test_tracelens_output_into_the_row():
    """The side script's JSON (TraceLens not needed): share = comm / (comm + computation), memcpy and
    idle left out; busy as TraceLens's union; its linked-only default shown where it differs."""
    tl = _wild().tracelens_summary(TRACELENS_OUT)
    assert tl["comm_share"] == pytest.approx(46876.49 / (46876.49 + 116046.56))
    assert tl["busy_us"] == tl["linked_busy_us"] == 157500.08
    assert _wild().tracelens_cells(tl) == ["28.8%", "157.5"]
    unlinked = json.loads(json.dumps(TRACELENS_OUT))  # no GPU event linked to a CPU op
    unlinked["timeline"]["linked"] = {"ok": False, "error": "ValueError: No GPU events found in the trace"}
    assert _wild().tracelens_cells(_wild().tracelens_summary(unlinked)) == ["28.8%", "157.5 (linked 0.000)"]
    # TraceLens's failures are one line in the row, never the end of the table
    failed = {"load": {"ok": False, "error": "KeyError: 'traceEvents'"}}
    assert _wild().tracelens_summary(failed) == {"error": "KeyError: 'traceEvents'"}
    no_gpu = {"load": {"ok": True}, "timeline": {"all": {"ok": False, "error": "ValueError: No GPU events"}}}
    assert _wild().tracelens_cells(_wild().tracelens_summary(no_gpu)) == ["fails: ValueError: No GPU events", "–"]
    assert _wild().tracelens_cells(None) == ["–", "–"]


def test_tracelens_side_runs_apart(tmp_path):
    """A Python without TraceLens gives a row with its one-line failure (the side script is never
    imported here; nothing of chakra-trace imports TraceLens)."""
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    got = _wild().tracelens_figures(trace, "/nonexistent/python", timeout=30)
    assert "error" in got and "\n" not in got["error"]
    if importlib.util.find_spec("TraceLens") is None:  # this Python: the side script runs, TraceLens fails
        got = _wild().tracelens_figures(trace, sys.executable, timeout=60)
        assert got == {"error": "ModuleNotFoundError: No module named 'TraceLens'"}
    src = ROOT / "src"
    assert not [p for p in src.rglob("*.py") if "TraceLens" in p.read_text()]
