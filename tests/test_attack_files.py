"""Files the toolkit writes and the folders it reads, under attack (issue 34, items 4, 6 and 7;
review defects 3, 8, 11, 13, 15, 16): caches out of input folders, keyed by content; multi-rank
outputs all or nothing; only regular files read from folders and prefixes; rank numbers in file
names bounded; workers that end with their parent; Ctrl-C while starting without a traceback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chakra_trace import TraceBuilder, Workload, read_trace, write_trace
from chakra_trace.cli import main
from chakra_trace.errors import ChakraError
from chakra_trace.io import cache
from chakra_trace.io.workload import discover
from chakra_trace.synthesize.patterns import training_step
from conftest import sample

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).resolve().parents[1] / "src"  # (the tree under test, for subprocesses)
COLLECT = DATA / "alltoall_list"  # a small `chakra collect` folder: 2 ranks, host + Kineto
FIFO = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")


def _chakra(args: list, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """`chakra ARGS` in a fresh interpreter on this source tree; a hang fails (TimeoutExpired)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), **kw.pop("env", {})}
    return subprocess.run(
        [sys.executable, "-m", "chakra_trace.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kw,
    )


def _one_line_error(capsys, argv: list, *words: str) -> str:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, err
    return err


def _collect_folder(tmp_path: Path, name: str = "job") -> Path:
    folder = tmp_path / name
    shutil.copytree(COLLECT, folder, ignore=shutil.ignore_patterns(".chakra-cache"))
    return folder


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.iterdir()}


def _trace(name: str, n: int = 3):
    b = TraceBuilder()
    prev = None
    for i in range(n):
        prev = b.comp(f"{name}{i}", 10 + i, deps=[] if prev is None else [prev])
    b.collective("ALL_REDUCE", 1024, deps=[prev])
    return b.build()


# --------------------------------------------------------------------------- caches (defects 3, 13)


