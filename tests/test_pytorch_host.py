"""PyTorch host execution-trace reader: every real sample, layouts, tensors, NCCL attrs, errors."""

from __future__ import annotations

import functools
import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.errors import TraceFormatError
from chakra_trace.io.pytorch_host import (
    FLAT,
    INT_COLUMNS,
    NESTED,
    HostTrace,
    TruncatedTraceWarning,
    read_host_trace,
)
from conftest import sample

DATA = Path(__file__).parent / "data"

SAMPLES = {  # file: (nodes, layout, schema)
    "mlp_rank0.et.json.gz": (398, NESTED, "1.1.1-chakra.0.0.4"),
    "transformer_rank0.et.json.gz": (2440, NESTED, "1.1.1-chakra.0.0.4"),
    "ddp_rank0.et.json.gz": (586, NESTED, "1.1.1-chakra.0.0.4"),
    "ddp_rank1.et.json.gz": (586, NESTED, "1.1.1-chakra.0.0.4"),
    "resnet_et.json.gz": (14392, NESTED, "1.1.0-chakra.0.0.4"),
    "resnet_1gpu_et_1.0.3.json.gz": (14391, NESTED, "1.0.3-chakra.0.0.4"),
    "linear_et.json.gz": (931, FLAT, "1.0.1"),
    "allgather_host_1.0.2.json.gz": (263, NESTED, "1.0.2-chakra.0.0.4"),
}
SMALL = ["mlp_rank0.et.json.gz", "ddp_rank0.et.json.gz", "linear_et.json.gz", "allgather_host_1.0.2.json.gz"]


@functools.cache
def doc(name: str) -> dict:
    with gzip.open(sample(name), "rt") as f:
        return json.load(f)


@functools.cache
def host(name: str) -> HostTrace:
    return read_host_trace(sample(name))


def text(name: str) -> bytes:
    with gzip.open(sample(name), "rb") as f:
        return f.read()


# --------------------------------------------------------------------------------- reference


def _elems(t: str) -> list[str]:
    inner = t[t.index("[") + 1 : -1]
    out, depth, cur = [], 0, ""
    for c in inner:
        depth += c in "[("
        depth -= c in "])"
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
    if cur:
        out.append(cur)
    return out


def _walk(t, v, shape, out):
    if t.startswith("Tensor"):
        if isinstance(v, list) and len(v) in (5, 6) and all(type(x) is int for x in v[:5]):
            out.append((v, t, shape))
    elif "[" in t and "Tensor" in t and isinstance(v, list):
        ets = _elems(t)
        for j, x in enumerate(v):
            sh = shape[j] if isinstance(shape, list) and j < len(shape) else None
            _walk(ets[min(j, len(ets) - 1)], x, sh, out)


def _ios(n: dict):
    if isinstance(n.get("inputs"), dict) or "attrs" in n:
        for k in ("inputs", "outputs"):
            d = n.get(k, {})
            yield d.get("values", []), d.get("types", []), d.get("shapes", [])
    else:
        for k, p in (("inputs", "input"), ("outputs", "output")):
            yield n.get(k, []), n.get(p + "_types", []), n.get(p + "_shapes", [])


def ref_tensors(nodes: list[dict]) -> list[tuple]:
    rows = []
    for r, n in enumerate(nodes):
        for io, (vals, types, shapes) in enumerate(_ios(n)):
            for a, t in enumerate(types):
                found: list = []
                _walk(t, vals[a], shapes[a] if a < len(shapes) else None, found)
                for e, (v, tt, sh) in enumerate(found):
                    rows.append((r, io, a, e, *v[:5], v[5] if len(v) == 6 else "", tt, sh))
    return rows


def ref_attrs(n: dict) -> dict:
    if "attrs" in n:
        return {a["name"]: a["value"] for a in n["attrs"]}
    skip = {"id", "name", "parent", "inputs", "input_shapes", "input_types", "outputs", "output_shapes", "output_types"}
    return {k: v for k, v in n.items() if k not in skip}


# --------------------------------------------------------------------------------- samples


