"""Damiao DM-J motors in MIT mode over python-can: ``joint_states`` out, ``sysid/joint_command`` in.

Start-up: open the bus; with ``read_limits_from_motor`` read each motor's PMAX/VMAX/TMAX
registers (a motor that does not answer keeps the table's values, with a warning); enable
every motor and wait for its confirmation. A motor that never answers stops the start: every
motor is disabled again and the node raises.

Every control period (``control_rate_hz``, steady clock) the node

1. takes the feedback frames that arrived (the motors answer each frame once), waiting up
   to a quarter period for replies still missing, and believes only those that can be
   feedback of the motor on that id (``screen_feedback``: 8 bytes, the motor-id nibble, a
   position the motor can have reached); the others are counted, reported on
   ``/diagnostics`` and logged at most every few seconds,
2. once every motor has answered since the last message, publishes ``joint_states``:
   position, velocity and torque mapped to the joint side (direction, offset), stamped with
   the bus time of the newest reply (a silent motor is left out of the message),
3. sends exactly one frame per motor: the special frame of a running request (enable,
   disable, clear error), else the MIT command of the latest ``sysid/joint_command``
   (JointState, matched by name, partial commands allowed; p_des clamped to the joint
   limits, v_des and t_ff to the motor's VMAX and TMAX) or damping only; while disabled, a
   state refresh.

No position target: a joint whose commanded position is NaN is driven with kp = 0 (p_des the
measured position, clamped to the joint limits: the motor ignores it) by its velocity target,
with the ``kd`` parameter, and its effort feed-forward alone: this is how gravity compensation
lets an arm float and be guided by hand (``gravity_compensation`` sends velocity 0 and the
compensating torque). Its velocity and effort must be finite and no position infinite, or the
whole message is ignored. Every other rule holds for it (timeout, faults, clamps, effort
gains); ``max_position_error`` has no position to check.

Safety (the rules live in sysid_core.damiao.supervisor). A joint is tracked only while its
command is younger than ``command_timeout_s``, was received after tracking was last allowed
(an enable, a clear), and lies within ``max_position_error`` of the measured position (a
command without a position target passes that check: ``tracked_joints``); otherwise its motor
gets damping only: kp = 0, t_ff = 0, v_des = 0, its kd. Any status other than the one
expected (a fault 0x8-0xE, an undefined code, "disabled" from a motor that should be enabled),
silence for ``feedback_timeout_cycles`` cycles, or a request a motor did not complete is a
fault: it is latched, logged once, reported on ``/diagnostics``, and until
``sysid/damiao/clear_errors`` clears it (clear error, then enable) no joint is tracked: a
motor that reports "enabled" again by itself stays faulted. ``sysid/damiao/disable`` and
``sysid/damiao/enable`` switch all motors. The services never block the control loop: a
request runs one frame per cycle in the control timer while every other motor keeps getting
its frames, and the service answers when it is done. While disabled the node keeps polling the
motors (state refresh, no motion) so ``joint_states`` goes on. The motors are disabled when
the node is destroyed (Ctrl-C, SIGTERM, an exception in the executor) and at interpreter
exit. Bus errors are counted, logged and reported, never raised.

Effort gains (``effort_gains_file``, the JSON ``sysid-calibrate-effort`` writes): a motor
reports the torque its firmware believes it makes, off by a per-joint factor g = true torque /
reported. With the file, ``joint_states`` carries g x reported effort (the true joint torque)
and the feed-forward of every command is sent as t_ff / g, so the joint gets the torque asked
for. The file must name every joint of the bridge (it may name others: one file for several
buses); anything else stops the start.

Command log (``command_log_seconds`` of the newest rounds, preallocated, a ring): every round
of frames, one row: the send time on the clock of the ``joint_states`` stamps (the system
clock: SocketCAN and the virtual bus stamp in it, and the node clock stands in for adapters
that do not) and each motor's MIT command as the motor decodes it (the frame's bytes are kept
and decoded when saved, so the log carries the protocol's quantisation), joint side, in the
units of the published effort (tau_ff, kp, kd times the effort gain). A motor that got a
special frame or a state refresh that round holds no command: its row is zero (kp = kd = t_ff
= 0). ``sysid/damiao/save_commands`` (std_srvs/Trigger) writes the log to
``command_log_dir``/commands_<date>_<time>.npz (``identification.actuator.CommandLog.load``
reads it) from a worker thread, and answers with the path.

Loop record (``loop_record``, sysid_core.damiao.loop_record.LoopRecord, preallocated rings of
the newest ``LOOP_RECORD_S`` of cycles): each cycle's start (steady clock) and duration, and for
each ``joint_states`` message the age of every reply in it (publication minus the reply's bus
time). Two clock reads and a few stores per cycle; bench/damiao_loop.py reads it to measure the
loop's period, its overruns and the feedback's age.

Both encoders of DM-J*-2EC motors (``motor_states_hz`` > 0; 0, the default, turns this off):
the node reads each motor's registers RID 80 (p_m, motor side) and RID 81 (xout, output shaft)
at that rate per motor, at most one read request per control cycle (round robin, after the
cycle's MIT frames: sysid_core.damiao.dual_encoder has the schedule, the pairing and the
bus-load arithmetic behind the recommended 10 Hz; a rate that needs more than one read per
cycle stops the start). For each motor whose pair completed in a cycle it publishes
``motor_states`` (JointState, position only, those joints only), stamped like that cycle's
``joint_states`` (the next one, if that cycle published none), with position = the joint_states
position - delta, where delta = q_link - q_motor from the pair (xout unwrapped to the turn
nearest p_m; direction applied, the offsets cancel). A recorder's joint_states -
motor_states is then the measured deflection. Why not publish a motor-side position itself: on
a 2EC the feedback frame's position, and so joint_states, is already the motor side, so
joint_states - p_m would be about zero and the deflection lost; q - delta keeps the recording's
definition (deflection = joint_states - motor_states) exact whatever the firmware reports in
the feedback, motor side or output shaft. Register replies share the feedback id: any frame
on it echoing the motor's id and a read or write op (bytes 0-2) is taken as a register reply,
never decoded as feedback. A read unanswered for ``feedback_timeout_cycles`` cycles is given
up, its pair dropped and counted (``/diagnostics``); the loop never waits for one.

All names are relative (``joint_states``, ``sysid/joint_command``, ``sysid/damiao/enable``,
...), so the node runs under a namespace; ``/diagnostics`` is the one global topic the
diagnostics tools read, and its status names carry the node's namespace.

Bad parameters (lengths that differ, unknown motor types, joint limits the motor cannot
represent, a bus that cannot be opened) raise ValueError from the constructor, with
every problem named; ``damiao_bridge`` then exits with status 1.
"""
from __future__ import annotations

