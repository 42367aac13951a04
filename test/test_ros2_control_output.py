"""trajectory_publisher driving a ros2_control forward_command_controller, and its model from robot_description.

Real rclpy nodes in one executor (test_sim_nodes' harness) in the domain conftest.py isolates: a
fake controller subscribes to ``<controller>/commands`` the way forward_command_controller does, a
probe publishes ``joint_states`` and a frozen ``/clock`` the test steps, so every command is the
profile sample due at a known time. Oracles: the Trajectory the core plans (multisine ->
excitation_with_approach_and_rest), MuJoCo's mj_inverse for the torques.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from builtin_interfaces.msg import Time
import mujoco
import numpy as np
import pytest
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String

from test_sim_nodes import OPENARM, Harness, _names
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine
from sysid_ros.trajectory_publisher import TrajectoryPublisher

ROOT = Path(__file__).resolve().parents[1]
URDF = ROOT / "test" / "models" / "urdf" / "ur5e.urdf"
RATE, DURATION, T0 = 100.0, 1.0, 10.0
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
STEP_S = 20.0  # bound on one clock step's command arriving: a guard against hangs, not a speed target


@pytest.fixture(scope="module")
def openarm():
    return load_robot(OPENARM)


@pytest.fixture
def harness(context):
    h = Harness(context)
    yield h
    h.close()


class Rig:
    """The arm's side of the graph: a clock, joint_states (names in their own order, a gripper
    joint the model lacks) and a forward_command_controller's commands subscription."""

    def __init__(self, harness, topic: str, namespace: str = "/arm"):
        self.harness = harness
        self.node = harness.add(Node(f"rig_{next(_names)}", context=harness.context))
        self.clock = self.node.create_publisher(Clock, "/clock", 10)
        self.states = self.node.create_publisher(JointState, f"{namespace}/joint_states", 10)
        self.commands, self.done = [], []
        self.node.create_subscription(Float64MultiArray, topic, lambda m: self.commands.append(np.array(m.data)), 100)
        self.node.create_subscription(Bool, f"{namespace}/sysid/done", lambda m: self.done.append(m.data), LATCHED)

    def set_time(self, t: float):
        self.clock.publish(Clock(clock=Time(sec=int(t), nanosec=int(round((t % 1) * 1e9)))))

    def measure(self, robot, q, dq=None, pub=None):
        """Publish the pose q (model order), reversed with a gripper joint added; wait until ``pub`` has it."""
        dq = np.zeros_like(q) if dq is None else dq
        names = list(robot.joint_names)[::-1] + ["gripper"]
        self.states.publish(JointState(name=names, position=[*q[::-1], 0.02], velocity=[*dq[::-1], 0.0]))
        if pub is not None:
            assert self.harness.spin_until(
                lambda: pub._q_measured is not None and np.array_equal(pub._q_measured, q), STEP_S)

    def command_at(self, t: float, expected) -> np.ndarray:
        """Step the clock to ``t``; the last command that then arrives (waits for one equal to ``expected``)."""
        count = len(self.commands)
        self.set_time(t)
        self.harness.spin_until(lambda: len(self.commands) > count and np.allclose(
            self.commands[-1], expected, atol=1e-9, rtol=0), STEP_S)
        assert len(self.commands) > count, f"no command after the clock stepped to {t} s"
        return self.commands[-1]


def _publisher(harness, **params):
    params = {"model": OPENARM, "use_sim_time": True, "autostart": False, "duration": DURATION, "rate_hz": RATE,
              **params}
    return harness.add(TrajectoryPublisher(context=harness.context, namespace="arm",
                                           parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))


def _plan(robot):
    return multisine(robot.joint_range, DURATION, RATE, seed=0, max_velocity=1.0, amplitude_fraction=0.8)


def _profile(robot, q_start):
    """The core's plan from ``q_start``: the oracle of what the node must send."""
    profile, _ = excitation_with_approach_and_rest(q_start, _plan(robot), RATE, 1.0, robot.joint_range)
    return profile


