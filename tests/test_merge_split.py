"""`merge` puts a whole job in one trace and `split` gives it back: split(merge(x)) writes files
byte-identical to x's, on random jobs (unknown fields and attributes, ids near 2**64) and on every
multi-rank job we have; the merged file opens as the job everywhere, and damage is named."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_trace.analyze.collectives import _instances
from chakra_trace.convert.text import text_to_chakra
from chakra_trace.errors import ChakraError, TraceFormatError
from chakra_trace.io.et import encode_trace, read_trace, write_trace
from chakra_trace.io.merge import INSTANCE, RANK, merge, split
from chakra_trace.io.merged_file import is_merged_file
from chakra_trace.io.workload import Workload
from chakra_trace.schema.enums import Attr, CollectiveType, NodeType
from chakra_trace.schema.node import Attribute, Node
from chakra_trace.schema.trace import Trace
from chakra_trace.synthesize.patterns import training_step
from chakra_trace.synthesize.scale import data_parallel
from conftest import DATA, run_cli, sample
from strategies import attribute_lists, metadatas, traces, unknown_fields

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- helpers


def _files(w: Workload) -> dict[int, bytes]:
    """The bytes `Workload.save` writes for each rank of a job (encoded here: no disk, no fsync)."""
    return {r: b"".join(encode_trace(w[r])) for r in w.ranks}


def assert_lossless(w: Workload, d: Path) -> Trace:
    """split(merge(w)), through a merged file opened as a job, writes w's files byte for byte."""
    before = _files(w)
    merged = merge(w)
    write_trace(merged, d / "job.et")
    back = Workload.open(d / "job.et")
    assert back.ranks == w.ranks
    assert back.groups == w.groups
    assert _files(back) == before
    assert _files(split(merged)) == before  # in memory too
    again = b"".join(encode_trace(merge(back)))  # and merging the job it opens as gives the same file
    assert again == (d / "job.et").read_bytes()
    return merged


