"""From measured joint signals to the (q, dq, ddq, tau) the estimators regress on.

Accelerations are never measured: they are differentiated from the measured velocity,
which amplifies noise in proportion to frequency, so everything is low-passed first.
Torque and kinematics go through the same zero-phase filter, so the regressor built
from the filtered states still explains the filtered torque sample for sample.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import DataError
from .butterworth import lowpass_sections, zero_phase
from .intervals import intervals_longer, largest_deviation, longest_interval, lost_periods, median_interval
from .recording import Recording

# Fewer samples than this cannot support an identification of a 7-DOF arm.
MIN_SAMPLES = 50
# Largest spread of the sample spacing around its median, as a fraction of it, still treated as uniform.
UNIFORM_TOLERANCE = 0.01
# Longest interval, in median sample periods, that resampling bridges by interpolation. Timer
# jitter of a driver stays well below it; a longer hole is lost data (a dropped connection,
# a stalled process), which interpolation would only paper over.
MAX_GAP_PERIODS = 5.0
# Most rows of one block of prepared_blocks: about 3.7 MB per signal of a 7-joint arm, and the
# filter's margins (filter_margin, ~1600 samples at 10 Hz of 1 kHz) cost a few per cent of it.
FILTER_BLOCK = 65536


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
    forward_acceleration: ddq at a sample is the filtered velocity's forward difference (the
    next sample's less this one's), not its central difference: a sample's torque acts over
    the step that follows it, as in MuJoCo's forward simulation (the identification sets it
    for such data; the central difference lags half a sample, which on an arm whose motors'
    armature dwarfs its links left 2e-3 N m of residual, the size of an 11 g payload's torque).
    """

    cutoff_hz: float = 10.0
    order: int = 4
    decimation: int = 1
    trim_s: float = 0.2
    resample: bool = True
    velocity_from_position: bool = False
    forward_acceleration: bool = False

    def __post_init__(self):
        if not np.isfinite(self.cutoff_hz) or self.cutoff_hz <= 0:
            raise ValueError(f"cutoff_hz must be > 0 Hz, got {self.cutoff_hz}")
        if int(self.order) != self.order or self.order < 1:
            raise ValueError(f"order must be an integer >= 1, got {self.order}")
        if int(self.decimation) != self.decimation or self.decimation < 1:
            raise ValueError(f"decimation must be an integer >= 1, got {self.decimation}")
        if not np.isfinite(self.trim_s) or self.trim_s < 0:
            raise ValueError(f"trim_s must be >= 0 s, got {self.trim_s}")


def lowpass(x, sample_rate: float, cutoff_hz: float, order: int = 4) -> np.ndarray:
    """Zero-phase Butterworth low-pass of ``x`` along axis 0 (samples).

    x: (N,) or (N, ...) in any unit, uniformly sampled at ``sample_rate`` Hz; returns the same
    shape and unit. Forward-backward filtering doubles the order and cancels the phase, so
    filtered torque and filtered states stay aligned in time. ValueError if cutoff_hz is not
    below Nyquist; DataError if N is too short for the filter's edge padding.
    """
    sos = lowpass_sections(order, cutoff_hz, sample_rate)
    x = np.asarray(x, dtype=float)
    # Padding length SciPy's sosfiltfilt would pick by default, fixed here so the requirement can be stated.
    padlen = 3 * (2 * sos.shape[0] + 1)
    num = x.shape[0] if x.ndim else 0
    if num <= padlen:
        raise DataError(f"{num} samples are too few for an order-{order} zero-phase low-pass: "
                        f"at least {padlen + 1} are needed")
    return zero_phase(x, sos, padlen, padlen)


def _forward_difference(x, sample_rate: float) -> np.ndarray:
    """(x[k + 1] - x[k]) * sample_rate along axis 0, the last row repeated (N, ...). Of a
    filtered signal it is the filtered forward difference (both linear): nothing to smooth."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    np.subtract(x[1:], x[:-1], out=out[:-1])
    out[-1] = out[-2]
    return out * sample_rate


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
    period = median_interval(time)
    worst, interval = largest_deviation(time, period)
    if abs(interval - period) < UNIFORM_TOLERANCE * period:
        return period, None
    return period, (f"sample spacing is not uniform: interval {interval:.6g} s at t={time[worst]:.6g} s "
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
    return lost_periods(time, median_interval(time))


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
    Linear interpolation errs by at most ``dt^2/8 |x''|``, far below the sensor noise at a few
    hundred Hz. An interval longer than ``max_gap_periods`` median periods raises DataError:
    samples were lost there, and interpolating across them would invent data.
    """
    time = np.asarray(recording.time, dtype=float)
    period, _ = _spacing_error(time)
    worst, gap = longest_interval(time)
    if gap > max_gap_periods * period:
        raise DataError(f"samples are missing: a gap of {gap:.6g} s ({gap / period:.1f} sample "
                        f"periods of {period:.6g} s) at t={time[worst]:.6g} s; resampling bridges at most "
                        f"{max_gap_periods:g} periods, not lost data: record again")
    grid = time[0] + period * np.arange(int(np.floor((time[-1] - time[0]) / period + 1e-9)) + 1)

    def interpolate(signals):
        if signals is None:
            return None
        return np.stack([np.interp(grid, time, column) for column in np.asarray(signals, dtype=float).T], axis=1)
    return Recording(grid, interpolate(recording.q), interpolate(recording.dq), interpolate(recording.tau),
                     recording.joint_names, interpolate(recording.ddq), motor_q=interpolate(recording.motor_q))


