"""`chakra obfuscate`: every corpus job, at every level, leaks none of its names, strings or
shapes (scanned in the written bytes), validates, and simulates to the original's step (levels
a and b within their bound); tokens are consistent across ranks and jobs under one secret."""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.cli import main
from chakra_trace.convert.pytorch import read_collection
from chakra_trace.io.workload import Workload, write_comm_groups
from chakra_trace.schema.enums import NodeType
from chakra_trace.simulate.presets import step_changes
from chakra_trace.synthesize.leaks import leak_scan, needles
from chakra_trace.synthesize.obfuscate import bucketed, obfuscate
from chakra_trace.validate import validate_workload

CORPUS = Path(__file__).parent / "data" / "corpus"
JOBS = [j["name"] for j in json.loads((CORPUS / "index.json").read_text())["jobs"]]
SECRET = b"test secret, 16+ bytes"


@cache
def job(name: str) -> Workload:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_collection(CORPUS / name)


def _written(w: Workload, tmp: Path) -> list[Path]:
    files = w.save(tmp / "job")
    if w.groups:
        files.append(write_comm_groups(w.groups, tmp / "job.comm_groups.json"))
    return files


def _collectives(w: Workload) -> dict[int, list[tuple[int, int]]]:
    """Per rank, (type, bytes) of its collectives in order."""
    out = {}
    for r, t in w.traces.items():
        rows = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
        out[r] = list(zip(t.comm_type[rows].tolist(), t.comm_size[rows].tolist()))
    return out


@pytest.mark.parametrize("level", ["a", "b"])
@pytest.mark.parametrize("name", JOBS)
def test_levels_a_b_leak_nothing_and_keep_the_step(name, level, tmp_path):
    w = job(name)
    o = obfuscate(w, level, SECRET)
    rep = leak_scan(w, _written(o.workload, tmp_path))
    assert rep.clean, rep.found[:5]
    assert rep.searched["name"] > 10
    assert not validate_workload(o.workload).issues
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in step_changes(w, o.workload, ("recorded", "switch")):
            assert abs(s["change"]) <= (0 if level == "a" else 0.01), s
    before, after = _collectives(w), _collectives(o.workload)
    for r in before:  # count, order and type kept; sizes exact at a, within the bucket at b
        assert [c for c, _ in before[r]] == [c for c, _ in after[r]]
        for (_, x), (_, y) in zip(before[r], after[r]):
            assert y == x if level == "a" else abs(y - x) <= 0.0105 * x + 1


@pytest.mark.parametrize("name", ["ddp", "tp"])
@pytest.mark.parametrize("level", ["c", "d"])
def test_levels_c_d_stay_close(name, level, tmp_path):
    w = job(name)
    o = obfuscate(w, level, SECRET, jitter=0.05)
    assert leak_scan(w, _written(o.workload, tmp_path)).clean
    assert not validate_workload(o.workload).issues
    assert o.report.max_duration_change <= 0.05 + 1 / 10  # (1 µs of rounding on a 10 µs op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in step_changes(w, o.workload, ("recorded", "switch")):
            assert abs(s["change"]) < 0.05, s
    if level == "d":
        sizes = [len(t) for t in o.workload.traces.values()]
        assert o.report.fused > 0 and o.report.dummies > 0
        assert sizes != [len(t) for t in w.traces.values()]
        for r, t in o.workload.traces.items():  # a split op's parts add up to its time: none added
            src = w.traces[r]
            origin = o.origins[r]
            comp = t.types == NodeType.COMP_NODE
            assert (t.types[~comp] == src.types[origin[~comp]]).all()
            per_row = np.bincount(origin[comp], weights=t.duration[comp].astype(float), minlength=len(src))
            assert per_row.sum() == pytest.approx(src.duration[src.types == NodeType.COMP_NODE].sum(), rel=0.06)


def test_tokens_are_consistent_across_ranks_and_jobs_under_one_secret():
    a, b = obfuscate(job("ddp"), "a", SECRET).workload, obfuscate(job("fsdp"), "a", SECRET).workload
    shared = set(job("ddp").traces[0].names) & set(job("fsdp").traces[0].names)
    assert len(shared) > 10
    ta, tb = set(a.traces[0].names), set(b.traces[0].names)
    assert len(ta & tb) >= len(shared)  # the same op, the same token in both jobs
    assert len(set(a.traces[0].names) & set(a.traces[1].names)) > 10  # and across the job's ranks
    other = obfuscate(job("ddp"), "a", b"another secret, 16+ bytes").workload
    assert not (set(other.traces[0].names) - {""}) & (ta - {""})


def test_names_as_classes():
    o = obfuscate(job("dlrm"), "a", SECRET, names="class").workload
    assert set(o.traces[0].names) <= {
        "",
        "COMP_NODE",
        "COMM_COLL_NODE",
        "METADATA_NODE",
        "ALL_REDUCE",
        "ALL_TO_ALL",
    } | {
        "ALL_GATHER",
        "REDUCE_SCATTER",
        "BROADCAST",
        "MEM_LOAD_NODE",
        "MEM_STORE_NODE",
        "COMM_SEND_NODE",
        "COMM_RECV_NODE",
        "INVALID_NODE",
    }


def test_a_captured_model_loses_its_shapes(tmp_path):
    """A capture's nodes hold shapes and dtypes: all of them searched, none left."""
    pytest.importorskip("torch")
    from chakra_trace.capture import capture, load_build

    root = Path(__file__).resolve().parent.parent
    res = capture(load_build(f"{root}/examples/models/gpt.py:build"), {"preset": "tiny"}, batch=2, seq=8)
    w = Workload({0: res.trace})
    o = obfuscate(w, "b", SECRET)
    rep = leak_scan(w, _written(o.workload, tmp_path))
    assert rep.searched["shape"] > 20 and rep.searched["type"] > 0 and rep.searched["attribute"] > 5
    assert rep.clean, rep.found[:5]


def test_the_scan_finds_what_is_left(tmp_path):
    """A scan that cannot fail proves nothing: a name put back is found."""
    w = job("gpt2")
    o = obfuscate(w, "a", SECRET).workload
    t = o.traces[0]
    leaked = max((s for s in w.traces[0].names if len(s) > 8), key=len)
    t.names = [*t.names[:-1], leaked]
    rep = leak_scan(w, _written(o, tmp_path))
    assert ("name", leaked) in rep.found
    assert leaked in needles(w)["name"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**62), min_size=1, max_size=50), st.floats(0.001, 0.2))
def test_bucketing_moves_a_value_by_at_most_the_bucket(values, bucket):
    v = np.array(values, np.int64)
    b = bucketed(v, bucket)
    assert ((b == 0) == (v == 0)).all()
    nz = v > 0
    assert (np.abs(b[nz] / v[nz] - 1) <= bucket * 1.0001 + 1 / v[nz]).all()
    assert (bucketed(b, bucket) == b).all()  # a bucketed value stays


def test_cli(tmp_path, capsys):
    key = tmp_path / "key"
    key.write_text("a key of 16 bytes or more\n")
    rc = main(
        ["obfuscate", str(CORPUS / "ddp"), "-o", str(tmp_path / "o" / "job"), "--secret-file", str(key), "--json"]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["leaks"]["clean"] and d["secret"] == "file" and d["files"] == 2
    assert [s["system"] for s in d["simulated"]] == ["recorded", "switch"]
    assert all(s["change"] == 0 for s in d["simulated"])  # level b on the corpus DDP job: exact
    assert Workload.open(str(tmp_path / "o" / "job")).ranks == [0, 1]
