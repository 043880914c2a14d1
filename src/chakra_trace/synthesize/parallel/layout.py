"""Where each master-trace op runs under a plan: its pipeline stage(s), its tensor-parallel
divisor, and the points where tensor- and data-parallel communication attaches.

Stages: layer L runs on virtual stage L * pp * V // layers (an even split; V: the chunks per stage
of an interleaved schedule, 1 otherwise), which is chunk v // pp of stage v % pp; "pre" modules
(embeddings) on the first virtual stage, "post" modules (final norm, LM head, loss) on the last;
the model's own ops (module "", e.g. RoPE tables) on every virtual stage that uses their results
(redundant work, counted, once per stage: in its first such chunk), and on the first stage when
only an optimizer does.

Tensor parallelism (Megatron-LM): in each layer the modules holding column-/row-parallel linears
(`attn`, `mlp`: the TP region) have every op's FLOPs and bytes divided by tp (heads and FFN
columns are split, so attention, RoPE, activation functions shrink with them); norms and residual
adds are replicated on every TP rank (with sequence parallelism they run on 1/tp of the
sequence: divided too). Token embeddings, the LM head and the loss are vocab-parallel (divided);
the final norm and learned position embeddings (a leaf name holding "pos") are replicated. A
module of an attention type that projects without linear submodules (torch's
nn.MultiheadAttention) is a region of its own, its all-reduces after the op whose result leaves
it in forward (its output) and in backward (its input's gradient).
Optimizer ops divide as their parameters do. Division is per op, rounded down (a 1-FLOP step
counter divides to 0), so per-rank sums can fall short of master / tp by less than tp per op.

Expert parallelism (GShard, Megatron-LM's all-to-all token dispatcher): each rank of an expert
group holds experts / ep of a mixture's experts and runs them on the tokens every rank of its
group routed to them, so an expert op's FLOPs and bytes per rank are the master's (balanced
routing) while its parameters, their gradients and optimizer work are divided by ep. The token
copies cross the group by all-to-all where data enters and leaves the experts module: after
every op outside it whose result an op inside reads, and after every op inside whose result an
op outside reads, in forward (dispatch, combine) and in backward (their gradients); comm_size is
that result's bytes per micro-batch (tokens x top_k x hidden x dtype: all a rank sends, 1/ep of
it to itself).
Context parallelism divides every forward and backward op further (by cp, but for the model's
own ops) and the activations that TP, PP and the loss move; attention's K/V exchange: `cp`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...schema.compute_types import ATTENTION_OPS
from .cp import apply as cp_apply
from .master import (
    ATTENTION,
    BWD,
    COLUMN,
    CORE_ATTENTION,
    EXPERTS,
    FWD,
    OPT,
    ROW,
    Master,
    ParallelizeError,
    Param,
    expert_region,
    in_core_attention,
    layer_of,
    layer_path,
    leaf,
)
from .plan import Plan


def _is_norm(module: str) -> bool:
    return "norm" in leaf(module).lower() or leaf(module).lower().startswith("ln")


@dataclass
class LayerComm:
    """A layer's TP collective points: rows after which forward all-reduces go (the row-parallel
    linears' last ops), rows after which backward all-reduces go (each column-parallel group's last
    backward op), and the activation bytes (batch x seq x hidden x dtype) of the whole batch."""

    fwd_after: list[int] = field(default_factory=list)
    bwd_after: list[int] = field(default_factory=list)
    act_bytes: int = 0


@dataclass
class Layout:
    master: Master
    plan: Plan
    stages: list[set[int]]  # stages of each row (one, or several for shared root ops)
    vstages: list[set[int]]  # its virtual stages (chunk * pp + stage)
    div: np.ndarray  # TP divisor of each row's FLOPs and bytes (forward/backward)
    opt_div: np.ndarray  # TP divisor of optimizer rows (parameters' split; no SP)
    layer_comm: dict[int, LayerComm]
    vocab_fwd_after: list[tuple[int, int]]  # (row, bytes): all-reduce after (embedding output)
    vocab_bwd_after: list[tuple[int, int]]  # (row, bytes): all-reduce after (LM head input grad)
    loss_after: int | None  # row after which the vocab-parallel loss's three all-reduces go
    tokens: int  # batch x seq
    param_div: dict[str, int]  # parameter name -> TP divisor
    master_act_bytes: int  # one layer's output (batch x seq x hidden x dtype): what stages pass on
    redundant_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    expert: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # rows inside a mixture's experts
    ep_after: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # row -> all-to-alls (bytes, name)
    recomputed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # forward rows run again
    cp_div: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # of div: context parallelism's
    cp_kv: dict[int, int] = field(default_factory=dict)  # attention row -> its K and V bytes per rank (whole batch)

    def is_expert_param(self, p: Param) -> bool:
        return expert_region(p.module) is not None

    def stage_of_param(self, p: Param) -> int:
        m = self.master
        if p.producer >= 0:
            return min(self.stages[p.producer])
        return _module_stage(m, self.plan, p.module)


def _module_stage(m: Master, plan: Plan, module: str) -> int:
    """The virtual stage of a module's ops."""
    vs = plan.pp * plan.virtual_stages
    lay = layer_of(module)
    if lay is not None and m.layers:
        return lay * vs // m.layers
    return vs - 1 if m.place.get(module) == "post" else 0


