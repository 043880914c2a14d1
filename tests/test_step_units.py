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
