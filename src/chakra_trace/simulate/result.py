"""What a simulation tells: per-NPU times, totals, every collective, the timeline, links.

A simulation runs the whole recording a job holds (often several profiler steps): its span is
``recording_ns``; ``steps`` says how many training steps that is, ``per_step_ns`` one of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from ..table import Column, Table, Tabular
from .peers import describe

#: The per-NPU times (ns), as `to_table` labels them.
PER_NPU = {
    "finish_ns": "finish",
    "compute_ns": "compute",
    "comm_ns": "comm",
    "overlap_ns": "overlap",
    "exposed_comm_ns": "exposed comm",
    "exposed_transfer_ns": "exposed transfer",
    "exposed_peer_wait_ns": "exposed peer wait",
    "other_ns": "other",
    "idle_ns": "idle",
}

#: Communication split into transfer and waiting for peers (ns per NPU), as `SimResult` holds it.
SPLIT = ("transfer_ns", "peer_wait_ns", "exposed_transfer_ns", "exposed_peer_wait_ns")


@dataclass
class CollectiveRecord:
    """One collective instance as it ran: its group and index in that group, type, bytes per
    member, members, the algorithm of each phase, chunks, and when its first member issued
    it (``start_ns``), its last member issued it (``ready_ns``: every member waits for the
    last one until then) and its last member finished (``end_ns``). ``transfer_ns`` (end minus
    ready) is the time bandwidth figures divide by; ``peer_wait_ns`` (ready minus start) is
    arrival skew, which no network removes."""

    group: str  # "all" for the whole machine
    index: int
    type: str  # CollectiveType name
    bytes: int
    npus: int
    algorithm: str  # "op:algorithm@dimension" per distinct phase, joined by "+"
    chunks: int
    start_ns: int
    end_ns: int
    ready_ns: int = -1  # (-1: unknown, taken as start_ns)

    @property
    def transfer_ns(self) -> int:
        """From the last member's arrival to the last finish: the collective's own time."""
        return self.end_ns - max(self.ready_ns, self.start_ns)

    @property
    def peer_wait_ns(self) -> int:
        """From the first member's arrival to the last one's: time spent waiting for peers."""
        return max(self.ready_ns, self.start_ns) - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "transfer_ns": self.transfer_ns, "peer_wait_ns": self.peer_wait_ns}


@dataclass
class SimResult(Tabular):
    """Per NPU (arrays indexed by NPU): ``finish_ns``; ``compute_ns`` (union of compute busy
    time: accelerator compute, or every COMP node of a CPU-only trace, as
    `schema.resources.compute_mask`); ``comm_ns`` (time with a collective, send or receive in
    flight); ``overlap_ns`` (both at once); ``exposed_comm_ns``; ``other_ns`` (busy with
    neither); ``idle_ns`` (nothing running); compute + comm - overlap + other + idle = finish.
    Communication splits into ``transfer_ns`` (a message or collective moving: after its last
    peer arrived) and ``peer_wait_ns`` (waiting for a late peer: arrival skew, which a faster
    network does not remove); ``exposed_transfer_ns`` + ``exposed_peer_wait_ns`` = exposed
    comm (`intervals.transfer_split`). In ASTRA-sim compatibility mode ``exposed_comm_ns`` is what ASTRA-sim
    prints: finish minus the sum of compute durations; otherwise communication time not
    hidden behind compute.

    ``collectives``: a `CollectiveRecord` per collective instance (group, index, type, bytes,
    algorithm, start, end). ``nodes[npu]``: (start, end, kind) arrays per trace row (-1 if
    never run); ``traces[npu]`` the trace it ran (repaired in default mode; rows match
    ``nodes``). ``link_busy_ns`` (aware network): busy time of every link; `links()` describes
    those that carried traffic (dimension, kind, endpoints) with their utilization. The simulated timeline as
    Perfetto JSON: `chakra_trace.visualize.timeline.timeline(None, result)`.
    """

    finish_ns: np.ndarray
    exposed_comm_ns: np.ndarray
    compute_ns: np.ndarray
    comm_ns: np.ndarray
    overlap_ns: np.ndarray
    other_ns: np.ndarray
    idle_ns: np.ndarray
    collectives: list[CollectiveRecord] = field(default_factory=list)
    transfer_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    peer_wait_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    exposed_transfer_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    exposed_peer_wait_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    nodes: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    names: dict[int, np.ndarray] = field(default_factory=dict)
    traces: dict = field(default_factory=dict, repr=False)  # the trace each NPU ran (after repairs), shared
    link_busy_ns: np.ndarray | None = None
    describe_links: Callable[[np.ndarray], dict] | None = field(default=None, repr=False)  # ids -> `links` fields
    mode: str = ""
    events: int = 0
    wall_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    shortcuts: list[str] = field(default_factory=list)  # exact shortcuts the run took (`simulate`)
    # {absent rank: the rank present it copies}: ranks the job's groups name that it has no trace
    # of, taken as symmetric copies (`peers`); empty when the job has every rank
    assumed_symmetric_ranks: dict[int, int] = field(default_factory=dict)
    # at which peaks the roofline costed compute nodes (`costs.compute_types`): per element type
    # or one peak and why, the device, the TF32 rule (``fp32_as``), nodes without a type
    # (``dtype_unknown``) or at a wider type's peak (``dtype_fallback``), nodes and FLOPs per
    # peak type (``by_peak``); empty without a roofline
    compute_types: dict = field(default_factory=dict)
    # training steps the simulated recording holds (`job_steps`: the ranks' profiler step
    # windows); None when the job does not say (a captured or synthesized step, a bare trace)
    steps: int | None = None

    def __post_init__(self) -> None:
        if len(self.transfer_ns) != len(self.comm_ns):  # (built without the split: no waits known)
            self.transfer_ns, self.peer_wait_ns = np.asarray(self.comm_ns), np.zeros_like(self.comm_ns)
            self.exposed_transfer_ns = np.asarray(self.exposed_comm_ns)
            self.exposed_peer_wait_ns = np.zeros_like(self.exposed_comm_ns)

    @property
    def assumption(self) -> str:
        """The symmetric-copy assumption in one line ("" when none was made)."""
        return describe(self.assumed_symmetric_ranks)

    @property
    def compute_line(self) -> str:
        """``compute_types`` in one line ("" without a roofline)."""
        c = self.compute_types
        if not c:
            return ""
        parts = ", ".join(f"{k} {v['nodes']:,} nodes {v['flops']:.3g} FLOP" for k, v in c.get("by_peak", {}).items())
        if not c["per_dtype"]:
            return f"compute peaks: one, {c['peak_perf_tflops']:g} TFLOPS ({c['why']}): {parts or 'no nodes'}"
        return (
            f"compute peaks per dtype on {c['device']} (efficiency {c['efficiency']:g}; TF32 rule {c['rule']}): {parts or 'no nodes'}; "
            f"{c['dtype_unknown']:,} without a dtype (at its {c['default_dtype']} peak), "
            f"{c['dtype_fallback']:,} at a wider type's peak"
        )

    @property
    def recording_ns(self) -> int:
        """The simulated span of the whole recording: the last NPU's finish (all start at 0)."""
        return int(self.finish_ns.max()) if self.finish_ns.size else 0

    @property
    def per_step_ns(self) -> float | None:
        """`recording_ns` per training step of the recording (`steps`), None when unknown."""
        return self.recording_ns / self.steps if self.steps else None

    @property
    def step_ns(self) -> int:
        """Deprecated alias of `recording_ns` (the whole recording, however many steps it holds);
        use `recording_ns`, or `per_step_ns` for one step."""
        return self.recording_ns

    @property
    def span_line(self) -> str:
        """'recording 171,686,335 ns (2 steps: 85,843,168 ns per step)', or '(steps unknown)'."""
        per = self.per_step_ns
        how = (
            f"{self.steps} step{'s' * (self.steps != 1)}: {per:,.0f} ns per step"
            if per is not None
            else "steps unknown"
        )
        return f"recording {self.recording_ns:,} ns ({how})"

    def to_dict(self) -> dict[str, Any]:
        out = {
            k: getattr(self, k).tolist()
            for k in (
                "finish_ns",
                "exposed_comm_ns",
                "compute_ns",
                "comm_ns",
                "overlap_ns",
                "other_ns",
                "idle_ns",
                *SPLIT,
            )
        }
        per = self.per_step_ns
        out.update(
            recording_ns=self.recording_ns,
            steps=self.steps,
            per_step_ns=None if per is None else round(per, 3),
            mode=self.mode,
            events=self.events,
            wall_s=round(self.wall_s, 4),
            collectives=[c.to_dict() for c in self.collectives],
            warnings=self.warnings,
            shortcuts=self.shortcuts,
            assumed_symmetric_ranks={str(k): v for k, v in self.assumed_symmetric_ranks.items()},
            assumption=self.assumption,
            compute_types=self.compute_types,
        )
        if self.link_busy_ns is not None:
            out["links"] = self.links(top=100)
        return out

    def links(self, top: int | None = None) -> list[dict]:
        """Utilization of every link that carried traffic (aware network), busiest first."""
        if self.link_busy_ns is None or self.describe_links is None:
            return []
        used = np.flatnonzero(self.link_busy_ns > 0)
        used = used[np.argsort(-self.link_busy_ns[used], kind="stable")][:top]
        info = self.describe_links(used)
        step = max(self.recording_ns, 1)
        return [
            {
                "link": int(i),
                "dim": int(info["dim"][j]),
                "kind": str(info["kind"][j]),
                "src": int(info["src"][j]),
                "dst": int(info["dst"][j]),
                "busy_ns": int(self.link_busy_ns[i]),
                "utilization": float(self.link_busy_ns[i] / step),
            }
            for j, i in enumerate(used.tolist())
        ]

    def to_table(self) -> Table:
        """One row per NPU (the index): its times (ns)."""
        spec = {"npu": Column(label=""), **{k: Column(label=v) for k, v in PER_NPU.items()}}
        cols = {k: getattr(self, k) for k in PER_NPU}
        return Table({"npu": np.arange(self.finish_ns.size), **cols}, title="per NPU (ns)", index="npu", spec=spec)

    def collectives_table(self) -> Table:
        """One row per collective instance (`CollectiveRecord`), in the order they were recorded."""
        spec = {"index": Column(label="#"), "start_ns": Column(label="start"), "end_ns": Column(label="end")}
        return Table.from_records(
            (c.to_dict() for c in self.collectives),
            [*(f.name for f in fields(CollectiveRecord)), "transfer_ns", "peer_wait_ns"],
            title=f"collectives ({len(self.collectives)})",
            spec=spec,
        )

    def collectives_frame(self):
        """`collectives_table` as a pandas DataFrame."""
        return self.collectives_table().to_pandas()


def job_steps(traces) -> int | None:
    """The training steps a job's recording holds (`Trace.recorded_steps`), when its ranks agree."""
    got = {t.recorded_steps for t in {id(t): t for t in traces}.values()}
    return got.pop() if len(got) == 1 else None
