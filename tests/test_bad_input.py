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
from chakra_trace.schema.wire import encode_varint_int
from conftest import sample

# --------------------------------------------------------------------------- helpers


def frame(payload: bytes) -> bytes:
    return encode_varint_int(len(payload)) + payload


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
            meta + encode_varint_int(10_000_000) + b"\x08\x01",
            dict(offset=len(meta), message_index=1, words=("length prefix",)),
        ),
        "prefix_over_message_limit": Case(
            meta + encode_varint_int(1 << 40) + b"\x08\x01", dict(offset=len(meta), message_index=1, words=("limit",))
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
    _write_bomb(p, b"\x00" + encode_varint_int(BOMB_BYTES))
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


# --------------------------------------------------------------------------- hostile JSON / YAML / semantics
# Each input once made Python's readers raise (ValueError over 4,300 digits, RecursionError, IndexError,
# KeyError, ...) and the CLI print "internal error"; each must now be one line naming the file.

BIG_INT = "9" * 5000
DEEP = "[" * 100_000 + "]" * 100_000
HOST = sample("linear_et.json.gz")
KINETO = sample("kineto/linear_kineto_head.json.gz")


def one_line_error(capsys, args: list[str], *words: str) -> str:
    rc = cli_main([str(a) for a in args])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    line = lines[0]
    assert line.startswith("error: ") and "internal error" not in line and "Traceback" not in line, line
    for w in words:
        assert w in line, line
    return line


def _host_text() -> str:
    return gzip.decompress(HOST.read_bytes()).decode()


def _kineto() -> dict:
    return json.loads(gzip.decompress(KINETO.read_bytes()))


@pytest.fixture(scope="module")
def good_et(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("et") / "good.0.et"
    write_trace(valid_trace(), p)
    return p


def test_host_trace_integer_over_the_digit_limit(tmp_path, capsys):
    p = tmp_path / "host.json"
    text = _host_text().replace('"pid": 24248', f'"pid": {BIG_INT}')
    p.write_text(text)
    line = one_line_error(capsys, ["convert", "pytorch", p, "-o", tmp_path / "o"], str(p), "5000 digits", "'pid'")
    assert f"byte offset {text.index(BIG_INT)}" in line


def test_host_trace_nested_too_deeply(tmp_path, capsys):
    p = tmp_path / "host.json"
    p.write_text(_host_text().replace('"inputs": []', f'"inputs": {DEEP}', 1))
    one_line_error(capsys, ["convert", "pytorch", p, "-o", tmp_path / "o"], str(p), "nested too deeply", "offset")


def test_host_trace_parent_cycle(tmp_path, capsys):
    host = json.loads(_host_text())
    a, b = host["nodes"][1], host["nodes"][2]
    a["parent"], b["parent"] = b["id"], a["id"]
    p = tmp_path / "host.json"
    p.write_text(json.dumps(host))
    line = one_line_error(capsys, ["convert", "pytorch", p, "-o", tmp_path / "o"], str(p), "cycle")
    assert any(f"{x} -> {y} -> {x}" in line for x, y in ((a["id"], b["id"]), (b["id"], a["id"]))), line


@pytest.mark.parametrize("rank", ["zero", -1, 1.5, True, [0], BIG_INT])
def test_kineto_rank_not_an_integer(tmp_path, capsys, rank):
    k = _kineto()
    k.setdefault("distributedInfo", {})["rank"] = rank
    p = tmp_path / "k.json"
    text = json.dumps(k)
    p.write_text(text.replace(f'"rank": "{BIG_INT}"', f'"rank": {BIG_INT}'))
    words = ("5000 digits",) if rank == BIG_INT else ("distributedInfo.rank", "expected a rank number")
    one_line_error(capsys, ["convert", "pytorch", HOST, p, "-o", tmp_path / "o"], str(p), *words)


@pytest.mark.parametrize("text", [f'{{"g": [{BIG_INT}]}}', DEEP, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_comm_groups_hostile_json(tmp_path, capsys, good_et, text):
    p = tmp_path / "groups.json"
    p.write_text(text)
    words = ("5000 digits", "offset 7") if BIG_INT in text else ("nested too deeply",)
    one_line_error(capsys, ["simulate", good_et, "--system", "ring-8", "--comm-groups", p], str(p), *words)
    one_line_error(capsys, ["analyze", "top", good_et, "--comm-groups", p], str(p), *words)


@pytest.mark.parametrize(
    "name, text, words",
    [
        ("net.yml", f"topology: [Ring]\nnpus_count: [{BIG_INT}]\n", (":2:14:", "5000 digits")),
        ("net.yml", DEEP, ("nested too deeply",)),
        ("sys.json", f'{{"endpoint-delay": {BIG_INT}}}', (":1:20:", "5000 digits")),
        ("sys.json", DEEP, ("nested too deeply",)),
    ],
)
def test_system_configs_hostile(tmp_path, name, text, words):
    from chakra_trace.errors import ChakraError
    from chakra_trace.io.documents import load_json, load_yaml

    p = tmp_path / name
    with pytest.raises(ChakraError) as e:
        (load_yaml if name.endswith("yml") else load_json)(text, str(p))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(p)) and all(w in msg for w in words), msg


def test_system_config_files_hostile_cli(tmp_path, capsys, good_et):
    net, sys_ = tmp_path / "net.yml", tmp_path / "sys.json"
    net.write_text(f"topology: [Ring]\nnpus_count: [{BIG_INT}]\nbandwidth: [1]\nlatency: [1]\n")
    sys_.write_text("{}")
    one_line_error(capsys, ["simulate", good_et, "--system", sys_, "--network", net], str(net), "5000 digits")
    net.write_text(DEEP)
    one_line_error(capsys, ["simulate", good_et, "--system", sys_, "--network", net], str(net), "nested too deeply")


def test_from_json_integer_over_the_digit_limit(tmp_path, capsys):
    doc, lines = tmp_path / "doc.json", tmp_path / "nodes.jsonl"
    doc.write_text(f'{{"g": [{BIG_INT}]}}')
    one_line_error(capsys, ["from-json", doc, tmp_path / "x.et"], str(doc), "5000 digits")
    lines.write_text(
        json.dumps({"format": "chakra-trace-json", "version": 1}) + "\n" + f'{{"id": 1, "type": {BIG_INT}}}\n'
    )
    with pytest.raises(TraceFormatError, match="5000 digits"):
        from chakra_trace.io.jsonio import read_json

        read_json(lines)


@pytest.mark.parametrize("row", [0, 4])  # row 4 holds the last name: a wrapped key indexed past the names
def test_node_type_99_in_top_and_report(tmp_path, capsys, good_et, row):
    t = read_trace(good_et)
    t.types[row] = 99
    p = tmp_path / "t.0.et"
    write_trace(t, p)
    assert cli_main(["analyze", "top", str(p), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert {(r["name"], r["type"]) for r in rows if "UNKNOWN" in r["type"]} == {
        (t.names[t.name_codes[row]], "UNKNOWN_NODE_TYPE_99")
    }
    assert cli_main(["report", str(p), "-o", str(tmp_path / "r.html")]) == 0


@pytest.mark.parametrize("attr, code", [("types", "invalid-node-type"), ("comm_type", "invalid-comm-type")])
def test_validate_names_unknown_enums_by_node(tmp_path, capsys, good_et, attr, code):
    t = read_trace(good_et)
    row = 2  # the collective
    getattr(t, attr)[row] = 99
    p = tmp_path / "t.0.et"
    write_trace(t, p)
    with pytest.raises(SystemExit) as e:
        cli_main(["validate", str(p), "--json"])
    assert e.value.code == 1
    issues = json.loads(capsys.readouterr().out)["report"]["issues"]
    bad = [i for i in issues if i["code"] == code]
    assert bad and bad[0]["severity"] == "error" and bad[0]["node_ids"] == [int(t.ids[row])]
    assert bad[0]["message"].endswith(f": 99 (node id {int(t.ids[row])})")


def test_memory_error_is_one_line_naming_the_command(monkeypatch, capsys, good_et):
    import chakra_trace.cli.info as info_cmd

    def boom(*a, **k):
        raise MemoryError()

    monkeypatch.setattr(info_cmd, "open_workload", boom)
    line = one_line_error(capsys, ["info", good_et], "out of memory", str(good_et), "SECURITY.md")
    assert "MemoryError" not in line


def test_a_folder_named_like_a_trace_is_not_read_as_one(tmp_path, capsys):
    (tmp_path / "job.0.et").mkdir()
    one_line_error(capsys, ["info", tmp_path / "job"], "no such file")
    one_line_error(capsys, ["info", tmp_path], "a folder that holds no workload")


def test_host_io_length_mismatch_names_the_list_that_differs(tmp_path, capsys):
    host = json.loads(gzip.decompress(sample("allgather_host_1.0.2.json.gz").read_bytes()))
    node = next(n for n in host["nodes"] if len(n["inputs"]["types"]) >= 2)
    node["inputs"]["shapes"] = node["inputs"]["shapes"][:1]
    p = tmp_path / "host.json"
    p.write_text(json.dumps(host))
    k = len(node["inputs"]["types"])
    line = one_line_error(capsys, ["convert", "pytorch", p, "-o", tmp_path / "o"], str(p), f"node id {node['id']}")
    assert f"'inputs.shapes' has 1 entries but 'inputs.types' has {k}" in line, line


# --------------------------------------------------------------------------- corrupt nested node data (item 7)

_IO_BAD_UTF8 = b"\x0a\x02\xff\xfe"  # IOInfo.values = ff fe
_GARBAGE = b"\x0a\x05\xff"  # a length that runs past the end of the sub-message


@pytest.mark.parametrize(
    "field_tag, sub, field",
    [
        (b"\x42", _IO_BAD_UTF8, "inputs.values"),  # inputs (8), bad UTF-8 in a string
        (b"\x4a", _GARBAGE, "outputs"),  # outputs (9), a corrupt sub-message
        (b"\x52", b"\x0a\x02\xff\xfe", "attr[0].name"),  # attr (10) whose name is bad UTF-8
        (b"\x52", b"\x0a\x01a\x22\x03\x0a\x01\xff", "attr[0].double_list"),  # a garbage list inside an attribute
    ],
)
def test_corrupt_nested_node_data_is_found_by_every_command(tmp_path, capsys, field_tag, sub, field):
    meta = frame(pb.GlobalMetadata(version="1.0.2-chakra.0.0.4").SerializeToString())
    first = frame(node_msg(1))
    head = node_msg(7)
    p = tmp_path / "bad.0.et"
    p.write_bytes(meta + first + frame(head + field_tag + encode_varint_int(len(sub)) + sub))
    payload_at = len(meta) + len(first) + 1
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    at = payload_at + len(head)
    check_error(e.value, p, message_index=2, node_id=7, offset_range=(at, at + 2 + len(sub)))
    assert field in str(e.value)
    for cmd in (["info", p], ["validate", p], ["to-json", p, tmp_path / "out.json"]):
        line = one_line_error(capsys, cmd, str(p), "node id 7", f"byte offset {e.value.offset}", field)
        assert "<input>" not in line
    assert not (tmp_path / "out.json").exists()


def test_nested_check_finds_the_bad_row_among_many(tmp_path):
    """The bulk check narrows a failure in one block of 300,000 nodes to its node and byte."""
    meta = frame(pb.GlobalMetadata(version="1.0.2-chakra.0.0.4").SerializeToString())
    msgs = [frame(node_msg(i) + b"\x42\x04\x0a\x02ab") for i in range(300_000)]
    bad = 212_345
    msgs[bad] = msgs[bad].replace(b"\x0a\x02ab", b"\x0a\x02\xff\xfe")
    p = tmp_path / "many.0.et"
    p.write_bytes(meta + b"".join(msgs))
    at = len(meta) + sum(map(len, msgs[:bad])) + len(msgs[bad]) - 4  # IOInfo.values' tag
    with pytest.raises(TraceFormatError) as e:
        read_trace(p)
    # (protobuf says why where it can: "invalid UTF-8"; 4.21's upb says only "Error parsing message")
    check_error(e.value, p, offset=at, message_index=bad + 1, node_id=bad, words=("does not parse",))
    msgs[bad] = msgs[0]
    p.write_bytes(meta + b"".join(msgs))
    assert len(read_trace(p)) == 300_000


def test_text_workload_integer_over_the_digit_limit():
    from chakra_trace.convert.text import parse_text_workload
    from chakra_trace.errors import ChakraError

    with pytest.raises(ChakraError, match="5000 digits"):
        parse_text_workload(f"DATA\n{BIG_INT}\n", "w.txt")


@pytest.mark.parametrize("pg_config", [f'[{{"pg_name": "0", "ranks": [{BIG_INT}]}}]', DEEP])
def test_hostile_pg_config_declares_no_groups(pg_config):
    from chakra_trace.schema.groups import declared_groups

    b = TraceBuilder()
    b.add("## process_group:init ##", "METADATA_NODE", pg_config=pg_config)
    assert declared_groups([b.build()]) == {}
