"""Motion profiles around an excitation (quintic transitions, approach and rest) and the
MIT-mode drive helpers the simulator node is built from."""
from pathlib import Path

import mujoco
import numpy as np
import pytest

from sysid_core.errors import DataError
from sysid_core.excitation.multisine import (MIN_RAMP_DURATION, QUINTIC_PEAK_SPEED, RAMP_DURATION,
                                   excitation_with_approach_and_rest, multisine, transition,
                                   transition_duration)
from sysid_core.dynamics.model import load_robot
from sysid_core.simulation import default_gains, diverged, measure, mit_torque, mujoco_warnings, step
from sysid_core.excitation.trajectory import Trajectory

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"


@pytest.fixture(scope="module")
def openarm():
    return load_robot(ROBOTS / "openarm_class.xml")


def _assert_consistent_derivatives(traj: Trajectory, rate: float, tol: float):
    """Central differences of q and dq agree with dq and ddq to ``tol`` (relative to the peak)."""
    h = 1.0 / rate
    for x, dx in ((traj.q, traj.dq), (traj.dq, traj.ddq)):
        central = (x[2:] - x[:-2]) / (2 * h)
        np.testing.assert_allclose(central, dx[1:-1], atol=tol * max(np.abs(dx).max(), 1e-12))


def test_transition_meets_its_boundary_values_exactly():
    q0, v0, q1, v1 = np.array([0.1, -1.0]), np.array([0.5, 0.0]), np.array([1.2, -0.4]), np.array([-0.3, 0.2])
    traj = transition(q0, v0, q1, v1, duration=1.5, sample_rate=200.0)
    assert traj.time.shape == (301,) and traj.q.shape == (301, 2)
    assert traj.time[-1] == pytest.approx(1.5)
    np.testing.assert_array_equal(traj.q[0], q0)
    np.testing.assert_array_equal(traj.q[-1], q1)
    np.testing.assert_array_equal(traj.dq[0], v0)
    np.testing.assert_array_equal(traj.dq[-1], v1)
    np.testing.assert_array_equal(traj.ddq[[0, -1]], 0.0)


def test_transition_polynomial_is_continuous_into_its_end_samples():
    # the exact seams are the polynomial's own values: the samples next to them agree to O(h)
    traj = transition(np.zeros(3), np.array([1.0, 0.0, -0.5]), np.ones(3), np.zeros(3), 2.0, 1000.0)
    assert np.abs(traj.ddq[1] - traj.ddq[0]).max() < 0.05
    assert np.abs(traj.ddq[-1] - traj.ddq[-2]).max() < 0.05
    _assert_consistent_derivatives(traj, 1000.0, 1e-5)


def test_rest_to_rest_quintic_peaks_at_1875_times_the_mean_speed():
    delta = np.array([0.8, -2.0, 0.0])
    traj = transition(np.zeros(3), np.zeros(3), delta, np.zeros(3), 2.0, 1000.0)
    np.testing.assert_allclose(np.abs(traj.dq).max(axis=0), QUINTIC_PEAK_SPEED * np.abs(delta) / 2.0, rtol=1e-9)
    # monotone: a rest-to-rest quintic never overshoots
    assert np.all(np.diff(traj.q, axis=0) * np.sign(delta) >= -1e-15)


def test_transition_duration_is_rounded_to_the_grid():
    traj = transition(np.zeros(1), np.zeros(1), np.ones(1), np.zeros(1), 0.1234, 100.0)
    assert len(traj.time) == 13  # 0.1234 s -> 12 periods of 10 ms
    np.testing.assert_array_equal(traj.q[-1], [1.0])


