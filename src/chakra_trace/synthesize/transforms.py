"""What-if transforms: a job changed the way a question asks ("with compute 2x faster", "on an
H100", "with gradients compressed 4x", "without the optimizer", "with these kernels fused").

Each is a pure function Workload -> Workload (the input is never changed; ranks that share a
trace keep sharing one) and says what it preserves. They compose: `apply(job, [...])`.
Data-parallel scale-out is `scale.data_parallel`. `rescale` (another batch size or sequence
length) also takes a lone master trace.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import overload

import numpy as np

from ..convert.host_rows import name_mask
from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.compute_types import node_peaks
from ..schema.devices import device_spec
from ..schema.edit import drop_nodes
from ..schema.enums import Attr, NodeType, parse_collective
from ..schema.trace import Trace
from .rescale import rescale_trace

Transform = Callable[[Workload], Workload]


def _per_trace(w: Workload, fn: Callable[[Trace], Trace], what: str) -> Workload:
    """`fn` on each distinct trace, each result marked as changed by `what` (`Trace.transformed`):
    its times or sizes are no longer the recorded ones, which the `recorded` system needs."""
    done: dict[int, Trace] = {}
    for t in w.traces.values():
        if id(t) not in done:
            out = fn(t)
            out = out.copy() if out is t else out
            out.mark_transformed(what)
            done[id(t)] = out
    return Workload({r: done[id(t)] for r, t in w.traces.items()}, dict(w.groups))


def _matching(t: Trace, pattern: str | None) -> np.ndarray:
    """Rows whose name matches the regular expression (every row when None)."""
    if pattern is None:
        return np.ones(len(t), bool)
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise ChakraError(f"op name pattern {pattern!r}: {e}") from None
    return name_mask(t.names, t.name_codes, rx.search)


def _compute(t: Trace) -> np.ndarray:
    return t.types == NodeType.COMP_NODE


def speed_up_compute(w: Workload, factor: float, match: str | None = None) -> Workload:
    """Compute nodes (those whose name matches `match`, if given) take 1/factor of their time,
    rounded to whole µs, a nonzero time staying at least 1 µs. Preserves the graph, FLOPs,
    bytes and every communication node."""
    if not factor > 0:
        raise ChakraError(f"speed_up_compute: factor must be > 0, got {factor}")

    def fn(t: Trace) -> Trace:
        out = t.copy()
        rows = _compute(t) & _matching(t, match)
        d = t.duration[rows].astype(np.float64) / factor
        out.duration = t.duration.copy()
        out.duration[rows] = np.where(t.duration[rows] > 0, np.maximum(np.rint(d), 1), 0).astype(t.duration.dtype)
        return out

    return _per_trace(w, fn, f"compute {factor:g}x faster" + (f" (ops matching {match!r})" if match else ""))


def on_device(w: Workload, device: str, efficiency: float = 1.0, *, fp32_as: str = "pytorch") -> Workload:
    """Compute nodes with FLOPs (`num_ops`) take their roofline time on a device preset
    (`schema.devices`): max(FLOPs / peak, bytes / bandwidth) / efficiency, rounded up to whole µs,
    the peak of the node's type (``dtype``; TF32 per ``fp32_as``; the default type's without one:
    `schema.compute_types`, as the simulator and the roofline analysis). Nodes without FLOPs keep
    their time. Preserves the graph, FLOPs, bytes and communication."""
    spec = device_spec(device)
    if not 0 < efficiency <= 1:
        raise ChakraError(f"on_device: efficiency must be in (0, 1], got {efficiency}")

    def fn(t: Trace) -> Trace:
        out = t.copy()
        rows = _compute(t) & t.has(Attr.NUM_OPS) & (t.num_ops > 0)
        flops = t.num_ops[rows].astype(np.float64)
        nbytes = np.where(t.has(Attr.TENSOR_SIZE)[rows], t.tensor_size[rows].astype(np.float64), 0.0)
        peak = node_peaks(t, spec, fp32_as).flops[rows]
        us = np.maximum(flops / peak, nbytes / spec.mem_bw) / efficiency * 1e6
        out.duration = t.duration.copy()
        out.duration[rows] = np.maximum(np.ceil(us), 1).astype(t.duration.dtype)
        return out

    return _per_trace(w, fn, f"compute on {device} at {efficiency:g} of its roofline")


def scale_collectives(w: Workload, factor: float, types: Iterable[str] | None = None) -> Workload:
    """Collectives (of `types`, e.g. ["ALL_REDUCE"], if given) and sends/receives move `factor`
    times their bytes (compression: 0.25), rounded to whole bytes, a nonzero size staying at
    least 1. Every member of a collective is scaled alike, so sizes still agree across ranks.
    Preserves the graph, compute and the collectives' types, groups and order."""
    if not factor > 0:
        raise ChakraError(f"scale_collectives: factor must be > 0, got {factor}")
    types = None if types is None else [str(x) for x in types]
    wanted = None if types is None else {int(parse_collective(x)) for x in types}

    def fn(t: Trace) -> Trace:
        out = t.copy()
        comm = np.isin(t.types, (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE))
        rows = comm & t.has(Attr.COMM_SIZE)
        if wanted is not None:
            coll = t.types == NodeType.COMM_COLL_NODE
            rows &= coll & t.has(Attr.COMM_TYPE) & np.isin(t.comm_type, list(wanted))
        size = t.comm_size[rows].astype(np.float64) * factor
        out.comm_size = t.comm_size.copy()
        out.comm_size[rows] = np.where(t.comm_size[rows] > 0, np.maximum(np.rint(size), 1), 0).astype(t.comm_size.dtype)
        return out

    return _per_trace(w, fn, f"communication bytes x {factor:g}" + (f" ({', '.join(types)})" if types else ""))