import atexit
import math
import threading
import time
from pathlib import Path

import can
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile
from rclpy.task import Future
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from sysid_core.damiao import protocol
from sysid_core.damiao.arm import DamiaoArm, registers_to_limits
from sysid_core.damiao.dual_encoder import DualEncoderReader, bus_load
from sysid_core.damiao.loop_record import LoopRecord
from sysid_core.damiao.supervisor import CLEAR, DISABLE, ENABLE, Supervisor, screen_feedback, tracked_joints
from sysid_core.errors import DataError
from sysid_core.identification.actuator import CommandLog, EffortGains
from sysid_ros.entry_point import spin_node

ENABLE_ATTEMPTS = 5          # a request sends its frame at least this many times to a motor ...
REQUEST_TIMEOUT_S = 0.1      # ... and for at least this long, one frame per cycle
REGISTER_WAIT_S = 0.05
REPLY_GRACE = 0.25           # of a control period, waited each cycle for replies still missing
DIAGNOSTICS_PERIOD_S = 1.0
WARN_PERIOD_S = 5.0          # a warning of one kind is logged at most this often (the rest counted)
MAX_NAME_LAYOUTS = 64       # name orders of joint_command remembered (a publisher sends one or two)
# frames read per cycle at most: a full 1 Mbit/s bus brings under 20 per 2 ms cycle (CAN FD a
# few times that); the bound keeps a babbling source from holding the control loop up
MAX_FRAMES_PER_CYCLE = 256
# bus timestamps farther than this from the system clock are not epoch times (some adapters
# count from power-up): the node clock stamps the message then
STAMP_PLAUSIBLE_S = 1.0
LOOP_RECORD_S = 10.0         # of cycles (and messages) ``loop_record`` keeps: read it at least this often


def load_effort_gains(path, joint_names) -> np.ndarray:
    """Gains (n,) in ``joint_names`` order from an effort gain file (EffortGains JSON);
    ValueError naming the file and what is wrong (missing, not such a file, joints without a gain)."""
    try:
        return EffortGains.load(path).for_joints(tuple(joint_names))
    except DataError as err:
        raise ValueError(f"effort_gains_file: {err}: give every joint of joint_names a gain (a joint not "
                         'calibrated, e.g. a gripper, may be added by hand with {"gain": 1.0, "std": 0.0})') from None


