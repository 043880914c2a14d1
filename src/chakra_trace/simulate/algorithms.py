"""Collective algorithms as steps: what each member sends in each step of a phase.

A phase is one operation of one chunk on one dimension of the network (or on a communicator
group's 1-D ring); `steps` writes its algorithm as a list of steps over all members at once,
which `collectives` prices on a congestion-unaware network and `program` turns into each
member's sends and receives for the event loop. Pure: no network, no times.

Algorithms (per phase; p members, D bytes held per member, m = D / p):

- ring: reduce-scatter p-1 steps of m with a reduction each; all-gather p-1 steps of D;
  all-reduce both (2(p-1) steps of m); all-to-all p(p-1)/2 steps of m.
- direct: every member sends to all others at once (in a rotated order, so a switch's down
  links see one message at a time); one step per sub-operation.
- halvingDoubling: log2 p steps with partner distance 1, 2, 4, ... (messages D/2, D/4, ...)
  for reduce-scatter, the reverse for all-gather (p must be a power of two, else ring).
- doubleBinaryTree: two trees each carrying half the data: log2 p reduce steps up and
  log2 p broadcast steps down (all-reduce only; other operations use ring).
- one* variants (oneRing, oneDirect, ...): the algorithm over all NPUs as one dimension,
  every message costed on the physical network.

ASTRA-sim's rules (`rules.ASTRA_SIM`, `--compat astra`) follow its source where it differs:
a one* algorithm listed for dimension k makes k one ring of every NPU and drops the
dimensions after it; directN keeps N messages in flight and, like direct with members out of
step or on the congestion-aware network, follows ASTRA-sim's packet flow
(`Collectives._direct_window`, `window.WindowRun`); a halving-doubling all-gather on p not a
power of two runs int(log2 p) steps from p // 2 apart; doubleBinaryTree is ASTRA-sim's tree
per chunk (`tree_of`); a localBWAware all-reduce's all-gather phases run anticlockwise;
messages are whole bytes.

The reference cases check ring and direct (one and two dimensions, unaware and aware) to the
nanosecond; the random differential sweep (tools/astra/) checks the rest against the binary.

Beyond ASTRA-sim (default mode): broadcast and reduce cost an all-reduce's steps (broadcast
without reductions: scatter then all-gather; reduce: reduce-scatter then gather), gather and
scatter an all-gather's, barrier ceil(log2 p) empty messages (dissemination), and
reduce-scatter-block a reduce-scatter's. All-to-allv (an all-to-all whose nodes carry
``in_split_size``) sends each peer its own size, over the members as one dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..schema.enums import CollectiveType
from .rules import Rules

#: ASTRA-sim's memory-bus delay on a communicator's "Local" ring (`MemBus`, `Transmition::Fast`):
#: fixed, whatever the system's endpoint-delay
LOCAL_DELAY = 10

RS, AG, AR, A2A, BCAST, BARRIER = "reduce_scatter", "all_gather", "all_reduce", "all_to_all", "broadcast", "barrier"

#: The operation each collective type runs as.
OPS: dict[int, str] = {
    CollectiveType.ALL_REDUCE: AR,
    CollectiveType.REDUCE_SCATTER: RS,
    CollectiveType.ALL_GATHER: AG,
    CollectiveType.ALL_TO_ALL: A2A,
    CollectiveType.REDUCE_SCATTER_BLOCK: RS,
    CollectiveType.BROADCAST: BCAST,
    CollectiveType.REDUCE: AR,
    CollectiveType.GATHER: AG,
    CollectiveType.SCATTER: AG,
    CollectiveType.BARRIER: BARRIER,
}


SHIFT, PAIR, DIRECT = "shift", "pair", "direct"
DIRECT_AR = "direct_all_reduce"  # packet_flow: both halves of a direct all-reduce, paced as ASTRA-sim
WINDOW = "direct_window"  # packet_flow: ASTRA-sim's AllToAll message by message (a window, or links shared)
#: packet_flow, uncontended: a direct phase of at most this many messages follows ASTRA-sim's
#: packet flow when its members start out of step (`_direct_window`); a larger one without a
#: window takes the closed forms (`_direct`, `_direct_all_reduce`: one start per member)
EVENT_LIMIT = 1 << 16


@dataclass(frozen=True)
class Step:
    """One step of an algorithm, run `repeat` times: every member sends `nbytes` to the member
    `dist` places on (shift), to its partner index XOR dist (pair), or to all others (direct;
    nbytes may be a per-pair matrix); `reduce`: each received part is reduced (as
    `reduce_bytes` bytes when given: packet_flow halving-doubling reduces at the next step's size)."""

    kind: str
    dist: int
    nbytes: float | np.ndarray
    reduce: bool
    repeat: int = 1
    reduce_bytes: float | None = None


def uniform(T: np.ndarray) -> bool:
    return bool(T.size) and int(T.min()) == int(T.max())


@dataclass
class Phase:
    op: str
    dim: int  # network dimension, or -1 for a communicator ring
    members: np.ndarray  # (groups, p) NPU ids: the rings/rows this phase runs on
    nbytes: float  # bytes each member holds for this chunk at the start of the phase
    algorithm: str
    matrix: np.ndarray | None = None  # all-to-allv: bytes from member i to member j, per chunk
    local: bool = False  # astra_plans: a communicator's ring (ASTRA-sim's "Local" dimension)
    trees: tuple[int, ...] = ()  # tree_turns doubleBinaryTree: the tree of each chunk (0 RootMax, 1 RootMin)
    tree: int = 0  # the tree of the chunk being run
    window: int | None = None  # packet_flow direct: messages in flight (`directN`), None: one per peer


@dataclass
class Plan:
    """How one collective instance runs: its phases per chunk."""

    ctype: int
    nbytes: int
    chunks: int
    phases: list[Phase] = field(default_factory=list)

    @property
    def algorithms(self) -> str:
        return "+".join(
            dict.fromkeys(f"{p.op}:{p.algorithm}" + (f"@d{p.dim}" if p.dim >= 0 else "") for p in self.phases)
        )


def steps(ph: Phase, rules: Rules, *, contended: bool, in_step: bool = True) -> list[Step]:
    """The algorithm of a phase as a list of steps, identical consecutive steps merged
    (`contended`: the phase runs on the event loop, `inflight`; `in_step`: every member starts
    the phase at one time)."""
    p = ph.members.shape[1]
    D = float(ph.nbytes)
    algo, op = ph.algorithm, ph.op
    uneven_hd = rules.packet_flow and op == AG and gather_offsets(p) is not None  # packet_flow: see below
    if algo == "halvingDoubling" and p & (p - 1) and not uneven_hd:
        algo = "ring"
    if algo == "doubleBinaryTree" and op != AR:
        algo = "ring"
    if op == BARRIER:
        return [Step(SHIFT, 2**k, 0.0, False) for k in range(math.ceil(math.log2(p)))]
    if ph.matrix is not None:  # all-to-allv
        if algo == "direct":
            return [Step(DIRECT, 0, ph.matrix, False)]
        off = ph.matrix[~np.eye(p, dtype=bool)]
        return [Step(SHIFT, 1, float(off.mean()), False, p * (p - 1) // 2)]
    steps: list[Step] = []
    share = float(int(D) // p) if rules.whole_bytes else D / p  # ASTRA-sim: whole-byte messages
    window = p - 1 if ph.window is None else min(ph.window, p - 1)
    g, w = ph.members.shape[0], 2 * (p - 1) if op == AR else p - 1
    # packet_flow: ASTRA-sim's packet flow message by message (contended: always, on the
    # event loop, `window.WindowRun`), unless the closed forms below give the same (no
    # window, members in step) or the phase is too large to go message by message (EVENT_LIMIT)
    small = g * p * w <= EVENT_LIMIT
    flow = window < p - 1 or (ph.local and op == AR and p == 2) or contended or (small and not in_step)
    if algo == "direct" and rules.packet_flow and flow:
        full = float(int(D)) if rules.whole_bytes else D
        steps.append(Step(WINDOW, window, share if op != AG else full, False))
    elif algo == "direct" and op == AR and rules.packet_flow:
        steps.append(Step(DIRECT_AR, 0, share, True))
    elif algo == "direct":
        if op in (RS, AR, A2A, BCAST):
            steps.append(Step(DIRECT, 0, share, op in (RS, AR)))
        if op in (AG, AR, BCAST):
            # ASTRA-sim (`AllToAll::get_non_zero_latency_packets`): on a communicator's
            # Local ring an all-reduce reduces what its all-gather half receives too
            steps.append(Step(DIRECT, 0, D if op == AG else share, op == AR and ph.local))
    elif algo == "halvingDoubling" and p & (p - 1):
        # packet_flow, an all-gather on p not a power of two: ASTRA-sim's HalvingDoubling runs
        # int(log2 p) steps with partners p // 2, then half as far (truncated) each step,
        # messages doubling from the whole size
        offsets: tuple[int, ...] = gather_offsets(p) or ()
        steps += [Step(PAIR, r, float(int(D) << j), False) for j, r in enumerate(offsets)]
    elif algo == "halvingDoubling" and rules.packet_flow and op in (RS, AR):
        # ASTRA-sim (`HalvingDoubling`): whole-byte messages halved per step; what a step
        # receives is reduced at the size of the next step's message (`insert_packet`
        # bundles it after `process_max_count` picked that size), the last step's not at
        # all; an all-reduce's all-gather half starts at size >> (log2 p + 1) << 1
        n, whole = int(math.log2(p)), int(D)
        for k in range(n):
            nxt = float(whole >> (k + 2)) if k + 1 < n else None
            steps.append(Step(PAIR, 2**k, float(whole >> (k + 1)), nxt is not None, reduce_bytes=nxt))
        if op == AR:
            steps += [Step(PAIR, 2**k, float((whole >> (n + 1)) << (n - k)), False) for k in reversed(range(n))]
    elif algo == "halvingDoubling":
        if op in (RS, AR, BCAST):
            steps += [Step(PAIR, 2**k, D / 2 ** (k + 1), op != BCAST) for k in range(int(math.log2(p)))]
        if op in (AG, AR, BCAST):
            size = D / p if op != AG else D
            for k in reversed(range(int(math.log2(p)))):
                steps.append(Step(PAIR, 2**k, size, False))
                size *= 2
        if op == A2A:
            steps += [Step(PAIR, 2**k, D / 2, False) for k in range(int(math.log2(p)))]
    elif algo == "doubleBinaryTree":
        levels = max(1, math.ceil(math.log2(p)))
        steps += [Step(SHIFT, 2**k, D / 2, True) for k in range(levels)]  # up the trees, reducing
        steps += [Step(SHIFT, 2**k, D / 2, False) for k in reversed(range(levels))]  # and down again
    else:  # ring
        m = share
        if op in (RS, AR, BCAST):
            steps.append(Step(SHIFT, 1, m, op != BCAST, p - 1))
        if op in (AG, AR, BCAST):
            steps.append(Step(SHIFT, 1, D if op == AG else m, False, p - 1))
        if op == A2A:
            steps.append(Step(SHIFT, 1, m, False, p * (p - 1) // 2))
    return steps


def partners(p: int, dist: int) -> np.ndarray:
    """Halving-doubling partner of each member index at distance `dist` (ASTRA-sim's
    `HalvingDoubling::specify_direction`: forward when (index // dist) is even, else back,
    round the ring); index XOR dist when p is a power of two."""
    idx = np.arange(p)
    return np.where((idx // dist) % 2 == 0, idx + dist, idx - dist) % p


@lru_cache(maxsize=64)
def gather_offsets(p: int) -> tuple[int, ...] | None:
    """Partner distances of ASTRA-sim's halving-doubling all-gather on p members that need
    not be a power of two: int(log2 p) steps from p // 2, halved (truncated) each step; None
    when a step's partners are not mutual (ASTRA-sim then waits forever)."""
    if p < 2:
        return None
    offsets, r = [], p // 2
    for _ in range(int(math.log2(p))):
        pair = partners(p, max(r, 1))
        if r < 1 or not np.array_equal(pair[pair], np.arange(p)):
            return None
        offsets.append(r)
        r = int(r * 0.5)
    return tuple(offsets)


def binary_tree_phase(ph: Phase) -> bool:
    """A whole-machine doubleBinaryTree phase ASTRA-sim can build: a power-of-two row."""
    p = int(ph.members.shape[1])
    return ph.algorithm == "doubleBinaryTree" and ph.dim >= 0 and p >= 2 and not p & (p - 1)


@lru_cache(maxsize=64)
def tree_of(p: int, tree: int) -> tuple[np.ndarray, np.ndarray]:
    """ASTRA-sim's BinaryTree over member indices 0..p-1 (p a power of two): a complete tree
    of log2 p levels numbered in order, under a root with that one child: the last index
    (tree 0, RootMax) or index 0 (tree 1, RootMin). Parent of each (-1: the root) and its
    height (leaves 0, the root log2 p)."""
    levels = p.bit_length() - 1
    off, root = (0, p - 1) if tree == 0 else (1, 0)
    parent = np.full(p, -1, np.int64)
    height = np.full(p, levels, np.int64)
    for i in range(p - 1):
        j = i + 1  # in-order number from 1: its height is its trailing zeros
        h = (j & -j).bit_length() - 1
        height[i + off] = h
        if h == levels - 1:
            parent[i + off] = root
        else:
            parent[i + off] = (j + (1 << h) if not (j >> (h + 1)) & 1 else j - (1 << h)) - 1 + off
    return parent, height
