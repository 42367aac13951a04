"""The terminal body's payload tracked while the arm works: a recursive estimate of its ten
standard parameters, a test that notices when it changed, and the new payload once known.

The measurement. With the rest of the arm and the joints' friction as the LiveModel has them,
the measured torque less the model's torque with the terminal body left out is the terminal
body's share alone, linear in its standard parameters theta (10,):

    y = tau - torque(q, dq, ddq, parameters with the terminal body zeroed) = Phi(q, dq, ddq) theta + e

Phi (n, 10) the terminal body's columns of the regressor. q, dq and tau pass through one causal
Butterworth low-pass (``causal_filter.StreamFilter``), ddq is the backward difference of the
filtered dq: every signal carries the same delay. A joint's equation is left out while the joint
is at or near rest (``|dq| < rest_velocity``): standing still it holds any torque within its
static friction, and just above rest its friction is in the Stribeck region a Coulomb + viscous
law misses. Joint j's equations are weighted by 1 / (v_j k_j): v_j its residual variance, the
model's own torque error to begin with (``LiveModel.sigma``, the identification's validation
RMSE, squared), then measured online; k_j how many blocks (below) carry one block's worth of
information, (1 + rho_j) / (1 - rho_j) from the lag-one correlation rho_j of its successive
block-mean residuals (a model error that follows the motion lasts longer than the filter's
memory). Both are averages over about ``forgetting_time_s`` of the residuals after each update,
taken from the blocks the change test has passed, so that a joint the model explains less well
counts for less, and the standard deviations mean what they say.

Samples are gathered into blocks of ``block_samples`` (the filter's correlation length,
rate / (2 x its equivalent noise bandwidth)): a block's information is the mean of its
samples', one observation's worth. Everything below happens at block ends, which fall on fixed
sample counts: a stream cut into batches of any size gives the same blocks and the same results
(to rounding).

The estimator: recursive least squares in information form (R, the inverse covariance, in
parameters scaled by the change prior's standard deviations, below) with directional forgetting
(Haegglund, "The problem of forgetting old data in recursive estimation", IFAC 1983; Kulhavy and
Karny, "Tracking of slowly varying parameters by directional forgetting", IFAC 1984) restricted
to the subspace the latest block carries new information in, in the spirit of Cao and Schwartz,
"A directional forgetting algorithm based on the decomposition of the information matrix"
(Automatica 2000). At each block with information J (eigenvectors c, eigenvalues mu) and score g
(Phi^T W y):

1. forget: R <- D R D with D = I - (1 - sqrt(lambda)) C C^T, lambda = exp(-block / T_f),
   T_f = ``forgetting_time_s``, C the eigenvectors c whose mu would, within a forgetting time,
   replace what R knows about c^T theta: mu >= (1 - lambda) / (c^T R^-1 c). In covariance: the
   variance in span C grows by 1 / lambda, its correlation with the rest by 1 / sqrt(lambda), the
   rest's covariance stays as it was. A direction the motion keeps exciting settles at T_f's
   worth of its data (mu / (1 - lambda)); one it excites too weakly to refresh, or not at all,
   is not forgotten: it keeps the identified body's prior and does not drift, and nothing winds
   up. Scaling R rather than subtracting what it holds about C^T theta keeps a C tilted a little
   by noise from eating into the unexcited directions (second order in the tilt, not first);
2. update: R <- R + J, theta <- theta + R^-1 (g - J theta);
3. R's eigenvalues are capped at MAX_INFORMATION_RATIO^2 times the identified prior's: the
   covariance stays bounded below as well as above.

R^-1 is the estimate's covariance. The two priors have one shape, the change prior's
(``payload_mass_scale`` kg, first moment times ``length_scale_m``, inertia times its square),
the identified body's shrunk to ``identified_mass_std`` in mass: in the scaled parameters both
are multiples of I, so a direction no motion excites is uncoupled from the excited ones and
stays exactly at the identified body.

The change test, which restarts the estimator when the payload changed, and the report of the
new body once it has converged: ``payload_change``.

What the estimate is: the terminal body of the *identified* arm plus what changed since. The
terminal body's mass and its first moment along its joint's axis are no base parameters (they
act only together with the parent's), so an identification splits them between the terminal
body and its parent as its estimator chose; the tracker keeps the parent as identified and
sees the change exactly. What was added since the identification is the estimate less the
identified terminal body.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .causal_filter import StreamFilter, backward_difference
from .live_model import LiveModel
from .payload_change import (_consistent, _converged, _covariance_si, _empty_window, _evict, _onset, _push, _report,
                             _restart, _window_test)

# N m: each joint's torque error when the model carries no validation figure (a nominal model):
# twice the torque noise of a motor-current estimate (simulation.MeasurementNoise: 0.02 N m),
# the model's own error unknown. The residual variances measured online replace it.
DEFAULT_TORQUE_STD = 0.04
# bounds of a joint's residual variance, as factors of its starting value: a joint explained far
# better than its identification said is not believed beyond 1 / 100 of the variance; one far
# worse is still used, weighted down and its uncertainty reported as such
_VARIANCE_RANGE = (1e-2, 1e4)
# the information in any direction is capped at this squared times the identified body's prior
MAX_INFORMATION_RATIO = 10.0
# the lag-one correlation of successive block-mean residuals is taken at most this: the
# information of a joint's equations is divided by at most (1 + 0.9) / (1 - 0.9) = 19
MAX_CORRELATION = 0.9
# samples whose per-joint products are formed at once: bounds the memory of a large batch
_CHUNK = 256


def _butterworth_noise_bandwidth(cutoff_hz: float, order: int) -> float:
    """Equivalent noise bandwidth (Hz) of a Butterworth low-pass: cutoff (pi / 2N) / sin(pi / 2N)."""
    x = np.pi / (2 * order)
    return cutoff_hz * x / np.sin(x)


@dataclass(frozen=True)
class PayloadTrackingConfig:
    """How the payload is tracked.

    ``rate_hz`` the sample rate; ``cutoff_hz`` and ``filter_order`` of the causal low-pass on q, dq
    and tau (10 Hz: a pick-and-place move's content stays below 3 Hz and an arm's tracking dynamics
    below 8 Hz, while the acceleration's noise, which grows with the cutoff, stays small: 0.06
    rad/s^2 from the default 5e-3 rad/s velocity noise at 500 Hz, 0.16 at 20 Hz).
    ``forgetting_time_s`` T_f: how much data an excited direction remembers, and the time the
    residual variances are averaged over (a tool change is caught by the test, not by forgetting, so
    it can be long and the estimate quiet). ``window_s`` the change test's window: a second of
    motion sees the payload at several wrist poses. ``false_alarm_probability`` per test (one per
    block, about 22 a second at the defaults: 1e-7 leaves about one false alarm in 130 hours of
    residuals as white as their model says, fewer as successive windows overlap) and ``min_change``
    the change's size in units of the residual's RMS (1: as large as all the model's error; 2 leaves
    room for a window in which the model's error happens to look like a payload). ``rest_velocity``
    rad/s below which a joint's equation is left out: at rest its static friction is unknown, and
    slower than 0.1 rad/s a gearbox's friction is in its Stribeck region (Stribeck velocities of
    0.05-0.2 rad/s), which a Coulomb + viscous law misses by up to the static excess; the slow ends
    of a move carry little else. ``torque_std`` N m per joint (scalar or (n,)) the model's torque
    error to start from; None: the LiveModel's sigma, else DEFAULT_TORQUE_STD.
    ``payload_mass_scale`` kg and ``length_scale_m`` m the change prior: a new payload of about that
    mass at about that distance (standard deviations: mass, first moment mass x length, inertia mass
    x length^2); also the units the information matrix is kept in. ``converged_mass_std`` kg and
    ``converged_com_std`` m: when the estimate counts as converged (5 g and 3 mm: three standard
    deviations within 3 % of a 0.5 kg payload and within 10 mm); ``com_mass_floor`` kg: a reported
    change's own centre of mass must be known to converged_com_std too when it adds at least this
    mass, a lighter one's to converged_com_std x com_mass_floor / its mass (the same first-moment
    error, so the same torque error; 0.5 kg, the lightest payload the 10 mm is asked for).
    ``identified_mass_std`` kg: how well the identified terminal body is known, as the change prior
    shrunk to this mass standard deviation (first moment and inertia in the same proportion): the
    two priors then differ by a factor only, which keeps a direction no motion excites exactly at
    the identified body (see the module's docstring). Half of converged_mass_std: the identified
    body counts as converged; an identification from a whole excitation is an order of magnitude
    better still."""

    rate_hz: float
    cutoff_hz: float = 10.0
    filter_order: int = 2
    forgetting_time_s: float = 30.0
    window_s: float = 1.0
    false_alarm_probability: float = 1e-7
    min_change: float = 2.0
    rest_velocity: float = 0.1
    torque_std: object = None
    payload_mass_scale: float = 1.0
    length_scale_m: float = 0.1
    converged_mass_std: float = 0.005
    converged_com_std: float = 0.003
    com_mass_floor: float = 0.5
    identified_mass_std: float = 0.0025

    def __post_init__(self):
        StreamFilter(self.rate_hz, self.cutoff_hz, self.filter_order)  # checks rate, cutoff and order
        if self.cutoff_hz == 0:
            raise ValueError("payload tracking needs a low-pass: cutoff_hz must be > 0")
        for name in ("forgetting_time_s", "window_s", "min_change", "payload_mass_scale", "length_scale_m",
                     "converged_mass_std", "converged_com_std", "com_mass_floor", "identified_mass_std"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not 0 < self.false_alarm_probability < 1:
            raise ValueError(f"false_alarm_probability must be in (0, 1), got {self.false_alarm_probability}")
        if not (np.isfinite(self.rest_velocity) and self.rest_velocity >= 0):
            raise ValueError(f"rest_velocity must be >= 0 rad/s, got {self.rest_velocity}")

    @property
    def block_samples(self) -> int:
        """Samples per block: rate / (2 x the filter's equivalent noise bandwidth), at least 1."""
        bandwidth = _butterworth_noise_bandwidth(self.cutoff_hz, int(self.filter_order))
        return max(1, int(round(self.rate_hz / (2 * bandwidth))))

    @property
    def window_blocks(self) -> int:
        """Blocks in the change test's window."""
        return max(1, int(round(self.window_s * self.rate_hz / self.block_samples)))

    @property
    def scale(self) -> np.ndarray:
        """(10,) the change prior's standard deviations, the units the information is kept in."""
        m, length = self.payload_mass_scale, self.length_scale_m
        return np.array([m] + [m * length] * 3 + [m * length ** 2] * 6)


@dataclass(frozen=True, eq=False)
class PayloadState:
    """Everything the tracker carries from one batch to the next (treat as immutable).

    ``samples`` seen since the start, ``time`` s of the last; the filters' states (``filter_q``,
    ``filter_dq``, ``filter_tau``) and the last filtered dq (n,); the open block's per-joint sums
    over the equations in use (``block_*``: Phi_j^T Phi_j (n, 10, 10), Phi_j^T y_j (n, 10), y_j^2
    (n,), their number (n,), y_j (n,), Phi_j (n, 10)) over ``block_count`` samples; ``estimate``
    (10,) SI; ``information`` (10, 10) R in scaled parameters; ``variance`` (n,) N m^2 each joint's
    residual variance; ``correlation`` (3, n) the weight, mean square and lag-one product of its
    block-mean residuals, ``last_mean`` (n,) the last block's (NaN: none); the test window
    (``window_*``, oldest first: information and score, as whitened for the estimate and by the
    variances alone, equations, the per-joint residual sums, equations and means, the estimate and
    covariance from before each block, its end time); ``phase`` "tracking" or "changing" (a change
    detected, not yet reported); ``restart_mean`` (10,) SI the estimate the last restart started
    from; ``published`` and ``published_std`` (10,) the reported body; ``detected_at`` s of the last
    detection (None before any); counters ``detections`` and ``reports``; the last test's T over its
    threshold (``statistic``) and the size of the change it estimated (``change_size``, in units of
    the residual's RMS)."""

    samples: int
    time: float
    filter_q: object
    filter_dq: object
    filter_tau: object
    last_dq: np.ndarray
    block_count: int
    block_information: np.ndarray
    block_score: np.ndarray
    block_square: np.ndarray
    block_rows: np.ndarray
    block_sum: np.ndarray
    block_regressor: np.ndarray
    estimate: np.ndarray
    information: np.ndarray
    variance: np.ndarray
    correlation: np.ndarray
    last_mean: np.ndarray
    window_information: np.ndarray
    window_score: np.ndarray
    window_plain_information: np.ndarray
    window_plain_score: np.ndarray
    window_rows: np.ndarray
    window_residual: np.ndarray
    window_joint_rows: np.ndarray
    window_mean: np.ndarray
    window_estimate: np.ndarray
    window_covariance: np.ndarray
    window_time: np.ndarray
    phase: str
    restart_mean: np.ndarray
    published: np.ndarray
    published_std: np.ndarray
    detected_at: float | None
    detections: int
    reports: int
    statistic: float
    change_size: float


@dataclass(frozen=True, eq=False)
class PayloadStep:
    """What one batch gave. ``estimate`` (10,) the terminal body's standard parameters now
    [kg, kg m, kg m^2], ``std`` (10,) their standard deviations; ``converged`` whether the
    estimate meets the convergence thresholds; ``changed`` True in the batch where a new payload
    is reported, ``report_time`` s the sample it was decided at; ``payload`` and ``payload_std``
    (10,) the published terminal body (physically consistent; the identified one until the first
    report); ``detected`` True in a batch where a change was detected (the estimator
    restarted); ``phase`` "tracking" or "changing"; the largest change test of the batch's blocks:
    ``statistic`` T over its threshold (a detection needs > 1) and ``change_size`` the size of the
    change it estimated, in units of the residual's RMS (a detection needs >= min_change)."""

    estimate: np.ndarray
    std: np.ndarray
    converged: bool
    changed: bool
    payload: np.ndarray | None
    payload_std: np.ndarray | None
    detected: bool = False
    report_time: float | None = None
    phase: str = "tracking"
    statistic: float = 0.0
    change_size: float = 0.0


# --- the constant parts ------------------------------------------------------------------------

def torque_std(model: LiveModel, config: PayloadTrackingConfig) -> np.ndarray:
    """(n,) N m each joint's torque error the tracker starts from (see PayloadTrackingConfig)."""
    n = model.n_joints
    if config.torque_std is not None:
        std = np.broadcast_to(np.asarray(config.torque_std, dtype=float), (n,)).copy()
    elif model.sigma is not None:
        std = np.asarray(model.sigma, dtype=float).copy()
    else:
        std = np.full(n, DEFAULT_TORQUE_STD)
    if not np.all(np.isfinite(std)) or np.any(std <= 0):
        raise ValueError(f"the torque standard deviations must be > 0 N m, got {std.tolist()}")
    return std


def identified_prior_std(config: PayloadTrackingConfig) -> np.ndarray:
    """(10,) the identified terminal body's standard deviations [kg, kg m, kg m^2]: the change
    prior's, scaled to ``identified_mass_std`` in mass."""
    return config.scale * (config.identified_mass_std / config.payload_mass_scale)


def _identified(model: LiveModel) -> np.ndarray:
    return np.array(model.parameters[model.robot.terminal_index], dtype=float)


def _estimator_at_identified(model: LiveModel, config: PayloadTrackingConfig) -> dict:
    identified = _identified(model)
    prior = identified_prior_std(config)
    published = _consistent(identified, model.robot.terminal_body)
    return dict(estimate=identified, information=np.diag((config.scale / prior) ** 2), phase="tracking",
                restart_mean=identified, published=identified if published is None else published,
                published_std=prior, **_empty_window(model.n_joints))


_BLOCK_SUMS = ("block_information", "block_score", "block_square", "block_rows", "block_sum", "block_regressor")


def _open_block(n: int) -> dict:
    return dict(block_count=0, block_information=np.zeros((n, 10, 10)), block_score=np.zeros((n, 10)),
                block_square=np.zeros(n), block_rows=np.zeros(n), block_sum=np.zeros(n),
                block_regressor=np.zeros((n, 10)))


# --- the interface -----------------------------------------------------------------------------

def payload_start(model: LiveModel, config: PayloadTrackingConfig, t0, q0, dq0, tau0) -> PayloadState:
    """A tracker at the identified terminal body, its filters settled on the first sample: t0 s,
    q0 rad, dq0 rad/s, tau0 N m (n,) each (the first sample itself is not measured from)."""
    n = model.n_joints
    q0, dq0, tau0 = (np.asarray(a, dtype=float).reshape(-1) for a in (q0, dq0, tau0))
    if not (q0.shape == dq0.shape == tau0.shape == (n,)):
        raise ValueError(f"q0, dq0, tau0 must have shape ({n},)")
    stream = StreamFilter(config.rate_hz, config.cutoff_hz, config.filter_order)
    return PayloadState(samples=0, time=float(t0), filter_q=stream.start(q0), filter_dq=stream.start(dq0),
                        filter_tau=stream.start(tau0), last_dq=dq0.copy(), variance=torque_std(model, config) ** 2,
                        correlation=np.zeros((3, n)), last_mean=np.full(n, np.nan), detected_at=None, detections=0,
                        reports=0, statistic=0.0, change_size=0.0, **_open_block(n),
                        **_estimator_at_identified(model, config))


def payload_reset(model: LiveModel, config: PayloadTrackingConfig, state: PayloadState) -> PayloadState:
    """``state`` with everything the estimator learnt forgotten: the identified terminal body with
    its prior, published again, the test window empty; the filters, the open block and the
    residual variances (what the model explains, not the payload) kept."""
    return replace(state, detected_at=None, statistic=0.0, change_size=0.0, last_mean=np.full(model.n_joints, np.nan),
                   **_estimator_at_identified(model, config))


def payload_step(model: LiveModel, config: PayloadTrackingConfig, state: PayloadState, t, q, dq, tau
                 ) -> tuple[PayloadState, PayloadStep]:
    """Take in one batch: t (N,) s increasing past ``state.time``, q rad, dq rad/s, tau N m
    (N, n). Returns the new state and what the batch gave (PayloadStep). The split of a stream
    into batches does not change the results (blocks end at fixed sample counts)."""
    t = np.atleast_1d(np.asarray(t, dtype=float))
    q, dq, tau = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, tau))
    num, n = len(t), model.n_joints
    if not (q.shape == dq.shape == tau.shape == (num, n)):
        raise ValueError(f"q, dq, tau must have shape ({num}, {n}), got {q.shape}, {dq.shape}, {tau.shape}")
    if num == 0:
        return state, _step_of(config, state, False, False, None, 0.0, 0.0)
    dt = np.diff(np.concatenate([[state.time], t]))
    if not np.all(dt > 0):
        raise ValueError("sample times must increase")
    stream = StreamFilter(config.rate_hz, config.cutoff_hz, config.filter_order)
    qf, filter_q = stream.apply(state.filter_q, q)
    dqf, filter_dq = stream.apply(state.filter_dq, dq)
    tauf, filter_tau = stream.apply(state.filter_tau, tau)
    ddqf = backward_difference(state.last_dq, dqf, dt)
    state = replace(state, samples=state.samples + num, time=float(t[-1]), filter_q=filter_q, filter_dq=filter_dq,
                    filter_tau=filter_tau, last_dq=dqf[-1].copy())

    block = config.block_samples
    detected, changed, report_time, statistic, size = False, False, None, 0.0, 0.0
    for chunk in range(0, num, _CHUNK):
        end = min(num, chunk + _CHUNK)
        parts = _products(model, config, qf[chunk:end], dqf[chunk:end], ddqf[chunk:end], tauf[chunk:end])
        start = chunk
        while start < end:
            stop = min(end, start + block - state.block_count)
            a, b = start - chunk, stop - chunk
            # sequential sums: a block split across batches adds its samples in the same order
            state = replace(state, block_count=state.block_count + stop - start,
                            **{name: _accumulate(getattr(state, name), part[a:b])
                               for name, part in zip(_BLOCK_SUMS, parts)})
            if state.block_count == block:
                state, was_detected, was_changed = _end_block(model, config, state, float(t[stop - 1]))
                detected |= was_detected
                statistic, size = max(statistic, state.statistic), max(size, state.change_size)
                if was_changed:
                    changed, report_time = True, float(t[stop - 1])
            start = stop
    return state, _step_of(config, state, detected, changed, report_time, statistic, size)


