"""Congestion-aware collectives on the event loop, in simulated-time order across everything in flight.

ASTRA-sim's congestion-aware backend moves a message link by link, each link serving messages
in the order they reach it, on the one event queue its system layer also runs on: each NPU
sends an algorithm step's messages when what it waited for has arrived, and takes its next
chunk for a dimension when its own slot there is free. So here:

- `Mover`: messages move one hop at a time, at the time they reach each link (the model's
  `serve`, `backend.ContendedModel`); a message passes another that reaches the link later,
  whichever collective sent it.
- `PhaseRun`: one chunk's phase, each member running its operations (`program`) on its own:
  it sends as soon as its previous operation's messages arrived, not when every member's did.
- `window.WindowRun` (`Rules.packet_flow`): a direct phase as ASTRA-sim's AllToAll, packet by packet.
- `InFlight`: one collective; each member starts a chunk's next phase when the chunk is ready
  there and a slot of the phase's dimension is free there (`Collectives.run`'s choice, made per
  member at that time).

Repeated shift steps that every member runs in lock step on links of their own are added in
closed form while nothing else touches those links (the model's `open_run`), one engine event per
copy (all at once when no other event can come first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .backend import ContendedModel
from .network import check_clock
from .program import Op, program
from .window import WindowRun

INF = np.iinfo(np.int64).max


class Mover:
    """Moves batches of messages hop by hop on the engine; calls back as they arrive."""

    def __init__(self, engine, fabric: ContendedModel):
        self.engine = engine
        self.f = fabric

    def send(self, src, dst, nbytes, t: np.ndarray, arrived: Callable, table: tuple | None = None) -> None:
        """Send message i from src[i] to dst[i] at t[i]; `arrived(indices, times)` once some
        have reached their destinations (called when their last hop is taken). `table`: their
        routes (the model's `table`) and costs per hop (`costs`, None: worked out here), when
        known."""
        links, dims, nhops, alone = (self.f.table(src, dst) if table is None else table)[:4]
        costs = table[4] if table is not None and len(table) > 4 else None
        # together: every message has the same hops and has taken the same number of them
        together = bool(nhops.size) and int(nhops.min()) == int(nhops.max()) > 0
        batch = [links, dims, nhops, nbytes, t.copy(), np.zeros(src.size, np.int64), alone, arrived, nhops == 0]
        batch += [together, 0, costs]
        first = int(t.min(initial=0))
        if first > self.engine.now:
            self.engine.at(first, self._hop, batch)
        else:
            self._hop(batch, True)

    def _hop(self, batch: list, sending: bool = False) -> None:
        """Messages that reach a link now take it. (Those that arrive while their batch is
        being sent are handed over in an event of their own: the sender is mid-step.)"""
        links, dims, nhops, nbytes, at, hop, alone, arrived, done, together, k, costs = batch
        now = self.engine.now
        if sending:
            arrived = _Later(self.engine, arrived)
        if together and int(at.max(initial=0)) <= now:  # every message takes its k-th hop now
            c = costs[k] if costs is not None else None
            at[:] = self.f.serve(links[:, k], dims[:, k], nbytes, at, alone, c)
            k = batch[10] = k + 1
            if k == int(nhops[0]):
                arrived(np.arange(at.size), at)
            else:
                self.engine.at(max(int(at.min()), now), self._hop, batch)
            return
        if together:  # from here on, message by message
            hop[:] = k
            batch[9] = False
        m = np.flatnonzero((hop < nhops) & (at <= now))
        if m.size:
            km = hop[m]
            at[m] = self.f.serve(links[m, km], dims[m, km], nbytes[m], at[m], alone)
            hop[m] += 1
        landed = np.flatnonzero((hop >= nhops) & ~done)
        done[landed] = True
        left = hop < nhops
        if left.any():
            self.engine.at(max(int(at[left].min()), now), self._hop, batch)
        if landed.size:
            arrived(landed, at[landed])


class _Later:
    """A callback run in an event of its own at the current time."""

    def __init__(self, engine, callback: Callable):
        self.engine, self.callback = engine, callback

    def __call__(self, i: np.ndarray, at: np.ndarray) -> None:
        self.engine.at(self.engine.now, self.callback, i, at.copy())


class PhaseRun:
    """One chunk's phase: every member runs the phase's operations in order on its own."""

    def __init__(self, flight: InFlight, ph, chunk: int, index: int):
        self.flight, self.ph, self.chunk, self.index = flight, ph, chunk, index
        self.ops, self.lead = flight.runner.program(ph)
        self.npu = ph.members.ravel()  # NPU of each member (groups x members, flattened)
        self.pos = np.empty(flight.f.npus, np.int64)  # member of each NPU (where it is one)
        self.pos[self.npu] = np.arange(self.npu.size)
        n = self.npu.size
        self.X = np.zeros(n, np.int64)  # each member's time
        self.pc = np.zeros(n, np.int64)  # its operation
        self.cp = np.zeros(n, np.int64)  # the copy of that operation
        self.sent = np.zeros(n, bool)  # it sent its messages of that copy
        self.slot = np.zeros(n, np.int64)  # the dimension slot it runs in
        self.acc: dict[tuple[int, int], list] = {}  # arrivals per (operation, copy)
        self.real = (-1, -1)  # the copy that a closed form just gave back: priced, not retried
        self.all = np.arange(n)
        self.joined = self.ended = 0  # members that started it, that finished it
        self.lock: tuple[int, int, bool] | None = None  # (operation, copy, sent) of every member, when one

    def join(self, u: np.ndarray, t0, slot: int) -> None:
        """Members u start the phase at t0."""
        self.X[u] = t0 + self.lead
        self.slot[u] = slot
        self.joined += u.size
        self.lock = (0, 0, False) if u.size == self.X.size else None
        self._advance(u)

    def _advance(self, u: np.ndarray) -> None:
        """Members u go on as far as what they wait for has arrived."""
        ops, todo, n = self.ops, [u], self.X.size
        while todo:
            u = todo.pop()
            if u.size == n and self.joined == n and self._together():
                continue
            end = self.pc[u] >= len(ops)
            if end.any():
                self._end(u[end])
                u = u[~end]
            if not u.size:
                continue
            s, c = int(self.pc[u[0]]), int(self.cp[u[0]])
            same = (self.pc[u] == s) & (self.cp[u] == c)
            if not bool(same.all()):
                todo.append(u[~same])
                u = u[same]
            op = ops[s]
            fresh = u[~self.sent[u]]
            if fresh.size:
                self._send(op, s, c, fresh)
                u = u[(self.pc[u] == s) & (self.cp[u] == c)]  # (those that what arrived at once moved on)
            acc = self.acc.get((s, c))
            got = acc[0][u] if acc is not None else np.zeros(u.size, np.int64)
            u = u[got >= op.need[u]]
            if u.size:
                self.lock = None
                self._receive(op, s, c, u, acc)
                nxt = self.cp[u] + 1 < op.repeat
                self.cp[u] = np.where(nxt, self.cp[u] + 1, 0)
                self.pc[u] += ~nxt
                self.sent[u] = False
                todo.append(u)

    def _together(self) -> bool:
        """Every member at one copy of one operation (lock step, the usual case): moved on with
        whole arrays, as far as they all can. False (nothing done) where they are not."""
        ops = self.ops
        while True:
            if self.lock is None:
                s, c = int(self.pc[0]), int(self.cp[0])
                sent = bool(self.sent[0])
                if not ((self.pc == s).all() and (self.cp == c).all() and (self.sent == sent).all()):
                    return False
                self.lock = (s, c, sent)
            s, c, sent = self.lock
            if s >= len(ops):
                self._end(self.all)
                return True
            if c > 0 and not sent and (s, c) != self.real and self._closed(s, c):
                return True
            op = ops[s]
            if not sent:  # (what arrives at once moves members on before this returns: look again)
                self._send(op, s, c, self.all)
                continue
            acc = self.acc.get((s, c))
            if acc is None:
                if int(op.need.max(initial=0)) == 0:
                    done = True
                elif int(op.need.min(initial=0)) > 0:
                    return True  # every member waits
                else:
                    return False
            else:
                ready = acc[0] >= op.need
                if not ready.all():
                    return bool(not ready.any())
                done = True
            if done:
                self._receive(op, s, c, self.all, acc)
                if c + 1 < op.repeat:
                    self.cp += 1
                    self.lock = (s, c + 1, False)
                else:
                    self.cp[:] = 0
                    self.pc += 1
                    self.lock = (s + 1, 0, False)
                self.sent[:] = False

    def _end(self, u: np.ndarray) -> None:
        self.flight.landed(self, u, self.X[u])
        self.ended += u.size
        if self.ended == self.X.size:  # (its state is not needed any more)
            self.flight.runs.pop((self.chunk, self.index), None)

    def _send(self, op: Op, s: int, c: int, u: np.ndarray) -> None:
        if u is self.all and op.whole:  # every member sends its one message: the whole operation
            self.X += op.pre
            self.sent[:] = True
            if self.lock is not None:
                self.lock = (self.lock[0], self.lock[1], True)
            self._send_all(op, s, c, self.X)
            return
        self.X[u] += op.pre[u]
        self.sent[u] = True
        self.lock = None
        senders = u[op.count[u] > 0]
        if not senders.size:
            return
        cnt = op.count[senders]
        total = int(cnt.sum())
        if total == senders.size:
            m, k = op.first[senders], np.zeros(total, np.int64)
        else:
            k = np.arange(total) - np.repeat(np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
            m = np.repeat(op.first[senders], cnt) + k
        who = np.repeat(senders, cnt) if total != senders.size else senders
        t = self.X[who]
        if total == op.src.size:  # the whole operation at once (lock step)
            self._send_all(op, s, c, t)
            return
        self.flight.mover.send(
            self.npu[op.src[m]],
            self.npu[op.dst[m]],
            op.nbytes[m],
            t,
            lambda i, at: self._arrived(s, c, m[i], at),
        )

    def _send_all(self, op: Op, s: int, c: int, t: np.ndarray) -> None:
        """Every message of the operation, in its order (routes worked out once)."""
        if "table" not in op.memo:
            f = self.flight.f
            op.memo["ends"] = (self.npu[op.src], self.npu[op.dst])
            links, dims, nhops, alone = f.table(*op.memo["ends"])
            costs = None
            if nhops.size and int(nhops.min()) == int(nhops.max()):  # per hop, for all messages at once
                costs = [f.costs(dims[:, k], op.nbytes) for k in range(int(nhops[0]))]
            op.memo["table"] = (links, dims, nhops, alone, costs)
        src, dst = op.memo["ends"]
        self.flight.mover.send(src, dst, op.nbytes, t, lambda i, at: self._arrived(s, c, i, at), op.memo["table"])

    def _arrived(self, s: int, c: int, m: np.ndarray, at: np.ndarray) -> None:
        op = self.ops[s]
        dst = op.dst[m]
        acc = self.acc.get((s, c))
        if acc is None and op.whole and m.size == self.X.size and self.lock == (s, c, True):
            last = np.empty(m.size, np.int64)  # every member's one message, all at once
            last[dst] = at
            self.acc[(s, c)] = [np.ones(m.size, np.int64), last, 0]
            self._advance(self.all)
            return
        if acc is None:  # [arrived per member, latest arrival per member, members done]
            n = self.X.size
            acc = self.acc[(s, c)] = [np.zeros(n, np.int64), np.zeros(n, np.int64), 0]
        if op.single:  # one message per member: no two of these share a receiver
            acc[0][dst] += 1
            acc[1][dst] = np.maximum(acc[1][dst], at)
            waiting = dst
        else:
            np.add.at(acc[0], dst, 1)
            np.maximum.at(acc[1], dst, at)
            waiting = np.unique(dst)
        if waiting.size == self.X.size == self.joined and bool((self.pc == s).all()):
            self._advance(self.all)
            return
        waiting = waiting[(self.pc[waiting] == s) & (self.cp[waiting] == c) & self.sent[waiting]]
        if waiting.size:
            self._advance(waiting)

    def _receive(self, op: Op, s: int, c: int, u: np.ndarray, acc: list | None) -> None:
        if u is self.all and op.whole and acc is not None:
            self.X = check_clock(np.maximum(self.X, acc[1]) + op.post, "a collective's end")
            del self.acc[(s, c)]
            return
        r = u[op.need[u] > 0]
        if not r.size or acc is None:
            return
        self.X[r] = check_clock(np.maximum(self.X[r], acc[1][r]) + op.post[r], "a collective's end")
        acc[2] += r.size
        if acc[2] >= int((op.need > 0).sum()):
            del self.acc[(s, c)]

    def _closed(self, s: int, c: int) -> bool:
        """Every member is at copy c of a repeated shift step, at one time, with nothing of this
        phase in flight: the copies left cost the uncontended step time while their links stay
        free and untouched (the model's `open_run`). Returns True when the run took over."""
        op, fl = self.ops[s], self.flight
        if not (op.closed and fl.coll.shortcuts and int(self.X.min()) == int(self.X.max())):
            return False
        if int(op.post.min()) != int(op.post.max()):
            return False
        if "cost" not in op.memo:
            src, dst = self.npu[op.src], self.npu[op.dst]
            op.memo["cost"] = fl.f.alone_cost(src, dst, op.nbytes)
            op.memo["run"] = fl.f.run_layout(src, dst, op.nbytes) if op.memo["cost"] is not None else None
        cost = op.memo["cost"]
        if cost is None:
            return False
        t = int(self.X[0])
        rid = fl.f.open_run(op.memo["run"], t)
        if rid is None:
            return False
        fl.engine.at(t, self._copy, rid, s, t, cost + int(op.post[0]), 0, op.repeat - c)
        return True

    def _copy(self, rid: int, s: int, t: int, inc: int, done: int, n: int) -> None:
        """Copies of the step from `t` on, each added while nothing else can reach its links
        first: as many at once as come before the next waiting event (one whose later hops
        that event could precede: none)."""
        fl = self.flight
        due, late = fl.engine.next_time(), fl.f.run_late(rid)
        k = n - done if due is None else min(n - done, max(0, (due - 1 - t - late) // inc + 1))
        if k and fl.f.step_run(rid, t + (k - 1) * inc, k):
            done += k
            if done < n:
                fl.engine.at(t + k * inc, self._copy, rid, s, t + k * inc, inc, done, n)
                return
        fl.f.close_run(rid)
        fl.coll.closed_form_steps += done
        self.X += done * inc
        check_clock(self.X, "a collective's end")
        self.cp += done
        if int(self.cp[0]) >= self.ops[s].repeat:
            self.cp[:] = 0
            self.pc += 1
        self.real = (int(self.pc[0]), int(self.cp[0]))
        self.lock = (self.real[0], self.real[1], False)
        self._advance(self.all)


class InFlight:
    """One collective (plan) on the engine. Per member, a chunk's next phase starts when the
    chunk is ready there and a slot of the phase's dimension is free there (at most
    `active_chunks_per_dimension`), chosen as `Collectives.run` chooses; `then` gets each
    member's finish once every member finished."""

    def __init__(self, runner: Runner, plan, npus: np.ndarray, start: np.ndarray, policy: str, then):
        self.runner = runner
        self.coll, self.engine, self.f, self.mover = runner.coll, runner.engine, runner.f, runner.mover
        self.plan, self.npus, self.policy, self.then = plan, npus, policy, then
        n, chunks = npus.size, plan.chunks
        self.local = np.full(self.f.npus, -1, np.int64)
        self.local[npus] = np.arange(n)
        self.dims = sorted({ph.dim for ph in plan.phases})
        self.slots = max(1, int(self.coll.sys.active_chunks_per_dimension))
        self.nxt = np.zeros((chunks, n), np.int64)  # next phase of each chunk, per member
        self.rdy = np.tile(start, (chunks, 1)).astype(np.int64)  # when it is ready for it (INF: running)
        self.seq = np.tile(np.arange(chunks, dtype=np.int64)[:, None], (1, n))
        self.order = np.zeros(n, np.int64)
        self.sfree = {d: np.tile(start, (self.slots, 1)).astype(np.int64) for d in self.dims}
        self.fin = start.copy()
        self.left = np.full(n, chunks, np.int64)
        self.runs: dict[tuple[int, int], PhaseRun | WindowRun] = {}
        self.pdim = np.array([ph.dim for ph in plan.phases] + [0], np.int64)
        if not plan.phases:
            then(start.copy())
            return
        self.decide(np.arange(n))

    def decide(self, u: np.ndarray) -> None:
        """Members u start what they can now: per dimension with a free slot, the chunk whose
        phase can start first (ties: `Rules.arrival_order`, the one ready first, then the one
        queued first; else by scheduling policy)."""
        while u.size:
            if u.size > 1 and self._alike(u):  # members in one state choose alike: one stands for all
                one = self._choose(u[:1])
                if one[0, 0] == INF:
                    return
                c, d, k = one[3:6, 0].tolist()
                self._launch(int(c), int(d), int(k), u, int(one[0, 0]))
                continue
            key = self._choose(u)
            go = key[0] < INF
            if not go.any():
                return
            u, key = u[go], key[:, go]
            # launch, grouped by (chunk, dimension, slot)
            which = key[3:6]
            if bool((which == which[:, :1]).all()):
                c, d, k = which[:, 0].tolist()
                self._launch(int(c), int(d), int(k), u, key[0])
                continue
            for c, d, k in np.unique(which, axis=1).T.tolist():
                sel = (key[3] == c) & (key[4] == d) & (key[5] == k)
                self._launch(int(c), int(d), int(k), u[sel], key[0][sel])

    def _alike(self, u: np.ndarray) -> bool:
        a = u[:1]
        whole = u.size == self.npus.size  # (every member: no copies)
        for arr in (self.nxt, self.rdy, self.seq, *(self.sfree[d] for d in self.dims)):
            part = arr if whole else arr[:, u]
            if not bool((part == arr[:, a]).all()):
                return False
        return True

    def _choose(self, u: np.ndarray) -> np.ndarray:
        """Per member of u: (start, tie, tie, chunk, dimension, slot) of what it starts now
        (start INF: nothing)."""
        now, plan = self.engine.now, self.plan
        nphase = len(plan.phases)
        best = np.full((6, u.size), INF, np.int64)
        for d in self.dims:
            sf = self.sfree[d][:, u]
            k = np.argmin(sf, axis=0)
            tf = sf[k, np.arange(u.size)]
            for c in range(plan.chunks):
                nx = self.nxt[c, u]
                ok = (nx < nphase) & (self.pdim[np.minimum(nx, nphase)] == d) & (self.rdy[c, u] <= now)
                ok &= tf <= now
                if not ok.any():
                    continue
                t = np.maximum(self.rdy[c, u], tf)
                if self.coll.rules.arrival_order:
                    tie = [self.rdy[c, u], self.seq[c, u]]
                else:
                    tie = [-self.seq[c, u] if self.policy == "LIFO" else self.seq[c, u], np.zeros(u.size, np.int64)]
                cand = np.vstack([t, *tie, np.full(u.size, c), np.full(u.size, d), k])
                better = ok & _lex_less(cand[:4], best[:4])
                best = np.where(better[None, :], cand, best)
        return best

    def _launch(self, c: int, d: int, k: int, u: np.ndarray, t0) -> None:
        i_all = self.nxt[c, u]
        self.order[u] += 1
        self.seq[c, u] = self.plan.chunks + self.order[u]
        self.nxt[c, u] += 1
        self.rdy[c, u] = INF
        self.sfree[d][k, u] = INF
        lo = int(i_all.min(initial=0))
        for i in [lo] if lo == int(i_all.max(initial=0)) else np.unique(i_all).tolist():
            sel = slice(None) if lo == int(i_all.max(initial=0)) else i_all == i
            run: PhaseRun | WindowRun | None = self.runs.get((c, i))
            if run is None:
                ph = self.plan.phases[i]
                if ph.trees:
                    ph = replace(ph, tree=ph.trees[c])
                st = self.coll.window_step(ph)
                run = self.runs[(c, i)] = PhaseRun(self, ph, c, i) if st is None else WindowRun(self, ph, c, i, st)
            us = u[sel]
            run.join(run.pos[self.npus[us]], t0 if np.isscalar(t0) else t0[sel], k)

    def landed(self, run: PhaseRun | WindowRun, m: np.ndarray, t: np.ndarray) -> None:
        """Members m of a phase finished it at t (now or later): then their slot is free and
        the chunk ready for its next phase there."""
        lo = int(t.min(initial=0))
        for when in [lo] if lo == int(t.max(initial=0)) else np.unique(t).tolist():
            sel = m if when == lo and lo == int(t.max(initial=0)) else m[t == when]
            self.engine.at(max(int(when), self.engine.now), self._free, run, sel, int(when))

    def _free(self, run: PhaseRun | WindowRun, m: np.ndarray, t: int) -> None:
        c, i = run.chunk, run.index
        u = self.local[run.npu[m]]
        d = int(self.pdim[i])
        self.sfree[d][run.slot[m], u] = t
        if i + 1 < len(self.plan.phases):
            self.rdy[c, u] = t
        else:
            self.left[u] -= 1
            self.fin[u] = np.maximum(self.fin[u], t)
        if not self.left.any():
            self.then(self.fin.copy())
            return
        self.decide(u[self.left[u] > 0])


def _lex_less(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Column-wise a < b, lexicographic over rows."""
    less = np.zeros(a.shape[1], bool)
    eq = np.ones(a.shape[1], bool)
    for r in range(a.shape[0]):
        less |= eq & (a[r] < b[r])
        eq &= a[r] == b[r]
    return less


class Runner:
    """Runs congestion-aware collectives on an engine (`InFlight`)."""

    def __init__(self, engine, fabric: ContendedModel, coll):
        self.engine, self.f, self.coll = engine, fabric, coll
        self.mover = Mover(engine, fabric)
        self._programs: dict[tuple, tuple[list[Op], int]] = {}

    def program(self, ph) -> tuple[list[Op], int]:
        """`program(ph)`, kept for phases over a dimension's rows (the same in every collective
        of that kind), so that what is worked out about their messages is worked out once."""
        if ph.dim < 0 or ph.matrix is not None:
            return program(self.coll, ph)
        key = (ph.op, ph.dim, ph.nbytes, ph.algorithm, ph.local, ph.tree, bool(ph.trees), ph.members.shape)
        hit = self._programs.get(key)
        if hit is None:
            if len(self._programs) > 256:
                self._programs.clear()
            hit = self._programs[key] = program(self.coll, ph)
        return hit

    def run(self, plan, npus: np.ndarray, start: np.ndarray, policy: str, then: Callable) -> None:
        InFlight(self, plan, npus, start, policy, then)
