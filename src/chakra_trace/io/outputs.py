"""A job's files written as one set: all of the new ones, or the old ones untouched.

`<prefix>.<rank>.et` files (and `<prefix>.comm_groups.json`) are read together as one job, so
writing them one by one in place lets an interruption leave some ranks of the new run beside
ranks of the old one, or fewer ranks than the job has. `file_set` writes them into a temporary
folder beside the outputs instead, `.<name>.<pid>.<random>.set.tmp`; only once every file is
there does the commit begin: that folder is renamed `...commit.tmp` (one atomic step), its files
are renamed into place, files of the prefix that the new set lacks are removed, and the folder is
removed last. So:

- interrupted before the commit (an error, Ctrl-C, SIGTERM, SIGKILL): the old set is untouched
  (the temporary folder is removed on the way out, or by the next write of the prefix after a
  SIGKILL);
- during the commit, SIGINT and SIGTERM wait until it is done (it is renames, milliseconds);
- a commit stopped part-way (SIGKILL, power loss, a rename refused) leaves the `.commit.tmp`
  folder, and `Workload.open` of the prefix refuses to read the set while it is there
  (`check_complete`) instead of reading a mix; the next write of the prefix removes it.

A reader that lists the prefix while another process commits can still see a mix: renames of
many files are not one step, and nothing here locks readers out.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ChakraError
from .et import ACTIVE, _temporary, output_folder, remove_leftovers

COMM_GROUPS_SUFFIX = ".comm_groups.json"
_RANK_SUFFIX = re.compile(r"^\.[0-9]+\.et(?:\.gz)?$")


def comm_groups_path(prefix: str | os.PathLike) -> Path:
    """`<prefix>.comm_groups.json`: where a job's communicator groups are written beside its ranks."""
    return Path(f"{prefix}{COMM_GROUPS_SUFFIX}")


def owned(prefix_name: str, name: str) -> bool:
    """Whether a file `name` belongs to the set of `prefix_name`: a rank file or its groups file."""
    if not name.startswith(prefix_name + "."):
        return False
    rest = name[len(prefix_name) :]
    return rest == COMM_GROUPS_SUFFIX or _RANK_SUFFIX.match(rest) is not None


class FileSet:
    """Where the files of one set are written before `file_set` commits them: `path(name)` is the
    temporary place of the output `<folder>/<name>`."""

    def __init__(self, prefix: Path, staging: Path):
        self.prefix = prefix
        self.folder = staging
        self.names: list[str] = []

    def path(self, name: str) -> Path:
        if os.sep in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r}: a file name, not a path")
        if name not in self.names:
            self.names.append(name)
        return self.folder / name

    def final(self, name: str) -> Path:
        """Where the file `name` is once committed."""
        return self.prefix.parent / name


@contextmanager
def file_set(prefix: str | os.PathLike) -> Iterator[FileSet]:
    """Write the files of `prefix`'s set (see the module docstring) into `FileSet.path(...)`s; they
    replace the prefix's set when the block finishes without error (stale rank files and groups
    file of the prefix removed), and nothing changes otherwise. The prefix's folder is made if
    missing (`et.output_folder`)."""
    if not os.path.basename(os.fspath(prefix)):
        raise ChakraError(f"{os.fspath(prefix)}: a folder; expected an output prefix (e.g. {Path(prefix) / 'job'})")
    prefix = Path(prefix)
    folder = output_folder(prefix)
    remove_leftovers(prefix)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.{os.getpid()}.", suffix=".set.tmp", dir=folder))
    except OSError as e:
        raise type(e)(e.errno, f"cannot write here ({e.strerror})", str(prefix)) from None
    fs = FileSet(prefix, staging)
    ACTIVE.add(os.path.abspath(staging))
    try:
        yield fs
        with _signals_deferred():
            _commit(prefix, staging)
    finally:
        ACTIVE.discard(os.path.abspath(staging))
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _commit(prefix: Path, staging: Path) -> None:
    """Rename `staging`'s files into place (see the module docstring)."""
    folder = prefix.parent
    names = sorted(os.listdir(staging))
    for n in names:  # refused while the old set is still whole
        if os.path.isdir(folder / n) and not os.path.islink(folder / n):
            raise ChakraError(f"{folder / n}: a folder where the output file is to go")
    committing = staging.with_name(staging.name[: -len(".set.tmp")] + ".commit.tmp")
    _fsync_dir(staging)
    ACTIVE.add(os.path.abspath(committing))
    os.rename(staging, committing)
    try:
        for n in names:
            os.replace(committing / n, folder / n)
        keep = set(names)
        for n in os.listdir(folder):
            if owned(prefix.name, n) and n not in keep and not os.path.isdir(folder / n):
                os.unlink(folder / n)
        os.rmdir(committing)
    except OSError as e:
        raise ChakraError(
            f"{prefix}: the new files could not all be put in place ({e.strerror or e}: {e.filename}); the set is "
            f"incomplete and marked so by {committing.name}: write it again"
        ) from None
    finally:
        ACTIVE.discard(os.path.abspath(committing))  # (left after a failure: the next write removes it)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    """Make the renames in `folder` durable (where the platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs (in the main thread; elsewhere signals
    reach the main thread only), then delivered as they would have been."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    wanted = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) not in (None, signal.SIG_IGN)]
    previous = {s: signal.signal(s, lambda signum, _frame: got.append(signum)) for s in wanted}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for signum in dict.fromkeys(got):
            signal.raise_signal(signum)


def check_complete(prefix: str | os.PathLike, names: list[str]) -> None:
    """ChakraError when a commit of `prefix`'s set stopped part-way (its `.commit.tmp` folder is
    among `names`, the prefix folder's entries): the files may mix two runs, or lack ranks."""
    prefix = Path(prefix)
    pattern = _temporary(prefix.name)
    for n in names:
        if n.endswith(".commit.tmp") and pattern.match(n):
            raise ChakraError(
                f"{prefix}: a write of this job stopped part-way ({prefix.parent / n} is left), so its files may mix "
                f"two runs or lack ranks; write it again (or remove {n} to read the files anyway)"
            )
