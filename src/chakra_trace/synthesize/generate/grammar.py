"""The hierarchical grammar of one lane's op sequence: literal runs and tandem repeats, nested.

A training step is mostly repetition: the same block of ops once per layer in forward and again
in backward, the same optimizer ops once per parameter, the same micro-batch schedule per
micro-batch. `parse` finds that structure greedily: the exact tandem repeat (a block of tokens
immediately repeated `count` times) that covers the most tokens, then the same left and right of
it, and inside its block (nested repeats: heads in a layer, layers in a micro-batch). What is
left is literal runs. The result is a tree whose literal positions are the *slots* of the
program: every op of the lane is one slot at one *instance* (its index in each enclosing repeat).

The tree is held in flat arrays (`Tree`), so it serializes as is and expands, with other repeat
counts, without a Python object per op (`expand`).

Candidate periods come from the distances between consecutive occurrences of each token, so a
lane of n ops costs O(n x candidates) numpy work, not O(n^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEQ, REP, LIT = 0, 1, 2  # node kinds: a sequence of children, a repeated body, a literal run of slots
MIN_COVER = 2  # a repeat must cover at least this many tokens to be worth a node
MAX_CANDIDATES = 256  # periods tried per interval, the most frequent distances first


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of the runs of True in a boolean array."""
    d = np.diff(np.concatenate(([0], mask.view(np.int8), [0])))
    starts = np.flatnonzero(d == 1)
    return starts, np.flatnonzero(d == -1) - starts


def _candidates(tok: np.ndarray, max_period: int) -> np.ndarray:
    """Periods worth trying: distances between consecutive occurrences of a token."""
    order = np.argsort(tok, kind="stable")
    same = tok[order][1:] == tok[order][:-1]
    d = (order[1:] - order[:-1])[same]
    d = d[d <= max_period]
    if d.size == 0:
        return d
    periods, counts = np.unique(d, return_counts=True)
    if periods.size > MAX_CANDIDATES:
        periods = periods[np.argsort(-counts, kind="stable")[:MAX_CANDIDATES]]
    return np.sort(periods)


