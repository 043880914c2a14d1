"""The measurement harness: distributions, stopping rules, statistics, comparison, files and CLI."""

import json
import math
import sys
from math import comb

import numpy as np
import pytest

from chakra_trace.cli import main
from chakra_trace.replay.comparison import compare, consistent, within_ci
from chakra_trace.replay.environment import environment
from chakra_trace.replay.measure import Measurement, load_measurements, measure, save_measurements
from chakra_trace.replay.statistics import binom_cdf, t_cdf, t_ppf


class FakeClock:
    """A clock that only `fn` advances, by the next of the given durations: deterministic timing."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.calls = 0

    def fn(self):
        self.calls += 1
        self.now += next(self.durations)

    def timer(self):
        return self.now


# -- distributions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p,df,expected",
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 5, 2.571),
        (0.975, 10, 2.228),
        (0.975, 30, 2.042),
        (0.975, 120, 1.980),
        (0.975, math.inf, 1.960),
        (0.95, 20, 1.725),
        (0.995, 10, 3.169),
        (0.9, 4, 1.533),
        (0.025, 5, -2.571),
        (0.999, 3, 10.215),
    ],
)
def test_t_quantiles_match_tables(p, df, expected):
    assert t_ppf(p, df) == pytest.approx(expected, abs=1e-3)
    assert t_cdf(expected, df) == pytest.approx(p, abs=1e-4)  # the table values are rounded


def test_t_cdf_against_numerical_integration_and_inverse():
    for df in (1.0, 2.5, 7.0, 40.0):
        x = np.linspace(0.0, 3.0, 300_001)
        pdf = (
            np.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2))
            / math.sqrt(df * math.pi)
            * (1 + x * x / df) ** (-(df + 1) / 2)
        )
        integral = float(np.sum((pdf[1:] + pdf[:-1]) / 2 * np.diff(x)))
        assert t_cdf(3.0, df) == pytest.approx(0.5 + integral, abs=1e-9)
        assert t_cdf(-3.0, df) == pytest.approx(0.5 - integral, abs=1e-9)
        for p in (1e-8, 0.01, 0.3, 0.7, 0.99):
            assert t_cdf(t_ppf(p, df), df) == pytest.approx(p, rel=1e-8)
    assert t_cdf(0.0, 3) == 0.5 and t_ppf(0.5, 3) == 0.0
    assert t_cdf(1.96, 1e9) == pytest.approx(0.9750021, abs=1e-6)  # tends to the normal


def test_binomial_cdf_matches_exact_sums():
    for n in (1, 6, 20, 51):
        for k in range(n + 1):
            assert binom_cdf(k, n) == pytest.approx(sum(comb(n, i) for i in range(k + 1)) / 2**n, rel=1e-10)


# -- measure() -------------------------------------------------------------------------------------------------


def test_converges_early_on_low_noise():
    clock = FakeClock(1.0 + 1e-4 * np.sin(np.arange(1000)))
    m = measure(clock.fn, timer=clock.timer, warmup=2, min_repeats=5, target_rel_ci=0.02)
    assert m.stop_reason == "converged" and m.n == 5 and m.warmup == 2
    assert clock.calls == 7 and m.rel_ci <= 0.02 and m.note == ""


def test_noisy_runs_to_max_repeats_or_budget():
    noisy = np.random.default_rng(1).lognormal(0.0, 1.5, 10_000)
    clock = FakeClock(noisy)
    m = measure(clock.fn, timer=clock.timer, warmup=0, max_repeats=40, target_rel_ci=0.001, budget_s=1e9)
    assert m.stop_reason == "max_repeats" and m.n == 40

    clock = FakeClock(np.full(10_000, 1.0) + noisy * 1e-3)
    m = measure(clock.fn, timer=clock.timer, warmup=3, target_rel_ci=1e-9, budget_s=20.0)
    assert m.stop_reason == "budget"
    assert 15 <= m.n <= 18  # the warm-up's ~3 s count towards the 20 s budget
    assert clock.now == pytest.approx(20.0, abs=1.1)


def test_run_longer_than_budget_stops_after_two_and_says_so():
    clock = FakeClock([20.0] * 100)
    m = measure(clock.fn, timer=clock.timer, warmup=3, min_repeats=5, budget_s=10.0)
    assert m.stop_reason == "budget" and m.n == 2 and m.warmup == 1
    assert "exceeds the 10 s budget" in m.note and "warm-up cut" in m.note
    assert "budget" in m.summary()
    # a budget hit by many short runs still takes min_repeats
    clock = FakeClock([4.0, 3.0] * 100)
    m = measure(clock.fn, timer=clock.timer, warmup=0, min_repeats=5, budget_s=10.0, target_rel_ci=0.0)
    assert m.stop_reason == "budget" and m.n == 5 and m.note == ""


def test_on_sample_counts_the_timed_samples():
    clock = FakeClock([1.0] * 50)
    seen: list[int] = []
    m = measure(
        clock.fn, timer=clock.timer, warmup=2, max_repeats=7, target_rel_ci=0.0, budget_s=1e9, on_sample=seen.append
    )
    assert seen == list(range(1, m.n + 1)) and m.n == 5  # (constant: converged at min_repeats)


def test_warmup_is_not_timed_and_sync_wraps_each_clock_read():
    events = []
    clock = FakeClock([100.0, 100.0] + [1.0] * 100)
    m = measure(
        lambda: (events.append("fn"), clock.fn()),
        timer=lambda: (events.append("t"), clock.timer())[1],
        sync=lambda: events.append("sync"),
        warmup=2,
        min_repeats=3,
        budget_s=1e9,
    )
    assert m.samples == [1.0, 1.0, 1.0] and m.warmup == 2 and m.stop_reason == "converged"
    # start of the budget clock; warm-up 1 and a budget check; warm-up 2 (the last: no check); 3 samples
    assert events == ["sync", "t", "fn", "sync", "t", "fn"] + ["sync", "t", "fn", "sync", "t"] * 3


def test_decide_called_once_per_sample_and_shares_the_stop():
    calls = []
    clock = FakeClock([1.0] * 1000)
    m = measure(
        clock.fn,
        timer=clock.timer,
        warmup=1,
        min_repeats=3,
        max_repeats=12,
        budget_s=1e9,
        decide=lambda stop: (calls.append(stop), False)[1],
    )  # a peer never agrees: runs to the cap
    assert m.stop_reason == "max_repeats" and m.n == 12 and len(calls) == 12
    assert calls[:2] == [False, False] and all(calls[2:])  # converged locally from the 3rd sample

    calls.clear()
    noisy = FakeClock(np.random.default_rng(2).lognormal(0, 1, 1000))
    m = measure(
        noisy.fn,
        timer=noisy.timer,
        warmup=0,
        min_repeats=3,
        target_rel_ci=1e-6,
        budget_s=1e9,
        decide=lambda stop: (calls.append(stop), len(calls) == 4)[1],
    )  # a peer stops everyone
    assert m.stop_reason == "peer" and m.n == 4 and calls == [False] * 4


@pytest.mark.timing
def test_real_measurement_of_a_tiny_function():
    m = measure(lambda: sum(range(200)), name="sum", budget_s=0.5, min_repeats=5)
    assert m.n >= 5 and m.stop_reason in ("converged", "max_repeats", "budget")
    assert 0 < m.min <= m.median <= m.max < 0.1
    assert m.env["python"] and m.env["logical_cpus"] >= 1 and "numpy" in m.env


def test_validation():
    with pytest.raises(ValueError):
        measure(lambda: None, min_repeats=5, max_repeats=3)


# -- statistics ---------------------------------------------------------------------------------------------


def test_statistics_and_outliers():
    rng = np.random.default_rng(3)
    s = list(1.0 + 0.01 * rng.uniform(-1, 1, 40))  # uniform noise never crosses Tukey's fences
    s[17] = 5.0  # a spike
    m = Measurement("x", s)
    assert m.outliers == [17]
    assert m.n == 40 and m.median == pytest.approx(np.median(s)) and m.std == pytest.approx(np.std(s, ddof=1))
    lo, hi = m.ci95_mean
    assert lo < m.mean < hi and (hi - lo) / 2 == pytest.approx(t_ppf(0.975, 39) * m.std / math.sqrt(40))
    mlo, mhi = m.ci95_median
    assert mlo < m.median < mhi and mhi < 1.1  # the spike does not move the median CI
    assert m.cv == pytest.approx(m.std / m.mean)
    assert Measurement("y", [1.0, 1.02, 0.98, 1.01]).outliers == []
    assert Measurement("y", [1.0] * 5).ci95_median is None and Measurement("y", [1.0] * 6).ci95_median == (1.0, 1.0)
    small = Measurement("z", [2e-3])
    assert small.ci95_mean is None and math.isinf(small.rel_ci) and "n=1" in small.summary()


def test_summary_line():
    m = Measurement("x", [0.0121, 0.0123, 0.0124, 0.0125, 0.0126, 0.0127, 0.0128, 0.05], stop_reason="converged")
    line = m.summary()
    assert line.startswith("median 12.55 ms (95% CI 12.1–50 ms), n=8, cv ")
    assert line.endswith("1 outlier")


def test_median_ci_coverage_is_about_95_percent():
    rng = np.random.default_rng(0)
    true_median = math.log(2.0)  # of the unit exponential
    hits = 0
    for _ in range(400):
        lo, hi = Measurement("e", list(rng.exponential(1.0, 25))).ci95_median
        hits += lo <= true_median <= hi
    assert 0.90 <= hits / 400 <= 0.99


# -- comparison ------------------------------------------------------------------------------------------------


def test_compare_finds_a_real_shift_and_not_a_null_one():
    rng = np.random.default_rng(4)
    a = Measurement("base", list(1.0 + 0.01 * rng.standard_normal(30)))
    b = Measurement("new", list(1.1 + 0.01 * rng.standard_normal(30)))
    c = compare(a, b)
    assert c.significant and c.p_value < 1e-6 and c.ratio == pytest.approx(1.1, abs=0.01)
    assert c.ratio_ci95[0] > 1.05 and c.ratio_ci95[1] < 1.15
    assert c.verdict.startswith(f"new is {100 * (c.ratio - 1):.1f}% slower than base (95% CI +")
    assert c.verdict.endswith(": significant")
    assert "faster" in compare(b, a).verdict and compare(b, a).ratio < 1
    assert not consistent(a, b) and json.dumps(c.to_dict(), allow_nan=False)

    null = Measurement("base", list(1.0 + 0.01 * rng.standard_normal(30)))
    c0 = compare(a, null)
    assert not c0.significant and c0.p_value > 0.05 and c0.ratio_ci95[0] < 1 < c0.ratio_ci95[1]
    assert c0.verdict.startswith("no significant difference: B/A = ")
    assert consistent(a, null)
    assert compare(a, null).ratio_ci95 == c0.ratio_ci95  # the bootstrap is seeded


def test_welch_p_value_by_hand():
    a = Measurement("a", [1.0, 2.0, 3.0, 4.0])
    b = Measurement("b", [2.0, 4.0, 6.0, 8.0, 10.0])
    # t = (6 - 2.5) / sqrt(1.6667/4 + 10/5) = 2.2514; Welch df = 2.41667^2 / (0.41667^2/3 + 2^2/4) = 5.5208
    c = compare(a, b)
    assert c.t_stat == pytest.approx(3.5 / math.sqrt(5 / 3 / 4 + 10 / 5))
    assert c.df == pytest.approx(5.5208, abs=1e-3)
    assert c.p_value == pytest.approx(2 * t_cdf(-c.t_stat, c.df))
    assert 0.05 < c.p_value < 0.1  # between the two-sided 5% (~2.5) and 10% (~1.97) critical values


def test_within_ci():
    m = Measurement("x", list(np.linspace(0.9, 1.1, 21)))
    assert within_ci(m, 1.0) and within_ci(m, 1.02, which="median")
    assert not within_ci(m, 1.2) and within_ci(m, 1.2, rtol=0.2)
    assert not within_ci(Measurement("x", [1.0]), 1.0)


def test_environment_never_imports_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    env = environment("cuda:0")
    assert "torch" not in sys.modules and "torch" not in env and env["device"] == "cuda:0"
    for key in (
        "python",
        "platform",
        "machine",
        "cpu_model",
        "logical_cpus",
        "affinity_cpus",
        "numpy",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "chakra_trace",
    ):
        assert key in env


# -- files and CLI ----------------------------------------------------------------------------------------------


def test_json_round_trip(tmp_path):
    clock = FakeClock([1.0, 1.5, 1.25] * 100)
    m = measure(clock.fn, name="op", timer=clock.timer, warmup=1, max_repeats=9, target_rel_ci=0.0, budget_s=1e9)
    m.extra["nodes"] = 12
    for name in ("m.json", "m.json.gz"):
        m.save(tmp_path / name)
        back = Measurement.load(tmp_path / name)
        assert back == m
        assert back.to_dict() == m.to_dict()
    d = json.loads((tmp_path / "m.json").read_text())
    assert d["stats"]["n"] == 9 and d["stop_reason"] == "max_repeats" and d["stats"]["ci95_median"] is not None
    save_measurements(tmp_path / "many.json", [m, Measurement("other", [2.0, 2.0])])
    ms = load_measurements(tmp_path / "many.json")
    assert list(ms) == ["op", "other"] and ms["op"] == m


def _series(seed, centre, n=30):
    return list(centre + 0.01 * np.random.default_rng(seed).standard_normal(n))


def test_cli_compare_and_show(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # a wide table: verdicts on one line
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_measurements(
        a, [Measurement("mm", _series(1, 1.0)), Measurement("ar", _series(2, 0.5)), Measurement("only_a", [1.0])]
    )
    save_measurements(b, [Measurement("mm", _series(3, 1.1)), Measurement("ar", _series(4, 0.5))])
    assert main(["bench", "compare", str(a), str(b), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"mm", "ar"}
    # one run per side: never significant, whatever the samples say
    assert rows["mm"]["status"] == "not_enough_evidence" and rows["mm"]["ratio"] == pytest.approx(1.1, abs=0.01)

    assert main(["bench", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "not enough evidence" in out and "mm" in out

    single_a, single_b = tmp_path / "x.json", tmp_path / "y.json"
    Measurement("x", _series(5, 1.0)).save(single_a)
    Measurement("y", _series(6, 1.0)).save(single_b)
    assert main(["bench", "compare", str(single_a), str(single_b), "--alpha", "0.01", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "x / y" and row["alpha"] == 0.01

    assert main(["bench", "show", str(a)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("mm: median ")

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["bench", "compare", str(a), str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    bad.write_text(json.dumps({"samples": ["x"]}))
    assert main(["bench", "show", str(bad)]) == 2
    disjoint = tmp_path / "d.json"
    save_measurements(disjoint, [Measurement("q", [1.0]), Measurement("r", [1.0])])
    assert main(["bench", "compare", str(a), str(disjoint)]) == 2
