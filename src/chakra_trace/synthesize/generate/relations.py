"""Dependencies as relations between grammar coordinates, so they survive other repeat counts.

An op is a slot at an instance (`grammar`): its index in each enclosing repeat. A dependency of
op v on op u is stored not as a distance in the sequence (which changes when layers are added)
but as how u's index in each of *its* repeats follows from v's:

- ``DELTA b``: a repeat that holds both: u's index is v's plus b (0: the same layer, -1: the
  layer before);
- ``START b`` / ``END b``: the b-th instance from the start / the end (the loss reads the last
  layer: END 0);
- ``LINK i b``: v's index in its i-th repeat, rescaled to u's count, plus b (a collective after
  every second layer's gradient; forward layer k -> its recomputation k);
- ``MIRROR i b``: the same counted from the end (backward layer k reads forward layer L-1-k);
- ``EACH``: every instance (an op that waits for all layers).

Each relation also lists the instances of v it applies to (the first layer depends on the
embedding, the others on the layer before), as template instances: a generated instance applies
where the template instance it stands for (`map_index`) did. Fitting picks, for each
(v slot, u slot) pair, the relation that explains the most edges, then the next for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DELTA, START, END, LINK, MIRROR, EACH = range(6)
LEVEL_NAMES = ("delta", "start", "end", "link", "mirror", "each")
MAX_RELATIONS = 32  # per (v slot, u slot, kind): the rest become exact START relations, one per edge


def decode(inst: np.ndarray, counts: list[int]) -> np.ndarray:
    """Mixed-radix instances -> (n, levels) indices, outermost level first."""
    out = np.zeros((inst.size, len(counts)), np.int64)
    rest = inst.astype(np.int64)
    for j in range(len(counts) - 1, -1, -1):
        c = max(int(counts[j]), 1)
        out[:, j] = rest % c
        rest = rest // c
    return out


def encode(idx: np.ndarray, counts: list[int]) -> np.ndarray:
    flat = np.zeros(idx.shape[0], np.int64)
    for j, c in enumerate(counts):
        flat = flat * int(c) + idx[:, j]
    return flat


def map_index(j: np.ndarray, count: int, template_count: int, period: int = 1) -> np.ndarray:
    """The template instance that instance j of a repeat of `count` instances stands for. The
    first and the last stand for the template's first and last (the first layer reads the
    embedding, the last feeds the loss); the others for the template's inner instances at the
    same relative depth (with a template of two: its last, the one that follows another). With
    a `period` (2 collectives per layer), groups of that many map as wholes, each member keeping
    its place in the group."""
    if count == template_count:
        return j
    a = period if period > 1 and count % period == 0 and template_count % period == 0 else 1
    q, r = j // a, j % a
    qs, qt = count // a, template_count // a
    if qt == 1 or qs == 1:
        tq = np.zeros_like(q)
    else:
        inner = np.ones_like(q) if qt == 2 else 1 + (q - 1) * (qt - 2) // max(qs - 2, 1)
        tq = np.where(q == 0, 0, np.where(q == qs - 1, qt - 1, inner))
    return tq * a + r


@dataclass
class Relations:
    """Fitted relations of one program, CSR over their levels and applicable instances.

    Per relation: ``v``, ``u`` (slots), ``kind`` (0 data, 1 control), levels
    ``lvl_ptr[r]:lvl_ptr[r+1]`` (one per repeat enclosing u, outermost first) of ``lvl_type``,
    ``lvl_ref`` (the v level of LINK/MIRROR) and ``lvl_b``; ``every`` (applies to every instance
    of v) or the template instances of v it applies to, ``app_ptr``/``app``."""

    v: np.ndarray
    u: np.ndarray
    kind: np.ndarray
    lvl_ptr: np.ndarray
    lvl_type: np.ndarray
    lvl_ref: np.ndarray
    lvl_b: np.ndarray
    every: np.ndarray
    app_ptr: np.ndarray
    app: np.ndarray

    def __len__(self) -> int:
        return int(self.v.size)


class _Builder:
    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, list[tuple[int, int, int]], bool, np.ndarray]] = []

    def add(self, v: int, u: int, kind: int, levels: list[tuple[int, int, int]], every: bool, app: np.ndarray) -> None:
        self.rows.append((v, u, kind, levels, every, app))

    def build(self) -> Relations:
        rows = self.rows
        lvl_ptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(r[3]) for r in rows], out=lvl_ptr[1:])
        app_ptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([0 if r[4] else r[5].size for r in rows], out=app_ptr[1:])
        levels = [lv for r in rows for lv in r[3]]
        apps = [r[5] for r in rows if not r[4]]
        return Relations(
            v=np.asarray([r[0] for r in rows], np.int64),
            u=np.asarray([r[1] for r in rows], np.int64),
            kind=np.asarray([r[2] for r in rows], np.int8),
            lvl_ptr=lvl_ptr,
            lvl_type=np.asarray([lv[0] for lv in levels], np.int8),
            lvl_ref=np.asarray([lv[1] for lv in levels], np.int64),
            lvl_b=np.asarray([lv[2] for lv in levels], np.int64),
            every=np.asarray([r[4] for r in rows], bool),
            app_ptr=app_ptr,
            app=np.concatenate(apps).astype(np.int64) if apps else np.zeros(0, np.int64),
        )


def _candidates(iv: np.ndarray, iu: np.ndarray, cv: list[int], cu: list[int], common: int) -> list[list]:
    """Per u level: [(type, ref, b per edge)] of the relations that could explain each edge."""
    out = []
    for j in range(len(cu)):
        if j < common:
            out.append([(DELTA, -1, iu[:, j] - iv[:, j])])
            continue
        c = cu[j]
        cands = [(START, -1, iu[:, j]), (END, -1, c - 1 - iu[:, j])]
        for i in range(len(cv)):
            scaled = iv[:, i] * c // max(cv[i], 1)
            cands.append((LINK, i, iu[:, j] - scaled))
            cands.append((MIRROR, i, iu[:, j] - (c - 1 - scaled)))
        out.append(cands)
    return out


def _choose(cands: list, alive: np.ndarray) -> tuple[int, int, int]:
    """The (type, ref, b) that explains the most live edges; ties: smallest |b|, then the
    structural kinds (DELTA, LINK, MIRROR) before positional ones (START, END)."""
    best: tuple | None = None
    for t, ref, b in cands:
        vals, counts = np.unique(b[alive], return_counts=True)
        if vals.size == 0:
            continue
        order = np.lexsort((np.abs(vals), -counts))
        k = int(order[0])
        pref = 0 if t in (DELTA, LINK, MIRROR) else 1
        score = (-int(counts[k]), abs(int(vals[k])), pref)
        if best is None or score < best[0]:
            best = (score, (t, ref, int(vals[k])))
    assert best is not None
    return best[1]


def fit(
    slot_levels: list[list[int]],
    counts: np.ndarray,
    instances: np.ndarray,
    v_slot: np.ndarray,
    v_inst: np.ndarray,
    u_slot: np.ndarray,
    u_inst: np.ndarray,
    kind: np.ndarray,
) -> Relations:
    """Relations explaining the template's edges (v_slot at v_inst depends on u_slot at u_inst).
    `slot_levels`: the REP nodes enclosing each slot; `counts`: the template's repeat counts;
    `instances`: instances of each slot."""
    b = _Builder()
    if v_slot.size == 0:
        return b.build()
    order = np.lexsort((u_slot, v_slot, kind))
    v_slot, v_inst, u_slot, u_inst, kind = v_slot[order], v_inst[order], u_slot[order], u_inst[order], kind[order]
    key = np.stack([kind.astype(np.int64), v_slot, u_slot], axis=1)
    cuts = np.flatnonzero(np.any(np.diff(key, axis=0) != 0, axis=1)) + 1
    bounds = np.concatenate([[0], cuts, [v_slot.size]])
    for a, z in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        vs, us, k = int(v_slot[a]), int(u_slot[a]), int(kind[a])
        lv, lu = slot_levels[vs], slot_levels[us]
        cv, cu = [int(counts[x]) for x in lv], [int(counts[x]) for x in lu]
        common = 0
        while common < min(len(lv), len(lu)) and lv[common] == lu[common]:
            common += 1
        ivf, iuf = v_inst[a:z], u_inst[a:z]
        iv, iu = decode(ivf, cv), decode(iuf, cu)
        n_v = int(instances[vs])
        if _fit_each(b, vs, us, k, ivf, iv, iu, cv, cu, common, n_v):
            continue
        cands = _candidates(iv, iu, cv, cu, common)
        alive = np.ones(z - a, bool)
        made = 0
        while alive.any() and made < MAX_RELATIONS:
            chosen = [_choose(c, alive) for c in cands]
            hit = alive.copy()
            for (t, ref, bb), c in zip(chosen, cands):
                col = next(x[2] for x in c if x[0] == t and x[1] == ref)
                hit &= col == bb
            if not hit.any():  # levels chosen apart explain no edge together: the first edge exactly
                e = int(np.flatnonzero(alive)[0])
                chosen = _exact(iv[e], iu[e], common)
                hit = np.zeros(z - a, bool)
                hit[e] = True
            _add(b, vs, us, k, chosen, ivf[hit], n_v)
            alive &= ~hit
            made += 1
        for e in np.flatnonzero(alive).tolist():  # past the cap: exact positions
            _add(b, vs, us, k, _exact(iv[e], iu[e], common), ivf[e : e + 1], n_v)
    return b.build()


def _exact(iv: np.ndarray, iu: np.ndarray, common: int) -> list[tuple[int, int, int]]:
    """The relation of one edge alone: the shared repeats by DELTA, u's own by its position."""
    return [(DELTA, -1, int(iu[j] - iv[j])) if j < common else (START, -1, int(iu[j])) for j in range(iu.size)]


