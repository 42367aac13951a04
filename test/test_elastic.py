"""Elastic transmissions: the simulated elastic arm against MuJoCo's rigid inverse dynamics, and
the stiffness identified from its double-encoder recording against the truth it was built with."""

import mujoco
import numpy as np
import pytest

from conftest import ROBOTS, inverse_dynamics_mujoco
from sysid_core.cli import main
from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError, TrackingError
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.recording import Recording
from sysid_core.identification.transmission import identify_transmission
from sysid_core.simulation import MeasurementNoise, default_gains
from sysid_core.simulation.elastic import ROTOR_SUFFIX, Gearbox, Transmission, elastic_plant, simulate_elastic
from sysid_core.simulation.simulated_arm import SimulatedArm

REAL_ARMS = ROBOTS.parent.parent / "test" / "models" / "real_arms"
OPENARM = ROBOTS / "openarm_class.xml"


def _rigid_links(path) -> mujoco.MjModel:
    """The file's arm with the joints' own terms (armature, damping, friction loss) and every
    constraint off: what the link side of an elastic arm is."""
    model = mujoco.MjModel.from_xml_path(str(path))
    model.dof_armature[:] = model.dof_damping[:] = model.dof_frictionloss[:] = 0.0
    model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT) | int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
    model.body_gravcomp[:] = 0.0
    return model


def _link_torque(path):
    model = _rigid_links(path)
    return lambda q, dq, ddq: inverse_dynamics_mujoco(model, q, dq, ddq)


@pytest.mark.parametrize("path", [OPENARM, REAL_ARMS / "ur5e.xml"], ids=lambda p: p.stem)
def test_the_link_gets_the_spring_torque_and_moves_as_a_rigid_arm(path):
    original = mujoco.MjModel.from_xml_path(str(path))
    n = original.nv
    stiffness, damping = np.linspace(800.0, 3000.0, n), np.linspace(0.5, 2.0, n)
    plant = elastic_plant(path, Transmission(stiffness, damping), 1000.0)
    model = plant.model
    # the rotor carries the joint's own terms, the link none
    for j, name in enumerate(plant.joint_names):
        rotor, link = plant.rotor_dof[j], plant.link_dof[j]
        source = original.jnt_dofadr[original.joint(name).id]
        assert model.dof_armature[rotor] == original.dof_armature[source]
        assert model.dof_frictionloss[rotor] == original.dof_frictionloss[source]
        assert model.dof_armature[link] == model.dof_damping[link] == model.dof_frictionloss[link] == 0.0
        assert model.joint(name + ROTOR_SUFFIX).id >= 0
    rng = np.random.default_rng(0)
    data = mujoco.MjData(model)
    lo, hi = original.jnt_range[:, 0], original.jnt_range[:, 1]
    data.qpos[plant.link_qpos] = rng.uniform(0.8 * lo + 0.2 * hi, 0.2 * lo + 0.8 * hi)
    data.qpos[plant.rotor_qpos] = data.qpos[plant.link_qpos] + rng.uniform(-2e-3, 2e-3, n)
    data.qvel[:] = rng.uniform(-1.0, 1.0, model.nv)
    data.qfrc_applied[plant.rotor_dof] = rng.uniform(-5.0, 5.0, n)
    mujoco.mj_forward(model, data)
    spring = (stiffness * (data.qpos[plant.rotor_qpos] - data.qpos[plant.link_qpos])
              + damping * (data.qvel[plant.rotor_dof] - data.qvel[plant.link_dof]))
    q, dq, ddq = (a[None] for a in (data.qpos[plant.link_qpos], data.qvel[plant.link_dof], data.qacc[plant.link_dof]))
    # the oracle: MuJoCo's inverse dynamics of the rigid links, at the link's own motion
    assert np.allclose(_link_torque(path)(q, dq, ddq)[0], spring, rtol=0, atol=1e-4 * (1 + np.abs(spring).max()))


@pytest.mark.parametrize("path, stiffness", [(OPENARM, 1000.0), (REAL_ARMS / "xarm7.xml", 3000.0)],
                         ids=["openarm_class", "xarm7"])
def test_the_stiffness_comes_out_of_a_double_encoder_recording(path, stiffness):
    robot = load_robot(path)
    n = robot.n_joints
    k, c = np.full(n, stiffness), np.full(n, 0.05 * np.sqrt(stiffness))
    rotor = np.where(robot.armature > 0, robot.armature, 0.01)
    plan = multisine(robot.joint_range, 15.0, 1000.0, seed=0, max_velocity=1.0)
    recording = simulate_elastic(path, plan, Transmission(k, c, rotor), robot.model, noise=MeasurementNoise(), seed=1)
    estimate = identify_transmission(recording, _link_torque(path))
    error = estimate.stiffness / k - 1
    relative_std = estimate.stiffness_std / k
    determined = relative_std < 0.0125
    assert determined.sum() >= n // 2, relative_std
    # where the recording determines it, within 5 %; everywhere, within its own uncertainty
    assert np.all(np.abs(error[determined]) < 0.05), error
    assert np.all(np.abs(error) < 4 * relative_std + 1e-3), (error, relative_std)
    assert np.all(np.abs(estimate.damping - c) < 4 * estimate.damping_std + 1e-3 * c), (estimate.damping, c)
    # the offset the encoders share is found as none
    assert np.all(np.abs(estimate.offset) < 1e-3)


