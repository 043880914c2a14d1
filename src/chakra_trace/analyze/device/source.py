"""Which device timeline a path stands for: Kineto traces where the job has them (what the
devices really ran), else the Chakra trace's nodes at their recorded times, or at the times of a
simulation of it."""

from __future__ import annotations

import os

from ...errors import ChakraError
from ...io.workload import Workload, sniff
from .timeline import JobTimeline, from_kineto_files, from_workload, kineto_files

SOURCE_CHOICES = ("auto", "kineto", "chakra")


def _has_kineto(path: str) -> bool:
    if os.path.isdir(path):
        return any(
            f.endswith((".json", ".json.gz")) and sniff(os.path.join(path, f)) == "kineto" for f in os.listdir(path)
        )
    return sniff(path) == "kineto"


def open_timeline(
    source, *, prefer: str = "auto", result=None, workload: Workload | None = None, say=None
) -> JobTimeline:
    """The device timeline of `source`: Kineto trace file(s), a folder holding them (a `chakra
    collect` folder, or Kineto traces alone), or any path `Workload.open` takes.

    ``prefer``: "auto" reads Kineto traces where there are any, else the Chakra trace;
    "kineto"/"chakra" insist. ``result``: a simulation of the workload (its per-node times),
    which makes the timeline the simulated one; ``workload``: the job already opened."""
    if prefer not in SOURCE_CHOICES:
        raise ChakraError(f"device timeline source: one of {SOURCE_CHOICES}, not {prefer!r}")
    paths = [os.fspath(p) for p in source] if isinstance(source, (list, tuple)) else None
    if result is None and prefer != "chakra" and workload is None:
        if paths is not None and all(sniff(p) == "kineto" for p in paths):
            return from_kineto_files(paths, say=say)
        if paths is None and os.path.exists(os.fspath(source)) and _has_kineto(os.fspath(source)):
            return from_kineto_files(os.fspath(source), say=say)
        if prefer == "kineto":
            raise ChakraError(f"{source}: no Kineto traces (*.json[.gz] written by the PyTorch profiler)")
    if workload is None:
        if paths is not None:
            raise ChakraError("a list of paths is read as Kineto traces; name one Chakra workload instead")
        workload = Workload.open(source)
    return from_workload(workload, result)


__all__ = ["SOURCE_CHOICES", "kineto_files", "open_timeline"]
