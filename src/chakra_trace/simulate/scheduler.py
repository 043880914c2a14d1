"""The workload layer: which node of each NPU's trace runs when.

A node is ready when every dependency (data, and control ones that name an existing node)
has finished. Per NPU at most one accelerator compute node, one CPU node and one
collective or send run at a time; ready nodes are issued lowest id first (a node whose
resource is busy does not hold back nodes of other resources). Receives, metadata and memory
nodes have no such limit.
"""

from __future__ import annotations

import heapq
import json
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..schema.enums import Attr, CollectiveType
from ..schema.resources import ACCEL, COMM, CPU, FREE, node_kinds

LIMITS = (1, 1, 1, 1 << 62)  # nodes in flight per resource (ACCEL, CPU, COMM, FREE)


class Static:
    """What the scheduler needs of one trace, computed once however many NPUs run it."""

    def __init__(self, trace, durations: np.ndarray):
        self.dur = durations
        self.kind = node_kinds(trace)
        # dependencies on nodes that exist (a missing one is dropped, and counted); a node that
        # depends on itself waits for itself, forever (in compat mode: ASTRA-sim hangs there too)
        g = trace.graph()
        self.missing = g.missing
        self.waiting = g.indegree + g.self_deps
        self.child_ptr, self.children = g.succs
        self.ids = trace.ids.astype(np.int64)
        roots = np.flatnonzero(self.waiting == 0)
        self.roots = [[(int(self.ids[r]), int(r)) for r in roots[self.kind[roots] == k]] for k in range(4)]
        for heap in self.roots:
            heapq.heapify(heap)


class Npu:
    def __init__(self, rank: int, trace, static: Static, sim):
        self.rank = rank
        self.t = trace
        self.sim = sim
        self.dur, self.kind, self.ids = static.dur, static.kind, static.ids
        self.children, self.child_ptr = static.children, static.child_ptr
        self.waiting = static.waiting.copy()
        self.missing = static.missing
        self.ready: list[list] = [list(h) for h in static.roots]
        self.busy = [0, 0, 0, 0]
        n = len(trace)
        self.start = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.done = 0

    def issue(self) -> None:
        """Start every ready node whose resource is free, lowest id first."""
        for k in (ACCEL, CPU, COMM, FREE):
            heap = self.ready[k]
            while heap and self.busy[k] < LIMITS[k]:
                _, r = heapq.heappop(heap)
                self.busy[k] += 1
                self.start[r] = self.sim.engine.now
                self.sim.begin(self, r)

    def complete(self, r: int) -> None:
        self.end[r] = self.sim.engine.now
        self.busy[self.kind[r]] -= 1
        self.done += 1
        for c in self.children[self.child_ptr[r] : self.child_ptr[r + 1]].tolist():
            self.waiting[c] -= 1
            if self.waiting[c] == 0:
                heapq.heappush(self.ready[self.kind[c]], (int(self.ids[c]), c))
        self.issue()


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
        pg = t.groups[t.pg_name[r]] if t.has(Attr.PG_NAME)[r] else ""
        k = self.count.get((npu.rank, pg), 0)
        self.count[(npu.rank, pg)] = k + 1
        key = (pg, k)
        inst = self.open.get(key)
        if inst is None:
            members = self.members(pg)
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
        arrival = int(
            self.sim.fabric.send(np.array([npu.rank]), np.array([dst]), size, np.array([self.sim.engine.now]))[0]
        )
        self.sim.engine.at(arrival, npu.complete, r)
        key = (npu.rank, dst, tag, size)
        waiting = self.recvs.get(key)
        if waiting:
            peer, pr = waiting.popleft()
            self.sim.engine.at(arrival, peer.complete, pr)
        else:
            self.sends.setdefault(key, deque()).append(arrival)

    def recv(self, npu: Npu, r: int) -> None:
        t = npu.t
        key = (int(t.comm_src[r]), npu.rank, int(t.comm_tag[r]), int(t.comm_size[r]))
        sent = self.sends.get(key)
        if sent:  # a message that arrived before its receive was posted completes the receive now
            self.sim.engine.at(max(sent.popleft(), self.sim.engine.now), npu.complete, r)
        else:
            self.recvs.setdefault(key, deque()).append((npu, r))

    def blocked(self) -> dict[int, list[str]]:
        """What each NPU still waits for when nothing can happen any more."""
        out: dict[int, list[str]] = {}
        for (pg, k), inst in self.open.items():
            everyone = range(self.sim.npus) if inst.members is None else inst.members
            missing = [m for m in everyone if m not in inst.issued]
            for rank, (_t, r) in inst.issued.items():
                npu = self.sim.npus_state[rank]
                out.setdefault(rank, []).append(
                    f"node {int(npu.ids[r])} ({inst.name}): collective #{k} of group {pg or 'all'} waits for "
                    f"NPU(s) {_short(missing)} that never reach it"
                )
        for (src, dst, tag, size), q in self.recvs.items():
            for npu, r in q:
                out.setdefault(dst, []).append(
                    f"node {int(npu.ids[r])}: receive from NPU {src} (tag {tag}, {size} B) has no matching send"
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
