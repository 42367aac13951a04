"""Plays an excitation on the arm: MIT-mode commands, a JointTrajectory, or a forward_command_controller's.

From the pose measured on ``joint_states`` the node builds the whole profile with the core
(approach from rest, the excitation, back to rest: ``excitation_with_approach_and_rest``),
adds the nominal model's inverse-dynamics feed-forward, and sends it as parameter ``output`` says:

- ``joint_command`` (default): streams ``sysid/joint_command`` (JointState: position, velocity,
  effort = feed-forward torque) at ``rate_hz``, for the Damiao bridge and the simulator. With
  ``preview`` (default true) and a subscriber on ``sysid/joint_trajectory`` (mujoco_sim has
  one; the Damiao bridge has none), the run is sent there once instead, as a JointTrajectory
  of knots (``sysid_core.excitation.preview``: every sample of the profile within 1e-6 rad)
  stamped with the run's start on the node clock, feed-forward as effort; the simulator samples
  it every control period, so no message per period is needed. Holding and ``sysid/stop``
  stream commands as before (they end the preview).
- ``joint_trajectory``: publishes the profile once as a JointTrajectory for a ros2_control
  joint_trajectory_controller on ``<controller>/joint_trajectory`` (``controller`` defaults to
  ``joint_trajectory_controller``) and only reports progress by time.
- ``forward_position``: streams the positions (std_msgs/Float64MultiArray) to a ros2_control
  forward_command_controller on ``<controller>/commands`` (``controller`` defaults to
  ``forward_position_controller``), in the order of ``controller_joints`` (default: the model's).
- ``forward_effort``: streams joint torques to a forward_command_controller on efforts
  (``controller`` defaults to ``forward_effort_controller``): the feed-forward plus a PD on the
  measured state, tau = tau_ff + effort_kp (q_des - q) + effort_kd (dq_des - dq), closed by this
  node on ``joint_states`` (effort_kp, effort_kd: one per controller joint or one for all; they
  must be given, 0 and 0 for feed-forward alone). DANGEROUS: nothing but this node keeps the arm
  up, and the controller applies the last torque it got until another controller takes over.
  A run stops when ``joint_states`` is older than ``state_timeout_s`` (wall time); holding, and
  the last command the node sends when it shuts down, are the gravity torque at the measured pose
  (the arm floats there as well as the model is right; zero torque would drop it).

The sample sent is the one due at the node clock's elapsed time, so the node follows a simulation
with ``use_sim_time``. After the profile, and after ``sysid/stop``, streamed outputs keep sending a
hold command (a pose, zero velocity, the gravity torque there): the simulator and the Damiao bridge
drop to damping only when commands stop, and the arm would sag. On shutdown (Ctrl-C, SIGTERM) a
run in progress is stopped at the measured pose first (a joint_trajectory_controller would
otherwise play the trajectory to its end).

The nominal model: the ``model`` file (MJCF or URDF) or, when ``model`` is empty, the text
published on ``robot_description`` (see ``robot_description``). A residual model
(``residual_model``: a residual_model.json; empty: the one beside the ``model`` file, when there
is one, as an identification writes it beside updated_model.xml; ``none``: never) adds its
correction to the feed-forward, at the planned q, dq and the model's torque. A residual model
that takes the transmission's deflection is not used for the feed-forward (a plan has no
measured deflection), and the log says so.

The excitation (parameter ``excitation``): ``multisine`` (random sinusoids scaled to
``amplitude_fraction`` of each joint's range and to ``max_velocity``, seeded by ``seed``);
``optimized`` (a Fourier series at rest at both ends that tells the most about the terminal
body's parameters, its condition number held under 0.4 times the multisines', within the joint
range, ``max_velocity``, the model's actuator torque limits and its collision geometry; the
search takes up to ``excitation_time_limit`` s when the model is loaded); ``file`` (replay
``trajectory_file``, a .json or .csv written by ``sysid-identify --save-trajectory`` or
``save_trajectory``: resampled to ``rate_hz`` when its duration is a whole number of periods
there, refused when not, when its joints differ from the model's, when it leaves the joint
range or exceeds ``max_velocity``); ``friction-sweep`` (each joint alone at a ladder of constant
speeds up to ``max_velocity``, both directions, the others held: ``sysid_core.excitation.
friction_sweep``; record it and ``sysid-identify --excitation friction-sweep`` shows what it
measures on the simulated arm). ``duration`` applies to the first two.

``sysid/progress``: Float32, 0..1 of the profile, on every whole percent.
``sysid/done``: Bool, transient local; False when a run starts or is stopped, True once the
arm is back at rest.
"""
import json
from pathlib import Path
import time

