#!/usr/bin/env python3
"""Seeded random differential sweep: `chakra simulate --compat astra` against the real ASTRA-sim
binary, per NPU (finish time and exposed communication), on random networks, systems,
workloads, communicator groups and both backends (cases from `cases.py`).

  sweep.py --cases 1000 --seed 1 --out out/sweep.jsonl [--jobs 1]   # run (appends; rerun to resume)
  sweep.py --summary out/sweep.jsonl                        # table by class, features of differences
  sweep.py --reduce out/sweep.jsonl [--limit 50]            # which option makes each difference
  sweep.py --minimize out/sweep.jsonl [--per-cause 2]        # smallest differing case per cause
  sweep.py --record out/sweep.jsonl [out/min.jsonl] --to tests/data/astra-sim/sweep.jsonl [--max-npus 16 --per-class 1]
  sweep.py --recheck out/sweep.jsonl --out out/now.jsonl   # ours again on swept cases (no binary)
  sweep.py --recheck-fixtures tests/data/astra-sim/sweep.jsonl   # re-mark the fixtures by ours now

One JSON line per case: the case, both results and a verdict (exact, differ, astra-failed,
ours-failed). Development tool: it needs the binary built outside the repository (README.md here)
and never runs in CI.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cases as C
import run_case  # (puts this checkout's src/ on sys.path)

TIMEOUT_S = 60.0  # per binary run
HANG_TIMEOUT_S = 5.0  # for a case ASTRA-sim is known to loop forever on


# ----------------------------------------------------------------------------- running


def run_astra(case: dict, timeout: float = TIMEOUT_S) -> dict:
    """Run the binary; {'finish': [per NPU], 'exposed': [...], 'rc', 'wall_s'} or {'error', 'rc'}."""
    binary = run_case.BIN_DIR / run_case.BINARIES[case["backend"]]
    if not binary.exists():
        raise SystemExit(f"{binary} not found: build ASTRA-sim first (tools/astra/README.md)")
    npus = C.npus_of(case)
    with tempfile.TemporaryDirectory(prefix="astra_sweep_") as tmp:
        t = Path(tmp)
        C.workload_of(case).save(t / "workload")
        (t / "net.yml").write_text(C.network_yaml(case["network"]))
        (t / "sys.json").write_text(json.dumps(case["system"]))
        (t / "mem.json").write_text(json.dumps(case.get("memory") or {"memory-type": "NO_MEMORY_EXPANSION"}))
        cmd = [
            str(binary),
            f"--workload-configuration={t / 'workload'}",
            f"--system-configuration={t / 'sys.json'}",
            f"--network-configuration={t / 'net.yml'}",
            f"--remote-memory-configuration={t / 'mem.json'}",
            f"--logging-folder={t / 'log'}",
        ]
        if case.get("comm_groups"):
            (t / "groups.json").write_text(json.dumps(case["comm_groups"]))
            cmd.append(f"--comm-group-configuration={t / 'groups.json'}")
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=t, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {timeout:g} s", "rc": None}
        wall = time.perf_counter() - t0
    out = run_case.ANSI_RE.sub("", p.stdout + p.stderr)
    per = {int(r): (int(f), int(e)) for r, f, e in run_case.FINISH_RE.findall(out)}
    if len(per) != npus or set(per) != set(range(npus)):
        return {"error": f"rc {p.returncode}: {_last_words(out)}", "rc": p.returncode}
    res = {
        "finish": [per[r][0] for r in range(npus)],
        "exposed": [per[r][1] for r in range(npus)],
        "rc": p.returncode,
        "wall_s": round(wall, 3),
    }
    if p.returncode != 0:  # every NPU finished, then it crashed (e.g. a double free at exit)
        res["crash"] = out.strip().splitlines()[-1][:200] if out.strip() else f"rc {p.returncode}"
    return res


def _last_words(out: str) -> str:
    """The binary's complaint: its last lines that are not progress or info logging."""
    lines = [ln for ln in out.strip().splitlines() if ln.strip() and "[info]" not in ln and "finished," not in ln]
    lines = [re.sub(r"^\[[0-9: .-]+\] ", "", ln) for ln in lines[-2:]]  # (no timestamps: stable text)
    return " | ".join(lines)[:300] or "no output"


