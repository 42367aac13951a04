"""An arm of Damiao motors in MIT mode: its validated layout and the joint <-> motor mapping.

The bridge node holds one ``DamiaoArm`` and calls it every control cycle. Everything that
decides what reaches a motor lives here, free of ROS and of the bus, so it can be tested
alone: which id drives which joint, the sign and offset between joint and motor, and the
clamping of every commanded value to the joint's and the motor's limits, and the joints
commanded without a position target (q_des NaN: kp = 0, driven by their velocity target and
feed-forward alone, as a gravity-compensated arm that floats or is guided by hand).

Conventions: joint position q = direction * motor position + position_offset (rad, or m for
a slide), so motor position = direction * (q - position_offset); velocities and torques
scale by ``direction`` alone. Arrays are (n,) in ``joint_names`` order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .protocol import (KD_BITS, KD_MAX, KD_MIN, KP_MAX, MANAGEMENT_ID, TORQUE_BITS, VELOCITY_BITS, MitCommand,
                       MotorLimits, float_to_uint, motor_limits, resolution, uint_to_float)


@dataclass(frozen=True, eq=False)
class DamiaoArm:
    """Motors of one CAN bus, one per joint. Build it with ``DamiaoArm.build`` (which validates).

    kp (n,) N m/rad and kd (n,) N m s/rad: the MIT gains sent while tracking; kd alone is sent
    while damping. lower/upper (n,): joint position limits, rad. limits: each motor's PMAX,
    VMAX, TMAX (from the type table, or read from the motor's registers).
    """

    joint_names: tuple
    motor_types: tuple
    can_ids: tuple
    master_ids: tuple
    kp: np.ndarray
    kd: np.ndarray
    directions: np.ndarray
    position_offsets: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    limits: tuple

    @property
    def n(self) -> int:
        return len(self.joint_names)

    @classmethod
    def build(cls, joint_names, motor_types, can_ids, master_ids, kp, kd, lower, upper,
              directions=None, position_offsets=None, limits=None) -> "DamiaoArm":
        """Validate a layout given as per-joint lists; ValueError listing every problem found.

        ``directions`` defaults to +1 and ``position_offsets`` to 0 for every joint; ``limits``
        (a MotorLimits per joint) defaults to the table for each motor type.
        """
        names = tuple(str(j) for j in joint_names)
        n = len(names)
        problems = []
        if n == 0:
            raise ValueError("joint_names is empty: list the joints this bus drives")
        if len(set(names)) != n:
            problems.append(f"joint_names has duplicates: {sorted({j for j in names if names.count(j) > 1})}")
        lists = {"motor_types": motor_types, "can_ids": can_ids, "master_ids": master_ids, "kp": kp, "kd": kd,
                 "joint_lower_limits": lower, "joint_upper_limits": upper}
        if directions is not None and len(directions):
            lists["directions"] = directions
        if position_offsets is not None and len(position_offsets):
            lists["position_offsets"] = position_offsets
        wrong = [f"{key} has {len(value)}" for key, value in lists.items() if len(value) != n]
        if wrong:
            raise ValueError(f"{n} joint_names {list(names)} but " + ", ".join(wrong)
                             + ": every per-joint parameter needs one value per joint")

        types = tuple(str(t) for t in motor_types)
        if limits is None:
            limits = []
            for t in types:
                try:
                    limits.append(motor_limits(t))
                except ValueError as err:
                    problems.append(str(err))
        ids = [int(i) for i in can_ids]
        masters = [int(i) for i in master_ids]
        for what, values in (("can_ids", ids), ("master_ids", masters)):
            bad = [f"0x{v:X}" for v in values if not 0 < v < MANAGEMENT_ID]
            if bad:
                problems.append(f"{what} {bad} are outside 0x001..0x7FE (0 and 0x7FF are reserved)")
            if len(set(values)) != n:
                problems.append(f"{what} has duplicates: {[f'0x{v:X}' for v in values]}")
        shared = sorted(set(ids) & set(masters))
        if shared:
            problems.append(f"ids {[f'0x{v:X}' for v in shared]} are both a command id and a feedback "
                            "(master) id: replies would be taken for commands")
        arrays = {key: np.asarray(lists[key], dtype=float) for key in ("kp", "kd")}
        arrays["lower"] = np.asarray(lower, dtype=float)
        arrays["upper"] = np.asarray(upper, dtype=float)
        sign = np.asarray(directions if "directions" in lists else np.ones(n), dtype=float)
        offset = np.asarray(position_offsets if "position_offsets" in lists else np.zeros(n), dtype=float)
        for key, value in dict(arrays, directions=sign, position_offsets=offset).items():
            if not np.all(np.isfinite(value)):
                problems.append(f"{key} must be finite, got {value.tolist()}")
        if not np.all(np.isin(sign, (-1.0, 1.0))):
            problems.append(f"directions must be +1 or -1, got {sign.tolist()}")
        kp_, kd_ = arrays["kp"], arrays["kd"]
        for j, name in enumerate(names):
            if not 0 <= kp_[j] <= KP_MAX or not 0 <= kd_[j] <= KD_MAX:
                problems.append(f"{name}: kp {kp_[j]:g} and kd {kd_[j]:g} must lie in [0, {KP_MAX:g}] and "
                                f"[0, {KD_MAX:g}] (the MIT frame's ranges)")
            elif kp_[j] > 0 and kd_[j] == 0:
                problems.append(f"{name}: kp {kp_[j]:g} with kd 0: position control without damping "
                                "oscillates (the vendor's warning); give kd > 0")
            if not arrays["lower"][j] < arrays["upper"][j]:
                problems.append(f"{name}: lower limit {arrays['lower'][j]:g} is not below upper limit "
                                f"{arrays['upper'][j]:g}")
        if problems:
            raise ValueError("invalid Damiao arm configuration: " + "; ".join(problems))
        arm = cls(names, types, tuple(ids), tuple(masters), kp_, kd_, sign, offset,
                  arrays["lower"], arrays["upper"], tuple(limits))
        arm._check_ranges()
        return arm

    def with_limits(self, limits) -> "DamiaoArm":
        """The same arm with other motor limits (e.g. read from the registers), validated again."""
        arm = replace(self, limits=tuple(limits))
        arm._check_ranges()
        return arm

    def _check_ranges(self) -> None:
        # a joint range the motor cannot represent would wrap or clamp its position silently
        problems = []
        for j, name in enumerate(self.joint_names):
            pmax = self.limits[j].pmax
            ends = self.directions[j] * (np.array([self.lower[j], self.upper[j]]) - self.position_offsets[j])
            if np.abs(ends).max() > pmax:
                problems.append(f"{name}: joint limits [{self.lower[j]:g}, {self.upper[j]:g}] map to motor "
                                f"positions [{ends.min():g}, {ends.max():g}] rad, outside the motor's "
                                f"+-PMAX {pmax:g} rad")
        if problems:
            raise ValueError("invalid Damiao arm configuration: " + "; ".join(problems))

    # --- joint <-> motor ---------------------------------------------------------------------

    def to_joint(self, position, velocity, torque):
        """Motor-side (n,) position rad, velocity rad/s, torque N m -> joint-side (q, dq, tau)."""
        return (self.directions * np.asarray(position, dtype=float) + self.position_offsets,
                self.directions * np.asarray(velocity, dtype=float),
                self.directions * np.asarray(torque, dtype=float))

    def commands(self, q_des, dq_des, tau_ff, track, q_measured=None) -> tuple[list, np.ndarray]:
        """MIT commands for every motor, and which joints had a value clamped.

        q_des, dq_des, tau_ff: (n,) joint-side rad, rad/s, N m; track: (n,) bool. Tracking
        joints get q_des clamped to [lower, upper], dq_des and tau_ff clamped to the motor's
        VMAX and TMAX, and the gains kp, kd. A tracking joint whose q_des is NaN has no position
        target: kp = 0 and p_des = ``q_measured`` (n,) rad clamped to [lower, upper] (the middle
        of the range without it; with kp 0 the motor ignores it, but the frame and the command
        log carry a position the joint can have), driven by its velocity target (kd) and its
        feed-forward alone, which are clamped as a tracking joint's (its t_ff then corrected
        for the frame's truncation: ``_unbiased_torque``). The others get damping only: kp = 0,
        v = 0, t_ff = 0 and their kd, whatever q_des holds (it may be NaN for a joint never
        commanded). Returns (list of n MitCommand in motor units, clamped (n,) bool; for a joint
        without a position target only a clamped velocity or torque counts).
        """
        track = np.asarray(track, dtype=bool)
        q_des = np.asarray(q_des, dtype=float)
        vmax, tmax = self._motor_ranges
        free = track & np.isnan(q_des)
        positioned = track & ~free
        if free.any():
            middle = 0.5 * (self.lower + self.upper)
            at = middle if q_measured is None else np.asarray(q_measured, dtype=float)
            at = np.where(np.isfinite(at), at, middle)
            q = np.where(positioned, q_des, np.where(free, at, 0.0))
        else:
            q = np.where(track, q_des, 0.0)
        dq = self.directions * np.where(track, dq_des, 0.0)
        tau = self.directions * np.where(track, tau_ff, 0.0)
        # minimum/maximum: np.clip costs several microseconds on arrays this small (every cycle)
        q_clamped = np.minimum(np.maximum(q, self.lower), self.upper)
        v = np.minimum(np.maximum(dq, -vmax), vmax)
        t = np.minimum(np.maximum(tau, -tmax), tmax)
        clamped = (positioned & (q_clamped != q)) | (track & ((v != dq) | (t != tau)))
        kp = np.where(positioned, self.kp, 0.0)
        p = np.where(track, self.directions * (q_clamped - self.position_offsets), 0.0)
        if free.any():
            t = self._unbiased_torque(t, v, free)
        return [MitCommand(*fields) for fields in zip(p.tolist(), v.tolist(), kp.tolist(), self.kd.tolist(),
                                                      t.tolist())], clamped

    def _unbiased_torque(self, t: np.ndarray, v: np.ndarray, free: np.ndarray) -> np.ndarray:
        """t_ff (n,) motor side for the joints of ``free``, corrected for the frame's truncation.

        A joint without a position target is held by the torque alone, and the frame's 12-bit
        fields are truncated: the motor decodes t_ff up to a step below what was sent, and a
        velocity target of zero (not on the grid) as half a step below it, which kd turns into
        a constant push (4.5 N m s/rad x 0.011 rad/s = 0.05 N m on a DM8009), enough for the arm
        to creep where the model is right. t_ff is raised by kd (v - v as decoded) and half a
        torque step, so the torque at rest is the one asked within half a step."""
        t = t.copy()
        for j in np.flatnonzero(free):
            lim = self.limits[j]
            v_decoded = uint_to_float(float_to_uint(v[j], -lim.vmax, lim.vmax, VELOCITY_BITS),
                                      -lim.vmax, lim.vmax, VELOCITY_BITS)
            kd = uint_to_float(float_to_uint(self.kd[j], KD_MIN, KD_MAX, KD_BITS), KD_MIN, KD_MAX, KD_BITS)
            step = resolution(-lim.tmax, lim.tmax, TORQUE_BITS)
            t[j] = min(max(t[j] + kd * (v[j] - v_decoded) + 0.5 * step, -lim.tmax), lim.tmax)
        return t

    @cached_property
    def _motor_ranges(self) -> tuple:
        """(VMAX (n,), TMAX (n,)) of the motors' limits."""
        return np.array([lim.vmax for lim in self.limits]), np.array([lim.tmax for lim in self.limits])


def registers_to_limits(pmax: float, vmax: float, tmax: float) -> MotorLimits:
    """MotorLimits from register values (float32 as read); ValueError unless all are positive and finite."""
    values = (pmax, vmax, tmax)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"PMAX/VMAX/TMAX registers read {values}: not positive finite numbers")
    return MotorLimits(float(pmax), float(vmax), float(tmax))
