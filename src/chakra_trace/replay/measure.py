"""Statistically sound timing, shared by the replayer and every benchmark.

`measure()` repeats a callable until the 95% confidence interval of its mean time is narrow enough (or a
repeat/time budget is spent) and returns a `Measurement`: the raw samples, why it stopped, the machine it ran
on, and the statistics (median with a distribution-free CI, mean with a Student-t CI, outliers).
`compare()` says whether two measurements differ (Welch's t-test plus a bootstrap CI of the ratio of medians).

Only numpy and the standard library are used: the replayer imports this on machines without scipy, and
torch is looked at only when the caller already imported it. The Student t, normal and binomial
distributions are computed here from the regularized incomplete beta function.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.et import atomic_output

__all__ = [
    "Measurement",
    "Comparison",
    "measure",
    "compare",
    "within_ci",
    "consistent",
    "environment",
    "load_measurements",
    "save_measurements",
    "format_time",
    "t_cdf",
    "t_ppf",
    "binom_cdf",
]

STOP_REASONS = ("converged", "max_repeats", "budget", "peer")
_BOOTSTRAP_RESAMPLES = 2000

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
# results


def format_time(seconds: float | None, unit: str | None = None) -> str:
    """'12.34 ms': a duration with a unit chosen for its size (or the given one: s, ms, µs, ns)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    unit = unit or _unit_for(seconds)
    return f"{seconds / _UNITS[unit]:.4g} {unit}"


_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def _unit_for(seconds: float) -> str:
    a = abs(seconds)
    for u in ("s", "ms", "µs"):
        if a >= _UNITS[u]:
            return u
    return "ns"


