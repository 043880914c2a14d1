"""The replay spends the host time the original spent between its recorded ops (the converter's
`[host]` nodes, `replay/host_gaps.py`), and leaves it out when asked."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from chakra_trace.cli import main  # noqa: E402
from chakra_trace.convert.pytorch import convert_pytorch  # noqa: E402
from chakra_trace.replay import _standalone as rt  # noqa: E402
from chakra_trace.replay.operators import HostReplay  # noqa: E402
from chakra_trace.schema.resources import HOST_GAP  # noqa: E402

CORPUS = Path(__file__).parent / "data" / "corpus"
if not CORPUS.is_dir():  # (the corpus comes with issue 14's corpus branch)
    pytest.skip(f"no corpus at {CORPUS}", allow_module_level=True)
TP = CORPUS / "tp"


def _replay(**kw) -> HostReplay:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HostReplay(TP / "rank0.et.json.gz", kineto=TP / "rank0.kineto.json.gz", **kw)


def test_the_emulated_gaps_are_the_recorded_host_time():
    """One process, no process group: tp's functional collectives are not replayed, and no c10d
    collective is waited for, so every `[host]` node of the conversion but the tail (after the
    last op) lands before some replayed op, whole."""
    rep = _replay(host_gaps=True)
    trace, _ = convert_pytorch(TP / "rank0.et.json.gz", TP / "rank0.kineto.json.gz")
    gaps_us = trace.duration[trace.name_array == HOST_GAP].astype(np.int64)
    assert gaps_us.size > 100 and gaps_us.sum() > 10_000  # (tp: ~27 ms over its two steps)
    emulated_us = sum(op.get("host_gap_us", 0.0) for op in rep.plan["ops"])
    assert emulated_us == pytest.approx(gaps_us[:-1].sum(), abs=1.0)  # the last one is the tail
    assert sum(rep._gaps) * 1e6 == pytest.approx(emulated_us)
    info = rep.host_gaps_info
    assert info["emulated"] and 0 < info["ops"] <= gaps_us.size
    assert info["per_step_s"] == pytest.approx(emulated_us / 1e6 / rep.steps_per_run)
    assert rt.host_gaps(rep.plan) == pytest.approx(rep._gaps)  # what an exported script runs


def test_no_host_gaps_leaves_them_out():
    rep = _replay(host_gaps=False)
    assert not any("host_gap_us" in op for op in rep.plan["ops"])
    assert rt.host_gaps(rep.plan) is None
    assert rep.host_gaps_info["emulated"] is False


def test_without_kineto_there_are_no_gaps():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = HostReplay(TP / "rank0.et.json.gz", host_gaps=True)
    assert not any("host_gap_us" in op for op in rep.plan["ops"])
    assert rep.host_gaps_info["emulated"] is False and "no Kineto" in rep.host_gaps_info["note"]


def test_dropping_an_op_moves_its_gap_to_the_next():
    rep = _replay(host_gaps=True)
    k = next(i for i, g in enumerate(rep._gaps[:-1]) if g > 0)
    before, total = rep._gaps[k] + rep._gaps[k + 1], sum(rep._gaps)
    rep.drop({k: "test"})
    assert rep._gaps[k] == pytest.approx(before) and sum(rep._gaps) == pytest.approx(total)
    assert rep.plan["ops"][k]["host_gap_us"] == pytest.approx(before * 1e6, abs=1e-3)


class _Work:
    def __init__(self, seconds):
        self.seconds = seconds

    def wait(self, *args):
        time.sleep(self.seconds)


def test_run_waits_the_gap_after_the_previous_op_and_after_a_wait():
    """Each call starts no earlier than its gap after the previous one returned (so a pass lasts
    at least the ops plus the gaps), counted from the end of a wait for a collective when it
    waited for one."""
    calls = [(lambda: None, (), {}, [], []) for _ in range(4)]
    t0 = time.perf_counter()
    rt.run(calls, gaps=[0.004, 0.0, 0.003, 0.002])
    assert time.perf_counter() - t0 >= 0.009
    sleep = [(lambda: time.sleep(0.005), (), {}, [], []), (lambda: None, (), {}, [], [])]
    t0 = time.perf_counter()
    rt.run(sleep, gaps=[0.0, 0.003])  # the gap starts when the 5 ms op returned
    assert time.perf_counter() - t0 >= 0.008
    work = _Work(0.005)
    coll = [(lambda: work, (), {}, [], ["#0"]), (lambda: None, (), {}, ["#0"], [])]
    t0 = time.perf_counter()
    rt.run(coll, gaps=[0.0, 0.003])  # 5 ms wait, then the 3 ms of host time after it
    assert time.perf_counter() - t0 >= 0.008


@pytest.mark.timeout(300)
def test_cli_host_gaps_option(tmp_path, capsys):
    """`chakra replay --host-gaps` emulates the gaps and says so; by default (or --no-host-gaps)
    they are left out."""
    job = CORPUS / "gpt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["replay", str(job), "--budget-s", "0.2", "--host-gaps", "-o", str(tmp_path / "on.json")]) == 0
        text = capsys.readouterr().out
        assert main(["replay", str(job), "--budget-s", "0.2", "--json"]) == 0
        off = json.loads(capsys.readouterr().out)
        assert main(["replay", str(job), "--budget-s", "0.2", "--no-host-gaps", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["host_gaps"]["0"]["emulated"] is False
    on = json.loads((tmp_path / "on.json").read_text())
    assert on["host_gaps"]["0"]["emulated"] and on["host_gaps"]["0"]["per_step_s"] > 0
    assert "host time between ops emulated" in text
    assert off["host_gaps"]["0"]["emulated"] is False
