"""The simulator's shortcuts are exact: with and without them every result is the same.

Shortcuts: one NPU simulated for all when every NPU runs one trace and every collective spans
the machine and ends at one time on all (else it is dropped and every NPU simulated), and
repeated algorithm steps added in closed form when every member starts and ends them together.
Random networks, systems and workloads, both network models, both modes.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.simulate import simulate
from chakra_trace.simulate.config import Network, SystemConfig
from chakra_trace.synthesize import from_spec

ALGORITHMS = ["ring", "direct", "halvingDoubling", "doubleBinaryTree"]
TOPOLOGIES = ["Ring", "Switch", "FullyConnected"]


def _case(seed: int):
    rng = random.Random(seed)
    dims = rng.choice([1, 1, 2, 2, 3])
    sizes = [rng.choice([2, 3, 4, 4, 8]) for _ in range(dims)]
    topo = [rng.choice(TOPOLOGIES) for _ in range(dims)]
    net = Network.simple(
        topo, sizes, [rng.choice([25, 50, 100.5, 200]) for _ in sizes], [rng.choice([0, 50, 500]) for _ in sizes]
    )
    one = rng.random() < 0.15
    sys = {
        "scheduling-policy": rng.choice(["LIFO", "FIFO"]),
        "endpoint-delay": rng.choice([0, 10]),
        "active-chunks-per-dimension": rng.choice([1, 2]),
        "preferred-dataset-splits": rng.choice([1, 2, 4]),
        "collective-optimization": rng.choice(["baseline", "localBWAware"]),
        "local-mem-bw": rng.choice([0, 1600]),
        **{
            f"{c}-implementation": (
                ["one" + rng.choice(["Ring", "Direct"])] if one else [rng.choice(ALGORITHMS) for _ in sizes]
            )
            for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
        },
    }
    kind = rng.choice(["coll", "coll", "train", "p2p", "skewed", "alternating"])
    size = rng.choice([1000, 4096, 65536, 1000003])
    if kind == "coll":
        spec = f"coll:{rng.choice(['all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all'])}:{size}"
    elif kind == "train":
        spec = f"train:layers=3:comp_us={rng.choice([1, 20])}:size={size}"
    elif kind == "p2p":
        spec = f"p2p:size={size}"
    else:
        spec = f"{kind}:{size}"
    compat = rng.random() < 0.5
    comm = "network" if compat or rng.random() < 0.8 else rng.choice(["recorded", "ideal"])
    return net, SystemConfig.from_dict(sys), spec, compat, rng.random() < 0.5, comm


def _skewed(npus: int, size: int) -> Workload:
    """Every NPU computes for a different time, then all-reduces: members start apart."""
    traces = {}
    for r in range(npus):
        b = TraceBuilder()
        c = b.comp("work", 1 + 3 * r)
        b.collective("ALL_REDUCE", size, deps=[c])
        traces[r] = b.build()
    return Workload(traces)


def _alternating(npus: int, size: int) -> Workload:
    """NPU r runs trace r % 3 (three objects, compute of different lengths around two
    all-reduces): classes of NPUs that start collectives apart from the other classes."""
    traces = []
    for k in range(3):
        b = TraceBuilder()
        c = b.comp("fwd", 1 + 5 * k)
        a = b.collective("ALL_REDUCE", size, deps=[c])
        d = b.comp("bwd", 9 - 4 * k, deps=[c])
        b.collective("ALL_GATHER", size // 2 + 1, deps=[a, d])
        traces.append(b.build())
    return Workload({r: traces[r % 3] for r in range(npus)})


def _run(net, system, spec, compat, aware, shortcuts, comm="network"):
    kind, _, size = spec.partition(":")
    made = {"skewed": _skewed, "alternating": _alternating}
    workload = made[kind](net.npus, int(size)) if kind in made else from_spec(spec, net.npus)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(workload, net, system, compat=compat, aware=aware, shortcuts=shortcuts, comm=comm)


FIELDS = ("finish_ns", "exposed_comm_ns", "compute_ns", "comm_ns", "overlap_ns", "other_ns", "idle_ns")


@pytest.mark.parametrize("seed", range(120))
def test_shortcuts_change_nothing(seed):
    net, system, spec, compat, aware, comm = _case(seed)
    if aware and any(d.npus == 2 and d.topology == "Ring" for d in net.dims) and compat:
        aware = False  # (ASTRA-sim's aware backend cannot build a 2-NPU ring; we can, but keep to its cases)
    fast = _run(net, system, spec, compat, aware, True, comm)
    slow = _run(net, system, spec, compat, aware, False, comm)
    assert slow.shortcuts == []
    for f in FIELDS:
        assert getattr(fast, f).tolist() == getattr(slow, f).tolist(), f
    assert [c.to_dict() for c in fast.collectives] == [c.to_dict() for c in slow.collectives]
    if aware:
        assert np.array_equal(fast.link_busy_ns, slow.link_busy_ns)
    for r in range(net.npus):
        for a, b in zip(fast.nodes[r], slow.nodes[r]):
            assert a.tolist() == b.tolist()


def test_shortcuts_are_taken_and_said():
    net = Network.simple("Ring", 64, 50, 500)
    system = SystemConfig.from_dict({"preferred-dataset-splits": 2, "all-reduce-implementation": ["ring"]})
    res = _run(net, system, "coll:all_reduce:1048576", True, False, True)
    assert res.events == 1  # one NPU stood for 64
    assert res.shortcuts[0].startswith("symmetric NPUs: the 64 NPUs")
    assert "closed form: 248 repeats" in res.shortcuts[1]  # 2 chunks x 2 x (63 - 1)
    assert res.to_dict()["shortcuts"] == res.shortcuts


def test_symmetry_dropped_where_members_end_apart():
    """oneRing on 4x4: the ring's hops cross dimension 1 at every fourth NPU, so members end at
    different times: NPU 0 cannot stand for the others, and the run says so."""
    net = Network.simple(["Ring", "Ring"], [4, 4], [200, 25], [10, 1000])
    system = SystemConfig.from_dict({"all-reduce-implementation": ["oneRing"], "preferred-dataset-splits": 1})
    res = _run(net, system, "coll:all_reduce:65536", False, False, True)
    assert len(set(res.finish_ns.tolist())) > 1
    assert any(s.startswith("symmetric NPUs tried and dropped") for s in res.shortcuts)
    assert res.finish_ns.tolist() == _run(net, system, "coll:all_reduce:65536", False, False, False).finish_ns.tolist()


def test_one_npu_per_trace_for_a_scaled_out_recording():
    """A data-parallel scale-out of a recorded pair runs the pair's two traces on 64 NPUs: two
    NPUs are simulated for all, with the same result as all 64."""
    from chakra_trace.synthesize.scale import data_parallel

    pair = _alternating(2, 4096)
    job = data_parallel(pair, 64)
    net = Network.simple(["Ring", "Switch"], [8, 8], [100, 50], [100, 500])
    system = SystemConfig.from_dict({"all-reduce-implementation": ["ring", "ring"], "preferred-dataset-splits": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = simulate(job, net, system)
        slow = simulate(job, net, system, shortcuts=False)
    assert "64 NPUs run 2 traces" in fast.shortcuts[0] and fast.events * 32 == slow.events
    assert fast.finish_ns.tolist() == slow.finish_ns.tolist() and len(set(fast.finish_ns.tolist())) == 2


def test_no_stand_in_for_subgroups_or_p2p():
    net = Network.simple("Switch", 4, 50, 500)
    system = SystemConfig.from_dict({"all-reduce-implementation": ["ring"]})
    res = _run(net, system, "p2p:size=4096", False, False, True)
    assert not any(s.startswith("symmetric") for s in res.shortcuts) and res.events > 4


def _replicated(
    net: Network, tp: int, pp: int, dp: int, size: int, *, skew: int = 0, tp_alike: bool = False
) -> Workload:
    """TP x PP x DP in Megatron order (rank = t + tp * (p + pp * d)): per rank a forward whose
    length depends on its TP rank (unless ``tp_alike``) and stage, a TP all-reduce, the
    activation sent to the next stage, a backward, and the DP all-reduce over the replicas.
    ``skew``: replica 1's first NPU computes that much longer (no longer a replica)."""
    groups: dict[str, list[int]] = {}

    def rank(t, p, d):
        return t + tp * (p + pp * d)

    traces = {}
    for d in range(dp):
        for p in range(pp):
            for t in range(tp):
                r = rank(t, p, d)
                tpg, dpg = f"tp{p}.{d}", f"dp{t}.{p}"
                groups[tpg] = [rank(x, p, d) for x in range(tp)]
                groups[dpg] = [rank(t, p, x) for x in range(dp)]
                b = TraceBuilder()
                last = None
                if p > 0:
                    last = b.recv(rank(t, p - 1, d), size, tag=7)
                fwd = b.comp(
                    "fwd",
                    5 + 3 * t * (not tp_alike) + 7 * p + (skew if (d, p, t) == (1, 0, 0) else 0),
                    deps=[last] if last else [],
                )
                ar = b.collective("ALL_REDUCE", size // 4, deps=[fwd], pg_name=tpg)
                if p + 1 < pp:
                    ar = b.send(rank(t, p + 1, d), size, tag=7, deps=[ar])
                bwd = b.comp("bwd", 11 + 2 * p, deps=[ar])
                b.collective("ALL_REDUCE", size, deps=[bwd], pg_name=dpg)
                traces[r] = b.build()
    return Workload(traces, groups=groups)


REPLICA_NETS = [
    (["Switch", "Switch"], [4, 8], 2, 2, 8),  # TP 2 x PP 2 in a node of 4, 8 nodes: 8 replicas of a node
    (["Ring", "Ring"], [2, 12], 2, 3, 4),  # a ring top dimension turned by 3
    (["FullyConnected", "Ring", "Switch"], [2, 2, 4], 2, 2, 4),
    (["Ring"], [12], 2, 2, 3),  # one dimension: replicas of 4 NPUs
]


@pytest.mark.parametrize("topo,sizes,tp,pp,dp", REPLICA_NETS)
@pytest.mark.parametrize("compat", [False, True])
def test_replicas_stand_for_each_other_with_peers_and_groups(topo, sizes, tp, pp, dp, compat):
    """A TP x PP x DP job with sends and sub-groups: one replica is simulated for all, with the
    same result as every NPU, and the result says so."""
    net = Network.simple(topo, sizes, [100.0] * len(sizes), [100] * len(sizes))
    system = SystemConfig.from_dict(
        {"all-reduce-implementation": ["ring"] * len(sizes), "preferred-dataset-splits": 2, "endpoint-delay": 10}
    )
    job = _replicated(net, tp, pp, dp, 65536)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = simulate(job, net, system, comm_groups=job.groups, compat=compat)
        slow = simulate(job, net, system, comm_groups=job.groups, compat=compat, shortcuts=False)
    for f in FIELDS:
        assert getattr(fast, f).tolist() == getattr(slow, f).tolist(), f
    assert fast.shortcuts[0].startswith(
        f"symmetric NPUs: the {net.npus} NPUs are {dp} replicas of NPUs 0-{tp * pp - 1}"
    )
    assert fast.events * dp == slow.events
    key = lambda c: (c.group, c.index)  # noqa: E731  (records of replicas follow their own: order aside, the same)
    assert sorted(fast.collectives, key=key) == sorted(slow.collectives, key=key)


TURN_NETS = [
    (["Switch", "Switch"], [4, 8], 4, 2, 4, 1),  # TP 4 fills a node: one NPU per node stands for it
    (["Ring", "Switch"], [4, 6], 4, 3, 2, 1),  # a ring of 4 turned
    (["Ring", "Ring"], [2, 8], 2, 2, 4, 1),  # TP 2 on a ring of 2
    (["FullyConnected", "Switch"], [8, 2], 8, 2, 1, 1),  # no replicas: the turn alone
]


@pytest.mark.parametrize("topo,sizes,tp,pp,dp,turn", TURN_NETS)
def test_tensor_parallel_ranks_stand_for_each_other(topo, sizes, tp, pp, dp, turn):
    """TP ranks of a stage that run one program on their own groups and peers: the lowest
    dimension turned maps the job onto itself, so the first NPUs of each block stand for it;
    every result is the full run's, the records of groups not simulated (DP groups of the other
    TP ranks) included."""
    net = Network.simple(topo, sizes, [100.0] * len(sizes), [100] * len(sizes))
    system = SystemConfig.from_dict(
        {"all-reduce-implementation": ["ring"] * len(sizes), "preferred-dataset-splits": 2, "endpoint-delay": 10}
    )
    job = _replicated(net, tp, pp, dp, 65536, tp_alike=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = simulate(job, net, system, comm_groups=job.groups)
        slow = simulate(job, net, system, comm_groups=job.groups, shortcuts=False)
    for f in FIELDS:
        assert getattr(fast, f).tolist() == getattr(slow, f).tolist(), f
    assert f"turned by {turn} in every block of {sizes[0]} NPUs" in fast.shortcuts[0], fast.shortcuts
    stand = net.npus // sizes[0] * turn // dp  # the first `turn` NPUs of each block of one replica
    assert f"so {stand} NPUs were simulated" in fast.shortcuts[0]
    assert fast.events * net.npus == slow.events * stand
    key = lambda c: (c.group, c.index)  # noqa: E731
    assert sorted(fast.collectives, key=key) == sorted(slow.collectives, key=key)


def test_no_turn_where_tensor_parallel_ranks_differ():
    net = Network.simple(["Switch", "Switch"], [4, 8], [100, 50], [100, 500])
    system = SystemConfig.from_dict({"all-reduce-implementation": ["ring", "ring"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = _replicated(net, 4, 2, 4, 4096)
        res = simulate(job, net, system, comm_groups=job.groups)
    assert not any("in every block of" in s for s in res.shortcuts)


def test_no_replicas_where_one_differs_or_the_network_is_aware():
    net = Network.simple(["Switch", "Switch"], [4, 8], [100, 50], [100, 500])
    system = SystemConfig.from_dict({"all-reduce-implementation": ["ring", "ring"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        skewed = _replicated(net, 2, 2, 8, 4096, skew=3)
        res = simulate(skewed, net, system, comm_groups=skewed.groups)
        assert not any(s.startswith("symmetric") for s in res.shortcuts)
        same = _replicated(net, 2, 2, 8, 4096)
        aware = simulate(same, net, system, comm_groups=same.groups, aware=True)
        assert not any(s.startswith("symmetric") for s in aware.shortcuts)
        assert (
            aware.finish_ns.tolist()
            == simulate(same, net, system, comm_groups=same.groups, aware=True, shortcuts=False).finish_ns.tolist()
        )
