#!/usr/bin/env python3
"""Sweep throughput: a 1,000-point design space, local process pool against Ray, same run.

    python benchmarks/sweep_bench.py [--workers 2] [--json benchmarks/results/sweep.json]

The space: a 48-layer data-parallel training step (`patterns.training_step`: 100 us forward,
200 us backward and a 1 MiB all-reduce per layer) on Ring or Switch networks of 8 to 128 NPUs,
10 bandwidths, 5 latencies, ring or direct all-reduce: 2 x 5 x 10 x 5 x 2 = 1,000 points, each
tens of milliseconds. Each executor runs the whole space into a fresh results folder with the same
number of workers; the figures are points per second end to end (start-up of the workers or the
Ray runtime included) and over the points alone (from the first to the last row). Both must give
the same rows apart from wall times. Then the pool runs the space again with one worker killed
(SIGKILL) at the 200th point, and once more to resume: every point once, nothing left to run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chakra_trace.sweep import load_results, run_sweep  # noqa: E402
from chakra_trace.sweep.evaluate import WALL_COLUMNS  # noqa: E402

SPEC = {
    "name": "bench",
    "workloads": {"train": {"pattern": "train:layers=48:comp_us=100:size=1048576"}},
    "axes": {
        "topology": ["Ring", "Switch"],
        "npus": [8, 16, 32, 64, 128],
        "bandwidth": [12.5, 25, 50, 75, 100, 150, 200, 300, 400, 800],
        "latency": [250, 500, 1000, 2000, 4000],
        "algorithm": ["ring", "direct"],
    },
    "prices": {"npu_hour": 2.0},
}


def measure(executor: str, workers: int, folder: Path) -> dict:
    firsts: list[float] = []

    def tick(_n: int = 1) -> None:
        firsts.append(time.perf_counter())

    t0 = time.perf_counter()
    r = run_sweep(SPEC, folder, workers=workers, ray="auto" if executor == "ray" else None, progress=tick)
    wall = time.perf_counter() - t0
    steady = (len(firsts) - 1) / (firsts[-1] - firsts[0]) if len(firsts) > 1 and firsts[-1] > firsts[0] else 0.0
    out = {
        "executor": executor,
        "workers": workers,
        "points": r.ran,
        "errors": r.errors,
        "wall_s": round(wall, 2),
        "points_per_s": round(r.ran / wall, 2),
        "steady_points_per_s": round(steady, 2),
        "startup_s": round(firsts[0] - t0, 2) if firsts else None,
    }
    print(json.dumps(out), flush=True)
    return out


def killed_and_resumed(workers: int, folder: Path) -> dict:
    """The pool with one worker SIGKILLed at the 200th point, then the same sweep run again:
    every point must be there exactly once and the rerun must find nothing left to do."""
    import multiprocessing as mp
    import signal

    killed: list[int] = []
    done = [0]

    def tick(_n: int = 1) -> None:
        done[0] += 1
        if done[0] == 200 and not killed:
            victim = mp.active_children()[0]
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    r = run_sweep(SPEC, folder, workers=workers, progress=tick)
    rows = load_results(folder)
    again = run_sweep(SPEC, folder, workers=workers)
    out = {
        "killed_workers": len(killed),
        "retried": r.retried,
        "restarts": r.restarts,
        "lost": r.lost,
        "rows": len(rows),
        "distinct_points": int(rows["point_id"].nunique()),
        "errors": int((rows["status"] != "ok").sum()),
        "rerun_ran": again.ran,
        "rerun_skipped": again.skipped,
    }
    print(json.dumps(out), flush=True)
    if not (killed and out["rows"] == out["distinct_points"] == len(rows) == r.points and again.ran == 0):
        raise SystemExit(f"a killed worker lost or repeated points: {out}")
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-ray", action="store_true", help="Measure the pool only.")
    ap.add_argument("--json", metavar="OUT", default=str(ROOT / "benchmarks" / "results" / "sweep.json"))
    args = ap.parse_args(argv)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs["pool"] = measure("pool", args.workers, Path(tmp) / "pool")
        if not args.skip_ray:
            runs["ray"] = measure("ray", args.workers, Path(tmp) / "ray")
            a, b = (load_results(Path(tmp) / k).drop(columns=list(WALL_COLUMNS)) for k in ("pool", "ray"))
            same = bool(a.equals(b))
            if not same:
                raise SystemExit("pool and Ray rows differ")
        else:
            same = None
        kill = killed_and_resumed(args.workers, Path(tmp) / "killed")
    out = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "space": {k: len(v) for k, v in SPEC["axes"].items()},
        "points": runs["pool"]["points"],
        "runs": runs,
        "ray_vs_pool": round(runs["ray"]["points_per_s"] / runs["pool"]["points_per_s"], 3) if "ray" in runs else None,
        "same_rows": same,
        "killed_worker": kill,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
