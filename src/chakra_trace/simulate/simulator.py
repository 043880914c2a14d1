"""The simulator: a workload's NPUs, their resources and collectives, run on one event loop."""

from __future__ import annotations

import gc
import os
import time
import warnings
from collections.abc import Callable
from typing import cast

import numpy as np

from ..errors import ChakraError
from ..intervals import busy, transfer_split
from ..io.memory import available_bytes
from ..io.workload import Workload, read_comm_groups
from ..schema.compute_types import NodePeaks
from ..schema.enums import Attr, CollectiveType, NodeType, collective_name
from ..schema.groups import ALL_RANKS_GROUPS
from ..schema.node import COLUMN_BY_NAME
from ..schema.resources import ACCEL, comm_mask, compute_mask
from ..schema.trace import Trace
from ..timeline.clock import origin_offsets_ns
from ..validate import fix_trace
from .aware import Aware
from .backend import ContendedModel, NetworkModel
from .checks import check_workload, refuse_invalid
from .collectives import Collectives
from .config import MemoryConfig, Network, SystemConfig
from .config.values import MAX_NS
from .costs import compute_type_notes, compute_types, durations, remote, typed_peaks
from .engine import Engine
from .inflight import Runner
from .memory import MemoryPorts
from .nccl import Cluster, collective_choice, p2p_ns
from .network import link_count
from .peers import describe, job_groups, named_ranks, symmetric_peers
from .result import CollectiveRecord, SimResult, job_steps
from .rules import ASTRA_SIM, DEFAULT, Rules
from .scheduler import CollectiveInstance, Matchmaker, Npu, Static
from .symmetry import lowest_turn, replica_period, turn_within, used_groups
from .unaware import Unaware

_SPLIT = ("transfer", "peer_wait", "exposed_transfer", "exposed_peer_wait")


class SimulationWarning(UserWarning):
    pass


class _Asymmetric(Exception):
    """NPU 0 cannot stand for every NPU: a collective ended at different times on its members."""


class SimulationBlocked(ChakraError):
    """The run cannot finish: nodes wait for something that never happens."""

    def __init__(self, blocked: dict[int, list[str]], result: SimResult):
        self.blocked = blocked
        self.result = result
        same: dict[tuple, list[int]] = {}  # NPUs blocked the same way are named together
        for npu, items in sorted(blocked.items()):
            same.setdefault(tuple(items), []).append(npu)
        lines = [
            f"NPU{'s' if len(npus) > 1 else ''} {_span(npus)}: {'; '.join(items[:3])}"
            + (f" (+{len(items) - 3} more)" if len(items) > 3 else "")
            for items, npus in list(same.items())[:8]
        ]
        more = f"; ... and {len(same) - 8} more" if len(same) > 8 else ""
        super().__init__(f"simulation blocked at {result.recording_ns} ns: " + " | ".join(lines) + more)


NPU_BYTES = 4096  # an NPU's scheduler state (measured ~2.3 KB on one-trace scale-outs), with room


def _check_memory(network, system, model: type[NetworkModel]) -> None:
    """Refuse, before building anything, a run whose per-NPU state would not fit in half the
    memory available: NPUs, each collective's chunks x NPUs arrays, a contended model's links."""
    n = network.npus
    chunks = int(getattr(system, "preferred_dataset_splits", 1))
    slots = int(getattr(system, "active_chunks_per_dimension", 1))
    per_npu = NPU_BYTES + 8 * (chunks + slots * len(network.dims))
    links = link_count(network) if model.contended else 0
    need = n * per_npu + 16 * links
    avail = available_bytes()
    if need > avail // 2:
        raise ChakraError(
            f"simulating {n:,} NPUs ({chunks} chunks per collective, {slots} active per dimension"
            + (f", {links:,} links" if model.contended else "")
            + f") needs about {need / 2**30:.1f} GiB, more than half the {avail / 2**30:.1f} GiB available"
        )


def _span(npus: list[int]) -> str:
    if len(npus) > 2 and npus == list(range(npus[0], npus[-1] + 1)):
        return f"{npus[0]}-{npus[-1]}"
    return ", ".join(map(str, npus[:8])) + (f", ... ({len(npus)})" if len(npus) > 8 else "")


