"""A virtual Damiao-driven arm: DM-J motors in MIT mode on a python-can bus, MuJoCo as the plant.

Every joint of an MJCF model is driven by one emulated motor that speaks the Damiao protocol
(shared/reference/damiao-mit-protocol.md) through the codec in ``sysid_core.damiao``:

* it answers each frame addressed to it (MIT command or special frame on its CAN_ID; 0x7FF
  management frame naming its CAN_ID) with exactly one reply on its MST_ID: a feedback frame
  for MIT, special and refresh frames, a register reply for read/write/save;
* enable/disable/clear error/save zero behave as on the real drives, faults (0x8..0xE) take
  the motor out of enable until cleared, the TIMEOUT register arms a CAN watchdog (0xD);
* the MIT law T = kp (p_des - p) + kd (v_des - v) + t_ff, clamped to +-TMAX, is evaluated at
  every physics step from the true motor-side state at the middle of the step and applied as a
  joint torque.

The arm, its physics and the drives' law on it are ``emulated_plant.EmulatedPlant`` (its
module docstring: the mid-step law, motor side and joint side, the friction law,
``frictionloss``, the elastic transmission); this module is the motors on the bus.

The actuator's truth, for identifying it (all off by default):

* ``EmulatedMotor.effort_gain`` g: the joint receives g T while the feedback reports T, the
  torque the firmware believes it makes (its current times a torque constant that is off);
* ``delay`` s: every frame a motor reads is acted on, and answered, that long after (bus,
  adapter and firmware latency), so a command takes effect ``delay`` after it was sent and its
  reply carries the state of that moment;
* ``joint_friction``: a friction torque f(dq) (n,) N m opposing the motion, re-evaluated every
  step (e.g. ``simulation.StribeckFriction``), beyond the model's own damping and frictionloss.

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
realistic error), temperatures (constant), other control modes (CTRL_MODE != 1 means zero
torque), flash (save stores nothing that survives the object) and ID changes (writes to
MST_ID/ESC_ID/CAN_BR are stored and read back but do not re-route); nor, in the plant, the
current loop and motor electrics or a gearbox's backlash and ripple.

With an elastic transmission (``transmission``) the motor is the rotor: the MIT law sees the
rotor's state and the feedback frame reports it (the motor side, as a 2EC motor's feedback
does); register 81 reads the link. The plant's timestep is then the file's divided into the
substeps the spring and ``drive_gains`` need: ``advance`` and the real-time thread step at that
shorter timestep.

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
import logging
import math
import numbers
import threading
import time
from dataclasses import dataclass

import can
import numpy as np

from ..simulation.elastic import Transmission
from . import protocol as dm
from .emulated_plant import COULOMB_SMOOTHING, EmulatedPlant
from .protocol import MotorLimits

__all__ = ["CAN_BR_1M", "COULOMB_SMOOTHING", "MAX_CATCHUP_STEPS", "WATCHDOG_TICK", "EmulatedMotor",
           "VirtualDamiaoArm", "emulated_motors"]

logger = logging.getLogger(__name__)

WATCHDOG_TICK = 50e-6
"""Unit of the TIMEOUT register (RID 9), s."""

CAN_BR_1M = 4
"""CAN_BR register code of 1 Mbit/s, the value every emulated motor reports."""

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


def _check_ids(motors) -> None:
    """Raise ValueError unless ``motors`` are EmulatedMotors with unique can_ids and master_ids,
    no master_id being a can_id."""
    for m in motors:
        if not isinstance(m, EmulatedMotor):
            raise ValueError(f"motors must be EmulatedMotor instances, got {type(m).__name__}")
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


class _MotorState:
    """Mutable per-motor state that is not in the vectorised arrays of VirtualDamiaoArm."""

    __slots__ = ("spec", "index", "status", "silent", "limits", "registers", "id_nibble")

    def __init__(self, spec: EmulatedMotor, index: int, timeout_ticks: int):
        self.spec = spec
        self.index = index                   # joint index (the plant maps it to qpos and dof)
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

    - ``model_path``: MJCF file (str/Path) or an already compiled ``mujoco.MjModel``. Hinge and
      slide joints only; every joint needs exactly one motor and every motor a joint.
    - ``motors``: EmulatedMotor per joint, any order. can_id and master_id must be unique, and no
      master_id may equal a can_id (a reply would read as a command).
    - ``interface``, ``channel``, ``bus_kwargs``: passed to ``can.Bus`` (default: python-can
      ``virtual``, which links the buses of one process that use the same channel name).
    - ``timeout_ticks``: initial TIMEOUT register of every motor, units of 50 us; 0 = watchdog off.
    - ``initial_positions``: joint positions at t = 0 (rad or m), a sequence in model joint order
      or a mapping joint name -> position (missing joints stay at qpos0). Velocities start at 0.
    - ``realtime``: True runs physics in a thread after ``start()``; False is manual mode
      (``poll``/``advance``).
    - ``temperatures``: (MOSFET, coil) deg C reported in every feedback frame.
    - ``delay``: s (>= 0), how long after a frame is read a motor acts on it and answers.
    - ``joint_friction``: None or a callable qvel (n,) rad/s -> (n,) N m, friction opposing the
      motion.
    - ``frictionloss``: "law" (default) applies the model's frictionloss and damping as a law of
      the velocity, with ``joint_friction`` (see ``emulated_plant``); "constraint" leaves them to
      MuJoCo (soft frictionloss constraint, implicit damping) and adds ``joint_friction``
      explicitly. The model passed in is not changed (the emulator works on a copy).
    - ``transmission``: None (rigid) or a ``simulation.elastic.Transmission`` (stiffness, damping
      and rotor inertia per joint, joint order of the file; hinge joints only, ``model_path`` a
      file): the elastic arm of ``emulated_plant``. ``joint_friction`` then gets the rotors'
      velocities (n,) rad/s and acts on the rotors.
    - ``drive_gains``: with a transmission, (kp (n,) N m/rad, kd (n,) N m s/rad), the largest
      gains the host will send, for the timestep; None: the MIT frame's maxima.

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
        if isinstance(timeout_ticks, bool) or not isinstance(timeout_ticks, numbers.Integral) \
                or not 0 <= timeout_ticks <= 0xFFFFFFFF:
            raise ValueError(f"timeout_ticks must be an integer in 0..2^32-1 (units of 50 us), "
                             f"got {timeout_ticks!r}")
        timeout_ticks = int(timeout_ticks)
        motors = list(motors)
        _check_ids(motors)
        self._temperatures = _temperature_bytes(temperatures)
        if not (isinstance(delay, numbers.Real) and math.isfinite(delay) and delay >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        self._delay = float(delay)

        self._plant = plant = EmulatedPlant(
            model_path, motors, transmission=transmission, drive_gains=drive_gains, frictionloss=frictionloss,
            joint_friction=joint_friction, initial_positions=initial_positions)
        self.joint_names = plant.joint_names
        self._dt = plant.dt
        n = len(plant.joint_names)
        # motor i drives joint i: the plant's drives and these states share the joint index
        self._states = [_MotorState(m, j, timeout_ticks) for j, m in enumerate(plant.motors)]
        self._by_can_id = {s.spec.can_id: s for s in self._states}
        for s in self._states:
            plant.set_torque_limit(s.index, s.limits.tmax)

        self._interface, self._channel = interface, channel
        self._bus_kwargs = dict(bus_kwargs or {})
        self._realtime = bool(realtime)
        self._pending = collections.deque()     # (sim time due, frame) read but not yet acted on
        self._timeout = np.array([timeout_ticks * WATCHDOG_TICK] * n, dtype=float)
        self._last_rx = np.zeros(n)             # sim time of the last frame per motor, s
        self._deadline = np.full(n, np.inf)     # sim time at which the watchdog fires
        self._next_deadline = np.inf
        self._scripts = {}                      # motor index -> [(sim time, status), ...] still to come
        self._next_script = np.inf              # sim time of the earliest of them

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
        return float(self._plant.time)

    @property
    def q(self) -> np.ndarray:
        """True joint (link-side) positions (n,), model joint order, rad (m for slides); a copy."""
        with self._lock:
            return self._plant.q

    @property
    def dq(self) -> np.ndarray:
        """True joint (link-side) velocities (n,), rad/s (m/s); a copy."""
        with self._lock:
            return self._plant.dq

    @property
    def motor_q(self) -> np.ndarray:
        """True motor-side positions (n,) in joint units (the rotor's angle: motor angle / gear
        ratio, the joint's zero and sign), rad; ``q`` without a transmission; a copy. The
        deflection is ``q - motor_q``."""
        with self._lock:
            return self._plant.motor_q

    @property
    def motor_dq(self) -> np.ndarray:
        """True motor-side velocities (n,) in joint units, rad/s; ``dq`` without a transmission."""
        with self._lock:
            return self._plant.motor_dq

    @property
    def tau(self) -> np.ndarray:
        """Joint torques (n,) the motors applied during the last physics step, N m (N);
        = direction * effort_gain * T (joint friction not included)."""
        with self._lock:
            return self._plant.tau

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
                at = self._plant.time
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
        """One physics step under the MIT law of every motor; then the frames now due, the
        watchdog and the scripts."""
        t0 = time.perf_counter()
        diverging = self._plant.step()
        self._steps += 1
        now = self._plant.time
        while self._pending and now >= self._pending[0][0] - _TIME_EPS:
            self._handle(self._pending.popleft()[1])
        if diverging:
            raise _Diverged(f"{self._plant.divergence()}; torques zeroed, replies stopped")
        if now >= self._next_deadline - _TIME_EPS:
            self._watchdog()
        if now >= self._next_script - _TIME_EPS:
            self._play_scripts()
        cost = time.perf_counter() - t0
        self._step_cost_sum += cost
        if cost > self._step_cost_max:
            self._step_cost_max = cost

    def _watchdog(self) -> None:
        now = self._plant.time
        for s in self._states:
            if now >= self._deadline[s.index] - _TIME_EPS:
                self._fault(s, dm.STATUS_COMMUNICATION_LOST)
        self._next_deadline = float(self._deadline.min())

    def _play_scripts(self) -> None:
        now = self._plant.time
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
        self._plant.halt()

    # --- motor state changes ----------------------------------------------------------------

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
        self._plant.clear_command(i)     # zero torque until the first MIT command
        self._plant.set_active(i, s.registers[dm.RID_CTRL_MODE] == dm.CTRL_MODE_MIT)
        self._arm_watchdog(s)

    def _leave_enable(self, i: int) -> None:
        self._plant.set_active(i, False)
        self._plant.clear_command(i)
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

    # --- frames ----------------------------------------------------------------------------

    def _receive(self, msg: can.Message) -> None:
        """A frame read off the bus: handled now, or queued for ``delay`` of sim time."""
        if self._delay > 0.0:
            self._pending.append((self._plant.time + self._delay, msg))
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
        self._last_rx[s.index] = self._plant.time
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
                    self._plant.zero_position(i)
        elif (s.status == dm.STATUS_ENABLED
              and s.registers[dm.RID_CTRL_MODE] == dm.CTRL_MODE_MIT):
            self._plant.set_command(i, dm.decode_mit(data, s.limits))
        # else: an MIT frame while disabled, faulted or in another mode is ignored, yet answered
        return self._feedback(s)

    def _feedback(self, s: _MotorState) -> bytes:
        p, v, t = self._plant.motor_state(s.index)
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
            return _float32(self._plant.motor_state(i)[0])
        if rid == dm.RID_OUTPUT_POSITION:
            # the output shaft's single-turn encoder, on the motor's zero and sign
            link = self._plant.output_position(i)
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
            self._plant.set_torque_limit(i, s.limits.tmax)
        elif rid == dm.RID_CTRL_MODE:
            if value not in (dm.CTRL_MODE_MIT, dm.CTRL_MODE_POS_VEL, dm.CTRL_MODE_VEL,
                             dm.CTRL_MODE_POS_FORCE):
                return
            s.registers[rid] = value
            if value != dm.CTRL_MODE_MIT:
                # other modes are not emulated: the motor produces no torque in them
                self._plant.clear_command(i)
                self._plant.set_active(i, False)
            elif s.status == dm.STATUS_ENABLED:
                self._plant.set_active(i, True)
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

