"""`chakra replay`: re-run a trace's compute and communication as a benchmark."""

from __future__ import annotations

import os
import shlex
import warnings

import click

from ..replay.job import replay_host
from ..replay.launch import RankFailed
from ..replay.operators import ReplayConfig
from ..replay.result import ReplayWarning, repeat_runs
from ..replay.schemaless import replay_workload
from .common import console, json_option, print_json, steps
from .terminal import echo_warning, safe_line


def _counter(advance):
    """progress(n) with absolute counts, on top of steps()' advance(k)."""
    seen = [0]

    def progress(n: int) -> None:
        if n > seen[0]:
            advance(n - seen[0])
            seen[0] = n

    return progress


def _is_host(source: str) -> bool:
    """A `chakra collect` folder or a PyTorch host trace (JSON), rather than Chakra `.et`."""
    return os.path.isdir(source) or ".json" in os.path.basename(source)


@click.command()
@click.argument("source")
@click.option(
    "--mode",
    type=click.Choice(["ops", "duration", "flops"]),
    default=None,
    help="ops: each recorded operator through torch.ops (PyTorch host traces, the default for them); "
    "duration / flops: Chakra traces without op schemas, compute as calibrated kernels of the "
    "recorded time or FLOPs (default duration).",
)
@click.option("--world-size", type=int, default=None, help="Ranks (default: one per trace, or the recorded group).")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda (one GPU per rank, NCCL).")
@click.option(
    "--steps", "steps_opt", default=None, help="Profiler steps to replay, e.g. 2 or 2,3 (default: all recorded)."
)
@click.option("--select", default=None, help="Regex: only ops named so, or under an op named so.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help='JSON {"skip": [regex...], "substitute": {op: overload}, "delay_us": {op: µs}}.',
)
@click.option("--threads", type=int, default=1, show_default=True, help="Intra-op threads per rank.")
@click.option(
    "--budget-s",
    type=click.FloatRange(0.0, min_open=True),
    default=20.0,
    show_default=True,
    help="Wall time per rank, from trying each op once through the warm-up and host-time calibration to the "
    "last timed pass; passes stop at it (and are cut short a grace of a quarter of it, 5 to 30 s, later).",
)
@click.option(
    "--target-rel-ci",
    type=float,
    default=0.02,
    show_default=True,
    help="Stop when the 95% CI of the mean is within this fraction.",
)
@click.option(
    "--runs",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Replay this many times, each in fresh processes; the result holds every run "
    "(`chakra bench compare` needs >= 3 runs per side to call a difference).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result JSON here.")
