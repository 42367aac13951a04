"""End-to-end identification against ground-truth models."""
import re

import mujoco
import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core import DataError, IdentificationError, load_robot
from sysid_core.dynamics.friction import JointModel
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify, model_parameter_vector, predict_torque
from sysid_core.identification.recording import Recording
from sysid_core.simulation import ideal_recording


def _without_friction_loss(path, tmp_path):
    """The same arm with MuJoCo's soft friction loss removed, so the model is exact."""
    text = re.sub(r'\s+frictionloss="[^"]*"', "", path.read_text())
    out = tmp_path / path.name
    out.write_text(text)
    return out


@pytest.fixture(scope="module")
def exact_panda(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exact")
    nominal = load_robot(_without_friction_loss(ROBOTS / "panda_class.xml", tmp))
    truth = load_robot(_without_friction_loss(ROBOTS / "panda_class_payload.xml", tmp))
    plan = multisine(nominal.joint_range, 6.0, 200.0, seed=3, max_velocity=2.0)
    return nominal, truth, ideal_recording(truth.model, plan, truth.joint_names)


def test_terminal_scope_recovers_payload_exactly_on_noise_free_data(exact_panda):
    nominal, truth, recording = exact_panda
    config = IdentificationConfig(scope="terminal", estimator="ols", joint_model=JointModel(("viscous",)))
    result = identify(nominal, recording, config)
    np.testing.assert_allclose(result.terminal_parameters, truth.nominal_parameters[-1], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(result.viscous, truth.damping, rtol=1e-6)
    assert result.metrics.rmse < 1e-8


def test_full_scope_recovers_base_parameters_exactly(exact_panda):
    nominal, truth, recording = exact_panda
    config = IdentificationConfig(scope="full", estimator="ols", joint_model=JointModel(("viscous",)))
    result = identify(nominal, recording, config)
    beta_true = result.base.projection @ model_parameter_vector(truth, result.column_names)
    np.testing.assert_allclose(result.estimate.values, beta_true, rtol=1e-5, atol=1e-7)
    # torques of the standard solution equal the truth's on data it never saw
    plan = multisine(nominal.joint_range, 2.0, 100.0, seed=99, max_velocity=2.0)
    np.testing.assert_allclose(predict_torque(nominal, result, plan.q, plan.dq, plan.ddq),
                               truth.inverse_dynamics(plan.q, plan.dq, plan.ddq), atol=1e-6)


def test_identified_model_matches_mj_inverse_of_written_file(exact_panda, tmp_path):
    """updated_model.xml, loaded by MuJoCo, reproduces the identified torques."""
    from sysid_core.results.export import write_updated_model
    nominal, truth, recording = exact_panda
    result = identify(nominal, recording, IdentificationConfig(scope="terminal", estimator="ols",
                                                               joint_model=JointModel(("viscous",))))
    out = tmp_path / "updated_model.xml"
    write_updated_model(nominal.path, out, nominal, result)
    model = mujoco.MjModel.from_xml_path(str(out))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    q = rng.uniform(*nominal.joint_range.T * 0.9, (20, 7))
    dq, ddq = rng.uniform(-1, 1, (20, 7)), rng.uniform(-2, 2, (20, 7))
    expected = predict_torque(nominal, result, q, dq, ddq)
    for i in range(20):
        data.qpos[:], data.qvel[:], data.qacc[:] = q[i], dq[i], ddq[i]
        mujoco.mj_inverse(model, data)
        # the file keeps the model's damping; identified viscous friction differs by ~1e-9
        np.testing.assert_allclose(data.qfrc_inverse, expected[i], atol=1e-5)


def test_missing_joint_names_and_bad_values(exact_panda):
    nominal, _, recording = exact_panda
    renamed = Recording(recording.time, recording.q, recording.dq, recording.tau,
                        ("a",) + recording.joint_names[1:], recording.ddq)
    with pytest.raises(DataError, match=r"joints \['joint1'\] of the model are not in the data"):
        identify(nominal, renamed)
    tau = recording.tau.copy()
    tau[10, 2] = np.nan
    with pytest.raises(DataError, match="NaN"):
        Recording(recording.time, recording.q, recording.dq, tau, recording.joint_names)


def test_too_few_samples(exact_panda):
    nominal, _, recording = exact_panda
    short = Recording(recording.time[:30], recording.q[:30], recording.dq[:30], recording.tau[:30],
                      recording.joint_names, recording.ddq[:30])
    with pytest.raises(DataError, match="at least .* needed"):
        identify(nominal, short)


def test_motion_of_one_joint_cannot_identify_the_payload(exact_panda):
    nominal, truth, _ = exact_panda
    plan = multisine(nominal.joint_range, 4.0, 100.0, seed=1, max_velocity=1.0)
    frozen = np.zeros_like(plan.q)
    frozen[:, 0] = 1.0
    still = type(plan)(plan.time, plan.q * frozen + (1 - frozen) * plan.q[0], plan.dq * frozen, plan.ddq * frozen)
    with pytest.raises(IdentificationError, match="rank"):
        identify(nominal, ideal_recording(truth.model, still, truth.joint_names))


def test_validation_on_another_excitation_reports_absolute_and_relative_error(exact_panda):
    """Identified on the arm without payload, validated on the arm with it: the validation
    error is exactly the payload's torque, per joint, in N m and relative to the torque."""
    nominal, truth, _ = exact_panda
    config = IdentificationConfig(scope="terminal", estimator="ols", joint_model=JointModel(("viscous",)))
    plan = multisine(nominal.joint_range, 6.0, 200.0, seed=3, max_velocity=2.0)
    check = multisine(nominal.joint_range, 4.0, 200.0, seed=30, max_velocity=2.0)
    result = identify(nominal, ideal_recording(nominal.model, plan, nominal.joint_names), config,
                      validation=ideal_recording(truth.model, check, truth.joint_names))
    # oracle: mj_inverse of both models along the validation plan, less the trimmed ends
    keep = slice(round(0.2 * 200), -round(0.2 * 200))
    tau_truth = truth.inverse_dynamics(check.q, check.dq, check.ddq)[keep]
    missed = tau_truth - nominal.inverse_dynamics(check.q, check.dq, check.ddq)[keep]
    expected = np.sqrt(np.mean(missed**2, axis=0))
    np.testing.assert_allclose(result.metrics.validation_rmse_per_joint, expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(result.metrics.validation_relative_rmse_per_joint,
                               expected / np.sqrt(np.mean(tau_truth**2, axis=0)), rtol=1e-6)
    assert result.metrics.relative_rmse_per_joint.max() < 1e-8   # in-sample the fit is exact
