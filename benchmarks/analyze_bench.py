#!/usr/bin/env python3
"""Analysis and report cost, measured against a step of the pipeline in the same run.

Recorded: the real DDP rank-0 recording repeated into one long trace (the convert benchmark's
generator, 300,000 host nodes -> about 146,000 Chakra nodes); each analysis is timed and set
against the conversion that produced the trace. Simulated: the 2-rank DDP recording scaled
out to 1,024 NPUs on the dgx-8x128 preset (about 290,000 node runs); each analysis of
the result is set against the simulation. Each analysis is the median of 3-9 runs by the
project's measurement harness (`replay.measure`). Ratios are what to compare: these
machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

from chakra_trace import Workload
from chakra_trace.analyze import Analysis
from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.document import render_html
from chakra_trace.replay.measure import measure
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.visualize.report import build_report
from chakra_trace.visualize.timeline import timeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert_bench  # noqa: E402  (its generator)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def measured(fn) -> float:
    """Median seconds of `fn` by the project's harness (a short budget: these are big steps)."""
    return measure(fn, warmup=1, min_repeats=3, max_repeats=9, target_rel_ci=0.05, budget_s=10).median


def recorded(nodes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        et, kin, n = convert_bench.generate(tmp, nodes)
        (trace, _), base = timed(lambda: convert_pytorch(et, kin, rank=0))
    w = Workload({0: trace})
    doc = build_report(w, device="h100")
    steps = {
        "breakdown": lambda: Analysis(w).breakdown(),
        "critical path (rank)": lambda: Analysis(w).critical_path(0),
        "job critical path": lambda: Analysis(w).critical_path(),
        "top ops (total + exposed)": lambda: Analysis(w).top_ops(by="exposed"),
        "collective stats + imbalance": lambda: (lambda x: (x.collective_stats(), x.imbalance()))(Analysis(w)),
        "roofline": lambda: Analysis(w).roofline("h100"),
        "diff (trace vs itself)": lambda: Analysis(w).diff(w),
        "timeline (all events)": lambda: timeline(w),
        "report document": lambda: build_report(w, device="h100"),
        "report HTML (render_html)": lambda: render_html(doc),
    }
    return {
        "what": f"recorded, {len(trace):,} nodes ({n:,} host nodes)",
        "nodes": len(trace),
        "host_nodes": n,
        "path_ops": len(Analysis(w).critical_path()),
        "collectives": len(Analysis(w).collective_stats().records),
        "baseline": "convert_pytorch",
        "baseline_s": base,
        "steps": {k: measured(f) for k, f in steps.items()},
    }


def simulated(npus_preset: str) -> dict:
    data = convert_bench.DATA
    w = Workload(
        {
            r: convert_pytorch(
                os.path.join(data, f"ddp_rank{r}.et.json.gz"),
                os.path.join(data, "kineto", f"ddp_rank{r}.kineto.json.gz"),
                rank=r,
            )[0]
            for r in (0, 1)
        }
    )
    res, base = timed(lambda: simulate_on(w, npus_preset))
    big = Workload(dict(res.traces))
    a = Analysis(big, res)
    runs = sum(int((e >= 0).sum()) for _s, e, _k in res.nodes.values())
    doc = build_report(w, simulations={npus_preset: res})
    steps = {
        "breakdown": lambda: Analysis(big, res).breakdown(),
        "job critical path": lambda: Analysis(big, res).critical_path(),
        "top ops (total + exposed)": lambda: Analysis(big, res).top_ops(by="exposed"),
        "timeline (60,000 longest)": lambda: timeline(big, res, max_events=60_000),
        "report document": lambda: build_report(w, simulations={npus_preset: res}),
        "report HTML (render_html)": lambda: render_html(doc),
    }
    out = {
        "what": f"simulated on {npus_preset}: {res.finish_ns.size:,} NPUs, {runs:,} node runs",
        "preset": npus_preset,
        "npus": int(res.finish_ns.size),
        "node_runs": runs,
        "baseline": "simulate",
        "baseline_s": base,
        "steps": {k: measured(f) for k, f in steps.items()},
    }
    path = a.critical_path()
    out["critical_path_equals_step"] = path.length_ns == res.step_ns and path.wait_ns == 0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=300_000, help="host nodes of the recorded case")
    ap.add_argument("--preset", default="dgx-8x128", help="system of the simulated case")
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    results = [recorded(args.nodes), simulated(args.preset)]
    for r in results:
        print(f"\n{r['what']}\n  baseline {r['baseline']}: {r['baseline_s']:.2f} s")
        for k, s in r["steps"].items():
            print(f"  {k:<34} {s:7.3f} s  {s / r['baseline_s']:6.2f}x the baseline")
        if "critical_path_equals_step" in r:
            print(f"  job critical path length == simulated step, no wait: {r['critical_path_equals_step']}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
