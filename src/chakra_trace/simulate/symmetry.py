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


def _members(groups: dict[str, list[int]], name: str) -> list[int] | None:
    """A group's members in order (None: every NPU)."""
    if name in ALL_RANKS_GROUPS or name not in groups:
        return None
    return list(groups[name])


def _repeats(traces: dict, groups: dict[str, list[int]], n: int, period: int) -> bool:
    for r in range(period):  # the NPUs that stand for the others send only among themselves
        t = traces[r]
        p2p = np.isin(t.types, _P2P)
        if p2p.any():
            peers = np.concatenate([t.comm_dst[p2p & t.has(Attr.COMM_DST)], t.comm_src[p2p & t.has(Attr.COMM_SRC)]])
            if peers.size and int(peers.max()) >= period:
                return False
    mapped: dict[tuple[str, str], bool] = {}
    for r in range(period, n):
        t, u = traces[r], traces[r - period]
        if len(t) != len(u) or t.names != u.names:
            return False
        if not all(np.array_equal(getattr(t, c), getattr(u, c)) for c in _SAME):
            return False
        for attr, col in ((Attr.COMM_SRC, "comm_src"), (Attr.COMM_DST, "comm_dst")):
            has = t.has(attr)
            if has.any() and not np.array_equal(
                getattr(t, col)[has].astype(np.int64), (getattr(u, col)[has].astype(np.int64) + period) % n
            ):
                return False
        has = t.has(Attr.PG_NAME)
        if has.any():
            pairs = np.unique(np.stack([t.pg_name[has], u.pg_name[has]]), axis=1)
            for a, b in pairs.T.tolist():
                key = (t.groups[a], u.groups[b])
                if key not in mapped:
                    mapped[key] = _maps(groups, *key, n, period)
                if not mapped[key]:
                    return False
    return True


def _maps(groups: dict[str, list[int]], mine: str, before: str, n: int, period: int) -> bool:
    """Whether group `mine` is group `before` turned by the period: its members shifted back are
    `before`'s in order, or (a group spanning the replicas) it is `before` and they are a rotation."""
    a, b = _members(groups, mine), _members(groups, before)
    if a is None or b is None:
        return a is None and b is None
    back = [(m - period) % n for m in a]
    if back == b:
        return True
    if mine != before or len(a) != len(b) or not b or back[0] not in b:
        return False
    k = b.index(back[0])
    return back == b[k:] + b[:k]
