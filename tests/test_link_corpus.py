"""Cross-rank checks on the corpus of issue 14 (tests/data/corpus, skipped where absent): every
multi-rank job validates, and the DLRM-like job's skewed rank is named by its all_to_allv splits."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from chakra_trace.analyze.collectives import imbalance
from chakra_trace.io.workload import Workload
from chakra_trace.validate import validate_workload

CORPUS = Path(__file__).parent / "data" / "corpus"
JOBS = (
    sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and len(list(p.glob("rank*.et.json*"))) > 1)
    if CORPUS.is_dir()
    else []
)


def _open(job: str, tmp_path: Path) -> Workload:
    folder = tmp_path / job
    shutil.copytree(CORPUS / job, folder, ignore=shutil.ignore_patterns(".chakra-cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Workload.open(folder)


@pytest.mark.skipif(not JOBS, reason="no corpus in tests/data/corpus")
@pytest.mark.parametrize("job", JOBS or ["none"])
def test_every_multi_rank_corpus_job_passes_the_cross_rank_checks(job, tmp_path):
    report = validate_workload(_open(job, tmp_path))
    assert not [i for i in report.issues if i.severity == "error"], report.issues


@pytest.mark.skipif("dlrm" not in JOBS, reason="no DLRM job in tests/data/corpus")
def test_dlrm_splits_come_from_the_c10d_arguments_and_name_the_skewed_rank(tmp_path):
    wl = _open("dlrm", tmp_path)
    for r, t in wl.traces.items():
        present = t.attr_array("in_split_size")[1] & t.attr_array("out_split_size")[1]
        assert present.sum() >= 2, r
    # rank 2 sends the others 8x their share, and receives more where every rank sends alike
    assert set(imbalance(wl).by_rank()) == {2}


def test_an_all_to_allv_may_move_different_bytes_per_rank_but_not_change_type():
    from chakra_trace.schema.builder import TraceBuilder

    def trace(kind: str, size: int, splits: list[int] | None):
        b = TraceBuilder()
        kw = {"in_split_size": str(splits), "out_split_size": str(splits)} if splits else {}
        b.collective(kind, size, **kw)
        return b.build()

    ok = Workload(traces={0: trace("ALL_TO_ALL", 4096, [1, 1]), 1: trace("ALL_TO_ALL", 32768, [8, 8])})
    assert validate_workload(ok).issues == []
    # not every backend records splits (an all_to_allv of tensor lists): an all-to-all may differ anyway
    plain = Workload(traces={0: trace("ALL_TO_ALL", 4096, None), 1: trace("ALL_TO_ALL", 32768, None)})
    assert validate_workload(plain).issues == []
    other = Workload(traces={0: trace("ALL_REDUCE", 4096, None), 1: trace("ALL_REDUCE", 32768, None)})
    assert [i.code for i in validate_workload(other).issues] == ["group-mismatch"]
    typed = Workload(traces={0: trace("ALL_TO_ALL", 4096, [1, 1]), 1: trace("ALL_REDUCE", 4096, None)})
    assert [i.code for i in validate_workload(typed).issues] == ["group-mismatch"]
