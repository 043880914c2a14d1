"""Fuzz suite (issue 13): every reading command over hostile inputs keeps its promises (SECURITY.md).

The default run takes a fixed sample of each input class (tests/fuzz_corpus.py) through the main
commands: in-process where the input cannot take unbounded memory, else in a subprocess under
`resource` limits with its peak RSS measured. `pytest -m slow tests/test_fuzz.py` runs the whole
corpus through every command; `benchmarks/fuzz_bench.py` runs it for longer and counts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_check as ck
import fuzz_corpus as fc
import fuzz_shared as fs
from chakra_trace.errors import TraceFormatError
from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.schema import proto as pb
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.wire import encode_varint_int

SEED = 13

# the default run: named inputs of each class, chosen to cover every defect class of issue 13
DEFAULT: dict[str, list[str]] = {
    "damaged_et": ["trunc1", "random0", "header_garbage0", "flip0"],
    "gzip_bombs": ["sub_ratio_150MB", "zeros_200MB"],
    "empty_nodes": ["zeros_10MB"],
    "chakra_json": ["huge_int_id", "deep_nodes", "id_string", "type_99", "nodes_not_list"],
    "json_huge_deep": ["system_huge_int", "groups_deep", "host_deep", "kineto_huge_int", "chakra_json_huge"],
    "network_yaml": ["latency_1e19", "npus_1e9", "deep", "latency_huge_int", "python_tag"],
    "system_json": ["splits_1e9", "endpoint_delay_1e19", "local_mem_bw_zero"],
    "comm_groups": ["rank_99", "ranks_floats"],
    "host_trace": ["parent_cycle", "missing_id", "id_string"],
    "kineto_json": ["rank_string", "rank_float"],
    "semantic_et": [
        "comm_type_99",
        "node_type_99",
        "negative_comm_size",
        "order_mismatch",
        "size_mismatch",
        "send_to_npu_7",
        "self_data_dep",
        "cycle",
        "duration_2_63",
    ],
    "hostile_strings": ["xss", "control_chars", "dot_injection", "long_name"],
}
# in the default run a bomb goes through the command that reads it first (all of them: -m slow)
BOMB_COMMANDS = ["info", "simulate", "validate-groups", "convert", "from-json"]


@pytest.fixture(scope="session")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="session")
def comp(fuzz_dir) -> dict[str, Path]:
    return fc.companions(fuzz_dir / "companions")


_CORPUS: dict[tuple[str, int], dict[str, fc.Input]] = {}


def corpus_of(fuzz_dir: Path, cls: str, n: int) -> dict[str, fc.Input]:
    """The class's inputs by name, generated once per session."""
    key = (cls, n)
    if key not in _CORPUS:
        _CORPUS[key] = {i.name: i for i in fc.CLASSES[cls](fuzz_dir / f"in{n}", n, SEED)}
    return _CORPUS[key]


def _report(outcomes: list[ck.Outcome]) -> str:
    return "\n".join(
        f"{o.input.id} [{o.command.name}] exit {o.result.rc}: {'; '.join(o.problems)} | stderr: {o.result.stderr.strip()[-300:]!r}"
        for o in outcomes
        if not o.clean
    )


def _check(inp: fc.Input, comp, work: Path, only=None, subprocess_always: bool = False) -> list[ck.Outcome]:
    outcomes = ck.check(inp, comp, work, only=only, subprocess_always=subprocess_always)
    assert outcomes, f"no command reads {inp.id}"
    return outcomes


# --------------------------------------------------------------------------- the corpus, default sample


def test_good_job_is_clean_under_every_command(comp, tmp_path):
    """The baseline: the valid 2-rank job (send/recv included) exits 0 everywhere, ring-8 scale-out too."""
    good = fc.Input("good", "job", comp["job"], fc.TRACE)
    outcomes = _check(good, comp, tmp_path)
    assert [o.command.name for o in outcomes] == ck.TRACE_COMMANDS
    bad = [o for o in outcomes if not o.clean or o.result.rc != 0]
    assert not bad, _report(bad) or [(o.command.name, o.result.rc, o.result.stderr[-300:]) for o in bad]


