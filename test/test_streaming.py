"""Identification in blocks of samples equals a solve on the whole stacked problem.

The oracles are written plainly here: numpy.linalg.lstsq on the stacked (N n, r) matrix, the
weights of each estimator computed from its own residuals, the recording prepared whole.
"""
from dataclasses import replace

import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core import load_robot
from sysid_core.excitation.multisine import multisine
from sysid_core.identification import estimation, filtering
from sysid_core.identification import identify as identify_module
from sysid_core.identification.estimation import ReducedForm, estimate_reduced
from sysid_core.identification.filtering import prepare
from sysid_core.identification.identify import (IdentificationConfig, base_regressor, identify,
                                                structural_base_parameters)
from sysid_core.identification.recording import Recording
from sysid_core.simulation import ideal_recording

TOLERANCE = 1e-9  # relative, per base parameter


def _lstsq(w, y):
    return np.linalg.lstsq(w, y, rcond=None)[0]


def _ols(w3, y2):
    return _lstsq(w3.reshape(-1, w3.shape[2]), y2.reshape(-1))


def _joint_std(w3, y2, values):
    residual = y2 - w3 @ values
    return np.sqrt(np.sum(residual**2, axis=0) / (y2.shape[0] - w3.shape[2] / y2.shape[1]))


def _wls(w3, y2):
    sigma = _joint_std(w3, y2, _ols(w3, y2))
    return _ols(w3 / sigma[None, :, None], y2 / sigma)


def _ridge(w3, y2, alpha):
    w, r = w3.reshape(-1, w3.shape[2]), w3.shape[2]
    lam = alpha * np.mean(np.sum(w**2, axis=0))
    return _lstsq(np.vstack([w, np.sqrt(lam) * np.eye(r)]), np.concatenate([y2.reshape(-1), np.zeros(r)]))


def _huber(w3, y2, iterations=50, tolerance=1e-9):
    values = _ols(w3, y2)
    for _ in range(iterations):
        residual = y2 - w3 @ values
        scale = 1.4826 * np.median(np.abs(residual - np.median(residual, axis=0)), axis=0)
        weight = np.minimum(1.0, estimation.HUBER_K / np.maximum(np.abs(residual / scale), 1e-300))
        root = np.sqrt(weight) / scale
        new = _ols(w3 * root[..., None], y2 * root)
        step = np.max(np.abs(new - values) / np.abs(new))
        values = new
        if step < tolerance:
            break
    return values


