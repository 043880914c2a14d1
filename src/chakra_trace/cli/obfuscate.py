"""`chakra obfuscate`: a job others may see, without its model's names, strings or shapes."""

from __future__ import annotations

import os
import secrets
import warnings

import click

from ..errors import ChakraError
from ..io.documents import open_regular
from ..io.outputs import comm_groups_path
from ..simulate.presets import resolve, simulate_on
from ..synthesize.leaks import leak_scan
from ..synthesize.obfuscate import LEVELS, check_secret
from ..synthesize.obfuscate import obfuscate as obfuscate_job
from .common import comm_groups_option, console, json_option, open_workload, print_json

SECRET_ENV = "CHAKRA_OBFUSCATE_SECRET"
SECRET_FILE_LIMIT = 64 << 10


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
    help=f"Key of every hash, 16 bytes or more (else ${SECRET_ENV}, else a fresh random one).",
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
@click.option(
    "--dummies",
    type=float,
    default=0.25,
    show_default=True,
    help="d: compute ops split in two, per node (no time added).",
)
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
        secret, source = check_secret(_trimmed(read_secret(secret_file)), f"the secret in {secret_file}"), "file"
    elif SECRET_ENV in os.environ:
        secret, source = check_secret(_trimmed(os.environ[SECRET_ENV].encode()), f"${SECRET_ENV}"), "environment"
    else:
        secret, source = secrets.token_bytes(32), "random, not kept"
    with warnings.catch_warnings(record=True) as held:  # (they may name the original's ops and groups)
        warnings.simplefilter("always")
        w = open_workload(workload, comm_groups)
        res = obfuscate_job(w, level, secret, names=names, bucket=bucket, jitter=jitter, dummies=dummies)
    files = res.workload.save(prefix, groups=res.workload.groups or None)
    if res.workload.groups:
        files.append(comm_groups_path(prefix))
    out: dict = {"output": prefix, "files": len(files), "report": res.report.to_dict()}
    if not no_scan:
        out["leaks"] = leak_scan(w, files).to_dict()
    out["simulated"], shown, hidden = checked(w, res.workload, systems, workload)
    hidden += len(held)
    out["secret"] = source
    out["warnings"] = ([_hidden(hidden, workload)] if hidden else []) + shown
    for message in out["warnings"]:
        warnings.warn(message, ObfuscateWarning, stacklevel=1)
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
        + (f"; {rep['metadata_dropped']:,} global metadata attributes" if rep["metadata_dropped"] else "")
    )
    con.print(f"renumbered: node ids, {rep['threads']:,} thread/stream ids; recording time shifted to the first rank's")
    if level != "a":
        con.print(f"sizes bucketed: at most {rep['max_size_change']:.2%} moved")
    if level in ("c", "d"):
        con.print(f"compute times perturbed: at most {rep['max_duration_change']:.2%} moved")
    if level == "d":
        con.print(f"structure: {rep['fused']:,} nodes fused into their chains, {rep['dummies']:,} ops split in two")
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


class ObfuscateWarning(UserWarning):
    """What `chakra obfuscate` says about the job it wrote (names and groups as the output has them)."""


def read_secret(path: str) -> bytes:
    """A secret file's bytes: a regular file of at most 64 KiB."""
    with open_regular(path, "secret file") as f:
        data = f.read(SECRET_FILE_LIMIT + 1)
    if len(data) > SECRET_FILE_LIMIT:
        raise ChakraError(f"{path}: more than {SECRET_FILE_LIMIT} bytes: not a secret file")
    return data


def _trimmed(secret: bytes) -> bytes:
    """A secret without the whitespace around it (a trailing newline), unless that is all it
    holds (then `check_secret` says so)."""
    return secret.strip() or secret


def checked(original, obfuscated, systems, workload: str) -> tuple[list[dict], list[str], int]:
    """The step of both jobs on each system (`simulate.presets.step_changes`), the warnings the
    obfuscated job's simulations raised (one each, in order), and how many the original's raised:
    those are not shown, nor the original's errors, since they name its ops and groups (the
    obfuscated job runs first: an error they share is said in the output's names)."""
    shown: list[str]
    steps, shown, hidden = [], [], 0
    seen: set[str] = set()
    for spec in systems:
        with warnings.catch_warnings(record=True) as after:
            warnings.simplefilter("always")
            b = int(simulate_on(obfuscated, spec).recording_ns)
        with warnings.catch_warnings(record=True) as before:
            warnings.simplefilter("always")
            try:
                a = int(simulate_on(original, spec).recording_ns)
            except ChakraError:
                raise ChakraError(
                    f"--check {spec}: the original job does not simulate (not shown: the error names its ops and "
                    f"groups; `chakra simulate {workload}` shows it)"
                ) from None
        hidden += len(before)
        shown.extend(dict.fromkeys(m for m in map(str, (w.message for w in after)) if m not in seen))
        seen.update(shown)
        name = resolve(spec).name
        steps.append({"system": name, "original_ns": a, "changed_ns": b, "change": b / a - 1 if a else 0.0})
    return steps, shown, hidden


def _hidden(count: int, workload: str) -> str:
    return (
        f"{count} warning(s) about the original job not shown: they may name its ops and groups "
        f"(`chakra validate {workload}` shows them)"
    )
