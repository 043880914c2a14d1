"""Worker processes that end with the process that started them.

A pool's workers finish their current task before they notice that their parent is gone: after
`kill -9` of `chakra convert pytorch -j 2`, converting one rank went on for minutes with nobody
to take the result. `pool_options()` gives a pool an initializer that has the kernel kill each
worker when its parent dies (Linux `prctl(PR_SET_PDEATHSIG)`), or, where there is no such call,
a thread that polls the parent's id and exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


def die_with_parent(parent: int) -> None:
    """End this process when process `parent` (the one that started it) ends; at once if it has."""
    if not _kernel_kills_us() or os.getppid() != parent:  # (it may have died before the call)
        _watch(parent)


def _kernel_kills_us() -> bool:
    """Ask Linux to send SIGKILL when the parent ends; False where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    """Exit when this process's parent is no longer `parent` (it ended: we were re-parented)."""
    if os.getppid() != parent:
        os._exit(1)

    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=poll, name="die-with-parent", daemon=True).start()


def _initialize(parent: int, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    die_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


def pool_options(initializer: Callable[..., Any] | None = None, initargs: tuple = ()) -> dict[str, Any]:
    """`initializer`/`initargs` keywords for `concurrent.futures.ProcessPoolExecutor` or
    `multiprocessing.Pool` whose workers end with this process (then run `initializer(*initargs)`)."""
    return {"initializer": _initialize, "initargs": (os.getpid(), initializer, initargs)}
