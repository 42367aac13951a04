"""A virtual Damiao-driven arm: DM-J motors in MIT mode on a python-can bus, MuJoCo as the plant.

Every joint of an MJCF model is driven by one emulated motor that speaks the Damiao protocol
(shared/reference/damiao-mit-protocol.md) through the codec in ``sysid_core.damiao``:

* it answers each frame addressed to it (MIT command or special frame on its CAN_ID; 0x7FF
  management frame naming its CAN_ID) with exactly one reply on its MST_ID: a feedback frame
  for MIT, special and refresh frames, a register reply for read/write/save;
* enable/disable/clear error/save zero behave as on the real drives, faults (0x8..0xE) take
  the motor out of enable until cleared, the TIMEOUT register arms a CAN watchdog (0xD);
* the MIT law T = kp (p_des - p) + kd (v_des - v) + t_ff, clamped to +-TMAX, is evaluated at
  every physics step from the true motor-side state at the middle of the step (p + v dt/2,
  v + a dt/2: a drive's current loop runs at tens of kHz, so over a step it applies the law's
  mean, not its value at the step's start) and applied as a joint torque.

The actuator's truth, for identifying it (all off by default):

* ``EmulatedMotor.effort_gain`` g: the joint receives g T while the feedback reports T, the
  torque the firmware believes it makes (its current times a torque constant that is off);
* ``delay`` s: every frame a motor reads is acted on, and answered, that long after (bus,
  adapter and firmware latency), so a command takes effect ``delay`` after it was sent and its
  reply carries the state of that moment;
* ``joint_friction``: a friction torque f(dq) (n,) N m opposing the motion, re-evaluated every
  step (e.g. ``simulation.StribeckFriction``), beyond the model's own damping and frictionloss.

The plant's friction is a law of the joint velocity, as a motor's is: the model's
``frictionloss`` f_c becomes f_c tanh(dq / COULOMB_SMOOTHING) and its ``damping`` b stays b dq,
summed with ``joint_friction``. MuJoCo's own frictionloss is a soft constraint (a steep linear
function of the acceleration near rest, see README "Joint physics") that holds a reversing
joint still: no friction law of the velocity describes it, so an identification made for
hardware data (which has no such constraint) cannot recover the truth from it (on this arm's
excitation the viscous coefficients came out up to 0.1 N m s/rad low from exact plant data).
``frictionloss="constraint"`` keeps MuJoCo's constraint (and its implicit damping) instead.
The law F(dq) is applied at the mid-step velocity, like the MIT law, and stably however steep
it is: its slope k = max(F'(dq), 0) goes into MuJoCo's implicit damping at half weight and the
rest explicitly, F(dq) - k dq / 2, so the joint feels F(dq) + k (dq' - dq) / 2, F at the mean of
the step's start and end velocities to first order (the trapezoidal rule: no artificial
armature h b, and no chatter when k h / M_jj exceeds 2). Being linearised, it is first-order
off in a step whose velocity changes by more than the sign smoothing (a fast reversal of a light
joint: up to a third of the Coulomb level for that one step). It needs a model integrator that
treats damping implicitly (implicit, implicitfast, or Euler with eulerdamp).

Motor side and joint side: p = direction * (q - position_offset), v = direction * dq, and the
joint receives direction * T (rad, rad/s, N m; m, m/s, N for slide joints). The torque goes in
as ``data.qfrc_applied``, so the model needs no actuators (those it has get ctrl = 0); like
any explicit force it is held over the step, so kd dt / M_jj must stay well below 2.

Choices where the reference is silent (each a plain rule the host can rely on):

* enable starts from a zero command (no torque until the first MIT frame); disable and any
  fault clear the command; disable leaves a fault in place (only clear error removes it);
* a status the protocol does not define (0x2..0x7, 0xF, only ever set by ``script_status``)
  behaves like a fault: no torque, enable ignored, clear error returns the motor to disabled;
* every frame addressed to a motor (commands, special and management frames) feeds its
  watchdog; the watchdog runs only while enabled, on sim time;
* the feedback torque is the law evaluated at the state of the reply (what the next step applies);
* registers: MST_ID 7, ESC_ID 8, TIMEOUT 9, CTRL_MODE 10, PMAX/VMAX/TMAX 21-23 (float32, so a
  table value like 12.566 reads back as its float32 neighbour), CAN_BR 35 = 4 (1 Mbit/s), and
  the read-only encoders of a DM-J*-2EC: p_m 80, the motor-side position (the rotor's, in the
  motor's units: direction and offset applied, multi-turn), and xout 81, the output shaft's
  (the link's, same units) wrapped into [-pi, pi) as a single-turn encoder reads it (the
  manuals leave its range open). Without a transmission both read the one rigid position (81
  wrapped). Writes to them are answered with the value and change nothing. A write whose value
  the drive could not use (limit <= 0 or NaN, CTRL_MODE outside 1..4) is refused and answered
  with the unchanged value. Unknown RIDs get no reply;
* save (0xAA) is answered by echoing the request while disabled and not at all while enabled.

Deliberately NOT emulated: measurement noise (the 16/12-bit quantisation of the protocol is the
realistic error), the current loop and motor electrics (the torque is exact), a gearbox's
backlash and ripple (without ``transmission`` it is rigid: motor and output positions are one),
temperatures (constant), other control modes
(CTRL_MODE != 1 means zero torque), flash (save stores nothing that survives the object) and
ID changes (writes to MST_ID/ESC_ID/CAN_BR are stored and read back but do not re-route).

An elastic transmission (``transmission``, a ``simulation.elastic.Transmission``): the plant is
``simulation.elastic.elastic_plant``'s arm, a rotor hinge ``<joint>_rotor`` per joint carrying
the armature and the joint's damping and friction loss, tied to the link by a spring and damper
(tau_link = -(k delta + c d delta/dt), delta = q_link - q_rotor). The motor is the rotor: its
MIT torque and the plant's friction law act on the rotor hinge, the MIT law sees the rotor's
state, and the feedback frame reports it (the motor side, as a 2EC motor's feedback does);
register 81 reads the link. The spring and the drive's gains are integrated explicitly, so the
timestep is the file's divided into as many substeps as the stiffest of them needs at
``drive_gains`` (the largest kp, kd the host will send; by default the MIT frame's maxima, safe
for any command but the most steps): ``advance`` and the real-time thread step at that shorter
timestep. Contacts and actuators stay as the file has them; gravity compensation is off.

Two ways to run it:

* real time (``realtime=True``, the default): ``start()`` opens the bus and starts a daemon
  thread that steps MuJoCo at the model timestep paced by ``time.perf_counter`` and answers
  frames between steps. Meant to share a process with ROS 2 nodes (python-can's ``virtual``
  interface only connects buses of one process).
* manual (``realtime=False``): ``start()`` only opens the bus; ``poll()`` handles the pending
  frames and ``advance(seconds)`` steps physics. Deterministic, for tests.

Time inside the emulator (the watchdog, ``sim_time``) is MuJoCo time; in real-time mode it
follows the wall clock except for steps dropped under overload (see ``stats()``).

Sharing a process: mj_step releases the GIL, so every physics step must win the GIL back. A
Python thread that computes without blocking keeps it for up to ``sys.getswitchinterval()``
(5 ms by default) and stalls the emulator that long; a process that hosts CPU-busy Python
threads next to the emulator should lower the interval (e.g. ``sys.setswitchinterval(5e-4)``).
This module does not change that process-wide setting itself. Divergence is detected from
MuJoCo's warning counters (``simulation.diverged``); ``simulation.mujoco_warnings`` is not used
in the thread because its handler is process-global and the mujoco_sim node installs its own.
"""
from __future__ import annotations

