"""`chakra sweep`: specs checked with errors naming file and key, points filtered in DuckDB and
identified by their inputs and workload content, rows that obey the simulator's invariants,
resumable runs, a worker killed mid-sweep, pool and Ray giving the same rows, and the views."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.sweep import expand, load_results, load_spec, pareto, query, run_sweep, scaling, sensitivity
from chakra_trace.sweep.evaluate import WALL_COLUMNS
from conftest import astra_reference

ROOT = Path(__file__).resolve().parent.parent
DDP = ROOT / "tests" / "data" / "corpus" / "ddp"
TRAIN = "train:layers=4:comp_us=100:size=1048576"

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")


def small_spec(**over) -> dict:
    spec = {
        "name": "small",
        "workloads": {"ddp": str(DDP), "train": {"pattern": TRAIN}},
        "axes": {
            "workload": ["ddp", "train"],
            "topology": ["Ring", "Switch"],
            "npus": [4, 8],
            "bandwidth": [25, 200],
            "mode": ["default", "compat"],
        },
        "where": "NOT (mode = 'compat' AND topology = 'Switch')",
        "prices": {"npu_hour": 3.6},
    }
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "results"
    result = run_sweep(small_spec(), out, workers=2)
    return result, load_results(out)


# ------------------------------------------------------------------------------- spec


def _write(tmp_path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "body, key",
    [
        ("workloads: {a: %s}\naxes: {system: [ring-8], colour: [red]}\n", "axes.colour"),
        ("workloads: {a: %s}\naxes: {system: [ring-8], mode: [fast]}\n", "axes.mode[0]"),
        ("workloads: {a: %s}\naxes: {system: [ring-8], workload: [b]}\n", "axes.workload[0]"),
        ("workloads: {a: %s}\naxes: {system: ring-8}\n", "axes.system"),
        ("workloads: {a: %s}\naxes: {npus: [8]}\n", "axes"),
        ("workloads: {a: %s}\naxes: {system: [ring-8]}\nwhere: 'nope > 1'\n", "where"),
        ("workloads: {a: %s}\naxes: {system: [ring-8]}\nprices: {npu_hour: -1}\n", "prices.npu_hour.default"),
        ("workloads: {a: {pattern: x, plan: {tp: 2}}}\naxes: {system: [ring-8]}\n", "workloads.a.plan"),
        ("workloads: {a: %s}\nsweeps: 1\naxes: {system: [ring-8]}\n", "sweeps"),
    ],
)
def test_bad_specs_name_the_file_and_key(tmp_path, body, key):
    path = _write(tmp_path, body.replace("%s", str(DDP)) if "%s" in body else body)
    with pytest.raises(ChakraError) as e:
        expand(load_spec(path, allow_paths=[DDP]))  # (the spec names the repository's data, outside its folder)
    assert str(e.value).startswith(f"{path}: {key}"), str(e.value)


def test_a_network_that_cannot_be_built_is_refused_before_running(tmp_path):
    path = _write(
        tmp_path, f"workloads: {{a: {DDP}}}\naxes: {{topology: [Ring], dims: [[4, 2]], bandwidth: [[50, 50, 50]]}}\n"
    )
    with pytest.raises(ChakraError, match=rf"^{path}: axes/fixed .*bandwidth: 3 values for a network of 2 dimensions"):
        expand(load_spec(path, allow_paths=[DDP]))


def test_missing_workload_path_and_bad_yaml(tmp_path):
    with pytest.raises(ChakraError, match="workloads.a.path: no such file"):
        load_spec(_write(tmp_path, "workloads: {a: nowhere/job}\naxes: {system: [ring-8]}\n"))
    with pytest.raises(ChakraError, match="not valid YAML"):
        load_spec(_write(tmp_path, "workloads: [\n"))


# ------------------------------------------------------------------------------- points


def test_where_filters_in_sql_with_lists():
    spec = load_spec(
        {
            "workloads": {"t": {"pattern": TRAIN}},
            "axes": {"topology": ["Ring"], "dims": [[8], [4, 2], [2, 2, 2]], "bandwidth": [50, 100]},
            "where": "len(dims) >= 2 AND bandwidth > 60",
        }
    )
    pts = expand(spec)
    assert [p.params["dims"] for p in pts] == [[4, 2], [2, 2, 2]]
    assert all(p.params["bandwidth"] == 100 for p in pts)
    assert len(expand(load_spec({"workloads": spec.workloads, "axes": spec.axes}))) == 6


def test_point_ids_follow_inputs_and_workload_content(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(DDP, job)
    spec = {"workloads": {"j": str(job)}, "axes": {"system": ["ring-8", "switch"]}}
    first = [p.id for p in expand(load_spec(spec))]
    assert len(set(first)) == 2
    assert [p.id for p in expand(load_spec(spec))] == first  # stable
    (job / ".chakra-cache").mkdir(exist_ok=True)
    (job / ".chakra-cache" / "x.et").write_bytes(b"converted copy")  # not the job's content
    assert [p.id for p in expand(load_spec(spec))] == first
    (job / "manifest.json").write_text((job / "manifest.json").read_text() + " ")
    assert set(p.id for p in expand(load_spec(spec))).isdisjoint(first)


# ------------------------------------------------------------------------------- running


def test_rows_hold_inputs_and_measures(ran):
    result, df = ran
    assert result.points == 24 and result.ran == 24 and result.errors == 0
    assert len(df) == 24 and df["point_id"].is_unique
    assert (df["status"] == "ok").all()
    for c in (
        "step_s",
        "exposed_comm_s",
        "compute_s",
        "dim_utilization",
        "coll_all_reduce_s",
        "npu_s",
        "cost",
        "wall_s",
        "chakra_version",
        "sim_npus",
        "net_bandwidth",
    ):
        assert c in df.columns, c
    assert (df["sim_npus"] == df["npus"]).all()
    assert (abs(df["npu_s"] - df["npus"] * df["step_s"]) < 1e-12).all()
    assert (abs(df["cost"] - df["npu_s"] * 3.6 / 3600) < 1e-15).all()  # USD at 3.6 per NPU-hour
    assert (df["exposed_comm_s"] <= df["step_s"] + 1e-12).all()
    train = df[df["workload"] == "train"]
    assert (train["coll_all_reduce_s"] > 0).all() and all(len(u) == 1 and u[0] > 0 for u in train["dim_utilization"])


def test_more_bandwidth_is_never_slower(ran):
    _, df = ran
    keys = ["workload", "topology", "npus", "mode"]
    slow = df[df["bandwidth"] == 25].set_index(keys)["step_ns"]
    fast = df[df["bandwidth"] == 200].set_index(keys)["step_ns"]
    assert len(slow) == 12 and (fast.loc[slow.index] <= slow).all()
    assert (fast.loc[slow.index] < slow).any()  # and it matters somewhere


@pytest.mark.timeout(120)
def test_rerun_skips_finished_points_and_resumes(tmp_path):
    spec = small_spec(
        axes={"workload": ["train"], "topology": ["Ring"], "npus": [4, 8], "bandwidth": [50, 100]}, where=None
    )
    out = tmp_path / "r"
    first = run_sweep(spec, out, workers=2, limit=3)
    assert (first.ran, first.skipped) == (3, 0)
    second = run_sweep(spec, out, workers=2)
    assert (second.points, second.ran, second.skipped) == (4, 1, 3)
    third = run_sweep(spec, out, workers=2)
    assert third.ran == 0 and third.skipped == 4
    n = query(out, "SELECT count(*) AS n, count(DISTINCT point_id) AS d FROM points")
    assert (int(n["n"][0]), int(n["d"][0])) == (4, 4)
    assert not list(out.glob(".*.tmp"))  # parts written whole, no temporaries left


def test_a_failed_point_is_a_row_not_the_end(tmp_path):
    spec = {
        "workloads": {"ddp": str(DDP)},
        "axes": {"system": ["recorded", "switch"], "mode": ["default", "compat"]},
    }
    r = run_sweep(spec, tmp_path / "e", workers=1)
    df = load_results(tmp_path / "e")
    assert r.errors == 1 and len(df) == 4
    bad = df[df["status"] == "error"]
    assert list(bad["system"]) == ["recorded"] and "compatibility mode" in bad["error"].iloc[0]


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_sweep_loses_only_its_point(tmp_path):
    spec = small_spec(
        workloads={"t": {"pattern": "train:layers=48:comp_us=100:size=1048576"}},
        axes={"topology": ["Ring", "Switch"], "npus": [8, 16], "bandwidth": [50, 100, 200], "mode": ["aware"]},
        where=None,
    )
    out = tmp_path / "k"
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(r=run_sweep(spec, out, workers=2, retries=2)))
    thread.start()
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        kids = multiprocessing.active_children()
        if kids:
            victim = kids[0]
            os.kill(victim.pid, signal.SIGKILL)  # it holds a point from the moment it starts
        time.sleep(0.005)
    thread.join(100)
    assert victim is not None and not thread.is_alive()
    r = box["r"]
    assert r.restarts >= 1 and r.retried >= 1 and r.lost == 0
    df = load_results(out)
    assert len(df) == 12 and df["point_id"].is_unique and set(df["point_id"]) == {p.id for p in expand(load_spec(spec))}
    assert (df["status"] == "ok").all()


@pytest.mark.timeout(180)
def test_pool_and_ray_give_the_same_rows(tmp_path):
    pytest.importorskip("ray")
    spec = small_spec(
        axes={"workload": ["ddp", "train"], "system": ["ring-8", "dgx-8x8"], "mode": ["default", "aware"]}, where=None
    )
    run_sweep(spec, tmp_path / "pool", workers=2)
    r = run_sweep(spec, tmp_path / "ray", workers=2, ray="auto")
    assert r.executor == "ray" and r.ran == 8
    a, b = (load_results(tmp_path / d).drop(columns=list(WALL_COLUMNS)) for d in ("pool", "ray"))
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_a_master_trace_with_plan_axes(tmp_path):
    pytest.importorskip("torch")
    from chakra_trace.capture import capture, load_build
    from chakra_trace.io.et import write_trace

    master = tmp_path / "tiny.master.et"
    write_trace(
        capture(load_build(f"{ROOT / 'examples/models/gpt.py'}:build"), {"preset": "tiny"}, batch=4, seq=16).trace,
        master,
    )
    spec = {
        "workloads": {"gpt": {"master": str(master), "plan": {"zero": 0}}},
        "axes": {"tp": [1, 2], "dp": [1, 2], "npus": [2, 4]},
        "fixed": {"topology": "Switch", "bandwidth": 100, "device": "h100"},
        "where": "tp * dp = npus",
    }
    run_sweep(spec, tmp_path / "m", workers=1)
    df = load_results(tmp_path / "m").sort_values(["npus", "tp"])
    assert list(zip(df["tp"], df["dp"], df["npus"])) == [(1, 2, 2), (2, 1, 2), (2, 2, 4)]
    assert (df["status"] == "ok").all() and (df["step_s"] > 0).all()
    assert (df[df["tp"] == 2]["coll_all_reduce_s"] > 0).all()


# ------------------------------------------------------------------------------- views


def test_pareto_keeps_only_undominated_points():
    df = pd.DataFrame(
        {
            "status": ["ok"] * 5 + ["error"],
            "step_s": [1.0, 2.0, 3.0, 2.5, 1.5, 0.1],
            "cost": [9.0, 4.0, 1.0, 5.0, 9.5, 0.1],
            "id": list("abcdef"),
        }
    )
    assert list(pareto(df)["id"]) == ["a", "b", "c"]


def test_sensitivity_finds_the_axis_that_moves_the_step():
    df = pd.DataFrame(
        {"status": "ok", "bw": [50, 50, 100, 100] * 2, "algo": ["ring", "direct"] * 4, "seed": list(range(8))}
    )
    df["step_s"] = [2.0 if b == 50 else 1.0 for b in df["bw"]]
    s = sensitivity(df, axes=["algo", "bw", "seed"])
    assert list(s["axis"])[0] == "bw" and s["share"].iloc[0] == pytest.approx(1.0)
    assert s.set_index("axis").loc["algo", "share"] == pytest.approx(0.0)
    assert s.set_index("axis").loc["bw", "best_level"] == "100"


def test_sensitivity_compares_each_workload_with_itself():
    """Bandwidth halves the step of a 1 ms job and of a 1 s job alike; the seed moves the long
    job by 1 ms. In absolute seconds the seed would look as large as bandwidth for the short job."""
    df = pd.DataFrame({"status": "ok", "workload": ["short"] * 4 + ["long"] * 4, "bw": [50, 100] * 4})
    df["seed"] = [0, 0, 1, 1] * 2
    base = df["workload"].map({"short": 1e-3, "long": 1.0})
    df["step_s"] = base * df["bw"].map({50: 2.0, 100: 1.0}) + (df["workload"] == "long") * df["seed"] * 1e-3
    s = sensitivity(df, axes=["workload", "bw", "seed"]).set_index("axis")
    assert "workload" not in s.index
    assert s.loc["bw", "share"] > 0.99 and s.loc["seed", "share"] < 0.01
    assert s.loc["bw", "best_level"] == "100" and s.loc["bw", "best_rel"] == pytest.approx(2 / 3, rel=1e-3)
    front = pareto(df.assign(cost=df["bw"]))  # per workload: each has its own front
    assert set(front["workload"]) == {"short", "long"}


def test_views_over_a_results_folder(ran):
    result, df = ran
    front = pareto(result.folder)
    for _, part in front.groupby("workload"):
        assert part["step_s"].is_monotonic_increasing and part["cost"].is_monotonic_decreasing
    ok = df[df["status"] == "ok"]
    assert set(front["workload"]) == set(ok["workload"])  # a front per workload
    for _, p in front.iterrows():  # nothing of its workload beats a front point on both
        same = ok[ok["workload"] == p["workload"]]
        assert not ((same["step_s"] < p["step_s"]) & (same["cost"] < p["cost"])).any()
    s = sensitivity(result.folder)
    assert set(s["axis"]) == {"topology", "npus", "bandwidth", "mode"}  # the workload is what is compared, not an axis
    assert 0 <= s["share"].min() and s["share"].sum() <= 1 + 1e-9


def test_cli_query_pareto_sensitivity(ran, capsys):
    result, _ = ran
    folder = str(result.folder)
    assert main(["sweep", "query", folder, "SELECT count(*) AS n FROM points WHERE mode = 'compat'", "--json"]) == 0
    assert '"n": 8' in capsys.readouterr().out
    assert main(["sweep", "pareto", folder, "--json"]) == 0
    assert '"step_s"' in capsys.readouterr().out
    assert main(["sweep", "sensitivity", folder]) == 0
    assert "bandwidth" in capsys.readouterr().out
    assert main(["sweep", "query", folder, "SELECT nope FROM points"]) == 2
    assert "query failed" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_cli_run(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"workloads: {{t: {{pattern: '{TRAIN}'}}}}\naxes: {{system: [ring-8, torus-4x4x4]}}\n")
    assert main(["sweep", "run", str(spec), "-o", str(tmp_path / "o"), "--workers", "1", "--json"]) == 0
    assert '"ran": 2' in capsys.readouterr().out


def test_report_has_a_sweep_section(ran):
    from chakra_trace.synthesize.patterns import collective
    from chakra_trace.visualize.report import build_report

    result, _ = ran
    doc = build_report(collective(2, "ALL_REDUCE", 1 << 20), sweep=result.folder)
    (sec,) = [s for s in doc["sections"] if s["id"] == "sweep"]
    tables = [b for b in sec["blocks"] if b["type"] == "table"]
    sens = tables[1]["rows"]
    assert len(tables) == 3 and "workload" not in {r["axis"] for r in sens}
    energy_front = tables[2]["rows"]  # step vs energy: each row's categories make its whole
    assert energy_front and all(r["compute"] + r["comm"] + r["idle"] == pytest.approx(1) for r in energy_front)
    assert [r["share"] for r in sens] == sorted((r["share"] for r in sens), reverse=True)
    front = tables[0]["rows"]
    for w in {r["workload"] for r in front}:
        mine = [r for r in front if r["workload"] == w]
        assert mine == sorted(mine, key=lambda r: r["step_us"])


@pytest.mark.timeout(120)
def test_sweep_points_equal_astra_sim_binary_results(tmp_path):
    """A sweep over ASTRA-sim's own network/system files in compat mode gives, point for point,
    the step the real binary printed (ASTRA-sim's reference cases.csv, a differential run)."""
    import csv

    data = astra_reference()
    cases = [
        r
        for r in csv.DictReader(open(data / "cases.csv"))
        if r["backend"] == "unaware" and not r["comm_groups"] and ":" in r["workload"]
    ]
    assert len(cases) >= 5
    systems = {r["case"]: f"{data / 'cfg' / r['network']},{data / 'cfg' / r['system']}" for r in cases}
    spec = {
        "name": "astra",
        "workloads": {r["case"]: {"pattern": r["workload"]} for r in cases},
        "axes": {"workload": [r["case"] for r in cases], "system": sorted(set(systems.values()))},
        "fixed": {"mode": "compat"},
        "where": " OR ".join(f"(workload = '{c}' AND system = '{s}')" for c, s in systems.items()),
    }
    result = run_sweep(spec, tmp_path / "out", workers=2)
    df = load_results(tmp_path / "out").set_index("workload")
    assert result.points == len(cases) and (df["status"] == "ok").all(), df.get("error")
    for r in cases:
        assert int(df.loc[r["case"], "step_ns"]) == int(r["finish_ns"]), r


# ------------------------------------------------------------------------------- energy and scaling


def test_rows_have_energy_at_the_default_device(ran):
    result, df = ran
    from chakra_trace.schema.devices import device_spec, host_cpu

    # no device axis: a recorded CPU job at this machine's CPU, a synthetic (accelerator) one at h100
    expect = df["workload"].map({"ddp": host_cpu().name, "train": "h100"})
    assert expect.notna().all() and (df["energy_device"] == expect).all()
    parts = df["energy_compute_j"] + df["energy_comm_j"] + df["energy_idle_j"]
    assert ((parts - df["energy_j"]).abs() <= 1e-9 * df["energy_j"]).all() and (df["energy_j"] > 0).all()
    assert ((df["avg_power_w"] - df["energy_j"] / df["step_s"]).abs() <= 1e-6 * df["avg_power_w"]).all()
    assert ((df["perf_per_w"] * df["energy_j"] - 1).abs() < 1e-9).all()
    # idle power x NPUs x step: a slower point of the same design never spends less idle energy
    idle_w = df["energy_device"].map(
        lambda d: host_cpu().idle_power_w if d == host_cpu().name else device_spec(d).idle_power_w
    )
    assert (df.loc[df["workload"] == "train", "energy_device"] == "h100").all() and device_spec(
        "h100"
    ).idle_power_w == 105.0
    assert ((df["energy_idle_j"] - idle_w * df["sim_npus"] * df["step_s"]).abs() < 1e-9 * df["energy_j"] + 1e-12).all()
    front = pareto(result.folder, y="energy_j")
    ok = df[df["status"] == "ok"]
    for _, p in front.iterrows():
        same = ok[ok["workload"] == p["workload"]]
        assert not ((same["step_s"] < p["step_s"]) & (same["energy_j"] < p["energy_j"])).any()


def test_a_device_axis_prices_energy_at_that_device(tmp_path):
    spec = {
        "workloads": {"t": {"pattern": TRAIN}},
        "axes": {"system": ["ring-8"], "device": ["a100", "h100", "tpu-v5e"]},
    }
    df = run_sweep(spec, tmp_path / "o", workers=1).to_pandas().set_index("device")
    assert df.loc["a100", "energy_device"] == "a100" and df.loc["a100", "energy_j"] > 0
    assert pd.isna(df.loc["tpu-v5e", "energy_j"])  # no published power: absent, not zero


def test_scaling_strong_and_weak_by_the_textbook():
    df = pd.DataFrame(
        {
            "status": "ok",
            "workload": ["a"] * 3 + ["b"] * 3,
            "sim_npus": [2, 4, 8] * 2,
            "step_s": [8.0, 4.0, 2.5, 1.0, 1.0, 1.25],
            "energy_j": [10.0, 12.0, 16.0, 1.0, 2.0, 5.0],
        }
    )
    strong = scaling(df, within=[]).set_index(["workload", "npus"])
    assert strong.loc[("a", 4), "speedup"] == pytest.approx(2.0) and strong.loc[("a", 4), "efficiency"] == 1.0
    assert strong.loc[("a", 8), "speedup"] == pytest.approx(3.2) and strong.loc[("a", 8), "efficiency"] == 0.8
    assert strong.loc[("a", 8), "energy_rel"] == pytest.approx(1.6)
    weak = scaling(df, weak=True, within=[]).set_index(["workload", "npus"])
    assert weak.loc[("b", 4), "efficiency"] == 1.0 and weak.loc[("b", 8), "efficiency"] == pytest.approx(0.8)
    assert weak.loc[("b", 8), "speedup"] == pytest.approx(0.8 * 4)
    assert weak.loc[("b", 8), "energy_rel"] == pytest.approx(5.0 / 4)  # energy per unit of work
    assert (strong.xs(2, level="npus")["efficiency"] == 1).all()  # the base of each workload


def test_scaling_over_a_results_folder_and_cli(ran, capsys):
    result, df = ran
    s = scaling(result.folder, weak=True)  # groups: workload and the axes that vary, NPUs aside
    assert {"workload", "topology", "bandwidth", "mode", "npus", "speedup", "efficiency"} <= set(s.columns)
    base = s[s["npus"] == 4]
    assert (base["efficiency"] == 1).all() and (base["speedup"] == 1).all()
    assert len(s) == len(df)  # one row per point: no two share a group and an NPU count
    assert main(["sweep", "scaling", str(result.folder), "--weak", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(df) and {"efficiency", "speedup", "energy_rel"} <= set(rows[0])


def test_a_device_costs_compute_on_every_system():
    """One meaning of a compute device (`presets.with_compute`): a sweep's ``device`` sets the
    roofline on a preset with a network and on the job's own ranks alike, as `chakra simulate
    --device` does (it was ignored on a preset without a network)."""
    from chakra_trace.sweep.systems import system_of

    for name in ("recorded", "dgx-8x8"):
        plain, on = system_of({"system": name}), system_of({"system": name, "device": "h100", "efficiency": 0.5})
        assert not plain.system.roofline_enabled and on.system.roofline_enabled, name
        assert on.system.peak_perf == pytest.approx(system_of({"system": name, "device": "h100"}).system.peak_perf / 2)


def test_a_device_on_a_real_machine_is_its_kernel_model():
    """On a real machine's preset a sweep's ``device`` is costed as `chakra simulate --device`
    costs it there: by the device's kernel model, not its roofline (`presets.choose_system`)."""
    from chakra_trace.simulate.presets import choose_system
    from chakra_trace.sweep.systems import system_of

    swept = system_of({"system": "dgx-h100", "device": "h200"})
    cli = choose_system("dgx-h100", device="h200")
    assert swept.system.device_compute.kernels is not None
    assert swept.system.device_compute == cli.system.device_compute
    assert system_of({"system": "dgx-8x8", "device": "h200"}).system.device_compute.kernels is None
