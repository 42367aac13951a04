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

from ..errors import DataError
from .recording import Recording

# Fewer samples than this cannot support an identification of a 7-DOF arm.
MIN_SAMPLES = 50
# Largest spread of the sample spacing around its median, as a fraction of it, still treated as uniform.
UNIFORM_TOLERANCE = 0.01
# Longest interval, in median sample periods, that resampling bridges by interpolation. Timer
# jitter of a driver stays well below it; a longer hole is lost data (a dropped connection,
# a stalled process), which interpolation would only paper over.
MAX_GAP_PERIODS = 5.0


@dataclass(frozen=True)
class FilterConfig:
    """Measured-signal pipeline settings.

    cutoff_hz: Butterworth cutoff, Hz; 10 Hz passes an excitation up to a few Hz and the
    closed-loop tracking dynamics while cutting the sensor noise of a ~1 kHz drive.
    order: Butterworth order (applied forward and backward, so twice the roll-off).
    decimation: keep every ``decimation``-th sample after filtering.
    trim_s: seconds dropped at both ends, where the filter's edge transients live.
    resample: interpolate a jittered recording (hardware drivers stamp samples when they
    arrive) onto a uniform grid instead of rejecting it; see ``resample_uniform``.
    velocity_from_position: differentiate the filtered position for dq instead of filtering
    the measured velocity, for drives whose velocity estimate lags the position (a moving
    average over a few milliseconds). Off by default: a good velocity signal beats the
    derivative of a quantised position (on Damiao quantisation, 0.022 rad/s and 3.8e-4 rad
    steps of a DM8009 at 1 kHz and 10 Hz cutoff, ddq errs half as much from the velocity).
    """

    cutoff_hz: float = 10.0
    order: int = 4
    decimation: int = 1
    trim_s: float = 0.2
    resample: bool = True
    velocity_from_position: bool = False

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


def _spacing_error(time: np.ndarray):
    """(median period s, None) when ``time`` (N,) is uniform within UNIFORM_TOLERANCE, else (period, reason)."""
    if time.shape[0] < 2:
        raise DataError(f"need at least 2 samples to find a sample rate, got {time.shape[0]}")
    dt = np.diff(time)
    period = float(np.median(dt))
    worst = int(np.argmax(np.abs(dt - period)))
    if abs(dt[worst] - period) < UNIFORM_TOLERANCE * period:
        return period, None
    return period, (f"sample spacing is not uniform: interval {dt[worst]:.6g} s at t={time[worst]:.6g} s "
                    f"vs median {period:.6g} s (tolerance {UNIFORM_TOLERANCE:.0%})")


def uniform_sample_rate(time) -> float:
    """Sample rate (Hz) of a uniformly sampled time vector (N,) s; DataError when it is not uniform."""
    period, reason = _spacing_error(np.asarray(time, dtype=float))
    if reason is not None:
        raise DataError(f"{reason}; resample the recording to a uniform time grid first")
    return 1.0 / period


def missing_samples(time) -> int:
    """How many samples a recording stamped by a steady timer lacks: time (N,) s, increasing.

    Each interval of about k median periods (k >= 2) holds k - 1 lost samples; exact while the
    timer's jitter stays under half a period. Meaningless for receive-time stamps (a batch of
    messages arrives at once, then nothing).
    """
    time = np.asarray(time, dtype=float)
    if time.shape[0] < 3:
        return 0
    dt = np.diff(time)
    periods = np.rint(dt / np.median(dt))
    return int(np.sum(periods[periods >= 2] - 1))


def _measured(grid: np.ndarray, time: np.ndarray, period: float) -> np.ndarray:
    """(M,) bool: the grid points with a measured sample nearer than 3/4 of a period. Jitter
    under half a period keeps every grid point that near one; a hole of lost samples leaves the
    points inside it alone."""
    after = np.clip(np.searchsorted(time, grid), 1, time.size - 1)
    nearest = np.minimum(np.abs(time[after] - grid), np.abs(grid - time[after - 1]))
    return nearest < 0.75 * period


def resample_uniform(recording: Recording, max_gap_periods: float = MAX_GAP_PERIODS) -> Recording:
    """``recording`` linearly interpolated onto a uniform grid at its median sample spacing.

    For jittered time stamps (a driver's timer, USB-CAN latency): every signal, (N, n) in its
    own unit, is interpolated at t0 + k * median(dt) for every k inside the recorded span; M ~ N.
    Linear interpolation errs by at most dt^2/8 |x''|, far below the sensor noise at a few
    hundred Hz. An interval longer than ``max_gap_periods`` median periods raises DataError:
    samples were lost there, and interpolating across them would invent data.
    """
    time = np.asarray(recording.time, dtype=float)
    period, _ = _spacing_error(time)
    dt = np.diff(time)
    worst = int(np.argmax(dt))
    if dt[worst] > max_gap_periods * period:
        raise DataError(f"samples are missing: a gap of {dt[worst]:.6g} s ({dt[worst] / period:.1f} sample "
                        f"periods of {period:.6g} s) at t={time[worst]:.6g} s; resampling bridges at most "
                        f"{max_gap_periods:g} periods, not lost data: record again")
    grid = time[0] + period * np.arange(int(np.floor((time[-1] - time[0]) / period + 1e-9)) + 1)

    def interpolate(signals):
        if signals is None:
            return None
        return np.stack([np.interp(grid, time, column) for column in np.asarray(signals, dtype=float).T], axis=1)
    return Recording(grid, interpolate(recording.q), interpolate(recording.dq), interpolate(recording.tau),
                     recording.joint_names, interpolate(recording.ddq))


