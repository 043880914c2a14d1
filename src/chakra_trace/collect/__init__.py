"""Recording PyTorch execution traces and Kineto traces of chosen training steps.

Importing this package does not import torch; recording does.
"""

from .recorder import Recorder, Schedule, active_recorder, merge_manifests, read_manifest, record

__all__ = ["Recorder", "Schedule", "active_recorder", "merge_manifests", "read_manifest", "record"]
