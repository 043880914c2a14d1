"""Invariants over every workload we have, recorded and simulated, CPU-only and GPU:

- a breakdown's parts add up to the span (compute + comm - overlap + other + idle = span);
- the `recorded` system reproduces the recorded step within 1%;
- the `ideal` network, or a near-ideal one, is never slower than the recording;
- a faster network is never slower.
"""

from __future__ import annotations

import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.breakdown import COLUMNS, Breakdown, breakdown
from chakra_trace.analyze.critical_path import job_critical_path
from chakra_trace.convert.pytorch import convert_collection, convert_pytorch
from chakra_trace.convert.text import text_to_chakra
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import NodeType
from chakra_trace.schema.groups import group_rows
from chakra_trace.simulate import simulate
from chakra_trace.simulate.config import Network
from chakra_trace.simulate.presets import SystemPreset, preset_system, simulate_on
from chakra_trace.validate import validate_workload
from conftest import sample

DATA = Path(__file__).parent / "data"
K = DATA / "kineto"

#: name -> (how to build it, whether it has recorded times)
SOURCES = {
    "ddp-gloo-2rank": lambda: Workload(
        {r: _convert(f"ddp_rank{r}.et.json.gz", f"ddp_rank{r}.kineto.json.gz", r) for r in (0, 1)}
    ),
    "mlp-cpu": lambda: Workload({0: _convert("mlp_rank0.et.json.gz", "mlp_rank0.kineto.json.gz")}),
    "transformer-cpu": lambda: Workload(
        {0: _convert("transformer_rank0.et.json.gz", "transformer_rank0.kineto.json.gz")}
    ),
    "linear-gpu": lambda: Workload({0: _convert("linear_et.json.gz", "linear_kineto_head.json.gz")}),
    # (not one job: param's resnet Kineto trace is of another run; converted anyway, for its GPU timing)
    "resnet-gpu": lambda: Workload({0: _convert("resnet_et.json.gz", "resnet_kineto_head.json.gz", force=True)}),
    "resnet50-ddp-chakra": lambda: Workload.open(sample("resnet50_ddp.0.et.gz")),
    "mlp-hybrid-text": lambda: text_to_chakra(DATA / "text" / "mlp_data_model.txt", 64, 1, model_parallel_size=2),
    "dlrm-text": lambda: text_to_chakra(DATA / "text" / "dlrm_hybrid.txt", 64, 1),
    # 2 pipeline stages x 2 data-parallel replicas (tests/workloads/pipeline.py): send/recv, and
    # all-reduces in subgroups that gloo records without their process group
    "pipeline-dp-4rank": lambda: Workload.open(DATA / "pipeline"),
}
TIMED = ["ddp-gloo-2rank", "mlp-cpu", "transformer-cpu", "linear-gpu", "resnet-gpu", "pipeline-dp-4rank"]
#: jobs with communicator subgroups run on networks of their own size (they do not scale out)
FIXED_SIZE = {"pipeline-dp-4rank"}
SYSTEMS = ["recorded", "ideal", "ring-8", "torus-8x8", "dgx-8x8"]


def _convert(host: str, kineto: str, rank: int = 0, force: bool = False):
    return convert_pytorch(
        sample(host), sample(f"kineto/{kineto}"), rank=rank, **({"min_similarity": None} if force else {})
    )[0]


@cache
def workload(name: str) -> Workload:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SOURCES[name]()


