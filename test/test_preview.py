"""A profile sent ahead as knots (sysid_core.excitation.preview), against polynomials and the profile itself."""
import numpy as np
import pytest
from numpy.polynomial import polynomial as P

from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine
from sysid_core.excitation.preview import (DQ_TOLERANCE, EFFORT_TOLERANCE, Q_TOLERANCE, KNOT_SPACING_S, Preview,
                                           knots)
from sysid_core.excitation.trajectory import Trajectory

from conftest import ROBOTS

OPENARM = str(ROBOTS / "openarm_class.xml")


def _quintics(n: int, seed: int = 0) -> np.ndarray:
    """(6, n) coefficients of one random quintic per joint, lowest power first."""
    return np.random.default_rng(seed).normal(size=(6, n))


def test_sampling_reproduces_any_quintic_between_knots():
    # quintic Hermite interpolation is exact for quintics: knots from the polynomial's own values
    coef = _quintics(3)
    knot_times = np.array([0.0, 0.013, 0.05, 0.051, 0.2])
    value = lambda c, t: np.stack([P.polyval(t, c[:, j]) for j in range(c.shape[1])], axis=1)
    d1, d2 = P.polyder(coef, 1, axis=0), P.polyder(coef, 2, axis=0)
    effort = np.random.default_rng(1).normal(size=(5, 3))
    preview = Preview(time=knot_times, q=value(coef, knot_times), dq=value(d1, knot_times),
                      ddq=value(d2, knot_times), effort=effort)
    t = np.linspace(0.0, 0.2, 997)
    q, dq, tau = preview.sample(t)
    np.testing.assert_allclose(q, value(coef, t), atol=1e-12)
    np.testing.assert_allclose(dq, value(d1, t), atol=1e-10)
    # effort: linear between knots
    for j in range(3):
        np.testing.assert_allclose(tau[:, j], np.interp(t, knot_times, effort[:, j]), atol=1e-12)


def test_before_the_first_and_after_the_last_knot_the_ends_hold():
    preview = Preview(time=np.array([0.1, 0.2]), q=np.array([[1.0], [2.0]]), dq=np.array([[0.5], [0.0]]),
                      ddq=np.zeros((2, 1)), effort=np.array([[3.0], [4.0]]))
    q, dq, tau = preview.sample(np.array([0.0, 0.1, 0.2, 5.0]))
    np.testing.assert_array_equal(q[:, 0], [1.0, 1.0, 2.0, 2.0])
    np.testing.assert_array_equal(dq[:, 0], [0.5, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(tau[:, 0], [3.0, 3.0, 4.0, 4.0])
    assert preview.end == 0.2


@pytest.mark.parametrize("rate", [500.0, 1000.0])
def test_knots_of_a_real_profile_give_every_sample_of_it(rate):
    robot = load_robot(OPENARM)
    plan = multisine(robot.joint_range, 10.0, rate, seed=3, max_velocity=1.0)
    start = np.clip(np.zeros(robot.n_joints), *robot.joint_range.T)
    profile, _ = excitation_with_approach_and_rest(start, plan, rate, 1.0, robot.joint_range)
    feedforward = robot.inverse_dynamics(profile.q, profile.dq, profile.ddq)
    preview = knots(profile, feedforward)
    # far fewer knots than samples: the message is small; the seams (accelerations step there)
    # get their samples as knots
    assert preview.time.shape[0] < 0.3 * profile.time.shape[0]
    assert preview.time[-1] == pytest.approx(profile.time[-1] - profile.time[0])
    q, dq, tau = preview.sample(profile.time - profile.time[0])
    assert np.abs(q - profile.q).max() <= Q_TOLERANCE
    assert np.abs(dq - profile.dq).max() <= DQ_TOLERANCE
    assert np.abs(tau - feedforward).max() <= EFFORT_TOLERANCE * np.abs(feedforward).max()
    # the sample period as knot spacing keeps every sample
    every = knots(profile, feedforward, spacing_s=0.1 / rate)
    assert every.time.shape[0] == profile.time.shape[0]


def test_a_step_in_acceleration_between_knots_gets_its_samples_as_knots():
    # a profile whose acceleration steps at t = 0.5 s: a single quintic cannot follow it
    rate = 1000.0
    t = np.arange(1001) / rate
    ddq = np.where(t < 0.5, 1.0, -1.0)[:, None]
    dq = np.concatenate([[0.0], np.cumsum((ddq[1:, 0] + ddq[:-1, 0]) / 2) / rate])[:, None]
    q = np.concatenate([[0.0], np.cumsum((dq[1:, 0] + dq[:-1, 0]) / 2) / rate])[:, None]
    profile = Trajectory(time=t, q=q, dq=dq, ddq=ddq)
    preview = knots(profile, ddq.copy(), spacing_s=KNOT_SPACING_S)
    qs, dqs, taus = preview.sample(t)
    assert np.abs(qs - q).max() <= Q_TOLERANCE and np.abs(taus - ddq).max() <= EFFORT_TOLERANCE
    assert 0.5 in np.round(preview.time, 9)  # the seam is a knot


@pytest.mark.parametrize("change, message", [
    (dict(time=np.array([0.0, 0.0])), "increase strictly"),
    (dict(q=np.array([[np.nan], [0.0]])), "NaN"),
    (dict(effort=np.zeros((2, 2))), "shape"),
])
def test_a_bad_preview_is_refused(change, message):
    fields = dict(time=np.array([0.0, 0.1]), q=np.zeros((2, 1)), dq=np.zeros((2, 1)), ddq=np.zeros((2, 1)),
                  effort=np.zeros((2, 1)))
    with pytest.raises(ValueError, match=message):
        Preview(**{**fields, **change})
