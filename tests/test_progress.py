"""Progress on long commands (issue 32, review problem 12): the library functions take an
optional callback (`simulate`'s nodes, `parallelize_detailed`'s stages and ranks,
`Workload.save`'s ranks, `predict`'s replay passes) and the CLI draws it (`cli.common.counts`)
only when stderr is a terminal: a piped run prints no progress."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chakra_trace.cli.common import counts
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.simulate.engine import Engine
from chakra_trace.simulate.presets import simulate_on
from conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent


def _job(layers: int = 20) -> Workload:
    traces = {}
    for r in range(2):
        b = TraceBuilder()
        x = b.comp("embed", 10)
        for _ in range(layers):
            x = b.comp("mm", 100 + r, deps=[x], num_ops=1e6, tensor_size=1 << 12)
            x = b.collective("ALL_REDUCE", 1 << 16, name="ar", deps=[x])
        traces[r] = b.build()
    return Workload(traces, {})


def test_engine_ticks_every_n_events():
    e = Engine()
    for k in range(10):
        e.at(k, lambda: None)
    ticks = []
    e.run(lambda: ticks.append(e.events), every=3)
    assert ticks == [3, 6, 9]


def test_simulate_reports_nodes_done_of_all():
    """Called with (nodes done, nodes to do), done rising to the total; the result is the one
    without a callback."""
    w = _job()
    calls: list[tuple[int, int]] = []
    res = simulate_on(w, "ring-8", progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1][0] == calls[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    assert res.step_ns == simulate_on(w, "ring-8").step_ns


def test_save_reports_each_rank(tmp_path):
    calls = []
    _job(2).save(tmp_path / "job", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 2), (2, 2)]


def test_parallelize_reports_stages_and_ranks():
    pytest.importorskip("torch")
    from chakra_trace.capture import capture, load_build
    from chakra_trace.synthesize.parallel import Plan, parallelize_detailed

    master = capture(
        load_build(f"{ROOT / 'examples' / 'models' / 'gpt.py'}:build"), {"preset": "tiny"}, batch=4, seq=16
    ).trace
    plan = Plan(tp=2, pp=2, dp=1, micro_batches=2)
    calls = []
    res = parallelize_detailed(master, plan, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (plan.pp + plan.ranks, plan.pp + plan.ranks) == (2 + len(res.workload), 6)


def test_capture_reports_its_phases():
    pytest.importorskip("torch")
    from chakra_trace.capture import capture, load_build

    build = load_build(f"{ROOT / 'examples' / 'models' / 'gpt.py'}:build")
    for rules, phases in ((False, [0, 1, 2]), (True, [0, 1, 3, 4])):
        calls: list = []

        def record(done, total, calls=calls):
            calls.append((done, total))

        capture(build, {"preset": "tiny"}, batch=4, seq=16, shape_rules=rules, progress=record)
        assert [d for d, _ in calls] == phases and {t for _, t in calls} == {phases[-1]}


def test_piped_runs_print_no_progress(tmp_path, capsys):
    """Under pytest stdout and stderr are pipes: nothing but the answer; on a terminal the bar
    (transient, on stderr) is drawn."""
    _job().save(tmp_path / "job")
    rc, out, err = run_cli(["simulate", str(tmp_path / "job"), "--system", "ring-8"], capsys)
    assert rc == 0, err
    assert "simulating" not in err + out and "\x1b[" not in err
    with counts("x") as tick:
        assert tick is None


def test_a_terminal_gets_the_bar(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with counts("simulating on ring-8", "nodes") as tick:
        assert tick is not None
        tick(5, 10)
        tick(10, 10)
