"""The joint-torque regressor against MuJoCo's own inverse dynamics (mj_inverse).

MuJoCo computes qfrc_inverse = M qacc + bias - passive - constraint forces with its own
algorithms; our Y @ theta must reproduce it from the model's standard parameters alone.
"""
import mujoco
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import BUNDLED, MODELS, ROBOTS
from sysid_core import load_robot
from sysid_core.dynamics.friction import JointModel, joint_regressor

MODELS_UNDER_TEST = BUNDLED + [MODELS / "tree_arm.xml", MODELS / "planar_2r.xml", MODELS / "planar_2r_vertical.xml"]


def _states(robot, rng, count, min_speed=0.0):
    """Random states strictly inside the joint limits (no limit constraint active)."""
    lower, upper = robot.joint_range.T
    lower = np.where(np.isfinite(lower), lower, -np.pi)
    upper = np.where(np.isfinite(upper), upper, np.pi)
    margin = 0.05 * (upper - lower)
    q = rng.uniform(lower + margin, upper - margin, (count, robot.n_joints))
    speed = rng.uniform(min_speed, 2.0, (count, robot.n_joints))
    dq = speed * rng.choice([-1.0, 1.0], (count, robot.n_joints))
    ddq = rng.uniform(-3.0, 3.0, (count, robot.n_joints))
    return q, dq, ddq


def _inverse(model, data, q, dq, ddq):
    data.qpos[:], data.qvel[:], data.qacc[:] = q, dq, ddq
    mujoco.mj_inverse(model, data)
    return data.qfrc_inverse.copy()


