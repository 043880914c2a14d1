"""Converters into Chakra: PyTorch host execution traces + Kineto, Kineto alone, and ASTRA-sim text workloads."""

from .kineto import KinetoTrace, read_kineto
from .link import Link, interval_parents, link
from .profiler import convert_kineto
from .pytorch import ConversionReport, convert_collection, convert_pytorch
from .pytorch_host import HostTrace, read_host_trace
from .text import read_text_workload, text_to_chakra

__all__ = [
    "ConversionReport",
    "HostTrace",
    "KinetoTrace",
    "Link",
    "convert_collection",
    "convert_kineto",
    "convert_pytorch",
    "interval_parents",
    "link",
    "read_host_trace",
    "read_kineto",
    "read_text_workload",
    "text_to_chakra",
]
