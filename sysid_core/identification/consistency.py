"""Physically consistent standard parameters from a base-parameter estimate.

A body is realisable exactly when its pseudo-inertia J(theta) (linear in theta) is
positive definite (inertia.py). The consistent solution minimises::

    f(theta) = |S^-1 (P theta - beta)|^2 + |N^T D^-1 (theta - theta_nominal)|^2
               [+ |(theta_L - theta_nominal_L) / (LINK_ACCURACY D_L)|^2]

over theta with every J_i - F_i positive definite and every sign-constrained joint term
(friction, armature) non-negative. S S^T is the covariance of the base estimate beta, so
deviating by one standard deviation costs one unit. D = diag(prior_scale) and N (p, p - r) is
an orthonormal basis of the null space of P D: the nominal model enters only in the
directions the base parameters cannot see, never as a pull on a combination the data
determine. Where the unconstrained estimate is already a set of real bodies with non-negative
joint terms, the answer is that estimate (its standard set nearest the nominal model in the
metric D); where it is not, the constraints move it as few standard deviations as they must.
The bracketed term, only for the links a caller marks as modelled (``modelled``: the full
scope's links but the payload's), holds them to what a CAD model knows in every direction,
where the data tell them only weakly too.
The floor F_i (``realisable_floor``) keeps a margin: the part of the body a model file holds
(the identified body less the welded bodies that keep their own inertials) stays a real body
with at least MARGIN of the nominal body's mass and second moments, so MuJoCo's compiler,
which rejects a body on the boundary (principal moments with A + B < C by any amount, or an
eigenvalue below 1e-14), accepts every written model with room to spare for the ten
significant digits it is written with. f is a convex quadratic, strictly convex because the
rows of P and N together span every direction, and the feasible set is convex, so a log-det
barrier with Newton steps (-mu sum log det J_i - mu sum log x_j, mu -> 0) reaches the unique
optimum reliably; the barrier's gradient and Hessian are closed-form because J is linear in
theta.
"""
from __future__ import annotations

import numpy as np

from ..dynamics.inertia import from_pseudo_inertia, pseudo_inertia
from ..errors import IdentificationError

LENGTH_SCALE = 0.1  # m: the size of a link, to scale first moments and inertias of the prior
RELATIVE_FLOOR = 1e-6  # smallest relative standard deviation granted to a base parameter
# Margin of the consistent set, relative to the nominal body: a real link's second moment about
# its thinnest axis is some 1e-3 of the mean (a plate 3 % as thick as it is wide), so 1e-5 leaves
# every real body feasible while its A + B - C stays a 1e-5 fraction of C, far above round-off.
MARGIN = 1e-5
# Width of a joint term the model does not give, relative to the arm's largest body width: wide
# enough that, in a direction it shares with a body, the term moves and the body does not.
UNKNOWN_WIDTH = 1e3
# How far a modelled link (a body of the model file that carries nothing unknown) may be from
# its model, relative to prior_scale's widths: 10 % of its mass, its centre of mass within 1 cm,
# its second moments within its mass times (3 cm)^2, what a CAD model of a link gives.
LINK_ACCURACY = 0.1
# Width of an open body (a payload's) between a body's and an unknown term's: a leak of
# (1 / TERMINAL_WIDTH)^2 into the other bodies and of (TERMINAL_WIDTH / UNKNOWN_WIDTH)^2 from the
# unknown terms, each about 1e-3.
TERMINAL_WIDTH = UNKNOWN_WIDTH ** 0.5
_BASIS = pseudo_inertia(np.eye(10))  # (10, 4, 4): dJ / dtheta_k


