"""A shared generator model (and a shared master trace) is data: bounded, checked, never a crash.

Issue 34, items 6 and 8 (review defects 5a, 5c, 10's model rows, 11's generate/parallelize rows,
12's RuntimeWarnings): each reproducer of the attack review is a test here. A model file is read
as a bounded document (gzip bombs, size limit, regular files only); its grammar forest,
relations, types and ranges are checked on reading; a sample's size is computed from the count
rules before anything is built and refused past the node limit; `fit`, `parallelize` and
`rescale` refuse what they cannot read with one line naming the file and the node. Inputs are
built here, from the DDP recording in tests/data. Commands that could take unbounded memory on
the code before the fix run in a child under an address-space limit.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.capture.step import SCHEMA
from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.io.et import write_trace
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.node import IOInfo
from chakra_trace.schema.trace import Trace
from chakra_trace.synthesize.generate import (
    ModelFormatError,
    fit,
    read_model,
    sample_baseline,
    sample_detailed,
    split_steps,
    write_model,
)
from chakra_trace.synthesize.generate.budget import layer_target, plan_sample
from chakra_trace.synthesize.generate.model import model_from_dict, model_to_dict
from chakra_trace.synthesize.parallel import ParallelizeError, Plan, parallelize
from chakra_trace.synthesize.rescale import rescale_trace

DATA = Path(__file__).resolve().parent / "data"
DDP = DATA / "corpus" / "ddp"
LIKE = "ddp/step0"
AS_LIMIT = 2 << 30  # RLIMIT_AS of the children: a bomb past the guards dies here, not the machine
DEEP = "[" * 100_000 + "]" * 100_000

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy warnings are failures here


@pytest.fixture(scope="module")
def ddp_model() -> dict:
    """The model fitted on the 2-rank DDP recording (both steps), as its JSON object."""
    w = Workload.open(DDP)
    return model_to_dict(fit({f"ddp/step{i}": s for i, s in enumerate(split_steps(w))}))


def _edit(d: dict, f) -> dict:
    d = copy.deepcopy(d)
    f(d)
    return d


def _prog(d: dict) -> dict:
    return d["programs"][0]


def _first_repeat(d: dict) -> int:
    return _prog(d)["tree_kind"].index(1)


def _write(tmp_path: Path, d: dict | str, name: str = "m.json") -> Path:
    p = tmp_path / name
    p.write_text(d if isinstance(d, str) else json.dumps(d))
    return p


_CHILD = """
import os, sys
from chakra_trace.capture.step import SCHEMA
from chakra_trace.cli import main
rc = 1
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else 1
finally:
    with open("/proc/self/status") as f:
        hwm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
    with open(os.environ["PEAK_FILE"], "w") as f:
        f.write(str(hwm))
