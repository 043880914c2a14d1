"""Files found in folders people share: which of them are read, and what their names may say.

A folder or job prefix may come from someone else's tarball, which can carry a named pipe (a
read blocks for ever), a device (`/dev/zero` never ends), a link to the reader's own files
(`~/.ssh/id_rsa`, another job's traces) or a rank number no integer type holds. A file found by
listing a folder is therefore read only when it is a regular file that resolves inside that
folder; a path the user named is theirs to choose and is opened as named (`io.stream`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ChakraError

#: The largest rank a file name may give (torch.distributed's ranks are C ints); a name beyond it
#: (`p.99999999999999999999999.et`) is refused by name instead of overflowing later.
MAX_RANK = (1 << 31) - 1


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def found_file(folder: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether `path`, found by listing `folder`, is a file to read: True for a regular file that
    resolves inside `folder` (through links in it too), False for a folder; a ChakraError naming
    it for anything else (a link out of the folder, a named pipe, a device, a socket, a broken
    link)."""
    p = os.fspath(path)
    try:
        st = os.lstat(p)
    except OSError as e:
        raise ChakraError(f"{p}: cannot read it: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):  # followed when it stays in the folder; then what it names counts
        real, top = os.path.realpath(p), os.path.realpath(folder)
        if os.path.commonpath([real, top]) != top:
            raise ChakraError(f"{p}: links to {real}, not a file in {folder}; files found in a folder must be in it")
        try:
            st = os.stat(p)
        except OSError as e:
            raise ChakraError(f"{p}: a link that cannot be followed ({e.strerror or e})") from None
    if stat.S_ISREG(st.st_mode):
        return True
    if stat.S_ISDIR(st.st_mode):
        return False
    raise ChakraError(f"{p}: {kind_of(st.st_mode)}, not a regular file (only regular files are read from a folder)")


def rank_number(digits: str, path: str | os.PathLike) -> int:
    """The rank `digits` (ASCII, from a file name) give; a ChakraError naming the file past `MAX_RANK`."""
    if len(digits.lstrip("0")) > len(str(MAX_RANK)) or int(digits) > MAX_RANK:
        shown = digits if len(digits) <= 24 else f"{digits[:12]}...{digits[-6:]} ({len(digits)} digits)"
        raise ChakraError(f"{path}: rank {shown} in the file name is past the largest rank, {MAX_RANK}")
    return int(digits)


def regular_files(folder: str | os.PathLike, names: list[str]) -> list[Path]:
    """`folder`'s entries `names` that are files to read (`found_file`), in the order given."""
    return [Path(folder, n) for n in names if found_file(folder, Path(folder, n))]
