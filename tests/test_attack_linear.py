"""Per-group and per-name work stays linear (issue 34 item 6, review defect 10), and the rewrites
that made it so change no output.

- Commands that read a job (catalog add, convert astra-sim, timeline, predict --comm table)
  make the same number of whole-column passes for 40 groups as for 160: counted on the trace's
  own columns (`test_attack_output._Counted`).
- Names are looked up in dicts, not lists: `Trace.group_code` (every `set_attr(PG_NAME)`) and
  the generator's roles compare a name with O(1) others, however many groups there are:
  counted on the names' own `__eq__`.
- The simulator prices a collective once per (plan, members, start times relative to the
  earliest): without congestion a run shifted in time is the same run shifted.
- Each rewrite against the per-group loop it replaced, on jobs that exercise its cases.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import Attr, CollectiveType, NodeType
from chakra_trace.schema.groups import group_rows, named_groups
from test_attack_output import _scans
from test_sim_shortcuts import _case


# ------------------------------------------------------------------------------ whole-column passes
def _profile():
    from chakra_trace.calibrate import ComputeModel, SystemProfile, fit_alpha_beta, fit_network

    sizes = [4096, 65536, 1 << 20]
    fits = [
        fit_alpha_beta(sizes, [5e4 + 0.5 * s for s in sizes], collective=c, ranks=2)
        for c in ("all_reduce", "all_gather", "broadcast")
    ]
    compute = ComputeModel(2000.0, [1900.0, 2100.0], [[1e4, 5.0], [1e8, 50.0]], 20.0)
    return SystemProfile("gloo", fits, {2: fit_network(fits, 2)}, compute, {"host": "test"})


def _commands(out):
    from chakra_trace.calibrate import predict
    from chakra_trace.catalog.features import extract
    from chakra_trace.convert.astra_sim import to_astra_sim
    from chakra_trace.visualize.timeline import build_timeline

    profile = _profile()
    return {
        "catalog add": lambda w: extract("job", w),
        "convert astra-sim": lambda w: to_astra_sim(w, out / "astra", even_sizes="max"),
        "timeline": build_timeline,
        "predict --comm table": lambda w: predict(w, profile, compute="model", comm="table"),
    }


@pytest.mark.parametrize("name", ["catalog add", "convert astra-sim", "timeline", "predict --comm table"])
def test_commands_make_no_pass_per_group(name, tmp_path):
    """Reproducer (defect 10, `coll_100000_each_own_pg`: catalog add, convert astra-sim,
    timeline and predict each ran over 120 s on 100,000 collectives in their own groups): a
    mask over the whole trace per group (`group_rows`, `group_ranks` in a loop) made the work
    groups x nodes. The passes over whole columns are the same for 40 groups and for 160."""
    run = _commands(tmp_path)[name]
    few, many = _scans(run, 40), _scans(run, 160)
    assert many <= few + 2, (few, many)


def _distinct_types(n: int) -> Workload:
    """Two ranks of n collectives, each of its own (unknown) comm_type: a hostile trace."""
    from test_attack_output import _counted

    traces = {}
    for r in range(2):
        b = TraceBuilder()
        for i in range(n):
            b.comp("mm", 10, start=i * 100)
            b.add("x", NodeType.COMM_COLL_NODE, duration=5, start=i * 100 + 20, comm_type=100 + i, comm_size=1024)
        traces[r] = _counted(b.build())
    return Workload(traces, {})


def test_select_features_make_no_pass_per_collective_type():
    """`select` (job_features) priced each distinct (comm_type, group size) with a mask over the
    trace: a trace whose collectives each carry their own comm_type made it types x nodes."""
    from chakra_trace.analyze.select.features import job_features
    from test_attack_output import _Counted

    def scans(n):
        w = _distinct_types(n)
        _Counted.n, _Counted.ops = len(w.traces[0]), 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            job_features(w)
        return _Counted.ops

    few, many = scans(40), scans(160)
    assert many <= few + 2, (few, many)


# ------------------------------------------------------------------------------ names in dicts
class _Name(str):
    """A group name that counts how often it is compared for equality (a list look-up compares
    it with every name before it; a dict, with none but its own)."""

    eq = 0
    __hash__ = str.__hash__

    def __eq__(self, other):
        _Name.eq += 1
        return str.__eq__(self, other)

    def __ne__(self, other):
        _Name.eq += 1
        return str.__ne__(self, other)

    def __str__(self):  # (str() of it stays itself: the code under test calls str() on names)
        return self


def _chain(n: int):
    b = TraceBuilder()
    prev: list[int] = []
    for i in range(n):
        prev = [b.collective("ALL_REDUCE", 1024, deps=prev, duration=5, start=10 * i, pg_name=f"g{i}")]
    return b.build()


def test_setting_many_group_names_compares_each_with_few():
    """Reproducer: `Trace.group_code` looked every name up with `groups.index`, so setting the
    group of n collectives, each its own, compared n^2 / 2 names (a converter naming 100,000
    groups spent minutes there)."""

    def compares(n):
        t = _chain(n)
        t.groups = []
        names = [_Name(f"h{i}") for i in range(n)]
        _Name.eq = 0
        t.set_attr(Attr.PG_NAME, np.array(names, dtype=object), np.arange(n))
        t.set_attr(Attr.PG_NAME, np.array(names, dtype=object), np.arange(n))  # every name known now
        assert t.groups == names and t.pg_name.tolist() == list(range(n))
        return _Name.eq

    few, many = compares(300), compares(1200)
    assert many <= 4 * few + 10, (few, many)


def test_group_codes_follow_the_list():
    """The dict beside `groups` follows the list: a list replaced, grown by another trace that
    shares it (`slice`), an item edited in place (once its old name is looked up)."""
    t = _chain(4)
    assert [t.group_code(f"g{i}") for i in range(4)] == [0, 1, 2, 3] and t.group_code("new") == 4
    t.groups = ["x", "g0", "x"]
    assert t.group_code("x") == 0 and t.group_code("g0") == 1 and t.group_code("g1") == 3
    view = t.slice(0, 2)
    assert view.groups is t.groups
    assert view.group_code("v") == 4 and t.group_code("v") == 4 and t.group_code("w") == 5
    t.groups[1] = "renamed"  # (in place: noticed when the old name is asked for)
    assert t.group_code("g0") == 6 and t.group_code("renamed") == 1 and t.groups[6] == "g0"


def test_generator_roles_compare_each_group_name_with_few():
    """Reproducer: the generator's `extract` numbered each collective's group with
    `roles.index`, so a rank whose n collectives each name their own group compared n^2 / 2
    names (`generate fit` on the reviewer's trace)."""
    from chakra_trace.synthesize.generate.program import Vocabulary, extract

    def compares(n):
        t = _chain(n)
        t.groups = [_Name(g) for g in t.groups]
        _Name.eq = 0
        prog = extract(t, Vocabulary())
        assert prog.roles == [f"g{i}" for i in range(n)]
        return _Name.eq

    few, many = compares(300), compares(1200)
    assert many <= 4 * few + 10, (few, many)


# ------------------------------------------------------------------------------ the simulator
def _repeated(npus: int, n: int, size: int, skew: bool) -> Workload:
    """Every NPU: n chained collectives of one size (all-reduce, all-gather, reduce-scatter in
    turn, each in its own undeclared group: the whole machine), compute between them whose
    length depends on the NPU when `skew` (members then start apart)."""
    kinds = ("ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER")
    traces = {}
    for r in range(npus):
        b = TraceBuilder()
        prev: list[int] = []
        for i in range(n):
            c = b.comp("work", 1 + (3 * r + i) % 5 if skew else 4, deps=prev)
            prev = [b.collective(kinds[i % 3], size, deps=[c], pg_name=f"g{i}")]
        traces[r] = b.build()
    return Workload(traces)


def _simulate(w, net, system, compat, shortcuts):
    from chakra_trace.simulate import simulate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate(w, net, system, compat=compat, shortcuts=shortcuts)


def test_identical_collectives_are_priced_once(monkeypatch):
    """Reproducer (defect 10: `simulate --system ring-8` on 100,000 collectives took 39-90 s,
    the ring schedule priced again for every one): collectives of one plan whose members start
    alike are priced once; the algorithm steps run are the same for 30 collectives and 120."""
    from chakra_trace.simulate.collectives import Collectives
    from chakra_trace.simulate.presets import preset

    p = preset("ring-8")
    phases = {"n": 0}
    real = Collectives._phase

    def counted(self, ph, T):
        phases["n"] += 1
        return real(self, ph, T)

    monkeypatch.setattr(Collectives, "_phase", counted)

    def steps(n):
        phases["n"] = 0
        res = _simulate(_repeated(p.network.npus, n, 1 << 20, skew=False), p.network, p.system, False, True)
        assert len(res.collectives) == n
        return phases["n"]

    assert steps(120) == steps(30)


@pytest.mark.parametrize("seed", range(24))
def test_reused_collective_runs_change_nothing(seed):
    """Random networks and systems (`test_sim_shortcuts._case`), both modes: a job of repeated
    collectives whose members start apart gives the same times, collective records and
    per-node times with runs reused (shortcuts on) as simulated one by one (off)."""
    net, system, _, compat, _, _ = _case(seed)
    rng = random.Random(seed)
    w = _repeated(net.npus, 9, rng.choice([1000, 4096, 65536, 1000003]), skew=rng.random() < 0.7)
    fast, slow = _simulate(w, net, system, compat, True), _simulate(w, net, system, compat, False)
    assert fast.finish_ns.tolist() == slow.finish_ns.tolist()
    assert [c.to_dict() for c in fast.collectives] == [c.to_dict() for c in slow.collectives]
    for r in range(net.npus):
        for a, b in zip(fast.nodes[r], slow.nodes[r]):
            assert a.tolist() == b.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_a_collective_started_later_ends_as_much_later(seed):
    """What reuse rests on: without congestion, every plan (any collective, algorithm, chunking,
    communicator, compat trees and windows) run from start times shifted by a constant ends at
    its times shifted by that constant."""
    from chakra_trace.simulate.collectives import Collectives
    from chakra_trace.simulate.rules import ASTRA_SIM, DEFAULT
    from chakra_trace.simulate.unaware import Unaware

    net, system, _, compat, _, _ = _case(seed)
    rng = np.random.default_rng(seed)
    rules = ASTRA_SIM if compat else DEFAULT
    coll = Collectives(Unaware(net, rules), system, rules=rules, shortcuts=False)
    for ctype in (CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER, 3):
        for members in (None, sorted(rng.choice(net.npus, size=min(net.npus, 3), replace=False).tolist())):
            npus = np.arange(net.npus) if members is None else np.asarray(members, np.int64)
            plan = coll.plan(int(ctype), int(rng.choice([999, 4096, 1 << 20])), members)
            start = rng.integers(0, 3, npus.size) * int(rng.choice([1, 700, 10**6]))
            shift = int(rng.integers(1, 10**12))
            base = coll.run(plan, npus, start.astype(np.int64))
            assert (coll.run(plan, npus, (start + shift).astype(np.int64)) == base + shift).all()


# ------------------------------------------------------------------------------ rewrites against the loops they replaced
def _mixed(n: int, uneven: bool = True) -> Workload:
    """4 ranks, distinct traces: unnamed all-reduces, subgroup all-to-alls of uneven sizes (some
    with splits), a group per all-gather, a declared "world" group (its reduce-scatters of
    uneven sizes) and comm_seq on one rank unless not `uneven` (then it simulates), metadata
    nodes, recorded times."""
    traces = {}
    for r in range(4):
        b = TraceBuilder()
        b.add("meta", "METADATA_NODE")
        prev: list[int] = []
        t = 0
        for i in range(n):
            x = b.comp("mm", 10 + r, deps=prev, start=t)
            kw: dict = {"comm_seq": (n - i) if r == 3 and uneven else None}
            if i % 4 == 0:
                y = b.collective("ALL_REDUCE", 4096, deps=[x], duration=5 + r, start=t + 20, **kw)
            elif i % 4 == 1:
                pg, size = ("dp0" if r < 2 else "dp1"), 4096 * (1 + (r % 2) * (i % 3))
                split = f"[{size // 2}, {size // 2}]" if i % 8 == 1 else None
                y = b.collective(
                    "ALL_TO_ALL", size, deps=[x], pg_name=pg, duration=7, start=t + 20, in_split_size=split
                )
            elif i % 4 == 2:
                y = b.collective("ALL_GATHER", 1024, deps=[x], pg_name=f"g{i}", duration=3, start=t + 20, **kw)
            else:
                size = 8192 + (r if uneven else 0)
                y = b.collective("REDUCE_SCATTER", size, deps=[x], pg_name="world", duration=4, start=t + 20)
            prev, t = [y], t + 40
        traces[r] = b.build()
    return Workload(traces, {"dp0": [0, 1], "dp1": [2, 3], "world": [0, 1, 2, 3]})


def _catalog_reference(w: Workload):
    """The catalog's collectives table as it was computed: a `group_rows` pass per group."""
    from chakra_trace.catalog.features import _sizes

    names = set(w.groups)
    for t in w.traces.values():
        names |= named_groups(t)
    rows = []
    for g in sorted(names):
        members = w.group_ranks(g)
        inst: dict[int, list] = {}
        for r in w.ranks:
            t = w.traces[r]
            for k, row in enumerate(group_rows(t, g).tolist()):
                inst.setdefault(k, []).append((r, int(_sizes(t)[row]), int(t.duration[row]), int(t.comm_type[row])))
        for k in sorted(inst):
            got = inst[k]
            by = [b for _, b, _, _ in got]
            rows.append(
                (g, k, got[0][3], len(members), len(got), min(by), max(by), float(np.median(by)), sum(by))
                + (max(d for _, _, d, _ in got), [x[0] for x in got], by, [x[2] for x in got])
            )
    return rows


def test_catalog_collectives_as_a_pass_per_group_found_them():
    from chakra_trace.catalog.features import _collectives

    w = _mixed(40)
    w.traces[4] = w.traces[1]  # a trace shared by two ranks
    cols, suspect = _collectives(w)
    names = {v: k for k, v in CollectiveType.__members__.items()}
    got = [
        (g, k, names.get(t, t), gs, m, lo, hi, med, tot, dur, ids, by, du)
        for g, k, t, gs, m, lo, hi, med, tot, dur, ids, by, du in zip(
            cols["pg"].tolist(),
            cols["idx"].tolist(),
            cols["type"].tolist(),
            cols["group_size"].tolist(),
            cols["members"].tolist(),
            cols["bytes_min"].tolist(),
            cols["bytes_max"].tolist(),
            cols["bytes_median"].tolist(),
            cols["bytes_total"].tolist(),
            cols["duration_max_us"].tolist(),
            np.split(cols["rank_ids"][1], cols["rank_ids"][0][1:-1]),
            np.split(cols["rank_bytes"][1], cols["rank_bytes"][0][1:-1]),
            np.split(cols["rank_durations_us"][1], cols["rank_durations_us"][0][1:-1]),
        )
    ]
    want = [(*x[:2], CollectiveType(x[2]).name, *x[3:]) for x in _catalog_reference(w)]
    got = [(*x[:10], x[10].tolist(), x[11].tolist(), x[12].tolist()) for x in got]
    assert got == want and suspect
    assert cols["pg"].dtype == object and cols["type"].dtype == object
    for k in ("idx", "group_size", "members", "bytes_min", "bytes_total", "duration_max_us"):
        assert cols[k].dtype == np.int64, k


def _timeline_reference(P):
    """`_collective_members` as it was: a `group_rows` pass per group and part."""
    names: set[str] = set()
    for p in P.parts:
        if p.static is not None:
            t = p.static.trace
            typed = (t.types == NodeType.COMM_COLL_NODE) & t.has(Attr.COMM_TYPE)
            names.update(t.groups[c] for c in np.unique(t.pg_name[typed & t.has(Attr.PG_NAME)]).tolist())
            if (typed & ~t.has(Attr.PG_NAME)).any():
                names.add("")
    out = []
    for i, p in enumerate(P.parts):
        if p.static is None:
            continue
        for gi, g in enumerate(sorted(names)):
            rows = group_rows(p.static.trace, g)
            if p.order is not None:
                rank = np.empty(p.order.size, np.int64)
                rank[p.order] = np.arange(p.order.size)
                rows = rows[np.argsort(rank[rows], kind="stable")]
            out += [(i, int(row), gi, k) for k, row in enumerate(rows.tolist())]
    return out, sorted(names)


@pytest.mark.parametrize("simulated", [False, True])
def test_timeline_collective_members_as_a_pass_per_group_found_them(simulated):
    from chakra_trace.simulate.presets import simulate_on
    from chakra_trace.visualize import timeline as tl

    w = _mixed(24, uneven=not simulated)
    if simulated:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            P, _ = tl._simulated_parts(w, simulate_on(w, "switch"))
        assert any(p.order is not None for p in P.parts)
    else:
        P, _ = tl._recorded_parts(w, "none")
    part, rows, gcode, k, gnames = tl._collective_members(P)
    want, names = _timeline_reference(P)
    assert gnames == names
    assert sorted(zip(part.tolist(), rows.tolist(), gcode.tolist(), k.tolist())) == sorted(want)


def test_astra_sim_evens_collectives_of_renamed_groups(tmp_path):
    """Reproducer: `convert astra-sim --even-sizes max` looked the uneven collectives up by
    their group's name in the traces it had renamed ("dp0" -> "1"): an internal error
    (IndexError) for every job whose uneven collective is in a named subgroup."""
    from chakra_trace.convert.astra_sim import to_astra_sim

    w = _mixed(16)
    res = to_astra_sim(w, tmp_path / "even", even_sizes="max")
    assert res.evened and res.groups["dp0"] != "dp0"
    out = Workload.open(tmp_path / "even")
    for e in res.uneven:
        for r in e["sizes"]:
            row = group_rows(w.traces[r], e["group"])[e["index"]] - 1  # (the metadata node dropped)
            assert int(out.traces[r].comm_size[row]) == max(e["sizes"].values())
    assert {e["group"] for e in res.uneven} == {"dp0", "dp1", "world"} and res.groups["world"] == "0"


def test_host_thread_to_kineto_thread_as_a_loop_found_it():
    """`convert.estimate`: per host thread, the Kineto thread most of its linked ops ran on (the
    lowest on a tie), from one sort."""
    from chakra_trace.convert.estimate import _usual_thread

    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(0, 80))
        host_tid, tid = rng.integers(0, 6, n), rng.integers(10, 14, n)
        on = np.flatnonzero(rng.random(n) < 0.6)
        keys, vals = _usual_thread(host_tid, tid, on)
        want = {}
        for t in np.unique(host_tid[on]).tolist():
            v, c = np.unique(tid[on][host_tid[on] == t], return_counts=True)
            want[t] = int(v[np.argmax(c)])
        assert dict(zip(keys.tolist(), vals.tolist())) == want


def test_split_runs_keeps_each_runs_samples_in_order():
    from chakra_trace.replay.measure import Measurement

    runs = [2, 0, 2, 1, 0, 2]
    m = Measurement("x", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], runs=runs, extra={"energy_j": [10, 20, 30, 40, 50, 60]})
    parts = m.split_runs()
    assert [p.samples for p in parts] == [[1.0, 3.0, 6.0], [2.0, 5.0], [4.0]]
    assert [p.extra["energy_j"] for p in parts] == [[10, 30, 60], [20, 50], [40]]
