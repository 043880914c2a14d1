"""The learned trace generator (`synthesize.generate`, `chakra generate`): the grammar expands
back to what it parsed, the model file round-trips and refuses other versions, sampling is
deterministic per seed, samples validate across ranks, layers scale the repeated blocks and keep
the graph's shape, fidelity metrics are 0 for a job against itself, and the hierarchical model
beats the i.i.d. baselines on a small held-out job. Toy jobs are built here (a few hundred ops)."""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.schema.enums import NodeType
from chakra_trace.schema.groups import group_rows
from chakra_trace.simulate.presets import simulate_on
from chakra_trace.synthesize.generate import (
    ModelFormatError,
    condition_for,
    evaluate,
    fit,
    grammar,
    read_model,
    sample,
    sample_baseline,
    sample_detailed,
    split_steps,
    write_model,
)
from chakra_trace.synthesize.generate.fidelity import compare, novelty
from chakra_trace.synthesize.generate.fit import features
from chakra_trace.synthesize.generate.model import model_from_dict, model_to_dict
from chakra_trace.validate import validate_workload
from conftest import run_cli

CORPUS = Path(__file__).parent / "data" / "corpus"
BASE_US = {"embed": 20, "norm": 8, "qkv": 60, "attn": 90, "proj": 30, "mlp": 120, "add": 4, "loss": 25}


