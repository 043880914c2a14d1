"""Record the host execution trace (ET) and the Kineto trace of chosen training steps, per rank.

    import chakra_trace.collect as cc

    with cc.record("out/", wait=1, warmup=1, active=2) as rec:
        for batch in data:
            train_step(batch)
            rec.step()

One `torch.profiler.profile` per process drives both recorders on one schedule: the
`ExecutionTraceObserver` is handed to the profiler, so the ET and the Kineto trace hold the
same steps. Step `k` is the code run between the `k`-th and the `k+1`-th boundary (the start
of recording, then each `rec.step()`); the recorded steps are `wait+warmup .. wait+warmup+active-1`
and appear in the Kineto trace as `ProfilerStep#k`.

Output folder, per rank `r` (global rank from torch.distributed, else the RANK environment
variable, else 0):

- `rank<r>.et.json[.gz]`: the host execution trace (PyTorch ET JSON),
- `rank<r>.kineto.json[.gz]`: the Kineto (Chrome JSON) trace,
- `manifest.rank<r>.json`: what this rank recorded,
- `manifest.json`: all ranks merged. Every write is atomic (temporary file + rename), and each
  rank merges under an exclusive lock on `.manifest.lock`, so the last rank to finish leaves a
  manifest that holds every rank.

torch is imported only when recording starts, never when this module is imported. The module
uses the standard library and torch alone, so `chakra collect` can load it by file path into a
job whose Python does not have chakra_trace installed.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import gzip as _gzip
import json
import os
import platform
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.profiler import ExecutionTraceObserver, profile

try:
    import fcntl
except ImportError:  # no flock on Windows
    fcntl = None  # type: ignore[assignment]

try:
    from ..errors import ChakraError
except ImportError:  # loaded by file path (see the module docstring)

    class ChakraError(Exception):  # type: ignore[no-redef]
        """Bad use of the recorder."""


__all__ = [
    "MANIFEST",
    "RANK_SCHEMA",
    "SCHEMA",
    "Recorder",
    "Schedule",
    "active_recorder",
    "merge_manifests",
    "read_manifest",
    "record",
]

SCHEMA = "chakra-collect/1"
RANK_SCHEMA = "chakra-collect-rank/1"
MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
_RANK_MANIFEST_RE = re.compile(r"manifest\.rank(\d+)\.json")
# Files a collection writes into its folder (the launcher removes those of an earlier collection).
OUTPUT_RE = re.compile(r"(rank\d+\.(et|kineto)\.json(\.gz)?|manifest(\.rank\d+)?\.json|\.chakra-[^/]*\.(json|tmp))")
GZIP_LEVEL = 1  # as the rest of chakra_trace: ~4x faster than level 6 for files ~13% larger

# The recorder running in this process, if any. The slot lives in a module of its own so that a
# copy of this module loaded by file path (injection) and the imported one see the same slot.
_SLOT: Any = sys.modules.setdefault("_chakra_collect_active", type(sys)("_chakra_collect_active"))
if not hasattr(_SLOT, "recorder"):
    _SLOT.recorder = None


def active_recorder() -> Recorder | None:
    """The recorder running in this process (from `record()` or from `chakra collect`), if any."""
    return _SLOT.recorder


@dataclass(frozen=True)
class Schedule:
    """The profiler schedule: `wait` steps ignored, `warmup` steps armed, `active` steps recorded."""

    wait: int = 1
    warmup: int = 1
    active: int = 2

    def __post_init__(self) -> None:
        for name, low in (("wait", 0), ("warmup", 0), ("active", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ChakraError(f"schedule: {name} must be an integer >= {low}, got {v!r}")

    @property
    def first(self) -> int:
        """Number of the first recorded step."""
        return self.wait + self.warmup

    @property
    def total(self) -> int:
        """Steps needed to finish recording."""
        return self.wait + self.warmup + self.active

    @property
    def recorded_steps(self) -> list[int]:
        return list(range(self.first, self.total))

    def to_dict(self) -> dict:
        return {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": 1}


class Recorder:
    """Records the ET and the Kineto trace of the scheduled steps of one process.

    Call `start()` (or enter the context) before step 0, `step()` at the end of every step, and
    `stop()` (or leave the context) when done. Recording finishes by itself at the end of the
    active window: traces and manifests are written then, and later `step()` calls only count.
    When the process stops earlier, `stop()` (or exit, through `atexit`) keeps what was recorded
    and says so in the manifest.

    Parameters: `out_dir` output folder; `wait`/`warmup`/`active` the schedule; `gzip` compress
    the traces; `num_threads` call `torch.set_num_threads` at start (left alone when None);
    `activities` profiler activities as names ("cpu", "cuda"), default CPU plus CUDA when
    available; `record_shapes`, `with_stack`, `profile_memory` as in `torch.profiler.profile`;
    `run_id` ties the ranks of one job together in the merged manifest (default:
    CHAKRA_COLLECT_RUN_ID, else TORCHELASTIC_RUN_ID unless "none"); `command` the command line
    to store (default: this process's).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 2,
        gzip: bool = True,
        num_threads: int | None = None,
        activities: list[str] | None = None,
        record_shapes: bool = True,
        with_stack: bool = False,
        profile_memory: bool = False,
        run_id: str | None = None,
        command: list[str] | None = None,
        mode: str = "api",
    ) -> None:
        self.out_dir = os.path.abspath(os.fspath(out_dir))
        self.schedule = Schedule(wait, warmup, active)
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1
        ):
            raise ChakraError(f"num_threads must be a positive integer, got {num_threads!r}")
        self.gzip = bool(gzip)
        self.num_threads = num_threads
        self.activities = None if activities is None else [str(a).lower() for a in activities]
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profile_memory = profile_memory
        self.run_id = run_id if run_id is not None else _env_run_id()
        self.command = list(command) if command is not None else _this_command()
        self.mode = mode
        self.steps_done = 0  # completed steps
        self.done = False
        self.manifest: dict | None = None  # this rank's manifest, once written
        self.manifest_path: str | None = None
        self._prof: profile | None = None
        self._et: ExecutionTraceObserver | None = None
        self._et_tmp: str | None = None
        self._t_last: float | None = None
        self._wall: dict[int, float] = {}
        self._prof_ms: dict[int, float] = {}
        self._files: dict[str, str | None] = {"et": None, "kineto": None}
        self._warnings: list[str] = []
        self._dist: dict | None = None
        self._started_at: str | None = None
        self._activity_names: list[str] = []
        self._exit_hook: Callable[[], None] | None = None
        self._on_trace_ready_disabled = False
        self._failed = False
        self._pid: int | None = None

    # -- public ---------------------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        """True while the profiler runs (from start until the end of the active window)."""
        return self._prof is not None

    def start(self) -> Recorder:
        if self._prof is not None or self.done:
            raise ChakraError("this recorder was already started")
        other = _SLOT.recorder
        if other is not None and other._pid == os.getpid():  # (a forked child inherits the slot)
            if other.mode == "inject" and self.mode != "inject":
                # `chakra collect` wraps a script that records by itself: the script wins.
                other.abort()
            else:
                raise ChakraError("another chakra_trace recorder is already running in this process")
        try:
            import torch
            from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule
        except ImportError as e:
            raise ChakraError(f"recording needs PyTorch (pip install 'chakra-trace[collect]'): {e}") from None

        os.makedirs(self.out_dir, exist_ok=True)
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        acts = self._profiler_activities(torch, ProfilerActivity)
        self._activity_names = [a.name for a in acts]
        self._et_tmp = os.path.join(self.out_dir, f".chakra-{_host_pid()}.et.json")
        self._et = ExecutionTraceObserver().register_callback(self._et_tmp)
        s = self.schedule
        try:
            self._prof = profile(
                activities=acts,
                schedule=schedule(wait=s.wait, warmup=s.warmup, active=s.active, repeat=1),
                on_trace_ready=self._on_trace_ready,
                record_shapes=self.record_shapes,
                with_stack=self.with_stack,
                profile_memory=self.profile_memory,
                execution_trace_observer=self._et,
            )
            self._started_at = _now()
            self._pid = os.getpid()
            self._poll_dist()
            _SLOT.recorder = self
            self._exit_hook = self._at_exit
            atexit.register(self._exit_hook)
            self._prof.start()
        except BaseException:
            self.abort()
            self.done = False
            raise
        self._t_last = time.perf_counter()
        return self

    def step(self) -> None:
        """Mark the end of one training step."""
        now = time.perf_counter()
        if self._t_last is None:
            raise ChakraError("call start() (or enter the `with` block) before step()")
        k = self.steps_done
        if self.schedule.first <= k < self.schedule.total:
            self._wall[k] = now - self._t_last
        self.steps_done = k + 1
        if self._prof is None:
            return
        self._poll_dist()
        self._prof.step()
        self._t_last = time.perf_counter()  # the profiler's own work stays out of the next step
        if self.steps_done >= self.schedule.total:
            self._finish()

    def stop(self, reason: str | None = None) -> dict | None:
        """Finish recording (if still running) and return this rank's manifest."""
        if self.done:
            return self.manifest
        if self._prof is None:  # never started
            return None
        if self.steps_done < self.schedule.total:
            why, s, n = reason or "stopped", self.schedule, self.steps_done
            window = f"steps {s.first}..{s.total - 1}"
            if n < s.first:
                self._warnings.append(
                    f"{why} after {n} steps, before the active window ({window}): nothing was recorded"
                )
            else:
                done = f"recorded steps {s.first}..{n - 1}" if n > s.first else "no recorded step finished"
                self._warnings.append(
                    f"{why} after {n} steps, during the active window ({window}): {done}; "
                    f"the traces also hold the unfinished step {n} up to the stop"
                )
        self._finish()
        return self.manifest

    def fail(self, message: str) -> None:
        """Give up after an error in the recording machinery; the manifest says why."""
        self._warnings.append(message)
        self._failed = True
        if self.done:
            return
        if self._prof is not None:
            self._on_trace_ready_disabled = True
            self._finish()
        else:  # never started: a manifest alone, so that the launcher can tell
            self.done = True
            rank, world_size, backend = self._rank()
            with contextlib.suppress(Exception):
                os.makedirs(self.out_dir, exist_ok=True)
                self._write_manifest(rank, world_size, backend, [], "failed")

    def abort(self) -> None:
        """Stop without writing anything (traces and temporary files are removed)."""
        prof, self._prof = self._prof, None
        self.done = True
        self._on_trace_ready_disabled = True
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.on_trace_ready = None
                prof.__exit__(None, None, None)
        if self._et is not None:
            with contextlib.suppress(Exception):
                self._et.unregister_callback()  # a no-op when the profiler did it
        if self._et_tmp:
            with contextlib.suppress(OSError):
                os.remove(self._et_tmp)
        self._unregister()
        if _SLOT.recorder is self:
            _SLOT.recorder = None

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.stop("the recording context was left")
        else:
            self.stop(f"{exc_type.__name__} raised")

    # -- internals ------------------------------------------------------------------------------
    def _profiler_activities(self, torch, ProfilerActivity) -> list:
        if self.activities is None:
            acts = [ProfilerActivity.CPU]
            if torch.cuda.is_available():  # asks the driver; creates no CUDA context
                acts.append(ProfilerActivity.CUDA)
            return acts
        acts = []
        for name in self.activities:
            act = getattr(ProfilerActivity, name.upper(), None)
            if act is None:
                raise ChakraError(
                    f"unknown profiler activity {name!r} (known: "
                    f"{', '.join(a.lower() for a in ProfilerActivity.__members__)})"
                )
            acts.append(act)
        if not acts:
            raise ChakraError("activities: give at least one")
        return acts

    def _poll_dist(self) -> None:
        """Remember rank, world size and backend once torch.distributed is initialized."""
        if self._dist is not None:
            return
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                self._dist = {
                    "rank": dist.get_rank(),
                    "world_size": dist.get_world_size(),
                    "backend": str(dist.get_backend()),
                }
        except Exception:  # a half-initialized group: try again at the next step
            self._dist = None

    def _rank(self) -> tuple[int, int, str | None]:
        self._poll_dist()
        if self._dist is not None:
            return self._dist["rank"], self._dist["world_size"], self._dist["backend"]
        return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), None

    def _on_trace_ready(self, prof) -> None:
        """End of the active window (or an early stop during it): keep the Kineto trace."""
        if self._on_trace_ready_disabled:
            return
        try:
            from torch.autograd import DeviceType

            for ev in prof.profiler.kineto_results.events():
                name = ev.name()
                if name.startswith("ProfilerStep#") and ev.device_type() == DeviceType.CPU:
                    with contextlib.suppress(ValueError):
                        self._prof_ms[int(name[13:])] = ev.duration_ns() / 1e6
        except Exception as e:  # durations are a bonus; the trace below is what matters
            self._warnings.append(f"could not read ProfilerStep durations: {type(e).__name__}: {e}")
        rank = self._rank()[0]
        plain = os.path.join(self.out_dir, f"rank{rank}.kineto.json")
        prof.export_chrome_trace(plain)
        self._files["kineto"] = _place(plain, plain, self.gzip)

    def _finish(self) -> None:
        prof, self._prof = self._prof, None
        assert prof is not None  # every caller checks that the profiler runs
        self.done = True
        error = None
        try:
            prof.__exit__(None, None, None)  # stop (exports when in the window) + write the ET footer
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        finally:
            if self._et is not None:
                with contextlib.suppress(Exception):
                    self._et.unregister_callback()  # a no-op when the profiler did it
            self._unregister()
            if _SLOT.recorder is self:
                _SLOT.recorder = None
        rank, world_size, backend = self._rank()
        recorded = [k for k in self.schedule.recorded_steps if k < self.steps_done]
        if self._files["kineto"] is None and not recorded:
            assert self._et_tmp is not None  # set by start() together with the profiler
            with contextlib.suppress(OSError):
                os.remove(self._et_tmp)
        elif self._et_tmp and os.path.exists(self._et_tmp):
            final = os.path.join(self.out_dir, f"rank{rank}.et.json")
            self._files["et"] = _place(self._et_tmp, final, self.gzip)
        if error:
            self._warnings.append(f"stopping the profiler failed: {error}")
        status = (
            "failed"
            if error or self._failed
            else "complete"
            if self.steps_done >= self.schedule.total
            else "partial"
            if recorded or self._files["kineto"]
            else "not-recorded"
        )
        self._write_manifest(rank, world_size, backend, recorded, status)

    def _write_manifest(
        self, rank: int, world_size: int, backend: str | None, recorded: list[int], status: str
    ) -> None:
        device_type, cuda_device = "cpu", None
        torch = sys.modules.get("torch")
        try:
            if torch is not None and "CUDA" in self._activity_names and torch.cuda.is_initialized():
                device_type = "cuda"
                cuda_device = torch.cuda.get_device_name(torch.cuda.current_device())
        except Exception:
            pass
        files = {k: v for k, v in self._files.items()}
        doc = {
            "schema": RANK_SCHEMA,
            "run_id": self.run_id,
            "rank": rank,
            "local_rank": _env_int("LOCAL_RANK", None),
            "world_size": world_size,
            "backend": backend,
            "status": status,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "torch_version": getattr(torch, "__version__", None),
            "python_version": platform.python_version(),
            "platform": platform.platform(),
            "device_type": device_type,
            "cuda_device": cuda_device,
            "activities": [a.lower() for a in self._activity_names],
            "num_threads": _torch_threads(torch),
            "mode": self.mode,
            "schedule": self.schedule.to_dict(),
            "steps_run": self.steps_done,
            "steps_recorded": recorded,
            "steps": [
                {
                    "step": k,
                    "finished": k in recorded,
                    "wall_ms": _ms(self._wall.get(k)),
                    "profiler_ms": None if k not in self._prof_ms else round(self._prof_ms[k], 4),
                }
                for k in sorted(set(recorded) | set(self._prof_ms))
            ],
            "files": files,
            "bytes": {k: (os.path.getsize(os.path.join(self.out_dir, v)) if v else None) for k, v in files.items()},
            "gzip": self.gzip,
            "command": self.command,
            "started_at": self._started_at,
            "finished_at": _now(),
            "warnings": list(self._warnings),
        }
        path = os.path.join(self.out_dir, f"manifest.rank{rank}.json")
        with _locked(self.out_dir):
            old = _load_json(path)
            if (
                isinstance(old, dict)
                and old.get("run_id") == self.run_id
                and self.run_id is not None
                and (old.get("hostname"), old.get("pid")) != (doc["hostname"], doc["pid"])
            ):
                doc["warnings"].append(
                    f"replaced the files of another process with rank {rank} (pid {old.get('pid')} on "
                    f"{old.get('hostname')}): two training processes of one job had the same rank"
                )
            _write_json_atomic(path, doc)
            _merge_locked(self.out_dir, run_id=self.run_id)
        self.manifest, self.manifest_path = doc, path

    def _at_exit(self) -> None:
        if os.getpid() != self._pid:  # a forked child (e.g. a data-loader worker): not its recording
            return
        with contextlib.suppress(Exception):
            self.stop("the process exited")

    def _unregister(self) -> None:
        if self._exit_hook is not None:
            with contextlib.suppress(Exception):
                atexit.unregister(self._exit_hook)
            self._exit_hook = None


