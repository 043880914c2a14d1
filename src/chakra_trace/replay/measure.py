"""Statistically sound timing, shared by the replayer and every benchmark.

`measure()` repeats a callable until the 95% confidence interval of its mean time is narrow enough (or a
repeat/time budget is spent) and returns a `Measurement`: the raw samples, why it stopped, the machine it ran
on, and the statistics (median with a distribution-free CI, mean with a Student-t CI, outliers).
`comparison.compare_runs()` says whether two sets of runs differ (runs, i.e. processes, as the unit);
`Measurement.runs` lets one measurement hold several runs.

The statistics are pure functions in `statistics.py`; the machine a measurement ran on is described by
`environment.py`. With an `energy.EnergyMeter`, each sample also gets its joules (``extra["energy_j"]``,
``extra["energy_source"]``; ``extra["energy_absent"]`` says why not) and the same statistics. Only numpy and the standard library are used: the replayer imports this on machines
without scipy.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.documents import read_json, short
from ..io.et import atomic_output
from ..table import Table, Tabular
from .energy import EnergyMeter
from .environment import environment
from .statistics import (
    mean_ci95,
    median_ci95,
    relative_half_width,
    t_ppf,
    tukey_outliers,
)
from .units import replay_unit

__all__ = ["Measurement", "format_time", "load_measurements", "measure", "save_measurements"]

STOP_REASONS = ("converged", "max_repeats", "budget", "peer")

# ---------------------------------------------------------------------------------------------------------
# results


def format_time(seconds: float | None, unit: str | None = None) -> str:
    """'12.34 ms': a duration with a unit chosen for its size (or the given one: s, ms, µs, ns)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    unit = unit or unit_for(seconds)
    return f"{seconds / _UNITS[unit]:.4g} {unit}"


_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def unit_for(seconds: float) -> str:
    a = abs(seconds)
    for u in ("s", "ms", "µs"):
        if a >= _UNITS[u]:
            return u
    return "ns"


