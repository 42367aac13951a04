"""Friction curves from a friction sweep: torque against velocity, point by point, and each
friction law fitted to the points.

Each cruise of a sweep (``excitation.friction_sweep``) is one point per direction: the mean
torque of the moving joint over the cruise's samples, its first and last ``SETTLE_FRACTION``
left out (the tracking settles after the ramp; leaving out both ends keeps the two directions
on the same positions). The two directions of one speed cross the same
positions, so half their difference is the friction's odd part, tau_f(v) = (tau(+v) - tau(-v)) / 2,
whatever the gravity load and however wrong the model's: the points need no model. Given the
arm's gravity torque at the measured positions, each direction is measured on its own,
tau_f(+-v) = tau(+-v) - g, which the direction-dependent laws (``asymmetric``,
``high_low_speed``) need.

Each law of ``dynamics.friction`` is fitted per joint to the points by separable least squares
(its linear parameters exactly, its nonlinear ones by ``fit_nonlinear``), with its RMSE and the
standard deviation of each parameter (``parameter_std``). ``choose_law`` picks, per joint, the
law the points support best for the fewest parameters (Bayesian information criterion), the law
a later identification takes as the joint's known friction (``known_friction``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..dynamics.friction import FRICTION_MODELS, FrictionModel, JointFriction, features, fit_nonlinear
from ..errors import DataError, IdentificationError
from .estimation import estimate
from .recording import Recording

SETTLE_FRACTION = 0.2
# a cruise whose measured velocity strays from the planned one by more than this fraction (its
# mean, or its standard deviation) was no constant-velocity move: a joint in stick-slip at a
# speed where friction falls with velocity, or one that did not follow; it gives no point
UNSTEADY = 0.25
# a fitted law whose curve reaches beyond this multiple of the largest measured friction
# anywhere between the points is refused
MAX_SWING = 2.0


@dataclass(frozen=True, eq=False)
class FrictionPoints:
    """One joint's measured friction: ``velocity`` (K,) rad/s, ``torque`` (K,) N m the friction
    there, ``std`` (K,) N m the standard error of each mean; ``odd`` True when the points are
    the odd part (each speed's two directions mirrored), False when gravity was subtracted."""

    joint: str
    velocity: np.ndarray
    torque: np.ndarray
    std: np.ndarray
    odd: bool


@dataclass(frozen=True, eq=False)
class FrictionCurve:
    """A law fitted to a joint's points: ``friction`` (JointFriction), ``rmse`` N m, ``std``
    {parameter: standard deviation in its unit, or None where the points do not determine it}
    (``parameter_std``; empty when not computed)."""

    friction: JointFriction
    rmse: float
    std: dict = field(default_factory=dict)


def friction_points(recording: Recording, segments, gravity: Callable[[np.ndarray], np.ndarray] | None = None
                    ) -> list:
    """FrictionPoints per swept joint (in the order of the joints' first segments) from a
    ``recording`` of the sweep whose rows are the sweep's samples (``segments`` index them).
    ``gravity(q (M, n)) -> (M, n)`` N m: subtract it and keep both directions apart; None:
    the odd part of each speed's pair. A cruise that was not steady (UNSTEADY) gives no point,
    nor does its pair's other direction."""
    tau, q = np.asarray(recording.tau, dtype=float), np.asarray(recording.q, dtype=float)
    dq = np.asarray(recording.dq, dtype=float)
    means = {}
    for segment in segments:
        if segment.stop > recording.n_samples:
            raise DataError(f"the recording has {recording.n_samples} samples, the sweep {segment.stop}: it is not "
                            "a recording of this sweep")
        skip = int(SETTLE_FRACTION * (segment.stop - segment.start))
        rows = slice(segment.start + skip, segment.stop - skip)
        speed = dq[rows, segment.joint]
        if abs(np.mean(speed) - segment.velocity) > UNSTEADY * abs(segment.velocity) \
                or np.std(speed) > UNSTEADY * abs(segment.velocity):
            continue  # not a constant-velocity cruise (stick-slip, poor tracking): no point
        measured = tau[rows, segment.joint]
        if gravity is not None:
            measured = measured - gravity(q[rows])[:, segment.joint]
        std = float(np.std(measured) / np.sqrt(max(measured.size, 1)))
        means[(segment.joint, segment.velocity)] = (float(np.mean(measured)), std)
    out = []
    for joint in dict.fromkeys(s.joint for s in segments):
        speeds = sorted({abs(v) for (j, v) in means if j == joint})
        velocity, torque, std = [], [], []
        for v in speeds:
            up, down = means.get((joint, v)), means.get((joint, -v))
            if up is None or down is None:
                continue
            if gravity is None:
                odd = 0.5 * (up[0] - down[0])
                spread = 0.5 * np.hypot(up[1], down[1])
                velocity += [v, -v]
                torque += [odd, -odd]
                std += [spread, spread]
            else:
                velocity += [v, -v]
                torque += [up[0], down[0]]
                std += [up[1], down[1]]
        order = np.argsort(velocity)
        out.append(FrictionPoints(recording.joint_names[joint], np.asarray(velocity)[order],
                                  np.asarray(torque)[order], np.asarray(std)[order], gravity is None))
    return out


def fit_friction_curves(points: FrictionPoints, laws=FRICTION_MODELS) -> dict:
    """{law: FrictionCurve, or the reason it could not be fitted} of each friction law name in
    ``laws`` fitted to one joint's points."""
    v = np.asarray(points.velocity, dtype=float)
    f = np.asarray(points.torque, dtype=float)
    curves = {}
    for name in laws:
        model = FrictionModel(name)
        if len(model.linear_names) + len(model.free) >= v.size:
            curves[name] = f"{v.size} points are too few for its {len(model.linear_names) + len(model.free)} parameters"
            continue
        try:
            nonlinear = fit_nonlinear(np.zeros((v.size, 1, 0)), f[:, None], v[:, None], (model,),
                                      lambda w, y: estimate(w, y, "ols"))[0]
        except IdentificationError as err:
            curves[name] = f"not determined by these points ({err})"
            continue
        linear, *_ = np.linalg.lstsq(features(model, v, nonlinear), f, rcond=None)
        friction = JointFriction(model, tuple(float(x) for x in linear), tuple(nonlinear))
        # between the points, too: a law that threads them with a swing no joint has is not
        # determined by them
        swing = float(np.max(np.abs(friction.torque(np.linspace(v.min(), v.max(), 2001)))))
        if swing > MAX_SWING * float(np.max(np.abs(f))):
            curves[name] = (f"not determined by these points (the fitted curve reaches {swing:.3g} N m between "
                            f"them, the points {np.max(np.abs(f)):.3g} N m)")
            continue
        curves[name] = FrictionCurve(friction, float(np.sqrt(np.mean((friction.torque(v) - f) ** 2))),
                                     parameter_std(points, friction))
    return curves


def _mirrored(points: FrictionPoints) -> int:
    """How many points each independent measurement stands for: 2 for the odd part (each
    speed's pair is one value, mirrored), else 1."""
    return 2 if points.odd else 1


def parameter_std(points: FrictionPoints, friction: JointFriction) -> dict:
    """{parameter: standard deviation} of a law fitted to ``points`` (SI units, None where not
    determined), linearised at the fit: cov = m s^2 (J^T J)^+ with J the derivatives of the
    curve at the points in every parameter (the nonlinear ones by central differences), m the
    points per independent measurement (2 for mirrored points, which repeat each value) and s^2
    the points' scatter about the law, RSS / (K - m p), or the mean square of their own standard
    errors when that is larger (a law through every point is no better known than the points).
    A nonlinear parameter the law was given (not estimated), a threshold (a step in the law: no
    derivative) and every parameter of a law with as many parameters as independent points get
    None; ``static`` (coulomb + stribeck) its own."""
    v = np.asarray(points.velocity, dtype=float)
    model = friction.model
    names = list(model.linear_names) + list(model.nonlinear_names) + (["static"] if "static" in friction.parameters
                                                                       else [])
    smooth = [k for k in model.free if k != "threshold"]
    m = _mirrored(points)
    dof = v.size - m * (len(model.linear_names) + len(smooth))
    if dof <= 0:
        return {k: None for k in names}
    columns = [features(model, v, friction.nonlinear, friction.smoothing)]
    values = dict(zip(model.nonlinear_names, friction.nonlinear))
    for k in smooth:
        step = 1e-5 * abs(values[k])
        shifted = []
        for sign in (1.0, -1.0):
            trial = dict(values, **{k: values[k] + sign * step})
            shifted.append(JointFriction(model, friction.linear, tuple(trial[n] for n in model.nonlinear_names),
                                         friction.smoothing).torque(v))
        columns.append(((shifted[0] - shifted[1]) / (2 * step))[:, None])
    jacobian = np.concatenate(columns, axis=1)
    rss = float(np.sum((friction.torque(v) - np.asarray(points.torque, dtype=float)) ** 2))
    scatter = max(rss / dof, float(np.mean(np.asarray(points.std, dtype=float) ** 2)))
    cov = m * scatter * np.linalg.pinv(jacobian.T @ jacobian)
    order = list(model.linear_names) + smooth
    out = {k: None for k in names}
    for i, k in enumerate(order):
        out[k] = float(np.sqrt(max(cov[i, i], 0.0)))
    if "static" in out:
        a, b = order.index("coulomb"), order.index("stribeck")
        out["static"] = float(np.sqrt(max(cov[a, a] + cov[b, b] + 2 * cov[a, b], 0.0)))
    return out


def choose_law(points: FrictionPoints, curves: dict):
    """The name of the law in ``curves`` ({law: FrictionCurve or reason}) the points support
    best, or None when none was fitted with at most as many parameters as independent points.

    Bayesian information criterion over the K' independent points (K / m, see
    ``parameter_std``): K' ln(RSS' / K') + p ln K', the lowest wins. RSS' is the residual
    sum of squares of the independent points, floored at the sum of the points' own squared
    standard errors: a law closer to the points than they are known is no better for it, so
    between laws that both fit within the points' errors the one with fewer parameters wins."""
    m = _mirrored(points)
    count = np.asarray(points.velocity).size / m
    floor = float(np.sum(np.asarray(points.std, dtype=float) ** 2)) / m
    best, chosen = np.inf, None
    for name, curve in curves.items():
        if not isinstance(curve, FrictionCurve):
            continue
        p = len(curve.friction.model.linear_names) + len(curve.friction.model.free)
        if p > count:
            continue
        rss = count * curve.rmse ** 2
        score = count * np.log(max(rss, floor, np.finfo(float).tiny) / count) + p * np.log(count)
        if score < best:
            best, chosen = score, name
    return chosen
