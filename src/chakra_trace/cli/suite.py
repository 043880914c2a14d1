"""`chakra suite`: the Chakra trace benchmark suite (list, run, check, report, add)."""

from __future__ import annotations

import sys

import click

from ..suite import add_trace, check_result, load_suite, run_suite, write_leaderboard
from ..table import Column, Table
from .common import console, json_option, print_json, show, steps
from .obfuscate import _trimmed, read_secret

SUITE_OPTION = click.option(
    "--suite", "suite_dir", default=None, help="A suite folder (holding suite.json) [default: the bundled v0.1]."
)
SUITE_ARGUMENT = click.argument("suite_dir", metavar="[SUITE]", required=False, default=None)


@click.group()
def suite() -> None:
    """The Chakra trace benchmark suite: curated traces, run rules, scores, verifiable results
    (rules: suites/v0.1/RULES.md).

    \b
      chakra suite list [SUITE]
      chakra suite run [SUITE] --system dgx-h100 -o out/suite/dgx-h100
      chakra suite check out/suite/dgx-h100
      chakra suite report out/suite/* -o board.html
    """


@suite.command("list")
@SUITE_ARGUMENT
@json_option
def list_cmd(suite_dir, as_json) -> None:
    """The workloads of SUITE (a folder holding suite.json; default the bundled v0.1): kind, NPUs,
    what each is, its content hash."""
    s = load_suite(suite_dir)
    items = [
        {k: e.to_dict()[k] for k in ("name", "kind", "npus", "description", "steps", "sha256")} for e in s.workloads
    ]
    if as_json:
        print_json({"suite": s.name, "version": s.version, "reference_system": s.reference_system, "workloads": items})
        return
    t = Table(
        {
            "name": [i["name"] for i in items],
            "kind": [i["kind"] for i in items],
            "NPUs": [i["npus"] for i in items],
            "description": [i["description"] for i in items],
            "sha256": [i["sha256"][:12] for i in items],
        },
        title=f"{s.label}: {len(items)} workloads, reference system "
        + ", ".join(str(v) if k == "system" else f"{k} {v}" for k, v in s.reference_system.items()),
        spec={"NPUs": Column(format=",")},
    )
    show(t, limit=None)


@suite.command("run")
@click.option("--system", "system", required=True, help="A system preset (`chakra systems`) or a JSON description.")
@click.option("-o", "--output", "out", required=True, help="The result folder (result.json).")
@click.option("--division", type=click.Choice(["closed", "open"]), default="closed", show_default=True)
@click.option(
    "--change",
    "changes",
    multiple=True,
    help="Open division: WORKLOAD:KEY=VALUE, a plan field (tp, pp, virtual_stages, ...) or a transform "
    "(speedup, comm_scale, ...); repeatable, each recorded in the result.",
)
@click.option("--only", multiple=True, help="Run only these workloads (the result then has no score).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Local worker processes [default: CPUs].")
@click.option("--ray", default=None, help="Run on Ray: 'auto' (a local runtime) or a cluster address.")
@SUITE_ARGUMENT
@json_option
def run_cmd(system, out, division, changes, only, workers, ray, suite_dir, as_json) -> None:
    """Run every workload of SUITE (default the bundled v0.1) on SYSTEM and on the reference
    system; write the result."""
    s = load_suite(suite_dir)
    n = len(only or s.workloads)
    with steps(f"{s.label} on {system}", n * 3) as tick:
        res = run_suite(
            system,
            out,
            suite=s,
            division=division,
            changes=changes,
            only=list(only) or None,
            workers=workers,
            ray=ray,
            progress=tick,
            command=["chakra", *sys.argv[1:]],
        )
    if as_json:
        print_json(res.to_dict())
        return
    t = Table(
        {
            "workload": [w["name"] for w in res.workloads],
            "NPUs": [w["npus"] for w in res.workloads],
            "s per step": [w["step_s"] for w in res.workloads],
            "reference s": [w["reference_step_s"] for w in res.workloads],
            "speedup": [w["speedup"] for w in res.workloads],
            "J per step": [w["energy_j_per_step"] for w in res.workloads],
            "valid": ["yes" if w["valid"] else f"no: {w['why']}" for w in res.workloads],
        },
        title=f"{res.suite} v{res.version} ({res.division}) on {res.system['name']}, "
        f"reference {res.reference_system['name']}",
        spec={
            "NPUs": Column(format=","),
            "s per step": Column(format=".4g"),
            "reference s": Column(format=".4g"),
            "speedup": Column(format=".3f"),
            "J per step": Column(format=".4g"),
        },
    )
    show(t, limit=None)
    sc = res.score
    con = console()
    if sc["score"] is not None:
        con.print(f"score ({res.division}): {sc['score']:.4f} (geometric mean of {sc['valid']} speedups)")
    else:
        partial = f"{sc['partial_score']:.4f}" if sc["partial_score"] else "-"
        con.print(
            f"no score ({res.division}): {sc['valid']} of {sc['workloads']} workloads valid; partial {partial}; "
            f"missing: {', '.join(sc['missing'])}"
        )
    con.print(f"wrote {out}/result.json in {res.wall_s:.1f} s; verify with: chakra suite check {out}")


