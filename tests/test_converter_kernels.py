"""The converters' optional C kernels give what their Python paths give (host-ET splitting,
interval nesting); the Kineto scanner has its own tests in test_kineto_native.py."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.io import kineto
from chakra_trace.io.nesting import interval_parents
from chakra_trace.io.pytorch_host import reader as host_reader
from conftest import sample
from test_pytorch_host import SAMPLES, _same

host_c = pytest.mark.skipif(host_reader._native is None, reason="C kernels not built (or CHAKRA_TRACE_PURE)")
nest_c = pytest.mark.skipif(kineto._native is None, reason="C kernels not built (or CHAKRA_TRACE_PURE)")


@host_c
@given(
    st.lists(
        st.sampled_from(
            [
                b"a",
                b"7",
                b"0",
                b"12",
                b"}, {",
                b"}",
                b"{",
                b", ",
                b"x9y",
                b"\xc3\xa9",
                b"\xb9",
                b"/:",
                b"0123456789abcdef",
            ]
        ),
        max_size=80,
    ),
    st.sampled_from([b"}, {", b"},\n  {", b"}"]),
    st.integers(0, 5),
)
@settings(max_examples=300, deadline=None)
def test_split_pieces_is_split_and_translate(parts, sep, pos):
    buf = bytearray(b"".join(parts))
    pos = min(pos, len(buf))
    starts, lens, codes, first = (
        np.frombuffer(x, t)
        for x, t in zip(host_reader._native.split_pieces(buf, pos, sep), (np.int64, np.int64, np.int32, np.int64))
    )
    pieces = bytes(buf[pos:]).split(sep)[:-1]
    assert [bytes(buf[a : a + n]) for a, n in zip(starts.tolist(), lens.tolist())] == pieces
    keys = [p.translate(host_reader._MASK) for p in pieces]
    distinct = list(dict.fromkeys(keys))
    assert codes.tolist() == [distinct.index(k) for k in keys]
    assert first.tolist() == [keys.index(k) for k in distinct]


@host_c
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_host_reader_same_with_and_without_the_kernel(tmp_path, monkeypatch, name):
    plain = tmp_path / name.replace(".gz", "")
    plain.write_bytes(gzip.decompress(sample(name).read_bytes()))
    native = [host_reader.read_host_trace(plain, block_size=bs) for bs in (4096, 1 << 20)]
    monkeypatch.setattr(host_reader, "_native", None)
    pure = host_reader.read_host_trace(plain)
    for got in native:
        _same(got, pure)


def _intervals(rng: random.Random, n: int):
    """Nested call stacks on a few threads, with touching, zero-length, identical and partly
    overlapping intervals mixed in."""
    starts, ends, tids = [], [], []
    for _ in range(n):
        t = rng.randrange(3)
        s = rng.randrange(0, 200)
        kind = rng.random()
        e = s if kind < 0.1 else s + rng.randrange(1, 60)
        starts.append(s)
        ends.append(e)
        tids.append(t)
        if kind > 0.8 and starts:  # an exact copy of an earlier interval
            j = rng.randrange(len(starts))
            starts.append(starts[j])
            ends.append(ends[j])
            tids.append(tids[j])
    return np.array(starts), np.array(ends), np.array(tids)


@nest_c
@pytest.mark.parametrize("seed", range(40))
def test_interval_nesting_same_with_and_without_the_kernel(monkeypatch, seed):
    s, e, t = _intervals(random.Random(seed), 1 + seed * 7)
    got = interval_parents(s, e, t)
    monkeypatch.setattr(kineto, "_native", None)
    assert got.tolist() == interval_parents(s, e, t).tolist()
