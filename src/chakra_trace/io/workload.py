"""A job: its per-rank traces and communicator groups, and the one way to open one from a path.

`Workload.open` takes whatever a user holds: one `.et` file (or Chakra JSON), the prefix of
`<prefix>.<rank>.et` files, a folder holding one such job, or a folder another reader claims
(the PyTorch converter registers `chakra collect` folders with `register_source`; the package
names such modules with `register_source_module`, imported at the first open). Every command and
API opens workloads through it, so they all accept the same paths.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..errors import ChakraError, TraceFormatError, reader_limit
from ..schema.groups import ALL_RANKS_GROUPS, group_users, named_groups, uses_group
from ..schema.trace import Trace
from .documents import open_regular, read_text
from .et import atomic_output, read_trace, write_trace
from .files import found_file, rank_number
from .jsonio import is_json_path, read_json
from .kineto_formats import json_kind
from .outputs import check_complete, comm_groups_path, file_set

#: (label, file) -> a context manager yielding a callback(bytes done) or None: how a caller shows
#: progress while files are read (the CLI draws a bar on a terminal).
Progress = Callable[[str, Path], AbstractContextManager]

_RANK_RE = re.compile(r"^(?P<prefix>.*)\.(?P<rank>[0-9]+)\.et(?:\.gz)?$")
_ET_RE = re.compile(r"\.et(?:\.gz)?$")


@dataclass
class Workload:
    """Per-rank traces of one job. `groups` maps a communicator (pg_name) to its ranks;
    `paths` says which file each rank came from, when it came from one; `groups_file` the
    communicator-group file `groups` were read from (`open`: given, or found beside the ranks)."""

    traces: dict[int, Trace]
    groups: dict[str, list[int]] = field(default_factory=dict)
    paths: dict[int, Path] = field(default_factory=dict)
    groups_file: Path | None = None

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    def __len__(self) -> int:
        return len(self.traces)

    def __getitem__(self, rank: int) -> Trace:
        return self.traces[rank]

    def group_ranks(self, pg_name: str) -> list[int]:
        """Members of a communicator; unnamed ("" or "0") and unknown groups infer from the traces."""
        if pg_name in self.groups:
            return self.groups[pg_name]
        if pg_name in ALL_RANKS_GROUPS:
            return self.ranks
        return [r for r, t in self.traces.items() if uses_group(t, pg_name)]

    def all_groups(self) -> dict[str, list[int]]:
        """Every group the workload declares or its traces name -> `group_ranks`, in one pass
        (a call per group would read every trace per group)."""
        names: set[str] = set(self.groups)
        for t in {id(t): t for t in self.traces.values()}.values():  # (one trace may run on many ranks)
            names |= named_groups(t)
        users = group_users(self.traces)
        return {
            g: self.groups[g] if g in self.groups else self.ranks if g in ALL_RANKS_GROUPS else users.get(g, [])
            for g in sorted(names)
        }

    @classmethod
    def of(cls, workload: Workload | Trace) -> Workload:
        """A lone trace as a one-rank workload; a workload as is."""
        return cls({0: workload}) if isinstance(workload, Trace) else workload

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        comm_groups: str | os.PathLike | dict | None = None,
        *,
        ranks: Iterable[int] | None = None,
        progress: Progress | None = None,
        **read_options,
    ) -> Workload:
        """Open a job from any path a user holds (see the module docstring). `comm_groups`: an
        ASTRA-sim communicator-group file or {name: ranks}; without it, `<prefix>.comm_groups.json`
        beside the rank files when there is one (`groups_beside`: the one rule every command
        opens a job by, so no two commands read one job two ways); `ranks`: read only these;
        `read_options` go to `read_trace`."""
        groups_file = None
        if isinstance(comm_groups, (str, os.PathLike)):
            groups, groups_file = read_comm_groups(comm_groups), Path(os.fspath(comm_groups))
        else:
            groups = dict(comm_groups or {})
        wanted = None if ranks is None else sorted(set(ranks))
        for claims, read in _sources():
            if claims(Path(path)):
                w = read(Path(path), progress, wanted)
                w.groups.update(groups)
                return w
        found = locate(path)
        if comm_groups is None and (beside := groups_beside(found)) is not None:
            groups, groups_file = read_comm_groups(beside), beside
        files = select_ranks(path, found, wanted)
        traces: dict[int, Trace] = {}
        same = _identical(files)
        for rank, p in files.items():
            refuse_pytorch(p)
            if rank in same:  # (a file byte for byte like an earlier rank's: its trace, read once)
                traces[rank] = traces[same[rank]]
                continue
            with progress(f"rank {rank}", p) if progress else nullcontext() as cb:
                traces[rank] = read_json(p) if is_json_path(str(p)) else read_trace(p, progress=cb, **read_options)
        if len(traces) == 1:  # a lone file no source claimed (a pipe) may still hold a whole job
            ((rank, trace),) = traces.items()
            for expand in _job_files():
                job = expand(trace, files[rank], wanted)
                if job is not None:
                    job.groups.update(groups)
                    return job
        return cls(traces, groups, files, groups_file)

    def save(
        self,
        prefix: str | os.PathLike,
        *,
        compress: bool = False,
        groups: dict[str, list[int]] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Path]:
        """Write `<prefix>.<rank>.et` (`.et.gz` with compress) for every rank, and `groups`, when
        given, as `<prefix>.comm_groups.json`: as one set (`io.outputs.file_set`: an
        interruption leaves the old set, and rank files of the prefix the job lacks are removed).
        `progress(ranks written, ranks)` after each rank. Returns the rank files written."""
        out = []
        name = Path(prefix).name
        with file_set(prefix) as fs:
            for i, (r, t) in enumerate(self.traces.items()):
                file = f"{name}.{r}.et" + (".gz" if compress else "")
                write_trace(t, fs.path(file), compress=compress, leftovers=False)
                out.append(fs.final(file))
                if progress is not None:
                    progress(i + 1, len(self.traces))
            if groups is not None:
                write_comm_groups(groups, fs.path(comm_groups_path(name).name), leftovers=False)
        return out


# --------------------------------------------------------------------------- finding a job's files


def _identical(files: dict[int, Path]) -> dict[int, int]:
    """Ranks whose file is byte for byte an earlier rank's, and that rank: an SPMD job's ranks
    often are, and then share one trace (read once; the simulator runs it once for all)."""
    by_size: dict[int, list[int]] = {}
    for rank, p in files.items():
        try:
            st = p.stat()
        except OSError:
            continue  # (the reader names what is wrong with it)
        if stat.S_ISREG(st.st_mode):  # (a pipe is read once, by its reader)
            by_size.setdefault(st.st_size, []).append(rank)
    out: dict[int, int] = {}
    for ranks in by_size.values():
        if len(ranks) < 2:
            continue
        first: dict[bytes, int] = {}
        for rank in ranks:
            digest = hashlib.blake2b(files[rank].read_bytes(), digest_size=20).digest()
            if digest in first:
                out[rank] = first[digest]
            else:
                first[digest] = rank
    return out


Reader = Callable[[Path, "Progress | None", "list[int] | None"], Workload]
_SOURCES: list[tuple[Callable[[Path], bool], Reader]] = []


def register_source(claims: Callable[[Path], bool], read: Reader) -> None:
    """Let `Workload.open` read paths that are not Chakra files: `claims(path)` says whether a path
    is one of yours, `read(path, progress, ranks)` returns its workload (only `ranks`, when not
    None). Later layers (the PyTorch converter) register here, so opening stays one call however
    the job was stored."""
    _SOURCES.append((claims, read))


#: (trace, file, ranks) -> its workload, or None: a whole job held in one trace (`io.merge`
#: registers merged jobs), asked about a lone file read when no source claimed it (a pipe).
JobFile = Callable[[Trace, Path, "list[int] | None"], "Workload | None"]
_JOB_FILES: list[JobFile] = []


def register_job_file(expand: JobFile) -> None:
    """Let `Workload.open` find a whole job in a lone trace it has read: `expand(trace, path,
    ranks)` returns the job (only `ranks`, when not None), or None when the trace is one rank."""
    _JOB_FILES.append(expand)


#: modules that register sources or job files when imported, in the order they are asked
_SOURCE_MODULES: list[str] = []


def register_source_module(name: str) -> None:
    """Name a module (of a later layer) that registers sources or job files: it is imported when a
    workload is first opened, so importing the package stays cheap. Sources are asked in the order
    their modules were named here, whichever was imported first."""
    if name not in _SOURCE_MODULES:
        _SOURCE_MODULES.append(name)


def _rank_of(fn: Callable) -> int:
    module = getattr(fn, "__module__", "")
    return _SOURCE_MODULES.index(module) if module in _SOURCE_MODULES else len(_SOURCE_MODULES)


def _load_source_modules() -> None:
    for name in _SOURCE_MODULES:
        importlib.import_module(name)


def _sources() -> list[tuple[Callable[[Path], bool], Reader]]:
    _load_source_modules()
    return sorted(_SOURCES, key=lambda source: _rank_of(source[1]))


def _job_files() -> list[JobFile]:
    _load_source_modules()
    return sorted(_JOB_FILES, key=_rank_of)


_F = TypeVar("_F")


def select_ranks(path: str | os.PathLike, found: dict[int, _F], ranks: list[int] | None) -> dict[int, _F]:
    """The files of `ranks` (all when None); ChakraError naming the ranks there are if one is absent."""
    if ranks is None:
        return found
    absent = [r for r in ranks if r not in found]
    if absent:
        have = sorted(found)
        raise ChakraError(
            f"{path}: no rank {absent[0]}; the job has ranks {have[:20]}" + (" ..." if len(have) > 20 else "")
        )
    return {r: found[r] for r in ranks}


def groups_beside(files: dict[int, Path]) -> Path | None:
    """`<prefix>.comm_groups.json` beside a job's `<prefix>.<rank>.et` files, when it is a file
    (what `chakra convert` and `chakra split` write beside the ranks)."""
    for p in files.values():
        prefix = prefix_of(p)
        if prefix is not None:
            beside = comm_groups_path(p.parent / prefix)
            return beside if beside.is_file() else None
    return None


def discover(prefix: str | os.PathLike) -> dict[int, Path]:
    """Per-rank files `<prefix>.<rank>.et` (or `.et.gz`), as {rank: path}."""
    prefix = Path(prefix)
    parent = prefix.parent if str(prefix.parent) else Path(".")
    found: dict[int, Path] = {}
    if not parent.is_dir():
        return found
    names = sorted(os.listdir(parent))
    check_complete(prefix, names)
    for n in names:
        m = _RANK_RE.match(n)
        # only regular files in the folder (`io.files`); a folder named like a trace is none
        if m and m.group("prefix") == prefix.name and found_file(parent, parent / n):
            p = parent / n
            rank = rank_number(m.group("rank"), p)
            if rank in found:
                raise TraceFormatError(str(p), f"rank {rank} appears twice (also {found[rank].name})")
            found[rank] = p
    return dict(sorted(found.items()))


def rank_of(path: str | os.PathLike) -> int | None:
    """The rank a file's name gives (`<prefix>.<rank>.et[.gz]`), or None; a ChakraError for a rank
    past `io.files.MAX_RANK`."""
    m = _RANK_RE.match(Path(path).name)
    return rank_number(m.group("rank"), path) if m else None


def prefix_of(path: str | os.PathLike) -> str | None:
    """The job prefix a rank file's name gives (`<prefix>.<rank>.et[.gz]`), or None."""
    m = _RANK_RE.match(Path(path).name)
    return m.group("prefix") if m else None