def _ill_conditioned_problem(seed=0, num=3000, n=4, r=12):
    """W (num, n, r) with columns of very different scales, two nearly collinear columns and
    joints that see only some columns (like a serial arm); y with per-joint noise and spikes."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((num, n, r))
    w[..., 1] = w[..., 0] + 1e-4 * rng.standard_normal((num, n))
    w *= 10.0 ** rng.uniform(-2, 2, r)
    for j in range(1, n):  # joint j does not see the first 2 j columns
        w[:, j, :2 * j] = 0.0
    beta = rng.uniform(0.5, 2.0, r)
    y = w @ beta + rng.standard_normal((num, n)) * np.array([0.01, 0.1, 1.0, 0.05])
    y[rng.integers(0, num, 20), rng.integers(0, n, 20)] += 5.0
    return w, y


def _assert_equal(streamed, oracle):
    np.testing.assert_allclose(streamed, oracle, rtol=TOLERANCE, atol=0)


@pytest.mark.parametrize("method", ["ols", "wls", "ridge", "robust"])
def test_reduced_form_in_blocks_equals_the_stacked_solve(method):
    w, y = _ill_conditioned_problem()
    # the problem is ill conditioned enough that normal equations would miss the tolerance
    flat = w.reshape(-1, w.shape[2])
    scaled = flat / np.linalg.norm(flat, axis=0)
    assert np.linalg.cond(scaled) > 1e4
    blocks = (lambda: ((w[a:a + 257], y[a:a + 257]) for a in range(0, len(y), 257)))
    reduced = ReducedForm.of(blocks(), w.shape[1], w.shape[2])
    # joints see only their columns: the triangles are that narrow
    assert [len(s) for s in reduced.supports] == [12, 10, 8, 6]
    robust = method == "robust"
    est = estimate_reduced(reduced, "wls" if robust else method, 1e-3, robust=robust, blocks=blocks)
    oracle = {"ols": lambda: _ols(w, y), "wls": lambda: _wls(w, y), "ridge": lambda: _ridge(w, y, 1e-3),
              "robust": lambda: _huber(w, y)}[method]()
    _assert_equal(est.values, oracle)
    # per-joint residual statistics from the triangles alone
    np.testing.assert_allclose(est.residual_std, _joint_std(w, y, est.values), rtol=1e-9)


def test_condition_numbers_from_the_triangle():
    w, y = _ill_conditioned_problem(seed=1)
    reduced = ReducedForm.of(((w[a:a + 500], y[a:a + 500]) for a in range(0, len(y), 500)), 4, 12)
    r_mat = estimation.triangle(reduced.stacked())[:12, :12]
    flat = w.reshape(-1, 12)
    scaled, raw = estimation.condition_numbers(r_mat)
    np.testing.assert_allclose(raw, np.linalg.cond(flat), rtol=1e-6)
    np.testing.assert_allclose(scaled, np.linalg.cond(flat / np.linalg.norm(flat, axis=0)), rtol=1e-6)


@pytest.fixture(scope="module")
def panda_noisy():
    """6 s of the Panda-class arm with a payload at 500 Hz, measured with noise (no ddq: filtered)."""
    nominal = load_robot(ROBOTS / "panda_class.xml")
    truth = load_robot(ROBOTS / "panda_class_payload.xml")
    rng = np.random.default_rng(0)

    def noisy(seed, duration):
        plan = multisine(nominal.joint_range, duration, 500.0, seed=seed, max_velocity=1.5)
        rec = ideal_recording(truth.model, plan, truth.joint_names)
        return Recording(rec.time, rec.q + 1e-4 * rng.standard_normal(rec.q.shape),
                         rec.dq + 2e-3 * rng.standard_normal(rec.q.shape),
                         rec.tau + 2e-2 * rng.standard_normal(rec.q.shape), rec.joint_names)
    return nominal, noisy(1, 6.0), noisy(2, 3.0)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 256 samples filtered in windows of 1024, nothing cached between passes: many
    blocks, every pass recomputed, as a long recording would be."""
    monkeypatch.setattr(identify_module, "BLOCK", 256)
    monkeypatch.setattr(filtering, "FILTER_BLOCK", 1024)
    monkeypatch.setattr(identify_module, "CACHE_BYTES", 0)


def _whole_regressor(robot, config, recording, base):
    """(prepared samples, base regressor (N, n, r), known torque (N, n)) of the whole recording at
    once; each Coulomb column the step of the low-passed velocity, sign(lowpass(dq)), filtered as
    the torque is (prepare on a recording whose torque is that step), not the step of the
    filtered velocity at the prepared rows. The recording is uniform, one stretch."""
    samples = prepare(recording, config.filter)
    w, known = base_regressor(robot, config, samples.q, samples.dq, samples.ddq, base)
    rate = 1.0 / (recording.time[1] - recording.time[0])
    velocity = filtering.lowpass(recording.dq, rate, config.filter.cutoff_hz, config.filter.order)
    step = prepare(replace(recording, tau=np.sign(velocity)), config.filter).tau
    for k, name in enumerate(base.names):
        if name.endswith(".coulomb"):
            j = robot.joint_names.index(name.rpartition(".")[0])
            w[:, :, k] = 0.0
            w[:, j, k] = step[:, j]
    return samples, w, known


@pytest.mark.parametrize("estimator, robust", [("ols", False), ("wls", False), ("ridge", False),
                                               ("consistent", False), ("wls", True)])
