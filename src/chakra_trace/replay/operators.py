"""Replay a PyTorch host execution trace's operators without the model's code or data.

The replayed ops are the top-most ones that carry an `op_schema` (their children ran inside
them) within the selected profiler steps. Each resolves to a `torch.ops` overload; its
arguments are rebuilt once, before timing (tensors as views of recreated storages, see
`tensors.py`), so a timed step is only the calls. Every op is tried once while preparing;
one that still fails with fresh non-view inputs is reported with the reason and left out, and
so is one that fails later, in the warm-up or a timed pass: the rest replays on (`OpOutcome`:
the stage, the exception and its message, one line).
Collectives (`c10d::*`) run as real `torch.distributed` calls when a process group is up
(`chakra replay` on a collection folder starts one process per rank), asynchronously, and
are waited for by the first op that reads what they wrote, as DDP overlaps them.
"""

from __future__ import annotations

import os
import re
import resource
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChakraError
from ..io.documents import read_json, short
from ..io.kineto import read_kineto
from ..io.memory import vm_size
from ..io.pytorch_host import HostTrace, read_host_trace
from . import _standalone as rt
from .budget import BudgetSpent, slowest_text
from .host_gaps import calibrate
from .indices import bound_indices
from .memory import check as check_memory
from .memory import estimate, gib, tensor_limit
from .tensors import _ITEMSIZE, StoragePlan, Unreplayable, scalar, split_list_type, tensor_ranges
from .waits import link_rows, wait_points

MAX_DELAY_US = 10_000_000.0
"""The longest ``delay_us`` a config may ask for one op (10 s): a config is data from someone
else, and a busy wait of 1e300 µs would never end."""

_ACCEPTED = "accepted: 'namespace::op' or 'namespace::op.overload' naming an operator registered in this PyTorch"


@dataclass
class ReplayConfig:
    """What to leave out or change: ``skip`` regexes on op names; ``substitute`` op name ->
    another overload called with the same arguments ("aten::foo" -> "aten::bar.default");
    ``delay_us`` op name -> a busy wait of that many µs instead of the op.

    A config is data (it may come with a trace from someone else): every entry is checked on
    construction; a substitute must name an operator in PyTorch's registry, never a path of
    attributes (see `_standalone.registered`). ``source`` names the config in errors."""

    skip: list[str] = field(default_factory=list)
    substitute: dict[str, str] = field(default_factory=dict)
    delay_us: dict[str, float] = field(default_factory=dict)
    source: str = "replay config"

    def __post_init__(self) -> None:
        src = self.source
        if not isinstance(self.skip, list) or not all(isinstance(x, str) for x in self.skip):
            raise ChakraError(f"{src}: 'skip' must be a list of regexes (strings), got {_short(self.skip)}")
        for x in self.skip:
            try:
                re.compile(x)
            except re.error as e:
                raise ChakraError(f"{src}: skip {_short(x)} is not a regex: {e}") from None
        if not isinstance(self.substitute, dict):
            raise ChakraError(f"{src}: 'substitute' must map op names to op names, got {_short(self.substitute)}")
        for k, v in self.substitute.items():
            _check_substitute(src, k, v)
        if not isinstance(self.delay_us, dict):
            raise ChakraError(f"{src}: 'delay_us' must map op names to µs, got {_short(self.delay_us)}")
        for k, us in self.delay_us.items():
            ok = isinstance(us, (int, float)) and not isinstance(us, bool) and 0 <= us <= MAX_DELAY_US
            if not ok:
                raise ChakraError(
                    f"{src}: delay_us {_short(k)}: {_short(us)} is not a number of µs from 0 to {MAX_DELAY_US:g}"
                )

    @classmethod
    def load(cls, path: str | os.PathLike) -> ReplayConfig:
        d = read_json(path, "replay config")  # (a regular file, bounded, its nesting limited)
        if not isinstance(d, dict):
            raise ChakraError(f"{path}: a replay config is a JSON object with skip, substitute, delay_us")
        unknown = set(d) - {"skip", "substitute", "delay_us"}
        if unknown:
            raise ChakraError(f"{path}: unknown keys {sorted(unknown)}; expected skip, substitute, delay_us")
        return cls(d.get("skip", []), d.get("substitute", {}), d.get("delay_us", {}), source=str(path))


def _short(v) -> str:
    return short(v)


