"""How close generated jobs are to real ones they never saw: the fidelity report.

For each held-out job, `evaluate` derives the condition a user would give from what is known of
the job before it runs (`condition_for`: its ranks and communicators, its op vocabulary and its
layer count choose the training job it is *like*, and the layer scale), samples that condition
with the hierarchical generator and with the baselines (`sample.BASELINES`), and compares each
sample with the held-out job:

- ``op_mix_tv``: total variation between op mixes (op classes: node type and name, digits
  folded);
- ``dur_w1``, ``dur_ks``: Wasserstein-1 and Kolmogorov-Smirnov between log(1 + µs) durations;
- ``size_w1``, ``size_ks``: the same between log2(1 + bytes) communication sizes;
- ``cp_share_err``: |difference| of the critical-path share; ``parallelism_w1``: Wasserstein-1
  between the profiles of ops in flight; ``fan_tv``: total variation of the in- and out-degree
  histograms (mean of both) (`stats`);
- ``nodes_err``: relative error of the ops per rank;
- ``step_err[system]``: relative error of the simulated step time on each named system;
- ``novelty``: the feature distance from the sample to its nearest training job (op-mix TV +
  W1 of log durations + |log of the op-count ratio|; 0 is a copy), beside ``ref_novelty``, the
  same distance for the held-out job itself: a sample as far from the training jobs as a new real
  job is, is neither a copy nor off the map.

The simulator sits above this package (`simulate` imports `synthesize`), so the step time comes
in as a function: `step_time(workload, system) -> ns`. The `chakra generate eval` command and
`benchmarks/generate_bench.py` pass one that runs `simulate.presets.simulate_on`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...io.workload import Workload
from ...schema.trace import Trace
from ...table import Column, Table, Tabular
from . import stats
from .fit import capture_batch, check_trace, features, program_layers
from .model import GeneratorModel, JobFeatures
from .program import Vocabulary, extract
from .sample import BASELINES, sample_baseline, sample_detailed

StepTime = Callable[[Workload, str], float]
SYSTEMS = ("ring-8", "dgx-8x8")
GENERATORS = ("hierarchical", *BASELINES)
METRICS = (
    "op_mix_tv",
    "dur_w1",
    "dur_ks",
    "size_w1",
    "size_ks",
    "cp_share_err",
    "parallelism_w1",
    "fan_tv",
    "nodes_err",
    "novelty",
)


@dataclass
class Condition:
    """What a held-out job is sampled as: like a training job, at a layer scale, on its ranks."""

    like: str
    layers_scale: float
    ranks: int | None
    layers: int
    distance: float  # of the op mixes, held-out to the job chosen
    batch_scale: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def job_layers(w: Workload) -> int:
    """A job's layer count, as the fit reads it (the largest over its distinct rank programs)."""
    vocab = Vocabulary()
    seen: dict[int, int] = {}
    for t in w.traces.values():
        if id(t) not in seen:
            seen[id(t)] = program_layers(extract(t, vocab))[0]
    return max(seen.values(), default=1)


def _group_sizes(w: Workload) -> list[int]:
    return sorted(len(m) for g, m in w.all_groups().items() if g not in ("", "0"))


def condition_for(model: GeneratorModel, w: Workload) -> Condition:
    """The condition a held-out job is sampled at (module docstring): among the training jobs
    with its rank count (any, if none has it) and, where possible, its communicator sizes, the
    one whose op mix is nearest; the layer scale that gives the held-out job's layer count; the
    batch scale where both were captured (`chakra capture` metadata) at a known batch."""
    mix = stats.op_mix(w)
    layers = job_layers(w)
    sizes = _group_sizes(w)
    pool = [j for j in model.jobs if j.ranks == len(w)] or model.jobs

    def score(j) -> tuple[float, float]:
        same_groups = sorted(len(m) for m in j.groups.values()) == sizes
        d = stats.tv(mix, j.features.op_mix)
        return (d + (0.0 if same_groups else 1.0) + 0.05 * abs(math.log(max(layers, 1) / max(j.layers, 1))), d)

    best = min(pool, key=score)
    scale = layers / best.layers if best.layers >= 2 and layers >= 2 else 1.0
    batch = capture_batch(w.traces[w.ranks[0]])
    batch_scale = batch / best.batch if batch and best.batch else 1.0
    ranks = None if best.ranks == len(w) else len(w)
    return Condition(best.name, scale, ranks, layers, score(best)[1], batch_scale)


