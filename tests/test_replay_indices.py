"""Integer index tensors of traces without `tensor_range` (schema 1.1.0 and older): filled
within the dimension they index, in memory of their own (issue 14: a GPT-2 trace crashed the
replay's warm-up with `IndexError: index out of range in self` from aten::embedding)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from chakra_trace.replay import _standalone as rt  # noqa: E402
from chakra_trace.replay import operators  # noqa: E402
from chakra_trace.replay.indices import bound_indices  # noqa: E402
from chakra_trace.replay.operators import HostReplay  # noqa: E402

GPT2 = Path(__file__).parent / "data" / "replay" / "gpt2_like_1.1.0.et.json.gz"
WILD = [0, 10**6]  # a recorded range far outside any dimension here


def T(shape, dtype="float32", rng=None):
    """A plan tensor spec on a storage of its own (ids are only names here)."""
    T.n = getattr(T, "n", 0) + 1
    stride = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        stride[k] = stride[k + 1] * max(shape[k + 1], 1)
    return {"t": [str(T.n), list(shape), stride, 0, dtype, rng, False]}


L = "int64"
CASES = [
    (
        "aten::embedding.default",
        [
            ("weight", T([10, 4])),
            ("indices", T([3, 5], L, WILD)),
            ("padding_idx", -1),
            ("scale_grad_by_freq", False),
            ("sparse", False),
        ],
    ),
    (
        "aten::embedding_dense_backward.default",
        [
            ("grad_output", T([3, 5, 4])),
            ("indices", T([3, 5], L, WILD)),
            ("num_weights", 10),
            ("padding_idx", -1),
            ("scale_grad_by_freq", False),
        ],
    ),
    *[
        (
            "aten::_embedding_bag.default",
            [
                ("weight", T([10, 4])),
                ("indices", T([20], L, WILD)),
                ("offsets", T([5], L, WILD)),
                ("scale_grad_by_freq", False),
                ("mode", mode),
                ("sparse", False),
                ("per_sample_weights", None),
                ("include_last_offset", last),
                ("padding_idx", -1),
            ],
        )
        for mode in (0, 1, 2)
        for last in (False, True)
    ],
    (
        "aten::_embedding_bag_dense_backward.default",
        [
            ("grad", T([4, 8])),
            ("indices", T([20], L, WILD)),
            ("offset2bag", T([20], L, WILD)),
            ("bag_size", T([4], L, WILD)),
            ("maximum_indices", T([4, 8], L, WILD)),
            ("num_weights", 10),
            ("scale_grad_by_freq", False),
            ("mode", 1),
            ("per_sample_weights", None),
            ("padding_idx", -1),
        ],
    ),
    ("aten::index_select.default", [("self", T([7, 3])), ("dim", 0), ("index", T([12], L, WILD))]),
    (
        "aten::index_select_backward.default",
        [("grad", T([12, 3])), ("self_sizes", [7, 3]), ("dim", 0), ("index", T([12], L, WILD))],
    ),
    ("aten::gather.default", [("self", T([4, 6])), ("dim", -1), ("index", T([4, 9], L, WILD))]),
    ("aten::scatter_add.default", [("self", T([4, 6])), ("dim", 1), ("index", T([4, 3], L, WILD)), ("src", T([4, 3]))]),
    ("aten::index_add.default", [("self", T([6, 2])), ("dim", 0), ("index", T([3], L, WILD)), ("source", T([3, 2]))]),
    ("aten::index.Tensor", [("self", T([5, 6])), ("indices", [T([3], L, WILD), T([3], L, WILD)])]),
    (
        "aten::index_put_.default",
        [("self", T([5, 6])), ("indices", [T([4], L, WILD)]), ("values", T([4, 6])), ("accumulate", True)],
    ),
    ("aten::take.default", [("self", T([3, 4])), ("index", T([10], L, WILD))]),
    ("aten::one_hot.default", [("self", T([8], L, WILD)), ("num_classes", 5)]),
    (
        "aten::nll_loss_forward.default",
        [("self", T([8, 5])), ("target", T([8], L, WILD)), ("weight", None), ("reduction", 1), ("ignore_index", -100)],
    ),
    (
        "aten::nll_loss2d_forward.default",
        [
            ("self", T([2, 5, 3, 3])),
            ("target", T([2, 3, 3], L, WILD)),
            ("weight", None),
            ("reduction", 1),
            ("ignore_index", -100),
        ],
    ),
    (
        "aten::cross_entropy_loss.default",
        [
            ("self", T([8, 5])),
            ("target", T([8], L, WILD)),
            ("weight", None),
            ("reduction", 1),
            ("ignore_index", -100),
            ("label_smoothing", 0.0),
        ],
    ),
    (
        "aten::multi_margin_loss.default",
        [
            ("self", T([8, 5])),
            ("target", T([8], L, WILD)),
            ("p", 1),
            ("margin", 1.0),
            ("weight", None),
            ("reduction", 1),
        ],
    ),
    (
        "aten::max_unpool2d.default",
        [("self", T([1, 1, 2, 2])), ("indices", T([1, 1, 2, 2], L, WILD)), ("output_size", [4, 4])],
    ),
    (
        "aten::max_pool2d_with_indices_backward.default",
        [
            ("grad_output", T([1, 1, 2, 2])),
            ("self", T([1, 1, 4, 4])),
            ("kernel_size", [2, 2]),
            ("stride", [2, 2]),
            ("padding", [0, 0]),
            ("dilation", [1, 1]),
            ("ceil_mode", False),
            ("indices", T([1, 1, 2, 2], L, WILD)),
        ],
    ),
]

# what each case's index arguments must stay below (from the inputs above); some ops (the
# embedding backwards) do not check, and an index past them writes outside the tensor
EXPECT = {
    "aten::embedding.default": {"indices": 10},
    "aten::embedding_dense_backward.default": {"indices": 10},
    "aten::_embedding_bag.default": {"indices": 10, "offsets": 21},
    "aten::_embedding_bag_dense_backward.default": {"indices": 10, "offset2bag": 4, "maximum_indices": 10},
    "aten::index_select.default": {"index": 7},
    "aten::index_select_backward.default": {"index": 7},
    "aten::gather.default": {"index": 6},
    "aten::scatter_add.default": {"index": 6},
    "aten::index_add.default": {"index": 6},
    "aten::index.Tensor": {"indices": [5, 6]},  # (one bound per indexed dim)
    "aten::index_put_.default": {"indices": 5},
    "aten::take.default": {"index": 12},
    "aten::one_hot.default": {"self": 5},
    "aten::nll_loss_forward.default": {"target": 5},
    "aten::nll_loss2d_forward.default": {"target": 5},
    "aten::cross_entropy_loss.default": {"target": 5},
    "aten::multi_margin_loss.default": {"target": 5},
    "aten::max_unpool2d.default": {"indices": 16},
    "aten::max_pool2d_with_indices_backward.default": {"indices": 16},
}


@pytest.mark.parametrize("name,named", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_index_roles_from_the_schema_make_valid_calls(name, named):
    """Every index argument gets values within what it indexes, read from the op's other inputs
    (not the wild recorded range), and the op accepts them, call after call."""
    named = json.loads(json.dumps(dict(named)))  # (bound_indices edits the specs)
    schema = torch._C.parse_schema(str(rt.resolve(name)._schema))
    fn = rt.resolve(name)

    def call(specs):
        storages = {}  # a storage of its own for every recorded tensor, as make_storages gives
        for v in specs.values():
            for s in v if isinstance(v, list) else [v]:
                if isinstance(s, dict) and "t" in s:
                    storages[s["t"][0]] = torch.zeros(8 * max(1, torch.Size(s["t"][1]).numel()), dtype=torch.uint8)
        args, kwargs = [], {}
        for arg in schema.arguments:
            if arg.name in specs:
                v = rt.value(specs[arg.name], storages, "cpu") if specs[arg.name] is not None else None
                (kwargs.__setitem__(arg.name, v) if arg.kwarg_only else args.append(v))
        return fn(*args, **kwargs)

    bound_indices(name, named)
    torch.manual_seed(0)
    for arg, below in EXPECT[name].items():
        specs = named[arg] if isinstance(named[arg], list) else [named[arg]]
        for spec, lim in zip(specs, below if isinstance(below, list) else [below] * len(specs)):
            v = rt.value(spec, {}, "cpu")
            assert v.numel() and 0 <= int(v.min()) and int(v.max()) < lim, (arg, v)
            assert int(v.max()) >= lim // 2 or v.numel() < 4, (arg, v)  # spread over the dim, not zeros
    for _ in range(3):
        call(named)
    ints = [
        s
        for v in named.values()
        for s in (v if isinstance(v, list) else [v])
        if isinstance(s, dict) and "t" in s and s["t"][4] == L
    ]
    assert all(s["t"][6] for s in ints)  # every index tensor has memory of its own


def test_offsets_are_non_decreasing_and_close_the_bags():
    named = {"weight": T([10, 4]), "indices": T([7], L), "offsets": T([4], L), "include_last_offset": True}
    bound_indices("aten::embedding_bag.padding_idx", named)
    off = rt.value(named["offsets"], {}, "cpu").tolist()
    assert off == [0, 2, 4, 7]  # last one = len(indices): include_last_offset's closing offset
    named = {"weight": T([10, 4]), "indices": T([7], L), "offsets": T([4], L), "include_last_offset": False}
    bound_indices("aten::embedding_bag.padding_idx", named)
    assert rt.value(named["offsets"], {}, "cpu").tolist() == [0, 1, 3, 5]


def test_a_recorded_range_within_bounds_is_kept():
    named = {"weight": T([100, 4]), "indices": T([50], L, [3, 9])}
    bound_indices("aten::embedding.default", named)
    assert named["indices"]["t"][5] == [3, 9]
    named = {"weight": T([100, 4]), "indices": T([50], L, [90, 500])}
    bound_indices("aten::embedding.default", named)
    assert named["indices"]["t"][5] == [90, 99]


def _aliased(tmp_path) -> Path:
    """The GPT-2-like trace (no tensor_range, schema 1.1.0) with its token and position ids on the
    storage of a parameter AdamW updates in place: what storage ids by data pointer give on a GPU,
    whose caching allocator reuses a freed block at once."""
    d = json.loads(gzip.open(GPT2, "rt").read())
    assert d["schema"].startswith("1.1.0")
    assert not any(a["name"] == "tensor_range" for n in d["nodes"] for a in n.get("attrs", []))
    target = next(
        n["inputs"]["values"][0][1]
        for n in d["nodes"]
        if n["name"] in ("aten::add_", "aten::mul_", "aten::lerp_")
        and n["inputs"]["types"][0] == "Tensor(float)"
        and n["inputs"]["values"][0][3] >= 128
    )
    emb = [n for n in d["nodes"] if n["name"] == "aten::embedding"]
    assert len(emb) == 4  # token and position lookups, two recorded steps
    for n in emb:
        n["inputs"]["values"][1][1] = target
    out = tmp_path / "gpt2.et.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(d, f)
    return out


def test_gpt2_trace_without_ranges_replays(tmp_path, monkeypatch):
    """The reported bug, reproduced: without index roles the warm-up's embedding reads the
    optimizer's floats as token ids (IndexError; now reported, the rest replays); with them
    every op replays, pass after pass."""
    trace = _aliased(tmp_path)
    rep = HostReplay(trace)
    assert rep.coverage.share == 1.0 and rep.coverage.total > 900
    for _ in range(3):
        rep.run_step()
    emb = [op for op in rep.plan["ops"] if op["op"] == "aten::embedding.default"]
    assert sorted({tuple(op["args"][1]["t"][5]) for op in emb}) == [(0, 63), (0, 502)]  # wpe rows, wte rows

    monkeypatch.setattr(operators, "bound_indices", lambda name, named: None)
    old = HostReplay(trace)
    for _ in range(3):
        old.run_step()  # (a failing op is left out, the rest goes on)
    why = {o.reason for o in old.coverage.outcomes if o.status == "failed"}
    assert why == {"warm-up: IndexError: index out of range in self"}
    assert {o.name for o in old.coverage.outcomes if o.status == "failed"} == {"aten::embedding"}
