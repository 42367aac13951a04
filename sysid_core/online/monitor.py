"""The identified model watching the arm while it runs: predicted torque, external torque,
contact and drift, batch after batch of joint samples (a driver's joint states, t, q, dq and
the measured joint torque tau).

* ``predicted``: the model's torque (LiveModel.torque) at the causally low-passed state: q and
  dq through the StreamFilter at ``cutoff_hz``, ddq the backward difference of the filtered
  velocity. The measured torque goes through the same filter, so both carry the same delay;
  the running RMSE compares them.
* ``external``: the generalized-momentum observer's estimate of the torque the environment
  applies at the joints (``observer``), on the raw samples: the external torque through a
  first-order low-pass of bandwidth K.
* ``contact``: raised when abs(external_j) leaves the band contact_k s_j on any joint for
  ``contact_samples`` samples in a row, cleared when every joint is back within
  ``contact_release`` of its band. s_j is what the estimate spreads by without contact,
  sqrt(sigma_j^2 + (g_j sigma_p,j)^2): sigma_j the model's error (its validation RMSE), which
  the observer passes through its filter; sigma_p,j the white-noise level of the momentum
  p = M(q) dq (the velocity's noise through M), which reaches the estimate with the gain g_j,
  about K (observer.noise_gain). sigma_p is estimated from the stream, on blocks of
  ``noise_block_samples`` second differences of p (observer.white_noise_level; it follows the
  pose, since M does), unless ``momentum_noise`` gives it; until the first block is complete
  (0.2 s at 1 kHz) contact is not judged. Without the noise term a model as good as its
  measurement makes the band narrower than the observer's own noise.
* drift: the running RMSE per joint of (filtered measured torque - predicted), an exponentially
  weighted mean square of time constant ``drift_window_s`` (memory: one number per joint); a
  joint drifts when its RMSE has exceeded drift_factor sigma_j without a break for
  ``drift_time_s`` (on the stamps); the model ``holds`` while no joint drifts. A contact is an
  error of the model too: a long or hard one raises the RMSE like a payload would, so read
  ``holds`` together with ``contact``; an unknown payload raises both.

Defaults, and why. The figures (``bench/model_monitor.py --defaults``) are from the
OpenArm-class 7-DOF arm simulated in MuJoCo at 1 kHz (armature 30 % above its model file's, a
Stribeck friction excess of half the Coulomb level the file does not have, the project's default
measurement noise), tracked by PD + feed-forward, identified from a 10 s multisine (validated on
5 s), then monitored on five other 30 s multisines of up to 1.5 rad/s:

* observer_gain K = 20 1/s (3.2 Hz, time constant 50 ms). The estimate's noise grows as K
  (g sigma_p): the noise term made s_j 1.1-1.9 times sigma_j on joints 1-4 at K = 20, 1.4-4.1
  times at K = 50. Model error faster than the excitation (friction at velocity reversals)
  passes more at higher K while sigma, validated on data low-passed at 10 Hz, counts little of
  it: on the wrist joints, whose noise term is negligible, the estimate reached up to 4.0 s_j
  at K = 20 and 5.8 s_j at K = 50. A collision still shows at once: the momentum an impact
  removes enters the estimate in the sample it happens (flagged 3-4 ms after the first MuJoCo
  contact, with joint 1 at 0.28-1.1 rad/s).
* contact_k = 6 with contact_samples = 3. Without contact the estimate stayed within
  3.5-4.4 s_j for three samples in a row (4.4-5.7 s_j for single samples) over the five runs at
  K = 20: a good identification's worst moments are 4-5 times its RMSE, and 6 leaves a third
  more. The white part of the estimate (the momentum's noise) changes every sample, the model
  error's over about 1 / K: three samples in a row turn a single-sample exceedance probability
  P of the white part into about P^3 for 2 ms of delay, a tenth of a 20 ms detection budget.
  contact_release = 0.5: hysteresis against chatter when the estimate hovers at the band.
* cutoff_hz = 10 Hz, order 2 (StreamFilter: about 14 ms of delay): the identification's own
  default cutoff. sigma_j was measured on data low-passed at 10 Hz, and the running RMSE is
  comparable with it only on data low-passed alike: at 20 Hz the acceleration's noise alone
  lifted a right model's running RMSE to 5-5.8 sigma_j, at 10 Hz it stayed under 3.6 sigma_j
  (40 s of other motion at 1 kHz, 2 s and 10 s windows).
* drift_window_s = 10 s, drift_factor = 5, drift_time_s = 1 s. "The model no longer holds" is
  about the arm's state (a payload, wear), not a moment: over 40 s of other motion a right model
  read 1.2-2.6 sigma_j with a 10 s window and up to 3.5 sigma_j with a 2 s one, in its fast
  stretches. With 0.1 kg added under the flange (2 % of the arm) joints 1-4 never read below
  8.8 sigma_j (17 with 0.2 kg, 44 with 0.5 kg): 5 separates the two with room both ways, and
  ``holds`` fell 2.7, 1.8 and 1.1 s into those runs. drift_time_s = 1 s: a crossing that does
  not last is no drift.
* max_gap_s = 0.05 s: several time constants of the low-pass; after a longer silence its state
  says little about the next sample, and the trapezoid over the gap little about the torque in
  it. After a (re)start the running RMSE waits until the filter's step response has settled
  within 2 % (settle_s, 94 ms at 10 Hz): the filtered acceleration starts at 0, not at the arm's.

Stamps: a sample whose stamp is not after the last accepted one (repeated, or going back), or
that holds a non-finite value, is dropped: the monitor's state does not change and the sample's
outputs repeat the previous sample's (``MonitorStep.dropped`` marks it). A sample more than
``max_gap_s`` after the previous one restarts the stream there (``MonitorStep.restarted``): the
filters start from it as from the first sample (no transient), its acceleration is 0, the
observer's estimate and the running RMSE are held across the gap (the step over the gap is not
integrated), and the drift timers keep running on the stamps. The low-pass is designed for
``rate_hz``; samples at another rate shift its cutoff in proportion.

Cost: one regressor call of 8N rows per batch (the prediction, the observer's C dq + g, and the
momentum's 6N rows: observer.momentum_rows) and a per-sample loop of a few NumPy operations
(the observer's and the mean square's recursion, the contact state): evaluate what arrived
since the last call together (bench/model_monitor.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import signal

from .causal_filter import StreamFilter, backward_difference
from .live_model import LiveModel
from .observer import (linear_recursion, momentum, momentum_rows, momentum_terms, noise_gain, observer_coefficients,
                       white_noise_level)

# the settling band of the low-pass's step response (MonitorConfig.settle_s)
SETTLE_TOLERANCE = 0.02


@dataclass(frozen=True, eq=False)
class MonitorConfig:
    """The monitor's settings (the module docstring gives the defaults' reasons).

    ``rate_hz`` Hz the stream's nominal sample rate (the low-pass's design); ``observer_gain``
    K 1/s of the momentum observer, scalar or (n,); ``contact_k``: contact is raised when
    abs(external_j) > contact_k s_j on any joint for ``contact_samples`` samples in a row (s_j:
    sigma_j widened by the observer's own noise), and cleared when every abs(external_j) <
    ``contact_release`` contact_k s_j; ``cutoff_hz`` Hz and ``filter_order`` of the causal
    Butterworth low-pass of the prediction's inputs and of the measured torque;
    ``drift_window_s`` s the time constant of the running (exponential) mean square; a joint
    drifts while its running RMSE > ``drift_factor`` sigma_j has lasted ``drift_time_s`` s;
    ``sigma`` (n,) N m overrides the model's validation RMSE per joint (inf switches a joint's
    contact and drift off); ``max_gap_s`` s the interval beyond which the stream restarts;
    ``momentum_noise`` N m s (scalar or (n,)) the white-noise level of p = M(q) dq, None to
    estimate it on blocks of ``noise_block_samples`` samples."""

    rate_hz: float
    observer_gain: object = 20.0
    contact_k: float = 6.0
    cutoff_hz: float = 10.0
    drift_window_s: float = 10.0
    drift_factor: float = 5.0
    drift_time_s: float = 1.0
    sigma: np.ndarray | None = None
    contact_samples: int = 3
    contact_release: float = 0.5
    filter_order: int = 2
    max_gap_s: float = 0.05
    momentum_noise: np.ndarray | None = None
    noise_block_samples: int = 200

    def __post_init__(self):
        for name in ("rate_hz", "contact_k", "drift_window_s", "drift_factor", "max_gap_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float, np.floating, np.integer)) and np.isfinite(value) and value > 0):
                raise ValueError(f"MonitorConfig.{name} must be a finite number > 0, got {value!r}")
        if not (np.isfinite(self.drift_time_s) and self.drift_time_s >= 0):
            raise ValueError(f"MonitorConfig.drift_time_s must be a finite number >= 0 s, got {self.drift_time_s!r}")
        gain = np.asarray(self.observer_gain, dtype=float)
        if gain.ndim > 1 or not np.all(np.isfinite(gain)) or np.any(gain <= 0):
            raise ValueError(f"MonitorConfig.observer_gain must be a finite number > 0 1/s or (n,) of them, got "
                             f"{self.observer_gain!r}")
        if not 0 < self.contact_release <= 1:
            raise ValueError(f"MonitorConfig.contact_release must be in (0, 1], got {self.contact_release!r}")
        for name in ("contact_samples", "noise_block_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"MonitorConfig.{name} must be an int >= 1, got {value!r}")
        if self.momentum_noise is not None:
            noise = np.asarray(self.momentum_noise, dtype=float)
            if noise.ndim > 1 or not np.all(np.isfinite(noise)) or np.any(noise < 0):
                raise ValueError(f"MonitorConfig.momentum_noise must be finite numbers >= 0 N m s, got "
                                 f"{self.momentum_noise!r}")
        StreamFilter(self.rate_hz, self.cutoff_hz, self.filter_order)  # raises for a cutoff it cannot make

    @property
    def stream_filter(self) -> StreamFilter:
        return StreamFilter(self.rate_hz, self.cutoff_hz, self.filter_order)

    @property
    def settle_s(self) -> float:
        """s after a (re)start during which the running RMSE takes no sample: the low-pass's
        step response settling within SETTLE_TOLERANCE (_settling_time)."""
        return _settling_time(float(self.rate_hz), float(self.cutoff_hz), int(self.filter_order))


@dataclass(frozen=True, eq=False)
class MonitorState:
    """What the monitor carries from one batch to the next (n joints).

    ``t`` s the last accepted stamp; ``filter`` the low-pass's state of [q, dq, tau] (None: it
    passes through); ``p`` N m s and ``beta`` N m (n,) the last sample's momentum and
    momentum-rate terms (observer.momentum_terms), ``p_before`` (n,) the momentum of the sample
    before it (NaN across a restart); ``external`` (n,) N m the observer's estimate;
    ``mean_square`` (n,) N m^2 the running mean square of the filtered torque less the
    prediction; ``contact``, ``above`` the contact state and how many samples in a row the band
    was left; ``drift_since`` (n,) s the stamp each joint's RMSE went beyond its band (NaN while
    within); ``sigma`` (n,) N m the model's per-joint figure; ``momentum_noise`` (n,) N m s the
    white-noise level of p in use (NaN before the first estimate) and ``noise_buffer`` (m, n)
    the second differences of p gathered towards the next; ``q``, ``dq``, ``ddq``,
    ``predicted``, ``measured``, ``band`` (n,) the last sample's filtered state, prediction,
    filtered measured torque and contact band (a dropped sample repeats them); ``counts_from`` s
    the stamp from which the running RMSE takes samples again (the filters settled after a
    (re)start: MonitorConfig.settle_s)."""

    t: float
    filter: np.ndarray | None
    p: np.ndarray
    beta: np.ndarray
    p_before: np.ndarray
    external: np.ndarray
    mean_square: np.ndarray
    contact: bool
    above: int
    drift_since: np.ndarray
    sigma: np.ndarray
    momentum_noise: np.ndarray
    noise_buffer: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    predicted: np.ndarray
    measured: np.ndarray
    band: np.ndarray
    counts_from: float

    @property
    def rmse(self) -> np.ndarray:
        return np.sqrt(self.mean_square)


@dataclass(frozen=True, eq=False)
class MonitorStep:
    """What one batch of N samples gave (n joints).

    ``predicted`` (N, n) N m the model's torque at the filtered state (q, dq, ddq); ``external``
    (N, n) N m the momentum observer's external torque estimate (the torque the environment
    applies at the joints, ~J^T F); ``contact`` (N,) bool the contact state after each sample;
    ``rmse`` (n,) N m the running RMSE of (filtered measured torque - predicted) at the batch
    end; ``holds`` False while any joint drifts; ``drifting`` (n,) bool the joints whose RMSE
    has been beyond drift_factor sigma_j for drift_time_s; ``q``, ``dq``, ``ddq`` (N, n) rad,
    rad/s, rad/s^2 the filtered state; ``measured`` (N, n) N m the filtered measured torque;
    ``band`` (N, n) N m the contact band each sample was judged with (NaN before the observer's
    noise is known); ``dropped`` (N,) bool samples ignored (stamp not after the last, or
    non-finite); ``restarted`` (N,) bool samples the stream restarted from after a gap."""

    predicted: np.ndarray
    external: np.ndarray
    contact: np.ndarray
    rmse: np.ndarray
    holds: bool
    drifting: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    measured: np.ndarray = field(default=None)
    band: np.ndarray = field(default=None)
    dropped: np.ndarray = field(default=None)
    restarted: np.ndarray = field(default=None)


def monitor_sigma(model: LiveModel, config: MonitorConfig) -> np.ndarray:
    """The per-joint figure (n,) N m the contact band and the drift are scaled by: config.sigma,
    else the model's validation RMSE. ValueError when there is none (a nominal model needs
    config.sigma) or when one is not > 0."""
    n = model.n_joints
    sigma = config.sigma if config.sigma is not None else model.sigma
    if sigma is None:
        raise ValueError(f"model {model.source or '(in memory)'} has no validation RMSE per joint (sigma), and "
                         "MonitorConfig.sigma is not given: contact and drift cannot be judged without it")
    sigma = np.asarray(sigma, dtype=float)
    if sigma.shape != (n,) or np.any(np.isnan(sigma)) or np.any(sigma <= 0):
        raise ValueError(f"sigma must be (n,) = ({n},) numbers > 0 N m (inf: joint not watched), got {sigma.tolist()}")
    return sigma


def _gain(config: MonitorConfig, n: int) -> np.ndarray:
    gain = np.asarray(config.observer_gain, dtype=float)
    if gain.ndim == 1 and gain.shape != (n,):
        raise ValueError(f"observer_gain has {gain.shape[0]} values for {n} joints")
    return np.broadcast_to(gain, (n,)).copy()


def _row(x, n: int, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite, got {x.tolist()}")
    return x


def monitor_start(model: LiveModel, config: MonitorConfig, t0: float, q0, dq0, tau0) -> MonitorState:
    """The monitor's state at the first sample: stamp t0 s, q0 rad, dq0 rad/s, tau0 N m (n,)
    each, the measured joint torque. Filters start as if the arm had been at this sample
    forever; the observer's estimate starts at 0 (whatever acts on the arm now is its
    reference), the running RMSE at 0. ValueError without sigma (``monitor_sigma``) or for a
    setting of the wrong size."""
    n = model.n_joints
    sigma = monitor_sigma(model, config)
    _gain(config, n)
    if not np.isfinite(t0):
        raise ValueError(f"t0 must be finite, got {t0!r}")
    q0, dq0, tau0 = _row(q0, n, "q0"), _row(dq0, n, "dq0"), _row(tau0, n, "tau0")
    noise = np.full(n, np.nan)
    if config.momentum_noise is not None:
        given = np.asarray(config.momentum_noise, dtype=float)
        if given.ndim == 1 and given.shape != (n,):
            raise ValueError(f"momentum_noise has {given.shape[0]} values for {n} joints")
        noise = np.broadcast_to(given, (n,)).copy()
    zero = np.zeros(n)
    bias = model.torque(q0[None], dq0[None], zero[None])
    p, beta = momentum_terms(model, q0[None], dq0[None], tau0[None], bias)
    band = config.contact_k * _spread(config, sigma, noise[None])[0]
    return MonitorState(t=float(t0), filter=config.stream_filter.start(np.concatenate([q0, dq0, tau0])),
                        p=p[0], beta=beta[0], p_before=np.full(n, np.nan), external=zero, mean_square=zero,
                        contact=False, above=0, drift_since=np.full(n, np.nan), sigma=sigma, momentum_noise=noise,
                        noise_buffer=np.zeros((0, n)), q=q0.copy(), dq=dq0.copy(), ddq=zero, predicted=bias[0],
                        measured=tau0.copy(), band=band, counts_from=float(t0) + config.settle_s)


def _spread(config: MonitorConfig, sigma: np.ndarray, momentum_noise: np.ndarray) -> np.ndarray:
    """What the observer's estimate spreads by without contact (M, n) N m: the model's error
    sigma (n,) and the noise of p ``momentum_noise`` (M, n) N m s as the observer passes it."""
    gain = noise_gain(_gain(config, sigma.shape[0]), config.rate_hz)
    return np.sqrt(sigma ** 2 + (gain * momentum_noise) ** 2)


def _momentum_noise(config: MonitorConfig, state, p: np.ndarray, restart: np.ndarray) -> tuple:
    """The white-noise level of p in use at each of the M samples (M, n) N m s, and the
    (level, buffer) to carry: config.momentum_noise, else the level of each completed block of
    noise_block_samples second differences of p (observer.white_noise_level), in use from the
    sample that completes it on. A second difference across a restart is not used."""
    num, n = p.shape
    if config.momentum_noise is not None:
        return np.broadcast_to(state.momentum_noise, (num, n)), state.momentum_noise, state.noise_buffer
    stacked = np.vstack([state.p_before[None], state.p[None], p])
    stacked[1:-1][restart] = np.nan  # the momentum before a gap is no neighbour of the one after it
    second = stacked[2:] - 2.0 * stacked[1:-1] + stacked[:-2]
    rows = np.flatnonzero(np.all(np.isfinite(second), axis=1))
    level, buffer = state.momentum_noise, state.noise_buffer
    out = np.empty((num, n))
    block, start, used = int(config.noise_block_samples), 0, 0
    while rows.size - used >= block - buffer.shape[0]:
        take = block - buffer.shape[0]
        done = rows[used + take - 1]
        out[start:done] = level
        level = white_noise_level(np.vstack([buffer, second[rows[used:used + take]]]))
        buffer, used, start = np.zeros((0, n)), used + take, done
    out[start:] = level
    return out, level, np.vstack([buffer, second[rows[used:]]])


@lru_cache(maxsize=16)
def _settling_time(rate_hz: float, cutoff_hz: float, order: int) -> float:
    """The time its step response takes to stay within SETTLE_TOLERANCE of 1 (0 when it passes
    through). A (re)start begins the filters as if the arm had held the first sample forever: the
    filtered acceleration starts at 0 and reaches the arm's as the step response does, and the
    prediction misses M ddq meanwhile (at 1 kHz, 20 Hz: about 20 times the validation RMSE over
    the first 30 ms), which the running RMSE must not count as the model's error."""
    sos = StreamFilter(rate_hz, cutoff_hz, order).sos
    if sos is None:
        return 0.0
    step = signal.sosfilt(sos, np.ones(int(np.ceil(20.0 * rate_hz / cutoff_hz))))
    outside = np.flatnonzero(np.abs(step - 1.0) > SETTLE_TOLERANCE)
    return float(outside[-1] + 1) / rate_hz if outside.size else 0.0


