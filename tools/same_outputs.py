"""Do two revisions of chakra-trace print and write the same things? The check a refactor owes.

Runs one list of `chakra` commands (every analysis, the simulator on presets, validation,
conversion, timelines and the report, over the recorded corpus jobs of tests/data/corpus) with the
code of a base revision and with the working tree, each in a fresh process, and compares what
each printed (JSON) and wrote, byte for byte. Only what a run cannot repeat is left out: wall
times, the report's "generated" stamp, and the output folder's own path. Prints one line per
command and exits 1 when any differs, naming the first difference.

    python tools/same_outputs.py d126ce2                  # base revision vs the working tree
    python tools/same_outputs.py d126ce2 --jobs ddp pp    # fewer jobs
    python tools/same_outputs.py d126ce2 --allow report   # a difference the change means to make

The base is checked out as a git worktree under out/same-outputs/base (its C kernels built in
place, as `pip install -e .` does); nothing outside out/same-outputs is written.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
OUT = ROOT / "out" / "same-outputs"
#: keys whose values a run cannot repeat (seconds it took, when it ran)
VOLATILE = {"wall_s", "generated", "elapsed_s", "seconds"}

#: {name: argv} per job; "{job}" is the job's folder, "{out}" a folder for the command's files
COMMANDS = {
    "info": ["info", "{job}", "--json"],
    "validate": ["validate", "{job}", "--json"],
    "breakdown": ["analyze", "breakdown", "{job}", "--json"],
    "critical-path": ["analyze", "critical-path", "{job}", "--json"],
    "top": ["analyze", "top", "{job}", "--json"],
    "collectives": ["analyze", "collectives", "{job}", "--json"],
    "imbalance": ["analyze", "imbalance", "{job}", "--json"],
    "matrix": ["analyze", "matrix", "{job}", "--json"],
    "kernels": ["analyze", "kernels", "{job}", "--json"],
    "temporal": ["analyze", "temporal", "{job}", "--json"],
    "idle": ["analyze", "idle", "{job}", "--json"],
    "overlap": ["analyze", "overlap", "{job}", "--json"],
    "stragglers": ["analyze", "stragglers", "{job}", "--json"],
    "kernels-of-nodes": ["analyze", "kernels", "{job}", "--source", "chakra", "--json"],
    "overlap-simulated": ["analyze", "overlap", "{job}", "--simulate", "switch", "--json"],
    "simulate-dgx": ["simulate", "{job}", "--system", "dgx-8x8", "--json"],
    "simulate-aware": ["simulate", "{job}", "--system", "torus-8x8", "--congestion-aware", "--json"],
    "simulate-astra": ["simulate", "{job}", "--system", "dgx-8x8", "--compat", "astra", "--json"],
    "simulate-recorded": ["simulate", "{job}", "--system", "recorded", "--json"],
    "timeline": ["timeline", "{job}", "-o", "{out}/timeline.json.gz"],
    "convert": ["convert", "pytorch", "{job}", "-o", "{out}/job"],
    "report": ["report", "{job}", "--simulate", "switch", "--timeline-events", "2000", "-o", "{out}/report.html"],
}


def _tree(base: str) -> Path:
    """The base revision checked out (once) with its kernels built."""
    tree = OUT / "base"
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", base], check=True, capture_output=True, text=True)
    want = rev.stdout.strip()
    if tree.is_dir():
        have = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
        if have.stdout.strip() == want:
            return tree
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), want], check=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True, capture_output=True
    )
    return tree


def _run(src: Path, argv: list[str], out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(src), "CHAKRA_TRACE_CACHE_DIR": str(out.parent / "cache"), "NO_COLOR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "chakra_trace.cli", *argv], env=env, capture_output=True, text=True, timeout=1800
    )
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def _clean(x, out: str):
    """`x` without what a run cannot repeat, and with its output folder's path as one word."""
    if isinstance(x, dict):
        return {k: _clean(v, out) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_clean(v, out) for v in x]
    if isinstance(x, str):
        return x.replace(out, "{out}")
    return x


def _text(text: str, out: str) -> str:
    """Printed text with its seconds (how long a step took), a page's size (it follows the
    renderer's script; the document in it is compared as a file) and its output folder as words."""
    text = re.sub(r"\d+(?:\.\d+)? s\)", "N s)", text.replace(out, "{out}"))
    return re.sub(r"\(\d+(?:\.\d+)? MB, ", "(N MB, ", text)


def _report_doc(path: Path) -> dict:
    """The document a report page embeds (its timeline blocks' traces unpacked)."""
    text = path.read_text()
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    if m is None:
        return {"page": text}
    doc = json.loads(m.group(1))  # (its "<\/" and "\u003c!--" escapes are JSON's own)
    for sec in doc.get("sections", []):
        for b in sec.get("blocks", []):
            if "trace_gz" in b:
                b["trace_gz"] = json.loads(gzip.decompress(base64.b64decode(b["trace_gz"])))
    return doc


def _files(folder: Path, out: str) -> dict:
    got = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = str(f.relative_to(folder))
        if f.suffix == ".html":
            got[rel] = _clean(_report_doc(f), out)
        elif f.name.endswith((".json", ".json.gz")):
            raw = gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()
            got[rel] = _clean(json.loads(raw), out)
        else:
            got[rel] = f.read_bytes().hex()
    return got


def _output(src: Path, argv: list[str], out: Path) -> dict:
    res = _run(src, [a.replace("{out}", str(out)) for a in argv], out)
    try:
        printed = _clean(json.loads(res["stdout"]), str(out)) if "--json" in argv else _text(res["stdout"], str(out))
    except json.JSONDecodeError:
        printed = _text(res["stdout"], str(out))
    return {"rc": res["rc"], "printed": printed, "files": _files(out, str(out)), "stderr": res["stderr"][-2000:]}


def _first_difference(a, b, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where or '.'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'head' if k in b else 'base'}"
            d = _first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where or '.'}: {str(a)[:120]!r} vs {str(b)[:120]!r}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="the revision to compare the working tree with")
    ap.add_argument("--jobs", nargs="*", default=None, help="corpus jobs (default: all of tests/data/corpus)")
    ap.add_argument("--commands", nargs="*", default=None, help=f"of {', '.join(COMMANDS)} (default: all)")
    ap.add_argument("--allow", nargs="*", default=[], help="commands whose difference is intended (listed, not failed)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    jobs = a.jobs or sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
    names = a.commands or list(COMMANDS)
    base = _tree(a.base) / "src"
    head = ROOT / "src"
    for side in ("base-out", "head-out"):
        shutil.rmtree(OUT / side, ignore_errors=True)
    cases = [(job, name) for job in jobs for name in names]

    def one(case):
        job, name = case
        argv = [x.replace("{job}", str(CORPUS / job)) for x in COMMANDS[name]]
        got = [_output(src, argv, OUT / side / job / name) for src, side in ((base, "base-out"), (head, "head-out"))]
        return case, _first_difference(got[0], got[1]), got

    bad = 0
    with ThreadPoolExecutor(a.workers) as pool:
        for (job, name), diff, got in pool.map(one, cases):
            status = "same" if diff is None else ("intended" if name in a.allow else "DIFFERENT")
            bad += status == "DIFFERENT"
            print(f"{status:9} {job:6} {name:18} rc {got[1]['rc']}" + (f"  {diff}" if diff else ""), flush=True)
    print(f"{len(cases) - bad} of {len(cases)} the same or intended")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
