"""A shared trace, replay config, exported plan or result file is data, never a capability (issue 34):
replay runs computations on tensors only (nothing that opens, saves or maps a file), sizes what it
will hold before anything runs, stops at its time budget; result files are read bounded, and the
Markdown report shows their values as text."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.replay.bench_report import bench_report
from chakra_trace.replay.measure import Measurement, load_measurements, measure
from conftest import DATA, sample

SCHEMA_FROM_FILE = (
    "aten::from_file(str filename, bool? shared=None, int? size=0, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"
)


def _torch():
    return pytest.importorskip("torch")


def _mlp() -> dict:
    return json.loads(gzip.open(DATA / "mlp_rank0.et.json.gz").read())


def _write(d: dict, path: Path) -> Path:
    path.write_text(json.dumps(d))
    return path


def _from_file_node(node_id: int, parent: int, target: Path) -> dict:
    """The review's reproducer: a node `aten::from_file(target, shared=True, size=4096)`."""
    return {
        "id": node_id,
        "name": "aten::from_file",
        "ctrl_deps": parent,
        "inputs": {
            "values": [str(target), True, 4096, "<None>", "<None>", "cpu", False],
            "shapes": [[], [], [], [], [], [], []],
            "types": ["String", "Bool", "Int", "None", "None", "Device", "Bool"],
            "strides": [[], [], [], [], [], [], []],
        },
        "outputs": {
            "values": [[node_id + 1, node_id + 2, 0, 4096, 4, "cpu"]],
            "shapes": [[4096]],
            "types": ["Tensor(float)"],
            "strides": [[1]],
        },
        "attrs": [
            {"name": "rf_id", "type": "uint64", "value": 99999},
            {"name": "seq_id", "type": "int64", "value": -1},
            {"name": "tid", "type": "uint64", "value": 1},
            {"name": "op_schema", "type": "string", "value": SCHEMA_FROM_FILE},
        ],
    }