def _filtered(config: MonitorConfig, state, x: np.ndarray, restart: np.ndarray) -> tuple:
    """The low-passed batch x (M, k) from the filter ``state`` (StreamFilter.apply's), started
    again from each sample that ``restart`` marks; (filtered (M, k), the new state)."""
    stream = config.stream_filter
    if stream.sos is None:
        return x.copy(), None
    bounds = [0, *np.flatnonzero(restart).tolist(), x.shape[0]]
    out = np.empty_like(x)
    for begin, end in zip(bounds[:-1], bounds[1:]):
        if begin == end:
            continue
        if restart[begin]:
            state = stream.start(x[begin])
        out[begin:end], state = stream.apply(state, x[begin:end])
    return out, state


def _contact(state: MonitorState, config: MonitorConfig, external: np.ndarray, band: np.ndarray) -> tuple:
    """The contact flag after each of M samples (M,) bool from the estimate ``external`` and the
    band (M, n) N m, and (contact, samples in a row above the band) at the end."""
    magnitude = np.abs(external)
    above = np.any(magnitude > band, axis=1).tolist()
    below = np.all(magnitude < config.contact_release * band, axis=1).tolist()
    contact, count, needed = state.contact, state.above, int(config.contact_samples)
    out = np.empty(len(above), dtype=bool)
    for k, (up, down) in enumerate(zip(above, below)):
        count = count + 1 if up else 0
        contact = not down if contact else count >= needed
        out[k] = contact
    return out, contact, count


