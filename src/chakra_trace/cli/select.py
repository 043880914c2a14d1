"""`chakra select`: the k jobs of a fleet that stand for all of them (`analyze.select`)."""

from __future__ import annotations

import json
import warnings
from typing import Any

import click
import numpy as np

from ..analyze.select import FleetFeatures, coverage, find_jobs, job_features
from ..analyze.select import select as choose
from ..analyze.select.coverage import ESTIMATORS, random_errors
from ..analyze.select.features import COMM_TIMES
from ..analyze.select.methods import METHODS
from ..errors import ChakraError
from ..io.et import atomic_output
from ..io.workload import Workload
from ..simulate import SimulationWarning
from ..simulate.presets import resolve, simulate_on
from ..table import Column, Table
from .common import console, json_option, print_json, show, steps
from .systems import preset_names

RANDOM_TRIALS = 20


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="FOLDER_OR_PREFIX...")
@click.option("-k", "k", type=click.IntRange(min=1), required=True, help="How many representatives.")
@click.option("--method", type=click.Choice(METHODS), default="kmedoids", show_default=True, help="How to choose them.")
@click.option(
    "--metric-system",
    "systems",
    multiple=True,
    metavar="PRESET",
    help="Simulate every job on this system (repeatable) and report how well the representatives predict "
    f"the fleet's total step time there. Presets: {preset_names()}.",
)
@click.option(
    "--estimator",
    type=click.Choice(ESTIMATORS),
    default="ratio",
    show_default=True,
    help="count: a representative's time x the jobs it stands for; ratio: scaled to each of them by its serial time.",
)
@click.option(
    "--comm-time",
    type=click.Choice(COMM_TIMES),
    default="model",
    show_default=True,
    help="Communication in the features: modelled from bytes, or as recorded.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of k-medoids and the random baseline.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the selection as JSON.")
@json_option
def select(paths, k, method, systems, estimator, comm_time, seed, output, as_json) -> None:
    """Choose K jobs that represent a fleet, with the number of jobs each stands for.

    \b
      chakra select fleet/ -k 10
      chakra select tests/data/corpus -k 3 --metric-system dgx-8x8
      chakra select runs/a runs/b/job runs/c -k 2 --method facility --json

    Each path is a job (a prefix of <prefix>.<rank>.et files, a folder holding one job, a
    `chakra collect` folder) or a folder of jobs, searched below. Jobs are compared by their
    features (time shares per op class, message sizes, scale); see `chakra_trace.analyze.select`.
    """
    presets = [resolve(s) for s in systems]
    jobs = find_jobs(list(paths))
    if k > len(jobs):
        raise click.UsageError(f"-k {k} is more than the {len(jobs)} jobs found")
    feats = []
    metric = np.zeros((len(jobs), len(presets)))
    warned: dict[str, int] = {}
    with steps("reading jobs", len(jobs)) as advance:
        for i, job in enumerate(jobs):
            w = Workload.open(job.path)  # (no bar per file: the bar counts jobs)
            feats.append(job_features(w, job.name, comm_time=comm_time))
            for s, p in enumerate(presets):
                metric[i, s], n_warn = _simulate(w, p, job.name)
                if n_warn:
                    warned[job.name] = warned.get(job.name, 0) + n_warn
            if advance:
                advance(1)
    fleet = FleetFeatures.from_jobs(feats)
    sel = choose(fleet, k, method, seed)
    out: dict[str, Any] = {"jobs": len(jobs), "selection": sel.to_dict()}
    for r, i in zip(out["selection"]["representatives"], sel.indices):
        r["path"] = str(jobs[int(i)].path)
        if presets:
            r["step_ms"] = {p.name: float(metric[i, s]) for s, p in enumerate(presets)}
    if presets:
        names = [p.name for p in presets]
        cov = coverage(sel, metric, metric_names=names, estimator=estimator)
        base = random_errors(
            None, metric, k, np.random.default_rng([seed, 1]), RANDOM_TRIALS, estimator, fleet.serial_us
        )
        out["coverage"] = cov.to_dict()
        for row, err in zip(out["coverage"]["metrics"], base["random"]):
            row["random_relative_error"] = float(err)
        out["coverage"]["random_trials"] = RANDOM_TRIALS
        out["simulation_warnings"] = warned
    if output:
        with atomic_output(output, compress=False) as f:
            f.write((json.dumps(out, indent=2) + "\n").encode())
    if as_json:
        print_json(out)
        return
    _print(out, presets)


def _simulate(w, preset, name: str) -> tuple[float, int]:
    """The job's step on the preset (ms) and how many warnings the simulation gave."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SimulationWarning)  # (counted from the result)
            res = simulate_on(w, preset)
    except ChakraError as e:
        raise ChakraError(f"{name}: cannot simulate on {preset.name}: {e}") from None
    return res.recording_ns / 1e6, len(res.warnings)


def _print(out: dict, presets) -> None:
    sel = out["selection"]
    reps = sel["representatives"]
    steps_ms = {f"step:{p.name}": [r["step_ms"][p.name] for r in reps] for p in presets}
    chosen = Table(
        {
            "#": np.arange(1, len(reps) + 1),
            "job": [r["job"] for r in reps],
            "weight": [r["weight"] for r in reps],
            "share": [r["share"] for r in reps],
            **steps_ms,
        },
        title=f"{sel['k']} of {out['jobs']} jobs ({sel['method']}; summed feature distance {sel['objective']:.3g})",
        spec={
            "weight": Column(label="stands for (jobs)"),
            "share": Column(format=".1%"),
            **{k: Column(label=f"step on {k[5:]}", unit="ms", format=".4g") for k in steps_ms},
        },
    )
    show(chosen)
    if "coverage" not in out:
        return
    cov = out["coverage"]
    ms = Column(unit="ms", format=".6g")
    random = Column(label=f"random {sel['k']} (mean of {cov['random_trials']})", format=".2%")
    spec = {
        "metric": Column(label="system"),
        "true": ms,
        "predicted": ms,
        "relative_error": Column(label="error", format=".2%"),
    }
    fleet = Table.from_records(
        cov["metrics"],
        ["metric", "true", "predicted", "relative_error", "random_relative_error"],
        title=f"fleet total step time predicted from the {sel['k']} ({cov['estimator']} estimator)",
        spec={**spec, "random_relative_error": random},
    )
    show(fleet)
    if out["simulation_warnings"]:
        console().print(f"{len(out['simulation_warnings'])} jobs' simulations gave warnings (listed with --json)")