def _mj_inverse(robot, q, dq, ddq) -> np.ndarray:
    data = mujoco.MjData(robot.model)
    data.qpos[:], data.qvel[:], data.qacc[:] = q, dq, ddq
    mujoco.mj_inverse(robot.model, data)
    return data.qfrc_inverse.copy()


def _start(harness, rig, pub, robot, q_now, dq_now=None):
    harness.wait_matched(rig.clock)
    harness.wait_matched(rig.states)
    harness.wait_matched(pub._forward_pub)
    rig.set_time(T0)
    assert harness.spin_until(lambda: pub.get_clock().now().nanoseconds == int(T0 * 1e9), STEP_S)
    rig.measure(robot, q_now, dq_now, pub)
    ok, message = pub.start()
    assert ok, message
    assert harness.spin_until(lambda: rig.commands, STEP_S)


def test_forward_position_streams_the_plan_in_the_controllers_order(harness, openarm):
    order = [6, 0, 5, 1, 4, 2, 3]
    joints = [openarm.joint_names[j] for j in order]
    rig = Rig(harness, "/arm/forward_position_controller/commands")
    pub = _publisher(harness, output="forward_position", controller_joints=joints)
    assert pub.error is None and pub._forward_pub.topic_name == "/arm/forward_position_controller/commands"
    q_now = openarm.joint_range.mean(axis=1) + 0.1
    _start(harness, rig, pub, openarm, q_now)

    expected = _profile(openarm, q_now)
    np.testing.assert_array_equal(pub.profile.q, expected.q)
    np.testing.assert_array_equal(rig.commands[0], q_now[order])  # from the measured pose
    last = len(expected.time) - 1
    for i in [1, 2, 57, 150, 151, 180, 233, last - 1]:
        np.testing.assert_allclose(rig.command_at(T0 + i / RATE, expected.q[i, order]), expected.q[i, order],
                                   atol=1e-12, rtol=0, err_msg=f"sample {i}")
    assert rig.done == [False]
    # at the end: the rest pose, still, held by a stream of it
    np.testing.assert_allclose(rig.command_at(T0 + last / RATE + 0.5, expected.q[last, order]), expected.q[last, order],
                               atol=1e-12, rtol=0)
    np.testing.assert_array_equal(expected.dq[last], 0.0)
    assert harness.spin_until(lambda: rig.done == [False, True], STEP_S)
    count = len(rig.commands)
    rig.set_time(T0 + last / RATE + 1.0)
    assert harness.spin_until(lambda: len(rig.commands) > count, STEP_S)
    np.testing.assert_array_equal(rig.commands[-1], expected.q[last, order])


def test_forward_position_stops_at_the_measured_pose(harness, openarm):
    rig = Rig(harness, "/arm/position_commands_controller/commands")
    pub = _publisher(harness, output="forward_position", controller="position_commands_controller")
    q_now = openarm.joint_range.mean(axis=1)
    _start(harness, rig, pub, openarm, q_now)
    expected = _profile(openarm, q_now)
    rig.command_at(T0 + 2.0, expected.q[200])
    q_mid = expected.q[200] + 0.01  # where the arm is, not where it was sent
    rig.measure(openarm, q_mid, pub=pub)

    response = harness.call(rig.node, "/arm/sysid/stop")
    assert response.success, response.message
    assert harness.spin_until(lambda: np.array_equal(rig.commands[-1], q_mid), STEP_S)
    count = len(rig.commands)
    rig.set_time(T0 + 2.5)  # the run would have moved on: the node holds instead
    assert harness.spin_until(lambda: len(rig.commands) > count, STEP_S)
    np.testing.assert_array_equal(rig.commands[-1], q_mid)
    assert harness.spin_until(lambda: rig.done == [False, False], STEP_S)


