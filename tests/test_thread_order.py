"""Untimed host traces: threads ordered by record order (`convert.threads`).

Ground truth is the raw ET JSON (ids, tids, ctrl_deps) read by a few lines here."""

from __future__ import annotations

import gzip
import json
import warnings

import numpy as np
import pytest

from chakra_trace.convert.pytorch import convert_pytorch
from chakra_trace.convert.threads import record_order_edges
from chakra_trace.io.workload import Workload
from chakra_trace.simulate.presets import choose_system, simulate_on
from chakra_trace.validate import validate_trace
from conftest import sample


def _raw(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["nodes"]


def _attr(n: dict, name: str):
    return next((a["value"] for a in n["attrs"] if a["name"] == name), None)


def _edges(trace) -> set[tuple[int, int]]:
    src, dst, _ = trace.dep_rows()
    return set(zip(src.tolist(), dst.tolist()))


def _simulate(trace, device: str = "h100"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = simulate_on(Workload({0: trace}), choose_system(None, device=device))
    return np.asarray(res.nodes[0][0]), np.asarray(res.nodes[0][1]), res


def test_resnet_backward_waits_for_the_forward_and_the_main_thread_for_it():
    """resnet_et (host only, no times): the autograd thread runs after the main thread's last
    node before it in record order, and the main thread resumes after the autograd thread's last
    node; no two host nodes of different threads overlap, so the step is the sum of the nodes."""
    path = sample("resnet_et.json.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace, _ = convert_pytorch(path)
    assert validate_trace(trace).errors == []
    start, end, res = _simulate(trace)
    tid, has_tid = trace.attr_array("tid", np.int64)
    rf, has_rf = trace.attr_array("rf_id", np.int64)
    host = np.flatnonzero(has_tid & has_rf)
    # the raw record order: ids (global, in execution order) and threads of the real ops
    raw = [n for n in _raw(path) if not n["name"].startswith("[pytorch|profiler|execution_trace")]
    id_of_rf = {_attr(n, "rf_id"): n["id"] for n in raw}
    raw.sort(key=lambda n: n["id"])
    ids = np.array([n["id"] for n in raw])
    tids = np.array([_attr(n, "tid") for n in raw])
    switch = np.flatnonzero(tids[1:] != tids[:-1])
    assert switch.size >= 2  # forward -> backward -> optimizer, each iteration
    node_id = np.array([id_of_rf[int(r)] for r in rf[host]])
    checked = 0
    for k in switch.tolist():
        a, b, ta, tb = ids[k], ids[k + 1], tids[k], tids[k + 1]
        before = host[(tid[host] == ta) & (node_id <= a)]  # the node holding a, or the last before it
        after = host[(tid[host] == tb) & (node_id >= b)]  # the first node at or after b
        if before.size and after.size:
            x = before[np.argmax(node_id[np.isin(host, before)])]
            y = after[np.argmin(node_id[np.isin(host, after)])]
            assert start[y] >= end[x], (int(a), int(b))
            checked += 1
    assert checked >= 2
    o = host[np.lexsort((end[host], start[host]))]
    assert (start[o[1:]] >= np.maximum.accumulate(end[o])[:-1]).all()  # one after another
    assert res.finish_ns[0] == int((end[host] - start[host]).sum())


def node(i, name, parent, tid):
    """A host ET node in the schema 1.1.0 layout (rf_id = id)."""
    attrs = [{"name": "rf_id", "type": "uint64", "value": i}, {"name": "tid", "type": "uint64", "value": tid}]
    empty = {"values": [], "shapes": [], "types": []}
    return {"id": i, "name": name, "ctrl_deps": parent, "inputs": empty, "outputs": empty, "attrs": attrs}


def write_et(path, nodes):
    with gzip.open(path, "wt") as f:
        json.dump(
            {"schema": "1.1.0-chakra.0.0.4", "pid": 1, "time": "", "start_ts": 0, "finish_ts": 1, "nodes": nodes}, f
        )


def _two_threads(tmp_path, second: int):
    """Forward on thread 1 (ids 3-5), backward on thread `second` (7-8), optimizer on 1 (9-10),
    written in the file as PyTorch does: each op when it ends, the roots last."""
    nodes = [
        node(3, "aten::mm", 2, 1),
        node(4, "aten::relu", 2, 1),
        node(5, "aten::fill_", 2, 1),
        node(7, "autograd::engine::evaluate_function: MmBackward0", 6, second),
        node(8, "autograd::engine::evaluate_function: ReluBackward0", 6, second),
        node(9, "aten::add_", 2, 1),
        node(10, "aten::zero_", 2, 1),
        node(6, "[pytorch|profiler|execution_trace|thread]", 1, second),
        node(2, "[pytorch|profiler|execution_trace|thread]", 1, 1),
        node(1, "[pytorch|profiler|execution_trace|process]", 1, 0),
    ]
    if second == 1:
        nodes = [n for n in nodes if n["id"] != 6]
        for n in nodes:
            n["ctrl_deps"] = 2 if n["ctrl_deps"] == 6 else n["ctrl_deps"]
    path = tmp_path / f"t{second}.et.json.gz"
    write_et(path, nodes)
    trace, _ = convert_pytorch(path)
    assert validate_trace(trace).errors == []
    rf, _ = trace.attr_array("rf_id", np.int64)
    row = {int(r): k for k, r in enumerate(rf.tolist()) if r > 0}
    return trace, row


def test_fork_and_join_edges(tmp_path):
    trace, row = _two_threads(tmp_path, 2)
    edges = _edges(trace)
    assert (row[7], row[5]) in edges  # fork: the backward after the main thread's last op before it
    assert (row[9], row[8]) in edges  # join: the main thread resumes after the backward's last op
    assert (row[8], row[7]) in edges and (row[4], row[3]) in edges  # each thread in order, as before
    start, end, _ = _simulate(trace)
    assert start[row[7]] >= end[row[5]] and start[row[9]] >= end[row[8]]


def test_one_thread_edges_unchanged(tmp_path):
    """The same ops on one thread: only its order edges, none added across threads."""
    trace, row = _two_threads(tmp_path, 1)
    chain = [row[i] for i in (3, 4, 5, 7, 8, 9, 10)]
    assert _edges(trace) == set(zip(chain[1:], chain[:-1]))


def test_record_order_edges_rule():
    """Switches in id order become edges (whatever the input order); a thread of communication
    only (a backend worker) takes no part."""
    ids = np.array([5, 1, 2, 3, 4, 6, 7])
    thread = np.array([1, 1, 1, 2, 2, 9, 1])
    comm = np.array([False, False, False, False, False, True, False])
    after, before = record_order_edges(ids, thread, comm)
    assert sorted(zip(ids[after].tolist(), ids[before].tolist())) == [(3, 2), (5, 4)]
    assert all(x.size == 0 for x in record_order_edges(ids[:1], thread[:1], comm[:1]))


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_host_traces_validate(rank):
    """The 2-rank DDP host traces (main and autograd thread each): valid, with edges across the
    threads (the backward's fork and join)."""
    from conftest import DATA

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace, _ = convert_pytorch(DATA / f"ddp_rank{rank}.et.json.gz", rank=rank)
    assert validate_trace(trace).errors == []
    tid, has = trace.attr_array("tid", np.int64)
    cross = [(a, b) for a, b in _edges(trace) if has[a] and has[b] and tid[a] != tid[b]]
    assert cross  # the backward's fork (and join)