# --- the measurement ---------------------------------------------------------------------------

def _accumulate(total: np.ndarray, values: np.ndarray) -> np.ndarray:
    """total + values[0] + values[1] + ..., added in this order."""
    if len(values) == 0:
        return np.array(total, dtype=float)
    return np.add.accumulate(np.concatenate([np.asarray(total, dtype=float)[None], values]), axis=0)[-1]


def terminal_measurement(model: LiveModel, q, dq, ddq, tau) -> tuple[np.ndarray, np.ndarray]:
    """(Phi (N, n, 10), y (N, n) N m): the terminal body's regressor columns and the torque tau
    (N, n) less the model's with the terminal body zeroed, at q, dq, ddq (N, n) (already
    filtered). A residual model that takes the torque sees the identified arm's whole torque
    (not the estimate's, which changes from block to block)."""
    k = model.robot.terminal_index
    regressor = model.robot.regressor(q, dq, ddq)                            # (N, n, 10 nb)
    rest = np.array(model.parameters, dtype=float)
    rest[k] = 0.0
    joint = model.joint_torque(q, dq, ddq)
    predicted = regressor @ rest.reshape(-1) + joint
    if model.residual is not None and not model.residual.needs("deflection"):
        whole = regressor @ np.asarray(model.parameters, dtype=float).reshape(-1) + joint
        predicted = predicted + model.residual.predict_for(model.joint_names, q, dq, None, whole)
    return regressor[:, :, 10 * k:10 * k + 10], np.asarray(tau, dtype=float) - predicted


