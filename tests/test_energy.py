"""Energy: the simulator's model (categories add up, units on a hand-computed case, more idle
power or a slower system never costs less), the CLI, and the replay's counters (RAPL read from a
synthetic powercap tree, wraparound, unreadable zones reported absent, never zero; energy
statistics on a Measurement)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.replay import energy as renergy
from chakra_trace.replay.energy import POWERCAP_ENV, EnergyMeter, rapl_counters
from chakra_trace.replay.measure import Measurement, measure
from chakra_trace.replay.result import step_measurement
from chakra_trace.schema.devices import DEVICES, IDLE_FRACTION, device_spec, host_cpu
from chakra_trace.simulate import CollectiveRecord, SimResult
from chakra_trace.simulate.config import Network
from chakra_trace.simulate.devices import with_device
from chakra_trace.simulate.energy import LINK_PJ_PER_BIT, energy
from chakra_trace.simulate.presets import preset, simulate_on
from chakra_trace.synthesize.patterns import from_spec

TRAIN = "train:layers=4:comp_us=100:size=4194304"


def _result(compute_ns, comm_ns, finish_ns, collectives=()):
    z = np.zeros(len(compute_ns), np.int64)
    return SimResult(
        finish_ns=np.asarray(finish_ns, np.int64),
        exposed_comm_ns=z,
        compute_ns=np.asarray(compute_ns, np.int64),
        comm_ns=np.asarray(comm_ns, np.int64),
        overlap_ns=z,
        other_ns=z,
        idle_ns=z,
        collectives=list(collectives),
    )


# ------------------------------------------------------------------------------- devices


def test_device_power_is_the_datasheet_tdp_and_a_documented_idle_share():
    assert (DEVICES["h100"].tdp_w, DEVICES["a100"].tdp_w, DEVICES["v100"].tdp_w) == (700.0, 400.0, 300.0)
    assert DEVICES["h100"].idle_power_w == pytest.approx(IDLE_FRACTION * 700)
    assert DEVICES["tpu-v5e"].tdp_w is None and DEVICES["tpu-v5e"].idle_power_w is None  # unknown, not guessed
    assert device_spec("h100", peak_tflops=500).tdp_w == 700.0  # an overridden roof keeps the power
    assert device_spec("cpu").tdp_w > 0  # this machine's CPU: an estimate, named as one


# ------------------------------------------------------------------------------- simulator model


def test_units_on_a_hand_computed_case():
    """2 NPUs, a 2 ms step, 1 ms and 0.5 ms of compute, one 1 MB all-reduce over a ring of 2."""
    rec = CollectiveRecord("all", 0, "ALL_REDUCE", 1_000_000, 2, "all_reduce:ring@d0", 1, 0, 10)
    res = _result([1_000_000, 500_000], [10, 10], [2_000_000, 1_900_000], [rec])
    e = energy(res, "h100")
    idle, active = 0.15 * 700, 700.0
    assert e.idle_j.tolist() == pytest.approx([idle * 2e-3] * 2)  # W x s: every NPU held for the step
    assert e.compute_j.tolist() == pytest.approx([(active - idle) * 1e-3, (active - idle) * 0.5e-3])
    # each member sends 2 x (p-1)/p x 1 MB = 1 MB; 2 MB = 16e6 bit x 5 pJ/bit
    assert e.by_category["communication"] == pytest.approx(16e6 * LINK_PJ_PER_BIT["scale-up"] * 1e-12)
    assert e.comm_j.tolist() == pytest.approx([4e-5, 4e-5])  # 8e-5 J split by communication time
    assert e.total_j == pytest.approx(sum(e.by_category.values()))
    assert e.avg_power_w == pytest.approx(e.total_j / 2e-3)
    assert e.steps_per_j == pytest.approx(1 / e.total_j)
    d = e.to_dict()
    assert d["by_category_j"]["idle"] == pytest.approx(2 * idle * 2e-3) and json.dumps(d)
    assert list(e.to_pandas().columns) == ["compute_j", "comm_j", "idle_j", "total_j"]


@pytest.mark.parametrize("system", ["dgx-8x8", "torus-8x8"])
def test_categories_add_up_and_more_idle_power_never_costs_less(system):
    res = simulate_on(from_spec(TRAIN, 64), system)
    net = preset(system).network
    e = energy(res, "h100", net)
    assert e.npus == 64 and e.total_j == pytest.approx(float(e.per_npu_j.sum()))
    assert e.total_j == pytest.approx(sum(e.by_category.values())) and min(e.by_category.values()) > 0
    assert len(e.levels) == 2 and e.levels == ["scale-up", "scale-out"] and all(b > 0 for b in e.bytes_per_dim)
    low, high = (energy(res, "h100", net, idle_w=w).total_j for w in (50, 100))
    assert low <= high
    assert energy(res, "h100", net, pj_per_bit=0).by_category["communication"] == 0
    more = energy(res, "h100", net, static_w=[1.0, 2.0]).by_category["communication"]
    assert more == pytest.approx(e.by_category["communication"] + 3.0 * 64 * res.step_ns / 1e9)


def test_a_faster_system_spends_no_more_idle_energy():
    w = from_spec(TRAIN, 8)
    steps, idles = [], []
    for bw in (10, 50, 400):
        net = Network.simple("Ring", 8, bw, 500)
        res = simulate_on(w, dataclasses.replace(preset("ring-8"), network=net))
        e = energy(res, "a100", net)
        steps.append(res.step_ns)
        idles.append(e.by_category["idle"])
    assert steps == sorted(steps, reverse=True) and steps[0] > steps[-1]
    assert idles == sorted(idles, reverse=True)


def test_no_communication_no_communication_energy_and_flops_per_joule():
    ring = preset("ring-8")
    on_h100 = dataclasses.replace(ring, system=with_device(ring.system, "h100"))  # compute at the roofline
    res = simulate_on(from_spec("roof:ops=1e12/1e10:bytes=1e9", 8), on_h100)
    e = energy(res, "h100", ring.network)
    assert not res.collectives and e.by_category["communication"] == 0.0 and e.by_category["compute"] > 0
    assert e.flops == pytest.approx(8 * (1e12 + 1e10))
    assert e.flop_per_j == pytest.approx(e.flops / e.total_j)


def test_point_to_point_sends_count_on_the_dimensions_they_cross():
    res = simulate_on(from_spec("p2p:size=1048576", 8), "ring-8")
    e = energy(res, "h100", preset("ring-8").network)
    assert e.bytes_per_dim[0] > 0 and e.by_category["communication"] > 0


def test_a_device_without_power_asks_for_a_figure():
    res = _result([1], [0], [2])
    with pytest.raises(ChakraError, match="no published power"):
        energy(res, "tpu-v5e")
    assert energy(res, "tpu-v5e", active_w=200).idle_w == pytest.approx(IDLE_FRACTION * 200)
    with pytest.raises(ChakraError, match="idle"):
        energy(res, "h100", idle_w=900)


def test_cli_simulate_energy(capsys):
    assert main(["simulate", "tests/data/corpus/ddp", "--system", "dgx-8x8", "--energy", "--device", "a100"]) == 0
    out = capsys.readouterr().out
    assert "energy" in out and "J per step" in out and "A100" in out
    assert main(["simulate", "tests/data/corpus/ddp", "--system", "recorded", "--energy", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    e = d["energy"]
    # a CPU-only job named no device: this machine's CPU prices it (a GPU job must name its device)
    assert e["total_j"] == pytest.approx(sum(e["by_category_j"].values())) and e["device"] == host_cpu().name
    assert e["recording_s"] == pytest.approx(d["recording_ns"] / 1e9)


# ------------------------------------------------------------------------------- replay counters


def _zone(path, name, uj, wrap=262143328850):
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text(f"{wrap}\n")
    return path


@pytest.fixture
def powercap(tmp_path):
    root = tmp_path / "powercap"
    p0 = _zone(root / "intel-rapl:0", "package-0", 1_000_000)
    _zone(root / "intel-rapl:0" / "intel-rapl:0:0", "core", 500_000)  # part of the package
    _zone(root / "intel-rapl:0" / "intel-rapl:0:1", "dram", 2_000_000)
    _zone(root / "intel-rapl:1", "package-1", 3_000_000, wrap=10_000_000)
    return root, p0


def test_rapl_sums_packages_and_dram_not_their_cores(powercap, monkeypatch):
    root, _ = powercap
    counters, status = rapl_counters(root)
    assert [c.label for c in counters] == ["rapl:package-0", "rapl:package-0/dram", "rapl:package-1"]
    assert status["available"] and [c.read() for c in counters] == [1.0, 2.0, 3.0]
    monkeypatch.setenv(POWERCAP_ENV, str(root))
    meter = EnergyMeter.auto()
    assert meter.source == "rapl:package-0+rapl:package-0/dram+rapl:package-1"


def test_rapl_wraparound_is_undone(powercap):
    root, _ = powercap
    meter = EnergyMeter.auto(root=root)
    a = meter.read()
    (root / "intel-rapl:1" / "energy_uj").write_text("500000\n")  # 3.0 J -> wrapped past 10 J -> 0.5 J
    (root / "intel-rapl:0" / "energy_uj").write_text("1250000\n")
    b = meter.read()
    assert meter.joules(a, b) == pytest.approx(0.25 + 0.0 + (10.0 - 3.0 + 0.5))


def test_unreadable_and_missing_counters_are_absent_not_zero(powercap, tmp_path, monkeypatch):
    root, p0 = powercap
    real = renergy._text

    def deny(path):
        if path.name == "energy_uj" and "intel-rapl:1" not in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(renergy, "_text", deny)
    counters, status = rapl_counters(root)
    assert [c.label for c in counters] == ["rapl:package-1"]  # the readable one only
    assert any("permission denied" in z.get("reason", "") for z in status["zones"])

    def deny_all(path):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(renergy, "_text", deny_all)
    meter = EnergyMeter.auto(root=root)
    assert not meter.available and meter.source is None and "permission denied" in meter.reason
    missing = EnergyMeter.auto(root=tmp_path / "nope")
    assert not missing.available and "no " in missing.reason
    m = measure(lambda: None, warmup=0, min_repeats=3, max_repeats=3, meter=missing)
    assert "energy_j" not in m.extra and "energy_source" not in m.extra and m.extra["energy_absent"]
    assert m.energy is None and m.to_dict()["energy"] == {"absent": m.extra["energy_absent"]}


def test_measurement_carries_energy_per_sample_with_statistics(powercap):
    root, p0 = powercap
    meter = EnergyMeter.auto(root=root)
    state = {"uj": 1_000_000}

    def work():  # each sample: 0.1 J more on package 0
        state["uj"] += 100_000
        (p0 / "energy_uj").write_text(f"{state['uj']}\n")

    m = measure(work, warmup=0, min_repeats=8, max_repeats=8, meter=meter)
    assert m.extra["energy_j"] == pytest.approx([0.1] * 8) and m.extra["energy_source"].startswith("rapl:package-0")
    st = m.to_dict()["energy"]
    assert st["median"] == pytest.approx(0.1) and st["ci95_median"] == pytest.approx([0.1, 0.1]) and st["n"] == 8
    assert "energy median 0.1 J" in m.summary()
    back = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back.energy.tolist() == pytest.approx([0.1] * 8)
    two = Measurement.merge_runs([m, back])
    assert len(two.extra["energy_j"]) == 16 and [len(r.extra["energy_j"]) for r in two.split_runs()] == [8, 8]
    step = step_measurement({0: m, 1: Measurement("r1", list(m.samples), extra={"energy_absent": "x"})})
    assert step.extra["energy_j"] == pytest.approx([0.1] * 8)  # the sum over ranks that measured


def test_a_counter_failing_midway_gives_no_partial_energy(powercap):
    root, p0 = powercap
    meter = EnergyMeter.auto(root=root)
    calls = {"n": 0}

    def work():
        calls["n"] += 1
        if calls["n"] == 3:
            (p0 / "energy_uj").write_text("garbage\n")

    m = measure(work, warmup=0, min_repeats=5, max_repeats=5, meter=meter)
    assert "energy_j" not in m.extra and "unreadable" in m.extra["energy_absent"]


def test_this_machine_reports_its_rapl_status():
    """(This VM has no /sys/class/powercap: absent with the reason; a machine with RAPL: zones.)"""
    s = renergy.rapl_status()
    assert s["available"] or s["reason"]
    assert not math.isnan(float(len(s["zones"])))
