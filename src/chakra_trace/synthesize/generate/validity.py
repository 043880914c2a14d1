"""Structural checks of a model file's grammar forest and relations: what sampling relies on.

A model file may come from anyone. Sampling walks each grammar tree recursively, multiplies
repeat counts and indexes arrays by the relations' levels, so a forest that is not one (a cycle
through `tree_parent`, a node listed twice, a lane root that is also a child), nesting past
`MAX_DEPTH`, instance counts that disagree with the repeats, or a relation whose levels do not
match its slots' repeats would recurse without end, hang or index out of range. These checks run
once on reading, in numpy passes (one per tree level), and say which field is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import grammar, relations
from .grammar import Tree
from .relations import Relations

#: Nesting of grammar nodes. A repeat's body is at most half its span, so a lane of 2^32 ops
#: nests fewer than 32 repeats; fitted models nest 3 or 4.
MAX_DEPTH = 32

Fail = Callable[[str], Exception]


@dataclass
class Shape:
    """What the checks learn of a valid forest: per node its lane and REP ancestors (outermost
    first); per slot its LIT node and its instances at the tree's own counts."""

    lane: np.ndarray
    levels: list[list[int]]
    leaf: np.ndarray
    instances: np.ndarray


def _children_of(t: Tree, nodes: np.ndarray) -> np.ndarray:
    """The children of `nodes`, concatenated (CSR gather)."""
    lo, hi = t.child_ptr[nodes], t.child_ptr[nodes + 1]
    lens = hi - lo
    if not lens.sum():
        return np.zeros(0, np.int64)
    idx = np.repeat(lo - np.concatenate(([0], np.cumsum(lens)[:-1])), lens) + np.arange(int(lens.sum()))
    return t.child[idx]


def check_tree(t: Tree, slots: int, fail: Fail) -> Shape:
    """A forest with one root per lane, each node the child of the one parent it names, at most
    MAX_DEPTH deep, literal slots numbered 0..slots-1 once each (index bounds and CSR shapes are
    checked by the caller)."""
    n = t.kind.size
    if ((t.kind < grammar.SEQ) | (t.kind > grammar.LIT)).any():
        raise fail("tree_kind must be 0 (sequence), 1 (repeat) or 2 (literal)")
    if (t.count < 1).any():
        raise fail(f"tree_count holds {int(t.count[t.count < 1][0])}: a repeat count below 1")
    roots = t.roots
    is_root = np.zeros(n, bool)
    is_root[roots] = True
    if int(is_root.sum()) != roots.size:
        raise fail("tree_roots names a node twice: one root per lane")
    if (t.parent[roots] != -1).any():
        v = int(roots[t.parent[roots] != -1][0])
        raise fail(f"lane root {v} has tree_parent {int(t.parent[v])}, expected -1")
    listed = np.bincount(t.child, minlength=n)
    if (listed[is_root] != 0).any():
        raise fail(f"lane root {int(np.flatnonzero(is_root & (listed > 0))[0])} is also listed in tree_child")
    bad = ~is_root & (listed != 1)
    if bad.any():
        v = int(np.flatnonzero(bad)[0])
        raise fail(f"node {v} is listed {int(listed[v])} times in tree_child, expected once")
    owner = np.repeat(np.arange(n), np.diff(t.child_ptr))
    wrong = t.parent[t.child] != owner
    if wrong.any():
        k = int(np.flatnonzero(wrong)[0])
        c = int(t.child[k])
        raise fail(f"node {c} has tree_parent {int(t.parent[c])} but is listed as a child of node {int(owner[k])}")
    if (t.kind[owner] == grammar.LIT).any():
        raise fail(f"literal node {int(owner[t.kind[owner] == grammar.LIT][0])} has children")

    lane = np.full(n, -1, np.int64)
    lane[roots] = np.arange(roots.size)
    mult = np.zeros(n)  # instances of each node: the product of its REP ancestors' counts
    mult[roots] = 1.0
    frontier = roots
    for depth in range(1, MAX_DEPTH + 2):
        kids = _children_of(t, frontier)
        if not kids.size:
            break
        if depth > MAX_DEPTH:
            raise fail(f"the grammar nests more than {MAX_DEPTH} levels deep")
        par = t.parent[kids]
        lane[kids] = lane[par]
        with np.errstate(over="ignore"):
            mult[kids] = mult[par] * np.where(t.kind[par] == grammar.REP, t.count[par], 1)
        frontier = kids
    if (lane < 0).any():
        v = int(np.flatnonzero(lane < 0)[0])
        raise fail(f"node {v} is under no lane root (tree_parent and tree_child go round in a cycle)")

    lit = t.kind == grammar.LIT
    if (t.nslots < 0).any() or (t.nslots[~lit] != 0).any():
        raise fail("tree_nslots must be >= 0, and 0 for a node that is not a literal")
    s0, ns = t.slot0[lit], t.nslots[lit]
    order = np.argsort(s0, kind="stable")
    starts = np.concatenate(([0], np.cumsum(ns[order])[:-1])) if order.size else order
    if (s0[order] != starts).any() or int(ns.sum()) != slots:
        raise fail(f"the literals' slots (tree_slot0, tree_nslots) do not number 0..{slots - 1} once each")
    leaf = t.slot_leaf()
    return Shape(lane=lane, levels=t.levels(), leaf=leaf, instances=mult[leaf])


