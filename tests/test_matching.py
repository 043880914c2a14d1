"""The one send/receive pairing rule (`timeline.matching`) against its definition, written the
slow obvious way: per (src, dst, tag), the k-th send in its rank's order meets the k-th receive."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.timeline.matching import p2p_rows, pair_p2p

op = st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 1), st.booleans())  # src dst tag recv


def _reference(ops, seq):
    queues: dict = {}
    for i in sorted(range(len(ops)), key=lambda i: seq[i]):
        src, dst, tag, recv = ops[i]
        queues.setdefault((src, dst, tag, recv), []).append(i)
    pairs = set()
    for (src, dst, tag, recv), sends in queues.items():
        if not recv:
            pairs |= set(zip(sends, queues.get((src, dst, tag, True), [])))
    return pairs


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40), st.randoms())
def test_pairing_is_the_kth_send_meeting_the_kth_receive(ops, rnd):
    seq = list(range(len(ops)))
    rnd.shuffle(seq)  # each op's order on its rank: any order, not the input's
    cols = [np.array([o[j] for o in ops], np.int64) for j in range(4)]
    s, r = pair_p2p(cols[0], cols[1], cols[2], np.array(seq, np.int64), cols[3].astype(bool))
    assert set(zip(s.tolist(), r.tolist())) == _reference(ops, seq)
    assert len(set(s.tolist()) | set(r.tolist())) == 2 * s.size  # nobody meets twice


def test_rows_of_a_trace_name_their_ranks_and_a_missing_tag_is_zero():
    b = TraceBuilder()
    b.send(3, 10, tag=5)
    b.recv(2, 10)
    cols = p2p_rows(b.build(), rank=1)
    assert cols["src"].tolist() == [1, 2] and cols["dst"].tolist() == [3, 1]
    assert cols["recv"].tolist() == [False, True] and cols["tag"].tolist() == [5, 0]
