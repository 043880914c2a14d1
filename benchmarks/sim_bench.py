#!/usr/bin/env python3
"""Simulator speed: ours against ASTRA-sim's binary at 1,024 NPUs, and growth to 100,000 NPUs.

Part 1, end to end as a user runs each tool: the same `.et` files, network YAML and system JSON
go to `chakra simulate --compat astra` (a fresh process: start-up, reading 1,024 files,
simulating, printing) and to ASTRA-sim's analytical binary. Per-NPU finish times must be equal.
The binary is built outside this repository (tools/astra/README.md); where it is absent, the
ratio is against ASTRA-sim's wall times measured with it on these machines (RECORDED).

Part 2, growth: `simulate` in a fresh process (wall time of the call, peak RSS growth) from
1,024 to 100,000 NPUs: a 1 MiB ring all-reduce on a 1-D ring, and a 16-layer data-parallel
training step on a 3-D Ring x FullyConnected x Switch network, congestion-unaware and aware;
with the exact shortcuts (listed per row) and, up to --full-max NPUs, without them.

System: LIFO, endpoint delay 10 ns, 4 splits, 1 active chunk per dimension, ring for every
collective and dimension, localBWAware, local memory 1600 GB/s. `train`: 16 layers of 100 us
forward / 200 us backward, a 4 MiB all-reduce per layer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _probe as probe

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "astra"))

BASE = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
}


def system_for(net) -> dict:
    """The system config, ring on every dimension (ASTRA-sim wants one algorithm per dimension)."""
    ring = ["ring"] * len(net[0])
    return {
        **BASE,
        **{f"{c}-implementation": ring for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
    }


TRAIN = "train:layers=16:comp_us=100:size=4194304"
RFS = ["Ring", "FullyConnected", "Switch"]
RFS_BW, RFS_LAT = [200, 100, 50], [50, 500, 2000]

# name, network (topologies, sizes, GB/s, ns), workload, congestion-aware
CASES = [
    ("AR 1 MiB, ring 1,024", (["Ring"], [1024], [50], [500]), "coll:all_reduce:1048576", False),
    ("AR 64 MiB, 32x32 torus", (["Ring", "Ring"], [32, 32], [50, 50], [500, 500]), "coll:all_reduce:67108864", False),
    ("train 16 layers, 8x8x16 Ring/FC/Switch", (RFS, [8, 8, 16], RFS_BW, RFS_LAT), TRAIN, False),
    ("AR 64 MiB, ring 1,024, aware", (["Ring"], [1024], [50], [500]), "coll:all_reduce:67108864", True),
    ("train 16 layers, ring 1,024, aware", (["Ring"], [1024], [50], [500]), TRAIN, True),
]
#: ASTRA-sim's wall seconds for CASES, measured with its binary on these machines (2-core
#: x86, 2026-11-24/25; ../shared/reference/astra-sim/differences-found.md and `--astra` runs).
RECORDED = {
    "AR 1 MiB, ring 1,024": 7.90,
    "AR 64 MiB, 32x32 torus": 1.7,
    "train 16 layers, 8x8x16 Ring/FC/Switch": 11.61,
    "AR 64 MiB, ring 1,024, aware": 11.48,
    "train 16 layers, ring 1,024, aware": 329.0,
}

PROBE = """
from chakra_trace.simulate import simulate
from chakra_trace.simulate.config import Network, SystemConfig
from chakra_trace.synthesize import from_spec
spec = json.loads(sys.argv[1])
net = Network.simple(*spec["network"])
system = SystemConfig.from_dict(spec["system"])
workload = from_spec(spec["workload"], net.npus)
base = status("VmRSS")
reset_peak()
t = time.perf_counter()
res = simulate(workload, net, system, compat=True, aware=spec["aware"], shortcuts=spec["shortcuts"])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_bytes": status("VmHWM") - base, "step_ns": res.step_ns,
                  "finish_equal": len(set(res.finish_ns.tolist())) == 1, "events": res.events,
                  "shortcuts": [s.split(":")[0] for s in res.shortcuts]}))
