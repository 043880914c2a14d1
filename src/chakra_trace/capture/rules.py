"""Shape rules: how each captured op's shapes depend on the batch B and the sequence length S.

A capture with ``shape_rules=True`` records the step at (B, S) and again at two probe points,
(B', S) and (B, S') (`probes`: half, so that a model with learned positions stays within its
table, or twice where half is no whole number above 1). The three runs must dispatch the same ops in
the same order; then every integer of an op's input and output shapes and of its argument
values that differs between them is fitted as c·B^a·S^b (integer a and b, rational c) from
the ratios. An integer that is no such monomial (S - 1, B + S), a float, a list or a dtype
that changes with B or S, leaves its op without a rule, and `synthesize.rescale` refuses it.

A rule is kept only if it reproduces the op's cost: its shapes and values at (B, S), costed by
`cost.recorded_cost`, give the captured FLOPs and bytes. So a rescaled op costs what a capture
at the new point would (unless a dimension is a monomial only at the three points probed, such
as max(S, 64) at S = 128 and 64).

The stored form, small on the wire (the ops that depend on neither B nor S carry nothing):

- node attribute ``shape_rule``, a JSON array ``[ins, outs]`` or ``[ins, outs, values]``:
  ``ins``/``outs`` align with the node's input/output shapes, null where the recorded shape
  holds at every B and S, else that shape with each dependent dimension written as a monomial
  string: "B", "S", "B*S", "8*S", "B*S/2", "B^2*S". ``values`` are the op's argument values
  (`recorder.plain`: null for tensors and for what no cost rule reads), dependent integers
  written the same way, trailing nulls left out; no ``values`` when all are null.
  A 70B step's k_proj matmul: ``[[["B*S",8192],null],[["B*S",1024]]]`` (its weight: null).
- ``shape_rule`` = "!<why>" on an op that depends on B or S by no rule;
- the trace's ``capture`` metadata has ``"shape_rules": {"format": 1, "probes": [[B', S], [B, S']]}``.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ..errors import ChakraError
from .cost import recorded_cost
from .recorder import CapturedOp

FORMAT = 1
_DUMPS = json.JSONEncoder(separators=(",", ":")).encode
_TERM = re.compile(r"(-?\d+)|([BS])(?:\^(-?\d+))?")


class ShapeRuleError(ChakraError):
    """A shape rule that cannot be stored or applied."""


class _NoRule(Exception):
    """An op whose shapes or values depend on B or S by no monomial rule (the message says why)."""


def probe(n: int) -> int:
    """The other point of one variable: half of it where that is a whole number above 1, else
    twice it (PyTorch makes other views and copies of size-1 dimensions: 1 is no probe)."""
    return n // 2 if n % 2 == 0 and n > 2 else 2 * n


def probes(batch: int, seq: int) -> list[tuple[int, int]]:
    """The two points besides (batch, seq) that a capture with shape rules records."""
    return [(probe(batch), seq), (batch, probe(seq))]


def derive(
    ops: list[CapturedOp], at_b: list[CapturedOp], at_s: list[CapturedOp], batch: int, seq: int
) -> dict[int, str]:
    """{op id: shape rule} of the ops of a step captured at (batch, seq), from the same step
    captured at the two `probes` (`at_b`: the other batch, `at_s`: the other seq). Ops that
    depend on neither are left out. Raises ShapeRuleError when the runs dispatch other ops."""
    (b2, _), (_, s2) = probes(batch, seq)
    for other, where in ((at_b, f"batch {b2}"), (at_s, f"seq {s2}")):
        _same_sequence(ops, other, f"batch {batch} and seq {seq}", where)
    out: dict[int, str] = {}
    for op, ob, os_ in zip(ops, at_b, at_s):
        if _fields(op) == _fields(ob) == _fields(os_):
            continue
        try:
            out[op.id] = _rule(op, ob, os_, (batch, b2, seq, s2))
        except _NoRule as e:
            out[op.id] = f"!{e}"
    return out


def _same_sequence(ops: list[CapturedOp], other: list[CapturedOp], here: str, there: str) -> None:
    names = [op.name for op in ops]
    others = [op.name for op in other]
    if names == others:
        return
    k = next((i for i, (a, b) in enumerate(zip(names, others)) if a != b), min(len(names), len(others)))
    ours, theirs = (x[k] if k < len(x) else "none" for x in (names, others))
    first = f"op {k}: {ours} at {here}, {theirs} at {there}"
    raise ShapeRuleError(
        f"the step's op sequence depends on the batch or sequence length ({len(names)} ops at {here}, "
        f"{len(others)} at {there}; first difference at {first}): no shape rules can be recorded"
    )


def _fields(op: CapturedOp) -> tuple:
    return op.in_shapes, op.out_shapes, op.values, _types(op)


def _types(op: CapturedOp) -> tuple:
    return op.in_types, op.out_types


def _rule(op: CapturedOp, ob: CapturedOp, os_: CapturedOp, points: tuple[int, int, int, int]) -> str:
    """The rule of one op (see the module docstring), checked against its captured cost."""
    if not _types(op) == _types(ob) == _types(os_):
        raise _NoRule("its dtypes or argument kinds change with batch or seq")
    ins = _shapes(op.in_shapes, ob.in_shapes, os_.in_shapes, points)
    outs = _shapes(op.out_shapes, ob.out_shapes, os_.out_shapes, points)
    values = _fit(op.values, ob.values, os_.values, points)
    while values and values[-1] is None:
        values.pop()
    rule = [ins, outs, values] if values else [ins, outs]
    batch, seq = points[0], points[2]
    got = rescaled_cost(op.name, op.in_shapes, op.in_types, op.out_shapes, op.out_types, rule, batch, seq)
    if got[:2] != (op.flops, op.bytes):
        raise _NoRule(
            f"its cost depends on more than its shapes and values (rule {got[:2]}, captured {op.flops, op.bytes})"
        )
    return _DUMPS(rule)


def _shapes(s0: list, sb: list, ss: list, points: tuple[int, int, int, int]) -> list:
    """Per entry: null where it is the same at every point, else its fitted shape."""
    if not len(s0) == len(sb) == len(ss):
        raise _NoRule("its number of inputs or outputs changes with batch or seq")
    return [None if a == b == c else _fit(a, b, c, points) for a, b, c in zip(s0, sb, ss)]


def _fit(x0: Any, xb: Any, xs: Any, points: tuple[int, int, int, int]) -> Any:
    """x0 (a shape, a value, lists of them) with each integer that differs between the three
    points as its monomial; a float that differs becomes null (the cost check says whether that
    matters)."""
    if isinstance(x0, list):
        if not (isinstance(xb, list) and isinstance(xs, list) and len(x0) == len(xb) == len(xs)):
            raise _NoRule(f"a list changes length with batch or seq ({x0}, {xb}, {xs})")
        return [_fit(a, b, c, points) for a, b, c in zip(x0, xb, xs)]
    if x0 == xb == xs and type(x0) is type(xb) is type(xs):
        return x0
    if all(type(v) is int for v in (x0, xb, xs)):
        return _monomial(x0, xb, xs, points)
    if all(type(v) is float for v in (x0, xb, xs)):
        return None
    raise _NoRule(f"a value changes with batch or seq ({x0!r}, {xb!r}, {xs!r})")


def _monomial(v0: int, vb: int, vs: int, points: tuple[int, int, int, int]) -> str:
    """c·B^a·S^b through the three points, as its string ("8*S")."""
    batch, b2, seq, s2 = points
    if 0 in (v0, vb, vs):
        raise _NoRule(f"a dimension is {v0}, {vb}, {vs} at batch {batch}, {b2} / seq {seq}, {s2}: no c·B^a·S^b")
    a = _exponent(Fraction(vb, v0), Fraction(b2, batch))
    b = _exponent(Fraction(vs, v0), Fraction(s2, seq))
    if a is None or b is None:
        raise _NoRule(f"a dimension is {v0}, {vb}, {vs} at batch {batch}, {b2} / seq {seq}, {s2}: no c·B^a·S^b")
    return format_monomial(Fraction(v0) / (Fraction(batch) ** a * Fraction(seq) ** b), a, b)


def _exponent(ratio: Fraction, step: Fraction) -> int | None:
    """The integer e with step**e == ratio, or None."""
    if ratio <= 0:
        return None
    e = round(math.log(ratio) / math.log(step))
    return e if step**e == ratio else None


def format_monomial(c: Fraction, a: int, b: int) -> str:
    """ "8*S", "B*S/2", "B^2": coefficient (when not 1), then B and S with their exponents."""
    parts = [str(c.numerator)] if c.numerator != 1 or not (a or b) else []
    parts += [sym if e == 1 else f"{sym}^{e}" for sym, e in (("B", a), ("S", b)) if e]
    text = "*".join(parts)
    return text if c.denominator == 1 else f"{text}/{c.denominator}"


@lru_cache(maxsize=4096)
def parse_monomial(text: str) -> tuple[Fraction, int, int]:
    """(c, a, b) of a monomial string `format_monomial` wrote."""
    num, _, den = text.partition("/")
    try:
        c, a, b = Fraction(1, int(den) if den else 1), 0, 0
    except (ValueError, ZeroDivisionError):
        raise ShapeRuleError(f"shape rule term {text!r}: bad denominator") from None
    for factor in num.split("*"):
        m = _TERM.fullmatch(factor)
        if m is None:
            raise ShapeRuleError(f"shape rule term {text!r}: expected c*B^a*S^b")
        if m[1] is not None:
            c *= int(m[1])
        elif m[2] == "B":
            a += int(m[3] or 1)
        else:
            b += int(m[3] or 1)
    return c, a, b


def substitute(x: Any, batch: int, seq: int) -> Any:
    """A rule's shape or value (nested lists) with every monomial evaluated at (batch, seq).
    Raises ShapeRuleError where one is not a whole number there (B*S/2 at an odd B*S)."""
    if isinstance(x, str):
        c, a, b = parse_monomial(x)
        v = c * Fraction(batch) ** a * Fraction(seq) ** b
        if v.denominator != 1:
            raise ShapeRuleError(f"{x} is {v} at batch {batch}, seq {seq}: not a whole number")
        return int(v)
    if isinstance(x, list):
        return [substitute(v, batch, seq) for v in x]
    return x


def apply(rule: list, in_shapes: list, out_shapes: list, batch: int, seq: int) -> tuple[list, list, list]:
    """(input shapes, output shapes, argument values) of a ruled op at (batch, seq): the rule's
    entries evaluated, the recorded shapes where the rule has null."""
    ins, outs = rule[0], rule[1]
    values = rule[2] if len(rule) > 2 else []
    new_ins = [s if r is None else substitute(r, batch, seq) for s, r in zip(in_shapes, ins)]
    new_outs = [s if r is None else substitute(r, batch, seq) for s, r in zip(out_shapes, outs)]
    new_values = substitute(values, batch, seq) + [None] * (len(in_shapes) - len(values))
    return new_ins, new_outs, new_values


def rescaled_cost(
    op: str, in_shapes: list, in_types: list, out_shapes: list, out_types: list, rule: list, batch: int, seq: int
) -> tuple[int, int, list, list]:
    """(FLOPs, bytes, input shapes, output shapes) of a ruled op (`op` its overload,
    "aten::mm.default") at (batch, seq), by the cost rules the capture applies."""
    ins, outs, values = apply(rule, in_shapes, out_shapes, batch, seq)
    flops, nbytes, _ = recorded_cost(op, ins, in_types, values, outs, out_types)
    return flops, nbytes, ins, outs


__all__ = [
    "FORMAT",
    "ShapeRuleError",
    "apply",
    "derive",
    "format_monomial",
    "parse_monomial",
    "probe",
    "probes",
    "rescaled_cost",
    "substitute",
]
