"""A trace's operation graph as Graphviz DOT or GraphML, and DOT rendered with Graphviz.

Real traces have up to millions of nodes, far more than a drawing can show, so an export
works on a selection (rows, or a regex on op names plus N hops of neighbors) under a node
cap, streams its text chunk by chunk into an atomic temp file, and formats label pieces once
per distinct name / type / duration instead of once per node.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..errors import ChakraError
from ..io.et import atomic_output
from ..schema.enums import COMM_NODE_TYPES, Attr, NodeType, collective_name, node_type_name
from ..schema.trace import Trace
from ..table import Table, Tabular

MAX_NODES = 20_000  # export cap: beyond this a picture is unreadable and viewers slow down
# Graphviz's layout is super-linear, in edges above all: on the ResNet-50 DDP trace 600 nodes
# with 1,954 edges take 6 s, 200 nodes with 2,264 edges (denser) over a minute
RENDER_MAX_NODES = 2_000
RENDER_MAX_EDGES = 2_000
RENDER_TIMEOUT_S = 120
RENDER_FORMATS = ("svg", "pdf", "png")
_CHUNK = 1 << 14  # nodes / edges formatted per write
_LABEL_CHARS = 80  # longer names are shortened in DOT labels (GraphML keeps them whole)

# NodeType -> (Graphviz shape, fill color)
_STYLE: dict[int, tuple[str, str]] = {
    NodeType.COMP_NODE: ("box", "#cfe2ff"),
    NodeType.COMM_COLL_NODE: ("hexagon", "#ffd8a8"),
    NodeType.COMM_SEND_NODE: ("house", "#ffc9c9"),
    NodeType.COMM_RECV_NODE: ("invhouse", "#ffc9c9"),
    NodeType.MEM_LOAD_NODE: ("folder", "#d3f9d8"),
    NodeType.MEM_STORE_NODE: ("tab", "#d3f9d8"),
    NodeType.METADATA_NODE: ("note", "#e9ecef"),
}
_DEFAULT_STYLE = ("ellipse", "#ffffff")

# characters XML 1.0 forbids (and Graphviz's SVG output would then carry): control
# characters other than tab/newline/CR, lone surrogates, U+FFFE/U+FFFF
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_NEWLINES = re.compile(r"\r\n|\r|\n")


# ---------------------------------------------------------------------- formatting
def _sig(v: float) -> str:
    s = f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


def format_duration(us: float) -> str:
    """µs as a short human string: 830 µs, 12.5 ms, 1.2 s."""
    us = float(us)
    if us >= 1e6:
        return f"{_sig(us / 1e6)} s"
    if us >= 1e3:
        return f"{_sig(us / 1e3)} ms"
    return f"{_sig(us)} µs"


def format_bytes(n: float) -> str:
    """Bytes in binary units: 512 B, 4 KiB, 1.5 MiB."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{_sig(n)} {unit}"
        n /= 1024
    return f"{_sig(n)} PiB"  # pragma: no cover


def _clean(s: str) -> str:
    return _BAD_CHARS.sub("\ufffd", s)


def dot_escape(s: str) -> str:
    """Text for a double-quoted DOT string: backslashes and quotes escaped, newlines as \\n."""
    s = _clean(s).replace("\\", "\\\\").replace('"', '\\"')
    return _NEWLINES.sub(r"\\n", s)


