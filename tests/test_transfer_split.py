"""Communication split into transfer and waiting for peers, and the critical path accounting for
the whole step: invariants over every multi-rank job of the corpus, recorded and simulated.

- per rank: transfer + peer wait = comm, exposed transfer + exposed peer wait = exposed comm,
  every part >= 0, recorded and on every preset;
- per collective instance (recorded): wait + transfer = the node's duration, and the wait is
  the time from the node's start to the last member's start (on the job's clock), found here
  from the node ids and start times alone;
- on `ideal` (communication is free) nothing is transfer: all communication is waiting;
- bus bandwidth from transfer time never passes the fastest link of a simulated network;
- critical path length + start skew + lead gap = the step, and on a simulation starting every
  NPU at 0 the length is the simulated step.
"""

from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze import Analysis
from chakra_trace.analyze.breakdown import Breakdown, breakdown
from chakra_trace.analyze.collectives import bus_factor, collective_stats
from chakra_trace.io.workload import Workload
from chakra_trace.simulate.presets import resolve, simulate_on
from chakra_trace.timeline.clock import rank_offsets_ns

CORPUS = Path(__file__).parent / "data" / "corpus"
JOBS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
PRESETS = ("ideal", "switch", "torus-8x8", "dgx-8x8", "ring-8")


@pytest.fixture(scope="module")
def jobs():
    out = {name: Workload.open(CORPUS / name) for name in JOBS}
    return {k: w for k, w in out.items() if len(w) > 1}


@pytest.fixture(scope="module")
def sims(jobs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {(j, s): simulate_on(w, s) for j, w in jobs.items() for s in (*PRESETS, "recorded")}


def _parts_add_up(rows):
    for r in rows:
        assert r["transfer_us"] + r["peer_wait_us"] == pytest.approx(r["comm_us"], abs=1e-6)
        assert r["exposed_transfer_us"] + r["exposed_peer_wait_us"] == pytest.approx(r["exposed_comm_us"], abs=1e-6)
        for k in ("transfer_us", "peer_wait_us", "exposed_transfer_us", "exposed_peer_wait_us"):
            assert r[k] >= -1e-9, (k, r)
        assert r["exposed_transfer_us"] <= r["transfer_us"] + 1e-9


def test_corpus_has_multi_rank_jobs(jobs):
    assert len(jobs) >= 5, sorted(jobs)


def test_recorded_breakdown_splits_comm(jobs):
    waited = 0.0
    for w in jobs.values():
        rows = breakdown(w).rows
        _parts_add_up(rows)
        waited += sum(r["peer_wait_us"] for r in rows)
    assert waited > 0  # (recorded ranks do arrive at different times)


def test_recorded_instances_wait_for_the_last_member(jobs):
    for name, w in jobs.items():
        offsets = rank_offsets_ns(w)
        start = {}  # (rank, node id) -> start on the job's clock (ns), from the nodes alone
        for r, t in w.traces.items():
            for i, s in zip(t.ids.tolist(), t.start.tolist()):
                start[(r, i)] = s * 1000 + offsets[r]
        by_instance: dict = {}
        for rec in collective_stats(w).records:
            assert rec["wait_us"] >= 0 and rec["transfer_us"] >= 0, (name, rec)
            assert rec["wait_us"] + rec["transfer_us"] == pytest.approx(rec["duration_us"]), (name, rec)
            by_instance.setdefault((rec["group"], rec["index"]), []).append(rec)
        for recs in by_instance.values():
            last = max(start[(x["rank"], x["node_id"])] for x in recs)
            for x in recs:
                mine = start[(x["rank"], x["node_id"])]
                want = min(last - mine, x["duration_us"] * 1000) / 1000
                assert x["wait_us"] == pytest.approx(want, abs=1e-6), (name, x)


def test_simulated_breakdown_splits_comm(sims):
    for (job, system), res in sims.items():
        assert (res.transfer_ns + res.peer_wait_ns == res.comm_ns).all(), (job, system)
        assert (res.exposed_transfer_ns + res.exposed_peer_wait_ns == res.exposed_comm_ns).all(), (job, system)
        _parts_add_up(Breakdown.from_simulation(res).rows)
        for c in res.collectives:
            assert c.transfer_ns >= 0 and c.peer_wait_ns >= 0, (job, system, c)
            assert c.transfer_ns + c.peer_wait_ns == c.end_ns - c.start_ns


def test_free_network_leaves_only_waiting(sims):
    for (job, system), res in sims.items():
        if system != "ideal":
            continue
        assert int(res.transfer_ns.max()) == 0, job
        assert all(c.transfer_ns == 0 for c in res.collectives), job
        # what `ideal` still shows as exposed communication is waiting for peers, all of it
        assert (res.exposed_peer_wait_ns == res.exposed_comm_ns).all(), job


def test_bus_bandwidth_from_transfer_within_the_links(sims):
    checked = 0
    for (job, system), res in sims.items():
        p = resolve(system)
        if p.network is None:
            continue
        fastest = max(d.bandwidth for d in p.network.dims)  # GB/s = bytes per ns
        for c in res.collectives:
            if c.transfer_ns > 0 and c.bytes > 0:
                busbw = c.bytes * bus_factor(c.type, c.npus) / c.transfer_ns
                assert busbw <= fastest, (job, system, c)
                checked += 1
    assert checked > 50


def test_critical_path_accounts_for_the_step_recorded(jobs):
    skewed = 0
    for name, w in jobs.items():
        cp = Analysis(w).critical_path()
        assert cp.start_skew_ns >= 0 and cp.lead_gap_ns >= 0, name
        assert cp.accounted_ns == cp.step_ns, (name, cp.length_ns, cp.start_skew_ns, cp.lead_gap_ns, cp.step_ns)
        skewed += cp.start_skew_ns > 0
        d = cp.to_dict()
        assert {"start_skew_ns", "lead_gap_ns", "first_rank", "start_rank"} <= set(d)
    assert skewed  # (some recorded ranks start later than others: named, not lost)


def test_critical_path_is_the_simulated_step(jobs, sims):
    for (job, system), res in sims.items():
        cp = Analysis(jobs[job], res).critical_path()
        assert cp.accounted_ns == cp.step_ns == res.step_ns, (job, system)
        if system != "recorded":  # every NPU starts at 0: nothing before the path
            assert cp.length_ns == res.step_ns and cp.start_skew_ns == cp.lead_gap_ns == 0, (job, system)


def test_cli_names_start_skew(capsys):
    from conftest import run_cli

    code, out, _ = run_cli(["analyze", "critical-path", str(CORPUS / "ddp")], capsys)
    assert code == 0
    cp = Analysis(Workload.open(CORPUS / "ddp")).critical_path()
    assert cp.start_skew_ns > 0
    assert "start skew" in out and f"rank {cp.start_rank} started later" in out
    code, out, _ = run_cli(["analyze", "collectives", str(CORPUS / "ddp")], capsys)
    assert code == 0 and "transfer" in out and "wait" in out


def test_split_columns_in_breakdown_table(jobs):
    w = next(iter(jobs.values()))
    cols = breakdown(w).to_table().names
    assert {"transfer_us", "peer_wait_us", "exposed_transfer_us", "exposed_peer_wait_us"} <= set(cols)
    assert np.isfinite([r["peer_wait_us"] for r in breakdown(w).rows]).all()
