"""The simulator: ASTRA-sim's reference cases to the nanosecond, and what it adds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.simulate import SimulationBlocked, WorkloadInvalid, simulate
from chakra_trace.simulate.config import Network, SystemConfig
from chakra_trace.simulate.engine import Engine
from chakra_trace.synthesize import from_spec
from chakra_trace.visualize.timeline import timeline
from conftest import astra_cases, astra_reference

REF = astra_reference(required=False)  # ASTRA-sim's reference cases, with our differential runs on its binary
CASES = astra_cases("cases.csv")


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_astra_sim_reference_cases_exactly(case):
    net = Network.from_yaml(REF / "cfg" / case["network"])
    workload = from_spec(case["workload"], net.npus)
    res = simulate(workload, net, REF / "cfg" / case["system"], compat=True, aware=case["backend"] == "aware")
    assert res.finish_ns.tolist() == [int(case["finish_ns"])] * net.npus
    if case["exposed_ns"]:
        assert res.exposed_comm_ns.tolist() == [int(case["exposed_ns"])] * net.npus


def system(**kw) -> SystemConfig:
    base = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4,
        "all-reduce-implementation": ["ring"],
        "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"],
        "all-to-all-implementation": ["ring"],
        "collective-optimization": "localBWAware",
        "local-mem-bw": 1600,
    }
    base.update(kw)
    return SystemConfig.from_dict(base)


def test_a_collective_a_member_never_reaches_is_reported_not_hung():
    traces = {}
    for r in range(4):
        b = TraceBuilder()
        if r != 2:
            b.collective("ALL_REDUCE", 1 << 20)
        else:
            b.comp("busy", 5)
        traces[r] = b.build()
    with pytest.raises(WorkloadInvalid, match=r"\[group-count-mismatch\].*rank 2: 0"):
        simulate(Workload(traces), Network.simple("Ring", 4, 50, 500), system())
    with pytest.raises(SimulationBlocked) as e:  # unchecked, the run itself still reports it
        simulate(Workload(traces), Network.simple("Ring", 4, 50, 500), system(), validate=False)
    assert "waits for NPU(s) 2" in str(e.value) and set(e.value.blocked) == {0, 1, 3}


def test_a_receive_without_a_send_and_a_cycle_are_reported():
    traces = {}
    for r in range(2):
        b = TraceBuilder()
        if r == 1:
            b.recv(0, 64, tag=3)
        a = b.add("a", "COMP_NODE", id=10, duration=1, data_deps=[11])
        b.add("b", "COMP_NODE", id=11, duration=1, data_deps=[a])
        traces[r] = b.build()
    with pytest.raises(WorkloadInvalid, match=r"rank 0: \[cycle\].*nodes 10, 11\); and 2 more"):
        simulate(Workload(traces), Network.simple("Ring", 2, 50, 500), system())
    with pytest.raises(SimulationBlocked) as e:
        simulate(Workload(traces), Network.simple("Ring", 2, 50, 500), system(), validate=False)
    text = str(e.value)
    assert "no matching send" in text and "never became ready" in text


def test_the_engine_refuses_a_time_in_the_past():
    e = Engine()
    e.at(5, lambda: e.at(4, print))
    with pytest.raises(ValueError, match="event at 4 ns is in the past: the simulation is at 5 ns"):
        e.run()


def test_a_receive_posted_after_its_message_arrived_completes_at_once():
    traces = {}
    for r in range(2):
        b = TraceBuilder()
        if r == 0:
            b.send(1, 64, tag=3)
        else:
            b.recv(0, 64, tag=3, deps=[b.comp("busy", 50)])
        traces[r] = b.build()
    for compat in (False, True):
        res = simulate(Workload(traces), Network.simple("Ring", 2, 50, 500), system(), compat=compat)
        assert res.finish_ns.tolist() == [501, 50_000]  # the message arrived at 501 ns
        assert res.nodes[1][1].tolist() == [50_000, 50_000]


def test_members_that_never_wait_for_the_last_one_finish_when_the_collective_runs():
    """ASTRA-sim runs as many dimensions as algorithms are listed: with one listed on a 2x2
    torus, the row of NPUs 0 and 1 (ready at 1 µs) never waits for NPUs 2 and 3 (100 µs)."""
    traces = {}
    for r in range(4):
        b = TraceBuilder()
        b.collective("ALL_REDUCE", 1 << 16, deps=[b.comp("w", 1 if r < 2 else 100)])
        traces[r] = b.build()
    sys1 = SystemConfig.from_dict({"preferred-dataset-splits": 4, "local-mem-bw": 1600})
    res = simulate(Workload(traces), Network.simple("Ring", [2, 2], 50, 500), sys1, compat=True)
    assert res.finish_ns.tolist() == [100_000, 100_000, 105_396, 105_396]
    assert (res.collectives[0].start_ns, res.collectives[0].end_ns) == (1000, 105_396)


def test_missing_dependencies_are_dropped_with_one_warning():
    b = TraceBuilder()
    b.comp("x", 3, deps=[999])
    with pytest.warns(UserWarning, match="missing"):
        res = simulate(Workload({0: b.build(), 1: b.build()}), Network.simple("Ring", 2, 50, 500), system())
    assert res.finish_ns.tolist() == [3000, 3000]


def test_default_mode_and_outputs():
    net = Network.simple(["Ring", "Switch"], [4, 2], [100, 50], [50, 500])
    res = simulate(from_spec("train:layers=3:comp_us=50:size=1048576", net.npus), net, system())
    assert res.finish_ns.shape == (8,) and (res.finish_ns > 450_000).all()
    assert len(res.collectives) == 3 and all(c.type == "ALL_REDUCE" for c in res.collectives)
    assert (res.overlap_ns > 0).all() and (res.exposed_comm_ns < res.comm_ns).all()
    d = res.to_dict()
    assert set(d) >= {"finish_ns", "exposed_comm_ns"}
    trace = timeline(None, res)
    assert any(e.get("name") == "allreduce0" for e in trace["traceEvents"])


def test_groups_run_a_ring_over_their_members():
    traces = {}
    for r in range(4):
        b = TraceBuilder()
        b.collective("ALL_REDUCE", 1 << 20, pg_name="1" if r < 2 else "2")
        traces[r] = b.build()
    res = simulate(
        Workload(traces, {"1": [0, 1], "2": [2, 3]}), Network.simple("Ring", 4, 50, 500), system(), compat=True
    )
    two = simulate(from_spec("coll:all_reduce:1048576", 2), Network.simple("Ring", 2, 50, 500), system(), compat=True)
    assert res.finish_ns.tolist() == [two.finish_ns[0]] * 4
    assert {c.group for c in res.collectives} == {"1", "2"}


@pytest.mark.parametrize("algo", ["ring", "direct", "halvingDoubling", "doubleBinaryTree"])
@pytest.mark.parametrize(
    "ctype",
    [
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
    ],
)
def test_every_collective_and_algorithm_runs(algo, ctype):
    net = Network.simple("Switch", 8, 50, 500)
    sysc = system(
        **{
            k: [algo]
            for k in (
                "all-reduce-implementation",
                "all-gather-implementation",
                "reduce-scatter-implementation",
                "all-to-all-implementation",
            )
        }
    )
    res = simulate(from_spec(f"coll:{ctype}:1048576", 8), net, sysc)
    assert (res.finish_ns > 0).all() and len(set(res.finish_ns.tolist())) == 1


def test_aware_network_shares_links():
    """Two NPUs sending to one through a switch queue on its down link; unaware they do not."""
    traces = {0: TraceBuilder(), 1: TraceBuilder(), 2: TraceBuilder()}
    traces[0].send(2, 1 << 20, tag=1)
    traces[1].send(2, 1 << 20, tag=2)
    traces[2].recv(0, 1 << 20, tag=1)
    traces[2].recv(1, 1 << 20, tag=2)
    w = Workload({r: b.build() for r, b in traces.items()})
    net = Network.simple("Switch", 3, 50, 500)
    unaware = simulate(w, net, system())
    aware = simulate(w, net, system(), aware=True)
    one = 2 * 500 + (1 << 20) / 50
    assert unaware.finish_ns[2] == int(one)
    assert aware.finish_ns[2] > unaware.finish_ns[2] + (1 << 20) / 50 * 0.9  # the second waits for the first
    assert aware.link_busy_ns is not None and aware.link_busy_ns.max() >= 2 * int((1 << 20) / 50)


def test_resnet50_on_8_npus(resnet_path):
    """ASTRA-sim aborts on this trace (missing and cyclic control dependencies): compat mode
    reports the nodes that can never run; the default mode repairs what has one reading."""
    from chakra_trace import read_trace

    w = Workload({0: read_trace(resnet_path)})
    net = Network.simple("Ring", 8, 50, 500)
    with pytest.raises(SimulationBlocked, match="never became ready"):
        with pytest.warns(UserWarning):
            simulate(w, net, system(), compat=True)
    with pytest.warns(UserWarning, match="repaired"):
        res = simulate(w, net, system())
    assert len(set(res.finish_ns.tolist())) == 1 and res.step_ns > 0.25e9
    assert [c.type for c in res.collectives] == ["BROADCAST"] * 2 + ["ALL_REDUCE"] * 5
    assert sum(c.bytes for c in res.collectives if c.type == "ALL_REDUCE") == 102_228_128


def test_one_variants_ignore_the_dimensions():
    """oneRing on a 4x4 network is one 16-NPU ring; in compat mode a message between ring
    neighbours costs the lowest differing dimension, as on a 16-ring whose every hop is one hop."""
    net = Network.simple(["Ring", "Ring"], [4, 4], [50, 50], [500, 500])
    one = system(**{"all-reduce-implementation": ["oneRing", "oneRing"]})
    res = simulate(from_spec("coll:all_reduce:1048576", 16), net, one, compat=True)
    assert res.collectives[0].algorithm == "all_reduce:ring"
    # npu 3 -> 4 crosses dimension 1 (coords (3,0) -> (0,1)): one hop there, so like a 16 ring
    ring16 = simulate(
        from_spec("coll:all_reduce:1048576", 16), Network.simple("Ring", 16, 50, 500), system(), compat=True
    )
    assert res.finish_ns.tolist() == ring16.finish_ns.tolist()


def test_link_utilization_report():
    net = Network.simple(["Ring", "Switch"], [4, 2], [50, 50], [500, 500])
    res = simulate(from_spec("coll:all_reduce:1048576", 8), net, system(), aware=True)
    links = res.links()
    assert links and {x["kind"] for x in links} <= {"ring+", "ring-", "up", "down"}
    assert all(0 < x["utilization"] <= 1 for x in links)
    assert links == sorted(links, key=lambda x: -x["busy_ns"])
    assert "links" in res.to_dict()


def test_all_to_allv_sends_each_peer_its_own_size():
    """NPU 0 sends 7/8 of its bytes to NPU 1: the direct exchange takes as long as that message."""

    def a2av(splits):
        traces = {}
        for r, split in enumerate(splits):
            b = TraceBuilder()
            b.collective("ALL_TO_ALL", 8 << 20, in_split_size=json.dumps(split))
            traces[r] = b.build()
        return Workload(traces)

    net = Network.simple("Switch", 2, 50, 500)
    direct = system(**{"all-to-all-implementation": ["direct"], "preferred-dataset-splits": 1})
    skewed = simulate(a2av([[1, 7], [4, 4]]), net, direct)
    even = simulate(a2av([[4, 4], [4, 4]]), net, direct)
    big = 2 * 500 + (7 << 20) / 50  # the 7 MiB message over both hops
    assert skewed.step_ns == 10 + int(big) + 10
    assert even.step_ns < skewed.step_ns


def test_the_readme_documents_every_difference_from_astra_sim():
    from chakra_trace.simulate import COMPAT_DIFFERENCES

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for key, (astra, ours) in COMPAT_DIFFERENCES.items():
        assert f"| {key} | {astra} | {ours} |" in readme.replace("`", ""), key


def test_cli_simulate_json(tmp_path, capsys):
    from chakra_trace.cli import main

    w = from_spec("train:layers=2:comp_us=10:size=65536", 4)
    w.save(tmp_path / "job")
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps(system().to_dict()))
    rc = main(
        [
            "simulate",
            "--workload",
            str(tmp_path / "job"),
            "--network",
            str(tmp_path / "net.yml"),
            "--system",
            str(tmp_path / "sys.json"),
            "--timeline",
            str(tmp_path / "t.json"),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(out["finish_ns"]) == 4 and len(out["exposed_comm_ns"]) == 4
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


@pytest.mark.parametrize(
    "kind,expect",
    [
        ("PER_NPU_MEMORY_EXPANSION", [1100, 1100, 1100, 1100]),
        ("PER_NODE_MEMORY_EXPANSION", [1100, 2200, 1100, 2200]),
        ("MEMORY_POOL", [1100, 2200, 3300, 4400]),
    ],
)
def test_remote_memory_models(kind, expect):
    """1,000 bytes at 1 GB/s after 100 ns; ports shared per node of 2 NPUs or by all queue."""
    from chakra_trace.simulate.config import MemoryConfig

    b = TraceBuilder()
    b.add("load", "MEM_LOAD_NODE", tensor_size=1000)
    w = Workload({r: b.build() for r in range(4)})
    mem = MemoryConfig(memory_type=kind, remote_mem_latency=100, remote_mem_bw=1, num_nodes=2, num_npus_per_node=2)
    res = simulate(w, Network.simple("Ring", 4, 50, 500), system(), memory=mem)
    assert sorted(res.finish_ns.tolist()) == sorted(expect)


def test_a_group_ring_runs_in_listed_order():
    """On an 8-ring, the group [0, 4, 1, 5] in that order has 4-hop neighbours (0->4, 1->5)
    that the sorted order [0, 1, 4, 5] does not have on every hop: listed order is slower."""

    def run(order):
        traces = {}
        for r in range(8):
            b = TraceBuilder()
            if r in order:
                b.collective("ALL_REDUCE", 1 << 20, pg_name="g")
            traces[r] = b.build()
        return simulate(Workload(traces, {"g": order}), Network.simple("Ring", 8, 50, 500), system())

    assert run([0, 4, 1, 5]).step_ns > run([0, 1, 4, 5]).step_ns


# --------------------------------------------------------------------------- hostile input (issue 13)


def _cli(args: list[str], capsys) -> tuple[int, str]:
    from chakra_trace.cli import main

    rc = main(args)
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "net, key",
    [
        ("topology: [ Ring ]\nnpus_count: [ 1000000000 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n", "npus_count"),
        (
            "topology: [ Ring, Ring ]\nnpus_count: [ 2048, 1024 ]\nbandwidth: [ 50, 50 ]\nlatency: [ 5, 5 ]\n",
            "npus_count",
        ),
        ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 1.0e+19 ]\n", "latency"),
        ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 1.0e-300 ]\nlatency: [ 5 ]\n", "bandwidth"),
        ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ .inf ]\nlatency: [ 5 ]\n", "bandwidth"),
    ],
)
def test_network_sizes_and_ranges_are_bounded_with_the_file_and_key(tmp_path, net, key, capsys):
    (tmp_path / "net.yml").write_text(net)
    (tmp_path / "sys.json").write_text(json.dumps(system().to_dict()))
    w = from_spec("train:layers=1:comp_us=10:size=65536", 4)
    w.save(tmp_path / "job")
    args = ["simulate", "--workload", str(tmp_path / "job"), "--network", str(tmp_path / "net.yml")]
    rc, err = _cli([*args, "--system", str(tmp_path / "sys.json")], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert f"net.yml:{4 if key == 'latency' else 3 if key == 'bandwidth' else 2}: {key!r}" in err


def test_chunk_counts_are_bounded(tmp_path, monkeypatch):
    from chakra_trace.errors import ChakraError

    for key in ("preferred-dataset-splits", "active-chunks-per-dimension"):
        with pytest.raises(ChakraError, match=f"'{key}': expected an integer <= 4,096.*CHAKRA_TRACE_MAX_CHUNKS"):
            system(**{key: 1e9})
    (tmp_path / "s.json").write_text(json.dumps({**system().to_dict(), "preferred-dataset-splits": 1e9}))
    with pytest.raises(ChakraError, match=r"s.json:\d+: 'preferred-dataset-splits'"):
        SystemConfig.from_json(tmp_path / "s.json")
    monkeypatch.setenv("CHAKRA_TRACE_MAX_CHUNKS", "100000")
    assert system(**{"preferred-dataset-splits": 50000}).preferred_dataset_splits == 50000


def test_npu_count_and_dimensions_are_bounded(monkeypatch):
    from chakra_trace.errors import ChakraError

    with pytest.raises(ChakraError, match=r"1024 x 1024 x 2 = 2,097,152 NPUs, more than the limit of 1,048,576"):
        Network.simple("Ring", [1024, 1024, 2], 50, 5)
    with pytest.raises(ChakraError, match="65 dimensions"):
        Network.simple("Ring", [1] * 65, 50, 5)
    monkeypatch.setenv("CHAKRA_TRACE_MAX_NPUS", str(1 << 22))
    assert Network.simple("Ring", [1024, 1024, 2], 50, 5).npus == 1 << 21


def test_slow_links_and_long_durations_overflow_loudly_not_silently():
    from chakra_trace.errors import ChakraError
    from chakra_trace.simulate.network import ClockOverflow

    net = Network.simple("Ring", 4, 50, 500)
    base = simulate(from_spec("train:layers=1:comp_us=10:size=65536", 4), net, system()).finish_ns.max()
    # the slowest, longest link allowed: a finite, longer time -- never a wrapped, shorter one
    slow = Network.simple("Ring", 4, 1e-6, 1e12)
    t = simulate(from_spec("train:layers=1:comp_us=10:size=65536", 4), slow, system()).finish_ns.max()
    assert t > base
    for aware in (False, True):
        traces = {}
        for r in range(4):
            b = TraceBuilder()
            b.collective("ALL_REDUCE", 1 << 62)
            traces[r] = b.build()
        with pytest.raises(ClockOverflow, match="overflows the simulated clock"):
            simulate(Workload(traces), slow, system(), aware=aware)
    b = TraceBuilder()
    b.comp("forever", 2**63)  # µs: x1000 wraps int64 (it finished at 0 before)
    with pytest.raises(ClockOverflow, match=r"node 0 \('forever'\): duration of 9,223,372,036,854,775,808 µs"):
        simulate(Workload({0: b.build()}), Network.simple("Ring", 1, 50, 5), system())
    b = TraceBuilder()
    for i in range(3):  # each below the limit, their sum past it: the clock refuses
        b.comp(f"long{i}", 2**61 // 1000, deps=[i - 1] if i else [])
    with pytest.raises(ChakraError, match="past the clock's 2\\^62 ns"):
        simulate(Workload({0: b.build()}), Network.simple("Ring", 1, 50, 5), system())


def test_a_run_that_cannot_fit_in_memory_is_refused_before_it_is_built(monkeypatch):
    from chakra_trace.errors import ChakraError
    from chakra_trace.simulate import simulator

    monkeypatch.setattr(simulator, "available_bytes", lambda: 1 << 30)
    net = Network.simple("FullyConnected", 1 << 15, 50, 5)  # 2^30 links in the aware model
    w = from_spec("train:layers=1:comp_us=10:size=65536", 1)
    with pytest.raises(ChakraError, match=r"simulating 32,768 NPUs .*1,073,741,824 links\) needs about 16.1 GiB"):
        simulate(w, net, system(), aware=True)
    with pytest.raises(ChakraError, match=r"4096 chunks per collective"):
        simulate(w, net, system(**{"preferred-dataset-splits": 4096}))


def _job(build, n: int = 2) -> Workload:
    """A job of n ranks; build(b, rank) adds each rank's nodes."""
    traces = {}
    for r in range(n):
        b = TraceBuilder()
        build(b, r)
        traces[r] = b.build()
    return Workload(traces)


