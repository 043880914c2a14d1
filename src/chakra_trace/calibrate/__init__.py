"""Calibrate, then predict: measure this machine's collectives (alpha-beta fits per collective
and rank count, mapped onto a simulator network) and its compute (per-op time, matmul and memory
throughput) once, write a `SystemProfile`, and predict jobs' step times on it with a band."""

from .calibrate import calibrate, profile_from_points
from .collectives import COLLECTIVES, Point, measure_collectives
from .compute import ComputeModel, measure_compute
from .fit import AlphaBeta, fit_alpha_beta
from .network import fit_network
from .predict import Prediction, predict, prepare
from .profile import SystemProfile

__all__ = [
    "COLLECTIVES",
    "AlphaBeta",
    "ComputeModel",
    "Point",
    "Prediction",
    "SystemProfile",
    "calibrate",
    "fit_alpha_beta",
    "fit_network",
    "measure_collectives",
    "measure_compute",
    "predict",
    "prepare",
    "profile_from_points",
]