sys.exit(rc)
"""


def run_limited(argv: list[str], cwd: Path, timeout: float, env: dict | None = None) -> tuple[int, list[str], int]:
    """The CLI in a child under RLIMIT_AS: (exit status, non-empty stderr lines, peak RSS bytes);
    a child still running after `timeout` seconds is killed and fails the test."""
    peak = cwd / "peak"

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    full = dict(os.environ, PEAK_FILE=str(peak), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    try:
        p = subprocess.run(
            [sys.executable, "-c", _CHILD, *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limits,
            env=full,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"chakra {' '.join(argv)}: still running after {timeout} s")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    return p.returncode, lines, int(peak.read_text()) if peak.exists() else 0


def _one_line_error(rc: int, lines: list[str]) -> str:
    assert rc == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "internal error" not in lines[0], lines
    return lines[0]


# ----------------------------------------------------------------- 5a: reading the model file


def test_gzip_bomb_model_is_refused_by_the_ratio_guard(tmp_path):
    """Review 5a: `read_model` gunzipped without a guard (a 3 MB .json.gz took 3.1 GiB)."""
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b'{"format": "chakra-generator", "version": 1, "pad": "')
        for _ in range(32):
            f.write(b"A" * (1 << 20))
        f.write(b'"}')
    assert p.stat().st_size < 100_000
    with pytest.raises(ModelFormatError, match=r"bomb\.json\.gz.*decompression ratio above"):
        read_model(p)


def test_model_past_the_document_limit_is_refused(ddp_model, tmp_path, monkeypatch):
    p = _write(tmp_path, ddp_model)
    monkeypatch.setenv("CHAKRA_MAX_DOCUMENT_BYTES", "10000")
    with pytest.raises(ModelFormatError, match=r"m\.json: \d+ bytes, more than the 10000 .*CHAKRA_MAX_DOCUMENT_BYTES"):
        read_model(p)
    monkeypatch.delenv("CHAKRA_MAX_DOCUMENT_BYTES")
    assert read_model(p).jobs[0].name == LIKE


def test_model_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "m.json"
    os.mkfifo(fifo)
    rc, lines, _ = run_limited(["generate", "sample", str(fifo), "-o", str(tmp_path / "s" / "s")], tmp_path, 30)
    assert "m.json: a named pipe, not a model file" in _one_line_error(rc, lines)


def test_long_version_is_a_one_line_model_error(ddp_model, tmp_path):
    """Review 11: a 5,000-digit version gave ValueError (internal error)."""
    text = json.dumps(ddp_model).replace('"version": 1', '"version": ' + "9" * 5000, 1)
    with pytest.raises(ModelFormatError, match=r"m\.json:1:\d+: .*an integer of 5000 digits"):
        read_model(_write(tmp_path, text))


# ----------------------------------------------------------------- 5c, 10: a sample's size


def test_repeat_count_bomb_is_refused_before_building(ddp_model, tmp_path):
    """Review 5c: count_a of the first repeat set to 1e5 (a 280 KB model) reached 3.95 GiB at
    `generate sample --layers 3`. Now refused with the figure before anything is built."""
    bomb = _edit(ddp_model, lambda d: _prog(d)["count_a"].__setitem__(_first_repeat(d), 1e5))
    p = _write(tmp_path, bomb)
    argv = ["generate", "sample", str(p), "--like", LIKE, "--layers", "3", "-o", str(tmp_path / "s" / "s")]
    rc, lines, peak = run_limited(argv, tmp_path, 60)
    msg = _one_line_error(rc, lines)
    assert "m.json: a sample like 'ddp/step0' at 3 layers would build" in msg
    assert "nodes per rank (program 0, largest repeat count 300,000), over the limit of" in msg
    assert peak < 600 << 20
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())


def test_the_node_figure_is_exactly_what_would_be_built(ddp_model):
    """The bound is no guess: a count of 100 builds N nodes per rank; a limit of N builds it,
    N - 1 refuses it, naming N."""
    m = model_from_dict(_edit(ddp_model, lambda d: _prog(d)["count_a"].__setitem__(_first_repeat(d), 100.0)))
    w, _ = sample_detailed(m, LIKE, layers=3)
    n = len(w.traces[0])
    assert sample_detailed(m, LIKE, layers=3, max_nodes=n)[0].traces[0].types.size == n
    with pytest.raises(ChakraError, match=f"would build {n:,} nodes per rank .* over the limit of {n - 1:,} nodes"):
        sample_detailed(m, LIKE, layers=3, max_nodes=n - 1)
    with pytest.raises(ChakraError, match=f"would build {n:,} nodes"):
        sample_baseline(m, LIKE, layers=3, max_nodes=n - 1)


def test_the_node_limit_comes_from_the_environment(ddp_model, monkeypatch):
    m = model_from_dict(ddp_model)
    monkeypatch.setenv("CHAKRA_TRACE_MAX_NODES", "100")
    with pytest.raises(ChakraError, match=r"over the limit of 100 nodes \(CHAKRA_TRACE_MAX_NODES\)"):
        sample_detailed(m, LIKE)


def test_count_rules_past_any_limit_are_refused_not_cast(ddp_model):
    """count_b 1e12, a count_a near the float limit, a layer count of 10^30: refused with the
    figure, no int64 overflow or RuntimeWarning on the way."""
    for count_a, count_b in ((0.0, 1e12), (1e300, 0.0)):

        def bomb(d, a=count_a, b=count_b):
            _prog(d)["count_a"][_first_repeat(d)] = a
            _prog(d)["count_b"][_first_repeat(d)] = b

        m = model_from_dict(_edit(ddp_model, bomb))
        with pytest.raises(ChakraError, match=r"would build [\d,.e+]+ nodes per rank"):
            sample_detailed(m, LIKE, layers=3)
    with pytest.raises(ChakraError, match="a layer count of 10{30}"):
        sample_detailed(model_from_dict(ddp_model), LIKE, layers=10**30)


def test_tree_count_1e12_is_refused_on_reading(ddp_model, tmp_path):
    """Review 5c: tree_count 1e12 was refused only by a MemoryError."""
    bomb = _edit(ddp_model, lambda d: _prog(d)["tree_count"].__setitem__(_first_repeat(d), 10**12))
    with pytest.raises(ModelFormatError, match=r"program 0: slot \d+ has 2 template instances .* make 1e\+12"):
        read_model(_write(tmp_path, bomb))


def _with_ranks(d: dict, n: int) -> dict:
    j = d["jobs"][0]
    j.update(ranks=n, rank_program=[j["rank_program"][0]] * n, rank_roles=[j["rank_roles"][0]] * n)
    return d


def test_100k_ranks_model_is_refused_at_once(ddp_model, tmp_path):
    """Review 10: a 700 KB model with 100k ranks made `generate sample` run past 300 s."""
    p = _write(tmp_path, _edit(ddp_model, lambda d: _with_ranks(d, 100_000)))
    t0 = time.perf_counter()
    rc, lines, _ = run_limited(["generate", "sample", str(p), "--like", LIKE, "-o", str(tmp_path / "s")], tmp_path, 60)
    assert "job 'ddp/step0' has 100,000 ranks, more than the 4,096" in _one_line_error(rc, lines)
    assert "CHAKRA_GENERATE_MAX_RANKS" in lines[0]
    assert time.perf_counter() - t0 < 30


def test_ranks_of_one_program_share_one_expansion(ddp_model, monkeypatch):
    """The work per rank is its durations: ranks running one program share its columns."""
    m = model_from_dict(_edit(ddp_model, lambda d: _with_ranks(d, 64)))
    w, _ = sample_detailed(m, LIKE, seed=3)
    a, b = w.traces[0], w.traces[63]
    assert np.shares_memory(a.types, b.types) and np.shares_memory(a.data, b.data)
    assert not np.shares_memory(a.duration, b.duration) and not np.array_equal(a.duration, b.duration)
    monkeypatch.setenv("CHAKRA_GENERATE_MAX_RANKS", "32")
    with pytest.raises(ChakraError, match="64 ranks, more than the 32"):
        sample_detailed(m, LIKE)


def _roots_100k(d: dict) -> None:  # the review's roots_100k: 100k lanes, every one on node 0
    _prog(d).update(tree_roots=[0] * 100_000, lane_kind=[0] * 100_000, lane_attr=[0] * 100_000)


def _tree_child_cycle(d: dict) -> None:
    _prog(d)["tree_child"][0] = 0


def _tree_parent_cycle(d: dict) -> None:
    n = len(_prog(d)["tree_parent"])
    _prog(d)["tree_parent"] = list(range(1, n)) + [0]


def _parents_swapped(d: dict) -> None:  # a consistent child list, parents that disagree with it
    p = _prog(d)["tree_parent"]
    i = next(k for k in range(len(p)) if p[k] > 0)
    p[i] = 0 if p[i] != 0 else 1


def _rel_self(d: dict) -> None:  # the review's rel_self: every relation's u slot set to 0
    _prog(d)["rel_u"] = [0] * len(_prog(d)["rel_u"])


def _self_dependency(d: dict) -> None:  # relation 0 made to depend on its own slot, same instance
    p = _prog(d)
    lo, hi = p["rel_lvl_ptr"][0], p["rel_lvl_ptr"][1]
    p["rel_u"][0] = p["rel_v"][0]
    assert all(p["rel_lvl_type"][q] == 0 for q in range(lo, hi))  # (DELTA levels: the same repeats)
    for q in range(lo, hi):
        p["rel_lvl_b"][q] = 0


@pytest.mark.parametrize(
    "mutate, match",
    [
        (_roots_100k, "tree_roots names a node twice"),
        (_tree_child_cycle, "lane root 0 is also listed in tree_child"),
        (_tree_parent_cycle, "lane root 0 has tree_parent 1, expected -1"),
        (_parents_swapped, r"node \d+ has tree_parent \d+ but is listed as a child of node \d+"),
        (_rel_self, r"relation \d+ has 1 levels; slot 0 is in 0 repeats"),
        (_self_dependency, r"relation 0 makes slot \d+ depend on itself"),
    ],
    ids=["roots_100k", "tree_child_cycle", "tree_parent_cycle", "parents_disagree", "rel_self", "self_dependency"],
)
def test_grammar_and_relation_damage_is_refused_on_reading(ddp_model, tmp_path, mutate, match):
    """Review 10, 11: a tree_parent cycle hung sample, a child cycle recursed without end, a
    self-relation raised IndexError, 100k lanes on one root ran past 60 s."""
    t0 = time.perf_counter()
    with pytest.raises(ModelFormatError, match=r"m\.json: program 0: " + match):
        read_model(_write(tmp_path, _edit(ddp_model, mutate)))
    assert time.perf_counter() - t0 < 10


def test_a_forest_nested_too_deep_is_refused(ddp_model):
    """A chain of 40 nested sequences above one lane's root (sampling recurses per level)."""

    def deepen(d):
        p = _prog(d)
        n = len(p["tree_kind"])
        root = p["tree_roots"][0]
        chain = list(range(n, n + 40))  # new nodes: chain[0] becomes the lane root, chain[-1] holds the old root
        p["tree_kind"] += [0] * 40
        p["tree_count"] += [1] * 40
        p["count_a"] += [0.0] * 40
        p["count_b"] += [1.0] * 40
        p["tree_slot0"] += [0] * 40
        p["tree_nslots"] += [0] * 40
        p["tree_parent"] += [-1] + chain[:-1]
        p["tree_parent"][root] = chain[-1]
        kids = [p["tree_child"][p["tree_child_ptr"][v] : p["tree_child_ptr"][v + 1]] for v in range(n)]
        kids += [[c] for c in chain[1:]] + [[root]]
        p["tree_child"] = [c for k in kids for c in k]
        p["tree_child_ptr"] = [0] + list(np.cumsum([len(k) for k in kids]).tolist())
        p["tree_roots"][0] = chain[0]

    with pytest.raises(ModelFormatError, match="nests more than 32 levels"):
        model_from_dict(_edit(ddp_model, deepen))


