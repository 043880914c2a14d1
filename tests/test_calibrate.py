"""Calibrate, then predict: the alpha-beta fit, the profile file, the simulator on it, predict's
band, and a real (tiny) gloo calibration on 127.0.0.1."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from chakra_trace.calibrate import ComputeModel, SystemProfile, fit_alpha_beta, fit_network, predict
from chakra_trace.calibrate.network import simulated_ns
from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.synthesize.patterns import collective, training_step

SIZES = [4096, 65536, 1 << 20, 1 << 24]


def _profile(alpha=50_000.0, beta=0.5, ranks=2) -> SystemProfile:
    """A profile fitted to exact synthetic all-reduce times (no measurement)."""
    t = [alpha + beta * s for s in SIZES]
    fit = fit_alpha_beta(SIZES, t, collective="all_reduce", ranks=ranks)
    compute = ComputeModel(2000.0, [1900.0, 2100.0], [[1e4, 5.0], [1e8, 50.0]], 20.0)
    return SystemProfile("gloo", [fit], {ranks: fit_network([fit], ranks)}, compute, {"host": "test"})


@pytest.mark.timeout(30)
def test_fit_recovers_known_parameters_exactly():
    sizes = np.array([4096, 16384, 65536, 1 << 20, 1 << 26], float)
    for alpha, beta in ((120_000.0, 0.37), (0.0, 1.25), (5e6, 0.0)):
        f = fit_alpha_beta(sizes, alpha + beta * sizes, collective="all_gather", ranks=4)
        assert f.alpha_ns == pytest.approx(alpha, rel=1e-9, abs=1e-6)
        assert f.beta_ns_per_byte == pytest.approx(beta, rel=1e-9, abs=1e-12)
        assert max(abs(r) for r in f.residuals) < 1e-9
    noisy = (1e5 + 0.5 * sizes) * np.array([1.02, 0.98, 1.01, 0.99, 1.0])
    f = fit_alpha_beta(sizes, noisy)
    assert 0 < f.spread <= 0.03 and f.alpha_ns > 0 and f.beta_ns_per_byte > 0
    with pytest.raises(ChakraError):
        fit_alpha_beta([4096, 4096], [1.0, 2.0])


@pytest.mark.timeout(30)
def test_profile_round_trips(tmp_path):
    prof = _profile()
    path = tmp_path / "profile.json"
    prof.save(path)
    back = SystemProfile.load(path)
    assert back.to_dict() == prof.to_dict()
    assert json.loads(path.read_text())["schema"] == "chakra-profile/1"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ChakraError, match="not a system profile"):
        SystemProfile.load(bad)


@pytest.mark.timeout(30)
def test_simulated_collective_equals_the_fit(tmp_path, capsys):
    prof = _profile(alpha=80_000.0, beta=0.8)
    fit = prof.fits[0]
    bw, lat = prof.link(2)
    for size in (8192, 1 << 20, 3 << 22):  # sizes the fit never saw
        got = simulated_ns("all_reduce", 2, size, lat, bw)
        assert got == pytest.approx(fit.predict_ns(size), rel=1e-4)
    # the CLI: `chakra simulate --profile` runs the job's ranks on the fitted network
    path = tmp_path / "p.json"
    prof.save(path)
    from chakra_trace.io.et import write_trace

    trace = collective(2, "ALL_REDUCE", 1 << 20).traces[0]
    for r in (0, 1):
        write_trace(trace, tmp_path / f"coll.{r}.et")
    job = tmp_path / "coll"
    assert main(["simulate", str(job), "--profile", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finish_ns"] == [pytest.approx(fit.predict_ns(1 << 20), rel=1e-4)] * 2
    assert main(["simulate", str(job), "--profile", str(path), "--system", "ring-8"]) == 2


@pytest.mark.timeout(60)
def test_predict_band_contains_point_and_scales_out(tmp_path, capsys):
    prof = _profile()
    job = training_step(2, layers=4, comp_us=100, nbytes=1 << 20)
    for comm in ("network", "table"):
        for compute in ("model", "recorded"):
            p = predict(job, prof, compute=compute, comm=comm)
            assert p.low_ms <= p.step_ms <= p.high_ms
            assert p.ranks == 2 and p.step_ms > 0
    four = predict(job, prof, ranks=4)
    assert four.ranks == 4 and four.low_ms <= four.step_ms <= four.high_ms
    rec = predict(job, prof, compute="recorded", comm="table")
    # 4 layers x 100 µs x (forward + 2 backward?) at least the recorded compute
    assert rec.step_ms >= 0.4
    path = tmp_path / "p.json"
    prof.save(path)
    assert main(["predict", "tests/data/corpus/ddp", "--profile", str(path), "--compute", "model", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["band_ms"][0] <= out["step_ms"] <= out["band_ms"][1]
    assert main(["predict", "tests/data/corpus/ddp", "--profile", str(path), "--batch", "16"]) == 2
    assert "shape rules" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_table_costs_collectives_by_their_fit():
    prof = _profile(alpha=1e6, beta=2.0)  # slow enough to dominate
    job = collective(2, "ALL_REDUCE", 1 << 20)
    p = predict(job, prof, compute="model", comm="table")
    assert p.step_ms == pytest.approx(prof.fits[0].predict_ns(1 << 20) / 1e6, rel=1e-3)


@pytest.mark.torch
@pytest.mark.timing
@pytest.mark.timeout(120)
def test_real_gloo_calibration_is_monotone():
    pytest.importorskip("torch")
    from chakra_trace.calibrate import measure_collectives
    from chakra_trace.calibrate.calibrate import profile_from_points
    from chakra_trace.calibrate.compute import ComputeModel as CM

    sizes = [4096, 1 << 20, 1 << 23]
    points = measure_collectives(["all_reduce"], sizes, (2,), repeats=8, warmup=2, backend="gloo")
    # the fastest of each size's samples: a busy machine only ever adds time, so the minimum is
    # what the size costs (a median of 8 can carry a burst of load: 4 KiB once measured 3.3 ms here)
    low = [p.measurement.min for p in sorted(points, key=lambda p: p.nbytes)]
    assert low[0] < low[1] < low[2]  # 4 KiB < 1 MiB < 8 MiB
    prof = profile_from_points(points, CM(1000.0))
    f = prof.fits[0]
    assert f.alpha_ns > 0 and f.beta_ns_per_byte > 0
    assert all(p.measurement.n >= 8 for p in points)


# ------------------------------------------------------------------ compute="replay"


def _fake_timings(job, ci=(0.9, 1.2)):
    """RankTimings as a replay would give, 3 µs per top-level op (whole µs: no rounding), keyed
    by the job's own rf_ids; one op more whose rf_id is unknown but whose caller is a node, and
    one with neither (unplaced)."""
    from chakra_trace.calibrate.replayed import RankTiming
    from chakra_trace.io.workload import Workload
    from chakra_trace.schema.enums import NodeType

    wl = Workload.open(job)
    out = {}
    for r, t in wl.traces.items():
        rf, has = t.attr_column("rf_id")
        comp = (t.types == NodeType.COMP_NODE) & np.asarray(has, bool)
        ids = np.asarray(rf, np.int64)[comp]
        ids = np.r_[ids, [10**9, 10**9 + 1]]
        ns = np.full(ids.size, 3000.0)
        anc = [[] for _ in range(ids.size - 2)] + [[10**9 + 7, int(ids[0])], [10**9 + 8]]
        total = float(ns.sum())
        out[r] = RankTiming(ids, ns, [total] * 8, (ci[0] * total, ci[1] * total), 2, 0.0, 0.0, {}, anc)
    return out


@pytest.mark.timeout(60)
def test_replay_compute_is_the_replayed_node_times_on_the_path(monkeypatch):
    """The invariant: the simulated compute of each rank is exactly the replayed per-node times
    (placed by rf_id, or on the nearest caller that is a node) summed; the band holds the point
    and widens with the replay's CI."""
    pred = importlib.import_module("chakra_trace.calibrate.predict")

    job = "tests/data/corpus/ddp"
    fake = _fake_timings(job)
    monkeypatch.setattr(pred, "replay_times", lambda *a, **k: fake)
    prof = _profile()
    for comm in ("network", "table"):
        p = predict(job, prof, compute="replay", comm=comm)
        assert p.compute == "replay"
        for r, tm in fake.items():
            placed = tm.ns.sum() - 3000.0  # (the op with no node and no caller among them is left out)
            assert p.detail["replayed_compute_ms"][r] == pytest.approx(placed / 1e6, abs=1e-12)
            assert p.detail["compute_ms"][r] == pytest.approx(p.detail["node_compute_ms"][r], abs=1e-12)
            assert p.detail["replay"]["per_rank"][r]["unplaced_ms_per_step"] == pytest.approx(3e-3 / 2)
        assert p.low_ms <= p.step_ms <= p.high_ms
        # the replay's CI (x1.2 at its top) is in the band: at least half its share of the compute
        assert p.high_ms - p.step_ms >= 0.1 * min(p.detail["replayed_compute_ms"]) / p.steps
    assert predict(job, prof).compute == "replay"  # the default for a recording
    assert predict(training_step(2, layers=2, comp_us=50, nbytes=4096), prof).compute == "model"
    with pytest.raises(ChakraError, match="host traces"):
        predict(training_step(2, layers=2, comp_us=50, nbytes=4096), prof, compute="replay")
    with pytest.raises(ChakraError, match="rescaled"):
        predict(job, prof, compute="replay", batch=8)


