"""The critical path: the chain of dependent nodes whose durations add up to the longest time.

With unlimited parallelism a trace cannot finish sooner than its critical path, so for a
trace converted from a real run the critical path should reproduce the measured step time.
Dependencies are data and control dependencies together (what ASTRA-sim resolves);
dependencies on nodes that are not in the trace are ignored.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.enums import node_type_name
from ..schema.groups import rows_by_group
from ..schema.resources import FREE, KIND_NAMES, node_kinds, node_slots
from ..schema.trace import Trace
from ..table import Table, Tabular
from ..timeline.clock import rank_offsets_ns
from ..timeline.matching import p2p_rows, pair_p2p


@dataclass
class CriticalPath(Tabular):
    length_us: int  # sum of durations along the path
    rows: np.ndarray  # rows of the path, first to last
    ids: np.ndarray  # their node ids
    finish_us: np.ndarray = field(repr=False)  # earliest finish of every row (durations + dependencies)

    def to_table(self, trace: Trace) -> Table:
        """One row per node on the path, first to last (`trace`: the trace it was found in)."""
        return Table(
            {
                "id": self.ids,
                "name": trace.name_array[self.rows],
                "type": trace.types[self.rows],
                "duration_us": trace.duration[self.rows],
                "finish_us": self.finish_us[self.rows],
            },
            title="critical path",
        )


def critical_path(trace: Trace) -> CriticalPath:
    """Longest duration-weighted dependency chain (raises ChakraError on a dependency cycle)."""
    n = len(trace)
    if n == 0:
        return CriticalPath(0, np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
    g = trace.graph()
    indptr, preds = g.preds
    order = g.order().tolist()
    ip = indptr.tolist()
    pl = preds.tolist()
    fin = [0] * n
    bp = [-1] * n
    dl = trace.duration.astype(np.int64).tolist()
    for v in order:
        a, b = ip[v], ip[v + 1]
        start, arg = 0, -1
        for k in range(a, b):
            p = pl[k]
            if arg < 0 or fin[p] > start:
                start, arg = fin[p], p
        fin[v] = start + dl[v]
        bp[v] = arg
    finish = np.asarray(fin, np.int64)
    best_pred = np.asarray(bp, np.int64)
    last = int(np.argmax(finish))
    path = [last]
    while best_pred[path[-1]] >= 0:
        path.append(int(best_pred[path[-1]]))
    rows = np.asarray(path[::-1], np.int64)
    return CriticalPath(int(finish[last]), rows, trace.ids[rows], finish)


# ---------------------------------------------------------------------------------- the whole job

_VIA = ("start", "dependency", "resource")


@dataclass
class JobCriticalPath(Tabular):
    """The chain of operations, across ranks, that sets the step time.

    Walked back from the operation that ends last: each step goes to what the operation
    waited for, whichever finished last of its dependencies, the previous operation on its
    resource (one accelerator, CPU and collective stream per rank), or, for a collective or
    a receive, the member that arrived last (the path jumps to that rank). ``columns`` hold
    one entry per operation on the path, first to last (numpy arrays): rank, row, id, name,
    type, kind, start_ns/end_ns (the operation's), path_start_ns and time_ns (the part on the
    path: a collective counts from its last member's arrival, whose rank is
    ``gated_by_rank``, -1 when none), wait_ns (time before it that no operation explains:
    launch gaps, latencies) and via (what it waited for: "dependency", "resource"; "start"
    for the first). ``length_ns`` = the sum of both times = last end − first start.
    ``segments`` gives the same as one dict per operation.

    The rest of the recording is named, so that length + start skew + lead gap = ``recording_ns``:
    ``start_skew_ns``, how much later the path's first rank started than the job's first
    rank (``first_rank``: ranks whose clocks or launches differ); ``lead_gap_ns``, the time
    on the path's first rank before its first operation (nothing recorded explains it). On a
    simulation that starts every NPU at 0 both are 0 and the length is the simulated step.
    """

    source: str  # "recorded" or "simulated"
    length_ns: int
    recording_ns: int  # the job's span: latest end minus earliest start over every rank (the whole recording)
    last_rank: int  # the rank whose operation ends last
    columns: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    start_skew_ns: int = 0
    lead_gap_ns: int = 0
    first_rank: int = -1  # the rank that started first (-1: no operation ran)
    start_rank: int = -1  # the rank the path starts on

    @property
    def step_ns(self) -> int:
        """Deprecated alias of `recording_ns` (the whole recording, however many steps it holds)."""
        return self.recording_ns

    @property
    def accounted_ns(self) -> int:
        """Length + start skew + lead gap: the whole recording (`recording_ns`)."""
        return self.length_ns + self.start_skew_ns + self.lead_gap_ns

    def start_line(self) -> str:
        """The start skew and lead gap in words ("" when there is neither)."""
        parts = []
        if self.start_skew_ns:
            parts.append(
                f"start skew {self.start_skew_ns / 1e6:,.3f} ms (rank {self.start_rank} started later than "
                f"rank {self.first_rank})"
            )
        if self.lead_gap_ns:
            parts.append(
                f"gap before the path's first operation on rank {self.start_rank} {self.lead_gap_ns / 1e6:,.3f} ms"
            )
        return "; ".join(parts)

    def __len__(self) -> int:
        return len(self.columns.get("rank", ()))

    @property
    def wait_ns(self) -> int:
        return int(self.columns["wait_ns"].sum()) if len(self) else 0

    @property
    def segments(self) -> list[dict]:
        c = self.columns
        if not len(self):
            return []
        keys = [k for k in c if k != "gated_by_rank"]
        rows = [dict(zip(keys, vals)) for vals in zip(*(c[k].tolist() for k in keys))]
        for d, g in zip(rows, c["gated_by_rank"].tolist()):
            if g >= 0:
                d["gated_by_rank"] = g
        return rows

    def by_rank(self) -> dict[int, int]:
        """Time on the path per rank (ns), most first: which ranks set the step time."""
        if not len(self):
            return {}
        ranks, inv = np.unique(self.columns["rank"], return_inverse=True)
        tot = np.bincount(inv, weights=self.columns["time_ns"]).astype(np.int64)
        order = np.argsort(-tot, kind="stable")
        return {int(ranks[i]): int(tot[i]) for i in order}

    def by_kind(self) -> dict[str, int]:
        out = {k: 0 for k in KIND_NAMES}
        if len(self):
            tot = np.bincount(self.columns["kind_code"], weights=self.columns["time_ns"], minlength=4)
            out.update({k: int(v) for k, v in zip(KIND_NAMES, tot)})
        out["wait"] = self.wait_ns
        return out

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "length_ns": self.length_ns,
            "recording_ns": self.recording_ns,
            "last_rank": self.last_rank,
            "wait_ns": self.wait_ns,
            "start_skew_ns": self.start_skew_ns,
            "lead_gap_ns": self.lead_gap_ns,
            "first_rank": self.first_rank,
            "start_rank": self.start_rank,
            "by_rank": self.by_rank(),
            "by_kind": self.by_kind(),
            "segments": self.segments,
        }

    def to_table(self) -> Table:
        """One row per operation on the path, first to last (``columns``)."""
        return Table(self.columns, title="operations on the path")


class _RankTimes:
    """One rank's view for the walk: times, resources, predecessors, lane order. The walk
    visits one node at a time, so what it reads is turned into Python lists once, on the
    first visit (ranks the path never reaches cost nothing)."""

    def __init__(self, trace: Trace, start: np.ndarray, end: np.ndarray, kind: np.ndarray, cache: dict, lanes: bool):
        self.t, self.start, self.end, self.kind = trace, start, end, kind
        self.cache = cache
        self.by_lane = lanes  # the one-at-a-time rule per recorded thread/stream (else per kind)
        self.lists: bool | None = None

    def _prepare(self) -> None:
        t, start, end = self.t, self.start, self.end
        key = ("csr", id(t), self.by_lane)
        if key not in self.cache:
            indptr, preds = t.graph().preds
            slot, slot_kind = node_slots(t, self.by_lane)
            free = slot_kind[slot] == FREE
            self.cache[key] = (indptr.tolist(), preds.tolist(), np.where(free, -1, slot).tolist(), slot)
        self.indptr, self.preds, self.slot_l, slot = self.cache[key]
        self.end_l, self.start_l = end.tolist(), start.tolist()
        ran = np.flatnonzero(end >= 0)
        ran = ran[np.lexsort((start[ran], end[ran], slot[ran]))]  # per slot, by end then start (one sort)
        cuts = np.flatnonzero(np.diff(slot[ran])) + 1
        self.lanes = {}
        # each lane: ends, rows, and `skip` (union-find over positions: where the search for an
        # unseen row goes on), so that walking past rows already on the path costs nothing twice
        for part in np.split(ran, cuts) if ran.size else []:
            self.lanes[int(slot[part[0]])] = (end[part].tolist(), part.tolist(), list(range(part.size)))
        self.lists = True

    def predecessor(self, v: int, at: int, tol: int, seen: set) -> tuple[int, int]:
        """What row v (on the path from time `at`) waited for: (row, index into _VIA) or (-1, 0)."""
        if self.lists is None:
            self._prepare()  # (a collective's last member: first visit to its rank)
        end = self.end_l
        best, how, best_end = -1, 0, -1
        limit = at + tol
        for p in self.preds[self.indptr[v] : self.indptr[v + 1]]:
            e = end[p]
            if 0 <= e <= limit and e > best_end and p not in seen:
                best, how, best_end = p, 1, e
        k = self.slot_l[v]
        if k >= 0 and k in self.lanes:  # the resource: the row of the same slot that freed it last
            ends, rows, skip = self.lanes[k]
            i = _unseen(bisect.bisect_right(ends, limit) - 1, rows, skip, seen)  # (v is in seen)
            if i >= 0 and ends[i] > best_end:
                best, how = rows[i], 2
        return best, how


def _unseen(i: int, rows: list[int], skip: list[int], seen: set) -> int:
    """The last position <= i of a lane whose row is not in `seen` (-1: none). Rows join `seen`
    and never leave, so a passed position points on to one before it (`skip`, shortened as it
    is followed): the walk costs about one step per row overall, where stepping back one by one
    cost the path's length squared on a long lane."""
    j = i
    while j >= 0:
        if skip[j] != j:
            j = skip[j]
        elif rows[j] in seen:
            skip[j] = j - 1
            j -= 1
        else:
            break
    while i > j:  # every position passed now points at the answer
        nxt = skip[i]
        skip[i] = j
        i = nxt
    return j


