"""Plays an excitation on the arm: streamed MIT-mode commands, or one JointTrajectory.

From the pose measured on ``joint_states`` the node builds the whole profile with the core
(approach from rest, the excitation, back to rest: ``excitation_with_approach_and_rest``),
adds the nominal model's inverse-dynamics feed-forward, and streams it on
``sysid/joint_command`` (JointState: position, velocity, effort = feed-forward torque) at
``rate_hz``. The sample sent is the one due at the node clock's elapsed time, so the node
follows a simulation with ``use_sim_time``. After the profile, and after ``sysid/stop``, it keeps
streaming a hold command (a pose, zero velocity, the gravity torque there): the simulator and
the Damiao bridge drop to damping only when commands stop, and the arm would sag.

With ``send_trajectory`` it instead publishes the profile once as a JointTrajectory for a
ros2_control joint_trajectory_controller (topic
``joint_trajectory_controller/joint_trajectory``, remap it to the controller's) and only reports progress by time.

The excitation (parameter ``excitation``): ``multisine`` (random sinusoids scaled to
``amplitude_fraction`` of each joint's range and to ``max_velocity``, seeded by ``seed``);
``optimized`` (a Fourier series at rest at both ends that tells the most about the terminal
body's parameters, within the joint range, ``max_velocity``, the model's actuator torque limits
and its collision geometry; the search takes up to ``excitation_time_limit`` s when the node
starts); ``file`` (replay
``trajectory_file``, a .json or .csv written by ``sysid-identify --save-trajectory`` or
``save_trajectory``: resampled to ``rate_hz`` when its duration is a whole number of periods
there, refused when not, when its joints differ from the model's, when it leaves the joint
range or exceeds ``max_velocity``). ``duration`` applies to the first two.

``sysid/progress``: Float32, 0..1 of the profile, on every whole percent.
``sysid/done``: Bool, transient local; False when a run starts or is stopped, True once the
arm is back at rest.
"""
from builtin_interfaces.msg import Duration
import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float32
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import SysidError
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine
from sysid_core.excitation.trajectory import load_trajectory, resample
from sysid_ros.entry_point import spin_node

EXCITATIONS = ('multisine', 'optimized', 'file')
# a replayed file may exceed max_velocity or the joint range by rounding only
FILE_TOLERANCE = 1e-9
# send_trajectory: time the controller gets to stop at the measured pose on sysid/stop (s)
STOP_TIME_S = 0.1
WARN_PERIOD_S = 5.0


