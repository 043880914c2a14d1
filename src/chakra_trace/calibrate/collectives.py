"""Timing the machine's real collective backend: gloo on 127.0.0.1 (NCCL on GPUs) with
torch.distributed in spawned processes, per collective, message size and rank count.

A sample is one collective between barriers, timed on every rank and taken as the slowest
rank's time (the collective is done when its last member is). Sizes follow Chakra's comm_size
convention (`io.collective_names.message_bytes`): an all-gather's size is what each rank
contributes, every other collective's its input."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from ..errors import ChakraError
from ..io.documents import read_json
from ..replay.environment import environment
from ..replay.measure import Measurement

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
KIB = 1024
DEFAULT_SIZES = [4 * KIB * 4**i for i in range(8)]  # 4 KiB .. 64 MiB


@dataclass(frozen=True)
class Point:
    """The samples of one collective of one size at one rank count."""

    collective: str
    ranks: int
    nbytes: int
    measurement: Measurement


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _repeats(nbytes: int, repeats: int) -> int:
    """Fewer samples of the largest messages: their time is long and steady."""
    return max(5, repeats // 4) if nbytes >= 16 * 2**20 else repeats


def _call(dist, kind: str, x, out, group_size: int):
    if kind == "all_reduce":
        dist.all_reduce(x)
    elif kind == "all_gather":
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, x)
    elif kind == "reduce_scatter":
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, x)
    elif kind == "broadcast":
        dist.broadcast(x, 0)
    elif kind == "all_to_all":
        dist.all_to_all_single(out, x)
    else:
        raise ChakraError(f"unknown collective {kind!r}; one of {', '.join(COLLECTIVES)}")


def _worker(rank: int, world: int, port: int, backend: str, plan: list, repeats: int, warmup: int, out: str) -> None:
    """One rank: every (collective, size) of the plan, samples max-reduced across ranks; rank 0
    writes {key: [seconds...]} to `out`."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
    results = {}
    try:
        for kind, nbytes in plan:
            n = max(world, nbytes // 4 // world * world)  # float32 elements, a multiple of the ranks
            x = torch.ones(n, dtype=torch.float32, device=dev)
            out_n = {"all_gather": n * world, "reduce_scatter": n // world}.get(kind, n)
            o = torch.empty(out_n, dtype=torch.float32, device=dev)
            times = []
            for i in range(warmup + _repeats(nbytes, repeats)):
                dist.barrier()
                sync()
                t0 = time.perf_counter()
                _call(dist, kind, x, o, world)
                sync()
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            t = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            results[f"{kind}:{n * 4}"] = t.tolist()
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


def measure_collectives(
    collectives=COLLECTIVES,
    sizes=DEFAULT_SIZES,
    ranks=(2,),
    *,
    repeats: int = 20,
    warmup: int = 3,
    backend: str | None = None,
    timeout_s: float = 600.0,
) -> list[Point]:
    """Time each collective at each size and rank count in fresh spawned processes on
    127.0.0.1 (backend: NCCL when a GPU is there for every rank, else gloo)."""
    import torch
    import torch.multiprocessing as mp

    for c in collectives:
        if c not in COLLECTIVES:
            raise ChakraError(f"unknown collective {c!r}; one of {', '.join(COLLECTIVES)}")
    env = environment()
    points = []
    for world in ranks:
        be = backend or ("nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo")
        plan = [(c, int(s)) for c in collectives for s in sizes]
        with tempfile.TemporaryDirectory(prefix="chakra-calibrate-") as tmp:
            out = os.path.join(tmp, "times.json")
            ctx = mp.start_processes(
                _worker,
                args=(world, free_port(), be, plan, repeats, warmup, out),
                nprocs=world,
                join=False,
                start_method="spawn",
            )
            deadline = time.monotonic() + timeout_s
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    raise ChakraError(f"calibration at {world} ranks took more than {timeout_s:.0f} s: stopped")
            got = read_json(out, "calibration result")  # (our worker's, but read the one bounded way)
            if not isinstance(got, dict):
                raise ChakraError(f"{out}: the calibration workers wrote no timings")
        for key, samples in got.items():
            kind, _, nbytes = key.partition(":")
            m = Measurement(
                name=f"{kind} {nbytes} B x{world}",
                samples=[float(x) for x in samples],
                warmup=warmup,
                stop_reason="max_repeats",
                env=env,
                extra={"backend": be, "ranks": world, "collective": kind, "bytes": int(nbytes)},
            )
            points.append(Point(kind, world, int(nbytes), m))
    return points


def medians_ns(points: list[Point]) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray, list]]:
    """Per (collective, ranks): sizes, median ns and the median's 95% CI (ns) per size."""
    out: dict[tuple[str, int], tuple[list, list, list]] = {}
    for p in points:
        s, t, c = out.setdefault((p.collective, p.ranks), ([], [], []))
        s.append(p.nbytes)
        t.append(p.measurement.median * 1e9)
        ci = p.measurement.ci95_median or p.measurement.ci95_mean or (p.measurement.median,) * 2
        c.append([ci[0] * 1e9, ci[1] * 1e9])
    return {k: (np.asarray(s), np.asarray(t), c) for k, (s, t, c) in out.items()}
