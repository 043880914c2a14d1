"""The `chakra` command as a whole: every command, found by walking the click group (so a new one is
covered without editing this file), fails on bad input the same way, and options agree on names."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import click
import pytest

from chakra_trace.cli import cli, main
from chakra_trace.simulate.presets import PRESETS
from conftest import DATA, run_cli


def _walk(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            out += _walk(cmd, (*path, name))
        else:
            out.append(((*path, name), cmd))
    return out


COMMANDS = _walk(cli)
IDS = [" ".join(p) for p, _ in COMMANDS]


def _value(opt: click.Option, tmp_path) -> list[str]:
    """A valid value for a required option, so that the bad input is what fails."""
    if opt.name in ("output", "out", "out_dir", "prefix"):
        return [str(tmp_path / "out" / "result.json")]
    if opt.name == "system":
        return ["ring-8"]
    if isinstance(opt.type, click.Choice):
        return [str(opt.type.choices[0])]
    if isinstance(opt.type, (click.types.IntParamType, click.types.IntRange)):
        return ["2"]
    return [str(tmp_path / "missing.yml")]


def _argv(path: tuple[str, ...], cmd: click.Command, bad: str, tmp_path) -> list[str]:
    """The command with `bad` for every positional argument and usable values for required options."""
    argv = list(path)
    for p in cmd.params:
        if isinstance(p, click.Option) and (p.required or p.name == "system"):  # simulate on a preset too
            argv += [p.opts[0], *_value(p, tmp_path)]
    for p in cmd.params:
        if isinstance(p, click.Argument):
            if p.name in ("dst",):  # an output
                argv.append(str(tmp_path / "out.json"))
            else:
                argv.append(bad)
    return argv


@pytest.fixture
def bad_inputs(tmp_path):
    garbage = tmp_path / "garbage.et"
    garbage.write_bytes(bytes(range(256)) * 8 + b"\xff" * 100)
    (tmp_path / "empty.et").write_bytes(b"")
    (tmp_path / "other.json").write_text('{"hello": [1, 2, 3]}')
    return {
        "missing": str(tmp_path / "no_such_file.et"),
        "garbage": str(garbage),
        "empty": str(tmp_path / "empty.et"),
        "json": str(tmp_path / "other.json"),
    }


def test_the_walk_finds_every_command():
    assert {"info", "simulate", "analyze breakdown", "convert pytorch", "collect", "bench compare"} <= set(IDS)
    assert len(IDS) >= 25


@pytest.mark.parametrize("kind", ["missing", "garbage", "empty", "json"])
@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_bad_input_is_one_line_and_exit_2(path, cmd, kind, bad_inputs, tmp_path, capsys):
    argv = _argv(path, cmd, bad_inputs[kind], tmp_path)
    rc, out, err = run_cli(argv, capsys)
    lines = err.splitlines()
    assert rc == 2, (argv, rc, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > len("error: "), (argv, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)


def test_a_usage_error_is_one_line_naming_the_help(capsys):
    rc, _, err = run_cli(["info", "--no-such-option"], capsys)
    assert rc == 2
    (line,) = err.splitlines()
    assert line.startswith("error: No such option") and "--no-such-option" in line
    assert line.endswith(" (see 'chakra info --help')")


def test_a_bug_is_one_line_and_says_how_to_see_more(monkeypatch, capsys, tmp_path):
    from chakra_trace.cli import info as info_mod

    def boom(*_a, **_k):
        raise KeyError("oops")

    monkeypatch.setattr(info_mod, "open_workload", boom)
    rc, _, err = run_cli(["info", str(tmp_path)], capsys)
    assert rc == 2
    assert err.splitlines() == ["error: internal error: KeyError: 'oops' (run with --debug for the traceback)"]
    with pytest.raises(KeyError):
        main(["--debug", "info", str(tmp_path)])


# --------------------------------------------------------------------------- PyTorch files given as Chakra

READERS = [
    ("info",),
    ("analyze", "breakdown"),
    ("simulate",),
    ("validate",),
    ("timeline",),
    ("graph",),
    ("to-json",),
    ("report",),
]


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_pytorch_host_trace_says_how_to_convert_it(command, tmp_path, capsys):
    host = tmp_path / "rank0.et.json.gz"
    host.write_bytes((DATA / "ddp_rank0.et.json.gz").read_bytes())
    (tmp_path / "rank0.kineto.json.gz").write_bytes((DATA / "kineto" / "ddp_rank0.kineto.json.gz").read_bytes())
    extra = {"simulate": ["--system", "ring-8"], "timeline": ["-o", str(tmp_path / "t.json")]}
    extra["graph"] = ["-o", str(tmp_path / "g.dot")]
    extra["to-json"] = [str(tmp_path / "t.json")]
    extra["report"] = ["-o", str(tmp_path / "r.html")]
    rc, _, err = run_cli([*command, str(host), *extra.get(command[0], [])], capsys)
    assert rc == 2
    (line,) = err.splitlines()
    assert "a PyTorch host execution trace" in line
    assert f"chakra convert pytorch {host} {tmp_path / 'rank0.kineto.json.gz'} -o {tmp_path / 'rank0'}" in line


def test_a_kineto_trace_says_what_it_is(tmp_path, capsys):
    k = tmp_path / "trace.json"
    with gzip.open(DATA / "kineto" / "ddp_rank0.kineto.json.gz") as f:
        k.write_bytes(f.read())
    rc, _, err = run_cli(["info", str(k)], capsys)
    assert rc == 2
    (line,) = err.splitlines()
    assert "a Kineto (PyTorch profiler) trace" in line and "chakra convert pytorch HOST_TRACE.json" in line


# --------------------------------------------------------------------------- names agree across commands


def _options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


#: Files written beside a command's main result, each named for what it holds.
SECOND_OUTPUTS = {"--timeline", "--export", "--fix"}

#: Commands whose only result is a file they write (the command says where, in one line).
WRITES_ONLY = {
    "suite report",
    "plot breakdown",
    "plot imbalance",
    "plot matrix",
    "plot roofline",
    "report",
    "catalog report",
    "catalog export",
}


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_option_names_agree(path, cmd):
    name = " ".join(path)
    for o in _options(cmd):
        longs = [x for x in o.opts if x.startswith("--")]
        # the file (or folder) a command writes is -o/--output, nothing else
        assert not set(longs) & {"--out", "--out-dir", "--output-file", "--outfile", "--dest"}, (name, o.opts)
        if "-o" in o.opts:
            assert "--output" in o.opts, (name, o.opts)
        if "--output" in o.opts:
            assert "-o" in o.opts, (name, o.opts)
        if "--json" in o.opts:
            assert o.is_flag and o.name == "as_json", (name, o.opts)
        if o.name == "comm_groups":
            assert o.opts == ["--comm-groups"], (name, o.opts)
        if isinstance(o.type, click.Path) and not o.type.exists:  # a path written, not read
            assert "--output" in o.opts or longs[0] in SECOND_OUTPUTS, f"chakra {name} {longs[0]}: call it -o/--output"
    if name not in WRITES_ONLY:  # a result printed is also there as JSON
        assert any("--json" in o.opts for o in _options(cmd)), f"chakra {name} prints a result but has no --json"


def test_old_spellings_still_work_hidden(tmp_path, capsys):
    hidden = {
        " ".join(p): {x for o in c.params if isinstance(o, click.Option) and o.hidden for x in o.opts}
        for p, c in COMMANDS
    }
    assert "--out" in hidden["collect"] and "--workload" in hidden["simulate"]
    rc, _, err = run_cli(["collect", "--out", str(tmp_path / "a"), "-o", str(tmp_path / "b"), "--", "true"], capsys)
    assert rc == 2 and "give the output folder once" in err


# --------------------------------------------------------------------------- simulate and presets


@pytest.fixture(scope="module")
def demo_job(tmp_path_factory):
    from chakra_trace import TraceBuilder, write_trace

    d = tmp_path_factory.mktemp("job")
    for r in range(2):
        b = TraceBuilder()
        c = b.comp("step", 1000)
        b.collective("ALL_REDUCE", 1 << 20, deps=[c])
        write_trace(b.build(), d / f"job.{r}.et")
    return d / "job"


def test_simulate_takes_the_workload_positionally_and_a_preset(demo_job, capsys):
    rc, out, _ = run_cli(["simulate", str(demo_job), "--system", "ring-8", "--json"], capsys)
    assert rc == 0
    assert len(json.loads(out)["finish_ns"]) == 8


def test_simulate_old_flags_and_config_files(demo_job, tmp_path, capsys):
    net = tmp_path / "net.yml"
    net.write_text("topology: [Ring]\nnpus_count: [2]\nbandwidth: [50]\nlatency: [500]\n")
    sys_ = tmp_path / "sys.json"
    sys_.write_text(json.dumps({"all-reduce-implementation": ["ring"]}))
    new = run_cli(["simulate", str(demo_job), "--network", str(net), "--system", str(sys_), "--json"], capsys)
    old = run_cli(
        ["simulate", "--workload", str(demo_job), "--network", str(net), "--system", str(sys_), "--json"], capsys
    )
    assert new[0] == old[0] == 0
    assert json.loads(new[1])["finish_ns"] == json.loads(old[1])["finish_ns"]


def test_simulate_errors_list_the_presets(demo_job, tmp_path, capsys):
    rc, _, err = run_cli(["simulate", str(demo_job), "--system", "nope"], capsys)
    assert rc == 2 and ", ".join(PRESETS) in err
    sys_ = tmp_path / "sys.json"
    sys_.write_text("{}")
    rc, _, err = run_cli(["simulate", str(demo_job), "--system", str(sys_)], capsys)
    assert rc == 2 and "--network" in err and len(err.splitlines()) == 1
    rc, _, err = run_cli(["simulate", str(demo_job)], capsys)
    assert rc == 2 and "--system" in err


@pytest.mark.parametrize("command", [("simulate", "--help"), ("analyze", "breakdown", "--help"), ("report", "--help")])
def test_help_lists_every_preset(command, capsys):
    assert main(list(command)) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in PRESETS:
        assert name in text, (command, name)


def test_analyses_take_a_system_file_pair_too(demo_job, tmp_path, capsys):
    net = tmp_path / "net.yml"
    net.write_text("topology: [Ring]\nnpus_count: [2]\nbandwidth: [50]\nlatency: [500]\n")
    sys_ = tmp_path / "sys.json"
    sys_.write_text(json.dumps({"all-reduce-implementation": ["ring"]}))
    rc, out, _ = run_cli(["analyze", "breakdown", str(demo_job), "--simulate", f"{net},{sys_}", "--json"], capsys)
    assert rc == 0 and len(json.loads(out)["ranks"]) == 2


# --------------------------------------------------------------------------- tables in pipes


def test_tables_in_a_pipe_are_not_truncated(demo_job):
    """`chakra simulate ... | cat`: a real pipe, no terminal: every number whole, no '…'."""
    code = "import sys; from chakra_trace.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.run(
        [sys.executable, "-c", code, "simulate", str(demo_job), "--system", "dgx-8x128"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "40", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert "…" not in p.stdout
    sim = json.loads(
        subprocess.run(
            [sys.executable, "-c", code, "simulate", str(demo_job), "--system", "dgx-8x128", "--json"],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
            check=True,
        ).stdout
    )
    assert f"{max(sim['finish_ns']):,}" in p.stdout


# --------------------------------------------------------------------------- bad values, named


def test_bad_values_name_what_is_wrong(demo_job, tmp_path, capsys):
    cases = [
        (["analyze", "critical-path", str(demo_job), "--rank", "7"], "no rank 7; the job has ranks [0, 1]"),
        (["analyze", "imbalance", str(demo_job), "--tolerance", "-1"], "'--tolerance': -1.0 is not in the range"),
        (
            ["to-json", f"{demo_job}.0.et", str(tmp_path / "file" / "x.json")],
            f"{tmp_path / 'file'}",
        ),  # a file in the way
        (["simulate", str(demo_job), "--system", "ring-8", "--network", "x"], "'--network'"),
    ]
    (tmp_path / "file").write_text("")  # every writer makes its folder, unless a file stands there
    for argv, expected in cases:
        rc, _, err = run_cli(argv, capsys)
        assert rc == 2 and expected in err and len(err.splitlines()) == 1, (argv, err)
        assert ".tmp" not in err  # the file asked for, not the temporary one beside it
