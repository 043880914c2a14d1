"""The host time of the original that no recorded op holds, for the replay to spend again.

Between two top-level ops the original's main thread ran Python (DTensor's sharding
propagation, FSDP's hooks, the training loop): no op records it, so a replay of the ops alone
skips it. The PyTorch converter already makes exactly this time explicit, as its `[host]` nodes
(`convert.pytorch`: main-thread time inside the profiler steps between the end of one node and
the start of the next, from the Kineto trace). This module takes those nodes from the
conversion of the same pair of files and gives each replayed op the `[host]` time that ended
right before it (summed when several did, as when the node in between replays no op).

Time the thread spent blocked on a collective is not host time: the replay waits for that
collective itself (`waits.py`). A gap that a collective waited for before the op ends inside
is counted only from the collective's end. The gaps are measured under the profiler, so they
hold its per-op overhead too; the runtime subtracts its own per-op overhead from each gap
(`_standalone.run`: an op starts no earlier than the gap after the previous one ended).
"""

from __future__ import annotations

import numpy as np

from ..convert.pytorch import convert_pytorch
from ..schema.resources import HOST_GAP


def host_gaps(et_path, kineto_path, base_ns: int, starts: np.ndarray, awaited_done: np.ndarray) -> np.ndarray:
    """Seconds of recorded host time before each replayed op (0 where none).

    ``base_ns``: the Kineto trace's base time (`KinetoTrace.base_time_ns`). ``starts``: each replayed op's recorded start (ns, Kineto clock; -1 unlinked), in replay
    order. ``awaited_done``: per op, when the latest collective the replay waits for right
    before it ended (ns, Kineto clock; -1 none). A gap goes to the first linked op that starts
    at or after its end; the tail gap after the last op goes nowhere."""
    starts = np.asarray(starts, np.int64)
    out = np.zeros(starts.size, np.float64)
    linked = np.flatnonzero(starts >= 0)
    if not linked.size:
        return out
    trace, _report = convert_pytorch(et_path, kineto_path)
    origin = trace.time_origin_ns
    if origin is None:  # not timed: no gaps to know
        return out
    gap = np.flatnonzero(trace.name_array == HOST_GAP)
    g0 = origin - base_ns + trace.start[gap].astype(np.int64) * 1000  # ns, Kineto clock
    g1 = g0 + trace.duration[gap].astype(np.int64) * 1000
    order = linked[np.argsort(starts[linked], kind="stable")]
    s = starts[order]
    # (µs rounding of the nodes: an op counts as after a gap ending within 1 µs of its start)
    k = np.searchsorted(s, g1 - 1000, "left")
    ok = k < s.size
    op = order[k[ok]]
    lo = np.maximum(g0[ok], np.minimum(np.asarray(awaited_done, np.int64)[op], g1[ok]))
    np.add.at(out, op, np.maximum(g1[ok] - lo, 0) / 1e9)
    return out
