"""One rank's trace of a multi-rank job (what is usually published): its absent peers are taken
as symmetric copies of the rank present (`simulate.peers`), said in the result, the CLI and the
report; `validate` and `simulate` agree on what runs; nothing deadlocks."""

from __future__ import annotations

import gzip
import json

import pytest

from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.simulate import WorkloadInvalid
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.simulate.simulator import SimulationBlocked
from chakra_trace.validate import validate_workload
from conftest import SHARED, run_cli

WILD = SHARED / "gpu-wild"


def _rank(groups: list[str], size: int = 1 << 20, comp_us: int = 50):
    """One rank's step: compute, then an all-reduce on each group in turn."""
    b = TraceBuilder()
    last = b.comp("fwd", comp_us)
    for g in groups:
        last = b.collective("ALL_REDUCE", size, pg_name=g, deps=[last])
        last = b.comp("bwd", comp_us, deps=[last])
    return b.build()


def _step(w: Workload, system: str, **kw) -> int:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_on(w, system, **kw).step_ns


@pytest.mark.parametrize("system", ["ring-8", "switch", "recorded", "ideal"])
@pytest.mark.parametrize("shortcuts", [True, False])
def test_one_rank_of_eight_simulates_as_eight_identical_ranks(system, shortcuts):
    """Invariant: rank 0 alone, its group naming 8 ranks, takes the step of the whole 8-rank
    job built from 8 identical copies, on a network of 8 NPUs and on the job's own ranks."""
    t = _rank(["g"])
    groups = {"g": list(range(8))}
    alone = Workload({0: t}, dict(groups))
    whole = Workload({r: _rank(["g"]) for r in range(8)}, dict(groups))
    res = simulate_on(alone, system, shortcuts=shortcuts)
    assert res.assumed_symmetric_ranks == {r: 0 for r in range(1, 8)}
    assert res.finish_ns.size == 8 and "ranks 1..7 as copies of rank 0" in res.assumption
    assert res.step_ns == _step(whole, system, shortcuts=shortcuts)
    assert simulate_on(whole, system).assumed_symmetric_ranks == {}


@pytest.mark.parametrize("system", ["ring-8", "switch"])
def test_tensor_and_data_parallel_groups_of_one_rank(system):
    """Rank 0 of TP=2 x DP=4 names tp0 = [0, 1] and dp0 = [0, 2, 4, 6]; a renumbered copy would
    issue on groups it is not in, costing through the rank present does not: the step equals
    the whole job's, whose 8 ranks each name their own tp and dp groups."""
    groups = {f"tp{k}": [2 * k, 2 * k + 1] for k in range(4)} | {f"dp{k}": [k, k + 2, k + 4, k + 6] for k in range(2)}
    alone = Workload({0: _rank(["tp0", "dp0"])}, {"tp0": groups["tp0"], "dp0": groups["dp0"]})
    whole = Workload({r: _rank([f"tp{r // 2}", f"dp{r % 2}"]) for r in range(8)}, groups)
    res = simulate_on(alone, system)
    # the network's NPUs (ring-8), or the ranks the groups name (the job's own: 0..6)
    assert sorted(res.assumed_symmetric_ranks) == list(range(1, 8 if system == "ring-8" else 7))
    assert res.step_ns == _step(whole, system)


def _jobs() -> dict[str, Workload]:
    """Jobs missing peers, some of which validation rejects."""
    # (each with a timed compute node: a job of no durations is refused on `recorded` before any
    # validation, tests/test_no_silent_zeros.py)
    send = TraceBuilder()
    send.send(5, 64, deps=[send.comp("fwd", 50)])
    bad = TraceBuilder()
    bad.collective("ALL_REDUCE", -8, pg_name="g", deps=[bad.comp("fwd", 50)])
    return {
        "absent-peers": Workload({0: _rank(["g"])}, {"g": [0, 1, 2, 3]}),
        "two-of-four": Workload({0: _rank(["g"]), 1: _rank(["g"])}, {"g": [0, 1, 2, 3]}),
        "absent-peers-declared-only-by-a-file": Workload({2: _rank(["g"])}, {"g": [0, 1, 2, 3]}),
        "send-to-absent-rank": Workload({0: send.build()}),
        "negative-size": Workload({0: bad.build()}, {"g": [0, 1]}),
    }


