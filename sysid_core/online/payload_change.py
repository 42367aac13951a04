"""The payload tracker's change test and its report, run by ``payload_tracking`` at each
block's end: whether the terminal body changed, where in the test window the change began, and
the new body once it is known well enough to publish.

The symbols are ``payload_tracking``'s: theta (10,) the terminal body's standard parameters, g
(10,) and J (10, 10) a block's score and information in the change prior's scaled parameters, P
the estimate's covariance. The settings (``window_s`` and the like) are PayloadTrackingConfig's
fields. The window (a PayloadState's ``window_*``) holds the last ``window_blocks`` blocks,
oldest first, each with the estimate and covariance from before it.

The change test: a generalised likelihood ratio test of a jump in theta (Willsky and Jones,
"A generalized likelihood ratio approach to the detection and estimation of jumps in linear
systems", IEEE TAC 1976) over a sliding window of ``window_s``: the window's score
z = U^T sum(g - J theta_0) against the estimate theta_0 (covariance P_0) from before the window,
in the window's eigenvectors U (eigenvalues Lambda) it knows better than the change prior:
T = z^T (Lambda + Lambda U^T P_0 U Lambda)^-1 z, chi-square with k = dim U degrees of freedom when
nothing changed. A change is detected when T exceeds the chi-square quantile of
``false_alarm_probability`` *and* the change it estimates moves the window's torque by at least
``min_change`` times the residual's RMS: the model's errors are no white noise, and a part of
them that looks like a payload can be statistically significant, but not that large. On a
detection the estimator restarts: its information goes back to the change prior in every
direction, not only in those the window excited (the new body may differ in all of them;
keeping the old body's information where the window saw nothing would keep, say, its centre
of mass along an axis the window did not test); the estimate is kept as the starting point,
and the window's blocks from the most likely onset (the split of the window with the largest T
over its threshold, the GLR's estimate of the jump's time) are taken in again.

Convergence and the report: the estimate has converged when its mass's standard deviation is
at most ``converged_mass_std`` and its centre of mass's at most ``converged_com_std`` on every
axis. After a detection, a converged estimate whose mass and first moment differ from the
published body's (chi-square test at ``false_alarm_probability``) is reported as ``changed``
once what it adds is known as well: the added centre of mass to converged_com_std (for an
added mass below ``com_mass_floor``, to the same first-moment error); a converged estimate that
does not differ ends the detection without a report. A working motion determines a payload's
inertia poorly: at the report the restart's prior is re-centred, for the inertia, on the
published body plus the added mass as a point at the added centre of mass (a part's inertia
about its own centre is small next to that), which moves the estimate by P (guess - mean)
(linear Gaussian: all of the guess where the data say nothing, none where they determine it,
and mass and first moment by their correlation with it). The published body is that estimate
made physically consistent (``results.payload.with_consistent_inertia``: mass and centre of
mass kept, the nearest inertia that is a real body's).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np
from scipy.stats import chi2

from ..dynamics.inertia import from_com_inertia, inertia_matrix
from ..results.payload import body_inertia, with_consistent_inertia
from .live_model import LiveModel

# a window direction is tested when the window knows it better than the change prior does
_TESTED_INFORMATION = 1.0
# the added mass must be this many standard deviations from zero before its centre of mass
# places the point-mass guess of the unexcited inertia
_GUESS_SIGMAS = 3.0


@lru_cache(maxsize=64)
def _threshold(probability: float, dof: int) -> float:
    """The chi-square quantile exceeded with ``probability`` at ``dof`` degrees of freedom."""
    return float(chi2.isf(probability, dof))


# --- the change test ---------------------------------------------------------------------------

def _empty_window(n: int) -> dict:
    """The empty window, as a PayloadState's ``window_*`` fields, for n joints."""
    return dict(window_information=np.zeros((0, 10, 10)), window_score=np.zeros((0, 10)),
                window_plain_information=np.zeros((0, 10, 10)), window_plain_score=np.zeros((0, 10)),
                window_rows=np.zeros(0), window_residual=np.zeros((0, n)), window_joint_rows=np.zeros((0, n)),
                window_mean=np.zeros((0, n)), window_estimate=np.zeros((0, 10)),
                window_covariance=np.zeros((0, 10, 10)), window_time=np.zeros(0))


