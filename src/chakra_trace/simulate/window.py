"""`Rules.packet_flow`: ASTRA-sim's windowed AllToAll (`directN`) on a contended network, packet by packet.

With a window of N < p-1, each member keeps N messages in flight and sends the next when a
packet is handed on (`AllToAll::run`, `Ring::ready`): the send times depend on when the member's
own receives complete, so they cannot be written as a fixed list of operations (`program`).
`WindowRun` runs the flow on the event loop, each member on its own; the messages move hop by
hop through the shared `Mover`, so links serve them in arrival order with whatever else is in
flight. The congestion-unaware closed form of the same flow is `Collectives._direct_window`.

Per member (p members, w = p-1 messages, 2(p-1) for an all-reduce; message k goes k mod (p-1)
+ 1 places on, and the receive of the message k places back is posted when it is sent):

- at its start (after the endpoint delay) N packets are handed on: each sends one message;
- a receive completes at the later of its message's arrival and its post; the q-th completion
  hands its packet on `hand_on_delays[q]` later;
- each packet handed on sends the next message, until p-1 are sent; an all-reduce's second
  half waits until p-1 receives completed, then each packet handed on sends up to N messages,
  as many as the member holds (packets handed on and not yet used). A receive completing at
  the nanosecond a packet is handed on counts for it only when its event was queued first (as
  ASTRA-sim's event list takes events of one time in the order they were queued);
- the member ends with its last packet handed on (N + w in all).
"""

from __future__ import annotations

import numpy as np

from .algorithms import AR, LOCAL_DELAY
from .network import check_clock

INF = np.iinfo(np.int64).max


