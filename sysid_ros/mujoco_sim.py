"""MuJoCo stand-in for the real arm: joint drives in MIT mode, sensors with noise, a clock.

The node converts messages; the arm itself is ``sysid_core.simulation.simulated_arm.SimulatedArm``
(the control law, the command watchdog, the noise, the stepping; see its docstring). Every
control period the arm's state is published on ``joint_states`` (what the drives would report:
position, velocity, applied torque, with noise and quantisation) and the period is simulated
under the torque of the command in force. The law: with the ``kp`` and ``kd`` parameters set,
the MIT mode of the drives, tau = kp (q_des - q) + kd (dq_des - dq) + tau_ff; without them
(the default) computed-torque feedback around the feed-forward, stable on any arm. A joint
whose command is older than ``command_timeout_s`` (sim time) gets damping only, as the Damiao
bridge does; before its first command a joint holds the initial pose.

Commands:

- ``sysid/joint_command`` (sensor_msgs/JointState): q_des, dq_des, feed-forward tau_ff for the
  named joints (partial commands allowed), held until the next one. A NaN position is no
  position target, as on the Damiao bridge: the joint gets no position term (kp 0 in MIT mode,
  no position feedback under computed torque) and is driven by its velocity target (kd) and
  feed-forward alone, so a gravity-compensated arm floats; velocity and effort must be finite
  and no position infinite, or the message is ignored.
- ``sysid/joint_trajectory`` (trajectory_msgs/JointTrajectory): a plan sent ahead, every joint,
  positions, velocities, accelerations and effort (the feed-forward) per point, times from
  ``header.stamp`` on the simulated clock (0: from receipt). Each period samples it as a
  joint_trajectory_controller does (quintic between points; ``sysid_core.excitation.preview``);
  after its last point the arm holds that point. A joint command ends it.

A commander that knows its plan (trajectory_publisher) sends it once instead of a command per
period: the simulation then needs no message per period from it.

The simulated arm is the model file as a real arm behaves (``sysid_core.simulation.plant_model``):
its own actuators and contacts off, no gravcomp, the MuJoCo timestep chosen for ``rate_hz``.

realtime: true steps on a wall timer at ``rate_hz`` / ``steps_per_callback`` (catching up a
few late periods). realtime: false steps as fast as the executor allows, ``steps_per_callback``
periods per call of a zero-period timer; between calls the executor serves every other ready
entity, so services, parameters and the other nodes of the process stay responsive. ``/clock``
is published in both modes, so nodes with ``use_sim_time`` follow the simulation. In both modes it
never runs more than ``command_lead_s`` (sim time) ahead of the newest command stamped on that
clock (a preview counts up to its last point), nor, before the first command, ahead of its
start: a commander in another process, following the clock, then starts where the simulation
does and keeps up instead of being left behind when the machine is loaded; in real time the
wall time spent waiting is not simulated afterwards. After a second (wall time) without a new
command it simulates on regardless (damping only, as on a timeout): a simulation without a
commander starts a second late. A commander stamping wall time is never waited for.

State blocks (``state_blocks: true``): the samples of each call go out together as one
std_msgs/Float64MultiArray on ``sysid/joint_state_block`` (the identifier's ``state_blocks``
records them), ``joint_states`` carries only the last sample of each block (a live view for
commanders and displays) and ``/clock`` is published once per block, at that sample. A message
per sample costs tens of microseconds in rclpy, several times MuJoCo's own step: blocks are what
lets a simulation run many times faster than real time. Block layout: ``layout.dim[0]`` label
"samples", size m; ``layout.dim[1]`` label the joint names joined by commas, size 1 + 3n (1 + 4n
with elastic transmissions); row i = [stamp (ns of the simulated clock, exact in a double up to
104 days), position (n) rad, velocity (n) rad/s, effort (n) N m (, motor-side position (n) rad)]. Without blocks every sample is a JointState and a /clock
message. rclpy's default executor takes one message per subscription per wait round, so
``steps_per_callback`` > 1 without blocks runs ahead of in-process subscribers (they drop samples
once their queues are full); the events executor (``sysid-sim-identify``) takes them all.

Start: with ``wait_for_subscribers`` > 0 nothing is simulated or published until
``joint_states`` (and ``sysid/joint_state_block`` with state blocks) has that many subscribers
(matched, counted together), so a recorder that starts slowly still gets the first sample. Idle: when ``sysid/done`` turns true (the trajectory_publisher finished its
excitation and holds the arm at rest) the simulation pauses, in both modes: no stepping, no
``joint_states``, no ``/clock``, no CPU. It resumes when ``sysid/done`` turns false
(``sysid/start`` or ``sysid/stop`` of the trajectory_publisher). Commands still in flight when
the flag arrives are taken as usual; a node that commands the arm without publishing
``sysid/done`` never pauses it. ``published`` counts the samples sent (JointStates, or rows of
blocks); it is logged at each pause and at shutdown, to compare with what the recorders received.

Names are relative (``joint_states``, ``sysid/joint_command``, ``sysid/joint_trajectory``,
``sysid/joint_state_block``, ``sysid/done``) except ``/clock``, which ROS reads from the root:
under a namespace, remap it (``-r /clock:=clock`` for this node and every node following its
time) so two simulations do not share one clock.

Elastic transmissions (``transmission_stiffness`` N m/rad per joint, ``transmission_damping``
N m s/rad per joint, ``rotor_inertia`` kg m^2 per joint or empty for the model's armature): each
joint driven through a spring and a damper from a rotor of its own
(``sysid_core.simulation.elastic``), in MIT mode on the motor side (``kp``/``kd``, or gains of an
8 Hz loop when not given). ``motor_states`` (sensor_msgs/JointState, position only, stamped as
the ``joint_states`` sample it goes with) then carries the motor-side encoders, as a
double-encoder arm reports them; with state blocks each row carries them too (below). What a real
gearbox adds and no rigid model knows (``sysid_core.simulation.elastic.Gearbox``):
``gearbox_load_friction`` (friction as a fraction of the transmitted torque), ``gearbox_ripple``
(N m per joint, a cogging ripple of ``gearbox_ripple_per_rad`` periods per radian of the rotor).

rate_hz: when the model's timestep does not divide the control period, the plant integrates
with the largest timestep that does (``sysid_core.simulation.simulation_timing``; logged).
"""
import time