def test_a_cache_link_in_a_shared_folder_is_never_followed(tmp_path, capsys):
    """Defect 3: `.chakra-cache -> ../victim` in a collect folder made `chakra info` delete the
    victim's `rank<r>.*.et` files and write its own there."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "rank0.notes.et").write_text("precious\n")
    (victim / "kineto-rank0.notes.et").write_text("precious\n")
    job = _collect_folder(tmp_path)
    os.symlink("../victim", job / ".chakra-cache")
    before = _listing(victim)
    assert main(["info", str(job)]) == 0
    assert _listing(victim) == before and (victim / "rank0.notes.et").read_text() == "precious\n"
    assert Workload.open(job).ranks == [0, 1]
    assert _listing(victim) == before


def test_a_planted_cache_is_never_read(tmp_path):
    """Defect 13: a shared folder carried `.chakra-cache/rank0.<key>.et` whose key (names, sizes,
    mtimes: all kept by tar) matched, and its planted trace was analysed instead of the JSON."""
    from chakra_trace.convert.pytorch import converter_stamp

    job = _collect_folder(tmp_path)
    sources = [job / "rank0.et.json.gz", job / "rank0.kineto.json.gz"]
    planted = job / ".chakra-cache" / f"rank0.{cache.cache_key(sources, converter_stamp())}.et"
    planted.parent.mkdir()
    write_trace(_trace("PLANTED_BY_ATTACKER_"), planted)
    w = Workload.open(job)
    assert not any("PLANTED" in n for t in w.traces.values() for n in t.names)


def test_the_key_is_the_bytes_not_names_sizes_or_times(tmp_path):
    """Two sources alike in name, size and modification time but not in content get two keys."""
    a, b = tmp_path / "a" / "rank0.et.json", tmp_path / "b" / "rank0.et.json"
    for p, text in ((a, '{"x": 1}'), (b, '{"x": 2}')):
        p.parent.mkdir()
        p.write_text(text)
        os.utime(p, ns=(10**18, 10**18))
    assert cache.cache_key([a], "s") != cache.cache_key([b], "s")
    assert cache.cache_key([a], "s") == cache.cache_key([a], "s") != cache.cache_key([a], "t")


def test_reading_a_collect_folder_writes_nothing_into_it(tmp_path, capsys, monkeypatch):
    """`chakra info FOLDER` (and every reader) leaves FOLDER as it was; the converted copies go
    to the user's cache ($XDG_CACHE_HOME/chakra-trace here), made private (0700)."""
    job = _collect_folder(tmp_path)
    before = _listing(job)
    monkeypatch.delenv("CHAKRA_TRACE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    where = tmp_path / "home-cache" / "chakra-trace"
    assert main(["info", str(job)]) == 0
    assert main(["analyze", "top", str(job)]) == 0
    assert _listing(job) == before
    assert (where.stat().st_mode & 0o777) == 0o700
    assert sorted(p.name.split(".")[0] for p in where.iterdir()) == ["rank0", "rank1"]


def test_an_unsafe_cache_folder_is_not_used(tmp_path, monkeypatch):
    """The cache is used only when it is the user's own private folder: a link, a folder others
    may write, or a link planted as an entry is neither read nor written through."""
    job = _collect_folder(tmp_path)
    expected = Workload.open(job)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_DIR", str(tmp_path / "link"))
    assert Workload.open(job)[0].equals(expected[0])
    assert list(elsewhere.iterdir()) == []
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_DIR", str(shared))
    assert Workload.open(job)[0].equals(expected[0]) and list(shared.iterdir()) == []
    own = tmp_path / "own"
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_DIR", str(own))
    Workload.open(job)
    for entry in list(own.iterdir()):  # each entry replaced by a link to a planted trace
        decoy = tmp_path / f"decoy-{entry.name}"
        write_trace(_trace("PLANTED_"), decoy)
        entry.unlink()
        entry.symlink_to(decoy)
    w = Workload.open(job)
    assert not any("PLANTED" in n for t in w.traces.values() for n in t.names)
    assert w[0].equals(expected[0])


def test_caching_off_writes_nothing(tmp_path, monkeypatch):
    job = _collect_folder(tmp_path)
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CHAKRA_TRACE_CACHE", "0")
    Workload.open(job)
    assert not (tmp_path / "c").exists() and not (job / ".chakra-cache").exists()


def test_the_cache_stays_under_its_size_limit(tmp_path, monkeypatch):
    """Least recently used entries go first once the folder holds more than its limit."""
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CHAKRA_TRACE_CACHE_MAX_BYTES", "2500")
    for i in range(4):
        cache.store(f"x{i}.json", b"x" * 1000)
        os.utime(tmp_path / "c" / f"x{i}.json", ns=(i * 10**9, i * 10**9))
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["x2.json", "x3.json"]
    assert cache.load("x2.json") == b"x" * 1000  # (read: now the most recently used)
    cache.store("x4.json", b"x" * 1000)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["x2.json", "x4.json"]


# --------------------------------------------------------------------------- multi-rank outputs (defect 8)


@pytest.fixture
def big(tmp_path) -> Path:
    """An 8-rank job (`big.<rank>.et`) with communicator groups."""
    w = training_step(8, 40, 100, 4096)
    prefix = tmp_path / "big"
    w.save(prefix)
    return prefix


def _set(prefix: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(prefix.parent.iterdir()) if p.name.startswith(prefix.name + ".")}


def test_an_interrupted_transform_leaves_the_old_set_whole(big, tmp_path, monkeypatch, capsys):
    """Defect 8: Ctrl-C after 4 of 8 files left ranks 0-3 of the new run beside 4-7 of the old."""
    out = tmp_path / "o" / "tr"
    assert main(["transform", str(big), "--speedup", "2", "-o", str(out)]) == 0
    old = _set(out)
    assert len(old) == 8
    import chakra_trace.io.workload as workload_module

    real, calls = workload_module.write_trace, []

    def interrupted(*a, **k):
        calls.append(a[1])
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(workload_module, "write_trace", interrupted)
    assert main(["transform", str(big), "--speedup", "4", "-o", str(out)]) == 130
    assert len(calls) == 4
    assert _set(out) == old
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(old)  # no temporary left
    calls.clear()  # into an empty folder: no rank at all (not 3 ranks read later as a 3-rank job)
    assert main(["transform", str(big), "--speedup", "4", "-o", str(tmp_path / "empty" / "tr")]) == 130
    assert list((tmp_path / "empty").iterdir()) == []
    monkeypatch.setattr(workload_module, "write_trace", real)
    assert main(["transform", str(big), "--speedup", "4", "-o", str(out)]) == 0
    new = _set(out)
    assert sorted(new) == sorted(old) and all(new[n] != old[n] for n in new)


def test_a_failed_write_of_a_set_changes_nothing(big, tmp_path, monkeypatch):
    import chakra_trace.io.workload as workload_module

    w = Workload.open(big)
    out = tmp_path / "o" / "job"
    out.parent.mkdir()
    w.save(out, groups={"dp": list(range(8))})
    old = _set(out)

    def full_disk(trace, path, **k):
        if str(path).endswith(".5.et"):
            raise OSError(28, "No space left on device", str(path))
        write_trace(trace, path, **k)

    monkeypatch.setattr(workload_module, "write_trace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        Workload({r: _trace("new") for r in range(8)}).save(out)
    assert _set(out) == old and sorted(p.name for p in out.parent.iterdir()) == sorted(old)


def test_a_smaller_job_replaces_a_larger_one_whole(big, tmp_path):
    """Rank files (and a groups file) of the prefix that the new set lacks are removed: a reader
    never takes an 8-rank job for a 4-rank one or keeps its groups."""
    w = Workload.open(big)
    out = tmp_path / "o" / "job"
    out.parent.mkdir()
    w.save(out, compress=True, groups={"dp": list(range(8))})
    (out.parent / "job.notes.txt").write_text("not ours")
    (out.parent / "jobx.3.et").write_text("another prefix")
    small = Workload({r: _trace("small") for r in range(4)})
    files = small.save(out)
    assert files == [out.parent / f"job.{r}.et" for r in range(4)]
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        [f"job.{r}.et" for r in range(4)] + ["job.notes.txt", "jobx.3.et"]
    )
    assert Workload.open(out).ranks == [0, 1, 2, 3]


def test_a_commit_stopped_part_way_is_refused_until_written_again(big, tmp_path, monkeypatch, capsys):
    """Renames of 8 files are not one step: a commit stopped between them (here a refused rename;
    SIGKILL or power loss alike) leaves its marker folder, and readers refuse the set while it is
    there; the next write of the prefix removes it."""
    import chakra_trace.io.outputs as outputs

    w = Workload.open(big)
    out = tmp_path / "o" / "job"
    out.parent.mkdir()
    w.save(out)
    real, moved = os.replace, []

    def refused(src, dst):
        if ".commit.tmp" in str(src):  # (the commit's renames only)
            moved.append(dst)
        if len(moved) == 3:
            raise PermissionError(13, "Permission denied", str(dst))
        real(src, dst)

    monkeypatch.setattr(outputs.os, "replace", refused)
    with pytest.raises(ChakraError, match="could not all be put in place"):
        Workload({r: _trace("new") for r in range(8)}).save(out)
    monkeypatch.setattr(outputs.os, "replace", real)
    (marker,) = [p for p in out.parent.iterdir() if p.name.endswith(".commit.tmp")]
    with pytest.raises(ChakraError, match="stopped part-way") as e:
        Workload.open(out)
    assert marker.name in str(e.value)
    _one_line_error(capsys, ["info", out], "stopped part-way", marker.name)
    Workload({r: _trace("again") for r in range(3)}).save(out)  # (this process, which no longer writes it)
    assert sorted(p.name for p in out.parent.iterdir()) == [f"job.{r}.et" for r in range(3)]


def test_temporaries_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    """`.name.<pid>.<random>.tmp` files (and set folders) of a dead writer of the same output go;
    a running writer's, other names' and look-alikes stay."""
    out = tmp_path / "x.et"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        keep = [f".x.et.{running.pid}.abcdefgh.tmp", ".y.et.123.abcdefgh.tmp", ".x.et.abcdefgh.tmp", "x.et.1.tmp"]
        gone = [f".x.et.{dead.pid}.abc_efgh.tmp", f".x.et.{os.getpid()}.abcdefgh.tmp"]  # (this process: not now)
        for n in keep + gone:
            (tmp_path / n).write_text("partial")
        (tmp_path / f".x.et.{dead.pid}.zzzzzzzz.set.tmp").mkdir()
        (tmp_path / f".x.et.{dead.pid}.zzzzzzzz.set.tmp" / "x.0.et").write_text("partial")
        (tmp_path / f".x.et.{dead.pid}.zzzzzzzy.commit.tmp").symlink_to(tmp_path / "elsewhere")
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "x.0.et").write_text("not to be touched")
        write_trace(_trace("a"), out)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep + ["x.et", "elsewhere"])
        assert (tmp_path / "elsewhere" / "x.0.et").read_text() == "not to be touched"
    finally:
        running.kill()
        running.wait()


