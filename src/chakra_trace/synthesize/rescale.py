"""A captured step at another batch size or sequence length, without the model: `rescale_trace`.

A master trace captured with shape rules (`chakra capture --shape-rules`; `capture.rules` says
how they are found and stored) says, per op, how its shapes and argument values depend on the
batch B and the sequence length S. Rescaling puts the new (B, S) into every rule and costs each
ruled op again by the rules the capture itself applies (`capture.cost.recorded_cost`, which
needs PyTorch). What it preserves: the result equals a capture at the new point node for node
(ids, names, dependencies, shapes, FLOPs `num_ops`, bytes `tensor_size`, every attribute, the
rules themselves); ops that depend on neither B nor S are kept as they are, and views stay at 0
bytes. The `capture` metadata gives the new batch and seq, and `rescaled_from` the point the step
was captured at (left out when rescaled back to it, so a round trip gives back the same trace).

Durations are cleared (a master trace has none): a time measured or modelled at one shape says
nothing exact about another, so the simulator's device model costs the ops
(`chakra simulate --device h100`).

Refused with a ChakraError: a trace that is no master trace with shape rules; an op that
depends on B or S by no rule, or whose rule gives no whole number at the new point (each named
by node id and op); a batch or seq of 1 from a capture at another (PyTorch makes other views
and copies of size-1 dimensions, so the ops themselves differ). Rescale before other transforms:
a fused node's rule describes its first op only.
"""

from __future__ import annotations

import json

import numpy as np

from ..capture import rules as R
from ..capture.step import SCHEMA
from ..errors import ChakraError
from ..io.documents import load_json, short
from ..schema import proto as pb
from ..schema.enums import Attr
from ..schema.trace import Trace

_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def rescale_trace(t: Trace, batch: int | None = None, seq: int | None = None) -> Trace:
    """The master trace `t` as a capture at (batch, seq) would give it (None: as captured);
    see the module docstring for what it keeps and what it refuses."""
    about = capture_about(t)
    batch = about["batch"] if batch is None else batch
    seq = about["seq"] if seq is None else seq
    _check_point(about, batch, seq)
    _need_torch()
    out = t.copy()
    new = _rescaled_rows(t, batch, seq)
    if new:
        rows = np.fromiter(new, np.int64, len(new))
        _replace_heads(out, rows, [new[r][0] for r in rows.tolist()])
        out.set_attr(Attr.NUM_OPS, np.array([new[r][1] for r in rows.tolist()], out.num_ops.dtype), rows)
        out.set_attr(Attr.TENSOR_SIZE, np.array([new[r][2] for r in rows.tolist()], out.tensor_size.dtype), rows)
    out.duration = np.zeros_like(t.duration)
    _set_about(out, about, batch, seq)
    return out


def capture_about(t: Trace) -> dict:
    """The `capture` metadata of a master trace with shape rules, or a ChakraError saying how to
    make one."""
    meta = {a.name: a.string_val for a in t.metadata.attr}
    if meta.get("schema") != SCHEMA or "capture" not in meta:
        raise ChakraError(
            "rescale: not a master trace (`chakra capture ... --shape-rules -o MASTER.et` makes one; "
            "a parallelized or converted trace has no shape rules)"
        )
    about = load_json(meta["capture"], "rescale: capture metadata")  # (deep or over-long: a ChakraError)
    if not isinstance(about, dict):
        raise ChakraError(f"rescale: the capture metadata is {short(about)}, not a JSON object")
    for what in ("batch", "seq"):
        v = about.get(what)
        if type(v) is not int or v < 1:
            raise ChakraError(f"rescale: the capture metadata's {what} is {short(v)}, not a positive integer")
    rules = about.get("shape_rules")
    if not rules:
        raise ChakraError(
            "rescale: this master trace has no shape rules; capture it again with `chakra capture ... --shape-rules`"
        )
    if not isinstance(rules, dict) or rules.get("format") != R.FORMAT:
        got = rules.get("format") if isinstance(rules, dict) else rules
        raise ChakraError(f"rescale: shape rules of format {short(got)}, this version reads {R.FORMAT}")
    return about


def _check_point(about: dict, batch: int, seq: int) -> None:
    for what, new in (("batch", batch), ("seq", seq)):
        if not isinstance(new, int) or new < 1:
            raise ChakraError(f"rescale: {what} must be a positive integer, got {new!r}")
        if new == 1 and about[what] != 1:
            raise ChakraError(
                f"rescale: a {what} of 1 from a capture at {what} {about[what]}: PyTorch makes other views and "
                f"copies of size-1 dimensions, so the step runs other ops; capture at {what} 1 instead"
            )


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ChakraError("rescale costs ops by PyTorch's FLOP formulas: install PyTorch (pip install torch)") from None


