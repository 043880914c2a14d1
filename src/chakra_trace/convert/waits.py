"""Where the training thread sat blocked in a collective: a dependency on it, not host work.

A synchronous collective on gloo (``dist.all_reduce(t)``, DDP's wait for its last buckets) is
queued by a c10d op that returns at once; the backend op runs on a worker thread (or its own
lane) and the calling thread blocks in ``work.wait()``, which the profiler does not record. The
thread's record then shows nothing from the c10d op's return until the collective ended: a gap
that, taken as `[host]` time, would cost the same on every system, so a faster network (even
`ideal`) could not shorten it and the waiting rank's time would look like host work.

Here such a gap is read as a wait: the thread issued the collective, recorded no other op until
the collective ended, and the collective ended inside the gap. Its part up to the collective's
end is waiting (a dependency on the collective node, counted in `WaitTime`); only the time after
the end is a `[host]` node, and that node depends on the collective. An op before the gap that
started after the issue (the thread went on working) means the work was asynchronous there, and
nothing changes. Every edge still goes from a node that ended to one that started later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Waits:
    """The waits of one thread's gaps (positions in the timeline of events)."""

    busy_from: np.ndarray  # per event: where its `[host]` gap starts (its predecessor's end, or the wait's end)
    tail_from: int  # where the tail gap starts (ns)
    waiter: np.ndarray  # per edge: event that waited (-1: the tail gap)
    on: np.ndarray  # per edge: event position of the collective it waited for
    count: int  # collectives waited for
    waited_ns: int  # time taken out of the gaps as waiting


def collective_waits(
    s: np.ndarray,
    e: np.ndarray,
    prev: np.ndarray,
    prev_end: np.ndarray,
    main_ev: np.ndarray,
    tail_end: int,
    issue: np.ndarray,
    done: np.ndarray,
    pos: np.ndarray,
) -> Waits:
    """`Waits` of the main thread (events `main_ev`, by start; the window ends at `tail_end`) for
    collectives it issued at `issue` that ended at `done` (ns), their events at `pos`.

    A collective is waited for when the main-thread gap holding its end (the gap before the
    first event that starts at or after it, or the tail) follows an op that started at or
    before the issue and ended at or after it (the issuing op, or the op it was folded into)."""
    busy_from = prev_end.copy()
    tail_from = int(e[main_ev[-1]]) if main_ev.size else tail_end
    waiter: list[int] = []
    on: list[int] = []
    if not main_ev.size or not issue.size:
        return Waits(busy_from, tail_from, np.zeros(0, np.int64), np.zeros(0, np.int64), 0, 0)
    ms = s[main_ev]
    j = np.searchsorted(ms, done, "left")  # the first main-thread event starting at or after the end
    for a, t, p, jj in zip(issue.tolist(), done.tolist(), pos.tolist(), j.tolist()):
        if jj < main_ev.size:
            k = int(main_ev[jj])
            before, gap_start, gap_end = int(prev[k]), int(prev_end[k]), int(s[k])
        else:  # the tail: from the last event to the window's end
            k, before = -1, int(main_ev[-1])
            gap_start, gap_end = int(e[before]), tail_end
        if before < 0 or not (gap_start < t <= gap_end):
            continue  # the thread was busy when it ended
        if not (s[before] <= a <= gap_start):
            continue  # the thread ran another op after the issue: it did not block on it
        if k >= 0:
            busy_from[k] = max(busy_from[k], t)
        else:
            tail_from = max(tail_from, t)
        waiter.append(k)
        on.append(p)
    waited = int((busy_from - prev_end).sum()) + tail_from - int(e[main_ev[-1]])  # (a gap counts once)
    return Waits(busy_from, tail_from, np.array(waiter, np.int64), np.array(on, np.int64), len(waiter), waited)
