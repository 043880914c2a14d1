#!/usr/bin/env python3
"""Linking table: every host/Kineto pair we have, how its ops were linked, collectives kept.

For each pair (the shared pytorch-cpu and param pairs, tests/data/shifted, and every rank of
every job of a corpus folder) it converts the host trace with its Kineto trace and alone,
and prints: the methods that linked host ops, the linked fraction, the similarity the
same-job check reads, the fraction the order alignment links alone (as if no id agreed), the collectives of the host trace alone and those kept with Kineto,
the ops kept with estimated times, and the conversion time. A pair that is not one job is
listed with the check's verdict (and converted anyway, for the collective counts).

    python benchmarks/link_table.py [--corpus tests/data/corpus] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import readme_tables

from chakra_trace.convert.linking import link_host, method_label
from chakra_trace.convert.pytorch import MIN_SIMILARITY, convert_pytorch
from chakra_trace.io.collect_folder import collection_files
from chakra_trace.io.kineto import read_kineto
from chakra_trace.io.pytorch_host import read_host_trace
from chakra_trace.schema.enums import NodeType

P2P = [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE]
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SHARED = Path(os.environ.get("CHAKRA_SHARED_TRACES", ROOT.parent / "shared" / "traces"))


def pairs(corpus: Path | None) -> list[tuple[str, Path, Path]]:
    out = []
    pc = SHARED / "pytorch-cpu"
    for n in ("mlp_rank0", "transformer_rank0", "ddp_rank0", "ddp_rank1"):
        out.append((f"pytorch-cpu/{n}", pc / f"{n}.et.json.gz", pc / f"{n}.kineto.json.gz"))
    out.append(("param/linear", SHARED / "param/linear_et.json.gz", SHARED / "param/linear_kineto.json.gz"))
    out.append(
        ("param/resnet (not one run)", SHARED / "param/resnet_et.json.gz", SHARED / "param/resnet_kineto.json.gz")
    )
    out.append(
        ("shifted window (recorded)", DATA / "shifted/shifted.et.json.gz", DATA / "shifted/shifted.kineto.json.gz")
    )
    out.append(("External id + 1 (synthesized)", DATA / "mlp_rank0.et.json.gz", DATA / "shifted/offset.kineto.json.gz"))
    out.append(("mlp ET + transformer Kineto", pc / "mlp_rank0.et.json.gz", pc / "transformer_rank0.kineto.json.gz"))
    if corpus is not None and corpus.is_dir():
        for job in sorted(p for p in corpus.iterdir() if p.is_dir()):
            try:
                files = collection_files(job)
            except Exception:  # noqa: BLE001 - a folder that is not a collection
                continue
            for r, (et, kin) in files.items():
                if kin:
                    out.append((f"corpus/{job.name} rank {r}", Path(et), Path(kin)))
    return [p for p in out if p[1].exists() and p[2].exists()]


def row(name: str, et: Path, kin: Path) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        trace, rep = convert_pytorch(et, kin, min_similarity=None)
        secs = time.perf_counter() - t0
        trace0, alone = convert_pytorch(et)
        by_order = link_host(read_host_trace(et), read_kineto(kin), methods=("align",)).counts
    lk = rep.linked
    host_c = Counter(t for t, _ in alone.collectives)
    kept_c = Counter(t for t, _ in rep.collectives)
    return {
        "pair": name,
        "methods": method_label(lk),
        "linked_fraction": round(lk["linked_fraction"], 4),
        "similarity": round(lk["similarity"], 4),
        "same_job": lk["similarity"] >= MIN_SIMILARITY,
        "host_ops": lk["host_ops"],
        "estimated": lk.get("estimated", 0),
        "host_collectives": sum(host_c.values()),
        "kept_collectives": sum(kept_c.values()),
        "collectives_equal": host_c == kept_c and sorted(alone.collectives) == sorted(rep.collectives),
        "p2p": int(np.isin(trace0.types, P2P).sum()),
        "kept_p2p": int(np.isin(trace.types, P2P).sum()),
        "align_alone": round(by_order["linked_fraction"], 4),
        "seconds": round(secs, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DATA / "corpus")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    rows = [row(*p) for p in pairs(args.corpus)]
    print(readme_tables.link_table(rows))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