def _filtered(recording: Recording, config: FilterConfig, measured: np.ndarray | None = None) -> Recording | None:
    """One uniformly sampled stretch through the filters, trimmed and decimated; None when too short.

    ``measured`` (N,) bool: the samples that were measured, not interpolated; only they are kept.
    """
    fs = uniform_sample_rate(recording.time)
    trim = int(round(config.trim_s * fs))
    keep = np.arange(trim, recording.n_samples - trim, config.decimation)
    if measured is not None:
        keep = keep[measured[keep]]
    if not keep.size:
        return None
    q, dq, tau = (np.asarray(a, dtype=float) for a in (recording.q, recording.dq, recording.tau))
    if recording.ddq is None:
        smooth = (lambda x: lowpass(x, fs, config.cutoff_hz, config.order))
        try:
            q, tau = smooth(q), smooth(tau)
        except DataError:  # shorter than the filter's edge padding
            return None
        dq = derivative(q, fs) if config.velocity_from_position else smooth(dq)
        ddq = smooth(derivative(dq, fs))
    else:
        ddq = np.asarray(recording.ddq, dtype=float)
    return Recording(np.asarray(recording.time, dtype=float), q, dq, tau, recording.joint_names, ddq).rows(keep)


def _bridged(stretch: Recording, period: float) -> tuple[Recording, np.ndarray]:
    """A stretch with jitter or short holes on a uniform grid, and which grid points were measured."""
    uniform = resample_uniform(stretch, max_gap_periods=np.inf)
    return uniform, _measured(uniform.time, np.asarray(stretch.time, dtype=float), period)


def prepare(recording: Recording, config: FilterConfig = FilterConfig()) -> Recording:
    """The measured-signal pipeline: a Recording with ddq filled, ready for regression.

    Without ddq: q, dq and tau are low-passed with the same zero-phase filter, ddq is the
    central difference of the filtered dq, low-passed once more. With ddq already known
    (exact, e.g. ``ideal_recording``) the signals are used as they are. In both cases
    ``trim_s`` is dropped at each end and every ``decimation``-th sample kept, so both
    sources yield the same time stamps. Shapes: (M, n) with M ~ (N - 2 trim_s fs) / decimation.

    With ``config.resample`` (the default) the recording may come from a driver: it is cut
    at every interval longer than MAX_GAP_PERIODS median periods (lost samples), each stretch
    is resampled onto a uniform grid if its stamps jitter or a few samples are missing
    (``resample_uniform``) and filtered on its own, and the stretches are joined (each row of
    the regression stands alone, so nothing ties neighbouring rows together). Only grid points
    where a sample was measured become rows: the filters bridge a short hole, the regression
    never sees an interpolated sample. Stretches too short to filter are dropped.
    Without it, non-uniform stamps raise DataError. DataError too when fewer than
    MIN_SAMPLES samples remain.
    """
    time = np.asarray(recording.time, dtype=float)
    if not config.resample:
        uniform_sample_rate(time)
        stretches = [(recording, None)]
    else:
        period, _ = _spacing_error(time)
        breaks = np.flatnonzero(np.diff(time) > MAX_GAP_PERIODS * period) + 1
        edges = np.concatenate(([0], breaks, [time.size]))
        stretches = [recording.rows(slice(a, b)) for a, b in zip(edges[:-1], edges[1:]) if b - a >= 2]
        # every interval left is at most MAX_GAP_PERIODS of the whole recording's period; a
        # stretch's own median may be a little shorter, so its gap check must not apply again
        stretches = [(s, None) if _spacing_error(s.time)[1] is None else _bridged(s, period) for s in stretches]
    pieces = [p for p in (_filtered(s, config, measured) for s, measured in stretches) if p is not None]
    remaining = sum(p.n_samples for p in pieces)
    where = "" if len(stretches) == 1 else f" in {len(stretches)} stretches between gaps of lost samples"
    if remaining < MIN_SAMPLES:
        raise DataError(f"only {remaining} samples remain after trimming {config.trim_s} s at each end and "
                        f"decimating by {config.decimation} ({recording.n_samples} recorded{where}); "
                        f"at least {MIN_SAMPLES} are needed: record longer")
    if len(pieces) == 1:
        return pieces[0]
    join = (lambda field: np.ascontiguousarray(np.concatenate([getattr(p, field) for p in pieces])))
    return Recording(join("time"), join("q"), join("dq"), join("tau"), recording.joint_names, join("ddq"))
