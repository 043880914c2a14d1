"""The replay runtime: turn a replay plan into calls and run them. It needs torch and
nothing else, because an exported benchmark script carries this file's source verbatim
(`export.py`): the replayer and the exported script run the same code.

A plan is plain JSON: ``storages`` {id: [nbytes, integer?]}, and ``ops``, each
{"op": "aten::addmm.default", "args": [...], "kwargs": {...}, "reads": [...], "writes": [...],
"kind": "op" | "collective" | "delay"}. A collective's ``writes`` name the storages it writes
and a token "#<index>" of its own; an op's ``reads`` name what it must not run before: the
storages it reads and the tokens of collectives the original had waited for by then. A
tensor argument is {"t": [storage, shape, stride, offset, dtype, fill, fresh]}, where fill is
[lo, hi] (integers drawn in it), ["spread", n] / ["spread_to", n] (non-decreasing integers over
[0, n) / [0, n]: offsets), or null;
a non-finite float is {"f": "inf"}; the replay device is {"device": 1}.
"""

import datetime
import importlib
import math
import os
import re
import time
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # (typing only: the exported script imports nothing beyond the standard library and torch)
    from collections.abc import Callable
    from types import ModuleType

    from torch.distributed import Work

resource: "ModuleType | None"
try:
    import resource
except ImportError:  # (not on Windows: no address-space limit to read)
    resource = None


def _torch():
    import torch

    return torch


