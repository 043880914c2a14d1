"""Run a function on N ranks of a local torch.distributed job and collect what each returns.

`run_ranks("pkg.mod:fn", 2)` starts one fresh interpreter per rank (running this module's
`_worker` on a pickled spec), each in its own session so that a rank and anything it started
can be killed as a whole, with the usual env:// variables on 127.0.0.1. Each worker
joins a process group, calls ``fn(rank, world_size, *args, **kwargs)`` and pickles the result
(or its traceback) into the job's temp folder. The parent never imports torch.

No orphans: the parent kills every rank's process group on error, timeout or interrupt, and
each worker watches its parent and exits if it goes away.
"""

from __future__ import annotations

import datetime
import importlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import ChakraError

_POLL_S = 0.01
_GRACE_S = 1.0  # after a rank fails, how long the others may take to report their own errors
# `-c` rather than `-m`: runpy would warn when the package's __init__ already imported this module
_BOOT = (
    "import sys; from chakra_trace.replay.launch import _worker; "
    "sys.exit(_worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))"
)
_LOG_TAIL = 4000
_PROGRESS_ENV = "CHAKRA_TRACE_PROGRESS_FILE"


class RankFailed(ChakraError):
    """A rank of `run_ranks` failed. The message is one line (the rank and its error); the rank's
    traceback or output is `detail`, and the cause (`__cause__`) of this error, which `--debug` shows.
    ``others``: one line for each other rank that failed on its own ("rank N failed: ..."), the
    first failure's rank is ``rank``; ``payload``: what its exception carried for the launcher
    (its ``payload`` attribute, e.g. the collective that failed), or None."""

    def __init__(self, message: str, detail: str = "", *, rank: int = -1, others=(), payload=None):
        super().__init__(message)
        self.detail = detail
        self.rank = rank
        self.others = list(others)
        self.payload = payload


class WorkerTraceback(Exception):
    """The text of a rank's traceback or output, chained under `RankFailed`."""


def one_line(text: str, limit: int = 300) -> str:
    """The line of an error text that says what went wrong: for a traceback its last line (the
    exception), otherwise its first non-empty line, cut to `limit` characters."""
    lines = [x.strip() for x in str(text).strip().splitlines() if x.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (rank 0's store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_together(group=None, device: str = "cpu"):
    """`measure`'s ``decide`` for a rank of a job: every rank stops at the same sample, when
    all of them want to (an all-reduce MIN of the wishes over `group`, with the flag on
    `device`: a CUDA device for an NCCL group). Without a process group, a rank decides alone."""
    import torch
    import torch.distributed as dist

    flag = torch.zeros(1, dtype=torch.int32, device=device)

    def decide(stop: bool) -> bool:
        if not dist.is_initialized():
            return stop
        flag.fill_(1 if stop else 0)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        return bool(flag.item())

    return decide


def _python_path() -> str:
    """The parent's import path, so a worker imports what the parent can (as multiprocessing's spawn does)."""
    parts = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        if os.path.isdir(p) and p not in parts:
            parts.append(p)
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(parts + ([old] if old else []))


def rank_env(rank: int, world_size: int, port: int, env: dict | None = None) -> dict:
    """The environment of one worker: env:// rendezvous on loopback, one intra-op thread unless given."""
    out = dict(os.environ)
    out.update({k: str(v) for k, v in (env or {}).items()})
    out.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size),
            "GLOO_SOCKET_IFNAME": "lo",
            "PYTHONPATH": _python_path(),
        }
    )
    out["OMP_NUM_THREADS"] = str((env or {}).get("OMP_NUM_THREADS", 1))
    return out


def _kill(procs: dict[int, subprocess.Popen]) -> None:
    """SIGTERM then SIGKILL each rank's whole process group; reap them."""
    alive = [p for p in procs.values() if p.poll() is None]
    for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if p.poll() is None]
            if alive:
                time.sleep(_POLL_S)
        if not alive:
            break
    for p in procs.values():
        # the rank's leader has exited; anything it left in its group goes too
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable process
            pass


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def _other_line(rank: int, msg: str) -> str:
    """The line of a rank that failed after the first one: when it only lost its connection to a
    rank that had failed, it says so rather than repeating the transport's message."""
    if any(x in msg for x in _PEER_GONE):
        return f"rank {rank} stopped: a peer rank failed and closed its connection"
    return f"rank {rank} failed: {msg}"


def _failure(res: dict) -> tuple:
    """(time, one line, traceback, payload) of a rank's reported error."""
    return (res["time"], one_line(res["error"]), res.get("traceback") or res["error"], res.get("payload"))


