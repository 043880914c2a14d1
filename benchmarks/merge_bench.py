#!/usr/bin/env python
"""Merge/split benchmark: a whole job into one `.et` and back, against writing and reading its
per-rank files, on the largest job we have: the corpus DDP recording scaled out data-parallel.

    python benchmarks/merge_bench.py [--ranks 1024] [--job ddp] [--json OUT]

Measured in the same run (shared machines are noisy: compare the ratios):

  (a) `Workload.save` of the per-rank files        (b) `Workload.open` of them (identical files
                                                       are read once, as always)
  (c) `merge` in memory, then `write_trace`        (d) `read_trace` of the merged file, then
                                                       `split` in memory
  (e) every rank file `split` writes back is compared with (a)'s, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

try:
    import chakra_trace  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.io.merge import merge, split
from chakra_trace.io.workload import Workload
from chakra_trace.synthesize.scale import data_parallel

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus"


def _timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default="ddp", help="corpus job to scale out (tests/data/corpus/JOB)")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    args = ap.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = data_parallel(Workload.open(CORPUS / args.job), args.ranks)
    nodes = sum(len(t) for t in w.traces.values())
    with tempfile.TemporaryDirectory(prefix="chakra-merge-bench-") as d:
        d = Path(d)
        (d / "a").mkdir()
        (d / "b").mkdir()
        files, save_s = _timed(lambda: w.save(d / "a" / "job"))
        _, open_s = _timed(lambda: Workload.open(d / "a" / "job"))
        merged, merge_s = _timed(lambda: merge(w))
        _, write_s = _timed(lambda: write_trace(merged, d / "job.et"))
        trace, read_s = _timed(lambda: read_trace(d / "job.et"))
        back, split_s = _timed(lambda: split(trace))
        back_files = back.save(d / "b" / "job")
        identical = all(p.read_bytes() == q.read_bytes() for p, q in zip(files, back_files))
        merged_bytes = (d / "job.et").stat().st_size
        rank_bytes = sum(p.stat().st_size for p in files)
    res = {
        "job": f"corpus/{args.job} scaled to {args.ranks} ranks",
        "ranks": args.ranks,
        "nodes": nodes,
        "rank_files_bytes": rank_bytes,
        "merged_file_bytes": merged_bytes,
        "save_s": round(save_s, 3),
        "open_s": round(open_s, 3),
        "merge_s": round(merge_s, 3),
        "write_merged_s": round(write_s, 3),
        "read_merged_s": round(read_s, 3),
        "split_s": round(split_s, 3),
        "merge_nodes_per_s": round(nodes / merge_s),
        "split_nodes_per_s": round(nodes / split_s),
        "merge_and_write_vs_save": round((merge_s + write_s) / save_s, 2),
        "read_and_split_vs_open": round((read_s + split_s) / open_s, 2),
        "byte_identical": identical,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    for k, v in res.items():
        print(f"{k:>26}: {v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k:>26}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    if not identical:
        raise SystemExit("split(merge(job)) is not byte-identical to the job's files")
    return res


if __name__ == "__main__":
    main()
