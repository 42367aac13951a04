"""The GMM residual model against what generated the data and against an independent evaluation.

The oracle of the evaluation is SciPy's multivariate normal density and a plain least-squares
conditional per component, written here from the GMR definition, on the JSON numbers alone.
The end-to-end cases simulate an arm whose torque holds a known effect the rigid model cannot
explain (or none), identify it with sysid-identify and judge the model on a separate recording.
"""
import copy
import json

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from conftest import MODELS, ROBOTS
from sysid_core.cli import main
from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError
from sysid_core.excitation.multisine import multisine
from sysid_core.identification import recording_files as rf
from sysid_core.identification.recording import Recording
from sysid_core.identification.identify import IdentificationConfig, identify, predict_torque
from sysid_core.identification.residual import (JointResidual, ResidualModel, compensate, fit_residual_model,
                                                residual_samples)
from sysid_core.simulation import MeasurementNoise, ideal_recording
from sysid_core.simulation.elastic import Transmission, simulate_elastic

JOINTS = ("a", "b")


def _motion(seed, samples=12_000, rate=500.0):
    """Two joints moving as sums of sines (rad, rad/s): one excitation's frequencies and
    amplitudes, its phases drawn per seed (each seed a separate recording of the same kind)."""
    plan = np.random.default_rng(0)
    freq = plan.uniform(0.1, 0.6, (2, 4))
    amp = plan.uniform(0.2, 0.5, (2, 4))
    t = np.arange(samples) / rate
    phase = np.random.default_rng(seed).uniform(0, 2 * np.pi, (2, 4))
    q = np.stack([np.sum(amp[j] * np.sin(2 * np.pi * freq[j] * t[:, None] + phase[j]), axis=1) for j in range(2)], 1)
    dq = np.stack([np.sum(amp[j] * 2 * np.pi * freq[j] * np.cos(2 * np.pi * freq[j] * t[:, None] + phase[j]), axis=1)
                   for j in range(2)], 1)
    return q, dq


def _unexplained(q, dq):
    """What a rigid model cannot explain (N m): a position ripple and a velocity-shaped friction
    excess on joint a, a ripple on joint b."""
    return np.column_stack([0.4 * np.sin(4 * q[:, 0]) + 0.3 * np.tanh(dq[:, 0] / 0.1) * np.exp(-np.abs(dq[:, 0])),
                            0.2 * np.cos(3 * q[:, 1])])


def _rms(a):
    return np.sqrt(np.mean(np.square(a), axis=0))


NOISE = 0.03  # N m, the measured torque's noise in the recordings of ``_unexplained``


@pytest.fixture(scope="module")
def unexplained_fit():
    """(model, q, dq): the residual model fitted to ``_unexplained`` with NOISE on recording 1."""
    q, dq = _motion(1)
    rng = np.random.default_rng(0)
    return fit_residual_model(JOINTS, q, dq, _unexplained(q, dq) + NOISE * rng.standard_normal(q.shape)), q, dq


def test_residual_model_explains_what_the_rigid_model_cannot(unexplained_fit):
    model, _, _ = unexplained_fit
    assert all(j.applied for j in model.joints), [j.reason for j in model.joints]
    qv, dqv = _motion(2)  # a separate recording, with noise of its own
    measured = _unexplained(qv, dqv) + NOISE * np.random.default_rng(2).standard_normal(qv.shape)
    without, with_model = _rms(measured), _rms(measured - model.predict(qv, dqv))
    assert np.all(with_model < 0.7 * without), (without, with_model)


def _load(q, ddq):
    """A two-link arm's joint torques (N, 2) N m, as a rigid model predicts them: gravity of both
    links and an inertial term, so joint a's load depends on joint b's pose too."""
    gravity_a = 3.0 * np.cos(q[:, 0]) + 1.5 * np.cos(q[:, 0] + q[:, 1])
    gravity_b = 1.5 * np.cos(q[:, 0] + q[:, 1])
    return np.column_stack([gravity_a + 0.3 * ddq[:, 0], gravity_b + 0.1 * ddq[:, 1]])


def _load_friction(torque, dq):
    """Gearbox friction growing with the transmitted torque: 10 % of it against the motion."""
    return 0.1 * np.abs(torque) * np.tanh(dq / 0.05)


