"""Is B different from A, and did a run reproduce? Comparisons of two `Measurement`s: Welch's t-test
with a bootstrap CI of the ratio of medians (`compare`), and the lenient reproduction checks
(`within_ci`, `consistent`) the fidelity and export tests use."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .measure import Measurement, json_number, json_pair
from .statistics import bootstrap_ratio_of_medians_ci95, welch_t_test


@dataclass
class Comparison:
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

    def to_pandas(self):
        import pandas as pd

        d = self.to_dict()
        lo, hi = d.pop("ratio_ci95") or (None, None)
        return pd.DataFrame([{**d, "ratio_ci95_lo": lo, "ratio_ci95_hi": hi}])


def _pct(r: float) -> str:
    return f"{100 * (r - 1):+.1f}%"


def compare(a: Measurement, b: Measurement, *, alpha: float = 0.05) -> Comparison:
    """Whether B's time differs from A's: Welch's t-test and a bootstrap 95% CI of B.median / A.median."""
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
