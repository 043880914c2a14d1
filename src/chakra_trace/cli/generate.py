"""`chakra generate`: fit a trace generator on jobs, sample new jobs from it, and report its
fidelity on held-out jobs (`synthesize.generate`; the step times by `simulate_on`)."""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import click

from ..io.workload import Workload
from ..simulate import SimulationWarning
from ..simulate.presets import simulate_on
from ..synthesize.generate import (
    BASELINES,
    GENERATORS,
    SYSTEMS,
    evaluate,
    fit,
    read_model,
    sample_baseline,
    sample_detailed,
    split_steps,
    write_model,
)
from ..table import Column, Table
from .common import console, counts, json_option, open_workload, print_json, show, steps

_SUFFIX = re.compile(r"(\.\d+)?(\.et|\.json)?(\.gz)?$")
steps_option = click.option(
    "--steps",
    "step_mode",
    type=click.Choice(["split", "whole"]),
    default="split",
    show_default=True,
    help="split: each recorded step (the profiler's windows) is a job of its own, NAME/stepK; whole: the recording as one job.",
)


def job_name(path: str) -> str:
    """A job's name from its path: the folder, file or prefix name without rank and suffixes."""
    name = Path(path.rstrip("/")).name
    return _SUFFIX.sub("", name) or name


def open_jobs(paths: tuple[str, ...], step_mode: str) -> dict[str, Workload]:
    """{name: workload} of the jobs at `paths` (NAME/stepK per recorded step with split)."""
    jobs: dict[str, Workload] = {}
    for path in paths:
        w = open_workload(path)
        base = job_name(path)
        while base in jobs or any(k.startswith(base + "/") for k in jobs):
            base += "'"
        parts = split_steps(w) if step_mode == "split" else [w]
        if len(parts) == 1:
            jobs[base] = parts[0]
        else:
            jobs.update({f"{base}/step{k}": p for k, p in enumerate(parts)})
    return jobs


