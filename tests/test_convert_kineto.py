"""Kineto-only conversion (`convert.profiler`, `chakra convert kineto`).

Invariants against the conversion that also has the host trace, on every pair we have (the
pipeline job, the DDP/MLP/transformer samples, and the corpus jobs where tests/data/corpus
holds them): the same collectives per rank (type, bytes, order, group), critical path within
2%, cross-rank validation as good. Synthetic traces cover what no sample has (NCCL with
record_param_comms, GPU kernels and synchronization, uneven all_to_allv).
"""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.analyze.collectives import imbalance
from chakra_trace.analyze.critical_path import critical_path
from chakra_trace.convert.profiler import convert_kineto, convert_kineto_trace
from chakra_trace.convert.pytorch import convert_pytorch, read_collection
from chakra_trace.errors import ChakraError
from chakra_trace.io import kineto as kineto_mod
from chakra_trace.io.collect_folder import kineto_files
from chakra_trace.io.collective_names import classify
from chakra_trace.io.et import read_trace, write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.enums import Attr, CollectiveType, NodeType, collective_name
from chakra_trace.schema.groups import group_rows
from chakra_trace.validate.workload import validate_workload
from conftest import run_cli, sample

DATA = Path(__file__).parent / "data"
PIPELINE = DATA / "pipeline"
CORPUS = DATA / "corpus"
PAIRS = [(PIPELINE / f"rank{r}.et.json.gz", PIPELINE / f"rank{r}.kineto.json.gz") for r in range(4)] + [
    (DATA / f"{n}.et.json.gz", DATA / "kineto" / f"{n}.kineto.json.gz")
    for n in ("ddp_rank0", "ddp_rank1", "mlp_rank0", "transformer_rank0")
]
CORPUS_JOBS = sorted(p for p in CORPUS.glob("*") if p.is_dir() and any(p.glob("rank*.kineto.json.gz")))
PAIRS += [
    (k.parent / k.name.replace(".kineto.", ".et."), k)
    for j in CORPUS_JOBS
    for k in sorted(j.glob("rank*.kineto.json.gz"))
]
JOBS = [PIPELINE, *CORPUS_JOBS]


