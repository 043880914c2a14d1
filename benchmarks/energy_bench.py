#!/usr/bin/env python3
"""Energy per training step from the simulator (`chakra_trace.simulate.energy`), and whether this
machine can measure energy itself (RAPL through powercap).

Workloads: a synthetic data-parallel step (`train:layers=16:comp_us=500:size=4194304`: 16 layers,
500 us of compute each way, a 4 MiB all-reduce per layer) built on 64 NPUs, and the recorded DDP
job of the corpus (`tests/data/corpus/ddp`, scaled out data-parallel to 64 NPUs, compute as
recorded). Systems: `dgx-8x8` and `torus-8x8`; devices: h100 and a100 power (datasheet TDP, idle
15% of it). Per case: the step, joules per step (total and per NPU), average power, steps/J and
the share of each category. The simulator is deterministic: one run per case. The corpus job's
compute is timed at each device's roofline (it records FLOPs and bytes), so there the device
changes speed and power; the synthetic step's compute is its own on both devices (power only).

    python benchmarks/energy_bench.py --json benchmarks/results/energy.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chakra_trace.io.workload import Workload  # noqa: E402
from chakra_trace.replay.energy import rapl_status  # noqa: E402
from chakra_trace.simulate.devices import with_device  # noqa: E402
from chakra_trace.simulate.energy import LINK_PJ_PER_BIT, energy  # noqa: E402
from chakra_trace.simulate.presets import preset, simulate_on  # noqa: E402
from chakra_trace.synthesize.patterns import from_spec  # noqa: E402

TRAIN = "train:layers=16:comp_us=500:size=4194304"
EFFICIENCY = 0.55
SYSTEMS = ("dgx-8x8", "torus-8x8")
DEVICES = ("h100", "a100")


def cases() -> list[dict]:
    """Each workload on each system and device. The corpus job records FLOPs and bytes, so its
    compute is timed at each device's roofline (`simulate.devices.with_device`, at 0.55 of the
    roofs, the share Megatron-LM's 22B run on A100s reached): there the device changes speed and power. The
    synthetic step has no FLOPs: its compute stays as given and the device changes the power only."""
    workloads = {"train-dp": from_spec(TRAIN, 64), "corpus-ddp": Workload.open(ROOT / "tests/data/corpus/ddp")}
    rows = []
    for wname, w in workloads.items():
        for system in SYSTEMS:
            for dev in DEVICES:
                p = preset(system)
                timed = wname == "corpus-ddp"
                if timed:
                    p = dataclasses.replace(p, system=with_device(p.system, dev, EFFICIENCY))
                t0 = time.perf_counter()
                res = simulate_on(w, p)
                sim_s = time.perf_counter() - t0
                e = energy(res, dev, p.network)
                cat = e.by_category
                rows.append(
                    {
                        "workload": wname,
                        "system": system,
                        "device": dev,
                        "compute_timed_on_device": timed,
                        "npus": e.npus,
                        "recording_ms": res.recording_ns / 1e6,
                        "steps": res.steps,
                        "step_ms": (res.per_step_ns or res.recording_ns) / 1e6,
                        "energy_j": e.j_per_step or e.total_j,  # per step (a recording of unknown steps: one)
                        "energy_per_npu_j": (e.j_per_step or e.total_j) / e.npus,
                        "avg_power_kw": (e.avg_power_w or 0.0) / 1e3,
                        "steps_per_kj": 1e3 * (e.steps_per_j or 0.0),
                        "compute_share": cat["compute"] / e.total_j,
                        "comm_share": cat["communication"] / e.total_j,
                        "idle_share": cat["idle"] / e.total_j,
                        "by_category_j": cat,
                        "comm_bytes_per_dim": e.bytes_per_dim,
                        "sim_wall_s": round(sim_s, 4),
                    }
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    rows = cases()
    rapl = rapl_status()
    for r in rows:
        print(
            f"{r['workload']:11s} {r['system']:10s} {r['device']:5s} step {r['step_ms']:9.3f} ms  "
            f"{r['energy_j']:10.2f} J ({r['energy_per_npu_j']:.3f} J/NPU)  {r['avg_power_kw']:6.2f} kW  "
            f"{r['steps_per_kj']:7.2f} steps/kJ  compute {r['compute_share']:.1%} comm {r['comm_share']:.2%} "
            f"idle {r['idle_share']:.1%}"
        )
    print("RAPL here:", "available" if rapl["available"] else f"absent ({rapl.get('reason')})")
    if args.json:
        out = {
            "benchmark": "energy",
            "model": {
                "idle": "idle power x step, every NPU",
                "compute": "(TDP - idle) x compute busy time",
                "communication": "bits per network level x pJ/bit",
                "pj_per_bit": LINK_PJ_PER_BIT,
            },
            "workload_spec": TRAIN,
            "rows": rows,
            "rapl": rapl,
            "machine": {"python": platform.python_version(), "platform": platform.platform()},
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
