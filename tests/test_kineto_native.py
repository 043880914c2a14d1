"""The optional C Kineto scanner (io/_kineto.c) must give exactly what the pure-Python
reader gives: the same columns and string tables on every input, and the same errors."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_trace.errors import TraceFormatError
from chakra_trace.io import kineto
from conftest import sample

native = kineto._native
pytestmark = pytest.mark.skipif(native is None, reason="C Kineto scanner not built (or CHAKRA_TRACE_PURE set)")

DATA = Path(__file__).parent / "data" / "kineto"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
FILES = sorted(DATA.glob("*kineto*.json.gz")) + sorted(SHARED.glob("**/*kineto*.json.gz"))


def _read(path, use_native: bool, **kw):
    """read_kineto on one path, as the trace or ("error", message)."""
    saved = kineto._native
    kineto._native = native if use_native else None
    try:
        return kineto.read_kineto(path, **kw)
    except TraceFormatError as e:
        return ("error", str(e))
    except Exception as e:  # a bug either way, but it must be the same one
        return ("error", f"{type(e).__name__}: {e}")
    finally:
        kineto._native = saved


def _normalized(msg: str) -> str:
    # errors about an event's values name the batch being added, and batches differ; the
    # text quoted after "found" is what the buffer holds at the time (up to 20 characters)
    msg = re.sub(r"an event among #\d+-#\d+", "an event among #?", msg)
    return re.sub(r", found '.*", ", found ...", msg)


def assert_same(a, b, one_bad_event=True):
    """Same trace, or the same error. With several events whose values are bad (not their
    syntax), the paths may report different ones: their batches differ (one_bad_event=False)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert isinstance(a, tuple) and isinstance(b, tuple), (a, b)
        bad_values = "is not a valid trace event" in a[1] and "is not a valid trace event" in b[1]
        if one_bad_event or not bad_values:
            assert _normalized(a[1]) == _normalized(b[1])
        return
    assert len(a) == len(b)
    for col in a._COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype, col
        np.testing.assert_array_equal(x, y, err_msg=col)
    assert (a.names, a.cats, a.labels) == (b.names, b.cats, b.labels)
    assert a.meta_args == b.meta_args
    assert a.metadata == b.metadata


def check(path, chunks=(None, 64, 257)):
    ref = _read(path, False)
    for chunk in chunks:
        kw = {} if chunk is None else {"chunk": chunk}
        assert_same(_read(path, True, **kw), ref)
        if chunk is not None:
            assert_same(_read(path, False, **kw), ref)
    return ref


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p.parent == DATA else f"{p.parent.name}/{p.name}")
def test_real_traces(path):
    ref = check(path, chunks=(None, 257) if path.parent == DATA else (None,))  # the shared ones are large
    assert not isinstance(ref, tuple) and len(ref) > 0


def test_real_trace_plain_minified_and_indented(tmp_path):
    d = json.load(gzip.open(sample("kineto/resnet_kineto_head.json.gz")))
    for name, text in [
        ("min.json", json.dumps(d, separators=(",", ":"))),
        ("ind.json", json.dumps(d, indent=8).replace("\n", "\r\n\t ")),
        ("raw.json", json.dumps(d, ensure_ascii=False)),
    ]:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        check(p, chunks=(None, 1000))


# ---------------------------------------------------------------------- crafted events
def _trace(tmp_path, events_text: str, name="t.json", head='{"traceName": "x", "traceEvents": [', tail="]}"):
    p = tmp_path / name
    p.write_bytes((head + events_text + tail).encode("utf-8"))
    return p


EV = (
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 8, "ts": 1.5, "dur": 2, '
    '"args": {"External id": 3}}'
)

