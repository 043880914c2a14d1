#!/usr/bin/env python3
"""Calibrate, then predict: each multi-rank corpus job's step time predicted on this machine's
profile against the same job run for real.

Calibrate once (`chakra calibrate`, or `--profile` to reuse one), then for every job predict
its step from its checked-in traces (`tests/data/corpus/<job>`) and measure it: the job's own
script (`benchmarks/corpus/jobs/<job>.py`) under torchrun on 127.0.0.1, one intra-op thread per
rank as it was recorded, unprofiled. A step is the time between two `optimizer.zero_grad()`
calls (every corpus job starts a step with it), taken after a barrier on every rank, the slowest
rank's; the first `--skip` steps are dropped; `--runs` processes per job, pooled with
`Measurement.merge_runs` (median and its distribution-free 95% CI). Nothing is tuned per job.

    python benchmarks/predict_bench.py --json benchmarks/results/predict_bench.json
    python benchmarks/predict_bench.py --profile profile.json --jobs ddp,pp --json out.json

The prediction (compute "replay", comm "network") replays the job's ops here once, right after
its real runs (`--fresh`, the default: not an earlier cached timing), on the rank count it is
predicted for. `--four` adds ddp recorded at 2 ranks and predicted at 4 (data-parallel
scale-out) against ddp run at 4 ranks. The errors of the other costing modes (comm "table" and
"replay", compute "model" and "recorded") are listed under "modes" for the same measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ("ddp", "fsdp", "tp", "pp", "dlrm")
MODES = (
    ("replay", "network"),
    ("replay", "table"),
    ("replay", "replay"),
    ("model", "network"),
    ("model", "table"),
    ("recorded", "network"),
)


def worker(script: str, steps: int, out: str) -> None:
    """Inside torchrun: run the job script unchanged, timing the steps at its zero_grad calls."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    marks: list[float] = []
    real = torch.optim.Optimizer.zero_grad

    def zero_grad(self, *a, **kw):
        if dist.is_initialized():
            dist.barrier()
        marks.append(time.perf_counter())
        return real(self, *a, **kw)

    torch.optim.Optimizer.zero_grad = zero_grad
    rank = int(os.environ.get("RANK", "0"))
    sys.path.insert(0, str(Path(script).parent))
    sys.argv = [script, "--steps", str(steps)]
    runpy.run_path(script, run_name="__main__")
    with open(f"{out}.rank{rank}.json", "w", encoding="utf-8") as f:
        json.dump([b - a for a, b in zip(marks, marks[1:])], f)


def run_job(job: str, ranks: int, steps: int, skip: int, runs: int):
    """The job's real step times: a Measurement over `runs` processes."""
    from chakra_trace.calibrate.collectives import free_port
    from chakra_trace.replay.environment import environment
    from chakra_trace.replay.measure import Measurement

    script = str(ROOT / "benchmarks" / "corpus" / "jobs" / f"{job}.py")
    got = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="predict-bench-") as tmp:
            out = os.path.join(tmp, "steps")
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
                   "--master-addr=127.0.0.1", f"--master-port={free_port()}", __file__,
                   "--worker", script, "--steps", str(steps), "--out", out]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
            per_rank = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(ranks)]
        slowest = [max(x) for x in zip(*per_rank)][skip:]
        got.append(Measurement(name=job, samples=slowest, warmup=skip, stop_reason="max_repeats", env=environment()))
    return Measurement.merge_runs(got, name=f"{job} x{ranks}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--profile", help="a profile from `chakra calibrate` (default: calibrate now)")
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--skip", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--four", action="store_true", help="also ddp recorded at 2 ranks, predicted and run at 4")
    ap.add_argument("--json")
    ap.add_argument("--replay-s", type=float, default=4.0, help="seconds of timed replay passes per job")
    ap.add_argument("--cached", action="store_true", help="reuse a kept replay timing instead of replaying afresh")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.out)
        return

    from chakra_trace.calibrate import SystemProfile, calibrate, predict

    t0 = time.perf_counter()
    if args.profile:
        prof = SystemProfile.load(args.profile)
    else:
        prof = calibrate(ranks=(2, 4), repeats=10, say=lambda m: print(m, file=sys.stderr))
    calib_s = time.perf_counter() - t0
    index = {j["name"]: j for j in json.loads((ROOT / "tests/data/corpus/index.json").read_text())["jobs"]}
    cases = [(j, index[j]["ranks"]) for j in args.jobs.split(",") if j]
    if args.four:
        cases.append(("ddp", 4))
    rows, modes = [], {f"{c}/{m}": [] for c, m in MODES}
    for job, ranks in cases:
        m = run_job(job, ranks, args.steps, args.skip, args.runs)
        measured = m.median * 1e3
        ci = [x * 1e3 for x in (m.ci95_median or m.ci95_mean or (m.median, m.median))]
        path = ROOT / "tests" / "data" / "corpus" / job
        preds = {}
        fresh = not args.cached
        for compute, comm in MODES:
            try:
                preds[(compute, comm)] = predict(
                    path, prof, ranks=ranks, compute=compute, comm=comm, replay_budget_s=args.replay_s,
                    refresh=fresh and compute == "replay",
                )  # fmt: skip
                fresh = fresh and compute != "replay"  # (one replay per job: the other modes reuse it)
            except Exception as e:  # a mode that cannot cost this job: said, not hidden
                print(f"{job} x{ranks} {compute}/{comm}: {e}", file=sys.stderr)
        for (compute, comm), p in preds.items():
            modes[f"{compute}/{comm}"].append({"job": job, "ranks": ranks, "error": p.step_ms / measured - 1})
        p = preds[MODES[0]]
        rows.append(
            {
                "job": job,
                "ranks": ranks,
                "recorded_ranks": index[job]["ranks"],
                "measured_ms": measured,
                "measured_ci_ms": ci,
                "predicted_ms": p.step_ms,
                "band_ms": p.band_ms,
                "error": p.step_ms / measured - 1,
                "samples": m.n,
                "runs": m.run_count,
                "replay": p.detail.get("replay"),
            }
        )
        print(f"{job:5} x{ranks}: measured {measured:7.2f} ms [{ci[0]:.2f}, {ci[1]:.2f}]  predicted "
              f"{p.step_ms:7.2f} ms [{p.low_ms:.2f}, {p.high_ms:.2f}]  error {rows[-1]['error']:+.1%}  "
              + "  ".join(f"{c}/{n} {q.step_ms / measured - 1:+.0%}" for (c, n), q in preds.items()))  # fmt: skip
    errs = [abs(r["error"]) for r in rows]
    result = {
        "mode": "/".join(MODES[0]),
        "jobs": rows,
        "median_abs_error": statistics.median(errs) if errs else None,
        "max_abs_error": max(errs) if errs else None,
        "modes": {
            k: {"median_abs_error": statistics.median(abs(x["error"]) for x in v) if v else None, "jobs": v}
            for k, v in modes.items()
        },
        "calibration_s": calib_s,
        "profile": {"backend": prof.backend, "spread": prof.spread, "environment": prof.environment},
    }
    print(f"median |error| {result['median_abs_error']:.1%}, max {result['max_abs_error']:.1%}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
