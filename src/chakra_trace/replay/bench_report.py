"""A benchmark report from saved measurements, with the rigor of the field (`chakra bench report`).

What a reader needs to trust or reject a timing, following the benchmarking literature and MLPerf's
reporting rules: the system it ran on (hardware, software, configuration) and whether the systems of
compared results are the same one; the run rules followed (warm-up, repeats, why it stopped, what the
timed region holds, runs vs samples, the "division": the recorded job as is or transformed); and
per benchmark the median with its distribution-free 95% CI, the mean with its t CI, variability
(CV, IQR), the outliers (reported, never dropped), significance against a baseline with runs as the
unit (`comparison.compare_runs`), speedup with its CI, scaling across rank counts or sizes, and
energy where the measurement carries it (``extra["energy_j"]``, joules per sample).

The report is a model (`BenchReport`, plain data in `to_dict()`), rendered as Markdown
(`bench_report_text.py`) or as a document of the one report renderer (`bench_report_html.py`,
`chakra_trace.document`): one self-contained HTML page with a plot of the samples. It lives beside
the measurements rather than in `visualize` because the layer map makes `visualize` and `replay`
peers, and the report needs replay's statistics.
"""

from __future__ import annotations

import datetime
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ChakraError
from ..io.documents import short
from ..io.et import atomic_output
from .bench_entry import BenchEntry
from .bench_report_html import render_html
from .bench_report_text import render_markdown
from .comparison import MIN_RUNS, THRESHOLD, RunComparison, compare_runs
from .measure import Measurement, _read_json, json_number, json_pair, load_measurements
from .units import comparable

__all__ = ["BenchEntry", "BenchReport", "bench_report"]

#: env keys that describe the hardware; results whose values differ were taken on different systems
HARDWARE_KEYS = ("hostname", "machine", "cpu_model", "logical_cpus", "memory_bytes", "cuda_device", "device")
SOFTWARE_KEYS = ("python", "platform", "numpy", "torch", "cuda", "chakra_trace")
CONFIG_KEYS = ("affinity_cpus", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "torch_threads", "timer")


@dataclass
class BenchReport:
    """The report: results, their baselines, comparisons (result vs baseline, runs as the unit), the
    systems they ran on with the flags that make results not comparable, and scaling where given."""

    title: str
    results: list[BenchEntry]
    baselines: list[BenchEntry]
    comparisons: dict[str, tuple[str, RunComparison]]  # result label -> (baseline label, comparison)
    systems: list[dict]
    flags: list[str]
    scaling: list[dict]
    generated: str = ""
    units: dict[str, tuple[str, str]] = field(default_factory=dict)  # result label -> (unit compared in, converted)

    def to_dict(self) -> dict:
        return {
            "title": self.title,
            "generated": self.generated,
            "systems": self.systems,
            "flags": self.flags,
            "results": [e.to_dict() for e in self.results],
            "baselines": [e.to_dict() for e in self.baselines],
            "comparisons": [
                {
                    "result": k,
                    "baseline": b,
                    **speedup(c),
                    "unit": self.units.get(k, ("", ""))[0],
                    "converted": self.units.get(k, ("", ""))[1],
                    "comparison": c.to_dict(),
                }
                for k, (b, c) in self.comparisons.items()
            ],
            "scaling": self.scaling,
        }

    def to_markdown(self) -> str:
        return render_markdown(self.to_dict())

    def to_html(self) -> str:
        """One self-contained page (nothing fetched): tables and a plot of the samples per benchmark."""
        return render_html(self.to_dict())

    def write(self, path: str | os.PathLike) -> Path:
        """HTML for .html/.htm, Markdown otherwise (.md), written atomically."""
        p = Path(path)
        text = self.to_html() if p.suffix.lower() in (".html", ".htm") else self.to_markdown()
        with atomic_output(p) as f:
            f.write(text.encode("utf-8"))
        return p


def speedup(c: RunComparison) -> dict:
    """Baseline time / result time (> 1: the result is faster) and its CI, from the comparison's ratio."""
    r = c.ratio
    ci = c.ratio_ci
    return {
        "speedup": json_number(1.0 / r) if r and math.isfinite(r) else None,
        "speedup_ci": json_pair((1.0 / ci[1], 1.0 / ci[0])) if ci and ci[0] > 0 else None,
    }


# ---------------------------------------------------------------------------------------------------------
# building


