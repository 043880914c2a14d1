"""Context parallelism (Megatron-LM with Transformer Engine's attention): each of cp ranks holds
seq / cp tokens of every sequence, as 2 chunks of seq / (2 cp) -- chunks c and 2 cp - 1 - c, so
that every rank gets the same share of causal attention's work (load balancing: the sequence
must split into 2 cp chunks).

Work: every forward and backward op outside attention works on the rank's own tokens (linears,
norms, elementwise ops, embeddings, the loss): FLOPs and bytes / cp, and so do the activations the
TP collectives, the pipeline's sends and the loss reductions carry. Attention's FLOPs divide by cp
too (load balanced, each rank does 1/cp of the causal s x s work) but each rank needs every K and
V. The model's own ops (RoPE tables) stay whole: Megatron computes the full table and slices it
per CP rank. The optimizer stays whole on every CP rank (its parameters are not split) unless
ZeRO / FSDP shard it over the dp x cp ranks of the data-parallel group with context parallelism,
over which gradients are reduced (`Plan.dp_cp`).

K and V exchange (per attention op, per micro-batch; KV: the bytes of this rank's K and V, the
master's K and V bytes / (tp x cp x micro-batches), counted before a grouped-query expansion since
Transformer Engine exchanges the key/value heads):

- "p2p" (`AttnFuncWithCPAndKVP2P`, Transformer Engine's default, the ring of Megatron's
  cp_comm_type "p2p"): the forward runs in cp steps; before step i < cp - 1 computes on the K/V
  chunk it holds, it sends that chunk to the next CP rank and receives the next chunk from the
  previous one (KV bytes; cp - 1 sends), so step i + 1 waits for that receive. The backward runs
  cp steps too, each first sending on what it holds: K/V at step 0, K/V and the dK/dV gathered so
  far at steps 1 .. cp - 2 (2 KV), dK/dV at step cp - 1 (KV); a step's send waits for the
  previous step's compute (its dK/dV) and receive, and the op's result for the last step's
  receive (the rank's own dK/dV coming home). The attention op becomes cp nodes of 1/cp of its
  FLOPs and bytes each (the load-balanced steps are equal), which overlap the exchange.
- "all-gather" (`AttnFuncWithCPAndKVAllGather`, the Llama 3 paper's §3.3.2): an all-gather of K
  and one of V before the forward (comm_size: the rank's K, resp. V), again before the backward
  (only the local chunks are kept), and a reduce-scatter of dK and of dV after it (comm_size:
  their whole gathered bytes).

Only a fused attention op can be context-parallel: Megatron-LM refuses CP with its own unfused
core attention ("Context parallelism is only supported by TEDotProductAttention!").

Ring peers: a template's sends and receives name the peer's stage (`build`); a ring's name stage
pp (the next CP rank) or pp + 1 (the previous one), which `rank_trace` turns into ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...schema import proto as pb
from ...schema.compute_types import ATTENTION_OPS
from ...schema.enums import Attr, CollectiveType, NodeType
from ...schema.trace import Trace
from .master import (
    _ITEMSIZE,
    BWD,
    COLUMN,
    CORE_ATTENTION,
    FWD,
    Master,
    ParallelizeError,
    capture_json,
    layer_path,
    leaf,
)
from .plan import Plan

if TYPE_CHECKING:
    from .layout import Layout

CP = "__cp__"  # placeholder group of a template's CP collectives
CP_TAG = 1 << 28  # ring tags: above any pipeline send's (micro-batch, chunk, direction)
AG, RS = CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER
_KEYS = frozenset({"k_proj", "key", "wk"})
_VALUES = frozenset({"v_proj", "value", "wv"})
_MATMULS = frozenset({"aten::bmm", "aten::baddbmm", "aten::matmul"})


def is_attention(op: str) -> bool:
    """A fused attention op, forward or backward."""
    return op in ATTENTION_OPS or (op.endswith("_backward") and op[: -len("_backward")] in ATTENTION_OPS)


def row_div(m: Master, plan: Plan) -> np.ndarray:
    """What context parallelism divides each row's FLOPs and bytes by: cp for forward and
    backward ops but the model's own (module ""), 1 for those and the optimizer's."""
    if plan.cp == 1:
        return np.ones(len(m), np.int64)
    own = np.array([m.place.get(mod) == "root" for mod in m.module], bool)
    return np.where((m.phase != 2) & ~own, plan.cp, 1).astype(np.int64)


def kv_rows(m: Master, plan: Plan) -> dict[int, int]:
    """Fused attention rows (forward and backward) -> the master's bytes of their K and V (the
    whole batch, all heads). Refuses a plan whose sequence does not split into 2 cp chunks and a
    master without fused attention or with Megatron's unfused core attention."""
    if m.seq % (2 * plan.cp):
        raise ParallelizeError(
            f"context parallelism {plan.cp}: the sequence of {m.seq} tokens does not split into 2 x cp = "
            f"{2 * plan.cp} load-balanced chunks"
        )
    unfused = [
        r
        for r in range(len(m))
        if m.ops[r] in _MATMULS and any(p in CORE_ATTENTION for p in m.module[r].split(".")) and m.layer[r] >= 0
    ]
    if unfused:
        raise ParallelizeError(
            f"context parallelism needs a fused attention op (Transformer Engine's); {m.module[unfused[0]]} runs "
            "unfused matmuls (Megatron-LM refuses CP with its own core attention): capture with attention 'sdpa'"
        )
    rows = [r for r in range(len(m)) if m.layer[r] >= 0 and is_attention(m.ops[r])]
    if not rows:
        raise ParallelizeError(
            "context parallelism exchanges K and V of attention: the master trace has no fused attention op"
        )
    proj: dict[tuple[int, str], int] = {}  # (layer, "k" / "v") -> bytes of its projection's output
    for r in range(len(m)):
        if m.phase[r] == FWD and m.layer[r] >= 0 and m.is_real(r):
            lf = leaf(m.module[r])
            if lf in _KEYS | _VALUES and lf in COLUMN and layer_path(m.module[r]) is not None:
                proj[(int(m.layer[r]), "k" if lf in _KEYS else "v")] = m.out_bytes(r)
    fwd_kv: dict[int, int] = {}
    for r in rows:
        if m.phase[r] == FWD:
            lay = int(m.layer[r])
            kv = _input_bytes(m, r, (1, 2))
            if (lay, "k") in proj and (lay, "v") in proj:  # grouped-query K/V heads before their expansion
                kv = min(kv, proj[(lay, "k")] + proj[(lay, "v")])
            fwd_kv[lay] = kv
    out = {}
    for r in rows:
        got = fwd_kv.get(int(m.layer[r]))
        if got is None:
            raise ParallelizeError(f"node {int(m.trace.ids[r])}: an attention backward without its forward")
        out[r] = got
    return out


