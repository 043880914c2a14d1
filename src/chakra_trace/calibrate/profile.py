"""A calibrated system profile: what `chakra calibrate` measured and what `chakra simulate
--profile` and `chakra predict` use. JSON, schema "chakra-profile/1":

    {"schema", "backend", "environment",
     "collectives": [AlphaBeta.to_dict() per collective and rank count],
     "networks": {"<ranks>": {"network": Network dict, "system": SystemConfig dict,
                              "latency_ns", "bandwidth_gbps", "residuals": {collective: [...]}}},
     "compute": ComputeModel.to_dict(),
     "spread": {"comm": median |relative residual| of the fits, "compute": relative half-width
                of op_ns's 95% CI}}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import ChakraError
from ..io.documents import read_json
from ..io.et import atomic_output
from ..simulate.config import Network, SystemConfig
from ..simulate.presets import SystemPreset
from ..table import Column, Table
from .compute import ComputeModel
from .fit import AlphaBeta

SCHEMA = "chakra-profile/1"


@dataclass
class SystemProfile:
    backend: str
    fits: list[AlphaBeta]
    networks: dict[int, dict]
    compute: ComputeModel
    environment: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ lookups
    def nearest_ranks(self, ranks: int) -> int:
        """The measured rank count closest to `ranks` (the larger one on a tie)."""
        if not self.networks:
            raise ChakraError("profile: no network was fitted (no collectives measured)")
        return min(self.networks, key=lambda r: (abs(r - ranks), -r))

    def fit(self, collective: str, ranks: int) -> AlphaBeta | None:
        """The fit of `collective` at the measured rank count nearest `ranks`."""
        got = [f for f in self.fits if f.collective == collective]
        return min(got, key=lambda f: (abs(f.ranks - ranks), -f.ranks)) if got else None

    def link(self, ranks: int) -> tuple[float, float]:
        """(bandwidth GB/s, latency ns) of the network fitted nearest `ranks`."""
        n = self.networks[self.nearest_ranks(ranks)]
        return float(n["bandwidth_gbps"]), float(n["latency_ns"])

    def network(self, ranks: int, scale: float = 1.0) -> Network:
        """A Switch of `ranks` with the fitted link; ``scale`` multiplies its latency and divides
        its bandwidth (scale > 1: a slower network, a band's high end)."""
        bw, lat = self.link(ranks)
        return Network.simple("Switch", ranks, bw / scale, lat * scale)

    def system(self) -> SystemConfig:
        any_net = next(iter(self.networks.values()))
        return SystemConfig.from_dict(any_net["system"])

    def preset(self, ranks: int) -> SystemPreset:
        """The profile as a system preset for a job of `ranks` ranks."""
        bw, lat = self.link(ranks)
        return SystemPreset(
            "profile",
            f"calibrated {self.backend}: {ranks} ranks on a switch, {bw:.3g} GB/s, {lat:,.0f} ns",
            self.network(ranks),
            self.system(),
        )

    @property
    def spread(self) -> dict:
        res = np.abs([r for f in self.fits for r in f.residuals])
        comm = float(np.median(res)) if res.size else 0.0
        ci = self.compute.op_ci_ns
        comp = (ci[1] - ci[0]) / 2 / self.compute.op_ns if len(ci) == 2 and self.compute.op_ns > 0 else 0.0
        return {"comm": comm, "compute": comp}

    def fits_table(self) -> Table:
        """One row per fitted collective and rank count: latency (alpha), bandwidth (1 / beta) and
        the largest |relative residual| of the fit."""
        cols = {
            "collective": [f.collective for f in self.fits],
            "ranks": np.asarray([f.ranks for f in self.fits], np.int64),
            "alpha_us": np.asarray([f.alpha_ns / 1e3 for f in self.fits], np.float64),
            "bandwidth_gbps": np.asarray([f.bandwidth_gbps for f in self.fits], np.float64),
            "spread": np.asarray([f.spread for f in self.fits], np.float64),
        }
        spec = {
            "alpha_us": Column(label="alpha", unit="µs", format=".1f"),
            "bandwidth_gbps": Column(label="bandwidth", unit="GB/s", format=".3g"),
            "spread": Column(label="max |residual|", format=".1%"),
        }
        return Table(cols, title=f"alpha-beta fits ({self.backend})", spec=spec)

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "backend": self.backend,
            "environment": self.environment,
            "collectives": [f.to_dict() for f in self.fits],
            "networks": {str(r): n for r, n in sorted(self.networks.items())},
            "compute": self.compute.to_dict(),
            "spread": self.spread,
        }

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>") -> SystemProfile:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise ChakraError(
                f"{source}: not a system profile (expected schema {SCHEMA!r}; made by `chakra calibrate`)"
            )
        try:
            networks = {int(r): n for r, n in d["networks"].items()}
            for n in networks.values():
                float(n["latency_ns"]), float(n["bandwidth_gbps"]), SystemConfig.from_dict(n["system"])
            return cls(
                str(d.get("backend", "")),
                [AlphaBeta.from_dict(f) for f in d.get("collectives", [])],
                networks,
                ComputeModel.from_dict(d["compute"]),
                dict(d.get("environment") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise ChakraError(f"{source}: system profile lacks or mistypes {str(e)[:160]}") from None
        except ChakraError as e:  # (a part's own check: named with the file)
            raise ChakraError(f"{source}: {e}") from None

    def save(self, path: str | os.PathLike) -> None:
        with atomic_output(path, compress=False) as f:
            f.write(json.dumps(self.to_dict(), indent=1).encode())

    @classmethod
    def load(cls, path: str | os.PathLike) -> SystemProfile:
        """A profile file, which may come from someone else: read as a bounded document
        (`io.documents`: a regular file, size and nesting limited), every field checked."""
        return cls.from_dict(read_json(path, "system profile"), str(path))
