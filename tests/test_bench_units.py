"""`chakra bench compare` and `chakra bench report` compare measurements in one unit: a replay
that times each recorded step (operators) against one that times a pass over the whole
recording of N steps (calibrated kernels) is compared per step, or refused (exit 2, one line
naming both units) when N is not known; both commands then give the same ratio.

The README's pair (`replay.json` of ops mode, `replay_duration.json` of duration mode) is
built here through the public API (`ReplayResult`, `Measurement`), as the replayer writes it
today and as it wrote it before measurements carried their unit (from the replay's mode)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chakra_trace.replay.bench_report import bench_report
from chakra_trace.replay.measure import Measurement, load_measurements
from chakra_trace.replay.result import ReplayResult, merge_runs, step_measurement
from chakra_trace.replay.units import PER_RECORDING, PER_STEP, unit_of
from conftest import run_cli


def _replay(mode: str, per_sample_s: float, *, legacy: bool, steps: int | None = 2) -> ReplayResult:
    """Three runs of a 2-rank replay whose samples sit around `per_sample_s`."""
    rng = np.random.default_rng(int(per_sample_s * 1e6))
    runs = []
    for run in range(3):
        per_rank = {}
        for r in range(2):
            samples = (per_sample_s * (1 + 0.02 * run + 0.01 * rng.standard_normal(12))).tolist()
            extra: dict = {}
            if not legacy and mode == "ops":
                extra = {"unit": PER_STEP, "steps_per_sample": 1, "steps": [2, 3]}
            elif not legacy:
                extra = {"unit": PER_RECORDING, **({"steps_per_sample": steps} if steps else {})}
            elif mode == "ops":  # (before: the ranks said per step, the step nothing)
                extra = {"unit": PER_STEP, "steps": [2, 3]}
            per_rank[r] = Measurement(f"rank{r}", samples, 1, "converged", {"timer": "perf_counter"}, extra)
        basis = "Kineto profiler steps" if mode == "ops" else (f"span of {steps} steps" if steps else "span")
        runs.append(
            ReplayResult(
                "out/demo/traces" if mode == "ops" else "out/demo/job",
                2,
                mode,
                "cpu",
                "gloo",
                step_measurement(per_rank),
                per_rank,
                recorded_basis=basis,
            )  # fmt: skip
        )
    return merge_runs(runs)


@pytest.mark.parametrize("legacy", [False, True], ids=["unit-in-file", "unit-from-mode"])
def test_compare_and_report_agree_per_step_on_the_readme_pair(tmp_path, capsys, legacy):
    ops, dur = tmp_path / "replay.json", tmp_path / "replay_duration.json"
    _replay("ops", 0.030, legacy=legacy).save(ops)  # 30 ms per recorded step
    _replay("duration", 0.175, legacy=legacy).save(dur)  # 175 ms per pass over 2 steps: 87.5 ms per step
    if legacy:
        assert "unit" not in json.loads(dur.read_text())["step"]["extra"]
    assert str(unit_of(load_measurements(dur)["step"])) == "seconds per recording of 2 steps"
    assert unit_of(load_measurements(ops)["step"]).unit == PER_STEP

    rc, out, err = run_cli(["bench", "compare", str(ops), "vs", str(dur), "--json"], capsys)
    assert rc == 0, err
    step = next(c for c in json.loads(out) if c["name"] == "step")
    assert step["unit"] == PER_STEP and "divided by 2" in step["converted"]
    # ground truth from the samples: per-step medians of each run, geometric means
    raw = {p: json.loads(p.read_text())["step"] for p in (ops, dur)}
    gm = {}
    for p, d in raw.items():
        s, runs = np.array(d["samples"]), np.array(d["runs"])
        meds = [np.median(s[runs == k]) for k in np.unique(runs)]
        gm[p] = float(np.exp(np.mean(np.log(meds)))) / (2 if p == dur else 1)
    assert step["ratio"] == pytest.approx(gm[dur] / gm[ops], rel=1e-9)
    assert 2.5 < step["ratio"] < 3.3 and step["status"] == "slower"

    # the report, A (baseline) = ops, B (result) = duration: the same ratio, the same sign, said so
    rep = bench_report([str(dur)], [str(ops)]).to_dict()
    (c,) = rep["comparisons"]
    assert c["comparison"]["ratio"] == pytest.approx(step["ratio"], rel=1e-12)
    assert c["comparison"]["status"] == step["status"] == "slower"
    assert (
        c["unit"] == PER_STEP
        and c["comparison"]["verdict"].startswith("result is ")
        and "than baseline" in c["comparison"]["verdict"]
    )
    assert any("compared in seconds per recorded step" in f for f in rep["flags"])
    # the other way round (the review's report): faster by the reciprocal, as compare says of A vs B
    (c2,) = bench_report([str(ops)], [str(dur)]).to_dict()["comparisons"]
    assert c2["comparison"]["ratio"] == pytest.approx(1 / step["ratio"], rel=1e-12)
    assert c2["comparison"]["status"] == "faster"
    rc, out, err = run_cli(["bench", "compare", str(ops), "vs", str(dur)], capsys)
    assert rc == 0 and "unit: seconds per recorded step" in out and "B is" in out and "slower than A" in out


def test_different_units_without_step_counts_are_refused(tmp_path, capsys):
    ops, dur = tmp_path / "replay.json", tmp_path / "replay_duration.json"
    _replay("ops", 0.030, legacy=False).save(ops)
    _replay("duration", 0.175, legacy=False, steps=None).save(dur)  # a recording of unknown steps
    rc, out, err = run_cli(["bench", "compare", str(ops), "vs", str(dur)], capsys)
    assert rc == 2 and not out and err.count("\n") == 1
    assert "seconds per recorded step" in err and "seconds per recording (steps unknown)" in err
    rc, out, err = run_cli(["bench", "report", str(dur), "--baseline", str(ops), "-o", str(tmp_path / "r.md")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "seconds per recording (steps unknown)" in err
    # a plain measurement (seconds per sample) against a replay's step: refused too
    Measurement("step", [0.03] * 6).save(tmp_path / "plain.json")
    rc, out, err = run_cli(["bench", "compare", str(tmp_path / "plain.json"), str(ops)], capsys)
    assert rc == 2 and "seconds per sample" in err and "seconds per recorded step" in err
