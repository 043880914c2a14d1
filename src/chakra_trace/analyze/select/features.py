"""A job as a fixed-length vector of numbers, so that a fleet of jobs can be compared, clustered
and sampled (`methods`, `coverage`).

The vector describes what a job asks of a system, not how the system it was recorded on served
it, because the question it serves is "how would the fleet run on another system":

- **time shares** (`SHARE_NAMES`, they sum to 1): of the job's time summed over ranks, the part
  in compute, in each kind of collective (all-reduce, all-gather, reduce-scatter, all-to-all,
  others), in sends and receives, in memory nodes, and on the host. Compute is `compute_mask`'s
  rows (the breakdown's compute) at their recorded duration, or, without one, at the roofline of
  `REFERENCE_DEVICE` from their FLOPs and bytes. Host is the other compute nodes at their
  recorded durations: a GPU trace's host ops, and the `[host]` gaps the PyTorch converter writes
  for time outside any op (Python, the data loader, waits). A simulator replays those gaps as
  time, so they count here, where the breakdown's idle column does not see them (it files a gap
  that overlaps communication under communication). Communication is modelled from its bytes, not
  its recorded duration (which measures the recording's network): latency + bytes x NCCL's bus
  factor for the group size / `REFERENCE_BUS_GBPS` (`collectives.bus_factor`), per send and per
  receive latency + bytes / bandwidth (``comm_time="recorded"`` uses the recorded durations
  instead);
- **message sizes** (`SIZE_BIN_NAMES`, they sum to 1, or are all 0 without communication): the
  share of collectives and sends whose size falls in each log2 bin (factor-4 bins from 1 KiB to
  1 GiB, one below and one above);
- **scale** (`SCALE_NAMES`): log10 of communication / compute time (in [-6, 6]; ±6 where one of
  them is 0), log2 of the ranks, log10 of the mean nodes per rank and log10(1 + the busiest
  rank's serial time in µs: its classes' times summed, an upper bound of its step as nothing
  overlaps).

Shares and bins are invariant to repeating the job's structure (twice the layers: the same
vector but the two lengths). `FleetFeatures.standardized` puts a fleet's vectors on one scale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...io.workload import Workload
from ...schema.devices import device_spec
from ...schema.enums import Attr, CollectiveType, NodeType
from ...schema.resources import compute_mask
from ...schema.trace import Trace
from ...table import Table, Tabular
from ..collectives import bus_factor

REFERENCE_BUS_GBPS = 100.0  # modelled bus bandwidth per rank, GB/s
REFERENCE_LATENCY_US = 5.0  # modelled latency per collective, send or receive, µs
REFERENCE_DEVICE = "h100"  # roofline for compute nodes without a recorded duration

SHARE_NAMES = (
    "compute",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "other_collective",
    "p2p",
    "memory",
    "host",
)
_COMPUTE, _MEMORY, _HOST = 0, 7, 8
_COMM = slice(1, 7)
_CLASS_OF_COLLECTIVE = np.full(16, 5, np.int64)  # CollectiveType -> share index (others: other_collective)
_CLASS_OF_COLLECTIVE[[CollectiveType.ALL_REDUCE]] = 1
_CLASS_OF_COLLECTIVE[[CollectiveType.ALL_GATHER, CollectiveType.GATHER]] = 2
_CLASS_OF_COLLECTIVE[[CollectiveType.REDUCE_SCATTER, CollectiveType.REDUCE_SCATTER_BLOCK]] = 3
_CLASS_OF_COLLECTIVE[[CollectiveType.ALL_TO_ALL]] = 4
_KNOWN_TYPES = {int(c) for c in CollectiveType}

#: log2 bin edges of message sizes: < 1 KiB, [1 KiB, 4 KiB), ..., [256 MiB, 1 GiB), >= 1 GiB
SIZE_EDGES = 2.0 ** np.arange(10, 32, 2)


def _size_label(lo: float) -> str:
    for unit, div in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if lo >= div:
            return f"{int(lo // div)}{unit}"
    return f"{int(lo)}"


SIZE_BIN_NAMES = (
    f"size_lt_{_size_label(SIZE_EDGES[0])}",
    *(f"size_{_size_label(a)}_{_size_label(b)}" for a, b in zip(SIZE_EDGES[:-1], SIZE_EDGES[1:])),
    f"size_ge_{_size_label(SIZE_EDGES[-1])}",
)
SCALE_NAMES = ("log10_comm_compute", "log2_ranks", "log10_nodes_per_rank", "log10_serial_us")
FEATURE_NAMES = (*SHARE_NAMES, *SIZE_BIN_NAMES, *SCALE_NAMES)
#: the blocks `standardized` weighs equally: name -> columns
BLOCKS = {
    "shares": slice(0, len(SHARE_NAMES)),
    "sizes": slice(len(SHARE_NAMES), len(SHARE_NAMES) + len(SIZE_BIN_NAMES)),
    "scale": slice(len(SHARE_NAMES) + len(SIZE_BIN_NAMES), len(FEATURE_NAMES)),
}
SERIAL = FEATURE_NAMES.index("log10_serial_us")
_RATIO_CLIP = 6.0  # log10 of communication / compute is kept in [-6, 6] (and is ±6 where one is 0)
COMM_TIMES = ("model", "recorded")


@dataclass(frozen=True)
class JobFeatures:
    """One job's feature vector (`values`, in `FEATURE_NAMES` order) and what it was made from."""

    name: str
    values: np.ndarray
    ranks: int
    nodes: int  # summed over ranks

    def __getitem__(self, feature: str) -> float:
        try:
            return float(self.values[FEATURE_NAMES.index(feature)])
        except ValueError:
            raise ChakraError(f"no feature {feature!r}; features: {', '.join(FEATURE_NAMES)}") from None

    @property
    def serial_us(self) -> float:
        """The busiest rank's serial time (µs): the scale `coverage`'s ratio estimator uses."""
        return float(10 ** self.values[SERIAL] - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "features": {k: float(v) for k, v in zip(FEATURE_NAMES, self.values)},
        }


