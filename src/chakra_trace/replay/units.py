"""What one sample of a measurement is, and turning two measurements into one unit.

A replay of a recording of N profiler steps times either each recorded step (operator replay:
seconds per step) or one pass over the whole recording (calibrated kernels: seconds per
recording of N steps); `measure()` of a callable times whatever it does (seconds per sample).
A measurement says which in ``extra["unit"]`` (one of `UNITS`) and, per recording, how many
steps one sample holds (``extra["steps_per_sample"]``). `comparable` puts two sides in one unit
(per step, when every recording's step count is known) or refuses with one line naming both
units, so `chakra bench compare` and `chakra bench report` never set a step against a recording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ChakraError

if TYPE_CHECKING:  # (measure reads a replay result's unit from here)
    from .measure import Measurement

__all__ = ["PER_RECORDING", "PER_SAMPLE", "PER_STEP", "UNITS", "Unit", "comparable", "unit_of"]

PER_STEP = "seconds per recorded step"
PER_RECORDING = "seconds per recording"
PER_SAMPLE = "seconds per sample"
UNITS = (PER_STEP, PER_RECORDING, PER_SAMPLE)


@dataclass(frozen=True)
class Unit:
    """A measurement's unit: `UNITS` entry and, per recording, its steps (None: unknown)."""

    unit: str
    steps: int | None = None

    def __str__(self) -> str:
        if self.unit != PER_RECORDING:
            return self.unit
        return f"{PER_RECORDING} of {self.steps} steps" if self.steps else f"{PER_RECORDING} (steps unknown)"


def _count(x) -> int | None:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 1 and x == int(x) else None


def unit_of(m: Measurement) -> Unit:
    """What one sample of `m` is (``extra["unit"]``; none said: per sample)."""
    u = m.extra.get("unit")
    if u == PER_RECORDING:
        return Unit(PER_RECORDING, _count(m.extra.get("steps_per_sample")))
    return Unit(u if u in UNITS else PER_SAMPLE)


def replay_unit(obj: dict) -> dict:
    """The unit of a replay result's step (``extra`` entries) from what the result says, for
    files written before measurements carried it: an operator replay ("ops") reports per
    recorded step; a calibrated-kernel one ("duration", "flops") one pass over the recording,
    whose steps its ``recorded_basis`` gives ("span of K steps")."""
    mode = obj.get("mode")
    if mode == "ops":
        return {"unit": PER_STEP, "steps_per_sample": 1}
    if mode in ("duration", "flops"):
        k = re.search(r"span of (\d+) steps", str(obj.get("recorded_basis") or ""))
        return {"unit": PER_RECORDING, **({"steps_per_sample": int(k.group(1))} if k else {})}
    return {}


def _per_step(m: Measurement, steps: int) -> Measurement:
    """`m` (per recording of `steps` steps) in seconds per step: samples and energy divided."""
    extra = {**m.extra, "unit": PER_STEP, "steps_per_sample": 1}
    e = m.energy
    if e is not None:
        extra["energy_j"] = (e / steps).tolist()
    return replace(m, samples=(np.asarray(m.samples, np.float64) / steps).tolist(), extra=extra)


def comparable(
    a: list[Measurement], b: list[Measurement], *, names: tuple[str, str] = ("A", "B")
) -> tuple[list[Measurement], list[Measurement], str, str]:
    """Both sides in one unit: (A, B, the unit, what was converted or ""). Equal units stay as
    they are; recordings of known step counts and per-step measurements become per step; any
    other pair is refused (ChakraError, one line naming both units)."""
    ua = {unit_of(m) for m in a}
    ub = {unit_of(m) for m in b}
    for side, us in zip(names, (ua, ub)):
        if len(us) > 1:
            raise ChakraError(f"{side}'s measurements have different units ({', '.join(sorted(map(str, us)))})")
    (x,), (y,) = ua, ub
    if x == y:
        return a, b, str(x), ""
    timed = {PER_STEP, PER_RECORDING}
    if x.unit in timed and y.unit in timed and all(u.unit == PER_STEP or u.steps for u in (x, y)):
        notes = [f"{side}: {u} divided by {u.steps}" for side, u in zip(names, (x, y)) if u.unit == PER_RECORDING]
        conv = [
            [_per_step(m, u.steps) for m in ms] if u.unit == PER_RECORDING and u.steps else ms
            for ms, u in ((a, x), (b, y))
        ]
        return conv[0], conv[1], PER_STEP, "; ".join(notes)
    raise ChakraError(
        f"{names[0]} is {x}, {names[1]} is {y}: different units, and the steps per recording are not known "
        "to turn both into seconds per step"
    )
