"""Synthetic workloads: representative traces without running the model."""

from .patterns import collective, from_spec, ring_p2p, roofline_chain, training_step

__all__ = ["collective", "from_spec", "ring_p2p", "roofline_chain", "training_step"]