@dataclass
class FleetFeatures(Tabular):
    """The vectors of N jobs as one (N, D) matrix, rows in `names` order."""

    names: list[str]
    matrix: np.ndarray  # (N, len(FEATURE_NAMES)), float64

    def __post_init__(self) -> None:
        if self.matrix.ndim != 2 or self.matrix.shape != (len(self.names), len(FEATURE_NAMES)):
            raise ChakraError(
                f"fleet features: expected a ({len(self.names)}, {len(FEATURE_NAMES)}) matrix, got {self.matrix.shape}"
            )

    @classmethod
    def from_jobs(cls, jobs: Iterable[JobFeatures]) -> FleetFeatures:
        jobs = list(jobs)
        if not jobs:
            raise ChakraError("fleet features: no jobs")
        matrix = np.stack([j.values for j in jobs]).astype(np.float64)
        return cls([j.name for j in jobs], matrix)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def serial_us(self) -> np.ndarray:
        """Each job's busiest-rank serial time (µs)."""
        return 10 ** self.matrix[:, SERIAL] - 1

    def standardized(self, block_weights: dict[str, float] | None = None) -> np.ndarray:
        """The matrix on one scale, for Euclidean distances: the share and size blocks are
        compositions, kept as they are (a z-score would blow a rare class up into the whole
        distance) and scaled as a block; every scale column is z-scored. Then each block is
        scaled to a total variance of its weight (default 1 each: shares, sizes and scale
        count alike, however many columns each has). Constant columns contribute 0."""
        weights = {"shares": 1.0, "sizes": 1.0, "scale": 1.0, **(block_weights or {})}
        unknown = set(weights) - set(BLOCKS)
        if unknown:
            raise ChakraError(f"block weights: unknown block {sorted(unknown)[0]!r}; blocks: {', '.join(BLOCKS)}")
        x = self.matrix - self.matrix.mean(axis=0)
        std = x.std(axis=0)
        out = np.zeros_like(x)
        for block, cols in BLOCKS.items():
            xb = x[:, cols]
            if block == "scale":
                sb = std[cols]
                xb = np.divide(xb, sb, out=np.zeros_like(xb), where=sb > 0)
            total = float((xb**2).sum(axis=1).mean())  # the block's total variance
            if total > 0:
                out[:, cols] = xb * np.sqrt(weights[block] / total)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(FEATURE_NAMES),
            "jobs": [
                {"name": n, **dict(zip(FEATURE_NAMES, map(float, row)))} for n, row in zip(self.names, self.matrix)
            ],
        }

    def to_table(self) -> Table:
        """One row per job (the index), one column per feature."""
        cols = {f: self.matrix[:, j] for j, f in enumerate(FEATURE_NAMES)}
        return Table({"job": list(self.names), **cols}, title="fleet features", index="job")


