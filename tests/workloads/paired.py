"""The replay tests' measurement: two ways of running the same work, in one process (one per
rank under torchrun), timed alternately in short blocks.

This machine's speed drifts by tens of percent over seconds, and two processes of the same
program can differ by as much, so a comparison between separate runs measures the machine.
Here each block of A is next to a block of B in the same process, the order alternates
(ABBA) to cancel a steady drift, and a block runs its passes back to back between two
barriers (every rank starts it together; it ends when the slowest is done). Both warm up
for about a second first: a process's first tens of passes run slower.

    A = the training job's step (`fidelity.py`), B = the replay of its collected trace:
        python paired.py --model mlp --traces mlp.traces --json out.json
        torchrun --nproc-per-node 2 paired.py --model ddp --traces ddp.traces --json out.json
    A = the replay of a host trace, B = the exported benchmark script's own runtime and plan:
        python paired.py --trace t.et.json.gz --script bench.py --json out.json

The JSON holds the seconds per recorded step of every block, "a_s" and "b_s" pair by pair, and
"calls_per_block" of each.
"""

import argparse
import gc
import json
import os
import runpy
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from chakra_trace.replay import _standalone as rt  # noqa: E402
from chakra_trace.replay.job import host_traces, kineto_for  # noqa: E402
from chakra_trace.replay.operators import HostReplay  # noqa: E402


def pair(a, b, *, rounds: int, block_s: float, dist=None) -> tuple[list, list, list]:
    """Seconds per call of `a` and of `b`, block by block, and the calls per block of each."""

    def sync() -> None:
        if dist:
            dist.barrier()

    def timed(fn, n: int = 1) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t0) / n

    rt.warm_up(a, 1.0, dist)
    rt.warm_up(b, 1.0, dist)
    per = torch.tensor([min(timed(fn) for _ in range(5)) for fn in (a, b)], dtype=torch.float64)
    if dist:  # every rank runs as many passes (their collectives pair)
        dist.all_reduce(per, op=dist.ReduceOp.MAX)
    counts = [max(3, int(block_s / max(float(x), 1e-6))) for x in per.tolist()]
    out: tuple[list, list] = ([], [])
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for k in order:
            out[k].append(timed((a, b)[k], counts[k]))
    return (*out, counts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "transformer", "ddp"], help="A: this job's training step")
    ap.add_argument("--traces", help="with --model: the job's `chakra collect` folder (B: its replay)")
    ap.add_argument("--trace", help="with --script: the host trace (A: its replay)")
    ap.add_argument("--script", help="B: the benchmark script exported from --trace")
    ap.add_argument(
        "--script-first",
        action="store_true",
        help="allocate the script's tensors before the replay's (which set comes first "
        "shifts the times by 1-2%%: run both orders)",
    )
    ap.add_argument("--rounds", type=int, default=100, help="pairs of blocks")
    ap.add_argument("--block-s", type=float, default=0.05, help="about this long per block")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist, rank = None, 0
    if args.model:
        import fidelity  # the job itself, unchanged

        a = fidelity.build(args.model)  # (DDP: joins the process group the replay's collectives use)
        a_steps = 1
        if args.model == "ddp":
            dist = torch.distributed
            rank = dist.get_rank()
        trace = host_traces(args.traces)[rank]
    else:
        trace = args.trace

    def script_calls():  # the exported script's own runtime and plan, not ours
        ns = runpy.run_path(args.script, run_name="exported")
        plan = ns["PLANS"][0]
        storages = ns["make_storages"](plan, "cpu", plan.get("seed", 0))
        calls = [ns["build_call"](op, storages, "cpu") for op in plan["ops"]]
        return (lambda: ns["run"](calls)), ns["STEPS_PER_RUN"]

    if args.script and args.script_first:
        b, b_steps = script_calls()
    rep = HostReplay(trace, kineto=kineto_for(trace))
    if args.script:  # the ops alone on both sides: the script is checked to run the same plan
        if not args.script_first:
            b, b_steps = script_calls()
        a, a_steps = (lambda: rep.run_step(host_gaps=False)), rep.steps_per_run
    else:  # the replay as `chakra replay` runs it: warmed up, then calibrated
        rt.warm_up(rep.run_step, 1.0, dist)
        rep.calibrate(dist.barrier if dist else None)
        b, b_steps = rep.run_step, rep.steps_per_run
    a_s, b_s, counts = pair(a, b, rounds=args.rounds, block_s=args.block_s, dist=dist)
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "a_s": [x / a_steps for x in a_s],
                    "b_s": [x / b_steps for x in b_s],
                    "calls_per_block": counts,
                    "replayed_steps": rep.steps,
                    "coverage": rep.coverage.to_dict(),
                    "host_gaps": rep.host_gaps_info,
                },
                f,
            )
    if dist:
        dist.barrier()
        del a  # the DDP reducer holds the group: let it go now, not at exit (examples/train_ddp.py)
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
