#!/usr/bin/env python3
"""TraceLens's side of `wild_table.py`: AMD's TraceLens GPU timeline of one Kineto trace, as JSON.
Runs under a Python that has TraceLens installed (not ours: TraceLens is no dependency of
chakra-trace and nothing under src/ or the default tests imports it).

TraceLens is AMD-AGI's https://github.com/AMD-AGI/TraceLens, installed from its source (its
documented ways are ``pip install git+https://github.com/AMD-AGI/TraceLens.git`` or a checkout).
The PyPI package named ``tracelens`` is an unrelated project (an AI-agent evaluation framework),
not this one. Without network, from a git snapshot of the repository::

    mkdir /tmp/tracelens-src && git --git-dir=SNAPSHOT archive HEAD TraceLens setup.py README.md \\
        MANIFEST.in LICENSE | tar -x -C /tmp/tracelens-src
    python3 -m venv /tmp/tl-venv && /tmp/tl-venv/bin/pip install --no-deps /tmp/tracelens-src
    /tmp/tl-venv/bin/pip install pandas tqdm orjson openpyxl tabulate PyYAML
    /tmp/tl-venv/bin/python benchmarks/tracelens_side.py TRACE.json.gz --json out.json

(``--no-deps``: its setup.py also asks for xprof, protobuf, msal and office365 clients, used only
by its JAX and SharePoint paths, not by the PyTorch timeline read here.)

The quantity read: ``TreePerfAnalyzer.from_file(TRACE).get_df_gpu_timeline()`` -- what its
``TraceLens_generate_perf_report_pytorch`` puts in the report's ``gpu_timeline`` sheet -- built by
``GPUEventAnalyser.compute_metrics_dict`` over the trace's ``kernel`` / ``gpu_memcpy`` /
``gpu_memset`` events of every stream (and every GPU of the file) together:

- ``computation_time``: the union (wall time) of kernels that are not communication, and of
  ``gpu_memset`` events (TraceLens files sets under computation);
- ``total_comm_time``: the union of communication kernels, TraceLens's rule being a kernel name
  containing ``nccl`` or ``rccl`` or ``cross_device_reduce`` (case-insensitive), nothing else;
- ``total_memcpy_time``: the union of ``gpu_memcpy`` events (and ROCm 7.1's copy kernels);
- ``busy_time``: the union of all of them; ``idle_time`` = ``total_time`` (first start to last
  end) minus ``busy_time``.

Both are recorded twice: ``all`` (``include_unlinked_kernels=True``: every GPU event of the file,
as the other columns of the table count) and ``linked`` (TraceLens's default, the report's: only
GPU events linked to a CPU op of its tree). `wild_table.py` computes the communication share as
``total_comm_time / (total_comm_time + computation_time)`` of ``all`` -- memory copies and idle
time left out, as in the table's other share columns; both terms are unions, so kernels that
overlap within a class count once (as HTA's), and time where communication overlaps computation
counts in both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def timeline_us(analyzer, include_unlinked: bool) -> dict:
    """``get_df_gpu_timeline`` as {type: µs}, or its one-line failure."""
    analyzer.include_unlinked_kernels = include_unlinked
    t = time.perf_counter()
    try:
        df = analyzer.get_df_gpu_timeline()
    except Exception as e:  # TraceLens's own failure is a result here
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:400], "s": time.perf_counter() - t}
    us = {str(r["type"]): float(r["time ms"]) * 1000 for r in df.to_dict("records")}
    return {"ok": True, "s": time.perf_counter() - t, "us": us}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()

    from importlib.metadata import PackageNotFoundError, version

    out: dict = {"trace": os.path.abspath(args.trace)}
    try:
        out["version"] = version("TraceLens")
    except PackageNotFoundError:
        out["version"] = "?"
    t0 = time.perf_counter()
    try:
        from TraceLens import TreePerfAnalyzer

        analyzer = TreePerfAnalyzer.from_file(args.trace)
    except Exception as e:  # TraceLens's own failure is a result here
        out["load"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400], "s": time.perf_counter() - t0}
    else:
        out["load"] = {"ok": True, "s": time.perf_counter() - t0}
        out["timeline"] = {"all": timeline_us(analyzer, True), "linked": timeline_us(analyzer, False)}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