def nearest_consistent(theta: np.ndarray, margin: float = 1e-6, floor: np.ndarray | None = None) -> np.ndarray:
    """theta (nb, 10) with the eigenvalues of each J - F (pseudo-inertia less ``floor`` (nb, 4, 4),
    default 0) raised to at least ``margin`` times its largest (and 1e-12, for a body of all
    zeros): the nearest bodies above the floor in the Frobenius norm of J."""
    theta = np.atleast_2d(theta)
    floor = np.zeros((len(theta), 4, 4)) if floor is None else floor
    eigval, eigvec = np.linalg.eigh(pseudo_inertia(theta) - floor)
    least = np.maximum(margin * np.max(np.abs(eigval), axis=1, keepdims=True), 1e-12)
    return from_pseudo_inertia(floor + (eigvec * np.maximum(eigval, least)[:, None, :]) @ np.swapaxes(eigvec, 1, 2))


def realisable_floor(nominal_bodies: np.ndarray, welded_bodies: np.ndarray | None = None,
                     margin: float = MARGIN) -> np.ndarray:
    """F (nb, 4, 4): the pseudo-inertia a body's J must exceed to keep its written part real.

    ``nominal_bodies`` (nb, 10) the model's bodies (welded ones merged) set the scale: margin
    times diag(s, s, s, m) with m the nominal mass and s its mean second moment about the centre
    of mass (tr I_c / 6); ``welded_bodies`` (nb, 10) the welded bodies each moving body carries,
    which keep their own inertials in a written model (default none).
    """
    nominal = np.atleast_2d(np.asarray(nominal_bodies, dtype=float))
    mass = np.maximum(nominal[:, 0], 1e-12)
    sigma = pseudo_inertia(nominal)[:, :3, :3] - np.einsum("bi,bj->bij", nominal[:, 1:4], nominal[:, 1:4]) \
        / mass[:, None, None]
    second = np.maximum(np.trace(sigma, axis1=1, axis2=2) / 3.0, 1e-12 * mass)
    floor = margin * np.einsum("bi,ij->bij", np.column_stack([second, second, second, mass]), np.eye(4))
    if welded_bodies is not None:
        floor = floor + pseudo_inertia(np.atleast_2d(welded_bodies))
    return floor


def prior_scale(nominal_bodies: np.ndarray, nominal_joint: np.ndarray, open_bodies=None) -> np.ndarray:
    """Prior widths (p,) of the standard parameters where the data are silent
    (``consistent_parameters``), in three tiers:

    * a body: 100 % of its nominal mass, at link scale for h and I;
    * an open body (``open_bodies`` (nb,) bool, default none: one that carries what the model
      does not know, a payload): TERMINAL_WIDTH times the arm's largest body widths, so that in
      a direction it shares with the other bodies the change goes to it;
    * a joint term: its own nominal size where the model gives one, and UNKNOWN_WIDTH times the
      arm's largest body width where it does not (0: a term a model file leaves out, friction
      or rotor inertia on nearly every URDF, is unknown, not known to be zero). Where a joint
      term and a body share one base parameter (a rotor's armature and the inertia of the link
      it turns), the combination goes to the unknown term and the body keeps its value.
    """
    mass = np.maximum(nominal_bodies[:, 0], 1e-3)
    per_body = np.column_stack([mass] + [mass * LENGTH_SCALE] * 3 + [mass * LENGTH_SCALE**2] * 6)
    largest = np.max(per_body, axis=0, initial=1e-3)
    if open_bodies is not None:
        per_body[np.asarray(open_bodies, dtype=bool)] = TERMINAL_WIDTH * largest
    joint = np.where(np.asarray(nominal_joint) != 0, np.abs(nominal_joint), UNKNOWN_WIDTH * float(np.max(largest)))
    return np.concatenate([per_body.reshape(-1), joint])


