"""How big a sample would be, worked out from the model's count rules before anything is built.

A model file may come from anyone, and a few bytes of it can ask for a huge job: a repeat count
rule of 1e5 per layer, a `tree_count` of 1e12, a job of 10^5 ranks. `plan_sample` computes,
from the counts alone, the nodes each rank would get, the largest repeat and an upper bound on
the dependencies the relations would make, and refuses, with one line giving the figure, a
sample past these limits:

- nodes per rank: the node limit every trace load has (`io.memory.node_limit`:
  ``max_nodes=``, else ``$CHAKRA_TRACE_MAX_NODES``, else what half the available memory holds,
  here at `SAMPLE_NODE_BYTES` a node: expanding takes about twice what a loaded node does);
  no repeat count may pass it either (an empty repeat would still count its instances);
- dependencies per rank: `DEPS_PER_NODE` times that limit (fitted models make 1-3 per node);
- ranks taken from the model: `MAX_RANKS` (``$CHAKRA_GENERATE_MAX_RANKS``); ``ranks=`` (CLI
  ``--ranks``) scales a sample out by data parallelism beyond it, as the user's own choice;
- layers asked for: `MAX_LAYERS`.

Ranks running one program share its expanded structure, so the work is one expansion per
distinct program plus, per rank, its drawn durations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import ChakraError
from ...io.memory import ENV_MAX_NODES, NODE_BYTES, env_int, node_limit
from . import grammar, relations
from .model import GeneratorModel, Job, Program

MAX_RANKS = 4096
MAX_RANKS_ENV = "CHAKRA_GENERATE_MAX_RANKS"
MAX_LAYERS = 1 << 31
DEPS_PER_NODE = 4  # dependencies a sample may make per node of the limit (fitted models: 1-2.5)
SAMPLE_NODE_BYTES = 400  # peak memory per node while a program expands (measured: ~330 B)


def max_ranks() -> int:
    """Ranks a sample may take from a model's job: $CHAKRA_GENERATE_MAX_RANKS, else 4096."""
    return env_int(MAX_RANKS_ENV) or MAX_RANKS


def layer_target(job: Job, layers_scale: float = 1.0, layers: int | None = None) -> int:
    """The layer count asked for: `layers`, else the job's times `layers_scale`."""
    if layers is None and not (math.isfinite(layers_scale) and layers_scale > 0):
        raise ChakraError(f"layers_scale must be a finite number > 0, got {layers_scale}")
    target = int(layers) if layers is not None else int(round(job.layers * layers_scale))
    if target == job.layers:
        return target
    if job.layers < 2:
        raise ChakraError(f"job {job.name!r} has no repeated layer block: its layer count cannot change")
    if not 1 <= target <= MAX_LAYERS:
        raise ChakraError(f"a layer count of {target} (job {job.name!r} has {job.layers}; at most {MAX_LAYERS:,})")
    return target


def template(model: GeneratorModel, p: Program, factor: float) -> Program:
    """The program to expand for `p` at `factor` times its layers: of its family (`fit`), the
    member whose layer count is nearest the one asked for (the larger on a tie): its relations
    and sizes were seen closest to it."""
    if factor == 1.0:
        return p
    want = p.layers * factor
    key = p.family_key()
    family = [q for q in model.programs if q.layers != p.layers and q.family_key() == key] + [p]
    return min(family, key=lambda q: (abs(q.layers - want), -q.layers))


def rule_counts(p: Program, factor: float) -> np.ndarray:
    """Repeat counts of a program at `factor` times its layers (count rules, at least 1), as
    floats: huge or infinite where a rule says so, which `plan_sample` refuses before any
    becomes an integer."""
    if factor == 1.0:
        return p.tree.count.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.rint(p.count_a * (p.layers * factor) + p.count_b)
    c = np.where(np.isnan(c), np.inf, c)
    return np.where(p.tree.kind == grammar.REP, np.maximum(c, 1.0), 1.0)


def program_counts(p: Program, factor: float) -> np.ndarray:
    """Repeat counts of a program at `factor` times its layers, as integers (each at most 2^62:
    check the sample's size with `plan_sample` first)."""
    return np.minimum(rule_counts(p, factor), float(1 << 62)).astype(np.int64)


@dataclass
class Expansion:
    """One distinct program of a sample: the template expanded, its factor (layers asked for
    over the template's), its repeat counts, and its size per rank."""

    template: Program
    factor: float
    counts: np.ndarray
    nodes: int


