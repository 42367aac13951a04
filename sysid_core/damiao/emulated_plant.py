"""The plant of the virtual Damiao arm: the MuJoCo arm its emulated DM-J motors drive.

``EmulatedPlant`` is the physics behind ``emulator.VirtualDamiaoArm``, which speaks the Damiao
protocol on the bus and tells the plant what each motor was commanded; the plant knows nothing
of frames, registers or time on the wall clock.

The drive: the MIT law T = kp (p_des - p) + kd (v_des - v) + t_ff, clamped to +-TMAX, is
evaluated at every physics step from the true motor-side state at the middle of the step
(p + v dt/2, v + a dt/2: a drive's current loop runs at tens of kHz, so over a step it applies
the law's mean, not its value at the step's start) and applied as a joint torque, g T with g a
motor's ``effort_gain`` (the actuator's truth: 1 by default, while the feedback reports T).

Motor side and joint side: p = direction * (q - position_offset), v = direction * dq, and the
joint receives direction * T (rad, rad/s, N m; m, m/s, N for slide joints). The torque goes in
as ``data.qfrc_applied``, so the model needs no actuators (those it has get ctrl = 0); like
any explicit force it is held over the step, so kd dt / M_jj must stay well below 2.

The plant's friction is a law of the joint velocity, as a motor's is: the model's
``frictionloss`` f_c becomes f_c tanh(dq / COULOMB_SMOOTHING) and its ``damping`` b stays b dq,
summed with ``joint_friction`` (n,) N m, a friction torque f(dq) opposing the motion beyond the
model's own damping and frictionloss, re-evaluated every step (e.g.
``simulation.StribeckFriction``; none by default). MuJoCo's own frictionloss is a soft
constraint (a steep linear function of the acceleration near rest, see the manual's
doc/concepts/joint_physics.md) that holds a reversing joint still: no friction law of the
velocity describes it, so an identification made for hardware data (which has no such
constraint) cannot recover the truth from it (on this arm's excitation the viscous coefficients
came out up to 0.1 N m s/rad low from exact plant data). ``frictionloss="constraint"`` keeps
MuJoCo's constraint (and its implicit damping) instead, and adds ``joint_friction`` explicitly.
The law F(dq) is applied at the mid-step velocity, like the MIT law, and stably however steep it
is: its slope k = max(F'(dq), 0) goes into MuJoCo's implicit damping at half weight and the rest
explicitly, F(dq) - k dq / 2, so the joint feels F(dq) + k (dq' - dq) / 2, F at the mean of the
step's start and end velocities to first order (the trapezoidal rule: no artificial armature h
b, and no chatter when k h / M_jj exceeds 2). Being linearised, it is first-order off in a step
whose velocity changes by more than the sign smoothing (a fast reversal of a light joint: up to
a third of the Coulomb level for that one step). It needs a model integrator that treats damping
implicitly (implicit, implicitfast, or Euler with eulerdamp).

An elastic transmission (``transmission``, a ``simulation.elastic.Transmission``): the plant is
``simulation.elastic.elastic_plant``'s arm, a rotor hinge ``<joint>_rotor`` per joint carrying
the armature and the joint's damping and friction loss, tied to the link by a spring and damper
(tau_link = -(k delta + c d delta/dt), delta = q_link - q_rotor). The motor is the rotor: its
MIT torque and the plant's friction law act on the rotor hinge, and the MIT law sees the
rotor's state (the motor side; ``q``/``dq`` are the link's). The spring and the drive's gains
are integrated explicitly, so the timestep ``dt`` is the file's divided into as many substeps as
the stiffest of them needs at ``drive_gains`` (the largest kp, kd the host will send; by default
the MIT frame's maxima, safe for any command but the most steps). Contacts and actuators stay as
the file has them; gravity compensation is off.

Deliberately NOT emulated: the current loop and motor electrics (the torque is exact), a
gearbox's backlash and ripple (without ``transmission`` it is rigid: motor and output positions
are one).

Divergence is read from MuJoCo's warning counters (``simulation.diverged``) after every step.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

import mujoco
import numpy as np

from ..errors import DataError
from ..simulation import diverged
from ..simulation.elastic import Transmission, elastic_plant
from . import protocol as dm

COULOMB_SMOOTHING = 0.02
"""rad/s: the plant's Coulomb friction is frictionloss * tanh(dq / COULOMB_SMOOTHING) (the sign
smoothing of ``simulation.StribeckFriction``'s default)."""

