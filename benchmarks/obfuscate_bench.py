#!/usr/bin/env python3
"""Obfuscation on every corpus job and a public trace: what the leak scan searched and found, the
simulated step before and after on two systems, and the speed.

    python benchmarks/obfuscate_bench.py [--json benchmarks/results/obfuscate_bench.json]

Jobs: the corpus (tests/data/corpus: DDP, FSDP, TP, PP, GPT-2, DLRM, recorded on CPU/gloo) and
ASTRA-sim's public ResNet-50 DDP trace (../shared/traces/chakra, where present). Systems:
`recorded` (the job's ranks, every node at its recorded time) and `switch` (the job's ranks on one
50 GB/s switch: communication by the network model, so bucketed sizes count). One secret for
every job, as a company sharing its fleet would use.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chakra_trace.convert.pytorch import read_collection  # noqa: E402
from chakra_trace.io.workload import Workload, write_comm_groups  # noqa: E402
from chakra_trace.simulate.presets import step_changes  # noqa: E402
from chakra_trace.synthesize.leaks import leak_scan  # noqa: E402
from chakra_trace.synthesize.obfuscate import LEVELS, obfuscate  # noqa: E402
from chakra_trace.validate import validate_workload  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "corpus"
PUBLIC = ROOT.parent / "shared" / "traces" / "chakra" / "resnet50_ddp.0.et.gz"
SECRET = b"benchmark secret"


def jobs() -> dict[str, Workload]:
    out = {}
    for j in json.loads((CORPUS / "index.json").read_text())["jobs"]:
        out[j["name"]] = read_collection(CORPUS / j["name"])
    if PUBLIC.exists():
        out["resnet50 (ASTRA-sim, public)"] = Workload.open(str(PUBLIC))
    return out


def _issues(w: Workload) -> list[tuple[str, int]]:
    return sorted((i.code, i.count) for i in validate_workload(w).issues)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    rows = []
    for name, w in jobs().items():
        nodes = sum(len(t) for t in {id(t): t for t in w.traces.values()}.values())
        for level in LEVELS:
            t0 = time.perf_counter()
            o = obfuscate(w, level, SECRET)
            wall = time.perf_counter() - t0
            with tempfile.TemporaryDirectory() as tmp:
                files = o.workload.save(Path(tmp) / "job")
                if o.workload.groups:
                    files.append(write_comm_groups(o.workload.groups, Path(tmp) / "job.comm_groups.json"))
                scan = leak_scan(w, files)
            systems = ("recorded", "switch") if len(w) > 1 or name.startswith("gpt2") else ("recorded",)
            steps = step_changes(w, o.workload, systems)
            row = {
                "job": name,
                "ranks": len(w),
                "nodes": nodes,
                "level": level,
                "searched": scan.searched,
                "found": scan.to_dict()["found_count"],
                # as valid as the original: the same issues (the public trace has cycles of its own)
                "valid": _issues(o.workload) == _issues(w),
                "steps": steps,
                "report": o.report.to_dict(),
                "nodes_per_s": nodes / wall if wall else None,
            }
            rows.append(row)
            changes = "  ".join(f"{s['system']} {s['change']:+.3%}" for s in steps)
            print(
                f"{name:30s} {level}  searched {sum(scan.searched.values()):5d}  found {row['found']}  "
                f"as valid as the original {row['valid']}  {changes}  {nodes / wall / 1e3:.0f}k nodes/s",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"secret_len": len(SECRET), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
