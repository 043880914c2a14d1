"""Collecting ET + Kineto traces: the Python API, `chakra collect` injection, 2-rank gloo DDP on 127.0.0.1.

Every process uses one intra-op thread; models are tiny. Subprocess tests run real jobs.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (pip install -e '.[collect]'); the collect tests need it"
)
pytestmark = pytest.mark.torch

from chakra_trace.cli import main  # noqa: E402
from chakra_trace.collect import _inject  # noqa: E402
from chakra_trace.collect import recorder as R  # noqa: E402
from chakra_trace.errors import ChakraError  # noqa: E402

WORKLOADS = Path(__file__).parent / "workloads"
RANK_KEYS = {
    "schema",
    "run_id",
    "rank",
    "local_rank",
    "world_size",
    "backend",
    "status",
    "hostname",
    "pid",
    "torch_version",
    "python_version",
    "platform",
    "device_type",
    "cuda_device",
    "activities",
    "num_threads",
    "mode",
    "schedule",
    "steps_run",
    "steps_recorded",
    "steps",
    "files",
    "bytes",
    "gzip",
    "command",
    "started_at",
    "finished_at",
    "warnings",
}
MERGED_KEYS = {
    "schema",
    "run_id",
    "complete",
    "world_size",
    "ranks",
    "missing_ranks",
    "backend",
    "device_type",
    "torch_version",
    "python_version",
    "hostnames",
    "schedule",
    "steps_recorded",
    "command",
    "files",
    "warnings",
    "per_rank",
    "updated_at",
}


# -- helpers ----------------------------------------------------------------------------------------
def _load(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _profiler_steps(kineto: dict) -> list[str]:
    return sorted(
        e["name"]
        for e in kineto["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )


def _check_rank(out: Path, rank: int, *, steps=(2, 3), gz: bool = True) -> dict:
    """Both traces of a rank exist and parse; the Kineto trace holds exactly `steps`; returns the ET."""
    suffix = ".json.gz" if gz else ".json"
    et = _load(out / f"rank{rank}.et{suffix}")
    assert et["schema"] and len(et["nodes"]) > 10
    assert {f"ProfilerStep#{k}" for k in steps} <= {n["name"] for n in et["nodes"]}
    kineto = _load(out / f"rank{rank}.kineto{suffix}")
    assert _profiler_steps(kineto) == [f"ProfilerStep#{k}" for k in steps]
    return et


def _check_manifest(out: Path, *, world_size: int, backend, mode: str, gz: bool = True) -> dict:
    m = json.loads((out / "manifest.json").read_text())
    assert MERGED_KEYS <= set(m)
    assert m["schema"] == R.SCHEMA and m["complete"] is True, m["warnings"]
    assert m["world_size"] == world_size and m["ranks"] == list(range(world_size)) and m["missing_ranks"] == []
    assert m["backend"] == backend and m["device_type"] == "cpu"
    assert m["torch_version"] == torch.__version__ and m["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert m["schedule"] == {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}
    assert m["steps_recorded"] == [2, 3] and m["warnings"] == []
    assert m["hostnames"] == [socket.gethostname()] and m["command"]
    suffix = ".json.gz" if gz else ".json"
    for r in range(world_size):
        d = m["per_rank"][str(r)]
        assert set(d) == RANK_KEYS
        assert d == json.loads((out / f"manifest.rank{r}.json").read_text())
        assert d["rank"] == r and d["status"] == "complete" and d["mode"] == mode and d["num_threads"] == 1
        assert d["files"] == m["files"][str(r)] == {"et": f"rank{r}.et{suffix}", "kineto": f"rank{r}.kineto{suffix}"}
        assert all(d["bytes"][k] == (out / d["files"][k]).stat().st_size for k in ("et", "kineto"))
        assert [s["step"] for s in d["steps"]] == [2, 3]
        for s in d["steps"]:
            assert s["finished"] and s["wall_ms"] > 0 and s["profiler_ms"] > 0
            # host time of the same step, roughly: a unit or step mix-up is off by 1000x or a whole
            # step; a loaded machine preempting the profiler's span by tens of ms is neither
            assert s["profiler_ms"] <= s["wall_ms"] * 1.5 + 50
    assert not [p.name for p in out.iterdir() if p.name.startswith(".chakra-")]  # no temporary files left
    return m


def _mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return opt, step


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def cli(monkeypatch):
    """`chakra collect` through the real entry point."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    return lambda *args: main(["collect", *map(str, args)])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- Python API --------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("gz", [True, False])
