"""MuJoCo sources: the ideal (inverse-dynamics) recording and the PD-tracking simulation."""
from pathlib import Path

import mujoco
import numpy as np
import pytest

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError
from sysid_core.excitation.multisine import multisine
from sysid_core.simulation import (MeasurementNoise, default_gains, ideal_recording,
                                   simulate_tracking)

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"


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


def test_recorded_torque_reproduces_the_motion(panda, clean_run):
    # Independent re-run: from each recorded true state, one MuJoCo step under the recorded torque
    # must land on the next recorded state. A torque off by one sample or by 0.01 N m misses by
    # > 1e-4 rad/s, far above the tolerance.
    model, data = panda.model, mujoco.MjData(panda.model)
    for i in np.random.default_rng(1).choice(clean_run.n_samples - 1, 200, replace=False):
        data.qpos[:], data.qvel[:] = clean_run.q[i], clean_run.dq[i]
        data.qfrc_applied[:] = clean_run.tau[i]
        mujoco.mj_step(model, data)
        np.testing.assert_allclose(data.qpos, clean_run.q[i + 1], rtol=0, atol=1e-10)
        np.testing.assert_allclose(data.qvel, clean_run.dq[i + 1], rtol=0, atol=1e-9)


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


def test_progress_reports(panda, plan):
    traj, ff = plan
    kp, kd = default_gains(panda.model)
    seen = []
    simulate_tracking(panda.model, traj, ff, kp, kd, progress=seen.append)
    assert 15 <= len(seen) <= 25
    assert np.all(np.diff(seen) > 0) and seen[-1] == 1.0


def test_divergence_raises_data_error(panda, plan):
    traj, ff = plan
    with pytest.raises(DataError, match="diverged"):
        simulate_tracking(panda.model, traj, ff, kp=1e7, kd=0.0)


@pytest.mark.parametrize("rate, match", [(300.0, "integer multiple"), (2000.0, "longer than the sample period")])
def test_sample_rate_must_fit_the_timestep(panda, rate, match):
    traj = multisine(panda.joint_range, 0.5, rate, seed=0)
    ff = np.zeros_like(traj.q)
    with pytest.raises(ValueError, match=match):
        simulate_tracking(panda.model, traj, ff, 10.0, 1.0)


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
    data = mujoco.MjData(panda.model)
    mujoco.mj_forward(panda.model, data)
    mass = np.zeros((7, 7))
    try:  # MuJoCo 4.x signature
        mujoco.mj_fullM(panda.model, data, mass)
    except TypeError:  # MuJoCo 3.x (Python 3.10 pins)
        mujoco.mj_fullM(panda.model, mass, data.qM)
    omega = 2 * np.pi * 8.0
    np.testing.assert_allclose(kp, np.diag(mass) * omega ** 2)
    np.testing.assert_allclose(kd, 2 * 0.9 * np.sqrt(kp * np.diag(mass)))
    assert np.all(np.diag(mass) > panda.armature)
