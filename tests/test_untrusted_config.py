"""Replay configs and host traces are data from someone else: nothing in them may name a
module, a library or an attribute walk that the replayer then imports, loads or calls.

Each case plants `plantedmod.py` in the working directory (the rank processes run
`python -c`, so the working directory is on their `sys.path`): importing it writes a marker
file. The replay must refuse the config with one line (exit 2), or leave the op unreplayed,
and the marker must not exist."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from chakra_trace.cli import main  # noqa: E402
from chakra_trace.errors import ChakraError  # noqa: E402
from chakra_trace.replay.operators import HostReplay, ReplayConfig  # noqa: E402
from conftest import DATA  # noqa: E402

MODULE = "plantedmod"


def _plant(tmp_path, monkeypatch):
    """A module in the working directory that leaves a marker when imported."""
    marker = tmp_path / "IMPORTED"
    (tmp_path / f"{MODULE}.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as in the ranks (`python -c`) and `python -m chakra_trace`
    return marker


def _hostile_trace(tmp_path, schema: str) -> str:
    """mlp_rank0 whose first aten::relu takes the module's name as a string argument under `schema`."""
    d = json.loads(gzip.open(DATA / "mlp_rank0.et.json.gz").read())
    node = next(n for n in d["nodes"] if n["name"] == "aten::relu")
    node["inputs"] = {"values": [MODULE], "shapes": [[]], "types": ["String"], "strides": [[]]}
    for a in node["attrs"]:
        if a["name"] == "op_schema":
            a["value"] = schema
    path = tmp_path / "hostile.et.json"
    path.write_text(json.dumps(d))
    return str(path)


# what `getattr(getattr(getattr(torch.ops, ns), op), overload)` turned into importlib / ctypes calls
WALKS = [
    "import_module::__self__.import_module",
    "load_library::__self__.load_library",
    "torch.ops.import_module",
    "import_module",
    "load_library",
    "__import__",
    "builtins::__import__",
    "__class__::__init__.__globals__",
    "aten::relu.__call__",
    "aten::__class__",
    "aten::relu.default.__self__",
    "aten::relu(Tensor self) -> Tensor",
    "aten::no_such_op_anywhere",
    "aten::relu.no_such_overload",
    "",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", WALKS)
def test_substitute_target_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys, target):
    marker = _plant(tmp_path, monkeypatch)
    trace = _hostile_trace(tmp_path, "aten::warn(str message, int stacklevel=2) -> ()")
    cfg = tmp_path / "replay.json"
    cfg.write_text(json.dumps({"substitute": {"aten::relu": target}}))
    rc = main(["replay", trace, "--budget-s", "0.2", "--config", str(cfg)])
    err = capsys.readouterr().err.strip().splitlines()
    assert not marker.exists(), f"{target!r} imported {MODULE}"
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    assert str(cfg) in err[0] and "substitute" in err[0] and "aten::relu" in err[0] and repr(target) in err[0]
    assert "namespace::op" in err[0]  # what is accepted


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "schema",
    [
        "import_module::__self__.import_module(str module) -> ()",
        "load_library::__self__.load_library(str path) -> ()",
        "__class__::__self__.import_module(str module) -> ()",
    ],
)
def test_trace_op_schema_is_not_an_attribute_walk(tmp_path, monkeypatch, schema):
    """The trace's own `op_schema` names the op to call: the same walk, without any config."""
    marker = _plant(tmp_path, monkeypatch)
    r = HostReplay(_hostile_trace(tmp_path, schema))
    assert not marker.exists()
    bad = [o for o in r.coverage.outcomes if o.name == "aten::relu" and o.status != "replayed"]
    assert bad and "not a registered operator" in bad[0].reason
    r.run_step()
    assert not marker.exists()


def test_an_exported_plan_resolves_only_registered_operators(tmp_path, monkeypatch):
    """The exported benchmark script carries `_standalone.resolve` verbatim: a plan edited by someone
    else goes through the same check."""
    from chakra_trace.replay import _standalone as rt

    marker = _plant(tmp_path, monkeypatch)
    assert rt.resolve("aten::relu") is torch.ops.aten.relu.default
    assert rt.resolve("aten::add.Tensor") is torch.ops.aten.add.Tensor
    for name in WALKS:
        with pytest.raises(ValueError, match="not a registered operator|namespace::op"):
            fn = rt.resolve(name)
            fn(MODULE)  # (what the old resolver's result was called with)
    assert not marker.exists()


