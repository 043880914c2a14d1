"""The document model: a title and sections of typed blocks, plain JSON data that one renderer
(`render`) draws, checked here so that a malformed document fails in Python with its section and
block named.

Document schema::

    {"title": str, "subtitle": str?, "generated": str?,
     "sections": [{"id": str, "title": str, "blocks": [block, ...]}, ...]}

Blocks (``type``): ``text``, ``kv``, ``table``, ``bars``, ``heatmap``, ``timeline``, ``scatter``,
``intervals``; see `BLOCK_TYPES` and the checks below for their fields (`blocks` builds the common
ones). Numbers may be numpy scalars or arrays; NaN and infinities become null (shown as "–").
Optional fields without a default (a text's ``warn``, a column's ``bar``) are left out when not
given, so a document that does not use them is embedded as it was written.

A ``timeline`` block is ``{"trace": <Chrome Trace Event JSON>, "highlight": [[x, ts_us, dur_us],
...]}`` (``x``: a slice, by its index among the trace's "X" events). The trace is embedded once,
as `compact_json` bytes gzipped and base64-encoded (``trace_gz``: a tenth of the JSON's size,
and nothing in it the HTML parser could read as markup); the page decompresses it, draws its
slices and flows on a canvas, and its download button saves those bytes unchanged, so the file
is the one `chakra timeline` writes for the same timeline.

An ``intervals`` block draws, per row, samples as dots (outliers marked), the median with its
confidence interval as a band and the mean's interval as a whisker, on a linear or log axis.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import math
from typing import Any, NoReturn

import numpy as np

from ..errors import ChakraError

BLOCK_TYPES = ("text", "kv", "table", "bars", "heatmap", "timeline", "scatter", "intervals")
FORMATS = ("int", "float", "us", "ns", "bytes", "pct", "str")
_RESERVED_IDS = {"report-data"}


def compact_json(doc: Any, *, allow_nan: bool = True) -> bytes:
    """The bytes of a JSON file as chakra writes them: compact, UTF-8 (a timeline's file, and
    what a timeline block embeds and its download button saves)."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=allow_nan).encode()


# ---------------------------------------------------------------- JSON conversion


class _NotJsonable(Exception):
    pass


#: Characters of one string a report shows: a 16 MB op name repeated in every table made a page
#: no browser renders; past this a name ends in "... (N characters)".
MAX_TEXT = 4096


def _jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy scalars/arrays unwrapped, NaN and infinities as None, strings
    past `MAX_TEXT` shortened."""
    if isinstance(obj, str):
        return obj if len(obj) <= MAX_TEXT else f"{obj[: MAX_TEXT - 40]}... ({len(obj):,} characters)"
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _array(obj)
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    raise _NotJsonable(
        f"a value of type {type(obj).__name__} cannot be stored in a report (expected str, number, "
        "bool, None, list or dict)"
    )


def _array(a: np.ndarray) -> Any:
    if a.dtype.kind in "biu":
        return a.tolist()
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if not bad.any():
            return a.tolist()
        o = a.astype(object)
        o[bad] = None
        return o.tolist()
    if a.dtype.kind in "UO":
        return _jsonable(a.tolist())
    raise _NotJsonable(f"a numpy array of dtype {a.dtype} cannot be stored in a report")


# ---------------------------------------------------------------- validation


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_label(v: Any) -> bool:
    return isinstance(v, str) or _is_num(v)


class _Where:
    """Builds error messages that say where: 'report section 'x' block 2 (table): ...'."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def fail(self, msg: str) -> NoReturn:
        raise ChakraError(f"{self.prefix}: {msg}")

    def field(self, b: dict, key: str, check, expected: str, default: Any = ..., optional: bool = False) -> Any:
        if key not in b or (b[key] is None and (optional or default is not ...)):
            if default is not ...:
                b[key] = default
                return default
            if optional:
                return None
            self.fail(f"missing field {key!r} (expected {expected})")
        v = b[key]
        if not check(v):
            self.fail(f"field {key!r} is {_describe(v)}, expected {expected}")
        return v

    def list_of(self, b: dict, key: str, check, expected: str, default: Any = ...) -> list:
        v = self.field(b, key, lambda x: isinstance(x, list), f"a list of {expected}", default=default)
        for i, item in enumerate(v):
            if not check(item):
                self.fail(f"{key}[{i}] is {_describe(item)}, expected {expected}")
        return v


