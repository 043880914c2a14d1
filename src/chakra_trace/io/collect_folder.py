"""The folder `chakra collect` writes (``rank<r>.et.json[.gz]`` host traces beside
``rank<r>.kineto.json[.gz]`` Kineto traces), and finding a job's Kineto traces and their ranks:
what every reader of such a folder (the converters, the device analyses, the replay, job
selection) asks, answered once."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ChakraError
from .files import found_file, rank_number, regular_files
from .kineto import KinetoTrace
from .workload import sniff

_RANK_FILE = re.compile(r"^rank([0-9]+)\.(et|kineto)\.json(?:\.gz)?$")


def rank_files(folder: str | os.PathLike) -> dict[int, dict[str, str]]:
    """{rank: {"et": path, "kineto": path}} of the ``rank<r>.et|kineto.json[.gz]`` files in a folder
    (the layout `chakra collect` writes), either kind possibly missing, by rank. Only regular files
    in the folder are taken (`io.files.found_file`: a link out of it, a pipe or a device is an error)."""
    found: dict[int, dict[str, str]] = {}
    for entry in sorted(os.listdir(folder)):
        m = _RANK_FILE.match(entry)
        if m and found_file(folder, os.path.join(folder, entry)):
            rank = rank_number(m.group(1), os.path.join(folder, entry))
            kinds = found.setdefault(rank, {})
            if m.group(2) in kinds:  # rank01 and rank1
                raise ChakraError(
                    f"{os.path.join(folder, entry)}: rank {rank} appears twice (also {kinds[m.group(2)]})"
                )
            kinds[m.group(2)] = os.path.join(folder, entry)
    return dict(sorted(found.items()))


def collection_files(folder: str | os.PathLike) -> dict[int, tuple[str, str | None]]:
    """{rank: (host ET path, Kineto path or None)} of a folder written by `chakra collect`."""
    found = rank_files(folder)
    missing = [r for r, f in found.items() if "et" not in f]
    if missing:
        raise ChakraError(f"{folder}: rank(s) {missing} have a Kineto trace but no host trace (rank<r>.et.json)")
    if not found:
        raise ChakraError(f"{folder}: no rank<r>.et.json[.gz] files (is this a `chakra collect` folder?)")
    return {r: (f["et"], f.get("kineto")) for r, f in sorted(found.items())}


def is_collection(path: Path) -> bool:
    """Whether a path is a folder written by `chakra collect` (it holds rank<r>.et.json[.gz] files)."""
    return path.is_dir() and any("et" in f for f in rank_files(path).values())


def is_kineto_folder(path: Path) -> bool:
    """A `chakra collect` folder (or the like) with Kineto traces and no host traces: rank<r>.kineto.json[.gz] only."""
    if not path.is_dir():
        return False
    files = rank_files(path).values()
    return any("kineto" in f for f in files) and not any("et" in f for f in files)


def kineto_files(inputs: list[str | os.PathLike] | str | os.PathLike) -> list[Path]:
    """The Kineto files named by ``inputs``: files as given, or one folder (a `chakra collect`
    folder: its ``rank<r>.kineto.json[.gz]``; any other folder: every ``*.json[.gz]`` in it)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise ChakraError("no Kineto trace given")
    if len(paths) == 1 and paths[0].is_dir():
        folder = paths[0]
        found = [Path(f["kineto"]) for f in rank_files(folder).values() if "kineto" in f]
        if not found:
            entries = [e for e in sorted(os.listdir(folder)) if re.search(r"\.json(\.gz)?$", e)]
            found = [p for p in regular_files(folder, entries) if sniff(p) == "kineto"]
        if not found:
            raise ChakraError(f"{folder}: no Kineto traces (rank<r>.kineto.json[.gz] or *.json[.gz])")
        return found
    for p in paths:
        if p.is_dir():
            raise ChakraError(f"{p}: a folder must be the only input")
        if not p.exists():
            raise ChakraError(f"{p}: no such file")
    return paths


def trace_rank(kin: KinetoTrace, path: Path, order: int, taken: dict[int, Path]) -> int:
    """The rank of one of a job's Kineto traces: its ``distributedInfo.rank``, else ``rank<r>`` in
    the file name, else its place among the job's files; an error when `taken` (rank -> path of
    the traces read so far) already holds it."""
    rank = kin.rank
    if rank is None:
        m = re.search(r"rank[_-]?([0-9]+)", path.name)
        rank = rank_number(m.group(1), path) if m else order
    if rank in taken:
        raise ChakraError(f"{path}: rank {rank} is also in {taken[rank]} (two traces of one rank)")
    return rank