def test_relation_cycle_drops_edges_and_samples(ddp_model):
    """Relations that make a cycle at sampling (u after v and v after u, same instance) are not
    an error: the sample drops the edges that go against the op order and says how many."""

    def reverse_one(d):
        p = _prog(d)
        r = next(
            r
            for r in range(len(p["rel_v"]))
            if p["rel_v"][r] != p["rel_u"][r]
            and p["rel_every"][r]
            and all(
                p["rel_lvl_type"][q] == 0 and p["rel_lvl_b"][q] == 0
                for q in range(p["rel_lvl_ptr"][r], p["rel_lvl_ptr"][r + 1])
            )
        )
        lo, hi = p["rel_lvl_ptr"][r], p["rel_lvl_ptr"][r + 1]
        for k, v in (("v", p["rel_u"][r]), ("u", p["rel_v"][r]), ("kind", p["rel_kind"][r]), ("every", True)):
            p["rel_" + k].append(v)
        for k in ("lvl_type", "lvl_ref", "lvl_b"):
            p["rel_" + k] += p["rel_" + k][lo:hi]
        p["rel_lvl_ptr"].append(p["rel_lvl_ptr"][-1] + hi - lo)
        p["rel_app_ptr"].append(p["rel_app_ptr"][-1])

    w, info = sample_detailed(model_from_dict(_edit(ddp_model, reverse_one)), LIKE)
    assert info.dropped_deps > 0
    assert w.traces[0].graph().order(partial=True).size == len(w.traces[0])  # no cycle left


