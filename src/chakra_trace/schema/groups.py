"""Communicator groups as traces name them: which rows are a group's collectives, which groups a
trace declares, and who the members of a group are when no group file says so."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .enums import Attr, NodeType

if TYPE_CHECKING:
    from .trace import Trace

ALL_RANKS_GROUPS = ("", "0")  # pg_name values that mean "every rank"


def group_rows(t: Trace, group: str) -> np.ndarray:
    """Rows of the typed collectives a rank issues on a group ("" = unnamed), in issue order:
    by `comm_seq` where the trace has it, else in trace order."""
    typed = (t.types == NodeType.COMM_COLL_NODE) & t.has(Attr.COMM_TYPE)
    has_pg = t.has(Attr.PG_NAME)
    if group == "":
        m = typed & ~has_pg
        if "" in t.groups:
            m |= typed & has_pg & (t.pg_name == t.groups.index(""))
    elif group in t.groups:
        m = typed & has_pg & (t.pg_name == t.groups.index(group))
    else:
        m = np.zeros(len(t), bool)
    rows = np.flatnonzero(m)
    seq, has = t.attr_array(Attr.COMM_SEQ, np.int64)
    if has[rows].any():
        rows = rows[np.lexsort((rows, np.where(has[rows], seq[rows], np.iinfo(np.int64).max)))]
    return rows


def uses_group(t: Trace, pg_name: str) -> bool:
    """Whether any node of the trace names the group."""
    return pg_name in t.groups and bool(np.any(t.has(Attr.PG_NAME) & (t.pg_name == t.groups.index(pg_name))))


def named_groups(t: Trace) -> set[str]:
    """Groups a trace's nodes name, with "" when a collective names none."""
    coll = t.has(Attr.PG_NAME)
    names = {t.groups[c] for c in np.unique(t.pg_name[coll])}
    if (~coll & (t.types == NodeType.COMM_COLL_NODE)).any():
        names.add("")
    return names


def declared_groups(traces: Iterable[Trace]) -> dict[str, list[int]]:
    """Process groups declared by METADATA nodes (the PyTorch converter's `pg_config`)."""
    out: dict[str, list[int]] = {}
    for t in traces:
        meta = np.flatnonzero(t.types == NodeType.METADATA_NODE)
        for r in meta.tolist():
            raw = t.attr(r, "pg_config")
            if not raw:
                continue
            try:
                cfg = json.loads(raw)
            except (TypeError, ValueError):
                continue
            for g in cfg if isinstance(cfg, list) else cfg.values() if isinstance(cfg, dict) else []:
                if isinstance(g, dict) and "pg_name" in g and isinstance(g.get("ranks"), list):
                    if all(isinstance(x, int) for x in g["ranks"]) and g["ranks"]:
                        out.setdefault(str(g["pg_name"]), sorted(g["ranks"]))
    return out