@pytest.mark.parametrize("cls,name", [(c, n) for c, names in DEFAULT.items() for n in names], ids=lambda x: x)
def test_hostile_input(fuzz_dir, comp, tmp_path, cls, name):
    """One hostile input through the reading commands: exit 0/2 (validate 1), one-line error naming
    the file, no traceback, bounded memory, nothing half-written, and simulate refuses what validate rejects."""
    inp = corpus_of(fuzz_dir, cls, 1000)[name]
    outcomes = _check(inp, comp, tmp_path, only=BOMB_COMMANDS if inp.bomb else None)
    bad = [o for o in outcomes if not o.clean]
    assert not bad, _report(bad)


def test_default_sample_covers_every_class():
    assert sorted(DEFAULT) == sorted(fc.CLASSES)
    assert sorted(DEFAULT_SHARED) == sorted(fs.CLASSES)


# --------------------------------------------------------------------------- shared documents (issue 34)

# the default run: each reproducer of the attack audit (SECURITY.md, "Threat model")
DEFAULT_SHARED: dict[str, list[str]] = {
    "sweep_specs": [
        "where_copy",
        "where_attach",
        "where_read_text",
        "alias_bomb_fixed",
        "system_dev_zero",
        "system_local_file",
        "axes_1e12",
    ],  # fmt: skip
    "catalogs": ["view_reads_local_file", "macro_shadow", "sqlite_file", "wrong_types"],
    "models": ["gzip_bomb_256MB", "count_1e5", "tree_parent_cycle"],
    "bench_results": ["xss_strings", "ansi_strings", "bool_for_object", "gzip_bomb_256MB"],
    "profiles": ["deep", "wrong_shape"],
    "collect_folders": ["cache_link", "rank_links_out", "rank_fifo"],
    "replay_configs": ["substitute_from_file", "substitute_save"],
}
NEEDS = {"catalogs": "duckdb", "sweep_specs": "duckdb", "replay_configs": "torch"}


def shared_corpus(fuzz_dir: Path, cls: str, n: int) -> dict[str, fc.Input]:
    pytest.importorskip(NEEDS.get(cls, "json"))
    key = ("shared:" + cls, n)
    if key not in _CORPUS:
        _CORPUS[key] = {i.name: i for i in fs.CLASSES[cls](fuzz_dir / f"shared{n}", n, SEED)}
    return _CORPUS[key]


@pytest.mark.parametrize("cls,name", [(c, n) for c, names in DEFAULT_SHARED.items() for n in names], ids=lambda x: x)
def test_hostile_shared_document(fuzz_dir, comp, tmp_path, cls, name):
    """A shared document (spec, catalog, model, result, profile, collect folder, replay config) is
    data: every command that reads it exits 0 or 2 with one line, in bounded memory, and acts on
    nothing but its outputs (no marker file, no local file carried out, input folders unchanged)."""
    inp = shared_corpus(fuzz_dir, cls, 1000)[name]
    outcomes = _check(inp, comp, tmp_path, subprocess_always=True)  # a hang is a finding, not a stuck suite
    bad = [o for o in outcomes if not o.clean]
    assert not bad, _report(bad)


def test_corpus_is_deterministic(tmp_path):
    """The same seed writes the same bytes (failures reproduce from their name)."""
    for cls in ("damaged_et", "chakra_json", "semantic_et", "network_yaml"):
        a = fc.CLASSES[cls](tmp_path / "a", 8, SEED)
        b = fc.CLASSES[cls](tmp_path / "b", 8, SEED)
        assert [i.name for i in a] == [i.name for i in b]
        for x, y in zip(a, b):
            fx = sorted(x.path.parent.glob(x.path.name + "*"))
            fy = sorted(y.path.parent.glob(y.path.name + "*"))
            assert fx and [f.read_bytes() for f in fx] == [f.read_bytes() for f in fy], x.id


