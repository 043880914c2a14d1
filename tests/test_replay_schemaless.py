"""Multi-rank launcher and schema-less replay: real gloo jobs on 127.0.0.1 (one intra-op thread per rank).

Timing checks compare medians of many steps with the trace's own times; communication on this kind of
machine (a small VM: gloo collectives take 0.3-4 ms) is measured by the replay itself (`comm_wait_us`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from chakra_trace.analyze.breakdown import breakdown
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.replay.launch import run_ranks
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import NodeType

torch = pytest.importorskip("torch", reason="replay needs PyTorch (pip install -e '.[collect]')")
pytestmark = pytest.mark.torch

from chakra_trace.replay.kernels import calibrate  # noqa: E402
from chakra_trace.replay.process_groups import resolve_groups  # noqa: E402
from chakra_trace.replay.schemaless import (  # noqa: E402
    SchemaLessReplay,
    recorded_time_us,
    replay_workload,
    topological_order,
)

ME = "test_replay_schemaless"


# -- rank targets (imported by the worker processes) ----------------------------------------------------
def _sum_ranks(rank, world_size, scale=1):
    import torch.distributed as dist

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return {
        "rank": rank,
        "world": world_size,
        "sum": t.item() * scale,
        "omp": os.environ["OMP_NUM_THREADS"],
        "master": os.environ["MASTER_ADDR"],
    }


def _fail_on_one(rank, world_size):
    if rank == 1:
        raise ValueError("rank one cannot go on")
    time.sleep(60)


def _hang(rank, world_size, pid_dir):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a grandchild too
    with open(os.path.join(pid_dir, f"{rank}.json"), "w") as f:
        json.dump([os.getpid(), child.pid], f)
    time.sleep(120)


class _OtherLoad:
    """Cores' worth of CPU that processes other than this test and its children used during a block.

    Replay timing needs a free core per rank thread; when something else on the machine takes them, the
    timing checks are skipped (said so) rather than failed: /proc/stat's busy time minus our own.
    """

    load = 0.0

    @staticmethod
    def _busy() -> float:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _ours() -> float:
        import resource

        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    def __enter__(self):
        self.ok = os.path.exists("/proc/stat")
        if self.ok:
            self.t0, self.b0, self.o0 = time.monotonic(), self._busy(), self._ours()
        return self

    def __exit__(self, *exc):
        if self.ok:
            wall = time.monotonic() - self.t0
            self.load = max(0.0, (self._busy() - self.b0) - (self._ours() - self.o0)) / wall

    def check_timing(self) -> None:
        if self.load > 0.3:
            pytest.skip(f"timing not checked: other processes used {self.load:.1f} cores during the replay")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is dead too (it waits for its reaper)
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


# -- launcher ------------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_run_ranks_returns_each_ranks_result():
    out = run_ranks(f"{ME}:_sum_ranks", 2, kwargs={"scale": 2})
    assert [r["rank"] for r in out] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 6.0 and r["omp"] == "1" and r["master"] == "127.0.0.1" for r in out)
    # a group of one still runs collectives; the launching process never imports torch
    code = (
        "import sys; from chakra_trace.replay.launch import run_ranks; import chakra_trace.replay.schemaless; "
        f"r = run_ranks('{ME}:_sum_ranks', 1); assert 'torch' not in sys.modules; print(r[0]['sum'])"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0 and done.stdout.strip() == "1.0", done.stderr


@pytest.mark.timeout(60)
def test_run_ranks_raises_the_failing_ranks_traceback():
    t0 = time.monotonic()
    with pytest.raises(ChakraError) as e:
        run_ranks(f"{ME}:_fail_on_one", 2, timeout_s=50)
    msg = str(e.value)
    assert msg == "rank 1 failed: ValueError: rank one cannot go on"  # one line; the traceback is its cause
    assert "Traceback" in e.value.detail and "_fail_on_one" in e.value.detail
    assert "_fail_on_one" in str(e.value.__cause__)
    assert time.monotonic() - t0 < 30  # rank 0 (asleep) was killed, not waited for
    with pytest.raises(ChakraError, match="package.module:function"):
        run_ranks("no_colon", 1)
    with pytest.raises(
        ChakraError, match="^rank 0 failed: ModuleNotFoundError: No module named 'no_such_module_here'$"
    ):
        run_ranks("no_such_module_here:f", 1)


@pytest.mark.timeout(60)
def test_run_ranks_timeout_kills_every_rank_and_their_children(tmp_path):
    # 10 s: on a loaded 2-core machine, starting two Python ranks (imports included) took over 4 s
    with pytest.raises(ChakraError, match=r"timed out after 10 s; ranks still running: \[0, 1\]"):
        run_ranks(f"{ME}:_hang", 2, args=(str(tmp_path),), timeout_s=10)
    pids = [p for r in (0, 1) for p in json.loads((tmp_path / f"{r}.json").read_text())]
    assert len(pids) == 4
    deadline = time.monotonic() + 5  # the grandchildren are reaped by init
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if not _gone(p)] == []


@pytest.mark.timeout(60)
def test_ranks_end_when_the_launcher_is_killed(tmp_path):
    code = (
        f"from chakra_trace.replay.launch import run_ranks; run_ranks('{ME}:_hang', 1, "
        f"args=({str(tmp_path)!r},), timeout_s=100)"
    )
    # TMPDIR: the killed launcher cannot remove its temporary folder; let it be in tmp_path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path), TMPDIR=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 40
        while not (tmp_path / "0.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        pids = json.loads((tmp_path / "0.json").read_text())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if not _gone(p)] == []


# -- kernels and order -----------------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.timing
def test_calibrated_kernel_takes_the_nodes_time():
    torch.set_num_threads(1)
    cal = calibrate("cpu")
    assert cal.unit_us > 0 and cal.flops_per_s > 1e8 and cal.unit_flops == 2 * 64**3
    b = TraceBuilder()
    b.comp("two_ms", 2000)
    b.comp("flops", 1000, num_ops=int(cal.flops_per_s * 2e-3), deps=[0])  # 2 ms of FLOPs, 1 ms recorded
    t = b.build()
    for mode, want in (("duration", 3e-3), ("flops", 4e-3)):
        rp = SchemaLessReplay(t, mode=mode)
        times = []
        for _ in range(25):
            t0 = time.perf_counter()
            rp.run_step()
            times.append(time.perf_counter() - t0)
        assert abs(np.median(times) - want) <= 0.1 * want, (mode, np.median(times))
    one = TraceBuilder()
    one.comp("x", 2000)
    rp = SchemaLessReplay(one.build())
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        rp.run_step()
        times.append(time.perf_counter() - t0)
    assert abs(np.median(times) - 2e-3) <= 2e-4, np.median(times)
    assert rp.coverage()["replayed"] == 1


def test_topological_order_follows_dependencies_not_ids():
    b = TraceBuilder()
    b.add("late", id=5)
    b.add("first", id=9)
    b.add("needs_9", id=1, data_deps=[9])
    b.add("needs_1", id=0, ctrl_deps=[1])
    t = b.build()
    order, _, _ = topological_order(t)
    assert [int(t.ids[r]) for r in order] == [5, 9, 1, 0]
    b2 = TraceBuilder()
    b2.add("a", id=0, data_deps=[1])
    b2.add("b", id=1, data_deps=[0])
    with pytest.raises(ChakraError, match="dependency cycle"):
        topological_order(b2.build())


def test_group_membership_sources_in_order():
    used = {0: ["", "a", "b"], 1: ["", "b", "c"]}
    declared = {0: {"c": [0, 1]}, 1: {}}
    got = resolve_groups(used, declared, 2, {"a": [1, 0]})
    assert got == {"": [0, 1], "a": [1, 0], "b": [0, 1], "c": [0, 1]}
    assert resolve_groups({0: ["x"], 1: []}, {}, 2) == {"x": [0]}


def test_replay_without_process_group_reports_comm():
    b = TraceBuilder()
    c = b.comp("c", 10)
    b.collective("ALL_REDUCE", 64, deps=[c])
    b.add("meta", NodeType.METADATA_NODE)
    rp = SchemaLessReplay(b.build())
    rp.run_step()
    cov = rp.coverage()
    assert cov["total"] == 2 and cov["replayed"] == 1 and cov["metadata_nodes"] == 1
    assert cov["by_name"]["all_reduce"]["not_replayed"] == {"not replayed: no torch.distributed process group": 1}


# -- whole workloads -------------------------------------------------------------------------------------
def _overlap_trace(rank: int):
    b = TraceBuilder()
    c1 = b.comp("c1", 2000)
    c2 = b.comp("c2", 2000, deps=[c1])
    ar = b.collective("ALL_REDUCE", 1 << 20, deps=[c2])  # overlaps c3
    c3 = b.comp("c3", 2000, deps=[c2])
    p2p = b.send(1, 4096, tag=3, deps=[c3]) if rank == 0 else b.recv(0, 4096, tag=3, deps=[c3])
    b.comp("end", 0, deps=[ar, p2p])
    return b.build()


@pytest.mark.timeout(60)
def test_two_rank_workload_replays_and_saves(tmp_path):
    wl = Workload({r: _overlap_trace(r) for r in (0, 1)})
    wl.save(tmp_path / "job")
    res = replay_workload(tmp_path / "job", budget_s=1.0, warmup=1, min_repeats=3)
    assert res.world_size == 2 and res.fully_replayed
    assert all(c["replayed"] == c["total"] == 6 for c in res.coverage.values())
    assert res.recorded_us == {0: 6000.0, 1: 6000.0} and res.recorded_basis == "compute_sum"
    assert res.step.n == min(m.n for m in res.per_rank.values())
    assert res.step.samples[0] == max(m.samples[0] for m in res.per_rank.values())
    out = tmp_path / "replay.json"
    res.save(out)
    d = json.loads(out.read_text())
    assert d["world_size"] == 2 and d["coverage"]["0"]["share"] == 1.0 and d["calibration"]["1"]["device"]["unit_us"]
    assert len(d["step"]["samples"]) == res.step.n and d["fully_replayed"] is True


@pytest.mark.timing
def test_two_rank_workload_overlaps_comm_with_compute(tmp_path):
    wl = Workload({r: _overlap_trace(r) for r in (0, 1)})
    wl.save(tmp_path / "job")
    with _OtherLoad() as others:
        res = replay_workload(tmp_path / "job", budget_s=2.0, target_rel_ci=0.01)
    # this machine's communication alone: the same job with every compute node at 0 µs
    for t in wl.traces.values():
        t.duration[:] = 0
    with _OtherLoad() as others_comm:
        comm = replay_workload(wl, budget_s=1.0).step.median
    others.check_timing()
    others_comm.check_timing()
    step = res.step.median
    # the compute chain sets the floor; the all-reduce hides under c3 (as far as the cores allow)
    assert 6e-3 * 0.98 <= step <= 1.15 * (6e-3 + comm), (step, comm)
    for m in res.per_rank.values():
        assert abs(m.extra["compute_us_median"] - 6000) <= 0.15 * 6000, m.extra


def _every_collective_trace(rank: int):
    b = TraceBuilder()
    prev = b.comp("start", 100)
    # communicators: one of each rank alone (inferred from use), one spanning both (the default group)
    prev = b.collective("ALL_REDUCE", 64, name="solo", pg_name=f"solo{rank}", deps=[prev])
    prev = b.collective("ALL_REDUCE", 64, name="pair", pg_name="pair", deps=[prev])
    for ct, size in (
        ("ALL_REDUCE", 4096),
        ("ALL_GATHER", 1000),
        ("REDUCE_SCATTER", 4096),
        ("ALL_TO_ALL", 4096),
        ("BROADCAST", 4096),
        ("REDUCE", 4096),
        ("GATHER", 64),
        ("SCATTER", 64),
        ("BARRIER", 0),
        ("REDUCE_SCATTER_BLOCK", 4096),
    ):
        prev = b.collective(ct, size, deps=[prev])
    # all_to_allv: splits in elements of 2 bytes; what a rank receives is what the others send it
    ins, outs = ([2, 4], [2, 6]) if rank == 0 else ([6, 2], [4, 2])
    prev = b.collective(
        "ALL_TO_ALL", 2 * sum(ins), name="all_to_allv", deps=[prev], in_split_size=str(ins), out_split_size=str(outs)
    )
    b.add("mystery", NodeType.COMM_COLL_NODE, data_deps=[prev], comm_type=99, comm_size=64)
    b.add("no_type", NodeType.COMM_COLL_NODE, data_deps=[prev], comm_size=64)
    b.send(7, 64, deps=[prev])  # no rank 7 in a 2-rank job
    b.comp("end", 100, deps=[prev])
    return b.build()


@pytest.mark.timeout(60)
def test_every_collective_type_and_unsupported_ones_reported(tmp_path):
    wl = Workload({r: _every_collective_trace(r) for r in (0, 1)})
    res = replay_workload(wl, budget_s=0.5, warmup=1, min_repeats=3)
    for r, c in res.coverage.items():
        assert c["total"] == 18 and c["replayed"] == 15, c
        assert c["reasons"] == {
            "not replayed: unknown collective type 99": 1,
            "not replayed: no comm_type": 1,
            f"not replayed: send peer rank 7 (this is rank {r} of 2)": 1,
        }
        assert c["by_name"]["mystery"] == {
            "replayed": 0,
            "not_replayed": {"not replayed: unknown collective type 99": 1},
        }
        for name in (
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "broadcast",
            "reduce",
            "gather",
            "scatter",
            "barrier",
            "reduce_scatter_block",
            "all_to_allv",
            "solo",
            "pair",
        ):
            assert c["by_name"][name] == {"replayed": 1, "not_replayed": {}}, name
    assert res.step.n >= 3 and not res.fully_replayed


@pytest.mark.timeout(60)
def test_converted_ddp_pair_replays_with_full_coverage(ddp_pair, tmp_path):
    ddp_pair.save(tmp_path / "ddp")
    res = replay_workload(tmp_path / "ddp", budget_s=1.0, warmup=1, min_repeats=3)
    assert res.fully_replayed and res.recorded_basis == "span of 2 steps"
    for r, c in res.coverage.items():
        t = ddp_pair[r]
        assert c["total"] == len(t) - 1 and c["replayed"] == c["total"] and c["metadata_nodes"] == 1
        assert c["by_name"]["c10d::allreduce_"]["replayed"] == 6  # queue the work gloo's threads run:
        assert c["by_name"]["gloo:all_reduce"]["replayed"] == 6  # the collectives
    span = recorded_time_us(ddp_pair[0])[0]
    assert 16_000 < span < 18_000  # [host] gaps + ops, rank 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert res.to_pandas()["replayed"].tolist() == [c["replayed"] for _, c in sorted(res.coverage.items())]


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_converted_ddp_pair_replay_reproduces_the_recorded_compute(ddp_pair, tmp_path):
    ddp_pair.save(tmp_path / "ddp")
    with _OtherLoad() as others:
        res = replay_workload(tmp_path / "ddp", budget_s=3.0)
    comm = max(m.extra["comm_wait_us_median"] for m in res.per_rank.values())
    print(
        f"\nDDP replay: step {res.step.median * 1e3:.2f} ms, recorded span {res.recorded_step_us / 1e3:.2f} ms "
        f"(ratio {res.ratio:.2f}), exposed comm {comm / 1e3:.2f} ms, other load {others.load:.2f} cores"
    )
    others.check_timing()
    # time a rank was blocked on communication in the recording: its exposed communication (gloo's
    # all-reduces run on a worker thread, mostly beside the training thread: their own durations overlap)
    comm_recorded = {row["rank"]: row["exposed_comm_us"] for row in breakdown(ddp_pair).rows}
    for r, m in res.per_rank.items():
        # what the replay controls (time not blocked on communication) lies between the recorded time
        # not blocked on it and the whole recorded span: communication that ran beside the training
        # thread in the recording may overlap less in the replay, and gloo's worker thread takes CPU
        lo, hi = res.recorded_us[r] - comm_recorded[r], res.recorded_us[r]
        assert 0.75 * lo <= m.extra["compute_us_median"] <= 1.25 * hi, (r, m.extra, lo, hi)
    # the step is that plus this machine's communication (gloo here: 0.3-4 ms a collective, 0.05-0.8 recorded)
    want = max(res.recorded_us[r] - comm_recorded[r] for r in res.per_rank) + comm
    assert abs(res.step.median * 1e6 - want) <= 0.25 * want, (res.step.median, want)


@pytest.mark.timeout(60)
def test_single_file_replays_as_one_rank(tmp_path):
    from chakra_trace.io.et import write_trace

    b = TraceBuilder()
    c = b.comp("c", 500, start=10)
    ar = b.collective("ALL_REDUCE", 1 << 16, deps=[c], start=510, duration=100)
    b.comp("d", 500, deps=[ar], start=610)
    write_trace(b.build(), tmp_path / "one.et")
    res = replay_workload(tmp_path / "one.et", budget_s=0.5, mode="flops")
    assert res.world_size == 1 and res.fully_replayed and res.coverage[0]["replayed"] == 3
    assert res.recorded_basis == "span" and res.recorded_us == {0: 1100.0}
    assert res.step.median >= 1e-3 and res.per_rank[0].extra["mode"] == "flops"
    with pytest.raises(ChakraError, match="world_size=3 but the workload has 1 ranks"):
        replay_workload(Workload({0: b.build()}), world_size=3)
    with pytest.raises(ChakraError, match="mode 'fast'"):
        replay_workload(tmp_path / "one.et", mode="fast")
    with pytest.raises(ChakraError, match="no files named"):
        replay_workload(tmp_path / "nothing")
