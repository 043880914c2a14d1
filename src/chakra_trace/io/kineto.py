"""Kineto (PyTorch profiler / Chrome trace) JSON, read into numpy columns.

`read_kineto(path)` streams the ``traceEvents`` array through a text buffer of ``chunk``
characters (4 Mi by default): the complete events in the buffer are decoded by one call into
the C JSON decoder (boundaries are guessed at ``}`` ``,`` ``{``; a guess that falls inside a
string or a nested object cannot parse, and that buffer is then decoded one event at a time),
and each batch of dicts is reduced to typed columns and dropped. So the dicts of one buffer
are alive at a time, never one per event of the trace. Top-level members may come before or
after ``traceEvents``. Plain and gzip files are sniffed (`io.stream.open_binary`, with its
gzip-bomb guard).

Columns (all length n, one row per event, in file order):

- ``ph``: uint8, the ASCII code of the phase (``ord("X")``, ``ord("M")``, ``ord("s")``, ...).
- ``cat``: int16 code into ``cats`` (code 0 is ``""``: the event has no ``cat``). The categories
  of PyTorch 1.8/1.9 traces (``Operator``, ``Kernel``, ``Runtime``, ...) are renamed to today's
  (`kineto_formats.LEGACY_CATS`), and MTIA's device activity (``mtia_ccp_events``) is filed by
  name as ``kernel`` / ``gpu_memcpy`` / ``mtia_sync`` (`kineto_formats.DEVICE_RULES`; its
  ``stream`` is its track where args name none, its ``device`` its pid); ``renamed_cats``
  lists what was renamed.
- ``name``: int32 code into ``names``.
- ``pid``, ``tid``: int64. Kineto writes most as numbers but some as strings (``"Spans"``,
  ``"PyTorch Profiler"``, ``""``). A string of decimal digits becomes that number; any other
  string is stored as ``-(k + 1)`` where ``labels[k]`` is the string (`label_of` decodes).
- ``ts``, ``dur``: int64 **nanoseconds**. Kineto writes µs, as floats with three decimals (ns
  precision) in recent versions and as integers in older ones. Timestamps around 4.5e12 µs
  leave a float64 with only ~1 ns of precision and µs-since-epoch values (1.7e15) leave it
  with 0.25 µs, so the decimal text is converted to integer nanoseconds exactly, without
  going through a float. ``dur`` is -1 where the event has none (``M``, ``i``, ``s``, ``f``).
- From ``args`` (int64, -1 where absent): ``external_id`` ("External id"), ``rf_id``
  ("Record function id"), ``correlation``, ``stream``, ``device``, ``ev_idx`` ("Ev Idx"),
  ``num_bytes`` ("bytes", on gpu_memcpy/gpu_memset).
- ``flow_id``: int64, the ``id`` of flow events (ph ``s``/``f``; ``cat`` ac2g or fwdbwd), -1
  elsewhere.

Top-level members other than ``traceEvents`` are kept in ``metadata`` (``distributedInfo``,
``deviceProperties``, ``traceName``, ``baseTimeNanoseconds``, ...), with properties for the
common ones. Metadata events (ph ``M``: process/thread names and sort indexes, a few per
thread) also keep their ``args`` in ``meta_args`` (row index -> dict). Other events keep their
``args`` only when asked: ``read_kineto(path, args_for=pred)`` keeps them in ``args`` (row index
-> dict) for the events whose name satisfies ``pred`` (evaluated once per distinct name), e.g.
the communication ops whose recorded arguments give message sizes and peers.

With the optional C kernel (``_kineto.c``, built by setup.py) the events are scanned straight
out of the text buffer into columns instead of being decoded into dicts; it takes only events
it reads exactly as the path above would, and leaves every other one (``M`` events, exponents,
strings where ids or times are expected, bad JSON, ...) to that path, one event at a time, so
both give the same trace and the same errors. ``CHAKRA_TRACE_PURE=1`` disables it.
"""

from __future__ import annotations

import json
import json.decoder
import os
import re
import sys
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from .._native import load as load_native
from ..errors import TraceFormatError
from ..table import Column, Table, Tabular, categorical
from .json_text import CHUNK, Text, scanner
from .kineto_formats import GPU_STEP_CATS, canonical_cats, device_cats, link_by_flows
from .stream import Limits, open_binary

_native = load_native("chakra_trace.io._kineto")  # optional C kernels; None: the numpy/Python path

__all__ = [
    "CPU_CATS",
    "GPU_CATS",
    "RUNTIME_CATS",
    "KinetoTrace",
    "read_kineto",
]

