"""The schema is the wire contract: field numbers and enums must match the Chakra format."""

from pathlib import Path

import google.protobuf
import pytest

from chakra_trace.schema import proto as pb
from chakra_trace.schema.enums import ATTR_MEMBER, CollectiveType, NodeType, parse_collective, parse_node_type

PROTO = Path(pb.__file__).with_name("chakra.proto")


def test_shipped_proto_matches_runtime_descriptor():
    assert PROTO.read_text() == pb.proto_text()


def test_node_field_numbers():
    f = {x.name: x.number for x in pb.Node.DESCRIPTOR.fields}
    assert f == {
        "id": 1,
        "name": 2,
        "type": 3,
        "ctrl_deps": 4,
        "data_deps": 5,
        "start_time_micros": 6,
        "duration_micros": 7,
        "inputs": 8,
        "outputs": 9,
        "attr": 10,
    }
    assert {x.name: x.number for x in pb.GlobalMetadata.DESCRIPTOR.fields} == {"version": 1, "attr": 2}
    assert {x.name: x.number for x in pb.IOInfo.DESCRIPTOR.fields} == {"values": 1, "shapes": 2, "types": 3}


def test_attribute_oneof_numbers():
    f = {x.name: x.number for x in pb.AttributeProto.DESCRIPTOR.fields}
    assert f["name"] == 1 and f["doc_string"] == 2
    expected = [
        "double",
        "float",
        "int32",
        "int64",
        "uint32",
        "uint64",
        "sint32",
        "sint64",
        "fixed32",
        "fixed64",
        "sfixed32",
        "sfixed64",
        "bool",
        "string",
        "bytes",
    ]
    for i, t in enumerate(expected):
        assert f[f"{t}_val"] == 3 + 2 * i
        assert f[f"{t}_list"] == 4 + 2 * i
    oneof = pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"]
    assert len(oneof.fields) == 30


def test_enums():
    assert [(t.name, int(t)) for t in NodeType] == [
        ("INVALID_NODE", 0),
        ("METADATA_NODE", 1),
        ("MEM_LOAD_NODE", 2),
        ("MEM_STORE_NODE", 3),
        ("COMP_NODE", 4),
        ("COMM_SEND_NODE", 5),
        ("COMM_RECV_NODE", 6),
        ("COMM_COLL_NODE", 7),
    ]
    assert [int(t) for t in CollectiveType] == list(range(10))
    assert CollectiveType.REDUCE_SCATTER_BLOCK == 8 and CollectiveType.BARRIER == 9
    enum = pb.Node.DESCRIPTOR.fields_by_name["type"].enum_type
    assert {v.name: v.number for v in enum.values} == {t.name: int(t) for t in NodeType}


def test_vocabulary_members_are_what_consumers_read():
    assert ATTR_MEMBER["comm_type"] == "int64_val"
    assert ATTR_MEMBER["comm_size"] == "int64_val"
    assert ATTR_MEMBER["tensor_size"] == "uint64_val"
    assert ATTR_MEMBER["is_cpu_op"] == "bool_val"
    assert ATTR_MEMBER["pg_name"] == "string_val"
    for k in ("comm_src", "comm_dst", "comm_tag", "comm_priority"):
        assert ATTR_MEMBER[k] == "int32_val"


def test_parsers():
    assert parse_node_type("comp") == 4 and parse_node_type("COMM_COLL_NODE") == 7 and parse_node_type(5) == 5
    assert parse_collective("all_gather") == 2 and parse_collective("9") == 9
    with pytest.raises(ValueError, match="unknown node type"):
        parse_node_type("bogus")


def test_messages_roundtrip_on_this_runtime():
    m = pb.Node(id=2**64 - 1, name="x", type=7, ctrl_deps=[1, 2], data_deps=[3])
    a = m.attr.add(name="comm_size")
    a.int64_val = -5
    assert pb.Node.FromString(m.SerializeToString()) == m
    assert google.protobuf.__version__  # the CI also runs this file under protobuf 4.21


def test_private_pool_does_not_touch_default_pool():
    from google.protobuf import descriptor_pool

    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("ChakraProtoMsg.Node")
