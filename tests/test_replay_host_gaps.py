"""The replay spends the original's host time that its ops lack, calibrated against a profiled
pass of itself (`replay/host_gaps.py`), and leaves it out when asked."""

from __future__ import annotations

import gzip
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.io.kineto import read_kineto
from chakra_trace.replay import host_gaps as hg

CORPUS = Path(__file__).parent / "data" / "corpus"


def _trace(tmp_path, events) -> object:
    """A Kineto trace of (name, tid, ts µs, dur µs) CPU events (gloo:* on a worker thread)."""
    rows = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": t, "ts": ts, "dur": d, "args": {}}
        for n, t, ts, d in events
    ]
    path = tmp_path / "k.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": rows}, f)
    return read_kineto(path)


def test_events_count_nesting_and_the_time_blocked_on_peers(tmp_path):
    k = _trace(
        tmp_path,
        [
            ("aten::linear", 1, 0, 100),  # holds view, which holds a wait
            ("aten::view", 1, 10, 30),
            ("_c10d_functional::wait_tensor", 1, 15, 20),
            ("c10d::wait", 1, 20, 5),  # (inside the wait: not counted twice)
            ("aten::add", 1, 120, 10),
            ("aten::mul", 2, 0, 200),  # another thread: not nested in anything of thread 1
        ],
    )
    ev = hg.events(k)
    by = {k.event_name(i): i for i in range(len(k))}
    assert ev.nested[by["aten::linear"]] == 3 and ev.nested[by["aten::view"]] == 2
    assert ev.nested[by["aten::add"]] == 0 and ev.nested[by["aten::mul"]] == 0
    assert ev.blocked[by["aten::linear"]] == 20_000 and ev.blocked[by["aten::view"]] == 20_000  # ns
    assert ev.blocked[by["aten::add"]] == 0
    t1 = ev.thread[by["aten::linear"]]
    got = ev.starts_between(np.array([t1, t1, t1]), np.array([0, 101_000, -5]), np.array([101_000, 200_000, 5]))
    assert got.tolist() == [4, 1, 1]  # (a bound before the first event is the first event)


def test_collective_work_marks_intervals_a_rank_may_have_waited_in(tmp_path):
    k = _trace(tmp_path, [("aten::add", 1, 0, 10), ("gloo:all_reduce", 2, 50, 100), ("gloo:broadcast", 2, 400, 10)])
    w = hg.CollectiveWork(k)
    lo = np.array([0, 20, 160, 300, 405]) * 1000
    hi = np.array([40, 60, 390, 399, 500]) * 1000
    assert w.overlaps(lo, hi).tolist() == [False, True, False, False, True]


def test_calls_match_the_profiled_events_in_order(tmp_path):
    k = _trace(
        tmp_path,
        [
            ("aten::add", 1, 0, 10),
            ("aten::mul", 1, 20, 10),
            ("aten::add", 1, 21, 2),  # inside mul: starts before mul ended, so not the next add
            ("aten::add", 1, 40, 10),
            ("aten::relu", 9, 0, 1),  # another thread
        ],
    )
    got = hg.match_calls(k, ["aten::add", "aten::mul", "aten::add", "aten::relu", "aten::add"])
    names = [k.event_name(i) if i >= 0 else None for i in got.tolist()]
    assert names == ["aten::add", "aten::mul", "aten::add", None, None]
    assert k.ts[got[2]] == 40_000


def test_owed_time_is_never_negative_and_carries_a_surplus_forward():
    signed = np.array([1.0, -2.0, 0.5, 3.0, -1.0, 0.25])
    out = hg._owed(signed)
    assert out.tolist() == [1.0, 0.0, 0.0, 1.5, 0.0, 0.0]
    rng = np.random.default_rng(3)
    for _ in range(50):
        x = rng.normal(0.0, 1.0, 40)
        o = hg._owed(x)
        assert (o >= 0).all()
        spent, owed = np.cumsum(o), np.cumsum(x)
        # spent so far = the most ever owed: never behind, and a surplus is never spent twice
        assert spent == pytest.approx(np.maximum.accumulate(np.maximum(owed, 0.0)), abs=1e-9)


def test_medians_come_from_clean_samples_and_go_to_valid_ones():
    keys = ["a", "a", "a", "b", "b", "c"]
    values = np.array([1.0, 3.0, 100.0, 5.0, 7.0, 9.0])
    clean = np.array([True, True, False, True, False, False])
    valid = np.array([True, True, True, True, True, False])
    assert hg._medians(keys, values, clean, valid).tolist() == [2.0, 2.0, 2.0, 5.0, 5.0, 0.0]


