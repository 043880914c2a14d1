"""Hostile and broken `.et` input: clean one-line errors that say where, bounded memory.

Every case must raise `TraceFormatError` whose message names the file and a byte offset
(plus the message index / node id where there is one); the CLI turns it into exactly one
line on stderr and exit status 2, and shows the traceback only with `--debug`.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from chakra_trace.cli import main as cli_main
from chakra_trace.errors import TraceFormatError
from chakra_trace.io.et import iter_nodes, read_trace, write_trace
from chakra_trace.schema import proto as pb
from chakra_trace.schema.builder import TraceBuilder

# --------------------------------------------------------------------------- helpers


def varint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def frame(payload: bytes) -> bytes:
    return varint(len(payload)) + payload


def frame_positions(data: bytes) -> list[tuple[int, int, int]]:
    """(prefix offset, payload start, payload end) of each message, by an independent loop."""
    out, pos = [], 0
    while pos < len(data):
        start, n, shift = pos, 0, 0
        while True:
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out.append((start, pos, pos + n))
        pos += n
    return out


def node_msg(node_id: int, name: str = "aten::mm", **kw) -> bytes:
    return pb.Node(id=node_id, name=name, type=4, **kw).SerializeToString()


def valid_trace():
    b = TraceBuilder(metadata={"schema": "1.0.2-chakra.0.0.4"})
    x = b.comp("aten::mm", 10, num_ops=1000, tensor_size=64)
    y = b.comp("aten::" + "very_long_kernel_name_" * 8, 5, deps=[x])  # > 127 bytes: 2-byte prefix
    z = b.collective("ALL_REDUCE", 1 << 20, deps=[y], pg_name="dp")
    s = b.send(1, 4096, tag=-3, deps=[z])
    b.recv(1, 4096, tag=7, deps=[s])
    return b.build()


@pytest.fixture(scope="module")
def good_bytes(tmp_path_factory) -> bytes:
    p = tmp_path_factory.mktemp("good") / "good.0.et"
    write_trace(valid_trace(), p)
    data = p.read_bytes()
    frames = frame_positions(data)
    assert len(frames) == 6 and frames[2][1] - frames[2][0] == 2  # message #2 has a 2-byte prefix
    return data


def check_error(
    exc: TraceFormatError, path: Path, *, offset=None, offset_range=None, message_index=None, node_id=None, words=()
) -> None:
    """The error names the file and a byte offset (and where known the message / node)."""
    text = str(exc)
    assert "\n" not in text
    assert str(path) in text
    assert exc.offset is not None and "offset" in text and str(exc.offset) in text
    if offset is not None:
        assert exc.offset == offset, text
    if offset_range is not None:
        lo, hi = offset_range
        assert lo <= exc.offset <= hi, text
    if message_index is not None:
        assert exc.message_index == message_index, text
        assert (f"message #{message_index}" if message_index else "global metadata") in text
    if node_id is not None:
        assert exc.node_id == node_id and f"node id {node_id}" in text, text
    low = text.lower()
    assert any(w in low for w in words) if words else True, text


# --------------------------------------------------------------------------- bad files


@dataclass
class Case:
    data: bytes
    expect: dict


def _cases(good: bytes) -> dict[str, Case]:
    frames = frame_positions(good)
    (p1, s1, e1), (p2, _, _) = frames[1], frames[2]
    meta = good[: frames[0][2]]
    rnd = random.Random(20260101)
    bad_utf8 = b"\x08\x2a\x12\x03\xff\xfeA"  # id 42, name = ff fe 41
    bad_wt = b"\x08\x07\x1e\x01"  # id 7, then field 3 with wire type 6
    gz = gzip.compress(good * 1, mtime=0)
    return {
        # cut inside the payload of message #1
        "truncated_message": Case(
            good[: (s1 + e1) // 2], dict(offset_range=(p1, s1), message_index=1, words=("truncated",))
        ),
        # cut between the two bytes of message #2's length prefix
        "truncated_in_prefix": Case(
            good[: p2 + 1], dict(offset=p2, message_index=2, words=("length prefix", "truncated"))
        ),
        "prefix_larger_than_file": Case(
            meta + varint(10_000_000) + b"\x08\x01", dict(offset=len(meta), message_index=1, words=("length prefix",))
        ),
        "prefix_over_message_limit": Case(
            meta + varint(1 << 40) + b"\x08\x01", dict(offset=len(meta), message_index=1, words=("limit",))
        ),
        "overlong_varint_prefix": Case(
            meta + b"\xff" * 11 + b"\x01" + b"\x08\x01", dict(offset=len(meta), message_index=1, words=("varint",))
        ),
        "empty_file": Case(b"", dict(offset=0, words=("empty",))),
        "random_bytes": Case(bytes(rnd.getrandbits(8) for _ in range(4096)), dict(words=())),
        # offset: the name field's tag (payload byte 2) or its string bytes (payload byte 4)
        "invalid_utf8_name": Case(
            meta + frame(bad_utf8),
            dict(offset_range=(len(meta) + 3, len(meta) + 5), message_index=1, node_id=42, words=("utf-8",)),
        ),
        "bad_wire_type": Case(
            meta + frame(node_msg(1)) + frame(bad_wt),
            dict(offset=len(meta) + len(frame(node_msg(1))) + 1 + 2, message_index=2, node_id=7, words=("wire type",)),
        ),
        "bad_metadata": Case(b"\x03\xff\xff\xff" + frame(node_msg(1)), dict(message_index=0, words=("metadata",))),
        "gzip_truncated": Case(gz[: len(gz) // 2], dict(words=("gzip", "truncated"))),
        "gzip_corrupt": Case(gz[:12] + bytes(b ^ 0x5A for b in gz[12:40]) + gz[40:], dict(words=("gzip", "corrupt"))),
        "gzip_bad_crc": Case(
            gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:], dict(words=("gzip", "corrupt", "crc"))
        ),
        "gzip_magic_only": Case(b"\x1f\x8b", dict(offset=2, words=("gzip", "truncated"))),
    }


CASE_NAMES = [
    "truncated_message",
    "truncated_in_prefix",
    "prefix_larger_than_file",
    "prefix_over_message_limit",
    "overlong_varint_prefix",
    "empty_file",
    "random_bytes",
    "invalid_utf8_name",
    "bad_wire_type",
    "bad_metadata",
    "gzip_truncated",
    "gzip_corrupt",
    "gzip_bad_crc",
    "gzip_magic_only",
]


@pytest.fixture(scope="module")
def bad_files(good_bytes, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    d = tmp_path_factory.mktemp("bad")
    out = {}
    for name, case in _cases(good_bytes).items():
        p = d / f"{name}.0.et"
        p.write_bytes(case.data)
        out[name] = (p, case.expect)
    assert sorted(out) == sorted(CASE_NAMES)
    return out


def test_good_file_loads(good_bytes, tmp_path):
    p = tmp_path / "good.0.et"
    p.write_bytes(good_bytes)
    t = read_trace(p)
    assert len(t) == 5 and t.ids.tolist() == [0, 1, 2, 3, 4]
    assert cli_main(["info", str(p)]) == 0


@pytest.mark.parametrize("name", CASE_NAMES)
def test_library_error_says_where(bad_files, name):
    path, expect = bad_files[name]
    with pytest.raises(TraceFormatError) as ei:
        read_trace(path)
    check_error(ei.value, path, **expect)


@pytest.mark.parametrize(
    "name",
    [
        "truncated_message",
        "truncated_in_prefix",
        "overlong_varint_prefix",
        "bad_wire_type",
        "gzip_truncated",
        "empty_file",
    ],
)
def test_streaming_reader_errors_too(bad_files, name):
    path, expect = bad_files[name]
    with pytest.raises(TraceFormatError) as ei:
        for _ in iter_nodes(path):
            pass
    # protobuf's per-message parser cannot say where inside a message it failed
    check_error(ei.value, path, **{k: v for k, v in expect.items() if k == "message_index"})


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cli_one_line_exit_2(bad_files, name, capsys):
    path, _ = bad_files[name]
    rc = cli_main(["info", str(path)])
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and "offset" in lines[0]
    assert "Traceback" not in err and "Traceback" not in out


def test_cli_debug_reraises(bad_files):
    path, _ = bad_files["truncated_message"]
    with pytest.raises(TraceFormatError):
        cli_main(["--debug", "info", str(path)])


def _chakra_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("chakra")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "chakra_trace.cli"]


def test_cli_subprocess_traceback_only_with_debug(bad_files):
    path, _ = bad_files["bad_wire_type"]
    r = subprocess.run(_chakra_cmd() + ["info", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ") and str(path) in r.stderr and "node id 7" in r.stderr
    r = subprocess.run(_chakra_cmd() + ["--debug", "info", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "Traceback" in r.stderr and "TraceFormatError" in r.stderr


def test_random_bytes_never_escape(tmp_path):
    """Seeded random files: either a trace or a TraceFormatError, never anything else."""
    rnd = random.Random(7)
    failures = 0
    for i in range(40):
        p = tmp_path / f"r{i}.et"
        n = rnd.choice([1, 2, 3, 17, 300, 5000])
        head = rnd.choice([b"", b"\x00", b"\x1f\x8b"])
        p.write_bytes(head + bytes(rnd.getrandbits(8) for _ in range(n)))
        try:
            read_trace(p)
        except TraceFormatError as e:
            failures += 1
            assert str(p) in str(e) and "offset" in str(e), str(e)
    assert failures >= 30


def test_error_in_a_later_block_has_absolute_offset(tmp_path):
    """A bad node after more than one 8 MiB I/O block: offset and message index are file-wide."""
    name = "aten::" + "x" * 90
    msgs = [frame(node_msg(i, name)) for i in range(1, 100_001)]
    meta = frame(b"")
    body = b"".join(msgs)
    assert len(body) > 9 << 20
    bad_at = len(meta) + len(body)
    p = tmp_path / "late.0.et"
    p.write_bytes(meta + body + frame(b"\x08\x99\x01\x1e\x00") + frame(node_msg(5)))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    check_error(ei.value, p, offset=bad_at + 1 + 3, message_index=100_001, node_id=153)
    # the same content gzip-compressed: offsets are in decompressed bytes
    pg = tmp_path / "late.0.et.gz"
    pg.write_bytes(gzip.compress(p.read_bytes(), compresslevel=1))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(pg)
    check_error(ei.value, pg, offset=bad_at + 1 + 3, message_index=100_001, node_id=153)
    assert "decompressed" in str(ei.value)


def test_gzip_truncated_mid_stream_of_a_big_file(tmp_path):
    """Cut a multi-block gzip stream in the middle: clean error, offset within the data."""
    msgs = b"".join(frame(node_msg(i, f"op{i % 50}", duration_micros=i)) for i in range(1, 300_001))
    raw = frame(b"") + msgs
    gz = gzip.compress(raw, compresslevel=1)
    p = tmp_path / "cut.0.et.gz"
    p.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    check_error(ei.value, p, offset_range=(0, len(raw)), words=("gzip",))
    assert "truncated" in str(ei.value) or "ends early" in str(ei.value)


# --------------------------------------------------------------------------- zero-length messages


def test_zero_length_messages_are_empty_messages(tmp_path):
    """`00` is an empty message, not end of stream: nothing after it may be dropped."""
    p = tmp_path / "zeros.0.et"
    p.write_bytes(b"\x00" + b"\x00" * 3 + frame(node_msg(7, "aten::add_", data_deps=[0])) + b"\x00")
    t = read_trace(p)
    assert len(t) == 5
    assert t.ids.tolist() == [0, 0, 0, 7, 0]
    assert t.names[t.name_codes[3]] == "aten::add_" and t.data_deps(3).tolist() == [0]
    assert t.types.tolist() == [0, 0, 0, 4, 0]
    assert [m.id for m in iter_nodes(p)] == [0, 0, 0, 7, 0]
    assert t.metadata == pb.GlobalMetadata()


def test_metadata_only_file_is_an_empty_trace(tmp_path):
    p = tmp_path / "meta.0.et"
    p.write_bytes(b"\x00")
    assert len(read_trace(p)) == 0
    assert list(iter_nodes(p)) == []


# --------------------------------------------------------------------------- gzip bombs

BOMB_BYTES = 200 * 10**6
_BOMB_PROBE = textwrap.dedent("""
    import json, resource, sys
    from chakra_trace.errors import TraceFormatError
    from chakra_trace.io.et import read_trace

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

    # bound this process: whatever happens, it cannot take more than 1.5 GiB more address space
    vm = status("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1536 << 20), vm + (1536 << 20)))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM (ru_maxrss would include the parent's peak)
    except OSError:
        pass
    before = status("VmRSS")
    out = {}
    try:
        t = read_trace(sys.argv[1])
        out["result"] = "loaded %d nodes" % len(t)
    except TraceFormatError as e:
        out.update(result="TraceFormatError", message=str(e), offset=e.offset)
    except MemoryError as e:
        out.update(result="MemoryError", message=repr(e)[:300])
    out["peak_growth"] = status("VmHWM") - before
    print(json.dumps(out))
""")


def _write_bomb(path: Path, head: bytes) -> None:
    zeros = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=6) as g:  # streamed: never 200 MB in memory
        g.write(head)
        left = BOMB_BYTES
        while left:
            g.write(zeros[: min(left, len(zeros))])
            left -= min(left, len(zeros))


def _probe(path: Path) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", _BOMB_PROBE, str(path)], capture_output=True, text=True, timeout=180, env=env
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _assert_bomb_stopped(path: Path, res: dict) -> None:
    assert path.stat().st_size < 1 << 20  # ~200 KB on disk
    assert res["result"] == "TraceFormatError", res
    low = res["message"].lower()
    assert str(path) in res["message"] and "offset" in low
    assert "ratio" in low and "bomb" in low, res
    assert res["offset"] < 4 << 20, f"stopped only after {res['offset']} of {BOMB_BYTES} bytes"
    assert res["peak_growth"] < 256 << 20, f"peak RSS grew {res['peak_growth'] >> 20} MiB"


def test_gzip_bomb_of_zero_bytes(tmp_path):
    """200 MB of zero bytes (each a valid empty message) gzipped to ~200 KB."""
    p = tmp_path / "bomb.0.et.gz"
    _write_bomb(p, b"")
    _assert_bomb_stopped(p, _probe(p))


def test_gzip_bomb_behind_one_huge_length_prefix(tmp_path):
    """An empty metadata frame, then one node frame announcing ~200 MB of zero bytes."""
    p = tmp_path / "bomb1.0.et.gz"
    _write_bomb(p, b"\x00" + varint(BOMB_BYTES))
    _assert_bomb_stopped(p, _probe(p))


def test_gzip_bomb_is_refused_even_with_a_hard_cap(tmp_path):
    """`Limits.max_bytes` is the hard stop that works today: the error names file and offset."""
    from chakra_trace.io.stream import Limits

    p = tmp_path / "bomb2.0.et.gz"
    with gzip.open(p, "wb", compresslevel=6) as g:
        g.write(b"\x00" + bytes(30 << 20))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p, limits=Limits(max_bytes=1 << 20))
    check_error(ei.value, p, offset_range=(1 << 20, 20 << 20), words=("limit",))
