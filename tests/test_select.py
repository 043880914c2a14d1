"""`chakra select` and `analyze.select`: job features, k representatives with weights, and how
well they reproduce a fleet's aggregate. The synthetic fleet (`synthesize.fleet`) is the test
bed; the statistical claim (selection beats random subsets) runs on a simulated fleet, `slow`."""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest

from chakra_trace.analyze.select import (
    FEATURE_NAMES,
    FleetFeatures,
    coverage,
    coverage_curve,
    find_jobs,
    job_features,
    select,
)
from chakra_trace.analyze.select.coverage import predict, random_errors
from chakra_trace.analyze.select.features import (
    BLOCKS,
    REFERENCE_BUS_GBPS,
    REFERENCE_LATENCY_US,
    SHARE_NAMES,
    SIZE_BIN_NAMES,
)
from chakra_trace.analyze.select.methods import Distances, assign, facility_location, kmedoids
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.devices import device_spec
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.synthesize.fleet import NPUS, synthetic_fleet
from chakra_trace.synthesize.patterns import collective, roofline_chain, training_step
from chakra_trace.validate import validate_workload
from conftest import DATA, run_cli

SHARES = BLOCKS["shares"]
SIZES = BLOCKS["sizes"]


def _f(workload, name="job", **kw):
    return job_features(workload, name, **kw)


# --------------------------------------------------------------------------- features


def test_features_are_a_fixed_length_vector_whose_shares_and_bins_sum_to_one():
    f = _f(training_step(8, layers=6, comp_us=100, nbytes=1 << 20))
    assert f.values.shape == (len(FEATURE_NAMES),) and f.values.dtype == np.float64
    assert len(FEATURE_NAMES) == len(set(FEATURE_NAMES))
    assert f.values[SHARES].sum() == pytest.approx(1.0)
    assert f.values[SIZES].sum() == pytest.approx(1.0)
    assert f["log2_ranks"] == 3 and f.ranks == 8
    assert f["size_1M_4M"] == 1.0  # every message is 1 MiB
    assert set(f.to_dict()["features"]) == set(FEATURE_NAMES)


def test_a_job_without_communication_has_no_size_bins_and_only_compute():
    f = _f(roofline_chain(2, [1e12, 2e12], [1e9, 1e9]))
    assert f.values[SIZES].sum() == 0
    assert f["compute"] == 1.0
    ref = device_spec("h100")  # no recorded durations: the reference roofline from FLOPs and bytes
    expect = sum(max(o / ref.peak_flops, 1e9 / ref.mem_bw) * 1e6 for o in (1e12, 2e12))
    assert f.serial_us == pytest.approx(expect)


def test_shares_and_sizes_do_not_depend_on_how_many_times_the_structure_repeats():
    a = _f(training_step(4, layers=8, comp_us=100, nbytes=1 << 22))
    b = _f(training_step(4, layers=16, comp_us=100, nbytes=1 << 22))
    np.testing.assert_allclose(a.values[SHARES], b.values[SHARES])
    np.testing.assert_allclose(a.values[SIZES], b.values[SIZES])
    assert a["log2_ranks"] == b["log2_ranks"] and a["log10_comm_compute"] == pytest.approx(b["log10_comm_compute"])
    assert b.serial_us == pytest.approx(2 * a.serial_us)
    assert b["log10_nodes_per_rank"] == pytest.approx(a["log10_nodes_per_rank"] + np.log10(2))


def test_ranks_sharing_one_trace_give_the_features_of_copies():
    shared = training_step(4, layers=3, comp_us=50, nbytes=1 << 16)
    copies = Workload({r: t.copy() for r, t in shared.traces.items()})
    np.testing.assert_array_equal(_f(shared).values, _f(copies).values)


def test_collective_time_is_latency_plus_bus_bytes_over_the_reference_bandwidth():
    n, size = 8, 64 << 20
    f = _f(collective(n, "ALL_REDUCE", size))
    per_rank = REFERENCE_LATENCY_US + size * 2 * (n - 1) / n / (REFERENCE_BUS_GBPS * 1e3)
    assert f.serial_us == pytest.approx(per_rank)
    assert f["all_reduce"] == 1.0
    g = _f(collective(n, "ALL_TO_ALL", size))
    assert g.serial_us == pytest.approx(REFERENCE_LATENCY_US + size * (n - 1) / n / (REFERENCE_BUS_GBPS * 1e3))