def _push(state, information, score, plain_information, plain_score, rows, x, covariance, time) -> dict:
    """The window with the new block appended, oldest first (its residuals filled in after the
    update)."""
    def add(old, new):
        return np.concatenate([old, np.asarray(new, dtype=float)[None]])
    n = state.variance.shape[0]
    return dict(window_information=add(state.window_information, information),
                window_score=add(state.window_score, score),
                window_plain_information=add(state.window_plain_information, plain_information),
                window_plain_score=add(state.window_plain_score, plain_score), window_rows=add(state.window_rows, rows),
                window_residual=add(state.window_residual, np.zeros(n)),
                window_joint_rows=add(state.window_joint_rows, np.zeros(n)),
                window_mean=add(state.window_mean, np.full(n, np.nan)),
                window_estimate=add(state.window_estimate, x),
                window_covariance=add(state.window_covariance, covariance),
                window_time=add(state.window_time, time))


def _evict(config, window: dict):
    """(the oldest block's per-joint (residual sums, equations, means) when the window holds more
    than window_blocks, else None; the window without it)."""
    if len(window["window_time"]) <= config.window_blocks:
        return None, window
    evicted = tuple(window[key][0].copy() for key in ("window_residual", "window_joint_rows", "window_mean"))
    return evicted, {key: value[1:] for key, value in window.items()}


def _window_test(config, window: dict, first: int) -> tuple[float, float]:
    """(T over its threshold, the change's size) of the window's blocks from ``first`` on
    against the estimate and covariance from before block ``first``; (0, 0) when the blocks know
    no direction better than the change prior does.

    In the eigenvectors U (eigenvalues Lambda) of the blocks' information above the change
    prior's, z = U^T sum(g - J theta_0) is N(0, Lambda + Lambda U^T P_0 U Lambda) when theta did
    not change: T = z^T (that)^-1 z is chi-square with dim U degrees of freedom. The size, from
    the same sums with the equations weighted by the residual variances alone (not widened by
    the correlation): Lambda^-1 z is the change's estimate, sum(z^2 / Lambda) its whitened torque
    summed over the window's equations (in block units); over their number, the root mean square
    of the change's torque in units of the residual's."""
    reference = window["window_estimate"][first]
    rows = float(window["window_rows"][first:].sum())
    out = []
    for prefix in ("window_", "window_plain_"):
        information = window[prefix + "information"][first:].sum(axis=0)
        score = window[prefix + "score"][first:].sum(axis=0) - information @ reference
        mu, vectors = np.linalg.eigh(0.5 * (information + information.T))
        keep = mu > _TESTED_INFORMATION
        if not np.any(keep) or rows <= 0:
            return 0.0, 0.0
        out.append((mu[keep], vectors[:, keep], vectors[:, keep].T @ score))
    (mu, vectors, z), (plain_mu, _, plain_z) = out
    variance = np.diag(mu) + mu[:, None] * (vectors.T @ window["window_covariance"][first] @ vectors) * mu[None, :]
    statistic = float(z @ np.linalg.solve(variance, z))
    size = float(np.sqrt(np.sum(plain_z ** 2 / plain_mu) / rows))
    return statistic / _threshold(config.false_alarm_probability, len(mu)), size


def _onset(config, window: dict) -> int:
    """The block where the change most likely began: the split of the window whose blocks from
    there on give the largest T over its threshold."""
    ratios = [_window_test(config, window, first)[0] for first in range(len(window["window_time"]))]
    return int(np.argmax(ratios))


def _restart(model, config, state, window: dict, onset: int, time: float):
    """The PayloadState ``state`` after a change detected at ``time`` s: the estimator at the
    change prior's information (the identity in scaled parameters) around the current estimate,
    the window's blocks from ``onset`` on taken in; the window emptied."""
    scale = config.scale
    x = state.estimate / scale
    blocks = window["window_information"][onset:].sum(axis=0)
    r = np.eye(10) + blocks
    x = x + np.linalg.solve(r, window["window_score"][onset:].sum(axis=0) - blocks @ x)
    return replace(state, estimate=x * scale, information=0.5 * (r + r.T), phase="changing",
                   restart_mean=state.estimate.copy(), detected_at=time, detections=state.detections + 1,
                   last_mean=np.full(model.n_joints, np.nan), **_empty_window(model.n_joints))


# --- convergence and the report ----------------------------------------------------------------

def _covariance_si(config, state) -> np.ndarray:
    """(10, 10) the estimate's covariance, SI units: R^-1 unscaled."""
    scale = config.scale
    return scale[:, None] * np.linalg.inv(state.information) * scale[None, :]


