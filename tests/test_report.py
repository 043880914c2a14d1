"""`chakra report`: what the document says (no browser), and the written file rendered in
headless Chromium with no console errors (the screenshot is kept under out/test-artifacts)."""

from __future__ import annotations

import json
import os
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
        "devices",  # (its nodes at their times: a workload in memory has no Kineto traces)
        "timeline",
        "sim0-timeline",
    ]
    summary = dict(_blocks(doc, "summary")[0]["items"])
    assert summary["ranks"] == 2 and summary["imbalanced collectives"] == "0 of 8"
    sim_row = _blocks(doc, "summary")[1]["rows"][0]
    assert sim_row["npus"] == 64 and sim_row["step_us"] == sims["torus-8x8"].step_ns / 1000
    # the simulated critical path accounts for the whole simulated step
    kv = next(dict(b["items"]) for b in _blocks(doc, "sim0-critical-path") if b["type"] == "kv")
    assert kv["length"] == kv["job span (whole recording)"] and kv["unexplained waits"] == "0.0 µs"
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


@pytest.mark.browser
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


@pytest.mark.browser
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


def test_cli_report_costs_a_timeless_job_at_the_device_roofline(tmp_path, capsys):
    """A captured or parallelized job has FLOPs and no times: with --device, its simulations cost
    compute at that device's roofline, as `chakra simulate --device` does (not as free)."""
    import re

    from chakra_trace.cli import main
    from chakra_trace.io.workload import Workload
    from chakra_trace.schema.builder import TraceBuilder

    traces = {}
    for r in range(2):
        b = TraceBuilder()
        c = b.comp("aten::mm", 0, num_ops=2e12, tensor_size=1 << 20)
        b.collective("ALL_REDUCE", 1 << 20, deps=[c])
        traces[r] = b.build()
    Workload(traces).save(tmp_path / "job")
    out = tmp_path / "r.html"

    def step(*extra):
        assert main(["report", str(tmp_path / "job"), "--simulate", "ring-8", "-o", str(out), *extra]) == 0
        printed = capsys.readouterr().out
        return printed, float(re.search(r"simulated on ring-8[^:]*: ([\d,.]+) ms", printed).group(1).replace(",", ""))

    printed, fast = step("--device", "h100")
    assert "with NVIDIA H100-SXM5 compute" in printed and fast > 2.0  # 2 TFLOP at the H100's peak: over 2 ms
    _, free = step("--peak-tflops", "1e9", "--mem-bw-gbps", "1e9")
    assert free < 0.5 < fast


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


# ---------------------------------------------------------------- sections of issue 12


def test_steps_add_up_to_the_whole_recording(ddp_pair):
    """Each step's parts add up to its span, and the steps to the whole (= the breakdown)."""
    a = Analysis(ddp_pair)
    sb = a.steps()
    keys = ("span_us", "compute_us", "comm_us", "overlap_us", "exposed_comm_us", "other_us", "idle_us")
    assert sb.steps >= 1 and set(sb.methods) == set(ddp_pair.ranks)
    whole = {r["rank"]: r for r in a.breakdown().rows}
    for rank in ddp_pair.ranks:
        rows = [r for r in sb.rows if r["rank"] == rank and r["step"] != "all"]
        total = next(r for r in sb.rows if r["rank"] == rank and r["step"] == "all")
        for r in rows:
            assert r["compute_us"] + r["comm_us"] - r["overlap_us"] + r["other_us"] + r["idle_us"] == r["span_us"]
        for k in keys:
            assert sum(r[k] for r in rows) == total[k] == whole[rank][k], k


def test_steps_are_found_from_repeating_ops():
    from chakra_trace.analyze.steps import find_steps
    from chakra_trace.schema.builder import TraceBuilder

    b = TraceBuilder()
    t = 0
    for _step in range(3):
        for name, dur in (("fwd", 5), ("bwd", 9), ("opt", 2)):
            b.comp(name, dur, start=t)
            t += dur + 1
    steps = find_steps(b.build())
    assert len(steps) == 3 and steps.bounds.tolist() == [0, 19, 38, 56]
    b2 = TraceBuilder()
    for i, name in enumerate(("a", "b", "c")):
        b2.comp(name, 1, start=i * 2)
    assert len(find_steps(b2.build())) == 1


