"""The event loop: pop the earliest event, run its callback. Everything else composes on top.

Events at the same time run in the order they were scheduled, so a run is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ..errors import ChakraError
from .config.values import MAX_NS

TICK_EVENTS = 1 << 15  # events between progress ticks (a few ms of simulation)


class Engine:
    def __init__(self) -> None:
        self.now = 0
        self._queue: list[tuple[int, int, Callable, tuple]] = []
        self._seq = 0
        self.events = 0
        self._late: list[tuple[int, int, Callable, tuple]] | None = None  # `late` events being run
        self._real_now = 0

    def at(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """Run callback(*args) at `time`. A time before now is a bug in the caller (time would
        run backwards), so it raises rather than being moved to now."""
        t = int(time)
        if t >= MAX_NS:
            raise ChakraError(f"simulated time reaches {t:,} ns, past the clock's 2^62 ns (146 years)")
        if self._late is not None and t < self._real_now:  # (scheduled by a late event: late too)
            heapq.heappush(self._late, (t, self._seq, callback, args))
            self._seq += 1
            return
        if t < self.now:
            raise ValueError(f"event at {t} ns is in the past: the simulation is at {self.now} ns")
        heapq.heappush(self._queue, (t, self._seq, callback, args))
        self._seq += 1

    def late(self, time: int, callback: Callable[..., Any], *args: Any) -> None:
        """Run callback(*args) as at `time`, which may be before now: a congestion-aware
        collective's end on a member is known only once its last step is priced, possibly after
        that member finished. The callback and whatever it schedules before now run at once, each
        with `now` set to its own time (an NPU's own work before now, in time order), then time
        is back to now."""
        t = int(time)
        if t >= self.now and self._late is None:
            self.at(t, callback, *args)
            return
        if self._late is not None:  # (within a late event: queued with the others)
            self.at(t, callback, *args)
            return
        self._late, self._real_now = [], self.now
        heapq.heappush(self._late, (t, self._seq, callback, args))
        self._seq += 1
        try:
            while self._late:
                self.now, _, cb, a = heapq.heappop(self._late)
                self.events += 1
                cb(*a)
        finally:
            self.now, self._late = self._real_now, None

    def after(self, delay: int, callback: Callable[..., Any], *args: Any) -> None:
        self.at(self.now + int(delay), callback, *args)

    def next_time(self) -> int | None:
        """When the next waiting event is due (None: none waits)."""
        return self._queue[0][0] if self._queue else None

    def more_now(self) -> bool:
        """Whether another event is waiting at the current time."""
        return bool(self._queue) and self._queue[0][0] == self.now

    def settled(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run callback(*args) at the current time once nothing else is left to run at it
        (what gathers the requests of one instant: they are all in by then)."""

        def when_settled() -> None:
            if self.more_now():
                self.at(self.now, when_settled)
            else:
                callback(*args)

        self.at(self.now, when_settled)

    def run(self, tick: Callable[[], Any] | None = None, every: int = TICK_EVENTS) -> int:
        """Run until no event is left; returns the time of the last one. `tick()`: called every
        `every` events (a progress display; the loop without it is the one that runs without)."""
        queue, pop = self._queue, heapq.heappop
        if tick is None:
            while queue:
                self.now, _, callback, args = pop(queue)
                self.events += 1
                callback(*args)
            return self.now
        while queue:
            self.now, _, callback, args = pop(queue)
            self.events += 1
            callback(*args)
            if not self.events % every:
                tick()
        return self.now