def simulated_step_ns(workload: Workload, system: str) -> float:
    """The step a job takes on a named system (`simulate_on`): the fidelity report's step time.
    The simulator's warnings (an all-to-allv run as an all-to-all, ...) are about the held-out
    jobs as much as the samples, and would repeat for every generator: not shown here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SimulationWarning)
        return float(simulate_on(workload, system).recording_ns)


@click.group()
def generate() -> None:
    """Learn a generator of training-step traces from jobs, and sample new jobs like them.

    \b
      chakra generate fit tests/data/corpus/ddp tests/data/corpus/fsdp -o gen.json
      chakra generate sample gen.json --like ddp/step0 --layers-scale 2 --ranks 8 -o out/gen/ddp
      chakra generate eval gen.json held_out_job
    """


@generate.command("fit")
@click.argument("jobs", nargs=-1, required=True)
@click.option("-o", "--output", required=True, help="The model file to write (JSON; gzip if it ends in .gz).")
@steps_option
@click.option(
    "--max-period",
    type=click.IntRange(min=1),
    default=8192,
    show_default=True,
    help="Longest repeated block looked for (ops).",
)
@json_option
def fit_cmd(jobs, output, step_mode, max_period, as_json) -> None:
    """Fit a generator on JOBS (any path a command opens: a `chakra collect` folder, a trace
    prefix, one .et) and write the model file."""
    t0 = time.perf_counter()
    with steps(f"reading {len(jobs)} job(s)", None):
        corpus = open_jobs(jobs, step_mode)
    with steps(f"fitting on {len(corpus)} job(s)", None):
        model = fit(corpus, max_period=max_period)
    write_model(model, output)
    d = model.summary() | {
        "output": output,
        "fit_s": model.fit_info.get("wall_s"),
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    if as_json:
        print_json(d)
        return
    con = console()
    con.print(
        f"{len(model.jobs)} job(s), {d['programs']} distinct rank programs, {d['tokens']} tokens, {d['slots']:,} slots, "
        f"{d['relations']:,} dependency relations -> {output} ({d['fit_s']} s fit)"
    )
    jobs = {
        "job": [j.name for j in model.jobs],
        "ranks": [j.ranks for j in model.jobs],
        "layers": [j.layers for j in model.jobs],
        "programs": [len(set(j.rank_program)) for j in model.jobs],
    }
    show(Table(jobs, title="jobs"))


@generate.command("sample")
@click.argument("model_file", metavar="MODEL")
@click.option(
    "-o",
    "--output",
    "prefix",
    metavar="PREFIX",
    required=True,
    help="Write PREFIX.<rank>.et and PREFIX.comm_groups.json.",
)
@click.option(
    "--like", metavar="JOB", help="The training job to sample like (its name in the model; `fit` lists them)."
)
@click.option("--layers-scale", type=float, default=1.0, show_default=True, help="Times the job's layers.")
@click.option("--layers", type=click.IntRange(min=1), help="This many layers (instead of --layers-scale).")
@click.option(
    "--batch-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Times the batch (compute durations scale by each op's fitted elasticity).",
)
@click.option("--ranks", type=click.IntRange(min=1), help="Scale out to this many data-parallel ranks.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--jitter",
    type=float,
    default=1.0,
    show_default=True,
    help="Times the fitted duration noise (0: pooled values only).",
)
@click.option(
    "--baseline", type=click.Choice(BASELINES), help="Sample this trivial baseline instead (i.i.d. ops in a chain)."
)
@json_option
def sample_cmd(
    model_file, prefix, like, layers_scale, layers, batch_scale, ranks, seed, jitter, baseline, as_json
) -> None:
    """Sample a new job from MODEL and write its traces, once it validates across ranks (else
    nothing is written: one line naming the failed check, exit 2)."""
    t0 = time.perf_counter()
    model = read_model(model_file)
    if baseline:
        w = sample_baseline(model, like, baseline, layers_scale=layers_scale, layers=layers, ranks=ranks, seed=seed)
        d: dict = {"generator": baseline, "like": model.job(like).name, "seed": seed}
    else:
        w, info = sample_detailed(
            model,
            like,
            layers_scale=layers_scale,
            layers=layers,
            batch_scale=batch_scale,
            ranks=ranks,
            seed=seed,
            jitter=jitter,
        )
        d = info.to_dict()
    with counts(f"writing {len(w)} traces", "ranks") as tick:
        w.save(prefix, groups=w.groups or None, progress=tick)
    d |= {
        "output": prefix,
        "ranks": len(w),
        "nodes_per_rank": len(w.traces[w.ranks[0]]),
        "groups": len(w.groups),
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    if as_json:
        print_json(d)
        return
    console().print(
        f"{d['generator']} sample like {d['like']}: {d['ranks']} ranks, {d['nodes_per_rank']:,} nodes per rank, "
        f"{d['groups']} groups -> {prefix}.<rank>.et (validated across ranks)"
    )
    if d.get("shared"):
        console().print(
            f"note: rank(s) {', '.join(map(str, d['shared']))} of {d['like']} run the sampled structure of their "
            f"communicator's first member: their own programs would issue other collectives at {d['layers']} layers"
        )


@generate.command("eval")
@click.argument("model_file", metavar="MODEL")
@click.argument("held_out", nargs=-1, required=True)
@steps_option
@click.option(
    "--systems",
    default=",".join(SYSTEMS),
    show_default=True,
    help="Named systems (presets) to simulate step times on, comma-separated.",
)
@click.option(
    "--generators", default=",".join(GENERATORS), show_default=True, help="Generators to compare, comma-separated."
)
@click.option("--seed", type=int, default=0, show_default=True)
@json_option
def eval_cmd(model_file, held_out, step_mode, systems, generators, seed, as_json) -> None:
    """The fidelity of MODEL on HELD_OUT jobs: each sampled like its nearest training job, at its
    layer count, by the generator and the baselines, and compared (distribution distances, graph
    shape, simulated step time on each system, novelty)."""
    model = read_model(model_file)
    jobs = open_jobs(held_out, step_mode)
    systems_t = tuple(s.strip() for s in systems.split(",") if s.strip())
    gens = tuple(g.strip() for g in generators.split(",") if g.strip())
    t0 = time.perf_counter()
    with steps(f"evaluating {len(jobs)} held-out job(s)", None):
        report = evaluate(model, jobs, step_time=simulated_step_ns, systems=systems_t, generators=gens, seed=seed)
    d = report.to_dict() | {"wall_s": round(time.perf_counter() - t0, 3)}
    if as_json:
        print_json(d)
        return
    con = console()
    rows = report.rows

    def num(v, pct=False):
        return "-" if v is None else (f"{100 * v:+.1f}%" if pct else f"{v:.3f}")

    metrics = {"op_mix_tv": "op-mix TV", "dur_w1": "dur W1", "size_w1": "size W1", "cp_share_err": "cp share err"}
    errors = {f"step_err:{s}": [r.step_err[s] for r in rows] for s in systems_t}
    t = Table(
        {
            "job": [r.job for r in rows],
            "generator": [r.generator for r in rows],
            "like": [f"{r.condition.like} x{r.condition.layers_scale:g}" for r in rows],
            **{m: [r.metrics[m] for r in rows] for m in metrics},
            "novelty": [f"{num(r.metrics['novelty'])} ({num(r.ref_novelty)})" for r in rows],
            **errors,
        },
        title="fidelity on held-out jobs (step errors: sampled vs held-out, simulated)",
        spec={
            **{m: Column(label=label, format=".3f") for m, label in metrics.items()},
            "novelty": Column(label="novelty (ref)", align="right"),
            **{k: Column(label=f"step err {k[9:]}", format="+.1%") for k in errors},
        },
    )
    show(t)
    s = report.summary()
    for gen, vals in s.items():
        med = vals.get("step_err:all")
        con.print(f"{gen}: median |step error| {num(med, pct=True)}, median op-mix TV {num(vals['op_mix_tv'])}")
    notes = sorted({n for r in report.rows for n in r.notes})
    for n in notes:
        con.print(f"[yellow]note[/yellow]: {n}")
