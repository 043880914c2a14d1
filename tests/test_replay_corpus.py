"""Replay coverage on every job of the corpus (tests/data/corpus, issue 14): DDP, FSDP2, tensor
parallel (DTensor: functional collectives), pipeline parallel (send/recv), DLRM (embedding bags,
uneven all_to_all_single), GPT-2: at least 99% of the top-level ops on every rank, one pass."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from chakra_trace.replay.job import replay_host  # noqa: E402

CORPUS = Path(__file__).parent / "data" / "corpus"
JOBS = [j["name"] for j in json.loads((CORPUS / "index.json").read_text())["jobs"]] if CORPUS.is_dir() else []


if not CORPUS.is_dir():  # (the corpus comes with issue 14's corpus branch)
    pytest.skip(f"no corpus at {CORPUS}", allow_module_level=True)


def test_the_corpus_is_here():
    assert set(JOBS) >= {"ddp", "fsdp", "tp", "pp", "dlrm", "gpt2"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", JOBS)
def test_every_corpus_job_replays(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = replay_host(
            CORPUS / name, warmup=0, warmup_s=0, min_repeats=1, max_repeats=1, budget_s=60, collective_timeout_s=30
        )
    index = {j["name"]: j for j in json.loads((CORPUS / "index.json").read_text())["jobs"]}
    assert res.world_size == index[name]["ranks"]
    for r, c in res.coverage.items():
        assert c["share"] >= 0.99 and c["total"] > 100, (name, r, c["reasons"])