@click.option("--export", type=click.Path(dir_okay=False), help="Also write a standalone benchmark script (ops).")
@click.option(
    "--host-gaps/--no-host-gaps",
    default=True,
    show_default=True,
    help="Ops: also spend the original's host time that the replayed ops lack (a tensor subclass's dispatch "
    "inside ops, such as DTensor's; recorded code between ops), found by comparing the Kineto trace with a "
    "pass of the replay profiled the same way (needs the Kineto trace beside the host trace).",
)
@json_option
def replay(
    source,
    mode,
    world_size,
    device,
    steps_opt,
    select,
    config_path,
    threads,
    budget_s,
    target_rel_ci,
    runs,
    output,
    export,
    host_gaps,
    as_json,
) -> None:
    """Replay SOURCE on this machine and measure its step time: a `chakra collect` folder or a
    PyTorch host trace (operators replayed), or Chakra `.et` traces (a file or a job prefix;
    compute as calibrated kernels). Multi-rank jobs run one process per rank on 127.0.0.1.

    \b
    With --select, "recorded" is the sum of the selected ops' recorded durations per step (the
    Kineto trace beside the host trace), what the replay runs; without it, the recorded profiler step.
    --runs N replays N times in fresh processes, so that `chakra bench compare` has runs to compare.
    Errors are one line (exit 2; `chakra --debug replay ...` shows a failing rank's traceback)."""
    host = _is_host(source)
    mode = mode or ("ops" if host else "duration")
    if mode == "ops":
        if not host:
            raise click.UsageError("--mode ops needs PyTorch host traces (a collect folder or .et.json[.gz])")
        cfg = ReplayConfig.load(config_path) if config_path else None
        step_list = [int(x) for x in steps_opt.split(",")] if steps_opt else None
        exported: list[bool] = []

        def once(progress):
            res = replay_host(
                source,
                world_size=world_size,
                device=device,
                steps=step_list,
                select=select,
                config=cfg,
                threads=threads,
                budget_s=budget_s,
                target_rel_ci=target_rel_ci,
                export=None if exported else export,  # (the plan is the same every run)
                progress=progress,
                host_gaps=host_gaps,
            )
            exported.append(True)
            return res

    else:
        if export:
            raise click.UsageError("--export replays operators: use it with PyTorch host traces")
        if select or steps_opt or config_path:
            raise click.UsageError("--select, --steps and --config replay operators: use them with PyTorch host traces")

        def once(progress):
            return replay_workload(
                source,
                world_size=world_size,
                mode=mode,
                device=device,
                budget_s=budget_s,
                target_rel_ci=target_rel_ci,
                progress=progress,
            )

    # on a terminal: a bar over the runs, or over one run's timed samples (their number is not known ahead)
    label = f"replaying {runs} runs" if runs > 1 else "replaying: timed samples"
    with warnings.catch_warnings(), steps(label, runs if runs > 1 else None) as advance:
        warnings.simplefilter("ignore", ReplayWarning)  # printed once below (res.warnings)
        on_sample = _counter(advance) if advance is not None and runs == 1 else None
        on_run = (lambda _i: advance()) if advance is not None and runs > 1 else None
        try:
            res = repeat_runs(lambda: once(on_sample), runs, on_run=on_run)
        except RankFailed as e:  # one line per rank that failed (--debug: the traceback)
            if (click.get_current_context().find_root().obj or {}).get("debug"):
                raise
            for line in [str(e), *e.others]:
                click.echo(f"error: {safe_line(line)}", err=True)
            raise click.exceptions.Exit(2) from None
    for w in res.warnings:
        echo_warning(w)
    argv = (click.get_current_context().find_root().obj or {}).get("argv")
    if argv is not None:  # how to run it again (`chakra bench report` shows it)
        res.step.extra["command"] = shlex.join(["chakra", *argv])
    if output:
        res.save(output)
    if as_json:
        print_json(res.to_dict())
        return
    con = console()
    con.print(
        f"[bold]replayed[/bold] {res.source} on {res.world_size} rank(s), {res.device}/{res.backend}, mode {res.mode}"
    )
    con.print(f"step: {res.step.summary()}")
    if res.step.extra.get("energy_absent"):
        con.print(f"energy: absent ({res.step.extra['energy_absent']})", markup=False, highlight=False)
    if res.recorded_step_us:
        con.print(
            f"recorded: {res.recorded_step_us / 1e3:,.3f} ms ({res.recorded_basis}); replay/recorded {res.ratio:.3f}"
        )
    elif select:
        con.print("recorded: no Kineto trace beside the host trace, so no recorded time of the selected ops")
    for r, c in sorted(res.coverage.items()):
        line = f"rank {r}: {c['replayed']:,} of {c['total']:,} replayed ({c['share']:.1%})"
        if c.get("reasons"):
            line += "; not replayed: " + "; ".join(f"{k} ({v})" for k, v in list(c["reasons"].items())[:4])
        waits = c.get("waits") or {}
        if waits.get("collectives"):
            line += (
                f"; {waits['placed_from_kineto']} of {waits['collectives']} collectives waited for where the Kineto "
                "trace shows the original did"
            )
            if waits["placed_from_kineto"] < waits["collectives"]:
                line += " (the others at their first reader)"
        con.print(line, markup=False, highlight=False)
        g = res.host_gaps.get(r) or {}
        if g.get("emulated"):
            con.print(
                f"  host time the ops lack, emulated: {g['per_step_s'] * 1e3:,.3f} ms per step before {g['ops']:,} ops"
                + _calibration_text(g.get("calibration") or {}),
                markup=False,
                highlight=False,
            )
        elif g.get("note"):
            con.print(f"  {g['note']}", markup=False, highlight=False)
        failed = [x for x in c.get("examples", []) if x["reason"].startswith(("refused: ", "failed: "))]
        for x in failed[:10]:  # the per-op report: refused (never called), or stage, exception, message
            con.print(f"  {x['name']} (node {x['id']}) {x['reason']}", markup=False, highlight=False)
        if c["not_replayed"] > len(failed[:10]) and failed:
            con.print(f"  ... {c['not_replayed'] - len(failed[:10])} more not replayed (--json lists them)")
    if output:
        con.print(f"result: {output}")
    if export:
        con.print(
            f"benchmark script: {export} (one run per process: python {export} --json a1.json, a2.json, ...; "
            "then chakra bench compare a*.json vs b*.json)"
        )


def _calibration_text(c: dict) -> str:
    if not c:
        return ""
    return (
        f" (inside ops {c['inside_ops_ms_per_step']:,.3f} ms, between ops {c['between_ops_ms_per_step']:,.3f} ms; "
        f"profiler cost {c['per_event_us']:,.1f} µs per event)"
    )