from builtin_interfaces.msg import Duration
import numpy as np
from rclpy.duration import Duration as Timeout
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float32, Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError, SysidError
from sysid_core.excitation.friction_sweep import friction_sweep
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine
from sysid_core.excitation.preview import knots
from sysid_core.excitation.trajectory import load_trajectory, resample
from sysid_core.identification.residual import ResidualModel
from sysid_core.simulation import mit_torque
from sysid_ros.entry_point import spin_node
from sysid_ros.robot_description import RobotDescription

EXCITATIONS = ('multisine', 'optimized', 'file', 'friction-sweep')
OUTPUTS = ('joint_command', 'joint_trajectory', 'forward_position', 'forward_effort')
# ros2_control outputs: the controller names of the ros2_control demos
DEFAULT_CONTROLLERS = {'joint_trajectory': 'joint_trajectory_controller',
                       'forward_position': 'forward_position_controller',
                       'forward_effort': 'forward_effort_controller'}
# a replayed file may exceed max_velocity or the joint range by rounding only
FILE_TOLERANCE = 1e-9
# joint_trajectory: time the controller gets to stop at the measured pose on sysid/stop (s)
STOP_TIME_S = 0.1
# Longest wait at shutdown for the subscribers to acknowledge the last command (reliable QoS);
# bounded so that a subscriber gone first does not hold the process.
SHUTDOWN_ACK_S = 1.0
WARN_PERIOD_S = 5.0