@suite.command("check")
@click.argument("folder", type=click.Path(exists=True))
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Local worker processes [default: CPUs].")
@click.option("--ray", default=None, help="Run on Ray: 'auto' or a cluster address.")
@SUITE_OPTION
@json_option
def check_cmd(folder, workers, ray, suite_dir, as_json) -> None:
    """Derive every number of a result folder again; exit 1 on any difference."""
    with steps(f"checking {folder}", None) as tick:
        rep = check_result(folder, suite=suite_dir, workers=workers, ray=ray, progress=tick)
    if as_json:
        print_json(rep.to_dict())
    else:
        for p in rep.problems:
            click.echo(f"FAIL {p}")
        click.echo(f"{'OK' if rep.ok else 'FAILED'}: {rep.workloads} workloads, {len(rep.problems)} problem(s)")
    if not rep.ok:
        sys.exit(1)


@suite.command("report")
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", "out", required=True, help="The leaderboard's HTML file.")
def report_cmd(folders, out) -> None:
    """A leaderboard of result folders: systems side by side, per-workload speedups, divisions."""
    path = write_leaderboard(list(folders), out)
    click.echo(f"wrote {path}")


@suite.command("add")
@click.argument("trace")
@click.option("--name", required=True, help="The workload's name in the suite.")
@click.option("--suite", "suite_dir", required=True, help="The suite folder to register it in (made if new).")
@click.option("--obfuscate", "level", type=click.Choice(["a", "b", "c", "d"]), default=None, help="Obfuscate first.")
@click.option("--secret-file", default=None, help="The obfuscation secret [default: random, not kept].")
@click.option("--steps", "n_steps", type=click.IntRange(min=1), default=1, show_default=True, help="Steps recorded.")
@click.option("--samples-per-step", type=click.IntRange(min=1), default=None)
@click.option("--tokens-per-step", type=click.IntRange(min=1), default=None)
@click.option("--description", default="", help="What the job is.")
@click.option("--comm-groups", default=None, help="The job's communicator groups file.")
@json_option
def add_cmd(
    trace, name, suite_dir, level, secret_file, n_steps, samples_per_step, tokens_per_step, description, comm_groups,
    as_json,
) -> None:  # fmt: skip
    """Validate, obfuscate, leak-scan and register a recorded job in a suite, with its provenance."""
    secret = None
    if secret_file:
        secret = _trimmed(read_secret(secret_file))
    e = add_trace(
        trace,
        name,
        suite_dir,
        obfuscate_level=level,
        secret=secret,
        description=description,
        steps=n_steps,
        samples_per_step=samples_per_step,
        tokens_per_step=tokens_per_step,
        comm_groups=comm_groups,
    )
    if as_json:
        print_json(e.to_dict())
        return
    click.echo(f"registered {e.name} ({e.npus} ranks, sha256 {e.sha256[:16]}...) in {suite_dir}")
