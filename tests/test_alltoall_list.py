"""The list form of all_to_all (`c10d::alltoall_`: one tensor per peer, no split arguments)
keeps its per-peer sizes, from the lists' tensors (tests/workloads/alltoall_list.py, gloo)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from chakra_trace.analyze.collectives import communication_matrix
from chakra_trace.convert.pytorch import read_collection
from chakra_trace.schema.enums import CollectiveType, NodeType
from chakra_trace.validate import validate_workload

JOB = Path(__file__).parent / "data" / "alltoall_list"


def test_list_all_to_all_keeps_its_per_peer_sizes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = read_collection(JOB)
    assert len(w) == 2
    for r in range(2):
        t = w[r]
        (c,) = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
        assert t.comm_type[c] == CollectiveType.ALL_TO_ALL
        # each rank sends and receives one 3 x 4 float tensor per peer
        assert json.loads(t.attr(c, "in_split_size")) == [12, 12]
        assert json.loads(t.attr(c, "out_split_size")) == [12, 12]
        assert t.comm_size[c] == 2 * 12 * 4
    assert validate_workload(w).ok
    # one 48-byte tensor to the other rank each way (a rank's own tensor stays home)
    assert communication_matrix(w).bytes.tolist() == [[0.0, 48.0], [48.0, 0.0]]


def test_kineto_alone_reads_the_same_sizes():
    from chakra_trace.convert.profiler import convert_kineto

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w, _ = convert_kineto(sorted(JOB.glob("rank*.kineto.json.gz")))
    for r in range(2):
        t = w[r]
        (c,) = np.flatnonzero(t.types == NodeType.COMM_COLL_NODE)
        assert json.loads(t.attr(c, "in_split_size")) == [12, 12]
        assert json.loads(t.attr(c, "out_split_size")) == [12, 12]
