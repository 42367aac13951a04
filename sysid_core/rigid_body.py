"""The 6x10 rigid-body regressor, derived once with SymPy.

For a body with spatial velocity V = (w, v) and spatial acceleration
dV = (dw, dv), both in its own frame at its origin (dv includes -gravity),
the Newton-Euler wrench (n, f) about the origin is

    F = G dV - ad_V^T G V,   G = [[I, [h]x], [-[h]x, m E]],

linear in theta = [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]:
F = A(V, dV) theta, with A the 6x10 matrix of ``body_regressor_symbolic``.
Every entry of A is linear in 21 monomials of the motion (dv, dw, w_i v_j,
w_i w_j), so SymPy also gives the constant matrix that maps those monomials to
A's entries: evaluating A for N samples is then one GEMM.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

_W = sp.symbols("wx wy wz", real=True)
_V = sp.symbols("vx vy vz", real=True)
_DW = sp.symbols("dwx dwy dwz", real=True)
_DV = sp.symbols("dvx dvy dvz", real=True)
_THETA = sp.symbols("m hx hy hz Ixx Ixy Ixz Iyy Iyz Izz", real=True)
# monomials in the order motion_features() computes them
_PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
_MONOMIALS = (list(_DW) + list(_DV) + [w * v for w in _W for v in _V]
              + [_W[i] * _W[k] for i, k in _PAIRS])


def _skew(x) -> sp.Matrix:
    return sp.Matrix([[0, -x[2], x[1]], [x[2], 0, -x[0]], [-x[1], x[0], 0]])


@lru_cache(maxsize=1)
def body_regressor_symbolic() -> sp.Matrix:
    """A (6x10 SymPy matrix): body wrench (n, f) about the origin = A @ theta."""
    m, hx, hy, hz, ixx, ixy, ixz, iyy, iyz, izz = _THETA
    inertia = sp.Matrix([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    h = _skew((hx, hy, hz))
    spatial_inertia = sp.Matrix(sp.BlockMatrix([[inertia, h], [-h, m * sp.eye(3)]]))
    w, v = _skew(_W), _skew(_V)
    ad_t = sp.Matrix(sp.BlockMatrix([[-w, -v], [sp.zeros(3), -w]]))
    wrench = spatial_inertia * sp.Matrix(_DW + _DV) - ad_t * spatial_inertia * sp.Matrix(_W + _V)
    return wrench.jacobian(sp.Matrix(_THETA)).applyfunc(sp.expand)


# A's structural non-zeros: the mass column acts only on the force rows, the inertia
# columns only on the moment rows. Skipping the zeros saves a third of the work.
_NONZERO = ([(r, 0) for r in range(3, 6)] + [(r, c) for r in range(6) for c in range(1, 4)]
            + [(r, c) for r in range(3) for c in range(4, 10)])


@lru_cache(maxsize=1)
def monomial_map() -> np.ndarray:
    """Constant (39, 21) matrix mapping motion_features to A's structural non-zeros.

    Row order: A[3:6, 0] (mass), A[0:6, 1:4] (first moment, row-major), A[0:3, 4:10]
    (inertia, row-major). Raises if A has a non-zero elsewhere or an entry that is not
    linear in the monomials, so the split can never silently drop a term.
    """
    matrix = body_regressor_symbolic()
    if any(matrix[r, c] != 0 for r in range(6) for c in range(10) if (r, c) not in _NONZERO):
        raise AssertionError("A has a non-zero outside the expected structure")
    coeffs = np.zeros((len(_NONZERO), len(_MONOMIALS)))
    for idx, (r, c) in enumerate(_NONZERO):
        poly = sp.Poly(matrix[r, c], *(_W + _V + _DW + _DV))
        for k, mono in enumerate(_MONOMIALS):
            coeffs[idx, k] = float(poly.coeff_monomial(mono))
        if sp.expand(sum(x * mono for x, mono in zip(coeffs[idx], _MONOMIALS)) - matrix[r, c]) != 0:
            raise AssertionError(f"A[{r}, {c}] is not linear in the chosen monomials")
    return coeffs


def motion_features(velocity: np.ndarray, acceleration: np.ndarray) -> np.ndarray:
    """The 21 monomials (21, N) of a body's spatial velocity and acceleration (6, N) each."""
    w, v = velocity[:3], velocity[3:]
    num = velocity.shape[1]
    feats = np.empty((21, num))
    feats[:6] = acceleration
    feats[6:15] = (w[:, None, :] * v[None, :, :]).reshape(9, num)
    for k, (i, l) in enumerate(_PAIRS):
        np.multiply(w[i], w[l], out=feats[15 + k])
    return feats


def body_regressor_blocks(velocity: np.ndarray, acceleration: np.ndarray):
    """A's non-zero blocks for N samples from body-frame spatial velocity/acceleration (6, N).

    Returns (mass (3, N) = A[3:6, 0], first_moment (6, 3, N) = A[:, 1:4],
    inertia (3, 6, N) = A[0:3, 4:10]). Units: rad/s, m/s, rad/s^2, m/s^2 (acceleration
    with -gravity included).
    """
    nonzero = monomial_map() @ motion_features(velocity, acceleration)
    num = nonzero.shape[1]
    return nonzero[:3], nonzero[3:21].reshape(6, 3, num), nonzero[21:].reshape(3, 6, num)
