"""Joint physics beyond the rigid bodies, against MuJoCo itself.

Oracles: ``mj_inverse`` (springs, and frictionloss as the soft constraint it is, in and out of
its steep zone) and ``mj_step`` (damping applied at the end-of-step velocity by the implicit
integrators), on published arm models of the corpus.
"""
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


def test_inverse_inertia_diagonal_is_dof_invweight0():
    for name in ("gen3", "sawyer", "koch_low_cost"):
        robot = load_robot(BY_NAME[name].path)
        np.testing.assert_allclose(robot.inverse_inertia_diagonal(), robot.model.dof_invweight0, rtol=1e-10)


@pytest.mark.parametrize("name, integrator, eulerdamp", [("ur10e", "Euler", True), ("ur10e", "Euler", False),
                                                         ("panda", "implicitfast", True)])
def test_forward_simulation_applies_damping_at_the_end_of_step_velocity(name, integrator, eulerdamp):
    """A published arm (heavy damping: 350 N m s/rad on ur10e's shoulder) driven by known torques
    through mj_step: the torque equals our inverse dynamics at the step's acceleration
    (v_next - v) / h with damping at v + h a, an extra armature of h * damping, for Euler and
    implicitfast; at v when the eulerdamp flag is disabled. (Arms without frictionloss: in
    forward simulation its constraint sees the acceleration before the implicit damping
    update, a second-order difference this model leaves out; so does the implicit
    integrator's Coriolis derivative.)"""
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
    if eulerdamp:  # what mj_inverse's physics misses is exactly the extra armature h * damping
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