import collections
import copy
import logging
import math
import numbers
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import can
import mujoco
import numpy as np

from ..errors import DataError
from ..simulation import diverged
from ..simulation.elastic import Transmission, elastic_plant
from . import protocol as dm
from .protocol import MotorLimits

logger = logging.getLogger(__name__)

WATCHDOG_TICK = 50e-6
"""Unit of the TIMEOUT register (RID 9), s."""

CAN_BR_1M = 4
"""CAN_BR register code of 1 Mbit/s, the value every emulated motor reports."""

COULOMB_SMOOTHING = 0.02
"""rad/s: the plant's Coulomb friction is frictionloss * tanh(dq / COULOMB_SMOOTHING) (the sign
smoothing of ``simulation.StribeckFriction``'s default)."""

_SLOPE_STEP = 1e-6      # rad/s: central difference for the friction law's slope

MAX_CATCHUP_STEPS = 5
"""Real-time loop: steps run back to back when late; beyond this the lost time is dropped."""

# Registers the emulated motor knows. Any other RID gets no reply, as an unknown RID would
# not be answered usefully by a real drive either.
_KNOWN_REGISTERS = frozenset((dm.RID_MST_ID, dm.RID_ESC_ID, dm.RID_TIMEOUT, dm.RID_CTRL_MODE,
                              dm.RID_PMAX, dm.RID_VMAX, dm.RID_TMAX, dm.RID_CAN_BR,
                              dm.RID_MOTOR_POSITION, dm.RID_OUTPUT_POSITION))
_ENCODER_REGISTERS = (dm.RID_MOTOR_POSITION, dm.RID_OUTPUT_POSITION)
_LIMIT_REGISTERS = (dm.RID_PMAX, dm.RID_VMAX, dm.RID_TMAX)
_SPECIAL_PREFIX = b"\xff" * 7
_SPECIAL_CODES = frozenset((dm.CMD_ENABLE, dm.CMD_DISABLE, dm.CMD_SAVE_ZERO, dm.CMD_CLEAR_ERROR))
_TIME_EPS = 1e-9    # s: MuJoCo time is a sum of timesteps, compare it with this slack


def _float32(x: float) -> float:
    # the drive stores PMAX/VMAX/TMAX as float32: emulate with the value the register holds
    return float(np.float32(x))