def _add(b: _Builder, vs: int, us: int, k: int, levels: list, v_insts: np.ndarray, n_v: int) -> None:
    app = np.unique(v_insts)
    b.add(vs, us, k, [tuple(x) for x in levels], app.size == n_v, app)


def _fit_each(b, vs, us, k, ivf, iv, iu, cv, cu, common, n_v) -> bool:
    """One EACH relation when every v instance depends on every instance of u's one repeat that
    v is not in (a fan-in over all layers), the repeats both share at a constant DELTA."""
    if len(cu) - common != 1 or cu[-1] < 2:
        return False
    c = cu[-1]
    insts, per = np.unique(ivf, return_counts=True)
    if not (per == c).all():
        return False
    order = np.lexsort((iu[:, -1], ivf))
    if not (iu[order, -1].reshape(-1, c) == np.arange(c)).all():
        return False
    levels = []
    for j in range(common):
        d = iu[:, j] - iv[:, j]
        if not (d == d[0]).all():
            return False
        levels.append((DELTA, -1, int(d[0])))
    levels.append((EACH, -1, 0))
    b.add(vs, us, k, levels, insts.size == n_v, insts)
    return True


def _applies(
    rel: Relations,
    r: int,
    iv: np.ndarray,
    lv: list[int],
    lu: list[int],
    cv: list[int],
    tv: list[int],
    periods: np.ndarray,
) -> np.ndarray:
    """Which instances `iv` of v relation r applies to: where the template instance each stands
    for (`map_index`) had it. An inner instance of a repeat whose template had only two (a first
    and a last, no inner one to learn from) takes a relation whose target moves with it (DELTA
    on that repeat, LINK or MIRROR to it: the layer before, the forward layer it differentiates)
    where either template instance had it (out-of-range targets drop out later), and one whose
    target stays put only where both had it: the first forward layer reads the embedding and
    the last backward layer feeds it, an inner layer does neither."""
    app = rel.app[rel.app_ptr[r] : rel.app_ptr[r + 1]]
    t = iv.copy()
    for j, x in enumerate(lv):
        t[:, j] = map_index(iv[:, j], cv[j], tv[j], int(periods[x]))
    keep = np.isin(encode(t, tv), app)
    lo, hi = int(rel.lvl_ptr[r]), int(rel.lvl_ptr[r + 1])
    for j, x in enumerate(lv):
        if tv[j] != 2 or cv[j] <= 2 or periods[x] > 1:
            continue
        inner = (iv[:, j] > 0) & (iv[:, j] < cv[j] - 1)
        if not inner.any():
            continue
        moves = any(
            (k == j and lu[k] == x and rel.lvl_type[q] == DELTA)
            or (rel.lvl_type[q] in (LINK, MIRROR) and rel.lvl_ref[q] == j)
            for k, q in enumerate(range(lo, hi))
        )
        hits = []
        for o in (0, 1):
            alt = t.copy()
            alt[:, j] = o
            hits.append(np.isin(encode(alt, tv), app))
        ok = hits[0] | hits[1] if moves else hits[0] & hits[1]
        keep[inner] = ok[inner]
    return keep