@pytest.mark.slow
def test_sigkill_during_a_multi_rank_write_leaves_one_whole_set(tmp_path):
    """A real SIGKILL at several moments of `chakra transform`'s run (fractions of its measured
    time, so most fall while it writes): the prefix then reads as the old set or the new one, or
    is refused as stopped part-way; never a mix. The next run cleans up and completes."""
    job = tmp_path / "big"
    training_step(8, 60000, 100, 4194304).save(job)  # ~9 MB per rank: writing lasts a while
    out = tmp_path / "o" / "tr"
    assert _chakra(["transform", job, "--speedup", "2", "-o", out], timeout=300).returncode == 0
    old = _set(out)
    t = time.monotonic()
    assert _chakra(["transform", job, "--speedup", "4", "-o", tmp_path / "o" / "ref"], timeout=300).returncode == 0
    took = time.monotonic() - t
    new = {n.replace("ref.", "tr.", 1): b for n, b in _set(tmp_path / "o" / "ref").items()}
    outcomes = []
    for fraction in (0.6, 0.75, 0.85, 0.92, 0.97):
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        argv = [sys.executable, "-m", "chakra_trace.cli", "transform", str(job), "--speedup", "4", "-o", str(out)]
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=fraction * took)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
        now = _set(out)
        try:
            Workload.open(out)
            assert now in (old, new), f"a mix of two runs after SIGKILL at {fraction:.0%} of the run"
            outcomes.append("old" if now == old else "new")
        except ChakraError as e:
            assert "stopped part-way" in str(e)
            outcomes.append("refused")
        assert _chakra(["transform", job, "--speedup", "2", "-o", out], timeout=300).returncode == 0
        assert _set(out) == old and [p.name for p in out.parent.iterdir() if p.name.startswith(".tr.")] == []
    print("after SIGKILL:", outcomes)


