"""Estimators: exact on noise-free data, honest standard deviations on noisy data."""
import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core import IdentificationError, load_robot
from sysid_core.identification.base_parameters import base_parameters
from sysid_core.identification.estimation import estimate


@pytest.fixture(scope="module")
def problem():
    robot = load_robot(ROBOTS / "openarm_class.xml")
    rng = np.random.default_rng(11)
    count = 2000
    lower, upper = robot.joint_range.T
    q = rng.uniform(lower, upper, (count, 7))
    dq, ddq = rng.uniform(-1.5, 1.5, (count, 7)), rng.uniform(-4, 4, (count, 7))
    w = np.ascontiguousarray(robot.regressor(q, dq, ddq))
    base = base_parameters(w.reshape(-1, 70), tuple(str(i) for i in range(70)))
    beta = base.projection @ robot.nominal_parameters.reshape(-1)
    return w[..., base.independent], beta


@pytest.mark.parametrize("method", ["ols", "wls", "ridge"])
def test_noise_free_data_recover_ground_truth(problem, method):
    w, beta = problem
    est = estimate(w, w @ beta, method, ridge_alpha=1e-12)
    np.testing.assert_allclose(est.values, beta, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method, sigma", [
    ("ols", np.full(7, 0.2)),  # OLS pools one sigma: its covariance holds for equal noise
    ("wls", np.array([0.5, 0.4, 0.2, 0.2, 0.05, 0.05, 0.02])),  # per joint, as real joints are
])
def test_noisy_estimates_lie_within_reported_std(problem, method, sigma):
    w, beta = problem
    rng = np.random.default_rng(3)
    errors = []
    for _ in range(8):
        est = estimate(w, w @ beta + rng.standard_normal((w.shape[0], 7)) * sigma, method)
        errors.append((est.values - beta) / est.std)
    z = np.abs(np.concatenate(errors))
    assert np.mean(z < 2.0) > 0.90 and np.max(z) < 5.0


def test_wls_beats_ols_on_heteroscedastic_noise(problem):
    w, beta = problem
    rng = np.random.default_rng(4)
    sigma = np.array([1.0, 1.0, 0.01, 0.01, 0.01, 0.01, 0.01])
    noisy = w @ beta + rng.standard_normal((w.shape[0], 7)) * sigma
    ols, wls = estimate(w, noisy, "ols"), estimate(w, noisy, "wls")
    assert np.linalg.norm((wls.values - beta) / beta) < np.linalg.norm((ols.values - beta) / beta)
    np.testing.assert_allclose(wls.residual_std, sigma, rtol=0.15)


def test_too_few_equations_and_rank_deficiency_are_errors(problem):
    w, beta = problem
    with pytest.raises(IdentificationError, match="cannot determine"):
        estimate(w[:2], (w @ beta)[:2], "ols")
    dup = np.concatenate([w, w[..., :1]], axis=2)
    with pytest.raises(IdentificationError, match="rank"):
        estimate(dup, w @ beta, "wls")


def test_unknown_estimator():
    with pytest.raises(ValueError, match="unknown estimator"):
        estimate(np.ones((10, 2, 1)), np.ones((10, 2)), "magic")


def test_robust_weighting_ignores_outliers_that_bias_wls(problem):
    """3 % of the torque equations carry a spike of 50 noise deviations (glitches, contacts)."""
    w, beta = problem
    rng = np.random.default_rng(5)
    sigma = np.array([0.05, 0.05, 0.03, 0.03, 0.01, 0.01, 0.01])
    clean = w @ beta + rng.normal(0.0, sigma, (w.shape[0], 7))
    spikes = rng.random(clean.shape) < 0.03
    dirty = clean + spikes * 50 * sigma * rng.choice([1.0, 3.0], clean.shape)  # one-sided: they bias
    reference = estimate(w, clean, "wls")
    plain = estimate(w, dirty, "wls")
    robust = estimate(w, dirty, "wls", robust=True)
    error = (lambda est: np.abs(est.values - beta) / reference.std)  # in the clean fit's deviations
    assert np.median(error(plain)) > 5.0
    assert np.median(error(robust)) < 1.5
    # on clean data it loses little (Huber: ~5 % efficiency)
    assert np.median(np.abs(estimate(w, clean, "wls", robust=True).values - beta) / reference.std) < 1.5
    assert robust.method == "irls"


def test_robust_weighting_with_ridge_is_refused(problem):
    w, beta = problem
    with pytest.raises(ValueError, match="not available with the ridge"):
        estimate(w, w @ beta, "ridge", robust=True)


def test_zero_rows_are_equations_left_out_not_counted():
    # an equation left out (identify zeroes the rows a quantised velocity cannot tell) must not
    # shrink the residual's standard deviation: the fit equals that of the rows kept
    from sysid_core.identification.estimation import ReducedForm, estimate_reduced
    rng = np.random.default_rng(3)
    w = rng.normal(size=(400, 2, 3))
    y = w @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=(400, 2))
    kept = np.ones((400, 2), dtype=bool)
    kept[::3, 0] = False
    zeroed = ReducedForm.of([(w * kept[..., None], np.where(kept, y, 0.0))], 2, 3)
    np.testing.assert_array_equal(zeroed.counts, [kept[:, 0].sum(), 400])
    alone = [ReducedForm.of([(w[kept[:, j]][:, [j]], y[kept[:, j]][:, [j]])], 1, 3) for j in range(2)]
    got = estimate_reduced(zeroed, "ols")
    for j in range(2):
        rss = alone[j].residual_sums(got.values)[0]
        np.testing.assert_allclose(got.residual_std[j], np.sqrt(rss / (alone[j].n_samples - 1.5)), rtol=1e-9)


def test_cross_product_of_two_independent_measurements_removes_the_errors_in_variables_bias():
    # the regressor measured with noise (an acceleration from quantised sensors): least squares
    # on it is biased towards zero (its Gram carries the noise's variance); measured twice with
    # independent noise, the cross product of the two has the noise-free Gram's expectation
    from sysid_core.identification.estimation import ReducedForm, cross_product, estimate_reduced
    rng = np.random.default_rng(5)
    truth = np.array([1.5, -0.8, 0.3])
    w = rng.normal(size=(20000, 2, 3))
    y = w @ truth + 0.01 * rng.normal(size=(20000, 2))
    noisy, other = (w + np.array([0.6, 0.0, 0.0]) * rng.normal(size=w.shape) for _ in range(2))
    plain = ReducedForm.of([(noisy, y)], 2, 3)
    biased = estimate_reduced(plain, "ols").values
    assert biased[0] < 0.8 * truth[0]                      # 1 / (1 + 0.36) of it, in expectation
    crossed = plain.crossed(cross_product(noisy, y, other, y))
    np.testing.assert_allclose(estimate_reduced(crossed, "ols").values, truth, atol=0.03)
    with pytest.raises(ValueError, match="does not match"):
        plain.crossed(np.zeros((2, 3, 3)))
