"""Validation of traces and workloads, repairs, and `chakra validate`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from chakra_trace.cli.validate import validate as validate_cmd
from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import NodeType
from chakra_trace.schema.graph import DepGraph
from chakra_trace.schema.node import Attribute, Node
from chakra_trace.schema.trace import Trace
from chakra_trace.validate import (
    ABSURD_BYTES,
    SAMPLE,
    Issue,
    ValidationReport,
    fix_trace,
    validate_trace,
    validate_workload,
)
from conftest import sample

DATA = Path(__file__).parent / "data"
RESNET = sample("resnet50_ddp.0.et.gz")


def codes(report: ValidationReport) -> dict[str, int]:
    return report.codes()


def only(report: ValidationReport, code: str) -> Issue:
    found = [i for i in report.issues if i.code == code]
    assert len(found) == 1, (code, report.render())
    return found[0]


def clean_trace() -> Trace:
    b = TraceBuilder()
    x = b.comp("fwd", 10, num_ops=1000, tensor_size=4096)
    y = b.comp("bwd", 10, deps=[x])
    b.collective("ALL_REDUCE", 1 << 20, deps=[y])
    return b.build()


def chain(n: int) -> Trace:
    """n compute nodes, ids 1..n sorted, each depending on the previous one (built columnar)."""
    ids = np.arange(1, n + 1, dtype=np.uint64)
    indptr = np.concatenate([[0], np.arange(n, dtype=np.int64)])
    return Trace(n, ids=ids, types=np.full(n, NodeType.COMP_NODE, np.int32), data_indptr=indptr, data=ids[:-1].copy())


# --------------------------------------------------------------------------- one trace


def test_clean_trace_has_no_issues():
    r = validate_trace(clean_trace())
    assert r.issues == [] and r.ok and r.nodes == 3
    assert r.summary_line() == "OK: no issues in 3 nodes"


def test_empty_trace():
    r = validate_trace(Trace(0))
    assert r.ok and r.issues == []


def test_duplicate_ids():
    b = TraceBuilder()
    b.add("a", id=5)
    b.add("b", id=5)
    b.add("c", id=6)
    b.add("d", id=6)
    b.add("e", id=7)
    i = only(validate_trace(b.build()), "duplicate-id")
    assert (i.severity, i.count, i.node_ids, i.fixable) == ("error", 2, [5, 6], False)


def test_missing_data_and_ctrl_deps_reported_separately():
    b = TraceBuilder()
    a = b.add("a")
    b.add("b", data_deps=[a, 99])
    b.add("c", ctrl_deps=[98, 97], data_deps=[99])
    b.add("d", ctrl_deps=[97])
    r = validate_trace(b.build())
    d = only(r, "missing-data-dep")
    assert (d.severity, d.count, d.node_ids, d.fixable) == ("warning", 2, [1, 2], True)
    assert d.details["missing_ids"] == [99] and d.details["missing_targets"] == 1
    c = only(r, "missing-ctrl-dep")
    assert (c.count, c.node_ids) == (3, [2, 3])
    assert c.details == {"dependents": 2, "missing_targets": 2, "missing_ids": [97, 98]}
    assert r.ok  # warnings only: the trace still loads


def test_self_and_duplicate_deps():
    b = TraceBuilder()
    a = b.add("a")
    b.add("b", id=1, data_deps=[a, a, 1], ctrl_deps=[a, a, a])
    b.add("c", id=2, ctrl_deps=[2])
    r = validate_trace(b.build())
    s = only(r, "self-dep")
    assert (s.count, s.node_ids, s.details) == (2, [1, 2], {"data": 1, "ctrl": 1})
    assert s.severity == "error" and s.fixable  # it never resolves; --fix drops it
    d = only(r, "duplicate-dep")
    assert (d.count, d.node_ids, d.details) == (3, [1], {"data": 1, "ctrl": 2})
    assert d.severity == "warning"
    assert not validate_trace(fix_trace(b.build())[0]).errors
    assert "cycle" not in codes(r)  # self-dependencies are not reported as cycles


def _is_real_cycle(trace: Trace, ids: list[int]) -> bool:
    for a, b in zip(ids, ids[1:] + ids[:1]):
        row = trace.row(a)
        if b not in set(trace.data_deps(row).tolist()) | set(trace.ctrl_deps(row).tolist()):
            return False
    return len(set(ids)) == len(ids)


def test_cycle_is_reported_with_a_real_cycle():
    b = TraceBuilder()
    b.add("n1", id=1)
    b.add("n2", id=2, data_deps=[1, 4])  # 2 -> 4 -> 3 -> 2 (mixed data/ctrl)
    b.add("n3", id=3, ctrl_deps=[2])
    b.add("n4", id=4, data_deps=[3])
    b.add("n5", id=5, data_deps=[4])  # behind the cycle
    t = b.build()
    r = validate_trace(t)
    i = only(r, "cycle")
    assert i.severity == "error" and not r.ok
    cyc = i.details["cycle"]
    assert sorted(cyc) == [2, 3, 4] and _is_real_cycle(t, cyc)
    assert i.count == 4 and i.details["blocked_nodes"] == 4  # nodes 2, 3, 4 and 5 never run
    assert i.details["cycle_length"] == 3 and sorted(i.node_ids) == [2, 3, 4]
    # the message lists the cycle in order, closing on its first node
    path = " ".join(f"{a} -{k}->" for a, k in zip(cyc, i.details["edge_kinds"])) + f" {cyc[0]}"
    assert path in i.message
    assert set(i.details["edge_kinds"]) == {"data", "ctrl"}


def test_forward_dependencies_without_cycle():
    # rows in reverse topological order: every dependency points to a later row, still acyclic
    b = TraceBuilder()
    b.add("c", id=3, data_deps=[2])
    b.add("b", id=2, data_deps=[1])
    b.add("a", id=1)
    assert validate_trace(b.build()).issues == []


@pytest.mark.parametrize("seed", range(20))
def test_graph_cycle_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = 60
    perm = rng.permutation(n)  # a hidden topological order
    src = rng.integers(0, n, 150)
    dst = rng.integers(0, n, 150)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    fwd = perm[dst] < perm[src]  # acyclic: dependencies come earlier in the hidden order
    assert DepGraph(n, src[fwd], dst[fwd]).cycle() is None
    found = DepGraph(n, src, dst).cycle()
    if (~fwd).any():
        assert found is not None
    if found is not None:
        cyc, blocked = found
        edges = set(zip(src.tolist(), dst.tolist()))
        assert len(set(cyc)) == len(cyc) >= 2 and blocked >= len(cyc)
        assert all((a, b) in edges for a, b in zip(cyc, cyc[1:] + cyc[:1]))


def test_node_types():
    b = TraceBuilder()
    b.add("bad", 42)
    b.add("bad2", 99)
    b.add("reserved", 9)
    b.add("untyped", 0)
    b.add("ok", "COMP")
    r = validate_trace(b.build())
    bad = only(r, "invalid-node-type")
    assert (bad.severity, bad.count, bad.node_ids, bad.details["values"]) == ("error", 2, [0, 1], [42, 99])
    res = only(r, "reserved-node-type")
    assert (res.severity, res.count, res.node_ids) == ("warning", 1, [2])
    un = only(r, "untyped-node")
    assert (un.severity, un.count, un.node_ids) == ("warning", 1, [3])


def test_comm_type_and_collective_attributes():
    b = TraceBuilder()
    b.add("badtype", "COMM_COLL", comm_type=77, comm_size=8)  # 0
    b.add("notype", "COMM_COLL", comm_size=8, is_cpu_op=False)  # 1
    b.add("nosize", "COMM_COLL", comm_type=0)  # 2
    b.add("nothing", "COMM_COLL", is_cpu_op=False)  # 3: GPU-side, not a host launch op
    b.add("c10d::allreduce_", "COMM_COLL", is_cpu_op=True)  # 4: host-side launch op
    b.collective("ALL_GATHER", 64)  # 5: fine
    r = validate_trace(b.build())
    i = only(r, "invalid-comm-type")
    assert (i.severity, i.count, i.node_ids, i.details["values"]) == ("error", 1, [0], [77])
    missing_type = [i for i in r.issues if i.code == "collective-missing-type"]
    assert len(missing_type) == 2
    host = next(i for i in missing_type if i.details["host_side"])
    other = next(i for i in missing_type if not i.details["host_side"])
    assert (host.count, host.node_ids, host.fixable) == (1, [4], True)
    assert (other.count, other.node_ids, other.fixable) == (2, [1, 3], False)
    assert "ALL_REDUCE" in other.message
    ms = only(r, "collective-missing-size")
    assert (ms.count, ms.node_ids) == (2, [2, 3])


def test_point_to_point_attributes():
    b = TraceBuilder()
    b.add("s", "COMM_SEND", comm_size=8)  # no comm_dst
    b.add("r", "COMM_RECV", comm_size=8)  # no comm_src
    b.add("r2", "COMM_RECV", comm_src=-1, comm_size=8)
    b.add("s2", "COMM_SEND", comm_dst=1)  # no size
    r = validate_trace(b.build())
    peers = [i for i in r.issues if i.code == "p2p-missing-peer"]
    assert {(i.details["attr"], tuple(i.node_ids)) for i in peers} == {("comm_dst", (0,)), ("comm_src", (1,))}
    assert all(i.severity == "error" for i in peers)
    assert only(r, "invalid-peer").node_ids == [2]
    assert only(r, "p2p-missing-size").node_ids == [3]


def test_negative_and_absurd_sizes():
    b = TraceBuilder()
    b.add("c", "COMM_COLL", comm_type=0, comm_size=-5)
    b.add("t", "COMP", tensor_size=(1 << 64) - 1)  # a -1 stored as uint64
    b.add("f", "COMP", num_ops=-1)
    b.add("big", "COMM_COLL", comm_type=0, comm_size=ABSURD_BYTES + 1)
    b.add("bigt", "COMP", tensor_size=1 << 60)
    b.add("ok", "COMP", tensor_size=ABSURD_BYTES, num_ops=1 << 55)  # FLOPs are not bytes
    r = validate_trace(b.build())
    neg = only(r, "negative-size")
    assert (neg.severity, neg.count, neg.node_ids) == ("error", 3, [0, 1, 2])
    assert neg.details["by_attr"] == {"comm_size": 1, "tensor_size": 1, "num_ops": 1}
    ab = only(r, "absurd-size")
    assert (ab.severity, ab.count, ab.node_ids) == ("warning", 2, [3, 4])


def test_noncanonical_members_and_extras():
    b = TraceBuilder()
    # comm_size as int32_val: other tools read 0
    b.add("a", "COMM_COLL", comm_type=0, attrs=[Attribute("comm_size", 1024, "int32_val")])
    # canonical member but with a doc string: lives in the extras, still counts as present
    b.add("b", "COMM_COLL", comm_size=8, attrs=[Attribute("comm_type", 0, doc="all-reduce")])
    # the same attribute twice
    b.add("c", "COMP", attrs=[Attribute("num_ops", 5), Attribute("num_ops", 6)])
    # an attribute name outside the vocabulary: not our business
    b.add("d", "COMP", attrs=[Attribute("my_size", 3, "int32_val")])
    r = validate_trace(b.build())
    nc = only(r, "noncanonical-member")
    assert (nc.severity, nc.count, nc.node_ids) == ("warning", 1, [0])
    assert nc.details["by_attr"] == {"comm_size": {"int32_val": 1}}
    dup = only(r, "duplicate-attr")
    assert (dup.count, dup.node_ids, dup.details["attrs"]) == (1, [2], ["num_ops"])
    assert "collective-missing-size" not in codes(r) and "collective-missing-type" not in codes(r)


def test_rank_is_recorded_and_samples_are_bounded():
    n = 100
    nodes = [Node(id=i, name="x", type=4, data_deps=[10_000 + i]) for i in range(n)]
    r = validate_trace(Trace.from_nodes(nodes), rank=3)
    i = only(r, "missing-data-dep")
    assert i.rank == 3 and i.count == n and len(i.node_ids) == SAMPLE and i.node_ids == list(range(SAMPLE))
    assert r.ranks == [3]


def test_large_sorted_chain_is_clean():
    t = chain(200_000)
    r = validate_trace(t)
    assert r.issues == [] and r.nodes == 200_000


# --------------------------------------------------------------------------- report


def test_report_outputs():
    b = TraceBuilder()
    b.add("a", id=1, data_deps=[9])
    b.add("b", id=1)
    r = validate_trace(b.build())
    assert [i.severity for i in r.issues] == ["error", "warning"]  # errors first
    assert len(r.errors) == 1 and len(r.warnings) == 1 and not r.ok
    d = json.loads(r.to_json())
    assert d["ok"] is False and d["errors"] == 1 and d["warnings"] == 1 and d["nodes"] == 2
    assert {x["code"] for x in d["issues"]} == {"duplicate-id", "missing-data-dep"}
    assert d == r.to_dict()
    df = r.to_pandas()
    assert list(df["code"]) == ["duplicate-id", "missing-data-dep"]
    assert list(df.columns) == ["severity", "code", "rank", "count", "fixable", "message", "node_ids"]
    text = r.render()
    assert "duplicate-id" in text and text.splitlines()[-1] == "INVALID: 1 error, 1 warning in 2 nodes"
    assert str(r) == text


# --------------------------------------------------------------------------- repair


def broken_trace() -> Trace:
    b = TraceBuilder()
    a = b.add("a", id=1)
    b.add("b", id=2, data_deps=[a, a, 50, 2], ctrl_deps=[60, 61, 2])
    b.add("c10d::allreduce_", "COMM_COLL", id=3, is_cpu_op=True, data_deps=[2])
    b.collective("ALL_REDUCE", 1024, deps=[3], id=4)
    b.add("untyped-coll", "COMM_COLL", id=5, is_cpu_op=False)  # not host-side: left alone
    return b.build()


def test_fix_trace_repairs_the_unambiguous():
    t = broken_trace()
    before = validate_trace(t)
    assert {i.code for i in before.fixable} == {
        "missing-data-dep",
        "missing-ctrl-dep",
        "self-dep",
        "duplicate-dep",
        "collective-missing-type",
    }
    fixed, changes = fix_trace(t)
    assert changes == [
        "dropped 1 data dependency on 1 missing node",
        "dropped 1 data self-dependency",
        "dropped 1 repeated data dependency entry",
        "dropped 2 control dependencies on 2 missing nodes",
        "dropped 1 control self-dependency",
        "retyped 1 host-side COMM_COLL node (is_cpu_op, neither comm_type nor comm_size, e.g. "
        "'c10d::allreduce_') to COMP_NODE",
    ]
    assert len(fixed) == len(t) and list(fixed.ids) == list(t.ids)
    assert fixed.data_deps(1).tolist() == [1] and fixed.ctrl_deps(1).tolist() == []
    assert fixed.types.tolist() == [4, 4, 4, 7, 7]
    after = validate_trace(fixed)
    assert after.fixable == []
    # the GPU-side collective without comm_type is not guessed at
    assert only(after, "collective-missing-type").node_ids == [5]
    assert t.types[2] == NodeType.COMM_COLL_NODE and t.data.size == 6  # the original is untouched


def test_fix_trace_leaves_ambiguous_problems():
    b = TraceBuilder()
    b.add("a", id=1, data_deps=[2])
    b.add("b", id=2, data_deps=[1])
    b.add("c", id=2)
    b.add("d", 42, id=3)
    t = b.build()
    fixed, changes = fix_trace(t)
    assert changes == []
    assert codes(validate_trace(fixed)) == codes(validate_trace(t))
    assert {"cycle", "duplicate-id", "invalid-node-type"} <= set(codes(validate_trace(fixed)))


def test_fix_round_trips_through_a_file(tmp_path):
    fixed, _ = fix_trace(broken_trace())
    p = tmp_path / "fixed.et"
    write_trace(fixed, p)
    assert validate_trace(read_trace(p)).fixable == []


# --------------------------------------------------------------------------- workloads


def _coll_trace(seq, pg=None):
    b = TraceBuilder()
    prev = []
    for ct, size in seq:
        prev = [b.collective(ct, size, deps=prev, pg_name=pg)]
    return b.build()


def test_workload_consistent():
    seq = [("ALL_REDUCE", 100), ("ALL_GATHER", 200)]
    w = Workload(traces={0: _coll_trace(seq), 1: _coll_trace(seq)})
    r = validate_workload(w)
    assert r.issues == [] and r.ranks == [0, 1] and r.nodes == 4


def test_workload_first_collective_mismatch():
    t0 = _coll_trace([("ALL_REDUCE", 100), ("ALL_GATHER", 200), ("BROADCAST", 1)])
    t1 = _coll_trace([("ALL_REDUCE", 100), ("ALL_REDUCE", 300), ("BROADCAST", 2)])
    r = validate_workload(Workload(traces={0: t0, 1: t1}))
    i = only(r, "group-mismatch")  # only the first mismatch per group
    assert i.severity == "error" and i.details["position"] == 1
    assert i.details["differs"] == ["comm_size", "comm_type"]
    assert i.details["ranks"][0] == {"comm_type": "ALL_GATHER", "comm_size": 200, "node_id": 1}
    assert i.details["ranks"][1] == {"comm_type": "ALL_REDUCE", "comm_size": 300, "node_id": 1}
    assert "collective #1" in i.message and "the all-ranks group" in i.message
    assert "group-count-mismatch" not in codes(r)


def test_workload_all_to_allv_sizes_may_differ_between_members():
    """An all-to-all's comm_size is what each rank sends: uneven splits (an all_to_allv, such as
    the DLRM job of tests/data/corpus) make it differ across members; other collectives must agree."""
    t0 = _coll_trace([("ALL_TO_ALL", 4096), ("ALL_REDUCE", 100)])
    t1 = _coll_trace([("ALL_TO_ALL", 32768), ("ALL_REDUCE", 100)])
    assert validate_workload(Workload(traces={0: t0, 1: t1})).issues == []
    t2 = _coll_trace([("ALL_TO_ALL", 32768), ("ALL_REDUCE", 101)])
    i = only(validate_workload(Workload(traces={0: t0, 1: t2})), "group-mismatch")
    assert i.details["position"] == 1 and i.details["differs"] == ["comm_size"]


def test_workload_sequence_lengths_and_groups():
    t0 = _coll_trace([("ALL_REDUCE", 100), ("ALL_REDUCE", 100)], pg="tp")
    t1 = _coll_trace([("ALL_REDUCE", 100)], pg="tp")
    t2 = _coll_trace([("ALL_REDUCE", 100), ("ALL_REDUCE", 100)], pg="dp")
    r = validate_workload(Workload(traces={0: t0, 1: t1, 2: t2}, groups={"tp": [0, 1], "dp": [2, 3]}))
    c = only(r, "group-count-mismatch")
    assert c.details == {"group": "tp", "lengths": {"0": 2, "1": 1}}
    assert "group-mismatch" not in codes(r)  # one is a prefix of the other
    miss = only(r, "group-missing-rank")
    assert miss.severity == "warning" and miss.details == {"group": "dp", "ranks": [3]}
    # a rank issuing collectives on a group that does not include it
    t3 = _coll_trace([("ALL_REDUCE", 100)], pg="tp")
    r = validate_workload(Workload(traces={0: t0, 1: t0, 2: t3}, groups={"tp": [0, 1]}))
    i = only(r, "not-in-group")
    assert (i.rank, i.count, i.details) == (2, 1, {"group": "tp"})


def _p2p_trace(ops):
    b = TraceBuilder()
    for kind, peer, size, tag in ops:
        if kind == "send":
            b.send(peer, size, tag=tag)
        else:
            b.recv(peer, size, tag=tag)
    return b.build()


def test_send_recv_matching():
    t0 = _p2p_trace([("send", 1, 10, 0), ("send", 1, 20, 0), ("send", 1, 5, 7), ("recv", 1, 8, 0)])
    t1 = _p2p_trace([("recv", 0, 10, 0), ("recv", 0, 20, 0), ("recv", 0, 5, 7), ("send", 0, 8, 0)])
    assert validate_workload(Workload(traces={0: t0, 1: t1})).issues == []


def test_send_recv_problems():
    t0 = _p2p_trace([("send", 1, 10, 0), ("send", 1, 20, 0), ("send", 1, 5, 3), ("send", 4, 1, 0)])
    t1 = _p2p_trace([("recv", 0, 10, 0), ("recv", 0, 99, 0), ("recv", 0, 5, 9)])
    r = validate_workload(Workload(traces={0: t0, 1: t1}))
    size = only(r, "p2p-size-mismatch")
    assert size.count == 1 and size.details["pairs"] == [
        {"src": 0, "dst": 1, "tag": 0, "send_node": 1, "recv_node": 1, "send_size": 20, "recv_size": 99}
    ]
    us = only(r, "unmatched-send")
    assert (us.severity, us.rank, us.count, us.node_ids) == ("error", 0, 1, [2])
    assert us.details["channels"] == [{"peer": 1, "tag": 3}]
    ur = only(r, "unmatched-recv")
    assert (ur.rank, ur.count, ur.node_ids, ur.details["channels"]) == (1, 1, [2], [{"peer": 0, "tag": 9}])
    up = only(r, "unknown-peer")
    assert (up.severity, up.rank, up.count, up.node_ids, up.details["peers"]) == ("error", 0, 1, [3], [4])


# --------------------------------------------------------------------------- CLI


def run_cli(*args):
    return CliRunner().invoke(validate_cmd, [str(a) for a in args], catch_exceptions=False)


def test_cli_clean_and_errors(tmp_path):
    good = tmp_path / "good.et"
    write_trace(clean_trace(), good)
    res = run_cli(good)
    assert res.exit_code == 0 and "OK: no issues in 3 nodes" in res.output
    bad = tmp_path / "bad.et"
    b = TraceBuilder()
    b.add("a", id=1)
    b.add("b", id=1)
    write_trace(b.build(), bad)
    res = run_cli(bad)
    assert res.exit_code == 1 and "duplicate-id" in res.output
    assert "INVALID: 1 error, 0 warnings in 2 nodes" in res.output
    # several paths: the worst decides
    assert run_cli(good, bad).exit_code == 1


def test_cli_strict_and_json(tmp_path):
    p = tmp_path / "warn.et"
    b = TraceBuilder()
    b.add("a", data_deps=[77])
    write_trace(b.build(), p)
    assert run_cli(p).exit_code == 0
    assert run_cli(p, "--strict").exit_code == 1
    res = run_cli(p, "--json")
    d = json.loads(res.output)
    assert d["path"] == str(p) and d["report"]["warnings"] == 1
    assert d["report"]["issues"][0]["code"] == "missing-data-dep"


def test_cli_fix(tmp_path):
    src, out = tmp_path / "in.et", tmp_path / "out.et.gz"
    write_trace(broken_trace(), src)
    res = run_cli(src, "--fix", out)
    assert "repaired copy written to" in res.output and "dropped 1 data self-dependency" in res.output
    assert out.exists() and validate_trace(read_trace(out)).fixable == []
    assert res.exit_code == 0  # the repaired copy has warnings only
    d = json.loads(run_cli(src, "--fix", out, "--json").output)
    assert len(d["fix"]["changes"]) == 6 and d["fix"]["output"] == str(out)
    assert d["fix"]["report"]["ok"] is True


def test_cli_workload_prefix(tmp_path):
    seq0 = [("ALL_REDUCE", 100), ("ALL_GATHER", 200)]
    seq1 = [("ALL_REDUCE", 100), ("ALL_GATHER", 201)]
    Workload(traces={0: _coll_trace(seq0), 1: _coll_trace(seq1)}).save(tmp_path / "job")
    res = run_cli(tmp_path / "job")
    assert res.exit_code == 1 and "group-mismatch" in res.output
    assert "on 2 ranks" in res.output
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"x": [0, 1]}))
    d = json.loads(run_cli(tmp_path / "job", "--json", "--comm-groups", groups).output)
    assert d["report"]["ranks"] == [0, 1]
    res = CliRunner().invoke(validate_cmd, [str(tmp_path / "job"), "--fix", str(tmp_path / "o.et")])
    assert res.exit_code == 2 and "--fix repairs one trace" in res.output


def test_cli_missing_path_is_a_one_line_error(tmp_path):
    from chakra_trace.cli import main

    assert main(["validate", str(tmp_path / "nothing")]) == 2


# --------------------------------------------------------------------------- the reference ResNet-50 sample


@pytest.fixture(scope="module")
def resnet() -> Trace:
    return read_trace(RESNET)


def test_resnet_sample(resnet):
    r = validate_trace(resnet)
    c = only(r, "missing-ctrl-dep")
    # 1,277 control dependencies (one per node) point to 210 distinct ids that are not in the trace
    assert (c.severity, c.count, c.details["missing_targets"], c.details["dependents"]) == ("warning", 1277, 210, 1277)
    assert c.details["missing_ids"][:4] == [2, 3, 429, 434]
    s = only(r, "self-dep")
    assert (s.severity, s.count, s.details) == ("error", 383, {"data": 0, "ctrl": 383})
    assert resnet.ctrl_deps(resnet.row(3511)).tolist() == [3511]
    h = only(r, "collective-missing-type")
    assert (h.count, h.fixable, h.details["host_side"]) == (14, True, True)
    # control dependencies also form cycles (e.g. 3396 <-> 3403); data dependencies alone are acyclic
    cyc = only(r, "cycle")
    assert cyc.severity == "error" and cyc.details["data_acyclic"] is True and cyc.fixable
    assert _is_real_cycle(resnet, cyc.details["cycle"])
    assert cyc.count == 2283
    assert set(codes(r)) == {"missing-ctrl-dep", "self-dep", "collective-missing-type", "cycle"}
    assert [i.code for i in r.errors] == ["self-dep", "cycle"]


def test_resnet_fixed(resnet, tmp_path):
    fixed, changes = fix_trace(resnet)
    assert changes[:3] == [
        "dropped 1,277 control dependencies on 210 missing nodes",
        "dropped 383 control self-dependencies",
        "dropped 599 control dependencies that lie on dependency cycles (the data "
        "dependencies alone are acyclic; 2,283 nodes could never run)",
    ]
    out = tmp_path / "fixed.et.gz"
    write_trace(fixed, out)
    back = read_trace(out)
    assert len(back) == 3664 and back.data.size == 181_878 and back.ctrl.size == 3664 - 1277 - 383 - 599
    assert np.array_equal(back.data, resnet.data)  # every data dependency is kept
    r = validate_trace(back)
    assert r.issues == []  # a clean copy
    assert back.graph().cycle() is None
    assert (back.types == NodeType.COMM_COLL_NODE).sum() == 7


def test_resnet_cli_exit_status(tmp_path):
    """Through the installed entry point: the exit status survives `chakra_trace.cli.main`."""
    out = tmp_path / "fixed.et"
    chakra = Path(sys.executable).parent / "chakra"
    if not chakra.exists():
        pytest.skip("the `chakra` entry point is not installed beside this interpreter")
    proc = subprocess.run([str(chakra), "validate", str(RESNET), "--fix", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # the status of the repaired copy
    assert "missing-ctrl-dep" in proc.stdout and "dropped 1,277 control dependencies" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "OK: no issues in 3,664 nodes"
    proc = subprocess.run([str(chakra), "validate", str(RESNET)], capture_output=True, text=True)
    assert proc.returncode == 1 and "INVALID: 2 errors, 2 warnings" in proc.stdout


def test_fix_breaks_control_cycles_only_when_data_is_acyclic():
    b = TraceBuilder()
    b.add("cpu_op", id=1, ctrl_deps=[2])  # the old converter's pattern: op -ctrl-> its kernel
    b.add("kernel", id=2, data_deps=[1])  # kernel -data-> launching op
    b.add("next", id=3, data_deps=[2], ctrl_deps=[1])  # not on a cycle: kept
    t = b.build()
    assert only(validate_trace(t), "cycle").fixable
    fixed, changes = fix_trace(t)
    assert any("lie on dependency cycles" in c for c in changes)
    assert fixed.ctrl_deps(0).tolist() == [] and fixed.ctrl_deps(2).tolist() == [1]
    assert fixed.data.tolist() == t.data.tolist()
    assert validate_trace(fixed).issues == []
    # a cycle through data dependencies has no choice-free repair
    b = TraceBuilder()
    b.add("a", id=1, data_deps=[2], ctrl_deps=[3])
    b.add("b", id=2, data_deps=[1])
    b.add("c", id=3, ctrl_deps=[1])
    t = b.build()
    cyc = only(validate_trace(t), "cycle")
    assert not cyc.fixable
    fixed, changes = fix_trace(t)
    assert changes == [] and "cycle" in codes(validate_trace(fixed))


@pytest.mark.parametrize("seed", range(8))
def test_graph_scc_matches_reachability(seed):
    rng = np.random.default_rng(seed)
    n = 30
    src, dst = rng.integers(0, n, 60), rng.integers(0, n, 60)
    reach = np.eye(n, dtype=bool)
    reach[src, dst] = True
    for k in range(n):  # transitive closure (Floyd-Warshall)
        reach |= reach[:, k : k + 1] & reach[k : k + 1, :]
    labels = DepGraph(n, src, dst).scc
    same = labels[:, None] == labels[None, :]
    assert np.array_equal(same, reach & reach.T)