def test_friction_growing_with_the_load_is_learnt_from_the_predicted_torque():
    rng = np.random.default_rng(13)
    q, dq = _motion(14)
    ddq = np.gradient(dq, axis=0) * 500.0
    torque = _load(q, ddq)
    noise = 0.02
    residual = _load_friction(torque, dq) + noise * rng.standard_normal(q.shape)
    model = fit_residual_model(JOINTS, q, dq, residual, torque=torque)
    assert [j.inputs for j in model.joints] == [("q:a", "dq:a", "torque:a"), ("q:b", "dq:b", "torque:b")]
    assert all(j.applied for j in model.joints), [j.reason for j in model.joints]
    qv, dqv = _motion(15)
    torque_v = _load(qv, np.gradient(dqv, axis=0) * 500.0)
    measured = _load_friction(torque_v, dqv) + noise * rng.standard_normal(qv.shape)
    without = _rms(measured)
    with_torque = _rms(measured - model.predict(qv, dqv, torque=torque_v))
    assert np.all(with_torque < 0.7 * without), (without, with_torque)
    with pytest.raises(DataError, match="torque"):
        model.predict(qv, dqv)


def test_a_gain_only_some_stretches_show_is_not_applied():
    """A residual that follows joint a's position in the first half of the recording only (as a
    short recording's coincidences do): held out in turn, the stretches disagree."""
    rng = np.random.default_rng(16)
    q, dq = _motion(17)
    residual = 0.02 * rng.standard_normal(q.shape)
    half = q.shape[0] // 2
    residual[:half, 0] += 0.3 * np.sin(4 * q[:half, 0])
    model = fit_residual_model(JOINTS, q, dq, residual)
    joint = model.joints[0]
    assert not joint.applied and "not applied" in joint.reason, joint.reason
    assert len(joint.heldout_gains) == 4 and min(joint.heldout_gains) < 0.02 < max(joint.heldout_gains)
    assert np.all(model.predict(q, dq)[:, 0] == 0.0)


def test_pure_noise_gets_no_model_and_changes_nothing():
    rng = np.random.default_rng(3)
    q, dq = _motion(4)
    model = fit_residual_model(JOINTS, q, dq, 0.05 * rng.standard_normal(q.shape))
    qv, dqv = _motion(5)
    measured = 0.05 * rng.standard_normal(qv.shape)
    change = _rms(measured - model.predict(qv, dqv)) / _rms(measured) - 1
    assert np.all(np.abs(change) < 0.02), (change, [j.reason for j in model.joints])


def _reference(entry: dict, x: np.ndarray) -> np.ndarray:
    """GMR from the JSON entry with SciPy densities and a least-squares gain per component."""
    d = len(entry["inputs"])
    mean, scale = np.array(entry["mean"]), np.array(entry["scale"])
    z = (x - mean[:d]) / scale[:d]
    num = np.zeros(len(x))
    den = np.zeros(len(x))
    for w, m, c in zip(entry["weights"], np.array(entry["means"]), np.array(entry["covariances"])):
        density = w * multivariate_normal(m[:d], c[:d, :d]).pdf(z)
        gain = np.linalg.lstsq(c[:d, :d], c[:d, d], rcond=None)[0]
        num += density * (m[d] + (z - m[:d]) @ gain)
        den += density
    background = np.exp(entry["background"])  # predicts a residual of zero
    num += background * (-mean[d] / scale[d])
    den += background
    return mean[d] + scale[d] * num / den


def test_json_evaluated_by_an_independent_reference_equals_predict(tmp_path):
    rng = np.random.default_rng(6)
    q, dq = _motion(7)
    deflection = 1e-3 * rng.standard_normal(q.shape)
    torque = _load(q, np.gradient(dq, axis=0) * 500.0)
    residual = _unexplained(q, dq) + _load_friction(torque, dq) + 0.02 * rng.standard_normal(q.shape)
    model = fit_residual_model(JOINTS, q, dq, residual, deflection=deflection, torque=torque)
    assert all(j.applied for j in model.joints), [j.reason for j in model.joints]
    path = tmp_path / "residual_model.json"
    path.write_text(json.dumps(model.as_dict()))
    document = json.loads(path.read_text())
    loaded = ResidualModel.from_dict(document)
    qv, dqv = _motion(8)
    dv = 1e-3 * rng.standard_normal(qv.shape)
    tv = _load(qv, np.gradient(dqv, axis=0) * 500.0)
    predicted = loaded.predict(qv, dqv, dv, tv)
    assert np.allclose(predicted, model.predict(qv, dqv, dv, tv), rtol=0, atol=1e-12)
    assert np.all(np.abs(predicted).max(axis=0) > 0.1)  # a correction, not the background's zero
    assert set(document["input_kinds"]) == {"q", "dq", "torque", "deflection"}
    for j, entry in enumerate(document["joints"]):
        assert entry["inputs"] == [f"{kind}:{JOINTS[j]}" for kind in ("q", "dq", "torque", "deflection")]
        reference = _reference(entry, np.column_stack([qv[:, j], dqv[:, j], tv[:, j], dv[:, j]]))
        assert np.allclose(predicted[:, j], reference, rtol=1e-9, atol=1e-9)
    with pytest.raises(DataError, match="deflection"):
        loaded.predict(qv, dqv, torque=tv)
    with pytest.raises(DataError, match="torque"):
        loaded.predict(qv, dqv, dv)