def _host(et: Path, kin: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_pytorch(et, kin)


def _edges(t):
    ip, pr = t.graph().preds
    return pr.astype(np.int64), np.repeat(np.arange(len(t)), np.diff(ip))


def _backward_edges(t) -> list[tuple[str, str]]:
    src, dst = _edges(t)
    end = t.start[src].astype(np.int64) + t.duration[src].astype(np.int64)
    bad = end > t.start[dst].astype(np.int64) + 1
    return sorted(zip(t.name_array[src[bad]].tolist(), t.name_array[dst[bad]].tolist()))


def _c10d_collectives(kin: Path) -> Counter:
    """Ground truth from the Kineto trace itself: the type of every c10d collective op inside
    the recorded steps (each must become exactly one collective node)."""
    k = kineto_mod.read_kineto(kin)
    steps = k.steps()
    lo, hi = steps[0][1], steps[-1][2]
    out: Counter = Counter()
    for i in np.flatnonzero((k.ph == ord("X")) & (k.ts >= lo) & (k.ts <= hi)).tolist():
        name = k.event_name(i)
        if name.startswith("c10d::") and classify(name).collective is not None:
            out[collective_name(classify(name).collective)] += 1
    return out


@pytest.mark.parametrize("et,kin", PAIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_matches_the_conversion_with_the_host_trace(et, kin):
    tk, rk = convert_kineto_trace(kin)
    th, rh = _host(et, kin)
    truth = _c10d_collectives(kin)
    assert Counter(t for t, _ in rk.collective_sizes) == truth  # one node per collective, typed by its c10d op
    if Counter(t for t, _ in rh.collectives) == truth:  # (the host conversion double-counts gloo's
        assert rk.collective_sizes == rh.collectives  # reduce_scatter-as-all_reduce: issue 14 report)
    for nt in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
        assert rk.node_types.get(nt, 0) == rh.node_types.get(nt, 0)
    ck, ch = critical_path(tk).length_us, critical_path(th).length_us
    assert abs(ck - ch) <= 0.02 * ch
    # p2p peers and tags as the host trace records them
    p2p = np.isin(th.types, [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE])
    pk = np.isin(tk.types, [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE])
    for col in ("comm_src", "comm_dst", "comm_size", "comm_tag"):
        assert getattr(tk, col)[pk].tolist() == getattr(th, col)[p2p].tolist()
    # dependencies that go back in time (1 µs rounding): none beyond the host conversion's
    # (overlapping gloo sends on one thread are ordered by issue there too)
    assert set(_backward_edges(tk)) <= set(_backward_edges(th))
    assert rk.nodes == len(tk) and rk.cpu_ops > 0 and rk.with_shapes


@pytest.mark.parametrize("folder", JOBS, ids=lambda p: p.name)
def test_job_matches_the_host_job(folder, tmp_path):
    wk, rep = convert_kineto(folder)
    files = tmp_path / folder.name
    files.mkdir()
    for f in folder.glob("rank*.json.gz"):
        shutil.copy(f, files)
    wh = read_collection(files)
    assert wk.ranks == wh.ranks == sorted(rep.ranks)
    vk, vh = validate_workload(wk), validate_workload(wh)
    assert {i.code for i in vk.issues} <= {i.code for i in vh.issues}  # no worse than with the host trace
    for r in wk.ranks:
        k, h = wk[r], wh[r]
        assert sorted(k.groups) == sorted(h.groups)
        if vh.ok:
            for g in h.groups:  # same sequence per process group
                rk, rh = group_rows(k, g), group_rows(h, g)
                assert k.comm_type[rk].tolist() == h.comm_type[rh].tolist()
                assert k.comm_size[rk].tolist() == h.comm_size[rh].tolist()


def test_pipeline_job_validates_and_names_subgroups():
    w, rep = convert_kineto(PIPELINE)
    assert validate_workload(w).ok
    assert w.all_groups() == {"1": [0, 1], "2": [2, 3]}
    for rr in rep.ranks.values():
        assert rr.collectives == {"ALL_REDUCE": 8} and rr.p2p == {"COMM_SEND_NODE": 4, "COMM_RECV_NODE": 4}
        assert rr.sizes_from == {"shapes, dtype of the backend op": 16}
    d = json.loads(json.dumps(rep.to_dict()))
    assert set(d["ranks"]) == {"0", "1", "2", "3"}


# ------------------------------------------------------------------------------ synthetic traces
def _x(name, cat, ts, dur, tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(path: Path, events: list, rank: int | None = 0, world: int = 2, gz: bool = True) -> Path:
    doc: dict = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1_000_000_000}
    if rank is not None:
        pg = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}]
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world, "pg_config": pg}
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _nccl_rank(rank: int, *, rpc: bool = True) -> list:
    """One step: a matmul kernel, an all-reduce (record_param_comms -> nccl:all_reduce -> NCCL
    kernel), then a host op that waits in cudaDeviceSynchronize."""
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("aten::mm", "cpu_op", 10, 90, **{"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]}),
        _x("cudaLaunchKernel", "cuda_runtime", 20, 10, correlation=1),
        _x("sgemm_kernel", "kernel", 40, 260, tid=7, pid=0, correlation=1, stream=7, device=0),
        _x("c10d::allreduce_", "cpu_op", 110, 90, **{"Input Dims": [[[1024]], []], "Input type": ["TensorList", ""]}),
        _x("nccl:all_reduce", "cpu_op", 130, 50),
        _x("cudaLaunchKernel", "cuda_runtime", 140, 10, correlation=2),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 310, 290, tid=20, pid=0, correlation=2, stream=20),
        _x("aten::_local_scalar_dense", "cpu_op", 600, 100),
        _x("cudaDeviceSynchronize", "cuda_runtime", 610, 80),
    ]
    if rpc:
        ev.append(
            _x(
                "record_param_comms",
                "cpu_op",
                120,
                70,
                **{
                    "Collective name": "allreduce",
                    "In msg nelems": 1024,
                    "Out msg nelems": 1024,
                    "dtype": "BFloat16",
                    "Process Group Name": "0",
                    "Group size": 2,
                },
            )
        )
    return ev