CASES = {
    "escapes_in_names": [
        r'{"ph": "X", "cat": "c\"at", "name": "q\"uote", "ts": 1}',
        r'{"ph": "X", "cat": "cpu_op", "name": "caf\u00e9", "ts": 2}',
        r'{"ph": "X", "cat": "cpu_op", "name": "back\\slash\/", "ts": 3}',
        r'{"ph": "X", "cat": "cpu_op", "name": "caf' + "\u00e9" + '", "ts": 4}',
        r'{"ph": "X", "cat": "cpu_op", "name": "a\nb\t\u0000", "ts": 5}',
        r'{"ph": "X", "cat": "cpu_op", "name": "\ud83d\ude00 pair", "ts": 6}',
        r'{"p\u0068": "M", "name": "escaped key", "ts": 7}',
        r'{"ph": "X", "args": {"Extern\u0061l id": 5, "External id": 6}}',
        r'{"ph": "\u0058", "name": "escaped ph"}',
    ],
    "raw_non_ascii": [
        '{"ph": "X", "cat": "cpu_op", "name": "caf\u00e9", "ts": 1}',
        '{"ph": "X", "cat": "\u20ac", "name": "euro \u20ac", "ts": 2, "pid": "\u20ac"}',
        '{"ph": "X", "cat": "cpu_op", "name": "smile \U0001f600", "ts": 3, "tid": "\U0001f600"}',
        '{"ph": "\u00e9", "name": "caf\u00e9", "ts": 4}',
        '{"ph": "X", "name": "caf\u00e9", "ts": 5}',
        '{"ph": "X", "name": "ideographic space pid", "pid": "\u3000 12\u3000", "tid": "\u00b2"}',
    ],
    "string_pids": [
        '{"ph": "X", "name": "a", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1}',
        '{"ph": "X", "name": "b", "pid": "", "tid": " 12 ", "ts": 2}',
        '{"ph": "X", "name": "c", "pid": "7", "tid": "007", "ts": 3}',
        '{"ph": "X", "name": "d", "pid": "Spans", "tid": "", "ts": 4}',
        '{"ph": "X", "name": "e", "pid": "-3", "tid": "+4", "ts": 5}',
        '{"ph": "X", "name": "f", "pid": " ", "tid": "12 34", "ts": 6}',
        '{"ph": "X", "name": "g", "pid": true, "tid": false, "ts": 7}',
        '{"ph": "X", "name": "h", "pid": null, "tid": -9223372036854775807, "ts": 8}',
        '{"ph": "X", "name": "i", "pid": 1.5, "tid": 2.0, "ts": 9}',
        '{"ph": "X", "name": "j", "pid": 1e3, "tid": [1, 2], "ts": 10}',
        '{"ph": "X", "name": "k", "pid": "123456789012345678", "tid": "x1234567890123456789", "ts": 11}',
        '{"ph": "X", "name": "l", "pid": -9223372036854775808, "tid": 9223372036854775807, "ts": 12}',
        '{"ph": "X", "name": "m", "pid": -9223372036854775809, "ts": 13}',
        '{"ph": "X", "name": "n", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 14}',
    ],
    "meta_events": [
        '{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}',
        EV,
        '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "t"}}',
        '{"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 2, "args": {}}',
        '{"ph": "X", "name": "last ph wins", "ph": "M", "args": {"x": 1}}',
        '{"ph": "M", "name": "last ph wins", "ph": "X", "args": {"x": 1}}',
        EV,
    ],
    "numbers": [
        '{"ph": "X", "name": "ints", "ts": 4481657746603, "dur": 0}',
        '{"ph": "X", "name": "three decimals", "ts": 4481657746603.735, "dur": 4140.597}',
        '{"ph": "X", "name": "more decimals", "ts": 1.0005, "dur": 1.00049999}',
        '{"ph": "X", "name": "fewer decimals", "ts": 1.5, "dur": 0.25}',
        '{"ph": "X", "name": "negative", "ts": -1.0005, "dur": -0.0004}',
        '{"ph": "X", "name": "negative zero", "ts": -0, "dur": -0.0}',
        '{"ph": "X", "name": "exponents", "ts": 1e3, "dur": 1.5E-3}',
        '{"ph": "X", "name": "exponent plus", "ts": 2e+2, "dur": 1.2345e2}',
        '{"ph": "X", "name": "null times", "ts": null, "dur": null}',
        '{"ph": "X", "name": "near the int64 limit", "ts": 9223372036854775, "dur": 9223372036854775.807}',
        '{"ph": "X", "name": "us since epoch", "ts": 1700000000000000.125, "dur": 1}',
    ],
    "missing_fields": [
        "{}",
        '{"ph": "X"}',
        '{"name": "no ph"}',
        '{"ph": "i", "name": "instant", "pid": 1, "tid": 1, "ts": 5, "s": "t"}',
        '{"ph": "X", "name": "", "cat": ""}',
        '{"ph": "", "name": "empty ph"}',
        '{"ph": "XY", "name": "long ph"}',
        '{"ph": 5, "name": "number ph"}',
        '{"ph": null, "name": "null ph"}',
        '{"ph": ["M"], "name": "list ph"}',
    ],
    "args_values": [
        '{"ph": "X", "name": "a", "args": null}',
        '{"ph": "X", "name": "b", "args": {}}',
        '{"ph": "X", "name": "c", "args": {"External id": true, "Record function id": false, "correlation": null}}',
        '{"ph": "X", "name": "d", "args": {"External id": 1.0, "Record function id": 1.5, "correlation": -2.000}}',
        '{"ph": "X", "name": "e", "args": {"External id": "7", "Record function id": "0x10", "correlation": "x"}}',
        '{"ph": "X", "name": "f", "args": {"stream": [1, 2], "device": {"a": 1}, "bytes": []}}',
        '{"ph": "X", "name": "g", "args": {"Ev Idx": 1e2, "bytes": NaN, "stream": Infinity, "device": -Infinity}}',
        '{"ph": "X", "name": "h", "args": {"Input Dims": [[1, 2], [[]], []], "Concrete Inputs": ["", "}, {"],'
        ' "nested": {"a": [{"b": [true, false, null, NaN, -Infinity, 1.5e-7]}]}, "External id": 4}}',
        '{"ph": "X", "name": "i", "args": {"External id": 1}, "args": {"correlation": 2}}',
        '{"ph": "X", "name": "j", "args": {"External id": 1}, "args": null}',
        '{"ph": "X", "name": "k", "args": {"External id": 1, "External id": 2}}',
        '{"ph": "X", "name": "l", "args": {"External id": 9223372036854775807, "bytes": -9223372036854775807}}',
        '{"ph": "X", "name": "m", "args": {"External id": 99999999999999999999.5, "bytes": 0.0}}',
        '{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 16, "pid": 1, "tid": 2, "ts": 10}',
        '{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": "0x10", "pid": 1, "tid": 2, "ts": 11, "bp": "e"}',
        '{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1.0, "pid": 1, "tid": 2, "ts": 12}',
        '{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": [3], "pid": 1, "tid": 2, "ts": 13}',
        '{"ph": "X", "name": "big skipped int", "args": {"x": 1' + "0" * 700 + "}}",
        '{"ph": "X", "name": "deep", "args": {"x": ' + "[" * 300 + "]" * 300 + "}}",
        '{"ph": "X", "name": "deep ok", "args": {"x": ' + "[" * 150 + "]" * 150 + "}}",
    ],
    "duplicate_keys": [
        '{"ph": "X", "name": "first", "name": "second", "cat": "a", "cat": "b", "ts": 1, "ts": 2.5}',
        '{"ph": "X", "pid": "label", "pid": 3, "tid": 4, "tid": "label2", "dur": 1, "dur": null}',
        '{"ph": "s", "id": 1, "id": 2, "name": "flow"}',
    ],
}


