"""A phase's algorithm as each member's sends and receives (congestion-aware, event-driven).

The unaware model runs an algorithm as whole steps over all members (`Collectives._phase`).
On a congestion-aware network a member must move on as soon as what it waits for has arrived,
whatever the other members do (as each NPU's system layer in ASTRA-sim does), so the same
algorithms are written here as a list of operations that every member runs in order: send
its messages of the operation (at its time plus `pre`), then wait for the messages sent to it
(its time becomes the latest of its time and their arrivals, plus `post`). A member with
nothing to send or receive in an operation goes straight on. `inflight.PhaseRun` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .algorithms import DIRECT, LOCAL_DELAY, PAIR, SHIFT, Phase, Step, partners, tree_of


@dataclass
class Op:
    """One operation for every member (index over the phase's groups x members, flattened).
    Messages are sender-major: sender u's are first[u] .. first[u] + count[u] - 1."""

    src: np.ndarray  # sender of each message
    dst: np.ndarray  # receiver of each message
    nbytes: np.ndarray  # size of each message
    first: np.ndarray  # per member: index of its first message
    count: np.ndarray  # per member: how many it sends
    need: np.ndarray  # per member: how many it receives
    pre: np.ndarray  # per member: added to its time before it sends
    post: np.ndarray  # per member: added after its last arrival
    repeat: int = 1  # identical copies (closed form where they run in lock step)
    closed: bool = False  # copies may be added in closed form (a shift step)
    single: bool = False  # every member receives at most one message
    whole: bool = False  # every member sends one message and receives one
    memo: dict = field(default_factory=dict)  # its routes and closed form, once worked out


def _op(n: int, src, dst, nbytes, pre, post, **kw) -> Op:
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    count = np.bincount(src, minlength=n).astype(np.int64)
    first = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
    need = np.bincount(dst, minlength=n).astype(np.int64)
    nb = np.broadcast_to(np.asarray(nbytes, float), src.shape).copy()
    pre_a = np.broadcast_to(np.asarray(pre, np.int64), (n,)).copy()
    post_a = np.broadcast_to(np.asarray(post, np.int64), (n,)).copy()
    single = bool(need.max(initial=0) <= 1)
    whole = single and bool(need.min(initial=0) == 1) and bool((count == 1).all())
    return Op(src, dst, nb, first, count, need, pre_a, post_a, single=single, whole=whole, **kw)


def program(coll, ph: Phase) -> tuple[list[Op], int]:
    """The operations of a phase and what a member adds to its start time before the first."""
    g, p = ph.members.shape
    n = g * p
    if p < 2:
        return [], 0
    base = np.arange(g, dtype=np.int64)[:, None] * p
    if ph.trees:
        return _tree(coll, ph, base), 0
    delta = LOCAL_DELAY if ph.local else coll.delta
    ops = [_step(coll, ph, st, base, n, delta) for st in coll.steps(ph)]
    return [o for pair in ops for o in pair], delta


def _step(coll, ph: Phase, st: Step, base: np.ndarray, n: int, delta: int) -> list[Op]:
    p = ph.members.shape[1]
    idx = np.arange(p, dtype=np.int64)
    if st.kind in (SHIFT, PAIR):
        src = (base + idx[None, :]).ravel()
        to = (idx + st.dist) % p if st.kind == SHIFT else partners(p, st.dist)
        dst = (base + to[None, :]).ravel()
        m = float(st.nbytes)
        red_m = m if st.reduce_bytes is None else st.reduce_bytes
        post = delta + (coll._reduce(red_m) if st.reduce else 0)
        return [_op(n, src, dst, m, 0, post, repeat=st.repeat, closed=st.kind == SHIFT)]
    # direct: each member sends to every other, in a rotated order
    k = np.arange(1, p, dtype=np.int64)
    si = np.broadcast_to(idx[:, None], (p, p - 1))
    di = (si + k[None, :]) % p
    src = (base[:, :, None] + si[None]).ravel()
    dst = (base[:, :, None] + di[None]).ravel()
    mb = st.nbytes
    size: float | np.ndarray
    if isinstance(mb, np.ndarray):
        size = np.broadcast_to(mb[si, di][None], (base.shape[0], p, p - 1)).ravel()
        big = float(np.max(mb))
    else:
        size, big = float(mb), float(mb)
    assert st.kind == DIRECT  # (ASTRA-sim's packet flow runs on its own: `window.WindowRun`)
    post = delta + (coll._reduce(big) if st.reduce else 0)
    return [_op(n, src, dst, size, 0, post)]


def _tree(coll, ph: Phase, base: np.ndarray) -> list[Op]:
    """`Rules.tree_turns` doubleBinaryTree (`Collectives._binary_tree`): up the tree level by level, a
    node sending once its children's parts arrived; the root turns the part round; down again."""
    g, p = ph.members.shape
    n = g * p
    parent, height = tree_of(p, ph.tree)
    d, red = coll.delta, coll._reduce(float(ph.nbytes))
    D = float(ph.nbytes)
    top = int(height.max())
    root = int(np.flatnonzero(height == top)[0])
    ops = []
    for h in range(top):
        lvl = np.flatnonzero(height == h)
        pre = np.zeros((g, p), np.int64)
        pre[:, lvl] = d if h == 0 else d + red
        src = (base + lvl[None, :]).ravel()
        dst = (base + parent[lvl][None, :]).ravel()
        ops.append(_op(n, src, dst, D, pre.ravel(), 0))
    for h in range(top - 1, -1, -1):
        lvl = np.flatnonzero(height == h)
        pre = np.zeros((g, p), np.int64)
        if h == top - 1:
            pre[:, root] = d + red
        post = np.zeros((g, p), np.int64)
        post[:, lvl] = d + (red if h > 0 else 0)
        src = (base + parent[lvl][None, :]).ravel()
        dst = (base + lvl[None, :]).ravel()
        order = np.argsort(src, kind="stable")  # sender-major (a parent's children are adjacent)
        ops.append(_op(n, src[order], dst[order], D, pre.ravel(), post.ravel()))
    return ops