def test_transition_duration_keeps_the_peak_speed_under_the_cap():
    q0, q1 = np.array([0.0, 1.0, -1.0]), np.array([3.0, 1.5, -1.2])
    assert transition_duration(q0, q1, 1.0) == pytest.approx(QUINTIC_PEAK_SPEED * 3.0)
    assert transition_duration(q0, q0, 1.0) == 1.0            # never shorter than a second
    per_joint = np.array([10.0, 0.1, 10.0])                     # joint 1 binds: 0.5 rad at 0.1 rad/s
    assert transition_duration(q0, q1, per_joint) == pytest.approx(QUINTIC_PEAK_SPEED * 5.0)
    rate = 500.0
    big_t = np.ceil(transition_duration(q0, q1, 0.7) * rate) / rate
    traj = transition(q0, np.zeros(3), q1, np.zeros(3), big_t, rate)
    assert np.abs(traj.dq).max() <= 0.7 * (1 + 1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(duration=0.0), "duration"),
    (dict(sample_rate=-1.0), "sample_rate"),
    (dict(q_to=np.zeros(3)), "q_to"),
    (dict(dq_from=np.array([np.nan, 0.0])), "dq_from"),
])
def test_transition_bad_input(kwargs, match):
    args = dict(q_from=np.zeros(2), dq_from=np.zeros(2), q_to=np.ones(2), dq_to=np.zeros(2),
                duration=1.0, sample_rate=100.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        transition(**args)
    with pytest.raises(ValueError, match="max_velocity"):
        transition_duration(np.zeros(2), np.ones(2), 0.0)


@pytest.fixture(scope="module")
def played(openarm):
    rate, v_max = 500.0, 1.0
    plan = multisine(openarm.joint_range, 4.0, rate, seed=3, max_velocity=v_max)
    q_now = np.clip(np.zeros(7), *openarm.joint_range.T)  # hanging, joint 4 on its lower limit
    profile, excitation = excitation_with_approach_and_rest(q_now, plan, rate, v_max, openarm.joint_range)
    return plan, q_now, profile, excitation, rate, v_max


def test_profile_contains_the_plan_unchanged(played):
    plan, _, profile, excitation, rate, _ = played
    for name in ("q", "dq", "ddq"):
        np.testing.assert_array_equal(getattr(profile, name)[excitation], getattr(plan, name))
    np.testing.assert_allclose(profile.time, np.arange(len(profile.time)) / rate)
    np.testing.assert_allclose(profile.time[excitation] - profile.time[excitation.start], plan.time, atol=1e-12)


def test_profile_starts_and_ends_at_rest(played):
    plan, q_now, profile, excitation, rate, _ = played
    np.testing.assert_array_equal(profile.q[0], q_now)
    for k in (0, -1):
        np.testing.assert_array_equal(profile.dq[k], 0.0)
        np.testing.assert_array_equal(profile.ddq[k], 0.0)
    # the rest ramp ends where a monotone deceleration from the plan's last velocity goes
    ramp = (len(profile.time) - excitation.stop) / rate
    assert MIN_RAMP_DURATION - 1e-12 <= ramp <= RAMP_DURATION + 1e-12
    np.testing.assert_allclose(profile.q[-1], plan.q[-1] + plan.dq[-1] * ramp / 2, atol=1e-12)


def test_profile_is_smooth_capped_and_inside_the_limits(played, openarm):
    _, _, profile, _, rate, v_max = played
    # positions and velocities are continuous across every seam: no sample-to-sample change
    # beyond what the largest speed (acceleration) allows in one period; the accelerations step
    # at the seams with the plan, which moves central differences by up to h |ddq| / 4 there
    h = 1.0 / rate
    # (the sampled peaks may sit a hair below the true ones between samples)
    assert np.abs(np.diff(profile.q, axis=0)).max() <= np.abs(profile.dq).max() * h * (1 + 1e-3)
    assert np.abs(np.diff(profile.dq, axis=0)).max() <= np.abs(profile.ddq).max() * h * (1 + 1e-3)
    np.testing.assert_allclose((profile.q[2:] - profile.q[:-2]) / (2 * h), profile.dq[1:-1],
                               atol=h * np.abs(profile.ddq).max() / 2)
    assert np.abs(profile.dq).max() <= v_max * (1 + 1e-9)
    lower, upper = openarm.joint_range.T
    assert np.all(profile.q >= lower - 1e-12) and np.all(profile.q <= upper + 1e-12)


def test_approach_never_overshoots_the_plan_start(played):
    _, q_now, profile, excitation, _, _ = played
    before = profile.q[:excitation.start + 1]
    lo = np.minimum(q_now, profile.q[excitation.start]) - 1e-12
    hi = np.maximum(q_now, profile.q[excitation.start]) + 1e-12
    # the launch ramp starts behind the plan start by dq0 T / 2 at most
    slack = np.abs(profile.dq[excitation.start]) * RAMP_DURATION / 2
    assert np.all(before >= lo - slack) and np.all(before <= hi + slack)


def test_ramps_shrink_near_a_limit_and_vanish_at_rest():
    rate = 100.0
    time = np.arange(101) / rate
    # starts at rest at 0.45 rad, ends 0.05 rad below the upper limit moving up at 1 rad/s
    plan = Trajectory(time=time, q=(0.45 + time ** 2 / 2)[:, None], dq=time[:, None], ddq=np.ones((101, 1)))
    profile, excitation = excitation_with_approach_and_rest(np.array([0.0]), plan, rate, 1.0,
                                                            np.array([[-1.0, 1.0]]))
    # no launch ramp: the 1 s approach (the minimum) leads straight into the plan
    assert excitation.start == 100
    np.testing.assert_array_equal(profile.q[excitation, 0], plan.q[:, 0])
    # the rest ramp is cut from 0.5 s to 2 * 0.05 rad / 1 rad/s = 0.1 s and stops on the limit
    rest = profile.q[excitation.stop - 1:, 0]
    assert len(rest) - 1 == 10
    assert rest.max() <= 1.0 + 1e-12
    np.testing.assert_allclose(rest[-1], 1.0, atol=1e-12)


def test_profile_bad_input(played):
    plan, q_now, _, _, rate, _ = played
    with pytest.raises(ValueError, match="sample_rate"):
        excitation_with_approach_and_rest(q_now, plan, 1000.0, 1.0)
    with pytest.raises(ValueError, match="q_now"):
        excitation_with_approach_and_rest(q_now[:3], plan, rate, 1.0)
    with pytest.raises(ValueError, match="joint_range"):
        excitation_with_approach_and_rest(q_now, plan, rate, 1.0, np.zeros((3, 2)) + [0, 1])


def test_mit_torque_is_the_pd_plus_feedforward_law():
    rng = np.random.default_rng(0)
    q, dq, q_des, dq_des, ff, kp, kd = rng.normal(size=(7, 5))
    np.testing.assert_allclose(mit_torque(q, dq, q_des, dq_des, ff, kp, kd),
                               kp * (q_des - q) + kd * (dq_des - dq) + ff)
    # broadcasting: a batch of states (N, n) against per-joint gains (n,)
    batch = mit_torque(np.zeros((4, 5)), np.ones((4, 5)), 1.0, 0.0, 0.0, kp, kd)
    np.testing.assert_allclose(batch, np.broadcast_to(kp - kd, (4, 5)))


def test_step_applies_the_torque_for_the_substeps(openarm):
    model = openarm.model
    tau = np.linspace(-1.0, 1.0, model.nv)
    ours, ref = mujoco.MjData(model), mujoco.MjData(model)
    step(model, ours, tau, substeps=3)
    ref.qfrc_applied[:] = tau
    for _ in range(3):
        mujoco.mj_step(model, ref)
    np.testing.assert_array_equal(ours.qpos, ref.qpos)
    np.testing.assert_array_equal(ours.qvel, ref.qvel)
    assert ours.time == pytest.approx(3 * model.opt.timestep)
    assert not diverged(ours)


def test_step_reports_divergence(openarm):
    data = mujoco.MjData(openarm.model)
    with mujoco_warnings() as messages, pytest.raises(DataError, match="diverged"):
        step(openarm.model, data, np.full(openarm.model.nv, 1e30), substeps=2)
    assert diverged(data)
    assert any("unstable" in m for m in messages)  # caught, not printed to MUJOCO_LOG.TXT


def test_measure_adds_noise_and_quantises():
    x = np.linspace(-1, 1, 20001)
    gen = np.random.default_rng(1)
    noisy = measure(x, 0.01, 0.0, gen)
    assert np.std(noisy - x) == pytest.approx(0.01, rel=0.03)
    coarse = measure(x, 0.0, 0.25, gen)
    np.testing.assert_array_equal(coarse, np.round(x / 0.25) * 0.25)
    np.testing.assert_array_equal(measure(x, 0.0, 0.0, gen), x)


def test_default_gains_hold_a_pose_through_step(openarm):
    # the pieces the simulator node uses, in its order: PD hold about a pose under gravity
    model = openarm.model
    kp, kd = default_gains(model)
    data = mujoco.MjData(model)
    target = openarm.joint_range.mean(axis=1)
    data.qpos[:] = target
    for _ in range(500):
        step(model, data, mit_torque(data.qpos, data.qvel, target, 0.0, 0.0, kp, kd))
    # gravity is all that pulls: settled within a few mrad/s, static deflection tau_g / kp
    assert np.abs(data.qvel).max() < 0.01
    assert np.abs(data.qpos - target).max() < 0.05
