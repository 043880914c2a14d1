"""What-if transforms: each does what it says, keeps what it says, and composes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import chakra_trace  # noqa: F401  (registers `chakra collect` folders with Workload.open)
from chakra_trace.cli import cli
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.devices import device_spec
from chakra_trace.schema.edit import drop_nodes
from chakra_trace.schema.enums import NodeType
from chakra_trace.simulate import simulate
from chakra_trace.synthesize import transforms as tf
from chakra_trace.validate import validate_workload
from conftest import run_cli

DDP = Path(__file__).parent / "data" / "corpus" / "ddp"


@pytest.fixture(scope="module")
def ddp():
    return Workload.open(DDP)


def _step(w) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(w, _net(len(w)), _sys(), comm="recorded").step_ns


def _net(n):
    from chakra_trace.simulate.config import Network

    return Network.simple("FullyConnected", n, 50, 500)


def _sys():
    from chakra_trace.simulate.config import SystemConfig

    return SystemConfig.from_dict({"all-reduce-implementation": ["ring"]})


def _chain(names, durations, **kw):
    b = TraceBuilder()
    prev = None
    for n, d in zip(names, durations):
        prev = b.comp(n, d, deps=[] if prev is None else [prev], **kw)
    return b.build()


def test_speed_up_compute_halves_compute_and_keeps_the_rest(ddp):
    fast = tf.speed_up_compute(ddp, 2)
    for r in ddp.ranks:
        a, b = ddp.traces[r], fast.traces[r]
        comp = a.types == NodeType.COMP_NODE
        want = np.where(a.duration[comp] > 0, np.maximum(np.rint(a.duration[comp] / 2), 1), 0)
        assert b.duration[comp].tolist() == want.tolist()
        assert b.duration[~comp].tolist() == a.duration[~comp].tolist()
        assert np.array_equal(a.data, b.data) and np.array_equal(a.comm_size, b.comm_size)
    assert ddp.traces[0].duration.sum() > fast.traces[0].duration.sum()  # (the input is untouched)
    assert _step(fast) <= _step(ddp)  # a faster device is never slower
    only = tf.speed_up_compute(ddp, 4, match=r"^aten::add_$")
    t, o = ddp.traces[0], only.traces[0]
    mm = t.name_codes == t.names.index("aten::add_")
    assert (o.duration[~mm] == t.duration[~mm]).all() and (o.duration[mm] <= t.duration[mm]).all()


def test_on_device_gives_roofline_times():
    t = _chain(["a", "b"], [0, 0], num_ops=2e12, tensor_size=10**9)
    w = tf.on_device(Workload({0: t}), "h100", efficiency=0.5)
    h = device_spec("h100")
    us = int(np.ceil(max(2e12 / h.peak_flops, 1e9 / h.mem_bw) / 0.5 * 1e6))
    assert w.traces[0].duration.tolist() == [us, us]
    with pytest.raises(Exception, match="efficiency"):
        tf.on_device(Workload({0: t}), "h100", efficiency=0)


def test_scale_collectives_keeps_members_in_agreement(ddp):
    c = tf.scale_collectives(ddp, 0.25, types=["ALL_REDUCE"])
    for r in ddp.ranks:
        a, b = ddp.traces[r], c.traces[r]
        coll = a.types == NodeType.COMM_COLL_NODE
        ar = coll & (a.comm_type == 0)  # ALL_REDUCE
        assert ar.any()
        assert b.comm_size[ar].tolist() == np.maximum(np.rint(a.comm_size[ar] * 0.25), 1).tolist()
        assert b.comm_size[coll & ~ar].tolist() == a.comm_size[coll & ~ar].tolist()  # broadcasts kept
    assert not validate_workload(c).errors


def test_remove_ops_bridges_dependencies():
    t = _chain(["x", "drop", "drop", "y"], [1, 2, 3, 4])
    out = tf.remove_ops(Workload({0: t}), "^drop$").traces[0]
    assert [out.names[c] for c in out.name_codes] == ["x", "y"]
    assert out.data_deps(1).tolist() == [int(out.ids[0])]


def test_drop_nodes_keeps_every_ordering_between_kept_nodes(ddp):
    """On a real trace: removing every view/detach keeps each kept node after everything it
    transitively depended on before (reachability among kept nodes is unchanged)."""
    t = ddp.traces[0]
    names = np.asarray(t.names, dtype=object)[t.name_codes]
    drop = np.isin(names, ["aten::view", "aten::as_strided", "aten::transpose", "aten::item"])
    assert drop.sum() > 100
    out = drop_nodes(t, drop)
    assert len(out) == len(t) - drop.sum()

    def ancestors(trace, row):  # ids of every node `row` transitively depends on
        ptr, src = trace.graph().preds
        seen, stack = {row}, [row]
        while stack:
            r = stack.pop()
            for p in src[ptr[r] : ptr[r + 1]].tolist():
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return set(trace.ids[list(seen - {row})].tolist())

    kept = set(t.ids[~drop].tolist())
    row_in_out = {int(i): k for k, i in enumerate(out.ids.tolist())}
    sample = np.flatnonzero(~drop)
    for r in sample[:: max(1, sample.size // 40)].tolist():
        assert ancestors(out, row_in_out[int(t.ids[r])]) == ancestors(t, r) & kept


def test_fuse_ops_merges_chains_only():
    b = TraceBuilder()
    a = b.comp("k", 10, num_ops=100, tensor_size=8)
    c = b.comp("k", 20, num_ops=200, tensor_size=8, deps=[a])
    d = b.comp("k", 30, num_ops=300, tensor_size=8, deps=[c])
    b.comp("after", 1, deps=[d])
    e = b.comp("k", 5, deps=[a])  # a second successor of a: a is no chain link for it
    b.comp("branch", 1, deps=[e])
    out = tf.fuse_ops(Workload({0: b.build()}), "^k$").traces[0]
    names = [out.names[c] for c in out.name_codes]
    assert sorted(names) == ["after", "branch", "k", "k", "k (+1 fused)"]  # a has two successors: c starts a chain
    t2 = _chain(["k", "k", "k", "after"], [10, 20, 30, 1], num_ops=100, tensor_size=8)
    out = tf.fuse_ops(Workload({0: t2}), "^k$").traces[0]
    names = [out.names[c] for c in out.name_codes]
    assert names == ["k (+2 fused)", "after"]
    assert out.duration.tolist() == [60, 1] and out.num_ops.tolist() == [300, 100]
    assert out.tensor_size.tolist() == [24, 8] and out.data_deps(1).tolist() == [int(out.ids[0])]


def test_fuse_ops_sums_exactly_past_2_53_and_refuses_an_overflow():
    big = 2**53 + 1  # float64 would round each sum
    t = _chain(["k", "k", "after"], [1, 1, 1], num_ops=big, tensor_size=big)
    out = tf.fuse_ops(Workload({0: t}), "^k$").traces[0]
    assert out.num_ops.tolist()[0] == 2 * big and out.tensor_size.tolist()[0] == 2 * big
    huge = _chain(["k", "k", "k"], [1, 1, 1], num_ops=2**63 - 1, tensor_size=8)
    with pytest.raises(ChakraError, match="fused num_ops .* does not fit int64"):
        tf.fuse_ops(Workload({0: huge}), "^k$")


def test_transforms_compose_and_share_traces(ddp):
    from chakra_trace.synthesize.scale import data_parallel

    w = tf.apply(
        data_parallel(ddp, 8), [lambda w: tf.speed_up_compute(w, 2), lambda w: tf.remove_ops(w, "^aten::view$")]
    )
    assert len({id(t) for t in w.traces.values()}) == 2  # ranks that shared a trace still do
    assert not validate_workload(w).errors


def test_cli(tmp_path):
    out = CliRunner().invoke(
        cli,
        [
            "transform",
            str(DDP),
            "--speedup",
            "2",
            "--comm-scale",
            "0.5",
            "--dp",
            "4",
            "-o",
            str(tmp_path / "j"),
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["ranks"] == 4 and d["steps"] == ["compute 2x faster", "bytes x 0.5", "4 data-parallel ranks"]
    assert len(Workload.open(tmp_path / "j")) == 4
    bad = CliRunner().invoke(cli, ["transform", str(DDP), "-o", str(tmp_path / "k")])
    assert bad.exit_code == 2 and "nothing to do" in bad.output


def test_recorded_refuses_a_transformed_job_with_the_reason(ddp, tmp_path, capsys):
    """`recorded` keeps each node's recorded wait after its dependencies; a transform changes the
    nodes but not their recorded starts, so a 2x faster compute became idle there (-1.2% instead
    of the halving `ideal` shows). The transform marks what it changed, through the saved files,
    and `recorded` refuses it naming the change; every other system still runs it."""
    from chakra_trace.simulate.presets import simulate_on

    assert all(not t.transformed for t in ddp.traces.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        simulate_on(ddp, "recorded")  # the job as recorded: no refusal
        fast = tf.remove_ops(tf.speed_up_compute(ddp, 2), "no such op")
        assert all(
            t.transformed == ["compute 2x faster", "removed ops matching 'no such op'"] for t in fast.traces.values()
        )
        fast.save(str(tmp_path / "fast"))
        again = Workload.open(str(tmp_path / "fast"))
        assert all(t.transformed == fast.traces[0].transformed for t in again.traces.values())
        with pytest.raises(ChakraError, match=r"compute 2x faster.*'recorded' system.*'ideal'"):
            simulate_on(again, "recorded")
        assert simulate_on(again, "ideal").step_ns < simulate_on(ddp, "ideal").step_ns
    capsys.readouterr()
    rc, out, err = run_cli(["simulate", str(tmp_path / "fast"), "--system", "recorded"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "changed after the recording (compute 2x faster" in err
