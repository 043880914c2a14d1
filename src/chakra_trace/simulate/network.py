"""What moving bytes between NPUs costs: the congestion-unaware and congestion-aware models.

Both take batches of messages (arrays of source, destination, bytes, send time) and return
arrival times in whole ns, so a collective step over a thousand NPUs is a few numpy calls.

- Unaware: a message costs ``hops × latency + bytes / bandwidth``; parallel messages do not
  share bandwidth. ASTRA-sim (``compat``) charges only the lowest dimension where source and
  destination differ and truncates once per message; our default charges every dimension the
  message crosses (latency of each, serialization on the slowest link).
- Aware: every link is a FIFO. A message moves whole from link to link along its route
  (dimension by dimension, lowest first; shortest way round a ring; up and down a switch);
  each hop costs ``latency + bytes / bandwidth`` and keeps the link busy for
  ``bytes / bandwidth``, each truncated to whole ns. Link busy time is counted for the
  utilization report. A link serves messages in the order they reach it: collectives move
  their messages one hop at a time on the event loop (`serve`, driven by `inflight`), so a
  message passes another that reaches the link later, whichever collective, chunk or step
  sent it. (`send` prices a message's whole route at once: point-to-point sends.)
"""

from __future__ import annotations

import numpy as np

from ..errors import ChakraError
from .config.values import MAX_NS


class ClockOverflow(ChakraError):
    """A simulated time past the int64-ns clock: refused rather than wrapped to garbage."""


def as_ns(x, what: str) -> np.ndarray:
    """Float ns (already floored) as int64, refusing what the clock cannot hold: a cast would
    wrap (1e19 ns -> negative) and make a slow link look fast."""
    a = np.asarray(x, float)
    if a.size and not (np.all(np.isfinite(a)) and float(a.max(initial=0.0)) < MAX_NS):
        bad = a[~np.isfinite(a) | (a >= MAX_NS)]
        raise ClockOverflow(
            f"{what} of {float(bad.flat[0]):.3g} ns overflows the simulated clock (int64 ns, at most 2^62, "
            "146 years): check the bandwidths, latencies, sizes and durations"
        )
    return a.astype(np.int64)


def check_clock(t, what: str):
    """`t` (int64 ns) unchanged, or ClockOverflow when past the clock's range."""
    a = np.asarray(t)
    if a.size and int(a.max()) >= MAX_NS:
        raise ClockOverflow(f"{what} reaches {int(a.max()):,} ns, past the simulated clock's 2^62 ns (146 years)")
    return t