class TrajectoryPublisher(Node):
    """Excitation player. Public for tests: ``robot`` (None if the model failed), ``error`` (why
    it cannot run), ``plan`` (the excitation Trajectory), ``profile`` (the Trajectory of the current
    run), ``excitation`` (the plan's slice of it), ``feedforward`` (N, n) N m."""

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
        self.declare_parameter('send_trajectory', False)

        self.robot = self.plan = None
        self.error = None
        self.profile = self.excitation = self.feedforward = None
        self._rate = float(self.get_parameter('rate_hz').value)
        self._max_velocity = float(self.get_parameter('max_velocity').value)
        self._send_trajectory = bool(self.get_parameter('send_trajectory').value)
        self._autostart = bool(self.get_parameter('autostart').value)
        self._q_measured = None       # (n,) rad, latest complete pose from joint_states
        self._pose_error = None       # why joint_states cannot give the pose
        self._state_index = None      # (names of the last message, robot joint -> message index)
        self._start_ns = None         # node clock at the start of the run
        self._hold = None             # (q, dq = 0, ff) streamed while holding
        self._mode = 'idle'           # idle | running | holding
        self._percent = -1            # last whole percent of progress published

        self._command_pub = self.create_publisher(JointState, 'sysid/joint_command', 10)
        self._trajectory_pub = self.create_publisher(
            JointTrajectory, 'joint_trajectory_controller/joint_trajectory', 1)
        self._progress_pub = self.create_publisher(Float32, 'sysid/progress', 10)
        self._done_pub = self.create_publisher(
            Bool, 'sysid/done', QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        # only the newest pose matters: depth 1 never lags behind a fast simulation
        self.create_subscription(JointState, 'joint_states', self._on_joint_states, 1)
        self.create_service(Trigger, 'sysid/start', self._on_start)
        self.create_service(Trigger, 'sysid/stop', self._on_stop)

        try:
            self._load()
        except (SysidError, ValueError) as exc:
            self.error = f'cannot play an excitation: {exc}'
            self.get_logger().error(self.error)
        # the node clock (sim time with use_sim_time) paces the stream and indexes the profile
        self._timer = self.create_timer(1.0 / self._rate if self._rate > 0 else 1.0, self._on_timer)

    def _load(self):
        """Load the nominal model and plan the excitation; raises SysidError or ValueError."""
        path = self.get_parameter('model').value
        if not path:
            raise ValueError("parameter 'model' (path of the nominal MJCF model) is empty")
        kind = self.get_parameter('excitation').value
        if kind not in EXCITATIONS:
            raise ValueError(f"unknown excitation '{kind}' (supported: {', '.join(EXCITATIONS)})")
        if not (self._rate > 0 and self._max_velocity > 0):
            raise ValueError(f'rate_hz and max_velocity must be > 0, got {self._rate} and {self._max_velocity}')
        robot = load_robot(path)
        self.plan = self._plan(kind, robot)
        self.robot = robot  # only once there is a plan: start() needs both
        # the first inverse-dynamics call pays a one-off setup; do it here, not when starting
        self.robot.inverse_dynamics(self.plan.q[:2], self.plan.dq[:2], self.plan.ddq[:2])
        self.get_logger().info(
            f'{kind} excitation of {self.plan.time[-1]:g} s at {self._rate:g} Hz for {path} '
            f'({self.robot.n_joints} joints {list(self.robot.joint_names)})')

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
                f'with unit-norm columns, {design.restarts} local searches in {design.elapsed_s:.1f} s, '
                f'limits met: {design.limits_met}')
            if not design.limits_met:
                raise ValueError('the optimized excitation does not meet the joint limits')
            return design.trajectory
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
            self._q_measured = np.asarray(msg.position, dtype=float)[index]

    def _on_timer(self):
        if self._autostart and self._mode == 'idle' and self._q_measured is not None:
            ok, message = self.start()
            if ok:
                self._autostart = False
                self.get_logger().info(f'autostart: {message}')
            else:  # e.g. the controller is not up yet: try again on the next tick
                self.get_logger().warning(f'autostart: {message}', throttle_duration_sec=WARN_PERIOD_S)
            return  # start() sent the first sample
        if self._mode == 'running':
            self._play()
        elif self._mode == 'holding' and not self._send_trajectory:
            self._publish_command(*self._hold)

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
        if self._send_trajectory and self._trajectory_pub.get_subscription_count() == 0:
            return False, f'no subscriber on {self._trajectory_pub.topic_name}: start the controller first'
        robot = self.robot
        try:
            self.profile, self.excitation = excitation_with_approach_and_rest(
                self._q_measured, self.plan, self._rate, self._max_velocity, robot.joint_range)
        except (SysidError, ValueError) as exc:
            self.get_logger().error(f'cannot build the profile: {exc}')
            return False, f'cannot build the profile: {exc}'
        self.feedforward = robot.inverse_dynamics(self.profile.q, self.profile.dq, self.profile.ddq)
        if self._send_trajectory:
            self._trajectory_pub.publish(self._trajectory_message(self.profile))
        self._start_ns = self.get_clock().now().nanoseconds
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
        self._hold = (q, zero, self.robot.inverse_dynamics(q, zero, zero)[0])
        self._mode = 'holding'
        self._done_pub.publish(Bool(data=False))
        if self._send_trajectory:
            self._trajectory_pub.publish(self._trajectory_message(None, hold=q))
        else:
            self._publish_command(*self._hold)
        return True, 'stopped: holding the measured pose'

    def _why_not_ready(self) -> str | None:
        if self.robot is None:
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

    def _play(self):
        """Send the profile sample due now; finish (hold, done) at its end."""
        last = len(self.profile.time) - 1
        now = self.get_clock().now()
        elapsed_ns = now.nanoseconds - self._start_ns
        # the small offset keeps a sample due exactly now from rounding down to the previous one
        i = min(max(int(elapsed_ns * 1e-9 * self._rate + 1e-6), 0), last)
        if not self._send_trajectory:
            self._publish_command(self.profile.q[i], self.profile.dq[i], self.feedforward[i], now)
        # whole percents are plenty for a progress bar and spare the subscribers 500 messages/s
        percent = 100 * i // last
        if percent != self._percent:
            self._percent = percent
            self._progress_pub.publish(Float32(data=i / last))
        if i == last:
            self._hold = (self.profile.q[last], self.profile.dq[last], self.feedforward[last])
            self._mode = 'holding'
            self._done_pub.publish(Bool(data=True))
            self.get_logger().info('excitation done, arm at rest')

    def _publish_command(self, q, dq, effort, now=None):
        msg = JointState(name=list(self.robot.joint_names), position=q.tolist(), velocity=dq.tolist(),
                         effort=effort.tolist())
        msg.header.stamp = (self.get_clock().now() if now is None else now).to_msg()
        self._command_pub.publish(msg)

    def _trajectory_message(self, profile, hold=None) -> JointTrajectory:
        """The profile as a JointTrajectory (stamp 0: start on receipt), or one point at ``hold``.

        No efforts: the joint_trajectory_controller rejects trajectories that carry them.
        """
        msg = JointTrajectory(joint_names=list(self.robot.joint_names))
        if profile is None:
            msg.points = [JointTrajectoryPoint(positions=hold.tolist(), velocities=[0.0] * len(hold),
                                               time_from_start=_duration(STOP_TIME_S))]
            return msg
        msg.points = [JointTrajectoryPoint(positions=q, velocities=dq, accelerations=ddq,
                                           time_from_start=_duration(t))
                      for t, q, dq, ddq in zip(profile.time.tolist(), profile.q.tolist(),
                                               profile.dq.tolist(), profile.ddq.tolist())]
        return msg


def _duration(seconds: float) -> Duration:
    sec, nanosec = divmod(int(round(seconds * 1e9)), 1_000_000_000)
    return Duration(sec=sec, nanosec=nanosec)


def main(args=None):
    spin_node(TrajectoryPublisher, args)


if __name__ == '__main__':
    main()
