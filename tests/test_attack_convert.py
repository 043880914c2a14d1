"""Converting a shared PyTorch/Kineto trace does work linear in what it holds (issue 34 item 6):
the super-linear paths left after the per-group rewrites, each with its reproducer and a check
that the rewrite changes no result.

- Synchronization edges (`convert.sync`): a host op that synchronized depends on each stream's
  last op; a thread's later syncs no longer repeat the edges its order implies, the stream ops
  looked at are counted before any look-up (refused past a documented limit), and the converted
  graph orders every node as before (same reachability, against the per-stream loop replaced).
- Unnamed gloo collectives matched to declared groups (`schema.groups.resolve_unnamed_groups`):
  groups of one member set are one candidate, and only the groups of the ranks that moved are
  looked at again; results as the loop over every group found them.
- Thread pairing and the detached-op parents (`convert.sequences`, `convert.rank_graph`).
- `generate fit`: each step's trace carries its own window, not all k bounds.
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.convert.gpu_work import _ThreadIndex
from chakra_trace.convert.profiler import convert_kineto_trace
from chakra_trace.convert.rank_graph import GraphBuilder
from chakra_trace.errors import ChakraError

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED = REPO.parent / "shared" / "traces"


# ------------------------------------------------------------------------------ Kineto traces
def _x(name, cat, ts, dur, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(path: Path, events: list) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_000_000_000}
    data = json.dumps(doc, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def _many_syncs(threads: int, streams: int, per_thread: int = 1) -> list:
    """The reviewer's shape: `streams` kernels, each on its own stream, launched from the main
    thread; then `threads` other threads that each synchronize `per_thread` times."""
    ev = [_x("ProfilerStep#1", "user_annotation", 0, 10 * streams + 100 * per_thread + threads + 1000)]
    for j in range(streams):
        t = 10 + 10 * j
        ev.append(_x("aten::mm", "cpu_op", t, 8))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 1, 2, correlation=j + 1))
        ev.append(_x("k", "kernel", t + 3, 3, tid=100 + j, pid=0, correlation=j + 1, stream=100 + j, device=0))
    base = 10 * streams + 100
    for i in range(threads):
        for q in range(per_thread):
            t = base + i + 100 * q
            ev.append(_x("aten::item", "cpu_op", t, 50, tid=100_000 + i))
            ev.append(_x("cudaDeviceSynchronize", "cuda_runtime", t + 1, 40, tid=100_000 + i))
    return ev


def _random_trace(seed: int) -> list:
    """Threads of ops that launch kernels onto a few streams of two devices and synchronize
    (device, stream and event syncs, blocking copies; calls that return after their op ended
    too), ops nested in others, and a c10d op whose NCCL op outlives it on its thread (its order
    edge then skips the c10d op)."""
    rng = np.random.default_rng(seed)
    threads, streams = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    ev = [_x("ProfilerStep#1", "user_annotation", 0, 100_000)]
    corr = 0
    for th in range(1, threads + 1):
        t = int(rng.integers(1, 40))
        for _ in range(int(rng.integers(5, 30))):
            dur = int(rng.integers(4, 80))
            ev.append(_x(f"aten::op{int(rng.integers(3))}", "cpu_op", t, dur, tid=th))
            if rng.random() < 0.2 and dur > 10:
                ev.append(_x("aten::child", "cpu_op", t + 2, dur // 2, tid=th))
            for _ in range(int(rng.integers(0, 3))):
                corr += 1
                lt = t + int(rng.integers(0, dur))
                st = int(rng.integers(0, streams))
                ev.append(_x("cudaLaunchKernel", "cuda_runtime", lt, 1, tid=th, correlation=corr))
                ks = lt + int(rng.integers(1, 150))
                kd = int(rng.integers(1, 120))
                ev.append(_x("k", "kernel", ks, kd, tid=7 + st, pid=0, correlation=corr, stream=7 + st, device=st % 2))
            for _ in range(int(rng.integers(0, 3)) if rng.random() < 0.5 else 0):
                name = ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy"][
                    int(rng.integers(4))
                ]
                s0 = t + int(rng.integers(0, dur))
                ev.append(_x(name, "cuda_runtime", s0, int(rng.integers(0, dur + 10)), tid=th))
            if th == 1 and rng.random() < 0.1:  # a c10d op that returned before its NCCL op ended
                c = t + dur + 2
                ev.append(_x("c10d::allreduce_", "cpu_op", c, 10, tid=th))
                ev.append(_x("nccl:all_reduce", "cpu_op", c + 5, 300, tid=th))
                ev.append(_x("cudaStreamSynchronize", "cuda_runtime", c + 200, 50, tid=th))
                t = c + 320
            t += dur + int(rng.integers(0, 30))
    return ev


# ------------------------------------------------------------------------------ the loop replaced
def _per_stream_sync_edges(self, tl, out_src: list, out_dst: list) -> None:
    """`GraphBuilder._sync_edges` as it was (1c36f05): every synchronizing host op, every stream."""
    syncs = self.gpu.sync_points()
    if not syncs:
        return
    host, is_gpu, th, s, e, ev_ids, key = tl.host, tl.is_gpu, tl.th, tl.s, tl.e, tl.ids, tl.key
    gk = np.flatnonzero(is_gpu)
    by_key = gk[np.argsort(key[gk], kind="stable")]
    streams = dict(zip(np.unique(key[by_key]).tolist(), np.split(by_key, np.flatnonzero(np.diff(key[by_key])) + 1)))
    threads = _ThreadIndex(host, th, s, e, ev_ids).by
    src, dst = [], []
    for thread, calls in syncs.items():
        t0 = np.array([c[0] for c in calls], np.int64)
        t1 = [c[1] for c in calls]
        ks = threads.get(thread, gk[:0])
        a = np.searchsorted(t0, s[ks], "left")
        b = np.searchsorted(t0, e[ks], "right")
        for k, lo_, hi_ in zip(ks[b > a].tolist(), a[b > a].tolist(), b[b > a].tolist()):
            done = [x for x in t1[lo_:hi_] if x <= e[k]]
            if not done:
                continue
            until = max(done)
            for pos in streams.values():
                j = int(np.searchsorted(pos, k)) - 1
                if j >= 0 and e[pos[j]] <= until:
                    src.append(int(ev_ids[k]))
                    dst.append(int(ev_ids[pos[j]]))
    out_src.append(np.asarray(src, np.int64))
    out_dst.append(np.asarray(dst, np.int64))


def _edges(t) -> set[tuple[int, int]]:
    ip, pr = t.graph().preds
    return set(zip(np.repeat(np.arange(len(t)), np.diff(ip)).tolist(), pr.astype(np.int64).tolist()))


def _closure(n: int, edges: set[tuple[int, int]]) -> list[int]:
    """Per node, the nodes it waits for (directly or not), as a bit set."""
    from graphlib import TopologicalSorter

    deps: dict[int, list[int]] = {u: [] for u in range(n)}
    for u, v in edges:
        deps[u].append(v)
    reach = [0] * n
    for u in TopologicalSorter(deps).static_order():  # what a node waits for comes first
        r = 0
        for v in deps[u]:
            r |= reach[v] | (1 << v)
        reach[u] = r
    return reach


def _both(path, monkeypatch):
    """The trace converted with the per-stream loop, and as now."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with monkeypatch.context() as m:
            m.setattr(GraphBuilder, "_sync_edges", _per_stream_sync_edges)
            old, _ = convert_kineto_trace(path)
        new, _ = convert_kineto_trace(path)
    return old, new