def _read_result(path: str):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - a result the parent cannot unpickle
        return {"ok": False, "error": f"cannot read the rank's result: {type(e).__name__}: {e}", "time": time.time()}


def run_ranks(
    target: str,
    world_size: int,
    *,
    args: tuple = (),
    kwargs: dict | None = None,
    backend: str = "gloo",
    device: str = "cpu",
    timeout_s: float = 300,
    env: dict | None = None,
    init_group: bool = True,
    progress: Callable[[int], Any] | None = None,
) -> list:
    """Run ``target`` ("package.module:function") as ``function(rank, world_size, *args, **kwargs)`` on
    `world_size` local ranks joined in a torch.distributed process group; returns the results by rank.
    ``init_group=False`` lets a single rank that runs no collectives go without a group.

    A rank that raises (or dies) makes the others be killed and raises `RankFailed` ("rank N failed: <its
    error, one line>", the traceback chained as its cause);
    past `timeout_s` every rank is killed and the error names the ranks still running. `device="cuda"` puts
    rank r on cuda:r (with nccl, the process group is bound to it). `env` adds variables for the workers.
    """
    if ":" not in target:
        raise ChakraError(f"target {target!r}: expected 'package.module:function'")
    if int(world_size) < 1:
        raise ChakraError(f"world_size must be at least 1, got {world_size}")
    world_size = int(world_size)
    with tempfile.TemporaryDirectory(prefix="chakra-ranks-") as tmp:
        spec = {
            "target": target,
            "world_size": world_size,
            "args": tuple(args),
            "kwargs": dict(kwargs or {}),
            "backend": backend,
            "device": device,
            "timeout_s": float(timeout_s),
            "dir": tmp,
            "init_group": bool(init_group),
        }
        spec_path = os.path.join(tmp, "spec.pkl")
        try:
            with open(spec_path, "wb") as f:
                pickle.dump(spec, f)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise ChakraError(f"run_ranks({target!r}): arguments cannot be pickled: {e}") from None
        port = free_port()
        procs: dict[int, subprocess.Popen] = {}
        try:
            for r in range(world_size):
                log = open(os.path.join(tmp, f"rank{r}.log"), "wb")
                try:
                    renv = rank_env(r, world_size, port, env)
                    if progress is not None and r == 0:
                        renv[_PROGRESS_ENV] = os.path.join(tmp, "progress")
                    procs[r] = subprocess.Popen(
                        [sys.executable, "-c", _BOOT, spec_path, str(r), str(os.getpid())],
                        env=renv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                finally:
                    log.close()
            return _wait(procs, tmp, float(timeout_s), progress)
        finally:
            _kill(procs)


def progress_reporter(every_s: float = 0.1) -> Callable[[int], None] | None:
    """In a rank of `run_ranks(..., progress=...)`: a callback(count) that tells the launcher how far
    this rank is (at most every `every_s`); None where nobody is listening."""
    path = os.environ.get(_PROGRESS_ENV)
    if not path:
        return None
    last = [0.0]

    def report(n: int) -> None:
        now = time.monotonic()
        if now - last[0] < every_s:
            return
        last[0] = now
        with open(path + ".part", "w") as f:
            f.write(str(int(n)))
        os.replace(path + ".part", path)

    return report


def _read_progress(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return None


def _wait(
    procs: dict[int, subprocess.Popen], tmp: str, timeout_s: float, progress: Callable[[int], Any] | None = None
) -> list:
    deadline = time.monotonic() + timeout_s
    results: dict[int, Any] = {}
    shown = None
    first_failure = None
    while True:
        if progress is not None:
            n = _read_progress(os.path.join(tmp, "progress"))
            if n is not None and n != shown:
                progress(n)
                shown = n
        failed: dict[int, tuple[float, str, str, Any]] = {}  # (time, one line, detail, payload)
        for r, p in procs.items():
            if r in results:
                continue
            if p.poll() is None:
                # a rank that reported its error may still be exiting (torch's teardown) while the peers it
                # left already failed too: its report names the cause
                res = _read_result(os.path.join(tmp, f"rank{r}.pkl"))
                if res is not None and not res["ok"]:
                    failed[r] = _failure(res)
                continue
            res = _read_result(os.path.join(tmp, f"rank{r}.pkl"))
            if res is not None and res["ok"] and p.returncode == 0:
                results[r] = res["result"]
            elif res is not None and not res["ok"]:
                failed[r] = _failure(res)
            else:
                why = f"exited with status {p.returncode}" if p.returncode >= 0 else f"killed by signal {-p.returncode}"
                log = _tail(os.path.join(tmp, f"rank{r}.log"))
                last = one_line(log)
                failed[r] = (time.time(), f"{why} without a result" + (f" ({last})" if last else ""), log, None)
        if failed:
            first_failure = first_failure or time.monotonic()
            running = [r for r, p in procs.items() if p.poll() is None and r not in failed]
            if running and time.monotonic() - first_failure < _GRACE_S:  # the others may say why they fail too
                time.sleep(_POLL_S)
                continue
            # ranks may fail together (one's exit breaks the others' connections): the earliest is the cause
            r = min(failed, key=lambda k: failed[k][0])
            _kill(procs)
            _, msg, detail, payload = failed[r]
            others = [_other_line(k, failed[k][1]) for k in sorted(failed) if k != r]
            raise RankFailed(
                f"rank {r} failed: {msg}", detail, rank=r, others=others, payload=payload
            ) from WorkerTraceback(detail)
        if len(results) == len(procs):
            return [results[r] for r in sorted(results)]
        if time.monotonic() > deadline:
            running = sorted(r for r, p in procs.items() if p.poll() is None and r not in results)
            _kill(procs)
            raise ChakraError(
                f"timed out after {timeout_s:g} s; ranks still running: {running} (of {len(procs)}); all were killed"
            )
        time.sleep(_POLL_S)


# ------------------------------------------------------------------------------------------- worker
def _watch_parent(parent: int, deadline: float) -> None:
    """When the launcher goes away (or long after its timeout), end this rank and everything it started
    (its whole process group), so nothing outlives the launcher."""
    while True:
        if os.getppid() != parent or time.monotonic() > deadline:
            try:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            finally:
                os._exit(3)
        time.sleep(0.2)


def _import_target(target: str):

    mod_name, _, fn_name = target.partition(":")
    obj: Any = importlib.import_module(mod_name)
    for part in fn_name.split("."):
        obj = getattr(obj, part)
    return obj


def _write_result(tmp: str, rank: int, payload: dict) -> None:
    path = os.path.join(tmp, f"rank{rank}.pkl")
    part = path + ".part"
    try:
        data = pickle.dumps(payload)
    except Exception as e:  # noqa: BLE001 - the function returned something that does not pickle
        data = pickle.dumps(
            {"ok": False, "time": time.time(), "error": f"its result cannot be pickled: {type(e).__name__}: {e}"}
        )
    with open(part, "wb") as f:
        f.write(data)
    os.replace(part, path)


def _worker(spec_path: str, rank: int, parent: int) -> int:
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    threading.Thread(
        target=_watch_parent, args=(parent, time.monotonic() + spec["timeout_s"] + 30), daemon=True
    ).start()
    tmp = spec["dir"]
    world_size = spec["world_size"]

    def report(e: BaseException) -> None:
        error = str(e) if isinstance(e, ChakraError) else f"{type(e).__name__}: {e}"
        _write_result(
            tmp,
            rank,
            {
                "ok": False,
                "time": time.time(),
                "error": one_line(error),
                "traceback": traceback.format_exc(),
                "payload": getattr(e, "payload", None),
            },
        )

    reported = False
    try:
        import torch
        import torch.distributed as dist

        fn = _import_target(spec["target"])  # before joining: a bad target fails fast
        backend = spec["backend"]
        kw: dict[str, Any] = {}
        if spec["device"].startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", rank))
            torch.cuda.set_device(local)
            if "nccl" in backend:
                kw["device_id"] = torch.device("cuda", local)
        group = spec.get("init_group", True) or world_size > 1
        if group:  # (a lone rank that needs no collectives runs without one: a gloo group costs CPU)
            dist.init_process_group(
                backend,
                init_method="env://",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(seconds=max(spec["timeout_s"], 1.0)),
                **kw,
            )
        try:
            result = fn(rank, world_size, *spec["args"], **spec["kwargs"])
        except BaseException as e:
            # reported before the teardown below, which breaks the peers' connections and may wait
            # for a collective that a peer never joins (the launcher then ends this process)
            report(e)
            reported = True
            raise
        finally:
            try:
                if group:
                    dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - teardown after another error
                pass
    except BaseException as e:  # noqa: BLE001 - report everything, including SystemExit
        if not reported:
            report(e)
        return 1
    _write_result(tmp, rank, {"ok": True, "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
