"""Joint physics beyond the rigid bodies, against MuJoCo itself.

Oracles: ``mj_inverse`` (springs, and frictionloss as the soft constraint it is, in and out of
its steep zone) and ``mj_step`` (damping applied at the end-of-step velocity by the implicit
integrators), on published arm models of the corpus.
"""
from pathlib import Path

import mujoco
import numpy as np
import pytest

from arm_corpus import BY_NAME
from sysid_core.dynamics.joint_physics import MujocoPhysics
from sysid_core.dynamics.model import load_robot


def _states(model, count, seed):
    """Random states inside the joint ranges (clear of the limit constraints), with velocities
    near zero for a third of the joints, where frictionloss is a steep linear function."""
    rng = np.random.default_rng(seed)
    lo, hi = np.where(model.jnt_limited[:, None], model.jnt_range, [-3.0, 3.0]).T
    q = rng.uniform(0.9 * lo + 0.1 * hi, 0.1 * lo + 0.9 * hi, (count, model.nv))
    dq = rng.normal(0.0, 1.0, (count, model.nv)) * rng.choice([1e-3, 1.0], (count, model.nv), p=[1 / 3, 2 / 3])
    ddq = rng.normal(0.0, 2.0, (count, model.nv))
    return q, dq, ddq


def _mj_inverse(model, q, dq, ddq):
    data = mujoco.MjData(model)
    tau = np.empty_like(q)
    for i in range(len(q)):
        data.qpos[:], data.qvel[:], data.qacc[:] = q[i], dq[i], ddq[i]
        mujoco.mj_inverse(model, data)
        tau[i] = data.qfrc_inverse
    return tau


@pytest.mark.parametrize("name", ["fr3", "piper", "z1", "vx300s", "koch_low_cost"])
def test_inverse_dynamics_with_mujoco_physics_is_mj_inverse(name):
    """Springs (piper: stiffness toward springref) and frictionloss as MuJoCo's constraint force
    clip(D (ddq + B dq), -f, f): equal to mj_inverse to round-off; the hardware model
    (f sign(dq)) is not, near rest."""
    robot = load_robot(BY_NAME[name].path)
    q, dq, ddq = _states(robot.model, 300, seed=1)
    truth = _mj_inverse(robot.model, q, dq, ddq)
    ours = robot.inverse_dynamics(q, dq, ddq, physics=MujocoPhysics.inverse(robot.model))
    scale = np.abs(truth).max()
    assert np.abs(ours - truth).max() < 1e-10 * scale
    steep = np.abs(robot.inverse_dynamics(q, dq, ddq) - truth).max(axis=0)
    assert steep.max() > 0.5 * robot.frictionloss.max()  # the soft constraint is far from a step near rest


def test_mass_matrix_is_mujocos():
    """Robot.mass_matrix against mj_fullM at random states of two arms and of a tree with a
    slide, two hinges in one body, a joint ref off zero and a welded body."""
    for path in (BY_NAME["z1"].path, BY_NAME["iiwa14"].path, Path(__file__).parent / "models" / "tree_arm.xml"):
        robot = load_robot(path)
        q, _, _ = _states(robot.model, 5, seed=2)
        data = mujoco.MjData(robot.model)
        for qk, ours in zip(q, robot.mass_matrix(q)):
            data.qpos[:] = qk
            mujoco.mj_forward(robot.model, data)
            full = np.zeros((robot.model.nv, robot.model.nv))
            mujoco.mj_fullM(robot.model, data, full)
            np.testing.assert_allclose(ours, full, rtol=1e-9, atol=1e-12 * np.abs(full).max())


