"""Simulator inputs: ASTRA-sim's network YAML, system JSON and remote-memory JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.errors import ChakraError
from chakra_trace.simulate.config import (
    ALGORITHMS,
    ASTRA_IGNORED_SYSTEM_KEYS,
    MEMORY_TYPES,
    TOPOLOGIES,
    Dimension,
    MemoryConfig,
    Network,
    SystemConfig,
    parse_algorithm,
    parse_yaml,
)
from conftest import astra_reference

CFG = astra_reference() / "cfg"  # ASTRA-sim's network/system files, with the ones our differential runs add


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def raises(match: str):
    return pytest.raises(ChakraError, match=match)


# ----------------------------------------------------------------------------- reference files


def test_every_reference_file_parses():
    files = sorted(CFG.iterdir())
    assert files
    for f in files:
        if f.suffix in (".yml", ".yaml"):
            net = Network.from_yaml(f)
            assert net.npus >= 2
            assert Network.from_dict(net.to_dict()) == net
        elif f.suffix == ".json":
            sc = SystemConfig.from_json(f)
            assert sc.unknown_keys() == ()
            assert SystemConfig.from_dict(sc.to_dict()) == sc
        else:
            pytest.fail(f"unexpected file {f}")


def test_reference_networks():
    net = Network.from_yaml(CFG / "ring4x4.yml")
    assert net.dims == (Dimension("Ring", 4, 50.0, 500.0),) * 2
    assert net.npus == 16 and net.shape == (4, 4)
    for name, topo, n in (
        ("fc16.yml", "FullyConnected", 16),
        ("sw64.yml", "Switch", 64),
        ("ring2.yml", "Ring", 2),
        ("ring64.yml", "Ring", 64),
    ):
        net = Network.from_yaml(CFG / name)
        assert net.dims == (Dimension(topo, n, 50, 500),)
        assert isinstance(net.dims[0].npus, int) and isinstance(net.dims[0].bandwidth, float)


def test_reference_systems():
    roof = SystemConfig.from_json(CFG / "roofline.json")
    assert roof.roofline_enabled is True
    assert roof.peak_perf == 900 and roof.local_mem_bw == 1600
    assert roof.ignored == {}

    ring = SystemConfig.from_json(CFG / "ring_2d_s4_a1.json")
    assert ring.scheduling_policy == "LIFO"
    assert ring.endpoint_delay == 10 and ring.active_chunks_per_dimension == 1
    assert ring.preferred_dataset_splits == 4
    assert ring.all_reduce == ring.reduce_scatter == ring.all_gather == ring.all_to_all == ("ring", "ring")
    assert ring.collective_optimization == "localBWAware"
    assert ring.roofline_enabled is False
    assert ring.ignored == {"boost-mode": 0}

    base = SystemConfig.from_json(CFG / "ring_2d_s4_a1_baseline.json")
    assert base.collective_optimization == "baseline"
    assert base != ring

    direct = SystemConfig.from_json(CFG / "direct_1d_s4_a1.json")
    assert direct.all_to_all == ("direct",)


# ----------------------------------------------------------------------------- network geometry


def test_coords_dimension_zero_fastest():
    net = Network.simple("Ring", [4, 4], 50, 500)
    assert net.coords(5).tolist() == [1, 1]
    assert net.coords(4).tolist() == [0, 1]
    assert net.coords(3).tolist() == [3, 0]
    assert int(net.npu_of([1, 1])) == 5


def test_coords_round_trip_4x4x2():
    net = Network.simple(["Ring", "FullyConnected", "Switch"], [4, 4, 2], [200, 100, 50], [50, 500, 2000])
    assert net.npus == 32
    ids = np.arange(32)
    c = net.coords(ids)
    assert c.shape == (32, 3)
    assert (c[:, 0] == ids % 4).all() and (c[:, 1] == (ids // 4) % 4).all() and (c[:, 2] == ids // 16).all()
    assert (net.npu_of(c) == ids).all()
    assert net.coords(np.arange(32).reshape(4, 8)).shape == (4, 8, 3)
    # every coordinate appears once
    assert len({tuple(r) for r in c.tolist()}) == 32
    assert int(net.npu_of((3, 3, 1))) == 31


def test_coords_bad_input():
    net = Network.simple("Ring", [4, 4], 50, 500)
    with raises("out of range"):
        net.coords(16)
    with raises("out of range"):
        net.coords([0, -1])
    with raises("integers"):
        net.coords(1.5)
    with raises("last axis of 2"):
        net.npu_of([1, 2, 3])
    with raises("out of range for dimension 1"):
        net.npu_of([1, 4])


# ----------------------------------------------------------------------------- network parsing


def test_network_from_dict_and_round_trip():
    d = {
        "topology": ["ring", "FULLYCONNECTED", "switch"],
        "npus_count": [2, 8, 4],
        "bandwidth": [200, 100.0, 50],
        "latency": [50, 500.5, 2000],
    }
    net = Network.from_dict(d)
    assert [x.topology for x in net.dims] == ["Ring", "FullyConnected", "Switch"]
    assert net.npus == 64
    assert net.dims[1].latency == 500.5
    assert Network.from_dict(net.to_dict()) == net
    assert net.to_dict()["topology"] == list(TOPOLOGIES)
    # single values for a one-dimensional network
    assert Network.from_dict({"topology": "Ring", "npus_count": 8, "bandwidth": 50, "latency": 500}) == Network.simple(
        "Ring", 8, 50, 500
    )
    # extra keys are kept aside, not part of equality
    extra = Network.from_dict({**d, "packet_size": 1500})
    assert extra == net and extra.ignored == {"packet_size": 1500}


def test_network_to_yaml_round_trip(tmp_path):
    net = Network.simple(["Ring", "Switch", "FullyConnected"], [4, 2, 2], [50, 12.5, 1e-05], [500, 0, 1.5e11])
    p = write(tmp_path, "n.yml", net.to_yaml())
    assert Network.from_yaml(p) == net


def test_simple_broadcasts_scalars():
    net = Network.simple("Switch", [2, 3, 4], 25.0, [1, 2, 3])
    assert net.shape == (2, 3, 4)
    assert all(d.topology == "Switch" and d.bandwidth == 25.0 for d in net.dims)
    assert [d.latency for d in net.dims] == [1, 2, 3]
    with raises("different lengths"):
        Network.simple("Ring", [2, 3], [1, 2, 3], 0)


@pytest.mark.parametrize(
    "d, match",
    [
        ({"topology": ["Ring"], "npus_count": [4], "bandwidth": [50]}, "missing 'latency'"),
        (
            {"topology": ["Ring", "Ring"], "npus_count": [4], "bandwidth": [50, 50], "latency": [1, 1]},
            "'npus_count': has 1 entries but 'topology' has 2",
        ),
        (
            {"topology": ["Torus"], "npus_count": [4], "bandwidth": [50], "latency": [1]},
            r"'topology'\[0\]: expected one of Ring",
        ),
        (
            {"topology": ["Ring"], "npus_count": [0], "bandwidth": [50], "latency": [1]},
            r"'npus_count'\[0\]: expected an integer >= 1",
        ),
        (
            {"topology": ["Ring"], "npus_count": [4.5], "bandwidth": [50], "latency": [1]},
            r"'npus_count'\[0\]: expected an integer",
        ),
        (
            {"topology": ["Ring"], "npus_count": [True], "bandwidth": [50], "latency": [1]},
            r"'npus_count'\[0\]: expected an integer",
        ),
        (
            {"topology": ["Ring"], "npus_count": [4], "bandwidth": [0], "latency": [1]},
            r"'bandwidth'\[0\]: expected a number >= 1e-06 GB/s, got 0",
        ),
        (
            {"topology": ["Ring"], "npus_count": [4], "bandwidth": ["50"], "latency": [1]},
            r"'bandwidth'\[0\]: expected a number",
        ),
        (
            {"topology": ["Ring"], "npus_count": [4], "bandwidth": [50], "latency": [-1]},
            r"'latency'\[0\]: expected a number >= 0 ns",
        ),
        ({"topology": ["Ring"], "npus_count": [4], "bandwidth": [float("inf")], "latency": [1]}, "finite"),
        ({"topology": [], "npus_count": [], "bandwidth": [], "latency": []}, "at least one dimension"),
        ({"topology": None, "npus_count": [4], "bandwidth": [50], "latency": [1]}, "'topology': expected a list"),
        (
            {"topology": "Ring, Ring", "npus_count": [4, 4], "bandwidth": [50, 50], "latency": [1, 1]},
            "'topology': expected a list with one entry per dimension, got 'Ring, Ring'",
        ),
        ([1, 2], "expected a network description"),
    ],
)
def test_network_bad_dict(d, match):
    with raises(match):
        Network.from_dict(d, source="net.yml")
    with raises("net.yml"):
        Network.from_dict(d, source="net.yml")


def test_network_npu_count_accepts_integral_float():
    net = Network.from_dict({"topology": ["Ring"], "npus_count": [4.0], "bandwidth": [50], "latency": [1]})
    assert net.dims[0].npus == 4 and isinstance(net.dims[0].npus, int)


def test_dimension_validates_directly():
    assert Dimension("fullyconnected", 8, 10, 0).topology == "FullyConnected"
    with raises("Dimension.npus"):
        Dimension("Ring", 0, 10, 0)
    with raises("Network.dims"):
        Network(())


def test_network_yaml_errors_name_file_and_line(tmp_path):
    p = write(
        tmp_path, "bad.yml", "topology: [ Ring, Ring ]\nnpus_count: [ 4, 4 ]\nbandwidth: [ 50 ]\nlatency: [ 1, 1 ]\n"
    )
    with raises(re.escape(f"{p}:3: 'bandwidth': has 1 entries but 'topology' has 2")):
        Network.from_yaml(p)
    p = write(tmp_path, "bad2.yml", "topology: [ Ring ]\nnpus_count: [ -4 ]\nbandwidth: [ 50 ]\nlatency: [ 1 ]\n")
    with raises(re.escape(f"{p}:2: 'npus_count'[0]: expected an integer >= 1, got -4")):
        Network.from_yaml(p)
    with raises(re.escape(f"{tmp_path / 'nope.yml'}: cannot read")):
        Network.from_yaml(tmp_path / "nope.yml")


# ----------------------------------------------------------------------------- YAML


def test_yaml_features():
    text = (
        "# Analytical Network Input File\n"
        "---\n"
        "\n"
        "topology: [ Ring, FullyConnected, Switch ]  # Ring, Switch, FullyConnected\n"
        "npus_count: [2, 8 ,4,]   \n"  # trailing comma and spaces
        "bandwidth:\n"
        "  - 200.0   # GB/s\n"
        "  - 1e2\n"  # an exponent without a dot or sign: a number, as in YAML 1.2 and ASTRA-sim's yaml-cpp
        "  - .5\n"
        "latency:\n"
        "- 50\n"  # block list at the key's indentation
        "- -0.5\n"
        "- +7\n"
        "name: 'it''s #1'   # comment\n"
        'label: "a \\"b\\" \\u00e9"\n'
        "plain: hello world#not a comment\n"
        "flags: [ true, False, null, ~ ]\n"
        "hex: 0x1F\n"
        "quoted_list: [ 'a, b', \"c]\", it's ]\n"
        "multi: [ 1,\n"
        "         2,   # two\n"
        "         3 ]\n"
        "empty: []\n"
        "nothing:\n"
        '"quoted key": 1\n'
        "exponents: [ 1.5e3, 1e-05, 2.0E+2 ]\n"
        "nested: { a: [ 1, [ 2 ] ], b: &x 3 }\n"  # full YAML: flow mappings, nesting, anchors, aliases
        "again: *x\n"
    )
    d = parse_yaml(text, "t.yml")
    assert d == {
        "topology": ["Ring", "FullyConnected", "Switch"],
        "npus_count": [2, 8, 4],
        "bandwidth": [200.0, 100.0, 0.5],
        "latency": [50, -0.5, 7],
        "name": "it's #1",
        "label": 'a "b" é',
        "plain": "hello world#not a comment",
        "flags": [True, False, None, None],
        "hex": 31,
        "quoted_list": ["a, b", "c]", "it's"],
        "multi": [1, 2, 3],
        "empty": [],
        "nothing": None,
        "quoted key": 1,
        "exponents": [1500.0, 1e-05, 200.0],
        "nested": {"a": [1, [2]], "b": 3},
        "again": 3,
    }
    assert isinstance(d["npus_count"][0], int) and isinstance(d["bandwidth"][1], float)
    assert parse_yaml("a: '4'\n")["a"] == "4"  # quoted stays a string
    assert parse_yaml("") == {} and parse_yaml("---\n# nothing\n") == {}
    assert parse_yaml("\ufeffa: 1\r\nb: 2\r\n") == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    "text, line, match",
    [
        ("a: 1\na: 2\n", 2, r"duplicate key 'a' \(first on line 1\)"),
        ("a: 1\n  b: 2\n", 2, "not valid YAML: mapping values are not allowed here"),
        ("a: b: c\n", 1, "mapping values are not allowed here"),
        ("a: [1, , 2]\n", 1, "expected the node content, but found ','"),
        ("a: [1, 2\nb: 3\n", 2, r"while parsing a flow sequence \(line 1\), expected ',' or '\]', but got ':'"),
        ("a: [1, 2] x\n", 1, "expected <block end>, but found '<scalar>'"),
        ('a: "x" y\n', 1, "expected <block end>, but found '<scalar>'"),
        ("a: 1\n- 2\n", 2, "expected <block end>, but found '-'"),
        ("a: 'open\n", 2, r"while scanning a quoted scalar \(line 1\), found unexpected end of stream"),
        ("# ok\n\nlatency: [ 1 ]\nbandwidth: [ 'x ]\n", 5, r"quoted scalar \(line 4\)"),
        ("a:\n\t- 1\n", 2, r"found character '\\t' that cannot start any token"),
        ("a: 1\n---\nb: 2\n", 2, r"expected a single document in the stream \(line 1\), but found another document"),
        ('a: "\\q"\n', 1, "found unknown escape character 'q'"),
        ("a: !foo 1\n", 1, "could not determine a constructor for the tag '!foo'"),
        ("a: *x\n", 1, "found undefined alias 'x'"),
        ("a: 1\nb: x\x07\n", 2, "unacceptable character #x0007"),
        # (the kind, not the content: a file that is no config at all, a key, must not reach a log)
        ("just text\n", None, r"expected a mapping of keys to values, got text \(9 characters\)$"),
        ("- 1\n", None, r"expected a mapping of keys to values, got a list of 1$"),
    ],
)
def test_yaml_errors(text, line, match):
    with pytest.raises(ChakraError) as e:
        parse_yaml(text, "cfg.yml")
    msg = str(e.value)
    assert re.match(rf"cfg\.yml:{line}(:\d+)?: " if line else r"cfg\.yml: ", msg), msg
    assert re.search(match, msg), msg
    assert "\n" not in msg


def test_yaml_unclosed_flow_list_names_its_line():
    with raises(r"cfg.yml:4:1: not valid YAML: while parsing a flow sequence \(line 2\), expected ',' or '\]'"):
        parse_yaml("a: 1\nb: [1, 2\n# end\n", "cfg.yml")


def test_network_yaml_syntax_and_shape_errors(tmp_path):
    p = write(tmp_path, "n.yml", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50\nlatency: [ 1 ]\n")
    with raises(re.escape(f"{p}:4:8: not valid YAML: while parsing a flow sequence (line 3)")):
        Network.from_yaml(p)
    p = write(tmp_path, "n.yml", "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: { a: 1 }\nlatency: [ 1 ]\n")
    with raises(re.escape(f"{p}:3: 'bandwidth': expected a list with one entry per dimension, got a mapping")):
        Network.from_yaml(p)
    p = write(tmp_path, "n.yml", "topology: [ Ring ]\nnpus_count: [ [4] ]\nbandwidth: [ 50 ]\nlatency: [ 1 ]\n")
    with raises(re.escape(f"{p}:2: 'npus_count'[0]: expected an integer, got a list [4]")):
        Network.from_yaml(p)
    p = write(tmp_path, "n.yml", "- Ring\n")
    with raises(re.escape(f"{p}: expected a network description (a mapping of keys to values), got a list of 1")):
        Network.from_yaml(p)
    p = write(tmp_path, "n.yml", "# nothing yet\n")
    with raises(re.escape(f"{p}: missing 'topology', 'npus_count', 'bandwidth', 'latency'")):
        Network.from_yaml(p)


# ----------------------------------------------------------------------------- system config


def test_system_defaults():
    sc = SystemConfig()
    assert sc == SystemConfig.from_dict({})
    assert (sc.scheduling_policy, sc.endpoint_delay, sc.active_chunks_per_dimension, sc.preferred_dataset_splits) == (
        "LIFO",
        10,
        1,
        1,
    )
    assert sc.all_reduce == sc.reduce_scatter == sc.all_gather == sc.all_to_all == ("ring",)
    assert sc.collective_optimization == "baseline"
    assert sc.local_mem_bw == 0 and sc.peak_perf == 0 and sc.roofline_enabled is False
    assert hash(sc) == hash(SystemConfig())


def test_system_round_trip_and_ignored():
    d = {
        "scheduling-policy": "EXPLICIT",
        "endpoint-delay": 25.0,
        "active-chunks-per-dimension": 2,
        "preferred-dataset-splits": 64,
        "all-reduce-implementation": ["ring", "direct8", "halvingDoubling"],
        "reduce-scatter-implementation": "oneRing",
        "all-gather-implementation": ["doubleBinaryTree"],
        "all-to-all-implementation": ["oneDirect16", "oneHalvingDoubling"],
        "collective-optimization": "localBWAware",
        "local-mem-bw": 3350,
        "roofline-enabled": True,
        "peak-perf": 989.5,
        "boost-mode": 1,
        "intra-dimension-scheduling": "FIFO",
        "endpoint_delay": 3,
    }
    sc = SystemConfig.from_dict(d, "sys.json")
    assert sc.endpoint_delay == 25 and isinstance(sc.endpoint_delay, int)
    assert sc.reduce_scatter == ("oneRing",)
    assert sc.all_reduce == ("ring", "direct8", "halvingDoubling")
    assert sc.roofline_enabled is True and sc.local_mem_bw == 3350.0
    assert sc.ignored == {"boost-mode": 1, "intra-dimension-scheduling": "FIFO", "endpoint_delay": 3}
    assert sc.unknown_keys() == ("endpoint_delay",)
    out = sc.to_dict()
    assert out["roofline-enabled"] == 1 and out["boost-mode"] == 1
    assert out["all-reduce-implementation"] == ["ring", "direct8", "halvingDoubling"]
    back = SystemConfig.from_dict(out)
    assert back == sc and back.ignored == sc.ignored
    json.dumps(out)  # plain JSON types


def test_system_from_json(tmp_path):
    p = write(tmp_path, "s.json", json.dumps({"roofline-enabled": 0, "peak-perf": 0, "replay-only": 1}))
    sc = SystemConfig.from_json(p)
    assert sc.roofline_enabled is False and sc.ignored == {"replay-only": 1}
    assert sc.unknown_keys() == ()
    assert "replay-only" in ASTRA_IGNORED_SYSTEM_KEYS


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("scheduling-policy", "lifo", "expected one of LIFO, FIFO, EXPLICIT.*did you mean 'LIFO'"),
        ("scheduling-policy", 1, "expected one of LIFO"),
        ("endpoint-delay", -1, "expected an integer >= 0"),
        ("endpoint-delay", 1.5, "expected an integer"),
        ("endpoint-delay", "10", "expected an integer"),
        ("active-chunks-per-dimension", 0, "expected an integer >= 1"),
        ("preferred-dataset-splits", 0, "expected an integer >= 1"),
        ("preferred-dataset-splits", True, "expected an integer"),
        ("all-reduce-implementation", ["ring", "tree"], r"\[1\]: unknown algorithm 'tree'"),
        ("all-reduce-implementation", ["Ring"], "did you mean 'ring'"),
        ("all-gather-implementation", 5, "expected a list of algorithm names"),
        ("all-gather-implementation", {"a": 1}, "expected a list of algorithm names"),
        ("all-to-all-implementation", [], "at least one algorithm"),
        ("all-to-all-implementation", [3], r"\[0\]: expected an algorithm name"),
        ("reduce-scatter-implementation", ["direct0"], "window of 'direct0' must be at least 1"),
        ("reduce-scatter-implementation", ["oneDoubleBinaryTree"], "unknown algorithm"),
        ("collective-optimization", "localbwaware", "did you mean 'localBWAware'"),
        ("local-mem-bw", -5, "expected a number >= 0"),
        ("local-mem-bw", "fast", "expected a number"),
        ("peak-perf", float("nan"), "finite"),
        ("roofline-enabled", "yes", "expected 0 or 1"),
    ],
)
def test_system_bad_values(key, value, match):
    with pytest.raises(ChakraError) as e:
        SystemConfig.from_dict({key: value}, source="sys.json")
    msg = str(e.value)
    assert msg.startswith(f"sys.json: {key!r}"), msg
    assert re.search(match, msg), msg


def test_system_roofline_needs_peak_and_bandwidth():
    with raises("'roofline-enabled': the roofline model needs a positive peak-perf"):
        SystemConfig.from_dict({"roofline-enabled": 1, "local-mem-bw": 1600}, "s.json")
    with raises("needs a positive local-mem-bw"):
        SystemConfig.from_dict({"roofline-enabled": 1, "peak-perf": 900}, "s.json")
    with raises("SystemConfig.roofline_enabled"):
        SystemConfig(roofline_enabled=True)


def test_system_json_errors_name_file_line_and_key(tmp_path):
    p = write(tmp_path, "s.json", '{\n  "scheduling-policy": "LIFO",\n  "endpoint-delay": -3\n}\n')
    with raises(re.escape(f"{p}:3: 'endpoint-delay': expected an integer >= 0, got -3")):
        SystemConfig.from_json(p)
    p = write(tmp_path, "broken.json", '{\n  "endpoint-delay": 10,\n}\n')
    # Python 3.13's json points at the trailing comma (2:23), earlier ones at what follows it (3:1)
    with raises(re.escape(f"{p}:") + r"(3:1|2:23): not valid JSON"):
        SystemConfig.from_json(p)
    p = write(tmp_path, "dup.json", '{"endpoint-delay": 10, "endpoint-delay": 20}')
    with raises("'endpoint-delay' appears twice"):
        SystemConfig.from_json(p)
    p = write(tmp_path, "list.json", "[1, 2]")
    with raises("expected a system configuration"):
        SystemConfig.from_json(p)


def test_system_direct_construction_validates_and_normalizes():
    sc = SystemConfig(all_reduce=["ring", "ring"], all_gather="direct", endpoint_delay=5.0)
    assert sc.all_reduce == ("ring", "ring") and sc.all_gather == ("direct",) and sc.endpoint_delay == 5
    with raises("SystemConfig.scheduling_policy"):
        SystemConfig(scheduling_policy="RANDOM")
    with raises("is a key with an effect"):
        SystemConfig(ignored={"endpoint-delay": 3})


def test_parse_algorithm():
    for a in ALGORITHMS:
        assert parse_algorithm(a) == (a, None)
    assert parse_algorithm("direct8") == ("direct", 8)
    assert parse_algorithm("oneDirect32") == ("oneDirect", 32)
    with raises("unknown algorithm 'hierarchicalRing'"):
        parse_algorithm("hierarchicalRing")
    with raises("unknown algorithm"):
        parse_algorithm("direct-1")


# ----------------------------------------------------------------------------- memory config


def test_memory_config(tmp_path):
    assert MemoryConfig() == MemoryConfig.from_dict({"memory-type": "NO_MEMORY_EXPANSION"})
    p = write(
        tmp_path,
        "m.json",
        json.dumps(
            {
                "memory-type": "PER_NODE_MEMORY_EXPANSION",
                "remote-mem-latency": 100,
                "remote-mem-bw": 6.5,
                "num-nodes": 2,
                "num-npus-per-node": 4,
                "local-mem-bw": 1000,
            }
        ),
    )
    m = MemoryConfig.from_json(p)
    assert (m.memory_type, m.remote_mem_latency, m.remote_mem_bw, m.num_nodes, m.num_npus_per_node) == (
        "PER_NODE_MEMORY_EXPANSION",
        100.0,
        6.5,
        2,
        4,
    )
    assert m.ignored == {"local-mem-bw": 1000}
    assert MemoryConfig.from_dict(m.to_dict()) == m
    for t in MEMORY_TYPES[2:]:
        assert MemoryConfig.from_dict({"memory-type": t, "remote-mem-bw": 1}).memory_type == t


@pytest.mark.parametrize(
    "d, key, match",
    [
        ({"memory-type": "CXL"}, "memory-type", "expected one of NO_MEMORY_EXPANSION"),
        ({"memory-type": "memory_pool"}, "memory-type", "did you mean 'MEMORY_POOL'"),
        ({"remote-mem-latency": -1}, "remote-mem-latency", "expected a number >= 0"),
        ({"remote-mem-bw": "10"}, "remote-mem-bw", "expected a number"),
        ({"num-nodes": 1.5}, "num-nodes", "expected an integer"),
        ({"memory-type": "MEMORY_POOL"}, "remote-mem-bw", "MEMORY_POOL needs a positive remote-mem-bw"),
        (
            {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-bw": 1, "num-nodes": 2},
            "num-npus-per-node",
            "needs a positive num-npus-per-node",
        ),
    ],
)
def test_memory_bad_values(d, key, match):
    with pytest.raises(ChakraError) as e:
        MemoryConfig.from_dict(d, source="mem.json")
    msg = str(e.value)
    assert msg.startswith(f"mem.json: {key!r}: "), msg
    assert re.search(match, msg), msg