def xml_escape(s: str) -> str:
    """Text for XML element content (and attribute values): &, <, >, quotes escaped."""
    s = _clean(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace('"', "&quot;").replace("\r", "&#13;")  # a raw CR would be read back as a newline


def _short(s: str) -> str:
    return s if len(s) <= _LABEL_CHARS else s[: _LABEL_CHARS - 1] + "…"


def _type_label(t: int) -> str:
    name = node_type_name(int(t))
    return name[:-5] if name.endswith("_NODE") else name


# ---------------------------------------------------------------------- selection
def _edges(trace: Trace) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """kind -> (dependency row or -1 if missing, dependent row): edges in execution order."""
    out = {}
    for kind in ("data", "ctrl"):
        dependent, dependency, _ids = trace.dep_rows(kind)
        out[kind] = (dependency, dependent)
    return out


def select_rows(
    trace: Trace, rows=None, name: str | None = None, neighbors: int = 0, *, edges: dict | None = None
) -> np.ndarray:
    """Sorted rows of the part of the graph to show: `rows` (indices or a boolean mask) and/or
    op names matching the regex `name` (both: their intersection), then `neighbors` hops of
    direct predecessors and successors (data or control). Nothing given: every row."""
    n = len(trace)
    mask = np.ones(n, bool)
    if rows is not None:
        r = np.asarray(rows)
        if r.dtype == bool:
            if r.shape != (n,):
                raise ChakraError(f"rows: a boolean mask must have one entry per node ({n:,}), got shape {r.shape}")
            mask &= r
        else:
            if r.size and not np.issubdtype(r.dtype, np.integer):
                raise ChakraError(f"rows: expected integer row indices or a boolean mask, got dtype {r.dtype}")
            r = r.astype(np.int64).ravel()
            if r.size and (r.min() < 0 or r.max() >= n):
                bad = int(r[(r < 0) | (r >= n)][0])
                raise ChakraError(f"rows: row {bad} is out of range; the trace has {n:,} nodes (rows 0..{n - 1})")
            m = np.zeros(n, bool)
            m[r] = True
            mask &= m
    if name is not None:
        try:
            rx = re.compile(name)
        except re.error as e:
            raise ChakraError(f"name: {name!r} is not a valid regular expression: {e}") from None
        hit = np.fromiter((rx.search(s) is not None for s in trace.names), bool, len(trace.names))
        mask &= hit[trace.name_codes]
        if not mask.any():
            raise ChakraError(f"name: no op name matches {name!r} (the trace has {len(trace.names):,} distinct names)")
    if neighbors < 0:
        raise ChakraError(f"neighbors: expected a number of hops >= 0, got {neighbors}")
    if neighbors and not mask.all():
        edges = _edges(trace) if edges is None else edges
        pairs = [(a[a >= 0], b[a >= 0]) for a, b in edges.values()]
        for _ in range(int(neighbors)):
            grown = mask.copy()
            for a, b in pairs:
                grown[a[mask[b]]] = True
                grown[b[mask[a]]] = True
            if np.array_equal(grown, mask):
                break
            mask = grown
    return np.flatnonzero(mask)


# ---------------------------------------------------------------------- export
@dataclass
class GraphExport(Tabular):
    """What an export wrote: counts of nodes and edges, and the dependencies left out
    because one end is outside the selection (`skipped_outside`) or not in the trace at all
    (`skipped_missing`). `text` holds the output when no path was given."""

    format: str
    path: Path | None
    nodes: int
    data_edges: int
    ctrl_edges: int
    skipped_missing: int
    skipped_outside: int
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k != "text"}
        d["path"] = None if self.path is None else str(self.path)
        return d

    def to_table(self) -> Table:
        """One row: the export's counts."""
        return Table.from_records([self.to_dict()], title=f"graph export ({self.format})")


