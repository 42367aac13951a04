"""MuJoCo stand-in for the real arm: joint drives in MIT mode, sensors with noise, a clock.

Every control period the node reads the simulated state, publishes it on ``joint_states``
(what the drives would report: position, velocity, applied torque, with noise and
quantisation), computes the torque for the latest ``sysid/joint_command`` (q_des, dq_des,
feed-forward tau_ff) and holds it through the MuJoCo steps of the period. The law: with the
``kp`` and ``kd`` parameters set, the MIT mode of the drives, tau = kp (q_des - q) + kd (dq_des - dq)
+ tau_ff; without them (the default) the computed-torque feedback of the sim source,
tau = tau_ff + M(q) (kp (q_des - q) + kd (dq_des - dq)) with the model's joint-space inertia M
and acceleration gains of ``sysid_core.simulation.ComputedTorque``, stable and accurate on any
arm, 7-DOF arms without armature included. A joint whose command is older than
``command_timeout_s`` (sim time) falls back to damping only (q_des = q, dq_des = 0, no
feed-forward: tau = -kd dq in MIT mode), as the Damiao bridge does; before its first command
a joint holds the initial pose with the law and no feed-forward.

The simulated arm is the model file as a real arm behaves (``sysid_core.simulation.plant_model``):
its own actuators and contacts off, no gravcomp, the MuJoCo timestep chosen for ``rate_hz``.

realtime: true steps on a wall timer at ``rate_hz`` / ``steps_per_callback`` (catching up a
few late periods), so each call publishes about ``steps_per_callback`` samples at once.
realtime: false steps as fast as the executor allows and publishes ``/clock`` (it is
published in both modes), so nodes with ``use_sim_time`` follow the simulation. Once joint
commands flow it never runs more than ``command_lead_s`` (sim time) ahead of the newest one:
a commander in another process, following the clock, then keeps up instead of being left
behind until its commands time out; after a second (wall time) without a new command it
simulates on regardless (damping only, as on a timeout). The fast loop
is a zero-period timer that runs ``steps_per_callback`` periods per call; between calls the
executor serves every other ready entity, so services, parameters and the other nodes of the
process stay responsive. rclpy's executor takes one message per subscription per wait
round, so the default of one period per call keeps in-process subscribers (and the /clock
subscription of sim-time nodes) in step with the simulation: every round publishes one
sample and every subscriber takes one. Larger values run the simulation ahead of them: they
fall behind by steps_per_callback - 1 samples per round, follow a stale clock, and drop
samples once their queues are full. Use them only when the consumers live in other
processes and keep up (or to reproduce the bursts in which a loaded machine delivers samples).

Start: with ``wait_for_subscribers`` > 0 nothing is simulated or published until
``joint_states`` has that many subscribers (matched), so a recorder that starts slowly still
gets the first sample. Idle: when ``sysid/done`` turns true (the trajectory_publisher finished its excitation and
holds the arm at rest) the simulation pauses, in both modes: no stepping, no ``joint_states``,
no ``/clock``, no CPU. It resumes when ``sysid/done`` turns false (``sysid/start`` or
``sysid/stop`` of the trajectory_publisher). Commands still in flight when the flag arrives
are taken as usual; a node that commands the arm without publishing ``sysid/done`` never
pauses it. ``published`` counts the JointStates sent; it is logged at each
pause and at shutdown, to compare with what the recorders received.

Names are relative (``joint_states``, ``sysid/joint_command``, ``sysid/done``) except
``/clock``, which ROS reads from the root: under a namespace, remap it (``-r /clock:=clock``
for this node and every node following its time) so two simulations do not share one clock.

rate_hz: when the model's timestep does not divide the control period, the plant integrates
with the largest timestep that does (``sysid_core.simulation.simulation_timing``; logged).
"""
import time

from builtin_interfaces.msg import Time
import mujoco
import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError, SysidError
from sysid_core.simulation import (ComputedTorque, MeasurementNoise, measure, mit_torque, mujoco_warnings,
                                   plant_model, simulation_timing, step)
from sysid_ros.entry_point import spin_node

# A late wall timer catches up at most this many control periods in one call; further behind,
# the simulation gives up on the lost time (it runs slower than real time) instead of bursting.
MAX_CATCH_UP = 20
WARN_PERIOD_S = 5.0
# JointStates the publisher keeps until every reliable subscriber acknowledged them: 1 s at
# 1 kHz, so a subscriber process descheduled for a while on a loaded machine loses nothing
STATE_DEPTH = 1000
# realtime false: a commander silent this long (wall time) is not waited for any more
COMMAND_WAIT_S = 1.0
WATCH_PERIOD_S = 0.05  # s between checks of the subscribers and of the commander

DEFAULT_NOISE = MeasurementNoise()  # the project's default measurement noise


