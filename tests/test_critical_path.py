import itertools

import numpy as np
import pytest

from chakra_trace import Trace, TraceBuilder
from chakra_trace.analyze.critical_path import critical_path
from chakra_trace.errors import ChakraError


def test_diamond_and_control_edges():
    b = TraceBuilder()
    a = b.comp("a", 10)
    x = b.comp("x", 5, deps=[a])
    y = b.comp("y", 30, deps=[a])
    z = b.add("z", duration=1, data_deps=[x], ctrl_deps=[y])  # control edges count too
    b.add("missing-dep", duration=2, data_deps=[999])  # ignored dependency
    t = b.build()
    cp = critical_path(t)
    assert cp.length_us == 41 and cp.ids.tolist() == [a, y, z]
    assert cp.finish_us.tolist() == [10, 15, 40, 41, 2]


def test_rows_out_of_order_and_cycles():
    b = TraceBuilder()
    b.add("late", id=1, duration=4, data_deps=[2])
    b.add("early", id=2, duration=6)
    assert critical_path(b.build()).ids.tolist() == [2, 1]
    b = TraceBuilder()
    b.add("a", id=1, data_deps=[2])
    b.add("b", id=2, data_deps=[1])
    with pytest.raises(ChakraError, match="cycle"):
        critical_path(b.build())
    assert critical_path(Trace(0)).length_us == 0


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 9
    b = TraceBuilder()
    for i in range(n):
        deps = [j for j in range(i) if rng.random() < 0.3]
        b.add(f"n{i}", id=i, duration=int(rng.integers(1, 20)), data_deps=deps)
    t = b.build()
    best = 0
    for k in range(1, n + 1):  # every increasing subsequence that is a dependency chain
        for chain in itertools.combinations(range(n), k):
            if all(chain[j] in t.data_deps(chain[j + 1]).tolist() for j in range(k - 1)):
                best = max(best, int(t.duration[list(chain)].sum()))
    assert critical_path(t).length_us == best
