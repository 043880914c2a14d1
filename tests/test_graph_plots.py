"""Graph export (DOT / GraphML / Graphviz rendering) and static plots."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from chakra_trace.analyze.breakdown import breakdown
from chakra_trace.analyze.collectives import communication_matrix, imbalance
from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.visualize import graph as G
from chakra_trace.visualize import plots as P

GML = "{http://graphml.graphdrawing.org/xmlns}"
WEIRD = [
    "aten::add_",
    "<lambda>",
    'say "hi"',
    "back\\slash",
    "trailing\\",
    "a & b <c> 'd'",
    "two\nlines",
    "crlf\r\nend",
    "bell\x07char",
    "\\n not a newline",
    "ünïcødé ∑",
]


# ---------------------------------------------------------------------- fixtures and helpers
@pytest.fixture(scope="session")
def ddp(ddp_pair) -> Workload:  # the converted DDP pair (conftest), shared: tests must not change it
    return ddp_pair


@pytest.fixture(scope="module")
def ddp_prefix(ddp, tmp_path_factory) -> str:
    prefix = tmp_path_factory.mktemp("job") / "ddp"
    ddp.save(prefix)
    return str(prefix)


def imbalanced_workload() -> Workload:
    """4 ranks, 3 all-reduces each: rank 2 sends twice the bytes in #1, rank 3 nothing in #2."""
    traces = {}
    for r in range(4):
        b = TraceBuilder()
        prev = b.comp("fwd", 1000 + 100 * r)
        for k, size in enumerate([1 << 20, 4 << 20, 64 << 10]):
            size = 2 * size if (r, k) == (2, 1) else 0 if (r, k) == (3, 2) else size
            prev = b.collective("ALL_REDUCE", size, deps=[prev], duration=300, start=800 + 400 * k)
            prev = b.comp("bwd", 250, deps=[prev], start=1100 + 400 * k)
        traces[r] = b.build()
    return Workload(traces)


def chain_trace():
    """a -> b -> c -> d -> e (data), plus x with a control dependency on a, and a lone node."""
    b = TraceBuilder()
    a = b.comp("a", 12_500)
    n_b = b.comp("b", 830, deps=[a])
    c = b.collective("ALL_REDUCE", 4 << 20, name="c", deps=[n_b], duration=2_500_000)
    d = b.comp("d", 5, deps=[c])
    b.comp("e", 0, deps=[d])
    b.add("x", "COMP_NODE", ctrl_deps=[a], duration=1)
    b.comp("lone", 7, deps=[12345])  # a dependency on a node that is not in the trace
    return b.build()


def weird_trace():
    b = TraceBuilder()
    prev = None
    for i, name in enumerate(WEIRD):
        prev = b.comp(name, 10 * i, deps=[] if prev is None else [prev])
    b.collective("ALL_REDUCE", 1 << 20, name='ar "x" <&>', deps=[prev], ctrl_deps=[0], pg_name='pg<"0">&')
    return b.build()


_QSTR = r'"((?:[^"\\]|\\.)*)"'
_NODE_LINE = re.compile(r"^  (n\w+) \[label=" + _QSTR + r', shape=(\w+), fillcolor="(#[0-9a-f]{6})"\];$')
_EDGE_LINE = re.compile(r"^  (n\w+) -> (n\w+)( \[style=dashed\])?;$")


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), s)


def parse_dot(text: str):
    """Every line of our DOT output classified: (nodes {key: (label, shape)}, edges [(a, b, dashed)])."""
    lines = text.splitlines()
    assert lines[0].startswith("// chakra-trace graph: ")
    assert re.match(r'^digraph "[^"]*" \{$', lines[1]) and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[2:-1]:
        if line.startswith(("  graph [", "  node [", "  edge [")):
            continue
        m = _NODE_LINE.match(line)
        if m:
            assert m.group(1) not in nodes
            nodes[m.group(1)] = (_unescape(m.group(2)), m.group(3))
            continue
        m = _EDGE_LINE.match(line)
        assert m, f"unexpected DOT line: {line!r}"
        edges.append((m.group(1), m.group(2), bool(m.group(3))))
    assert {e[0] for e in edges} | {e[1] for e in edges} <= set(nodes)
    return nodes, edges


