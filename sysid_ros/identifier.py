"""Identifier node: records joint_states and identifies the arm when asked.

Subscribes
    joint_states (sensor_msgs/JointState): position, velocity and effort of the arm's
    joints, matched to the model by name (any order, extra joints ignored). Reliable, with a
    queue of JOINT_STATES_DEPTH messages: a loaded machine delivers a 1 kHz stream in bursts.
    sysid/joint_state_block (std_msgs/Float64MultiArray), instead of joint_states with
    ``state_blocks``: mujoco_sim's state blocks (its docstring gives the layout), each sample
    screened and counted as a message of its own.
    motor_states (sensor_msgs/JointState, position only; not with ``state_blocks``, whose rows
    carry the motor side when the simulation has it): a double-encoder arm's motor-side
    positions in joint units (motor angle / gear ratio, the joint's zero and sign), each message
    stamped like the joint state it belongs to and naming any of the joints (a driver may read
    them at some samples only); matched to the joint states by stamp. With them, params.json
    carries each joint's transmission stiffness and damping and the residual model's inputs the
    deflection. Screened and counted as joint_states are (``motor_states`` in the answer).
    sysid/done (std_msgs/Bool, transient local): the excitation ended (identify_on_done).
    robot_description (std_msgs/String, transient local): the arm's URDF (or MJCF), as
    robot_state_publisher publishes it; the model when parameter ``model`` is empty. The first
    description that loads is kept (sysid_ros.robot_description, as trajectory_publisher's).
Services
    sysid/identify (std_srvs/Trigger): identify from everything recorded so far (or from the
    bag of parameter ``recording``); the recording is kept, so the call can be repeated with
    other parameters. The answer's message is the result summary as JSON (with the verdict:
    ``verdict`` good, doubtful or failed, ``verdict_reasons``) whenever an identification came
    out; ``success`` is true only when its verdict is not failed and the updated model was
    written. Input that cannot be identified (no model, too few samples) answers success false
    with a one-line reason.
    sysid/reset (std_srvs/Trigger): forget the recording and the counters.
    sysid/save_recording (std_srvs/Trigger): write the recording as a rosbag2 MCAP bag
    (``save_path``, default a timestamped directory in ``output_dir``).
Publishes
    sysid/result (std_msgs/String, transient local): the params.json document of the
    last successful identification, as JSON.
    sysid/payload (geometry_msgs/Inertia, transient local): the payload of the last successful
    identification: the identified terminal body minus the model's own, in ``payload_frame``.

Screening: a message is refused on its own (counted by kind, the first and last of each kind
in the service answer) when it names a joint twice or lacks one, has a NaN or infinite value,
or is stamped at or before the last sample kept; see sysid_core.identification.screening and
live_recording, which holds the recording being made (buffer, screening, counters).

Lost samples (holes in the stamps of a steady source) are counted; beyond
screening.LOST_DOUBTFUL of the samples they make the verdict doubtful, beyond LOST_FAILED failed.

Names are relative: under a namespace (``--ros-args -r __ns:=/robot1``) every topic and
service moves with it. The identification runs in a thread of its own, so the recording goes
on meanwhile; the node spins on one thread (rclpy's multi-threaded executor drops messages of
a bursty stream, see test/test_node_processes.py). The node converts messages and calls
sysid_core; all the numerics live there.
"""
from __future__ import annotations

import json
import math
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import InvalidHandle, ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from geometry_msgs.msg import Inertia, Vector3
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import Trigger

from sysid_core.cli import clear_previous_outputs
from sysid_core.dynamics import friction
from sysid_core.dynamics.joint_physics import MujocoPhysics
from sysid_core.dynamics.model import Robot, load_robot
from sysid_core.errors import DataError, IdentificationError, ModelError, SysidError
from sysid_core.identification.filtering import FilterConfig
from sysid_core.identification.identify import ESTIMATORS, SCOPES, IdentificationConfig, identify
from sysid_core.identification.live_recording import (EFFORT_MODES, RECEIVE_STAMPED, LiveRecording, RecordingCounts,
                                                      SampleBuffer, joint_torque, saved_recording)
from sysid_core.identification.recording import Recording
from sysid_core.identification.recording_files import read_recordings, write_rosbag
from sysid_core.identification.residual import compensate
from sysid_core.identification.run_size import ROWS_PER_CUTOFF, TARGET_ROWS, automatic_decimation, check_memory
from sysid_core.identification import screening
from sysid_core.results.export import add_transmission, params_document, write_params_json
from sysid_core.results.payload import terminal_inertia, with_consistent_inertia
from sysid_core.results.urdf_export import write_updated_robot
from sysid_core.results.plots import write_plots
from sysid_core.results.html_report import write_html_report
from sysid_core.results.report import format_result
from sysid_core.simulation import simulation_timing
from sysid_ros.entry_point import spin_node
from sysid_ros.robot_description import RobotDescription

