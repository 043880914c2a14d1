"""`rescale` / `chakra transform --batch/--seq`: a master trace captured with shape rules, taken to
another batch size and sequence length, is the trace a capture there gives, node for node.

The key property is checked against real captures of examples/models/gpt.py (rotary and
learned positions, RMSNorm and LayerNorm, SwiGLU and GELU) at larger and smaller points, batch
only, seq only and both; a toy model covers the rules' edge cases (a rational coefficient, a
float that follows the sequence length, a dimension that is no monomial, control flow on a shape);
the mixture-of-experts preset a rational coefficient in a real model.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed; capturing needs it")
pytestmark = pytest.mark.torch

from chakra_trace.capture import CaptureError, capture, load_build  # noqa: E402
from chakra_trace.capture import rules as R  # noqa: E402
from chakra_trace.cli import main  # noqa: E402
from chakra_trace.errors import ChakraError  # noqa: E402
from chakra_trace.io.et import read_trace  # noqa: E402
from chakra_trace.io.workload import Workload  # noqa: E402
from chakra_trace.schema.builder import TraceBuilder  # noqa: E402
from chakra_trace.synthesize.transforms import rescale  # noqa: E402

GPT = Path(__file__).resolve().parent.parent / "examples" / "models" / "gpt.py"
TINY = {"preset": "tiny"}
# gpt2-small's architecture (learned positions, LayerNorm, GELU, biases, tied embedding), small
GPT2_TINY = {"preset": "gpt2-small", "layers": 2, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 256, "max_seq": 64}
BASE = (4, 8)


@pytest.fixture(scope="module")
def gpt():
    return load_build(f"{GPT}:build")


@pytest.fixture(scope="module")
def tiny(gpt):
    return capture(gpt, TINY, batch=BASE[0], seq=BASE[1], shape_rules=True)


def _about(t) -> dict:
    return json.loads(next(a.string_val for a in t.metadata.attr if a.name == "capture"))


def _fields(t) -> list[tuple]:
    """What a simulator or parallelization reads of each node."""
    return [
        (n.id, n.name, n.attr("op"), n.inputs.shapes, n.outputs.shapes, n.attr("num_ops"), n.attr("tensor_size"))
        for n in t
    ]


def _same_as_capture(got, real) -> None:
    """Node for node what the capture gives (ids, deps, shapes, FLOPs, bytes, every attribute);
    the metadata apart from the probes the rules were found at."""
    assert _fields(got) == _fields(real)
    ours, theirs = _about(got), _about(real)
    assert {**ours, "shape_rules": None, "rescaled_from": None} == {
        **theirs,
        "shape_rules": None,
        "rescaled_from": None,
    }
    got.metadata.CopyFrom(real.metadata)
    assert got.equals(real), got.differences(real)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batch, seq", [(8, 8), (2, 8), (4, 16), (4, 4), (6, 12), (3, 5), (16, 32)])
def test_rescaled_equals_a_capture_there(gpt, tiny, batch, seq):
    real = capture(gpt, TINY, batch=batch, seq=seq, shape_rules=True)
    got = rescale(tiny.trace, batch, seq)
    about = _about(got)
    _same_as_capture(got, real.trace)
    assert got.num_ops.sum() == real.trace.num_ops.sum() and got.tensor_size.sum() == real.trace.tensor_size.sum()
    assert (about["batch"], about["seq"], about["rescaled_from"]) == (batch, seq, {"batch": 4, "seq": 8})
    assert not got.duration.any()


@pytest.fixture(scope="module")
def gpt2_tiny(gpt):
    return capture(gpt, GPT2_TINY, batch=4, seq=16, shape_rules=True, fold_views=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batch, seq", [(2, 32), (8, 8), (6, 24)])
def test_learned_positions_layernorm_gelu(gpt, gpt2_tiny, batch, seq):
    assert gpt2_tiny.shape_rules["without_rule"] == 0
    real = capture(gpt, GPT2_TINY, batch=batch, seq=seq, shape_rules=True, fold_views=True)
    _same_as_capture(rescale(gpt2_tiny.trace, batch, seq), real.trace)


@pytest.mark.timeout(120)
def test_mixture_of_experts(gpt):
    """Balanced routing gives each expert B*S*top_k/experts token copies: a rational coefficient."""
    moe = {"preset": "tiny-moe"}
    base = capture(gpt, moe, batch=4, seq=8, shape_rules=True)
    assert any('"B*S/2"' in (n.attr("shape_rule") or "") for n in base.trace)
    for batch, seq in ((8, 16), (2, 8)):
        _same_as_capture(
            rescale(base.trace, batch, seq), capture(gpt, moe, batch=batch, seq=seq, shape_rules=True).trace
        )
    with pytest.raises(ChakraError, match=r"node \d+ \(aten::view\): B\*S/2 is 15/2 at batch 3, seq 5"):
        rescale(base.trace, 3, 5)  # (the model refuses 15 tokens too)
    with pytest.raises(CaptureError, match="at batch 3, seq 3 too, which the model refuses"):
        capture(gpt, moe, batch=3, seq=6, shape_rules=True)  # its probe at seq 3: 9 tokens


def test_round_trip_gives_back_the_trace(tiny):
    there = rescale(tiny.trace, batch=2 * BASE[0])
    assert there.num_ops.sum() > tiny.trace.num_ops.sum()
    back = rescale(there, batch=BASE[0])
    assert back.equals(tiny.trace), back.differences(tiny.trace)  # metadata too: no `rescaled_from`
    assert rescale(tiny.trace).equals(tiny.trace)  # (nothing asked: as captured)


def test_ops_that_follow_neither_are_kept(tiny):
    got = rescale(tiny.trace, 8, 16)
    rules = [n.attr("shape_rule") for n in tiny.trace]
    kept = [f for f, r in zip(_fields(got), rules) if r is None]
    assert kept == [f for f, r in zip(_fields(tiny.trace), rules) if r is None]
    assert any(f[1].startswith("aten::_foreach") or f[2] == "aten::lerp_.Scalar" for f in kept)  # the optimizer's
    views = [f for f, n in zip(_fields(got), tiny.ops) if n.view]
    assert views and all(f[6] == 0 and f[5] == 0 for f in views)


def test_workload_of_one_master(tiny):
    w = rescale(Workload({0: tiny.trace}), seq=16)
    assert isinstance(w, Workload) and _about(w[0])["seq"] == 16


# -- the stored rules


def test_rule_form(tiny):
    """Small on the wire: null where a shape does not change, monomials where it does."""
    rules: dict[str, list] = {}
    for n in tiny.trace:
        if n.attr("shape_rule"):
            rules.setdefault(n.attr("op"), []).append(n.attr("shape_rule"))
    assert '[[["B*S",64],null],[["B*S",64]]]' in rules["aten::mm"]  # a forward linear: the weight's null
    assert '[[[64,"B*S"],["B*S",64]],[null]]' in rules["aten::mm"]  # its weight's gradient: the same shape
    assert rules["aten::embedding"] == ['[[null,["B","S"]],[["B","S",64]]]']
    assert '[[["B*S",64],null],[["B","S",64]],[null,["B","S",64]]]' in rules["aten::_unsafe_view"]  # a size argument
    assert not any(op.startswith(("aten::lerp_", "aten::addcdiv_")) for op in rules)  # the optimizer's: no rule
    about = _about(tiny.trace)
    assert about["shape_rules"] == {"format": R.FORMAT, "probes": [[2, 8], [4, 4]]}


@pytest.mark.parametrize(
    "c, a, b, text",
    [
        (Fraction(1), 1, 1, "B*S"),
        (Fraction(8), 0, 1, "8*S"),
        (Fraction(1, 2), 1, 1, "B*S/2"),
        (Fraction(3), 2, 0, "3*B^2"),
    ],
)
def test_monomials(c, a, b, text):
    assert R.format_monomial(c, a, b) == text and R.parse_monomial(text) == (c, a, b)
    assert R.substitute([text, 7], 4, 16) == [int(c * 4**a * 16**b), 7]


def test_probes_avoid_size_one():
    assert R.probes(8, 4096) == [(4, 4096), (8, 2048)]
    assert R.probes(2, 3) == [(4, 3), (2, 6)] and R.probes(1, 1) == [(2, 1), (1, 2)]


class Toy(torch.nn.Module):
    """An embedding and a linear layer, with the shapes the rules' edge cases need."""

    def __init__(self, groups: int, shift: bool, branch: bool) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 8)
        self.lin = torch.nn.Linear(8, 8)
        self.groups, self.shift, self.branch = groups, shift, branch

    def forward(self, tokens):
        b, s = tokens.shape
        x = self.embed(tokens) * (1.0 / s)  # a float argument that follows S: no rule, no cost
        if self.groups:  # (groups, B*S/groups, 8): a rational coefficient
            x = self.lin(x.reshape(self.groups, -1, 8)).reshape(b, s, 8)
        else:
            x = self.lin(x)
        if self.shift:  # S - 1: no monomial
            x = x[:, 1:].contiguous()
        if self.branch and b > 2:  # the op sequence follows the batch
            x = x + 1
        return x


