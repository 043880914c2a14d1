"""benchmarks/wild_table.py measures what `convert kineto` keeps of a trace from the wild: its row's
invariants on two small public traces of ../shared/traces/gpu-wild (read in place). The file's
figures are plain Python over the raw JSON; the converted figures go through the library."""

from __future__ import annotations

import gzip
import importlib.util
import json
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
