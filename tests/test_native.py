"""The optional C kernels must agree with the numpy implementation, on good and bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.io import stream
from chakra_trace.schema import codec, wire
from chakra_trace.schema.trace import Trace

native = wire._native
pytestmark = pytest.mark.skipif(native is None, reason="C kernels not built")

FIELDS = ("msg", "number", "wtype", "value", "start", "data", "end")


def _numpy_scan(buf, starts, ends):
    return wire._scan_fields_numpy(buf, np.asarray(starts, np.int64), np.asarray(ends, np.int64))


def _both(fn_native, fn_numpy):
    try:
        a = fn_native()
    except wire.WireError as e:
        a = ("error", e.offset)
    try:
        b = fn_numpy()
    except wire.WireError as e:
        b = ("error", e.offset)
    return a, b


@st.composite
def messages(draw):
    """Random byte strings, and well-formed field sequences, split into messages."""
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            parts.append(draw(st.binary(max_size=20)))
        else:
            num = draw(st.integers(1, 40))
            wt = draw(st.sampled_from([0, 1, 2, 5]))
            key = wire.encode_varint_int(num << 3 | wt)
            if wt == 0:
                body = wire.encode_varint_int(draw(st.integers(0, 2**64 - 1)))
            elif wt == 1:
                body = draw(st.binary(min_size=8, max_size=8))
            elif wt == 5:
                body = draw(st.binary(min_size=4, max_size=4))
            else:
                p = draw(st.binary(max_size=30))
                body = wire.encode_varint_int(len(p)) + p
            parts.append(key + body)
    return parts


@settings(max_examples=300, deadline=None)
@given(messages())
def test_scan_fields_agrees(parts):
    lens = np.array([len(p) for p in parts], np.int64)
    ends = np.cumsum(lens)
    starts = ends - lens
    buf = np.frombuffer(b"".join(parts) + b"\0", np.uint8)
    a, b = _both(lambda: wire.scan_fields(buf, starts, ends), lambda: _numpy_scan(buf, starts, ends))
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert isinstance(a, tuple) and isinstance(b, tuple), (a, b)
        return
    for k in FIELDS:
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=30), st.binary(max_size=12))
def test_packed_and_frames_agree(values, junk):
    enc = b"".join(wire.encode_varint_int(v) for v in values)
    for payload in (enc, enc + junk):
        buf = np.frombuffer(payload + b"\0", np.uint8)
        data, end = np.array([0], np.int64), np.array([len(payload)], np.int64)
        saved = wire._native
        try:
            a, _ = _both(lambda b=buf, d=data, e=end: wire.decode_packed_varints(b, d, e), lambda: None)
            wire._native = None
            b, _ = _both(lambda b=buf, d=data, e=end: wire.decode_packed_varints(b, d, e), lambda: None)
        finally:
            wire._native = saved
        if isinstance(a[0], str):
            assert isinstance(b[0], str) and a[1] == b[1]
        else:
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    framed = b"".join(wire.encode_varint_int(len(p)) + p for p in (enc, junk, b"")) + junk[:3]
    outcomes = []
    for fn in (stream.split_frames, stream._split_frames_py):
        try:
            s, e, stop, need = fn(framed, len(framed), 1 << 20)
            outcomes.append((list(s), list(e), stop, need))
        except stream._FrameError as exc:
            outcomes.append(("error", exc.pos))
    assert outcomes[0] == outcomes[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=6), max_size=40))
def test_intern_agrees(strings):
    buf = np.frombuffer(b"".join(strings) + b"\0", np.uint8)
    lens = np.array([len(s) for s in strings], np.int64)
    data = np.cumsum(lens) - lens
    codes, first = wire.intern_bytes(buf, data, lens)
    saved = wire._native
    try:
        wire._native = None
        codes2, first2 = wire.intern_bytes(buf, data, lens)
    finally:
        wire._native = saved
    np.testing.assert_array_equal(codes, codes2)
    np.testing.assert_array_equal(first, first2)
    assert [strings[i] for i in first] == list(dict.fromkeys(strings))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=5), min_size=3, max_size=3), max_size=10))
def test_concat_rows_agrees(table):
    parts = [wire.rows_from_bytes([row[k] for row in table]) if table else wire.Rows.empty(0) for k in range(3)]
    got = wire.Rows.concat(parts)
    saved = wire._native
    try:
        wire._native = None
        want = wire.Rows.concat(parts)
    finally:
        wire._native = saved
    assert got.data.tobytes() == want.data.tobytes() == b"".join(b"".join(r) for r in table)
    np.testing.assert_array_equal(got.lens, want.lens)


def _decode_both(payloads):
    a = Trace.from_messages(payloads)
    saved = codec._native
    try:
        codec._native = None
        wire_saved, wire._native = wire._native, None
        b = Trace.from_messages(payloads)
    finally:
        codec._native = saved
        wire._native = wire_saved
    return a, b


from strategies import traces  # noqa: E402


@settings(max_examples=150, deadline=None)
@given(traces())
def test_node_decoder_agrees_with_numpy(trace):
    payloads = codec.encode_rows(trace, np.arange(len(trace)))
    a, b = _decode_both(payloads)
    assert a.differences(b, limit=50) == []
    for k in ("placed_rows", "placed_bits", "placed_offsets", "extra", "extra_split"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)


def test_intern_falls_back_to_exact_on_hash_collision(monkeypatch):
    strings = [b"a", b"bb", b"a", b"", b"bb", b"c"]
    buf = np.frombuffer(b"".join(strings) + b"\0", np.uint8)
    lens = np.array([len(s) for s in strings], np.int64)
    data = np.cumsum(lens) - lens

    def collide(*args):
        raise wire._HashCollision

    monkeypatch.setattr(wire, "_native", None)
    expected = wire.intern_bytes(buf, data, lens)
    monkeypatch.setattr(wire, "_intern_hashed", collide)
    got = wire.intern_bytes(buf, data, lens)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert got[0].tolist() == [0, 1, 0, 2, 1, 3]
