#!/usr/bin/env python3
"""Replay coverage on every sample trace: the share of schema'd top-level ops replayed, with
each trace's collectives on a real process group (one process per rank on 127.0.0.1).

    python benchmarks/replay_coverage.py [--traces DIR] [--corpus DIR] [--json OUT]

Traces come from ../shared/traces (beside the project; --traces elsewhere) and every job of the
corpus of parallel jobs, tests/data/corpus (--corpus elsewhere). GPU traces replay on the CPU. The two ResNet traces replay one profiler step each (a CPU pass over their
convolutions is slow). Timing is not the point here (one pass); `tests/test_replay_fidelity.py`
measures time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from chakra_trace.replay.job import replay_host

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "traces")
CORPUS = os.path.join(ROOT, "tests", "data", "corpus")
# trace file(s) under the traces folder, replay_host's options, what the README calls the trace
CASES = [
    ("pytorch-cpu/mlp_rank0.et.json.gz", {}, "mlp"),
    ("pytorch-cpu/transformer_rank0.et.json.gz", {}, "transformer"),
    (
        ["pytorch-cpu/ddp_rank0.et.json.gz", "pytorch-cpu/ddp_rank1.et.json.gz"],
        {},
        "DDP, 2 ranks, with its gloo collectives",
    ),
    ("param/linear_et.json.gz", {}, "PARAM linear (schema 1.0.1, GPU, replayed on CPU)"),
    ("param/resnet_et.json.gz", {"steps": [6]}, "PARAM ResNet, one step"),
    ("param/resnet_1gpu_et_1.0.3.json.gz", {"steps": [4]}, "PARAM ResNet 1.0.3, one step"),
    (
        "chakra/allgather_host_1.0.2.json.gz",
        {},
        "all-gather (1.0.2, a 2-rank NCCL job, replayed SPMD on 2 gloo ranks)",
    ),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=SHARED, help="folder of the sample traces (default ../shared/traces)")
    ap.add_argument("--corpus", default=CORPUS, help="folder of the corpus jobs (default tests/data/corpus)")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if not os.path.isdir(args.traces):
        print(f"no sample traces at {args.traces}", file=sys.stderr)
        return 2
    cases = [(c if isinstance(c, list) else [c], args.traces, kw, label) for c, kw, label in CASES]
    index = os.path.join(args.corpus, "index.json")
    if os.path.exists(index):
        with open(index) as f:
            for job in json.load(f)["jobs"]:
                label = f"corpus {job['name']}, {job['ranks']} rank{'s' if job['ranks'] > 1 else ''}"
                cases.append(([job["name"]], args.corpus, {}, label))
    else:
        print(f"no corpus at {args.corpus}: its jobs are left out", file=sys.stderr)
    rows = []
    print(f"{'trace':<48} {'ranks':>5} {'replayed':>10} {'total':>7} {'share':>7} {'s':>6}")
    for files, folder, kw, label in cases:
        paths = [os.path.join(folder, c) for c in files]
        t = time.perf_counter()
        res = replay_host(
            paths if len(paths) > 1 else paths[0],
            warmup=0,
            warmup_s=0,
            min_repeats=1,
            max_repeats=1,
            budget_s=0.1,
            host_gaps=False,  # (no timing here: no calibration passes)
            **kw,
        )
        seconds = time.perf_counter() - t
        done = sum(c["replayed"] for c in res.coverage.values())
        total = sum(c["total"] for c in res.coverage.values())
        reasons: dict[str, int] = {}
        for c in res.coverage.values():
            for why, n in c["reasons"].items():
                reasons[why] = reasons.get(why, 0) + n
        rows.append(
            {
                "trace": label,
                "files": files,
                "share": done / total if total else 1.0,
                "ranks": res.world_size,
                "replayed": done,
                "total": total,
                "seconds": seconds,
                "not_replayed": reasons,
            }
        )
        print(
            f"{' + '.join(files)[:48]:<48} {res.world_size:>5} {done:>10,} {total:>7,} {done / total:>7.1%} {seconds:>6.1f}"
        )
        for why, n in reasons.items():
            print(f"    not replayed ({n}): {why}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cases": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
