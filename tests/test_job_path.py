"""The job's critical path through collectives, top ops, data-parallel scale-out, presets."""

from __future__ import annotations

import json
import warnings

import pytest

from chakra_trace.analyze import Analysis
from chakra_trace.analyze.critical_path import job_critical_path
from chakra_trace.analyze.top_ops import top_ops
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.simulate import simulate
from chakra_trace.simulate.config import Network, SystemConfig
from chakra_trace.simulate.presets import PRESETS, preset
from chakra_trace.synthesize.scale import data_parallel
from chakra_trace.timeline.clock import rank_offsets_ns


def _system() -> SystemConfig:
    return preset("ring-8").system


def _straggler() -> Workload:
    """Rank 1 computes 300 µs before the all-reduce, rank 0 only 100 µs and then waits in it;
    after it rank 0 runs 50 µs, rank 1 20 µs (recorded times, one clock)."""
    traces = {}
    for rank, (before, after) in {0: (100, 50), 1: (300, 20)}.items():
        b = TraceBuilder()
        a = b.comp("fwd", before, start=0)
        c = b.collective("ALL_REDUCE", 1 << 20, deps=[a], start=before, duration=400 - before)
        b.comp("opt", after, deps=[c], start=400)
        traces[rank] = b.build()
    return Workload(traces)


def test_recorded_path_jumps_to_the_rank_that_arrived_last():
    j = job_critical_path(_straggler())
    assert j.source == "recorded" and j.last_rank == 0
    assert [(s["rank"], s["name"]) for s in j.segments] == [(1, "fwd"), (0, "all_reduce"), (0, "opt")]
    coll = j.segments[1]
    assert coll["gated_by_rank"] == 1 and coll["time_ns"] == 100_000  # from rank 1's arrival (300) to 400
    assert j.length_ns == j.step_ns == 450_000 and j.wait_ns == 0
    assert j.by_rank() == {1: 300_000, 0: 150_000}
    assert j.by_kind()["comm"] == 100_000
    assert json.loads(json.dumps(j.to_dict()))["segments"][0]["via"] == "start"


def test_simulated_path_matches_the_step_and_names_the_straggler():
    w = _straggler()
    res = simulate(w, Network.simple("Ring", 2, 50, 500), _system())
    j = job_critical_path(w, res)
    assert j.source == "simulated" and j.length_ns == res.step_ns and j.wait_ns == 0
    assert [s["rank"] for s in j.segments][:1] == [1]  # the slow rank's compute starts the path
    assert any(s.get("gated_by_rank") == 1 for s in j.segments)


def test_point_to_point_jumps_to_the_sender():
    b0, b1 = TraceBuilder(), TraceBuilder()
    s = b0.comp("produce", 500)
    b0.send(1, 1 << 16, deps=[s])
    r = b1.recv(0, 1 << 16)
    b1.comp("consume", 100, deps=[r])
    w = Workload({0: b0.build(), 1: b1.build()})
    res = simulate(w, Network.simple("Ring", 2, 50, 500), _system())
    j = job_critical_path(w, res)
    assert [(x["rank"], x["name"]) for x in j.segments] == [(0, "produce"), (1, "recv"), (1, "consume")]
    assert j.length_ns == res.step_ns and j.wait_ns == 0


def test_untimed_workload_needs_a_simulation(resnet_path):
    from chakra_trace import read_trace

    with pytest.raises(ChakraError, match="no recorded start times"):
        job_critical_path(Workload({0: read_trace(resnet_path)}))


def test_ddp_pair_recorded_and_simulated(ddp_pair):
    """Must-show: on the DDP pair the job critical path's length is the simulated step time;
    from the recorded times it spans the job on the recorded clock (ranks aligned by the
    converter's time origin: rank 1 started 1.6 µs after rank 0)."""
    offsets = rank_offsets_ns(ddp_pair)
    assert offsets[0] == 0 and 0 < offsets[1] < 10_000
    rec = job_critical_path(ddp_pair)
    assert rec.step_ns == 17_228_000 and rec.accounted_ns == rec.step_ns  # path + start skew + lead gap
    assert rec.step_ns - offsets[1] <= rec.length_ns <= rec.step_ns
    assert rec.wait_ns <= 0.02 * rec.length_ns  # µs rounding, and a thread waking after the collective it waited on
    assert set(rec.by_rank()) == {0, 1} and rec.by_rank()[1] > rec.by_rank()[0]
    res = simulate(ddp_pair, Network.simple("Ring", 2, 50, 500), _system())
    sim = job_critical_path(ddp_pair, res)
    assert sim.length_ns == res.step_ns and sim.wait_ns == 0
    assert sum(s["time_ns"] for s in sim.segments) == res.step_ns


