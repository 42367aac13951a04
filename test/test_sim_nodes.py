"""mujoco_sim and trajectory_publisher as real rclpy nodes, in one executor in this process.

No mocks: the nodes talk over DDS (the domain conftest.py isolates). Every wait has a wall-time
limit; the fast simulation's sim time bounds each scenario to a few seconds.
"""
import itertools
import time
from pathlib import Path

from builtin_interfaces.msg import Time
import mujoco
import numpy as np
import pytest
from rcl_interfaces.srv import GetParameters
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float32, Float64MultiArray
from std_srvs.srv import Trigger
from builtin_interfaces.msg import Duration
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from arm_corpus import arm
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import multisine
from sysid_core.simulation import ComputedTorque, default_gains
from sysid_ros.mujoco_sim import MujocoSim
from sysid_ros.trajectory_publisher import TrajectoryPublisher

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
OPENARM = str(ROBOTS / "openarm_class.xml")
BIG_QUEUE = QoSProfile(depth=20000)  # a recorder never drops a sample
# how long a wait may take before the test fails: a guard against hangs, not a speed target (a
# machine loaded by two CPU-bound processes ran one scenario at a quarter of real time)
WAIT_S = 120.0
_names = itertools.count()


def _seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


@pytest.fixture(scope="module")
def openarm():
    return load_robot(OPENARM)