def toy(groups: int = 0, shift: bool = False, branch: bool = False):
    def inputs(batch: int, seq: int):
        return (torch.randint(0, 64, (batch, seq)),), None

    return Toy(groups, shift, branch), inputs, lambda out, _: out.pow(2).mean()


@pytest.mark.timeout(60)
def test_rational_coefficient_and_float_arguments():
    base = capture(toy, {"groups": 4}, batch=4, seq=8, shape_rules=True)
    rules = [n.attr("shape_rule") for n in base.trace if n.attr("shape_rule")]
    assert any('"B*S/4"' in r for r in rules) and base.shape_rules["without_rule"] == 0
    for batch, seq in ((8, 8), (2, 2), (4, 12)):
        _same_as_capture(
            rescale(base.trace, batch, seq), capture(toy, {"groups": 4}, batch=batch, seq=seq, shape_rules=True).trace
        )
    with pytest.raises(
        ChakraError, match=r"node \d+ \(aten::\w+.*B\*S/4 is 15/4 at batch 3, seq 5: not a whole number"
    ):
        rescale(base.trace, 3, 5)


@pytest.mark.timeout(60)
def test_no_monomial_is_refused_with_the_node():
    base = capture(toy, {"shift": True}, batch=4, seq=8, shape_rules=True)
    assert base.shape_rules["without_rule"] > 0
    refused = [n for n in base.trace if (n.attr("shape_rule") or "").startswith("!")]
    first = refused[0]
    assert "no c·B^a·S^b" in first.attr("shape_rule")
    with pytest.raises(ChakraError, match=rf"node {first.id} \({first.attr('op')}\) has no shape rule \(\d+ other"):
        rescale(base.trace, seq=16)


