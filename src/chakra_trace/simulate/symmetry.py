"""Replicas: NPUs whose traces, peers, groups and places repeat with a period.

A data-parallel job of R replicas (TP x PP x DP, each replica a block of NPUs) runs the same
schedule in every replica on a congestion-unaware network when turning the network's top
dimension by one replica's width maps it onto itself (a Ring, Switch or FullyConnected
dimension turned by c positions) and maps every trace onto the next replica's: the same
nodes, durations and dependencies, peers shifted by the period, groups onto the next
replica's groups (or onto themselves, the data-parallel groups that span the replicas). Then
the first period of NPUs stands for all (`Simulator._replica_classes`); the simulator still
checks, as each collective ends, that it ended at one time on every NPU of a class.
"""

from __future__ import annotations

import math

import numpy as np

from ..schema.enums import Attr, NodeType
from ..schema.groups import ALL_RANKS_GROUPS
from ..schema.trace import Trace

#: The columns a replica's trace must share with the one a period before it: all of a trace's
#: columns but its peers and groups, which are mapped (`_repeats`).
_MAPPED = ("comm_src", "comm_dst", "pg_name")
_SAME = tuple(c for c in Trace.ARRAYS if c not in _MAPPED)
_P2P = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


def used_groups(t) -> set[str]:
    """Names of the groups a trace's collectives and sends/receives name."""
    rows = np.flatnonzero(np.isin(t.types, (NodeType.COMM_COLL_NODE, *_P2P)) & t.has(Attr.PG_NAME))
    return {t.groups[int(c)] for c in np.unique(t.pg_name[rows]).tolist()}


def replica_period(traces: dict, groups: dict[str, list[int]], network) -> int | None:
    """The smallest period P < n of NPUs (a multiple of the lower dimensions' NPUs, dividing the
    top dimension's) with which the job repeats, its first P NPUs sending only among
    themselves; None when there is none."""
    n = network.npus
    sizes = [d.npus for d in network.dims]
    low, top = math.prod(sizes[:-1]), sizes[-1]
    for c in range(1, top):
        if top % c == 0 and _repeats(traces, groups, n, low * c):
            return low * c
    return None


def turn_within(n: int, width: int, c: int) -> np.ndarray:
    """The NPU permutation that turns every block of `width` consecutive NPUs by c positions."""
    r = np.arange(n, dtype=np.int64)
    return r - r % width + (r % width + c) % width


def lowest_turn(traces: dict, groups: dict[str, list[int]], network, reps: int) -> int | None:
    """The smallest turn c < w of the lowest dimension's w positions (c dividing w) that maps the
    job onto itself: every NPU's trace onto that of the NPU c positions further in its block of
    w (tensor-parallel ranks of one stage run one program on their own groups and peers), the
    NPUs that stand for the others (the first c of each block among the first `reps`) sending
    only among themselves. The lowest dimension is a Ring, Switch or FullyConnected: turning it
    in every block at once maps the network onto itself. None when there is none."""
    n = network.npus
    w = network.dims[0].npus
    if len(network.dims) < 2 or w < 2:
        return None
    for c in range(1, w):
        if w % c:
            continue
        sigma = turn_within(n, w, c)
        stand = (np.arange(n) < reps) & (np.arange(n) % w < c)
        if _maps_onto(traces, groups, n, sigma, np.arange(n), stand):
            return c
    return None


def _members(groups: dict[str, list[int]], name: str) -> list[int] | None:
    """A group's members in order (None: every NPU)."""
    if name in ALL_RANKS_GROUPS or name not in groups:
        return None
    return list(groups[name])


def _repeats(traces: dict, groups: dict[str, list[int]], n: int, period: int) -> bool:
    sigma = (np.arange(n, dtype=np.int64) + period) % n
    return _maps_onto(traces, groups, n, sigma, np.arange(n - period), np.arange(n) < period)


def _maps_onto(
    traces: dict, groups: dict[str, list[int]], n: int, sigma: np.ndarray, ranks: np.ndarray, stand: np.ndarray
) -> bool:
    """Whether the NPU permutation `sigma` maps the trace of each NPU r of `ranks` onto that of
    sigma[r] (the same columns, peers and groups mapped by sigma), the NPUs of `stand` (those
    simulated for the others) sending and receiving only among themselves."""
    for r in np.flatnonzero(stand).tolist():
        t = traces[r]
        p2p = np.isin(t.types, _P2P)
        if p2p.any():
            peers = np.concatenate([t.comm_dst[p2p & t.has(Attr.COMM_DST)], t.comm_src[p2p & t.has(Attr.COMM_SRC)]])
            peers = peers.astype(np.int64)
            if ((peers < 0) | (peers >= n)).any() or not stand[peers].all():
                return False
    mapped: dict[tuple[str, str], bool] = {}
    codes: dict[tuple[int, int, int], list] = {}  # pairs of group codes, per pair of columns (shared by ranks)
    for x in ranks.tolist():
        t, u = traces[int(sigma[x])], traces[x]
        if len(t) != len(u) or t.names != u.names:
            return False
        if not all((a := getattr(t, c)) is (b := getattr(u, c)) or np.array_equal(a, b) for c in _SAME):
            return False
        for attr, col in ((Attr.COMM_SRC, "comm_src"), (Attr.COMM_DST, "comm_dst")):
            has = t.has(attr)
            if has.any():
                theirs = getattr(u, col)[has].astype(np.int64)
                if ((theirs < 0) | (theirs >= n)).any():
                    return False
                if not np.array_equal(getattr(t, col)[has].astype(np.int64), sigma[theirs]):
                    return False
        ckey = (id(t.pg_name), id(u.pg_name), id(t.present))
        pairs = codes.get(ckey)
        if pairs is None:
            has = t.has(Attr.PG_NAME)
            pairs = codes[ckey] = (
                np.unique(np.stack([t.pg_name[has], u.pg_name[has]]), axis=1).T.tolist() if has.any() else []
            )
        if pairs:
            for a, b in pairs:
                key = (t.groups[a], u.groups[b])
                if key not in mapped:
                    mapped[key] = _maps(groups, *key, sigma)
                if not mapped[key]:
                    return False
    return True


def _maps(groups: dict[str, list[int]], mine: str, before: str, sigma: np.ndarray) -> bool:
    """Whether group `mine` is group `before` mapped by sigma: `before`'s members mapped are
    `mine`'s in order, or (a group mapped onto itself) it is `before` and they are a rotation."""
    a, b = _members(groups, mine), _members(groups, before)
    if a is None or b is None:
        return a is None and b is None
    n = sigma.size
    if any(not 0 <= m < n for m in a + b):
        return False
    there = sigma[np.asarray(b, np.int64)].tolist()
    if there == a:
        return True
    if mine != before or len(a) != len(b) or not a or there[0] not in a:
        return False
    k = a.index(there[0])
    return there == a[k:] + a[:k]