def _drift(state: MonitorState, config: MonitorConfig, t: np.ndarray, rmse: np.ndarray) -> np.ndarray:
    """Each joint's stamp (n,) s since which its running RMSE ``rmse`` (M, n) (at stamps t (M,))
    has been beyond drift_factor sigma without a break, NaN where it is within at the end."""
    over = rmse > config.drift_factor * state.sigma
    since = state.drift_since.copy()
    for j in range(over.shape[1]):
        column = over[:, j]
        if not column[-1]:
            since[j] = np.nan
            continue
        within = np.flatnonzero(~column)
        if within.size:
            since[j] = t[within[-1] + 1]
        elif np.isnan(since[j]):
            since[j] = t[0]
    return since


def monitor_step(model: LiveModel, config: MonitorConfig, state: MonitorState, t, q, dq, tau, deflection=None
                 ) -> tuple[MonitorState, MonitorStep]:
    """Run the batch t (N,) s (increasing stamps), q (N, n) rad, dq (N, n) rad/s, tau (N, n) N m
    (the measured joint torque) through the monitor; (the new state, what it gave). Any split of
    a stream into batches gives the same outputs (to rounding). See the module docstring for
    stamps that repeat, go back or jump. ``deflection`` (N, n) rad: a double-encoder arm's
    measured q less the motor side, for a residual model that takes it (without it such a model
    is left out); taken as measured, not filtered (it follows the torque, slowly)."""
    n = model.n_joints
    t = np.atleast_1d(np.asarray(t, dtype=float))
    q, dq, tau = (np.asarray(a, dtype=float).reshape(-1, n) if np.size(a) else np.zeros((0, n)) for a in (q, dq, tau))
    num = t.shape[0]
    if t.ndim != 1 or any(a.shape != (num, n) for a in (q, dq, tau)):
        raise ValueError(f"t must be (N,) and q, dq, tau (N, {n}); got {t.shape}, {q.shape}, {dq.shape}, {tau.shape}")
    finite = np.isfinite(t) & np.all(np.isfinite(q) & np.isfinite(dq) & np.isfinite(tau), axis=1)
    latest = np.maximum.accumulate(np.concatenate([[state.t], np.where(finite, t, -np.inf)]))[:-1]
    accepted = finite & (t > latest)
    index = np.flatnonzero(accepted)
    restarted = np.zeros(num, dtype=bool)
    before, rows = state, {}
    if index.size:
        state, rows, restart = _advance(model, config, state, t[index], q[index], dq[index], tau[index],
                                        None if deflection is None else np.asarray(deflection, dtype=float)[index])
        restarted[index] = restart
    # each sample's row among the accepted ones' (-1: the state's before the batch)
    position = np.cumsum(accepted) - 1

    def spread(name):
        last = np.asarray(getattr(before, name))[None]
        return (np.concatenate([last, rows[name]]) if rows else last)[position + 1]

    drifting = ~np.isnan(state.drift_since) & (state.t - state.drift_since >= config.drift_time_s)
    step = MonitorStep(predicted=spread("predicted"), external=spread("external"), contact=spread("contact"),
                       rmse=state.rmse, holds=not bool(np.any(drifting)), drifting=drifting, q=spread("q"),
                       dq=spread("dq"), ddq=spread("ddq"), measured=spread("measured"), band=spread("band"),
                       dropped=~accepted, restarted=restarted)
    return state, step


