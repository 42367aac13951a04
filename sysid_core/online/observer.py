"""The torque the environment applies to the arm, from the joints' own measurements: the
generalized-momentum observer.

The arm obeys M(q) ddq + C(q, dq) dq + g(q) + f(dq) = tau + tau_ext, tau the joints' measured
torque and tau_ext the torque the environment applies at the joints (J^T F for a wrench F on
the arm). Its momentum p = M(q) dq changes as

    dp/dt = M ddq + Mdot dq = tau + tau_ext + C^T(q, dq) dq - g(q) - f(dq)

since Mdot = C + C^T (C from the Christoffel symbols). The observer

    r(t) = K (p(t) - p(0) - integral_0^t (tau + C^T dq - g - f + r) ds)

then obeys dr/dt = K (tau_ext - r): r is tau_ext through a first-order low-pass of bandwidth
K (1/s), with no acceleration anywhere. It runs on the raw q, dq, tau: it is its own filter.
Its cost is the velocity's noise, which reaches r through p with a gain of about K: r carries
white noise of about K times that of p (M(q) times the velocity's; ``noise_gain``).

C^T dq without Christoffel symbols: C^T dq = Mdot dq - C dq, and the model's torque at zero
acceleration is ``torque(q, dq, 0)`` = C dq + g + f + the joints' offset and spring (+ the
residual model's correction, evaluated at zero acceleration: it is part of what the model
expects the joints to need). So

    tau + C^T dq - g - f (- offset - spring) = tau + Mdot dq - torque(q, dq, 0),

with Mdot dq the derivative of M along dq: Mdot = sum_k dM/dq_k dq_k = d/ds M(q + s dq) at
s = 0, a central difference of M dq at q +- h u (u = dq / max|dq|, h = MOMENTUM_STEP rad) times
max|dq|, exact to O(h^2) (about 1e-10 relative, far below any torque measurement). The armature
is a constant diagonal of M: in p, not in Mdot.

Discretisation, stable for any K dt: between samples k-1 and k (dt s apart) dr/dt = K (y' - r)
with y' = (p_k - p_{k-1}) / dt - (beta_k + beta_{k-1}) / 2 (beta = tau + C^T dq - g - f, the
trapezoid rule; p's change is exact), held over the step, whose exact solution is
r_k = e^(-K dt) r_{k-1} + (1 - e^(-K dt)) y'. Everything but this recursion is evaluated for a
whole batch at once.
"""
from __future__ import annotations

import numpy as np

# Step (rad) of the central difference of M along the velocity: near the cube root of machine
# precision, where truncation (h^2) and rounding (eps / h) errors of a smooth M balance.
MOMENTUM_STEP = 1e-5


def momentum_rows(q, dq) -> tuple:
    """The regressor rows (positions, velocities, accelerations, each (6N, n)) whose rigid-body
    torques ``momentum`` needs for the samples q (N, n) rad, dq (N, n) rad/s: at q, q + h u and
    q - h u (u = dq / max|dq|), at rest, with the acceleration dq and with none."""
    q, dq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq))
    speed = np.max(np.abs(dq), axis=1, keepdims=True)
    step = MOMENTUM_STEP * np.divide(dq, speed, out=np.zeros_like(dq), where=speed > 0)
    at = np.concatenate([q, q + step, q - step])
    zero = np.zeros_like(at)
    return np.concatenate([at, at]), np.concatenate([zero, zero]), np.concatenate([dq, dq, dq, zero])


def momentum(model, dq, rigid) -> tuple[np.ndarray, np.ndarray]:
    """p = M(q) dq (N, n) N m s and Mdot dq (N, n) N m from ``rigid`` (6N, n) N m, the rigid
    bodies' torques Y theta of ``momentum_rows(q, dq)`` for the LiveModel ``model``.

    M(q) v is the torque for the acceleration v at rest less gravity's, Y(q, 0, v) theta -
    Y(q, 0, 0) theta, plus the armature's A v: what LiveModel.mass_matrix holds, as products
    with dq, at q and q +- h u; then (M(q + h u) - M(q - h u)) dq / (2 h) max|dq| = Mdot dq (the
    armature is constant)."""
    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    num = dq.shape[0]
    rigid = np.asarray(rigid, dtype=float)
    inertial = rigid[:3 * num] - rigid[3 * num:]  # M(.) dq of the rigid bodies: gravity cancels
    speed = np.max(np.abs(dq), axis=1)
    return (inertial[:num] + model.armature * dq,
            (inertial[num:2 * num] - inertial[2 * num:]) * (speed / (2 * MOMENTUM_STEP))[:, None])


