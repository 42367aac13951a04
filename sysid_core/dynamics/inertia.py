"""Standard inertial parameters of a rigid body and their physical meaning.

A body's standard parameters are the 10-vector
``theta = [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]`` (kg, kg m, kg m^2):
mass, first moment ``h = m c`` and the inertia tensor about the body-frame
origin, all expressed in the body frame.

The pseudo-inertia matrix ``J = [[Sigma, h], [h^T, m]]`` with
``Sigma = tr(I)/2 E - I`` is linear in ``theta``, transforms as ``T J T^T``
under a rigid motion ``T``, and is positive definite exactly when the
parameters belong to a real body (positive mass, inertia at the centre of
mass positive definite and satisfying the triangle inequalities; Wensing et
al., IEEE RA-L 2018). That makes it the natural tool for both jobs here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PARAMETER_NAMES = ("m", "hx", "hy", "hz", "Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz")

# Indices of the symmetric inertia entries inside theta, as (row, col) of I.
_I_INDEX = ((4, 0, 0), (5, 0, 1), (6, 0, 2), (7, 1, 1), (8, 1, 2), (9, 2, 2))


def inertia_matrix(theta: np.ndarray) -> np.ndarray:
    """Inertia tensor about the body origin, shape (..., 3, 3), from theta (..., 10)."""
    theta = np.asarray(theta, dtype=float)
    inertia = np.empty(theta.shape[:-1] + (3, 3))
    for k, r, c in _I_INDEX:
        inertia[..., r, c] = theta[..., k]
        inertia[..., c, r] = theta[..., k]
    return inertia


def from_inertia_matrix(mass, first_moment, inertia) -> np.ndarray:
    """Pack mass (...,), h (..., 3) and inertia about the origin (..., 3, 3) into theta (..., 10)."""
    mass = np.asarray(mass, dtype=float)
    theta = np.empty(mass.shape + (10,))
    theta[..., 0] = mass
    theta[..., 1:4] = first_moment
    for k, r, c in _I_INDEX:
        theta[..., k] = 0.5 * (inertia[..., r, c] + inertia[..., c, r])
    return theta


def _steiner(mass, com):
    """``m (|c|^2 E - c c^T)``: the parallel-axis term, shape (..., 3, 3)."""
    com = np.asarray(com, dtype=float)
    outer = com[..., :, None] * com[..., None, :]
    sq = np.einsum("...i,...i->...", com, com)
    return np.asarray(mass)[..., None, None] * (sq[..., None, None] * np.eye(3) - outer)


def from_com_inertia(mass, com, inertia_com) -> np.ndarray:
    """theta (..., 10) from mass, centre of mass (..., 3) and inertia about the CoM (..., 3, 3)."""
    mass = np.asarray(mass, dtype=float)
    com = np.asarray(com, dtype=float)
    return from_inertia_matrix(mass, mass[..., None] * com, inertia_com + _steiner(mass, com))


@dataclass(frozen=True)
class ComInertia:
    """A body described at its centre of mass, as MJCF ``<inertial>`` wants it.

    mass in kg, com (3,) in m in the body frame, inertia (3, 3) in kg m^2 about the
    centre of mass with body-frame axes.
    """

    mass: float
    com: np.ndarray
    inertia: np.ndarray


def to_com_inertia(theta: np.ndarray) -> ComInertia:
    """Split one body's theta (10,) into mass, CoM and inertia about the CoM.

    Raises ValueError for a non-positive mass, where the CoM is undefined.
    """
    theta = np.asarray(theta, dtype=float)
    mass = float(theta[0])
    if not mass > 0.0:
        raise ValueError(f"mass {mass:.6g} kg is not positive, so the centre of mass is undefined")
    com = theta[1:4] / mass
    return ComInertia(mass, com, inertia_matrix(theta) - _steiner(mass, com))


def pseudo_inertia(theta: np.ndarray) -> np.ndarray:
    """4x4 pseudo-inertia matrix J (..., 4, 4) of theta (..., 10)."""
    theta = np.asarray(theta, dtype=float)
    inertia = inertia_matrix(theta)
    trace = np.trace(inertia, axis1=-2, axis2=-1)
    pseudo = np.zeros(theta.shape[:-1] + (4, 4))
    pseudo[..., :3, :3] = 0.5 * trace[..., None, None] * np.eye(3) - inertia
    pseudo[..., :3, 3] = theta[..., 1:4]
    pseudo[..., 3, :3] = theta[..., 1:4]
    pseudo[..., 3, 3] = theta[..., 0]
    return pseudo


def from_pseudo_inertia(pseudo: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pseudo_inertia`: theta (..., 10) from J (..., 4, 4)."""
    sigma = pseudo[..., :3, :3]
    trace = np.trace(sigma, axis1=-2, axis2=-1)
    inertia = trace[..., None, None] * np.eye(3) - sigma
    return from_inertia_matrix(pseudo[..., 3, 3], pseudo[..., :3, 3], inertia)


def transform_parameters(theta: np.ndarray, rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    """Express a body's parameters in another frame.

    theta (..., 10) is given in frame B; frame B has orientation ``rotation`` (3, 3) and
    origin ``translation`` (3,) in frame A. Returns theta in frame A, about A's origin.
    """
    transform = np.eye(4)
    transform[:3, :3] = rotation
    transform[:3, 3] = translation
    return from_pseudo_inertia(transform @ pseudo_inertia(theta) @ transform.T)


def consistency_violations(theta: np.ndarray, tol: float = 0.0) -> list[str]:
    """Reasons why one body's theta (10,) is not a physically realizable rigid body.

    Empty list when it is: finite values, positive mass, inertia about the CoM positive
    definite and satisfying the triangle inequalities (pseudo-inertia positive definite).
    ``tol`` is a relative margin on the smallest eigenvalue.
    """
    theta = np.asarray(theta, dtype=float)
    if not np.all(np.isfinite(theta)):
        return ["parameters contain NaN or infinite values"]
    if not theta[0] > 0.0:
        return [f"mass {theta[0]:.6g} kg is not positive"]
    reasons = []
    com = to_com_inertia(theta)
    principal = np.linalg.eigvalsh(com.inertia)
    if principal[0] <= 0.0:
        reasons.append(f"inertia about the CoM is not positive definite (principal moments {np.round(principal, 9).tolist()})")
    else:
        a, b, c = principal
        if a + b <= c:
            reasons.append(f"principal moments {np.round(principal, 9).tolist()} violate the triangle inequality")
    eig = np.linalg.eigvalsh(pseudo_inertia(theta))
    if not reasons and eig[0] <= tol * max(eig[-1], 1e-300):
        reasons.append("pseudo-inertia matrix is not positive definite")
    return reasons