def apply(
    rel: Relations,
    slot_levels: list[list[int]],
    template_counts: np.ndarray,
    counts: np.ndarray,
    offsets: np.ndarray,
    periods: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges of a program expanded with `counts`: (dependent op, op it depends on, kind), ops
    numbered ``offsets[slot] + instance``; `periods`: per repeat, the period `map_index` keeps."""
    srcs, dsts, kinds = [], [], []
    for r in range(len(rel)):
        vs, us = int(rel.v[r]), int(rel.u[r])
        lv, lu = slot_levels[vs], slot_levels[us]
        cv = [int(counts[x]) for x in lv]
        tv = [int(template_counts[x]) for x in lv]
        cu = [int(counts[x]) for x in lu]
        n_v = int(np.prod(cv, dtype=np.int64)) if cv else 1
        iv = decode(np.arange(n_v, dtype=np.int64), cv)
        if not rel.every[r]:
            iv = iv[_applies(rel, r, iv, lv, lu, cv, tv, periods)]
        v_flat = encode(iv, cv)
        lo, hi = int(rel.lvl_ptr[r]), int(rel.lvl_ptr[r + 1])
        iu = np.zeros((iv.shape[0], len(lu)), np.int64)
        ok = np.ones(iv.shape[0], bool)
        each = -1
        for j, q in enumerate(range(lo, hi)):
            t, ref, b = int(rel.lvl_type[q]), int(rel.lvl_ref[q]), int(rel.lvl_b[q])
            c = cu[j]
            if t == DELTA:
                col = iv[:, j] + b
            elif t == START:
                col = np.full(iv.shape[0], b, np.int64)
            elif t == END:
                col = np.full(iv.shape[0], c - 1 - b, np.int64)
            elif t in (LINK, MIRROR):
                scaled = iv[:, ref] * c // max(cv[ref], 1)
                col = scaled + b if t == LINK else c - 1 - scaled + b
            else:  # EACH
                each = j
                col = np.zeros(iv.shape[0], np.int64)
            iu[:, j] = col
            ok &= (col >= 0) & (col < c)
        iu, v_flat = iu[ok], v_flat[ok]
        if each >= 0:
            c = cu[each]
            iu = np.repeat(iu, c, axis=0)
            iu[:, each] = np.tile(np.arange(c, dtype=np.int64), v_flat.size)
            v_flat = np.repeat(v_flat, c)
        u_flat = encode(iu, cu)
        srcs.append(offsets[vs] + v_flat)
        dsts.append(offsets[us] + u_flat)
        kinds.append(np.full(v_flat.size, rel.kind[r], np.int8))
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)
    return np.concatenate(srcs), np.concatenate(dsts), np.concatenate(kinds)
