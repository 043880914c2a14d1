"""Hostile inputs for the fuzz suite (issue 13), generated at test time: deterministic, seeded, small.

Every file a command reads may come from someone else, so each input class here is a function
`(dir, n, seed) -> list[Input]` writing up to `n` files of one kind of damage under `dir`. Nothing
big is committed: bombs are a few hundred KB on disk and are built by streaming. `tests/test_fuzz.py`
runs the reading commands over them; `benchmarks/fuzz_bench.py` runs more of them for longer.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chakra_trace.io.et import write_trace
from chakra_trace.io.jsonio import write_json
from chakra_trace.schema import proto as pb
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.wire import encode_varint_int

# what kind of file an input is: which commands read it and in which place
TRACE = "trace"  # a `.et` file or a job prefix: every reading command
CHAKRA_JSON = "chakra-json"  # `chakra from-json`
NETWORK = "network"  # network YAML given to `simulate --network`
SYSTEM = "system"  # system JSON given to `simulate --system`
GROUPS = "comm-groups"  # `--comm-groups`
HOST = "host"  # PyTorch host trace given to `convert pytorch`
KINETO = "kineto"  # Kineto trace given to `convert pytorch HOST KINETO`

HUGE_INT = "9" * 5000  # over Python's 4,300-digit int conversion limit
DEEP = 100_000  # nesting levels


@dataclass(frozen=True)
class Input:
    """One hostile file: `path` is what the command is given (a file or a job prefix)."""

    cls: str
    name: str
    path: Path
    role: str
    bomb: bool = False  # may take unbounded memory or time if unguarded: run only in a limited subprocess
    invalid: bool = False  # semantically invalid: `validate` must say so (1) and `simulate` refuse (2)
    repaired: bool = False  # ... unless it has one reading: `simulate` repairs it and says so (0 + a warning)
    companions: dict[str, Path] = field(default_factory=dict)  # the good files it goes with

    @property
    def id(self) -> str:
        return f"{self.cls}/{self.name}"


# --------------------------------------------------------------------------- good bases


def good_trace(rank: int = 0, world: int = 2):
    """A small valid rank of a `world`-rank job: compute chains, an all-reduce, a send/recv ring pair."""
    b = TraceBuilder(metadata={"schema": "1.0.2-chakra.0.0.4"})
    prev = b.comp("aten::mm", 100, num_ops=2_000_000, tensor_size=4096, start=0)
    prev = b.comp("aten::relu", 20, deps=[prev], tensor_size=4096, start=100)
    ar = b.collective("ALL_REDUCE", 1 << 20, deps=[prev], pg_name="0", duration=50, start=120)
    if world == 1:  # a file alone is run on every NPU: no peers to send to
        b.comp("aten::add_", 10, deps=[ar], tensor_size=4096, start=180)
        return b.build()
    s = b.send((rank + 1) % world, 4096, tag=1, deps=[ar], start=170, duration=5)
    r = b.recv((rank - 1) % world, 4096, tag=1, deps=[s], start=175, duration=5)
    b.comp("aten::add_", 10, deps=[r], tensor_size=4096, start=180)
    return b.build()


def write_good_job(d: Path, name: str = "good", world: int = 2) -> Path:
    """`<d>/<name>.<rank>.et` for every rank; returns the prefix."""
    d.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        write_trace(good_trace(r, world), d / f"{name}.{r}.et")
    return d / name


def good_bytes(d: Path) -> bytes:
    p = d / "_base.0.et"
    if not p.exists():
        d.mkdir(parents=True, exist_ok=True)
        write_trace(good_trace(0, world=1), p)
    return p.read_bytes()


GOOD_NETWORK = "topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n"
GOOD_SYSTEM = {
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
    "boost-mode": 0,
}


def good_host() -> dict:
    """A minimal PyTorch host execution trace (schema 1.0.1): a thread root, a step, two CPU ops."""

    def op(i, name, parent, schema="", inputs=(), shapes=(), types=(), outs=(), oshapes=(), otypes=()):
        return {
            "name": name,
            "id": i,
            "rf_id": i,
            "parent": parent,
            "fw_parent": 0,
            "seq_id": -1,
            "scope": 0,
            "tid": 1,
            "fw_tid": 0,
            "op_schema": schema,
            "inputs": list(inputs),
            "input_shapes": list(shapes),
            "input_types": list(types),
            "outputs": list(outs),
            "output_shapes": list(oshapes),
            "output_types": list(otypes),
        }

    t = [3, 4, 0, 16, 4, "cpu"]
    nodes = [
        op(1, "[pytorch|profiler|execution_graph|process]", 1),
        op(2, "[pytorch|profiler|execution_graph|thread]", 1),
        op(3, "ProfilerStep#1", 2),
        op(
            4,
            "aten::relu",
            3,
            "aten::relu(Tensor self) -> Tensor",
            [t],
            [[4, 4]],
            ["Tensor(float)"],
            [[5, 6, 0, 16, 4, "cpu"]],
            [[4, 4]],
            ["Tensor(float)"],
        ),
        op(
            5,
            "aten::add",
            3,
            "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
            [t, t, 1],
            [[4, 4], [4, 4], []],
            ["Tensor(float)", "Tensor(float)", "Int"],
            [[7, 8, 0, 16, 4, "cpu"]],
            [[4, 4]],
            ["Tensor(float)"],
        ),
    ]
    return {"schema": "1.0.1", "pid": 1, "time": "2026-01-01 00:00:00", "start_ts": 1000, "nodes": nodes}


def good_kineto(rank=0) -> dict:
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000, "dur": 100,
         "args": {"Record function id": 3}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 1010, "dur": 20,
         "args": {"Record function id": 4}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1040, "dur": 20,
         "args": {"Record function id": 5}},
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 1},
        "traceEvents": ev,
    }


def deep_json(levels: int = DEEP, leaf: str = "0") -> str:
    return "[" * levels + leaf + "]" * levels


def deep_object(levels: int = DEEP) -> str:
    return '{"a":' * levels + "0" + "}" * levels


# --------------------------------------------------------------------------- helpers


def _put(d: Path, name: str, data: bytes | str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def _pick(items: list, n: int, rnd: random.Random) -> list:
    """At most n of `items`: all if they fit, else the first (the named cases) and a seeded sample."""
    if len(items) <= n:
        return items
    if n <= 0:
        return []
    head = items[: max(1, n // 2)]
    return head + rnd.sample(items[len(head) :], n - len(head))


# --------------------------------------------------------------------------- input classes


def damaged_et(d: Path, n: int, seed: int) -> list[Input]:
    """Bit flips, truncation every k bytes, random bytes, a valid header followed by garbage."""
    rnd = random.Random(seed)
    good = good_bytes(d)
    d = d / "damaged"
    out = []
    step = max(1, len(good) // max(1, n // 3))
    for cut in range(1, len(good), step):
        out.append(("trunc%d" % cut, good[:cut]))
    for i in range(max(1, n // 3)):
        b = bytearray(good)
        for _ in range(rnd.choice([1, 2, 4, 16])):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        out.append((f"flip{i}", bytes(b)))
    meta_end = good[0] + 1
    for i in range(max(1, n // 6)):
        out.append((f"random{i}", bytes(rnd.getrandbits(8) for _ in range(rnd.choice([1, 7, 300, 4000])))))
        out.append((f"header_garbage{i}", good[:meta_end] + bytes(rnd.getrandbits(8) for _ in range(500))))
    out.append(("gzip_of_garbage", gzip.compress(bytes(rnd.getrandbits(8) for _ in range(2000)), mtime=0)))
    named = [o for o in out if o[0] in ("trunc1", "random0", "header_garbage0", "flip0")]
    rest = [o for o in out if o not in named]
    chosen = named + _pick(rest, max(0, n - len(named)), rnd)
    return [Input("damaged_et", name, _put(d, name + ".0.et", data), TRACE) for name, data in chosen[:n]]


def _gzip_stream(path: Path, chunks) -> None:
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0) as g:
        for c in chunks:
            g.write(c)


def _sub_ratio_blocks(total: int, rnd: random.Random, zeros_per_node: int = 4000):
    """`total` bytes of empty messages (zero bytes) salted with a small node of random id every
    `zeros_per_node` bytes, so that deflate cannot compress past the 500:1 ratio guard."""
    block = bytearray()
    done = 0
    while done < total:
        block += bytes(zeros_per_node)
        v = rnd.getrandbits(28) | (1 << 21)
        vid = bytes([0x80 | (v & 0x7F), 0x80 | ((v >> 7) & 0x7F), 0x80 | ((v >> 14) & 0x7F), (v >> 21) & 0x7F])
        block += bytes([1 + len(vid)]) + b"\x08" + vid
        if len(block) >= 1 << 20:
            done += len(block)
            yield bytes(block)
            block = bytearray()
    if block:
        yield bytes(block)


def gzip_bombs(d: Path, n: int, seed: int) -> list[Input]:
    """Small gzip files that expand hugely: zero bytes (each an empty message), one huge length
    prefix, and a bomb salted to stay under the ratio guard (the one that got past it)."""
    rnd = random.Random(seed)
    d = d / "gzip_bombs"
    d.mkdir(parents=True, exist_ok=True)
    cases: list[tuple[str, Callable[[Path], None]]] = [
        ("zeros_200MB", lambda p: _gzip_stream(p, (bytes(1 << 20) for _ in range(200)))),
        ("one_prefix_200MB", lambda p: _gzip_stream(p, [b"\x00\x80\x84\xaf\x5f"] + [bytes(1 << 20)] * 200)),
        ("sub_ratio_150MB", lambda p: _gzip_stream(p, _sub_ratio_blocks(150 << 20, rnd))),
        ("concatenated_members", lambda p: p.write_bytes(gzip.compress(bytes(1 << 20), mtime=0) * 200)),
    ]
    out = []
    for name, make in cases[:n]:
        p = d / f"{name}.0.et.gz"
        make(p)
        out.append(Input("gzip_bombs", name, p, TRACE, bomb=True))
    return out


def empty_nodes(d: Path, n: int, seed: int) -> list[Input]:
    """Plain files of many tiny nodes: 1 byte on the wire, ~190 B in memory each."""
    rnd = random.Random(seed)
    d = d / "empty_nodes"
    cases = [
        ("zeros_10MB", bytes(10 << 20)),
        ("id_only_nodes_4MB", b"\x00" + b"\x02\x08\x01" * (4 << 20 // 3)),
        ("salted_zeros_8MB", b"".join(_sub_ratio_blocks(8 << 20, rnd, zeros_per_node=64))),
    ]
    return [Input("empty_nodes", name, _put(d, name + ".0.et", data), TRACE, bomb=True) for name, data in cases[:n]]


def chakra_json(d: Path, n: int, seed: int) -> list[Input]:
    """`from-json` input of the wrong shape, huge integers, deep nesting."""
    rnd = random.Random(seed)
    d = d / "chakra_json"
    d.mkdir(parents=True, exist_ok=True)
    base = d / "_good.json"
    write_json(good_trace(), base)
    doc = json.loads(base.read_text())
    node = doc["nodes"][0]
    head = json.dumps({k: v for k, v in doc.items() if k != "nodes"})

    def with_node(**kw) -> str:
        return json.dumps(dict(doc, nodes=[dict(node, **kw)]))

    cases = [
        ("empty", ""),
        ("null", "null"),
        ("list", "[]"),
        ("string", '"nodes"'),
        ("nodes_not_list", json.dumps(dict(doc, nodes=5))),
        ("node_not_object", json.dumps(dict(doc, nodes=[1, "x", None]))),
        ("id_string", with_node(id="seven")),
        ("id_negative", with_node(id=-1)),
        ("id_float", with_node(id=1.5)),
        ("id_2_64", with_node(id=1 << 64)),
        ("type_99", with_node(type=99)),
        ("type_bogus", with_node(type="NOT_A_NODE")),
        ("deps_not_list", with_node(data_deps="1,2")),
        ("deps_nested", with_node(data_deps=[[1]])),
        ("attr_bad", with_node(attr=[{"name": "x", "nonsense_val": 1}])),
        ("inputs_bad_base64", with_node(inputs={"values": "!!!", "shapes": "", "types": ""})),
        ("format_wrong", json.dumps(dict(doc, format="other"))),
        ("version_huge", json.dumps(dict(doc, version=10**30))),
        ("huge_int_id", with_node(id=0).replace('"id": 0', '"id": ' + HUGE_INT, 1)),
        ("huge_int_duration", json.dumps(dict(doc, nodes=[dict(node, duration_micros=0)])).replace(
            '"duration_micros": 0', '"duration_micros": ' + HUGE_INT, 1)),
        ("deep_nodes", head[:-1] + ', "nodes": [' + deep_json() + "]}"),
        ("deep_attr", with_node(attr=[]).replace('"attr": []', '"attr": ' + deep_json(), 1)),
        ("truncated", base.read_text()[: len(base.read_text()) // 2]),
        ("jsonl_garbage", head + "\n" + "{not json}\n"),
        ("nan_literal", with_node(duration_micros=0).replace('"duration_micros": 0', '"duration_micros": NaN', 1)),
    ]  # fmt: skip
    chosen = _pick(cases, n, rnd)
    return [
        Input(
            "chakra_json", name, _put(d, name + (".jsonl" if name.startswith("jsonl") else ".json"), text), CHAKRA_JSON
        )
        for name, text in chosen
    ]


def json_huge_deep(d: Path, n: int, seed: int) -> list[Input]:
    """Integers over 4,300 digits and 100k-level nesting in every JSON reader."""
    d = d / "json_huge_deep"
    d.mkdir(parents=True, exist_ok=True)
    sys_huge = json.dumps(dict(GOOD_SYSTEM, **{"endpoint-delay": 0})).replace(
        '"endpoint-delay": 0', '"endpoint-delay": ' + HUGE_INT
    )
    host_huge = json.dumps(good_host()).replace('"start_ts": 1000', '"start_ts": ' + HUGE_INT)
    kin_huge = json.dumps(good_kineto()).replace('"rank": 0', '"rank": ' + HUGE_INT)
    cases = [
        ("system_huge_int", sys_huge, SYSTEM),
        ("system_deep", deep_object(), SYSTEM),
        ("groups_huge_int", '{"0": [0, ' + HUGE_INT + "]}", GROUPS),
        ("groups_deep", '{"0": ' + deep_json() + "}", GROUPS),
        ("host_huge_int", host_huge, HOST),
        ("host_deep", json.dumps(good_host()).replace('"inputs": []', '"inputs": ' + deep_json(), 1), HOST),
        ("kineto_huge_int", kin_huge, KINETO),
        ("kineto_deep", '{"traceEvents": ' + deep_json() + "}", KINETO),
        (
            "chakra_json_deep",
            '{"format": "chakra-trace-json", "version": 1, "metadata": ' + deep_object() + "}",
            CHAKRA_JSON,
        ),
        ("chakra_json_huge", '{"format": "chakra-trace-json", "version": ' + HUGE_INT + "}", CHAKRA_JSON),
    ]
    # deep nesting may blow a C stack: these run in a subprocess, like bombs
    return [
        Input("json_huge_deep", name, _put(d, name + ".json", text), role, bomb=True) for name, text, role in cases[:n]
    ]


def network_yaml(d: Path, n: int, seed: int) -> list[Input]:
    """Network YAML with absurd values: huge, negative, NaN, inf, 1e19, 1e-300, deep nesting."""
    rnd = random.Random(seed)
    d = d / "network_yaml"

    def net(topology="[ Ring ]", npus="[ 2 ]", bw="[ 50 ]", lat="[ 500 ]") -> str:
        return f"topology: {topology}\nnpus_count: {npus}\nbandwidth: {bw}\nlatency: {lat}\n"

    cases = [
        ("latency_1e19", net(lat="[ 1e19 ]")),
        ("latency_2_63", net(lat=f"[ {1 << 63} ]")),
        ("latency_negative", net(lat="[ -500 ]")),
        ("latency_nan", net(lat="[ .nan ]")),
        ("latency_inf", net(lat="[ .inf ]")),
        ("bandwidth_1e-300", net(bw="[ 1e-300 ]")),
        ("bandwidth_zero", net(bw="[ 0 ]")),
        ("bandwidth_negative", net(bw="[ -50 ]")),
        ("bandwidth_inf", net(bw="[ .inf ]")),
        ("npus_1e9", net(npus="[ 1000000000 ]")),
        ("npus_float_1e9", net(npus="[ 1e9 ]")),
        ("npus_negative", net(npus="[ -2 ]")),
        ("npus_zero", net(npus="[ 0 ]")),
        ("npus_huge_int", net(npus=f"[ {HUGE_INT} ]")),
        ("latency_huge_int", net(lat=f"[ {HUGE_INT} ]")),
        ("dims_mismatch", net(npus="[ 2, 4 ]")),
        ("topology_bogus", net(topology="[ Hypercube9 ]")),
        ("not_a_mapping", "- 1\n- 2\n"),
        ("strings", net(bw="[ fast ]", lat="[ soon ]")),
        ("deep", "a: " + "[" * 20_000 + "]" * 20_000 + "\n"),
        ("anchors_billion_laughs", "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
         "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
         "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
         + net()),
        ("python_tag", "topology: !!python/object/apply:os.system ['touch PWNED']\nnpus_count: [2]\n"),
        ("empty", ""),
    ]  # fmt: skip
    chosen = _pick(cases, n, rnd)
    return [Input("network_yaml", name, _put(d, name + ".yml", text), NETWORK, bomb=True) for name, text in chosen]


def system_json(d: Path, n: int, seed: int) -> list[Input]:
    """System JSON with absurd values: npus 1e9, dataset splits 1e9, negative, NaN, wrong types."""
    rnd = random.Random(seed)
    d = d / "system_json"

    def sys_(**kw) -> str:
        return json.dumps(dict(GOOD_SYSTEM, **kw))

    cases = [
        ("splits_1e9", sys_(**{"preferred-dataset-splits": 1_000_000_000})),
        ("splits_float_1e9", sys_(**{"preferred-dataset-splits": 1e9})),
        ("splits_zero", sys_(**{"preferred-dataset-splits": 0})),
        ("splits_negative", sys_(**{"preferred-dataset-splits": -4})),
        ("chunks_1e9", sys_(**{"active-chunks-per-dimension": 1_000_000_000})),
        ("npus_count_1e9", sys_(npus_count=1_000_000_000)),
        ("endpoint_delay_negative", sys_(**{"endpoint-delay": -10})),
        ("endpoint_delay_1e19", sys_(**{"endpoint-delay": 1e19})),
        ("endpoint_delay_nan", sys_(**{"endpoint-delay": "NaN"}).replace('"NaN"', "NaN")),
        ("local_mem_bw_zero", sys_(**{"local-mem-bw": 0})),
        ("local_mem_bw_inf", sys_(**{"local-mem-bw": 1e400}).replace("Infinity", "1e400")),
        ("impl_unknown", sys_(**{"all-reduce-implementation": ["quantum"]})),
        ("impl_not_list", sys_(**{"all-reduce-implementation": 7})),
        ("policy_unknown", sys_(**{"scheduling-policy": "RANDOM"})),
        ("not_object", "[1, 2, 3]"),
        ("empty", ""),
        ("truncated", sys_()[:40]),
    ]
    chosen = _pick(cases, n, rnd)
    return [Input("system_json", name, _put(d, name + ".json", text), SYSTEM, bomb=True) for name, text in chosen]


def comm_groups(d: Path, n: int, seed: int) -> list[Input]:
    """Communicator-group JSON: ranks that do not exist, negative, wrong shapes."""
    rnd = random.Random(seed)
    d = d / "comm_groups"
    cases = [
        ("rank_99", {"0": [0, 99]}, True),
        ("rank_negative", {"0": [0, -1]}, True),
        ("rank_2_63", {"0": [0, 1 << 63]}, True),
        ("rank_duplicate", {"0": [0, 0]}, False),
        ("group_empty", {"0": []}, False),
        ("ranks_strings", {"0": ["0", "1"]}, False),
        ("ranks_floats", {"0": [0.0, 1.5]}, False),
        ("ranks_bools", {"0": [True, False]}, False),
        ("not_object", [[0, 1]], False),
        ("many_groups", {str(i): [0, 1] for i in range(50_000)}, False),
        # every rank of the job is in it: validate warns about the 199,998 ranks with no trace (a job
        # may be opened in part); simulate refuses a group the traces use that names NPUs it lacks
        ("huge_group", {"0": list(range(200_000))}, False),
    ]
    chosen = _pick(cases, n, rnd)
    return [
        Input("comm_groups", name, _put(d, name + ".json", json.dumps(v)), GROUPS, invalid=inv)
        for name, v, inv in chosen
    ]


def host_trace(d: Path, n: int, seed: int) -> list[Input]:
    """PyTorch host traces with parent cycles, missing fields, wrong types, huge values."""
    rnd = random.Random(seed)
    d = d / "host_trace"

    def mutate(f) -> str:
        h = good_host()
        f(h)
        return json.dumps(h)

    def set_node(i, **kw):
        return lambda h: h["nodes"][i].update(kw)

    def drop(i, key):
        return lambda h: h["nodes"][i].pop(key)

    cases = [
        ("parent_cycle", mutate(lambda h: (h["nodes"][2].update(parent=4), h["nodes"][3].update(parent=3)))),
        ("parent_self", mutate(set_node(3, parent=4))),
        ("parent_missing", mutate(set_node(3, parent=999))),
        ("no_nodes", mutate(lambda h: h.pop("nodes"))),
        ("nodes_not_list", mutate(lambda h: h.update(nodes={"a": 1}))),
        ("node_not_object", mutate(lambda h: h["nodes"].append(7))),
        ("missing_id", mutate(drop(3, "id"))),
        ("missing_name", mutate(drop(3, "name"))),
        ("missing_inputs", mutate(drop(4, "inputs"))),
        ("id_string", mutate(set_node(3, id="four"))),
        ("id_2_70", mutate(set_node(3, id=1 << 70))),
        ("duplicate_ids", mutate(set_node(4, id=4))),
        ("shapes_mismatch", mutate(set_node(4, input_shapes=[[4, 4]]))),
        ("types_mismatch", mutate(set_node(4, input_types=["Tensor(float)"]))),
        ("tensor_bad", mutate(set_node(3, inputs=[[1, 2]]))),
        ("shape_huge", mutate(set_node(3, input_shapes=[[1 << 62, 1 << 62]]))),
        ("schema_garbage", mutate(set_node(3, op_schema="aten::relu(((("))),
        ("schema_wrong_version", mutate(lambda h: h.update(schema="99.0"))),
        ("not_object", "[]"),
        ("empty", ""),
    ]
    chosen = _pick(cases, n, rnd)
    return [Input("host_trace", name, _put(d, name + ".json", text), HOST) for name, text in chosen]


def kineto_json(d: Path, n: int, seed: int) -> list[Input]:
    """Kineto traces with a non-integer distributedInfo.rank and other wrong shapes."""
    rnd = random.Random(seed)
    d = d / "kineto_json"

    def k(**dist) -> str:
        t = good_kineto()
        t["distributedInfo"].update(dist)
        return json.dumps(t)

    cases = [
        ("rank_string", k(rank="zero")),
        ("rank_float", k(rank=1.5)),
        ("rank_list", k(rank=[0])),
        ("rank_null", k(rank=None)),
        ("rank_negative", k(rank=-3)),
        ("rank_2_63", k(rank=1 << 63)),
        ("dist_not_object", json.dumps(dict(good_kineto(), distributedInfo=5))),
        ("events_not_list", json.dumps(dict(good_kineto(), traceEvents={"x": 1}))),
        ("event_not_object", json.dumps(dict(good_kineto(), traceEvents=[1, None, "x"]))),
        ("event_ts_string", json.dumps(dict(good_kineto(), traceEvents=[dict(good_kineto()["traceEvents"][1], ts="x")]))),
        ("event_dur_negative", json.dumps(dict(good_kineto(), traceEvents=[dict(good_kineto()["traceEvents"][1], dur=-5)]))),
        ("not_object", "[]"),
        ("empty", ""),
    ]  # fmt: skip
    chosen = _pick(cases, n, rnd)
    return [Input("kineto_json", name, _put(d, name + ".json", text), KINETO) for name, text in chosen]


def _raw_node(i: int, **kw) -> pb.Node:
    return pb.Node(id=i, name=kw.pop("name", f"n{i}"), **kw)


def _write_raw(path: Path, nodes: list[pb.Node]) -> None:
    """Length-delimited messages written by hand: values TraceBuilder would not produce."""

    def frame(m) -> bytes:
        b = m.SerializeToString()
        return encode_varint_int(len(b)) + b

    path.write_bytes(frame(pb.GlobalMetadata(version="1.0.2-chakra.0.0.4")) + b"".join(frame(m) for m in nodes))


def semantic_et(d: Path, n: int, seed: int) -> list[Input]:
    """Well-formed traces that mean nothing a simulator can run: unknown types, negative sizes,
    sends to NPUs that do not exist, self-dependencies, cycles, collectives that do not match across ranks."""
    rnd = random.Random(seed)
    d = d / "semantic_et"
    d.mkdir(parents=True, exist_ok=True)

    def job(name: str, make: Callable[[int], TraceBuilder], world: int = 2) -> Path:
        sub = d / name
        sub.mkdir(exist_ok=True)
        for r in range(world):
            write_trace(make(r).build(), sub / f"{name}.{r}.et")
        return sub / name

    def coll(types_sizes):
        def make(r):
            b = TraceBuilder()
            prev = b.comp("fwd", 10)
            for ct, size in types_sizes(r):
                prev = b.collective(ct, size, deps=[prev], pg_name="0")
            return b

        return make

    def one(build) -> Callable[[int], TraceBuilder]:
        def make(r):
            b = TraceBuilder()
            build(b, r)
            return b

        return make

    cases: list[tuple[str, Callable[[], Path]]] = [
        ("comm_type_99", lambda: job("comm_type_99", coll(lambda r: [(99, 1024)]))),
        ("node_type_99", lambda: job("node_type_99", one(lambda b, r: b.add("weird", 99, duration=5)))),
        ("negative_comm_size", lambda: job("negative_comm_size", coll(lambda r: [("ALL_REDUCE", -4096)]))),
        ("order_mismatch", lambda: job("order_mismatch", coll(
            lambda r: [("ALL_REDUCE", 1024), ("ALL_GATHER", 1024)][:: 1 if r == 0 else -1]))),
        ("size_mismatch", lambda: job("size_mismatch", coll(lambda r: [("ALL_REDUCE", 1024 * (r + 1))]))),
        ("count_mismatch", lambda: job("count_mismatch", coll(lambda r: [("ALL_REDUCE", 1024)] * (r + 1)))),
        ("send_to_npu_7", lambda: job("send_to_npu_7", one(lambda b, r: b.send(7, 4096)))),
        ("recv_without_send", lambda: job("recv_without_send", one(lambda b, r: b.recv(1 - r, 4096, tag=r)))),
        ("send_negative_dst", lambda: job("send_negative_dst", one(lambda b, r: b.send(-1, 4096)))),
        ("self_data_dep", lambda: job("self_data_dep", one(lambda b, r: b.add("loop", id=1, data_deps=[1], duration=5)))),
        ("self_ctrl_dep", lambda: job("self_ctrl_dep", one(lambda b, r: b.add("loop", id=1, ctrl_deps=[1], duration=5)))),
        ("cycle", lambda: job("cycle", one(lambda b, r: (b.add("a", id=1, data_deps=[2], duration=5),
                                                          b.add("b", id=2, data_deps=[1], duration=5))))),
        ("dep_missing", lambda: job("dep_missing", one(lambda b, r: b.add("a", id=1, data_deps=[12345], duration=5)))),
        ("duplicate_ids", lambda: job("duplicate_ids", one(lambda b, r: (b.add("a", id=1, duration=5),
                                                                          b.add("b", id=1, duration=5))))),
        ("duration_2_63", lambda: _raw_job(d, "duration_2_63", [_raw_node(1, type=4, duration_micros=(1 << 63) + 5)])),
        ("duration_max", lambda: _raw_job(d, "duration_max", [_raw_node(1, type=4, duration_micros=(1 << 64) - 1)])),
    ]  # fmt: skip
    chosen = _pick(cases, n, rnd)
    # the cases whose defects validate must report (errors, exit 1) and simulate must refuse (exit 2)
    invalid = {
        "comm_type_99", "node_type_99", "negative_comm_size", "order_mismatch", "size_mismatch", "count_mismatch",
        "send_to_npu_7", "send_negative_dst", "self_data_dep", "self_ctrl_dep", "cycle", "duplicate_ids",
    }  # fmt: skip
    # of those, what `validate --fix` and the simulator repair (a self-dependency is dropped), with a warning
    repaired = {"self_data_dep", "self_ctrl_dep"}
    return [
        Input("semantic_et", name, make(), TRACE, invalid=name in invalid, repaired=name in repaired)
        for name, make in chosen
    ]


def _raw_job(d: Path, name: str, nodes: list[pb.Node], world: int = 2) -> Path:
    sub = d / name
    sub.mkdir(exist_ok=True)
    for r in range(world):
        _write_raw(sub / f"{name}.{r}.et", nodes)
    return sub / name


XSS = '</script><script>alert("xss")</script><img src=x onerror=alert(1)>'


def hostile_strings(d: Path, n: int, seed: int) -> list[Input]:
    """Names that must be escaped where they are shown: HTML/JS injection, control characters,
    very long names, bidi overrides, in op names, group names and metadata."""
    rnd = random.Random(seed)
    d = d / "hostile_strings"
    d.mkdir(parents=True, exist_ok=True)
    strings = [
        ("xss", XSS),
        ("control_chars", "".join(chr(c) for c in range(1, 32)) + "\x7f\x1b[31mRED\x1b[0m"),
        ("long_name", "aten::" + "x" * 200_000),
        ("bidi", "aten::mm\u202egnp.exe\u202c"),
        ("quotes", "a\"b'c`d\\e{f}g]]>--><!--"),
        ("dot_injection", 'x" ]; evil [label="pwned'),
        ("nul_and_surrogate_like", "a\x00b\ufffd\U0010ffff"),
    ]
    out = []
    for name, s in _pick(strings, n, rnd):
        sub = d / name
        sub.mkdir(exist_ok=True)
        for r in range(2):
            b = TraceBuilder(metadata={"schema": "1.0.2-chakra.0.0.4", "note": s})
            x = b.comp(s, 100, num_ops=1000, tensor_size=64, start=10)
            y = b.comp(s[:50] + "2", 50, deps=[x], tensor_size=64, start=110)
            b.collective("ALL_REDUCE", 4096, deps=[y], pg_name=s[:100], name=s[:100], duration=20, start=160)
            write_trace(b.build(), sub / f"{name}.{r}.et")
        out.append(Input("hostile_strings", name, sub / name, TRACE))
    return out


# every input class: name -> generator (dir, n, seed) -> inputs
CLASSES: dict[str, Callable[[Path, int, int], list[Input]]] = {
    "damaged_et": damaged_et,
    "gzip_bombs": gzip_bombs,
    "empty_nodes": empty_nodes,
    "chakra_json": chakra_json,
    "json_huge_deep": json_huge_deep,
    "network_yaml": network_yaml,
    "system_json": system_json,
    "comm_groups": comm_groups,
    "host_trace": host_trace,
    "kineto_json": kineto_json,
    "semantic_et": semantic_et,
    "hostile_strings": hostile_strings,
}


def corpus(d: Path, n: int, seed: int = 13, classes: list[str] | None = None) -> list[Input]:
    """Up to n inputs of every class (or of `classes`), written under d."""
    out = []
    for name in classes or list(CLASSES):
        out.extend(CLASSES[name](d, n, seed))
    return out


def companions(d: Path) -> dict[str, Path]:
    """The good files that a hostile file of another role goes with."""
    d.mkdir(parents=True, exist_ok=True)
    net = _put(d, "good_net.yml", GOOD_NETWORK)
    sys_ = _put(d, "good_sys.json", json.dumps(GOOD_SYSTEM))
    host = _put(d, "good_host.json", json.dumps(good_host()))
    kin = _put(d, "good_kineto.json", json.dumps(good_kineto()))
    return {"job": write_good_job(d / "job"), "network": net, "system": sys_, "host": host, "kineto": kin}