def remove_ops(w: Workload, match: str) -> Workload:
    """Compute nodes whose name matches `match` removed; what depended on one depends on its
    dependencies instead (`schema.edit.drop_nodes`), so no ordering between kept nodes is lost.
    Communication nodes are never removed (every member of a collective must still reach it)."""
    return _per_trace(w, lambda t: drop_nodes(t, _compute(t) & _matching(t, match)), f"removed ops matching {match!r}")


def _sum_by(t: Trace, group: np.ndarray, col: str) -> np.ndarray:
    """Per row, the exact integer sum of column `col` over the rows whose group it is (not through
    float64, which rounds above 2^53); a sum past the column's type is refused, not wrapped."""
    values = getattr(t, col)
    out = np.zeros(values.shape, values.dtype)
    np.add.at(out, group, values)
    approx = np.bincount(group, weights=values.astype(np.float64), minlength=values.size)
    if approx.size and float(approx.max()) >= float(np.iinfo(values.dtype).max) * 0.999:
        row = int(np.argmax(approx))
        raise ChakraError(
            f"fuse_ops: node {int(t.ids[row])}'s fused {col} ({approx[row]:.3g}) does not fit {values.dtype}"
        )
    return out


def fuse_ops(w: Workload, match: str) -> Workload:
    """Chains of compute nodes whose names match `match`, each the only successor of the one
    before and depending on nothing else, become their first node: durations, FLOPs and bytes
    summed, named "<first> (+N fused)"; what followed the last follows the fused node. A
    fused kernel reads and writes what the chain did: bytes are an upper bound."""

    return _per_trace(w, lambda t: fuse_chains(t, _compute(t) & _matching(t, match)), f"fused ops matching {match!r}")


def fuse_chains(t: Trace, hit: np.ndarray) -> Trace:
    """`fuse_ops` on one trace for the compute rows `hit` marks (see there)."""
    if not hit.any():
        return t
    g = t.graph()
    pred_ptr, preds = g.preds
    succ_ptr, _succ = g.succs
    n_pred, n_succ = np.diff(pred_ptr), np.diff(succ_ptr)
    one = hit & (n_pred == 1)
    parent = np.full(len(t), -1, np.int64)
    parent[one] = preds[pred_ptr[:-1][one]]
    joins = one & (parent >= 0)
    joins[joins] = hit[parent[joins]] & (n_succ[parent[joins]] == 1)  # the chain continues
    head = np.arange(len(t))
    order = g.order(partial=True)  # (parents first, whatever the ids)
    for r in order[joins[order]].tolist():
        head[r] = head[parent[r]]
    heads = np.unique(head[joins])
    out = t.copy()
    for col in ("duration", Attr.NUM_OPS, Attr.TENSOR_SIZE):
        summed = _sum_by(t, head, col)
        new = getattr(out, col).copy()
        new[heads] = summed[heads]
        setattr(out, col, new)
        if col != "duration" and heads.size:  # (an attribute: present where a chain member had it)
            present = np.bincount(head, weights=t.has(col).astype(np.float64), minlength=len(t)) > 0
            out.set_attr(col, new[heads[present[heads]]], heads[present[heads]])
    count = np.bincount(head, minlength=len(t))
    names = list(out.names)
    codes = out.name_codes.copy()
    for r in heads.tolist():  # the fused node says what it holds
        names.append(f"{t.names[t.name_codes[r]]} (+{int(count[r]) - 1} fused)")
        codes[r] = len(names) - 1
    out.names, out.name_codes = names, codes
    return drop_nodes(out, joins)


@overload
def rescale(w: Trace, batch: int | None = None, seq: int | None = None) -> Trace: ...
@overload
def rescale(w: Workload, batch: int | None = None, seq: int | None = None) -> Workload: ...
def rescale(w: Workload | Trace, batch: int | None = None, seq: int | None = None) -> Workload | Trace:
    """A master trace captured with shape rules (`chakra capture --shape-rules`), or a workload
    of them, as a capture at another batch size and/or sequence length (None: as captured) would
    give it: every op's shapes, FLOPs and bytes follow its recorded rule, exactly; durations are
    cleared. See `synthesize.rescale` for what it keeps and refuses."""
    if isinstance(w, Trace):
        return rescale_trace(w, batch, seq)
    point = ", ".join(f"{k} {v}" for k, v in (("batch", batch), ("seq", seq)) if v)
    return _per_trace(w, lambda t: rescale_trace(t, batch, seq), f"rescaled to {point}")


def apply(w: Workload, transforms: Iterable[Transform]) -> Workload:
    """The transforms in order."""
    for fn in transforms:
        w = fn(w)
    return w


__all__ = [
    "apply",
    "fuse_ops",
    "on_device",
    "remove_ops",
    "rescale",
    "scale_collectives",
    "speed_up_compute",
]
