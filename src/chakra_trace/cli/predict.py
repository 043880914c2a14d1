"""`chakra predict`: a job's step time on a calibrated system, with a band."""

from __future__ import annotations

import click

from ..calibrate import predict as run
from ..calibrate.predict import COMM_MODES, COMPUTE_MODES
from .common import console, counts, json_option, print_json


@click.command()
@click.argument("job")
@click.option("--profile", required=True, type=click.Path(exists=True, dir_okay=False), help="From `chakra calibrate`.")
@click.option("--ranks", type=click.IntRange(min=1), default=None, help="Scale out data-parallel to N ranks.")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Rescale a capture to batch B.")
@click.option(
    "--compute",
    type=click.Choice(COMPUTE_MODES),
    default="auto",
    show_default=True,
    help="replay: time the job's ops by replaying its host traces here (kept in your cache); model: the "
    "profile's per-op model; recorded: as recorded; auto: replay for a `chakra collect` folder, else model.",
)
@click.option("--comm", type=click.Choice(COMM_MODES), default="network", show_default=True)
@click.option(
    "--replay-s", type=click.FloatRange(min=0.0), default=4.0, show_default=True, help="Seconds of timed replay passes."
)
@click.option("--fresh", is_flag=True, help="Replay again even when a timing of this job is kept.")
@json_option
def predict(job, profile, ranks, batch, compute, comm, replay_s, fresh, as_json) -> None:
    """Predict JOB's step time on the system a profile describes.

    \b
      chakra predict tests/data/corpus/ddp --profile profile.json
      chakra predict tests/data/corpus/ddp --profile profile.json --ranks 4 --json
    """
    say = None if as_json else (lambda m: console().print(f"[dim]{m}[/dim]"))
    with counts(f"predicting {job}", "replay passes") as tick:
        p = run(
            job,
            profile,
            ranks=ranks,
            batch=batch,
            compute=compute,
            comm=comm,
            replay_budget_s=replay_s,
            refresh=fresh,
            say=say,
            progress=None if tick is None else lambda n: tick(n, None),
        )
    if as_json:
        print_json(p.to_dict())
        return
    console().print(
        f"[bold]step[/bold] {p.step_ms:.3f} ms on {p.ranks} ranks (band {p.low_ms:.3f}-{p.high_ms:.3f} ms; "
        f"compute: {p.compute}, comm: {p.comm}; profile measured at {p.detail['profile_ranks']} ranks)"
    )
