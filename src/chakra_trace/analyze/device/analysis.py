"""`DeviceAnalysis`: the device questions of HTA's `TraceAnalysis` (and more) over one job's
timeline, as a view of `Analysis` (`Analysis.open(path).devices()`), which opens the job and its
timeline once. Results are computed on first use and kept."""

from __future__ import annotations

from ...table import Tables
from ...timeline.job import JobTimeline
from .idle import idle_breakdown
from .kernels import kernel_breakdown
from .launches import launch_stats
from .memory import counters, memory_timeline
from .overlap import comm_overlap
from .sequences import frequent_sequences, op_kernel_map
from .stragglers import stragglers
from .temporal import temporal_breakdown


class DeviceAnalysis:
    """
    >>> d = Analysis.open("traces/").devices()    # Kineto traces, a collect folder, a Chakra job
    >>> d.kernels().to_pandas("by_kind")
    >>> d.idle().to_pandas()
    >>> d.overlap().to_dict()
    """

    def __init__(self, timeline: JobTimeline):
        self.timeline = timeline
        self._cache: dict = {}

    @property
    def source(self) -> str:
        return self.timeline.source

    def _once(self, key, make) -> Tables:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def kernels(self, top_k: int = 10) -> Tables:
        """Kernel time by kind (computation, communication, memory) and by name, per rank."""
        return self._once(("kernels", top_k), lambda: kernel_breakdown(self.timeline, top_k=top_k))

    def temporal(self) -> Tables:
        """Each rank's and stream's window split into computation, communication, memory, idle."""
        return self._once("temporal", lambda: temporal_breakdown(self.timeline))

    def idle(self, **kw) -> Tables:
        """Idle time per stream by cause: host wait, kernel wait, other."""
        return self._once(("idle", tuple(sorted(kw.items()))), lambda: idle_breakdown(self.timeline, **kw))

    def overlap(self) -> Tables:
        """Communication hidden behind computation, and communication as the device sees it."""
        return self._once("overlap", lambda: comm_overlap(self.timeline))

    def launches(self, **kw) -> Tables:
        """Kernel launch statistics: launch duration, launch-to-start delay, outliers."""
        return self._once(("launches", tuple(sorted(kw.items()))), lambda: launch_stats(self.timeline, **kw))

    def sequences(self, length: int = 3, top_k: int = 10, op: str | None = None) -> Tables:
        """Frequent kernel sequences per stream (fusion candidates)."""
        return self._once(
            ("sequences", length, top_k, op),
            lambda: frequent_sequences(self.timeline, length=length, top_k=top_k, op=op),
        )

    def op_kernels(self) -> Tables:
        """Which kernels each host op launched."""
        return self._once("op_kernels", lambda: op_kernel_map(self.timeline))

    def memory(self) -> Tables:
        """Allocated and reserved memory over time (the trace's memory events)."""
        return self._once("memory", lambda: memory_timeline(self.timeline))

    def counters(self, **kw) -> Tables:
        """Queue length per stream and memory bandwidth over time."""
        return self._once(("counters", tuple(sorted(kw.items()))), lambda: counters(self.timeline, **kw))

    def stragglers(self) -> Tables:
        """Ranks late to collectives, and what each cost the others."""
        return self._once("stragglers", lambda: stragglers(self.timeline))
