"""The congestion-aware network model: every link is a FIFO.

A message moves whole from link to link along its route (`Fabric._path`); each hop costs
``latency + bytes / bandwidth`` and keeps the link busy for ``bytes / bandwidth``, each
truncated to whole ns. Link busy time is counted for the utilization report. A link serves
messages in the order they reach it: collectives move their messages one hop at a time on the
event loop (`serve`, driven by `inflight`), so a message passes another that reaches the link
later, whichever collective, chunk or step sent it. (`send` prices a message's whole route at
once: point-to-point sends.)

Repeated steps whose links stay theirs are added in closed form (`open_run` .. `close_run`):
a run stops adding copies as soon as anything else is priced on its links (`_touch`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .network import Fabric, as_ns, check_clock
from .rules import Rules


class Aware(Fabric):
    """Links as FIFOs (`backend.ContendedModel`): a message's time depends on what else is in flight."""

    name: ClassVar[str] = "aware"
    contended: ClassVar[bool] = True

    def __init__(self, network, rules: Rules):
        super().__init__(network, rules)
        self.link_free = np.zeros(self.nlinks, np.int64)  # when each link is next free
        self.link_busy = np.zeros(self.nlinks, np.int64)  # busy time of each link so far
        # steps added in closed form while their links stay theirs (`open_run`): which run
        # holds each link
        self._owner = np.full(self.nlinks, -1, np.int64)
        self._runs: dict[int, list] = {}
        self._run_ids = 0

    def send(self, src, dst, nbytes, t_send) -> np.ndarray:
        """Arrival time of each message (int64 ns), its whole route priced at once."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        nbytes = np.broadcast_to(np.asarray(nbytes, float), src.shape)
        t_send = np.broadcast_to(np.asarray(t_send, np.int64), src.shape)
        if self._runs:
            for _ms, link, _d in self._path(src.ravel(), dst.ravel()):
                self._touch(link)
        t = self._route(src.ravel(), dst.ravel(), nbytes.ravel(), t_send.ravel()).reshape(src.shape)
        return check_clock(t, "a message's arrival")

    def alone_cost(self, src, dst, nbytes) -> int | None:
        """The time every message of a batch takes on free links, when they share no link and
        all take the same (else None): then a step that finds its links free costs this."""
        src, dst = np.asarray(src, np.int64).ravel(), np.asarray(dst, np.int64).ravel()
        if not self.exclusive(src, dst):
            return None
        total = self._walk(src, dst, nbytes)[3]
        return int(total[0]) if total.size and int(total.min()) == int(total.max()) else None

    def run_layout(self, src, dst, nbytes) -> tuple:
        """What `open_run` needs of a batch (`alone_cost`): its links, when each is free again
        and how long busy after the send time, and its later hops' start (`run_late`)."""
        links, ends, busys, _total, later = self._walk(src, dst, nbytes)
        return links, ends, busys, later

    def _walk(self, src, dst, nbytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """A batch on free, uncontended links, hop by hop: each link of its routes, when it is
        free again after the send time and how long it is busy; each message's time to its
        destination; and when the latest of its later hops starts (-1: one hop each)."""
        src, dst = np.asarray(src, np.int64).ravel(), np.asarray(dst, np.int64).ravel()
        nb = np.broadcast_to(np.asarray(nbytes, float), src.shape).ravel()
        at = np.zeros(src.size, np.int64)
        links, ends, busys = [], [], []
        later = -1
        for k, (ms, link, dim) in enumerate(self._path(src, dst)):
            if k:
                later = max(later, int(at[ms].max(initial=0)))
            busy = as_ns(np.floor(nb[ms] / self.bw[dim]), "a message's time on a link")
            links.append(link)
            ends.append(at[ms] + busy)
            busys.append(busy)
            at[ms] += as_ns(np.floor(self.lat[dim] + nb[ms] / self.bw[dim]), "a message's hop")
        if not links:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty, at, later
        return np.concatenate(links), np.concatenate(ends), np.concatenate(busys), at, later

    def open_run(self, layout: tuple, t: int) -> int | None:
        """Start adding copies of a batch (`run_layout`) one by one at their times (`step_run`)
        without pricing them: refused (None) where another run holds one of its links or a link
        is not free by `t`."""
        links, ends, busy, later = layout
        if (self._owner[links] >= 0).any() or int(self.link_free[links].max(initial=0)) > t:
            return None
        rid = self._run_ids = self._run_ids + 1
        self._owner[links] = rid
        self._runs[rid] = [links, ends, busy, False, 0, t, later]  # (+ touched, pending, last, later)
        return rid

    def run_late(self, rid: int) -> int:
        """How long after a copy's send time its messages still take links (their later hops):
        anything that reaches the links before then would go first (-1: one hop each)."""
        return int(self._runs[rid][6])

    def step_run(self, rid: int, t: int, copies: int = 1) -> bool:
        """Add the copy sent at `t` (and `copies - 1` before it, with nothing else priced
        between) if nothing was priced on the run's links since it opened (then it finds them
        free and costs its uncontended time); else False."""
        run = self._runs[rid]
        if run[3]:
            return False
        run[4] += copies
        run[5] = t
        return True

    def close_run(self, rid: int) -> None:
        run = self._runs.pop(rid)
        self._settle(run)
        self._owner[run[0]] = -1

    def _settle(self, run: list) -> None:
        links, ends, busy, _touched, pending, last, _later = run
        if pending:
            self.link_free[links] = check_clock(last + ends, "a link's queue")
            self.link_busy[links] += pending * busy
            run[4] = 0

    def serve(self, link, dim, nbytes, arrive, alone: bool = False, costs: tuple | None = None) -> np.ndarray:
        """Messages reaching these links at `arrive` (no earlier message still to come): each
        link serves them after what it already took, in arrival order; when each reaches the
        next device. `alone`: no two of them share a link. `costs`: their busy and hop times
        and the sum of the one and most of the other (`costs`), when worked out before."""
        if self._runs:
            self._touch(link)
        return self._serve(link, dim, nbytes, arrive, alone, costs)

    def costs(self, dim: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Busy and hop time of each message on a link of its dimension, and what bounds a
        queue's sums (`_serve`)."""
        busy = as_ns(np.floor(nbytes / self.bw[dim]), "a message's time on a link")
        hop = as_ns(np.floor(self.lat[dim] + nbytes / self.bw[dim]), "a message's hop")
        return busy, hop, busy.sum(dtype=float) + float(hop.max(initial=0))

    def _touch(self, link: np.ndarray) -> None:
        """Links about to be priced: a run (`open_run`) holding one of them is written into
        the link state and adds no more copies."""
        owner = self._owner[link]
        held = owner >= 0
        if held.any():
            for rid in np.unique(owner[held]).tolist():
                run = self._runs[rid]
                self._settle(run)
                run[3] = True

    def _serve(self, link, dim, nbytes, arrive, alone: bool, costs: tuple | None = None) -> np.ndarray:
        busy, hop, bound = self.costs(dim, nbytes) if costs is None else costs
        latest = max(float(arrive.max(initial=0)), float(self.link_free[link].max(initial=0)))
        as_ns(latest + bound, "a link's queue")  # bounds _fifo's sums
        if alone:
            start = np.maximum(arrive, self.link_free[link])
            self.link_free[link] = start + busy
            self.link_busy[link] += busy
        else:
            start = _fifo(link, arrive, busy, self.link_free)
            np.add.at(self.link_busy, link, busy)
        return start + hop

    def _route(self, src, dst, nbytes, t_send) -> np.ndarray:
        t = t_send.astype(np.int64).copy()
        alone = self.exclusive(src, dst)  # no queue to order: each link carries one message
        for ms, link, dim in self._path(src, dst):
            t[ms] = self._serve(link, dim, nbytes[ms], t[ms], alone)
        return t


def _fifo(link: np.ndarray, arrive: np.ndarray, busy: np.ndarray, free: np.ndarray) -> np.ndarray:
    """When each message starts on its link: links serve in arrival order (then batch order),
    each message after the previous one left and not before the link is free. Updates free."""
    order = np.lexsort((np.arange(link.size), arrive, link))
    lk, a, s = link[order], arrive[order], busy[order]
    first = np.r_[True, lk[1:] != lk[:-1]]
    seg = np.cumsum(first) - 1
    seg_start = np.flatnonzero(first)
    cs = np.cumsum(s)
    before = cs - s - (cs - s)[seg_start][seg]  # busy time of earlier messages in the segment
    x = np.maximum(a, free[lk]) - before  # max-plus scan: start_k = before_k + max_{j<=k}(x_j)
    lo = x.min() if x.size else 0
    span = (x.max() - lo + 1) if x.size else 1
    run = np.maximum.accumulate((x - lo) + seg * span) - seg * span + lo
    start = before + run
    last = np.r_[seg_start[1:] - 1, lk.size - 1]
    free[lk[last]] = start[last] + s[last]
    out = np.empty_like(start)
    out[order] = start
    return out