@dataclass(frozen=True)
class EmulatedMotor:
    """One emulated DM-J motor and the MJCF joint it drives.

    ``can_id`` is the command arbitration id (ESC_ID, 0x000..0x7FE), ``master_id`` the
    feedback id (MST_ID, 0x001..0x7FE). ``direction`` (+1/-1) and ``position_offset`` (rad, m for
    slides) map the joint onto the motor: p_motor = direction * (q_joint - position_offset).
    ``limits`` are the PMAX/VMAX/TMAX registers; None takes the table of ``motor_type``
    (an unknown type raises ValueError then; with explicit limits the type is only a label).
    ``effort_gain`` (> 0): true joint torque over the torque the motor reports.
    """

    joint_name: str
    motor_type: str
    can_id: int
    master_id: int
    direction: int = 1
    position_offset: float = 0.0
    limits: MotorLimits | None = None
    effort_gain: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.effort_gain, numbers.Real) and math.isfinite(self.effort_gain)
                and self.effort_gain > 0):
            raise ValueError(f"motor {self.joint_name}: effort_gain must be positive and finite, "
                             f"got {self.effort_gain!r}")
        if not isinstance(self.joint_name, str) or not self.joint_name:
            raise ValueError(f"joint_name must be a non-empty string, got {self.joint_name!r}")
        if isinstance(self.direction, bool) or self.direction not in (1, -1):
            raise ValueError(f"motor {self.joint_name}: direction must be +1 or -1, got {self.direction!r}")
        for name, lo in (("can_id", 0), ("master_id", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                    or not lo <= value < dm.MANAGEMENT_ID:
                raise ValueError(f"motor {self.joint_name}: {name} must be an integer in "
                                 f"0x{lo:03X}..0x7FE, got {value!r}")
        if not isinstance(self.position_offset, numbers.Real) or not math.isfinite(self.position_offset):
            raise ValueError(f"motor {self.joint_name}: position_offset must be finite, "
                             f"got {self.position_offset!r}")
        if self.limits is None:
            dm.motor_limits(self.motor_type)       # raises ValueError naming the known types
        else:
            for name in ("pmax", "vmax", "tmax"):
                value = getattr(self.limits, name)
                if not (isinstance(value, numbers.Real) and math.isfinite(value) and value > 0):
                    raise ValueError(f"motor {self.joint_name}: limits.{name} must be positive "
                                     f"and finite, got {value!r}")

    def default_limits(self) -> MotorLimits:
        """``limits`` if given, else the table entry of ``motor_type``."""
        return self.limits if self.limits is not None else dm.motor_limits(self.motor_type)


def emulated_motors(layout: dict) -> list:
    """The EmulatedMotors a damiao_bridge parameter layout drives: its ``joint_names``,
    ``motor_types``, ``can_ids`` and ``master_ids``, and its ``directions`` and
    ``position_offsets`` when given (+1 and 0 otherwise), one motor per joint."""
    n = len(layout.get("joint_names", ()))
    return [EmulatedMotor(joint_name=name, motor_type=kind, can_id=can_id, master_id=master, direction=direction,
                          position_offset=offset)
            for name, kind, can_id, master, direction, offset in zip(
                layout["joint_names"], layout["motor_types"], layout["can_ids"], layout["master_ids"],
                layout.get("directions") or [1] * n, layout.get("position_offsets") or [0.0] * n)]


def _temperature_bytes(temperatures) -> tuple[int, int]:
    try:
        values = [float(t) for t in temperatures]
    except (TypeError, ValueError):
        values = []
    if len(values) != 2 or not all(math.isfinite(t) for t in values):
        raise ValueError(f"temperatures must be two finite deg C values (MOSFET, coil), got {temperatures!r}")
    # the feedback carries one unsigned byte each
    return tuple(min(max(int(round(t)), 0), 255) for t in values)


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


class _MotorState:
    """Mutable per-motor state that is not in the vectorised arrays of VirtualDamiaoArm."""

    __slots__ = ("spec", "index", "status", "silent", "limits", "registers", "id_nibble")

    def __init__(self, spec: EmulatedMotor, index: int, timeout_ticks: int):
        self.spec = spec
        self.index = index                   # joint index (the emulator maps it to qpos and dof)
        self.status = dm.STATUS_DISABLED
        self.silent = False
        lim = spec.default_limits()
        self.limits = MotorLimits(_float32(lim.pmax), _float32(lim.vmax), _float32(lim.tmax))
        self.registers = {
            dm.RID_MST_ID: spec.master_id, dm.RID_ESC_ID: spec.can_id,
            dm.RID_TIMEOUT: timeout_ticks, dm.RID_CTRL_MODE: dm.CTRL_MODE_MIT,
            dm.RID_PMAX: self.limits.pmax, dm.RID_VMAX: self.limits.vmax, dm.RID_TMAX: self.limits.tmax,
            dm.RID_CAN_BR: CAN_BR_1M,
        }
        self.id_nibble = spec.can_id & 0xF


class VirtualDamiaoArm:
    """An MJCF arm whose joints are driven by emulated Damiao motors on a python-can bus.

    model_path: MJCF file (str/Path) or an already compiled ``mujoco.MjModel``. Hinge and slide
      joints only; every joint needs exactly one motor and every motor a joint.
    motors: EmulatedMotor per joint, any order. can_id and master_id must be unique, and no
      master_id may equal a can_id (a reply would read as a command).
    interface, channel, bus_kwargs: passed to ``can.Bus`` (default: python-can ``virtual``, which
      links the buses of one process that use the same channel name).
    timeout_ticks: initial TIMEOUT register of every motor, units of 50 us; 0 = watchdog off.
    initial_positions: joint positions at t = 0 (rad or m), a sequence in model joint order
      or a mapping joint name -> position (missing joints stay at qpos0). Velocities start at 0.
    realtime: True runs physics in a thread after ``start()``; False is manual mode
      (``poll``/``advance``).
    temperatures: (MOSFET, coil) deg C reported in every feedback frame.
    delay: s (>= 0), how long after a frame is read a motor acts on it and answers.
    joint_friction: None or a callable qvel (n,) rad/s -> (n,) N m, friction opposing the motion.
    frictionloss: "law" (default) applies the model's frictionloss and damping as a law of the
      velocity, with ``joint_friction`` (see the module docstring); "constraint" leaves them to
      MuJoCo (soft frictionloss constraint, implicit damping) and adds ``joint_friction``
      explicitly. The model passed in is not changed (the emulator works on a copy).
    transmission: None (rigid) or a ``simulation.elastic.Transmission`` (stiffness, damping and
      rotor inertia per joint, joint order of the file; hinge joints only, ``model_path`` a
      file): the elastic arm of the module docstring. ``joint_friction`` then gets the rotors'
      velocities (n,) rad/s and acts on the rotors.
    drive_gains: with a transmission, (kp (n,) N m/rad, kd (n,) N m s/rad), the largest gains
      the host will send, for the timestep; None: the MIT frame's maxima.

    Raises ValueError for an inconsistent model/motor set. Read-only state for tests and the
    caller: ``sim_time`` s, ``q``/``dq`` (n,) true joint (link-side) state, ``motor_q``/
    ``motor_dq`` (n,) true motor-side state in joint units (= ``q``/``dq`` without a
    transmission), ``tau`` (n,) joint torques of the last step, ``status(can_id)``,
    ``enabled(can_id)``, ``frames_received``, ``error``.
    """

    def __init__(self, model_path, motors, *, interface="virtual", channel="sysid_damiao",
                 bus_kwargs=None, timeout_ticks=0, initial_positions=None, realtime=True,
                 temperatures=(30, 35), delay=0.0, joint_friction=None, frictionloss="law",
                 transmission: Transmission | None = None, drive_gains=None):
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

        if isinstance(timeout_ticks, bool) or not isinstance(timeout_ticks, numbers.Integral) \
                or not 0 <= timeout_ticks <= 0xFFFFFFFF:
            raise ValueError(f"timeout_ticks must be an integer in 0..2^32-1 (units of 50 us), "
                             f"got {timeout_ticks!r}")
        timeout_ticks = int(timeout_ticks)
        self._states = self._check_motors(list(motors), timeout_ticks)
        self._by_can_id = {s.spec.can_id: s for s in self._states}

        self._temperatures = _temperature_bytes(temperatures)
        self._interface, self._channel = interface, channel
        self._bus_kwargs = dict(bus_kwargs or {})
        self._realtime = bool(realtime)
        self._dt = float(model.opt.timestep)
        if not (isinstance(delay, numbers.Real) and math.isfinite(delay) and delay >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        if joint_friction is not None and not callable(joint_friction):
            raise ValueError("joint_friction must be None or a callable qvel -> (n,) N m")
        self._delay = float(delay)
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
        self._pending = collections.deque()     # (sim time due, frame) read but not yet acted on

        # Vectorised motor state, index = joint index. Commands are the decoded SI values.
        self._dir = np.array([s.spec.direction for s in self._states], dtype=float)
        self._offset = np.array([s.spec.position_offset for s in self._states], dtype=float)
        self._gain = self._dir * np.array([s.spec.effort_gain for s in self._states], dtype=float)
        self._tmax = np.array([s.limits.tmax for s in self._states])
        self._neg_tmax = -self._tmax
        self._kp, self._kd, self._p_des, self._v_des, self._t_ff = (np.zeros(n) for _ in range(5))
        self._active = np.zeros(n)              # 1.0 while enabled in MIT mode, else 0.0
        self._motor_tau = np.zeros(n)           # T applied in the last step (motor side), N m
        self._timeout = np.array([timeout_ticks * WATCHDOG_TICK] * n, dtype=float)
        self._last_rx = np.zeros(n)             # sim time of the last frame per motor, s
        self._deadline = np.full(n, np.inf)     # sim time at which the watchdog fires
        self._next_deadline = np.inf
        self._scripts = {}                      # motor index -> [(sim time, status), ...] still to come
        self._next_script = np.inf              # sim time of the earliest of them
        self._buf_p, self._buf_v, self._buf_t = np.empty(n), np.empty(n), np.empty(n)
        self._buf_x = np.empty(n)

        self._set_initial_positions(initial_positions)
        self._data.ctrl[:] = 0.0                # the model's own actuators stay idle

        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._bus: can.BusABC | None = None
        self._started = self._stopped = False
        self._error: str | None = None
        self._frames_received = self._frames_sent = self._frames_ignored = self._send_errors = 0
        self._steps = self._dropped_steps = self._overruns = self._catchup_steps = 0
        self._step_cost_sum = self._step_cost_max = 0.0
        self._frame_cost_sum = 0.0
        self._busy = 0.0
        self._run_wall = 0.0

    # --- construction ------------------------------------------------------------------

    def _check_motors(self, motors, timeout_ticks) -> list:
        index = {name: j for j, name in enumerate(self.joint_names)}
        by_joint = {}
        for m in motors:
            if not isinstance(m, EmulatedMotor):
                raise ValueError(f"motors must be EmulatedMotor instances, got {type(m).__name__}")
            if m.joint_name not in index:
                raise ValueError(f"motor can_id 0x{m.can_id:03X} drives joint '{m.joint_name}', which "
                                 f"is not in the model (joints: {', '.join(self.joint_names)})")
            if m.joint_name in by_joint:
                raise ValueError(f"joint '{m.joint_name}' has two motors")
            by_joint[m.joint_name] = m
        missing = [name for name in self.joint_names if name not in by_joint]
        if missing:
            raise ValueError(f"model joints without a motor: {', '.join(missing)}")
        for attr in ("can_id", "master_id"):
            seen = {}
            for m in motors:
                value = getattr(m, attr)
                if value in seen:
                    raise ValueError(f"duplicate {attr} 0x{value:03X} (joints '{seen[value]}' and "
                                     f"'{m.joint_name}')")
                seen[value] = m.joint_name
        can_ids = {m.can_id: m.joint_name for m in motors}
        for m in motors:
            if m.master_id in can_ids:
                raise ValueError(f"master_id 0x{m.master_id:03X} of joint '{m.joint_name}' is the can_id "
                                 f"of joint '{can_ids[m.master_id]}': its feedback would read as a command")
        return [_MotorState(by_joint[name], j, timeout_ticks) for j, name in enumerate(self.joint_names)]

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

    # --- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Open the bus; in real-time mode also start the physics thread (daemon)."""
        if self._stopped:
            raise RuntimeError("this VirtualDamiaoArm was stopped; make a new one")
        if self._started:
            raise RuntimeError("VirtualDamiaoArm already started")
        self._bus = can.Bus(interface=self._interface, channel=self._channel, **self._bus_kwargs)
        self._started = True
        if self._realtime:
            self._thread = threading.Thread(target=self._run, name=f"damiao-emulator-{self._channel}",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread (if any) and close the bus. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_event.set()
        if self._thread is not None:
            # the loop waits at most one timestep between checks of the stop flag
            self._thread.join(timeout=5.0)
            if self._thread.is_alive():
                logger.error("damiao emulator thread did not stop within 5 s")
        if self._bus is not None:
            self._bus.shutdown()

    def __enter__(self) -> "VirtualDamiaoArm":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- read-only state -------------------------------------------------------------------

    @property
    def sim_time(self) -> float:
        """MuJoCo time, s."""
        return float(self._data.time)

    @property
    def q(self) -> np.ndarray:
        """True joint (link-side) positions (n,), model joint order, rad (m for slides); a copy."""
        with self._lock:
            return self._data.qpos[self._link_qpos]

    @property
    def dq(self) -> np.ndarray:
        """True joint (link-side) velocities (n,), rad/s (m/s); a copy."""
        with self._lock:
            return self._data.qvel[self._link_dof]

    @property
    def motor_q(self) -> np.ndarray:
        """True motor-side positions (n,) in joint units (the rotor's angle: motor angle / gear
        ratio, the joint's zero and sign), rad; ``q`` without a transmission; a copy. The
        deflection is ``q - motor_q``."""
        with self._lock:
            return self._data.qpos[self._motor_qpos]

    @property
    def motor_dq(self) -> np.ndarray:
        """True motor-side velocities (n,) in joint units, rad/s; ``dq`` without a transmission."""
        with self._lock:
            return self._data.qvel[self._motor_dof]

    @property
    def tau(self) -> np.ndarray:
        """Joint torques (n,) the motors applied during the last physics step, N m (N);
        = direction * effort_gain * T (joint friction not included)."""
        with self._lock:
            return self._gain * self._motor_tau

    @property
    def frames_received(self) -> int:
        """Frames read off the bus so far, whatever their id."""
        return self._frames_received

    @property
    def error(self) -> str | None:
        """None while healthy; the reason once physics diverged or the thread died."""
        return self._error

    @property
    def running(self) -> bool:
        """True while the real-time thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _state(self, can_id) -> _MotorState:
        try:
            return self._by_can_id[can_id]
        except (KeyError, TypeError):
            raise ValueError(f"no emulated motor has can_id {can_id!r}") from None

    def status(self, can_id: int) -> int:
        """Status nibble the motor reports (damiao.STATUS_*)."""
        return self._state(can_id).status

    def enabled(self, can_id: int) -> bool:
        return self._state(can_id).status == dm.STATUS_ENABLED

    def limits(self, can_id: int) -> MotorLimits:
        """The motor's current PMAX/VMAX/TMAX registers (float32 values)."""
        return self._state(can_id).limits

    def stats(self) -> dict:
        """Counters and timing of the run so far.

        steps, dropped_steps (real time lost under overload), overruns (times time was dropped),
        catchup_steps (steps run back to back because the loop was late), frames_received,
        frames_sent, frames_ignored (malformed or not for any motor), send_errors (replies the
        bus refused), mean_step_cost_s and
        max_step_cost_s (torque law + mj_step + checks), mean_frame_cost_s (decode, reply,
        send), busy_fraction (thread time not spent waiting / wall time, real-time mode).
        """
        with self._lock:
            return {
                "steps": self._steps, "dropped_steps": self._dropped_steps,
                "overruns": self._overruns, "catchup_steps": self._catchup_steps,
                "frames_received": self._frames_received, "frames_sent": self._frames_sent,
                "frames_ignored": self._frames_ignored, "send_errors": self._send_errors,
                "mean_step_cost_s": self._step_cost_sum / self._steps if self._steps else 0.0,
                "max_step_cost_s": self._step_cost_max,
                "mean_frame_cost_s": (self._frame_cost_sum / self._frames_received
                                      if self._frames_received else 0.0),
                "busy_fraction": self._busy / self._run_wall if self._run_wall > 0 else 0.0,
            }

    # --- test and fault hooks ------------------------------------------------------------

    def inject_fault(self, can_id: int, status: int) -> None:
        """Put a motor into fault ``status`` (0x8..0xE): it leaves enable and reports it."""
        if isinstance(status, bool) or not isinstance(status, numbers.Integral) \
                or status not in dm.FAULT_STATUSES:
            raise ValueError(f"fault status must be one of 0x8..0xE, got {status!r}")
        with self._lock:
            self._fault(self._state(can_id), status)

    def script_status(self, can_id: int, steps) -> None:
        """Drive a motor through a sequence of states of its own, whatever the host sends.

        ``steps``: (status, seconds) pairs; each status is entered in turn and held for its
        seconds of sim time, the last one until something else changes it (its seconds are
        ignored, None will do). Entering 0x1 enables the motor as an enable frame does (zero
        command until the next MIT frame), 0x0 disables it, a fault code faults it as
        ``inject_fault``, any other nibble is reported as is and behaves like a fault. E.g.
        [(0xA, 0.1), (0x1, None)]: an over-current for 0.1 s that the drive clears itself.
        Replaces the motor's earlier script; an empty sequence just cancels it.
        """
        plan = []
        for step in steps:
            try:
                status, seconds = step
            except (TypeError, ValueError):
                raise ValueError(f"steps must be (status, seconds) pairs, got {step!r}") from None
            if isinstance(status, bool) or not isinstance(status, numbers.Integral) or not 0 <= status <= 0xF:
                raise ValueError(f"a status is a nibble 0x0..0xF, got {status!r}")
            plan.append((int(status), seconds))
        for status, seconds in plan[:-1]:
            if not isinstance(seconds, numbers.Real) or not seconds > 0 or not math.isfinite(seconds):
                raise ValueError(f"status 0x{status:X} needs a positive finite duration, got {seconds!r}")
        with self._lock:
            s = self._state(can_id)
            self._scripts.pop(s.index, None)
            if plan:
                at = self._data.time
                timed = []
                for status, seconds in plan:
                    timed.append((at, status))
                    at += seconds if seconds is not None else 0.0
                self._set_status(s, timed[0][1])
                if len(timed) > 1:
                    self._scripts[s.index] = timed[1:]
            self._next_script = min((left[0][0] for left in self._scripts.values()), default=np.inf)

    def set_silent(self, can_id: int, silent: bool = True) -> None:
        """Stop (or resume) replying; a silent motor still obeys every frame it receives."""
        with self._lock:
            self._state(can_id).silent = bool(silent)

    # --- manual mode -----------------------------------------------------------------------

    def _check_manual(self, what: str) -> None:
        if self._realtime:
            raise RuntimeError(f"{what}() is for manual mode (realtime=False); the thread runs this arm")
        if self._error is not None:
            raise RuntimeError(f"emulator failed: {self._error}")

    def poll(self) -> int:
        """Manual mode: read every frame waiting on the bus (handled now, or after ``delay`` by
        ``advance``); returns how many were read."""
        self._check_manual("poll")
        if self._bus is None or self._stopped:
            raise RuntimeError("poll() needs an open bus: call start() first")
        count = 0
        with self._lock:
            while True:
                msg = self._bus.recv(timeout=0)
                if msg is None:
                    return count
                self._receive(msg)
                count += 1

    def advance(self, seconds: float) -> None:
        """Manual mode: step physics by ``seconds`` (a whole number of model timesteps).

        Frames are not read meanwhile (call poll()). Raises ValueError for a duration that is
        not a whole number of timesteps, RuntimeError (and sets ``error``) if physics diverges.
        """
        self._check_manual("advance")
        ratio = float(seconds) / self._dt
        steps = int(round(ratio))
        if steps < 0 or abs(ratio - steps) > 1e-6:
            raise ValueError(f"advance({seconds}) is not a whole, non-negative number of "
                             f"{self._dt} s timesteps")
        with self._lock:
            try:
                for _ in range(steps):
                    self._step()
            except _Diverged as exc:
                self._fail(str(exc))
                raise RuntimeError(self._error) from None

    # --- physics ---------------------------------------------------------------------------

    def _step(self) -> None:
        """One MuJoCo step under the MIT law of every motor; then the watchdog."""
        t0 = time.perf_counter()
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
        np.multiply(qvel, 0.5 * self._dt, out=p)
        p += qpos
        p -= self._offset
        p *= self._dir
        np.multiply(qacc, 0.5 * self._dt, out=v)
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
            friction = self._friction_law(velocity)
            # F's slope, at half weight, into MuJoCo's implicit damping: F at the mid-step velocity
            slope = (self._friction_law(velocity + _SLOPE_STEP) - self._friction_law(velocity - _SLOPE_STEP)) \
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
        self._steps += 1
        while self._pending and data.time >= self._pending[0][0] - _TIME_EPS:
            self._handle(self._pending.popleft()[1])
        if diverged(data):
            raise _Diverged(self._divergence_message())
        if data.time >= self._next_deadline - _TIME_EPS:
            self._watchdog()
        if data.time >= self._next_script - _TIME_EPS:
            self._play_scripts()
        cost = time.perf_counter() - t0
        self._step_cost_sum += cost
        if cost > self._step_cost_max:
            self._step_cost_max = cost

    def _friction_law(self, velocity: np.ndarray) -> np.ndarray:
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

    def _divergence_message(self) -> str:
        fired = [f"{name} ({self._data.warning[idx].lastinfo})" for name, idx in
                 (("bad qpos", _BADQPOS), ("bad qvel", _BADQVEL), ("bad qacc", _BADQACC))
                 if self._data.warning[idx].number]
        return (f"physics diverged at t={self._data.time:.4f} s: MuJoCo reported {', '.join(fired)} "
                "(dof index in parentheses): the gains are too high for the timestep, or a torque is "
                "absurd; torques zeroed, replies stopped")

    def _watchdog(self) -> None:
        now = self._data.time
        for s in self._states:
            if now >= self._deadline[s.index] - _TIME_EPS:
                self._fault(s, dm.STATUS_COMMUNICATION_LOST)
        self._next_deadline = float(self._deadline.min())

    def _play_scripts(self) -> None:
        now = self._data.time
        for i in list(self._scripts):
            steps = self._scripts[i]
            while steps and now >= steps[0][0] - _TIME_EPS:
                self._set_status(self._states[i], steps.pop(0)[1])
            if not steps:
                del self._scripts[i]
        self._next_script = min((left[0][0] for left in self._scripts.values()), default=np.inf)

    def _fail(self, message: str, exc_info=None) -> None:
        """Record a fatal error: zero every torque, stop replying, log it. Caller holds the lock."""
        if self._error is None:
            self._error = message
            logger.error("damiao emulator on channel %r: %s", self._channel, message, exc_info=exc_info)
        self._active[:] = 0.0
        self._motor_tau[:] = 0.0
        self._data.qfrc_applied[:] = 0.0

    # --- motor state changes ----------------------------------------------------------------

    def _clear_command(self, i: int) -> None:
        self._kp[i] = self._kd[i] = self._p_des[i] = self._v_des[i] = self._t_ff[i] = 0.0

    def _fault(self, s: _MotorState, status: int) -> None:
        s.status = status
        self._leave_enable(s.index)

    def _set_status(self, s: _MotorState, status: int) -> None:
        """Enter ``status`` by the motor's own doing (script_status)."""
        if status == dm.STATUS_ENABLED:
            if s.status != dm.STATUS_ENABLED:
                self._enter_enable(s)
        else:
            self._fault(s, status)     # disabled, a fault, or a code of no defined meaning

    def _enter_enable(self, s: _MotorState) -> None:
        i = s.index
        s.status = dm.STATUS_ENABLED
        self._clear_command(i)     # zero torque until the first MIT command
        self._active[i] = 1.0 if s.registers[dm.RID_CTRL_MODE] == dm.CTRL_MODE_MIT else 0.0
        self._arm_watchdog(s)

    def _leave_enable(self, i: int) -> None:
        self._active[i] = 0.0
        self._clear_command(i)
        self._deadline[i] = np.inf
        self._next_deadline = float(self._deadline.min())

    def _arm_watchdog(self, s: _MotorState) -> None:
        i = s.index
        if s.status == dm.STATUS_ENABLED and self._timeout[i] > 0:
            self._deadline[i] = self._last_rx[i] + self._timeout[i]
        else:
            self._deadline[i] = np.inf
        # a later deadline leaves _next_deadline early: _watchdog() then just recomputes it
        if self._deadline[i] < self._next_deadline:
            self._next_deadline = float(self._deadline[i])

    def _motor_state(self, i: int) -> tuple[float, float, float]:
        """Motor-side (p rad, v rad/s, T N m) now; T is the torque the law gives at this state."""
        d = self._dir[i]
        p = d * (self._data.qpos[self._motor_qpos[i]] - self._offset[i])
        v = d * self._data.qvel[self._motor_dof[i]]
        if not self._active[i]:
            return p, v, 0.0
        t = self._kp[i] * (self._p_des[i] - p) + self._kd[i] * (self._v_des[i] - v) + self._t_ff[i]
        tmax = self._tmax[i]
        return p, v, min(max(t, -tmax), tmax)

    # --- frames ----------------------------------------------------------------------------

    def _receive(self, msg: can.Message) -> None:
        """A frame read off the bus: handled now, or queued for ``delay`` of sim time."""
        if self._delay > 0.0:
            self._pending.append((self._data.time + self._delay, msg))
        else:
            self._handle(msg)

    def _handle(self, msg: can.Message) -> None:
        """Handle one frame read off the bus; reply if a motor is addressed. Caller holds the lock."""
        t0 = time.perf_counter()
        self._frames_received += 1
        reply = None
        state = None
        if (msg.is_extended_id or msg.is_remote_frame or msg.is_error_frame
                or msg.dlc != dm.FRAME_LENGTH or len(msg.data) != dm.FRAME_LENGTH):
            self._frames_ignored += 1     # not part of this protocol: a real drive drops it too
        elif msg.arbitration_id == dm.MANAGEMENT_ID:
            state, reply = self._handle_management(bytes(msg.data))
        else:
            state = self._by_can_id.get(msg.arbitration_id)
            if state is None:
                self._frames_ignored += 1
            else:
                reply = self._handle_command(state, bytes(msg.data))
        if reply is not None and not state.silent and self._error is None:
            try:
                self._bus.send(can.Message(arbitration_id=state.spec.master_id, data=reply,
                                           is_extended_id=False))
                self._frames_sent += 1
            except can.CanError as exc:
                # a full transmit queue loses the reply, as on a real bus; the motor lives on
                self._send_errors += 1
                if self._send_errors == 1:
                    logger.warning("damiao emulator on channel %r could not send a reply: %s "
                                   "(further send errors are only counted)", self._channel, exc)
        self._frame_cost_sum += time.perf_counter() - t0

    def _received(self, s: _MotorState) -> None:
        # any frame addressed to the motor feeds its watchdog
        self._last_rx[s.index] = self._data.time
        if s.status == dm.STATUS_ENABLED:
            self._arm_watchdog(s)

    def _handle_command(self, s: _MotorState, data: bytes) -> bytes:
        i = s.index
        self._received(s)
        if data[:7] == _SPECIAL_PREFIX and data[7] in _SPECIAL_CODES:
            code = data[7]
            if code == dm.CMD_ENABLE:
                if s.status == dm.STATUS_DISABLED:
                    self._enter_enable(s)
                # a faulted motor stays faulted (and replies its fault) until clear error
            elif code == dm.CMD_DISABLE:
                if s.status == dm.STATUS_ENABLED:
                    s.status = dm.STATUS_DISABLED
                self._leave_enable(i)
            elif code == dm.CMD_CLEAR_ERROR:
                if s.status not in (dm.STATUS_ENABLED, dm.STATUS_DISABLED):
                    s.status = dm.STATUS_DISABLED
            elif code == dm.CMD_SAVE_ZERO:
                if s.status != dm.STATUS_ENABLED:
                    # p_motor = direction * (q - offset) becomes 0 at the present motor position
                    self._offset[i] = self._data.qpos[self._motor_qpos[i]]
        elif (s.status == dm.STATUS_ENABLED
              and s.registers[dm.RID_CTRL_MODE] == dm.CTRL_MODE_MIT):
            cmd = dm.decode_mit(data, s.limits)
            self._p_des[i], self._v_des[i] = cmd.position, cmd.velocity
            self._kp[i], self._kd[i], self._t_ff[i] = cmd.kp, cmd.kd, cmd.torque
        # else: an MIT frame while disabled, faulted or in another mode is ignored, yet answered
        return self._feedback(s)

    def _feedback(self, s: _MotorState) -> bytes:
        p, v, t = self._motor_state(s.index)
        mos, coil = self._temperatures
        return dm.encode_feedback(dm.Feedback(s.id_nibble, s.status, p, v, t, mos, coil), s.limits)

    def _handle_management(self, data: bytes):
        try:
            req = dm.decode_management_frame(data)
        except ValueError:
            self._frames_ignored += 1
            return None, None
        s = self._by_can_id.get(req.can_id)
        if s is None:
            self._frames_ignored += 1
            return None, None
        self._received(s)
        if req.op == dm.OP_REFRESH:
            return s, self._feedback(s)
        if req.op == dm.OP_SAVE:
            # no flash here; the reference gives no reply layout for save: echo the request,
            # and refuse silently while enabled (the manual: save only while disabled)
            return s, (None if s.status == dm.STATUS_ENABLED else data)
        if req.rid not in _KNOWN_REGISTERS:
            return s, None
        if req.op == dm.OP_WRITE:
            self._write_register(s, req.rid, dm.register_value(req.rid, req.data))
        return s, dm.encode_register_reply(req.can_id, req.op, req.rid, self._read_register(s, req.rid))

    def _read_register(self, s: _MotorState, rid: int):
        i = s.index
        if rid == dm.RID_MOTOR_POSITION:
            return _float32(self._motor_state(i)[0])
        if rid == dm.RID_OUTPUT_POSITION:
            # the output shaft's single-turn encoder, on the motor's zero and sign
            link = self._dir[i] * (self._data.qpos[self._link_qpos[i]] - self._offset[i])
            return _float32(link - 2.0 * math.pi * math.floor((link + math.pi) / (2.0 * math.pi)))
        return s.registers[rid]

    def _write_register(self, s: _MotorState, rid: int, value) -> None:
        """Store a written value; a value the drive could not use is refused (the reply then
        carries the unchanged register, so the host sees the write did not take)."""
        i = s.index
        if rid in _ENCODER_REGISTERS:
            return                                  # a measurement, not a setting
        if rid in _LIMIT_REGISTERS:
            if not (math.isfinite(value) and value > 0):
                return
            s.registers[rid] = value
            s.limits = MotorLimits(s.registers[dm.RID_PMAX], s.registers[dm.RID_VMAX],
                                   s.registers[dm.RID_TMAX])
            self._tmax[i] = s.limits.tmax
            self._neg_tmax[i] = -s.limits.tmax
        elif rid == dm.RID_CTRL_MODE:
            if value not in (dm.CTRL_MODE_MIT, dm.CTRL_MODE_POS_VEL, dm.CTRL_MODE_VEL,
                             dm.CTRL_MODE_POS_FORCE):
                return
            s.registers[rid] = value
            if value != dm.CTRL_MODE_MIT:
                # other modes are not emulated: the motor produces no torque in them
                self._clear_command(i)
                self._active[i] = 0.0
            elif s.status == dm.STATUS_ENABLED:
                self._active[i] = 1.0
        elif rid == dm.RID_TIMEOUT:
            s.registers[rid] = value
            self._timeout[i] = value * WATCHDOG_TICK
            self._deadline[i] = np.inf
            self._arm_watchdog(s)
            self._next_deadline = float(self._deadline.min())
        else:
            # MST_ID, ESC_ID, CAN_BR: stored; a real drive applies them after save and power cycle
            s.registers[rid] = value

    # --- real-time thread ------------------------------------------------------------------

    def _drain(self) -> None:
        bus = self._bus
        while True:
            msg = bus.recv(timeout=0)
            if msg is None:
                return
            self._receive(msg)

    def _run(self) -> None:
        """Thread body: step physics on the wall clock, answer frames in between.

        Step k (k = 0, 1, ...) is run once the wall clock passes start + (k + 1) dt, so the
        simulation never runs ahead of real time. When late, up to MAX_CATCHUP_STEPS steps run
        back to back; any further backlog is dropped (sim time falls behind the wall clock)
        rather than burst through. Between steps the thread waits in bus.recv(timeout) so a
        frame is answered as soon as it arrives and the GIL is free while idle.
        """
        dt = self._dt
        bus = self._bus
        start = time.perf_counter()
        next_step = start + dt
        waited = 0.0
        try:
            while not self._stop_event.is_set():
                with self._lock:
                    self._drain()
                    now = time.perf_counter()
                    due = int((now - next_step) / dt) + 1 if now >= next_step else 0
                    if due > MAX_CATCHUP_STEPS:
                        lost = due - MAX_CATCHUP_STEPS
                        self._dropped_steps += lost
                        self._overruns += 1
                        next_step += lost * dt
                        due = MAX_CATCHUP_STEPS
                    if due > 1:
                        self._catchup_steps += due - 1
                    for k in range(due):
                        if k:
                            self._drain()
                        self._step()
                        next_step += dt
                wait = next_step - time.perf_counter()
                if wait > 0:
                    t0 = time.perf_counter()
                    msg = bus.recv(timeout=wait)
                    waited += time.perf_counter() - t0
                    if msg is not None:
                        with self._lock:
                            self._receive(msg)
                self._run_wall = time.perf_counter() - start
                self._busy = self._run_wall - waited
        except _Diverged as exc:
            with self._lock:
                self._fail(str(exc))
        except BaseException as exc:   # noqa: BLE001 -- a dead thread must leave a trace
            with self._lock:
                self._fail(f"emulator thread died: {type(exc).__name__}: {exc}", exc_info=exc)


class _Diverged(Exception):
    """MuJoCo reported a diverging state during a step."""


_BADQPOS = int(mujoco.mjtWarning.mjWARN_BADQPOS)
_BADQVEL = int(mujoco.mjtWarning.mjWARN_BADQVEL)
_BADQACC = int(mujoco.mjtWarning.mjWARN_BADQACC)