def test_a_motor_side_read_at_some_samples_only_gives_the_stiffness():
    """A drive whose motor side is read at 20 Hz (a register read between 1 kHz joint states):
    the stiffness from those samples, the damping left undetermined and said so."""
    robot = load_robot(OPENARM)
    n = robot.n_joints
    k = np.full(n, 1000.0)
    plan = multisine(robot.joint_range, 15.0, 1000.0, seed=0, max_velocity=1.0)
    recording = simulate_elastic(OPENARM, plan, Transmission(k, 0.05 * np.sqrt(k)), robot.model,
                                 noise=MeasurementNoise(), seed=1)
    sparse = np.full_like(recording.motor_q, np.nan)
    sparse[::50] = recording.motor_q[::50]
    read = Recording(recording.time, recording.q, recording.dq, recording.tau, recording.joint_names, motor_q=sparse)
    estimate = identify_transmission(read, _link_torque(OPENARM))
    error = estimate.stiffness / k - 1
    relative_std = estimate.stiffness_std / k
    assert np.all(np.abs(error) < 4 * relative_std + 1e-3), (error, relative_std)
    determined = relative_std < 0.0125
    assert determined.any() and np.all(np.abs(error[determined]) < 0.05), (error, relative_std)
    assert np.all(np.isnan(estimate.damping))
    assert all(any(note.startswith(f"{name}: motor side measured at ") and "damping not identified" in note
                   for note in estimate.notes) for name in robot.joint_names), estimate.notes


def test_jittered_stamps_are_resampled_and_lost_samples_refused():
    robot = load_robot(OPENARM)
    k = np.full(robot.n_joints, 1000.0)
    plan = multisine(robot.joint_range, 8.0, 1000.0, seed=2, max_velocity=1.0)
    exact = simulate_elastic(OPENARM, plan, Transmission(k, 0.05 * np.sqrt(k)), robot.model,
                             noise=MeasurementNoise.off())
    # a driver's timer: each sample stamped up to 0.2 periods off
    stamps = exact.time + np.random.default_rng(0).uniform(-2e-4, 2e-4, exact.n_samples)
    jittered = Recording(stamps, exact.q, exact.dq, exact.tau, exact.joint_names, motor_q=exact.motor_q)
    estimate = identify_transmission(jittered, _link_torque(OPENARM))
    assert np.all(np.abs(estimate.stiffness[:4] / k[:4] - 1) < 0.01), estimate.stiffness
    holed = jittered.rows(np.r_[0:3000, 3100:jittered.n_samples])
    with pytest.raises(DataError, match="samples are missing"):
        identify_transmission(holed, _link_torque(OPENARM))


def test_a_recording_keeps_its_motor_positions_through_every_cut():
    t = np.arange(10) * 1e-3
    q = np.arange(20.0).reshape(10, 2)
    recording = Recording(t, q, q, q, ("a", "b"), motor_q=q + 0.5)
    assert np.array_equal(recording.rows(slice(2, 5)).motor_q, q[2:5] + 0.5)
    assert np.array_equal(recording.select(("b", "a")).motor_q, q[:, ::-1] + 0.5)
    head, tail = recording.split(0.3)
    assert np.array_equal(np.vstack([head.motor_q, tail.motor_q]), q + 0.5)
    with pytest.raises(DataError, match="motor_q has shape"):
        Recording(t, q, q, q, ("a", "b"), motor_q=q[:, :1])
    # NaN: not measured at that sample, kept through the cuts; infinite: refused
    sparse = q + 0.5
    sparse[3, 1] = np.nan
    assert np.array_equal(Recording(t, q, q, q, ("a", "b"), motor_q=sparse).rows(slice(2, 5)).motor_q,
                          sparse[2:5], equal_nan=True)
    sparse[4, 0] = np.inf
    with pytest.raises(DataError, match="motor_q contains 1 NaN or infinite"):
        Recording(t, q, q, q, ("a", "b"), motor_q=sparse)


def test_without_motor_positions_no_transmission_is_identified():
    t = np.arange(2000) * 1e-3
    q = np.sin(t)[:, None]
    with pytest.raises(DataError, match="motor-side"):
        identify_transmission(Recording(t, q, q, q, ("a",)), lambda q, dq, ddq: q)