def _check_substitute(src: str, key, value) -> None:
    """A substitute target names a registered operator (checked against the registry when torch
    is there; without it nothing is replayed anyway)."""
    where = f"{src}: substitute {_short(key)}: {_short(value)}"
    if not isinstance(key, str) or not isinstance(value, str) or not rt.OP_NAME.fullmatch(value):
        raise ChakraError(f"{where} is not an operator name; {_ACCEPTED}")
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    try:
        fn = rt.resolve(value)
    except ValueError:
        raise ChakraError(f"{where} is not a registered operator; {_ACCEPTED}") from None
    why = rt.schema_refusal(fn)
    if why is not None:
        raise ChakraError(f"{where} is refused: {why} (a replay runs computations on tensors only)")


STAGES = ("build", "try", "warm-up", "timed run")
"""Where an op can fail: building its arguments, its one trial call while preparing, the
untimed passes, the timed passes."""


@dataclass
class OpOutcome:
    """What became of one top-level op. A failure's ``reason`` is one line: "<stage>: <exception
    type>: <message>" (`STAGES`). ``collective``: its place among the selection's collectives
    (every rank counts them alike in an SPMD job), -1 for other ops."""

    row: int
    node_id: int
    name: str
    status: str  # "replayed", "skipped", "failed", "refused" (not a computation: never called)
    reason: str = ""
    collective: int = -1

    def line(self) -> str:
        return f"{self.name} (node {self.node_id}) {self.status}: {self.reason}"


class CollectiveFailed(ChakraError):
    """A collective failed while the job ran (its peers may wait for it forever): this rank
    stops, and `replay_host` replays the job again without it on every rank. ``payload``
    names it for the launcher."""

    def __init__(self, outcome: OpOutcome, reason: str):
        super().__init__(f"{outcome.line()}")
        self.payload = {"collective": outcome.collective, "name": outcome.name, "reason": reason}


def failure(stage: str, e: BaseException) -> str:
    """One line: the stage, the exception's type and the first line of its message."""
    return f"{stage}: {type(e).__name__}: {_first_line(e)}"


@dataclass
class Coverage:
    """Schema'd top-level ops in the selection and what became of each."""

    outcomes: list[OpOutcome] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def replayed(self) -> int:
        return sum(o.status == "replayed" for o in self.outcomes)

    @property
    def share(self) -> float:
        return self.replayed / self.total if self.total else 1.0

    def problems(self) -> dict[str, list[str]]:
        """Reason -> op names, for ops not replayed."""
        out: dict[str, list[str]] = {}
        for o in self.outcomes:
            if o.status != "replayed":
                out.setdefault(f"{o.status}: {o.reason}", []).append(o.name)
        return out

    def to_dict(self) -> dict:
        """The same shape as the schema-less replay's coverage (`schemaless.py`)."""
        missed = [o for o in self.outcomes if o.status != "replayed"]
        reasons: dict[str, int] = {}
        for o in missed:
            key = f"{o.status}: {o.reason}"
            reasons[key] = reasons.get(key, 0) + 1
        return {
            "total": self.total,
            "replayed": self.replayed,
            "not_replayed": len(missed),
            "share": self.share,
            "reasons": reasons,
            "examples": [{"id": o.node_id, "name": o.name, "reason": f"{o.status}: {o.reason}"} for o in missed[:100]],
        }


def _load_host(trace):

    return trace if isinstance(trace, HostTrace) else read_host_trace(trace)


def _parent_rows(h) -> np.ndarray:
    """Call-tree parent of every row, as a row (-1 for roots and parents not in the trace)."""
    par = h.parent.astype(np.int64)
    out = np.full(len(h), -1, np.int64)
    has = par >= 0
    out[has] = h.rows(par[has])
    return out


