"""`to_astra_sim` / `chakra convert astra-sim`: our jobs as ASTRA-sim's binary reads them.

The expected figures were recorded from the real binary (ASTRA-sim 518bd51, analytical
congestion-unaware backend, built outside the repository: tools/astra/README.md) on the files
this export writes; `--compat astra` on them gives the same, and the same as on the originals.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
from click.testing import CliRunner

import chakra_trace  # noqa: F401  (registers `chakra collect` folders with Workload.open)
from chakra_trace.cli import cli
from chakra_trace.convert.astra_sim import to_astra_sim, without_metadata
from chakra_trace.convert.text import text_to_chakra
from chakra_trace.io.workload import Workload, read_comm_groups
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import NodeType
from chakra_trace.schema.groups import group_rows
from chakra_trace.simulate import simulate
from chakra_trace.simulate.config import Network
from conftest import astra_reference, sample

DATA = Path(__file__).parent / "data"
SYS_1D = astra_reference() / "cfg" / "ring_1d_s4_a1.json"
SYS_2D = astra_reference() / "cfg" / "ring_2d_s4_a1.json"


def _compat(workload, net, system, groups=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(workload, net, system, compat=True, comm_groups=groups)
    return res.finish_ns.tolist(), res.exposed_comm_ns.tolist()


def test_converted_ddp_job_runs_as_on_the_binary(tmp_path):
    """A converted PyTorch DDP pair has a METADATA node (its process groups), on which the
    binary aborts; exported, the binary runs it: 202,331,000 / 134,787,712 ns on a ring of 2."""
    job = Workload.open(DATA / "corpus" / "ddp")  # (a `chakra collect` folder: converted)
    assert all((t.types == NodeType.METADATA_NODE).sum() == 1 for t in job.traces.values())
    res = to_astra_sim(job, tmp_path / "job")
    assert res.dropped == {0: 1, 1: 1} and res.comm_groups_file is None and res.groups == {"0": "0"}
    out = Workload.open(tmp_path / "job")
    assert not any((t.types == NodeType.METADATA_NODE).any() for t in out.traces.values())
    net = Network.simple("Ring", 2, 50, 500)
    binary = ([202331000, 134787712], [202331000, 134787712])
    assert _compat(out, net, SYS_1D) == binary
    assert _compat(job, net, SYS_1D) == binary


def test_uneven_all_to_all_evened_runs_as_on_the_binary(tmp_path):
    """The DLRM-like job's all_to_all_single moves 32 KiB on rank 2 and 4 KiB elsewhere: the binary
    deadlocks on such a collective. Listed; with even_sizes="max" it runs, as --compat astra."""
    job = Workload.open(DATA / "corpus" / "dlrm")
    res = to_astra_sim(job, tmp_path / "kept")
    assert [e["sizes"] for e in res.uneven] == [{0: 4096, 1: 4096, 2: 32768, 3: 4096}] * 2 and not res.evened
    res = to_astra_sim(job, tmp_path / "even", even_sizes="max")
    assert res.evened
    out = Workload.open(tmp_path / "even")
    for e in res.uneven:
        assert {int(t.comm_size[group_rows(t, e["group"])[e["index"]]]) for t in out.traces.values()} == {32768}
    net = Network.simple("Ring", 4, 50, 500)
    binary = [52963258, 53317416, 56365182, 52950492]  # (the binary, 2026-11-28: tools/astra/INTEROP.md)
    assert _compat(out, net, SYS_1D) == (binary, binary)


def test_hybrid_text_workload_groups_as_on_the_binary(tmp_path):
    """A hybrid data/model-parallel text workload on 8 NPUs (6 subgroups): group names kept
    (positive integers), members in the comm-groups file; 1,359,110 ns on Ring 4 x Switch 2.

    The figures are the binary's on our own mlp_data_model.txt (1,359,110 / 1,287,107 ns on all 8
    NPUs, run 2026-11-28 by `tools/astra/interop.py`), and `--compat astra`'s."""
    job = text_to_chakra(DATA / "text" / "mlp_data_model.txt", 8, model_parallel_size=4)
    groups = job.groups
    res = to_astra_sim(job, tmp_path / "mlp")
    written = read_comm_groups(res.comm_groups_file)
    assert written == {k: list(v) for k, v in groups.items()}
    assert set(res.groups.values()) == set(groups)
    net = Network.simple(["Ring", "Switch"], [4, 2], [50, 25], [500, 1000])
    out = Workload.open(tmp_path / "mlp")
    assert _compat(out, net, SYS_2D, written) == ([1359110] * 8, [1287107] * 8)


