"""Is B different from A, and did a run reproduce?

`compare_runs` is the benchmark comparison (`chakra bench compare`): runs (processes) are the unit of
replication. `compare` tests two single measurements sample by sample, which is only sound when the
samples are independent (e.g. interleaved in one process); across processes it finds differences that
are only process-level noise. `within_ci` and `consistent` are the lenient reproduction checks the
fidelity and export tests use."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..table import Table, Tabular
from .measure import Measurement, json_number, json_pair
from .statistics import (
    bootstrap_ratio_of_medians_ci95,
    hierarchical_bootstrap_ratio_ci95,
    t_ppf,
    welch_t_test,
)

MIN_RUNS = 3
THRESHOLD = 0.01


@dataclass
class Comparison(Tabular):
    """Is B different from A? `ratio` = B.median / A.median (> 1: B is slower).

    `ratio_ci95` is a percentile bootstrap of the ratio of medians (2,000 resamples of each sample,
    numpy Generator seeded 0, so reproducible); `p_value` is Welch's t-test on the samples (unequal
    variances). `significant` needs both: p < alpha and a CI that excludes 1. Medians are robust to the
    slow outliers timing data always has; the t-test guards against a lucky bootstrap on few samples.
    """

    a_name: str
    b_name: str
    ratio: float
    ratio_ci95: tuple[float, float] | None
    p_value: float
    significant: bool
    verdict: str
    alpha: float = 0.05
    a_median: float = math.nan
    b_median: float = math.nan
    t_stat: float = math.nan
    df: float = math.nan

    def to_dict(self) -> dict:
        return {
            "a_name": self.a_name,
            "b_name": self.b_name,
            "ratio": json_number(self.ratio),
            "ratio_ci95": json_pair(self.ratio_ci95),
            "p_value": json_number(self.p_value),
            "significant": bool(self.significant),
            "verdict": self.verdict,
            "alpha": self.alpha,
            "a_median": json_number(self.a_median),
            "b_median": json_number(self.b_median),
            "t_stat": json_number(self.t_stat),
            "df": json_number(self.df),
        }

    def to_table(self) -> Table:
        """One row: `to_dict` with the CI as two columns."""
        d = self.to_dict()
        lo, hi = d.pop("ratio_ci95") or (None, None)
        return Table.from_records([{**d, "ratio_ci95_lo": lo, "ratio_ci95_hi": hi}], title="comparison")


def _pct(r: float) -> str:
    return f"{100 * (r - 1):+.1f}%"


def compare(a: Measurement, b: Measurement, *, alpha: float = 0.05) -> Comparison:
    """Whether B's time differs from A's: Welch's t-test and a bootstrap 95% CI of B.median / A.median.

    Treats every sample as an independent replication: sound for samples interleaved in one process,
    not for two processes (use `compare_runs`, which takes runs as the unit)."""
    xa, xb = a._a(), b._a()
    la, lb = ("A", "B") if not a.name or not b.name or a.name == b.name else (a.name, b.name)
    if len(xa) == 0 or len(xb) == 0:
        return Comparison(
            a.name, b.name, math.nan, None, math.nan, False, "cannot compare: a measurement has no samples", alpha
        )
    ma, mb = float(np.median(xa)), float(np.median(xb))
    ratio = mb / ma if ma > 0 else math.nan
    t, df, p = welch_t_test(xa, xb)
    ci = bootstrap_ratio_of_medians_ci95(xa, xb) if ma > 0 else None
    significant = bool(math.isfinite(p) and p < alpha and ci is not None and (ci[0] > 1.0 or ci[1] < 1.0))
    ci_s = f"95% CI {_pct(ci[0])} to {_pct(ci[1])}" if ci else "95% CI n/a"
    p_s = "p n/a" if not math.isfinite(p) else ("p<0.0001" if p < 1e-4 else f"p={p:.2g}")
    if significant:
        how = "slower" if ratio > 1 else "faster"
        verdict = f"{lb} is {100 * abs(ratio - 1):.1f}% {how} than {la} ({ci_s}, {p_s}): significant"
    elif len(xa) < 2 or len(xb) < 2:
        verdict = f"too few samples to test: {lb}/{la} = {ratio:.3f}"
    else:
        verdict = f"no significant difference: {lb}/{la} = {ratio:.3f} ({ci_s}, {p_s})"
    return Comparison(a.name, b.name, ratio, ci, p, significant, verdict, alpha, ma, mb, t, df)


# ---------------------------------------------------------------------------------------------------------
# runs as the unit


@dataclass
class RunComparison(Tabular):
    """Is B different from A, with runs (processes) as the unit of replication?

    Each run is summarised by its median sample; the test is Welch's t-test on the logs of the run
    medians of A and B, so `ratio` is B / A of the geometric means of run medians and `ratio_ci` its
    (1 - alpha) CI from the same t-distribution; `ratio_ci_bootstrap` is a two-stage (runs, then samples
    within runs) bootstrap interval, seeded. `status`: "slower" / "faster" (significant and at least
    `threshold` away from 1), "no_meaningful_difference" (significant but smaller than `threshold`, or
    a CI inside ±threshold), "no_significant_difference", "not_enough_evidence" (fewer than `min_runs`
    runs on a side: nothing is tested) or "cannot_compare" (a side has no samples).
    """

    name: str
    a_runs: int
    b_runs: int
    a_center: float  # geometric mean of A's run medians (seconds)
    b_center: float
    ratio: float
    ratio_ci: tuple[float, float] | None
    ratio_ci_bootstrap: tuple[float, float] | None
    p_value: float
    t_stat: float
    df: float
    significant: bool  # p < alpha with at least min_runs runs per side
    status: str
    verdict: str
    alpha: float = 0.05
    min_runs: int = MIN_RUNS
    threshold: float = THRESHOLD
    a_run_medians: list[float] | None = None
    b_run_medians: list[float] | None = None
    a_between_run_sd: float = math.nan  # sd of log run medians: the relative run-to-run spread
    b_between_run_sd: float = math.nan

    @property
    def meaningful(self) -> bool:
        """A difference worth reporting: significant and at least `threshold` (relative) in size."""
        return self.status in ("slower", "faster")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "a_runs": self.a_runs,
            "b_runs": self.b_runs,
            "a_center": json_number(self.a_center),
            "b_center": json_number(self.b_center),
            "ratio": json_number(self.ratio),
            "ratio_ci": json_pair(self.ratio_ci),
            "ratio_ci_bootstrap": json_pair(self.ratio_ci_bootstrap),
            "ci_level": 1 - self.alpha,
            "p_value": json_number(self.p_value),
            "t_stat": json_number(self.t_stat),
            "df": json_number(self.df),
            "significant": bool(self.significant),
            "meaningful": self.meaningful,
            "status": self.status,
            "verdict": self.verdict,
            "alpha": self.alpha,
            "min_runs": self.min_runs,
            "threshold": self.threshold,
            "a_run_medians": [json_number(x) for x in self.a_run_medians or []],
            "b_run_medians": [json_number(x) for x in self.b_run_medians or []],
            "a_between_run_sd": json_number(self.a_between_run_sd),
            "b_between_run_sd": json_number(self.b_between_run_sd),
        }

    def to_table(self) -> Table:
        """One row: `to_dict` with each CI as two columns and the run medians counted."""
        d = self.to_dict()
        for k in ("ratio_ci", "ratio_ci_bootstrap"):
            lo, hi = d.pop(k) or (None, None)
            d[f"{k}_lo"], d[f"{k}_hi"] = lo, hi
        d["a_run_medians"] = len(d["a_run_medians"])
        d["b_run_medians"] = len(d["b_run_medians"])
        return Table.from_records([d], title=f"run comparison {self.name}".rstrip())


RunsLike = Measurement | Iterable[Measurement | Sequence[float] | np.ndarray]


def as_runs(x: RunsLike) -> list[np.ndarray]:
    """The runs of one side, as sample arrays: a `Measurement` (its runs: one unless it has `runs`), or
    an iterable of measurements (each contributing its runs) and/or sample sequences (one run each)."""
    if isinstance(x, Measurement):
        return [m._a() for m in x.split_runs() if m.n]
    out: list[np.ndarray] = []
    for item in x:
        if isinstance(item, Measurement):
            out.extend(m._a() for m in item.split_runs() if m.n)
        elif isinstance(item, (int, float)):
            raise TypeError("compare_runs: give each side as a list of runs (sample lists), not one sample list")
        else:
            a = np.asarray(item, dtype=np.float64).ravel()
            if a.size:
                out.append(a)
    return out


def _log_sd(x: np.ndarray) -> float:
    return float(np.std(np.log(x), ddof=1)) if len(x) >= 2 and np.all(x > 0) else math.nan


def _p_str(p: float) -> str:
    return "p n/a" if not math.isfinite(p) else ("p<0.0001" if p < 1e-4 else f"p={p:.2g}")


def compare_runs(
    a_runs: RunsLike,
    b_runs: RunsLike,
    *,
    alpha: float = 0.05,
    min_runs: int = MIN_RUNS,
    threshold: float = THRESHOLD,
    resamples: int = 2000,
    seed: int = 0,
    name: str = "",
    labels: tuple[str, str] = ("A", "B"),
) -> RunComparison:
    """Whether B's time differs from A's, with runs (separate processes) as the unit of replication.

    Samples within one process share its memory layout, clock frequency and cache state, so they are
    not independent replications: a per-sample test calls two runs of the same program different far
    more often than alpha. Here each run counts once (its median), and Welch's t-test on the log run
    medians asks whether the geometric means differ (timing noise is multiplicative, and a ratio is
    what a user reads).

    `min_runs` (default 3) per side is required before anything is tested: with 2 runs the run-to-run
    variance rests on one degree of freedom per side, the test has almost no power and leans entirely
    on normality, and the run bootstrap has only 3 distinct resamples. `threshold` (default 1%): a
    significant difference smaller than this is "no meaningful difference" (machines drift by about
    that much; such a gap rarely matters and rarely reproduces). `resamples` = 0 skips the bootstrap CI.
    `labels`: what the verdict calls the two sides (e.g. ("baseline", "result")).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if min_runs < 2:
        raise ValueError(f"min_runs must be at least 2 (a t-test needs a variance per side), got {min_runs}")
    la_, lb_ = labels
    ra, rb = as_runs(a_runs), as_runs(b_runs)
    ka, kb = len(ra), len(rb)
    base: dict[str, Any] = {
        "alpha": alpha,
        "min_runs": min_runs,
        "threshold": threshold,
        "name": name,
        "a_runs": ka,
        "b_runs": kb,
    }
    nan = math.nan
    if not ka or not kb:
        return RunComparison(
            a_center=nan, b_center=nan, ratio=nan, ratio_ci=None, ratio_ci_bootstrap=None, p_value=nan,
            t_stat=nan, df=nan, significant=False, status="cannot_compare",
            verdict="cannot compare: a side has no samples", **base,
        )  # fmt: skip
    ma = np.array([np.median(x) for x in ra])
    mb = np.array([np.median(x) for x in rb])
    if np.any(ma <= 0) or np.any(mb <= 0):
        raise ChakraError(f"{name or 'compare_runs'}: times must be positive to compare ratios")
    la, lb = np.log(ma), np.log(mb)
    ca, cb = float(np.exp(la.mean())), float(np.exp(lb.mean()))
    ratio = cb / ca
    extra = {
        "a_center": ca,
        "b_center": cb,
        "ratio": ratio,
        "a_run_medians": ma.tolist(),
        "b_run_medians": mb.tolist(),
        "a_between_run_sd": _log_sd(ma),
        "b_between_run_sd": _log_sd(mb),
        **base,
    }
    runs_s = f"{ka} vs {kb} runs" if ka != kb else f"{ka} run{'s' if ka != 1 else ''} per side"
    if ka < min_runs or kb < min_runs:
        return RunComparison(
            ratio_ci=None, ratio_ci_bootstrap=None, p_value=nan, t_stat=nan, df=nan, significant=False,
            status="not_enough_evidence",
            verdict=f"not enough evidence ({runs_s}; need ≥ {min_runs} per side): {lb_}/{la_} = {ratio:.3f}",
            **extra,
        )  # fmt: skip
    t, df, p = welch_t_test(la, lb)
    se = float(math.sqrt(np.var(la, ddof=1) / ka + np.var(lb, ddof=1) / kb))
    d = float(lb.mean() - la.mean())
    if se > 0 and math.isfinite(df):
        hw = t_ppf(1 - alpha / 2, df) * se
        ci: tuple[float, float] = (math.exp(d - hw), math.exp(d + hw))
    else:
        ci = (ratio, ratio)
    boot = (
        hierarchical_bootstrap_ratio_ci95(ra, rb, resamples=resamples, seed=seed, level=1 - alpha)
        if resamples
        else None
    )
    significant = bool(math.isfinite(p) and p < alpha)
    level = f"{100 * (1 - alpha):g}% CI"
    ci_s = f"{level} {_pct(ci[0])} to {_pct(ci[1])}"
    within = ci[0] >= 1 - threshold and ci[1] <= 1 + threshold
    if significant and abs(ratio - 1) >= threshold:
        status = "slower" if ratio > 1 else "faster"
        verdict = (
            f"{lb_} is {100 * abs(ratio - 1):.1f}% {status} than {la_} ({ci_s}, {_p_str(p)}, {runs_s}): significant"
        )
    elif significant or within:
        status = "no_meaningful_difference"
        verdict = (
            f"no meaningful difference: {lb_}/{la_} = {ratio:.3f} ({ci_s}, {_p_str(p)}, {runs_s}; "
            f"{'within' if within else 'smaller than'} the {100 * threshold:g}% threshold)"
        )
    else:
        status = "no_significant_difference"
        verdict = f"no significant difference: {lb_}/{la_} = {ratio:.3f} ({ci_s}, {_p_str(p)}, {runs_s})"
    return RunComparison(
        ratio_ci=ci, ratio_ci_bootstrap=boot, p_value=p, t_stat=t, df=df, significant=significant,
        status=status, verdict=verdict, **extra,
    )  # fmt: skip


