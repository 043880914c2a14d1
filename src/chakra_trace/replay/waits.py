"""Where the original waited for its collectives, read from the Kineto trace of the same run.

A c10d call returns once the collective is queued, and the caller waits for it later: at
once (`dist.all_reduce(t)`, the default), or only when it needs the result (DDP's reducer,
at the end of the backward pass). The host trace does not say which, and the difference is
a collective's whole latency per call. The Kineto trace shows it: gloo runs each collective
as a ``gloo:<kind>`` event on a worker thread, so an op of the issuing thread that started
after that event ended ran after the wait. The replay waits for the collective before the
first such op, or before the first op that reads what it wrote, whichever comes first.

Without a Kineto trace, or for collectives it cannot place (NCCL runs them on the GPU: their
host events are the launches), only readers wait.
"""
from __future__ import annotations

import numpy as np


def _kind(name: str) -> str:
    """'c10d::_allgather_base_' and 'gloo:all_gather' -> 'allgather'."""
    for prefix in ("c10d::", "gloo:"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace("_base", "").replace("_", "")


def wait_points(h, rows: np.ndarray, kineto) -> dict[int, int]:
    """{position in `rows` of a c10d collective: position of the first later op of its thread
    that started after the collective finished}, for the collectives whose gloo work the
    Kineto trace shows. `rows`: the replayed host rows in replay order."""
    from ..convert.link import link

    lk = link(h.ids, h.rf_id, h.name_array.astype(object), kineto)
    names = [str(n) for n in h.name_array[rows]]
    coll = [i for i, n in enumerate(names) if n.startswith("c10d::")]
    if not coll:
        return {}
    k = kineto
    knames = np.asarray(k.names, dtype=object)[k.name]
    is_work = np.array([str(n).startswith("gloo:") for n in knames]) & (k.ph == ord("X"))
    work = np.flatnonzero(is_work)
    work = work[np.argsort(k.ts[work], kind="stable")]
    free = {kind: [int(w) for w in work if _kind(str(knames[w])) == kind] for kind in {_kind(names[i]) for i in coll}}
    threads = k.thread_keys()
    ev = lk.event[rows]
    start = np.where(ev >= 0, lk.start[rows], -1)
    thread = np.where(ev >= 0, threads[np.maximum(ev, 0)], -1)
    out = {}
    for i in sorted(coll, key=lambda i: start[i]):
        if ev[i] < 0:
            continue
        queue = free.get(_kind(names[i]), [])
        j = next((j for j, w in enumerate(queue) if k.ts[w] >= start[i]), None)  # its work starts after the call
        if j is None:
            continue
        w = queue.pop(j)
        done = int(k.ts[w] + max(int(k.dur[w]), 0))
        later = np.flatnonzero((np.arange(len(rows)) > i) & (thread == thread[i]) & (start >= done))
        if later.size:
            out[i] = int(later[0])
    return out