@pytest.mark.timeout(30)
def test_replay_timing_scales_ops_to_the_median_pass():
    from chakra_trace.calibrate.replayed import RankTiming, timing_of

    own = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 30.0], [2.0, 2.0, 3.0]] * 3) * 1000
    tm = timing_of([5, 6, 7], own, 0.0, 2, [10.0], {}, [[], [], []])
    assert tm.total_ns == pytest.approx(float(np.median(own.sum(axis=1))))
    assert tm.ci_ns[0] <= tm.total_ns <= tm.ci_ns[1]
    assert RankTiming.from_dict(json.loads(json.dumps(tm.to_dict()))).to_dict() == tm.to_dict()


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_replay_compute_replays_once_and_keeps_it(tmp_path, monkeypatch):
    """compute="replay" on the 2-rank ddp recording: real replay processes, then the kept timing
    (in memory, then from the file beside the traces) without replaying again."""
    pytest.importorskip("torch")
    import shutil

    import chakra_trace.calibrate.replayed as rp
    import chakra_trace.replay.launch as launch

    job = tmp_path / "ddp"
    shutil.copytree("tests/data/corpus/ddp", job, ignore=shutil.ignore_patterns(".chakra-cache"))
    prof = _profile()
    p = predict(job, prof, compute="replay", replay_budget_s=0.3)
    rep = p.detail["replay"]
    assert rep["ranks"] == 2 and all(x["passes"] >= 10 for x in rep["per_rank"])
    assert p.low_ms <= p.step_ms <= p.high_ms
    for r, x in enumerate(rep["per_rank"]):
        lo, hi = x["ci_ms_per_step"]
        assert lo <= x["replayed_ms_per_step"] <= hi
        placed = x["replayed_ms_per_step"] - x["unplaced_ms_per_step"]
        assert p.detail["replayed_compute_ms"][r] == pytest.approx(placed * p.steps, abs=0.05)
    from chakra_trace.io.cache import cache_dir

    assert list(cache_dir().glob("replay-times.*.json")) and not (job / ".chakra-cache").exists()

    def no_replay(*a, **k):
        raise AssertionError("replayed again")

    monkeypatch.setattr(launch, "run_ranks", no_replay)
    again = predict(job, prof, compute="replay", replay_budget_s=0.3)
    assert again.step_ms == p.step_ms and again.band_ms == p.band_ms
    rp._MEMO.clear()  # (from the file now)
    assert predict(job, prof, compute="replay", replay_budget_s=0.3).step_ms == p.step_ms


@pytest.mark.torch
@pytest.mark.timing  # (a share of measured time: it moved past 10% once under a loaded default run)
@pytest.mark.timeout(180)
def test_replay_compute_places_nearly_all_its_time(tmp_path):
    """compute="replay": the replayed time that lands on no node of the graph is under a tenth of
    what lands on one, on every rank of the 2-rank ddp recording."""
    pytest.importorskip("torch")
    import shutil

    job = tmp_path / "ddp"
    shutil.copytree("tests/data/corpus/ddp", job, ignore=shutil.ignore_patterns(".chakra-cache"))
    p = predict(job, _profile(), compute="replay", replay_budget_s=0.3)
    for x in p.detail["replay"]["per_rank"]:
        placed = x["replayed_ms_per_step"] - x["unplaced_ms_per_step"]
        assert x["unplaced_ms_per_step"] < 0.1 * placed, x
