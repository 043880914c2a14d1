#!/usr/bin/env python
"""I/O benchmark of the `.et` reader/writer against a straightforward protobuf loop.

    python benchmarks/io_bench.py [--nodes N] [--json OUT] [--extras few|converter] [--profile]
                                  [--repeat K] [--no-native]

Everything is measured in the same run and reported as ratios too, since shared machines
are noisy. Steps:

  (a) bulk load `read_trace` (plain and gzip)          (b) naive loop: Python varint framing,
      one `Node.ParseFromString` per message; id, name, type, deps, start, duration and the
      column attributes appended to Python lists
  (c) `write_trace` (plain and gzip)                   (d) naive write: build one pb.Node per
      node from those lists, SerializeToString, frame (it writes no extras, so it has less
      to write than (c))
  (e) streaming `iter_nodes`                           (f) memory of the loaded columnar model:
      `Trace.nbytes()` and RSS growth of a fresh subprocess that loads the file

The synthetic trace is generated with numpy directly into the columnar `Trace` (1M nodes in
a couple of seconds): ~60 op names, ~95% COMP / ~4% COMM_COLL / ~1% SEND+RECV pairs, one
control parent and 1-4 data deps to earlier nodes per node, start/duration, column attributes
(is_cpu_op, num_ops, tensor_size, comm_*), plus converter-style attributes kept in `extra`
(`--extras few`: rf_id, seq_id, tid, stream as int64_val; `--extras converter`: also
fw_parent, fw_tid, scope, op_schema and inputs/outputs IOInfo, like the reference PyTorch
converter writes on every node).

If the bulk-load target is missed (or with --profile) it prints a cProfile of read_trace and a
per-source-line timing of the loader and writer (cProfile books numpy work to the caller).
`--no-native` measures the pure-numpy code paths (as with CHAKRA_TRACE_PURE=1).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import shutil
import sys
import tempfile
import time

import _probe
import numpy as np

try:
    import chakra_trace  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from chakra_trace.io import et, stream
from chakra_trace.io.et import iter_nodes, read_trace, write_trace
from chakra_trace.schema import codec
from chakra_trace.schema import proto as pb
from chakra_trace.schema.enums import ATTR_MEMBER, Attr, CollectiveType, NodeType
from chakra_trace.schema.node import COLUMN_ATTRS, COLUMN_BY_NAME
from chakra_trace.schema.trace import Trace
from chakra_trace.schema.wire import (
    I64,
    U8,
    U64,
    WT_LEN,
    WT_VARINT,
    Rows,
    encode_key,
    encode_varints,
    gather_rows,
    rows_from_bytes,
)

TARGET_LOAD_RATIO = 20.0  # bulk load vs naive loop
TARGET_BYTES_PER_NODE = 300.0  # resident, loaded columnar model

OPS = [
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::matmul",
    "aten::linear",
    "aten::add_",
    "aten::add",
    "aten::mul",
    "aten::mul_",
    "aten::div",
    "aten::sub",
    "aten::relu",
    "aten::relu_",
    "aten::gelu",
    "aten::silu",
    "aten::softmax",
    "aten::_softmax",
    "aten::log_softmax",
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::batch_norm",
    "aten::cudnn_batch_norm",
    "aten::conv2d",
    "aten::convolution",
    "aten::cudnn_convolution",
    "aten::max_pool2d",
    "aten::avg_pool2d",
    "aten::dropout",
    "aten::embedding",
    "aten::copy_",
    "aten::to",
    "aten::_to_copy",
    "aten::view",
    "aten::reshape",
    "aten::transpose",
    "aten::t",
    "aten::permute",
    "aten::contiguous",
    "aten::cat",
    "aten::split",
    "aten::slice",
    "aten::select",
    "aten::zeros",
    "aten::empty",
    "aten::fill_",
    "aten::zero_",
    "aten::sum",
    "aten::mean",
    "aten::cross_entropy_loss",
    "aten::nll_loss",
    "aten::threshold_backward",
    "aten::convolution_backward",
    "aten::native_batch_norm_backward",
    "aten::mm_backward",
    "Optimizer.step#SGD.step",
    "aten::_foreach_add_",
]
COLL_NAMES = {
    CollectiveType.ALL_REDUCE: "nccl:all_reduce",
    CollectiveType.ALL_GATHER: "nccl:all_gather",
    CollectiveType.REDUCE_SCATTER: "nccl:reduce_scatter",
    CollectiveType.BROADCAST: "nccl:broadcast",
    CollectiveType.ALL_TO_ALL: "nccl:all_to_all",
    CollectiveType.BARRIER: "nccl:barrier",
}
PG_NAMES = ["0", "1", "2", "3"]

# --------------------------------------------------------------------------- generation


def _attr_rows(name: str, member: str, values: np.ndarray | None = None, strings: Rows | None = None) -> Rows:
    """Serialized `attr` fields (Node field 10) for every row: name + one oneof member."""
    num = pb.ATTR_MEMBERS[member][0]
    name_b = name.encode()
    head = np.frombuffer(b"\x0a" + bytes([len(name_b)]) + name_b, U8)
    if strings is None:  # varint member
        vb, vs = encode_varints(np.asarray(values).astype(I64).view(U64) if values.dtype != U64 else values)
        key = np.frombuffer(encode_key(num, WT_VARINT), U8)
        val = Rows.concat([Rows(np.tile(key, vs.size), np.full(vs.size, key.size, I64)), Rows(vb, vs)])
    else:  # length-delimited member
        lb, ls = encode_varints(strings.lens.astype(U64))
        key = np.frombuffer(encode_key(num, WT_LEN), U8)
        n = ls.size
        val = Rows.concat([Rows(np.tile(key, n), np.full(n, key.size, I64)), Rows(lb, ls), strings])
    n = val.lens.size
    inner = Rows.concat([Rows(np.tile(head, n), np.full(n, head.size, I64)), val])
    return _len_field(10, inner)


def _len_field(number: int, payload: Rows) -> Rows:
    n = payload.lens.size
    lb, ls = encode_varints(payload.lens.astype(U64))
    key = np.frombuffer(encode_key(number, WT_LEN), U8)
    return Rows.concat([Rows(np.tile(key, n), np.full(n, key.size, I64)), Rows(lb, ls), payload])


def generate(n: int, seed: int = 0, extras: str = "few") -> Trace:
    """A realistic synthetic trace built straight into the columnar model."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=U64)
    rows = np.arange(n, dtype=I64)

    # node types: ~95% compute, ~4% collectives, ~1% send/recv pairs
    types = np.full(n, NodeType.COMP_NODE, np.int32)
    types[rng.random(n) < 0.04] = NodeType.COMM_COLL_NODE
    npairs = max(1, n // 200) if n >= 2 else 0
    send = np.unique(rng.choice(max(n - 1, 1), size=npairs, replace=False)) if npairs else np.zeros(0, I64)
    send = send[np.concatenate(([True], np.diff(send) > 1))] if send.size else send  # no overlapping pairs
    types[send] = NodeType.COMM_SEND_NODE
    types[send + 1] = NodeType.COMM_RECV_NODE
    comp = types == NodeType.COMP_NODE
    coll = types == NodeType.COMM_COLL_NODE
    is_send = types == NodeType.COMM_SEND_NODE
    is_recv = types == NodeType.COMM_RECV_NODE
    p2p = is_send | is_recv

    # names: op names for compute (skewed like real traces), comm names by collective type
    names = [""] + OPS + list(COLL_NAMES.values()) + ["nccl:send", "nccl:recv"]
    code_of = {s: i for i, s in enumerate(names)}
    weights = 1.0 / np.arange(1, len(OPS) + 1)
    name_codes = np.zeros(n, np.int32)
    name_codes[comp] = 1 + rng.choice(len(OPS), size=int(comp.sum()), p=weights / weights.sum())
    ctypes = np.array(list(COLL_NAMES), np.int64)
    comm_type = np.zeros(n, np.int64)
    comm_type[coll] = rng.choice(ctypes, size=int(coll.sum()), p=[0.6, 0.15, 0.15, 0.05, 0.03, 0.02])
    coll_code = np.array([code_of[COLL_NAMES[CollectiveType(c)]] for c in ctypes], np.int32)
    lut = np.zeros(int(ctypes.max()) + 1, np.int32)
    lut[ctypes] = coll_code
    name_codes[coll] = lut[comm_type[coll]]
    name_codes[is_send] = code_of["nccl:send"]
    name_codes[is_recv] = code_of["nccl:recv"]

    # one control parent, 1-4 data deps, all to earlier nodes
    ctrl_counts = (rows > 0).astype(I64)
    ctrl_indptr = np.zeros(n + 1, I64)
    np.cumsum(ctrl_counts, out=ctrl_indptr[1:])
    r = rows[1:]
    ctrl = (r - 1 - np.floor(rng.random(r.size) * np.minimum(r, 64)).astype(I64)).astype(U64)
    data_counts = rng.integers(1, 5, n)
    data_counts[0] = 0
    data_indptr = np.zeros(n + 1, I64)
    np.cumsum(data_counts, out=data_indptr[1:])
    owner = np.repeat(rows, data_counts)
    data = (owner - 1 - np.floor(rng.random(owner.size) * np.minimum(owner, 1000)).astype(I64)).astype(U64)

    duration = rng.integers(1, 2000, n).astype(U64)
    gaps = rng.integers(0, 5, n).astype(U64)
    start = U64(1_700_000_000_000_000) + np.cumsum(duration // U64(4) + gaps, dtype=U64)

    cols: dict[str, np.ndarray] = {c.name: np.zeros(n, c.dtype) for c in COLUMN_ATTRS}
    present = np.zeros(n, np.uint16)

    def setcol(name, mask, values):
        cols[name][mask] = values
        present[mask] |= np.uint16(1 << COLUMN_BY_NAME[name].bit)

    setcol(Attr.IS_CPU_OP, np.ones(n, bool), comp & (rng.random(n) < 0.4))
    k = int(comp.sum())
    setcol(Attr.NUM_OPS, comp, np.exp(rng.uniform(np.log(1e3), np.log(1e12), k)).astype(np.int64))
    setcol(Attr.TENSOR_SIZE, comp, np.exp(rng.uniform(np.log(64), np.log(1e9), k)).astype(U64))
    comm = coll | p2p
    setcol(Attr.COMM_TYPE, coll, comm_type[coll])
    setcol(Attr.COMM_SIZE, comm, np.exp(rng.uniform(np.log(1e3), np.log(1e9), int(comm.sum()))).astype(np.int64))
    setcol(Attr.PG_NAME, coll, rng.integers(0, len(PG_NAMES), int(coll.sum())).astype(np.int32))
    tags = np.arange(send.size, dtype=np.int32)
    setcol(Attr.COMM_DST, is_send, rng.integers(0, 8, send.size).astype(np.int32))
    setcol(Attr.COMM_TAG, is_send, tags)
    setcol(Attr.COMM_SRC, np.roll(is_send, 1), rng.integers(0, 8, send.size).astype(np.int32))
    setcol(Attr.COMM_TAG, np.roll(is_send, 1), tags)

    # attributes that are not columns: kept verbatim in `extra`
    tid = np.where(comp, rng.integers(1, 3, n), 7 + rng.integers(0, 2, n))
    tail = [
        _attr_rows(Attr.RF_ID, "int64_val", rows + 1),
        _attr_rows(Attr.SEQ_ID, "int64_val", np.where(rng.random(n) < 0.5, -1, rows // 3)),
        _attr_rows(Attr.TID, "int64_val", tid),
        _attr_rows(Attr.STREAM, "int64_val", np.where(comp, 7, 13 + rng.integers(0, 4, n))),
    ]
    head: list[Rows] = []
    if extras == "converter":
        tail += [
            _attr_rows(Attr.FW_PARENT, "int64_val", np.maximum(rows - rng.integers(1, 40, n), 0)),
            _attr_rows(Attr.FW_TID, "int64_val", np.zeros(n, I64)),
            _attr_rows(Attr.SCOPE, "int64_val", np.zeros(n, I64)),
        ]
        schemas = rows_from_bytes(
            [f"{s}(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor".encode() for s in names]
        )
        tail.append(_attr_rows(Attr.OP_SCHEMA, "string_val", strings=gather_rows(schemas, name_codes)))
        # inputs/outputs: one IOInfo template per op name (fields 8 and 9 precede the attributes)
        io_tmpl = []
        for i, _s in enumerate(names):
            m = pb.IOInfo(
                values=f"[[{i}, {i + 1}, 0, 512, 4, 'cuda:0'], [{2 * i}, {i + 9}, 4992, 512, 4, 'cuda:0']]",
                shapes="[[512], [512]]",
                types="['Tensor(float)', 'Tensor(float)']",
            )
            io_tmpl.append(m.SerializeToString())
        iot = rows_from_bytes(io_tmpl)
        head = [
            _len_field(8, gather_rows(iot, name_codes)),
            _len_field(9, gather_rows(iot, (name_codes + 1) % len(names))),
        ]
    head_rows = Rows.concat(head) if head else Rows.empty(n)
    tail_rows = Rows.concat(tail)
    extra_rows = Rows.concat([head_rows, tail_rows])
    extra_indptr = np.zeros(n + 1, I64)
    np.cumsum(extra_rows.lens, out=extra_indptr[1:])

    meta = pb.GlobalMetadata(version="")
    for key, member, value in (
        ("schema", "string_val", "1.0.2-chakra.0.0.4"),
        ("pid", "uint64_val", 4242),
        ("time", "string_val", "2026-01-01 00:00:00"),
        ("start_ts", "uint64_val", int(start[0]) if n else 0),
        ("finish_ts", "uint64_val", int(start[-1] + duration[-1]) if n else 0),
    ):
        a = meta.attr.add(name=key)
        setattr(a, member, value)

    return Trace(
        n,
        metadata=meta,
        names=names,
        groups=list(PG_NAMES),
        ids=ids,
        types=types,
        name_codes=name_codes,
        start=start,
        duration=duration,
        ctrl_indptr=ctrl_indptr,
        ctrl=ctrl,
        data_indptr=data_indptr,
        data=data,
        present=present,
        extra=extra_rows.data,
        extra_indptr=extra_indptr,
        extra_split=head_rows.lens.astype(np.uint32),
        **cols,
    )


def check_sample(t: Trace, seed: int = 1) -> None:
    """Decode a sample of rows as plain nodes and check they say what the columns say."""
    rng = np.random.default_rng(seed)
    n = len(t)
    sample = set(rng.integers(0, n, min(n, 200)).tolist())
    for ty in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        sample.update(np.flatnonzero(t.types == ty)[:5].tolist())
    for i in sorted(sample):
        node = t.node(i)
        assert node.id == int(t.ids[i]) and node.name == t.names[t.name_codes[i]], i
        assert node.type == int(t.types[i])
        assert node.data_deps == t.data_deps(i).tolist() and node.ctrl_deps == t.ctrl_deps(i).tolist()
        assert node.duration_micros == int(t.duration[i]) and node.start_time_micros == int(t.start[i])
        assert node.attr(Attr.RF_ID) == i + 1, (i, node.attrs)
        assert node.attr(Attr.TID) is not None
        by_name = {a.name: a for a in node.attrs}
        for c in COLUMN_ATTRS:
            if t.present[i] & (1 << c.bit):
                a = by_name[c.name]
                assert a.member == ATTR_MEMBER[c.name], (i, a)
                assert a.value == t.attr(i, c.name), (i, a)
        if node.type == NodeType.COMM_COLL_NODE:
            assert Attr.COMM_TYPE in by_name and Attr.COMM_SIZE in by_name and Attr.PG_NAME in by_name
        if node.type == NodeType.COMM_SEND_NODE:
            assert {Attr.COMM_DST, Attr.COMM_TAG, Attr.COMM_SIZE} <= set(by_name)
        if node.type == NodeType.COMM_RECV_NODE:
            assert {Attr.COMM_SRC, Attr.COMM_TAG, Attr.COMM_SIZE} <= set(by_name)


# --------------------------------------------------------------------------- naive baselines

_COLUMN_NAMES = frozenset(c.name for c in COLUMN_ATTRS)


def naive_load(path: str) -> dict:
    """What a straightforward loader does: frame in Python, parse one Node per message."""
    with open(path, "rb") as f:
        data = f.read()
    Node = pb.Node
    columns = _COLUMN_NAMES
    ids, names, types, ctrl, deps, start, dur, attrs = [], [], [], [], [], [], [], []
    pos, end = 0, len(data)
    meta = None
    while pos < end:
        length = shift = 0
        while True:
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        msg = data[pos : pos + length]
        pos += length
        if meta is None:
            meta = pb.GlobalMetadata.FromString(msg)
            continue
        node = Node()
        node.ParseFromString(msg)
        ids.append(node.id)
        names.append(node.name)
        types.append(node.type)
        ctrl.append(list(node.ctrl_deps))
        deps.append(list(node.data_deps))
        start.append(node.start_time_micros)
        dur.append(node.duration_micros)
        attrs.append({a.name: getattr(a, a.WhichOneof("value")) for a in node.attr if a.name in columns})
    return {
        "metadata": meta,
        "ids": ids,
        "names": names,
        "types": types,
        "ctrl": ctrl,
        "data": deps,
        "start": start,
        "duration": dur,
        "attrs": attrs,
    }


def naive_write(model: dict, path: str) -> None:
    """Build one pb.Node per node from Python values, serialize, frame."""
    Node = pb.Node
    members = dict(ATTR_MEMBER)

    def varint(v: int) -> bytes:
        out = bytearray()
        while v > 0x7F:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        return bytes(out)

    with open(path, "wb") as f:
        meta = model["metadata"].SerializeToString()
        f.write(varint(len(meta)) + meta)
        for i in range(len(model["ids"])):
            m = Node(
                id=model["ids"][i],
                name=model["names"][i],
                type=model["types"][i],
                start_time_micros=model["start"][i],
                duration_micros=model["duration"][i],
            )
            m.ctrl_deps.extend(model["ctrl"][i])
            m.data_deps.extend(model["data"][i])
            for k, v in model["attrs"][i].items():
                a = m.attr.add(name=k)
                setattr(a, members.get(k, "int64_val"), v)
            s = m.SerializeToString()
            f.write(varint(len(s)))
            f.write(s)


# --------------------------------------------------------------------------- measuring


def disable_native() -> None:
    """Force the numpy code paths: drop the optional C kernels wherever a module holds them."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("chakra_trace") and getattr(mod, "_native", None) is not None:
            mod._native = None


def native_in_use() -> bool:
    from chakra_trace.schema import wire

    return getattr(wire, "_native", None) is not None


def timed(fn, repeat: int = 1):
    """(best seconds, last result) over `repeat` runs."""
    best, result = float("inf"), None
    for _ in range(repeat):
        result = None
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


_RSS_PROBE = """
import ctypes
import numpy as np
from chakra_trace.io.et import read_trace
if sys.argv[2] == "no-native":
    for name, mod in list(sys.modules.items()):
        if name.startswith("chakra_trace") and getattr(mod, "_native", None) is not None:
            mod._native = None
reset_peak()
before, peak0 = status("VmRSS"), status("VmHWM")
t = read_trace(sys.argv[1])
gc.collect()
after, peak = status("VmRSS"), status("VmHWM")
trimmed = None
try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # give back heap that glibc keeps after frees
    trimmed = status("VmRSS")
except OSError:
    pass
print(json.dumps({"nodes": len(t), "before": before, "after": after, "after_malloc_trim": trimmed,
                  "peak_before": peak0, "peak": peak, "nbytes": t.nbytes()}))
"""


def rss_probe(path: str, native: bool) -> dict:
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    if not native:
        env["CHAKRA_TRACE_PURE"] = "1"
    return _probe.run(_RSS_PROBE, path, "native" if native else "no-native", env=env)


def line_profile(fn, funcs, top: int = 25) -> str:
    """Seconds per source line of `funcs` while fn() runs.

    cProfile books every numpy operation as time of the calling function (they are not
    Python calls), so for vectorized code a per-line split says much more.
    """
    import collections
    import linecache

    codes = {f.__code__ for f in funcs}
    acc: collections.Counter = collections.Counter()

    def tracer(frame, event, arg):
        if event != "call" or frame.f_code not in codes:
            return None
        state = [frame.f_lineno, time.perf_counter()]

        def local(fr, ev, a):
            acc[(fr.f_code.co_filename, state[0])] += time.perf_counter() - state[1]
            state[0] = fr.f_lineno
            state[1] = time.perf_counter()
            return local

        return local

    t0 = time.perf_counter()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    total = time.perf_counter() - t0
    out = [f"total {total:.3f} s (line tracing adds a little)"]
    for (fname, line), sec in acc.most_common(top):
        src = linecache.getline(fname, line).strip()
        out.append(f"{sec:7.3f} s {100 * sec / total:5.1f}%  {os.path.basename(fname)}:{line}  {src[:100]}")
    return "\n".join(out)


def profile_load(path: str, top: int = 18) -> str:
    prof = cProfile.Profile()
    prof.enable()
    read_trace(path)
    prof.disable()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--json", dest="json_out", help="write the figures to this JSON file")
    ap.add_argument(
        "--extras", choices=("few", "converter"), default="few", help="non-column attributes per node (default: few)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="best of N for the fast steps (default 3)")
    ap.add_argument("--profile", action="store_true", help="always print a cProfile of read_trace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-native", action="store_true", help="use the numpy code paths even if the optional C kernels are built"
    )
    ap.add_argument("--tmp", help="directory for the trace files (default: a fresh temporary one)")
    args = ap.parse_args(argv)
    n = args.nodes
    rep = max(1, args.repeat)
    if args.no_native:
        disable_native()

    tmp = tempfile.mkdtemp(prefix="chakra_io_bench_", dir=args.tmp)
    plain, gzp = os.path.join(tmp, "bench.0.et"), os.path.join(tmp, "bench.0.et.gz")
    naive_out = os.path.join(tmp, "naive.0.et")
    res: dict = {
        "nodes": n,
        "extras": args.extras,
        "repeat": rep,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "native_kernels": native_in_use(),
    }
    try:
        from google.protobuf import __version__ as pbv
        from google.protobuf.internal import api_implementation

        res["protobuf"] = f"{pbv} ({api_implementation.Type()})"
    except Exception:  # pragma: no cover
        pass

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        log(f"generating {n:,} nodes (extras={args.extras}) ...")
        t_gen, trace = timed(lambda: generate(n, args.seed, args.extras))
        check_sample(trace)
        res["generate_s"] = t_gen
        res["data_deps"] = int(trace.data.size)
        res["ctrl_deps"] = int(trace.ctrl.size)
        res["node_types"] = trace.node_type_counts()
        res["distinct_names"] = len(trace.names) - 1

        log("write_trace ...")
        res["write_plain_s"], _ = timed(lambda t=trace: write_trace(t, plain), rep)
        res["write_gzip_s"], _ = timed(lambda t=trace: write_trace(t, gzp), 1)
        res["file_bytes"] = os.path.getsize(plain)
        res["gzip_bytes"] = os.path.getsize(gzp)

        log("read_trace ...")
        del trace
        res["load_plain_s"], loaded = timed(lambda: read_trace(plain), rep)
        assert len(loaded) == n and int(loaded.data.size) == res["data_deps"]
        res["nbytes"] = loaded.nbytes()
        res["nbytes_by_column"] = {k: int(getattr(loaded, k).nbytes) for k in Trace._ARRAYS}
        check_sample(loaded, seed=2)
        del loaded
        res["load_gzip_s"], loaded = timed(lambda: read_trace(gzp), max(1, rep - 1))
        assert len(loaded) == n
        del loaded

        log("iter_nodes ...")
        res["iter_nodes_s"], count = timed(lambda: sum(1 for _ in iter_nodes(plain)), 1)
        assert count == n

        log("naive load (Python framing + ParseFromString per node) ...")
        res["naive_load_s"], model = timed(lambda: naive_load(plain), 1)
        assert len(model["ids"]) == n
        log("naive write (pb.Node per node + SerializeToString) ...")
        res["naive_write_s"], _ = timed(lambda m=model: naive_write(m, naive_out), 1)
        del model
        gc.collect()

        log("memory probe (fresh subprocess) ...")
        probe = rss_probe(plain, res["native_kernels"])
        res["rss_probe"] = probe

        rate = lambda s: n / s if s > 0 else float("inf")  # noqa: E731
        res["rates_nodes_per_s"] = {
            "load_plain": rate(res["load_plain_s"]),
            "load_gzip": rate(res["load_gzip_s"]),
            "naive_load": rate(res["naive_load_s"]),
            "write_plain": rate(res["write_plain_s"]),
            "write_gzip": rate(res["write_gzip_s"]),
            "naive_write": rate(res["naive_write_s"]),
            "iter_nodes": rate(res["iter_nodes_s"]),
        }
        res["bytes_per_node"] = {
            "nbytes": res["nbytes"] / n,
            "rss_growth": (probe["after"] - probe["before"]) / n,
            "rss_growth_after_malloc_trim": (
                (probe["after_malloc_trim"] - probe["before"]) / n if probe["after_malloc_trim"] is not None else None
            ),
            "peak_during_load": (probe["peak"] - probe["before"]) / n,
            "file_plain": res["file_bytes"] / n,
            "file_gzip": res["gzip_bytes"] / n,
        }
        res["ratios"] = {
            "load_vs_naive": res["naive_load_s"] / res["load_plain_s"],
            "load_gzip_vs_naive": res["naive_load_s"] / res["load_gzip_s"],
            "write_vs_naive": res["naive_write_s"] / res["write_plain_s"],
            "write_gzip_vs_naive": res["naive_write_s"] / res["write_gzip_s"],
            "iter_nodes_vs_naive": res["naive_load_s"] / res["iter_nodes_s"],
        }
        # strict: what the process really holds after the load, not only what the arrays hold
        worst_mem = max(res["bytes_per_node"]["nbytes"], res["bytes_per_node"]["rss_growth"])
        res["targets"] = {
            "load_ratio": {
                "target": TARGET_LOAD_RATIO,
                "value": res["ratios"]["load_vs_naive"],
                "met": res["ratios"]["load_vs_naive"] >= TARGET_LOAD_RATIO,
            },
            "bytes_per_node": {
                "target": TARGET_BYTES_PER_NODE,
                "value": worst_mem,
                "met": worst_mem <= TARGET_BYTES_PER_NODE,
            },
        }

        report(res)
        if args.profile or not res["targets"]["load_ratio"]["met"]:
            print("\ncProfile of read_trace (plain), by own time:")
            res["profile"] = profile_load(plain)
            print(res["profile"])
            funcs = [et.read_trace, et.iter_chunks, stream.iter_frame_blocks, codec.decode_nodes, Trace.concat] + [
                getattr(codec, k) for k in ("_deps", "_intern") if hasattr(codec, k)
            ]
            print("time per source line of the loader (read_trace, plain):")
            res["line_profile_load"] = line_profile(lambda: read_trace(plain), funcs)
            print(res["line_profile_load"])
            print("\ntime per source line of the writer (write_trace, plain):")
            t2 = read_trace(plain)
            wfuncs = [et.write_trace, et.encode_trace, codec.node_payloads]
            res["line_profile_write"] = line_profile(lambda: write_trace(t2, plain + ".w"), wfuncs, top=15)
            print(res["line_profile_write"])
            del t2
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(res, f, indent=2, default=float)
            log(f"wrote {args.json_out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def report(res: dict) -> None:
    n = res["nodes"]
    r, b = res["rates_nodes_per_s"], res["bytes_per_node"]
    print(
        f"\n.et I/O benchmark: {n:,} nodes, {res['data_deps']:,} data deps, {res['ctrl_deps']:,} ctrl deps, "
        f"{res['distinct_names']} names, extras={res['extras']}"
    )
    print(f"types: {res['node_types']}")
    print(
        f"python {res['python']}, numpy {res['numpy']}, protobuf {res.get('protobuf', '?')}, "
        f"{res['cpus']} CPUs; C kernels {'on' if res['native_kernels'] else 'off'}; "
        f"best of {res['repeat']} for read/write plain"
    )
    print(
        f"file: {res['file_bytes'] / 2**20:,.1f} MiB plain ({b['file_plain']:.0f} B/node), "
        f"{res['gzip_bytes'] / 2**20:,.1f} MiB gzip; generated in {res['generate_s']:.2f} s\n"
    )
    rows = [
        ("(a) read_trace, plain", res["load_plain_s"], r["load_plain"]),
        ("(a) read_trace, gzip", res["load_gzip_s"], r["load_gzip"]),
        ("(b) naive load loop", res["naive_load_s"], r["naive_load"]),
        ("(c) write_trace, plain", res["write_plain_s"], r["write_plain"]),
        ("(c) write_trace, gzip", res["write_gzip_s"], r["write_gzip"]),
        ("(d) naive write loop", res["naive_write_s"], r["naive_write"]),
        ("(e) iter_nodes (streaming pb.Node)", res["iter_nodes_s"], r["iter_nodes"]),
    ]
    print(f"{'step':38s} {'seconds':>9s} {'nodes/s':>14s}")
    for name, s, rate in rows:
        print(f"{name:38s} {s:9.3f} {rate:14,.0f}")
    q = res["ratios"]
    print("\nratios (same run):")
    print(f"  bulk load is {q['load_vs_naive']:.1f}x the naive loop (gzip: {q['load_gzip_vs_naive']:.1f}x)")
    print(f"  write_trace is {q['write_vs_naive']:.1f}x the naive write (gzip: {q['write_gzip_vs_naive']:.1f}x)")
    print(f"  iter_nodes is {q['iter_nodes_vs_naive']:.2f}x the naive loop")
    print("\nmemory of the loaded columnar model:")
    print(f"  Trace.nbytes():          {b['nbytes']:7.1f} B/node")
    print(f"  RSS growth (subprocess): {b['rss_growth']:7.1f} B/node")
    if b["rss_growth_after_malloc_trim"] is not None:
        print(
            f"  RSS growth after malloc_trim(0): {b['rss_growth_after_malloc_trim']:7.1f} B/node "
            "(heap glibc kept after the load's temporaries were freed)"
        )
    print(f"  peak RSS during load:    {b['peak_during_load']:7.1f} B/node above the pre-load RSS")
    big = sorted(res["nbytes_by_column"].items(), key=lambda kv: -kv[1])[:6]
    print("  largest columns: " + ", ".join(f"{k} {v / n:.1f}" for k, v in big) + " (B/node)")
    t = res["targets"]
    print("\ntargets:")
    print(
        f"  bulk load >= {t['load_ratio']['target']:g}x naive: {t['load_ratio']['value']:.1f}x -> "
        f"{'MET' if t['load_ratio']['met'] else 'NOT MET'}"
    )
    print(
        f"  <= {t['bytes_per_node']['target']:g} B/node resident (max of nbytes and RSS growth): "
        f"{t['bytes_per_node']['value']:.1f} -> {'MET' if t['bytes_per_node']['met'] else 'NOT MET'}"
    )
    print(
        f"     (the arrays alone: {b['nbytes']:.1f} B/node -> "
        f"{'MET' if b['nbytes'] <= t['bytes_per_node']['target'] else 'NOT MET'})"
    )


if __name__ == "__main__":
    sys.exit(main())