# ----------------------------------------------------------------- 11, 12: values and types


def _collective_role(role: int):
    """The DDP job's collectives named as a rank's role-th communicator (its ranks name none)."""

    def f(d: dict) -> None:
        assert d["jobs"][0]["rank_roles"] == [[], []]
        for t in d["vocabulary"]["tokens"]:
            if t[0] == 7:
                t[4] = role

    return f


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: _prog(d)["count_b"].__setitem__(0, float("nan")), r"'count_b' holds nan: values must be finite"),
        (lambda d: _prog(d)["count_a"].__setitem__(0, float("inf")), r"'count_a' holds inf"),
        (lambda d: _prog(d)["tree_count"].__setitem__(0, "1"), r"'tree_count' should be a flat list of int64"),
        (lambda d: _prog(d)["tree_kind"].__setitem__(0, 257), r"'tree_kind' holds 257, out of the range of int8"),
        (lambda d: _prog(d)["dur"].__setitem__(0, 1e308), r"'dur' should be a flat list of int64"),
        (lambda d: _prog(d)["dur"].__setitem__(0, -5), r"'dur' holds -5, outside 0..9007199254740992"),
        (lambda d: _prog(d)["tensor_size"].__setitem__(0, -1), r"'tensor_size' holds -1"),
        (lambda d: _prog(d)["slot_token"].__setitem__(0, [1]), r"'slot_token' should be a flat list"),
        (lambda d: _prog(d)["tree_roots"].__setitem__(0, 1 << 70), r"'tree_roots' should be a flat list of int64"),
        (lambda d: _prog(d).__setitem__("layers", 0), r"'layers' is 0, expected an integer >= 1"),
        (lambda d: d["vocabulary"]["tokens"].__setitem__(0, [1 << 70, 0, "x", 0, 0]), r"vocabulary token 0: expected"),
        (lambda d: d["vocabulary"]["tokens"].__setitem__(0, [99, 0, "x", -1, -1]), r"vocabulary token 0: expected"),
        (lambda d: d["global"]["token_jitter"].__setitem__(0, 1e300), r"'token_jitter' holds 1e\+300, outside 0..0.5"),
        (lambda d: d["jobs"][0]["features"].update(nodes=float("nan")), r"features: nodes should be a finite number"),
        (lambda d: d["jobs"][0]["features"]["op_mix"].update(x="abc"), r"op_mix\['x'\] should be a finite number"),
        (lambda d: d["jobs"][0].update(batch="8"), r"batch should be a finite number, got '8'"),
        (lambda d: d["jobs"][0].update(groups={"g": [10**18, -5]}), r"group 'g' must list ranks 0..1"),
        (lambda d: d["jobs"][0].update(ranks=0, rank_program=[], rank_roles=[]), r"'ranks' is 0"),
        (_collective_role(3), r"rank 0 names 0 communicators; its program's collectives use 4"),
        (lambda d: _prog(d)["peer"].__setitem__(0, 10**9), r"rank 1000000000"),
    ],
)
def test_wrong_values_and_types_are_one_line_model_errors(ddp_model, mutate, match):
    """Review 11, 12: NaN counts were cast with a RuntimeWarning, strings and bools read as
    numbers, huge integers overflowed deep in sampling."""
    with pytest.raises(ModelFormatError, match=r"^m\.json: .*" + match):
        model_from_dict(_edit(ddp_model, mutate), "m.json")


