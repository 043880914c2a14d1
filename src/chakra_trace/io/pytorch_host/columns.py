"""From the reader's number store to the columns of a `HostTrace`.

The reader keeps, per node, only its template and its numbers. Each template's role says which
number is the id, the parent, an attribute, a tensor field or a shape dim, so every column is
gathered here with per-template index tables, vectorized over all nodes at once; only sparse
attributes holding lists or objects are taken from rebuilt nodes. Kept apart from the reader
so that the scanning (bytes in) and the gathering (columns out) can be read on their own.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...errors import TraceFormatError
from ...schema.wire import ranges
from .model import FLAT, NESTED, PROCESS_GROUP_INIT, HostTensors, HostTrace, SparseColumn
from .roles import NCOL, Roles
from .templates import Tables


def assemble(
    path: str,
    metadata: dict[str, Any],
    tb: Tables,
    tm_parts: list[np.ndarray],
    int_parts: list[np.ndarray],
    objs: list[bytes],
    salvaged: bool,
) -> HostTrace:
    """The `HostTrace` of the nodes read: their templates (`tm_parts`) and integers (`int_parts`),
    in blocks of nodes, and their numbers kept as text (`objs`). It empties the two part lists
    (their concatenation replaces them)."""
    tm = np.concatenate(tm_parts) if tm_parts else np.zeros(0, np.int32)
    ints = np.concatenate(int_parts) if int_parts else np.zeros(0, np.int64)
    tm_parts.clear()
    int_parts.clear()
    n = tm.size
    ro = tb.roles
    int_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(tb.i_cnt.v[tm], out=int_ptr[1:])
    obj_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(tb.o_cnt.v[tm], out=obj_ptr[1:])
    nr = ro.n_roles
    cols = ro.cols.v.reshape(nr, NCOL) if nr else np.zeros((0, NCOL), np.int32)
    rl = tb.role.v[tm] if n else np.zeros(0, np.int32)
    rows_all = np.arange(n, dtype=np.int64)
    col_vals = []
    present = np.zeros(n, np.uint8)
    for c in range(NCOL):
        sl = cols[rl, c]
        has = sl >= 0
        out = np.full(n, -1 if c == 1 else 0, np.int64)
        r = rows_all[has]
        out[r] = ints[int_ptr[r] + sl[r]]
        col_vals.append(out)
        if c >= 2:
            present |= has.astype(np.uint8) << np.uint8(c - 2)
    # tensors
    dcnt = ro.d_cnt.v[rl].astype(np.int64)
    t_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(dcnt, out=t_indptr[1:])
    d = ranges(ro.d_ptr.v[rl], dcnt)
    t_row = np.repeat(rows_all, dcnt)
    tbase = int_ptr[t_row]
    f = [ints[tbase + ro.d_f[j].v[d]] for j in range(5)]
    sh_indptr, sh_dims, has_sh = _dims(ints, tbase, ro.d_sh_ptr.v[d], ro.d_sh_cnt.v[d], ro.sh_slots.v)
    st_indptr, st_dims, has_st = _dims(ints, tbase, ro.d_st_ptr.v[d], ro.d_st_cnt.v[d], ro.st_slots.v)
    tensors = HostTensors(
        indptr=t_indptr,
        row=t_row,
        output=ro.d_io.v[d].astype(bool),
        arg=ro.d_arg.v[d].copy(),
        elem=ro.d_elem.v[d].copy(),
        tensor_id=f[0],
        storage_id=f[1],
        offset=f[2],
        numel=f[3],
        itemsize=f[4],
        device=ro.d_dev.v[d].copy(),
        devices=ro.devices,
        type=ro.d_type.v[d].copy(),
        types=ro.ttypes,
        shape_indptr=sh_indptr,
        shape_dims=sh_dims,
        has_shape=has_sh,
        stride_indptr=st_indptr,
        stride_dims=st_dims,
        has_stride=has_st,
    )
    layouts = ro.r_layout.v[rl]
    lay = set(np.unique(layouts).tolist())
    layout = "mixed" if len(lay) > 1 else (FLAT if lay == {1} else NESTED)
    if ints.size and ints.min() >= -(1 << 31) and ints.max() < (1 << 31):
        ints = ints.astype(np.int32)  # the number store, kept for node(i): half the memory
    schema = metadata.get("schema")
    host = HostTrace(
        path=path,
        schema=schema if isinstance(schema, str) else None,
        layout=layout,
        metadata=metadata,
        ids=col_vals[0],
        name=ro.r_name.v[rl],
        names=ro.names,
        parent=col_vals[1],
        rf_id=col_vals[2],
        fw_parent=col_vals[3],
        seq_id=col_vals[4],
        scope=col_vals[5],
        tid=col_vals[6],
        fw_tid=col_vals[7],
        present=present,
        op_schema=ro.r_ops.v[rl],
        strings=ro.strings,
        tensors=tensors,
        salvaged=salvaged,
        layouts=layouts,
        _tm=tm,
        _ints=ints,
        _int_ptr=int_ptr,
        _objs=objs,
        _obj_ptr=obj_ptr,
        _tables=tb,
    )
    host._attrs = {nm: _sparse(ro, host, rl, per_r, nm, True) for nm, per_r in ro.attrs.items()}
    host._keys = {nm: _sparse(ro, host, rl, per_r, nm, False) for nm, per_r in ro.xkeys.items()}
    host.process_groups = _process_groups(path, host)
    return host


def _dims(ints, tbase, ptr, cnt, slots):
    """Shapes (or strides) of the tensors as CSR: (indptr, dims, has), from their dim slots."""
    has = cnt >= 0
    c = np.where(has, cnt, 0).astype(np.int64)
    indptr = np.zeros(c.size + 1, np.int64)
    np.cumsum(c, out=indptr[1:])
    sidx = ranges(ptr, c)
    dims = ints[np.repeat(tbase, c) + slots[sidx]].astype(np.int64) if sidx.size else np.zeros(0, np.int64)
    return indptr, dims, has


def _sparse(ro: Roles, host: HostTrace, rl: np.ndarray, per_r: dict, name: str, is_attr: bool) -> SparseColumn:
    """One sparse attribute (or unknown key) over the rows whose role has it (`per_r`: role -> spec)."""
    nr = ro.n_roles
    kinds = {spec[0] for spec in per_r.values()}
    rids = np.fromiter(per_r.keys(), np.int64, len(per_r))
    sel = np.zeros(nr, bool)
    sel[rids] = True
    rows = np.flatnonzero(sel[rl])
    ty = ro.attr_types.get(name) if is_attr else None
    rt = rl[rows]
    if kinds == {"i"}:
        slot = np.full(nr, -1, np.int64)
        slot[rids] = [spec[1] for spec in per_r.values()]
        vals = host._ints[host._int_ptr[rows] + slot[rt]].astype(np.int64)
        return SparseColumn(rows, "int", vals, ty)
    if kinds == {"s"}:
        code = np.full(nr, -1, np.int32)
        code[rids] = [spec[1] for spec in per_r.values()]
        return SparseColumn(rows, "str", code[rt], ty)
    vals = np.empty(rows.size, object)
    for j, (r, t) in enumerate(zip(rows.tolist(), rt.tolist())):
        kind, payload = per_r[t]
        if kind == "i":
            v = int(host._ints[host._int_ptr[r] + payload])
        elif kind == "s":
            v = ro.strings[payload]
        elif kind == "c":
            v = payload
        elif kind == "o":
            v = json.loads(host._objs[host._obj_ptr[r] + payload])
        else:  # a list or object: take it from the rebuilt node
            d = host.node(r)
            if is_attr and host.layouts[r] == 0:
                v = None
                for a in d.get("attrs", []):
                    if a.get("name") == name:
                        v = a.get("value")
            else:
                v = d.get(name)
        vals[j] = v
    return SparseColumn(rows, "obj", vals, ty)


def _process_groups(path: str, host: HostTrace) -> list[dict]:
    """The process groups described by the ``## process_group:init ##`` nodes."""
    groups: list[dict] = []
    for r in host.pg_init_rows.tolist():
        values = host.io(r)[0]["values"]
        if not values or not isinstance(values[0], str):
            raise TraceFormatError(
                path,
                f"node #{r}: '{PROCESS_GROUP_INIT}' should carry a JSON string describing the process groups",
                node_id=int(host.ids[r]),
            )
        try:
            desc = json.loads(values[0])
        except ValueError as e:
            raise TraceFormatError(
                path,
                f"node #{r}: the process-group description is not valid JSON ({e})",
                node_id=int(host.ids[r]),
            ) from None
        if isinstance(desc, dict):
            desc = [desc]
        if not isinstance(desc, list) or not all(isinstance(g, dict) for g in desc):
            raise TraceFormatError(
                path,
                f"node #{r}: the process-group description should be a list of objects",
                node_id=int(host.ids[r]),
            )
        groups.extend(desc)
    return groups
