"""Representative subsets of a fleet of jobs: which k traces to simulate instead of all N, how
many jobs each stands for, and how well they reproduce the fleet's aggregate.

- `features`: a job as a fixed-length vector (op-class time shares, message sizes, scale) and a
  fleet of them on one scale;
- `methods`: k-medoids and facility location over those vectors, with weights;
- `coverage`: the fleet aggregate of a per-job metric predicted from the weighted k, its error,
  and the error per k against random subsets;
- `jobs`: the jobs under the paths a user gives.

>>> from chakra_trace.synthesize.fleet import synthetic_fleet
>>> feats = fleet_features((j.name, j.workload) for j in synthetic_fleet(1000))
>>> sel = select(feats, k=10)                          # Selection: indices, weights, ...
>>> coverage(sel, step_times).error                    # step_times: one per job, in fleet order
"""

from .coverage import Coverage, CoverageCurve, coverage, coverage_curve
from .features import FEATURE_NAMES, FleetFeatures, JobFeatures, fleet_features, job_features
from .jobs import JobPath, find_jobs
from .methods import METHODS, Selection, select

__all__ = [
    "FEATURE_NAMES",
    "METHODS",
    "Coverage",
    "CoverageCurve",
    "FleetFeatures",
    "JobFeatures",
    "JobPath",
    "Selection",
    "coverage",
    "coverage_curve",
    "fleet_features",
    "find_jobs",
    "job_features",
    "select",
]
