"""k representatives of N jobs, each weighted by the jobs it stands for: the few traces a
study simulates instead of the whole fleet.

Both methods minimise the same objective, the sum over jobs of the Euclidean distance (in
`FleetFeatures.standardized` space) to the nearest representative, which is what makes a
representative's result a fair stand-in for the jobs assigned to it:

- ``kmedoids``: k-means++ seeding (each next seed drawn with probability proportional to its
  squared distance from the seeds so far), then PAM's swap phase in the eager form of FasterPAM
  (Schubert & Rousseeuw 2021): every non-representative is tried against all k representatives
  at once in O(N) from the nearest and second-nearest distances, and the best improving swap of
  each block of 64 candidates is made at once, until N - k candidates in a row improve nothing.
  k = 1 is solved exactly.
- ``facility``: facility location, F(S) = sum_i max_{j in S} (C - d_ij) with C any bound on the
  distances (it drops out of every choice), a monotone submodular function maximised greedily (with Minoux's lazy evaluations;
  within 1 - 1/e of the optimum). It needs no seed, and the selection at k is the first k of
  the selection at k + 1 (CRAIG, Mirzasoleiman et al. 2020, weights its coresets the same way).

Distances are computed in blocks from the feature matrix, and kept as a full matrix only when it
fits `max_matrix_bytes`: 10,000 jobs need no N x N matrix.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ChakraError
from ...table import Table, Tabular
from .features import FleetFeatures

METHODS = ("kmedoids", "facility")
MAX_MATRIX_BYTES = 256 << 20  # the full distance matrix is kept below this (float64)
_BLOCK_BYTES = 32 << 20  # one block of candidate-by-job distances
_SWAP_BLOCK = 64  # candidates tried together before the best swap among them is made


@dataclass
class Selection(Tabular):
    """k representatives (`indices` into the fleet, `names`), each with its `weights`: how many
    of the fleet's N jobs it stands for (they sum to N). `assignment` maps every job to the
    position of its representative in `indices`; `distance` is its distance to it; `objective`
    their sum (what both methods minimise)."""

    method: str
    indices: np.ndarray  # (k,) int64
    weights: np.ndarray  # (k,) int64, sum N
    assignment: np.ndarray  # (N,) int64 in [0, k)
    distance: np.ndarray  # (N,) float64
    names: list[str]
    seed: int | None = None
    proxy: np.ndarray | None = None  # (N,) each job's serial time (µs), for `coverage`'s ratio estimator

    @property
    def k(self) -> int:
        return int(self.indices.size)

    @property
    def n(self) -> int:
        return int(self.assignment.size)

    @property
    def objective(self) -> float:
        return float(self.distance.sum())

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "k": self.k,
            "jobs": self.n,
            "seed": self.seed,
            "objective": self.objective,
            "representatives": [
                {"job": self.names[int(i)], "index": int(i), "weight": int(w), "share": float(w) / self.n}
                for i, w in zip(self.indices, self.weights)
            ],
        }

    def to_table(self) -> Table:
        """One row per representative (the index, ``job``): its index in the fleet, weight and share."""
        cols = {
            "job": [self.names[i] for i in self.indices.tolist()],
            "index": self.indices.astype(np.int64),
            "weight": self.weights.astype(np.int64),
            "share": self.weights / max(self.n, 1),
        }
        return Table(cols, title=f"{self.k} of {self.n} jobs ({self.method})", index="job")


def select(
    features: FleetFeatures | np.ndarray,
    k: int,
    method: str = "kmedoids",
    seed: int = 0,
    *,
    names: list[str] | None = None,
    max_matrix_bytes: int = MAX_MATRIX_BYTES,
) -> Selection:
    """k representatives of the fleet (see the module docstring). `features`: FleetFeatures
    (standardized here; the selection keeps their serial times for `coverage`) or an (N, D)
    array used as is. Deterministic for a given seed (facility location needs none)."""
    proxy = None
    if isinstance(features, FleetFeatures):
        x, names, proxy = features.standardized(), list(features.names), features.serial_us
    else:
        x = np.asarray(features, np.float64)
        if x.ndim != 2:
            raise ChakraError(f"select: expected an (N, D) feature matrix, got shape {x.shape}")
    n = x.shape[0]
    names = names if names is not None else [str(i) for i in range(n)]
    if len(names) != n:
        raise ChakraError(f"select: {len(names)} names for {n} jobs")
    if not 1 <= k <= n:
        raise ChakraError(f"select: k must be between 1 and the number of jobs ({n}), got {k}")
    if method not in METHODS:
        raise ChakraError(f"select: unknown method {method!r}; methods: {', '.join(METHODS)}")
    if not np.isfinite(x).all():
        row = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])
        raise ChakraError(f"select: job {names[row]!r} has a feature that is not a finite number")
    d = Distances(x, max_matrix_bytes)
    if method == "kmedoids":
        medoids = kmedoids(d, k, np.random.default_rng(seed))
    else:
        medoids = facility_location(d, k)
    sel = _selection(method, d, medoids, names, seed if method == "kmedoids" else None)
    sel.proxy = proxy
    return sel


def assign(d: Distances, medoids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every job's nearest representative (position in `medoids`) and its distance; a
    representative stands for itself even where another is as near (duplicates)."""
    dm = d.to(medoids)
    near = dm.argmin(axis=1)
    near[medoids] = np.arange(medoids.size)
    return near, dm[np.arange(d.n), near]