@pytest.mark.parametrize("name", list(SAMPLES))
def test_sample_loads(name):
    h = host(name)
    n, layout, schema = SAMPLES[name]
    d = doc(name)
    assert len(h) == n == len(d["nodes"])
    assert h.layout == layout
    assert h.schema == schema
    assert not h.salvaged
    assert list(h.metadata) == [k for k in d if k != "nodes"]
    assert (h.pid, h.time, h.start_ts, h.finish_ts) == (d["pid"], d["time"], d["start_ts"], d["finish_ts"])


@pytest.mark.parametrize("name", list(SAMPLES))
def test_node_round_trip_is_exact(name):
    """node(i) rebuilds exactly the dict json.load gives, for every node."""
    h = host(name)
    nodes = doc(name)["nodes"]
    bad = [i for i, nd in enumerate(nodes) if h.node(i) != nd]
    assert not bad, f"{len(bad)} nodes differ, first {bad[0]}"


@pytest.mark.parametrize("name", list(SAMPLES))
def test_columns_match_json(name):
    h = host(name)
    nodes = doc(name)["nodes"]
    assert h.ids.tolist() == [nd["id"] for nd in nodes]
    pk = "parent" if h.layout == FLAT else "ctrl_deps"
    assert h.parent.tolist() == [nd.get(pk, -1) for nd in nodes]
    assert h.name_array.tolist() == [nd["name"] for nd in nodes]
    attrs = [ref_attrs(nd) for nd in nodes]
    for col in INT_COLUMNS:
        assert h.has(col).all()
        assert getattr(h, col).tolist() == [a[col] for a in attrs], col
    ops = np.asarray(h.strings, dtype=object)[h.op_schema]
    assert ops.tolist() == [a["op_schema"] for a in attrs]
    for nm in h.attr_names:
        rows, vals = h.attr_rows(nm)
        want = [(i, a[nm]) for i, a in enumerate(attrs) if nm in a]
        assert list(zip(rows.tolist(), vals.tolist())) == want, nm


@pytest.mark.parametrize("name", list(SAMPLES))
def test_tensors_flattened(name):
    h = host(name)
    t = h.tensors
    ref = ref_tensors(doc(name)["nodes"])
    assert len(t) == len(ref)
    got = list(
        zip(
            t.row.tolist(),
            t.output.astype(int).tolist(),
            t.arg.tolist(),
            t.elem.tolist(),
            t.tensor_id.tolist(),
            t.storage_id.tolist(),
            t.offset.tolist(),
            t.numel.tolist(),
            t.itemsize.tolist(),
            [t.devices[c] for c in t.device],
            [t.types[c] for c in t.type],
            [list(t.shape(k)) if t.has_shape[k] else None for k in range(len(t))],
        )
    )
    want = [(*r[:11], r[11] if isinstance(r[11], list) and all(type(x) is int for x in r[11]) else None) for r in ref]
    assert got == want
    assert np.array_equal(np.diff(t.indptr), np.bincount(t.row, minlength=len(h)))


def test_hand_checked_tensors():
    # linear (1.0.1, flat): aten::as_strided id 12 takes [5,6,0,1048576,4,"cuda:0"] shaped [1024,1024]
    h = host("linear_et.json.gz")
    i = h.row(12)
    t = h.tensors
    ks = range(*t.of(i).indices(len(t)))
    rows = [
        (
            bool(t.output[k]),
            int(t.arg[k]),
            int(t.tensor_id[k]),
            int(t.storage_id[k]),
            int(t.offset[k]),
            int(t.numel[k]),
            int(t.itemsize[k]),
            t.devices[t.device[k]],
            t.shape(k),
        )
        for k in ks
    ]
    assert rows == [
        (False, 0, 5, 6, 0, 1048576, 4, "cuda:0", (1024, 1024)),
        (True, 0, 13, 6, 0, 1048576, 4, "cuda:0", (1024, 1024)),
    ]
    assert h.io(i)[0]["types"] == ["Tensor(float)", "GenericList[Int,Int]", "GenericList[Int,Int]", "None"]
    assert h.io(i)[0]["values"][3] == "<None>"
    # allgather (1.0.2): record_param_comms outputs GenericList[GenericList[Tensor(float),Tensor(float)]]
    h = host("allgather_host_1.0.2.json.gz")
    i = h.row(30)
    ks = range(*h.tensors.of(i).indices(len(h.tensors)))
    t = h.tensors
    got = [
        (bool(t.output[k]), int(t.arg[k]), int(t.elem[k]), int(t.tensor_id[k]), int(t.storage_id[k]), t.shape(k))
        for k in ks
    ]
    assert got == [(False, 0, 0, 14, 15, (1,)), (True, 0, 0, 19, 20, (1,)), (True, 0, 1, 5, 23, (1,))]
    # ddp (1.1.1): strides; an undefined tensor
    h = host("ddp_rank0.et.json.gz")
    t = h.tensors
    k = int(np.flatnonzero(np.asarray(t.types, dtype=object)[t.type] == "Tensor(nullptr (uninitialized))")[0])
    assert (int(t.numel[k]), int(t.storage_id[k]), t.devices[t.device[k]]) == (0, 0, "")
    assert t.has_stride.sum() > 0.9 * len(t)
    i = h.row(int(h.ids[t.row[t.has_stride][0]]))
    k = t.indptr[i]
    assert list(t.stride(k)) == h.io(i)[0]["strides"][int(t.arg[k])]