def _describe(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def check_document(doc: Any) -> dict:
    """A converted, defaults-filled copy of `doc`, or ChakraError naming what is wrong and where."""
    if not isinstance(doc, dict):
        raise ChakraError(f"report document: expected a dict with 'title' and 'sections', got {type(doc).__name__}")
    top = _Where("report document")
    out: dict[str, Any] = {}
    for key in ("title", "subtitle", "generated"):
        v = doc.get(key)
        if key == "title" or v is not None:
            if not isinstance(v, str):
                top.fail(f"field {key!r} is {_describe(v)}, expected a str")
            out[key] = v
    sections = doc.get("sections")
    if not isinstance(sections, (list, tuple)):
        top.fail(f"field 'sections' is {_describe(sections)}, expected a list of sections")
    seen: set[str] = set()
    out["sections"] = []
    for si, sec in enumerate(sections):
        sid = sec.get("id") if isinstance(sec, dict) else None
        where = _Where(f"report section {si}" if not isinstance(sid, str) else f"report section {sid!r}")
        if not isinstance(sec, dict):
            where.fail(f"expected a dict with 'id', 'title' and 'blocks', got {type(sec).__name__}")
        if not isinstance(sid, str) or not sid or any(c.isspace() for c in sid):
            where.fail(f"field 'id' is {_describe(sid)}, expected a non-empty str without whitespace (an anchor)")
        if sid in seen or sid in _RESERVED_IDS:
            where.fail(f"id {sid!r} is {'used twice' if sid in seen else 'reserved'}; section ids must be unique")
        seen.add(sid)
        title = sec.get("title", sid)
        if not isinstance(title, str):
            where.fail(f"field 'title' is {_describe(title)}, expected a str")
        blocks = sec.get("blocks")
        if not isinstance(blocks, (list, tuple)):
            where.fail(f"field 'blocks' is {_describe(blocks)}, expected a list of blocks")
        checked = []
        for bi, blk in enumerate(blocks):
            btype = blk.get("type") if isinstance(blk, dict) else None
            w = _Where(f"report section {sid!r} block {bi}" + (f" ({btype})" if isinstance(btype, str) else ""))
            if not isinstance(blk, dict):
                w.fail(f"expected a dict with a 'type' field, got {type(blk).__name__}")
            if btype not in BLOCK_TYPES:
                w.fail(f"unknown block type {btype!r}; expected one of {', '.join(BLOCK_TYPES)}")
            try:
                # a timeline's trace is packed as is when it is plain JSON already (timeline() makes it so):
                # walking its hundreds of thousands of values would cost more than the rest of the report
                raw = blk.get("trace") if btype == "timeline" else None
                b = _jsonable({k: v for k, v in blk.items() if k != "trace"} if raw is not None else blk)
                if raw is not None:
                    b["trace"], b["trace_json"] = _plain_trace(raw)
            except _NotJsonable as e:
                w.fail(str(e))
            _CHECKS[btype](b, w)
            checked.append(b)
        out["sections"].append({"id": sid, "title": title, "blocks": checked})
    return out


def _check_text(b: dict, w: _Where) -> None:
    w.field(b, "text", lambda v: isinstance(v, str), "a str")
    w.field(b, "warn", lambda v: isinstance(v, bool), "a bool", optional=True)


def _check_kv(b: dict, w: _Where) -> None:
    w.list_of(
        b,
        "items",
        lambda it: isinstance(it, list) and len(it) == 2 and _is_label(it[0]) and (it[1] is None or _is_label(it[1])),
        "[label, value] pairs (str or number)",
    )


def _check_table(b: dict, w: _Where) -> None:
    w.field(b, "caption", lambda v: isinstance(v, str), "a str", optional=True)
    cols = w.list_of(
        b, "columns", lambda c: isinstance(c, dict) and isinstance(c.get("key"), str), "dicts with a str 'key'"
    )
    if not cols:
        w.fail("field 'columns' is empty; a table needs at least one column")
    for i, c in enumerate(cols):
        cw = _Where(f"{w.prefix}: columns[{i}]")
        cw.field(c, "label", lambda v: isinstance(v, str), "a str", default=c["key"])
        cw.field(c, "format", lambda v: v in FORMATS, f"one of {', '.join(FORMATS)}", default="str")
        cw.field(c, "bar", lambda v: isinstance(v, bool), "a bool", optional=True)
    rows = w.list_of(b, "rows", lambda r: isinstance(r, dict), "dicts mapping column keys to values")
    for i, r in enumerate(rows):
        for k, v in r.items():
            if not (v is None or isinstance(v, (str, bool)) or _is_num(v)):
                w.fail(f"rows[{i}][{k!r}] is {_describe(v)}, expected a str, number or null")
    w.field(
        b,
        "max_rows",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "a positive int",
        optional=True,
    )


def _check_bars(b: dict, w: _Where) -> None:
    w.field(b, "title", lambda v: isinstance(v, str), "a str", default="")
    w.field(b, "unit", lambda v: isinstance(v, str), "a str", default="")
    w.field(b, "stacked", lambda v: isinstance(v, bool), "a bool", default=False)
    cats = w.list_of(b, "categories", _is_label, "category names (str)")
    series = w.list_of(
        b,
        "series",
        lambda s: isinstance(s, dict) and _is_label(s.get("name")) and isinstance(s.get("values"), list),
        "dicts with 'name' and a list of 'values'",
    )
    for i, s in enumerate(series):
        if len(s["values"]) != len(cats):
            w.fail(f"series[{i}] ({s['name']!r}) has {len(s['values'])} values for {len(cats)} categories")
        for j, v in enumerate(s["values"]):
            if not (v is None or _is_num(v)):
                w.fail(f"series[{i}].values[{j}] is {_describe(v)}, expected a number or null")


def _check_heatmap(b: dict, w: _Where) -> None:
    w.field(b, "title", lambda v: isinstance(v, str), "a str", default="")
    w.field(b, "unit", lambda v: isinstance(v, str), "a str", default="")
    w.field(b, "scale", lambda v: v in ("linear", "log"), "'linear' or 'log'", default="linear")
    w.field(b, "center", _is_num, "a number or null", default=None, optional=True)
    xs = w.list_of(b, "x", _is_label, "column labels (str)")
    ys = w.list_of(b, "y", _is_label, "row labels (str)")
    rows = w.field(b, "values", lambda v: isinstance(v, list), f"a list of {len(ys)} rows of {len(xs)} numbers")
    if len(rows) != len(ys):
        w.fail(f"'values' has {len(rows)} rows for {len(ys)} y labels (expected len(y) rows of len(x) numbers)")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(xs):
            w.fail(f"values[{i}] is {_describe(row)}, expected a list of {len(xs)} numbers (one per x label)")
        for j, v in enumerate(row):
            if not (v is None or _is_num(v)):
                w.fail(f"values[{i}][{j}] is {_describe(v)}, expected a number or null")


def _numeric_rows(b: dict, key: str, fields: str, w: _Where) -> np.ndarray:
    """`b[key]` as an (n, width) float array; rows must be finite numbers."""
    width = len(fields.split(","))
    v = b.get(key)
    if v is None:
        v = b[key] = []
    if not isinstance(v, list):
        w.fail(f"field {key!r} is {_describe(v)}, expected a list of [{fields}] rows")
    if not v:
        return np.zeros((0, width))
    # type checks at C speed; the per-row loop only runs to name the first bad row
    if (
        set(map(type, v)) != {list}
        or set(map(len, v)) != {width}
        or not set(map(type, itertools.chain.from_iterable(v))) <= {int, float}
    ):
        for i, row in enumerate(v):
            if not isinstance(row, list) or len(row) != width or not all(_is_num(x) for x in row):
                w.fail(f"{key}[{i}] is {_describe(row)}, expected [{fields}] ({width} numbers)")
    a = np.asarray(v, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(a).all(axis=1))
    if len(bad):
        w.fail(f"{key}[{bad[0]}] is {_describe(v[bad[0]])}, expected finite numbers")
    return a


def _check_index(a: np.ndarray, col: int, n: int, key: str, what: str, w: _Where) -> None:
    x = a[:, col]
    bad = np.flatnonzero((x != np.floor(x)) | (x < 0) | (x >= n))
    if len(bad):
        w.fail(f"{key}[{bad[0]}] has {what} {x[bad[0]]:g}, expected an int in [0, {n})")


def _check_timeline(b: dict, w: _Where) -> None:
    """Checks the trace and the highlight, then packs the trace (``trace`` -> ``trace_gz``)."""
    slices = _check_trace(b.get("trace"), w)
    hl = _numeric_rows(b, "highlight", "slice_index, ts_us, dur_us", w)
    _check_index(hl, 0, slices, "highlight", "slice index", w)
    neg = np.flatnonzero(hl[:, 2] < 0)
    if len(neg):
        w.fail(f"highlight[{neg[0]}] has a negative duration {hl[neg[0], 2]:g}")
    b.pop("trace")
    packed = gzip.compress(b.pop("trace_json"), compresslevel=6, mtime=0)  # level 9: 4x the time, 1% smaller
    b["trace_gz"] = base64.b64encode(packed).decode("ascii")


def _plain_trace(trace: Any) -> tuple[Any, bytes]:
    """(the trace as plain JSON values, its `compact_json` bytes): the trace itself when it is
    plain JSON already, else a converted copy (numpy values unwrapped, NaN as null)."""
    try:
        return trace, compact_json(trace, allow_nan=False)
    except (TypeError, ValueError):
        trace = _jsonable(trace)
        return trace, compact_json(trace)


def _check_trace(trace: Any, w: _Where) -> int:
    """What the page reads of a Chrome trace is well formed; returns its number of "X" events."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        w.fail(f"field 'trace' is {_describe(trace)}, expected a Chrome trace (a dict with a 'traceEvents' list)")
    slices = 0
    for i, e in enumerate(trace["traceEvents"]):
        problem = _event_problem(e)
        if problem:
            w.fail(f"trace.traceEvents[{i}] {problem}")
        slices += e["ph"] == "X"
    return slices


def _is_id(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))


_META_ARGS = {  # the "M" events the page reads: the key of their value in args, its check
    "process_name": ("name", lambda v: isinstance(v, str), "a str"),
    "thread_name": ("name", lambda v: isinstance(v, str), "a str"),
    "process_sort_index": ("sort_index", _is_num, "a number"),
    "thread_sort_index": ("sort_index", _is_num, "a number"),
}


def _event_problem(e: Any) -> str | None:
    """Why the page cannot read the trace event `e`, or None. Slices ("X") need a place, a time,
    a duration and a name; flow steps ("s", "f") a place, a time and an id; the metadata ("M")
    that names and orders processes and threads its value. Other phases are kept, not drawn."""
    ph = e.get("ph") if isinstance(e, dict) else None
    if ph not in ("X", "s", "f", "M"):
        return None if isinstance(ph, str) else f"is {_describe(e)}, expected an event (a dict with a str 'ph')"
    if not (isinstance(e.get("pid"), int) and not isinstance(e["pid"], bool)):
        return f"({ph}) has pid {_describe(e.get('pid'))}, expected an int"
    if ph == "M":
        name, args = e.get("name"), e.get("args")
        if name in ("thread_name", "thread_sort_index") and not _is_id(e.get("tid")):
            return f"({name}) has tid {_describe(e.get('tid'))}, expected an int or str"
        if name in _META_ARGS:
            key, check, expected = _META_ARGS[name]
            if not (isinstance(args, dict) and check(args.get(key))):
                return f"({name}) has args {_describe(args)}, expected {{{key!r}: {expected}}}"
        return None
    if not _is_id(e.get("tid")):
        return f"({ph}) has tid {_describe(e.get('tid'))}, expected an int or str"
    if not _is_num(e.get("ts")):
        return f"({ph}) has ts {_describe(e.get('ts'))}, expected a finite number (µs)"
    if ph != "X":
        return None if _is_id(e.get("id")) else f"({ph}) has id {_describe(e.get('id'))}, expected an int or str"
    if not (_is_num(e.get("dur")) and e["dur"] >= 0):
        return f"(X) has dur {_describe(e.get('dur'))}, expected a number >= 0 (µs)"
    if not isinstance(e.get("name"), str):
        return f"(X) has name {_describe(e.get('name'))}, expected a str"
    if not isinstance(e.get("cat", ""), str):
        return f"(X) has cat {_describe(e.get('cat'))}, expected a str"
    return None


def _check_scatter(b: dict, w: _Where) -> None:
    for key in ("title", "x_label", "y_label"):
        w.field(b, key, lambda v: isinstance(v, str), "a str", default="")
    for key in ("log_x", "log_y"):
        w.field(b, key, lambda v: isinstance(v, bool), "a bool", default=False)
    labels = w.list_of(b, "labels", _is_label, "point labels (str)", default=[])
    groups = w.list_of(b, "groups", _is_label, "group names (str)", default=[])

    points = w.field(b, "points", lambda v: isinstance(v, list), "a list of [x, y, label_index, group_index]")
    for i, p in enumerate(points):
        if not (isinstance(p, list) and len(p) == 4 and all(v is None or _is_num(v) for v in p[:2])):
            w.fail(f"points[{i}] is {_describe(p)}, expected [x, y, label_index, group_index]")
        if not (p[2] is None or _index_ok(p[2], len(labels))):
            w.fail(f"points[{i}] has label index {p[2]!r}, expected an int in [0, {len(labels)}) or null")
        if not (p[3] is None or _index_ok(p[3], len(groups))):
            w.fail(f"points[{i}] has group index {p[3]!r}, expected an int in [0, {len(groups)}) or null")
    lines = w.list_of(
        b,
        "lines",
        lambda ln: isinstance(ln, dict) and _is_label(ln.get("name")) and isinstance(ln.get("points"), list),
        "dicts with 'name' and 'points'",
        default=[],
    )
    for i, ln in enumerate(lines):
        for j, p in enumerate(ln["points"]):
            if not (isinstance(p, list) and len(p) == 2 and all(v is None or _is_num(v) for v in p)):
                w.fail(f"lines[{i}].points[{j}] is {_describe(p)}, expected [x, y]")


def _check_intervals(b: dict, w: _Where) -> None:
    w.field(b, "title", lambda v: isinstance(v, str), "a str", default="")
    w.field(b, "unit", lambda v: isinstance(v, str), "a str", default="")
    w.field(b, "log", lambda v: isinstance(v, bool), "a bool", default=False)
    groups = w.list_of(b, "groups", _is_label, "group names (str)", default=[])
    rows = w.list_of(b, "rows", lambda r: isinstance(r, dict), "dicts with 'label' and 'samples'")
    for i, r in enumerate(rows):
        rw = _Where(f"{w.prefix}: rows[{i}]")
        rw.field(r, "label", _is_label, "a str")
        rw.field(r, "note", lambda v: isinstance(v, str), "a str", default="")
        rw.field(r, "group", lambda v: _index_ok(v, len(groups)), f"an int in [0, {len(groups)})", default=None)
        n = len(rw.list_of(r, "samples", _is_num, "finite numbers"))
        rw.list_of(r, "outliers", lambda v, n=n: _index_ok(v, n), f"sample indices (ints in [0, {n}))", default=[])
        rw.field(r, "median", _is_num, "a number or null", default=None)
        for key in ("median_ci", "mean_ci"):
            rw.field(r, key, _is_pair, "[low, high] (numbers or null) or null", default=None)


def _index_ok(v: Any, n: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n


def _is_pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(x is None or _is_num(x) for x in v)


_CHECKS = {
    "text": _check_text,
    "kv": _check_kv,
    "table": _check_table,
    "bars": _check_bars,
    "heatmap": _check_heatmap,
    "timeline": _check_timeline,
    "scatter": _check_scatter,
    "intervals": _check_intervals,
}
