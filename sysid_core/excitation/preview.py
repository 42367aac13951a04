"""A planned profile sent ahead: knots that a simulated arm samples at its own rate.

A commander that knows its whole plan need not stream it sample by sample: it sends knots
(time, q, dq, ddq and the feed-forward torque), as a trajectory_msgs/JointTrajectory does,
and the arm samples them at every control period, as a joint_trajectory_controller does:
positions by the quintic Hermite polynomial through the two neighbouring knots (exact for
q, dq and ddq at each knot, so exact for any quintic between them), velocities by its
derivative, the feed-forward torque linearly.

``knots`` picks every k-th sample of a uniformly sampled profile (and its last), then every
sample of each interval where the polynomial departs from the profile at a sample by more
than the tolerances below: where the profile is not smooth at the knot spacing (its
accelerations, and with them the feed-forward, step at the seams of approach, plan and
rest). The arm then gets, at every sample of the profile, the profile within them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .trajectory import Trajectory

# seconds between knots: 2,400 knots for a 24 s profile, against 24,000 samples at 1 kHz
KNOT_SPACING_S = 0.01
# what a sample of the preview may miss the profile by: far below any joint encoder's
# resolution (a 16-bit Damiao position over 25 rad resolves 4e-4 rad) and the torque noise
Q_TOLERANCE = 1e-6        # rad
DQ_TOLERANCE = 1e-4       # rad/s
EFFORT_TOLERANCE = 1e-3   # share of the profile's largest feed-forward torque


@dataclass(frozen=True, eq=False)
class Preview:
    """Knots of a profile: ``time`` (K,) s from the profile's start, strictly increasing;
    ``q`` (K, n) rad, ``dq`` (K, n) rad/s, ``ddq`` (K, n) rad/s^2, ``effort`` (K, n) N m."""

    time: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    effort: np.ndarray

    def __post_init__(self):
        k = self.time.shape[0] if self.time.ndim == 1 else -1
        if k < 1:
            raise ValueError(f"a preview needs a 1-D time of at least one knot, got shape {self.time.shape}")
        n = self.q.shape[1] if self.q.ndim == 2 else -1
        for name in ("q", "dq", "ddq", "effort"):
            value = getattr(self, name)
            if value.shape != (k, n):
                raise ValueError(f"preview {name} has shape {value.shape}, expected ({k}, n) like q")
        for name in ("time", "q", "dq", "ddq", "effort"):
            if not np.all(np.isfinite(getattr(self, name))):
                raise ValueError(f"preview {name} holds NaN or infinite values")
        if np.any(np.diff(self.time) <= 0):
            raise ValueError("preview times must increase strictly")

    @property
    def end(self) -> float:
        """Time (s) of the last knot; later samples hold it."""
        return float(self.time[-1])

    def sample(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, dq, effort), each (m, n), at the times t (m,) s; before the first knot the first
        knot, after the last the last (its velocity included, as a trajectory controller holds
        the end point it was given)."""
        t = np.asarray(t, dtype=float)
        time = self.time
        if time.shape[0] == 1:
            return tuple(np.repeat(a[:1], t.shape[0], axis=0) for a in (self.q, self.dq, self.effort))
        t = np.clip(t, time[0], time[-1])
        i = np.clip(np.searchsorted(time, t, side="right") - 1, 0, time.shape[0] - 2)
        h = (time[i + 1] - time[i])[:, None]
        s = ((t - time[i])[:, None]) / h
        q0, q1 = self.q[i], self.q[i + 1]
        v0, v1 = self.dq[i] * h, self.dq[i + 1] * h      # derivatives in s, the unit interval
        a0, a1 = self.ddq[i] * h * h, self.ddq[i + 1] * h * h
        # quintic Hermite basis: value, first and second derivative at both ends of [0, 1]
        s2, s3 = s * s, s * s * s
        s4, s5 = s3 * s, s3 * s2
        h00 = 1 - 10 * s3 + 15 * s4 - 6 * s5
        h10 = s - 6 * s3 + 8 * s4 - 3 * s5
        h20 = 0.5 * (s2 - 3 * s3 + 3 * s4 - s5)
        h01 = 10 * s3 - 15 * s4 + 6 * s5
        h11 = -4 * s3 + 7 * s4 - 3 * s5
        h21 = 0.5 * (s3 - 2 * s4 + s5)
        q = h00 * q0 + h10 * v0 + h20 * a0 + h01 * q1 + h11 * v1 + h21 * a1
        d00 = -30 * s2 + 60 * s3 - 30 * s4
        d10 = 1 - 18 * s2 + 32 * s3 - 15 * s4
        d20 = 0.5 * (2 * s - 9 * s2 + 12 * s3 - 5 * s4)
        d11 = -12 * s2 + 28 * s3 - 15 * s4
        d21 = 0.5 * (3 * s2 - 8 * s3 + 5 * s4)
        dq = (d00 * q0 + d10 * v0 + d20 * a0 - d00 * q1 + d11 * v1 + d21 * a1) / h
        effort = (1 - s) * self.effort[i] + s * self.effort[i + 1]
        return q, dq, effort


def knots(profile: Trajectory, feedforward: np.ndarray, spacing_s: float = KNOT_SPACING_S) -> Preview:
    """The knots of ``profile`` (uniform, N samples) with ``feedforward`` (N, n) N m along it:
    every k-th sample, k = round(spacing_s * rate) >= 1, the last one, and every sample of an
    interval the polynomial would miss by more than the tolerances (see the module docstring)."""
    time = np.asarray(profile.time, dtype=float)
    if time.shape[0] < 2:
        raise ValueError("a profile to preview needs at least 2 samples")
    feedforward = np.asarray(feedforward, dtype=float)
    step = max(1, int(round(spacing_s / (time[1] - time[0]))))
    chosen = np.zeros(time.shape[0], dtype=bool)
    chosen[::step] = True
    chosen[-1] = True
    preview = _preview(profile, feedforward, chosen)
    q, dq, effort = preview.sample(preview.time[0] + time - time[0])
    peak = max(float(np.max(np.abs(feedforward))), 1e-12)
    missed = (np.any(np.abs(q - profile.q) > Q_TOLERANCE, axis=1) | np.any(np.abs(dq - profile.dq) > DQ_TOLERANCE, axis=1)
              | np.any(np.abs(effort - feedforward) > EFFORT_TOLERANCE * peak, axis=1))
    if missed.any():  # knots never miss: every sample of an interval holding a miss becomes one
        start = np.cumsum(chosen) - 1  # per sample, the knot that starts its interval
        chosen |= np.isin(start, start[missed])
        preview = _preview(profile, feedforward, chosen)
    return preview


def _preview(profile: Trajectory, feedforward: np.ndarray, chosen: np.ndarray) -> Preview:
    time = np.asarray(profile.time, dtype=float)
    return Preview(time=time[chosen] - time[0], q=profile.q[chosen], dq=profile.dq[chosen],
                   ddq=profile.ddq[chosen], effort=feedforward[chosen])
