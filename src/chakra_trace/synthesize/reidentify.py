"""Re-identification: how many nodes of an obfuscated trace an attacker names right.

Obfuscation hides names, not shape: what an attacker recovers is measured here, per level, so
each level's promise is a number (`benchmarks/obfuscate_reid.py`, `tests/test_attack_obfuscate.py`).
Three attacks give each obfuscated node a guessed name; a node is named right when the guess is
the name of the original node it stands for (`Obfuscated.origins`; a fused node: its chain's
first op):

- ``position`` (the attacker holds the original trace, or a recording of the same model): the
  node at the same relative place in start order.
- ``structure`` (the same attacker, stronger): Weisfeiler-Lehman colour refinement of both graphs
  over what obfuscation keeps (node type, collective type, CPU flag, lane, log2 of the duration
  and of each size, which sizes are present), 3 rounds over dependencies and dependents; a node
  takes the name of the original node of its colour, at the deepest round that has one, nearest
  in relative start position.
- ``reference`` (the attacker holds only other, public traces: the review's attack): each token
  takes the reference op name whose profile (node type, CPU flag, which sizes, log sizes, log
  duration, share of nodes, mean position) is nearest.

Tokens are consistent (one name, one token), so each attack also votes per token; its figure is
the better of its per-node and its voted guesses. Figures are shares of the obfuscated nodes,
also without the PyTorch converter's ``[host]`` gap nodes (the most frequent op, named by any
attacker that counts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..schema.enums import Attr, NodeType
from ..schema.resources import HOST_GAP, node_lanes
from ..schema.trace import Trace

ATTACKS = ("position", "structure", "reference")
ROUNDS = 3
_M1, _M2, _M3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@dataclass
class Recovered:
    """One attack's result on one trace: shares of the obfuscated nodes named right."""

    attack: str
    nodes: int
    named: float  # share of all nodes
    named_without_host: float  # share of the nodes that are not `[host]` gaps

    def to_dict(self) -> dict:
        return {
            "attack": self.attack,
            "nodes": self.nodes,
            "named": self.named,
            "named_without_host": self.named_without_host,
        }


def reidentify(
    original: Trace, obfuscated: Trace, origin: np.ndarray, references: Sequence[Trace] = ()
) -> dict[str, Recovered]:
    """Each attack (`ATTACKS`; ``reference`` only with `references`) on `obfuscated`, scored
    against `original` through `origin` (per obfuscated row, the original row it stands for)."""
    truth = original.name_array[np.asarray(origin, np.int64)] if len(obfuscated) else np.zeros(0, object)
    tokens = obfuscated.name_codes
    guesses = {
        "position": _position(original, obfuscated),
        "structure": _structure(original, obfuscated),
    }
    if references:
        guesses["reference"] = _reference(obfuscated, references)
    host = truth == HOST_GAP
    out = {}
    for attack, guess in guesses.items():
        best = max((_score(g, truth, host) for g in (guess, _vote(guess, tokens))), key=lambda s: s[0])
        out[attack] = Recovered(attack, len(obfuscated), *best)
    return out


def _score(guess: np.ndarray, truth: np.ndarray, host: np.ndarray) -> tuple[float, float]:
    right = guess == truth
    rest = ~host
    return float(right.mean()) if right.size else 0.0, float(right[rest].mean()) if rest.any() else 0.0