class WindowRun:
    """One chunk's windowed direct phase on the engine (the interface of `inflight.PhaseRun`)."""

    def __init__(self, flight, ph, chunk: int, index: int, step):
        self.flight, self.ph, self.chunk, self.index = flight, ph, chunk, index
        coll = flight.coll
        g, p = ph.members.shape
        self.p, self.win = p, int(step.dist)
        self.w = 2 * (p - 1) if ph.op == AR else p - 1
        self.m = float(step.nbytes)
        self.add = coll.hand_on_delays(ph, self.win, self.m)
        self.lead = LOCAL_DELAY if ph.local else coll.delta
        self.npu = ph.members.ravel()  # NPU of each member (groups x members, flattened)
        self.pos = np.empty(flight.f.npus, np.int64)
        self.pos[self.npu] = np.arange(self.npu.size)
        n = self.npu.size
        self.base = (np.arange(n) // p) * p  # the member's group's first member
        self.dist = np.arange(self.w) % (p - 1) + 1  # message k goes this many places on
        self.slot = np.zeros(n, np.int64)
        self.posted = np.full((n, self.w), -1, np.int64)  # when it sent message k (its receive k posted)
        self.arrived = np.full((n, self.w), -1, np.int64)  # when the message k places back reached it
        self.done = np.full((n, self.w), INF, np.int64)  # when its receive k completes (INF: not known yet)
        self.known = np.full((n, self.w), INF, np.int64)  # when that became known (its event's insertion)
        self.ncomp = np.zeros(n, np.int64)  # completions taken (in time order)
        self.handed = np.zeros(n, np.int64)  # packets handed on
        self.sent = np.zeros(n, np.int64)  # messages sent
        self.ended = 0

    def join(self, u: np.ndarray, t0, slot: int) -> None:
        """Members u start the phase at t0."""
        self.slot[u] = slot
        t = np.broadcast_to(np.asarray(t0, np.int64), u.shape) + self.lead
        eng = self.flight.engine
        for when in np.unique(t).tolist():  # (a start before now, a member's own time: `Engine.late`)
            eng.late(int(when), self._start, u[t == when])

    def _start(self, u: np.ndarray) -> None:
        """The first N packets are handed on: N messages each."""
        n = min(self.win, self.w)
        self.handed[u] += n
        self._send(np.repeat(u, n), np.tile(np.arange(n), u.size))

    def _send(self, u: np.ndarray, k: np.ndarray) -> None:
        """Members u send their message k now (and post their receive k)."""
        now = self.flight.engine.now
        self.posted[u, k] = now
        np.add.at(self.sent, u, 1)
        early = self.arrived[u, k] >= 0  # its receive k's message is already here: completes now
        if early.any():
            self._known(u[early], k[early], np.full(int(early.sum()), now, np.int64))
        v = self.base[u] + (u - self.base[u] + self.dist[k]) % self.p
        self.flight.mover.send(
            self.npu[u],
            self.npu[v],
            np.full(u.size, self.m),
            np.full(u.size, now, np.int64),
            lambda i, at: self._landed(v[i], k[i], at),
        )

    def _landed(self, v: np.ndarray, k: np.ndarray, at: np.ndarray) -> None:
        """Message k reached members v at `at` (now or later)."""
        self.arrived[v, k] = at
        posted = self.posted[v, k] >= 0
        if posted.any():
            v, k = v[posted], k[posted]
            self._known(v, k, np.maximum(at[posted], self.posted[v, k]))

    def _known(self, v: np.ndarray, k: np.ndarray, c: np.ndarray) -> None:
        """Receives k of members v complete at c: each is taken at its time."""
        self.done[v, k] = c
        self.known[v, k] = self.flight.engine.now
        eng = self.flight.engine
        for t in np.unique(c).tolist():
            eng.at(max(t, eng.now), self._complete, v[c == t])

    def _complete(self, v: np.ndarray) -> None:
        """The next receives (in time order) of members v completed: their packets are handed
        on later (a member twice in v: two receives)."""
        _, rank = _ranks(v)
        q = self.ncomp[v] + rank
        np.add.at(self.ncomp, v, 1)
        now = self.flight.engine.now
        at = now + self.add[q]
        for t in np.unique(at).tolist():
            self.flight.engine.at(t, self._hand, v[at == t], now)

    def _hand(self, v: np.ndarray, since: int) -> None:
        """A packet of each member of v is handed on: it sends what it may (a member twice in
        v: two packets, one after the other). ``since``: when this event was scheduled."""
        first, _ = _ranks(v)
        if not first.all():
            self._hand(v[first], since)
            self._hand(v[~first], since)
            return
        now, p, w = self.flight.engine.now, self.p, self.w
        self.handed[v] += 1
        s = self.sent[v]
        one = s < p - 1  # the first p-1 messages: one per packet
        if one.any():
            self._send(v[one], s[one])
        # an all-reduce's second half, once p-1 receives completed: up to N messages, those held
        more = ~one & (s < w)
        if more.any():
            j = v[more]
            # (a receive completing now counts when its event came first: known before this one)
            done, known = self.done[j], self.known[j]
            ready = ((done < now) | ((done == now) & (known < since))).sum(axis=1) >= p - 1
            j, sj = j[ready], s[more][ready]
            cnt = np.minimum(np.minimum(self.win, self.handed[j] - sj), w - sj)
            if int(cnt.sum()) > 0:
                u = np.repeat(j, cnt)
                k = np.repeat(sj, cnt) + _within(cnt)
                self._send(u, k)
        end = v[self.handed[v] == min(self.win, w) + w]  # their last packet: they end
        if end.size:
            check_clock(np.array([now]), "a collective's end")
            self.flight.landed(self, end, np.full(end.size, now, np.int64))
            self.ended += end.size
            if self.ended == self.npu.size:
                self.flight.runs.pop((self.chunk, self.index), None)


def _ranks(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of v: whether it is its value's first, and how many of that value come before it."""
    if v.size < 2:
        return np.ones(v.size, bool), np.zeros(v.size, np.int64)
    order = np.argsort(v, kind="stable")
    sv = v[order]
    start = np.r_[True, sv[1:] != sv[:-1]]
    grp = np.cumsum(start) - 1
    firsts = np.flatnonzero(start)
    rank = np.empty(v.size, np.int64)
    rank[order] = np.arange(v.size) - firsts[grp]
    return rank == 0, rank


def _within(cnt: np.ndarray) -> np.ndarray:
    """0 .. c-1 for each count c, concatenated."""
    return np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