def novelty(model: GeneratorModel, f: JobFeatures) -> tuple[float, str]:
    """(distance, name) of the training job nearest to features `f` (module docstring)."""
    best = (math.inf, "")
    for j in model.jobs:
        d = stats.tv(f.op_mix, j.features.op_mix)
        d += stats.quantile_distance(f.dur_q, j.features.dur_q) or 0.0
        d += abs(math.log(max(f.nodes, 1.0) / max(j.features.nodes, 1.0)))
        if d < best[0]:
            best = (d, j.name)
    return best


@dataclass
class _Reference:
    w: Workload
    mix: Any
    dur: np.ndarray
    size: np.ndarray
    shape: stats.GraphShape
    nodes: float


def _reference(w: Workload) -> _Reference:
    mix = stats.op_mix(w)
    return _Reference(
        w, mix, stats.log_durations(w), stats.log_sizes(w), stats.graph_shape(w), sum(mix.values()) / max(len(w), 1)
    )


def _fan_tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def compare(generated: Workload, ref: Workload | _Reference) -> dict[str, float | None]:
    """The distribution and graph metrics of a generated job against a reference job."""
    r = ref if isinstance(ref, _Reference) else _reference(ref)
    g = _reference(generated)
    cp = None if g.shape.cp_share is None or r.shape.cp_share is None else abs(g.shape.cp_share - r.shape.cp_share)
    return {
        "op_mix_tv": stats.tv(g.mix, r.mix),
        "dur_w1": stats.wasserstein(g.dur, r.dur),
        "dur_ks": stats.ks(g.dur, r.dur),
        "size_w1": stats.wasserstein(g.size, r.size),
        "size_ks": stats.ks(g.size, r.size),
        "cp_share_err": cp,
        "parallelism_w1": float(np.mean(np.abs(g.shape.inflight_q - r.shape.inflight_q))),
        "fan_tv": 0.5 * (_fan_tv(g.shape.fan_in, r.shape.fan_in) + _fan_tv(g.shape.fan_out, r.shape.fan_out)),
        "nodes_err": abs(g.nodes - r.nodes) / max(r.nodes, 1.0),
    }


@dataclass
class FidelityRow:
    """One generator on one held-out job."""

    job: str
    generator: str
    condition: Condition
    metrics: dict[str, float | None]
    step_ns: dict[str, float | None]
    step_err: dict[str, float | None]  # (generated - held-out) / held-out
    ref_novelty: float
    nearest: str  # the training job nearest to the sample
    sample_s: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "generator": self.generator,
            "condition": self.condition.to_dict(),
            "metrics": self.metrics,
            "step_ns": self.step_ns,
            "step_err": self.step_err,
            "ref_novelty": self.ref_novelty,
            "nearest": self.nearest,
            "sample_s": self.sample_s,
            "notes": self.notes,
        }


def _abs(v: float | None) -> float | None:
    return None if v is None else abs(v)


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.median(vals)) if vals else None