# --------------------------------------------------------------------------- what is read from folders (defect 16)


@FIFO
def test_a_fifo_in_a_prefix_is_refused_by_name(tmp_path):
    """Defect 16: a FIFO carried into a prefix blocked every reader for ever."""
    write_trace(_trace("a"), tmp_path / "p.0.et")
    os.mkfifo(tmp_path / "p.1.et")
    for argv in (["info", tmp_path / "p"], ["validate", tmp_path]):
        r = _chakra(argv, timeout=30)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"{tmp_path / 'p.1.et'}: a named pipe, not a regular file" in r.stderr


@FIFO
def test_a_named_fifo_without_a_writer_is_a_clean_error(tmp_path):
    """A FIFO named on the command line is opened without blocking: no writer -> empty, an error."""
    os.mkfifo(tmp_path / "q.0.et")
    t = time.monotonic()
    r = _chakra(["info", tmp_path / "q.0.et"], timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "named pipe that gave no bytes" in r.stderr
    assert time.monotonic() - t < 20


@FIFO
def test_a_fifo_or_device_in_a_collect_folder_is_refused(tmp_path, capsys):
    job = _collect_folder(tmp_path)
    (job / "rank1.kineto.json.gz").unlink()
    os.mkfifo(job / "rank1.kineto.json.gz")
    _one_line_error(capsys, ["info", job], f"{job / 'rank1.kineto.json.gz'}: a named pipe")
    _one_line_error(capsys, ["convert", "pytorch", job, "-o", tmp_path / "c", "-j", "1"], "a named pipe")
    (job / "rank1.kineto.json.gz").unlink()
    (job / "rank1.kineto.json.gz").symlink_to("/dev/zero")
    _one_line_error(capsys, ["info", job], "links to /dev/zero, not a file in")


def test_a_link_out_of_a_prefix_folder_is_refused_and_one_inside_is_read(tmp_path, capsys):
    secret = tmp_path / "secret.0.et"
    write_trace(_trace("SECRET_"), secret)
    d = tmp_path / "shared"
    d.mkdir()
    write_trace(_trace("a"), d / "p.0.et")
    (d / "p.1.et").symlink_to(secret)
    _one_line_error(capsys, ["info", d / "p"], f"{d / 'p.1.et'}: links to {secret}, not a file in")
    (d / "p.1.et").unlink()
    (d / "p.1.et").symlink_to("p.0.et")  # inside the folder: read
    assert Workload.open(d / "p").ranks == [0, 1]
    (d / "p.2.et").symlink_to("p.2.et")  # a loop
    _one_line_error(capsys, ["info", d / "p"], f"{d / 'p.2.et'}: a link that cannot be followed")
    assert Workload.open(secret)[0].equals(read_trace(secret))  # a file named by the user: read as named


def test_a_link_out_of_a_collect_folder_is_refused(tmp_path, capsys):
    job = _collect_folder(tmp_path)
    elsewhere = tmp_path / "mine.et.json.gz"
    shutil.move(job / "rank1.et.json.gz", elsewhere)
    (job / "rank1.et.json.gz").symlink_to(elsewhere)
    _one_line_error(capsys, ["info", job], f"links to {elsewhere}, not a file in {job}")


# --------------------------------------------------------------------------- rank numbers in names (defect 11)


def test_an_absurd_rank_number_is_a_one_line_error(tmp_path, capsys):
    """`p.99999999999999999999999.et` in a prefix ended in an internal OverflowError."""
    write_trace(_trace("a"), tmp_path / "p.0.et")
    write_trace(_trace("a"), tmp_path / "p.99999999999999999999999.et")
    for argv in (["validate", tmp_path / "p"], ["timeline", tmp_path / "p", "-o", tmp_path / "t.json"]):
        _one_line_error(capsys, argv, "p.99999999999999999999999.et: rank 99999999999999999999999", "largest rank")
    (tmp_path / "p.99999999999999999999999.et").rename(tmp_path / "p.2147483647.et")  # the largest: taken
    assert discover(tmp_path / "p") == {0: tmp_path / "p.0.et", 2147483647: tmp_path / "p.2147483647.et"}
    assert main(["validate", str(tmp_path / "p")]) == 0


def test_only_ascii_digits_make_a_rank(tmp_path):
    """`p.٣.et` (an Arabic-Indic three) was read as rank 3."""
    write_trace(_trace("a"), tmp_path / "p.0.et")
    write_trace(_trace("a"), tmp_path / "p.\u0663.et")
    assert Workload.open(tmp_path / "p").ranks == [0]


def test_an_absurd_rank_in_a_collect_folder_is_a_one_line_error(tmp_path, capsys):
    job = _collect_folder(tmp_path)
    shutil.copy(job / "rank1.et.json.gz", job / "rank99999999999999999999.et.json.gz")
    _one_line_error(capsys, ["info", job], "rank99999999999999999999.et.json.gz: rank 99999999999999999999")


# --------------------------------------------------------------------------- workers and interruption (defect 15)

_POOL = """
import concurrent.futures as cf, multiprocessing as mp, os, sys, time
from chakra_trace.io import workers
if sys.argv[1] == "poll":
    workers._kernel_kills_us = lambda: False  # the portable way: a thread watching the parent
def pid():
    if sys.argv[1] == "poll":
        workers._kernel_kills_us = lambda: False
    return os.getpid()
if __name__ == "__main__":
    opts = {} if sys.argv[1] == "none" else workers.pool_options()
    pool = cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn"), **opts)
    print(pool.submit(pid).result(), flush=True)
    time.sleep(600)
"""


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # a zombie no one reaps: dead
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["kernel", "poll"])
def test_pool_workers_end_with_their_parent(tmp_path, how):
    """`io.workers.pool_options()`: a worker ends within a second of its parent's SIGKILL (Linux's
    parent-death signal, or the polling thread elsewhere)."""
    script = tmp_path / "pool.py"
    script.write_text(_POOL)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    p = subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE, text=True, env=env)
    try:
        worker = int(p.stdout.readline())
        p.kill()
        p.wait()
        assert _gone(worker, 5), f"worker {worker} outlived its parent"
    finally:
        p.kill()
        try:
            os.kill(worker, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError):
                continue
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_convert_workers_end_after_sigkill_of_the_command(tmp_path):
    """Defect 15: after SIGKILL of `chakra convert pytorch -j 2`, its workers lived on > 90 s."""
    job = _collect_folder(tmp_path)
    for r in range(2, 64):  # more ranks than the workers convert at once
        for kind in ("et", "kineto"):
            shutil.copy(job / f"rank{r % 2}.{kind}.json.gz", job / f"rank{r}.{kind}.json.gz")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chakra_trace.cli",
            "convert",
            "pytorch",
            str(job),
            "-o",
            str(tmp_path / "c"),
            "-j",
            "2",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    kids: list[int] = []
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline and len(kids) < 3:  # 2 workers (+ resource tracker)
        kids = _children(p.pid)
        time.sleep(0.05)
    time.sleep(0.3)  # the workers inside a conversion
    kids = _children(p.pid) or kids
    assert p.poll() is None, "the conversion ended before it could be killed: make the job bigger"
    p.kill()
    p.wait()
    assert len(kids) >= 2
    left = [k for k in kids if not _gone(k, 10)]
    for k in left:
        os.kill(k, signal.SIGKILL)
    assert not left, f"{len(left)} of {len(kids)} worker processes outlived the command"
    r = _chakra(["convert", "pytorch", job, "-o", tmp_path / "c", "-j", "2"], timeout=300)
    assert r.returncode == 0 and not [q for q in tmp_path.iterdir() if q.name.startswith(".c.")]


