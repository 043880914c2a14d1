"""Trace-driven distributed-training simulation.

`simulate(workload, network, system)` predicts a training step on a system that may not
exist: the workload layer (`scheduler`) issues each NPU's nodes as their dependencies
finish, the system layer (`collectives`) cuts collectives into chunks and runs their
algorithms' steps, and the network layer (a network model, `backend`: `unaware` or `aware`)
prices every message. ``compat=True`` reproduces ASTRA-sim's analytical backends to the
nanosecond, flaws included: its `rules` (see `COMPAT_DIFFERENCES`).
"""

from .checks import WorkloadInvalid, check_workload
from .result import CollectiveRecord, SimResult
from .rules import COMPAT_DIFFERENCES
from .simulator import SimulationBlocked, SimulationWarning, Simulator, simulate

__all__ = [
    "COMPAT_DIFFERENCES",
    "CollectiveRecord",
    "SimResult",
    "SimulationBlocked",
    "SimulationWarning",
    "Simulator",
    "WorkloadInvalid",
    "check_workload",
    "simulate",
]
