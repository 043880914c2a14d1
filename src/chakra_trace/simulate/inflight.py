"""Congestion-aware collectives on the event loop: each algorithm step is priced when it is sent.

On a congestion-aware network a message's time depends on every other message on its links,
so the steps of everything in flight (chunks whose phases overlap, collectives of different
groups, collectives issued while others run) are priced in simulated-time order, one engine
event per step, as ASTRA-sim's event queue serves them: a later step's messages pass an earlier
phase's later steps. A chunk's next phase is chosen, as in `Collectives.run`, among the phases
that can start first, once no phase still in flight can start before it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace

import numpy as np

from .requests import SEND


class Stepper:
    """Answers algorithms' requests (`requests`) on the engine, in simulated-time order."""

    def __init__(self, engine, fabric):
        self.engine = engine
        self.f = fabric

    def start(self, gen: Generator, then: Callable[[np.ndarray], None]) -> None:
        """Run `gen`; `then(result)` once it returns."""
        self._advance(gen, then, None)

    def _advance(self, gen: Generator, then: Callable, reply) -> None:
        f, now = self.f, self.engine.now
        while True:
            try:
                req = gen.send(reply)
            except StopIteration as stop:
                then(stop.value)
                return
            if req[0] == SEND:
                _, src, dst, nbytes, t = req
                src = np.asarray(src, np.int64)
                shape = src.shape
                src, dst = src.ravel(), np.asarray(dst, np.int64).ravel()
                nbytes = np.broadcast_to(np.asarray(nbytes, float), shape).ravel()
                at = np.broadcast_to(np.asarray(t, np.int64), shape).ravel().copy()
                links, dims, nhops, alone = f.table(src, dst)
                batch = (links, dims, nhops, nbytes, at, np.zeros(src.size, np.int64), shape, alone)
                first = int(at.min(initial=0))
                if first > now:
                    self.engine.at(first, self._hop, gen, then, batch)
                    return
                reply = self._hops(batch)
                if reply is None:
                    self._next(gen, then, batch)
                    return
                continue
            else:
                _, src, dst, nbytes, t, inc, n = req
                rid = f.open_run(src, dst, nbytes, t)
                if rid is None:
                    reply = 0
                    continue
                self.engine.at(t, self._copy, gen, then, rid, t, inc, 0, n)
                return

    def _hops(self, batch: tuple) -> np.ndarray | None:
        """Move every message of a batch that reached its next link by now one hop on; each
        message's arrival once all have arrived, else None."""
        links, dims, nhops, nbytes, at, hop, shape, alone = batch
        now = self.engine.now
        k = int(hop[0]) if hop.size else 0
        if int(at.max(initial=0)) <= now and bool((hop == k).all()) and bool((nhops > k).all()):
            at[:] = self.f.serve(links[:, k], dims[:, k], nbytes, at, alone)  # (all at once: lockstep)
            hop += 1
        else:
            m = np.flatnonzero((hop < nhops) & (at <= now))
            if m.size:
                k_m = hop[m]
                at[m] = self.f.serve(links[m, k_m], dims[m, k_m], nbytes[m], at[m], alone)
                hop[m] += 1
        return at.reshape(shape) if bool((hop >= nhops).all()) else None

    def _next(self, gen: Generator, then: Callable, batch: tuple) -> None:
        links, dims, nhops, nbytes, at, hop, shape, alone = batch
        # (a message sent before now, by a member that started its phase before the phase was
        # chosen, moves on at once)
        self.engine.at(max(int(at[hop < nhops].min()), self.engine.now), self._hop, gen, then, batch)

    def _hop(self, gen: Generator, then: Callable, batch: tuple) -> None:
        """A batch's messages that reach a link now take it (ASTRA-sim moves a message link by
        link, each queued in arrival order): a later batch's message passes an earlier one's
        that reaches the link later."""
        reply = self._hops(batch)
        if reply is None:
            self._next(gen, then, batch)
        else:
            self._advance(gen, then, reply)

    def _copy(self, gen: Generator, then: Callable, rid: int, t: int, inc: int, done: int, n: int) -> None:
        """One copy of a repeated step at its time: added in closed form while its links are
        untouched (`Fabric.step_run`), else the algorithm prices the rest itself."""
        # every copy left at once when nothing else can happen before the last one is sent
        due = self.engine.next_time()
        last = t + (n - done - 1) * inc
        copies = n - done if due is None or due > last else 1
        if self.f.step_run(rid, t + (copies - 1) * inc, copies):
            done += copies
            if done < n:
                self.engine.at(t + inc, self._copy, gen, then, rid, t + inc, inc, done, n)
                return
        self.f.close_run(rid)
        self._advance(gen, then, done)


