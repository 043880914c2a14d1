"""Which device timeline a path stands for: Kineto traces where the job has them (what the
devices really ran), else the Chakra trace's nodes at their recorded times, or at the times of a
simulation of it."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import ChakraError
from ..io.collect_folder import kineto_files
from ..io.workload import Workload, sniff
from .job import JobTimeline, from_kineto_files, from_workload

SOURCE_CHOICES = ("auto", "kineto", "chakra")


def _kineto_paths(source: str) -> list:
    """The Kineto traces at `source` (a folder's, or the file itself), [] where there are none."""
    if os.path.isdir(source):
        try:
            return kineto_files(source)
        except ChakraError:  # no Kineto trace in the folder: a Chakra job, maybe
            return []
    return [source] if sniff(source) == "kineto" else []


def open_timeline(
    source, *, prefer: str = "auto", say=None, workload: Callable[[], Workload] | None = None
) -> JobTimeline:
    """The device timeline of `source`: Kineto trace file(s), a folder holding them (a `chakra
    collect` folder, or Kineto traces alone), or any path `Workload.open` takes (its nodes at
    their recorded times; a simulation's: `from_workload(workload, result)`).

    ``prefer``: "auto" reads Kineto traces where there are any, else the Chakra trace;
    "kineto"/"chakra" insist. ``workload``: gives the job at `source` where the caller opens it
    (read once, and only when its nodes are the timeline)."""
    if prefer not in SOURCE_CHOICES:
        raise ChakraError(f"device timeline source: one of {SOURCE_CHOICES}, not {prefer!r}")
    if isinstance(source, (list, tuple)):
        paths = [os.fspath(p) for p in source]
        if prefer == "chakra" or not all(sniff(p) == "kineto" for p in paths):
            raise ChakraError("a list of paths is read as Kineto traces; name one Chakra workload instead")
        return from_kineto_files(paths, say=say)
    if prefer != "chakra":
        paths = _kineto_paths(os.fspath(source))
        if paths:
            return from_kineto_files(paths, say=say)
        if prefer == "kineto":
            raise ChakraError(f"{source}: no Kineto traces (*.json[.gz] written by the PyTorch profiler)")
    return from_workload(workload() if workload is not None else Workload.open(source))


__all__ = ["SOURCE_CHOICES", "open_timeline"]
