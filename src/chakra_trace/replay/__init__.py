"""Replay traces as portable benchmarks:
compute, communication, measurement."""
