"""Remote memory's shared ports: one access at a time per port, in the order asked.

Each NPU of a `PER_NODE_MEMORY_EXPANSION` node shares its node's port; every NPU shares the one
port of a `MEMORY_POOL`. Accesses asked for at one instant join the queue in NPU order (ASTRA-sim
takes them in its event list's order: `tools/astra/SWEEP.md`, memory-slot).
"""

from __future__ import annotations


def memory_port(memory, rank: int) -> int | None:
    """The remote-memory port an NPU's accesses queue at (None: no queue)."""
    kind = memory.memory_type
    if kind == "PER_NODE_MEMORY_EXPANSION":
        return rank // max(1, int(memory.num_npus_per_node))
    return 0 if kind == "MEMORY_POOL" else None


class MemoryPorts:
    def __init__(self, engine, memory):
        self.engine, self.memory = engine, memory
        self._free: dict[int, int] = {}  # when each port is next free
        self._asked: list[tuple] = []  # (rank, port, npu, node row) asked for at this instant

    def access(self, npu, r: int) -> None:
        """Node r of `npu` (a load or store of `npu.dur[r]` ns) goes to remote memory now."""
        port = memory_port(self.memory, npu.rank)
        if port is None:
            self.engine.after(int(npu.dur[r]), npu.complete, r)
            return
        if not self._asked:
            self.engine.settled(self._queue)
        self._asked.append((npu.rank, port, npu, r))

    def _queue(self) -> None:
        """What was asked for at this instant joins its port's queue in NPU order, once nothing
        else is left to run at this instant."""
        asked, self._asked = sorted(self._asked, key=lambda a: a[0]), []
        for _rank, port, npu, r in asked:
            start = max(self.engine.now, self._free.get(port, 0))
            self._free[port] = start + int(npu.dur[r])
            self.engine.at(start + int(npu.dur[r]), npu.complete, r)
