"""Calibrated kernels: occupy this process's device for a given time, or for a given FLOP count.

The schema-less replayer turns every compute node into one of these. On CPU a kernel is a loop of
small matmuls (the calibrated work unit) finished by a busy-wait on ``time.perf_counter``; on CUDA
it is ``torch.cuda._sleep`` (calibrated in cycles per µs) or matmuls plus a sleep for the remainder.
Calibration runs once per process and device.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Calibration", "Kernel", "calibrate", "CPU_UNIT_N", "CUDA_UNIT_N"]

CPU_UNIT_N = 64  # CPU work unit: a 64x64 float32 matmul (~10 µs on one core)
CUDA_UNIT_N = 2048  # CUDA work unit: a 2048^2 bf16 matmul (tens of µs on a recent GPU)


@dataclass
class Calibration:
    """What the kernels were calibrated to on this process's device (one per process and device)."""

    device: str
    unit: str  # the work unit, e.g. "mm 64x64 float32"
    unit_flops: float
    unit_us: float  # time of one work unit
    flops_per_s: float  # FLOP rate of the work unit
    cycles_per_us: float | None = None  # CUDA: torch.cuda._sleep cycles per µs
    spin_us: float = 0.0  # one busy-wait iteration (clock read)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


_CALIBRATIONS: dict[str, Calibration] = {}


def calibrate(device: str = "cpu", *, force: bool = False) -> Calibration:
    """Measure the work unit's time and FLOP rate (after warm-up) and, on CUDA, the sleep cycles per µs.
    Done once per process and device; `force` measures again."""
    import torch

    key = _device_key(device)
    if not force and key in _CALIBRATIONS:
        return _CALIBRATIONS[key]
    pc = time.perf_counter
    t0 = pc()
    k = 100_000
    for _ in range(k):
        pc()
    spin_us = (pc() - t0) / k * 1e6
    if key.startswith("cuda"):
        cal = _calibrate_cuda(torch, key, spin_us)
    else:
        n = CPU_UNIT_N
        a, b, o = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        for _ in range(50):
            torch.mm(a, b, out=o)
        best = math.inf
        for _ in range(5):  # the fastest of 5 batches: the unit's time when nothing disturbs it
            reps = 100
            t0 = pc()
            for _ in range(reps):
                torch.mm(a, b, out=o)
            best = min(best, (pc() - t0) / reps)
        flops = 2.0 * n**3
        cal = Calibration(key, f"mm {n}x{n} float32", flops, best * 1e6, flops / best, None, spin_us)
    _CALIBRATIONS[key] = cal
    return cal


def _calibrate_cuda(torch, key: str, spin_us: float) -> Calibration:
    dev = torch.device(key)
    with torch.cuda.device(dev):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def timed(fn) -> float:  # ms on the device
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        torch.cuda._sleep(10_000)
        c1, c2 = 1_000_000, 11_000_000
        t1 = min(timed(lambda: torch.cuda._sleep(c1)) for _ in range(3))
        t2 = min(timed(lambda: torch.cuda._sleep(c2)) for _ in range(3))
        cycles_per_us = (c2 - c1) / max((t2 - t1) * 1e3, 1e-9)
        n = CUDA_UNIT_N
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        o = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(10):
            torch.mm(a, b, out=o)
        reps = 20

        def many():
            for _ in range(reps):
                torch.mm(a, b, out=o)

        ms = min(timed(many) for _ in range(3)) / reps
    flops = 2.0 * n**3
    return Calibration(key, f"mm {n}x{n} bfloat16", flops, ms * 1e3, flops / (ms * 1e-3), cycles_per_us, spin_us)


def _device_key(device: str) -> str:
    device = str(device)
    if device == "cuda":
        import torch

        return f"cuda:{torch.cuda.current_device()}"
    return device


class Kernel:
    """Occupies this process's device for a given time: `host(deadline)` spins the CPU until a
    `time.perf_counter` deadline (matmul units while more than one fits, then a clock busy-wait);
    `device_op(us, flops)` returns a closure launching CUDA work of that length.

    `yield_cpu`: between slices the spin calls `sched_yield`, so a runnable thread on the same core (the
    job's own gloo communication threads, on a machine with fewer free cores than threads) goes first, as
    it would have on its own core when the trace was recorded; the node still ends at its deadline. On a
    machine with a free core per thread nothing else is runnable and the spin keeps its core.
    """

    def __init__(self, device: str = "cpu", calibration: Calibration | None = None, *, yield_cpu: bool = True):
        import torch

        self.torch = torch
        self.device = _device_key(device)
        self.cal = calibration or calibrate(self.device)
        n = CPU_UNIT_N
        cal_cpu = self.cal if not self.device.startswith("cuda") else calibrate("cpu")
        self.cpu_cal = cal_cpu
        self._unit_s = cal_cpu.unit_us * 1e-6
        self._yield = getattr(os, "sched_yield", None) if yield_cpu else None
        self._a, self._b, self._o = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        if self.device.startswith("cuda"):
            m = CUDA_UNIT_N
            dev = torch.device(self.device)
            self._ga = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
            self._gb = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
            self._go = torch.empty(m, m, device=dev, dtype=torch.bfloat16)

    def host(self, deadline: float) -> None:
        pc, unit, mm, yld = time.perf_counter, self._unit_s, self.torch.mm, self._yield
        a, b, o = self._a, self._b, self._o
        while True:
            left = deadline - pc()
            if left <= 0:
                return
            if left > unit:
                mm(a, b, out=o)
            if yld is not None:
                yld()

    def busy(self, seconds: float) -> None:
        """Occupy the CPU for `seconds` from now."""
        self.host(time.perf_counter() + seconds)

    def device_op(self, us: float, flops: float | None = None) -> Callable[[], None] | None:
        """A closure launching `us` µs of device work (or `flops` as matmuls plus a sleep for the rest)."""
        torch, cal = self.torch, self.cal
        sleep = torch.cuda._sleep
        units = 0
        if flops is not None and flops > 0:
            units = int(flops // cal.unit_flops)
            us = (flops - units * cal.unit_flops) / cal.flops_per_s * 1e6
        cycles = int(round(us * (cal.cycles_per_us or 0.0)))
        if units == 0 and cycles <= 0:
            return None
        if units == 0:
            return lambda: sleep(cycles)
        mm, a, b, o = torch.mm, self._ga, self._gb, self._go

        def run() -> None:
            for _ in range(units):
                mm(a, b, out=o)
            if cycles > 0:
                sleep(cycles)

        return run