def test_op_sequence_that_follows_the_batch_is_refused():
    with pytest.raises(CaptureError, match="op sequence depends on the batch or sequence length"):
        capture(toy, {"branch": True}, batch=4, seq=8, shape_rules=True)


def test_traces_without_rules_are_refused(gpt):
    plain = capture(gpt, TINY, batch=2, seq=8, optimizer=None)
    with pytest.raises(ChakraError, match="no shape rules; capture it again with .*--shape-rules"):
        rescale(plain.trace, seq=16)
    b = TraceBuilder()
    b.add("x")
    with pytest.raises(ChakraError, match="not a master trace"):
        rescale(b.build(), seq=16)


def test_size_one_targets_are_refused(tiny):
    with pytest.raises(ChakraError, match="a batch of 1 from a capture at batch 4"):
        rescale(tiny.trace, batch=1)
    with pytest.raises(ChakraError, match="positive integer"):
        rescale(tiny.trace, seq=0)


@pytest.mark.timeout(120)
def test_cli_capture_transform_parallelize(tmp_path, capsys):
    master, out = tmp_path / "m.et", tmp_path / "m.b8s16.et"
    cfg = json.dumps(TINY)
    assert (
        main(
            [
                "capture",
                f"{GPT}:build",
                "--config",
                cfg,
                "--batch",
                "4",
                "--seq",
                "8",
                "--shape-rules",
                "-o",
                str(master),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["shape_rules"]["without_rule"] == 0
    assert main(["transform", str(master), "--batch", "8", "--seq", "16", "-o", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["steps"] == ["rescaled to batch 8, seq 16"] and d["files"] == 1 and out.is_file()
    assert _about(read_trace(out))["batch"] == 8
    assert main(["parallelize", str(out), "--tp", "2", "--pp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"] == 4
    assert main(["transform", str(master), "--seq", "16", "-o", str(tmp_path / "p")]) == 0  # a prefix: p.0.et
    assert (tmp_path / "p.0.et").is_file()
    capsys.readouterr()
    plain = tmp_path / "plain.et"
    assert main(["capture", f"{GPT}:build", "--config", cfg, "--batch", "2", "--seq", "8", "-o", str(plain)]) == 0
    capsys.readouterr()
    assert main(["transform", str(plain), "--seq", "16", "-o", str(tmp_path / "x.et")]) == 2
    assert "--shape-rules" in capsys.readouterr().err
