#!/usr/bin/env python3
"""Does the real ASTRA-sim read every kind of `.et` chakra-trace writes, and agree with
`--compat astra` on it? Converted PyTorch jobs (tests/data/corpus/*), ASTRA-sim 1.0 text
workloads (ours, tests/data/text/*, and ASTRA-sim's own, read from an ASTRA-sim clone) and
synthetic workloads, each on a ring (and a congestion-aware fully connected network) of its
ranks, as written and after `chakra convert astra-sim` (which drops the METADATA nodes ASTRA-sim
HEAD aborts on and names groups as it reads them); ours is run on the file as written, except
where the export evened a collective whose size differs across its members (`--even-sizes max`:
ASTRA-sim deadlocks on those): then on the export.

  interop.py [--md tools/astra/INTEROP.md] [--astra-src PATH]

`--astra-src` (or ASTRA_SRC): a clone of https://github.com/astra-sim/astra-sim. Its text
workloads are not in this repository (it keeps only data it made); each is read at the commit
listed in ASTRA_TEXT (`git show`; ASTRA-sim HEAD no longer has them), else from the work tree.
Without it, the ASTRA-sim text workloads are skipped, with a row and a message saying so.

Development tool (needs the binary, see README.md); the converters are run, never changed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import run_case  # (puts this checkout's src/ on sys.path)
from sweep import _failure_kind, _last_words

ROOT = run_case.ROOT
SYSTEM = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "all-reduce-implementation": ["ring"],
    "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"],
    "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
}
TEXT = {  # our text workloads (tests/data/text) -> convert text options
    "micro_allreduce.txt": ["--npus", "4"],
    "dlrm_hybrid.txt": ["--npus", "4"],
    "mlp_data_model.txt": ["--npus", "8", "--model-parallel", "2"],
    "transformer_fwd_in_bckwd.txt": ["--npus", "8"],
}
#: ASTRA-sim's text workloads: path in its repository -> (commit to read it at, convert text options).
#: The commits are those the 2026-11-26 table (INTEROP.md) ran on; microAllReduce.txt later became a
#: HYBRID_TRANSFORMER file, and HEAD (518bd51) has none of the four.
ASTRA_TEXT = {
    "inputs/workload/microAllReduce.txt": ("929770e1290fbfa8ef75bab910efecf651d23e06", ["--npus", "4"]),
    "inputs/workload/ASTRA-sim-1.0/DLRM_HybridParallel.txt": (
        "15935dabe62badae3722a89c2854b9f6b74059ad",
        ["--npus", "4"],
    ),
    "examples/text_converter/text_workloads/MLP_HybridParallel_Data_Model.txt": (
        "9d8bad5a7fb2f7c07422bfbdd7a91e637a871248",
        ["--npus", "8", "--model-parallel", "2"],
    ),
    "inputs/workload/Transformer_HybridParallel_Fwd_In_Bckwd.txt": (
        "461d502fa515ae44477748866af7edbe18dd8ea1",
        ["--npus", "8"],
    ),
}
ENV_ASTRA_SRC = "ASTRA_SRC"
SYNTHETIC = (
    "coll:all_reduce:1048576",
    "coll:all_to_all:65536",
    "train:layers=4:comp_us=50:size=1048576",
    "p2p:size=65536",
)


def chakra(*args: str) -> subprocess.CompletedProcess:
    env_path = str(ROOT / "src")
    return subprocess.run(
        [sys.executable, "-m", "chakra_trace.cli", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )


def network(topology: str, npus: int) -> str:
    return f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n"


def astra(prefix: Path, npus: int, aware: bool, groups: Path | None, tmp: Path) -> dict:
    binary = run_case.BIN_DIR / run_case.BINARIES["aware" if aware else "unaware"]
    (tmp / "net.yml").write_text(network("FullyConnected" if aware else "Ring", npus))
    (tmp / "sys.json").write_text(json.dumps(SYSTEM))
    (tmp / "mem.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    cmd = [
        str(binary),
        f"--workload-configuration={prefix}",
        f"--system-configuration={tmp / 'sys.json'}",
        f"--network-configuration={tmp / 'net.yml'}",
        f"--remote-memory-configuration={tmp / 'mem.json'}",
        f"--logging-folder={tmp / 'log'}",
    ]
    if groups:
        cmd.append(f"--comm-group-configuration={groups}")
    try:
        p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "timeout after 120 s"}
    out = run_case.ANSI_RE.sub("", p.stdout + p.stderr)
    per = {int(r): (int(f), int(e)) for r, f, e in run_case.FINISH_RE.findall(out)}
    if sorted(per) != list(range(npus)):
        return {"error": f"rc {p.returncode}: {_last_words(out)}"}
    return {"finish": [per[r][0] for r in range(npus)], "exposed": [per[r][1] for r in range(npus)]}


def ours(prefix: Path, npus: int, aware: bool, groups: Path | None, tmp: Path) -> dict:
    from chakra_trace.io.workload import Workload
    from chakra_trace.simulate import simulate

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = Workload.open(prefix, groups)
            r = simulate(w, tmp / "net.yml", SYSTEM, compat=True, aware=aware)
    except Exception as e:  # (reported, not raised: this is a survey)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    return {"finish": [int(x) for x in r.finish_ns], "exposed": [int(x) for x in r.exposed_comm_ns]}


def exported(prefix: Path, groups: Path | None, out: Path) -> tuple[Path, Path | None, str]:
    """`chakra convert astra-sim` of the job: its prefix, comm-groups file, and what it did."""
    args = ["convert", "astra-sim", str(prefix), "-o", str(out), "--even-sizes", "max", "--json"]
    p = chakra(*args, *(["--comm-groups", str(groups)] if groups else []))
    if p.returncode:
        raise RuntimeError(p.stderr.strip()[-300:])
    res = json.loads(p.stdout)
    dropped = sum(res["dropped"].values())
    new_groups = Path(res["comm_groups_file"]) if res["comm_groups_file"] else None
    did = [f"{dropped} METADATA dropped"] if dropped else []
    did += [f"{len(res['uneven'])} uneven collectives evened"] if res["uneven"] else []
    return out, new_groups, ", ".join(did) or "as is"


def compare(a: dict, o: dict) -> str:
    if "error" in a:
        return "ASTRA-sim failed"
    if "error" in o:
        return "ours failed"
    return "equal" if a == o else f"differ (max {max(a['finish'])} vs {max(o['finish'])})"


def show(r: dict) -> str:
    if "error" in r:
        return f"fails: {_failure_kind(r['error'])}"
    return f"{max(r['finish']):,} ns"


def astra_text(src: Path, rel: str, commit: str) -> tuple[bytes, str]:
    """One of ASTRA-sim's text workloads from the clone `src`: its bytes and where they came from
    (the pinned commit where the clone has it, else the work tree). FileNotFoundError if neither."""
    p = subprocess.run(["git", "-C", str(src), "show", f"{commit}:{rel}"], capture_output=True)
    if p.returncode == 0:
        return p.stdout, f"at {commit[:7]}"
    if (src / rel).is_file():
        return (src / rel).read_bytes(), "work tree"
    raise FileNotFoundError(
        f"{rel}: not at {commit[:7]} in {src} (git: {' '.join(p.stderr.decode().split())[:120]}) nor in its work tree"
    )


def text_job(name: str, path: Path, opts: list[str], tmp: Path, how: str):
    prefix = tmp / "text" / name.replace("/", "_").removesuffix(".txt")
    prefix.parent.mkdir(exist_ok=True, parents=True)
    p = chakra("convert", "text", str(path), "-o", str(prefix), *opts)
    npus = int(opts[1])
    groups = Path(f"{prefix}.comm_groups.json")
    if p.returncode:
        return name, None, npus, None, f"convert text failed: {p.stderr.strip()[-200:]}"
    return name, prefix, npus, groups if groups.exists() else None, f"{how}chakra convert text {' '.join(opts)}"


def jobs(tmp: Path, astra_src: Path | None):
    """(name, prefix, npus, comm-groups file or None, how it was made)"""
    index = json.loads((ROOT / "tests/data/corpus/index.json").read_text())
    for job in index["jobs"]:
        prefix = tmp / job["name"] / job["name"]
        p = chakra("convert", "pytorch", str(ROOT / "tests/data/corpus" / job["name"]), "-o", str(prefix))
        if p.returncode:
            yield job["name"], None, job["ranks"], None, f"convert pytorch failed: {p.stderr.strip()[-200:]}"
            continue
        yield f"corpus/{job['name']}", prefix, job["ranks"], None, "chakra convert pytorch"
    for name, opts in TEXT.items():
        yield text_job(f"text/{name}", ROOT / "tests/data/text" / name, opts, tmp, "")
    if astra_src is None:
        yield (
            "ASTRA-sim's text workloads",
            None,
            0,
            None,
            f"not run: no ASTRA-sim clone given (--astra-src PATH or {ENV_ASTRA_SRC})",
        )
    else:
        for rel, (commit, opts) in ASTRA_TEXT.items():
            name = f"astra-sim/{rel}"
            try:
                data, where = astra_text(astra_src, rel, commit)
            except FileNotFoundError as e:
                yield name, None, int(opts[1]), None, f"not run: {e}"
                continue
            local = tmp / "astra-src" / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(data)
            yield text_job(name, local, opts, tmp, f"{where}: ")
    from chakra_trace.synthesize import from_spec

    for spec in SYNTHETIC:
        prefix = tmp / "synthetic" / spec.replace(":", "_").replace("=", "")
        prefix.parent.mkdir(exist_ok=True, parents=True)
        from_spec(spec, 4).save(prefix)
        yield f"synthetic {spec}", prefix, 4, None, "synthesize.from_spec (4 NPUs)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, help="write the table here (markdown)")
    ap.add_argument(
        "--astra-src",
        type=Path,
        default=os.environ.get(ENV_ASTRA_SRC) or None,
        help=f"a clone of ASTRA-sim, to run its text workloads too (default: ${ENV_ASTRA_SRC}; without it they are skipped)",
    )
    a = ap.parse_args()
    if a.astra_src is None:
        print(
            f"interop: ASTRA-sim's own text workloads skipped: give a clone of "
            f"https://github.com/astra-sim/astra-sim with --astra-src PATH (or {ENV_ASTRA_SRC}=PATH)",
            file=sys.stderr,
        )
    elif not a.astra_src.is_dir():
        ap.error(f"--astra-src {a.astra_src}: not a folder")
    rows = [
        "| file | made by | backend | ASTRA-sim on it | after `chakra convert astra-sim`: ASTRA-sim | ours "
        "(`--compat astra`) | equal? |",
        "|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="astra_interop_") as t:
        tmp = Path(t)
        for name, prefix, npus, groups, how in jobs(tmp, a.astra_src):
            if prefix is None:
                rows.append(f"| {name} | {how} | - | - | - | - | - |")
                continue
            for aware in (False, True):
                if npus < 2:
                    rows.append(
                        f"| {name} | {how} | - | not run: 1 rank (ASTRA-sim needs >= 2 NPUs per dimension) | - | - | - |"
                    )
                    break
                run = tmp / f"run_{aware}"
                run.mkdir(exist_ok=True)
                ra = astra(prefix, npus, aware, groups, run)
                ro = ours(prefix, npus, aware, groups, run)
                out = tmp / "exported" / prefix.name
                out.parent.mkdir(exist_ok=True)
                xp, xg, did = exported(prefix, groups, out)
                rx = astra(xp, npus, aware, xg, run)
                if "evened" in did:  # (the sizes changed: compare like with like)
                    ro = ours(xp, npus, aware, xg, run)
                backend = "aware (FC)" if aware else "unaware (ring)"
                line = (
                    f"| {name} | {how} | {backend} | {show(ra)} | {did}: {show(rx)} | {show(ro)} | {compare(rx, ro)} |"
                )
                rows.append(line)
                print(line, flush=True)
    table = "\n".join(rows)
    if a.md:
        a.md.write_text(table + "\n")
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