def _order(b, r):
    first, second = ("ALL_REDUCE", "ALL_GATHER") if r == 0 else ("ALL_GATHER", "ALL_REDUCE")
    b.collective(first, 4096)
    b.collective(second, 4096)


@pytest.mark.parametrize(
    "build, n, match",
    [
        (_order, 2, r"\[group-mismatch\] the all-ranks group: collective #0 differs in comm_type"),
        (lambda b, r: b.collective("ALL_REDUCE", 4096 * (r + 1)), 2, r"collective #0 differs in comm_size"),
        (
            lambda b, r: b.send(5, 64) if r == 0 else b.recv(0, 64),
            2,
            r"rank 0: \[unknown-peer\] 1 COMM_SEND node to rank 5, not in the workload \(nodes 0\)",
        ),
        (lambda b, r: b.collective("ALL_REDUCE", -8), 2, r"\[negative-size\].*comm_size"),
    ],
    ids=["order", "size", "unknown-peer", "negative-size"],
)
def test_what_validation_rejects_is_not_simulated(build, n, match):
    from chakra_trace.errors import ChakraError

    w = _job(build, n)
    with pytest.raises(WorkloadInvalid, match=match):
        simulate(w, Network.simple("Ring", n, 50, 500), system())
    try:  # the opt-out runs it as before (to an answer or a report of what blocks)
        simulate(w, Network.simple("Ring", n, 50, 500), system(), validate=False)
    except ChakraError as e:
        assert not isinstance(e, WorkloadInvalid)


