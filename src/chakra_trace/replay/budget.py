"""The wall time a replay rank may take (`--budget-s`), as the deadlines every stage checks.

The budget counts from when a rank starts preparing its replay (trying each op once), so the
warm-up, the host-time calibration and the timed passes all spend it. Past `soft` (the budget)
no new warm-up pass, calibration or timed pass starts once the measurement has its minimum;
past `hard` (the budget and a grace of a quarter of it, 5 to 30 s) a pass runs only its
collectives (its peers wait for them), preparing stops with an error, and the measurement keeps
what it has. What one op takes alone cannot be cut: the slowest op is reported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import ChakraError


@dataclass
class Budget:
    seconds: float
    start: float = field(default_factory=time.perf_counter)

    @property
    def grace(self) -> float:
        return min(max(0.25 * self.seconds, 5.0), 30.0)

    @property
    def soft(self) -> float:
        return self.start + self.seconds

    @property
    def hard(self) -> float:
        return self.soft + self.grace

    def left(self) -> float:
        """Seconds until `soft` (negative past it)."""
        return self.soft - time.perf_counter()


class BudgetSpent(ChakraError):
    """Preparing a replay, or its first timed pass, did not fit in its time budget."""


def slowest_text(slowest: tuple[float, str, int] | None) -> str:
    """ ", the slowest op, NAME (node N), took S s alone" (empty without one)."""
    if not slowest:
        return ""
    s, name, node = slowest
    return f"; the slowest op, {name} (node {node}), took {s:.3g} s alone"
