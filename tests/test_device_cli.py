"""The device analyses as a user meets them: `DeviceAnalysis` on each kind of input (GPU Kineto,
CPU Kineto, a collect folder, a Chakra job recorded and simulated), `chakra analyze ...`, and
the report's device section."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from chakra_trace.analyze import Analysis
from chakra_trace.cli import cli
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.timeline import open_timeline
from chakra_trace.visualize.report import build_report
from conftest import sample

DATA = Path(__file__).parent / "data"
GPU = sample("kineto/resnet_kineto_head.json.gz")
DDP = DATA / "corpus" / "ddp"
PAIR = [DATA / "kineto" / "ddp_rank0.kineto.json.gz", DATA / "kineto" / "ddp_rank1.kineto.json.gz"]


def _run(*args) -> str:
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_every_input_gives_a_timeline_of_its_source():
    assert Analysis.open(GPU).devices().source == "kineto-gpu"
    assert Analysis.open(PAIR).devices().source == "kineto-cpu"
    assert Analysis.open(DDP).devices().source == "kineto-cpu"  # a collect folder: its Kineto traces
    assert Analysis.open(DDP, devices="chakra").devices().source == "recorded"
    wl = Workload.open(DDP)
    sim = Analysis(wl, simulate_on(wl, "switch")).devices()
    assert sim.source == "simulated" and len(sim.timeline) == 2
    with pytest.raises(ChakraError, match="no Kineto traces"):
        open_timeline(DATA / "ddp_rank0.et.json.gz", prefer="kineto")


def test_simulated_windows_add_up_to_the_step():
    """On the simulated timeline the parts of each rank's window add up to it, and the window
    is the simulated step."""
    wl = Workload.open(DATA / "corpus" / "dlrm")
    res = simulate_on(wl, "switch")
    d = Analysis(wl, res).devices()
    for r in d.temporal()["ranks"]:
        parts = sum(r[f"{p}_us"] for p in ("computation", "communication", "memory", "idle"))
        assert parts == pytest.approx(r["window_us"], abs=1e-3)
    assert max(r["window_us"] for r in d.temporal()["ranks"]) * 1e3 <= res.step_ns + 1


def test_cli_json_matches_the_library():
    got = json.loads(_run("analyze", "kernels", GPU, "--json"))
    assert got == json.loads(json.dumps(Analysis.open(GPU).devices().kernels().to_dict()))
    ov = json.loads(_run("analyze", "overlap", *PAIR, "--json"))
    # the figures: gloo's worker threads against the host calls of the DDP pair
    assert [round(r["device_comm_us"]) for r in ov["ranks"]] == [3844, 6317]
    assert [round(r["host_call_us"]) for r in ov["ranks"]] == [2835, 573]


@pytest.mark.parametrize("cmd", ["temporal", "idle", "launches", "sequences", "op-kernels", "memory", "counters"])
def test_each_command_prints_tables_or_says_none(cmd):
    out = _run("analyze", cmd, GPU, "--rows", "3")
    assert "source" in out or cmd in out


def test_stragglers_on_a_simulated_job():
    out = json.loads(_run("analyze", "stragglers", DATA / "corpus" / "dlrm", "--simulate", "switch", "--json"))
    assert out["summary"]["source"] == "simulated" and out["summary"]["instances"] == len(out["instances"]) > 0


def test_overlay_command_writes_the_marked_trace(tmp_path):
    job = tmp_path / "ddp"
    shutil.copytree(DDP, job, ignore=shutil.ignore_patterns(".chakra-cache"))
    out = tmp_path / "cp.json"
    got = json.loads(_run("analyze", "overlay", job / "rank0.kineto.json.gz", "-o", out, "--json"))
    doc = json.loads(out.read_text())
    assert (
        got["marked"] > 0
        and sum(bool((e.get("args") or {}).get("critical")) for e in doc["traceEvents"]) == got["marked"]
    )


def test_report_has_the_device_section():
    doc = build_report(Analysis.open(DDP), max_timeline_events=100)
    sec = next(s for s in doc["sections"] if s["id"] == "devices")
    captions = [b.get("caption", "") for b in sec["blocks"]]
    assert any("idle time by cause" in c for c in captions) and any(c.startswith("stragglers") for c in captions)


def test_memory_timeline_of_a_recorded_run():
    """tests/data/kineto/mlp_memory.kineto.json.gz: `chakra collect --profile-memory -- python
    tests/workloads/mlp.py` (CPU). The series is the allocator's own running total."""
    m = Analysis.open(DATA / "kineto" / "mlp_memory.kineto.json.gz").devices().memory()
    (dev,) = m["devices"]
    series = m["series"]
    assert dev["events"] == len(series) == 88 and dev["device"] == "cpu"
    assert dev["peak_allocated"] == max(r["allocated"] for r in series)
    for a, b in zip(series, series[1:]):  # each event moves the total by its own bytes
        assert b["allocated"] - a["allocated"] == b["bytes"]
    assert (
        dev["allocated_bytes"] - dev["freed_bytes"]
        == series[-1]["allocated"] - series[0]["allocated"] + series[0]["bytes"]
    )


@pytest.mark.torch
def test_collect_records_memory_events(tmp_path):
    pytest.importorskip("torch")
    _run(
        "collect",
        "-o",
        tmp_path / "job",
        "--profile-memory",
        "--",
        sys.executable,
        Path(__file__).parent / "workloads" / "mlp.py",
    )
    m = Analysis.open(tmp_path / "job").devices().memory()
    assert m.summary["memory_events"] > 0 and m["devices"][0]["allocations"] > 0


def test_the_report_opens_the_job_once_and_agrees_with_analyze(tmp_path, monkeypatch):
    """One job, one timeline: `chakra report` reads the job and its device timeline once each,
    and its device section says what `chakra analyze overlap` says on the same path."""
    import chakra_trace.analyze as analyze_pkg
    from chakra_trace.io import workload as workload_mod

    opened, timelines = [], []
    real_open, real_timeline = workload_mod.Workload.open.__func__, analyze_pkg.open_timeline
    monkeypatch.setattr(
        workload_mod.Workload, "open", classmethod(lambda cls, *a, **k: opened.append(a[0]) or real_open(cls, *a, **k))
    )
    monkeypatch.setattr(analyze_pkg, "open_timeline", lambda *a, **k: timelines.append(a[0]) or real_timeline(*a, **k))
    _run("report", DDP, "-o", tmp_path / "r.html", "--timeline-events", "100")
    assert len(opened) == 1 and len(timelines) == 1, (opened, timelines)
    doc = build_report(Analysis.open(DDP), max_timeline_events=100)
    sec = next(s for s in doc["sections"] if s["id"] == "devices")
    report_rows = next(b["rows"] for b in sec["blocks"] if b.get("caption", "").startswith("communication: overlapped"))
    cli_rows = json.loads(_run("analyze", "overlap", DDP, "--json"))["ranks"]
    assert [r["host_calls"] for r in report_rows] == [r["host_calls"] for r in cli_rows]
    assert sum(r["host_calls"] for r in cli_rows) > 0  # (the collect folder's Kineto traces: host calls seen)
