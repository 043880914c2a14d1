"""Analyses of a workload, recorded or simulated. `Analysis` is the one object a notebook
needs: every analysis is a method returning a typed result with `to_dict()`/`to_pandas()`;
the modules beside it hold the logic, one analysis each."""

from __future__ import annotations

import os

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.trace import Trace
from .breakdown import Breakdown, breakdown
from .collectives import collective_stats, communication_matrix, imbalance
from .critical_path import critical_path, job_critical_path
from .device import DeviceAnalysis
from .diff import diff
from .roofline import device_spec, roofline
from .steps import step_breakdown
from .top_ops import top_ops


class Analysis:
    """One workload, optionally with a simulation result (then the time-based analyses use
    the simulated times). Results are computed on first use and kept.

    >>> a = Analysis.open("out/job")            # any path `Workload.open` takes
    >>> a.breakdown().to_pandas()
    >>> a.critical_path().by_rank()             # which rank sets the step time
    >>> a.top_ops(by="exposed").to_pandas()
    """

    def __init__(self, workload: Workload | Trace, result=None):
        self.workload = Workload.of(workload)
        self.result = result
        self._cache: dict = {}

    @classmethod
    def open(cls, path: str | os.PathLike, comm_groups: str | os.PathLike | None = None) -> Analysis:
        """The recorded workload at `path` (any path `Workload.open` takes)."""
        return cls(Workload.open(path, comm_groups))

    def _once(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def breakdown(self) -> Breakdown:
        if self.result is not None:
            return self._once("breakdown", lambda: Breakdown.from_simulation(self.result))
        return self._once("breakdown", lambda: breakdown(self.workload))

    def steps(self):
        """The recorded steps of each rank and where each one's time goes (`steps.step_breakdown`)."""
        return self._once("steps", lambda: step_breakdown(self.workload))

    def devices(self):
        """The device analyses (`device.DeviceAnalysis`) of this workload's nodes, at the
        simulated times when there is a result; for a job's Kineto traces open
        `DeviceAnalysis.open(path)`."""
        return self._once("devices", lambda: DeviceAnalysis.of(self.workload, self.result))

    def critical_path(self, rank: int | None = None):
        """The job's critical path (through collectives), or one rank's dependency chain."""
        if rank is not None:
            return self._once(("cp", rank), lambda: critical_path(self.workload.traces[rank]))
        return self._once("job_cp", lambda: job_critical_path(self.workload, self.result))

    def top_ops(self, by: str = "total", n: int | None = 20):
        try:
            path = self.critical_path()
        except ChakraError:  # no recorded times: totals only
            path = None
        return top_ops(self.workload, self.result, by=by, n=n, path=path)

    def collective_stats(self):
        return self._once("coll", lambda: collective_stats(self.workload))

    def imbalance(self, tolerance: float = 0.0):
        return self._once(("imb", tolerance), lambda: imbalance(self.workload, tolerance))

    def communication_matrix(self):
        return self._once("matrix", lambda: communication_matrix(self.workload))

    def roofline(self, device="h100"):
        return roofline(self.workload, device_spec(device))

    def diff(self, other: Analysis | Workload | Trace, **kw):
        return diff(self.workload, other.workload if isinstance(other, Analysis) else other, **kw)


__all__ = ["Analysis"]
