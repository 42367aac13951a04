"""Design criteria: how much a trajectory's base regressor tells about the parameters, as one number.

W (rows, r) is the base regressor on a grid of states, rows = samples x joints in sample-major
order (joint j of sample g is row g n + j). Every criterion here is to be *minimised* and comes
with its matrix gradient dV/dW (rows, r), so that an optimizer gets the gradient with respect to
anything W depends on by the chain rule (``design`` does it for the Fourier coefficients).

``d_optimal``
    V = -(1/r) log det F~, F~ = S W' Sigma^-1 W S / G: the information matrix of the base
    parameters (Sigma = diag of each joint's torque noise variance, relative to their mean),
    per grid sample (G samples), with the columns in units of a reference scale S (each column's
    RMS on random well-spread states): unit-free, and exp(-V) is the geometric mean of F~'s
    eigenvalues, the information per sample relative to random states. Minimising V minimises
    the volume of the parameters' confidence ellipsoid; S shifts V by a constant only.
    dV = -(1/r) tr(F~^-1 dF~), so dV/dW = -(2 / (r G)) Sigma^-1 W S F~^-1 S.
``payload``
    The same for the columns of interest I only (the terminal body's parameters), the others N
    (friction, armature) being nuisance parameters estimated alongside: the information about I
    is the Schur complement F~_II - F~_IN F~_NN^-1 F~_NI, whose log det is
    log det F~ - log det F~_NN. ``V = -(1/|I|) (log det F~ - log det F~_NN)``, and
    ``dV/dW = -(2 / (|I| G)) Sigma^-1 W S (F~^-1 - F~_NN^-1 padded with zeros) S``.
``condition``
    V = log(sigma_1 / sigma_r) of W with unit-norm columns (D = column norms): unit-free, the
    number the identification reports as the scaled condition number. With u_k, v_k the
    singular vectors of W D^-1, d sigma_k = u_k' d(W D^-1) v_k; through D (dD_c = W_c' dW_c / D_c)
    column c of dV/dW is (E_c - (E_c' Ws_c) Ws_c) / D_c with E = u_1 v_1'/sigma_1 - u_r v_r'/sigma_r
    and Ws = W D^-1.
``log_condition_bound`` (a constraint, not a criterion: ``design`` caps it)
    A smooth upper bound on log(sigma_1 / sigma_r) of W with unit-norm columns: with l_k the
    log eigenvalues of G = Ws' Ws, log cond = (max l - min l) / 2, and the soft maximum
    (1/p) log sum exp(p l_k) (at least max l, at most log(r) / p above it) and the soft minimum
    -(1/p) log sum exp(-p l_k) give V = ((1/p) LSE(p l) + (1/p) LSE(-p l)) / 2 >= log cond,
    smooth where the condition number itself is not (where sigma_1 or sigma_r is multiple). With
    G = U diag(lambda) U', dV/dG = U diag((s+ - s-) / (2 lambda)) U' =: M (s+-, the soft max and
    min weights: softmax(+-p l)), so dV/dWs = 2 Ws M, and through the column norms as above.
    G squares the condition number: the bound is accurate up to condition numbers of about 1e6,
    far beyond any cap worth asking (design caps at tens).
``weighted``
    Liu et al. (Actuators 2023): log of (w_a + w_v + w_g) cond(W) + w_a cond(W_a) + w_v cond(W_v)
    + w_g cond(W_g), rows divided by each joint's noise standard deviation, W_a, W_v, W_g the
    parts of W driven by acceleration, velocity and position alone (raw condition numbers, a
    part's over its own structural rank). d cond = cond (u_1' dW v_1 / sigma_1 - u_k' dW v_k / sigma_k).

A matrix whose information matrix is singular (a base parameter not excited at all) has
V = inf; its gradient is then zero.
"""
from __future__ import annotations

import numpy as np

CRITERIA = ("d_optimal", "payload", "condition", "weighted")


def _weighted_rows(matrix: np.ndarray, row_weight: np.ndarray) -> np.ndarray:
    """(rows, r) with row i multiplied by row_weight[i mod n] (sample-major rows)."""
    n = row_weight.shape[0]
    return (matrix.reshape(-1, n, matrix.shape[-1]) * row_weight[None, :, None]).reshape(matrix.shape)


