"""Communicator groups as traces name them: which rows are a group's collectives, which groups a
trace declares, and who the members of a group are when no group file says so."""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import numpy as np

from ..errors import ChakraError
from .enums import Attr, NodeType

if TYPE_CHECKING:
    from .trace import Trace

ALL_RANKS_GROUPS = ("", "0")  # pg_name values that mean "every rank"


def _typed(t: Trace) -> np.ndarray:
    return (t.types == NodeType.COMM_COLL_NODE) & t.has(Attr.COMM_TYPE)


def _seq_key(t: Trace, rows: np.ndarray) -> np.ndarray:
    """The issue-order key of `rows`: `comm_seq` where recorded, else last (then trace order)."""
    seq, has = t.attr_column(Attr.COMM_SEQ, np.int64)
    return np.where(has[rows], seq[rows], np.iinfo(np.int64).max)


def group_rows(t: Trace, group: str) -> np.ndarray:
    """Rows of the typed collectives a rank issues on a group ("" = unnamed), in issue order:
    by `comm_seq` where the trace has it, else in trace order. (A loop over groups reads
    `rows_by_group`: this costs a pass over the trace.)"""
    typed = _typed(t)
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
    return rows[np.lexsort((rows, _seq_key(t, rows)))]


def rows_by_group(t: Trace) -> dict[str, np.ndarray]:
    """Every group's `group_rows` at once, from one sort: what a loop over groups reads (a pass
    per group costs groups x nodes: a trace whose 100,000 collectives each name their own
    group took minutes). Groups without a typed collective are absent."""
    rows = np.flatnonzero(_typed(t))
    # each row's group as `group_rows` finds it (t.groups.index: a name's first code); -1: the
    # unnamed group; -2: none (a code past the table, or a later copy of a name)
    first: dict[str, int] = {}
    firsts = [first.setdefault(g, i) for i, g in enumerate(t.groups)]
    canon = np.asarray(
        [-2 if c != i else -1 if g == "" else i for i, (c, g) in enumerate(zip(firsts, t.groups))], np.int64
    )
    named = t.has(Attr.PG_NAME)[rows]
    pg = t.pg_name[rows].astype(np.int64)
    known = (pg >= 0) & (pg < canon.size)
    code = np.full(rows.size, -2, np.int64)
    code[known] = canon[pg[known]]
    code[~named] = -1
    keep = code > -2
    rows, code = rows[keep], code[keep]
    if rows.size == 0:
        return {}
    order = np.lexsort((rows, _seq_key(t, rows), code))
    rows, code = rows[order], code[order]
    cuts = np.flatnonzero(np.diff(code)) + 1
    starts = np.concatenate(([0], cuts)).tolist()
    return {("" if c < 0 else t.groups[c]): part for c, part in zip(code[starts].tolist(), np.split(rows, cuts))}


def rows_by_group_per_rank(traces: dict[int, Trace]) -> dict[int, dict[str, np.ndarray]]:
    """`rows_by_group` of every rank (sorted), computed once per trace object (one trace may run
    on many ranks)."""
    made: dict[int, dict[str, np.ndarray]] = {}
    out = {}
    for rank in sorted(traces):
        t = traces[rank]
        if id(t) not in made:
            made[id(t)] = rows_by_group(t)
        out[rank] = made[id(t)]
    return out


def collective_instances(traces: dict[int, Trace], groups: Iterable[str]) -> dict[tuple[str, int], dict[int, int]]:
    """(group, index) -> {rank: row}: the k-th collective each rank issues on a group
    (`group_rows`) is one instance across the ranks."""
    wanted = list(dict.fromkeys(groups))
    per_rank = rows_by_group_per_rank(traces)
    out: dict[tuple[str, int], dict[int, int]] = {}
    for g in wanted:
        for rank, by_group in per_rank.items():
            rows = by_group.get(g)
            for k, row in enumerate(() if rows is None else rows.tolist()):
                out.setdefault((g, k), {})[rank] = row
    return out


def uses_group(t: Trace, pg_name: str) -> bool:
    """Whether any node of the trace names the group."""
    return pg_name in t.groups and bool(np.any(t.has(Attr.PG_NAME) & (t.pg_name == t.groups.index(pg_name))))


def group_users(traces: dict[int, Trace]) -> dict[str, list[int]]:
    """Group name -> the ranks (in `traces` order) whose nodes name it: `uses_group` for every
    group at once."""
    out: dict[str, list[int]] = {}
    names: dict[int, set[str]] = {}  # (one trace may run on many ranks)
    for rank, t in traces.items():
        if id(t) not in names:
            codes = np.unique(t.pg_name[t.has(Attr.PG_NAME)]).tolist()
            names[id(t)] = {t.groups[c] for c in codes if 0 <= c < len(t.groups)}
        for g in names[id(t)]:
            out.setdefault(g, []).append(rank)
    return out


