#!/usr/bin/env python3
"""Re-identification of obfuscated corpus jobs, per level: the share of nodes each attack of
`chakra_trace.synthesize.reidentify` names right.

    python benchmarks/obfuscate_reid.py [--json benchmarks/results/obfuscate_reid.json] [--secrets 3]

Jobs: the corpus (tests/data/corpus), rank 0 of each. The attacker of ``position`` and
``structure`` holds the original trace; the one of ``reference`` holds the other five corpus
jobs only (public traces of other models). Each level runs under `--secrets` random-looking
secrets (the secret picks level d's splits and order): the table gives the mean and, in the
JSON, every run. Figures without the ``[host]`` gap nodes are the ones that say something: any
attacker names the most frequent op.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from chakra_trace.convert.pytorch import read_collection  # noqa: E402
from chakra_trace.synthesize.obfuscate import LEVELS, obfuscate  # noqa: E402
from chakra_trace.synthesize.reidentify import ATTACKS, reidentify  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "corpus"


def measure(secrets: int) -> list[dict]:
    names = [j["name"] for j in json.loads((CORPUS / "index.json").read_text())["jobs"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jobs = {n: read_collection(CORPUS / n) for n in names}
    rows = []
    for name, w in jobs.items():
        refs = [jobs[o].traces[0] for o in names if o != name]
        for level in LEVELS:
            for k in range(secrets):
                secret = f"benchmark secret number {k}".encode()
                t0 = time.perf_counter()
                o = obfuscate(w, level, secret)
                res = reidentify(w.traces[0], o.workload.traces[0], o.origins[0], refs)
                rows.append(
                    {
                        "job": name,
                        "level": level,
                        "secret": k,
                        "nodes": len(w.traces[0]),
                        "obfuscated_nodes": len(o.workload.traces[0]),
                        "seconds": time.perf_counter() - t0,
                        **{f"{a}_named": res[a].named for a in ATTACKS},
                        **{f"{a}_named_without_host": res[a].named_without_host for a in ATTACKS},
                    }
                )
    return rows


def table(rows: list[dict]) -> str:
    """Per job and level, each attack's mean share named right without (and with) `[host]`."""
    out = ["| job | level | " + " | ".join(ATTACKS) + " |", "|---|---|" + "---:|" * len(ATTACKS)]
    keys = sorted({(r["job"], r["level"]) for r in rows}, key=lambda k: (k[0], LEVELS.index(k[1])))
    for job, level in keys:
        sel = [r for r in rows if r["job"] == job and r["level"] == level]
        cells = []
        for a in ATTACKS:
            rest = sum(r[f"{a}_named_without_host"] for r in sel) / len(sel)
            every = sum(r[f"{a}_named"] for r in sel) / len(sel)
            cells.append(f"{rest:.0%} ({every:.0%})")
        out.append(f"| {job} | {level} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--secrets", type=int, default=3, help="secrets per level (level d's draws depend on it)")
    args = ap.parse_args(argv)
    rows = measure(args.secrets)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