class Simulator:
    def __init__(
        self,
        workload: Workload,
        network,
        system,
        *,
        memory=None,
        compat: bool = False,
        aware: bool = False,
        rules: Rules | None = None,
        network_model: type[NetworkModel] | None = None,
        comm_groups: dict[str, list[int]] | None = None,
        comm: str = "network",
        validate: bool = True,
        shortcuts: bool = True,
        cluster: Cluster | None = None,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.progress = progress  # progress(nodes done, nodes to do) now and then (`Engine.run`'s tick)
        if comm not in COMM_MODELS:
            raise ChakraError(f"unknown communication model {comm!r}; one of {', '.join(COMM_MODELS)}")
        if compat and rules is not None:
            raise ChakraError("give compat or rules, not both (compat=True is rules=ASTRA_SIM)")
        if aware and network_model is not None:
            raise ChakraError("give aware or network_model, not both (aware=True is network_model=Aware)")
        # the rules and the network model, chosen once here and handed to every layer (`_build`)
        self.rules = rules if rules is not None else ASTRA_SIM if compat else DEFAULT
        self.model: type[NetworkModel] = network_model if network_model is not None else Aware if aware else Unaware
        if comm != "network" and self.rules.astra_limits:
            raise ChakraError(f"ASTRA-sim compatibility mode costs communication on the network, not {comm!r}")
        if (comm == "nccl") != (cluster is not None):
            raise ChakraError('the "nccl" communication model and a cluster go together: give both or neither')
        self.comm = comm
        # where each rank sits (the "nccl" model): as many nodes as the NPUs fill, unless the cluster says
        self.cluster = None if cluster is None else cluster if cluster.nodes else cluster.sized(network.npus)
        self._nccl: dict[tuple, tuple[int, str]] = {}  # a collective's time by (type, bytes, placement)
        self.system = system
        self.memory = memory
        self._remote = remote(memory)
        self.npus = network.npus
        _check_memory(network, system, self.model)
        self.network, self.shortcuts = network, shortcuts
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        traces = workload.traces
        groups = job_groups(workload, comm_groups)
        # ranks the groups name that the job has no trace of: symmetric copies of those present (`peers`)
        absent = len(traces) < self.npus and any(
            m not in traces and 0 <= m < self.npus for m in named_ranks(traces, groups)
        )
        self.peers: dict[int, int] = symmetric_peers(traces, self.npus) if absent else {}
        present = traces
        if self.peers:
            traces = {**traces, **{m: traces[s] for m, s in self.peers.items()}}
            self.warn(describe(self.peers))
        elif len(traces) == 1 and self.npus > 1:
            (only,) = traces.values()
            traces = present = {r: only for r in range(self.npus)}  # one trace: the same on every NPU
            self.warn(f"one trace for {self.npus} NPUs: every NPU runs it")
        if sorted(traces) != list(range(self.npus)):
            raise ChakraError(
                f"the workload has ranks {_ranks(traces)} but the network has {self.npus} NPUs (0..{self.npus - 1})"
            )
        if validate:  # what `chakra validate` rejects is refused, not run to a silent answer
            report = check_workload(present, groups, self.npus)  # (the copies are not checked again)
            refuse_invalid(report)
            for issue in report.warnings:
                self.warn(f"validation: {'rank %d: ' % issue.rank if issue.rank is not None else ''}{issue.message}")
        self.groups = groups
        self.traces = traces  # as given: repaired (`_prepared`) when an NPU running one is simulated
        self._prepared_traces: dict[int, tuple[Trace, Static]] = {}  # per distinct trace object
        self._peaks: dict[int, NodePeaks | None] = {}  # its nodes' peaks by type (`costs.typed_peaks`)
        self._missing_said = False
        self.offsets = self._recorded_offsets(traces) if comm == "recorded" else {}
        self.shortcuts_used: list[str] = []
        self._period: int | None = None  # replicas: rank r stands for r + k * period (`_replica_classes`)
        self._turn: int | None = None  # and rank r for r + j * turn within its block of the lowest dimension
        self._build(self._classes() if shortcuts or self.peers else None)

    def _build(self, classes: np.ndarray | None) -> None:
        """Fresh run state. ``classes``: each NPU's class, whose first NPU is simulated for all
        of them (`_classes`); None: every NPU is simulated."""
        self.cls = classes
        self.engine = Engine()
        self.ports = MemoryPorts(self.engine, self.memory)
        self.fabric = self.model(self.network, self.rules)
        self.coll = Collectives(self.fabric, self.system, rules=self.rules, shortcuts=self.shortcuts, warn=self.warn)
        self.matcher = Matchmaker(self, self.groups)
        if classes is None:
            ranks = list(range(self.npus))
        else:
            copy = np.zeros(self.npus, bool)
            copy[list(self.peers)] = True
            order = np.lexsort((np.arange(self.npus), copy, classes))  # a rank present first: it runs
            bounds = np.flatnonzero(np.r_[True, classes[order][1:] != classes[order][:-1]])
            self.members = np.split(order, bounds[1:])  # NPUs of each class, the first stands for them
            ranks = [int(m[0]) for m in self.members]
            self.first = np.array(ranks, np.int64)[classes]  # the NPU that stands for each NPU
        ready = [self._prepared(self.traces[r]) for r in ranks]
        self.npus_state = [Npu(r, t, st, self, self.offsets.get(r, 0)) for r, (t, st) in zip(ranks, ready)]
        if not self._missing_said:  # (every NPU counted: those that stand for others as often as they do)
            self._missing_said = True
            times = [1] * len(ranks) if classes is None else [len(m) for m in self.members]
            missing = sum(st.missing * k for (_t, st), k in zip(ready, times))
            if missing:
                self.warn(f"{missing} dependencies name nodes that do not exist: dropped")
        self._state = {u.rank: u for u in self.npus_state}
        self.records: list[CollectiveRecord] = []
        self._issue_order: dict[tuple[str, int], int] = {}  # records are listed in issue order
        # a contended model's collectives run on the event loop; an uncontended one's are priced
        # in closed form (`run_collective`)
        self.stepper = (
            Runner(self.engine, cast(ContendedModel, self.fabric), self.coll) if self.model.contended else None
        )
        self._together: list[tuple] = []  # group collectives issued this instant (`_run_together`)

    def state(self, rank: int) -> Npu:
        """The simulated NPU that stands for `rank` (itself unless NPUs share a class)."""
        return self._state[rank if self.cls is None else int(self.first[rank])]

    def _classes(self) -> np.ndarray | None:
        """NPUs that run one trace object, as classes (an index per NPU), when each class must
        do exactly what its first NPU does as long as every collective ends at one time on all
        NPUs of each class (checked as each runs): no sends or receives, every collective over
        the whole machine, no memory port shared by NPUs. Otherwise replicas
        (`_replica_classes`); None when nothing is to be gained."""
        if self.peers:  # each absent rank in the class of the rank it copies: only ranks present run
            source = np.arange(self.npus, dtype=np.int64)
            for m, s in self.peers.items():
                source[m] = s
            return np.unique(source, return_inverse=True)[1].astype(np.int64)
        if self._remote and self.memory.memory_type in ("PER_NODE_MEMORY_EXPANSION", "MEMORY_POOL"):
            return None
        ids: dict[int, int] = {}
        cls = np.array([ids.setdefault(id(self.traces[r]), len(ids)) for r in range(self.npus)], np.int64)
        if len(ids) == self.npus:
            return self._replica_classes()
        everyone = list(range(self.npus))
        for t in {id(t): t for t in self.traces.values()}.values():
            if np.isin(t.types, (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)).any():
                return self._replica_classes()
            for pg in used_groups(t):
                if pg not in ALL_RANKS_GROUPS and pg in self.groups and list(self.groups[pg]) != everyone:
                    return self._replica_classes()
        return cls

    def _replica_classes(self) -> np.ndarray | None:
        """Replicas (`symmetry.replica_period`): rank r stands for r + k * period, the first
        period ranks are simulated; and within them, a turn of the lowest dimension
        (`symmetry.lowest_turn`, tensor-parallel ranks): the first c of each block of its w
        NPUs stand for the block. Uncontended models only: the replicas' messages would share
        links on a contended one."""
        if self.model.contended:
            return None
        period = replica_period(self.traces, self.groups, self.network)
        if self.cluster is not None and period is not None and period % self.cluster.gpus_per_node:
            period = None  # ("nccl": a replica must sit on nodes as the first one does)
        reps = self.npus if period is None else period
        turn = lowest_turn(self.traces, self.groups, self._symmetry_network(), reps)
        if period is None and turn is None:
            return None
        self._period, self._turn = period, turn
        r = np.arange(self.npus, dtype=np.int64) % reps
        if turn is not None:
            w = self._symmetry_network().dims[0].npus
            r = r - r % w + r % w % turn
        return np.unique(r, return_inverse=True)[1].astype(np.int64)  # (classes numbered 0..k-1)

    def _symmetry_network(self) -> Network:
        """The network whose lowest dimension a turn may rotate: the simulated one, or with a
        cluster ("nccl") its GPUs per node by its nodes -- a turn inside each node keeps every
        GPU on its node, so NCCL costs the turned job alike."""
        c, n = self.cluster, self.npus
        if c is None or n % c.gpus_per_node or n <= c.gpus_per_node:
            return self.network if c is None else Network.simple("Switch", n, 1, 0)
        return Network.simple(["Switch", "Switch"], [c.gpus_per_node, n // c.gpus_per_node], [1, 1], [0, 0])

    def _images(self) -> list[np.ndarray]:
        """The NPU permutations other than the identity under which the job maps onto itself
        (`_replica_classes`): every replica shift composed with every turn of the lowest
        dimension."""
        n = self.npus
        shifts = [np.arange(n, dtype=np.int64)]
        if self._period is not None:
            shifts += [(np.arange(n, dtype=np.int64) + k * self._period) % n for k in range(1, n // self._period)]
        turns = [np.arange(n, dtype=np.int64)]
        if self._turn is not None:
            w = self._symmetry_network().dims[0].npus
            turns += [turn_within(n, w, j * self._turn) for j in range(1, w // self._turn)]
        return [s[t] for t in turns for s in shifts][1:]

    def _mirrored(self, records: list[CollectiveRecord]) -> list[CollectiveRecord]:
        """With replicas (or turns), the collectives of a group the simulated NPUs ran, at the
        same times, in each group it maps onto (`_images`) that is another group: their records,
        each after its own."""
        by_members = {tuple(m): name for name, m in self.groups.items()}
        images = self._images()
        onto: dict[str, list[str]] = {}  # group -> the other groups it maps onto, in order

        def others(group: str) -> list[str]:
            members = self.groups.get(group)
            if members is None:
                return []
            arr = np.asarray(members, np.int64)
            if (
                self._turn is None and self._period is not None and int(arr.max()) >= self._period
            ):  # (a group spanning the replicas)
                return []
            named = {group}
            found = []
            for sigma in images:
                name = by_members.get(tuple(sigma[arr].tolist()))
                if name is not None and name not in named:
                    named.add(name)
                    found.append(name)
            return found

        out = []
        for rec in records:
            out.append(rec)
            names = onto.get(rec.group)
            if names is None:
                names = onto[rec.group] = others(rec.group)
            for name in names:  # (a copy with its group changed: 500,000 of them on a 1,536-NPU job)
                image = object.__new__(CollectiveRecord)
                image.__dict__.update(rec.__dict__, group=name)
                out.append(image)
        return out

    def _prepared(self, t: Trace) -> tuple[Trace, Static]:
        """A trace as simulated, once per trace object however many NPUs run it: repaired where
        a repair has one reading (default mode; ASTRA-sim aborts or hangs on these), its node
        times and the scheduler's tables. Only the traces of simulated NPUs are prepared."""
        hit = self._prepared_traces.get(id(t))
        if hit is None:
            fixed = t
            if self.rules.repair:
                repaired, changes = fix_trace(t)
                for c in changes:
                    self.warn(f"trace repaired before simulation: {c}")
                fixed = repaired if changes else t
            peaks = typed_peaks(fixed, self.system, self.rules)
            dur = durations(
                fixed, self.system, self.memory, comm=self.comm, rules=self.rules, warn=self.warn, peaks=peaks
            )
            self._peaks[id(t)] = peaks
            static = Static(fixed, dur, self.rules, recorded_waits=self.comm == "recorded")
            hit = self._prepared_traces[id(t)] = (fixed, static)
        return hit

    @staticmethod
    def _recorded_offsets(traces: dict[int, Trace]) -> dict[int, int]:
        """When each rank started in the recording (`timeline.clock.origin_offsets_ns`); all at 0
        where a rank lacks its time origin or one trace stands for several NPUs."""
        if len({id(t) for t in traces.values()}) < len(traces):
            return {}
        return origin_offsets_ns(traces) or {}

    def warn(self, message: str) -> None:
        if message not in self._warned:  # (a set: a warning per group of 100,000 must not be quadratic)
            self._warned.add(message)
            self.warnings.append(message)
            warnings.warn(message, SimulationWarning, stacklevel=3)

    # ------------------------------------------------------------------ node starts
    def begin(self, npu: Npu, r: int) -> None:
        typ = npu.types[r]
        if typ == NodeType.COMM_COLL_NODE:
            ctype = int(npu.t.comm_type[r]) if npu.t.present[r] & _COMM_TYPE_BIT else -1  # (one row, not a mask)
            if ctype < 0:
                self.warn(f"collective node {int(npu.ids[r])} has no comm_type: skipped")
                self.engine.at(self.engine.now, npu.complete, r)
            elif self.rules.astra_limits and ctype not in _ASTRA_TYPES:
                self.warn(f"{collective_name(ctype)} is not simulated by ASTRA-sim: its recorded duration is replayed")
                self.engine.after(int(npu.t.duration[r]) * 1000, npu.complete, r)
            else:
                self.matcher.collective(npu, r)
        elif typ == NodeType.COMM_SEND_NODE:
            self.matcher.send(npu, r)
        elif typ == NodeType.COMM_RECV_NODE:
            self.matcher.recv(npu, r)
        elif typ in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE) and self._remote:
            self.ports.access(npu, r)  # a shared port serves one access at a time, in order
        elif typ in (NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE):
            self.engine.after(int(npu.dur[r]), npu.complete, r)
        else:  # metadata and anything else take no time
            self.engine.at(self.engine.now, npu.complete, r)

    def run_collective(self, pg: str, k: int, inst: CollectiveInstance) -> None:
        issued = inst.issued
        self._issue_order[(pg or "all", k)] = len(self._issue_order)
        if self.cls is not None:  # each class's first NPU stands for the class (`_classes`)
            ranks = np.arange(self.npus, dtype=np.int64) if inst.members is None else np.array(inst.members, np.int64)
            rep = self.first[ranks]
            if self.peers:  # an absent member copies its rank when that one is a member, else the last to issue
                last = max(issued, key=lambda f: issued[f][0])
                rep = np.array([f if f in issued else last for f in rep.tolist()], np.int64)
            start = np.array([issued[f][0] for f in rep.tolist()], np.int64)
            took = np.array([int(self._state[f].dur[issued[f][1]]) for f in rep.tolist()], np.int64)
            if inst.splits and len(inst.splits) < ranks.size:
                inst.splits = {r: inst.splits[f] for r, f in zip(ranks.tolist(), rep.tolist())}
        else:
            ranks = np.array(sorted(issued), np.int64)
            start = np.array([issued[r][0] for r in ranks.tolist()], np.int64)
            took = np.array([int(self._state[r].dur[issued[r][1]]) for r in ranks.tolist()], np.int64)
        if self.comm == "ideal":  # done as the last member issues it
            finish = np.full(ranks.size, int(start.max()), np.int64)
            self._collective_done(pg, k, inst, ranks, start, self.comm, 1, finish)
            return
        if self.comm == "recorded":  # its recorded time, and not before the last member is there
            finish = np.maximum(start + took, int(start.max()))
            self._collective_done(pg, k, inst, ranks, start, self.comm, 1, finish)
            return
        if self.comm == "nccl":  # NCCL's time for its size and placement, from when the last member is there
            took_ns, how = self._nccl_time(inst.ctype, inst.bytes, ranks)
            finish = np.full(ranks.size, int(start.max()) + took_ns, np.int64)
            self._collective_done(pg, k, inst, ranks, start, f"nccl:{how}", 1, finish)
            return
        if not self.coll.knows(inst.ctype):  # (validation rejects it first, unless switched off)
            r0 = int(ranks[0])
            node = int(self.state(r0).ids[issued[self.state(r0).rank][1]])
            raise ChakraError(
                f"NPU {r0} node {node} ({inst.name!r}): comm_type {inst.ctype} is not a collective type "
                "the simulator knows"
            )
        plan = self.coll.plan(inst.ctype, inst.bytes, inst.members, self._matrix(inst, ranks))
        policy = getattr(self.system, "scheduling_policy", "LIFO")

        def done(finish: np.ndarray) -> None:
            self._collective_done(pg, k, inst, ranks, start, plan.algorithms, plan.chunks, finish)

        if self.stepper is None:  # uncontended: in closed form, step by step over all members
            done(self.coll.run(plan, ranks, start, policy))
        elif inst.members is not None:
            if not self._together:  # priced with the other groups' collectives of this instant
                self.engine.settled(self._run_together)
            self._together.append((plan, ranks, start, done))
        else:  # every step priced when it is sent, with everything else in flight
            self.stepper.run(plan, ranks, start, policy, done)

    def _nccl_time(self, ctype: int, nbytes: int, ranks: np.ndarray) -> tuple[int, str]:
        """`nccl.collective_choice` of a collective over ``ranks``, once per type, size, rank
        count and ranks per node (what its time depends on)."""
        assert self.cluster is not None
        nodes = np.unique(self.cluster.node_of(ranks), return_counts=True)[1]
        key = (int(ctype), int(nbytes), int(ranks.size), nodes.size, int(nodes.max()))
        hit = self._nccl.get(key)
        if hit is None:
            hit = self._nccl[key] = collective_choice(self.cluster, ctype, nbytes, ranks)
        return hit

    def _collective_done(
        self,
        pg: str,
        k: int,
        inst: CollectiveInstance,
        ranks: np.ndarray,
        start: np.ndarray,
        algorithm: str,
        chunks: int,
        finish: np.ndarray,
    ) -> None:
        """Each member's node completes when the collective ends there (known once its last
        step is priced, before it ends)."""
        # a member whose part never waited for the last one to issue (no phase links them, e.g.
        # ASTRA-sim's plans running fewer dimensions than the network has) is done when the collective runs
        done = np.maximum(finish, start.max())
        issued = inst.issued
        last = int(start.max())  # the last member's arrival: each member waits for it, then transfers
        for rank, (_when, row) in issued.items():
            self._state[rank].peer_at[row] = last
        if self.peers:  # each rank present ends when it ends there (its copies are not simulated)
            at = {r: i for i, r in enumerate(ranks.tolist())}
            for rank, (_when, row) in issued.items():
                self.engine.late(int(done[at[rank]]), self._state[rank].complete, row)
        elif self.cls is not None:
            lo, hi = np.full(len(self.members), MAX_NS), np.zeros(len(self.members), np.int64)
            here = self.cls[ranks]
            np.minimum.at(lo, here, done)
            np.maximum.at(hi, here, done)
            if (lo[here] != hi[here]).any():
                raise _Asymmetric(
                    f"{inst.name!r} (#{k} of group {pg or 'all'}) ends at different times on NPUs running one trace"
                )
            for rank, (_when, row) in issued.items():
                self.engine.late(int(lo[self.cls[rank]]), self._state[rank].complete, row)
        else:
            for rank, t in zip(ranks.tolist(), done.tolist()):
                self.engine.late(t, self._state[rank].complete, issued[rank][1])
        self.records.append(
            CollectiveRecord(
                group=pg or "all",
                index=k,
                type=collective_name(inst.ctype),
                bytes=inst.bytes,
                npus=int(ranks.size),
                algorithm=algorithm,
                chunks=chunks,
                start_ns=int(start.min()),
                end_ns=int(finish.max()),
                ready_ns=last,
            )
        )

    def _run_together(self) -> None:
        """Run the group collectives issued at this instant once nothing else happens at it:
        on a contended network, those of disjoint groups share the links step by step
        (`Collectives.run_together`) rather than one collective after the other."""
        batch, self._together = self._together, []
        policy = getattr(self.system, "scheduling_policy", "LIFO")
        self.coll.run_together(
            [b[0] for b in batch],
            [b[1] for b in batch],
            [b[2] for b in batch],
            policy,
            self.stepper,
            [b[3] for b in batch],
        )

    def own_time(self, npu: Npu, r: int) -> int:
        """The least time a send or receive takes once posted: its recorded time in the
        `recorded` model (never faster than recorded; a receive waits longer for a late sender),
        else 0 (the network decides when the message arrives)."""
        return int(npu.dur[r]) if self.comm == "recorded" else 0

    def arrival(self, npu: Npu, r: int, dst: int, size: int) -> int:
        """When a send issued now reaches its receiver: now in the `recorded` and `ideal`
        models (a recorded send's own time includes waiting for its receiver, so it is not a
        transfer time: the receive takes its own recorded time instead)."""
        now = self.engine.now
        if self.comm == "nccl":  # latency + bytes at the bandwidth of the level it crosses
            assert self.cluster is not None
            return now + p2p_ns(self.cluster, npu.rank, dst, size)
        if self.comm != "network":
            return now
        return int(self.fabric.send(np.array([npu.rank]), np.array([dst]), size, np.array([now]))[0])

    def _matrix(self, inst: CollectiveInstance, ranks: np.ndarray) -> np.ndarray | None:
        """All-to-allv: bytes from member i to member j (member order), from each member's
        in_split_size (elements per peer) and comm_size; None unless every member has splits."""
        splits = inst.splits
        order = inst.members if inst.members is not None else ranks.tolist()
        if len(splits) != len(order):
            return None
        rows = []
        for rank in order:
            split, nbytes = splits[rank]
            if len(split) != len(order) or sum(split) <= 0:
                self.warn(
                    f"all-to-allv split sizes of NPU {rank} do not match its group of {len(order)}: "
                    f"run as an all-to-all"
                )
                return None
            rows.append(np.asarray(split) * (nbytes / sum(split)))
        return np.stack(rows)

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        try:
            self._events()
        except _Asymmetric as e:
            if self._turn is not None:  # the turns dropped first: the replicas alone, or every NPU
                self.shortcuts_used.append(
                    f"symmetric NPUs within the lowest dimension tried and dropped at {self.engine.now:,} ns ({e})"
                )
                self._turn = None
                classes = None
                if self._period is not None:
                    classes = np.arange(self.npus, dtype=np.int64) % self._period
                self._build(classes)
            else:
                self._build(None)
            try:
                self._events()
            except _Asymmetric as e2:
                self.shortcuts_used.append(
                    f"symmetric NPUs tried and dropped at {self.engine.now:,} ns ({e2}): every NPU simulated"
                )
                self._build(None)
                self._events()
            else:
                if self.cls is None:
                    self.shortcuts_used.append(
                        f"symmetric NPUs tried and dropped at {self.engine.now:,} ns ({e}): every NPU simulated"
                    )
        if self.cls is not None and not self.peers:
            k = len(self.members)
            if self._turn is not None:
                w = self._symmetry_network().dims[0].npus
                what = (
                    f"symmetric NPUs: the {self.npus:,} NPUs map onto themselves turned by {self._turn} in every block of "
                    f"{w} NPUs of the lowest dimension"
                    + (f" and shifted by replicas of {self._period} NPUs" if self._period is not None else "")
                    + " (traces, peers and groups mapped with them), and every collective ended at one time on the NPUs "
                    f"of each class, so {k} NPUs were simulated for all"
                )
            elif self._period is not None:
                what = (
                    f"symmetric NPUs: the {self.npus:,} NPUs are {self.npus // k} replicas of NPUs 0-{k - 1} (traces, "
                    "peers and groups shifted by the period, the network's top dimension turned by it), and every "
                    f"collective ended at one time on the NPUs of each class, so {k} NPUs were simulated for all"
                )
            else:
                what = (
                    f"symmetric NPUs: the {self.npus:,} NPUs run {k} trace{'s' if k > 1 else ''} and every collective "
                    f"spans all of them and ended at one time on the NPUs of each trace, so {k} NPU"
                    f"{'s were' if k > 1 else ' was'} simulated for all"
                )
            self.shortcuts_used.insert(0, what)
        if self.coll.closed_form_steps:
            self.shortcuts_used.append(
                f"closed form: {self.coll.closed_form_steps:,} repeats of collective algorithm steps that every "
                "member started and ended at one time were added without simulating each"
            )
        self.records.sort(key=lambda r: self._issue_order[(r.group, r.index)])
        if self.cls is not None and (self._period is not None or self._turn is not None):
            self.records = self._mirrored(self.records)
        result = self._result(time.perf_counter() - t0)
        blocked = self.matcher.blocked()
        for npu in self.npus_state:
            if npu.done < len(npu.t):
                never = np.flatnonzero(npu.start < 0)
                if never.size:
                    blocked.setdefault(npu.rank, []).append(
                        f"{never.size} node(s) never became ready (a dependency cycle or a blocked "
                        f"dependency), e.g. node {int(npu.ids[never[0]])}"
                    )
        if blocked:
            raise SimulationBlocked(blocked, result)
        return result

    def _events(self) -> None:
        for npu in self.npus_state:
            npu.issue()
        tick = None
        if self.progress is not None:
            report, state = self.progress, self.npus_state
            total = sum(len(npu.t) for npu in state)  # (the NPUs simulated: one per class with the shortcut)
            tick = lambda: report(sum(npu.done for npu in state), total)  # noqa: E731
            tick()
        self.engine.run(tick)
        if tick is not None:
            tick()

    def _result(self, wall: float) -> SimResult:
        n = self.npus
        cols = {
            k: np.zeros(n, np.int64)
            for k in ("finish", "compute", "comm", "overlap", "exposed", "other", "idle", "compute_sum", *_SPLIT)
        }
        nodes, names = {}, {}
        per_trace: dict[int, tuple] = {}  # NPUs running one trace share its masks and names
        for npu in self.npus_state:
            t = npu.t
            if id(t) not in per_trace:
                compute = (npu.kind == ACCEL) if self.rules.astra_breakdown else compute_mask(t)
                per_trace[id(t)] = (compute, comm_mask(t), np.asarray(t.names, dtype=object)[t.name_codes])
            compute, comm, names[npu.rank] = per_trace[id(t)]
            tot = busy(npu.start, np.where(npu.end >= 0, npu.end, npu.start - 1), compute, comm)
            tot["idle"] += tot["start"]  # a simulated step starts at 0
            tot |= transfer_split(npu.start, np.where(npu.end >= 0, npu.end, npu.start - 1), npu.peer_at, compute, comm)
            for k in cols:
                cols[k][npu.rank] = tot[k]
            nodes[npu.rank] = (npu.start, npu.end, npu.kind)
        if self.cls is not None:  # every NPU did what its class's first NPU did
            for k in cols:
                cols[k] = cols[k][self.first]
            nodes = {r: nodes[f] for r, f in enumerate(self.first.tolist())}
            names = {r: names[f] for r, f in enumerate(self.first.tolist())}
        exposed = cols["finish"] - cols["compute_sum"] if self.rules.astra_breakdown else cols["exposed"]
        # (ASTRA-sim's exposed comm is not a union of intervals: its transfer part is capped by it)
        exposed_transfer = np.minimum(cols["exposed_transfer"], np.maximum(exposed, 0))
        typed = self._compute_types()
        for note in compute_type_notes(typed):
            self.warn(note)
        return SimResult(
            finish_ns=cols["finish"],
            exposed_comm_ns=exposed,
            compute_ns=cols["compute"],
            comm_ns=cols["comm"],
            overlap_ns=cols["overlap"],
            other_ns=cols["other"],
            idle_ns=cols["idle"],
            collectives=self.records,
            transfer_ns=cols["transfer"],
            peer_wait_ns=cols["peer_wait"],
            exposed_transfer_ns=exposed_transfer,
            exposed_peer_wait_ns=exposed - exposed_transfer,
            nodes=nodes,
            names=names,
            traces={r: self._prepared_traces.get(id(t), (t,))[0] for r, t in sorted(self.traces.items())},
            link_busy_ns=self.fabric.link_busy,
            describe_links=self.fabric.links if self.fabric.link_busy is not None else None,
            mode=f"{self.rules.name}/{self.fabric.name}" + ("" if self.comm == "network" else f"/{self.comm}"),
            events=self.engine.events,
            wall_s=wall,
            warnings=self.warnings,
            shortcuts=self.shortcuts_used,
            assumed_symmetric_ranks=dict(self.peers),
            compute_types=typed,
            steps=job_steps(self.traces.values()),
        )

    def _compute_types(self) -> dict:
        """`costs.compute_types` over every NPU: each distinct trace once, times the NPUs running it."""
        runs: dict[int, list] = {}
        alike: dict[tuple, list] = {}  # traces that share their program's columns and peaks (ranks of one stage)
        for t in self.traces.values():
            if id(t) in runs:
                runs[id(t)][2] += 1
                continue
            fixed = self._prepared_traces.get(id(t), (t,))[0]
            peaks = self._peaks[id(t)] if id(t) in self._peaks else typed_peaks(fixed, self.system, self.rules)
            key = (id(peaks), *(id(getattr(fixed, c)) for c in _COSTED_BY))
            run = alike.get(key)
            if run is not None and run[1] is peaks and all(getattr(run[0], c) is getattr(fixed, c) for c in _COSTED_BY):
                run[2] += 1
                runs[id(t)] = run
                continue
            runs[id(t)] = alike[key] = [fixed, peaks, 1]
        return compute_types(self.system, self.rules, [tuple(r) for r in {id(r): r for r in runs.values()}.values()])


#: How communication is costed: on the network model; as recorded (each member of a collective
#: takes its recorded time, and none ends before the last member issues it; a send takes its
#: recorded time; every node waits after its dependencies as long as it did in the recording,
#: launch and queueing delays, and each rank starts when it did); or free (an ideal network);
#: or as NCCL runs it on a cluster of nodes (`nccl`: a collective takes NCCL's time for its size
#: and its members' placement from when its last member issues it; a send latency + bytes at
#: the bandwidth of the level it crosses; every other node its recorded or roofline time).
COMM_MODELS = ("network", "recorded", "ideal", "nccl")

_COMM_TYPE_BIT = 1 << COLUMN_BY_NAME[Attr.COMM_TYPE].bit
#: The columns `costs.compute_types` reads of a trace (with its peaks)
_COSTED_BY = ("types", "present", "is_cpu_op", "num_ops")

_ASTRA_TYPES = {
    CollectiveType.ALL_REDUCE,
    CollectiveType.ALL_GATHER,
    CollectiveType.REDUCE_SCATTER,
    CollectiveType.ALL_TO_ALL,
}


def _ranks(traces) -> str:
    r = sorted(traces)
    return f"{r[0]}..{r[-1]} ({len(r)})" if r else "none"


def simulate(
    workload,
    network,
    system,
    *,
    memory=None,
    comm_groups=None,
    compat: bool = False,
    aware: bool = False,
    rules: Rules | None = None,
    network_model: type[NetworkModel] | None = None,
    comm: str = "network",
    validate: bool = True,
    shortcuts: bool = True,
    cluster: Cluster | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate a workload (a `Workload`, a trace, or any path `Workload.open` takes) on a network (a
    `config.Network` or an ASTRA-sim network YAML) with a system config (`config.SystemConfig`
    or ASTRA-sim system JSON). ``compat``: ASTRA-sim's rules (`rules.ASTRA_SIM`) instead of ours,
    or any `rules.Rules` as ``rules``; ``aware``: the congestion-aware network model
    (`aware.Aware`) instead of the unaware one, or any `backend.NetworkModel` class as
    ``network_model``. ``comm`` (`COMM_MODELS`): "recorded" or "ideal" cost
    communication as recorded or as free instead of on the network, and every node takes its
    recorded time; "nccl" costs it as NCCL does on ``cluster`` (a `nccl.Cluster`, whose nodes
    hold consecutive ranks). Raises `SimulationBlocked` when nodes can never run, and `WorkloadInvalid`
    (before running) on what `validate_workload` rejects; ``validate=False`` skips that check.
    ``shortcuts`` (exact ones, listed in `SimResult.shortcuts` when used): one NPU simulated for
    all when every NPU runs one trace and every collective spans the machine and ends at one
    time on all; repeated algorithm steps added in closed form when every member starts and ends
    them together. False: event by event for every NPU and every step. ``progress(done, total)``:
    called now and then with the nodes simulated so far and to simulate (a progress display)."""

    if isinstance(workload, (str, os.PathLike)):
        workload = Workload.open(workload)
    workload = Workload.of(workload)
    if isinstance(network, (str, os.PathLike)):
        network = Network.from_yaml(network)
    if isinstance(system, (str, os.PathLike)):
        system = SystemConfig.from_json(system)
    elif isinstance(system, dict):
        system = SystemConfig.from_dict(system)
    if isinstance(memory, (str, os.PathLike)):
        memory = MemoryConfig.from_json(memory)
    if isinstance(comm_groups, (str, os.PathLike)):
        comm_groups = read_comm_groups(comm_groups)
    enabled = gc.isenabled()
    gc.disable()  # events, records and tables by the million: collections would only rescan them
    try:
        return Simulator(
            workload,
            network,
            system,
            memory=memory,
            compat=compat,
            aware=aware,
            rules=rules,
            network_model=network_model,
            comm_groups=comm_groups,
            comm=comm,
            validate=validate,
            shortcuts=shortcuts,
            cluster=cluster,
            progress=progress,
        ).run()
    finally:
        if enabled:
            gc.enable()
