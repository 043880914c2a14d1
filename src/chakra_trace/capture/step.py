"""Capture one training step of a PyTorch model as a device-agnostic master trace, without its math.

The model is built under `FakeTensorMode` (parameters and inputs carry shapes and dtypes, no data,
no memory), then one step (forward, loss, backward, optimizer step) runs under the dispatch-level
`Recorder`: a 70B-parameter model is captured in seconds on a CPU. The optimizer's state is made
by an unrecorded step first, so the captured step is a steady-state one (no state initialisation).

The result is one logical device with no parallelism: every node a COMP_NODE with its FLOPs
(`num_ops`) and bytes (`tensor_size`) and no duration, for the simulator's roofline on a device
preset (`chakra simulate --device h100`) or for a parallelization pass.

The model protocol (`build`): a function of the config's keys returning a `ModelStep`, or the
tuple (model, inputs, loss): `inputs(batch, seq)` makes (args, target) for one step (args a tuple
passed as `model(*args)`, or a dict passed as `model(**args)`), `loss(output, target)` the scalar
to backpropagate. It is called inside
the fake mode, so it builds the model and tensors as usual (`torch.randint(...)` etc.).
"""

from __future__ import annotations

import json
import resource
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..convert.dtypes import FLOATING_DTYPES, element_dtype
from ..errors import ChakraError
from ..io.workload import Workload
from ..schema.builder import TraceBuilder
from ..schema.enums import NodeType
from ..schema.node import IOInfo
from ..schema.trace import Trace
from . import rules
from .loader import load_build
from .recorder import CapturedOp, label_autograd, make_recorder

PHASES = ("forward", "backward", "optimizer")
LOSS = ("loss", "")  # the module path of the loss's ops (forward and backward) and of the seed gradient
SCHEMA = "chakra-trace capture 1"


class CaptureError(ChakraError):
    """A model, its build function or its step that cannot be captured."""


@dataclass
class ModelStep:
    """What a build function returns: the model, how to make one step's inputs, and the loss."""

    model: Any  # torch.nn.Module
    inputs: Callable[[int, int], tuple[Any, Any]]  # (batch, seq) -> (args tuple or kwargs dict, target)
    loss: Callable[[Any, Any], Any]  # (output, target) -> scalar tensor


@dataclass
class CaptureResult:
    """The master trace and what the capture measured."""

    trace: Trace
    ops: list[CapturedOp]
    params: int
    batch: int
    seq: int
    wall_s: float
    peak_rss_mib: float
    config: dict = field(default_factory=dict)
    shape_rules: dict[str, int] | None = None  # {"ruled": ops with a rule, "without_rule": ops refused one}

    @property
    def nodes(self) -> int:
        return len(self.trace)

    def flops_by_phase(self) -> dict[str, int]:
        out = dict.fromkeys(PHASES, 0)
        for op in self.ops:
            out[op.phase] = out.get(op.phase, 0) + op.flops
        return out

    def bytes_by_phase(self) -> dict[str, int]:
        out = dict.fromkeys(PHASES, 0)
        for op in self.ops:
            out[op.phase] = out.get(op.phase, 0) + op.bytes
        return out

    @property
    def flops(self) -> int:
        return sum(self.flops_by_phase().values())

    def workload(self):
        """The trace as a one-rank workload (what simulate/analyze take)."""
        return Workload({0: self.trace})

    @property
    def expert_params(self) -> int:
        """Parameters of a mixture's experts (modules named `experts`): of which a token uses only
        its router's choice, so the 6·N·tokens estimate counts them all and overstates."""
        for a in self.trace.metadata.attr:
            if a.name == "capture":
                params = json.loads(a.string_val).get("parameters", [])
                return sum(int(p[1]) for p in params if "experts" in str(p[0]).split("."))
        return 0

    def to_dict(self) -> dict[str, Any]:
        tokens = self.batch * self.seq
        return {
            "nodes": self.nodes,
            "params": self.params,
            "batch": self.batch,
            "seq": self.seq,
            "flops": self.flops,
            "flops_by_phase": self.flops_by_phase(),
            "bytes_by_phase": self.bytes_by_phase(),
            # the usual estimate of a transformer step (2 N per token forward, 4 N backward)
            "flops_6nt": 6 * self.params * tokens,
            "nodes_by_phase": dict(Counter(op.phase for op in self.ops)),
            "flops_source": dict(Counter(op.flops_source for op in self.ops if op.flops)),
            "wall_s": round(self.wall_s, 3),
            "peak_rss_mib": round(self.peak_rss_mib, 1),
            "config": self.config,
            **({"shape_rules": self.shape_rules} if self.shape_rules is not None else {}),
        }


