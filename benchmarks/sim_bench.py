#!/usr/bin/env python3
"""Simulator speed at 1,024 NPUs against ASTRA-sim's times, and growth to 16,384 NPUs.

Each case runs in a fresh subprocess (wall time of `simulate`, peak RSS growth), in ASTRA-sim
compatibility mode so the results are ASTRA-sim's own numbers. ASTRA-sim's wall times were
measured on these machines (../shared/docs/simulation-reference.md); it cannot run here, so
the ratio is against those figures, and the simulated step of the first case is checked
against ASTRA-sim's closed form for a ring all-reduce.

System: LIFO, endpoint delay 10 ns, 4 splits, 1 active chunk per dimension, ring for every
collective and dimension, localBWAware, local memory 1600 GB/s. `train` is the reference
doc's data-parallel step: 16 layers of 100 µs forward / 200 µs backward, a 4 MiB all-reduce
per layer.
"""

from __future__ import annotations

import argparse
import json

import _probe as probe

SYSTEM = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
    **{f"{c}-implementation": ["ring"] * 3 for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
}
TRAIN = "train:layers=16:comp_us=100:size=4194304"

# name, network (topologies, sizes, GB/s, ns), workload, congestion-aware, ASTRA-sim seconds
CASES = [
    ("ring all-reduce 1 MiB, 1,024 ring", (["Ring"], [1024], [50], [500]), "coll:all_reduce:1048576", False, 10.2),
    (
        "all-reduce 64 MiB, 32x32 torus",
        (["Ring", "Ring"], [32, 32], [50, 50], [500, 500]),
        "coll:all_reduce:67108864",
        False,
        1.7,
    ),
    (
        "train, Ring x FC x Switch 8x8x16",
        (["Ring", "FullyConnected", "Switch"], [8, 8, 16], [200, 100, 50], [50, 500, 2000]),
        TRAIN,
        False,
        19.8,
    ),
    ("train, 1,024 ring, congestion-aware", (["Ring"], [1024], [50], [500]), TRAIN, True, 388.0),
]

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
res = simulate(workload, net, system, compat=True, aware=spec["aware"])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_bytes": status("VmHWM") - base, "step_ns": res.step_ns,
                  "finish_equal": len(set(res.finish_ns.tolist())) == 1, "events": res.events,
                  "exposed_ns": int(res.exposed_comm_ns.max())}))
"""


def run(network, workload: str, aware: bool) -> dict:
    return probe.run(PROBE, json.dumps({"network": network, "system": SYSTEM, "workload": workload, "aware": aware}))


def ring_allreduce_closed_form(p: int, nbytes: int, splits=4, bw=50, lat=500, delta=10, mem=1600) -> int:
    beta = bw * 2**30 / 1e9
    m = nbytes // splits / p
    return splits * (delta + 2 * (p - 1) * (int(lat + m / beta) + delta) + (p - 1) * 3 * int(m // mem))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scaling", default="1024,4096,16384", help="NPU counts for the growth table")
    ap.add_argument("--skip-aware", action="store_true", help="leave out the congestion-aware case (slowest)")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    args = ap.parse_args()
    rows = []
    print(f"{'case':42} {'ours s':>8} {'ASTRA s':>8} {'speedup':>8} {'peak MiB':>9} {'step ns':>14}")
    for name, net, wl, aware, astra in CASES:
        if aware and args.skip_aware:
            continue
        r = run(list(net), wl, aware)
        rows.append({"case": name, "network": net, **r, "astra_seconds": astra, "speedup": astra / r["seconds"]})
        print(
            f"{name:42} {r['seconds']:8.2f} {astra:8.1f} {astra / r['seconds']:7.1f}x "
            f"{r['peak_bytes'] / 2**20:9.1f} {r['step_ns']:14,}"
        )
    expect = ring_allreduce_closed_form(1024, 1 << 20)
    print(
        f"check: ring all-reduce on 1,024 NPUs = {rows[0]['step_ns']:,} ns; ASTRA-sim's closed form gives "
        f"{expect:,} ({'identical' if rows[0]['step_ns'] == expect else 'DIFFERENT'})"
    )
    growth = []
    print("\ngrowth (ring all-reduce 1 MiB on a 1-D ring; train on Ring x FC x Switch 8 x 8 x n/64):")
    print(f"{'NPUs':>7} {'ring s':>8} {'ring MiB':>9} {'train s':>8} {'train MiB':>10}")
    for p in (int(x) for x in args.scaling.split(",")):
        a = run([["Ring"], [p], [50], [500]], "coll:all_reduce:1048576", False)
        b = run([["Ring", "FullyConnected", "Switch"], [8, 8, p // 64], [200, 100, 50], [50, 500, 2000]], TRAIN, False)
        growth.append({"npus": p, "ring": a, "train": b})
        print(
            f"{p:7,} {a['seconds']:8.2f} {a['peak_bytes'] / 2**20:9.1f} {b['seconds']:8.2f} "
            f"{b['peak_bytes'] / 2**20:10.1f}"
        )
    if args.json_out:
        check = {"step_ns": rows[0]["step_ns"], "closed_form_ns": expect}
        with open(args.json_out, "w") as f:
            json.dump({"cases": rows, "closed_form_check": check, "growth": growth}, f, indent=2)


if __name__ == "__main__":
    main()
