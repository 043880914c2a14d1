"""Run the reading commands over hostile inputs and check the properties issue 13 promises.

A command given any input (see SECURITY.md) must: exit 0 or 2 (1 only where documented:
`validate` with errors), never print a traceback or an "internal error", on exit 2 print exactly
one stderr line `error: ...` naming the file, stay under the memory bound, leave no output or
temporary file behind when it fails, and escape hostile strings in what it writes. A trace that
`validate` rejects must be refused by `simulate`.

Bombs run in a subprocess under `resource` limits (address space, file size, wall time) and the
child's own peak RSS is read from `os.wait4`; the rest can run in-process for speed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import fuzz_shared as fs
from fuzz_corpus import CHAKRA_JSON, GROUPS, HOST, KINETO, NETWORK, SYSTEM, TRACE, XSS, Input

ADDRESS_SPACE = 2 << 30  # RLIMIT_AS of every child: a bomb that gets past the guards dies here, not the machine
RSS_BOUND = 1 << 30  # the documented bound (SECURITY.md): peak RSS of one command on any fuzz input
FILE_SIZE = 256 << 20  # RLIMIT_FSIZE: an output without bound (to-json of /dev/zero) stops here
TIMEOUT_S = 20.0

# the commands documented to exit 1 for a finding (not an error): `validate` with errors
EXIT_ONE = {"validate", "validate-groups"}
# readable files: an error about what they mean (a deadlock, no start times) may name nodes rather than the file
WELL_FORMED = {"semantic_et", "hostile_strings", "good"}


@dataclass
class Command:
    name: str
    argv: list[str]
    output: Path | None = None  # the file it writes, if any
    allowed: frozenset[int] = frozenset({0, 2})


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    maxrss: int | None = None  # bytes; None in-process
    timed_out: bool = False
    seconds: float = 0.0


@dataclass
class Outcome:
    input: Input
    command: Command
    result: Result
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems


TRACE_COMMANDS = [
    "info",
    "validate",
    "breakdown",
    "top",
    "critical-path",
    "to-json",
    "sim-recorded",
    "sim-ring-8",
    "report",
    "timeline",
    "graph",
]


def commands(inp: Input, comp: dict[str, Path], out: Path, only: list[str] | None = None) -> list[Command]:
    """The reading commands that take `inp`, with its good companions (a job, a network, a system)."""
    p, job = str(inp.path), str(comp["job"])
    if inp.role == TRACE:
        one = p if inp.path.exists() else f"{p}.0.et"  # to-json reads one file: a job's rank 0
        table = {
            "info": Command("info", ["info", p]),
            "validate": Command("validate", ["validate", p], allowed=frozenset({0, 1, 2})),
            "breakdown": Command("breakdown", ["analyze", "breakdown", p]),
            "top": Command("top", ["analyze", "top", p]),
            "critical-path": Command("critical-path", ["analyze", "critical-path", p]),
            "to-json": Command("to-json", ["to-json", one, str(out / "x.json")], out / "x.json"),
            "sim-recorded": Command("sim-recorded", ["simulate", p, "--system", "recorded"]),
            "sim-ring-8": Command("sim-ring-8", ["simulate", p, "--system", "ring-8"]),
            "report": Command("report", ["report", p, "-o", str(out / "r.html")], out / "r.html"),
            "timeline": Command("timeline", ["timeline", p, "-o", str(out / "t.json")], out / "t.json"),
            "graph": Command("graph", ["graph", p, "-o", str(out / "g.dot")], out / "g.dot"),
        }
        cmds = [table[n] for n in (only or TRACE_COMMANDS) if n in table]
    elif inp.role == NETWORK:
        cmds = [Command("simulate", ["simulate", job, "--system", str(comp["system"]), "--network", p])]
    elif inp.role == SYSTEM:
        cmds = [Command("simulate", ["simulate", job, "--system", p, "--network", str(comp["network"])])]
    elif inp.role == GROUPS:
        cmds = [
            Command("validate-groups", ["validate", job, "--comm-groups", p], allowed=frozenset({0, 1, 2})),
            Command("simulate", ["simulate", job, "--system", "recorded", "--comm-groups", p]),
            Command("breakdown", ["analyze", "breakdown", job, "--comm-groups", p]),
            Command("timeline", ["timeline", job, "-o", str(out / "t.json"), "--comm-groups", p], out / "t.json"),
        ]
    elif inp.role == HOST:
        cmds = [Command("convert", ["convert", "pytorch", p, "-o", str(out / "conv"), "-j", "1"])]
    elif inp.role == KINETO:
        cmds = [
            Command("convert", ["convert", "pytorch", str(comp["host"]), p, "-o", str(out / "conv"), "-j", "1"]),
            Command("convert-kineto", ["convert", "kineto", p, "-o", str(out / "kin")]),
        ]
    elif inp.role == CHAKRA_JSON:
        cmds = [Command("from-json", ["from-json", p, str(out / "x.et")], out / "x.et")]
    elif inp.role in SHARED_COMMANDS:
        cmds = SHARED_COMMANDS[inp.role](p, comp, out)
    else:
        raise ValueError(inp.role)
    if inp.invalid:  # what validate rejects, simulate must refuse
        for c in cmds:
            if c.name.startswith("validate"):
                c.allowed = frozenset({1}) if inp.role == TRACE else frozenset({1, 2})
            elif c.name.startswith("sim"):
                c.allowed = frozenset({0} if inp.repaired else {2})
    return cmds


def _catalog_commands(p: str, comp: dict[str, Path], out: Path) -> list[Command]:
    copy = out / Path(p).name  # `catalog add` writes to its catalog: a copy of the input
    if not copy.exists() and Path(p).is_file():
        out.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(Path(p).read_bytes())
    return [
        Command("catalog-query", ["catalog", "query", p, "SELECT name FROM jobs", "--json"]),
        Command("catalog-report", ["catalog", "report", p, "-o", str(out / "fleet.html")], out / "fleet.html"),
        Command("catalog-export", ["catalog", "export", p, str(out / "export")]),
        Command("catalog-add", ["catalog", "add", str(copy), str(comp["job"])]),
    ]


def _bench_commands(p: str, comp: dict[str, Path], out: Path) -> list[Command]:
    from conftest import DATA

    return [
        Command("bench-show", ["bench", "show", p]),
        Command("bench-report-md", ["bench", "report", p, "-o", str(out / "r.md")], out / "r.md"),
        Command("bench-report-html", ["bench", "report", p, "-o", str(out / "r.html")], out / "r.html"),
        Command("bench-compare", ["bench", "compare", p, str(DATA / "bench" / "mlp_threads2.json")]),
    ]


def _replay_commands(p: str, comp: dict[str, Path], out: Path) -> list[Command]:
    from conftest import DATA

    trace = str(DATA / "mlp_rank0.et.json.gz")
    return [Command("replay", ["replay", trace, "--config", p, "--budget-s", "0.5", "--steps", "2"])]


# the commands that read each kind of shared document (tests/fuzz_shared.py)
SHARED_COMMANDS = {
    fs.SWEEP: lambda p, comp, out: [
        Command("sweep-run", ["sweep", "run", p, "-o", str(out / "res"), "--workers", "1"])
    ],
    fs.CATALOG: _catalog_commands,
    fs.MODEL: lambda p, comp, out: [
        Command("generate-sample", ["generate", "sample", p, "--like", fs.MODEL_JOB, "-o", str(out / "s" / "s")])
    ],
    fs.BENCH: _bench_commands,
    fs.PROFILE: lambda p, comp, out: [Command("simulate-profile", ["simulate", str(comp["job"]), "--profile", p])],
    fs.COLLECT: lambda p, comp, out: [
        Command("info", ["info", p]),
        Command("top", ["analyze", "top", p]),
        Command("sim-recorded", ["simulate", p, "--system", "recorded"]),
        Command("report", ["report", p, "-o", str(out / "r.html")], out / "r.html"),
    ],
    fs.REPLAY_CONFIG: _replay_commands,
}


# --------------------------------------------------------------------------- running


def _limits() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def chakra_argv() -> list[str]:
    return [sys.executable, "-m", "chakra_trace.cli"]


# The child reports its own peak RSS (VmHWM): a forked child's ru_maxrss starts at its parent's RSS
# (the pre-exec image counts), so wait4's figure would include this process.
_CHILD = """
import os, sys
from chakra_trace.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else 1
finally:
    try:
        with open("/proc/self/status") as f:
            hwm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
        with open(os.environ["CHAKRA_FUZZ_RSS_FILE"], "w") as f:
            f.write(str(hwm))
    except (OSError, KeyError, StopIteration):
        pass