@pytest.mark.parametrize("scope", ["terminal", "full"])
def test_streamed_identification_equals_the_whole_recording_solved_at_once(panda_noisy, small_blocks, scope,
                                                                           estimator, robust):
    robot, recording, validation = panda_noisy
    config = IdentificationConfig(scope=scope, estimator=estimator, robust=robust, ridge_alpha=1e-4)
    result = identify(robot, recording, config, validation=validation)
    # the oracle: the whole recording prepared at once, its whole base regressor, plain solves
    base = structural_base_parameters(robot, config)
    samples, w, known = _whole_regressor(robot, config, recording, base)
    y = samples.tau - known
    oracle = {"ols": lambda: _ols(w, y), "wls": lambda: _wls(w, y), "ridge": lambda: _ridge(w, y, 1e-4),
              "consistent": lambda: _wls(w, y)}[estimator]() if not robust else _huber(w, y)
    assert result.metrics.n_samples == samples.n_samples
    _assert_equal(result.estimate.values, oracle)
    # fit, condition and validation of what was delivered, against the same oracle data
    residual = y - w @ (base.projection @ result.standard)
    np.testing.assert_allclose(result.metrics.rmse_per_joint, np.sqrt(np.mean(residual**2, axis=0)), rtol=1e-7)
    flat = w.reshape(-1, base.rank)
    np.testing.assert_allclose(result.metrics.condition_number, np.linalg.cond(flat / np.linalg.norm(flat, axis=0)),
                               rtol=1e-6)
    check, w_check, known_check = _whole_regressor(robot, config, validation, base)
    error = check.tau - known_check - w_check @ (base.projection @ result.standard)
    np.testing.assert_allclose(result.metrics.validation_rmse_per_joint, np.sqrt(np.mean(error**2, axis=0)),
                               rtol=1e-9)


def test_nonlinear_friction_and_frictionloss_passes_do_not_depend_on_the_blocks(panda_noisy, monkeypatch):
    """The passes whose columns change between them (the nonlinear friction search, MuJoCo's
    frictionloss settling): the same result from many uncached blocks as from one cached pass."""
    from sysid_core.dynamics.joint_physics import MujocoPhysics
    robot, recording, _ = panda_noisy
    exact = ideal_recording(robot.model, multisine(robot.joint_range, 4.0, 500.0, seed=4, max_velocity=1.5))
    for config, data in ((IdentificationConfig(friction_models="stribeck"), recording),
                         (IdentificationConfig(physics=MujocoPhysics.inverse(robot.model)), exact)):
        whole = identify(robot, data, config)
        with monkeypatch.context() as patch:
            patch.setattr(identify_module, "BLOCK", 256)
            patch.setattr(filtering, "FILTER_BLOCK", 1024)
            patch.setattr(identify_module, "CACHE_BYTES", 0)
            streamed = identify(robot, data, config)
        # the friction laws' columns are filtered block by block (VelocityWindow) like the torque:
        # the same to round-off, which the nonlinear search's stopping point amplifies to ~1e-8
        np.testing.assert_allclose(streamed.estimate.values, whole.estimate.values, rtol=1e-7)
        for a, b in zip(streamed.friction, whole.friction):
            np.testing.assert_allclose(a.nonlinear, b.nonlinear, rtol=1e-7)


def test_decimated_recordings_are_filtered_in_bounded_windows(monkeypatch):
    """A decimated row stands for ``decimation`` recorded samples, all of them filtered: a
    window of the stream spans about FILTER_BLOCK recorded samples (at least one regressor
    block of rows), not FILTER_BLOCK decimated rows (a 10-minute buffer decimated by 19 was
    filtered whole)."""
    robot = load_robot(ROBOTS / "panda_class.xml")
    monkeypatch.setattr(identify_module, "BLOCK", 256)
    monkeypatch.setattr(filtering, "FILTER_BLOCK", 4096)
    num, decimation = 60000, 8
    time = np.arange(num) / 1000.0
    wave = np.sin(np.outer(time, np.linspace(0.5, 2.0, robot.n_joints)))
    recording = Recording(time, wave, np.cos(wave), 2.0 * wave, robot.joint_names)
    config = IdentificationConfig(filter=filtering.FilterConfig(decimation=decimation))
    spans = []
    filtered_rows = filtering._filtered_rows
    monkeypatch.setattr(filtering, "_filtered_rows",
                        lambda stretch, cfg, rows, margin: spans.append(rows[-1] + 1 - rows[0]) or
                        filtered_rows(stretch, cfg, rows, margin))
    stream = identify_module._Stream(robot, config, recording)
    rows = sum(s.n_samples for _, s, _, _ in stream.samples())
    assert rows == filtering.prepared_count(recording, config.filter)
    assert len(spans) > 1 and max(spans) <= 4096