def _stamp(nanoseconds: int) -> Time:
    sec, nanosec = divmod(nanoseconds, 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


class MujocoSim(Node):
    """Simulated arm. Public for tests: ``published`` (JointState messages sent so far),
    ``sim_time`` (s), ``joint_names``, ``kp``/``kd`` (n,) of the MIT law (None under computed
    torque), ``error`` (None while healthy)."""

    def __init__(self, **kwargs):
        super().__init__('mujoco_sim', **kwargs)
        self.declare_parameter('model', '')
        self.declare_parameter('rate_hz', 1000.0)
        self.declare_parameter('realtime', True)
        self.declare_parameter('steps_per_callback', 1)
        self.declare_parameter('kp', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('kd', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('q_noise', DEFAULT_NOISE.q_std)
        self.declare_parameter('dq_noise', DEFAULT_NOISE.dq_std)
        self.declare_parameter('tau_noise', DEFAULT_NOISE.tau_std)
        self.declare_parameter('q_resolution', 0.0)
        self.declare_parameter('dq_resolution', 0.0)
        self.declare_parameter('tau_resolution', 0.0)
        self.declare_parameter('seed', 0)
        self.declare_parameter('initial_positions', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('command_timeout_s', 0.1)
        self.declare_parameter('command_lead_s', 0.005)
        self.declare_parameter('wait_for_subscribers', 0)

        self.published = 0
        self.error = None
        self.joint_names = ()
        self._periods = 0
        self._period_ns = 0
        self._timer = None
        self.paused = False
        self._done = None  # the last sysid/done seen; None: none yet
        self._last_command_ns = None  # sim time (ns) of the newest command: its stamp, else its arrival
        self._waiting_since = None  # wall time the fast loop began to wait for a command
        self._free_running = False  # the commander went silent: do not wait for it
        self._state_pub = self.create_publisher(JointState, 'joint_states', QoSProfile(depth=STATE_DEPTH))
        self._clock_pub = self.create_publisher(ClockMsg, '/clock', QoSProfile(depth=10))
        self.create_subscription(JointState, 'sysid/joint_command', self._on_command, QoSProfile(depth=10))
        self.create_subscription(Bool, 'sysid/done', self._on_done,
                                 QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        try:
            self._setup()
        except (SysidError, ValueError) as exc:
            self._fail(f'not simulating: {exc}')
            return
        self._realtime = bool(self.get_parameter('realtime').value)
        self._lead_ns = int(float(self.get_parameter('command_lead_s').value) * 1e9)
        self._subscribers = int(self.get_parameter('wait_for_subscribers').value)
        # a steady clock: wall time paces the simulation even if use_sim_time is set by mistake
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        if self._realtime:
            self._timer = self.create_timer(self._period_ns * self._steps_per_callback * 1e-9, self._on_wall_timer,
                                            clock=steady)
        else:
            self._timer = self.create_timer(0.0, self._on_fast_timer, clock=steady)
        self._timer.cancel()
        self._started = False
        self.create_timer(WATCH_PERIOD_S, self._on_watch, clock=steady)
        self._on_watch()
        self.get_logger().info(
            f"simulating {self._model_path} ({len(self.joint_names)} joints) at {1e9 / self._period_ns:g} Hz, "
            f"{'MIT law' if self.kp is not None else 'computed-torque feedback'}, "
            f"{'real time' if self._realtime else 'as fast as possible'}; {self._timing.describe()}"
            + (f"; starts when joint_states has {self._subscribers} subscribers" if not self._started else ""))

    @property
    def sim_time(self) -> float:
        return self._periods * self._period_ns * 1e-9

    def _setup(self):
        """Load the model and everything that does not change while simulating; raises on bad input."""
        param = self.get_parameter
        self._model_path = param('model').value
        if not self._model_path:
            raise ValueError("parameter 'model' (path of the MJCF file to simulate) is empty")
        robot = load_robot(self._model_path)
        self.joint_names = robot.joint_names
        n = len(self.joint_names)
        self._index = {name: j for j, name in enumerate(self.joint_names)}
        rate = float(param('rate_hz').value)
        if not rate > 0:
            raise ValueError(f'rate_hz must be > 0, got {rate}')
        self._timing = simulation_timing(robot.model, rate)
        self._model = plant_model(robot.model, self._timing)
        self._substeps = self._timing.substeps
        self._period_ns = int(round(self._substeps * self._timing.timestep * 1e9))
        self._steps_per_callback = int(param('steps_per_callback').value)
        if self._steps_per_callback < 1:
            raise ValueError(f'steps_per_callback must be >= 1, got {self._steps_per_callback}')
        self._timeout_ns = int(float(param('command_timeout_s').value) * 1e9)

        self.kp = self._joint_array('kp', None)
        self.kd = self._joint_array('kd', None)
        if (self.kp is None) != (self.kd is None):
            raise ValueError('set both kp and kd (the MIT law) or neither (computed-torque feedback)')
        if self.kp is None:
            controller = ComputedTorque(robot.model, rate)
            self._control = controller.feedback_torque
        else:
            self._control = lambda q, dq, q_des, dq_des, tau_ff: mit_torque(q, dq, q_des, dq_des, tau_ff,
                                                                              self.kp, self.kd)
        q_init = self._joint_array('initial_positions', np.clip(self._model.qpos0, *robot.joint_range.T))
        self._noise = [(float(param(f'{ch}_noise').value), float(param(f'{ch}_resolution').value))
                       for ch in ('q', 'dq', 'tau')]
        if any(not (np.isfinite(v) and v >= 0) for pair in self._noise for v in pair):
            raise ValueError(f'noise and resolution parameters must be finite and >= 0, got {self._noise}')
        self._rng = np.random.default_rng(param('seed').value)

        self._data = mujoco.MjData(self._model)
        self._data.qpos[:] = q_init
        mujoco.mj_forward(self._model, self._data)
        # until a joint is commanded it holds the initial pose (the control law, no feed-forward)
        self._q_des, self._dq_des, self._tau_ff = q_init.copy(), np.zeros(n), np.zeros(n)
        self._commanded_at = np.full(n, -1, dtype=np.int64)  # sim time (ns) of the last command, -1: never
        self._timed_out = False

    def _joint_array(self, name, default) -> np.ndarray:
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:  # declared by type, no value given: use the default
            value = None
        if value is None or len(value) == 0:
            return None if default is None else np.array(default, dtype=float)
        arr = np.array(value, dtype=float)
        if arr.shape != (len(self.joint_names),) or not np.all(np.isfinite(arr)):
            raise ValueError(f'{name} must hold {len(self.joint_names)} finite values '
                             f'(one per joint {list(self.joint_names)}), got {list(value)}')
        return arr

    def _command_arrays(self, msg: JointState):
        """(joint indices, q_des, dq_des, tau_ff) of a command's known joints, or None if unusable.

        Empty velocity or effort mean zero; unknown joint names are ignored with a warning.
        """
        if self.error is not None:
            return None
        index = np.array([self._index.get(name, -1) for name in msg.name], dtype=int)
        count = index.size
        if len(msg.position) != count or len(msg.velocity) not in (0, count) or len(msg.effort) not in (0, count):
            self.get_logger().warning(
                'ignoring a joint command whose position (and non-empty velocity, effort) do not match its names',
                throttle_duration_sec=WARN_PERIOD_S)
            return None
        known = index >= 0
        if not known.all():
            self.get_logger().warning(
                f'ignoring unknown joints {[n for n, k in zip(msg.name, known) if not k]} in joint commands; '
                f'simulated joints are {list(self.joint_names)}', throttle_duration_sec=WARN_PERIOD_S)
        values = [np.asarray(v, dtype=float)[known] if len(v) else np.zeros(known.sum())
                  for v in (msg.position, msg.velocity, msg.effort)]
        if not all(np.all(np.isfinite(v)) for v in values):
            self.get_logger().warning('ignoring a joint command with NaN or infinite values',
                                      throttle_duration_sec=WARN_PERIOD_S)
            return None
        return (index[known], *values)

    def _fail(self, message: str):
        self.error = message
        self._waiting_since = None
        self.get_logger().error(message)
        if self._timer is not None:
            self._timer.cancel()

    # --- callbacks --------------------------------------------------------------------------

    def _on_watch(self):
        """Start once the subscribers are there; stop waiting for a commander that went silent."""
        if not self._started:
            if self._state_pub.get_subscription_count() < self._subscribers:
                return
            self._started = True
            self._wall_start = time.monotonic()
            self._timer.reset()
            if self._subscribers:
                self.get_logger().info(f'{self._subscribers} subscribers on {self._state_pub.topic_name}: '
                                       'simulation started')
        elif self._waiting_since is not None and time.monotonic() - self._waiting_since > COMMAND_WAIT_S:
            self._free_running = True
            self._waiting_since = None
            self._timer.reset()
            self.get_logger().warning(f'no new joint command for {COMMAND_WAIT_S:g} s (wall time): simulating '
                                      'on without waiting for one')

    def _ahead_of_commands(self) -> bool:
        """realtime false: whether the next period would run more than command_lead_s past the newest command."""
        return (self._lead_ns > 0 and self._last_command_ns is not None and not self._free_running
                and (self._periods + 1) * self._period_ns - self._last_command_ns > self._lead_ns)

    def _on_done(self, msg: Bool):
        # a transition, not a stale latched flag: a sim started after a finished run still runs
        finished = msg.data and self._done is False
        self._done = msg.data
        if finished:
            self._pause('the excitation is done')
        elif not msg.data:
            self._resume('a new run starts')

    def _pause(self, why: str):
        if self.paused or self._timer is None or self.error is not None:
            return
        self.paused = True
        self._waiting_since = None
        self._timer.cancel()
        self.get_logger().info(f'{why}: simulation paused at {self.sim_time:.3f} s (sim time) after publishing '
                               f'{self.published} joint states; it resumes when sysid/done turns false')

    def _resume(self, why: str):
        if not self.paused or self.error is not None:
            return
        self.paused = False
        if self._realtime:  # the paused wall time is not simulated afterwards
            self._wall_start = time.monotonic() - self._periods * self._period_ns * 1e-9
        self._timer.reset()
        self.get_logger().info(f'{why}: simulation resumed')

    def _on_command(self, msg: JointState):
        command = self._command_arrays(msg)
        if command is None:
            return
        joints, q_des, dq_des, tau_ff = command
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self._last_command_ns = stamp or self._periods * self._period_ns
        self._free_running = False
        if self._waiting_since is not None:
            self._waiting_since = None
            self._timer.reset()
        self._q_des[joints], self._dq_des[joints], self._tau_ff[joints] = q_des, dq_des, tau_ff
        self._commanded_at[joints] = self._periods * self._period_ns
        if self._timed_out:
            self._timed_out = False
            self.get_logger().info('joint commands resumed')

    def _on_fast_timer(self):
        for _ in range(self._steps_per_callback):
            if self._ahead_of_commands():  # the next command wakes the loop
                self._waiting_since = time.monotonic()
                self._timer.cancel()
                return
            if not self._advance():
                return

    def _on_wall_timer(self):
        due = int((time.monotonic() - self._wall_start) * 1e9) // self._period_ns + 1 - self._periods
        if due > max(MAX_CATCH_UP, 2 * self._steps_per_callback):
            self.get_logger().warning(f'{due} control periods late: dropping the lost time (the simulation '
                                      'runs slower than real time)', throttle_duration_sec=WARN_PERIOD_S)
            self._wall_start += (due - 1) * self._period_ns * 1e-9
            due = 1
        for _ in range(due):
            if not self._advance():
                return

    # --- one control period -----------------------------------------------------------------

    def _advance(self) -> bool:
        """Publish the state at the current sim time, then step one control period under its torque."""
        # ROS reads time 0 as "no time yet" (and drivers use a zero stamp for "unstamped"),
        # so the simulated clock starts one period in
        now_ns = (self._periods + 1) * self._period_ns
        q, dq = self._data.qpos, self._data.qvel
        q_des, dq_des, tau_ff = self._q_des, self._dq_des, self._tau_ff
        stale = (self._commanded_at >= 0) & (now_ns - self._commanded_at > self._timeout_ns)
        if stale.any():  # damping only: no position error, no velocity target, no feed-forward
            q_des, dq_des = np.where(stale, q, q_des), np.where(stale, 0.0, dq_des)
            tau_ff = np.where(stale, 0.0, tau_ff)
            if not self._timed_out:
                self._timed_out = True
                self.get_logger().warning(
                    f'no joint command for {self._timeout_ns * 1e-9:g} s (sim time): joints '
                    f'{[n for n, s in zip(self.joint_names, stale) if s]} switched to damping only')
        tau = self._control(q, dq, q_des, dq_des, tau_ff)
        self._publish(now_ns, q, dq, tau)
        try:
            with mujoco_warnings() as messages:
                step(self._model, self._data, tau, self._substeps)
        except DataError as exc:
            self._fail(f"{exc} (MuJoCo: {' '.join(messages) or 'bad state'}); simulation stopped, "
                       'node kept alive: check the gains, the feed-forward and the model')
            return False
        self._periods += 1
        return True

    def _publish(self, now_ns: int, q, dq, tau):
        stamp = _stamp(now_ns)
        self._clock_pub.publish(ClockMsg(clock=stamp))
        (q_std, q_res), (dq_std, dq_res), (tau_std, tau_res) = self._noise
        msg = JointState(name=list(self.joint_names),
                         position=measure(q, q_std, q_res, self._rng).tolist(),
                         velocity=measure(dq, dq_std, dq_res, self._rng).tolist(),
                         effort=measure(tau, tau_std, tau_res, self._rng).tolist())
        msg.header.stamp = stamp
        self._state_pub.publish(msg)
        self.published += 1


    def destroy_node(self):
        destroyed = super().destroy_node()
        # after destruction: the log then goes to the console only, not to a rosout publisher
        # whose context a Ctrl-C has already shut down
        if self._period_ns:
            self.get_logger().info(f'published {self.published} joint states over {self.sim_time:.3f} s (sim time)')
        return destroyed


def main(args=None):
    return spin_node(MujocoSim, args)


if __name__ == '__main__':
    main()
