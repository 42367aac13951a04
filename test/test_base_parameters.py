"""Base parameters on arms whose base set is known in closed form."""
import mujoco
import numpy as np
import pytest

from arm_corpus import arm
from conftest import MODELS, ROBOTS
from sysid_core import IdentificationError, load_robot
from sysid_core.dynamics.friction import JointModel
from sysid_core.dynamics.inertia import PARAMETER_NAMES
from sysid_core.identification.base_parameters import base_parameters
from sysid_core.identification.identify import IdentificationConfig, base_regressor, structural_base_parameters

L1 = 0.5  # distance joint1 -> joint2 along link1's x axis in the planar models


def _column(body, name):
    return 10 * (body - 1) + PARAMETER_NAMES.index(name)


def _planar_base(path):
    robot = load_robot(path)
    rng = np.random.default_rng(0)
    q = rng.uniform(-3, 3, (300, 2))
    dq, ddq = rng.uniform(-2, 2, (300, 2)), rng.uniform(-5, 5, (300, 2))
    y = robot.regressor(q, dq, ddq)
    names = tuple(f"{b}.{p}" for b in robot.body_names for p in PARAMETER_NAMES)
    return base_parameters(np.ascontiguousarray(y).reshape(-1, 20), names)


def _known_rows(rows):
    out = np.zeros((len(rows), 20))
    for i, terms in enumerate(rows):
        for (body, name), coeff in terms.items():
            out[i, _column(body, name)] = coeff
    return out


def _same_row_space(a, b):
    return np.linalg.matrix_rank(np.vstack([a, b]), tol=1e-8) == np.linalg.matrix_rank(a, tol=1e-8) == len(b)


def test_planar_2r_horizontal_has_four_classical_base_parameters():
    base = _planar_base(MODELS / "planar_2r.xml")
    assert base.rank == 4
    known = _known_rows([{(1, "Izz"): 1.0, (2, "m"): L1**2}, {(2, "hx"): 1.0}, {(2, "hy"): 1.0}, {(2, "Izz"): 1.0}])
    assert _same_row_space(base.projection, known)


def test_planar_2r_vertical_gravity_adds_first_moments_of_link1():
    base = _planar_base(MODELS / "planar_2r_vertical.xml")
    assert base.rank == 6
    known = _known_rows([{(1, "Izz"): 1.0, (2, "m"): L1**2}, {(1, "hx"): 1.0, (2, "m"): L1}, {(1, "hy"): 1.0},
                         {(2, "hx"): 1.0}, {(2, "hy"): 1.0}, {(2, "Izz"): 1.0}])
    assert _same_row_space(base.projection, known)
    # the expression of the grouped inertia names its partner with the exact coefficient
    grouped = [e for e in base.expressions if "link1.Izz" in e and "link2.m" in e]
    assert grouped and ("0.25*link2.m" in grouped[0] or "4*link1.Izz" in grouped[0])


def test_projection_reproduces_regressor():
    """W theta == W[:, independent] @ (P theta) for any theta: the definition of base parameters."""
    robot = load_robot(ROBOTS / "panda_class.xml")
    rng = np.random.default_rng(5)
    q, dq, ddq = rng.uniform(-1, 1, (200, 7)), rng.uniform(-1, 1, (200, 7)), rng.uniform(-1, 1, (200, 7))
    w = np.ascontiguousarray(robot.regressor(q, dq, ddq)).reshape(-1, 70)
    base = base_parameters(w, tuple(str(i) for i in range(70)))
    theta = rng.standard_normal(70)
    np.testing.assert_allclose(w[:, base.independent] @ (base.projection @ theta), w @ theta, rtol=1e-8, atol=1e-8)