class InFlight:
    """One collective (plan) on the engine: its chunks' phases queue per dimension, at most
    `active_chunks_per_dimension` at a time, chosen as `Collectives.run` chooses them; `then`
    gets each member's finish time."""

    def __init__(self, coll, stepper: Stepper, plan, npus: np.ndarray, start: np.ndarray, policy: str, then):
        self.coll, self.stepper, self.plan, self.npus, self.policy, self.then = coll, stepper, plan, npus, policy, then
        n = coll.f.npus
        self.ready = [np.zeros(n, np.int64) for _ in range(plan.chunks)]
        for r in self.ready:
            r[npus] = start
        dims = sorted({ph.dim for ph in plan.phases})
        self.slots = max(1, int(coll.sys.active_chunks_per_dimension))
        self.free = {d: [np.zeros(n, np.int64) for _ in range(self.slots)] for d in dims}
        for d in dims:
            for f in self.free[d]:
                f[npus] = start
        t0 = int(start.max())
        self.free_at = {d: [t0] * self.slots for d in dims}
        self.held = {d: [False] * self.slots for d in dims}  # a phase in flight on the slot
        self.nxt = [0] * plan.chunks
        self.ready_at = [t0] * plan.chunks
        self.seq = list(range(plan.chunks))
        self.order = 0
        self.pending = set(range(plan.chunks))
        self.flying: set[int] = set()
        self.wake: set[int] = set()  # times a `decide` is scheduled at
        self.start = start
        if not plan.phases:
            then(start.copy())
            return
        self.decide()

    def decide(self) -> None:
        """Start every phase that can start now, in `Collectives.run`'s order; wake up when the
        next one can. (A phase in flight ends after now, so no choice made now could change.)"""
        plan, now = self.plan, self.stepper.engine.now
        while True:
            choices = []
            for c in self.pending - self.flying:
                ph = plan.phases[self.nxt[c]]
                open_ = [k for k in range(self.slots) if not self.held[ph.dim][k]]
                if not open_:
                    continue
                k = min(open_, key=self.free_at[ph.dim].__getitem__)
                t = max(self.ready_at[c], self.free_at[ph.dim][k])
                tie = (
                    (self.ready_at[c], self.seq[c])
                    if self.coll.compat
                    else (-self.seq[c] if self.policy == "LIFO" else self.seq[c],)
                )
                choices.append(((t, *tie, c), c, k))
            if not choices:
                return
            key, c, k = min(choices)
            if key[0] > now:
                if key[0] not in self.wake:
                    self.wake.add(key[0])
                    self.stepper.engine.at(key[0], self._wake, key[0])
                return
            self._launch(c, k)

    def _wake(self, t: int) -> None:
        self.wake.discard(t)
        if self.pending:
            self.decide()

    def _launch(self, c: int, k: int) -> None:
        ph = self.plan.phases[self.nxt[c]]
        if ph.trees:
            ph = replace(ph, tree=ph.trees[c])
        members = ph.members.ravel()
        t0 = np.maximum(self.ready[c][members], self.free[ph.dim][k][members]).reshape(ph.members.shape)
        self.order += 1
        self.seq[c] = self.plan.chunks + self.order
        self.nxt[c] += 1
        self.held[ph.dim][k] = True
        self.flying.add(c)
        self.stepper.start(self.coll._phase(ph, t0), lambda t1: self._landed(c, ph.dim, k, members, t1))

    def _landed(self, c: int, d: int, k: int, members: np.ndarray, t1: np.ndarray) -> None:
        self.free[d][k][members] = t1.ravel()
        self.ready[c][members] = t1.ravel()
        self.ready_at[c] = self.free_at[d][k] = int(t1.max())
        self.held[d][k] = False
        self.flying.discard(c)
        if self.nxt[c] == len(self.plan.phases):
            self.pending.discard(c)
        if not self.pending and not self.flying:
            self.then(np.max(np.stack([r[self.npus] for r in self.ready]), axis=0))
        else:
            self.decide()
