"""Where a measurement ran: the machine, the thread settings and the library versions, kept with
every `Measurement` so that two results can be judged comparable or not."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_bytes() -> int | None:
    """Physical memory of the machine (bytes), where the OS says."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def environment(device: Any = None) -> dict:
    """Where a measurement ran: enough to tell whether two results are comparable.

    torch is described only when the caller already imported it (this never imports torch); the CUDA device
    only when `device` names one.
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": _memory_bytes(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        "numpy": np.__version__,
    }
    try:
        env["chakra_trace"] = version("chakra-trace")
    except PackageNotFoundError:  # not installed (running from a source tree)
        env["chakra_trace"] = None
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            env["torch"] = str(torch.__version__)
            env["torch_threads"] = int(torch.get_num_threads())
            if device is not None and str(device).startswith("cuda") and torch.cuda.is_available():
                env["device"] = str(device)
                env["cuda_device"] = torch.cuda.get_device_name(device)
                env["cuda_capability"] = list(torch.cuda.get_device_capability(device))
                env["cuda"] = torch.version.cuda
        except Exception as e:  # a half-initialised torch must not break a measurement
            env["torch_error"] = f"{type(e).__name__}: {e}"
    elif device is not None:
        env["device"] = str(device)
    return env