def record(out_dir: str | os.PathLike, **kwargs: Any) -> Recorder:
    """A `Recorder` to use as a context manager; see `Recorder` for the options."""
    return Recorder(out_dir, **kwargs)


# -- manifests ------------------------------------------------------------------------------------
def read_manifest(out_dir: str | os.PathLike) -> dict:
    """The merged manifest of a collection folder."""
    path = os.path.join(os.fspath(out_dir), MANIFEST)
    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise ChakraError(f"{path}: no readable collection manifest")
    return doc


_ANY = object()


def merge_manifests(
    out_dir: str | os.PathLike,
    *,
    run_id: Any = _ANY,
    extra: dict | None = None,
    final: bool = False,
    warnings: list[str] | None = None,
) -> dict:
    """Merge the `manifest.rank<r>.json` files of one run into `manifest.json` and return it.

    `run_id` keeps only the ranks of that run (default: every rank file present). `extra` keys
    are added at the top level, `warnings` to the warnings. `final` says every process of the job
    has ended, so ranks still missing are reported as a warning.
    """
    out_dir = os.fspath(out_dir)
    with _locked(out_dir):
        return _merge_locked(out_dir, run_id=run_id, extra=extra, final=final, notes=warnings)


def _merge_locked(
    out_dir: str, *, run_id: Any = _ANY, extra: dict | None = None, final: bool = False, notes: list[str] | None = None
) -> dict:
    per_rank: dict[int, dict] = {}
    warnings: list[str] = []
    for name in sorted(os.listdir(out_dir)):
        m = _RANK_MANIFEST_RE.fullmatch(name)
        if not m:
            continue
        doc = _load_json(os.path.join(out_dir, name))
        if not isinstance(doc, dict) or doc.get("schema") != RANK_SCHEMA:
            warnings.append(f"{name}: not a readable rank manifest; skipped")
            continue
        if run_id is not _ANY and doc.get("run_id") != run_id:
            continue  # left by another collection into the same folder
        per_rank[int(m.group(1))] = doc
    sizes = [d["world_size"] for d in per_rank.values() if isinstance(d.get("world_size"), int)]
    world_size = max(sizes) if sizes else None
    ranks = sorted(per_rank)
    missing = [r for r in range(world_size) if r not in per_rank] if world_size else []
    first = per_rank[ranks[0]] if ranks else {}

    def common(key: str) -> Any:
        vals = {json.dumps(d.get(key), sort_keys=True) for d in per_rank.values()}
        if len(vals) > 1:
            warnings.append(
                f"ranks differ in {key}: "
                + ", ".join(f"rank {r}: {json.dumps(d.get(key))}" for r, d in sorted(per_rank.items()))
            )
        return first.get(key)

    merged: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": first.get("run_id", None if run_id is _ANY else run_id),
        "complete": bool(ranks) and not missing and all(d.get("status") == "complete" for d in per_rank.values()),
        "world_size": world_size,
        "ranks": ranks,
        "missing_ranks": missing,
        "backend": common("backend"),
        "device_type": common("device_type"),
        "torch_version": common("torch_version"),
        "python_version": common("python_version"),
        "hostnames": sorted({d.get("hostname") for d in per_rank.values() if d.get("hostname")}),
        "schedule": common("schedule"),
        "steps_recorded": common("steps_recorded"),
        "command": first.get("command"),
        "files": {str(r): d.get("files") for r, d in sorted(per_rank.items())},
        "warnings": [],
        "per_rank": {str(r): d for r, d in sorted(per_rank.items())},
        "updated_at": _now(),
    }
    if len(set(sizes)) > 1:
        warnings.append(f"ranks differ in world_size: {sorted(set(sizes))}")
    for r, d in sorted(per_rank.items()):
        if d.get("status") != "complete":
            warnings.append(f"rank {r}: status {d.get('status')}")
        warnings.extend(f"rank {r}: {w}" for w in d.get("warnings") or [])
    if final:
        if missing:
            warnings.append(
                "no manifest from rank(s) "
                + ", ".join(map(str, missing))
                + ": those processes ended before the end of the active window and before exit "
                "handlers ran (killed?)"
            )
        if not ranks:
            warnings.append(
                "no process of the job recorded anything (did it call optimizer.step()? "
                "python -I, -E or -S turn the injection off)"
            )
    merged["warnings"] = warnings + list(notes or [])
    if extra:
        merged.update(extra)
    _write_json_atomic(os.path.join(out_dir, MANIFEST), merged)
    return merged