DEFAULT_CAPACITY = 600_000  # 10 min at 1 kHz
WARN_PERIOD_S = 5.0
# joint_states messages the subscription queues: 10 s at 1 kHz, a few MB. A loaded machine
# wakes the node to bursts of queued messages, and an identification competes for the GIL.
JOINT_STATES_DEPTH = 10_000
# identify_on_done waits for the samples measured before the done flag, still queued or in
# flight: until none arrived over two ticks SETTLE_QUIET_S apart (the simulator pauses when the
# excitation is done), or until a sample stamped SETTLE_RUN_ON_S after the flag's arrival on
# this node's clock is in (a driver never stops; in order, what it sent before is here then), at
# most SETTLE_LIMIT_S (a source that never stops, stamped on another clock)
SETTLE_QUIET_S = 0.25
SETTLE_RUN_ON_S = 2.0
SETTLE_LIMIT_S = 30.0
# shutdown: how long an identification or a save still running is given to finish (s); a
# second Ctrl-C does not cut this wait, so it is bounded
WORKER_WAIT_S = 120.0
# exit status of the node after identify_on_done with exit_when_done (as sysid-identify's)
EXIT_OK, EXIT_BAD_INPUT, EXIT_FAILED = 0, 2, 3
# what to do when an identification would not fit in memory
MEMORY_REMEDY = ("raise decimation (0: automatic) or use scope terminal, or save the recording "
                 "(sysid/save_recording) and identify it elsewhere; the recording is kept")


def _describe(text: str, read_only: bool = False) -> ParameterDescriptor:
    return ParameterDescriptor(description=text, read_only=read_only)


# name: (default, description). A Parameter.Type default declares a typed parameter
# without a value (rclpy would type an empty list default as a byte array).
PARAMETERS = {
    "model": ("", "path of the nominal MJCF of the arm (required); reloaded at the next identify"),
    "terminal_body": ("", "body to identify in the terminal scope; empty: the deepest moving body"),
    "scope": ("terminal", f"one of {SCOPES}: terminal body + joint friction, or the whole arm's base parameters"),
    "estimator": ("consistent", f"one of {ESTIMATORS}; consistent (WLS, then the nearest physically consistent "
                                "parameters) always gives a model MuJoCo can load"),
    "simulated_physics": (False, "true when the data come from MuJoCo forward simulation (mujoco_sim): "
                                 "MuJoCo's frictionloss constraint and implicit damping are modelled as it "
                                 "applies them; false: a real arm"),
    "robust": (False, "Huber IRLS weighting: outlying samples (glitches, contacts) get a bounded weight"),
    "friction_terms": (["coulomb", "viscous"], f"per-joint terms to identify, from {friction.TERMS}"),
    "coulomb_smoothing": (0.0, "rad/s; Coulomb friction as tanh(dq / s) instead of sign(dq) when > 0"),
    "friction_model": ("coulomb_viscous", f"each joint's friction law, one of {friction.FRICTION_MODELS} for every "
                                          "joint or a comma list with one per joint (tanh, stribeck_tanh: a "
                                          "Coulomb step that is not sharp, a Stribeck peak)"),
    "cutoff_hz": (10.0, "Hz, low-pass cutoff of the measured q, dq and effort"),
    "velocity_from_position": (False, "differentiate the position instead of using JointState.velocity "
                                      "(for drives whose velocity lags)"),
    "decimation": (0, "keep every n-th sample after filtering; 0: automatic, about "
                      f"{TARGET_ROWS} rows but at least {ROWS_PER_CUTOFF:g} per second per Hz of cutoff_hz "
                      "(the regressor needs ~4 kB per kept sample of a 7-joint arm)"),
    "output_dir": ("sysid_output", "directory of params.json and updated_model.xml"),
    "buffer_capacity": (DEFAULT_CAPACITY, "samples kept (the oldest are dropped); memory is preallocated "
                                          "at start-up, hence read-only"),
    "min_samples": (2000, "fewest recorded samples identify accepts"),
    "effort_mode": ("torque", f"one of {EFFORT_MODES}: JointState.effort is joint torque (N m), motor current "
                              "(A), or torque with the nominal model's gravity already subtracted"),
    "torque_constants": (Parameter.Type.DOUBLE_ARRAY, "N m/A per model joint, for effort_mode 'current'"),
    "gear_ratios": (Parameter.Type.DOUBLE_ARRAY, "per model joint, for effort_mode 'current' "
                                                 "(tau = effort * torque_constant * gear_ratio); unset: 1"),
    "seed": (0, "seed of the random states of the base-parameter analysis"),
    "identify_on_done": (False, "identify once each time sysid/done turns true (the excitation ended), "
                                "after the samples still queued have arrived"),
    "exit_when_done": (False, "with identify_on_done: end the node after that identification, exit status "
                              f"{EXIT_OK} when updated_model.xml was written, {EXIT_BAD_INPUT} for bad input or "
                              f"parameters, {EXIT_FAILED} when the identification failed"),
    "truth_model": ("", "MJCF of the arm that produced the data (a simulation's truth model): the result is "
                        "compared with it in the log, params.json and the service answer; empty: no comparison"),
    "plots": (True, "write torque_fit.png, residuals.png and parameters.png next to params.json"),
    "report_html": (True, "write report.html next to params.json, after the service answered: one self-contained "
                          "page with the verdict, payload, friction curves, torque fit, validation, base parameters, "
                          "excitation and the recording's counts (its figures only with plots)"),
    "validation_fraction": (0.0, "share of the recording, at its end, held out to validate the model identified "
                                 "on the rest (a non-repeating excitation makes it a different one); 0: none"),
    "recording": ("", "rosbag2 bag (directory, .mcap or .db3) or recording CSV to identify from instead of the live "
                      "recording, e.g. one sysid/save_recording wrote; empty: the live recording"),
    "recording_topic": ("", "JointState topic in the bag of 'recording'; empty: this node's joint_states topic"),
    "recording_motor_topic": ("", "motor-side JointState topic in the bag of 'recording' (a double-encoder arm's, "
                                  "as sysid/save_recording writes it); empty: none"),
    "save_path": ("", "bag directory sysid/save_recording writes (it must not exist); empty: "
                      "<output_dir>/recording_<date>_<time>"),
    "state_blocks": (False, "record sysid/joint_state_block (the state blocks of mujoco_sim with state_blocks) "
                            "instead of joint_states; set at start-up, hence read-only"),
    "payload_frame": ("", "frame of sysid/payload and params.json's payload block: the terminal body (empty) or a "
                          "link fixed to it, e.g. the flange frame a driver's set_payload expects"),
    "residual": ("none", "gmm: after the fit, learn per joint the torque it leaves unexplained (Gaussian mixture "
                         "over q, dq) and write residual_model.json next to params.json; none: no residual model"),
}


