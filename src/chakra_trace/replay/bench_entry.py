"""One benchmark of a report (`bench_report.py`): its measurement, every file of it merged as runs,
and what the files said around it; the statistics, the division, the timed region and the energy the
report shows for it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .measure import Measurement, json_number
from .units import unit_of

__all__ = ["BenchEntry"]


@dataclass
class BenchEntry:
    """One benchmark of the report: the measurement (every file of the same benchmark merged, each file's
    runs kept as runs) and what the files said around it (a replay result's source, ranks, device...)."""

    label: str
    role: str  # "result" or "baseline"
    measurement: Measurement
    files: list[str]
    context: dict = field(default_factory=dict)  # replay result fields, when the files were replay results
    family: str = ""  # the label without the scale: entries of one family at several scales form a scaling
    scale: float | None = None  # ranks (or extra["size"])
    scale_kind: str = ""  # "ranks" or "size"

    def stats(self) -> dict:
        m = self.measurement
        a = np.asarray(m.samples, dtype=np.float64)
        q1, q3 = (float(x) for x in np.percentile(a, [25, 75])) if m.n else (math.nan, math.nan)
        out = m.outliers
        runs = m.split_runs()
        return {
            **m.stats(),
            "q1": json_number(q1),
            "q3": json_number(q3),
            "iqr": json_number(q3 - q1),
            "outlier_values": [float(a[i]) for i in out],
            "run_medians": [json_number(r.median) for r in runs] if len(runs) > 1 else [],
        }

    def energy(self) -> dict | None:
        """`Measurement.energy_stats` (J per sample: median with its 95% CI, mean) and the average
        power (total J / total timed s); ``{"absent": why}`` when the meter could not read; None
        when no energy was asked for (never a zero)."""
        m = self.measurement
        st = m.energy_stats()
        if st is None or "absent" in st:
            return st
        seconds = float(np.sum(m.samples))
        power = float(m.energy.sum()) / seconds if m.energy is not None and seconds > 0 else None
        return {**st, "power_w": json_number(power) if power is not None else None}

    def division(self) -> tuple[str, str]:
        """("closed" | "open" | "unknown", why): closed runs the recorded job as is, open transforms it."""
        x = self.measurement.extra
        if x.get("division") in ("closed", "open"):
            return str(x["division"]), str(x.get("division_note") or "as the measurement records")
        c = self.context
        if not c:
            return "unknown", "not a replay result: what ran is not recorded"
        changed = []
        if "selected by" in str(c.get("recorded_basis", "")):
            changed.append("a subgraph (--select)")
        left = sum(int(v.get("not_replayed", 0)) for v in (c.get("coverage") or {}).values())
        if left:
            changed.append(f"{left} recorded op(s) not replayed")
        if c.get("warnings"):
            changed.append(f"{len(c['warnings'])} change(s) to replay: " + "; ".join(map(str, c["warnings"])))
        if changed:
            return "open", "transformed: " + ", ".join(changed)
        return "closed", (
            "every recorded op replayed as recorded (a --config substitute/delay is not recorded in the result)"
        )

    def timed_region(self) -> str:
        """What is inside the timed region, from what the measurement and its result record."""
        m, c = self.measurement, self.context
        parts = []
        if c.get("mode") == "ops":
            parts.append(
                "the replayed operator calls of one pass over the recorded steps (tensors built and ops tried before)"
            )
        elif c.get("mode") in ("duration", "flops"):
            parts.append(f"calibrated kernels ({c['mode']}) and real collectives of one pass")
        parts.append(f"reported as {unit_of(m)}")
        steps = m.extra.get("steps") or c.get("steps")
        if steps:
            parts.append(f"recorded steps {steps}")
        if m.extra.get("aggregate"):
            parts.append(str(m.extra["aggregate"]))
        if any(g.get("emulated") for g in (c.get("host_gaps") or {}).values()):
            parts.append("with the recorded host time the ops lack (busy waits)")
        if m.env.get("timer"):
            parts.append(f"clock: {m.env['timer']}")
        if m.note:
            parts.append(f"note: {m.note}")
        return "; ".join(parts) if parts else "not recorded (the measurement's extra says nothing about it)"

    def to_dict(self) -> dict:
        div, why = self.division()
        return {
            "label": self.label,
            "role": self.role,
            "name": self.measurement.name,
            "files": self.files,
            "scale": self.scale,
            "scale_kind": self.scale_kind,
            "stats": self.stats(),
            "warmup": self.measurement.warmup,
            "stop_reason": self.measurement.stop_reason,
            "note": self.measurement.note,
            "division": div,
            "division_note": why,
            "unit": str(unit_of(self.measurement)),
            "timed_region": self.timed_region(),
            "energy": self.energy(),
            "env": self.measurement.env,
            "extra": {k: v for k, v in self.measurement.extra.items() if k != "energy_j"},
            "samples": [float(x) for x in self.measurement.samples],
            "runs": list(self.measurement.runs),
            "context": self.context,
        }
