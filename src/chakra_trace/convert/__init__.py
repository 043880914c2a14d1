"""Converters into Chakra: PyTorch host execution traces + Kineto, Kineto alone, and ASTRA-sim
text workloads (the readers of those files are in `io`: `io.kineto`, `io.pytorch_host`)."""

from .link import Link, link
from .profiler import convert_kineto
from .pytorch import ConversionReport, convert_collection, convert_pytorch
from .text import read_text_workload, text_to_chakra

__all__ = [
    "ConversionReport",
    "Link",
    "convert_collection",
    "convert_kineto",
    "convert_pytorch",
    "link",
    "read_text_workload",
    "text_to_chakra",
]
