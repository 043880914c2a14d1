"""Linking host ops to Kineto events by every method, and conversions that never lose work.

Pairs: the shared pytorch-cpu pairs (rf_id), param's linear pair (schema 1.0.1, no
"Record function id": External ids only partly agree, the order aligns), tests/data/shifted
(tests/workloads/shifted_window.py: a host trace of steps 2-3 against a Kineto window of
steps 6-7, recorded; and the mlp Kineto trace with External id = host node id + 1,
synthesized), and pairs that are not of one job (mlp host + transformer Kineto; param's
resnet host trace + its Kineto trace of another run).
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.convert.align import align
from chakra_trace.convert.linking import dominant_offset, link_host
from chakra_trace.convert.pytorch import MIN_SIMILARITY, convert_pytorch
from chakra_trace.errors import UnrelatedTracesError
from chakra_trace.io.kineto import read_kineto
from chakra_trace.io.pytorch_host import read_host_trace
from chakra_trace.schema.enums import NodeType
from conftest import sample

DATA = Path(__file__).parent / "data"
K = DATA / "kineto"
S = DATA / "shifted"

PAIRS = {
    "mlp": (DATA / "mlp_rank0.et.json.gz", K / "mlp_rank0.kineto.json.gz"),
    "transformer": (DATA / "transformer_rank0.et.json.gz", K / "transformer_rank0.kineto.json.gz"),
    "ddp0": (DATA / "ddp_rank0.et.json.gz", K / "ddp_rank0.kineto.json.gz"),
    "ddp1": (DATA / "ddp_rank1.et.json.gz", K / "ddp_rank1.kineto.json.gz"),
    "linear": (sample("linear_et.json.gz"), sample("kineto/linear_kineto_head.json.gz")),
    "shifted": (S / "shifted.et.json.gz", S / "shifted.kineto.json.gz"),
    "offset": (DATA / "mlp_rank0.et.json.gz", S / "offset.kineto.json.gz"),
}


def _link(name, **kw):
    et, kin = PAIRS[name]
    return link_host(read_host_trace(et), read_kineto(kin), **kw)


def _convert(et, kin=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_pytorch(et, kin, **kw)


# ---------------------------------------------------------------------- the alignment
def _lcs(a, b) -> int:
    d = np.zeros((len(a) + 1, len(b) + 1), int)
    for i in range(len(a)):
        for j in range(len(b)):
            d[i + 1, j + 1] = d[i, j] + 1 if a[i] == b[j] else max(d[i, j + 1], d[i + 1, j])
    return int(d[-1, -1])


def test_align_is_an_order_preserving_longest_common_subsequence():
    rng = np.random.default_rng(1)
    for _ in range(400):
        a = rng.integers(0, rng.integers(1, 5), rng.integers(0, 20))
        b = rng.integers(0, 4, rng.integers(0, 20))
        ia, ib, complete = align(a, b, max_d=10**6)
        assert complete and (a[ia] == b[ib]).all()
        assert (np.diff(ia) > 0).all() and (np.diff(ib) > 0).all()
        assert ia.size == _lcs(a.tolist(), b.tolist())


def test_align_gives_up_on_pieces_beyond_max_d_and_says_so():
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 50, 3000), rng.integers(0, 50, 3000)
    ia, ib, complete = align(a, b, max_d=20)
    assert not complete and (a[ia] == b[ib]).all()


def test_align_handles_long_sequences_with_differences_spread_over_them():
    # 150k ops, one extra op every 20 on one side: 7,500 differences, more than one exact
    # edit script searches; the chunked fallback still pairs every op it can, in order
    rng = np.random.default_rng(3)
    a = rng.integers(0, 40, 150_000)
    b = np.insert(a, np.arange(0, a.size, 20), 99)
    ia, ib, complete = align(a, b)
    assert not complete and (a[ia] == b[ib]).all() and (np.diff(ia) > 0).all() and (np.diff(ib) > 0).all()
    assert ia.size >= 0.98 * a.size


def test_dominant_offset_votes_among_name_equal_pairs():
    host = np.arange(100, 200)
    names = np.arange(100) % 7
    kin = np.r_[host + 5, [1, 2, 3]]
    kin_names = np.r_[names, [0, 1, 2]]
    assert dominant_offset(host, kin, names, kin_names)[0] == 5


# ---------------------------------------------------------------------- methods on real pairs
@pytest.mark.parametrize("name", ["mlp", "transformer", "ddp0", "ddp1"])
def test_rf_id_links_every_op_of_our_pairs(name):
    c = _link(name).counts
    assert c["methods"]["rf_id"] == c["host_ops"] and c["linked_fraction"] == 1.0 and c["similarity"] == 1.0


@pytest.mark.parametrize("name", ["mlp", "transformer", "ddp0", "linear"])
def test_alignment_alone_links_real_pairs(name):
    c = _link(name, methods=("align",)).counts
    assert c["methods"]["align"] >= 0.85 * c["host_ops"], c


def test_linear_pair_links_by_external_id_and_by_order():
    ext = _link("linear", methods=("external_id",)).counts
    assert 100 <= ext["methods"]["external_id"] < 0.5 * ext["host_ops"]  # ids agree for part of the ops only
    full = _link("linear").counts
    assert full["linked_fraction"] > 0.85 and full["similarity"] >= MIN_SIMILARITY
    assert sum(full["methods"].values()) == round(full["linked_fraction"] * full["host_ops"])


def test_the_full_linear_kineto_trace_aligns_every_op_to_one_iteration():
    shared = Path(__file__).resolve().parents[2] / "shared" / "traces" / "param" / "linear_kineto.json.gz"
    if not shared.exists():
        pytest.skip("param's full linear Kineto trace is not here")
    lk = link_host(read_host_trace(sample("linear_et.json.gz")), read_kineto(shared))
    assert lk.counts["linked_fraction"] >= 0.99 and lk.counts["align"]["iterations"] == [[0, 1]]


def test_constant_external_id_offset_is_found():
    c = _link("offset").counts
    assert c["offset"] == 1 and c["methods"]["external_id_offset"] == c["host_ops"]


def test_shifted_window_pair_aligns_and_keeps_its_collectives():
    et, kin = PAIRS["shifted"]
    lk = _link("shifted")
    c = lk.counts
    assert c["methods"]["rf_id"] == 0 and c["methods"]["external_id"] == 0
    assert c["methods"]["align"] >= 0.9 * c["host_ops"] and c["linked_fraction"] >= 0.9
    trace, rep = _convert(et, kin)
    _, host_only = _convert(et)
    assert Counter(t for t, _ in rep.collectives) == Counter(t for t, _ in host_only.collectives)
    assert rep.collectives and (trace.types == NodeType.COMM_COLL_NODE).sum() == len(host_only.collectives)


# ---------------------------------------------------------------------- never lose work
@pytest.mark.parametrize("name", ["ddp0", "ddp1", "shifted", "linear", "mlp"])
def test_collectives_with_kineto_equal_those_of_the_host_trace_alone(name):
    et, kin = PAIRS[name]
    _, with_k = _convert(et, kin)
    _, alone = _convert(et)
    assert sorted(with_k.collectives) == sorted(alone.collectives)


def test_unlinked_host_ops_are_kept_with_estimated_durations():
    et, kin = PAIRS["linear"]
    trace, rep = _convert(et, kin)
    est, present = trace.attr_array("duration_estimated")
    assert rep.linked["estimated"] > 0 and present.sum() > 0 and all(est[present])
    assert any("kept with estimated durations" in w for w in rep.warnings)
    # a pair missing nothing has no estimated node
    trace, rep = _convert(*PAIRS["mlp"])
    assert not trace.attr_array("duration_estimated")[1].any() and rep.linked.get("estimated", 0) == 0


def test_no_dependency_makes_the_converted_trace_slower_than_the_recording():
    for name in ("linear", "shifted"):
        trace, rep = _convert(*PAIRS[name])
        src, dep, _ = trace.dep_rows()
        ok = dep >= 0
        end = trace.start + trace.duration
        assert (end[dep[ok]] <= trace.start[src[ok]]).all(), name


# ---------------------------------------------------------------------- not one job
def test_a_pair_of_two_jobs_fails_with_how_to_convert_without_kineto():
    with pytest.raises(UnrelatedTracesError, match="not of the same job.*convert the host trace alone"):
        _convert(DATA / "mlp_rank0.et.json.gz", K / "transformer_rank0.kineto.json.gz")
    with pytest.raises(UnrelatedTracesError):
        _convert(sample("resnet_et.json.gz"), sample("kineto/resnet_kineto_head.json.gz"))
    trace, rep = _convert(DATA / "mlp_rank0.et.json.gz", K / "transformer_rank0.kineto.json.gz", min_similarity=None)
    assert rep.linked["similarity"] < MIN_SIMILARITY and len(trace) > 0


def test_cli_prints_linking_per_rank_and_exits_2_on_two_jobs(tmp_path, capsys):
    import json

    from chakra_trace.cli import main

    et, kin = PAIRS["shifted"]
    assert main(["convert", "pytorch", str(et), str(kin), "-o", str(tmp_path / "s"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["0"]
    assert out["link"]["by"].startswith("align") and out["link"]["linked_fraction"] >= 0.9
    assert out["collectives_by_type"] == {"ALL_REDUCE": 2}
    assert main(["convert", "pytorch", str(et), str(kin), "-o", str(tmp_path / "s")]) == 0
    text = capsys.readouterr().out
    assert "linked 99.3% (align 99.3%)" in text and "collectives 2: ALL_REDUCE 2" in text
    bad = [str(DATA / "mlp_rank0.et.json.gz"), str(K / "transformer_rank0.kineto.json.gz")]
    assert main(["convert", "pytorch", *bad, "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "chakra convert pytorch" in err[0]


# ---------------------------------------------------------------------- the corpus (tests/data/corpus, when present)
def _corpus_pairs():
    from chakra_trace.io.collect_folder import collection_files

    root = DATA / "corpus"
    out = []
    for job in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for r, (et, kin) in collection_files(job).items():
            if kin:
                out.append(pytest.param(Path(et), Path(kin), id=f"{job.name}-rank{r}"))
    return out or [pytest.param(None, None, marks=pytest.mark.skip(reason="no corpus in tests/data/corpus"))]


@pytest.mark.parametrize("et,kin", _corpus_pairs())
def test_corpus_pairs_link_fully_and_keep_every_collective(et, kin):
    trace, rep = _convert(et, kin)
    _, alone = _convert(et)
    assert rep.linked["linked_fraction"] == 1.0 and sorted(rep.collectives) == sorted(alone.collectives)
    p2p = [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE]
    assert np.isin(trace.types, p2p).sum() == np.isin(_convert(et)[0].types, p2p).sum()
    # and if no id agreed, the order alone would still link them
    by_order = link_host(read_host_trace(et), read_kineto(kin), methods=("align",)).counts
    assert by_order["linked_fraction"] >= 0.98
