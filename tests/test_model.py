"""The columnar model: building, typed attribute access, editing, workloads."""

import json

import numpy as np
import pytest

from chakra_trace import (
    Attribute,
    CollectiveType,
    IOInfo,
    Node,
    NodeType,
    Trace,
    TraceBuilder,
    Workload,
    discover,
    read_trace,
    write_trace,
)
from chakra_trace.errors import ChakraError, TraceFormatError
from chakra_trace.io.workload import read_comm_groups


def small() -> Trace:
    b = TraceBuilder(metadata={"schema": "test", "pid": 7})
    x = b.comp("aten::mm", 120, num_ops=2_000_000, tensor_size=4096, rf_id=3)
    y = b.collective("ALL_GATHER", 1 << 20, deps=[x], pg_name="dp", comm_priority=-2)
    b.send(1, 64, tag=9, deps=[y])
    b.recv(1, 64, tag=9, deps=[y], ctrl_deps=[x])
    return b.build()


def test_builder_columns_and_typed_access():
    t = small()
    assert len(t) == 4
    assert t.ids.tolist() == [0, 1, 2, 3]
    assert t.types.tolist() == [4, 7, 5, 6]
    assert t.name_array.tolist() == ["aten::mm", "all_gather", "send", "recv"]
    assert t.duration[0] == 120
    assert t.data_deps(1).tolist() == [0] and t.ctrl_deps(3).tolist() == [0]
    assert t.has("comm_type").tolist() == [False, True, False, False]
    assert t.comm_type[1] == CollectiveType.ALL_GATHER and t.comm_size[1] == 1 << 20
    assert t.attr(1, "pg_name") == "dp" and t.attr(1, "comm_priority") == -2
    assert t.attr(2, "comm_dst") == 1 and t.attr(3, "comm_src") == 1 and t.attr(3, "comm_tag") == 9
    assert t.attr(0, "num_ops") == 2_000_000 and t.attr(0, "tensor_size") == 4096
    assert t.attr(0, "rf_id") == 3  # not a column: lives in the extras
    assert t.attr(1, "rf_id", "none") == "none"
    vals, present = t.attr_array("rf_id")
    assert present.tolist() == [True, False, False, False] and vals[0] == 3
    groups, has = t.attr_array("pg_name")
    assert groups[1] == "dp" and has.tolist() == [False, True, False, False]
    meta = {a.name: a for a in t.metadata.attr}
    assert meta["schema"].string_val == "test" and meta["pid"].int64_val == 7


def test_from_columns_matches_the_builder(tmp_path):
    """The bulk constructor gives the same nodes (and bytes) as building node by node."""
    b = TraceBuilder(metadata={"schema": "test"})
    x = b.comp("aten::mm", 120, num_ops=2_000_000, tensor_size=4096, rf_id=3, op_schema="mm(Tensor a) -> Tensor")
    y = b.collective("ALL_GATHER", 1 << 20, deps=[x], pg_name="dp", rf_id=-5)
    b.comp("[host]", 7, deps=[x, y], is_cpu_op=True, tid=-1)
    built = b.build()
    bulk = Trace.from_columns(
        ["aten::mm", "all_gather", "[host]"],
        [0, 1, 2],
        [NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMP_NODE],
        duration=[120, 0, 7],
        data=([0, 0, 1, 3], [0, 0, 1]),
        attrs={
            "num_ops": ([2_000_000, 0, 0], [True, False, False]),
            "tensor_size": ([4096, 0, 0], [True, False, False]),
            "is_cpu_op": ([False, False, True], [True, True, True]),
            "comm_type": ([0, CollectiveType.ALL_GATHER, 0], [False, True, False]),
            "comm_size": ([0, 1 << 20, 0], [False, True, False]),
            "pg_name": (([0, 0, 0], ["dp"]), [False, True, False]),
            "op_schema": (([0, 0, 0], ["mm(Tensor a) -> Tensor"]), [True, False, False]),
            "rf_id": (np.array([3, -5, 0]), [True, True, False]),
            "tid": (np.array([0, 0, -1]), [False, False, True]),
        },
        metadata=built.metadata,
    )

    def canonical(t):  # attribute order aside (the builder keeps the order it was given)
        return [
            (
                n.id,
                n.name,
                n.type,
                n.data_deps,
                n.duration_micros,
                sorted((a.name, a.member or "", repr(a.value)) for a in n.attrs),
            )
            for n in t
        ]

    assert canonical(bulk) == canonical(built)
    assert bulk.attr_array("rf_id")[0].tolist() == [3, -5, 0]
    write_trace(bulk, tmp_path / "a.et")
    assert read_trace(tmp_path / "a.et").equals(bulk)


def test_node_view_has_canonical_members():
    n = small().node(1)
    members = {a.name: a.member for a in n.attrs}
    assert members["comm_type"] == "int64_val" and members["comm_size"] == "int64_val"
    assert members["comm_priority"] == "int32_val" and members["pg_name"] == "string_val"
    assert small().node(0).attr("tensor_size") == 4096
    assert {a.name: a.member for a in small().node(0).attrs}["tensor_size"] == "uint64_val"


