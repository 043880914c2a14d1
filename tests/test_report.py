"""`chakra report`: what the document says (no browser), and the written file rendered in
headless Chromium with no console errors (the screenshot is kept under out/test-artifacts)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from browser import Browser, require_chromium
from chakra_trace.analyze import Analysis
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.visualize.report import build_report, report_parts, write_report
from chakra_trace.visualize.timeline import timeline, timeline_json

ARTIFACTS = Path(__file__).resolve().parent.parent / "out" / "test-artifacts"


@pytest.fixture(scope="module")
def sims(ddp_pair):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"torus-8x8": simulate_on(ddp_pair, "torus-8x8")}


def _blocks(doc, section):
    return next(s for s in doc["sections"] if s["id"] == section)["blocks"]


def test_report_document_of_the_ddp_pair(ddp_pair, sims):
    doc = build_report(ddp_pair, simulations=sims, device="cpu")
    ids = [s["id"] for s in doc["sections"]]
    assert ids == [
        "summary",
        "validation",
        "steps",
        "breakdown",
        "critical-path",
        "top-ops",
        "systems",
        "sim0-breakdown",
        "sim0-critical-path",
        "sim0-network",
        "collectives",
        "matrix",
        "roofline",
        "timeline",
        "sim0-timeline",
    ]
    summary = dict(_blocks(doc, "summary")[0]["items"])
    assert summary["ranks"] == 2 and summary["imbalanced collectives"] == "0 of 8"
    sim_row = _blocks(doc, "summary")[1]["rows"][0]
    assert sim_row["npus"] == 64 and sim_row["step_us"] == sims["torus-8x8"].step_ns / 1000
    # the simulated critical path accounts for the whole simulated step
    kv = next(dict(b["items"]) for b in _blocks(doc, "sim0-critical-path") if b["type"] == "kv")
    assert kv["length"] == kv["job step"] and kv["unexplained waits"] == "0.0 µs"
    heat = next(b for b in _blocks(doc, "collectives") if b["type"] == "heatmap")
    assert len(heat["y"]) == 8 and heat["x"] == ["0", "1"] and {v for row in heat["values"] for v in row} == {1.0}
    matrix = _blocks(doc, "matrix")[1]
    assert matrix["values"][0][0] is None and matrix["values"][0][1] > 0  # ring of 2: each sends to the other
    tl = _blocks(doc, "timeline")[1]
    assert tl["trace"] == timeline(ddp_pair, max_events=60_000)  # the Python export, as it is
    xs = [e for e in tl["trace"]["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == sum(len(t) for t in ddp_pair.traces.values()) - 2  # every timed node
    assert sum(e["ph"] == "f" for e in tl["trace"]["traceEvents"]) == 8  # collectives linked
    # the path outlined: each part lies inside its slice, and the path's operations are all there
    path = Analysis(ddp_pair).critical_path()
    assert len(tl["highlight"]) == len(path)
    for i, ts, dur in tl["highlight"]:
        assert xs[i]["ts"] - 1e-6 <= ts and ts + dur <= xs[i]["ts"] + xs[i]["dur"] + 1e-6
    sim = _blocks(doc, "sim0-timeline")[1]["trace"]
    assert len(build_report(ddp_pair, simulations=sims, device="cpu")["sections"]) == report_parts(ddp_pair, sims) + 2
    assert sim == timeline(ddp_pair, sims["torus-8x8"], max_events=60_000)
    json.dumps(doc)  # plain data


def test_report_renders_in_headless_chromium(ddp_pair, sims, tmp_path):
    """Must-show: the report opens offline in a browser with no console errors."""
    require_chromium()
    path = write_report(ddp_pair, tmp_path / "report.html", simulations=sims, device="cpu")
    html = path.read_text()
    assert not re.search(r"https?:|//cdn|\bsrc=", html)  # self-contained: nothing fetched
    with Browser() as b:
        page = b.open(path)
        assert page.errors == []
        blocks = sum(len(s["blocks"]) for s in build_report(ddp_pair, simulations=sims, device="cpu")["sections"])
        assert int(page.evaluate("document.body.dataset.rendered")) == blocks
        assert page.evaluate("document.querySelectorAll('.block-error').length") == 0
        assert page.evaluate("window.__report.timelines.length") == 2
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(ARTIFACTS / "report_ddp.png")


def test_report_downloads_the_python_timeline(ddp_pair, sims, tmp_path):
    """Each timeline's "Perfetto JSON" button saves the file `chakra timeline` / `timeline()`
    writes for the same workload, simulation and event cap: byte for byte, recorded and
    simulated (capped here, so that the cap is the same one too)."""
    require_chromium()
    cap = 5_000
    res = sims["torus-8x8"]
    path = write_report(ddp_pair, tmp_path / "report.html", simulations=sims, max_timeline_events=cap)
    expected = [timeline(ddp_pair, max_events=cap), timeline(ddp_pair, res, max_events=cap)]
    assert expected[1]["metadata"]["capped"] and not expected[0]["metadata"].get("capped")
    downloaded = []
    with Browser() as b:
        page = b.open(path)
        assert page.evaluate("window.__report.timelines.length") == 2
        for i, want in enumerate(expected):
            button = f"document.querySelectorAll('.block-timeline')[{i}].querySelectorAll('button')[1]"
            assert page.evaluate(f"{button}.textContent") == "Perfetto JSON"
            saved = page.download(f"{button}.click()", tmp_path / f"download{i}").read_bytes()
            assert saved == timeline_json(want) and json.loads(saved) == want
            downloaded.append(json.loads(saved))
            slices = sum(e["ph"] == "X" for e in want["traceEvents"])
            assert page.evaluate(f"window.__report.timelines[{i}].b.events.length") == slices  # drawn from it
        assert page.errors == []
    # what Perfetto's importer needs: slices nest per track, flows bind inside slices
    _check_chrome_trace(downloaded[0], slices=sum(len(t) for t in ddp_pair.traces.values()) - 2, flows=8)
    _check_chrome_trace(downloaded[1], slices=cap, processes={f"NPU {n}" for n in range(64)})


def test_cli_report(tmp_path, ddp_pair, capsys):
    from chakra_trace.cli import main

    ddp_pair.save(tmp_path / "job")
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "job"), "--simulate", "ring-8", "-o", str(out)]) == 0
    assert "report: " in capsys.readouterr().out and out.stat().st_size > 10_000
    assert main(["report", str(tmp_path / "job"), "--simulate", "nope", "-o", str(out)]) == 2


def _check_chrome_trace(doc: dict, *, slices: int, flows: int | None = None, processes=None) -> None:
    """What Perfetto's JSON importer needs: µs slices that nest on each (pid, tid), one "s" per
    flow and its "f" steps, every flow event inside a slice of its own track."""
    ev = doc["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == slices and all(e["dur"] >= 0 and isinstance(e["ts"], (int, float)) for e in xs)
    tracks: dict[tuple, list] = {}
    for e in xs:
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[float] = []
        for a, b in spans:
            while stack and stack[-1] <= a:
                stack.pop()
            assert not stack or b <= stack[-1] + 1e-6, "slices on one track must nest"
            stack.append(b)
    starts = [e["id"] for e in ev if e["ph"] == "s"]
    steps = [e["id"] for e in ev if e["ph"] == "f"]
    assert len(set(starts)) == len(starts) and set(steps) == set(starts) and steps
    if flows is not None:
        assert len(starts) == len(steps) == flows
    for e in ev:
        if e["ph"] in ("s", "f"):
            assert any(a <= e["ts"] <= b for a, b in tracks[(e["pid"], e["tid"])]), e
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == (processes or {"rank 0", "rank 1"})
