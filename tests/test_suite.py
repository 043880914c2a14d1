"""The benchmark suite: the bundled manifest, its hashes, a run that `suite check` verifies and a
tampered one it catches, the score's invariants, contributing a trace, and the leaderboard."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.suite import (
    SuiteError,
    add_trace,
    check_result,
    content_sha256,
    leaderboard,
    load_suite,
    run_suite,
    write_leaderboard,
)
from chakra_trace.suite.manifest import BUNDLED, MANIFEST
from chakra_trace.suite.score import division_score, geomean

CORPUS = Path(__file__).parent / "data" / "corpus"
SMALL = ["ddp", "contrib-dlrm", "gpt3-1.3b-8"]  # recorded, contributed (obfuscated), captured


def test_bundled_suite_covers_the_mission():
    s = load_suite()
    assert (s.name, s.version) == ("chakra-suite", "0.1") and len(s.workloads) >= 12
    kinds = {e.kind for e in s.workloads}
    assert kinds == {"pre-execution", "post-execution"}
    npus = [e.npus for e in s.workloads if e.kind == "pre-execution"]
    assert min(npus) == 8 and max(npus) == 16384
    models = {(e.recipe or {}).get("model") for e in s.workloads}
    configs = [json.dumps((e.recipe or {}).get("config")) for e in s.workloads]
    assert "vit" in models and any("mixtral" in c for c in configs)  # a vision model, a mixture of experts
    assert any("all-to-all" in e.description for e in s.workloads if e.kind == "post-execution")  # recsys
    assert any((e.provenance.get("obfuscation") or {}).get("level") for e in s.workloads)


def test_post_execution_traces_hash_to_the_manifest():
    s = load_suite()
    for e in s.workloads:
        if e.path is not None:
            assert content_sha256(s.resolve(e)) == e.sha256, e.name


@pytest.mark.parametrize(
    "change, message",
    [
        ({"recipe": {"model": "/tmp/evil.py", "batch": 1, "seq": 8}}, "names no code"),
        ({"recipe": {"model": "gpt", "batch": 1, "seq": 8, "optimizer": "x:y"}}, "optimizer"),
        ({"path": "../../../../etc"}, "leaves the suite"),
        ({"path": "/etc/passwd"}, "relative path"),
        ({"path": "traces/.hidden"}, "hidden"),
        ({"surprise": 1}, "unknown keys"),
        ({"sha256": "abc"}, "64 lowercase hex"),
        ({"recipe": {"model": "gpt", "batch": 1, "seq": 8, "plan": {"tp": 0}}}, "plan"),
    ],
)
def test_a_manifest_is_data(tmp_path, change, message):
    """A suite from someone else names no code, no file outside its folder, nothing unchecked."""
    good = {"name": "w", "kind": "post-execution", "npus": 2, "sha256": "0" * 64, "path": "traces/w"}
    entry = {**good, **change}
    if "recipe" in change:
        entry.pop("path")
        entry["kind"] = "pre-execution"
    (tmp_path / "traces" / "w").mkdir(parents=True)
    (tmp_path / "traces" / ".hidden").mkdir()
    doc = {"schema": "chakra-suite/1", "name": "x", "version": "1", "reference_system": {"system": "selene"}}
    (tmp_path / MANIFEST).write_text(json.dumps({**doc, "workloads": [entry]}))
    with pytest.raises(SuiteError, match=message):
        s = load_suite(tmp_path)
        s.resolve(s.workloads[0])


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("suite") / "dgx-h100"
    res = run_suite("dgx-h100", out, only=SMALL, workers=1)
    return res, out


def test_run_measures_and_check_passes(small_run):
    res, out = small_run
    d = json.loads((out / "result.json").read_text())
    assert [w["name"] for w in d["workloads"]] == SMALL
    assert d["system"]["name"] == "dgx-h100" and d["reference_system"]["name"] == "selene"
    assert d["suite_sha256"] == load_suite().sha256 and d["versions"]["chakra-trace"]
    for w in d["workloads"]:
        assert w["valid"], w["why"]
        assert math.isclose(w["step_s"] * w["steps"], w["raw"]["recording_ns"] / 1e9)
        assert math.isclose(w["speedup"], w["reference_step_s"] / w["step_s"])
    captured = d["workloads"][2]
    assert captured["speedup"] > 1  # an H100 cluster outruns an A100 one on a captured LLM
    assert math.isclose(captured["per_token_s"] * 16 * 8 * 2048, captured["step_s"])
    assert d["score"]["score"] is None and set(d["score"]["missing"]) == set(load_suite().names) - set(SMALL)
    assert check_result(out, workers=1).ok


def test_check_catches_every_kind_of_tampering(small_run, tmp_path):
    _, out = small_run
    good = json.loads((out / "result.json").read_text())

    def tampered(edit) -> list[str]:
        d = json.loads(json.dumps(good))
        edit(d)
        folder = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "result.json").write_text(json.dumps(d))
        return check_result(folder, workers=1).problems

    def step(d):
        d["workloads"][0]["step_s"] *= 1.01

    def raw(d):
        d["workloads"][1]["raw"]["energy_j"] *= 0.5

    def speed(d):
        d["workloads"][2]["speedup"] = 3.0

    def score(d):
        d["score"]["partial_score"] = 9.9

    def inputs(d):
        d["workloads"][0]["input_sha256"] = "f" * 64

    def system(d):
        d["system"]["params"] = {"system": "dgx-b200"}

    for edit, where in (
        (step, "'ddp'"),
        (raw, "'contrib-dlrm'"),
        (speed, "'gpt3-1.3b-8'"),
        (score, "score"),
        (inputs, "'ddp'"),
    ):
        problems = tampered(edit)
        assert problems and all(where in p for p in problems), (edit.__name__, problems)
    assert any("step_s" in p for p in tampered(system))  # another system's numbers are not this result's


def test_check_catches_a_changed_input(tmp_path, small_run):
    _, out = small_run
    suite = tmp_path / "suite"
    shutil.copytree(BUNDLED, suite)
    s = load_suite(suite)
    f = sorted((suite / s.entry("contrib-dlrm").path).iterdir())[0]
    f.write_bytes(f.read_bytes() + b"\0")
    rep = check_result(out, suite=suite, workers=1)
    assert any("contrib-dlrm" in p and "not the suite's" in p for p in rep.problems), rep.problems


def test_open_division_declares_its_changes(tmp_path):
    with pytest.raises(SuiteError, match="closed division"):
        run_suite("dgx-h100", only=["ddp"], changes=["ddp:speedup=2"], workers=1)
    closed = run_suite("ideal", only=["ddp"], workers=1)
    opened = run_suite("ideal", tmp_path / "open", only=["ddp"], division="open", changes=["ddp:speedup=2"], workers=1)
    assert opened.changes == [{"workload": "ddp", "key": "speedup", "value": 2}]
    assert opened.workloads[0]["step_s"] < closed.workloads[0]["step_s"]  # faster compute is never slower
    assert check_result(tmp_path / "open", workers=1).ok


def test_the_reference_scores_one():
    res = run_suite("selene", only=["ddp", "contrib-dlrm"], workers=1)
    assert [w["speedup"] for w in res.workloads] == [1.0, 1.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 100), st.floats(0.01, 100), st.floats(0.01, 100)), min_size=1, max_size=12))
def test_geomean_ranks_systems_alike_whatever_the_reference(triples):
    """Two systems' score ratio does not depend on the reference system (why the geometric mean)."""
    a = [r / x for x, _, r in triples]
    b = [r / y for _, y, r in triples]
    direct = geomean([y / x for x, y, _ in triples])
    assert math.isclose(geomean(a) / geomean(b), direct, rel_tol=1e-9)