def _products(model: LiveModel, config: PayloadTrackingConfig, q, dq, ddq, tau):
    """Per sample and joint, the equations in use only (as _BLOCK_SUMS): Phi_j^T Phi_j
    (N, n, 10, 10), Phi_j^T y_j (N, n, 10), y_j^2 (N, n), 1 (N, n), y_j (N, n), Phi_j (N, n, 10)."""
    phi, y = terminal_measurement(model, q, dq, ddq, tau)
    used = (np.abs(dq) >= config.rest_velocity).astype(float)
    masked = phi * used[:, :, None]
    return (np.einsum("sji,sjk->sjik", masked, phi), masked * y[:, :, None], used * y * y, used, used * y, masked)


# --- the estimator, at each block's end --------------------------------------------------------

def _end_block(model: LiveModel, config: PayloadTrackingConfig, state: PayloadState, time: float):
    """Close the open block at ``time`` s: test, then update or restart, then report. Returns
    (state, detected, changed)."""
    block, scale = config.block_samples, config.scale
    sums = {name: getattr(state, name) for name in _BLOCK_SUMS}
    state = replace(state, **_open_block(model.n_joints))

    def whitened(weight):
        """The block as one observation (its samples' mean), in scaled parameters, each joint's
        equations weighted by ``weight`` (n,)."""
        information = np.einsum("j,jik->ik", weight, sums["block_information"])
        return (scale[:, None] * information * scale[None, :] / block,
                scale * (weight @ sums["block_score"]) / block)
    information, score = whitened(1.0 / (state.variance * _inflation(state.correlation)))
    plain_information, plain_score = whitened(1.0 / state.variance)
    x = state.estimate / scale
    covariance = np.linalg.inv(state.information)
    window = _push(state, information, score, plain_information, plain_score, float(sums["block_rows"].sum()) / block,
                   x, covariance, time)
    ratio, size = _window_test(config, window, max(0, len(window["window_time"]) - config.window_blocks))
    detected = ratio > 1.0 and size >= config.min_change
    if detected:
        state = _restart(model, config, state, window, _onset(config, window), time)
    else:
        forgetting = np.exp(-block / (config.rate_hz * config.forgetting_time_s))
        r = _cap(_forget(state.information, covariance, information, forgetting) + information, config)
        x = x + np.linalg.solve(r, score - information @ x)
        theta, rows = x * scale, sums["block_rows"]
        window["window_residual"][-1] = _joint_residuals(sums, theta)
        window["window_joint_rows"][-1] = rows
        with np.errstate(invalid="ignore", divide="ignore"):
            window["window_mean"][-1] = np.where(rows > 0, (sums["block_sum"] - sums["block_regressor"] @ theta) / rows,
                                                 np.nan)
        evicted, window = _evict(config, window)
        if evicted is not None:
            state = _learn_residual(model, config, state, evicted, 1.0 - forgetting)
        state = replace(state, estimate=theta, information=0.5 * (r + r.T), **window)
    state = replace(state, statistic=ratio, change_size=size)
    return _report(model, config, state, detected)