def test_api_single_process(tmp_path, one_thread, gz):
    out = tmp_path / "out"
    _, step = _mlp()
    with R.record(out, wait=1, warmup=1, active=2, gzip=gz, num_threads=1) as rec:
        for i in range(6):
            step()
            rec.step()
            assert rec.done == (i >= 3)  # finished at the end of the active window
    assert torch.get_num_threads() == 1
    assert rec.manifest["status"] == "complete" and rec.steps_done == 6
    _check_rank(out, 0, gz=gz)
    m = _check_manifest(out, world_size=1, backend=None, mode="api", gz=gz)
    assert m["per_rank"]["0"]["local_rank"] is None and m["per_rank"]["0"]["activities"] == ["cpu"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".manifest.lock", "manifest.json", "manifest.rank0.json", *m["files"]["0"].values()]
    )


@pytest.mark.timeout(60)
def test_api_stops_early_keeps_what_was_recorded(tmp_path, one_thread):
    out = tmp_path / "out"
    _, step = _mlp()
    with pytest.raises(RuntimeError, match="boom"):
        with R.record(out, wait=1, warmup=1, active=3, num_threads=1) as rec:
            for i in range(6):
                if i == 3:
                    raise RuntimeError("boom")
                step()
                rec.step()
    d = rec.manifest
    assert d["status"] == "partial" and d["steps_recorded"] == [2]
    assert "RuntimeError raised after 3 steps, during the active window" in d["warnings"][0]
    assert [(s["step"], s["finished"]) for s in d["steps"]] == [(2, True), (3, False)]
    _check_rank(out, 0, steps=(2, 3))  # step 3 is in the traces up to the stop
    m = R.read_manifest(out)
    assert m["complete"] is False and "rank 0: status partial" in m["warnings"]


@pytest.mark.timeout(60)
def test_api_stop_before_window_writes_no_traces(tmp_path, one_thread):
    out = tmp_path / "out"
    _, step = _mlp()
    with R.record(out, wait=2, warmup=1, active=1, num_threads=1) as rec:
        step()
        rec.step()
    assert rec.manifest["status"] == "not-recorded" and rec.manifest["files"] == {"et": None, "kineto": None}
    assert not list(out.glob("rank0.*"))


def test_api_bad_use():
    with pytest.raises(ChakraError, match="active must be an integer >= 1"):
        R.record("x", active=0)
    with pytest.raises(ChakraError, match="num_threads"):
        R.record("x", num_threads=0)


@pytest.mark.timeout(60)
def test_one_recorder_per_process(tmp_path, one_thread):
    with R.record(tmp_path / "a", num_threads=1):
        with pytest.raises(ChakraError, match="already running"):
            R.record(tmp_path / "b").start()
    assert R.active_recorder() is None


# -- injection driver, in process ----------------------------------------------------------------------
@pytest.fixture
def injected(monkeypatch, tmp_path):
    """The optimizer hook that `chakra collect` installs, configured for tmp_path/out."""
    out = tmp_path / "out"
    for k, v in {
        _inject.ENV_DIR: str(out),
        _inject.ENV_SCHEDULE: "1,1,2",
        _inject.ENV_GZIP: "1",
        _inject.ENV_NUM_THREADS: "1",
        _inject.ENV_RUN_ID: "test-run",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(_inject, "_S", _inject._State())
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(_inject.post_hook)
    yield out
    handle.remove()
    rec = R.active_recorder()
    if rec is not None:
        rec.abort()


@pytest.mark.timeout(60)
def test_inject_hook_records_optimizer_steps(injected, one_thread):
    opt, step = _mlp()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3)  # wraps opt.step before we do
    lr_wrapper = opt.__dict__["step"]
    for _ in range(6):
        step()
        sched.step()
    assert opt.__dict__["step"] is lr_wrapper  # our wrapper is gone once recording has ended
    et = _check_rank(injected, 0)
    # the optimizer's range lies inside its step: boundaries run after Optimizer.step has closed
    by_id = {n["id"]: n for n in et["nodes"]}
    parents = [by_id[n["ctrl_deps"]]["name"] for n in et["nodes"] if n["name"].startswith("Optimizer.step#")]
    assert parents == ["ProfilerStep#2", "ProfilerStep#3"]
    m = _check_manifest(injected, world_size=1, backend=None, mode="inject")
    assert m["run_id"] == "test-run"


@pytest.mark.timeout(60)
def test_inject_stands_down_when_the_script_records(injected, tmp_path, one_thread):
    _, step = _mlp()
    with R.record(tmp_path / "api", num_threads=1) as rec:
        for _ in range(5):
            step()
            rec.step()
    assert _inject._S.off and not injected.exists()
    _check_rank(tmp_path / "api", 0)


