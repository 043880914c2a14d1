"""Analyses: intervals, per-rank breakdown, collective statistics and imbalance."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.analyze.breakdown import breakdown
from chakra_trace.analyze.collectives import collective_stats, imbalance
from chakra_trace.intervals import length, overlap, union
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from conftest import DATA

intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=12)


def _cover(iv) -> set[int]:
    return {t for s, d in iv for t in range(s, s + d)}


@given(intervals, intervals)
@settings(max_examples=300, deadline=None)
def test_union_and_overlap_against_unit_steps(a, b):
    ua = union(np.array([s for s, _ in a], np.int64), np.array([s + d for s, d in a], np.int64))
    ub = union(np.array([s for s, _ in b], np.int64), np.array([s + d for s, d in b], np.int64))
    assert length(ua) == len(_cover(a)) and length(ub) == len(_cover(b))
    assert overlap(ua, ub) == len(_cover(a) & _cover(b))


def _allreduces(sizes_by_rank: dict[int, list[int]]) -> Workload:
    traces = {}
    for r, sizes in sizes_by_rank.items():
        b = TraceBuilder()
        prev = b.comp("fwd", 10)
        for s in sizes:
            prev = b.collective("ALL_REDUCE", s, deps=[prev], duration=5)
        traces[r] = b.build()
    return Workload(traces)


def test_a_rank_sending_larger_messages_is_named():
    w = _allreduces({0: [1024, 4096, 64], 1: [1024, 4096, 64], 2: [1024, 8192, 64], 3: [1024, 4096, 64]})
    rep = imbalance(w)
    assert rep.checked == 3 and len(rep.imbalanced) == 1
    x = rep.imbalanced[0]
    assert (x.group, x.index, x.type, x.outliers) == ("", 1, "ALL_REDUCE", [2])
    assert x.bytes == {0: 4096, 1: 4096, 2: 8192, 3: 4096} and x.spread == 2.0
    assert rep.by_rank() == {2: 1}
    assert json.loads(json.dumps(rep.to_dict()))["imbalanced"][0]["outliers"] == [2]
    assert imbalance(w, tolerance=1.5).imbalanced == []  # within 150 % of the median: equal enough


def test_all_to_allv_skew_is_flagged_even_with_equal_totals():
    traces = {}
    for r, split in enumerate([[4, 4], [1, 7]]):
        b = TraceBuilder()
        b.collective("ALL_TO_ALL", 8 << 20, in_split_size=json.dumps(split))
        traces[r] = b.build()
    rep = imbalance(Workload(traces))
    assert [x.outliers for x in rep.imbalanced] == [[1]]
    assert rep.imbalanced[0].peer_bytes[1] == [1 << 20, 7 << 20]


def test_all_to_allv_hot_receiver_is_found_though_every_rank_sends_alike():
    """Every rank sends the same split list (equal totals, alike splits), but all send rank 3
    their largest part: rank 3 receives 10x the others. Judged by senders alone it looked balanced."""
    from chakra_trace.analyze.collectives import communication_matrix

    traces = {}
    for r in range(4):
        b = TraceBuilder()
        b.collective("ALL_TO_ALL", 13 << 20, in_split_size=json.dumps([1, 1, 1, 10]))
        traces[r] = b.build()
    w = Workload(traces)
    rep = imbalance(w)
    assert [x.outliers for x in rep.imbalanced] == [[3]]
    x = rep.imbalanced[0]
    assert x.received == {0: 4 << 20, 1: 4 << 20, 2: 4 << 20, 3: 40 << 20}
    assert set(x.bytes.values()) == {13 << 20}
    # the matrix agrees in both directions: rows are what each sends, columns what each receives
    m = communication_matrix(w).bytes
    assert m.sum(axis=1).tolist() == [12 << 20] * 3 + [3 << 20]  # (less what a rank sends itself)
    assert m.sum(axis=0).tolist() == [(4 - 1) << 20] * 3 + [(40 - 10) << 20]
    assert json.loads(json.dumps(rep.to_dict()))["imbalanced"][0]["received"]["3"] == 40 << 20


def test_stats_and_breakdown_of_the_converted_ddp_pair():
    from chakra_trace.convert.pytorch import convert_pytorch

    traces, spans = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in (0, 1):
            traces[r], rep = convert_pytorch(
                DATA / f"ddp_rank{r}.et.json.gz", DATA / "kineto" / f"ddp_rank{r}.kineto.json.gz"
            )
            spans[r] = rep.span_us
    w = Workload(traces)
    assert imbalance(w).imbalanced == [] and imbalance(w).checked == 8
    summary = collective_stats(w).summary()
    ar = [s for s in summary if s["type"] == "ALL_REDUCE"]
    assert [s["count"] for s in ar] == [6, 6] and all(s["bytes"] == 2 * (273448 + 66560 + 4) for s in ar)
    assert all(s["busbw_GBps"] == pytest.approx(s["algbw_GBps"]) for s in ar)  # 2(n-1)/n = 1 for 2 ranks
    rows = breakdown(w).rows
    for row in rows:
        assert abs(row["span_us"] - spans[row["rank"]]) <= 2
        assert (
            row["compute_us"] + row["comm_us"] - row["overlap_us"] + row["other_us"] + row["idle_us"] == row["span_us"]
        )
        assert row["exposed_comm_us"] == row["comm_us"] - row["overlap_us"] > 0


def test_cli_analyze(tmp_path, capsys):
    from chakra_trace.cli import main

    _allreduces({0: [64, 128], 1: [64, 256]}).save(tmp_path / "job")
    with pytest.raises(SystemExit) as e:  # 1: imbalance found
        main(["analyze", "imbalance", str(tmp_path / "job"), "--json"])
    assert e.value.code == 1
    out = json.loads(capsys.readouterr().out)
    assert out["imbalanced"][0]["index"] == 1 and out["outlier_ranks"]
    assert main(["analyze", "collectives", str(tmp_path / "job"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["instances"]) == 4
    assert main(["analyze", "breakdown", str(tmp_path / "job"), "--json"]) == 2  # built untimed: no recorded times
    assert "no recorded start times" in capsys.readouterr().err
    _allreduces({0: [64, 128], 1: [64, 128]}).save(tmp_path / "even")  # "job" differs across ranks: not simulated
    assert main(["analyze", "breakdown", str(tmp_path / "even"), "--simulate", "ring-8", "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["ranks"]  # 2 ranks scaled out to the preset's 8 NPUs
    assert len(ranks) == 8 and all(r["span_us"] > 0 for r in ranks)


def test_communication_matrix_from_rings_all_to_allv_and_sends():
    from chakra_trace.analyze.collectives import communication_matrix

    traces = {}
    for r in range(4):
        b = TraceBuilder()
        b.collective("ALL_REDUCE", 1000)
        if r < 2:  # an all_to_allv on the group [0, 1]: rank 0 sends 3/4 of its 400 bytes to rank 1
            b.collective("ALL_TO_ALL", 400, pg_name="pair", in_split_size=json.dumps([1, 3] if r == 0 else [2, 2]))
        if r == 3:
            b.send(0, 50)
        traces[r] = b.build()
    m = communication_matrix(Workload(traces, {"pair": [0, 1]})).bytes
    ring = 2 * 3 / 4 * 1000
    assert m[0, 1] == ring + 300 and m[1, 0] == 200 and m[1, 2] == ring and m[2, 3] == ring
    assert m[3, 0] == ring + 50 and m[0, 2] == 0