@dataclass
class FidelityReport(Tabular):
    """Every generator on every held-out job, with the held-out jobs' simulated steps."""

    rows: list[FidelityRow]
    systems: tuple[str, ...]
    reference_step_ns: dict[str, dict[str, float | None]]

    def summary(self) -> dict[str, dict[str, float | None]]:
        """Per generator, the median of each metric over the held-out jobs (of |step error|)."""
        out: dict[str, dict[str, float | None]] = {}
        for gen in dict.fromkeys(r.generator for r in self.rows):
            rows = [r for r in self.rows if r.generator == gen]
            d = {m: _median([r.metrics.get(m) for r in rows]) for m in METRICS}
            for s in self.systems:
                d[f"step_err:{s}"] = _median([_abs(r.step_err.get(s)) for r in rows])
            errs = [abs(e) for r in rows for e in r.step_err.values() if e is not None]
            d["step_err:all"] = float(np.median(errs)) if errs else None
            out[gen] = d
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "systems": list(self.systems),
            "reference_step_ns": self.reference_step_ns,
            "rows": [r.to_dict() for r in self.rows],
            "summary": self.summary(),
        }

    def to_table(self) -> Table:
        """One row per held-out job and generator: the condition, every metric, the reference
        novelty and the step error (sampled vs held-out, simulated) on each system."""
        recs = []
        for r in self.rows:
            rec: dict[str, Any] = {"job": r.job, "generator": r.generator, "like": r.condition.like}
            rec["layers_scale"] = r.condition.layers_scale
            rec.update(r.metrics)
            rec["ref_novelty"] = r.ref_novelty
            for s in self.systems:
                rec[f"step_err:{s}"] = r.step_err.get(s)
            recs.append(rec)
        t = Table.from_records(recs, title="fidelity on held-out jobs (step errors: sampled vs held-out, simulated)")
        metric = Column(format=".3f")
        spec = {k: metric for k in t.names if k in METRICS or k == "ref_novelty"}
        spec |= {f"step_err:{s}": Column(label=f"step err {s}", format="+.1%") for s in self.systems if recs}
        return t.with_spec(**spec)


def _step(step_time: StepTime | None, w: Workload, system: str, notes: list[str]) -> float | None:
    if step_time is None:
        return None
    try:
        return float(step_time(w, system))
    except ChakraError as e:
        notes.append(f"{system}: {e}")
        return None


def evaluate(
    model: GeneratorModel,
    held_out: Mapping[str, Workload | Trace],
    *,
    step_time: StepTime | None = None,
    systems: tuple[str, ...] | list[str] = SYSTEMS,
    generators: tuple[str, ...] | list[str] = GENERATORS,
    seed: int = 0,
) -> FidelityReport:
    """The fidelity report of `model` on `held_out` jobs ({name: workload}; module docstring).
    Without `step_time` the step errors are left out (None)."""
    unknown = [g for g in generators if g not in GENERATORS]
    if unknown:
        raise ChakraError(f"unknown generator {unknown[0]!r}; expected some of {', '.join(GENERATORS)}")
    systems = tuple(systems)
    rows: list[FidelityRow] = []
    ref_steps: dict[str, dict[str, float | None]] = {}
    for name, w in held_out.items():
        w = Workload.of(w)
        for r in w.ranks:
            check_trace(w.traces[r], str(w.paths.get(r, f"held-out job {name!r} rank {r}")))
        cond = condition_for(model, w)
        ref = _reference(w)
        notes: list[str] = []
        ref_steps[name] = {s: _step(step_time, w, s, notes) for s in systems}
        ref_nov = novelty(model, features(w))[0]
        for gen in generators:
            t0 = time.perf_counter()
            row_notes = list(notes)
            try:
                if gen == "hierarchical":
                    sampled, _ = sample_detailed(
                        model,
                        cond.like,
                        layers_scale=cond.layers_scale,
                        batch_scale=cond.batch_scale,
                        ranks=cond.ranks,
                        seed=seed,
                    )
                else:
                    sampled = sample_baseline(
                        model, cond.like, gen, layers_scale=cond.layers_scale, ranks=cond.ranks, seed=seed
                    )
            except ChakraError as e:  # (a baseline of a job of sends and receives only has no ops)
                row_notes.append(f"{gen}: {e}")
                empty: dict[str, float | None] = dict.fromkeys(systems)
                metrics: dict[str, float | None] = dict.fromkeys(METRICS)
                rows.append(FidelityRow(name, gen, cond, metrics, empty, dict(empty), ref_nov, "", 0.0, row_notes))
                continue
            took = time.perf_counter() - t0
            metrics = compare(sampled, ref)
            nov, nearest = novelty(model, features(sampled))
            metrics["novelty"] = nov
            steps = {s: _step(step_time, sampled, s, row_notes) for s in systems}
            errs: dict[str, float | None] = {}
            for s in systems:
                a, b = steps[s], ref_steps[name][s]
                errs[s] = None if a is None or not b else (a - b) / b
            rows.append(FidelityRow(name, gen, cond, metrics, steps, errs, ref_nov, nearest, round(took, 4), row_notes))
    return FidelityReport(rows, systems, ref_steps)