def _same_order(old, new) -> tuple[int, int]:
    """The two conversions have the same nodes and every node waits for the same nodes; the
    edges of each."""
    assert len(old) == len(new)
    assert old.name_array.tolist() == new.name_array.tolist()
    assert old.start.tolist() == new.start.tolist() and old.duration.tolist() == new.duration.tolist()
    eo, en = _edges(old), _edges(new)
    assert en <= eo  # only edges dropped, none made up
    assert _closure(len(old), eo) == _closure(len(new), en)
    return len(eo), len(en)


# ------------------------------------------------------------------------------ synchronization edges
def test_many_threads_synchronizing_with_many_streams_is_refused_fast(tmp_path):
    """Reproducer (8,000 threads that each synchronize, 8,001 streams: 124-128 s and 5.2 GB in
    `chakra convert kineto`, 64 million edges): the look-ups are counted before any is made and
    the trace refused with the figures, in a second and little memory, exit 2."""
    from fuzz_check import run_subprocess

    path = _write(tmp_path / "sync.json.gz", _many_syncs(8000, 8001))
    assert path.stat().st_size < 400_000
    res = run_subprocess(["convert", "kineto", str(path), "-o", str(tmp_path / "out")], tmp_path, timeout=90)
    assert res.rc == 2 and not res.timed_out, (res.rc, res.stderr[-2000:])
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and str(path) in lines[0], res.stderr[-2000:]
    assert (
        "64,008,000 look-ups" in lines[0]
        and "CHAKRA_TRACE_MAX_SYNC_LOOKUPS" in lines[0]
        and "internal error" not in res.stderr
    )
    assert res.maxrss < 1 << 30, res.maxrss  # (its time is bounded by the timeout above: a hang guard)


