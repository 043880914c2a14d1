"""Recording without code changes, driven by optimizer steps (the runtime side of `chakra collect`).

The bootstrap `sitecustomize` registers `post_hook` with
`torch.optim.optimizer.register_optimizer_step_post_hook` in every Python process of the job,
and calls it through a stub that loads this module at the first optimizer step. Nothing runs in
processes that never step an optimizer (the torchrun agent, data-loader workers).

Steps. The end of an optimizer step is the end of a training step. The first optimizer that
steps in a process drives the schedule (other optimizers of the process are ignored), and its
first step ends step 0: the profiler starts there, so `wait` must be at least 1. A global post
hook runs inside the optimizer's `Optimizer.step#...` profiler range; a step boundary there
would cut that range in two (the ET would hold its children without it). So the first call
wraps the driving optimizer's `step` (an instance attribute, a bound method, as LR schedulers
expect) and later boundaries run after that range has closed. The wrapper is removed when
recording ends.

Configuration comes from the environment (set by `chakra collect`): CHAKRA_COLLECT_DIR,
CHAKRA_COLLECT_SCHEDULE ("wait,warmup,active"), CHAKRA_COLLECT_GZIP ("1"/"0"),
CHAKRA_COLLECT_NUM_THREADS, CHAKRA_COLLECT_RUN_ID.

Recording errors never reach the job: they end recording in this process, are printed once on
stderr and land in the rank's manifest.
"""

from __future__ import annotations

import functools
import os
import sys
import types
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .recorder import Recorder

try:
    from . import recorder as _rec
except ImportError:  # loaded by file path by the bootstrap
    _rec = sys.modules["_chakra_collect_recorder"]

ENV_DIR = "CHAKRA_COLLECT_DIR"
ENV_SCHEDULE = "CHAKRA_COLLECT_SCHEDULE"
ENV_GZIP = "CHAKRA_COLLECT_GZIP"
ENV_NUM_THREADS = "CHAKRA_COLLECT_NUM_THREADS"
ENV_RUN_ID = "CHAKRA_COLLECT_RUN_ID"
ENV_PROFILE_MEMORY = "CHAKRA_COLLECT_PROFILE_MEMORY"


class _State:
    off = False  # recording is over (or impossible) in this process
    recorder: Recorder | None = None
    driver: weakref.ReferenceType[Any] | None = None  # weakref to the optimizer whose steps are counted
    # (optimizer ref, our bound method, what opt.__dict__["step"] held before or None)
    wrapped: tuple[weakref.ReferenceType[Any], types.MethodType, Any] | None = None


_S = _State()


def post_hook(opt, args, kwargs) -> None:
    """Global optimizer step post-hook."""
    if _S.off:
        return
    try:
        if _S.driver is None:
            _first_step(opt)
        elif _S.wrapped is None and _S.driver() is opt:  # wrapping failed: boundaries from here
            _boundary()
    except Exception as e:  # never break the job
        _fail(e)


def _first_step(opt) -> None:
    if _rec.active_recorder() is not None:  # the script records by itself (chakra_trace.collect.record)
        _S.off = True
        return
    wait, warmup, active = (int(v) for v in os.environ.get(ENV_SCHEDULE, "1,1,2").split(","))
    nt = os.environ.get(ENV_NUM_THREADS)
    rec = _rec.Recorder(
        os.environ[ENV_DIR],
        wait=wait,
        warmup=warmup,
        active=active,
        gzip=os.environ.get(ENV_GZIP, "1") != "0",
        num_threads=int(nt) if nt else None,
        run_id=os.environ.get(ENV_RUN_ID) or None,
        profile_memory=os.environ.get(ENV_PROFILE_MEMORY) == "1",
        mode="inject",
    )
    _S.recorder = rec
    _S.driver = weakref.ref(opt)
    if wait < 1:
        raise _rec.ChakraError("wait must be at least 1: the first optimizer step ends step 0")
    rec.start()
    _wrap(opt)
    _boundary()  # end of step 0


def _wrap(opt) -> None:
    before = opt.__dict__.get("step")  # e.g. an LR scheduler's wrapper, or None (the class's step)
    inner = opt.step

    @functools.wraps(inner)
    def step(self, *args, **kwargs):
        out = inner(*args, **kwargs)
        if not _S.off:
            try:
                _boundary()
            except Exception as e:
                _fail(e)
        return out

    method = types.MethodType(step, opt)
    opt.step = method
    _S.wrapped = (weakref.ref(opt), method, before)


def _unwrap() -> None:
    if not _S.wrapped:
        return
    ref, method, before = _S.wrapped
    opt = ref()
    if opt is not None and opt.__dict__.get("step") is method:  # not wrapped again since
        if before is None:
            del opt.__dict__["step"]
        else:
            opt.step = before
    # else: something wrapped our wrapper; it stays and only checks _S.off


def _boundary() -> None:
    rec = _S.recorder
    assert rec is not None  # set by _first_step() before the first boundary
    rec.step()
    if rec.done:
        _S.off = True
        _unwrap()


def _fail(e: BaseException) -> None:
    _S.off = True
    msg = f"recording failed: {type(e).__name__}: {e}"
    print(f"chakra collect: pid {os.getpid()}: {msg}; the job goes on without recording", file=sys.stderr)
    rec = _S.recorder
    if rec is not None:
        try:
            rec.fail(msg)
        except Exception:
            pass
    try:
        _unwrap()
    except Exception:
        pass