def _relayout(text: str, ws: str) -> str:
    """The JSON text with ws after every ',', ':', '{' and '[' outside strings (and no other
    spaces there)."""
    out, in_str, esc = [], False, False
    for ch in text:
        if in_str:
            in_str = esc or ch != '"'
            esc = not esc and ch == "\\"
        elif ch == '"':
            in_str = True
        elif ch == " ":
            continue
        out.append(ch + ws if not in_str and ch in ",:{[" else ch)
    return "".join(out)


def _layouts(events: list[str]):
    yield "newlines", ",\n".join(events)
    yield "minified", ",".join(_relayout(e, "") for e in events)
    yield "indented", " ,\r\n\t  ".join(_relayout(e, "\n\t\t  ") for e in events)
    yield "trailing comma", ", ".join(events) + " , "


@pytest.mark.parametrize("case", sorted(CASES))
def test_crafted_events(tmp_path, case):
    events = CASES[case] + [EV] * 3 + CASES[case][::-1]  # scanned runs before and after each
    for layout, text in _layouts(events):
        p = _trace(tmp_path, text)
        ref = check(p, chunks=(None, 1, 64, 257))
        assert not isinstance(ref, tuple), (layout, ref)
        assert len(ref) == len(events)


def test_crafted_values(tmp_path):
    # a few results pinned down, beyond agreeing with the pure path
    def read(case):
        k = kineto.read_kineto(_trace(tmp_path, ",".join(CASES[case]), name=f"{case}.json"))
        return k, {k.event_name(i): i for i in range(len(k))}

    k, row = read("numbers")
    got = {n: (int(k.ts[i]), int(k.dur[i])) for n, i in row.items()}
    assert got["three decimals"] == (4481657746603735, 4140597)
    assert got["more decimals"] == (1001, 1000) and got["negative"] == (-1001, 0)
    assert got["exponents"] == (1000000, 2) and got["null times"] == (0, -1)
    assert got["near the int64 limit"][1] == 2**63 - 1
    k, row = read("string_pids")
    pairs = {n: (k.label_of(k.pid[row[n]]), k.label_of(k.tid[row[n]])) for n in "abcgij"}
    assert pairs["b"] == ("", 12) and pairs["c"] == (7, 7) and pairs["i"] == ("1.5", "2.0")
    assert pairs["g"] == (1, 0) and pairs["j"] == ("1e3", "[1, 2]")
    assert (k.pid[row["h"]], k.tid[row["h"]]) == (-1, -(2**63 - 1))  # negative numbers read as labels
    assert k.labels[:3] == ["Spans", "PyTorch Profiler", ""]
    k, row = read("args_values")
    cols = ("external_id", "rf_id", "correlation", "stream", "device", "ev_idx", "num_bytes")
    got = {n: tuple(int(getattr(k, c)[i]) for c in cols) for n, i in row.items()}
    assert got["c"][:3] == (1, 0, -1) and got["d"][:3] == (1, -1, -2) and got["e"][:3] == (7, 16, -1)
    assert got["g"][3:] == (-1, -1, 100, -1) and got["h"][0] == 4
    assert got["i"] == (-1, -1, 2, -1, -1, -1, -1) and got["j"] == (-1,) * 7 and got["k"][0] == 2