# ---------------------------------------------------------------------- the replay (torch)
def _replay(job: str, **kw):
    pytest.importorskip("torch")
    from chakra_trace.replay.operators import HostReplay

    if not (CORPUS / job).is_dir():
        pytest.skip(f"no corpus job {job}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HostReplay(CORPUS / job / "rank0.et.json.gz", kineto=CORPUS / job / "rank0.kineto.json.gz", **kw)


@pytest.mark.torch
@pytest.mark.timing  # (measures this machine: a loaded one skews the profiled pass)
@pytest.mark.timeout(300)
def test_a_plain_job_calibrates_to_nothing():
    """gpt2 runs plain tensors: every replayed op runs the code its recording ran (as many
    events), so no time is added inside ops or next to them; every call is found in the
    profiled pass, and the profiler's cost per event is measured."""
    from chakra_trace.replay import _standalone as rt

    rep = _replay("gpt2")
    assert not any(rep._gaps) and "not calibrated" in rep.host_gaps_info["note"]
    rep.calibrate()
    info = rep.host_gaps_info
    cal = info["calibration"]
    assert info["emulated"] and cal["calls_matched"] == len(rep.plan["ops"])
    assert cal["per_event_us"] > 0 and cal["per_empty_event_us"] > 0
    assert cal["inside_ops_ms_per_step"] == 0.0 and cal["between_ops_ms_per_step"] == 0.0
    assert info["per_step_s"] == 0.0 and info["ops"] == 0 and not any(rep._gaps)
    assert rt.host_gaps(rep.plan) is None  # an exported script has nothing to spend either


@pytest.mark.torch
@pytest.mark.timing  # (measures this machine: a loaded one skews the profiled pass)
@pytest.mark.timeout(300)
def test_a_dtensor_job_gets_its_dispatch_time_inside_ops():
    """tp ran its linear layers on DTensors: their recording holds the subclass dispatch
    (more events than the plain replay's), which the calibration adds back before them."""
    from chakra_trace.replay import _standalone as rt

    rep = _replay("tp")
    rep.calibrate()
    info = rep.host_gaps_info
    cal = info["calibration"]
    assert cal["inside_ops_ms_per_step"] > 0.5, cal
    linear = [g for g, op in zip(rep._gaps, rep.plan["ops"]) if op["op"].startswith("aten::linear")]
    assert linear and np.median(linear) > 20e-6  # tens of µs of Python per call, at least
    assert info["per_step_s"] == pytest.approx(sum(rep._gaps) / rep.steps_per_run)
    assert rt.host_gaps(rep.plan) == pytest.approx(rep._gaps, abs=1e-9)  # what an exported script runs


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_no_host_gaps_and_no_kineto_leave_the_ops_alone():
    from chakra_trace.replay import _standalone as rt

    rep = _replay("gpt2", host_gaps=False)
    rep.calibrate()  # (does nothing)
    assert not any("host_gap_us" in op for op in rep.plan["ops"]) and rt.host_gaps(rep.plan) is None
    assert rep.host_gaps_info["emulated"] is False
    pytest.importorskip("torch")
    from chakra_trace.replay.operators import HostReplay

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = HostReplay(CORPUS / "gpt2" / "rank0.et.json.gz")
    bare.calibrate()
    assert bare.host_gaps_info["emulated"] is False and "no Kineto" in bare.host_gaps_info["note"]


@pytest.mark.torch
def test_dropping_an_op_moves_its_time_to_the_next():
    rep = _replay("gpt2")
    rep._gaps = [0.0] * len(rep._gaps)
    rep._gaps[3], rep._gaps[4] = 1e-4, 2e-4
    rep.drop({3: "test"})
    assert rep._gaps[3] == pytest.approx(3e-4) and sum(rep._gaps) == pytest.approx(3e-4)
    assert rep.plan["ops"][3]["host_gap_us"] == pytest.approx(300.0, abs=1e-3)


def test_run_spends_each_gap_before_its_call():
    from chakra_trace.replay import _standalone as rt

    seen = []
    calls = [(lambda i=i: seen.append((i, time.perf_counter())), (), {}, [], []) for i in range(3)]
    t0 = time.perf_counter()
    rt.run(calls, gaps=[0.004, 0.0, 0.003])
    assert seen[0][1] - t0 >= 0.004 and seen[2][1] - seen[1][1] >= 0.003
    assert time.perf_counter() - t0 >= 0.007


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_cli_emulates_by_default_and_says_so(tmp_path, capsys):
    pytest.importorskip("torch")
    from chakra_trace.cli import main

    job = CORPUS / "gpt2"
    if not job.is_dir():
        pytest.skip("no corpus")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["replay", str(job), "--budget-s", "0.2", "-o", str(tmp_path / "on.json")]) == 0
        text = capsys.readouterr().out
        assert main(["replay", str(job), "--budget-s", "0.2", "--no-host-gaps", "--json"]) == 0
        off = json.loads(capsys.readouterr().out)
    on = json.loads((tmp_path / "on.json").read_text())
    assert on["host_gaps"]["0"]["emulated"] and "calibration" in on["host_gaps"]["0"]
    assert "host time the ops lack, emulated" in text and "profiler cost" in text
    assert off["host_gaps"]["0"]["emulated"] is False
