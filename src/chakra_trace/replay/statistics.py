"""Statistics of timing samples: pure functions over arrays, no clocks.

Only numpy and the standard library: the replayer imports this on machines without scipy. The
Student t, normal and binomial distributions are computed here from the regularized incomplete
beta function; on top of them, the confidence intervals, outlier fences and two-sample tests that
`measure.py` reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np

__all__ = [
    "t_cdf",
    "t_ppf",
    "binom_cdf",
    "mean_ci95",
    "median_ci95",
    "tukey_outliers",
    "relative_half_width",
    "welch_t_test",
    "bootstrap_ratio_of_medians_ci95",
    "hierarchical_bootstrap_ratio_ci95",
]

# ---------------------------------------------------------------------------------------------------------
# distributions


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    tiny = 1e-300
    eps = 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 200_000):
        m2 = 2 * m
        # even step: d_{2m} = m(b-m)x / ((a+2m-1)(a+2m))
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        # odd step: d_{2m+1} = -(a+m)(a+b+m)x / ((a+2m)(a+2m+1))
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _betainc(a: float, b: float, x: float, y: float | None = None) -> float:
    """Regularized incomplete beta I_x(a, b); `y` = 1 - x when the caller knows it more precisely."""
    if y is None:
        y = 1.0 - x
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _norm_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _t_pdf(t: float, df: float) -> float:
    if math.isinf(df):
        return _norm_pdf(t)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional or math.inf)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if math.isinf(df) or df > 1e12:
        return _norm_cdf(t)
    if t == 0.0:
        return 0.5
    t2 = t * t
    # the tail P(T > |t|) = I_x(df/2, 1/2) / 2 with x = df / (df + t^2); 1 - x computed without cancellation
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))
    return tail if t < 0 else 1.0 - tail


def _solve_increasing(
    f: Callable[[float], float], fprime: Callable[[float], float], lo: float, hi: float, x: float
) -> float:
    """Root of increasing f in [lo, hi] (f(lo) <= 0 <= f(hi)): Newton steps, bisection when they stray."""
    for _ in range(400):
        fx = f(x)
        if fx == 0.0:
            return x
        if fx < 0:
            lo = x
        else:
            hi = x
        d = fprime(x)
        nx = x - fx / d if d > 0 else math.nan
        if not (lo < nx < hi):
            nx = 0.5 * (lo + hi)
        if abs(nx - x) <= 1e-14 * max(1.0, abs(nx)) or hi - lo <= 1e-15 * max(1.0, abs(hi)):
            return nx
        x = nx
    return x


@lru_cache(maxsize=4096)
def _lower_t_quantile(q: float, df: float) -> float:
    """The (negative) t quantile of a lower-tail probability q < 0.5."""
    if math.isinf(df) or df > 1e12:
        z0 = -math.sqrt(-2.0 * math.log(q))  # beyond the root; the bracket [-40, 0] holds it for q > 1e-300
        return _solve_increasing(lambda x: _norm_cdf(x) - q, _norm_pdf, -40.0, 0.0, max(z0, -39.0))
    if df == 1.0:
        return math.tan(math.pi * (q - 0.5))
    if df == 2.0:
        return (2.0 * q - 1.0) / math.sqrt(2.0 * q * (1.0 - q))
    hi = _lower_t_quantile(q, math.inf)  # t tails are heavier: the normal quantile is inside the root
    lo = 2.0 * hi
    while t_cdf(lo, df) > q:
        hi, lo = lo, lo * 2.0
        if lo < -1e300:
            return -math.inf
    return _solve_increasing(lambda x: t_cdf(x, df) - q, lambda x: _t_pdf(x, df), lo, hi, hi)


def t_ppf(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (math.inf gives the normal quantile)."""
    if not 0.0 < p < 1.0:
        if p == 0.0:
            return -math.inf
        if p == 1.0:
            return math.inf
        raise ValueError(f"probability must be in [0, 1], got {p}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p == 0.5:
        return 0.0
    df = float(df)
    if p < 0.5:
        return _lower_t_quantile(p, df)
    return -_lower_t_quantile(1.0 - p, df)  # exact for p >= 0.5


def binom_cdf(k: int, n: int, p: float = 0.5) -> float:
    """P(B <= k) for B ~ Binomial(n, p), via P(B <= k) = I_{1-p}(n-k, k+1)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _betainc(n - k, k + 1, 1.0 - p, p)


@lru_cache(maxsize=1024)
def _median_ci_rank(n: int, alpha: float = 0.05) -> int | None:
    """0-based k such that [x_(k), x_(n-1-k)] of the sorted sample covers the median with >= 1-alpha.

    The count of samples below the median is Binomial(n, 1/2); k is the largest with P(B <= k) <= alpha/2,
    None when even [min, max] covers with less than 1-alpha (n < 6 for 95%).
    """
    if n < 1 or binom_cdf(0, n) > alpha / 2:
        return None
    lo, hi = 0, (n - 1) // 2  # invariant: cdf(lo) <= alpha/2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if binom_cdf(mid, n) <= alpha / 2:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------------------------------------------------------------------------------------------------------
# one sample


def mean_ci95(a: np.ndarray) -> tuple[float, float] | None:
    """95% CI of the mean from the t-distribution with n - 1 degrees of freedom; None below 2 samples."""
    n = len(a)
    if n < 2:
        return None
    mean = float(np.mean(a))
    hw = t_ppf(0.975, n - 1) * float(np.std(a, ddof=1)) / math.sqrt(n)
    return (mean - hw, mean + hw)


def median_ci95(a: np.ndarray) -> tuple[float, float] | None:
    """Distribution-free 95% CI of the median: a pair of order statistics; None below 6 samples."""
    n = len(a)
    k = _median_ci_rank(n)
    if k is None:
        return None
    s = np.sort(a)
    return (float(s[k]), float(s[n - 1 - k]))


def tukey_outliers(a: np.ndarray) -> list[int]:
    """Indices of samples outside Tukey's fences (1.5 IQR beyond the quartiles); none below 4 samples."""
    if len(a) < 4:
        return []
    q1, q3 = np.percentile(a, [25, 75])
    iqr = q3 - q1
    return np.flatnonzero((a < q1 - 1.5 * iqr) | (a > q3 + 1.5 * iqr)).tolist()


def relative_half_width(half_width: float, mean: float) -> float:
    """|half_width / mean|, with 0 / 0 = 0 (a constant zero sample is exact) and x / 0 = inf."""
    if mean == 0:
        return 0.0 if half_width == 0 else math.inf
    return abs(half_width / mean)


# ---------------------------------------------------------------------------------------------------------
# two samples


def welch_t_test(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(t, df, two-sided p) of Welch's unequal-variance t-test of mean(b) - mean(a)."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return math.nan, math.nan, math.nan
    va, vb = float(np.var(a, ddof=1)) / na, float(np.var(b, ddof=1)) / nb
    diff = float(np.mean(b) - np.mean(a))
    se2 = va + vb
    if se2 == 0.0:  # two constant samples
        return (0.0 if diff == 0 else math.copysign(math.inf, diff)), math.inf, (1.0 if diff == 0 else 0.0)
    t = diff / math.sqrt(se2)
    df = se2 * se2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    return t, df, min(1.0, 2.0 * t_cdf(-abs(t), df))


def _bootstrap_medians(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    n = len(x)
    out = np.empty(resamples)
    chunk = max(1, 4_000_000 // max(n, 1))  # bound memory for long samples
    for i in range(0, resamples, chunk):
        m = min(chunk, resamples - i)
        out[i : i + m] = np.median(x[rng.integers(0, n, size=(m, n))], axis=1)
    return out


def bootstrap_ratio_of_medians_ci95(
    a: np.ndarray, b: np.ndarray, *, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of median(b) / median(a): `resamples` resamples of each sample, drawn
    from a numpy Generator seeded `seed` so that the same samples always give the same interval."""
    rng = np.random.Generator(np.random.PCG64(seed))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = _bootstrap_medians(b, rng, resamples) / _bootstrap_medians(a, rng, resamples)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return (float(lo), float(hi))


def _bootstrap_run_medians(runs: list[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(resamples, k) log medians of resampled runs: each row draws k runs with replacement, then
    resamples each drawn run's samples (stage two), through a per-run table of `resamples` resampled
    medians (each drawn run takes a random entry of its table)."""
    k = len(runs)
    table = np.empty((k, resamples))
    for i, x in enumerate(runs):
        table[i] = np.log(_bootstrap_medians(x, rng, resamples))
    pick = rng.integers(0, k, size=(resamples, k))
    entry = rng.integers(0, resamples, size=(resamples, k))
    return table[pick, entry]


def hierarchical_bootstrap_ratio_ci95(
    a_runs: list[np.ndarray],
    b_runs: list[np.ndarray],
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Two-stage percentile bootstrap CI (95% unless `level` says otherwise) of the ratio of geometric means of run medians (B / A):
    resample runs, then samples within each drawn run, so both the between-run and the within-run
    variation are in the interval. Seeded (numpy PCG64 `seed`): the same runs give the same interval.
    None when a side has no runs or a non-positive sample."""
    if not a_runs or not b_runs or any(len(x) == 0 or np.min(x) <= 0 for x in (*a_runs, *b_runs)):
        return None
    rng = np.random.Generator(np.random.PCG64(seed))
    la = _bootstrap_run_medians(a_runs, rng, resamples).mean(axis=1)
    lb = _bootstrap_run_medians(b_runs, rng, resamples).mean(axis=1)
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(lb - la, [tail, 100.0 - tail])
    return (float(math.exp(lo)), float(math.exp(hi)))
