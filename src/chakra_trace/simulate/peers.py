"""Absent peers: one rank's trace of a bigger job, its missing ranks taken as symmetric copies.

What is usually published of a multi-rank job is one rank's trace: its collectives name process
groups of ranks the file does not hold. Those ranks are taken as symmetric copies of a rank
present (SPMD: every rank runs the same program), and the simulator simulates only the ranks
present -- each absent rank is put in the class of the rank it copies (`Simulator._classes`), so
a collective is costed over its whole group on the network, every absent member issuing it when
the rank it copies does (or, not a member, with the last member present). Chosen over
materializing renumbered copies as NPUs of their own: a copy
of rank 0 renumbered as rank 1 would issue rank 0's collectives on groups rank 1 is not a member
of (a data-parallel group [0, 2, 4, 6]), and one rank's trace cannot say which groups its peers
are in; costing through classes needs no such guess, costs nothing per absent rank, and is
exact for a symmetric job on an uncontended network. A receive from an absent rank has no sender
(one rank's trace cannot say when its peers send): the run reports it as blocked, naming it.
"""

from __future__ import annotations

from ..errors import ChakraError
from ..schema.groups import ALL_RANKS_GROUPS, declared_groups
from ..schema.trace import Trace
from .symmetry import used_groups

#: The most NPUs a job's groups may name: beyond, a group file or pg_config is likely hostile
MAX_JOB_NPUS = 1 << 20


def named_ranks(traces: dict[int, Trace], groups: dict[str, list[int]]) -> set[int]:
    """Ranks the groups used by the traces' collectives and sends name (the all-ranks groups
    only when a group file or pg_config lists their members)."""
    used: set[str] = set()
    for t in {id(t): t for t in traces.values()}.values():
        used |= used_groups(t)
    out: set[int] = set()
    for g in used:
        if g in groups and (g not in ALL_RANKS_GROUPS or groups[g]):
            out.update(int(m) for m in groups[g])
    return out


def job_npus(traces: dict[int, Trace], groups: dict[str, list[int]]) -> int:
    """NPUs of the whole job: its ranks and every rank its groups name (0..max)."""
    ranks = set(traces) | named_ranks(traces, groups)
    top = max(ranks) + 1 if ranks else 1
    if top > MAX_JOB_NPUS or min(ranks, default=0) < 0:
        bad = max(ranks) if top > MAX_JOB_NPUS else min(ranks)
        raise ChakraError(f"a communicator group names rank {bad}: not a rank of a job (0..{MAX_JOB_NPUS - 1})")
    return top


def symmetric_peers(traces: dict[int, Trace], npus: int) -> dict[int, int]:
    """{absent NPU: the rank present it copies} for every NPU 0..npus-1 without a trace: the
    k-th rank present copied by NPUs k, k + P, k + 2P, ... (P ranks present), so one rank stands
    for all and consecutive ranks of a block stay distinct."""
    present = sorted(r for r in traces if 0 <= r < npus)
    if not present or len(present) == npus:
        return {}
    have = set(present)
    return {m: present[m % len(present)] for m in range(npus) if m not in have}


def describe(peers: dict[int, int]) -> str:
    """The assumption, one line: which ranks were absent and whom they copy."""
    if not peers:
        return ""
    by_source: dict[int, list[int]] = {}
    for m, s in sorted(peers.items()):
        by_source.setdefault(s, []).append(m)
    parts = [f"ranks {_span(ms)} as copies of rank {s}" for s, ms in by_source.items()]
    shown = "; ".join(parts[:4]) + (f"; ... ({len(parts)} ranks present)" if len(parts) > 4 else "")
    return (
        f"assumed symmetric: the job's groups name {len(peers):,} rank(s) it has no trace of, taken as "
        f"copies of the ranks present ({shown}), each issuing every collective when the rank it copies does"
    )


def _span(xs: list[int]) -> str:
    if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)):
        return f"{xs[0]}..{xs[-1]}"
    return ", ".join(map(str, xs[:6])) + (f", ... ({len(xs)})" if len(xs) > 6 else "")


def job_groups(workload, comm_groups: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
    """The groups a run uses: declared by the traces (pg_config), then the workload's (its group
    file), then those given."""
    groups = declared_groups(workload.traces.values())
    groups.update(workload.groups or {})
    groups.update(comm_groups or {})
    return groups
