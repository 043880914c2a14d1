"""The alpha-beta model of a collective: time = alpha + beta * bytes (alpha: latency in ns, beta:
ns per byte, 1 / bandwidth), fitted per collective and rank count by least squares on relative
error, so that 4 KiB and 64 MiB messages weigh alike. Residuals are kept: they are the model's
error on this machine and set the width of a prediction's band."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted line for one collective at one rank count, with the points it was fitted to."""

    collective: str
    ranks: int
    alpha_ns: float
    beta_ns_per_byte: float
    sizes: list[int] = field(default_factory=list)
    measured_ns: list[float] = field(default_factory=list)  # median per size
    ci_ns: list[list[float]] = field(default_factory=list)  # 95% CI of each median

    def predict_ns(self, nbytes):
        """alpha + beta * bytes (a float, or an array for an array of sizes)."""
        return self.alpha_ns + self.beta_ns_per_byte * (np.asarray(nbytes, float) if np.ndim(nbytes) else float(nbytes))

    @property
    def bandwidth_gbps(self) -> float:
        """1 / beta in GB/s (1e9 bytes/s): bytes per ns."""
        return 1.0 / self.beta_ns_per_byte if self.beta_ns_per_byte > 0 else float("inf")

    @property
    def residuals(self) -> list[float]:
        """Relative error of the fit at each measured size: fit / measured - 1."""
        m = np.asarray(self.measured_ns, float)
        return [float(x) for x in self.predict_ns(np.asarray(self.sizes, float)) / m - 1] if m.size else []

    @property
    def spread(self) -> float:
        """The largest |relative residual|: how far this line strays from what was measured."""
        return max((abs(r) for r in self.residuals), default=0.0)

    def to_dict(self) -> dict:
        return {
            "collective": self.collective,
            "ranks": self.ranks,
            "alpha_ns": self.alpha_ns,
            "beta_ns_per_byte": self.beta_ns_per_byte,
            "bandwidth_gbps": self.bandwidth_gbps,
            "sizes": list(self.sizes),
            "measured_ns": list(self.measured_ns),
            "ci_ns": [list(c) for c in self.ci_ns],
            "residuals": self.residuals,
        }

    @classmethod
    def from_dict(cls, d: dict) -> AlphaBeta:
        try:
            return cls(
                str(d["collective"]),
                int(d["ranks"]),
                float(d["alpha_ns"]),
                float(d["beta_ns_per_byte"]),
                [int(s) for s in d.get("sizes", [])],
                [float(t) for t in d.get("measured_ns", [])],
                [[float(a), float(b)] for a, b in d.get("ci_ns", [])],
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise ChakraError(f"a collective fit lacks or mistypes {str(e)[:160]}") from None


def fit_alpha_beta(sizes, times_ns, *, collective: str = "", ranks: int = 0, ci_ns=None) -> AlphaBeta:
    """Least squares of time = alpha + beta * bytes on relative error (each point weighted by
    1 / its time). Exact on data that lie on a line; alpha and beta are kept non-negative (a
    negative one is set to 0 and the other refitted)."""
    s = np.asarray(sizes, float)
    t = np.asarray(times_ns, float)
    if s.size < 2 or s.size != t.size or np.unique(s).size < 2:
        raise ChakraError(f"alpha-beta fit of {collective or 'a collective'}: need two or more distinct sizes")
    w = 1.0 / t
    A = np.stack([np.ones_like(s), s], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(A, t * w, rcond=None)
    if alpha < 0:
        alpha, beta = 0.0, float(np.sum(w * w * s * t) / np.sum(w * w * s * s))
    elif beta < 0:
        alpha, beta = float(np.sum(w * w * t) / np.sum(w * w)), 0.0
    return AlphaBeta(
        collective,
        ranks,
        float(alpha),
        float(beta),
        [int(x) for x in s],
        [float(x) for x in t],
        [list(map(float, c)) for c in ci_ns] if ci_ns is not None else [],
    )