def is_et_name(path: str | os.PathLike) -> bool:
    """A name ending in `.et` or `.et.gz`."""
    return _ET_RE.search(Path(path).name) is not None


def locate(path: str | os.PathLike) -> dict[int, Path]:
    """The Chakra files a path names, as {rank: file}, without reading them.

    A file is one rank (the rank its name gives, else 0); otherwise the path is a prefix of
    `<prefix>.<rank>.et` files, or a folder holding the files of exactly one such prefix.
    """
    p = Path(path)
    if p.is_file() or (p.exists() and not p.is_dir()):  # named: a pipe or device too, read with a size limit
        return {rank_of(p) or 0: p}
    if p.is_dir():
        prefixes = sorted({m.group("prefix") for q in p.iterdir() if (m := _RANK_RE.match(q.name)) and not q.is_dir()})
        if len(prefixes) == 1:
            return discover(p / prefixes[0])
        if prefixes:
            shown = ", ".join(prefixes[:8]) + (", ..." if len(prefixes) > 8 else "")
            raise ChakraError(
                f"{p}: holds the traces of {len(prefixes)} jobs ({shown}); give one prefix, e.g. {p / prefixes[0]}"
            )
        others = sorted(q.name for q in p.iterdir() if _ET_RE.search(q.name) or is_json_path(q.name))
        hint = f"; it has {', '.join(others[:4])}: name them <prefix>.<rank>.et" if others else ""
        raise ChakraError(
            f"{p}: a folder that holds no workload (expected <prefix>.<rank>.et[.gz] files or a "
            f"`chakra collect` folder{hint})"
        )
    found = discover(p)
    if not found:
        raise ChakraError(f"{p}: no such file, and no files named {p.name}.<rank>.et[.gz]")
    return found


