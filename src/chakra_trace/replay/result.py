"""What a replay measured, whichever replayer ran it (operators or calibrated kernels)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..io.et import atomic_output
from ..table import Table, Tabular
from .measure import Measurement
from .units import PER_STEP


class ReplayWarning(UserWarning):
    """Something the replay changed or could not do that the user should know (e.g. a repaired trace)."""


@dataclass
class ReplayResult(Tabular):
    """A job's replay: per-rank measurements, the step time (per sample, the slowest rank),
    what was replayed (``coverage`` per rank: total, replayed, not_replayed, share, reasons,
    examples), the calibration of schema-less replays, next to the trace's own recorded time."""

    source: str
    world_size: int
    mode: str  # "ops" (operators), "duration" or "flops" (calibrated kernels)
    device: str
    backend: str
    step: Any  # Measurement: seconds per recorded step
    per_rank: dict[int, Any] = field(default_factory=dict)  # rank -> Measurement
    coverage: dict[int, dict] = field(default_factory=dict)
    calibration: dict[int, dict] = field(default_factory=dict)
    recorded_us: dict[int, float] = field(default_factory=dict)
    recorded_basis: str = "span"
    warnings: list[str] = field(default_factory=list)  # what was changed to replay (also warned)
    host_gaps: dict[int, dict] = field(default_factory=dict)  # rank -> host time the ops lack, emulated

    @property
    def recorded_step_us(self) -> float:
        """The recorded step: the longest rank's recorded time."""
        return max(self.recorded_us.values()) if self.recorded_us else 0.0

    @property
    def ratio(self) -> float:
        """Replayed median step / recorded step (1.0: the replay reproduces the trace's time)."""
        rec = self.recorded_step_us
        return self.step.median * 1e6 / rec if rec > 0 else math.nan

    @property
    def fully_replayed(self) -> bool:
        return all(c["not_replayed"] == 0 for c in self.coverage.values())

    @classmethod
    def from_ranks(cls, mode: str, source: str, device: str, backend: str, outs: list[dict]) -> ReplayResult:
        """From the per-rank outputs of an operator replay (`job.rank_main`)."""

        per_rank = {}
        for r, o in enumerate(outs):
            m = Measurement.from_dict(o["measurement"])
            m.samples = [s / o["steps_per_run"] for s in m.samples]  # per recorded step
            if m.energy is not None:
                m.extra["energy_j"] = (m.energy / o["steps_per_run"]).tolist()
            m.extra.update(unit=PER_STEP, steps_per_sample=1, steps=o["steps"])
            per_rank[r] = m
        recorded = {r: float(np.mean(o["recorded_step_s"])) * 1e6 for r, o in enumerate(outs) if o["recorded_step_s"]}
        return cls(
            source=source,
            world_size=len(outs),
            mode=mode,
            device=device,
            backend=backend,
            step=step_measurement(per_rank),
            per_rank=per_rank,
            coverage={r: o["coverage"] for r, o in enumerate(outs)},
            recorded_us=recorded,
            recorded_basis=outs[0].get("recorded_basis", "Kineto profiler steps (profiling overhead included)"),
            host_gaps={r: o["host_gaps"] for r, o in enumerate(outs) if "host_gaps" in o},
        )

    def to_dict(self) -> dict:
        ratio = self.ratio
        return {
            "source": self.source,
            "world_size": self.world_size,
            "mode": self.mode,
            "device": self.device,
            "backend": self.backend,
            "step": self.step.to_dict(),
            "per_rank": {str(r): m.to_dict() for r, m in sorted(self.per_rank.items())},
            "coverage": {str(r): c for r, c in sorted(self.coverage.items())},
            "calibration": {str(r): c for r, c in sorted(self.calibration.items())},
            "recorded_us": {str(r): v for r, v in sorted(self.recorded_us.items())},
            "recorded_basis": self.recorded_basis,
            "recorded_step_us": self.recorded_step_us,
            "ratio": ratio if math.isfinite(ratio) else None,
            "fully_replayed": self.fully_replayed,
            "warnings": list(self.warnings),
            "host_gaps": {str(r): g for r, g in sorted(self.host_gaps.items())},
        }

    def save(self, path: str | os.PathLike) -> None:
        """JSON, written atomically (gzip when the name ends in .gz). `chakra bench compare`
        reads its ``step`` measurement."""

        with atomic_output(path) as f:
            f.write(json.dumps(self.to_dict(), indent=1, allow_nan=False).encode())

    def to_table(self) -> Table:
        """One row per rank: its median / mean step, recorded time and coverage."""
        rows = []
        for r, m in sorted(self.per_rank.items()):
            c = self.coverage.get(r, {})
            rows.append(
                {
                    "rank": r,
                    "median_s": m.median,
                    "mean_s": m.mean,
                    "n": m.n,
                    "recorded_us": self.recorded_us.get(r),
                    "replayed": c.get("replayed"),
                    "not_replayed": c.get("not_replayed"),
                }
            )
        return Table.from_records(rows, title="replay per rank")

    def summary(self) -> str:
        out = f"step {self.step.summary()}"
        if self.recorded_step_us:
            out += f"; recorded {self.recorded_step_us / 1e3:.3f} ms ({self.recorded_basis}), ratio {self.ratio:.3f}"
        return out


