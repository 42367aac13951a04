"""The arm a simulator node drives (sysid_core.simulation.simulated_arm), checked against itself
run the streamed way, period by period, and against the watchdog's rule in simulated time."""
import mujoco
import numpy as np
import pytest

from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine
from sysid_core.excitation.preview import knots
from sysid_core.simulation import MeasurementNoise
from sysid_core.simulation.simulated_arm import SimulatedArm

from conftest import ROBOTS

OPENARM = str(ROBOTS / "openarm_class.xml")
RATE = 1000.0


@pytest.fixture(scope="module")
def robot():
    return load_robot(OPENARM)


@pytest.fixture(scope="module")
def profile(robot):
    plan = multisine(robot.joint_range, 1.0, RATE, seed=5, max_velocity=1.0)
    start = np.clip(np.zeros(robot.n_joints), *robot.joint_range.T)
    profile, _ = excitation_with_approach_and_rest(start, plan, RATE, 1.0, robot.joint_range)
    return profile, robot.inverse_dynamics(profile.q, profile.dq, profile.ddq)


def _arm(robot, **kwargs) -> SimulatedArm:
    return SimulatedArm(robot.model, robot.joint_range, RATE, noise=MeasurementNoise.off(), **kwargs)


def test_one_block_is_the_same_as_its_periods_one_by_one(robot):
    whole, single = _arm(robot), _arm(robot)
    everything = np.arange(robot.n_joints)
    for arm in (whole, single):
        arm.command(everything, np.full(robot.n_joints, 0.2), np.zeros(robot.n_joints), np.zeros(robot.n_joints))
    block = whole.advance(50)
    pieces = [single.advance(1) for _ in range(50)]
    assert len(block) == 50 and whole.periods == single.periods == 50
    np.testing.assert_array_equal(block.stamp_ns, (np.arange(50) + 1) * 1_000_000)
    for field in ("stamp_ns", "q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(block, field), np.concatenate([getattr(p, field) for p in pieces]))


def test_a_preview_drives_the_arm_as_the_same_samples_streamed_each_period(robot, profile):
    trajectory, feedforward = profile
    samples = trajectory.time.shape[0]
    previewed, streamed = _arm(robot), _arm(robot)
    # a knot per sample: the preview then holds exactly the streamed commands
    previewed.follow(knots(trajectory, feedforward, spacing_s=1 / RATE), start_ns=previewed.next_stamp_ns)
    blocks = [previewed.advance(100) for _ in range(-(-samples // 100))]
    everything = np.arange(robot.n_joints)
    pieces = []
    for i in range(samples):
        streamed.command(everything, trajectory.q[i], trajectory.dq[i], feedforward[i])
        pieces.append(streamed.advance(1))
    for field in ("q", "dq", "tau"):
        np.testing.assert_allclose(np.concatenate([getattr(b, field) for b in blocks])[:samples],
                                   np.concatenate([getattr(p, field) for p in pieces]), atol=1e-9)
    # it did follow the profile: the arm is the model the feed-forward came from
    q = np.concatenate([b.q for b in blocks])[:samples]
    assert np.abs(q - trajectory.q).max() < 1e-3 * np.abs(trajectory.q - trajectory.q[0]).max()


def test_the_end_of_a_preview_ages_like_a_command(robot, profile):
    trajectory, feedforward = profile
    arm = _arm(robot, command_timeout_s=0.02)
    arm.follow(knots(trajectory, feedforward), start_ns=arm.next_stamp_ns)
    end_ns = arm.preview_end_ns
    # up to end + timeout: tracked; the next period (stamp - end > timeout): damping only
    last_tracked = (end_ns + 20_000_000) // arm.period_ns
    arm.advance(last_tracked)
    assert arm.next_stamp_ns - arm.period_ns == end_ns + 20_000_000 and not arm.stale.any()
    arm.advance(1)
    assert arm.stale.all()
    arm.command(np.arange(robot.n_joints), trajectory.q[-1], np.zeros(robot.n_joints), feedforward[-1])
    arm.advance(1)
    assert not arm.stale.any()


def test_a_command_ends_a_preview_and_a_preview_may_start_later(robot, profile):
    trajectory, feedforward = profile
    arm = _arm(robot)
    start = arm.next_stamp_ns + 10 * arm.period_ns
    arm.follow(knots(trajectory, feedforward), start_ns=start)
    arm.advance(10)  # before its start: the initial pose is held, no feed-forward
    assert arm.preview_end_ns is not None
    arm.command(np.arange(robot.n_joints), trajectory.q[0], np.zeros(robot.n_joints), np.zeros(robot.n_joints))
    assert arm.preview_end_ns is None


def test_a_diverging_arm_stops_with_an_error_and_a_short_block(robot):
    n = robot.n_joints
    arm = _arm(robot, kp=np.full(n, 1e12), kd=np.full(n, 1e9))
    arm.command(np.arange(n), np.full(n, 1.0), np.zeros(n), np.zeros(n))
    block = arm.advance(1000)
    assert arm.error is not None and "diverged" in arm.error
    assert len(block) < 1000 and arm.periods == len(block) - 1
    assert len(arm.advance(10)) == 0


def test_measurement_noise_is_applied_to_the_block(robot):
    noisy = SimulatedArm(robot.model, robot.joint_range, RATE, noise=MeasurementNoise(q_resolution=1e-3), seed=1)
    block = noisy.advance(200)
    np.testing.assert_allclose(block.q / 1e-3, np.round(block.q / 1e-3), atol=1e-9)  # quantised
    assert np.std(block.tau - _arm(robot).advance(200).tau) > 0  # noisy torque


def _gravity(robot, q) -> np.ndarray:
    """MuJoCo's gravity torque (n,) N m of the arm at q (its bias force at rest)."""
    data = mujoco.MjData(robot.model)
    data.qpos[:] = q
    mujoco.mj_forward(robot.model, data)
    return data.qfrc_bias.copy()


@pytest.mark.parametrize("gains", ["mit", "computed torque"])
def test_a_command_without_position_target_floats_the_joint_on_its_feed_forward(robot, gains):
    """A NaN position: the law has no position term, so the arm, fed its exact gravity torque,
    stays where it is whatever kp, while a position target 0.1 rad away pulls it there."""
    n = robot.n_joints
    q0 = np.array([0.5, 0.4, 0.2, 1.0, 0.1, 0.3, 0.0])
    kwargs = {} if gains != "mit" else dict(kp=np.full(n, 50.0), kd=np.full(n, 1.0))
    # one command for the whole half second: a timeout beyond it
    floating, pulled = (_arm(robot, initial_positions=q0, command_timeout_s=1.0, **kwargs) for _ in range(2))
    everything = np.arange(n)
    gravity = _gravity(robot, q0)
    floating.command(everything, np.full(n, np.nan), np.zeros(n), gravity)
    pulled.command(everything, q0 + 0.1, np.zeros(n), gravity)
    held, moved = floating.advance(500), pulled.advance(500)
    # the plant is the model itself, noise off: the exact gravity torque holds it to rounding
    assert np.abs(held.q - q0).max() < 1e-9 and not floating.stale.any()
    assert np.all(np.abs(moved.q[-1] - q0 - 0.1) < 0.05)
    if gains == "mit":   # the torque reported is the feed-forward and kd's term alone
        np.testing.assert_allclose(held.tau, gravity - 1.0 * held.dq, atol=1e-12)


def test_a_stale_command_without_position_target_falls_back_to_damping_only(robot):
    n = robot.n_joints
    arm = _arm(robot, kp=np.full(n, 50.0), kd=np.full(n, 1.0), command_timeout_s=0.02)
    arm.command(np.arange(n), np.full(n, np.nan), np.zeros(n), np.full(n, 0.3))
    block = arm.advance(20)
    assert not arm.stale.any() and np.any(block.tau != -1.0 * block.dq)
    block = arm.advance(10)
    # beyond the timeout: no feed-forward, no position term, damping alone
    assert arm.stale.all()
    np.testing.assert_allclose(block.tau[-1], -1.0 * block.dq[-1], atol=1e-12)


def test_a_nan_velocity_or_effort_or_an_infinite_position_is_refused(robot):
    n = robot.n_joints
    arm = _arm(robot)
    for q, dq, tau in ((np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)),
                       (np.full(n, np.nan), np.zeros(n), np.full(n, np.inf)),
                       (np.full(n, np.inf), np.zeros(n), np.zeros(n))):
        with pytest.raises(ValueError, match="finite"):
            arm.command(np.arange(n), q, dq, tau)