def test_nccl_collective_from_record_param_comms_with_gpu_edges(tmp_path):
    paths = [_write(tmp_path / f"rank{r}.kineto.json.gz", _nccl_rank(r), rank=r) for r in range(2)]
    w, rep = convert_kineto(paths)
    assert validate_workload(w).ok
    t = w[0]
    coll = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    assert coll.size == 1
    c = int(coll[0])
    assert t.comm_type[c] == CollectiveType.ALL_REDUCE
    assert t.comm_size[c] == 1024 * 2  # In msg nelems x bf16: the recorded dtype, not the float of the shapes
    assert t.groups[t.pg_name[c]] == "0"
    assert rep.ranks[0].sizes_from == {"record_param_comms": 1}
    assert rep.ranks[0].gpu_events == {"kernel": 2}
    names = t.name_array
    (mm,) = np.flatnonzero(names == "aten::mm")
    (gemm,) = np.flatnonzero(names == "sgemm_kernel")
    (wait,) = np.flatnonzero(names == "aten::_local_scalar_dense")
    src, dst = _edges(t)
    pairs = set(zip(src.tolist(), dst.tolist()))
    # launch flow: the kernel started (40) inside the op that launched it (10-100), so it waits
    # for what ran before that op (the `[host]` gap), not for the op to end
    assert [p for p, n in pairs if n == gemm] == [int(mm) - 1] and names[int(mm) - 1] == "[host]"
    assert (int(gemm), int(wait)) in pairs or (c, int(wait)) in pairs  # the sync waited for the GPU
    stream, has = t.attr_array("stream", np.int64)
    assert sorted(stream[has].tolist()) == [7, 20]
    num_ops, known = t.attr_array("num_ops", np.int64)
    assert known[mm] and num_ops[mm] == 2 * 64 * 32 * 16  # FLOPs from the recorded shapes


def test_stream_wait_event_orders_two_streams(tmp_path):
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("aten::mm", "cpu_op", 10, 40),
        _x("cudaLaunchKernel", "cuda_runtime", 20, 10, correlation=1),
        _x("producer_kernel", "kernel", 100, 100, tid=7, pid=0, correlation=1, stream=7, device=0),
        _x("aten::add", "cpu_op", 60, 40),
        _x("cudaLaunchKernel", "cuda_runtime", 70, 10, correlation=2),
        _x("Stream Wait Event", "cuda_sync", 205, 0, tid=20, pid=0, stream=20, device=0, wait_on_stream=7),
        _x("consumer_kernel", "kernel", 210, 50, tid=20, pid=0, correlation=2, stream=20, device=0),
    ]
    t, rep = convert_kineto_trace(_write(tmp_path / "rank0.kineto.json.gz", ev))
    names = t.name_array
    (p,) = np.flatnonzero(names == "producer_kernel")
    (c,) = np.flatnonzero(names == "consumer_kernel")
    src, dst = _edges(t)
    assert (int(p), int(c)) in set(zip(src.tolist(), dst.tolist()))
    assert rep.stream_waits == 1


def test_collective_from_kernel_name_without_record_param_comms(tmp_path):
    paths = [_write(tmp_path / f"rank{r}.kineto.json.gz", _nccl_rank(r, rpc=False), rank=r) for r in range(2)]
    w, rep = convert_kineto(paths)
    t = w[1]
    (c,) = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
    assert t.comm_type[c] == CollectiveType.ALL_REDUCE
    assert t.comm_size[c] == 1024 * 4  # the c10d op's shapes; a TensorList has no dtype: float32 assumed
    assert rep.ranks[1].sizes_from == {"shapes, assumed_dtype": 1}


def _a2a_rank(rank: int, in_split: list[int], out_split: list[int]) -> list:
    rows_in, rows_out = sum(in_split), sum(out_split)
    return [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x(
            "c10d::alltoall_base_",
            "cpu_op",
            100,
            50,
            **{
                "Input Dims": [[rows_out, 8], [rows_in, 8], [], [], [], [], []],
                "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
                "Concrete Inputs": ["", "", "", str(out_split), str(in_split), "False", "-1"],
            },
        ),
        _x(
            "gloo:all_to_all",
            "user_annotation",
            120,
            400,
            tid=2,
            **{"Input Dims": [[rows_in, 8]], "Input type": ["float"]},
        ),
        _x("aten::add", "cpu_op", 600, 50),
    ]


