"""Collective and point-to-point times as NCCL predicts them, on a cluster of NVSwitch nodes.

Why: a simulator that should predict published training throughput from a configuration alone
needs the collective times NCCL achieves, not those of an idealized network. NCCL carries its
own model of them: its tuner (``src/graph/tuning.cc``) gives every algorithm x protocol pair a
latency and a bus bandwidth from the topology search's channels (``src/graph/search.cc``) and
picks the fastest for each size. This module reads that model (facts, not code: no NCCL source
is copied) and prices a collective over a group of ranks placed on a `Cluster`: the ranks a
node holds share NVLink through its NVSwitch; nodes meet on a rail-optimized fat tree of NICs.

Modelled: ring and tree, protocols LL, LL128 and Simple, NCCL's per-protocol base latencies,
per-hop hardware latencies (NVLink / network), its bandwidth factors and caps, the tree
correction factors and the ring plateau, and the choice of the fastest pair. Not modelled:
NVLS / NVLS-tree (NVLink SHARP, on Hopper and later: NCCL's single-node all-reduce on an H100
node reaches ~476 GB/s where ring gives ~360), CollNet, PAT, contention between concurrent
collectives, and the topology search itself: its result is approximated by the rule
`level_bandwidth` states (the fastest channel speed of NCCL's speed table a path can carry,
as many channels as the GPU's NVLink or its node's NICs hold).

Constants (NVIDIA/nccl at 5067397c, June 2026; ``tuning.cc`` unless said):

=========================  ===========================================  ======================
constant                   value                                        where
=========================  ===========================================  ======================
base latency (µs)          tree LL/LL128/Simple 6.8/14.0/8.4;           tuning.cc:149-151
                           ring 6.6/14.0/8.4
hw latency NVLink (µs)     tree 0.6/1.25/4.0; ring 0.6/1.9/3.4          tuning.cc:158-159
hw latency NET (µs)        tree 5.0/8.5/14; ring 2.7/4.0/14.0           tuning.cc:170-171
LL max bw (GB/s)           one node: Ampere 87.7, Hopper 141,           tuning.cc:177-182
                           Blackwell 282; 2 / >2 nodes: Intel 39/20.4,
                           AMD 22.5/19.0
ring LL128 cap / channel   Ampere 20, Hopper 36.7, Blackwell 40         tuning.cc:184-189
tree LL128 cap / channel   Ampere 20/20/20, Hopper 36.7/36.7/29,        tuning.cc:191-196
                           Blackwell 55.6/31.67/20 (1 / 2 / >2 nodes)
tree Simple cap / channel  Ampere 24/23.6/17.8, Hopper 38.7/41.4/36,    tuning.cc:198-203
                           Blackwell 70/42.8/24
ring LL factor             x 0.5 (min LL max bw)                        tuning.cc:327
ring LL128 factor          x 0.92                                       tuning.cc:329
tree all-reduce factor     x 0.92                                       tuning.cc:331
tree LL / LL128 factor     x 1/3.8; x 7/9 (one node) or 120/128         tuning.cc:332-335
bus -> algorithm bw        ring n/nsteps; tree 0.5                      tuning.cc:379-380
net overhead (µs)          Intel 1.0, AMD 2.0; x 3 for Simple           tuning.cc:228-232, 408
ring latency               base + (nsteps - inter) x max(intra hw,      tuning.cc:411-412
                           overhead) + inter x net hw; inter steps
                           2(nodes-1) all-reduce, nodes-1 otherwise
tree latency               base + 2((ppn-1) intra hw + log2(nodes) net) tuning.cc:416
ppn 1: net hw of tree      used by every algorithm                      tuning.cc:387
ring plateau               latency x 1.4 (sm80+), multi-node Simple     tuning.cc:647-650
                           all-reduce, bytes/(channels x ranks) >= 64
tree correction            per protocol, by log2(bytes/64) < 23         tuning.cc:623-628
time                       latency + bytes / (1000 x algorithm bw) µs   tuning.cc:653
bytes of AG / RS           count x ranks (the whole buffer)             enqueue.h:39-41
NVLink bw per link (GB/s)  sm80 20.0, sm90 20.6, sm100 40.1             topo.h:21-24
NIC bw                     line rate Mb/s / 8000 GB/s                   topo.cc:418
channel speeds (GB/s)      intra / inter tables per architecture        search.cc:1051-1064
channel duplication        x2 when speed >= 25 (sm90+: not when         search.cc:1036-1049
                           speed < 50 and > 4 channels), speed halved
max ring channels          MAXCHANNELS / 2 = 32                         init.cc:1177, device.h:91
net latency of a path      0 (the IB plugin sets none)                  net_ib/init.cc:558
=========================  ===========================================  ======================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import ChakraError
from ..schema.enums import CollectiveType

__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "Choice",
    "Cluster",
    "bus_bandwidth",
    "collective_choice",
    "collective_ns",
    "collective_time",
    "level_bandwidth",
    "nccl_bytes",
    "p2p_ns",
]

ALGORITHMS = ("tree", "ring")
PROTOCOLS = ("LL", "LL128", "Simple")
ARCHS = ("ampere", "hopper", "blackwell")

# tuning.cc:149-151 (µs), [algorithm][protocol]
_BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
# tuning.cc:158-159, 170-171 (µs), [level][algorithm][protocol]
_HW_LAT = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
# tuning.cc:177-182: one node by architecture; several by CPU vendor, [2 nodes, > 2 nodes]
_LL_MAX_ONE_NODE = {"ampere": 87.7, "hopper": 141.0, "blackwell": 2 * 141.0}
_LL_MAX_NODES = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
# tuning.cc:184-203, per channel (GB/s), [1 node, 2 nodes, > 2 nodes]
_RING_LL128_CAP = {"ampere": (20.0,) * 3, "hopper": (36.7,) * 3, "blackwell": (40.0,) * 3}
_TREE_LL128_CAP = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
_TREE_CAP = {"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
# tuning.cc:228-232 (µs)
_NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}
# tuning.cc:623-628, [protocol][log2(bytes / 64)]
_TREE_CORRECTION = np.array(
    [
        [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0],
        [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9],
    ]
)  # fmt: skip
# topo.h:21-24 (GB/s per NVLink, per direction, as NCCL counts it)
_NVLINK_BW = {"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
# search.cc:1051-1064 (GB/s per channel), tried fastest first
_SPEEDS_INTRA = {
    "ampere": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
_SPEEDS_INTER = {
    "ampere": (
        48.0,
        30.0,
        28.0,
        24.0,
        20.0,
        18.0,
        15.0,
        12.0,
        10.0,
        9.0,
        7.0,
        6.0,
        5.0,
        4.0,
        3.0,
        2.4,
        1.2,
        0.24,
        0.12,
    ),
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "blackwell": (
        96.0,
        86.0,
        80.0,
        48.0,
        45.1,
        42.0,
        40.0,
        30.0,
        24.0,
        22.0,
        20.0,
        17.5,
        15.0,
        12.0,
        6.0,
        3.0,
        2.4,
        1.2,
        0.24,
        0.12,
    ),
}
_MAX_CHANNELS = 32  # init.cc:1177 (MAXCHANNELS / 2, device.h:91)


@dataclass(frozen=True)
class Cluster:
    """A cluster of identical nodes: ``gpus_per_node`` GPUs on one NVSwitch, each with
    ``nvlinks`` NVLinks; ``nics_per_node`` NICs of ``nic_gbps`` Gb/s each, one per GPU on a
    rail-optimized fabric; ``cpu`` ("intel" or "amd") sets NCCL's multi-node LL bandwidth and
    network overhead. ``nodes``: None sizes the cluster to the job (`sized`). ``device``: the
    `schema.devices` key of its GPU."""

    name: str
    arch: str
    gpus_per_node: int
    nvlinks: int
    nic_gbps: float
    nics_per_node: int
    cpu: str = "intel"
    nodes: int | None = None
    device: str | None = None
    fabric: str = ""

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ChakraError(f"cluster {self.name!r}: arch {self.arch!r} is not one of {', '.join(ARCHS)}")
        if self.cpu not in _NET_OVERHEAD:
            raise ChakraError(f"cluster {self.name!r}: cpu {self.cpu!r} is not one of intel, amd")
        if self.gpus_per_node < 1 or self.nvlinks < 1 or self.nics_per_node < 1 or self.nic_gbps <= 0:
            raise ChakraError(f"cluster {self.name!r}: GPUs, NVLinks, NICs and NIC speed must be positive")

    @property
    def nvlink_bw(self) -> float:
        """NVLink bandwidth of a GPU per direction as NCCL counts it (GB/s)."""
        return self.nvlinks * _NVLINK_BW[self.arch]

    @property
    def nic_bw(self) -> float:
        """One NIC's bandwidth as NCCL counts it (GB/s): line rate / 8 (topo.cc:418)."""
        return self.nic_gbps / 8.0

    def sized(self, npus: int) -> Cluster:
        """The cluster with as many nodes as ``npus`` ranks fill."""
        return Cluster(**{**self.__dict__, "nodes": -(-npus // self.gpus_per_node)})

    def node_of(self, ranks) -> np.ndarray:
        """The node of each rank (ranks fill nodes in order, `gpus_per_node` each)."""
        return np.asarray(ranks, np.int64) // self.gpus_per_node


@dataclass(frozen=True)
class Choice:
    """NCCL's pick for one collective: algorithm, protocol, latency (µs), algorithm bandwidth
    (GB/s) and time (µs)."""

    algorithm: str
    protocol: str
    latency_us: float
    bandwidth: float
    time_us: float


def _dup(speed: float, channels: int, arch: str) -> tuple[float, int]:
    """search.cc:1036-1049: channels doubled (each at half the speed) when fast enough."""
    if speed < 25.0 or (arch != "ampere" and speed < 50.0 and channels > 4):
        return speed, channels
    dup = min(2 * channels, _MAX_CHANNELS)
    return speed / math.ceil(dup / channels), dup


def level_bandwidth(cluster: Cluster, nodes: int, ppn: int) -> tuple[float, int]:
    """(bus bandwidth GB/s, channels) of NCCL's ring/tree graph for a group of ``nodes`` nodes
    with ``ppn`` ranks each. Our reading of the topology search (search.cc:1150-1290), which
    tries the speeds of the architecture's table fastest first and keeps the solution of most
    channels x speed: a speed is one path's (at most a GPU's NVLink to its NVSwitch; across
    nodes at most one NIC); channels, as many as fit in the GPU's NVLink and, across nodes, in
    the NICs of the group's GPUs (one per GPU on its rail, at least one; each NIC as many
    channels as its bandwidth holds), at most 32; ties to the faster speed, and no speed half
    or less of the best one's tried; then the channels
    are duplicated where NCCL does (`_dup`)."""
    nvlink = cluster.nvlink_bw
    if nodes <= 1:
        path, speeds, nics = nvlink, _SPEEDS_INTRA[cluster.arch], 0
    else:
        nics = max(1, min(cluster.nics_per_node, math.ceil(ppn * cluster.nics_per_node / cluster.gpus_per_node)))
        path, speeds = min(cluster.nic_bw, nvlink), _SPEEDS_INTER[cluster.arch]
    best = (0.0, 0.0, 0)
    for sp in speeds:
        if sp > path:
            continue
        if best[2] and sp / best[1] <= 0.49:  # search.cc:1245: no slower than half the speed found
            break
        ch = int(nvlink // sp)
        if nodes > 1:
            ch = min(ch, nics * int(cluster.nic_bw // sp))
        ch = min(ch, _MAX_CHANNELS)
        if ch * sp > best[0]:
            best = (ch * sp, sp, ch)
    if not best[2]:  # slower than the table's slowest speed: one channel at the path's bandwidth
        best = (path, path, 1)
    speed, channels = _dup(best[1], best[2], cluster.arch)
    return speed * channels, channels


def _steps(op: str, n: int) -> int:
    return 2 * (n - 1) if op == "all_reduce" else n - 1 if op in ("all_gather", "reduce_scatter") else n


@lru_cache(maxsize=4096)
def _table(cluster: Cluster, op: str, nranks: int, nnodes: int) -> dict[tuple[str, str], tuple[float, float, int]]:
    """tuning.cc:290-435 for one collective: {(algorithm, protocol): (latency µs, algorithm
    bandwidth GB/s, channels)} of the pairs NCCL may use (LL128 assumed enabled: NVSwitch and
    GPU-Direct NICs, tuning.cc:518-532)."""
    arch = cluster.arch
    ppn = nranks / nnodes
    idx = 0 if nnodes == 1 else 1 if nnodes == 2 else 2
    ll_max = _LL_MAX_ONE_NODE[arch] if nnodes == 1 else _LL_MAX_NODES[cluster.cpu][idx - 1]
    bus, ch = level_bandwidth(cluster, nnodes, max(1, round(ppn)))
    intra_hw = "nvlink"
    nsteps = _steps(op, nranks)
    out = {}
    for a in ALGORITHMS:
        if a == "tree" and op != "all_reduce":
            continue  # tree: all-reduce only (tuning.cc:294-297)
        for pi, p in enumerate(PROTOCOLS):
            bw = bus
            if a == "ring" and p == "LL":
                bw = min(ll_max, bw * 0.5)
            if a == "ring" and p == "LL128":
                bw = min(bw * 0.92, ch * _RING_LL128_CAP[arch][idx])
            if a == "tree":
                bw = min(bw * 0.92, ch * _TREE_CAP[arch][idx])
                if p == "LL":
                    bw = min(bw / 3.8, ll_max)
                if p == "LL128":
                    bw = min(bw * (7.0 / 9.0 if nnodes == 1 else 120.0 / 128.0), ch * _TREE_LL128_CAP[arch][idx])
            bw *= nranks / nsteps if a == "ring" else 0.5
            lat = _BASE_LAT[a][pi]
            intra = _HW_LAT[intra_hw][a][pi]
            inter = _HW_LAT["net"]["tree" if ppn == 1 else a][pi]
            if a == "ring":
                if op in ("broadcast", "reduce"):
                    lat += _HW_LAT["net" if nnodes > 1 else intra_hw][a][pi]  # same channels: one hop
                else:
                    over = _NET_OVERHEAD[cluster.cpu] * (3 if p == "Simple" else 1) if nnodes > 1 else 0.0
                    intra = max(intra, over)
                    k = 0 if nnodes == 1 else 2 * (nnodes - 1) if op == "all_reduce" else nnodes - 1
                    lat += (nsteps - k) * intra + k * inter
            else:
                lat += 2 * ((nranks // nnodes - 1) * intra + int(math.log2(nnodes)) * inter)
            out[(a, p)] = (lat, bw, ch)
    return out


def _raw(cluster: Cluster, op: str, sizes: np.ndarray, nranks: int, nnodes: int):
    """The tuner's estimate (tuning.cc:630-654) of each pair at each size, the fastest kept:
    (time µs, latency µs, algorithm bandwidth GB/s, pair index into the table)."""
    table = _table(cluster, op, nranks, nnodes)
    log = np.floor(np.log2(np.maximum(sizes, 1) / 64.0, where=sizes >= 64, out=np.full(sizes.shape, -1.0)))
    best = np.full(sizes.shape, np.inf)
    lat_best, bw_best, which = np.zeros(sizes.shape), np.zeros(sizes.shape), np.zeros(sizes.shape, np.int64)
    for i, ((a, p), (lat, bw, ch)) in enumerate(table.items()):
        b = np.full(sizes.shape, bw)
        if a == "tree":
            ok = (log >= 0) & (log < 23)
            b[ok] *= _TREE_CORRECTION[PROTOCOLS.index(p), log[ok].astype(int)]
        la = np.full(sizes.shape, lat)
        if a == "ring" and p == "Simple" and nnodes > 1 and op == "all_reduce":
            la[sizes / (ch * nranks) >= 64] *= 1.4  # the ring plateau (sm80+)
        t = la + sizes / (1000.0 * b)
        better = t < best
        best = np.where(better, t, best)
        lat_best, bw_best, which = (
            np.where(better, la, lat_best),
            np.where(better, b, bw_best),
            np.where(better, i, which),
        )
    return best, lat_best, bw_best, which, list(table)


def collective_time(cluster: Cluster, op: str, nbytes, nranks: int, nnodes: int) -> list[Choice]:
    """NCCL's choice (tuning.cc:630-654: the fastest pair of the tuner's estimate) for each size
    of ``nbytes`` (NCCL's bytes: `nccl_bytes`) of operation ``op`` (all_reduce, all_gather,
    reduce_scatter, broadcast, reduce) over ``nranks`` ranks on ``nnodes`` nodes. The estimate
    steps down where a tree correction factor rises or the ring plateau starts; a size never
    takes longer than a larger one would (NCCL could send it padded): each size takes the least
    estimate of any size at least as large, found among its own and the step points above it."""
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        raise ChakraError(f"NCCL model: no algorithm for {op!r}")
    sizes = np.atleast_1d(np.asarray(nbytes, np.float64))
    if nranks <= 1:
        return [Choice("none", "none", 0.0, math.inf, 0.0) for _ in sizes]
    ch = _table(cluster, op, nranks, nnodes)[("ring", "Simple")][2]
    steps = np.r_[64.0 * 2.0 ** np.arange(24), 64.0 * ch * nranks]  # where the estimate may step down
    cand = np.unique(np.r_[sizes, steps])
    t, lat, bw, which, pairs = _raw(cluster, op, cand, nranks, nnodes)
    # the least estimate at or above each candidate: a suffix minimum (its position kept)
    pos = np.arange(cand.size)
    for k in range(cand.size - 2, -1, -1):
        if t[pos[k + 1]] < t[k]:
            pos[k] = pos[k + 1]
    out = []
    for j in pos[np.searchsorted(cand, sizes)].tolist():
        a, p = pairs[int(which[j])]
        out.append(Choice(a, p, float(lat[j]), float(bw[j]), float(t[j])))
    return out


def bus_bandwidth(op: str, nbytes: float, nranks: int, time_us: float) -> float:
    """nccl-tests' bus bandwidth (GB/s) of a collective of ``nbytes`` (nccl-tests' size: the
    whole buffer for all-gather and reduce-scatter) taking ``time_us``: algorithm bandwidth
    times 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter, all-to-all), 1 otherwise."""
    alg = nbytes / (time_us * 1e3)
    n = nranks
    factor = (
        2 * (n - 1) / n
        if op == "all_reduce"
        else (n - 1) / n
        if op in ("all_gather", "reduce_scatter", "all_to_all")
        else 1.0
    )
    return alg * factor


#: How each Chakra collective runs in NCCL, and the NCCL byte count of Chakra's comm_size D
#: on p ranks (`algorithms`: all-gather's D is each rank's contribution, the others' their
#: input buffer): gather as all-gather, scatter as broadcast, barrier as an empty all-reduce.
_AS = {
    CollectiveType.ALL_REDUCE: ("all_reduce", 0),
    CollectiveType.REDUCE: ("reduce", 0),
    CollectiveType.ALL_GATHER: ("all_gather", 1),
    CollectiveType.GATHER: ("all_gather", 1),
    CollectiveType.SCATTER: ("broadcast", 0),
    CollectiveType.BROADCAST: ("broadcast", 0),
    CollectiveType.ALL_TO_ALL: ("all_to_all", 0),
    CollectiveType.REDUCE_SCATTER: ("reduce_scatter", 0),
    CollectiveType.REDUCE_SCATTER_BLOCK: ("reduce_scatter", 0),
    CollectiveType.BARRIER: ("all_reduce", -1),
}


def nccl_bytes(ctype: int, comm_size: float, nranks: int) -> tuple[str, float]:
    """(NCCL operation, NCCL bytes) of a Chakra collective of ``comm_size`` over ``nranks``."""
    try:
        op, how = _AS[CollectiveType(int(ctype))]
    except (ValueError, KeyError):
        raise ChakraError(f"NCCL model: comm_type {ctype} is not a collective type it knows") from None
    return op, 0.0 if how < 0 else float(comm_size) * (nranks if how else 1)


def _all_to_all_us(cluster: Cluster, nbytes: float, nranks: int, nodes: np.ndarray) -> float:
    """All-to-all as NCCL runs it, grouped sends and receives (no algorithm of its own): each
    rank sends nbytes / n to every peer at once; the part for its own node over NVLink, the rest
    through its rail's NIC (an all-to-all does not aggregate a node's NICs: nccl-tests#267),
    both at once; latency: one Simple ring step on the farthest level."""
    _, per_node = np.unique(nodes, return_counts=True)
    ppn = int(per_node.max())
    local = nbytes * (ppn - 1) / nranks
    remote = nbytes * (nranks - ppn) / nranks
    t = local / (1000.0 * cluster.nvlink_bw)
    if remote > 0:  # one NIC's channel speed, shared by the GPUs of its rail
        nic = level_bandwidth(cluster, 2, 1)[0] * min(1.0, cluster.nics_per_node / cluster.gpus_per_node)
        t = max(t, remote / (1000.0 * nic))
    return _p2p_latency_us(len(per_node) > 1) + t


def _p2p_latency_us(remote: bool) -> float:
    """A send's latency: NCCL's Simple ring base latency and one hop (tuning.cc:149-171)."""
    return _BASE_LAT["ring"][2] + _HW_LAT["net" if remote else "nvlink"]["ring"][2]


def collective_choice(cluster: Cluster, ctype: int, comm_size: float, members) -> tuple[int, str]:
    """(time ns, "algorithm/protocol") of one Chakra collective of ``comm_size``
    (`nccl_bytes`) over the global ranks ``members``, placed on ``cluster`` (`Cluster.node_of`)."""
    ranks = np.asarray(members, np.int64)
    n = int(ranks.size)
    if n <= 1:
        return 0, "none"
    op, nbytes = nccl_bytes(ctype, comm_size, n)
    nodes = cluster.node_of(ranks)
    if op == "all_to_all":
        return int(round(_all_to_all_us(cluster, nbytes, n, nodes) * 1e3)), "p2p/Simple"
    c = collective_time(cluster, op, nbytes, n, int(np.unique(nodes).size))[0]
    return int(round(c.time_us * 1e3)), f"{c.algorithm}/{c.protocol}"


def collective_ns(cluster: Cluster, ctype: int, comm_size: float, members) -> int:
    """Time (ns) of one Chakra collective (`collective_choice`)."""
    return collective_choice(cluster, ctype, comm_size, members)[0]


def p2p_ns(cluster: Cluster, src: int, dst: int, nbytes: float) -> int:
    """Time (ns) of a send of ``nbytes`` from global rank ``src`` to ``dst``: latency
    (`_p2p_latency_us`) + bytes at the level's bandwidth (NVLink: the GPU's; across nodes:
    one NIC at NCCL's channel speed, `level_bandwidth` of one rank per node)."""
    if src == dst:
        return 0
    remote = bool(cluster.node_of(src) != cluster.node_of(dst))
    bw = level_bandwidth(cluster, 2, 1)[0] if remote else cluster.nvlink_bw
    return int(round((_p2p_latency_us(remote) + float(nbytes) / (1000.0 * bw)) * 1e3))