def _torques(model: LiveModel, q_f, dq_f, ddq_f, q, dq, deflection=None) -> tuple:
    """The prediction model.torque(q_f, dq_f, ddq_f), the observer's model.torque(q, dq, 0)
    (each (M, n) N m) and the momentum's rigid-body torques (6M, n) (observer.momentum_rows),
    from one regressor call: a call's fixed cost dominates a batch's. LiveModel.torque is
    Y theta + the joints' own terms; with a residual model, which takes more than the state,
    the two torques are its own call."""
    num = q.shape[0]
    zero = np.zeros_like(q)
    rows_q, rows_dq, rows_ddq = momentum_rows(q, dq)
    theta = model.parameters.reshape(-1)
    if model.residual is not None:
        torque = model.torque(np.vstack([q_f, q]), np.vstack([dq_f, dq]), np.vstack([ddq_f, zero]),
                              deflection=None if deflection is None else np.vstack([deflection, deflection]))
        return torque[:num], torque[num:], model.robot.regressor(rows_q, rows_dq, rows_ddq) @ theta
    rigid = model.robot.regressor(np.vstack([q_f, q, rows_q]), np.vstack([dq_f, dq, rows_dq]),
                                  np.vstack([ddq_f, zero, rows_ddq])) @ theta
    joint = model.joint_torque(np.vstack([q_f, q]), np.vstack([dq_f, dq]), np.vstack([ddq_f, zero]))
    return rigid[:num] + joint[:num], rigid[num:2 * num] + joint[num:], rigid[2 * num:]