def step_measurement(per_rank: dict[int, Any]):
    """The job's step: per sample, the slowest rank (ranks run their samples in lockstep)."""

    ms = [per_rank[r] for r in sorted(per_rank)]
    n = min(m.n for m in ms)
    samples = np.max(np.array([m.samples[:n] for m in ms], dtype=np.float64), axis=0).tolist() if n else []
    first = ms[0]
    return Measurement(
        name="step",
        samples=samples,
        warmup=first.warmup,
        stop_reason=first.stop_reason,
        env=dict(first.env),
        extra={"aggregate": "per-sample max over ranks", "ranks": len(ms), **_unit(ms), **step_energy(ms, n)},
        note=first.note,
    )


def _unit(ms: list) -> dict:
    """The ranks' unit (`units`: per recorded step, or per recording of K steps) when they agree."""
    keys = ("unit", "steps_per_sample")
    got = {tuple(m.extra.get(k) for k in keys) for m in ms}
    return {k: v for k, v in zip(keys, next(iter(got))) if v is not None} if len(got) == 1 else {}


def step_energy(ms: list, n: int) -> dict:
    """The step's energy per sample: the sum over the ranks that measured some (each reads its
    own counters: RAPL on rank 0, its GPU by NVML; `energy.rank_meter`), or why there is none."""
    with_e = [m for m in ms if m.energy is not None and m.energy.size >= n]
    if not with_e or not n:
        why = "; ".join(dict.fromkeys(str(m.extra["energy_absent"]) for m in ms if m.extra.get("energy_absent")))
        return {"energy_absent": why} if why else {}
    return {
        "energy_j": np.sum([m.energy[:n] for m in with_e], axis=0).tolist(),
        "energy_source": "+".join(str(m.extra.get("energy_source")) for m in with_e),
    }


def merge_runs(results: list[ReplayResult]) -> ReplayResult:
    """Several replays of one source, each a run (fresh processes), as one result: the step and every
    rank's measurement hold all the runs' samples with the run of each (`Measurement.runs`), so
    `chakra bench compare` treats them as separate runs. Coverage, calibration and the recorded time
    are the first run's (every run replays the same trace)."""
    if not results:
        raise ValueError("merge_runs: no results")
    first = results[0]
    per_rank = {r: Measurement.merge_runs([res.per_rank[r] for res in results]) for r in first.per_rank}
    step = Measurement.merge_runs([res.step for res in results])
    step.extra = {**step.extra, "runs": len(results)}  # (the first run's, energy of every run)
    return replace(
        first,
        step=step,
        per_rank=per_rank,
        warnings=list(dict.fromkeys(w for res in results for w in res.warnings)),
    )


def repeat_runs(
    replay: Callable[[], ReplayResult], runs: int, *, on_run: Callable[[int], Any] | None = None
) -> ReplayResult:
    """Call `replay()` `runs` times (each call starts fresh processes: a run) and merge the results
    (`merge_runs`). `on_run(i)` is called after run i (progress)."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    out = []
    for i in range(runs):
        out.append(replay())
        if on_run is not None:
            on_run(i)
    return out[0] if runs == 1 else merge_runs(out)