def test_record_param_comms_nccl_resnet():
    h = host("resnet_et.json.gz")
    rows = h.names_of("record_param_comms")
    assert rows.size == 27
    names, present = h.attr_array("collective_name")
    assert np.array_equal(np.flatnonzero(present), rows)
    counts = {k: int(v) for k, v in zip(*np.unique(names[rows].astype(str), return_counts=True))}
    assert counts == {"allreduce": 15, "broadcast": 6, "wait": 6}
    for nm in ("dtype", "in_msg_nelems", "out_msg_nelems", "in_split_size", "out_split_size", "pg_size"):
        assert np.array_equal(h.attr_rows(nm)[0], rows), nm
    for nm in ("global_rank_start", "global_rank_stride", "pg_name", "pg_desc"):
        assert h.attr_rows(nm)[0].size == 21, nm  # the 6 waits have none
    assert h.attr_type("in_msg_nelems") == "uint64"
    nel, _ = h.attr_array("in_msg_nelems")
    assert nel.dtype == np.int64
    first_ar = rows[names[rows] == "allreduce"][0]
    a = {x["name"]: x["value"] for x in h.node(first_ar)["attrs"]}
    assert h.attr(first_ar, "in_msg_nelems") == a["in_msg_nelems"] > 0
    assert h.attr(first_ar, "pg_desc") == "default_pg" and h.attr(first_ar, "dtype") == a["dtype"]
    assert h.process_groups == [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "ranks": [],
            "group_size": 1,
            "group_count": 1,
        }
    ]
    # 1.0.3 has no comm attrs: they are inputs of record_param_comms
    h3 = host("resnet_1gpu_et_1.0.3.json.gz")
    assert "collective_name" not in h3.attr_names
    r = h3.names_of("record_param_comms")
    colls = [h3.io(i)[0]["values"][4] for i in r if len(h3.io(i)[0]["values"]) == 10]
    assert sorted(set(colls)) == ["allreduce", "broadcast"]


def test_process_groups_and_synthetic_nodes():
    h = host("ddp_rank0.et.json.gz")
    assert h.process_groups == [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cpu:gloo,cuda:gloo",
            "ranks": [],
            "group_size": 2,
            "group_count": 1,
        }
    ]
    assert h.ids[h.process_row] == 1 and h.process_row == len(h) - 1
    # a second thread (tid 2) runs 17 ops of the DDP step
    assert h.ids[h.thread_rows].tolist() == [2, 464] and h.tid[h.thread_rows].tolist() == [1, 2]
    assert (h.tid == 2).sum() == 17
    assert h.ids[h.pg_init_rows].tolist() == [3]
    assert h.synthetic.sum() == 4
    assert h.parent[h.process_row] == 1  # the process node is its own parent in the file
    assert host("allgather_host_1.0.2.json.gz").process_groups[0]["backend_id"] == 82149104
    assert host("mlp_rank0.et.json.gz").process_groups == []
    lin = host("linear_et.json.gz")
    assert lin.names[lin.name[lin.process_row]] == "[pytorch|profiler|execution_graph|process]"


