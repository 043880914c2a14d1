"""Recorded differential cases against the real ASTRA-sim (issue 15): random networks, systems,
workloads, communicator groups and both backends from `tools/astra/sweep.py`, with ASTRA-sim's
per-NPU finish and exposed-communication times. `--compat astra` must give the same numbers on
every NPU. Cases of a known difference class are strict xfails naming the cause (fixing the class
turns them into failures: drop the mark then); cases ASTRA-sim itself fails on check that we
still do what we did when they were recorded (finish, or refuse with a ChakraError).

Regenerate with `tools/astra/sweep.py --record` (tools/astra/README.md); the binary is not needed
here: each case rebuilds its workload from its description (`tools/astra/cases.py`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from chakra_trace.errors import ChakraError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "astra"))
import cases as astra_cases  # noqa: E402  (tools/astra/cases.py: rebuilds a case's workload)

FIXTURES = [json.loads(line) for line in (ROOT / "tests/data/astra-sim/sweep.jsonl").open()]

#: Difference classes still open, by the name a fixture's "differs" field gives.
CAUSES = json.loads((ROOT / "tests/data/astra-sim/sweep_causes.json").read_text())


def _ours(case: dict):
    return astra_cases.simulate_case(case)


def _param(f: dict):
    marks = []
    if f.get("differs"):
        marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=CAUSES[f["differs"]]))
    return pytest.param(f, marks=marks, id=f"{f['case']['id']}:{f['class']}")


COMPARED = [_param(f) for f in FIXTURES if "finish" in f]
ASTRA_FAILED = [pytest.param(f, id=f"{f['case']['id']}:{f['class']}") for f in FIXTURES if "astra_error" in f]


@pytest.mark.parametrize("fixture", COMPARED)
def test_same_as_astra_sim(fixture):
    r = _ours(fixture["case"])
    assert [int(x) for x in r.finish_ns] == fixture["finish"]
    assert [int(x) for x in r.exposed_comm_ns] == fixture["exposed"]


@pytest.mark.parametrize("fixture", ASTRA_FAILED)
def test_where_astra_sim_fails(fixture):
    """ASTRA-sim aborts, hangs or crashes here (fixture["astra_error"]); ours is defined: it
    finishes with a time for every NPU, or refuses with a ChakraError, as recorded."""
    want = fixture["ours"]
    try:
        r = _ours(fixture["case"])
    except ChakraError as e:
        assert want.startswith("refuses"), f"now refuses: {e}"
        return
    assert want == "finishes", f"recorded {want!r}, now finishes"
    assert len(r.finish_ns) == astra_cases.npus_of(fixture["case"]) and (r.finish_ns >= 0).all()


def test_fixtures_cover_every_kind():
    """The recorded set keeps its diversity: both backends, 1- to 4-D networks, every workload
    kind, all four collectives, groups, and ASTRA-sim failures."""
    kinds = {astra_cases.workload_kind(f["case"]) for f in FIXTURES}
    assert {"coll", "train", "p2p", "multi", "coll+comp", "mem", "roof"} <= kinds
    assert {f["case"]["backend"] for f in FIXTURES} == {"aware", "unaware"}
    assert {len(f["case"]["network"]["npus_count"]) for f in FIXTURES} == {1, 2, 3, 4}
    assert any(f["case"].get("comm_groups") for f in FIXTURES)
    assert ASTRA_FAILED and COMPARED
    for f in FIXTURES:
        assert f.get("differs") is None or f["differs"] in CAUSES