def _vote(guess: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Each token's most frequent guess, for all its nodes."""
    if not guess.size:
        return guess
    _, g = np.unique(guess.astype(str), return_inverse=True)
    pairs, counts = np.unique(np.stack([tokens.astype(np.int64), g.reshape(-1)]), axis=1, return_counts=True)
    order = np.lexsort((-counts, pairs[0]))
    first = order[np.r_[True, pairs[0][order][1:] != pairs[0][order][:-1]]]
    best_g = dict(zip(pairs[0][first].tolist(), pairs[1][first].tolist()))
    label = {int(c): guess[i] for c, i in zip(*np.unique(g.reshape(-1), return_index=True))}
    return np.array([label[best_g[int(k)]] for k in tokens.tolist()], dtype=object)


def _place(t: Trace) -> np.ndarray:
    """Each row's relative place in start order (ties by id), in [0, 1)."""
    n = len(t)
    rank = np.empty(n, np.float64)
    rank[np.lexsort((t.ids, t.start))] = np.arange(n) / max(n, 1)
    return rank


def _position(original: Trace, obfuscated: Trace) -> np.ndarray:
    if not len(original):
        return np.full(len(obfuscated), None, object)
    by_start = np.lexsort((original.ids, original.start))
    at = np.minimum(np.rint(_place(obfuscated) * len(original)).astype(np.int64), len(original) - 1)
    return original.name_array[by_start[at]]


# ----------------------------------------------------------------------------- structure


def _bucket(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.floor(np.log2(np.maximum(values.astype(np.float64), 0) + 1)).astype(np.int64)
    return np.where(present, b, -1)


def _features(t: Trace) -> np.ndarray:
    """What obfuscation keeps of each node, as columns of small integers."""
    lane = node_lanes(t)
    known = t.attr_array(Attr.TID)[1] | t.attr_array(Attr.STREAM)[1]  # (no lane: does not shift the ranks)
    lane_rank = np.full(len(t), -1, np.int64)
    lane_rank[known] = np.unique(lane[known], return_inverse=True)[1].reshape(-1)
    coll = t.types == NodeType.COMM_COLL_NODE
    cpu = t.has(Attr.IS_CPU_OP) & t.is_cpu_op
    cols = [
        t.types.astype(np.int64),
        np.where(coll, t.comm_type, -1).astype(np.int64),
        cpu.astype(np.int64),
        lane_rank,
        _bucket(t.duration, np.ones(len(t), bool)),
    ]
    for name in (Attr.NUM_OPS, Attr.TENSOR_SIZE, Attr.COMM_SIZE):
        cols.append(_bucket(getattr(t, name), t.has(name)))
    return np.stack(cols, axis=1)


def _codes(*parts: np.ndarray) -> list[np.ndarray]:
    """Rows of several arrays coded alike (equal rows, equal code)."""
    both = np.concatenate(parts)
    _, code = np.unique(both, axis=0, return_inverse=True) if both.ndim == 2 else np.unique(both, return_inverse=True)
    code = code.reshape(-1)
    cuts = np.cumsum([len(p) for p in parts])[:-1]
    return np.split(code.astype(np.int64), cuts)


def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x.astype(np.uint64) * _M1 + _M2
        x ^= x >> np.uint64(29)
        return x * _M3


def _refine(t: Trace, colour: np.ndarray) -> np.ndarray:
    """One Weisfeiler-Lehman round: a node's colour, its dependencies' and dependents' multisets."""
    g = t.graph()
    up = np.zeros(len(t), np.uint64)
    down = np.zeros(len(t), np.uint64)
    h = _mix(colour)
    with np.errstate(over="ignore"):
        np.add.at(up, g.src, h[g.dst])
        np.add.at(down, g.dst, _mix(h[g.src]))
        return _mix(h ^ _mix(up)) ^ (down * _M2)


def _structure(original: Trace, obfuscated: Trace) -> np.ndarray:
    guess = np.full(len(obfuscated), None, object)
    if not len(original) or not len(obfuscated):
        return guess
    co, cx = _codes(_features(original), _features(obfuscated))
    rounds = [(co, cx)]
    for _ in range(ROUNDS):
        co, cx = _codes(_refine(original, co), _refine(obfuscated, cx))
        rounds.append((co, cx))
    po, px = _place(original), _place(obfuscated)
    names = original.name_array
    open_ = np.ones(len(obfuscated), bool)
    for co, cx in reversed(rounds):  # deepest first: the most specific colour that matches
        order = np.lexsort((po, co))
        sc, sp = co[order], po[order]
        lo = np.searchsorted(sc, cx, "left")
        hi = np.searchsorted(sc, cx, "right")
        hit = open_ & (hi > lo)
        key = sc.astype(np.float64) * 4 + sp
        j = np.searchsorted(key, cx.astype(np.float64) * 4 + px)
        a = np.clip(j - 1, lo, np.maximum(hi - 1, lo))
        b = np.clip(j, lo, np.maximum(hi - 1, lo))
        a, b = np.minimum(a, len(sp) - 1), np.minimum(b, len(sp) - 1)
        near = np.where(np.abs(sp[a] - px) <= np.abs(sp[b] - px), a, b)
        guess[hit] = names[order[near[hit]]]
        open_ &= ~hit
    return guess


# ----------------------------------------------------------------------------- reference

_WEIGHTS = np.array([10, 3, 3, 3, 1.5, 1.5, 1, 1, 0.5])


def _profiles(t: Trace) -> tuple[list[str], np.ndarray]:
    """Per distinct name: (type, CPU share, FLOPs present, bytes present, log FLOPs, log bytes,
    log duration, log share of nodes, mean position), weighted."""
    n = len(t)
    ops, has_ops = t.num_ops, t.has(Attr.NUM_OPS)
    tsz, has_t = t.tensor_size, t.has(Attr.TENSOR_SIZE)
    cpu = (t.has(Attr.IS_CPU_OP) & t.is_cpu_op).astype(np.float64)
    pos = _place(t)
    names, rows = [], []
    order = np.argsort(t.name_codes, kind="stable")
    cuts = np.flatnonzero(np.diff(t.name_codes[order])) + 1
    for r in np.split(order, cuts) if n else []:
        names.append(t.names[int(t.name_codes[r[0]])])
        rows.append(
            [
                float(np.median(t.types[r])),
                float(cpu[r].mean()),
                float(has_ops[r].mean()),
                float(has_t[r].mean()),
                _log_median(ops[r], has_ops[r]),
                _log_median(tsz[r], has_t[r]),
                float(np.median(np.log10(np.maximum(t.duration[r].astype(np.float64), 1)))),
                math.log10(r.size / n),
                float(pos[r].mean()),
            ]
        )
    return names, np.asarray(rows, np.float64).reshape(-1, _WEIGHTS.size) * _WEIGHTS


def _log_median(values: np.ndarray, present: np.ndarray) -> float:
    return float(np.median(np.log10(np.maximum(values[present].astype(np.float64), 1)))) if present.any() else -1.0


def _reference(obfuscated: Trace, references: Sequence[Trace]) -> np.ndarray:
    known: dict[str, np.ndarray] = {}
    for ref in references:
        for name, vec in zip(*_profiles(ref)):
            known.setdefault(name, vec)
    guess = np.full(len(obfuscated), None, object)
    if not known or not len(obfuscated):
        return guess
    ref_names = list(known)
    table = np.stack([known[k] for k in ref_names])
    tokens, vecs = _profiles(obfuscated)
    pick = {tok: ref_names[int(np.argmin(np.linalg.norm(table - v, axis=1)))] for tok, v in zip(tokens, vecs)}
    return np.array([pick.get(s) for s in obfuscated.name_array.tolist()], dtype=object)


__all__ = ["reidentify", "Recovered", "ATTACKS", "ROUNDS"]