class _Graph:
    """The selected subgraph as arrays, with label pieces tabulated per distinct value."""

    def __init__(self, trace: Trace, sel: np.ndarray, edges: dict):
        self.trace, self.sel = trace, sel
        k = sel.size
        pos = np.full(len(trace), -1, np.int64)
        pos[sel] = np.arange(k)
        self.edges: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.skipped_missing = self.skipped_outside = 0
        for kind, (a, b) in edges.items():
            b_in = pos[b] >= 0
            a_ok = a >= 0
            a_in = np.zeros(a.size, bool)
            a_in[a_ok] = pos[a[a_ok]] >= 0
            keep = a_in & b_in
            self.edges[kind] = (pos[a[keep]], pos[b[keep]])
            self.skipped_missing += int((b_in & ~a_ok).sum())
            self.skipped_outside += int((b_in & a_ok & ~a_in).sum() + (a_in & ~b_in).sum())
        self.ids = trace.ids[sel]
        self.unique_ids = np.unique(self.ids).size == k
        self.types = trace.types[sel]
        self.name_codes, self.name_inv = np.unique(trace.name_codes[sel], return_inverse=True)
        self.type_codes, self.type_inv = np.unique(self.types, return_inverse=True)
        self.durations, self.dur_inv = np.unique(trace.duration[sel], return_inverse=True)
        self.dur_text = np.array([format_duration(d) for d in self.durations.tolist()] or [""], object)
        self.comm = self._comm_text()

    def _comm_text(self) -> np.ndarray:
        """Per selected node: " <collective> <bytes> <peer>" for comm nodes ("" otherwise); plain ASCII."""
        t, sel = self.trace, self.sel
        out = np.full(sel.size, "", object)
        is_comm = np.isin(self.types, list(COMM_NODE_TYPES))
        if not is_comm.any():
            return out
        rows = sel[is_comm]
        has_ct, has_sz = t.has(Attr.COMM_TYPE)[rows], t.has(Attr.COMM_SIZE)[rows]
        has_src, has_dst = t.has(Attr.COMM_SRC)[rows], t.has(Attr.COMM_DST)[rows]
        types = t.types[rows]
        # one formatting per distinct (type, collective, size, peer) combination
        key = np.stack(
            [
                types,
                np.where(has_ct, t.comm_type[rows], -1),
                np.where(has_sz, t.comm_size[rows], -1),
                np.where(has_src, t.comm_src[rows], -1),
                np.where(has_dst, t.comm_dst[rows], -1),
                has_ct,
                has_sz,
                has_src,
                has_dst,
            ]
        ).T.astype(np.int64)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        texts = []
        for ty, ct, sz, src, dst, hct, hsz, hsrc, hdst in uniq.tolist():
            parts = []
            if hct and ty == NodeType.COMM_COLL_NODE:
                parts.append(collective_name(ct))
            if hsz:
                parts.append(format_bytes(sz))
            if hdst and ty == NodeType.COMM_SEND_NODE:
                parts.append(f"to {dst}")
            if hsrc and ty == NodeType.COMM_RECV_NODE:
                parts.append(f"from {src}")
            texts.append("".join(" " + p for p in parts))
        out[is_comm] = np.array(texts, object)[inv.ravel()]
        return out

    def keys(self, i: int, j: int) -> np.ndarray:
        return _keys_at(self, np.arange(i, j))

    def labels(self, i: int, j: int, name_tbl: np.ndarray, type_tbl: np.ndarray, newline: str) -> np.ndarray:
        """name <newline> TYPE [comm] · duration, pieces looked up from per-distinct tables."""
        return (
            name_tbl[self.name_inv[i:j]]
            + newline
            + type_tbl[self.type_inv[i:j]]
            + self.comm[i:j]
            + " · "
            + self.dur_text[self.dur_inv[i:j]]
        )

    def header(self) -> str:
        ne = sum(a.size for a, _ in self.edges.values())
        return (
            f"{self.sel.size} nodes, {ne} edges ({self.edges['data'][0].size} data, "
            f"{self.edges['ctrl'][0].size} ctrl); skipped dependencies: {self.skipped_missing} on missing "
            f"nodes, {self.skipped_outside} crossing the selection"
        )


def _dot_chunks(g: _Graph, title: str) -> Iterator[str]:
    names = [g.trace.names[c] for c in g.name_codes.tolist()]
    name_tbl = np.array([dot_escape(_short(s)) for s in names] or [""], object)
    type_tbl = np.array([_type_label(t) for t in g.type_codes.tolist()] or [""], object)
    style_tbl = np.array(
        ['shape=%s, fillcolor="%s"' % _STYLE.get(int(t), _DEFAULT_STYLE) for t in g.type_codes.tolist()] or [""], object
    )
    yield (
        f"// chakra-trace graph: {g.header()}\n"
        f'digraph "{dot_escape(title)}" {{\n'
        f'  graph [rankdir=TB, comment="skipped_missing={g.skipped_missing} '
        f'skipped_outside={g.skipped_outside}"];\n'
        '  node [style=filled, fontname="Helvetica", fontsize=10];\n'
        '  edge [color="#495057"];\n'
    )
    k = g.sel.size
    for i in range(0, k, _CHUNK):
        j = min(k, i + _CHUNK)
        lab = g.labels(i, j, name_tbl, type_tbl, "\\n")
        yield "".join(("  " + g.keys(i, j) + ' [label="' + lab + '", ' + style_tbl[g.type_inv[i:j]] + "];\n").tolist())
    for kind, suffix in (("data", ";\n"), ("ctrl", " [style=dashed];\n")):
        a, b = g.edges[kind]
        for i in range(0, a.size, _CHUNK):
            src, dst = a[i : i + _CHUNK], b[i : i + _CHUNK]
            yield "".join(("  " + _keys_at(g, src) + " -> " + _keys_at(g, dst) + suffix).tolist())
    yield "}\n"


