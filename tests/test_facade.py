"""The package's front doors stay cheap: `import chakra_trace` and `chakra --help` import only
what they use (issue 29: `--help` had loaded 245 of 252 modules), and the facade's names and the
ways `Workload.open` reads a job are still all there when first used."""

from __future__ import annotations

import json
import subprocess
import sys

import click

import chakra_trace
from chakra_trace.cli import COMMANDS, LazyGroup, cli
from chakra_trace.cli.convert_group import SUBCOMMANDS, convert
from conftest import DATA


def _loaded_after(code: str) -> list[str]:
    """The package modules a fresh interpreter holds after running `code`."""
    probe = (
        code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('chakra_trace'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_loads_at_most_60_modules():
    loaded = _loaded_after(
        "import contextlib, io, sys\n"
        "sys.argv = ['chakra', '--help']\n"
        "from chakra_trace.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
    )
    assert len(loaded) <= 60, loaded
    assert not [m for m in loaded if m.startswith(("chakra_trace.convert", "chakra_trace.simulate"))], loaded


def test_import_loads_no_verb():
    loaded = _loaded_after("import chakra_trace")
    verbs = ("analyze", "convert", "simulate", "replay", "visualize", "synthesize", "validate", "sweep")
    assert not [m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in verbs], loaded


def test_every_facade_name_resolves():
    for name in chakra_trace.__all__:
        assert getattr(chakra_trace, name) is not None, name
    assert set(chakra_trace.__all__) <= set(dir(chakra_trace))


def test_collect_folders_open_without_the_facade_having_imported_the_converter():
    """`Workload.open` imports the readers the package names at the first open, so a user who
    imported only `io.workload` still opens a `chakra collect` folder (here: 4 ranks)."""
    loaded = _loaded_after(
        "from chakra_trace.io.workload import Workload\n"
        f"assert len(Workload.open({str(DATA / 'pipeline')!r}).traces) == 4\n"
    )
    assert "chakra_trace.convert.pytorch" in loaded


def test_sources_are_asked_in_the_declared_order():
    from chakra_trace.io import workload

    mods = [read.__module__ for _, read in workload._sources()]
    assert mods == ["chakra_trace.convert.pytorch", "chakra_trace.convert.profiler", "chakra_trace.io.merged_file"]


def test_the_help_lines_are_the_commands_short_help(capsys):
    """Each listed line fits the listing (click's 80 columns) and is the command's own short help
    once it is imported, so `--help` and the command agree."""
    for group, table in ((cli, COMMANDS), (convert, SUBCOMMANDS)):
        assert isinstance(group, LazyGroup)
        ctx = click.Context(group)
        for name, (_target, line) in table.items():
            assert line.endswith(".") and len(line) <= 60, (name, line)
            assert group.get_command(ctx, name).get_short_help_str(1000) == line
    for args, table in ((["--help"], COMMANDS), (["convert", "--help"], SUBCOMMANDS)):
        try:
            cli.main(args, prog_name="chakra")
        except SystemExit:
            pass
        out = capsys.readouterr().out
        for name, (_target, line) in table.items():
            assert f"  {name}" in out and line in out, (name, out)