_SLOPE_STEP = 1e-6      # rad/s: central difference for the friction law's slope

_BADQPOS = int(mujoco.mjtWarning.mjWARN_BADQPOS)
_BADQVEL = int(mujoco.mjtWarning.mjWARN_BADQVEL)
_BADQACC = int(mujoco.mjtWarning.mjWARN_BADQACC)


def _elastic_model(model_path, transmission: Transmission, drive_gains):
    """The elastic arm of the file ``model_path`` (``elastic_plant``), stepped at the file's
    timestep divided into the substeps the spring and ``drive_gains`` (kp (n,), kd (n,), or
    None: the MIT frame's maxima) need. Returns (model, joint names (n,), (link qpos, link dof,
    rotor qpos, rotor dof) addresses (n,) each)."""
    if isinstance(model_path, mujoco.MjModel):
        raise ValueError("a transmission needs the model's file (a path): the rotors are added to its spec")
    path = str(Path(model_path))
    rigid = mujoco.MjModel.from_xml_path(path)
    if drive_gains is None:
        drive_gains = (np.full(rigid.njnt, dm.KP_MAX), np.full(rigid.njnt, dm.KD_MAX))
    try:
        kp, kd = (np.broadcast_to(np.asarray(g, dtype=float), (rigid.njnt,)) for g in drive_gains)
    except (TypeError, ValueError):
        raise ValueError(f"drive_gains must be (kp, kd), each {rigid.njnt} values, got {drive_gains!r}") from None
    if not (np.all(np.isfinite(kp)) and np.all(np.isfinite(kd)) and np.all(kp >= 0) and np.all(kd >= 0)):
        raise ValueError(f"drive_gains must be finite and >= 0, got {drive_gains!r}")
    # one sample per file timestep: the substeps then come from the spring and the gains alone
    try:
        plant = elastic_plant(path, transmission, 1.0 / float(rigid.opt.timestep), (kp, kd))
    except DataError as err:
        raise ValueError(str(err)) from None
    model = plant.model
    # the emulator keeps the file's contacts and idle actuators, as it does for a rigid arm
    model.opt.disableflags = rigid.opt.disableflags
    return model, plant.joint_names, (plant.link_qpos, plant.link_dof, plant.rotor_qpos, plant.rotor_dof)


