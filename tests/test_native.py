"""The optional C kernels must agree with the numpy implementation, on good and bad input,
and a kernel not built for this package's sources and ABI must never load."""

import shutil
import sys
import sysconfig
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from setuptools import Distribution, Extension

import chakra_trace.schema
from chakra_trace import _native
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


# --------------------------------------------------------------------------- stale kernels

WIRE = "chakra_trace.schema._wire"


def _build_wire(out, macros):
    """_wire.c compiled with `macros` into out/chakra_trace/schema, as setup.py would build it."""
    ext = Extension(WIRE, [str(_native.HERE / _native.KERNELS[WIRE])], define_macros=macros, extra_compile_args=["-O0"])
    cmd = Distribution({"ext_modules": [ext]}).get_command_obj("build_ext")
    cmd.build_lib, cmd.build_temp = str(out), str(out / "obj")
    cmd.ensure_finalized()
    cmd.run()
    return out / "chakra_trace" / "schema"


@pytest.fixture(scope="module")
def stale(tmp_path_factory):
    """Kernels that import fine but were not built for this package: one for another ABI, one
    by setup.py's macros from other source text (a kernel left over from an older checkout)."""
    root = tmp_path_factory.mktemp("kernels")
    other = root / "other_src"
    (other / "schema").mkdir(parents=True)
    shutil.copy(_native.HERE / _native.SHARED_HEADER, other / _native.SHARED_HEADER)
    src = (_native.HERE / _native.KERNELS[WIRE]).read_text()
    (other / _native.KERNELS[WIRE]).write_text(src + "/* an older revision */\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_native, "HERE", other)
        other_macros = _native.build_macros(WIRE)
    abi = [(k, str(_native.ABI + 1) if k == "CHAKRA_KERNEL_ABI" else v) for k, v in _native.build_macros(WIRE)]
    return {"abi": _build_wire(root / "abi", abi), "source": _build_wire(root / "source", other_macros)}


def _import_from(monkeypatch, folder):
    """`import chakra_trace.schema._wire` finds only what is in `folder` (undone after the test)."""
    monkeypatch.setattr(chakra_trace.schema, "__path__", [str(folder)])
    monkeypatch.setattr(chakra_trace.schema, "_wire", sys.modules[WIRE])
    monkeypatch.delitem(sys.modules, WIRE)


def test_real_build_loads():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = _native.load(WIRE)
        st_ = _native.status()
    assert mod is native and mod.ABI == _native.ABI and mod.SOURCE == _native.source_hash(WIRE)
    assert set(st_) == set(_native.KERNELS)
    for k in st_.values():
        assert k.active and k.reason == "" and k.file.endswith(sysconfig.get_config_var("EXT_SUFFIX")), k


@pytest.mark.parametrize(
    "kind, found",
    [
        ("abi", f"stale (ABI {_native.ABI + 1}, expected {_native.ABI})"),
        ("source", "stale (built from other sources: hash "),
    ],
)
def test_stale_kernel_is_refused_with_one_warning(stale, monkeypatch, kind, found):
    folder = stale[kind]
    _import_from(monkeypatch, folder)
    with pytest.warns(_native.StaleKernelWarning) as caught:
        assert _native.load(WIRE) is None
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert WIRE in msg and str(folder) in msg and found in msg, msg
    assert "pip install -e ." in msg and "python setup.py build_ext --inplace" in msg
    if kind == "source":  # both hashes, so the two builds can be told apart
        assert _native.source_hash(WIRE)[:12] in msg
    else:  # the kernel itself imports and says what it was built with
        assert sys.modules[WIRE].ABI == _native.ABI + 1
    got = _native.status()[WIRE]
    assert not got.active and got.reason.startswith("refused: " + found) and got.reason in msg
    assert got.file.startswith(str(folder))


def test_unimportable_kernel_is_refused(monkeypatch, tmp_path):
    (tmp_path / ("_wire" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(b"not a shared object")
    _import_from(monkeypatch, tmp_path)
    with pytest.warns(_native.StaleKernelWarning, match="refused: cannot import"):
        assert _native.load(WIRE) is None


def test_missing_kernel_falls_back_quietly(monkeypatch, tmp_path):
    _import_from(monkeypatch, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native.load(WIRE) is None
        assert _native.status()[WIRE] == _native.KernelStatus(WIRE, False, None, "not built")


def test_pure_mode_disables_every_kernel(monkeypatch):
    monkeypatch.setenv("CHAKRA_TRACE_PURE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native.load(WIRE) is None
        st_ = _native.status()
    assert [k.reason for k in st_.values()] == ["disabled by CHAKRA_TRACE_PURE"] * len(_native.KERNELS)
    assert st_[WIRE].file == native.__file__ and not any(k.active for k in st_.values())
