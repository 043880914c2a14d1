"""The timed view of a job, the noun every analysis, export and check shares: what each rank's
devices ran and when (`job`: from Kineto traces where the job has them, else the Chakra nodes,
recorded or simulated), the one way to open it (`open`), one clock for every rank (`clock`) and
one rule for which operations of different ranks meet (`matching`)."""

from .clock import origin_offsets_ns, rank_offsets_ns
from .job import (
    COMM,
    COMPUTE,
    KINDS,
    MEMORY,
    HostOps,
    JobTimeline,
    RankTimeline,
    from_chakra,
    from_kineto,
    from_kineto_files,
    from_workload,
    kernel_kind,
)
from .matching import p2p_rows, pair_p2p
from .open import SOURCE_CHOICES, open_timeline

__all__ = [
    "COMM",
    "COMPUTE",
    "KINDS",
    "MEMORY",
    "SOURCE_CHOICES",
    "HostOps",
    "JobTimeline",
    "RankTimeline",
    "from_chakra",
    "from_kineto",
    "from_kineto_files",
    "from_workload",
    "kernel_kind",
    "open_timeline",
    "p2p_rows",
    "pair_p2p",
    "origin_offsets_ns",
    "rank_offsets_ns",
]