def _keys_at(g: _Graph, positions: np.ndarray) -> np.ndarray:
    """Node identifiers: n<id>, or n<id>_<row> when the trace repeats ids."""
    k = np.char.add("n", g.ids[positions].astype(str))
    if not g.unique_ids:
        k = np.char.add(np.char.add(k, "_"), g.sel[positions].astype(str))
    return k.astype(object)


_GRAPHML_KEYS = (  # (id, for, type)
    ("id", "node", "long"),
    ("name", "node", "string"),
    ("type", "node", "string"),
    ("duration_us", "node", "long"),
    ("start_us", "node", "long"),
    ("comm_type", "node", "string"),
    ("comm_size", "node", "long"),
    ("pg_name", "node", "string"),
    ("label", "node", "string"),
    ("kind", "edge", "string"),
    ("nodes", "graph", "long"),
    ("skipped_missing", "graph", "long"),
    ("skipped_outside", "graph", "long"),
)


def _graphml_chunks(g: _Graph, title: str) -> Iterator[str]:
    t, sel = g.trace, g.sel
    names = [t.names[c] for c in g.name_codes.tolist()]
    name_tbl = np.array([xml_escape(s) for s in names] or [""], object)
    short_tbl = np.array([xml_escape(_short(s)) for s in names] or [""], object)
    type_tbl = np.array([node_type_name(int(x)) for x in g.type_codes.tolist()] or [""], object)
    short_type = np.array([_type_label(x) for x in g.type_codes.tolist()] or [""], object)
    head = [
        '<?xml version="1.0" encoding="UTF-8"?>\n',
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        'xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns '
        'http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">\n',
        f"  <!-- chakra-trace graph: {g.header()} -->\n",
    ]
    head += [f'  <key id="{k}" for="{f}" attr.name="{k}" attr.type="{ty}"/>\n' for k, f, ty in _GRAPHML_KEYS]
    gid = re.sub(r"[^\w.-]", "_", title) or "G"  # an XML name token
    head.append(
        f'  <graph id="{gid}" edgedefault="directed">\n'
        f'    <data key="nodes">{sel.size}</data>\n'
        f'    <data key="skipped_missing">{g.skipped_missing}</data>\n'
        f'    <data key="skipped_outside">{g.skipped_outside}</data>\n'
    )
    yield "".join(head)
    has_ct, has_sz, has_pg = t.has(Attr.COMM_TYPE), t.has(Attr.COMM_SIZE), t.has(Attr.PG_NAME)
    groups = np.array([xml_escape(s) for s in t.groups] or [""], object)
    ct_names: dict[int, str] = {}
    k = sel.size
    for i in range(0, k, _CHUNK):
        j = min(k, i + _CHUNK)
        rows = sel[i:j]
        lab = g.labels(i, j, short_tbl, short_type, "\n")
        line = (
            '    <node id="'
            + g.keys(i, j)
            + '"><data key="id">'
            + t.ids[rows].astype(str).astype(object)
            + '</data><data key="name">'
            + name_tbl[g.name_inv[i:j]]
            + '</data><data key="type">'
            + type_tbl[g.type_inv[i:j]]
            + '</data><data key="duration_us">'
            + t.duration[rows].astype(str).astype(object)
            + '</data><data key="start_us">'
            + t.start[rows].astype(str).astype(object)
            + "</data>"
        )
        m = has_ct[rows]
        if m.any():
            codes = t.comm_type[rows[m]]
            for c in np.unique(codes).tolist():
                ct_names.setdefault(c, collective_name(c))
            line[m] = (
                line[m] + '<data key="comm_type">' + np.array([ct_names[c] for c in codes.tolist()], object) + "</data>"
            )
        m = has_sz[rows]
        if m.any():
            line[m] = line[m] + '<data key="comm_size">' + t.comm_size[rows[m]].astype(str).astype(object) + "</data>"
        m = has_pg[rows]
        if m.any():
            line[m] = line[m] + '<data key="pg_name">' + groups[t.pg_name[rows[m]]] + "</data>"
        yield "".join((line + '<data key="label">' + lab + "</data></node>\n").tolist())
    n_edge = 0
    for kind in ("data", "ctrl"):
        a, b = g.edges[kind]
        for i in range(0, a.size, _CHUNK):
            src, dst = a[i : i + _CHUNK], b[i : i + _CHUNK]
            eid = np.char.add("e", np.arange(n_edge, n_edge + src.size).astype(str)).astype(object)
            n_edge += src.size
            yield "".join(
                (
                    '    <edge id="'
                    + eid
                    + '" source="'
                    + _keys_at(g, src)
                    + '" target="'
                    + _keys_at(g, dst)
                    + f'"><data key="kind">{kind}</data></edge>\n'
                ).tolist()
            )
    yield "  </graph>\n</graphml>\n"


