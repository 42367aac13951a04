"""The GMM residual model against what generated the data and against an independent evaluation.

The oracle of the evaluation is SciPy's multivariate normal density and a plain least-squares
conditional per component, written here from the GMR definition, on the JSON numbers alone.
"""
import json

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from sysid_core.errors import DataError
from sysid_core.identification.residual import JointResidual, ResidualModel, fit_residual_model

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


def test_residual_model_explains_what_the_rigid_model_cannot():
    rng = np.random.default_rng(0)
    q, dq = _motion(1)
    noise = 0.03
    model = fit_residual_model(JOINTS, q, dq, _unexplained(q, dq) + noise * rng.standard_normal(q.shape))
    assert all(j.applied for j in model.joints), [j.reason for j in model.joints]
    qv, dqv = _motion(2)  # a separate recording
    measured = _unexplained(qv, dqv) + noise * rng.standard_normal(qv.shape)
    without, with_model = _rms(measured), _rms(measured - model.predict(qv, dqv))
    assert np.all(with_model < 0.7 * without), (without, with_model)


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
    model = fit_residual_model(JOINTS, q, dq, _unexplained(q, dq) + 0.02 * rng.standard_normal(q.shape),
                               deflection=deflection)
    path = tmp_path / "residual_model.json"
    path.write_text(json.dumps(model.as_dict()))
    document = json.loads(path.read_text())
    loaded = ResidualModel.from_dict(document)
    qv, dqv = _motion(8)
    dv = 1e-3 * rng.standard_normal(qv.shape)
    predicted = loaded.predict(qv, dqv, dv)
    assert np.allclose(predicted, model.predict(qv, dqv, dv), rtol=0, atol=1e-12)
    for j, entry in enumerate(document["joints"]):
        assert entry["inputs"] == [f"q:{JOINTS[j]}", f"dq:{JOINTS[j]}", f"deflection:{JOINTS[j]}"]
        reference = _reference(entry, np.column_stack([qv[:, j], dqv[:, j], dv[:, j]]))
        assert np.allclose(predicted[:, j], reference, rtol=1e-9, atol=1e-9)
    with pytest.raises(DataError, match="deflection"):
        loaded.predict(qv, dqv)


def test_far_from_its_data_the_model_corrects_nothing():
    rng = np.random.default_rng(11)
    q, dq = _motion(12)
    model = fit_residual_model(JOINTS, q, dq, _unexplained(q, dq) + 0.03 * rng.standard_normal(q.shape))
    inside = model.predict(q[:500], dq[:500])
    assert np.all(np.abs(inside).max(axis=0) > 0.1)  # it does correct where it learnt
    # poses 5 rad and speeds 5 rad/s beyond any it was trained on
    far = model.predict(q[:500] + 5 + np.ptp(q), dq[:500] + 5 + np.ptp(dq))
    assert np.all(np.abs(far) < 1e-6), np.abs(far).max()


@pytest.mark.parametrize("change, message", [
    (lambda e: e.update(weights=[0.5, 0.6] + e["weights"][2:]), "weights"),
    (lambda e: e["covariances"][0][0].__setitem__(0, -1.0), "positive definite"),
    (lambda e: e.update(scale=[0.0] + e["scale"][1:]), "scales"),
    (lambda e: e.update(inputs=["torque:a", "dq:a"]), "inputs"),
    (lambda e: e.update(mean=[float("nan")] + e["mean"][1:]), "NaN"),
])
def test_a_damaged_file_is_refused(change, message):
    rng = np.random.default_rng(9)
    q, dq = _motion(10)
    entry = fit_residual_model(JOINTS, q, dq, _unexplained(q, dq) + 0.02 * rng.standard_normal(q.shape),
                               components=(2,)).as_dict()["joints"][0]
    JointResidual.from_dict(entry)
    change(entry)
    with pytest.raises(DataError, match=message):
        JointResidual.from_dict(entry)