@pytest.mark.timeout(60)
def test_recorder_copy_loaded_by_path_sees_the_same_slot(tmp_path, one_thread, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_chakra_collect_recorder_test", R.__file__)
    copy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, copy)
    spec.loader.exec_module(copy)  # as the bootstrap loads it into a job
    assert copy.ChakraError is not ChakraError  # no package: the stand-alone fallback
    with R.record(tmp_path / "a", num_threads=1) as rec:
        assert copy.active_recorder() is rec
    assert copy.active_recorder() is None


# -- chakra collect (subprocesses) ---------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_cli_single_process_json(tmp_path, cli, capfd):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank7.kineto.json").write_text("{}")  # an earlier collection: replaced
    (out / "notes.txt").write_text("mine")  # not ours: kept
    rc = cli("--out", out, "--num-threads", 1, "--json", "--", sys.executable, WORKLOADS / "mlp.py", "--steps", 6)
    cap = capfd.readouterr()
    assert rc == 0, cap.err
    assert "mlp: 6 steps done" in cap.err and "mlp:" not in cap.out  # --json: the job's stdout goes to stderr
    printed = json.loads(cap.out)
    _check_rank(out, 0)
    m = _check_manifest(out, world_size=1, backend=None, mode="inject")
    assert printed == m and m["exit_status"] == 0
    assert m["command"] == [sys.executable, str(WORKLOADS / "mlp.py"), "--steps", "6"]
    assert m["per_rank"]["0"]["command"][1:] == [str(WORKLOADS / "mlp.py"), "--steps", "6"]
    assert not (out / "rank7.kineto.json").exists() and (out / "notes.txt").exists()
    assert m["collector"]["removed_earlier_files"] == ["rank7.kineto.json"]


@pytest.mark.timeout(180)
def test_cli_job_stops_early(tmp_path, cli, capfd):
    out = tmp_path / "out"
    rc = cli(
        "--out",
        out,
        "--num-threads",
        1,
        "--no-gzip",
        "--",
        sys.executable,
        WORKLOADS / "mlp.py",
        "--steps",
        6,
        "--fail-at",
        3,
    )
    cap = capfd.readouterr()
    assert rc == 1  # the job's exit status (SystemExit with a message)
    assert "the process exited after 3 steps, during the active window" in cap.out
    _check_rank(out, 0, steps=(2, 3), gz=False)
    m = R.read_manifest(out)
    assert m["per_rank"]["0"]["status"] == "partial" and m["per_rank"]["0"]["steps_recorded"] == [2]
    assert m["exit_status"] == 1 and "the job exited with status 1" in m["warnings"]


@pytest.mark.timeout(60)
def test_cli_exit_status_without_torch(tmp_path, cli, capfd):
    out = tmp_path / "out"
    code = "import sys; assert 'torch' not in sys.modules; sys.exit(3)"
    assert cli("--out", out, "--json", "--", sys.executable, "-c", code) == 3
    m = json.loads(capfd.readouterr().out)
    assert m["ranks"] == [] and m["exit_status"] == 3 and m["complete"] is False
    assert any("no process of the job recorded anything" in w for w in m["warnings"])
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert cli("--out", out, "--", sys.executable, "-c", code) == 128 + 15  # as shells report it


@pytest.mark.timeout(60)
def test_cli_chains_existing_sitecustomize(tmp_path, cli, capfd, monkeypatch):
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    monkeypatch.setenv("PYTHONPATH", str(user))
    code = (
        "import os, sys; print(os.environ.get('USER_SITECUSTOMIZE'), "
        "any(type(f).__name__ == '_OptimizerImportFinder' for f in sys.meta_path))"
    )
    assert cli("--out", tmp_path / "out", "--", sys.executable, "-c", code) == 0
    assert "ran True" in capfd.readouterr().out


def test_cli_bad_use(tmp_path, cli, capfd):
    assert cli("--out", tmp_path / "o", "--", "no-such-command-xyz") == 2
    assert capfd.readouterr().err.strip() == "error: no-such-command-xyz: command not found"
    assert cli("--wait", 0, "--", "true") == 2
    assert "--wait" in capfd.readouterr().err
    assert cli("--out", tmp_path / "o") == 2  # no command