_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "adagrad": "Adagrad", "rmsprop": "RMSprop"}


def _optimizer(name: Any, params: list, options: dict) -> Any:
    """The optimizer `name` says: a torch.optim name, "none", an optimizer class, or one named
    `FILE.py:NAME` / `MODULE:NAME` (a model's own, e.g. a fused distributed optimizer's kernels)."""
    import torch

    if name is None or (isinstance(name, str) and name.lower() == "none"):
        return None
    if isinstance(name, str) and ":" in name:
        name = load_build(name)
    if isinstance(name, type):
        if not issubclass(name, torch.optim.Optimizer):
            raise CaptureError(f"optimizer {name.__name__}: not a torch.optim.Optimizer subclass")
        return name(params, **{"lr": 1e-3, **options})
    cls = getattr(torch.optim, _OPTIMIZERS.get(name.lower(), name), None)
    if cls is None or not isinstance(cls, type):
        raise CaptureError(f"unknown optimizer {name!r}; expected one of {sorted(_OPTIMIZERS)} or none")
    return cls(params, **{"lr": 1e-3, **options})


def _as_step(built: Any) -> ModelStep:
    import torch

    if isinstance(built, ModelStep):
        return built
    if isinstance(built, tuple) and len(built) == 3:
        return ModelStep(*built)
    what = "an nn.Module alone" if isinstance(built, torch.nn.Module) else type(built).__name__
    raise CaptureError(
        f"the build function returned {what}; it must return ModelStep(model, inputs, loss) or the tuple "
        "(model, inputs, loss): inputs(batch, seq) -> (args, target), loss(output, target) -> scalar"
    )


def capture(
    build: Callable[..., Any],
    config: dict | None = None,
    *,
    batch: int = 1,
    seq: int = 128,
    optimizer: Any = "adamw",
    optimizer_options: dict | None = None,
    dtype: str | None = None,
    fold_views: bool = False,
    shape_rules: bool = False,
    progress: Callable[[int, int | None], None] | None = None,
) -> CaptureResult:
    """Capture one step of the model `build(**config)` makes (see the module docstring): forward
    and loss, backward, then the optimizer's step (none with ``optimizer=None``). `dtype` (e.g.
    "bfloat16") is the default dtype while the model and inputs are built; `fold_views` drops the
    ops that only make views (they cost nothing; no dependency passes through them);
    `shape_rules` also records how each op's shapes depend on the batch and sequence length
    (`capture.rules`: the step is captured twice more), which `synthesize.rescale` needs.
    ``progress(done, total)`` after each phase: the step, each shape-rule probe, the trace built."""
    if batch < 1 or seq < 1:
        raise CaptureError(f"batch and seq must be positive (got {batch}, {seq})")
    config = dict(config or {})
    t0 = time.perf_counter()
    record = partial(
        _record_step,
        build,
        config,
        optimizer=optimizer,
        optimizer_options=optimizer_options,
        dtype=dtype,
        fold_views=fold_views,
    )
    phases = 4 if shape_rules else 2
    tick = progress or (lambda done, total: None)
    tick(0, phases)
    ops, params_n, grads = record(batch, seq)
    tick(1, phases)
    about = {
        "config": config,
        "batch": batch,
        "seq": seq,
        "optimizer": optimizer if optimizer is None or isinstance(optimizer, str) else optimizer.__name__,
        "dtype": dtype,
        "params": params_n,
        "parameters": grads,
    }
    found: dict[int, str] | None = None
    if shape_rules:
        at_b, at_s = _probe_ops(record, batch, seq)
        tick(3, phases)
        try:
            found = rules.derive(ops, at_b, at_s, batch, seq)
        except rules.ShapeRuleError as e:
            raise CaptureError(str(e)) from None
        about["shape_rules"] = {"format": rules.FORMAT, "probes": rules.probes(batch, seq)}
    trace = build_trace(
        ops, metadata={"schema": SCHEMA, "capture": json.dumps(about, sort_keys=True, default=str)}, rules=found
    )
    tick(phases, phases)
    return CaptureResult(
        trace=trace,
        ops=ops,
        params=params_n,
        batch=batch,
        seq=seq,
        wall_s=time.perf_counter() - t0,
        peak_rss_mib=_peak_rss_mib(),
        config=config,
        shape_rules=None if found is None else _rule_counts(found),
    )


