"""Ops that fail on purpose, for the replay's failure tests (`test_replay_failures.py`).

`chakra_test::flaky(Tensor x, int fail_after) -> Tensor` is a registered operator that returns
a copy of x for its first `fail_after` calls and raises afterwards (a count per fail_after
value): a trace op renamed to it fails at the stage its call count reaches. `rank_main` runs a
replay rank (`job.rank_main`) whose all-gathers raise on rank 1, as a collective that one rank
cannot run."""

import collections

import torch

from chakra_trace.replay import _standalone as rt
from chakra_trace.replay import job

SCHEMA = "chakra_test::flaky(Tensor x, int fail_after) -> Tensor"
_calls: collections.Counter = collections.Counter()

_lib = torch.library.Library("chakra_test", "DEF")
_lib.define(SCHEMA.split("::", 1)[1])


def _flaky(x, fail_after):
    _calls[fail_after] += 1
    if _calls[fail_after] > fail_after:
        raise RuntimeError(f"flaky op: call {_calls[fail_after]} after {fail_after} good ones")
    return x.clone()


_lib.impl("flaky", _flaky, "CompositeExplicitAutograd")
rt.allow_namespace("chakra_test")  # (a replay calls only the compute namespaces it knows, and those allowed)


def rank_main(rank, world_size, paths, opts):
    real = rt.collective

    def collective(name, args):
        if name == "c10d::allgather_" and rank == 1:

            def fail():
                raise RuntimeError("injected: this rank cannot all-gather")

            return fail
        return real(name, args)

    rt.collective = collective
    return job.rank_main(rank, world_size, paths, opts)


class _Done:
    def wait(self, *args):
        return True


def rank_main_skip(rank, world_size, paths, opts):
    """As `rank_main`, but rank 1 leaves its all-gathers out silently: rank 0 waits for a peer
    that never comes."""
    real = rt.collective

    def collective(name, args):
        if name == "c10d::allgather_" and rank == 1:
            return _Done
        return real(name, args)

    rt.collective = collective
    return job.rank_main(rank, world_size, paths, opts)