# -- helpers ---------------------------------------------------------------------------------------
def _place(src: str, final_plain: str, gz: bool) -> str:
    """Move `src` to `final_plain` (plain) or `final_plain + '.gz'`; return the base name."""
    target = final_plain + ".gz" if gz else final_plain
    stale = final_plain if gz else final_plain + ".gz"  # the other form, from an earlier collection
    if os.path.abspath(stale) != os.path.abspath(src):
        with contextlib.suppress(FileNotFoundError):
            os.remove(stale)
    tmp = os.path.join(os.path.dirname(target), f".chakra-{_host_pid()}.tmp")
    if gz:
        with open(src, "rb") as fin, _gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        os.replace(tmp, target)
        os.remove(src)
    elif src != target:
        os.replace(src, target)
    return os.path.basename(target)


@contextlib.contextmanager
def _locked(out_dir: str) -> Iterator[None]:
    if fcntl is None:  # no flock (Windows): writes stay atomic, merges may miss a rank
        yield
        return
    fd = os.open(os.path.join(out_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_json_atomic(path: str, obj: Any) -> None:
    tmp = os.path.join(os.path.dirname(path) or ".", f".chakra-{_host_pid()}.json")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _load_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _host_pid() -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', socket.gethostname())}-{os.getpid()}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)


def _env_int(name: str, default):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def _env_run_id() -> str | None:
    rid = os.environ.get("CHAKRA_COLLECT_RUN_ID")
    if rid:
        return rid
    rid = os.environ.get("TORCHELASTIC_RUN_ID")
    return rid if rid and rid != "none" else None


def _this_command() -> list[str]:
    argv = list(getattr(sys, "orig_argv", None) or [])
    if not argv or "--multiprocessing-fork" in argv:  # a spawn child: its parent's command line
        argv = [sys.executable, *sys.argv]
    return argv


def _torch_threads(torch) -> int | None:
    try:
        return torch.get_num_threads()
    except Exception:
        return None