@pytest.mark.parametrize("name", list(_jobs()))
@pytest.mark.parametrize("system", ["switch", "recorded"])
def test_validate_and_simulate_agree_on_what_runs(name, system):
    """validate's verdict (no errors) is exactly whether simulate runs the job."""
    w = _jobs()[name]
    report = validate_workload(w)
    try:
        res = simulate_on(w, system)
        ran = True
    except WorkloadInvalid:
        ran = False
    assert report.ok == ran, (name, report.render())
    if ran and res.assumed_symmetric_ranks:  # the missing peers: an informational issue saying so
        issue = report.get("group-missing-rank")
        assert issue is not None and issue.severity == "warning" and "symmetric copies" in issue.message


def test_a_receive_from_an_absent_rank_says_what_it_waits_for():
    """No deadlock: the run stops (bounded work) and names the receive and its absent sender."""
    b = TraceBuilder()
    c = b.collective("ALL_REDUCE", 4096, pg_name="g")
    b.recv(2, 64, deps=[c])
    w = Workload({0: b.build()}, {"g": [0, 1, 2, 3]})
    with pytest.raises(SimulationBlocked, match=r"receive from NPU 2 .*absent rank taken as a copy of rank 0"):
        simulate_on(w, "switch", validate=False)


def test_a_group_past_a_fixed_network_is_still_refused():
    w = Workload({0: _rank(["g"])}, {"g": list(range(16))})
    with pytest.raises(WorkloadInvalid, match=r"group 'g' lists ranks 8, .*not NPUs of this network \(0..7\)"):
        simulate_on(w, "ring-8")


# ------------------------------------------------------------------ real one-rank files


def _raw_peers(path) -> tuple[int, set[int]]:
    """(the file's rank, the other ranks its collectives' process groups list), by reading the
    raw Kineto JSON: distributedInfo and record_param_comms' "Process Group Ranks"."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    rank = int((doc.get("distributedInfo") or {}).get("rank", 0))
    ranks: set[int] = set()
    for e in doc["traceEvents"]:
        if e.get("name") == "record_param_comms":
            listed = (e.get("args") or {}).get("Process Group Ranks")
            if isinstance(listed, str) and listed.startswith("["):
                ranks.update(json.loads(listed))
    return rank, ranks - {rank}


@pytest.mark.parametrize("name", ["hta_nccl_parser.json.gz", "hta_sampled_rank0.json.gz"])
def test_a_real_rank_file_of_a_bigger_job_validates_simulates_obfuscates_and_reports(name, tmp_path, capsys):
    src = WILD / name
    if not src.is_file():
        pytest.skip(f"needs {src}: ../shared/traces beside the checkout (CI has it)")
    prefix = str(tmp_path / "job")
    rc, _out, err = run_cli(["convert", "kineto", str(src), "-o", prefix], capsys)
    assert rc == 0, err
    rank, peers = _raw_peers(src)
    rc, out, err = run_cli(["validate", prefix, "--json"], capsys)
    verdict = json.loads(out)["report"]
    assert (rc == 0) == verdict["ok"], err
    codes = {i["code"] for i in verdict["issues"]}
    assert ("group-missing-rank" in codes) == bool(peers)
    rc, out, err = run_cli(["simulate", prefix, "--system", "recorded", "--json"], capsys)
    assert (rc == 0) == verdict["ok"], err  # validate and simulate agree
    res = json.loads(out)
    assert {int(k) for k in res["assumed_symmetric_ranks"]} == peers
    assert set(res["assumed_symmetric_ranks"].values()) <= {rank}
    if peers:  # the assumption said in the plain output too
        rc, out, err = run_cli(["simulate", prefix, "--system", "switch"], capsys)
        assert rc == 0 and "assumed symmetric" in out, err
    rc, out, err = run_cli(["obfuscate", prefix, "-o", str(tmp_path / "obf" / "job"), "--json"], capsys)
    assert rc == 0, err
    assert {c["system"] for c in json.loads(out)["simulated"]} == {"recorded", "switch"}
    html = tmp_path / "r.html"
    rc, _out, err = run_cli(["report", prefix, "-o", str(html), "--simulate", "recorded", "--device", "h100"], capsys)
    assert rc == 0, err
    assert ("simulation assumption: assumed symmetric" in html.read_text()) == bool(peers)
