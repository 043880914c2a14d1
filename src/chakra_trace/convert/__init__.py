"""Converters into Chakra: PyTorch host execution traces + Kineto, and ASTRA-sim text workloads."""