def run_ours(case: dict) -> dict:
    """Our simulator in-process, ASTRA-sim compatibility mode."""
    t0 = time.perf_counter()
    try:
        r = C.simulate_case(case)
    except Exception as e:  # (any refusal or bug is an outcome of its own)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    return {
        "finish": [int(x) for x in r.finish_ns],
        "exposed": [int(x) for x in r.exposed_comm_ns],
        "wall_s": round(time.perf_counter() - t0, 3),
    }


def verdict(astra: dict, ours: dict) -> str:
    if "error" in astra:
        return "astra-failed"
    if "error" in ours:
        return "ours-failed"
    return "exact" if astra["finish"] == ours["finish"] and astra["exposed"] == ours["exposed"] else "differ"


def run_one(case: dict) -> dict:
    known = C.astra_known_failure(case)
    hang = known is not None and "loops forever" in known
    astra = run_astra(case, HANG_TIMEOUT_S if hang else TIMEOUT_S)
    ours = run_ours(case)
    row = {"case": case, "class": C.case_class(case), "astra": astra, "ours": ours, "verdict": verdict(astra, ours)}
    if known:
        row["known_astra_failure"] = known
    return row


def sweep(n: int, seed: int, out: Path, jobs: int = 1) -> None:
    """Cases 0..n-1 of `seed`, appended to `out` one line each as they finish (cases already
    in `out` are skipped: rerun to resume); `jobs` > 1 runs that many cases at once."""
    done = set()
    if out.exists():
        for line in out.open():
            done.add(json.loads(line)["case"]["id"])
    out.parent.mkdir(parents=True, exist_ok=True)
    todo = [c for c in (C.random_case(seed, i) for i in range(n)) if c["id"] not in done]
    counts: collections.Counter = collections.Counter()
    t0 = time.time()
    with out.open("a") as f, concurrent.futures.ProcessPoolExecutor(jobs) if jobs > 1 else _Serial() as pool:
        for row in pool.map(run_one, todo):
            f.write(json.dumps(row) + "\n")
            f.flush()
            counts[row["verdict"]] += 1
            if sum(counts.values()) % 25 == 0:
                print(f"[{time.time() - t0:.0f} s] {sum(counts.values())}/{len(todo)} {dict(counts)}", flush=True)
    print(f"done: {dict(counts)} in {time.time() - t0:.0f} s")