def layout(m: Master, plan: Plan) -> Layout:
    n = len(m)
    vs = plan.pp * plan.virtual_stages
    if vs > 1 and m.layers < vs:
        what = f"{plan.pp} pipeline stages" + (f" x {plan.virtual_stages} chunks" if plan.virtual_stages > 1 else "")
        raise ParallelizeError(f"{m.layers} layers cannot fill {what}")
    vstages: list[set[int]] = [set() for _ in range(n)]
    for r in range(n):
        mod = m.module[r]
        if m.place.get(mod) == "root":
            continue
        vstages[r] = {_module_stage(m, plan, mod)}
    for r in range(n - 1, -1, -1):  # root ops: wherever their results are used
        if m.place.get(m.module[r]) != "root":
            continue
        used: set[int] = set()
        for c in m.consumers[r]:
            used |= vstages[c]
        vstages[r] = used or {0}
    stages = [{v % plan.pp for v in vs_} for vs_ in vstages]
    # tensor-parallel regions and roles, per layer
    firsts: dict[str, int] = {}
    for r in range(n):
        if m.phase[r] == FWD:
            firsts.setdefault(m.module[r], r)
    region_roots: set[str] = set()
    for mod in firsts:
        lp = layer_path(mod)
        if lp is not None and _is_attention(m, mod):
            region_roots.add(mod)
            continue
        if lp is None or leaf(mod) not in COLUMN | ROW:
            continue
        parent = mod.rpartition(".")[0]
        region_roots.add(parent if parent != lp else mod)
    vocab = {
        mod
        for mod, where in m.place.items()
        if where in ("pre", "post") and not _is_norm(mod) and "pos" not in leaf(mod)
    }

    def tp_split(mod: str) -> bool:
        if mod in vocab:
            return True
        return any(mod == root or mod.startswith(root + ".") for root in region_roots)

    split = {mod: tp_split(mod) for mod in set(m.module)}
    div = np.ones(n, np.int64)
    opt_div = np.ones(n, np.int64)
    tp = plan.tp
    for r in range(n):
        mod = m.module[r]
        if split[mod]:
            opt_div[r] = tp
            div[r] = tp
        elif plan.sp and m.layer[r] >= 0 and m.phase[r] != OPT:
            div[r] = tp  # sequence parallel: norms, residuals and dropout on 1/tp of the sequence
    opt_rows = m.phase == OPT
    div = np.where(opt_rows, opt_div, div)
    param_div = {p.name: tp if split.get(p.module, tp_split(p.module)) else 1 for p in m.params}
    layer_comm = _layer_comm(m, firsts) if tp > 1 else {}
    vocab_fwd: list[tuple[int, int]] = []
    vocab_bwd: list[tuple[int, int]] = []
    loss_after = None
    if tp > 1:
        for mod in sorted(vocab, key=lambda x: firsts.get(x, n)):
            rows = [r for r in range(n) if m.module[r] == mod and m.is_real(r)]
            fwd = [r for r in rows if m.phase[r] == FWD]
            bwd = [r for r in rows if m.phase[r] == BWD]
            if m.place[mod] == "pre" and fwd and mod != "loss":
                vocab_fwd.append((fwd[-1], m.out_bytes(fwd[-1])))
            elif m.place[mod] == "post" and mod != "loss" and bwd and fwd:
                act = _act_bytes(m, layer_comm)
                vocab_bwd.append((bwd[-1], act))
                loss_after = fwd[-1]
    redundant = np.flatnonzero(div[:n] == 1) if tp > 1 else np.zeros(0, np.int64)
    region = [expert_region(mod) for mod in m.module]
    if plan.ep > 1 and not any(region):
        raise ParallelizeError(
            f"expert parallelism (ep {plan.ep}) needs a mixture of experts: no module of the master trace is "
            f"named {' or '.join(sorted(EXPERTS))}"
        )
    lay = Layout(
        master=m,
        plan=plan,
        stages=stages,
        vstages=vstages,
        div=div,
        opt_div=opt_div,
        layer_comm=layer_comm,
        vocab_fwd_after=vocab_fwd,
        vocab_bwd_after=vocab_bwd,
        loss_after=loss_after,
        tokens=m.batch * m.seq,
        param_div=param_div,
        master_act_bytes=_layer_output(m),
        redundant_rows=redundant,
        expert=np.array([x is not None for x in region], bool),
        ep_after=_expert_exchanges(m, region) if plan.ep > 1 else {},
        recomputed=_recomputed(m, plan),
    )
    return cp_apply(lay)  # context parallelism's shares (cp.py)


