"""Measuring in a fresh process, for every benchmark here.

A probe is Python source run with ``python -c`` after `PRELUDE`, which gives it
``status(key)`` (a /proc/self/status figure in bytes: VmRSS, VmHWM, VmSize) and
``reset_peak()`` (collect garbage, then restart the VmHWM high-water mark). The probe prints
one JSON object as its last line; `run` returns it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

PRELUDE = """\
import gc, json, os, sys, time
def status(key):
    # VmHWM, unlike ru_maxrss, is per address space: not inherited from the parent at exec
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
def reset_peak():
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS mark
    except OSError:
        pass
"""


def run(code: str, *args, env: dict[str, str] | None = None) -> dict:
    """Run a probe (the project's src/ first on the path, `env` added to the environment)."""
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = SRC + os.pathsep + full.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        env=full,
    )
    if out.returncode:
        raise SystemExit(f"probe failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
