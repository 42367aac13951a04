"""Identifier node: records joint_states and identifies the arm when asked.

Subscribes
    joint_states (sensor_msgs/JointState): position, velocity and effort of the arm's
    joints, matched to the model by name (any order, extra joints ignored). Reliable, with a
    queue of JOINT_STATES_DEPTH messages: a loaded machine delivers a 1 kHz stream in bursts.
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
or is stamped at or before the last sample kept; see sysid_core.identification.screening.

Lost samples (holes in the stamps of a steady source) are counted; beyond
screening.LOST_DOUBTFUL of the samples they make the verdict doubtful, beyond LOST_FAILED failed.

Names are relative: under a namespace (``--ros-args -r __ns:=/robot1``) every topic and
service moves with it. The identification runs in a thread of its own, so the recording goes
on meanwhile; the node spins on one thread (rclpy's multi-threaded executor drops messages of
a bursty stream, see test/test_node_processes.py). The node converts messages, holds the
recording and calls sysid_core; all the numerics live there.
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
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from sysid_core.cli import clear_previous_outputs
from sysid_core.dynamics import friction
from sysid_core.dynamics.joint_physics import MujocoPhysics
from sysid_core.dynamics.model import Robot, load_robot
from sysid_core.errors import DataError, IdentificationError, ModelError, SysidError
from sysid_core.identification.filtering import FilterConfig
from sysid_core.identification.identify import ESTIMATORS, SCOPES, IdentificationConfig, column_names, identify
from sysid_core.identification.memory import available_memory, describe_bytes, memory_needed
from sysid_core.identification.recording import Recording
from sysid_core.identification.recording_files import read_recordings, write_rosbag
from sysid_core.identification import screening
from sysid_core.results.export import params_document, write_params_json
from sysid_core.results.payload import terminal_inertia, with_consistent_inertia
from sysid_core.results.urdf_export import write_updated_robot
from sysid_core.results.plots import write_plots
from sysid_core.results.report import format_result
from sysid_core.simulation import simulation_timing
from sysid_ros.entry_point import spin_node
from sysid_ros.robot_description import RobotDescription

EFFORT_MODES = ("torque", "current", "gravity_compensated")
DEFAULT_CAPACITY = 600_000  # 10 min at 1 kHz
# Samples per regressor evaluation for the gravity torque: the regressor holds
# n * 10 nb doubles per sample (3.9 kB for 7 joints), so memory stays ~40 MB.
GRAVITY_CHUNK = 10_000
# Distinct JointState name lists remembered; a driver uses one, so this only bounds abuse.
MAX_NAME_LAYOUTS = 64
WARN_PERIOD_S = 5.0
# joint_states messages the subscription queues: 10 s at 1 kHz, a few MB. A loaded machine
# wakes the node to bursts of queued messages, and an identification competes for the GIL.
JOINT_STATES_DEPTH = 10_000
# decimation 0 (automatic): about this many rows per identification, but never fewer rows per
# second than ROWS_PER_CUTOFF times cutoff_hz: the filtered signals hold nothing faster, so
# the rows dropped add no information, only time (the regression is linear in the rows)
TARGET_ROWS = 20_000
ROWS_PER_CUTOFF = 5.0
# identify_on_done waits for the samples still queued: until none arrived for SETTLE_QUIET_S
# (the simulator pauses when the excitation is done), at most SETTLE_MAX_S (a driver never stops)
SETTLE_QUIET_S = 0.25
SETTLE_MAX_S = 2.0
# exit status of the node after identify_on_done with exit_when_done (as sysid-identify's)
EXIT_OK, EXIT_BAD_INPUT, EXIT_FAILED = 0, 2, 3
# doubles per recorded sample and joint the filtering holds besides the regressor (resampled
# copy, filtered q, dq, tau, ddq, the zero-phase filter's padded temporaries): an estimate
FILTER_DOUBLES = 16


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
    "validation_fraction": (0.0, "share of the recording, at its end, held out to validate the model identified "
                                 "on the rest (a non-repeating excitation makes it a different one); 0: none"),
    "recording": ("", "rosbag2 bag (directory, .mcap or .db3) or recording CSV to identify from instead of the live "
                      "recording, e.g. one sysid/save_recording wrote; empty: the live recording"),
    "recording_topic": ("", "JointState topic in the bag of 'recording'; empty: this node's joint_states topic"),
    "save_path": ("", "bag directory sysid/save_recording writes (it must not exist); empty: "
                      "<output_dir>/recording_<date>_<time>"),
    "payload_frame": ("", "frame of sysid/payload and params.json's payload block: the terminal body (empty) or a "
                          "link fixed to it, e.g. the flange frame a driver's set_payload expects"),
}


def check_parameter(name: str, value) -> str | None:
    """Why ``value`` is not acceptable for parameter ``name``, or None when it is."""
    choices = {"scope": SCOPES, "estimator": ESTIMATORS, "effort_mode": EFFORT_MODES}
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


class SampleBuffer:
    """The latest ``capacity`` joint samples, in one array preallocated at construction.

    Row layout: [stamp (s), q (n) rad, dq (n) rad/s, effort (n) as received], columns in
    ``joint_names`` order. When full, each new sample overwrites the oldest.
    """

    def __init__(self, capacity: int, joint_names):
        self.joint_names = tuple(joint_names)
        self.data = np.zeros((int(capacity), 1 + 3 * len(self.joint_names)))
        self.clear()

    @property
    def capacity(self) -> int:
        return self.data.shape[0]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def clear(self) -> None:
        self.head = 0  # row the next sample goes to
        self.size = 0
        self.overwritten = 0

    def next_row(self) -> np.ndarray:
        """The row (1 + 3n,) to fill with the next sample, a view into the buffer."""
        row = self.data[self.head]
        self.head = (self.head + 1) % self.capacity
        if self.size == self.capacity:
            self.overwritten += 1
        else:
            self.size += 1
        return row

    def chronological(self) -> tuple:
        """Copies of the samples, oldest first: time (N,) s, q, dq, effort (N, n), each contiguous;
        one copy of the buffer in all (the recording goes on while they are used)."""
        start = (self.head - self.size) % self.capacity
        if start + self.size <= self.capacity:
            pieces = (self.data[start:start + self.size],)
        else:  # wrapped: the oldest rows are at the end
            pieces = (self.data[start:], self.data[:self.head])
        n = len(self.joint_names)
        columns = (0, slice(1, 1 + n), slice(1 + n, 1 + 2 * n), slice(1 + 2 * n, None))
        return tuple(np.concatenate([piece[:, c] for piece in pieces]) for c in columns)


def gravity_torque(robot: Robot, q: np.ndarray) -> np.ndarray:
    """The nominal model's gravity torque g(q) (N, n) N m for q (N, n) rad in robot joint order."""
    theta = robot.nominal_parameters.reshape(-1)
    out = np.empty_like(q)
    zeros = np.zeros((min(GRAVITY_CHUNK, len(q)), robot.n_joints))
    for start in range(0, len(q), GRAVITY_CHUNK):
        block = q[start:start + GRAVITY_CHUNK]
        still = zeros[:len(block)]
        out[start:start + len(block)] = robot.regressor(block, still, still) @ theta
    return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def automatic_decimation(n_samples: int, sample_rate: float, cutoff_hz: float) -> int:
    """Decimation that keeps about TARGET_ROWS of ``n_samples`` (at ``sample_rate`` Hz), but at
    least ROWS_PER_CUTOFF * ``cutoff_hz`` rows per second."""
    finest = max(1, int(sample_rate / (ROWS_PER_CUTOFF * cutoff_hz)))
    return int(min(max(1, math.ceil(n_samples / TARGET_ROWS)), finest))