def check_merged(w: Workload, merged: Trace) -> None:
    """The merged graph: ranks and ids as documented, dependencies kept inside their rank, one
    `coll_instance` per collective instance as the analyses pair them."""
    stride = next(a.uint64_val for a in merged.metadata.attr if a.name == "merged_id_stride")
    rank, has_rank = merged.attr_array(RANK, np.int64)
    # (a node with a `rank` attribute of its own reads as that one: merge's comes after the node's own)
    own = np.array([any(a.name == RANK for a in n.attrs) for r in w.ranks for n in w[r]], bool)
    expected = np.repeat(w.ranks, [len(w[r]) for r in w.ranks])
    assert has_rank[~own].all()
    assert np.array_equal(rank[~own], expected[~own])
    assert np.array_equal(merged.ids // np.uint64(stride), expected.astype(np.uint64))
    rank = expected
    assert len(np.unique(merged.ids)) == sum(len(np.unique(w[r].ids)) for r in w.ranks)  # no collisions
    src, dep_row, _ = merged.dep_rows("data")
    found = dep_row >= 0
    assert np.array_equal(rank[src[found]], rank[dep_row[found]])
    assert found.sum() == sum(int((w[r].dep_rows("data")[1] >= 0).sum()) for r in w.ranks)
    inst, has_inst = merged.attr_array(INSTANCE, np.int64)
    start = dict(zip(w.ranks, np.cumsum([0] + [len(w[r]) for r in w.ranks])))
    pairs = {frozenset((r, start[r] + row) for r, row in members.items()) for members in _instances(w).values()}
    ours: dict[int, set] = {}
    for row in np.flatnonzero(has_inst).tolist():
        ours.setdefault(int(inst[row]), set()).add((int(rank[row]), row))
    assert {frozenset(m) for m in ours.values()} == pairs


def _tmp():
    return tempfile.TemporaryDirectory(prefix="chakra-merge-")


# --------------------------------------------------------------------------- random jobs


@st.composite
def wild_jobs(draw) -> Workload:
    """Random traces (every corner of the wire format) on sparse ranks; some ranks share a trace."""
    ranks = draw(st.lists(st.integers(0, 40), min_size=1, max_size=4, unique=True))
    pool = draw(st.lists(traces(max_nodes=6), min_size=1, max_size=len(ranks)))
    w = Workload({r: pool[draw(st.integers(0, len(pool) - 1))] for r in ranks})
    if draw(st.booleans()):
        w.groups = {str(i): sorted(draw(st.sets(st.sampled_from(ranks), min_size=1))) for i in range(2)}
    return w


@st.composite
def collective_jobs(draw) -> Workload:
    """Ranks issuing collectives on groups (sometimes with `comm_seq`, out of issue order), between
    compute nodes, all carrying random attributes and unknown fields."""
    n = draw(st.integers(1, 10))
    groups = {"": list(range(n)), "dp": list(range(0, n, 2)), "tp": [0, n - 1]}
    w = Workload({}, {g: m for g, m in groups.items() if g})
    for r in range(n):
        nodes, nid = [], draw(st.integers(0, 3))
        mine = [g for g, m in groups.items() if r in m]
        seq = {g: 0 for g in mine}
        for _ in range(draw(st.integers(0, 8))):
            attrs = draw(attribute_lists()) if draw(st.integers(0, 3)) == 0 else []
            deps = [nodes[-1].id] if nodes and draw(st.booleans()) else []
            if draw(st.booleans()) and mine:
                g = draw(st.sampled_from(mine))
                attrs = [Attribute(Attr.COMM_TYPE, int(CollectiveType.ALL_REDUCE)), Attribute(Attr.COMM_SIZE, 64)]
                attrs += [Attribute(Attr.PG_NAME, g)] if g else []
                if draw(st.booleans()):
                    attrs.append(Attribute(Attr.COMM_SEQ, seq[g] + (1 if draw(st.booleans()) else -1)))
                seq[g] += 1
                kind = NodeType.COMM_COLL_NODE
            else:
                kind = NodeType.COMP_NODE
            unknown = draw(unknown_fields(11))
            nodes.append(Node(nid, f"op{nid}", kind, data_deps=deps, attrs=attrs, unknown_fields=unknown))
            nid += draw(st.integers(1, 3))
        w.traces[r] = Trace.from_nodes(nodes, metadata=draw(metadatas()))
    return w


@PROPERTY
@given(wild_jobs())
def test_split_of_merge_is_byte_identical_on_random_jobs(w):
    with _tmp() as d:
        assert_lossless(w, Path(d))


@PROPERTY
@given(collective_jobs())
def test_merged_collective_jobs_link_each_instance_and_split_back(w):
    with _tmp() as d:
        merged = assert_lossless(w, Path(d))
    check_merged(w, merged)


def test_ids_near_two_to_the_64_are_numbered_and_come_back(tmp_path):
    big = Trace.from_nodes([Node((1 << 64) - 1, "a", NodeType.COMP_NODE, data_deps=[3]), Node(3, "b")])
    w = Workload({0: big, 1: big})
    merged = assert_lossless(w, tmp_path)
    assert merged.ids.tolist() == [1, 0, 11, 10]  # rank * 10 + index among the rank's sorted ids
    assert merged.data.tolist() == [0, 10]


# --------------------------------------------------------------------------- every multi-rank job we have


def _quiet(f, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*a, **kw)


@cache
def job(name: str) -> Workload:
    kind, _, arg = name.partition(":")
    if kind == "corpus":
        return _quiet(Workload.open, DATA / "corpus" / arg)
    if kind == "data":
        return _quiet(Workload.open, DATA / arg)
    if kind == "text":
        file, npus = arg.split("@")
        mp = 4 if file.startswith("mlp") else None  # (the transformer's is in its file)
        return text_to_chakra(DATA / "text" / file, int(npus), 2, model_parallel_size=mp)
    if kind == "resnet":  # the one recorded `.et`, alone and as a two-rank job of identical ranks
        t = read_trace(sample("resnet50_ddp.0.et.gz"))
        return Workload({r: t for r in range(int(arg))})
    if kind == "ddp-scaled":
        return data_parallel(job("corpus:ddp"), int(arg))
    if kind == "training-step":
        return training_step(int(arg), 4, 10, 1 << 20)
    raise ValueError(name)


JOBS = [
    *(f"corpus:{j}" for j in ("ddp", "dlrm", "fsdp", "gpt2", "pp", "tp")),
    "data:alltoall_list",
    "data:pipeline",
    "resnet:1",
    "resnet:2",
    "text:transformer_fwd_in_bckwd.txt@16",
    "text:mlp_data_model.txt@16",
    "text:dlrm_hybrid.txt@16",
    "ddp-scaled:16",
    "training-step:32",
]


@pytest.mark.parametrize("name", JOBS)
def test_split_of_merge_is_byte_identical_on_our_jobs(name, tmp_path):
    w = job(name)
    merged = assert_lossless(w, tmp_path)
    check_merged(w, merged)
    back = Workload.open(tmp_path / "job.et")
    shared = {r: next(q for q in w.ranks if w[q] is w[r]) for r in w.ranks}
    if len(set(shared.values())) < len(w):  # ranks that shared a trace share one again
        assert all(back[r] is back[q] for r, q in shared.items())


def test_the_corpus_has_the_jobs_we_merge():
    assert sorted(p.name for p in (DATA / "corpus").iterdir() if p.is_dir()) == sorted(
        j.split(":")[1] for j in JOBS if j.startswith("corpus:")
    )


# --------------------------------------------------------------------------- commands


def test_cli_merge_and_split_carry_the_groups_file(tmp_path, capsys):
    w = job("text:transformer_fwd_in_bckwd.txt@16")
    w.save(tmp_path / "tx")
    groups = (json.dumps(w.groups, indent=1) + "\n").encode()  # as `chakra convert text` writes it
    (tmp_path / "tx.comm_groups.json").write_bytes(groups)
    rc, out, _ = run_cli(["merge", str(tmp_path / "tx"), "-o", str(tmp_path / "job.et.gz"), "--json"], capsys)
    assert rc == 0
    summary = json.loads(out)
    assert summary["ranks"] == 16 and summary["comm_groups"] == 8 and summary["id_stride"] == 1000
    assert summary["nodes"] == 16 * len(w[0]) and summary["collective_instances"] > 0
    assert is_merged_file(tmp_path / "job.et.gz") and not is_merged_file(tmp_path / "tx.0.et")
    rc, out, _ = run_cli(["split", str(tmp_path / "job.et.gz"), "-o", str(tmp_path / "back" / "tx"), "--json"], capsys)
    assert rc == 0 and len(json.loads(out)["files"]) == 16
    for p in sorted(tmp_path.glob("tx.*")):
        assert (tmp_path / "back" / p.name).read_bytes() == p.read_bytes(), p.name


@pytest.fixture(scope="module")
def ddp_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    job("corpus:ddp").save(d / "ddp")
    write_trace(merge(job("corpus:ddp")), d / "job.et")
    return d


@pytest.mark.parametrize(
    "command",
    [["analyze", "breakdown"], ["analyze", "collectives"], ["simulate", "--system", "ring-8"], ["validate"]],
    ids=lambda c: " ".join(c[:2]),
)
def test_commands_take_the_merged_file_as_the_job(command, ddp_files, capsys):
    def result(path):
        rc, out, err = run_cli([*command, str(path), "--json"], capsys)
        assert rc == 0, err
        doc = json.loads(out)
        doc.pop("wall_s", None)  # (how long the simulator ran)
        doc.pop("path", None)  # (what validate was given)
        return doc

    assert result(ddp_files / "job.et") == result(ddp_files / "ddp")


def test_info_graph_and_report_take_the_merged_file(ddp_files, capsys, tmp_path):
    rc, out, _ = run_cli(["info", str(ddp_files / "job.et"), "--json"], capsys)
    assert rc == 0 and sorted(json.loads(out)["ranks"]) == ["0", "1"]
    rc, out, _ = run_cli(["graph", str(ddp_files / "job.et"), "-o", str(tmp_path / "g.dot"), "--json"], capsys)
    assert rc == 0 and json.loads(out)["rank"] == 0
    rc, _, err = run_cli(["report", str(ddp_files / "job.et"), "-o", str(tmp_path / "r.html")], capsys)
    assert rc == 0, err


def test_open_reads_only_the_ranks_asked_for(ddp_files):
    w = Workload.open(ddp_files / "job.et", ranks=[1])
    assert w.ranks == [1]
    assert w[1].equals(job("corpus:ddp")[1])
    with pytest.raises(ChakraError, match="no rank 5; the job has ranks"):
        Workload.open(ddp_files / "job.et", ranks=[5])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_merged_job_through_a_pipe_opens_as_the_job(ddp_files, tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes((ddp_files / "job.et").read_bytes()))
    writer.start()
    try:
        w = Workload.open(fifo)
    finally:
        writer.join()
    assert w.ranks == [0, 1] and all(w[r].equals(job("corpus:ddp")[r]) for r in w.ranks)


# --------------------------------------------------------------------------- bad input


def test_split_of_a_per_rank_file_says_what_it_expected(ddp_files, capsys):
    path = ddp_files / "ddp.0.et"
    with pytest.raises(TraceFormatError, match=r"ddp\.0\.et: not a merged job .* written by `chakra merge`"):
        split(read_trace(path), path=path)
    rc, _, err = run_cli(["split", str(path), "-o", str(ddp_files / "x")], capsys)
    assert rc == 2 and "not a merged job" in err and str(path) in err
    assert Workload.open(path).ranks == [0]  # a per-rank file still opens as its rank


def test_merge_of_nothing_is_refused_and_a_lone_trace_is_rank_0():
    with pytest.raises(ChakraError, match="merge: the workload has no ranks"):
        merge(Workload({}))
    t = job("resnet:1")[0]
    assert split(merge(t)).traces[0].equals(t)


def _damaged(merged: Trace, how: str) -> Trace:
    t = merged.copy()
    if how == "id":
        t.ids[5] += np.uint64(10**9)
    elif how == "dependency":
        t.data[3] = np.uint64(10**12)
    elif how == "attribute":  # a node's last byte (its `rank` value)
        t.extra[t.extra_indptr[8] - 1] ^= 1
    elif how == "counts":
        a = next(a for a in t.metadata.attr if a.name == "merged_nodes")
        a.int64_list.values[0] += 1
    elif how == "metadata":
        a = next(a for a in t.metadata.attr if a.name == "merged_metadata")
        a.bytes_list.values[1] = b"\xff\xff"
    elif how == "groups":
        t.metadata.attr.add(name="merged_comm_groups").string_val = "{"
    return t


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("id", "node of rank 0 has its id outside that rank's ids"),
        ("dependency", r"has a dependency \(1000000000000\) outside that rank.s ids"),
        ("attribute", r"\(row 7\) does not end with the attributes merge gave it \(`rank` 0"),
        ("counts", "node counts add up to 4438, the file has 4437 nodes"),
        ("metadata", "rank 1's global metadata does not parse"),
        ("groups", "communicator groups are not JSON"),
    ],
)
def test_a_damaged_merge_is_named(how, message, tmp_path, capsys):
    path = tmp_path / "job.et"
    write_trace(_damaged(merge(job("corpus:ddp")), how), path)
    with pytest.raises(TraceFormatError, match=message) as e:
        Workload.open(path)
    assert str(e.value).startswith(str(path))
    rc, _, err = run_cli(["split", str(path), "-o", str(tmp_path / "x")], capsys)
    assert rc == 2 and err.startswith(f"error: {path}")
