"""Pre-execution traces: one training step of a PyTorch model captured without running its math
(`capture`), as a device-agnostic master trace (one logical device, no parallelism)."""

from __future__ import annotations

from .loader import load_build
from .step import PHASES, CaptureError, CaptureResult, ModelStep, build_trace, capture

__all__ = ["capture", "CaptureResult", "CaptureError", "ModelStep", "build_trace", "load_build", "PHASES"]
