"""The workload layer: which node of each NPU's trace runs when.

A node is ready when every dependency (data, and control ones that name an existing node)
has finished. Per NPU at most one accelerator compute node, one CPU node and one
collective or send run at a time on each lane (the thread or stream the node was recorded
on), in one topological order per lane (lowest id first among equals). Under ASTRA-sim's
rules (`Rules.lanes` off) an NPU has one lane per kind and issues whichever ready node has the
lowest id. A node whose slot is busy does not hold back nodes of other slots. Receives,
metadata and memory nodes have no such limit.
"""

from __future__ import annotations

import heapq
import json
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..schema.enums import Attr, CollectiveType
from ..schema.groups import rows_by_group
from ..schema.resources import FREE, astra_kinds, node_kinds, node_slots
from .rules import Rules

UNLIMITED = 1 << 62


class Static:
    """What the scheduler needs of one trace, computed once however many NPUs run it."""

    def __init__(self, trace, durations: np.ndarray, rules: Rules, recorded_waits: bool = False):
        """`Rules.lanes`: a slot per recorded lane, run in order (`Npu.issue`); off: ASTRA-sim's
        rule (one slot per kind, the lowest ready id first)."""
        lanes = rules.lanes
        self.dur = durations
        self.kind = node_kinds(trace) if lanes else astra_kinds(trace)  # (no lanes: ASTRA-sim's rule)
        slot, slot_kind = node_slots(trace, lanes, self.kind)
        self.slot = slot
        self.limits = [UNLIMITED if k == FREE else 1 for k in slot_kind.tolist()]
        # dependencies on nodes that exist (a missing one is dropped, and counted); a node that
        # depends on itself waits for itself, forever (without `Rules.repair`: ASTRA-sim hangs there too)
        g = trace.graph()
        self.missing = g.missing
        self.waiting = g.indegree + g.self_deps
        self.child_ptr, self.children = g.succs
        self.ids = trace.ids.astype(np.int64)
        self.slack = _recorded_waits(trace, g.preds) if recorded_waits else None
        # collectives meet by their position in their group's issue order (comm_seq) when the
        # trace records one; otherwise by the order they issue in the simulation
        self.coll_index: dict[int, int] | None = None
        if trace.attr_array(Attr.COMM_SEQ, np.int64)[1].any():
            self.coll_index = {}
            for rows in rows_by_group(trace).values():
                for k, row in enumerate(rows.tolist()):
                    self.coll_index[row] = k
        # each row's group name ("" for none), read per collective as it runs
        self.pg = np.where(trace.has(Attr.PG_NAME), trace.pg_name, -1).astype(np.int32)
        self.key, self.sequence = self.ids, None
        if lanes:  # each slot runs its nodes in one topological order (lowest id first), as a stream does
            n = len(trace)
            order = g.order(partial=True)
            self.key = n + np.arange(n, dtype=np.int64)  # (rows that can never run: after the rest)
            self.key[order] = np.arange(order.size)
            per_slot = _by_slot(slot, np.arange(n), len(self.limits))  # (one sort, not a mask per slot)
            self.sequence = [
                np.sort(self.key[rows]).tolist() if limit == 1 else None for rows, limit in zip(per_slot, self.limits)
            ]
        roots = np.flatnonzero(self.waiting == 0)
        self.roots = [
            [(int(self.key[r]), int(r)) for r in rows.tolist()]
            for rows in _by_slot(slot[roots], roots, len(self.limits))
        ]
        for heap in self.roots:
            heapq.heapify(heap)
        # the columns read per event as Python lists (a numpy scalar read costs several list reads;
        # millions of events on a 1,000-stage pipeline)
        self.slot_list: list[int] = self.slot.tolist()
        self.key_list: list[int] = np.asarray(self.key, np.int64).tolist()
        self.waiting_list: list[int] = np.asarray(self.waiting).tolist()
        self.type_list: list[int] = trace.types.tolist()
        ptr = np.asarray(self.child_ptr, np.int64)
        kids = np.asarray(self.children, np.int64).tolist()
        self.kids: list[list[int]] = [kids[a:b] for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())]


