"""`chakra replay` from the command line: runs, the recorded time of a selection, one-line errors,
traces with dependency cycles."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from chakra_trace.cli import main  # noqa: E402
from chakra_trace.io.et import write_trace  # noqa: E402
from chakra_trace.replay.launch import RankFailed  # noqa: E402
from chakra_trace.replay.measure import load_measurements  # noqa: E402
from chakra_trace.replay.operators import HostReplay  # noqa: E402
from chakra_trace.schema.builder import TraceBuilder  # noqa: E402
from conftest import DATA  # noqa: E402

OPT = r"^Optimizer\.step"


def _small(tmp_path, *, cycle: str = ""):
    """Three compute nodes (0.3 ms each): c1 -> c2 -> c3, plus a cycle back to c1 through a control or
    a data dependency when asked."""
    b = TraceBuilder()
    b.add(
        "c1",
        id=1,
        duration=300,
        start=10,
        ctrl_deps=[3] if cycle == "ctrl" else [],
        data_deps=[3] if cycle == "data" else [],
    )
    b.add("c2", id=2, duration=300, start=310, data_deps=[1])
    b.add("c3", id=3, duration=300, start=610, data_deps=[2])
    path = tmp_path / f"small{cycle}.et"
    write_trace(b.build(), path)
    return str(path)


def test_select_is_compared_with_the_recorded_time_of_the_same_ops():
    kineto = DATA / "kineto" / "mlp_rank0.kineto.json.gz"
    whole = HostReplay(DATA / "mlp_rank0.et.json.gz", kineto=kineto)
    opt = HostReplay(DATA / "mlp_rank0.et.json.gz", select=OPT, kineto=kineto)
    assert "selected by" in opt.recorded_basis and "profiler steps" in whole.recorded_basis
    steps, sel = whole.recorded_step_s(), opt.recorded_step_s()
    assert len(sel) == len(steps) == 2
    # the optimizer's ops are a part of the step (about 17% here), not the step
    assert all(0.05 * s < x < 0.5 * s for x, s in zip(sel, steps)), (sel, steps)
    # the sum of the durations of the matched Kineto events of the selected ops, step by step
    from chakra_trace.convert.link import link

    lk = link(opt.h.ids[opt.rows], opt.h.rf_id[opt.rows], opt.h.name_array[opt.rows].astype(object), opt.kineto)
    assert sum(sel) * 1e9 == pytest.approx(float(lk.duration[lk.event >= 0].sum()))


@pytest.mark.timeout(300)
def test_cli_select_runs_and_one_line_errors(tmp_path, capsys):
    for name in ("mlp_rank0.et.json.gz", "kineto/mlp_rank0.kineto.json.gz"):
        shutil.copy(DATA / name, tmp_path)
    trace = str(tmp_path / "mlp_rank0.et.json.gz")
    out = tmp_path / "opt.json"
    assert main(["replay", trace, "--select", OPT, "--budget-s", "0.5", "--runs", "3", "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert "selected by" in res["recorded_basis"] and 300 < res["recorded_step_us"] < 1500
    assert res["step"]["stats"]["runs"] == 3
    step = load_measurements(out)["step"]
    assert step.run_count == 3 and len(step.split_runs()) == 3
    assert main(["bench", "compare", str(out), str(out), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"step", "rank 0"}
    assert rows["step"]["a_runs"] == 3 and rows["step"]["status"] != "not_enough_evidence"

    # a rank that fails: one line per rank on stderr, the cause first, exit 2; --debug shows the
    # rank's traceback
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(DATA / "mlp_rank0.et.json.gz", job / "rank0.et.json.gz")
    (job / "rank1.et.json").write_text("{not a trace")
    assert main(["replay", str(job), "--budget-s", "0.5"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("error: rank 1 failed: ") and "invalid JSON" in lines[0], lines
    # (rank 0 may have noticed its peer leave within the grace period)
    assert lines[1:] in ([], ["error: rank 0 stopped: a peer rank failed and closed its connection"]), lines
    (job / "rank0.et.json.gz").unlink()
    (job / "rank0.et.json").write_text("[]")
    assert main(["replay", str(job), "--budget-s", "0.5"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and {x.split(" failed: ")[0] for x in lines} == {"error: rank 0", "error: rank 1"}, lines
    with pytest.raises(RankFailed) as e:
        main(["--debug", "replay", str(job), "--budget-s", "0.5"])
    assert "Traceback" in str(e.value.__cause__)
    assert main(["replay", trace, "--mode", "duration"]) == 2  # a host trace is not a Chakra trace
    capsys.readouterr()


@pytest.mark.timeout(300)
def test_cycles_are_repaired_with_a_warning_or_named_in_one_line(tmp_path, capsys):
    assert main(["replay", _small(tmp_path, cycle="ctrl"), "--budget-s", "0.3", "--json"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert res["fully_replayed"] and res["coverage"]["0"]["replayed"] == 3
    [warning] = captured.err.strip().splitlines()
    assert warning.startswith("warning: trace repaired before replay: rank 0 (smallctrl.et): ") and "control" in warning
    assert res["warnings"] == [warning.removeprefix("warning: ")]

    assert main(["replay", _small(tmp_path, cycle="data"), "--budget-s", "0.3"]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("error: rank 0 failed: rank 0 (smalldata.et): dependency cycle") and "data" in err


@pytest.mark.timeout(120)
def test_progress_reports_rank_zeros_samples(tmp_path):
    from chakra_trace.replay.schemaless import replay_workload

    seen: list[int] = []
    res = replay_workload(_small(tmp_path), budget_s=1.0, progress=seen.append)
    assert seen and seen == sorted(seen) and 0 < seen[-1] <= res.step.n  # reported at most every 0.1 s
