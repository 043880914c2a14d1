#!/usr/bin/env python3
"""Holistic Trace Analysis's side of `device_bench.py`: every HTA analysis on one folder of rank
traces, timed, with its figures or its error. Runs under a Python that has HTA installed (not
ours: HTA is no dependency of chakra-trace), e.g.

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0 "pandas<3"
    /tmp/hta/bin/python benchmarks/hta_side.py TRACE_DIR --json out.json [--op aten::linear]

HTA is run with ``include_last_profiler_step=True``: by default it drops the kernels of the last
profiler step, which ours keeps, and the figures would not describe the same kernels.
The analyses that take ``ranks`` (HTA's default: rank 0 only) are given every rank, as ours do.
Figures are the DataFrames as records (the first `--rows` rows), so that `device_bench.py` can
put them beside ours.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback


def records(x, rows: int):
    import pandas as pd

    if isinstance(x, pd.DataFrame):
        df = x.reset_index()
        return {"rows": int(len(df)), "head": json.loads(df.head(rows).to_json(orient="records"))}
    if isinstance(x, dict):
        return {str(k): records(v, rows) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [records(v, rows) for v in x]
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return repr(x)[:200]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir")
    ap.add_argument("--json", required=True)
    ap.add_argument("--op", default=None, help="operator for get_frequent_cuda_kernel_sequences")
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--only", default=None, help="comma-separated analyses")
    args = ap.parse_args()

    import resource

    from hta.trace_analysis import TraceAnalysis

    out: dict = {"trace_dir": os.path.abspath(args.trace_dir), "analyses": {}}
    t0 = time.perf_counter()
    try:
        ta = TraceAnalysis(trace_dir=args.trace_dir, include_last_profiler_step=True)
    except Exception as e:  # HTA's own failure is a result here
        out["load"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400], "s": time.perf_counter() - t0}
        json.dump(out, open(args.json, "w"), indent=1)
        return
    out["load"] = {"ok": True, "s": time.perf_counter() - t0}
    ranks = sorted(ta.t.traces.keys()) if hasattr(ta, "t") else [0]
    seq_dir = tempfile.mkdtemp(prefix="hta_seq_")
    runs = {
        "temporal": lambda: ta.get_temporal_breakdown(visualize=False),
        "idle": lambda: ta.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True),
        "kernels": lambda: ta.get_gpu_kernel_breakdown(visualize=False),
        "overlap": lambda: ta.get_comm_comp_overlap(visualize=False),
        "launches": lambda: ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False),
        "op_kernels": lambda: ta.get_aten_op_kernels_and_delay(ranks=ranks),
        "queue_length": lambda: ta.get_queue_length_summary(ranks=ranks),
        "memory_bw": lambda: ta.get_memory_bw_summary(ranks=ranks),
        "stragglers": lambda: ta.get_potential_stragglers(),
        "sequences": lambda: ta.get_frequent_cuda_kernel_sequences(
            operator_name=args.op or "aten::linear", output_dir=seq_dir, rank=ranks[0]
        ),
        "critical_path": lambda: ta.critical_path_analysis(rank=ranks[0], annotation="ProfilerStep", instance_id=None),
    }
    only = set(args.only.split(",")) if args.only else None
    for name, fn in runs.items():
        if only and name not in only:
            continue
        t = time.perf_counter()
        try:
            got = fn()
            if name == "critical_path":
                cp, ok = got
                got = {"ok": ok, "critical_path_nodes": len(getattr(cp, "critical_path_nodes", []) or [])}
            out["analyses"][name] = {"ok": True, "s": time.perf_counter() - t, "result": records(got, args.rows)}
        except Exception as e:
            out["analyses"][name] = {
                "ok": False,
                "s": time.perf_counter() - t,
                "error": f"{type(e).__name__}: {e}"[:400],
                "where": traceback.format_exc().strip().splitlines()[-3][:300],
            }
    from device_bench import peak_mb  # beside this script (stdlib only at import)

    out["max_rss_mb"] = peak_mb()
    out["children_max_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
