"""Time a corpus job's training step and the replay of its trace side by side, in the job's own
process (one per rank under torchrun), as `paired.py` does for the fidelity jobs.

The job script runs unchanged (`runpy`) for `--steps` steps; every corpus job starts a step with
`optimizer.zero_grad()`, so that call marks the step boundaries: at each one the step just ended
is a sample of A (the original), then one pass of the replay (B, the job's recorded steps,
per step) runs right there, both between barriers (ranks in lockstep; the slowest rank ends a
sample). The first `--skip` steps warm both up and are dropped. The replay (one, calibrated
after its warm-up: `replay/host_gaps.py`) runs twice per step boundary, in alternating order:
B runs its ops alone, C also spends the calibrated host time the ops lack (the replay's default).

    torchrun --nproc-per-node 2 paired_job.py --script benchmarks/corpus/jobs/ddp.py \\
        --traces tests/data/corpus/ddp --steps 80 --json out.json
"""

import argparse
import json
import os
import runpy
import sys
import time

import torch

from chakra_trace.replay import _standalone as rt
from chakra_trace.replay.job import host_traces, kineto_for
from chakra_trace.replay.operators import HostReplay


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True, help="the job (benchmarks/corpus/jobs/<job>.py)")
    ap.add_argument("--traces", required=True, help="its `chakra collect` folder")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--skip", type=int, default=10, help="first steps dropped (warm-up)")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist = torch.distributed
    state = {"rep": None, "t": None, "a": [], "b": [], "c": [], "n": 0}

    def sync() -> float:
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
        return time.perf_counter()

    real = torch.optim.Optimizer.zero_grad

    def zero_grad(self, *a, **kw):
        now = sync()
        if state["rep"] is None:  # (the job has joined its process group by now)
            rank = dist.get_rank() if dist.is_initialized() else 0
            trace = host_traces(args.traces)[rank]
            state["rep"] = rep = HostReplay(trace, kineto=kineto_for(trace), host_gaps=True)
            state["rank"] = rank
            rt.warm_up(rep.run_step, 1.0, dist if dist.is_initialized() else None)
            rep.calibrate(sync)
        elif state["t"] is not None:
            state["n"] += 1
            if state["n"] > args.skip:
                state["a"].append(now - state["t"])
            rep = state["rep"]
            order = [("b", False), ("c", True)]
            for key, gaps in order if state["n"] % 2 else order[::-1]:
                t0 = sync()
                rep.run_step(host_gaps=gaps)
                t1 = sync()
                if state["n"] > args.skip:
                    state[key].append((t1 - t0) / rep.steps_per_run)
        state["t"] = sync()
        return real(self, *a, **kw)

    torch.optim.Optimizer.zero_grad = zero_grad
    sys.argv = [args.script, "--steps", str(args.steps)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    runpy.run_path(args.script, run_name="__main__")
    if state.get("rank", 0) == 0:
        rep = state["rep"]
        with open(args.json, "w") as f:
            json.dump(
                {
                    "a_s": state["a"],
                    "b_s": state["b"],
                    "c_s": state["c"],
                    "host_gaps": rep.host_gaps_info,
                    "replayed_steps": rep.steps,
                    "coverage": rep.coverage.to_dict(),
                },
                f,
            )


if __name__ == "__main__":
    main()