def test_a_score_needs_every_workload():
    d = division_score([2.0, None, 8.0], ["a", "b", "c"])
    assert d["score"] is None and d["missing"] == ["b"] and math.isclose(d["partial_score"], 4.0)
    assert math.isclose(division_score([2.0, 8.0], ["a", "c"])["score"], 4.0)


def test_add_validates_obfuscates_scans_and_registers(tmp_path):
    suite = tmp_path / "mine"
    e = add_trace(
        CORPUS / "pp", "pp-job", suite, obfuscate_level="b", secret="suite-test-secret-0123456789abcdef", steps=2
    )
    s = load_suite(suite)
    assert s.names == ["pp-job"] and s.entry("pp-job") == e
    assert content_sha256(s.resolve(e)) == e.sha256
    assert e.provenance["leak_scan"]["clean"] and e.provenance["obfuscation"]["level"] == "b"
    with pytest.raises(SuiteError, match="registered already"):
        add_trace(CORPUS / "pp", "pp-job", suite)
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copytree(CORPUS / "ddp", bad, dirs_exist_ok=True)
    for name in ("rank1.et.json.gz", "rank1.kineto.json.gz"):  # rank 1 of another job: collectives that disagree
        shutil.copy(CORPUS / "fsdp" / name, bad / name)
    with pytest.raises(SuiteError, match="does not validate"):
        add_trace(bad, "broken", suite)
    assert load_suite(suite).names == ["pp-job"] and not (suite / "traces" / "broken").exists()
    res = run_suite("ideal", tmp_path / "res", suite=suite, workers=1)
    assert res.score["score"] is not None and check_result(tmp_path / "res", suite=suite, workers=1).ok


