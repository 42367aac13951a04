"""MuJoCo sources: the plant and its timing, the ideal recording, the tracked simulation and its checks.

Oracles: MuJoCo itself on copies of the model file edited by hand (a timestep written into the
XML, actuators and gravcomp deleted, collisions switched off per geom), mj_fullM, the project's
regressor-based inverse dynamics, and figures recomputed from the recording.
"""
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError, TrackingError
from sysid_core.excitation.multisine import multisine
from sysid_core.excitation.trajectory import Trajectory
from sysid_core.simulation import (TRACKING_TOLERANCE_FLOOR, TRACKING_TOLERANCE_FRACTION, ComputedTorque,
                                   MeasurementNoise, default_gains, ideal_recording, plant_model, simulate,
                                   simulate_tracking, simulation_timing, torque_limits)

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
MODELS = Path(__file__).resolve().parent / "models"


def _variant(path, timestep=None, integrator=None, actuators=None, gravcomp=False, limited=None,
             drop_actuators=False, flags=None) -> str:
    """The MJCF at ``path`` edited as text would be by hand: option timestep/integrator and
    flags (dict), its actuators deleted, a <position> servo (the attributes ``actuators``) on
    every joint, gravcomp="1" on every body, or every joint's ``limited`` set."""
    root = ET.parse(path).getroot()
    if drop_actuators:
        for section in root.findall("actuator"):
            root.remove(section)
    option = root.find("option")
    if option is None:
        option = ET.SubElement(root, "option")
    if timestep is not None:
        option.set("timestep", repr(timestep))
    if integrator is not None:
        option.set("integrator", integrator)
    if flags:
        flag = option.find("flag")
        flag = ET.SubElement(option, "flag") if flag is None else flag
        for key, value in flags.items():
            flag.set(key, value)
    if gravcomp:
        for body in root.find("worldbody").iter("body"):
            body.set("gravcomp", "1")
    if limited is not None:
        for joint in root.iter("joint"):
            joint.set("limited", limited)
    if actuators is not None:
        section = root.find("actuator")
        if section is None:
            section = ET.SubElement(root, "actuator")
        for joint in root.find("worldbody").iter("joint"):
            ET.SubElement(section, "position", joint=joint.get("name"), **actuators)
    return ET.tostring(root, encoding="unicode")