def test_uneven_all_to_all_keeps_splits_and_names_the_hot_receiver(tmp_path):
    # every rank sends rank 2 its largest split: rank 2 receives 3 x 8 rows, the others 3 x 1
    world = 4
    send = [[1 if p != 2 else 8 for p in range(world)] for _ in range(world)]
    for r in range(world):
        send[r][r] = 1
    recv = [[send[p][r] for p in range(world)] for r in range(world)]
    paths = [
        _write(tmp_path / f"rank{r}.kineto.json.gz", _a2a_rank(r, send[r], recv[r]), rank=r, world=world)
        for r in range(world)
    ]
    w, _ = convert_kineto(paths)
    for r in range(world):
        t = w[r]
        (c,) = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
        assert t.comm_type[c] == CollectiveType.ALL_TO_ALL
        assert json.loads(t.attr(c, "in_split_size")) == send[r]
        assert json.loads(t.attr(c, "out_split_size")) == recv[r]
        assert t.comm_size[c] == sum(send[r]) * 8 * 4
    assert "2" in imbalance(w).to_dict()["outlier_ranks"]


def test_plain_and_gzip_and_folders_agree(tmp_path):
    src = PIPELINE / "rank0.kineto.json.gz"
    plain = tmp_path / "plain" / "trace0.json"
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    a, _ = convert_kineto_trace(src)
    b, _ = convert_kineto_trace(plain)
    write_trace(a, tmp_path / "a.et")
    write_trace(b, tmp_path / "b.et")
    assert (tmp_path / "a.et").read_bytes() == (tmp_path / "b.et").read_bytes()
    assert kineto_files(PIPELINE) == [PIPELINE / f"rank{r}.kineto.json.gz" for r in range(4)]
    assert kineto_files(plain.parent) == [plain]  # any folder: every *.json[.gz]
    w, _ = convert_kineto(plain.parent)
    assert w.ranks == [0]  # distributedInfo.rank


def test_ranks_without_distributed_info(tmp_path):
    ev = _nccl_rank(0)
    p1 = _write(tmp_path / "host_rank3.json.gz", ev, rank=None)
    w, rep = convert_kineto([p1])
    assert w.ranks == [3] and any("rank 3" in n for n in rep.notes)
    p2 = _write(tmp_path / "a.json", ev, rank=1, gz=False)
    p3 = _write(tmp_path / "b.json", ev, rank=1, gz=False)
    with pytest.raises(ChakraError, match="rank 1"):
        convert_kineto([p2, p3])


def test_args_for_keeps_the_same_args_on_both_reader_paths(monkeypatch):
    path = PIPELINE / "rank2.kineto.json.gz"
    want = lambda n: n.startswith(("c10d::", "gloo:", "aten::mm"))  # noqa: E731
    a = kineto_mod.read_kineto(path, args_for=want)
    monkeypatch.setattr(kineto_mod, "_native", None)
    b = kineto_mod.read_kineto(path, args_for=want, chunk=1 << 12)
    assert a.args == b.args and len(a.args) > 0
    assert all(want(a.event_name(i)) for i in a.args)
    assert kineto_mod.read_kineto(path).args == {}


# ------------------------------------------------------------------------------------------- CLI