def test_forward_effort_sends_the_inverse_dynamics_and_holds_against_gravity(harness, openarm):
    kp, kd = np.arange(1.0, 8.0) * 10, np.arange(1.0, 8.0)
    rig = Rig(harness, "/arm/forward_effort_controller/commands")
    pub = _publisher(harness, output="forward_effort", effort_kp=kp.tolist(), effort_kd=kd.tolist(),
                     state_timeout_s=60.0)
    assert pub.error is None, pub.error
    q_now = openarm.joint_range.mean(axis=1)
    dq_now = np.linspace(-0.01, 0.02, 7)
    _start(harness, rig, pub, openarm, q_now, dq_now)
    expected = _profile(openarm, q_now)

    def law(i, q, dq):
        tau_ff = _mj_inverse(openarm, expected.q[i], expected.dq[i], expected.ddq[i])
        return tau_ff + kp * (expected.q[i] - q) + kd * (expected.dq[i] - dq)

    np.testing.assert_allclose(rig.commands[0], law(0, q_now, dq_now), atol=1e-9, rtol=0)
    q_meas, dq_meas = expected.q[180] - 0.003, expected.dq[180] + 0.02  # tracking errors the PD acts on
    rig.measure(openarm, q_meas, dq_meas, pub)
    for i in (180, 200):
        np.testing.assert_allclose(rig.command_at(T0 + i / RATE, law(i, q_meas, dq_meas)), law(i, q_meas, dq_meas),
                                   atol=1e-9, rtol=0, err_msg=f"sample {i}")

    # stop: gravity where the arm is, the PD pulling it back to where it stopped
    assert harness.call(rig.node, "/arm/sysid/stop").success
    gravity = _mj_inverse(openarm, q_meas, np.zeros(7), np.zeros(7))
    np.testing.assert_allclose(rig.commands[-1], gravity - kd * dq_meas, atol=1e-9, rtol=0)
    q_sag = q_meas - 0.02
    rig.measure(openarm, q_sag, None, pub)
    hold = _mj_inverse(openarm, q_sag, np.zeros(7), np.zeros(7)) + kp * (q_meas - q_sag)
    np.testing.assert_allclose(rig.command_at(T0 + 2.1, hold), hold, atol=1e-9, rtol=0)


def test_forward_effort_stops_on_stale_joint_states(harness, openarm):
    rig = Rig(harness, "/arm/forward_effort_controller/commands")
    pub = _publisher(harness, output="forward_effort", effort_kp=[50.0], effort_kd=[2.0], state_timeout_s=0.3)
    q_now = openarm.joint_range.mean(axis=1)
    _start(harness, rig, pub, openarm, q_now, np.full(7, 0.1))  # the first command damps that velocity
    time.sleep(0.4)  # joint_states falls silent
    gravity = _mj_inverse(openarm, q_now, np.zeros(7), np.zeros(7))
    np.testing.assert_allclose(rig.command_at(T0 + 1.0, gravity), gravity, atol=1e-9, rtol=0)  # no feedback
    assert pub._mode == "holding"
    assert harness.spin_until(lambda: rig.done == [False, False], STEP_S)
    assert not pub.start()[0]
    # the pose comes back, elsewhere: held there (gravity), not pulled back to where it went silent
    q_drift = q_now - 0.05
    rig.measure(openarm, q_drift, pub=pub)
    gravity = _mj_inverse(openarm, q_drift, np.zeros(7), np.zeros(7))
    np.testing.assert_allclose(rig.command_at(T0 + 1.1, gravity), gravity, atol=1e-9, rtol=0)


def test_controller_joints_and_gains_are_checked_against_the_model(harness, openarm):
    joints = list(openarm.joint_names)
    wrong = _publisher(harness, output="forward_position", controller_joints=joints[:-1] + ["joint1", "finger"])
    assert "controller_joints" in wrong.error and "missing ['joint7']" in wrong.error
    assert "not in the model ['finger']" in wrong.error and "repeated ['joint1']" in wrong.error
    assert wrong.start() == (False, wrong.error)
    no_gains = _publisher(harness, output="forward_effort")
    assert "set effort_kp" in no_gains.error
    short = _publisher(harness, output="forward_effort", effort_kp=[1.0, 2.0], effort_kd=[0.0])
    assert "effort_kp must hold 1 or 7" in short.error
    assert "unknown output 'efforts'" in _publisher(harness, output="efforts").error