def test_sub_ratio_bomb_is_under_the_ratio_guard(fuzz_dir):
    """The bomb the issue found: small on disk, expands > 100x, yet never trips the 500:1 guard."""
    inp = corpus_of(fuzz_dir, "gzip_bombs", 1000)["sub_ratio_150MB"]
    size = inp.path.stat().st_size
    assert size < 1 << 20
    assert (150 << 20) / size > 100


# --------------------------------------------------------------------------- targeted regressions


def _one_line_error(res: ck.Result, *names: str) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), (res.rc, res.stderr[-1000:])
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _nested_bad(tmp_path: Path, kind: str) -> Path:
    """A node whose `inputs` sub-message is corrupt: invalid UTF-8 in a string, or a bad wire type."""
    inner = b"\x0a\x02\xff\xfe" if kind == "utf8" else b"\x0f\xff\xff"
    node = pb.Node(id=5, name="aten::mm", type=4).SerializeToString() + b"\x42" + bytes([len(inner)]) + inner
    meta = pb.GlobalMetadata(version="1.0.2-chakra.0.0.4").SerializeToString()
    p = tmp_path / f"nested_{kind}.0.et"
    p.write_bytes(encode_varint_int(len(meta)) + meta + encode_varint_int(len(node)) + node)
    return p


@pytest.mark.parametrize("kind", ["utf8", "wire_type"])
def test_validate_decodes_nested_node_data(tmp_path, kind):
    """Corrupt nested data must fail `validate` (not "OK"), and every error names file, node and offset."""
    p = _nested_bad(tmp_path, kind)
    res = ck.run_inprocess(["validate", str(p)])
    assert res.rc in (1, 2), (res.rc, res.stdout[-500:])
    text = res.stderr + res.stdout
    assert p.name in text and "node" in text and "offset" in text, text[-1000:]
    res = ck.run_inprocess(["to-json", str(p), str(tmp_path / "x.json")])
    line = _one_line_error(res, p.name)
    assert "offset" in line and "<input>" not in line


def test_to_json_of_dev_zero_is_bounded(tmp_path):
    """An endless input: refused (regular files and bounded pipes only), not written without bound."""
    out = tmp_path / "z.json"
    res = ck.run_subprocess(["to-json", "/dev/zero", str(out)], tmp_path, timeout=20)
    assert not res.timed_out
    _one_line_error(res, "/dev/zero")
    assert res.maxrss is not None and res.maxrss < ck.RSS_BOUND
    assert not out.exists() and not [q for q in tmp_path.iterdir() if ".tmp" in q.name]


def test_info_of_a_directory_says_what_is_wrong(tmp_path):
    d = tmp_path / "empty_dir"
    d.mkdir()
    line = _one_line_error(ck.run_inprocess(["info", str(d)]), "empty_dir")
    assert "no such file" not in line.lower()