def _num(x: float | None) -> float | None:
    """A float for JSON: NaN and infinities become None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _pair(p: tuple[float, float] | None) -> list | None:
    return None if p is None else [_num(p[0]), _num(p[1])]


@dataclass
class Measurement:
    """Timed samples of one benchmark (seconds each) and the statistics derived from them.

    Statistics: `median` with a distribution-free 95% CI from order statistics (`ci95_median`; needs n >= 6),
    `mean` with a Student-t 95% CI (`ci95_mean`), `rel_ci` = t half-width / mean (what `measure()` drives
    below its target), and `outliers`: indices of samples outside Tukey's fences [Q1 - 1.5 IQR, Q3 + 1.5 IQR]
    (quartiles by linear interpolation). Outliers are reported, never dropped: a slow run is a real run.
    """

    name: str = ""
    samples: list[float] = field(default_factory=list)
    warmup: int = 0
    stop_reason: str = ""
    env: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    note: str = ""  # why the measurement is weaker than asked for (e.g. a run longer than the budget)

    def _a(self) -> np.ndarray:
        return np.asarray(self.samples, dtype=np.float64)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self._a())) if self.n else math.nan

    @property
    def mean(self) -> float:
        return float(np.mean(self._a())) if self.n else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1 in the denominator); NaN below 2 samples."""
        return float(np.std(self._a(), ddof=1)) if self.n >= 2 else math.nan

    @property
    def min(self) -> float:
        return float(np.min(self._a())) if self.n else math.nan

    @property
    def max(self) -> float:
        return float(np.max(self._a())) if self.n else math.nan

    @property
    def cv(self) -> float:
        """Coefficient of variation: std / mean."""
        m = self.mean
        return self.std / m if m else math.nan

    @property
    def ci95_mean(self) -> tuple[float, float] | None:
        """95% CI of the mean from the t-distribution with n - 1 degrees of freedom; None below 2 samples."""
        if self.n < 2:
            return None
        hw = t_ppf(0.975, self.n - 1) * self.std / math.sqrt(self.n)
        return (self.mean - hw, self.mean + hw)

    @property
    def ci95_median(self) -> tuple[float, float] | None:
        """Distribution-free 95% CI of the median: a pair of order statistics; None below 6 samples."""
        k = _median_ci_rank(self.n)
        if k is None:
            return None
        s = np.sort(self._a())
        return (float(s[k]), float(s[self.n - 1 - k]))

    @property
    def rel_ci(self) -> float:
        """Half-width of the 95% CI of the mean relative to the mean (inf below 2 samples)."""
        ci = self.ci95_mean
        if ci is None:
            return math.inf
        return _rel(0.5 * (ci[1] - ci[0]), self.mean)

    @property
    def outliers(self) -> list[int]:
        """Indices of samples outside Tukey's fences (1.5 IQR beyond the quartiles); none below 4 samples."""
        if self.n < 4:
            return []
        a = self._a()
        q1, q3 = np.percentile(a, [25, 75])
        iqr = q3 - q1
        return np.flatnonzero((a < q1 - 1.5 * iqr) | (a > q3 + 1.5 * iqr)).tolist()

    def stats(self) -> dict:
        return {
            "n": self.n,
            "median": _num(self.median),
            "mean": _num(self.mean),
            "std": _num(self.std),
            "min": _num(self.min),
            "max": _num(self.max),
            "cv": _num(self.cv),
            "ci95_mean": _pair(self.ci95_mean),
            "ci95_median": _pair(self.ci95_median),
            "rel_ci": _num(self.rel_ci),
            "outliers": self.outliers,
        }

    def to_dict(self) -> dict:
        """JSON-able: identity, statistics (derived, for readers) and the raw samples (what `from_dict` uses)."""
        return {
            "name": self.name,
            "unit": "s",
            "stop_reason": self.stop_reason,
            "warmup": self.warmup,
            "note": self.note,
            "stats": self.stats(),
            "samples": [float(x) for x in self.samples],
            "env": self.env,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "<dict>") -> Measurement:
        if not isinstance(d, dict) or not isinstance(d.get("samples"), list):
            raise ChakraError(f"{source}: expected a measurement (an object with a 'samples' list)")
        try:
            samples = [float(x) for x in d["samples"]]
        except (TypeError, ValueError):
            raise ChakraError(
                f"{source}: 'samples' of measurement {d.get('name', '')!r} must be numbers (seconds)"
            ) from None
        try:
            return cls(
                name=str(d.get("name", "")),
                samples=samples,
                warmup=int(d.get("warmup", 0) or 0),
                stop_reason=str(d.get("stop_reason", "") or ""),
                env=dict(d.get("env") or {}),
                extra=dict(d.get("extra") or {}),
                note=str(d.get("note", "") or ""),
            )
        except (TypeError, ValueError) as e:
            raise ChakraError(f"{source}: malformed measurement {d.get('name', '')!r}: {e}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write JSON atomically (gzip when the name ends in .gz)."""
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Measurement:
        obj = _read_json(path)
        if isinstance(obj, dict) and "samples" in obj:
            return cls.from_dict(obj, source=str(path))
        ms = load_measurements(path)
        if len(ms) != 1:
            raise ChakraError(f"{path}: holds {len(ms)} measurements, expected one")
        return next(iter(ms.values()))

    def summary(self) -> str:
        """One line: 'median 12.34 ms (95% CI 12.10–12.60 ms), n=40, cv 2.1%, 1 outlier'."""
        if not self.n:
            return "no samples"
        unit = _unit_for(self.median)
        ci = self.ci95_median
        ci_s = f"95% CI {format_time(ci[0], unit).split()[0]}–{format_time(ci[1], unit)}" if ci else "95% CI n/a"
        parts = [f"median {format_time(self.median, unit)} ({ci_s})", f"n={self.n}"]
        if self.n >= 2:
            parts.append(f"cv {100 * self.cv:.1f}%")
        k = len(self.outliers)
        parts.append(f"{k} outlier{'s' if k != 1 else ''}")
        line = ", ".join(parts)
        if self.stop_reason and self.stop_reason != "converged":
            line += f"; stopped: {self.stop_reason}"
        if self.note:
            line += f" ({self.note})"
        return line

    def to_pandas(self):
        """One row per sample: seconds and whether it is an outlier."""
        import pandas as pd

        out = np.zeros(self.n, dtype=bool)
        out[self.outliers] = True
        return pd.DataFrame({"seconds": self._a(), "outlier": out})


def _rel(half_width: float, mean: float) -> float:
    if mean == 0:
        return 0.0 if half_width == 0 else math.inf
    return abs(half_width / mean)


# ---------------------------------------------------------------------------------------------------------
# measuring


def measure(
    fn: Callable[[], Any],
    *,
    name: str = "",
    warmup: int = 3,
    min_repeats: int = 5,
    max_repeats: int = 1000,
    target_rel_ci: float = 0.02,
    budget_s: float = 10.0,
    sync: Callable[[], Any] | None = None,
    decide: Callable[[bool], bool] | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Time `fn()` until the 95% CI of the mean is within `target_rel_ci` of it, or a limit is reached.

    `warmup` untimed calls come first. Then timed calls repeat until, after at least `min_repeats`, the CI's
    relative half-width is <= `target_rel_ci` ("converged"), or `max_repeats` samples ("max_repeats"), or
    `budget_s` seconds since the start, warm-up included, have passed ("budget"). At least `min_repeats`
    samples are always taken, unless one run alone is longer than the budget: then it stops after
    min(2, min_repeats) and says so in `note`. A warm-up run past the budget also ends the warm-up early.

    `sync()` is called right before each clock reading (e.g. `torch.cuda.synchronize`), so asynchronous work
    lands in the sample that launched it. `timer` reads the clock (seconds) for the samples and the budget.

    Distributed runs: `decide(stop_here) -> stop_all` turns this process's wish into the shared decision
    (e.g. an all-reduce of the flag; MAX stops when any rank wants to, MIN when all do). It is called exactly
    once per sample on every rank, and the warm-up is never cut short, so every rank calls `fn` equally
    often. `max_repeats` stops every rank at the same sample whatever `decide` says (give all ranks the same
    value). A rank stopped by the others' wish records the stop reason "peer".
    """
    if warmup < 0 or min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(
            f"need warmup >= 0 and 1 <= min_repeats <= max_repeats, got warmup={warmup}, "
            f"min_repeats={min_repeats}, max_repeats={max_repeats}"
        )

    def now() -> float:
        if sync is not None:
            sync()
        return timer()

    notes = []
    start = now()
    warm = 0
    for _ in range(warmup):
        fn()
        warm += 1
        if decide is None and warm < warmup and now() - start > budget_s:
            notes.append(f"warm-up cut to {warm} of {warmup} runs by the {budget_s:g} s budget")
            break

    samples: list[float] = []
    n, mean, m2, longest = 0, 0.0, 0.0, 0.0  # Welford's running mean and sum of squared deviations
    reason = None
    while True:
        t0 = now()
        fn()
        t1 = now()
        dt = t1 - t0
        samples.append(dt)
        n += 1
        delta = dt - mean
        mean += delta / n
        m2 += delta * (dt - mean)
        longest = max(longest, dt)

        reason = None
        if n >= max_repeats:
            reason = "max_repeats"
        elif n >= min_repeats and n >= 2 and _converged(n, mean, m2, target_rel_ci):
            reason = "converged"
        elif t1 - start >= budget_s and (n >= min_repeats or (longest > budget_s and n >= min(2, min_repeats))):
            reason = "budget"
        if decide is not None:
            shared = bool(decide(reason is not None))
            if reason == "max_repeats":
                break
            if shared and reason is None:
                reason = "peer"
            elif not shared:
                reason = None
        if reason is not None:
            break

    if reason == "budget" and n < min_repeats:
        notes.append(
            f"one run ({format_time(longest)}) exceeds the {budget_s:g} s budget: stopped after {n} "
            f"of min_repeats={min_repeats}"
        )
    env = environment()
    env["timer"] = getattr(timer, "__qualname__", None) or type(timer).__name__
    return Measurement(name=name, samples=samples, warmup=warm, stop_reason=reason, env=env, note="; ".join(notes))


def _converged(n: int, mean: float, m2: float, target: float) -> bool:
    se = math.sqrt(max(m2, 0.0) / (n - 1) / n)
    if _rel(1.959963984540054 * se, mean) > target:  # t quantiles exceed the normal one: skip computing it
        return False
    return _rel(t_ppf(0.975, n - 1) * se, mean) <= target


# ---------------------------------------------------------------------------------------------------------
# environment


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def environment(device: Any = None) -> dict:
    """Where a measurement ran: enough to tell whether two results are comparable.

    torch is described only when the caller already imported it (this never imports torch); the CUDA device
    only when `device` names one.
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        "numpy": np.__version__,
    }
    try:
        env["chakra_trace"] = version("chakra-trace")
    except PackageNotFoundError:  # not installed (running from a source tree)
        env["chakra_trace"] = None
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            env["torch"] = str(torch.__version__)
            env["torch_threads"] = int(torch.get_num_threads())
            if device is not None and str(device).startswith("cuda") and torch.cuda.is_available():
                env["device"] = str(device)
                env["cuda_device"] = torch.cuda.get_device_name(device)
                env["cuda_capability"] = list(torch.cuda.get_device_capability(device))
                env["cuda"] = torch.version.cuda
        except Exception as e:  # a half-initialised torch must not break a measurement
            env["torch_error"] = f"{type(e).__name__}: {e}"
    elif device is not None:
        env["device"] = str(device)
    return env


# ---------------------------------------------------------------------------------------------------------
# comparing


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
            "ratio": _num(self.ratio),
            "ratio_ci95": _pair(self.ratio_ci95),
            "p_value": _num(self.p_value),
            "significant": bool(self.significant),
            "verdict": self.verdict,
            "alpha": self.alpha,
            "a_median": _num(self.a_median),
            "b_median": _num(self.b_median),
            "t_stat": _num(self.t_stat),
            "df": _num(self.df),
        }

    def to_pandas(self):
        import pandas as pd

        d = self.to_dict()
        lo, hi = d.pop("ratio_ci95") or (None, None)
        return pd.DataFrame([{**d, "ratio_ci95_lo": lo, "ratio_ci95_hi": hi}])


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
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
    t, df, p = _welch(xa, xb)
    ci = None
    if ma > 0:
        rng = np.random.Generator(np.random.PCG64(0))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = _bootstrap_medians(xb, rng, _BOOTSTRAP_RESAMPLES) / _bootstrap_medians(xa, rng, _BOOTSTRAP_RESAMPLES)
        lo, hi = np.percentile(r, [2.5, 97.5])
        ci = (float(lo), float(hi))
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