def test_model_from_robot_description_published_before_the_node(harness):
    text = URDF.read_text()
    ur5e = load_robot(text)
    latch = harness.add(Node(f"robot_state_publisher_{next(_names)}", context=harness.context, namespace="arm"))
    latch.create_publisher(String, "robot_description", LATCHED).publish(String(data=text))
    rig = Rig(harness, "/arm/forward_position_controller/commands")
    pub = _publisher(harness, model="", output="forward_position")
    assert harness.spin_until(lambda: pub.robot is not None, STEP_S), pub._why_not_ready()
    assert pub.error is None and pub.robot.source_format == "urdf"
    assert pub.robot.joint_names == ur5e.joint_names and pub.controller_joints == ur5e.joint_names
    q_now = np.clip(np.zeros(6), *ur5e.joint_range.T)
    _start(harness, rig, pub, ur5e, q_now)
    np.testing.assert_array_equal(pub.profile.q, _profile(ur5e, q_now).q)


def test_model_from_robot_description_published_after_the_node(harness, openarm):
    probe = harness.add(Node(f"probe_{next(_names)}", context=harness.context))
    pub = _publisher(harness, model="", output="forward_position")
    assert pub.robot is None and pub.error is None
    response = harness.call(probe, "/arm/sysid/start")
    assert not response.success and "waiting for the model on /arm/robot_description" in response.message
    description = probe.create_publisher(String, "/arm/robot_description", LATCHED)
    harness.wait_matched(description)
    description.publish(String(data="<robot name='broken'><link name='base'/></robot>"))
    assert harness.spin_until(lambda: pub._description.error is not None, STEP_S)
    response = harness.call(probe, "/arm/sysid/start")
    assert not response.success and response.message.startswith("cannot load the model from /arm/robot_description")
    # MJCF text too; a corrected description replaces the broken one
    description.publish(String(data=Path(OPENARM).read_text()))
    assert harness.spin_until(lambda: pub.robot is not None, STEP_S)
    assert pub.error is None and pub.robot.joint_names == openarm.joint_names
    np.testing.assert_array_equal(pub.plan.q, _plan(openarm).q)


def test_shutdown_leaves_the_effort_controller_holding_gravity(harness, openarm):
    """A node process interrupted mid-run (Ctrl-C) sends the gravity torque at the measured pose last."""
    rig = Rig(harness, "/forward_effort_controller/commands", namespace="")
    process = subprocess.Popen(
        [sys.executable, "-m", "sysid_ros.trajectory_publisher", "--ros-args", "-p", f"model:={OPENARM}",
         "-p", "output:=forward_effort", "-p", "effort_kp:=[20.0]", "-p", "effort_kd:=[1.0]",
         "-p", "state_timeout_s:=60.0", "-p", "duration:=30.0"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        q_now = openarm.joint_range.mean(axis=1)
        deadline = time.monotonic() + 120.0
        while len(rig.commands) < 20:  # autostart once the pose and the controller are there
            assert time.monotonic() < deadline and process.poll() is None, process.stdout.read()
            rig.measure(openarm, q_now)
            harness.spin_until(lambda: False, 0.05)
        q_last = q_now + 0.01
        rig.measure(openarm, q_last, np.full(7, 0.5))
        harness.spin_until(lambda: False, 0.5)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        # the last command is gravity alone: wait for it (a loaded machine delivers late), then
        # make sure nothing follows it
        gravity = _mj_inverse(openarm, q_last, np.zeros(7), np.zeros(7))
        harness.spin_until(lambda: np.allclose(rig.commands[-1], gravity, atol=1e-9, rtol=0), 10.0)
        harness.spin_until(lambda: False, 0.5)
    finally:
        if process.poll() is None:
            process.kill()
    log = process.stdout.read()
    assert "shut down: arm left at the measured pose" in log, log
    np.testing.assert_allclose(rig.commands[-1], gravity, atol=1e-9, rtol=0)
    assert rig.done[-1] is False