def _advance(model: LiveModel, config: MonitorConfig, state: MonitorState, t, q, dq, tau, deflection=None
             ) -> tuple:
    """The accepted samples (M of them) through the filters, the model, the observer, the
    contact and drift logic: (the new state, {name: (M, ...) rows of MonitorStep's per-sample
    outputs}, restart (M,) bool)."""
    n = model.n_joints
    dt = np.diff(np.concatenate([[state.t], t]))
    restart = dt > config.max_gap_s
    filtered, filter_state = _filtered(config, state.filter, np.hstack([q, dq, tau]), restart)
    q_f, dq_f, tau_f = filtered[:, :n], filtered[:, n:2 * n], filtered[:, 2 * n:]
    ddq_f = backward_difference(state.dq, dq_f, dt)
    ddq_f[restart] = 0.0
    num = t.shape[0]
    predicted, bias, rigid = _torques(model, q_f, dq_f, ddq_f, q, dq, deflection)
    p, mdot_dq = momentum(model, dq, rigid)
    beta = tau + mdot_dq - bias
    decay, drive = observer_coefficients(state.p, state.beta, p, beta, dt, _gain(config, n), restart)
    # the running mean square: exponential, time constant drift_window_s, held across a gap
    keep = np.repeat(np.exp(-dt / config.drift_window_s)[:, None], n, axis=1)
    counts_from = np.full(num, state.counts_from)
    for k in np.flatnonzero(restart):
        counts_from[k:] = t[k] + config.settle_s
    keep[restart | (t < counts_from)] = 1.0  # and so no weight: the filters are still settling
    error = tau_f - predicted
    recursion = linear_recursion(np.concatenate([state.external, state.mean_square]),
                                 np.hstack([decay, keep]), np.hstack([drive, (1.0 - keep) * error ** 2]))
    external, mean_square = recursion[:, :n], recursion[:, n:]
    noise, level, buffer = _momentum_noise(config, state, p, restart)
    band = config.contact_k * _spread(config, state.sigma, noise)
    contact, now_contact, above = _contact(state, config, external, band)
    since = _drift(state, config, t, np.sqrt(mean_square))
    rows = {"predicted": predicted, "external": external, "contact": contact, "q": q_f, "dq": dq_f, "ddq": ddq_f,
            "measured": tau_f, "band": band}
    p_before = p[-2] if num > 1 else state.p
    if restart[-1]:
        p_before = np.full(n, np.nan)
    new = MonitorState(t=float(t[-1]), filter=filter_state, p=p[-1], beta=beta[-1], p_before=p_before,
                       external=external[-1], mean_square=mean_square[-1], contact=bool(now_contact),
                       above=int(above), drift_since=since, sigma=state.sigma, momentum_noise=level,
                       noise_buffer=buffer, q=q_f[-1], dq=dq_f[-1], ddq=ddq_f[-1], predicted=predicted[-1],
                       measured=tau_f[-1], band=band[-1], counts_from=float(counts_from[-1]))
    return new, rows, restart