def test_far_from_its_data_the_model_corrects_nothing(unexplained_fit):
    model, q, dq = unexplained_fit
    inside = model.predict(q[:500], dq[:500])
    assert np.all(np.abs(inside).max(axis=0) > 0.1)  # it does correct where it learnt
    # poses 5 rad and speeds 5 rad/s beyond any it was trained on
    far = model.predict(q[:500] + 5 + np.ptp(q), dq[:500] + 5 + np.ptp(dq))
    assert np.all(np.abs(far) < 1e-6), np.abs(far).max()


@pytest.fixture(scope="module")
def joint_entry():
    """A joint's entry of a fitted model's JSON (dict), fitted once for every damage below."""
    rng = np.random.default_rng(9)
    q, dq = _motion(10)
    return fit_residual_model(JOINTS, q, dq, _unexplained(q, dq) + 0.02 * rng.standard_normal(q.shape),
                              components=(4,)).as_dict()["joints"][0]


@pytest.mark.parametrize("change, message", [
    (lambda e: e.update(weights=[0.5, 0.6] + e["weights"][2:]), "weights"),
    (lambda e: e["covariances"][0][0].__setitem__(0, -1.0), "positive definite"),
    (lambda e: e.update(scale=[0.0] + e["scale"][1:]), "scales"),
    (lambda e: e.update(inputs=["current:a", "dq:a"]), "inputs"),
    (lambda e: e.update(mean=[float("nan")] + e["mean"][1:]), "NaN"),
])
def test_a_damaged_file_is_refused(joint_entry, change, message):
    entry = copy.deepcopy(joint_entry)
    assert entry["applied"], entry["reason"]
    JointResidual.from_dict(entry)
    change(entry)
    with pytest.raises(DataError, match=message):
        JointResidual.from_dict(entry)


# --------------------------------------------------------------------------- end to end

PLANAR = MODELS / "planar_2r_vertical.xml"


def _identify(arm, out, *recording_options) -> dict:
    status = main([str(arm), "--recording", *recording_options, "--residual", "gmm", "--no-plots",
                   "--output-dir", str(out / "result")])
    assert status == 0
    return json.loads((out / "result" / "params.json").read_text())


def _validation(document: dict) -> tuple:
    """Validation RMSE (n,) without and with the residual model, N m."""
    joints = document["residual"]["joints"]
    return tuple(np.array([j["validation_rmse"][key] for j in joints]) for key in ("without", "with"))


def _gearbox(theta, dtheta, link):
    """What the rigid model cannot explain (N m on the rotor): friction of 10 % of the torque the
    transmission passes, against the rotor's motion, and a cogging ripple of the rotor angle."""
    return -0.1 * np.abs(link) * np.tanh(dtheta / 0.05) + 0.03 * np.sin(8 * theta)


@pytest.fixture(scope="module")
def elastic_runs():
    """The planar arm with elastic transmissions and ``_gearbox``, tracking two multisines at
    500 Hz: {"train": (plan, recording) of 40 s, "val": (plan, recording) of 20 s}."""
    robot = load_robot(PLANAR)
    stiffness, rotor = np.array([20000.0, 5000.0]), np.array([0.02, 0.01])
    transmission = Transmission(stiffness, 0.1 * np.sqrt(stiffness * rotor), rotor)
    runs = {}
    for name, seed, duration in (("train", 0, 40.0), ("val", 1, 20.0)):
        plan = multisine(robot.joint_range, duration, 500.0, seed=seed, max_velocity=1.0)
        runs[name] = plan, simulate_elastic(PLANAR, plan, transmission, robot.model, seed=10 + seed,
                                            rotor_torque=_gearbox)
    return runs


def test_an_elastic_arm_with_a_gearbox_the_model_does_not_know(elastic_runs, tmp_path):
    robot = load_robot(PLANAR)
    for name, (_, recording) in elastic_runs.items():
        rf.write_csv(tmp_path / f"{name}.csv", recording)
    document = _identify(PLANAR, tmp_path, str(tmp_path / "train.csv"), "--validation-recording",
                         str(tmp_path / "val.csv"))
    without, with_model = _validation(document)
    # on a separate recording, pooled over the joints
    assert np.sqrt(np.sum(with_model ** 2) / np.sum(without ** 2)) < 0.7, (without, with_model)
    assert np.all(with_model < without)
    model = ResidualModel.from_dict(json.loads((tmp_path / "result" / "residual_model.json").read_text()))
    assert [j.inputs for j in model.joints] == [
        tuple(f"{kind}:{joint}" for kind in ("q", "dq", "torque", "deflection")) for joint in robot.joint_names]