# -- two ranks, gloo, 127.0.0.1 -------------------------------------------------------------------------
def _check_ddp(out: Path, mode: str) -> dict:
    for r in (0, 1):
        et = _check_rank(out, r)
        assert any(n["name"] == "c10d::allreduce_" for n in et["nodes"])
    m = _check_manifest(out, world_size=2, backend="gloo", mode=mode)
    assert [m["per_rank"][r]["world_size"] for r in "01"] == [2, 2]
    return m


@pytest.mark.timeout(180)
def test_cli_ddp_torchrun_two_ranks(tmp_path, cli, capfd):
    out = tmp_path / "out"
    rc = cli(
        "--out",
        out,
        "--num-threads",
        1,
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        2,
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        _free_port(),
        WORKLOADS / "ddp.py",
        "--steps",
        5,
    )
    cap = capfd.readouterr()
    assert rc == 0, cap.err[-3000:]
    m = _check_ddp(out, "inject")
    assert [m["per_rank"][r]["local_rank"] for r in "01"] == [0, 1]
    assert "2 of 2 ranks, backend gloo" in cap.out
    # end to end: the collected job converts to Chakra and validates across ranks
    from chakra_trace import Workload
    from chakra_trace.analyze.critical_path import critical_path
    from chakra_trace.convert.pytorch import convert_collection
    from chakra_trace.validate import validate_workload

    reports = convert_collection(out, tmp_path / "chakra" / "ddp", jobs=2)
    assert sorted(reports) == [0, 1]
    w = Workload.open(tmp_path / "chakra" / "ddp")
    assert validate_workload(w).issues == []
    for r in (0, 1):
        colls = [t for t, _ in reports[r].collectives]
        assert colls.count("ALL_REDUCE") >= 4  # 2 recorded steps: DDP bucket(s) + the logging all-reduce
        assert reports[r].collectives == reports[0].collectives
        span = reports[r].span_us
        # a rank's own chain is its work: time blocked in a collective waiting for the peer is a
        # dependency across ranks (the job's path below), not host work, so it may fall short
        assert critical_path(w[r]).length_us <= 1.02 * span
        assert critical_path(w[r]).length_us + reports[r].waits.collective_us >= 0.98 * span
    # the simulator replays the recording (`recorded`) within 1%, and free communication is never slower
    import warnings

    from chakra_trace.analyze.critical_path import job_critical_path
    from chakra_trace.simulate.presets import simulate_on

    path = job_critical_path(w)
    step = path.step_ns
    assert path.accounted_ns == step  # the job's path, start skew and lead gap account for the recording
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replayed, ideal = simulate_on(w, "recorded").step_ns, simulate_on(w, "ideal").step_ns
    assert abs(replayed / step - 1) <= 0.01 and ideal <= step + 1000, (step, replayed, ideal)


@pytest.mark.timeout(180)
def test_api_ddp_mp_spawn_two_ranks(tmp_path):
    import subprocess

    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    p = subprocess.run(
        [sys.executable, str(WORKLOADS / "ddp_api.py"), str(out), "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    m = _check_ddp(out, "api")
    assert m["run_id"] is None and m["command"][1:] == [str(WORKLOADS / "ddp_api.py"), str(out), "5"]


# -- manifests ------------------------------------------------------------------------------------------
def test_merge_keeps_one_run(tmp_path):
    def rank_doc(rank, run_id, world_size=2):
        return {
            "schema": R.RANK_SCHEMA,
            "run_id": run_id,
            "rank": rank,
            "world_size": world_size,
            "status": "complete",
            "backend": "gloo",
            "files": {"et": f"rank{rank}.et.json.gz"},
        }

    (tmp_path / "manifest.rank0.json").write_text(json.dumps(rank_doc(0, "new")))
    (tmp_path / "manifest.rank1.json").write_text(json.dumps(rank_doc(1, "new")))
    (tmp_path / "manifest.rank2.json").write_text(json.dumps(rank_doc(2, "old", 4)))
    (tmp_path / "manifest.rank3.json").write_text("{not json")
    m = R.merge_manifests(tmp_path, run_id="new", final=True)
    assert m["ranks"] == [0, 1] and m["world_size"] == 2 and m["complete"] is True
    assert m == R.read_manifest(tmp_path)
    assert m["warnings"] == ["manifest.rank3.json: not a readable rank manifest; skipped"]
    m = R.merge_manifests(tmp_path, final=True)  # every rank file: two runs mixed, and it says so
    assert m["ranks"] == [0, 1, 2] and m["missing_ranks"] == [3] and m["complete"] is False
    assert any("differ in world_size" in w for w in m["warnings"])
    assert any("no manifest from rank(s) 3" in w for w in m["warnings"])