def log_det_information(matrix: np.ndarray, row_weight: np.ndarray, scale: np.ndarray,
                        interest: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """D-optimality (``interest`` None) or the D-optimality of the Schur complement of the
    columns ``interest`` (indices into the r columns): (V, dV/dW (rows, r)).

    matrix W (rows, r), rows = samples x n joints; row_weight (n,) each joint's 1 / noise standard
    deviation relative to the others (1 = equal noise); scale (r,) > 0 each column's reference
    size (the information is taken of W / scale: unit-free). See the module docstring.
    """
    rows, r = matrix.shape
    samples = rows // row_weight.shape[0]
    scaled = matrix / scale
    weighted = _weighted_rows(scaled, row_weight)
    info = weighted.T @ weighted / samples
    try:
        chol = np.linalg.cholesky(info)
        inverse = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        return np.inf, np.zeros_like(matrix)
    log_det = 2.0 * float(np.sum(np.log(np.diag(chol))))
    count = r
    if interest is not None:
        nuisance = np.setdiff1d(np.arange(r), interest)
        count = len(interest)
        if nuisance.size:
            sub = info[np.ix_(nuisance, nuisance)]
            try:
                chol_sub = np.linalg.cholesky(sub)
            except np.linalg.LinAlgError:
                return np.inf, np.zeros_like(matrix)
            log_det -= 2.0 * float(np.sum(np.log(np.diag(chol_sub))))
            inverse = inverse.copy()
            inverse[np.ix_(nuisance, nuisance)] -= np.linalg.inv(sub)
    value = -log_det / count
    weights_sq = row_weight ** 2
    grad = _weighted_rows(scaled @ inverse, weights_sq) / scale * (-2.0 / (count * samples))
    return value, grad


def _extreme_singular(matrix: np.ndarray, rank: int) -> tuple:
    """(sigma_1, u_1, v_1), (sigma_rank, u_rank, v_rank) of ``matrix`` (rows, r), rank <= r."""
    u, s, vt = np.linalg.svd(matrix, full_matrices=False)
    k = rank - 1
    return (s[0], u[:, 0], vt[0]), (s[k], u[:, k], vt[k])


def log_condition_scaled(matrix: np.ndarray) -> tuple[float, np.ndarray]:
    """log(sigma_1 / sigma_r) of ``matrix`` (rows, r) with unit-norm columns, and its gradient
    with respect to the unscaled matrix (rows, r). inf (zero gradient) when a column is zero or
    the rank is lost."""
    norms = np.linalg.norm(matrix, axis=0)
    if np.any(norms <= 0):
        return np.inf, np.zeros_like(matrix)
    scaled = matrix / norms
    (s_top, u_top, v_top), (s_low, u_low, v_low) = _extreme_singular(scaled, matrix.shape[1])
    if not s_low > 0:
        return np.inf, np.zeros_like(matrix)
    outer = np.outer(u_top, v_top) / s_top - np.outer(u_low, v_low) / s_low
    grad = (outer - np.sum(outer * scaled, axis=0) * scaled) / norms
    return float(np.log(s_top / s_low)), grad


def log_condition_bound(matrix: np.ndarray, sharpness: float) -> tuple[float, np.ndarray]:
    """Smooth upper bound (at most log(r) / sharpness above it) on log(sigma_1 / sigma_r) of
    ``matrix`` (rows, r) with unit-norm columns, and its gradient with respect to the unscaled
    matrix (rows, r); see the module docstring. inf (zero gradient) when a column is zero or the
    rank is lost. sharpness p > 0: the power of the eigenvalues in the soft maximum and minimum."""
    norms = np.linalg.norm(matrix, axis=0)
    if np.any(norms <= 0):
        return np.inf, np.zeros_like(matrix)
    scaled = matrix / norms
    eigenvalues, vectors = np.linalg.eigh(scaled.T @ scaled)
    if not eigenvalues[0] > 0:
        return np.inf, np.zeros_like(matrix)
    logs = np.log(eigenvalues)
    high, low = sharpness * (logs - logs[-1]), -sharpness * (logs - logs[0])   # <= 0: no overflow
    soft_max = logs[-1] + np.log(np.sum(np.exp(high))) / sharpness
    soft_min = logs[0] - np.log(np.sum(np.exp(low))) / sharpness
    weight_max, weight_min = np.exp(high) / np.sum(np.exp(high)), np.exp(low) / np.sum(np.exp(low))
    middle = (vectors * ((weight_max - weight_min) / (2.0 * eigenvalues))) @ vectors.T      # dV/dG (r, r)
    outer = 2.0 * scaled @ middle                                                            # dV/dWs
    grad = (outer - np.sum(outer * scaled, axis=0) * scaled) / norms
    return float(0.5 * (soft_max - soft_min)), grad


def weighted_condition(matrices, weights, ranks, row_weight: np.ndarray) -> tuple[float, list]:
    """Liu et al.'s criterion from the whole regressor and its parts.

    matrices: [W, W_a, W_v, W_g] (rows, r) each; weights (w_a, w_v, w_g) >= 0; ranks: the
    structural ranks of the three parts (None for W: all columns); row_weight (n,) 1 / noise std.
    Returns (log of the criterion, [dV/dW, dV/dW_a, dV/dW_v, dV/dW_g]).
    """
    term_weights = [float(np.sum(weights))] + [float(w) for w in weights]
    term_ranks = [matrices[0].shape[1]] + list(ranks)
    total, parts = 0.0, []
    for matrix, weight, rank in zip(matrices, term_weights, term_ranks):
        if weight <= 0 or rank <= 0:
            parts.append(None)
            continue
        weighted = _weighted_rows(matrix, row_weight)
        (s_top, u_top, v_top), (s_low, u_low, v_low) = _extreme_singular(weighted, rank)
        if not s_low > 0:
            return np.inf, [np.zeros_like(m) for m in matrices]
        cond = s_top / s_low
        total += weight * cond
        outer = cond * (np.outer(u_top, v_top) / s_top - np.outer(u_low, v_low) / s_low)
        parts.append((weight, _weighted_rows(outer, row_weight)))
    grads = [np.zeros_like(m) if p is None else p[0] * p[1] / total for m, p in zip(matrices, parts)]
    return float(np.log(total)), grads
