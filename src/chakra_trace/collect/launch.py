"""Run a training command unchanged and record every one of its processes (`chakra collect`).

The command runs with a folder holding a bootstrap `sitecustomize.py` first on PYTHONPATH and
the schedule in CHAKRA_COLLECT_* variables. Every Python process of the job (each torchrun
worker, each mp.spawn child) imports the bootstrap, which registers a global optimizer step
post-hook once torch.optim is imported; the first process that steps an optimizer starts
recording, one profiler per process (see `_inject`). Each rank writes its files and manifest at
the end of the active window (or at exit when the job stops earlier); when the job has ended,
the launcher merges the rank manifests into `manifest.json` with the command and exit status.

torch is not imported here: the launcher runs with any Python, and the job's Python needs torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import IO

from ..errors import ChakraError
from . import _inject
from .recorder import MANIFEST, OUTPUT_RE, Schedule, merge_manifests

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sitecustomize")
PKG_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass
class CollectResult:
    exit_status: int  # the job's (128 + N when a signal N ended it)
    manifest: dict  # merged manifest, as written to `manifest_path`
    manifest_path: str
    out_dir: str
    removed: list[str]  # files of an earlier collection removed from out_dir before the run
    seconds: float


def job_env(
    out_dir: str,
    schedule: Schedule,
    *,
    gzip: bool = True,
    num_threads: int | None = None,
    run_id: str | None = None,
    base: dict | None = None,
    profile_memory: bool = False,
) -> dict:
    """The environment that makes the job's Python processes record (see the module docstring)."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = BOOTSTRAP_DIR + (os.pathsep + old if old else "")
    env[_inject.ENV_DIR] = os.path.abspath(out_dir)
    env[_inject.ENV_SCHEDULE] = f"{schedule.wait},{schedule.warmup},{schedule.active}"
    env[_inject.ENV_GZIP] = "1" if gzip else "0"
    env[_inject.ENV_RUN_ID] = run_id or uuid.uuid4().hex
    env["CHAKRA_COLLECT_PKG"] = PKG_DIR
    env[_inject.ENV_PROFILE_MEMORY] = "1" if profile_memory else "0"
    env.pop(_inject.ENV_NUM_THREADS, None)
    if num_threads is not None:
        env[_inject.ENV_NUM_THREADS] = str(num_threads)
        # Threads are set from the start of every process, not only once recording starts.
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(num_threads)
    return env


def clean_output(out_dir: str) -> list[str]:
    """Remove the files an earlier collection left in `out_dir` (only names a collection writes)."""
    removed: list[str] = []
    if not os.path.isdir(out_dir):
        return removed
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if OUTPUT_RE.fullmatch(name) and os.path.isfile(path):
            os.remove(path)
            removed.append(name)
    return removed


def collect(
    command: list[str],
    out_dir: str = "chakra-collect",
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 2,
    gzip: bool = True,
    num_threads: int | None = None,
    stdout: IO | int | None = None,
    profile_memory: bool = False,
) -> CollectResult:
    """Run `command` with recording injected; return the job's exit status and the manifest.

    `stdout` is where the job's standard output goes (default: inherited); `profile_memory`
    records the allocator's `[memory]` events in the Kineto traces (`chakra analyze memory`).
    """
    if not command:
        raise ChakraError("no command to run: give it after `--`, e.g. chakra collect -- python train.py")
    schedule = Schedule(wait, warmup, active)
    if schedule.wait < 1:
        raise ChakraError(
            "--wait must be at least 1: without code changes, step 0 ends at the first "
            "optimizer step, before which nothing can start recording"
        )
    if num_threads is not None and num_threads < 1:
        raise ChakraError(f"--num-threads must be at least 1, got {num_threads}")
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ChakraError(f"{out_dir}: exists and is not a folder")
    os.makedirs(out_dir, exist_ok=True)
    removed = clean_output(out_dir)
    run_id = uuid.uuid4().hex
    env = job_env(out_dir, schedule, gzip=gzip, num_threads=num_threads, run_id=run_id, profile_memory=profile_memory)

    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(command, env=env, stdout=stdout)
    except FileNotFoundError:
        raise ChakraError(f"{command[0]}: command not found") from None
    except PermissionError:
        raise ChakraError(f"{command[0]}: permission denied") from None
    rc = _wait(proc)
    seconds = time.monotonic() - t0
    status = 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as shells report it

    leftovers = [n for n in os.listdir(out_dir) if n.startswith(".chakra-")]
    for n in leftovers:  # temporary files of processes that were killed while recording
        try:
            os.remove(os.path.join(out_dir, n))
        except OSError:
            pass
    notes = []
    if status != 0:
        notes.append(f"the job exited with status {status}")
    if leftovers:
        notes.append(f"removed {len(leftovers)} temporary file(s) of processes that did not finish")
    extra = {
        "command": list(command),
        "exit_status": status,
        "collector": {
            "launcher": "chakra collect",
            "seconds": round(seconds, 3),
            "run_id": run_id,
            "removed_earlier_files": removed,
        },
    }
    manifest = merge_manifests(out_dir, run_id=run_id, extra=extra, final=True, warnings=notes)
    return CollectResult(status, manifest, os.path.join(out_dir, MANIFEST), out_dir, removed, seconds)


def _wait(proc: subprocess.Popen) -> int:
    """Wait for the job; Ctrl-C reaches it through the terminal, SIGTERM/SIGHUP are passed on."""

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    saved = {}
    if _main_thread():
        saved[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
            if sig is not None:
                saved[sig] = signal.signal(sig, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # pragma: no cover - SIGINT is ignored above
                continue
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _main_thread() -> bool:

    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(collect(sys.argv[1:]).exit_status)