#: Host-side op categories that carry "Record function id" / "External id".
CPU_CATS = ("cpu_op", "user_annotation")
#: Host-side launch calls that carry ``correlation`` (CUDA/HIP runtime, CUDA driver, MTIA runtime).
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "mtia_runtime")
#: Device activity that runs the work launched by a runtime call.
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

_STEP_RE = re.compile(r"ProfilerStep#(\d+)\Z")
_SEP = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # the C scanner's own string decoder

# args keys -> column names, in the order of KinetoTrace._ARG_COLUMNS
_ARG_KEYS = ("External id", "Record function id", "correlation", "stream", "device", "Ev Idx", "bytes")
_ARG_COLUMNS = ("external_id", "rf_id", "correlation", "stream", "device", "ev_idx", "num_bytes")


def _dec_ns(s: str) -> int:
    """Exact integer nanoseconds from the decimal text of a µs value (round half away from 0)."""
    neg = s.startswith("-")
    body = s[1:] if neg else s
    i, _, f = body.partition(".")
    if ("e" in body or "E" in body) or not (i.isdigit() or (not i and f)) or (f and not f.isdigit()):
        try:
            d = Decimal(s) * 1000
        except InvalidOperation:
            raise ValueError(f"not a number: {s!r}") from None
        return int(d.to_integral_value(rounding="ROUND_HALF_UP"))
    v = int(i or "0") * 1000 + int((f + "000")[:3])
    if len(f) > 3 and f[3] >= "5":
        v += 1
    return -v if neg else v