def _selection(method: str, d: Distances, medoids: np.ndarray, names: list[str], seed: int | None) -> Selection:
    """The Selection of `medoids`: k-medoids' heaviest first (its order means nothing), facility
    location's in the order chosen (each the best addition to those before it)."""
    near, dist = assign(d, medoids)
    weights = np.bincount(near, minlength=medoids.size).astype(np.int64)
    if method == "kmedoids":
        order = np.lexsort((medoids, -weights))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        medoids, weights, near = medoids[order], weights[order], rank[near]
    return Selection(method, medoids.astype(np.int64), weights, near.astype(np.int64), dist, names, seed)


class Distances:
    """Euclidean distances between the rows of `x`: from a kept matrix when it fits, else
    computed in blocks (‖a‖² + ‖b‖² - 2a·b, so one block is one matrix product)."""

    def __init__(self, x: np.ndarray, max_matrix_bytes: int = MAX_MATRIX_BYTES):
        self.x = np.ascontiguousarray(x, np.float64)
        self.n = self.x.shape[0]
        self.sq = np.einsum("ij,ij->i", self.x, self.x)
        self.matrix: np.ndarray | None = None
        if self.n * self.n * 8 <= max_matrix_bytes:
            self.matrix = self._compute(np.arange(self.n))

    def _compute(self, rows: np.ndarray) -> np.ndarray:
        out = self.x[rows] @ self.x.T  # (in place from here: one (rows, N) array in all)
        out *= -2.0
        out += self.sq[None, :]
        out += self.sq[rows, None]
        np.maximum(out, 0.0, out=out)
        np.sqrt(out, out=out)
        out[np.arange(rows.size), rows] = 0.0  # (exactly, not a rounding residue)
        return out

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), N): the distances from each of `rows` to every job."""
        rows = np.asarray(rows, np.int64)
        return self.matrix[rows] if self.matrix is not None else self._compute(rows)

    def to(self, cols: np.ndarray) -> np.ndarray:
        """(N, len(cols)): every job's distance to each of `cols`."""
        return self.rows(cols).T

    def blocks(self, rows: np.ndarray, width: int = 1, most: int | None = None):
        """`rows` in blocks whose distance rows (x `width` arrays alike) fit one block's bytes,
        of at most `most` rows."""
        step = max(1, min(_BLOCK_BYTES // (8 * max(self.n, 1) * width), most or self.n))
        for i in range(0, rows.size, step):
            yield rows[i : i + step]

    def row_sums(self) -> np.ndarray:
        """Each job's summed distance to every job."""
        return np.concatenate([self.rows(b).sum(axis=1) for b in self.blocks(np.arange(self.n))])


def kmeanspp(d: Distances, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds: the first uniformly, each next with probability ∝ squared distance to the
    nearest seed so far (uniformly among the rest once every job coincides with a seed)."""
    chosen = [int(rng.integers(d.n))]
    nearest = d.rows(np.array(chosen))[0]
    for _ in range(1, k):
        p = nearest**2
        p[chosen] = 0.0
        total = p.sum()
        if total > 0:
            nxt = int(rng.choice(d.n, p=p / total))
        else:
            rest = np.setdiff1d(np.arange(d.n), chosen)
            nxt = int(rng.choice(rest))
        chosen.append(nxt)
        nearest = np.minimum(nearest, d.rows(np.array([nxt]))[0])
    return np.array(chosen, np.int64)


def kmedoids(d: Distances, k: int, rng: np.random.Generator, max_passes: int = 50) -> np.ndarray:
    """Indices of k medoids: k-means++ seeds improved by eager PAM swaps (module docstring)."""
    if k == 1:  # exactly: the job with the least summed distance
        return np.array([int(np.argmin(d.row_sums()))], np.int64)
    if k == d.n:
        return np.arange(d.n, dtype=np.int64)
    medoids = kmeanspp(d, k, rng)
    dm = d.to(medoids)  # (N, k)
    near, dn, ds = _nearest_two(dm)
    loss = np.bincount(near, weights=ds - dn, minlength=k)  # of each medoid: its jobs go to their second
    since = 0  # candidates tried since the last swap: a whole pass of them without one ends the search
    for _ in range(max_passes):
        for cands in d.blocks(rng.permutation(d.n), width=4, most=_SWAP_BLOCK):
            cands = cands[~np.isin(cands, medoids)]
            a = d.rows(cands)  # (C, N)
            # a job nearer the candidate than to its medoid moves to it, whatever medoid goes ...
            nearer = np.subtract(dn, a)
            np.maximum(nearer, 0.0, out=nearer)
            shared = -nearer.sum(axis=1)
            # ... and otherwise, if its medoid goes, to the candidate or its second nearest: `loss`
            # corrected by min(a - ds, 0); a job that moves anyway gives its loss back (the two
            # terms make dn - ds)
            corr = np.subtract(a, ds)
            np.minimum(corr, 0.0, out=corr)
            corr += nearer
            flat = (np.arange(cands.size)[:, None] * k + near[None, :]).ravel()
            per_medoid = np.bincount(flat, weights=corr.ravel(), minlength=cands.size * k).reshape(cands.size, k)
            delta = loss[None, :] + per_medoid + shared[:, None]
            c, i = np.unravel_index(int(np.argmin(delta)), delta.shape) if cands.size else (0, 0)
            if cands.size and delta[c, i] < -1e-9 * max(float(dn.sum()), 1e-300):
                medoids[i] = cands[c]
                dm[:, i] = a[c]
                near, dn, ds = _nearest_two(dm)
                loss = np.bincount(near, weights=ds - dn, minlength=k)
                since = 0
            else:
                since += cands.size
                if since >= d.n - k:
                    return medoids
    return medoids


def _nearest_two(dm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job: its nearest medoid (position), that distance and the second-nearest distance."""
    part = np.argpartition(dm, 1, axis=1)[:, :2]
    two = np.take_along_axis(dm, part, axis=1)
    first = two[:, 0] <= two[:, 1]
    near = np.where(first, part[:, 0], part[:, 1])
    return near, np.where(first, two[:, 0], two[:, 1]), np.where(first, two[:, 1], two[:, 0])


def facility_location(d: Distances, k: int) -> np.ndarray:
    """Indices of k jobs chosen greedily for facility location (module docstring), in the order
    chosen. The gain of adding j is sum_i max(0, cur_i - d_ij), cur_i the distance to the
    nearest chosen job (C before the first: the first pick is the 1-medoid); gains only shrink
    as the set grows, so a stale gain is an upper bound and only the top of the heap is
    re-evaluated. Ties go to the lowest index."""
    first = int(np.argmin(d.row_sums()))
    chosen = [first]
    cur = d.rows(np.array([first]))[0].copy()
    if k == 1:
        return np.array(chosen, np.int64)
    gains = np.concatenate([np.maximum(cur[None, :] - d.rows(b), 0.0).sum(axis=1) for b in d.blocks(np.arange(d.n))])
    heap = [(-float(g), j, 1) for j, g in enumerate(gains.tolist()) if j != first]
    heapq.heapify(heap)
    while len(chosen) < k:
        g, j, step = heapq.heappop(heap)
        if step == len(chosen):  # fresh for this step: the best there is
            chosen.append(j)
            cur = np.minimum(cur, d.rows(np.array([j]))[0])
            continue
        gain = float(np.maximum(cur - d.rows(np.array([j]))[0], 0.0).sum())
        heapq.heappush(heap, (-gain, j, len(chosen)))
    return np.array(chosen, np.int64)


__all__ = ["METHODS", "Distances", "Selection", "assign", "facility_location", "kmeanspp", "kmedoids", "select"]