def test_limit_is_documented_and_overridable(tmp_path, monkeypatch):
    from chakra_trace.convert import sync

    path = _write(tmp_path / "sync.json", _many_syncs(30, 30))
    monkeypatch.setenv(sync.LIMIT_ENV, "500")
    with pytest.raises(
        ChakraError, match=r"sync\.json: 30 threads wait for the GPU .* 900 look-ups, more than the 500"
    ):
        convert_kineto_trace(path)
    monkeypatch.setenv(sync.LIMIT_ENV, "900")
    t, _ = convert_kineto_trace(path)
    assert len(t) > 0
    monkeypatch.setenv(sync.LIMIT_ENV, "lots")
    with pytest.raises(ChakraError, match=sync.LIMIT_ENV):
        convert_kineto_trace(path)
    monkeypatch.delenv(sync.LIMIT_ENV)
    assert sync.limit(1000) == 4000 + (1 << 22)
    assert sync.LIMIT_ENV in (REPO / "SECURITY.md").read_text() + (REPO / "README.md").read_text()


def _sync_edges_made(threads: int, streams: int, per_thread: int, tmp_path) -> int:
    """Edges from the synchronizing ops (`aten::item`) to kernels in a `_many_syncs` trace."""
    path = _write(tmp_path / f"s{threads}_{streams}_{per_thread}.json", _many_syncs(threads, streams, per_thread))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t, _ = convert_kineto_trace(path)
    names = t.name_array
    return sum(names[u] == "aten::item" and names[v] == "k" for u, v in _edges(t))


def test_a_thread_that_synchronizes_often_makes_an_edge_per_stream_op(tmp_path):
    """Reproducer: one thread that synchronizes n times after n streams got a kernel each. The
    per-stream loop made n x n edges (each sync to each stream's last kernel); the thread's
    order implies all but the first sync's, so the edges grow as n."""
    assert _sync_edges_made(1, 100, 100, tmp_path) == 100
    assert _sync_edges_made(1, 400, 400, tmp_path) == 400


def test_sync_edges_look_at_each_stream_op_once_per_thread(monkeypatch, tmp_path):
    """The look-ups counted against the limit are those made: the streams' last ops before a
    thread's first sync and the stream ops between its first and last, n for n syncs."""
    from chakra_trace.convert import sync

    seen = []
    real = sync.lookups
    monkeypatch.setattr(sync, "lookups", lambda tails, k: seen.append(real(tails, k)) or seen[-1])
    for n in (100, 400):
        seen.clear()
        assert _sync_edges_made(1, n, n, tmp_path) == n
        assert seen == [n]
    seen.clear()
    assert _sync_edges_made(30, 30, 2, tmp_path) == 30 * 30
    assert seen == [30] * 30