def test_noncanonical_known_attribute_is_kept_not_columned():
    t = Trace.from_nodes(
        [
            Node(
                1,
                "x",
                NodeType.COMM_COLL_NODE,
                attrs=[Attribute("comm_size", 77, "uint64_val"), Attribute("comm_type", 2)],
            )
        ]
    )
    assert not t.has("comm_size")[0] and t.has("comm_type")[0]
    n = t.node(0)
    assert [(a.name, a.member, a.value) for a in n.attrs if a.name == "comm_size"] == [("comm_size", "uint64_val", 77)]


def test_from_nodes_roundtrip_everything(tmp_path):
    nodes = [
        Node(
            5,
            "a",
            NodeType.COMP_NODE,
            ctrl_deps=[9],
            data_deps=[2**64 - 1],
            start_time_micros=10,
            duration_micros=3,
            inputs=IOInfo("[1]", "[[2]]", "['Tensor']"),
            outputs=IOInfo(),
            attrs=[
                Attribute("f", [1.5, float("inf")], "float_list"),
                Attribute("s", -3, "sint64_val"),
                Attribute("b", b"\x00\xff"),
                Attribute("doc", 1, doc="why"),
                Attribute("empty", None),
            ],
            unknown_fields=b"\x58\x05",
        ),
        Node(2**64 - 1, "", 1000),
    ]
    t = Trace.from_nodes(nodes)
    for path in (tmp_path / "x.et", tmp_path / "x.et.gz"):
        write_trace(t, path)
        back = read_trace(path)
        assert t.differences(back) == []
        assert [back.node(i) for i in range(len(back))] == [t.node(i) for i in range(len(t))]
    got = t.node(0)
    assert got.inputs == IOInfo("[1]", "[[2]]", "['Tensor']") and got.outputs == IOInfo()
    assert got.unknown_fields == b"\x58\x05"
    assert got.attr("s") == -3 and got.attr("b") == b"\x00\xff"
    assert [a.doc for a in got.attrs if a.name == "doc"] == ["why"]
    assert t.types[1] == 1000


def test_take_concat_with_deps_and_set_attr():
    t = small()
    sub = t.take([3, 1])
    assert sub.ids.tolist() == [3, 1] and sub.data_deps(0).tolist() == [1] and sub.attr(1, "pg_name") == "dp"
    both = Trace.concat([t, sub])
    assert len(both) == 6 and both.attr(5, "pg_name") == "dp" and both.name_array[4] == "recv"
    keep = np.ones(t.data.size, bool)
    keep[0] = False
    pruned = t.with_deps("data", keep)
    assert pruned.data.size == t.data.size - 1 and pruned.data_deps(1).tolist() == []
    t2 = t.copy()
    t2.set_attr("comm_size", 5, rows=[0])
    t2.set_attr("pg_name", "tp", rows=[0])
    assert t2.attr(0, "comm_size") == 5 and t2.attr(0, "pg_name") == "tp" and t.attr(0, "comm_size") is None
    t2.clear_attr("comm_size", rows=[0])
    assert t2.attr(0, "comm_size") is None


def test_index_of_and_dep_rows():
    t = small()
    assert t.index_of([3, 0, 42]).tolist() == [3, 0, -1]
    src, dst, ids = t.dep_rows("data")
    assert src.tolist() == [1, 2, 3] and dst.tolist() == [0, 1, 1]
    with pytest.raises(KeyError):
        t.row(42)


def test_iteration_yields_nodes():
    names = [n.name for n in small()]
    assert names == ["aten::mm", "all_gather", "send", "recv"]