def _rescaled_rows(t: Trace, batch: int, seq: int) -> dict[int, tuple[bytes, int, int]]:
    """{row: (its new inputs/outputs wire bytes, FLOPs, bytes)} of every ruled row. Ops alike
    (the same op, recorded shapes and rule: every layer's) are costed once."""
    ex, ip, split = t.extra.tobytes(), t.extra_indptr.tolist(), t.extra_split.tolist()
    new: dict[int, tuple[bytes, int, int]] = {}
    done: dict[tuple[bytes, str, str], tuple[bytes, int, int]] = {}
    refused: list[tuple[int, str, str]] = []
    for r in range(len(t)):
        head, tail = ex[ip[r] : ip[r] + split[r]], ex[ip[r] + split[r] : ip[r + 1]]
        if b"shape_rule" not in tail:  # (most ops of a step depend on neither: no parse)
            continue
        attrs = {a.name: a.string_val for a in pb.Node.FromString(tail).attr if a.name in ("op", "shape_rule")}
        rule = attrs.get("shape_rule")
        if not rule:
            continue
        op = attrs.get("op", "")
        if rule.startswith("!"):
            refused.append((int(t.ids[r]), op, rule[1:]))
            continue
        key = (head, op, rule)
        if key not in done:
            try:
                done[key] = _rescale_op(head, op, rule, batch, seq)
            except R.ShapeRuleError as e:
                raise ChakraError(f"rescale: node {int(t.ids[r])} ({op}): {e}") from None
        new[r] = done[key]
    if refused:
        node, op, why = refused[0]
        more = f" ({len(refused) - 1} other ops neither)" if len(refused) > 1 else ""
        raise ChakraError(
            f"rescale: node {node} ({op}) has no shape rule{more}: {why}; "
            f"capture the model at batch {batch}, seq {seq} instead"
        )
    return new


def _rescale_op(head: bytes, op: str, rule: str, batch: int, seq: int) -> tuple[bytes, int, int]:
    """(new inputs/outputs wire bytes, (FLOPs, bytes)) of one ruled op."""
    msg = pb.Node.FromString(head)
    try:  # (load_json: nesting too deep or an over-long integer is a one-line error too)
        ins, outs = load_json(msg.inputs.shapes, "input shapes"), load_json(msg.outputs.shapes, "output shapes")
        parsed = load_json(rule, "shape rule")
        in_types, out_types = load_json(msg.inputs.types, "input types"), load_json(msg.outputs.types, "output types")
    except ChakraError as e:
        raise R.ShapeRuleError(f"its shapes, types or shape rule are not JSON ({e})") from None
    flops, nbytes, new_ins, new_outs = R.rescaled_cost(op, ins, in_types, outs, out_types, parsed, batch, seq)
    msg.inputs.shapes, msg.outputs.shapes = _DUMPS(new_ins), _DUMPS(new_outs)
    return msg.SerializeToString(), flops, nbytes


def _replace_heads(t: Trace, rows: np.ndarray, heads: list[bytes]) -> None:
    """Swap the kept wire bytes before the attributes (inputs, outputs) of `rows` (ascending)
    for `heads`, in place: the rows between them are copied as whole slices."""
    ex, ip, split = t.extra.tobytes(), t.extra_indptr.tolist(), t.extra_split.tolist()
    pieces: list[bytes] = []
    kept = 0  # first row not yet copied
    for r, head in zip(rows.tolist(), heads):
        pieces += [ex[ip[kept] : ip[r]], head, ex[ip[r] + split[r] : ip[r + 1]]]
        kept = r + 1
    pieces.append(ex[ip[kept] :])
    lens = np.diff(t.extra_indptr).astype(np.int64)
    new_split = t.extra_split.copy()
    new_split[rows] = [len(h) for h in heads]
    lens[rows] += new_split[rows].astype(np.int64) - t.extra_split[rows].astype(np.int64)
    t.extra = np.frombuffer(b"".join(pieces), np.uint8).copy()
    t.extra_indptr = np.concatenate(([0], np.cumsum(lens))).astype(t.extra_indptr.dtype)
    t.extra_split = new_split


def _set_about(t: Trace, about: dict, batch: int, seq: int) -> None:
    """The `capture` metadata at the new point; `rescaled_from` keeps the captured point."""
    captured = about.pop("rescaled_from", {"batch": about["batch"], "seq": about["seq"]})
    about.update(batch=batch, seq=seq)
    if (batch, seq) != (captured["batch"], captured["seq"]):
        about["rescaled_from"] = captured
    for a in t.metadata.attr:
        if a.name == "capture":
            a.string_val = json.dumps(about, sort_keys=True, default=str)


__all__ = ["rescale_trace", "capture_about"]
