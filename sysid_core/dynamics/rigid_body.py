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

import numpy as np

from .kinematics import Workspace, call, combine, run
from .rigid_body_plan import EVALUATION_PLAN

_W_V, _W_W = 6, 15  # indices of the first w_i v_j and of the first w_i w_k in MONOMIALS
_PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))  # the w_i w_k, in MONOMIALS order
_PLAN = dict(EVALUATION_PLAN)


def _wanted(rows) -> list:
    """The plan's entries (in plan order) that rows of A need: theirs, and those they repeat."""
    wanted = {entry for entry in _PLAN if entry[0] in rows}
    todo = list(wanted)
    while todo:
        for _, (kind, source) in _PLAN[todo.pop()]:
            if kind == "entry" and source not in wanted:
                wanted.add(source)
                todo.append(source)
    return [entry for entry in _PLAN if entry in wanted]


def _slice(indices: list):
    """Ascending indices as a slice when evenly spaced, else None."""
    step = indices[1] - indices[0] if len(indices) > 1 else 1
    if step > 0 and indices == list(range(indices[0], indices[-1] + 1, step)):
        return slice(indices[0], indices[-1] + 1, step)
    return None


def _products(first: np.ndarray, second: np.ndarray, out: np.ndarray, pairs: list, todo: list) -> None:
    """out[k] = first[i] * second[j] for (k, i, j) in pairs: one call per i where the j and k
    run evenly (a slice each), else one per product."""
    for i in sorted({i for _, i, _ in pairs}):
        ks, js = zip(*sorted((k, j) for k, i_, j in pairs if i_ == i))
        k_slice, j_slice = _slice(list(ks)), _slice(list(js))
        if k_slice is not None and j_slice is not None:
            todo.append(call(np.multiply, first[i], second[j_slice], out[k_slice]))
        else:
            todo.extend(call(np.multiply, first[i], second[j], out[k]) for k, j in zip(ks, js))


def body_regressor_blocks(velocity: np.ndarray, acceleration: np.ndarray, work: Workspace | None = None,
                          ops: list | None = None, rows=range(6)):
    """A's non-zero blocks from body-frame spatial velocity/acceleration (6, ...) each.

    The trailing axes (...) are any batch, e.g. (bodies, samples). Returns (mass (3, ...) =
    A[3:6, 0], first_moment (6, 3, ...) = A[:, 1:4], inertia (3, 6, ...) = A[0:3, 4:10]),
    arrays of ``work`` if given. Units: rad/s, m/s, rad/s^2, m/s^2 (acceleration with
    -gravity included). Each entry is a few signed monomials (EVALUATION_PLAN), one ufunc
    call per term: far less work than a dense (39, 21) product, and the calls cover the
    whole batch at once. With ``ops`` the calls are appended to it instead of performed
    (bound to these arrays: running them later evaluates A for what they then hold).
    Only the entries of A's ``rows`` (and those they repeat) are written: a caller whose
    motion subspaces are zero in some components never reads the others.
    """
    todo = [] if ops is None else ops
    work = Workspace() if work is None else work
    batch = velocity.shape[1:]
    w, v = velocity[:3], velocity[3:]
    mass = work.empty("mass", (3, *batch))
    first_moment = work.empty("first moment", (6, 3, *batch))
    inertia = work.empty("inertia", (3, 6, *batch))

    def entry(r, c):
        return mass[r - 3] if c == 0 else first_moment[r, c - 1] if c < 4 else inertia[r, c - 4]

    wanted = _wanted(rows)
    used = {k for r_c in wanted for _, (kind, k) in _PLAN[r_c] if kind == "monomial"}
    # the products among the monomials, only those used (A's entries are cross products:
    # no w_i v_i), a call per w_i for the w_j, v_j it multiplies; MONOMIALS orders both row-major
    w_v = work.empty("w v", (3, 3, *batch))
    _products(w, v, w_v.reshape(9, *batch), [(k - _W_V, (k - _W_V) // 3, (k - _W_V) % 3) for k in used
                                             if _W_V <= k < _W_W], todo)
    w_w = work.empty("w w", (6, *batch))
    _products(w, w, w_w, [(k - _W_W, *_PAIRS[k - _W_W]) for k in used if k >= _W_W], todo)
    monomials = list(acceleration) + [w_v[i, j] for i in range(3) for j in range(3)] + list(w_w)
    scratch = work.empty("scratch", batch)
    for r, c in wanted:
        terms = _PLAN[r, c]
        if not terms:  # a structural zero: written now, once; nothing else writes these arrays
            entry(r, c)[...] = 0.0
            continue
        sources = [(coef, monomials[k] if kind == "monomial" else entry(*k)) for coef, (kind, k) in terms]
        combine(entry(r, c), sources, scratch, todo)
    if ops is None:
        run(todo)
    return mass, first_moment, inertia