def test_a_communicator_over_some_ranks_uses_its_own_size():
    def job(groups):
        return collective(4, "ALL_GATHER", 1 << 24, groups=groups)

    whole = _f(job({"g": [0, 1, 2, 3]}))
    pairs = _f(job({"a": [0, 1], "b": [2, 3]}))
    assert whole.serial_us > pairs.serial_us  # (n - 1) / n: 3/4 against 1/2


def test_host_gaps_and_recorded_communication():
    b = TraceBuilder()
    x = b.comp("matmul", 300, start=1)
    g = b.comp("[host]", 100, start=301, deps=[x])
    b.collective("ALL_REDUCE", 1 << 20, start=401, duration=600, deps=[g])
    w = Workload({0: b.build()})
    f = _f(w)
    assert f["host"] > 0 and f["compute"] > 0
    assert f["host"] / f["compute"] == pytest.approx(100 / 300)
    rec = _f(w, comm_time="recorded")
    assert rec.serial_us == pytest.approx(1000)  # 300 + 100 + 600, as recorded
    with pytest.raises(ChakraError, match="comm_time"):
        _f(w, comm_time="measured")


def test_standardized_blocks_weigh_alike_and_constant_columns_vanish():
    jobs = list(itertools.islice(synthetic_fleet(60, seed=3), 60))
    fleet = FleetFeatures.from_jobs(_f(j.workload, j.name) for j in jobs)
    x = fleet.standardized()
    assert x.shape == (60, len(FEATURE_NAMES)) and np.isfinite(x).all()
    for cols in BLOCKS.values():
        assert (x[:, cols] ** 2).sum(axis=1).mean() == pytest.approx(1.0)
    constant = np.flatnonzero(fleet.matrix.std(axis=0) == 0)
    assert constant.size and (x[:, constant] == 0).all()  # e.g. memory and host: none in the fleet
    y = fleet.standardized({"scale": 4.0})
    assert (y[:, BLOCKS["scale"]] ** 2).sum(axis=1).mean() == pytest.approx(4.0)
    with pytest.raises(ChakraError, match="unknown block"):
        fleet.standardized({"size": 1.0})


def test_results_as_tables():
    pytest.importorskip("pandas")
    jobs = list(synthetic_fleet(12, seed=1))
    fleet = FleetFeatures.from_jobs(_f(j.workload, j.name) for j in jobs)
    assert list(fleet.to_pandas().columns) == list(FEATURE_NAMES)
    sel = select(fleet, 3)
    assert sel.to_pandas()["weight"].sum() == 12
    cov = coverage(sel, np.arange(1.0, 13.0), metric_names=["t"])
    assert cov.to_pandas().loc["t", "true"] == 78.0
    curve = coverage_curve(fleet, np.arange(1.0, 13.0), [1, 3], trials=2)
    assert len(curve.to_pandas()) == 4 * 2


# --------------------------------------------------------------------------- selection


def _blobs(sizes, dim=6, seed=0, spread=0.05):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(sizes), dim)) * 10
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return centres[labels] + rng.normal(size=(labels.size, dim)) * spread, labels


@pytest.mark.parametrize("method", ["kmedoids", "facility"])
def test_k_obvious_clusters_get_one_representative_each_weighted_by_size(method):
    sizes = [40, 7, 120, 3, 25]
    x, labels = _blobs(sizes)
    sel = select(x, 5, method)
    assert sorted(labels[sel.indices].tolist()) == [0, 1, 2, 3, 4]
    assert dict(zip(labels[sel.indices].tolist(), sel.weights.tolist())) == dict(enumerate(sizes))
    assert (labels[sel.indices[sel.assignment]] == labels).all()  # every job stands with its cluster