def _joint_residuals(sums: dict, theta) -> np.ndarray:
    """(n,) N m^2 sum over a block's samples of each joint's squared residual y_j - Phi_j theta,
    from the block's per-joint sums."""
    value = (sums["block_square"] - 2.0 * sums["block_score"] @ theta
             + np.einsum("i,jik,k->j", theta, sums["block_information"], theta))
    return np.maximum(value, 0.0)


def _inflation(correlation: np.ndarray) -> np.ndarray:
    """(n,) how many blocks carry one block's worth of information, from the lag-one
    correlation rho of successive block-mean residuals: (1 + rho) / (1 - rho), as for a
    first-order autoregressive sequence (rho taken in [0, MAX_CORRELATION])."""
    weight, square, product = correlation
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(square > 0, product / np.where(square > 0, square, 1.0), 0.0)
    rho = np.clip(rho, 0.0, MAX_CORRELATION)
    return (1.0 + rho) / (1.0 - rho)


def _learn_residual(model, config, state: PayloadState, evicted, amount: float) -> PayloadState:
    """The residual's variances (n,) N m^2 and correlation updated by a block leaving the test
    window: only blocks the test has passed count, so a change the test is about to catch does
    not inflate them. Each joint's variance moves ``amount`` towards the block's mean square
    residual, in proportion to the share of the block's samples it was in use; the correlation's
    sums decay by 1 - ``amount`` and take the block in with that share (their ratio is the
    average over about a forgetting time, unbiased from the first block on)."""
    residual, rows, mean = evicted
    share = amount * rows / config.block_samples
    with np.errstate(invalid="ignore", divide="ignore"):
        square = np.where(rows > 0, residual / np.where(rows > 0, rows, 1.0), state.variance)
    start = torque_std(model, config) ** 2
    variance = np.clip(state.variance + share * (square - state.variance), start * _VARIANCE_RANGE[0],
                       start * _VARIANCE_RANGE[1])
    pair = np.isfinite(mean) & np.isfinite(state.last_mean)
    weight = np.where(pair, share, 0.0)
    decay = np.where(pair, 1.0 - amount, 1.0)
    update = np.stack([weight, weight * np.where(pair, mean * mean, 0.0),
                       weight * np.where(pair, mean * state.last_mean, 0.0)])
    return replace(state, variance=variance, correlation=decay * state.correlation + update, last_mean=mean)