def _from_file_trace(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(trace, a victim file that exists, a path that does not) with one from_file node for each."""
    victim, absent = tmp_path / "victim.sh", tmp_path / "created_by_the_trace"
    victim.write_text("echo hello\n")
    d = _mlp()
    step = next(n["id"] for n in d["nodes"] if n["name"] == "ProfilerStep#2")
    top = max(n["id"] for n in d["nodes"])
    d["nodes"] += [_from_file_node(top + 10, step, victim), _from_file_node(top + 20, step, absent)]
    return _write(d, tmp_path / "from_file.et.json"), victim, absent


# ------------------------------------------------------------------ replay runs operators, not effects
@pytest.mark.torch
def test_a_trace_op_that_maps_a_file_is_refused_and_touches_nothing(tmp_path):
    _torch()
    from chakra_trace.replay.operators import HostReplay

    trace, victim, absent = _from_file_trace(tmp_path)
    rep = HostReplay(trace, host_gaps=False)
    got = [o for o in rep.coverage.outcomes if o.name == "aten::from_file"]
    assert [o.status for o in got] == ["refused", "refused"]
    assert all("maps a file" in o.reason for o in got)
    assert rep.coverage.replayed == rep.coverage.total - 2
    rep.run_step()
    assert victim.read_text() == "echo hello\n" and not absent.exists()
    assert all(op["op"] != "aten::from_file" for op in rep.plan["ops"])


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_the_replay_result_and_the_exported_script_leave_the_op_out(tmp_path, capsys):
    _torch()
    trace, victim, absent = _from_file_trace(tmp_path)
    script, result = tmp_path / "bench.py", tmp_path / "result.json"
    args = ["replay", str(trace), "--budget-s", "0.3", "--no-host-gaps", "--export", str(script), "-o", str(result)]
    assert main(args) == 0
    assert "aten::from_file (node " in capsys.readouterr().out  # (the per-op lines name it, refused)
    reasons = json.loads(result.read_text())["coverage"]["0"]["reasons"]
    [(why, n)] = [(k, v) for k, v in reasons.items() if k.startswith("refused: aten::from_file")]
    assert n == 2 and "maps a file" in why
    assert victim.read_text() == "echo hello\n" and not absent.exists()
    packed = script.read_text().split("_PLANS = (\n", 1)[1].split("\n)\n", 1)[0]
    plans = json.loads(zlib.decompress(base64.b64decode("".join(x.strip().strip('"') for x in packed.split()))))
    assert plans[0]["ops"] and all("from_file" not in op["op"] for op in plans[0]["ops"])


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_an_edited_exported_plan_is_refused_when_the_script_runs(tmp_path):
    """The script may come from someone else, or be edited: it refuses what a replay refuses."""
    _torch()
    from chakra_trace.replay.export import export_script

    target = tmp_path / "written_by_the_script"
    ops = [
        {"kind": "op", "op": "aten::from_file", "args": [str(target), True, 4096], "kwargs": {}, "reads": [],
         "writes": []},
        {"kind": "op", "op": "aten::relu.default", "args": [{"t": ["1", [8], [1], 0, "float32", None, False]}],
         "kwargs": {}, "reads": ["1"], "writes": []},
    ]  # fmt: skip
    plan = {"device": "cpu", "seed": 0, "storages": {"1": [32, False]}, "ops": ops}
    script = export_script([plan], tmp_path / "bench.py", name="edited", source="x", steps_per_run=1)
    run = subprocess.run(
        [sys.executable, str(script), "--repeats", "2", "--warmup", "0", "--warmup-s", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert run.returncode == 0, run.stderr
    assert not target.exists()
    assert "refused, not run: aten::from_file maps a file" in run.stderr and "median" in run.stdout


@pytest.mark.torch
@pytest.mark.parametrize("target", ["aten::from_file", "aten::save", "aten::_print", "aten::warn"])
def test_config_substitutes_that_reach_files_or_output_are_refused_at_load(tmp_path, monkeypatch, capsys, target):
    _torch()
    from chakra_trace.replay.operators import ReplayConfig

    cfg = _write({"substitute": {"aten::relu": target}}, tmp_path / "cfg.json")
    with pytest.raises(ChakraError, match=rf"cfg\.json: substitute 'aten::relu': '{target}' is refused: {target} "):
        ReplayConfig.load(cfg)
    monkeypatch.setattr("chakra_trace.replay.job.run_ranks", lambda *a, **k: pytest.fail("started ranks"))
    assert main(["replay", str(DATA / "mlp_rank0.et.json.gz"), "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is refused" in err[0] and "internal error" not in err[0]


@pytest.mark.torch
def test_only_allow_listed_string_arguments_reach_an_operator():
    """Every schema of PyTorch's registry with a string argument that is not on the allow-list is
    refused as a whole (aten::from_file and aten::save among them), and so is every namespace that
    is not compute; allow-listed arguments take their modes, never a path or a program."""
    torch = _torch()
    from chakra_trace.replay import _standalone as rt

    refused, checked = set(), 0
    for s in torch._C._jit_get_all_schemas():
        ns = s.name.split("::")[0]
        if ns not in rt.COMPUTE_NAMESPACES:
            continue
        try:
            fn = rt.resolve(f"{s.name}.{s.overload_name or 'default'}")
        except ValueError:
            continue
        checked += 1
        loose = [a.name for a in fn._schema.arguments if "str" in str(a.type) and a.name not in rt.STRING_ARGUMENTS]
        if loose or s.name in rt.REFUSED_OPS:
            assert rt.schema_refusal(fn) is not None, s
            refused.add(s.name)
    assert checked > 3000 and {"aten::from_file", "aten::save", "aten::_print", "aten::warn"} <= refused
    for name in ("profiler::_record_function_enter_new", "c10d::allreduce_", "prims::add"):
        assert "not one of the compute namespaces" in rt.schema_refusal(rt.resolve(name))

    gelu, div = rt.resolve("aten::gelu.default"), rt.resolve("aten::div.Tensor_mode")
    x = torch.ones(2)
    assert rt.refusal(gelu, [x], {"approximate": "tanh"}) is None
    assert rt.refusal(div, [x, x], {"rounding_mode": "floor"}) is None
    for bad in ("/etc/passwd", "../x", "tanh; rm -rf /", "x" * 40):
        assert "is not a value a replay passes" in rt.refusal(gelu, [x], {"approximate": bad})
    allr = rt.resolve("_c10d_functional::all_reduce.default")  # (what the tp corpus trace records)
    assert rt.refusal(allr, [x, "sum", "0"], {}) is None
    assert "is not a value" in rt.refusal(allr, [x, "sum", "/dev/shm/x"], {})
    with pytest.raises(rt.Refused, match="from_file"):
        rt.build_call({"kind": "op", "op": "aten::from_file", "args": ["/tmp/x"], "kwargs": {}}, {}, "cpu")
    with pytest.raises(rt.Refused, match="a delay of 1e\\+300 s"):
        rt.build_call({"kind": "delay", "seconds": 1e300, "args": [], "kwargs": {}}, {}, "cpu")


# ------------------------------------------------------------------ memory: sized before anything runs
def _huge_relu_input(tmp_path: Path, numel: int) -> Path:
    d = _mlp()
    node = next(n for n in d["nodes"] if n["name"] == "aten::relu")
    node["inputs"] = {"values": [[21, 22, 0, numel, 4, "cpu"]], "shapes": [[numel]], "types": ["Tensor(float)"],
                      "strides": [[1]]}  # fmt: skip
    return _write(d, tmp_path / "big.et.json")


@pytest.mark.torch
def test_a_trace_too_big_for_this_machine_is_refused_before_any_rank_starts(tmp_path, monkeypatch, capsys):
    _torch()
    trace = _huge_relu_input(tmp_path, 1 << 40)  # 4 TiB of float storage
    monkeypatch.setattr("chakra_trace.replay.job.run_ranks", lambda *a, **k: pytest.fail("started ranks"))
    assert main(["replay", str(trace), "--budget-s", "0.3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {trace}: replaying it needs 4.1e+03 GiB of memory")
    assert "GiB of recorded storages" in err[0] and "over the limit of" in err[0] and "memory available" in err[0]


@pytest.mark.torch
def test_the_estimate_counts_outputs_and_every_rank_on_this_machine(tmp_path, monkeypatch):
    _torch()
    from chakra_trace.replay import job, memory
    from chakra_trace.replay.operators import HostReplay

    mlp = DATA / "mlp_rank0.et.json.gz"
    base = HostReplay(mlp, host_gaps=False).memory
    # an op that makes a 2 GiB output from small inputs: the storages alone would pass
    d = _mlp()
    node = next(n for n in d["nodes"] if n["name"] == "aten::relu")
    node["outputs"]["values"][0][3] = 1 << 29
    node["outputs"]["shapes"][0] = [1 << 29]
    node["outputs"]["strides"][0] = [1]
    trace = _write(d, tmp_path / "big_out.et.json")
    monkeypatch.setenv("CHAKRA_REPLAY_MAX_BYTES", str(base.tensors + (64 << 20)))
    assert HostReplay(mlp, host_gaps=False).memory.tensors == base.tensors
    with pytest.raises(ChakraError, match=r"needs 4 GiB of tensors per rank .* of op outputs\), over the limit"):
        HostReplay(trace, host_gaps=False)
    monkeypatch.delenv("CHAKRA_REPLAY_MAX_BYTES")
    # four ranks on this machine hold four times one: one fits, four do not
    monkeypatch.setattr(memory, "available_bytes", lambda: int(base.total * 2.5))
    monkeypatch.setattr(job, "run_ranks", lambda *a, **k: pytest.fail("started ranks"))
    with pytest.raises(ChakraError, match=r"needs .* GiB of memory in all, .* on each of 4 ranks, over the limit"):
        job.replay_host(mlp, world_size=4, budget_s=0.3)


@pytest.mark.torch
def test_an_op_asking_for_more_than_its_recorded_output_cannot_allocate_it(tmp_path, monkeypatch):
    """A trace records outputs, but an op's arguments decide what it makes: its trial runs with the
    address space capped at the rank's memory limit, so it fails to allocate instead."""
    _torch()
    from chakra_trace.replay.operators import HostReplay

    d = _mlp()
    node = next(n for n in d["nodes"] if n["name"] == "aten::relu")
    node["name"] = "aten::new_zeros"
    for a in node["attrs"]:
        if a["name"] == "op_schema":
            a["value"] = "aten::new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None) -> Tensor"
    for k, v in (("values", [128 << 20]), ("shapes", [[]]), ("types", "GenericList[Int]"), ("strides", [[]])):
        node["inputs"][k].append(v)  # 512 MiB of zeros, recorded as a [32, 256] output
    monkeypatch.setenv("CHAKRA_REPLAY_MAX_BYTES", str(64 << 20))
    rep = HostReplay(_write(d, tmp_path / "alloc.et.json"), host_gaps=False)
    [bad] = [o for o in rep.coverage.outcomes if o.status != "replayed"]
    assert bad.name == "aten::new_zeros" and "can't allocate memory" in bad.reason
    rep.run_step()


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_estimate_covers_what_a_replay_really_holds():
    """Peak RSS growth of a replay (after torch is imported) within its estimate's tensors and 96
    MiB: linear_et holds 242 MiB of recorded storages and 8 MiB outputs."""
    _torch()
    code = (
        "import sys, json, torch\n"
        "torch.set_num_threads(1)\n"
        "from chakra_trace.replay.operators import HostReplay\n"
        "from chakra_trace.io.pytorch_host import read_host_trace\n"
        "st = lambda k: next(int(x.split()[1]) * 1024 for x in open('/proc/self/status') if x.startswith(k))\n"
        "h = read_host_trace(sys.argv[1]); base = st('VmRSS:')\n"
        "r = HostReplay(h, host_gaps=False)\n"
        "for _ in range(3): r.run_step()\n"
        "print(json.dumps([st('VmHWM:') - base, r.memory.tensors, r.memory.total]))\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(sample("linear_et.json.gz"))], capture_output=True, text=True)
    grew, tensors, total = json.loads(run.stdout.strip().splitlines()[-1])
    assert tensors > 200 << 20 and grew <= tensors + (96 << 20) and grew <= total


# ------------------------------------------------------------------ the time budget
def test_measure_counts_the_budget_from_its_origin_and_stops_at_the_deadline():
    clock = [100.0]

    def timer():
        return clock[0]

    durations = iter([1.0, 1.5] * 50)

    def step(whole=True):
        clock[0] += next(durations)
        return whole

    # the budget counts from the origin (a replay's preparation and warm-up): 5 s spent already
    m = measure(step, warmup=0, min_repeats=2, max_repeats=50, target_rel_ci=0.0, budget_s=6.0, timer=timer,
                origin=95.0)  # fmt: skip
    assert m.n == 2 and m.stop_reason == "budget"
    # the deadline stops it below min_repeats, and says so
    clock[0] = 100.0
    m = measure(step, warmup=0, min_repeats=10, max_repeats=50, budget_s=10.0, timer=timer, deadline=103.0)
    assert m.n == 3 and m.stop_reason == "budget" and "ran out after 3 of min_repeats=10" in m.note
    # a pass cut short by the deadline is not a sample, and ends the measurement
    clock[0] = 100.0
    calls = iter([True, True, False, True])
    m = measure(lambda: step(whole=next(calls)), warmup=0, min_repeats=10, max_repeats=50, budget_s=100.0,
                timer=timer, deadline=150.0)  # fmt: skip
    assert m.n == 2 and m.stop_reason == "budget"


@pytest.mark.torch
def test_a_pass_past_the_deadline_runs_only_its_collectives():
    torch = _torch()
    from chakra_trace.replay import _standalone as rt

    ran = []

    class Work:
        def wait(self, *a):
            return True

    def op(k):
        return lambda: ran.append(k)

    def coll(k):
        return lambda: ran.append(k) or Work()

    calls = [(op(0), (), {}, [], []), (coll(1), (), {}, [], ["s", "#1"]), (op(2), (), {}, [], [])]
    assert rt.run(calls, deadline=time.perf_counter() + 60) is True and ran == [0, 1, 2]
    ran.clear()
    assert rt.run(calls, deadline=time.perf_counter() - 1) is False and ran == [1]
    ran.clear()
    n = rt.warm_up(lambda: ran.append(0), 5.0, deadline=time.perf_counter() - 1)  # (the first pass only)
    assert ran == [0] and n > 0
    del torch


@pytest.mark.torch
@pytest.mark.timing
@pytest.mark.timeout(120)
def test_a_replay_whose_pass_is_longer_than_its_budget_ends_at_it(tmp_path):
    """Four 2.5 s ops (a delay config) make a 10 s pass; with a 1 s budget (and 5 s of grace) the
    rank stops after the op running at the deadline and says why: the review saw 819 s with 10 s."""
    _torch()
    from chakra_trace.replay import job

    trace = tmp_path / "rank0.et.json.gz"
    trace.write_bytes((DATA / "mlp_rank0.et.json.gz").read_bytes())
    opts = {"device": "cpu", "steps": None, "select": None, "config": {"delay_us": {"aten::relu": 2.5e6}},
            "threads": 1, "warmup": 3, "budget_s": 1.0, "target_rel_ci": 0.02, "max_repeats": 200,
            "min_repeats": 5, "plan": False, "warmup_s": 1.0, "host_gaps": False}  # fmt: skip
    t0 = time.perf_counter()
    with pytest.raises(ChakraError, match=r"no timed pass of the replay finished within the time budget of 1 s"):
        job.rank_main(0, 1, [str(trace)], opts)
    assert time.perf_counter() - t0 < 1.0 + 5.0 + 2.5 + 1.0


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_chakra_node_longer_than_the_budget_is_reported_not_waited_for(tmp_path, capsys):
    """A Chakra trace whose one node says it lasts 1000 s: the schema-less replay would busy-wait
    that long, three warm-up passes and more; it is left out, said so, and the rest replays."""
    _torch()
    from chakra_trace.io.et import write_trace
    from chakra_trace.schema.builder import TraceBuilder

    b = TraceBuilder()
    c = b.comp("short", 200, start=10)
    b.comp("endless", 10**9, deps=[c], start=210)
    write_trace(b.build(), tmp_path / "one.et")
    t0 = time.perf_counter()
    assert main(["replay", str(tmp_path / "one.et"), "--budget-s", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert time.perf_counter() - t0 < 60
    assert res["coverage"]["0"]["reasons"] == {"not replayed: it lasts 1e+03 s alone, more than the time budget": 1}


# ------------------------------------------------------------------ result files, configs, profiles: data
def _bench_result() -> dict:
    m = Measurement("step", [1e-3, 1.1e-3, 0.9e-3, 1e-3, 1.05e-3, 0.95e-3], warmup=1, stop_reason="converged")
    rank = m.to_dict() | {"name": "rank 0"}
    return {"source": "job", "world_size": 1, "mode": "ops", "device": "cpu", "backend": "gloo",
            "step": m.to_dict(), "per_rank": {"0": rank}, "coverage": {"0": {"not_replayed": 0}},
            "warnings": [], "host_gaps": {}}  # fmt: skip


def test_a_measurement_gzip_bomb_is_refused_and_memory_stays_low(tmp_path):
    """160 MB of spaces in a measurement's note, 160 KB gzipped (the review: 2.5 MB -> 2.6 GiB)."""
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b'{"name": "x", "samples": [0.001], "note": "')
        chunk = b" " * (1 << 20)
        for _ in range(160):
            f.write(chunk)
        f.write(b'"}')
    assert bomb.stat().st_size < 1 << 20
    code = (
        "import sys\n"
        "from chakra_trace.cli import main\n"
        "try:\n    rc = main(sys.argv[1:])\n"
        "finally:\n    print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
        "sys.exit(rc)\n"
    )
    run = subprocess.run([sys.executable, "-c", code, "bench", "show", str(bomb)], capture_output=True, text=True)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {bomb}")
    assert "gzip bomb" in lines[0] or "more than the" in lines[0]
    assert int(run.stdout.split()[-1]) * 1024 < 150 << 20  # (peak RSS, KiB)


@pytest.mark.parametrize(
    "edit, key, show",
    [
        (lambda d: d.update(per_rank=True), "'per_rank' must be an object", True),
        (lambda d: d.update(coverage=True), "'coverage' must be an object of objects by rank", False),
        (lambda d: d.update(source=["x"]), "'source' must be a string", False),
        (lambda d: d["step"].update(warmup=float("inf")), "'warmup' of measurement 'step'", True),
        (lambda d: d["step"].update(samples=[float("nan")] * 6), "must be finite numbers", True),
        (lambda d: d["step"].update(extra=[1, 2]), "'extra' of measurement 'step' must be an object", True),
        (lambda d: d.update(step={"samples": [[[[1]]]] * 6}), "must be finite numbers", True),
    ],
)
def test_a_hostile_result_file_is_a_one_line_error_naming_it(tmp_path, capsys, edit, key, show):
    d = _bench_result()
    edit(d)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    commands = [["bench", "report", str(path), "-o", str(tmp_path / "r.md")]]
    if show:  # (`bench show` reads the measurements only)
        commands.append(["bench", "show", str(path)])
    for argv in commands:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {path}") and key in err[0], err


def test_deep_json_configs_results_and_profiles_are_one_line_errors(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ChakraError, match=r"deep\.json: not accepted as JSON: arrays or objects nested too deeply"):
        load_measurements(deep)
    from chakra_trace.calibrate.profile import SystemProfile
    from chakra_trace.replay.operators import ReplayConfig

    for load in (ReplayConfig.load, SystemProfile.load):
        with pytest.raises(ChakraError, match=r"deep\.json: not accepted as JSON"):
            load(deep)
    prof = tmp_path / "p.json"
    prof.write_text(
        json.dumps({"schema": "chakra-profile/1", "networks": {}, "compute": {"op_ns": 1, "threads": 1e999}})
    )
    with pytest.raises(ChakraError, match=r"p\.json: .*lacks or mistypes .*infinity"):
        SystemProfile.load(prof)


@pytest.mark.timeout(30)
def test_a_replay_config_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    from chakra_trace.replay.operators import ReplayConfig

    fifo = tmp_path / "cfg.json"
    os.mkfifo(fifo)
    with pytest.raises(ChakraError, match=r"cfg\.json: a named pipe, not a replay config"):
        ReplayConfig.load(fifo)


PAYLOADS = [
    "</script><script>document.title='x'</script>",
    '<img src=x onerror="alert(1)">',
    "[click](javascript:alert(1)) ![i](http://example.invalid/t.png)",
    "a | b\n| injected | row |",
]


def test_the_markdown_report_shows_result_values_as_text(tmp_path):
    d = _bench_result()
    d["source"] = PAYLOADS[0] + PAYLOADS[3]
    d["warnings"] = PAYLOADS[1:]
    d["coverage"] = {"0": {"not_replayed": 1}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    md = bench_report([path], title="<b>t</b>").to_markdown()
    for raw in ("<script", "</script", "<img", "<b>"):
        assert raw not in md
    assert re.search(r"(?<!\\)\][(\[:]|(?<!\\)!\[", md) is None  # (no link, image or link definition)
    assert "&lt;img src=x onerror=" in md and "[click\\](javascript" in md
    header = next(x for x in md.splitlines() if x.startswith("| benchmark | role | metric"))
    rows = [x for x in md.splitlines() if x.startswith("| ") and "| result |" in x and "| time (" in x]
    cells = lambda line: len([c for c in line.replace("\\|", "").split("|")])  # noqa: E731
    assert rows and all(cells(r) == cells(header) for r in rows)  # (no cell break, no injected row)


def test_the_html_report_escapes_result_values(tmp_path):
    d = _bench_result()
    d["source"] = PAYLOADS[0]
    d["warnings"] = PAYLOADS[1:]
    d["coverage"] = {"0": {"not_replayed": 1}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    html = bench_report([path]).to_html()
    # the page is a document of the one renderer: the values are data in its JSON, never markup
    # (the renderer's own two scripts are the only ones; the page draws text with textContent)
    assert html.lower().count("<script") == 2 and html.lower().count("</script") == 2
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert "<img" not in html.replace(m.group(1), "")
    data = json.dumps(json.loads(m.group(1)))
    assert json.dumps(PAYLOADS[1])[1:-1] in data  # (a warning of the result, shown as text)
