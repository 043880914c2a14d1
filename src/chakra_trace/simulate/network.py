"""The network as every model sees it (`Fabric`), and the simulated clock's range checks.

A network model (`backend.NetworkModel`: `unaware.Unaware`, `aware.Aware`) takes batches of
messages (arrays of source, destination, bytes, send time) and returns arrival times in whole
ns, so a collective step over a thousand NPUs is a few numpy calls. What the models share is
here, once: per dimension its size, stride, topology, bandwidth (bytes per ns, in the unit the
rules say) and latency; NPU coordinates and hop counts; the links, one block of ids per
dimension; and each message's route over them (dimension by dimension, lowest first; shortest
way round a ring; up and down a switch).
"""

from __future__ import annotations

import numpy as np

from ..errors import ChakraError
from .config.values import MAX_NS
from .rules import Rules


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


def link_count(network) -> int:
    """Links of a network (`Fabric.links`), counted from its configuration before anything is built."""
    return sum(_block(network.npus, d.npus, d.topology) for d in network.dims)


def _block(npus: int, size: int, topology: str) -> int:
    """Links of a dimension: two per NPU (a ring's two ways, a switch's up and down), or one
    per NPU and peer on a fully connected dimension."""
    return npus * (size if topology == "FullyConnected" else 2)


class Fabric:
    """A network's geometry, shared by the network models that subclass it."""

    def __init__(self, network, rules: Rules):
        self.rules = rules
        dims = network.dims
        self.sizes = np.array([d.npus for d in dims], np.int64)
        # bytes per ns; gib_bandwidth: rounded as ASTRA-sim's bw_GBps_to_Bpns, bw * 2^30 first, then / 1e9
        self.bw = np.array([d.bandwidth * 2**30 / 1e9 if rules.gib_bandwidth else d.bandwidth for d in dims], float)
        self.lat = np.array([d.latency for d in dims], float)
        self.kind = [d.topology for d in dims]
        self.npus = int(np.prod(self.sizes))
        self.stride = np.concatenate(([1], np.cumprod(self.sizes)[:-1])).astype(np.int64)
        self._link_base: list[int] = []  # first link id of each dimension
        base = 0
        for d in range(len(self.kind)):
            self._link_base.append(base)
            base += _block(self.npus, int(self.sizes[d]), self.kind[d])
        self.nlinks = base
        self._paths: dict = {}
        self._tables: dict = {}
        self._exclusive: dict = {}

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
        """Links (`ids`, default every one): dimension, kind, from and to NPU (-1: the switch).
        Computed from the ids, so describing the busiest few of millions of links costs nothing."""
        ids = np.arange(self.nlinks, dtype=np.int64) if ids is None else np.asarray(ids, np.int64)
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

    # ------------------------------------------------------------------ routes
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
        """Whether no two of these messages share a link: then, on a model with link state, a
        batch that finds its links free keeps them free for an identical batch sent after it arrives."""
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