def test_extreme_valid_values_sample_without_warnings(ddp_model):
    """Sizes of 2^62, durations of 2^53 µs, a batch scale of 1e300 and the most jitter: the
    sample clips what no column holds, and numpy says nothing."""

    def extreme(d):
        p = _prog(d)
        p["comm_size"] = [1 << 62] * len(p["comm_size"])
        p["comm_slope"] = [1e300] * len(p["comm_slope"])
        p["dur"] = [2**53] * len(p["dur"])
        p["num_ops"] = [1 << 62] * len(p["num_ops"])

    m = model_from_dict(_edit(ddp_model, extreme))
    w, _ = sample_detailed(m, LIKE, layers=3, batch_scale=1e300, jitter=100.0)
    t = w.traces[0]
    assert t.duration.max() <= 2**63 and (t.comm_size >= 0).all()
    for bad in ({"layers_scale": float("inf")}, {"layers_scale": float("nan")}, {"batch_scale": float("inf")}):
        with pytest.raises(ChakraError, match="must be a finite number"):
            sample_detailed(m, LIKE, **bad)
    with pytest.raises(ChakraError, match=r"jitter must be a number in 0..100"):
        sample_detailed(m, LIKE, jitter=1e9)


def test_random_mutations_are_refused_or_sample_cleanly(ddp_model):
    """Seeded fuzzing of the model's arrays: every damaged model is refused on reading, or
    samples (under a small node limit) with nothing but a ChakraError and no numpy warning."""
    rnd = random.Random(34)
    values = [-(1 << 63), -2, -1, 0, 1, 2, 3, 1 << 31, 1 << 62, 10**19, 0.5, 1e300, float("nan"), "1", None, True, []]
    fields = [(k, v) for k, v in _prog(ddp_model).items() if isinstance(v, list) and v]
    read_ok = sampled = 0
    for _ in range(150):
        d = copy.deepcopy(ddp_model)
        for _ in range(rnd.choice((1, 1, 2, 3))):
            key, arr = rnd.choice(fields)
            _prog(d)[key][rnd.randrange(len(arr))] = rnd.choice(values)
        try:
            m = model_from_dict(d, "m.json")
        except ModelFormatError as e:
            assert str(e).startswith("m.json: ") and "\n" not in str(e)
            continue
        read_ok += 1
        for layers in (None, 3):
            try:
                sample_detailed(m, LIKE, layers=layers, max_nodes=200_000)
                sampled += 1
            except ChakraError:
                pass
    assert read_ok > 0 and sampled > 0  # (not every mutation is refused: the test reaches sampling)