sys.exit(rc)
"""


def _vm_hwm(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return None


def run_subprocess(argv: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> Result:
    """The CLI in a child under the resource limits, with the child's own peak RSS (reported by the
    child, else the last value polled from /proc when it was killed)."""
    with tempfile.TemporaryDirectory() as td, tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        rss_file = Path(td) / "rss"
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2", COLUMNS="120",
                   CHAKRA_FUZZ_RSS_FILE=str(rss_file))  # fmt: skip
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", _CHILD, *argv], stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                             cwd=cwd, env=env, preexec_fn=_limits)  # fmt: skip
        fired = threading.Event()
        done = threading.Event()
        polled = [0]

        def watch() -> None:  # poll the peak and kill at the deadline
            deadline = time.monotonic() + timeout
            while not done.wait(0.05):
                v = _vm_hwm(p.pid)
                polled[0] = max(polled[0], v or 0)
                if time.monotonic() > deadline:
                    fired.set()
                    p.kill()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            done.set()
            watcher.join()
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        secs = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        out, err = (f.read().decode("utf-8", "replace") for f in (fo, fe))
        reported = int(rss_file.read_text()) if rss_file.exists() and rss_file.read_text().strip() else None
    maxrss = reported if reported is not None else (polled[0] or ru.ru_maxrss * 1024)
    return Result(p.returncode, out, err, maxrss=maxrss, timed_out=fired.is_set(), seconds=secs)


def run_inprocess(argv: list[str]) -> Result:
    """`chakra_trace.cli.main` in this process (fast; only for inputs that cannot take unbounded memory)."""
    from chakra_trace.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # `validate` exits 1 so: the status survives click
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # noqa: BLE001 - anything escaping main is what a user would see as a traceback
            err.write(f"Traceback (most recent call last): escaped main: {type(e).__name__}: {e}\n")
            rc = 1
    return Result(rc, out.getvalue(), err.getvalue(), seconds=time.perf_counter() - t0)


def run(inp: Input, cmd: Command, cwd: Path, *, subprocess_always: bool = False) -> Result:
    if inp.bomb or subprocess_always:
        return run_subprocess(cmd.argv, cwd)
    return run_inprocess(cmd.argv)


# --------------------------------------------------------------------------- properties


def problems(inp: Input, cmd: Command, res: Result, *, well_formed: bool = False) -> list[str]:
    """What is wrong with this run (empty: clean)."""
    bad = []
    err_lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    if res.timed_out:
        bad.append(f"timed out after {TIMEOUT_S:.0f} s")
    if res.rc not in cmd.allowed:
        bad.append(f"exit {res.rc} (expected {sorted(cmd.allowed)})")
    if "Traceback" in res.stderr or "Traceback" in res.stdout:
        bad.append("traceback")
    if "Warning:" in res.stderr and ".py:" in res.stderr:  # a Python warning (numpy overflow) leaking out
        bad.append("Python warning: " + next((ln for ln in err_lines if "Warning:" in ln), "")[-160:])
    if "internal error" in res.stderr:
        bad.append("internal error: " + next((ln for ln in err_lines if "internal error" in ln), "")[:200])
    if res.rc == 2:
        if len(err_lines) != 1:
            bad.append(f"{len(err_lines)} stderr lines on exit 2")
        first = err_lines[-1] if err_lines else ""
        if not first.startswith("error:"):
            bad.append("exit 2 without an 'error:' line")
        elif inp.path.name not in first and not (well_formed or inp.cls in WELL_FORMED):
            bad.append(f"error does not name {inp.path.name}: {first[:200]}")
    if res.maxrss is not None and res.maxrss > RSS_BOUND:
        bad.append(f"peak RSS {res.maxrss >> 20} MiB > {RSS_BOUND >> 20} MiB")
    if cmd.output is not None:
        d = cmd.output.parent
        left = [q.name for q in d.iterdir() if ".tmp" in q.name or q.name.startswith(".")] if d.exists() else []
        if left:
            bad.append(f"temporary files left: {left[:3]}")
        if res.rc != 0 and cmd.output.exists():
            bad.append(f"exit {res.rc} but {cmd.output.name} written")
        if res.rc == 0 and cmd.output.exists():
            bad.extend(_output_problems(inp, cmd))
    return bad


def _output_problems(inp: Input, cmd: Command) -> list[str]:
    """Hostile strings are escaped where they land; JSON outputs parse."""
    assert cmd.output is not None
    bad = []
    if cmd.output.suffix == ".json":
        try:
            with open(cmd.output, "rb") as f:
                json.load(f)
        except ValueError as e:
            bad.append(f"{cmd.output.name} is not JSON: {e}"[:200])
    if cmd.output.suffix == ".html":
        html = cmd.output.read_text(errors="replace")
        if XSS in html or XSS.replace('"', "&quot;") in html:  # escaped in JSON it reads <\/script>, in HTML &lt;
            bad.append("report holds the injected script unescaped")
    if cmd.output.suffix == ".dot":
        dot = cmd.output.read_text(errors="replace")
        if 'evil [label="pwned' in dot:
            bad.append("graph .dot holds the injected statement unescaped")
    return bad


def check(inp: Input, comp: dict[str, Path], work: Path, *, only: list[str] | None = None,
          subprocess_always: bool = False) -> list[Outcome]:  # fmt: skip
    """Every command over one input, each in a fresh output folder, plus the cross-command rules:
    a trace that validate rejects (exit 1) is one simulate refuses (exit 2), and no command acts
    beyond its outputs (the input's folder and its companions unchanged, no payload marker made,
    no local secret carried out, no raw control byte printed)."""
    runs = []
    watched = _watched(inp)
    for cmd0 in commands(inp, comp, work, only):
        out = work / cmd0.name
        out.mkdir(parents=True, exist_ok=True)
        cmd = next(
            c for c in commands(inp, comp, out, [cmd0.name] if inp.role == TRACE else None) if c.name == cmd0.name
        )
        before = {d: _tree(d) for d in watched}
        res = run(inp, cmd, out, subprocess_always=subprocess_always)
        runs.append((cmd, res, _side_effects(inp, res, out, before)))
    # a file `info` reads (a groups file `validate` reads) is well-formed: an error about what it means
    # (a deadlock, a collective on a group that leaves its rank out) may name nodes and ranks, not the file
    readable = any(
        (c.name == "info" and r.rc == 0) or (c.name == "validate-groups" and r.rc in (0, 1)) for c, r, _ in runs
    )
    outcomes = [Outcome(inp, c, r, problems(inp, c, r, well_formed=readable) + effects) for c, r, effects in runs]
    by = {o.command.name: o for o in outcomes}
    v = by.get("validate") or by.get("validate-groups")
    if v is not None and v.result.rc == 1:
        for o in outcomes:
            if not o.command.name.startswith("sim"):
                continue
            if inp.repaired and o.result.rc == 0 and "repaired" not in o.result.stderr:
                o.problems.append("simulate ran a trace validate rejects without saying it repaired it")
            elif not inp.repaired and o.result.rc != 2:
                o.problems.append(f"validate rejects it (exit 1) but simulate exits {o.result.rc}")
    return outcomes


# --------------------------------------------------------------------------- what a run may not do (issue 34)

# bytes a terminal would act on: C0 controls but tab and newline, DEL, the C1 CSI
_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x9b]")


def _watched(inp: Input) -> list[Path]:
    """The folders a reading command must leave as they were: the input's own (a collect folder,
    or the folder holding the file or prefix) and its companions' (a victim a link points at)."""
    own = inp.path if inp.path.is_dir() and not inp.path.is_symlink() else inp.path.parent
    return [own] + [p for p in inp.companions.values() if p.is_dir()]


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under root (links not followed): mode, size, mtime."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _side_effects(inp: Input, res: Result, out: Path, before: dict[Path, dict]) -> list[str]:
    bad = []
    for d, was in before.items():
        now = _tree(d)
        changed = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
        if changed:
            bad.append(f"changed {len(changed)} entries in {d.name}/ (an input folder): {changed[:3]}")
    for d in {inp.path.parent, out}:
        made = [q.name for q in d.rglob(f"{fs.MARK}*")] if d.is_dir() else []
        if made:
            bad.append(f"a payload ran: {made[:3]}")
    secret = fs.SECRET.encode()
    if secret.decode() in res.stdout or secret.decode() in res.stderr:
        bad.append("a local file's content was printed")
    for q in out.rglob("*") if out.is_dir() else []:
        if q.is_file() and not q.is_symlink() and secret in q.read_bytes():
            bad.append(f"a local file's content was written to {q.name}")
            break
    for stream, text in (("stdout", res.stdout), ("stderr", res.stderr)):
        m = _RAW_CONTROL.search(text)
        if m:
            bad.append(f"raw control byte {m.group()!r} on {stream}: {text[max(0, m.start() - 40) : m.end() + 20]!r}")
    return bad
