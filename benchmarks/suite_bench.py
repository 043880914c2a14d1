#!/usr/bin/env python3
"""The bundled benchmark suite run end to end: closed division on several systems, verified.

    python benchmarks/suite_bench.py [--system dgx-h100 --system dgx-b200 --system suites/v0.1/systems/dgx-h200.json]
        [--workers 2] [--out out/suite] [--json benchmarks/results/suite.json]

The first system runs from an empty suite cache (its wall time includes capturing every
pre-execution recipe); the others reuse the captures, as a second run does. Then `suite check`
verifies the first result, and a copy with one number changed by 1% must fail it. Writes the
leaderboard of all results (``OUT/board.html``) and, per system, the score, the valid workloads,
the wall times, and per workload the step time and speedup.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chakra_trace.suite import check_result, run_suite, write_leaderboard  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", action="append", default=None)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "suite")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    systems = args.system or ["dgx-h100", "dgx-b200", str(ROOT / "suites" / "v0.1" / "systems" / "dgx-h200.json")]
    cache = Path(tempfile.mkdtemp(prefix="chakra-suite-cache-"))
    os.environ["CHAKRA_SUITE_CACHE"] = str(cache)  # the first run captures every recipe
    out: dict = {"workers": args.workers, "cpus": os.cpu_count(), "runs": {}}
    try:
        for i, system in enumerate(systems):
            t0 = time.perf_counter()
            res = run_suite(system, args.out / Path(system).stem, workers=args.workers)
            wall = time.perf_counter() - t0
            out["runs"][res.system["name"]] = {
                "wall_s": wall,
                "captured_recipes": i == 0,
                "score": res.score,
                "workloads": [
                    {k: w[k] for k in ("name", "kind", "npus", "step_s", "reference_step_s", "speedup", "valid", "why")}
                    for w in res.workloads
                ],
                "scaling": res.scaling,
            }
            print(f"{res.system['name']}: score {res.score['score']}, {wall:.1f} s", flush=True)
        first = args.out / Path(systems[0]).stem
        t0 = time.perf_counter()
        rep = check_result(first, workers=args.workers)
        out["check"] = {
            "system": systems[0],
            "ok": rep.ok,
            "problems": rep.problems,
            "wall_s": time.perf_counter() - t0,
        }
        bad = args.out / f"{systems[0]}-edited"
        shutil.copytree(first, bad, dirs_exist_ok=True)
        d = json.loads((bad / "result.json").read_text())
        d["workloads"][0]["step_s"] *= 1.01
        (bad / "result.json").write_text(json.dumps(d))
        rep_bad = check_result(bad, workers=args.workers)
        out["tampered"] = {
            "edit": f"{d['workloads'][0]['name']}: step_s x 1.01",
            "ok": rep_bad.ok,
            "problems": rep_bad.problems,
        }
        shutil.rmtree(bad)
        board = write_leaderboard([args.out / Path(s).stem for s in systems], args.out / "board.html")
        out["board"] = os.path.relpath(board, ROOT)  # (no machine's path in the committed results)
        print(f"check: {'OK' if rep.ok else rep.problems}; edited copy: {'caught' if not rep_bad.ok else 'NOT caught'}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if out["check"]["ok"] and not out["tampered"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