@pytest.mark.parametrize("method", ["kmedoids", "facility"])
def test_selection_is_deterministic_and_weights_sum_to_n(method):
    x, _ = _blobs([30, 30, 30, 30], spread=3.0, seed=1)
    a, b = select(x, 6, method, seed=7), select(x, 6, method, seed=7)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.assignment, b.assignment)
    assert a.weights.sum() == x.shape[0] and (a.weights >= 1).all()
    assert (a.assignment[a.indices] == np.arange(6)).all()  # a representative stands for itself
    d = Distances(x)
    np.testing.assert_allclose(
        a.distance, d.rows(np.arange(x.shape[0]))[np.arange(x.shape[0]), a.indices[a.assignment]]
    )
    assert a.to_dict()["representatives"][0]["weight"] == int(a.weights[0])


@pytest.mark.parametrize("method", ["kmedoids", "facility"])
def test_the_chunked_distances_select_what_the_matrix_selects(method):
    x, _ = _blobs([50, 50, 50], spread=2.0, seed=2)
    whole = select(x, 7, method, seed=3)
    chunked = select(x, 7, method, seed=3, max_matrix_bytes=0)
    np.testing.assert_array_equal(whole.indices, chunked.indices)
    np.testing.assert_allclose(whole.distance, chunked.distance, atol=1e-9)


def test_kmedoids_beats_random_subsets_and_nearly_reaches_the_optimum():
    x, _ = _blobs([6, 5, 4], dim=3, spread=1.5, seed=4)
    d = Distances(x)
    rng = np.random.default_rng(0)
    best = min(assign(d, np.array(c))[1].sum() for c in itertools.combinations(range(x.shape[0]), 3))
    randoms = [assign(d, rng.choice(x.shape[0], 3, replace=False))[1].sum() for _ in range(50)]
    for seed in range(5):
        obj = select(x, 3, "kmedoids", seed=seed).objective
        assert obj <= np.mean(randoms)
        assert obj <= 1.02 * best


def test_kmedoids_with_one_is_the_exact_medoid_and_facility_starts_there():
    x, _ = _blobs([20, 9], spread=4.0, seed=5)
    d = Distances(x)
    medoid = int(np.argmin(d.rows(np.arange(x.shape[0])).sum(axis=1)))
    assert kmedoids(d, 1, np.random.default_rng(0)).tolist() == [medoid]
    assert facility_location(d, 4)[0] == medoid


def test_facility_location_is_monotone_and_nested():
    x, _ = _blobs([25, 25, 25, 25], spread=3.0, seed=6)
    d = Distances(x)
    order = facility_location(d, 20)
    objectives = [assign(d, order[:k])[1].sum() for k in range(1, 21)]
    assert all(b <= a + 1e-9 for a, b in zip(objectives, objectives[1:]))  # F(S) grows with S
    for k in (3, 8, 15):
        assert facility_location(d, k).tolist() == order[:k].tolist()
    assert len(set(order.tolist())) == 20


@pytest.mark.parametrize("method", ["kmedoids", "facility"])
def test_k_equal_to_n_reproduces_every_aggregate_exactly(method):
    x, _ = _blobs([4, 4], spread=0.0)  # duplicates: each job still stands for itself
    metric = np.random.default_rng(0).uniform(1, 100, size=(8, 2))
    sel = select(x, 8, method)
    assert sorted(sel.indices.tolist()) == list(range(8)) and (sel.weights == 1).all()
    for est in ("count", "ratio"):
        cov = coverage(sel, metric, estimator=est, proxy=np.arange(1.0, 9.0))
        assert cov.error.max() == pytest.approx(0, abs=1e-12)


def test_bad_selections_are_refused():
    x = np.zeros((5, 3))
    for k in (0, 6):
        with pytest.raises(ChakraError, match="k must be between 1 and the number of jobs"):
            select(x, k)
    with pytest.raises(ChakraError, match="unknown method"):
        select(x, 2, "kmeans")
    y = x.copy()
    y[3, 1] = np.nan
    with pytest.raises(ChakraError, match="job '3'"):
        select(y, 2)


# --------------------------------------------------------------------------- coverage


