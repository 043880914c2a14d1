#!/usr/bin/env python3
"""Regenerate the corpus of real parallel training jobs (tests/data/corpus/) and its index.

    python benchmarks/corpus/regenerate.py              # every job, then index.json
    python benchmarks/corpus/regenerate.py --jobs ddp,dlrm
    python benchmarks/corpus/regenerate.py --index      # index.json from the traces there
    python benchmarks/corpus/regenerate.py --check      # exit 1 if index.json is stale

Each job (benchmarks/corpus/jobs/<job>.py: a small model with random weights) runs under
`chakra collect` on this machine's CPU (gloo on 127.0.0.1, one intra-op thread per process, a
free port), which records steps 2 and 3 of every rank into tests/data/corpus/<job>/.
index.json says per job what it is and what its traces hold (nodes and collectives after
conversion, the recorded step time, the bytes checked in); it is computed from the files alone
and names no host or absolute path, so `--check` holds on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
INDEX = CORPUS / "index.json"

#: name -> (ranks, parallelism); the script is jobs/<name>.py, one rank runs without torchrun
JOBS: dict[str, tuple[int, str]] = {
    "ddp": (2, "data parallel (DDP) on a small transformer LM"),
    "fsdp": (2, "fully sharded data parallel (FSDP2 fully_shard) on a small transformer LM"),
    "tp": (2, "tensor parallel (DTensor parallelize_module, column/row-wise) attention + MLP"),
    "pp": (2, "pipeline parallel (torch.distributed.pipelining, 2 stages, GPipe, 4 micro-batches)"),
    "dlrm": (4, "embedding tables sharded table-wise + data-parallel MLPs, uneven all_to_all (hot receiver rank 2)"),
    "gpt2": (1, "single rank: transformers GPT2LMHeadModel (2 layers, random weights)"),
}
#: the job files the collection keeps (its per-rank manifests and lock file are dropped)
KEEP = ("manifest.json", "rank")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_command(name: str, port: int | str = "<free port>") -> list[str]:
    """The job's command line under `chakra collect` (python, or torchrun for several ranks)."""
    ranks = JOBS[name][0]
    script = f"benchmarks/corpus/jobs/{name}.py"
    if ranks == 1:
        return ["python", script]
    launch = ["torchrun", "--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    return [*launch, script]


def collect(name: str) -> None:
    """Run one job under `chakra collect` into tests/data/corpus/<name>/."""
    out = CORPUS / name
    if out.exists():
        shutil.rmtree(out)
    cmd = job_command(name, _free_port())
    py = [sys.executable] if cmd[0] == "python" else [sys.executable, "-m", "torch.distributed.run"]
    argv = [sys.executable, "-m", "chakra_trace.cli", "collect", "--num-threads", "1", "-o", str(out), "--", *py]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # nothing downloaded
    subprocess.run([*argv, *cmd[1:]], cwd=ROOT, env=env, check=True)
    for f in out.iterdir():
        if not f.name.startswith(KEEP) or f.name.startswith("manifest.rank"):
            f.unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    for m in (manifest, *manifest["per_rank"].values()):
        m["command"][0] = "python"  # not this machine's interpreter path
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def entry(name: str) -> dict:
    """What index.json says of one job, computed from its folder alone."""
    from chakra_trace.analyze.critical_path import job_critical_path
    from chakra_trace.convert.pytorch import read_collection
    from chakra_trace.schema.enums import Attr, NodeType, collective_name

    folder = CORPUS / name
    manifest = json.loads((folder / "manifest.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = read_collection(folder)
    colls: Counter[str] = Counter()
    p2p: Counter[str] = Counter()
    for t in w.traces.values():
        coll = t.types == NodeType.COMM_COLL_NODE
        colls.update(collective_name(int(c)) for c in t.comm_type[coll & t.has(Attr.COMM_TYPE)])
        p2p.update(
            SEND=int((t.types == NodeType.COMM_SEND_NODE).sum()), RECV=int((t.types == NodeType.COMM_RECV_NODE).sum())
        )
    steps = {}  # per recorded step: the slowest rank's wall time
    for info in manifest["per_rank"].values():
        for s in info["steps"]:
            steps[s["step"]] = max(steps.get(s["step"], 0.0), float(s["wall_ms"]))
    traces = [f for f in folder.iterdir() if f.name.startswith("rank")]
    ranks, parallelism = JOBS[name]
    return {
        "name": name,
        "ranks": ranks,
        "parallelism": parallelism,
        "script": f"benchmarks/corpus/jobs/{name}.py",
        "command": " ".join(
            ["chakra collect --num-threads 1 -o", f"tests/data/corpus/{name}", "--", *job_command(name)]
        ),
        "torch_version": manifest["torch_version"],
        "steps_recorded": manifest["steps_recorded"],
        "nodes": {str(r): len(t) for r, t in sorted(w.traces.items())},
        "collectives": dict(sorted(colls.items())),
        "p2p": {k: v for k, v in sorted(p2p.items()) if v},
        "step_ms": round(sum(steps.values()) / len(steps), 3),
        "recorded_span_ms": round(job_critical_path(w).step_ns / 1e6, 3),
        "trace_bytes": sum(f.stat().st_size for f in traces),
    }


def index() -> dict:
    """Every job collected in tests/data/corpus/, in JOBS order."""
    return {"schema": "chakra-corpus/1", "jobs": [entry(j) for j in JOBS if (CORPUS / j / "manifest.json").is_file()]}


def _dump(d: dict) -> str:
    return json.dumps(d, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", help=f"comma-separated subset of {','.join(JOBS)}")
    ap.add_argument("--index", action="store_true", help="only rewrite index.json from the traces there")
    ap.add_argument("--check", action="store_true", help="exit 1 when index.json differs from the traces")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    if args.check:
        want = _dump(index())
        have = INDEX.read_text() if INDEX.exists() else ""
        if want != have:
            print(f"{INDEX.relative_to(ROOT)} is stale: run benchmarks/corpus/regenerate.py --index", file=sys.stderr)
            return 1
        print(f"{INDEX.relative_to(ROOT)} matches the traces")
        return 0
    if not args.index:
        jobs = args.jobs.split(",") if args.jobs else list(JOBS)
        unknown = sorted(set(jobs) - set(JOBS))
        if unknown:
            ap.error(f"unknown job(s) {', '.join(unknown)}; known: {', '.join(JOBS)}")
        CORPUS.mkdir(parents=True, exist_ok=True)
        for j in jobs:
            print(f"== {j}", flush=True)
            collect(j)
    INDEX.write_text(_dump(index()))
    print(f"wrote {INDEX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
