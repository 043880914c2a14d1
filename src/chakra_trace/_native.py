"""The optional C kernels (setup.py builds them when a compiler is present)."""

from __future__ import annotations

import importlib
import os


def load(module: str):
    """The kernel module (e.g. "chakra_trace.io._wire"), or None when it was not built or
    CHAKRA_TRACE_PURE is set: callers then take their numpy/Python path, with the same results."""
    if os.environ.get("CHAKRA_TRACE_PURE"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - depends on the build
        return None
