"""`compare_runs`: runs (processes) as the unit of replication, on simulated benchmark data.

The data imitate real benchmarks: every run (process) has its own level (lognormal, 10-15% between-run
sd: memory layout, clock frequency, cache state), and its samples add small autocorrelated noise (AR(1))
plus occasional slow outliers. All seeded: the rates below are the same on every run of the tests.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from chakra_trace.cli import main
from chakra_trace.replay.comparison import compare, compare_runs
from chakra_trace.replay.measure import Measurement, load_measurements, save_measurements
from chakra_trace.replay.statistics import t_cdf

TRIALS = 200


def simulated_run(rng, centre: float, *, between: float = 0.15, n: int = 30, within: float = 0.02, phi: float = 0.6):
    """One process's samples: a run level exp(N(log centre, between²)), AR(1) noise of sd `within`
    (lag-1 correlation `phi`), and 3% outliers up to ~1.3x slower."""
    level = math.log(centre) + between * rng.standard_normal()
    eps = within * math.sqrt(1 - phi * phi) * rng.standard_normal(n)
    noise = np.empty(n)
    prev = 0.0
    for i in range(n):
        prev = phi * prev + eps[i]
        noise[i] = prev
    x = np.exp(level + noise)
    slow = rng.random(n) < 0.03
    x[slow] *= 1.0 + rng.exponential(0.3, int(slow.sum()))
    return x


def runs(rng, k: int, centre: float, **kw) -> list[np.ndarray]:
    return [simulated_run(rng, centre, **kw) for _ in range(k)]


def test_same_distribution_is_called_different_at_most_alpha():
    """Two sets of 10 runs of the same program: a difference is reported in <= 5% of trials (7% allowed for
    the binomial noise of 200 trials). Measured: 6 of 200 (3.0%) with this seed. The old per-sample test on
    the same kind of data (each side's runs pooled into one measurement) calls 26 of 50 (52%) different
    here, and 111 of these 200 (55.5%): this test fails with it."""
    rng = np.random.default_rng(12)
    hits = sum(compare_runs(runs(rng, 10, 6e-3), runs(rng, 10, 6e-3), resamples=0).meaningful for _ in range(TRIALS))
    assert hits / TRIALS <= 0.07, hits

    old = 0
    for _ in range(50):
        a, b = np.concatenate(runs(rng, 10, 6e-3)), np.concatenate(runs(rng, 10, 6e-3))
        old += compare(Measurement("a", a.tolist()), Measurement("b", b.tolist())).significant
    assert old / 50 > 0.3, old  # the per-sample test: process noise looks like a difference


def test_a_ten_percent_slowdown_is_found_with_twenty_runs_per_side():
    """B 10% slower, 10% between-run sd, 20 runs per side: the t-test's power is ~84% (noncentrality
    log(1.1) / (0.1 * sqrt(2/20)) = 3.0); measured 173 of 200 (86.5%) with this seed. (10 runs per side
    would give ~52%: with this much run-to-run noise, more runs are what buys power, not more samples.)"""
    rng = np.random.default_rng(13)
    found = 0
    for _ in range(TRIALS):
        c = compare_runs(runs(rng, 20, 6e-3, between=0.1), runs(rng, 20, 6.6e-3, between=0.1), resamples=0)
        found += c.status == "slower"
    assert found / TRIALS >= 0.80, found


def test_one_run_per_side_is_not_enough_evidence():
    """The issue's case: two single runs whose medians are 6.09 and 9.51 ms, thousands of samples each.
    The per-sample test calls that overwhelmingly significant; runs as the unit say there is no evidence."""
    rng = np.random.default_rng(14)
    a = Measurement("step", list(6.09e-3 * np.exp(0.01 * rng.standard_normal(2000))))
    b = Measurement("step", list(9.51e-3 * np.exp(0.01 * rng.standard_normal(2000))))
    assert compare(a, b).significant  # what `chakra bench compare` used to say
    c = compare_runs(a, b)
    assert c.status == "not_enough_evidence" and not c.significant and not c.meaningful
    assert c.verdict.startswith("not enough evidence (1 run per side; need ≥ 3 per side): B/A = 1.56")
    assert c.a_center == pytest.approx(6.09e-3, rel=0.01) and c.ratio == pytest.approx(9.51 / 6.09, rel=0.01)
    assert math.isnan(c.p_value) and c.ratio_ci is None
    assert compare_runs([a, a], [b, b, b]).status == "not_enough_evidence"  # 2 runs are still too few


def test_welch_on_log_run_medians_by_hand():
    ma, mb = [1.0, 1.1, 0.9, 1.05], [1.2, 1.3, 1.25]
    c = compare_runs([[x] * 3 for x in ma], [[x] * 5 for x in mb], resamples=0)
    la, lb = np.log(ma), np.log(mb)
    va, vb = la.var(ddof=1) / 4, lb.var(ddof=1) / 3
    t = (lb.mean() - la.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    assert c.t_stat == pytest.approx(t) and c.df == pytest.approx(df)
    assert c.p_value == pytest.approx(2 * t_cdf(-abs(t), df))
    assert c.ratio == pytest.approx(math.exp(lb.mean() - la.mean()))
    assert c.ratio_ci[0] < c.ratio < c.ratio_ci[1] and c.a_runs == 4 and c.b_runs == 3


def test_threshold_and_bootstrap():
    rng = np.random.default_rng(15)
    # a real but tiny (0.5%) difference, measured very precisely: significant, yet not meaningful
    a = [1.0 * np.exp(0.001 * rng.standard_normal(20)) for _ in range(30)]
    b = [1.005 * np.exp(0.001 * rng.standard_normal(20)) for _ in range(30)]
    c = compare_runs(a, b)
    assert c.significant and c.status == "no_meaningful_difference" and not c.meaningful
    assert "threshold" in c.verdict
    assert compare_runs(a, b, threshold=0.001).status == "slower"
    # the two-stage bootstrap agrees with the t interval on well-behaved data, and is reproducible
    lo, hi = c.ratio_ci_bootstrap
    assert lo < c.ratio < hi and abs(math.log(hi / lo) / math.log(c.ratio_ci[1] / c.ratio_ci[0]) - 1) < 0.5
    assert compare_runs(a, b).ratio_ci_bootstrap == c.ratio_ci_bootstrap
    json.dumps(c.to_dict(), allow_nan=False)
    with pytest.raises(ValueError):
        compare_runs(a, b, min_runs=1)
    assert compare_runs([], b).status == "cannot_compare"


def test_runs_in_one_file_and_old_files(tmp_path):
    rng = np.random.default_rng(16)
    parts = [Measurement("step", simulated_run(rng, 1e-3).tolist()) for _ in range(4)]
    merged = Measurement.merge_runs(parts)
    assert (
        merged.run_count == 4
        and merged.n == 120
        and [m.samples for m in merged.split_runs()] == [m.samples for m in parts]
    )
    merged.save(tmp_path / "m.json")
    back = Measurement.load(tmp_path / "m.json")
    assert back == merged and back.to_dict()["stats"]["runs"] == 4 and "4 runs" in back.summary()
    parts[0].save(tmp_path / "one.json")  # a one-run file has no "runs" key: files written before read the same
    assert "runs" not in json.loads((tmp_path / "one.json").read_text())
    assert Measurement.load(tmp_path / "one.json").run_count == 1
    assert compare_runs(merged, parts).a_runs == 4 and compare_runs(merged, [merged, parts[0]]).b_runs == 5
    bad = merged.to_dict()
    bad["runs"] = bad["runs"][:-1]
    with pytest.raises(Exception, match="runs"):
        Measurement.from_dict(bad)


def test_cli_compare_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    rng = np.random.default_rng(17)
    a_files, b_files = [], []
    for i in range(5):
        for side, files, centre in (("a", a_files, 1.0), ("b", b_files, 1.3)):
            p = tmp_path / f"{side}{i}.json"
            save_measurements(p, [Measurement("mm", simulated_run(rng, centre, between=0.05).tolist())])
            files.append(str(p))
    assert main(["bench", "compare", *a_files, "vs", *b_files, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "mm" and row["a_runs"] == 5 and row["status"] == "slower"
    args = [x for f in a_files for x in ("-a", f)] + [x for f in b_files for x in ("-b", f)]
    assert main(["bench", "compare", *args]) == 0
    out = capsys.readouterr().out
    assert "slower" in out and "5 runs per side" in out

    # several runs in one file (as `chakra replay --runs N` writes): the same comparison
    ma = Measurement.merge_runs([m for f in a_files for m in load_measurements(f).values()])
    mb = Measurement.merge_runs([m for f in b_files for m in load_measurements(f).values()])
    save_measurements(tmp_path / "A.json", [ma])
    save_measurements(tmp_path / "B.json", [mb])
    assert main(["bench", "compare", str(tmp_path / "A.json"), str(tmp_path / "B.json"), "--json"]) == 0
    [row2] = json.loads(capsys.readouterr().out)
    assert row2["ratio"] == pytest.approx(row["ratio"]) and row2["b_runs"] == 5

    # one file per side: not enough evidence, with the medians and ratio shown
    assert main(["bench", "compare", a_files[0], b_files[0]]) == 0
    assert "not enough evidence (1 run per side; need ≥ 3" in capsys.readouterr().out
    assert main(["bench", "compare", a_files[0]]) == 2
    assert main(["bench", "compare", a_files[0], "vs"]) == 2
    capsys.readouterr()
