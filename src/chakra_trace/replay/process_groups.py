"""The torch.distributed process groups a trace's communicators map to.

A communicator's members come from an explicit comm-group file, else the traces' pg_config, else
"" / "0" meaning every rank, else the ranks that use it; groups spanning every rank are the default
group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..schema.enums import Attr, NodeType
from ..schema.groups import declared_groups

__all__ = ["build_process_groups", "resolve_groups"]

_ALL_RANKS_GROUPS = ("", "0")


def _declared_groups(trace) -> dict[str, list[int]]:
    try:
        return declared_groups([trace])
    except Exception:  # noqa: BLE001 - a malformed pg_config: infer from use instead
        return {}


def _used_groups(trace) -> list[str]:
    comm = (
        (trace.types == NodeType.COMM_COLL_NODE)
        | (trace.types == NodeType.COMM_SEND_NODE)
        | (trace.types == NodeType.COMM_RECV_NODE)
    )
    has = trace.has(Attr.PG_NAME) & comm
    names = {trace.groups[c] for c in np.unique(trace.pg_name[has]).tolist()} if has.any() else set()
    if (comm & ~has).any():
        names.add("")
    return sorted(names)


def resolve_groups(
    used: dict[int, list[str]],
    declared: dict[int, dict[str, list[int]]],
    world_size: int,
    comm_groups: dict[str, list[int]] | None = None,
) -> dict[str, list[int]]:
    """Members of every communicator some rank uses (`used`: rank -> names): an explicit comm-group file
    first, then the traces' pg_config (`declared`), then "" / "0" = everyone, then the ranks that use it."""
    comm_groups = {str(k): list(v) for k, v in (comm_groups or {}).items()}
    merged: dict[str, list[int]] = {}
    for r in sorted(declared):
        for k, v in declared[r].items():
            merged.setdefault(k, sorted(v))
    users: dict[str, set[int]] = {}
    for r, names in used.items():
        for g in names:
            users.setdefault(g, set()).add(r)
    out = {}
    for g in sorted(users):
        if g in comm_groups:
            out[g] = comm_groups[g]
        elif g in merged:
            out[g] = merged[g]
        elif g in _ALL_RANKS_GROUPS:
            out[g] = list(range(world_size))
        else:
            out[g] = sorted(users[g])
    return out


def build_process_groups(trace, *, comm_groups: dict[str, list[int]] | None = None) -> dict[str, tuple[Any, list[int]]]:
    """{pg_name: (process group or None for the default one, member ranks)} for the groups any rank uses.

    Collective: every rank of the job calls it (names and pg_config are exchanged, then `dist.new_group`
    runs on every rank for every group, sorted by name). Groups spanning every rank use the default group.
    """
    import torch.distributed as dist

    world = dist.get_world_size()
    mine = (_used_groups(trace), _declared_groups(trace))
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    members = resolve_groups(
        {r: e[0] for r, e in enumerate(everyone)}, {r: e[1] for r, e in enumerate(everyone)}, world, comm_groups
    )
    out: dict[str, tuple[Any, list[int]]] = {}
    made: dict[tuple[int, ...], Any] = {}
    for g in sorted(members):
        ranks = members[g]
        bad = [r for r in ranks if not 0 <= r < world]
        if bad:
            out[g] = (False, ranks)  # reported per node
            continue
        key = tuple(sorted(set(ranks)))
        if not key or key == tuple(range(world)):
            out[g] = (None, ranks or list(range(world)))
            continue
        if key not in made:
            made[key] = dist.new_group(list(key))
        out[g] = (made[key], ranks)
    return out
