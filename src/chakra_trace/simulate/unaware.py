"""The congestion-unaware network model: a message costs ``hops × latency + bytes / bandwidth``.

Parallel messages do not share bandwidth, so a message's time does not depend on when it is
sent or what else is in flight: collectives are priced a whole step at a time, in closed form
(`Collectives.run`). Our rules charge every dimension the message crosses (the latency of
each, serialization on the slowest link); ASTRA-sim's (`Rules.lowest_dimension_only`) charge
only the lowest dimension where source and destination differ, truncated once per message.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .network import Fabric, as_ns, check_clock
from .rules import Rules


class Unaware(Fabric):
    """No shared bandwidth (`backend.NetworkModel`): no link state."""

    name: ClassVar[str] = "unaware"
    contended: ClassVar[bool] = False

    def __init__(self, network, rules: Rules):
        super().__init__(network, rules)
        self._delays: dict = {}

    @property
    def link_busy(self) -> None:
        """No link is timed."""
        return None

    def send(self, src, dst, nbytes, t_send) -> np.ndarray:
        """Arrival time of each message (int64 ns)."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        nbytes = np.broadcast_to(np.asarray(nbytes, float), src.shape)
        t_send = np.broadcast_to(np.asarray(t_send, np.int64), src.shape)
        t = t_send + self._delay(src, dst, nbytes)  # both < 2^62: the sum cannot wrap
        return check_clock(t, "a message's arrival")

    def _delay(self, src, dst, nbytes) -> np.ndarray:
        """Cost of each message (collective steps repeat the same messages: cached)."""
        nb = np.asarray(nbytes, float)
        key = (src.tobytes(), dst.tobytes(), src.shape, nb.tobytes(), nb.shape)
        hit = self._delays.get(key)
        if hit is None:
            if len(self._delays) > 4096:
                self._delays.clear()
            hit = self._delays[key] = self._price(src, dst, nbytes)
        return hit

    def _price(self, src, dst, nbytes) -> np.ndarray:
        cs, cd = self.coords(src), self.coords(dst)
        nbytes = np.asarray(nbytes, float)
        differ = cs != cd
        if self.rules.lowest_dimension_only:
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
