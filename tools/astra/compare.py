#!/usr/bin/env python3
"""Compare `chakra simulate --compat astra` with the real ASTRA-sim on a grid of single collectives
(networks x systems x collectives x sizes), per NPU, and list every difference.

    compare.py --config ring4x4.yml:ring_2d_s4_a1.json --config sw16.yml:direct_1d_s4_a1.json:aware \\
               --collectives all_reduce,all_gather --sizes 1048576,1000003 [--json OUT]

A config is NETWORK.yml:SYSTEM.json[:aware], relative to --cfg (default: the reference cfg folder).
Exit status 1 when some case differs (or the binary fails). The binary is built outside the
repository (tools/astra/README.md); this is a development tool, not part of CI.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from pathlib import Path

import run_case  # (beside this file: puts this checkout's src/ on sys.path)

CFG = run_case.CASES.parent / "cfg"


def ours(network: Path, system: Path, spec: str, aware: bool) -> dict:
    from chakra_trace.simulate import simulate
    from chakra_trace.simulate.config import Network
    from chakra_trace.synthesize import from_spec

    net = Network.from_yaml(network)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate(from_spec(spec, net.npus), net, system, compat=True, aware=aware)
    return {"per_npu": res.finish_ns.tolist(), "exposed_ns": int(res.exposed_comm_ns.max())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", required=True, help="NETWORK.yml:SYSTEM.json[:aware]")
    ap.add_argument("--collectives", default="all_reduce,reduce_scatter,all_gather,all_to_all")
    ap.add_argument("--sizes", default="1048576", help="bytes, comma-separated")
    ap.add_argument("--cfg", type=Path, default=CFG, help="folder of the config files")
    ap.add_argument("--json", type=Path, help="write every case and both results here")
    args = ap.parse_args()
    rows, differ = [], 0
    configs = [c.split(":") for c in args.config]
    sizes = [int(x) for x in args.sizes.split(",")]
    for cfg, coll, size in itertools.product(configs, args.collectives.split(","), sizes):
        network, system, aware = args.cfg / cfg[0], args.cfg / cfg[1], cfg[2:] == ["aware"]
        spec = f"coll:{coll}:{size}"
        mine = ours(network, system, spec, aware)
        try:
            ref = run_case.run("aware" if aware else "unaware", network, system, spec, timeout=120)
            ref_npu = [ref["per_npu"][r][0] for r in sorted(ref["per_npu"])]
            same = ref_npu == mine["per_npu"] and ref["exposed_ns"] == mine["exposed_ns"]
            theirs = {"per_npu": ref_npu, "exposed_ns": ref["exposed_ns"]}
        except (RuntimeError, OSError) as e:  # (ASTRA-sim's own failures: see differences-found.md)
            same, theirs = False, {"error": str(e).splitlines()[0]}
        differ += not same
        rows.append(
            {
                "network": cfg[0],
                "system": cfg[1],
                "aware": aware,
                "workload": spec,
                "equal": same,
                "ours": mine,
                "astra_sim": theirs,
            }
        )
        if not same:
            t = theirs.get("per_npu", theirs)
            print(
                f"DIFF {cfg[0]} {cfg[1]}{' aware' if aware else ''} {spec}: ours max {max(mine['per_npu'])}, "
                f"ASTRA-sim {max(t) if isinstance(t, list) else t}"
            )
    print(f"{len(rows) - differ}/{len(rows)} equal")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