def _model(xml: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(xml)


def _full_mass_matrix(model, q) -> np.ndarray:
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    mass = np.zeros((model.nv, model.nv))
    try:  # MuJoCo 4.x signature
        mujoco.mj_fullM(model, data, mass)
    except TypeError:  # MuJoCo 3.x (Python 3.10 pins)
        mujoco.mj_fullM(model, mass, data.qM)
    return mass


@pytest.fixture(scope="module")
def panda():
    return load_robot(ROBOTS / "panda_class.xml")


@pytest.fixture(scope="module")
def plan(panda):
    traj = multisine(panda.joint_range, duration=3.0, sample_rate=1000.0, seed=7, max_velocity=2.0)
    return traj, panda.inverse_dynamics(traj.q, traj.dq, traj.ddq)


@pytest.fixture(scope="module")
def clean_run(panda, plan):
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    return simulate_tracking(panda.model, traj, ff, kp, kd, noise=MeasurementNoise.off())


@pytest.mark.parametrize("name", ["panda_class", "openarm_class_payload"])
def test_ideal_recording_is_mj_inverse_per_sample(name):
    robot = load_robot(ROBOTS / f"{name}.xml")
    traj = multisine(robot.joint_range, 2.0, 200.0, seed=1)
    rec = ideal_recording(robot.model, traj, robot.joint_names)
    assert rec.joint_names == robot.joint_names
    np.testing.assert_array_equal(rec.ddq, traj.ddq)
    data = mujoco.MjData(robot.model)
    for i in np.random.default_rng(0).choice(len(traj.time), 25, replace=False):
        data.qpos[:], data.qvel[:], data.qacc[:] = traj.q[i], traj.dq[i], traj.ddq[i]
        mujoco.mj_inverse(robot.model, data)
        np.testing.assert_allclose(rec.tau[i], data.qfrc_inverse, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["panda_class", "openarm_class"])
def test_ideal_recording_matches_nominal_model_while_sliding(name):
    robot = load_robot(ROBOTS / f"{name}.xml")
    traj = multisine(robot.joint_range, 4.0, 500.0, seed=2, max_velocity=2.0)
    rec = ideal_recording(robot.model, traj, robot.joint_names)
    nominal = robot.inverse_dynamics(traj.q, traj.dq, traj.ddq)
    sliding = np.all(np.abs(traj.dq) > 0.3, axis=1)
    assert sliding.sum() > 50
    # MuJoCo's friction loss is a soft constraint whose force saturates at +-frictionloss once
    # the constraint's reference acceleration (~ b dq with b ~ 100 1/s for the default solref)
    # exceeds what frictionloss can oppose: at 0.3 rad/s it is saturated by two orders of magnitude,
    # so it equals Coulomb sign(dq) frictionloss and the two models agree to rounding.
    np.testing.assert_allclose(rec.tau[sliding], nominal[sliding], rtol=1e-6, atol=1e-6)
    # Near dq = 0 the soft constraint is below saturation: the gap is bounded by a full Coulomb swing.
    assert np.all(np.abs(rec.tau - nominal) <= 2 * robot.frictionloss + 1e-6)


def test_tracking_with_default_gains_and_nominal_feedforward(plan, clean_run):
    traj, _ = plan
    error = np.abs(clean_run.q - traj.q).max()
    # measured ~1.5e-4 rad; the model is exact but Coulomb vs soft friction differ at reversals
    assert error < 1e-3
    assert np.abs(clean_run.dq - traj.dq).max() < 0.05


def test_no_samples_lost_and_no_accelerations(plan, clean_run, panda):
    traj, _ = plan
    assert clean_run.n_samples == len(traj.time)
    np.testing.assert_array_equal(clean_run.time, traj.time)
    assert clean_run.ddq is None
    assert clean_run.joint_names == panda.joint_names
    np.testing.assert_array_equal(clean_run.q[0], traj.q[0])


def _assert_each_step_is_the_recorded_torques(model, run, count, seed):
    """Independent re-run: from ``count`` recorded true states of ``run``, one MuJoCo step under
    the recorded torque must land on the next recorded state."""
    data = mujoco.MjData(model)
    for i in np.random.default_rng(seed).choice(run.n_samples - 1, count, replace=False):
        data.qpos[:], data.qvel[:] = run.q[i], run.dq[i]
        data.qfrc_applied[:] = run.tau[i]
        mujoco.mj_step(model, data)
        np.testing.assert_allclose(data.qpos, run.q[i + 1], rtol=0, atol=1e-10)
        np.testing.assert_allclose(data.qvel, run.dq[i + 1], rtol=0, atol=1e-9)


def test_recorded_torque_reproduces_the_motion(panda, clean_run):
    # A torque off by one sample or by 0.01 N m misses by > 1e-4 rad/s, far above the tolerance.
    _assert_each_step_is_the_recorded_torques(panda.model, clean_run, 200, 1)


def test_noise_statistics(panda, plan, clean_run):
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    noise = MeasurementNoise()
    noisy = simulate_tracking(panda.model, traj, ff, kp, kd, noise=noise, seed=3)
    residuals = {"q": noisy.q - clean_run.q, "dq": noisy.dq - clean_run.dq, "tau": noisy.tau - clean_run.tau}
    for name, res in residuals.items():
        std = getattr(noise, f"{name}_std")
        # 21000 samples: the sample std is within ~1 % of the true one
        assert np.std(res) == pytest.approx(std, rel=0.03)
        assert abs(np.mean(res)) < 0.05 * std
    # independent channels
    assert abs(np.corrcoef(residuals["q"].ravel(), residuals["tau"].ravel())[0, 1]) < 0.05
    again = simulate_tracking(panda.model, traj, ff, kp, kd, noise=noise, seed=3)
    np.testing.assert_array_equal(again.tau, noisy.tau)


def test_quantization_grid(panda, plan, clean_run):
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    res = {"q": 2 * np.pi / 2 ** 14, "dq": 1e-3, "tau": 0.01}
    noise = MeasurementNoise(q_resolution=res["q"], dq_resolution=res["dq"], tau_resolution=res["tau"])
    rec = simulate_tracking(panda.model, traj, ff, kp, kd, noise=noise, seed=4)
    for name, quantum in res.items():
        measured = getattr(rec, name)
        np.testing.assert_allclose(measured / quantum, np.round(measured / quantum), atol=1e-6)
        expected = np.hypot(getattr(noise, f"{name}_std"), quantum / np.sqrt(12))
        assert np.std(measured - getattr(clean_run, name)) == pytest.approx(expected, rel=0.05)


def test_substeps_hold_the_command(panda):
    traj = multisine(panda.joint_range, 2.0, 250.0, seed=5, max_velocity=1.0)
    ff = panda.inverse_dynamics(traj.q, traj.dq, traj.ddq)
    kp, kd = default_gains(panda.model)
    rec = simulate_tracking(panda.model, traj, ff, kp, kd, noise=MeasurementNoise.off())
    assert rec.n_samples == len(traj.time)
    assert np.abs(rec.q - traj.q).max() < 5e-3
    # 4 MuJoCo steps under one held torque lead from each sample to the next
    data = mujoco.MjData(panda.model)
    data.qpos[:], data.qvel[:], data.qfrc_applied[:] = rec.q[10], rec.dq[10], rec.tau[10]
    for _ in range(4):
        mujoco.mj_step(panda.model, data)
    np.testing.assert_allclose(data.qvel, rec.dq[11], atol=1e-9)


@pytest.mark.parametrize("delay", [1, 3])
def test_delayed_feedback_commands_from_an_earlier_state(panda, plan, clean_run, delay):
    # Oracle: the MIT law written out by hand on the recorded true state delay samples back (the
    # first sample's while there is none), and one MuJoCo step from each recorded state under
    # the recorded torque landing on the next one (the torque really was what moved the arm).
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    rec = simulate_tracking(panda.model, traj, ff, kp, kd, noise=MeasurementNoise.off(), delay_samples=delay)
    seen = np.maximum(np.arange(rec.n_samples) - delay, 0)
    expected = kp * (traj.q - rec.q[seen]) + kd * (traj.dq - rec.dq[seen]) + ff
    np.testing.assert_allclose(rec.tau, expected, rtol=0, atol=1e-9)
    undelayed = kp * (traj.q - rec.q) + kd * (traj.dq - rec.dq) + ff
    assert np.abs(rec.tau - undelayed).max() > 1e-3  # the delay is visible, not a rounding
    _assert_each_step_is_the_recorded_torques(panda.model, rec, 100, 2)
    # still tracking (measured 2e-3 and 6e-3 rad for 1 and 3 ms on this 8 Hz loop, 1e-4 undelayed),
    # but not as the undelayed run did
    assert np.abs(rec.q - traj.q).max() < 0.02
    assert np.abs(rec.q - clean_run.q).max() > 1e-3


def test_zero_delay_is_the_undelayed_run(panda, plan, clean_run):
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    rec = simulate_tracking(panda.model, traj, ff, kp, kd, noise=MeasurementNoise.off(), delay_samples=0)
    for name in ("q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(rec, name), getattr(clean_run, name))


@pytest.mark.parametrize("delay", [-1, 1.0, 0.5, True, "1"])
def test_delay_must_be_a_whole_number_of_samples(panda, plan, delay):
    traj, ff = plan
    with pytest.raises(ValueError, match="delay_samples"):
        simulate_tracking(panda.model, traj, ff, 10.0, 1.0, delay_samples=delay)


def test_progress_reports(panda, plan):
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    seen = []
    simulate_tracking(panda.model, traj, ff, kp, kd, progress=seen.append)
    assert 15 <= len(seen) <= 25
    assert np.all(np.diff(seen) > 0) and seen[-1] == 1.0


def test_divergence_raises_data_error(panda, plan):
    traj, ff = plan
    with pytest.raises(TrackingError, match="diverged") as info:  # a DataError that the CLI turns into exit 3
        simulate_tracking(panda.model, traj, ff, kp=1e7, kd=0.0)
    assert isinstance(info.value, DataError)
    assert info.value.joint in panda.joint_names and f"'{info.value.joint}'" in str(info.value)
    assert 0 <= info.value.time < traj.time[-1] and f"t={info.value.time:.4f} s" in str(info.value)


def test_bad_inputs(panda, plan):
    traj, ff = plan
    with pytest.raises(DataError, match="feedforward"):
        simulate_tracking(panda.model, traj, ff[:-1], 10.0, 1.0)
    with pytest.raises(ValueError, match="kp"):
        simulate_tracking(panda.model, traj, ff, np.ones(3), 1.0)
    with pytest.raises(ValueError, match="q_std"):
        MeasurementNoise(q_std=-1.0)


def test_default_gains_follow_the_mass_matrix(panda):
    kp, kd = default_gains(panda.model)
    mass = _full_mass_matrix(panda.model, panda.model.qpos0)
    omega = 2 * np.pi * 8.0
    np.testing.assert_allclose(kp, np.diag(mass) * omega ** 2)
    np.testing.assert_allclose(kd, 2 * 0.9 * np.sqrt(kp * np.diag(mass)))
    assert np.all(np.diag(mass) > panda.armature)


# --- timing -----------------------------------------------------------------------------------

def test_timing_keeps_a_timestep_that_divides_the_sample_period(panda):
    for rate, steps in ((1000.0, 1), (250.0, 4), (100.0, 10)):
        timing = simulation_timing(panda.model, rate)
        assert (timing.timestep, timing.substeps, timing.sample_rate) == (panda.model.opt.timestep, steps, rate)
        assert not timing.changed and "(the model's timestep)" in timing.describe()


@pytest.mark.parametrize("model_timestep, rate, timestep, substeps", [
    (0.002, 1000.0, 0.001, 1),      # MuJoCo's default timestep (published arms) at the default rate
    (0.002, 500.0, 0.002, 1),       # divides: kept
    (0.002, 1500.0, 1 / 1500, 1),
    (0.001, 300.0, 1 / 1200, 4),
    (0.001, 2000.0, 0.0005, 1),
    (0.003, 250.0, 0.002, 2),       # 3 ms does not divide 4 ms; two 2 ms steps do
])
def test_timing_shortens_a_timestep_that_does_not_divide_the_period(model_timestep, rate, timestep, substeps):
    model = _model(_variant(ROBOTS / "panda_class.xml", timestep=model_timestep))
    timing = simulation_timing(model, rate)
    assert timing.substeps == substeps
    assert timing.timestep == pytest.approx(timestep, rel=1e-12)
    assert timing.timestep * timing.substeps == pytest.approx(1 / rate, rel=1e-12)
    assert timing.model_timestep == model_timestep and timing.changed == (timestep != model_timestep)
    if timing.changed:
        assert f"model's {model_timestep * 1e3:g} ms timestep does not divide" in timing.describe()
        assert f"{substeps} step{'s' if substeps > 1 else ''} of {timestep * 1e3:.4g} ms" in timing.describe()


@pytest.mark.parametrize("integrator, flags, implicit", [
    ("Euler", None, True), ("Euler", {"eulerdamp": "disable"}, False), ("RK4", None, False),
    ("implicit", None, True), ("implicitfast", None, True)])
def test_timing_says_whether_damping_is_integrated_implicitly(integrator, flags, implicit):
    model = _model(_variant(ROBOTS / "panda_class.xml", integrator=integrator, flags=flags))
    timing = simulation_timing(model, 1000.0)
    assert timing.integrator == integrator and timing.implicit_damping == implicit
    assert timing.describe().endswith(f"{integrator} integrator")


@pytest.mark.parametrize("rate", [0.0, -100.0, math.nan, math.inf])
def test_timing_refuses_a_meaningless_sample_rate(panda, rate):
    with pytest.raises(ValueError, match="sample rate"):
        simulation_timing(panda.model, rate)


@pytest.mark.parametrize("rate, timestep, substeps", [(300.0, 1 / 1200, 4), (2000.0, 0.0005, 1)])
def test_simulation_at_a_rate_the_timestep_does_not_divide(panda, rate, timestep, substeps):
    # oracle: the same file with the chosen timestep written into it, stepped by hand
    oracle = _model(_variant(ROBOTS / "panda_class.xml", timestep=timestep))
    traj = multisine(panda.joint_range, 0.5, rate, seed=0, max_velocity=1.0)
    rec = simulate(panda.model, traj, noise=MeasurementNoise.off()).recording
    assert rec.n_samples == len(traj.time)
    data = mujoco.MjData(oracle)
    for i in (0, len(traj.time) // 2, len(traj.time) - 2):
        data.qpos[:], data.qvel[:], data.qfrc_applied[:] = rec.q[i], rec.dq[i], rec.tau[i]
        for _ in range(substeps):
            mujoco.mj_step(oracle, data)
        np.testing.assert_allclose(data.qpos, rec.q[i + 1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(data.qvel, rec.dq[i + 1], rtol=0, atol=1e-10)


# --- the plant: the file's actuators, gravcomp and contacts do not act ----------------------

SERVOS = {"kp": "2000", "kv": "50", "forcerange": "-300 300"}  # published-arm style position servos


def test_plant_model_is_a_modified_copy():
    model = _model(_variant(ROBOTS / "panda_class.xml", actuators=SERVOS, gravcomp=True, timestep=0.002))
    flags = model.opt.disableflags
    plant = plant_model(model, simulation_timing(model, 1000.0))
    assert plant.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_ACTUATION
    assert plant.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
    assert not np.any(plant.body_gravcomp) and plant.opt.timestep == 0.001
    # the file's model is left as it was
    assert model.opt.disableflags == flags and model.opt.timestep == 0.002 and np.all(model.body_gravcomp[1:] == 1)


def test_actuators_and_gravcomp_leave_no_trace_in_the_recordings(panda):
    # As published: servos that would pull every joint to ctrl = 0 and gravcomp on every body.
    # Oracle: the same file with its actuators deleted and no gravcomp.
    published = _model(_variant(ROBOTS / "panda_class.xml", actuators=SERVOS, gravcomp=True))
    bare = _model(_variant(ROBOTS / "panda_class.xml", drop_actuators=True))
    assert published.nu == 14 and bare.nu == 0
    traj = multisine(panda.joint_range, 1.0, 1000.0, seed=4, max_velocity=2.0)
    ours = simulate(published, traj, noise=MeasurementNoise.off()).recording
    oracle = simulate(bare, traj, noise=MeasurementNoise.off()).recording
    for name in ("q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(oracle, name))
    np.testing.assert_array_equal(ideal_recording(published, traj).tau, ideal_recording(bare, traj).tau)


ELBOW_ARM = """
<mujoco model="folding arm">
  <compiler angle="radian"/>
  <option timestep="0.001"/>
  <default><joint axis="0 1 0" damping="0.1"/><geom type="capsule" size="0.03"/></default>
  <worldbody>
    <body name="upper">
      <joint name="shoulder" range="-1 1"/>
      <geom fromto="0 0 0 0.4 0 0" mass="1"/>
      <body name="lower" pos="0.4 0 0">
        <joint name="elbow" range="-3 3"/>
        <geom fromto="0 0 0 0.3 0 0" mass="0.5"/>
        <body name="hand" pos="0.3 0 0">
          <joint name="wrist" range="-3 3"/>
          <geom fromto="0 0 0 0.25 0 0" mass="0.2"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def _fold(time, elbow, wrist):
    """Shoulder still, elbow held at ``elbow``, wrist swung from 0 to ``wrist`` and back (rad)."""
    period = time[-1]
    phase = 2 * np.pi * time / period
    q = np.column_stack([np.zeros_like(time), np.full_like(time, elbow), wrist * (1 - np.cos(phase)) / 2])
    dq = np.column_stack([np.zeros_like(time), np.zeros_like(time), wrist * np.pi / period * np.sin(phase)])
    ddq = np.column_stack([np.zeros_like(time), np.zeros_like(time),
                           wrist * 2 * (np.pi / period) ** 2 * np.cos(phase)])
    return Trajectory(time, q, dq, ddq)


def test_self_collisions_are_reported_not_simulated():
    model = _model(ELBOW_ARM)
    plan = _fold(np.arange(1001) / 1000.0, elbow=2.4, wrist=2.4)   # the hand folds back onto the upper arm
    run = simulate(model, plan, noise=MeasurementNoise.off())
    # oracle: the same file with every geom out of collision
    root = ET.fromstring(ELBOW_ARM)
    for geom in root.iter("geom"):
        geom.set("contype", "0")
        geom.set("conaffinity", "0")
    oracle = simulate(_model(ET.tostring(root, encoding="unicode")), plan, noise=MeasurementNoise.off())
    np.testing.assert_array_equal(run.recording.q, oracle.recording.q)
    np.testing.assert_array_equal(run.recording.tau, oracle.recording.tau)
    assert oracle.quality.collisions == ()
    # where the planned motion overlaps, by MuJoCo's collision detection on the plan
    data = mujoco.MjData(model)
    depth = np.zeros(len(plan.time))
    for i, q in enumerate(plan.q):
        data.qpos[:] = q
        mujoco.mj_forward(model, data)
        depth[i] = max([0.0] + [-d for d in data.contact.dist[:data.ncon]])
    overlapping = np.flatnonzero(depth > 0)
    assert overlapping.size, "the plan must fold the hand into the upper arm"
    (collision,) = run.quality.collisions
    assert (collision.body1, collision.body2) == ("hand", "upper")
    # the recorded motion is checked every 10 ms; it follows the plan to well under a millimetre
    assert collision.first_time == pytest.approx(plan.time[overlapping[0]], abs=0.011)
    assert collision.depth == pytest.approx(depth.max(), abs=1e-3)
    assert any("'hand' and 'upper' overlap" in note for note in run.quality.notes())


# --- the controller ---------------------------------------------------------------------------

def _without_armature(path, **options) -> mujoco.MjModel:
    """The file at ``path`` with every joint's armature and friction loss 0 (a 7-DOF arm as many are
    published: the wrist's inertia alone, 1e-3 kg m^2), and the ``_variant`` options."""
    root = ET.fromstring(_variant(path, **options))
    for joint in root.iter("joint"):
        joint.set("armature", "0")
        joint.set("frictionloss", "0")
    return _model(ET.tostring(root, encoding="unicode"))


def test_computed_torque_is_the_nominal_inverse_dynamics(panda):
    controller = ComputedTorque(panda.model, 1000.0)
    rng = np.random.default_rng(5)
    n = panda.n_joints
    q = rng.uniform(*panda.joint_range.T, (20, n))
    # sliding fast against moderate accelerations: MuJoCo's soft friction loss is then Coulomb's
    # (see test_ideal_recording_matches_nominal_model_while_sliding)
    dq = rng.choice([-1, 1], (20, n)) * rng.uniform(1.0, 2.0, (20, n))
    q_des, dq_des = q + rng.normal(0, 1e-4, q.shape), dq + rng.normal(0, 1e-2, q.shape)
    ddq_des = rng.normal(0, 3, q.shape)
    ours = np.array([controller.torque(*state) for state in zip(q, dq, q_des, dq_des, ddq_des)])
    # oracle: the project's regressor-based model (not MuJoCo) at the commanded acceleration
    commanded = ddq_des + controller.kp * (q_des - q) + controller.kd * (dq_des - dq)
    np.testing.assert_allclose(ours, panda.inverse_dynamics(q, dq, commanded), rtol=1e-6, atol=1e-6)


def test_feedback_torque_is_the_inertia_times_the_feedback_acceleration(panda):
    controller = ComputedTorque(panda.model, 1000.0)
    rng = np.random.default_rng(6)
    for _ in range(5):
        q, dq = rng.uniform(*panda.joint_range.T), rng.normal(0, 1, panda.n_joints)
        q_des, dq_des, tau_ff = q + rng.normal(0, 0.02, q.shape), rng.normal(0, 1, q.shape), rng.normal(0, 5, q.shape)
        acceleration = controller.kp * (q_des - q) + controller.kd * (dq_des - dq)
        expected = tau_ff + _full_mass_matrix(panda.model, q) @ acceleration
        np.testing.assert_allclose(controller.feedback_torque(q, dq, q_des, dq_des, tau_ff), expected,
                                   rtol=1e-10, atol=1e-9)


def test_every_joint_settles_like_one_critically_damped_loop():
    # A 7-DOF arm without armature at MuJoCo's default 2 ms timestep, all joints stepped at once:
    # with computed torque each error follows e0 (1 + w t) exp(-w t) whatever the coupling of
    # the mass matrix. Diagonal PD gains of the same bandwidth diverge within 11 ms here.
    model = _without_armature(ROBOTS / "openarm_class.xml", timestep=0.002)
    controller = ComputedTorque(model, 1000.0)
    assert controller.bandwidth_hz == 20.0 and controller.kd == pytest.approx(2 * np.sqrt(controller.kp))
    plant = plant_model(model, simulation_timing(model, 1000.0))
    data = mujoco.MjData(plant)
    start = load_robot(ROBOTS / "openarm_class.xml").joint_range.mean(axis=1)
    data.qpos[:] = start
    target, zero = start + 0.02, np.zeros(model.nv)
    error = []
    for _ in range(300):
        error.append(target - data.qpos)
        data.qfrc_applied[:] = controller.torque(data.qpos.copy(), data.qvel.copy(), target, zero, zero)
        mujoco.mj_step(plant, data)
    omega, t = 2 * np.pi * controller.bandwidth_hz, np.arange(300) / 1000.0
    ideal = 0.02 * (1 + omega * t) * np.exp(-omega * t)
    # the torque is held over each 1 ms sample (w T = 0.13): within 10 % of the step of the continuous law
    np.testing.assert_allclose(np.array(error), np.broadcast_to(ideal[:, None], (300, model.nv)), atol=0.002)


def test_computed_torque_tracks_where_diagonal_gains_diverge():
    robot = load_robot(ROBOTS / "openarm_class.xml")
    model = _without_armature(ROBOTS / "openarm_class.xml", timestep=0.002)
    plan = multisine(robot.joint_range, 1.0, 500.0, seed=1, max_velocity=2.0)   # the file's own 2 ms step
    feedforward = load_robot(ROBOTS / "openarm_class.xml").inverse_dynamics(plan.q, plan.dq, plan.ddq)
    with pytest.raises(TrackingError, match="diverged"):
        simulate_tracking(model, plan, feedforward, *default_gains(model), noise=MeasurementNoise.off())
    run = simulate(model, plan, noise=MeasurementNoise.off())
    assert np.all(run.quality.max_error < 1e-2 * run.quality.tolerance)


@pytest.mark.parametrize("rate, bandwidth", [(1000.0, 20.0), (500.0, 10.0), (200.0, 4.0)])
def test_bandwidth_follows_the_sample_rate(panda, rate, bandwidth):
    assert ComputedTorque(panda.model, rate).bandwidth_hz == pytest.approx(bandwidth)
    assert ComputedTorque(panda.model, rate, bandwidth_hz=2.0).bandwidth_hz == 2.0
    with pytest.raises(ValueError, match="bandwidth"):
        ComputedTorque(panda.model, rate, bandwidth_hz=0.0)


# --- refusals ---------------------------------------------------------------------------------

def test_a_plan_outside_the_joint_range_is_refused(panda):
    traj = multisine(panda.joint_range, 1.0, 1000.0, seed=2)
    q = traj.q.copy()
    q[600, 3] = panda.joint_range[3, 1] + 0.05
    bad = Trajectory(traj.time, q, traj.dq, traj.ddq)
    expected = rf"joint '{panda.joint_names[3]}' to .* at t=0\.600 s, 0\.05 beyond its upper limit"
    for source in (simulate, ideal_recording):  # the arm would run into its end stop: exit 3
        with pytest.raises(TrackingError, match=expected) as info:
            source(panda.model, bad)
        assert (info.value.joint, info.value.time) == (panda.joint_names[3], 0.6)
        assert info.value.size == pytest.approx(0.05)


def test_a_torque_beyond_the_actuator_limit_is_refused(panda):
    root = ET.parse(ROBOTS / "panda_class.xml").getroot()
    motor = next(m for m in root.iter("motor") if m.get("joint") == "joint2")
    motor.set("forcerange", "-20 20")
    motor.set("forcelimited", "true")
    model = _model(ET.tostring(root, encoding="unicode"))
    np.testing.assert_array_equal(torque_limits(model), [np.inf, 20.0] + [np.inf] * 5)
    traj = multisine(panda.joint_range, 1.0, 1000.0, seed=3, max_velocity=1.0)
    needed = np.abs(panda.inverse_dynamics(traj.q, traj.dq, traj.ddq)[:, 1]).max()
    assert needed > 25.0  # what holding the arm up takes at joint 2
    message = r"joint 'joint2' needed -?\d+\.?\d* N m at t=\d\.\d{3} s, \d+% of its 20 N m"
    with pytest.raises(TrackingError, match=message) as info:
        simulate(model, traj, noise=MeasurementNoise.off())
    assert info.value.joint == "joint2" and info.value.size == pytest.approx(needed, rel=0.05)


@pytest.fixture(scope="module")
def vertical():
    """A vertical planar 2R arm and, as the controller's nominal model, the same arm with gravity
    out of its plane: a controller that ignores the arm's weight."""
    return load_robot(MODELS / "planar_2r_vertical.xml"), load_robot(MODELS / "planar_2r.xml")


def test_a_run_that_does_not_follow_the_plan_is_refused(vertical):
    arm, weightless = vertical
    plan = multisine(arm.joint_range, 2.0, 1000.0, seed=0, max_velocity=1.0, amplitude_fraction=0.3)
    # at the default 20 Hz the controller follows despite the unknown weight ...
    run = simulate(arm.model, plan, nominal=weightless.model, noise=MeasurementNoise.off())
    assert np.all(run.quality.max_error < run.quality.tolerance)
    # ... at 1 Hz the arm sags by half a radian
    with pytest.raises(TrackingError, match=r"joint '\w+' was 0\.\d+ rad \(m\) off its plan at t=\d\.\d{3} s, beyond "
                                            r"the 0\.0\d+ tolerance") as info:
        simulate(arm.model, plan, nominal=weightless.model, bandwidth_hz=1.0, noise=MeasurementNoise.off())
    tolerance = TRACKING_TOLERANCE_FRACTION * np.ptp(plan.q, axis=0) + TRACKING_TOLERANCE_FLOOR
    assert info.value.size > tolerance[arm.joint_names.index(info.value.joint)]


def test_a_run_into_a_joint_limit_is_refused(vertical):
    arm, weightless = vertical
    # within 0.14 rad of joint1's upper limit (3.14), sagging toward it
    plan = multisine(arm.joint_range, 2.0, 1000.0, seed=0, max_velocity=1.0, amplitude_fraction=0.9, center=[3.0, 0.0])
    assert plan.q[:, 0].max() < arm.joint_range[0, 1]
    with pytest.raises(TrackingError, match=r"joint 'joint1' hit its upper limit at t=\d\.\d{3} s") as info:
        simulate(arm.model, plan, nominal=weightless.model, bandwidth_hz=2.0, noise=MeasurementNoise.off())
    assert info.value.joint == "joint1" and info.value.size > 0


def test_quality_figures_are_those_of_the_recording(panda):
    model = _model(_variant(ROBOTS / "panda_class.xml", actuators=SERVOS, drop_actuators=True))
    traj = multisine(panda.joint_range, 1.0, 1000.0, seed=8, max_velocity=2.0)
    run = simulate(model, traj, noise=MeasurementNoise.off())
    quality, error = run.quality, np.abs(run.recording.q - traj.q)
    assert quality.joint_names == panda.joint_names
    np.testing.assert_allclose(quality.rms_error, np.sqrt(np.mean(error ** 2, axis=0)), rtol=1e-12)
    np.testing.assert_array_equal(quality.max_error, error.max(axis=0))
    np.testing.assert_array_equal(quality.max_error_time, traj.time[error.argmax(axis=0)])
    np.testing.assert_allclose(quality.tolerance, 0.1 * np.ptp(traj.q, axis=0) + 0.01)
    np.testing.assert_array_equal(quality.torque_limit, np.full(7, 300.0))
    np.testing.assert_allclose(quality.torque_usage, np.abs(run.recording.tau).max(axis=0) / 300.0)
    notes = quality.notes()
    worst = panda.joint_names[int(np.argmax(quality.max_error / quality.tolerance))]
    assert f"worst joint '{worst}'" in notes[0] and "300 N m" in notes[1]
    assert notes[-1] == quality.timing.describe()
