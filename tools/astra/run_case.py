#!/usr/bin/env python3
"""Run one case on a locally built ASTRA-sim analytical binary (for differential tests).

The binary is NOT part of this repository: it is built outside it (default
../astra-build/build/bin beside the checkout, see tools/astra/README.md). This helper only writes the
workload with chakra-trace, runs the binary and reads its finish times.

  run_case.py ar4_ring                       # a row of cases.csv; compares finish_ns, exposed_ns
  run_case.py --all                          # every row of cases.csv
  run_case.py --network N.yml --system S.json --workload coll:all_reduce:1048576 [--aware]
              [--comm-groups G.json]         # any input; prints the finish time

Environment: ASTRA_BIN_DIR (default ../astra-build/build/bin beside the checkout),
ASTRA_CASES (default ../shared/reference/astra-sim/cases.csv beside the checkout).
Exit status: 0 when every compared case matches, 1 on a mismatch or a failed run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # this checkout
sys.path.insert(0, str(ROOT / "src"))  # its chakra_trace

BIN_DIR = Path(os.environ.get("ASTRA_BIN_DIR", ROOT.parent / "astra-build" / "build" / "bin"))
CASES = Path(os.environ.get("ASTRA_CASES", ROOT.parent / "shared" / "reference" / "astra-sim" / "cases.csv"))
BINARIES = {"unaware": "AstraSim_Analytical_Congestion_Unaware", "aware": "AstraSim_Analytical_Congestion_Aware"}
FINISH_RE = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def npus_of(network_yml: Path) -> int:
    """Product of `npus_count: [ a, b, ... ]` in an analytical network file."""
    m = re.search(r"^npus_count:\s*\[([^\]]*)\]", network_yml.read_text(), re.M)
    if not m:
        raise SystemExit(f"{network_yml}: no npus_count")
    return math.prod(int(x) for x in m.group(1).split(",") if x.strip())


def run(
    backend: str, network: Path, system: Path, workload_spec: str, comm_groups: Path | None = None, timeout: float = 600
) -> dict:
    """Run ASTRA-sim once; {'finish_ns': max over NPUs, 'exposed_ns', 'per_npu', 'wall_s'}.
    With `comm_groups`, a `coll:TYPE:SIZE` workload is that collective in each NPU's group (as
    tests/test_simulate.py simulates it), not one over every NPU."""
    from chakra_trace.io.workload import read_comm_groups
    from chakra_trace.synthesize import from_spec
    from chakra_trace.synthesize.patterns import collective

    binary = BIN_DIR / BINARIES[backend]
    if not binary.exists():
        raise SystemExit(f"{binary} not found: build ASTRA-sim first (tools/astra/README.md)")
    with tempfile.TemporaryDirectory(prefix="astra_case_") as tmp:
        tmp = Path(tmp)
        npus = npus_of(network)
        if comm_groups and workload_spec.startswith("coll:"):
            _, ctype, size = workload_spec.split(":")
            workload = collective(npus, ctype, int(size), read_comm_groups(comm_groups))
        else:
            workload = from_spec(workload_spec, npus)
        workload.save(tmp / "workload")
        mem = tmp / "memory.json"
        mem.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
        cmd = [
            str(binary),
            f"--workload-configuration={tmp / 'workload'}",
            f"--system-configuration={system}",
            f"--network-configuration={network}",
            f"--remote-memory-configuration={mem}",
            f"--logging-folder={tmp / 'log'}",
        ]
        if comm_groups:
            cmd.append(f"--comm-group-configuration={comm_groups}")
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - t0
    out = ANSI_RE.sub("", p.stdout + p.stderr)
    per_npu = {int(r): (int(f), int(e)) for r, f, e in FINISH_RE.findall(out)}
    if p.returncode != 0 or not per_npu:
        raise RuntimeError(f"ASTRA-sim failed (rc {p.returncode}): {' '.join(cmd)}\n{out[-2000:]}")
    return {
        "finish_ns": max(f for f, _ in per_npu.values()),
        "exposed_ns": max(e for _, e in per_npu.values()),
        "per_npu": per_npu,
        "wall_s": wall,
        "cmd": cmd,
    }


def run_row(row: dict, cfg: Path, verbose: bool) -> bool:
    groups = cfg / row["comm_groups"] if row.get("comm_groups") else None
    try:
        r = run(row["backend"], cfg / row["network"], cfg / row["system"], row["workload"], groups)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{row['case']}: FAILED {e}")
        return False
    want = int(row["finish_ns"])
    ok = r["finish_ns"] == want
    exposed = ""
    if row.get("exposed_ns"):
        want_exposed = int(row["exposed_ns"])
        ok = ok and r["exposed_ns"] == want_exposed
        exposed = f", exposed {r['exposed_ns']} ({want_exposed})"
    print(
        f"{row['case']}: finish {r['finish_ns']} ns (cases.csv {want}){exposed} "
        f"{'OK' if ok else 'MISMATCH'}  [{r['wall_s']:.2f} s]"
    )
    if verbose:
        print("  " + " ".join(r["cmd"]))
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", nargs="*", help="case names from cases.csv")
    ap.add_argument("--all", action="store_true", help="every case of cases.csv")
    ap.add_argument("--network", type=Path)
    ap.add_argument("--system", type=Path)
    ap.add_argument("--workload", help="chakra_trace.synthesize spec, e.g. coll:all_reduce:1048576")
    ap.add_argument("--comm-groups", type=Path)
    ap.add_argument("--aware", action="store_true", help="congestion-aware backend")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the command lines")
    a = ap.parse_args()

    if a.network or a.system or a.workload:
        if not (a.network and a.system and a.workload):
            ap.error("--network, --system and --workload go together")
        r = run("aware" if a.aware else "unaware", a.network, a.system, a.workload, a.comm_groups)
        print(json.dumps({k: r[k] for k in ("finish_ns", "exposed_ns", "wall_s")}))
        if a.verbose:
            print(" ".join(r["cmd"]))
        return 0

    rows = list(csv.DictReader(CASES.open()))
    if not a.all:
        names = set(a.case)
        if not names:
            ap.error("name a case, or --all, or --network/--system/--workload")
        unknown = names - {r["case"] for r in rows}
        if unknown:
            ap.error(f"not in {CASES}: {', '.join(sorted(unknown))}")
        rows = [r for r in rows if r["case"] in names]
    results = [run_row(r, CASES.parent / "cfg", a.verbose) for r in rows]
    print(f"{sum(results)}/{len(results)} match")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
