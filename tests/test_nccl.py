"""The NCCL cost model (`simulate.nccl`) and the real-machine presets (`simulate.clusters`).

Invariants over sizes, groups and machines; the simulator's "nccl" model on a small job of
TP groups inside nodes, a DP group across them and pipeline sends; and the model against
published nccl-tests bus bandwidths (each with its source, tolerance stated in PUBLISHED)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import CollectiveType
from chakra_trace.simulate.clusters import CLUSTERS
from chakra_trace.simulate.nccl import (
    Cluster,
    bus_bandwidth,
    collective_ns,
    collective_time,
    level_bandwidth,
    p2p_ns,
)
from chakra_trace.simulate.presets import preset, simulate_on, with_compute

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
CTYPES = (
    CollectiveType.ALL_REDUCE,
    CollectiveType.ALL_GATHER,
    CollectiveType.REDUCE_SCATTER,
    CollectiveType.ALL_TO_ALL,
    CollectiveType.BROADCAST,
)
SIZES = np.unique(np.r_[0, np.logspace(0, 34, 200, base=2).astype(np.int64)])


@pytest.mark.parametrize("name", list(CLUSTERS))
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("nodes", [1, 2, 3, 16, 128])
def test_more_bytes_never_faster(name, op, nodes):
    c = CLUSTERS[name]
    t = np.array([x.time_us for x in collective_time(c, op, SIZES, 8 * nodes, nodes)])
    assert (np.diff(t) >= -1e-9).all(), t


@pytest.mark.parametrize("ctype", CTYPES)
def test_a_faster_link_is_never_slower(ctype):
    base = CLUSTERS["selene"]
    faster = [
        dataclasses.replace(base, nic_gbps=400),
        dataclasses.replace(base, nvlinks=18),
        dataclasses.replace(base, arch="hopper", nvlinks=18, nic_gbps=400),
    ]
    for members in (np.arange(8), np.arange(32), np.arange(0, 64, 8)):
        for size in (1 << 10, 1 << 20, 1 << 27, 1 << 32):
            t0 = collective_ns(base, ctype, size, members)
            for f in faster:
                assert collective_ns(f, ctype, size, members) <= t0, (f, members.size, size)
    for f in faster:
        for dst in (1, 8):
            assert p2p_ns(f, 0, dst, 1 << 24) <= p2p_ns(base, 0, dst, 1 << 24)


@pytest.mark.parametrize("name", list(CLUSTERS))
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_bus_bandwidth_approaches_the_level_figure(name, nodes):
    """At 16 GiB the busbw of a ring all-reduce, all-gather, reduce-scatter is within 3% of the
    level's bandwidth (`level_bandwidth`) and never above it."""
    c = CLUSTERS[name]
    n = 8 * nodes
    level = level_bandwidth(c, nodes, 8)[0]
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        size = 16 << 30
        bw = bus_bandwidth(op, size, n, collective_time(c, op, size, n, nodes)[0].time_us)
        assert 0.97 * level <= bw <= level, (op, bw, level)


@pytest.mark.parametrize("name", list(CLUSTERS))
@pytest.mark.parametrize("ctype", CTYPES)
def test_a_group_inside_one_node_is_never_slower_than_across_nodes(name, ctype):
    c = CLUSTERS[name].sized(64)
    for k in (2, 4, 8):
        inside = np.arange(k)
        across = np.arange(k) * 8  # one rank per node
        for size in SIZES[::10].tolist():
            assert collective_ns(c, ctype, size, inside) <= collective_ns(c, ctype, size, across), (k, size)
    assert p2p_ns(c, 0, 1, 1 << 20) < p2p_ns(c, 0, 8, 1 << 20)


def test_bad_clusters_are_refused():
    with pytest.raises(ChakraError, match="arch"):
        Cluster("x", "volta", 8, 6, 100, 1)
    with pytest.raises(ChakraError, match="positive"):
        Cluster("x", "ampere", 8, 12, 0, 1)
    with pytest.raises(ChakraError, match="comm_type"):
        collective_ns(CLUSTERS["selene"], 42, 1024, np.arange(8))


# --------------------------------------------------------------------------- published figures

A800_ONE_NIC = Cluster("a800-1nic", "ampere", gpus_per_node=8, nvlinks=8, nic_gbps=200, nics_per_node=1)