def job_features(workload: Workload | Trace, name: str = "job", comm_time: str = "model") -> JobFeatures:
    """The feature vector of one job (see the module docstring). `comm_time`: "model" (from
    bytes, the default) or "recorded" (the traces' durations)."""
    if comm_time not in COMM_TIMES:
        raise ChakraError(f"comm_time {comm_time!r}: expected one of {', '.join(COMM_TIMES)}")
    w = Workload.of(workload)
    if not len(w):
        raise ChakraError(f"{name}: a job without ranks has no features")
    sizes = _GroupSizes(w)
    classes = np.zeros(len(SHARE_NAMES))
    hist = np.zeros(len(SIZE_BIN_NAMES))
    busiest = 0.0
    nodes = 0
    done: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # SPMD ranks share one trace: once each
    for t in w.traces.values():
        if id(t) not in done:
            done[id(t)] = _rank_times(t, sizes, comm_time)
        times, counts = done[id(t)]
        classes += times
        hist += counts
        busiest = max(busiest, float(times.sum()))
        nodes += len(t)
    return JobFeatures(name, _vector(classes, hist, len(w), nodes / len(w), busiest), len(w), nodes)


def _vector(classes: np.ndarray, hist: np.ndarray, ranks: int, nodes_per_rank: float, busiest: float) -> np.ndarray:
    total = classes.sum()
    shares = classes / total if total > 0 else classes
    bins = hist / hist.sum() if hist.sum() > 0 else hist
    comm = classes[_COMM].sum()
    compute = classes[_COMPUTE]
    ratio = np.log10(comm / compute) if comm > 0 and compute > 0 else _RATIO_CLIP * (np.sign(comm) - np.sign(compute))
    scale = [
        np.clip(ratio, -_RATIO_CLIP, _RATIO_CLIP),
        np.log2(ranks),
        np.log10(max(nodes_per_rank, 1.0)),
        np.log10(busiest + 1.0),
    ]
    return np.concatenate([shares, bins, scale]).astype(np.float64)


class _GroupSizes:
    """Members of each communicator a trace names, asked once per name per job."""

    def __init__(self, w: Workload):
        self.w = w
        self.known: dict[str, int] = {}
        self.members: dict[str, list[int]] | None = None  # (`all_groups`: one pass, not one per group)

    def of(self, t: Trace) -> np.ndarray:
        """Per row of `t`: its communicator's size (every rank where none is named)."""
        per_code = np.array([self._size(g) for g in t.groups] or [len(self.w)], np.float64)
        named = t.has(Attr.PG_NAME) & (t.pg_name.astype(np.int64) < len(t.groups))
        return np.where(named, per_code[np.where(named, t.pg_name.astype(np.int64), 0)], float(len(self.w)))

    def _size(self, g: str) -> int:
        if g not in self.known:
            if self.members is None:
                self.members = self.w.all_groups()
            members = self.members[g] if g in self.members else self.w.group_ranks(g)
            self.known[g] = max(len(members), 1)
        return self.known[g]


