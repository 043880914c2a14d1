"""The collectives of a sampled job agree across the ranks of each communicator, and a sample
that still fails validation is refused, not returned.

Ranks that recorded slightly different programs (rank 0 logs the loss, one rank's broadcast is
named differently) are fitted as separate grammars, and at another layer count each grammar's
count rules may repeat its blocks differently: rank 0 issuing 9 all-reduces where rank 1
issues 7, or the k-th collective of one an all-gather where the other's is a reduce-scatter.
Such a job would hang on a real machine and the simulator refuses it. So the collectives of
a communicator are sampled once, by its first member: a member whose own program would issue
other collectives on it (count, types or sizes) runs that member's sampled structure (its ops,
dependencies and collectives; its own durations and communicator names), where the program
can move (it has no sends or receives, whose peers are ranks of its own, and names its
communicators in the same order). Ranks whose programs agree keep their own.

`refuse_invalid` then runs the cross-rank validation (`validate.validate_workload`) on every
sample, and raises a one-line ChakraError naming the failed check.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import ChakraError
from ...io.workload import Workload
from ...schema.enums import CollectiveType, NodeType
from ...schema.groups import ALL_RANKS_GROUPS, rows_by_group
from ...schema.trace import Trace
from ...validate import validate_workload
from .model import Job

VARIES = -2  # the size of an all-to-all: it may differ per rank by design (as validation reads it)


def sequences(t: Trace) -> dict[str, np.ndarray]:
    """Per communicator a rank issues on, its collectives in issue order as (type, size) rows."""
    out = {}
    for g, rows in rows_by_group(t).items():
        ct = t.comm_type[rows].astype(np.int64)
        size = np.where(ct == CollectiveType.ALL_TO_ALL, VARIES, t.comm_size[rows].astype(np.int64))
        out[g] = np.stack([ct, size], axis=1)
    return out


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    a = np.zeros((0, 2), np.int64) if a is None else a
    b = np.zeros((0, 2), np.int64) if b is None else b
    return a.shape == b.shape and bool((a == b).all())


def _members(job: Job, names: set[str]) -> dict[str, list[int]]:
    """Each communicator's ranks: every rank for the all-ranks names, else those that name it."""
    out = {}
    for g in sorted(names):
        if g in ALL_RANKS_GROUPS:
            out[g] = list(range(job.ranks))
        else:
            out[g] = sorted(set(job.groups.get(g, [])) | {r for r in range(job.ranks) if g in job.rank_roles[r]})
    return out


def movable(t: Trace) -> bool:
    """Whether a program's structure may run on another rank: it sends and receives nothing (a
    send's peer is a rank of the program's own)."""
    return not bool(np.isin(t.types, (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)).any())


def shared_programs(job: Job, rank_trace: Callable[[int, int], Trace]) -> list[int]:
    """Per rank, the program it runs in the sample (module docstring). `rank_trace(k, r)`: rank
    r running program k, durations aside."""
    use = list(job.rank_program)
    cache: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def seqs(r: int) -> dict[str, np.ndarray]:
        key = (use[r], r)
        if key not in cache:
            cache[key] = sequences(rank_trace(*key))
        return cache[key]

    for _ in range(job.ranks):  # a move can change a rank's other communicators: until none moves
        names = {g for r in range(job.ranks) for g in seqs(r)}
        moved = False
        for g, members in _members(job, names).items():
            ref = members[0]
            for r in members[1:]:
                if use[r] == use[ref] or _same(seqs(r).get(g), seqs(ref).get(g)):
                    continue
                if not movable(rank_trace(use[ref], ref)) or len(job.rank_roles[r]) != len(job.rank_roles[ref]):
                    continue
                if g not in ALL_RANKS_GROUPS and job.rank_roles[r].index(g) != job.rank_roles[ref].index(g):
                    continue
                use[r] = use[ref]
                moved = True
        if not moved:
            break
    return use


def refuse_invalid(w: Workload, what: str) -> None:
    """Raise a one-line ChakraError naming the first failed check when `w` does not validate
    across ranks (`validate_workload`); warnings pass."""
    rep = validate_workload(w)
    if rep.ok:
        return
    e = rep.errors[0]
    where = "" if e.rank is None else f"rank {e.rank}: "
    more = f" (and {len(rep.errors) - 1} more failed check(s))" if len(rep.errors) > 1 else ""
    raise ChakraError(f"{what} fails validation, check {e.code}: {where}{e.message}{more}")
