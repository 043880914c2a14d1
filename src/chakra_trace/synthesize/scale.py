"""A recorded job on more NPUs than it ran on: data-parallel scale-out.

Every replica of a data-parallel job runs the same program, so NPU n runs recorded rank
n mod R, and a group that spans every recorded rank spans every NPU. The traces are shared
objects, not copies, so a 2-rank recording on 16,384 NPUs costs no more memory than on 2 --
except where ranks send and receive: replica k's rank r talks to replica k's peer (NPU
k*R + peer), so each replica gets its own comm_src/comm_dst columns (every other column is
shared).
"""

from __future__ import annotations

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.enums import Attr, NodeType
from ..schema.groups import ALL_RANKS_GROUPS, declared_groups
from ..schema.trace import Trace


def data_parallel(workload: Workload, npus: int) -> Workload:
    """`workload` scaled out to `npus` data-parallel replicas. Raises ChakraError when a
    communicator spans only some recorded ranks (a model- or pipeline-parallel group has no
    single data-parallel reading) or `npus` is not a multiple of the recorded ranks."""
    ranks = workload.ranks
    if ranks != list(range(len(ranks))):
        raise ChakraError(f"data_parallel: ranks must be 0..{len(ranks) - 1}, got {ranks}")
    if npus < len(ranks) or npus % len(ranks):
        raise ChakraError(f"data_parallel: {npus} NPUs is not a multiple of the {len(ranks)} recorded ranks")
    declared = workload.all_groups()  # named in the traces (members inferred) ...
    declared.update(declared_groups(workload.traces.values()))  # ... or declared by the recording
    declared.update(workload.groups)
    groups = {}
    for g, members in declared.items():
        if g in ALL_RANKS_GROUPS or not members or sorted(members) == ranks:
            groups[g] = list(range(npus))
        else:
            raise ChakraError(
                f"data_parallel: communicator {g!r} spans ranks {members} of {ranks}; only groups "
                "over every rank scale out as data parallelism"
            )
    R = len(ranks)
    for r in ranks:
        _check_peers(workload.traces[r], r, R)
    traces = {}
    for n in range(npus):
        t = workload.traces[n % R]
        traces[n] = with_peers(t, n - n % R) if n >= R and _p2p_rows(t).any() else t
    return Workload(traces, groups)


def _p2p_rows(t: Trace) -> np.ndarray:
    return (t.types == NodeType.COMM_SEND_NODE) | (t.types == NodeType.COMM_RECV_NODE)


def _check_peers(t: Trace, rank: int, R: int) -> None:
    """Peers must be recorded ranks: one outside would land on another replica's NPU."""
    p2p = _p2p_rows(t)
    for attr in (Attr.COMM_SRC, Attr.COMM_DST):
        m = p2p & t.has(attr)
        peer = getattr(t, attr)[m].astype(np.int64)
        bad = (peer < 0) | (peer >= R)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ChakraError(
                f"data_parallel: rank {rank} node {int(t.ids[m][i])} has {attr} {int(peer[i])}, "
                f"not one of the {R} recorded ranks; it cannot be replicated"
            )


def with_peers(t: Trace, base: int, stride: int = 1, groups: list[str] | None = None) -> Trace:
    """`t` with each send/receive peer p made base + stride * p (and its communicator names
    `groups`, when given); every other column shared with `t`."""
    p2p = _p2p_rows(t)
    cols = {k: getattr(t, k) for k in Trace.ARRAYS}
    for attr in (Attr.COMM_SRC, Attr.COMM_DST):
        col = getattr(t, attr)
        m = p2p & t.has(attr)
        cols[attr] = np.where(m, base + stride * col.astype(np.int64), col).astype(col.dtype)
    names = t.groups if groups is None else groups
    out = Trace(len(t), metadata=t.metadata, names=t.names, groups=names, placed=t.placed, **cols)
    out.share_derived(t)  # (what is derived from the shared columns is computed once for every rank)
    return out