# --------------------------------------------------------------------------- PyTorch files given as Chakra

_SNIFF_BYTES = 1 << 20  # enough for the metadata some tools write before traceEvents
_PYTORCH_SUFFIX = re.compile(r"(?:\.et)?(?:\.kineto)?(?:\.pt)?\.json(?:\.gz)?$")


def sniff(path: str | os.PathLike) -> str | None:
    """ "pytorch-host" or "kineto" when a file is one of PyTorch's JSON traces, else None. Reads
    at most the first MiB: host traces have a top-level "schema" (then "nodes"), Kineto ones
    "schemaVersion" or "traceEvents", wherever they are among the top-level keys (a "metadata"
    object may come first); Chakra JSON has "format" instead (`kineto_formats.json_kind`)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a pipe is read once, by the reader; a folder or device is no PyTorch trace
        with open_regular(path) as f:  # (never blocks, should the file become a pipe meanwhile)
            head = f.read(_SNIFF_BYTES)
            if head[:2] == b"\x1f\x8b":
                f.seek(0)
                with gzip.open(f, "rb") as g:
                    head = g.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error, ChakraError):
        return None  # unreadable here: the reader says why
    if not head.lstrip()[:1] == b"{":
        return None
    return json_kind(head)


def refuse_pytorch(path: str | os.PathLike) -> None:
    """ChakraError naming the command that converts `path` when it is a PyTorch trace, not Chakra."""
    kind = sniff(path)
    if kind is None:
        return
    p = Path(path)
    stem = _PYTORCH_SUFFIX.sub("", p.name) or p.name
    if kind == "pytorch-host":
        kineto = next((k for k in _kineto_beside(p, stem) if k.is_file()), None)
        cmd = f"chakra convert pytorch {p}{f' {kineto}' if kineto else ''} -o {p.with_name(stem)}"
        raise ChakraError(
            f"{p}: a PyTorch host execution trace (JSON), not a Chakra trace; convert it first: {cmd} "
            f"(or give the `chakra collect` folder it is in)"
        )
    raise ChakraError(
        f"{p}: a Kineto (PyTorch profiler) trace, not a Chakra trace; it is converted together with its host "
        f"execution trace: chakra convert pytorch HOST_TRACE.json {p} -o {p.with_name(stem)}"
    )


def _kineto_beside(host: Path, stem: str) -> list[Path]:
    """Where `chakra collect` (rank<r>.kineto.json[.gz]) and users put a host trace's Kineto trace."""
    return [host.with_name(f"{stem}.kineto.json{gz}") for gz in (".gz", "")]