def test_seven_dof_full_scope_counts():
    """Full scope of a 7R arm with a vertical first axis: 10*7 inertial + 3*7 joint columns.

    The first link contributes only Izz (plus its armature grouping), so the rank is well
    below 91; terminal scope is full rank (10 + 3*7) because all joints see the payload.
    """
    robot = load_robot(ROBOTS / "panda_class.xml")
    full = structural_base_parameters(robot, IdentificationConfig(scope="full"))
    terminal = structural_base_parameters(robot, IdentificationConfig(scope="terminal"))
    assert terminal.rank == 10 + 21
    assert 40 <= full.rank < 91
    # joint-1 armature and link1.Izz are one combination on a vertical first axis
    assert not ("link1.Izz" in full.names and "joint1.armature" in full.names)


def test_holding_a_column_takes_it_out_of_its_combinations():
    """Columns a, b, c = a + 2 b and d alone: c is dependent (in the base parameters of a and b),
    d its own. Held, c leaves both combinations (its torque is then known: the base regressor of
    the rest reproduces y - W_c theta_c), d goes with its base parameter; a, which stands for
    its group, cannot be held."""
    rng = np.random.default_rng(0)
    a, b, d = rng.normal(size=(3, 200))
    regressor = np.column_stack([a, b, a + 2 * b, d])
    names = ("a", "b", "c", "d")
    base = base_parameters(regressor, names)
    assert base.names == ("a", "b", "d") and base.projection[:, 2].tolist() == pytest.approx([1.0, 2.0, 0.0])
    held, out = base.holding(["c", "d", "a"], names)
    assert set(out) == {"c", "d"} and held.names == ("a", "b")
    theta = rng.normal(size=4)
    np.testing.assert_allclose(regressor[:, held.independent] @ (held.projection @ theta),
                               regressor @ theta - regressor[:, 2] * theta[2] - regressor[:, 3] * theta[3])
    assert not any("c" in e or "d" in e for e in held.expressions)
    assert base.holding(["x"], names) == (base, ())


def test_zero_regressor_is_an_error():
    with pytest.raises(IdentificationError, match="zero"):
        base_parameters(np.zeros((10, 3)), ("a", "b", "c"))


def test_a_rounded_right_angle_does_not_split_a_group():
    """Piper's published model writes joint 2's right angle to joint 1 as a rounded quaternion
    (0.499998, 0.5, -0.500002, -0.5): the axes are 4e-6 rad off perpendicular (MuJoCo's own
    kinematics), which keeps link2.Izz and joint2.armature apart by a residual of 3e-6 of their
    columns. They are one base parameter, and the base regressor is well conditioned; a residual
    of a few percent is a parameter of its own."""
    robot = load_robot(arm("piper").path)
    data = mujoco.MjData(robot.model)
    mujoco.mj_kinematics(robot.model, data)
    assert 1e-6 < abs(data.xaxis[0] @ data.xaxis[1]) < 1e-5
    config = IdentificationConfig(scope="full", joint_model=JointModel(("coulomb", "viscous")))
    base = structural_base_parameters(robot, config)
    assert not ("link2.Izz" in base.names and "joint2.armature" in base.names)
    gen = np.random.default_rng(0)
    q = gen.uniform(robot.joint_range[:, 0], robot.joint_range[:, 1], (400, robot.n_joints))
    dq, ddq = gen.uniform(-2, 2, q.shape), gen.uniform(-5, 5, q.shape)
    cols, _ = base_regressor(robot, config, q, dq, ddq, base=base)
    cols = cols.reshape(-1, base.rank)
    s = np.linalg.svd(cols / np.linalg.norm(cols, axis=0), compute_uv=False)
    assert s[0] / s[-1] < 100
    # the same split on synthetic columns: b = a + e c, c orthogonal to a
    a, c = gen.standard_normal(500), gen.standard_normal(500)
    other = gen.standard_normal((500, 3))
    for e, rank in ((3e-6, 4), (0.05, 5)):
        w = np.column_stack([a, a + e * c, other])
        assert base_parameters(w, ("a", "b", "x", "y", "z")).rank == rank
