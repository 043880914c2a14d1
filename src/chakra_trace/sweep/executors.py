"""Where points run: a pool of local worker processes (no extra dependency), or Ray.

The pool manages its processes itself rather than through `concurrent.futures`, whose pool
breaks as a whole when one worker is killed: each worker holds one point at a time over its own
pipe, and the parent waits on the pipes and the processes' sentinels together. A worker that dies
(killed, out of memory) costs only the point it held: the point goes back to the queue, up to
``retries`` more times, and a fresh worker takes the dead one's place. Workers are spawned (not
forked: the parent may run threads, e.g. a progress bar) and ignore SIGINT, so Ctrl-C stops the
parent, which flushes what finished and ends its workers; a parent killed outright (SIGKILL)
takes its workers with it (`io.workers.die_with_parent`), and a worker whose parent is gone
exits quietly rather than print a broken pipe.

Ray: one task per point (``max_retries`` re-runs a task whose worker died), at most a few per
CPU in flight. ``--ray auto`` starts a local runtime with ``workers`` CPUs and stops it after;
an address joins that cluster.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from ..errors import ChakraError
from ..io.workers import die_with_parent
from .evaluate import evaluate

OnRow = Callable[[dict], None]


@dataclass
class Tally:
    """What happened to the points an executor ran."""

    retried: int = 0
    lost: list[str] = field(default_factory=list)  # ids of points lost with their worker on every try
    restarts: int = 0


def _worker(conn: Connection, ctx: dict, parent: int) -> None:
    die_with_parent(parent)  # (a parent killed with SIGKILL cannot end us itself)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            point = conn.recv()
        except (EOFError, OSError):
            return
        if point is None:
            return
        row = evaluate(ctx, point)
        try:
            conn.send(row)
        except OSError:  # the parent is gone (BrokenPipeError): nobody to take the row
            return


class _Slot:
    def __init__(self, mpctx, ctx: dict):
        self.conn, child = mpctx.Pipe()
        self.proc = mpctx.Process(target=_worker, args=(child, ctx, os.getpid()), daemon=True)
        self.proc.start()
        child.close()
        self.point: dict | None = None

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass


def run_pool(ctx: dict, points: list[dict], workers: int, on_row: OnRow, retries: int = 2) -> Tally:
    """Run ``points`` in ``workers`` local processes, calling ``on_row`` with each row in the parent."""
    tally = Tally()
    if not points:
        return tally
    mpctx = mp.get_context("spawn")
    queue = deque(points)
    tries: dict[str, int] = {}
    slots = [_Slot(mpctx, ctx) for _ in range(min(workers, len(points)))]
    try:
        while queue or any(s.point is not None for s in slots):
            for s in slots:
                if s.point is None and queue:
                    s.point = queue.popleft()
                    try:
                        s.conn.send(s.point)
                    except OSError:  # died before it could take it: the sentinel says so below
                        pass
            waits: list = [s.conn for s in slots if s.point is not None] + [s.proc.sentinel for s in slots]
            ready = set(wait(waits))
            for i, s in enumerate(slots):
                if s.conn in ready or s.proc.sentinel in ready:
                    row = _receive(s)
                    if row is not None:
                        s.point = None
                        on_row(row)
                if s.proc.sentinel in ready or not s.proc.is_alive():
                    s.proc.join()
                    if s.point is not None:  # its point goes back to the queue, or is given up
                        n = tries[s.point["id"]] = tries.get(s.point["id"], 0) + 1
                        if n <= retries:
                            tally.retried += 1
                            queue.appendleft(s.point)
                        else:
                            tally.lost.append(s.point["id"])
                    s.conn.close()
                    tally.restarts += 1
                    slots[i] = _Slot(mpctx, ctx)
    finally:
        for s in slots:
            s.stop()
        for s in slots:
            s.proc.join(timeout=5)
            if s.proc.is_alive():
                s.proc.kill()
                s.proc.join()
    return tally


def _receive(s: _Slot) -> dict | None:
    """The row a worker sent, if one is waiting (None when its pipe is empty or broken)."""
    try:
        if s.conn.poll():
            return s.conn.recv()
    except (EOFError, OSError):
        pass
    return None


def run_ray(
    ctx: dict, points: list[dict], workers: int, on_row: OnRow, address: str = "auto", retries: int = 2
) -> Tally:
    """Run ``points`` as Ray tasks: ``address`` "auto" starts a local Ray runtime of ``workers``
    CPUs (stopped after), any other address joins that cluster (every CPU it has is used)."""
    try:
        import ray
    except ImportError:
        raise ChakraError("Ray is not installed: pip install 'chakra-trace[ray]'") from None
    tally = Tally()
    if not points:
        return tally
    started = not ray.is_initialized()
    if started:
        kw = {"num_cpus": workers} if address == "auto" else {"address": address}
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kw)
    try:
        task = ray.remote(num_cpus=1, max_retries=retries)(evaluate)
        cpus = int(ray.cluster_resources().get("CPU", workers)) if address != "auto" else workers
        ctx_ref = ray.put(ctx)
        todo = deque(points)
        inflight: dict = {}
        while todo or inflight:
            while todo and len(inflight) < 2 * max(cpus, 1):
                p = todo.popleft()
                inflight[task.remote(ctx_ref, p)] = p
            done, _ = ray.wait(list(inflight), num_returns=1)
            for ref in done:
                p = inflight.pop(ref)
                try:
                    on_row(ray.get(ref))
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.RayTaskError):
                    tally.lost.append(p["id"])
    finally:
        if started:
            ray.shutdown()
    return tally