"""


def network_yaml(net) -> str:
    topo, sizes, bw, lat = net
    return (
        f"topology: [ {', '.join(topo)} ]\nnpus_count: [ {', '.join(map(str, sizes))} ]\n"
        f"bandwidth: [ {', '.join(f'{float(b)}' for b in bw)} ]\nlatency: [ {', '.join(f'{float(x)}' for x in lat)} ]\n"
    )


def ours_end_to_end(tmp: Path, aware: bool, repeats: int) -> tuple[float, list[int]]:
    """Median wall seconds of `chakra simulate` in a fresh process, and its per-NPU finish."""
    cmd = [
        sys.executable,
        "-m",
        "chakra_trace.cli",
        "simulate",
        str(tmp / "workload"),
        "--system",
        str(tmp / "system.json"),
        "--network",
        str(tmp / "network.yml"),
        "--compat",
        "astra",
        "--json",
    ]
    if aware:
        cmd.append("--congestion-aware")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    walls, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t)
        if p.returncode:
            raise SystemExit(f"chakra simulate failed:\n{p.stderr[-3000:]}")
        out = json.loads(p.stdout)
    assert out is not None
    return statistics.median(walls), out["finish_ns"]


def astra_binary(tmp: Path, spec: str, aware: bool, timeout: float) -> dict | None:
    """ASTRA-sim on the same inputs ({'wall_s', 'per_npu'}), or None without the binary."""
    import run_case

    if not (run_case.BIN_DIR / run_case.BINARIES["aware" if aware else "unaware"]).exists():
        return None
    return run_case.run(
        "aware" if aware else "unaware", tmp / "network.yml", tmp / "system.json", spec, timeout=timeout
    )


def part1(args) -> list[dict]:
    from chakra_trace.synthesize import from_spec

    rows = []
    print(f"{'case (1,024 NPUs)':40} {'ours s':>8} {'ASTRA s':>9} {'ratio':>7}  equal  ASTRA-sim time")
    for name, net, spec, aware in CASES:
        with tempfile.TemporaryDirectory(prefix="sim_bench_") as d:
            tmp = Path(d)
            (tmp / "network.yml").write_text(network_yaml(net))
            (tmp / "system.json").write_text(json.dumps(system_for(net)))
            from_spec(spec, 1024).save(tmp / "workload")
            ours_s, finish = ours_end_to_end(tmp, aware, args.repeats)
            ref = None if args.no_astra else astra_binary(tmp, spec, aware, args.astra_timeout)
        if ref is not None:
            theirs = [ref["per_npu"][r][0] for r in sorted(ref["per_npu"])]
            astra_s, source, equal = ref["wall_s"], "measured now", theirs == finish
        else:
            astra_s, source, equal = RECORDED[name], "recorded", None
        row = {
            "case": name,
            "network": net,
            "workload": spec,
            "aware": aware,
            "ours_seconds": ours_s,
            "astra_seconds": astra_s,
            "astra_source": source,
            "ratio": astra_s / ours_s,
            "step_ns": max(finish),
            "finish_equal_to_astra": equal,
        }
        rows.append(row)
        eq = "-" if equal is None else "yes" if equal else "NO"
        print(f"{name:40} {ours_s:8.2f} {astra_s:9.2f} {astra_s / ours_s:6.1f}x  {eq:5}  {source}")
    return rows


def growth_network(n: int, kind: str):
    if kind == "ring":
        return (["Ring"], [n], [50], [500])
    sizes = {1024: [8, 8, 16], 4096: [16, 16, 16], 16384: [32, 32, 16], 102400: [64, 64, 25]}.get(n, [8, 8, n // 64])
    return (RFS, sizes, RFS_BW, RFS_LAT)


def probe_run(net, spec: str, aware: bool, shortcuts: bool) -> dict:
    payload = {"network": net, "system": system_for(net), "workload": spec, "aware": aware, "shortcuts": shortcuts}
    return probe.run(PROBE, json.dumps(payload))


def part2(args) -> list[dict]:
    rows = []
    print("\ngrowth: simulate() wall seconds / peak MiB (shortcuts on; 'full': --no-shortcuts)")
    print(f"{'case':34} {'NPUs':>8} {'s':>7} {'MiB':>7} {'full s':>7} {'full MiB':>8} {'events':>7}  shortcuts")
    plan = [("ring AR 1 MiB, 1-D ring", "ring", "coll:all_reduce:1048576")]
    plan.append(("train 16 layers, Ring/FC/Switch", "rfs", TRAIN))
    for label, kind, spec in plan:
        for aware in (False, True):
            for n in args.scaling:
                n = n if kind == "ring" else {100000: 102400}.get(n, n)
                net = growth_network(n, kind)
                fast = probe_run(net, spec, aware, True)
                full = probe_run(net, spec, aware, False) if n <= args.full_max else None
                if full is not None and full["step_ns"] != fast["step_ns"]:
                    raise SystemExit(
                        f"{label} on {n}: shortcuts changed the step ({fast['step_ns']} vs {full['step_ns']})"
                    )
                name = label + (", aware" if aware else "")
                rows.append({"case": name, "npus": n, "network": net, "fast": fast, "full": full})
                fs = f"{full['seconds']:7.2f} {full['peak_bytes'] / 2**20:8.0f}" if full else f"{'-':>7} {'-':>8}"
                print(
                    f"{name:34} {n:8,} {fast['seconds']:7.2f} {fast['peak_bytes'] / 2**20:7.0f} {fs} "
                    f"{fast['events']:7,}  {', '.join(fast['shortcuts']) or '-'}"
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scaling", default="1024,4096,16384,100000", help="NPU counts for the growth table")
    ap.add_argument("--full-max", type=int, default=16384, help="largest NPU count run without shortcuts too")
    ap.add_argument("--repeats", type=int, default=3, help="runs of ours per case (median)")
    ap.add_argument("--no-astra", action="store_true", help="ratios against the recorded ASTRA-sim times")
    ap.add_argument("--astra-timeout", type=float, default=900, help="seconds allowed to one ASTRA-sim run")
    ap.add_argument("--skip-growth", action="store_true")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    args = ap.parse_args()
    args.scaling = [int(x) for x in args.scaling.split(",")]
    out = {"cases": part1(args)}
    if not args.skip_growth:
        out["growth"] = part2(args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