def write_comm_groups(groups: dict[str, list[int]], path: str | os.PathLike, *, leftovers: bool = True) -> Path:
    """ASTRA-sim's communicator-group file (`read_comm_groups`' format), written atomically
    (`atomic_output`, which `leftovers` goes to)."""
    with atomic_output(os.fspath(path), compress=False, leftovers=leftovers) as f:
        f.write((json.dumps({str(k): list(v) for k, v in groups.items()}, indent=1) + "\n").encode())
    return Path(path)


def read_comm_groups(path: str | os.PathLike) -> dict[str, list[int]]:
    """ASTRA-sim's communicator-group file: {"<group id>": [rank, ...], ...}."""
    path = os.fspath(path)
    text = read_text(path, "communicator-group file")  # a regular file of bounded size
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceFormatError(path, f"cannot read communicator groups: {e}") from None
    except (ValueError, RecursionError) as e:
        limit = reader_limit(e, text)
        if limit is None:
            raise
        raise TraceFormatError(
            path, f"cannot read communicator groups: {limit[0]}", offset=limit[1], offset_kind="character"
        ) from None
    if not isinstance(raw, dict):
        raise TraceFormatError(path, "expected an object mapping group id to a list of ranks")
    groups = {}
    for k, v in raw.items():
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            raise TraceFormatError(path, f"group {k!r}: expected a list of integer ranks, got {v!r}")
        if len(set(v)) != len(v):
            raise TraceFormatError(path, f"group {k!r}: a rank is listed twice in {v!r}")
        groups[str(k)] = list(v)  # listed order: a group collective runs its ring in this order
    return groups
