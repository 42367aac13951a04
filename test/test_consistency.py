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
from sysid_core.identification.identify import IdentificationConfig, fitted_torque, identify, predict_torque
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


def test_the_model_fills_in_only_what_the_data_leave_undetermined():
    """A body with two joint terms the model leaves at zero (Coulomb friction, armature), as
    nearly every URDF does: the data determine the Coulomb level alone and the armature only
    together with the body's Izz. The Coulomb level is what the data say, not pulled to the
    model's zero; the shared direction goes to the unknown armature, the modelled Izz keeps
    its value; the answer is the data's exactly (a real body: nothing to move)."""
    body = np.array([1.2, 0.02, -0.03, 0.1, 0.02, 0.001, -0.002, 0.025, 0.003, 0.012])
    nominal = np.concatenate([body, [0.0, 0.0]])          # coulomb, armature: not in the model
    truth = nominal + np.concatenate([[0.1, 0.01, 0, -0.004], np.zeros(6), [0.3, 0.04]])
    projection = np.eye(12)[:11]
    projection[9, 11] = 1.0                               # Izz + armature, one base parameter
    projection[10] = np.eye(12)[10]                       # coulomb
    beta = projection @ truth
    covariance = np.diag((1e-4 * np.abs(beta) + 1e-6) ** 2)
    theta = consistent_parameters(projection, beta, covariance, nominal, 1)
    np.testing.assert_allclose(projection @ theta, beta, rtol=1e-6, atol=1e-9)
    assert theta[10] == pytest.approx(0.3, rel=1e-6)
    assert theta[9] == pytest.approx(body[9], rel=1e-3) and theta[11] == pytest.approx(0.04, rel=1e-3)


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
    # the fit's RMSE is that of the delivered (consistent) set on the data as it regressed them
    fitted = np.concatenate([samples.tau - part for samples, part in fitted_torque(nominal, held, recording)])
    assert held.metrics.rmse == pytest.approx(float(np.sqrt(np.mean(fitted**2))), rel=1e-6)
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


def test_barrier_hessian_stays_positive_next_to_the_boundary():
    """The log-det barrier's derivatives against an independent oracle: central differences of
    its value and gradient on a well-conditioned body, and, on a body next to its floor (where
    J^-1 dJ J^-1 dJ gives Hessian diagonals of -1e33 and the full-scope projection a NaN step that
    ends in LinAlgError: xArm7 in bench/excitation_quality.py), no Hessian there and a nonnegative
    diagonal (a sum of squares) just inside."""
    from sysid_core.identification.consistency import _barrier
    body = np.array([2.0, 0.1, -0.05, 0.2, 0.05, 0.002, -0.001, 0.06, 0.003, 0.04])
    signed, floor = np.ones(0, dtype=bool), np.zeros((1, 4, 4))
    value, grad, hess = _barrier(body, 1, signed, floor)
    h = 1e-6
    steps = np.eye(10) * h
    fd_grad = np.array([(_barrier(body + e, 1, signed, floor)[0] - _barrier(body - e, 1, signed, floor)[0]) / (2 * h)
                        for e in steps])
    fd_hess = np.array([(_barrier(body + e, 1, signed, floor)[1] - _barrier(body - e, 1, signed, floor)[1]) / (2 * h)
                        for e in steps])
    np.testing.assert_allclose(grad, fd_grad, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hess, fd_hess, rtol=1e-5, atol=1e-4)
    # the xArm7's last body and its floor (the welded payload's pseudo-inertia plus a margin) where
    # the full-scope projection of bench/excitation_quality.py (noise seed 1009) stopped on a NaN
    near_body = np.array([1.3335659885653288, 2.8389554055356595e-02, -1.5790126214971185e-02,
                          5.2939034745396511e-02, 5.9755649997497683e-03, 8.5348423105308449e-04,
                          2.5704861145921124e-04, 6.5242755332740052e-03, 4.6780459508578414e-05,
                          3.1571860064262226e-03])
    near = np.array([[6.8862684573494685e-05, 2.6309917900959011e-07, 1.9678956216530460e-05, 3.5457634440027338e-04],
                     [2.6309917900959011e-07, 8.1518555063272232e-04, 3.7137158484631228e-05, 1.0017449533199999e-03],
                     [1.9678956216530460e-05, 3.7137158484631228e-05, 4.0470235807013935e-03, 4.8214670103899918e-02],
                     [3.5457634440027338e-04, 1.0017449533199999e-03, 4.8214670103899918e-02, 7.5143881429600012e-01]])
    # J - F there is positive definite to eigvalsh but not to Cholesky: the barrier now calls it
    # outside its domain (the line search steps back) instead of returning a Hessian of rounding
    # noise; a step short of it is inside, with a sum-of-squares Hessian
    assert _barrier(near_body, 1, signed, near[None]) is None
    result = _barrier(near_body, 1, signed, 0.999999 * near[None])
    assert result is not None
    _, grad, hess = result
    assert np.all(np.isfinite(grad)) and np.all(np.isfinite(hess))
    assert np.all(np.diag(hess) >= 0)