def test_leaderboard_renders_in_headless_chromium(small_run, tmp_path):
    from browser import Browser, require_chromium

    _, out = small_run
    other = run_suite("dgx-b200", tmp_path / "b200", only=SMALL, workers=1)
    doc = leaderboard([out, tmp_path / "b200"])
    assert [s["id"] for s in doc["sections"]] == ["closed-division", "results"]
    require_chromium()
    page_path = write_leaderboard([out, tmp_path / "b200"], tmp_path / "board.html")
    with Browser() as b:
        page = b.open(page_path)
        assert page.errors == []
        assert page.evaluate("document.querySelectorAll('.block-error').length") == 0
        text = page.evaluate("document.body.innerText")
        assert "dgx-h100" in text and "dgx-b200" in text and "geomean" in text
        assert page.evaluate("document.querySelectorAll('table').length") >= 3
        artifacts = Path(__file__).resolve().parents[1] / "out" / "test-artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        page.screenshot(artifacts / "suite_leaderboard.png")
    assert other.workloads[2]["speedup"] > 1


def test_add_counts_the_npus_a_rank_of_a_bigger_job_runs_on(tmp_path):
    """One rank of a multi-rank NCCL job (a public trace): the suite entry names the NPUs its
    groups span, so a closed run on a real-machine preset is valid."""
    from chakra_trace.cli import main
    from conftest import SHARED

    src = SHARED / "gpu-wild" / "hta_nccl_parser.json.gz"
    if not src.exists():
        pytest.skip(f"{src} is absent")
    assert main(["convert", "kineto", str(src), "-o", str(tmp_path / "job" / "job")]) in (0, None)
    e = add_trace(tmp_path / "job", "nccl", tmp_path / "suite")
    res = run_suite("dgx-h100", suite=tmp_path / "suite", workers=1)
    assert e.npus > 1 and res.workloads[0]["valid"], res.workloads[0]["why"]


@pytest.mark.slow
def test_every_recipe_captures_its_pinned_master_trace(tmp_path, monkeypatch):
    """The pre-execution traces are reproducible: each recipe, captured afresh, hashes to the manifest."""
    pytest.importorskip("torch")
    from chakra_trace.suite.inputs import materialize

    monkeypatch.setenv("CHAKRA_SUITE_CACHE", str(tmp_path))
    s = load_suite()
    for e in s.workloads:
        if e.recipe is not None:
            materialize(s, e)  # raises SuiteError on a mismatch