def test_empty_trace_roundtrip(tmp_path):
    t = Trace(0)
    write_trace(t, tmp_path / "e.et")
    assert (tmp_path / "e.et").read_bytes() == b"\x00"
    assert len(read_trace(tmp_path / "e.et")) == 0


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "t.et"
    write_trace(small(), path)
    before = path.read_bytes()
    from chakra_trace.io import et

    def boom(trace, chunk=0):
        yield b"\x00"
        raise RuntimeError("disk full")

    monkeypatch.setattr(et, "encode_trace", boom)
    with pytest.raises(RuntimeError):
        et.write_trace(small(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.et"]


def test_workload_discovery_and_groups(tmp_path):
    t = small()
    Workload({0: t, 1: t}).save(tmp_path / "job")
    write_trace(t, tmp_path / "other.0.et")
    assert list(discover(tmp_path / "job")) == [0, 1]
    (tmp_path / "groups.json").write_text(json.dumps({"dp": [1, 0]}))
    w = Workload.open(tmp_path / "job", comm_groups=tmp_path / "groups.json")
    assert w.ranks == [0, 1] and w.groups == {"dp": [1, 0]}  # listed order: a group's ring runs in it
    assert w.group_ranks("") == [0, 1] and w.all_groups()["dp"] == [1, 0]
    with pytest.raises(ChakraError, match="no files named"):
        Workload.open(tmp_path / "missing")
    (tmp_path / "bad.json").write_text(json.dumps({"dp": ["x"]}))
    with pytest.raises(TraceFormatError, match="list of integer ranks"):
        read_comm_groups(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text(json.dumps({"dp": [0, 1, 0]}))
    with pytest.raises(TraceFormatError, match="listed twice"):
        read_comm_groups(tmp_path / "bad.json")


def test_resnet_numbers(resnet_path):
    t = read_trace(resnet_path)
    assert len(t) == 3664
    assert t.node_type_counts() == {"COMP_NODE": 3643, "COMM_COLL_NODE": 21}
    assert t.data.size == 181_878
    c = t.collectives()
    assert c["ALL_REDUCE"] == {"count": 5, "bytes": 102_228_128}
    assert c["BROADCAST"] == {"count": 2, "bytes": 212_904}


def test_info_json_cli(resnet_path, capsys):
    from chakra_trace.cli import main

    assert main(["info", str(resnet_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nodes"] == 3664 and out["node_types"] == {"COMP_NODE": 3643, "COMM_COLL_NODE": 21}
    assert out["data_edges"] == 181_878 and out["ctrl_edges"] == 3664
    assert out["collectives"]["ALL_REDUCE"] == {"count": 5, "bytes": 102_228_128}
    assert out["collectives_missing_type"] == 14


def test_attribute_order_kept_through_edits(tmp_path):
    odd = Node(
        7,
        "coll",
        NodeType.COMM_COLL_NODE,
        attrs=[Attribute("tid", 3), Attribute("comm_type", 0), Attribute("rf_id", 9), Attribute("comm_size", 64)],
    )
    plain = Node(8, "mm", attrs=[Attribute("is_cpu_op", True), Attribute("tid", 1)])
    t = Trace.from_nodes([plain, odd, plain])
    names = ["tid", "comm_type", "rf_id", "comm_size"]
    assert [a.name for a in t.node(1).attrs] == names
    assert t.placed_rows.tolist() == [1, 1]
    for view in (t.take([1, 1, 0]), t.slice(1, 2), Trace.concat([t, t]), t.copy()):
        for i in range(len(view)):
            if view.ids[i] == 7:
                assert [a.name for a in view.node(i).attrs] == names
    assert Trace.concat([t, t]).placed_rows.tolist() == [1, 1, 4, 4]
    # an edited value stays in place; a removed one disappears; a new one goes first
    e = t.copy()
    e.set_attr("comm_size", 128, rows=[1])
    e.clear_attr("comm_type", rows=[1])
    e.set_attr("comm_src", 2, rows=[1])
    got = [(a.name, a.value) for a in e.node(1).attrs]
    assert got == [("comm_src", 2), ("tid", 3), ("rf_id", 9), ("comm_size", 128)]
    write_trace(e, tmp_path / "e.et")
    assert [(a.name, a.value) for a in read_trace(tmp_path / "e.et").node(1).attrs] == got


def test_gzip_prefetch_stops_when_reading_stops(tmp_path):
    import threading

    import chakra_trace as ct

    b = TraceBuilder()
    for i in range(50_000):
        b.add(f"op{i % 7}", id=i, duration=i)
    path = tmp_path / "t.et.gz"
    write_trace(b.build(), path)
    before = threading.active_count()
    from chakra_trace.io import stream

    for block_size in (1 << 10, stream.BLOCK):
        it = ct.iter_nodes(path) if block_size == stream.BLOCK else None
        if it is None:
            blocks = stream.iter_frame_blocks(path, block=block_size)
            next(blocks)
            blocks.close()
        else:
            assert next(it).id == 0
            it.close()
    assert threading.active_count() == before
    assert len(read_trace(path)) == 50_000


def test_an_attribute_held_with_different_members_decodes_each_by_its_own():
    """One name, a bool on one node, an int64 and a uint64 on others (hypothesis found it through
    merge: a node's own bool `rank` made every merged rank read as 1): every value is its own,
    whichever member the decoder meets first."""
    big = 2**63 + 5  # (a uint64 member: no int64 holds it)
    t = Trace.from_nodes(
        [
            Node(0, "a", NodeType.COMP_NODE, attrs=[Attribute("rank", True)]),
            Node(1, "b", NodeType.COMP_NODE, attrs=[Attribute("rank", 6)]),
            Node(2, "c", NodeType.COMP_NODE, attrs=[Attribute("rank", -3)]),
            Node(3, "d", NodeType.COMP_NODE),
            Node(4, "e", NodeType.COMP_NODE, attrs=[Attribute("rank", big)]),
        ]
    )
    assert {a.member for n in t for a in n.attrs} == {"bool_val", "int64_val", "uint64_val"}
    vals, present = t.attr_array("rank")  # no dtype holds them all: each as its node has it
    assert vals[[0, 1, 2, 4]].tolist() == [True, 6, -3, big] and present.tolist() == [True, True, True, False, True]
    vals, present = t.attr_array("rank", np.float64)
    assert vals.tolist() == [1.0, 6.0, -3.0, 0.0, float(big)]