def _input_bytes(m: Master, row: int, which: tuple[int, ...]) -> int:
    """Bytes of some of a row's inputs (shape x dtype as the capture recorded them)."""
    t = m.trace
    ex, ip = t.extra, t.extra_indptr
    msg = pb.Node.FromString(ex[int(ip[row]) : int(ip[row + 1])].tobytes())
    node = f"node {int(t.ids[row])}"
    shapes = capture_json(msg.inputs.shapes, f"{node} input shapes")
    types = capture_json(msg.inputs.types, f"{node} input types")
    total = 0
    for i in which:
        try:
            dims, ty = shapes[i], types[i]
            size = _ITEMSIZE[ty[len("Tensor(") : -1]]
        except (IndexError, KeyError, TypeError):
            raise ParallelizeError(f"{node} ({m.ops[row]}): input {i} is no tensor of a known dtype") from None
        if not isinstance(dims, list) or not all(type(x) is int and 0 <= x < 1 << 40 for x in dims):
            raise ParallelizeError(f"{node}: input {i}'s shape is not a list of sizes")
        total += int(np.prod(dims, dtype=np.int64)) * size
    return total


def _part(v: int, i: int, n: int) -> int:
    return v * (i + 1) // n - v * i // n


def emit(sb, r: int, ph: int, deps: list[int], ops: int, nbytes: int, kv: int, name: str, attrs: dict) -> int:
    """Attention row r of a micro-batch with its K/V exchange (module docstring); `kv`: this
    rank's K and V bytes in the micro-batch; `attrs`: the compute node's other attributes.
    Returns the id the row's consumers wait for."""
    plan, b = sb.plan, sb.b
    cp, pp = plan.cp, plan.pp

    def comp(i: int, n: int, on: list[int]) -> int:
        return b.add(
            name,
            NodeType.COMP_NODE,
            data_deps=dict.fromkeys(on),
            is_cpu_op=False,
            num_ops=_part(ops, i, n),
            tensor_size=_part(nbytes, i, n),
            **attrs,
        )

    if plan.cp_comm == "all-gather":
        half = kv // 2  # K, then V
        gathers = [sb.coll(AG, size, CP, f"cp_{x}_all_gather", deps) for x, size in (("k", half), ("v", kv - half))]
        nid = comp(0, 1, deps + gathers)
        if ph == BWD:
            for x, size in (("k", half), ("v", kv - half)):
                nid = sb.coll(RS, size * cp, CP, f"cp_d{x}_reduce_scatter", [nid])
        return nid
    bwd = ph == BWD
    ring = {"micro_batch": attrs.get("micro_batch")}
    stats = sb.stats.p2p
    recv: int | None = None  # the previous step's receive
    prev: int | None = None  # the previous step's compute
    sends = cp if bwd else cp - 1
    for i in range(cp):
        if i < sends:
            # backward: K/V first, then K/V with the dK/dV gathered so far, last the dK/dV alone
            what = "kv" if not bwd or i == 0 else ("dkv" if i == cp - 1 else "kv_dkv")
            size = 2 * kv if what == "kv_dkv" else kv
            on = list(deps) if i == 0 else [x for x in (recv, prev if bwd else None) if x is not None]
            tag = CP_TAG + 2 * i + bwd
            b.send(pp, size, tag=tag, name=f"cp_{what}_send", deps=on, **ring)
            got = b.recv(pp + 1, size, tag=tag, name=f"cp_{what}_recv", deps=on, **ring)
            for k in ("cp_send", "cp_recv"):
                stats[f"{k}s"] = stats.get(f"{k}s", 0) + 1
                stats[f"{k}_bytes"] = stats.get(f"{k}_bytes", 0) + size
        prev = comp(i, cp, list(deps) if i == 0 else [x for x in (prev, recv) if x is not None])
        if i < sends:
            recv = got
    assert prev is not None
    if not bwd:
        return prev
    # the rank's own dK/dV: the last step's receive, added to what the last step computed
    return b.add(name, NodeType.COMP_NODE, data_deps=dict.fromkeys([prev, recv]), is_cpu_op=False, **attrs)