def test_count_and_ratio_estimators():
    m = np.array([10.0, 20.0, 30.0, 40.0])
    near = np.array([0, 0, 1, 1])
    idx = np.array([0, 3])
    assert predict(idx, near, m[:, None]).tolist() == [2 * 10 + 2 * 40]
    proxy = np.array([1.0, 2.0, 3.0, 4.0])  # metric = 10 x proxy: the ratio estimator is exact
    assert predict(idx, near, m[:, None], "ratio", proxy).tolist() == [pytest.approx(100.0)]
    with pytest.raises(ChakraError, match="proxy"):
        predict(idx, near, m[:, None], "ratio")


def test_coverage_reports_error_per_metric():
    x, _ = _blobs([10, 10], spread=0.1, seed=8)
    metric = np.r_[np.full(10, 1.0), np.full(10, 3.0)]
    sel = select(x, 2, "kmedoids")
    cov = coverage(sel, metric, metric_names=["t"], estimator="count")
    assert cov.true.tolist() == [40.0] and cov.predicted.tolist() == [40.0] and cov.error.tolist() == [0.0]
    assert cov.to_dict()["metrics"][0]["metric"] == "t"
    with pytest.raises(ChakraError, match="one value"):
        coverage(sel, metric[:5], estimator="count")


def test_coverage_curve_has_every_method_and_baseline_per_k():
    x, _ = _blobs([15, 15, 10], spread=2.0, seed=9)
    metric = np.abs(x[:, :2]) + 1
    ks = [1, 2, 5, 40]
    curve = coverage_curve(x, metric, ks, estimator="count", trials=5, repeats=2)
    assert set(curve.errors) == {"kmedoids", "facility", "random", "random+assign"}
    for err in curve.errors.values():
        assert err.shape == (4, 2) and np.isfinite(err).all()
    for method in ("kmedoids", "facility"):
        assert curve.error_at(40, method).max() == pytest.approx(0, abs=1e-12)
        obj = curve.objective[method]
        assert obj[-1] == pytest.approx(0) and obj[0] >= obj[1] >= obj[2]
    rows = curve.to_dict()
    assert rows["ks"] == ks and len(rows["errors"]["random"]) == 4
    with pytest.raises(ChakraError, match="every k"):
        coverage_curve(x, metric, [0, 3], estimator="count")


def test_random_baseline_with_every_job_is_exact():
    m = np.arange(1.0, 11.0)[:, None]
    errs = random_errors(Distances(np.arange(10.0)[:, None]), m, 10, np.random.default_rng(0), 3)
    assert errs["random"].tolist() == [0.0] and errs["random+assign"].tolist() == [0.0]


# --------------------------------------------------------------------------- the synthetic fleet


def test_the_synthetic_fleet_is_seeded_diverse_and_runs_on_64_npus():
    jobs = list(synthetic_fleet(40, seed=11))
    again = list(synthetic_fleet(20, seed=11))
    assert [j.params for j in jobs[:20]] == [j.params for j in again]  # job i depends on (seed, i) only
    assert [j.name for j in jobs] != [j.name for j in synthetic_fleet(40, seed=12)]
    assert {"ddp", "fsdp", "moe", "pipeline"} <= {j.family for j in jobs}
    assert "parallel" not in {j.family for j in jobs}  # (needs master traces)
    for j in jobs:
        assert NPUS % len(j.workload) == 0
        assert j.to_dict()["ranks"] == len(j.workload)
    for j in jobs[:8]:
        report = validate_workload(j.workload)
        assert not report.errors, (j.name, report.errors[:3])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert simulate_on(j.workload, "dgx-8x8").step_ns > 0


@pytest.mark.torch
def test_the_fleet_parallelizes_captured_masters():
    pytest.importorskip("torch")
    from chakra_trace.capture import capture, load_build

    root = DATA.parent.parent
    master = capture(load_build(f"{root}/examples/models/gpt.py:build"), {"preset": "tiny"}, batch=8, seq=16).trace
    jobs = [j for j in synthetic_fleet(60, seed=0, masters=[master]) if j.family == "parallel"]
    assert jobs
    for j in jobs[:3]:
        assert NPUS % len(j.workload) == 0 and j.params["device"] in ("v100", "a100", "h100")
        f = _f(j.workload, j.name)
        assert f["compute"] > 0 and np.isfinite(f.values).all()


# --------------------------------------------------------------------------- jobs on disk and the CLI


