"""Gravity compensation with the identified model: the feed-forward that lets an arm float.

A joint driven with no position gain (kp = 0), a small damping kd and a feed-forward torque
holds nothing by itself: the feed-forward must carry the arm's weight, and what the model gets
wrong is left to the joint's friction. Per joint, at the measured q (rad) and dq (rad/s):

    tau_ff = G(q) + c F(dq) tanh(abs(dq) / v_s) + P(q) (with F faded out toward a near limit)

* ``G(q)`` the model's gravity torque (with its offset and spring: ``LiveModel.gravity``).
* ``c F(dq) tanh(|dq| / v_s)``: a fraction c (``friction_fraction``) of the model's own
  friction law F, its sign smoothed over ``velocity_scale`` v_s. A joint at rest gets none of
  it (its static friction is what holds the arm where the model is off), a joint moving faster
  than a few v_s gets c F(dq), so the hand guiding it feels 1 - c of the friction.
* ``P(q)`` a spring pushing a joint back out of the last ``limit_margin`` of its range,
  ``limit_stiffness`` (N m/rad) times its depth into the margin, constant beyond the limit; in
  the margin the friction compensation of a motion toward the limit fades linearly to zero at
  the limit, so nothing but the model's gravity drives a joint into its stop.

What is left when the model is off by e (N m) on a joint: a joint whose static friction
exceeds e stays where it is released (on a drive whose friction is a smooth law of the
velocity it creeps, at the velocity where friction plus damping equal e); one where e exceeds
it moves until the error falls below it, or into the limit spring. That is why the arm must be
compensated with an identified model (its error, the validation RMSE, is a fraction of the
joints' friction) and why a nominal model that misses a payload lets the arm sag.

Defaults and why:

* ``friction_fraction`` 0.5. A compensation above the plant's friction makes the net friction
  negative: a joint moving faster than v_s then accelerates on its own (the arm creeps away
  from the hand) and reverses on velocity noise (it chatters). Half of it keeps the net
  friction positive for any model that overestimates the friction by less than a factor of two
  (a friction law fitted to a friction of another shape, a Stribeck peak at rest say, is off by
  most at low speed), and still halves the effort a hand feels.
* ``velocity_scale`` 0.1 rad/s: several steps of a Damiao drive's 12-bit velocity (0.015 rad/s
  on a DM4310, 0.022 on a DM8009) and 20 times the project's default velocity noise (5 mrad/s),
  so a joint at rest whose reported velocity flickers by one step gets at most tanh(0.22), a
  fifth, of the compensation; it reaches 96 % at 0.2 rad/s, slower than a hand guides an arm.
* ``limit_margin`` 0.1 rad and ``limit_stiffness`` 20 N m/rad: at most 2 N m at the limit, a
  push a hand feels and overcomes, enough to stop a drift whose torque error is below it (an
  identified model's is a small fraction of that).

``float_virtual_arm`` runs the whole loop on the virtual Damiao arm (``damiao.emulator``)
without ROS, deterministically: every control period the replies give q and dq, the
compensation goes out as MIT frames with no position target (``DamiaoArm.commands`` with
q_des NaN: kp = 0), and the emulated motors apply it. Tests and bench/gravity_compensation.py
measure the drift of a released arm with it.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import can
import mujoco
import numpy as np

from ..damiao import protocol as dm
from ..damiao.arm import DamiaoArm
from ..damiao.emulator import EmulatedMotor, VirtualDamiaoArm
from .live_model import LiveModel


@dataclass(frozen=True)
class CompensationConfig:
    """How the feed-forward is built (module docstring).

    ``friction_fraction`` c in [0, 1] of the model's friction law compensated; ``velocity_scale``
    v_s rad/s (> 0) of the smoothed sign; ``limit_margin`` rad (>= 0; 0: no push) of a joint's
    range, at each end, in which the push acts (at most half the range); ``limit_stiffness``
    N m/rad (>= 0), one value or one per joint, of the push. Raises ValueError for values
    outside these ranges."""

    friction_fraction: float = 0.5
    velocity_scale: float = 0.1
    limit_margin: float = 0.1
    limit_stiffness: float | tuple = 20.0

    def __post_init__(self):
        stiffness = np.atleast_1d(np.asarray(self.limit_stiffness, dtype=float))
        problems = []
        if not (np.isfinite(self.friction_fraction) and 0.0 <= self.friction_fraction <= 1.0):
            problems.append(f"friction_fraction must be in [0, 1], got {self.friction_fraction}")
        if not (np.isfinite(self.velocity_scale) and self.velocity_scale > 0):
            problems.append(f"velocity_scale must be > 0 rad/s, got {self.velocity_scale}")
        if not (np.isfinite(self.limit_margin) and self.limit_margin >= 0):
            problems.append(f"limit_margin must be >= 0 rad, got {self.limit_margin}")
        if stiffness.ndim != 1 or stiffness.size == 0 or not np.all(np.isfinite(stiffness)) or np.any(stiffness < 0):
            problems.append(f"limit_stiffness must be finite values >= 0 N m/rad, got {self.limit_stiffness}")
        if problems:
            raise ValueError("; ".join(problems))
        # a float or a tuple, so the frozen config stays hashable whatever sequence was given
        scalar = np.ndim(self.limit_stiffness) == 0
        object.__setattr__(self, "limit_stiffness", float(stiffness[0]) if scalar else tuple(stiffness.tolist()))

    def stiffness(self, n: int) -> np.ndarray:
        """``limit_stiffness`` (n,) N m/rad for n joints; ValueError when it holds another count."""
        k = np.atleast_1d(np.asarray(self.limit_stiffness, dtype=float))
        if k.size == 1:
            return np.full(n, k[0])
        if k.size != n:
            raise ValueError(f"limit_stiffness has {k.size} values for {n} joints: give one, or one per joint")
        return k


def friction_compensation(model: LiveModel, dq, config: CompensationConfig = CompensationConfig()) -> np.ndarray:
    """c F(dq) tanh(abs(dq) / v_s) (N, n) N m at dq (N, n) rad/s: the model's friction law F
    (Coulomb and viscous, or whichever law it has), a fraction ``config.friction_fraction`` of
    it, faded in over ``config.velocity_scale`` (for a Coulomb level f_c: c f_c tanh(dq / v_s),
    the sign smoothed)."""
    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    if config.friction_fraction == 0.0:
        return np.zeros_like(dq)
    return config.friction_fraction * model.friction_torque(dq) * np.tanh(np.abs(dq) / config.velocity_scale)


def limit_depth(joint_range, q, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(depth into the lower margin, depth into the upper margin), (N, n) rad each, of q (N, n)
    rad in ``joint_range`` (n, 2): 0 outside the margin, ``margin`` at the limit and beyond;
    the margin is at most half the joint's range."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    lower, upper = np.asarray(joint_range, dtype=float).T
    m = np.minimum(margin, 0.5 * (upper - lower))
    return np.clip(lower + m - q, 0.0, m), np.clip(q - (upper - m), 0.0, m)


def limit_push(joint_range, q, config: CompensationConfig = CompensationConfig()) -> np.ndarray:
    """The push (N, n) N m out of the margins of ``joint_range`` (n, 2) at q (N, n) rad:
    ``limit_stiffness`` times the depth into the lower margin minus the depth into the upper."""
    low, high = limit_depth(joint_range, q, config.limit_margin)
    return config.stiffness(low.shape[1]) * (low - high)


def compensation_torque(model: LiveModel, q, dq, config: CompensationConfig = CompensationConfig()) -> np.ndarray:
    """The feed-forward (N, n) N m that lets the arm float at q (N, n) rad moving at dq (N, n)
    rad/s: gravity, the friction compensation (faded out toward a limit inside its margin) and
    the push out of the limits' margins (module docstring)."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    friction = friction_compensation(model, dq, config)
    push = np.zeros_like(q)
    if config.limit_margin > 0:
        joint_range = model.robot.joint_range
        low, high = limit_depth(joint_range, q, config.limit_margin)
        span = np.minimum(config.limit_margin, 0.5 * (joint_range[:, 1] - joint_range[:, 0]))  # each joint's margin
        # toward the lower limit (dq < 0) fade with the lower depth, toward the upper with the upper
        toward = np.where(dq < 0, low, np.where(dq > 0, high, 0.0))
        friction = friction * (1.0 - toward / span)
        push = config.stiffness(q.shape[1]) * (low - high)
    return model.gravity(q) + friction + push


