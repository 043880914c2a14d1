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

from ..convert.link import Link, link


def _kind(name: str) -> str:
    """'c10d::_allgather_base_' and 'gloo:all_gather' -> 'allgather'."""
    for prefix in ("c10d::", "gloo:"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace("_base", "").replace("_", "")


def link_rows(h, rows: np.ndarray, kineto) -> Link:
    """The Kineto events of the replayed host rows (`convert.link.link`: rf_id, else External id)."""
    return link(h.ids[rows], h.rf_id[rows], h.name_array[rows].astype(object), kineto)


def wait_points(h, rows: np.ndarray, kineto) -> dict[int, int]:
    """{position in `rows` of a c10d collective: position of the first later op of its thread
    that started after the collective finished}, for the collectives whose gloo work the
    Kineto trace shows. `rows`: the replayed host rows in replay order."""
    rows = np.asarray(rows, np.int64)
    names = [str(n) for n in h.name_array[rows]]
    coll = [i for i, n in enumerate(names) if n.startswith("c10d::")]
    if not coll:
        return {}
    k = kineto
    lk = link_rows(h, rows, k)
    ev = lk.event
    start = np.where(ev >= 0, lk.start, -1)
    thread = np.where(ev >= 0, k.thread_keys()[np.maximum(ev, 0)], -1)
    # gloo's work per kind, by start; each call takes the first one that starts after it
    knames = np.asarray(k.names, dtype=object)
    work: dict[str, list[int]] = {}
    for w in np.flatnonzero(k.ph == ord("X")).tolist():
        name = str(knames[k.name[w]])
        if name.startswith("gloo:"):
            work.setdefault(_kind(name), []).append(w)
    for kind in work:
        work[kind].sort(key=lambda w: k.ts[w])
    next_work = dict.fromkeys(work, 0)
    # per thread: replay positions and the running maximum of their starts (first crossing =
    # first op that started at or after a time)
    per_thread = {}
    for t in np.unique(thread[thread >= 0]).tolist():
        pos = np.flatnonzero(thread == t)
        per_thread[t] = (pos, np.maximum.accumulate(start[pos]))
    out: dict[int, int] = {}
    for i in sorted((i for i in coll if ev[i] >= 0), key=lambda i: start[i]):
        kind = _kind(names[i])
        queue, p = work.get(kind, []), next_work.get(kind, 0)
        while p < len(queue) and k.ts[queue[p]] < start[i]:
            p += 1
        if p == len(queue):
            continue
        next_work[kind] = p + 1
        done = int(k.ts[queue[p]] + max(int(k.dur[queue[p]]), 0))
        pos, starts = per_thread[int(thread[i])]
        j = max(int(np.searchsorted(pos, i, "right")), int(np.searchsorted(starts, done, "left")))
        if j < len(pos):
            out[i] = int(pos[j])
    return out
