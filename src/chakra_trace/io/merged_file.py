"""Merged jobs as files: `merge_job` / `split_job` (what `chakra merge` / `chakra split` run), and
`Workload.open` taught to read a merged file as the job it holds (see `io.merge` for the format)."""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import ChakraError
from ..schema.trace import Trace
from ..schema.wire import I64, decode_varint_at
from .documents import open_regular
from .et import read_trace, write_trace
from .merge import HEAD, INSTANCE, is_merged, merge, split
from .outputs import comm_groups_path
from .workload import Progress, Workload, register_job_file, register_source


@dataclass
class MergeSummary:
    """What `merge_job` wrote."""

    output: str
    ranks: int
    nodes: int
    collective_instances: int
    id_stride: int
    comm_groups: int
    bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SplitSummary:
    """What `split_job` wrote."""

    files: list[str]
    comm_groups_file: str | None
    ranks: int
    nodes: int

    def to_dict(self) -> dict:
        return asdict(self)


def merge_job(
    source: str | os.PathLike | Workload,
    output: str | os.PathLike,
    *,
    comm_groups: str | os.PathLike | dict | None = None,
    progress: Progress | None = None,
) -> MergeSummary:
    """Merge a job (any path `Workload.open` takes, or a Workload) into one file (`.gz`: gzip).
    A prefix's `<prefix>.comm_groups.json`, when there is one, is taken as its groups unless
    `comm_groups` is given, so merging and splitting carries the whole job."""
    if not isinstance(source, Workload):  # (its groups file beside it, unless given: `Workload.open`)
        source = Workload.open(source, comm_groups, progress=progress)
    elif comm_groups is not None:
        raise ChakraError("merge_job: give comm_groups with a path, or set them on the Workload")
    trace = merge(source)
    write_trace(trace, output)
    inst = trace.attr_array(INSTANCE, I64)
    return MergeSummary(
        output=os.fspath(output),
        ranks=len(source),
        nodes=len(trace),
        collective_instances=int(np.unique(inst[0][inst[1]]).size),
        id_stride=next(a.uint64_val for a in trace.metadata.attr if a.name == "merged_id_stride"),
        comm_groups=len(source.groups),
        bytes=os.path.getsize(output),
    )


def split_job(
    path: str | os.PathLike, prefix: str | os.PathLike, *, compress: bool = False, progress: Progress | None = None
) -> SplitSummary:
    """Write a merged file's ranks as `<prefix>.<rank>.et` (`.et.gz` with compress), and its
    communicator groups, when it has any, as `<prefix>.comm_groups.json` (as `chakra convert`
    writes them)."""
    with progress("merged job", Path(path)) if progress else nullcontext() as cb:
        trace = read_trace(path, progress=cb)
    w = split(trace, path=path)
    files = [str(p) for p in w.save(prefix, compress=compress, groups=w.groups or None)]
    groups_file = str(comm_groups_path(prefix)) if w.groups else None
    return SplitSummary(files=files, comm_groups_file=groups_file, ranks=len(w), nodes=len(trace))


# --------------------------------------------------------------------------- opening a merged file


_SNIFF = 64


def is_merged_file(path: Path) -> bool:
    """Whether a path is a regular file holding a merged job: its global metadata (plain or
    gzip) begins with the marker. Reads a few bytes; a pipe is never claimed (it reads once)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open_regular(path) as f:  # (never blocks, should the file become a pipe meanwhile)
            head = f.read(_SNIFF)
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                with gzip.open(f, "rb") as g:
                    head = g.read(_SNIFF)
        _, pos = decode_varint_at(np.frombuffer(head, np.uint8), 0, len(head))
    except (OSError, EOFError, zlib.error, ValueError, ChakraError):
        return False
    return pos >= 0 and head[pos : pos + len(HEAD)] == HEAD


def read_merged(path: Path, progress: Progress | None = None, ranks: list[int] | None = None) -> Workload:
    """`Workload.open` on a merged file: the per-rank job it holds."""
    with progress("merged job", path) if progress else nullcontext() as cb:
        trace = read_trace(path, progress=cb)
    w = split(trace, ranks=ranks, path=path)
    w.paths = {r: path for r in w.traces}
    return w


def _job_in(trace: Trace, path: Path, ranks: list[int] | None) -> Workload | None:
    """The job a merged trace read from a pipe holds (a file is claimed before it is read)."""
    return split(trace, ranks=ranks, path=path) if is_merged(trace) else None


register_source(is_merged_file, read_merged)
register_job_file(_job_in)