class Identifier(Node):
    """The ``identifier`` node; keyword arguments go to rclpy's Node (parameter_overrides, context, ...).

    Parameters are listed in PARAMETERS; counters ``received``, ``stored`` (samples in the
    buffer), ``rejected`` and ``overwritten`` (dropped when the buffer was full). ``finished``
    (an rclpy Future) completes with the process exit status when exit_when_done ends the node.
    """

    def __init__(self, **kwargs):
        super().__init__("identifier", **kwargs)
        for name, (default, text) in PARAMETERS.items():
            self.declare_parameter(name, default, _describe(text, read_only=(name == "buffer_capacity")))
        # start-up values are not seen by the callback: report bad ones now, identify refuses them
        for name in PARAMETERS:
            reason = check_parameter(name, self._param(name))
            if reason:
                fallback = f"; using {DEFAULT_CAPACITY}" if name == "buffer_capacity" else ""
                self.get_logger().error(f"invalid parameter: {reason}{fallback}")
        self.add_on_set_parameters_callback(self._on_set_parameters)

        capacity = self._param("buffer_capacity")
        self._capacity = capacity if capacity >= 1 else DEFAULT_CAPACITY  # read-only: no later fix possible
        self._lock = threading.Lock()  # buffer and counters: the subscription and services may run in parallel
        self._robot_lock = threading.Lock()
        self._robot: Robot | None = None
        self._robot_key = None  # (model, terminal_body) the robot was loaded from
        self._load_failure = None  # (key, reason) of the last failed load, not retried per message
        self._buffer: SampleBuffer | None = None
        self._layouts = {}  # JointState name tuple -> indices into [position|velocity|effort], or a reason
        # the model when parameter 'model' is empty (issue 14)
        self._description = RobotDescription(self, self._on_robot_description)
        self._reset_counters()
        self._receive_stamped = False
        self._ensure_buffer()
        self.last_report = ""  # result table of the last successful identification
        self._truth = None  # (path, Robot) of the truth model last loaded
        self._identify_lock = threading.Lock()  # one identification at a time, each in a thread of its own
        self.finished = Future()

        # the recording must not lose samples: reliable, and deep enough for the bursts of a
        # loaded machine and for an identification holding the GIL
        joint_qos = QoSProfile(depth=JOINT_STATES_DEPTH, reliability=ReliabilityPolicy.RELIABLE,
                               history=HistoryPolicy.KEEP_LAST)
        self._joint_sub = self.create_subscription(JointState, "joint_states", self._on_joint_state, joint_qos)
        # late subscribers (a dashboard started after the run) still get the last result
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._result_pub = self.create_publisher(String, "sysid/result", latched)
        # a group of its own: a pending identify (a coroutine awaiting the thread) holds its
        # callback group until it answers, and the recording must not wait for it
        self._identify_service = self.create_service(Trigger, "sysid/identify", self._on_identify,
                                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, "sysid/reset", self._on_reset)
        # the publisher latches its done flag, so a late identifier still sees the last one
        self._done = False
        self.create_subscription(Bool, "sysid/done", self._on_done, latched)
        # identify_on_done waits for the queue to drain; a steady clock, since sim time stops
        # when the simulator pauses
        self._settle = None  # (received count at the last tick, wall deadline)
        self._settle_timer = self.create_timer(SETTLE_QUIET_S, self._on_settle_timer,
                                               clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._settle_timer.cancel()
        self._create_recording_io()
        topic = self._joint_sub.topic_name
        if self._buffer is not None:
            self.get_logger().info(f"recording {topic} (the latest {self._capacity} samples, "
                                   f"{self._buffer.nbytes / 1e6:.0f} MB); call {self._identify_service.service_name} "
                                   "when done")
        else:
            self.get_logger().warning(f"not recording {topic} until parameter 'model' names a loadable MJCF or "
                                      f"URDF; {self._description.waiting}")

    def _create_recording_io(self) -> None:
        """sysid/save_recording; sysid/payload out (issue 14)."""
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._payload_pub = self.create_publisher(Inertia, "sysid/payload", latched)
        self.create_service(Trigger, "sysid/save_recording", self._on_save_recording)

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

    # ------------------------------------------------------------------ model and buffer

    @property
    def received(self) -> int:
        return self._received

    @property
    def rejected(self) -> int:
        return self._rejected

    @property
    def stored(self) -> int:
        return 0 if self._buffer is None else self._buffer.size

    @property
    def overwritten(self) -> int:
        return 0 if self._buffer is None else self._buffer.overwritten

    @property
    def buffer(self) -> SampleBuffer | None:
        return self._buffer

    def _reset_counters(self) -> None:
        """Counters and screening state of a new recording."""
        self._received = 0
        self._rejected = 0
        self._last_rejection = None
        self._rejections = {}  # kind -> {"count", "first", "last"} (screening's few kinds)
        self._last_warning = -math.inf
        self._last_ns = None  # stamp of the last sample kept, ns

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
        with self._lock:
            self._load_failure = None  # a new model to try
            if self._param("model"):
                self.get_logger().info("robot_description received; parameter 'model' takes precedence")
            elif self._buffer is None:
                self._ensure_buffer()  # the recording starts

    def _ensure_buffer(self) -> bool:
        """Allocate the buffer for the model's joints if there is none yet; False when no model loads."""
        if self._buffer is not None:
            return True
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
        self._buffer = SampleBuffer(self._capacity, robot.joint_names)
        self._layouts.clear()
        return True

    # ------------------------------------------------------------------ recording

    def _layout(self, names) -> np.ndarray | tuple:
        """Indices into a message's [position | velocity | effort] giving the buffer's q, dq,
        effort columns, or (kind, reason) when the names cannot serve the model."""
        layout = self._layouts.get(names)
        if layout is None:
            where = {}
            for i, name in enumerate(names):
                where.setdefault(name, i)
            missing = [j for j in self._buffer.joint_names if j not in where]
            twice = screening.duplicate_names(names)
            if twice:  # which copy is meant? none is taken
                layout = (screening.DUPLICATE_NAMES, twice)
            elif missing:
                layout = (screening.MISSING_JOINTS, f"lacks the model joints {missing}")
            else:
                idx = np.array([where[j] for j in self._buffer.joint_names])
                m = len(names)
                layout = np.concatenate((idx, m + idx, 2 * m + idx))
            if len(self._layouts) >= MAX_NAME_LAYOUTS:
                self._layouts.clear()
            self._layouts[names] = layout
        return layout

    def _reject(self, kind: str, detail: str) -> None:
        self._rejected += 1
        reason = f"message {self._received}: {detail}"
        self._last_rejection = reason
        entry = self._rejections.setdefault(kind, {"count": 0, "first": reason})
        entry["count"] += 1
        entry["last"] = reason
        self._warn(f"JointState rejected: {reason} ({self._rejected} of {self._received} rejected so far)")

    def _warn(self, text: str) -> None:
        # throttled here: rclpy's own throttling inspects the call stack on every call,
        # ~0.3 ms, too slow for a 1 kHz stream that is rejected message after message
        now = time.monotonic()
        if now - self._last_warning >= WARN_PERIOD_S:
            self._last_warning = now
            self.get_logger().warning(text)

    def _screen(self, values: np.ndarray, stamp_ns: int, unstamped: bool) -> tuple | None:
        """(kind, detail) when a sample is refused; starts a new stretch when its clock jumped back."""
        if self._last_ns is not None and unstamped != self._receive_stamped:
            return screening.STAMP_KIND, ("no header stamp in a recording of stamped messages" if unstamped else
                                          "a header stamp in a recording of unstamped messages (receive times)")
        fault = screening.non_finite(values, self._buffer.joint_names)
        if fault:
            return screening.NON_FINITE, fault
        fault = screening.stamp_fault(stamp_ns, self._last_ns, equal_allowed=unstamped)
        if fault is None:
            return None
        if fault[0] == screening.NEW_STRETCH:
            self._warn(f"JointState message {self._received}: {fault[1]}: the clock jumped back, a new stretch "
                       "of the recording starts")
            return None
        return screening.STAMP_ORDER, fault[1]

    def _on_joint_state(self, msg: JointState) -> None:
        with self._lock:
            self._received += 1
            if self._buffer is None and not self._ensure_buffer():
                self._reject(screening.NO_MODEL, f"no model loaded ({self._load_failure[1]})")
                return
            names = tuple(msg.name)
            m = len(names)
            sizes = (len(msg.position), len(msg.velocity), len(msg.effort))
            if sizes != (m, m, m):
                empty = [f for f, s in zip(("position", "velocity", "effort"), sizes) if s == 0]
                self._reject(screening.INCOMPLETE, f"no {'/'.join(empty)} values" if empty else
                             f"position/velocity/effort have {sizes[0]}/{sizes[1]}/{sizes[2]} values for {m} names")
                return
            layout = self._layout(names)
            if isinstance(layout, tuple):
                self._reject(*layout)
                return
            stamp = msg.header.stamp
            unstamped = stamp.sec == 0 and stamp.nanosec == 0
            if unstamped:
                stamp_ns = self.get_clock().now().nanoseconds
                t = stamp_ns * 1e-9
            else:
                stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
                t = stamp.sec + 1e-9 * stamp.nanosec
            # the fields are array.array('d'): joined as arrays, then one NumPy view (a few times
            # faster than np.concatenate on three buffers, and this runs at the sensor rate)
            values = np.frombuffer(msg.position + msg.velocity + msg.effort)[layout]
            fault = self._screen(values, stamp_ns, unstamped)
            if fault:
                self._reject(*fault)
                return
            if self._last_ns is None:
                self._receive_stamped = unstamped
                if unstamped:
                    self.get_logger().warning(
                        "JointState header stamps are zero: using the receive time (node clock) instead; identify "
                        "spreads batches delivered at once back at the source's measured rate, but the delivery "
                        "delays add timing error: stamp the messages at the source")
            self._last_ns = stamp_ns
            row = self._buffer.next_row()
            row[0] = t
            row[1:] = values

    def _on_reset(self, request, response):
        with self._lock:
            if self._buffer is not None:
                self._buffer.clear()
            self._reset_counters()
            self._receive_stamped = False
            # a model with other joints gets a buffer of its own
            try:
                robot = self._robot_for_parameters()
                if self._buffer is not None and self._buffer.joint_names != robot.joint_names:
                    self._buffer = None
            except SysidError:
                pass
            self._load_failure = None
            self._ensure_buffer()
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
        threading.Thread(target=self._save_in_thread, args=(answered,), name="save_recording", daemon=True).start()
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
        write_rosbag(path, recording, topic=self._joint_sub.topic_name, storage="mcap", start_ns=0)
        self.get_logger().info(f"saved {counts['recorded']} samples ({counts['stretches']} stretches) to {path}")
        return Path(path)

    # ------------------------------------------------------------------ identification

    def _on_done(self, msg: Bool) -> None:
        finished, self._done = msg.data and not self._done, msg.data
        if finished and self._param("identify_on_done"):
            # samples published before the flag may still be queued behind it: let them arrive
            self._settle = (self._received, time.monotonic() + SETTLE_MAX_S)
            self._settle_timer.reset()

    def _on_settle_timer(self) -> None:
        count, deadline = self._settle
        if self._received != count and time.monotonic() < deadline:
            self._settle = (self._received, deadline)
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
        thread = threading.Thread(target=self._identify_in_thread, args=(answered, auto), name="identify",
                                  daemon=True)
        thread.start()
        return answered

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

    def _snapshot(self) -> tuple[Recording, dict]:
        """The buffer's samples as one Recording (all recorded joints, effort as received; a
        stretch of its own after each jump of the clock, receive times made send times) and the
        counters at that moment (received, recorded, rejected, rejections, overwritten,
        stretches, missing)."""
        with self._lock:
            if self._buffer is None or self._buffer.size == 0:
                hint = f", {self._rejected} rejected (last: {self._last_rejection})" if self._rejected else ""
                raise DataError(f"too few samples: none recorded from {self._joint_sub.topic_name} "
                                f"({self._received} received{hint})")
            time_s, q, dq, effort = self._buffer.chronological()
            joints = self._buffer.joint_names
            counts = {"received": self._received, "recorded": len(time_s), "rejected": self._rejected,
                      "rejections": {k: dict(v) for k, v in self._rejections.items()},
                      "overwritten": self._buffer.overwritten}
            last, receive_stamped = self._last_rejection, self._receive_stamped
        minimum = self._param("min_samples")
        if len(time_s) < minimum:
            hint = f", {counts['rejected']} rejected (last: {last})" if counts["rejected"] else ""
            raise DataError(f"too few samples: {len(time_s)} recorded ({counts['received']} received{hint}), "
                            f"min_samples is {minimum}: record longer")
        recording, starts = screening.joined_stretches(time_s, q, dq, effort, joints, receive_stamped)
        # lost samples leave holes in the stamps of a steady source; receive times have none to count
        counts["missing"] = None if receive_stamped else screening.missing_in_stretches(recording, starts)
        counts["recorded"], counts["stretches"] = recording.n_samples, len(starts)
        return recording, counts

    def _bag_samples(self, robot: Robot, path: str) -> tuple[Recording, dict]:
        """The recording file ``path`` (parameter 'recording'), its joints in robot order, effort
        as recorded, and its counters."""
        topic = self._param("recording_topic") or self._joint_sub.topic_name
        loaded = read_recordings([path], robot.joint_names, topic=topic)
        self.get_logger().info(f"read {path}: {loaded.summary()}")
        minimum = self._param("min_samples")
        if loaded.recording.n_samples < minimum:
            raise DataError(f"too few samples: {loaded.recording.n_samples} in {path}, min_samples is {minimum}")
        # stretches as the live recording had them (a saved one keeps its seams)
        r = loaded.recording
        recording, starts = screening.joined_stretches(r.time, r.q, r.dq, r.tau, r.joint_names)
        counts = {"received": loaded.messages, "recorded": recording.n_samples,
                  "rejected": sum(loaded.dropped.values()),
                  "rejections": {reason: {"count": c} for reason, c in loaded.dropped.items()},
                  "overwritten": 0, "stretches": len(starts),
                  "missing": screening.missing_in_stretches(recording, starts)}
        return recording, counts

    def _recording(self, robot: Robot) -> tuple[Recording, dict]:
        """The buffer (or the file of parameter 'recording') as a Recording in robot joint order,
        effort converted to joint torque, and the counters at that moment (received, recorded,
        rejected, rejections, overwritten, stretches, missing)."""
        path = self._param("recording")
        if path:
            measured, counts = self._bag_samples(robot, path)
        else:
            recorded, counts = self._snapshot()
            joints = recorded.joint_names
            missing = [j for j in robot.joint_names if j not in joints]
            if missing:
                raise DataError(f"the model's joints {missing} are not in the recording (recorded joints "
                                f"{list(joints)}): the model changed since recording started; call sysid/reset "
                                "and record again")
            measured = recorded.select(robot.joint_names)
        mode = self._param("effort_mode")
        tau = measured.tau
        if mode == "current":
            n = robot.n_joints
            constants = self._param("torque_constants") or []
            ratios = self._param("gear_ratios") or [1.0] * n
            for name, values in (("torque_constants", constants), ("gear_ratios", ratios)):
                if len(values) != n:
                    raise ValueError(f"effort_mode 'current' needs {name} with one value per model joint "
                                     f"{list(robot.joint_names)}, got {len(values)}")
            tau = tau * np.asarray(constants) * np.asarray(ratios)
        elif mode == "gravity_compensated":
            tau = tau + gravity_torque(robot, measured.q)
        topic = (self._param("recording_topic") if self._param("recording") else "") or self._joint_sub.topic_name
        notes = screening.lost_sample_notes(counts["missing"] or 0, counts["recorded"], topic)
        return Recording(measured.time, measured.q, measured.dq, tau, measured.joint_names,
                         quality_notes=notes), counts

    def _check_memory(self, robot: Robot, config: IdentificationConfig, samples: int) -> None:
        """DataError, before any work, when identifying ``samples`` samples with ``config`` would
        need more memory than the machine has: refused, not killed with the recording unsaved."""
        rows = math.ceil(samples / config.filter.decimation)
        needed = memory_needed(robot, config, rows) + FILTER_DOUBLES * 8 * samples * robot.n_joints
        available = available_memory()
        if available is not None and needed > available:
            raise DataError(
                f"identifying {samples} samples (decimation {config.filter.decimation}: {rows} rows of "
                f"{robot.n_joints} joints, {len(column_names(robot, config))} parameters) needs about "
                f"{describe_bytes(needed)} of memory; this machine has {describe_bytes(available)} available: "
                "raise decimation (0: automatic) or use scope terminal, or save the recording "
                "(sysid/save_recording) and identify it elsewhere; the recording is kept")

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
                f"the payload's identified inertia is not physically consistent (poorly determined: see the "
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
        function writing the figures (None without ``plots``), for after the answer.

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
            self._check_memory(robot, config, recording.n_samples)
            copied = time.perf_counter() - started
            fraction = self._param("validation_fraction")
            identification, validation = recording.split(fraction) if fraction > 0 else (recording, None)
            result = identify(robot, identification, config, validation=validation)
        except DataError as err:
            timing = any(k in str(err) for k in ("spacing", "time stamps"))
            if not (timing and self._receive_stamped):
                raise
            raise DataError(f"{err} (the stamps are receive times, the messages had none)") from None
        # a failed verdict: params.json says why, no model file is written, nothing is published,
        # the answer is success=false and exit_when_done ends with EXIT_FAILED
        trusted = result.verdict.trusted

        output = Path(self._param("output_dir"))
        frame = self._param("payload_frame") or None
        document = params_document(result, robot, source=self._param("recording") or "ros", truth=truth,
                                   payload_frame=frame)
        output.mkdir(parents=True, exist_ok=True)
        clear_previous_outputs(output)  # a stale model must not pass for this run's
        write_params_json(output / "params.json", document)
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
        missing = counts["missing"]
        self.get_logger().info(
            f"\n{self.last_report}\nRecorded {counts['recorded']} samples ({counts['received']} received, "
            f"{counts['rejected']} rejected, {counts['overwritten']} overwritten when the buffer was full, "
            f"{'unknown' if missing is None else missing} missing from the stamps); "
            f"{result.metrics.n_samples} rows after filtering and decimation by {config.filter.decimation}")
        if missing:
            self.get_logger().warning(f"{missing} samples were lost before they reached the node (holes in the "
                                      f"stamps of {self._joint_sub.topic_name}); identified from the "
                                      f"{counts['recorded']} that arrived")

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
            "recorded_samples": counts["recorded"],
            "received_samples": counts["received"],
            "rejected_samples": counts["rejected"],
            "rejections": counts["rejections"],  # kind: count, first and last (message number: what)
            "stretches": counts["stretches"],
            "missing_samples": missing,
            "decimation": config.filter.decimation,
            "condition_number": document["condition_number"],
            "effort_mode": self._param("effort_mode"),
            "params_json": str(output / "params.json"),
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
        if not self._param("plots"):
            return summary, None

        def figures():
            try:
                write_plots(output, robot, result, identification, validation)
            except (ImportError, OSError, ValueError, SysidError) as err:  # a figure never costs the result
                self.get_logger().error(f"plots not written: {_one_line(err)}")
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
