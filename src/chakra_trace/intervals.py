"""Busy time from intervals: unions, their length and overlap (per rank, per resource)."""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Disjoint sorted intervals covering the given ones: shape (k, 2)."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if not starts.size:
        return np.zeros((0, 2), np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]  # an interval that starts after everything before it ended
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, s.size - 1]
    return np.stack([s[first], reach[last]], axis=1)


def length(iv: np.ndarray) -> int:
    return int((iv[:, 1] - iv[:, 0]).sum()) if iv.size else 0


def overlap(a: np.ndarray, b: np.ndarray) -> int:
    """Total time two unions share."""
    if not a.size or not b.size:
        return 0
    pts = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    delta = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.full(len(b), 2), np.full(len(b), -2)])
    order = np.lexsort((delta, pts))  # at equal times, ends before starts
    pts, depth = pts[order], np.cumsum(delta[order])
    both = depth[:-1] == 3  # inside one interval of each
    return int((np.diff(pts)[both]).sum())


def busy(start: np.ndarray, end: np.ndarray, compute: np.ndarray, comm: np.ndarray) -> dict[str, int]:
    """Compute, communication, their overlap, exposed communication, other busy time (neither
    compute nor communication: host work while the accelerator waits, memory nodes) and idle
    time of one rank's nodes (masks say which rows are compute and which communication).
    compute + comm - overlap + other + idle = finish - start."""
    ran = end >= start
    cu = union(start[ran & compute], end[ran & compute])
    mu = union(start[ran & comm], end[ran & comm])
    allu = union(start[ran], end[ran])
    lo = int(start[ran].min()) if ran.any() else 0
    hi = int(end[ran].max()) if ran.any() else 0
    both = overlap(cu, mu)
    return {
        "start": lo,
        "finish": hi,
        "compute": length(cu),
        "comm": length(mu),
        "overlap": both,
        "exposed": length(mu) - both,
        "other": length(allu) - (length(cu) + length(mu) - both),
        "idle": hi - lo - length(allu),
        "compute_sum": int((end[ran & compute] - start[ran & compute]).sum()),
    }


def transfer_split(
    start: np.ndarray, end: np.ndarray, ready: np.ndarray, compute: np.ndarray, comm: np.ndarray
) -> dict[str, int]:
    """Communication time of one rank split into transfer and waiting for peers. ``ready``: per
    row, when the last peer of a communication row arrived (a collective's last member to
    issue it, a receive's sender; -1 or before the start: none to wait for); a row waits from
    its start to then and transfers after. Transfer is the union of the transfer parts; waiting
    is communication time with no transfer going on, so transfer + waiting = comm and exposed
    transfer + exposed waiting = exposed comm (`busy`)."""
    ran = (end >= start) & comm
    s, e = start[ran], end[ran]
    a = np.clip(np.maximum(ready[ran], s), s, e)
    tu = union(a, e)
    cu = union(start[(end >= start) & compute], end[(end >= start) & compute])
    mu = union(s, e)
    t = length(tu)
    exposed_t = t - overlap(tu, cu)
    comm_t = length(mu)
    exposed = comm_t - overlap(mu, cu)
    return {
        "transfer": t,
        "peer_wait": comm_t - t,
        "exposed_transfer": exposed_t,
        "exposed_peer_wait": exposed - exposed_t,
    }
