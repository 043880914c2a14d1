"""How well a weighted subset stands in for the fleet: the fleet-wide aggregate of a per-job
metric (say, simulated step time on a new system, summed over jobs) predicted from the k
representatives alone, against the truth computed from every job.

Two estimators:

- ``count``: each representative's metric times the number of jobs it stands for;
- ``ratio``: each representative's metric scaled to every job it stands for by a per-job proxy
  known without the expensive measurement (by default the job's serial time,
  `FleetFeatures.serial_us`): sum over its jobs of m_rep * proxy_job / proxy_rep. It corrects
  for a representative that is shorter or longer than its jobs, for metrics that grow with a
  job's length (step times, energy); for one that does not (a utilization, a constant), use
  ``count``.

The baseline is a random subset of the same k: uniform weights N / k (``count``) or the ratio
estimator sum(proxy) * sum_S(m) / sum_S(proxy) (``ratio``), its error averaged over `trials`
draws; plus the same draws weighted by assigning every job to its nearest drawn one
("random+assign": what a selection method adds over drawing at random and assigning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...table import Table, Tabular
from .features import FleetFeatures
from .methods import METHODS, Distances, Selection, assign, facility_location, kmedoids

ESTIMATORS = ("count", "ratio")
BASELINES = ("random", "random+assign")


@dataclass
class Coverage(Tabular):
    """Per metric (column): the true aggregate (sum over the fleet), the one predicted from the
    representatives, and the relative error |predicted - true| / |true|."""

    metric_names: list[str]
    true: np.ndarray
    predicted: np.ndarray
    estimator: str = "ratio"

    @property
    def error(self) -> np.ndarray:
        return np.abs(self.predicted - self.true) / np.maximum(np.abs(self.true), 1e-300)

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "metrics": [
                {"metric": m, "true": float(t), "predicted": float(p), "relative_error": float(e)}
                for m, t, p, e in zip(self.metric_names, self.true, self.predicted, self.error)
            ],
        }

    def to_table(self) -> Table:
        """One row per metric (the index): true and predicted aggregate, relative error."""
        cols = {"metric": list(self.metric_names), "true": self.true, "predicted": self.predicted}
        return Table(
            {**cols, "relative_error": self.error}, title=f"coverage ({self.estimator} estimator)", index="metric"
        )


def _metric(metric: np.ndarray | Sequence[float], n: int, names: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    m = np.asarray(metric, np.float64)
    m = m[:, None] if m.ndim == 1 else m
    if m.ndim != 2 or m.shape[0] != n:
        raise ChakraError(f"coverage: the metric needs one value (or row) per job: {n} jobs, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ChakraError(
            f"coverage: the metric of job {int(np.flatnonzero(~np.isfinite(m).all(axis=1))[0])} is not finite"
        )
    names = list(names) if names is not None else [f"metric{i}" for i in range(m.shape[1])]
    if len(names) != m.shape[1]:
        raise ChakraError(f"coverage: {len(names)} metric names for {m.shape[1]} metrics")
    return m, names


def _proxy(proxy: np.ndarray | None, n: int) -> np.ndarray:
    if proxy is None:
        raise ChakraError(
            "coverage: the ratio estimator needs a per-job proxy (FleetFeatures.serial_us); "
            "give proxy=..., or estimator='count'"
        )
    p = np.asarray(proxy, np.float64)
    if p.shape != (n,) or not (np.isfinite(p).all() and (p > 0).all()):
        raise ChakraError(f"coverage: the proxy needs one positive finite value per job ({n})")
    return p


def predict(
    indices: np.ndarray,
    assignment: np.ndarray,
    m: np.ndarray,
    estimator: str = "count",
    proxy: np.ndarray | None = None,
) -> np.ndarray:
    """The fleet's sum of each metric column predicted from the jobs `indices`, job i standing
    for the jobs whose `assignment` is its position."""
    k = indices.size
    if estimator == "count":
        w = np.bincount(assignment, minlength=k).astype(np.float64)
    elif estimator == "ratio":
        p = _proxy(proxy, m.shape[0])
        w = np.bincount(assignment, weights=p, minlength=k) / p[indices]
    else:
        raise ChakraError(f"coverage: unknown estimator {estimator!r}; estimators: {', '.join(ESTIMATORS)}")
    return w @ m[indices]


def coverage(
    selection: Selection,
    metric: np.ndarray | Sequence[float],
    *,
    metric_names: Sequence[str] | None = None,
    estimator: str = "ratio",
    proxy: np.ndarray | None = None,
) -> Coverage:
    """The fleet aggregate of `metric` ((N,) or (N, M), one row per job in the fleet's order)
    predicted from `selection`, against the truth. The ratio estimator's proxy defaults to the
    serial times the selection kept from its FleetFeatures."""
    m, names = _metric(metric, selection.n, metric_names)
    proxy = selection.proxy if proxy is None else proxy
    pred = predict(selection.indices, selection.assignment, m, estimator, proxy)
    return Coverage(names, m.sum(axis=0), pred, estimator)


def random_errors(
    d: Distances | None,
    m: np.ndarray,
    k: int,
    rng: np.random.Generator,
    trials: int,
    estimator: str = "count",
    proxy: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Mean relative error (per metric column) of `trials` random k-subsets: "random" (uniform
    weights or the ratio estimator) and, with distances, "random+assign"."""
    n = m.shape[0]
    true = m.sum(axis=0)
    scale = np.maximum(np.abs(true), 1e-300)
    plain = np.zeros((trials, m.shape[1]))
    assigned = np.zeros((trials, m.shape[1]))
    p = _proxy(proxy, n) if estimator == "ratio" else None
    for t in range(trials):
        s = rng.choice(n, size=k, replace=False)
        if p is None:
            pred = m[s].sum(axis=0) * (n / k)
        else:
            pred = m[s].sum(axis=0) * (p.sum() / p[s].sum())
        plain[t] = np.abs(pred - true) / scale
        if d is not None:
            near, _ = assign(d, s)
            assigned[t] = np.abs(predict(s, near, m, estimator, proxy) - true) / scale
    out = {"random": plain.mean(axis=0)}
    if d is not None:
        out["random+assign"] = assigned.mean(axis=0)
    return out


@dataclass
class CoverageCurve(Tabular):
    """Relative error of the fleet aggregate per k (rows of each array, in `ks` order) and metric
    (columns), for each method and baseline; `objective`: each method's summed distance per k."""

    ks: list[int]
    metric_names: list[str]
    errors: dict[str, np.ndarray]  # method or baseline -> (len(ks), M)
    objective: dict[str, np.ndarray] = field(default_factory=dict)  # method -> (len(ks),)
    estimator: str = "ratio"
    trials: int = 0

    def error_at(self, k: int, method: str) -> np.ndarray:
        try:
            return self.errors[method][self.ks.index(k)]
        except (KeyError, ValueError):
            raise ChakraError(f"coverage curve: no {method!r} at k={k}") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimator": self.estimator,
            "random_trials": self.trials,
            "ks": list(self.ks),
            "metrics": list(self.metric_names),
            "errors": {k: v.tolist() for k, v in self.errors.items()},
            "objective": {k: v.tolist() for k, v in self.objective.items()},
        }

    def to_table(self) -> Table:
        """Long form: one row per (method, k, metric)."""
        per = len(self.ks) * len(self.metric_names)  # rows per method
        cols = {
            "method": [m for m in self.errors for _ in range(per)],
            "k": np.tile(np.repeat(np.asarray(self.ks, np.int64), len(self.metric_names)), len(self.errors)),
            "metric": list(self.metric_names) * (len(self.ks) * len(self.errors)),
            "relative_error": np.concatenate([np.asarray(e, np.float64).reshape(-1) for e in self.errors.values()])
            if self.errors
            else np.zeros(0),
        }
        return Table(cols, title="coverage curve")


