"""An op that fails at any stage (build, try, warm-up, timed run) is left out and reported with
its stage, exception and message; the rest replays on. A collective that fails on one rank is
left out on every rank (its peers would wait for it). Issue 14."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

sys.path.insert(0, str(Path(__file__).parent / "workloads"))

import flaky  # noqa: E402

from chakra_trace.cli import main  # noqa: E402
from chakra_trace.replay import job  # noqa: E402
from chakra_trace.replay.operators import HostReplay  # noqa: E402
from conftest import DATA  # noqa: E402


def _mlp(tmp_path, edit) -> Path:
    """The mlp trace with `edit(nodes)` applied."""
    d = json.loads(gzip.open(DATA / "mlp_rank0.et.json.gz", "rt").read())
    edit(d["nodes"])
    out = tmp_path / "rank0.et.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(d, f)
    return out


def _attr(node, name, value) -> None:
    for a in node["attrs"]:
        if a["name"] == name:
            a["value"] = value


def _first(nodes, name):
    return next(n for n in nodes if n["name"] == name)


def _flaky_relu(fail_after: int):
    """The first aten::relu becomes chakra_test::flaky(x, fail_after)."""

    def edit(nodes):
        n = _first(nodes, "aten::relu")
        n["name"] = "chakra_test::flaky"
        _attr(n, "op_schema", flaky.SCHEMA)
        for k, v in (("values", fail_after), ("shapes", []), ("types", "Int"), ("strides", [])):
            n["inputs"][k].append(v)

    return edit


def _reasons(rep) -> dict[str, str]:
    return {o.name: o.reason for o in rep.coverage.outcomes if o.status == "failed"}


def test_build_and_try_failures_are_reported_by_stage(tmp_path):
    def edit(nodes):
        n = _first(nodes, "aten::relu")
        n["inputs"]["types"][0] = "Tensor(c10::Float4)"  # no such dtype: its input cannot be built
        lin = _first(nodes, "aten::linear")
        lin["inputs"]["shapes"][1] = [256, 7]  # a weight that does not fit the input: torch refuses the call
        lin["inputs"]["strides"][1] = [7, 1]

    rep = HostReplay(_mlp(tmp_path, edit))
    why = _reasons(rep)
    assert why == {
        "aten::relu": "build: Unreplayable: unknown tensor dtype 'c10::Float4'",
        "aten::linear": "try: RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x64 and 7x256)",
    }
    assert rep.coverage.replayed == rep.coverage.total - 2
    rep.run_step()


@pytest.mark.parametrize("stage,fail_after", [("try", 0), ("warm-up", 1), ("timed run", 4)])
def test_an_op_failing_at_any_stage_is_left_out_and_the_rest_replays(tmp_path, stage, fail_after):
    """Call 1 is the try; warm-up 0 s runs 3 passes (calls 2-4); the timed passes follow."""
    flaky._calls.clear()
    trace = _mlp(tmp_path, _flaky_relu(fail_after))
    res = job.rank_main(0, 1, [str(trace)], _opts())
    cov = res["coverage"]
    assert cov["not_replayed"] == 1 and cov["replayed"] == cov["total"] - 1
    [(reason, n)] = cov["reasons"].items()
    assert reason == f"failed: {stage}: RuntimeError: flaky op: call {fail_after + 1} after {fail_after} good ones"
    assert res["measurement"]["samples"] and n == 1
    # never called again once it failed (the try calls it with fresh inputs, then without grad, too)
    assert flaky._calls[fail_after] == (4 if stage == "try" else fail_after + 1)


def _opts(**kw):
    return {
        "device": "cpu",
        "steps": None,
        "select": None,
        "config": None,
        "threads": 1,
        "warmup": 0,
        "budget_s": 0.3,
        "target_rel_ci": 0.02,
        "max_repeats": 20,
        "min_repeats": 3,
        "plan": False,
        "warmup_s": 0.0,
        **kw,
    }


@pytest.mark.timeout(300)
def test_a_collective_failing_on_one_rank_is_left_out_on_every_rank(tmp_path, monkeypatch):
    """DDP on 2 ranks whose rank 1 cannot all-gather: an attempt stops at the all-gather (rank 0
    would wait for it), the job runs again without it, and it is reported on both ranks; the
    trace has one all-gather per recorded step, so three attempts."""
    for r in (0, 1):
        shutil.copy(DATA / f"ddp_rank{r}.et.json.gz", tmp_path / f"rank{r}.et.json.gz")
    real = job.run_ranks
    targets = []

    def run_ranks(target, *a, **kw):
        targets.append(target)
        return real("flaky:rank_main", *a, **kw)

    monkeypatch.setattr(job, "run_ranks", run_ranks)
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "workloads"))
    res = job.replay_host(tmp_path, budget_s=0.5, warmup_s=0.1, collective_timeout_s=20)
    assert len(targets) == 3
    for r in (0, 1):
        c = res.coverage[r]
        [(reason, n)] = c["reasons"].items()
        assert n == 2 and c["replayed"] == c["total"] - 2, c  # one all-gather per recorded step
        assert reason.startswith("failed: warm-up: RuntimeError: injected: this rank cannot all-gather (on rank 1")
    assert res.step.n >= 3


@pytest.mark.timeout(300)
def test_cli_reports_failed_ops_one_line_each(tmp_path, capsys):
    def edit(nodes):
        _first(nodes, "aten::relu")["inputs"]["types"][0] = "Tensor(c10::Float4)"

    trace = _mlp(tmp_path, edit)
    assert main(["replay", str(trace), "--budget-s", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "113 of 114 replayed" in out
    assert "aten::relu (node " in out and "failed: build: Unreplayable: unknown tensor dtype 'c10::Float4'" in out


@pytest.mark.timeout(300)
def test_a_collective_a_peer_never_joins_times_out_and_is_left_out(tmp_path, monkeypatch):
    """Rank 1 leaves its all-gathers out silently: rank 0's wait ends after the collective timeout
    (the replay's own agreements go over another group, so nothing else pairs with it), and the
    job runs again without each all-gather; no rank hangs."""
    for r in (0, 1):
        shutil.copy(DATA / f"ddp_rank{r}.et.json.gz", tmp_path / f"rank{r}.et.json.gz")
    real = job.run_ranks
    monkeypatch.setattr(job, "run_ranks", lambda target, *a, **kw: real("flaky:rank_main_skip", *a, **kw))
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "workloads"))
    res = job.replay_host(tmp_path, budget_s=0.5, warmup_s=0.1, collective_timeout_s=3, timeout_s=120)
    for r in (0, 1):
        c = res.coverage[r]
        assert c["replayed"] == c["total"] - 2, c
        assert {x["name"] for x in c["examples"]} == {"c10d::allgather_"}
        assert all(x["reason"].startswith("failed: warm-up: RuntimeError: ") for x in c["examples"])
        assert all("replayed again without it" in x["reason"] for x in c["examples"])
