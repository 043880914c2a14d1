"""Converters into Chakra: PyTorch host execution traces + Kineto, and ASTRA-sim text workloads."""
from .text import read_text_workload, text_to_chakra

__all__ = ["read_text_workload", "text_to_chakra"]
