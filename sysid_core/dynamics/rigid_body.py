"""The 6x10 rigid-body regressor, derived once with SymPy.

For a body with spatial velocity V = (w, v) and spatial acceleration
dV = (dw, dv), both in its own frame at its origin (dv includes -gravity),
the Newton-Euler wrench (n, f) about the origin is

    F = G dV - ad_V^T G V,   G = [[I, [h]x], [-[h]x, m E]],

linear in theta = [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]:
F = A(V, dV) theta, with A the 6x10 matrix of ``body_regressor_symbolic``.
Every entry of A is a short signed sum of 21 monomials of the motion (dv, dw,
w_i v_j, w_i w_j); SymPy also gives those sums (and which entries repeat
others up to sign), so evaluating A for N samples is a few dozen vector
operations on the non-zeros only.
"""
from __future__ import annotations

from functools import lru_cache, partial

import numpy as np
import sympy as sp

from .kinematics import Workspace, combine, run

_W = sp.symbols("wx wy wz", real=True)
_V = sp.symbols("vx vy vz", real=True)
_DW = sp.symbols("dwx dwy dwz", real=True)
_DV = sp.symbols("dvx dvy dvz", real=True)
_THETA = sp.symbols("m hx hy hz Ixx Ixy Ixz Iyy Iyz Izz", real=True)
# monomials in the order body_regressor_blocks() computes them
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
def evaluation_plan() -> tuple:
    """How to evaluate A's structural non-zeros, entry by entry, from SymPy's A.

    One item per entry of ``_NONZERO``, in that order: ((r, c), terms), terms a list of
    (coefficient, source) with source ("monomial", k) for the k-th of ``_MONOMIALS`` or
    ("entry", (r', c')) for an earlier entry that this one equals up to the coefficient
    +-1 (A repeats the linear acceleration, up to sign, in its first-moment block).
    An entry with no terms is zero. Raises if A has a non-zero elsewhere or an entry
    that is not linear in the monomials, so the plan can never silently drop a term.
    """
    matrix = body_regressor_symbolic()
    if any(matrix[r, c] != 0 for r in range(6) for c in range(10) if (r, c) not in _NONZERO):
        raise AssertionError("A has a non-zero outside the expected structure")
    plan, seen = [], {}  # seen: expanded expression -> (sign, entry) that evaluates it
    for r, c in _NONZERO:
        expr = sp.expand(matrix[r, c])
        if expr == 0 or expr in seen:
            plan.append(((r, c), [] if expr == 0 else [(seen[expr][0], ("entry", seen[expr][1]))]))
            continue
        terms = []
        for mono, coef in expr.as_coefficients_dict().items():
            if mono not in _MONOMIALS:
                raise AssertionError(f"A[{r}, {c}] is not linear in the chosen monomials")
            terms.append((float(coef), ("monomial", _MONOMIALS.index(mono))))
        plan.append(((r, c), terms))
        seen.update({expr: (1.0, (r, c)), sp.expand(-expr): (-1.0, (r, c))})
    return tuple(plan)


def body_regressor_blocks(velocity: np.ndarray, acceleration: np.ndarray, work: Workspace | None = None,
                          ops: list | None = None):
    """A's non-zero blocks from body-frame spatial velocity/acceleration (6, ...) each.

    The trailing axes (...) are any batch, e.g. (bodies, samples). Returns (mass (3, ...) =
    A[3:6, 0], first_moment (6, 3, ...) = A[:, 1:4], inertia (3, 6, ...) = A[0:3, 4:10]),
    arrays of ``work`` if given. Units: rad/s, m/s, rad/s^2, m/s^2 (acceleration with
    -gravity included). Each entry is a few signed monomials (evaluation_plan), one ufunc
    call per term: far less work than a dense (39, 21) product, and the calls cover the
    whole batch at once. With ``ops`` the calls are appended to it instead of performed
    (bound to these arrays: running them later evaluates A for what they then hold).
    """
    todo = [] if ops is None else ops
    work = Workspace() if work is None else work
    batch = velocity.shape[1:]
    w, v = velocity[:3], velocity[3:]
    w_v = work.empty("w v", (3, 3, *batch))
    todo.append(partial(np.multiply, w[:, None], v[None], out=w_v))  # all 9 w_i v_j
    # the 6 distinct w_i w_k (i <= k), rows of _PAIRS in order, one call per i
    w_w = work.empty("w w", (6, *batch))
    todo.append(partial(np.multiply, w[0], w[0:], out=w_w[0:3]))
    todo.append(partial(np.multiply, w[1], w[1:], out=w_w[3:5]))
    todo.append(partial(np.multiply, w[2], w[2], out=w_w[5]))
    monomials = list(acceleration) + [w_v[i, j] for i in range(3) for j in range(3)] + list(w_w)
    mass = work.empty("mass", (3, *batch))
    first_moment = work.empty("first moment", (6, 3, *batch))
    inertia = work.empty("inertia", (3, 6, *batch))

    def entry(r, c):
        return mass[r - 3] if c == 0 else first_moment[r, c - 1] if c < 4 else inertia[r, c - 4]

    scratch = work.empty("scratch", batch)
    for (r, c), terms in evaluation_plan():
        sources = [(coef, monomials[k] if kind == "monomial" else entry(*k)) for coef, (kind, k) in terms]
        combine(entry(r, c), sources, scratch, todo)
    if ops is None:
        run(todo)
    return mass, first_moment, inertia