class EmulatedPlant:
    """The MuJoCo arm of the virtual Damiao arm and the drives' MIT law on it (module docstring).

    - ``model_path``: MJCF file (str/Path) or an already compiled ``mujoco.MjModel``. Hinge and
      slide joints only; every joint needs exactly one motor and every motor a joint.
    - ``motors``: ``emulator.EmulatedMotor`` per joint, any order; the plant uses their
      ``joint_name``, ``direction``, ``position_offset`` and ``effort_gain`` (and ``can_id`` to
      name a motor in an error).
    - ``transmission``: None (rigid) or a ``simulation.elastic.Transmission`` (stiffness, damping
      and rotor inertia per joint, joint order of the file; hinge joints only, ``model_path`` a
      file). ``joint_friction`` then gets the rotors' velocities (n,) rad/s and acts on the
      rotors.
    - ``drive_gains``: with a transmission, (kp (n,) N m/rad, kd (n,) N m s/rad), the largest
      gains the host will send, for the timestep; None: the MIT frame's maxima.
    - ``frictionloss``: "law" (default) or "constraint" (module docstring). The model passed in
      is not changed (the plant works on a copy).
    - ``joint_friction``: None or a callable qvel (n,) rad/s -> (n,) N m, friction opposing the
      motion.
    - ``initial_positions``: joint positions at t = 0 (rad or m), a sequence in model joint order
      or a mapping joint name -> position (missing joints stay at qpos0). Velocities start at 0;
      an elastic arm starts undeflected.

    Raises ValueError for an inconsistent model/motor set or argument. Per motor i (joint
    order, ``motors``), the drive holds an MIT command (zero at first), whether it applies the
    law (``set_active``; off at first) and its torque limit TMAX (``set_torque_limit``; +inf
    until set). ``step()`` advances ``dt``. ``joint_names`` (n,) and ``motors`` (n,) are in
    model joint order.
    """

    def __init__(self, model_path, motors, *, transmission: Transmission | None = None, drive_gains=None,
                 frictionloss="law", joint_friction=None, initial_positions=None):
        if transmission is not None:
            self._model, names, addresses = _elastic_model(model_path, transmission, drive_gains)
        elif drive_gains is not None:
            raise ValueError("drive_gains set the timestep of an elastic transmission: give a transmission too")
        elif isinstance(model_path, mujoco.MjModel):
            self._model = copy.copy(model_path)       # a deep copy: its friction is changed below
        else:
            self._model = mujoco.MjModel.from_xml_path(str(Path(model_path)))
        model = self._model
        self._data = mujoco.MjData(model)
        if transmission is None:
            n = model.njnt
            names = tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}" for j in range(n))
            sliding = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
            bad = [name for name, t in zip(names, model.jnt_type) if int(t) not in sliding]
            if bad:
                raise ValueError(f"joints {bad} are neither hinge nor slide: a Damiao motor drives one "
                                 "degree of freedom")
            # hinge/slide only, so joint j owns qpos[j] and qvel[j]; motor and link are one
            addresses = (np.arange(n),) * 4
        n = len(names)
        self.joint_names = names
        self._elastic = transmission is not None
        # qpos and dof addresses (n,) each, joint order: the link's hinge and the motor's (the
        # rotor's, or the same hinge when rigid); the motor arrays below are indexed by joint
        self._link_qpos, self._link_dof, self._motor_qpos, self._motor_dof = addresses
        self.motors = self._match_motors(motors)
        self.dt = float(model.opt.timestep)

        if joint_friction is not None and not callable(joint_friction):
            raise ValueError("joint_friction must be None or a callable qvel -> (n,) N m")
        self._friction = joint_friction
        if frictionloss not in ("law", "constraint"):
            raise ValueError(f"frictionloss must be 'law' or 'constraint', got {frictionloss!r}")
        self._law = frictionloss == "law"
        if self._law:
            implicit = (int(mujoco.mjtIntegrator.mjINT_IMPLICIT), int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST))
            eulerdamp = not model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
            if not (int(model.opt.integrator) in implicit
                    or (int(model.opt.integrator) == int(mujoco.mjtIntegrator.mjINT_EULER) and eulerdamp)):
                raise ValueError("frictionloss='law' needs an integrator that treats damping implicitly "
                                 "(implicit, implicitfast, or Euler with eulerdamp); use frictionloss='constraint'")
            self._coulomb = model.dof_frictionloss.copy()
            self._damping = model.dof_damping.copy()
            model.dof_frictionloss[:] = 0.0

        # The drives, index = joint index. Commands are the decoded SI values.
        self._dir = np.array([m.direction for m in self.motors], dtype=float)
        self._offset = np.array([m.position_offset for m in self.motors], dtype=float)
        self._gain = self._dir * np.array([m.effort_gain for m in self.motors], dtype=float)
        self._tmax = np.full(n, np.inf)
        self._neg_tmax = -self._tmax
        self._kp, self._kd, self._p_des, self._v_des, self._t_ff = (np.zeros(n) for _ in range(5))
        self._active = np.zeros(n)              # 1.0 while the drive applies the law, else 0.0
        self._motor_tau = np.zeros(n)           # T applied in the last step (motor side), N m
        self._buf_p, self._buf_v, self._buf_t = np.empty(n), np.empty(n), np.empty(n)
        self._buf_x = np.empty(n)

        self._set_initial_positions(initial_positions)
        self._data.ctrl[:] = 0.0                # the model's own actuators stay idle

    # --- construction ------------------------------------------------------------------

    def _match_motors(self, motors) -> tuple:
        index = {name: j for j, name in enumerate(self.joint_names)}
        by_joint = {}
        for m in motors:
            if m.joint_name not in index:
                raise ValueError(f"motor can_id 0x{m.can_id:03X} drives joint '{m.joint_name}', which "
                                 f"is not in the model (joints: {', '.join(self.joint_names)})")
            if m.joint_name in by_joint:
                raise ValueError(f"joint '{m.joint_name}' has two motors")
            by_joint[m.joint_name] = m
        missing = [name for name in self.joint_names if name not in by_joint]
        if missing:
            raise ValueError(f"model joints without a motor: {', '.join(missing)}")
        return tuple(by_joint[name] for name in self.joint_names)

    def _set_initial_positions(self, initial_positions) -> None:
        data = self._data
        links = self._link_qpos
        if initial_positions is not None:
            if isinstance(initial_positions, Mapping):
                index = {name: j for j, name in enumerate(self.joint_names)}
                for name, value in initial_positions.items():
                    if name not in index:
                        raise ValueError(f"initial_positions names joint '{name}', which is not in the model")
                    data.qpos[links[index[name]]] = float(value)
            else:
                q0 = np.asarray(initial_positions, dtype=float)
                if q0.shape != (len(links),):
                    raise ValueError(f"initial_positions must have shape ({len(links)},), got {q0.shape}")
                data.qpos[links] = q0
            if not np.all(np.isfinite(data.qpos)):
                raise ValueError("initial_positions must be finite")
        # an elastic arm starts undeflected: each rotor on its link's angle
        data.qpos[self._motor_qpos] = data.qpos[links]
        data.qvel[:] = 0.0
        mujoco.mj_forward(self._model, data)

    # --- state -------------------------------------------------------------------------

    @property
    def time(self) -> float:
        """MuJoCo time, s."""
        return self._data.time

    @property
    def q(self) -> np.ndarray:
        """True joint (link-side) positions (n,), model joint order, rad (m for slides); a copy."""
        return self._data.qpos[self._link_qpos]

    @property
    def dq(self) -> np.ndarray:
        """True joint (link-side) velocities (n,), rad/s (m/s); a copy."""
        return self._data.qvel[self._link_dof]

    @property
    def motor_q(self) -> np.ndarray:
        """True motor-side positions (n,) in joint units (the rotor's angle), rad; ``q`` without
        a transmission; a copy."""
        return self._data.qpos[self._motor_qpos]

    @property
    def motor_dq(self) -> np.ndarray:
        """True motor-side velocities (n,) in joint units, rad/s; ``dq`` without a transmission."""
        return self._data.qvel[self._motor_dof]

    @property
    def tau(self) -> np.ndarray:
        """Joint torques (n,) the motors applied during the last step, N m (N);
        = direction * effort_gain * T (joint friction not included)."""
        return self._gain * self._motor_tau

    def motor_state(self, i: int) -> tuple[float, float, float]:
        """Motor i's (p rad, v rad/s, T N m) now, motor side and units; T is the torque the law
        gives at this state (0 while the drive is not active)."""
        d = self._dir[i]
        p = d * (self._data.qpos[self._motor_qpos[i]] - self._offset[i])
        v = d * self._data.qvel[self._motor_dof[i]]
        if not self._active[i]:
            return p, v, 0.0
        t = self._kp[i] * (self._p_des[i] - p) + self._kd[i] * (self._v_des[i] - v) + self._t_ff[i]
        tmax = self._tmax[i]
        return p, v, min(max(t, -tmax), tmax)

    def output_position(self, i: int) -> float:
        """Joint i's link (output shaft) position on motor i's zero and sign, rad, multi-turn."""
        return self._dir[i] * (self._data.qpos[self._link_qpos[i]] - self._offset[i])

    # --- the drives ----------------------------------------------------------------------

    def set_command(self, i: int, command: dm.MitCommand) -> None:
        """Motor i's MIT command (position rad, velocity rad/s, kp, kd, torque N m; motor side)."""
        self._p_des[i], self._v_des[i] = command.position, command.velocity
        self._kp[i], self._kd[i], self._t_ff[i] = command.kp, command.kd, command.torque

    def clear_command(self, i: int) -> None:
        """Motor i's command back to zero (no torque even while active)."""
        self._kp[i] = self._kd[i] = self._p_des[i] = self._v_des[i] = self._t_ff[i] = 0.0

    def set_active(self, i: int, active: bool) -> None:
        """Whether motor i's drive applies the MIT law (enabled in MIT mode) or no torque."""
        self._active[i] = 1.0 if active else 0.0

    def set_torque_limit(self, i: int, tmax: float) -> None:
        """Motor i's TMAX, N m (> 0): the law's output is clamped to +-tmax."""
        self._tmax[i] = tmax
        self._neg_tmax[i] = -tmax

    def zero_position(self, i: int) -> None:
        """Make motor i's present position its zero: p = direction * (q - offset) becomes 0."""
        self._offset[i] = self._data.qpos[self._motor_qpos[i]]

    def halt(self) -> None:
        """Zero every torque: no drive is active, the applied forces are cleared."""
        self._active[:] = 0.0
        self._motor_tau[:] = 0.0
        self._data.qfrc_applied[:] = 0.0

    # --- physics ---------------------------------------------------------------------------

    def step(self) -> bool:
        """One MuJoCo step of ``dt`` under the MIT law of every motor and the friction law.

        Returns True once MuJoCo has reported a diverging state (``divergence()`` says how).
        """
        data = self._data
        p, v, t, x = self._buf_p, self._buf_v, self._buf_t, self._buf_x
        # motor-side state (the rotor's with a transmission); arrays are preallocated: this runs
        # 1000 times a second or more; the state at mid-step: p + v dt/2 and v + a dt/2 (a of the
        # last step)
        motor_dof = self._motor_dof
        if self._elastic:
            # the rotors' entries, into buffers (t and v are overwritten only once used)
            qvel = np.take(data.qvel, motor_dof, out=x)
            qpos = np.take(data.qpos, self._motor_qpos, out=t)
            qacc = np.take(data.qacc, motor_dof, out=v)
        else:
            qvel, qpos, qacc = data.qvel, data.qpos, data.qacc
        np.multiply(qvel, 0.5 * self.dt, out=p)
        p += qpos
        p -= self._offset
        p *= self._dir
        np.multiply(qacc, 0.5 * self.dt, out=v)
        v += qvel
        v *= self._dir
        np.subtract(self._p_des, p, out=p)
        p *= self._kp
        np.subtract(self._v_des, v, out=v)
        v *= self._kd
        np.add(p, v, out=t)
        t += self._t_ff
        # minimum/maximum: np.clip costs several microseconds on arrays this small
        np.minimum(t, self._tmax, out=t)
        np.maximum(t, self._neg_tmax, out=t)
        np.multiply(t, self._active, out=self._motor_tau)
        if self._elastic:
            # the motor turns the rotor; the link gets only what the spring passes
            data.qfrc_applied[:] = 0.0
            data.qfrc_applied[motor_dof] = self._motor_tau * self._gain
        else:
            np.multiply(self._motor_tau, self._gain, out=data.qfrc_applied)
        if self._law:
            velocity = np.array(data.qvel)
            friction = self.friction(velocity)
            # F's slope, at half weight, into MuJoCo's implicit damping: F at the mid-step velocity
            slope = (self.friction(velocity + _SLOPE_STEP) - self.friction(velocity - _SLOPE_STEP)) \
                / (2.0 * _SLOPE_STEP)
            half = 0.5 * np.maximum(slope, 0.0)
            self._model.dof_damping[:] = half
            data.qfrc_applied -= friction - half * velocity
        elif self._friction is not None:
            if self._elastic:
                data.qfrc_applied[motor_dof] -= self._friction(data.qvel[motor_dof])
            else:
                data.qfrc_applied -= self._friction(np.array(data.qvel))
        mujoco.mj_step(self._model, data)
        return diverged(data)

    def friction(self, velocity: np.ndarray) -> np.ndarray:
        """The plant's friction F (nv,) N m at dof velocities (nv,) rad/s (frictionloss='law'):
        the model's damping and frictionloss at every dof (an elastic arm has them on its
        rotors), ``joint_friction`` at the motors' dofs."""
        out = self._damping * velocity + self._coulomb * np.tanh(velocity / COULOMB_SMOOTHING)
        if self._friction is not None:
            if self._elastic:
                out[self._motor_dof] += self._friction(velocity[self._motor_dof])
            else:
                out += self._friction(velocity)
        return out

    def divergence(self) -> str:
        """Why the state diverged: the time and the warnings MuJoCo reported, with their dofs."""
        fired = [f"{name} ({self._data.warning[idx].lastinfo})" for name, idx in
                 (("bad qpos", _BADQPOS), ("bad qvel", _BADQVEL), ("bad qacc", _BADQACC))
                 if self._data.warning[idx].number]
        return (f"physics diverged at t={self._data.time:.4f} s: MuJoCo reported {', '.join(fired)} "
                "(dof index in parentheses): the gains are too high for the timestep, or a torque is "
                "absurd")