def program_size(p: Program, counts: np.ndarray) -> tuple[float, float, float]:
    """(nodes, an upper bound on the dependencies, the largest repeat count) of `p` expanded
    with `counts` (floats: nothing is built, nothing overflows)."""
    tree = p.tree
    levels = tree.levels()
    leaf = tree.slot_leaf()
    mult = np.ones(tree.kind.size)
    with np.errstate(over="ignore", invalid="ignore"):
        for v in np.flatnonzero(tree.kind == grammar.LIT).tolist():
            if levels[v]:
                mult[v] = float(np.prod(counts[levels[v]]))
        inst = mult[leaf]
        rel = p.rel
        fan = np.ones(len(rel))  # an EACH level makes each applicable instance depend on a whole repeat
        for q in np.flatnonzero(rel.lvl_type == relations.EACH).tolist():
            r = int(np.searchsorted(rel.lvl_ptr, q, side="right") - 1)
            u_levels = levels[int(leaf[rel.u[r]])]
            fan[r] *= counts[u_levels[q - int(rel.lvl_ptr[r])]]
        nodes = float(inst.sum())
        deps = float((inst[rel.v] * fan).sum())
    reps = counts[tree.kind == grammar.REP]
    return nodes, deps, float(reps.max()) if reps.size else 1.0


def _num(x: float) -> str:
    return f"{x:,.0f}" if x < 1e15 else f"{x:.3g}"


def _check_ranks(at: str, job: Job) -> None:
    limit_ranks = max_ranks()
    if job.ranks > limit_ranks:
        raise ChakraError(
            f"{at}job {job.name!r} has {job.ranks:,} ranks, more than the {limit_ranks:,} a sample takes from a "
            f"model (set {MAX_RANKS_ENV} to allow more)"
        )


def _check_size(at: str, job: Job, target: int, k: int, p: Program, counts: np.ndarray, max_nodes: int | None) -> int:
    """The nodes per rank of program `k` (`p`) expanded with `counts`, refused past the limits."""
    limit, source = node_limit(max_nodes)
    if max_nodes is None and env_int(ENV_MAX_NODES) is None:  # the memory's limit, at what sampling takes
        limit = max(1, limit * NODE_BYTES // SAMPLE_NODE_BYTES)
        source += f", at {SAMPLE_NODE_BYTES} B per sampled node"
    nodes, deps, largest = program_size(p, counts)
    what = f"{at}a sample like {job.name!r} at {target} layers"
    if nodes > limit or largest > limit:
        raise ChakraError(
            f"{what} would build {_num(nodes)} nodes per rank (program {k}, largest repeat count "
            f"{_num(largest)}), over the limit of {limit:,} nodes ({source}); set {ENV_MAX_NODES} or "
            "max_nodes= to allow more"
        )
    if deps > DEPS_PER_NODE * limit:
        raise ChakraError(
            f"{what} would make up to {_num(deps)} dependencies per rank (program {k}), over {DEPS_PER_NODE} "
            f"times the limit of {limit:,} nodes ({source}); set {ENV_MAX_NODES} or max_nodes= to allow more"
        )
    return int(nodes)


def plan_sample(model: GeneratorModel, job: Job, target: int, max_nodes: int | None = None) -> dict[int, Expansion]:
    """Per distinct program of `job`, what a sample at `target` layers expands, after checking
    its size against the limits (module docstring; ChakraError naming the model file)."""
    at = f"{model.source}: " if model.source else ""
    _check_ranks(at, job)
    factor = target / job.layers
    out: dict[int, Expansion] = {}
    for k in sorted(set(job.rank_program)):
        p = model.programs[k]
        q = template(model, p, factor)
        f = p.layers * factor / q.layers
        counts = rule_counts(q, f)
        nodes = _check_size(at, job, target, k, q, counts, max_nodes)
        out[k] = Expansion(q, f, counts.astype(np.int64), nodes)
    return out


def baseline_nodes(model: GeneratorModel, job: Job, target: int, max_nodes: int | None = None) -> int:
    """Ops per rank of a baseline like `job` at `target` layers (those of its rank 0's program),
    after the same checks as `plan_sample`."""
    at = f"{model.source}: " if model.source else ""
    _check_ranks(at, job)
    k = job.rank_program[0]
    p = model.programs[k]
    return _check_size(at, job, target, k, p, rule_counts(p, target / job.layers), max_nodes)