def _null_space(projection: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Orthonormal basis (p, p - r) of the null space of ``projection`` (r, p) scaled by
    ``scale`` (p,): the directions of the scaled standard parameters no base parameter sees."""
    _, _, vt = np.linalg.svd(projection * scale, full_matrices=True)
    return vt[np.linalg.matrix_rank(projection * scale):].T


def _whitening(beta: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the base estimate's covariance, its uncertainty floored at a
    millionth: noise-free data would otherwise give standard deviations of ~1e-15 and Newton
    systems too ill-conditioned to solve accurately."""
    magnitude = np.maximum(np.abs(beta), 1e-6 * float(np.max(np.abs(beta))))
    return np.linalg.cholesky(covariance + np.diag((RELATIVE_FLOOR * magnitude) ** 2))


def consistency_distance(projection: np.ndarray, beta: np.ndarray, covariance: np.ndarray,
                         theta: np.ndarray) -> float:
    """How far the base parameters of ``theta`` (p,) lie from the estimate ``beta`` (r,), in its
    standard deviations (the Mahalanobis distance in the metric consistent_parameters uses)."""
    gap = np.linalg.solve(_whitening(beta, covariance), projection @ theta - beta)
    return float(np.linalg.norm(gap))


def _barrier(theta: np.ndarray, n_bodies: int, signed: np.ndarray, floor: np.ndarray):
    """-sum log det (J_i - F_i) - sum log x_j (x_j: the sign-constrained joint terms, ``signed``
    (k,) bool; F_i ``floor``) with gradient and Hessian; None outside the domain."""
    bodies = theta[:10 * n_bodies].reshape(n_bodies, 10)
    joint = theta[10 * n_bodies:]
    # unconstrained terms (offsets) enter as 1: log 1 = 0, and their derivatives are zeroed
    x = np.where(signed, joint, 1.0)
    if not np.all(x > 0):
        return None
    try:  # the domain: every J - F positive definite, as Cholesky finds it
        chol = np.linalg.cholesky(pseudo_inertia(bodies) - floor)
    except np.linalg.LinAlgError:
        return None
    diagonal = np.diagonal(chol, axis1=1, axis2=2)
    if not np.all(diagonal > 0):  # NaN: Cholesky passes it through without raising
        return None
    value = -2.0 * np.sum(np.log(diagonal)) - np.sum(np.log(x))
    # M_k = L^-1 dJ/dtheta_k L^-T, symmetric: tr(J^-1 dJ_k) = tr(M_k), tr(J^-1 dJ_k J^-1 dJ_l) =
    # sum(M_k * M_l). A Gram matrix, so the Hessian stays positive semidefinite to rounding even
    # next to the boundary, where J^-1 dJ_k J^-1 dJ_l came out with diagonals of -1e33
    inv_chol = np.linalg.inv(chol)
    m = np.einsum("bij,kjl,bml->bkim", inv_chol, _BASIS, inv_chol)
    grad_bodies = -np.einsum("bkii->bk", m)
    hess_bodies = np.einsum("bkij,blij->bkl", m, m)
    grad = np.concatenate([grad_bodies.reshape(-1), np.where(signed, -1.0 / x, 0.0)])
    hess = np.zeros((theta.size, theta.size))
    for b, block in enumerate(hess_bodies):  # block diagonal: a body's and each joint term's own
        hess[10 * b:10 * b + 10, 10 * b:10 * b + 10] = block
    joint_diagonal = np.arange(10 * n_bodies, theta.size)
    hess[joint_diagonal, joint_diagonal] = np.where(signed, 1.0 / x**2, 0.0)
    return value, grad, hess


def consistent_parameters(projection: np.ndarray, beta: np.ndarray, covariance: np.ndarray,
                          nominal: np.ndarray, n_bodies: int, tolerance: float = 1e-10,
                          nonnegative: np.ndarray | None = None, floor: np.ndarray | None = None,
                          modelled: np.ndarray | None = None) -> np.ndarray:
    """Standard parameters (p,) closest to the data, physically consistent.

    ``projection`` (r, p) maps standard to base parameters; ``beta`` (r,) and ``covariance``
    (r, r) are the base estimate; ``nominal`` (p,) the model's parameters, whose first
    10 * n_bodies entries are bodies and the rest joint terms. ``nonnegative`` (p - 10
    n_bodies,) bool marks the joint terms that cannot be negative (friction, armature; not
    a torque offset); default all. ``floor`` (n_bodies, 4, 4) the pseudo-inertia each body must
    exceed (``realisable_floor``; default that of the nominal bodies without welded parts).
    ``modelled`` (n_bodies,) bool marks the links whose model is trusted in every direction,
    to LINK_ACCURACY of prior_scale's widths; the others are open (prior_scale). Default: no
    body trusted and none open. In the full scope every body is modelled but the one a payload
    is bolted to, so that what the data tell only weakly (on light arms whose rotors dwarf
    their links, a payload's mass shares its base parameters with the links' first moments)
    goes to the payload and not to links a model file describes well.
    Bodies come out strictly above their floor, those joint terms strictly positive (a term
    the data put at zero comes out within ``tolerance`` of it, relative).
    """
    n_inertial = 10 * n_bodies
    signed = np.ones(len(nominal) - n_inertial, dtype=bool) if nonnegative is None \
        else np.asarray(nonnegative, dtype=bool)
    if signed.shape != (len(nominal) - n_inertial,):
        raise ValueError(f"nonnegative has shape {signed.shape}, expected ({len(nominal) - n_inertial},)")
    nominal_bodies = nominal[:n_inertial].reshape(n_bodies, 10)
    floor = realisable_floor(nominal_bodies) if floor is None else np.asarray(floor, dtype=float)
    modelled = None if modelled is None else np.asarray(modelled, dtype=bool)
    scale = prior_scale(nominal_bodies, nominal[n_inertial:], None if modelled is None else ~modelled)
    whiten = _whitening(beta, covariance)
    prior = _null_space(projection, scale).T / scale  # (p - r, p): the rows the data leave free
    if modelled is not None:
        links = np.flatnonzero(np.repeat(modelled, 10))
        held = np.zeros((links.size, len(nominal)))
        held[np.arange(links.size), links] = 1.0 / (LINK_ACCURACY * scale[links])
        prior = np.vstack([prior, held])
    a = np.vstack([np.linalg.solve(whiten, projection), prior])
    b = np.concatenate([np.linalg.solve(whiten, beta), prior @ nominal])
    gram, rhs = a.T @ a, a.T @ b

    def objective(theta):
        r = a @ theta - b
        return r @ r

    # strictly feasible start at the data: the unconstrained optimum (the base estimate's
    # standard set with no null-space part), each body nudged inside the cone, joint terms made
    # positive
    theta = nominal + scale * (np.linalg.pinv(projection * scale) @ (beta - projection @ nominal))
    theta[:n_inertial] = nearest_consistent(theta[:n_inertial].reshape(n_bodies, 10), 1e-3, floor).reshape(-1)
    # (an unknown term's width is far too wide a measure of its size: a thousandth of the bodies')
    size = np.minimum(scale[n_inertial:], float(np.max(scale[:n_inertial], initial=1e-3)))
    theta[n_inertial:] = np.where(signed, np.maximum(theta[n_inertial:], 1e-3 * size), theta[n_inertial:])
    mu = max(objective(theta), 1.0) / len(theta)
    while True:
        for _ in range(100):  # Newton on f + mu * barrier
            value, grad_b, hess_b = _barrier(theta, n_bodies, signed, floor)
            grad = 2.0 * (gram @ theta - rhs) + mu * grad_b
            hess = 2.0 * gram + mu * hess_b
            d = 1.0 / np.sqrt(np.diag(hess))  # Jacobi scaling: the data weights span many decades
            step = -d * np.linalg.solve(hess * d[:, None] * d[None, :], d * grad)
            if not np.all(np.isfinite(step)):  # a Newton system past solving: keep the last iterate
                break
            decrement = -grad @ step
            if decrement < 1e-3 * mu * len(theta):  # a small fraction of the barrier's gap
                break
            current = objective(theta) + mu * value
            t = 1.0
            while t > 1e-12:  # backtrack: stay inside the domain and decrease
                trial = theta + t * step
                barrier = _barrier(trial, n_bodies, signed, floor)
                if barrier is not None and objective(trial) + mu * barrier[0] <= current - 0.25 * t * decrement:
                    break
                t *= 0.5
            else:
                break
            theta = trial
        if mu * len(theta) < tolerance * max(objective(theta), 1.0):
            return theta
        mu *= 0.1
        if mu < 1e-300:
            raise IdentificationError("the consistent-parameter solver did not converge")