def _entries(paths: list[str], role: str) -> list[BenchEntry]:
    """The benchmarks of some files; files of the same benchmark (same label) are merged as runs."""
    groups: dict[str, list[tuple[str, Measurement, dict]]] = {}
    for p in paths:
        if not os.path.isfile(p):
            raise ChakraError(f"{p}: no such file")
        obj = _read_json(p)
        if isinstance(obj, dict) and isinstance(obj.get("step"), dict) and "per_rank" in obj:
            m = load_measurements(p)["step"]  # a replay result: the step is the benchmark, ranks are detail
            ctx = _context(obj, p)
            ranks: list[dict] = list(obj["per_rank"].values())
            rank0 = (ranks[0].get("extra") if ranks else None) or {}
            ctx.update(unit=rank0.get("unit"), steps=rank0.get("steps"))
            label = f"{Path(str(ctx['source'])).name} ({ctx['mode']}, {ctx['device']}, {ctx['world_size']} rank(s))"
            groups.setdefault(label, []).append((p, m, ctx))
        else:
            for key, m in load_measurements(p).items():
                kind = next((k for k in ("size", "ranks") if isinstance(m.extra.get(k), (int, float))), "")
                label = f"{m.name or key} ({kind} {m.extra[kind]:g})" if kind else m.name or key
                groups.setdefault(label, []).append((p, m, {}))
    out = []
    for label, items in groups.items():
        ms = [m for _, m, _ in items]
        m = ms[0] if len(ms) == 1 else Measurement.merge_runs(ms)
        ctx = items[0][2]
        if ctx.get("world_size"):
            scale, kind = float(ctx["world_size"]), "ranks"
            family = f"{Path(str(ctx['source'])).name} ({ctx['mode']}, {ctx['device']})"
        elif isinstance(m.extra.get("size"), (int, float)):
            scale, kind, family = float(m.extra["size"]), "size", str(m.extra.get("family") or m.name)
        elif isinstance(m.extra.get("ranks"), (int, float)):
            scale, kind, family = float(m.extra["ranks"]), "ranks", str(m.extra.get("family") or m.name)
        else:
            scale, kind, family = None, "", label
        files = list(dict.fromkeys(p for p, _, _ in items))
        out.append(BenchEntry(label, role, m, files, ctx, family, scale, kind))
    return out


