"""Device-side analyses (Holistic Trace Analysis's questions and more) over what each rank's
devices ran (`chakra_trace.timeline`): GPU kernels from Kineto traces, a CPU job's backend
worker threads, or a Chakra trace's nodes at recorded or simulated times. `Analysis.devices()`
is the way in."""

from .analysis import DeviceAnalysis

__all__ = ["DeviceAnalysis"]