def test_sync_edges_order_the_nodes_as_before_on_random_traces(tmp_path, monkeypatch):
    """On random traces (threads, streams, devices, every kind of sync, calls that outlive their
    op, a c10d op skipped by its NCCL op's order edge): every node waits for the same nodes as
    with the per-stream loop, whose redundant edges alone are gone."""
    from chakra_trace.convert import sync

    dropped = skipped = 0
    real_segments = sync.segments

    def segments(k, breaks):
        nonlocal skipped
        skipped += int(breaks.size > 0)
        return real_segments(k, breaks)

    monkeypatch.setattr(sync, "segments", segments)
    for seed in range(40):
        path = _write(tmp_path / f"r{seed}.json", _random_trace(seed))
        old, new = _both(path, monkeypatch)
        eo, en = _same_order(old, new)
        dropped += eo - en
    assert dropped > 50 and skipped > 0, (dropped, skipped)  # (the cases were there)


def _gpu_files():
    wild = sorted((SHARED / "gpu-wild").glob("*.json.gz"))
    param = sorted((SHARED / "param").glob("*_kineto.json.gz"))
    return [p for p in wild + param if "v100" not in p.name]  # (no CPU ops: nothing to convert)


@pytest.mark.skipif(not (SHARED / "gpu-wild").is_dir(), reason="needs ../shared/traces")
@pytest.mark.parametrize("path", _gpu_files(), ids=lambda p: p.name.split(".")[0])
def test_sync_edges_order_real_traces_as_before(path, monkeypatch):
    """The public GPU traces (gpu-wild, param): the same order of every node as the per-stream
    loop gave (byte-identical outputs but for the redundant edges dropped)."""
    old, new = _both(path, monkeypatch)
    if len(old) > 40_000:
        pytest.skip("closure of a large trace")
    _same_order(old, new)


@pytest.mark.parametrize("seed", range(60))
def test_waited_until_as_a_loop_over_calls(seed):
    """`sync.waited_until` (both paths: ops one after another, and ops that overlap so that each
    call lies in many) against the loop: the latest return of a call inside the op that had
    returned by the op's end."""
    from chakra_trace.convert import sync

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 40)), int(rng.integers(0, 40))
    if seed % 2:  # overlapping ops: each call in many
        s = np.sort(rng.integers(0, 100, n))
        e = s + rng.integers(0, 400, n)
    else:
        cuts = np.sort(rng.choice(2000, 2 * n, replace=False)) if n else np.zeros(0, np.int64)
        s, e = cuts[0::2], cuts[1::2]
    t0 = np.sort(rng.integers(0, 600 if seed % 2 else 2000, m))
    t1 = t0 + rng.integers(0, 100, m)
    got = sync.waited_until(s.astype(np.int64), e.astype(np.int64), t0.astype(np.int64), t1.astype(np.int64))
    for k in range(n):
        done = [int(b) for a, b in zip(t0, t1) if s[k] <= a <= e[k] and b <= e[k]]
        assert got[k] == (max(done) if done else sync.NONE)


def test_first_at_least_as_a_scan():
    from chakra_trace.convert import sync

    rng = np.random.default_rng(3)
    for _ in range(200):
        m = int(rng.integers(1, 70))
        u = rng.integers(0, 50, m)
        i0 = rng.integers(0, m + 1, 30)
        x = rng.integers(0, 60, 30)
        want = [next((i for i in range(a, m) if u[i] >= b), m) for a, b in zip(i0.tolist(), x.tolist())]
        assert sync._first_at_least(u, i0.copy(), x).tolist() == want