#: (what, cluster, op, nodes, bytes, published busbw GB/s (low, high), source). Tolerance: ours
#: within 5% of the published range.
PUBLISHED = [
    (
        "8x A100-SXM 80GB, one node, all-reduce 4 GiB",
        CLUSTERS["selene"],
        "all_reduce",
        1,
        4 << 30,
        (232.54, 232.54),
        "https://github.com/NVIDIA/nccl/issues/1048 (all_reduce_perf -b 8 -e 4G -g 8: 232.54 GB/s)",
    ),
    (
        "DGX A100, 8x HDR 200 Gb/s per node, multi-node all-reduce",
        CLUSTERS["selene"],
        "all_reduce",
        2,
        8 << 30,
        (192.0, 192.0),
        "https://github.com/NVIDIA/nccl/issues/812 (NVIDIA, quoted in nccl#1576: 'On an Nvidia DGX-A100 "
        "system we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW')",
    ),
    (
        "8x A800 (8 NVLinks), one node, all-reduce 8 GiB",
        A800_ONE_NIC,
        "all_reduce",
        1,
        8 << 30,
        (160.0, 160.0),
        "https://github.com/NVIDIA/nccl/issues/412 (NVIDIA: '~160GB/s intra-node and 24GB/s inter-node')",
    ),
    (
        "8x A800 per node, one HDR 200 Gb/s NIC, 12 nodes, all-reduce 8 GiB",
        A800_ONE_NIC,
        "all_reduce",
        12,
        8 << 30,
        (24.0, 24.0),
        "https://github.com/NVIDIA/nccl/issues/412 (as above: 24 GB/s inter-node)",
    ),
    (
        "DGX H100, 8x NDR 400 Gb/s per node, 2 nodes, ring all-reduce",
        CLUSTERS["dgx-h100"],
        "all_reduce",
        2,
        8 << 30,
        (8 * 46.0, 8 * 48.0),
        "https://github.com/NVIDIA/nccl-tests/issues/290 (NVIDIA: 'For NDR @ 400Gbps you should see "
        "46-48GB/s per NIC', NCCL_ALGO=RING over two nodes; 8 NICs per node)",
    ),
]


def ours(cluster, op, nodes, size) -> float:
    n = 8 * nodes
    return bus_bandwidth(op, size, n, collective_time(cluster, op, size, n, nodes)[0].time_us)


@pytest.mark.parametrize("row", PUBLISHED, ids=[r[0] for r in PUBLISHED])
def test_published_nccl_tests_bus_bandwidths(row):
    _what, cluster, op, nodes, size, (lo, hi), _source = row
    bw = ours(cluster, op, nodes, size)
    assert 0.95 * lo <= bw <= 1.05 * hi, (bw, lo, hi)


def test_nvls_is_not_modelled_so_one_h100_node_stays_below_its_published_nvls_figure():
    """nccl-tests#290: 476 GB/s on one DGX H100 node with NVLink SHARP (NVLS), which this model
    leaves out (ring: NCCL's 360 GB/s of channels): said here so that the gap stays visible."""
    assert ours(CLUSTERS["dgx-h100"], "all_reduce", 1, 8 << 30) < 0.8 * 476


# --------------------------------------------------------------------------- in the simulator


def _job(n: int = 16, tp: int = 8) -> tuple[Workload, dict[str, list[int]]]:
    """n ranks: TP groups of `tp` consecutive ranks (inside a node), a DP group of the ranks with
    one TP index (across nodes), a pipeline send from the first TP group to the second. Compute
    nodes carry FLOPs only (a device costs them)."""
    groups = {f"tp{g}": list(range(g * tp, (g + 1) * tp)) for g in range(n // tp)}
    groups |= {f"dp{i}": list(range(i, n, tp)) for i in range(tp)}
    traces = {}
    for r in range(n):
        b = TraceBuilder()
        a = b.comp("fwd", num_ops=4e12, tensor_size=1 << 28)
        x = b.collective("ALL_REDUCE", 64 << 20, pg_name=f"tp{r // tp}", deps=[a])
        if r < tp:
            s = b.send(r + tp, 32 << 20, deps=[x])
        else:
            s = b.recv(r - tp, 32 << 20, deps=[x])
        c = b.comp("bwd", num_ops=8e12, tensor_size=1 << 28, deps=[s])
        b.collective("REDUCE_SCATTER", 256 << 20, pg_name=f"dp{r % tp}", deps=[c])
        traces[r] = b.build()
    return Workload(traces), groups


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_the_nccl_model_is_never_faster_than_free_communication(name):
    w, groups = _job()
    real = simulate_on(w, name, comm_groups=groups)
    free = simulate_on(w, with_compute(preset("ideal"), CLUSTERS[name].device), comm_groups=groups)
    assert real.step_ns > free.step_ns > 0
    # every collective took NCCL's time from its last member's arrival (start_ns: the first member's)
    c = CLUSTERS[name].sized(16)
    for rec in real.collectives:
        members = groups[rec.group]
        took = collective_ns(c, CollectiveType[rec.type.upper()], rec.bytes, members)
        assert rec.end_ns - rec.start_ns >= took > 0 and rec.algorithm.startswith("nccl:")
    assert real.mode.endswith("/nccl")


def test_the_nccl_model_needs_a_cluster():
    from chakra_trace.simulate.config import Network
    from chakra_trace.simulate.simulator import simulate

    w, groups = _job()
    net = Network.simple("FullyConnected", 16, 1, 0)
    system = preset("selene").system
    with pytest.raises(ChakraError, match="go together"):
        simulate(w, net, system, comm="nccl", comm_groups=groups)
    with pytest.raises(ChakraError, match="go together"):
        simulate(w, net, system, cluster=CLUSTERS["selene"], comm_groups=groups)


def test_the_presets_carry_their_device():
    for name, c in CLUSTERS.items():
        p = preset(name)
        assert p.cluster == c and p.comm == "nccl" and p.device is not None and p.system.roofline_enabled
        assert p.device.name.lower().replace("-", "").startswith("nvidia" if c.device else "")
