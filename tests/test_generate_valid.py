"""Generated jobs validate across ranks under every sampling option (issue 32, review problem
1): the collectives of each communicator are sampled once and shared by its members, also when
the ranks recorded different programs and the layers or ranks change; and a sample that would
still fail is refused with one line naming the check, nothing written."""

from __future__ import annotations

import importlib
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_trace.errors import ChakraError
from chakra_trace.io.workload import Workload
from chakra_trace.schema.builder import TraceBuilder
from chakra_trace.synthesize.generate import BASELINES, fit, sample, sample_baseline, sample_detailed, split_steps
from chakra_trace.synthesize.generate.agree import refuse_invalid
from chakra_trace.validate import validate_workload
from conftest import run_cli

sample_module = importlib.import_module("chakra_trace.synthesize.generate.sample")
CORPUS = Path(__file__).parent / "data" / "corpus"
JOBS = ("ddp", "fsdp", "tp", "pp", "dlrm", "gpt2")
GENERATORS = ("hierarchical", *BASELINES)
#: refusals that are about the options asked for, not about the sample's validity
OPTION_REFUSALS = ("data_parallel", "no repeated layer block")


@pytest.fixture(scope="module")
def model():
    """Fitted on both recorded steps of every corpus job: ranks with programs of their own."""
    import chakra_trace.convert.pytorch  # noqa: F401

    train = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in JOBS:
            for i, w in enumerate(split_steps(Workload.open(CORPUS / name))[:2]):
                train[f"{name}/step{i}"] = w
    return fit(train)


def _sample(model, like, gen, **kw):
    if gen == "hierarchical":
        return sample(model, like, **kw)
    kw.pop("batch_scale", None)
    kw.pop("jitter", None)
    return sample_baseline(model, like, gen, **kw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    job=st.sampled_from([f"{n}/step{i}" for n in JOBS for i in (0, 1)]),
    gen=st.sampled_from(GENERATORS),
    layers_scale=st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]),
    ranks=st.sampled_from([None, 2, 4, 8]),
    batch_scale=st.sampled_from([0.5, 1.0, 2.0]),
    jitter=st.sampled_from([0.0, 1.0, 3.0]),
    seed=st.integers(0, 5),
)
def test_every_sampling_option_writes_a_job_that_validates(
    model, job, gen, layers_scale, ranks, batch_scale, jitter, seed
):
    """Any generator, layer scale, rank count, batch scale, jitter and seed: the job written
    and read back validates across ranks (or the options themselves are refused)."""
    try:
        w = _sample(
            model, job, gen, layers_scale=layers_scale, ranks=ranks, batch_scale=batch_scale, jitter=jitter, seed=seed
        )
    except ChakraError as e:
        assert any(s in str(e) for s in OPTION_REFUSALS), str(e)
        return
    with tempfile.TemporaryDirectory() as d:
        w.save(Path(d) / "job", groups=w.groups or None)
        back = Workload.open(Path(d) / "job")
        rep = validate_workload(back)
    assert rep.ok, rep.render()
    assert back.ranks == list(range(ranks or model.job(job).ranks))


@pytest.mark.parametrize("like", ["ddp/step0", "ddp/step1", "fsdp/step0", "fsdp/step1"])
@pytest.mark.parametrize("layers_scale", [0.5, 2.0, 3.0])
def test_ranks_with_programs_of_their_own_share_their_collectives(model, like, layers_scale):
    """The review's case: ranks 0 and 1 of ddp/fsdp were fitted as two programs whose count rules
    repeat differently at other layer counts (9 vs 7 all-reduces before): now one sequence
    per communicator, the same count, types and sizes on every rank."""
    w, info = sample_detailed(model, like, layers_scale=layers_scale, ranks=8)
    seqs = {r: [(int(t.comm_type[i]), int(t.comm_size[i])) for i in _coll(t)] for r, t in w.traces.items()}
    assert len({tuple(s) for s in seqs.values()}) == 1 and seqs[0]
    assert validate_workload(w).ok
    assert set(info.shared) <= {1}  # only ranks that would not have matched take another's structure


def _coll(t):
    from chakra_trace.schema.groups import group_rows

    return group_rows(t, "").tolist()


def test_unscaled_ranks_keep_their_own_programs(model):
    """Where the programs agree (the recorded layer count), no rank takes another's."""
    for j in model.jobs:
        _, info = sample_detailed(model, j.name)
        assert info.shared == [], j.name


def test_cli_sample_validates_the_review_example(model, tmp_path, capsys):
    """`generate sample ... --like ddp/step0 --layers-scale 2 --ranks 8` writes a valid job."""
    from chakra_trace.synthesize.generate import write_model

    write_model(model, tmp_path / "gen.json")
    out = tmp_path / "new" / "dir" / "ddp"
    argv = ["generate", "sample", str(tmp_path / "gen.json"), "--like", "ddp/step0", "--layers-scale", "2"]
    rc, o, err = run_cli([*argv, "--ranks", "8", "-o", str(out)], capsys)
    assert rc == 0, err
    assert "validated across ranks" in o
    rc, o, err = run_cli(["validate", str(out)], capsys)
    assert rc == 0, o + err


def test_a_sample_that_fails_validation_is_refused_and_not_written(model, tmp_path, capsys, monkeypatch):
    """Without the sharing (each rank its own program), the sample fails a cross-rank check:
    `sample` raises naming it, the CLI exits 2 with that one line and writes nothing."""
    from chakra_trace.synthesize.generate import write_model

    monkeypatch.setattr(sample_module, "shared_programs", lambda job, shape: list(job.rank_program))
    with pytest.raises(ChakraError, match=r"fails validation, check group-(count-)?mismatch"):
        sample(model, "ddp/step0", layers_scale=2)
    write_model(model, tmp_path / "gen.json")
    argv = ["generate", "sample", str(tmp_path / "gen.json"), "--like", "ddp/step0", "--layers-scale", "2"]
    rc, o, err = run_cli([*argv, "-o", str(tmp_path / "out" / "ddp")], capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "check group-" in lines[0] and "ddp/step0" in lines[0], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_refuse_invalid_names_the_check():
    """A hand-made job whose ranks disagree: the error names the check and the ranks."""
    traces = {}
    for r, size in ((0, 1024), (1, 2048)):
        b = TraceBuilder()
        b.collective("ALL_REDUCE", size, name="ar")
        traces[r] = b.build()
    with pytest.raises(ChakraError, match=r"^job x fails validation, check group-mismatch: .*1,024 B.*2,048 B"):
        refuse_invalid(Workload(traces, {}), "job x")
    refuse_invalid(Workload({0: traces[0], 1: traces[0]}, {}), "job y")  # agrees: passes