def _ns(v: Any) -> int:
    """A ts/dur value as parsed (int µs, or the decimal text of a float) -> int ns."""
    if v.__class__ is int:
        return v * 1000
    if isinstance(v, str):
        return _dec_ns(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number of µs, got {v!r}")
    return int(round(v * 1000))


def _as_int(v: Any) -> int:
    """An id-like arg value as int; -1 when it is not an integer."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            try:
                d = Decimal(v)
            except InvalidOperation:
                return -1
            return int(d) if d == d.to_integral_value() else -1
    return -1


@dataclass(eq=False)
class KinetoTrace(Tabular):
    """One Kineto trace as columns; see the module docstring for the columns and units."""

    path: str
    ph: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    external_id: np.ndarray
    rf_id: np.ndarray
    correlation: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    ev_idx: np.ndarray
    num_bytes: np.ndarray
    flow_id: np.ndarray
    cats: list[str] = field(default_factory=lambda: [""])
    names: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    meta_args: dict[int, dict] = field(default_factory=dict)
    args: dict[int, dict] = field(default_factory=dict)  # only for names chosen by read_kineto(args_for=)
    renamed_cats: dict[str, str] = field(default_factory=dict)  # legacy category -> the name used (kineto_formats)

    _COLUMNS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", *_ARG_COLUMNS, "flow_id")

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.ph.size)

    def __repr__(self) -> str:
        return f"<KinetoTrace {os.path.basename(self.path)}: {len(self)} events, {len(self.names)} names>"

    @property
    def end(self) -> np.ndarray:
        """ts + dur (ns); equal to ts where the event has no duration."""
        return self.ts + np.maximum(self.dur, 0)

    def nbytes(self) -> int:
        """Memory held by the columns and the string tables (not ``metadata``/``meta_args``)."""

        total = sum(getattr(self, k).nbytes for k in self._COLUMNS)
        for table in (self.names, self.cats, self.labels):
            total += sum(sys.getsizeof(x) for x in table) + 8 * len(table)
        return total

    def cat_code(self, cat: str) -> int:
        """Code of a category name in ``cats``, -1 if the trace has no such category."""
        try:
            return self.cats.index(cat)
        except ValueError:
            return -1

    def name_code(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            return -1

    def mask(self, cat: str | tuple[str, ...] | None = None, ph: str | None = None) -> np.ndarray:
        """Boolean row mask: events of any of the categories given and/or of phase ``ph``."""
        m = np.ones(len(self), bool)
        if cat is not None:
            cats = (cat,) if isinstance(cat, str) else tuple(cat)
            codes = [c for c in (self.cat_code(x) for x in cats) if c >= 0]
            m &= np.isin(self.cat, np.asarray(codes, self.cat.dtype))
        if ph is not None:
            m &= self.ph == ord(ph)
        return m

    def label_of(self, value: int) -> str | int:
        """Decode a pid/tid value: the original string for negative codes, else the number."""
        value = int(value)
        return self.labels[-value - 1] if value < 0 else value

    def thread_keys(self) -> np.ndarray:
        """One int64 code per distinct (pid, tid): a per-thread key for `interval_parents`."""
        pairs = np.stack([self.pid, self.tid], axis=1)
        _, inv = np.unique(pairs, axis=0, return_inverse=True)
        return inv.reshape(-1).astype(np.int64)

    def event_name(self, i: int) -> str:
        return self.names[int(self.name[i])]

    def event(self, i: int) -> dict:
        """Row i as a small dict (for debugging and display; never used on hot paths)."""
        i = int(i)
        d: dict[str, Any] = {
            "ph": chr(int(self.ph[i])),
            "cat": self.cats[int(self.cat[i])],
            "name": self.event_name(i),
            "pid": self.label_of(self.pid[i]),
            "tid": self.label_of(self.tid[i]),
            "ts": int(self.ts[i]),
            "dur": int(self.dur[i]),
        }
        for col in (*_ARG_COLUMNS, "flow_id"):
            v = int(getattr(self, col)[i])
            if v != -1:
                d[col] = v
        if i in self.meta_args:
            d["args"] = self.meta_args[i]
        elif i in self.args:
            d["args"] = self.args[i]
        return d

    # ------------------------------------------------------------------ summaries
    def category_counts(self) -> dict[str, int]:
        """Events per category (``""`` for events without ``cat``, e.g. metadata)."""
        counts = np.bincount(self.cat, minlength=len(self.cats))
        return {self.cats[k]: int(c) for k, c in enumerate(counts) if c}

    def phase_counts(self) -> dict[str, int]:
        vals, counts = np.unique(self.ph, return_counts=True)
        return {chr(int(v)): int(c) for v, c in zip(vals, counts)}

    def steps(self) -> list[tuple[int, int, int]]:
        """(step number, start ns, end ns) of each ``ProfilerStep#N`` annotation of the host, by
        start. The copies of the annotations on GPU streams (``gpu_user_annotation``) are no steps
        of their own, and the same step seen twice (same number and start) is listed once.
        """
        codes = [k for k, n in enumerate(self.names) if _STEP_RE.match(n)]
        if not codes:
            return []
        rows = np.flatnonzero(np.isin(self.name, codes) & (self.ph == ord("X")) & ~self.mask(GPU_STEP_CATS))
        out = set()
        for i in rows.tolist():
            step = _STEP_RE.match(self.names[int(self.name[i])])
            assert step is not None  # (the rows of names it matched)
            num = int(step.group(1))
            out.add((num, int(self.ts[i]), int(self.ts[i] + max(int(self.dur[i]), 0))))
        return sorted(out, key=lambda s: (s[1], s[0]))

    def flows(self, cat: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Complete flows: (flow ids, row of the ``s`` event, row of the ``f`` event).

        Flows are keyed by (cat, id); only ids with both ends present are returned (Kineto
        leaves lone ends: e.g. an ``f`` on runtime calls that launched nothing). If an id
        repeats, its first ``s`` and first ``f`` are paired.
        """
        is_s = self.ph == ord("s")
        is_f = self.ph == ord("f")
        if cat is not None:
            m = self.mask(cat)
            is_s &= m
            is_f &= m
        s_rows = np.flatnonzero(is_s)
        f_rows = np.flatnonzero(is_f)
        s_key = self.cat[s_rows].astype(np.int64) << 48 | (self.flow_id[s_rows] & ((1 << 48) - 1))
        f_key = self.cat[f_rows].astype(np.int64) << 48 | (self.flow_id[f_rows] & ((1 << 48) - 1))
        s_u, s_first = np.unique(s_key, return_index=True)
        f_u, f_first = np.unique(f_key, return_index=True)
        both, si, fi = np.intersect1d(s_u, f_u, assume_unique=True, return_indices=True)
        s_sel = s_rows[s_first[si]]
        f_sel = f_rows[f_first[fi]]
        order = np.argsort(s_sel, kind="stable")
        return self.flow_id[s_sel][order], s_sel[order], f_sel[order]

    # ------------------------------------------------------------------ metadata
    @property
    def distributed_info(self) -> dict | None:
        return self.metadata.get("distributedInfo")

    @property
    def backend(self) -> str | None:
        return (self.distributed_info or {}).get("backend")

    @property
    def rank(self) -> int | None:
        """``distributedInfo.rank``: a rank number (a string of digits is taken too), else an error."""
        info = self.distributed_info
        if info is None:
            return None
        if not isinstance(info, dict):
            raise TraceFormatError(self.path, f"distributedInfo: expected an object, got {type(info).__name__}")
        r = info.get("rank")
        if r is None:
            return None
        if isinstance(r, str) and r.strip().isdigit() and len(r.strip()) < 19:
            r = int(r)
        if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < 1 << 31:
            raise TraceFormatError(
                self.path, f"distributedInfo.rank: expected a rank number (0 or more), got {r!r:.40}"
            )
        return r

    @property
    def world_size(self) -> int | None:
        return (self.distributed_info or {}).get("world_size")

    @property
    def pg_config(self) -> list:
        return (self.distributed_info or {}).get("pg_config") or []

    @property
    def device_properties(self) -> list:
        return self.metadata.get("deviceProperties") or []

    @property
    def trace_name(self) -> str | None:
        return self.metadata.get("traceName")

    @property
    def base_time_ns(self) -> int | None:
        v = self.metadata.get("baseTimeNanoseconds")
        return int(v) if v is not None else None

    def thread_names(self) -> dict[tuple, str]:
        """{(pid, tid): name} from ``thread_name`` metadata events (pid/tid decoded)."""
        code = self.name_code("thread_name")
        out = {}
        for i, a in self.meta_args.items():
            if self.name[i] == code and "name" in a:
                out[(self.label_of(self.pid[i]), self.label_of(self.tid[i]))] = a["name"]
        return out

    def process_labels(self) -> dict:
        """{pid: labels} from ``process_labels`` metadata events (e.g. "CPU", "GPU 0")."""
        code = self.name_code("process_labels")
        return {self.label_of(self.pid[i]): a.get("labels") for i, a in self.meta_args.items() if self.name[i] == code}

    # ------------------------------------------------------------------ export
    def to_table(self) -> Table:
        """One row per event, names decoded; ``ph`` and ``cat`` categorical (codes into the
        phase letters and ``cats``)."""
        ph, phases = categorical(self.ph)
        data = {
            "ph": ph,
            "cat": self.cat,
            "name": np.asarray(self.names, dtype=object)[self.name] if len(self) else np.zeros(0, object),
            **{c: getattr(self, c) for c in ("pid", "tid", "ts", "dur", *_ARG_COLUMNS, "flow_id")},
        }
        spec = {"ph": Column(categories=[chr(c) for c in phases]), "cat": Column(categories=self.cats)}
        return Table(data, title=os.path.basename(self.path), spec=spec)


# ---------------------------------------------------------------------- parsing
_PH = {chr(i): i for i in range(128)}
_NEXT_EVENT = re.compile(r"[ \t\n\r]*,[ \t\n\r]*\{")


def _bulk_end(buf: str, pos: int, tries: int = 64) -> int:
    """End of the last '}' in buf[pos:] that is followed by ',' and the '{' of another event,
    i.e. a likely boundary between complete events; -1 if none is found."""
    hi = len(buf)
    for _ in range(tries):
        i = buf.rfind("}", pos, hi)
        if i < 0:
            return -1
        if _NEXT_EVENT.match(buf, i + 1):
            return i + 1
        hi = i
    return -1


_BATCH = 8192
_NO_ARGS: dict = {}


def _ns_list(vals: list, missing: int) -> list:
    """ts/dur values as parsed (int µs, or the text of a decimal) -> int ns, exactly."""
    try:  # Kineto writes floats with exactly three decimals: drop the point
        return [
            v * 1000 if v.__class__ is int else int(v[:-4] + v[-3:]) if v[-4] == "." and v[-3:].isdigit() else _ns(v)
            for v in vals
        ]
    except (TypeError, IndexError, KeyError, ValueError):
        pass
    return [missing if v is None else _ns(v) for v in vals]


def _int_col(vals: list) -> array:
    try:
        return array("q", vals)
    except (TypeError, OverflowError):
        return array("q", [v if v.__class__ is int and -(1 << 63) <= v < (1 << 63) else _as_int(v) for v in vals])


def _strings(buf: str, table: bytes) -> list[str]:
    """The strings of a `_kineto` table: int64 (offset, length) pairs into buf, of the text
    between the quotes (decoded as json does where it has escapes)."""
    t = memoryview(table).cast("q")
    out = [buf[t[k] : t[k] + t[k + 1]] for k in range(0, len(t), 2)]
    for k, s in enumerate(out):
        if "\\" in s:
            out[k] = _scanstring(buf, t[2 * k])[0]
    return out


def _global_codes(strings: list[str], codes: bytes, idx: dict) -> np.ndarray:
    """Chunk-local int32 codes of ``strings`` -> codes in ``idx`` (string -> code), which gains
    the strings it lacks in this order."""
    sd = idx.setdefault
    lut = np.array([sd(s, len(idx)) for s in strings], np.int64)
    return lut[np.frombuffer(codes, np.int32)]


def _with_labels(values: bytes, label_codes: bytes, lut: np.ndarray) -> np.ndarray:
    """int64 pid/tid values with the rows that hold a string (label code >= 0) resolved."""
    out = np.frombuffer(values, np.int64).copy()
    c = np.frombuffer(label_codes, np.int32)
    m = c >= 0
    out[m] = lut[c[m]]
    return out


class _Columns:
    """Per-event column builders: events are reduced to typed arrays a batch at a time."""

    def __init__(self, args_for=None):
        self.args_for = args_for  # name -> whether to keep the event's args (None: keep none)
        self.want: list[bool] = []  # args_for of each name code, filled as names appear
        self.kept: dict[int, dict] = {}
        self._names: list = []  # name_idx as a list, refreshed as it grows
        self._pats: dict[str, re.Pattern] = {}
        self._scan = scanner(parse_float=str)
        self.ph = bytearray()
        self.cat = array("h")
        self.name = array("i")
        self.pid = array("q")
        self.tid = array("q")
        self.ts = array("q")
        self.dur = array("q")
        self.args = [array("q") for _ in _ARG_KEYS]
        self.flow_id = array("q")
        self.cat_idx: dict = {"": 0}
        self.name_idx: dict = {}
        self.labels: list[str] = []
        self.label_idx: dict[str, int] = {}
        self.meta_args: dict[int, dict] = {}
        self.rows = 0

    def label(self, v: Any) -> int:
        if isinstance(v, str):
            s = v.strip()
            if s.isdigit() and s.isascii():
                return int(s)
            code = self.label_idx.get(v)
            if code is None:
                code = self.label_idx[v] = len(self.labels)
                self.labels.append(v)
            return -code - 1
        if v is None:
            return -1
        if isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
            return int(v)
        return self.label(str(v))

    def add_batch(self, b: list) -> None:
        """Append a batch of decoded events. Raises ValueError("#k: reason") for event k of the batch."""
        for k, e in enumerate(b):
            if e.__class__ is not dict:
                raise ValueError(f"#{k}: event is not a JSON object")
        row0 = self.rows
        phs = [e.get("ph", "") for e in b]
        self.ph.extend([_PH.get(p, 63) if p.__class__ is str else 63 for p in phs])
        sd = self.cat_idx.setdefault
        ci = self.cat_idx
        try:
            self.cat.extend(array("h", [sd(c, len(ci)) for c in [e.get("cat", "") for e in b]]))
        except TypeError:
            raise ValueError("an event has a 'cat' that is not a string") from None
        except OverflowError:
            raise ValueError("more than 32767 distinct categories") from None
        sd = self.name_idx.setdefault
        ni = self.name_idx
        try:
            codes = [sd(n, len(ni)) for n in [e.get("name", "") for e in b]]
            self.name.extend(array("i", codes))
        except TypeError:
            raise ValueError("an event has a 'name' that is not a string") from None
        pids = [e.get("pid", -1) for e in b]
        tids = [e.get("tid", -1) for e in b]
        try:
            pa, ta = array("q", pids), array("q", tids)
        except (TypeError, OverflowError):  # string ids: label them in event order, pid first
            pa, ta = array("q"), array("q")
            for p, t in zip(pids, tids):
                pa.append(p if p.__class__ is int and -(1 << 63) <= p < (1 << 63) else self.label(p))
                ta.append(t if t.__class__ is int and -(1 << 63) <= t < (1 << 63) else self.label(t))
        self.pid.extend(pa)
        self.tid.extend(ta)
        self.ts.extend(array("q", _ns_list([e.get("ts") for e in b], 0)))
        self.dur.extend(array("q", _ns_list([e.get("dur") for e in b], -1)))
        args = [e.get("args", _NO_ARGS) for e in b]
        if not all([a.__class__ is dict for a in args]):
            for k, a in enumerate(args):
                if a is None:
                    args[k] = _NO_ARGS
                elif a.__class__ is not dict:
                    raise ValueError(f"#{k}: args is not a JSON object")
        for col, key in zip(self.args, _ARG_KEYS):
            col.extend(_int_col([a.get(key, -1) for a in args]))
        for k, p in enumerate(phs):
            if p == "M" and args[k]:
                self.meta_args[row0 + k] = args[k]
        if self.args_for is not None:
            for k in np.flatnonzero(self._wanted(np.asarray(codes, np.int64))).tolist():
                if phs[k] != "M" and args[k]:
                    self.kept[row0 + k] = args[k]
        self.flow_id.extend(_int_col([e.get("id", -1) for e in b]))
        self.rows += len(b)

    def _wanted(self, codes: np.ndarray) -> np.ndarray:
        """args_for of the names of these global name codes (evaluated once per name)."""
        if len(self.want) < len(self.name_idx):
            names = list(self.name_idx)
            self.want.extend(bool(self.args_for(str(n))) for n in names[len(self.want) :])
        return np.asarray(self.want, bool)[codes] if codes.size else np.zeros(0, bool)

    def add_native(self, buf: str, r: tuple, pos: int = 0) -> None:
        """Append a run of events scanned by `_kineto.scan_events` from ``buf``. Its strings
        come as chunk-local codes; the distinct ones join the global tables here, in order of
        first appearance, as add_batch would add them. Raises ValueError like add_batch."""
        n, _stop, _cut, ph, cat, name, pid, tid, pid_s, tid_s, ts, dur, *ints, cat_tab, name_tab, label_tab = r
        cat = _global_codes(_strings(buf, cat_tab), cat, self.cat_idx)
        if cat.size and cat.max() > 32767:
            raise ValueError("more than 32767 distinct categories")
        name = _global_codes(_strings(buf, name_tab), name, self.name_idx)
        if label_tab:  # string pids/tids: "digits" are numbers, the rest labels (pid first)
            lut = np.array([self.label(s) for s in _strings(buf, label_tab)], np.int64)
            pid, tid = _with_labels(pid, pid_s, lut).tobytes(), _with_labels(tid, tid_s, lut).tobytes()
        self.ph += ph
        self.cat.frombytes(cat.astype(np.int16).tobytes())
        self.name.frombytes(name.astype(np.int32).tobytes())
        for col, data in zip(
            (self.pid, self.tid, self.ts, self.dur, *self.args, self.flow_id), (pid, tid, ts, dur, *ints)
        ):
            col.frombytes(data)
        if self.args_for is not None:
            wanted = np.flatnonzero(self._wanted(name)).tolist()
            if wanted:
                ts_run = np.frombuffer(ts, np.int64)
                found = self._find_args(buf, pos, _stop, wanted, name, ts_run)
                if found is None:  # the run's text holds exactly its n events: decode them all
                    events = json.loads("[" + buf[pos:_stop] + "]")
                    found = [events[k].get("args") for k in wanted] if len(events) == n else []
                for k, a in zip(wanted, found):
                    if isinstance(a, dict) and a:
                        self.kept[self.rows + k] = a
        self.rows += n

    def _find_args(self, buf: str, pos: int, stop: int, wanted: list, name: np.ndarray, ts: np.ndarray):
        """The args of the wanted events of a run, each decoded alone: found in order by its
        ``"name": ...`` text, from the '{' before it (Kineto writes ph, cat, name first), and
        checked by name and ts; None at the first doubt (then the run is decoded whole)."""
        names = list(self.name_idx) if len(self._names) < len(self.name_idx) else self._names
        self._names = names
        cur, out = pos, []
        for k in wanted:
            nm = names[int(name[k])]
            pat = self._pats.get(nm)
            if pat is None:
                pat = self._pats[nm] = re.compile(r'"name"\s*:\s*' + re.escape(json.dumps(nm)))
            m = pat.search(buf, cur, stop)
            start = buf.rfind("{", cur, m.start()) if m is not None else -1
            if start < 0:
                return None
            try:
                ev, end = self._scan(buf, start)
            except (StopIteration, ValueError, RecursionError):
                return None
            if ev.__class__ is not dict or ev.get("name") != nm or "ph" not in ev:
                return None
            try:
                if _ns(ev.get("ts")) != ts[k]:
                    return None
            except (TypeError, ValueError):
                return None
            out.append(ev.get("args"))
            cur = end
        return out

    def build(self, path: str, metadata: dict) -> KinetoTrace:
        def np_(arr, dtype):
            return np.frombuffer(arr, dtype).copy() if len(arr) else np.zeros(0, dtype)

        def strs(idx: dict) -> list[str]:
            return [k if isinstance(k, str) else json.dumps(k) for k in idx]

        args = {col: np_(a, np.int64) for col, a in zip(_ARG_COLUMNS, self.args)}
        cats, cat, renamed = canonical_cats(strs(self.cat_idx), np_(self.cat, np.int16))
        names, name = strs(self.name_idx), np_(self.name, np.int32)
        pid, tid = np_(self.pid, np.int64), np_(self.tid, np.int64)
        cats, cat, filed, moved = device_cats(cats, cat, names, name)
        if filed:  # (MTIA) the track is the stream where args name none; the pid is the device
            renamed |= filed
            for col, fill in (("stream", tid), ("device", pid)):
                gap = moved & (args[col] < 0)
                args[col][gap] = fill[gap]
        k = KinetoTrace(
            path=path,
            ph=np_(self.ph, np.uint8),
            cat=cat,
            name=name,
            pid=pid,
            tid=tid,
            ts=np_(self.ts, np.int64),
            dur=np_(self.dur, np.int64),
            flow_id=np_(self.flow_id, np.int64),
            **args,
            cats=cats,
            names=names,
            labels=self.labels,
            metadata=metadata,
            meta_args=self.meta_args,
            args=self.kept,
            renamed_cats=renamed,
        )
        link_by_flows(k, GPU_CATS, RUNTIME_CATS)  # work linked to its launch by an ac2g flow only
        return k


def _not_kineto(schema: Any) -> str:
    """Why a JSON object with a top-level ``nodes`` array is not a Kineto trace, and what reads it."""
    if schema is not None:
        return (
            f"a PyTorch host execution trace (schema {str(schema)[:40]}), not a Kineto trace: convert it "
            "with `chakra convert pytorch HOST_TRACE [KINETO_TRACE]`"
        )
    return "has a top-level 'nodes' array and no traceEvents: not a Kineto trace (a Chakra JSON trace?)"


def _iter_members(t: Text, scan_meta, on_events) -> Iterator[tuple[str, Any]]:
    """Walk the top-level object: yields (key, value) for every member except traceEvents,
    which is handed to `on_events(pos) -> pos` to be streamed."""
    pos = t.expect(0, "{", "'{' (a Kineto trace is a JSON object)")
    first = True
    seen = False  # traceEvents
    schema: Any = None
    while True:
        pos = t.skip_ws(pos)
        if pos >= len(t.buf):
            raise t.fail(pos, "file ends inside the top-level object (truncated file)")
        if t.buf[pos] == "}":
            pos += 1
            break
        if not first:
            if t.buf[pos] != ",":
                raise t.fail(pos, f"expected ',' or '}}' between top-level members, found {t.buf[pos : pos + 20]!r}")
            pos = t.skip_ws(pos + 1)
        first = False
        key, pos = t.value(pos, scan_meta, "a top-level key")
        if not isinstance(key, str):
            raise t.fail(pos, "top-level key is not a string")
        pos = t.expect(pos, ":", "':' after a top-level key")
        if key == "traceEvents":
            seen = True
            pos = on_events(pos)
        elif key == "nodes" and not seen:  # (not read: it is the whole trace of another format)
            raise TraceFormatError(t.path, _not_kineto(schema))
        else:
            val, pos = t.value(pos, scan_meta, f"top-level member {key!r}")
            if key == "schema":
                schema = val
            yield key, val
    pos = t.skip_ws(pos)
    if pos < len(t.buf):
        raise t.fail(pos, f"unexpected text after the trace object: {t.buf[pos : pos + 20]!r}")


def read_kineto(
    path: str | os.PathLike,
    *,
    limits: Limits | None = None,
    chunk: int = CHUNK,
    args_for: Callable[[str], bool] | None = None,
) -> KinetoTrace:
    """Read a Kineto JSON trace (plain or gzip, sniffed) into a columnar `KinetoTrace`.

    Raises `TraceFormatError` (one line: file, character offset, reason) on input that is
    not a Kineto trace: bad JSON, a truncated file, events that are not objects, no
    ``traceEvents`` array, or unparsable timestamps. ``args_for(name)``: keep the ``args`` of
    the events of that name in ``KinetoTrace.args`` (the others are reduced to the id columns).
    """
    path = os.fspath(path)
    f, _gz = open_binary(path, limits)
    cols = _Columns(args_for)
    metadata: dict = {}
    scan_meta = scanner()
    scan_ev = scanner(parse_float=str)  # keep float text: ts/dur are converted to ns exactly
    bulk_decode = json.JSONDecoder(parse_float=str).decode
    seen_events = []
    native = _native  # looked up per call: tests switch it off

    with f:
        t = Text(f, path, chunk)

        def add(adder, events, n: int) -> None:
            try:
                adder(*events)
            except (ValueError, TypeError, OverflowError) as exc:
                msg = str(exc)
                if msg.startswith("#"):
                    k_txt, _, msg = msg.partition(": ")
                    where = f"event #{cols.rows + int(k_txt[1:])}"
                else:
                    where = f"an event among #{cols.rows}-#{cols.rows + n - 1}"
                raise TraceFormatError(path, f"{where} is not a valid trace event: {msg}") from None

        def flush(batch: list) -> None:
            add(cols.add_batch, (batch,), len(batch))
            batch.clear()

        def on_events(pos: int) -> int:
            seen_events.append(True)
            pos = t.expect(pos, "[", "'[' opening traceEvents")
            pos = t.skip_ws(pos)
            if pos < len(t.buf) and t.buf[pos] == "]":
                return pos + 1
            batch: list = []
            append = batch.append
            sep = _SEP.match
            buf = t.buf
            bulk_after = 0  # absolute offset: no bulk decoding before it (after a failed guess)
            c_stopped = False  # the C scanner stopped before the event at pos: decode it below
            c_read_on = False  # ... because it ran past the buffer, which has been extended since
            while True:  # pos is where an event starts
                done = False  # the event at pos, and maybe more, went into the columns
                if native is not None:
                    # C path: the events the scanner takes go straight into columns; it stops
                    # before any other one, which is decoded below, then the scanner goes on
                    if not c_stopped:
                        n, stop, cut = (r := native.scan_events(buf, pos))[:3]
                        if n:
                            if batch:
                                flush(batch)
                            add(cols.add_native, (buf, r, pos), n)
                            pos = stop
                            done = True
                        elif cut and not (t.eof or c_read_on):
                            # the event runs past the buffer: read on once and scan again (if
                            # still cut, it is decoded below, where t.value reads on as needed)
                            pos = t.more(pos)
                            buf = t.buf
                            c_read_on = True
                            continue
                        c_read_on = False
                        c_stopped = done and not cut  # after a cut, scan the next event again
                    else:
                        c_stopped = False
                elif t.base + pos >= bulk_after:
                    end = _bulk_end(buf, pos)
                    if end > pos:
                        # bulk path: all complete events in the buffer, decoded in one C call; a
                        # boundary guessed inside a string or a nested object cannot parse
                        try:
                            events = bulk_decode("[" + buf[pos:end] + "]")
                        except (ValueError, RecursionError):
                            events = None
                            bulk_after = t.base + len(buf)
                        if events is not None:
                            if batch:
                                flush(batch)
                            flush(events)
                            pos = end
                            done = True
                if not done:  # one event at a time (buffer ends, odd text, errors)
                    try:
                        e, pos = scan_ev(buf, pos)
                    except (StopIteration, ValueError, RecursionError):  # ValueError: JSONDecodeError, a long int
                        if buf.startswith("]", pos):  # tolerate a trailing comma
                            flush(batch)
                            return pos + 1
                        e, pos = t.value(pos, scan_ev, f"event #{cols.rows + len(batch)}")
                        buf = t.buf
                    append(e)
                    if len(batch) >= _BATCH:
                        flush(batch)
                m = sep(buf, pos)
                if m is not None and m.end() < len(buf):
                    pos = m.end()
                    continue
                # slow path: whitespace up to the end of the buffer, the end of the array, errors
                pos = t.skip_ws(pos)
                buf = t.buf
                if pos >= len(buf):
                    flush(batch)
                    raise t.fail(pos, f"file ends inside traceEvents after {cols.rows} events (truncated file)")
                ch = buf[pos]
                if ch == "]":
                    flush(batch)
                    return pos + 1
                if ch != ",":
                    raise t.fail(
                        pos,
                        f"expected ',' or ']' after event #{cols.rows + len(batch) - 1}, found {buf[pos : pos + 20]!r}",
                    )
                pos = t.skip_ws(pos + 1)
                buf = t.buf
                if pos < len(buf) and buf[pos] == "]":  # tolerate a trailing comma
                    flush(batch)
                    return pos + 1

        for key, val in _iter_members(t, scan_meta, on_events):
            metadata[key] = val

    if not seen_events:
        raise TraceFormatError(path, "no traceEvents array (not a Kineto/Chrome trace)")
    return cols.build(path, metadata)
