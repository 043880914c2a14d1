"""Random and real traces survive `.et` (plain, gzip), JSON and JSON Lines unchanged."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import struct
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_trace.io.et import iter_chunks, read_trace, write_trace
from chakra_trace.io.jsonio import read_json, reader, scanner, write_json, writer
from chakra_trace.schema import proto as pb
from chakra_trace.schema.node import Attribute, Node
from chakra_trace.schema.trace import Trace
from conftest import sample
from strategies import traces

DATA = Path(__file__).parent / "data"
RESNET = sample("resnet50_ddp.0.et.gz")

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- helpers


def _key(x):
    """A comparison key that tells floats apart by their bits (NaN == NaN, 0.0 != -0.0)."""
    if isinstance(x, float):
        return ("float", struct.pack("<d", x))
    if isinstance(x, (bool, int, str, bytes)) or x is None:
        return (type(x).__name__, x)
    if isinstance(x, (list, tuple)):
        return ("list", tuple(_key(v) for v in x))
    if dataclasses.is_dataclass(x):
        return (type(x).__name__, tuple((f.name, _key(getattr(x, f.name))) for f in dataclasses.fields(x)))
    raise TypeError(type(x))


def _has_nan(node: Node) -> bool:
    for a in node.attrs:
        vals = a.value if isinstance(a.value, list) else [a.value]
        if any(isinstance(v, float) and math.isnan(v) for v in vals):
            return True
    return False


def assert_same(a: Trace, b: Trace) -> None:
    assert a.differences(b, limit=100) == []
    assert len(a) == len(b)
    # node(i) row by row on small traces; the batched iterator (same decoding) on big ones
    pairs = ((a.node(i), b.node(i)) for i in range(len(a))) if len(a) <= 64 else zip(a, b)
    for i, (na, nb) in enumerate(pairs):
        assert _key(na) == _key(nb), f"row {i}"
        if not _has_nan(na):  # NaN != NaN, so plain == only holds without NaN values
            assert na == nb, f"row {i}"


@contextmanager
def small_blocks(write_rows: int = 3, read_nodes: int = 2, text_chars: int = 7):
    """Force many chunks and text refills so the streaming paths are exercised."""
    with (
        mock.patch.object(writer, "_WRITE_CHUNK", write_rows),
        mock.patch.object(reader, "_READ_CHUNK", read_nodes),
        mock.patch.object(scanner, "_TEXT_BLOCK", text_chars),
    ):
        yield


def _tmp():
    return tempfile.TemporaryDirectory(prefix="chakra-rt-")


# --------------------------------------------------------------------------- .et


@PROPERTY
@given(traces())
def test_et_plain_roundtrip(trace):
    with _tmp() as d:
        p = Path(d) / "t.et"
        write_trace(trace, p)
        back = read_trace(p)
        assert_same(trace, back)
        # what we write is exactly what the protobuf runtime would write for the same messages
        for payload in _payloads(p):
            assert pb.Node.FromString(payload).SerializeToString() == payload


def _payloads(path):
    from chakra_trace.io.stream import iter_frame_blocks

    first = True
    for block in iter_frame_blocks(str(path)):
        for s, e in zip(block.starts.tolist(), block.ends.tolist()):
            if first:
                first = False
                continue
            yield block.buf[s:e].tobytes()


@PROPERTY
@given(traces())
def test_et_gzip_roundtrip(trace):
    with _tmp() as d:
        p = Path(d) / "t.et.gz"
        write_trace(trace, p)
        assert p.read_bytes()[:2] == b"\x1f\x8b"
        assert_same(trace, read_trace(p))
        assert_same(trace, Trace.concat(list(iter_chunks(p))) if len(trace) else trace)


# --------------------------------------------------------------------------- JSON


@PROPERTY
@given(traces(), st.sampled_from([None, 0, 2]), st.sampled_from(["t.json", "t.json.gz"]), st.booleans())
def test_json_document_roundtrip(trace, indent, name, small):
    with _tmp() as d:
        p = Path(d) / name
        with small_blocks() if small else nullcontext():
            assert write_json(trace, p, indent=indent) == len(trace)
            doc = json.loads(_text(p))
            back = read_json(p)
        assert doc["format"] == "chakra-trace-json" and doc["version"] == 1
        assert len(doc["nodes"]) == len(trace)
        assert_same(trace, back)


@PROPERTY
@given(traces(), st.sampled_from(["t.jsonl", "t.jsonl.gz", "t.json"]), st.booleans())
def test_json_lines_roundtrip(trace, name, small):
    with _tmp() as d:
        p = Path(d) / name
        with small_blocks() if small else nullcontext():
            write_json(trace, p, lines=name == "t.json")
            raw = _text(p)
            back = read_json(p)
        rows = raw.decode("utf-8").split("\n")
        assert rows[-1] == "" and len(rows) == len(trace) + 2  # header, nodes, final newline
        header = json.loads(rows[0])
        assert header["format"] == "chakra-trace-json" and "nodes" not in header
        assert [json.loads(r)["id"] for r in rows[1:-1]] == trace.ids.tolist()
        assert_same(trace, back)


@PROPERTY
@given(traces(), st.sampled_from(["x.json", "x.jsonl.gz"]))
def test_et_json_et_byte_identical(trace, name):
    with _tmp() as d:
        d = Path(d)
        write_trace(trace, d / "a.et")
        write_json(read_trace(d / "a.et"), d / name)
        back = read_json(d / name)
        write_trace(back, d / "b.et")
        assert (d / "a.et").read_bytes() == (d / "b.et").read_bytes()
        write_json(back, d / ("again-" + name))  # and JSON -> Trace -> JSON is stable too
        assert _text(d / name) == _text(d / ("again-" + name))


def _text(p: Path) -> bytes:
    return gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()


@PROPERTY
@given(traces(), st.data())
def test_json_chunks_equal_whole(trace, data):
    """Writing from an iterable of chunks (how the CLI streams) gives the same file."""
    with _tmp() as d:
        d = Path(d)
        write_json(trace, d / "whole.jsonl")
        cuts = sorted(data.draw(st.lists(st.integers(0, len(trace)), max_size=3)))
        bounds = [0, *cuts, len(trace)]
        parts = [trace.take(np.arange(a, b)) for a, b in zip(bounds, bounds[1:])]
        write_json(iter(parts), d / "parts.jsonl")
        assert (d / "whole.jsonl").read_bytes() == (d / "parts.jsonl").read_bytes()


# --------------------------------------------------------------------------- the real trace


@pytest.fixture(scope="module")
def resnet():
    return read_trace(RESNET)


@pytest.mark.parametrize("name", ["r.json", "r.jsonl", "r.json.gz", "r.jsonl.gz"])
def test_resnet_json_roundtrip(resnet, tmp_path, name):
    p = tmp_path / name
    assert write_json(resnet, p) == len(resnet) == 3664
    back = read_json(p)
    assert_same(resnet, back)
    assert back.metadata.attr[0].string_val == "1.0.1"


def test_resnet_small_chunks(resnet, tmp_path):
    with small_blocks(write_rows=1000, read_nodes=700, text_chars=4096):
        write_json(resnet, tmp_path / "r.json", indent=1)
        back = read_json(tmp_path / "r.json")
    assert resnet.differences(back) == []


def test_resnet_et_json_et_byte_identical(resnet, tmp_path):
    write_trace(resnet, tmp_path / "a.et")
    write_json(resnet, tmp_path / "r.jsonl.gz")
    write_trace(read_json(tmp_path / "r.jsonl.gz"), tmp_path / "b.et")
    assert (tmp_path / "a.et").read_bytes() == (tmp_path / "b.et").read_bytes()


def test_resnet_json_content(resnet, tmp_path):
    write_json(resnet, tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert doc["metadata"]["attr"][1] == {"name": "pid", "uint64_val": 114598}
    n = doc["nodes"][0]
    assert list(n)[:7] == ["id", "name", "type", "ctrl_deps", "data_deps", "start_time_micros", "duration_micros"]
    assert n["type"] == "COMP_NODE" and n["attr"][0] == {"name": "is_cpu_op", "bool_val": True}
    dims = [a for n in doc["nodes"] for a in n["attr"] if a["name"] == "involved_dim"]
    assert len(dims) == 7 and all(list(a) == ["name", "bool_list"] for a in dims)


# --------------------------------------------------------------------------- codec findings


def test_attribute_order_survives_trace():
    node = Node(1, attrs=[Attribute("tid", 1, "int64_val"), Attribute("is_cpu_op", True, "bool_val")])
    assert Trace.from_nodes([node]).node(0).attrs == node.attrs


def test_reference_file_rewrites_byte_identical(resnet, tmp_path):
    write_trace(resnet, tmp_path / "r.et")
    assert (tmp_path / "r.et").read_bytes() == gzip.open(RESNET).read()


def test_comm_type_string_member_rebuilds():
    from chakra_trace.schema.node import pb_to_node

    m = pb.Node(id=1)
    m.attr.add(name="comm_type", string_val="ALL_REDUCE")
    node = pb_to_node(m)
    assert Trace.from_nodes([node]).node(0) == node
