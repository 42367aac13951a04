"""The 6x10 rigid-body regressor derived with SymPy, and the generator of its evaluation plan.

For a body with spatial velocity V = (w, v) and spatial acceleration dV = (dw, dv), both in
its own frame at its origin (dv includes -gravity), the Newton-Euler wrench (n, f) about the
origin is

    F = G dV - ad_V^T G V,   G = [[I, [h]x], [-[h]x, m E]],

linear in theta = [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]: F = A(V, dV) theta. Every
entry of A is a short signed sum of 21 monomials of the motion (dv, dw, w_i v_j, w_i w_k);
SymPy gives those sums, and which entries repeat others up to sign.

The derivation takes about a second (importing SymPy most of it), so it is not done at run
time: ``python -m sysid_core.dynamics.rigid_body_derivation`` writes the plan as plain
literals to ``rigid_body_plan.py``, which ``rigid_body`` imports; a test derives it afresh
and checks that the committed file is exactly what this module writes. Only that test and
this command import SymPy.
"""
from __future__ import annotations

import sys
from pathlib import Path

import sympy as sp

PLAN_MODULE = Path(__file__).with_name("rigid_body_plan.py")
COMMAND = "python -m sysid_core.dynamics.rigid_body_derivation"

_W = sp.symbols("wx wy wz", real=True)
_V = sp.symbols("vx vy vz", real=True)
_DW = sp.symbols("dwx dwy dwz", real=True)
_DV = sp.symbols("dvx dvy dvz", real=True)
_THETA = sp.symbols("m hx hy hz Ixx Ixy Ixz Iyy Iyz Izz", real=True)
# the monomials in the order rigid_body.body_regressor_blocks computes them: dw, dv, the 9
# w_i v_j (row-major), the 6 w_i w_k with i <= k (row-major)
PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
MONOMIALS = (list(_DW) + list(_DV) + [w * v for w in _W for v in _V]
             + [_W[i] * _W[k] for i, k in PAIRS])
# A's structural non-zeros: the mass column acts only on the force rows, the inertia
# columns only on the moment rows. Skipping the zeros saves a third of the work.
NONZERO = ([(r, 0) for r in range(3, 6)] + [(r, c) for r in range(6) for c in range(1, 4)]
           + [(r, c) for r in range(3) for c in range(4, 10)])


def _skew(x) -> sp.Matrix:
    return sp.Matrix([[0, -x[2], x[1]], [x[2], 0, -x[0]], [-x[1], x[0], 0]])


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


def derive_evaluation_plan() -> tuple:
    """How to evaluate A's structural non-zeros, entry by entry, from SymPy's A.

    One item per entry of ``NONZERO``, in that order: ((r, c), terms), terms a tuple of
    (coefficient, source) with source ("monomial", k) for the k-th of ``MONOMIALS`` or
    ("entry", (r', c')) for an earlier entry that this one equals up to the coefficient
    +-1 (A repeats the linear acceleration, up to sign, in its first-moment block); a
    monomial sum's terms are in monomial order, so the plan does not depend on SymPy's
    internal term order. An entry with no terms is zero. Raises if A has a non-zero
    elsewhere or an entry that is not linear in the monomials, so the plan can never
    silently drop a term.
    """
    matrix = body_regressor_symbolic()
    if any(matrix[r, c] != 0 for r in range(6) for c in range(10) if (r, c) not in NONZERO):
        raise AssertionError("A has a non-zero outside the expected structure")
    plan, seen = [], {}  # seen: expanded expression -> (sign, entry) that evaluates it
    for r, c in NONZERO:
        expr = sp.expand(matrix[r, c])
        if expr == 0 or expr in seen:
            plan.append(((r, c), () if expr == 0 else ((seen[expr][0], ("entry", seen[expr][1])),)))
            continue
        terms = []
        for mono, coef in expr.as_coefficients_dict().items():
            if mono not in MONOMIALS:
                raise AssertionError(f"A[{r}, {c}] is not linear in the chosen monomials")
            terms.append((float(coef), ("monomial", MONOMIALS.index(mono))))
        plan.append(((r, c), tuple(sorted(terms, key=lambda term: term[1][1]))))
        seen.update({expr: (1.0, (r, c)), sp.expand(-expr): (-1.0, (r, c))})
    return tuple(plan)


def render_plan_module(plan: tuple) -> str:
    """The text of rigid_body_plan.py for ``plan`` (derive_evaluation_plan's form)."""
    names = [f'"{sp.sstr(mono)}",' for mono in MONOMIALS]
    lines = [
        '"""Generated: the evaluation plan of the 6x10 rigid-body regressor A. Do not edit by hand.',
        "",
        f"Written by ``{COMMAND}`` from SymPy's derivation",
        "(rigid_body_derivation.derive_evaluation_plan, whose docstring gives the form); run that",
        "command again to regenerate. test/test_rigid_body_plan.py derives the plan afresh and",
        "fails if this file differs from what the command would write.",
        '"""',
        "",
        "# the monomials that (\"monomial\", k) indexes, in the order rigid_body computes them",
        "MONOMIALS = (",
        *("    " + " ".join(names[k:k + 9]) for k in range(0, len(names), 9)),
        ")",
        "",
        "# ((row, column) of A, ((coefficient, source), ...)) per structural non-zero of A",
        "EVALUATION_PLAN = (",
    ]
    lines += [f"    ({entry!r}, {terms!r})," for entry, terms in plan]
    lines.append(")")
    return "\n".join(lines) + "\n"


def main() -> int:
    PLAN_MODULE.write_text(render_plan_module(derive_evaluation_plan()))
    print(f"wrote {PLAN_MODULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