@pytest.mark.parametrize("kwargs, message", [
    (dict(stiffness=[-1.0, 2.0], damping=[0.0, 0.0]), "stiffness"),
    (dict(stiffness=[1.0, 2.0], damping=[0.0, np.nan]), "damping"),
    (dict(stiffness=[1.0, 2.0], damping=[0.0, 0.0], rotor_inertia=[0.0, 1.0]), "rotor_inertia"),
])
def test_an_impossible_transmission_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Transmission(**kwargs).checked(2)


def test_validation_options_exclude_each_other(tmp_path, capsys):
    status = main([str(OPENARM), "--recording", str(tmp_path / "a.csv"), "--validation-recording",
                   str(tmp_path / "b.csv"), "--validation-fraction", "0.3", "--output-dir", str(tmp_path / "o")])
    assert status == 2 and "give one" in capsys.readouterr().err
    status = main([str(OPENARM), "--validation-recording", str(tmp_path / "b.csv"),
                   "--output-dir", str(tmp_path / "o")])
    assert status == 2 and "--validation-recording only apply with --recording" in capsys.readouterr().err


@pytest.mark.parametrize("path", [OPENARM, REAL_ARMS / "ur5e.xml"], ids=lambda p: p.stem)
def test_the_simulated_arm_of_a_node_sags_onto_its_springs_by_its_static_load(path):
    """SimulatedArm with an elastic plant (what mujoco_sim runs), held in a pose in MIT mode with
    the gravity feed-forward: the motor side settles on the command and each link hangs off
    it by its static load over the stiffness (MuJoCo's inverse dynamics of the rigid links);
    the samples carry both encoders."""
    robot = load_robot(path)
    n = robot.n_joints
    k = np.full(n, 2000.0)
    kp, kd = default_gains(robot.model, 8.0)
    plant = elastic_plant(path, Transmission(k, 0.05 * np.sqrt(k)), 1000.0, (kp, kd))
    pose = np.clip(np.linspace(-0.4, 0.5, n), *robot.joint_range.T)
    arm = SimulatedArm(robot.model, robot.joint_range, 1000.0, kp=kp, kd=kd, noise=MeasurementNoise.off(),
                       initial_positions=pose, elastic=plant, command_timeout_s=30.0)
    # the link side's gravity at the pose the links will hang in: a fixed point, found in a few rounds
    link = pose
    for _ in range(5):
        load = _link_torque(path)(link[None], np.zeros((1, n)), np.zeros((1, n)))[0]
        link = pose - load / k
    arm.command(np.arange(n), pose, np.zeros(n), load)
    block = arm.advance(20000)  # the links' lightly damped sway dies out (a few seconds per e-fold)
    assert arm.error is None and block.motor_q.shape == (20000, n)
    np.testing.assert_allclose(block.motor_q[-1], pose, atol=1e-6)
    np.testing.assert_allclose(block.q[-1] - block.motor_q[-1], -load / k, atol=1e-6 + 1e-3 * np.abs(load / k).max())
    np.testing.assert_allclose(block.tau[-1], load, atol=1e-4)
    # a rigid arm's samples carry no motor side
    rigid = SimulatedArm(robot.model, robot.joint_range, 1000.0, kp=kp, kd=kd, initial_positions=pose)
    assert rigid.advance(2).motor_q is None


def test_a_gearbox_needs_an_elastic_plant_and_sane_values():
    robot = load_robot(OPENARM)
    with pytest.raises(ValueError, match="elastic plant"):
        SimulatedArm(robot.model, robot.joint_range, 1000.0, gearbox=Gearbox(0.1))
    with pytest.raises(ValueError, match="load_friction >= 0"):
        Gearbox(-0.1)
    # the torque it adds: friction against the rotor's motion growing with the load, and the ripple
    torque = Gearbox(0.1, np.array([0.0, 0.5]), ripple_per_rad=4.0).torque(
        np.array([0.3, np.pi / 8]), np.array([10.0, 0.0]), np.array([-20.0, 3.0]))
    np.testing.assert_allclose(torque, [-0.1 * 20.0 * np.tanh(10.0 / 0.05), 0.5], atol=1e-12)


def test_an_elastic_run_the_links_did_not_follow_is_refused():
    """A transmission far too soft for the arm's load: the drives track on their motor side,
    the links sag and swing off the plan, and the run is refused as a rigid one would be."""
    robot = load_robot(OPENARM)
    plan = multisine(robot.joint_range, 4.0, 1000.0, seed=0, max_velocity=1.0)
    k = np.full(robot.n_joints, 5.0)
    with pytest.raises(TrackingError, match="did not follow the plan|limit"):
        simulate_elastic(OPENARM, plan, Transmission(k, 0.05 * np.sqrt(k)), robot.model, seed=0)
    # stiff enough, it passes, and says how well it followed
    k = np.full(robot.n_joints, 3000.0)
    recording = simulate_elastic(OPENARM, plan, Transmission(k, 0.05 * np.sqrt(k)), robot.model, seed=0)
    assert recording.n_samples == plan.time.size