def _write_fleet(folder, n=12, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    jobs = list(synthetic_fleet(n, seed))
    for j in jobs:
        j.workload.save(folder / j.name)
    return jobs


def test_find_jobs_in_folders_of_prefixes_and_of_job_folders(tmp_path):
    jobs = _write_fleet(tmp_path / "flat", 4)
    found = find_jobs([tmp_path / "flat"])
    assert [j.name for j in found] == sorted(j.name for j in jobs)
    nested = tmp_path / "nested"
    for j in jobs[:3]:
        (nested / j.name).mkdir(parents=True)
        j.workload.save(nested / j.name / "trace")
    (nested / ".chakra-cache").mkdir()
    (nested / "index.json").write_text("{}")
    assert [j.name for j in find_jobs([nested])] == sorted(j.name for j in jobs[:3])
    prefix = tmp_path / "flat" / jobs[0].name
    assert [j.path for j in find_jobs([prefix])] == [prefix]
    with pytest.raises(ChakraError, match="given twice"):
        find_jobs([prefix, tmp_path / "flat"])
    with pytest.raises(ChakraError, match="no such file"):
        find_jobs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChakraError, match="holds no jobs"):
        find_jobs([tmp_path / "empty"])


def test_cli_selects_and_reports_coverage(tmp_path, capsys):
    _write_fleet(tmp_path / "fleet", 12)
    out = tmp_path / "sel.json"
    rc, stdout, err = run_cli(
        ["select", str(tmp_path / "fleet"), "-k", "3", "--metric-system", "dgx-8x8", "--json", "-o", str(out)], capsys
    )
    assert rc == 0, err
    doc = json.loads(stdout)
    assert doc == json.loads(out.read_text())
    reps = doc["selection"]["representatives"]
    assert len(reps) == 3 and sum(r["weight"] for r in reps) == 12 == doc["jobs"]
    assert all(r["step_ms"]["dgx-8x8"] > 0 for r in reps)
    (row,) = doc["coverage"]["metrics"]
    assert row["metric"] == "dgx-8x8" and row["true"] > 0 and row["relative_error"] >= 0
    assert "random_relative_error" in row

    rc, stdout, err = run_cli(["select", str(tmp_path / "fleet"), "-k", "2", "--method", "facility"], capsys)
    assert rc == 0, err
    assert "2 of 12 jobs (facility" in stdout and "stands for" in stdout

    rc, _, err = run_cli(["select", str(tmp_path / "fleet"), "-k", "13"], capsys)
    assert rc == 2 and "more than the 12 jobs" in err


def test_cli_on_the_corpus(capsys):
    rc, stdout, err = run_cli(["select", str(DATA / "corpus"), "-k", "2", "--json"], capsys)
    assert rc == 0, err
    doc = json.loads(stdout)
    assert doc["jobs"] == 6 and sum(r["weight"] for r in doc["selection"]["representatives"]) == 6


# --------------------------------------------------------------------------- the claim, on a simulated fleet


@pytest.mark.slow
def test_selection_predicts_the_fleet_total_better_than_random_subsets():
    """300 jobs simulated on two systems: at k = 20 and 30 the representatives' ratio estimate of
    the fleet's total step time is closer than random subsets of the same size are on average."""
    jobs = list(synthetic_fleet(300, seed=5))
    fleet = FleetFeatures.from_jobs(_f(j.workload, j.name) for j in jobs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metric = np.array([[simulate_on(j.workload, s).step_ns for s in ("torus-8x8", "dgx-8x8")] for j in jobs])
    curve = coverage_curve(fleet, metric, [20, 30], trials=50, repeats=5)
    for k in (20, 30):
        for method in ("kmedoids", "facility"):
            assert curve.error_at(k, method).mean() < curve.error_at(k, "random").mean(), (k, method, curve.to_dict())


def test_share_and_bin_names_match_the_blocks():
    assert FEATURE_NAMES[SHARES] == SHARE_NAMES and FEATURE_NAMES[SIZES] == SIZE_BIN_NAMES
    assert SIZE_BIN_NAMES[0] == "size_lt_1K" and SIZE_BIN_NAMES[-1] == "size_ge_1G"
