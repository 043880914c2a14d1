"""What each part of a host-trace node means, in either layout: its roles.

A node is valid JSON before it gets here; this is where it is checked to be an ET node and where
the schema layouts meet: schema 1.0.1 writes ``parent``, ``input_shapes`` / ``input_types`` and
attributes as plain keys (flat), 1.0.2 and later write ``ctrl_deps``, ``inputs`` / ``outputs``
objects and an ``attrs`` list (nested). The layout is detected from each node's structure, never
from the version string. A *role* says which number of a node is its id, its parent, an
attribute, a tensor field or a shape dim, and holds its strings; ``templates.py`` says where
those numbers sit in the text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .grow import Grow
from .model import INT_COLUMNS

_COLS = ("id", "parent") + INT_COLUMNS  # slot-table column order
NCOL = len(_COLS)
_COL_INDEX = {c: i for i, c in enumerate(_COLS)}
_ATTR_COL = {c: _COL_INDEX[c] for c in INT_COLUMNS}

_NESTED_KEYS = frozenset(("id", "name", "ctrl_deps", "inputs", "outputs", "attrs"))
_FLAT_KEYS = frozenset(
    (
        "id",
        "name",
        "parent",
        "inputs",
        "input_shapes",
        "input_types",
        "input_strides",
        "outputs",
        "output_shapes",
        "output_types",
        "output_strides",
    )
)


class Const(float):
    """NaN / Infinity written as JSON literals (no digits in the text)."""


class NodeError(Exception):
    """A node that is valid JSON but not a valid ET node (raised as TraceFormatError by the reader)."""

    def __init__(self, message: str, node_id=None):
        super().__init__(message)
        self.message, self.node_id = message, node_id


def _tname(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


_ELEM_CACHE: dict[str, list[str] | None] = {}


def _elem_types(t: str) -> list[str] | None:
    """Element types of a container type string: ``GenericList[Int,Tensor(float)]`` -> [Int, Tensor(float)]."""
    r = _ELEM_CACHE.get(t)
    if r is not None or t in _ELEM_CACHE:
        return r
    out = None
    b = t.find("[")
    if b > 0 and t.endswith("]"):
        out = []
        depth = 0
        cur = b + 1
        inner_end = len(t) - 1
        for k in range(b + 1, inner_end):
            c = t[k]
            if c in "[(":
                depth += 1
            elif c in "])":
                depth -= 1
            elif c == "," and depth == 0:
                out.append(t[cur:k].strip())
                cur = k + 1
        if cur < inner_end:
            out.append(t[cur:inner_end].strip())
    if len(_ELEM_CACHE) > 100_000:
        _ELEM_CACHE.clear()
    _ELEM_CACHE[t] = out
    return out


@dataclass(eq=False)
class _TensorDesc:
    """Where one tensor argument of a node structure sits: its place and the slots of its numbers."""

    io: int  # 0 input, 1 output
    arg: int
    elem: int
    fields: list  # slots of tensor_id, storage_id, offset, numel, itemsize
    device: str
    type: str
    shape: tuple | None  # slots of the dims (None: no usable shape)
    stride: tuple | None


@dataclass(eq=False)
class _Role:
    """What one node structure means: its layout, dense-column slots, codes, tensors and sparse columns."""

    nested: bool
    cols: list[int]  # NCOL slots: id, parent, rf_id, ... (-1 absent)
    name_code: int
    ops_code: int  # op_schema string code, -1 absent
    descs: list[_TensorDesc]
    attrs: list[tuple[str, tuple, str | None]]  # sparse attributes: (name, spec, declared type)
    keys: list[tuple[str, tuple]]  # unknown top-level keys: (name, spec)


class Roles:
    """The roles: what the numbers of a node structure mean, and the strings it holds.

    Per role: the slots of the dense columns (id, parent, rf_id, ...), the codes of its name
    and op_schema, its layout, its tensor descriptors, and the sparse attributes and unknown
    keys it has. Templates that differ only in digit counts share one role.
    """

    def __init__(self):
        g = Grow
        self.cols = g(np.int32)  # NCOL per role: slot of id, parent, rf_id, ... (-1 absent)
        self.r_name, self.r_ops, self.r_layout = g(np.int32), g(np.int32), g(np.int8)
        self.d_ptr, self.d_cnt = g(np.int64), g(np.int32)
        # tensor descriptors (per role)
        self.d_io, self.d_arg, self.d_elem = g(np.int8), g(np.int32), g(np.int32)
        self.d_f = [g(np.int32) for _ in range(5)]
        self.d_dev, self.d_type = g(np.int16), g(np.int32)
        self.d_sh_ptr, self.d_sh_cnt, self.d_st_ptr, self.d_st_cnt = g(np.int64), g(np.int32), g(np.int64), g(np.int32)
        self.sh_slots, self.st_slots = g(np.int32), g(np.int32)
        # string tables
        self.names: list[str] = []
        self.name_codes: dict[str, int] = {}
        self.strings: list[str] = []
        self.string_codes: dict[str, int] = {}
        self.devices: list[str] = []
        self.device_codes: dict[str, int] = {}
        self.ttypes: list[str] = []
        self.ttype_codes: dict[str, int] = {}
        # sparse attributes / unknown keys: name -> {role: (kind, payload)}; declared types
        self.attrs: dict[str, dict[int, tuple]] = {}
        self.attr_types: dict[str, str] = {}
        self.xkeys: dict[str, dict[int, tuple]] = {}
        self.n_roles = 0

    def nbytes(self) -> int:
        total = sum(v.nbytes() for v in vars(self).values() if isinstance(v, Grow))
        return total + sum(x.nbytes() for x in self.d_f)

    @staticmethod
    def _code(table: list, codes: dict, s: str) -> int:
        c = codes.get(s)
        if c is None:
            c = codes[s] = len(table)
            table.append(s)
        return c

    def string(self, s: str) -> int:
        return self._code(self.strings, self.string_codes, s)

    def add(self, obj: dict, skel: dict) -> int:
        """A new role for node object `obj` (`skel`: the slot of each of its numbers); its id."""
        r = self._analyze(obj, skel)
        descs = r.descs
        role = self.n_roles
        self.n_roles += 1
        self.d_ptr.push(len(self.d_io))
        self.d_cnt.push(len(descs))
        if descs:
            dev_code = self.device_codes
            type_code = self.ttype_codes
            for desc in descs:
                dev, ttype, shape, stride = desc.device, desc.type, desc.shape, desc.stride
                self.d_io.push(desc.io)
                self.d_arg.push(desc.arg)
                self.d_elem.push(desc.elem)
                for j in range(5):
                    self.d_f[j].push(desc.fields[j])
                c = dev_code.get(dev)
                self.d_dev.push(c if c is not None else self._code(self.devices, dev_code, dev))
                c = type_code.get(ttype)
                self.d_type.push(c if c is not None else self._code(self.ttypes, type_code, ttype))
                self.d_sh_ptr.push(len(self.sh_slots))
                self.d_sh_cnt.push(-1 if shape is None else len(shape))
                if shape:
                    self.sh_slots.add(shape)
                self.d_st_ptr.push(len(self.st_slots))
                self.d_st_cnt.push(-1 if stride is None else len(stride))
                if stride:
                    self.st_slots.add(stride)
        self.cols.add(r.cols)
        self.r_name.push(r.name_code)
        self.r_ops.push(r.ops_code)
        self.r_layout.push(0 if r.nested else 1)
        for nm, spec, ty in r.attrs:
            self.attrs.setdefault(nm, {})[role] = spec
            if ty is not None and nm not in self.attr_types:
                self.attr_types[nm] = ty
        for nm, spec in r.keys:
            self.xkeys.setdefault(nm, {})[role] = spec
        return role

    def _spec(self, v, sv) -> tuple:
        t = type(v)
        if t is int:
            return ("i", sv) if sv >= 0 else ("o", -sv - 1)
        if t is str:
            return ("s", self.string(v))
        if t is float:
            return ("o", -sv - 1)
        if t is Const:
            return ("c", float(v))
        if v is None or t is bool:
            return ("c", v)
        return ("t", None)

    def _analyze(self, o: dict, sk: dict) -> _Role:
        """Check node o (skeleton sk: the slot of each number) and say what each of its parts means."""
        node_id = safe_id(o)
        inputs = o.get("inputs")
        if isinstance(inputs, dict) or "attrs" in o or "ctrl_deps" in o:
            nested = True
        elif isinstance(inputs, list) or "input_shapes" in o or "parent" in o:
            nested = False
        else:
            nested = True
        cols = [-1] * NCOL
        # id
        if "id" not in o:
            raise NodeError("node has no 'id'")
        v = o["id"]
        if type(v) is not int:
            raise NodeError(f"expected an integer 'id', got {_tname(v)}", None)
        if sk["id"] < 0:
            raise NodeError("'id' does not fit in 64 bits", None)
        cols[0] = sk["id"]
        # name
        nm = o.get("name", "")
        if type(nm) is not str:
            raise NodeError(f"expected a string 'name', got {_tname(nm)}", node_id)
        name_code = self._code(self.names, self.name_codes, nm)
        # parent
        pk = "ctrl_deps" if (nested and "ctrl_deps" in o) or "parent" not in o else "parent"
        v = o.get(pk)
        if v is not None:
            if type(v) is not int:
                raise NodeError(f"expected an integer '{pk}' (the parent node id), got {_tname(v)}", node_id)
            if sk[pk] < 0:
                raise NodeError(f"'{pk}' does not fit in 64 bits", node_id)
            cols[1] = sk[pk]
        ops_code = -1
        sparse_a: list = []
        sparse_k: list = []

        def attr(name, v, sv, ty):
            nonlocal ops_code
            c = _ATTR_COL.get(name)
            if c is not None:
                if type(v) is int:
                    if sv < 0:
                        raise NodeError(f"attribute '{name}' does not fit in 64 bits", node_id)
                    cols[c] = sv
                elif v is not None:
                    raise NodeError(f"expected an integer attribute '{name}', got {_tname(v)}", node_id)
            elif name == "op_schema":
                if type(v) is str:
                    ops_code = self.string(v)
                elif v is not None:
                    raise NodeError(f"expected a string attribute 'op_schema', got {_tname(v)}", node_id)
            else:
                sparse_a.append((name, self._spec(v, sv), ty))

        if nested:
            attrs = o.get("attrs", [])
            if type(attrs) is not list:
                raise NodeError(f"expected 'attrs' to be a list, got {_tname(attrs)}", node_id)
            sattrs = sk.get("attrs") or []
            for j, a in enumerate(attrs):
                if type(a) is not dict or type(a.get("name")) is not str:
                    raise NodeError(f"attrs[{j}]: expected an object with a string 'name'", node_id)
                ty = a.get("type")
                attr(a["name"], a.get("value"), sattrs[j].get("value"), ty if type(ty) is str else None)
            for k, v in o.items():
                if k not in _NESTED_KEYS:
                    sparse_k.append((k, self._spec(v, sk[k])))
        else:
            for k, v in o.items():
                if k not in _FLAT_KEYS:
                    attr(k, v, sk[k], None)
        descs: list[_TensorDesc] = []
        for io in (0, 1):
            key = "inputs" if io == 0 else "outputs"
            pre = "input" if io == 0 else "output"
            if nested:
                d = o.get(key)
                if d is None:
                    continue
                if type(d) is not dict:
                    raise NodeError(
                        f"expected '{key}' to be an object with values/shapes/types, got {_tname(d)}", node_id
                    )
                sd = sk[key]
                where = key + "."
                vals, types, shapes, strides = (
                    d.get("values", []),
                    d.get("types", []),
                    d.get("shapes"),
                    d.get("strides"),
                )
                svals, sshapes, sstrides = sd.get("values"), sd.get("shapes"), sd.get("strides")
                names = ("values", "types", "shapes", "strides")
            else:
                if key not in o:
                    continue
                where = ""
                vals, types = o.get(key), o.get(pre + "_types", [])
                shapes, strides = o.get(pre + "_shapes"), o.get(pre + "_strides")
                svals, sshapes, sstrides = sk.get(key), sk.get(pre + "_shapes"), sk.get(pre + "_strides")
                names = (key, pre + "_types", pre + "_shapes", pre + "_strides")
            for nm_, lst in zip(names, (vals, types, shapes, strides)):
                if lst is not None and type(lst) is not list:
                    raise NodeError(f"expected '{where}{nm_}' to be a list, got {_tname(lst)}", node_id)
            n = len(types)
            for nm_, lst in zip((names[0], names[2], names[3]), (vals, shapes, strides)):
                if lst is not None and len(lst) != n:
                    raise NodeError(f"'{where}{nm_}' has {len(lst)} entries but '{where}{names[1]}' has {n}", node_id)
            for arg, t in enumerate(types):
                if type(t) is not str:
                    raise NodeError(f"'{where}{names[1]}[{arg}]': expected a type string, got {_tname(t)}", node_id)
                if "Tensor" in t:
                    self._tensors(
                        t,
                        vals[arg],
                        svals[arg],
                        shapes[arg] if shapes is not None else None,
                        sshapes[arg] if shapes is not None else None,
                        strides[arg] if strides is not None else None,
                        sstrides[arg] if strides is not None else None,
                        io,
                        arg,
                        [0],
                        descs,
                    )
        return _Role(nested, cols, name_code, ops_code, descs, sparse_a, sparse_k)

    @staticmethod
    def _dims(v, sv):
        """Slots of a list of integers (a shape or strides), or None."""
        if type(v) is not list:
            return None
        for x, s in zip(v, sv):
            if type(x) is not int or s < 0:
                return None
        return tuple(sv)

    def _tensors(self, t, v, sv, sh, ssh, st, sst, io, arg, counter, descs) -> None:
        if t.startswith("Tensor"):
            if type(v) is list and 5 <= len(v) <= 6:
                for k in range(5):
                    if type(v[k]) is not int or sv[k] < 0:
                        return
                if len(v) == 6:
                    if type(v[5]) is not str:
                        return
                    dev = v[5]
                else:
                    dev = ""
                descs.append(_TensorDesc(io, arg, counter[0], sv[:5], dev, t, self._dims(sh, ssh), self._dims(st, sst)))
                counter[0] += 1
            return
        if type(v) is not list:
            return
        ets = _elem_types(t)
        if not ets:
            return
        last = len(ets) - 1
        shl = type(sh) is list
        stl = type(st) is list
        for j, x in enumerate(v):
            tj = ets[j] if j <= last else ets[last]  # lists over 4096 entries are truncated
            if "Tensor" not in tj:
                continue
            a = shl and j < len(sh)
            b = stl and j < len(st)
            self._tensors(
                tj,
                x,
                sv[j],
                sh[j] if a else None,
                ssh[j] if a else None,
                st[j] if b else None,
                sst[j] if b else None,
                io,
                arg,
                counter,
                descs,
            )


def safe_id(o) -> int | None:
    """The integer id of a decoded node, if it has one (for error messages)."""
    v = o.get("id") if isinstance(o, dict) else None
    return v if type(v) is int else None