@pytest.mark.parametrize(
    "events, words",
    [
        ([EV, EV, '{"ph": "X", "ts": 1, }', EV], "bad JSON in event #2"),
        ([EV, EV, '{"ph": "X", "ts": 01}', EV], "bad JSON in event #2"),
        ([EV, '{"ph": "X", "name": "a\x01b"}', EV], "bad JSON in event #1"),
        ([EV, r'{"ph": "X", "name": "bad \x escape"}', EV], "bad JSON in event #1"),
        ([EV, r'{"ph": "X", "name": "bad \u12g4"}', EV], "bad JSON in event #1"),
        ([EV, '{"ph": "X", "args": {"a": [1, 2,]}}', EV], "bad JSON in event #1"),
        ([EV, '{"ph": "X", "args": {"a": 1.}}', EV], "bad JSON in event #1"),
        ([EV, '{"ph": "X", "args": {"a": -}}', EV], "bad JSON in event #1"),
        ([EV, '{"ph": "X", "args": {"a": tru}}', EV], "bad JSON in event #1"),
        ([EV, '{"ph": "X" "ts": 1}', EV], "bad JSON in event #1"),
        ([EV, '{"ph": "X", 5: 1}', EV], "bad JSON in event #1"),
        ([EV, EV, "[1]", EV], "event #2 is not a valid trace event"),
        ([EV, '{"ph": "X", "args": [1]}', EV], "args is not a JSON object"),
        ([EV, '{"ph": "X", "args": "x"}', EV], "args is not a JSON object"),
        ([EV, '{"ph": "X", "ts": "soon"}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "ts": true}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "cat": ["x"]}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "name": {"x": 1}}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "pid": 99999999999999999999}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "pid": "99999999999999999999"}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "ts": 99999999999999999}', EV], "not a valid trace event"),
        ([EV, '{"ph": "X", "args": {"External id": 99999999999999999999}}', EV], "not a valid trace event"),
        ([EV, EV + " " + EV], "expected ',' or ']'"),
    ],
)
def test_bad_events_give_the_same_error(tmp_path, events, words):
    p = _trace(tmp_path, ",\n".join(events))
    for chunk in (None, 16, 257):
        kw = {} if chunk is None else {"chunk": chunk}
        a, b = _read(p, True, **kw), _read(p, False, **kw)
        assert isinstance(a, tuple) and words in a[1], a
        assert_same(a, b)


