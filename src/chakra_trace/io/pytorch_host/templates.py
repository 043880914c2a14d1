"""Node templates: where the numbers sit in the text of a node, so that it is read as numbers only.

A PyTorch trace repeats a handful of node shapes, so a node is stored as a *template* plus its
numbers. The template key is the node's text with every digit replaced by ``0``: nodes of one
op with the same digit counts share it. The first node with a new key is decoded with ``json``
and compiled (its role, ``roles.py``, says what each number means); a key that differs from a
known one only in digit counts is derived from it without decoding. Digits inside strings
(``cuda:0``, op schemas) are recorded so the reader can check them, and a node whose strings
differ gets a variant template. The reader (``reader.py``) fills these tables and reads the
numbers of every later node with numpy; ``columns.py`` reads them back.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

import numpy as np

from ...schema.wire import ranges
from .grow import Grow
from .roles import Const, NodeError, Roles, safe_id

_STR_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"')
_RUN_B = re.compile(rb"[0-9]+")
_RUN_S = re.compile(r"[0-9]+")
_MAX_INT_DIGITS = 18  # longer integers are kept as text (they may not fit int64)
_DECODER = json.JSONDecoder(parse_constant=Const)


@dataclass(eq=False)
class _BaseTemplate:
    """A compiled template as a base for templates of the same text with other digit counts."""

    nruns: int  # runs of digits in the text
    doff: bytes  # where each run starts in the text without digits (int64 bytes)
    i_run: np.ndarray  # the runs that are integer slots
    s_run: np.ndarray  # the runs inside strings
    s_lens: bytes  # their lengths (int64 bytes): a string with other digit counts changed
    o_first: np.ndarray  # first and last run of each number kept as text, and its sign
    o_last: np.ndarray
    o_neg: np.ndarray
    role: int
    i_neg: list[bool]  # sign of each integer slot
    v_byte: list[int]  # the digits inside strings


class Tables:
    """All templates: text keys and number-slot layouts (per template), and `roles` (shared by templates).

    A template says where the numbers of a node text are (positions depend on digit counts);
    its *role* says what they mean (which slot is the id, the parent, a tensor field...) and
    holds the node's strings. Templates that differ only in digit counts share one role.
    """

    def __init__(self):
        g = Grow
        self.keys: list[bytes] = []
        self.tmap: dict[bytes, int] = {}  # masked text -> template
        self.vmap: dict[tuple[int, bytes], int] = {}  # (template, digits inside strings) -> variant
        self.dmap: dict[bytes, int] = {}  # text without digits -> base template (for derivation)
        self.base_info: dict[int, _BaseTemplate] = {}
        # per template
        self.role = g(np.int32)  # its role in `roles`
        self.i_ptr, self.i_cnt = g(np.int64), g(np.int32)
        self.v_ptr, self.v_cnt = g(np.int64), g(np.int32)
        self.o_ptr, self.o_cnt = g(np.int64), g(np.int32)
        # integer slots (read vectorized), digits inside strings (checked), numbers kept as text
        self.i_start, self.i_len, self.i_neg = g(np.int32), g(np.int8), g(np.bool_)
        self.v_pos, self.v_byte = g(np.int32), g(np.uint8)
        self.o_start, self.o_end = g(np.int32), g(np.int32)
        self.roles = Roles()
        self.n_derived = 0
        self._runs_cache: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def nbytes(self) -> int:

        total = sum(sys.getsizeof(k) for k in self.keys)
        for v in vars(self).values():
            if isinstance(v, Grow):
                total += v.nbytes()
        total += self.roles.nbytes()
        for info in self.base_info.values():
            total += sum(x.nbytes for x in vars(info).values() if isinstance(x, np.ndarray))
        return total

    @staticmethod
    def _runs(mkey: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of every run of digits (zeros in the masked text)."""
        a = np.frombuffer(mkey, np.uint8) == 48
        if not a.size:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        d = np.flatnonzero(a[1:] != a[:-1]) + 1
        if a[0]:
            d = np.concatenate(([0], d))
        if a[-1]:
            d = np.concatenate((d, [a.size]))
        return d[0::2], d[1::2]

    # -------------------------------------------------------------- lookup
    def lookup_miss(self, piece: bytes, mkey: bytes) -> int | None:
        """Template for a node text whose masked key is not known yet (derive or compile)."""
        dkey = mkey.translate(None, b"0")
        b = self.dmap.get(dkey)
        if b is not None:
            t = self._derive(b, piece, mkey)
            if t is not None:
                self.tmap[mkey] = t
                return t
        t = self.compile(piece, mkey)
        if t is not None:
            self.dmap.setdefault(dkey, t)
        return t

    def _derive(self, b: int, piece: bytes, mkey: bytes) -> int | None:
        """A template for mkey from base template b: same text but for the number of digits in numbers."""
        base = self.base_info[b]
        i_run, s_run, o_first, i_neg, v_byte = base.i_run, base.s_run, base.o_first, base.i_neg, base.v_byte
        starts, ends = self._runs(mkey)
        if starts.size != base.nruns:
            return None
        lens = ends - starts
        if (starts - (np.cumsum(lens) - lens)).tobytes() != base.doff:
            return None  # the digits sit elsewhere in the text
        if s_run.size and lens[s_run].tobytes() != base.s_lens:
            return None  # a string changed: compile it
        il = lens[i_run]
        if il.size and il.max() > _MAX_INT_DIGITS:
            return None
        if o_first.size and np.any((lens[o_first] > 1) & (np.frombuffer(piece, np.uint8)[starts[o_first]] == 48)):
            return None  # leading zero: let the compiler reject it
        t = len(self.keys)
        self.keys.append(mkey)
        self.role.push(base.role)
        self.i_ptr.push(len(self.i_start))
        self.i_cnt.push(len(i_neg))
        self.i_start.add(starts[i_run].tolist())
        self.i_len.add(il.tolist())
        self.i_neg.add(i_neg)
        self.v_ptr.push(len(self.v_pos))
        self.v_cnt.push(len(v_byte))
        if v_byte:
            self.v_pos.add(ranges(starts[s_run], lens[s_run]).tolist())
            self.v_byte.add(v_byte)
        self.o_ptr.push(len(self.o_start))
        self.o_cnt.push(int(o_first.size))
        if o_first.size:
            self.o_start.add((starts[o_first] - base.o_neg).tolist())
            self.o_end.add(ends[base.o_last].tolist())
        self.n_derived += 1
        return t

    # -------------------------------------------------------------- compile
    def compile(self, piece: bytes, mkey: bytes, register: bool = True) -> int | None:
        """Compile a node text (without its outer braces) into a new template and role.

        Returns the template id, or None if ``{piece}`` is not exactly one JSON object (the
        caller then rescans exactly). Raises NodeError for valid JSON that is no ET node, and
        UnicodeDecodeError for bad UTF-8.
        """
        text = piece.decode("utf-8")
        try:
            obj = _DECODER.decode("{" + text + "}")
        except ValueError:
            return None
        if type(obj) is not dict:
            return None
        st_arr, en_arr = self._runs(mkey)
        starts, ends = st_arr.tolist(), en_arr.tolist()
        if b"\\" in piece:  # escapes: count the runs in each string as written
            str_runs = [len(_RUN_B.findall(m.group())) for m in _STR_TOKEN.finditer(piece)]
        else:
            str_runs = None
        islots: list[tuple[int, int, bool]] = []
        i_run: list[int] = []
        oslots: list[tuple[int, int]] = []
        o_runs: list[tuple[int, int, int]] = []
        vruns: list[int] = []
        ri = 0
        si = 0
        cache = self._runs_cache
        nmk = len(mkey)

        def walk(v):
            nonlocal ri, si
            t = type(v)
            if t is int:
                s = starts[ri]
                e = ends[ri]
                neg = s > 0 and piece[s - 1] == 45
                if e - s > _MAX_INT_DIGITS:
                    oslots.append((s - neg, e))
                    o_runs.append((ri, ri, neg))
                    ri += 1
                    return -len(oslots)
                islots.append((s, e - s, neg))
                i_run.append(ri)
                ri += 1
                return len(islots) - 1
            if t is str:
                n: int | None
                if str_runs is not None:
                    n = str_runs[si]
                    si += 1
                else:
                    n = cache.get(v)
                    if n is None:
                        n = len(_RUN_S.findall(v))
                        if len(cache) > 200_000:
                            cache.clear()
                        cache[v] = n
                if n:
                    vruns.extend(range(ri, ri + n))
                    ri += n
                return None
            if t is list:
                out = []
                for x in v:
                    if type(x) is int and ends[ri] - starts[ri] <= _MAX_INT_DIGITS:
                        s = starts[ri]
                        islots.append((s, ends[ri] - s, s > 0 and piece[s - 1] == 45))
                        i_run.append(ri)
                        ri += 1
                        out.append(len(islots) - 1)
                    else:
                        out.append(walk(x))
                return out
            if t is dict:
                fields = {}
                for k, x in v.items():
                    walk(k)
                    fields[k] = walk(x)
                return fields
            if t is float:
                s = starts[ri]
                e = ends[ri]
                r0 = ri
                ri += 1
                while e < nmk and mkey[e] in (46, 101, 69):  # . e E: the number goes on
                    e = ends[ri]
                    ri += 1
                neg = s > 0 and piece[s - 1] == 45
                oslots.append((s - neg, e))
                o_runs.append((r0, ri - 1, neg))
                return -len(oslots)
            return None  # true / false / null / NaN / Infinity: no digits

        try:
            skel = walk(obj)
        except IndexError:
            skel = None
        if skel is None or ri != len(starts) or (str_runs is not None and si != len(str_runs)):
            raise NodeError("node object has duplicate keys (cannot keep it losslessly)", safe_id(obj))
        # the node is valid: a new role, then the template
        role = self.roles.add(obj, skel)
        tid = len(self.keys)
        self.keys.append(mkey)
        self.role.push(role)
        self.i_ptr.push(len(self.i_start))
        self.i_cnt.push(len(islots))
        if islots:
            s_, l_, n_ = zip(*islots)
            self.i_start.add(s_)
            self.i_len.add(l_)
            self.i_neg.add(n_)
        vpos = [p for r in vruns for p in range(starts[r], ends[r])]
        self.v_ptr.push(len(self.v_pos))
        self.v_cnt.push(len(vpos))
        if vpos:
            self.v_pos.add(vpos)
            self.v_byte.add([piece[p] for p in vpos])
        self.o_ptr.push(len(self.o_start))
        self.o_cnt.push(len(oslots))
        if oslots:
            s_, e_ = zip(*oslots)
            self.o_start.add(s_)
            self.o_end.add(e_)
        if register:
            self.tmap.setdefault(mkey, tid)
            lens = en_arr - st_arr
            o = np.array(o_runs, np.int64).reshape(-1, 3)
            s_run = np.array(vruns, np.int64)
            self.base_info[tid] = _BaseTemplate(
                nruns=len(starts),
                doff=(st_arr - (np.cumsum(lens) - lens)).tobytes(),
                i_run=np.array(i_run, np.int64),
                s_run=s_run,
                s_lens=lens[s_run].tobytes(),
                o_first=o[:, 0].copy(),
                o_last=o[:, 1].copy(),
                o_neg=o[:, 2].copy(),
                role=role,
                i_neg=[x[2] for x in islots],
                v_byte=[piece[p] for p in vpos],
            )
        return tid
