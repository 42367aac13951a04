"""Linear estimators of base parameters from joint-torque data.

All estimators take the base regressor W (N, n, r) (N samples, n joints, r base
parameters) and the torques y (N, n) they should explain. Weighting is per joint
and kept diagonal: rows are scaled in place, never an N x N matrix.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import IdentificationError

ESTIMATORS = ("ols", "ridge", "wls")
RANK_TOLERANCE = 1e-10  # smallest singular value of the column-scaled regressor, relative
HUBER_K = 1.345  # Huber threshold in noise standard deviations: 95 % efficiency on Gaussian noise


@dataclass(frozen=True, eq=False)
class Estimate:
    """Base-parameter estimate.

    ``values`` (r,) and their ``covariance`` (r, r) in SI units; ``residual_std`` (n,)
    N m, the per-joint standard deviation of the residual; ``method`` the estimator.
    """

    values: np.ndarray
    covariance: np.ndarray
    residual_std: np.ndarray
    method: str

    @property
    def std(self) -> np.ndarray:
        """Standard deviation of each base parameter, (r,)."""
        return np.sqrt(np.maximum(np.diag(self.covariance), 0.0))

    @property
    def relative_std(self) -> np.ndarray:
        """Relative standard deviation in percent, (r,); inf where the value is 0."""
        with np.errstate(divide="ignore"):
            return 100.0 * self.std / np.abs(self.values)


def _flat(regressor: np.ndarray, torque: np.ndarray):
    num, n, r = regressor.shape
    if torque.shape != (num, n):
        raise ValueError(f"torque shape {torque.shape} does not match regressor {regressor.shape}")
    if num * n <= r:
        raise IdentificationError(f"{num * n} torque equations cannot determine {r} parameters: record more samples")
    return regressor.reshape(num * n, r), torque.reshape(num * n)


def _ols(w: np.ndarray, y: np.ndarray):
    """Least squares by SVD on unit-norm columns: returns values (r,) and (W^T W)^-1 (r, r).

    Scaling makes the rank decision independent of units; the SVD gives the inverse Gram
    matrix without forming W^T W, which would square the condition number.
    """
    norms = np.linalg.norm(w, axis=0)
    norms[norms == 0.0] = 1.0
    u, s, vt = np.linalg.svd(w / norms, full_matrices=False)
    rank = int(np.sum(s > RANK_TOLERANCE * s[0])) if s[0] > 0 else 0
    if rank < w.shape[1]:
        raise IdentificationError(
            f"the regressor has rank {rank} < {w.shape[1]} base parameters on this data: "
            "the trajectory does not excite every base parameter (longer or richer excitation needed)")
    values = (vt.T @ ((u.T @ y) / s)) / norms
    inv_gram = ((vt.T / s**2) @ vt) / np.outer(norms, norms)
    return values, inv_gram


def _residual_std(regressor, torque, values, dof) -> np.ndarray:
    residual = torque - regressor @ values
    num = torque.shape[0]
    return np.sqrt(np.sum(residual**2, axis=0) / max(num - dof, 1))


def least_squares(regressor: np.ndarray, torque: np.ndarray) -> Estimate:
    """Ordinary least squares; covariance sigma^2 (W^T W)^-1 with one pooled sigma."""
    w, y = _flat(regressor, torque)
    values, inv_gram = _ols(w, y)
    residual = y - w @ values
    sigma2 = residual @ residual / (w.shape[0] - w.shape[1])
    per_joint = _residual_std(regressor, torque, values, w.shape[1] / torque.shape[1])
    return Estimate(values, sigma2 * inv_gram, per_joint, "ols")


def ridge(regressor: np.ndarray, torque: np.ndarray, alpha: float = 1e-6) -> Estimate:
    """Tikhonov-regularised least squares, penalty alpha * mean(diag(W^T W)) * |beta|^2.

    The penalty is relative to the data so one alpha fits any scale. Covariance is the
    sandwich sigma^2 A^-1 W^T W A^-1 with A = W^T W + lambda E.
    """
    w, y = _flat(regressor, torque)
    gram = w.T @ w
    lam = alpha * float(np.mean(np.diag(gram)))
    a_inv = np.linalg.inv(gram + lam * np.eye(gram.shape[0]))
    values = a_inv @ (w.T @ y)
    residual = y - w @ values
    sigma2 = residual @ residual / (w.shape[0] - w.shape[1])
    per_joint = _residual_std(regressor, torque, values, w.shape[1] / torque.shape[1])
    return Estimate(values, sigma2 * a_inv @ gram @ a_inv, per_joint, "ridge")


def weighted_least_squares(regressor: np.ndarray, torque: np.ndarray) -> Estimate:
    """Gautier's weighted least squares: each joint's rows weighted by 1/sigma_j.

    sigma_j is the residual standard deviation of joint j after an OLS fit; the
    weighted problem then has unit noise, so its covariance is (W^T Sigma^-1 W)^-1.
    """
    first = least_squares(regressor, torque)
    sigma = np.maximum(first.residual_std, 1e-12 * max(float(np.max(first.residual_std)), 1e-300))
    w, y = _flat(regressor / sigma[None, :, None], torque / sigma[None, :])
    values, inv_gram = _ols(w, y)
    residual = y - w @ values
    # scale by the weighted residual variance (1 when the sigma_j are right)
    scale = residual @ residual / (w.shape[0] - w.shape[1])
    per_joint = _residual_std(regressor, torque, values, w.shape[1] / torque.shape[1])
    return Estimate(values, scale * inv_gram, per_joint, "wls")


def _mad_scale(residual: np.ndarray) -> np.ndarray:
    """Per-joint noise scale (n,) from residuals (N, n) that outliers do not inflate: 1.4826 MAD."""
    centred = residual - np.median(residual, axis=0)
    scale = 1.4826 * np.median(np.abs(centred), axis=0)
    return np.maximum(scale, 1e-12 * max(float(np.max(scale)), 1e-300))


def robust_least_squares(regressor: np.ndarray, torque: np.ndarray, iterations: int = 50,
                         tolerance: float = 1e-9) -> Estimate:
    """Huber M-estimate by iteratively reweighted least squares, per-joint scaled like WLS.

    Every equation (sample, joint) gets the weight min(1, HUBER_K / |r / s_j|), r its residual
    and s_j the joint's robust noise scale (1.4826 MAD); weights are one value per equation,
    applied by scaling rows, so memory stays linear in N. Gaussian noise loses ~5 % efficiency;
    a spike (a CAN glitch, a collision, a sensor dropout) pulls the fit with a bounded
    weight instead of its square. Covariance: that of the last weighted solve, scaled by its
    residual variance.
    """
    values = least_squares(regressor, torque).values
    weights = np.ones(torque.shape)
    for _ in range(iterations):
        residual = torque - regressor @ values
        scale = _mad_scale(residual)
        z = np.abs(residual / scale)
        weights = np.minimum(1.0, HUBER_K / np.maximum(z, 1e-300))
        root = np.sqrt(weights) / scale
        w, y = _flat(regressor * root[..., None], torque * root)
        new, inv_gram = _ols(w, y)
        step = np.max(np.abs(new - values) / np.maximum(np.abs(new), 1e-300))
        values = new
        if step < tolerance:
            break
    residual = y - w @ values
    variance = residual @ residual / (w.shape[0] - w.shape[1])
    per_joint = _residual_std(regressor, torque, values, w.shape[1] / torque.shape[1])
    return Estimate(values, variance * inv_gram, per_joint, "irls")


def correlation_time(residual: np.ndarray) -> float:
    """How many consecutive samples of ``residual`` (N, n) carry one sample's worth of
    information: 1 + 2 sum_k rho(k), rho the residual's autocorrelation per joint summed over
    its initial positive run (Geyer's initial positive sequence), averaged over the joints.

    The estimators' covariances assume independent equations; low-pass filtered data (10 Hz
    of 1 kHz: about 50 samples per independent one) and smooth model errors are not, so their
    standard deviations are too small by the square root of this factor.
    """
    residual = np.asarray(residual, dtype=float)
    num = residual.shape[0]
    if num < 4:
        return 1.0
    centred = residual - residual.mean(axis=0)
    size = 1 << int(np.ceil(np.log2(2 * num)))
    spectrum = np.fft.rfft(centred, n=size, axis=0)
    acf = np.fft.irfft(np.abs(spectrum) ** 2, n=size, axis=0)[:num]
    times = []
    for j in range(residual.shape[1]):
        if acf[0, j] <= 0:
            continue
        rho = acf[1:, j] / acf[0, j]
        stop = np.flatnonzero(rho <= 0)
        run = rho[:stop[0]] if stop.size else rho
        times.append(1.0 + 2.0 * float(np.sum(run)))
    return float(np.mean(times)) if times else 1.0


def estimate(regressor: np.ndarray, torque: np.ndarray, method: str = "wls", ridge_alpha: float = 1e-6,
             robust: bool = False) -> Estimate:
    """Dispatch to the estimator named ``method`` (one of ESTIMATORS); ``robust`` replaces it by
    ``robust_least_squares`` (which weights per joint like wls; not combinable with ridge)."""
    if method not in ESTIMATORS:
        raise ValueError(f"unknown estimator '{method}'; choose one of {ESTIMATORS}")
    if robust:
        if method == "ridge":
            raise ValueError("robust weighting is not available with the ridge estimator")
        return robust_least_squares(regressor, torque)
    if method == "ols":
        return least_squares(regressor, torque)
    if method == "ridge":
        return ridge(regressor, torque, ridge_alpha)
    return weighted_least_squares(regressor, torque)
