"""Multisine excitation: limits, exact derivatives, reproducibility, caps, frequency content."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import MIN_SEPARATION_HZ, _SIMPLE_RATIOS, _draw_frequencies, multisine

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"


def _center_half(joint_range):
    return joint_range.mean(axis=1), 0.5 * (joint_range[:, 1] - joint_range[:, 0])


@pytest.mark.parametrize("name", ["panda_class", "openarm_class"])
def test_limits_respected_on_dense_grid_for_bundled_arms(name):
    joint_range = load_robot(ROBOTS / f"{name}.xml").joint_range
    traj = multisine(joint_range, duration=4.0, sample_rate=2000.0, seed=3)
    center, half = _center_half(joint_range)
    assert traj.q.shape == (8001, 7)
    assert np.all(traj.q > joint_range[:, 0]) and np.all(traj.q < joint_range[:, 1])
    peak = np.max(np.abs(traj.q - center), axis=0)
    # the sampled peak is scaled to exactly the requested fraction of the half-range
    np.testing.assert_allclose(peak, 0.8 * half, rtol=1e-12)


@st.composite
def joint_ranges(draw):
    n = draw(st.integers(1, 4))
    rows = []
    for _ in range(n):
        kind = draw(st.sampled_from(["both", "both", "none", "lower", "upper"]))
        lower = draw(st.floats(-5.0, 5.0))
        width = draw(st.floats(0.05, 6.0))
        rows.append({"both": [lower, lower + width], "none": [-np.inf, np.inf],
                     "lower": [lower, np.inf], "upper": [-np.inf, lower]}[kind])
    return np.array(rows)


@settings(max_examples=40, deadline=None)
@given(joint_range=joint_ranges(), seed=st.integers(0, 2 ** 32 - 1),
       fraction=st.floats(0.1, 1.0))
def test_limits_respected_for_random_ranges(joint_range, seed, fraction):
    traj = multisine(joint_range, duration=2.0, sample_rate=200.0, seed=seed, amplitude_fraction=fraction)
    assert np.all(traj.q >= joint_range[:, 0]) and np.all(traj.q <= joint_range[:, 1])
    unlimited = np.all(np.isinf(joint_range), axis=1)
    # unlimited joints swing about 0 within fraction * 1 rad
    assert np.all(np.abs(traj.q[:, unlimited]) <= fraction + 1e-12)


def test_derivatives_match_finite_differences():
    rate = 1000.0
    traj = multisine(np.array([[-2.0, 2.0], [0.0, 1.0], [-np.inf, np.inf]]), 3.0, rate, seed=11)
    h = 1.0 / rate
    for x, dx in ((traj.q, traj.dq), (traj.dq, traj.ddq)):
        central = (x[2:] - x[:-2]) / (2 * h)
        # central-difference error is h^2/6 |x'''| <= 1e-6 of the peak for < 1 Hz content at 1 kHz
        np.testing.assert_allclose(central, dx[1:-1], atol=1e-5 * np.abs(dx).max())


def test_time_grid_includes_both_ends():
    traj = multisine(np.array([[-1.0, 1.0]]), duration=2.5, sample_rate=100.0, seed=0)
    assert traj.time.shape == (251,)
    assert traj.time[0] == 0.0 and traj.time[-1] == pytest.approx(2.5)
    np.testing.assert_allclose(np.diff(traj.time), 1 / 100.0)


def test_same_seed_identical_different_seed_differs():
    joint_range = np.array([[-1.0, 1.0], [-2.0, 0.5]])
    a = multisine(joint_range, 2.0, 100.0, seed=42)
    b = multisine(joint_range, 2.0, 100.0, seed=42)
    c = multisine(joint_range, 2.0, 100.0, seed=43)
    for name in ("time", "q", "dq", "ddq"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.allclose(a.q, c.q)


def test_velocity_and_acceleration_caps_honoured():
    joint_range = np.tile([-2.5, 2.5], (3, 1))
    free = multisine(joint_range, 4.0, 500.0, seed=5)
    v_cap = np.array([0.3, 0.5, 10.0])
    capped = multisine(joint_range, 4.0, 500.0, seed=5, max_velocity=v_cap, max_acceleration=0.4)
    v_peak, a_peak = np.abs(capped.dq).max(axis=0), np.abs(capped.ddq).max(axis=0)
    assert np.all(v_peak <= v_cap * (1 + 1e-12)) and np.all(a_peak <= 0.4 * (1 + 1e-12))
    # each joint is limited by whichever cap binds, so one of the peaks sits on its cap
    binding = np.isclose(v_peak, v_cap, rtol=1e-9) | np.isclose(a_peak, 0.4, rtol=1e-9)
    assert binding.all()
    # scaling keeps the shape: the capped signal is the uncapped one shrunk about the center
    scale = capped.dq[0] / free.dq[0]
    np.testing.assert_allclose(capped.q, free.q * scale, rtol=1e-9, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), f_lo=st.floats(0.05, 1.0), width=st.floats(0.2, 2.0))
def test_single_sine_frequency_within_range(seed, f_lo, width):
    f_hi = f_lo + width
    traj = multisine(np.array([[-1.0, 1.0], [0.0, 3.0]]), 2.0, 50.0, seed=seed, n_sines=(1, 1),
                     frequency_range=(f_lo, f_hi))
    dev = traj.q - np.array([0.0, 1.5])
    # a pure sinusoid satisfies ddq = -omega^2 (q - center) at every sample
    big = np.abs(dev) > 0.1 * np.abs(dev).max(axis=0)
    omega_sq = np.where(big, -traj.ddq / np.where(big, dev, 1.0), np.nan)
    freq = np.sqrt(np.nanmedian(omega_sq, axis=0)) / (2 * np.pi)
    assert np.all(np.nanmax(np.abs(omega_sq - (2 * np.pi * freq) ** 2), axis=0) < 1e-6 * (2 * np.pi * freq) ** 2)
    assert np.all((freq >= f_lo) & (freq <= f_hi))


def test_spectrum_confined_to_frequency_range():
    rate, duration = 20.0, 200.0
    traj = multisine(np.tile([-1.0, 1.0], (4, 1)), duration, rate, seed=9, frequency_range=(0.2, 0.4))
    spectrum = np.abs(np.fft.rfft(traj.q * np.hanning(len(traj.time))[:, None], axis=0)) ** 2
    freqs = np.fft.rfftfreq(len(traj.time), 1 / rate)
    inside = (freqs > 0.18) & (freqs < 0.42)
    assert np.all(spectrum[~inside].sum(axis=0) < 1e-4 * spectrum.sum(axis=0))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), k=st.integers(2, 5))
def test_frequencies_separated_and_incommensurate(seed, k):
    freqs = _draw_frequencies(np.random.default_rng(seed), k, 0.1, 0.6)
    assert np.all((freqs >= 0.1) & (freqs <= 0.6))
    i, j = np.triu_indices(k, 1)
    assert np.all(np.abs(freqs[i] - freqs[j]) >= MIN_SEPARATION_HZ)
    ratio = freqs[i] / freqs[j]
    assert np.all(np.abs(ratio[:, None] / _SIMPLE_RATIOS - 1) >= 0.01)


def test_impossible_frequency_request_is_reported():
    with pytest.raises(ValueError, match="widen frequency_range"):
        multisine(np.array([[-1.0, 1.0]]), 2.0, 100.0, n_sines=(5, 5), frequency_range=(0.1, 0.12))


def test_given_center_bounds_the_swing_by_the_nearer_limit():
    joint_range = np.array([[-1.0, 3.0]])
    traj = multisine(joint_range, 4.0, 200.0, seed=2, center=np.array([0.0]))
    assert np.abs(traj.q).max() == pytest.approx(0.8 * 1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(duration=0.0), "duration"),
    (dict(duration=-1.0), "duration"),
    (dict(sample_rate=0.0), "sample_rate"),
    (dict(joint_range=np.zeros((3,))), "shape"),
    (dict(joint_range=np.array([[1.0, -1.0]])), "lower < upper"),
    (dict(joint_range=np.array([[np.nan, 1.0]])), "NaN"),
    (dict(sample_rate=1.0), "Nyquist"),
    (dict(n_sines=(4, 2)), "n_sines"),
    (dict(frequency_range=(0.5, 0.1)), "frequency_range"),
    (dict(amplitude_fraction=1.5), "amplitude_fraction"),
    (dict(max_velocity=-1.0), "max_velocity"),
    (dict(max_acceleration=np.ones(3)), "max_acceleration"),
    (dict(center=np.array([5.0])), "center"),
])
def test_bad_input_raises_value_error(kwargs, match):
    args = dict(joint_range=np.array([[-1.0, 1.0]]), duration=2.0, sample_rate=100.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        multisine(**args)
