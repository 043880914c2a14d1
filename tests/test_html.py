"""The self-contained HTML report: document checks in Python, and the page drawn by headless Chromium."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from browser import Browser, require_chromium
from chakra_trace.document import render_html, write_html
from chakra_trace.errors import ChakraError
from chakra_trace.visualize.timeline import timeline_json

ARTIFACTS = Path(__file__).resolve().parent.parent / "out" / "test-artifacts"
T0 = 1_700_000_000_000  # µs since the epoch: timelines carry absolute timestamps
EVIL = "</script><script>window.__pwned=1</script>"
NAMES = [
    EVIL,
    "<b>matmul</b>",
    "aten::conv2d",
    "say \"hi\" & 'bye'",
    "ünïcödé — 日本語 ✓",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "aten::linear",
    "memcpy HtoD",
]
N_EVENTS = 20_000


KINDS = ["cpu op", "kernel", "<i>comm</i>"]
TRACKS = [
    {"pid": 100, "tid": 1, "name": "python main thread", "process": "trainer rank 0"},
    {"pid": 100, "tid": 2, "name": "<b>dataloader</b>", "process": "trainer rank 0"},
    {"pid": 0, "tid": 7, "name": "stream 7", "process": "GPU 0"},
    {"pid": 0, "tid": 13, "name": "stream 13 (nccl)", "process": "GPU 0"},
    {"pid": 1, "tid": "stream 7", "name": "stream 7", "process": 'GPU 1 "quoted"'},
    {"pid": 1, "tid": 13, "name": "stream 13 (nccl)", "process": 'GPU 1 "quoted"'},
]


def make_timeline(n_events: int = N_EVENTS) -> dict:
    """Two ranks: a nested CPU thread, a data loader, a dense GPU compute stream, an NCCL stream,
    as a Chrome trace (hostile names, a str tid, numpy numbers) with flows and a highlight."""
    tracks = TRACKS
    rows = []  # [track, ts, dur, name, kind]
    for p in range(200):  # CPU: parents of 1000 µs with 4 nested children each
        rows.append([0, T0 + p * 1250, 1000, p % 2, 0])
        rows += [[0, T0 + p * 1250 + 50 + j * 230, 200, 2 + j % 2, 0] for j in range(4)]
    rows += [[1, T0 + i * 2500, 800, 1, 0] for i in range(100)]
    comm = len(rows)
    rows += [[t, T0 + 300 + i * 2500, 600, 5, 2] for t in (3, 5) for i in range(100)]
    n_gpu = n_events - len(rows)
    span = 250_000
    for t, count in ((2, n_gpu // 2), (4, n_gpu - n_gpu // 2)):
        step = span / count
        rows += [
            [t, T0 + int(i * step), max(1, int(step * 0.6)), 2 + i % 5, 2 if i % 7 == 0 else 1] for i in range(count)
        ]
    events = []
    for pid, process in dict((t["pid"], t["process"]) for t in tracks).items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}})
    events += [
        {"ph": "M", "name": "thread_name", "pid": t["pid"], "tid": t["tid"], "args": {"name": t["name"]}}
        for t in tracks
    ]
    events += [
        {
            "ph": "X",
            "pid": tracks[t]["pid"],
            "tid": tracks[t]["tid"],
            "ts": np.int64(ts),  # numpy numbers must be accepted as they are
            "dur": dur,
            "name": NAMES[n],
            "cat": KINDS[k],
            "args": {"note": NAMES[0]},
        }
        for t, ts, dur, n, k in rows
    ]
    for i, p in enumerate(range(0, 200, 4)):
        a, b = tracks[0], tracks[2]
        events.append({"ph": "s", "id": i, "pid": a["pid"], "tid": a["tid"], "ts": T0 + p * 1250 + 50, "name": EVIL})
        events.append({"ph": "f", "bp": "e", "id": i, "pid": b["pid"], "tid": b["tid"], "ts": T0 + p * 1250 + 400})
    # the CPU parents (every 10th) and the first stream's comm slices (every 10th), by their "X" index
    highlight = [[p * 5, T0 + p * 1250, 1000] for p in range(0, 200, 10)] + [
        [comm + i, T0 + 300 + i * 2500, 600] for i in range(0, 100, 10)
    ]
    return {
        "type": "timeline",
        "trace": {"traceEvents": events, "displayTimeUnit": "ns", "metadata": {"title": EVIL}},
        "highlight": highlight,
    }


def unpack_trace(block: dict) -> bytes:
    """The trace file a timeline block of the embedded document carries."""
    return gzip.decompress(base64.b64decode(block["trace_gz"]))


def make_doc() -> dict:
    table_rows = [
        {
            "name": NAMES[i % len(NAMES)],
            "count": np.int64(1000 - 37 * i),
            "time": (i * 123.4) if i != 3 else None,
            "bytes": 1 << (10 + 2 * i),
            "share": i / 12,
            "ratio": float("nan") if i == 5 else i * 0.75,
            "ns": 1500.0 * i,
        }
        for i in range(12)
    ]
    columns = [
        {"key": "name", "label": "Name <b>", "format": "str"},
        {"key": "ratio", "label": "Ratio", "format": "float"},
        {"key": "count", "label": "Count", "format": "int"},
        {"key": "time", "label": "Time", "format": "us"},
        {"key": "bytes", "label": "Size", "format": "bytes"},
        {"key": "share", "label": "Share", "format": "pct"},
        {"key": "ns", "label": "Latency", "format": "ns"},
    ]
    ranks = [f"rank {i}" for i in range(8)]
    matrix = np.outer(np.arange(1, 9), np.arange(1, 9)).astype(float) * 2**20
    matrix[np.arange(8), np.arange(8)] = np.nan
    ratio = np.array([[1.0, 1.3, 0.7, None], [2.0, 1.0, 0.5, 0.9], [1.1, 0.95, 4.0, 1.0]], dtype=object)
    intensity = [0.5, 2.0, 8.0, 30.0, 120.0, 400.0]
    return {
        "title": 'Report <b>bold</b> & "quotes"',
        "subtitle": "ResNet-50 DDP, 2 ranks — ünïcödé",
        "generated": "2024-05-01 12:00",
        "sections": [
            {
                "id": "overview",
                "title": "Overview <b>&</b>",
                "blocks": [
                    {
                        "type": "text",
                        "text": f"First paragraph with {EVIL} and <b>not bold</b>.\n\nSecond paragraph:\nline two.",
                    },
                    {
                        "type": "kv",
                        "items": [
                            ["Ranks", np.int64(2)],
                            ["Total time", "12.3 ms"],
                            ["Share", np.float64(0.12345)],
                            ["Missing", None],
                            ["NaN", float("nan")],
                            ["<b>label</b>", EVIL],
                        ],
                    },
                ],
            },
            {
                "id": "tables",
                "title": "Tables",
                "blocks": [
                    {"type": "table", "caption": "Top ops", "columns": columns, "rows": table_rows, "max_rows": 5},
                    {
                        "type": "table",
                        "caption": "Small",
                        "columns": [
                            {"key": "a", "label": "A", "format": "str"},
                            {"key": "b", "label": "B", "format": "float"},
                        ],
                        "rows": [{"a": "x", "b": None}, {"a": "y", "b": 2.5}],
                    },
                ],
            },
            {
                "id": "charts",
                "title": "Charts",
                "blocks": [
                    {
                        "type": "bars",
                        "title": "Time per category",
                        "unit": "us",
                        "categories": ["compute", "<b>comm</b>", "idle"],
                        "series": [
                            {"name": "rank 0", "values": [1200.0, 300.0, None]},
                            {"name": "rank 1", "values": [1100.0, 450.0, 80.0]},
                        ],
                        "stacked": False,
                    },
                    {
                        "type": "bars",
                        "title": "Stacked",
                        "unit": "bytes",
                        "categories": ranks,
                        "series": [
                            {"name": n, "values": (np.arange(8) + k) * 2.0**24}
                            for k, n in enumerate(["all_reduce", "all_gather", "p2p"])
                        ],
                        "stacked": True,
                    },
                    {
                        "type": "heatmap",
                        "title": "Bytes sent (row → column)",
                        "x": ranks,
                        "y": ranks,
                        "values": matrix,
                        "unit": "bytes",
                        "scale": "linear",
                        "center": None,
                    },
                    {
                        "type": "heatmap",
                        "title": "Size / median",
                        "x": ["a", "b", "c", "d"],
                        "y": ["r0", "r1", "r2"],
                        "values": ratio.tolist(),
                        "unit": "",
                        "scale": "log",
                        "center": 1.0,
                    },
                    {
                        "type": "scatter",
                        "title": "Roofline",
                        "x_label": "FLOP/byte",
                        "y_label": "FLOP/s",
                        "log_x": True,
                        "log_y": True,
                        "points": [[x, min(3e12 * x, 1e14) * 0.4, i, i % 2] for i, x in enumerate(intensity)],
                        "labels": [f"op {i} <b>" for i in range(6)],
                        "groups": ["conv", "gemm"],
                        "lines": [{"name": "roof", "points": [[0.1, 3e11], [33.3, 1e14], [1000, 1e14]]}],
                    },
                ],
            },
            {
                "id": "timeline",
                "title": "Timeline",
                "blocks": [
                    {"type": "text", "text": "Two ranks."},
                    make_timeline(),
                ],
            },
        ],
    }


N_BLOCKS = 11


# ---------------------------------------------------------------- Python side


def test_html_is_self_contained_and_escaped():
    doc = make_doc()
    text = render_html(doc)
    assert sum(len(s["blocks"]) for s in doc["sections"]) == N_BLOCKS
    for pattern in (
        r"https?:",
        r"ftp:",
        r"//cdn",
        r"\bsrc\s*=",
        r"@import",
        r"(?<![A-Za-z])url\(",
        r"\bhref\s*=\s*(?![\"']#)",
    ):
        assert not re.search(pattern, text, re.IGNORECASE), pattern
    assert text.count("</script") == 2  # the two real script elements; none from the data
    assert "<!--" not in text
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    data = json.loads(m.group(1))
    assert data["sections"][0]["blocks"][0]["text"].startswith(f"First paragraph with {EVIL}")
    kv = dict(data["sections"][0]["blocks"][1]["items"])
    assert kv["Ranks"] == 2 and kv["NaN"] is None and kv["Share"] == pytest.approx(0.12345)
    rows = data["sections"][1]["blocks"][0]["rows"]
    assert rows[5]["ratio"] is None and rows[0]["count"] == 1000
    assert data["sections"][2]["blocks"][2]["values"][0][0] is None  # NaN diagonal
    block = data["sections"][3]["blocks"][1]
    assert set(block) == {"type", "trace_gz", "highlight"} and re.fullmatch(r"[A-Za-z0-9+/]+=*", block["trace_gz"])
    trace = json.loads(unpack_trace(block))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == N_EVENTS and xs[0] == {
        "ph": "X",
        "pid": 100,
        "tid": 1,
        "ts": T0,
        "dur": 1000,
        "name": EVIL,
        "cat": "cpu op",
        "args": {"note": EVIL},
    }
    assert unpack_trace(block) == timeline_json(trace)  # the timeline file, as `chakra timeline` writes it
    assert trace["metadata"]["title"] == EVIL and block["highlight"][0] == [0, T0, 1000]
    assert "<title>Report &lt;b&gt;bold&lt;/b&gt; &amp; &quot;quotes&quot;</title>" in text
    assert len(text.encode()) < 2_000_000


def test_write_html_is_atomic(tmp_path):
    doc = {"title": "t", "sections": [{"id": "s", "title": "S", "blocks": [{"type": "text", "text": "hi"}]}]}
    out = write_html(doc, tmp_path / "r.html")
    assert out.read_text(encoding="utf-8") == render_html(doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    with pytest.raises(ChakraError):
        write_html(
            {"title": "t", "sections": [{"id": "s", "title": "S", "blocks": [{"type": "nope"}]}]}, tmp_path / "bad.html"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


def _doc_with(block: dict, sid: str = "sec") -> dict:
    return {"title": "t", "sections": [{"id": sid, "title": "S", "blocks": [{"type": "text", "text": "ok"}, block]}]}


X = {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 5, "name": "n", "cat": "k"}
TL = {"type": "timeline", "trace": {"traceEvents": [X]}, "highlight": []}


def _tl(*events) -> dict:
    return {**TL, "trace": {"traceEvents": list(events)}}


@pytest.mark.parametrize(
    "block, expected",
    [
        ({"type": "chart3d"}, "unknown block type 'chart3d'"),
        ({"text": "no type"}, "unknown block type None"),
        ({"type": "text", "text": 3}, "field 'text' is int 3, expected a str"),
        ({"type": "text", "text": "t", "warn": 1}, "field 'warn' is int 1, expected a bool"),
        ({"type": "table", "columns": [{"key": "a", "bar": "yes"}], "rows": []}, "columns[0]: field 'bar'"),
        ({"type": "intervals", "rows": [{"samples": [1.0]}]}, "rows[0]: missing field 'label'"),
        ({"type": "intervals", "rows": [{"label": "a", "samples": [1.0, None]}]}, "samples[1] is NoneType None"),
        ({"type": "intervals", "rows": [{"label": "a", "samples": [1.0], "outliers": [1]}]}, "outliers[0] is int 1"),
        ({"type": "intervals", "rows": [{"label": "a", "samples": [], "group": 0}]}, "field 'group' is int 0"),
        ({"type": "intervals", "rows": [{"label": "a", "samples": [], "mean_ci": [1]}]}, "field 'mean_ci'"),
        ({"type": "kv", "items": [["a", 1, 2]]}, "items[0]"),
        ({"type": "table", "columns": [{"key": "a", "format": "money"}], "rows": []}, "columns[0]: field 'format'"),
        ({"type": "table", "columns": [{"key": "a"}], "rows": [{"a": [1]}]}, "rows[0]['a']"),
        ({"type": "table", "columns": [{"key": "a"}], "rows": [], "max_rows": 0}, "max_rows"),
        (
            {"type": "bars", "categories": ["a", "b"], "series": [{"name": "s", "values": [1]}]},
            "has 1 values for 2 categories",
        ),
        ({"type": "heatmap", "x": ["a"], "y": ["r", "s"], "values": [[1]]}, "1 rows for 2 y labels"),
        ({"type": "heatmap", "x": ["a", "b"], "y": ["r"], "values": [[1, "x"]]}, "values[0][1]"),
        ({"type": "heatmap", "x": ["a"], "y": ["r"], "values": [[1]], "scale": "sqrt"}, "field 'scale'"),
        ({**TL, "trace": [X]}, "field 'trace' is list"),
        ({"type": "timeline"}, "field 'trace' is NoneType None, expected a Chrome trace"),
        (_tl(X, {**X, "dur": -5}), "trace.traceEvents[1] (X) has dur int -5, expected a number >= 0"),
        (_tl({**X, "ts": float("nan")}), "trace.traceEvents[0] (X) has ts NoneType None"),
        (_tl({**X, "name": 3}), "(X) has name int 3"),
        (_tl({**X, "cat": None}), "(X) has cat"),
        (_tl({**X, "pid": "x"}), "(X) has pid str 'x'"),
        (_tl({**X, "tid": [1]}), "(X) has tid list [1]"),
        (_tl(X, {"ph": "f", "pid": 1, "tid": 1, "ts": 1}), "traceEvents[1] (f) has id NoneType None"),
        (_tl({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": 7}}), "(thread_name) has args"),
        (_tl(X, "X"), "traceEvents[1] is str 'X', expected an event"),
        ({**TL, "highlight": [[1, 0, 5]]}, "highlight[0] has slice index 1, expected an int in [0, 1)"),
        ({**TL, "highlight": [[0, 0, -5]]}, "highlight[0] has a negative duration"),
        ({"type": "scatter", "points": [[1, 2, 0, 5]], "labels": ["a"], "groups": ["g"]}, "group index 5"),
        ({"type": "scatter", "points": [[1, 2]]}, "points[0]"),
        ({"type": "text", "text": object()}, "object cannot be stored"),
    ],
)
def test_malformed_blocks_name_section_and_block(block, expected):
    with pytest.raises(ChakraError) as err:
        render_html(_doc_with(block, sid="my-sec"))
    msg = str(err.value)
    assert "section 'my-sec' block 1" in msg and expected in msg, msg


@pytest.mark.parametrize(
    "doc, expected",
    [
        ([], "expected a dict"),
        ({"sections": []}, "'title'"),
        ({"title": "t", "sections": "x"}, "'sections'"),
        ({"title": "t", "sections": [{"id": "a b", "title": "A", "blocks": []}]}, "without whitespace"),
        (
            {
                "title": "t",
                "sections": [{"id": "a", "title": "A", "blocks": []}, {"id": "a", "title": "B", "blocks": []}],
            },
            "section 'a': id 'a' is used twice",
        ),
        ({"title": "t", "sections": [{"id": "a", "title": "A", "blocks": {}}]}, "section 'a': field 'blocks'"),
    ],
)
def test_malformed_documents(doc, expected):
    with pytest.raises(ChakraError, match=re.escape(expected)):
        render_html(doc)


# ---------------------------------------------------------------- in the browser


@pytest.fixture(scope="module")
def browser():
    exe = require_chromium()
    with Browser(exe, timeout=20) as b:
        yield b


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    path = write_html(make_doc(), tmp_path_factory.mktemp("report") / "report.html")
    return browser.open(path)


def test_renders_every_block_without_errors(page):
    assert page.errors == []
    assert page.evaluate("document.body.dataset.rendered") == str(N_BLOCKS)
    assert page.evaluate("document.querySelectorAll('.block-error').length") == 0
    assert page.evaluate("Array.from(document.querySelectorAll('nav.toc a'), a => a.getAttribute('href'))") == [
        "#overview",
        "#tables",
        "#charts",
        "#timeline",
    ]
    counts = page.evaluate("""({svg: document.querySelectorAll('svg.chart').length,
        rects: document.querySelectorAll('svg.chart rect.cell').length,
        points: document.querySelectorAll('svg.chart circle.pt').length,
        canvas: document.querySelectorAll('canvas.timeline').length})""")
    assert counts == {"svg": 5, "rects": 64 + 12, "points": 6, "canvas": 1}
    png = page.screenshot(ARTIFACTS / "report_blocks.png")
    head = png.read_bytes()
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) > 50_000
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width == 1400 and height > 1500
    assert page.errors == []


def test_names_are_escaped(page):
    assert page.evaluate("window.__pwned === undefined") is True
    assert page.evaluate("document.querySelectorAll('body b, body i').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 2
    text = page.evaluate("document.body.innerText")
    for literal in (EVIL, "<b>not bold</b>", "Overview <b>&</b>", "<b>label</b>", "Name <b>", "ünïcödé — 日本語 ✓"):
        assert literal in text, literal
    assert page.evaluate("document.title") == 'Report <b>bold</b> & "quotes"'
    svg_texts = page.evaluate("Array.from(document.querySelectorAll('svg.chart text'), t => t.firstChild.nodeValue)")
    assert "<b>comm</b>" in svg_texts and "op 0 <b>" not in svg_texts  # point labels only in tooltips


def _column(page, table: int, col: int) -> list[str]:
    return page.evaluate(
        f"Array.from(document.querySelectorAll('table.data')[{table}].querySelectorAll('tbody tr'), "
        f"tr => tr.children[{col}].textContent)"
    )


def test_table_sorts_on_header_click_and_expands(page):
    counts = [1000 - 37 * i for i in range(12)]
    assert _column(page, 0, 2) == [f"{c:,}" for c in counts[:5]]  # document order, max_rows shown
    click = "document.querySelectorAll('table.data')[0].querySelectorAll('th')[{}].click()"
    page.evaluate(click.format(2))  # numbers: largest first
    assert _column(page, 0, 2) == [f"{c:,}" for c in sorted(counts, reverse=True)[:5]]
    page.evaluate(click.format(2))  # second click: ascending
    assert _column(page, 0, 2) == [f"{c:,}" for c in sorted(counts)[:5]]
    assert (
        page.evaluate("document.querySelectorAll('table.data')[0].querySelectorAll('th')[2].className")
        == "num sort-asc"
    )
    page.evaluate(click.format(3))  # µs column with a null: the null goes last in both directions
    assert _column(page, 0, 3)[:2] == ["1.36 ms", "1.23 ms"]
    assert page.evaluate("window.__report.tables[0].rows.at(-1).time") is None
    page.evaluate(click.format(3))
    assert _column(page, 0, 3)[:3] == ["0", "123 µs", "247 µs"]
    assert page.evaluate("window.__report.tables[0].rows.at(-1).time") is None
    page.evaluate(click.format(0))  # text: A to Z
    assert page.evaluate("""(() => { const rows = window.__report.tables[0].rows;
        return rows.every((r, i) => !i || rows[i - 1].name.localeCompare(r.name, undefined, {numeric: true}) <= 0); })()""")
    first = _column(page, 0, 0)[0]
    assert first == page.evaluate("window.__report.tables[0].rows[0].name")
    page.evaluate(click.format(0))  # Z to A
    assert _column(page, 0, 0)[0] == page.evaluate("window.__report.tables[0].rows[0].name") != first
    page.evaluate("document.querySelector('.block-table button.more').click()")
    assert len(_column(page, 0, 0)) == 12
    assert _column(page, 1, 1) == ["–", "2.5"]
    assert page.errors == []


TL_JS = "window.__report.timelines[0]"


def test_timeline_zoom_pan_hover_reset(page):
    full = page.evaluate(f"({TL_JS}.reset(), {TL_JS}.view)")
    assert full["t0"] < T0 and full["t1"] > T0 + 250_000
    stats = page.evaluate(f"{TL_JS}.lastDraw")
    assert stats["events"] == N_EVENTS  # everything is in view ...
    assert stats["rects"] + stats["runs"] < N_EVENTS / 4  # ... and sub-pixel events were merged
    wheel = f"""(() => {{ const tl = {TL_JS}, c = tl.canvas, r = c.getBoundingClientRect(), x = Math.round(r.left + r.width * 0.6);
        const before = tl.timeAt(x - r.left);  // clientX is an integer
        c.dispatchEvent(new WheelEvent('wheel', {{deltaY: -400, clientX: x, clientY: r.top + 60, bubbles: true, cancelable: true}}));
        return {{before: before, after: tl.timeAt(x - r.left), view: Object.assign({{}}, tl.view)}}; }})()"""
    z = page.evaluate(wheel)
    span0, span1 = full["t1"] - full["t0"], z["view"]["t1"] - z["view"]["t0"]
    assert span1 < span0 * 0.6  # zoomed in
    assert z["after"] == pytest.approx(z["before"], abs=span0 * 1e-6)  # around the cursor
    page.next_frame()
    assert page.evaluate(f"{TL_JS}.lastDraw.events") < N_EVENTS
    drag = f"""(() => {{ const tl = {TL_JS}, c = tl.canvas, r = c.getBoundingClientRect(), x = r.left + 600, y = r.top + 80;
        c.dispatchEvent(new MouseEvent('mousedown', {{clientX: x, clientY: y, button: 0, bubbles: true}}));
        window.dispatchEvent(new MouseEvent('mousemove', {{clientX: x - 100, clientY: y, bubbles: true}}));
        window.dispatchEvent(new MouseEvent('mouseup', {{clientX: x - 100, clientY: y, bubbles: true}}));
        return Object.assign({{}}, tl.view); }})()"""
    d = page.evaluate(drag)
    assert d["t1"] - d["t0"] == pytest.approx(span1)
    assert d["t0"] > z["view"]["t0"]  # dragging left moves later in time
    # hover over a nested child (depth 1) and its parent (depth 0), zoomed in on the first 3 ms
    page.evaluate(f"Object.assign({TL_JS}.view, {{t0: {T0 - 100}, t1: {T0 + 3000}}}), {TL_JS}.draw()")
    for ts, depth, name in ((T0 + 60, 1, NAMES[2]), (T0 + 990, 0, NAMES[0])):
        tip = page.evaluate(f"""(() => {{ const tl = {TL_JS}, p = tl.locate(0, {ts}, {depth});
            tl.canvas.dispatchEvent(new MouseEvent('mousemove', {{clientX: p.x, clientY: p.y, bubbles: true}}));
            const tip = document.querySelector('.tip'); return tip.style.display === 'block' ? tip.innerText : ''; }})()""")
        assert tip.startswith(name) and "kind: cpu op" in tip and "duration:" in tip, tip
    assert "duration: 1.00 ms" in tip and "start: +0" in tip
    page.evaluate("document.querySelector('button.tl-reset').click()")
    assert page.evaluate(f"{TL_JS}.view") == full
    assert page.errors == []


SAVE_JS = "Array.from(document.querySelectorAll('.block-timeline button')).find(b => b.textContent === 'Perfetto JSON')"


def test_timeline_reads_the_trace_and_downloads_it_unchanged(page, tmp_path):
    trace = json.loads(json.dumps(make_timeline()["trace"], default=int))  # numpy numbers as the page has them
    saved = page.download(f"{SAVE_JS}.click()", tmp_path / "download")
    assert saved.name == "timeline.json" and saved.read_bytes() == timeline_json(trace)
    first = next(e for e in json.loads(saved.read_bytes())["traceEvents"] if e["ph"] == "X")
    assert first["name"] == first["args"]["note"] == EVIL  # hostile names kept as they are
    # the canvas's tracks, in the trace's order, named by its metadata; flows joined; highlights on their slices
    view = page.evaluate(
        f"(() => {{ const tl = {TL_JS}; return {{tracks: tl.b.tracks, flows: tl.b.flows.length, "
        "hl: tl.hl.map(h => [h[0], h[3]]), kinds: tl.b.kinds}; })()"
    )
    assert view["tracks"] == TRACKS and view["flows"] == 50
    assert view["kinds"] == ["cpu op", "<i>comm</i>", "kernel"]  # in the order the slices name them
    assert view["hl"] == [[0, 0]] * 20 + [[3, 0]] * 10
    assert page.errors == []


def test_intervals_warnings_and_bar_columns(browser, tmp_path):
    """The blocks the benchmark and fleet reports need: samples with their intervals on a log and
    a linear axis, a warning set apart, numbers drawn as bars in their table cells."""
    rng = np.random.default_rng(0)
    fast, slow = rng.lognormal(-7, 0.05, 40), rng.lognormal(-4, 0.8, 25)
    rows = [
        {"label": "fast <b>", "note": "result, n=40", "group": 0, "samples": fast, "outliers": [3, 7],
         "median": float(np.median(fast)), "median_ci": [fast.min(), fast.max()], "mean_ci": [float(fast.mean()), None]},
        {"label": "slow", "samples": slow, "group": 1, "median": float(np.median(slow)), "mean_ci": [-1.0, 0.5]},
    ]  # fmt: skip
    doc = _doc_with(
        {"type": "intervals", "title": "log", "unit": "s", "log": True, "groups": ["result", "baseline"], "rows": rows}
    )
    doc["sections"][0]["blocks"] += [
        {"type": "intervals", "title": "linear", "unit": "s", "groups": ["result"], "rows": rows[:1]},
        {"type": "text", "text": "look <b>out</b>", "warn": True},
        {
            "type": "table",
            "columns": [{"key": "k"}, {"key": "v", "format": "int", "bar": True}],
            "rows": [{"k": "a", "v": 10}, {"k": "b", "v": -5}, {"k": "c", "v": None}],
        },
    ]
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', render_html(doc), re.S).group(1))
    got = data["sections"][0]["blocks"][1]["rows"]
    assert got[1]["note"] == "" and got[1]["outliers"] == [] and got[1]["median_ci"] is None  # defaults filled
    assert "warn" not in data["sections"][0]["blocks"][0]  # optional fields stay out unless given
    path = tmp_path / "blocks.html"
    path.write_text(render_html(doc), encoding="utf-8")
    page = browser.open(path)
    assert page.errors == [] and page.evaluate("document.body.dataset.rendered") == "5"
    counts = page.evaluate("""Array.from(document.querySelectorAll('svg.intervals'), s => [
        s.querySelectorAll('circle').length, s.querySelectorAll('circle[fill="#d1342f"]').length,
        s.querySelectorAll('.ci-median').length, s.querySelectorAll('.ci-mean').length,
        s.querySelectorAll('line.median').length])""")
    assert counts == [[65, 2, 1, 1, 2], [40, 2, 1, 0, 1]]  # (an interval with an open end is not drawn)
    assert page.evaluate("document.querySelector('p.text.warn').innerText") == "look <b>out</b>"
    bars = page.evaluate("Array.from(document.querySelectorAll('.cell-bar'), b => b.style.width)")
    assert bars == ["100px", "50px"]
    page.screenshot(ARTIFACTS / "report_intervals.png")


def test_block_error_is_isolated(browser, tmp_path):
    doc = {
        "title": "t",
        "sections": [
            {
                "id": "s",
                "title": "S",
                "blocks": [
                    {"type": "text", "text": "before"},
                    {"type": "bars", "title": "b", "categories": ["a"], "series": [{"name": "x", "values": [1]}]},
                    {"type": "text", "text": "after"},
                ],
            }
        ],
    }
    html = render_html(doc)
    assert html.count('"categories":["a"]') == 1
    path = tmp_path / "broken.html"  # bypasses the Python checks to break the JS renderer
    path.write_text(html.replace('"categories":["a"]', '"categories":null'), encoding="utf-8")
    broken = browser.open(path)
    assert broken.evaluate("document.body.dataset.rendered") == "2"
    assert broken.evaluate("document.querySelectorAll('.block-error').length") == 1
    assert "after" in broken.evaluate("document.body.innerText")
    assert len(broken.errors) == 1 and 'section "s" block 1' in broken.errors[0], broken.errors


def test_timeline_that_cannot_unpack_is_an_error_box(browser, tmp_path):
    html = render_html(_doc_with(TL))
    packed = re.search(r'"trace_gz":"([^"]+)"', html).group(1)
    path = tmp_path / "bad-timeline.html"  # bypasses the Python side to break the embedded file
    path.write_text(html.replace(packed, base64.b64encode(b"not gzip").decode()), encoding="utf-8")
    bad = browser.open(path)
    assert bad.evaluate("document.body.dataset.rendered") == "1"  # set once the timeline has failed
    assert bad.evaluate("document.querySelectorAll('.block-error').length") == 1
    assert bad.evaluate("window.__report.timelines.length") == 0
    assert len(bad.errors) == 1 and 'section "sec" block 1 (timeline) failed' in bad.errors[0], bad.errors


def test_deep_copy_of_document_is_not_modified():
    doc = make_doc()
    before = copy.deepcopy(doc["sections"][1])
    render_html(doc)
    assert doc["sections"][1] == before  # defaults are filled into a copy


def test_a_huge_name_is_shortened_in_the_page(tmp_path):
    """A 16 MB op name in every table made a 67 MB page no browser renders (attack audit, defect
    10): the report shows each string up to `MAX_TEXT` characters and says how long it was."""
    from chakra_trace.cli import main
    from chakra_trace.document import MAX_TEXT
    from chakra_trace.io.et import write_trace
    from chakra_trace.schema.builder import TraceBuilder

    name = "aten::" + "x" * (4 << 20)
    b = TraceBuilder()
    prev = b.comp(name, 100, start=0)
    b.comp(name, 50, deps=[prev], start=100)
    write_trace(b.build(), tmp_path / "big.0.et")
    assert main(["report", str(tmp_path / "big.0.et"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert len(page) < 2 << 20, len(page)
    assert f"({len(name):,} characters)" in page
    assert "x" * MAX_TEXT not in page
