"""The event loop: pop the earliest event, run its callback. Everything else composes on top.

Events at the same time run in the order they were scheduled, so a run is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ..errors import ChakraError
from .config.values import MAX_NS


class Engine:
    def __init__(self) -> None:
        self.now = 0
        self._queue: list[tuple[int, int, Callable, tuple]] = []
        self._seq = 0
        self.events = 0

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """Run callback(*args) at `time`. A time before now is a bug in the caller (time would
        run backwards), so it raises rather than being moved to now."""
        t = int(time)
        if t >= MAX_NS:
            raise ChakraError(f"simulated time reaches {t:,} ns, past the clock's 2^62 ns (146 years)")
        if t < self.now:
            raise ValueError(f"event at {t} ns is in the past: the simulation is at {self.now} ns")
        heapq.heappush(self._queue, (t, self._seq, callback, args))
        self._seq += 1

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> None:
        self.at(self.now + int(delay), callback, *args)

    def more_now(self) -> bool:
        """Whether another event is waiting at the current time (one that wants to run after
        everything else at this instant reschedules itself while this holds)."""
        return bool(self._queue) and self._queue[0][0] == self.now

    def run(self) -> int:
        """Run until no event is left; returns the time of the last one."""
        queue, pop = self._queue, heapq.heappop
        while queue:
            self.now, _, callback, args = pop(queue)
            self.events += 1
            callback(*args)
        return self.now
