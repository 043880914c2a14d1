"""Costs from shapes and collective names, on shapes recorded in the real traces."""

import pytest

from chakra_trace.convert.flops import Cost, op_cost
from chakra_trace.io.collective_names import (
    SCALAR_TYPE_BYTES,
    classify,
    is_bookkeeping,
    is_comm_op_name,
    message_bytes,
    normalize,
    tensor_itemsize,
)
from chakra_trace.schema.enums import CollectiveType as C

F = "Tensor(float)"


def test_matmuls():
    c = op_cost("aten::mm", [[128, 64], [64, 192]], [F, F], [[128, 192]], [F])
    assert c.flops == 2 * 128 * 64 * 192 and c.bytes == 4 * (128 * 64 + 64 * 192 + 128 * 192)
    c = op_cost("aten::addmm", [[64], [128, 64], [64, 64], [], []], [F, F, F, "Int", "Int"], [[128, 64]], [F])
    assert c.flops == 2 * 128 * 64 * 64 + 128 * 64
    c = op_cost("aten::bmm", [[32, 16, 16], [32, 16, 16]], [F, F], [[32, 16, 16]], [F])
    assert c.flops == 2 * 32 * 16 * 16 * 16
    c = op_cost("aten::linear", [[16, 8, 64], [192, 64], [192]], [F, F, F], [[16, 8, 192]], [F])
    assert c.flops == 2 * 16 * 8 * 192 * 64 + 16 * 8 * 192
    c = op_cost("aten::matmul", [[16, 8, 64], [64, 192]], [F, F], [[16, 8, 192]], [F])
    assert c.flops == 2 * 16 * 8 * 192 * 64


def test_convolutions():
    shapes = [[32, 3, 224, 224], [64, 3, 7, 7], [[], []], [[], []], [[], []], [], [], [], []]
    types = [
        F,
        F,
        "GenericList[Int,Int]",
        "GenericList[Int,Int]",
        "GenericList[Int,Int]",
        "Int",
        "Bool",
        "Bool",
        "Bool",
    ]
    c = op_cost("aten::cudnn_convolution", shapes, types, [[32, 64, 112, 112]], [F])
    assert c.flops == 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7
    bw_shapes = [
        [32, 2048, 7, 7],
        [32, 512, 7, 7],
        [2048, 512, 1, 1],
        [[]],
        [[], []],
        [[], []],
        [[], []],
        [],
        [[], []],
        [],
        [[], [], []],
    ]
    bw_types = [
        F,
        F,
        F,
        "GenericList[Int]",
        "GenericList[Int,Int]",
        "GenericList[Int,Int]",
        "GenericList[Int,Int]",
        "Bool",
        "GenericList[Int,Int]",
        "Int",
        "GenericList[Bool,Bool,Bool]",
    ]
    fwd = 2 * 32 * 2048 * 7 * 7 * 512
    c = op_cost("aten::convolution_backward", bw_shapes, bw_types, [], [], in_values=[0] * 10 + [[True, True, False]])
    assert c.flops == 2 * fwd
    c = op_cost("aten::convolution_backward", bw_shapes, bw_types, [], [], in_values=[0] * 10 + [[False, True, True]])
    assert c.flops == fwd + 32 * 2048 * 7 * 7


def test_elementwise_reductions_and_free_ops():
    c = op_cost("aten::add_", [[16, 8, 192], [192], []], [F, F, "Int"], [[16, 8, 192]], [F])
    assert c.flops == 16 * 8 * 192 and c.bytes == 4 * (2 * 16 * 8 * 192 + 192)
    c = op_cost("aten::_softmax", [[8, 4, 16, 16], [], []], [F, "Int", "Bool"], [[8, 4, 16, 16]], [F])
    assert c.flops == 5 * 8 * 4 * 16 * 16
    assert op_cost("aten::view", [[8, 16]], [F], [[128]], [F]) == Cost(0, 0)
    c = op_cost(
        "aten::embedding",
        [[128, 64], [8, 16], [], [], []],
        [F, "Tensor(long int)", "Int", "Bool", "Bool"],
        [[8, 16, 64]],
        [F],
    )
    assert c.flops == 0 and c.bytes == 128 * 64 * 4 + 8 * 16 * 8 + 8 * 16 * 64 * 4
    c = op_cost("aten::my_custom_op", [[10]], [F], [[10]], [F])
    assert c.flops is None and c.bytes == 80  # unknown op: bytes still known
    c = op_cost("aten::cat", [[[2, 3], [4, 3]], []], ["GenericList[Tensor(float),Tensor(float)]", "Int"], [[6, 3]], [F])
    assert c.flops == 0 and c.bytes == 4 * (6 + 12 + 18)


@pytest.mark.parametrize(
    "name,expected",
    [
        ("c10d::allreduce_", C.ALL_REDUCE),
        ("nccl:all_reduce", C.ALL_REDUCE),
        ("gloo:all_gather", C.ALL_GATHER),
        ("allreduce", C.ALL_REDUCE),
        ("_allgather_base", C.ALL_GATHER),
        ("c10d::_allgather_base_", C.ALL_GATHER),
        ("allgather_into_tensor_coalesced", C.ALL_GATHER),
        ("reduce_scatter_tensor_coalesced", C.REDUCE_SCATTER),
        ("c10d::_reduce_scatter_base_", C.REDUCE_SCATTER),
        ("all_to_allv", C.ALL_TO_ALL),
        ("c10d::alltoall_base_", C.ALL_TO_ALL),
        ("broadcast", C.BROADCAST),
        ("c10d::reduce_", C.REDUCE),
        ("c10d::gather_", C.GATHER),
        ("c10d::scatter_", C.SCATTER),
        ("c10d::barrier", C.BARRIER),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", C.ALL_REDUCE),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", C.BROADCAST),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", C.REDUCE_SCATTER),
        ("ncclDevKernel_AllGather_RING_LL", C.ALL_GATHER),
        ("reduce_scatter_block", C.REDUCE_SCATTER_BLOCK),
    ],
)
def test_collective_names(name, expected):
    k = classify(name)
    assert k.collective == expected and k.p2p is None and k.is_comm


def test_point_to_point_and_others():
    assert classify("c10d::send").p2p == "send" and classify("c10d::recv_").p2p == "recv"
    assert classify("nccl:recv").p2p == "recv" and classify("c10d::recv_any_source_").p2p == "recv"
    assert classify("ncclDevKernel_SendRecv").p2p == "sendrecv"
    for name in ("wait", "record_param_comms", "aten::mm", "c10d::frobnicate_"):
        assert not classify(name).is_comm
    assert is_bookkeeping("wait") and not is_bookkeeping("allreduce")
    assert is_comm_op_name("c10d::frobnicate_") and not is_comm_op_name("aten::mm")
    assert normalize("c10d::_allgather_base_") == "allgather"


def test_sizes():
    assert tensor_itemsize("Tensor(float)") == 4 and tensor_itemsize("Tensor(long int)") == 8
    assert tensor_itemsize("Tensor(c10::BFloat16)") == 2 and tensor_itemsize("Int") is None
    assert SCALAR_TYPE_BYTES["Float"] == 4 and SCALAR_TYPE_BYTES["Long"] == 8
    assert message_bytes(C.ALL_GATHER, 8, 16) == 8 and message_bytes(C.SCATTER, 16, 8) == 8
    assert message_bytes(C.BARRIER, 4, 4) == 0
