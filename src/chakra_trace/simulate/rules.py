"""The rules the simulator follows where ASTRA-sim and we read a workload differently.

`COMPAT_DIFFERENCES` lists each difference; a `Rules` object names, field by field, the
behaviour each layer follows. The simulator makes one (`DEFAULT`, or `ASTRA_SIM` for
``compat=True``) and hands it to the network model, the collectives, the node costs and the
scheduler, so that no layer asks "is this ASTRA-sim?" for itself.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What our rules (`DEFAULT`) do differently from ASTRA-sim's (`ASTRA_SIM`): (ASTRA-sim, ours) per difference.
COMPAT_DIFFERENCES = {
    "bandwidth unit": ('"GB/s" read as GiB/s', "GB/s = 1e9 bytes/s"),
    "message across several dimensions": (
        "only the lowest differing dimension is charged",
        "latency of every dimension crossed, serialization on the slowest link",
    ),
    "chunk and shard sizes": ("truncated to whole bytes", "fractional bytes kept"),
    "a size that preferred-dataset-splits does not divide": (
        "ceil(size / chunk) chunks of a whole chunk each: one more, full-size chunk",
        "exactly preferred-dataset-splits chunks of size / splits",
    ),
    "multi-dimensional all-gather and reduce-scatter": (
        "all-gather runs the dimensions last to first; each phase takes the previous one's final size "
        "(all-gather grows, reduce-scatter shrinks, whatever the optimization)",
        "dimensions first to last; reduce-scatter shrinks per phase with localBWAware only",
    ),
    "dimensions a collective covers": (
        "as many as algorithms are listed, at most four; a one* algorithm (oneRing, oneDirect, "
        "oneHalvingDoubling) makes its dimension one ring of every NPU and drops the dimensions after it",
        "all (the last listed algorithm repeats); a one* algorithm runs over every NPU when listed first, "
        "else as its plain algorithm on its dimension",
    ),
    "chunks waiting for a dimension": (
        "served in the order they reached its queue (one collective's chunks share a priority); each NPU "
        "starts its part of a phase in the slot it has free first",
        "the chunk whose phase can start first; ties by scheduling policy; all members in one slot",
    ),
    "algorithms of an all-reduce's phases": (
        "the all-reduce's list for every phase (its reduce-scatter and all-gather phases too); with localBWAware its all-gather phases run anticlockwise (a ring or direct phase sends to the members before it)",
        "the reduce-scatter's and all-gather's lists for those phases; every phase clockwise",
    ),
    "communicator groups": (
        "the system's algorithm when it lists exactly one, else ring; ASTRA-sim's Local ring: a fixed 10 ns endpoint delay, a direct all-reduce reduces both halves; a group of every NPU runs as the whole machine; the least chunk is one byte per NPU of the machine",
        "a ring over the members in listed order, with the system's endpoint delay; the least chunk is one byte per member",
    ),
    "direct all-reduce, halving-doubling, doubleBinaryTree": (
        "ASTRA-sim's packet flow: directN keeps N messages in flight (the next sent as a received packet is handed on); direct sends its all-gather half paced by the parts handed on; halving-doubling reduces at the next step's size and not after its last step, and gathers on p not a power of two in int(log2 p) steps from p // 2 apart (halved, truncated); doubleBinaryTree runs one tree per chunk (RootMax, RootMin in turn) with whole-size messages and a finish time per NPU, and any operation as an all-reduce",
        "direct sends to every peer at once, whatever N, and its all-gather half once every part is reduced; halving-doubling reduces each step's part, and runs as ring on p not a power of two; doubleBinaryTree: two trees of half the data, log2 p steps up and down, other operations as ring",
    ),
    "zero-duration compute": ("1 ns", "0 ns"),
    "nodes of one resource": (
        "one slot per NPU and kind; the ready node with the lowest id runs next",
        "a slot per recorded thread or stream (concurrent threads and streams stay concurrent), "
        "run in one topological order: shorter work never reorders a lane, so a faster system is never slower",
    ),
    "exposed communication": (
        "finish minus the sum of compute durations",
        "communication time not overlapped by accelerator compute",
    ),
    "broadcast, reduce, gather, scatter, barrier, reduce-scatter-block": (
        "unsupported (broadcast replays its recorded duration)",
        "simulated (algorithms documented in simulate/algorithms.py)",
    ),
    "all-to-allv split sizes": ("ignored", "each peer gets its own size"),
    "compute peak of a node's element type": (
        "one peak-perf for every compute node",
        "with a device (--device), each node at its dtype's datasheet peak (TF32 per --fp32-as); a system file's peak-perf: one peak",
    ),
    "missing dependencies, control cycles": (
        "abort or hang",
        "missing ones dropped, cyclic control edges removed (as chakra validate --fix), with a warning",
    ),
}


@dataclass(frozen=True)
class Rules:
    """How a simulation reads what ASTRA-sim reads differently (keys of `COMPAT_DIFFERENCES` in
    brackets). Defaults are ours (`DEFAULT`); `ASTRA_SIM` reproduces ASTRA-sim's analytical
    backends to the nanosecond, flaws included. Only these two sets are checked against
    references: a mix is a what-if."""

    #: the mode's name in `SimResult.mode`
    name: str = "default"
    #: "GB/s" read as GiB/s, bytes per ns = bw * 2^30 / 1e9 (ASTRA-sim's bw_GBps_to_Bpns) [bandwidth unit]
    gib_bandwidth: bool = False
    #: a congestion-unaware message pays only the lowest dimension it crosses, truncated once per
    #: message [message across several dimensions]
    lowest_dimension_only: bool = False
    #: chunk, phase and message sizes truncated to whole bytes, and a size that the splits do not
    #: divide cut into ceil(size / chunk) whole chunks [chunk and shard sizes; a size that
    #: preferred-dataset-splits does not divide]
    whole_bytes: bool = False
    #: ASTRA-sim's collective plans: as many dimensions as algorithms are listed (at most four, a
    #: one* algorithm a ring of every NPU), the all-reduce's list for all its phases (anticlockwise
    #: all-gather phases with localBWAware), each phase taking the previous one's final size, and
    #: communicator groups as ASTRA-sim builds them (the system's algorithm, the Local ring, a
    #: group of every NPU as the machine, the least chunk a byte per NPU of the machine)
    #: [dimensions a collective covers; algorithms of an all-reduce's phases; communicator groups;
    #: multi-dimensional all-gather and reduce-scatter]
    astra_plans: bool = False
    #: an all-gather runs the dimensions last to first [multi-dimensional all-gather and reduce-scatter]
    gather_last_to_first: bool = False
    #: a dimension's queue serves chunks in the order they reached it, each NPU in the slot it has
    #: free first, rather than by scheduling policy [chunks waiting for a dimension]
    arrival_order: bool = False
    #: direct and halving-doubling phases follow ASTRA-sim's packet flow: windows (directN), the
    #: direct all-reduce paced by parts handed on, halving-doubling's reductions and uneven
    #: all-gather [direct all-reduce, halving-doubling, doubleBinaryTree]
    packet_flow: bool = False
    #: doubleBinaryTree is ASTRA-sim's tree per chunk, RootMax and RootMin handed out in turn
    #: across collectives [direct all-reduce, halving-doubling, doubleBinaryTree]
    tree_turns: bool = False
    #: the least time of a node (ASTRA-sim: 1 ns) [zero-duration compute]
    least_node_ns: int = 0
    #: the roofline also costs CPU compute ops (ASTRA-sim replays their recorded time)
    roofline_cpu_ops: bool = True
    #: a slot per recorded thread or stream, run in topological order; else one per kind, the
    #: lowest ready id first [nodes of one resource]
    lanes: bool = True
    #: traces repaired before simulation (missing dependencies dropped, control cycles cut)
    #: [missing dependencies, control cycles]
    repair: bool = True
    #: compute is accelerator nodes only and exposed communication is finish minus the sum of
    #: compute durations, as ASTRA-sim prints [exposed communication]
    astra_breakdown: bool = False
    #: with a device's per-type peaks (`SystemConfig.device_compute`), each compute node costed at
    #: its element type's peak rather than ``peak_perf`` for all [compute peak of a node's element type]
    dtype_peaks: bool = True
    #: only what ASTRA-sim runs: communication costed on the network, its four collective types
    #: (others replay their recorded time), a warning for memory nodes it stops on [broadcast,
    #: reduce, gather, scatter, barrier, reduce-scatter-block]
    astra_limits: bool = False


#: Our rules.
DEFAULT = Rules()

#: ASTRA-sim's rules (``compat=True``, ``--compat astra``).
ASTRA_SIM = Rules(
    name="astra",
    gib_bandwidth=True,
    lowest_dimension_only=True,
    whole_bytes=True,
    astra_plans=True,
    gather_last_to_first=True,
    arrival_order=True,
    packet_flow=True,
    tree_turns=True,
    least_node_ns=1,
    roofline_cpu_ops=False,
    lanes=False,
    repair=False,
    astra_breakdown=True,
    astra_limits=True,
    dtype_peaks=False,
)