def toy_job(layers: int = 4, seed: int = 0, ranks: int = 2, tp: bool = False) -> Workload:
    """A small transformer-like training step per rank: forward layers (with residual branches),
    the loss, backward layers reading their forward activations, a gradient all-reduce per layer
    (and, with `tp`, an all-reduce per layer in forward on a 2-rank group), then the optimizer per
    layer. Durations are log-normal around a per-op base, drawn per rank."""
    traces = {}
    groups = {f"tp{k}": [2 * k, 2 * k + 1] for k in range(ranks // 2)} if tp else {}
    for r in range(ranks):
        rng = np.random.default_rng([seed, r])

        def d(op: str, rng: np.random.Generator = rng) -> int:
            return max(1, int(BASE_US.get(op.split("_")[0], 10) * rng.lognormal(0.0, 0.2)))

        b = TraceBuilder()
        x = b.comp("embed", d("embed"), num_ops=1e6, tensor_size=1 << 16)
        saved = []
        for _ in range(layers):
            h = b.comp("norm", d("norm"), deps=[x], tensor_size=1 << 14)
            q = b.comp("qkv", d("qkv"), deps=[h], num_ops=3e7, tensor_size=1 << 16)
            a = b.comp("attn", d("attn"), deps=[q], num_ops=5e7, tensor_size=1 << 16)
            o = b.comp("proj", d("proj"), deps=[a], num_ops=1e7, tensor_size=1 << 15)
            if tp:
                o = b.collective("ALL_REDUCE", 1 << 15, name="tp_all_reduce", deps=[o], pg_name=f"tp{r // 2}")
            y = b.comp("add", d("add"), deps=[x, o])
            f = b.comp("mlp", d("mlp"), deps=[y], num_ops=8e7, tensor_size=1 << 17)
            x = b.comp("add", d("add"), deps=[y, f])
            saved.append((h, q, a, y))
        g = b.comp("loss", d("loss"), deps=[x])
        reduces = []
        for h, q, a, y in reversed(saved):
            g = b.comp("mlp_backward", 2 * d("mlp"), deps=[g, y])
            g = b.comp("attn_backward", 2 * d("attn"), deps=[g, a, q])
            g = b.comp("norm_backward", d("norm"), deps=[g, h])
            reduces.append(b.collective("ALL_REDUCE", 1 << 20, name="grad_all_reduce", deps=[g]))
        prev = g
        for ar in reduces:
            for op in ("adam_mul", "adam_add", "adam_div"):
                prev = b.comp(op, d(op), deps=[ar, prev])
        traces[r] = b.build()
    return Workload(traces, groups)


def _quiet_sim(w: Workload, system: str) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(simulate_on(w, system).step_ns)


def _edges(t) -> Counter:
    src, dst, _ = t.dep_rows("data")
    names = t.name_array
    return Counter(zip(names[src].tolist(), names[dst].tolist(), (src - dst).tolist()))


def _ops(t) -> np.ndarray:
    return t.name_array[t.types != NodeType.METADATA_NODE]


@pytest.fixture(scope="module")
def toy_model():
    return fit({"toy": toy_job(4, seed=0)})


# --------------------------------------------------------------------------- grammar


@pytest.mark.parametrize("seed", range(6))
def test_grammar_expands_back_to_its_lane(seed):
    """Any sequence, parsed into literals and nested repeats, expands back exactly."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(rng.integers(2, 6)):
        block = rng.integers(0, 5, rng.integers(1, 7))
        inner = np.concatenate([block] * int(rng.integers(1, 4)))
        parts.append(np.concatenate([inner, rng.integers(0, 9, rng.integers(0, 3))] * int(rng.integers(1, 4))))
    seq = np.concatenate(parts)
    tree, tokens = grammar.parse([seq, seq[::-1]])
    for lane, (slots, _, _) in zip([seq, seq[::-1]], grammar.expand(tree)):
        assert np.array_equal(tokens[slots], lane)


def test_grammar_finds_the_layers():
    """A toy step's forward and backward repeat once per layer, the optimizer once per layer."""
    model = fit({"toy6": toy_job(6)})
    assert model.jobs[0].layers == 6
    p = model.programs[0]
    reps = p.tree.count[p.tree.kind == grammar.REP].tolist()
    assert reps.count(6) >= 3  # forward, backward, optimizer (the all-reduces: their own lane)


# --------------------------------------------------------------------------- the model file


def test_model_file_round_trip(toy_model, tmp_path):
    path = write_model(toy_model, tmp_path / "gen.json")
    again = read_model(path)
    assert model_to_dict(again) == model_to_dict(toy_model)
    gz = write_model(toy_model, tmp_path / "gen.json.gz")
    assert gzip.open(gz).read(1) == b"{"
    assert model_to_dict(read_model(gz)) == model_to_dict(toy_model)
    a, b = sample(toy_model, seed=3), sample(again, seed=3)
    assert all(a.traces[r].equals(b.traces[r]) for r in a.ranks)


def test_model_file_refuses_other_versions_and_damage(toy_model, tmp_path):
    d = model_to_dict(toy_model)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(d | {"version": 2}))
    with pytest.raises(ModelFormatError, match=r"version 2 is not supported: this chakra-trace reads version 1"):
        read_model(p)
    p.write_text(json.dumps(d | {"format": "pickle"}))
    with pytest.raises(ModelFormatError, match="not a chakra generator model"):
        read_model(p)
    bad = json.loads(json.dumps(d))
    bad["programs"][0]["key"] = bad["programs"][0]["key"][:-1]
    with pytest.raises(ModelFormatError, match=r"program 0: 'inst_ptr' does not describe the \d+ entries of 'key'"):
        model_from_dict(bad, "m.json")
    bad = json.loads(json.dumps(d))
    bad["programs"][0]["slot_token"][0] = 10**6
    with pytest.raises(ModelFormatError, match="slot_token"):
        model_from_dict(bad, "m.json")
    p.write_text("{not json")
    with pytest.raises(ModelFormatError, match=r"m\.json:1:2: not valid JSON"):
        read_model(p)


# --------------------------------------------------------------------------- sampling


def test_sampling_is_deterministic_per_seed(toy_model):
    a, b, c = sample(toy_model, seed=1), sample(toy_model, seed=1), sample(toy_model, seed=2)
    assert all(a.traces[r].equals(b.traces[r]) for r in a.ranks)
    assert not np.array_equal(a.traces[0].duration, c.traces[0].duration)
    assert np.array_equal(a.traces[0].data, c.traces[0].data)  # the structure is the template's


def test_unscaled_sample_has_the_template_graph(toy_model):
    """Same ops in the same order and the same dependencies (names and distances) as the job
    it was fitted on; durations are new draws of each op's pooled values."""
    job = toy_job(4, seed=0)
    s = sample(toy_model, seed=5)
    for r in job.ranks:
        assert np.array_equal(_ops(s.traces[r]), _ops(job.traces[r]))
        assert _edges(s.traces[r]) == _edges(job.traces[r])
    assert not np.array_equal(s.traces[0].duration, job.traces[0].duration)


def test_samples_validate_across_ranks():
    """Tensor-parallel groups on 4 ranks: every rank names its own group, collectives match per
    group (type, size, order); scaled out to 8 ranks data-parallel as well."""
    job = toy_job(3, seed=1, ranks=4, tp=True)
    model = fit({"tp": job})
    s = sample(model, seed=0, layers_scale=2)
    rep = validate_workload(s)
    assert rep.ok, rep.render() if hasattr(rep, "render") else rep
    assert s.groups == {"tp0": [0, 1], "tp1": [2, 3]}
    for g, members in s.groups.items():
        seqs = [s.traces[r].comm_size[group_rows(s.traces[r], g)].tolist() for r in members]
        assert seqs[0] == seqs[1] and len(seqs[0]) == 6  # one per layer, 2x3 layers
    dp = sample(fit({"dp": toy_job(2, seed=1)}), ranks=8)
    assert dp.ranks == list(range(8)) and validate_workload(dp).ok


def test_layers_scale_repeats_the_block():
    """4 layers sampled at x2 has the ops, dependencies and collectives of a real 8-layer job."""
    model = fit({"toy": toy_job(4, seed=0)})
    s, info = sample_detailed(model, layers_scale=2, seed=1)
    real = toy_job(8, seed=0)
    assert info.layers == 8 and info.dropped_deps == 0
    for r in s.ranks:
        assert Counter(_ops(s.traces[r]).tolist()) == Counter(_ops(real.traces[r]).tolist())
        pairs = lambda t: Counter((a, b) for a, b, _ in _edges(t).elements())  # noqa: E731
        assert pairs(s.traces[r]) == pairs(real.traces[r])
    assert validate_workload(s).ok
    with pytest.raises(ChakraError, match="no repeated layer block"):
        sample(fit({"flat": Workload({0: TraceBuilder().build()})}), layers_scale=2)


def test_layer_counts_learned_from_a_family():
    """Fitted at 2 and 4 layers, the per-repeat counts are the line through both: 6 layers
    sampled equals a real 6-layer job op for op."""
    model = fit({"l2": toy_job(2, seed=0), "l4": toy_job(4, seed=0)})
    assert model.fit_info["families"] >= 1
    s = sample(model, "l4", layers=6, seed=0)
    assert Counter(_ops(s.traces[0]).tolist()) == Counter(_ops(toy_job(6).traces[0]).tolist())


def test_batch_scale_scales_compute_not_gradients(toy_model):
    base = sample(toy_model, seed=0, jitter=0)
    big = sample(toy_model, seed=0, jitter=0, batch_scale=4)
    comp = base.traces[0].types == NodeType.COMP_NODE
    assert big.traces[0].duration[comp].sum() > base.traces[0].duration[comp].sum()
    assert np.array_equal(big.traces[0].comm_size, base.traces[0].comm_size)
    assert big.traces[0].num_ops.sum() == 4 * base.traces[0].num_ops.sum()


def test_baselines_are_chains_of_the_same_length(toy_model):
    s = sample(toy_model)
    for kind in ("iid-global", "iid-like"):
        b = sample_baseline(toy_model, kind=kind, seed=1)
        t = b.traces[0]
        assert len(t) == len(s.traces[0])
        assert t.data.size == len(t) - 1
        assert validate_workload(b).ok
    with pytest.raises(ChakraError, match="baseline"):
        sample_baseline(toy_model, kind="gan")


# --------------------------------------------------------------------------- fidelity


def test_metrics_are_zero_for_a_job_against_itself(toy_model):
    job = toy_job(4, seed=0)
    m = compare(job, job)
    assert all(v == 0 for v in m.values()), m
    assert novelty(toy_model, features(job)) == (0.0, "toy")
    cond = condition_for(toy_model, toy_job(6, seed=3))
    assert (cond.like, cond.layers_scale, cond.ranks) == ("toy", 1.5, None)


def test_hierarchical_beats_the_iid_baselines_on_held_out_jobs():
    """Fitted on a 4-layer job, judged on unseen jobs (other draws, 4 and 6 layers): better op
    mix and simulated step time than both baselines, novel (not a copy of the training job)."""
    model = fit({"toy": toy_job(4, seed=0)})
    held = {"same": toy_job(4, seed=7), "deeper": toy_job(6, seed=8)}
    rep = evaluate(model, held, step_time=_quiet_sim, systems=("ring-8",), seed=1)
    by = {(r.job, r.generator): r for r in rep.rows}
    for job in held:
        ours = by[(job, "hierarchical")]
        assert ours.metrics["novelty"] > 0
        assert abs(ours.step_err["ring-8"]) < 0.05, ours.step_err
        for base in ("iid-global", "iid-like"):
            other = by[(job, base)]
            assert ours.metrics["op_mix_tv"] < other.metrics["op_mix_tv"]
            assert abs(ours.step_err["ring-8"]) < abs(other.step_err["ring-8"])
    summary = rep.summary()
    assert summary["hierarchical"]["step_err:all"] < summary["iid-like"]["step_err:all"]
    assert "| same | hierarchical |" in rep.to_markdown()
    d = rep.to_dict()
    assert d["rows"][0]["condition"]["like"] == "toy" and json.dumps(d)


def test_split_steps_of_a_recording():
    import chakra_trace.convert.pytorch  # noqa: F401  (registers `chakra collect` folders)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = Workload.open(CORPUS / "gpt2")
    steps = split_steps(w)
    assert len(steps) == 2
    assert abs(len(steps[0].traces[0]) - len(steps[1].traces[0])) <= 2
    assert all(validate_workload(s).ok for s in steps)


# --------------------------------------------------------------------------- CLI


def test_cli_fit_sample_eval(tmp_path, capsys):
    job = toy_job(3, seed=0)
    job.save(tmp_path / "toy")
    toy_job(3, seed=4).save(tmp_path / "held")
    model = tmp_path / "gen.json"
    rc, out, err = run_cli(["generate", "fit", str(tmp_path / "toy"), "-o", str(model), "--json"], capsys)
    assert rc == 0, err
    assert json.loads(out)["jobs"] == ["toy"]
    rc, out, err = run_cli(
        [
            "generate",
            "sample",
            str(model),
            "-o",
            str(tmp_path / "s" / "x"),
            "--layers-scale",
            "2",
            "--seed",
            "3",
            "--json",
        ],
        capsys,
    )
    assert rc == 0, err
    assert json.loads(out)["layers"] == 6
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["x.0.et", "x.1.et"]
    rc, out, err = run_cli(["validate", str(tmp_path / "s" / "x")], capsys)
    assert rc == 0, out + err
    rc, out, err = run_cli(
        ["generate", "eval", str(model), str(tmp_path / "held"), "--systems", "ring-8", "--json"], capsys
    )
    assert rc == 0, err
    rows = json.loads(out)["rows"]
    assert {r["generator"] for r in rows} == {"hierarchical", "iid-global", "iid-like"}
    rc, out, err = run_cli(
        ["generate", "sample", str(model), "-o", str(tmp_path / "b"), "--baseline", "iid-like"], capsys
    )
    assert rc == 0, err
    (tmp_path / "old.json").write_text(json.dumps(json.loads(model.read_text()) | {"version": 99}))
    rc, out, err = run_cli(["generate", "sample", str(tmp_path / "old.json"), "-o", str(tmp_path / "c")], capsys)
    assert rc == 2 and "version 99 is not supported" in err


def test_corpus_held_out_steps():
    """Fitted on the first recorded step of every corpus job, sampled like it and judged on the
    second: the op mix is near exact and the samples validate."""
    import chakra_trace.convert.pytorch  # noqa: F401

    train, held = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("ddp", "fsdp", "tp", "pp", "dlrm", "gpt2"):
            a, b = split_steps(Workload.open(CORPUS / name))[:2]
            train[name], held[name] = a, b
    model = fit(train)
    rep = evaluate(model, held, step_time=_quiet_sim, systems=("ring-8",), generators=("hierarchical", "iid-like"))
    for r in rep.rows:
        if r.generator == "hierarchical":
            assert r.condition.like == r.job
            assert r.metrics["op_mix_tv"] < 0.01
    for name in train:
        assert validate_workload(sample(model, name, seed=2)).ok
    steps = fit({f"{name}/step{i}": w for name in ("ddp", "tp") for i, w in enumerate((train[name], held[name]))})
    assert steps.job("ddp").name == "ddp/step0" and steps.job("tp/step1").name == "tp/step1"  # a job by its name
    with pytest.raises(ChakraError, match="no job named 'nope'"):
        steps.job("nope")
