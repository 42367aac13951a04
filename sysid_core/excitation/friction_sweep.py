"""The friction sweep: each joint alone at a ladder of constant speeds, in both directions.

At constant velocity a lone moving joint's torque is its gravity load plus its friction (no
inertia term, and its own velocity puts no Coriolis torque on it), so a sweep measures the
friction curve tau_f(dq) point by point, before and apart from the link dynamics.

For each joint in turn (the others held where they start), for each speed v of the ladder
(geometric from ``min_velocity`` to ``max_velocity``): from the stroke's low end, a smooth
ramp up to +v, a cruise, a ramp down, a short rest, then the same back at -v to where it
started. The stroke is centred on the middle of the joint's range (inside ``margin`` of each
limit), at most ``span`` long, and each cruise lasts at most ``cruise_s``, so slow speeds make
short strokes. Both directions of one speed cross the same positions, so the gravity load of
the two cruises is the same and cancels in their difference. Ramps are half-cosine in velocity
(peak acceleration ``max_acceleration``); moves between strokes are rest-to-rest quintics
within ``max_velocity`` and ``max_acceleration``.

``friction_sweep`` returns the Trajectory and its segments (``SweepSegment``): for each cruise,
the joint, its velocity and the sample range of the cruise (ramps excluded).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from .trajectory import Trajectory

DWELL_S = 0.2  # rest between the strokes of a speed, s
MIN_MOVE_S = 0.5  # shortest repositioning move, s


@dataclass(frozen=True)
class SweepSegment:
    """One constant-velocity cruise: ``joint`` index, ``velocity`` rad/s (signed), samples
    ``start`` to ``stop`` (a slice of the trajectory's rows)."""

    joint: int
    velocity: float
    start: int
    stop: int


@dataclass(frozen=True, eq=False)
class FrictionSweep:
    trajectory: Trajectory
    segments: tuple


class _Builder:
    """Appends pieces of a profile sampled at ``rate``, keeping the state continuous."""

    def __init__(self, q0: np.ndarray, rate: float):
        self.rate = rate
        self.q = [np.asarray(q0, dtype=float)[None]]
        self.dq = [np.zeros((1, q0.size))]
        self.ddq = [np.zeros((1, q0.size))]
        self.count = 1

    @property
    def now(self) -> np.ndarray:
        return self.q[-1][-1].copy()

    def _append(self, q, dq, ddq) -> tuple:
        start = self.count
        self.q.append(q)
        self.dq.append(dq)
        self.ddq.append(ddq)
        self.count += q.shape[0]
        return start, self.count

    def _samples(self, duration: float) -> np.ndarray:
        """Times within a piece of ``duration`` s, on the grid, the piece's start excluded."""
        steps = max(1, int(np.ceil(duration * self.rate - 1e-9)))
        return np.arange(1, steps + 1) / self.rate, steps / self.rate

    def move(self, target: np.ndarray, max_acceleration: float, max_velocity: float) -> None:
        """Rest to rest to ``target`` along a quintic (peak velocity 1.875 distance / T, peak
        acceleration 5.77 distance / T^2)."""
        start = self.now
        distance = float(np.max(np.abs(target - start)))
        if distance == 0:
            return
        t, duration = self._samples(max(MIN_MOVE_S, np.sqrt(5.78 * distance / max_acceleration),
                                        1.875 * distance / max_velocity))
        s = t / duration
        delta = target - start
        pos = 10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5
        vel = (30 * s ** 2 - 60 * s ** 3 + 30 * s ** 4) / duration
        acc = (60 * s - 180 * s ** 2 + 120 * s ** 3) / duration ** 2
        self._append(start + pos[:, None] * delta, vel[:, None] * delta, acc[:, None] * delta)

    def hold(self, duration: float) -> None:
        t, _ = self._samples(duration)
        zeros = np.zeros((t.size, self.q[0].shape[1]))
        self._append(np.repeat(self.now[None], t.size, axis=0), zeros, zeros.copy())

    def velocity_ramp(self, joint: int, v0: float, v1: float, duration: float) -> None:
        """Joint ``joint``'s velocity from v0 to v1 along a half cosine of ``duration`` s."""
        t, duration = self._samples(duration)
        start = self.now
        n = start.size
        q, dq, ddq = np.repeat(start[None], t.size, axis=0), np.zeros((t.size, n)), np.zeros((t.size, n))
        dv = v1 - v0
        q[:, joint] += v0 * t + 0.5 * dv * (t - duration / np.pi * np.sin(np.pi * t / duration))
        dq[:, joint] = v0 + 0.5 * dv * (1 - np.cos(np.pi * t / duration))
        ddq[:, joint] = 0.5 * dv * np.pi / duration * np.sin(np.pi * t / duration)
        self._append(q, dq, ddq)

    def cruise(self, joint: int, velocity: float, duration: float) -> tuple:
        t, _ = self._samples(duration)
        start = self.now
        q = np.repeat(start[None], t.size, axis=0)
        q[:, joint] += velocity * t
        dq = np.zeros_like(q)
        dq[:, joint] = velocity
        return self._append(q, dq, np.zeros_like(q))

    def trajectory(self) -> Trajectory:
        q = np.concatenate(self.q)
        return Trajectory(time=np.arange(q.shape[0]) / self.rate, q=q, dq=np.concatenate(self.dq),
                          ddq=np.concatenate(self.ddq))


def speed_ladder(min_velocity: float, max_velocity: float, speeds: int) -> np.ndarray:
    """``speeds`` speeds (rad/s) spaced evenly in log from min_velocity to max_velocity: the
    low-speed regime (Stribeck, a Coulomb step) gets as many points as the viscous one."""
    if not (0 < min_velocity < max_velocity and np.isfinite(max_velocity)) or int(speeds) != speeds or speeds < 2:
        raise ValueError(f"need 0 < min_velocity < max_velocity and at least 2 speeds, got {min_velocity}, "
                         f"{max_velocity}, {speeds}")
    return np.geomspace(min_velocity, max_velocity, int(speeds))


def friction_sweep(q_start, joint_range, sample_rate: float, joints=None, min_velocity: float = 0.02,
                   max_velocity: float = 1.0, speeds: int = 8, max_acceleration: float = 2.0, span: float = 1.0,
                   cruise_s: float = 2.0, margin: float = 0.1) -> FrictionSweep:
    """The sweep of ``joints`` (indices, default all) from ``q_start`` (n,) rad at rest, held
    at ``q_start`` brought ``margin`` inside every limit and back there at the end, for an arm
    with ``joint_range`` (n, 2) rad, sampled at ``sample_rate`` Hz.
    Velocities rad/s, ``max_acceleration`` rad/s^2, ``span`` rad (longest stroke), ``cruise_s``
    s (longest cruise), ``margin`` rad (kept from each limit). A speed whose ramps do not fit
    the joint's stroke is left out for that joint. DataError when a joint has no room."""
    q_start = np.asarray(q_start, dtype=float)
    joint_range = np.asarray(joint_range, dtype=float)
    n = q_start.size
    joints = range(n) if joints is None else joints
    if not (max_acceleration > 0 and span > 0 and cruise_s > 0 and margin >= 0 and sample_rate > 0):
        raise ValueError("max_acceleration, span, cruise_s and sample_rate must be > 0 and margin >= 0")
    ladder = speed_ladder(min_velocity, max_velocity, speeds)
    build = _Builder(np.clip(q_start, *joint_range.T), sample_rate)
    # the held pose: where the arm starts, at least ``margin`` inside every limit
    inner = joint_range + np.array([margin, -margin])
    home = np.where(inner[:, 0] <= inner[:, 1], np.clip(build.now, inner[:, 0], inner[:, 1]), joint_range.mean(axis=1))
    home = np.where(np.isfinite(home), home, build.now)
    build.move(home, max_acceleration, max_velocity)
    segments = []
    for j in joints:
        if np.isfinite(joint_range[j]).all():
            lo, hi = joint_range[j] + np.array([margin, -margin])
        else:  # an unlimited joint: strokes about where it is
            lo, hi = home[j] - span / 2, home[j] + span / 2
        if hi - lo <= 0:
            raise DataError(f"joint {j} has no room for a sweep inside {margin} rad of its limits")
        centre, room = 0.5 * (lo + hi), min(span, hi - lo)
        for v in ladder:
            ramp = np.pi * v / (2 * max_acceleration)  # duration of a half-cosine ramp to v
            ramp_distance = 0.5 * v * ramp
            cruise = min(cruise_s, (room - 2 * ramp_distance) / v)
            if cruise < 2.0 / sample_rate:
                continue  # too fast for this stroke
            stroke = 2 * ramp_distance + v * cruise
            start = build.now
            start[j] = centre - stroke / 2
            build.move(start, max_acceleration, max_velocity)
            for sign in (1.0, -1.0):
                build.velocity_ramp(j, 0.0, sign * v, ramp)
                first, last = build.cruise(j, sign * v, cruise)
                segments.append(SweepSegment(j, sign * float(v), first, last))
                build.velocity_ramp(j, sign * v, 0.0, ramp)
                build.hold(DWELL_S)
        build.move(home, max_acceleration, max_velocity)
    if not segments:
        raise DataError("no speed of the ladder fits any joint's stroke: lower max_velocity or max_acceleration")
    return FrictionSweep(build.trajectory(), tuple(segments))
