"""`chakra obfuscate`: a job others may see, without its model's names, strings or shapes."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import click

from ..io.workload import write_comm_groups
from ..simulate.presets import step_changes
from ..synthesize.leaks import leak_scan
from ..synthesize.obfuscate import LEVELS
from ..synthesize.obfuscate import obfuscate as obfuscate_job
from .common import comm_groups_option, console, json_option, open_workload, print_json

SECRET_ENV = "CHAKRA_OBFUSCATE_SECRET"


@click.command()
@click.argument("workload")
@click.option("--output", "-o", "prefix", metavar="PREFIX", required=True, help="Write PREFIX.<rank>.et.")
@comm_groups_option
@click.option(
    "--level",
    type=click.Choice(LEVELS),
    default="b",
    show_default=True,
    help="a: names/strings; b: + sizes bucketed; c: + durations perturbed; d: + structure.",
)
@click.option(
    "--secret-file",
    type=click.Path(exists=True, dir_okay=False),
    help=f"Key of every hash (else ${SECRET_ENV}, else a fresh random one).",
)
@click.option(
    "--names",
    type=click.Choice(["hash", "class"]),
    default="hash",
    show_default=True,
    help="Op names as keyed hashes, or as their node class.",
)
@click.option(
    "--bucket", type=float, default=0.01, show_default=True, help="b: sizes move by at most about this share."
)
@click.option(
    "--jitter", type=float, default=0.05, show_default=True, help="c: compute times move by at most this share."
)
@click.option("--dummies", type=float, default=0.05, show_default=True, help="d: zero-time ops added, per node.")
@click.option(
    "--check",
    "systems",
    multiple=True,
    default=("recorded", "switch"),
    show_default=True,
    help="Simulate both jobs on these systems (presets) and print the step change; repeat.",
)
@click.option("--no-scan", is_flag=True, help="Skip the leak scan of the written files.")
@json_option
def obfuscate(
    workload, prefix, comm_groups, level, secret_file, names, bucket, jitter, dummies, systems, no_scan, as_json
) -> None:
    """Write WORKLOAD obfuscated up to --level (`chakra_trace.synthesize.obfuscate`), scan the
    written bytes for any name, string or shape of the original (`synthesize.leaks`), and
    simulate both on --check systems. Keep the secret to obfuscate other jobs consistently (the
    same op name, the same token); never share it.

    \b
      chakra obfuscate out/job -o shared/job --level b --secret-file key.txt
    """
    if secret_file:
        secret, source = Path(secret_file).read_bytes().strip(), "file"
    elif os.environ.get(SECRET_ENV):
        secret, source = os.environ[SECRET_ENV].encode(), "environment"
    else:
        secret, source = secrets.token_bytes(32), "random, not kept"
    w = open_workload(workload, comm_groups)
    res = obfuscate_job(w, level, secret, names=names, bucket=bucket, jitter=jitter, dummies=dummies)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    files = res.workload.save(prefix)
    if res.workload.groups:
        files.append(write_comm_groups(res.workload.groups, f"{prefix}.comm_groups.json"))
    out: dict = {"output": prefix, "files": len(files), "report": res.report.to_dict()}
    if not no_scan:
        out["leaks"] = leak_scan(w, files).to_dict()
    out["simulated"] = step_changes(w, res.workload, systems) if systems else []
    out["secret"] = source
    if as_json:
        print_json(out)
        return
    con = console()
    rep = out["report"]
    con.print(
        f"level {level}: wrote {len(files)} files ({prefix}.*); {rep['names']:,} op names and {rep['groups']} groups replaced"
    )
    dropped = ", ".join(f"{k} ({v:,})" for k, v in sorted(rep["attributes_dropped"].items()))
    con.print(
        f"dropped: inputs/outputs and attributes of {rep['extras_dropped']:,} nodes"
        + (f"; attributes {dropped}" if dropped else "")
    )
    if level != "a":
        con.print(f"sizes bucketed: at most {rep['max_size_change']:.2%} moved")
    if level in ("c", "d"):
        con.print(f"compute times perturbed: at most {rep['max_duration_change']:.2%} moved")
    if level == "d":
        con.print(f"structure: {rep['fused']:,} nodes fused into their chains, {rep['dummies']:,} zero-time ops added")
    if "leaks" in out:
        lk = out["leaks"]
        searched = ", ".join(f"{v:,} {k}s" for k, v in lk["searched"].items() if v)
        verdict = (
            "none found"
            if lk["clean"]
            else f"{lk['found_count']} FOUND: " + ", ".join(f["text"] for f in lk["found"][:5])
        )
        con.print(f"leak scan of {lk['haystack_bytes']:,} bytes for {searched or 'nothing'}: {verdict}")
    for s in out["simulated"]:
        con.print(f"step on {s['system']}: {s['original_ns']:,} -> {s['changed_ns']:,} ns ({s['change']:+.3%})")
    if out["secret"] == "random, not kept":
        con.print(
            f"the secret was random and is not kept: give --secret-file or ${SECRET_ENV} to obfuscate other jobs alike"
        )
