"""What a collective's algorithm asks of the network, and how those requests are answered at once.

An algorithm runs as a generator: it yields ``(SEND, src, dst, nbytes, t_send)`` and gets the
arrival time of each message back, or ``(REPEAT, src, dst, nbytes, t, inc, n)`` (n more copies
of a step just sent, every `inc` ns from `t`, each costing its uncontended time) and gets back
how many were added in closed form. `drive` answers them immediately (the congestion-unaware
model, whose costs do not depend on the order); `inflight.Stepper` answers them on the event
loop, in simulated-time order across everything in flight (the congestion-aware model).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

SEND, REPEAT = "send", "repeat"

#: An algorithm (or one of its steps) as it runs: yields requests, returns member times.
Steps = Generator[tuple, Any, Any]


def drive(gen: Steps, fabric) -> Any:
    """Run an algorithm to its end, each request answered as it comes; its return value."""
    reply = None
    try:
        while True:
            req = gen.send(reply)
            if req[0] == SEND:
                reply = fabric.send(*req[1:])
            else:  # every repeat in closed form: nothing else is in flight while it runs
                _, src, dst, nbytes, t, inc, n = req
                fabric.repeat_at(src, dst, nbytes, t, inc, n)
                reply = n
    except StopIteration as stop:
        return stop.value