# --- the loop on the virtual Damiao arm ----------------------------------------------------

@dataclass(frozen=True, eq=False)
class FloatRun:
    """A floating arm on the virtual Damiao arm, one row per control period: ``time`` (K,) s
    simulated, at the period's start; ``q`` (K, n) rad the true joint positions then (the
    emulator's), ``q_reported`` (K, n) rad what the replies said; ``feedforward`` (K, n) N m the
    compensation sent; ``kp`` and ``p_des`` (K, n) the position gain (N m/rad) and target (rad,
    joint side) of the frames as the motors decode them. Joint order: ``joint_names``."""

    time: np.ndarray
    q: np.ndarray
    q_reported: np.ndarray
    feedforward: np.ndarray
    kp: np.ndarray
    p_des: np.ndarray
    joint_names: tuple

    def drift(self) -> np.ndarray:
        """max over time of |q - q at release| (n,) rad, per joint, true positions."""
        return np.abs(self.q - self.q[0]).max(axis=0)


def float_virtual_arm(plant, arm: DamiaoArm, model: LiveModel, q_release, duration: float, rate_hz: float,
                      config: CompensationConfig = CompensationConfig(), *, joint_friction=None,
                      frictionloss: str = "law") -> FloatRun:
    """Release the virtual Damiao arm of ``plant`` (an MjModel or a model file: the truth) at
    rest at ``q_release`` (n,) rad (``arm.joint_names`` order) and let it float for ``duration``
    s under ``model``'s compensation.

    Every period of 1 / ``rate_hz`` s (a whole number of the plant's timesteps): the latest reply
    of every motor gives q and dq (the first period: ``q_release`` at rest, its frames following
    the enable frames), ``compensation_torque`` their feed-forward, and each motor
    gets the MIT frame of ``arm.commands`` with no position target (q_des NaN: kp = 0, p_des at
    the measured position, the arm's kd, v_des = 0); then the emulator runs the period.
    ``joint_friction`` and ``frictionloss`` are the plant's (``VirtualDamiaoArm``). The model's
    joints must be the arm's (any order). RuntimeError if a motor does not enable or the physics
    diverges; ValueError for a rate the timestep does not divide or joints that differ.
    """
    n = arm.n
    if sorted(model.joint_names) != sorted(arm.joint_names):
        raise ValueError(f"the model's joints {list(model.joint_names)} are not the arm's {list(arm.joint_names)}")
    to_arm = np.array([list(model.joint_names).index(j) for j in arm.joint_names])   # arm slot -> model index
    to_model = np.argsort(to_arm)
    plant = plant if isinstance(plant, mujoco.MjModel) else mujoco.MjModel.from_xml_path(str(plant))
    dt = float(plant.opt.timestep)
    steps = int(round(1.0 / (rate_hz * dt)))
    if steps < 1 or abs(steps * dt * rate_hz - 1.0) > 1e-9:
        raise ValueError(f"the plant's timestep {dt} s does not divide the period 1/{rate_hz:g} s")
    channel = f"sysid_float_{uuid.uuid4().hex}"
    emulator = VirtualDamiaoArm(plant, [EmulatedMotor(arm.joint_names[j], arm.motor_types[j], arm.can_ids[j],
                                                      arm.master_ids[j], int(arm.directions[j]),
                                                      float(arm.position_offsets[j]), arm.limits[j])
                                        for j in range(n)],
                                channel=channel, realtime=False, joint_friction=joint_friction,
                                frictionloss=frictionloss,
                                initial_positions=dict(zip(arm.joint_names, np.asarray(q_release, dtype=float))))
    in_plant = np.array([emulator.joint_names.index(j) for j in arm.joint_names])
    by_master = {m: j for j, m in enumerate(arm.master_ids)}
    motor_state = np.zeros((2, n))                   # motor side position, velocity of the latest reply
    status = np.full(n, -1)
    free = np.full(n, np.nan)                        # no position target on any joint
    zero = np.zeros(n)
    track = np.ones(n, dtype=bool)

    def collect(host):
        while (msg := host.recv(timeout=0)) is not None:
            j = by_master.get(msg.arbitration_id)
            if j is not None:
                fb = dm.measured_feedback(dm.decode_feedback(bytes(msg.data), arm.limits[j]), arm.limits[j])
                motor_state[:, j] = fb.position, fb.velocity
                status[j] = fb.status

    periods = int(round(duration * rate_hz))
    rows = {key: np.empty((periods, n)) for key in ("q", "q_reported", "feedforward", "kp", "p_des")}
    times = np.empty(periods)
    emulator.start()
    host = can.Bus(interface="virtual", channel=channel)
    try:
        # released at rest: the first frames (enable, then the first command, read in that order)
        # know the pose without a reply, so no period passes without the compensation
        q, dq = np.asarray(q_release, dtype=float), np.zeros(n)
        for j in range(n):
            host.send(can.Message(arbitration_id=arm.can_ids[j], data=dm.enable_frame(), is_extended_id=False))
        for k in range(periods):
            if k == 1 and np.any(status != dm.STATUS_ENABLED):
                off = [arm.joint_names[j] for j in np.flatnonzero(status != dm.STATUS_ENABLED)]
                raise RuntimeError(f"motors of {off} did not enable")
            if k > 0:
                q, dq, _ = arm.to_joint(motor_state[0], motor_state[1], zero)
            tau = compensation_torque(model, q[to_model][None], dq[to_model][None], config)[0][to_arm]
            commands, _ = arm.commands(free, zero, tau, track, q_measured=q)
            times[k] = emulator.sim_time
            rows["q"][k] = emulator.q[in_plant]
            rows["q_reported"][k], rows["feedforward"][k] = q, tau
            for j, command in enumerate(commands):
                data = dm.encode_mit(command, arm.limits[j])
                host.send(can.Message(arbitration_id=arm.can_ids[j], data=data, is_extended_id=False))
                sent = dm.decode_mit(data, arm.limits[j])
                rows["kp"][k, j] = sent.kp
                rows["p_des"][k, j] = arm.directions[j] * sent.position + arm.position_offsets[j]
            emulator.poll()
            emulator.advance(steps * dt)
            collect(host)
    finally:
        host.shutdown()
        emulator.stop()
    return FloatRun(times, rows["q"], rows["q_reported"], rows["feedforward"], rows["kp"], rows["p_des"],
                    tuple(arm.joint_names))