class DamiaoBridge(Node):
    """The bridge. Public for tests: ``arm`` (DamiaoArm), ``supervisor`` (fault latch and
    requests), ``published`` (JointState messages), ``cycles``, ``frames_sent``,
    ``frames_received`` (accepted), ``frames_rejected`` (on a feedback id, not believable),
    ``frames_other`` (on ids no motor of this arm answers on), ``bus_errors``, ``status`` (n,) last
    status code per motor (-1 before any feedback), ``faults`` (n,) latched reason or None,
    ``lost`` (n,) bool (silent now), ``enabled``, ``tracking`` (n,) bool of the last cycle,
    ``clamped`` (count of commands clamped), ``loop_record`` (the loop's timing),
    ``dual_encoder`` (the register reader, None while ``motor_states_hz`` is 0),
    ``motor_states_published``, ``register_replies_ignored`` (register replies nobody awaited)."""

    def __init__(self, **kwargs):
        super().__init__('damiao_bridge', **kwargs)
        self.declare_parameter('can_interface', 'socketcan')
        self.declare_parameter('can_channel', 'can0')
        self.declare_parameter('can_bitrate', 1000000)
        self.declare_parameter('can_fd', False)
        self.declare_parameter('can_data_bitrate', 5000000)
        self.declare_parameter('joint_names', Parameter.Type.STRING_ARRAY)
        self.declare_parameter('motor_types', Parameter.Type.STRING_ARRAY)
        self.declare_parameter('can_ids', Parameter.Type.INTEGER_ARRAY)
        self.declare_parameter('master_ids', Parameter.Type.INTEGER_ARRAY)
        self.declare_parameter('kp', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('kd', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('directions', Parameter.Type.INTEGER_ARRAY)
        self.declare_parameter('position_offsets', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('joint_lower_limits', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('joint_upper_limits', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('control_rate_hz', 500.0)
        self.declare_parameter('command_timeout_s', 0.1)
        self.declare_parameter('max_position_error', 0.5)
        self.declare_parameter('feedback_timeout_cycles', 3)
        self.declare_parameter('read_limits_from_motor', True)
        self.declare_parameter('effort_gains_file', '')
        self.declare_parameter('command_log_seconds', 300.0)
        self.declare_parameter('command_log_dir', 'sysid_output')
        self.declare_parameter('motor_states_hz', 0.0)

        self.published = self.cycles = self.frames_sent = self.frames_received = 0
        self.frames_rejected = self.frames_other = self.bus_errors = self.clamped = 0
        self.motor_states_published = self.register_replies_ignored = 0
        self.dual_encoder = None
        self._bus = None
        self._publishing = True
        # the control timer and the services run in different callback groups (a service
        # awaits its request while the timer runs it): one lock for the state both touch
        self._lock = threading.Lock()
        try:
            self._start()
        except BaseException:
            self.destroy_node()  # disables whatever was enabled and closes the bus
            raise
        atexit.register(self._release)
        self.get_logger().info(
            f"{self.arm.n} motors on {self._param('can_interface')}:{self._param('can_channel')}, "
            f"{self._rate:g} Hz: " + ", ".join(
                f"{j} {t} 0x{c:02X}/0x{m:02X}" for j, t, c, m in
                zip(self.arm.joint_names, self.arm.motor_types, self.arm.can_ids, self.arm.master_ids))
            + ("; all enabled" if not any(self.faults) else f"; faulted: {self.supervisor.describe(self._faulted())}"))

    @property
    def status(self) -> np.ndarray:
        return self.supervisor.status

    @property
    def faults(self) -> list:
        return self.supervisor.faults

    @property
    def enabled(self) -> bool:
        return self.supervisor.enabled

    # --- start-up ---------------------------------------------------------------------------

    def _start(self) -> None:
        self._rate = float(self._param('control_rate_hz'))
        self._timeout = float(self._param('command_timeout_s'))
        self._max_error = float(self._param('max_position_error'))
        self._fd = bool(self._param('can_fd'))
        self._silent_cycles = int(self._param('feedback_timeout_cycles'))
        if not (math.isfinite(self._rate) and 0 < self._rate <= 1000 and math.isfinite(self._timeout)
                and self._timeout >= 2.0 / self._rate and self._max_error >= 0 and self._silent_cycles >= 1):
            raise ValueError(f"control_rate_hz must be in (0, 1000] Hz, command_timeout_s at least two "
                             f"periods, max_position_error >= 0 and feedback_timeout_cycles >= 1; got "
                             f"{self._rate}, {self._timeout}, {self._max_error}, {self._silent_cycles}")
        self.arm = self._arm_from_parameters()
        n = self.arm.n
        motor_states_hz = float(self._param('motor_states_hz'))
        if not (math.isfinite(motor_states_hz) and motor_states_hz >= 0):
            raise ValueError(f"motor_states_hz must be >= 0 (0: no register reads), got {motor_states_hz}")
        # built now, used once the motors are enabled: a rate the bus budget cannot meet stops the start
        reader = DualEncoderReader(self.arm.directions, motor_states_hz, self._rate, self._silent_cycles) \
            if motor_states_hz > 0 else None
        gains_file = str(self._param('effort_gains_file'))
        self.effort_gains = load_effort_gains(gains_file, self.arm.joint_names) if gains_file else np.ones(n)
        log_seconds = float(self._param('command_log_seconds'))
        if not (math.isfinite(log_seconds) and log_seconds >= 0):
            raise ValueError(f"command_log_seconds must be >= 0 (0: no log), got {log_seconds}")
        # preallocated: a row per round, written in place by the control loop (no allocation)
        self._log_rows = math.ceil(log_seconds * self._rate)
        self._log_time = np.zeros(self._log_rows)
        self._log_frames = bytearray(self._log_rows * n * protocol.FRAME_LENGTH)
        self._log_mit = bytearray(self._log_rows * n)   # 1 where the motor got an MIT frame
        self._log_next = self._log_count = 0
        self.loop_record = LoopRecord(math.ceil(LOOP_RECORD_S * self._rate), n)
        self.supervisor = Supervisor(self.arm.joint_names,
                                     max(ENABLE_ATTEMPTS, math.ceil(REQUEST_TIMEOUT_S * self._rate)))
        self._by_master = {mid: j for j, mid in enumerate(self.arm.master_ids)}
        self.lost = np.zeros(n, dtype=bool)
        self.tracking = np.zeros(n, dtype=bool)
        self._feedback = np.zeros((3, n))        # motor-side position, velocity, torque
        self._temperatures = np.zeros((2, n), dtype=int)
        self._accepted_at = np.full(n, np.nan)   # time.monotonic() of the last accepted feedback
        self._fresh = np.zeros(n, dtype=bool)    # feedback since the last joint_states
        self._answered = np.zeros(n, dtype=bool)  # feedback since the last cycle
        self._missed = np.zeros(n, dtype=int)    # rounds of frames left unanswered, in a row
        self._round_sent = 0.0                   # time.monotonic() of the last round of frames
        self._bus_stamp = np.zeros(n)
        self._names = list(self.arm.joint_names)
        self._all_joints = np.arange(n)
        self._command = np.full((3, n), np.nan)  # joint-side q_des, dq_des, tau_ff
        self._command_time = np.full(n, -np.inf)  # time.monotonic() of receipt
        self._armed_at = math.inf                 # commands older than this are stale
        self._armed = False                       # tracking allowed in the last cycle
        self._waiters = []                        # (request, Future) of services awaiting a request
        self._reading_registers = False
        self._register_replies = {}
        self._command_layouts = {}
        self._warnings = {}                       # key -> (time logged, messages suppressed since)
        self._last_bus_error = self._last_rejected = ''
        self._diagnostics_name = self.get_fully_qualified_name().lstrip('/')
        self._state_pub = self.create_publisher(JointState, 'joint_states', QoSProfile(depth=100))
        self._deflections = {}                    # joint -> delta (joint units) awaiting a joint_states
        self._motor_states_pub = None
        if reader is not None:
            self._motor_states_pub = self.create_publisher(JointState, 'motor_states', QoSProfile(depth=100))
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)

        self._bus = self._open_bus()
        if self._param('read_limits_from_motor'):
            self._read_limits()
        request = self._run_now(ENABLE)
        if request.silent:
            raise ValueError("no feedback from " + ", ".join(
                f"{self.arm.joint_names[j]} (command id 0x{self.arm.can_ids[j]:02X}, feedback id "
                f"0x{self.arm.master_ids[j]:02X})" for j in request.silent)
                + f" after {self.supervisor.request_cycles} enable frames: check power, wiring, termination, "
                "the ids and the bitrate (CAN 2.0 vs FD)")

        self.create_subscription(JointState, 'sysid/joint_command', self._on_command, QoSProfile(depth=10))
        services = MutuallyExclusiveCallbackGroup()
        self.create_service(Trigger, 'sysid/damiao/enable', self._on_enable, callback_group=services)
        self.create_service(Trigger, 'sysid/damiao/disable', self._on_disable, callback_group=services)
        self.create_service(Trigger, 'sysid/damiao/clear_errors', self._on_clear_errors, callback_group=services)
        self.create_service(Trigger, 'sysid/damiao/save_commands', self._on_save_commands, callback_group=services)
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        if reader is not None:
            if not self._fd:
                load = bus_load(n, self._rate, motor_states_hz, float(self._param('can_bitrate')))
                self.get_logger().info(
                    f"motor_states at {motor_states_hz:g} Hz per motor: register reads take "
                    f"{100 * load['reads'][0]:.1f}-{100 * load['reads'][2]:.1f} % of the bus, MIT control "
                    f"{100 * load['mit'][0]:.0f}-{100 * load['mit'][2]:.0f} %")
            self.dual_encoder = reader            # from the first cycle of the loop on
        self.create_timer(1.0 / self._rate, self._on_cycle, clock=steady)
        self.create_timer(DIAGNOSTICS_PERIOD_S, self._publish_diagnostics, clock=steady)

    def _param(self, name):
        return self.get_parameter(name).value

    def _arm_from_parameters(self) -> DamiaoArm:
        values, missing = {}, []
        for name in ('joint_names', 'motor_types', 'can_ids', 'master_ids', 'kp', 'kd',
                     'joint_lower_limits', 'joint_upper_limits', 'directions', 'position_offsets'):
            try:
                values[name] = list(self._param(name))
            except ParameterUninitializedException:
                if name in ('directions', 'position_offsets'):
                    values[name] = None
                else:
                    missing.append(name)
        if missing:
            raise ValueError(f"parameters {missing} are not set: give them in the parameter file "
                             "(see config/damiao_arm.yaml)")
        return DamiaoArm.build(values['joint_names'], values['motor_types'], values['can_ids'],
                               values['master_ids'], values['kp'], values['kd'], values['joint_lower_limits'],
                               values['joint_upper_limits'], values['directions'], values['position_offsets'])

    def _open_bus(self) -> can.BusABC:
        interface, channel = self._param('can_interface'), self._param('can_channel')
        bitrate, fd = int(self._param('can_bitrate')), bool(self._param('can_fd'))
        # no can_filters: interfaces that filter in software (virtual, slcan, serial adapters)
        # answer recv(timeout=0) with None as soon as the next frame fails the filter, however
        # many replies wait behind it, so noise on other ids would hold the feedback back;
        # _receive sorts the ids itself
        options = dict(interface=interface, channel=channel, bitrate=bitrate)
        if fd:
            options.update(fd=True, data_bitrate=int(self._param('can_data_bitrate')))
        try:
            return can.Bus(**options)
        except (can.CanError, OSError, ValueError, ImportError, NotImplementedError) as err:
            hint = (f" (bring it up first: sudo ip link set {channel} up type can bitrate {bitrate})"
                    if interface == 'socketcan' else '')
            raise ValueError(f"cannot open CAN bus {interface}:{channel} at {bitrate} bit/s: {err}{hint}") from None

    def _read_limits(self) -> None:
        """PMAX/VMAX/TMAX from each motor's registers; the table's values where a motor is silent."""
        limits = list(self.arm.limits)
        self._reading_registers = True
        for j in range(self.arm.n):
            values = [self._read_register(j, rid) for rid in (protocol.RID_PMAX, protocol.RID_VMAX, protocol.RID_TMAX)]
            name = f"{self.arm.joint_names[j]} (0x{self.arm.can_ids[j]:02X})"
            if any(v is None for v in values):
                self.get_logger().warning(f"{name} did not answer the PMAX/VMAX/TMAX register reads within "
                                          f"{REGISTER_WAIT_S * 1e3:g} ms: using the {self.arm.motor_types[j]} table "
                                          f"values {limits[j]}")
                continue
            limits[j] = registers_to_limits(*values)
            if limits[j] != self.arm.limits[j]:
                self.get_logger().warning(f"{name} registers say {limits[j]}, the {self.arm.motor_types[j]} table "
                                          f"{self.arm.limits[j]}: using the registers")
        self._reading_registers = False
        self.arm = self.arm.with_limits(limits)

    def _read_register(self, j: int, rid: int):
        self._register_replies.pop((j, rid), None)
        self._send_frame(*protocol.read_register_frame(self.arm.can_ids[j], rid))
        deadline = time.monotonic() + REGISTER_WAIT_S
        while (j, rid) not in self._register_replies and time.monotonic() < deadline:
            self._receive(timeout=max(deadline - time.monotonic(), 0.0))
        return self._register_replies.pop((j, rid), None)

    def _run_now(self, kind: str):
        """Run a request to its end here, cycle by cycle at the control rate: at start-up and
        shutdown, when no executor drives the control timer.

        Cycle k is due at t0 + k T (steady clock); one that starts more than a period late skips
        the periods it missed, as the steady timer does. Never back to back to catch up: such a
        burst spends a request's frames before a motor can answer any of them (a descheduled
        thread emulating the motors, a slow adapter), and fails a request the motors complete."""
        with self._lock:
            request = self.supervisor.start(kind)
        period = 1.0 / self._rate
        due = time.monotonic()
        while not request.done and self._bus is not None:
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
                continue
            due += period
            if due <= now:
                due += (math.floor((now - due) / period) + 1) * period
            with self._lock:
                self._cycle()
        return request

    # --- bus I/O ----------------------------------------------------------------------------

    def _send_frame(self, arbitration_id: int, data: bytes) -> bool:
        try:
            self._bus.send(can.Message(arbitration_id=arbitration_id, data=data, is_extended_id=False,
                                       is_fd=self._fd, bitrate_switch=self._fd), timeout=0.001)
        except (can.CanError, OSError) as err:
            self._bus_error(f"send to 0x{arbitration_id:03X} failed: {err}")
            return False
        self.frames_sent += 1
        return True

    def _receive(self, timeout: float = 0.0) -> bool:
        """Handle one frame if one arrives within ``timeout`` s; False when none came."""
        try:
            msg = self._bus.recv(timeout=timeout)
        except (can.CanError, OSError) as err:
            self._bus_error(f"receive failed: {err}")
            return False
        if msg is None:
            return False
        if msg.is_error_frame:
            self._bus_error(f"error frame 0x{msg.arbitration_id:X} {bytes(msg.data).hex(' ')}")
            return True
        j = self._by_master.get(msg.arbitration_id)
        if j is None:
            self.frames_other += 1   # other traffic on the bus (or noise): none of this arm's business
            return True
        data = bytes(msg.data)
        if msg.is_extended_id or msg.is_remote_frame:
            self._reject(msg, "remote frame" if msg.is_remote_frame else "extended id")
            return True
        can_id = self.arm.can_ids[j]
        # register replies share the master id with feedback; they echo the motor's id and an op code.
        # Decoded as feedback, one would read as a position far off (the ids and the op code taken
        # for position bits); a feedback frame of this layout would need the motor at -PMAX
        if len(data) == protocol.FRAME_LENGTH and data[2] in (protocol.OP_READ, protocol.OP_WRITE) \
                and data[0] | data[1] << 8 == can_id:
            _, op, rid, value = protocol.decode_register_reply(data)
            self.frames_received += 1
            if self._reading_registers:
                self._register_replies[(j, rid)] = value
            elif not (op == protocol.OP_READ and self.dual_encoder is not None
                      and self.dual_encoder.reply(j, rid, value)):
                self.register_replies_ignored += 1
            return True
        now = time.monotonic()
        accepted_at = self._accepted_at[j]
        seen = not math.isnan(accepted_at)
        state = self._feedback
        feedback, why = screen_feedback(data, can_id, self.arm.limits[j], state[0, j] if seen else None,
                                        now - accepted_at if seen else 0.0)
        if feedback is None:
            self._reject(msg, why)
            return True
        self.frames_received += 1
        # element by element: assigning a tuple to a column costs a microsecond (every frame)
        state[0, j], state[1, j], state[2, j] = feedback.position, feedback.velocity, feedback.torque
        self._temperatures[0, j], self._temperatures[1, j] = feedback.mosfet_temperature, feedback.rotor_temperature
        self._accepted_at[j] = now
        self._fresh[j] = self._answered[j] = True
        self.lost[j] = False
        self._bus_stamp[j] = msg.timestamp
        self.supervisor.feedback(j, feedback.status)
        self._log_new_faults()
        return True

    def _reject(self, msg: can.Message, why: str) -> None:
        self.frames_rejected += 1
        self._last_rejected = f"0x{msg.arbitration_id:03X} [{bytes(msg.data).hex(' ')}]: {why}"
        self._warn('rejected', f"CAN frame ignored: {self._last_rejected} ({self.frames_rejected} so far)")

    def _bus_error(self, message: str) -> None:
        self.bus_errors += 1
        self._last_bus_error = message
        self._warn('bus', f"CAN {message} ({self.bus_errors} bus errors so far)")

    # --- control cycle ----------------------------------------------------------------------

    def _on_cycle(self):
        with self._lock:
            self._cycle()
            done = [future for request, future in self._waiters if request.done]
            if done:
                self._waiters = [w for w in self._waiters if not w[0].done]
        # wake the services whose request ended (outside the lock: in a multi-threaded
        # executor the awaiting coroutine may resume at once)
        for future in done:
            future.set_result(True)

    def _cycle(self):
        if self._bus is None:  # released at interpreter exit before the node was destroyed
            return
        start = time.monotonic()
        for _ in range(MAX_FRAMES_PER_CYCLE):
            if not self._receive():
                break
        # a reply or two still on the wire: wait a fraction of the period for them rather than
        # skip this cycle's joint_states (the wait releases the CPU to whoever sends them)
        deadline = time.monotonic() + REPLY_GRACE * (1.0 / self._rate)
        while not np.all(self._answered | self.lost) and time.monotonic() < deadline:
            self._receive(timeout=max(deadline - time.monotonic(), 0.0))
        if self.dual_encoder is not None:
            self._deflections.update(self.dual_encoder.end_receive(self._feedback[0]))
        self._check_feedback()
        if self._publishing:
            self._publish_state()
        special = self.supervisor.cycle()
        self._log_new_faults()
        self._round_sent = time.monotonic()
        self._send(special)
        self.cycles += 1
        self.loop_record.cycle(start, time.monotonic())

    def _check_feedback(self) -> None:
        # a cycle without a reply counts only if the last round of frames had half a period to
        # be answered: a late timer runs cycles back to back, faster than any motor replies
        if time.monotonic() - self._round_sent >= 0.5 / self._rate:
            self._missed += 1
        self._missed[self._answered] = 0
        self._answered[:] = False
        silent = self._missed >= self._silent_cycles
        if silent.any():
            for j in np.flatnonzero(silent & ~self.lost):
                self.lost[j] = True
                self.supervisor.lost(j, f"no feedback for {self._silent_cycles} cycles")
            self._log_new_faults()

    def _publish_state(self) -> None:
        # one message per round of replies: a reply that missed this cycle (bus or scheduling
        # jitter) arrives by the next, so wait for it rather than publish a partial message
        # that consumers matching the whole arm would drop; only silent motors are left out
        if not self._fresh.any() or not np.all(self._fresh | self.lost):
            return
        every = self._fresh.all()
        fresh = self._all_joints if every else np.flatnonzero(self._fresh)
        self._fresh[:] = False
        q, dq, tau = self.arm.to_joint(*self._feedback)
        tau *= self.effort_gains
        msg = JointState()
        stamp = float(self._bus_stamp.max() if every else self._bus_stamp[fresh].max())
        on_system_clock = abs(stamp - time.time()) < STAMP_PLAUSIBLE_S
        if on_system_clock:
            sec = math.floor(stamp)
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, int((stamp - sec) * 1e9)
        else:
            msg.header.stamp = self.get_clock().now().to_msg()
        if every:
            msg.name = self._names
            msg.position, msg.velocity, msg.effort = q.tolist(), dq.tolist(), tau.tolist()
        else:
            msg.name = [self._names[j] for j in fresh]
            msg.position, msg.velocity, msg.effort = q[fresh].tolist(), dq[fresh].tolist(), tau[fresh].tolist()
        self._state_pub.publish(msg)
        self.published += 1
        if on_system_clock:
            self.loop_record.message(time.time(), self._bus_stamp, fresh)
        if self._deflections:
            self._publish_motor_states(msg.header.stamp, q, fresh)

    def _publish_motor_states(self, stamp, q, fresh) -> None:
        """``motor_states`` for the joints of ``fresh`` whose deflection came in: q (n,) the
        joint_states positions just published under ``stamp``, minus the deflection."""
        joints = [j for j in fresh if j in self._deflections]
        if not joints:
            return
        msg = JointState()
        msg.header.stamp = stamp
        msg.name = [self._names[j] for j in joints]
        msg.position = [float(q[j]) - self._deflections.pop(j) for j in joints]
        self._motor_states_pub.publish(msg)
        self.motor_states_published += 1

    def _send(self, special: dict) -> None:
        """One frame per motor: ``special`` {joint: payload} of a request, else the MIT command
        (enabled) or a state refresh (disabled)."""
        may_track = self.supervisor.may_track
        if may_track and not self._armed:
            self._armed_at = time.monotonic()   # commands from before are stale
        self._armed = may_track
        commands = self._commands(may_track) if self.supervisor.enabled else None
        if commands is None:
            self.tracking[:] = False
        log = self._log_rows > 0
        if log:
            self._log_time[self._log_next] = time.time()   # the clock of the joint_states stamps
        first = self._log_next * self.arm.n      # the round's first motor in the log's flat arrays
        length = protocol.FRAME_LENGTH
        for j, can_id in enumerate(self.arm.can_ids):
            mit = False
            if j in special:
                self._send_frame(can_id, special[j])
            elif commands is not None:
                payload = protocol.encode_mit(commands[j], self.arm.limits[j])
                self._send_frame(can_id, payload)
                mit = True
                if log:
                    self._log_frames[(first + j) * length:(first + j + 1) * length] = payload
            else:
                self._send_frame(*protocol.refresh_frame(can_id))
            if log:
                self._log_mit[first + j] = mit
        if self.dual_encoder is not None and self._publishing:
            # after the cycle's commands: its id 0x7FF loses arbitration to them anyway
            read = self.dual_encoder.request()
            if read is not None:
                self._send_frame(*protocol.read_register_frame(self.arm.can_ids[read[0]], read[1]))
        if log:
            self._log_next = (self._log_next + 1) % self._log_rows
            self._log_count = min(self._log_count + 1, self._log_rows)

    def _commands(self, may_track: bool) -> list:
        q_measured = self.arm.directions * self._feedback[0] + self.arm.position_offsets
        track, far = tracked_joints(may_track, self._command_time, self._armed_at, time.monotonic(), self._timeout,
                                    self._command[0], q_measured, self.arm.lower, self.arm.upper, self._max_error)
        if far.any():
            self._warn('far', "commands more than max_position_error "
                       f"{self._max_error:g} rad from the measured position are not tracked: "
                       f"{[self.arm.joint_names[j] for j in np.flatnonzero(far)]}")
        self.tracking = track
        # the motor applies gain x what it is sent: send tau / gain to get tau
        commands, clamped = self.arm.commands(self._command[0], self._command[1],
                                              self._command[2] / self.effort_gains, track, q_measured)
        if clamped.any():
            self.clamped += int(clamped.sum())
            self._warn('clamp', f"commands clamped to the joint or motor limits: "
                       f"{[self.arm.joint_names[j] for j in np.flatnonzero(clamped)]} ({self.clamped} so far)")
        return commands

    # --- subscriptions and services ---------------------------------------------------------

    def _on_command(self, msg: JointState):
        names = tuple(msg.name)
        layout = self._command_layouts.get(names)
        if layout is None:
            if len(self._command_layouts) >= MAX_NAME_LAYOUTS:
                self._command_layouts.clear()
            where = {name: i for i, name in enumerate(names)}
            joints = [j for j, name in enumerate(self.arm.joint_names) if name in where]
            layout = self._command_layouts[names] = (np.array(joints, dtype=int),
                                                     np.array([where[self.arm.joint_names[j]] for j in joints],
                                                              dtype=int))
        joints, index = layout
        m = len(names)
        if joints.size == 0 or len(msg.position) != m or len(msg.velocity) not in (0, m) \
                or len(msg.effort) not in (0, m):
            self._warn('command', f"joint_command ignored: names {list(names)} match none of "
                       f"{list(self.arm.joint_names)} or position/velocity/effort have "
                       f"{len(msg.position)}/{len(msg.velocity)}/{len(msg.effort)} values for {m} names "
                       "(position is required, velocity and effort may be empty)")
            return
        values = np.zeros((3, joints.size))
        values[0] = np.asarray(msg.position)[index]
        if len(msg.velocity):
            values[1] = np.asarray(msg.velocity)[index]
        if len(msg.effort):
            values[2] = np.asarray(msg.effort)[index]
        # a NaN position is a joint without a position target (kp 0); anything else must be finite
        if not (np.all(np.isfinite(values[1:])) and not np.any(np.isinf(values[0]))):
            self._warn('command', "joint_command with an infinite position, or a NaN or infinite velocity or "
                       "effort, ignored (a NaN position means no position target)")
            return
        self._command[:, joints] = values
        self._command_time[joints] = time.monotonic()

    async def _request(self, kind: str):
        """Start a request and wait, without blocking the executor, until the control timer
        has run it to its end."""
        future = Future(executor=self.executor)
        with self._lock:
            request = self.supervisor.start(kind)
            if not request.done:
                self._waiters.append((request, future))
        if not request.done:
            await future
        return request

    async def _on_enable(self, request, response):
        done = await self._request(ENABLE)
        response.success = done.succeeded
        response.message = done.refused or ("all motors enabled" if not done.failed else
                                            f"not enabled: {self._failures(done)}; call sysid/damiao/clear_errors")
        return response

    async def _on_disable(self, request, response):
        done = await self._request(DISABLE)
        response.success = done.succeeded
        response.message = "all motors disabled" if not done.failed else \
            f"no disable confirmation from {self._failures(done)}"
        return response

    async def _on_clear_errors(self, request, response):
        done = await self._request(CLEAR)
        response.success = done.succeeded
        if done.refused:
            response.message = done.refused
        elif not done.joints:
            response.message = "no faults"
        elif not done.failed:
            response.message = f"cleared {[self.arm.joint_names[j] for j in done.joints]}"
        else:
            response.message = f"still faulted: {self._failures(done)}"
        self._publish_diagnostics()
        return response

    async def _on_save_commands(self, request, response):
        # copy, decode and write in a worker thread: the control loop shares this executor and
        # must wait neither for the disk nor for a copy of the whole ring
        if self._log_count < 3:
            response.success, response.message = False, (
                "command log is off (command_log_seconds: 0)" if not self._log_rows else
                f"only {self._log_count} rounds of commands logged so far: nothing to save")
            return response
        done = Future(executor=self.executor)

        def write():
            try:
                done.set_result(self._write_command_log(*self._log_snapshot()))
            except (DataError, OSError, ValueError) as err:
                done.set_result(err)
        threading.Thread(target=write, name="save_commands", daemon=True).start()
        result = await done
        response.success = not isinstance(result, Exception)
        response.message = str(result) if response.success else f"command log not saved: {result}"
        return response

    def _log_snapshot(self):
        """(time (K,), frames (K, n, 8) uint8, mit (K, n) uint8) of the logged rounds, oldest
        first. Copied while the control loop goes on writing: the rounds it overwrote meanwhile
        (the oldest) are dropped, so every row returned is whole."""
        with self._lock:
            count, end = self._log_count, self._log_next
        rows, n = self._log_rows, self.arm.n
        frames = np.frombuffer(self._log_frames, dtype=np.uint8).reshape(rows, n, protocol.FRAME_LENGTH)
        mit = np.frombuffer(self._log_mit, dtype=np.uint8).reshape(rows, n)
        start = (end - count) % rows
        parts = [slice(start, start + count)] if start + count <= rows else [slice(start, rows), slice(0, end)]
        copies = [np.concatenate([a[p] for p in parts]) for a in (self._log_time, frames, mit)]
        with self._lock:
            written = (self._log_next - end) % rows     # rounds completed meanwhile (far fewer than rows)
        # the control loop writes a round under the lock this copy does not take: one more may be under way
        lost = min(max(count + written + 1 - rows, 0), count)
        return tuple(c[lost:] for c in copies)

    def _write_command_log(self, times, frames, mit) -> str:
        """Decode the logged frames (joint side, published-effort units), save them; a line saying where."""
        k, n = mit.shape
        values = np.zeros((5, k, n))
        for j in range(n):
            values[:, :, j] = protocol.decode_mit_payloads(frames[:, j], self.arm.limits[j]).T
        if k < 3:
            raise DataError("the log moved on while it was copied: call again")
        values *= mit.astype(bool)[None]                  # no MIT frame: no command held
        p, v, kp, kd, t = values
        d, g = self.arm.directions, self.effort_gains
        log = CommandLog(times, d * p + self.arm.position_offsets, d * v, g * d * t, g * kp, g * kd,
                         self.arm.joint_names)
        folder = Path(str(self._param('command_log_dir'))).expanduser()
        name = time.strftime("commands_%Y%m%d_%H%M%S", time.localtime(times[-1])) + f"_{int(times[-1] * 1e3) % 1000:03d}"
        path = log.save(folder / f"{name}.npz", g).resolve()
        return f"{path}: {k} rounds, {times[-1] - times[0]:.1f} s" + (
            " (the log is full: older rounds were overwritten)" if k == self._log_rows else "")

    # --- reporting --------------------------------------------------------------------------

    def _faulted(self) -> list:
        return [j for j, fault in enumerate(self.supervisor.faults) if fault is not None]

    def _failures(self, request) -> str:
        return ", ".join(f"{self.arm.joint_names[j]} ({why})" for j, why in sorted(request.failed.items()))

    def _log_new_faults(self) -> None:
        # once per latched fault: a fault stays latched until cleared, so this cannot flood
        news = self.supervisor.new_faults()
        for j, reason in news:
            self.get_logger().error(f"{self.arm.joint_names[j]} (0x{self.arm.can_ids[j]:02X}): {reason}; no joint "
                                    "is tracked until sysid/damiao/clear_errors succeeds")
        if news:
            self._publish_diagnostics()

    def _warn(self, key: str, message: str) -> None:
        # throttled by hand: rclpy's throttling inspects the stack on every call, too slow at 500 Hz
        now = time.monotonic()
        logged, suppressed = self._warnings.get(key, (-math.inf, 0))
        if now - logged < WARN_PERIOD_S:
            self._warnings[key] = (logged, suppressed + 1)
            return
        self._warnings[key] = (now, 0)
        if suppressed:
            message += f" [{suppressed} more like this in the last {now - logged:.0f} s]"
        self.get_logger().warning(message)

    def _publish_diagnostics(self) -> None:
        if not self._publishing:
            return
        q, dq, tau = self.arm.to_joint(*self._feedback)
        tau *= self.effort_gains
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        hardware = f"{self._param('can_interface')}:{self._param('can_channel')}"
        for j, name in enumerate(self.arm.joint_names):
            status = int(self.status[j])
            fault = self.supervisor.faults[j]
            if fault is not None:
                level, message = DiagnosticStatus.ERROR, f"fault: {fault}"
            elif self.lost[j]:
                level, message = DiagnosticStatus.ERROR, "no feedback"
            elif status == protocol.STATUS_ENABLED:
                level = DiagnosticStatus.OK
                message = ("enabled, damping only (no fresh command)" if not self.tracking[j] else
                           "floating (no position target: kp 0)" if math.isnan(self._command[0, j]) else "tracking")
            else:
                level = DiagnosticStatus.WARN if self.enabled else DiagnosticStatus.OK
                message = "no feedback yet" if status < 0 else protocol.status_text(status)
            values = {"status": f"0x{status:X}" if status >= 0 else "none", "motor_type": self.arm.motor_types[j],
                      "position_rad": f"{q[j]:.4f}", "velocity_rad_s": f"{dq[j]:.4f}", "torque_nm": f"{tau[j]:.3f}",
                      "mosfet_temperature_c": str(self._temperatures[0, j]),
                      "rotor_temperature_c": str(self._temperatures[1, j])}
            array.status.append(DiagnosticStatus(
                level=level, name=f"{self._diagnostics_name}: {name}", message=message,
                hardware_id=f"{hardware}:0x{self.arm.can_ids[j]:02X}",
                values=[KeyValue(key=k, value=v) for k, v in values.items()]))
        problems = [f"{self.bus_errors} bus errors" + (f", last: {self._last_bus_error}" if self.bus_errors else "")]
        if self.frames_rejected:
            problems.append(f"{self.frames_rejected} frames ignored, last: {self._last_rejected}")
        counts = {"frames_sent": self.frames_sent, "frames_received": self.frames_received,
                  "frames_rejected": self.frames_rejected, "frames_other_ids": self.frames_other,
                  "commands_clamped": self.clamped, "register_replies_ignored": self.register_replies_ignored}
        if self.dual_encoder is not None:
            reads = self.dual_encoder.counters()
            counts.update({f"register_{key}": value for key, value in reads.items()},
                          motor_states_published=self.motor_states_published)
            if reads["reads_lost"]:
                problems.append(f"{reads['reads_lost']} register reads unanswered, "
                                f"{reads['pairs_dropped']} motor_states samples dropped")
        array.status.append(DiagnosticStatus(
            level=DiagnosticStatus.WARN if self.bus_errors or self.frames_rejected else DiagnosticStatus.OK,
            name=f"{self._diagnostics_name}: bus", hardware_id=hardware, message="; ".join(problems),
            values=[KeyValue(key=key, value=str(value)) for key, value in counts.items()]))
        self._diagnostics_pub.publish(array)

    # --- shutdown ---------------------------------------------------------------------------

    def _release(self) -> None:
        """Disable every motor and close the bus; safe to call more than once."""
        if self._bus is None:
            return
        self._publishing = False   # the context may be gone (interpreter exit)
        try:
            request = self._run_now(DISABLE)
            if request.failed:
                print(f"damiao_bridge: no disable confirmation from {self._failures(request)}", flush=True)
        finally:
            self._bus.shutdown()
            self._bus = None
            atexit.unregister(self._release)

    def destroy_node(self):
        self._release()
        return super().destroy_node()


def main(args=None):
    spin_node(DamiaoBridge, args)


if __name__ == "__main__":
    main()