def test_identical_ranks_are_one_row_with_their_count(ddp_pair, sims):
    from chakra_trace.visualize.report_sections import group_ranks

    doc = build_report(ddp_pair, simulations=sims)
    table = next(b for b in _blocks(doc, "sim0-breakdown") if b["type"] == "table")
    assert sum(r["count"] for r in table["rows"]) == 64 and len(table["rows"]) < 64
    bars = next(b for b in _blocks(doc, "sim0-breakdown") if b["type"] == "bars")
    assert len(bars["categories"]) == len(table["rows"])
    rows = [{"rank": i, "x": 100.0 + (0.05 if i % 2 else 0), "y": 1.0} for i in range(10)] + [
        {"rank": 10, "x": 200.0, "y": 1}
    ]
    groups = group_ranks(rows, ("x", "y"))
    assert [g["count"] for g in groups] == [10, 1] and groups[0]["ranks"] == "0-9" and groups[1]["ranks"] == "10"
    assert [g["count"] for g in group_ranks(rows, ("x", "y"), tol=1e-6)] == [5, 5, 1]


def test_every_table_and_chart_states_its_unit(ddp_pair, sims):
    """No unit in a header over cells that carry their own (the old "per rank (µs)" over ms)."""
    doc = build_report(ddp_pair, simulations=sims)
    for sec in doc["sections"]:
        for b in sec["blocks"]:
            if b["type"] == "table":
                assert "µs" not in (b.get("caption") or ""), sec["id"]
                for c in b["columns"]:
                    if c["format"] in ("us", "ns", "bytes", "pct"):
                        assert not re.search(r"µs|\bms\b|\bns\b|\(bytes\)|\(%\)", c["label"]), (sec["id"], c)
            if b["type"] == "bars":
                assert b["unit"], (sec["id"], b["title"])
            if b["type"] == "scatter":
                assert b["x_label"] and b["y_label"], sec["id"]


def test_systems_beside_the_recording(ddp_pair, sims):
    from chakra_trace.simulate.presets import preset

    doc = build_report(ddp_pair, simulations=sims, systems={"torus-8x8": preset("torus-8x8")})
    blocks = _blocks(doc, "systems")
    dims = next(b for b in blocks if b["type"] == "table" and "per dimension" in b["caption"])
    assert [(r["topology"], r["npus"], r["bandwidth"], r["latency_ns"]) for r in dims["rows"]] == [
        ("Ring", 8, 100, 500)
    ] * 2
    steps = next(b for b in blocks if b["type"] == "table" and b["caption"].startswith("step"))
    assert [r["system"] for r in steps["rows"]] == ["recorded", "torus-8x8"]
    rec_row, sim_row = steps["rows"]
    assert sim_row["vs"] == pytest.approx(sim_row["step_us"] / rec_row["step_us"])
    n = Analysis(ddp_pair).steps().steps
    assert rec_row["per_step_us"] == pytest.approx(rec_row["step_us"] / n)
    classes = next(b for b in blocks if b["type"] == "bars")
    assert [s["name"] for s in classes["series"]] == ["recorded", "torus-8x8"] and "[host]" in classes["categories"]
    assert any(b["type"] == "text" and b["text"].startswith("[host]:") for b in blocks)  # explained where shown
    assert any(b["type"] == "text" and b["text"].startswith("[host]:") for b in _blocks(doc, "top-ops"))


def test_network_section_utilization_per_dimension(ddp_pair, sims):
    from chakra_trace.simulate.presets import preset
    from chakra_trace.simulate.result import CollectiveRecord
    from chakra_trace.simulate.utilization import dimension_utilization, phase_bytes

    rec = CollectiveRecord(
        "all", 0, "ALL_REDUCE", 8 << 20, 64, "reduce_scatter:ring@d0+all_reduce:ring@d1+all_gather:ring@d0", 4, 0, 1
    )
    b = phase_bytes(rec, (8, 8))
    D = 8 << 20
    assert b[0] == pytest.approx(2 * D * 7 / 8) and b[1] == pytest.approx(2 * 7 / 8 * D / 8)
    p = preset("torus-8x8")
    res = sims["torus-8x8"]
    util = dimension_utilization(res, p.network)
    expect = sum(phase_bytes(c, (8, 8)).get(0, 0) * c.npus / 64 for c in res.collectives)
    assert util[0]["bytes_per_npu"] == pytest.approx(expect)
    assert util[0]["utilization"] == pytest.approx(expect / (100e9 * res.step_ns / 1e9))
    doc = build_report(ddp_pair, simulations=sims, systems={"torus-8x8": p})
    blocks = _blocks(doc, "sim0-network")
    scatters = [b for b in blocks if b["type"] == "scatter"]
    assert len(scatters) == 2 and len(scatters[0]["points"]) == len(res.collectives)
    assert scatters[1]["lines"][0]["points"][0][1] == 100  # the peak: the link bandwidth
    assert [r["dim"] for r in next(b for b in blocks if b["type"] == "table")["rows"]] == [0, 1]


