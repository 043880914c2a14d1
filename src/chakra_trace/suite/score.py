"""Scores: per workload the speedup over the reference system, per division their geometric mean.

Speedups are ratios, so they are summarized by the geometric mean (the only mean of ratios that
does not depend on which system is the reference: Fleming and Wallace, CACM 1986), never the
arithmetic one; a division's score needs every workload of the suite valid on the system (as
MLPerf's closed division does), else it is reported as incomplete with the partial mean beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def speedup(reference_s: float | None, s: float | None) -> float | None:
    if not reference_s or not s or reference_s <= 0 or s <= 0:
        return None
    return reference_s / s


def geomean(values: Iterable[float]) -> float | None:
    v = [float(x) for x in values]
    if not v or any(not x > 0 or not math.isfinite(x) for x in v):
        return None
    return math.exp(math.fsum(math.log(x) for x in v) / len(v))


def division_score(
    speedups: Sequence[float | None], names: Sequence[str], suite_names: Sequence[str] | None = None
) -> dict:
    """{"score", "partial_score", "valid", "workloads", "missing"}: ``score`` only when every
    workload of the suite (``suite_names``, default ``names``) has a speedup; those not run are
    missing first, then those without a speedup."""
    everyone = list(suite_names) if suite_names is not None else list(names)
    ok = [s for s in speedups if s is not None]
    missing = sorted(set(everyone) - set(names)) + [n for n, s in zip(names, speedups) if s is None]
    return {
        "score": geomean(ok) if not missing else None,
        "partial_score": geomean(ok),
        "valid": len(ok),
        "workloads": len(everyone),
        "missing": missing,
    }
