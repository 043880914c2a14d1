"""A fleet on disk: the jobs under the paths a user gives, found without reading them.

A path is one job when `Workload.open` takes it as one: a trace file, a `<prefix>` of
`<prefix>.<rank>.et` files, a folder holding one such job, or a `chakra collect` (or
Kineto-only) folder. A folder holding the files of several prefixes is one job per prefix, and
a folder holding no trace files is searched below (hidden folders skipped), so a folder of job folders, or of prefixes, is a fleet. Lone `.et` files not named
by rank (a merged job, a one-rank job) are one job each; other files (JSON included: a folder's
index or manifest) are no jobs, though a Chakra JSON file given as a path is one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import ChakraError
from ...io.collect_folder import is_collection, is_kineto_folder
from ...io.workload import is_et_name, prefix_of, rank_of


@dataclass(frozen=True)
class JobPath:
    """A job's name (its path relative to the folder it was found under) and the path to open."""

    name: str
    path: Path


def find_jobs(paths: list[str | os.PathLike]) -> list[JobPath]:
    """Every job under `paths` (see the module docstring), in path order; ChakraError naming a
    path that holds none, or a job found twice."""
    out: list[JobPath] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found = _in_folder(p, p)
            if not found:
                raise ChakraError(
                    f"{p}: holds no jobs (expected <prefix>.<rank>.et[.gz] files, `chakra collect` folders, "
                    "or folders of them)"
                )
            out.extend(found)
        elif p.exists() or p.parent.is_dir() and any(_prefix_of(q) == p.name for q in p.parent.iterdir()):
            out.append(JobPath(str(p), p))
        else:
            raise ChakraError(f"{p}: no such file or folder, and no files named {p.name}.<rank>.et[.gz]")
    seen: dict[Path, str] = {}
    for j in out:
        key = j.path.resolve()
        if key in seen:
            raise ChakraError(f"{j.path}: the same job is given twice (also as {seen[key]})")
        seen[key] = j.name
    return out


def _prefix_of(p: Path) -> str | None:
    return None if p.is_dir() else prefix_of(p)


def _in_folder(folder: Path, root: Path) -> list[JobPath]:
    if is_collection(folder) or is_kineto_folder(folder):
        return [JobPath(_name(folder, root), folder)]
    entries = sorted(folder.iterdir())
    prefixes = sorted({pre for q in entries if (pre := _prefix_of(q)) is not None})
    lone = [q for q in entries if q.is_file() and rank_of(q) is None and is_et_name(q)]
    if len(prefixes) == 1 and not lone:  # a folder holding one job: the folder is the job
        return [JobPath(_name(folder, root), folder)]
    jobs = [JobPath(_name(folder / pre, root), folder / pre) for pre in prefixes]
    jobs += [JobPath(_name(q, root), q) for q in lone]
    if jobs:
        return jobs
    for sub in entries:
        if sub.is_dir() and not sub.name.startswith("."):
            jobs.extend(_in_folder(sub, root))
    return jobs


def _name(p: Path, root: Path) -> str:
    rel = p.relative_to(root).as_posix()
    return root.name if rel == "." else rel


__all__ = ["JobPath", "find_jobs"]