def _recomputed(m: Master, plan: Plan) -> np.ndarray:
    """The forward rows activation recomputation runs again before their layer's backward:
    every layer op ("full"), or each layer's core attention ("selective", Korthikanti et al.
    2022: the ops between the QKV projection's output and the output projection's input, in a
    module named `core_attention`). A core attention holding a fused attention op (SDPA, flash)
    is not run again: the fused kernel keeps no scores for backward and recomputes them inside its
    own backward, which the capture holds already; so selective recomputation of such a layer
    adds nothing."""
    layer_rows = (m.phase == FWD) & (m.layer >= 0)
    if plan.recompute == "full":
        return layer_rows
    if plan.recompute != "selective":
        return np.zeros(len(m), bool)
    inside = {mod: in_core_attention(mod) for mod in set(m.module)}
    core = layer_rows & np.array([inside[mod] for mod in m.module], bool)
    if not core.any():
        raise ParallelizeError(
            f"selective recomputation runs each layer's core attention again: no module of the master trace is "
            f"named {' or '.join(sorted(CORE_ATTENTION))} (Megatron-LM's name; examples/models/gpt.py has one)"
        )
    rows = np.flatnonzero(core)
    fused = {int(m.layer[r]) for r in rows if m.ops[r].split(".")[0] in ATTENTION_OPS}
    if fused:
        core &= ~np.isin(m.layer, sorted(fused))
    return core


def _crossings(m: Master, region: list[str | None]) -> list[int]:
    """Forward and backward rows whose result an op of the same phase in another region (or
    outside any) reads: where data enters or leaves a region, in row order."""
    out = []
    for r in range(len(m)):
        ph = m.phase[r]
        if ph != OPT and any(m.phase[c] == ph and region[c] != region[r] for c in m.consumers[r]):
            out.append(r)
    return out