def _context(obj: dict, path: str) -> dict[str, Any]:
    """What a replay result says around its step, each field checked (the file may come from
    someone else): one-line ChakraError naming the file and the key."""

    def bad(key: str, what: str) -> ChakraError:
        return ChakraError(f"{path}: {key!r} must be {what}, got {short(obj.get(key))}")

    ctx: dict[str, Any] = {}
    for k in ("source", "mode", "device", "backend", "recorded_basis"):
        v = obj.get(k)
        if v is not None and not isinstance(v, str):
            raise bad(k, "a string")
        ctx[k] = v
    ws = obj.get("world_size")
    if ws not in (None, "") and (isinstance(ws, bool) or not isinstance(ws, int) or ws < 1):
        raise bad("world_size", "a positive integer")
    ctx["world_size"] = ws or None
    for k in ("coverage", "host_gaps"):
        v = obj.get(k) or {}
        if not isinstance(v, dict) or not all(isinstance(x, dict) for x in v.values()):
            raise bad(k, "an object of objects by rank")
        ctx[k] = v
    for r, c in ctx["coverage"].items():
        n = c.get("not_replayed", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ChakraError(f"{path}: coverage of rank {short(r)}: 'not_replayed' must be a count, got {short(n)}")
    w = obj.get("warnings") or []
    if not isinstance(w, list) or not all(isinstance(x, str) for x in w):
        raise bad("warnings", "a list of strings")
    ctx["warnings"] = w
    return ctx


def _differs(envs: list[dict], keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if len({repr(e.get(k)) for e in envs}) > 1]


def _systems(entries: list[BenchEntry]) -> tuple[list[dict], list[str]]:
    systems: list[dict] = []
    for e in entries:
        hw = {k: e.measurement.env.get(k) for k in HARDWARE_KEYS}
        for s in systems:
            if s["hardware"] == hw:
                s["entries"].append(f"{e.label} [{e.role}]")
                break
        else:
            systems.append({"id": f"S{len(systems) + 1}", "hardware": hw, "entries": [f"{e.label} [{e.role}]"]})
    for s in systems:
        mine = [e for e in entries if f"{e.label} [{e.role}]" in s["entries"]]
        s["software"] = {k: mine[0].measurement.env.get(k) for k in SOFTWARE_KEYS}
        s["config"] = {k: mine[0].measurement.env.get(k) for k in CONFIG_KEYS}
        s["backend"] = next((e.context.get("backend") for e in mine if e.context.get("backend")), None)
    envs = [e.measurement.env for e in entries]
    flags = []
    if len(systems) > 1:
        flags.append(
            f"different systems ({', '.join(_differs(envs, HARDWARE_KEYS))} differ): results on "
            f"{' vs '.join(s['id'] for s in systems)} are not comparable"
        )
    for what, keys in (("software", SOFTWARE_KEYS), ("configuration", CONFIG_KEYS)):
        d = _differs(envs, keys)
        if d:
            flags.append(f"different {what}: {', '.join(d)} differ between measurements")
    return systems, flags


def _scaling(results: list[BenchEntry], model: str) -> list[dict]:
    fams: dict[str, list[BenchEntry]] = {}
    for e in results:
        if e.scale is not None:
            fams.setdefault(e.family, []).append(e)
    out = []
    for fam, es in fams.items():
        if len({e.scale for e in es}) < 2:
            continue
        es = sorted(es, key=lambda e: e.scale or 0.0)
        base = es[0]
        rows = []
        for e in es:
            c = compare_runs(base.measurement, e.measurement, name=e.label, threshold=THRESHOLD)
            factor = (e.scale or 1.0) / (base.scale or 1.0)
            sp = speedup(c)
            s = sp["speedup"]
            eff = None if s is None else (s / factor if model == "strong" else s)
            rows.append({"label": e.label, "scale": e.scale, "median": json_number(e.measurement.median),
                         **sp, "efficiency": json_number(eff), "verdict": c.verdict})  # fmt: skip
        out.append({"family": fam, "kind": es[0].scale_kind, "model": model, "rows": rows})
    return out


def bench_report(
    paths: list[str | os.PathLike] | str | os.PathLike,
    baseline: list[str | os.PathLike] | str | os.PathLike | None = None,
    *,
    title: str | None = None,
    scaling: str = "weak",
    alpha: float = 0.05,
    min_runs: int = MIN_RUNS,
    threshold: float = THRESHOLD,
    generated: str | None = None,
) -> BenchReport:
    """A report on the measurement files `paths` (JSON of `Measurement.save`, `save_measurements` or
    `chakra replay -o`), each compared with the `baseline` file(s) of the same benchmark (or with the
    baseline's only benchmark). Files of the same benchmark are its runs.

    `scaling`: how results of one benchmark at several rank counts (or ``extra["size"]``) are read:
    "weak" (work per rank fixed, as in a replay of recorded ranks: efficiency = T(smallest) / T) or
    "strong" (total work fixed: efficiency = speedup / scale factor)."""
    if scaling not in ("weak", "strong"):
        raise ValueError(f"scaling must be 'weak' or 'strong', got {scaling!r}")

    def as_list(x) -> list[str]:
        return [] if x is None else [str(x)] if isinstance(x, (str, os.PathLike)) else [str(p) for p in x]

    results, baselines = _entries(as_list(paths), "result"), _entries(as_list(baseline), "baseline")
    if not results:
        raise ChakraError("bench report: no result files")
    by_label = {b.label: b for b in baselines}
    comparisons, units = {}, {}
    for e in results:
        b = by_label.get(e.label) or (baselines[0] if len(baselines) == 1 else None)
        if b is not None:
            try:  # (one unit, as `chakra bench compare` puts them: the same answer from both)
                (mb,), (me,), unit, converted = comparable(
                    [b.measurement], [e.measurement], names=("baseline", "result")
                )
            except ChakraError as err:
                raise ChakraError(f"{e.label} vs baseline {b.label}: {err}") from None
            c = compare_runs(mb, me, alpha=alpha, min_runs=min_runs, threshold=threshold, name=e.label,
                             labels=("baseline", "result"))  # fmt: skip
            comparisons[e.label] = (b.label, c)
            units[e.label] = (unit, converted)
    systems, flags = _systems(results + baselines)
    flags += [f"{k} vs its baseline compared in {u}: {v}" for k, (u, v) in units.items() if v]
    return BenchReport(
        title=title or "Benchmark report",
        results=results,
        baselines=baselines,
        comparisons=comparisons,
        systems=systems,
        flags=flags,
        scaling=_scaling(results, scaling),
        generated=generated if generated is not None else datetime.datetime.now().isoformat(timespec="seconds"),
        units=units,
    )