class Recorder(Node):
    """Keeps every message of the topics the nodes under test publish."""

    def __init__(self, context):
        super().__init__(f"recorder_{next(_names)}", context=context)
        self.states, self.commands, self.progress, self.done, self.clock = [], [], [], [], []
        self.previews = []
        self.create_subscription(JointState, "joint_states", self._on_state, BIG_QUEUE)
        self.create_subscription(JointTrajectory, "sysid/joint_trajectory", self.previews.append, BIG_QUEUE)
        self.create_subscription(JointState, "sysid/joint_command", self._on_command, BIG_QUEUE)
        self.create_subscription(Float32, "sysid/progress", lambda m: self.progress.append(m.data), BIG_QUEUE)
        self.create_subscription(Bool, "sysid/done", lambda m: self.done.append(m.data),
                                 QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.create_subscription(Clock, "/clock", lambda m: self.clock.append(_seconds(m.clock)), BIG_QUEUE)

    def _on_state(self, msg):
        self.states.append((_seconds(msg.header.stamp), np.array(msg.position), np.array(msg.velocity),
                            np.array(msg.effort)))

    def _on_command(self, msg):
        self.commands.append((_seconds(msg.header.stamp), np.array(msg.position), np.array(msg.velocity),
                              np.array(msg.effort)))

    @staticmethod
    def arrays(samples):
        """(time (N,), position, velocity, effort (N, n)) of recorded JointStates."""
        return tuple(np.array([s[k] for s in samples]) for k in range(4))


class Harness:
    """One executor for every node of a test; waits are bounded in wall time."""

    def __init__(self, context):
        self.context = context
        self.executor = SingleThreadedExecutor(context=context)
        self.nodes = []

    def add(self, node):
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def spin_until(self, condition, timeout: float = WAIT_S) -> bool:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                return False
            self.executor.spin_once(timeout_sec=0.01)
        return True

    @staticmethod
    def wait_matched(endpoint, count: int = 1, timeout: float = WAIT_S):
        """Block until DDS discovery matched ``count`` peers (samples sent before are lost)."""
        deadline = time.monotonic() + timeout
        counter = getattr(endpoint, "get_subscription_count", None) or endpoint.get_publisher_count
        while counter() < count:
            assert time.monotonic() < deadline, f"{endpoint.topic_name}: {counter()} of {count} peers matched"
            time.sleep(0.01)

    def call(self, node, service: str, timeout: float = WAIT_S):
        client = node.create_client(Trigger, service)
        assert client.wait_for_service(timeout_sec=timeout), f"{service} not available"
        future = client.call_async(Trigger.Request())
        assert self.spin_until(future.done, timeout), f"{service} did not answer"
        node.destroy_client(client)
        return future.result()

    def close(self):
        self.executor.shutdown(timeout_sec=1.0)
        for node in self.nodes:
            node.destroy_node()


@pytest.fixture
def harness(context):
    h = Harness(context)
    yield h
    h.close()


def _sim(harness, **params):
    params = {"model": OPENARM, "realtime": False, **params}
    return harness.add(MujocoSim(context=harness.context,
                                 parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))


def _publisher(harness, **params):
    params = {"model": OPENARM, "use_sim_time": True, **params}
    return harness.add(TrajectoryPublisher(context=harness.context,
                                           parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))


def test_fast_sim_publishes_clock_and_every_state(harness):
    # a lean listener: every entity in the executor costs time in each of its wait rounds
    listener = harness.add(Node(f"listener_{next(_names)}", context=harness.context,
                                start_parameter_services=False))
    states, clock, ticks = [], [], []
    listener.create_subscription(JointState, "joint_states", lambda m: states.append(_seconds(m.header.stamp)),
                                 BIG_QUEUE)
    listener.create_subscription(Clock, "/clock", lambda m: clock.append(_seconds(m.clock)), BIG_QUEUE)
    sim = _sim(harness)
    # a wall timer sharing the executor notes how far the simulation had got at each tick
    listener.create_timer(0.02, lambda: ticks.append(sim.published))
    harness.wait_matched(sim._state_pub)
    harness.wait_matched(sim._clock_pub)

    harness.spin_until(lambda: False, timeout=2.0)
    harness.executor.remove_node(sim)  # stop stepping, then let the listener drain its queues
    assert harness.spin_until(lambda: len(states) >= sim.published and len(clock) >= sim.published)

    # how much faster than real time is a figure of the machine: bench/simulation_speed.py prints it
    assert sim.published > 0 and len(states) == sim.published == len(clock)
    np.testing.assert_allclose(np.diff(states), 1e-3, atol=1e-9)  # every sample, in order
    np.testing.assert_allclose(clock, states, atol=1e-9)
    # the zero-period timer leaves the executor to everyone else: a starved timer would tick
    # once or never while the simulation runs; served, it ticks between its steps, on any machine
    during = [count for count in ticks if 0 < count < sim.published]
    assert len(set(during)) >= 3


def test_state_blocks_carry_every_sample_and_joint_states_a_view(harness):
    listener = harness.add(Node(f"listener_{next(_names)}", context=harness.context,
                                start_parameter_services=False))
    blocks, states, clock = [], [], []
    listener.create_subscription(Float64MultiArray, "sysid/joint_state_block", blocks.append, BIG_QUEUE)
    listener.create_subscription(JointState, "joint_states", states.append, BIG_QUEUE)
    listener.create_subscription(Clock, "/clock", lambda m: clock.append(_seconds(m.clock)), BIG_QUEUE)
    sim = _sim(harness, state_blocks=True, steps_per_callback=20, wait_for_subscribers=2)
    harness.wait_matched(sim._clock_pub)
    harness.spin_until(lambda: sim.published >= 2000)
    harness.executor.remove_node(sim)
    assert harness.spin_until(lambda: sum(len(b.data) for b in blocks) >= sim.published * 22
                              and len(states) >= len(blocks) and len(clock) >= len(blocks))

    n = len(sim.joint_names)
    assert all(b.layout.dim[0].label == "samples" and b.layout.dim[1].label == ",".join(sim.joint_names)
               and b.layout.dim[1].size == 1 + 3 * n for b in blocks)
    rows = np.concatenate([np.asarray(b.data).reshape(b.layout.dim[0].size, 1 + 3 * n) for b in blocks])
    # every sample, in order, one period apart, stamps exact in ns
    assert rows.shape[0] == sim.published
    np.testing.assert_array_equal(np.diff(rows[:, 0]), 1e6)
    assert rows[0, 0] == 1e6
    # joint_states and the clock: one per block, its last sample
    last = np.cumsum([b.layout.dim[0].size for b in blocks]) - 1
    assert len(states) == len(blocks) == len(clock)
    np.testing.assert_array_equal([m.header.stamp.sec * 10 ** 9 + m.header.stamp.nanosec for m in states],
                                  rows[last, 0])
    np.testing.assert_array_equal([m.position for m in states], rows[last, 1:1 + n])
    np.testing.assert_array_equal([m.effort for m in states], rows[last, 1 + 2 * n:])
    np.testing.assert_allclose(clock, rows[last, 0] * 1e-9, atol=1e-12)


@pytest.mark.parametrize("change, reason", [
    (lambda m: m.joint_names.pop(), "not each simulated joint once"),
    (lambda m: setattr(m.points[1], "time_from_start", m.points[0].time_from_start), "increase strictly"),
    (lambda m: m.points[0].positions.__setitem__(0, float("nan")), "NaN"),
    (lambda m: setattr(m.points[0], "velocities", [0.0]), "velocities"),
    (lambda m: setattr(m, "points", []), "no points"),
])
def test_an_unusable_joint_trajectory_is_ignored_and_said_so(harness, capfd, change, reason):
    sim = _sim(harness, realtime=True)
    n = len(sim.joint_names)
    msg = JointTrajectory(joint_names=list(sim.joint_names), points=[
        JointTrajectoryPoint(positions=[0.1] * n, time_from_start=Duration(sec=0, nanosec=0)),
        JointTrajectoryPoint(positions=[0.2] * n, time_from_start=Duration(sec=1, nanosec=0))])
    change(msg)
    sim._on_trajectory(msg)
    assert sim.arm.preview_end_ns is None and sim.error is None
    assert reason in capfd.readouterr().err


class FakeMonotonic:
    """Stands in for time.monotonic in mujoco_sim: the test decides when wall time passes."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _on_schedule(sim, wall, period):
    """The wall timer's schedule on the fake clock, a call every period from now on, and the
    simulator's periods due on it (as when the simulation starts)."""
    start = wall.now
    sim._timer.time_until_next_call = lambda: round(1e9 * ((start - wall.now) % period or period))
    sim._align_to_timer(0)


def test_realtime_sim_follows_the_wall_clock(context, monkeypatch):
    wall = FakeMonotonic()
    monkeypatch.setattr("sysid_ros.mujoco_sim.time.monotonic", wall)
    # not spun by an executor: each call of the wall timer's callback is one of its ticks
    # no commander: nothing to wait for (command_lead_s 0)
    sim = MujocoSim(context=context, parameter_overrides=[Parameter("model", value=OPENARM),
                                                          Parameter("command_lead_s", value=0.0)])
    try:
        assert sim.error is None and sim.sim_time == 0.0
        period = 1e-3  # the default rate_hz, 1 kHz
        _on_schedule(sim, wall, period)
        wall.now += period
        sim._on_wall_timer()  # the state at the start is published, then the first period is stepped
        assert sim.published == 1 and sim.sim_time == pytest.approx(period)
        sim._on_wall_timer()  # no wall time passed: nothing to do
        assert sim.published == 1
        wall.now += 7.5 * period  # a late tick catches up every period that began meanwhile
        sim._on_wall_timer()
        assert sim.published == 8 and sim.sim_time == pytest.approx(8 * period)
        assert sim.late_periods == 6  # simulated more than one tick after they were due
        for _ in range(50):  # on time: one period per tick, never ahead of the wall clock
            wall.now += period
            sim._on_wall_timer()
            assert sim.sim_time - (wall.now - 1000.0) <= 1e-12
        assert sim.published == 58
        for _ in range(10):  # ticks less than a period behind their schedule: none late
            wall.now += 1.4 * period
            sim._on_wall_timer()
            wall.now += 0.6 * period
            sim._on_wall_timer()
        assert sim.published == 78 and sim.late_periods == 6
        # a stall longer than MAX_CATCH_UP periods: the lost time is dropped, not simulated in a burst
        wall.now += 5.0
        sim._on_wall_timer()
        assert sim.published == 79
        wall.now += 3 * period  # and from there the simulation follows the wall clock again
        sim._on_wall_timer()
        assert sim.published == 82
    finally:
        sim.destroy_node()


def test_realtime_sim_waiting_for_its_commander_is_never_late(context, monkeypatch):
    wall = FakeMonotonic()
    monkeypatch.setattr("sysid_ros.mujoco_sim.time.monotonic", wall)
    sim = MujocoSim(context=context, parameter_overrides=[Parameter("model", value=OPENARM)])
    try:
        period, lead = 1e-3, 5  # 1 kHz, command_lead_s 5 ms by default
        _on_schedule(sim, wall, period)
        for _ in range(lead + 3):  # up to the lead past the start, then held: no command yet
            wall.now += period
            sim._on_wall_timer()
        assert sim.published == lead and sim.late_periods == 0
        # the first command arrives 30 ms later, the time the commander took to plan and the
        # simulator to take its message: a wait, not lateness
        wall.now += 0.030
        sim._on_command(JointState(name=list(sim.joint_names), position=[0.0] * len(sim.joint_names)))
        wall.now += 0.2 * period
        sim._on_wall_timer()  # the wait ends here: the periods are due on the timer's schedule from now on
        assert sim.published == lead and sim.late_periods == 0
        for _ in range(3):
            wall.now += period
            sim._on_wall_timer()
        assert sim.published == lead + 3 and sim.late_periods == 0
    finally:
        sim.destroy_node()


@pytest.mark.parametrize("preview", [True, False])
def test_excitation_is_played_and_tracked(harness, openarm, preview):
    duration, rate = 3.0, 500.0
    # start the arm where the excitation starts: the approach is then its 1 s minimum
    q_start = multisine(openarm.joint_range, duration, rate, seed=0, max_velocity=1.0).q[0]
    rec = harness.add(Recorder(harness.context))
    sim = _sim(harness, initial_positions=q_start.tolist())
    pub = _publisher(harness, duration=duration, rate_hz=rate, seed=0, preview=preview)
    harness.wait_matched(sim._state_pub, 2)
    harness.wait_matched(pub._command_pub, 2)
    harness.wait_matched(sim._clock_pub, 2)
    if preview:
        harness.wait_matched(pub._preview_pub, 2)

    assert harness.spin_until(lambda: rec.done[-1:] == [True]), \
        f"not done: sim time {sim.sim_time:.2f} s, progress {rec.progress[-1:]}"
    harness.executor.remove_node(sim)
    harness.spin_until(lambda: len(rec.states) >= sim.published)

    assert rec.done == [False, True]
    assert rec.progress[-1] == 1.0 and np.all(np.diff(rec.progress) > 0)
    assert pub.profile.time[-1] == pytest.approx(duration + 2.0, abs=0.01)  # 1 s approach, two 0.5 s ramps
    assert len(rec.states) == sim.published
    t, q, dq, _ = Recorder.arrays(rec.states)

    if preview:
        # the run went out once, ahead: knots that are profile samples with their inverse-dynamics
        # feed-forward, and no command per period while it played
        assert len(rec.previews) == 1
        msg = rec.previews[0]
        start = _seconds(msg.header.stamp)
        t_knot = np.array([_seconds(p.time_from_start) for p in msg.points])
        index = np.rint(t_knot * rate).astype(int)
        np.testing.assert_allclose(t_knot, pub.profile.time[index], atol=1e-9)
        np.testing.assert_allclose([p.positions for p in msg.points], pub.profile.q[index], atol=1e-12)
        np.testing.assert_allclose([p.effort for p in msg.points], pub.feedforward[index], atol=1e-9)
        assert index[-1] == len(pub.profile.time) - 1 and len(index) < 0.5 * len(pub.profile.time)
        assert not [c for c in rec.commands if start <= c[0] < start + pub.profile.time[-1]]
        t_cmd, q_cmd = start + pub.profile.time, pub.profile.q
    else:
        t_cmd, q_cmd, dq_cmd, tau_cmd = Recorder.arrays(rec.commands)
        # every command is the profile sample due at its stamp (the run starts with the first one,
        # on the first pose, between two ticks of the timer) with its inverse-dynamics feed-forward
        index = np.minimum(np.floor((t_cmd - t_cmd[0]) * rate + 1e-6).astype(int), len(pub.profile.time) - 1)
        np.testing.assert_allclose(q_cmd, pub.profile.q[index], atol=1e-12)
        np.testing.assert_allclose(tau_cmd, pub.feedforward[index], atol=1e-9)
    # the simulated arm followed the plan it was sent
    during = (t >= t_cmd[0]) & (t <= t_cmd[-1])
    q_ref = np.column_stack([np.interp(t[during], t_cmd, q_cmd[:, j]) for j in range(q.shape[1])])
    error = np.abs(q[during] - q_ref).max()
    print(f"\nmax tracking error {error:.4f} rad over {during.sum()} samples")
    assert error < 0.02
    assert np.abs(dq[-50:]).max() < 0.05  # at rest at the end (velocity noise 5e-3)


def _mass_matrix(model, q):
    """Joint-space inertia (n, n) at q, armature included (MuJoCo 3.x and 4.x signatures)."""
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    mass = np.zeros((model.nv, model.nv))
    try:
        mujoco.mj_fullM(model, data, mass)
    except TypeError:
        mujoco.mj_fullM(model, mass, data.qM)
    return mass


@pytest.mark.parametrize("law", ["mit", "computed_torque"])
def test_stale_command_falls_back_to_damping(harness, openarm, law):
    timeout = 0.1
    q_init = openarm.joint_range.mean(axis=1)
    rec = harness.add(Recorder(harness.context))
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    command_pub = probe.create_publisher(JointState, "sysid/joint_command", 10)
    gains = {}
    if law == "mit":
        kp, kd = default_gains(openarm.model)
        gains = {"kp": kp.tolist(), "kd": kd.tolist()}
    sim = _sim(harness, initial_positions=q_init.tolist(), q_noise=0.0, dq_noise=0.0, tau_noise=0.0,
               command_timeout_s=timeout, **gains)
    harness.wait_matched(sim._state_pub)
    harness.wait_matched(command_pub)
    assert harness.spin_until(lambda: sim.sim_time >= 0.05)

    # a partial command (joints 1 and 2) with an unknown joint, which is ignored
    target = q_init[:2] + [0.1, -0.1]
    command_pub.publish(JointState(name=["joint1", "joint2", "gripper"], position=[*target, 0.5]))
    t_sent = sim.sim_time
    assert harness.spin_until(lambda: sim.sim_time >= t_sent + 3 * timeout)
    assert sim._timed_out
    command_pub.publish(JointState(name=["joint1", "joint2"], position=list(target)))
    t_resent = sim.sim_time
    assert harness.spin_until(lambda: sim.sim_time >= t_resent + 0.05)
    assert not sim._timed_out
    harness.executor.remove_node(sim)
    assert harness.spin_until(lambda: len(rec.states) >= sim.published)

    t, q, dq, tau = Recorder.arrays(rec.states)
    tracking = ((t > t_sent + 0.01) & (t < t_sent + timeout - 0.01)) | (t > t_resent + 0.01)
    damping = (t > t_sent + timeout + 0.01) & (t < t_resent)
    assert tracking.sum() > 100 and damping.sum() > 150
    # never-commanded joints hold the initial pose, no feed-forward; joints 1 and 2 track the
    # target, then (stale) are damped only: no position error, no velocity target
    q_des = np.tile(q_init, (len(t), 1))
    q_des[tracking, :2] = target
    q_des[damping, :2] = q[damping, :2]
    checked = tracking | damping
    if law == "mit":
        kp, kd = sim.kp, sim.kd
        np.testing.assert_allclose(tau[:, 2:], kp[2:] * (q_init[2:] - q[:, 2:]) - kd[2:] * dq[:, 2:], atol=1e-9)
        expected = kp * (q_des - q) - kd * dq
    else:  # tau = M(q) (kp e + kd de) with the acceleration gains of the sim source
        assert sim.kp is None and sim.kd is None
        gain = ComputedTorque(openarm.model, 1000.0)
        expected = np.array([_mass_matrix(openarm.model, qi) @ (gain.kp * (qd - qi) - gain.kd * dqi)
                             for qi, qd, dqi in zip(q, q_des, dq)])
    np.testing.assert_allclose(tau[checked], expected[checked], atol=1e-9)
    # a stale target is not pulled toward: the joints moved while tracking, then only damped
    assert np.abs(dq[damping, :2]).max() > 0.01


def test_stop_holds_the_measured_pose(harness, openarm):
    duration, rate = 2.0, 500.0
    q_start = multisine(openarm.joint_range, duration, rate, seed=0, max_velocity=1.0).q[0]
    rec = harness.add(Recorder(harness.context))
    sim = _sim(harness, initial_positions=q_start.tolist())
    pub = _publisher(harness, duration=duration, rate_hz=rate)
    harness.wait_matched(sim._state_pub, 2)
    harness.wait_matched(pub._command_pub, 2)
    harness.wait_matched(sim._clock_pub, 2)
    # the excitation runs from 1.5 s (1 s approach, 0.5 s launch): stop in its middle, moving
    assert harness.spin_until(lambda: sim.sim_time >= 2.2)
    moving = np.abs(sim.arm._data.qvel).max()

    response = harness.call(rec, "sysid/stop")
    t_stop = sim.sim_time
    assert response.success, response.message
    assert harness.spin_until(lambda: sim.sim_time >= t_stop + 1.0)

    assert moving > 0.1
    assert rec.done == [False, False]
    t_cmd, q_cmd, dq_cmd, tau_cmd = Recorder.arrays(rec.commands)
    held = t_cmd >= t_stop
    assert held.sum() > 400  # streamed at 500 Hz, so the drives never time out
    hold = q_cmd[-1]
    np.testing.assert_array_equal(q_cmd[held], np.broadcast_to(hold, (held.sum(), 7)))
    np.testing.assert_array_equal(dq_cmd[held], 0.0)
    gravity = openarm.inverse_dynamics(hold, np.zeros(7), np.zeros(7))[0]
    np.testing.assert_allclose(tau_cmd[held], np.broadcast_to(gravity, (held.sum(), 7)), atol=1e-9)
    t, q, dq, _ = Recorder.arrays(rec.states)
    settled = t > t_stop + 0.5
    assert np.abs(q[settled] - hold).max() < 0.01
    assert np.abs(dq[settled]).max() < 0.05


def test_joint_trajectory_output_publishes_the_profile_once(harness, openarm):
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    pub = _publisher(harness, duration=1.0, output="joint_trajectory", autostart=False)
    clock_pub = probe.create_publisher(Clock, "/clock", 10)
    state_pub = probe.create_publisher(JointState, "joint_states", 10)
    rec = harness.add(Recorder(harness.context))
    harness.wait_matched(clock_pub, 2)
    harness.wait_matched(state_pub, 2)
    clock_pub.publish(Clock(clock=Time(sec=10)))
    q_now = openarm.joint_range.mean(axis=1)
    state_pub.publish(JointState(name=list(openarm.joint_names), position=q_now.tolist()))
    assert harness.spin_until(lambda: pub._q_measured is not None)

    response = harness.call(probe, "sysid/start")
    assert not response.success and "no subscriber" in response.message
    trajectories = []
    probe.create_subscription(JointTrajectory, "joint_trajectory_controller/joint_trajectory",
                              trajectories.append, 10)
    harness.wait_matched(pub._trajectory_pub)
    response = harness.call(probe, "sysid/start")
    assert response.success, response.message
    assert harness.spin_until(lambda: trajectories)

    msg = trajectories[0]
    assert list(msg.joint_names) == list(openarm.joint_names)
    assert len(msg.points) == len(pub.profile.time)
    np.testing.assert_array_equal(msg.points[0].positions, q_now)
    np.testing.assert_allclose(msg.points[-1].positions, pub.profile.q[-1])
    last = msg.points[-1].time_from_start
    assert last.sec + last.nanosec * 1e-9 == pytest.approx(pub.profile.time[-1])
    assert all(len(p.effort) == 0 for p in msg.points[::100])
    assert not rec.commands  # nothing streamed
    # progress follows the node clock: jump past the end of the profile
    end = 10.0 + pub.profile.time[-1] + 0.01
    clock_pub.publish(Clock(clock=Time(sec=int(end), nanosec=int((end % 1) * 1e9))))
    assert harness.spin_until(lambda: rec.done[-1:] == [True])
    assert rec.progress[-1] == 1.0
    # stop: one point at the measured pose, which the controller then holds
    assert harness.call(probe, "sysid/stop").success
    assert harness.spin_until(lambda: len(trajectories) == 2)
    (point,) = trajectories[1].points
    np.testing.assert_array_equal(point.positions, q_now)
    np.testing.assert_array_equal(point.velocities, 0.0)
    assert harness.spin_until(lambda: rec.done[-1:] == [False])


def test_bad_model_path_keeps_the_nodes_alive(harness):
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    pub = _publisher(harness, model="/nonexistent/arm.xml")
    sim = _sim(harness, model="/nonexistent/arm.xml")
    assert pub.error and "/nonexistent/arm.xml" in pub.error
    assert sim.error and "/nonexistent/arm.xml" in sim.error
    response = harness.call(probe, "sysid/start")
    assert not response.success and "/nonexistent/arm.xml" in response.message
    harness.spin_until(lambda: False, 0.2)
    assert sim.published == 0


def test_start_needs_a_matching_pose(harness):
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    pub = _publisher(harness, use_sim_time=False, autostart=False)
    response = harness.call(probe, "sysid/start")
    assert not response.success and response.message == "no /joint_states received yet"

    state_pub = probe.create_publisher(JointState, "joint_states", 10)
    harness.wait_matched(state_pub)
    state_pub.publish(JointState(name=["shoulder", "elbow"], position=[0.0, 0.0]))
    assert harness.spin_until(lambda: pub._pose_error is not None)
    response = harness.call(probe, "sysid/start")
    assert not response.success and "lacks joints" in response.message and "joint1" in response.message
    response = harness.call(probe, "sysid/stop")
    assert not response.success


def test_divergence_stops_the_simulation_not_the_node(harness):
    # gains far beyond what a 1 ms explicit step can take: the PD loop explodes within steps
    sim = _sim(harness, kp=[1e9] * 7, kd=[1e7] * 7, initial_positions=[0.5, 1.0, 0.3, 1.0, 0.2, 0.3, 0.2])
    assert harness.spin_until(lambda: sim.error is not None)
    assert "diverged" in sim.error
    published = sim.published
    harness.spin_until(lambda: False, 0.2)
    assert sim.published == published
    # still a node: parameters can be read over ROS
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    client = probe.create_client(GetParameters, f"/{sim.get_name()}/get_parameters")
    assert client.wait_for_service(timeout_sec=5.0)
    future = client.call_async(GetParameters.Request(names=["rate_hz"]))
    assert harness.spin_until(future.done)
    assert future.result().values[0].double_value == 1000.0


def test_a_published_arm_is_simulated_as_a_plant(harness):
    # Kinova Gen3 as published: MuJoCo's 2 ms timestep, no armature, position servos (kp 2000) that
    # would pull every joint to ctrl = 0. Before any command the node holds the initial pose.
    gen3 = mujoco.MjModel.from_xml_path(str(arm("gen3").path))
    home = gen3.key_qpos[0].copy()
    sim = _sim(harness, model=str(arm("gen3").path), initial_positions=home.tolist(), q_noise=0.0, dq_noise=0.0,
               tau_noise=0.0)
    assert sim.error is None and sim.kp is None
    assert (sim.arm.timing.timestep, sim.arm.timing.substeps) == (0.001, 1)
    assert harness.spin_until(lambda: sim.sim_time >= 0.5)
    assert sim.error is None
    # no feed-forward yet: the computed-torque hold sags under the arm's weight by M^-1 g / w^2 only
    assert np.abs(sim.arm._data.qpos - home).max() < 0.01


def _published_during(harness, sim, seconds: float) -> int:
    before = sim.published
    harness.spin_until(lambda: False, timeout=seconds)
    return sim.published - before


def _publishes(harness, sim) -> bool:
    """Whether the simulation goes on publishing (waits until it does, or a hang)."""
    before = sim.published
    return harness.spin_until(lambda: sim.published > before + 10)


def test_pauses_when_the_excitation_is_done_and_resumes_on_a_new_run(harness):
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    done = probe.create_publisher(Bool, "sysid/done", QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    # a finished run's latched flag, seen first, does not pause a simulator started after it
    done.publish(Bool(data=True))
    sim = _sim(harness, command_lead_s=0.0)  # no commander here: nothing to wait for
    harness.wait_matched(done)
    assert harness.spin_until(lambda: sim._done is True)
    assert _publishes(harness, sim) and not sim.paused

    for flag in (False, True):  # a run starts, then ends
        done.publish(Bool(data=flag))
        assert harness.spin_until(lambda: sim._done is flag)
    assert sim.paused
    stopped_at = sim.sim_time
    assert _published_during(harness, sim, 0.5) == 0 and sim.sim_time == stopped_at

    done.publish(Bool(data=False))  # sysid/start of the next run
    assert harness.spin_until(lambda: not sim.paused)
    assert _publishes(harness, sim)


def test_waits_for_its_subscribers_then_publishes_from_the_first_sample(harness):
    sim = _sim(harness, wait_for_subscribers=1)
    harness.spin_until(lambda: False, timeout=0.5)
    assert sim.published == 0 and sim.sim_time == 0.0
    listener = harness.add(Node(f"listener_{next(_names)}", context=harness.context))
    stamps = []
    listener.create_subscription(JointState, "joint_states", lambda m: stamps.append(_seconds(m.header.stamp)),
                                 BIG_QUEUE)
    assert harness.spin_until(lambda: len(stamps) >= 100)
    assert stamps[0] == pytest.approx(1e-3)  # the first period's sample, not a later one


def test_fast_sim_keeps_within_command_lead_of_its_commander(harness):
    lead = 0.005
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    command_pub = probe.create_publisher(JointState, "sysid/joint_command", 10)
    sim = _sim(harness, command_lead_s=lead)
    harness.wait_matched(command_pub)
    assert harness.spin_until(lambda: sim.sim_time >= 0.05)

    def command(seconds: float):
        msg = JointState(name=list(sim.joint_names), position=sim.arm._data.qpos.tolist())
        msg.header.stamp = Time(sec=int(seconds), nanosec=round(seconds % 1 * 1e9))
        command_pub.publish(msg)

    for _ in range(3):  # a commander that sends once per call: the simulation waits for it each time
        stamp = sim.sim_time
        command(stamp)
        assert harness.spin_until(lambda: sim.sim_time > stamp)
        harness.spin_until(lambda: False, timeout=0.3)
        assert stamp < sim.sim_time <= stamp + lead + 1.5e-3
    # a commander silent for a second (wall time) is not waited for any more
    waiting = sim.sim_time
    assert harness.spin_until(lambda: sim.sim_time > waiting + 0.2, timeout=3.0)
