"""The `chakra` command: a thin layer over the library.

Subcommands are imported only when run, so `chakra --help` stays fast. Errors on bad input
print one line and exit with status 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import signal
import sys
import threading
import warnings

import click
from google.protobuf.internal import api_implementation

from .. import _native
from ..errors import ChakraError
from . import terminal

# command name -> ("module:function" relative to chakra_trace.cli, its line in `chakra --help`)
COMMANDS = {
    "info": ("info:info", "Counts by node type, edges, collectives and time span."),
    "validate": ("validate:validate", "Check `.et` files or workloads."),
    "to-json": ("jsonio:to_json", "Convert a `.et` file to lossless JSON."),
    "from-json": ("jsonio:from_json", "Convert JSON written by `to-json` back to `.et`."),
    "convert": ("convert_group:convert", "Convert other trace and workload formats into Chakra."),
    "collect": ("collect:collect", "Run a command and record its host and Kineto traces."),
    "capture": ("capture:capture", "Capture one training step of a model without its math."),
    "parallelize": ("parallelize:parallelize", "Per-rank traces of a parallelism plan."),
    "transform": ("transform:transform", "Write a workload changed as a what-if asks."),
    "simulate": ("simulate:simulate", "Simulate a workload on a system."),
    "analyze": ("analyze_device:analyze", "Analyses of a workload: breakdowns, paths, devices."),
    "timeline": ("timeline:timeline", "Write a workload's timeline as Chrome Trace JSON."),
    "graph": ("graph:graph", "Export the dependency graph of one rank."),
    "plot": ("plot:plot", "Figures of a workload."),
    "report": ("report:report", "Write a workload's report."),
    "replay": ("replay:replay", "Replay a trace here and measure its step time."),
    "bench": ("bench:bench", "Saved benchmark results."),
    "merge": ("merge:merge_cmd", "Every rank of a workload in one trace."),
    "split": ("merge:split_cmd", "The per-rank files of a merged trace, as they were."),
    "obfuscate": ("obfuscate:obfuscate", "Write a workload obfuscated, checked for leaks."),
    "generate": ("generate:generate", "Learn a generator of traces; sample new jobs."),
    "select": ("select:select", "Choose K jobs that represent a fleet."),
    "sweep": ("sweep:sweep", "Simulate every point of a design space; query it."),
    "catalog": ("catalog:catalog", "A fleet of traces in one DuckDB file."),
    "calibrate": ("calibrate:calibrate", "Measure this machine into a system profile."),
    "predict": ("predict:predict", "Predict a job's step time on a profiled system."),
    "suite": ("suite:suite", "The Chakra trace benchmark suite: run, check, report, add."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used: `--help` lists them from the
    table's lines, which are also each command's short help once imported."""

    def __init__(self, *args, commands: dict[str, tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = COMMANDS if commands is None else commands

    def list_commands(self, ctx):
        return sorted(self.lazy)

    def get_command(self, ctx, name):
        entry = self.lazy.get(name)
        if entry is None:
            return None
        target, line = entry
        module, attr = target.split(":")
        cmd = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        cmd.short_help = line
        return cmd

    def format_commands(self, ctx, formatter):
        rows = [(name, self.lazy[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def version_lines() -> list[str]:
    """What a bug report needs, one line each: the versions that change results or speed, and
    which C kernels run (a refused or missing one means the slower numpy/Python path)."""
    lines = [
        f"chakra-trace {_version('chakra-trace')} ({_native.HERE})",
        f"Python {platform.python_version()} ({platform.python_implementation()})",
        f"numpy {_version('numpy')}",
        f"protobuf {_version('protobuf')} ({api_implementation.Type()})",
    ]
    for k in _native.status().values():
        where = f" ({k.file})" if k.file else ""
        lines.append(f"C kernel {k.module}: {'active' if k.active else k.reason}{where}")
    return lines


def _show_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo("\n".join(version_lines()))
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the versions (package, Python, numpy, protobuf) and which C kernels run, then exit.",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Chakra execution traces: collect, convert, validate, analyze, simulate and report."""
    ctx.obj = {**(ctx.obj or {}), "debug": debug}  # (``argv``: the command line, from `main`)


class Terminated(BaseException):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that half-written outputs (`atomic_output`'s
    `.tmp` files) are removed on the way out instead of left behind by a killed process."""


def _on_sigterm(signum, frame) -> None:
    if os.getpid() != _MAIN_PID:  # a forked worker: die as it would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated()


_MAIN_PID = os.getpid()


def _handle(signum: int, handler):
    """Install `handler` unless the signal is ignored; returns the handler to restore."""
    current = signal.getsignal(signum)
    if current is not signal.SIG_IGN:
        signal.signal(signum, handler)
    return current


def main(argv: list[str] | None = None) -> int:
    """Run the command (see `_main`), with SIGTERM cleaning up as Ctrl-C does (status 143)."""
    global _MAIN_PID
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    _MAIN_PID = os.getpid()
    # a signal the process was started ignoring (a background job of a script, nohup) stays ignored
    previous = _handle(signal.SIGTERM, _on_sigterm)
    interrupt = _handle(signal.SIGINT, signal.default_int_handler)  # (the package's quiet start ends)
    try:
        return _main(argv)
    except Terminated:
        click.echo("terminated", err=True)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:  # (outside the command: while starting or ending)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, interrupt)


def _main(argv: list[str] | None = None) -> int:
    """Run the command; every error is one line `error: ...` on stderr with status 2 (a usage
    error, bad input, or a bug: the last says so and how to see its traceback)."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    if threading.current_thread() is not threading.main_thread():  # (the warnings module is process-wide)
        return _run(args, debug)
    with warnings.catch_warnings():  # (restored on return: `main` may run inside a program)
        if not debug:  # (--debug: Python's own lines, with where each warning comes from)
            warnings.showwarning = _show_warning
        terminal.reset_warnings()
        try:
            return _run(args, debug)
        finally:
            if terminal.warnings_left():
                click.echo(f"warning: {terminal.warnings_left():,} more warning(s) not shown", err=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning as the CLI shows it: `warning: <message>`, one escaped line, without the
    source file and line Python prints (numpy's arithmetic warnings said in words)."""
    terminal.echo_warning(terminal.python_warning(message, category))


def _run(args: list[str], debug: bool) -> int:
    try:
        rv = cli.main(args=args, prog_name="chakra", standalone_mode=False, obj={"argv": list(args)})
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.NoArgsIsHelpError as e:  # `chakra analyze` alone: the help, as click shows it
        e.show()
        return 2
    except click.UsageError as e:
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        click.echo(f"error: {_one_line(e.format_message()).rstrip('.')}{hint}", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"error: {_one_line(e.format_message())}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        # Bad input is a ChakraError (or an OSError: no such file, no permission); anything else is a
        # bug, still one line so that scripts and users see one kind of failure, with the way to report it.
        if debug:
            raise
        if isinstance(e, MemoryError):  # its message is empty: say what ran out, and why it may have
            msg = (
                f"out of memory while reading/processing {_what(args)} (the input may be too large or hostile; "
                "see SECURITY.md)"
            )
        elif isinstance(e, ChakraError):
            msg = str(e)
        elif isinstance(e, OSError) and e.filename is not None and e.strerror:
            msg = f"{e.filename}: {e.strerror}"
        elif isinstance(e, OSError):
            msg = f"{type(e).__name__}: {e}"
        else:
            msg = f"internal error: {type(e).__name__}: {e} (run with --debug for the traceback)"
        click.echo(f"error: {_one_line(msg)}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0


def _what(args: list[str]) -> str:
    """The command and what it was given, shortened, for an error that carries no message."""
    words = [a for a in args if a != "--debug"]
    text = " ".join(words)
    return f"`chakra {text if len(text) <= 200 else text[:197] + '...'}`"


def _one_line(msg: str) -> str:
    """A message as one line: what follows a newline is joined with '; '. A traceback carried in a
    message (a worker process's failure) shrinks to its last line, the error itself. Control
    characters from the input it names are shown as escapes (`terminal.safe_text`)."""
    lines = [part.strip() for part in terminal.safe_text(str(msg)).splitlines() if part.strip()]
    for line in lines:
        if "Traceback (most recent call last)" in line:
            head = line.split("Traceback (most recent call last)")[0].rstrip(" :")
            lines = [f"{head}: {lines[-1]}" if head else lines[-1]]
            break
    return "; ".join(lines) or "(no message)"