def json_number(x: float | None) -> float | None:
    """A float for JSON: NaN and infinities become None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def json_pair(p: tuple[float, float] | None) -> list | None:
    return None if p is None else [json_number(p[0]), json_number(p[1])]


@dataclass
class Measurement(Tabular):
    """Timed samples of one benchmark (seconds each) and the statistics derived from them.

    Statistics: `median` with a distribution-free 95% CI from order statistics (`ci95_median`; needs n >= 6),
    `mean` with a Student-t 95% CI (`ci95_mean`), `rel_ci` = t half-width / mean (what `measure()` drives
    below its target), and `outliers`: indices of samples outside Tukey's fences [Q1 - 1.5 IQR, Q3 + 1.5 IQR]
    (quartiles by linear interpolation). Outliers are reported, never dropped: a slow run is a real run.

    `runs`: which run (process) took each sample, when the measurement holds several (`merge_runs`,
    `chakra replay --runs N`); empty means one run. Samples of one process are not independent
    replications (memory layout, clock frequency and cache state are shared by the whole process), so
    comparisons use runs as the unit (`comparison.compare_runs`); the statistics above pool the samples.
    """

    name: str = ""
    samples: list[float] = field(default_factory=list)
    warmup: int = 0
    stop_reason: str = ""
    env: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    note: str = ""  # why the measurement is weaker than asked for (e.g. a run longer than the budget)
    runs: list[int] = field(default_factory=list)  # run (process) of each sample; empty: all one run

    def _a(self) -> np.ndarray:
        return np.asarray(self.samples, dtype=np.float64)

    @property
    def energy(self) -> np.ndarray | None:
        """Joules of each sample (``extra["energy_j"]``), None when not measured."""
        e = self.extra.get("energy_j")
        return np.asarray(e, dtype=np.float64) if isinstance(e, list) and len(e) == self.n and self.n else None

    def energy_stats(self) -> dict | None:
        """The energy per sample as the time is summarized (J): median with its distribution-free
        95% CI, mean with its t CI, and the counters (``source``); ``{"absent": why}`` when the
        energy was asked for but not measurable; None when it was not asked for."""
        e = self.energy
        if e is None:
            why = self.extra.get("energy_absent")
            return {"absent": str(why)} if why else None
        return {
            "unit": "J",
            "source": self.extra.get("energy_source"),
            "n": int(e.size),
            "median": json_number(float(np.median(e))),
            "ci95_median": json_pair(median_ci95(e)),
            "mean": json_number(float(np.mean(e))),
            "ci95_mean": json_pair(mean_ci95(e)),
        }

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
        return mean_ci95(self._a())

    @property
    def ci95_median(self) -> tuple[float, float] | None:
        """Distribution-free 95% CI of the median: a pair of order statistics; None below 6 samples."""
        return median_ci95(self._a())

    @property
    def rel_ci(self) -> float:
        """Half-width of the 95% CI of the mean relative to the mean (inf below 2 samples)."""
        ci = self.ci95_mean
        if ci is None:
            return math.inf
        return relative_half_width(0.5 * (ci[1] - ci[0]), self.mean)

    @property
    def outliers(self) -> list[int]:
        """Indices of samples outside Tukey's fences (1.5 IQR beyond the quartiles); none below 4 samples."""
        return tukey_outliers(self._a())

    @property
    def run_count(self) -> int:
        """How many runs (processes) the samples come from: 1 unless `runs` says otherwise."""
        return len(set(self.runs)) if self.runs else (1 if self.n else 0)

    def split_runs(self) -> list[Measurement]:
        """One measurement per run, in order of first appearance (itself, alone, when it holds one run)."""
        if not self.runs or self.run_count == 1:
            return [self]
        where: dict[int, list[int]] = {}  # run -> its samples (a mask per run: runs x samples)
        for i, r in enumerate(self.runs):
            where.setdefault(r, []).append(i)
        a, e = self._a(), self.energy
        out = []
        for pos in where.values():
            extra = dict(self.extra)
            if e is not None:
                extra["energy_j"] = e[pos].tolist()
            m = Measurement(self.name, a[pos].tolist(), self.warmup, self.stop_reason, self.env, extra)
            m.note = self.note
            out.append(m)
        return out

    @classmethod
    def merge_runs(cls, runs: Iterable[Measurement], *, name: str | None = None) -> Measurement:
        """One measurement holding several runs (each given one is one run, or several by its own `runs`):
        the samples concatenated, `runs` numbering them 0, 1, ... The first run's environment is kept."""
        ms = list(runs)
        if not ms:
            raise ChakraError("merge_runs: no measurements")
        samples: list[float] = []
        ids: list[int] = []
        joules: list[float] | None = []
        k = 0
        for m in ms:
            for part in m.split_runs():
                samples.extend(float(x) for x in part.samples)
                ids.extend([k] * part.n)
                e = part.energy
                joules = joules + e.tolist() if joules is not None and e is not None else None
                k += 1
        first = ms[0]
        extra = dict(first.extra)
        if joules is not None and all(m.extra.get("energy_source") == first.extra.get("energy_source") for m in ms):
            extra["energy_j"] = joules
        elif any(m.energy is not None for m in ms):  # some runs without (or with other counters): none
            extra.pop("energy_j", None)
            extra.pop("energy_source", None)
            extra["energy_absent"] = "not every run measured energy with the same counters"
        notes = "; ".join(dict.fromkeys(m.note for m in ms if m.note))
        reasons = ",".join(dict.fromkeys(m.stop_reason for m in ms if m.stop_reason))
        return cls(
            name=first.name if name is None else name,
            samples=samples,
            warmup=first.warmup,
            stop_reason=reasons,
            env=dict(first.env),
            extra=extra,
            note=notes,
            runs=ids if k > 1 else [],
        )

    def stats(self) -> dict:
        return {
            "n": self.n,
            "median": json_number(self.median),
            "mean": json_number(self.mean),
            "std": json_number(self.std),
            "min": json_number(self.min),
            "max": json_number(self.max),
            "cv": json_number(self.cv),
            "ci95_mean": json_pair(self.ci95_mean),
            "ci95_median": json_pair(self.ci95_median),
            "rel_ci": json_number(self.rel_ci),
            "outliers": self.outliers,
            "runs": self.run_count,
        }

    def to_dict(self) -> dict:
        """JSON-able: identity, statistics (derived, for readers) and the raw samples (what `from_dict` uses);
        ``runs`` (the run of each sample) only when there are several runs, so one-run files stay as before."""
        d = {
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
        energy = self.energy_stats()
        if energy is not None:
            d["energy"] = energy
        if self.run_count > 1:
            d["runs"] = [int(r) for r in self.runs]
        return d

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "<dict>") -> Measurement:
        """A measurement from JSON data, which may come from someone else: every field is checked
        (one-line ChakraError naming `source` and the field)."""
        if not isinstance(d, dict) or not isinstance(d.get("samples"), list):
            raise ChakraError(f"{source}: expected a measurement (an object with a 'samples' list)")
        name = d.get("name", "")
        try:
            samples = [_finite(x) for x in d["samples"]]
        except (TypeError, ValueError, OverflowError):
            raise ChakraError(
                f"{source}: 'samples' of measurement {short(name)} must be finite numbers (seconds)"
            ) from None
        runs = d.get("runs") or []
        if not isinstance(runs, list) or (runs and len(runs) != len(samples)):
            raise ChakraError(f"{source}: 'runs' must list the run of each of the {len(samples)} samples")
        for key in ("env", "extra"):
            if not isinstance(d.get(key) or {}, dict):
                raise ChakraError(f"{source}: {key!r} of measurement {short(name)} must be an object")
        for key in ("name", "stop_reason", "note"):
            if not isinstance(d.get(key) or "", str):
                raise ChakraError(f"{source}: {key!r} of measurement {short(name)} must be a string")
        try:
            counts = [_count(r) for r in runs]
        except ValueError as e:
            raise ChakraError(f"{source}: 'runs' of measurement {short(name)}: {e}") from None
        try:
            warmup = _count(d.get("warmup", 0) or 0)
        except ValueError as e:
            raise ChakraError(f"{source}: 'warmup' of measurement {short(name)}: {e}") from None
        try:
            return cls(
                runs=counts,
                name=str(name or ""),
                samples=samples,
                warmup=warmup,
                stop_reason=str(d.get("stop_reason", "") or ""),
                env=dict(d.get("env") or {}),
                extra=dict(d.get("extra") or {}),
                note=str(d.get("note", "") or ""),
            )
        except (TypeError, ValueError, OverflowError) as e:
            raise ChakraError(f"{source}: malformed measurement {short(name)}: {e}") from None

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
        unit = unit_for(self.median)
        ci = self.ci95_median
        ci_s = f"95% CI {format_time(ci[0], unit).split()[0]}–{format_time(ci[1], unit)}" if ci else "95% CI n/a"
        parts = [f"median {format_time(self.median, unit)} ({ci_s})", f"n={self.n}"]
        if self.run_count > 1:
            parts.append(f"{self.run_count} runs")
        if self.n >= 2:
            parts.append(f"cv {100 * self.cv:.1f}%")
        k = len(self.outliers)
        parts.append(f"{k} outlier{'s' if k != 1 else ''}")
        line = ", ".join(parts)
        if self.stop_reason and self.stop_reason != "converged":
            line += f"; stopped: {self.stop_reason}"
        if self.note:
            line += f" ({self.note})"
        e = self.energy_stats()
        if e is not None and "median" in e:
            ci = e["ci95_median"]
            ci_e = f"95% CI {ci[0]:.4g}–{ci[1]:.4g} J" if ci else "95% CI n/a"
            line += f"; energy median {e['median']:.4g} J ({ci_e}, {e['source']})"
        return line

    def to_table(self) -> Table:
        """One row per sample: seconds and whether it is an outlier."""
        out = np.zeros(self.n, dtype=bool)
        out[self.outliers] = True
        return Table({"seconds": self._a(), "outlier": out}, title=self.name or "samples")


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
    on_sample: Callable[[int], Any] | None = None,
    meter: EnergyMeter | None = None,
    origin: float | None = None,
    deadline: float | None = None,
) -> Measurement:
    """Time `fn()` until the 95% CI of the mean is within `target_rel_ci` of it, or a limit is reached.

    `warmup` untimed calls come first. Then timed calls repeat until, after at least `min_repeats`, the CI's
    relative half-width is <= `target_rel_ci` ("converged"), or `max_repeats` samples ("max_repeats"), or
    `budget_s` seconds since the start, warm-up included, have passed ("budget"). At least `min_repeats`
    samples are always taken, unless one run alone is longer than the budget: then it stops after
    min(2, min_repeats) and says so in `note`. A warm-up run past the budget also ends the warm-up early.

    `on_sample(n)` is called after the n-th timed sample (progress), outside the timed region.

    `meter` (`energy.EnergyMeter`): its counters are read right before each sample's first clock reading
    and right after its last, outside the timed region (so the energy bracket is the sample plus one
    `sync`); the joules land in ``extra["energy_j"]`` with ``extra["energy_source"]``, or
    ``extra["energy_absent"]`` says why not (no counter, or one that failed midway: no partial energy).

    `sync()` is called right before each clock reading (e.g. `torch.cuda.synchronize`), so asynchronous work
    lands in the sample that launched it. `timer` reads the clock (seconds) for the samples and the budget.

    Distributed runs: `decide(stop_here) -> stop_all` turns this process's wish into the shared decision
    (e.g. an all-reduce of the flag; MAX stops when any rank wants to, MIN when all do). It is called exactly
    once per sample on every rank, and the warm-up is never cut short, so every rank calls `fn` equally
    often. `max_repeats` stops every rank at the same sample whatever `decide` says (give all ranks the same
    value). A rank stopped by the others' wish records the stop reason "peer".

    A budget that also covers what ran before (a replay's preparation and warm-up): ``origin``, the
    `timer` reading it counts from (default: now). ``deadline`` (a `timer` reading): the hard end,
    past which no sample starts even below `min_repeats` (said in `note`). A call of `fn` that
    returns False was cut short by it (a replay pass: `_standalone.run`): not a sample, and the
    measurement stops (with `decide`, once every rank agrees), possibly with no sample at all.
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
    start = now() if origin is None else origin
    warm = 0
    for _ in range(warmup):
        if deadline is not None and decide is None and timer() > deadline:
            notes.append(f"warm-up cut to {warm} of {warmup} runs by the time budget")
            break
        fn()
        warm += 1
        if decide is None and warm < warmup and now() - start > budget_s:
            notes.append(f"warm-up cut to {warm} of {warmup} runs by the {budget_s:g} s budget")
            break

    samples: list[float] = []
    joules: list[float | None] = []
    metered = meter is not None and meter.available
    n, mean, m2, longest = 0, 0.0, 0.0, 0.0  # Welford's running mean and sum of squared deviations
    reason = None
    while True:
        e0 = meter.read() if metered and meter is not None else None
        t0 = now()
        whole = fn() is not False
        t1 = now()
        reason = None
        if whole:
            if metered and meter is not None:
                joules.append(meter.joules(e0, meter.read()))
            dt = t1 - t0
            samples.append(dt)
            if on_sample is not None:
                on_sample(len(samples))
            n += 1
            delta = dt - mean
            mean += delta / n
            m2 += delta * (dt - mean)
            longest = max(longest, dt)
            if n >= max_repeats:
                reason = "max_repeats"
            elif n >= min_repeats and n >= 2 and _converged(n, mean, m2, target_rel_ci):
                reason = "converged"
            elif t1 - start >= budget_s and (n >= min_repeats or (longest > budget_s and n >= min(2, min_repeats))):
                reason = "budget"
        if reason is None and (not whole or (deadline is not None and t1 >= deadline)):
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
        if longest > budget_s:
            notes.append(
                f"one run ({format_time(longest)}) exceeds the {budget_s:g} s budget: stopped after {n} "
                f"of min_repeats={min_repeats}"
            )
        else:
            notes.append(f"the time budget ran out after {n} of min_repeats={min_repeats} samples")
    env = environment()
    env["timer"] = getattr(timer, "__qualname__", None) or type(timer).__name__
    m = Measurement(name=name, samples=samples, warmup=warm, stop_reason=reason, env=env, note="; ".join(notes))
    if meter is not None:
        m.extra.update(energy_extra(meter, joules))
    return m


def energy_extra(meter: EnergyMeter, joules: list[float | None]) -> dict:
    """A measurement's energy entries: the joules of every sample and their counters, or why absent."""
    if meter.available and joules and all(j is not None for j in joules):
        return {"energy_j": [float(j) for j in joules if j is not None], "energy_source": meter.source}
    return {"energy_absent": meter.reason or "no energy was read"}


