"""Wire compatibility, checked by an independent minimal decoder written here.

The decoder below knows only what the project's shared docs/chakra-format.md says: varint-framed
messages (GlobalMetadata, then Nodes), tag = field << 3 | wire type, wire types 0/1/2/5, and
the field numbers of Node, IOInfo and AttributeProto. It shares no code with the package,
so files we write are checked against the format, not against our own reader.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.node import Attribute, IOInfo
from conftest import sample

DATA = Path(__file__).parent / "data"

# --------------------------------------------------------------------------- minimal decoder

# AttributeProto oneof members by field number: (member, is list)
_SCALARS = [
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
MEMBER = {}
for _i, _t in enumerate(_SCALARS):
    MEMBER[3 + 2 * _i] = f"{_t}_val"
    MEMBER[4 + 2 * _i] = f"{_t}_list"


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def fields(buf: bytes, start: int = 0, end: int | None = None):
    """Yield (number, wire type, value, size of the value's encoding) for each field.

    value: int for wire types 0, 1, 5 (raw bits); bytes for wire type 2.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag, pos = read_varint(buf, pos, end)
        number, wt = tag >> 3, tag & 7
        assert number > 0, "field number 0"
        if wt == 0:
            v, nxt = read_varint(buf, pos, end)
        elif wt == 1:
            v, nxt = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wt == 5:
            v, nxt = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        elif wt == 2:
            n, p = read_varint(buf, pos, end)
            v, nxt = bytes(buf[p : p + n]), p + n
        else:
            raise ValueError(f"wire type {wt}")
        assert nxt <= end, "field runs past the end of its message"
        yield number, wt, v, nxt - pos
        pos = nxt


def packed_varints(b: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(b):
        v, pos = read_varint(b, pos, len(b))
        out.append(v)
    return out


def signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_attr(b: bytes) -> dict:
    a = {"name": "", "doc": "", "field": None, "wt": None, "raw": None, "size": None}
    for num, wt, v, size in fields(b):
        if num == 1:
            a["name"] = v.decode("utf-8")
        elif num == 2:
            a["doc"] = v.decode("utf-8")
        else:
            assert 3 <= num <= 32, f"attribute field {num}"
            a.update(field=num, wt=wt, raw=v, size=size)
    return a


def attr_value(a: dict):
    """Python value of a decoded attribute (the scalar kinds the tests use, and lists)."""
    member = MEMBER[a["field"]]
    kind = member.rsplit("_", 1)[0]
    if member.endswith("_list"):
        vals = []
        for num, wt, v, _ in fields(a["raw"]):
            assert num == 1
            vals.extend(packed_varints(v) if wt == 2 and kind not in ("string", "bytes") else [v])
        if kind == "bool":
            return [bool(x) for x in vals]
        if kind in ("int32", "int64"):
            return [signed64(x) for x in vals]
        if kind == "string":
            return [x.decode() for x in vals]
        return vals
    v = a["raw"]
    if kind == "bool":
        return bool(v)
    if kind in ("int32", "int64"):
        return signed64(v)
    if kind == "string":
        return v.decode("utf-8")
    if kind == "double":
        return float(np.frombuffer(v.to_bytes(8, "little"), "<f8")[0])
    return v


def decode_io(b: bytes) -> tuple[str, str, str]:
    out = ["", "", ""]
    for num, wt, v, _ in fields(b):
        assert wt == 2 and num in (1, 2, 3)
        out[num - 1] = v.decode("utf-8")
    return tuple(out)


def decode_node(b: bytes) -> dict:
    n = {
        "id": 0,
        "name": "",
        "type": 0,
        "ctrl": [],
        "data": [],
        "start": 0,
        "duration": 0,
        "inputs": None,
        "outputs": None,
        "attrs": [],
        "numbers": [],
    }
    for num, wt, v, _ in fields(b):
        n["numbers"].append(num)
        if num in (1, 3, 6, 7):
            assert wt == 0, f"field {num} wire type {wt}"
            n[{1: "id", 3: "type", 6: "start", 7: "duration"}[num]] = v
        elif num == 2:
            assert wt == 2
            n["name"] = v.decode("utf-8")
        elif num in (4, 5):
            key = "ctrl" if num == 4 else "data"
            n[key] += packed_varints(v) if wt == 2 else [v]
        elif num in (8, 9):
            n["inputs" if num == 8 else "outputs"] = decode_io(v)
        elif num == 10:
            assert wt == 2
            n["attrs"].append(decode_attr(v))
        else:
            raise AssertionError(f"unknown Node field {num}")
    return n


def split_file(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    out, pos = [], 0
    while pos < len(data):
        n, pos = read_varint(data, pos, len(data))
        assert pos + n <= len(data), "truncated"
        out.append(data[pos : pos + n])
        pos += n
    return out


def decode_file(path: Path) -> tuple[dict, list[dict]]:
    msgs = split_file(path)
    meta = {"version": "", "attrs": []}
    for num, _wt, v, _ in fields(msgs[0]):
        if num == 1:
            meta["version"] = v.decode()
        elif num == 2:
            meta["attrs"].append(decode_attr(v))
    return meta, [decode_node(m) for m in msgs[1:]]


def attrs_by_name(node: dict) -> dict:
    return {a["name"]: a for a in node["attrs"]}


# --------------------------------------------------------------------------- traces we write

BIG = 1 << 40  # ids past 32 bits: multi-byte varints everywhere


def sample_trace():
    b = TraceBuilder(metadata={"version": "0.0.4", "schema": "1.0.2-chakra.0.0.4", "pid": 4242})
    expected = []

    def add(node_id, **exp):
        expected.append(dict(id=node_id, **exp))

    x = b.comp(
        "aten::mm",
        120,
        id=BIG,
        num_ops=2_000_000_000,
        tensor_size=1 << 33,
        is_cpu_op=False,
        start=1_700_000_000_000_000,
    )
    add(
        x,
        name="aten::mm",
        type=4,
        ctrl=[],
        data=[],
        start=1_700_000_000_000_000,
        duration=120,
        attrs={"num_ops": (9, 2_000_000_000), "tensor_size": (13, 1 << 33), "is_cpu_op": (27, False)},
    )
    y = b.comp(
        "aten::add_",
        3,
        id=BIG + 300,
        deps=[x, BIG + 500],
        ctrl_deps=[x],
        is_cpu_op=True,
        inputs=IOInfo("[[1, 2, 0, 512, 4, 'cuda:0']]", "[[512]]", "['Tensor(float)']"),
        attrs=[Attribute("rf_id", 77), Attribute("op_schema", "aten::add_(Tensor self) -> Tensor")],
    )
    add(
        y,
        name="aten::add_",
        type=4,
        ctrl=[x],
        data=[x, BIG + 500],
        start=0,
        duration=3,
        inputs=("[[1, 2, 0, 512, 4, 'cuda:0']]", "[[512]]", "['Tensor(float)']"),
        attrs={"is_cpu_op": (27, True), "rf_id": (9, 77), "op_schema": (29, "aten::add_(Tensor self) -> Tensor")},
    )
    ar = b.collective("ALL_REDUCE", 64 << 20, id=BIG + 500, deps=[y], pg_name="dp", duration=900)
    add(
        ar,
        name="all_reduce",
        type=7,
        ctrl=[],
        data=[y],
        start=0,
        duration=900,
        attrs={"comm_type": (9, 0), "comm_size": (9, 64 << 20), "pg_name": (29, "dp"), "is_cpu_op": (27, False)},
    )
    ag = b.collective("ALL_GATHER", 3 << 30, id=BIG + 501, name="nccl:all_gather", deps=[ar], pg_name="")
    add(
        ag,
        name="nccl:all_gather",
        type=7,
        ctrl=[],
        data=[ar],
        start=0,
        duration=0,
        attrs={"comm_type": (9, 2), "comm_size": (9, 3 << 30), "pg_name": (29, ""), "is_cpu_op": (27, False)},
    )
    s = b.send(3, 4096, tag=-5, id=7, deps=[ag], comm_priority=-2)
    add(
        s,
        name="send",
        type=5,
        ctrl=[],
        data=[ag],
        start=0,
        duration=0,
        attrs={
            "comm_dst": (7, 3),
            "comm_size": (9, 4096),
            "comm_tag": (7, -5),
            "comm_priority": (7, -2),
            "is_cpu_op": (27, False),
        },
    )
    r = b.recv(-1, 4096, tag=2**31 - 1, id=0, deps=[s])
    add(
        r,
        name="recv",
        type=6,
        ctrl=[],
        data=[s],
        start=0,
        duration=0,
        attrs={"comm_src": (7, -1), "comm_size": (9, 4096), "comm_tag": (7, 2**31 - 1), "is_cpu_op": (27, False)},
    )
    return b.build(), expected


@pytest.fixture(params=["plain", "gzip"])
def written(request, tmp_path):
    trace, expected = sample_trace()
    p = tmp_path / ("t.0.et" + (".gz" if request.param == "gzip" else ""))
    write_trace(trace, p)
    assert (p.read_bytes()[:2] == b"\x1f\x8b") == (request.param == "gzip")
    return p, trace, expected


def test_nodes_decode_independently(written):
    path, trace, expected = written
    meta, nodes = decode_file(path)
    assert len(nodes) == len(expected) == len(trace)
    for node, exp in zip(nodes, expected):
        for key in ("id", "name", "type", "ctrl", "data", "start", "duration"):
            assert node[key] == exp[key], (key, node, exp)
        assert node["inputs"] == exp.get("inputs")
        got = {a["name"]: (a["field"], attr_value(a)) for a in node["attrs"]}
        assert got == exp["attrs"], node["id"]
        assert all(a["doc"] == "" for a in node["attrs"])


def test_field_order_and_defaults(written):
    """Fields in number order (what protobuf writes); proto3 defaults left out."""
    path, _, _ = written
    _, nodes = decode_file(path)
    for node in nodes:
        assert node["numbers"] == sorted(node["numbers"])
    recv = nodes[-1]
    assert recv["id"] == 0 and 1 not in recv["numbers"]  # id 0 is not written
    assert 6 not in recv["numbers"] and 7 not in recv["numbers"]
    assert 4 not in recv["numbers"]  # no ctrl deps: no empty packed field


def test_attribute_members_and_encodings(written):
    path, _, _ = written
    _, nodes = decode_file(path)
    comp, coll, send, recv = (
        attrs_by_name(nodes[0]),
        attrs_by_name(nodes[2]),
        attrs_by_name(nodes[4]),
        attrs_by_name(nodes[5]),
    )
    # member numbers and wire types consumers (ASTRA-sim) read
    assert (comp["num_ops"]["field"], comp["num_ops"]["wt"]) == (9, 0)
    assert (comp["tensor_size"]["field"], comp["tensor_size"]["wt"]) == (13, 0)
    assert (comp["is_cpu_op"]["field"], comp["is_cpu_op"]["wt"], comp["is_cpu_op"]["raw"]) == (27, 0, 0)
    assert (coll["comm_type"]["field"], coll["comm_type"]["raw"]) == (9, 0)  # ALL_REDUCE written explicitly
    assert (coll["comm_size"]["field"], coll["comm_size"]["wt"]) == (9, 0)
    assert (coll["pg_name"]["field"], coll["pg_name"]["wt"], coll["pg_name"]["raw"]) == (29, 2, b"dp")
    for name in ("comm_dst", "comm_tag", "comm_priority"):
        assert (send[name]["field"], send[name]["wt"]) == (7, 0), name
    # negative int32: sign-extended to 64 bits, a 10-byte varint
    assert send["comm_tag"]["raw"] == (1 << 64) - 5 and send["comm_tag"]["size"] == 10
    assert send["comm_priority"]["raw"] == (1 << 64) - 2 and send["comm_priority"]["size"] == 10
    assert recv["comm_src"]["raw"] == (1 << 64) - 1 and recv["comm_src"]["size"] == 10
    assert recv["comm_tag"]["raw"] == 2**31 - 1 and recv["comm_tag"]["size"] == 5
    assert send["comm_dst"]["size"] == 1


def test_metadata_decodes_independently(written):
    path, _, _ = written
    meta, _ = decode_file(path)
    assert meta["version"] == "0.0.4"
    got = {a["name"]: (MEMBER[a["field"]], attr_value(a)) for a in meta["attrs"]}
    assert got["schema"] == ("string_val", "1.0.2-chakra.0.0.4")
    assert got["pid"][1] == 4242


def test_protobuf_runtime_agrees_byte_for_byte(written):
    """Each node message re-serializes identically through the protobuf runtime."""
    from chakra_trace.schema import proto as pb

    path, _, _ = written
    msgs = split_file(path)
    assert pb.GlobalMetadata.FromString(msgs[0]).SerializeToString() == msgs[0]
    for m in msgs[1:]:
        assert pb.Node.FromString(m).SerializeToString() == m


# --------------------------------------------------------------------------- the reference file


@pytest.fixture(scope="module")
def resnet() -> Path:
    return sample("resnet50_ddp.0.et.gz")  # real trace from mlcommons/chakra, read in place from ../shared


@pytest.fixture(scope="module")
def resnet_decoded(resnet):
    return decode_file(resnet)


def _compare(nodes: list[dict], t) -> None:
    assert len(nodes) == len(t)
    assert [n["id"] for n in nodes] == t.ids.tolist()
    assert [n["name"] for n in nodes] == list(t.name_array)
    assert [n["type"] for n in nodes] == t.types.tolist()
    assert [n["duration"] for n in nodes] == t.duration.tolist()
    assert [n["start"] for n in nodes] == t.start.tolist()
    flat_data = [d for n in nodes for d in n["data"]]
    flat_ctrl = [d for n in nodes for d in n["ctrl"]]
    assert flat_data == t.data.tolist() and flat_ctrl == t.ctrl.tolist()
    assert np.diff(t.data_indptr).tolist() == [len(n["data"]) for n in nodes]
    assert np.diff(t.ctrl_indptr).tolist() == [len(n["ctrl"]) for n in nodes]
    for name in ("is_cpu_op", "comm_type", "comm_size", "tensor_size", "num_ops", "pg_name"):
        vals, present = t.attr_array(name)
        for i, n in enumerate(nodes):
            a = attrs_by_name(n).get(name)
            assert bool(present[i]) == (a is not None), (name, i)
            if a is not None:
                assert attr_value(a) == vals[i], (name, i)


def test_reference_trace_matches_our_reader(resnet, resnet_decoded):
    _, nodes = resnet_decoded
    assert len(nodes) == 3664
    assert sum(len(n["data"]) for n in nodes) == 181_878
    t = read_trace(resnet)
    assert len(t) == 3664 and t.data.size == 181_878
    _compare(nodes, t)
    # the vocabulary's members, as the reference converter writes them
    for name, field in (("comm_type", 9), ("comm_size", 9), ("is_cpu_op", 27)):
        fields_seen = {attrs_by_name(n)[name]["field"] for n in nodes if name in attrs_by_name(n)}
        assert fields_seen == {field}, name
    coll = [n for n in nodes if n["type"] == 7]
    assert len(coll) == 21 and sum("comm_type" in attrs_by_name(n) for n in coll) > 0


def test_reference_trace_rewritten_by_us_decodes_the_same(resnet, resnet_decoded, tmp_path):
    """Load the reference file, write it back: the independent decoder sees the same nodes."""
    _, orig = resnet_decoded
    out = tmp_path / "resnet_rewritten.0.et"
    write_trace(read_trace(resnet), out)
    _, ours = decode_file(out)
    assert len(ours) == len(orig)

    def key(n):
        attrs = sorted((a["name"], a["field"], a["raw"], a["doc"]) for a in n["attrs"])
        return (
            n["id"],
            n["name"],
            n["type"],
            n["ctrl"],
            n["data"],
            n["start"],
            n["duration"],
            n["inputs"],
            n["outputs"],
            attrs,
        )

    for a, b in zip(orig, ours):
        assert key(a) == key(b), a["id"]