def parse_graphml(text: str):
    root = ET.fromstring(text)
    keys = {k.get("id"): (k.get("for"), k.get("attr.name"), k.get("attr.type")) for k in root.iter(GML + "key")}
    (g,) = root.findall(GML + "graph")
    for d in root.iter(GML + "data"):
        assert d.get("key") in keys
    nodes = {
        n.get("id"): {d.get("key"): d.text or "" for d in n.findall(GML + "data")} for n in g.findall(GML + "node")
    }
    edges = [(e.get("source"), e.get("target"), e.find(GML + "data").text) for e in g.findall(GML + "edge")]
    gdata = {d.get("key"): d.text for d in g.findall(GML + "data")}
    return keys, nodes, edges, gdata


# ---------------------------------------------------------------------- graph export
def test_units():
    assert G.format_duration(12_500) == "12.5 ms" and G.format_duration(830) == "830 µs"
    assert G.format_duration(2_500_000) == "2.5 s" and G.format_duration(0) == "0 µs"
    assert G.format_duration(1_000) == "1 ms" and G.format_duration(99_999) == "100 ms"
    assert G.format_bytes(4 << 20) == "4 MiB" and G.format_bytes(512) == "512 B"
    assert G.format_bytes(1536) == "1.5 KiB"


def test_dot_of_the_converted_ddp_rank(ddp):
    t = ddp[0]
    nodes, edges = parse_dot(G.to_dot(t))
    assert len(nodes) == len(t)
    _, dep, _ = t.dep_rows("data")
    assert len(edges) == int((dep >= 0).sum()) and not any(e[2] for e in edges)
    # every label: name, then type (+ collective and bytes) and the duration in its unit
    for row in (0, len(t) // 2, len(t) - 1):
        label, shape = nodes[f"n{int(t.ids[row])}"]
        assert label.startswith(t.names[t.name_codes[row]] + "\n")
        assert label.endswith(" · " + G.format_duration(int(t.duration[row])))
    colls = [lab for lab, shape in nodes.values() if shape == "hexagon"]
    assert len(colls) == int((t.types == 7).sum()) and all(
        "COMM_COLL ALL_REDUCE" in c or "COMM_COLL ALL_GATHER" in c for c in colls
    )
    assert all(re.search(r" \d+(\.\d+)? (B|KiB|MiB|GiB) · ", c) for c in colls)


def test_data_edges_solid_control_edges_dashed_and_skips_counted():
    t = chain_trace()
    text = G.to_dot(t)
    nodes, edges = parse_dot(text)
    assert len(nodes) == 7
    assert sorted((a, b) for a, b, dashed in edges if not dashed) == [
        ("n0", "n1"),
        ("n1", "n2"),
        ("n2", "n3"),
        ("n3", "n4"),
    ]
    assert [(a, b) for a, b, dashed in edges if dashed] == [("n0", "n5")]
    assert nodes["n0"][0] == "a\nCOMP · 12.5 ms" and nodes["n1"][0] == "b\nCOMP · 830 µs"
    assert nodes["n2"] == ("c\nCOMM_COLL ALL_REDUCE 4 MiB · 2.5 s", "hexagon")
    assert "1 on missing nodes" in text.splitlines()[0] and "skipped_missing=1 skipped_outside=0" in text
    res = G.export_graph(t, name="^c$")
    assert (res.nodes, res.data_edges, res.skipped_outside, res.skipped_missing) == (1, 0, 2, 0)


def test_weird_names_are_escaped_in_dot_and_graphml():
    t = weird_trace()
    nodes, edges = parse_dot(G.to_dot(t))
    labels = [nodes[f"n{i}"][0] for i in range(len(WEIRD))]
    for name, label in zip(WEIRD, labels):
        want = name.replace("\r\n", "\n").replace("\x07", "\ufffd")
        assert label.startswith(want + "\nCOMP · "), (name, label)
    assert len(edges) == len(WEIRD) + 1 and sum(e[2] for e in edges) == 1
    keys, gnodes, gedges, _ = parse_graphml(G.to_graphml(t))
    for i, name in enumerate(WEIRD):
        assert gnodes[f"n{i}"]["name"] == name.replace("\x07", "\ufffd")  # GraphML keeps CR
    ar = gnodes[f"n{len(WEIRD)}"]
    assert ar["name"] == 'ar "x" <&>' and ar["pg_name"] == 'pg<"0">&' and ar["comm_type"] == "ALL_REDUCE"


def test_graphml_keys_counts_and_attributes(ddp):
    t = ddp[1]
    keys, nodes, edges, gdata = parse_graphml(G.to_graphml(t))
    for k in ("id", "name", "type", "duration_us", "start_us", "comm_type", "comm_size", "pg_name"):
        assert keys[k][0] == "node" and keys[k][1] == k
    assert keys["duration_us"][2] == "long" and keys["kind"][0] == "edge"
    assert len(nodes) == len(t) == int(gdata["nodes"])
    _, dep, _ = t.dep_rows("data")
    assert len(edges) == int((dep >= 0).sum()) and {e[2] for e in edges} == {"data"}
    coll = np.flatnonzero(t.types == 7)
    for row in coll.tolist():
        n = nodes[f"n{int(t.ids[row])}"]
        assert int(n["comm_size"]) == int(t.comm_size[row]) and int(n["duration_us"]) == int(t.duration[row])
    assert sum("comm_type" in n for n in nodes.values()) == coll.size


def test_chain_graphml_edges_and_skip_counts():
    keys, nodes, edges, gdata = parse_graphml(G.to_graphml(chain_trace()))
    assert sorted(e[2] for e in edges) == ["ctrl"] + ["data"] * 4
    assert (gdata["skipped_missing"], gdata["skipped_outside"]) == ("1", "0")
    assert nodes["n0"]["duration_us"] == "12500" and nodes["n0"]["type"] == "COMP_NODE"


def test_size_cap_says_how_to_proceed(ddp):
    t = ddp[0]
    with pytest.raises(ChakraError, match=rf"{len(t)} nodes, over the cap of 10") as e:
        G.to_dot(t, max_nodes=10)
    assert "--name" in str(e.value) and "--max-nodes" in str(e.value)
    nodes, _ = parse_dot(G.to_dot(t, max_nodes=10, name=r"^c10d::allreduce_$"))
    assert 0 < len(nodes) <= 10


def test_name_selection_with_neighbors_and_rows():
    t = chain_trace()

    def sel(**kw):
        return sorted(lab.split("\n")[0] for lab, _ in parse_dot(G.to_dot(t, **kw))[0].values())

    assert sel(name="^c$") == ["c"]
    assert sel(name="^c$", neighbors=1) == ["b", "c", "d"]
    assert sel(name="^c$", neighbors=2) == ["a", "b", "c", "d", "e"]
    assert sel(name="^c$", neighbors=3) == ["a", "b", "c", "d", "e", "x"]  # x hangs off a by a control dep
    assert sel(name="^x$", neighbors=1) == ["a", "x"]
    assert sel(rows=[0, 1]) == ["a", "b"]
    assert sel(rows=np.arange(len(t)) < 2, name="b") == ["b"]
    _, edges = parse_dot(G.to_dot(t, rows=[0, 1]))
    assert edges == [("n0", "n1", False)]
    with pytest.raises(ChakraError, match="no op name matches"):
        G.to_dot(t, name="^nothing$")
    with pytest.raises(ChakraError, match="not a valid regular expression"):
        G.to_dot(t, name="(")
    with pytest.raises(ChakraError, match="out of range"):
        G.to_dot(t, rows=[99])


def test_streamed_files_match_the_text_across_chunks(tmp_path, monkeypatch):
    t = weird_trace()
    dot, gml = G.to_dot(t), G.to_graphml(t)
    monkeypatch.setattr(G, "_CHUNK", 3)  # many chunk boundaries
    p = G.to_dot(t, tmp_path / "g.dot")
    assert p == tmp_path / "g.dot" and p.read_bytes().decode() == dot
    assert G.to_graphml(t, tmp_path / "g.graphml").read_bytes().decode() == gml
    G.to_dot(t, tmp_path / "g.dot.gz")
    assert gzip.decompress((tmp_path / "g.dot.gz").read_bytes()).decode() == dot
    assert sorted(x.name for x in tmp_path.iterdir()) == ["g.dot", "g.dot.gz", "g.graphml"]  # no temp files left


def test_repeated_ids_get_distinct_node_keys():
    b = TraceBuilder()
    b.comp("a", 1, id=5)
    b.comp("b", 2, id=5)
    b.comp("c", 3, deps=[5])
    nodes, edges = parse_dot(G.to_dot(b.build()))
    assert len(nodes) == 3 and len(edges) == 1


def test_render_without_graphviz_is_a_clear_error(tmp_path, monkeypatch):
    dot = G.to_dot(chain_trace(), tmp_path / "g.dot")
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    with pytest.raises(ChakraError, match="Graphviz is not installed") as e:
        G.render(dot, tmp_path / "g.svg")
    assert "apt install graphviz" in str(e.value) and str(dot) in str(e.value)
    assert not (tmp_path / "g.svg").exists()


def test_render_refuses_huge_graphs_and_times_out(tmp_path, monkeypatch):
    dot = G.to_dot(chain_trace(), tmp_path / "g.dot")
    with pytest.raises(ChakraError, match=r"too big to render, 7 nodes \(cap 5\)"):
        G.render(dot, tmp_path / "g.svg", max_nodes=5)
    with pytest.raises(ChakraError, match=r"too big to render, 5 edges \(cap 4\)"):
        G.render(dot, tmp_path / "g.svg", max_edges=4)
    foreign = tmp_path / "f.dot"
    foreign.write_text('digraph {\n  node [shape=box];\n  a;\n  b [label="x"];\n  "c d"\n  a -> b;\n}\n')
    with pytest.raises(ChakraError, match=r"3 nodes \(cap 2\) and 1 edges \(cap 0\)"):
        G.render(foreign, tmp_path / "f.svg", max_nodes=2, max_edges=0)
    with pytest.raises(ChakraError, match="cannot render"):
        G.render(dot, tmp_path / "g.bmp")

    def slow(*a, **k):
        raise subprocess.TimeoutExpired(a[0], k.get("timeout"))

    monkeypatch.setattr(shutil, "which", lambda *a, **k: "/usr/bin/dot")
    monkeypatch.setattr(subprocess, "run", slow)
    with pytest.raises(ChakraError, match="did not finish"):
        G.render(dot, tmp_path / "g.svg", timeout=1)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.dot", "g.dot"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_real_graphviz_render(tmp_path):
    dot = G.to_dot(weird_trace(), tmp_path / "w.dot")
    svg = G.render(dot, tmp_path / "w.svg")
    root = ET.parse(svg).getroot()
    text = "".join(root.itertext())
    assert "<lambda>" in text and 'say "hi"' in text and "back\\slash" in text and "trailing\\" in text
    png = G.render(G.to_dot(chain_trace(), tmp_path / "c.dot"), tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ET.parse(G.render(G.to_dot(chain_trace(), tmp_path / "z.dot.gz"), tmp_path / "z.svg"))
    bad = tmp_path / "bad.dot"
    bad.write_text('digraph { a -> ; "unclosed }\n')
    with pytest.raises(ChakraError, match="Graphviz failed"):
        G.render(bad, tmp_path / "bad.svg")
    assert not (tmp_path / "bad.svg").exists()


# ---------------------------------------------------------------------- plots
def _check_image(path):
    data = path.read_bytes()
    assert data
    if path.suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        ET.fromstring(data)
    return data.decode("utf-8", "replace")


@pytest.fixture
def svg_text():
    """Keep text as text in SVGs so the tests can read titles and labels."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none"}):
        yield


@pytest.mark.parametrize("which", ["ddp", "imbalanced"])
def test_plots_write_png_and_svg(which, ddp, tmp_path, svg_text):
    w = ddp if which == "ddp" else imbalanced_workload()
    made = {
        "breakdown": lambda p: P.plot_breakdown(breakdown(w), p),
        "imbalance": lambda p: P.plot_imbalance(imbalance(w), p),
        "matrix": lambda p: P.plot_matrix(communication_matrix(w), p),
    }
    texts = {}
    for kind, fn in made.items():
        for suffix in (".png", ".svg"):
            p = tmp_path / f"{kind}{suffix}"
            assert fn(p) == p
            texts[kind, suffix] = _check_image(p)
    assert "rank" in texts["breakdown", ".svg"] and "exposed comm" in texts["breakdown", ".svg"]
    assert "bytes sent" in texts["matrix", ".svg"]
    if which == "imbalanced":
        svg = texts["imbalance", ".svg"]
        assert "all#1 ALL_REDUCE" in svg and "all#2 ALL_REDUCE" in svg and "all#0" not in svg
        assert "2 of 3 instances" in svg
    else:
        assert f"no imbalance in {imbalance(w).checked} collective instances" in texts["imbalance", ".svg"]
    assert sorted(x.suffix for x in tmp_path.iterdir()).count(".tmp") == 0


def test_breakdown_of_many_ranks_is_a_distribution(tmp_path, svg_text):
    rows = [
        {
            "rank": r,
            "span_us": 5000.0,
            "compute_us": 3000.0 + r % 13,
            "comm_us": 1300.0,
            "overlap_us": 500.0,
            "exposed_comm_us": 800.0 + (r == 1234) * 900,
            "idle_us": 700.0 - (r == 1234) * 900 - r % 13,
        }
        for r in range(2000)
    ]
    p = P.plot_breakdown(types.SimpleNamespace(rows=rows), tmp_path / "b.svg")
    svg = _check_image(p)
    assert "over 2,000 ranks" in svg and "most exposed comm: rank 1234" in svg
    assert "time (ms)" in svg


def test_big_jobs_are_capped_or_binned(tmp_path, svg_text):
    from chakra_trace.analyze.collectives import CommMatrix, Imbalance, ImbalanceReport

    found = []
    for k in range(40):
        sizes = {r: 1024 for r in range(100)}
        sizes[k] = 1024 * (k + 2)  # instance k: rank k sends k + 2 times the median
        found.append(Imbalance("", k, "ALL_GATHER", sizes, 1024.0, k + 2.0, [k], {r: 0 for r in sizes}))
    svg = _check_image(
        P.plot_imbalance(ImbalanceReport(50, found, 0.0), tmp_path / "i.svg", max_instances=10, max_ranks=8)
    )
    assert "40 of 50 instances" in svg and "showing the 10 most skewed, 8 of 100 ranks" in svg
    assert "all#39 ALL_GATHER" in svg and "all#29 ALL_GATHER" not in svg  # the most skewed are kept
    m = np.zeros((600, 600))
    m[np.arange(600), (np.arange(600) + 1) % 600] = 1 << 20
    svg = _check_image(P.plot_matrix(CommMatrix(list(range(600)), m), tmp_path / "m.svg", max_side=100))
    assert "bins of 6 ranks" in svg and "600 MiB between 600 ranks" in svg


def test_roofline_plot_from_a_stand_in(tmp_path, svg_text):
    import pandas as pd

    peak, bw = 989e12, 3.35e12
    rng = np.random.default_rng(0)
    intensity = 10 ** rng.uniform(-1, 3, 200)
    attainable = np.minimum(peak, bw * intensity)
    achieved = attainable * rng.uniform(0.01, 0.9, 200)
    achieved[:3] = np.nan  # untimed ops are left out
    df = pd.DataFrame(
        {
            "name": ["op"] * 200,
            "intensity": intensity,
            "achieved_flops": achieved,
            "attainable_flops": attainable,
            "bound": np.where(intensity < peak / bw, "memory", "compute"),
            "duration_us": rng.integers(0, 1000, 200),
            "flops": achieved,
        }
    )
    device = types.SimpleNamespace(name="TestGPU-X", peak_flops=peak, mem_bw=bw, ridge=peak / bw)
    rf = types.SimpleNamespace(device=device, to_pandas=lambda: df)
    svg = _check_image(P.plot_roofline(rf, tmp_path / "r.svg"))
    assert "TestGPU-X" in svg and "197 of 200 ops" in svg and "memory bound" in svg and "compute bound" in svg
    _check_image(P.plot_roofline(rf, tmp_path / "r.png"))
    empty = types.SimpleNamespace(device=device, to_pandas=lambda: df.iloc[:0])
    assert "no op with FLOPs" in _check_image(P.plot_roofline(empty, tmp_path / "e.svg"))


def test_plot_errors(tmp_path, monkeypatch):
    w = imbalanced_workload()
    with pytest.raises(ChakraError, match="expected one of .png"):
        P.plot_matrix(communication_matrix(w), tmp_path / "m.jpg")
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(ChakraError, match=r"pip install 'chakra-trace\[plot\]'"):
        P.plot_breakdown(breakdown(w), tmp_path / "b.png")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- CLI
def test_cli_graph(ddp_prefix, tmp_path, capsys, monkeypatch):
    out = tmp_path / "g.dot"
    assert main(["graph", ddp_prefix, "-o", str(out), "--name", "allreduce", "--neighbors", "1"]) == 0
    nodes, _ = parse_dot(out.read_text())
    assert 0 < len(nodes) < 100 and any("c10d::allreduce_" in lab for lab, _ in nodes.values())
    assert "wrote" in capsys.readouterr().out
    assert main(["graph", ddp_prefix + ".1.et", "-o", str(tmp_path / "g.graphml"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["format"] == "graphml" and res["nodes"] > 100
    assert main(["graph", ddp_prefix, "--rank", "1", "-o", str(tmp_path / "x.dot"), "--max-nodes", "5"]) == 2
    err = capsys.readouterr().err
    assert "over the cap of 5" in err and "--name" in err
    assert main(["graph", ddp_prefix, "--rank", "7", "-o", str(tmp_path / "x.dot")]) == 2
    assert "no rank 7" in capsys.readouterr().err
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    assert main(["graph", ddp_prefix, "-o", str(tmp_path / "d.svg"), "--name", "allreduce"]) == 2
    assert "Graphviz is not installed" in capsys.readouterr().err
    assert (tmp_path / "d.dot").is_file() and not (tmp_path / "d.svg").exists()


def test_cli_plot(ddp_prefix, tmp_path, capsys):
    for kind in ("breakdown", "imbalance", "matrix"):
        out = tmp_path / f"{kind}.png"
        assert main(["plot", kind, ddp_prefix, "-o", str(out)]) == 0, capsys.readouterr().err
        _check_image(out)
    assert main(["plot", "matrix", ddp_prefix, "-o", str(tmp_path / "m.gif")]) == 2
    assert "expected one of" in capsys.readouterr().err


def test_cli_plot_roofline(ddp_prefix, tmp_path, capsys):
    pytest.importorskip("chakra_trace.analyze.roofline")
    out = tmp_path / "r.svg"
    assert main(["plot", "roofline", ddp_prefix, "--device", "h100", "-o", str(out)]) == 0, capsys.readouterr().err
    _check_image(out)
