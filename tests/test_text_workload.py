"""ASTRA-sim 1.0 text workloads -> Chakra per-rank traces (convert/text.py, cli/convert_text.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chakra_trace import Attr, CollectiveType, NodeType, TraceFormatError, validate_workload
from chakra_trace.convert.text import (
    PARALLELISMS,
    TextWorkloadError,
    parallel_groups,
    parse_text_workload,
    read_text_workload,
    text_to_chakra,
)
from chakra_trace.errors import ChakraError

#: the project's own text workloads (tests/data/text/README.md: what each exercises)
TEXT = Path(__file__).parent / "data" / "text"
REAL = {
    "micro_allreduce.txt": ("MICRO", {}),
    "dlrm_hybrid.txt": ("HYBRID_DLRM", {}),
    "mlp_data_model.txt": ("HYBRID_DATA_MODEL", {"model_parallel_size": 2}),
    "transformer_fwd_in_bckwd.txt": ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", {}),
}
AR, A2A, AG, RS = (
    int(CollectiveType.ALL_REDUCE),
    int(CollectiveType.ALL_TO_ALL),
    int(CollectiveType.ALL_GATHER),
    int(CollectiveType.REDUCE_SCATTER),
)

# Three layers exercising every comm type and NONE: (fwd, ig, wg) comms per layer
#   L0: ALLGATHER 100 / ALLREDUCE 200 / ALLREDUCE 300
#   L1: NONE          / REDUCESCATTER 400 / ALLREDUCE 500
#   L2: ALLTOALL 600  / NONE          / NONE
LAYERS = """3
L0 -1 1000 ALLGATHER 100 2000 ALLREDUCE 200 3000 ALLREDUCE 300 10
L1 -1 1000 NONE 0 2000 REDUCESCATTER 400 3000 ALLREDUCE 500 0
L2 -1 1500 ALLTOALL 600 2500 NONE 0 3500 NONE 0 20
"""
HEADERS = {
    "DATA": "DATA",
    "MODEL": "MODEL",
    "HYBRID_DATA_MODEL": "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA": "HYBRID_MODEL_DATA",
    "HYBRID_DLRM": "HYBRID_DLRM 1",
    "HYBRID_DLRM_ENHANCED": "HYBRID_DLRM_ENHANCED 1",
    "MICRO": "MICRO",
    "HYBRID_TRANSFORMER": "HYBRID_TRANSFORMER\tmodel_parallel_NPU_group: 2",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 "
    "checkpoints: 1 0 checkpoint_initiates: 1 2",
}
NEEDS_MP = {"HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA"}


def small(kind: str, tmp_path: Path, layers: str = LAYERS) -> Path:
    p = tmp_path / f"{kind.lower()}.txt"
    p.write_text(HEADERS[kind] + "\n" + layers)
    return p


def convert(kind: str, tmp_path: Path, npus: int = 4, passes: int = 1, **kw):
    if kind in NEEDS_MP:
        kw.setdefault("model_parallel_size", 2)
    return text_to_chakra(small(kind, tmp_path), npus, passes, **kw)


def nodes(trace) -> list:
    return list(trace)


def summary(trace) -> list[tuple]:
    """(id, name, type, data deps, comm_type, comm_size, pg_name) per node."""
    return [
        (
            n.id,
            n.name,
            int(n.type),
            list(n.data_deps),
            n.attr(Attr.COMM_TYPE),
            n.attr(Attr.COMM_SIZE),
            n.attr(Attr.PG_NAME),
        )
        for n in trace
    ]


def deps_by_name(trace) -> dict[str, list[str]]:
    ns = nodes(trace)
    name = {n.id: n.name for n in ns}
    return {n.name: [name[d] for d in n.data_deps] for n in ns}


# --------------------------------------------------------------------------- parsing real files


def test_real_files_have_the_layouts_they_stand_for():
    """Each file keeps the layout it is there to exercise (tests/data/text/README.md)."""
    raw = {name: (TEXT / name).read_bytes() for name in REAL}
    micro = raw["micro_allreduce.txt"]
    assert micro.endswith(b"\r\n") and micro.count(b"\n") == micro.count(b"\r\n") and b"\t" not in micro
    assert b" -1 " in micro and b"  ALLREDUCE" in micro  # single spaces, and a double space
    dlrm = raw["dlrm_hybrid.txt"]
    assert dlrm.endswith(b"\r\n") and dlrm.count(b"\n") == dlrm.count(b"\r\n") and b" " not in dlrm
    assert dlrm.startswith(b"HYBRID_DLRM\t3\t\t") and b"\r\n8\t\t" in dlrm and b"\t\r\n" in dlrm[40:]
    mlp = raw["mlp_data_model.txt"]
    assert b"\r\n" in mlp and mlp.count(b"\n") == mlp.count(b"\r\n") and not mlp.endswith(b"\n")
    assert mlp.startswith(b"HYBRID_DATA_MODEL\t\t") and b" " not in mlp
    tr = raw["transformer_fwd_in_bckwd.txt"]
    assert b"\r" not in tr and not tr.endswith(b"\n") and b"\t\t" in tr and b" \n" in tr  # a trailing space


def test_real_files_parse():
    dlrm = read_text_workload(TEXT / "dlrm_hybrid.txt")  # CRLF line endings, tab separated, trailing tabs
    assert dlrm.parallelism == "HYBRID_DLRM" and dlrm.last_bottom_layer == 3 and dlrm.num_layers == 8
    emb = dlrm.layers[0]
    assert (emb.name, emb.reserved, emb.fwd_compute, emb.fwd_comm.type, emb.fwd_comm.size) == (
        "emb_lookup",
        -1,
        4200,
        "ALLTOALL",
        262144,
    )
    assert (emb.wg_comm.type, emb.wg_comm.size, emb.update_time, emb.line) == ("NONE", 0, 850, 3)
    assert emb.fwd_comm.collective == A2A and emb.wg_comm.collective is None
    inter = dlrm.layers[4]  # a trailing tab on its line
    assert (inter.name, inter.wg_compute, inter.wg_comm.type, inter.update_time, inter.line) == (
        "interact",
        0,
        "NONE",
        0,
        7,
    )
    assert [L.name for L in dlrm.layers[1:4]] == ["bot_mlp_0", "bot_mlp_1", "bot_mlp_2"]  # up to layer 3

    tr = read_text_workload(TEXT / "transformer_fwd_in_bckwd.txt")
    assert tr.model_parallel_size == 4 and tr.checkpoints == (1, 8) and tr.checkpoint_initiates == (14, 7)
    assert tr.num_layers == 16 and tr.layers[3].name == "attn_softmax_0"  # trailing space on that line
    assert tr.layers[3].update_time == 0 and tr.layers[3].line == 6
    assert (tr.layers[-1].name, tr.layers[-1].update_time) == ("lm_head", 12878)  # no newline at the end
    assert tr.recompute_ranges() == {7: range(1, 7), 14: range(8, 14)}

    micro = read_text_workload(TEXT / "micro_allreduce.txt")  # single spaces, one double
    assert micro.parallelism == "MICRO" and [L.wg_comm.size for L in micro.layers] == [26214400, 6291456]
    assert [(L.wg_comm.type, L.update_time) for L in micro.layers] == [("ALLREDUCE", 40), ("ALLREDUCE", 10)]

    mlp = read_text_workload(TEXT / "mlp_data_model.txt")  # no newline at the end
    assert mlp.num_layers == 5 and mlp.layers[-1].name == "mlp_out" and mlp.model_parallel_size is None
    assert (mlp.layers[-1].wg_comm.size, mlp.layers[-1].update_time) == (40960, 10)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_files_convert_and_validate(name):
    kind, kw = REAL[name]
    w = text_to_chakra(TEXT / name, 8, 2, **kw)
    assert w.ranks == list(range(8))
    assert read_text_workload(TEXT / name).parallelism == kind
    rep = validate_workload(w)
    assert rep.ok and not rep.issues, rep.render()
    for t in w.traces.values():
        assert t.ids.tolist() == list(range(len(t)))  # ids start at 0 in every file


def test_real_file_counts_by_hand():
    # dlrm_hybrid, 8 layers, last bottom layer 3, 2 passes. Per pass: 8 forward, 8 weight-grad and 7
    # input-grad computes (none for layer 0); the embedding's forward all-to-all, 6 weight-grad all-reduces
    # (the embedding's and the interaction's are NONE) and the embedding's backward all-to-all.
    t = text_to_chakra(TEXT / "dlrm_hybrid.txt", 4, 2)[0]
    assert t.node_type_counts() == {"COMP_NODE": 2 * 23, "COMM_COLL_NODE": 2 * 8}
    assert t.collectives() == {
        "ALL_REDUCE": {"count": 12, "bytes": 2 * (28672 + 525312 + 65792 + 206848 + 525312 + 1028)},
        "ALL_TO_ALL": {"count": 4, "bytes": 4 * 262144},
    }
    # HYBRID_TRANSFORMER_FWD_IN_BCKWD, 16 layers (tok_emb, 2 blocks of 7, lm_head): 16 fwd + 12 recomputed
    # + 16 ig + 16 wg computes per pass; collectives: 5 forward (tok_emb, attn_proj and mlp_fc2 of each
    # block), 4 in the recomputation (attn_proj and mlp_fc2 of each block), 5 input-grad (attn_qkv and
    # mlp_fc1 of each block, lm_head; layer 0's is NONE), 12 weight-grad (all but attn_score, attn_softmax)
    t = text_to_chakra(TEXT / "transformer_fwd_in_bckwd.txt", 8, 1)[0]
    assert t.node_type_counts() == {"COMP_NODE": 60, "COMM_COLL_NODE": 26}
    assert t.collectives() == {
        "ALL_REDUCE": {
            "count": 26,
            "bytes": (5 + 4 + 5) * 8388608 + 2 * 25755648 + 2 * (1572864 + 524288 + 2 * 2097152 + 8192),
        }
    }
    names = [n.name for n in t if "RECOMPUTE" in n.name and n.type == NodeType.COMP_NODE]
    assert len(names) == 12 and names[0] == "COMP_NODE_attn_qkv_1_FWD_RECOMPUTE"
    # layer 14 (ln_1) initiates first (backward runs last layer first): layers 8..13 again, then layer 7's: 1..6
    assert names[5] == "COMP_NODE_mlp_fc2_1_FWD_RECOMPUTE"  # the initiator itself is not recomputed
    assert names[6] == "COMP_NODE_attn_qkv_0_FWD_RECOMPUTE" and names[11] == "COMP_NODE_mlp_fc2_0_FWD_RECOMPUTE"


# --------------------------------------------------------------------------- every parallelism


@pytest.mark.parametrize("kind", PARALLELISMS)
def test_every_parallelism_converts_and_validates(kind, tmp_path):
    w = convert(kind, tmp_path, npus=4, passes=2)
    rep = validate_workload(w)
    assert rep.ok and not rep.issues, rep.render()
    # every rank runs the same graph: same node types, names, deps, collective types and sizes
    ref = w[0]
    for r in w.ranks[1:]:
        t = w[r]
        assert np.array_equal(t.types, ref.types) and np.array_equal(t.name_array, ref.name_array)
        assert np.array_equal(t.data, ref.data) and np.array_equal(t.comm_size, ref.comm_size)
        assert t.ids.tolist() == list(range(len(t)))
    # dependencies only point backwards (program order = id order)
    src, dst, _ = ref.dep_rows("data")
    assert (dst >= 0).all() and (dst < src).all()
    # collectives are accelerator ops with int64 comm_type/comm_size
    coll = ref.types == NodeType.COMM_COLL_NODE
    assert ref.has(Attr.COMM_TYPE)[coll].all() and ref.has(Attr.COMM_SIZE)[coll].all()
    assert (ref.has(Attr.IS_CPU_OP) & ~ref.is_cpu_op).all()


# expected per-rank (COMP, COLL) counts for one pass of the 3-layer example, worked out by hand
HAND_COUNTS = {
    "DATA": (3 + 3 + 2, 2),  # fwd, wg, ig (not layer 0); wg all-reduce of L0, L1
    "MICRO": (0, 2),  # the wg collectives only
    "MODEL": (9, 3),  # fwd L0 AG, fwd L2 A2A, ig L1 RS (layer 0's ig comm is not issued)
    "HYBRID_DATA_MODEL": (9, 5),  # + wg all-reduce of L0, L1
    "HYBRID_MODEL_DATA": (9, 5),
    "HYBRID_TRANSFORMER": (9, 6),  # + layer 0's ig all-reduce
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": (11, 7),  # + recompute of L0 (and its AG) and L1 before L2's ig
    "HYBRID_DLRM": (8, 4),  # fwd A2A of L2 (only ALLTOALL forward comms), wg AR L0 L1, L0's ig AR after L2's ig
    "HYBRID_DLRM_ENHANCED": (8, 4),
}


@pytest.mark.parametrize("kind", PARALLELISMS)
@pytest.mark.parametrize("passes", [1, 3])
def test_node_counts_by_hand(kind, passes, tmp_path):
    comp, coll = HAND_COUNTS[kind]
    t = convert(kind, tmp_path, npus=4, passes=passes)[0]
    want = {}
    if comp:
        want["COMP_NODE"] = comp * passes
    want["COMM_COLL_NODE"] = coll * passes
    assert t.node_type_counts() == want


def test_data_parallel_graph(tmp_path):
    t = convert("DATA", tmp_path, npus=2, passes=2)[0]
    s = summary(t)
    C, K = int(NodeType.COMP_NODE), int(NodeType.COMM_COLL_NODE)
    assert s[:11] == [
        (0, "COMP_NODE_L0_FWD", C, [], None, None, None),
        (1, "COMP_NODE_L1_FWD", C, [0], None, None, None),
        (2, "COMP_NODE_L2_FWD", C, [1], None, None, None),
        (3, "COMP_NODE_L2_BWD_WG", C, [2], None, None, None),  # L2's wg comm is NONE: no node
        (4, "COMP_NODE_L2_BWD_IG", C, [3], None, None, None),
        (5, "COMP_NODE_L1_BWD_WG", C, [4], None, None, None),
        (6, "COMM_COLL_NODE_L1_BWD_WG_ALLREDUCE", K, [5], AR, 500, None),  # all ranks: no pg_name
        (7, "COMP_NODE_L1_BWD_IG", C, [5], None, None, None),
        (8, "COMP_NODE_L0_BWD_WG", C, [7], None, None, None),
        (9, "COMM_COLL_NODE_L0_BWD_WG_ALLREDUCE", K, [8], AR, 300, None),
        (10, "COMP_NODE_L0_FWD", C, [9], None, None, None),  # pass 2 waits for layer 0's all-reduce
    ]
    # next pass: each forward waits for that layer's weight-grad all-reduce (or weight grad, if none)
    assert s[11][3] == [10, 6] and s[12][3] == [11, 3]
    # fwd/ig communications are not issued by DATA
    assert t.collectives() == {"ALL_REDUCE": {"count": 4, "bytes": 1600}}
    # durations: ns -> µs, rounded to nearest
    assert t.duration[:5].tolist() == [1, 1, 2, 4, 3]


def test_model_parallel_graph(tmp_path):
    t = convert("MODEL", tmp_path, npus=2)[0]
    d = deps_by_name(t)
    assert list(d) == [
        "COMP_NODE_L0_FWD",
        "COMM_COLL_NODE_L0_FWD_ALLGATHER",
        "COMP_NODE_L1_FWD",
        "COMP_NODE_L2_FWD",
        "COMM_COLL_NODE_L2_FWD_ALLTOALL",
        "COMP_NODE_L2_BWD_IG",
        "COMP_NODE_L2_BWD_WG",
        "COMP_NODE_L1_BWD_IG",
        "COMM_COLL_NODE_L1_BWD_IG_REDUCESCATTER",
        "COMP_NODE_L1_BWD_WG",
        "COMP_NODE_L0_BWD_IG",
        "COMP_NODE_L0_BWD_WG",
    ]
    assert d["COMP_NODE_L1_FWD"] == ["COMM_COLL_NODE_L0_FWD_ALLGATHER"]  # blocking forward collective
    assert d["COMP_NODE_L2_FWD"] == ["COMP_NODE_L1_FWD"]  # L1's forward comm is NONE
    assert d["COMP_NODE_L2_BWD_IG"] == ["COMM_COLL_NODE_L2_FWD_ALLTOALL"]
    assert d["COMP_NODE_L0_BWD_IG"] == ["COMP_NODE_L1_BWD_WG", "COMM_COLL_NODE_L1_BWD_IG_REDUCESCATTER"]
    assert d["COMP_NODE_L0_BWD_WG"] == ["COMP_NODE_L0_BWD_IG"]
    assert t.collectives() == {
        "ALL_GATHER": {"count": 1, "bytes": 100},
        "ALL_TO_ALL": {"count": 1, "bytes": 600},
        "REDUCE_SCATTER": {"count": 1, "bytes": 400},
    }


@pytest.mark.parametrize(
    "kind, model_groups, data_groups",
    [
        # model parallelism in the fastest dimension: model groups are blocks of consecutive ranks
        ("HYBRID_DATA_MODEL", {"1": [0, 1], "2": [2, 3]}, {"3": [0, 2], "4": [1, 3]}),
        ("HYBRID_TRANSFORMER", {"1": [0, 1], "2": [2, 3]}, {"3": [0, 2], "4": [1, 3]}),
        # data parallelism in the fastest dimension: data groups are the blocks
        ("HYBRID_MODEL_DATA", {"1": [0, 2], "2": [1, 3]}, {"3": [0, 1], "4": [2, 3]}),
    ],
)
def test_hybrid_groups(kind, model_groups, data_groups, tmp_path):
    w = convert(kind, tmp_path, npus=4)
    assert w.groups == {**model_groups, **data_groups}
    for r in w.ranks:
        mine_m = next(g for g, m in model_groups.items() if r in m)
        mine_d = next(g for g, m in data_groups.items() if r in m)
        by_name = {n.name: n.attr(Attr.PG_NAME) for n in w[r] if n.type == NodeType.COMM_COLL_NODE}
        assert by_name["COMM_COLL_NODE_L0_FWD_ALLGATHER"] == mine_m
        assert by_name["COMM_COLL_NODE_L1_BWD_IG_REDUCESCATTER"] == mine_m
        assert by_name["COMM_COLL_NODE_L0_BWD_WG_ALLREDUCE"] == mine_d
    rep = validate_workload(w)
    assert rep.ok and not rep.issues


def test_hybrid_graph(tmp_path):
    t = convert("HYBRID_TRANSFORMER", tmp_path, npus=4, passes=2)[0]
    d = deps_by_name(convert("HYBRID_TRANSFORMER", tmp_path, npus=4, passes=1)[0])
    assert d["COMP_NODE_L0_BWD_IG"] == ["COMP_NODE_L1_BWD_WG", "COMM_COLL_NODE_L1_BWD_IG_REDUCESCATTER"]
    assert d["COMM_COLL_NODE_L0_BWD_IG_ALLREDUCE"] == ["COMP_NODE_L0_BWD_IG"]  # transformer: layer 0 too
    assert d["COMM_COLL_NODE_L0_BWD_WG_ALLREDUCE"] == ["COMP_NODE_L0_BWD_WG"]
    ns = nodes(t)
    second = [n for n in ns if n.name == "COMP_NODE_L0_FWD"][1]
    name = {n.id: n.name for n in ns}
    # the next pass starts when layer 0's weight-grad and input-grad collectives are done
    assert [name[x] for x in second.data_deps] == [
        "COMM_COLL_NODE_L0_BWD_WG_ALLREDUCE",
        "COMM_COLL_NODE_L0_BWD_IG_ALLREDUCE",
    ]
    # hybrid data-model: no input-grad collective for layer 0 (as ASTRA-sim 1.0 and the reference)
    t2 = convert("HYBRID_DATA_MODEL", tmp_path, npus=4)[0]
    assert "COMM_COLL_NODE_L0_BWD_IG_ALLREDUCE" not in deps_by_name(t2)


def test_forward_in_backward(tmp_path):
    t = convert("HYBRID_TRANSFORMER_FWD_IN_BCKWD", tmp_path, npus=4)[0]
    d = deps_by_name(t)
    names = list(d)
    i = names.index("COMM_COLL_NODE_L2_FWD_ALLTOALL")
    # layer 2 initiates: recompute layers 0..1 from checkpoint 0, then layer 2's input grad
    assert names[i + 1 : i + 5] == [
        "COMP_NODE_L0_FWD_RECOMPUTE",
        "COMM_COLL_NODE_L0_FWD_RECOMPUTE_ALLGATHER",
        "COMP_NODE_L1_FWD_RECOMPUTE",
        "COMP_NODE_L2_BWD_IG",
    ]
    assert d["COMP_NODE_L0_FWD_RECOMPUTE"] == ["COMM_COLL_NODE_L2_FWD_ALLTOALL"]
    assert d["COMP_NODE_L1_FWD_RECOMPUTE"] == ["COMM_COLL_NODE_L0_FWD_RECOMPUTE_ALLGATHER"]
    assert d["COMP_NODE_L2_BWD_IG"] == ["COMP_NODE_L1_FWD_RECOMPUTE"]
    pg = {n.name: n.attr(Attr.PG_NAME) for n in t}
    assert pg["COMM_COLL_NODE_L0_FWD_RECOMPUTE_ALLGATHER"] == pg["COMM_COLL_NODE_L0_FWD_ALLGATHER"] == "1"


def test_dlrm_graph():
    d = deps_by_name(text_to_chakra(TEXT / "dlrm_hybrid.txt", 4, 1)[0])
    # the first layer after the last bottom layer (3: bot_mlp_2), the interaction, waits for the embedding's
    # all-to-all; the bottom MLP does not
    assert d["COMM_COLL_NODE_emb_lookup_FWD_ALLTOALL"] == ["COMP_NODE_emb_lookup_FWD"]
    assert d["COMP_NODE_bot_mlp_2_FWD"] == ["COMP_NODE_bot_mlp_1_FWD"]
    assert d["COMP_NODE_interact_FWD"] == ["COMP_NODE_bot_mlp_2_FWD", "COMM_COLL_NODE_emb_lookup_FWD_ALLTOALL"]
    assert d["COMP_NODE_top_mlp_0_FWD"] == ["COMP_NODE_interact_FWD"]
    # backward: the embedding's all-to-all after the interaction's input grad; the embedding's weight grad
    # waits for it
    assert d["COMM_COLL_NODE_emb_lookup_BWD_IG_ALLTOALL"] == ["COMP_NODE_interact_BWD_IG"]
    assert d["COMP_NODE_emb_lookup_BWD_WG"] == [
        "COMP_NODE_bot_mlp_0_BWD_IG",
        "COMM_COLL_NODE_emb_lookup_BWD_IG_ALLTOALL",
    ]
    assert d["COMP_NODE_top_mlp_1_BWD_WG"] == ["COMP_NODE_top_mlp_2_BWD_IG"]
    assert d["COMP_NODE_bot_mlp_2_BWD_WG"] == ["COMP_NODE_interact_BWD_IG"]
    assert "COMP_NODE_emb_lookup_BWD_IG" not in d  # no input grad for the first layer
    assert not [n for n in d if n.startswith("COMM_COLL_NODE_interact")]  # all NONE
    # second pass: the embedding and the interaction forward wait for their weight grad (their wg comm is
    # NONE), the others for their weight-grad all-reduce
    ns = nodes(text_to_chakra(TEXT / "dlrm_hybrid.txt", 4, 2)[0])
    name = {n.id: n.name for n in ns}
    fwd2 = [n for n in ns if n.name.endswith("_FWD")][8:]
    assert [name[x] for x in fwd2[0].data_deps] == ["COMP_NODE_emb_lookup_BWD_WG"]
    assert [name[x] for x in fwd2[1].data_deps] == [
        "COMP_NODE_emb_lookup_FWD",
        "COMM_COLL_NODE_bot_mlp_0_BWD_WG_ALLREDUCE",
    ]
    a2a2 = [n.id for n in ns if n.name == "COMM_COLL_NODE_emb_lookup_FWD_ALLTOALL"][1]
    assert fwd2[4].name == "COMP_NODE_interact_FWD" and [name[x] for x in fwd2[4].data_deps] == [
        "COMP_NODE_bot_mlp_2_FWD",
        "COMP_NODE_interact_BWD_WG",
        "COMM_COLL_NODE_emb_lookup_FWD_ALLTOALL",
    ]
    assert a2a2 in fwd2[4].data_deps  # this pass's all-to-all, not the first one
    assert all(n.attr(Attr.PG_NAME) is None for n in ns)  # DLRM collectives span every rank


def test_micro():
    w = text_to_chakra(TEXT / "micro_allreduce.txt", 4, 3)
    s = summary(w[2])
    # each pass: both layers' weight-grad all-reduces in layer order, without dependencies
    sizes = [26214400, 6291456]
    assert s == [
        (
            i,
            f"COMM_COLL_NODE_grad_bucket_{i % 2}_BWD_WG_ALLREDUCE",
            int(NodeType.COMM_COLL_NODE),
            [],
            AR,
            sizes[i % 2],
            None,
        )
        for i in range(6)
    ]
    assert w.groups == {}


# --------------------------------------------------------------------------- options


def test_compute_units(tmp_path):
    ns = convert("MODEL", tmp_path, npus=2)[0]
    us = convert("MODEL", tmp_path, npus=2, compute_unit="us")[0]
    comp = ns.types == NodeType.COMP_NODE
    assert ns.duration[comp].tolist() == [1, 1, 2, 3, 4, 2, 3, 2, 3]  # 1000, 1000, 1500, 2500 ns, ...
    assert us.duration[comp].tolist() == [1000, 1000, 1500, 2500, 3500, 2000, 3000, 2000, 3000]
    assert (ns.duration[~comp] == 0).all()
    meta = {a.name: a for a in ns.metadata.attr}
    assert meta["compute_unit"].string_val == "ns" and meta["parallelism"].string_val == "MODEL"
    # the sum in "us" mode equals the sum of the text's compute cycles (the reference converter's 1000x)
    wl = read_text_workload(TEXT / "mlp_data_model.txt")
    t = text_to_chakra(wl, 4, 1, model_parallel_size=2, compute_unit="us")[0]
    cycles = sum(L.fwd_compute + L.ig_compute + L.wg_compute for L in wl.layers)
    assert cycles == 8000 + 20460 + 20440 + 20500 + 450  # per layer, fwd + ig + wg as written in the file
    assert int(t.duration.sum()) == cycles
    with pytest.raises(ChakraError, match="compute_unit"):
        text_to_chakra(wl, 4, compute_unit="ms", model_parallel_size=2)


def test_update_delays(tmp_path):
    t = convert("HYBRID_DATA_MODEL", tmp_path, npus=4, update_delays=True)[0]
    d = deps_by_name(t)
    # L0 (update 10 ns) and L2 (20 ns) get an update node after each collective; L1 (0) none
    upd = [n for n in d if n.endswith("_UPDATE")]
    assert upd == ["COMP_NODE_L0_FWD_UPDATE", "COMP_NODE_L2_FWD_UPDATE", "COMP_NODE_L0_BWD_WG_UPDATE"]
    assert d["COMP_NODE_L0_FWD_UPDATE"] == ["COMM_COLL_NODE_L0_FWD_ALLGATHER"]
    assert d["COMP_NODE_L1_FWD"] == ["COMP_NODE_L0_FWD_UPDATE"]
    assert validate_workload(convert("HYBRID_DATA_MODEL", tmp_path, npus=4, update_delays=True)).ok


def test_model_parallel_size_options(tmp_path):
    p = small("HYBRID_DATA_MODEL", tmp_path)
    with pytest.raises(ChakraError, match="needs the model-parallel group size"):
        text_to_chakra(p, 4)
    w = text_to_chakra(p, 8, data_parallel_size=2)  # model-parallel 4
    assert w.groups["1"] == [0, 1, 2, 3] and w.groups["3"] == [0, 4]
    with pytest.raises(ChakraError, match="does not divide"):
        text_to_chakra(p, 6, model_parallel_size=4)
    with pytest.raises(ChakraError, match="not both"):
        text_to_chakra(p, 8, model_parallel_size=2, data_parallel_size=4)
    tp = small("HYBRID_TRANSFORMER", tmp_path)
    with pytest.raises(ChakraError, match="model_parallel_NPU_group: 2"):
        text_to_chakra(tp, 8, model_parallel_size=4)
    assert text_to_chakra(tp, 8, model_parallel_size=2).groups  # agreeing is fine
    with pytest.raises(ChakraError, match="apply to"):
        text_to_chakra(small("DATA", tmp_path), 4, model_parallel_size=2)
    with pytest.raises(ChakraError, match="num_npus"):
        text_to_chakra(small("DATA", tmp_path), 0)
    with pytest.raises(ChakraError, match="num_passes"):
        text_to_chakra(small("DATA", tmp_path), 2, 0)


def test_degenerate_groups(tmp_path):
    # model-parallel group of every rank: no pg_name on fwd/ig collectives; data groups of one rank: the
    # weight-grad collectives move no data and are left out
    w = convert("HYBRID_DATA_MODEL", tmp_path, npus=2, model_parallel_size=2)
    assert w.groups == {}
    t = w[0]
    assert not t.has(Attr.PG_NAME).any()
    assert not any("BWD_WG_" in n for n in t.name_array)
    assert validate_workload(w).ok
    # a one-layer transformer on exactly its group size: one all-ranks all-reduce
    p = tmp_path / "m.txt"
    p.write_text(
        "HYBRID_TRANSFORMER\tmodel_parallel_NPU_group: 8\n1\nconv1 -1 5 ALLREDUCE 1048576 5 NONE 0 5  NONE 0 5\n"
    )
    t = text_to_chakra(p, 8)[3]
    assert t.collectives() == {"ALL_REDUCE": {"count": 1, "bytes": 1048576}} and not t.has(Attr.PG_NAME).any()
    g = parallel_groups("HYBRID_TRANSFORMER", 8, 1)  # model groups of one rank, one data group of all
    assert g.model == [""] * 8 and g.data == [None] * 8 and g.groups == {}


# --------------------------------------------------------------------------- bad input

BAD = [
    ("", 1, "empty file"),
    ("\n\n", 2, "empty file"),
    ("DATAX\n1\n", 1, "unknown parallelism type 'DATAX'"),
    ("data\n1\n", 1, "did you mean DATA?"),
    ("HYBRID_CUSTOMIZED\n1\n", 1, "HYBRID_CUSTOMIZED is not supported"),
    ("DATA extra\n1\n", 1, "unexpected 'extra' after DATA"),
    ("DATA\n", 1, "expected the number of layers"),
    ("DATA\nthree\n", 2, "the number of layers: expected an integer, got 'three'"),
    ("DATA\n0\n", 2, "at least 1 layer"),
    ("DATA\n1 2\n", 2, "extra '2'"),
    ("DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8\n", 3, "expected 12 fields"),
    ("DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1 HYBRID\n", 3, "got 13"),
    (
        "DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCEX 8 1\n",
        3,
        "field 10 (weight-grad comm type): unknown communication type 'ALLREDUCEX'; expected one of NONE, ALLREDUCE",
    ),
    ("DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 allreduce 8 1\n", 3, "did you mean ALLREDUCE?"),
    ("DATA\n1\nL0 -1 5 NONE 0 5 ALLTOALLV 0 5 ALLREDUCE 8 1\n", 3, "ALLTOALLV (a variable all-to-all) has no Chakra"),
    (
        "DATA\n1\nL0 -1 5.5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n",
        3,
        "layer 'L0', field 3 (forward compute time): expected a non-negative integer, got '5.5'",
    ),
    ("DATA\n1\nL0 -1 abc NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n", 3, "forward compute time"),
    ("DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE -8 1\n", 3, "weight-grad comm size): expected a non-negative"),
    ("DATA\n1\nL0 x 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n", 3, "reserved field): expected an integer"),
    ("DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 99999999999999999999 1\n", 3, "does not fit in 64 bits"),
    ("DATA\n3\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n\n", 4, "declares 3 layers (line 2) but has only 1"),
    (
        "DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\nL1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n",
        4,
        "has more layer lines, starting with 'L1'",
    ),
    ("HYBRID_DLRM\n2\n", 1, "expected the index of the last bottom-MLP layer"),
    (
        "HYBRID_DLRM 1\n2\nA -1 1 ALLTOALL 8 1 ALLTOALL 8 1 NONE 0 1\nB -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n",
        1,
        "must be a layer index from 0 to 0",
    ),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group:\n1\n", 1, "expected a number after 'model_parallel_NPU_group:'"),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 0\n1\n", 1, "expected a positive integer"),
    ("HYBRID_TRANSFORMER mp: 2\n1\n", 1, "unexpected 'mp:' in the header"),
    (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 2 0\n1\n",
        1,
        "checkpoints: says 2 layers but lists 1",
    ),
    (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 1 1 checkpoint_initiates: 1 0\n"
        + LAYERS,
        1,
        "layer 0 has no checkpoint below it",
    ),
    (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 1 0 checkpoint_initiates: 1 5\n"
        + LAYERS,
        1,
        "checkpoint_initiates: layer 5 does not exist (layers are 0 to 2)",
    ),
    (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 2 0 2 checkpoint_initiates: 1 2\n"
        + LAYERS,
        1,
        "layer 2 is also a checkpoint",
    ),
    (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 1 0 checkpoint_initiates: 2 1 2\n"
        + LAYERS,
        1,
        "layer 1 lies inside the recomputation of layers 0..1 started by layer 2",
    ),
]


@pytest.mark.parametrize("text, line, message", BAD)
def test_bad_input(text, line, message, tmp_path):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(TraceFormatError) as ei:
        read_text_workload(p)
    e = ei.value
    assert isinstance(e, TextWorkloadError) and e.line == line
    s = str(e)
    assert s.startswith(f"{p} (line {line}): ") and message in s and "\n" not in s


def test_bad_input_at_conversion(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("HYBRID_TRANSFORMER\n" + LAYERS)
    wl = read_text_workload(p)  # parses; the group size is missing for conversion
    with pytest.raises(TextWorkloadError, match=r"\(line 1\): HYBRID_TRANSFORMER: expected 'model_parallel_NPU_group"):
        text_to_chakra(wl, 4)
    assert text_to_chakra(wl, 4, model_parallel_size=2).groups  # or given by the caller
    b = tmp_path / "bin.txt"
    b.write_bytes(b"DATA\n1\n\xff\xfe\n")
    with pytest.raises(TextWorkloadError, match=r"\(line 3\): not a text file"):
        read_text_workload(b)
    with pytest.raises(OSError):
        read_text_workload(tmp_path / "missing.txt")


def test_parse_text_without_a_file():
    wl = parse_text_workload(
        "  \nMODEL\r\n\r\n2\nA -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n\nB -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n"
    )
    assert wl.path is None and [L.line for L in wl.layers] == [5, 7] and wl.header_line == 2
    with pytest.raises(TextWorkloadError, match=r"^<input> \(line 1\)"):
        parse_text_workload("NOPE\n")


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def cli():
    """`chakra convert text ...`, called as ``cli("convert-text", ...)``."""
    from chakra_trace import cli as cli_mod

    def run(*args):
        argv = [str(a) for a in args]
        return cli_mod.main(["convert", "text", *argv[1:]] if argv[:1] == ["convert-text"] else argv)

    return run


def test_cli_writes_files_chakra_info_reads(cli, tmp_path, capsys):
    prefix = tmp_path / "out" / "tf"
    rc = cli(
        "convert-text",
        TEXT / "transformer_fwd_in_bckwd.txt",
        "--npus",
        8,
        "--passes",
        2,
        "--output",
        prefix,
        "--json",
    )
    assert rc == 0
    info = json.loads(capsys.readouterr().out)
    assert info["parallelism"] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD" and info["ranks"] == 8
    assert info["nodes_per_rank"] == 2 * (60 + 26) and len(info["files"]) == 8  # test_real_file_counts_by_hand
    groups_path = Path(info["comm_groups"])
    assert json.loads(groups_path.read_text()) == {
        "1": [0, 1, 2, 3],
        "2": [4, 5, 6, 7],
        "3": [0, 4],
        "4": [1, 5],
        "5": [2, 6],
        "6": [3, 7],
    }
    assert sorted(p.name for p in prefix.parent.iterdir()) == sorted(
        [f"tf.{r}.et" for r in range(8)] + ["tf.comm_groups.json"]
    )
    # chakra info reads one file and the whole workload
    assert cli("info", f"{prefix}.3.et", "--json") == 0
    one = json.loads(capsys.readouterr().out)
    assert one["nodes"] == 172
    assert cli("info", prefix, "--json") == 0
    allr = json.loads(capsys.readouterr().out)
    assert sorted(allr["ranks"], key=int) == [str(r) for r in range(8)]
    # and validate, with the groups file
    assert cli("validate", prefix, "--comm-groups", groups_path) == 0
    capsys.readouterr()
    from chakra_trace import Workload

    w = Workload.open(prefix, comm_groups=groups_path)
    rep = validate_workload(w)
    assert rep.ok and not rep.issues


def test_cli_default_prefix_and_text_output(cli, tmp_path, capsys):
    src = tmp_path / "micro.txt"
    src.write_bytes((TEXT / "micro_allreduce.txt").read_bytes())
    assert cli("convert-text", src, "--npus", 4) == 0
    out = capsys.readouterr().out
    assert "MICRO, 2 layers, 1 pass: wrote 4 ranks x 2 nodes" in out and "comm_groups" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "micro.0.et",
        "micro.1.et",
        "micro.2.et",
        "micro.3.et",
        "micro.txt",
    ]
    assert cli("convert-text", src, "--npus", 2, "--gzip", "-o", tmp_path / "z") == 0
    assert (tmp_path / "z.1.et.gz").exists()


def test_cli_options(cli, tmp_path, capsys):
    src = small("HYBRID_MODEL_DATA", tmp_path)
    assert (
        cli(
            "convert-text",
            src,
            "--npus",
            4,
            "--model-parallel",
            2,
            "--compute-unit",
            "us",
            "--update-delays",
            "-o",
            tmp_path / "h",
            "--json",
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["groups"] == {"1": [0, 2], "2": [1, 3], "3": [0, 1], "4": [2, 3]}
    assert info["compute_unit"] == "us"
    from chakra_trace import read_trace

    t = read_trace(tmp_path / "h.1.et")
    assert t.attr(0, Attr.PG_NAME) is None and int(t.duration[0]) == 1000
    assert any(n.endswith("_UPDATE") for n in t.name_array)


@pytest.mark.parametrize(
    "text, args, needle",
    [
        ("DATA\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCEX 8 1\n", [], "(line 3): layer 'L0', field 10"),
        ("DATA\n2\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n", [], "declares 2 layers"),
        ("HYBRID_DATA_MODEL\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n", [], "needs the model-parallel group size"),
        ("HYBRID_DATA_MODEL\n1\nL0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 1\n", ["--model-parallel", 3], "does not divide"),
    ],
)
def test_cli_bad_input_one_line_exit_2(cli, tmp_path, capsys, text, args, needle):
    src = tmp_path / "bad.txt"
    src.write_text(text)
    assert cli("convert-text", src, "--npus", 4, "-o", tmp_path / "o", *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err and str(src) in err
    assert not list(tmp_path.glob("o.*"))  # nothing written


def test_cli_usage_errors(cli, tmp_path, capsys):
    src = TEXT / "micro_allreduce.txt"
    assert cli("convert-text", src) == 2  # --npus is required
    assert "--npus" in capsys.readouterr().err
    assert cli("convert-text", src, "--npus", 0) == 2
    capsys.readouterr()
    assert cli("convert-text", tmp_path / "missing.txt", "--npus", 2) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_ranks_past_the_node_limit_are_refused_before_building(tmp_path, monkeypatch):
    """`--npus 1000000` copied the template a million times until the process died of memory
    (the attack audit's `convert-text-npus1e6`): the ranks' cost is checked before any copy."""
    monkeypatch.setenv("CHAKRA_TRACE_MAX_NODES", "10000")
    p = small("DATA", tmp_path)
    assert len(text_to_chakra(p, 64)) == 64
    with pytest.raises(
        ChakraError, match=rf"{p.name}: 1,000,000 ranks of \d+ nodes .* over the limit of CHAKRA_TRACE_MAX_NODES"
    ):
        text_to_chakra(p, 1_000_000)
