"""JSON import errors, format details, and the `chakra to-json` / `chakra from-json` commands."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.cli import main
from chakra_trace.errors import TraceFormatError
from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.io.jsonio import read_json, scanner, write_json
from chakra_trace.schema import proto as pb
from chakra_trace.schema.enums import NodeType
from chakra_trace.schema.node import Attribute, IOInfo, Node, attribute_to_pb
from chakra_trace.schema.trace import Trace

HEAD = {"format": "chakra-trace-json", "version": 1}


def small_trace() -> Trace:
    meta = pb.GlobalMetadata(version="0.0.4")
    attribute_to_pb(Attribute("schema", "1.0.1"), meta.attr.add())
    nodes = [
        Node(1, "init", NodeType.METADATA_NODE, attrs=[Attribute("is_cpu_op", True)]),
        Node(
            2,
            "aten::mm",
            NodeType.COMP_NODE,
            ctrl_deps=[1],
            data_deps=[1],
            duration_micros=12,
            inputs=IOInfo("[[1, 2]]", "[[8, 8]]", "['Tensor(float)']"),
            attrs=[
                Attribute("num_ops", 1024),
                Attribute("scale", 0.5, "float_val"),
                Attribute("ratio", math.nan),
                Attribute("blob", b"\x00\xff"),
                Attribute("empty", None),
            ],
        ),
        Node(
            2**64 - 1,
            "all_reduce",
            NodeType.COMM_COLL_NODE,
            data_deps=[2, 99],
            attrs=[
                Attribute("comm_type", 0),
                Attribute("comm_size", 4096),
                Attribute("pg_name", "0"),
                Attribute("involved_dim", [True, False]),
            ],
            unknown_fields=b"\x58\x05",
        ),
    ]
    return Trace.from_nodes(nodes, metadata=meta)


def write_doc(path: Path, nodes, header=HEAD) -> Path:
    path.write_text(json.dumps({**header, "nodes": nodes}), "utf-8")
    return path


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join([json.dumps(HEAD)] + lines) + "\n", "utf-8")
    return path


def read_error(path: Path) -> str:
    with pytest.raises(TraceFormatError) as ei:
        read_json(path)
    msg = str(ei.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(path)), msg
    return msg


# --------------------------------------------------------------------------- format details


def test_node_encoding(tmp_path):
    write_json(small_trace(), tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text("utf-8"))
    assert doc["format"] == "chakra-trace-json" and doc["version"] == 1
    assert doc["metadata"] == {"version": "0.0.4", "attr": [{"name": "schema", "string_val": "1.0.1"}]}
    a, b, c = doc["nodes"]
    assert a == {
        "id": 1,
        "name": "init",
        "type": "METADATA_NODE",
        "ctrl_deps": [],
        "data_deps": [],
        "start_time_micros": 0,
        "duration_micros": 0,
        "attr": [{"name": "is_cpu_op", "bool_val": True}],
    }
    assert b["inputs"] == {"values": "[[1, 2]]", "shapes": "[[8, 8]]", "types": "['Tensor(float)']"}
    assert "outputs" not in b and "unknown_fields" not in b
    assert b["attr"] == [
        {"name": "num_ops", "int64_val": 1024},
        {"name": "scale", "float_val": 0.5},
        {"name": "ratio", "double_val": "NaN"},
        {"name": "blob", "bytes_val": "AP8="},
        {"name": "empty"},
    ]
    assert c["id"] == 2**64 - 1 and c["type"] == "COMM_COLL_NODE" and c["unknown_fields"] == "WAU="
    assert {"name": "pg_name", "string_val": "0"} in c["attr"]


def test_special_floats(tmp_path):
    nan_payload = np.array([0x7FF8000000000001], np.uint64).view(np.float64)[0].item()
    f32 = np.float32(0.1).item()  # 0.10000000149011612 as a double
    node = Node(
        1,
        attrs=[
            Attribute("a", [math.inf, -math.inf, math.nan, -0.0, nan_payload], "double_list"),
            Attribute("b", f32, "float_val"),
            Attribute("c", -math.nan, "float_val"),
        ],
    )
    t = Trace.from_nodes([node])
    write_json(t, tmp_path / "t.json")
    attrs = json.loads((tmp_path / "t.json").read_text())["nodes"][0]["attr"]
    assert attrs[0]["double_list"] == ["Infinity", "-Infinity", "NaN", -0.0, "NaN:0x7ff8000000000001"]
    assert attrs[1]["float_val"] == 0.1  # the shortest decimal that reads back to the same float32
    assert attrs[2]["float_val"] == "NaN:0xffc00000"
    assert t.differences(read_json(tmp_path / "t.json")) == []


def test_hand_written_input(tmp_path):
    p = write_doc(
        tmp_path / "h.json",
        [
            {"id": 1, "type": "COMP", "data_deps": [7]},
            {
                "id": 2,
                "name": "x",
                "type": 1000,
                "attr": [
                    {"name": "d", "double_val": 3},
                    {"name": "f", "float_val": "Infinity"},
                    {"name": "u", "uint64_list": []},
                ],
                "outputs": None,
            },
        ],
        header={"version": 1, "format": "chakra-trace-json"},
    )
    t = read_json(p)
    assert t.ids.tolist() == [1, 2] and t.types.tolist() == [4, 1000]
    n = t.node(1)
    assert n.attrs == [
        Attribute("d", 3.0, "double_val"),
        Attribute("f", math.inf, "float_val"),
        Attribute("u", [], "uint64_list"),
    ]
    assert t.metadata == pb.GlobalMetadata()


def test_gzip_is_sniffed_by_magic(tmp_path):
    t = small_trace()
    write_json(t, tmp_path / "t.json.gz")
    (tmp_path / "t.json.gz").rename(tmp_path / "gz-inside.json")
    assert t.differences(read_json(tmp_path / "gz-inside.json")) == []
    write_json(t, tmp_path / "plain.jsonl")
    (tmp_path / "plain.jsonl").rename(tmp_path / "plain-inside.jsonl.gz")
    assert t.differences(read_json(tmp_path / "plain-inside.jsonl.gz")) == []


def test_layout_follows_name_and_flag(tmp_path):
    t = small_trace()
    write_json(t, tmp_path / "a.jsonl.gz")
    assert gzip.open(tmp_path / "a.jsonl.gz", "rt").read().count("\n") == 4
    write_json(t, tmp_path / "b.json", lines=True)
    assert (tmp_path / "b.json").read_text().count("\n") == 4
    write_json(t, tmp_path / "c.json", indent=2)
    text = (tmp_path / "c.json").read_text()
    assert text.startswith('{\n  "format": "chakra-trace-json",\n') and '\n    {\n      "id": 1,' in text
    assert json.loads(text)["nodes"][2]["id"] == 2**64 - 1
    with pytest.raises(ValueError):
        write_json(t, tmp_path / "d.jsonl", indent=2)


def test_empty_trace(tmp_path):
    t = Trace(0, metadata=pb.GlobalMetadata(version="v"))
    for name, kw in (("e.json", {}), ("e2.json", {"indent": 2}), ("e.jsonl", {})):
        assert write_json(t, tmp_path / name, **kw) == 0
        back = read_json(tmp_path / name)
        assert len(back) == 0 and back.metadata.version == "v"
    assert json.loads((tmp_path / "e2.json").read_text())["nodes"] == []


def test_write_is_atomic(tmp_path):
    t = small_trace()
    bad = t.copy()  # an attribute whose bytes do not parse: the write fails halfway
    bad.extra = np.frombuffer(b"\x52\x02\x0a\xff", np.uint8).copy()
    bad.extra_indptr = np.array([0, 0, 0, 4])
    bad.extra_split = np.zeros(3, np.uint32)
    out = tmp_path / "out.json"
    with pytest.raises(TraceFormatError, match="node id 18446744073709551615"):
        write_json(bad, out)
    assert list(tmp_path.iterdir()) == []
    write_json(t, out)
    with pytest.raises(TraceFormatError):
        write_json(bad, out)
    assert t.differences(read_json(out)) == []  # the old file is still whole


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "node, expected",
    [
        ({"id": "abc"}, 'nodes[0]: id: expected an unsigned 64-bit integer (0 .. 2**64-1), got the string "abc"'),
        ({"id": -1}, "nodes[0]: id: -1 is out of range for an unsigned 64-bit integer"),
        ({"id": 2**64}, "nodes[0]: id: 18446744073709551616 is out of range"),
        ({"id": True}, "id: expected an unsigned 64-bit integer (0 .. 2**64-1), got true"),
        ({"id": 1.0}, "id: expected an unsigned 64-bit integer (0 .. 2**64-1), got the number 1.0"),
        ({"name": "x"}, "nodes[0]: missing 'id'"),
        (
            {"id": 5, "data_deps": "1,2"},
            'nodes[0] (node id 5): data_deps: expected a list of integers, got the string "1,2"',
        ),
        ({"id": 5, "ctrl_deps": [1, -2]}, "(node id 5): ctrl_deps[1]: -2 is out of range"),
        (
            {"id": 5, "type": "GPU_NODE"},
            "(node id 5): type: unknown node type 'GPU_NODE'; expected one of INVALID_NODE, METADATA_NODE",
        ),
        ({"id": 5, "type": 2**40}, "type: 1099511627776 is out of range for a signed 32-bit integer"),
        ({"id": 5, "type": None}, "type: expected a node type name or an integer, got null"),
        (
            {"id": 5, "attr": [{"name": "x", "int_val": 3}]},
            "(node id 5): attr[0] ('x'): unknown key 'int_val'; expected name, doc_string, unknown_fields or one "
            "value member (double_val,",
        ),
        ({"id": 5, "attr": {"name": "x"}}, "attr: expected a list of attribute objects, got an object"),
        ({"id": 5, "attr": ["x"]}, 'attr[0]: expected an attribute object, got the string "x"'),
        ({"id": 5, "attr": [{"name": "x", "int64_val": 1, "bool_val": True}]}, "has two value members"),
        (
            {"id": 5, "attr": [{"name": "x", "int32_val": 2**31}]},
            "attr[0] ('x').int32_val: 2147483648 is out of range for a signed 32-bit integer",
        ),
        ({"id": 5, "attr": [{"name": "x", "int64_list": "1"}]}, "int64_list: expected a list, got the string"),
        (
            {"id": 5, "attr": [{"name": "x", "bool_list": [1]}]},
            "bool_list[0]: expected true or false, got the integer 1",
        ),
        ({"id": 5, "attr": [{"name": "x", "float_val": 1e39}]}, "float_val: 1e+39 is out of range for a 32-bit float"),
        ({"id": 5, "attr": [{"name": "x", "double_val": "nan"}]}, 'double_val: expected a number or "NaN"'),
        ({"id": 5, "attr": [{"name": "x", "double_val": "NaN:0x1"}]}, 'expected a number or "NaN"'),
        ({"id": 5, "attr": [{"name": "x", "double_val": "NaN:0x0000000000000001"}]}, "is not the bit pattern of a NaN"),
        ({"id": 5, "attr": [{"name": "x", "double_val": 10**400}]}, "is too large for a double"),
        ({"id": 5, "attr": [{"name": "x", "bytes_val": "not base64!"}]}, "bytes_val: expected a base64 string"),
        ({"id": 5, "attr": [{"name": "x", "string_val": "\ud800"}]}, "string_val: string holds a lone surrogate"),
        ({"id": 5, "inputs": "x"}, "inputs: expected an object with values, shapes, types"),
        ({"id": 5, "inputs": {"value": "x"}}, "inputs: unknown key 'value'"),
        ({"id": 5, "unknown_fields": "CAE="}, "unknown_fields: holds fields the schema knows"),
        ({"id": 5, "unknown_fields": "WA=="}, "unknown_fields: not valid protobuf wire data"),
        ({"id": 5, "data_dep": []}, "(node id 5): unknown key 'data_dep'; expected id, name, type"),
        ([1, 2], "nodes[0]: expected a node object, got a list"),
    ],
)
def test_bad_node(tmp_path, node, expected):
    p = write_doc(tmp_path / "bad.json", [node])
    assert expected in read_error(p)


def test_bad_node_is_named_by_index_and_id(tmp_path):
    p = write_doc(tmp_path / "bad.json", [{"id": 1}, {"id": 2}, {"id": 3, "type": "NOPE"}])
    assert read_error(p).startswith(f"{p}: nodes[2] (node id 3): type: unknown node type 'NOPE'")
    with pytest.raises(TraceFormatError) as ei:
        read_json(p)
    assert ei.value.node_id == 3 and ei.value.path == str(p)


def test_bad_json_lines(tmp_path):
    p = write_lines(tmp_path / "bad.jsonl", ['{"id": 1}', "", '{"id": 7, "data_deps": [1, "2"]}'])
    assert read_error(p) == (
        f'{p}: line 4 (node id 7): data_deps[1]: expected an unsigned 64-bit integer (0 .. 2**64-1), got the string "2"'
    )
    p = write_lines(tmp_path / "bad2.jsonl", ['{"id": 1}', '{"id": 2,}'])
    # Python 3.13's json points at the trailing comma (column 9), earlier ones at what follows it
    assert re.match(rf"{re.escape(str(p))}: line 3 column (9|10): invalid JSON: ", read_error(p))
    p = write_lines(tmp_path / "bad3.jsonl", ['{"id": -4}'])
    assert read_error(p) == f"{p}: line 2: id: -4 is out of range for an unsigned 64-bit integer (0 .. 2**64-1)"
    p = tmp_path / "bad4.jsonl"
    p.write_text(json.dumps(HEAD) + ' {"id": 1}\n')
    assert "line 1: expected a newline after the header object" in read_error(p)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "empty file"),
        ("   \n", "empty file"),
        ("[1, 2]", "line 1 column 1: invalid JSON: expected a JSON object (the chakra-trace-json header), got '['"),
        ('{"foo": 1}', "header: unknown key 'foo'"),
        ('{"version": 1}', 'not a chakra trace JSON file: the header has no "format"'),
        ('{"format": "other", "version": 1, "nodes": []}', 'format is the string "other"'),
        ('{"format": "chakra-trace-json", "version": 2, "nodes": []}', "unsupported version 2"),
        ('{"format": "chakra-trace-json", "version": "1", "nodes": []}', "version must be the integer 1"),
        ('{"format": "chakra-trace-json", "version": 1, "nodes": {}}', "'nodes': expected a list of node objects"),
        (
            '{"format": "chakra-trace-json", "version": 1, "nodes": [{"id": 1}}',
            "line 1 column 66: invalid JSON: expected ',' or ']' after a node, got '}'",
        ),
        ('{"format": "chakra-trace-json", "version": 1, "nodes": [{"id": 1,}]}', "invalid JSON in nodes[0]"),
        ('{"format": "chakra-trace-json",\n "version": 1,\n "nodes": [{"id": 1}', "line 3 column 21: invalid JSON"),
        ('{"format": "chakra-trace-json", "version": 1, "nodes": []} {}', "extra data after the JSON document"),
        (
            '{"format": "chakra-trace-json", "version": 1, "metadata": {"attr": 1}, "nodes": []}',
            "header: metadata.attr: expected a list of attribute objects, got the integer 1",
        ),
        (
            '{"format": "chakra-trace-json", "version": 1, "metadata": {"attr": [{"name": "a", "x": 1}]}}',
            "header: metadata.attr[0] ('a'): unknown key 'x'",
        ),
        (
            '{"format": "chakra-trace-json", "version": 1, "nodes": [' + "[" * 100000 + "]" * 100000 + "]}",
            "nested too deeply",
        ),
    ],
)
def test_bad_document(tmp_path, text, expected):
    p = tmp_path / "bad.json"
    p.write_text(text, "utf-8")
    assert expected in read_error(p)


def test_not_text_and_broken_gzip(tmp_path):
    p = tmp_path / "bin.json"
    p.write_bytes(b'{"format": "chakra-trace-json", "version": 1, "nodes": ["\xff\xfe"]}')
    assert "not UTF-8 text" in read_error(p)
    write_json(small_trace(), tmp_path / "t.json.gz")
    data = (tmp_path / "t.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) // 2])
    assert "gzip" in read_error(tmp_path / "cut.json.gz")
    assert "No such file" in read_error(tmp_path / "missing.json")


def test_json_lines_are_read_lazily(tmp_path):
    """An error on line 3 is reported without reading the megabytes that follow it."""
    good = json.dumps({"id": 1, "name": "x" * 1000})
    p = write_lines(tmp_path / "big.jsonl", ['{"id": 1}', '{"id": "oops"}'] + [good] * 4000)
    seen: list[int] = []
    with pytest.raises(TraceFormatError, match="line 3"):
        read_json(p, progress=seen.append)
    assert max(seen) < os.path.getsize(p) / 2


def test_document_is_read_incrementally(tmp_path):
    """The nodes array is parsed one node at a time: an early bad node stops the read."""
    good = {"id": 1, "name": "x" * 1000}
    p = write_doc(tmp_path / "big.json", [{"id": 1}, {"id": 2, "type": "BAD"}] + [good] * 4000)
    seen: list[int] = []
    with pytest.raises(TraceFormatError, match=r"nodes\[1\] \(node id 2\)"):
        read_json(p, progress=seen.append)
    assert max(seen) < os.path.getsize(p) / 2


def test_header_keys_in_any_order(tmp_path):
    p = tmp_path / "o.json"
    p.write_text('{"nodes": [{"id": 3}], "metadata": {"version": "x"}, "version": 1, "format": "chakra-trace-json"}')
    t = read_json(p)
    assert t.ids.tolist() == [3] and t.metadata.version == "x"
    p.write_text('{"format": "chakra-trace-json", "nodes": [], "nodes": [], "version": 1}')
    assert "'nodes' appears twice" in read_error(p)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 8, 13, 64])
def test_tiny_read_blocks(tmp_path, block, monkeypatch):
    """Values split across text blocks anywhere (numbers included) parse the same."""
    t = small_trace()
    write_json(t, tmp_path / "t.json", indent=1)
    write_json(t, tmp_path / "t.jsonl")
    monkeypatch.setattr(scanner, "_TEXT_BLOCK", block)
    for name in ("t.json", "t.jsonl"):
        assert t.differences(read_json(tmp_path / name)) == []
    p = tmp_path / "n.json"
    p.write_text('{"format": "chakra-trace-json", "version": 1, "nodes": [{"id": 123456789}, 1.5e3]}')
    assert "nodes[1]: expected a node object, got the number 1500.0" in read_error(p)


def test_corrupted_input_fails_cleanly(tmp_path, monkeypatch):
    """Truncated or mangled files either read or raise a one-line TraceFormatError, and the
    outcome does not depend on where the text blocks happen to end."""
    import random

    rnd = random.Random(0)
    t = small_trace()
    for name, kw in (("c.json", {}), ("c.jsonl", {}), ("d.json", {"indent": 1})):
        write_json(t, tmp_path / name, **kw)
        data = (tmp_path / name).read_bytes()
        cases = [data[:i] for i in range(0, len(data), 17)]
        for _ in range(60):
            b = bytearray(data)
            i = rnd.randrange(len(b))
            if rnd.random() < 0.5:
                b[i] = rnd.choice(b'{}[],:"0-9eE.tfn\\ \nx\xff')
            else:
                del b[i]
            cases.append(bytes(b))
        q = tmp_path / ("bad-" + name)
        for c in cases:
            q.write_bytes(c)
            outcomes = []
            for block in (1 << 20, 3):
                monkeypatch.setattr(scanner, "_TEXT_BLOCK", block)
                try:
                    r = read_json(q)
                    outcomes.append((r.ids.tolist(), r.extra.tobytes(), r.metadata.SerializeToString()))
                except TraceFormatError as e:
                    assert "\n" not in str(e)
                    outcomes.append(str(e))
            assert outcomes[0] == outcomes[1], c


# --------------------------------------------------------------------------- CLI


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_roundtrip(tmp_path, capsys):
    t = small_trace()
    write_trace(t, tmp_path / "t.et.gz")
    rc, out, err = run_cli(capsys, "to-json", tmp_path / "t.et.gz", tmp_path / "t.json")
    assert (rc, err) == (0, "") and out == f"wrote 3 nodes to {tmp_path / 't.json'}\n"
    assert json.loads((tmp_path / "t.json").read_text())["nodes"][0]["name"] == "init"
    rc, out, err = run_cli(capsys, "from-json", tmp_path / "t.json", tmp_path / "back.et.gz", "--json")
    assert (rc, err) == (0, "")
    assert json.loads(out) == {"nodes": 3, "output": str(tmp_path / "back.et.gz")}
    assert (tmp_path / "back.et.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert t.differences(read_trace(tmp_path / "back.et.gz")) == []
    rc, out, err = run_cli(capsys, "from-json", tmp_path / "t.json", tmp_path / "back.et")
    assert rc == 0 and (tmp_path / "back.et").read_bytes() == gzip.open(tmp_path / "back.et.gz").read()


def test_cli_to_json_options(tmp_path, capsys):
    write_trace(small_trace(), tmp_path / "t.et")
    rc, out, _ = run_cli(capsys, "to-json", tmp_path / "t.et", tmp_path / "a.json", "--lines", "--json")
    assert rc == 0 and json.loads(out) == {"nodes": 3, "output": str(tmp_path / "a.json")}
    assert len((tmp_path / "a.json").read_text().splitlines()) == 4
    rc, _, _ = run_cli(capsys, "to-json", tmp_path / "t.et", tmp_path / "b.jsonl.gz")
    assert rc == 0 and len(gzip.open(tmp_path / "b.jsonl.gz", "rt").read().splitlines()) == 4
    rc, _, _ = run_cli(capsys, "to-json", tmp_path / "t.et", tmp_path / "c.json", "--indent", "3")
    assert rc == 0 and '\n   "version": 1,' in (tmp_path / "c.json").read_text()
    for p in ("a.json", "b.jsonl.gz", "c.json"):
        assert small_trace().differences(read_json(tmp_path / p)) == []


def test_cli_empty_trace(tmp_path, capsys):
    write_trace(Trace(0, metadata=pb.GlobalMetadata(version="m")), tmp_path / "e.et")
    rc, out, _ = run_cli(capsys, "to-json", tmp_path / "e.et", tmp_path / "e.json")
    assert rc == 0 and out.startswith("wrote 0 nodes")
    assert json.loads((tmp_path / "e.json").read_text())["metadata"]["version"] == "m"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["from-json", "{bad}", "{out}.et"], "error: {bad}: nodes[0] (node id 5): type: unknown node type 'X'"),
        (["from-json", "{tmp}/missing.json", "{out}.et"], "error: {tmp}/missing.json: No such file or directory"),
        (["to-json", "{bad}", "{out}.json"], "error: {bad}: already JSON"),  # JSON is not a .et file
        (
            ["to-json", "{et}", "{out}.json", "--lines", "--indent", "2"],
            "error: --indent cannot be used with JSON Lines output",
        ),
        (["to-json", "{et}", "{out}.jsonl", "--indent", "2"], "error: --indent cannot be used with JSON Lines output"),
    ],
)
def test_cli_errors(tmp_path, capsys, args, expected):
    bad = write_doc(tmp_path / "bad.json", [{"id": 5, "type": "X"}])
    write_trace(small_trace(), tmp_path / "t.et")
    fmt = {"bad": bad, "tmp": tmp_path, "out": tmp_path / "out", "et": tmp_path / "t.et"}
    rc, out, err = run_cli(capsys, *[a.format(**fmt) for a in args])
    assert rc == 2 and out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(expected.format(**fmt)), err
    assert not any(p.name.startswith("out") for p in tmp_path.iterdir())


def test_cli_entry_point(tmp_path):
    chakra = Path(sys.executable).with_name("chakra")
    if not chakra.exists():
        pytest.skip("the chakra script is not installed next to this interpreter")
    bad = write_doc(tmp_path / "bad.json", [{"id": "abc"}])
    r = subprocess.run([str(chakra), "from-json", str(bad), str(tmp_path / "o.et")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert (
        r.stderr == f"error: {bad}: nodes[0]: id: expected an unsigned 64-bit integer (0 .. 2**64-1), "
        f'got the string "abc"\n'
    )
    write_trace(small_trace(), tmp_path / "t.et")
    r = subprocess.run(
        [str(chakra), "to-json", str(tmp_path / "t.et"), str(tmp_path / "t.jsonl"), "--json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and json.loads(r.stdout)["nodes"] == 3


# --------------------------------------------------------------------------- pipes, devices, SIGTERM (issue 13)


def _frames(n: int, name_len: int = 1000) -> tuple[bytes, bytes]:
    """(metadata frame, n node frames) of a plain `.et` stream."""

    def frame(b: bytes) -> bytes:
        n, head = len(b), bytearray()
        while n > 0x7F:
            head.append((n & 0x7F) | 0x80)
            n >>= 7
        return bytes(head) + bytes([n]) + b

    meta = frame(pb.GlobalMetadata(version="1.0.2-chakra.0.0.4").SerializeToString())
    body = b"".join(frame(pb.Node(id=i, name="x" * name_len, type=4).SerializeToString()) for i in range(n))
    return meta, body


def test_to_json_from_a_device_stops_at_the_stream_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHAKRA_MAX_STREAM_BYTES", "100000")
    out = tmp_path / "z.json"
    assert main(["to-json", "/dev/zero", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: /dev/zero") and "CHAKRA_MAX_STREAM_BYTES" in err and "\n" not in err
    assert not out.exists() and not list(tmp_path.iterdir())  # nothing written, no .tmp left


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_to_json_reads_a_pipe_once(tmp_path):
    import threading

    src = tmp_path / "job.0.et"
    write_trace(small_trace(), src)
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(src.read_bytes()))
    writer.start()
    out = tmp_path / "out.json"
    assert main(["to-json", str(fifo), str(out)]) == 0
    writer.join()
    assert read_json(out).equals(read_trace(src))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_sigterm_removes_the_partial_output(tmp_path):
    """SIGTERM mid-write leaves no `.tmp` file (as Ctrl-C does) and exits 143."""
    import signal
    import time

    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "chakra_trace.cli", "to-json", str(fifo), str(out)],
        stderr=subprocess.PIPE,
        env=env,
    )
    meta, body = _frames(9500)  # over one 8 MiB read block: the first block is written out
    with open(fifo, "wb") as w:
        w.write(meta + body)
        w.flush()
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.json.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.glob(".out.json.*.tmp")), "the output never started"
        proc.send_signal(signal.SIGTERM)  # the writer still holds the pipe open: to-json waits for more
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fifo"]


def test_a_bad_stream_limit_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    src = tmp_path / "job.0.et"
    write_trace(small_trace(), src)
    monkeypatch.setenv("CHAKRA_MAX_STREAM_BYTES", "lots")
    assert main(["to-json", str(src), str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err.strip() == "error: CHAKRA_MAX_STREAM_BYTES='lots': expected a number of bytes"
