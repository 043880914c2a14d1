"""Converters into Chakra: PyTorch host execution traces + Kineto, and ASTRA-sim text workloads."""
from .kineto import KinetoTrace, read_kineto
from .link import Link, interval_parents, link
from .text import read_text_workload, text_to_chakra

__all__ = ["KinetoTrace", "Link", "interval_parents", "link", "read_kineto", "read_text_workload", "text_to_chakra"]