def within_ci(measurement: Measurement, value: float, *, which: str = "either", rtol: float = 0.0) -> bool:
    """Whether a single time lies in the measurement's 95% CI of the mean or of the median.

    `which`: "mean", "median" or "either" (the default: inside at least one). The CI is widened by `rtol`
    of its centre on each side, for checks that tolerate a known small drift (e.g. an exported benchmark
    reproducing a replay's time).
    """
    if which not in ("mean", "median", "either"):
        raise ValueError(f"which must be 'mean', 'median' or 'either', got {which!r}")
    cis = []
    if which in ("mean", "either") and measurement.ci95_mean is not None:
        cis.append((measurement.ci95_mean, measurement.mean))
    if which in ("median", "either") and measurement.ci95_median is not None:
        cis.append((measurement.ci95_median, measurement.median))
    return any(lo - rtol * abs(c) <= value <= hi + rtol * abs(c) for (lo, hi), c in cis)


def consistent(a: Measurement, b: Measurement, *, alpha: float = 0.05, rtol: float = 0.0) -> bool:
    """Whether two measurements agree: their 95% CIs of the median overlap.

    Overlapping CIs is the lenient test (two 95% CIs overlap unless the difference is significant at about
    the 0.6% level) suited to "did this reproduce?". Below 6 samples, where there is no median CI, it falls
    back to `compare()` finding no significant difference at `alpha`. Differences of medians within `rtol`
    (relative to A's median) count as consistent regardless.
    """
    if a.n and b.n and abs(b.median - a.median) <= rtol * abs(a.median):
        return True
    ca, cb = a.ci95_median, b.ci95_median
    if ca is not None and cb is not None:
        return ca[0] <= cb[1] and cb[0] <= ca[1]
    return not compare(a, b, alpha=alpha).significant