def available_bytes():
    """Memory this process can still get (MemAvailable; the address-space limit where one is set)."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            avail = 1 << 40
    soft = resource.getrlimit(resource.RLIMIT_AS)[0] if resource is not None else -1
    if resource is not None and soft != resource.RLIM_INFINITY:
        avail = min(avail, soft)
    return int(avail)


def make_storages(plan, device, seed=0):
    """One byte buffer per recorded storage: random floats, zeros for integer storages. A plan
    is data: storages past the memory this process can get are refused before any is made."""
    torch = _torch()
    sizes = [n for n, _ in plan["storages"].values()]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes):
        raise ValueError("a storage size that is not a non-negative integer")
    total, avail = sum(sizes), available_bytes()
    if not str(device).startswith("cuda") and total > avail:
        raise MemoryError(
            f"the plan's storages need {total / 2**30:.3g} GiB, more than the {avail / 2**30:.3g} GiB of memory "
            "available"
        )
    g = torch.Generator().manual_seed(seed)
    out = {}
    for sid, (nbytes, integer) in plan["storages"].items():
        n = (int(nbytes) + 7) // 8 * 8
        if integer:
            out[sid] = torch.zeros(n, dtype=torch.uint8, device=device)
        else:
            out[sid] = torch.randn(n // 4, generator=g, dtype=torch.float32).mul_(0.1).view(torch.uint8).to(device)
    return out


def _fill(t, rng):
    torch = _torch()
    if t.dtype.is_floating_point or t.dtype.is_complex:
        if t.numel():
            if t.dtype.itemsize > 1:
                t.normal_(0.0, 0.1)
            else:
                t.zero_()
    elif t.dtype == torch.bool:
        t.zero_()
    elif rng and rng[0] in ("spread", "spread_to"):  # non-decreasing offsets over [0, n) or [0, n]
        m, n = t.numel(), int(rng[1])
        span = max(m - 1, 1) if rng[0] == "spread_to" else max(m, 1)
        t.copy_((torch.arange(m, dtype=torch.float64) * n / span).floor().clamp_(0, n).view(t.shape))
    elif rng:
        t.random_(int(rng[0]), int(rng[1]) + 1)
    else:
        t.zero_()


def value(spec, storages, device):
    """A plan argument as a live Python/torch value."""
    torch = _torch()
    if isinstance(spec, list):
        return [value(x, storages, device) for x in spec]
    if isinstance(spec, dict):
        if "t" in spec:
            sid, shape, stride, offset, dtype, rng, fresh = spec["t"]
            dt = getattr(torch, dtype) if isinstance(dtype, str) and dtype.isidentifier() else None
            if not isinstance(dt, torch.dtype):  # (a plan is data: a dtype name, no other attribute)
                raise ValueError(f"{dtype!r} is not a torch dtype")
            if fresh:
                t = torch.empty_strided(shape, stride, dtype=dt, device=device)
                _fill(t, rng)
                return t
            base = storages[str(sid)] if str(sid) in storages else storages[sid]
            typed = base[: base.numel() // dt.itemsize * dt.itemsize].view(dt)
            t = typed.as_strided(shape, stride, offset)
            if not (dt.is_floating_point or dt.is_complex):
                _fill(t, rng)
            return t
        if "f" in spec:
            return float(spec["f"])
        if "device" in spec:
            return device
    return spec


OP_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?")
"""An operator name a plan, trace or config may give: "namespace::op" or "namespace::op.overload"."""


# operator namespaces PyTorch registers from Python when a module is imported (a fixed list:
# a trace names a namespace, never a module to import)
_NAMESPACE_MODULES = {
    "_c10d_functional": "torch.distributed._functional_collectives",
    "_c10d_functional_autograd": "torch.distributed._functional_collectives",
    "_dtensor": "torch.distributed.tensor",
    "fsdp": "torch.distributed.fsdp._fully_shard._fsdp_collectives",
}


def _load_namespace(ns):
    module = _NAMESPACE_MODULES.get(ns)
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError:  # (a PyTorch without it: the op is then not registered)
            pass


def registered(name):
    """(namespace, op, overload) of a name of an operator in PyTorch's registry; ValueError otherwise.
    The name is data (a trace, a config, an edited plan): it is matched and looked up in the
    registry, never walked as attributes (`torch.ops.import_module` would import a module)."""
    torch = _torch()
    m = OP_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None or any(p.startswith("__") for p in m.groups() if p):
        raise ValueError(f"{name!r} is not an operator name ('namespace::op' or 'namespace::op.overload')")
    ns, op, overload = m.group(1), m.group(2), m.group(3) or "default"
    _load_namespace(ns)
    try:
        overloads = torch._C._jit_get_operation(f"{ns}::{op}")[1] or []
    except (RuntimeError, TypeError, IndexError):
        overloads = []
    if ("" if overload == "default" else overload) not in overloads:
        raise ValueError(f"{name} is not a registered operator in this PyTorch")
    return ns, op, overload


def resolve(name):
    """The torch.ops overload of a registered "ns::op" or "ns::op.overload" (see `registered`)."""
    torch = _torch()
    ns, op, overload = registered(name)
    packet = getattr(torch.ops, ns)
    if not isinstance(packet, torch._ops._OpNamespace):  # (a method of torch.ops, e.g. load_library)
        raise ValueError(f"{name} is not a registered operator in this PyTorch")
    fn = getattr(getattr(packet, op), overload)
    if not isinstance(fn, torch._ops.OpOverload):
        raise ValueError(f"{name} is not a registered operator in this PyTorch")
    return fn


# ---------------------------------------------------------------- what a replay may run
# A trace, a config and a plan are data: a replay runs operators that compute on tensors, never
# one that opens, saves, loads or maps a file, prints, or reaches another process (a collective
# runs only as a `collective` of the plan, on the replay's own process group).

COMPUTE_NAMESPACES = {
    "aten", "quantized", "_quantized", "quantization", "sparse", "onednn", "mkldnn", "mkldnn_prepacked", "mkl",
    "_c10d_functional", "_c10d_functional_autograd", "c10d_functional", "_dtensor", "fsdp",
}  # fmt: skip
"""Operator namespaces whose ops a replay calls through torch.ops: ATen and its CPU/quantized
kernels, and the functional collectives (which run on the replay's process group). Not c10d
(its ops take a process group object; the plan runs them as `collective`s), prim/prims,
profiler, debugprims (loads tensors from files), symm_mem (rendezvous over the network),
inductor, static_runtime, onnx, export or any other. `allow_namespace` adds one (code, never
data: a test's or a user's own registered compute ops)."""

REFUSED_OPS = {
    "aten::from_file": "maps a file (a path of the trace's choosing) into memory, creating or extending it",
    "aten::save": "writes a file",
    "aten::_print": "prints",
    "aten::warn": "prints a warning",
}
"""Ops of the compute namespaces with an effect outside the process's tensors (found by reading
every schema of `torch._C._jit_get_all_schemas()` with a `str` argument; the string argument
rule below refuses them too)."""

_WORD = re.compile(r"[A-Za-z0-9_]{0,32}")
_GROUP = re.compile(r"[A-Za-z0-9_.:-]{0,64}")
_EINSUM = re.compile(r"[A-Za-z.,> -]{0,256}")
STRING_ARGUMENTS: "dict[str, set[str] | re.Pattern[str]]" = {
    "approximate": {"none", "tanh"},
    "rounding_mode": {"trunc", "floor"},
    "UPLO": {"L", "U"},
    "indexing": {"ij", "xy"},
    "side": {"left", "right"},
    "padding_side": {"left", "right"},
    "padding": {"same", "valid"},
    "norm": {"forward", "backward", "ortho"},
    "interpolation": {"linear", "lower", "higher", "midpoint", "nearest"},
    "ord": {"fro", "nuc"},
    "p": {"fro", "nuc"},
    "equation": _EINSUM,
    "group_name": _GROUP,
    "tag": _GROUP,
    **dict.fromkeys(("reduce", "reduce_op", "reduceOp", "mode", "pad_mode", "driver"), _WORD),
    **dict.fromkeys(
        (
            "activation",
            "algorithm",
            "attr",
            "binary_attr",
            "unary_attr",
            "unary_algorithm",
            "binary_post_op",
            "post_op_name",
            "post_op_algorithm",
            "unary_post_op",
            "unary_post_op_algorithm",
        ),
        _WORD,
    ),  # fmt: skip
}
"""The string arguments a replay passes, by schema argument name, with the values each may take:
modes and names of a computation (a reduction, gelu's approximation, a division's rounding,
an einsum equation, a linear algebra driver, a fused kernel's post-op, a collective's reduction
and process group name), none of which can name a file or a program. Every other string
argument (file names, messages, dictionary keys, the TorchScript string builtins) is refused,
and so is its op."""


class Refused(ValueError):
    """An op a replay will not run: it is not a computation on tensors (see `refusal`)."""


def allow_namespace(ns):
    """Let replays call the ops of namespace `ns` (your own registered compute ops)."""
    if not (isinstance(ns, str) and ns.isidentifier()):
        raise ValueError(f"{ns!r} is not a namespace name")
    COMPUTE_NAMESPACES.add(ns)


def _str_type(t):
    return "str" in str(t)


def schema_refusal(fn):
    """Why the operator `fn` (an OpOverload) is never replayed, or None: its namespace is not a
    compute one, it is one of `REFUSED_OPS`, or its schema takes a string argument that
    `STRING_ARGUMENTS` does not list (whatever the value would be)."""
    schema = fn._schema
    name = schema.name
    ns = name.split("::")[0]
    if name in REFUSED_OPS:
        return f"{name} {REFUSED_OPS[name]}"
    if ns not in COMPUTE_NAMESPACES:
        return f"{name}: namespace {ns} is not one of the compute namespaces a replay calls"
    for a in schema.arguments:
        if _str_type(a.type) and a.name not in STRING_ARGUMENTS:
            return f"{name} takes a string argument {a.name!r} ({a.type}), which a replay never passes"
    return None


def _string_ok(name, v):
    rule = STRING_ARGUMENTS.get(name)
    if rule is None:
        return False
    return v in rule if isinstance(rule, set) else rule.fullmatch(v) is not None


def refusal(fn, args, kwargs):
    """Why the call fn(*args, **kwargs) of a plan is not made, or None: `schema_refusal`, or a
    string value that its argument may not take (plan specs or live values; strings inside
    lists are checked too)."""
    why = schema_refusal(fn)
    if why is not None:
        return why
    schema = fn._schema
    named = list(zip((a.name for a in schema.arguments), args)) + list(kwargs.items())
    for name, v in named:
        for s in _strings(v):
            if not _string_ok(name, s):
                return f"{schema.name}: argument {name!r} = {s[:60]!r} is not a value a replay passes"
    if len(args) > len(schema.arguments) or any(k not in {a.name for a in schema.arguments} for k in kwargs):
        return f"{schema.name}: arguments that its schema does not have"
    return None


def _strings(v):
    if isinstance(v, str):
        return [v]
    if isinstance(v, (list, tuple)):
        return [s for x in v for s in _strings(x)]
    return []


MAX_DELAY_S = 10.0  # (a plan is data: a delay of 1e300 s would never end)


def busy_wait(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def build_call(op, storages, device):
    """(function, args, kwargs, reads, writes) of one planned op; `Refused` for an op a replay
    does not run (`refusal`), whoever made the plan."""
    if op["kind"] == "delay":
        seconds = op["seconds"]
        if not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_DELAY_S:
            raise Refused(f"a delay of {seconds!r} s (0 to {MAX_DELAY_S:g} s)")
        return (busy_wait, (seconds,), {}, [], [])
    if op["kind"] == "collective":
        if op["op"] not in COLLECTIVES:
            raise Refused(f"{op['op']!r} is not a collective a replay runs")
    else:
        fn = resolve(op["op"])
        why = refusal(fn, op["args"], op["kwargs"])
        if why is not None:
            raise Refused(why)
    args = [value(a, storages, device) for a in op["args"]]
    kwargs = {k: value(v, storages, device) for k, v in op["kwargs"].items()}
    if op.get("grad"):  # the original recorded this op for autograd: so does the replay
        args = [_requires_grad(a) for a in args]
    if op["kind"] == "collective":
        return (collective(op["op"], args), (), {}, op["reads"], op["writes"])
    return (fn, tuple(args), kwargs, op["reads"], [])


def _requires_grad(a):
    torch = _torch()
    if isinstance(a, list):
        return [_requires_grad(x) for x in a]
    if isinstance(a, torch.Tensor) and (a.dtype.is_floating_point or a.dtype.is_complex) and not a.requires_grad:
        return a.detach().requires_grad_(True)
    return a


def host_gaps(plan):
    """The plan's host time to spend before each op (seconds; `run`'s ``gaps``), None without any."""
    gaps = [float(op.get("host_gap_us", 0.0)) * 1e-6 for op in plan["ops"]]
    return gaps if any(gaps) else None


def warm_up(run_once, seconds, dist=None, cuda=False, group=None, deadline=None):
    """Passes for about `seconds`: a process's first passes run slower (the allocator settles
    its thresholds, caches fill), for tens of passes on small ops. Every rank runs the same
    number (their collectives must pair), from the slowest rank's first pass (agreed over
    `group`, a CPU group when given). ``deadline`` (`time.perf_counter`): no pass after the
    first starts that would end past it (the earliest rank's deadline counts). Returns the
    agreed seconds of one pass."""
    torch = _torch()
    t0 = time.perf_counter()
    run_once()
    on_cuda = cuda and group is None
    now = time.perf_counter()
    left = (deadline - now) if deadline is not None else float("inf")
    # MAX of [pass time, -time left]: the slowest rank's pass and the earliest rank's deadline
    per = torch.tensor([now - t0, -min(left, 1e12)], dtype=torch.float64, device="cuda" if on_cuda else "cpu")
    if dist is not None and dist.is_initialized():
        dist.all_reduce(per, op=dist.ReduceOp.MAX, group=group)
    one, left = max(float(per[0].item()), 1e-6), -float(per[1].item())
    n = min(500, max(2, math.ceil(seconds / one)))
    if deadline is not None:
        n = min(n, max(0, math.floor(left / one)))
    for _ in range(n):
        run_once()
    return one


_LIMITS = {"wait_s": None}  # the pass now running's longest wait for a peer (`run`'s timeout_s)


def run(calls, cuda=False, on_error=None, timeout_s=None, gaps=None, stamps=None, deadline=None):
    """One pass: each op in order; a collective runs asynchronously and the first op that
    reads what it wrote (or the end of the pass) waits for it, ``timeout_s`` at most (a peer
    may never start it). ``on_error(k, exception)``: called when call k (or the wait for it)
    raises, and the pass goes on; without it the error ends the pass. Every collective started
    is waited for by the end of the pass: one whose storage a later collective writes again (a
    pipeline's receive buffers, step after step) must not be dropped unfinished, which would
    abandon it in gloo and leave its peer's send unmatched.

    ``gaps``: seconds per call of the original's host time that the replay lacks (see
    `host_gaps`), spent as a busy wait right before the call.

    ``stamps``: a list to which each call that returns appends (k, before its waits, after its
    waits, after the call), `time.perf_counter` seconds: what the pass spent on call k apart
    from waiting for peers (`calibrate.replayed`).

    ``deadline`` (`time.perf_counter` seconds): past it, the rest of the pass runs only its
    collectives (its peers wait for them) and `run` returns False (a pass cut short: not a
    sample); True otherwise."""
    _LIMITS["wait_s"] = timeout_s
    pending: dict = {}
    started = []
    clock = time.perf_counter
    whole = True
    for k, (fn, a, kw, reads, writes) in enumerate(calls):
        if deadline is not None and not writes and (not whole or clock() > deadline):
            whole = False
            continue
        try:
            t0 = clock() if stamps is not None else 0.0
            if pending and reads:
                for s in reads:
                    w = pending.pop(s, None)
                    if w is not None:
                        _wait(w, on_error, timeout_s)
            t1 = clock() if stamps is not None else 0.0
            if gaps is not None and gaps[k] > 0 and whole:
                busy_wait(gaps[k])
            work = fn(*a, **kw)
            if stamps is not None:
                stamps.append((k, t0, t1, clock()))
        except Exception as e:
            if on_error is None:
                raise
            on_error(k, e)
            continue
        if writes:
            started.append((work, k))
            for s in writes:
                pending[s] = (work, k)
    for w in started:
        _wait(w, on_error, timeout_s)
    if cuda:
        _torch().cuda.synchronize()
    return whole


def _wait(w, on_error, timeout_s):
    work, k = w
    try:
        if timeout_s:
            work.wait(datetime.timedelta(seconds=timeout_s))
        else:
            work.wait()
    except Exception as e:
        if on_error is None:
            raise
        on_error(k, e)


def _tensors(x):
    return [t for t in (x if isinstance(x, list) else [x]) if t is not None]


def collective(name, args):
    """A recorded c10d op as a torch.distributed call on the default group (returns a
    function that starts it and returns its Work)."""
    import torch.distributed as dist

    if name == "c10d::allreduce_":
        ts = _tensors(args[0])
        return lambda: [dist.all_reduce(t, async_op=True) for t in ts][-1]
    if name == "c10d::allgather_":
        outs = args[0][0] if args[0] and isinstance(args[0][0], list) else args[0]
        return lambda: dist.all_gather(outs, _tensors(args[1])[0], async_op=True)
    if name == "c10d::_allgather_base_":
        return lambda: dist.all_gather_into_tensor(args[0], args[1], async_op=True)
    if name == "c10d::broadcast_":
        ts, root = _tensors(args[0]), int(args[2] or 0)
        return lambda: [dist.broadcast(t, src=root, async_op=True) for t in ts][-1]
    if name == "c10d::reduce_scatter_":
        ins = args[1][0] if args[1] and isinstance(args[1][0], list) else args[1]
        return lambda: dist.reduce_scatter(_tensors(args[0])[0], ins, async_op=True)
    if name == "c10d::_reduce_scatter_base_":
        return lambda: dist.reduce_scatter_tensor(args[0], args[1], async_op=True)
    if name == "c10d::alltoall_base_":
        out_split = args[3] if len(args) > 3 and args[3] else None
        in_split = args[4] if len(args) > 4 and args[4] else None
        return lambda: dist.all_to_all_single(args[0], args[1], out_split, in_split, async_op=True)
    if name == "c10d::barrier":
        return lambda: dist.barrier(async_op=True)
    if name in ("c10d::send", "c10d::recv_"):
        ts, peer, tag = _tensors(args[0]), int(args[2]), int(args[3]) if len(args) > 3 else 0
        # (a Work, never None: every rank is in the default group)
        call = cast("Callable[..., Work]", dist.isend if name == "c10d::send" else dist.irecv)

        def p2p():  # (waited for at once, as long as `run` allows: see P2P_NOTE)
            for t in ts:
                work = call(t, peer, tag=tag)
                limit = _LIMITS["wait_s"]
                work.wait(datetime.timedelta(seconds=limit)) if limit else work.wait()
            return _DONE

        return p2p
    raise KeyError(name)


class _Done:
    """The Work of a point-to-point op that is already complete."""

    def wait(self, *args):
        return True


_DONE = _Done()
P2P_NOTE = """A send or receive is waited for where it is issued, in the recorded order of each rank:
asynchronous gloo sends and receives on one pair of ranks, left pending while the ranks compute,
were seen to complete receives before the matching send was issued and then hang."""


COLLECTIVES = (
    "c10d::allreduce_",
    "c10d::allgather_",
    "c10d::_allgather_base_",
    "c10d::broadcast_",
    "c10d::reduce_scatter_",
    "c10d::_reduce_scatter_base_",
    "c10d::alltoall_base_",
    "c10d::barrier",
    "c10d::send",
    "c10d::recv_",
)