# ---------------------------------------------------------------------------------------------------------
# files


def _write_json(path: str | os.PathLike, obj: Any) -> None:

    data = json.dumps(obj, indent=1, allow_nan=False).encode()
    with atomic_output(path) as f:
        f.write(data)


def _read_json(path: str | os.PathLike) -> Any:

    p = Path(path)
    with open(p, "rb") as f:
        raw = f.read()
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, EOFError, ValueError) as e:
        raise ChakraError(f"{p}: not a JSON measurement file ({e})") from None


def load_measurements(path: str | os.PathLike) -> dict[str, Measurement]:
    """Measurements from a file holding one, a list of them, an object mapping names to them,
    or a replay result (`chakra replay -o`: its step and every rank)."""
    obj = _read_json(path)
    src = str(path)
    if isinstance(obj, dict) and "samples" in obj:
        m = Measurement.from_dict(obj, source=src)
        return {m.name: m}
    out: dict[str, Measurement] = {}
    if isinstance(obj, dict) and isinstance(obj.get("step"), dict) and "per_rank" in obj:  # a replay result
        out["step"] = Measurement.from_dict(obj["step"], source=f"{src} (step)")
        for r, d in obj["per_rank"].items():
            out[f"rank {r}"] = Measurement.from_dict(d, source=f"{src} (rank {r})")
        return out
    if isinstance(obj, list):
        for i, d in enumerate(obj):
            m = Measurement.from_dict(d, source=f"{src} (entry {i})")
            key = m.name or f"#{i}"
            if key in out:
                raise ChakraError(f"{src}: two measurements named {key!r}")
            out[key] = m
        return out
    if isinstance(obj, dict):
        for key, d in obj.items():
            m = Measurement.from_dict(d, source=f"{src} (entry {key!r})")
            m.name = m.name or str(key)
            out[str(key)] = m
        return out
    raise ChakraError(
        f"{src}: expected a measurement, a list of them or an object of them by name, got {type(obj).__name__}"
    )


def save_measurements(path: str | os.PathLike, measurements: Iterable[Measurement] | dict[str, Measurement]) -> None:
    """Write several measurements as one JSON object keyed by name (atomically)."""
    items = measurements.items() if isinstance(measurements, dict) else ((m.name, m) for m in measurements)
    out: dict[str, dict] = {}
    for key, m in items:
        if key in out:
            raise ChakraError(f"{path}: two measurements named {key!r}")
        out[key] = m.to_dict()
    _write_json(path, out)
