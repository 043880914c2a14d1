"""What a conversion did (`ConversionReport`: nodes, collectives, steps, links, warnings), and the
warning raised where the input could not be converted faithfully."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from .conservation import GpuTime
from .linking import method_label


class ConversionWarning(UserWarning):
    """Something in the input could not be converted faithfully (the conversion continues)."""


@dataclass
class WaitTime:
    """Time a thread sat blocked, converted as a dependency on what it waited for, not as host
    work: in a collective it queued (`convert.waits`), or for GPU work inside a synchronizing
    call (`convert.sync.after_the_wait`). Host busy time in the trace + this = the recorded time."""

    collectives: int = 0  # collectives a thread blocked in
    collective_us: float = 0.0
    gpu_syncs: int = 0  # host ops that waited for the GPU
    gpu_us: float = 0.0

    def summary(self) -> str:
        """One line ("" when no thread waited)."""
        parts = []
        if self.collectives:
            parts.append(f"{self.collective_us / 1000:,.3f} ms blocked in {self.collectives:,} collectives")
        if self.gpu_syncs:
            parts.append(f"{self.gpu_us / 1000:,.3f} ms waiting for the GPU in {self.gpu_syncs:,} ops")
        return ("waits: " + ", ".join(parts) + " (dependencies, not host time)") if parts else ""

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class ConversionReport:
    """What a conversion did, for logs and tests."""

    nodes: int = 0
    node_types: dict[str, int] = field(default_factory=dict)
    collectives: list[tuple[str, int]] = field(default_factory=list)  # (type, bytes) in order; UNKNOWN, -1: unknown
    # communication kernels by library and where their type and size were found (`convert.kernel_comm`)
    comm_kernels: dict[str, int] = field(default_factory=dict)
    steps_us: list[float] = field(default_factory=list)  # measured step durations (Kineto)
    span_us: float = 0.0  # first step start to last step end
    linked: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was inferred across ranks
    gpu_time: GpuTime | None = None  # GPU time per stream in the Kineto trace and kept (None: no GPU work)
    waits: WaitTime = field(default_factory=WaitTime)  # blocked time converted as dependencies

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        warnings.warn(message, ConversionWarning, stacklevel=3)

    def collectives_by_type(self) -> dict[str, int]:
        """Number of collectives of each type, most frequent first."""
        out: dict[str, int] = {}
        for t, _ in self.collectives:
            out[t] = out.get(t, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def link_summary(self) -> dict[str, Any]:
        """How the host ops were linked to the Kineto trace ({} without one): host ops, the linked
        fraction, ops per method, the methods as text, ops kept with estimated times."""
        lk = self.linked
        if not lk:
            return {}
        return {
            "host_ops": int(lk.get("host_ops", 0)),
            "linked_fraction": float(lk.get("linked_fraction", 0.0)),
            "similarity": float(lk.get("similarity", 0.0)),
            "methods": dict(lk.get("methods", {})),
            "by": method_label(lk),
            "estimated": int(lk.get("estimated", 0)),
            "external_id_offset": int(lk.get("offset", 0)),
        }