def _expert_exchanges(m: Master, region: list[str | None]) -> dict[int, list[tuple[int, str]]]:
    """The all-to-alls of expert parallelism (see the module docstring): row -> [(bytes, name)]."""
    out: dict[int, list[tuple[int, str]]] = {}
    for r in _crossings(m, region):
        ph = m.phase[r]
        into = region[r] is None  # tokens enter the experts: the dispatch, or in backward the combine's gradient
        kind = ("dispatch" if into else "combine") if ph == FWD else ("combine_grad" if into else "dispatch_grad")
        name = f"ep_{kind}_all_to_all"
        out[r] = [(m.out_bytes(r), name)]
    return out


def _layer_output(m: Master) -> int:
    """Bytes of the first layer's output (its last real forward op's): the activation one pipeline
    stage hands the next for the whole batch."""
    rows = np.flatnonzero((m.layer == 0) & (m.phase == FWD))
    real = [int(r) for r in rows if m.is_real(int(r))]
    return m.out_bytes(real[-1]) if real else 0


def _act_bytes(m: Master, layer_comm: dict[int, LayerComm]) -> int:
    for lc in layer_comm.values():
        if lc.act_bytes:
            return lc.act_bytes
    return 0


def _is_attention(m: Master, module: str) -> bool:
    return m.module_types.get(module) in ATTENTION


def _leaving(m: Master) -> dict[tuple[str, int], int]:
    """(attention module, phase) -> the last op inside it whose result an op of that phase
    outside it reads (its output; in backward its input's gradient). A row's module is its
    outermost attention-type ancestor or itself."""
    of: dict[str, str | None] = {}
    for mod in set(m.module):
        parts = mod.split(".")
        prefixes = (".".join(parts[: i + 1]) for i in range(len(parts)))
        of[mod] = next((q for q in prefixes if _is_attention(m, q)), None)
    region = [of[mod] for mod in m.module]
    out: dict[tuple[str, int], int] = {}
    for r in _crossings(m, region):
        inside = region[r]
        if inside is not None:
            out[(inside, int(m.phase[r]))] = r
    return out


def _layer_comm(m: Master, firsts: dict[str, int]) -> dict[int, LayerComm]:
    """Per layer: the forward all-reduce after each row-parallel linear, and the backward
    all-reduce after each group of column-parallel linears (those before one row-parallel
    linear in forward order: q/k/v before o_proj, gate/up before down_proj) has its input
    gradient."""
    out: dict[int, LayerComm] = {}
    last_fwd: dict[str, int] = {}
    last_bwd: dict[str, int] = {}
    for r in range(len(m)):
        if not m.is_real(r) or m.layer[r] < 0:
            continue
        if m.phase[r] == FWD:
            last_fwd[m.module[r]] = r
        elif m.phase[r] == BWD:
            last_bwd[m.module[r]] = r
    leaving = _leaving(m) if any(_is_attention(m, mod) for mod in firsts) else {}
    by_layer: dict[int, list[str]] = {}
    for mod, first in sorted(firsts.items(), key=lambda kv: kv[1]):
        lp = layer_path(mod)
        if lp is not None and (leaf(mod) in COLUMN | ROW or _is_attention(m, mod)):
            by_layer.setdefault(int(m.layer[first]), []).append(mod)
    for lay, mods in by_layer.items():
        lc = LayerComm()
        group: list[str] = []
        for mod in mods:
            if _is_attention(m, mod):  # its output, and in backward its input's gradient, leave it summed
                fwd, bwd = leaving.get((mod, FWD)), leaving.get((mod, BWD))
                if fwd is not None:
                    lc.fwd_after.append(fwd)
                    lc.act_bytes = lc.act_bytes or m.out_bytes(fwd)
                if bwd is not None:
                    lc.bwd_after.append(bwd)
                continue
            if leaf(mod) in COLUMN:
                group.append(mod)
                continue
            if mod in last_fwd:
                lc.fwd_after.append(last_fwd[mod])
                if not lc.act_bytes:
                    lc.act_bytes = m.out_bytes(last_fwd[mod])
            ends = [last_bwd[g] for g in group if g in last_bwd]
            if ends:
                lc.bwd_after.append(max(ends))
            group = []
        out[lay] = lc
    return out


__all__ = ["Layout", "LayerComm", "layout"]
