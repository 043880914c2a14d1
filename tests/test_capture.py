"""`chakra capture`: one training step captured without its math, checked against a recording.

The corpus recorded the DDP job's TinyLM (benchmarks/corpus/jobs/_common.py) step by step on CPU
(tests/data/corpus/ddp). The capture of the same model, batch and sequence (no DDP) must run the
same aten ops, phase by phase, with the same shapes, dtypes, FLOPs and bytes, apart from the
differences named in `recorded_ops` and `normalize` (each with its cause).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed; capturing needs it")
pytestmark = pytest.mark.torch

from chakra_trace.capture import CaptureError, capture, load_build  # noqa: E402
from chakra_trace.capture.cost import recorded_cost  # noqa: E402
from chakra_trace.cli import main  # noqa: E402
from chakra_trace.io.et import read_trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "tests" / "data" / "corpus" / "ddp" / "rank0.et.json.gz"
GPT2_RECORDING = ROOT / "tests" / "data" / "corpus" / "gpt2" / "rank0.et.json.gz"
JOBS = ROOT / "benchmarks" / "corpus" / "jobs"
GPT = ROOT / "examples" / "models" / "gpt.py"

# Recorded ops that DDP adds (the capture has no process group): its gradient buckets' all-reduce,
# the division of each gradient by the world size, copies between buckets and grads, the
# broadcast of the buffers at each forward.
DDP_SCOPES = ("c10d::", "gloo:", "reducer", "flatten_dense_tensors")


def tiny_lm():
    """(model, inputs, loss) of the corpus's TinyLM, the model the DDP job recorded."""
    sys.path.insert(0, str(JOBS))
    try:
        import _common
    finally:
        sys.path.remove(str(JOBS))

    def inputs(batch: int, seq: int):
        tokens = torch.randint(0, _common.VOCAB, (batch, seq + 1))
        return (tokens[:, :-1],), tokens[:, 1:]

    return _common.TinyLM(), inputs, _common.lm_loss


@pytest.fixture(scope="module")
def tiny():
    return capture(tiny_lm, batch=8, seq=32)  # _common.batch(): 8 sequences of SEQ = 32 tokens


def _attr(node: dict, name: str):
    return next((a["value"] for a in node["attrs"] if a["name"] == name), None)


def recorded_ops(path: Path = RECORDING, step: str = "ProfilerStep#2") -> tuple[list, Counter]:
    """The ops of one recorded step at the level a dispatch mode sees them, with their phase:
    (phase, op, node, whether a direct child of the step) for each, and a count of the DDP ops
    left out by kind. The host trace nests each op's callees under it; composite ops
    (CompositeImplicitAutograd, e.g. aten::linear) decompose before dispatch, so their callees
    are taken instead. `torch.tensor(data)` fills a real tensor (`empty`, `detach_`) before the
    dispatcher gets it (`lift_fresh`): those are left out too."""
    nodes = json.loads(gzip.decompress(path.read_bytes()))["nodes"]
    children: dict[int, list] = {}
    for n in nodes:
        children.setdefault(n["ctrl_deps"], []).append(n)
    (root,) = [n for n in nodes if n["name"] == step]
    ops: list = []
    ddp: Counter = Counter()

    def walk(n: dict, phase: str, parents: tuple[str, ...]) -> None:
        name = n["name"]
        if name.startswith("autograd::engine"):
            phase = "backward"
        elif name.startswith("Optimizer.step"):
            phase = "optimizer"
        if name.startswith("aten::"):
            op = _attr(n, "op_schema").split("(")[0]
            in_ddp = any(s in p for p in parents + (name,) for s in DDP_SCOPES)
            # DDP's buffer broadcast copies into each buffer right under DDP's forward; its reducer
            # points gradients at their slices of the flat buckets (as_strided called by no aten op)
            if (op == "aten::copy_" and parents[-1] == "DistributedDataParallel.forward") or (
                op == "aten::as_strided" and not parents[-1].startswith("aten::")
            ):
                in_ddp = True
            if in_ddp:
                ddp[op] += 1
                return
            if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd"):
                ops.append((phase, op, n, parents[-1] == step))
                return
        kids = children.get(n["id"], [])
        skip = _from_data(kids)
        for k in kids:
            if k["id"] not in skip:
                walk(k, phase, parents + (name,))

    walk(root, "forward", ())
    return ops, ddp