def _converged(n: int, mean: float, m2: float, target: float) -> bool:
    se = math.sqrt(max(m2, 0.0) / (n - 1) / n)
    if (
        relative_half_width(1.959963984540054 * se, mean) > target
    ):  # t quantiles exceed the normal one: skip computing it
        return False
    return relative_half_width(t_ppf(0.975, n - 1) * se, mean) <= target


# ---------------------------------------------------------------------------------------------------------
# files


def _write_json(path: str | os.PathLike, obj: Any) -> None:
    data = json.dumps(obj, indent=1, allow_nan=False).encode()
    with atomic_output(path) as f:
        f.write(data)


def _read_json(path: str | os.PathLike) -> Any:
    """A result file's JSON: it may come from someone else, so through `io.documents` (a regular
    file, its size bounded after gunzip with the ratio guard, its nesting and integers limited)."""
    return read_json(path, "measurement file")


def _finite(x) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        raise ValueError(x)
    return float(x)


def _count(x) -> int:
    """A non-negative integer count from JSON (a whole float such as 3.0 too)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 or x != int(x):
        raise ValueError(f"{short(x)} is not a count")
    return int(x)


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
        if not isinstance(obj["per_rank"], dict):
            raise ChakraError(f"{src}: 'per_rank' must be an object of measurements by rank")
        for r, d in obj["per_rank"].items():
            out[f"rank {r}"] = Measurement.from_dict(d, source=f"{src} (rank {r if r.isdigit() else short(r)})")
        unit = replay_unit(obj)  # (files of before the step carried its unit: from the replay's mode)
        for m in out.values():
            if "unit" not in m.extra:
                m.extra.update(unit)
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