# ----------------------------------------------------------------- corpus models: nothing lost


@pytest.mark.parametrize("job", ["ddp", "tp", "pp"])
def test_corpus_models_round_trip_and_plan_what_they_build(job, tmp_path):
    """Every check passes on fitted models; the planned node count is what sampling builds."""
    w = Workload.open(DATA / "corpus" / job)
    model = fit({job: w}, max_period=8192)
    write_model(model, tmp_path / "m.json.gz")
    again = read_model(tmp_path / "m.json.gz")
    assert model_to_dict(again) == model_to_dict(model)
    j = again.jobs[0]
    for scale in (1.0, 2.0, 3.0):
        target = layer_target(j, scale)
        plan = plan_sample(again, j, target)
        s, info = sample_detailed(again, j.name, layers=target)
        for r in s.ranks:  # (a rank may run its communicator's first member's program: `agree`)
            assert len(s.traces[r]) == plan[info.rank_program[r]].nodes


# ----------------------------------------------------------------- fit, parallelize, rescale


def _trace_with_type(t: int) -> Trace:
    b = TraceBuilder()
    x = b.comp("a", 10, num_ops=100)
    b.add("odd", t, data_deps=[x], duration=5)
    return b.build()


def test_fit_refuses_an_unknown_node_type_naming_file_and_node(tmp_path, capsys):
    """Review 11: `generate fit` on node type 99 raised IndexError (internal error)."""
    write_trace(_trace_with_type(99), tmp_path / "type99.0.et")
    rc = main(["generate", "fit", str(tmp_path / "type99"), "-o", str(tmp_path / "m.json")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    msg = _one_line_error(rc, err)
    assert "type99.0.et (node id 1): node type 99 is not a Chakra node type" in msg
    assert not (tmp_path / "m.json").exists()


def test_fit_refuses_negative_sizes_without_numpy_warnings(tmp_path):
    """Review 12: negative sizes made `generate fit` print numpy RuntimeWarnings (log2 of a
    negative); `chakra validate` calls them errors, and the fit names the node."""
    b = TraceBuilder()
    x = b.comp("a", 10, num_ops=100)
    b.collective("ALL_REDUCE", -4096, deps=[x], duration=5)
    write_trace(b.build(), tmp_path / "neg.0.et")
    with pytest.raises(ChakraError, match=r"neg\.0\.et \(node id 1\): comm_size -4096 is out of range"):
        fit({"neg": Workload.open(tmp_path / "neg")})


def _capture_deep(schema: bool = False) -> Trace:
    meta = {"capture": DEEP, **({"schema": SCHEMA} if schema else {})}
    b = TraceBuilder(metadata=meta)
    b.comp("a", 10, num_ops=100, phase="forward", module="layers.0")
    return b.build()


def test_fit_reads_past_deep_capture_metadata(tmp_path):
    """Review 11: deep `capture` metadata made `generate fit` raise RecursionError. The fit only
    conditions on its batch: metadata that does not read gives none."""
    model = fit({"deep": _capture_deep()})
    assert model.jobs[0].batch is None


def test_parallelize_deep_capture_metadata_is_one_line_naming_the_file(tmp_path, capsys):
    """Review 11: `parallelize` on deep `capture` metadata raised RecursionError."""
    write_trace(_capture_deep(), tmp_path / "master.et")
    rc = main(["parallelize", str(tmp_path / "master.et"), "--tp", "2"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert "master.et: capture metadata: not accepted as JSON: arrays or objects nested too deeply" in _one_line_error(
        rc, err
    )


def _master(module: str = "layers.{}.mlp", shapes0: str = "[[2,4]]") -> Trace:
    b = TraceBuilder(metadata={"capture": json.dumps({"batch": 2, "seq": 4, "parameters": []})})
    prev: list[int] = []
    for phase, layers in (("forward", (0, 1)), ("backward", (1, 0))):
        for layer in layers:
            shapes = shapes0 if (phase, layer) == ("forward", 0) else "[[2,4]]"
            out = IOInfo(shapes=shapes, types='["Tensor(float)"]')
            x = b.comp(
                f"{phase}{layer}",
                num_ops=100,
                tensor_size=64,
                deps=prev,
                phase=phase,
                module=module.format(layer),
                outputs=out,
            )
            prev = [x]
    return b.build()


def test_parallelize_bad_node_fields_name_the_node():
    assert len(parallelize(_master(), Plan(pp=2)).traces) == 2  # (the master itself is fine)
    with pytest.raises(ParallelizeError, match="node 0 output shapes: not accepted as JSON: .* nested too deeply"):
        parallelize(_master(shapes0=DEEP), Plan(pp=2))
    with pytest.raises(ParallelizeError, match=r"layer number '0?9999.*' is out of range"):
        parallelize(_master(module="layers.{}" + "9" * 5000), Plan(pp=2))


def test_parallelize_checks_the_capture_metadata():
    for about, match in (
        ({"batch": "2", "seq": 4}, r"capture metadata: batch '2' is not a positive integer"),
        ({"batch": 2, "seq": 4, "parameters": [["w", "x", 4, 0, 0]]}, r"capture metadata: parameter 0 is"),
        ({"batch": 2, "seq": 4, "parameters": {"w": 1}}, r"parameters .* is not a list"),
    ):
        b = TraceBuilder(metadata={"capture": json.dumps(about)})
        b.comp("a", 10, num_ops=100, phase="forward", module="layers.0")
        with pytest.raises(ParallelizeError, match=match):
            parallelize(b.build(), Plan())


def test_rescale_deep_capture_metadata_is_a_one_line_error():
    """Review 11 (the same metadata through `transform --batch`, i.e. `rescale_trace`)."""
    with pytest.raises(ChakraError, match="rescale: capture metadata: not accepted as JSON: .* nested too deeply"):
        rescale_trace(_capture_deep(schema=True), batch=4)


# ----------------------------------------------------------------- slow: the full-size inputs


def _lanes_model(base: dict, n: int) -> dict:
    """A valid model whose one program has `n` lanes of one op each."""
    tok = next(i for i, t in enumerate(base["vocabulary"]["tokens"]) if t[0] == 4)
    p = {
        "layers": 1,
        "ranks_pooled": 1,
        "tree_kind": [0, 2] * n,
        "tree_count": [1] * (2 * n),
        "tree_parent": [x for i in range(n) for x in (-1, 2 * i)],
        "tree_child_ptr": [0] + [x for i in range(n) for x in (i + 1, i + 1)],
        "tree_child": [2 * i + 1 for i in range(n)],
        "tree_slot0": [x for i in range(n) for x in (0, i)],
        "tree_nslots": [0, 1] * n,
        "tree_roots": [2 * i for i in range(n)],
        "count_a": [0.0] * (2 * n),
        "count_b": [1.0] * (2 * n),
        "lane_kind": [0] * n,
        "lane_attr": [2] * n,
        "slot_token": [tok] * n,
        "slot_lane": list(range(n)),
        "inst_ptr": list(range(n + 1)),
        "key": list(range(n)),
        "seq": [-1] * n,
        "name": [0] * n,
        "comm_size": [0] * n,
        "comm_slope": [0.0] * n,
        "num_ops": [0] * n,
        "tensor_size": [0] * n,
        "peer": [-1] * n,
        "tag": [-1] * n,
        "phase": [0] * n,
        "dur_ptr": list(range(n + 1)),
        "dur": [5] * n,
        "rel_lvl_ptr": [0],
        "rel_app_ptr": [0],
    }
    p.update({f"rel_{k}": [] for k in ("v", "u", "kind", "lvl_type", "lvl_ref", "lvl_b", "every", "app")})
    job = dict(base["jobs"][0], name="lanes", ranks=1, rank_program=[0], rank_roles=[[]], groups={}, layers=1)
    return dict(base, programs=[p], jobs=[job])


@pytest.mark.slow
def test_100k_valid_lanes_sample_in_linear_time(ddp_model):
    """Review 10's lanes done right (one root per lane): linear, seconds for 100k lanes."""
    m = model_from_dict(_lanes_model(ddp_model, 100_000))
    t0 = time.perf_counter()
    w, _ = sample_detailed(m, "lanes")
    assert len(w.traces[0]) == 100_000 and time.perf_counter() - t0 < 60


@pytest.mark.slow
def test_2gb_gzip_bomb_model_through_the_cli(tmp_path):
    """Review 5a at full size: 2 GiB of a JSON string in a 2 MB gzip (was 2.1 GiB of memory)."""
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b'{"format": "chakra-generator", "version": 1, "pad": "')
        for _ in range(2048):
            f.write(b"A" * (1 << 20))
        f.write(b'"}')
    rc, lines, peak = run_limited(["generate", "sample", str(p), "-o", str(tmp_path / "s" / "s")], tmp_path, 60)
    assert "bomb.json.gz (decompressed byte offset" in _one_line_error(rc, lines)
    assert peak < 300 << 20