def _format_of(path) -> str:
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".dot", ".gv")):
        return "dot"
    if name.endswith(".graphml"):
        return "graphml"
    raise ChakraError(f"{path}: cannot tell the graph format from the name; expected .dot, .gv or .graphml")


def export_graph(
    trace: Trace,
    path: str | os.PathLike | None = None,
    *,
    format: str | None = None,
    max_nodes: int | None = MAX_NODES,
    rows=None,
    name: str | None = None,
    neighbors: int = 0,
    title: str = "chakra",
) -> GraphExport:
    """Write the (selected) graph as DOT or GraphML to `path` (atomically; gzip when the name
    ends in .gz), or return its text in `.text` when `path` is None. Data dependencies are
    solid edges, control dependencies dashed; both point from a dependency to its dependent."""
    fmt = format or (_format_of(path) if path is not None else "dot")
    if fmt not in ("dot", "graphml"):
        raise ChakraError(f"format: expected 'dot' or 'graphml', got {fmt!r}")
    edges = _edges(trace)
    sel = select_rows(trace, rows, name, neighbors, edges=edges)
    if max_nodes is not None and sel.size > max_nodes:
        what = "the selection has" if (rows is not None or name is not None) else "the trace has"
        raise ChakraError(
            f"{what} {sel.size:,} nodes, over the cap of {max_nodes:,}: a graph that big is unreadable and slow to "
            f"open. Select part of it by op name with name=REGEX (CLI: --name REGEX, add --neighbors N for "
            f"the nodes around it) or with rows=, or raise the cap with max_nodes= (CLI: --max-nodes N)"
        )
    g = _Graph(trace, sel, edges)
    chunks = (_dot_chunks if fmt == "dot" else _graphml_chunks)(g, title)
    res = GraphExport(
        fmt,
        None,
        int(sel.size),
        int(g.edges["data"][0].size),
        int(g.edges["ctrl"][0].size),
        g.skipped_missing,
        g.skipped_outside,
    )
    if path is None:
        res.text = "".join(chunks)
        return res

    res.path = Path(path)
    with atomic_output(res.path) as f:
        for c in chunks:
            f.write(c.encode("utf-8"))
    return res


def to_dot(
    trace: Trace,
    path: str | os.PathLike | None = None,
    *,
    max_nodes: int | None = MAX_NODES,
    rows=None,
    name: str | None = None,
    neighbors: int = 0,
) -> str | Path:
    """The graph as Graphviz DOT: written to `path` (returns the Path), or returned as text."""
    res = export_graph(trace, path, format="dot", max_nodes=max_nodes, rows=rows, name=name, neighbors=neighbors)
    return cast("str | Path", res.text if path is None else res.path)  # export_graph sets one of the two


