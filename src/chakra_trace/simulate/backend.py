"""What the simulator asks of a network model: the seam where a backend plugs in.

Every model (`NetworkModel`) prices batches of messages given as arrays (no Python object per
message) and returns arrival times in whole ns. Two kinds, told apart by ``contended``:

- uncontended (`unaware.Unaware`): a message's time does not depend on what else is in flight,
  so the simulator prices collectives a whole algorithm step at a time with `send`
  (`Collectives.run`), and reuses a collective's times shifted when it recurs;
- contended (`ContendedModel`, `aware.Aware`): messages share links, so collectives move
  their messages one hop at a time on the event loop (`inflight`), asking the model for
  routes (`table`), per-hop costs (`costs`) and service (`serve`) in simulated-time order.

Models subclass `network.Fabric` for the geometry (sizes, coordinates, links, routes) and take
the simulation's `rules.Rules`. The simulator picks one in `Simulator.__init__` (``aware``, or
any class given as ``network_model``).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np

from .rules import Rules


class NetworkModel(Protocol):
    """A network model: what the simulator, the collectives and the result ask of it."""

    #: the mode's second part in `SimResult.mode` ("unaware", "aware")
    name: ClassVar[str]
    #: messages share links: collectives run hop by hop on the event loop (the model is a
    #: `ContendedModel`), no collective's times are reused, no NPUs stand for replicas, and the
    #: simulator's memory check counts the model's per-link state
    contended: ClassVar[bool]
    npus: int
    sizes: np.ndarray  # NPUs per dimension

    def __init__(self, network, rules: Rules) -> None: ...

    def send(self, src, dst, nbytes, t_send) -> np.ndarray:
        """Arrival time (int64 ns) of each message from src[i] to dst[i] of nbytes[i] sent at
        t_send[i] (arrays of one shape; bytes and times broadcast)."""
        ...

    @property
    def link_busy(self) -> np.ndarray | None:
        """Busy time of each link so far (ns, by link id), None for a model without link state."""
        ...

    def links(self, ids=None) -> dict[str, np.ndarray]:
        """Links by id: dimension, kind, from and to NPU (`Fabric.links`)."""
        ...


class ContendedModel(NetworkModel, Protocol):
    """A model whose messages share links, driven hop by hop (`inflight.Mover`), with repeated
    lock-step steps added in closed form while their links stay theirs (`inflight.PhaseRun`)."""

    def table(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """Routes as rows: link and dimension of each message's hop k (-1 past its last), its
        number of hops, and whether no two messages share a link (`Fabric.table`)."""
        ...

    def costs(self, dim: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Busy and hop time of each message on a link of its dimension, and a bound on a
        queue's sums, worked out once for messages sent again and again."""
        ...

    def serve(self, link, dim, nbytes, arrive, alone: bool = False, costs: tuple | None = None) -> np.ndarray:
        """Messages reaching these links at `arrive` (none earlier still to come) are served
        after what the links already took: when each reaches the next device."""
        ...

    def alone_cost(self, src, dst, nbytes) -> int | None:
        """The time every message of a batch takes on free links, when one for all; None: no
        closed form (`run_layout` .. `close_run` are then never called for it)."""
        ...

    def run_layout(self, src, dst, nbytes) -> tuple:
        """What `open_run` needs of a batch that has an `alone_cost`."""
        ...

    def open_run(self, layout: tuple, t: int) -> int | None:
        """Start adding copies of a batch from `t` without pricing them (a run id), or None."""
        ...

    def run_late(self, rid: int) -> int:
        """How long after a copy's send time its messages still take links (-1: one hop each)."""
        ...

    def step_run(self, rid: int, t: int, copies: int = 1) -> bool:
        """Add `copies` copies, the last sent at `t`, if nothing else took the run's links
        since it opened; else False."""
        ...

    def close_run(self, rid: int) -> None:
        """Write the copies added into the link state and free the run's links."""
        ...