def _forget(information, covariance, block_information, forgetting: float) -> np.ndarray:
    """R forgotten in the directions the block refreshes: R <- D R D with
    D = I - (1 - sqrt(forgetting)) C C^T, C the block's eigenvectors c whose eigenvalue mu would,
    over a forgetting time, replace what R knows about c^T theta: mu >= (1 - forgetting) / c^T P c.
    In covariance: P_CC grows by 1 / forgetting, the correlations of span C with the rest by
    1 / sqrt(forgetting), the rest's covariance stays as it was. D is invertible, so R stays
    positive definite; scaling rather than subtracting the information held about C^T theta
    touches what a C tilted a little by noise shares with the unexcited directions only to
    second order in the tilt; and a direction the data cannot refresh (a weak glimpse of a
    well-known one) is not forgotten at all."""
    mu, vectors = np.linalg.eigh(0.5 * (block_information + block_information.T))
    held = 1.0 / np.einsum("ji,jk,ki->i", vectors, covariance, vectors)
    directions = vectors[:, mu >= (1.0 - forgetting) * held]
    if directions.shape[1] == 0:
        return information
    scaling = np.eye(len(information)) - (1.0 - np.sqrt(forgetting)) * directions @ directions.T
    return scaling @ information @ scaling


def _cap(information, config) -> np.ndarray:
    """R with its eigenvalues at most MAX_INFORMATION_RATIO^2 times the identified prior's: no
    direction is believed known better than a tenth of the identified body's standard deviation
    (keeps the covariance bounded below where data keep coming in faster than forgetting takes
    them out)."""
    limit = (MAX_INFORMATION_RATIO * config.payload_mass_scale / config.identified_mass_std) ** 2
    values, vectors = np.linalg.eigh(0.5 * (information + information.T))
    if values[-1] <= limit:
        return information
    return (vectors * np.minimum(values, limit)) @ vectors.T


# --- what a batch gave -------------------------------------------------------------------------

def _step_of(config, state: PayloadState, detected: bool, changed: bool, report_time, statistic: float,
             size: float) -> PayloadStep:
    covariance = _covariance_si(config, state)
    return PayloadStep(estimate=state.estimate.copy(), std=np.sqrt(np.maximum(np.diag(covariance), 0.0)),
                       converged=_converged(config, state.estimate, covariance), changed=changed,
                       payload=state.published.copy(), payload_std=state.published_std.copy(), detected=detected,
                       report_time=report_time, phase=state.phase, statistic=statistic, change_size=size)