def check_parameter(name: str, value) -> str | None:
    """Why ``value`` is not acceptable for parameter ``name``, or None when it is."""
    choices = {"scope": SCOPES, "estimator": ESTIMATORS, "effort_mode": EFFORT_MODES, "residual": ("none", "gmm")}
    if name in choices and value not in choices[name]:
        return f"{name} must be one of {list(choices[name])}, got '{value}'"
    if name == "friction_terms":
        unknown = [t for t in value if t not in friction.TERMS]
        if unknown or len(set(value)) != len(value):
            return f"friction_terms must be distinct terms from {list(friction.TERMS)}, got {list(value)}"
    if name == "friction_model":
        try:
            friction.FrictionSelection(value)
        except ValueError as err:
            return f"friction_model: {err}"
    if name == "validation_fraction" and not (math.isfinite(value) and 0 <= value < 1):
        return f"validation_fraction must be in [0, 1), got {value}"
    if name == "coulomb_smoothing" and not (math.isfinite(value) and value >= 0):
        return f"coulomb_smoothing must be >= 0 rad/s, got {value}"
    if name == "cutoff_hz" and not (math.isfinite(value) and value > 0):
        return f"cutoff_hz must be > 0 Hz, got {value}"
    if name == "buffer_capacity" and value < 1:
        return f"{name} must be >= 1, got {value}"
    if name in ("min_samples", "seed", "decimation") and value < 0:
        return f"{name} must be >= 0, got {value}"
    if name in ("torque_constants", "gear_ratios") and value is not None:
        if not all(math.isfinite(v) and v != 0 for v in value):
            return f"{name} must be finite and non-zero, got {list(value)}"
    return None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _recording_notes(counts: RecordingCounts, source: str, rows: int, decimation: int) -> tuple:
    """Lines on what became of the messages of ``source`` (its RecordingCounts), for report.html."""
    missing = "unknown (receive stamps)" if counts.missing is None else str(counts.missing)
    notes = [f"{source}: {counts.recorded} samples recorded of {counts.received} received; {counts.rejected} "
             f"rejected, {counts.overwritten} overwritten when the buffer was full, {missing} missing from the "
             f"stamps (lost before they reached the node), {counts.stretches} stretch(es)",
             f"{rows} rows identified after filtering and decimation by {decimation}"]
    for kind, seen in (counts.rejections or {}).items():
        where = "; ".join(f"{k} {seen[k]}" for k in ("first", "last") if seen.get(k))
        notes.append(f"rejected ({kind}): {seen.get('count', 0)}" + (f" ({where})" if where else ""))
    if counts.motor is not None:
        motor = counts.motor
        notes.append(f"motor side: {motor.get('received')} received, {motor.get('rejected')} rejected, "
                     f"{motor.get('matched')} joint samples with every joint's motor side")
    return tuple(notes)


