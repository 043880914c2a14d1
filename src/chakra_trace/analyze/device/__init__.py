"""Device-side analyses (Holistic Trace Analysis's questions and more) over what each rank's
devices ran: GPU kernels from Kineto traces, a CPU job's backend worker threads, or a Chakra
trace's nodes at recorded or simulated times (`timeline`)."""

from .analysis import DeviceAnalysis
from .source import open_timeline
from .table import Tables
from .timeline import (
    COMM,
    COMPUTE,
    KINDS,
    MEMORY,
    JobTimeline,
    RankTimeline,
    from_chakra,
    from_kineto,
    from_kineto_files,
    from_workload,
    kernel_kind,
)

__all__ = [
    "COMM",
    "DeviceAnalysis",
    "COMPUTE",
    "KINDS",
    "MEMORY",
    "JobTimeline",
    "RankTimeline",
    "Tables",
    "from_chakra",
    "from_kineto",
    "from_kineto_files",
    "from_workload",
    "kernel_kind",
    "open_timeline",
]