class Fabric:
    def __init__(self, network, *, compat: bool = False, aware: bool = False):
        self.compat = compat
        self.aware = aware
        dims = network.dims
        self.sizes = np.array([d.npus for d in dims], np.int64)
        # bytes per ns; compat: rounded as ASTRA-sim's bw_GBps_to_Bpns, bw * 2^30 first, then / 1e9
        self.bw = np.array([d.bandwidth * 2**30 / 1e9 if compat else d.bandwidth for d in dims], float)
        self.lat = np.array([d.latency for d in dims], float)
        self.kind = [d.topology for d in dims]
        self.npus = int(np.prod(self.sizes))
        self.stride = np.concatenate(([1], np.cumprod(self.sizes)[:-1])).astype(np.int64)
        # aware model: one block of link ids per dimension
        self._link_base: list[int] = []
        base = 0
        for d in range(len(self.kind)):
            self._link_base.append(base)
            base += self._block(d)
        links = base if aware else 0  # the unaware model has no link state
        self.link_free = np.zeros(links, np.int64)  # when each link is next free
        self.link_busy = np.zeros(links, np.int64)  # busy time of each link so far
        # steps added in closed form while their links stay theirs (`open_run`): which run
        # holds each link
        self._owner = np.full(links, -1, np.int64)
        self._runs: dict[int, list] = {}
        self._run_ids = 0
        self._paths: dict = {}
        self._tables: dict = {}
        self._delays: dict = {}
        self._exclusive: dict = {}

    # ------------------------------------------------------------------ geometry
    def coords(self, npu) -> np.ndarray:
        npu = np.asarray(npu, np.int64)
        return (npu[..., None] // self.stride) % self.sizes

    def hops(self, d: int, a, b) -> np.ndarray:
        """Hops between coordinates a and b of dimension d (0 where equal)."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        diff = np.abs(a - b)
        if self.kind[d] == "Ring":
            return np.minimum(diff, self.sizes[d] - diff)
        return np.where(diff > 0, 2 if self.kind[d] == "Switch" else 1, 0)

    def links(self, ids=None) -> dict[str, np.ndarray]:
        """Links of the aware model (`ids`, default every one): dimension, kind, from and to NPU
        (-1: the switch). Computed from the ids, so describing the busiest few of millions of
        links costs nothing."""
        total = self._link_base[-1] + self._block(len(self.kind) - 1) if self.kind else 0
        ids = np.arange(total, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
        dim = np.searchsorted(np.asarray(self._link_base), ids, side="right") - 1
        kind = np.empty(ids.size, dtype=object)
        src = np.empty(ids.size, np.int64)
        dst = np.empty(ids.size, np.int64)
        for d, topo in enumerate(self.kind):
            m = dim == d
            local = ids[m] - self._link_base[d]
            n = int(self.sizes[d])
            if topo == "FullyConnected":
                npu, peer = local // n, local % n
                c = self.coords(npu)[..., d]
                src[m], dst[m], kind[m] = npu, npu + (peer - c) * self.stride[d], "direct"
                continue
            npu, second = local // 2, local % 2 == 1
            if topo == "Ring":
                c = self.coords(npu)[..., d]
                step = np.where(second, -1, 1)
                src[m], dst[m] = npu, npu + ((c + step) % n - c) * self.stride[d]
                kind[m] = np.where(second, "ring-", "ring+")
            else:  # Switch: up from the NPU, down to it
                src[m], dst[m] = np.where(second, -1, npu), np.where(second, npu, -1)
                kind[m] = np.where(second, "down", "up")
        return {"dim": dim, "kind": kind, "src": src, "dst": dst}

    def _block(self, d: int) -> int:
        """Links of dimension d: two per NPU (a ring's two ways, a switch's up and down), or one
        per NPU and peer on a fully connected dimension."""
        return self.npus * (int(self.sizes[d]) if self.kind[d] == "FullyConnected" else 2)

    # ------------------------------------------------------------------ costs
    def send(self, src, dst, nbytes, t_send) -> np.ndarray:
        """Arrival time of each message (int64 ns)."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        nbytes = np.broadcast_to(np.asarray(nbytes, float), src.shape)
        t_send = np.broadcast_to(np.asarray(t_send, np.int64), src.shape)
        if self.aware:
            if self._runs:
                for _ms, link, _d in self._path(src.ravel(), dst.ravel()):
                    self._touch(link)
            t = self._route(src.ravel(), dst.ravel(), nbytes.ravel(), t_send.ravel()).reshape(src.shape)
        else:
            t = t_send + self.delay(src, dst, nbytes)  # both < 2^62: the sum cannot wrap
        return check_clock(t, "a message's arrival")

    def delay(self, src, dst, nbytes) -> np.ndarray:
        """Unaware cost of each message (collective steps repeat the same messages: cached)."""
        nb = np.asarray(nbytes, float)
        key = (src.tobytes(), dst.tobytes(), src.shape, nb.tobytes(), nb.shape)
        hit = self._delays.get(key)
        if hit is None:
            if len(self._delays) > 4096:
                self._delays.clear()
            hit = self._delays[key] = self._delay(src, dst, nbytes)
        return hit

    def _delay(self, src, dst, nbytes) -> np.ndarray:
        cs, cd = self.coords(src), self.coords(dst)
        nbytes = np.asarray(nbytes, float)
        differ = cs != cd
        if self.compat:  # the lowest differing dimension only
            d = np.argmax(differ, axis=-1)
            any_ = differ.any(axis=-1)
            h = np.zeros(d.shape, np.int64)
            for k in range(len(self.kind)):
                m = d == k
                h[m] = self.hops(k, cs[..., k][m], cd[..., k][m])
            cost = np.floor(h * self.lat[d] + nbytes / self.bw[d])
            return as_ns(np.where(any_, cost, 0), "a message's time on the network")
        lat = np.zeros(differ.shape[:-1])
        slow = np.full(differ.shape[:-1], np.inf)
        for k in range(len(self.kind)):
            m = differ[..., k]
            lat = lat + np.where(m, self.hops(k, cs[..., k], cd[..., k]) * self.lat[k], 0)
            slow = np.where(m, np.minimum(slow, self.bw[k]), slow)
        return as_ns(np.where(differ.any(axis=-1), np.floor(lat + nbytes / slow), 0), "a message's time on the network")

    # ------------------------------------------------------------------ aware model
    def _path(self, src: np.ndarray, dst: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Route of each message: per hop number, (message indices, link ids, dimensions)."""
        key = (src.tobytes(), dst.tobytes())
        hit = self._paths.get(key)
        if hit is not None:
            return hit
        cur = src.copy()
        cd = self.coords(dst)
        via = np.full(src.size, -1, np.int64)  # at a switch of that dimension, on the way down
        target = np.zeros(src.size, np.int64)
        hops = []
        while True:
            differ = self.coords(cur) != cd
            active = np.flatnonzero(differ.any(axis=1) | (via >= 0))
            if not active.size:
                break
            d = np.where(via[active] >= 0, via[active], np.argmax(differ[active], axis=1))
            link = np.zeros(active.size, np.int64)
            for k, kind in enumerate(self.kind):
                sel = np.flatnonzero(d == k)
                if not sel.size:
                    continue
                m = active[sel]
                n, base = int(self.sizes[k]), self._link_base[k]
                a = self.coords(cur[m])[:, k]
                b = cd[m, k]
                if kind == "Ring":  # one hop the shorter way round (ties: upwards)
                    up = (b - a) % n <= (a - b) % n
                    link[sel] = base + cur[m] * 2 + (~up)
                    cur[m] += (np.where(up, a + 1, a - 1) % n - a) * self.stride[k]
                elif kind == "Switch":  # up from the source, then down to the destination
                    down = via[m] >= 0
                    link[sel] = np.where(down, base + target[m] * 2 + 1, base + cur[m] * 2)
                    target[m] = np.where(down, target[m], cur[m] + (b - a) * self.stride[k])
                    cur[m] = np.where(down, target[m], cur[m])
                    via[m] = np.where(down, -1, k)
                else:  # FullyConnected: the direct link
                    link[sel] = base + cur[m] * n + b
                    cur[m] += (b - a) * self.stride[k]
            hops.append((active, link, d))
        if len(self._paths) > 4096:
            self._paths.clear()
        self._paths[key] = hops
        return hops

    def exclusive(self, src, dst) -> bool:
        """Whether no two of these messages share a link (aware model): then a batch that
        finds its links free keeps them free for an identical batch sent after it arrives."""
        src, dst = np.asarray(src, np.int64).ravel(), np.asarray(dst, np.int64).ravel()
        key = (src.tobytes(), dst.tobytes())
        hit = self._exclusive.get(key)
        if hit is None:
            links = [link for _ms, link, _d in self._path(src, dst)]
            used = np.sort(np.concatenate(links)) if links else np.zeros(0, np.int64)
            hit = self._exclusive[key] = not bool((used[1:] == used[:-1]).any())
            if len(self._exclusive) > 4096:
                self._exclusive.clear()
        return hit

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

    def table(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """Routes as rows (`_path`): the link and dimension of each message's hop k (-1 past its
        last), its number of hops, and whether no two messages share a link (`exclusive`)."""
        key = (src.tobytes(), dst.tobytes())
        hit = self._tables.get(key)
        if hit is None:
            if len(self._tables) > 4096:
                self._tables.clear()
            hit = self._tables[key] = self._table(src, dst)
        return hit

    def _table(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        hops = self._path(src, dst)
        links = np.full((src.size, max(1, len(hops))), -1, np.int64)
        dims = np.full(links.shape, -1, np.int64)
        for k, (ms, link, d) in enumerate(hops):
            links[ms, k] = link
            dims[ms, k] = d
        return links, dims, (links >= 0).sum(axis=1), self.exclusive(src, dst)

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