def test_data_the_rigid_model_explains_are_left_alone(tmp_path):
    """MuJoCo's inverse dynamics of the arm (no friction) with the default noise: nothing but
    noise is left, and the model changes the validation RMSE by less than 2 %."""
    robot = load_robot(PLANAR)
    noise, rng = MeasurementNoise(), np.random.default_rng(4)
    for name, seed, duration in (("train", 0, 40.0), ("val", 1, 20.0)):
        exact = ideal_recording(robot.model, multisine(robot.joint_range, duration, 500.0, seed=seed,
                                                       max_velocity=1.0), robot.joint_names)
        noisy = [a + s * rng.standard_normal(a.shape) for a, s in
                 ((exact.q, noise.q_std), (exact.dq, noise.dq_std), (exact.tau, noise.tau_std))]
        rf.write_csv(tmp_path / f"{name}.csv", Recording(exact.time, *noisy, exact.joint_names))
    document = _identify(PLANAR, tmp_path, str(tmp_path / "train.csv"), "--validation-recording",
                         str(tmp_path / "val.csv"))
    without, with_model = _validation(document)
    assert np.all(np.abs(with_model / without - 1) < 0.02), (without, with_model)


def test_a_short_recording_is_never_made_worse(tmp_path):
    """8 s of an arm carrying a payload its nominal model does not know, the last quarter the
    validation: a few seconds show gains the next seconds do not repeat. Noise-free torques:
    any worsening would be the model's own."""
    nominal, truth = load_robot(ROBOTS / "openarm_class.xml"), load_robot(ROBOTS / "openarm_class_payload.xml")
    plan = multisine(nominal.joint_range, 8.0, 500.0, seed=1, max_velocity=2.0)
    rf.write_csv(tmp_path / "run.csv", ideal_recording(truth.model, plan, truth.joint_names))
    document = _identify(ROBOTS / "openarm_class.xml", tmp_path, str(tmp_path / "run.csv"),
                         "--validation-fraction", "0.25")
    without, with_model = _validation(document)
    assert np.all(with_model <= 1.02 * without), (without, with_model)
    for joint in document["residual"]["joints"]:
        assert joint["applied"] or joint["reason"].startswith("not applied"), joint


def test_predict_torque_adds_the_json_models_correction(elastic_runs):
    """``predict_torque`` with a residual model read back from its JSON: the identified model's
    torque plus, per joint, the NumPy-only reference evaluation of the file at (q, dq, that torque,
    the deflection). Identified from every 4th sample of the training run (125 Hz, over twice the
    rows a second the 10 Hz low-pass needs: run_size.ROWS_PER_CUTOFF): the comparison is exact
    whatever the model's quality, it only needs a joint whose correction is applied."""
    robot = load_robot(PLANAR)
    plan, full = elastic_runs["train"]
    recording = full.rows(slice(None, None, 4))
    result = identify(robot, recording, IdentificationConfig())
    model, _ = compensate(robot, result, recording)
    assert any(j.applied for j in model.joints), [j.reason for j in model.joints]
    document = json.loads(json.dumps(model.as_dict()))
    loaded = ResidualModel.from_dict(document)
    q, dq, ddq, motor_q = plan.q[::7], plan.dq[::7], plan.ddq[::7], full.motor_q[::7]
    rigid = predict_torque(robot, result, q, dq, ddq)
    corrected = predict_torque(robot, result, q, dq, ddq, residual=loaded, motor_q=motor_q)
    for j, entry in enumerate(document["joints"]):
        inputs = np.column_stack([q[:, j], dq[:, j], rigid[:, j], q[:, j] - motor_q[:, j]])
        expected = _reference(entry, inputs) if entry["applied"] else np.zeros(len(q))
        np.testing.assert_allclose(corrected[:, j] - rigid[:, j], expected, rtol=1e-9, atol=1e-9)
    with pytest.raises(DataError, match="deflection"):
        predict_torque(robot, result, q, dq, ddq, residual=loaded)


def test_a_motor_side_measured_at_some_samples_is_no_input():
    """An input must be there at every sample: a deflection measured at some samples only (NaN
    elsewhere) is left out of the residual model's inputs, which then are q, dq and the torque."""
    robot = load_robot(PLANAR)
    plan = multisine(robot.joint_range, 10.0, 500.0, seed=0, max_velocity=1.0)
    exact = ideal_recording(robot.model, plan, robot.joint_names)
    motor = np.full_like(exact.q, np.nan)
    motor[::25] = exact.q[::25]
    sparse = Recording(exact.time, exact.q, exact.dq, exact.tau, exact.joint_names, motor_q=motor)
    result = identify(robot, sparse, IdentificationConfig())
    assert residual_samples(robot, result, sparse)["deflection"] is None
    dense = Recording(exact.time, exact.q, exact.dq, exact.tau, exact.joint_names, motor_q=exact.q - 1e-4)
    np.testing.assert_allclose(residual_samples(robot, result, dense)["deflection"], 1e-4, rtol=1e-6)
