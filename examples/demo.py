"""The whole story, end to end: train a small model on 2 ranks, record it, convert it to
Chakra, validate it, analyze the step, simulate the same job on two 64-NPU systems that do
not exist here, and write one HTML report.

Run from the project root:  .venv/bin/python examples/demo.py   (writes into ./out/demo)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

from chakra_trace.replay.launch import free_port

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "out" / "demo"
CHAKRA = [sys.executable, "-m", "chakra_trace.cli"]
SYSTEMS = ("torus-8x8", "dgx-8x8")


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def run(*args: str, check: bool = True) -> int:
    print("$ chakra " + " ".join(str(a).replace(str(ROOT) + "/", "") for a in args), flush=True)
    rc = subprocess.run([*CHAKRA, *map(str, args)], cwd=ROOT).returncode
    if check and rc != 0:
        sys.exit(f"demo: `chakra {args[0]}` failed with exit status {rc}")
    return rc


def main() -> None:
    t0 = time.perf_counter()
    try:
        import torch  # noqa: F401  (the training job needs it; chakra_trace itself does not)
    except ImportError:
        sys.exit("demo: PyTorch is needed to train the demo job: pip install torch==2.13.0")
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    traces, job, report = OUT / "traces", OUT / "job", OUT / "report.html"

    step("1. Train a small model for 6 steps on 2 ranks (gloo on 127.0.0.1) and record steps 2-3")
    run(
        "collect",
        "-o",
        traces,
        "--num-threads",
        "1",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        free_port(),
        ROOT / "examples" / "train_ddp.py",
        "--steps",
        "6",
    )

    step("2. Convert every rank's PyTorch host trace + Kineto timing to Chakra")
    run("convert", "pytorch", traces, "-o", job)

    step("3. Validate: each rank, and collectives matched across ranks")
    run("validate", job)

    step("4. Analyze the recorded step: breakdown, the job's critical path, imbalance, the devices")
    run("analyze", "breakdown", job)
    run("analyze", "critical-path", job, "--top", "5")
    run("analyze", "imbalance", job, check=False)  # exit 1 would mean imbalanced collectives
    run("analyze", "overlap", traces)  # from the Kineto traces: gloo's threads against the host calls

    step(f"5. Simulate the same job on {' and '.join(SYSTEMS)} (64 NPUs, scaled out data-parallel)")
    from chakra_trace import Workload
    from chakra_trace.analyze import Analysis
    from chakra_trace.simulate import SimulationWarning
    from chakra_trace.simulate.presets import preset, simulate_on

    w = Workload.open(job)
    recorded = Analysis(w).critical_path()
    steps = w.traces[0].recorded_steps or 1
    print(
        f"recorded: {recorded.step_ns / 1e6:,.3f} ms for the whole recording ({steps} steps, "
        f"{recorded.step_ns / steps / 1e6:,.3f} ms per step) on 2 ranks"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SimulationWarning)
        baseline, ideal = simulate_on(w, "recorded"), simulate_on(w, "ideal")
    print(
        f"{'recorded':>10}: the simulator replaying the recording (every node at its recorded time): recording "
        f"{baseline.recording_ns / 1e6:,.3f} ms ({(baseline.recording_ns / recorded.step_ns - 1) * 100:+.2f}% of the recording)\n"
        f"{'ideal':>10}: the same job with free communication: recording {ideal.recording_ns / 1e6:,.3f} ms (a lower bound)"
    )
    assert abs(baseline.step_ns / recorded.step_ns - 1) <= 0.01 and ideal.step_ns <= recorded.step_ns + 1000
    for name in SYSTEMS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SimulationWarning)
            res = simulate_on(w, name)
        path = Analysis(w, res).critical_path()
        assert path.length_ns == res.step_ns, "the job critical path must account for the whole simulated step"
        print(
            f"{name:>10}: {preset(name).description}\n{'':>12}recording {res.recording_ns / 1e6:,.3f} ms "
            f"({res.per_step_ns / 1e6 if res.per_step_ns else 0:,.3f} ms per step), exposed comm "
            f"{res.exposed_comm_ns.max() / 1e6:,.3f} ms, critical path {path.length_ns / 1e6:,.3f} ms through "
            f"{len(path.segments)} ops (simulated in {res.wall_s:.2f} s)"
        )

    step("6. Write the report: one self-contained HTML file")
    run(
        "report",
        job,
        *[a for s in SYSTEMS for a in ("--simulate", s)],
        "--device",
        "cpu",
        "--title",
        "2-rank DDP MLP: recorded and simulated",
        "-o",
        report,
    )

    print(
        f"\nDone in {time.perf_counter() - t0:.0f} s. Open the report in a browser (it works offline):\n"
        f"  {report}\nOutputs are in {OUT.relative_to(ROOT)}/; open the timelines in https://ui.perfetto.dev "
        f"with `chakra timeline {job.relative_to(ROOT)} -o timeline.json`."
    )


if __name__ == "__main__":
    main()