def _com_std(theta: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """(3,) standard deviations m of the centre of mass h / m (first order)."""
    mass, first = theta[0], theta[1:4]
    if not mass > 0:
        return np.full(3, np.inf)
    jacobian = np.hstack([-first[:, None] / mass ** 2, np.eye(3) / mass])   # d c / d (m, h)
    return np.sqrt(np.maximum(np.diag(jacobian @ covariance[:4, :4] @ jacobian.T), 0.0))


def _converged(config, theta, covariance) -> bool:
    """Whether theta (10,) SI with ``covariance`` (10, 10) has its mass known to converged_mass_std
    and its centre of mass to converged_com_std on every axis."""
    return bool(np.sqrt(covariance[0, 0]) <= config.converged_mass_std
                and np.all(_com_std(theta, covariance) <= config.converged_com_std))


def _added_converged(config, added: np.ndarray, covariance: np.ndarray) -> bool:
    """Whether the added body ``added`` (10,) (the estimate less the published body) has its
    centre of mass known to converged_com_std, for an added mass of at least com_mass_floor;
    a lighter one's to converged_com_std x com_mass_floor / |mass| (the same first-moment error,
    the same torque error)."""
    mass = abs(float(added[0]))
    if mass == 0.0:
        return True
    floor = max(mass, config.com_mass_floor)
    # std of h / m for the added body, scaled to a body of mass ``floor``: std(d h - c d m) / floor
    at = added[1:4] / added[0]
    jacobian = np.hstack([-at[:, None], np.eye(3)])
    std = np.sqrt(np.maximum(np.diag(jacobian @ covariance[:4, :4] @ jacobian.T), 0.0)) / floor
    return bool(np.all(std <= config.converged_com_std))


def _with_inertia_guess(config, state, covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(estimate, prior mean) (10,) each, SI, had the restart's prior had its inertia centred on
    the published body plus the added mass as a point at the added centre of mass: the estimate
    moves by P R_0 (guess - mean) (linear Gaussian, R_0 = I in scaled parameters), all of the
    guess where the data say nothing of the inertia, none of it where they determine it, and its
    mass and first moment by what the data correlate with that. Unchanged while the added mass
    is within _GUESS_SIGMAS standard deviations of zero."""
    theta, old = state.estimate, state.published
    added = theta[0] - old[0]
    if abs(added) <= _GUESS_SIGMAS * np.sqrt(covariance[0, 0]):
        return theta, state.restart_mean
    at = (theta[1:4] - old[1:4]) / added
    guess = inertia_matrix(old) + added * (at @ at * np.eye(3) - np.outer(at, at))
    mean = state.restart_mean.copy()
    mean[4:] = [guess[0, 0], guess[0, 1], guess[0, 2], guess[1, 1], guess[1, 2], guess[2, 2]]
    scale = config.scale
    shift = (mean - state.restart_mean) / scale
    return theta + scale * (np.linalg.inv(state.information) @ shift), mean


def _consistent(theta: np.ndarray, frame: str) -> np.ndarray | None:
    """theta (10,) made a real body (mass and centre of mass kept), None without a positive mass."""
    if not theta[0] > 0:
        return None
    body = with_consistent_inertia(body_inertia(theta, frame))
    return from_com_inertia(body.mass, body.com, body.inertia)


def _report(model: LiveModel, config, state, detected: bool):
    """The PayloadState ``state`` after the convergence check; (state, detected, changed)."""
    if state.phase != "changing":
        return state, detected, False
    covariance = _covariance_si(config, state)
    if not _converged(config, state.estimate, covariance):
        return state, detected, False
    estimate, mean = _with_inertia_guess(config, state, covariance)
    candidate = _consistent(estimate, model.robot.terminal_body)
    if candidate is None:
        return state, detected, False
    difference = candidate[:4] - state.published[:4]
    changed = float(difference @ np.linalg.solve(covariance[:4, :4], difference)) \
        > _threshold(config.false_alarm_probability, 4)
    if changed and not _added_converged(config, state.estimate - state.published, covariance):
        return state, detected, False          # a change, its own centre of mass not known yet
    if changed:
        state = replace(state, estimate=estimate, restart_mean=mean, published=candidate,
                        published_std=np.sqrt(np.maximum(np.diag(covariance), 0.0)), reports=state.reports + 1)
    return replace(state, phase="tracking"), detected, changed
