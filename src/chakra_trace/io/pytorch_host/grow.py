"""Append-only numpy arrays, for the tables that grow by one entry per new node shape.

The template and role tables are appended to while the reader meets new node shapes and read
with numpy over every node at once: appends go to a list, reads see an array.
"""

from __future__ import annotations

import numpy as np


class Grow:
    """Append-only numpy array: values are pushed to a list and moved into the array when read."""

    __slots__ = ("a", "n", "pend")

    def __init__(self, dtype, cap: int = 256):
        self.a = np.empty(cap, dtype)
        self.n = 0
        self.pend: list = []

    def __len__(self) -> int:
        return self.n + len(self.pend)

    def push(self, v) -> None:
        self.pend.append(v)

    def add(self, vals) -> None:
        self.pend.extend(vals)

    def _flush(self) -> None:
        k = len(self.pend)
        need = self.n + k
        if need > self.a.size:
            b = np.empty(max(need, 2 * self.a.size), self.a.dtype)
            b[: self.n] = self.a[: self.n]
            self.a = b
        self.a[self.n : need] = self.pend
        self.n = need
        self.pend = []

    @property
    def v(self) -> np.ndarray:
        if self.pend:
            self._flush()
        return self.a[: self.n]

    def nbytes(self) -> int:
        return self.a.nbytes