def test_ctrl_c_while_the_command_starts_prints_no_traceback(tmp_path):
    """Ctrl-C while `chakra` imports its modules ended with a KeyboardInterrupt traceback (and
    status -2): now it is status 130, silent."""
    code = (
        "import os, signal, sys; sys.argv[0] = os.path.join(sys.argv[0], 'bin', 'chakra')\n"
        "import chakra_trace\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "import chakra_trace.cli\n"
        "print('not reached')\n"
    )
    r = _interactive(code)
    assert r.returncode == 130 and r.stderr == "" and r.stdout == "", (r.returncode, r.stderr)


def test_ctrl_c_inside_a_command_is_still_an_interrupt(tmp_path):
    """Once `main` runs, Ctrl-C is KeyboardInterrupt again: the command stops, cleans up and
    `main` returns 130 to its caller (it is not the quiet exit of the start)."""
    code = (
        "import os, signal, sys, time; sys.argv[0] = 'chakra'\n"
        "from chakra_trace.cli import main\n"
        "import chakra_trace.io.workload as wl\n"
        "def interrupted(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "wl.read_trace = interrupted\n"
        f"rc = main(['info', {str(sample('resnet50_ddp.0.et.gz'))!r}])\n"
        "print('main returned', rc, signal.getsignal(signal.SIGINT).__name__)\n"
    )
    t = time.monotonic()
    r = _interactive(code)
    assert r.stdout.strip() == "main returned 130 _quiet_start" and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    assert time.monotonic() - t < 25


def test_a_command_started_ignoring_ctrl_c_keeps_ignoring_it():
    """A background job of a script starts with SIGINT ignored (so that Ctrl-C stops only the
    foreground): neither the package's start nor `main` turns it back on (CI's runs are such
    jobs: the two tests above give their child a terminal's default)."""
    code = (
        "import os, signal, sys; sys.argv[0] = 'chakra'\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from chakra_trace.cli import main\n"
        "import chakra_trace.io.workload as wl\n"
        "read = wl.read_trace\n"
        "def interrupted(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return read(*a, **k)\n"
        "wl.read_trace = interrupted\n"
        f"rc = main(['info', {str(sample('resnet50_ddp.0.et.gz'))!r}])\n"
        "print('main returned', rc, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    r = _interactive(code, sigint=signal.SIG_IGN)
    assert r.stdout.strip().splitlines()[-1] == "main returned 0 True", (r.stdout, r.stderr)


def _interactive(code: str, sigint=signal.SIG_DFL) -> subprocess.CompletedProcess:
    """`python -c code` started with SIGINT as a terminal's job has it (default), whatever this
    test process was started with."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
