"""Small parametric workloads: one collective, a data-parallel training step, a ring of
sends, a roofline chain. Each returns a `Workload` with one trace per NPU; `from_spec`
builds them from short strings such as ``train:layers=16:comp_us=100:size=4194304``.
"""

from __future__ import annotations

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.builder import TraceBuilder
from ..schema.enums import parse_collective


def collective(npus: int, comm_type: int | str, nbytes: int, groups: dict[str, list[int]] | None = None) -> Workload:
    """Every NPU runs one collective of nbytes and nothing else; with `groups` (communicator
    groups, id -> ranks), a rank in a group runs it in that group (its pg_name)."""
    if groups:
        group_of = {r: g for g, members in groups.items() for r in members}
        traces = {}
        for r in range(npus):
            b = TraceBuilder()
            b.collective(comm_type, nbytes, pg_name=group_of.get(r))
            traces[r] = b.build()
        return Workload(traces, groups=dict(groups))
    b = TraceBuilder()
    b.collective(comm_type, nbytes)
    trace = b.build()
    return Workload({r: trace for r in range(npus)})  # one trace object shared by every NPU


def training_step(npus: int, layers: int, comp_us: int, nbytes: int) -> Workload:
    """Data parallel: `layers` forward nodes of comp_us chained; then per layer, in reverse, a
    backward node of 2 x comp_us after the previous backward, and an all-reduce of nbytes of
    that layer's gradients after its backward node only."""
    b = TraceBuilder()
    prev = None
    for i in range(layers):
        prev = b.comp(f"fwd{i}", comp_us, deps=[] if prev is None else [prev])
    for i in reversed(range(layers)):
        prev = b.comp(f"bwd{i}", 2 * comp_us, deps=[] if prev is None else [prev])
        b.collective("ALL_REDUCE", nbytes, name=f"allreduce{i}", deps=[prev])
    trace = b.build()
    return Workload({r: trace for r in range(npus)})


def ring_p2p(npus: int, nbytes: int, tag: int = 0) -> Workload:
    """NPU r sends nbytes to r+1 and receives from r-1 (mod npus), with no dependencies."""
    traces = {}
    for r in range(npus):
        b = TraceBuilder()
        b.send((r + 1) % npus, nbytes, tag=tag)
        b.recv((r - 1) % npus, nbytes, tag=tag)
        traces[r] = b.build()
    return Workload(traces)


def roofline_chain(npus: int, ops: list[float], nbytes: list[float]) -> Workload:
    """Chained compute nodes with num_ops and tensor_size (and no recorded duration)."""
    b = TraceBuilder()
    prev = None
    for i, (o, s) in enumerate(zip(ops, nbytes)):
        prev = b.comp(f"op{i}", 0, num_ops=o, tensor_size=int(s), deps=[] if prev is None else [prev])
    trace = b.build()
    return Workload({r: trace for r in range(npus)})


def from_spec(spec: str, npus: int) -> Workload:
    """`coll:<type>:<bytes>`, `train:layers=L:comp_us=C:size=N`, `p2p:size=N:tag=T`,
    `roof:ops=1e12/1e10:bytes=1e9` (bytes: one value for all, or one per op)."""
    kind, _, rest = spec.partition(":")
    try:
        if kind == "coll":
            ctype, nbytes = rest.rsplit(":", 1)
            return collective(npus, parse_collective(ctype), int(float(nbytes)))
        kv = dict(p.split("=", 1) for p in rest.split(":") if p)
        if kind == "train":
            return training_step(npus, int(kv["layers"]), int(kv["comp_us"]), int(float(kv["size"])))
        if kind == "p2p":
            return ring_p2p(npus, int(float(kv["size"])), int(kv.get("tag", 0)))
        if kind == "roof":
            ops = [float(x) for x in kv["ops"].split("/")]
            sizes = [float(x) for x in kv["bytes"].split("/")]
            return roofline_chain(npus, ops, sizes * len(ops) if len(sizes) == 1 else sizes)
    except (KeyError, ValueError) as e:
        raise ChakraError(f"workload spec {spec!r}: {e}") from None
    raise ChakraError(f"workload spec {spec!r}: unknown kind {kind!r} (coll, train, p2p, roof)")