def named_groups(t: Trace) -> set[str]:
    """Groups a trace's nodes name, with "" when a collective names none."""
    coll = t.has(Attr.PG_NAME)
    names = {t.groups[c] for c in np.unique(t.pg_name[coll])}
    if (~coll & (t.types == NodeType.COMM_COLL_NODE)).any():
        names.add("")
    return names


def pg_entries(t: Trace) -> Iterable[tuple[str, list[int] | None]]:
    """The process groups a trace's METADATA nodes declare (the PyTorch converter's `pg_config`):
    (name, sorted ranks), ranks None where the entry lists none (the all-ranks group). Hostile
    text, and entries whose ranks are not integers, declare nothing."""
    return iter(_pg_entries(t))


def _pg_entries(t: Trace) -> list[tuple[str, list[int] | None]]:
    """`pg_entries` as a list, parsed once while the trace's nodes stay the same (every rank of a
    parallelized job declares the same groups: parsed once for all that share a program)."""
    return t.cached("pg_entries", ("types", "extra", "extra_indptr"), lambda: list(_parse_pg_entries(t)))


def _parse_pg_entries(t: Trace) -> Iterable[tuple[str, list[int] | None]]:
    for r in np.flatnonzero(t.types == NodeType.METADATA_NODE).tolist():
        raw = t.attr(r, "pg_config")
        if not raw:
            continue
        try:
            cfg = json.loads(raw)
        except (TypeError, ValueError, RecursionError):  # hostile text: no groups from it
            continue
        for g in cfg if isinstance(cfg, list) else cfg.values() if isinstance(cfg, dict) else []:
            if not isinstance(g, dict) or "pg_name" not in g:
                continue
            ranks = g.get("ranks")
            if ranks is None or ranks == []:
                yield str(g["pg_name"]), None
            elif isinstance(ranks, list) and all(isinstance(x, int) for x in ranks):
                yield str(g["pg_name"]), sorted(ranks)


def declared_groups(traces: Iterable[Trace]) -> dict[str, list[int]]:
    """Process groups declared by METADATA nodes (the PyTorch converter's `pg_config`) that list
    their ranks."""
    out: dict[str, list[int]] = {}
    seen: set[int] = set()
    for t in {id(t): t for t in traces}.values():  # (one trace may run on many ranks)
        entries = _pg_entries(t)
        if id(entries) in seen:  # (traces sharing a program declare the same groups)
            continue
        seen.add(id(entries))
        for name, ranks in entries:
            if ranks is not None:
                out.setdefault(name, list(ranks))
    return out


def _declared_by_rank(t: Trace, rank: int) -> dict[str, list[int] | None]:
    """Groups a rank's own `pg_config` says it is in: name -> ranks (None: every rank)."""
    return {name: ranks for name, ranks in pg_entries(t) if ranks is None or rank in ranks}


MATCH_BUDGET = 1 << 25  # member checks `resolve_unnamed_groups` may make (hostile pg_configs: more is refused)


class _Matching:
    """The state of `resolve_unnamed_groups`: each rank's next unnamed collective, and the
    declared member sets that could take it. Groups of one member set behave alike (the first
    declared wins every tie), so each set is one candidate; a set is looked at again only when
    one of its ranks moved on (a loop over every group per collective was groups x collectives:
    a pg_config of many groups of the ranks read took minutes)."""

    def __init__(self, traces, queues, sets, timed: bool, tolerance_ns: int, budget: int):
        self.traces, self.queues, self.timed, self.tolerance_ns = traces, queues, timed, tolerance_ns
        self.sets = sets  # [(name, members)] in declaration order, one per member set
        self.frozen = [frozenset(m) for _, m in sets]
        self.by_rank: dict[int, list[int]] = {}
        for i, (_, members) in enumerate(sets):
            for r in members:
                self.by_rank.setdefault(r, []).append(i)
        self.head = {r: 0 for r in queues}
        self.origin = {r: t.time_origin_ns or 0 for r, t in traces.items()}
        self.sig: dict[int, tuple | None] = {r: self._sig(r) for r in queues}
        self.budget = budget
        self.work = 0

    def _sig(self, r: int) -> tuple | None:
        """(type, size, start ns, end ns) of rank r's next unnamed collective (None: none left)."""
        if self.head[r] >= len(self.queues[r]):
            return None
        t, row = self.traces[r], self.queues[r][self.head[r]]
        s = int(t.start[row]) * 1000 + self.origin[r]
        return int(t.comm_type[row]), int(t.comm_size[row]), s, s + int(t.duration[row]) * 1000

    def evaluate(self, i: int) -> tuple | None:
        """(not met, when the last ended, declaration order) of set i when all its members have a
        collective of one type and size next, else None."""
        members = self.sets[i][1]
        self.work += len(members)
        if self.work > self.budget:
            raise _OverBudget
        sigs = [self.sig[r] for r in members]
        if any(x is None for x in sigs):
            return None
        spans = cast("list[tuple]", sigs)
        if any(x[:2] != spans[0][:2] for x in spans):
            return None
        if not self.timed:
            return (False, 0, i)
        met = max(x[2] for x in spans) <= min(x[3] for x in spans) + self.tolerance_ns
        return (not met, max(x[3] for x in spans), i)

    def best(self, first: int, key: tuple) -> int:
        """The largest candidate set that holds set `first` and met as it did (the earliest
        declared among equals): an all-ranks collective also looks like one of each subgroup."""
        best = first
        near = self.by_rank[self.sets[first][1][0]]  # (a superset holds first's first member)
        self.work += len(near)
        for j in near:
            st = self.cands.get(j)
            if st is None or st[0] != key[0] or j == best:
                continue
            nj, nb = len(self.sets[j][1]), len(self.sets[best][1])
            if (nj > nb or (nj == nb and j < best)) and self.frozen[first] <= self.frozen[j]:
                best = j
        return best

    def run(self):
        """Yield (name, members, rows) of each collective matched, in order."""
        self.cands: dict[int, tuple] = {}
        heap = []
        for i in range(len(self.sets)):
            st = self.evaluate(i)
            if st is not None:
                self.cands[i] = st
                heap.append((st, i))
        heapq.heapify(heap)
        while True:
            while heap and self.cands.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)  # (stale: the set changed since)
            if not heap:
                return
            st, first = heap[0]
            name, members = self.sets[self.best(first, st)]
            yield name, members, {r: self.queues[r][self.head[r]] for r in members}
            moved: set[int] = set()
            for r in members:
                self.head[r] += 1
                self.sig[r] = self._sig(r)
                moved.update(self.by_rank[r])
            for j in moved:
                st = self.evaluate(j)
                if st is None:
                    self.cands.pop(j, None)
                elif self.cands.get(j) != st:
                    self.cands[j] = st
                    heapq.heappush(heap, (st, j))