def test_good_substitutes_still_load_and_bad_shapes_are_named(tmp_path):
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps({"substitute": {"aten::mm": "aten::matmul.default", "aten::relu": "aten::relu"}}))
    assert ReplayConfig.load(p).substitute["aten::mm"] == "aten::matmul.default"
    for bad, what in [
        ({"substitute": ["aten::mm"]}, "substitute"),
        ({"substitute": {"aten::mm": 3}}, "substitute"),
        ({"skip": "aten::.*"}, "skip"),
        ({"skip": ["("]}, "skip"),
        ({"delay_us": {"aten::mm": "x"}}, "delay_us"),
        ({"delay_us": {"aten::mm": -1}}, "delay_us"),
        ({"delay_us": {"aten::mm": 1e300}}, "delay_us"),
        ([], "object"),
    ]:
        p.write_text(json.dumps(bad))
        with pytest.raises(ChakraError, match=what) as e:
            ReplayConfig.load(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ sizes a trace asks for
def _with_relu_input(tmp_path, value, shape, stride=None) -> str:
    d = json.loads(gzip.open(DATA / "mlp_rank0.et.json.gz").read())
    node = next(n for n in d["nodes"] if n["name"] == "aten::relu")
    node["inputs"] = {"values": [value], "shapes": [shape], "types": ["Tensor(float)"], "strides": [stride or []]}
    path = tmp_path / "big.et.json"
    path.write_text(json.dumps(d))
    return str(path)


@pytest.mark.timeout(300)
def test_a_huge_recorded_tensor_is_refused_before_allocation(tmp_path, capsys):
    """A recorded [10**12] float tensor (4 TB): one line naming the trace and the limit, exit 2, nothing
    allocated (the rank would otherwise be killed for memory or take the machine with it)."""
    trace = _with_relu_input(tmp_path, [21, 22, 0, 10**12, 4, "cpu"], [10**12])
    with pytest.raises(
        ChakraError, match=r"big\.et\.json: replaying it needs 3\.73e\+03 GiB .*CHAKRA_REPLAY_MAX_BYTES"
    ):
        HostReplay(trace)
    assert main(["replay", trace, "--budget-s", "0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "over the limit" in err[0] and "Traceback" not in err[0]


def test_the_storage_limit_is_overridable(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAKRA_REPLAY_MAX_BYTES", "1000")
    with pytest.raises(ChakraError, match="over the limit of 9.31e-07 GiB"):
        HostReplay(DATA / "mlp_rank0.et.json.gz")
    monkeypatch.setenv("CHAKRA_REPLAY_MAX_BYTES", "lots")
    with pytest.raises(ChakraError, match="CHAKRA_REPLAY_MAX_BYTES='lots': expected a positive number"):
        HostReplay(DATA / "mlp_rank0.et.json.gz")
    monkeypatch.setenv("CHAKRA_REPLAY_MAX_BYTES", "1e9")
    assert HostReplay(DATA / "mlp_rank0.et.json.gz").coverage.share == 1.0


@pytest.mark.parametrize(
    "value, shape, stride",
    [
        ([21, 22, -8, 8192, 4, "cpu"], [32, 256], None),  # negative offset
        ([21, 22, 0, 8192, 4, "cpu"], [-32, 256], None),  # negative size
        ([21, 22, 0, 8192, 4, "cpu"], [32, 256], [-256, 1]),  # negative stride
        ([21, 22, 0, "8192", 4, "cpu"], [32, 256], None),  # a string numel
        ([21, 22, 0, 8192, 8, "cpu"], [32, 256], None),  # itemsize not the dtype's
    ],
)
def test_nonsense_tensor_records_are_not_replayed_rather_than_allocated(tmp_path, value, shape, stride):
    r = HostReplay(_with_relu_input(tmp_path, value, shape, stride))
    relu = [o for o in r.coverage.outcomes if o.name == "aten::relu"]
    assert relu[0].status == "failed" and all(o.status == "replayed" for o in relu[1:])
    r.run_step()


def test_a_recorded_world_size_over_the_limit_starts_no_process(tmp_path, monkeypatch, capsys):
    d = json.loads(gzip.open(DATA / "ddp_rank0.et.json.gz").read())
    init = next(n for n in d["nodes"] if n["name"] == "## process_group:init ##")
    init["inputs"]["values"] = [json.dumps([{"pg_name": "0", "group_size": 10**6, "ranks": []}])]
    path = tmp_path / "wide.et.json"
    path.write_text(json.dumps(d))
    monkeypatch.setattr("chakra_trace.replay.job.run_ranks", lambda *a, **k: pytest.fail("started ranks"))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "1000000 ranks, over the limit of 64 processes (CHAKRA_REPLAY_MAX_RANKS)" in err[0]
    init["inputs"]["values"] = [json.dumps([{"pg_name": "0", "group_size": "2; rm -rf /", "ranks": []}])]
    path.write_text(json.dumps(d))
    assert main(["replay", str(path)]) == 2
    assert "group_size '2; rm -rf /'" in capsys.readouterr().err


def test_a_collection_folder_link_out_of_it_is_refused(tmp_path, capsys):
    folder = tmp_path / "collected"
    folder.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("not a trace")
    (folder / "rank0.et.json").symlink_to(secret)
    assert main(["replay", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"links to {secret}, not a file in {folder}" in err[0]
    (folder / "rank0.et.json").unlink()
    (folder / "rank0.et.json").write_bytes((DATA / "mlp_rank0.et.json.gz").read_bytes())  # (gzip either way)
    (folder / "rank0.kineto.json").symlink_to("/dev/zero")
    assert main(["replay", str(folder)]) == 2
    assert "links to /dev/zero" in capsys.readouterr().err


def test_a_file_name_cannot_put_code_in_the_exported_script(tmp_path, monkeypatch):
    """The exported script names its source in its docstring: a folder name holding three double
    quotes ended the docstring there, and what followed ran as code when the script ran."""
    import subprocess
    import sys

    from chakra_trace.replay.export import export_script

    marker = _plant(tmp_path, monkeypatch)
    evil = f'x"""+__import__("{MODULE}")+"""\\'
    script = tmp_path / f"{evil}.py"
    plan = {"device": "cpu", "seed": 0, "storages": {}, "ops": []}
    export_script([plan], script, name=f"replay of {evil}", source=str(tmp_path / evil), steps_per_run=1)
    run = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert not marker.exists()
    assert run.stdout.count(evil) >= 1  # (the docstring's first line is the --help description)
