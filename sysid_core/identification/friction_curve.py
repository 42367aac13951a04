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
(its linear parameters exactly, its nonlinear ones by ``fit_nonlinear``), with its RMSE.
"""
from __future__ import annotations

from dataclasses import dataclass
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
    """A law fitted to a joint's points: ``friction`` (JointFriction), ``rmse`` N m."""

    friction: JointFriction
    rmse: float


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
        curves[name] = FrictionCurve(friction, float(np.sqrt(np.mean((friction.torque(v) - f) ** 2))))
    return curves
