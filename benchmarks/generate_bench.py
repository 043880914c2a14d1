#!/usr/bin/env python
"""The learned trace generator on held-out jobs, against the i.i.d. baselines (`chakra generate`).

    python benchmarks/generate_bench.py [--json benchmarks/results/generate_bench.json] [--no-public]

One model is fitted on every training job below, then every held-out job is sampled like its
nearest training job (`synthesize.generate.condition_for`) by the hierarchical generator and by
the two baselines, and compared (distribution distances, graph shape, simulated step time on
`ring-8` and `dgx-8x8`, novelty):

- **recorded corpus, held-out steps** (`tests/data/corpus`, CPU/gloo): each job's first recorded
  step is a training job, its second step held out. Beside the generators, ``copy`` is the
  training step itself judged on the held-out step: the recording's own step-to-step noise, a
  floor no generator fitted on one step can beat;
- **captured GPT family, unseen layer counts** (`examples/models/gpt.py` "tiny" preset captured
  with `chakra capture`, parallelized DP 2 (DDP), TP 2, FSDP 2 and PP 2 (1F1B), compute at an
  H100's roofline x 0.5): trained at 2 and 4 layers (PP: 4), held out at 6 and 8, and one
  held-out batch (4, trained at 2);
- training only: the public traces in ../shared/traces when present (the PyTorch CPU MLP,
  transformer and DDP pairs; Chakra's ResNet-50 `.et`), so the model's vocabulary is not only
  the held-out families' (`--no-public` leaves them out).

Also measured: capture, fit, per-sample and evaluation wall times, and the model file's size.
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

import numpy as np

from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.io.et import read_trace
from chakra_trace.io.workload import Workload
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.synthesize.generate import evaluate, fit, sample_detailed, split_steps, write_model
from chakra_trace.synthesize.parallel import Plan, parallelize
from chakra_trace.synthesize.transforms import on_device

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
SHARED = ROOT.parent / "shared" / "traces"
SYSTEMS = ("ring-8", "dgx-8x8")
PLANS = {"dp2": Plan(dp=2), "tp2": Plan(tp=2), "fsdp2": Plan(dp=2, zero=3), "pp2": Plan(pp=2)}
TRAIN_LAYERS = {"dp2": (2, 4), "tp2": (2, 4), "fsdp2": (2, 4), "pp2": (4,)}
HELD_LAYERS = (6, 8)


def step_ns(w: Workload, system: str) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(simulate_on(w, system).step_ns)


def corpus_jobs() -> tuple[dict[str, Workload], dict[str, Workload]]:
    train, held = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("ddp", "fsdp", "tp", "pp", "dlrm", "gpt2"):
            steps = split_steps(Workload.open(CORPUS / name))
            train[f"{name}/step0"], held[f"{name}/step1"] = steps[0], steps[1]
    return train, held


def public_jobs() -> dict[str, Workload]:
    out: dict[str, Workload] = {}
    cpu = SHARED / "pytorch-cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, ranks in (("mlp", 1), ("transformer", 1), ("ddp", 2)):
            files = [(cpu / f"{name}_rank{r}.et.json.gz", cpu / f"{name}_rank{r}.kineto.json.gz") for r in range(ranks)]
            if not all(h.exists() and k.exists() for h, k in files):
                continue
            w = Workload({r: convert_pytorch(h, k, rank=r)[0] for r, (h, k) in enumerate(files)})
            out[f"public-{name}/step0"] = split_steps(w)[0]
        resnet = SHARED / "chakra" / "resnet50_ddp.0.et.gz"
        if resnet.exists():
            out["public-resnet50"] = Workload({0: read_trace(resnet)})
    return out


def captured_jobs(tmp: Path) -> tuple[dict[str, Workload], dict[str, Workload], dict[str, float]]:
    """The GPT family: masters captured once per (layers, batch), parallelized per plan."""
    sys.path.insert(0, str(ROOT / "examples" / "models"))
    from chakra_trace.capture import capture, load_build

    build = load_build(str(ROOT / "examples" / "models" / "gpt.py") + ":build")
    masters, times = {}, {}
    for layers, batch in [(2, 2), (4, 2), (6, 2), (8, 2), (4, 4)]:
        t0 = time.perf_counter()
        masters[(layers, batch)] = capture(build, {"preset": "tiny", "layers": layers}, batch=batch, seq=64).trace
        times[f"capture L{layers} b{batch}"] = round(time.perf_counter() - t0, 2)
    train, held = {}, {}

    def job(plan: str, layers: int, batch: int) -> Workload:
        return on_device(parallelize(masters[(layers, batch)], PLANS[plan]), "h100", 0.5)

    for plan in PLANS:
        for layers in TRAIN_LAYERS[plan]:
            train[f"gpt-{plan}-L{layers}"] = job(plan, layers, 2)
        for layers in HELD_LAYERS:
            held[f"gpt-{plan}-L{layers}"] = job(plan, layers, 2)
    held["gpt-dp2-L4-batch4"] = job("dp2", 4, 4)
    return train, held, times


def _fmt(v, pct=False):
    if v is None:
        return "-"
    return f"{100 * v:+.2f}%" if pct else f"{v:.3f}"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    ap.add_argument("--no-public", action="store_true", help="leave out ../shared/traces")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus_train, corpus_held = corpus_jobs()
    timings["read corpus"] = round(time.perf_counter() - t0, 2)
    with tempfile.TemporaryDirectory(prefix="chakra-generate-bench-") as d:
        gpt_train, gpt_held, capture_times = captured_jobs(Path(d))
        public = {} if args.no_public else public_jobs()
        train = {**corpus_train, **gpt_train, **public}
        t0 = time.perf_counter()
        model = fit(train)
        timings["fit"] = round(time.perf_counter() - t0, 2)
        model_path = write_model(model, Path(d) / "gen.json.gz")
        model_bytes = model_path.stat().st_size
    timings.update(capture_times)
    sample_times = {}
    for name in {**corpus_held, **gpt_held}:
        t0 = time.perf_counter()
        sample_detailed(model, name.replace("step1", "step0") if name in corpus_held else next(iter(gpt_train)), seed=1)
        sample_times[name] = time.perf_counter() - t0
    sets = {"recorded corpus, held-out steps": corpus_held, "captured GPT family, unseen layers/batch": gpt_held}
    out: dict = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "training_jobs": sorted(train),
        "model": model.summary() | {"file_bytes_gzip": model_bytes},
        "timings_s": timings,
        "sets": {},
    }
    for label, held in sets.items():
        t0 = time.perf_counter()
        report = evaluate(model, held, step_time=step_ns, systems=SYSTEMS, seed=args.seed)
        took = time.perf_counter() - t0
        d = report.to_dict()
        if held is corpus_held:  # the training step verbatim, judged on the held-out step
            copy = {}
            for name in held:
                trained = corpus_train[name.replace("step1", "step0")]
                copy[name] = {
                    s: (step_ns(trained, s) - d["reference_step_ns"][name][s]) / d["reference_step_ns"][name][s]
                    for s in SYSTEMS
                }
            d["copy_step_err"] = copy
            errs = [abs(e) for v in copy.values() for e in v.values()]
            d["summary"]["copy"] = {"step_err:all": float(np.median(errs))}
        d["eval_s"] = round(took, 2)
        d["table"] = report.table()
        out["sets"][label] = d
    all_rows = [r for s in out["sets"].values() for r in s["rows"]]
    overall = {}
    for gen in ("hierarchical", "iid-like", "iid-global"):
        errs = [abs(e) for r in all_rows if r["generator"] == gen for e in r["step_err"].values() if e is not None]
        tvs = [r["metrics"]["op_mix_tv"] for r in all_rows if r["generator"] == gen]
        overall[gen] = {"median_abs_step_err": float(np.median(errs)), "median_op_mix_tv": float(np.median(tvs))}
    out["overall"] = overall
    out["sample_s"] = {
        "median": float(np.median(list(sample_times.values()))),
        "max": float(max(sample_times.values())),
    }
    for label, d in out["sets"].items():
        print(f"\n## {label} (evaluated in {d['eval_s']} s)\n")
        print(d["table"])
        if "copy_step_err" in d:
            print(
                "\ncopy (the training step itself): "
                + ", ".join(
                    f"{k} {_fmt(v['ring-8'], True)} / {_fmt(v['dgx-8x8'], True)}" for k, v in d["copy_step_err"].items()
                )
            )
        print(
            "\nmedians: "
            + json.dumps(
                {
                    g: {
                        k: round(v, 4)
                        for k, v in s.items()
                        if v is not None and k in ("op_mix_tv", "dur_w1", "novelty", "step_err:all")
                    }
                    for g, s in d["summary"].items()
                }
            )
        )
    print("\noverall: " + json.dumps(overall))
    print("timings (s): " + json.dumps(out["timings_s"]) + f"; sample median {out['sample_s']['median']:.3f} s")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n")
    return out


if __name__ == "__main__":
    main()
