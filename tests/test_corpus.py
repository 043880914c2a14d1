"""The corpus of real parallel training jobs (tests/data/corpus/, made by
benchmarks/corpus/regenerate.py on CPU/gloo): every job converts to what index.json says, its
ranks agree, its breakdown adds up, and the `recorded` system reproduces its recorded step.
The traces are checked in, so nothing here needs torch or transformers."""

from __future__ import annotations

import gzip
import importlib.util
import json
import warnings
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.breakdown import breakdown
from chakra_trace.analyze.collectives import communication_matrix, imbalance
from chakra_trace.analyze.critical_path import job_critical_path
from chakra_trace.convert.pytorch import read_collection
from chakra_trace.io.workload import Workload
from chakra_trace.schema.enums import CollectiveType, NodeType, collective_name
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.validate import validate_workload
from test_consistency import assert_adds_up

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "data" / "corpus"
INDEX = json.loads((CORPUS / "index.json").read_text())
JOBS = [j["name"] for j in INDEX["jobs"]]
MULTI = [j["name"] for j in INDEX["jobs"] if j["ranks"] > 1]
#: cross-rank validation fails on these (a converter finding, see the reason): strict, so a fix shows
VALIDATE_XFAIL: dict[str, str] = {}


#: the `recorded` system does not reproduce these jobs' recorded step (findings, see the reasons)
RECORDED_XFAIL: dict[str, str] = {}


def _marked(names: list[str], xfail: dict[str, str]) -> list:
    """`names` as parameters, those in `xfail` expected to fail (strictly: a fix shows as XPASS)."""
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=xfail[n])) if n in xfail else n for n in names]


@cache
def _script(path: str):
    """A benchmarks/ script as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _regenerate():
    return _script("benchmarks/corpus/regenerate.py")


def test_readme_table_has_a_row_per_job():
    text = _script("benchmarks/readme_tables.py").corpus_table(INDEX)
    assert [line.split(" | ")[0] for line in text.splitlines()[2:]] == [f"| `{j}`" for j in JOBS]


@cache
def workload(name: str) -> Workload:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_collection(CORPUS / name)


@cache
def recorded(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_on(workload(name), "recorded")


def _collectives(t) -> Counter:
    rows = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    return Counter(collective_name(int(t.comm_type[i])) for i in rows)


def test_index_lists_every_job_of_the_regenerate_script():
    assert JOBS == list(_regenerate().JOBS)
    assert all((CORPUS / j / "manifest.json").is_file() for j in JOBS)
    sizes = [j["trace_bytes"] for j in INDEX["jobs"]]  # small enough to check in
    assert max(sizes) < 1.5e6 and sum(sizes) < 8e6, sizes


@pytest.mark.parametrize("name", JOBS)
def test_index_entry_is_what_the_traces_give(name):
    """index.json is recomputed from the checked-in files (what `regenerate.py --check` does)."""
    want = next(j for j in INDEX["jobs"] if j["name"] == name)
    assert _regenerate().entry(name) == want
    w = workload(name)
    assert sorted(w.ranks) == list(range(want["ranks"]))
    assert {str(r): len(t) for r, t in w.traces.items()} == want["nodes"]
    total = sum((_collectives(t) for t in w.traces.values()), Counter())
    assert dict(total) == want["collectives"]
    assert want["step_ms"] > 0 and want["recorded_span_ms"] > want["step_ms"]  # two recorded steps
    text = json.dumps(want)
    assert "/work" not in text and "/home" not in text  # machine-independent


@pytest.mark.parametrize("name", _marked(MULTI, VALIDATE_XFAIL))
def test_every_multi_rank_job_communicates_and_its_ranks_agree(name):
    w = workload(name)
    rep = validate_workload(w)
    assert rep.ok, [i.message for i in rep.issues]
    counts = [_collectives(t) for t in w.traces.values()]
    p2p = [int(np.isin(t.types, [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE]).sum()) for t in w.traces.values()]
    assert sum(counts, Counter()) or sum(p2p)
    assert all(c == counts[0] for c in counts)


@pytest.mark.parametrize("name", JOBS)
def test_recorded_breakdown_adds_up(name):
    rows = breakdown(workload(name)).rows
    assert len(rows) == len(workload(name))
    assert_adds_up(rows)
    assert all(r["compute_us"] > 0 for r in rows)


@pytest.mark.parametrize("name", _marked(JOBS, RECORDED_XFAIL))
def test_recorded_system_reproduces_the_recorded_step(name):
    step = job_critical_path(workload(name)).step_ns
    assert step == pytest.approx(next(j for j in INDEX["jobs"] if j["name"] == name)["recorded_span_ms"] * 1e6, abs=1e3)
    assert abs(recorded(name).step_ns / step - 1) <= 0.01, (recorded(name).step_ns, step)


def test_pipeline_job_sends_activations_and_receives_gradients_per_micro_batch():
    w = workload("pp")
    for t in w.traces.values():  # 4 micro-batches x 2 recorded steps, one message each way
        assert int((t.types == NodeType.COMM_SEND_NODE).sum()) == 8
        assert int((t.types == NodeType.COMM_RECV_NODE).sum()) == 8


def test_dlrm_imbalance_names_rank_2():
    rep = imbalance(workload("dlrm"))
    assert rep.imbalanced and set(rep.by_rank()) == {2}
    for x in rep.imbalanced:
        assert x.type == "ALL_TO_ALL" and x.outliers == [2]


def _alltoall_splits(rank: int) -> list[tuple[list[int], list[int]]]:
    """(input_split_sizes, output_split_sizes) of every c10d::alltoall_base_ in a rank's host trace."""
    with gzip.open(CORPUS / "dlrm" / f"rank{rank}.et.json.gz", "rt") as f:
        nodes = json.load(f)["nodes"]
    calls = sorted((n["id"], n["inputs"]["values"]) for n in nodes if n["name"] == "c10d::alltoall_base_")
    return [(v[4], v[3]) for _, v in calls]  # (tensors, group, output splits, input splits, ...)