def test_a_group_naming_npus_that_do_not_exist_is_refused():
    w = _job(lambda b, r: b.collective("ALL_REDUCE", 4096, pg_name="g"), 4)
    with pytest.raises(WorkloadInvalid, match=r"group 'g' lists ranks 7, 9, not NPUs of this network \(0..3\)"):
        simulate(w, Network.simple("Ring", 4, 50, 500), system(), comm_groups={"g": [0, 1, 2, 3, 7, 9]})


def test_validation_warnings_are_simulation_warnings():
    from chakra_trace.simulate import SimulationWarning

    w = _job(lambda b, r: b.collective("ALL_REDUCE", 1 << 51), 2)  # over 1 PiB: a warning, not an error
    with pytest.warns(SimulationWarning, match="validation: rank 0: .*over 1 PiB"):
        res = simulate(w, Network.simple("Ring", 2, 50, 500), system())
    assert any("over 1 PiB" in x for x in res.warnings)


def test_compat_says_when_a_large_out_of_step_direct_phase_leaves_the_packet_flow():
    """compat, congestion-unaware: a direct phase whose members start apart follows ASTRA-sim's
    packet flow up to EVENT_LIMIT messages; past it, the closed form, and the result says so."""
    from chakra_trace.simulate import SimulationWarning

    def job(n):
        def build(b, r):
            c = b.comp("before", r % 3)  # members reach the collective 0-2 µs apart
            b.collective("ALL_REDUCE", 1 << 20, deps=[c])

        return _job(build, n)

    direct = system(**{"all-reduce-implementation": ["direct"], "preferred-dataset-splits": 1})
    small = simulate(job(16), Network.simple("Ring", 16, 50, 500), direct, compat=True)
    assert not any("closed form" in x for x in small.warnings)
    with pytest.warns(SimulationWarning, match=r"direct all-reduce phase over 1 x 200 members .* closed form"):
        simulate(job(200), Network.simple("Ring", 200, 50, 500), direct, compat=True)


