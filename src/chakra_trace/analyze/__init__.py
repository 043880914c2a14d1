"""Analyses of a workload, recorded or simulated. `Analysis` is the one object a notebook
needs: every analysis is a method returning a typed result with `to_dict()`/`to_pandas()`;
the modules beside it hold the logic, one analysis each."""

from __future__ import annotations

import os

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.trace import Trace
from ..timeline.job import JobTimeline, from_workload
from ..timeline.open import SOURCE_CHOICES, open_timeline
from .breakdown import Breakdown, breakdown
from .collectives import collective_stats, communication_matrix, imbalance
from .critical_path import critical_path, job_critical_path
from .device import DeviceAnalysis
from .diff import diff
from .roofline import device_spec, roofline
from .steps import step_breakdown
from .streams import StreamBusy, stream_busy
from .top_ops import top_ops


class Analysis:
    """One job, opened once, optionally with a simulation result (then the time-based analyses
    use the simulated times). Its nodes (`workload`) and its device timeline (`timeline()`:
    the Kineto traces where the job has them, else the nodes at their times) are read on first
    use and kept, as is every result.

    >>> a = Analysis.open("out/job")            # any path `Workload.open` takes, or Kineto traces
    >>> a.breakdown().to_pandas()
    >>> a.critical_path().by_rank()             # which rank sets the step time
    >>> a.top_ops(by="exposed").to_pandas()
    >>> a.devices().kernels().to_pandas("by_kind")
    """

    def __init__(
        self,
        workload: Workload | Trace | None = None,
        result=None,
        *,
        source: str | os.PathLike | list | None = None,
        comm_groups: str | os.PathLike | None = None,
        devices: str = "auto",
        progress=None,
    ):
        if workload is None and source is None:
            raise ChakraError("Analysis: give a workload or the path of one")
        if devices not in SOURCE_CHOICES:
            raise ChakraError(f"device timeline source: one of {SOURCE_CHOICES}, not {devices!r}")
        self._workload = None if workload is None else Workload.of(workload)
        self.result = result
        self.source = source
        self._open = (comm_groups, progress)
        self._devices = devices
        self._cache: dict = {}

    @classmethod
    def open(
        cls,
        source: str | os.PathLike | list,
        comm_groups: str | os.PathLike | None = None,
        *,
        devices: str = "auto",
        progress=None,
    ) -> Analysis:
        """The job at `source`: any path `Workload.open` takes, or Kineto trace file(s) or a folder
        of them. ``devices``: where the device timeline comes from, "auto" (the job's Kineto
        traces where it has them, else its nodes), "kineto" or "chakra"."""
        return cls(source=source, comm_groups=comm_groups, devices=devices, progress=progress)

    @classmethod
    def of(cls, job: Analysis | Workload | Trace) -> Analysis:
        return job if isinstance(job, Analysis) else cls(job)

    @property
    def workload(self) -> Workload:
        """The job's nodes (`Workload.open` of the source, read once)."""
        if self._workload is None:
            if isinstance(self.source, (list, tuple)):
                raise ChakraError("a list of Kineto traces has device times only; open one Chakra workload")
            comm_groups, progress = self._open
            assert self.source is not None
            self._workload = Workload.open(self.source, comm_groups, progress=progress)
        return self._workload

    def timeline(self) -> JobTimeline:
        """What each rank's devices ran and when: at the simulated times with a result, else the
        job's Kineto traces where it has them (``devices``), else its nodes at their recorded
        times (`timeline.open_timeline`)."""
        if self.result is not None:
            return self._once("timeline", lambda: from_workload(self.workload, self.result))
        if self.source is None:
            if self._devices == "kineto":
                raise ChakraError("a workload in memory has no Kineto traces: open the job's path")
            return self._once("timeline", lambda: from_workload(self.workload))
        return self._once(
            "timeline", lambda: open_timeline(self.source, prefer=self._devices, workload=lambda: self.workload)
        )

    @property
    def nodes_timed(self) -> bool:
        """Whether the Chakra nodes carry recorded start times (some rank's are not all 0)."""
        return any(t.timed for t in self.workload.traces.values())

    @property
    def timed(self) -> bool:
        """Whether the job has times: a simulation, Kineto traces, or recorded node times."""
        if self.result is not None:
            return True
        return self.timeline().source != "recorded" or self.nodes_timed

    def devices(self) -> DeviceAnalysis:
        """The device analyses (`device.DeviceAnalysis`) over `timeline()`."""
        return self._once("devices", lambda: DeviceAnalysis(self.timeline()))

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

    def roofline(self, device="h100", fp32_as: str = "pytorch"):
        return roofline(self.workload, device_spec(device), fp32_as=fp32_as)

    def stream_busy(self) -> StreamBusy:
        """GPU busy time per (rank, device, stream) at the recorded times (`analyze.streams`)."""
        return self._once("streams", lambda: stream_busy(self.workload))

    def diff(self, other: Analysis | Workload | Trace, **kw):
        return diff(self.workload, other.workload if isinstance(other, Analysis) else other, **kw)


__all__ = ["Analysis"]