def test_group_names_astra_sim_cannot_read_are_numbered(tmp_path):
    """ASTRA-sim reads pg_name with stoi: "dp" would abort it. Other names get the next integer
    after the largest kept one (a positive integer name is kept); every rank's group is "0"."""
    traces = {}
    for r in range(4):
        b = TraceBuilder()
        b.collective("ALL_REDUCE", 4096, pg_name="dp" if r % 2 == 0 else "7")
        b.collective("ALL_GATHER", 1024, pg_name="world")
        traces[r] = b.build()
    w = Workload(traces, groups={"dp": [0, 2], "7": [1, 3], "world": [0, 1, 2, 3]})
    res = to_astra_sim(w, tmp_path / "j")
    assert res.groups == {"dp": "8", "world": "0", "7": "7"}
    assert read_comm_groups(res.comm_groups_file) == {"8": [0, 2], "7": [1, 3]}
    out = Workload.open(tmp_path / "j")
    assert [out.traces[0].groups[c] for c in out.traces[0].pg_name.tolist()] == ["8", "0"]
    net = Network.simple("Ring", 4, 50, 500)
    groups = read_comm_groups(res.comm_groups_file)
    assert _compat(out, net, SYS_1D, groups) == _compat(w, net, SYS_1D)


def test_public_trace_with_broken_dependencies_runs_as_on_the_binary(tmp_path):
    """Chakra's public resnet50_ddp.0.et names 210 nodes it does not hold, depends on itself,
    has control cycles and host-side c10d collectives: the binary aborts on the original
    ("dependency not found") and, with only those dropped, stops with nodes never run ("Comm
    node should not be on CPU"). Exported (`fix_trace`'s repairs) it runs, the one file on both
    NPUs of a ring of 2: 303,270,000 ns, 10,441,843 exposed, as --compat astra on the export."""
    job = Workload.open(sample("resnet50_ddp.0.et.gz"))
    res = to_astra_sim(job, tmp_path / "rn")
    assert res.dropped == {0: 0} and list(res.repairs) == [0]
    assert res.repairs[0][0] == "dropped 1,277 control dependencies on 210 missing nodes"
    assert any(c.startswith("retyped 14 host-side COMM_COLL nodes") for c in res.repairs[0])
    one = Workload.open(tmp_path / "rn").traces[0]
    both = Workload({0: one, 1: one})
    assert _compat(both, Network.simple("Ring", 2, 50, 500), SYS_1D) == ([303270000] * 2, [10441843] * 2)
    clean = to_astra_sim(Workload.open(tmp_path / "rn"), tmp_path / "again")
    assert clean.repairs == {}  # (what was repaired stays repaired)


def test_dependencies_through_a_metadata_node_are_kept():
    b = TraceBuilder()
    a = b.comp("a", 5)
    m = b.add("meta", NodeType.METADATA_NODE, data_deps=[a])
    m2 = b.add("meta2", NodeType.METADATA_NODE, ctrl_deps=[m])
    c = b.comp("c", 5, deps=[m2, a])  # (comp's deps are data dependencies)
    b.comp("d", 5, ctrl_deps=[m])
    t = b.build()
    new, n = without_metadata(t)
    assert n == 2 and len(new) == 3
    assert new.data_deps(new.row(c)).tolist() == [a]  # (a once: m2 stood for a)
    assert new.ctrl_deps(new.row(int(new.ids[-1]))).tolist() == [a]
    assert np.array_equal(without_metadata(new)[0].ids, new.ids)


def test_cli(tmp_path):
    prefix = tmp_path / "src"
    b = TraceBuilder()
    b.collective("ALL_REDUCE", 4096)
    b.add("pg", NodeType.METADATA_NODE)
    Workload({0: b.build(), 1: b.build()}).save(prefix)
    out = CliRunner().invoke(cli, ["convert", "astra-sim", str(prefix), "-o", str(tmp_path / "a"), "--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["dropped"] == {"0": 1, "1": 1} and len(d["files"]) == 2