def test_mass_matrix_of_any_parameters_is_the_regressors():
    """For parameters and armature no real arm has (what an identification passes through),
    M(q) is still the joint torque of a unit acceleration at rest less gravity's, from the
    regressor (itself checked against mj_inverse)."""
    rng = np.random.default_rng(5)
    for path in (BY_NAME["iiwa14"].path, Path(__file__).parent / "models" / "tree_arm.xml"):
        robot = load_robot(path)
        q, _, _ = _states(robot.model, 6, seed=3)
        parameters = robot.nominal_parameters + rng.normal(0.0, 1.0, robot.nominal_parameters.shape)
        armature = rng.uniform(-1.0, 1.0, robot.n_joints)
        rest = np.zeros_like(q)
        theta = parameters.reshape(-1)
        gravity = robot.regressor(q, rest, rest) @ theta
        expected = np.stack([robot.regressor(q, rest, np.broadcast_to(e, q.shape)) @ theta - gravity
                             for e in np.eye(robot.n_joints)], axis=2) + np.diag(armature)
        ours = robot.mass_matrix(q, parameters, armature)
        np.testing.assert_allclose(ours, 0.5 * (expected + np.swapaxes(expected, 1, 2)), rtol=0,
                                   atol=1e-12 * np.abs(expected).max())
        np.testing.assert_array_equal(ours, np.swapaxes(ours, 1, 2))


def test_inverse_inertia_gradient_is_the_derivative_of_mujocos_invweight0():
    """d dof_invweight0 / d (inertial parameters, armature) against central differences of
    MuJoCo's own dof_invweight0 (mj_setConst after changing a body's mass and the armature)."""
    robot = load_robot(BY_NAME["z1"].path)
    model = robot.model
    by_inertia, by_armature = robot.inverse_inertia_gradient()
    body = 3  # a link with nothing welded to it (the terminal body has its gripper merged in)
    mujoco_body = model.body(robot.body_names[body]).id
    theta = robot.nominal_parameters[body]

    def invweight(mass_step=0.0, armature_step=0.0, dof=0):
        changed = mujoco.MjModel.from_xml_path(str(BY_NAME["z1"].path))
        # scaling a body's mass scales all ten of its parameters (its CoM and inertia per kg kept)
        changed.body_mass[mujoco_body] *= 1.0 + mass_step
        changed.body_inertia[mujoco_body] *= 1.0 + mass_step
        changed.dof_armature[dof] += armature_step
        mujoco.mj_setConst(changed, mujoco.MjData(changed))
        return changed.dof_invweight0.copy()

    step = 1e-5
    numeric = (invweight(step) - invweight(-step)) / (2 * step)
    np.testing.assert_allclose(by_inertia[:, 10 * body:10 * body + 10] @ theta, numeric, rtol=1e-4)
    for dof in (0, 5):  # a step relative to the joint's own inertia (the wrist's is 0.4 g m^2)
        small = step / model.dof_invweight0[dof]
        numeric = (invweight(armature_step=small, dof=dof) - invweight(armature_step=-small, dof=dof)) / (2 * small)
        np.testing.assert_allclose(by_armature[:, dof], numeric, rtol=1e-4, atol=1e-10 * np.abs(numeric).max())


def test_inverse_inertia_diagonal_is_dof_invweight0():
    for name in ("gen3", "sawyer", "koch_low_cost"):
        robot = load_robot(BY_NAME[name].path)
        np.testing.assert_allclose(robot.inverse_inertia_diagonal(), robot.model.dof_invweight0, rtol=1e-10)


@pytest.mark.parametrize("name, integrator, eulerdamp", [("ur10e", "Euler", True), ("ur10e", "Euler", False),
                                                         ("panda", "implicitfast", True), ("z1", "Euler", True),
                                                         ("koch_low_cost", "Euler", True)])
