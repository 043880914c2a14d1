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
import re
import time


def _torch():
    import torch

    return torch


def make_storages(plan, device, seed=0):
    """One byte buffer per recorded storage: random floats, zeros for integer storages."""
    torch = _torch()
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


def busy_wait(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def build_call(op, storages, device):
    """(function, args, kwargs, reads, writes) of one planned op."""
    if op["kind"] == "delay":
        return (busy_wait, (op["seconds"],), {}, [], [])
    args = [value(a, storages, device) for a in op["args"]]
    kwargs = {k: value(v, storages, device) for k, v in op["kwargs"].items()}
    if op.get("grad"):  # the original recorded this op for autograd: so does the replay
        args = [_requires_grad(a) for a in args]
    if op["kind"] == "collective":
        return (collective(op["op"], args), (), {}, op["reads"], op["writes"])
    return (resolve(op["op"]), tuple(args), kwargs, op["reads"], [])


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


def warm_up(run_once, seconds, dist=None, cuda=False, group=None):
    """Passes for about `seconds`: a process's first passes run slower (the allocator settles
    its thresholds, caches fill), for tens of passes on small ops. Every rank runs the same
    number (their collectives must pair), from the slowest rank's first pass (agreed over
    `group`, a CPU group when given)."""
    torch = _torch()
    t0 = time.perf_counter()
    run_once()
    on_cuda = cuda and group is None
    per = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device="cuda" if on_cuda else "cpu")
    if dist is not None and dist.is_initialized():
        dist.all_reduce(per, op=dist.ReduceOp.MAX, group=group)
    for _ in range(min(500, max(2, math.ceil(seconds / max(float(per.item()), 1e-6))))):
        run_once()


_LIMITS = {"wait_s": None}  # the pass now running's longest wait for a peer (`run`'s timeout_s)


def run(calls, cuda=False, on_error=None, timeout_s=None, gaps=None, stamps=None):
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
    from waiting for peers (`calibrate.replayed`)."""
    _LIMITS["wait_s"] = timeout_s
    pending = {}
    started = []
    clock = time.perf_counter
    for k, (fn, a, kw, reads, writes) in enumerate(calls):
        try:
            t0 = clock() if stamps is not None else 0.0
            if pending and reads:
                for s in reads:
                    w = pending.pop(s, None)
                    if w is not None:
                        _wait(w, on_error, timeout_s)
            t1 = clock() if stamps is not None else 0.0
            if gaps is not None and gaps[k] > 0:
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
        call = dist.isend if name == "c10d::send" else dist.irecv

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
