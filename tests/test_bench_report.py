"""`chakra bench report`: the report's figures agree with the measurements and the run comparison,
energy and scaling are shown only where measured, different systems are flagged, and the HTML page
(a document of the one report renderer) holds the same facts and renders offline in headless Chromium."""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from browser import Browser, require_chromium
from chakra_trace.cli import main
from chakra_trace.replay.bench_report import bench_report
from chakra_trace.replay.bench_report_html import document
from chakra_trace.replay.bench_report_text import sections
from chakra_trace.replay.comparison import compare_runs
from chakra_trace.replay.measure import Measurement, format_time, load_measurements

DATA = Path(__file__).parent / "data" / "bench"
NEW, OLD = DATA / "mlp_threads2.json", DATA / "mlp_threads1.json"  # real `chakra replay --runs 3` results
ARTIFACTS = Path(__file__).resolve().parent.parent / "out" / "test-artifacts"
ENV = {"cpu_model": "Test CPU", "logical_cpus": 8, "machine": "x86_64", "hostname": "h", "python": "3.11", "torch": "2"}


def _m(name: str, center: float, *, runs: int = 3, n: int = 12, env: dict | None = None, **extra) -> Measurement:
    """Deterministic samples around `center`, `runs` runs of `n` each."""
    rng = np.random.default_rng(zlib.crc32(f"{name} {center}".encode()))  # deterministic across processes
    samples = (center * (1 + 0.01 * rng.standard_normal(runs * n))).tolist()
    return Measurement(
        name, samples, 2, "converged", dict(env or ENV), dict(extra), runs=[i // n for i in range(runs * n)]
    )


def test_real_replays_report_what_the_measurements_say():
    rep = bench_report([NEW], [OLD], generated="t")
    d = rep.to_dict()
    json.dumps(d, allow_nan=False)  # plain data
    new, old = load_measurements(NEW)["step"], load_measurements(OLD)["step"]
    (res,), (base,) = d["results"], d["baselines"]
    assert res["stats"]["median"] == pytest.approx(new.median) and base["stats"]["n"] == old.n
    lo, hi = res["stats"]["ci95_median"]
    assert lo <= res["stats"]["median"] <= hi
    assert res["stats"]["runs"] == 3 and res["division"] == "closed" and res["warmup"] == new.warmup
    assert res["stats"]["iqr"] == pytest.approx(np.subtract(*np.percentile(new.samples, [75, 25])))
    assert [new.samples[i] for i in new.outliers] == res["stats"]["outlier_values"]
    (c,) = d["comparisons"]
    ref = compare_runs(old, new, name=res["label"])
    assert c["comparison"]["p_value"] == pytest.approx(ref.p_value) and c["comparison"]["status"] == ref.status
    assert c["speedup"] == pytest.approx(1 / ref.ratio)
    assert c["speedup_ci"][0] <= c["speedup"] <= c["speedup_ci"][1]
    assert any("torch_threads" in f for f in d["flags"])  # 2 threads vs 1: a configuration difference
    assert not any("different systems" in f for f in d["flags"])
    md = rep.to_markdown()
    assert "not measured (no counters)" in md and " 0 J" not in md and "0 W" not in md
    assert "recorded steps [2, 3]" in md and "seconds per recorded step" in md
    assert ("not significant" in md) == (ref.status == "no_significant_difference")


def test_energy_median_ci_and_power_when_present(tmp_path):
    m = _m("gemm", 1e-3, runs=1, n=20, energy_source="rapl")
    m.extra["energy_j"] = [0.05 + 0.001 * i for i in range(20)]  # J per sample
    d = bench_report_of(tmp_path, [m])
    en = d["results"][0]["energy"]
    assert en["source"] == "rapl" and en["median"] == pytest.approx(np.median(m.extra["energy_j"]))
    assert en == {**m.energy_stats(), "power_w": pytest.approx(sum(m.extra["energy_j"]) / sum(m.samples))}
    lo, hi = en["ci95_median"]
    assert lo <= en["median"] <= hi


def bench_report_of(
    tmp: Path, results: list[Measurement], baseline: tuple[Measurement, ...] | list[Measurement] = (), **kw
) -> dict:
    """The report's data for measurements saved one per file (each file: one benchmark's runs)."""
    paths = []
    for role, ms in (("r", results), ("b", baseline)):
        for i, m in enumerate(ms):
            m.save(tmp / f"{role}{i}.json")
            paths.append(tmp / f"{role}{i}.json")
    return bench_report(paths[: len(results)], paths[len(results) :] or None, generated="t", **kw).to_dict()


def test_significant_difference_and_speedup_ci(tmp_path):
    d = bench_report_of(tmp_path, [_m("op", 0.8e-3)], [_m("op", 1e-3)])
    (c,) = d["comparisons"]
    assert c["comparison"]["status"] == "faster" and c["speedup"] == pytest.approx(1.25, rel=0.02)
    assert 1 < c["speedup_ci"][0] <= c["speedup"] <= c["speedup_ci"][1]


def test_too_few_runs_is_not_enough_evidence(tmp_path):
    d = bench_report_of(tmp_path, [_m("op", 0.5e-3, runs=1)], [_m("op", 1e-3, runs=1)])
    (c,) = d["comparisons"]
    assert c["comparison"]["status"] == "not_enough_evidence" and c["speedup_ci"] is None
    assert c["comparison"]["significant"] is False


def test_different_systems_are_flagged_not_comparable(tmp_path):
    other = {**ENV, "cpu_model": "Other CPU"}
    d = bench_report_of(tmp_path, [_m("op", 1e-3, env=other)], [_m("op", 1e-3)])
    assert len(d["systems"]) == 2
    assert any("different systems" in f and "cpu_model" in f and "not comparable" in f for f in d["flags"])


def test_scaling_weak_and_strong(tmp_path):
    ms = [_m("allreduce", t, ranks=r) for r, t in ((1, 1e-3), (2, 1.25e-3), (4, 2e-3))]
    (weak,) = bench_report_of(tmp_path, ms)["scaling"]
    (strong,) = bench_report_of(tmp_path, ms, scaling="strong")["scaling"]
    assert [r["scale"] for r in weak["rows"]] == [1, 2, 4]
    assert [r["efficiency"] for r in weak["rows"]] == pytest.approx([1, 0.8, 0.5], rel=0.02)
    assert [r["efficiency"] for r in strong["rows"]] == pytest.approx([1, 0.4, 0.125], rel=0.02)


def test_open_division_for_a_transformed_replay(tmp_path):
    obj = json.loads(NEW.read_text())
    obj["recorded_basis"] = "sum of the recorded durations of the ops selected by 'aten::addmm', per step (Kineto)"
    p = tmp_path / "sel.json"
    p.write_text(json.dumps(obj))
    (e,) = bench_report([p], generated="t").to_dict()["results"]
    assert e["division"] == "open" and "--select" in e["division_note"]


def test_cli_report_writes_markdown_and_html(tmp_path, capsys):
    for name in ("r.md", "r.html"):
        out = tmp_path / name
        assert main(["bench", "report", str(NEW), "--baseline", str(OLD), "-o", str(out), "--title", "T"]) == 0
        text = out.read_text()
        assert "Against the baseline" in text and "System description" in text and "T" in text
    assert "report: " in capsys.readouterr().out
    assert main(["bench", "report", str(NEW), "-o", str(tmp_path / "j.md"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["stats"]["n"] == load_measurements(NEW)["step"].n
    assert main(["bench", "report", str(NEW), "-o", str(tmp_path / "r.txt")]) == 2
    assert not (tmp_path / "r.txt").exists()


@pytest.mark.browser
def test_html_report_renders_in_headless_chromium(tmp_path):
    """The page is a document of the one report renderer: self-contained (its script inlined,
    nothing fetched), and drawn in the browser with every table, flag and plot."""
    require_chromium()
    path = tmp_path / "report.html"
    rep = bench_report([NEW], [OLD], generated="t")
    rep.write(path)
    html = path.read_text()
    assert not re.search(r"https?:|//cdn|\bsrc\s*=|@import|(?<![A-Za-z])url\(", html, re.IGNORECASE)  # nothing fetched
    d = rep.to_dict()
    median = d["results"][0]["stats"]["median"]
    n_new, n_old = load_measurements(NEW)["step"].n, load_measurements(OLD)["step"].n
    with Browser() as b:
        page = b.open(path)
        assert page.errors == []
        assert page.evaluate("document.querySelectorAll('.block-error').length") == 0
        assert page.evaluate("document.querySelectorAll('table').length") >= 6
        assert page.evaluate("document.querySelectorAll('svg.intervals').length") == 1
        assert page.evaluate("document.querySelectorAll('svg.intervals circle').length") == n_new + n_old
        assert page.evaluate("document.querySelectorAll('svg.intervals .ci-median').length") == 2
        assert page.evaluate("document.querySelectorAll('svg.intervals .ci-mean').length") == 2
        flags = page.evaluate("Array.from(document.querySelectorAll('p.text.warn'), p => p.innerText)")
        assert d["flags"] and all(any(f in p for p in flags) for f in d["flags"])  # every flag, set apart
        text = page.evaluate("document.body.innerText")
        assert format_time(median, "µs") in text and "not measured (no counters)" in text
        width = page.evaluate("document.querySelector('svg.intervals').getBoundingClientRect().width")
        assert width > 600  # drawn, not collapsed
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(ARTIFACTS / "bench_report.png")


def test_html_document_holds_every_table_and_the_plot_data():
    """The page's document says what the Markdown says: every table's rows, and per result its
    samples with the median's and the mean's CIs beside its baseline's."""
    rep = bench_report([NEW], [OLD], generated="t")
    d = rep.to_dict()
    doc = document(d)
    blocks = [b for s in doc["sections"] for b in s["blocks"]]
    tables = [b for b in blocks if b["type"] == "table"]
    want = [t for s in sections(d) for t in s["tables"]]
    assert [t["caption"] for t in tables] == [t["caption"] for t in want]
    for got, t in zip(tables, want):
        assert [c["label"] for c in got["columns"]] == t["columns"]
        assert [[r[c["key"]] for c in got["columns"]] for r in got["rows"]] == t["rows"]
    (plot,) = [b for b in blocks if b["type"] == "intervals"]
    for row, e in zip(plot["rows"], d["results"] + d["baselines"], strict=True):
        assert row["samples"] == e["samples"] and row["median"] == e["stats"]["median"]
        assert row["median_ci"] == e["stats"]["ci95_median"] and row["mean_ci"] == e["stats"]["ci95_mean"]
        assert row["outliers"] == e["stats"]["outliers"] and row["group"] == ["result", "baseline"].index(e["role"])