def _rank_times(t: Trace, sizes: _GroupSizes, comm_time: str) -> tuple[np.ndarray, np.ndarray]:
    """One rank's time per share class (µs) and its message-size histogram (counts)."""
    out = np.zeros(len(SHARE_NAMES))
    dur = t.duration.astype(np.float64)
    types = t.types
    ref = device_spec(REFERENCE_DEVICE)
    # compute: recorded, else the reference roofline from FLOPs and bytes
    comp = compute_mask(t)
    flops = np.where(t.has(Attr.NUM_OPS), t.num_ops.astype(np.float64), 0.0)
    nbytes = np.where(t.has(Attr.TENSOR_SIZE), t.tensor_size.astype(np.float64), 0.0)
    roof = np.maximum(flops / ref.peak_flops, nbytes / ref.mem_bw) * 1e6
    out[_COMPUTE] = np.where(dur > 0, dur, roof)[comp].sum()
    out[_HOST] = dur[(types == NodeType.COMP_NODE) & ~comp].sum()
    mem = (types == NodeType.MEM_LOAD_NODE) | (types == NodeType.MEM_STORE_NODE)
    out[_MEMORY] = np.where(dur > 0, dur, nbytes / ref.mem_bw * 1e6)[mem].sum()
    # communication: modelled from bytes (or as recorded)
    size = np.where(t.has(Attr.COMM_SIZE), t.comm_size.astype(np.float64), 0.0)
    coll = types == NodeType.COMM_COLL_NODE
    p2p = (types == NodeType.COMM_SEND_NODE) | (types == NodeType.COMM_RECV_NODE)
    ctype = np.where(t.has(Attr.COMM_TYPE), t.comm_type.astype(np.int64), -1)
    cls = np.where(
        (ctype >= 0) & (ctype < _CLASS_OF_COLLECTIVE.size),
        _CLASS_OF_COLLECTIVE[np.clip(ctype, 0, _CLASS_OF_COLLECTIVE.size - 1)],
        5,
    )
    if comm_time == "recorded":
        ct = dur
    else:
        n = sizes.of(t)
        factor = np.ones(len(t))
        # per distinct (type, group size): few in a real job, one per row in a hostile one (no pass per pair)
        pairs, inv = np.unique(np.stack([ctype[coll], n[coll]]), axis=1, return_inverse=True)
        per_pair = [
            bus_factor(CollectiveType(int(c)).name if int(c) in _KNOWN_TYPES else "", int(k))
            for c, k in pairs.T.tolist()
        ]
        factor[coll] = np.asarray(per_pair, float)[inv.reshape(-1)]
        ct = REFERENCE_LATENCY_US + size * factor / (REFERENCE_BUS_GBPS * 1e3)  # GB/s = 1e3 bytes/µs
    out[_COMM] = np.bincount(cls[coll] - 1, weights=ct[coll], minlength=5)[:5].tolist() + [ct[p2p].sum()]
    msg = coll | (types == NodeType.COMM_SEND_NODE)  # (a send's receive is the same message)
    counts = np.bincount(np.searchsorted(SIZE_EDGES, size[msg], side="right"), minlength=len(SIZE_BIN_NAMES))
    return out, counts.astype(np.float64)


def fleet_features(jobs: Iterable[tuple[str, Workload | Trace]] | Sequence[JobFeatures]) -> FleetFeatures:
    """Features of many jobs: (name, workload) pairs, or JobFeatures already computed."""
    out = [j if isinstance(j, JobFeatures) else job_features(j[1], j[0]) for j in jobs]
    return FleetFeatures.from_jobs(out)


__all__ = [
    "BLOCKS",
    "FEATURE_NAMES",
    "REFERENCE_BUS_GBPS",
    "REFERENCE_DEVICE",
    "REFERENCE_LATENCY_US",
    "SCALE_NAMES",
    "SHARE_NAMES",
    "SIZE_BIN_NAMES",
    "FleetFeatures",
    "JobFeatures",
    "fleet_features",
    "job_features",
]
