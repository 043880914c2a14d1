"""A node's compute type comes from the ops folded into it: a backward node
(``autograd::engine::evaluate_function: ...Backward0``) records no tensor of its own, its children
do, and its FLOPs are theirs (`convert.dtypes.node_dtypes`).

Ground truth from the raw host trace in a few lines: the call tree by each node's parent link, an
op's type from its recorded tensor types (the first floating input, else the first input, else
the first output), a node's from its own type if floating, else the first floating type among
its descendants (lowest id: execution order), else its own, else its first typed descendant's."""

from __future__ import annotations

import gzip
import json
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.schema.codec import extra_attr_strings
from conftest import DATA, SHARED
from test_pytorch_convert import node, write_et

_TYPES = {"float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16"}
_TYPES |= {"long int": "int64", "int": "int32", "bool": "bool", "unsigned char": "uint8", "signed char": "int8"}
_FLOAT = {"fp32", "fp64", "fp16", "bf16"}
_BACKWARD = "autograd::engine::evaluate_function: "


def _tensor_types(io: dict) -> list[str]:
    out = []
    for t in io.get("types") or []:
        if isinstance(t, str) and t.startswith("Tensor(") and t[7:-1] in _TYPES:
            out.append(_TYPES[t[7:-1]])
    return out


def _own(n: dict) -> str | None:
    ins, outs = _tensor_types(n.get("inputs") or {}), _tensor_types(n.get("outputs") or {})
    return next((t for t in ins if t in _FLOAT), None) or (ins[0] if ins else None) or (outs[0] if outs else None)


def _truth(path: Path) -> dict[int, tuple[str, str | None]]:
    """{rf_id: (name, the type the rule gives it)} of every node of the raw file."""
    nodes = json.loads(gzip.decompress(path.read_bytes()))["nodes"]
    by_id = {n["id"]: n for n in nodes}
    kids = defaultdict(list)
    for n in nodes:
        kids[n.get("ctrl_deps", n.get("parent"))].append(n["id"])

    def subtree(i):  # descendants, lowest id first
        out, todo = [], list(kids[i])
        while todo:
            j = todo.pop()
            out.append(j)
            todo += kids[j]
        return sorted(out)

    out = {}
    for n in nodes:
        rf = next((a["value"] for a in n.get("attrs", []) if a["name"] == "rf_id"), None)
        if rf is None or not n["name"].startswith(_BACKWARD):
            continue
        assert rf not in out  # (the backward nodes' rf_ids are unique in these files)
        own = _own(n)
        below = [t for t in (_own(by_id[j]) for j in subtree(n["id"])) if t]
        pick = (own if own in _FLOAT else None) or next((t for t in below if t in _FLOAT), None)
        out[rf] = (n["name"], pick or own or (below[0] if below else None))
    return out


def _converted(path: Path) -> dict[int, tuple[str, str | None]]:
    """{rf_id: (name, dtype)} of the converted job's costed nodes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = convert_pytorch(path)[0]
    _, costed = t.attr_array("num_ops", np.int64)
    rf, has_rf = t.attr_array("rf_id", np.int64)
    codes, names, has = extra_attr_strings(t, "dtype")
    return {
        int(rf[i]): (t.names[t.name_codes[i]], names[codes[i]] if has[i] else None)
        for i in np.flatnonzero(costed & has_rf).tolist()
    }


_FILES = [SHARED / "param" / "resnet_et.json.gz", DATA / "corpus" / "gpt2" / "rank0.et.json.gz"]


@pytest.mark.parametrize("path", _FILES, ids=lambda p: p.name.split(".")[0] + "-" + p.parent.name)
def test_backward_nodes_take_the_type_of_their_folded_ops(path):
    if not path.is_file():
        pytest.skip(f"needs {path}: ../shared/traces beside the checkout (CI has it)")
    truth, got = _truth(path), _converted(path)
    backward = {rf: v for rf, v in got.items() if v[0].startswith(_BACKWARD)}
    assert len(backward) > 100
    typed = untyped = 0
    for rf, (name, dtype) in backward.items():
        assert truth[rf][0] == name
        assert dtype == truth[rf][1], (rf, name)  # (None where nothing below it has a type)
        typed += dtype is not None
        untyped += dtype is None
    assert typed > 100


def test_first_floating_type_below_and_none_without_types(tmp_path):
    """A hand-made host trace: a backward node takes the first floating type below it (an int64
    op before it does not decide), one with no typed tensor below it has no dtype, and an op
    with its own floating type keeps it."""
    bf16, long_, f32 = "Tensor(c10::BFloat16)", "Tensor(long int)", "Tensor(float)"

    def t(k, numel, size):  # a tensor argument's value: (id, storage, offset, numel, itemsize, device)
        return [k, k, 0, numel, size, "cuda:0"]

    nodes = [
        node(2, "[pytorch|profiler|execution_trace|thread]", 1),
        node(3, "ProfilerStep#1", 2),
        node(4, _BACKWARD + "AddmmBackward0", 3),
        node(5, "AddmmBackward0", 4, shapes=[[4, 8]], types=[bf16], values=[t(20, 32, 2)]),
        node(6, "aten::add_", 5, shapes=[[], []], types=[long_, "Int"], values=[t(21, 1, 8), 1]),
        node(7, "aten::mm", 5, shapes=[[4, 8], [8, 16]], types=[bf16, bf16], values=[t(20, 32, 2), t(22, 128, 2)]),
        node(8, _BACKWARD + "FooBackward0", 3),
        node(9, "aten::empty", 8, shapes=[[2], []], types=["GenericList[Int]", "Int"], values=[[2], 0]),
        node(10, "aten::mm", 3, shapes=[[4, 8], [8, 16]], types=[f32, f32], values=[t(23, 32, 4), t(24, 128, 4)]),
        node(1, "[pytorch|profiler|execution_trace|process]", 1),
    ]
    path = tmp_path / "rank0.et.json.gz"
    write_et(path, nodes)
    got = _converted(path)
    assert got[4] == (_BACKWARD + "AddmmBackward0", "bf16")
    assert got[8] == (_BACKWARD + "FooBackward0", None)  # costed (0 FLOPs known), no type
    assert got[10] == ("aten::mm", "fp32")
    truth = _truth(path)
    assert {rf: v for rf, v in got.items() if rf in truth} == {rf: truth[rf] for rf in got if rf in truth}
