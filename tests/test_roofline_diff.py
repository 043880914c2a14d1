"""Roofline analysis (hand-computed and on converted traces) and trace diffs."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from chakra_trace.analyze.diff import diff, merge_names
from chakra_trace.analyze.roofline import DEVICES, DeviceSpec, device_spec, roofline
from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.io.et import write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from conftest import DATA

# ridge at 100 FLOP/B: 100 TFLOP/s over 1,000 GB/s
DEV = DeviceSpec("test", 100e12, 1000e9)


def _roof_trace(gemm_us: int = 100) -> TraceBuilder:
    b = TraceBuilder()
    x = b.comp("elementwise", 10, num_ops=2_000_000, tensor_size=1_000_000)  # 2 FLOP/B: memory bound
    y = b.comp("gemm", gemm_us, deps=[x], num_ops=4_000_000_000, tensor_size=10_000_000)  # 400 FLOP/B
    z = b.comp("at_ridge", 0, deps=[y], num_ops=100_000_000, tensor_size=1_000_000)  # untimed, at the ridge
    b.comp("[host]", 7, deps=[z])  # no counts: skipped
    b.comp("no_bytes", 5, deps=[z], num_ops=1000)  # FLOPs but no bytes: skipped
    b.collective("ALL_REDUCE", 1 << 20, deps=[z], duration=20)  # not a compute node
    return b


def test_hand_computed_roofline():
    rf = roofline(_roof_trace().build(), DEV)
    assert DEV.ridge == 100
    assert list(rf.name) == ["elementwise", "gemm", "at_ridge"] and list(rf.node_id) == [0, 1, 2]
    assert rf.intensity.tolist() == [2.0, 400.0, 100.0]
    assert rf.attainable_flops.tolist() == [2e12, 100e12, 100e12]  # bandwidth x intensity, then the peak
    assert list(rf.bound) == ["memory", "compute", "compute"]  # at the ridge: the compute roof
    assert rf.achieved_flops[:2] == pytest.approx([2e6 / 10e-6, 4e9 / 100e-6])
    assert rf.efficiency[:2] == pytest.approx([0.1, 0.4])
    assert math.isnan(rf.achieved_flops[2]) and math.isnan(rf.efficiency[2])
    assert rf.roof_time_us == pytest.approx([1.0, 40.0, 1.0])
    assert rf.duration_us.tolist() == [10.0, 100.0, 0.0]
    s = rf.summary()
    assert (s["comp_nodes"], s["ops"], s["skipped"], s["timed_ops"]) == (5, 3, 2, 2) and rf.skipped == 2
    assert (s["memory_bound"], s["compute_bound"]) == (1, 2)
    assert (s["comp_time_us"], s["covered_time_us"]) == (122, 110)
    d = json.loads(json.dumps(rf.to_dict(), allow_nan=False))
    assert d["device"]["ridge"] == 100 and d["ops"][2]["efficiency"] is None and len(d["ops"]) == 3
    df = rf.to_pandas()
    for col in ("name", "intensity", "achieved_flops", "attainable_flops", "bound", "duration_us", "flops"):
        assert col in df.columns
    assert len(df) == 3 and df.loc[df.name == "gemm", "efficiency"].item() == pytest.approx(0.4)


def test_by_name_aggregates_over_ranks():
    w = Workload({0: _roof_trace(100).build(), 3: _roof_trace(300).build()})
    rf = roofline(w, DEV)
    assert sorted(set(rf.rank.tolist())) == [0, 3] and len(rf) == 6
    names = rf.by_name()
    assert [r["name"] for r in names] == ["gemm", "elementwise", "at_ridge"]  # most time first
    g = names[0]
    assert (g["count"], g["flops"], g["bytes"], g["time_us"]) == (2, 8e9, 2e7, 400.0)
    assert g["intensity"] == 400 and g["attainable"] == 100e12 and g["bound"] == "compute"
    assert g["achieved"] == pytest.approx(8e9 / 400e-6) and g["efficiency"] == pytest.approx(0.2)
    assert g["roof_time_us"] == pytest.approx(80.0)
    assert names[2]["achieved"] is None and names[2]["efficiency"] is None  # never timed


def test_presets_and_explicit_devices():
    assert set(DEVICES) >= {"v100", "a100", "h100", "h200", "b200", "mi300x", "tpu-v5e", "cpu"}
    assert device_spec("H100") is DEVICES["h100"] and device_spec(" TPU-v5e ") is DEVICES["tpu-v5e"]
    assert DEVICES["h100"].peak_flops == pytest.approx(989.4e12) and DEVICES["h100"].mem_bw == pytest.approx(3.35e12)
    assert DEVICES["h100"].ridge == pytest.approx(295.34, abs=0.01)
    assert DEVICES["h200"].ridge < DEVICES["h100"].ridge  # same compute, more bandwidth
    assert all(d.peak_flops > d.mem_bw > 0 for d in DEVICES.values())
    custom = device_spec(peak_tflops=100, mem_bw_gbps=1000)
    assert (custom.peak_flops, custom.mem_bw, custom.ridge) == (100e12, 1000e9, 100)
    over = device_spec("a100", mem_bw_gbps=1000)
    assert over.peak_flops == DEVICES["a100"].peak_flops and over.mem_bw == 1000e9
    assert device_spec(DEV) is DEV
    with pytest.raises(ChakraError, match="unknown device 'rtx9090'.*h100.*mi300x"):
        device_spec("rtx9090")
    with pytest.raises(ChakraError, match="presets"):
        device_spec(peak_tflops=100)
    with pytest.raises(ChakraError, match="positive"):
        device_spec(peak_tflops=-1, mem_bw_gbps=10)


@pytest.fixture(scope="module")
def mlp():
    from chakra_trace.convert.pytorch import convert_pytorch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_pytorch(DATA / "mlp_rank0.et.json.gz", DATA / "kineto" / "mlp_rank0.kineto.json.gz")[0]


def test_roofline_of_a_converted_cpu_trace(mlp):
    rf = roofline(mlp, "cpu")
    s = rf.summary()
    assert len(rf) >= 40 and s["ops"] + s["skipped"] == s["comp_nodes"] == 165
    assert 0 < s["covered_time_us"] <= s["comp_time_us"]
    assert np.all(rf.intensity > 0) and np.all(rf.flops > 0) and np.all(rf.bytes > 0)
    timed = rf.duration_us > 0
    assert timed.sum() == s["timed_ops"] > 0
    assert np.all(np.isfinite(rf.efficiency[timed])) and np.all(rf.efficiency[timed] > 0)
    names = {r["name"]: r for r in rf.by_name()}
    assert "aten::linear" in names and names["aten::linear"]["intensity"] > names["aten::relu"]["intensity"]
    assert sum(r["count"] for r in names.values()) == len(rf)
    json.dumps(rf.to_dict(), allow_nan=False)


def test_roofline_of_an_untimed_host_trace():
    from chakra_trace.convert.pytorch import convert_pytorch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = convert_pytorch(DATA / "mlp_rank0.et.json.gz")[0]
    rf = roofline(t, "h100")
    assert len(rf) >= 40 and not np.isfinite(rf.achieved_flops).any()
    assert all(r["achieved"] is None for r in rf.by_name())
    json.dumps(rf.to_dict(), allow_nan=False)


def test_merge_names_recodes_every_table():
    table, maps = merge_names([["", "b", "a"], ["c", "a"]])
    assert list(table) == ["", "a", "b", "c"]
    assert list(table[maps[0]]) == ["", "b", "a"] and list(table[maps[1]]) == ["c", "a"]


def test_a_trace_against_itself_is_all_same(mlp):
    d = diff(mlp, mlp)
    assert d.rows and all(r["status"] == "same" and r["delta_us"] == 0 for r in d.rows)
    assert d.added() == d.removed() == d.changed() == []
    assert sum(r["count_a"] for r in d.rows) == len(mlp)
    assert all(m["delta"] == 0 for m in d.summary["metrics"])
    assert d.summary["status"]["same"] == len(d.rows)


def _job(ops: dict[str, int], allreduces: int = 1, start: int = 0) -> TraceBuilder:
    b = TraceBuilder()
    prev, t = [], start
    for name, us in ops.items():
        prev = [b.comp(name, us, deps=prev, start=t)]
        t += us
    for _ in range(allreduces):
        prev = [b.collective("ALL_REDUCE", 1 << 20, deps=prev, duration=20, start=t, pg_name="dp")]
        t += 20
    return b


def test_slower_removed_added_and_same_are_classified():
    a = _job({"fwd": 100, "loss": 50, "opt": 30, "tiny": 3}).build()
    b = _job({"fwd": 200, "loss": 51, "tiny": 3, "new": 40}, allreduces=2).build()  # loss: +2 %, within 5 %
    d = diff(a, b, labels=("before", "after"))
    by = {r["name"]: r for r in d.rows}
    assert by["fwd"]["status"] == "slower" and by["fwd"]["ratio"] == 2.0 and by["fwd"]["delta_us"] == 100
    assert by["opt"]["status"] == "removed" and by["opt"]["count_b"] == 0 and by["opt"]["mean_us_b"] is None
    assert by["new"]["status"] == "added" and by["new"]["ratio"] is None and by["new"]["total_us_b"] == 40
    assert by["loss"]["status"] == "same" and by["tiny"]["status"] == "same"
    assert by["all_reduce"]["status"] == "slower" and (by["all_reduce"]["count_a"], by["all_reduce"]["count_b"]) == (
        1,
        2,
    )
    assert [r["name"] for r in d.rows[:3]] == ["fwd", "new", "opt"]  # largest |delta| first
    assert [r["name"] for r in d.added()] == ["new"] and [r["name"] for r in d.removed()] == ["opt"]
    assert {r["name"] for r in d.changed()} == {"fwd", "all_reduce"}
    assert d.summary["status"] == {"added": 1, "removed": 1, "slower": 2, "faster": 0, "same": 2}
    m = {x["metric"]: x for x in d.summary["metrics"]}
    assert (m["span_us"]["a"], m["span_us"]["b"]) == (203, 334) and m["nodes"]["delta"] == 1
    assert d.summary["collectives"] == [
        {
            "group": "dp",
            "type": "ALL_REDUCE",
            "count_a": 1,
            "count_b": 2,
            "bytes_a": 1 << 20,
            "bytes_b": 2 << 20,
            "changed": True,
        }
    ]
    assert d.summary["labels"] == ["before", "after"]
    # a tighter threshold makes the 2 % change count; a huge min_us hides everything
    assert {r["name"]: r["status"] for r in diff(a, b, threshold=0.01).rows}["loss"] == "slower"
    assert {r["status"] for r in diff(a, b, min_us=1e6).rows} == {"same", "added", "removed"}
    assert list(d.to_pandas().columns[:2]) == ["name", "type"] and len(d.to_pandas()) == len(d.rows)
    json.dumps(d.to_dict(), allow_nan=False)


def test_diff_by_rank():
    wa = Workload({0: _job({"fwd": 100}).build(), 1: _job({"fwd": 100}).build()})
    wb = Workload({0: _job({"fwd": 100}).build(), 1: _job({"fwd": 150}).build()})
    overall = {r["name"]: r for r in diff(wa, wb).rows}["fwd"]
    assert (overall["count_a"], overall["total_us_a"], overall["total_us_b"]) == (2, 200, 250)
    per = {(r["rank"], r["name"]): r["status"] for r in diff(wa, wb, by_rank=True).rows}
    assert per[(0, "fwd")] == "same" and per[(1, "fwd")] == "slower"
    assert "rank" in diff(wa, wb, by_rank=True).to_pandas().columns


def test_cli_roofline_and_diff(tmp_path, mlp, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # rich wraps the summary lines at the console width
    t = _roof_trace().build()
    write_trace(t, tmp_path / "a.et")
    write_trace(mlp, tmp_path / "mlp.et")
    assert main(["analyze", "roofline", str(tmp_path / "mlp.et"), "--device", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["name"] == DEVICES["h100"].name and out["summary"]["ops"] >= 40 and "ops" not in out
    assert out["by_name"][0]["time_us"] >= out["by_name"][-1]["time_us"]
    assert (
        main(
            [
                "analyze",
                "roofline",
                str(tmp_path / "a.et"),
                "--peak-tflops",
                "100",
                "--mem-bw-gbps",
                "1000",
                "--json",
                "--ops",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["ridge"] == 100 and [o["bound"] for o in out["ops"]] == ["memory", "compute", "compute"]
    assert main(["analyze", "roofline", str(tmp_path / "a.et"), "--device", "nope"]) == 2
    assert "unknown device 'nope'" in capsys.readouterr().err
    assert main(["analyze", "roofline", str(tmp_path / "a.et")]) == 0
    assert "ridge 295.3 FLOP/B" in capsys.readouterr().out

    write_trace(_job({"fwd": 100, "opt": 30}).build(), tmp_path / "before.et")
    write_trace(_job({"fwd": 200, "new": 30}).build(), tmp_path / "after.et")
    assert main(["analyze", "diff", str(tmp_path / "before.et"), str(tmp_path / "after.et"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["status"] for r in out["rows"]} == {
        "fwd": "slower",
        "opt": "removed",
        "new": "added",
        "all_reduce": "same",
    }
    assert out["labels"] == ["before.et", "after.et"]
    assert main(["analyze", "diff", str(tmp_path / "before.et"), str(tmp_path / "after.et"), "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "span_us: 150 -> 250" in text and "fwd" in text and "1 added" in text