def check_relations(rel: Relations, shape: Shape, fail: Fail) -> None:
    """Each relation has one level per repeat around its u slot, of a known type; a DELTA level
    is a repeat that holds both slots; a LINK or MIRROR refers to a repeat around its v slot;
    its applicable instances exist; and no relation makes an op depend on itself."""
    m = len(rel)
    if ((rel.kind < 0) | (rel.kind > 1)).any():
        raise fail("rel_kind must be 0 (data) or 1 (control)")
    if ((rel.lvl_type < relations.DELTA) | (rel.lvl_type > relations.EACH)).any():
        raise fail(f"rel_lvl_type must be 0..{relations.EACH} ({', '.join(relations.LEVEL_NAMES)})")
    lv = [shape.levels[x] for x in shape.leaf[rel.v].tolist()]
    lu = [shape.levels[x] for x in shape.leaf[rel.u].tolist()]
    width = np.diff(rel.lvl_ptr)
    for r in range(m):
        if width[r] != len(lu[r]):
            raise fail(f"relation {r} has {int(width[r])} levels; slot {int(rel.u[r])} is in {len(lu[r])} repeats")
        lo = int(rel.lvl_ptr[r])
        self_loop = int(rel.v[r]) == int(rel.u[r])
        for j in range(len(lu[r])):
            typ, ref, b = int(rel.lvl_type[lo + j]), int(rel.lvl_ref[lo + j]), int(rel.lvl_b[lo + j])
            if typ == relations.DELTA and (j >= len(lv[r]) or lv[r][j] != lu[r][j]):
                raise fail(f"relation {r}: a delta level {j} on a repeat its v slot is not in")
            if typ in (relations.LINK, relations.MIRROR) and not 0 <= ref < len(lv[r]):
                raise fail(f"relation {r}: level {j} refers to repeat {ref} of {len(lv[r])} around its v slot")
            self_loop &= typ == relations.DELTA and b == 0
        if self_loop:
            raise fail(f"relation {r} makes slot {int(rel.v[r])} depend on itself (the same instance)")
    app_owner = np.repeat(np.arange(m), np.diff(rel.app_ptr))
    if app_owner.size:
        n_v = shape.instances[rel.v[app_owner]]
        bad = (rel.app < 0) | (rel.app >= n_v)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise fail(
                f"relation {int(app_owner[k])}: rel_app holds instance {int(rel.app[k])} of a slot with {n_v[k]:.0f}"
            )