def _from_data(siblings: list) -> set[int]:
    """Ids of the ops around each `aten::lift_fresh` that build a tensor from Python data:
    the `aten::empty` (and `aten::to`) just before it, the `aten::detach_` just after."""
    out: set[int] = set()
    for i, n in enumerate(siblings):
        if n["name"] != "aten::lift_fresh":
            continue
        j = i - 1
        while j >= 0 and siblings[j]["name"] in ("aten::to", "aten::empty"):
            out.add(siblings[j]["id"])
            if siblings[j]["name"] == "aten::empty":
                break
            j -= 1
        if i + 1 < len(siblings) and siblings[i + 1]["name"] == "aten::detach_":
            out.add(siblings[i + 1]["id"])
    return out


def _tensors(shapes, types) -> tuple:
    """(shape, dtype) of each tensor, those in lists included (a list result is one recorded
    output, several captured ones). An undefined optional tensor (attn_mask=None) is recorded
    as "Tensor(nullptr ...)": no data."""
    out = []
    for s, t in zip(shapes, types):
        if t.startswith("GenericList[") and "Tensor(" in t:
            out += _tensors(s, [x.strip() for x in t[len("GenericList[") : -1].split(",")])
        elif t.startswith("Tensor(") and "nullptr" not in t:
            out.append((json.dumps(s), t))
    return tuple(out)


def normalize(phase: str, op: str, top_level: bool = False) -> tuple[str, str]:
    """The same op as the capture names it. Eager adds a linear's bias and accumulates gradients
    in place (`add_`); PyTorch takes the out-of-place `add` for tensor subclasses (FakeTensor):
    same shapes, FLOPs and bytes. The backward's seed gradient (`ones_like`) is made before the
    autograd engine starts, outside its scope in the recording; the capture counts it in backward."""
    if op == "aten::add_.Tensor" and phase != "optimizer":
        return phase, "aten::add.Tensor"
    if op == "aten::_reshape_alias":  # eager's reshape of a view: FakeTensor takes `view` (both views)
        return phase, "aten::view"
    if op == "aten::ones_like" and top_level:
        return "backward", op
    return phase, op


def compare(result, path: Path = RECORDING) -> tuple[Counter, Counter, Counter]:
    """(only in the recording, only in the capture, DDP ops left out): ops keyed by phase, name,
    tensor shapes and dtypes, FLOPs and bytes (the recorded ones costed from their recorded shapes
    by the capture's own rules)."""
    ops, ddp = recorded_ops(path)
    recorded: Counter = Counter()
    for phase, op, n, top in ops:
        i, o = n["inputs"], n["outputs"]
        flops, nbytes, _ = recorded_cost(op, i["shapes"], i["types"], i["values"], o["shapes"], o["types"])
        key = (*normalize(phase, op, top), _tensors(i["shapes"], i["types"]), _tensors(o["shapes"], o["types"]))
        recorded[(*key, flops, nbytes)] += 1
    captured: Counter = Counter(
        (
            op.phase,
            op.name,
            _tensors(op.in_shapes, op.in_types),
            _tensors(op.out_shapes, op.out_types),
            op.flops,
            op.bytes,
        )
        for op in result.ops
    )
    # autograd detaches outputs it saves for backward when a tensor subclass runs (FakeTensor):
    # views, free; the recording's detaches (AccumulateGrad's) must be among the captured ones
    det_r = Counter(k for k in recorded.elements() if k[1] == "aten::detach")
    det_c = Counter(k for k in captured.elements() if k[1] == "aten::detach")
    assert all(k[4] == k[5] == 0 for k in det_c)
    only_r = det_r - det_c
    only_r += Counter({k: v for k, v in recorded.items() if k[1] != "aten::detach"}) - captured
    only_c = Counter({k: v for k, v in captured.items() if k[1] != "aten::detach"}) - recorded
    return only_r, only_c, ddp