def coverage_curve(
    features: FleetFeatures | np.ndarray,
    metric: np.ndarray | Sequence[float],
    ks: Sequence[int],
    *,
    methods: Sequence[str] = METHODS,
    metric_names: Sequence[str] | None = None,
    estimator: str = "ratio",
    proxy: np.ndarray | None = None,
    seed: int = 0,
    trials: int = 20,
    repeats: int = 1,
) -> CoverageCurve:
    """The error of the predicted fleet aggregate for each k in `ks`, for each method and for
    the random baselines (averaged over `trials` draws per k). k-medoids' error and objective
    are averaged over `repeats` seeds (seed, seed + 1, ...): its result depends on its seeding.
    With FleetFeatures and the ratio estimator the proxy defaults to the jobs' serial time."""
    if isinstance(features, FleetFeatures):
        if estimator == "ratio" and proxy is None:
            proxy = features.serial_us
        x = features.standardized()
    else:
        x = np.asarray(features, np.float64)
    n = x.shape[0]
    m, names = _metric(metric, n, metric_names)
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1 or max(ks) > n:
        raise ChakraError(f"coverage curve: every k must be between 1 and the number of jobs ({n})")
    unknown = [x for x in methods if x not in METHODS]
    if unknown:
        raise ChakraError(f"coverage curve: unknown method {unknown[0]!r}; methods: {', '.join(METHODS)}")
    d = Distances(x)
    true = m.sum(axis=0)
    errors: dict[str, np.ndarray] = {}
    objective: dict[str, np.ndarray] = {}
    greedy = facility_location(d, max(ks)) if "facility" in methods else None  # (prefixes are the smaller k)
    for method in methods:
        err = np.zeros((len(ks), m.shape[1]))
        obj = np.zeros(len(ks))
        for i, k in enumerate(ks):
            if method == "facility":
                assert greedy is not None
                runs = [greedy[:k]]
            else:
                runs = [kmedoids(d, k, np.random.default_rng(seed + r)) for r in range(max(repeats, 1))]
            for medoids in runs:
                near, dist = assign(d, medoids)
                pred = predict(medoids, near, m, estimator, proxy)
                err[i] += np.abs(pred - true) / np.maximum(np.abs(true), 1e-300) / len(runs)
                obj[i] += dist.sum() / len(runs)
        errors[method], objective[method] = err, obj
    if trials > 0:
        rng = np.random.default_rng([seed, 1])
        base = [random_errors(d, m, k, rng, trials, estimator, proxy) for k in ks]
        for b in BASELINES:
            errors[b] = np.stack([x[b] for x in base])
    return CoverageCurve(ks, names, errors, objective, estimator, trials)


__all__ = [
    "BASELINES",
    "ESTIMATORS",
    "Coverage",
    "CoverageCurve",
    "coverage",
    "coverage_curve",
    "predict",
    "random_errors",
]