def test_dlrm_job_skews_only_the_receiving_side_of_its_forward_all_to_all():
    """What the job recorded (the host traces' own arguments, no conversion): in every forward
    all-to-all each rank sends the same split list, rank 2's split 8x the others, so each rank
    sends alike and rank 2 receives 8x more; the backward exchange reverses it."""
    per_rank = {r: _alltoall_splits(r) for r in range(4)}
    assert all(len(c) == 4 for c in per_rank.values())  # forward + backward, 2 recorded steps
    for k in (0, 2):  # forward
        sent = [per_rank[r][k][0] for r in range(4)]
        assert all(s == [16, 16, 128, 16] for s in sent)
        received = {r: sum(per_rank[r][k][1]) for r in range(4)}
        assert received == {0: 64, 1: 64, 2: 512, 3: 64}
    for k in (1, 3):  # backward: rank 2 sends 8x more
        assert [sum(per_rank[r][k][0]) for r in range(4)] == [64, 64, 512, 64]


def test_dlrm_hot_receiver_is_named_where_every_rank_sends_alike():
    """The forward all-to-all: every rank sends the same split list and the same bytes, rank 2
    receives 8x more than the others. Only the receiving side shows it."""
    w = workload("dlrm")
    rep = imbalance(w)
    forward = [x for x in rep.imbalanced if len(set(x.bytes.values())) == 1]
    assert len(forward) == 2  # one per recorded step
    for x in forward:
        assert x.outliers == [2] and x.received is not None
        assert x.received[2] == 8 * x.received[0]


def test_dlrm_communication_matrix_agrees_with_the_recorded_splits_both_ways():
    """The all-to-all part of the communication matrix is what the host traces' split arguments
    say each rank sent each peer (rows) and so what each received (columns)."""
    w = workload("dlrm")
    ranks = w.ranks
    only_a2a = {}
    for r, t in w.traces.items():  # the other collectives as barriers: they move no bytes
        t = t.copy()
        coll = (t.types == NodeType.COMM_COLL_NODE) & (t.comm_type != CollectiveType.ALL_TO_ALL)
        t.comm_type[coll] = CollectiveType.BARRIER
        only_a2a[r] = t
    m = communication_matrix(Workload(only_a2a, w.groups)).bytes
    row_bytes = 16 * 4  # float32 rows of 16
    want = np.zeros((4, 4))
    for r in ranks:
        for sent, _received in _alltoall_splits(r):
            for peer, rows in enumerate(sent):
                if peer != r:
                    want[r, peer] += rows * row_bytes
    np.testing.assert_allclose(m, want)
    got_in = {r: sum(sum(rec) for _s, rec in _alltoall_splits(r)) * row_bytes for r in ranks}
    self_rows = {r: sum(s[r] for s, _rec in _alltoall_splits(r)) * row_bytes for r in ranks}
    assert {r: float(m[:, r].sum()) for r in ranks} == {r: float(got_in[r] - self_rows[r]) for r in ranks}
