"""Collectives priced as steps over all members at once, and their chunked schedule.

A collective is cut into chunks; each chunk goes through phases (an operation on one
dimension of the network, or a 1-D ring over a communicator group's members). A phase runs
its algorithm's steps (`algorithms.steps`) for every ring/row of the dimension at once: ``T``
holds one time per member (shape groups x members), and a step is "send, wait for what
arrives, pay the endpoint delay and the reduction". Phases of different chunks queue per
dimension, at most ``active_chunks_per_dimension`` at a time, picked FIFO or LIFO among the
ready ones. On a congestion-aware network the same phases run on the event loop (`inflight`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..schema.enums import CollectiveType
from .algorithms import (
    A2A,
    AG,
    AR,
    BARRIER,
    DIRECT,
    DIRECT_AR,
    EVENT_LIMIT,
    LOCAL_DELAY,
    OPS,
    RS,
    SHIFT,
    WINDOW,
    Phase,
    Plan,
    Step,
    binary_tree_phase,
    partners,
    steps,
    tree_of,
    uniform,
)
from .backend import NetworkModel
from .config import parse_algorithm
from .config.values import MAX_NS
from .network import as_ns, check_clock
from .rules import Rules

_RUNS_KEPT = 1024  # collective runs `Collectives.run` keeps for reuse


def _plan_key(plan: Plan) -> tuple:
    """Everything of a plan its run depends on, hashable."""
    return (
        plan.ctype,
        plan.nbytes,
        plan.chunks,
        tuple(
            (
                ph.op,
                ph.dim,
                ph.members.shape,
                ph.members.tobytes(),
                ph.nbytes,
                ph.algorithm,
                None if ph.matrix is None else (ph.matrix.shape, np.asarray(ph.matrix, float).tobytes()),
                ph.local,
                ph.trees,
                ph.tree,
                ph.window,
            )
            for ph in plan.phases
        ),
    )


class Collectives:
    """Plans collectives under the simulation's rules and computes their per-member finish
    times on a network model."""

    def __init__(self, fabric: NetworkModel, system, *, rules: Rules, shortcuts: bool = True, warn=None):
        self.f = fabric
        self.warn = warn or (lambda message: None)
        self._warned_flow = False
        self.shortcuts = shortcuts
        self.closed_form_steps = 0  # algorithm steps added in closed form (`_repeat`)
        self.sys = system
        self.rules = rules
        self.delta = int(system.endpoint_delay)
        self._tree_turns: dict[tuple[str, int], int] = {}  # tree_turns: trees handed out per (operation, dimension)
        self.mem_bw = float(system.local_mem_bw)  # decimal GB/s = bytes per ns
        self._runs: dict[tuple, tuple[np.ndarray, int]] = {}  # (`run`: finish times relative to the start)
        self._rows_of: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------ planning
    def _impl(self, op: str) -> tuple[str, ...]:
        s = self.sys
        return {AR: s.all_reduce, RS: s.reduce_scatter, AG: s.all_gather, A2A: s.all_to_all}.get(op, s.all_reduce)

    def _dims(self, op: str) -> list[int]:
        """Dimensions a whole-machine collective runs on."""
        n = len(self.f.sizes)
        if self.rules.astra_plans:  # only as many dimensions as algorithms are listed, and at most four
            n = min(n, len(self._impl(op)), 4)
        return [d for d in range(n) if self.f.sizes[d] > 1]

    def _one_dim(self, op: str) -> int | None:
        """astra_plans: the first dimension whose algorithm is a one* one (oneRing, oneDirect,
        oneHalvingDoubling), else None. ASTRA-sim (`GeneralComplexTopology`) makes that
        dimension one ring of every NPU and builds no dimension after it."""
        if not self.rules.astra_plans:
            return None
        impl = self._impl(op)[: min(len(self.f.sizes), 4)]
        return next((d for d, a in enumerate(impl) if a.startswith("one")), None)

    def _rows(self, d: int) -> np.ndarray:
        """NPU ids of every row of dimension d: shape (npus / size_d, size_d). Made once per
        dimension (every collective's plan asks) and read-only."""
        hit = self._rows_of.get(d)
        if hit is None:
            ids = np.arange(self.f.npus).reshape(tuple(int(x) for x in self.f.sizes[::-1]))
            axis = len(self.f.sizes) - 1 - d
            hit = self._rows_of[d] = np.moveaxis(ids, axis, -1).reshape(-1, int(self.f.sizes[d]))
            hit.flags.writeable = False
        return hit

    def _algo(self, op: str, d: int) -> str:

        impl = self._impl(op)
        name = parse_algorithm(impl[min(d, len(impl) - 1)] if impl else "ring")[0]  # direct8 -> direct
        return name[3].lower() + name[4:] if name.startswith("one") else name  # one*: the same per phase

    def knows(self, ctype: int) -> bool:
        """Whether `plan` has a reading of this comm_type."""
        return int(ctype) in OPS

    def plan(self, ctype: int, nbytes: int, members: list[int] | None, matrix: np.ndarray | None = None) -> Plan:
        """The phases of one collective. ``matrix`` (all-to-allv): bytes each member sends to
        each other, in member order; the exchange then runs over the members as one ring or
        one direct step (the first dimension's algorithm), with those sizes."""
        if matrix is not None and ctype == CollectiveType.ALL_TO_ALL:
            ids = np.arange(self.f.npus) if members is None else np.asarray(members, np.int64)
            splits = max(1, int(self.sys.preferred_dataset_splits))
            algo = "direct" if self._algo(A2A, 0) == "direct" else "ring"
            plan = Plan(int(ctype), int(nbytes), splits)
            plan.phases.append(Phase(A2A, -1, ids[None, :], nbytes / splits, algo, np.asarray(matrix, float) / splits))
            return plan
        return self._choose_windows(self._choose_trees(self._plan(ctype, nbytes, members)))

    def _choose_windows(self, plan: Plan) -> Plan:
        """packet_flow: the window of each direct phase (`directN`, `oneDirectN`), from the list
        its algorithm came from (the all-reduce's for every phase of an all-reduce)."""
        if not self.rules.packet_flow:
            return plan
        impl = self._impl(OPS[plan.ctype] if OPS[plan.ctype] in (AR, RS, AG, A2A) else AR)
        one = self._one_dim(OPS[plan.ctype] if OPS[plan.ctype] in (AR, RS, AG, A2A) else AR)
        for j, ph in enumerate(plan.phases):
            if ph.algorithm != "direct" or ph.matrix is not None or not impl:
                continue
            d = ph.dim if ph.dim >= 0 else one if one is not None else 0
            window = parse_algorithm(impl[min(d, len(impl) - 1)])[1]
            if window is not None:
                plan.phases[j] = replace(ph, window=window)
        return plan

    def _choose_trees(self, plan: Plan) -> Plan:
        """tree_turns: ASTRA-sim's DoubleBinaryTreeTopology hands out its two trees in turn, one
        per phase it builds (every chunk, every phase on that dimension, across collectives)."""
        todo = [j for j, ph in enumerate(plan.phases) if binary_tree_phase(ph) and self.rules.tree_turns]
        if not todo:
            return plan
        trees: dict[int, list[int]] = {j: [] for j in todo}
        basic = OPS[plan.ctype] if OPS[plan.ctype] in (AR, RS, AG, A2A) else AR
        for _ in range(plan.chunks):
            for j in todo:
                key = (basic, plan.phases[j].dim)
                turn = self._tree_turns.get(key, 0)
                self._tree_turns[key] = turn + 1
                trees[j].append(turn % 2)
        for j in todo:
            plan.phases[j] = replace(plan.phases[j], trees=tuple(trees[j]))
        return plan

    def _plan(self, ctype: int, nbytes: int, members: list[int] | None) -> Plan:
        op, rules = OPS[ctype], self.rules
        whole = members is None or len(members) == self.f.npus and list(members) == list(range(self.f.npus))
        if rules.astra_plans and members is not None and len(members) == self.f.npus:
            whole = True  # ASTRA-sim: a group of every NPU, in any order, runs as the whole machine
        p = self.f.npus if members is None else len(members)
        if rules.astra_plans:  # ASTRA-sim (`Sys::determine_chunk_size`): the least chunk is one byte
            p = self.f.npus  # per NPU of the machine
        splits = max(1, int(self.sys.preferred_dataset_splits))
        chunk = nbytes // splits if rules.whole_bytes else nbytes / splits
        chunks = splits
        if op != AG and chunk < p:
            chunk = p
        elif rules.whole_bytes and chunk > 0:
            # ASTRA-sim (`Sys::generate_collective`) cuts ceil(size / chunk) streams of a whole
            # chunk each: a size that `splits` does not divide gets more, full-size chunks (an
            # all-gather of 7 B in 5 splits: 7 chunks of 1 B)
            chunks = -(-int(nbytes) // int(chunk))
        plan = Plan(int(ctype), int(nbytes), chunks)
        if op == BARRIER:
            chunk, plan.chunks = 0, 1
        basic = op if op in (AR, RS, AG, A2A) else AR
        if not whole:  # a communicator: a 1-D ring over its members, in listed order
            algo = "ring"
            if rules.astra_plans and len(self._impl(basic)) == 1:
                # ASTRA-sim (`CommunicatorGroup::get_collective_plan`): the system's algorithm
                # when it lists one, a ring when it lists one per dimension
                algo = self._algo(basic, 0)
            ids = np.asarray(members, np.int64)[None, :]
            plan.phases.append(Phase(op, -1, ids, chunk, algo, local=rules.astra_plans))
            return plan
        first = self._impl(basic)[0] if self._impl(basic) else "ring"
        # one*: one algorithm over every NPU, the dimensions ignored (astra_plans: `_one_dim`)
        if first.startswith("one") and not rules.astra_plans:
            plan.phases.append(Phase(op, -1, np.arange(self.f.npus)[None, :], chunk, self._algo(basic, 0)))
            return plan
        dims = self._dims(basic)
        one = self._one_dim(basic)
        if one is not None:  # astra_plans: the dimensions before the one* one, then one ring of every NPU (dim -1)
            dims = [d for d in dims if d < one] + [-1]

        def rows(d: int) -> np.ndarray:
            return np.arange(self.f.npus)[None, :] if d < 0 else self._rows(d)

        def width(d: int) -> int:
            return self.f.npus if d < 0 else int(self.f.sizes[d])

        def algo_at(o: str, d: int) -> str:
            return self._algo(o, d if d >= 0 or one is None else one)

        opt = getattr(self.sys, "collective_optimization", "baseline")
        if op == AR and opt == "localBWAware" and len(dims) > 1:
            size = chunk
            # (astra_plans: ASTRA-sim builds every phase from the all-reduce's algorithms, and a
            # doubleBinaryTree phase is a whole all-reduce whatever its operation: size kept)
            kept = (lambda d: algo_at(AR, d) == "doubleBinaryTree") if rules.astra_plans else (lambda d: False)
            for d in dims[:-1]:  # reduce-scatter down the dimensions, all-reduce the last, all-gather back
                plan.phases.append(Phase(RS, d, rows(d), size, algo_at(AR if rules.astra_plans else RS, d)))
                size = size if kept(d) else size // width(d) if rules.whole_bytes else size / self.f.sizes[d]
            plan.phases.append(Phase(AR, dims[-1], rows(dims[-1]), size, algo_at(AR, dims[-1])))
            for d in reversed(dims[:-1]):
                algo = algo_at(AR if rules.astra_plans else AG, d)
                # astra_plans: ASTRA-sim (`QueueLevelHandler::get_next_queue_id_last`) runs these
                # phases anticlockwise: a ring or direct phase over the members in reverse order
                back = rules.astra_plans and algo in ("ring", "direct")
                plan.phases.append(Phase(AG, d, rows(d)[:, ::-1] if back else rows(d), size, algo))
                size = size if kept(d) else size * self.f.sizes[d]
            return plan
        size = chunk
        if rules.gather_last_to_first and op == AG:  # ASTRA-sim runs an all-gather's dimensions last to first
            dims = dims[::-1]
        for d in dims:
            plan.phases.append(Phase(op, d, rows(d), size, algo_at(basic, d)))
            if rules.astra_plans and plan.phases[-1].algorithm == "doubleBinaryTree":
                pass  # ASTRA-sim: a doubleBinaryTree phase is an all-reduce whatever the operation
            elif rules.astra_plans:  # ASTRA-sim: the next phase takes this one's final size, whatever the optimization
                if op == RS:
                    size = size // width(d) if rules.whole_bytes else size / width(d)
                elif op == AG:
                    size = size * width(d)
            elif op == RS and opt == "localBWAware":
                size = size / self.f.sizes[d]
        return plan

    # ------------------------------------------------------------------ running
    def run(self, plan: Plan, npus: np.ndarray, start: np.ndarray, policy: str = "LIFO") -> np.ndarray:
        """Finish time of each member (same order as npus) for members starting at `start`.

        Without congestion a collective's times shifted by a constant are its times when its
        members start that much later (every step is max, plus a cost that does not depend on
        when it is paid), so the finish times of a plan already run from the same start times
        relative to the earliest are that run's, shifted: exact, and reused (with `shortcuts`)
        while a few thousand are kept (a job of 100,000 identical collectives paid the whole
        schedule for every one of them)."""
        if self.f.contended or not self.shortcuts or not len(plan.phases) or not start.size:
            return self._run(plan, npus, start, policy)
        base = int(start.min())
        key = (_plan_key(plan), npus.tobytes(), (start - base).tobytes(), policy)
        hit = self._runs.get(key)
        if hit is not None and int(hit[0].max()) < MAX_NS - base:  # (else run it: its overflow, its error)
            self.closed_form_steps += hit[1]
            return hit[0] + base
        steps_before = self.closed_form_steps
        finish = self._run(plan, npus, start, policy)
        if len(self._runs) >= _RUNS_KEPT:
            self._runs.clear()
        self._runs[key] = (finish - base, self.closed_form_steps - steps_before)
        return finish

    def _run(self, plan: Plan, npus: np.ndarray, start: np.ndarray, policy: str) -> np.ndarray:
        ready = [np.zeros(self.f.npus, np.int64) for _ in range(plan.chunks)]
        for c in range(plan.chunks):
            ready[c][npus] = start
        nphase = len(plan.phases)
        if not nphase:
            return start.copy()
        dims = sorted({ph.dim for ph in plan.phases})
        slots = max(1, int(self.sys.active_chunks_per_dimension))
        free = {d: [np.zeros(self.f.npus, np.int64) for _ in range(slots)] for d in dims}
        for d in dims:
            for f in free[d]:
                f[npus] = start
        # when each slot is free for every member (a phase runs on all members, so this is
        # the latest of free[d][k] over them, kept as a number for the choice below)
        free_at = {d: [int(start.max())] * slots for d in dims}
        nxt = [0] * plan.chunks  # next phase of each chunk
        ready_at = [int(start.max())] * plan.chunks  # scalar time the chunk's next phase is ready
        seq = list(range(plan.chunks))  # order chunks became ready (for FIFO / LIFO ties)
        order = 0
        pending = set(range(plan.chunks))
        while pending:
            # the phase that can start first; ties by policy (LIFO: the most recently ready).
            # ASTRA-sim (`Sys::insert_stream`): a dimension's queue serves the chunks of one
            # collective (one priority) in the order they reached it, whatever the policy
            choices = []
            for c in pending:
                ph = plan.phases[nxt[c]]
                k = min(range(slots), key=free_at[ph.dim].__getitem__)
                t = max(ready_at[c], free_at[ph.dim][k])
                tie = (ready_at[c], seq[c]) if self.rules.arrival_order else (-seq[c] if policy == "LIFO" else seq[c],)
                choices.append(((t, *tie, c), c, k))
            _, c, k = min(choices)
            ph = plan.phases[nxt[c]]
            if ph.trees:
                ph = replace(ph, tree=ph.trees[c])
            members = ph.members.ravel()
            if self.rules.arrival_order and slots > 1:
                # ASTRA-sim: each NPU runs its own queues: a member takes the slot it has free first
                mine = np.argmin(np.stack([f[members] for f in free[ph.dim]]), axis=0)
                held = np.stack([f[members] for f in free[ph.dim]])[mine, np.arange(members.size)]
                t0 = np.maximum(ready[c][members], held).reshape(ph.members.shape)
                t1 = self._phase(ph, t0)
                for j, f in enumerate(free[ph.dim]):
                    f[members[mine == j]] = t1.ravel()[mine == j]
                ready[c][members] = t1.ravel()
                ready_at[c] = int(t1.max())
                soonest = np.min(np.stack([f[members] for f in free[ph.dim]]), axis=0)
                free_at[ph.dim] = [int(soonest.max())] * slots  # when every member has a slot free
            else:
                t0 = np.maximum(ready[c][members], free[ph.dim][k][members]).reshape(ph.members.shape)
                t1 = self._phase(ph, t0)
                free[ph.dim][k][members] = t1.ravel()
                ready[c][members] = t1.ravel()
                ready_at[c] = free_at[ph.dim][k] = int(t1.max())
            order += 1
            seq[c] = plan.chunks + order
            nxt[c] += 1
            if nxt[c] == nphase:
                pending.discard(c)
        return np.max(np.stack([r[npus] for r in ready]), axis=0)

    def run_together(
        self,
        plans: list[Plan],
        npus: list[np.ndarray],
        starts: list[np.ndarray],
        policy: str,
        stepper,
        thens: list,
    ) -> None:
        """Collectives of communicator groups issued at one instant, on the congestion-aware
        network (`inflight.Runner`), `thens[i]` getting collective i's finish. Those of disjoint
        groups with the same phases run as one plan with their rows stacked, so their messages
        meet on the links within each step (ASTRA-sim's network interleaves them message by
        message); any other runs alone."""
        alike: dict[tuple, list[int]] = {}
        for i, pl in enumerate(plans):
            groups_only = all(ph.dim < 0 and ph.matrix is None for ph in pl.phases) and pl.phases
            key = (pl.chunks, tuple((ph.op, ph.nbytes, ph.algorithm, ph.local, ph.members.shape) for ph in pl.phases))
            alike.setdefault(key if groups_only else (i,), []).append(i)
        for idx in alike.values():
            ids = np.concatenate([npus[i] for i in idx])
            if len(idx) == 1 or np.unique(ids).size < ids.size:
                for i in idx:
                    stepper.run(plans[i], npus[i], starts[i], policy, thens[i])
                continue
            first = plans[idx[0]]
            phases = [
                replace(ph, members=np.vstack([plans[i].phases[j].members for i in idx]))
                for j, ph in enumerate(first.phases)
            ]
            cuts = np.cumsum([npus[i].size for i in idx])[:-1]

            def split(both: np.ndarray, idx: list[int] = idx, cuts: np.ndarray = cuts) -> None:
                for i, part in zip(idx, np.split(both, cuts)):
                    thens[i](part)

            stacked = Plan(first.ctype, first.nbytes, first.chunks, phases)
            stepper.run(stacked, ids, np.concatenate([starts[i] for i in idx]), policy, split)

    def _phase(self, ph: Phase, T: np.ndarray) -> np.ndarray:
        """Member times after one phase of one chunk (T: groups x p, when each member starts)."""
        if ph.members.shape[1] < 2:
            return T.copy()
        if ph.trees:
            return self._binary_tree(ph, T)
        T = T + (LOCAL_DELAY if ph.local else self.delta)
        for step in self.steps(ph, uniform(T)):
            T = self._repeat(ph, T, step)
        return T

    def steps(self, ph: Phase, in_step: bool = True) -> list[Step]:
        """The phase's algorithm as steps (`algorithms.steps`) under this simulation's rules and model."""
        sts = steps(ph, self.rules, contended=self.f.contended, in_step=in_step)
        direct = self.rules.packet_flow and not in_step and ph.algorithm == "direct" and ph.matrix is None
        if direct and not self._warned_flow and all(st.kind != WINDOW for st in sts):
            self._warned_flow = True
            g, p = ph.members.shape
            self.warn(
                f"a direct {ph.op.replace('_', '-')} phase over {g} x {p} members starting at different times is "
                f"priced in closed form (ASTRA-sim's packet flow is followed up to {EVENT_LIMIT:,} messages a "
                "phase): its finish times may differ from ASTRA-sim's"
            )
        return sts

    def _once(self, ph: Phase, T: np.ndarray, st: Step) -> np.ndarray:
        if st.kind == DIRECT:
            return self._direct(ph, T, st.nbytes, st.reduce)
        if st.kind == WINDOW:
            return self._direct_window(ph, T, st.dist, float(st.nbytes))
        if st.kind == DIRECT_AR:
            return self._direct_all_reduce(ph, T, float(st.nbytes))
        m = float(st.nbytes)  # (only a direct step has a matrix)
        if st.kind == SHIFT:
            return self._shift(ph, T, st.dist, m, st.reduce)
        return self._pairwise(ph, T, st.dist, m, st.reduce, st.reduce_bytes)

    def _repeat(self, ph: Phase, T: np.ndarray, st: Step) -> np.ndarray:
        """`st.repeat` identical steps. When every member starts a step at one time and ends it
        at one time, the next steps are the same step shifted in time, so they are added in
        closed form (exact, counted in `closed_form_steps`): without congestion a step's cost
        does not depend on when it starts. (The congestion-aware model runs its algorithms on
        the event loop, `inflight`, with a closed form of its own.)"""
        n = st.repeat
        T1 = self._once(ph, T, st)
        n -= 1
        if n and self.shortcuts and st.kind == SHIFT and uniform(T) and uniform(T1):
            self.closed_form_steps += n
            return check_clock(T1 + n * (T1 - T), "a collective's end")
        for _ in range(n):
            T1 = self._once(ph, T1, st)
        return T1

    def _reduce(self, m: float) -> int:
        return 3 * int(as_ns(m // self.mem_bw, "a reduction's time")) if self.mem_bw > 0 else 0

    def _finish(self, T, arrival, m: float, reduce: bool, local: bool = False) -> np.ndarray:
        delta = LOCAL_DELAY if local else self.delta
        return np.maximum(T, arrival) + delta + (self._reduce(m) if reduce else 0)

    def _shift(self, ph: Phase, T: np.ndarray, dist: int, m: float, reduce: bool) -> np.ndarray:
        """Every member sends m bytes to the member `dist` places on, and waits for its own."""
        src = ph.members
        dst = np.roll(src, -dist, axis=1)
        arrival = self.f.send(src, dst, m, T)  # at dst
        return self._finish(T, np.roll(arrival, dist, axis=1), m, reduce, ph.local)

    def _pairwise(
        self, ph: Phase, T: np.ndarray, dist: int, m: float, reduce: bool, reduce_bytes: float | None = None
    ) -> np.ndarray:
        """Members exchange m bytes with their partner (`partners`)."""
        p = ph.members.shape[1]
        partner = partners(p, dist)
        arrival = self.f.send(ph.members, ph.members[:, partner], m, T)
        return self._finish(T, arrival[:, partner], m if reduce_bytes is None else reduce_bytes, reduce, ph.local)

    def _direct(self, ph: Phase, T: np.ndarray, m, reduce: bool) -> np.ndarray:
        """Every member sends m bytes (or matrix m[i, j]) to every other at once, in a rotated
        order; waits for all it receives."""
        g, p = ph.members.shape
        k = np.arange(1, p)
        src_idx = np.broadcast_to(np.arange(p)[:, None], (p, p - 1))
        dst_idx = (src_idx + k[None, :]) % p
        src = ph.members[:, src_idx]
        dst = ph.members[:, dst_idx]
        size = m[src_idx, dst_idx] if isinstance(m, np.ndarray) else m
        arrival = self.f.send(src, dst, size, np.broadcast_to(T[:, :, None], src.shape))
        last = np.zeros((g, p), np.int64)
        np.maximum.at(last, (np.arange(g)[:, None, None], dst_idx[None, :, :].repeat(g, 0)), arrival)
        return self._finish(T, last, float(np.max(m)) if isinstance(m, np.ndarray) else m, reduce, ph.local)

    def _direct_all_reduce(self, ph: Phase, T: np.ndarray, m: float) -> np.ndarray:
        """ASTRA-sim's direct all-reduce (`AllToAll::run`): every member sends m bytes to every
        other; each part received is handed on after the endpoint delay and its reduction
        (time G). A member sends its all-gather half once it has received every part, at the
        first G not before the last arrival (S), but one message per G handed on so far: its
        i-th message (in the rotated order) leaves at max(i-th smallest G, S)."""
        g, p = ph.members.shape
        delta = LOCAL_DELAY if ph.local else self.delta
        src_idx = np.broadcast_to(np.arange(p)[:, None], (p, p - 1))
        dst_idx = (src_idx + np.arange(1, p)[None, :]) % p
        src, dst = ph.members[:, src_idx], ph.members[:, dst_idx]
        got = np.empty((g, p, p - 1), np.int64)  # got[:, j, k]: arrival at j of the part from j - k - 1
        arrival = self.f.send(src, dst, m, np.broadcast_to(T[:, :, None], src.shape))
        got[:, dst_idx, np.arange(p - 1)[None, :]] = arrival
        G = np.sort(got, axis=2) + delta + self._reduce(m)
        last = got.max(axis=2, keepdims=True)
        S = np.where(G >= last, G, np.iinfo(np.int64).max).min(axis=2, keepdims=True)
        arrival = self.f.send(src, dst, m, np.maximum(G, S))
        got[:, dst_idx, np.arange(p - 1)[None, :]] = arrival
        done = got.max(axis=2) + delta + (self._reduce(m) if ph.local else 0)
        return check_clock(np.maximum(T, done), "a collective's end")

    def hand_on_delays(self, ph: Phase, window: int, m: float) -> np.ndarray:
        """packet_flow, ASTRA-sim's AllToAll with a window: how long after the q-th completed receive
        (in time order) its packet is handed on (`Ring::insert_packet`): the endpoint delay,
        plus a reduction for a processed packet (cycles of `window` plain packets, then `window`
        processed ones, p-1 times as many on a communicator's Local ring; an all-reduce's
        every other such block only)."""
        p, op = ph.members.shape[1], ph.op
        w = 2 * (p - 1) if op == AR else p - 1
        plain = window * (p - 1) if ph.local else window  # processed packets per block
        q = np.arange(w)  # completion rank, from 0
        pos, cycle = (window + q) % (window + plain), (window + q) // (window + plain)
        processed = (pos >= window) & ((op == RS) | ((op == AR) & (cycle % 2 == 0)))
        return (LOCAL_DELAY if ph.local else self.delta) + np.where(processed, self._reduce(m), 0).astype(np.int64)

    def window_step(self, ph: Phase) -> Step | None:
        """packet_flow: the phase's AllToAll step when it runs ASTRA-sim's packet flow (`WINDOW`)."""
        if not (self.rules.packet_flow and ph.algorithm == "direct" and ph.matrix is None and ph.members.shape[1] > 1):
            return None
        sts = self.steps(ph)
        return sts[0] if len(sts) == 1 and sts[0].kind == WINDOW else None

    def _direct_window(self, ph: Phase, T: np.ndarray, window: int, m: float) -> np.ndarray:
        """packet_flow: ASTRA-sim's AllToAll with `window` < p-1 messages in flight (`AllToAll::run`,
        `Ring::insert_packet`). Message k of a member goes to the member k places on (round the
        ring again for an all-reduce's second half), and its receive from the member k places
        back is posted when it is sent: it completes at the later of the two. A member sends
        its first `window` messages at once (T: after the endpoint delay); every completed
        receive, taken in time order, hands on one packet (`hand_on_delays`), and each packet
        handed on sends the next message. An
        all-reduce's second half waits until p-1 receives completed before a packet is handed on
        (one completing at that same nanosecond comes after it: its event was queued later,
        when its message was sent): from then each packet handed on sends up to `window`
        messages, those it holds. A member ends with the last
        packet handed on. Message k's send time depends only on receives completed before it:
        without congestion the messages are priced in order, every member at once. (On the
        congestion-aware network the same flow runs on the event loop: `window.WindowRun`.)"""
        g, p = ph.members.shape
        n, op = window, ph.op
        w = 2 * (p - 1) if op == AR else p - 1
        add = self.hand_on_delays(ph, window, m)
        dist = np.arange(w) % (p - 1) + 1
        src = np.broadcast_to(np.arange(p)[:, None], (p, w))
        dst = (src + dist[None, :]) % p
        cost = self.f.send(ph.members[:, src], ph.members[:, dst], m, 0)  # (g, p, w): uncontended, from 0
        alike = uniform(T) and bool((cost == cost[:1, :1, :]).all())  # every member the same timeline
        T0 = T[:1, :1] if alike else T
        first = np.broadcast_to(T0[:, :, None], T0.shape + (n,))

        def send_time(done: np.ndarray, k: int) -> np.ndarray:
            """Send time of message k (from `window` on) given the receives completed so far
            (sorted): every one is handed on at or after T, after the first `window` packets."""
            given = done + add[: done.shape[2]]  # when each completed receive hands its packet on
            if k < p - 1:
                return np.partition(given, k - n, axis=2)[:, :, k - n]
            # all-reduce, second half: from the first packet handed on after the (p-1)-th receive (strictly)
            handed = np.sort(np.concatenate([first, given], axis=2), axis=2)
            c = handed.shape[2]
            idx = np.arange(c)
            start = np.where((idx >= p - 1) & (handed > done[:, :, p - 2 : p - 1]), idx, c).min(axis=2)
            at = np.minimum(np.maximum(k, start - 1 - (-(k - p + 2) // n)), c - 1)
            return np.take_along_axis(handed, at[:, :, None], axis=2)[:, :, 0]

        def completion(send: np.ndarray, k: int) -> np.ndarray:
            """When each member's receive of message k completes (each sent it at `send`): the
            later of its arrival and the receive's post, with this member's own send."""
            if alike:
                return send + cost[0, 0, k]
            at_dst = np.empty_like(send)
            at_dst[:, dst[:, k]] = send + cost[:, :, k]
            return np.maximum(at_dst, send)

        send = np.broadcast_to(T0, T0.shape).copy()
        done = np.empty(T0.shape + (0,), np.int64)  # completed receives, sorted (grown one message at a time)
        for k in range(w):
            if k >= n:
                send = send_time(done, k)
            got = completion(send, k)
            done = np.sort(np.concatenate([done, got[:, :, None]], axis=2), axis=2, kind="stable")  # two runs
        end = np.broadcast_to((done + add).max(axis=2), T.shape)
        return check_clock(np.maximum(T, end), "a collective's end")

    def _binary_tree(self, ph: Phase, T: np.ndarray) -> np.ndarray:
        """tree_turns doubleBinaryTree: ASTRA-sim's DoubleBinaryTreeAllReduce on this chunk's tree
        (`tree_of`). Whole-size messages. Up: a leaf sends after the endpoint delay; a node
        with children sends once the later child's part arrived (not before it started),
        plus the endpoint delay and a reduction. The root, above the tree's top with one
        child, finishes on its child's part (+ delay + reduction) and sends it down; each
        node finishes on its parent's part (not before it sent up), + delay + reduction,
        sending on to its children; a leaf finishes on it + the delay. Parts of one level of
        the tree are priced as one batch."""
        g, p = ph.members.shape
        parent, height = tree_of(p, ph.tree)
        D, d, red = float(ph.nbytes), self.delta, self._reduce(float(ph.nbytes))
        top = int(height.max())
        root = int(np.flatnonzero(height == top)[0])
        rows = np.arange(g)[:, None]
        up, got = np.zeros_like(T), np.zeros_like(T)  # when each sends up; latest part it got from below
        got[:] = T
        for h in range(top):
            lvl = np.flatnonzero(height == h)
            up[:, lvl] = T[:, lvl] + d if h == 0 else got[:, lvl] + d + red
            arrival = self.f.send(ph.members[:, lvl], ph.members[:, parent[lvl]], D, up[:, lvl])
            np.maximum.at(got, (rows, parent[lvl][None, :]), arrival)
        done = np.zeros_like(T)
        done[:, root] = got[:, root] + d + red
        for h in range(top - 1, -1, -1):
            lvl = np.flatnonzero(height == h)
            arrival = self.f.send(ph.members[:, parent[lvl]], ph.members[:, lvl], D, done[:, parent[lvl]])
            done[:, lvl] = np.maximum(arrival, up[:, lvl]) + d + (red if h > 0 else 0)
        return check_clock(done, "a collective's end")
