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
  utilization report. Messages are served in the order their batches are priced (one
  collective step at a time, in simulated time order of the steps' issue); two collectives
  of different groups that overlap in time therefore queue behind each other a step at a
  time rather than message by message.
"""

from __future__ import annotations

import numpy as np

from ..errors import ChakraError
from .config.values import MAX_NS

GIB_PER_GB = 2**30 / 1e9  # ASTRA-sim reads "GB/s" as GiB/s


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
        self._paths: dict = {}
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

    def repeat(self, src, dst, nbytes, shift: int, times: int) -> None:
        """Account for `times` more copies of a batch just routed, each `shift` ns after the
        previous one, whose links were free when it came (`exclusive`): every link on the
        routes is free `times x shift` later and was busy `times` more message times."""
        src, dst = np.asarray(src, np.int64).ravel(), np.asarray(dst, np.int64).ravel()
        nb = np.broadcast_to(np.asarray(nbytes, float), src.shape).ravel()
        for ms, link, dim in self._path(src, dst):
            busy = as_ns(np.floor(nb[ms] / self.bw[dim]), "a message's time on a link")
            self.link_free[link] = check_clock(self.link_free[link] + times * shift, "a link's queue")
            self.link_busy[link] += times * busy

    def _route(self, src, dst, nbytes, t_send) -> np.ndarray:
        t = t_send.astype(np.int64).copy()
        alone = self.exclusive(src, dst)  # no queue to order: each link carries one message
        for ms, link, dim in self._path(src, dst):
            busy = as_ns(np.floor(nbytes[ms] / self.bw[dim]), "a message's time on a link")
            hop = as_ns(np.floor(self.lat[dim] + nbytes[ms] / self.bw[dim]), "a message's hop")
            latest = max(float(t[ms].max(initial=0)), float(self.link_free[link].max(initial=0)))
            as_ns(latest + busy.sum(dtype=float) + float(hop.max(initial=0)), "a link's queue")  # bounds _fifo's sums
            if alone:
                start = np.maximum(t[ms], self.link_free[link])
                self.link_free[link] = start + busy
            else:
                start = _fifo(link, t[ms], busy, self.link_free)
            np.add.at(self.link_busy, link, busy)
            t[ms] = start + hop
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