def test_resnet_on_8_npus_path_is_the_simulated_step(resnet_path):
    from chakra_trace import read_trace

    w = Workload({0: read_trace(resnet_path)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(w, Network.simple("Ring", 8, 50, 500), _system())
    j = job_critical_path(w, res)
    assert j.length_ns == res.step_ns == 304_218_788 and j.wait_ns == 0
    top = top_ops(w, res, by="exposed", n=3, path=j)
    assert top.source == "simulated" and top.rows[0]["exposed_us"] > 0
    assert all(r["exposed_us"] <= r["total_us"] for r in top_ops(w, res, n=None, path=j).rows)


def test_top_ops_totals_and_exposure(ddp_pair):
    t = top_ops(ddp_pair, n=None)
    total = sum(r["total_us"] for r in t.rows)
    assert total == sum(int(x.duration.sum()) for x in ddp_pair.traces.values())
    exposed = sum(r["exposed_us"] for r in t.rows)
    path = job_critical_path(ddp_pair)
    assert exposed * 1000 == sum(s["time_ns"] for s in path.segments)
    by_exposed = top_ops(ddp_pair, by="exposed", n=5).rows
    assert [r["exposed_us"] for r in by_exposed] == sorted((r["exposed_us"] for r in by_exposed), reverse=True)
    ar = next(r for r in t.rows if r["name"] == "c10d::allreduce_")
    assert ar["count"] == 12 and ar["ranks"] == 2
    gloo = next(r for r in t.rows if r["name"] == "gloo:all_reduce")  # the async transfers, on gloo's threads
    assert gloo["count"] == 12 and gloo["type"] == "COMM_COLL_NODE"
    df = t.to_pandas()
    assert list(df.columns)[:3] == ["name", "type", "count"] and len(df) == len(t.rows)


def test_data_parallel_scale_out_and_presets(ddp_pair):
    w = data_parallel(ddp_pair, 64)
    assert len(w) == 64 and w.traces[63] is ddp_pair.traces[1] and w.groups["0"] == list(range(64))
    with pytest.raises(ChakraError, match="multiple"):
        data_parallel(ddp_pair, 63)
    p = preset("TORUS-8x8")
    assert p.npus == 64 and [d.topology for d in p.network.dims] == ["Ring", "Ring"]
    with pytest.raises(ChakraError, match="presets: ring-8"):
        preset("nope")
    assert all(x.npus >= 8 for x in PRESETS.values() if x.network is not None)
    assert PRESETS["recorded"].npus is None and PRESETS["ideal"].npus is None  # the job's own ranks
    res = simulate(w, p.network, p.system)
    j = job_critical_path(w, res)
    assert j.length_ns == res.step_ns and j.wait_ns == 0
    # one more level of hierarchy and slower links between nodes: the same job takes longer
    dgx = simulate(w, preset("dgx-8x8").network, preset("dgx-8x8").system)
    assert dgx.step_ns > res.step_ns


def test_data_parallel_refuses_partial_groups():
    b = TraceBuilder()
    b.collective("ALL_REDUCE", 64, pg_name="tp")
    t = b.build()
    with pytest.raises(ChakraError, match="'tp' spans ranks"):
        data_parallel(Workload({0: t, 1: t, 2: t, 3: t}, {"tp": [0, 1]}), 8)


def test_facade(ddp_pair):
    a = Analysis(ddp_pair)
    assert a.critical_path() is a.critical_path()  # computed once
    assert a.critical_path(rank=0).length_us > 0
    assert a.breakdown().rows[0]["rank"] == 0
    res = simulate(ddp_pair, Network.simple("Ring", 2, 50, 500), _system())
    s = Analysis(ddp_pair, res)
    assert s.critical_path().length_ns == res.step_ns
    assert s.breakdown().rows[1]["span_us"] == res.finish_ns[1] / 1000
    assert s.top_ops(n=3).source == "simulated"