def apply(lay: Layout) -> Layout:
    """`lay` under the plan's context parallelism (module docstring): each row's divisor, the
    attention rows' K/V bytes per rank, and the activations TP, PP and the loss move, / cp."""
    plan, m = lay.plan, lay.master
    lay.cp_div = row_div(m, plan)
    if plan.cp == 1:
        return lay
    cp = plan.cp
    lay.cp_kv = {r: kv // int(lay.div[r]) // cp for r, kv in kv_rows(m, plan).items()}
    lay.div = lay.div * lay.cp_div
    for lc in lay.layer_comm.values():
        lc.act_bytes //= cp
    lay.vocab_fwd_after = [(r, size // cp) for r, size in lay.vocab_fwd_after]
    lay.vocab_bwd_after = [(r, size // cp) for r, size in lay.vocab_bwd_after]
    lay.master_act_bytes //= cp
    return lay


def rank_trace(template: Trace, groups: dict[str, str], plan: Plan, t: int, p: int, d: int, c: int) -> Trace:
    """Stage p's template for rank (t, c, p, d): placeholder groups renamed, pipeline peers'
    stages made ranks of the same (t, c, d), ring peers (stage pp: the next, pp + 1: the previous)
    the next and previous CP ranks of the same (t, p, d)."""
    p2p = (template.types == NodeType.COMM_SEND_NODE) | (template.types == NodeType.COMM_RECV_NODE)
    cols = {k: getattr(template, k) for k in Trace.ARRAYS}
    stride, base = plan.tp * plan.cp, plan.rank(t, 0, d, c)
    here = plan.rank(t, p, d, 0)
    for attr in (Attr.COMM_SRC, Attr.COMM_DST):
        col = getattr(template, attr)
        mask = p2p & template.has(attr)
        v = col.astype(np.int64)
        ring = here + plan.tp * np.where(v == plan.pp, (c + 1) % plan.cp, (c - 1) % plan.cp)
        cols[attr] = np.where(mask, np.where(v < plan.pp, base + stride * v, ring), col).astype(col.dtype)
    names = [groups.get(g, g) for g in template.groups]
    return Trace(
        len(template), metadata=template.metadata, names=template.names, groups=names, placed=template.placed, **cols
    )


__all__ = ["CP", "apply", "row_div", "kv_rows", "emit", "rank_trace", "is_attention"]
