"""GPU time in, GPU time out: per stream, what a Kineto trace's GPU activities (kernels, copies,
sets) add up to, what the converted rank keeps of them, and why the rest was left out.

Every GPU activity of the file becomes a node of the converted trace unless it lies outside the
recorded window (the profiler steps): launched before it, or after it (an activity whose launch
was not recorded is judged by its own start). Work launched inside the window that runs after it
(the GPU runs behind the host) is kept. So that nothing is lost silently, the conversion report
carries this account (`GpuTime`), and the tests check that it adds up against the raw file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..intervals import length, union
from ..table import Column, Table, Tabular

KEPT, BEFORE, AFTER, UNTIMED = 0, 1, 2, 3  # the fate of each GPU activity
REASONS = {
    BEFORE: "launched before the recorded window",
    AFTER: "launched after the recorded window",
    UNTIMED: "no recorded window (no host op has a time)",
}


@dataclass
class StreamTime:
    """One GPU stream: its activities in the file and in the converted trace, busy time (µs: the
    union of their intervals) of each, and the activities left out, by reason."""

    device: int
    stream: int
    events: int
    kept: int
    busy_us: float
    kept_us: float
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass
class GpuTime(Tabular):
    """GPU busy time per stream, in the file and kept by the conversion (`StreamTime` rows)."""

    streams: list[StreamTime] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.streams)

    @property
    def kept(self) -> int:
        return sum(s.kept for s in self.streams)

    @property
    def busy_us(self) -> float:
        return sum(s.busy_us for s in self.streams)

    @property
    def kept_us(self) -> float:
        return sum(s.kept_us for s in self.streams)

    def dropped(self) -> dict[str, int]:
        """Activities left out, by reason (none: every one was kept)."""
        out: dict[str, int] = {}
        for s in self.streams:
            for k, v in s.dropped.items():
                out[k] = out.get(k, 0) + v
        return out

    def summary(self) -> str:
        """One line: GPU time kept of the file's, and what was left out."""
        if not self.streams:
            return "no GPU activity in the file"
        pct = 100 * self.kept_us / self.busy_us if self.busy_us else 100.0
        text = (
            f"GPU time kept {self.kept_us / 1000:,.2f} of {self.busy_us / 1000:,.2f} ms ({pct:.1f}%), "
            f"{self.kept:,} of {self.events:,} activities on {len(self.streams)} streams"
        )
        dropped = self.dropped()
        if dropped:
            text += "; left out: " + ", ".join(f"{v:,} {k}" for k, v in dropped.items())
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "kept": self.kept,
            "busy_us": self.busy_us,
            "kept_us": self.kept_us,
            "dropped": self.dropped(),
            "streams": [vars(s) | {"dropped": dict(s.dropped)} for s in self.streams],
        }

    def to_table(self) -> Table:
        """One row per (device, stream)."""
        rows = [{k: v for k, v in vars(s).items() if k != "dropped"} for s in self.streams]
        for r, s in zip(rows, self.streams):
            r["left_out"] = ", ".join(f"{v} {k}" for k, v in s.dropped.items())
        us = Column(unit="µs", format=",.1f")
        return Table.from_records(
            rows,
            ["device", "stream", "events", "kept", "busy_us", "kept_us", "left_out"],
            title="GPU time per stream: in the file, kept",
            index=("device", "stream"),
            spec={"busy_us": us, "kept_us": us},
        )


def account(device: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray, fate: np.ndarray) -> GpuTime:
    """`GpuTime` of GPU activities (ns intervals per (device, stream)) and each one's fate
    (`KEPT` or a key of `REASONS`)."""
    if not device.size:
        return GpuTime()
    pairs = np.stack([np.asarray(device, np.int64), np.asarray(stream, np.int64)], axis=1)
    keys, inv = np.unique(pairs, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    cut = np.flatnonzero(np.diff(inv[order])) + 1
    out = []
    for (d, s), idx in zip(keys.tolist(), np.split(order, cut)):
        kept = idx[fate[idx] == KEPT]
        reasons, counts = np.unique(fate[idx][fate[idx] != KEPT], return_counts=True)
        out.append(
            StreamTime(
                device=int(d),
                stream=int(s),
                events=int(idx.size),
                kept=int(kept.size),
                busy_us=length(union(start[idx], end[idx])) / 1000,
                kept_us=length(union(start[kept], end[kept])) / 1000,
                dropped={REASONS[int(r)]: int(c) for r, c in zip(reasons.tolist(), counts.tolist())},
            )
        )
    return GpuTime(out)