def filter_margin(sample_rate: float, cutoff_hz: float, order: int) -> int:
    """Samples on each side of a block that its zero-phase filtering needs from the signal
    around it for the result to equal filtering the whole signal at once: the filter's slowest
    pole ``p`` decays to 1e-17 of its start in log(1e-17) / log|p| samples; twice that covers the
    cascade of prepare's two filters, the derivative between them and a polynomial envelope."""
    sos = lowpass_sections(order, cutoff_hz, sample_rate)
    radius = max(float(np.max(np.abs(np.roots(section[3:])))) for section in sos)
    return int(np.ceil(2.0 * np.log(1e-17) / np.log(radius))) + 8


@dataclass(frozen=True, eq=False)
class _Stretch:
    """A stretch between gaps of lost samples, on its uniform grid: ``raw`` the recorded rows (a
    view of the recording), ``spacing`` s the grid's period (None: the recorded stamps are
    uniform and the rows are the grid; else the grid is raw.time[0] + spacing * k for k <
    ``points``, made a block at a time by ``grid``), ``rate`` Hz the grid's sample rate,
    ``measured`` (M,) bool the grid points with a recorded sample near them (None: all of them)."""

    raw: Recording
    spacing: float | None
    rate: float
    points: int = 0
    measured: np.ndarray | None = None

    @property
    def size(self) -> int:
        return self.raw.n_samples if self.spacing is None else self.points

    def grid(self, start: int, stop: int) -> np.ndarray:
        """(stop - start,) s: the time stamps of grid points [start, stop)."""
        return self.raw.time[0] + self.spacing * np.arange(start, stop)


def stretch_edges(recording: Recording, config: FilterConfig = FilterConfig()) -> np.ndarray:
    """The row where each stretch between gaps of lost samples starts, and the row count after
    the last (k + 1,): one stretch unless ``config.resample``."""
    time = np.asarray(recording.time, dtype=float)
    if not config.resample:
        return np.array([0, time.size])
    return _edges(time, _spacing_error(time)[0])


def _edges(time: np.ndarray, period: float) -> np.ndarray:
    return np.concatenate(([0], intervals_longer(time, MAX_GAP_PERIODS * period) + 1, [time.size]))


def _stretches(recording: Recording, config: FilterConfig) -> list:
    """The recording cut at its gaps of lost samples (with ``config.resample``), each on its grid."""
    time = np.asarray(recording.time, dtype=float)
    if not config.resample:
        return [_Stretch(recording, None, uniform_sample_rate(time))]
    period, reason = _spacing_error(time)
    edges = _edges(time, period)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        if b - a < 2:
            continue
        raw = recording if b - a == time.size else recording.rows(slice(a, b))
        # every interval left is at most MAX_GAP_PERIODS of the whole recording's period; a
        # stretch's own median may be a little shorter, so its gap check must not apply again
        own, own_reason = (period, reason) if raw is recording else _spacing_error(raw.time)
        if own_reason is None:
            out.append(_Stretch(raw, None, 1.0 / own))
        else:
            points = int(np.floor((raw.time[-1] - raw.time[0]) / own + 1e-9)) + 1
            stretch = _Stretch(raw, own, 1.0 / own, points)
            out.append(replace(stretch, measured=np.concatenate(
                [_measured(stretch.grid(k, min(k + FILTER_BLOCK, points)), raw.time, own)
                 for k in range(0, points, FILTER_BLOCK)])))
    return out