# ------------------------------------------------------------------------------ unnamed collectives
def _resolve_per_group(traces, tolerance_ns: int = 50_000) -> list[str]:
    """`schema.groups.resolve_unnamed_groups` as it was (1c36f05): every declared group looked at
    for every collective matched."""
    from chakra_trace.schema.enums import Attr
    from chakra_trace.schema.groups import ALL_RANKS_GROUPS, _declared_by_rank, group_rows

    declared = {r: _declared_by_rank(t, r) for r, t in traces.items()}
    if not any(len(d) > 1 for d in declared.values()):
        return []
    world = sorted(traces)
    queues = {r: group_rows(t, "").tolist() for r, t in traces.items() if group_rows(t, "").size}
    if not queues:
        return []
    origin = {r: t.time_origin_ns or 0 for r, t in traces.items()}
    timed = all(traces[r].timed for r in queues)
    groups: dict[str, list[int]] = {}
    for d in declared.values():
        for name, ranks in d.items():
            groups.setdefault(name, world if ranks is None else ranks)
    head = {r: 0 for r in queues}
    resolved: dict[str, int] = {}

    def sig(r):
        if r not in queues or head[r] >= len(queues[r]):
            return None
        t, row = traces[r], queues[r][head[r]]
        return int(t.comm_type[row]), int(t.comm_size[row])

    def span(r):
        t, row = traces[r], queues[r][head[r]]
        s = int(t.start[row]) * 1000 + origin[r]
        return s, s + int(t.duration[row]) * 1000

    while True:
        found = []
        for name, members in groups.items():
            if not all(r in queues and name in declared[r] for r in members):
                continue
            sigs = {sig(r) for r in members}
            if len(sigs) != 1 or None in sigs:
                continue
            met, end = True, 0
            if timed:
                spans = [span(r) for r in members]
                met = max(s for s, _ in spans) <= min(e for _, e in spans) + tolerance_ns
                end = max(e for _, e in spans)
            found.append((not met, end, name, members))
        if not found:
            break
        first = min(found, key=lambda c: c[:2])
        best = max((c for c in found if c[0] == first[0] and set(first[3]) <= set(c[3])), key=lambda c: len(c[3]))[1:]
        _, name, members = best
        for r in members:
            if name not in ALL_RANKS_GROUPS:
                traces[r].set_attr(Attr.PG_NAME, name, [queues[r][head[r]]])
            head[r] += 1
        if name not in ALL_RANKS_GROUPS:
            resolved[name] = resolved.get(name, 0) + 1
    notes = [
        f"collectives recorded without a process group matched across ranks to group {name!r} "
        f"({', '.join(map(str, groups[name]))}): {n}"
        for name, n in sorted(resolved.items())
    ]
    left = {r: len(q) - head[r] for r, q in queues.items() if head[r] < len(q)}
    if left:
        notes.append(
            "collectives recorded without a process group that no group's members agree on were left "
            f"unnamed (the all-ranks group): {', '.join(f'rank {r}: {n}' for r, n in sorted(left.items()))}"
        )
    return notes


def _gloo_job(seed: int, n: int = 30) -> dict:
    """Ranks of unnamed collectives (a few types and sizes; recorded times, or none) whose
    pg_config declares random subgroups: overlapping ones, one member set under several names,
    the all-ranks group, groups of ranks not read, a rank that declares a group its peer does not."""
    from chakra_trace.schema.builder import TraceBuilder

    rng = np.random.default_rng(seed)
    world = int(rng.integers(2, 6))
    groups = [{"pg_name": "0", "ranks": []}]
    for g in range(int(rng.integers(1, 12))):
        size = int(rng.integers(1, world + 1))
        ranks = sorted(rng.choice(world + (g % 5 == 4), size, replace=False).tolist())
        groups.append({"pg_name": f"pg{g}", "ranks": ranks})
    if rng.random() < 0.5:
        groups.append({"pg_name": "alias", "ranks": groups[-1]["ranks"]})
    timed = rng.random() < 0.7
    traces = {}
    for r in range(world):
        b = TraceBuilder()
        mine = [g for g in groups if not (r == 0 and g["pg_name"] == "pg1")]
        b.add("process_groups", "METADATA_NODE", pg_config=json.dumps(mine))
        t, prev = 0, []
        for _ in range(n):
            kind = (
                ["ALL_REDUCE", "ALL_GATHER", "BROADCAST"][int(rng.integers(3))] if rng.random() < 0.3 else "ALL_REDUCE"
            )
            size = [1024, 4096][int(rng.integers(2))] if rng.random() < 0.3 else 1024
            t += int(rng.integers(0, 200))
            start, dur = (t if timed else 0), int(rng.integers(1, 120))  # (all at 0: no recorded times)
            prev = [b.collective(kind, size, deps=prev, start=start, duration=dur)]
        traces[r] = b.build()
    return traces


