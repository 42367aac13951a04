"""From measured joint signals to the (q, dq, ddq, tau) the estimators regress on.

Accelerations are never measured: they are differentiated from the measured velocity,
which amplifies noise in proportion to frequency, so everything is low-passed first.
Torque and kinematics go through the same zero-phase filter, so the regressor built
from the filtered states still explains the filtered torque sample for sample.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal

from .errors import DataError
from .recording import Recording

# Fewer samples than this cannot support an identification of a 7-DOF arm.
MIN_SAMPLES = 50
# Largest spread of the sample spacing around its median, as a fraction of it, still treated as uniform.
UNIFORM_TOLERANCE = 0.01


@dataclass(frozen=True)
class FilterConfig:
    """Measured-signal pipeline settings.

    cutoff_hz: Butterworth cutoff, Hz; 10 Hz passes an excitation up to a few Hz and the
    closed-loop tracking dynamics while cutting the sensor noise of a ~1 kHz drive.
    order: Butterworth order (applied forward and backward, so twice the roll-off).
    decimation: keep every ``decimation``-th sample after filtering.
    trim_s: seconds dropped at both ends, where the filter's edge transients live.
    """

    cutoff_hz: float = 10.0
    order: int = 4
    decimation: int = 1
    trim_s: float = 0.2

    def __post_init__(self):
        if not np.isfinite(self.cutoff_hz) or self.cutoff_hz <= 0:
            raise ValueError(f"cutoff_hz must be > 0 Hz, got {self.cutoff_hz}")
        if int(self.order) != self.order or self.order < 1:
            raise ValueError(f"order must be an integer >= 1, got {self.order}")
        if int(self.decimation) != self.decimation or self.decimation < 1:
            raise ValueError(f"decimation must be an integer >= 1, got {self.decimation}")
        if not np.isfinite(self.trim_s) or self.trim_s < 0:
            raise ValueError(f"trim_s must be >= 0 s, got {self.trim_s}")


def _butterworth(sample_rate: float, cutoff_hz: float, order: int) -> np.ndarray:
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be > 0 Hz, got {sample_rate}")
    nyquist = sample_rate / 2
    if not 0 < cutoff_hz < nyquist:
        raise ValueError(f"cutoff {cutoff_hz} Hz must be in (0, {nyquist}) Hz, the Nyquist "
                         f"frequency of {sample_rate} Hz sampling")
    if int(order) != order or order < 1:
        raise ValueError(f"filter order must be an integer >= 1, got {order}")
    return signal.butter(int(order), cutoff_hz, btype="low", fs=sample_rate, output="sos")


def lowpass(x, sample_rate: float, cutoff_hz: float, order: int = 4) -> np.ndarray:
    """Zero-phase Butterworth low-pass of ``x`` along axis 0 (samples).

    x: (N,) or (N, ...) in any unit, uniformly sampled at ``sample_rate`` Hz; returns the same
    shape and unit. Forward-backward filtering doubles the order and cancels the phase, so
    filtered torque and filtered states stay aligned in time. ValueError if cutoff_hz is not
    below Nyquist; DataError if N is too short for the filter's edge padding.
    """
    sos = _butterworth(sample_rate, cutoff_hz, order)
    x = np.asarray(x, dtype=float)
    # Padding length SciPy would pick by default, fixed here so the requirement can be stated.
    padlen = 3 * (2 * sos.shape[0] + 1)
    num = x.shape[0] if x.ndim else 0
    if num <= padlen:
        raise DataError(f"{num} samples are too few for an order-{order} zero-phase low-pass: "
                        f"at least {padlen + 1} are needed")
    return signal.sosfiltfilt(sos, x, axis=0, padlen=padlen)


def derivative(x, sample_rate: float) -> np.ndarray:
    """Time derivative along axis 0 by second-order central differences (one-sided at the ends).

    x: (N, ...) sampled uniformly at ``sample_rate`` Hz, N >= 3; returns (N, ...) in x's unit per second.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim == 0 or x.shape[0] < 3:
        raise DataError(f"differentiation needs at least 3 samples, got {x.shape[0] if x.ndim else 0}")
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be > 0 Hz, got {sample_rate}")
    return np.gradient(x, 1.0 / sample_rate, axis=0, edge_order=2)


def uniform_sample_rate(time) -> float:
    """Sample rate (Hz) of a uniformly sampled time vector (N,) s; DataError when it is not uniform."""
    time = np.asarray(time, dtype=float)
    if time.shape[0] < 2:
        raise DataError(f"need at least 2 samples to find a sample rate, got {time.shape[0]}")
    dt = np.diff(time)
    period = float(np.median(dt))
    worst = float(np.max(np.abs(dt - period)))
    if worst >= UNIFORM_TOLERANCE * period:
        where = int(np.argmax(np.abs(dt - period)))
        raise DataError(f"sample spacing is not uniform: interval {dt[where]:.6g} s at t={time[where]:.6g} s "
                        f"vs median {period:.6g} s (tolerance {UNIFORM_TOLERANCE:.0%}); "
                        "resample the recording to a uniform time grid first")
    return 1.0 / period


def prepare(recording: Recording, config: FilterConfig = FilterConfig()) -> Recording:
    """The measured-signal pipeline: a Recording with ddq filled, ready for regression.

    Without ddq: q, dq and tau are low-passed with the same zero-phase filter, ddq is the
    central difference of the filtered dq, low-passed once more. With ddq already known
    (exact, e.g. ``ideal_recording``) the signals are used as they are. In both cases
    ``trim_s`` is dropped at each end and every ``decimation``-th sample kept, so both
    sources yield the same time stamps. Shapes: (M, n) with M ~ (N - 2 trim_s fs) / decimation.
    DataError for non-uniform time stamps or when fewer than MIN_SAMPLES samples remain.
    """
    fs = uniform_sample_rate(recording.time)
    trim = int(round(config.trim_s * fs))
    keep = slice(trim, recording.n_samples - trim, config.decimation)
    remaining = len(range(recording.n_samples)[keep])
    if remaining < MIN_SAMPLES:
        raise DataError(f"only {remaining} samples remain after trimming {config.trim_s} s at each end and "
                        f"decimating by {config.decimation} ({recording.n_samples} recorded at {fs:.6g} Hz); "
                        f"at least {MIN_SAMPLES} are needed: record longer")
    q, dq, tau = (np.asarray(a, dtype=float) for a in (recording.q, recording.dq, recording.tau))
    if recording.ddq is None:
        smooth = (lambda x: lowpass(x, fs, config.cutoff_hz, config.order))
        q, dq, tau = smooth(q), smooth(dq), smooth(tau)
        ddq = smooth(derivative(dq, fs))
    else:
        ddq = np.asarray(recording.ddq, dtype=float)
    pick = (lambda a: np.ascontiguousarray(a[keep]))
    return Recording(time=pick(np.asarray(recording.time, dtype=float)), q=pick(q), dq=pick(dq),
                     tau=pick(tau), joint_names=recording.joint_names, ddq=pick(ddq))