class TrajectoryPublisher(Node):
    """Excitation player. Public for tests: ``robot`` (None if the model failed or is awaited),
    ``error`` (why it cannot run), ``plan`` (the excitation Trajectory), ``profile`` (the Trajectory
    of the current run), ``excitation`` (the plan's slice of it), ``feedforward`` (N, n) N m,
    ``controller_joints`` (the forward outputs' joint order)."""

    def __init__(self, **kwargs):
        super().__init__('trajectory_publisher', **kwargs)
        self.declare_parameter('model', '')
        self.declare_parameter('duration', 20.0)
        self.declare_parameter('seed', 0)
        self.declare_parameter('max_velocity', 1.0)
        self.declare_parameter('amplitude_fraction', 0.8)
        self.declare_parameter('rate_hz', 500.0)
        self.declare_parameter('excitation', 'multisine')
        self.declare_parameter('trajectory_file', '')
        self.declare_parameter('excitation_time_limit', 30.0)
        self.declare_parameter('autostart', True)
        self.declare_parameter('output', 'joint_command')
        self.declare_parameter('controller', '')
        self.declare_parameter('controller_joints', Parameter.Type.STRING_ARRAY)
        self.declare_parameter('effort_kp', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('effort_kd', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('state_timeout_s', 0.1)
        self.declare_parameter('preview', True)
        self.declare_parameter('residual_model', '')

        self.robot = self.plan = None
        self.residual = None  # the ResidualModel the feed-forward adds, if any
        self.error = None
        self.profile = self.excitation = self.feedforward = None
        self.controller_joints = None
        self._rate = float(self.get_parameter('rate_hz').value)
        self._max_velocity = float(self.get_parameter('max_velocity').value)
        self._output = self.get_parameter('output').value
        self._autostart = bool(self.get_parameter('autostart').value)
        self._state_timeout = float(self.get_parameter('state_timeout_s').value)
        self._q_measured = None       # (n,) rad, latest complete pose from joint_states
        self._dq_measured = None      # (n,) rad/s, its velocity (None when joint_states has none)
        self._measured_at = None      # time.monotonic() of the latest pose
        self._pose_error = None       # why joint_states cannot give the pose
        self._state_index = None      # (names of the last message, robot joint -> message index)
        self._order = None            # (n,) model joint index of each controller_joints slot
        self._kp = self._kd = None    # (n,) forward_effort gains, model joint order
        self._start_ns = None         # node clock at the start of the run
        self._hold = None             # (q, dq = 0, ff) streamed while holding
        self._mode = 'idle'           # idle | running | holding
        self._previewing = False      # the running profile went out as a preview: nothing to stream
        self._percent = -1            # last whole percent of progress published
        self._description = None      # RobotDescription when the model comes from the topic

        self._command_pub = self._trajectory_pub = self._forward_pub = None
        # relative, as the controllers subscribe: follows the namespace
        controller = self.get_parameter('controller').value or DEFAULT_CONTROLLERS.get(self._output)
        self._preview_pub = None
        if self._output == 'joint_command':
            self._command_pub = self.create_publisher(JointState, 'sysid/joint_command', 10)
            if self.get_parameter('preview').value:
                self._preview_pub = self.create_publisher(JointTrajectory, 'sysid/joint_trajectory', 1)
        elif self._output == 'joint_trajectory':
            self._trajectory_pub = self.create_publisher(JointTrajectory, f'{controller}/joint_trajectory', 1)
        elif self._output in DEFAULT_CONTROLLERS:
            self._forward_pub = self.create_publisher(Float64MultiArray, f'{controller}/commands', 10)
        self._progress_pub = self.create_publisher(Float32, 'sysid/progress', 10)
        self._done_pub = self.create_publisher(
            Bool, 'sysid/done', QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        # only the newest pose matters: depth 1 never lags behind a fast simulation
        self.create_subscription(JointState, 'joint_states', self._on_joint_states, 1)
        self.create_service(Trigger, 'sysid/start', self._on_start)
        self.create_service(Trigger, 'sysid/stop', self._on_stop)

        try:
            self._check_parameters()
            path = self.get_parameter('model').value
            if path:
                robot = load_robot(path)
                self.residual = self._residual_model(Path(path), robot)  # refused: no run at all
                self._use_robot(robot, path)
            else:
                self._description = RobotDescription(self, self._on_robot_description)
                self.get_logger().info(self._description.waiting)
        except (SysidError, ValueError) as exc:
            self._fail(exc)
        # the node clock (sim time with use_sim_time) paces the stream and indexes the profile
        self._timer = self.create_timer(1.0 / self._rate if self._rate > 0 else 1.0, self._on_timer)

    def _check_parameters(self):
        """Raise ValueError for parameters that cannot work with any model."""
        if self._output not in OUTPUTS:
            raise ValueError(f"unknown output '{self._output}' (supported: {', '.join(OUTPUTS)})")
        kind = self.get_parameter('excitation').value
        if kind not in EXCITATIONS:
            raise ValueError(f"unknown excitation '{kind}' (supported: {', '.join(EXCITATIONS)})")
        if not (self._rate > 0 and self._max_velocity > 0):
            raise ValueError(f'rate_hz and max_velocity must be > 0, got {self._rate} and {self._max_velocity}')
        if not self._state_timeout > 0:
            raise ValueError(f'state_timeout_s must be > 0, got {self._state_timeout}')

    def _fail(self, exc):
        self.error = f'cannot play an excitation: {exc}'
        self.get_logger().error(self.error)

    def _on_robot_description(self, robot):
        try:
            self._use_robot(robot, self._description.topic)
        except (SysidError, ValueError) as exc:
            self._fail(exc)

    def _use_robot(self, robot, where: str):
        """Check the controller's joints, plan the excitation for ``robot``; raises SysidError or ValueError."""
        if self._forward_pub is not None:
            self.controller_joints, self._order = _controller_order(self._optional('controller_joints'),
                                                                     robot.joint_names)
            if self._output == 'forward_effort':
                self._kp, self._kd = (self._gain(name, len(robot.joint_names)) for name in ('effort_kp', 'effort_kd'))
        kind = self.get_parameter('excitation').value
        self.plan = self._plan(kind, robot)
        self.robot = robot  # only once there is a plan: start() needs both
        # the first inverse-dynamics call pays a one-off setup; do it here, not when starting
        self.robot.inverse_dynamics(self.plan.q[:2], self.plan.dq[:2], self.plan.ddq[:2])
        to = f', to {self._forward_pub.topic_name} in order {self.controller_joints}' if self._forward_pub else ''
        self.get_logger().info(
            f'{kind} excitation of {self.plan.time[-1]:g} s at {self._rate:g} Hz for {where} '
            f'({self.robot.n_joints} joints {list(self.robot.joint_names)}){to}')

    def _residual_model(self, model_path: Path, robot):
        """The residual model the feed-forward adds (parameter ``residual_model``) for ``robot``
        loaded from ``model_path``, or None; raises SysidError for a file that is no residual
        model of the robot's joints."""
        value = self.get_parameter('residual_model').value
        if value == 'none':
            return None
        path = Path(value) if value else model_path.with_name('residual_model.json')
        if not value and not path.is_file():
            return None
        try:
            model = ResidualModel.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            raise DataError(f'residual_model {path}: {exc}') from None
        if sorted(model.joint_names) != sorted(robot.joint_names):
            raise DataError(f'residual_model {path} is of the joints {list(model.joint_names)}, the model has '
                            f'{list(robot.joint_names)}')
        if model.needs('deflection'):
            self.get_logger().warning(f'{path}: the residual model takes the transmission\'s measured deflection, '
                                      'which a plan does not have: the feed-forward does without it')
            return None
        self.get_logger().info(f'feed-forward with the residual model of {path}')
        return model

    def _optional(self, name):
        """A parameter declared by type: its value, or None when not given."""
        try:
            return self.get_parameter(name).value
        except ParameterUninitializedException:
            return None

    def _gain(self, name: str, n: int) -> np.ndarray:
        """forward_effort gain ``name`` (n,) in model joint order, from one value per controller joint or one."""
        value = self._optional(name)
        if value is None or len(value) == 0:
            raise ValueError(f'output forward_effort closes the loop on joint_states: set {name} (one value per '
                             f'controller joint {list(self.controller_joints)}, or one for all; 0 for '
                             f'feed-forward alone)')
        gain = np.array(value, dtype=float)
        gain = np.full(n, gain[0]) if gain.size == 1 else gain
        if gain.shape != (n,) or not np.all(np.isfinite(gain)) or np.any(gain < 0):
            raise ValueError(f'{name} must hold 1 or {n} finite values >= 0, got {list(value)}')
        model_order = np.empty(n)
        model_order[self._order] = gain
        return model_order

    def _plan(self, kind: str, robot):
        """The excitation Trajectory at rate_hz for ``robot``; raises SysidError or ValueError."""
        duration = float(self.get_parameter('duration').value)
        if kind == 'optimized':
            # imported only for this kind: the search (scipy.optimize) stays out of the node otherwise
            from sysid_core.excitation.design import optimize_excitation
            from sysid_core.excitation.multistart import search_workers
            time_limit = float(self.get_parameter('excitation_time_limit').value)
            design = optimize_excitation(
                robot, duration, self._rate, seed=self.get_parameter('seed').value, max_velocity=self._max_velocity,
                time_limit_s=time_limit, workers=search_workers(time_limit))
            self.get_logger().info(
                f'optimized excitation: {design.criterion} criterion {design.criterion_value:.3f} (best start '
                f'{design.initial_criterion_value:.3f}), condition number {design.condition_number_scaled:.1f} '
                f'with unit-norm columns'
                + ('' if design.condition_cap is None else f' (cap {design.condition_cap:.1f})')
                + f', {design.restarts} local searches in {design.elapsed_s:.1f} s, '
                f'limits met: {design.limits_met}')
            if not design.limits_met:
                raise ValueError('the optimized excitation does not meet the joint limits')
            return design.trajectory
        if kind == 'friction-sweep':
            start = np.clip(np.zeros(robot.n_joints), *robot.joint_range.T)
            return friction_sweep(start, robot.joint_range, self._rate, max_velocity=self._max_velocity).trajectory
        if kind == 'file':
            path = self.get_parameter('trajectory_file').value
            if not path:
                raise ValueError("excitation 'file' needs parameter 'trajectory_file'")
            plan, _ = load_trajectory(path, robot.joint_names)
            try:
                plan = resample(plan, self._rate)
            except ValueError as exc:
                raise ValueError(f'{path} cannot be played at rate_hz {self._rate:g}: {exc}') from None
            lower, upper = robot.joint_range[:, 0], robot.joint_range[:, 1]
            outside = np.flatnonzero(np.any((plan.q < lower - FILE_TOLERANCE) | (plan.q > upper + FILE_TOLERANCE),
                                            axis=0))
            if outside.size:
                raise ValueError(f'{path} leaves the joint range of joints '
                                 f'{[robot.joint_names[j] for j in outside]}')
            peak = float(np.max(np.abs(plan.dq)))
            if peak > self._max_velocity * (1 + FILE_TOLERANCE):
                raise ValueError(f'{path} reaches {peak:.3f} rad/s, above max_velocity {self._max_velocity:g} rad/s '
                                 f'(raise max_velocity to play it)')
            return plan
        # amplitude_fraction: share of each joint's half-range the excitation sweeps (reduce it for
        # a first run on hardware); multisine rejects values outside (0, 1]
        return multisine(robot.joint_range, duration, self._rate, seed=self.get_parameter('seed').value,
                         max_velocity=self._max_velocity,
                         amplitude_fraction=float(self.get_parameter('amplitude_fraction').value))

    # --- callbacks --------------------------------------------------------------------------

    def _on_joint_states(self, msg: JointState):
        if self.robot is None:
            return
        names = tuple(msg.name)
        if self._state_index is None or self._state_index[0] != names:
            self._state_index = (names, self._match(names))
        index = self._state_index[1]
        if index is not None and len(msg.position) == len(names):
            first = self._q_measured is None
            self._q_measured = np.asarray(msg.position, dtype=float)[index]
            self._dq_measured = (np.asarray(msg.velocity, dtype=float)[index] if len(msg.velocity) == len(names)
                                 else None)
            if self._mode == 'holding' and self._output == 'forward_effort' and self._stale():
                # back after a silence the arm floated through: hold it where it is now, not pull
                # it back to where it was
                self._hold = (self._q_measured.copy(), *self._hold[1:])
            self._measured_at = time.monotonic()
            if first and self._autostart and self._mode == 'idle':
                self._autostart_now()

    def _on_timer(self):
        if self._autostart and self._mode == 'idle' and self._q_measured is not None:
            self._autostart_now()
            return  # start() sent the first sample
        if self._mode == 'running' and self._output == 'forward_effort' and self._stale():
            # feedback on an old pose would push the arm wherever the error says
            self.get_logger().error(f'joint_states older than {self._state_timeout:g} s: run stopped, '
                                    f'holding the last measured pose against gravity')
            self.stop()
        elif self._mode == 'running':
            self._play()
        elif self._mode == 'holding' and self._output != 'joint_trajectory':
            self._send(*self._hold)

    def _autostart_now(self):
        """Start, on the first pose (a simulator waits for the first command) and then on timer
        ticks until it succeeds (e.g. once the controller is up)."""
        ok, message = self.start()
        if ok:
            self._autostart = False
            self.get_logger().info(f'autostart: {message}')
        else:
            self.get_logger().warning(f'autostart: {message}', throttle_duration_sec=WARN_PERIOD_S)

    def _on_start(self, request, response):
        response.success, response.message = self.start()
        return response

    def _on_stop(self, request, response):
        response.success, response.message = self.stop()
        return response

    # --- actions ----------------------------------------------------------------------------

    def start(self) -> tuple[bool, str]:
        """(Re)start the run from the measured pose; returns (success, message)."""
        reason = self._why_not_ready()
        if reason:
            return False, reason
        target = self._trajectory_pub or self._forward_pub
        if target is not None and target.get_subscription_count() == 0:
            return False, f'no subscriber on {target.topic_name}: start the controller first'
        if self._output == 'forward_effort':
            if self._dq_measured is None and np.any(self._kd > 0):
                return False, 'joint_states carries no velocity: effort_kd needs it'
            if self._stale():
                return False, f'joint_states is older than state_timeout_s {self._state_timeout:g} s'
        robot = self.robot
        try:
            self.profile, self.excitation = excitation_with_approach_and_rest(
                self._q_measured, self.plan, self._rate, self._max_velocity, robot.joint_range)
        except (SysidError, ValueError) as exc:
            self.get_logger().error(f'cannot build the profile: {exc}')
            return False, f'cannot build the profile: {exc}'
        self.feedforward = robot.inverse_dynamics(self.profile.q, self.profile.dq, self.profile.ddq)
        if self.residual is not None:
            self.feedforward += self.residual.predict_for(robot.joint_names, self.profile.q, self.profile.dq,
                                                          torque=self.feedforward)
        if self._trajectory_pub is not None:
            self._trajectory_pub.publish(self._trajectory_message(self.profile))
        now = self.get_clock().now()
        self._start_ns = now.nanoseconds
        self._previewing = self._preview_pub is not None and self._preview_pub.get_subscription_count() > 0
        if self._previewing:
            preview = knots(self.profile, self.feedforward)
            msg = JointTrajectory(joint_names=list(robot.joint_names),
                                  points=_points(preview.time, preview.q, preview.dq, preview.ddq, preview.effort))
            msg.header.stamp = now.to_msg()
            self._preview_pub.publish(msg)
        self._mode = 'running'
        self._percent = -1
        self._done_pub.publish(Bool(data=False))
        self._play()
        total = self.profile.time[-1]
        return True, (f'playing {total:.2f} s: excitation from {self.profile.time[self.excitation.start]:.2f} s '
                      f'to {self.profile.time[self.excitation.stop - 1]:.2f} s')

    def stop(self) -> tuple[bool, str]:
        """Stop the run and hold the measured pose against gravity; returns (success, message)."""
        reason = self._why_not_ready()
        if reason:
            return False, reason
        q = self._q_measured.copy()
        zero = np.zeros_like(q)
        self._hold = (q, zero, self._gravity(q))
        self._mode = 'holding'
        self._previewing = False
        self._done_pub.publish(Bool(data=False))
        if self._trajectory_pub is not None:
            self._trajectory_pub.publish(self._trajectory_message(None, hold=q))
        else:
            self._send(*self._hold)
        return True, 'stopped: holding the measured pose'

    def destroy_node(self):
        """Leave the arm safe before the node goes: stop a run at the measured pose; on efforts, end
        with the gravity torque there, without feedback (the controller keeps applying it).

        Needs the context alive: spin_node(..., publishes_on_shutdown=True) keeps it so on a signal.
        """
        # getattr: a constructor that failed early leaves a node without the run's state
        if self.context.ok() and getattr(self, '_mode', 'idle') != 'idle' and self._why_not_ready() is None:
            if self._mode == 'running':
                self.stop()
            if self._output == 'forward_effort':
                self._forward_pub.publish(Float64MultiArray(data=self._gravity(self._q_measured)[self._order].tolist()))
            # a writer's samples not yet acknowledged go with it when the process ends: wait, so
            # that the controller gets this last command and does not keep the one before
            for publisher in (self._command_pub, self._trajectory_pub, self._forward_pub):
                if publisher is not None:
                    publisher.wait_for_all_acked(Timeout(seconds=SHUTDOWN_ACK_S))
            self.get_logger().info('shut down: arm left at the measured pose')
        super().destroy_node()

    def _why_not_ready(self) -> str | None:
        if self.robot is None:
            if self.error is None and self._description is not None:
                return self._description.error or self._description.waiting
            return self.error
        if self._q_measured is None:
            return self._pose_error or 'no /joint_states received yet'
        return None

    # --- helpers ----------------------------------------------------------------------------

    def _match(self, names):
        """Message index of every robot joint, or None (and a logged error) if some are missing."""
        where = {name: i for i, name in enumerate(names)}
        missing = [name for name in self.robot.joint_names if name not in where]
        if missing:
            self._pose_error = (f'joint_states lacks joints {missing} of the model '
                                f'(it has {list(names)}): wrong model or robot?')
            self.get_logger().error(self._pose_error, throttle_duration_sec=WARN_PERIOD_S)
            return None
        self._pose_error = None
        return np.array([where[name] for name in self.robot.joint_names])

    def _stale(self) -> bool:
        return time.monotonic() - self._measured_at > self._state_timeout

    def _gravity(self, q) -> np.ndarray:
        """(n,) N m holding ``q`` at rest under the nominal model."""
        zero = np.zeros_like(q)
        return self.robot.inverse_dynamics(q, zero, zero)[0]

    def _play(self):
        """Send the profile sample due now; finish (hold, done) at its end."""
        last = len(self.profile.time) - 1
        now = self.get_clock().now()
        elapsed_ns = now.nanoseconds - self._start_ns
        # the small offset keeps a sample due exactly now from rounding down to the previous one
        i = min(max(int(elapsed_ns * 1e-9 * self._rate + 1e-6), 0), last)
        if self._trajectory_pub is None and not self._previewing:
            self._send(self.profile.q[i], self.profile.dq[i], self.feedforward[i], now)
        # whole percents are plenty for a progress bar and spare the subscribers 500 messages/s
        percent = 100 * i // last
        if percent != self._percent:
            self._percent = percent
            self._progress_pub.publish(Float32(data=i / last))
        if i == last:
            self._hold = (self.profile.q[last], self.profile.dq[last], self.feedforward[last])
            self._mode = 'holding'
            self._previewing = False
            self._done_pub.publish(Bool(data=True))
            self.get_logger().info('excitation done, arm at rest')

    def _send(self, q, dq, effort, now=None):
        """Stream one command: desired ``q`` rad, ``dq`` rad/s, feed-forward ``effort`` N m, (n,) each."""
        if self._command_pub is not None:
            msg = JointState(name=list(self.robot.joint_names), position=q.tolist(), velocity=dq.tolist(),
                             effort=effort.tolist())
            msg.header.stamp = (self.get_clock().now() if now is None else now).to_msg()
            self._command_pub.publish(msg)
            return
        if self._output == 'forward_position':
            values = q
        elif self._mode == 'holding':
            # against gravity where the arm is; the PD pulls it back to the hold pose when it fed back
            feedback = not self._stale()
            values = mit_torque(self._q_measured, self._dq_measured if self._dq_measured is not None else 0.0, q, dq,
                                self._gravity(self._q_measured), self._kp * feedback, self._kd * feedback)
        else:
            dq_measured = self._dq_measured if self._dq_measured is not None else dq
            values = mit_torque(self._q_measured, dq_measured, q, dq, effort, self._kp, self._kd)
        self._forward_pub.publish(Float64MultiArray(data=values[self._order].tolist()))

    def _trajectory_message(self, profile, hold=None) -> JointTrajectory:
        """The profile as a JointTrajectory (stamp 0: start on receipt), or one point at ``hold``.

        No efforts: the joint_trajectory_controller rejects trajectories that carry them.
        """
        msg = JointTrajectory(joint_names=list(self.robot.joint_names))
        if profile is None:
            msg.points = [JointTrajectoryPoint(positions=hold.tolist(), velocities=[0.0] * len(hold),
                                               time_from_start=_duration(STOP_TIME_S))]
            return msg
        msg.points = _points(profile.time, profile.q, profile.dq, profile.ddq)
        return msg


def _points(time, q, dq, ddq, effort=None) -> list:
    """JointTrajectoryPoints at ``time`` (K,) s from the start with q, dq, ddq and (optionally) effort (K, n)."""
    rows = zip(time.tolist(), q.tolist(), dq.tolist(), ddq.tolist(),
               effort.tolist() if effort is not None else [[]] * len(time))
    return [JointTrajectoryPoint(positions=p, velocities=v, accelerations=a, effort=e, time_from_start=_duration(t))
            for t, p, v, a, e in rows]


def _controller_order(names, model_joints) -> tuple[tuple, np.ndarray]:
    """(controller joint names, (n,) model index of each) for ``names`` (None or empty: the model's
    order); raises ValueError unless they are the model's joints, each once."""
    if not names:
        return tuple(model_joints), np.arange(len(model_joints))
    names = tuple(names)
    missing = [j for j in model_joints if j not in names]
    unknown = [j for j in names if j not in model_joints]
    repeated = sorted({j for j in names if names.count(j) > 1})
    if missing or unknown or repeated:
        problems = '; '.join(f'{what} {which}' for what, which in (
            ('missing', missing), ('not in the model', unknown), ('repeated', repeated)) if which)
        raise ValueError(f'controller_joints {list(names)} must list the model\'s joints {list(model_joints)} '
                         f'each once: {problems}')
    return names, np.array([model_joints.index(j) for j in names])


def _duration(seconds: float) -> Duration:
    sec, nanosec = divmod(int(round(seconds * 1e9)), 1_000_000_000)
    return Duration(sec=sec, nanosec=nanosec)


def main(args=None) -> int:
    return spin_node(TrajectoryPublisher, args, publishes_on_shutdown=True)


if __name__ == '__main__':
    main()
