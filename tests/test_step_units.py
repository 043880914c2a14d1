"""One meaning of "step": a simulation runs the whole recording a job holds (often several
profiler steps); its output names the recording (``recording_ns``) and, where the job says how
many steps it holds, one step (``per_step_ns``); the report's per-step chart shows each rank's
own steps, which add up to that rank's whole recording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_trace.analyze import Analysis
from chakra_trace.io.workload import Workload
from chakra_trace.visualize.report_sections import steps_section
from conftest import run_cli

CORPUS = Path(__file__).parent / "data" / "corpus"
JOBS = sorted(p for p in CORPUS.iterdir() if p.is_dir())


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_simulate_json_names_recording_and_step(job, capsys):
    rc, out, err = run_cli(["simulate", str(job), "--system", "switch", "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["recording_ns"] == max(d["finish_ns"])
    w = Workload.open(job)
    bounds = [t.step_bounds_us for t in w.traces.values()]
    if all(b is not None for b in bounds) and len({b.size for b in bounds}) == 1:
        assert d["steps"] == bounds[0].size - 1
    if d["steps"]:
        assert d["per_step_ns"] == pytest.approx(d["recording_ns"] / d["steps"])
    else:
        assert d["per_step_ns"] is None
    rc, out, _ = run_cli(["simulate", str(job), "--system", "switch"], capsys)
    assert out.startswith(f"recording {d['recording_ns']:,} ns (")


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_report_step_chart_adds_up_per_rank(job):
    sec = steps_section(Analysis(Workload.open(job)))
    bars = [b for b in sec["blocks"] if b.get("type") == "bars"]
    if not bars:
        pytest.skip(f"{job.name}: no per-step view")
    (chart,) = bars
    assert chart["categories"][-1] == "all"
    for s in chart["series"]:
        *steps, whole = s["values"]
        assert sum(steps) == pytest.approx(whole, rel=1e-9, abs=1e-6), s["name"]


def _keys(obj, prefix=""):
    """Every key of a JSON document, nested, as dotted paths."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{prefix}{k}"
            yield from _keys(v, f"{prefix}{k}.")
    elif isinstance(obj, list):
        for v in obj[:3]:
            yield from _keys(v, prefix)


def test_no_output_calls_a_recording_a_step(capsys):
    """A key that says step is one training step: simulate, energy, the critical path and top ops
    name the whole recording ``recording_*``; the sweep's step columns are per step."""
    job = str(CORPUS / "ddp")
    outs = []
    for argv in (
        ["simulate", job, "--system", "switch", "--json", "--energy", "--device", "h100"],
        ["analyze", "critical-path", job, "--json"],
        ["analyze", "top", job, "--json"],
    ):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 0, (argv, err)
        outs.append(json.loads(out))
    for doc in outs:
        keys = set(_keys(doc))
        assert not {k for k in keys if k.split(".")[-1] in ("step_ns", "step_s", "step_us")}, keys
    sim, path, top = outs
    assert path["recording_ns"] > 0 and top["recording_us"] > 0 and sim["steps"] == 2
    energy = sim["energy"]
    assert energy["j_per_step"] == pytest.approx(energy["total_j"] / 2)


def test_sweep_step_is_one_training_step(tmp_path):
    pytest.importorskip("pyarrow")
    from chakra_trace.sweep import run_sweep
    from chakra_trace.sweep.results import load_results

    spec = {"name": "s", "workloads": {"ddp": str(CORPUS / "ddp")}, "axes": {"system": ["switch"]}}
    run_sweep(spec, tmp_path / "r", workers=1)
    (row,) = load_results(tmp_path / "r").to_dict("records")
    assert row["steps"] == 2 and row["step_ns"] == round(row["recording_ns"] / 2)
    assert row["npu_s"] == pytest.approx(row["sim_npus"] * row["step_s"])
    assert row["compute_s"] <= row["step_s"] * 1.000001