@cache
def on(name: str, system: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_on(workload(name), system)


def recorded_step_ns(name: str) -> int:
    return job_critical_path(workload(name)).step_ns


def assert_adds_up(rows: list[dict]) -> None:
    for row in rows:
        parts = [row[k] for k in COLUMNS]
        assert min(parts) >= 0, row
        total = row["compute_us"] + row["comm_us"] - row["overlap_us"] + row["other_us"] + row["idle_us"]
        assert total == pytest.approx(row["span_us"], abs=1e-6), row
        assert row["exposed_comm_us"] == pytest.approx(row["comm_us"] - row["overlap_us"], abs=1e-6)


@pytest.mark.parametrize("name", TIMED)
def test_recorded_breakdown_adds_up(name):
    rows = breakdown(workload(name)).rows
    assert_adds_up(rows)
    assert all(r["compute_us"] > 0 for r in rows)


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_simulated_breakdown_adds_up(name, system):
    if system in ("recorded", "ideal") and name not in TIMED:
        pytest.skip("no recorded times")
    if name.endswith("-text") and system == "ring-8":
        pytest.skip("a 64-NPU hybrid-parallel job does not fit 8 NPUs")
    if name in FIXED_SIZE and system not in ("recorded", "ideal"):
        pytest.skip("subgroups do not scale out (test_a_faster_network_is_never_slower runs it at its size)")
    res = on(name, system)
    rows = Breakdown.from_simulation(res).rows
    assert_adds_up(rows)
    t = res.traces[0]
    if (t.types == NodeType.COMP_NODE).any() and t.duration.any():
        assert all(r["compute_us"] > 0 for r in rows), "compute lost in the simulated breakdown"


def test_simulated_cpu_job_keeps_its_cpu_compute():
    """The bug this guards: a CPU-only job simulated on another system showed compute 0."""
    rec = breakdown(workload("ddp-gloo-2rank")).rows
    for system in ("recorded", "torus-8x8"):
        sim = Breakdown.from_simulation(on("ddp-gloo-2rank", system)).rows
        for r in sim:
            assert r["compute_us"] == pytest.approx(rec[r["rank"] % 2]["compute_us"], rel=0.05)


@pytest.mark.parametrize("name", TIMED)
def test_recorded_system_reproduces_the_recorded_step(name):
    step = recorded_step_ns(name)
    sim = on(name, "recorded").step_ns
    assert abs(sim / step - 1) <= 0.01, (sim, step)


@pytest.mark.parametrize("name", TIMED)
def test_ideal_network_is_never_slower_than_the_recording(name):
    step = recorded_step_ns(name)
    ideal = on(name, "ideal").step_ns
    assert ideal <= step + 1000  # recorded times are whole µs
    assert ideal <= on(name, "recorded").step_ns


@pytest.mark.parametrize("name", TIMED)
def test_near_ideal_network_is_never_slower_than_the_recording(name):
    """The report that started this: a 2-NPU ring at 100,000 GB/s and 1 ns took +9.6%."""
    w = workload(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(w, Network.simple("Ring", len(w), 100_000, 1), preset_system(["ring"]))
    assert res.step_ns <= recorded_step_ns(name) + 1000


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_faster_network_is_never_slower(name):
    w = workload(name)
    n = len(w) if name in FIXED_SIZE else max(len(w), 8)
    steps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for bw, lat in ((5, 5000), (50, 500), (500, 50), (100_000, 1)):
            steps.append(simulate_on(w, _preset(n, bw, lat)).step_ns)
    assert steps == sorted(steps, reverse=True), steps


def _preset(n: int, bw: float, lat: float):
    return SystemPreset(f"ring-{n}", "", Network.simple("Ring", n, bw, lat), preset_system(["ring"]))


def test_async_gloo_collective_runs_beside_the_training_thread():
    """gloo runs a collective on its own worker thread while c10d::allreduce_ returns at once:
    the collective node is the worker's, and the training thread is not blocked by it."""
    w = workload("ddp-gloo-2rank")
    for t in w.traces.values():
        coll = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
        names = {t.names[t.name_codes[i]] for i in coll}
        tids, has = t.attr_array("tid", np.int64)
        vals, counts = np.unique(tids[has], return_counts=True)
        main = vals[np.argmax(counts)]
        async_ = [i for i in coll if t.names[t.name_codes[i]].startswith("gloo:")]
        assert async_ and names & {"gloo:all_reduce"}
        assert all(tids[i] != main for i in async_)
        issuers = np.flatnonzero(t.name_array == "c10d::allreduce_")
        assert all(t.types[i] == NodeType.COMP_NODE for i in issuers)


def _out_of_order_pair(seq: bool) -> Workload:
    """Rank 0's worker threads started its two all-reduces in the other order than it issued
    them (the 8-byte one first); rank 1 ran them in issue order."""
    traces = {}
    for r in (0, 1):
        b = TraceBuilder()
        sizes = (8, 1 << 20) if r == 0 else (1 << 20, 8)
        issue = (1, 0) if r == 0 else (0, 1)
        for row, (size, k) in enumerate(zip(sizes, issue)):
            extra = {"comm_seq": k} if seq else {}
            b.collective("ALL_REDUCE", size, duration=10, tid=100 + row, **extra)  # one worker thread each
        traces[r] = b.build()
    return Workload(traces)


def test_collectives_meet_in_issue_order_when_workers_reorder_them():
    with_seq, without = _out_of_order_pair(True), _out_of_order_pair(False)
    assert [with_seq[0].comm_size[i] for i in group_rows(with_seq[0], "")] == [1 << 20, 8]
    assert validate_workload(with_seq).ok
    assert not validate_workload(without).ok  # trace order pairs 8 B with 1 MiB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(with_seq, Network.simple("Ring", 2, 50, 500), preset_system(["ring"]))
    assert sorted(c.bytes for c in res.collectives) == [8, 1 << 20]
    for r, t in with_seq.traces.items():  # each rank's 1 MiB all-reduce met the other's 1 MiB one
        end = res.nodes[r][1]
        big, small = (int(np.flatnonzero(t.comm_size == size)[0]) for size in (1 << 20, 8))
        assert end[big] - end[small] > 10_000  # 1 MiB at 50 GB/s takes > 10 µs, 8 B does not


def test_subgroup_collectives_recorded_without_a_group_meet_their_group(tmp_path):
    """gloo records no process group on CPU collectives: read as the all-ranks group, stage 0's
    gradient all-reduce met stage 1's (validation failed, the recorded step was off by 7%)."""
    w = workload("pipeline-dp-4rank")
    assert validate_workload(w).ok
    for r, t in w.traces.items():
        rows = group_rows(t, "1" if r < 2 else "2")
        assert rows.size == 8 and not group_rows(t, "").size
    # the converter writing files matches them the same way
    reports = convert_collection(DATA / "pipeline", tmp_path / "job", jobs=1)
    assert any("group '1'" in n for n in reports[0].notes)
    written = Workload.open(tmp_path / "job")
    for r in w.ranks:
        assert written.traces[r].equals(w.traces[r])


def test_gloo_send_recv_is_one_node_per_message_beside_its_c10d_call():
    """gloo records send/recv on the calling thread, from the post to the completion: that op is
    the send/recv node (one per message), its c10d call a CPU node it runs beside."""
    t = workload("pipeline-dp-4rank").traces[0]
    names = np.asarray(t.names, dtype=object)[t.name_codes]
    sends = np.flatnonzero(t.types == NodeType.COMM_SEND_NODE)
    recvs = np.flatnonzero(t.types == NodeType.COMM_RECV_NODE)
    assert set(names[sends]) == {"gloo:send"} and set(names[recvs]) == {"gloo:recv"}
    assert sends.size == recvs.size == 4  # 2 micro-batches x (activation out, gradient in)
    c10d = np.flatnonzero(names == "c10d::recv_")
    assert (t.types[c10d] == NodeType.COMP_NODE).all()
    g = t.graph()
    for r in recvs.tolist():  # the receive does not wait for its c10d call to return
        preds = g.preds[1][g.preds[0][r] : g.preds[0][r + 1]]
        assert not np.isin(preds, c10d).any()