class _Serial:
    """One case at a time in this process (the default: the binary is single-threaded anyway)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def map(fn, items):
        return map(fn, items)


def recheck(rows: list[dict], out: Path) -> None:
    """Ours again on recorded rows (ASTRA-sim's results kept: no binary needed), new verdicts to
    `out`: what a change to the simulator did to every case already swept."""
    counts: collections.Counter = collections.Counter()
    moved: collections.Counter = collections.Counter()
    with out.open("w") as f:
        for r in rows:
            new = dict(r, ours=run_ours(r["case"]))
            new["verdict"] = verdict(r["astra"], new["ours"])
            f.write(json.dumps(new) + "\n")
            counts[new["verdict"]] += 1
            if new["verdict"] != r["verdict"]:
                moved[f"{r['verdict']} -> {new['verdict']}"] += 1
    print(f"{len(rows)} cases: {dict(counts)}; changed: {dict(moved) or 'none'}")


def recheck_fixtures(path: Path) -> None:
    """Mark each recorded fixture again by what ours gives now (a fixed class loses its mark, a
    new difference gets its cause), keeping ASTRA-sim's results as recorded."""
    fixtures = read(path)
    moved: collections.Counter = collections.Counter()
    for fx in fixtures:
        if "finish" not in fx:
            continue
        same = verdict({"finish": fx["finish"], "exposed": fx["exposed"]}, run_ours(fx["case"])) == "exact"
        was = fx.pop("differs", None)
        if not same:
            fx["differs"] = C.cause_of(fx["case"])
        if bool(was) != (not same):
            moved["fixed" if same else "now differs"] += 1
    with path.open("w") as f:
        for fx in fixtures:
            f.write(json.dumps(fx, separators=(",", ":")) + "\n")
    (path.parent / "sweep_causes.json").write_text(json.dumps(C.CAUSES, indent=1) + "\n")
    print(f"{len(fixtures)} fixtures: {dict(moved) or 'no change'}")


# ----------------------------------------------------------------------------- reporting


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


OUTCOMES = ("exact", "differ", "astra-failed", "ours-failed")


def _table(rows: list[dict], title: str, key) -> list[str]:
    """Outcome counts by `key(row)` (rows whose key is None are left out), as markdown."""
    agg: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        k = key(r)
        if k is not None:
            agg[k][r["verdict"]] += 1
    lines = ["", f"| {title} | cases | " + " | ".join(OUTCOMES) + " |", "|---|---:|" + "---:|" * len(OUTCOMES)]
    for k in sorted(agg):
        c = agg[k]
        lines.append(f"| {k} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    return lines


def _single(r: dict) -> str | None:
    """'1D|all_reduce|ring|aware' for one collective on every NPU (all dimensions' algorithms)."""
    c = r["case"]
    spec = c["workload"].get("spec", "")
    if not spec.startswith("coll:"):
        return None
    t = spec.split(":")[1]
    names = {a.rstrip("0123456789") for a in c["system"][C.IMPL_KEYS[t]]}
    if len(c["network"]["npus_count"]) == 1:
        return f"1D | {t} | {names.pop()} | {c['backend']}"
    for label, which in (
        ("with doubleBinaryTree", {"doubleBinaryTree"}),
        ("with one*", {"oneRing", "oneDirect", "oneHalvingDoubling"}),
        ("with halvingDoubling", {"halvingDoubling"}),
    ):
        if names & which:
            return f"multi-D | {t} | {label} | {c['backend']}"
    return f"multi-D | {t} | ring/direct | {c['backend']}"


def summary(rows: list[dict], full: bool = False) -> str:
    total: collections.Counter = collections.Counter(r["verdict"] for r in rows)
    lines = [f"{len(rows)} cases: " + ", ".join(f"{total[o]} {o}" for o in OUTCOMES)]
    if full:
        lines += _table(
            rows, "class (dims:topology / workload:collectives / algorithms / backend / options)", lambda r: r["class"]
        )
    lines += _table(rows, "dims", lambda r: r["class"].split("|")[0].split(":")[0])
    lines += _table(rows, "workload", lambda r: r["class"].split("|")[1].split(":")[0])
    lines += _table(rows, "backend", lambda r: r["case"]["backend"])
    lines += _table(rows, "single collective: dims / collective / algorithms / backend", _single)
    causes = collections.Counter(C.cause_of(r["case"]) for r in rows if r["verdict"] == "differ")
    lines += ["", "| likeliest cause of a difference (cases.cause_of) | cases |", "|---|---:|"]
    lines += [f"| {k} | {n} |" for k, n in causes.most_common()]
    lines += ["", feature_table(rows)]
    fails = collections.Counter(_failure_kind(r["astra"]["error"]) for r in rows if r["verdict"] == "astra-failed")
    ours_f = collections.Counter(r["ours"]["error"][:120] for r in rows if r["verdict"] == "ours-failed")
    if fails:
        lines += ["", "| ASTRA-sim failure | cases |", "|---|---:|"] + [
            f"| {k} | {n} |" for k, n in fails.most_common()
        ]
    if ours_f:
        lines += ["", "| our failure | cases |", "|---|---:|"] + [f"| {k} | {n} |" for k, n in ours_f.most_common()]
    return "\n".join(lines)


_FAILURE_KINDS = (
    ("timeout", "timeout (loops forever)"),
    ("only support 1-dim", "aware backend: multi-dimensional network refused"),
    ("EventQueue.cpp", "assertion: event scheduled at the current time"),
    ("unknown communication type for HalvingDoubling", "halvingDoubling has no all-to-all"),
    ("GPU comm node id", "exit with unreleased collective nodes (a deadlock)"),
    ("chunk_size > 0", "assertion: chunk size 0"),
    ("Device.cpp", "aware backend: device assertion"),
    ("Attribute num_ops", "roofline: compute node without num_ops"),
    ("rc -11", "segmentation fault"),
    ("prev_size", "heap corruption (malloc abort)"),
    ("CallbackTrackerEntry", "assertion in CallbackTrackerEntry"),
    ("Invalid node_type", "abort: Invalid node_type (a METADATA_NODE)"),
    ("Statistics.cc", "abort: Invalid node_type (a METADATA_NODE)"),
    ("double free", "double free at exit"),
    ("malloc()", "heap corruption (malloc abort)"),
)


def _failure_kind(msg: str) -> str:
    for needle, kind in _FAILURE_KINDS:
        if needle in msg:
            return kind
    return re.sub(r"(/[^/\s:]+)+/([^/\s:]+)", r"\2", msg)[:160]  # (file names, not this machine's paths)


def feature_table(rows: list[dict]) -> str:
    """Per feature: how many compared cases have it, and what share of them differ."""
    compared = [r for r in rows if r["verdict"] in ("exact", "differ")]
    has: collections.Counter = collections.Counter()
    diff: collections.Counter = collections.Counter()
    for r in compared:
        for f in C.features(r["case"]):
            has[f] += 1
            diff[f] += r["verdict"] == "differ"
    n_diff = sum(r["verdict"] == "differ" for r in compared)
    base = n_diff / len(compared) if compared else 0
    lines = [f"| feature | cases | differ | share (all: {base:.0%}) |", "|---|---:|---:|---:|"]
    for f in sorted(has, key=lambda f: -diff[f] / has[f]):
        lines.append(f"| {f} | {has[f]} | {diff[f]} | {diff[f] / has[f]:.0%} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- reduction


def _variants(case: dict):
    """Simpler versions of a case, one change each: (what changed, case)."""
    s = case["system"]

    def with_system(**kv):
        c = json.loads(json.dumps(case))
        c["system"].update(kv)
        return c

    if s["preferred-dataset-splits"] != 1:
        yield "splits->1", with_system(**{"preferred-dataset-splits": 1})
    if s["active-chunks-per-dimension"] != 1:
        yield "active_chunks->1", with_system(**{"active-chunks-per-dimension": 1})
    if s["collective-optimization"] != "baseline":
        yield "opt->baseline", with_system(**{"collective-optimization": "baseline"})
    if s["scheduling-policy"] != "LIFO":
        yield "policy->LIFO", with_system(**{"scheduling-policy": "LIFO"})
    if s["endpoint-delay"] != 10:
        yield "endpoint_delay->10", with_system(**{"endpoint-delay": 10})
    for key in C.IMPL_KEYS.values():
        if any(a != "ring" for a in s[key]):
            yield f"{key}->ring", with_system(**{key: ["ring"] * len(s[key])})
    if case["backend"] == "aware":
        c = json.loads(json.dumps(case))
        c["backend"] = "unaware"
        yield "backend->unaware", c
    if case.get("comm_groups"):
        c = json.loads(json.dumps(case))
        c["comm_groups"] = None
        for n in c["workload"].get("nodes", []):
            n.pop("group", None)
        yield "no groups", c
    net = case["network"]
    if len(net["topology"]) > 1 or net["topology"][0] != "Ring":
        c = json.loads(json.dumps(case))
        c["network"]["topology"] = ["Ring"] * len(net["topology"])
        yield "topology->Ring", c
    if any(lat for lat in net["latency"]):
        c = json.loads(json.dumps(case))
        c["network"]["latency"] = [0] * len(net["latency"])
        yield "latency->0", c


def _structural(case: dict):
    """Smaller versions of a case: a dimension dropped or cut to 2 NPUs, a workload node
    dropped, plain bandwidths and latencies (not with communicator groups: their ranks would move)."""

    def copy():
        return json.loads(json.dumps(case))

    net = case["network"]
    ndims = len(net["npus_count"])
    if not case.get("comm_groups"):
        for d in range(ndims if ndims > 1 else 0):
            c = copy()
            for k in ("topology", "npus_count", "bandwidth", "latency"):
                del c["network"][k][d]
            for k in C.IMPL_KEYS.values():
                del c["system"][k][d]
            yield f"drop dimension {d}", c
        for d in range(ndims):
            if net["npus_count"][d] > 2:
                c = copy()
                c["network"]["npus_count"][d] = 2
                yield f"dimension {d} -> 2 NPUs", c
    nodes = case["workload"].get("nodes", [])
    for j in range(len(nodes) if len(nodes) > 1 else 0):
        c = copy()
        kept = c["workload"]["nodes"]
        del kept[j]
        for n in kept:  # (edges to the dropped node go; later indices shift down)
            n["deps"] = [d - (d > j) for d in n.get("deps", []) if d != j]
        yield f"drop node {j}", c
    if any(b != 50 for b in net["bandwidth"]):
        c = copy()
        c["network"]["bandwidth"] = [50] * ndims
        yield "bandwidth->50", c


def minimize(case: dict, budget: int = 60) -> tuple[dict, list[str]]:
    """Greedy reduction: apply one simplification after another while the case still differs
    (at most `budget` runs); the smallest differing case and the steps taken."""
    steps: list[str] = []
    runs = 0
    progress = True
    while progress and runs < budget:
        progress = False
        for what, c in [*_variants(case), *_structural(case)]:
            if C.astra_known_failure(c):
                continue
            runs += 1
            if run_one(c)["verdict"] == "differ":
                case, progress = c, True
                steps.append(what)
                break
            if runs >= budget:
                break
    return case, steps


def minimize_all(rows: list[dict], per_cause: int, out: Path | None) -> None:
    """Minimal differing cases, `per_cause` per cause (the smallest first)."""
    by: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        if r["verdict"] == "differ":
            by[C.cause_of(r["case"])].append(r)
    results = []
    for cause, rs in sorted(by.items()):
        rs.sort(key=lambda r: (C.npus_of(r["case"]), len(r["case"]["workload"].get("nodes", [0]))))
        for r in rs[:per_cause]:
            small, steps = minimize(r["case"])
            small = {**small, "id": f"{r['case']['id']}-min"}
            final = run_one(small)
            now = C.cause_of(small)  # (a reduction may leave only another cause standing)
            results.append({"cause": cause, "cause_now": now, "from": r["case"]["id"], "steps": steps, **final})
            a, o = final["astra"], final["ours"]
            print(f"{cause} -> {now} {r['case']['id']} ({len(steps)} steps): {json.dumps(small)}", flush=True)
            print(f"   ASTRA-sim {a.get('finish')} exposed {a.get('exposed')}")
            print(f"   ours      {o.get('finish')} exposed {o.get('exposed')}", flush=True)
    if out:
        out.write_text("".join(json.dumps(x) + "\n" for x in results))


def reduce_case(case: dict) -> list[str]:
    """Changes that make a differing case agree (each alone): the options the difference needs."""
    needed = []
    for what, c in _variants(case):
        if C.astra_known_failure(c):
            continue
        row = run_one(c)
        if row["verdict"] == "exact":
            needed.append(what)
    return needed


def reduce_all(rows: list[dict], limit: int, out: Path | None) -> None:
    diffs = [r for r in rows if r["verdict"] == "differ"][:limit]
    tally: collections.Counter = collections.Counter()
    results = []
    for r in diffs:
        needed = reduce_case(r["case"])
        tally.update(needed or ["(none alone)"])
        results.append({"id": r["case"]["id"], "class": r["class"], "fixed_by": needed})
        print(f"{r['case']['id']} {r['class']}: agrees when {', '.join(needed) or '(no single change)'}", flush=True)
    print("\nsingle changes that make a difference go away:")
    for k, n in tally.most_common():
        print(f"  {n:4d}  {k}")
    if out:
        out.write_text("".join(json.dumps(x) + "\n" for x in results))


# ----------------------------------------------------------------------------- recording


def _stratum(r: dict) -> tuple:
    """Coarse class for picking fixtures: dims, workload kind and collectives, backend, outcome
    (a difference's cause; a failure's kind)."""
    c = r["case"]
    kind = r["class"].split("|")[1]
    if r["verdict"] == "astra-failed":  # (one per failure kind and workload kind is plenty)
        return ("astra-failed", _failure_kind(r["astra"]["error"]), kind.split(":")[0], c["backend"])
    outcome = C.cause_of(c) if r["verdict"] == "differ" else "exact"
    return (len(c["network"]["npus_count"]), kind, c["backend"], outcome)


def record(rows: list[dict], to: Path, max_npus: int, per_class: int, seed: int) -> None:
    """A diverse subset as CI fixtures: up to `per_class` cases of every stratum (`_stratum`),
    small NPU counts only. A compared case keeps ASTRA-sim's per-NPU results (and, when it
    differs, the cause's name); an ASTRA-sim failure keeps its kind and what ours did."""
    import random

    rng = random.Random(seed)
    pool = [r for r in rows if C.npus_of(r["case"]) <= max_npus and r["verdict"] != "ours-failed"]
    rng.shuffle(pool)
    taken: collections.Counter = collections.Counter()
    keep = []
    for r in pool:
        if "steps" in r:  # a minimized case (--minimize): always kept, the smallest repro of its cause
            keep.append(r)
            continue
        key = _stratum(r)
        if taken[key] >= per_class * (3 if r["verdict"] == "exact" else 1):  # (exact ones guard the most)
            continue
        taken[key] += 1
        keep.append(r)
    keep.sort(key=lambda r: (r["class"], r["case"]["id"]))
    with to.open("w") as f:
        for r in keep:
            fixture: dict = {"case": r["case"], "class": r["class"]}
            if r["verdict"] == "astra-failed":
                fixture["astra_error"] = _failure_kind(r["astra"]["error"])
                fixture["ours"] = "finishes" if "error" not in r["ours"] else f"refuses: {r['ours']['error']}"
            else:
                fixture["finish"] = r["astra"]["finish"]
                fixture["exposed"] = r["astra"]["exposed"]
                if r["verdict"] == "differ":
                    fixture["differs"] = C.cause_of(r["case"])
            f.write(json.dumps(fixture, separators=(",", ":")) + "\n")
    (to.parent / "sweep_causes.json").write_text(json.dumps(C.CAUSES, indent=1) + "\n")
    v = collections.Counter(r["verdict"] for r in keep)
    print(f"{len(keep)} fixtures -> {to}: {dict(v)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once")
    ap.add_argument("--out", type=Path, help="results (JSON lines), appended to")
    ap.add_argument("--summary", type=Path, metavar="RESULTS")
    ap.add_argument("--full", action="store_true", help="--summary: also the table by fine class")
    ap.add_argument("--reduce", type=Path, metavar="RESULTS")
    ap.add_argument("--limit", type=int, default=50, help="--reduce: at most this many differing cases")
    ap.add_argument("--reduce-out", type=Path)
    ap.add_argument("--minimize", type=Path, metavar="RESULTS", help="smallest differing case per cause")
    ap.add_argument("--per-cause", type=int, default=2, help="--minimize: cases per cause")
    ap.add_argument("--record", type=Path, metavar="RESULTS", nargs="+", help="results files (sweeps, --minimize)")
    ap.add_argument("--to", type=Path, default=Path("tests/data/astra-sim/sweep.jsonl"))
    ap.add_argument("--max-npus", type=int, default=16)
    ap.add_argument("--per-class", type=int, default=3)
    ap.add_argument("--one", metavar="ID", help="run one case (sSEED-INDEX) and print its row")
    ap.add_argument("--recheck", type=Path, metavar="RESULTS", nargs="+", help="ours again on swept cases -> --out")
    ap.add_argument("--recheck-fixtures", type=Path, metavar="FIXTURES", help="re-mark recorded fixtures in place")
    a = ap.parse_args()
    if a.summary:
        print(summary(read(a.summary), a.full))
    elif a.reduce:
        reduce_all(read(a.reduce), a.limit, a.reduce_out)
    elif a.minimize:
        minimize_all(read(a.minimize), a.per_cause, a.reduce_out)
    elif a.record:
        record([r for path in a.record for r in read(path)], a.to, a.max_npus, a.per_class, a.seed)
    elif a.recheck:
        if not a.out:
            ap.error("--recheck needs --out")
        recheck([r for path in a.recheck for r in read(path)], a.out)
    elif a.recheck_fixtures:
        recheck_fixtures(a.recheck_fixtures)
    elif a.one:
        seed, index = a.one[1:].split("-")
        print(json.dumps(run_one(C.random_case(int(seed), int(index))), indent=1))
    elif a.out:
        sweep(a.cases, a.seed, a.out, a.jobs)
    else:
        ap.error("--out, --summary, --reduce, --record or --one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