def test_attr_round_trip_and_non_finite():
    h = host("transformer_rank0.et.json.gz")
    for i in (0, 17, 500, len(h) - 1):
        d = h.node(i)
        for a in d["attrs"]:
            assert h.attr(i, a["name"]) == a["value"]
    # -inf is a string in the trace and stays one
    i = next(i for i in range(len(h)) if "-inf" in h.io(i)[0]["values"])
    assert h.node(i) == doc("transformer_rank0.et.json.gz")["nodes"][i]
    # tensor_range is a JSON string attr (with escapes)
    rows, vals = h.attr_rows("tensor_range")
    assert any(v.startswith('{"') for v in vals)


# --------------------------------------------------------------------------------- input forms


def _same(a: HostTrace, b: HostTrace) -> None:
    assert len(a) == len(b)
    for k in ("ids", "parent", "rf_id", "seq_id", "op_schema"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert a.name_array.tolist() == b.name_array.tolist()
    for k in ("row", "tensor_id", "storage_id", "numel", "shape_dims", "stride_dims"):
        assert np.array_equal(getattr(a.tensors, k), getattr(b.tensors, k)), k
    assert a.attr_names == b.attr_names
    assert all(a.node(i) == b.node(i) for i in range(len(a)))


@pytest.mark.parametrize("name", SMALL)
def test_plain_and_gzip_and_block_sizes(tmp_path, name):
    plain = tmp_path / name.replace(".gz", "")
    plain.write_bytes(text(name))
    ref = host(name)
    _same(read_host_trace(plain), ref)
    for bs in (64, 1000, 7777, 65536):
        _same(read_host_trace(plain, block_size=bs), ref)
    _same(read_host_trace(sample(name), block_size=5000), ref)


@pytest.mark.parametrize("name", ["ddp_rank0.et.json.gz", "linear_et.json.gz"])
def test_other_json_layouts(tmp_path, name):
    """Minified and re-indented documents (no observer layout): exact scanning, same result."""
    d = doc(name)
    ref = host(name)
    for kw in ({"separators": (",", ":")}, {"indent": 2}, {"indent": "\t"}):
        p = tmp_path / "x.json"
        p.write_text(json.dumps(d, **kw))
        got = read_host_trace(p, block_size=4096)
        _same(got, ref)
        assert got.metadata == ref.metadata


def test_unknown_schema_keys_and_attrs(tmp_path):
    d = json.loads(json.dumps(doc("mlp_rank0.et.json.gz")))
    d["schema"] = "2.3.0-future"
    d["extra_top"] = {"a": [1, 2]}
    for j, nd in enumerate(d["nodes"]):
        nd["attrs"].append({"name": "new_attr", "type": "double", "value": 0.5 + j})
        if j % 3 == 0:
            nd["attrs"].append({"name": "list_attr", "type": "list", "value": [j, "x"]})
            nd["future_key"] = {"k": j}
    p = tmp_path / "f.json"
    p.write_text(json.dumps(d, indent=1))
    h = read_host_trace(p)
    assert h.schema == "2.3.0-future" and h.metadata["extra_top"] == {"a": [1, 2]}
    assert h.layout == NESTED
    assert all(h.node(i) == nd for i, nd in enumerate(d["nodes"]))
    vals, mask = h.attr_array("new_attr")
    assert mask.all() and vals.tolist() == [0.5 + j for j in range(len(h))]
    rows, vals = h.attr_rows("list_attr")
    assert rows.tolist() == list(range(0, len(h), 3)) and vals[1] == [3, "x"]
    assert h.attr_type("new_attr") == "double"
    assert h.key_names == ["future_key"]
    rows, vals = h.key_rows("future_key")
    assert rows.tolist() == list(range(0, len(h), 3)) and vals[2] == {"k": 6}


def test_numbers_of_every_size(tmp_path):
    """Template reuse across digit counts, big integers, floats, negatives."""
    nodes = []
    for j, v in enumerate([0, 7, -3, 12, 999, 1000, -(10**12), 2**63 + 5, 10**30, -(2**70), 5]):
        nodes.append(
            {
                "id": 10 + j,
                "name": "op",
                "ctrl_deps": 1,
                "inputs": {
                    "values": [[j, j + 1, 0, abs(v) % 1000, 4, "cpu"], v, 1.5 * j, -0.25, 1e-7],
                    "shapes": [[3], [], [], [], []],
                    "types": ["Tensor(float)", "Int", "Double", "Double", "Double"],
                },
                "outputs": {"values": [], "shapes": [], "types": []},
                "attrs": [
                    {"name": "rf_id", "type": "uint64", "value": j},
                    {"name": "big", "type": "uint64", "value": v},
                ],
            }
        )
    p = tmp_path / "n.json"
    p.write_text(json.dumps({"schema": "1.1.1", "nodes": nodes}, indent=2))
    h = read_host_trace(p)
    assert all(h.node(i) == nd for i, nd in enumerate(nodes))
    rows, vals = h.attr_rows("big")
    assert list(vals) == [nd["attrs"][1]["value"] for nd in nodes]
    assert h.tensors.numel.tolist() == [abs(nd["attrs"][1]["value"]) % 1000 for nd in nodes]


# --------------------------------------------------------------------------------- truncation


def _complete_nodes(data: bytes) -> int:
    """How many node objects are complete in a prefix of a document."""
    s = data.decode("latin-1")
    dec = json.JSONDecoder()
    i = s.index("[", s.index('"nodes"')) + 1
    n = 0
    ws = re.compile(r"[\s,]*")
    while True:
        i = ws.match(s, i).end()
        try:
            _, i = dec.raw_decode(s, i)
        except ValueError:
            return n
        n += 1


@pytest.mark.parametrize("name", ["ddp_rank0.et.json.gz", "linear_et.json.gz"])
@pytest.mark.parametrize("frac", [0.1, 0.5, 0.93])
def test_truncated_file(tmp_path, name, frac):
    data = text(name)
    cut = data[: int(len(data) * frac)]
    p = tmp_path / "cut.json"
    p.write_bytes(cut)
    with pytest.raises(TraceFormatError) as ei:
        read_host_trace(p)
    e = ei.value
    msg = str(e)
    assert str(p) in msg and "\n" not in msg
    assert e.offset is not None and len(cut) - 2000 < e.offset <= len(cut)
    assert "truncated" in msg
    with pytest.warns(TruncatedTraceWarning, match=r"kept the (\d+) complete nodes") as w:
        h = read_host_trace(p, salvage=True, block_size=3000)
    k = _complete_nodes(cut)
    assert len(h) == k > 0 and h.salvaged
    assert f"kept the {k} complete nodes" in str(w[0].message)
    nodes = doc(name)["nodes"]
    assert all(h.node(i) == nodes[i] for i in range(k))
    assert h.finish_ts is None


def test_truncated_gzip(tmp_path):
    data = text("ddp_rank0.et.json.gz")
    cut = data[: len(data) // 2]
    full = tmp_path / "full.json.gz"
    with gzip.open(full, "wb") as f:
        f.write(cut)
    gz = full.read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gz[: len(gz) - 100])  # a crashed job: the gzip stream stops too
    with pytest.raises(TraceFormatError, match="decompressed byte offset"):
        read_host_trace(p)
    with pytest.warns(TruncatedTraceWarning):
        h = read_host_trace(p, salvage=True)
    assert 0 < len(h) <= _complete_nodes(cut)
    nodes = doc("ddp_rank0.et.json.gz")["nodes"]
    assert all(h.node(i) == nodes[i] for i in range(len(h)))


# --------------------------------------------------------------------------------- bad input


def _write(tmp_path, data: bytes, name="bad.json"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_wrong_types_name_the_node(tmp_path):
    data = text("ddp_rank0.et.json.gz")
    bad = data.replace(b'"id": 221, "name"', b'"id": "221", "name"', 1)
    if bad == data:  # the id may differ: take the 40th node
        m = list(re.finditer(rb'"id": (\d+), "name"', data))[40]
        bad = data[: m.start()] + b'"id": "' + m.group(1) + b'", "name"' + data[m.end() :]
    p = _write(tmp_path, bad)
    with pytest.raises(TraceFormatError, match=r"node #\d+: expected an integer 'id', got a string") as ei:
        read_host_trace(p)
    assert ei.value.offset is not None and "\n" not in str(ei.value)

    m = list(re.finditer(rb'"id": (\d+), "name": "[^"]*", "ctrl_deps": (\d+)', data))[100]
    bad = data[: m.start(2)] + b"[" + m.group(2) + b"]" + data[m.end(2) :]
    with pytest.raises(TraceFormatError, match=r"node #100: expected an integer 'ctrl_deps'") as ei:
        read_host_trace(_write(tmp_path, bad))
    assert ei.value.node_id == int(m.group(1))
    assert f"node id {int(m.group(1))}" in str(ei.value)

    bad = data.replace(
        b'{"name": "rf_id", "type": "uint64", "value": 9}', b'{"name": "rf_id", "type": "uint64", "value": "nine"}', 1
    )
    assert bad != data
    with pytest.raises(TraceFormatError, match=r"expected an integer attribute 'rf_id', got a string"):
        read_host_trace(_write(tmp_path, bad))

    m = list(re.finditer(rb'"types": \["Tensor\(float\)",', data))[5]
    bad = data[: m.start()] + b'"types": [7,' + data[m.end() :]
    with pytest.raises(TraceFormatError, match=r"expected a type string, got an integer"):
        read_host_trace(_write(tmp_path, bad))


def test_corrupt_json(tmp_path):
    data = text("mlp_rank0.et.json.gz")
    pos = len(data) // 2
    pos = data.index(b'"inputs"', pos)
    bad = data[:pos] + b'"inputs" {' + data[pos + len(b'"inputs": {') :]
    with pytest.raises(TraceFormatError, match="invalid JSON") as ei:
        read_host_trace(_write(tmp_path, bad))
    assert abs(ei.value.offset - pos) < 2000
    # leading zero in a number of a node whose template is known
    m = list(re.finditer(rb'"value": (\d\d+)\}', data))[-3]
    bad = data[: m.start(1)] + b"0" + data[m.start(1) + 1 : m.end(1)] + data[m.end(1) :]
    with pytest.raises(TraceFormatError, match="leading zero|invalid JSON"):
        read_host_trace(_write(tmp_path, bad))
    for junk, pat in (
        (b"", "empty"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"schema": "1.1.1"}', "no 'nodes'"),
        (b'{"nodes": [1]}', "expected a node object"),
        (b'{"nodes": []} x', "extra data"),
    ):
        with pytest.raises(TraceFormatError, match=pat):
            read_host_trace(_write(tmp_path, junk))
    assert len(read_host_trace(_write(tmp_path, b'{"schema": "1.0.1", "nodes": []}'))) == 0
    with pytest.raises(TraceFormatError, match="No such file"):
        read_host_trace(tmp_path / "missing.json")


def test_duplicate_keys_are_rejected(tmp_path):
    d = b'{"nodes": [{"id": 1, "name": "a", "ctrl_deps": 0, "id": 2}]}'
    with pytest.raises(TraceFormatError, match="duplicate keys"):
        read_host_trace(_write(tmp_path, d))


def test_gzip_is_sniffed_not_named(tmp_path):
    p = tmp_path / "no_suffix"
    shutil.copy(DATA / "mlp_rank0.et.json.gz", p)
    assert len(read_host_trace(p)) == 398
    assert "HostTrace" in repr(read_host_trace(p)) and read_host_trace(p).nbytes() > 0


def test_separator_change_mid_file(tmp_path):
    """A node joined by other whitespace: that piece holds two nodes, is rescanned exactly, rest stays fast."""
    data = text("transformer_rank0.et.json.gz")
    seps = [m.start() for m in re.finditer(rb"\n      },\n      {", data)]
    bad = data
    for at in (seps[900], seps[300]):  # later one first: offsets stay valid
        bad = bad[:at] + b"\n      } ,\n\n{" + bad[at + len(b"\n      },\n      {") :]
    p = _write(tmp_path, bad)
    for bs in (1 << 20, 30000):
        _same(read_host_trace(p, block_size=bs), host("transformer_rank0.et.json.gz"))


def test_salvage_keeps_nodes_before_a_corrupt_one(tmp_path):
    data = text("ddp_rank0.et.json.gz")
    m = list(re.finditer(rb'"id": (\d+), "name"', data))[250]
    bad = data[: m.start()] + b'"id": null, "name"' + data[m.end() :]
    p = _write(tmp_path, bad)
    with pytest.raises(TraceFormatError, match=r"node #250: expected an integer 'id', got null"):
        read_host_trace(p)
    with pytest.warns(TruncatedTraceWarning, match="kept the 250 complete nodes"):
        h = read_host_trace(p, salvage=True, block_size=20000)
    assert len(h) == 250 and h.salvaged
    assert h.node(249) == doc("ddp_rank0.et.json.gz")["nodes"][249]
