#!/usr/bin/env python
"""Representative subsets of a fleet (`chakra select`): how well k jobs predict the whole fleet's
simulated time on a new system, against random subsets of the same size.

    python benchmarks/select_bench.py [--jobs 1000] [--big 10000] [--json OUT] [--plot PNG]

1. A synthetic fleet (`synthesize.fleet.synthetic_fleet`, seeded): data-parallel, FSDP-like,
   mixture-of-experts, pipeline and single-collective jobs, and, with torch installed, plans of
   three small GPT models captured here (`chakra capture`) and parallelized on 64 ranks.
2. Each job's features (`analyze.select.job_features`) and its simulated step on two 64-NPU
   systems (`simulate_on`: torus-8x8 and dgx-8x8; smaller jobs scaled out data-parallel). The
   fleet's total step time on each system is the aggregate to predict.
3. For k = 1..50: the error of the total predicted from k representatives (k-medoids averaged
   over 5 seeds; facility location), with the ratio and the count estimator, against random
   k-subsets (mean of 50 draws), plain and with every job assigned to its nearest drawn one.
4. Selection times at N = 1,000 and N = 10,000 (features of a 10,000-job fleet, not simulated).
5. The recorded corpus (tests/data/corpus): features, a selection of 3 and its coverage.

Writes the figures as JSON and the k-vs-error curve as a PNG (matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:
    import chakra_trace  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from chakra_trace.analyze.select import FleetFeatures, coverage, coverage_curve, find_jobs, job_features, select
from chakra_trace.io.workload import Workload
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.synthesize.fleet import synthetic_fleet

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
SYSTEMS = ("torus-8x8", "dgx-8x8")
#: small GPT models to capture for the `parallel` family: (config, batch, seq)
MASTERS = [
    ({"preset": "tiny"}, 8, 16),
    ({"preset": "tiny", "layers": 4, "hidden": 128, "ffn": 344}, 8, 64),
    ({"preset": "tiny", "hidden": 256, "heads": 8, "kv_heads": 4, "ffn": 688, "vocab": 4096}, 4, 128),
]
KEY_KS = (5, 10, 20)


def _capture() -> tuple[list, float]:
    try:
        from chakra_trace.capture import capture, load_build
    except ImportError:
        return [], 0.0
    t = time.perf_counter()
    try:
        build = load_build(f"{ROOT / 'examples' / 'models' / 'gpt.py'}:build")
        masters = [capture(build, cfg, batch=b, seq=s).trace for cfg, b, s in MASTERS]
    except ImportError:  # no torch
        return [], 0.0
    return masters, time.perf_counter() - t


def _simulate(w: Workload) -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [simulate_on(w, s).step_ns / 1e6 for s in SYSTEMS]  # ms


def _fleet(n: int, seed: int, masters: list) -> dict:
    """Generate, featurize and simulate job by job (one workload held at a time)."""
    t_gen = t_feat = t_sim = 0.0
    feats, metric, jobs = [], [], []
    it = synthetic_fleet(n, seed, masters)
    while True:
        t = time.perf_counter()
        job = next(it, None)
        t_gen += time.perf_counter() - t
        if job is None:
            break
        t = time.perf_counter()
        feats.append(job_features(job.workload, job.name))
        t_feat += time.perf_counter() - t
        t = time.perf_counter()
        metric.append(_simulate(job.workload))
        t_sim += time.perf_counter() - t
        jobs.append({**job.to_dict(), "step_ms": dict(zip(SYSTEMS, metric[-1]))})
    return {
        "features": FleetFeatures.from_jobs(feats),
        "metric": np.array(metric),
        "jobs": jobs,
        "seconds": {"generate": t_gen, "features": t_feat, "simulate": t_sim},
    }


def _selection_times(fleet: FleetFeatures, ks=(10, 50), repeat: int = 3) -> dict:
    """Seconds per selection, the least of `repeat` runs (a shared machine is noisy)."""
    out = {}
    for method in ("kmedoids", "facility"):
        for k in ks:
            best = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                sel = select(fleet, k, method)
                best = min(best, time.perf_counter() - t)
            out[f"{method}_k{k}_s"] = best
            out[f"{method}_k{k}_objective"] = sel.objective
    return out


def _key_points(fleet: FleetFeatures, metric: np.ndarray, estimator: str) -> dict:
    """At k = 5, 10, 20: each method's signed error (predicted / true - 1) per system and of the
    predicted dgx / torus ratio of totals (what "is B faster than A for this fleet" rests on)."""
    out: dict = {}
    for method in ("kmedoids", "facility"):
        for k in KEY_KS:
            cov = coverage(select(fleet, k, method), metric, metric_names=list(SYSTEMS), estimator=estimator)
            ratio_pred = cov.predicted[1] / cov.predicted[0]
            ratio_true = cov.true[1] / cov.true[0]
            out[f"{method}_k{k}"] = {
                **{s: float(p / t - 1) for s, p, t in zip(SYSTEMS, cov.predicted, cov.true)},
                "dgx_over_torus": float(ratio_pred / ratio_true - 1),
            }
    return out


def _corpus() -> dict:
    jobs = find_jobs([CORPUS])
    feats, metric = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in jobs:
            w = Workload.open(j.path)
            feats.append(job_features(w, j.name))
            metric.append(_simulate(w))
    fleet = FleetFeatures.from_jobs(feats)
    m = np.array(metric)
    out: dict = {"jobs": [{**f.to_dict(), "step_ms": dict(zip(SYSTEMS, row))} for f, row in zip(feats, m.tolist())]}
    for method in ("kmedoids", "facility"):
        sel = select(fleet, 3, method)
        out[method] = {
            "selection": sel.to_dict(),
            "coverage_ratio": coverage(sel, m, metric_names=list(SYSTEMS)).to_dict(),
            "coverage_count": coverage(sel, m, metric_names=list(SYSTEMS), estimator="count").to_dict(),
        }
    return out


def _plot(curves: dict, ks: list[int], n: int, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    styles = {
        "kmedoids": ("k-medoids (mean of 5 seeds)", "#4c72b0", "-"),
        "facility": ("facility location", "#dd8452", "-"),
        "random+assign": ("random k, nearest-job weights", "#55a868", "--"),
        "random": ("random k (mean of 50 draws)", "#8c8c8c", ":"),
    }
    axes = fig.subplots(1, 2, sharey=True)
    for ax, est in zip(axes, ("ratio", "count")):
        curve = curves[est]
        for name, (label, color, ls) in styles.items():
            err = np.asarray(curve["errors"][name]).mean(axis=1) * 100  # mean over the two systems
            ax.plot(ks, err, ls, color=color, label=label, lw=1.8)
        ax.set_yscale("log")
        ax.set_xlabel("k (jobs simulated)")
        ax.set_title(f"{est} estimator")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("error of the fleet's total step time (%)")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"{n} synthetic jobs on {' and '.join(SYSTEMS)}: the fleet total predicted from k representatives")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs in the simulated fleet")
    ap.add_argument("--big", type=int, default=10000, help="jobs in the fleet timed for selection only (0: skip)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmax", type=int, default=50)
    ap.add_argument("--no-masters", action="store_true", help="no captured models (no torch needed)")
    ap.add_argument("--json", metavar="OUT", default=str(ROOT / "benchmarks" / "results" / "select_bench.json"))
    ap.add_argument("--plot", metavar="PNG", default=str(ROOT / "docs" / "images" / "select_curve.png"))
    args = ap.parse_args(argv)

    masters, t_capture = ([], 0.0) if args.no_masters else _capture()
    fl = _fleet(args.jobs, args.seed, masters)
    fleet, metric = fl["features"], fl["metric"]
    print(
        f"fleet of {args.jobs} ({len(masters)} captured masters, {t_capture:.1f} s): generated in "
        f"{fl['seconds']['generate']:.1f} s, features {fl['seconds']['features']:.1f} s, "
        f"simulated on {len(SYSTEMS)} systems in {fl['seconds']['simulate']:.1f} s",
        flush=True,
    )
    ks = list(range(1, args.kmax + 1))
    curves = {}
    for est in ("ratio", "count"):
        t = time.perf_counter()
        curve = coverage_curve(
            fleet, metric, ks, metric_names=list(SYSTEMS), estimator=est, trials=50, repeats=5, seed=args.seed
        )
        curves[est] = {**curve.to_dict(), "seconds": time.perf_counter() - t}
    key = {est: _key_points(fleet, metric, est) for est in ("ratio", "count")}
    bands = {  # one fleet's curve is noisy from k to k: its mean over ranges of k reads steadier
        est: {
            f"k{lo}-{hi}": {
                m: float(np.mean(np.asarray(curves[est]["errors"][m])[lo - 1 : hi])) for m in curves[est]["errors"]
            }
            for lo, hi in ((1, 4), (5, 15), (16, 30), (31, args.kmax))
            if hi <= args.kmax
        }
        for est in ("ratio", "count")
    }
    print("mean error over ranges of k:", json.dumps(bands, indent=1), flush=True)
    for est in ("ratio", "count"):
        for k in KEY_KS:
            row = {m: 100 * float(np.mean(curves[est]["errors"][m][k - 1])) for m in curves[est]["errors"]}
            print(f"{est:5s} k={k:2d}: " + ", ".join(f"{m} {v:.2f}%" for m, v in row.items()))

    timing = {f"n{args.jobs}": _selection_times(fleet)}
    big = {}
    if args.big:
        t = time.perf_counter()
        big_fleet = FleetFeatures.from_jobs(job_features(j.workload, j.name) for j in synthetic_fleet(args.big, 1))
        big["generate_and_features_s"] = time.perf_counter() - t
        timing[f"n{args.big}"] = _selection_times(big_fleet)
    print("selection times:", json.dumps(timing, indent=1), flush=True)
    corpus = _corpus()

    family: dict[str, int] = {}
    for j in fl["jobs"]:
        family[j["family"]] = family.get(j["family"], 0) + 1
    out = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "fleet": {
            "jobs": args.jobs,
            "seed": args.seed,
            "families": family,
            "masters_captured": len(masters),
            "capture_s": t_capture,
            **{f"{k}_s": v for k, v in fl["seconds"].items()},
            "systems": list(SYSTEMS),
            "total_step_ms": dict(zip(SYSTEMS, metric.sum(axis=0).tolist())),
        },
        "curves": curves,
        "key_points": key,
        "bands": bands,
        "selection_times": timing,
        "big_fleet": big,
        "corpus": corpus,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    try:
        _plot(curves, ks, args.jobs, Path(args.plot))
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
    return out


if __name__ == "__main__":
    main()
