"""The Butterworth design and zero-phase filter against SciPy's (the oracle: scipy.signal)."""
import numpy as np
import pytest
from scipy import signal

from sysid_core.identification.butterworth import lowpass_sections, zero_phase

DESIGNS = [(1, 20.0, 500.0), (2, 0.5, 1000.0), (3, 5.0, 250.0), (4, 10.0, 1000.0), (4, 45.0, 100.0),
           (5, 1.0, 1000.0), (6, 80.0, 500.0)]


@pytest.mark.parametrize("order, cutoff, rate", DESIGNS)
def test_sections_have_scipys_response_and_unit_gain_each(order, cutoff, rate):
    ours = lowpass_sections(order, cutoff, rate)
    theirs = signal.butter(order, cutoff, fs=rate, output="sos")
    assert ours.shape == theirs.shape
    frequencies = np.linspace(0.0, rate / 2 * 0.999, 400)
    _, h_ours = signal.sosfreqz(ours, worN=frequencies, fs=rate)
    _, h_theirs = signal.sosfreqz(theirs, worN=frequencies, fs=rate)
    np.testing.assert_allclose(h_ours, h_theirs, rtol=0, atol=1e-10)
    _, at_cutoff = signal.sosfreqz(ours, worN=[cutoff], fs=rate)
    assert abs(abs(at_cutoff[0]) - 2 ** -0.5) < 1e-9  # -3 dB at the cutoff
    # every section passes a constant unchanged: the filter's start from a held value relies on it
    np.testing.assert_allclose(ours[:, :3].sum(axis=1) / ours[:, 3:].sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(np.abs(np.concatenate([np.roots(s[3:]) for s in ours])) < 1.0)


def _signal(shape, seed=0):
    """A random walk around an offset (a joint position's kind of signal) plus white noise."""
    gen = np.random.default_rng(seed)
    return 3.0 + np.cumsum(gen.normal(scale=0.01, size=shape), axis=0) + gen.normal(scale=0.05, size=shape)


@pytest.mark.parametrize("order, cutoff, rate", DESIGNS)
@pytest.mark.parametrize("shape", [(40,), (1000, 3), (4097, 2, 3)])
def test_zero_phase_equals_sosfiltfilt(order, cutoff, rate, shape):
    x = _signal(shape)
    ours = lowpass_sections(order, cutoff, rate)
    theirs = signal.butter(order, cutoff, fs=rate, output="sos")
    for pad in (0, 3 * (2 * theirs.shape[0] + 1)):
        expected = signal.sosfiltfilt(theirs, x, axis=0, padlen=pad)
        got = zero_phase(x, ours, pad, pad)
        assert got.shape == x.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize("num", [17, 256, 257, 65536 + 2 * 1300])
def test_zero_phase_at_every_block_split_and_with_uneven_padding(num):
    """Lengths that do and do not fill whole blocks, and different padding before and after:
    the forward pass from the held first sample, the backward one from the held last output."""
    x = _signal((num, 2), seed=num)
    sos = lowpass_sections(4, 10.0, 1000.0)
    before, after = min(15, num - 1), 0
    ext = np.concatenate([2 * x[:1] - x[before:0:-1], x], axis=0)
    zi = signal.sosfilt_zi(sos)[:, :, None]
    forward, _ = signal.sosfilt(sos, ext, axis=0, zi=zi * ext[:1])
    backward, _ = signal.sosfilt(sos, forward[::-1], axis=0, zi=zi * forward[-1:])
    expected = backward[::-1][before:]
    np.testing.assert_allclose(zero_phase(x, sos, before, after), expected, rtol=0, atol=1e-11)


def test_design_rejects_what_is_no_low_pass():
    for order, cutoff, rate in [(4, 500.0, 1000.0), (4, 0.0, 1000.0), (0, 10.0, 1000.0), (2.5, 10.0, 1000.0),
                                (4, 10.0, float("nan"))]:
        with pytest.raises(ValueError):
            lowpass_sections(order, cutoff, rate)
    with pytest.raises(ValueError):
        zero_phase(np.zeros(10), lowpass_sections(4, 10.0, 1000.0), 10, 0)