@pytest.mark.parametrize("path", MODELS_UNDER_TEST, ids=lambda p: p.stem)
def test_rigid_body_regressor_matches_mj_inverse(path):
    robot = load_robot(path)
    model = robot.model
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT  # rigid body + passive only
    data = mujoco.MjData(model)
    q, dq, ddq = _states(robot, np.random.default_rng(1), 64)
    tau = robot.regressor(q, dq, ddq) @ robot.nominal_parameters.reshape(-1)
    for i in range(len(q)):
        expected = _inverse(model, data, q[i], dq[i], ddq[i]) - robot.damping * dq[i] - robot.armature * ddq[i]
        np.testing.assert_allclose(tau[i], expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize("path", MODELS_UNDER_TEST, ids=lambda p: p.stem)
def test_joint_columns_match_damping_armature_and_friction_loss(path):
    """With friction loss sliding (saturated), the extra columns carry MuJoCo's joint terms."""
    robot = load_robot(path)
    model, data = robot.model, mujoco.MjData(robot.model)
    q, dq, ddq = _states(robot, np.random.default_rng(2), 64, min_speed=0.5)
    terms = JointModel(("coulomb", "viscous", "armature", "offset"))
    columns = np.concatenate([robot.regressor(q, dq, ddq), joint_regressor(dq, ddq, terms)], axis=2)
    theta = np.concatenate([robot.nominal_parameters.reshape(-1), robot.frictionloss, robot.damping,
                            robot.armature, np.zeros(robot.n_joints)])
    tau = columns @ theta
    compared = 0
    for i in range(len(q)):
        expected = _inverse(model, data, q[i], dq[i], ddq[i])
        friction_rows = data.efc_type[:data.nefc] == mujoco.mjtConstraint.mjCNSTR_FRICTION_DOF
        assert np.all(data.efc_type[:data.nefc][~friction_rows] != mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT)
        sliding = np.isin(data.efc_state[:data.nefc][friction_rows],
                          [mujoco.mjtConstraintState.mjCNSTRSTATE_LINEARNEG, mujoco.mjtConstraintState.mjCNSTRSTATE_LINEARPOS])
        if not sliding.all():
            continue  # MuJoCo's soft friction is in its quadratic zone: not Coulomb yet
        np.testing.assert_allclose(tau[i], expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
        compared += 1
    assert compared >= len(q) // 2, f"only {compared} of {len(q)} states had sliding friction"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 40))
def test_regressor_random_states_tree(seed, count):
    """Property: on a kinematic tree with slides, multi-joint bodies and ref offsets."""
    robot = load_robot(MODELS / "tree_arm.xml")
    model = robot.model
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    data = mujoco.MjData(model)
    q, dq, ddq = _states(robot, np.random.default_rng(seed), count)
    tau = robot.regressor(q, dq, ddq) @ robot.nominal_parameters.reshape(-1)
    for i in range(count):
        expected = _inverse(model, data, q[i], dq[i], ddq[i]) - robot.damping * dq[i] - robot.armature * ddq[i]
        np.testing.assert_allclose(tau[i], expected, rtol=1e-9, atol=1e-9 * max(np.abs(expected).max(), 1e-3))


def test_regressor_shape_and_block_structure():
    robot = load_robot(BUNDLED[0])
    q, dq, ddq = _states(robot, np.random.default_rng(3), 5)
    y = robot.regressor(q, dq, ddq)
    assert y.shape == (5, robot.n_joints, 10 * robot.n_bodies)
    # a joint cannot feel a body it does not carry: joint 7 sees only link 7
    assert np.all(y[:, -1, :10 * (robot.n_bodies - 1)] == 0.0)
    # a single sample as 1-D input equals the batched row
    np.testing.assert_allclose(robot.regressor(q[0], dq[0], ddq[0])[0], y[0], rtol=0, atol=1e-12)


def test_regressor_rejects_wrong_shapes():
    robot = load_robot(BUNDLED[0])
    with pytest.raises(ValueError, match="shape"):
        robot.regressor(np.zeros((3, 6)), np.zeros((3, 6)), np.zeros((3, 6)))


@pytest.mark.parametrize("num", [37, 3, 16, 1])
def test_regressor_blocks_match_one_block(monkeypatch, num):
    """Full blocks, a shorter last block ending at N (overlapping) or padded past N, and
    reused temporaries and plans, change nothing."""
    from sysid_core.dynamics import regressor as regressor_module
    robot = load_robot(MODELS / "tree_arm.xml")
    q, dq, ddq = _states(robot, np.random.default_rng(4), num)
    whole = robot.regressor(q, dq, ddq).copy()
    # 37: two blocks of 16 and one of 6 from sample 31; 3: one block of 4, padded
    monkeypatch.setattr(regressor_module, "BLOCK", 16)
    monkeypatch.setattr(regressor_module, "SMALLEST", 4)
    blocked = robot.regressor(q, dq, ddq)
    np.testing.assert_array_equal(blocked, whole)
    other = robot.regressor(q[::-1].copy(), dq[::-1].copy(), ddq[::-1].copy())  # same workspaces
    np.testing.assert_array_equal(blocked, whole)
    np.testing.assert_array_equal(other, whole[::-1])
    assert robot.regressor(q[:0], dq[:0], ddq[:0]).shape == (0, robot.n_joints, 10 * robot.n_bodies)


@pytest.mark.parametrize("num", [0, 1, 63, 64, 65, 1000, 1025, 8191, 8192, 8193, 15000, 60000])
def test_block_schedule_covers_the_samples_with_at_most_two_sizes(num):
    from sysid_core.dynamics.regressor import BLOCK, SMALLEST, block_schedule
    ladder = {BLOCK // 8 * k for k in range(1, 9)} | {BLOCK // 8 >> k for k in range(1, 12)}
    schedule = block_schedule(num)
    covered = np.zeros(num, dtype=int)
    for start, size in schedule:
        assert size in ladder and size >= SMALLEST
        covered[start:start + size] += 1
        assert start >= 0 and start + size <= max(num, size)
    assert covered.min(initial=1) >= 1
    assert len({size for _, size in schedule}) <= 2
    # what a last block computes beyond the samples: under BLOCK / 8, or under half of a small one
    assert sum(size for _, size in schedule) - num < max(BLOCK // 8, SMALLEST) or num < SMALLEST


def test_regressor_memory_does_not_grow_with_the_samples():
    """Temporaries are per thread and block size (the last KEPT sizes), whatever the number of samples."""
    from sysid_core.dynamics import regressor as regressor_module
    robot = load_robot(BUNDLED[0])

    def kept():
        return sum(a.nbytes for w in regressor_module._WORKSPACES.by_size.values() for a in w._arrays.values())

    sizes = []
    for num in (20000, 60000, 20000, 3000, 1000, 60000, 60000):
        q, dq, ddq = _states(robot, np.random.default_rng(num), num)
        robot.regressor(q, dq, ddq)
        sizes.append(kept())
        assert len(regressor_module._WORKSPACES.by_size) <= regressor_module.KEPT
    assert max(sizes) < 64 << 20
    assert sizes[-1] == sizes[-2]


def test_workspace_arrays_start_on_cache_lines():
    """Copies between workspace rows stay off the slow 4k-aliasing distances (see _aligned_empty)."""
    from sysid_core.dynamics.kinematics import Workspace
    work = Workspace()
    arrays = [work.empty(f"a{k}", (3, 2, 64 + 8 * k)) for k in range(6)] + [work.empty("b", (5, 64), 9)]
    for a in arrays:
        assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and a.dtype == np.float64


def test_regressor_threads_keep_their_own_temporaries():
    from concurrent.futures import ThreadPoolExecutor
    robots = [load_robot(MODELS / "tree_arm.xml"), load_robot(BUNDLED[0])]
    states = [_states(robot, np.random.default_rng(6), 9000) for robot in robots]
    alone = [robot.regressor(*s).copy() for robot, s in zip(robots, states)]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda i: robots[i % 2].regressor(*states[i % 2]).copy(), range(6)))
    for i, y in enumerate(together):
        np.testing.assert_array_equal(y, alone[i % 2])


def test_sin_cos_matches_numpy_to_an_ulp_or_two():
    from sysid_core.dynamics.kinematics import sin_cos
    rng = np.random.default_rng(8)
    # up to the table's exact range (|angle| < 2^20 h, about 1600 rad): one array, so one path
    angle = np.concatenate([rng.uniform(-4.0, 4.0, 20000), rng.uniform(-1500.0, 1500.0, 20000),
                            np.arange(-64, 65) * (np.pi / 8), [0.0, -0.0, 1e-300]])
    sin, cos, scratch = np.empty_like(angle), np.empty_like(angle), np.empty((5,) + angle.shape)
    sin_cos(angle, sin, cos, scratch)
    assert np.any(sin != np.sin(angle))  # the table's path, not NumPy's
    # oracle: NumPy's libm; two ulps of the unit circle's scale
    assert np.abs(sin - np.sin(angle)).max() <= 2.3e-16
    assert np.abs(cos - np.cos(angle)).max() <= 2.3e-16
    # beyond the table's exact range, and for NaN/inf, NumPy does the work
    special = np.array([1e7, -3e9, np.nan, np.inf])
    sin, cos, scratch = np.empty(4), np.empty(4), np.empty((5, 4))
    with np.errstate(invalid="ignore"):
        sin_cos(special, sin, cos, scratch)
        np.testing.assert_array_equal(sin, np.sin(special))
        np.testing.assert_array_equal(cos, np.cos(special))


def test_regressor_plans_follow_the_tree():
    """The recorded operations (per thread, for the last tree and block size) are redone for another tree."""
    robots = [load_robot(path) for path in (MODELS / "tree_arm.xml", BUNDLED[0], MODELS / "tree_arm.xml")]
    rng = np.random.default_rng(9)
    for robot in robots:
        q, dq, ddq = _states(robot, rng, 37)
        tau = robot.regressor(q, dq, ddq) @ robot.nominal_parameters.reshape(-1)
        again = robot.regressor(q, dq, ddq) @ robot.nominal_parameters.reshape(-1)
        np.testing.assert_array_equal(tau, again)
        model = robot.model
        model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
        data = mujoco.MjData(model)
        expected = np.array([_inverse(model, data, *s) for s in zip(q, dq, ddq)])
        expected -= robot.damping * dq + robot.armature * ddq
        np.testing.assert_allclose(tau, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


def test_regressor_follows_gravity_between_calls():
    """The base's state (which only gravity fills) is kept between blocks and calls: another
    gravity on the same tree, then the model's again, each matches mj_inverse under it."""
    from sysid_core.dynamics.regressor import joint_torque_regressor
    robot = load_robot(BUNDLED[0])
    model = robot.model
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    data = mujoco.MjData(model)
    q, dq, ddq = _states(robot, np.random.default_rng(10), 20)
    for gravity in (np.array([1.5, -2.0, -3.7]), robot.gravity, np.zeros(3)):
        tau = joint_torque_regressor(robot.tree, gravity, q, dq, ddq) @ robot.nominal_parameters.reshape(-1)
        model.opt.gravity[:] = gravity
        expected = np.array([_inverse(model, data, *s) for s in zip(q, dq, ddq)])
        expected -= robot.damping * dq + robot.armature * ddq
        np.testing.assert_allclose(tau, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


# panda_class: a block of columns no component of a subspace reaches (link 2's masses for joint 1)
@pytest.mark.parametrize("path", [BUNDLED[0], ROBOTS / "panda_class.xml", MODELS / "tree_arm.xml"],
                         ids=lambda p: p.stem)
def test_regressor_into_an_earlier_result_leaves_none_of_its_values(path):
    """``out``: an earlier result scribbled over with NaN is overwritten and returned; the new Y
    matches mj_inverse, is zero where a joint does not move a body, and equals bit for bit a
    result computed into fresh memory."""
    robot = load_robot(path)
    model = robot.model
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    data = mujoco.MjData(model)
    rng = np.random.default_rng(11)
    q, dq, ddq = _states(robot, rng, 50)
    earlier = robot.regressor(*_states(robot, rng, 50))
    earlier[...] = np.nan
    y = robot.regressor(q, dq, ddq, out=earlier)
    assert y.base is earlier.base
    fresh = robot.regressor(q, dq, ddq)
    assert not np.shares_memory(fresh, y)
    np.testing.assert_array_equal(y, fresh)
    support = np.repeat(robot.tree.support, 10, axis=1)  # (n, 10 nb): joint moves the column's body
    assert np.all(y[:, ~support] == 0.0)
    tau = y @ robot.nominal_parameters.reshape(-1)
    expected = np.array([_inverse(model, data, *s) for s in zip(q, dq, ddq)])
    expected -= robot.damping * dq + robot.armature * ddq
    np.testing.assert_allclose(tau, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


def test_regressor_refuses_an_out_that_is_not_an_earlier_result():
    robot = load_robot(BUNDLED[0])
    q, dq, ddq = _states(robot, np.random.default_rng(12), 30)
    shape = (30, robot.n_joints, 10 * robot.n_bodies)
    earlier = robot.regressor(q, dq, ddq)
    for wrong in (np.zeros(shape), earlier[:20], np.zeros(shape, dtype=np.float32), earlier.tolist()):
        with pytest.raises(ValueError, match="earlier result"):
            robot.regressor(q, dq, ddq, out=wrong)
    earlier.flags.writeable = False
    with pytest.raises(ValueError, match="earlier result"):
        robot.regressor(q, dq, ddq, out=earlier)