def test_cli_refuses_an_invalid_job_in_one_line_and_no_validate_runs_it(tmp_path, capsys):
    _job(lambda b, r: b.collective("ALL_REDUCE", 4096 * (r + 1)), 2).save(tmp_path / "job")
    rc, err = _cli(["simulate", str(tmp_path / "job"), "--system", "ring-8"], capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "group-mismatch" in err and "nodes 0, 0" in err, err
    rc, err = _cli(["simulate", str(tmp_path / "job"), "--system", "ring-8", "--no-validate", "--json"], capsys)
    assert rc == 0, err


def test_a_scale_out_validates_each_distinct_trace_once(monkeypatch):
    from chakra_trace.simulate import checks

    calls = []
    real = checks.validate_workload
    monkeypatch.setattr(checks, "validate_workload", lambda w: calls.append(len(w)) or real(w))
    simulate(from_spec("train:layers=2:comp_us=10:size=65536", 1), Network.simple("Ring", 64, 50, 5), system())
    assert calls == [1]  # one trace on 64 NPUs: validated once, not 64 times


def _pair(b, r, offset=0):
    """Rank r of a two-rank ping-pong: rank 0 sends, rank 1 answers."""
    c = b.comp("fwd", 10)
    me, peer = r % 2, offset + 1 - r % 2
    if me == 0:
        s = b.send(peer, 1 << 20, tag=7, deps=[c])
        b.recv(peer, 1 << 20, tag=8, deps=[s])
    else:
        rv = b.recv(peer, 1 << 20, tag=7, deps=[c])
        b.send(peer, 1 << 20, tag=8, deps=[rv])


def test_a_scale_out_keeps_each_replica_talking_to_its_own_peer():
    from chakra_trace.simulate.presets import preset, simulate_on
    from chakra_trace.synthesize.scale import data_parallel

    two = _job(_pair, 2)
    res = simulate_on(two, "ring-8")  # was: a false deadlock (every replica sent to NPU 1)
    eight = _job(lambda b, r: _pair(b, r, offset=r - r % 2), 8)  # the same four pairs written out
    p = preset("ring-8")
    assert res.finish_ns.tolist() == simulate(eight, p.network, p.system).finish_ns.tolist()
    w = data_parallel(two, 8)
    assert w.traces[5].comm_dst[0] == 0 and w.traces[5].comm_src[1] == 4  # rank 1 of replica 2: peer NPU 4
    assert w.traces[5].ids is two.traces[1].ids  # only the peer columns are copied
    assert w.traces[2] is not two.traces[0] and w.traces[0] is two.traces[0]
    c = _job(lambda b, r: b.collective("ALL_REDUCE", 4096), 2)
    assert data_parallel(c, 8).traces[6] is c.traces[0]  # without send/recv: shared as before


def test_a_scale_out_refuses_peers_outside_the_recording_and_partial_groups():
    from chakra_trace.errors import ChakraError
    from chakra_trace.simulate.presets import simulate_on
    from chakra_trace.synthesize.scale import data_parallel

    w = _job(lambda b, r: b.send(3, 64) if r == 0 else b.recv(0, 64), 2)
    with pytest.raises(ChakraError, match="rank 0 node 0 has comm_dst 3, not one of the 2 recorded ranks"):
        data_parallel(w, 8)
    pipeline = Workload.open(Path(__file__).parent / "data" / "pipeline")
    with pytest.raises(ChakraError, match="only groups over every rank scale out"):
        simulate_on(pipeline, "ring-8")


def test_an_unknown_comm_type_is_an_error_not_a_key_error():
    from chakra_trace.errors import ChakraError
    from chakra_trace.schema.enums import NodeType

    w = _job(lambda b, r: b.add("odd", NodeType.COMM_COLL_NODE, comm_type=99, comm_size=64), 2)
    with pytest.raises(WorkloadInvalid, match="invalid-comm-type"):
        simulate(w, Network.simple("Ring", 2, 50, 5), system())
    with pytest.raises(ChakraError, match=r"NPU 0 node 0 \('odd'\): comm_type 99 is not a collective type"):
        simulate(w, Network.simple("Ring", 2, 50, 5), system(), validate=False)


def recorded(cases: list[dict], known: dict[str, str]) -> list:
    """Recorded binary cases as test parameters; a known difference is a strict xfail (a fix shows)."""
    xfail = pytest.mark.xfail
    return [
        pytest.param(c, id=c["case"], marks=[xfail(strict=True, reason=known[c["case"]])] if c["case"] in known else [])
        for c in cases
    ]


#: Cases recorded from the real ASTRA-sim (518bd51, analytical backends, built outside the repo:
#: tools/astra/run_case.py), sizes that `preferred-dataset-splits` does not divide.
DIFFERENTIAL = astra_cases("differential.csv")


@pytest.mark.parametrize("case", recorded(DIFFERENTIAL, {}))
def test_sizes_with_a_partial_chunk_as_astra_sim(case):
    """ASTRA-sim cuts ceil(size / chunk) chunks of a whole chunk each (chunk = size // splits): a
    size that the splits do not divide gets one more, full-size chunk."""
    net = Network.from_yaml(REF / "cfg" / case["network"])
    res = simulate(
        from_spec(case["workload"], net.npus),
        net,
        REF / "cfg" / case["system"],
        compat=True,
        aware=case["backend"] == "aware",
    )
    assert res.finish_ns.tolist() == [int(case["finish_ns"])] * net.npus
    assert int(res.exposed_comm_ns.max()) == int(case["exposed_ns"])


#: Cases recorded from the real ASTRA-sim (as DIFFERENTIAL) for the semantics `--compat astra`
#: follows beyond the reference cases: a dimension's queue serves one collective's chunks in
#: the order they reach it; communicator groups (the system's algorithm when one is listed,
#: ASTRA-sim's "Local" ring). A `comm_groups` file (groups/) puts each NPU's collective in its group.
CLASSES = astra_cases("classes.csv")


@pytest.mark.parametrize("case", recorded(CLASSES, {}))
def test_astra_sim_classes(case):
    from chakra_trace.io.workload import read_comm_groups
    from chakra_trace.synthesize.patterns import collective

    net = Network.from_yaml(REF / "cfg" / case["network"])
    groups = read_comm_groups(REF / case["comm_groups"]) if case["comm_groups"] else None
    if groups:
        _, ctype, size = case["workload"].split(":")
        workload = collective(net.npus, ctype, int(size), groups)
    else:
        workload = from_spec(case["workload"], net.npus)
    res = simulate(
        workload,
        net,
        REF / "cfg" / case["system"],
        compat=True,
        aware=case["backend"] == "aware",
        comm_groups=groups,
    )
    for got, recorded in ((res.finish_ns, case["finish_ns"]), (res.exposed_comm_ns, case["exposed_ns"])):
        want = [int(x) for x in recorded.split()]  # one value: the same on every NPU
        assert got.tolist() == (want * net.npus if len(want) == 1 else want)