class Identifier(Node):
    """The ``identifier`` node; keyword arguments go to rclpy's Node (parameter_overrides, context, ...).

    Parameters are listed in PARAMETERS; counters ``received``, ``stored`` (samples in the
    buffer), ``rejected`` and ``overwritten`` (dropped when the buffer was full). ``finished``
    (an rclpy Future) completes with the process exit status when exit_when_done ends the node.
    """

    def __init__(self, **kwargs):
        super().__init__("identifier", **kwargs)
        for name, (default, text) in PARAMETERS.items():
            self.declare_parameter(name, default, _describe(text, read_only=name in ("buffer_capacity",
                                                                                     "state_blocks")))
        # start-up values are not seen by the callback: report bad ones now, identify refuses them
        for name in PARAMETERS:
            reason = check_parameter(name, self._param(name))
            if reason:
                fallback = f"; using {DEFAULT_CAPACITY}" if name == "buffer_capacity" else ""
                self.get_logger().error(f"invalid parameter: {reason}{fallback}")
        self.add_on_set_parameters_callback(self._on_set_parameters)

        capacity = self._param("buffer_capacity")  # read-only: no later fix possible
        # samples, screening and counters, with the lock the subscription and the threads share
        self.live_recording = LiveRecording(capacity if capacity >= 1 else DEFAULT_CAPACITY)
        self._last_warning = -math.inf
        self._robot_lock = threading.Lock()
        self._robot: Robot | None = None
        self._robot_key = None  # (model, terminal_body) the robot was loaded from
        self._load_failure = None  # (key, reason) of the last failed load, not retried per message
        # the model when parameter 'model' is empty
        self._description = RobotDescription(self, self._on_robot_description)
        self._start_recording()
        self.last_report = ""  # result table of the last successful identification
        self._truth = None  # (path, Robot) of the truth model last loaded
        self._identify_lock = threading.Lock()  # one identification at a time, each in a thread of its own
        self._workers: list[threading.Thread] = []  # identifications and saves, finished before the node goes
        self.finished = Future()

        # the recording must not lose samples: reliable, and deep enough for the bursts of a
        # loaded machine and for an identification holding the GIL
        joint_qos = QoSProfile(depth=JOINT_STATES_DEPTH, reliability=ReliabilityPolicy.RELIABLE,
                               history=HistoryPolicy.KEEP_LAST)
        # the motor side comes in the state blocks' rows when they carry it
        self._motor_sub = None
        if self._param("state_blocks"):
            self._joint_sub = self.create_subscription(Float64MultiArray, "sysid/joint_state_block",
                                                       self._on_state_block, joint_qos)
        else:
            self._joint_sub = self.create_subscription(JointState, "joint_states", self._on_joint_state, joint_qos)
            self._motor_sub = self.create_subscription(JointState, "motor_states", self._on_motor_state, joint_qos)
        # late subscribers (a dashboard started after the run) still get the last result
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._result_pub = self.create_publisher(String, "sysid/result", latched)
        self._payload_pub = self.create_publisher(Inertia, "sysid/payload", latched)
        # a group of its own: a pending identify (a coroutine awaiting the thread) holds its
        # callback group until it answers, and the recording must not wait for it
        self._identify_service = self.create_service(Trigger, "sysid/identify", self._on_identify,
                                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, "sysid/reset", self._on_reset)
        self.create_service(Trigger, "sysid/save_recording", self._on_save_recording)
        # the publisher latches its done flag, so a late identifier still sees the last one
        self._done = False
        self.create_subscription(Bool, "sysid/done", self._on_done, latched)
        # identify_on_done waits for the queue to drain; a steady clock, since sim time stops
        # when the simulator pauses. _settle: (received at the last tick, ticks without a new
        # sample, stamp of a sample of a source that ran on, ns, wall limit)
        self._settle = None
        self._settle_timer = self.create_timer(SETTLE_QUIET_S, self._on_settle_timer,
                                               clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._settle_timer.cancel()
        topic = self._joint_sub.topic_name
        if self.buffer is not None:
            self.get_logger().info(f"recording {topic} (the latest {self.live_recording.capacity} samples, "
                                   f"{self.buffer.nbytes / 1e6:.0f} MB); call {self._identify_service.service_name} "
                                   "when done")
        else:
            self.get_logger().warning(f"not recording {topic} until parameter 'model' names a loadable MJCF or "
                                      f"URDF; {self._description.waiting}")

    # ------------------------------------------------------------------ parameters

    def _param(self, name: str):
        try:
            return self.get_parameter(name).value
        except ParameterUninitializedException:
            return None  # typed arrays declared without a value

    def _on_set_parameters(self, parameters) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name in PARAMETERS:
                reason = check_parameter(parameter.name, parameter.value)
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ model and recording

    @property
    def received(self) -> int:
        return self.live_recording.received

    @property
    def rejected(self) -> int:
        return self.live_recording.rejected

    @property
    def stored(self) -> int:
        return self.live_recording.stored

    @property
    def overwritten(self) -> int:
        return self.live_recording.overwritten

    @property
    def buffer(self) -> SampleBuffer | None:
        """The live recording's buffer; None until a model loaded."""
        return self.live_recording.buffer

    def _robot_for_parameters(self) -> Robot:
        """The nominal robot of the current ``model``/``terminal_body``, loaded when they changed."""
        model, terminal = self._param("model"), self._param("terminal_body")
        where = model
        # the description as text: terminal_body may differ from the one it was first loaded with
        if not model and self._description.text is not None:
            model, where = self._description.text, f"the model of {self._description.topic}"
        if not model:
            received = self._description.error or "no robot_description was received"
            raise ModelError(f"parameter 'model' is empty and {received}: set it to the nominal MJCF or URDF of "
                             f"the arm (ros2 param set {self.get_fully_qualified_name()} model /path/arm.xml) or "
                             "publish the URDF")
        key = (model, terminal)
        with self._robot_lock:
            if self._robot_key != key:
                self._robot = load_robot(model, terminal_body=terminal or None)
                self._robot_key = key
                self.get_logger().info(f"loaded {where}: joints {list(self._robot.joint_names)}, "
                                       f"terminal body '{self._robot.terminal_body}'")
            return self._robot

    def _on_robot_description(self, robot: Robot) -> None:
        self._load_failure = None  # a new model to try
        if self._param("model"):
            self.get_logger().info("robot_description received; parameter 'model' takes precedence")
        elif self.live_recording.joint_names is None:
            self._start_recording()

    def _start_recording(self) -> bool:
        """Record the joints of the model the parameters name; False when it does not load (tried
        again once 'model' or 'terminal_body' changed)."""
        key = (self._param("model"), self._param("terminal_body"))
        if self._load_failure is not None and self._load_failure[0] == key:
            return False
        try:
            robot = self._robot_for_parameters()
        except SysidError as err:
            self._load_failure = (key, str(err))
            if key[0]:  # waiting for robot_description is no error: the constructor and RobotDescription say so
                self.get_logger().error(f"no model loaded, JointState messages are rejected: {err}")
            return False
        self.live_recording.start(robot.joint_names)
        return True

    # ------------------------------------------------------------------ recording

    def _on_joint_state(self, msg: JointState) -> None:
        recording = self.live_recording
        if recording.joint_names is None and not self._start_recording():
            self._tell(recording.refuse(screening.NO_MODEL, f"no model loaded ({self._load_failure[1]})"))
            return
        stamp = msg.header.stamp
        sec, nanosec = stamp.sec, stamp.nanosec
        unstamped = sec == 0 and nanosec == 0
        stamp_ns = self.get_clock().now().nanoseconds if unstamped else sec * 1_000_000_000 + nanosec
        event = recording.add(tuple(msg.name), stamp_ns, msg.position, msg.velocity, msg.effort, unstamped)
        if event is not None:
            self._tell(event)

    def _on_state_block(self, msg: Float64MultiArray) -> None:
        recording = self.live_recording
        dims = msg.layout.dim
        if recording.joint_names is None and not self._start_recording():
            self._tell(recording.refuse(screening.NO_MODEL, f"no model loaded ({self._load_failure[1]})"))
            return
        names = tuple(dims[1].label.split(",")) if len(dims) == 2 else ()
        n = len(names)
        width = dims[1].size if len(dims) == 2 else 0
        # [stamp, q, dq, effort] per joint, and the motor side's position with elastic transmissions
        if (not names or dims[0].label != "samples" or width not in (1 + 3 * n, 1 + 4 * n)
                or len(msg.data) != dims[0].size * width):
            self._tell(recording.refuse(screening.INCOMPLETE, "a state block whose layout does not describe its "
                                                              "data (samples x [stamp, q, dq, effort] per joint)"))
            return
        rows = np.frombuffer(msg.data).reshape(dims[0].size, width)
        motor = rows[:, 1 + 3 * n:] if width == 1 + 4 * n else None
        for event in recording.add_block(names, rows[:, 0].astype(np.int64), rows[:, 1:1 + n], rows[:, 1 + n:1 + 2 * n],
                                         rows[:, 1 + 2 * n:1 + 3 * n], motor):
            self._tell(event)

    def _on_motor_state(self, msg: JointState) -> None:
        recording = self.live_recording
        if recording.joint_names is None and not self._start_recording():
            return  # the joint states say why; a motor side without them is nothing to identify
        stamp = msg.header.stamp
        event = recording.add_motor(tuple(msg.name), stamp.sec * 1_000_000_000 + stamp.nanosec, msg.position)
        if event is not None:
            self._warn(f"motor-side JointState rejected: {event[1]} ({recording.motor_rejected} of "
                       f"{recording.motor_received} rejected so far)")

    def _tell(self, event: tuple) -> None:
        """Log what LiveRecording.add reported: (kind, "message k: what")."""
        kind, text = event
        if kind == RECEIVE_STAMPED:
            self.get_logger().warning(
                "JointState header stamps are zero: using the receive time (node clock) instead; identify "
                "spreads batches delivered at once back at the source's measured rate, but the delivery "
                "delays add timing error: stamp the messages at the source")
        elif kind == screening.NEW_STRETCH:
            self._warn(f"JointState {text}: the clock jumped back, a new stretch of the recording starts")
        else:
            recording = self.live_recording
            self._warn(f"JointState rejected: {text} ({recording.rejected} of {recording.received} rejected so far)")

    def _warn(self, text: str) -> None:
        # throttled here: rclpy's own throttling inspects the call stack on every call,
        # ~0.3 ms, too slow for a 1 kHz stream that is rejected message after message
        now = time.monotonic()
        if now - self._last_warning >= WARN_PERIOD_S:
            self._last_warning = now
            self.get_logger().warning(text)

    def _on_reset(self, request, response):
        self.live_recording.clear()
        self._last_warning = -math.inf
        self._load_failure = None
        try:
            # a model with other joints gets a buffer of its own
            self.live_recording.start(self._robot_for_parameters().joint_names)
        except SysidError:
            pass  # the recording keeps its joints, or the next message says why there are none
        response.success = True
        response.message = "recording cleared"
        self.get_logger().info(response.message)
        return response

    async def _on_save_recording(self, request, response):
        # a long recording takes seconds to write: in a thread, the executor keeps recording
        answered = Future()
        executor = self.executor
        if executor is not None:
            answered.add_done_callback(lambda _: _wake(executor))
        self._start_worker(self._save_in_thread, (answered,), "save_recording")
        response.success, response.message = await answered
        return response

    def _save_in_thread(self, answered: Future) -> None:
        try:
            answered.set_result((True, str(self.save_recording())))
        except (SysidError, ValueError, OSError) as err:
            message = _one_line(f"recording not saved: {err}")
            self.get_logger().error(message)
            answered.set_result((False, message))

    def save_recording(self) -> Path:
        """Write the recording as a rosbag2 MCAP bag of JointState on this node's topic: the
        samples identify uses (all recorded joints, effort as received, header stamps; receive
        times as the send times identify derives), so the bag identifies to the same numbers.
        Returns the bag directory (parameter ``save_path``, or a new one in ``output_dir``)."""
        recording, counts = self._snapshot()
        path = self._param("save_path")
        if not path:
            output = Path(self._param("output_dir"))
            output.mkdir(parents=True, exist_ok=True)
            base = output / time.strftime("recording_%Y%m%d_%H%M%S")
            path, k = base, 1
            while path.exists():
                k += 1
                path = base.with_name(f"{base.name}_{k}")
        write_rosbag(path, recording, topic=self._joint_sub.topic_name, storage="mcap", start_ns=0,
                     motor_topic=self.resolve_topic_name("motor_states"))
        self.get_logger().info(f"saved {counts.recorded} samples ({counts.stretches} stretches) to {path}")
        return Path(path)

    # ------------------------------------------------------------------ identification

    def _on_done(self, msg: Bool) -> None:
        finished, self._done = msg.data and not self._done, msg.data
        if finished and self._param("identify_on_done"):
            # samples sent before the flag may still be queued or in flight behind it: let them arrive
            run_on_ns = self.get_clock().now().nanoseconds + round(SETTLE_RUN_ON_S * 1e9)
            self._settle = (self.received, 0, run_on_ns, time.monotonic() + SETTLE_LIMIT_S)
            self._settle_timer.reset()

    def _on_settle_timer(self) -> None:
        """identify_on_done once the samples measured before the done flag are in, however long
        the queue takes to drain: no new sample for two ticks in a row (the first quiet tick may
        run before the executor took what was queued meanwhile: a round runs its timers first),
        or a sample stamped SETTLE_RUN_ON_S after the flag arrived (a source that never stops)."""
        count, quiet, run_on_ns, limit = self._settle
        received = self.received
        quiet = quiet + 1 if received == count else 0
        last_ns = self.live_recording.last_stamp_ns
        ran_on = last_ns is not None and last_ns >= run_on_ns
        if quiet < 2 and not ran_on and time.monotonic() < limit:
            self._settle = (received, quiet, run_on_ns, limit)
            return
        self._settle_timer.cancel()
        self._start_identification(auto=True)

    async def _on_identify(self, request, response):
        # awaited, not run here: the executor keeps recording while the thread identifies
        response.success, response.message, _ = await self._start_identification()
        return response

    def _start_identification(self, auto: bool = False) -> Future:
        """Identify in a thread of its own; the Future completes with (success, message, exit status).

        ``auto``: started by identify_on_done, whose result is logged and, with exit_when_done,
        ends the node (``finished``) once the figures are written too.
        """
        answered = Future()
        executor = self.executor
        if executor is not None:  # the executor sleeps until something wakes it
            answered.add_done_callback(lambda _: _wake(executor))
        self._start_worker(self._identify_in_thread, (answered, auto), "identify")
        return answered

    def _start_worker(self, target, args: tuple, name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._workers = [t for t in self._workers if t.is_alive()] + [thread]
        thread.start()

    def destroy_node(self):
        # an identification (its files, its figures) or a recording being saved is finished
        # first: the end of the process must not cut a run's output short
        busy = [t for t in self._workers if t.is_alive()]
        if busy:
            names = ", ".join(t.name for t in busy)
            self.get_logger().info(f"waiting up to {WORKER_WAIT_S:g} s for {names} to finish")
            deadline = time.monotonic() + WORKER_WAIT_S
            for thread in busy:
                thread.join(max(0.0, deadline - time.monotonic()))
            cut = ", ".join(t.name for t in busy if t.is_alive())
            if cut:
                self.get_logger().error(f"{cut} still running after {WORKER_WAIT_S:g} s: its output may be "
                                        "incomplete")
        return super().destroy_node()

    def _identify_in_thread(self, answered: Future, auto: bool) -> None:
        with self._identify_lock:
            success, message, status, figures = self._identify()
            answered.set_result((success, message, status))
            if auto:
                # one call site per severity: rclpy refuses a call site whose severity changes
                if success:
                    self.get_logger().info(f"identify_on_done: {message}")
                else:
                    self.get_logger().error(f"identify_on_done: {message}")
            if figures is not None:
                figures()
        if auto and self._param("exit_when_done") and not self.finished.done():
            self.get_logger().info(f"exit_when_done: ending with status {status}")
            self.finished.set_result(status)
            if self.executor is not None:
                _wake(self.executor)

    def _identify(self) -> tuple:
        """(success, one-line message or the JSON summary, exit status, figure writer or None)."""
        try:
            summary, figures = self.run_identification()
        except IdentificationError as err:
            message, status = _one_line(f"identification failed: {err}"), EXIT_FAILED
        except (SysidError, ValueError, OSError) as err:
            message, status = _one_line(f"identification failed: {err}"), EXIT_BAD_INPUT
        except Exception as err:  # noqa: BLE001 -- a service must answer, and the node must stay up
            self.get_logger().error(f"identification failed unexpectedly:\n{traceback.format_exc()}")
            message = _one_line(f"identification failed unexpectedly ({type(err).__name__}: {err}); "
                                "see the node's log")
            status = EXIT_FAILED
        else:
            # a result came out: the answer is its summary, verdict included, whatever it says
            usable = summary["verdict"] != "failed" and summary["updated_model"] is not None
            return usable, json.dumps(summary, separators=(",", ":")), EXIT_OK if usable else EXIT_FAILED, figures
        self.get_logger().error(message)
        return False, message, status, None

    def _config(self, robot: Robot, recording: Recording) -> IdentificationConfig:
        """The configuration of the current parameters for ``robot`` and ``recording``; decimation 0
        resolved, the MuJoCo physics of simulated_physics built."""
        for name in PARAMETERS.keys() - {"buffer_capacity"}:  # an invalid capacity fell back to the default
            reason = check_parameter(name, self._param(name))
            if reason:
                raise ValueError(reason)
        p = self._param
        rate = 1.0 / float(np.median(np.diff(recording.time)))
        decimation = p("decimation") or automatic_decimation(recording.n_samples, rate, p("cutoff_hz"))
        physics = None
        if p("simulated_physics"):
            # the arm simulated (the truth model when given) at the step mujoco_sim takes for this rate
            simulated = (self._truth_for_parameters(robot) or robot).model
            physics = MujocoPhysics.simulation(simulated, simulation_timing(simulated, rate).timestep)
        return IdentificationConfig(
            scope=p("scope"), estimator=p("estimator"), robust=p("robust"),
            joint_model=friction.JointModel(tuple(p("friction_terms")), p("coulomb_smoothing")),
            friction_models=p("friction_model"),
            filter=FilterConfig(cutoff_hz=p("cutoff_hz"), decimation=decimation,
                                velocity_from_position=p("velocity_from_position")), seed=p("seed"),
            physics=physics)

    def _truth_for_parameters(self, robot: Robot) -> Robot | None:
        """The truth model of ``truth_model`` (None when empty), with the nominal model's terminal body."""
        path = self._param("truth_model")
        if not path:
            return None
        key = (path, robot.terminal_body)
        if self._truth is None or self._truth[0] != key:
            truth = load_robot(path, terminal_body=robot.terminal_body)
            if truth.joint_names != robot.joint_names:
                raise ModelError(f"truth_model {path} has the joints {list(truth.joint_names)}, the model "
                                 f"{list(robot.joint_names)}: they must be the same arm")
            self._truth = (key, truth)
        return self._truth[1]

    def _snapshot(self) -> tuple[Recording, RecordingCounts]:
        """The live recording as it is now (every recorded joint, effort as received) and its counts."""
        return self.live_recording.snapshot(self._param("min_samples"), self._joint_sub.topic_name)

    def _recording(self, robot: Robot) -> tuple[Recording, RecordingCounts]:
        """The live recording (or the file of parameter 'recording') as a Recording in robot joint
        order, effort converted to joint torque, and its counts at that moment."""
        path = self._param("recording")
        topic = (self._param("recording_topic") if path else "") or self._joint_sub.topic_name
        if path:
            loaded = read_recordings([path], robot.joint_names, topic=topic,
                                     motor_topic=self._param("recording_motor_topic") or None)
            self.get_logger().info(f"read {path}: {loaded.summary()}")
            measured, counts = saved_recording(loaded, self._param("min_samples"), path)
        else:
            recorded, counts = self._snapshot()
            joints = recorded.joint_names
            missing = [j for j in robot.joint_names if j not in joints]
            if missing:
                raise DataError(f"the model's joints {missing} are not in the recording (recorded joints "
                                f"{list(joints)}): the model changed since recording started; call sysid/reset "
                                "and record again")
            measured = recorded.select(robot.joint_names)
        tau = joint_torque(measured, robot, self._param("effort_mode"), self._param("torque_constants"),
                           self._param("gear_ratios"))
        notes = screening.lost_sample_notes(counts.missing or 0, counts.recorded, topic)
        return Recording(measured.time, measured.q, measured.dq, tau, measured.joint_names,
                         quality_notes=notes, motor_q=measured.motor_q), counts

    def _publish_payload(self, result, robot: Robot, frame: str | None) -> dict | None:
        """Publish the payload (identified terminal body minus the model's) on sysid/payload as
        geometry_msgs/Inertia; its params.json-style dict, or None when its mass is not positive
        (a model that already holds it): nothing published. An inertia that is not physically
        consistent (poorly determined by the excitation) is published as the nearest consistent
        one with the same mass and centre of mass, and said so (``inertia_adjusted``)."""
        _, added = terminal_inertia(result, robot, frame)
        if added.com is None:
            self.get_logger().warning(
                f"no payload published: the identified '{result.terminal_body}' minus the model's own has mass "
                f"{added.mass:.4g} kg (the model already holds what the arm carries?); params.json's payload "
                "block has the whole body")
            return None
        published = with_consistent_inertia(added)
        if published is not added:
            self.get_logger().warning(
                "the payload's identified inertia is not physically consistent (poorly determined: see the "
                "standard deviations); sysid/payload carries the nearest consistent inertia about its centre of "
                "mass, with the mass and centre of mass as identified")
        i = published.inertia
        self._payload_pub.publish(Inertia(m=float(published.mass), com=Vector3(
            x=float(published.com[0]), y=float(published.com[1]), z=float(published.com[2])),
            ixx=float(i[0, 0]), ixy=float(i[0, 1]), ixz=float(i[0, 2]),
            iyy=float(i[1, 1]), iyz=float(i[1, 2]), izz=float(i[2, 2])))
        return {**published.as_dict(), "inertia_adjusted": published is not added}

    def run_identification(self) -> tuple[dict, object]:
        """Identify from the recording with the current parameters; returns the summary and a
        function writing the figures and report.html (None without ``plots`` and ``report_html``),
        for after the answer.

        Removes what an earlier run left in output_dir, writes params.json (with the verdict)
        and, unless the verdict is failed, the updated model (updated_model.xml, or .urdf for a
        URDF model); publishes sysid/result and sysid/payload unless the verdict is failed.
        Raises SysidError, ValueError or OSError with a readable message when no result came
        out; the recording is left untouched.
        """
        started = time.perf_counter()
        robot = self._robot_for_parameters()
        truth = self._truth_for_parameters(robot)
        try:
            recording, counts = self._recording(robot)
            config = self._config(robot, recording)
            check_memory(robot, config, recording.n_samples, MEMORY_REMEDY)
            copied = time.perf_counter() - started
            fraction = self._param("validation_fraction")
            identification, validation = recording.split(fraction) if fraction > 0 else (recording, None)
            result = identify(robot, identification, config, validation=validation)
        except DataError as err:
            timing = any(k in str(err) for k in ("spacing", "time stamps"))
            if not (timing and self.live_recording.receive_stamped):
                raise
            raise DataError(f"{err} (the stamps are receive times, the messages had none)") from None
        # a failed verdict: params.json says why, no model file is written, nothing is published,
        # the answer is success=false and exit_when_done ends with EXIT_FAILED
        trusted = result.verdict.trusted

        output = Path(self._param("output_dir"))
        frame = self._param("payload_frame") or None
        document = params_document(result, robot, source=self._param("recording") or "ros", truth=truth,
                                   payload_frame=frame)
        if recording.motor_q is not None:
            warning = add_transmission(document, robot, result, identification, config.filter)
            if warning:
                self.get_logger().warning(warning)
        residual = None
        if self._param("residual") == "gmm":
            try:
                residual, document["residual"] = compensate(robot, result, identification, validation,
                                                            seed=self._param("seed"))
            except DataError as err:  # the rigid-body result stands without it
                document["residual"] = {"kind": "gmm", "error": _one_line(err)}
                self.get_logger().warning(f"no residual model: {_one_line(err)}")
        output.mkdir(parents=True, exist_ok=True)
        clear_previous_outputs(output)  # a stale model must not pass for this run's
        write_params_json(output / "params.json", document)
        if residual is not None:
            (output / "residual_model.json").write_text(json.dumps(residual.as_dict(), indent=1) + "\n")
        model_name = "updated_model.urdf" if robot.source_format == "urdf" else "updated_model.xml"
        model_path, model_error = None, None
        if not trusted:
            model_error = "the verdict is failed: " + "; ".join(result.verdict.reasons)
        else:
            try:
                model_path = write_updated_robot(output, robot, result)
            except (SysidError, OSError, ValueError) as err:
                model_error = _one_line(err)
        if model_error is not None:
            self.get_logger().error(f"{model_name} not written: {model_error}")
        elif result.verdict.level == "doubtful":
            self.get_logger().warning("verdict doubtful: " + "; ".join(result.verdict.reasons))
        payload = None
        if trusted:
            self._result_pub.publish(String(data=json.dumps(document)))
            payload = self._publish_payload(result, robot, frame)
        self.last_report = format_result(result, document)
        missing = counts.missing
        self.get_logger().info(
            f"\n{self.last_report}\nRecorded {counts.recorded} samples ({counts.received} received, "
            f"{counts.rejected} rejected, {counts.overwritten} overwritten when the buffer was full, "
            f"{'unknown' if missing is None else missing} missing from the stamps); "
            f"{result.metrics.n_samples} rows after filtering and decimation by {config.filter.decimation}")
        if missing:
            self.get_logger().warning(f"{missing} samples were lost before they reached the node (holes in the "
                                      f"stamps of {self._joint_sub.topic_name}); identified from the "
                                      f"{counts.recorded} that arrived")

        summary = {
            "verdict": result.verdict.level,
            "verdict_reasons": list(result.verdict.reasons),
            "scope": result.scope,
            "terminal_body": result.terminal_body,
            "mass": document["mass"],
            "center_of_mass": document["center_of_mass"],
            "rmse": document["rmse"],
            "validation_rmse": document["validation_rmse"],  # None unless validation_fraction > 0
            "n_samples": document["n_samples"],
            "recorded_samples": counts.recorded,
            "received_samples": counts.received,
            "rejected_samples": counts.rejected,
            "rejections": counts.rejections,  # kind: count, first and last (message number: what)
            "stretches": counts.stretches,
            "missing_samples": missing,
            "motor_states": counts.motor,  # None without motor-side positions
            "decimation": config.filter.decimation,
            "condition_number": document["condition_number"],
            "effort_mode": self._param("effort_mode"),
            "params_json": str(output / "params.json"),
            # written after the answer, by the returned function
            "report_html": str(output / "report.html") if self._param("report_html") else None,
            "residual_model": None if residual is None else str(output / "residual_model.json"),
            "updated_model": None if model_path is None else str(model_path),
            "payload": payload,
        }
        if truth is not None:
            summary["truth"] = {"model": str(truth.path), "mass": document["truth"]["mass"],
                                "center_of_mass": document["truth"]["center_of_mass"],
                                "mass_error_percent": document["error"]["mass_percent"],
                                "com_error_mm": document["error"]["com_error_mm"]}
        if model_error is not None:
            summary["updated_model_error"] = f"{model_name} not written: {model_error}"
        summary["elapsed_s"] = round(time.perf_counter() - started, 3)
        summary["snapshot_s"] = round(copied, 3)
        plots, report = self._param("plots"), self._param("report_html")
        if not plots and not report:
            return summary, None
        notes = _recording_notes(counts, self._param("recording") or self._joint_sub.topic_name,
                                 result.metrics.n_samples, config.filter.decimation)

        def figures():
            if plots:
                try:
                    write_plots(output, robot, result, identification, validation, residual)
                except (ImportError, OSError, ValueError, SysidError) as err:  # a figure never costs the result
                    self.get_logger().error(f"plots not written: {_one_line(err)}")
            if report:
                try:
                    write_html_report(output / "report.html", robot, result, document, identification, validation,
                                      notes=notes, figures=plots)
                except (OSError, ValueError, SysidError) as err:  # nor does the report
                    self.get_logger().error(f"report.html not written: {_one_line(err)}")
        return summary, figures


def _wake(executor) -> None:
    """Wake ``executor`` from another thread; it may be shut down already."""
    try:
        executor.wake()
    except (InvalidHandle, RuntimeError):
        pass


def main(args=None) -> int:
    return spin_node(Identifier, args)


if __name__ == "__main__":
    sys.exit(main())