def test_capture_matches_recorded_step(tiny):
    only_recorded, only_captured, ddp = compare(tiny)
    assert only_recorded == Counter() and only_captured == Counter()
    # what was left out is DDP's alone
    assert set(ddp) <= {
        "aten::mul.out",
        "aten::copy_",
        "aten::as_strided",
        "aten::view",
        "aten::slice.Tensor",
        "aten::narrow",
        "aten::flatten_dense_tensors",
        "aten::unflatten_dense_tensors",
    }
    assert ddp["aten::mul.out"] == sum(1 for p in tiny_lm()[0].parameters())  # grad /= world, one per parameter
    # the comparison has teeth: it covers every phase, matmuls and attention included
    phases = Counter(op.phase for op in tiny.ops)
    assert phases["forward"] > 50 and phases["backward"] > 100
    assert phases["optimizer"] == 10 * 28  # single-tensor AdamW: 10 ops a parameter
    assert {"aten::mm", "aten::addmm", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"} <= {
        op.name for op in tiny.ops
    }


def gpt2():
    """The corpus's GPT-2 job (benchmarks/corpus/jobs/gpt2.py): transformers' GPT2LMHeadModel."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg)

    def inputs(batch: int, seq: int):
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq))
        return {"input_ids": tokens, "labels": tokens}, None

    return model, inputs, lambda out, _: out.loss


def test_capture_matches_recorded_gpt2_step():
    """A model as users write it (transformers' attention, Conv1D, tied embeddings, dropout, the
    loss inside the model), one rank: the same ops, shapes, FLOPs and bytes as recorded."""
    r = capture(gpt2, batch=4, seq=32)  # gpt2.py: 4 sequences of SEQ = 32 tokens
    only_recorded, only_captured, ddp = compare(r, GPT2_RECORDING)
    assert only_recorded == Counter() and only_captured == Counter() and not ddp
    assert Counter(op.phase for op in r.ops)["optimizer"] > 0


def test_comparison_fails_on_a_wrong_capture():
    """Another batch size changes shapes, FLOPs and bytes: the comparison sees it."""
    only_recorded, only_captured, _ = compare(capture(tiny_lm, batch=4, seq=32, optimizer="sgd"))
    assert only_recorded and only_captured
    assert {k[1] for k in only_captured} >= {"aten::mm", "aten::addmm"}


def test_flops_sources_and_phase_totals(tiny):
    d = tiny.to_dict()
    assert d["params"] == sum(p.numel() for p in tiny_lm()[0].parameters())
    by = d["flops_by_phase"]
    # backward does about twice the forward's matmul work
    assert 1.7 < by["backward"] / by["forward"] < 2.3
    mm = [op for op in tiny.ops if op.name in ("aten::mm", "aten::addmm")]
    assert mm and all(op.flops_source == "torch" for op in mm)
    # addmm's FLOPs: torch's formula, 2·m·n·k (the bias add is not counted)
    op = next(op for op in tiny.ops if op.name == "aten::addmm")
    (m, k), (_, n) = op.in_shapes[1], op.in_shapes[2]
    assert op.flops == 2 * m * n * k
    views = [op for op in tiny.ops if op.view]
    assert views and all(op.flops == op.bytes == 0 for op in views)


def test_dependencies_follow_the_data(tiny):
    ops = {op.id: op for op in tiny.ops}
    order = {op.id: i for i, op in enumerate(tiny.ops)}
    for op in tiny.ops:
        assert all(order[d] < order[op.id] for d in op.deps)
    # the first matmul reads the embedding sum; the loss's backward seeds from the loss
    first_mm = next(op for op in tiny.ops if op.name == "aten::mm")
    assert first_mm.deps and all(ops[d].phase == "forward" for d in first_mm.deps)
    # every optimizer update of a weight waits for its gradient (made in backward)
    upd = [op for op in tiny.ops if op.phase == "optimizer" and op.name == "aten::addcdiv_"]
    assert len(upd) == 28

    def ancestors(i: int) -> set[str]:
        seen, todo = set(), [i]
        while todo:
            j = todo.pop()
            for d in ops[j].deps:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return {ops[j].phase for j in seen}

    assert all("backward" in ancestors(op.id) for op in upd)
    # views are never producers: no op depends on one
    view_ids = {op.id for op in tiny.ops if op.view}
    assert not any(set(op.deps) & view_ids for op in tiny.ops)


def test_module_paths(tiny):
    fwd = {op.module for op in tiny.ops if op.phase == "forward"}
    assert {"embed", "encoder.layers.0.self_attn", "encoder.layers.1.linear1", "head"} <= fwd
    bwd = Counter(op.module for op in tiny.ops if op.phase == "backward")
    assert bwd["head"] and bwd["encoder.layers.0.self_attn"] and bwd["encoder.layers.1.norm2"]
    opt = Counter(op.module for op in tiny.ops if op.phase == "optimizer")
    assert opt["head"] == 2 * 10  # weight and bias: 10 ops each (single-tensor AdamW)
    assert "optimizer" not in opt  # every update is its parameter's module's
    loss = Counter((op.phase, op.name) for op in tiny.ops if op.module == "loss")
    assert loss[("forward", "aten::nll_loss_forward")] == loss[("backward", "aten::nll_loss_backward")] == 1
    assert loss[("backward", "aten::ones_like")] == 1  # the seed gradient


def test_trace_is_a_master_trace(tiny, tmp_path):
    from chakra_trace.io.et import write_trace
    from chakra_trace.validate import validate_trace

    t = tiny.trace
    assert len(t) == len(tiny.ops) and (t.types == 4).all() and (t.duration == 0).all()
    assert int(t.num_ops.sum()) == tiny.flops
    path = tmp_path / "tiny.master.et"
    write_trace(t, path)
    back = read_trace(path)
    n = back.node(int(next(i for i, op in enumerate(tiny.ops) if op.name == "aten::addmm")))
    assert n.name == "aten::addmm" and n.attr("phase") == "forward" and n.attr("flops_source") == "torch"
    assert json.loads(n.inputs.shapes)[1] == [256, 64]
    assert validate_trace(back).ok
    meta = {a.name: a.string_val for a in back.metadata.attr}
    assert meta["schema"] == "chakra-trace capture 1"
    about = json.loads(meta["capture"])
    # per trainable parameter: name, numel, itemsize, the backward op that wrote its gradient, and
    # its place in the order the gradients were accumulated (what DDP's bucketing follows)
    parameters = about.pop("parameters")
    backward = {op.id for op in tiny.ops if op.phase == "backward"}
    assert sum(p[1] for p in parameters) == tiny.params and {p[2] for p in parameters} == {4}
    assert all(p[3] in backward for p in parameters)
    assert sorted(p[4] for p in parameters) == list(range(len(parameters)))
    assert parameters[0][0] == "pos" and parameters[-1][0] == "head.bias"
    assert about == {
        "config": {},
        "batch": 8,
        "seq": 32,
        "optimizer": "adamw",
        "dtype": None,
        "params": tiny.params,
    }


def test_fold_views_keeps_every_edge():
    r = capture(tiny_lm, batch=2, seq=8, fold_views=True, optimizer=None)
    assert r.ops and not any(op.view for op in r.ops)
    ids = {op.id for op in r.ops}
    assert all(set(op.deps) <= ids for op in r.ops)
    assert {op.phase for op in r.ops} == {"forward", "backward"}


def test_gpt_grows_linearly_with_layers():
    build = load_build(f"{GPT}:build")
    cfg = dict(hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256)
    n = [len(capture(build, {**cfg, "layers": k}, batch=2, seq=16, optimizer=None).ops) for k in (1, 2, 3)]
    assert n[2] - n[1] == n[1] - n[0] > 0
    r = capture(build, {**cfg, "layers": 2}, batch=2, seq=16, dtype="bfloat16")
    assert {op.module.split(".")[0] for op in r.ops if op.phase == "forward"} >= {"embed", "layers", "lm_head"}
    assert any("c10::BFloat16" in t for op in r.ops for t in op.in_types)
    # the matmuls are the 6·N·tokens of the rule of thumb, exactly: 2 N T forward, 4 N T backward
    # (N: the linear layers' weights; every input gradient is needed, the embedding's weight learns)
    gpt = load_build(f"{GPT}:build")(**{**cfg, "layers": 2})[0]
    n_linear = sum(m.weight.numel() for m in gpt.modules() if isinstance(m, torch.nn.Linear))
    mm = Counter()
    for op in r.ops:
        if op.name == "aten::mm":
            mm[op.phase] += op.flops
    tokens = 2 * 16
    assert mm["forward"] == 2 * n_linear * tokens and mm["backward"] == 4 * n_linear * tokens
    # attention by torch's SDPA formulas: 4·b·h·s²·d forward (causal masking not discounted), 2.5× that backward
    fwd = [op.flops for op in r.ops if op.name == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    bwd = [op.flops for op in r.ops if op.name == "aten::_scaled_dot_product_flash_attention_for_cpu_backward"]
    assert fwd == [4 * 2 * 4 * 16 * 16 * 16] * 2 and bwd == [f * 5 // 2 for f in fwd]


def test_foreach_optimizer():
    """AdamW's foreach form: one op per update over every tensor, the optimizer's own; its weight
    decay writes the parameters, so it waits for the forward and backward ops that read them."""
    r = capture(tiny_lm, batch=2, seq=8, optimizer_options={"foreach": True})
    ops = [op for op in r.ops if op.phase == "optimizer" and op.name.startswith("aten::_foreach")]
    assert ops and all(op.module == "optimizer" for op in ops)
    by_id = {op.id: op for op in r.ops}
    decay = next(op for op in ops if op.name == "aten::_foreach_mul_.Scalar")
    assert {by_id[d].phase for d in decay.deps} == {"forward", "backward"}


def test_build_errors():
    with pytest.raises(CaptureError, match="must return"):
        capture(lambda: torch.nn.Linear(2, 2))
    with pytest.raises(CaptureError, match="optimizer"):
        capture(tiny_lm, optimizer="nope")
    with pytest.raises(Exception, match="no function"):
        load_build(f"{GPT}:nope")

    class Branchy(torch.nn.Module):  # control flow on a value: not capturable without data
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y[y > 0].sum() if y.sum() > 0 else y

    def branchy():
        return Branchy(), lambda b, s: ((torch.ones(b, 4),), None), lambda out, _: out.sum()

    with pytest.raises(CaptureError, match="tensor values"):
        capture(branchy)


def test_cli_capture_and_simulate(tmp_path, capsys):
    out = tmp_path / "gpt.master.et"
    cfg = json.dumps({"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256})
    rc = main(["capture", f"{GPT}:build", "--config", cfg, "--batch", "2", "--seq", "16", "-o", str(out), "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["nodes"] == len(read_trace(out)) and d["flops_by_phase"]["backward"] > d["flops_by_phase"]["forward"]
    rc = main(["simulate", str(out), "--device", "h100", "--json"])
    assert rc == 0
    sim = json.loads(capsys.readouterr().out)
    # one device runs the nodes one after another, each at its roofline time on the H100 preset
    from chakra_trace.schema.devices import device_spec

    h100 = device_spec("h100")
    t = read_trace(out)
    peak, bw = h100.peak_flops / 1e9, h100.mem_bw / 1e9  # per ns
    ops, size = t.num_ops.astype(float), t.tensor_size.astype(float)
    perf = [min(peak, bw * f / s) if s else peak for f, s in zip(ops, size)]
    expected = sum(f // p if f else s // bw for f, s, p in zip(ops, size, perf))
    assert sim["finish_ns"][0] == pytest.approx(expected, rel=1e-3)


def test_layers_import_no_torch_at_import_time():
    code = "import sys, chakra_trace.capture, chakra_trace.cli.capture; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cli_errors(capsys):
    assert main(["capture", f"{GPT}:build", "--config", "{not json"]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["capture", f"{GPT}:build", "--config", '{"layers": 1, "hidden": 30, "heads": 4}']) == 2
    assert "must divide" in capsys.readouterr().err
    assert main(["capture", "no/such/file.py:build"]) == 2
    assert "no such file" in capsys.readouterr().err