@pytest.mark.parametrize("seed", range(60))
def test_unnamed_collectives_matched_as_the_loop_over_groups_matched_them(seed):
    """`resolve_unnamed_groups` against the loop over every group it replaced, on random jobs:
    the same names on the same collectives, the same notes."""
    from chakra_trace.schema.groups import resolve_unnamed_groups

    a, b = _gloo_job(seed), _gloo_job(seed)
    want, got = _resolve_per_group(a), resolve_unnamed_groups(b)
    assert got == want
    for r in a:
        assert a[r].groups == b[r].groups
        assert a[r].pg_name.tolist() == b[r].pg_name.tolist() and a[r].present.tolist() == b[r].present.tolist()


class _Reads(np.ndarray):
    """A trace column that counts the times it is indexed."""

    n = 0

    def __getitem__(self, key):
        _Reads.n += 1
        return np.ndarray.__getitem__(self.view(np.ndarray), key)


def _two_ranks(collectives: int, groups: int) -> dict:
    """Two ranks of unnamed all-reduces whose pg_config declares `groups` groups of both ranks
    (and the all-ranks group): the reviewer's hostile pg_config."""
    from chakra_trace.schema.builder import TraceBuilder

    pg = [{"pg_name": f"g{i}", "ranks": [0, 1]} for i in range(groups)] + [{"pg_name": "0", "ranks": [0, 1]}]
    traces = {}
    for r in range(2):
        b = TraceBuilder()
        b.add("process_groups", "METADATA_NODE", pg_config=json.dumps(pg))
        prev: list[int] = []
        for i in range(collectives):
            prev = [b.collective("ALL_REDUCE", 1024, deps=prev, start=100 * i, duration=50)]
        t = b.build()
        t.comm_type = t.comm_type.view(_Reads)
        traces[r] = t
    return traces


def test_many_declared_groups_cost_no_pass_per_group():
    """Reproducer (a pg_config of 5,000 groups of the two ranks read, 3,000 gloo all-reduces each:
    `chakra convert kineto` 53 s): every collective matched read the next collective of every
    rank of every group. Now the reads are the same for 40 groups as for 160, and the
    collectives are named after the first group declared."""
    from chakra_trace.schema.groups import resolve_unnamed_groups

    def reads(groups: int) -> int:
        traces = _two_ranks(60, groups)
        _Reads.n = 0
        resolve_unnamed_groups(traces)
        t = traces[0]
        assert {t.groups[c] for c in t.pg_name[t.has("pg_name")].tolist()} == {"g0"}
        return _Reads.n

    assert reads(160) == reads(40)


def test_a_pg_config_of_too_many_member_sets_is_refused_with_the_files():
    """Member sets are what the work grows with; past the budget of checks an error names the
    files and the figures (one line), never minutes of work."""
    from chakra_trace.schema.groups import resolve_unnamed_groups

    traces = _gloo_job(1, n=40)
    with pytest.raises(
        ChakraError, match=r"^r0\.json, r1\.json(, r2\.json)?: collectives recorded without .* than 50 checks$"
    ):
        resolve_unnamed_groups(traces, paths={r: f"r{r}.json" for r in traces}, budget=50)


# ------------------------------------------------------------------------------ thread and iteration pairing
def _sequences(h_threads: int, k_threads: int, iters: int, names: int, per: int = 2):
    """Host and Kineto sequences (`convert.sequences.Sequences`) of `iters` iterations on each
    of their threads (Kineto's tids all differ from the host's), `per` ops each of a name
    shared by every thread, and `names` distinct names before the first iteration."""
    from chakra_trace.convert.sequences import Sequences

    def side(threads: int, tid0: int):
        th, code, seg = [], [], []
        for t in range(threads):
            th += [tid0 + t] * (per * iters)
            code += [(i * per + j) % 7 for i in range(iters) for j in range(per)]
            seg += [i for i in range(iters) for _ in range(per)]
        th += [tid0] * names
        code += list(range(7, 7 + names))
        seg += [-1] * names
        return np.array(th, np.int64), np.array(code, np.int64), np.array(seg, np.int64)

    hth, hc, hseg = side(h_threads, 10)
    kth, kc, kseg = side(k_threads, 1000)
    nh, nk = hth.size, kth.size
    a, b = np.arange(nh), np.arange(nk)
    seq = Sequences(a, b, hc, kc, hth, kth, hseg, kseg, a, b, 7 + names, False, "ProfilerStep")
    return seq, np.full(nh, -1, np.int64), np.ones(nk, bool), np.ones(nh, bool)


