"""Physically consistent standard parameters (pseudo-inertia barrier)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import ROBOTS
from sysid_core import load_robot
from sysid_core.dynamics.inertia import consistency_violations
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.consistency import consistent_parameters, nearest_consistent
from sysid_core.identification.filtering import prepare
from sysid_core.identification.identify import IdentificationConfig, identify, predict_torque
from sysid_core.simulation import MeasurementNoise, default_gains, simulate_tracking


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=10, max_size=10))
def test_nearest_consistent_is_realisable_and_keeps_real_bodies(values):
    theta = nearest_consistent(np.array(values))[0]
    assert consistency_violations(theta) == []
    real = load_robot(ROBOTS / "openarm_class_payload.xml").nominal_parameters
    np.testing.assert_allclose(nearest_consistent(real), real, rtol=1e-12, atol=1e-15)


def test_constraints_bind_when_the_data_ask_for_an_impossible_body():
    """One body whose data say 'mass -1 kg': the answer is a real body, as close as allowed."""
    nominal = np.array([1.0, 0, 0, 0.05, 0.01, 0, 0, 0.01, 0, 0.005, 0.3])  # body + one friction term
    projection = np.eye(11)
    beta = nominal.copy()
    beta[0], beta[10] = -1.0, -0.2
    theta = consistent_parameters(projection, beta, np.eye(11) * 1e-6, nominal, 1)
    assert consistency_violations(theta[:10]) == []
    assert 0.0 < theta[0] < 1e-2 and 0.0 <= theta[10] < 1e-4


def test_full_scope_on_noisy_data_is_consistent_and_fits_like_the_unconstrained_estimate():
    nominal = load_robot(ROBOTS / "panda_class.xml")
    truth = load_robot(ROBOTS / "panda_class_payload.xml")
    plan = multisine(nominal.joint_range, 10.0, 500.0, seed=4, max_velocity=2.0)
    kp, kd = default_gains(truth.model)
    feedforward = nominal.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    recording = simulate_tracking(truth.model, plan, feedforward, kp, kd, seed=4, joint_names=truth.joint_names)
    result = identify(nominal, recording, IdentificationConfig(scope="full"))
    for body, name in zip(result.body_parameters, nominal.body_names):
        assert consistency_violations(body) == [], name
    # the consistent standard set reproduces the unconstrained base estimate within its noise
    beta = result.base.projection @ result.standard
    z = (beta - result.estimate.values) / result.estimate.std
    assert np.sqrt(np.mean(z**2)) < 1.0
    # and predicts a fresh trajectory of the truth about as well as the noise allows
    check = multisine(nominal.joint_range, 4.0, 500.0, seed=40, max_velocity=2.0)
    error = predict_torque(nominal, result, check.q, check.dq, check.ddq) - truth.inverse_dynamics(check.q, check.dq, check.ddq)
    assert np.sqrt(np.mean(error**2)) < 0.1  # N m; friction loss vs Coulomb near dq = 0 dominates


def _noisy_payload_recording(seed):
    """6 s of the OpenArm-class arm with its payload, three times the default noise: short and
    noisy enough that the unconstrained terminal estimate is not a realisable body."""
    nominal = load_robot(ROBOTS / "openarm_class.xml")
    truth = load_robot(ROBOTS / "openarm_class_payload.xml")
    plan = multisine(nominal.joint_range, 6.0, 1000.0, seed=seed, max_velocity=1.0)
    kp, kd = default_gains(truth.model)
    default = MeasurementNoise()
    noise = MeasurementNoise(q_std=3 * default.q_std, dq_std=3 * default.dq_std, tau_std=3 * default.tau_std)
    feedforward = nominal.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    recording = simulate_tracking(truth.model, plan, feedforward, kp, kd, noise, seed=seed,
                                  joint_names=truth.joint_names)
    return nominal, truth, recording


@pytest.mark.parametrize("seed", [0, 3])
def test_consistent_estimator_in_the_terminal_scope(seed):
    nominal, truth, recording = _noisy_payload_recording(seed)
    free = identify(nominal, recording, IdentificationConfig(estimator="wls"))
    held = identify(nominal, recording, IdentificationConfig(estimator="consistent"))
    assert consistency_violations(free.terminal_parameters)   # the case worth having an estimator for
    assert consistency_violations(held.terminal_parameters) == []
    assert np.all(held.coulomb > 0) and np.all(held.viscous > 0)
    # the torques of the consistent set match the unconstrained fit to within the noise
    samples = prepare(recording.select(nominal.joint_names))
    residual = {name: predict_torque(nominal, r, samples.q, samples.dq, samples.ddq) - samples.tau
                for name, r in (("free", free), ("held", held))}
    rms = {name: float(np.sqrt(np.mean(e**2))) for name, e in residual.items()}
    assert rms["held"] <= 1.01 * rms["free"]
    assert held.metrics.rmse == pytest.approx(rms["held"], rel=1e-6)
    # and the payload stays where the data put it (truth: link 7 + 0.5 kg)
    true_body = truth.nominal_parameters[truth.body_names.index(nominal.terminal_body)]
    assert abs(held.terminal_parameters[0] - true_body[0]) < 0.01 * true_body[0]


def test_offsets_are_not_forced_positive():
    """A torque offset may be negative: only friction and armature carry the sign constraint."""
    nominal = np.array([1.0, 0, 0, 0.05, 0.01, 0, 0, 0.01, 0, 0.005, 0.3, 0.0])  # body, friction, offset
    beta = nominal.copy()
    beta[11] = -0.4
    theta = consistent_parameters(np.eye(12), beta, np.eye(12) * 1e-10, nominal, 1,
                                  nonnegative=[True, False])
    assert theta[11] == pytest.approx(-0.4, abs=1e-3)
