"""Which operations of different ranks meet: the one pairing rule of sends and receives.

A point-to-point message pairs as MPI and NCCL pair them: the k-th send from rank `src` to
rank `dst` with a tag meets the k-th receive on `dst` from `src` with that tag, k counted in
each rank's own order (trace order for a recording, issue order for a simulation). The size is
not part of the key: a pair that disagrees on it is an error to report (`validate`), not two
messages that never meet. Collectives meet by instance: the k-th collective of a process group
on each member rank (`schema.groups.rows_by_group`). The critical path, validation and the
timeline export all pair by these rules. The simulator pairs at run time, in issue order, and
as ASTRA-sim does also by size: on a trace that validates (sizes agree) the pairs are the same.
"""

from __future__ import annotations

import numpy as np

from ..schema.enums import Attr, NodeType
from ..schema.trace import Trace


def pair_p2p(
    src: np.ndarray, dst: np.ndarray, tag: np.ndarray, seq: np.ndarray, recv: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the matched (send, receive) pairs among point-to-point operations given as
    parallel arrays: each one's source and destination rank, tag, order on its own rank
    (``seq``) and whether it is a receive. Unmatched operations appear in neither array."""
    src, dst, tag, seq = (np.asarray(a, np.int64) for a in (src, dst, tag, seq))
    recv = np.asarray(recv, bool)
    n = src.size
    none = np.zeros(0, np.int64)
    if not n:
        return none, none
    keys = (recv, src, dst, tag)
    o = np.lexsort((seq, tag, dst, src, recv))
    new = np.zeros(n, bool)
    new[0] = True
    for a in keys:
        new[1:] |= a[o][1:] != a[o][:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    k = np.empty(n, np.int64)
    k[o] = np.arange(n) - first  # the k-th of its (kind, src, dst, tag) in its rank's order
    o = np.lexsort((recv, k, tag, dst, src))
    same = np.ones(n - 1, bool)
    for a in (src, dst, tag, k):
        same &= a[o][1:] == a[o][:-1]
    pair = same & ~recv[o][:-1] & recv[o][1:]
    return o[:-1][pair], o[1:][pair]


def p2p_rows(t: Trace, rank: int) -> dict[str, np.ndarray]:
    """The point-to-point nodes of one rank's trace as the columns `pair_p2p` takes (``row``:
    the node's row; a tag it lacks is 0)."""
    send = t.types == NodeType.COMM_SEND_NODE
    rows = np.flatnonzero(send | (t.types == NodeType.COMM_RECV_NODE))
    is_recv = ~send[rows]
    peer = np.where(is_recv, t.comm_src[rows], t.comm_dst[rows]).astype(np.int64)
    me = np.full(rows.size, rank, np.int64)
    return {
        "row": rows,
        "recv": is_recv,
        "src": np.where(is_recv, peer, me),
        "dst": np.where(is_recv, me, peer),
        "tag": np.where(t.has(Attr.COMM_TAG)[rows], t.comm_tag[rows], 0).astype(np.int64),
    }


__all__ = ["pair_p2p", "p2p_rows"]