def test_pairing_threads_makes_no_pass_per_thread_pair():
    """Reproducer: `_pair_threads` masked every host op per host thread and every Kineto op per
    (host thread, Kineto thread) pair: threads x threads x ops. The passes over the whole
    thread columns are the same for 20 threads a side as for 80."""
    from chakra_trace.convert.sequences import align_traces
    from test_attack_output import _Counted

    def passes(threads: int) -> int:
        seq, pos, free_k, real = _sequences(threads, threads, 2, 0)
        seq.hth, seq.kth = seq.hth.view(_Counted), seq.kth.view(_Counted)
        _Counted.n, _Counted.ops = min(seq.hth.size, seq.kth.size), 0
        _, _, info = align_traces(seq, pos, free_k, real)
        assert len(info["threads"]) == threads
        return _Counted.ops

    few, many = passes(20), passes(80)
    assert many <= few + 2, (few, many)


def test_pairing_iterations_holds_no_count_per_iteration_and_name():
    """Reproducer: each iteration compared kept a dense count over every name of both traces
    (iterations x names: 400 iterations and 20,000 names held 128 MB), and each shift built
    its list of pairs (shifts x iterations). Now the memory stays that of the input."""
    import tracemalloc

    from chakra_trace.convert.sequences import align_traces

    seq, pos, free_k, real = _sequences(1, 1, 400, 20_000)
    tracemalloc.start()
    try:
        _, _, info = align_traces(seq, pos, free_k, real)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info["iterations"][:3] == [[0, 0], [1, 1], [2, 2]] and len(info["iterations"]) == 401
    assert peak < 24 << 20, peak


def _pair_threads_per_pair(hth, hc, kth, kc, size):
    """`_pair_threads` as it was: a bincount per (host thread, Kineto thread)."""
    hs, ks = np.unique(hth).tolist(), np.unique(kth).tolist()
    if hs and set(hs) == set(ks):
        return [(t, t) for t in hs]
    scores = []
    for a in hs:
        ca = hc[hth == a]
        for b in ks:
            cb = kc[kth == b]
            s = (
                int(np.minimum(np.bincount(ca, minlength=size), np.bincount(cb, minlength=size)).sum())
                if ca.size and cb.size
                else 0
            )
            if s:
                scores.append((s, a, b))
    used_h, used_k, pairs = set(), set(), []
    for _, a, b in sorted(scores, key=lambda x: (-x[0], x[1], x[2])):
        if a not in used_h and b not in used_k:
            used_h.add(a)
            used_k.add(b)
            pairs.append((a, b))
    return pairs


@pytest.mark.parametrize("seed", range(50))
def test_threads_paired_as_the_loop_over_pairs_paired_them(seed):
    from chakra_trace.convert.sequences import _pair_threads

    rng = np.random.default_rng(seed)
    nh, nk, size = int(rng.integers(0, 60)), int(rng.integers(0, 60)), int(rng.integers(1, 9))
    hth, kth = rng.integers(0, 6, nh), rng.integers(2 if seed % 3 else 0, 8, nk)
    hc, kc = rng.integers(0, size, nh), rng.integers(0, size, nk)
    assert _pair_threads(hth, hc, kth, kc) == _pair_threads_per_pair(hth, hc, kth, kc, size)


def test_thread_pairing_past_its_limit_names_the_traces():
    from chakra_trace.convert import sequences

    seq, pos, free_k, real = _sequences(2100, 2100, 1, 0, per=1)
    seq.source = "h.json and k.json"
    with pytest.raises(ChakraError, match=r"^h\.json and k\.json: 2,100 host threads and 2,100 Kineto threads share"):
        sequences.align_traces(seq, pos, free_k, real)


