"""One rule for communicator groups: `<prefix>.comm_groups.json` beside a job is its groups for
every command that opens it (`Workload.open`), as if given with --comm-groups."""

from __future__ import annotations

import json
import warnings

import pytest

from chakra_trace.io.workload import Workload, write_comm_groups
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.simulate.config import SystemConfig
from chakra_trace.simulate.presets import simulate_on
from conftest import run_cli

#: ranks 4 and 5 have no trace: only the file says g0 and g1 have three members
GROUPS = {"g0": [0, 1, 4], "g1": [2, 3, 5]}


def _rank(r: int):
    b = TraceBuilder()
    c = b.comp("fwd", 40)
    b.collective("ALL_REDUCE", 1 << 20, pg_name=f"g{r // 2}", deps=[c])
    return b.build()


@pytest.fixture()
def job(tmp_path):
    """A 4-rank job saved with its groups file beside it, and the same groups as a file elsewhere."""
    prefix = tmp_path / "job"
    Workload({r: _rank(r) for r in range(4)}).save(prefix, groups=GROUPS)
    assert (tmp_path / "job.comm_groups.json").is_file()
    elsewhere = write_comm_groups(GROUPS, tmp_path / "elsewhere.json")
    return str(prefix), str(elsewhere)


def test_workload_open_reads_the_file_beside_the_ranks(job):
    prefix, elsewhere = job
    w = Workload.open(prefix)
    assert w.groups == GROUPS and w.groups_file is not None and w.groups_file.name == "job.comm_groups.json"
    assert Workload.open(prefix + ".2.et").groups == GROUPS  # a rank file of the prefix too
    assert Workload.open(prefix, ranks=[1]).groups == GROUPS
    assert Workload.open(prefix, {}).groups == {}  # given groups replace it
    assert Workload.open(prefix, elsewhere).groups == GROUPS


def _sim(prefix: str, *extra: str, capsys) -> dict:
    rc, out, err = run_cli(["simulate", prefix, "--system", "switch", "--json", *extra], capsys)
    assert rc == 0, err
    return json.loads(out)


def test_every_command_that_opens_the_job_honours_the_file(job, tmp_path, capsys):
    prefix, elsewhere = job
    # simulate: the same answer as with the groups given, another than without them
    beside = _sim(prefix, capsys=capsys)
    given = _sim(prefix, "--comm-groups", elsewhere, capsys=capsys)
    assert beside["recording_ns"] == given["recording_ns"] and beside["assumed_symmetric_ranks"] == {"4": 0, "5": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = simulate_on(Workload.open(prefix, {"g0": [0, 1], "g1": [2, 3]}), "switch")
    assert bare.step_ns != beside["recording_ns"] and not bare.assumed_symmetric_ranks
    # the whole 6-rank job (4 and 5 running copies of 0 and 2) takes the step the file's reading does
    whole = Workload({**{r: _rank(r) for r in range(4)}, 4: _rank(0), 5: _rank(2)}, GROUPS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert simulate_on(whole, "switch").step_ns == beside["recording_ns"]
    # validate: the file's absent members
    rc, out, err = run_cli(["validate", prefix, "--json"], capsys)
    assert rc == 0, err
    missing = [i for i in json.loads(out)["report"]["issues"] if i["code"] == "group-missing-rank"]
    assert sorted(r for i in missing for r in i["details"]["ranks"]) == [4, 5]
    # analyze: each group of three
    rc, out, err = run_cli(["analyze", "collectives", prefix, "--json"], capsys)
    assert rc == 0, err
    sizes = {row["group"]: row["group_size"] for row in json.loads(out)["summary"]}
    assert sizes == {"g0": 3, "g1": 3}, sizes
    # report: its simulation reads them
    html = tmp_path / "r.html"
    rc, _out, err = run_cli(["report", prefix, "-o", str(html), "--simulate", "switch"], capsys)
    assert rc == 0, err
    assert "simulation assumption: assumed symmetric" in html.read_text()
    # obfuscate: writes them (renamed) beside its output
    rc, out, err = run_cli(["obfuscate", prefix, "-o", str(tmp_path / "obf" / "job"), "--json"], capsys)
    assert rc == 0, err
    renamed = json.loads((tmp_path / "obf" / "job.comm_groups.json").read_text())
    assert sorted(map(sorted, renamed.values())) == sorted(map(sorted, GROUPS.values()))
    # merge, then split: carried through the merged file
    merged = str(tmp_path / "merged.et")
    rc, _out, err = run_cli(["merge", prefix, "-o", merged], capsys)
    assert rc == 0, err
    assert Workload.open(merged).groups == GROUPS
    rc, _out, err = run_cli(["split", merged, "-o", str(tmp_path / "again" / "job")], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "again" / "job.comm_groups.json").read_text()) == GROUPS


@pytest.mark.parametrize(
    "key",
    [
        "all-reduce-implementation-custom",
        "all-gather-implementation-custom",
        "reduce-scatter-implementation-custom",
        "all-to-all-implementation-custom",
    ],
)
def test_custom_collective_implementations_are_refused_in_one_line(key, tmp_path, capsys):
    system = tmp_path / "sys.json"
    system.write_text(json.dumps({"all-reduce-implementation": ["ring"], key: ["allreduce.xml"]}, indent=1))
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    line = next(i for i, text in enumerate(system.read_text().splitlines(), 1) if key in text)
    with pytest.raises(Exception, match=rf"sys.json:{line}: '{key}': custom collective implementations"):
        SystemConfig.from_json(system)
    job = tmp_path / "job"
    Workload({r: _rank(0) for r in range(2)}).save(job)
    rc, out, err = run_cli(["simulate", str(job), "--system", str(system), "--network", str(net)], capsys)
    assert rc != 0 and len(err.strip().splitlines()) == 1 and key in err and str(system) in err, err
    with pytest.raises(Exception, match=key):  # a dict or a config built in code is refused alike
        SystemConfig.from_dict({key: ["x.xml"]})
    with pytest.raises(Exception, match=key):
        SystemConfig(ignored={key: ["x.xml"]})
    assert SystemConfig.from_dict({"all-reduce-implementation": ["ring"]}).all_reduce == ("ring",)