def to_graphml(
    trace: Trace,
    path: str | os.PathLike | None = None,
    *,
    max_nodes: int | None = MAX_NODES,
    rows=None,
    name: str | None = None,
    neighbors: int = 0,
) -> str | Path:
    """The graph as GraphML (for Gephi, yEd, Cytoscape, networkx): to `path`, or as text."""
    res = export_graph(trace, path, format="graphml", max_nodes=max_nodes, rows=rows, name=name, neighbors=neighbors)
    return cast("str | Path", res.text if path is None else res.path)  # export_graph sets one of the two


# ---------------------------------------------------------------------- rendering
_HEADER = re.compile(r"^// chakra-trace graph: (\d+) nodes, (\d+) edges")
_NODE_STMT = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|[\w.]+)\s*(\[|;|$)')


def _open_dot(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _count(path: Path) -> tuple[int, int]:
    """(nodes, edges) of a DOT file: from our header line, else by counting statements."""
    with _open_dot(path) as f:
        m = _HEADER.match(f.readline(400).decode("utf-8", "replace"))
        if m:
            return int(m.group(1)), int(m.group(2))
        f.seek(0)
        n = e = 0
        for raw in f:
            line = raw.decode("utf-8", "replace")
            if "->" in line:
                e += line.count("->")
                continue
            m = _NODE_STMT.match(line)
            if m and m.group(1) not in ("graph", "node", "edge", "digraph", "subgraph", "strict"):
                n += 1
        return n, e


def render(
    dot_path: str | os.PathLike,
    out_path: str | os.PathLike,
    fmt: str | None = None,
    *,
    max_nodes: int | None = RENDER_MAX_NODES,
    max_edges: int | None = RENDER_MAX_EDGES,
    timeout: float = RENDER_TIMEOUT_S,
) -> Path:
    """Lay out a DOT file with Graphviz (`dot -T<fmt>`) into out_path (svg, pdf or png; by
    default from its suffix). Refuses graphs over `max_nodes` or `max_edges`, whose layout
    takes too long, and stops Graphviz after `timeout` seconds."""
    dot_path, out_path = Path(dot_path), Path(out_path)
    fmt = (fmt or out_path.suffix.lstrip(".")).lower()
    if fmt not in RENDER_FORMATS:
        raise ChakraError(f"{out_path}: cannot render to {fmt!r}; expected one of {', '.join(RENDER_FORMATS)}")
    try:
        nodes, edges = _count(dot_path)
    except OSError as e:
        raise ChakraError(f"{dot_path}: cannot read the DOT file: {e}") from None
    over = [
        f"{v:,} {what} (cap {cap:,})"
        for v, cap, what in ((nodes, max_nodes, "nodes"), (edges, max_edges, "edges"))
        if cap is not None and v > cap
    ]
    if over:
        raise ChakraError(
            f"{dot_path}: too big to render, {' and '.join(over)}: Graphviz's layout of a graph that big takes "
            f"very long. The DOT file is written; select a smaller part with --name REGEX [--neighbors N], or "
            f"open a .graphml export in a viewer made for big graphs (Gephi, Cytoscape)"
        )
    exe = shutil.which("dot")
    if exe is None:
        raise ChakraError(
            f"Graphviz is not installed (no `dot` program on PATH), so {out_path} was not drawn; the graph is "
            f"written to {dot_path}. Install Graphviz (`apt install graphviz`, `brew install graphviz` or "
            f"`conda install graphviz`) and run: dot -T{fmt} {dot_path} -o {out_path}"
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent or ".")
    os.close(fd)
    try:
        try:
            if dot_path.name.endswith(".gz"):  # Graphviz reads plain text only
                with _open_dot(dot_path) as f:
                    args, text = [exe, f"-T{fmt}", "-o", tmp], f.read()
            else:
                args, text = [exe, f"-T{fmt}", "-o", tmp, str(dot_path)], None
            proc = subprocess.run(args, input=text, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ChakraError(
                f"{dot_path}: Graphviz did not finish the layout of {nodes:,} nodes and {edges:,} edges "
                f"in {timeout:g} s; "
                f"select a smaller part of the graph with --name REGEX"
            ) from None
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise ChakraError(
                f"{dot_path}: Graphviz failed (exit {proc.returncode}): {' / '.join(err[-3:]) or 'no message'}"
            )
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return out_path
