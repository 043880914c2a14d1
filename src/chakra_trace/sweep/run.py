"""`run_sweep`: a spec's points simulated into a results folder, skipping those already there."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import ChakraError
from .executors import run_pool, run_ray
from .points import expand
from .results import PartWriter, SweepResult, finished_ids, write_meta
from .spec import SweepSpec, load_spec


def run_sweep(
    spec: str | os.PathLike | dict | SweepSpec,
    out: str | os.PathLike,
    *,
    workers: int | None = None,
    ray: str | None = None,
    retries: int = 2,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
    max_points: int | None = None,
    allow_paths: Iterable[str | os.PathLike] | None = None,
) -> SweepResult:
    """Simulate every point of ``spec`` (a YAML file, a mapping or a `SweepSpec`) not yet in the
    results folder ``out``, in ``workers`` local processes (default: the CPUs) or on Ray (``ray``:
    "auto" for a local runtime, or a cluster address). ``limit``: run at most that many of the
    points left (a trial run). ``on_total`` is told how many points will run, ``progress`` is
    called with 1 as each finishes. ``max_points``: the most points the spec may make (default
    `points.point_limit`); ``allow_paths``: folders beside the spec's own whose files it may
    name (`spec.load_spec`)."""
    t0 = time.perf_counter()
    s = load_spec(spec, allow_paths=allow_paths)
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ChakraError(f"{folder}: not a folder (the sweep writes its results into one)")
    points = expand(s, max_points)
    folder.mkdir(parents=True, exist_ok=True)
    done = finished_ids(folder)
    todo = [p.to_dict() for p in points if p.id not in done]
    if limit is not None:
        todo = todo[:limit]
    n_workers = max(1, workers or os.cpu_count() or 1)
    write_meta(folder, {"spec": s.to_dict(), "axes": list(s.axes), "points": len(points)})
    result = SweepResult(folder, len(points), skipped=sum(p.id in done for p in points))
    result.executor, result.workers = ("ray" if ray else "pool"), n_workers
    if on_total is not None:
        on_total(len(todo))
    writer = PartWriter(folder)
    ctx = {"name": s.name, "workloads": s.workloads, "prices": s.prices}

    def on_row(row: dict) -> None:
        writer.add(row)
        result.ran += 1
        result.errors += row["status"] != "ok"
        if progress is not None:
            progress(1)

    try:
        if ray:
            tally = run_ray(ctx, todo, n_workers, on_row, address=ray, retries=retries)
        else:
            tally = run_pool(ctx, todo, n_workers, on_row, retries=retries)
    finally:
        writer.flush()
        result.parts = writer.parts
        result.wall_s = time.perf_counter() - t0
    result.retried, result.lost, result.restarts = tally.retried, len(tally.lost), tally.restarts
    return result
