"""The 6x10 rigid-body regressor A, evaluated from its plan derived once with SymPy.

For a body with spatial velocity V = (w, v) and spatial acceleration dV = (dw, dv), both in
its own frame at its origin (dv includes -gravity), the Newton-Euler wrench (n, f) about the
origin is F = A(V, dV) theta, theta = [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]
(``rigid_body_derivation`` derives A). Every entry of A is a short signed sum of 21 monomials
of the motion (dv, dw, w_i v_j, w_i w_k), and some entries repeat others up to sign; those
sums are the generated ``rigid_body_plan.EVALUATION_PLAN``, plain literals, so evaluating A
for N samples is a few dozen vector operations on the non-zeros only, with no SymPy at run
time.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from .kinematics import Workspace, combine, run
from .rigid_body_plan import EVALUATION_PLAN


def body_regressor_blocks(velocity: np.ndarray, acceleration: np.ndarray, work: Workspace | None = None,
                          ops: list | None = None):
    """A's non-zero blocks from body-frame spatial velocity/acceleration (6, ...) each.

    The trailing axes (...) are any batch, e.g. (bodies, samples). Returns (mass (3, ...) =
    A[3:6, 0], first_moment (6, 3, ...) = A[:, 1:4], inertia (3, 6, ...) = A[0:3, 4:10]),
    arrays of ``work`` if given. Units: rad/s, m/s, rad/s^2, m/s^2 (acceleration with
    -gravity included). Each entry is a few signed monomials (EVALUATION_PLAN), one ufunc
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
    # the 6 distinct w_i w_k (i <= k), row-major (rigid_body_plan.MONOMIALS), one call per i
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
    for (r, c), terms in EVALUATION_PLAN:
        sources = [(coef, monomials[k] if kind == "monomial" else entry(*k)) for coef, (kind, k) in terms]
        combine(entry(r, c), sources, scratch, todo)
    if ops is None:
        run(todo)
    return mass, first_moment, inertia
