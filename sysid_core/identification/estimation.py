"""Linear estimators of base parameters from joint-torque data.

The data are the base regressor W (N, n, r) (N samples, n joints, r base parameters) and the
torques y (N, n) they should explain, given whole (``estimate``) or in blocks of samples
(``ReducedForm``, ``estimate_reduced``): every estimator works on the reduced form, for each
joint the triangle of a QR factorisation of its rows [W_j | y_j], accumulated block by block
in O(n r^2) memory whatever N. An orthogonal factorisation keeps the accuracy of a solve on
the stacked matrix (normal equations would square its condition number). Weighting is per
joint (Gautier's WLS: scale joint j's triangle) or per equation (Huber IRLS: rows scaled as
they are added, one pass over the data per reweighting), never an N x N matrix.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

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


def _r_factor(matrix: np.ndarray) -> np.ndarray:
    """The R factor (min(m, k), k) of a Householder QR of ``matrix`` (m, k); a tall block comes
    in Fortran order, LAPACK's, so NumPy's copy of it is a straight one. NumPy's, not SciPy's:
    importing scipy.linalg costs about 0.2 s, a tenth of a whole ``sysid-identify`` run."""
    return np.linalg.qr(matrix, mode="r")


Blocks = Callable[[], Iterable[tuple]]  # () -> iterator of (W (B, n, r), y (B, n)), the data in order


@dataclass(frozen=True, eq=False)
class ReducedForm:
    """What the estimators need of W (N, n, r) and y (N, n), in memory independent of N.

    For every joint j, ``triangles[j]`` (k_j, c_j + 1) is the R factor of a QR factorisation
    of [W_j[:, support_j] | y_j], W_j (N, r) the rows of joint j and ``supports[j]`` (c_j,)
    the columns not identically zero in them (on a serial arm joint j sees only the bodies
    after it and its own friction, so the factorisations are several times cheaper than on
    all r columns). Orthogonality gives, exactly up to round-off, W_j^T W_j, W_j^T y_j and
    ``|y_j - W_j b|^2`` for any b. ``n_samples`` N; ``n_params`` r; ``equations`` (n,) the rows of
    each joint that are not all zero (a zero row carries nothing: an equation left out), None
    when none is (N each).
    """

    supports: tuple
    triangles: tuple
    n_samples: int
    n_params: int
    equations: np.ndarray | None = None

    @property
    def counts(self) -> np.ndarray:
        """Equations (n,) of each joint."""
        return np.full(len(self.triangles), self.n_samples) if self.equations is None else self.equations

    @classmethod
    def empty(cls, n_joints: int, n_params: int) -> "ReducedForm":
        return cls(tuple(np.zeros(0, dtype=int) for _ in range(n_joints)),
                   tuple(np.zeros((0, 1)) for _ in range(n_joints)), 0, int(n_params))

    @classmethod
    def of(cls, blocks: Iterable[tuple], n_joints: int, n_params: int) -> "ReducedForm":
        """The reduced form of the blocks (W (B, n, r), y (B, n)) of an iterable."""
        reduced = cls.empty(n_joints, n_params)
        for regressor, torque in blocks:
            reduced = reduced.add(regressor, torque)
        return reduced

    def add(self, regressor: np.ndarray, torque: np.ndarray, root: np.ndarray | None = None) -> "ReducedForm":
        """This reduced form with the B samples W (B, n, r), y (B, n) appended; ``root`` (B, n)
        scales each equation (row) first (the square root of its weight)."""
        regressor, torque = np.asarray(regressor, dtype=float), np.asarray(torque, dtype=float)
        num, n = torque.shape if torque.ndim == 2 else (-1, -1)
        if regressor.shape != (num, n, self.n_params) or n != len(self.triangles):
            raise ValueError(f"regressor {regressor.shape} and torque {torque.shape} do not match "
                             f"{len(self.triangles)} joints and {self.n_params} parameters")
        supports, triangles = [], []
        # zero rows (B, n): only where the torque is zero is the regressor's row looked at
        empty = torque == 0.0
        if empty.any():
            at = np.nonzero(empty)
            empty[at] = ~np.any(regressor[at[0], at[1], :] != 0.0, axis=-1)
        equations = self.counts + (num - np.count_nonzero(empty, axis=0)) if empty.any() or \
            self.equations is not None else None
        for j, (support, triangle) in enumerate(zip(self.supports, self.triangles)):
            # joint j's columns as rows (r, B): contiguous when W is a view of joint-major,
            # samples-last memory (as identify's stream yields it), so every copy below is a
            # run of contiguous rows rather than a transposition
            rows = regressor[:, j, :].T
            grown = np.union1d(support, np.flatnonzero(np.any(rows != 0.0, axis=1)))
            # old triangle (its columns placed in the grown support) on top of the new rows,
            # in Fortran order, LAPACK's (NumPy's QR copies it straight); filled through its transpose
            done = triangle.shape[0]
            stack = np.empty((done + num, grown.size + 1), order="F")
            columns = stack.T
            columns[:, :done] = 0.0
            columns[np.searchsorted(grown, support), :done] = triangle[:, :-1].T
            columns[-1, :done] = triangle[:, -1]
            np.take(rows, grown, axis=0, out=columns[:-1, done:], mode="clip")  # clip: unbuffered
            columns[-1, done:] = torque[:, j]
            if root is not None:
                columns[:, done:] *= root[:, j]
            triangles.append(_r_factor(stack))
            supports.append(grown)
        return ReducedForm(tuple(supports), tuple(triangles), self.n_samples + num, self.n_params, equations)

    def merged(self, other: "ReducedForm") -> "ReducedForm":
        """The reduced form of this data followed by ``other``'s: per joint the R factor of the two
        triangles stacked, which is the one of all their rows (to round-off), so that data reduced
        in parts (files, machines) combine into the reduced form of the whole."""
        if other.n_params != self.n_params or len(other.triangles) != len(self.triangles):
            raise ValueError(f"cannot merge a reduced form of {len(other.triangles)} joints and {other.n_params} "
                             f"parameters into one of {len(self.triangles)} and {self.n_params}")
        supports, triangles = [], []
        for own, theirs in zip(zip(self.supports, self.triangles), zip(other.supports, other.triangles)):
            grown = np.union1d(own[0], theirs[0])
            stack = np.zeros((own[1].shape[0] + theirs[1].shape[0], grown.size + 1), order="F")
            row = 0
            for support, triangle in (own, theirs):
                rows = slice(row, row + triangle.shape[0])
                stack[rows, np.searchsorted(grown, support)] = triangle[:, :-1]
                stack[rows, -1] = triangle[:, -1]
                row = rows.stop
            triangles.append(_r_factor(stack))
            supports.append(grown)
        equations = None if self.equations is None and other.equations is None else self.counts + other.counts
        return ReducedForm(tuple(supports), tuple(triangles), self.n_samples + other.n_samples, self.n_params,
                           equations)

    def crossed(self, cross: np.ndarray) -> "ReducedForm":
        """This reduced form with each joint's [W_j | y_j]^T [W_j | y_j] moved by ``cross[j]``
        ((n, r + 1, r + 1), symmetric; column r is y), refactored (the corrected product is an
        estimate: a negative eigenvalue, direction the data cannot tell, is floored at zero).

        For equations measured twice, A = [W | y] and A' = [W' | y'] from two independent
        measurements of the motion (W' - W only noise), the cross product sym(A'^T A) has the
        expectation of the noise-free A^T A, where A^T A carries the noise's own variance (the
        errors-in-variables bias of least squares): ``cross`` = sym(A'^T A) - A^T A =
        sym((A' - A)^T A), summed over the equations (cross_product)."""
        cross = np.asarray(cross, dtype=float)
        if cross.shape != (len(self.triangles), self.n_params + 1, self.n_params + 1):
            raise ValueError(f"cross {cross.shape} does not match {len(self.triangles)} joints and "
                             f"{self.n_params} parameters")
        triangles = []
        for j, (support, triangle) in enumerate(zip(self.supports, self.triangles)):
            at = np.append(support, self.n_params)
            gram = triangle.T @ triangle + cross[j][np.ix_(at, at)]
            values, vectors = np.linalg.eigh(0.5 * (gram + gram.T))
            triangles.append(_r_factor(vectors.T * np.sqrt(np.maximum(values, 0.0))[:, None]))
        return replace(self, triangles=tuple(triangles))

    def stacked(self, scale: np.ndarray | None = None) -> np.ndarray:
        """Every joint's triangle over all r columns and y, stacked (rows, r + 1); joint j's
        rows divided by ``scale[j]`` (n,) when given (Gautier's per-joint weights)."""
        blocks = []
        for j, (support, triangle) in enumerate(zip(self.supports, self.triangles)):
            full = np.zeros((triangle.shape[0], self.n_params + 1))
            full[:, support] = triangle[:, :-1]
            full[:, -1] = triangle[:, -1]
            blocks.append(full if scale is None else full / scale[j])
        return np.vstack(blocks)

    def residual_sums(self, values: np.ndarray) -> np.ndarray:
        """``|y_j - W_j values|^2`` for every joint (n,), from the triangles alone."""
        values = np.asarray(values, dtype=float)
        return np.array([float(np.sum((t[:, :-1] @ values[s] - t[:, -1]) ** 2))
                         for s, t in zip(self.supports, self.triangles)])

    def check_determined(self) -> None:
        """IdentificationError unless there are more equations (N n) than parameters (r)."""
        equations = int(np.sum(self.counts))
        if equations <= self.n_params:
            raise IdentificationError(f"{equations} torque equations cannot determine {self.n_params} "
                                      "parameters: record more samples")


def cross_product(regressor: np.ndarray, torque: np.ndarray, other_regressor: np.ndarray,
                  other_torque: np.ndarray) -> np.ndarray:
    """sym((A' - A)^T A) per joint (n, r + 1, r + 1) for A = [W | y] (W (B, n, r), y (B, n)) and
    A' the same equations from an independent measurement (ReducedForm.crossed)."""
    own = np.concatenate([regressor, torque[..., None]], axis=2)
    difference = np.concatenate([other_regressor, other_torque[..., None]], axis=2) - own
    half = np.einsum("bjr,bjs->jrs", difference, own)
    return 0.5 * (half + half.transpose(0, 2, 1))


def triangle(stacked: np.ndarray) -> np.ndarray:
    """The R factor (r + 1, r + 1) of stacked rows [W | y] (m, r + 1): W = Q R[:r, :r], Q^T y =
    R[:r, r], and R[r, r]^2 the residual sum of squares of the least-squares fit (zero-padded
    when m < r + 1)."""
    r_mat = _r_factor(np.asarray(stacked, dtype=float))
    out = np.zeros((stacked.shape[1], stacked.shape[1]))
    out[:r_mat.shape[0]] = r_mat
    return out


def condition_numbers(r_mat: np.ndarray) -> tuple[float, float]:
    """(unit-scaled, raw) condition numbers of a regressor W from its R factor (r, r) (W = Q R:
    same singular values, same column norms)."""
    sing = np.linalg.svd(r_mat, compute_uv=False)
    norms = np.linalg.norm(r_mat, axis=0)
    sing_scaled = np.linalg.svd(r_mat / np.where(norms > 0, norms, 1.0), compute_uv=False)
    ratio = (lambda s: float(s[0] / s[-1]) if s[-1] > 0 else float("inf"))
    return ratio(sing_scaled), ratio(sing)


def _ols(stacked: np.ndarray):
    """Least squares on stacked rows [W | y] (m, r + 1) by QR, then SVD of R on unit-norm
    columns: values (r,), (W^T W)^-1 (r, r) and the residual sum of squares.

    Scaling makes the rank decision independent of units; the SVD of R (W's singular values)
    gives the inverse Gram matrix without forming W^T W, which would square the condition number.
    """
    r = stacked.shape[1] - 1
    full = triangle(stacked)
    r11, qty = full[:r, :r], full[:r, r]
    norms = np.linalg.norm(r11, axis=0)
    norms[norms == 0.0] = 1.0
    u, s, vt = np.linalg.svd(r11 / norms)
    rank = int(np.sum(s > RANK_TOLERANCE * s[0])) if s[0] > 0 else 0
    if rank < r:
        raise IdentificationError(
            f"the regressor has rank {rank} < {r} base parameters on this data: "
            "the trajectory does not excite every base parameter (longer or richer excitation needed)")
    values = (vt.T @ ((u.T @ qty) / s)) / norms
    inv_gram = ((vt.T / s**2) @ vt) / np.outer(norms, norms)
    return values, inv_gram, float(full[r, r] ** 2)


def _per_joint_std(reduced: ReducedForm, values: np.ndarray) -> np.ndarray:
    """Per-joint residual standard deviation (n,), each joint charged r / n degrees of freedom."""
    dof = reduced.n_params / len(reduced.triangles)
    return np.sqrt(reduced.residual_sums(values) / np.maximum(reduced.counts - dof, 1))


def _variance_of(reduced: ReducedForm, rss: float) -> float:
    return rss / (np.sum(reduced.counts) - reduced.n_params)


def least_squares_reduced(reduced: ReducedForm) -> Estimate:
    """Ordinary least squares; covariance sigma^2 (W^T W)^-1 with one pooled sigma."""
    reduced.check_determined()
    values, inv_gram, rss = _ols(reduced.stacked())
    return Estimate(values, _variance_of(reduced, rss) * inv_gram, _per_joint_std(reduced, values), "ols")


def ridge_reduced(reduced: ReducedForm, alpha: float = 1e-6) -> Estimate:
    """Tikhonov-regularised least squares, penalty alpha * mean(diag(W^T W)) * ``|beta|^2``.

    The penalty is relative to the data so one alpha fits any scale. Covariance is the
    sandwich sigma^2 A^-1 W^T W A^-1 with A = W^T W + lambda E.
    """
    reduced.check_determined()
    r = reduced.n_params
    full = triangle(reduced.stacked())
    r11, qty = full[:r, :r], full[:r, r]
    gram = r11.T @ r11
    lam = alpha * float(np.mean(np.sum(r11**2, axis=0)))
    # A = S^T S from the QR of [R; sqrt(lambda) E]: the solve never forms A
    s_mat = triangle(np.vstack([np.hstack([r11, qty[:, None]]),
                                np.hstack([np.sqrt(lam) * np.eye(r), np.zeros((r, 1))])]))
    # triangular: LU finds nothing to eliminate, and the solve is back substitution
    values = np.linalg.solve(s_mat[:r, :r], s_mat[:r, r])
    s_inv = np.linalg.solve(s_mat[:r, :r], np.eye(r))
    a_inv = s_inv @ s_inv.T
    sigma2 = _variance_of(reduced, float(np.sum(reduced.residual_sums(values))))
    return Estimate(values, sigma2 * a_inv @ gram @ a_inv, _per_joint_std(reduced, values), "ridge")


def weighted_least_squares_reduced(reduced: ReducedForm) -> Estimate:
    """Gautier's weighted least squares: each joint's rows weighted by 1/sigma_j.

    sigma_j is the residual standard deviation of joint j after an OLS fit; the
    weighted problem then has unit noise, so its covariance is (W^T Sigma^-1 W)^-1.
    """
    first = least_squares_reduced(reduced)
    sigma = np.maximum(first.residual_std, 1e-12 * max(float(np.max(first.residual_std)), 1e-300))
    values, inv_gram, rss = _ols(reduced.stacked(sigma))
    # scale by the weighted residual variance (1 when the sigma_j are right)
    return Estimate(values, _variance_of(reduced, rss) * inv_gram, _per_joint_std(reduced, values), "wls")


def _mad_scale(residual: np.ndarray) -> np.ndarray:
    """Per-joint noise scale (n,) from residuals (N, n) that outliers do not inflate: 1.4826 MAD."""
    centred = residual - np.median(residual, axis=0)
    scale = 1.4826 * np.median(np.abs(centred), axis=0)
    return np.maximum(scale, 1e-12 * max(float(np.max(scale)), 1e-300))


def robust_least_squares_reduced(reduced: ReducedForm, blocks: Blocks, iterations: int = 50,
                                 tolerance: float = 1e-9) -> Estimate:
    """Huber M-estimate by iteratively reweighted least squares, per-joint scaled like WLS.

    Every equation (sample, joint) gets the weight ``min(1, HUBER_K / |r / s_j|)``, r its residual
    and s_j the joint's robust noise scale (1.4826 MAD); weights are one value per equation,
    applied by scaling rows. Gaussian noise loses ~5 % efficiency; a spike (a CAN glitch, a
    collision, a sensor dropout) pulls the fit with a bounded weight instead of its square.
    Covariance: that of the last weighted solve, scaled by its residual variance.

    ``reduced`` is the unweighted reduced form of the data that ``blocks()`` yields again at
    every reweighting: two passes each (the residuals, kept (N, n) for their exact median;
    then the weighted reduced form), so memory grows by one torque-sized array.
    """
    values = least_squares_reduced(reduced).values
    n, r = len(reduced.triangles), reduced.n_params
    residual = np.empty((reduced.n_samples, n))
    for _ in range(iterations):
        at = 0
        for regressor, torque in blocks():
            residual[at:at + len(torque)] = torque - regressor @ values
            at += len(torque)
        scale = _mad_scale(residual)
        weighted, at = ReducedForm.empty(n, r), 0
        for regressor, torque in blocks():
            z = np.abs(residual[at:at + len(torque)] / scale)
            root = np.sqrt(np.minimum(1.0, HUBER_K / np.maximum(z, 1e-300))) / scale
            weighted = weighted.add(regressor, torque, root)
            at += len(torque)
        new, inv_gram, rss = _ols(weighted.stacked())
        step = np.max(np.abs(new - values) / np.maximum(np.abs(new), 1e-300))
        values = new
        if step < tolerance:
            break
    return Estimate(values, _variance_of(reduced, rss) * inv_gram, _per_joint_std(reduced, values), "irls")


def least_squares(regressor: np.ndarray, torque: np.ndarray) -> Estimate:
    """Ordinary least squares on W (N, n, r), y (N, n) (``least_squares_reduced``)."""
    return least_squares_reduced(_reduced(regressor, torque))


def ridge(regressor: np.ndarray, torque: np.ndarray, alpha: float = 1e-6) -> Estimate:
    """Ridge on W (N, n, r), y (N, n) (``ridge_reduced``)."""
    return ridge_reduced(_reduced(regressor, torque), alpha)


def weighted_least_squares(regressor: np.ndarray, torque: np.ndarray) -> Estimate:
    """Gautier's WLS on W (N, n, r), y (N, n) (``weighted_least_squares_reduced``)."""
    return weighted_least_squares_reduced(_reduced(regressor, torque))


def robust_least_squares(regressor: np.ndarray, torque: np.ndarray, iterations: int = 50,
                         tolerance: float = 1e-9) -> Estimate:
    """Huber IRLS on W (N, n, r), y (N, n) (``robust_least_squares_reduced``)."""
    return robust_least_squares_reduced(_reduced(regressor, torque), lambda: [(regressor, torque)],
                                        iterations, tolerance)


def _reduced(regressor: np.ndarray, torque: np.ndarray) -> ReducedForm:
    regressor, torque = np.asarray(regressor, dtype=float), np.asarray(torque, dtype=float)
    if regressor.ndim != 3 or torque.shape != regressor.shape[:2]:
        raise ValueError(f"torque shape {torque.shape} does not match regressor {regressor.shape}")
    return ReducedForm.empty(regressor.shape[1], regressor.shape[2]).add(regressor, torque)


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


def estimate_reduced(reduced: ReducedForm, method: str = "wls", ridge_alpha: float = 1e-6, robust: bool = False,
                     blocks: Blocks | None = None) -> Estimate:
    """The estimator named ``method`` (one of ESTIMATORS) on a reduced form; ``robust`` replaces
    it by ``robust_least_squares_reduced`` (which weights per joint like wls; not combinable with
    ridge), which reads the data again from ``blocks``."""
    if method not in ESTIMATORS:
        raise ValueError(f"unknown estimator '{method}'; choose one of {ESTIMATORS}")
    if robust:
        if method == "ridge":
            raise ValueError("robust weighting is not available with the ridge estimator")
        if blocks is None:
            raise ValueError("robust weighting reads the data again: pass its blocks")
        return robust_least_squares_reduced(reduced, blocks)
    if method == "ols":
        return least_squares_reduced(reduced)
    if method == "ridge":
        return ridge_reduced(reduced, ridge_alpha)
    return weighted_least_squares_reduced(reduced)


def estimate(regressor: np.ndarray, torque: np.ndarray, method: str = "wls", ridge_alpha: float = 1e-6,
             robust: bool = False) -> Estimate:
    """``estimate_reduced`` on the whole W (N, n, r) and y (N, n) at once."""
    return estimate_reduced(_reduced(regressor, torque), method, ridge_alpha, robust,
                            lambda: [(regressor, torque)])