def _partners(traces: dict[int, Trace]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(rank, row) of a collective or receive -> every (rank, row) it meets: the collective's
    members (k-th collective of a group on each rank) or the matching send (`timeline.matching`)."""
    inst: dict[tuple[str, int], list[tuple[int, int]]] = {}
    colls: dict[int, dict] = {}
    p2p = []
    for rank, t in traces.items():
        if id(t) not in colls:
            colls[id(t)] = {g: rows.tolist() for g, rows in rows_by_group(t).items()}
        for g, rows in colls[id(t)].items():
            for k, row in enumerate(rows):
                inst.setdefault((g, k), []).append((rank, row))
        p2p.append(p2p_rows(t, rank))
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for members in inst.values():
        for m in members:
            out[m] = members
    if p2p:
        cols = {k: np.concatenate([c[k] for c in p2p]) for k in ("row", "recv", "src", "dst", "tag")}
        rank_of = np.where(cols["recv"], cols["dst"], cols["src"])
        sends, recvs = pair_p2p(cols["src"], cols["dst"], cols["tag"], cols["row"], cols["recv"])
        for s, r in zip(sends.tolist(), recvs.tolist()):
            recv = (int(rank_of[r]), int(cols["row"][r]))
            out[recv] = [recv, (int(rank_of[s]), int(cols["row"][s]))]
    return out


def job_critical_path(workload, result=None, *, align: str = "auto") -> JobCriticalPath:
    """The job's critical path from a simulation `result` (a SimResult: the path's length is
    its step time) or, without one, from the recorded times, ranks put on one clock by
    `align.rank_offsets_ns`. Raises ChakraError when a workload has no recorded times."""
    cache: dict = {}
    kinds: dict = {}
    ranks: dict[int, _RankTimes] = {}
    if result is not None:
        traces = result.traces or _traces_per_npu(workload, len(result.nodes))
        lanes = not result.mode.startswith("astra")
        for npu, (start, end, kind) in result.nodes.items():
            ranks[npu] = _RankTimes(traces[npu], start, end, kind, cache, lanes)
        tol, source = 0, "simulated"
    else:
        workload = Workload.of(workload)
        traces = workload.traces
        if not any(t.timed for t in traces.values()):
            raise ChakraError(
                "the workload has no recorded start times (all 0): simulate it (`--simulate "
                "SYSTEM`; in Python, job_critical_path(workload, result))"
            )
        offsets = rank_offsets_ns(workload, align)
        for r, t in traces.items():
            start = t.start.astype(np.int64) * 1000 + offsets[r]
            if id(t) not in kinds:
                kinds[id(t)] = node_kinds(t)
            ranks[r] = _RankTimes(t, start, start + t.duration.astype(np.int64) * 1000, kinds[id(t)], cache, True)
        tol, source = 1000, "recorded"  # recorded times are whole µs
    partners = _partners(traces)
    # start from the operation that ends last (lowest rank on a tie)
    last_rank, v, frontier = -1, -1, -1
    first: int | None = None
    first_rank = -1
    rank_start: dict[int, int] = {}
    for r in sorted(ranks):
        rt = ranks[r]
        ran = rt.end >= 0
        if not ran.any():
            continue
        i = int(np.argmax(rt.end))
        if rt.end[i] > frontier:
            last_rank, v, frontier = r, i, int(rt.end[i])
        lo = rank_start[r] = int(rt.start[ran].min())
        if first is None or lo < first:
            first, first_rank = lo, r
    if last_rank < 0:
        return JobCriticalPath(source, 0, 0, -1, _columns([], ranks))
    steps: list[tuple] = []  # (rank, row, path start, frontier, gate rank, via, wait), last first
    seen: dict[int, set] = {r: set() for r in ranks}
    r = last_rank
    while True:
        rt = ranks[r]
        if rt.lists is None:
            rt._prepare()
        seen[r].add(v)
        at = rt.start_l[v]
        gate = (r, v)
        for m in partners.get((r, v), ()):  # a collective or receive: the member that arrived last
            mr, mv = m  # (while this one waited: a recorded op that ended first did not wait for it)
            if mr in ranks and at < int(ranks[mr].start[mv]) <= rt.end_l[v]:
                gate, at = m, int(ranks[mr].start[mv])
        at = min(at, frontier)
        here = (r, v, at, frontier, gate[0] if gate != (r, v) else -1)
        r, v = gate
        rt = ranks[r]
        seen[r].add(v)
        p, how = rt.predecessor(v, at, tol, seen[r])
        if p < 0:
            steps.append((*here, 0, 0))
            break
        end = min(int(rt.end[p]), at)
        steps.append((*here, how, at - end))
        frontier = end
        v = p
    cols = _columns(steps[::-1], ranks)
    length = int(cols["time_ns"].sum() + cols["wait_ns"].sum())
    step = int(max(int(x.end.max()) for x in ranks.values()) - (first or 0))
    # the path starts where its first operation's last member arrived (its gate's rank, if any)
    start_rank = int(cols["gated_by_rank"][0]) if cols["gated_by_rank"][0] >= 0 else int(cols["rank"][0])
    at = int(cols["path_start_ns"][0])
    base = rank_start.get(start_rank, at)
    skew = base - (first or 0)
    return JobCriticalPath(source, length, step, last_rank, cols, skew, at - base, first_rank, start_rank)


def _columns(steps: list[tuple], ranks: dict[int, _RankTimes]) -> dict[str, np.ndarray]:
    a = np.array(steps, np.int64).reshape(-1, 7)
    rank, row, at, frontier, gate, via, wait = a.T
    n = len(a)
    ids, start, end, kind = (np.zeros(n, np.int64) for _ in range(4))
    name, typ = np.empty(n, object), np.empty(n, object)
    by_rank = np.argsort(rank, kind="stable")
    cuts = np.flatnonzero(np.diff(rank[by_rank])) + 1
    for m in np.split(by_rank, cuts) if n else []:  # per rank, gathered as arrays
        rt = ranks[int(rank[m[0]])]
        t, rows = rt.t, row[m]
        ids[m], start[m], end[m], kind[m] = t.ids[rows], rt.start[rows], rt.end[rows], rt.kind[rows]
        name[m] = np.asarray(t.names, dtype=object)[t.name_codes[rows]]
        codes, inv = np.unique(t.types[rows], return_inverse=True)
        typ[m] = np.array([node_type_name(int(c)) for c in codes], dtype=object)[inv]
    return {
        "rank": rank,
        "id": ids,
        "name": name,
        "type": typ,
        "kind": np.asarray(KIND_NAMES, dtype=object)[kind],
        "kind_code": kind,
        "start_ns": start,
        "end_ns": end,
        "path_start_ns": at,
        "time_ns": frontier - at,
        "wait_ns": wait,
        "via": np.asarray(_VIA, dtype=object)[via],
        "row": row,
        "gated_by_rank": gate,
    }


def _traces_per_npu(workload, npus: int) -> dict[int, Trace]:
    t = Workload.of(workload).traces
    return {r: t[r] if r in t else t[0] for r in range(npus)}