def test_sections_say_why_they_are_missing(ddp_pair):
    """No start times, no device, an unknown device: the section is there and says why."""
    untimed = ddp_pair.__class__({r: t.copy() for r, t in ddp_pair.traces.items()})
    for t in untimed.traces.values():
        t.start[:] = 0
    doc = build_report(untimed)
    ids = [s["id"] for s in doc["sections"]]
    assert "breakdown" in ids and "roofline" in ids
    assert _blocks(doc, "breakdown")[0]["text"].startswith("Not shown: the workload has no recorded start times")
    bad = build_report(ddp_pair, device="nope")
    assert _blocks(bad, "roofline")[0]["text"].startswith("Not shown: no roofline device: unknown device 'nope'")
    for sec in doc["sections"] + bad["sections"]:
        assert sec["blocks"], sec["id"]


def test_roofline_names_the_cpu_that_is_there():
    from chakra_trace.analyze.roofline import DEVICES, host_cpu

    epyc = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\ncpu MHz\t\t: 2450.000\nflags\t\t: fpu avx avx2 fma\n"
    dev = host_cpu(epyc * 1 + epyc.replace(": 0", ": 1"))
    assert "AMD EPYC 7B13" in dev.name and "Xeon" not in dev.name
    assert dev.peak_flops == pytest.approx(2 * 2.45e9 * 32) and "assumed" in dev.name
    assert host_cpu("processor : 0\nmodel name : Intel(R) Xeon(R) Platinum 8380 CPU\n") is DEVICES["xeon-8380x2"]
    assert host_cpu("") is DEVICES["cpu"] and "generic CPU" in DEVICES["cpu"].name
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), None)
    if model:
        assert model in host_cpu().name or host_cpu().name in {d.name for d in DEVICES.values()}


def test_plot_and_report_share_the_device_options():
    from chakra_trace.cli.plot import roofline
    from chakra_trace.cli.report import report

    def opts(cmd):
        return {
            p.name: (p.opts, p.help, p.default)
            for p in cmd.params
            if p.name in ("device", "peak_tflops", "mem_bw_gbps")
        }

    assert opts(roofline) == opts(report) and len(opts(report)) == 3


@pytest.mark.browser
def test_report_sections_in_headless_chromium(ddp_pair, sims, tmp_path):
    """The new sections render without errors; their screenshots are kept as test artifacts
    ($CHAKRA_TEST_ARTIFACTS, default test-artifacts/report/ under the repository)."""
    from chakra_trace.simulate.presets import preset

    require_chromium()
    out = Path(
        os.environ.get("CHAKRA_TEST_ARTIFACTS") or Path(__file__).resolve().parent.parent / "test-artifacts" / "report"
    )
    path = write_report(
        ddp_pair, tmp_path / "report.html", simulations=sims, systems={"torus-8x8": preset("torus-8x8")}
    )
    want = [
        "validation",
        "steps",
        "breakdown",
        "critical-path",
        "systems",
        "sim0-breakdown",
        "sim0-network",
        "roofline",
        "sim0-timeline",
    ]
    with Browser() as b:
        page = b.open(path)
        assert page.errors == [] and page.evaluate("document.querySelectorAll('.block-error').length") == 0
        for sid in want:
            assert page.evaluate(
                f"!!document.getElementById('{sid}') && document.getElementById('{sid}').children.length > 1"
            ), sid
            page.screenshot_element(f"#{sid}", out / f"{sid}.png")
        # the critical-path table fits the page: no column cut off at 1,400 px
        assert page.evaluate(
            "(() => { const w = document.querySelector('#critical-path .table-wrap'); return w.scrollWidth <= w.clientWidth + 1; })()"
        )
        # 64 NPUs: flows off until asked for
        flows = "document.querySelector('#sim0-timeline .tl-flows')"
        assert page.evaluate(f"{flows}.textContent").startswith("Show flows")
        page.evaluate(f"{flows}.click()")
        assert page.evaluate(f"{flows}.textContent").startswith("Hide flows") and page.errors == []
    assert all((out / f"{sid}.png").stat().st_size > 1000 for sid in want)


def test_a_system_that_cannot_be_simulated_says_why_in_its_place(tmp_path, capsys):
    """A job with communicator subgroups does not scale out to a 64-NPU preset: the report still
    comes, with that system's section saying why, and the systems that run beside it."""
    from chakra_trace.cli import main

    out = tmp_path / "r.html"
    job = str(Path(__file__).parent / "data" / "pipeline")
    assert main(["report", job, "--simulate", "torus-8x8", "--simulate", "recorded", "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert "warning: not simulated on torus-8x8: " in cap.err and "simulated on recorded" in cap.out
    html = out.read_text()
    assert "Simulation on torus-8x8" in html and "only groups over every rank scale out" in html