def _grid_rows(stretch: _Stretch, start: int, stop: int) -> tuple:
    """time, q, dq, tau, ddq (ddq None unless recorded) at the stretch's grid points [start, stop):
    the recorded rows (views) on a uniform stretch, else linear interpolation between the
    recorded samples around them (what ``resample_uniform`` gives at those points)."""
    raw = stretch.raw
    signals = (raw.q, raw.dq, raw.tau, raw.ddq)
    if stretch.spacing is None:
        return (raw.time[start:stop],) + tuple(None if x is None else np.asarray(x)[start:stop] for x in signals)
    grid = stretch.grid(start, stop)
    around = _raw_rows(stretch, start, stop)
    time = np.asarray(raw.time, dtype=float)[around]

    def interpolate(x):
        if x is None:
            return None
        return np.stack([np.interp(grid, time, column) for column in np.asarray(x, dtype=float)[around].T], axis=1)
    return (grid,) + tuple(interpolate(x) for x in signals)


def _padlen(config: FilterConfig) -> int:
    """The edge padding of ``lowpass`` for this filter order (SciPy's default, fixed here)."""
    return 3 * (2 * ((int(config.order) + 1) // 2) + 1)


def _kept(stretch: _Stretch, config: FilterConfig):
    """The grid points of ``stretch`` that become rows (a range, or an index array where some
    grid points lie in a hole of lost samples): ``trim_s`` dropped at each end, every
    ``decimation``-th kept, only measured ones; none when the stretch is too short to filter.
    The filters bridge a short hole; the regression never sees an interpolated sample."""
    if stretch.raw.ddq is None and stretch.size <= _padlen(config):
        return range(0)
    trim = int(round(config.trim_s * stretch.rate))
    kept = range(trim, stretch.size - trim, config.decimation)
    if stretch.measured is None or stretch.measured[trim:stretch.size - trim].all():
        return kept
    kept = np.arange(kept.start, kept.stop, kept.step)
    return kept[stretch.measured[kept]]


# An equation (sample, joint) whose filtered torque takes more than this share of its weight from
# samples whose reported velocity lies in the quantisation cell at zero is left out (see
# VelocityWindow.resolved).
UNRESOLVED_SHARE = 0.02


def velocity_steps(dq) -> np.ndarray:
    """The quantisation step (n,) rad/s of each column of a recorded velocity dq (N, n), 0 where
    it is not quantised: the smallest gap between its distinct values when every gap is a whole
    number of it (a drive reporting on a fixed grid, e.g. a Damiao motor's 12 bits: 0.022 rad/s
    on a DM8009). A continuous signal, or fewer than 3 distinct values, gives 0."""
    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    out = np.zeros(dq.shape[1])
    for j in range(dq.shape[1]):
        values = np.unique(dq[np.isfinite(dq[:, j]), j])
        if values.size < 3:
            continue
        gaps = np.diff(values)
        step = float(gaps.min())
        ratio = gaps / step
        if step > 0 and np.all(np.abs(ratio - np.round(ratio)) < 1e-6 * np.maximum(ratio, 1.0)):
            out[j] = step
    return out


def fused_velocity(velocity_from_q, dq, steps) -> np.ndarray:
    """The velocity derived from the position (N, n) rad/s kept inside the quantisation cell of
    the reported one, dq +- steps / 2 (dq (N, n), steps (n,) rad/s; 0: not quantised, dq kept).

    A reported velocity only says in which cell the true one lies: a DM8009's cell (0.022 rad/s)
    is as wide as a joint's Coulomb transition, and a friction law evaluated on it is wrong there.
    The position's cell (3.8e-4 rad) is finer in proportion; its derivative, smoothed, resolves
    the motion inside the velocity's cell, and the cell bounds what its noise may do."""
    steps = np.asarray(steps, dtype=float)
    half = 0.5 * steps
    fused = np.clip(velocity_from_q, dq - half, dq + half)
    return np.where(steps > 0, fused, dq)


@dataclass(frozen=True, eq=False)
class VelocityWindow:
    """The velocity around one block of prepared rows, for what is nonlinear in it.

    The measured torque is filtered, so a torque that is a nonlinear function f of the
    velocity (friction) reaches the regression as filter(f(dq)), which is not f(filter(dq)):
    a Stribeck peak or a sharp Coulomb step is smeared over the filter's impulse response.
    ``filtered(f)`` evaluates f on the velocity of the whole window the block was filtered over
    (``dq`` (W, n) rad/s: the measured velocity, ``fused_velocity`` where it is quantised,
    low-passed by the same filter, which leaves a motion inside its pass band as it is and cuts
    the sensor's noise out of f's argument) and
    passes the values through the torque's own zero-phase filter (``sos``, odd padding
    ``pad_before``/``pad_after`` at the true ends of a stretch) before ``pick`` selects the
    block's rows (None: all of them). Without a filter (``sos`` None: exact accelerations,
    nothing filtered) it is f at the rows. ``ddq`` (W, n) rad/s^2 the window's acceleration, as
    the rows' was computed (for a law of the acceleration too: MuJoCo's soft frictionloss).
    ``zero_cell`` (W, n) bool: the samples whose reported velocity lies in a quantisation cell
    that holds zero (None: the velocity is not quantised). ``instrument`` (W, n) rad/s^2 where
    the velocity is quantised: the acceleration from the reported velocity alone, while ``ddq``
    (the rows') comes from the position alone. Both are noisy (a DM8009: 0.02-0.06 rad/s^2 RMS
    at 10 Hz, mostly between 3 and 12 Hz) and their errors are independent (two quantisers),
    which is what the estimator's cross product needs (identify._Stream.columns): noise in an
    acceleration biases a plain least squares (errors in the variables; the viscous friction
    of a DM8009 joint came out 0.02 N m s/rad low), noise independent of it does not.
    """

    dq: np.ndarray
    sos: np.ndarray | None = None
    pad_before: int = 0
    pad_after: int = 0
    pick: object = None
    ddq: np.ndarray | None = None
    q: np.ndarray | None = None
    zero_cell: np.ndarray | None = None
    instrument: np.ndarray | None = None

    def filtered(self, function) -> np.ndarray:
        """function: velocity (W, n) rad/s -> values (W, ...) in any unit; returns (rows, ...)."""
        values = np.asarray(function(self.dq), dtype=float)
        if self.sos is not None:
            values = zero_phase(values, self.sos, self.pad_before, self.pad_after)
        return values if self.pick is None else values[self.pick]

    def instrument_rows(self) -> np.ndarray | None:
        """``instrument`` at the block's rows (rows, n) rad/s^2, None where there is none."""
        if self.instrument is None:
            return None
        return self.instrument if self.pick is None else self.instrument[self.pick]

    def resolved(self) -> np.ndarray | None:
        """(rows, n) bool: the equations whose friction the quantised velocity can tell, None
        when all can. Around a reversal the reported velocity sits in the cell at zero, where
        the true one crosses a friction law's steepest part (a Coulomb transition 0.02 rad/s
        wide, a stick-slip jump) in a way neither the velocity nor the position resolves; an
        equation is left out when more than UNRESOLVED_SHARE of its filtered torque comes from
        such samples. A choice by the regressor's own data, not the torque's, so the least
        squares stay unbiased."""
        if self.zero_cell is None or not self.zero_cell.any():
            return None
        return self.filtered(lambda dq: self.zero_cell) <= UNRESOLVED_SHARE


def _raw_rows(stretch: _Stretch, start: int, stop: int) -> slice:
    """The recorded rows of ``stretch`` around its grid points [start, stop)."""
    if stretch.spacing is None:
        return slice(start, stop)
    time = np.asarray(stretch.raw.time, dtype=float)
    first, last = stretch.grid(start, start + 1)[0], stretch.grid(stop - 1, stop)[0]
    lo = max(int(np.searchsorted(time, first, side="right")) - 1, 0)
    return slice(lo, min(int(np.searchsorted(time, last, side="left")) + 1, time.size))


def _filtered_rows(stretch: _Stretch, config: FilterConfig, rows, margin: int) -> tuple:
    """time, q, dq, ddq, tau (each (len(rows), ...)) at the grid points ``rows`` (a range with
    a step, or an increasing index array) of the stretch through the filters, and the block's
    VelocityWindow: the grid points [first - margin, last + margin] are filtered, the true
    ends of the stretch padded like ``lowpass`` does, so the rows equal those of filtering the
    whole stretch at once (to round-off: the margin outlasts every transient)."""
    first, stop = rows[0], rows[-1] + 1
    a, b = max(0, first - margin), min(stretch.size, stop + margin)
    time, q, dq, tau, ddq = _grid_rows(stretch, a, b)
    pick = slice(first - a, stop - a, rows.step) if isinstance(rows, range) else rows - a
    if ddq is None:
        sos = lowpass_sections(config.order, config.cutoff_hz, stretch.rate)
        padlen = _padlen(config)
        before, after = (padlen if a == 0 else 0), (padlen if b == stretch.size else 0)
        smooth = (lambda x: zero_phase(x, sos, before, after))
        q, tau = smooth(q), smooth(tau)
        zero_cell = moving = instrument = None
        if config.velocity_from_position:
            dq = derivative(q, stretch.rate)
        else:
            steps = velocity_steps(np.asarray(stretch.raw.dq)[_raw_rows(stretch, a, b)])
            if steps.any():
                reported = np.asarray(dq, dtype=float)
                zero_cell = (np.abs(reported) < steps) & (steps > 0)
                from_position = derivative(q, stretch.rate)
                dq = fused_velocity(from_position, reported, steps)
                # the two sensors' accelerations (see VelocityWindow.instrument): the rows' from
                # the position, the instrument from the reported velocity; a joint whose velocity
                # is not quantised has one, the reported velocity's, in both
                moving, instrument = smooth(np.where(steps > 0, from_position, reported)), smooth(reported)
            dq = smooth(dq)
        accelerate = (lambda v: _forward_difference(v, stretch.rate) if config.forward_acceleration else
                      smooth(derivative(v, stretch.rate)))
        ddq = accelerate(dq if moving is None else moving)
        instrument = None if instrument is None else accelerate(instrument)
        window = VelocityWindow(dq, sos, before, after, pick, ddq, q, zero_cell, instrument)
    else:
        window = VelocityWindow(np.asarray(dq, dtype=float)[pick], ddq=np.asarray(ddq, dtype=float)[pick],
                                q=np.asarray(q, dtype=float)[pick])
    return tuple(np.asarray(x, dtype=float)[pick] for x in (time, q, dq, ddq, tau)) + (window,)


def prepared_count(recording: Recording, config: FilterConfig = FilterConfig()) -> int:
    """How many rows ``prepare`` returns for ``recording``, without filtering anything; DataError
    (as prepare raises it) when fewer than MIN_SAMPLES remain or the stamps are unusable."""
    stretches = _stretches(recording, config)
    remaining = sum(len(_kept(s, config)) for s in stretches)
    if remaining < MIN_SAMPLES:
        where = "" if len(stretches) == 1 else f" in {len(stretches)} stretches between gaps of lost samples"
        raise DataError(f"only {remaining} samples remain after trimming {config.trim_s} s at each end and "
                        f"decimating by {config.decimation} ({recording.n_samples} recorded{where}); "
                        f"at least {MIN_SAMPLES} are needed: record longer")
    return remaining


def prepared_sizes(recording: Recording, config: FilterConfig = FilterConfig(), block: int = FILTER_BLOCK) -> list:
    """The number of rows of every block ``prepared_blocks`` yields, without filtering anything."""
    return [min(block, len(kept) - start) for kept in (_kept(s, config) for s in _stretches(recording, config))
            for start in range(0, len(kept), block)]


def prepared_blocks(recording: Recording, config: FilterConfig = FilterConfig(), block: int = FILTER_BLOCK,
                    select=None):
    """``prepare``'s rows in order, as Recordings of at most ``block`` rows each (ddq filled,
    ``quality_notes`` carried): what prepare returns, joined, without ever holding it whole.

    Each block is filtered over its own stretch of the signal plus ``filter_margin`` samples on
    each side, so memory is a few times ``block`` + margins rows, whatever the recording's
    length, and a row equals prepare's to round-off. ``select`` (a container of block numbers,
    counting from 0) yields only those blocks, and filters no other. Raises what
    ``prepared_count`` raises.
    """
    for samples, _ in prepared_windows(recording, config, block, select):
        yield samples


def prepared_windows(recording: Recording, config: FilterConfig = FilterConfig(), block: int = FILTER_BLOCK,
                     select=None, whole: bool = True):
    """``prepared_blocks``'s blocks, each with its VelocityWindow: (Recording, VelocityWindow).
    ``whole`` False: the recording is a part of the data (one file of several), which may keep
    fewer than MIN_SAMPLES rows, or none."""
    if int(block) != block or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block}")
    if whole:
        prepared_count(recording, config)
    number = -1
    for stretch in _stretches(recording, config):
        kept = _kept(stretch, config)
        if not len(kept):
            continue
        margin = 0 if stretch.raw.ddq is not None else filter_margin(stretch.rate, config.cutoff_hz, config.order)
        for start in range(0, len(kept), block):
            number += 1
            if select is not None and number not in select:
                continue
            time, q, dq, ddq, tau, window = _filtered_rows(stretch, config, kept[start:start + block], margin)
            yield Recording(time, q, dq, tau, recording.joint_names, ddq, recording.quality_notes), window


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
    MIN_SAMPLES samples remain. ``quality_notes`` carried. The rows are those of
    ``prepared_blocks``, joined (for long recordings, iterate over those instead).
    """
    blocks = list(prepared_blocks(recording, config))
    if len(blocks) == 1:
        return blocks[0]
    join = (lambda field: np.concatenate([getattr(b, field) for b in blocks]))
    return Recording(join("time"), join("q"), join("dq"), join("tau"), recording.joint_names, join("ddq"),
                     recording.quality_notes)