class _OverBudget(Exception):
    pass


def resolve_unnamed_groups(
    traces: dict[int, Trace], tolerance_ns: int = 50_000, *, paths: dict | None = None, budget: int = MATCH_BUDGET
) -> list[str]:
    """Name the communicator of collectives recorded without one, where a rank is in several
    groups: CPU gloo collectives carry no process group in PyTorch traces, and reading them all
    as the all-ranks group pairs one data-parallel group's all-reduce with another's.

    Collectives are matched across ranks as they must have run: repeatedly, the group whose
    members all have a collective of the same type and size next in issue order, and whose
    recorded intervals overlap (no member ends before the last one starts: they met); the
    largest such group wins (an all-ranks collective also looks like one in each subgroup),
    and among groups, the one that finished first goes first. Without recorded times, the
    largest group whose next collectives agree. Sets `pg_name` in place; returns what it did
    (or could not do), one line each. Work is linear in the collectives times the member sets
    of the ranks that move; past `budget` member checks (a hostile pg_config of very many
    member sets) a ChakraError names the files (`paths`: rank -> file)."""
    declared = {r: _declared_by_rank(t, r) for r, t in traces.items()}
    if not any(len(d) > 1 for d in declared.values()):
        return []
    world = sorted(traces)
    queues: dict[int, list[int]] = {}
    for r, t in traces.items():
        rows = group_rows(t, "")
        if rows.size:
            queues[r] = rows.tolist()
    if not queues:
        return []
    timed = all(traces[r].timed for r in queues)
    groups: dict[str, list[int]] = {}
    for d in declared.values():
        for name, ranks in d.items():
            groups.setdefault(name, world if ranks is None else sorted(set(ranks)))
    sets: dict[tuple[int, ...], str] = {}  # member set -> the first group declared with it
    for name, members in groups.items():
        if all(r in queues and name in declared[r] for r in members):
            sets.setdefault(tuple(members), name)
    matching = _Matching(traces, queues, [(n, list(m)) for m, n in sets.items()], timed, tolerance_ns, budget)
    resolved: dict[str, int] = {}
    try:
        for name, members, rows in matching.run():
            if name in ALL_RANKS_GROUPS:  # (an all-ranks collective stays unnamed, as recorded)
                continue
            for r in members:
                traces[r].set_attr(Attr.PG_NAME, name, [rows[r]])
            resolved[name] = resolved.get(name, 0) + 1
    except _OverBudget:
        files = (
            ", ".join(str(paths[r]) for r in sorted(paths)[:3]) + (", ..." if len(paths) > 3 else "") if paths else ""
        )
        raise ChakraError(
            f"{files or f'ranks {world[0]}-{world[-1]}'}: collectives recorded without a process group, matched to "
            f"{len(sets):,} declared member sets ({len(groups):,} groups), need more than {budget:,} checks"
        ) from None
    head = matching.head
    notes = [
        f"collectives recorded without a process group matched across ranks to group {name!r} "
        f"({', '.join(map(str, groups[name]))}): {n}"
        for name, n in sorted(resolved.items())
    ]
    left = {r: len(q) - head[r] for r, q in queues.items() if head[r] < len(q)}
    if left:
        notes.append(
            "collectives recorded without a process group that no group's members agree on were left "
            f"unnamed (the all-ranks group): {', '.join(f'rank {r}: {n}' for r, n in sorted(left.items()))}"
        )
    return notes