def best_repeat(tok: np.ndarray, max_period: int) -> tuple[int, int, int]:
    """(period, start, count) of the exact tandem repeat covering the most tokens (the shortest
    period on a tie), or (0, 0, 0) when none covers `MIN_COVER` tokens."""
    n = tok.size
    best = (0, 0, 0, 0)  # coverage, period, start, count
    for p in _candidates(tok, min(max_period, n // 2)).tolist():
        eq = tok[:-p] == tok[p:]
        starts, lens = _runs(eq)
        if lens.size == 0:
            continue
        count = (lens + p) // p
        cover = count * p
        k = int(np.argmax(cover))
        if count[k] >= 2 and cover[k] > best[0]:
            best = (int(cover[k]), p, int(starts[k]), int(count[k]))
    if best[0] < MIN_COVER:
        return 0, 0, 0
    return best[1], best[2], best[3]


@dataclass
class _Node:
    kind: int
    count: int = 1
    children: list[_Node] | None = None
    tokens: np.ndarray | None = None  # LIT: the tokens of its slots


def _parse_seq(tok: np.ndarray, max_period: int) -> list[_Node]:
    """The children of a sequence: literal runs and repeats, in order (left/right iteratively,
    bodies recursively: nesting depth is at most log2 of the length)."""
    parts: list[tuple[int, _Node]] = []
    stack = [(0, tok.size)]
    while stack:
        a, b = stack.pop()
        if b <= a:
            continue
        p, s, c = best_repeat(tok[a:b], max_period)
        if p == 0:
            parts.append((a, _Node(LIT, tokens=tok[a:b])))
            continue
        s += a
        body = _parse_seq(tok[s : s + p], max(1, p // 2))
        parts.append((s, _Node(REP, count=c, children=body)))
        stack.append((a, s))
        stack.append((s + c * p, b))
    parts.sort(key=lambda x: x[0])
    return [node for _, node in parts]


@dataclass
class Tree:
    """A forest of grammar trees (one root per lane) in flat arrays.

    Per node: ``kind`` (SEQ, REP, LIT), ``count`` (REP: repeats; else 1), ``parent`` (-1 for a
    root), children in order as CSR (``child_ptr``, ``child``), and for a LIT its slots
    ``slot0`` .. ``slot0 + nslots``. Slots are numbered in tree order, lane by lane."""

    kind: np.ndarray
    count: np.ndarray
    parent: np.ndarray
    child_ptr: np.ndarray
    child: np.ndarray
    slot0: np.ndarray
    nslots: np.ndarray
    roots: np.ndarray

    @property
    def num_slots(self) -> int:
        return int(self.nslots.sum())

    def children(self, node: int) -> np.ndarray:
        return self.child[self.child_ptr[node] : self.child_ptr[node + 1]]

    def slot_leaf(self) -> np.ndarray:
        """The LIT node of every slot."""
        out = np.zeros(self.num_slots, np.int64)
        for v in np.flatnonzero(self.kind == LIT).tolist():
            out[self.slot0[v] : self.slot0[v] + self.nslots[v]] = v
        return out

    def levels(self) -> list[list[int]]:
        """Per node, its REP ancestors, outermost first (a REP node is not its own ancestor)."""
        out: list[list[int]] = []
        for v in range(self.kind.size):
            chain = []
            p = int(self.parent[v])
            while p >= 0:
                if self.kind[p] == REP:
                    chain.append(p)
                p = int(self.parent[p])
            out.append(chain[::-1])
        return out

    def body_length(self, counts: np.ndarray | None = None) -> np.ndarray:
        """Ops in one instance of each node (a REP: one instance of its body)."""
        counts = self.count if counts is None else counts
        n = self.kind.size
        length = np.zeros(n, np.int64)
        for v in _post_order(self):
            if self.kind[v] == LIT:
                length[v] = self.nslots[v]
            else:
                length[v] = sum(int(length[c] * (counts[c] if self.kind[c] == REP else 1)) for c in self.children(v))
        return length


def _post_order(tree: Tree) -> list[int]:
    out: list[int] = []
    for root in tree.roots.tolist():
        stack = [(root, False)]
        while stack:
            v, done = stack.pop()
            if done:
                out.append(v)
                continue
            stack.append((v, True))
            for c in tree.children(v)[::-1].tolist():
                stack.append((c, False))
    return out


def parse(lanes: list[np.ndarray], max_period: int = 8192) -> tuple[Tree, np.ndarray]:
    """The grammar of each lane's token sequence, as one forest; also the tokens of its slots.
    Expanding the tree with its own counts gives back the lanes exactly."""
    kind: list[int] = []
    count: list[int] = []
    parent: list[int] = []
    kids: list[list[int]] = []
    slot0: list[int] = []
    nslots: list[int] = []
    slot_tokens: list[np.ndarray] = []
    roots: list[int] = []
    next_slot = 0

    def add(node: _Node, par: int) -> int:
        nonlocal next_slot
        v = len(kind)
        kind.append(node.kind)
        count.append(node.count)
        parent.append(par)
        kids.append([])
        slot0.append(next_slot if node.kind == LIT else 0)
        nslots.append(0)
        if node.kind == LIT:
            assert node.tokens is not None
            nslots[v] = int(node.tokens.size)
            next_slot += int(node.tokens.size)
            slot_tokens.append(node.tokens)
        for c in node.children or []:
            kids[v].append(add(c, v))
        return v

    for tok in lanes:
        tok = np.asarray(tok, np.int64)
        roots.append(add(_Node(SEQ, children=_merge_literals(_parse_seq(tok, max_period))), -1))
    ptr = np.zeros(len(kind) + 1, np.int64)
    np.cumsum([len(k) for k in kids], out=ptr[1:])
    tree = Tree(
        kind=np.asarray(kind, np.int8),
        count=np.asarray(count, np.int64),
        parent=np.asarray(parent, np.int64),
        child_ptr=ptr,
        child=np.asarray([c for k in kids for c in k], np.int64),
        slot0=np.asarray(slot0, np.int64),
        nslots=np.asarray(nslots, np.int64),
        roots=np.asarray(roots, np.int64),
    )
    tokens = np.concatenate(slot_tokens) if slot_tokens else np.zeros(0, np.int64)
    return tree, tokens


def _merge_literals(nodes: list[_Node]) -> list[_Node]:
    out: list[_Node] = []
    for node in nodes:
        if node.kind == REP and node.children:
            node.children = _merge_literals(node.children)
        if out and node.kind == LIT and out[-1].kind == LIT:
            assert node.tokens is not None and out[-1].tokens is not None
            out[-1] = _Node(LIT, tokens=np.concatenate([out[-1].tokens, node.tokens]))
        else:
            out.append(node)
    return out


def expand(
    tree: Tree, counts: np.ndarray | None = None, period: np.ndarray | None = None
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per lane, (slot, instance, template position) of every op in order, with the repeat counts
    `counts` (default: the tree's own). An instance is the op's index in each enclosing repeat as
    one mixed-radix number, outermost repeat first. The template position is where the op falls
    in the lane expanded with the tree's own counts, a repeat with other counts stretched
    linearly over the span its template instances take (the ops themselves with its own counts):
    what lines lanes up with each other when layers are added. `period`: per repeat, instances
    that keep their place within a group of that many (`relations.map_index`)."""
    counts = tree.count if counts is None else np.asarray(counts, np.int64)
    period = np.ones(tree.kind.size, np.int64) if period is None else period

    def node(v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        # one instance of v: slots, instance within v, its radix, template position within v,
        # and v's template length
        if tree.kind[v] == LIT:
            k = int(tree.nslots[v])
            pos = np.arange(k, dtype=np.float64)
            return np.arange(tree.slot0[v], tree.slot0[v] + k), np.zeros(k, np.int64), np.ones(k, np.int64), pos, k
        parts = [node(int(c)) for c in tree.children(v)]
        if parts:
            s = np.concatenate([p[0] for p in parts])
            i = np.concatenate([p[1] for p in parts])
            r = np.concatenate([p[2] for p in parts])
            shift = np.cumsum([0.0] + [p[4] for p in parts[:-1]])
            pos = np.concatenate([p[3] + d for p, d in zip(parts, shift)])
            length = float(sum(p[4] for p in parts))
        else:
            s = i = np.zeros(0, np.int64)
            r = np.ones(0, np.int64)
            pos = np.zeros(0)
            length = 0.0
        if tree.kind[v] != REP:
            return s, i, r, pos, length
        c, ct, a = int(counts[v]), int(tree.count[v]), int(period[v])
        rep = np.repeat(np.arange(c, dtype=np.int64), s.size)
        rt = np.tile(r, c)
        if a > 1 and c % a == 0 and ct % a == 0:  # group g of `a` instances -> template group g * ct / c
            at = (rep // a) * (ct / c) * a + rep % a
        else:
            at = rep * (ct / c)
        tpos = at * length + np.tile(pos, c) * (ct / c if a == 1 else 1.0)
        return np.tile(s, c), rep * rt + np.tile(i, c), rt * c, tpos, length * ct

    out = []
    for root in tree.roots.tolist():
        s, i, _, pos, _ = node(int(root))
        out.append((s, i, pos))
    return out


def instances(tree: Tree, counts: np.ndarray | None = None) -> np.ndarray:
    """Instances of every slot: the product of its enclosing repeats' counts."""
    counts = tree.count if counts is None else np.asarray(counts, np.int64)
    leaf = tree.slot_leaf()
    levels = tree.levels()
    per_leaf = np.ones(tree.kind.size, np.int64)
    for v in np.flatnonzero(tree.kind == LIT).tolist():
        per_leaf[v] = int(np.prod([counts[a] for a in levels[v]], dtype=np.int64)) if levels[v] else 1
    return per_leaf[leaf]