@pytest.mark.parametrize("cut", [10, 200, 333, -3, -2, -1])
def test_truncated_files(tmp_path, cut):
    text = '{"traceEvents": [' + ",\n".join([EV] * 5) + "]}"
    p = tmp_path / "cut.json"
    p.write_text(text[:cut] if cut > 0 else text[: len(text) + cut])
    for chunk in (None, 64):
        kw = {} if chunk is None else {"chunk": chunk}
        a = _read(p, True, **kw)
        assert isinstance(a, tuple) and "truncated" in a[1], a
        assert_same(a, _read(p, False, **kw))


def test_events_across_chunk_boundaries(tmp_path):
    events = []
    for i in range(400):
        ev = {
            "ph": "X",
            "cat": f"c{i % 7}",
            "name": f"n{i % 13}" + (" \u00e9" if i % 50 == 0 else ""),
            "pid": "Spans" if i % 31 == 0 else i % 3,
            "tid": i,
            "ts": i + 0.001 * (i % 1000),
            "dur": i % 5,
            "args": {"External id": i, "Input Dims": [[i, 2]], "x": "}, {" * (i % 3)},
        }
        events.append(json.dumps(ev, ensure_ascii=bool(i % 2)))
        if i % 97 == 0:
            events.append('{"ph": "M", "name": "thread_name", "pid": 1, "tid": %d, "args": {"name": "t"}}' % i)
    p = _trace(tmp_path, ",\n ".join(events))
    check(p, chunks=(None, 7, 64, 100, 257, 4096))


# ---------------------------------------------------------------------- the scanner itself
def test_scan_events_stops_before_what_it_leaves_to_python():
    a = '{"ph": "X", "name": "a"}'
    text = f'{a} ,\n{a}, {{"ph": "M"}}, {a}'
    n, stop, cut = native.scan_events(text, 0)[:3]
    assert (n, stop, cut) == (2, text.index(', {"ph": "M"}'), False)  # stop: after the last event taken
    n, stop, cut = native.scan_events(text, text.index('{"ph": "M"}'))[:3]
    assert (n, stop, cut) == (0, text.index('{"ph": "M"}'), False)
    n, stop, cut = native.scan_events(text + ", " + a[:10], text.rindex("{"))[:3]
    assert (n, stop, cut) == (1, len(text), True)  # the next event runs past the text
    assert native.scan_events(text + ",  ", text.rindex("{"))[:3] == (1, len(text), True)
    assert native.scan_events(text + "]", text.rindex("{"))[:3] == (1, len(text), False)
    assert native.scan_events("", 0)[:3] == (0, 0, True)
    with pytest.raises(ValueError):
        native.scan_events(text, len(text) + 1)


