"""Measured-signal pipeline: zero-phase low-pass, differentiation, trimming, decimation."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

from sysid_core.errors import DataError
from sysid_core.filtering import FilterConfig, derivative, lowpass, prepare
from sysid_core.recording import Recording

RATE = 1000.0
FREQS = np.array([0.3, 1.1, 2.3])      # Hz
AMPS = np.array([0.8, 0.3, 0.1])       # rad
PHASES = np.array([0.2, 1.7, 4.0])     # rad


def _sines(time):
    """q (N, 1) and its analytic dq, ddq for the test signal."""
    omega = 2 * np.pi * FREQS
    arg = omega * time[:, None] + PHASES
    q = (AMPS * np.sin(arg)).sum(axis=1, keepdims=True)
    dq = (AMPS * omega * np.cos(arg)).sum(axis=1, keepdims=True)
    ddq = -(AMPS * omega ** 2 * np.sin(arg)).sum(axis=1, keepdims=True)
    return q, dq, ddq


def _noisy_recording(duration=4.0, seed=0, time=None):
    time = np.arange(int(duration * RATE) + 1) / RATE if time is None else time
    q, dq, ddq = _sines(time)
    gen = np.random.default_rng(seed)
    tau = 2.0 * ddq + 0.5 * dq
    rec = Recording(time, q + gen.normal(0, 1e-4, q.shape), dq + gen.normal(0, 5e-3, q.shape),
                    tau + gen.normal(0, 0.02, q.shape), ("j1",))
    return rec, (q, dq, ddq, tau)


def test_filtered_derivatives_match_analytic_away_from_the_ends():
    rec, (q, dq, ddq, tau) = _noisy_recording()
    out = prepare(rec, FilterConfig(cutoff_hz=10.0, trim_s=0.2))
    keep = slice(200, len(rec.time) - 200)
    np.testing.assert_array_equal(out.time, rec.time[keep])
    peak = lambda x: np.abs(x).max()
    # position noise 1e-4 rad and velocity noise 5e-3 rad/s drop ~4x below 10 Hz at 1 kHz
    assert np.abs(out.q - q[keep]).max() < 2e-4
    assert np.abs(out.dq - dq[keep]).max() < 0.01 * peak(dq)
    assert np.abs(out.ddq - ddq[keep]).max() < 0.02 * peak(ddq)
    # torque passes the same filter, so it still equals 2 ddq + 0.5 dq of the filtered states
    assert np.abs(out.tau - (2.0 * out.ddq + 0.5 * out.dq)).max() < 0.02 * peak(tau)


def test_noise_free_derivative_of_lowpassed_signal_is_nearly_exact():
    time = np.arange(3001) / RATE
    q, dq, ddq = _sines(time)
    inner = slice(500, -500)      # filtfilt edge transients take ~0.3 s to fall below 1e-5
    d1 = derivative(lowpass(q, RATE, 10.0), RATE)
    d2 = derivative(d1, RATE)
    # a 4th-order Butterworth applied twice passes 2.3 Hz with gain 1 - 1e-9; the central
    # difference error is h^2/6 |q'''| ~ 1e-5 relative
    np.testing.assert_allclose(d1[inner], dq[inner], atol=1e-4 * np.abs(dq).max())
    np.testing.assert_allclose(d2[inner], ddq[inner], atol=1e-4 * np.abs(ddq).max())


def test_exact_accelerations_are_used_as_given():
    time = np.arange(2001) / RATE
    q, dq, ddq = _sines(time)
    rec = Recording(time, q, dq, 2 * ddq, ("j1",), ddq=ddq)
    out = prepare(rec, FilterConfig(trim_s=0.1, decimation=3))
    keep = slice(100, 2001 - 100, 3)
    for name, ref in (("time", time), ("q", q), ("dq", dq), ("ddq", ddq), ("tau", 2 * ddq)):
        np.testing.assert_array_equal(getattr(out, name), ref[keep])


def test_decimation_keeps_every_kth_sample():
    rec, _ = _noisy_recording(duration=2.0)
    full = prepare(rec, FilterConfig(decimation=1))
    every5 = prepare(rec, FilterConfig(decimation=5))
    trim = round(FilterConfig().trim_s * 1000)  # default trim at the 1 kHz of this recording
    assert every5.n_samples == len(range(trim, 2001 - trim, 5))
    np.testing.assert_array_equal(every5.ddq, full.ddq[::5])


def test_lowpass_is_zero_phase():
    gen = np.random.default_rng(1)
    sos = signal.butter(4, 5.0, fs=RATE, output="sos")
    clean = signal.sosfiltfilt(sos, gen.normal(size=4000))   # band-limited random signal
    noisy = clean + 0.05 * gen.normal(size=clean.shape)
    lags = signal.correlation_lags(len(clean), len(clean))

    def lag_of(x):
        return lags[np.argmax(signal.correlate(x - x.mean(), clean - clean.mean()))]

    assert lag_of(lowpass(noisy, RATE, 10.0)) == 0
    # the causal filter of the same order lags visibly, so the check above can fail
    assert lag_of(signal.sosfilt(signal.butter(4, 10.0, fs=RATE, output="sos"), noisy)) > 10


def test_lowpass_filters_every_column_alike():
    gen = np.random.default_rng(2)
    x = gen.normal(size=(500, 3))
    out = lowpass(x, RATE, 20.0)
    assert out.shape == x.shape
    np.testing.assert_allclose(out[:, 1], lowpass(x[:, 1], RATE, 20.0))


@settings(max_examples=20, deadline=None)
@given(jitter=st.floats(0.02, 0.4), where=st.integers(1, 998))
def test_non_uniform_time_stamps_raise(jitter, where):
    time = np.arange(1000) / RATE
    time[where:] += jitter / RATE     # one interval stretched by 2-40 %
    rec, _ = _noisy_recording(time=time)
    with pytest.raises(DataError, match="resample"):
        prepare(rec)


def test_small_timing_jitter_is_accepted():
    time = np.arange(1000) / RATE
    time[1::2] += 0.002 / RATE
    rec, _ = _noisy_recording(time=time)
    trim = round(FilterConfig().trim_s * RATE)
    assert prepare(rec).n_samples == 1000 - 2 * trim


def test_too_few_samples_raise():
    with pytest.raises(DataError, match="at least 16"):
        lowpass(np.zeros(15), RATE, 10.0)
    with pytest.raises(DataError, match="at least 3"):
        derivative(np.zeros((2, 1)), RATE)
    rec, _ = _noisy_recording(duration=0.24)            # 241 samples, 40 left after 2 x 0.1 s trim
    with pytest.raises(DataError, match="at least 50"):
        prepare(rec)


@pytest.mark.parametrize("cutoff", [500.0, 600.0, 0.0, -1.0])
def test_cutoff_outside_band_raises(cutoff):
    with pytest.raises(ValueError, match="Nyquist"):
        lowpass(np.zeros(200), RATE, cutoff)


def test_prepare_with_cutoff_above_nyquist_raises():
    rec, _ = _noisy_recording(duration=2.0)
    with pytest.raises(ValueError, match="Nyquist"):
        prepare(rec, FilterConfig(cutoff_hz=800.0))


@pytest.mark.parametrize("kwargs", [dict(cutoff_hz=0.0), dict(order=0), dict(order=2.5),
                                    dict(decimation=0), dict(trim_s=-0.1)])
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError):
        FilterConfig(**kwargs)
