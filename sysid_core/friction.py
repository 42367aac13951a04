"""Per-joint regressor columns: friction, rotor inertia and torque offset.

Each term contributes one parameter per joint and acts only on its own joint:
``coulomb`` f_c * sign(dq) (tanh(dq / smoothing) when smoothing > 0),
``viscous`` f_v * dq, ``armature`` I_a * ddq (rotor inertia reflected through the
gear), ``offset`` a constant torque (sensor bias, unmodelled spring).
In MuJoCo terms: frictionloss, damping and armature.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TERMS = ("coulomb", "viscous", "armature", "offset")
UNITS = {"coulomb": "N m", "viscous": "N m s/rad", "armature": "kg m^2", "offset": "N m"}


@dataclass(frozen=True)
class JointModel:
    """Which per-joint terms to identify; ``smoothing`` rad/s for the Coulomb sign (0: sign)."""

    terms: tuple = ("coulomb", "viscous")
    smoothing: float = 0.0

    def __post_init__(self):
        unknown = [t for t in self.terms if t not in TERMS]
        if unknown:
            raise ValueError(f"unknown joint terms {unknown}; choose from {TERMS}")
        if self.smoothing < 0:
            raise ValueError("Coulomb smoothing must be >= 0 rad/s")


def coulomb_feature(dq: np.ndarray, smoothing: float = 0.0) -> np.ndarray:
    """sign(dq), or tanh(dq / smoothing) for smoothing > 0; same shape as dq."""
    return np.sign(dq) if smoothing == 0.0 else np.tanh(dq / smoothing)


def joint_regressor(dq: np.ndarray, ddq: np.ndarray, model: JointModel) -> np.ndarray:
    """Columns (N, n, len(terms) * n): term-major, joint-minor, diagonal in the joints.

    Column ``t * n + j`` holds term t of joint j and is non-zero only in row j.
    """
    dq = np.atleast_2d(dq)
    num, n = dq.shape
    features = {
        "coulomb": lambda: coulomb_feature(dq, model.smoothing),
        "viscous": lambda: dq,
        "armature": lambda: np.atleast_2d(ddq),
        "offset": lambda: np.ones_like(dq),
    }
    out = np.zeros((num, n, len(model.terms) * n))
    diag = np.arange(n)
    for t, term in enumerate(model.terms):
        out[:, diag, t * n + diag] = features[term]()
    return out


def column_names(joint_names, model: JointModel) -> tuple:
    """Names ``<joint>.<term>`` of joint_regressor's columns."""
    return tuple(f"{j}.{t}" for t in model.terms for j in joint_names)