def _ancestor_flag(parent: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """For every row: does a proper ancestor (through `parent` rows) have `flag`?"""
    out = np.zeros(len(parent), bool)
    p = parent.copy()
    for _ in range(len(parent) + 1):  # a parent cycle in a damaged trace cannot loop forever
        live = p >= 0
        if not live.any():
            break
        out[live] |= flag[p[live]]
        p[live] = parent[p[live]]
    return out


def _step_of(h) -> tuple[np.ndarray, dict[int, int]]:
    """The ProfilerStep#N each row runs in (-1 outside any), and {N: row}."""
    names = h.name_array
    step_rows = {
        int(str(names[r]).split("#")[1]): int(r)
        for r in np.flatnonzero(np.char.startswith(names.astype(str), "ProfilerStep#"))
    }
    step = np.full(len(h), -1, np.int64)
    for n, r in step_rows.items():
        step[r] = n
    parent = _parent_rows(h)
    p = parent.copy()
    out = step.copy()
    for _ in range(len(h) + 1):
        live = (p >= 0) & (out < 0)
        if not live.any():
            break
        out[live] = step[p[live]]
        p[live] = parent[p[live]]
    if step_rows:  # ops of other threads (DDP's reducer, ...): by id, which follows op start
        order = sorted(step_rows.items(), key=lambda kv: int(h.ids[kv[1]]))
        first_ids = np.array([int(h.ids[r]) for _, r in order])
        k = np.searchsorted(first_ids, h.ids, "right") - 1
        orphan = (out < 0) & (k >= 0)
        out[orphan] = np.array([n for n, _ in order])[k[orphan]]
    return out, step_rows


@dataclass
class Selection:
    """The ops a replay of one host trace runs: the top-most ones with an `op_schema` in the
    selected profiler steps (and under `select`), in the order they started (numpy only: the
    launcher uses it to size the replay before any rank starts)."""

    rows: np.ndarray
    steps: list[int]
    recorded_steps: list[int]
    step_of: np.ndarray

    @classmethod
    def of(cls, h, steps=None, select: str | None = None) -> Selection:
        empty = np.array([not x for x in h.strings] + [True])  # (code -1 -> the sentinel)
        has_schema = ~empty[np.where(h.op_schema >= 0, h.op_schema, len(h.strings))]
        parent = _parent_rows(h)
        top = has_schema & ~_ancestor_flag(parent, has_schema) & ~h.synthetic
        step, step_rows = _step_of(h)
        recorded = sorted(step_rows)
        if steps is not None:
            missing = sorted(set(steps) - set(step_rows))
            if missing:
                raise ChakraError(f"steps {missing} are not in the trace (it has {recorded})")
            top &= np.isin(step, list(steps))
            chosen = sorted(steps)
        elif step_rows:
            top &= step >= 0
            chosen = recorded
        else:
            chosen = []
        if select:
            rx = re.compile(select)
            hit = np.array([bool(rx.search(str(n))) for n in h.name_array])
            top &= hit | _ancestor_flag(parent, hit)
        rows = np.flatnonzero(top)
        return cls(rows[np.argsort(h.ids[rows], kind="stable")], chosen, recorded, step)  # ids: op entry order

    def planned(self, h, config: ReplayConfig | None = None, drop=()) -> list[int]:
        """The rows whose arguments a replay builds: not skipped or delayed by ``config``."""
        cfg = config or ReplayConfig()
        skip = [re.compile(x) for x in cfg.skip]
        out = []
        for r in self.rows.tolist():
            name = str(h.name_array[r])
            if not any(x.search(name) for x in skip) and name not in cfg.delay_us:
                out.append(r)
        return out


class HostReplay:
    """The prepared replay of one rank's host trace.

    ``steps``: profiler step numbers to replay (None: every recorded step; a trace without
    profiler steps is replayed whole). ``select``: a regex; only ops whose name or some
    ancestor's name matches (a subgraph such as "Optimizer.step" or "aten::linear").
    ``kineto``: the Kineto trace of the same run (path or `KinetoTrace`), which shows where the
    original waited for its collectives (`waits.py`); without it only readers wait.
    ``drop_collectives``: {collective number: why} to leave out (they failed in an earlier
    attempt, on some rank). ``stage`` names the passes `run_step` runs now, for the reasons of ops
    that fail in them ("warm-up", "timed run"). ``host_gaps``: before each op, spend the host time
    the original spent that the replay lacks, inside ops (a tensor subclass's dispatch) and
    between them (`host_gaps.py`; needs the Kineto trace and a call of `calibrate` after the
    warm-up; ``host_gaps_info`` says what was emulated).

    A trace is data: an op that is not a computation on tensors (`_standalone.refusal`: it
    opens or saves a file, prints, takes a string argument that could name one) is reported
    "refused" and never called. ``memory_limit``: bytes of tensors this rank may hold (default:
    `memory.check` of its estimate); the estimate is checked before any storage is made, and
    inputs made apart from the storages as ops are tried. ``deadline`` (`time.perf_counter`):
    past it, trying the ops stops (`BudgetSpent`) and `run_step` cuts its pass short.
    """

    def __init__(
        self,
        trace,
        *,
        device: str = "cpu",
        steps=None,
        select: str | None = None,
        config: ReplayConfig | None = None,
        seed: int = 0,
        autograd: bool = True,
        kineto=None,
        drop_collectives: dict[int, str] | None = None,
        host_gaps: bool = True,
        memory_limit: int | None = None,
        deadline: float | None = None,
    ):
        try:
            import torch
        except ImportError:
            raise ChakraError("replaying operators needs PyTorch: pip install torch") from None
        del torch
        self.h = h = _load_host(trace)
        self.device = device
        self.config = config or ReplayConfig()
        self.autograd = autograd
        sel = Selection.of(h, steps, select)
        self._row_step = sel.step_of
        self.select = select
        self.recorded_steps = sel.recorded_steps
        self.steps = sel.steps
        self.rows = sel.rows
        self.memory_limit = memory_limit
        self.deadline = deadline  # (time.perf_counter: past it, planning stops and passes are cut)
        self.slowest: tuple[float, str, int] | None = None  # (seconds, name, node id) of the slowest trial call
        self.coverage = Coverage()
        self._calls: list[tuple] = []
        self._live: list[OpOutcome] = []  # the outcome of each planned op (plan["ops"], _calls)
        self._dropped: dict[int, str] = {}  # planned op -> why, found in the pass now running
        self.stage = "warm-up"
        self.collective_timeout_s: float | None = None  # (a wait past it fails the collective)
        self.kineto = _load_kineto(kineto)
        self.emulate_host_gaps = host_gaps
        self._gaps: list[float] = []
        self._prepare(seed, dict(drop_collectives or {}))

    # ------------------------------------------------------------------ preparation
    def _prepare(self, seed: int, drop: dict[int, str]) -> None:

        h, cfg = self.h, self.config
        skip = [re.compile(x) for x in cfg.skip]
        storages = StoragePlan()
        specs = []
        sized = []
        n_coll = 0
        for r in self.rows.tolist():
            name = str(h.name_array[r])
            out = OpOutcome(r, int(h.ids[r]), name, "replayed")
            self.coverage.outcomes.append(out)
            if is_collective(name):
                out.collective, n_coll = n_coll, n_coll + 1
            if any(x.search(name) for x in skip):
                out.status, out.reason = "skipped", "skipped by the config"
                continue
            if out.collective in drop:
                out.status, out.reason = "failed", drop[out.collective]
                continue
            inputs, _outputs = h.io(r)
            ranges = tensor_ranges(h.attr(r, "tensor_range"))
            specs.append((out, inputs, ranges))
            if name not in cfg.delay_us:
                sized.append(r)
        self.memory = est = estimate(h, sized, storages)
        source = str(h.path)
        if self.memory_limit is None and not self.device.startswith("cuda"):
            self.memory_limit = check_memory([est], source)[0]
        elif self.memory_limit is None:  # (the tensors live on the GPU: its free memory is the limit)
            import torch

            self.memory_limit = tensor_limit() or int(torch.cuda.mem_get_info(torch.device(self.device))[0])
        if est.tensors > self.memory_limit:
            where = "this GPU's free memory" if self.device.startswith("cuda") else "this rank's share"
            raise ChakraError(
                f"{source}: replaying it needs {gib(est.tensors)} of tensors per rank, over {where} of "
                f"{gib(self.memory_limit)}; select fewer ops (--select, --steps)"
            )
        self._own_bytes = 0  # inputs made apart from the storages, as planned so far
        self.plan: dict[str, Any] = {"device": self.device, "seed": seed, "storages": storages.storages, "ops": []}
        self._storages = rt.make_storages(self.plan, self.device, seed)
        planned = []
        for k, (out, inputs, ranges) in enumerate(specs):
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise BudgetSpent(
                    f"{source}: the time budget ran out while trying each op once ({k} of {len(specs)} tried)"
                    f"{slowest_text(self.slowest)}: a pass of this replay takes longer than the budget; give a "
                    "larger budget (--budget-s) or replay fewer ops (--select, --steps)"
                )
            try:
                op = self._plan_op(out, inputs, ranges)
            except rt.Refused as e:  # not a computation: never called
                out.status, out.reason = "refused", str(e)
                continue
            except _TryFailed as e:  # torch refused the call itself
                out.status, out.reason = "failed", failure("try", e.cause)
                continue
            except Exception as e:  # an argument that cannot be recreated, a schema torch rejects, ...
                out.status, out.reason = "failed", failure("build", e)
                continue
            if op["kind"] == "collective":  # (its buffers are made apart from the storages)
                self._own_bytes += _own_bytes(op["args"])
            op.update(node_id=out.node_id, name=out.name)
            self.plan["ops"].append(op)
            self._live.append(out)
            planned.append(out.row)
        self._recorded_waits(np.array(planned, np.int64))
        calls, keep = [], []
        for op, out in zip(self.plan["ops"], self._live):
            try:
                calls.append(rt.build_call(op, self._storages, self.device))
                keep.append(op)
            except Exception as e:  # noqa: BLE001 - reported, the rest replays
                out.status, out.reason = "failed", failure("build", e)
        self.plan["ops"], self._calls = keep, calls
        self._live = [o for o in self._live if o.status == "replayed"]
        self._gaps = [0.0] * len(keep)

    def _recorded_waits(self, rows: np.ndarray) -> None:
        """Each collective's Work is waited for under a token of its own: by the ops that read
        what it wrote, and by the first op that the recorded timing shows ran after its wait.
        ``waits`` counts the collectives and those placed from the Kineto trace (the others
        wait at their first reader or the end of the pass)."""
        ops = self.plan["ops"]
        for k, op in enumerate(ops):
            if op["kind"] == "collective":
                op["writes"].append(f"#{k}")
        self.waits = {"collectives": sum(op["kind"] == "collective" for op in ops), "placed_from_kineto": 0}
        self.host_gaps_info = {"emulated": False, "ops": 0, "per_step_s": 0.0, "note": ""}
        if self.kineto is None:
            self.host_gaps_info["note"] = (
                "no Kineto trace beside it: no host time to calibrate" if self.emulate_host_gaps else ""
            )
            return

        placed = wait_points(self.h, rows, self.kineto)
        for c, j in placed.items():
            ops[j]["reads"].append(f"#{c}")
        self.waits["placed_from_kineto"] = len(placed)
        if self.emulate_host_gaps:
            self.host_gaps_info["note"] = "not calibrated yet (HostReplay.calibrate)"

    def calibrate(self, sync=None) -> None:
        """With ``host_gaps``: find the original's host time that the replay lacks, per op, from
        passes of the replay with and without the recording's profiler (`host_gaps.calibrate`;
        every rank must call it together: its passes run the collectives). ``sync``: a barrier
        before each pass."""
        info = self.host_gaps_info
        if not self.emulate_host_gaps or self.kineto is None or not self._calls:
            return
        rows = np.array([o.row for o in self._live], np.int64)
        names = [str(op["op"]).split(".")[0] for op in self.plan["ops"]]
        waits = np.array([any(str(r).startswith("#") for r in op["reads"]) for op in self.plan["ops"]])
        stage, self.stage = self.stage, "calibration"
        try:
            lk = link_rows(self.h, rows, self.kineto)
            cal = calibrate(
                lambda: self.run_step(host_gaps=False),
                names,
                self.kineto,
                lk,
                self._row_step[rows],
                waits,
                sync or (lambda: None),
            )
        finally:
            self.stage = stage
        if len(cal.gaps) != len(self._calls):  # (an op failed in a calibration pass and was dropped)
            info["note"] = "an op failed while calibrating: no host time"
            return
        self._gaps = cal.gaps.tolist()
        for op, g in zip(self.plan["ops"], self._gaps):
            op.pop("host_gap_us", None)
            if g > 0:
                op["host_gap_us"] = round(g * 1e6, 3)
        info.update(
            emulated=True,
            ops=int((cal.gaps > 0).sum()),
            per_step_s=float(cal.gaps.sum()) / self.steps_per_run,
            note="",
            calibration=cal.to_dict(self.steps_per_run),
        )

    def _plan_op(self, out: OpOutcome, inputs: dict, ranges: dict) -> dict:
        """The op's plan entry, checked by running it once (with fresh tensors if the
        recreated views fail, e.g. an in-place detach of a view)."""
        import torch

        h, cfg = self.h, self.config
        name = out.name
        if name in cfg.delay_us:
            return {
                "kind": "delay",
                "op": name,
                "seconds": float(cfg.delay_us[name]) * 1e-6,
                "args": [],
                "kwargs": {},
                "reads": [],
                "writes": [],
            }
        if name.startswith("c10d::"):
            return self._plan_collective(name, inputs, ranges)
        schema = torch._C.parse_schema(h.attr(out.row, "op_schema"))
        overload = cfg.substitute.get(name) or f"{schema.name}.{schema.overload_name or 'default'}"
        fn = _resolve(overload)
        why = rt.schema_refusal(fn)
        if why is not None:
            raise rt.Refused(why)
        if out.collective >= 0:  # a functional collective: its peers are not here to try it with
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                raise Unreplayable("a collective: replay the whole job (one process per rank) to run it")
        # autograd recorded the op (a sequence number) and it is out of place: replay with grad
        # recording too, which is part of what the original paid
        seq = h.attr(out.row, "seq_id")
        grad = (
            self.autograd
            and seq is not None
            and int(seq) >= 0
            and not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        )
        first = None
        attempts = [(False, grad), (True, grad)] + ([(False, False), (True, False)] if grad else [])
        for fresh, with_grad in attempts:  # (some inputs may not require grad: batch norm's running stats)
            args, kwargs, named = [], {}, {}
            for k, arg in enumerate(schema.arguments[: len(inputs["values"])]):
                v = self._spec(
                    inputs["values"][k],
                    inputs["shapes"][k],
                    _at(inputs["strides"], k),
                    inputs["types"][k],
                    ranges.get(k),
                    fresh,
                )
                if v is not None and str(arg.type) in ("Device", "Optional[Device]"):
                    v = {"device": 1}  # (whatever was recorded: the replay's device)
                named[arg.name] = v
                if arg.kwarg_only:
                    kwargs[arg.name] = v
                else:
                    args.append(v)
            bound_indices(schema.name, named)  # (in place: the same specs as in args and kwargs)
            name_out = overload.split("(")[0]
            if not self.device.startswith("cuda") and name_out in _OFF_CUDA:  # a cuDNN op on another device
                name_out, args, kwargs = _OFF_CUDA[name_out](args, kwargs)
                fn = _resolve(name_out)
                out.reason = f"replayed as {name_out} (no {overload.split('(')[0]} on {self.device})"
            op = {
                "kind": "op",
                "op": name_out,
                "args": args,
                "kwargs": kwargs,
                "reads": _storages(inputs),
                "writes": [],
                "grad": with_grad,
            }
            own = _own_bytes(args) + _own_bytes(list(kwargs.values()))
            if self._own_bytes + own + self.memory.storages + self.memory.outputs > (self.memory_limit or 0):
                raise rt.Refused(
                    f"its inputs made apart from the recorded storages ({gib(own)}) would take this rank past "
                    f"its memory limit of {gib(self.memory_limit or 0)}"
                )
            call = rt.build_call(op, self._storages, self.device)
            if out.collective >= 0:
                op["grad"] = False
                self._own_bytes += own
                return op
            room = (self.memory_limit or 0) - self.memory.storages - self._own_bytes - own
            try:
                t0 = time.perf_counter()
                with _address_space(room, self.device):
                    fn(*call[1], **call[2])
                took = time.perf_counter() - t0
                if self.slowest is None or took > self.slowest[0]:
                    self.slowest = (took, name, out.node_id)
                self._own_bytes += own
                return op
            except Exception as e:
                first = first or e
        assert first is not None  # (every attempt raised: none returned)
        raise _TryFailed(first)

    def _spec(self, v, shape, stride, type_str: str, rng, fresh: bool):
        if type_str.startswith("Tensor"):
            return _TENSORS.tensor_spec(v, shape, stride, type_str, rng, fresh)
        elems = split_list_type(type_str)
        if elems is not None:
            if not isinstance(v, list):
                return scalar(v, type_str)
            return [self._spec(x, s, st, t, rng, fresh) for x, s, st, t in _elements(v, shape, stride, elems)]
        if type_str == "Device":
            return {"device": 1}
        return scalar(v, type_str)

    def _plan_collective(self, name: str, inputs: dict, ranges: dict) -> dict:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise Unreplayable("a collective: replay the whole job (one process per rank) to run it")
        if name not in rt.COLLECTIVES:
            raise Unreplayable(f"collective {name} has no replay mapping")
        args: list = []
        for k, (v, t) in enumerate(zip(inputs["values"], inputs["types"])):
            if v == "<Object>":
                args.append(None)  # the process group: the replay's default group
            else:
                args.append(self._spec(v, inputs["shapes"][k], _at(inputs["strides"], k), t, ranges.get(k), True))
        return {"kind": "collective", "op": name, "args": args, "kwargs": {}, "reads": [], "writes": _storages(inputs)}

    # ------------------------------------------------------------------ running
    def run_step(self, host_gaps: bool | None = None, stamps: list | None = None) -> bool:
        """One pass over the selected ops (all selected steps). An op that raises is taken out of
        the plan (its reason names `stage`) and the pass goes on; a collective that raises ends
        the rank (`CollectiveFailed`): its peers would wait for it. ``host_gaps``: spend the
        calibrated host time (default: as constructed); False runs the ops alone. ``stamps``: a
        list that gets (k, before waits, after waits, after the call) per call k of
        ``plan["ops"]`` as the pass began (`_standalone.run`). Returns False when `deadline`
        cut the pass short (only its collectives ran after it): not a whole pass."""
        on = self.emulate_host_gaps if host_gaps is None else host_gaps
        gaps = self._gaps if on and any(self._gaps) else None
        whole = rt.run(
            self._calls,
            self.device.startswith("cuda"),
            self._on_error,
            self.collective_timeout_s,
            gaps,
            stamps,
            self.deadline,
        )
        if self._dropped:
            self.drop(self._dropped)
            self._dropped = {}
        return whole

    def _on_error(self, k: int, e: BaseException) -> None:
        out = self._live[k]
        reason = failure(self.stage, e)
        if out.collective >= 0:
            out.status, out.reason = "failed", reason
            raise CollectiveFailed(out, reason) from e
        self._dropped.setdefault(k, reason)

    def drop(self, why: dict[int, str]) -> None:
        """Take planned ops out ({index in plan["ops"]: reason}), reported as failed."""
        for k, reason in why.items():
            self._live[k].status, self._live[k].reason = "failed", reason
        keep = [k for k in range(len(self._calls)) if k not in why]
        gaps = list(self._gaps)
        for k in sorted(why):  # (the host time before a dropped op still passed: before the next one)
            if k + 1 < len(gaps):
                gaps[k + 1] += gaps[k]
        self._gaps = [gaps[k] for k in keep]
        self._calls = [self._calls[k] for k in keep]
        self.plan["ops"] = [self.plan["ops"][k] for k in keep]
        self._live = [self._live[k] for k in keep]
        for op, g in zip(self.plan["ops"], self._gaps):
            if g > 0:
                op["host_gap_us"] = round(g * 1e6, 3)

    def drop_collectives(self, why: dict[int, str]) -> None:
        """Take out the collectives numbered so (`OpOutcome.collective`), as another rank had to."""
        self.drop({k: why[o.collective] for k, o in enumerate(self._live) if o.collective in why})

    def failed_collectives(self) -> dict[int, str]:
        """{collective number: reason} of this rank's collectives that could not be planned."""
        return {o.collective: o.reason for o in self.coverage.outcomes if o.collective >= 0 and o.status != "replayed"}

    def failures(self) -> list[str]:
        """One line per op that was not replayed because it failed (`OpOutcome.line`)."""
        return [o.line() for o in self.coverage.outcomes if o.status == "failed"]

    @property
    def steps_per_run(self) -> int:
        return max(len(self.steps), 1)

    def recorded_step_s(self) -> list[float]:
        """What the trace recorded for what this replay runs, per replayed step (seconds; see
        `recorded_basis`): the profiler step's duration in the Kineto trace (profiling included), or,
        with `select`, the sum of the selected ops' recorded (Kineto CPU) durations in that step: the
        ops the replay runs one after another, not the rest of the step around them."""
        if self.kineto is None:
            return []
        if not self.select:
            return [(e - s) / 1e9 for n, s, e in self.kineto.steps() if n in self.steps]
        lk = link_rows(self.h, self.rows, self.kineto)
        hit = lk.event >= 0
        if not hit.any():
            return []
        dur = np.where(hit, np.maximum(lk.duration, 0), 0).astype(np.float64)
        step = self._row_step[self.rows]
        if not self.steps:  # a trace without profiler steps: the selection as a whole
            return [float(dur.sum()) / 1e9]
        return [float(dur[step == n].sum()) / 1e9 for n in self.steps if (hit & (step == n)).any()]

    @property
    def recorded_basis(self) -> str:
        if self.select:
            return f"sum of the recorded durations of the ops selected by {self.select!r}, per step (Kineto)"
        return "Kineto profiler steps (profiling overhead included)"


_TENSORS = StoragePlan()  # (tensor_spec needs no state)


class _TryFailed(Exception):
    """The trial call of an op raised ``cause`` (the "try" stage, not the "build")."""

    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause


_NOT_COLLECTIVES = ("_c10d_functional::wait_tensor", "_c10d_functional::_wrap_tensor_autograd")


def is_collective(name: str) -> bool:
    """A communication op: every rank must run it (c10d's, and the functional collectives that
    DTensor and FSDP call, which run as ordinary ops on the replay's process group)."""
    if name.startswith("c10d::"):
        return True
    return name.startswith(("_c10d_functional::", "_c10d_functional_autograd::")) and name not in _NOT_COLLECTIVES


def _load_kineto(kineto):
    if kineto is None or not isinstance(kineto, (str, os.PathLike)):
        return kineto

    return read_kineto(kineto)


# cuDNN-only ops recorded on a GPU, replayed elsewhere by their native equivalents (same work)
_OFF_CUDA: dict[str, Callable[[list, dict], tuple[str, list, dict]]] = {
    # cudnn_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
    "aten::cudnn_batch_norm.default": lambda a, kw: ("aten::native_batch_norm.default", a[:8], {}),
    # cudnn_batch_norm_backward(input, grad_output, weight, running_mean, running_var, save_mean,
    #                           save_var, epsilon, reserveSpace)
    "aten::cudnn_batch_norm_backward.default": lambda a, kw: (
        "aten::native_batch_norm_backward.default",
        [a[1], a[0], a[2], a[3], a[4], a[5], a[6], True, a[7], [True, True, True]],
        {},
    ),
}


def _at(strides, k):
    return strides[k] if strides and k < len(strides) else None


@contextmanager
def _address_space(room: int | None, device: str):
    """While an op is tried: the address space capped at what the process maps now plus `room`
    (and a little for a thread's stack), so that an op whose arguments ask for more than the
    trace recorded (an ``aten::new_zeros`` of 10^12 elements recorded with a small output) fails
    to allocate instead of taking the machine's memory. CPU only (a GPU's memory is its own)."""
    if room is None or str(device).startswith("cuda"):
        yield
        return
    mapped = vm_size()
    if mapped is None:  # (not known: no cap)
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped + max(room, 0) + (128 << 20)
    for lim in (soft, hard):
        if lim != resource.RLIM_INFINITY:
            cap = min(cap, lim)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _own_bytes(specs: list) -> int:
    """Bytes of the plan's tensor specs made apart from the storages (``fresh``)."""
    total = 0
    for v in specs:
        if isinstance(v, list):
            total += _own_bytes(v)
        elif isinstance(v, dict) and "t" in v and v["t"][6]:
            _sid, shape, stride, _off, dtype, _rng, _fresh = v["t"]
            extent = 0 if any(d == 0 for d in shape) else 1 + sum((d - 1) * s for d, s in zip(shape, stride))
            total += extent * _ITEMSIZE.get(dtype, 8)
    return total


def _elements(v: list, shape, stride, elems: list[str]):
    """(value, shape, stride, type) of each element of a recorded list argument: the list's
    shapes and strides when they line up, its element types (one repeated when the trace
    gives a single one)."""
    n = len(v)
    shapes = shape if isinstance(shape, list) and len(shape) == n else [[]] * n
    strides = stride if isinstance(stride, list) and len(stride) == n else [None] * n
    types = elems if len(elems) == n else [elems[0] if elems else ""] * n
    return zip(v, shapes, strides, types)


def _storages(io: dict) -> list:
    """Storage ids of every tensor in an input/output list (nested lists included)."""
    out = []

    def walk(v, t):
        if isinstance(t, str) and t.startswith("Tensor") and isinstance(v, list) and len(v) >= 6:
            out.append(v[1])
        elif isinstance(v, list):
            elems = split_list_type(t) or []
            for i, x in enumerate(v):
                walk(x, elems[i] if i < len(elems) else (elems[0] if elems else ""))

    for v, t in zip(io["values"], io["types"]):
        walk(v, t)
    return out


def _resolve(overload: str):

    try:
        return rt.resolve(overload.split("(")[0])
    except ValueError:  # (a name from the trace: not a registered operator, or no operator name at all)
        raise Unreplayable(f"{overload.split('(')[0]!r} is not a registered operator in this PyTorch") from None
    except (AttributeError, RuntimeError) as e:
        raise Unreplayable(
            f"{overload.split('(')[0]} is not a registered operator in this PyTorch ({_first_line(e)})"
        ) from None


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0][:200] if s else type(e).__name__
