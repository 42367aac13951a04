"""Transmission stiffness and damping from a double-encoder recording.

An elastic transmission passes the link tau_link = k (motor_q - q) + c (d motor_q/dt - dq): with
the deflection delta = q - motor_q, tau_link = -(k delta + c d(delta)/dt). Given the link-side
torque (the rigid-body inverse dynamics of the link side at the measured q, dq and ddq, which
excludes what acts before the spring: rotor inertia, motor and gearbox friction), each joint's
k and c are a linear least-squares fit, with an offset for the encoders' zero mismatch:

    tau_link_j = -k_j delta_j - c_j d(delta_j)/dt + b_j

q, dq, the deflection and their derivatives are low-passed with the identification's zero-phase
Butterworth filter (``FilterConfig``), trimmed at both ends and decimated, as the main
identification prepares its rows. The deflection carries both encoders' noise, and plain least
squares on a noisy regressor shrinks the slope (regression dilution: a quarter of the stiffness
on a lightly loaded joint). The fit is therefore by instrumental variables: the instruments are
the link torque, its rate and one, which follow the deflection but not its noise. Standard
deviations are the instrumental-variable ones, scaled for the filter: neighbouring filtered
samples are not independent, so the residual's degrees of freedom are counted per filter
bandwidth (2 cutoff_hz samples per second), not per sample. They are conditional on the
link-side torque given: an identified model's error in it (the terminal body's, which dominates a
wrist's load) biases the stiffness beyond them. A joint whose load hardly varies is reported as
not identified, with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..dynamics.regressor import BLOCK, joint_torque_regressor
from ..errors import DataError
from .filtering import FilterConfig, derivative, lowpass, resample_uniform, uniform_sample_rate
from .recording import Recording

# instruments and regressor nearly unrelated (cond of their normalised cross product above this):
# the joint carries too little varying load for its spring to show
MAX_CONDITION = 1e6
# a joint whose motor side was read at some samples only: fewest such samples to fit its stiffness
MIN_SPARSE_SAMPLES = 20


@dataclass(frozen=True, eq=False)
class TransmissionEstimate:
    """Per joint (n,): ``stiffness`` N m/rad, ``damping`` N m s/rad, their standard deviations,
    ``offset`` rad (the deflection read at zero torque: the encoders' zero mismatch) and
    ``rmse`` N m of the fit, NaN for a joint not identified; ``samples`` rows fitted; ``notes``
    one line per joint not identified or whose stiffness or damping is within two standard
    deviations of zero or below (reported as fitted, with the standard deviation that shows it is
    undetermined), saying why."""

    joint_names: tuple
    stiffness: np.ndarray
    damping: np.ndarray
    stiffness_std: np.ndarray
    damping_std: np.ndarray
    offset: np.ndarray
    rmse: np.ndarray
    samples: int
    notes: tuple = ()

    def as_dicts(self) -> list:
        """One dict per joint, as params.json's ``joints`` entries carry them."""
        def number(x):  # JSON has no NaN: a joint not identified has null figures
            return float(x) if np.isfinite(x) else None
        return [{"joint": name, "transmission_stiffness": number(self.stiffness[j]),
                 "transmission_stiffness_std": number(self.stiffness_std[j]),
                 "transmission_damping": number(self.damping[j]),
                 "transmission_damping_std": number(self.damping_std[j]),
                 "deflection_offset": number(self.offset[j]), "transmission_rmse": number(self.rmse[j])}
                for j, name in enumerate(self.joint_names)]


def identify_transmission(recording: Recording, link_torque: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
                          config: FilterConfig = FilterConfig()) -> TransmissionEstimate:
    """Each joint's stiffness and damping from ``recording`` (its ``motor_q`` required; jittered
    stamps are resampled onto a uniform grid, lost samples refused) given
    ``link_torque(q, dq, ddq) -> (M, n)`` N m, the link side's torque at the filtered states
    (M, n). A joint whose motor side was measured at some samples only (NaN elsewhere: a drive
    read slower than its joint state) gets its stiffness from those samples, the deflection
    unfiltered, and no damping (its rate needs the deflection at every sample): said in the
    notes. The whole recording is filtered at once: memory grows as a few copies of it.
    Raises DataError without motor-side positions or with too few samples."""
    if recording.motor_q is None:
        raise DataError("the recording has no motor-side positions (motor_q): the transmission needs both encoders")
    try:
        rate = uniform_sample_rate(recording.time)
    except DataError:  # a driver's jittered stamps: onto a uniform grid (refused across lost samples)
        recording = resample_uniform(recording)
        rate = uniform_sample_rate(recording.time)
    trim = int(round(config.trim_s * rate))
    keep = np.arange(trim, recording.n_samples - trim, config.decimation)
    if keep.size < 50:
        raise DataError(f"{keep.size} samples remain after trimming {config.trim_s} s at each end: record longer")

    def smooth(x):
        return lowpass(np.asarray(x, dtype=float), rate, config.cutoff_hz, config.order)
    q = smooth(recording.q)
    dq = smooth(recording.dq)
    ddq = smooth(derivative(dq, rate))
    raw_delta = np.asarray(recording.q, dtype=float) - np.asarray(recording.motor_q, dtype=float)
    measured = np.isfinite(raw_delta)
    dense = measured.all(axis=0)
    delta = np.zeros_like(raw_delta)
    ddelta = np.zeros_like(raw_delta)
    if dense.any():
        delta[:, dense] = smooth(raw_delta[:, dense])
        ddelta[:, dense] = smooth(derivative(delta[:, dense], rate))
    # the sparse joints' samples, every one between the trims (not decimated: they are few)
    inner = np.zeros(recording.n_samples, dtype=bool)
    inner[trim:recording.n_samples - trim] = True
    sparse_rows = np.flatnonzero(inner & measured[:, ~dense].any(axis=1)) if not dense.all() else np.zeros(0, int)
    rows = np.union1d(keep, sparse_rows)
    torque = np.asarray(link_torque(q[rows], dq[rows], ddq[rows]), dtype=float)
    n = len(recording.joint_names)
    if torque.shape != (rows.size, n):
        raise DataError(f"link_torque returned shape {torque.shape}, expected ({rows.size}, {n})")
    at_keep = np.searchsorted(rows, keep)
    tau = torque[at_keep]
    out = {key: np.full(n, np.nan) for key in ("k", "c", "k_std", "c_std", "offset", "rmse")}
    notes = []
    # instruments: the link torque and its rate, free of the encoders' noise the deflection carries
    rate_of_tau = np.gradient(tau, recording.time[keep], axis=0)
    for j, name in enumerate(recording.joint_names):
        if dense[j]:
            # independent samples: one per 1 / (2 cutoff) s of filtered signal
            independent = min(keep.size, 2.0 * config.cutoff_hz * keep.size * config.decimation / rate)
            fit = _instrumental(np.column_stack([-delta[keep, j], -ddelta[keep, j], np.ones(keep.size)]),
                                np.column_stack([-tau[:, j], -rate_of_tau[:, j], np.ones(keep.size)]), tau[:, j],
                                independent)
        else:
            at = np.flatnonzero(measured[rows, j] & inner[rows])
            if at.size < MIN_SPARSE_SAMPLES:
                notes.append(f"{name}: not identified, its motor side was measured at {at.size} samples "
                             f"(at least {MIN_SPARSE_SAMPLES} needed)")
                continue
            y = torque[at, j]
            # unfiltered samples far apart are independent; close ones no more than the bandwidth allows
            independent = min(at.size, 2.0 * config.cutoff_hz * (recording.time[rows[at[-1]]]
                                                                 - recording.time[rows[at[0]]]) + 1)
            fit = _instrumental(np.column_stack([-raw_delta[rows[at], j], np.ones(at.size)]),
                                np.column_stack([-y, np.ones(at.size)]), y, independent)
            if fit is not None:
                notes.append(f"{name}: motor side measured at {at.size} of {recording.n_samples} samples: stiffness "
                             "from those, damping not identified (its rate needs the deflection at every sample)")
        if fit is None:
            notes.append(f"{name}: not identified, its load and deflection do not vary enough together")
            continue
        theta, std, out["rmse"][j] = fit
        out["k"][j], out["k_std"][j] = theta[0], std[0]
        if dense[j]:
            out["c"][j], out["c_std"][j] = theta[1], std[1]
        # an estimate within two standard deviations of zero (or below it) says nothing physical
        undetermined = [f"{what} {value:.3g} +- {spread:.2g}" for what, value, spread in
                        (("stiffness", theta[0], std[0]), ("damping", out["c"][j], out["c_std"][j]))
                        if np.isfinite(value) and value <= 2 * spread]
        if undetermined:
            notes.append(f"{name}: not determined by this motion ({', '.join(undetermined)}): its load varies too "
                         "little for the spring to show")
        out["offset"][j] = theta[-1] / theta[0] if theta[0] != 0 else float("nan")
    return TransmissionEstimate(joint_names=tuple(recording.joint_names), stiffness=out["k"], damping=out["c"],
                                stiffness_std=out["k_std"], damping_std=out["c_std"], offset=out["offset"],
                                rmse=out["rmse"], samples=int(keep.size), notes=tuple(notes))


def _instrumental(a: np.ndarray, z: np.ndarray, y: np.ndarray, independent: float):
    """The instrumental-variable solution of y ~ a theta with instruments z (M, p) each, y (M,):
    (theta (p,), its standard deviations (p,), the fit's rmse), the residual's degrees of freedom
    counted on ``independent`` samples; None when instruments and regressors are nearly unrelated."""
    m, p = a.shape
    scale, zscale = np.sqrt(np.sum(a * a, axis=0)), np.sqrt(np.sum(z * z, axis=0))
    if not (np.all(scale > 0) and np.all(zscale > 0)):
        return None
    cross = (z / zscale).T @ (a / scale)
    if np.linalg.cond(cross) > MAX_CONDITION:
        return None
    theta = np.linalg.solve(cross, (z / zscale).T @ y) / scale
    residual = y - a @ theta
    dof = max(independent - p, 1.0)
    sigma2 = float(np.sum(residual ** 2)) / m * independent / dof
    inverse = np.linalg.inv(cross)
    covariance = sigma2 * (inverse @ ((z / zscale).T @ (z / zscale)) @ inverse.T) / np.outer(scale, scale)
    covariance *= m / independent
    return theta, np.sqrt(np.diag(covariance)), float(np.sqrt(np.mean(residual ** 2)))


def rigid_link_torque(robot, result) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The link side's torque under an identification ``result``: its rigid bodies alone
    (``result.body_parameters``), without the joint terms (armature, friction) that act before
    an elastic transmission. Returns f(q, dq, ddq) -> (M, n) N m, evaluated block by block."""
    parameters = np.asarray(result.body_parameters, dtype=float).reshape(-1)

    def torque(q, dq, ddq):
        out = np.empty(np.shape(q))
        for start in range(0, out.shape[0], BLOCK):
            rows = slice(start, start + BLOCK)
            out[rows] = joint_torque_regressor(robot.tree, robot.gravity, q[rows], dq[rows], ddq[rows]) @ parameters
        return out
    return torque