def _probe_ops(record: Callable[[int, int], tuple], batch: int, seq: int) -> list[list[CapturedOp]]:
    """The ops of the step at the shape rules' two probe points (`rules.probes`); a model that
    refuses one (a ValueError or RuntimeError of its own) is told apart from one that refuses
    the point asked for."""
    out = []
    for b, s in rules.probes(batch, seq):
        try:
            out.append(record(b, s)[0])
        except (ValueError, RuntimeError) as e:
            raise CaptureError(
                f"recording shape rules captures the step at batch {b}, seq {s} too, which the model refuses "
                f"({e}); capture at a batch and seq whose halves (or doubles) it also takes"
            ) from e
    return out


def _rule_counts(found: dict[int, str]) -> dict[str, int]:
    refused = sum(1 for r in found.values() if r.startswith("!"))
    return {"ruled": len(found) - refused, "without_rule": refused}


def _record_step(
    build: Callable[..., Any],
    config: dict,
    batch: int,
    seq: int,
    *,
    optimizer: Any,
    optimizer_options: dict | None,
    dtype: str | None,
    fold_views: bool,
) -> tuple[list[CapturedOp], int, list[list]]:
    """(ops, parameter count, `_grad_producers`) of one step at (batch, seq): what `capture`
    builds its trace from."""
    try:
        import torch
        from torch._subclasses.fake_tensor import (
            DataDependentOutputException,
            DynamicOutputShapeException,
            FakeTensorMode,
        )
    except ImportError as e:  # pragma: no cover
        raise CaptureError("capturing needs PyTorch (pip install torch)") from e
    old_dtype = torch.get_default_dtype()
    recorder = make_recorder()()
    fake = FakeTensorMode(allow_non_fake_inputs=False)
    with fake:
        try:
            if dtype is not None:
                torch.set_default_dtype(getattr(torch, dtype))
            try:
                with warnings.catch_warnings():  # copy.deepcopy of a fake tensor asks for its data pointer
                    warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
                    step = _as_step(build(**config))
                args, target = step.inputs(batch, seq)
            finally:
                torch.set_default_dtype(old_dtype)
        except TypeError as e:
            raise CaptureError(f"building the model with config {config}: {e}") from e
        model = step.model
        if not isinstance(model, torch.nn.Module):
            raise CaptureError(f"the model is a {type(model).__name__}, not a torch.nn.Module")
        _adopt(model, fake)
        model.train()
        params = list(model.parameters())
        opt = _optimizer(optimizer, [p for p in params if p.requires_grad], dict(optimizer_options or {}))
        if opt is not None:  # an unrecorded step makes the optimizer's state: the captured one is steady
            for p in params:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p)
            opt.step()
            opt.zero_grad(set_to_none=True)
        names = _module_names(model)
        owned = [(where, p) for where, mod in _owning(model, names) for p in mod.parameters(recurse=False)]
        recorder.owners = {id(p): where for where, p in owned}
        hooks = _hooks(recorder, names)
        try:
            with recorder:
                recorder.phase = "forward"
                output = model(**args) if isinstance(args, dict) else model(*args)
                recorder.modules = [LOSS]
                loss = step.loss(output, target)
                if not (torch.is_tensor(loss) and loss.numel() == 1):
                    raise CaptureError("the loss function must return a scalar tensor")
                label_autograd(loss, output, LOSS, recorder.labels)
                recorder.phase = "backward"
                ready: list[int] = []  # parameters in the order their gradients were accumulated
                trainable = [p for p in params if p.requires_grad]
                grad_hooks = [
                    p.register_post_accumulate_grad_hook(lambda _p, i=i: ready.append(i))
                    for i, p in enumerate(trainable)
                ]
                try:
                    loss.backward()
                finally:
                    for h in grad_hooks:
                        h.remove()
                grads = _grad_producers(recorder, model, ready)
                if opt is not None:
                    recorder.phase = "optimizer"
                    recorder.modules = [("optimizer", type(opt).__name__)]
                    for where, p in owned:
                        state = [v for v in opt.state.get(p, {}).values() if torch.is_tensor(v)]
                        recorder.own([p, *([p.grad] if p.grad is not None else []), *state], where)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            raise CaptureError(
                f"the step needs tensor values, which a capture does not have ({type(e).__name__}: {e}); "
                "make the model's control flow depend on shapes only"
            ) from e
        finally:
            for h in hooks:
                h.remove()
    ops = [op for op in recorder.ops if not (fold_views and op.view)]
    return ops, sum(p.numel() for p in params), grads