# ---------------------------------------------------------------------- random events
class _Obj(list):
    """An object as (key, value) pairs: keys may repeat."""


_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "s", "bp", "Other"]
_ARG_KEYS = list(kineto._ARG_KEYS) + ["Input Dims", "name", "x"]
_TEXT = st.text(alphabet=st.sampled_from(list('ab0123 "\\/\n\t\x00\x1f\u00e9\u20ac\u3000\U0001f600{}[],:')), max_size=6)
_NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.integers(-(2**70), 2**70),
    st.integers(-(10**15), 10**15).map(lambda x: x / 1000),  # Kineto's three decimals (repr may differ)
    st.floats(allow_nan=True, allow_infinity=True),
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), _NUMBERS, _TEXT, st.sampled_from(["X", "M", "s", "f", "i", "", "Spans", " 12 ", "7"])
)
_VALUES = st.recursive(
    _SCALARS, lambda c: st.lists(c, max_size=3) | st.lists(st.tuples(_TEXT, c), max_size=3).map(_Obj), max_leaves=6
)


_ARGS = st.one_of(st.none(), _VALUES, st.lists(st.tuples(st.sampled_from(_ARG_KEYS), _VALUES), max_size=5).map(_Obj))
_EVENT = st.lists(st.tuples(st.sampled_from(_KEYS), st.one_of(_VALUES, _ARGS)), max_size=9).map(_Obj)
_LIKELY = st.builds(
    lambda ph, name, pid, ts, args: _Obj(
        [
            ("ph", ph),
            ("cat", "cpu_op"),
            ("name", name),
            ("pid", pid),
            ("tid", 1),
            ("ts", ts),
            ("dur", 1.5),
            ("args", args),
        ]
    ),
    st.sampled_from(["X", "X", "M", "s"]),
    _TEXT,
    st.one_of(st.integers(0, 9), _TEXT),
    _NUMBERS,
    st.lists(st.tuples(st.sampled_from(_ARG_KEYS), st.one_of(st.integers(-5, 2**63 - 1), _SCALARS)), max_size=4).map(
        _Obj
    ),
)


def _dump(v, ws: str, ascii_only: bool) -> str:
    if isinstance(v, _Obj):
        items = [json.dumps(k, ensure_ascii=ascii_only) + ws + ":" + ws + _dump(x, ws, ascii_only) for k, x in v]
        return "{" + ws + ("," + ws).join(items) + ws + "}"
    if isinstance(v, list):
        return "[" + ws + ("," + ws).join(_dump(x, ws, ascii_only) for x in v) + ws + "]"
    return json.dumps(v, ensure_ascii=ascii_only)


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    events=st.lists(st.one_of(_EVENT, _LIKELY, _LIKELY), max_size=12),
    ws=st.sampled_from(["", " ", "\n  ", "\r\n\t"]),
    ascii_only=st.booleans(),
    chunk=st.sampled_from([None, 5, 64, 257]),
)
def test_random_events_agree(tmp_path, events, ws, ascii_only, chunk):
    text = ("," + ws).join(_dump(e, ws, ascii_only) for e in events)
    p = _trace(tmp_path, text, name="r.json")
    kw = {} if chunk is None else {"chunk": chunk}
    assert_same(_read(p, True, **kw), _read(p, False, **kw), one_bad_event=False)
