#!/usr/bin/env python3
"""The long fuzz run (issues 13 and 34): many hostile inputs of every class through every reading command.

The inputs come from tests/fuzz_corpus.py (traces and simulator inputs) and tests/fuzz_shared.py
(sweep specs, catalogs, models, results, profiles, collect folders, replay configs), seeded: a
failure reproduces from its class, name and seed. They are checked by tests/fuzz_check.py, the
same properties the test suite asserts: exit 0 or 2 (`validate` 1), one `error:` line naming the
file, no traceback, peak RSS under the bound, no half-written output, escaped hostile strings,
`simulate` refusing what `validate` rejects, and nothing done beyond the outputs (no payload
marker, no local file carried out, input folders unchanged, no raw control byte printed).
Every run is a subprocess under `resource` limits (address space, file size, wall time).

Prints, by input class: inputs and runs tried, runs clean, exit statuses, the slowest run,
failures by kind with an example, and the peak RSS of each memory-bomb input. `--json F` writes
the same figures. Stops starting new inputs after `--seconds`.

    PYTHONPATH=src python benchmarks/fuzz_bench.py --n 40 --seconds 900 --json benchmarks/results/fuzz_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import fuzz_check as ck  # noqa: E402
import fuzz_corpus as fc  # noqa: E402
import fuzz_shared as fs  # noqa: E402

CLASSES = {**fc.CLASSES, **fs.CLASSES}


def kind(problem: str) -> str:
    """A failure's kind: its text without the numbers and names that differ between inputs."""
    p = re.sub(r"\S+\.(json|jsonl|yml|et|gz)\b\S*", "FILE", problem.split(":")[0])
    return re.sub(r"\d+", "N", p)[:60]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="inputs per class (at most; some classes have fewer)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--seconds", type=float, default=900, help="start no new input after this long")
    ap.add_argument("--classes", default="", help="comma-separated input classes (default: all)")
    ap.add_argument("--in-process", action="store_true", help="run non-bomb inputs in this process (faster)")
    ap.add_argument("--json", metavar="F", help="write the figures as JSON")
    args = ap.parse_args()
    classes = [c for c in args.classes.split(",") if c] or list(CLASSES)
    unknown = set(classes) - set(CLASSES)
    if unknown:
        ap.error(f"unknown classes {sorted(unknown)}; known: {sorted(CLASSES)}")

    t0 = time.monotonic()
    stats: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="fuzz_bench_") as tmp:
        root = Path(tmp)
        comp = fc.companions(root / "companions")
        # interleave the classes so that a time limit cuts every class short, not the last ones entirely
        per_class = {c: CLASSES[c](root / "in", args.n, args.seed) for c in classes}
        order = [x for k in range(max(map(len, per_class.values()), default=0)) for c in classes
                 if k < len(per_class[c]) for x in [per_class[c][k]]]  # fmt: skip
        for c in classes:
            stats[c] = {"inputs": 0, "runs": 0, "clean_runs": 0, "clean_inputs": 0, "failures": Counter(),
                        "examples": {}, "bomb_peak_rss_mib": {}, "seconds": 0.0, "exit": Counter(),
                        "peak_rss_mib": 0.0, "slowest": [0.0, ""]}  # fmt: skip
        for i, inp in enumerate(order):
            if time.monotonic() - t0 > args.seconds:
                print(f"time limit: stopped after {i} of {len(order)} inputs", file=sys.stderr)
                break
            s = stats[inp.cls]
            t = time.monotonic()
            outcomes = ck.check(inp, comp, root / "work" / inp.cls / inp.name, subprocess_always=not args.in_process)
            s["seconds"] += time.monotonic() - t
            s["inputs"] += 1
            s["runs"] += len(outcomes)
            s["clean_runs"] += sum(o.clean for o in outcomes)
            s["clean_inputs"] += all(o.clean for o in outcomes)
            for o in outcomes:
                s["exit"][str(o.result.rc)] += 1
                if o.result.maxrss is not None:
                    s["peak_rss_mib"] = max(s["peak_rss_mib"], round(o.result.maxrss / 2**20, 1))
                if o.result.seconds > s["slowest"][0]:
                    s["slowest"] = [round(o.result.seconds, 2), f"{inp.name} [{o.command.name}]"]
                for p in o.problems:
                    k = kind(p)
                    s["failures"][k] += 1
                    s["examples"].setdefault(k, f"{inp.name} [{o.command.name}]: {p}"[:240])
            if inp.bomb:
                rss = [o.result.maxrss for o in outcomes if o.result.maxrss is not None]
                if rss:
                    s["bomb_peak_rss_mib"][inp.name] = round(max(rss) / 2**20, 1)
            print(f"\r{i + 1}/{len(order)} {inp.id[:60]:60s}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)

    total = time.monotonic() - t0
    print(f"{'class':16s} {'inputs':>6s} {'clean':>6s} {'runs':>6s} {'clean':>6s} {'exit 0/1/2/other':>17s} "
          f"{'peak MiB':>8s} {'slowest s':>9s}  failures (kind: count)")  # fmt: skip
    for c, s in stats.items():
        fails = ", ".join(f"{k}: {n}" for k, n in s["failures"].most_common(4)) or "-"
        ex = s["exit"]
        other = sum(n for k, n in ex.items() if k not in ("0", "1", "2"))
        codes = f"{ex['0']}/{ex['1']}/{ex['2']}/{other}"
        print(f"{c:16s} {s['inputs']:6d} {s['clean_inputs']:6d} {s['runs']:6d} {s['clean_runs']:6d} {codes:>17s} "
              f"{s['peak_rss_mib']:8.0f} {s['slowest'][0]:9.1f}  {fails}")  # fmt: skip
    tot = {k: sum(s[k] for s in stats.values()) for k in ("inputs", "clean_inputs", "runs", "clean_runs")}
    print(f"{'total':16s} {tot['inputs']:6d} {tot['clean_inputs']:6d} {tot['runs']:6d} {tot['clean_runs']:6d}  "
          f"({total:.0f} s)")  # fmt: skip
    print(
        f"\npeak RSS of the memory-bomb inputs (bound {ck.RSS_BOUND >> 20} MiB, address space {ck.ADDRESS_SPACE >> 20} MiB):"
    )
    for c, s in stats.items():
        for name, mib in s["bomb_peak_rss_mib"].items():
            print(f"  {c}/{name}: {mib:.0f} MiB{'  OVER' if mib * 2**20 > ck.RSS_BOUND else ''}")
    examples = [(c, k, e) for c, s in stats.items() for k, e in s["examples"].items()]
    if examples:
        print("\nexample failures:")
        for c, _k, e in examples[:40]:
            print(f"  {c}: {e}")
    if args.json:
        out = {
            "seed": args.seed,
            "n_per_class": args.n,
            "seconds": round(total, 1),
            "rss_bound_bytes": ck.RSS_BOUND,
            "address_space_bytes": ck.ADDRESS_SPACE,
            "classes": {
                c: dict(s, failures=dict(s["failures"]), exit=dict(s["exit"]), seconds=round(s["seconds"], 1))
                for c, s in stats.items()
            },
            "total": tot,
        }
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if tot["runs"] == tot["clean_runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