def test_sigterm_leaves_no_temporary_file(tmp_path):
    """Killed mid-write by SIGTERM (as by SIGINT): the partial `.tmp` file is removed."""
    b = TraceBuilder()
    prev = b.comp("aten::" + "y" * 200, 5)
    for _ in range(300_000):
        prev = b.comp("aten::" + "y" * 200, 5, deps=[prev])
    src = tmp_path / "big.0.et"
    write_trace(b.build(), src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    p = subprocess.Popen(
        ck.chakra_argv() + ["to-json", str(src), str(out_dir / "big.json")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(".tmp" in q.name for q in out_dir.iterdir()):
        if p.poll() is not None:
            break
        time.sleep(0.01)
    if p.poll() is not None:
        pytest.fail(f"to-json finished before it could be interrupted (exit {p.returncode}); make the input bigger")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode != 0
    assert list(out_dir.iterdir()) == [], sorted(q.name for q in out_dir.iterdir())


@pytest.mark.parametrize("field,value", [("latency", "1e19"), ("latency", str(1 << 63)), ("bandwidth", "1e-300")])
def test_network_extremes_never_make_a_collective_faster(comp, tmp_path, field, value):
    """An absurd latency or bandwidth is refused on input, or slows the run: never wraps to a
    faster-than-baseline (or zero) finish with exit 0."""
    base = ck.run_inprocess(["simulate", str(comp["job"]), "--system", str(comp["system"]),
                             "--network", str(comp["network"]), "--json"])  # fmt: skip
    assert base.rc == 0, base.stderr
    net = fc.GOOD_NETWORK.replace(f"{field}: [ {'500' if field == 'latency' else '50'} ]", f"{field}: [ {value} ]")
    assert net != fc.GOOD_NETWORK
    p = tmp_path / f"{field}.yml"
    p.write_text(net)
    res = ck.run_inprocess(
        ["simulate", str(comp["job"]), "--system", str(comp["system"]), "--network", str(p), "--json"]
    )
    if res.rc == 2:
        _one_line_error(res, p.name)
        return
    assert res.rc == 0 and "Warning" not in res.stderr, res.stderr[-500:]
    step, base_step = json.loads(res.stdout)["recording_ns"], json.loads(base.stdout)["recording_ns"]
    assert step > base_step, (step, base_step)


def test_durations_past_2_63_do_not_wrap(fuzz_dir, tmp_path):
    """A duration >= 2^63 ns is refused, or the simulated finish is at least that long (never 0)."""
    inp = corpus_of(fuzz_dir, "semantic_et", 1000)["duration_2_63"]
    res = ck.run_inprocess(["simulate", str(inp.path), "--system", "recorded", "--json"])
    if res.rc == 2:
        _one_line_error(res)
        return
    assert res.rc == 0, res.stderr[-500:]
    assert json.loads(res.stdout)["recording_ns"] >= 1 << 63


def test_scale_out_remaps_send_recv_peers(comp):
    """A valid 2-rank send/recv job scaled out on ring-8 runs (no false deadlock)."""
    res = ck.run_inprocess(["simulate", str(comp["job"]), "--system", "ring-8", "--json"])
    assert res.rc == 0, res.stderr[-500:]
    assert len(json.loads(res.stdout)["finish_ns"]) == 8


def test_report_escapes_hostile_names(fuzz_dir, tmp_path):
    inp = corpus_of(fuzz_dir, "hostile_strings", 1000)["xss"]
    out = tmp_path / "r.html"
    res = ck.run_inprocess(["report", str(inp.path), "-o", str(out)])
    assert res.rc == 0, res.stderr[-500:]
    html = out.read_text()
    assert "alert(" in html  # the name is in the report...
    assert fc.XSS not in html  # ...but never as markup: a `</script>` of its own would end the script


def test_outputs_are_deterministic(fuzz_dir, tmp_path):
    """The same hostile input gives the same bytes twice (to-json, timeline, graph)."""
    inp = corpus_of(fuzz_dir, "hostile_strings", 1000)["control_chars"]
    runs = []
    for k in range(2):
        d = tmp_path / str(k)
        d.mkdir()
        for argv in (["to-json", f"{inp.path}.0.et", str(d / "x.json")], ["timeline", str(inp.path), "-o", str(d / "t.json")],
                     ["graph", str(inp.path), "-o", str(d / "g.dot")]):  # fmt: skip
            assert ck.run_inprocess(argv).rc == 0
        runs.append({q.name: q.read_bytes() for q in d.iterdir()})
    assert runs[0] == runs[1]


# --------------------------------------------------------------------------- code execution (defect 1)


@pytest.mark.torch
@pytest.mark.parametrize(
    "target",
    [
        "load_library::__self__.import_module",  # the attribute walk to torch.ops.import_module
        "x::__init__.__globals__",  # reaches a module's globals dict
    ],
)
def test_replay_config_cannot_reach_arbitrary_callables(tmp_path, target):
    """A `substitute` target that is not a registered `namespace::op.overload` is refused before
    anything runs: exit 2, one line naming the config; the module planted beside it is never imported."""
    pytest.importorskip("torch")
    from conftest import DATA

    marker = tmp_path / "PWNED"
    (tmp_path / "fuzz_pwned.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    cfg = tmp_path / "replay_cfg.json"
    cfg.write_text(json.dumps({"substitute": {"aten::add_": target, "aten::t": target, "aten::mm": target}}))
    res = ck.run_subprocess(
        ["replay", str(DATA / "mlp_rank0.et.json.gz"), "--config", str(cfg), "--budget-s", "0.5", "--steps", "2"],
        tmp_path,
        timeout=120,
    )
    assert not marker.exists(), "the config ran code"
    _one_line_error(res, cfg.name)


# --------------------------------------------------------------------------- hypothesis


@pytest.fixture(scope="module")
def good_et(tmp_path_factory) -> bytes:
    return fc.good_bytes(tmp_path_factory.mktemp("hyp"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(0, 10_000)))  # fmt: skip
def test_mutated_traces_read_or_fail_cleanly(good_et, tmp_path_factory, edits, cut):
    """Any byte edits and truncation of a valid trace: it loads, or fails with a TraceFormatError that
    names the file and an offset, and `validate` exits 0, 1 or 2 with no traceback."""
    data = bytearray(good_et)
    for pos, val in edits:
        data[pos % len(data)] = val
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    p = tmp_path_factory.mktemp("m") / "m.0.et"
    p.write_bytes(bytes(data))
    try:
        read_trace(p)
    except TraceFormatError as e:
        assert str(p) in str(e) and "offset" in str(e), str(e)
    inp = fc.Input("hypothesis", "m", p, fc.TRACE)
    for o in ck.check(inp, {"job": p}, p.parent / "w", only=["info", "validate", "sim-recorded"]):
        assert o.clean, _report([o])


# --------------------------------------------------------------------------- everything (slow)


@pytest.mark.slow
@pytest.mark.parametrize("cls", sorted(fc.CLASSES) + sorted(fs.CLASSES))
def test_whole_corpus_every_command(fuzz_dir, comp, tmp_path, cls):
    """Every input of the class through every command that reads it, bombs included, each in a subprocess."""
    outcomes = []
    inputs = (
        fc.CLASSES[cls](fuzz_dir / "all", 60, SEED) if cls in fc.CLASSES else shared_corpus(fuzz_dir, cls, 60).values()
    )
    for inp in inputs:
        outcomes += ck.check(inp, comp, tmp_path / inp.name, subprocess_always=inp.bomb or cls in fs.CLASSES)
    bad = [o for o in outcomes if not o.clean]
    assert not bad, f"{len(bad)} of {len(outcomes)} runs failed:\n" + _report(bad)


def test_subprocess_runner_measures_the_child(tmp_path):
    """The runner's RSS is the child's own (not this process's) and the limits hold."""
    res = ck.run_subprocess(["--version"], tmp_path)
    assert res.rc == 0 and res.maxrss is not None and 10 << 20 < res.maxrss < 512 << 20
    code = "x = bytearray(3 << 30)"
    r = subprocess.run([sys.executable, "-c", code], preexec_fn=ck._limits, capture_output=True, text=True)
    assert r.returncode != 0 and "MemoryError" in r.stderr


def test_host_trace_length_mismatch_names_the_right_field(fuzz_dir, tmp_path):
    """`input_shapes` shorter than `input_types`: the error names `input_shapes` (not types twice)."""
    inp = corpus_of(fuzz_dir, "host_trace", 1000)["shapes_mismatch"]
    line = _one_line_error(
        ck.run_inprocess(["convert", "pytorch", str(inp.path), "-o", str(tmp_path / "c")]), inp.path.name
    )
    assert "input_shapes" in line, line