def test_forward_simulation_applies_damping_at_the_end_of_step_velocity(name, integrator, eulerdamp):
    """A published arm (heavy damping: 350 N m s/rad on ur10e's shoulder) driven by known torques
    through mj_step: the torque equals our inverse dynamics at the step's acceleration
    (v_next - v) / h with damping at v + h a, an extra armature of h * damping, for Euler and
    implicitfast; at v when the eulerdamp flag is disabled. On arms with frictionloss (z1's
    light wrist without armature, koch's heavy armature) the constraint force is the one at the
    acceleration before the damping step. (The implicit integrator's Coriolis derivative is
    left out: not tested.)"""
    model = mujoco.MjModel.from_xml_path(str(BY_NAME[name].path))
    model.opt.integrator = {"Euler": 0, "implicitfast": 3}[integrator]
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_ACTUATION) | int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    if not eulerdamp:
        model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    robot = load_robot(BY_NAME[name].path)
    physics = MujocoPhysics.simulation(model)
    assert physics.damping_delay == (model.opt.timestep if eulerdamp else 0.0)
    data = mujoco.MjData(model)
    data.qpos[:] = np.mean(np.where(model.jnt_limited[:, None], model.jnt_range, 0.0), axis=1)
    h = model.opt.timestep
    phases = np.random.default_rng(3).uniform(0, 2 * np.pi, model.nv)
    gravity = robot.inverse_dynamics(data.qpos[None], np.zeros((1, model.nv)), np.zeros((1, model.nv)))[0]
    q, dq, acc, tau = [], [], [], []
    for k in range(200):
        applied = gravity + 2.0 * np.sin(8 * k * h + phases) * np.maximum(robot.damping, 1.0)
        data.qfrc_applied[:] = applied
        q.append(data.qpos.copy())
        dq.append(data.qvel.copy())
        mujoco.mj_step(model, data)
        acc.append((data.qvel - dq[-1]) / h)
        tau.append(applied)
    q, dq, acc, tau = map(np.array, (q, dq, acc, tau))
    ours = robot.inverse_dynamics(q, dq, acc, physics=physics)
    assert np.abs(ours - tau).max() < 1e-9 * np.abs(tau).max()
    if robot.frictionloss.any():  # the constraint at the integrator's own acceleration misses
        law, level = robot.frictionloss_constraint, robot.frictionloss
        at_acc = level * law.shape(dq, acc, level, model.dof_invweight0, h)
        seen = physics.constraint_acceleration(acc, robot.mass_matrix(q), robot.damping)
        at_seen = level * law.shape(dq, seen, level, model.dof_invweight0, h)
        assert np.abs(at_acc - at_seen).max() > 1e-3 * np.abs(tau).max()
    elif eulerdamp:  # what mj_inverse's physics misses is exactly the extra armature h * damping
        without = robot.inverse_dynamics(q, dq, acc, physics=MujocoPhysics.inverse(model))
        np.testing.assert_allclose(tau - without, h * robot.damping * acc, atol=1e-9 * np.abs(tau).max())
        assert np.abs(h * robot.damping * acc).max() > 1e-3


def test_mujoco_physics_from_the_model_and_its_flags():
    model = mujoco.MjModel.from_xml_path(str(BY_NAME["ur10e"].path))  # Euler
    assert MujocoPhysics.inverse(model).damping_delay == 0.0
    assert MujocoPhysics.simulation(model, 1e-3).damping_delay == 1e-3
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    assert MujocoPhysics.simulation(model).damping_delay == 0.0
    with pytest.raises(ValueError, match="timestep"):
        MujocoPhysics(timestep=0.0)
    with pytest.raises(ValueError, match="integrator"):
        MujocoPhysics(timestep=1e-3, integrator="verlet")


def test_a_simulated_result_on_hardware_is_a_real_joints_model():
    """A terminal-scope identification of data MuJoCo made (its frictionloss a soft constraint,
    the armature the file's, not identified) as a real arm's model (``on_hardware``): the rigid
    bodies of the result (the regressor, an oracle checked against mj_inverse) plus each joint's
    armature from the file, the identified Coulomb step, viscous term and the file's springs."""
    from sysid_core.excitation.multisine import multisine
    from sysid_core.identification.identify import IdentificationConfig, identify, on_hardware, predict_torque
    from sysid_core.simulation import ideal_recording
    robot = load_robot(BY_NAME["xarm7"].path)
    plan = multisine(robot.joint_range, 3.0, 100.0, seed=0, max_velocity=1.0)
    config = IdentificationConfig(physics=MujocoPhysics.inverse(robot.model))
    result = identify(robot, ideal_recording(robot.model, plan), config)
    assert not any(name.endswith(".armature") for name in result.column_names)
    hardware = on_hardware(robot, result)
    assert hardware.config.physics is None and len(hardware.column_names) > len(result.column_names)
    q, dq, ddq = plan.q[5:-5], plan.dq[5:-5], plan.ddq[5:-5]
    expected = (robot.regressor(q, dq, ddq) @ result.body_parameters.reshape(-1) + robot.armature * ddq
                + result.coulomb * np.sign(dq) + result.viscous * dq + robot.stiffness * (q - robot.springref))
    np.testing.assert_allclose(predict_torque(robot, hardware, q, dq, ddq), expected, rtol=1e-9, atol=1e-9)
