"""Generated: the evaluation plan of the 6x10 rigid-body regressor A. Do not edit by hand.

Written by ``python -m sysid_core.dynamics.rigid_body_derivation`` from SymPy's derivation
(rigid_body_derivation.derive_evaluation_plan, whose docstring gives the form); run that
command again to regenerate. test/test_rigid_body_plan.py derives the plan afresh and
fails if this file differs from what the command would write.
"""

# the monomials that ("monomial", k) indexes, in the order rigid_body computes them
MONOMIALS = (
    "dwx", "dwy", "dwz", "dvx", "dvy", "dvz", "vx*wx", "vy*wx", "vz*wx",
    "vx*wy", "vy*wy", "vz*wy", "vx*wz", "vy*wz", "vz*wz", "wx**2", "wx*wy", "wx*wz",
    "wy**2", "wy*wz", "wz**2",
)

# ((row, column) of A, ((coefficient, source), ...)) per structural non-zero of A
EVALUATION_PLAN = (
    ((3, 0), ((1.0, ('monomial', 3)), (1.0, ('monomial', 11)), (-1.0, ('monomial', 13)))),
    ((4, 0), ((1.0, ('monomial', 4)), (-1.0, ('monomial', 8)), (1.0, ('monomial', 12)))),
    ((5, 0), ((1.0, ('monomial', 5)), (1.0, ('monomial', 7)), (-1.0, ('monomial', 9)))),
    ((0, 1), ()),
    ((0, 2), ((1.0, ('entry', (5, 0))),)),
    ((0, 3), ((-1.0, ('entry', (4, 0))),)),
    ((1, 1), ((-1.0, ('entry', (5, 0))),)),
    ((1, 2), ()),
    ((1, 3), ((1.0, ('entry', (3, 0))),)),
    ((2, 1), ((1.0, ('entry', (4, 0))),)),
    ((2, 2), ((-1.0, ('entry', (3, 0))),)),
    ((2, 3), ()),
    ((3, 1), ((-1.0, ('monomial', 18)), (-1.0, ('monomial', 20)))),
    ((3, 2), ((-1.0, ('monomial', 2)), (1.0, ('monomial', 16)))),
    ((3, 3), ((1.0, ('monomial', 1)), (1.0, ('monomial', 17)))),
    ((4, 1), ((1.0, ('monomial', 2)), (1.0, ('monomial', 16)))),
    ((4, 2), ((-1.0, ('monomial', 15)), (-1.0, ('monomial', 20)))),
    ((4, 3), ((-1.0, ('monomial', 0)), (1.0, ('monomial', 19)))),
    ((5, 1), ((-1.0, ('monomial', 1)), (1.0, ('monomial', 17)))),
    ((5, 2), ((1.0, ('monomial', 0)), (1.0, ('monomial', 19)))),
    ((5, 3), ((-1.0, ('monomial', 15)), (-1.0, ('monomial', 18)))),
    ((0, 4), ((1.0, ('monomial', 0)),)),
    ((0, 5), ((-1.0, ('entry', (5, 1))),)),
    ((0, 6), ((1.0, ('entry', (4, 1))),)),
    ((0, 7), ((-1.0, ('monomial', 19)),)),
    ((0, 8), ((1.0, ('monomial', 18)), (-1.0, ('monomial', 20)))),
    ((0, 9), ((-1.0, ('entry', (0, 7))),)),
    ((1, 4), ((1.0, ('monomial', 17)),)),
    ((1, 5), ((1.0, ('entry', (5, 2))),)),
    ((1, 6), ((-1.0, ('monomial', 15)), (1.0, ('monomial', 20)))),
    ((1, 7), ((1.0, ('monomial', 1)),)),
    ((1, 8), ((-1.0, ('entry', (3, 2))),)),
    ((1, 9), ((-1.0, ('entry', (1, 4))),)),
    ((2, 4), ((-1.0, ('monomial', 16)),)),
    ((2, 5), ((1.0, ('monomial', 15)), (-1.0, ('monomial', 18)))),
    ((2, 6), ((-1.0, ('entry', (4, 3))),)),
    ((2, 7), ((-1.0, ('entry', (2, 4))),)),
    ((2, 8), ((1.0, ('entry', (3, 3))),)),
    ((2, 9), ((1.0, ('monomial', 2)),)),
)