def momentum_terms(model, q, dq, tau, bias=None) -> tuple[np.ndarray, np.ndarray]:
    """The momentum p = M(q) dq (N, n) N m s and beta = tau + C^T(q, dq) dq - g(q) - f(dq)
    (N, n) N m (offset and spring counted with g) of the samples q (N, n) rad, dq (N, n) rad/s,
    tau (N, n) N m, for the LiveModel ``model``: one regressor call of 6N rows
    (``momentum_rows``, a third of a mass-matrix call's cost) and, unless ``bias`` (N, n) N m
    gives ``model.torque(q, dq, 0)``, one torque call."""
    q, dq, tau = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, tau))
    rigid = model.robot.regressor(*momentum_rows(q, dq)) @ model.parameters.reshape(-1)
    p, mdot_dq = momentum(model, dq, rigid)
    if bias is None:
        bias = model.torque(q, dq, np.zeros_like(q))
    return p, tau + mdot_dq - np.asarray(bias, dtype=float)


def observer_coefficients(p0, beta0, p, beta, dt, gain, restart=None) -> tuple[np.ndarray, np.ndarray]:
    """The observer's recursion r_k = decay_k r_{k-1} + drive_k as (decay, drive) (N, n), from
    p0, beta0 (n,) the momentum and beta (``momentum_terms``) of the sample before the batch,
    p, beta (N, n) the batch's, dt (N,) s > 0 the intervals, gain K 1/s (scalar or (n,)).
    ``restart`` (N,) bool: samples the momentum's integration starts again from (after a gap
    in the stream): r is held there (decay 1, drive 0), the step into them not integrated."""
    p, beta = np.asarray(p, dtype=float), np.asarray(beta, dtype=float)
    dt = np.asarray(dt, dtype=float)[:, None]
    previous_p = np.vstack([np.asarray(p0, dtype=float)[None], p[:-1]])
    previous_beta = np.vstack([np.asarray(beta0, dtype=float)[None], beta[:-1]])
    decay = np.broadcast_to(np.exp(-np.asarray(gain, dtype=float) * dt), p.shape)
    drive = (1.0 - decay) * ((p - previous_p) / dt - 0.5 * (beta + previous_beta))
    if restart is not None and np.any(restart):
        held = np.asarray(restart, dtype=bool)[:, None]
        decay, drive = np.where(held, 1.0, decay), np.where(held, 0.0, drive)
    return decay, drive


def observer_recursion(r0, p0, beta0, p, beta, dt, gain, restart=None) -> np.ndarray:
    """The observer's estimate r (N, n) N m after each sample, from r0 (n,) N m the estimate at
    the sample before the batch; the other arguments as ``observer_coefficients``'."""
    return linear_recursion(np.asarray(r0, dtype=float), *observer_coefficients(p0, beta0, p, beta, dt, gain, restart))


def linear_recursion(x0, decay, drive) -> np.ndarray:
    """x_k = decay_k x_{k-1} + drive_k for k = 0..N-1 from x0 (k,): (N, k) from decay and drive
    (N, k). Sample by sample (with the contact state, the monitor's only sequential part): a few
    microseconds per sample."""
    out = np.empty_like(drive)
    x = x0
    for k in range(drive.shape[0]):
        x = decay[k] * x + drive[k]
        out[k] = x
    return out


# The largest share of a block's second differences left out of its noise level: an impact or
# a contact's onset moves p by far more than noise for a few samples; 1 % of a block is more
# than such events take, and leaves the level of Gaussian noise 4 % low (corrected below).
NOISE_TRIM = 0.01
# RMS of a unit Gaussian kept within its (1 - NOISE_TRIM) two-sided quantile (2.576):
# sqrt(1 - 2 z phi(z) / (1 - NOISE_TRIM)).
_TRIMMED_RMS = 0.96166


def white_noise_level(second_differences) -> np.ndarray:
    """The white-noise level (k,) of a signal from its second differences x_i - 2 x_(i-1) +
    x_(i-2) (B, k) over a stretch (B >= 1): their RMS with the largest NOISE_TRIM share of each
    column left out, over sqrt(6) (a second difference of white noise has 6 times its variance)
    and the trimmed RMS of a Gaussian. A smooth motion's second differences at a driver's
    sample rate are far below any sensor's noise; a quantised signal's steps count as its
    noise (a median-based level would see 0 where most steps are 0)."""
    values = np.sort(np.abs(np.asarray(second_differences, dtype=float)), axis=0)
    kept = values[:max(1, values.shape[0] - int(np.ceil(NOISE_TRIM * values.shape[0])))]
    return np.sqrt(np.mean(kept ** 2, axis=0) / 6.0) / _TRIMMED_RMS


def noise_gain(gain, rate_hz: float) -> np.ndarray:
    """The standard deviation of the observer's estimate r per unit of white noise on p, at
    samples 1 / rate_hz s apart: r picks up c (delta_k - delta_(k-1)) through the recursion
    (c = (1 - e^(-K dt)) / dt), of variance c^2 2 / (1 + e^(-K dt)) per unit variance of
    delta: about K. ``gain`` K 1/s, scalar or (n,)."""
    decay = np.exp(-np.asarray(gain, dtype=float) / rate_hz)
    return (1.0 - decay) * rate_hz * np.sqrt(2.0 / (1.0 + decay))