# ------------------------------------------------------------------------------ detached ops
@pytest.mark.parametrize("seed", range(40))
def test_detached_ops_stay_inside_the_op_a_mask_per_op_found(seed):
    """`GraphBuilder._enclosing` (the op a c10d op standing for late work stays inside) against
    the mask over every row per op it replaced, on random threads of overlapping ops."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    b = object.__new__(GraphBuilder)
    b.tid = rng.integers(0, 4, n).astype(np.int64)
    b.start = rng.integers(0, 50, n).astype(np.int64)
    b.end = b.start + rng.integers(-1, 60, n)
    rows = np.flatnonzero(rng.random(n) < 0.8)
    cs = rng.choice(n, int(rng.integers(1, min(n, 12) + 1)), replace=False)
    b.detached = {int(c): (int(rng.integers(0, 5)), int(b.start[c] + rng.integers(0, 40))) for c in cs}
    got = b._enclosing(rows, np.array(list(b.detached), np.int64))
    for c, g in zip(b.detached, got.tolist()):
        th, e = b.detached[c]
        up = rows[(b.tid[rows] == th) & (b.start[rows] <= b.start[c]) & (b.end[rows] >= e)]
        assert g == (int(up[np.lexsort((-b.end[up], b.start[up]))[-1]]) if up.size else -1)


def test_last_at_least_as_a_scan():
    from chakra_trace.convert.sync import _last_at_least

    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(0, 70))
        v = rng.integers(0, 50, n)
        lo = rng.integers(0, n + 1, 20)
        hi = np.minimum(n, lo + rng.integers(0, n + 1, 20))
        x = rng.integers(0, 60, 20)
        want = [max((i for i in range(a, c) if v[i] >= y), default=-1) for a, c, y in zip(lo, hi, x)]
        assert _last_at_least(v, lo, hi, x).tolist() == want


# ------------------------------------------------------------------------------ generate fit
def _stepped(k: int, ranks: int = 2):
    """A job of `k` recorded steps (STEP_BOUNDS of k + 1 values), an op per step."""
    from chakra_trace.io.workload import Workload
    from chakra_trace.schema.builder import TraceBuilder
    from chakra_trace.schema.enums import STEP_BOUNDS

    traces = {}
    for r in range(ranks):
        b = TraceBuilder(metadata={"schema": "test"})
        b.add("meta", "METADATA_NODE")
        prev: list[int] = []
        for i in range(k):
            prev = [b.comp("mm" if i % 2 else "add", 5, deps=prev, start=10 * i, num_ops=1000, tensor_size=64)]
        t = b.build()
        t.metadata.attr.add(name=STEP_BOUNDS).int64_list.values.extend([10 * i for i in range(k + 1)])
        traces[r] = t
    return Workload(traces, {})


def test_each_step_carries_its_own_window_only():
    """Reproducer (`generate fit`: each of k step traces copied the metadata with all k + 1
    bounds: memory k^2, 1.6 GB at 12,000 steps): the bounds the step traces hold together
    grow as k, each holds its own window, and the rest of the metadata is kept."""
    from chakra_trace.synthesize.generate.steps import split_steps

    def held(k: int) -> int:
        steps = split_steps(_stepped(k))
        assert len(steps) == k
        for i, w in enumerate(steps):
            t = w.traces[0]
            assert t.step_bounds_us.tolist() == [10 * i, 10 * (i + 1)]
            assert any(a.name == "schema" for a in t.metadata.attr)
        return sum(t.step_bounds_us.size for w in steps for t in w.traces.values())

    assert held(400) == 4 * held(100)


def test_fitted_models_are_the_same_with_steps_cut(tmp_path):
    """The model fitted on a job's steps is the one fitted when each step carried every bound
    (the generator reads no bound of a step's trace)."""
    from chakra_trace.synthesize.generate import fit
    from chakra_trace.synthesize.generate.model import model_to_dict
    from chakra_trace.synthesize.generate.steps import split_steps

    def corpus(w, full: bool):
        parts = split_steps(w)
        if full:  # as before: every step with all the bounds
            for p in parts:
                for t in p.traces.values():
                    for a in t.metadata.attr:
                        if a.name == "step_bounds_us":
                            del a.int64_list.values[:]
                            a.int64_list.values.extend(w.traces[0].step_bounds_us.tolist())
        return {f"job/step{i}": p for i, p in enumerate(parts)}

    w = _stepped(12)
    a, b = model_to_dict(fit(corpus(w, False))), model_to_dict(fit(corpus(w, True)))
    for m in (a, b):
        m["fit"].pop("wall_s", None)
    assert a == b
