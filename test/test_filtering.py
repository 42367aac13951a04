"""Measured-signal pipeline: zero-phase low-pass, differentiation, trimming, decimation."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

from sysid_core.errors import DataError
from sysid_core.identification.filtering import (MAX_GAP_PERIODS, FilterConfig, derivative, lowpass, missing_samples,
                                                 prepare, resample_uniform)
from sysid_core.identification.recording import Recording

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


def test_forward_acceleration_is_the_filtered_step_acceleration_of_an_euler_integrator():
    """A motion integrated as MuJoCo does (v[k+1] = v[k] + h a[k], the sample's torque acting over
    the step that follows it): with forward_acceleration the prepared ddq is the lowpassed a[k]
    itself to round-off, and the torque m a[k] filtered equals m ddq; the central difference
    lags it by half a sample (off by h/2 |a'|). The IdentificationConfig of forward-simulated
    data sets it."""
    from sysid_core.dynamics.joint_physics import MujocoPhysics
    from sysid_core.identification.identify import IdentificationConfig
    time = np.arange(3001) / RATE
    _, _, a = _sines(time)
    a = a + 0.5 * np.sign(np.sin(2 * np.pi * 7.0 * time))[:, None]  # steps: the tracking loop's kicks
    dq = np.concatenate([[[0.0]], np.cumsum(a[:-1] / RATE, axis=0)])
    q = np.concatenate([[[0.0]], np.cumsum(dq[1:] / RATE, axis=0)])
    rec = Recording(time, q, dq, 2.0 * a, ("j1",))
    config = FilterConfig(cutoff_hz=10.0, trim_s=0.5, forward_acceleration=True)
    out = prepare(rec, config)
    keep = slice(500, len(time) - 500)
    reference = lowpass(a, RATE, 10.0)[keep]
    inner = slice(500, -500)  # the two filters pad the ends differently: compare past their transients
    np.testing.assert_allclose(out.ddq[inner], reference[inner], atol=1e-9 * np.abs(reference).max())
    np.testing.assert_allclose(out.tau[inner], 2.0 * out.ddq[inner], atol=1e-9 * np.abs(out.tau).max())
    central = prepare(rec, FilterConfig(cutoff_hz=10.0, trim_s=0.5))
    assert np.abs(central.ddq - reference).max() > 1e-3 * np.abs(reference).max()
    simulated = IdentificationConfig(physics=MujocoPhysics(timestep=0.001))
    assert simulated.filter.forward_acceleration
    assert not IdentificationConfig(physics=MujocoPhysics(timestep=0.001, simulated=False)).filter.forward_acceleration


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
def test_non_uniform_time_stamps_raise_without_resampling(jitter, where):
    time = np.arange(1000) / RATE
    time[where:] += jitter / RATE     # one interval stretched by 2-40 %
    rec, _ = _noisy_recording(time=time)
    with pytest.raises(DataError, match="resample"):
        prepare(rec, FilterConfig(resample=False))


def _jittered_time(duration, jitter_periods, seed):
    """Stamps of a driver whose timer fires late by up to ``jitter_periods`` of a period."""
    gen = np.random.default_rng(seed)
    nominal = np.arange(int(duration * RATE) + 1) / RATE
    return nominal + gen.uniform(0, jitter_periods / RATE, nominal.size)


def test_resampling_interpolates_jittered_stamps_onto_the_true_signal():
    time = _jittered_time(4.0, 0.6, seed=3)
    q, dq, ddq = _sines(time)
    rec = Recording(time, q, dq, 2.0 * ddq, ("j1",))
    out = resample_uniform(rec)
    spacing = np.diff(out.time)
    np.testing.assert_allclose(spacing, np.median(np.diff(time)), rtol=1e-9)
    assert out.time[0] == time[0] and out.time[-1] <= time[-1]
    # oracle: the analytic signal at the grid; linear interpolation errs by at most h^2/8 times
    # the peak second derivative, h the longest source interval (of q, dq and tau = 2 ddq)
    h = np.diff(time).max()
    truth_q, truth_dq, truth_ddq = _sines(out.time)
    omega = 2 * np.pi * FREQS
    for got, truth, peak_curvature in ((out.q, truth_q, (AMPS * omega ** 2).sum()),
                                       (out.dq, truth_dq, (AMPS * omega ** 3).sum()),
                                       (out.tau, 2.0 * truth_ddq, 2.0 * (AMPS * omega ** 4).sum())):
        assert np.abs(got - truth).max() <= h ** 2 / 8 * peak_curvature


def test_prepare_resamples_jittered_recordings_and_recovers_accelerations():
    time = _jittered_time(4.0, 0.6, seed=4)
    rec, _ = _noisy_recording(time=time)
    with pytest.raises(DataError, match="not uniform"):
        prepare(rec, FilterConfig(resample=False))
    out = prepare(rec)
    _, _, ddq = _sines(out.time)
    # the same bound as for uniformly sampled data (test above): jitter costs nothing visible
    assert np.abs(out.ddq - ddq).max() < 0.02 * np.abs(ddq).max()


def test_gaps_split_the_recording_into_stretches_filtered_alone():
    time = np.delete(np.arange(4001) / RATE, np.arange(1800, 1850))   # 50 samples lost
    rec, _ = _noisy_recording(time=time)
    with pytest.raises(DataError, match="samples are missing: a gap of 0.051 s"):
        resample_uniform(rec)
    out = prepare(rec)
    first, second = (prepare(Recording(rec.time[rows], rec.q[rows], rec.dq[rows], rec.tau[rows], rec.joint_names))
                     for rows in (slice(0, 1800), slice(1800, None)))
    np.testing.assert_array_equal(out.time, np.concatenate((first.time, second.time)))
    np.testing.assert_array_equal(out.ddq, np.concatenate((first.ddq, second.ddq)))
    # oracle: nothing filtered across the gap, so the accelerations stay right on both sides of it
    _, _, ddq = _sines(out.time)
    assert np.abs(out.ddq - ddq).max() < 0.02 * np.abs(ddq).max()


def test_stretches_too_short_to_filter_are_dropped():
    time = np.delete(np.arange(3001) / RATE, np.arange(100, 110))     # 100 samples, then a gap
    rec, _ = _noisy_recording(time=time)
    tail = slice(100, None)
    expected = prepare(Recording(rec.time[tail], rec.q[tail], rec.dq[tail], rec.tau[tail], rec.joint_names))
    np.testing.assert_array_equal(prepare(rec).time, expected.time)
    short = Recording(rec.time[:200], rec.q[:200], rec.dq[:200], rec.tau[:200], rec.joint_names)
    with pytest.raises(DataError, match="only 0 samples remain .* in 2 stretches between gaps"):
        prepare(short)


def test_a_few_lost_samples_are_bridged_and_only_measured_samples_kept():
    time = np.delete(np.arange(2001) / RATE, [700, 701])
    rec, _ = _noisy_recording(time=time)
    assert 3 < MAX_GAP_PERIODS and missing_samples(time) == 2
    out = prepare(rec)
    # the filters run across the hole; the rows are the measured samples, none interpolated
    trim = FilterConfig().trim_s
    np.testing.assert_allclose(out.time, time[(time >= trim - 1e-9) & (time <= time[-1] - trim + 1e-9)], atol=1e-9)
    _, _, ddq = _sines(out.time)
    assert np.abs(out.ddq - ddq).max() < 0.02 * np.abs(ddq).max()


def test_jittered_stamps_lose_no_rows_and_count_no_missing_sample():
    time = _jittered_time(4.0, 0.4, seed=5)  # a timer late by up to 0.4 periods
    assert missing_samples(time) == 0
    assert missing_samples(np.delete(time, [10, 11, 12, 2000])) == 4
    rec, _ = _noisy_recording(time=time)
    out = prepare(rec)
    grid = resample_uniform(rec).time
    trim = round(FilterConfig().trim_s * RATE)
    np.testing.assert_array_equal(out.time, grid[trim:grid.size - trim])


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


def test_velocity_from_position_is_free_of_a_lagging_velocity_signal():
    """A drive that reports velocity 5 ms late (a moving-average estimator) but position on time:
    differentiating the position recovers dq and ddq, filtering the reported velocity cannot."""
    time = np.arange(4001) / RATE
    q, dq, ddq = _sines(time)
    _, late_dq, _ = _sines(time - 0.005)
    rec = Recording(time, q, late_dq, 2.0 * ddq, ("j1",))
    keep = slice(200, -200)
    from_position = prepare(rec, FilterConfig(velocity_from_position=True))
    from_velocity = prepare(rec)
    error = (lambda out, truth: np.abs(out - truth[keep]).max() / np.abs(truth).max())
    # from the position: the filter's own error (the 0.02 bound of the first test)
    assert error(from_position.dq, dq) < 0.02 and error(from_position.ddq, ddq) < 0.02
    # from the late velocity: the lag itself (5 ms at up to 2.3 Hz), several times worse
    assert error(from_velocity.dq, dq) > 5 * error(from_position.dq, dq)
    assert error(from_velocity.ddq, ddq) > 5 * error(from_position.ddq, ddq)


def test_recording_split_holds_out_the_tail():
    rec, _ = _noisy_recording(duration=1.0)
    head, tail = rec.split(0.25)
    assert (head.n_samples, tail.n_samples) == (751, 250)
    np.testing.assert_array_equal(np.concatenate((head.time, tail.time)), rec.time)
    np.testing.assert_array_equal(tail.tau, rec.tau[751:])
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="in \\(0, 1\\)"):
            rec.split(bad)


def _damiao_quantised(x, limit, bits):
    """x as a Damiao motor reports it (truncated to its unsigned grid over [-limit, limit]) and
    the bridge decodes it (protocol.measured_feedback: the centre of the cell)."""
    from sysid_core.damiao import protocol as dm
    step = dm.resolution(-limit, limit, bits)
    return np.floor((x + limit) / step) * step - limit + 0.5 * step


def _dm8009_feedback(rate: float = 250.0, seconds: float = 8.0):
    """A one-joint excitation (the analytic truth: time, q, dq, ddq) and a DM8009's feedback of
    it as the bridge decodes it: position 16 bits over +-12.5 rad, velocity 12 bits over
    +-45 rad/s (0.022 rad/s, the width of a joint's Coulomb transition)."""
    time = np.arange(int(seconds * rate)) / rate
    omega = 2 * np.pi * FREQS
    arg = omega * time[:, None] + PHASES
    q = (0.1 * AMPS * np.sin(arg)).sum(axis=1, keepdims=True)
    dq = (0.1 * AMPS * omega * np.cos(arg)).sum(axis=1, keepdims=True)
    ddq = -(0.1 * AMPS * omega ** 2 * np.sin(arg)).sum(axis=1, keepdims=True)
    return time, q, dq, ddq, _damiao_quantised(q, 12.5, 16), _damiao_quantised(dq, 45.0, 12)


def test_quantised_velocity_is_recognised_fused_with_the_position_and_reversals_left_out():
    # a DM8009's feedback at 250 Hz; the truth is analytic
    from sysid_core.identification import filtering
    rate = 250.0
    time, q, dq, _, q_rep, dq_rep = _dm8009_feedback(rate)
    step = 90.0 / 4095
    np.testing.assert_allclose(filtering.velocity_steps(dq_rep), [step], rtol=1e-9)
    assert filtering.velocity_steps(dq)[0] == 0.0                 # a continuous signal is not quantised

    config = FilterConfig(trim_s=0.0)
    out, window = next(filtering.prepared_windows(Recording(time, q_rep, dq_rep, np.zeros_like(q), ("j",)), config))
    plain, _ = next(filtering.prepared_windows(Recording(time, q_rep, dq_rep + 1e-7 * np.sin(time)[:, None],
                                                         np.zeros_like(q), ("j",)), config))
    inner = slice(int(0.5 * rate), -int(0.5 * rate))
    truth = lowpass(dq, rate, config.cutoff_hz)[inner]
    fused_error = np.sqrt(np.mean((out.dq[inner] - truth) ** 2))
    reported_error = np.sqrt(np.mean((plain.dq[inner] - truth) ** 2))   # lowpass of the reported one
    assert fused_error < 0.6 * reported_error, (fused_error, reported_error)
    # the fused velocity never leaves the reported cell (before the low-pass)
    raw = filtering.fused_velocity(derivative(lowpass(q_rep, rate, 10.0), rate), dq_rep, [step])
    assert np.all(np.abs(raw - dq_rep) <= 0.5 * step + 1e-12)

    # the equations near a reversal (the true velocity within a cell of zero) are left out, the rest kept
    resolved = window.resolved()[:, 0]
    near = np.abs(dq[:, 0]) < 0.5 * step
    assert not resolved[near].any()
    assert resolved[np.abs(dq[:, 0]) > 0.3].all()
    assert 0.5 < resolved.mean() < 0.99


def test_quantised_velocity_gives_an_acceleration_from_each_sensor_and_continuous_data_one():
    # a DM8009's feedback: the rows' acceleration comes from the position alone and the window's
    # instrument from the reported velocity alone (two quantisers); a continuous velocity keeps
    # the plain pipeline's acceleration and no instrument
    from sysid_core.identification import filtering
    rate = 250.0
    time, q, dq, ddq, q_rep, dq_rep = _dm8009_feedback(rate)
    config = FilterConfig(trim_s=0.0)
    smooth = (lambda x: lowpass(x, rate, config.cutoff_hz))
    out, window = next(filtering.prepared_windows(Recording(time, q_rep, dq_rep, np.zeros_like(q), ("j",)), config))
    np.testing.assert_allclose(out.ddq, smooth(derivative(smooth(derivative(smooth(q_rep), rate)), rate)), atol=1e-9)
    np.testing.assert_allclose(window.instrument_rows(), smooth(derivative(smooth(dq_rep), rate)), atol=1e-9)
    inner = slice(int(0.5 * rate), -int(0.5 * rate))
    for estimate in (out.ddq, window.instrument_rows()):                  # both near the truth, both noisy
        assert 0.005 < np.std((estimate - smooth(ddq))[inner]) < 0.1

    plain, plain_window = next(filtering.prepared_windows(Recording(time, q, dq, np.zeros_like(q), ("j",)), config))
    assert plain_window.instrument is None and plain_window.instrument_rows() is None
    np.testing.assert_allclose(plain.ddq, smooth(derivative(smooth(dq), rate)), rtol=0, atol=1e-12)