def _grad_producers(recorder: Any, model: Any, ready: list[int]) -> list[list]:
    """[name, numel, dtype itemsize, id of the backward op that wrote its gradient or -1, place in
    the order gradients were accumulated or -1] of each trainable parameter in registration order:
    what a data-parallel pass needs to bucket the gradients as DDP does (by size, in the order its
    gradient hooks fire)."""
    out = []
    when = {i: k for k, i in enumerate(ready)}
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    for i, (name, p) in enumerate(trainable):
        producer = -1
        if p.grad is not None:
            k = recorder._key(p.grad)
            w = recorder._writer.get(k[0]) if k is not None else None
            producer = w[1] if w is not None else -1
        out.append([name, int(p.numel()), int(p.element_size()), int(producer), when.get(i, -1)])
    return out


def _adopt(model: Any, fake: Any) -> None:
    """Make every parameter and buffer a fake tensor of this capture's mode: building may make some
    elsewhere (`copy.deepcopy` of a fake tensor makes a new fake mode, as nn.TransformerEncoder
    does; a real tensor loaded from a file). Shared tensors stay shared."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    memo: dict[int, Any] = {}

    def ours(t: Any) -> Any:
        if isinstance(t, FakeTensor) and t.fake_mode is fake:
            return t
        if id(t) not in memo:
            new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")
            memo[id(t)] = torch.nn.Parameter(new, t.requires_grad) if isinstance(t, torch.nn.Parameter) else new
        return memo[id(t)]

    for mod in model.modules():
        for table in (mod._parameters, mod._buffers):
            for name, t in list(table.items()):
                if t is not None:
                    table[name] = ours(t)


def _module_names(model: Any) -> dict[int, tuple[str, str]]:
    return {id(m): (name, type(m).__name__) for name, m in model.named_modules(remove_duplicate=False)}


def _owning(model: Any, names: dict[int, tuple[str, str]]):
    for m in model.modules():
        yield names[id(m)], m


def _hooks(recorder: Any, names: dict[int, tuple[str, str]]) -> list:
    """Global forward hooks: the running module stack, and labels on the autograd nodes each
    module's forward made (the module path of backward ops)."""
    from torch.nn.modules import module as M

    inputs: list[Any] = []

    def pre(mod, args):
        recorder.modules.append(names.get(id(mod), ("", type(mod).__name__)))
        inputs.append(args)

    def post(mod, args, output):
        where = recorder.modules.pop() if recorder.modules else ("", "")
        label_autograd(output, inputs.pop() if inputs else args, where, recorder.labels)

    return [M.register_module_forward_pre_hook(pre), M.register_module_forward_hook(post)]


def build_trace(ops: list[CapturedOp], metadata: dict | None = None, rules: dict[int, str] | None = None) -> Trace:
    """The master trace of captured ops: one COMP_NODE each, ids as captured, data deps kept to
    nodes that are there (a dropped view's consumers depend on the producer already); `rules`:
    the `shape_rule` attribute of the ops that have one (`capture.rules`)."""
    rules = rules or {}
    b = TraceBuilder(metadata=metadata)
    present = {op.id for op in ops}
    dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
    for op in ops:
        b.add(
            op.name.split(".")[0],
            NodeType.COMP_NODE,
            id=op.id,
            data_deps=[d for d in op.deps if d in present],
            inputs=IOInfo(shapes=dumps(op.in_shapes), types=dumps(op.in_types)),
            outputs=IOInfo(shapes=dumps(op.out_shapes), types=dumps(op.out_types)),
            is_cpu_op=False,
            num_ops=int(op.flops),
            tensor_size=int(op.bytes),
            duration_unknown=True,
            op=op.name,
            phase=op.phase,
            module=op.module,
            module_type=op.module_type or None,
            flops_source=op.flops_source,
            shape_rule=rules.get(op.id),
            dtype=_first_floating(op.in_types) or _first_floating(op.out_types),
        )
    return b.build()


def _first_floating(types: list) -> str | None:
    """The element type (bf16, fp32, ...) of the first floating tensor among an op's recorded
    input types (lists of tensors included): the type whose peak it runs at
    (`schema.compute_types`), as `convert.dtypes` gives a converted op's."""
    for t in types:
        for x in t if isinstance(t, list) else (t,):
            d = element_dtype(x) if isinstance(x, str) else None
            if d in FLOATING_DTYPES:
                return d
    return None


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


__all__ = ["capture", "CaptureResult", "CaptureError", "ModelStep", "build_trace", "PHASES"]
