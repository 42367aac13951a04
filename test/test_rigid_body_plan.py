"""The body regressor's generated plan: the committed file is SymPy's derivation, and the
run time never imports SymPy."""
import numpy as np
import sympy as sp

from conftest import BUNDLED, run_python
from sysid_core.dynamics import rigid_body_derivation as derivation
from sysid_core.dynamics.rigid_body import body_regressor_blocks
from sysid_core.dynamics.rigid_body_plan import EVALUATION_PLAN, MONOMIALS


def test_committed_plan_is_a_fresh_derivation():
    """Regenerate with `python -m sysid_core.dynamics.rigid_body_derivation` if this fails."""
    plan = derivation.derive_evaluation_plan()
    assert plan == EVALUATION_PLAN
    assert MONOMIALS == tuple(sp.sstr(mono) for mono in derivation.MONOMIALS)
    assert derivation.PLAN_MODULE.read_text() == derivation.render_plan_module(plan)


def test_blocks_from_the_plan_equal_sympys_matrix():
    """body_regressor_blocks against SymPy's A itself, evaluated numerically, at random motions."""
    symbols = derivation._W + derivation._V + derivation._DW + derivation._DV
    matrix = sp.lambdify(symbols, derivation.body_regressor_symbolic(), "numpy")
    rng = np.random.default_rng(11)
    velocity, acceleration = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    mass, first_moment, inertia = body_regressor_blocks(velocity, acceleration)
    for s in range(5):
        expected = np.asarray(matrix(*velocity[:, s], *acceleration[:, s]), dtype=float)
        got = np.zeros((6, 10))
        got[3:, 0], got[:, 1:4], got[:3, 4:] = mass[:, s], first_moment[..., s], inertia[..., s]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-14)


def test_regressor_runs_without_sympy():
    """`import sysid_core`, load_robot and the first regressor call import no SymPy."""
    done = run_python("-c", f"""
import sys
import numpy as np
from sysid_core import load_robot
robot = load_robot({str(BUNDLED[0])!r})
y = robot.regressor(np.zeros((3, robot.n_joints)), np.ones((3, robot.n_joints)), np.ones((3, robot.n_joints)))
assert np.isfinite(y).all() and np.abs(y).max() > 0
print("sympy" in sys.modules)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_blocks_of_some_rows_equal_the_full_ones():
    """Evaluating only some rows of A (what a body's projections read) writes those rows, with the
    entries they repeat, as the full evaluation does; the workspace first holds another motion's A,
    so an entry left out of the evaluation it needs would show as that stale value."""
    from sysid_core.dynamics.kinematics import Workspace
    rng = np.random.default_rng(12)
    velocity, acceleration = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    full = [block.copy() for block in body_regressor_blocks(velocity, acceleration)]
    for rows in ({2}, {0, 1, 2}, {0, 1}, {3, 4, 5}, {5}):
        work = Workspace()
        body_regressor_blocks(rng.normal(size=(6, 5)), rng.normal(size=(6, 5)), work)  # stale values
        mass, first_moment, inertia = body_regressor_blocks(velocity, acceleration, work, rows=rows)
        for r in rows:
            np.testing.assert_array_equal(first_moment[r], full[1][r])
            if r >= 3:
                np.testing.assert_array_equal(mass[r - 3], full[0][r - 3])
            else:
                np.testing.assert_array_equal(inertia[r], full[2][r])
