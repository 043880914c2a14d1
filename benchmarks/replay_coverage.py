#!/usr/bin/env python3
"""Replay coverage on every sample trace: the share of schema'd top-level ops replayed, with
each trace's collectives on a real process group (one process per rank on 127.0.0.1).

Traces come from ../shared/traces (beside the project). GPU traces replay on the CPU. The
two ResNet traces replay one profiler step each (a CPU pass over their convolutions is slow).
Timing is not the point here (one pass); `tests/test_replay_fidelity.py` measures time.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "traces")
CASES = [
    ("pytorch-cpu/mlp_rank0.et.json.gz", {}),
    ("pytorch-cpu/transformer_rank0.et.json.gz", {}),
    (["pytorch-cpu/ddp_rank0.et.json.gz", "pytorch-cpu/ddp_rank1.et.json.gz"], {}),
    ("param/linear_et.json.gz", {}),
    ("param/resnet_et.json.gz", {"steps": [6]}),
    ("param/resnet_1gpu_et_1.0.3.json.gz", {"steps": [4]}),
    ("chakra/allgather_host_1.0.2.json.gz", {}),
]


def main() -> int:
    from chakra_trace.replay.job import replay_host

    warnings.simplefilter("ignore")
    if not os.path.isdir(SHARED):
        print(f"no sample traces at {SHARED}", file=sys.stderr)
        return 2
    print(f"{'trace':<48} {'ranks':>5} {'replayed':>10} {'total':>7} {'share':>7} {'s':>6}")
    for case, kw in CASES:
        paths = [os.path.join(SHARED, c) for c in case] if isinstance(case, list) else os.path.join(SHARED, case)
        t = time.perf_counter()
        res = replay_host(paths, warmup=0, min_repeats=1, max_repeats=1, budget_s=0.1, **kw)
        done = sum(c["replayed"] for c in res.coverage.values())
        total = sum(c["total"] for c in res.coverage.values())
        label = " + ".join(case) if isinstance(case, list) else case
        print(
            f"{label[:48]:<48} {res.world_size:>5} {done:>10,} {total:>7,} {done / total:>7.1%} "
            f"{time.perf_counter() - t:>6.1f}"
        )
        for c in res.coverage.values():
            for why, n in c["reasons"].items():
                print(f"    not replayed ({n}): {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
