"""Design-space sweeps over the simulator: a YAML spec's axes (systems, network fields, NPU
counts, workloads and plans, simulator modes) expanded into points, each simulated once into a
row of a Parquet results folder that DuckDB queries, with Pareto, sensitivity and scaling views.

`run_sweep(spec, out)` runs in local worker processes or on Ray, skips points already in ``out``
and survives a worker killed mid-point (see `executors`).
"""

from .points import Point, expand
from .results import SweepResult, load_results, query
from .run import run_sweep
from .spec import SweepSpec, load_spec
from .views import pareto, scaling, sensitivity

__all__ = [
    "Point",
    "SweepResult",
    "SweepSpec",
    "expand",
    "load_results",
    "load_spec",
    "pareto",
    "query",
    "run_sweep",
    "scaling",
    "sensitivity",
]