def test_cli_writes_one_trace_per_rank(tmp_path, capsys):
    out = tmp_path / "out" / "job"
    rc, text, err = run_cli(["convert", "kineto", str(PIPELINE), "-o", str(out)], capsys)
    assert rc == 0, err
    for r in range(4):
        assert f"rank {r}:" in text
        t = read_trace(f"{out}.{r}.et")
        assert t.has(Attr.COMM_SIZE).any()
    assert "message sizes from" in text
    rc, text, err = run_cli(
        ["convert", "kineto", str(PIPELINE / "rank1.kineto.json.gz"), "-o", str(out), "--json"], capsys
    )
    assert rc == 0, err
    d = json.loads(text)
    assert d["ranks"]["1"]["collectives"] == {"ALL_REDUCE": 8}
    assert d["ranks"]["1"]["output"] == f"{out}.1.et"


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        json.dumps({"nodes": []}).encode(),  # a host trace, not Kineto
        # no CPU ops and no GPU activity (a kernel alone is a GPU-only trace: converted)
        json.dumps({"traceEvents": [_x("cudaLaunchKernel", "cuda_runtime", 0, 1)]}).encode(),
    ],
    ids=["not-json", "host-trace", "no-ops-no-gpu-work"],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys, data):
    path = tmp_path / "x.json"
    path.write_bytes(data)
    rc, _, err = run_cli(["convert", "kineto", str(path), "-o", str(tmp_path / "o")], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and str(path) in err


def test_empty_folder_is_an_error(tmp_path, capsys):
    rc, _, err = run_cli(["convert", "kineto", str(tmp_path), "-o", str(tmp_path / "o")], capsys)
    assert rc == 2 and "no Kineto traces" in err and err.count("\n") == 1


def test_without_shapes_collectives_are_the_same_and_flops_unknown():
    kin = PIPELINE / "rank2.kineto.json.gz"
    a, ra = convert_kineto_trace(kin)
    b, rb = convert_kineto_trace(kin, shapes=False)
    assert ra.collective_sizes == rb.collective_sizes and ra.node_types == rb.node_types
    assert critical_path(a).length_us == critical_path(b).length_us
    assert a.attr_array("num_ops", np.int64)[1].any() and not b.attr_array("num_ops", np.int64)[1].any()


def test_args_for_with_args_written_before_the_name(tmp_path, monkeypatch):
    """Another writer's key order (args first) defeats the quick lookup; the run is then decoded whole."""
    doc = json.loads(gzip.decompress((PIPELINE / "rank0.kineto.json.gz").read_bytes()))
    doc["traceEvents"] = [dict(sorted(e.items())) for e in doc["traceEvents"]]  # "args" < "name"
    path = tmp_path / "sorted.json"
    path.write_text(json.dumps(doc))
    want = lambda n: n.startswith("c10d::")  # noqa: E731
    a = kineto_mod.read_kineto(path, args_for=want)
    monkeypatch.setattr(kineto_mod, "_native", None)
    b = kineto_mod.read_kineto(path, args_for=want)
    assert a.args == b.args and len(a.args) == 16


@pytest.mark.parametrize("name", ["resnet_kineto_head", "linear_kineto_head"])
def test_old_gpu_traces_put_kernels_after_their_launch(name):
    """The 2023 PARAM GPU traces (no ProfilerStep, no shapes, no Record function id): every
    kernel, copy and set becomes a node on its stream, after the CPU op that launched it."""
    t, rep = convert_kineto_trace(sample(f"kineto/{name}.json.gz"))
    assert not rep.with_shapes and rep.steps == 0
    stream, on_gpu = t.attr_array("stream", np.int64)
    assert 0.95 * sum(rep.gpu_events.values()) <= on_gpu.sum() == rep.gpu_nodes  # (the head cuts a few launches off)
    src, dst = _edges(t)
    from_cpu = np.zeros(len(t), bool)
    from_cpu[dst[~on_gpu[src]]] = True
    # a kernel that started inside its launching op waits for what ran before that op: only
    # work launched by a thread's first op (nothing before it) has no CPU predecessor
    has_pred = np.zeros(len(t), bool)
    has_pred[dst] = True
    heads = np.flatnonzero(~on_gpu & ~has_pred & (t.types == NodeType.COMP_NODE))
    lo, hi = t.start[heads].astype(np.int64), (t.start[heads] + t.duration[heads]).astype(np.int64)
    for k in np.flatnonzero(on_gpu & ~from_cpu).tolist():
        assert ((lo <= int(t.start[k])) & (int(t.start[k]) <= hi)).any(), k
    # the only edges back in time cross between host and device: a launch (a kernel starts
    # before its op returns) or a synchronization (the op waited inside for the kernel to end)
    end = t.start[src].astype(np.int64) + t.duration[src].astype(np.int64)
    back = end > t.start[dst].astype(np.int64) + 1
    assert (on_gpu[src[back]] != on_gpu[dst[back]]).all()


def test_a_folder_of_kineto_traces_opens_as_a_workload(tmp_path):
    for r in range(4):
        shutil.copy(PIPELINE / f"rank{r}.kineto.json.gz", tmp_path)
    w = Workload.open(tmp_path)
    ref, _ = convert_kineto(PIPELINE)
    assert w.ranks == ref.ranks and validate_workload(w).ok
    for r in w.ranks:
        for g in ref[r].groups:
            assert w[r].comm_size[group_rows(w[r], g)].tolist() == ref[r].comm_size[group_rows(ref[r], g)].tolist()
    assert Workload.open(tmp_path, ranks=[2]).ranks == [2]  # (the second open reads the cache)