from builtin_interfaces.msg import Time
import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, MultiArrayDimension, MultiArrayLayout
from trajectory_msgs.msg import JointTrajectory

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import SysidError
from sysid_core.excitation.preview import Preview
from sysid_core.simulation import MeasurementNoise, default_gains
from sysid_core.simulation.elastic import Gearbox, Transmission, elastic_plant
from sysid_core.simulation.simulated_arm import SimulatedArm
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
# the MIT loop of an elastic arm when no gains are given: slow enough for any transmission
ELASTIC_BANDWIDTH_HZ = 8.0


def _stamp(nanoseconds: int) -> Time:
    sec, nanosec = divmod(int(nanoseconds), 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


def _nanoseconds(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class MujocoSim(Node):
    """Simulated arm. Public for tests: ``published`` (samples sent so far), ``late_periods`` (real
    time: periods simulated more than steps_per_callback periods after they were due, or given up),
    ``sim_time`` (s),
    ``joint_names``, ``kp``/``kd`` (n,) of the MIT law (None under computed torque), ``arm``
    (the SimulatedArm), ``error`` (None while healthy)."""

    def __init__(self, **kwargs):
        super().__init__('mujoco_sim', **kwargs)
        self.declare_parameter('model', '')
        self.declare_parameter('rate_hz', 1000.0)
        self.declare_parameter('realtime', True)
        self.declare_parameter('steps_per_callback', 1)
        self.declare_parameter('state_blocks', False)
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
        self.declare_parameter('transmission_stiffness', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('transmission_damping', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('rotor_inertia', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('gearbox_load_friction', 0.0)
        self.declare_parameter('gearbox_ripple', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('gearbox_ripple_per_rad', 8.0)

        self.published = 0
        self.late_periods = 0  # real time: periods simulated (or given up) later than one callback after due
        self.error = None
        self.arm = None
        self.joint_names = ()
        self._timer = None
        self.paused = False
        self._done = None  # the last sysid/done seen; None: none yet
        self._last_command_ns = None  # sim time (ns) of the newest command: its stamp, else its arrival
        self._waiting_since = None  # wall time the fast loop began to wait for a command
        self._free_running = False  # the commander went silent: do not wait for it
        self._timed_out = False
        self._realign = False  # real time: the next wall timer call puts the due times on its schedule
        self._state_pub = self.create_publisher(JointState, 'joint_states', QoSProfile(depth=STATE_DEPTH))
        self._clock_pub = self.create_publisher(ClockMsg, '/clock', QoSProfile(depth=10))
        self._block_pub = None
        self._motor_pub = None
        self.create_subscription(JointState, 'sysid/joint_command', self._on_command, QoSProfile(depth=10))
        self.create_subscription(JointTrajectory, 'sysid/joint_trajectory', self._on_trajectory, QoSProfile(depth=1))
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
        if self.arm.elastic is not None:
            self._motor_pub = self.create_publisher(JointState, 'motor_states', QoSProfile(depth=STATE_DEPTH))
        if self.get_parameter('state_blocks').value:
            self._block_pub = self.create_publisher(Float64MultiArray, 'sysid/joint_state_block',
                                                    QoSProfile(depth=STATE_DEPTH))
        # a steady clock: wall time paces the simulation even if use_sim_time is set by mistake
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        if self._realtime:
            self._timer = self.create_timer(self.arm.period_ns * self._steps_per_callback * 1e-9,
                                            self._on_wall_timer, clock=steady)
        else:
            self._timer = self.create_timer(0.0, self._on_fast_timer, clock=steady)
        self._timer.cancel()
        self._started = False
        self.create_timer(WATCH_PERIOD_S, self._on_watch, clock=steady)
        self._on_watch()
        self.get_logger().info(
            f"simulating {self._model_path} ({len(self.joint_names)} joints) at {1e9 / self.arm.period_ns:g} Hz, "
            f"{'MIT law' if self.kp is not None else 'computed-torque feedback'}"
            f"{' on the motor side of elastic transmissions' if self.arm.elastic is not None else ''}, "
            f"{'real time' if self._realtime else 'as fast as possible'}"
            f"{', state blocks on ' + self._block_pub.topic_name if self._block_pub else ''}; "
            f"{self.arm.timing.describe()}"
            + (f"; starts when it has {self._subscribers} subscribers" if not self._started else ""))

    @property
    def sim_time(self) -> float:
        return 0.0 if self.arm is None else self.arm.sim_time

    @property
    def kp(self):
        return None if self.arm is None else self.arm.kp

    @property
    def kd(self):
        return None if self.arm is None else self.arm.kd

    def _setup(self):
        """Build the simulated arm from the parameters; raises on bad input."""
        param = self.get_parameter
        self._model_path = param('model').value
        if not self._model_path:
            raise ValueError("parameter 'model' (path of the MJCF file to simulate) is empty")
        robot = load_robot(self._model_path)
        self.joint_names = robot.joint_names
        self._index = {name: j for j, name in enumerate(self.joint_names)}
        self._steps_per_callback = int(param('steps_per_callback').value)
        if self._steps_per_callback < 1:
            raise ValueError(f'steps_per_callback must be >= 1, got {self._steps_per_callback}')
        noise = [float(param(f'{ch}').value) for ch in ('q_noise', 'dq_noise', 'tau_noise', 'q_resolution',
                                                         'dq_resolution', 'tau_resolution')]
        if any(not (np.isfinite(v) and v >= 0) for v in noise):
            raise ValueError(f'noise and resolution parameters must be finite and >= 0, got {noise}')
        rate = float(param('rate_hz').value)
        kp, kd = self._joint_array('kp'), self._joint_array('kd')
        stiffness = self._joint_array('transmission_stiffness')
        elastic, gearbox = None, None
        load_friction, ripple = float(param('gearbox_load_friction').value), self._joint_array('gearbox_ripple')
        if load_friction or ripple is not None:
            gearbox = Gearbox(load_friction, 0.0 if ripple is None else ripple,
                              float(param('gearbox_ripple_per_rad').value))
        if stiffness is not None:
            damping = self._joint_array('transmission_damping')
            transmission = Transmission(stiffness, np.zeros_like(stiffness) if damping is None else damping,
                                        self._joint_array('rotor_inertia'))
            if kp is None and kd is None:
                kp, kd = default_gains(robot.model, ELASTIC_BANDWIDTH_HZ)
            elastic = elastic_plant(self._model_path, transmission, rate, (kp, kd))
        elif (self._joint_array('transmission_damping') is not None or self._joint_array('rotor_inertia') is not None
              or gearbox is not None):
            raise ValueError('transmission_damping, rotor_inertia and the gearbox parameters need '
                             'transmission_stiffness (an elastic transmission)')
        self.arm = SimulatedArm(
            robot.model, robot.joint_range, rate, kp=kp, kd=kd, noise=MeasurementNoise(*noise),
            seed=param('seed').value, initial_positions=self._joint_array('initial_positions'),
            command_timeout_s=float(param('command_timeout_s').value), elastic=elastic, gearbox=gearbox)

    def _joint_array(self, name) -> np.ndarray | None:
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:  # declared by type, no value given
            value = None
        if value is None or len(value) == 0:
            return None
        arr = np.array(value, dtype=float)
        if arr.shape != (len(self.joint_names),) or not np.all(np.isfinite(arr)):
            raise ValueError(f'{name} must hold {len(self.joint_names)} finite values '
                             f'(one per joint {list(self.joint_names)}), got {list(value)}')
        return arr

    def _command_arrays(self, msg: JointState):
        """(joint indices, q_des, dq_des, tau_ff) of a command's known joints, or None if unusable.

        Empty velocity or effort mean zero; unknown joint names are ignored with a warning; a
        NaN position is kept (no position target).
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
        # a NaN position is a joint without a position target; anything else must be finite
        if np.any(np.isinf(values[0])) or not all(np.all(np.isfinite(v)) for v in values[1:]):
            self.get_logger().warning('ignoring a joint command with an infinite position, or a NaN or infinite '
                                      'velocity or effort (a NaN position means no position target)',
                                      throttle_duration_sec=WARN_PERIOD_S)
            return None
        return (index[known], *values)

    def _preview(self, msg: JointTrajectory) -> Preview:
        """The plan of a JointTrajectory in model joint order; raises ValueError when unusable."""
        names = list(msg.joint_names)
        if sorted(names) != sorted(self.joint_names):
            raise ValueError(f'it names joints {names}, not each simulated joint once {list(self.joint_names)}')
        if not msg.points:
            raise ValueError('it has no points')
        order = np.array([names.index(name) for name in self.joint_names])
        n = len(names)
        fields = {}
        for field in ('positions', 'velocities', 'accelerations', 'effort'):
            lengths = {len(getattr(p, field)) for p in msg.points}
            if lengths - {0, n} or (field == 'positions' and lengths != {n}) or len(lengths) > 1:
                raise ValueError(f'its points must all carry {n} {field}'
                                 + ('' if field == 'positions' else ' or all none'))
            fields[field] = (np.array([getattr(p, field) for p in msg.points], dtype=float)[:, order]
                             if lengths == {n} else np.zeros((len(msg.points), n)))
        time_s = np.array([p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec for p in msg.points])
        return Preview(time=time_s, q=fields['positions'], dq=fields['velocities'], ddq=fields['accelerations'],
                       effort=fields['effort'])

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
            listening = self._state_pub.get_subscription_count() + (
                self._block_pub.get_subscription_count() if self._block_pub is not None else 0)
            if listening < self._subscribers:
                return
            self._started = True
            self._timer.reset()
            self._align_to_timer(0)
            if self._subscribers:
                self.get_logger().info(f'{listening} subscribers on {self._state_pub.topic_name}'
                                       + (f' and {self._block_pub.topic_name}' if self._block_pub else '')
                                       + ': simulation started')
        elif self._waiting_since is not None and time.monotonic() - self._waiting_since > COMMAND_WAIT_S:
            self._free_running = True
            self._waiting_since = None
            if not self._realtime:
                self._timer.reset()
            self.get_logger().warning(f'no new joint command for {COMMAND_WAIT_S:g} s (wall time): simulating '
                                      'on without waiting for one')

    def _periods_allowed(self, wanted: int) -> int:
        """How many of ``wanted`` periods may run without passing command_lead_s beyond the newest
        command, or the start before any (its stamp on the simulated clock; a commander stamping
        wall time is never overtaken)."""
        if self._lead_ns <= 0 or self._free_running:
            return wanted
        # before the first command, the start stands for it: a commander that starts on the
        # first joint_states finds the simulation where it began, not seconds ahead
        newest = 0 if self._last_command_ns is None else self._last_command_ns
        return max(0, min(wanted, (newest + self._lead_ns) // self.arm.period_ns - self.arm.periods))

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
                               f'{self.published} joint states{self._lateness()}; it resumes when sysid/done '
                               'turns false')

    def _resume(self, why: str):
        if not self.paused or self.error is not None:
            return
        self.paused = False
        self._timer.reset()
        if self._realtime:  # the paused wall time is not simulated afterwards
            self._align_to_timer(self.arm.periods)
        self.get_logger().info(f'{why}: simulation resumed')

    def _commanded(self, newest_ns: int):
        """A command arrived, the newest at ``newest_ns`` (sim time): stop waiting for one."""
        # real time: a simulation held back by its commander (waiting, or about to) goes on at
        # the timer's next call as if on schedule: the wait, taking this command included, is
        # not lateness
        if self._realtime and self._started and not self.paused and self._held():
            self._realign = True
        self._last_command_ns = newest_ns
        self._free_running = False
        if self._waiting_since is not None:
            self._waiting_since = None
            if not self._realtime:  # the fast loop waits cancelled; the wall timer keeps ticking
                self._timer.reset()
        if self._timed_out:
            self._timed_out = False
            self.get_logger().info('joint commands resumed')

    def _on_command(self, msg: JointState):
        command = self._command_arrays(msg)
        if command is None:
            return
        self.arm.command(*command)
        self._commanded(_nanoseconds(msg.header.stamp) or self.arm.periods * self.arm.period_ns)

    def _on_trajectory(self, msg: JointTrajectory):
        if self.error is not None:
            return
        try:
            preview = self._preview(msg)
        except ValueError as exc:
            self.get_logger().warning(f'ignoring a joint trajectory: {exc}', throttle_duration_sec=WARN_PERIOD_S)
            return
        self.arm.follow(preview, _nanoseconds(msg.header.stamp) or self.arm.periods * self.arm.period_ns)
        self._commanded(self.arm.preview_end_ns)

    def _on_fast_timer(self):
        count = self._periods_allowed(self._steps_per_callback)
        if count == 0:  # the next command wakes the loop
            self._waiting_since = time.monotonic()
            self._timer.cancel()
            return
        self._simulate(count)

    def _due(self) -> int:
        """Real time: the periods due by now and not simulated yet."""
        return int((time.monotonic() - self._wall_start) / (self.arm.period_ns * 1e-9)) + 1 - self.arm.periods

    def _held(self) -> bool:
        """Real time: periods are due that the commander does not allow yet."""
        due = self._due()
        return self._periods_allowed(due) < due

    def _on_wall_timer(self):
        period_s = self.arm.period_ns * 1e-9
        if self._realign:
            self._realign = False
            self._align_to_timer(self.arm.periods)
        due = self._due()
        # a callback simulates the periods due since the last one: those due earlier than
        # steps_per_callback periods ago are late, and those given up below never come (the
        # time spent waiting for a commander is neither: it is not simulated at all)
        late = max(0, due - self._steps_per_callback)
        if due > max(MAX_CATCH_UP, 2 * self._steps_per_callback):
            self.get_logger().warning(f'{due} control periods late: dropping the lost time (the simulation '
                                      'runs slower than real time)', throttle_duration_sec=WARN_PERIOD_S)
            self._wall_start += (due - 1) * period_s
            due = 1
        allowed = self._periods_allowed(due)
        if allowed == due:
            self.late_periods += late
        else:
            # in step with a commander on the simulated clock, as when not in real time: the
            # wall time spent waiting for it is not simulated afterwards (no burst on commands
            # already overtaken)
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
            self._align_to_timer(self.arm.periods + allowed)
        if allowed > 0:
            self._simulate(allowed)

    def _align_to_timer(self, periods: int):
        """Real time: put the due times of period ``periods`` and of those after it (a period
        apart) on the wall timer's schedule, the last of the steps_per_callback periods the timer's
        next call simulates due at that call. A call on schedule then finds exactly those due, and
        a period is late only when its call comes a whole period or more behind schedule. (Measured
        from the moment of a call instead, every later call would carry that call's wake-up delay
        in its phase: tens of microseconds of ordinary jitter would count as late periods.)"""
        next_call_s = 1e-9 * (self._timer.time_until_next_call() or 0)
        self._wall_start = (time.monotonic() + next_call_s
                            - (periods + self._steps_per_callback - 1) * self.arm.period_ns * 1e-9)

    # --- publishing -------------------------------------------------------------------------

    def _simulate(self, count: int):
        """Simulate ``count`` periods and publish their samples."""
        block = self.arm.advance(count)
        if len(block):
            self._publish(block)
        if self.arm.stale.any() and not self._timed_out:
            self._timed_out = True
            self.get_logger().warning(
                f'no joint command for {self.get_parameter("command_timeout_s").value:g} s (sim time): joints '
                f'{[n for n, s in zip(self.joint_names, self.arm.stale) if s]} switched to damping only')
        if self.arm.error is not None:
            self._fail(f'{self.arm.error}; simulation stopped, node kept alive: check the gains, the feed-forward '
                       'and the model')

    def _publish(self, block):
        names = list(self.joint_names)
        if self._block_pub is not None:
            rows = np.column_stack((block.stamp_ns.astype(float), block.q, block.dq, block.tau)
                                   + (() if block.motor_q is None else (block.motor_q,)))
            self._block_pub.publish(Float64MultiArray(layout=MultiArrayLayout(dim=[
                MultiArrayDimension(label='samples', size=rows.shape[0], stride=rows.size),
                MultiArrayDimension(label=','.join(names), size=rows.shape[1], stride=rows.shape[1])]),
                data=rows.ravel()))
            last = (len(block) - 1,)
        else:
            last = range(len(block))
        for k in last:
            stamp = _stamp(block.stamp_ns[k])
            self._clock_pub.publish(ClockMsg(clock=stamp))
            msg = JointState(name=names, position=block.q[k].tolist(), velocity=block.dq[k].tolist(),
                             effort=block.tau[k].tolist())
            msg.header.stamp = stamp
            self._state_pub.publish(msg)
            if self._motor_pub is not None:
                motor = JointState(name=names, position=block.motor_q[k].tolist())
                motor.header.stamp = stamp
                self._motor_pub.publish(motor)
        self.published += len(block)

    def _lateness(self) -> str:
        if not self._realtime:
            return ''
        return f', {self.late_periods} of {self.arm.periods} periods late'

    def destroy_node(self):
        destroyed = super().destroy_node()
        # after destruction: the log then goes to the console only, not to a rosout publisher
        # whose context a Ctrl-C has already shut down
        if self.arm is not None:
            self.get_logger().info(f'published {self.published} joint states over {self.sim_time:.3f} s (sim time)'
                                   f'{self._lateness()}')
        return destroyed


def main(args=None):
    return spin_node(MujocoSim, args)


if __name__ == '__main__':
    main()