def _by_slot(slot: np.ndarray, rows: np.ndarray, slots: int) -> list[np.ndarray]:
    """`rows` split by their `slot` (0..slots-1), each part in the given order."""
    order = np.argsort(slot, kind="stable")
    bounds = np.searchsorted(slot[order], np.arange(slots + 1))
    return [rows[order[a:b]] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


class Npu:
    def __init__(self, rank: int, trace, static: Static, sim, offset: int = 0):
        self.rank = rank
        self.t = trace
        self.sim = sim
        self.dur, self.kind, self.slot, self.ids = static.dur, static.kind, static.slot, static.ids
        self.key, self.sequence = static.key, static.sequence
        self.coll_index = static.coll_index
        self.pg = static.pg
        self.limits = static.limits
        self.next = [0] * len(self.limits)  # in-order slots: position of the next row to run
        self.children, self.child_ptr = static.children, static.child_ptr
        self.waiting = static.waiting_list.copy()  # (a list: `Static.slot_list`)
        self._slot, self._key, self._kids = static.slot_list, static.key_list, static.kids
        self.types = static.type_list
        self.missing = static.missing
        self.ready: list[list] = [list(h) for h in static.roots]
        self.slack = static.slack
        if self.slack is not None:  # roots that started later in the recording wait as long
            for heap in self.ready:
                late = [(i, r) for i, r in heap if offset + self.slack[r] > 0]
                for _, r in late:
                    sim.engine.at(offset + int(self.slack[r]), self.release, r)
                if late:
                    heap[:] = [x for x in heap if offset + self.slack[x[1]] <= 0]
                    heapq.heapify(heap)
        self.busy = [0] * len(self.limits)
        n = len(trace)
        self.start = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        # when the last peer of a communication row arrived (a collective's last member to issue
        # it, a receive's sender; -1: none waited for): waiting before it, transfer after
        self.peer_at = np.full(n, -1, np.int64)
        self.done = 0

    def issue(self) -> None:
        """Start every ready node whose slot is free: lowest id first (ASTRA-sim), or in the
        slot's order: a node waits for the ones before it on its lane, as on a stream or a
        thread, so that shorter work never reorders a lane (a faster system is never slower)."""
        seqs = self.sequence
        for k, limit in enumerate(self.limits):
            heap = self.ready[k]
            seq = seqs[k] if seqs is not None else None
            while heap and self.busy[k] < limit:
                if seq is not None:
                    if heap[0][0] != seq[self.next[k]]:
                        break
                    self.next[k] += 1
                _, r = heapq.heappop(heap)
                self.busy[k] += 1
                self.start[r] = self.sim.engine.now
                self.sim.begin(self, r)

    def complete(self, r: int) -> None:
        self.end[r] = self.sim.engine.now
        slot, waiting = self._slot, self.waiting
        self.busy[slot[r]] -= 1
        self.done += 1
        for c in self._kids[r]:
            waiting[c] -= 1
            if waiting[c] == 0:
                if self.slack is not None and self.slack[c] > 0:
                    self.sim.engine.after(int(self.slack[c]), self.release, c)
                else:
                    heapq.heappush(self.ready[slot[c]], (self._key[c], c))
        self.issue()

    def release(self, r: int) -> None:
        """Row r is ready (after the wait it had in the recording)."""
        heapq.heappush(self.ready[self._slot[r]], (self._key[r], r))
        self.issue()


def _recorded_waits(trace, preds: tuple[np.ndarray, np.ndarray]) -> np.ndarray | None:
    """How long (ns) each row started after its last dependency ended in the recording (a
    root: after the trace's first start): launch and queueing delays the `recorded` model keeps.
    None for a trace without recorded start times."""
    if not trace.timed or not len(trace):
        return None
    if int(trace.start.max()) >= (1 << 62) // 1000 or int(trace.duration.max()) >= (1 << 62) // 1000:
        return None  # recorded times past the clock: no waits kept (the durations are refused elsewhere)
    start = trace.start.astype(np.int64) * 1000
    end = start + trace.duration.astype(np.int64) * 1000
    indptr, src = preds
    ready = np.full(len(trace), int(start.min()), np.int64)
    has = np.diff(indptr) > 0
    if src.size:
        last = np.maximum.reduceat(end[src.astype(np.int64)], indptr[:-1][has])
        ready[has] = last
    return np.maximum(start - ready, 0)


@dataclass
class CollectiveInstance:
    """One collective of one group, gathering its members as they issue it: it runs once
    ``size`` of them have (the first to issue it names its type, size and name)."""

    members: list[int] | None  # NPU ids of the group, None: every NPU
    size: int  # members to wait for
    ctype: int  # CollectiveType
    bytes: int
    name: str
    issued: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (time issued, row)
    splits: dict[int, tuple[list[float], int]] = field(default_factory=dict)  # all-to-allv: rank -> (split, bytes)


class Matchmaker:
    """Collectives meet their group; sends meet receives (in order per src, dst, tag, size)."""

    def __init__(self, sim, groups: dict[str, list[int]]):
        self.sim = sim
        self.groups = groups
        self.count: dict[tuple[int, str], int] = {}
        self.open: dict[tuple[str, int], CollectiveInstance] = {}
        self.sends: dict[tuple, deque] = {}
        self.recvs: dict[tuple, deque] = {}

    def members(self, pg: str) -> list[int] | None:
        if pg in ("", "0"):
            return None
        if pg not in self.groups:
            self.sim.warn(f"communicator group {pg!r} is not defined: the collective spans every NPU")
            return None
        return self.groups[pg]

    def collective(self, npu: Npu, r: int) -> None:
        t = npu.t
        code = int(npu.pg[r])
        pg = t.groups[code] if code >= 0 else ""
        k = self.count.get((npu.rank, pg), 0)
        self.count[(npu.rank, pg)] = k + 1
        if npu.coll_index is not None and r in npu.coll_index:
            k = npu.coll_index[r]
        key = (pg, k)
        inst = self.open.get(key)
        if inst is None:
            members = self.members(pg)
            if self.sim.cls is not None:  # (the NPUs that stand for the members issue it)
                peers = self.sim.peers  # (absent ranks are not waited for: `peers`)
                size = (
                    len(self.sim.members)
                    if members is None
                    else len({int(self.sim.first[m]) for m in members if m not in peers})
                )
            else:
                size = self.sim.npus if members is None else len(members)
            inst = self.open[key] = CollectiveInstance(
                members, size, int(t.comm_type[r]), int(t.comm_size[r]), t.names[t.name_codes[r]]
            )
        inst.issued[npu.rank] = (self.sim.engine.now, r)
        if (
            inst.ctype == CollectiveType.ALL_TO_ALL and t.extra_indptr[r] != t.extra_indptr[r + 1]
        ):  # all-to-allv: per-peer sizes
            split = _split(t.attr(r, "in_split_size"))
            if split is not None:
                inst.splits[npu.rank] = (split, int(t.comm_size[r]))
        if len(inst.issued) == inst.size:
            del self.open[key]
            self.sim.run_collective(pg, k, inst)

    def send(self, npu: Npu, r: int) -> None:
        t = npu.t
        dst, tag, size = int(t.comm_dst[r]), int(t.comm_tag[r]), int(t.comm_size[r])
        arrival = self.sim.arrival(npu, r, dst, size)
        self.sim.engine.at(max(arrival, self.sim.engine.now + self.sim.own_time(npu, r)), npu.complete, r)
        key = (npu.rank, dst, tag, size)
        waiting = self.recvs.get(key)
        if waiting:
            peer, pr, posted = waiting.popleft()
            peer.peer_at[pr] = self.sim.engine.now  # (the receive waited from `posted` for this send)
            self.sim.engine.at(max(arrival, posted + self.sim.own_time(peer, pr)), peer.complete, pr)
        else:
            self.sends.setdefault(key, deque()).append(arrival)

    def recv(self, npu: Npu, r: int) -> None:
        t = npu.t
        key = (int(t.comm_src[r]), npu.rank, int(t.comm_tag[r]), int(t.comm_size[r]))
        sent = self.sends.get(key)
        now = self.sim.engine.now
        if sent:  # a message that arrived before its receive was posted: the receive's own time
            self.sim.engine.at(max(sent.popleft(), now + self.sim.own_time(npu, r)), npu.complete, r)
        else:
            self.recvs.setdefault(key, deque()).append((npu, r, now))

    def blocked(self) -> dict[int, list[str]]:
        """What each NPU still waits for when nothing can happen any more."""
        out: dict[int, list[str]] = {}
        peers = getattr(self.sim, "peers", {})
        for (pg, k), inst in self.open.items():
            everyone = range(self.sim.npus) if inst.members is None else inst.members
            missing = [
                m
                for m in everyone
                if not 0 <= m < self.sim.npus or (m not in peers and self.sim.state(m).rank not in inst.issued)
            ]
            for rank, (_t, r) in inst.issued.items():
                npu = self.sim.state(rank)
                out.setdefault(rank, []).append(
                    f"node {int(npu.ids[r])} ({inst.name}): collective #{k} of group {pg or 'all'} waits for "
                    f"NPU(s) {_short(missing)} that never reach it"
                )
        for (src, dst, tag, size), q in self.recvs.items():
            for npu, r, _posted in q:
                out.setdefault(dst, []).append(
                    f"node {int(npu.ids[r])}: receive from NPU {src} (tag {tag}, {size} B) has no matching send"
                    + (
                        f" (NPU {src} is an absent rank taken as a copy of rank {peers[src]}: its sends are not "
                        "simulated)"
                        if src in peers
                        else ""
                    )
                )
        return out


def _split(value) -> list[float] | None:
    """A recorded split-size list ("[2, 6]" or a list), or None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, list) and value and all(isinstance(x, (int, float)) for x in value):
        return [float(x) for x in value]
    return None


def _short(xs: list[int]) -> str:
    return ", ".join(map(str, xs[:8])) + (f", ... ({len(xs)} in all)" if len(xs) > 8 else "")
