"""damiao_bridge against the virtual Damiao arm, over python-can's in-process virtual bus.

No mocks: the bridge is the real rclpy node and the motors are the emulator (MuJoCo behind
the MIT-mode protocol). What the bridge puts on the bus is checked by a third bus on the
same channel that decodes every frame with the codec, independently of the bridge's state.
The arm is the horizontal planar 2R (no gravity torque), so it rests where it is left.
"""
import itertools
import os
import textwrap
import threading
import time
import types

import can
import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from sysid_core.damiao import protocol
from sysid_core.damiao.emulator import EmulatedMotor, VirtualDamiaoArm
from sysid_core.damiao.protocol import MotorLimits, decode_mit, motor_limits, resolution
from sysid_core.identification.actuator import CommandLog, EffortGains
from sysid_ros.damiao_bridge import WARN_PERIOD_S, DamiaoBridge

from conftest import MODELS, emulator_answers_in_time, run_python

ARM = str(MODELS / "planar_2r.xml")
LAYOUT = {
    "joint_names": ["joint1", "joint2"], "motor_types": ["DM4340", "DM4310"], "can_ids": [1, 2],
    "master_ids": [0x11, 0x12], "kp": [20.0, 10.0], "kd": [2.0, 0.6],
    "joint_lower_limits": [-2.0, -2.5], "joint_upper_limits": [2.0, 2.5],
    "control_rate_hz": 500.0, "command_timeout_s": 0.1,
    # a motor counts as silent only after 0.1 s (a real one answers within a millisecond): the
    # emulated motors answer from a thread of this process, which a loaded machine may hold up
    # for several cycles, and a test about anything else than silence must not see a fault of it
    "feedback_timeout_cycles": 50,
}
_channels = itertools.count()


@pytest.fixture(scope="module")
def context(context):
    with emulator_answers_in_time():
        yield context


class Rig:
    """Emulator + bridge + a probe node and a bus monitor, spun by one executor."""

    def __init__(self, context, motors=None, start_bridge=True, namespace="", arm_options=None, model=ARM,
                 layout=LAYOUT, **parameters):
        self.channel = f"bridge_test_{os.getpid()}_{next(_channels)}"
        self.namespace = namespace
        prefix = f"{namespace}/" if namespace else ""
        self.motors = motors or [EmulatedMotor("joint1", "DM4340", 1, 0x11), EmulatedMotor("joint2", "DM4310", 2, 0x12)]
        self.arm = VirtualDamiaoArm(model, self.motors, channel=self.channel, **(arm_options or {}))
        self.arm.start()
        self.monitor = can.Bus(interface="virtual", channel=self.channel)
        self.frames = []
        self.context = context
        self.parameters = {**layout, "can_interface": "virtual", "can_channel": self.channel, **parameters}
        self.executor = SingleThreadedExecutor(context=context)
        self.probe = Node(f"probe_{next(_channels)}", context=context)
        self.states, self.diagnostics = [], []
        self.probe.create_subscription(JointState, prefix + "joint_states", self.states.append, 1000)
        self.probe.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 100)
        self.command_pub = self.probe.create_publisher(JointState, prefix + "sysid/joint_command", 10)
        self.prefix = prefix
        self.executor.add_node(self.probe)
        self.bridge = self.make_bridge() if start_bridge else None
        if self.bridge is not None:
            self.executor.add_node(self.bridge)

    def make_bridge(self, **overrides):
        values = {**self.parameters, **overrides}
        return DamiaoBridge(context=self.context, namespace=self.namespace,
                            parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])

    def spin(self, seconds=0.0, until=None, limit=30.0):
        """Spin for ``seconds``, or until ``until()`` holds (False if it never did within ``limit`` s,
        a bound that only catches a hang: a loaded machine may take long)."""
        deadline = time.monotonic() + (seconds if until is None else limit)
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.002)
            self.drain()
            if until is not None and until():
                return True
        return until is None

    def drain(self):
        # (time.monotonic() when drained, id, payload, bus time of sending)
        while (msg := self.monitor.recv(timeout=0)) is not None:
            self.frames.append((time.monotonic(), msg.arbitration_id, bytes(msg.data), msg.timestamp))

    def mit_frames(self, can_id, since=0.0):
        """Decoded MIT commands the bridge sent to ``can_id`` after ``since`` (time.monotonic())."""
        limits = self.arm.limits(can_id)
        return [decode_mit(data, limits) for t, arb, data, _ in self.frames
                if arb == can_id and t >= since and data[:7] != b"\xff" * 7]

    def frames_to(self, can_id):
        """(index in ``frames``, bus time, payload) of every frame addressed to motor ``can_id``:
        MIT and special frames on its id, refresh and register frames on 0x7FF naming it."""
        return [(k, stamp, data) for k, (_, arb, data, stamp) in enumerate(self.frames)
                if arb == can_id or (arb == protocol.MANAGEMENT_ID and data[0] | data[1] << 8 == can_id)]

    def command(self, names, position, velocity=(), effort=()):
        self.command_pub.publish(JointState(name=list(names), position=[float(v) for v in position],
                                            velocity=[float(v) for v in velocity], effort=[float(v) for v in effort]))

    def call(self, service):
        client = self.probe.create_client(Trigger, self.prefix + service)
        assert client.wait_for_service(timeout_sec=5.0)
        future = client.call_async(Trigger.Request())
        assert self.spin(until=future.done)
        self.probe.destroy_client(client)
        return future.result()

    def close(self):
        for node in (self.bridge, self.probe):
            if node is not None:
                self.executor.remove_node(node)
                node.destroy_node()
        self.executor.shutdown()
        self.monitor.shutdown()
        self.arm.stop()


@pytest.fixture
def rig(context):
    rigs = []

    def make(**kwargs):
        rigs.append(Rig(context, **kwargs))
        return rigs[-1]
    yield make
    for r in rigs:
        r.close()


def wait_until(condition, limit=30.0):
    """Sleep (nobody spins: the bridge holds still) until ``condition()``; False if it did not
    hold within ``limit`` s, a bound that only catches a hang."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def statuses(r, name, level=None):
    """Every DiagnosticStatus named ``name`` (of ``level``) the probe heard so far."""
    return [s for a in r.diagnostics for s in a.status if s.name == name and level in (None, s.level)]


def quantum(limits: MotorLimits):
    return (resolution(-limits.pmax, limits.pmax, 16), resolution(-limits.vmax, limits.vmax, 12),
            resolution(-limits.tmax, limits.tmax, 12))


def damping_only(rig, can_id, since):
    """True if every MIT frame to ``can_id`` after ``since`` is damping only (and there are some):
    kp 0, and v_des and t_ff zero within a quantum (the encoding maps 0 to just below 0)."""
    _, v, t = quantum(rig.arm.limits(can_id))
    frames = rig.mit_frames(can_id, since)
    return bool(frames) and all(f.kp == 0.0 and abs(f.velocity) <= v and abs(f.torque) <= t for f in frames)


def test_start_enables_every_motor_and_publishes_joint_states(rig):
    r = rig()
    assert r.arm.enabled(1) and r.arm.enabled(2)
    assert r.spin(until=lambda: len(r.states) >= 50)
    msg = r.states[-1]
    assert list(msg.name) == ["joint1", "joint2"]
    # oracle: the emulator's true state; the arm rests (no gravity torque in its plane)
    for j, motor in enumerate(r.motors):
        q_quantum, v_quantum, _ = quantum(r.arm.limits(motor.can_id))
        assert abs(msg.position[j] - r.arm.q[j]) <= q_quantum + 1e-6
        assert abs(msg.velocity[j] - r.arm.dq[j]) <= v_quantum + 1e-6
    # stamps are the bus times of the replies (epoch seconds, as the node clock), increasing
    stamps = np.array([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in r.states])
    assert np.all(np.diff(stamps) > 0) and abs(stamps[-1] - time.time()) < 1.0
    # the loop's own record (bench/damiao_loop.py reads it): a row per cycle and per message,
    # each reply published after it arrived
    record = r.bridge.loop_record
    assert record.cycles == r.bridge.cycles and record.messages == r.bridge.published
    ages = record.ages_since(0)
    assert ages.shape == (r.bridge.published, 2) and np.all((ages >= 0) & (ages < 1.0))


def test_direction_and_offset_map_joint_to_motor(rig):
    motors = [EmulatedMotor("joint1", "DM4340", 1, 0x11, direction=-1, position_offset=0.2),
              EmulatedMotor("joint2", "DM4310", 2, 0x12)]
    # well damped gains so the arm settles within the 2 s below
    r = rig(motors=motors, directions=[-1, 1], position_offsets=[0.2, 0.0], kd=[4.0, 1.2])
    since = time.monotonic()
    target = np.array([0.5, -0.4])
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], target), r.bridge.tracking.all())[1])
    # 2 s of the arm's own (simulated) time, however long a loaded machine takes to run them
    tracked_at = r.arm.sim_time
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], target), r.arm.sim_time >= tracked_at + 2.0)[1],
                  limit=120.0)
    # the emulator (its own copy of the mapping) moved the joints to the target
    np.testing.assert_allclose(r.arm.q, target, atol=0.02)
    np.testing.assert_allclose(r.states[-1].position, target, atol=0.02)
    # every command motor 1 got is the target mapped to its side: direction (0.5 - offset)
    sent = [f.position for f in r.mit_frames(1, since) if f.kp > 0]
    assert sent and np.all(np.abs(np.array(sent) - (-(0.5 - 0.2))) <= quantum(r.arm.limits(1))[0])


def test_commands_are_clamped_to_joint_and_motor_limits(rig):
    r = rig(max_position_error=0.0)   # off: the clamped target lies 2 rad from the arm
    since = time.monotonic()

    def tracked(can_id):
        """The frames to ``can_id`` that carry the command (a position gain), not damping."""
        return [f for f in r.mit_frames(can_id, since) if f.kp > 0]
    # joint1 beyond its upper limit, joint2 with velocity and torque beyond the DM4310's VMAX 30 and TMAX 10
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], [2.7, 0.0], [0.0, 45.0], [0.0, -15.0]),
                                 len(tracked(1)) >= 3 and len(tracked(2)) >= 3)[1])
    q1, _, _ = quantum(r.arm.limits(1))
    _, v2, t2 = quantum(r.arm.limits(2))
    # every command that reached a motor was clamped, and counted
    assert all(abs(f.position - 2.0) <= q1 and f.kp == pytest.approx(20.0, abs=0.2) for f in tracked(1))
    assert all(abs(f.velocity - 30.0) <= v2 and abs(f.torque + 10.0) <= t2 for f in tracked(2))
    assert r.bridge.clamped > 0


def test_partial_commands_track_only_the_named_joints(rig):
    r = rig()
    since = time.monotonic()
    # unknown names are ignored
    assert r.spin(until=lambda: (r.command(["joint2", "gripper"], [0.1, 0.0]), r.bridge.tracking[1])[1])
    assert r.bridge.tracking.tolist() == [False, True]
    assert damping_only(r, 1, since) and r.mit_frames(1, since)[-1].kd == pytest.approx(2.0, abs=0.01)
    assert max(f.kp for f in r.mit_frames(2, since)) == pytest.approx(10.0, abs=0.2)


def test_stale_commands_fall_back_to_damping_only(rig):
    r = rig()
    sent_at = time.monotonic()     # before the command: a loaded machine may take a while to track it
    first, cycles = len(r.frames), r.bridge.loop_record.cycles
    r.command(["joint1", "joint2"], [0.05, 0.05])
    assert r.spin(until=lambda: r.bridge.tracking.all())
    # no further command: after command_timeout_s (0.1 s) only damping frames go out
    assert r.spin(until=lambda: not r.bridge.tracking.any())
    stopped = time.monotonic()
    assert stopped - sent_at >= LAYOUT["command_timeout_s"] - 0.01
    assert r.spin(until=lambda: min(len(r.mit_frames(c, stopped)) for c in (1, 2)) >= 25)
    assert damping_only(r, 1, stopped) and damping_only(r, 2, stopped)
    assert r.arm.enabled(1) and r.arm.enabled(2)  # damped, not dropped
    # however late the cycles ran: no cycle tracked the command more than command_timeout_s after
    # its receipt, and a cycle's frames leave within the cycle, so the frames that carried it (bus
    # times) span no more than that plus the longest cycle
    _, busy = r.bridge.loop_record.cycles_since(cycles)
    for c in (1, 2):
        limits = r.arm.limits(c)
        tracked = [stamp for _, arb, data, stamp in r.frames[first:]
                   if arb == c and data[:7] != b"\xff" * 7 and decode_mit(data, limits).kp > 0]
        assert tracked and tracked[-1] - tracked[0] <= LAYOUT["command_timeout_s"] + busy.max()


def test_commands_far_from_the_arm_are_not_tracked(rig):
    r = rig(max_position_error=0.3)
    # joint1 rests at 0: 1 rad away; joint2's command, at the arm, is tracked meanwhile
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], [1.0, 0.0]), r.bridge.tracking[1])[1])
    keep_commanding(r, 25, (1.0, 0.0))
    assert not r.bridge.tracking[0]
    assert abs(r.arm.q[0]) < 0.01


NAN = float("nan")


def test_a_command_without_position_target_gets_kp_zero_and_drives_velocity_and_feed_forward(rig):
    r = rig(max_position_error=0.3)
    since, start = time.monotonic(), r.arm.q
    # joint1: no position target, 0.5 rad/s (kd alone brings it to that speed); joint2: no
    # position target, a feed-forward torque
    command = (["joint1", "joint2"], [NAN, NAN], [0.5, 0.0], [0.0, 0.05])
    assert r.spin(until=lambda: (r.command(*command), r.bridge.tracking.all())[1])
    moving_at = r.arm.sim_time
    assert r.spin(until=lambda: (r.command(*command), r.arm.sim_time >= moving_at + 1.0)[1], limit=120.0)
    # tracked all along, though joint1 went farther than max_position_error: no position to check
    assert r.bridge.tracking.all() and r.arm.q[0] - start[0] > 0.3
    for j, can_id in enumerate((1, 2)):
        limits = r.arm.limits(can_id)
        q_step, _, t_step = quantum(limits)
        mit = [data for t, arb, data, _ in r.frames if arb == can_id and t >= since and data[:7] != b"\xff" * 7]
        # the kp bytes are zero in every frame (damping only before the command reached the bridge)
        assert len(mit) > 100 and all(protocol.unpack_mit_raw(d)[2] == 0 for d in mit)
        # the frames that carry the command: the motor's law at rest, kd v_des + t_ff, is the
        # one asked within half a torque step (the bridge corrects t_ff for the frame's truncation)
        decoded = [decode_mit(d, limits) for d in mit]
        commanded = [f for f in decoded if abs(f.kd * (f.velocity - command[2][j]) + f.torque - command[3][j])
                     <= 0.5 * t_step + 1e-9]
        assert len(commanded) > 50
        # their position target is the measured position, inside the joint range: it follows the joint
        positions = np.array([f.position for f in commanded])
        assert np.all((positions >= LAYOUT["joint_lower_limits"][j]) & (positions <= LAYOUT["joint_upper_limits"][j]))
        if j == 0:
            assert np.all(np.diff(positions) >= -q_step) and positions[-1] - positions[0] > 0.3


@pytest.mark.parametrize("position, velocity, effort", [
    ([NAN, NAN], [NAN, 0.0], [0.0, 0.0]),
    ([NAN, NAN], [0.0, 0.0], [0.0, float("inf")]),
    ([float("inf"), 0.0], [0.0, 0.0], [0.0, 0.0]),
])
def test_a_nan_velocity_or_effort_or_an_infinite_position_is_refused(rig, position, velocity, effort):
    r = rig()
    since = time.monotonic()
    first = len(r.frames)

    def enough():
        r.command(["joint1", "joint2"], position, velocity, effort)
        sent = [arb for _, arb, _, _ in r.frames[first:]]
        return sent.count(1) >= 30 and sent.count(2) >= 30
    assert r.spin(until=enough)
    assert not r.bridge.tracking.any()
    assert damping_only(r, 1, since) and damping_only(r, 2, since)


def test_a_stale_command_without_position_target_falls_back_to_damping_only(rig):
    r = rig()
    r.command(["joint1", "joint2"], [NAN, NAN], [0.0, 0.0], [0.1, 0.05])
    assert r.spin(until=lambda: r.bridge.tracking.all())
    # no further command: after command_timeout_s, damping only (no feed-forward any more)
    assert r.spin(until=lambda: not r.bridge.tracking.any())
    stopped = time.monotonic()
    assert r.spin(until=lambda: min(len(r.mit_frames(c, stopped)) for c in (1, 2)) >= 25)
    assert damping_only(r, 1, stopped) and damping_only(r, 2, stopped)


@pytest.mark.parametrize("status", sorted(protocol.FAULT_STATUSES))
def test_a_fault_stops_tracking_is_reported_and_cleared_only_on_request(rig, status):
    r = rig()
    r.command(["joint1", "joint2"], [0.0, 0.0])
    assert r.spin(until=lambda: r.bridge.tracking.all())
    r.arm.inject_fault(2, status)
    assert r.spin(until=lambda: r.bridge.status[1] == status)
    fault_seen = time.monotonic()
    keep_commanding(r, 30)   # fresh commands keep coming
    # no joint is driven with position gains while the fault lasts
    assert not r.bridge.tracking.any()
    assert damping_only(r, 1, fault_seen) and damping_only(r, 2, fault_seen)
    errors = statuses(r, "damiao_bridge: joint2", DiagnosticStatus.ERROR)
    assert errors and protocol.status_text(status) in errors[-1].message
    # enabling does not clear a fault; clear_errors does, then commands are tracked again
    assert not r.call("sysid/damiao/enable").success
    assert r.bridge.status[1] == status
    response = r.call("sysid/damiao/clear_errors")
    assert response.success, response.message
    assert r.arm.enabled(2)
    track(r)


def test_lost_feedback_is_a_fault(rig):
    r = rig()
    r.command(["joint1", "joint2"], [0.0, 0.0])
    assert r.spin(until=lambda: r.bridge.tracking.all())
    r.arm.set_silent(1)
    silenced, cycles = time.monotonic(), r.bridge.cycles
    assert r.spin(until=lambda: r.bridge.lost[0])
    silent_cycles = LAYOUT["feedback_timeout_cycles"]
    assert time.monotonic() - silenced >= silent_cycles / LAYOUT["control_rate_hz"]
    assert r.bridge.cycles - cycles >= silent_cycles
    keep_commanding(r, 10)
    assert not r.bridge.tracking.any() and not r.bridge.lost[1]
    # joint_states keeps reporting the joint that answers, and only it
    assert list(r.states[-1].name) == ["joint2"]
    assert not r.call("sysid/damiao/clear_errors").success   # still silent
    r.arm.set_silent(1, False)
    assert r.call("sysid/damiao/clear_errors").success
    assert not r.bridge.lost[0]


def test_disable_and_enable_services(rig):
    r = rig()
    assert r.call("sysid/damiao/disable").success
    assert not r.arm.enabled(1) and not r.arm.enabled(2)
    received = r.arm.frames_received
    states = len(r.states)
    # disabled, the bridge still polls the motors (state refresh), so joint_states goes on
    assert r.spin(until=lambda: r.arm.frames_received > received + 10 and len(r.states) > states + 5)
    assert not r.arm.enabled(1)
    assert r.call("sysid/damiao/enable").success
    assert r.arm.enabled(1) and r.arm.enabled(2)


def test_motors_are_disabled_when_the_node_is_destroyed(rig):
    r = rig()
    assert r.arm.enabled(1) and r.arm.enabled(2)
    bridge, r.bridge = r.bridge, None
    r.executor.remove_node(bridge)
    bridge.destroy_node()
    # the motors act on every frame it sent, however late a loaded machine runs their thread
    assert wait_until(lambda: r.arm.frames_received >= bridge.frames_sent)
    assert not r.arm.enabled(1) and not r.arm.enabled(2)


def test_a_motor_that_never_answers_stops_the_start_and_nothing_stays_enabled(rig):
    r = rig(start_bridge=False)
    r.arm.set_silent(2)
    with pytest.raises(ValueError, match=r"no feedback from joint2 \(command id 0x02, feedback id 0x12\)"):
        r.make_bridge()
    assert not r.arm.enabled(1)


def test_limits_are_read_from_the_motor_registers(rig):
    odd = MotorLimits(6.0, 20.0, 15.0)
    motors = [EmulatedMotor("joint1", "DM4340", 1, 0x11, limits=odd), EmulatedMotor("joint2", "DM4310", 2, 0x12)]
    r = rig(motors=motors)
    got = r.bridge.arm.limits[0]
    assert (got.pmax, got.vmax, got.tmax) == pytest.approx((6.0, 20.0, 15.0))
    # with the table's limits instead, feedback would decode with the wrong scale
    assert r.spin(until=lambda: len(r.states) > 5)
    assert abs(r.states[-1].position[0] - r.arm.q[0]) <= quantum(odd)[0] + 1e-6


def test_a_motor_silent_to_register_reads_keeps_the_table_limits(rig):
    odd = MotorLimits(6.0, 20.0, 15.0)
    motors = [EmulatedMotor("joint1", "DM4340", 1, 0x11, limits=odd), EmulatedMotor("joint2", "DM4310", 2, 0x12)]
    r = rig(motors=motors, start_bridge=False)
    # joint1 ignores its three reads (50 ms each), then answers from the enable onwards
    r.arm.set_silent(1)
    wake = threading.Timer(0.2, r.arm.set_silent, args=(1, False))
    wake.start()
    r.bridge = r.make_bridge()
    r.executor.add_node(r.bridge)
    wake.join()
    assert r.bridge.arm.limits[0] == motor_limits("DM4340")
    assert r.bridge.arm.limits[1].tmax == pytest.approx(motor_limits("DM4310").tmax)
    assert r.arm.enabled(1) and r.arm.enabled(2)


@pytest.mark.parametrize("overrides, message", [
    (dict(kp=[20.0]), "2 joint_names ['joint1', 'joint2'] but kp has 1"),
    (dict(motor_types=["DM4340", "DM1234"]), "unknown Damiao motor type 'DM1234'"),
    (dict(master_ids=[0x11, 0x11]), "master_ids has duplicates"),
    (dict(command_timeout_s=0.001), "command_timeout_s at least two periods"),
    (dict(can_interface="no_such_interface"), "cannot open CAN bus no_such_interface"),
])
def test_bad_parameters_fail_at_start_with_a_clear_message(rig, overrides, message):
    r = rig(start_bridge=False)
    with pytest.raises(ValueError) as err:
        r.make_bridge(**overrides)
    assert message in str(err.value)
    assert not r.arm.enabled(1)


def test_saved_command_log_is_what_went_on_the_bus(rig, tmp_path):
    """The log the bridge saves (sysid/damiao/save_commands), read back by CommandLog.load,
    against the frames a third bus saw, decoded by the codec: round for round, joint side."""
    motors = [EmulatedMotor("joint1", "DM4340", 1, 0x11, direction=-1, position_offset=0.2),
              EmulatedMotor("joint2", "DM4310", 2, 0x12)]
    r = rig(motors=motors, directions=[-1, 1], position_offsets=[0.2, 0.0], command_log_dir=str(tmp_path))
    assert r.spin(until=lambda: len(r.states) > 5)
    start, before = time.monotonic(), len(r.frames_to(motors[0].can_id))
    # a slow sweep with velocity and feed-forward, over 60 rounds of the bridge at least (their
    # wall time depends on the machine's load)
    while len(r.frames_to(motors[0].can_id)) - before < 60 and time.monotonic() - start < 20.0:
        t = time.monotonic() - start
        r.command(["joint1", "joint2"], [0.2 + 0.1 * np.sin(5 * t), -0.1 * np.sin(5 * t)],
                  [0.5 * np.cos(5 * t), -0.5 * np.cos(5 * t)], [0.3 * np.sin(9 * t), -0.2])
        r.spin(0.004)
    response = r.call("sysid/damiao/save_commands")
    assert response.success, response.message
    path = response.message.split(":")[0]
    log = CommandLog.load(path)
    np.testing.assert_array_equal(CommandLog.saved_effort_gains(path), [1.0, 1.0])
    assert log.joint_names == ("joint1", "joint2") and len(log.time) > 50
    for j, motor in enumerate(motors):
        # every round sends the motor one frame (MIT, special, or a refresh naming it on 0x7FF);
        # the register reads of the start come before the first round
        sent = [(stamp, data) for _, stamp, data in r.frames_to(motor.can_id)
                if not (len(data) > 2 and data[2] == protocol.OP_READ)][:len(log.time)]
        assert len(sent) == len(log.time)
        mit = np.array([data[:7] != b"\xff" * 7 and data[2] != protocol.OP_REFRESH for _, data in sent])
        assert mit.sum() > 50 and (~mit).sum() > 0      # the enable at start holds no command
        limits = r.arm.limits(motor.can_id)
        frames = [decode_mit(data, limits) for (_, data), m in zip(sent, mit) if m]
        d, offset = motor.direction, motor.position_offset
        np.testing.assert_allclose(log.q_des[mit, j], [d * f.position + offset for f in frames], rtol=0, atol=1e-12)
        np.testing.assert_allclose(log.dq_des[mit, j], [d * f.velocity for f in frames], rtol=0, atol=1e-12)
        np.testing.assert_allclose(log.tau_ff[mit, j], [d * f.torque for f in frames], rtol=0, atol=1e-12)
        np.testing.assert_allclose(log.kp[mit, j], [f.kp for f in frames], rtol=0, atol=1e-12)
        np.testing.assert_allclose(log.kd[mit, j], [f.kd for f in frames], rtol=0, atol=1e-12)
        assert np.all(log.kp[~mit, j] == 0) and np.all(log.kd[~mit, j] == 0) and np.all(log.tau_ff[~mit, j] == 0)
        # the sweep was tracked: commands with position gain and feed-forward are in the log
        assert np.ptp(log.q_des[log.kp[:, j] > 0, j]) > 0.05 and np.ptp(log.tau_ff[:, j]) > 0.1
        # the time of a row is when its round was sent, on the clock of the bus stamps
        lag = np.array([stamp for stamp, _ in sent]) - log.time
        assert lag.min() >= 0 and np.median(lag) < 0.005


def test_command_log_ring_keeps_the_newest_rounds_oldest_first():
    """The ring after it wrapped (and while it is written during the copy): whole rows, in order."""
    rows, n = 7, 2
    ring = types.SimpleNamespace(_lock=threading.Lock(), _log_rows=rows, arm=types.SimpleNamespace(n=n),
                                 _log_time=np.zeros(rows), _log_frames=bytearray(rows * n * 8),
                                 _log_mit=bytearray(rows * n), _log_next=0, _log_count=0)
    for k in range(17):                 # round k: time k, every byte of its frames k
        row = ring._log_next
        ring._log_time[row] = k
        ring._log_frames[row * n * 8:(row + 1) * n * 8] = bytes([k]) * (n * 8)
        ring._log_next, ring._log_count = (row + 1) % rows, min(ring._log_count + 1, rows)
    times, frames, mit = DamiaoBridge._log_snapshot(ring)
    # one round is assumed under way while copying (the control loop does not wait for the copy)
    assert times.tolist() == list(range(11, 17))
    assert [int(f[0, 0]) for f in frames] == times.tolist() and np.all(frames == times[:, None, None])


def test_effort_gains_file_makes_published_effort_the_true_torque(rig, tmp_path):
    """Motors whose torque estimate is off (true gains 0.8, 1.15), the gain file saying so:
    joint_states carries the torque the joints really get, and the feed-forward asked for is
    what they get. Velocity control (kp 0) against viscous friction: a steady torque."""
    gains = np.array([0.8, 1.15])
    motors = [EmulatedMotor("joint1", "DM4340", 1, 0x11, effort_gain=gains[0]),
              EmulatedMotor("joint2", "DM4310", 2, 0x12, effort_gain=gains[1])]
    path = EffortGains(("joint2", "joint1", "joint7"), gains[[1, 0]].tolist() + [1.0], np.zeros(3)).save(
        tmp_path / "effort_gains.json")
    # a command timeout far beyond the test: a loaded machine that holds this thread up must not
    # turn the feed-forward off (damping only) and leave the torque off its steady state
    r = rig(motors=motors, kp=[0.0, 0.0], kd=[2.0, 0.6], max_position_error=0.0, effort_gains_file=str(path),
            command_timeout_s=1000.0, arm_options=dict(joint_friction=lambda dq: 1.0 * dq))
    asked = np.array([1.0, 0.2])
    since = time.monotonic()
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], [0.0, 0.0], [0.0, 0.0], asked),
                                 r.bridge.tracking.all())[1])
    # 1 s of the arm's own (simulated) time, time constants under 0.2 s: the steady state
    tracked_at = r.arm.sim_time
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], [0.0, 0.0], [0.0, 0.0], asked),
                                 r.arm.sim_time >= tracked_at + 1.0)[1], limit=120.0)
    true_tau, published = r.arm.tau, np.array(r.states[-1].effort)
    steps = np.array([quantum(r.arm.limits(c))[2] for c in (1, 2)])
    assert np.all(np.abs(true_tau) > 10 * steps)     # the joints carry torque
    # the reply's 12-bit torque, scaled by the gain; the true torque drifts a little within a cycle
    np.testing.assert_array_less(np.abs(published - true_tau), gains * steps + 0.01 * np.abs(true_tau))
    # the motors decode t_ff = asked / gain, in every frame since the first command
    for c, motor_steps, want in zip((1, 2), steps, asked / gains):
        fed = [f.torque for f in r.mit_frames(c, since) if abs(f.torque) > motor_steps]
        assert fed and np.all(np.abs(np.array(fed) - want) < motor_steps + 1e-9)


def test_an_effort_gains_file_without_every_joint_stops_the_start(rig, tmp_path):
    path = EffortGains(("joint1",), np.array([0.9]), np.zeros(1)).save(tmp_path / "g.json")
    r = rig(start_bridge=False)
    with pytest.raises(ValueError, match=r"effort_gains_file: no effort gain for joints \['joint2'\]"):
        r.make_bridge(effort_gains_file=str(path))
    with pytest.raises(ValueError, match="effort gain file not found"):
        r.make_bridge(effort_gains_file=str(tmp_path / "none.json"))
    assert not r.arm.enabled(1)


def test_missing_parameters_are_named(context):
    with pytest.raises(ValueError, match=r"parameters \['joint_names', 'motor_types'"):
        DamiaoBridge(context=context)


def test_bus_errors_are_counted_not_raised(rig):
    r = rig()
    assert r.spin(until=lambda: len(r.states) > 5)
    r.bridge._bus.shutdown()   # the adapter goes away under the node
    assert r.spin(until=lambda: r.bridge.bus_errors > 10 and r.bridge.lost.all())
    # diagnostics (1 Hz) report it
    assert r.spin(until=lambda: any("send to" in s.message for s in
                                    statuses(r, "damiao_bridge: bus", DiagnosticStatus.WARN)))


SIGINT_SCRIPT = textwrap.dedent("""
    import faulthandler, sys, threading, time, signal, os
    faulthandler.dump_traceback_later(100, exit=True)  # a hang shows every thread's stack and ends
    sys.setswitchinterval(0.0005)
    import can
    from sysid_core.damiao import protocol
    from sysid_core.damiao.emulator import EmulatedMotor, VirtualDamiaoArm
    from sysid_ros import damiao_bridge
    arm = VirtualDamiaoArm({arm!r}, [EmulatedMotor("joint1", "DM4340", 1, 0x11),
                                     EmulatedMotor("joint2", "DM4310", 2, 0x12)], channel="sigint")
    monitor = can.Bus(interface="virtual", channel="sigint")
    arm.start()
    def interrupt():
        while not (arm.enabled(1) and arm.enabled(2)):
            time.sleep(0.01)
        print("enabled", flush=True)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    damiao_bridge.main(["--ros-args"] + {args!r})
    # what the bridge sent (every frame but the motors' replies), and the disable frames among it
    frames = []
    while (msg := monitor.recv(timeout=0)) is not None:
        if msg.arbitration_id not in (0x11, 0x12):
            frames.append((msg.arbitration_id, bytes(msg.data)))
    print("disable frames to", sorted({{i for i, data in frames if data == protocol.disable_frame()}}), flush=True)
    # the motors act on all of it, however late a loaded machine runs their thread
    while arm.frames_received < len(frames):
        time.sleep(0.01)
    print("after main: enabled", arm.enabled(1), arm.enabled(2), flush=True)
    arm.stop()
""")


def test_ctrl_c_disables_every_motor(tmp_path):
    args = ["-p", "can_interface:=virtual", "-p", "can_channel:=sigint"]
    for key, value in LAYOUT.items():
        text = "[" + ", ".join(f"'{v}'" if isinstance(v, str) else repr(v) for v in value) + "]" \
            if isinstance(value, list) else repr(value)
        args += ["-p", f"{key}:={text}"]
    script = tmp_path / "run.py"
    script.write_text(SIGINT_SCRIPT.format(arm=ARM, args=args))
    done = run_python(str(script), timeout=150.0)
    assert "enabled" in done.stdout, done.stderr
    assert "disable frames to [1, 2]" in done.stdout, done.stdout + done.stderr
    assert "after main: enabled False False" in done.stdout, done.stdout + done.stderr


def test_the_executable_exits_1_on_bad_parameters():
    done = run_python("-m", "sysid_ros.damiao_bridge", "--ros-args", "-p", "joint_names:=['a']")
    assert done.returncode == 1
    assert "error: parameters ['motor_types'" in done.stderr and "Traceback" not in done.stderr


# --- faults latch; noise; requests that do not starve the control loop -----------------------------

def track(r, target=(0.0, 0.0)):
    """Command both joints until the bridge tracks them."""
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], target), r.bridge.tracking.all())[1])


def keep_commanding(r, rounds, target=(0.0, 0.0)):
    """Command both joints while the bridge sends ``rounds`` rounds of frames (as many cycles,
    however long a loaded machine takes for them)."""
    first = len(r.frames)

    def enough():
        r.command(["joint1", "joint2"], target)
        sent = [arb for _, arb, _, _ in r.frames[first:]]
        return sent.count(1) >= rounds and sent.count(2) >= rounds
    assert r.spin(until=enough)


def test_a_fault_that_clears_itself_stays_latched_until_clear_errors(rig):
    r = rig()
    track(r)
    # over-current for 0.1 s, then the drive reports "enabled" again by itself
    r.arm.script_status(2, [(protocol.STATUS_OVER_CURRENT, 0.1), (protocol.STATUS_ENABLED, None)])
    assert r.spin(until=lambda: r.bridge.faults[1] is not None)
    fault_seen = time.monotonic()
    assert r.spin(until=lambda: (r.command(["joint1", "joint2"], [0.0, 0.0]),
                                 r.bridge.status[1] == protocol.STATUS_ENABLED)[1])
    keep_commanding(r, 50)
    assert r.arm.enabled(2)                                     # re-enabled by itself
    # yet no motor got a position gain since the fault: every frame damping only
    assert damping_only(r, 1, fault_seen) and damping_only(r, 2, fault_seen)
    assert not r.bridge.tracking.any() and "over-current" in r.bridge.faults[1]
    response = r.call("sysid/damiao/clear_errors")
    assert response.success, response.message
    track(r)
    assert r.mit_frames(1)[-1].kp == pytest.approx(20.0, abs=0.2)     # the last cycle's frame


@pytest.mark.parametrize("status", [protocol.STATUS_DISABLED, 0x5, 0xF])
def test_a_motor_leaving_enable_or_reporting_an_unknown_status_is_a_fault_of_the_arm(rig, status):
    r = rig()
    track(r)
    r.arm.script_status(2, [(status, None)])
    assert r.spin(until=lambda: r.bridge.faults[1] is not None)
    fault_seen = time.monotonic()
    keep_commanding(r, 50)
    # the other joint is not tracked around the limp one
    assert damping_only(r, 1, fault_seen) and damping_only(r, 2, fault_seen)
    assert r.arm.enabled(1)     # damped, not dropped
    assert r.spin(until=lambda: any(protocol.status_text(status) in s.message for s in
                                    statuses(r, "damiao_bridge: joint2", DiagnosticStatus.ERROR)))
    response = r.call("sysid/damiao/clear_errors")
    assert response.success, response.message
    track(r)
    assert r.arm.enabled(2)


def noise_frames(rng, count, master_id, can_id, limits, far=None):
    """Junk on a feedback id that the protocol lets the bridge reject: wrong motor-id nibble,
    wrong length, remote frames and, with ``far`` (rad), right nibble with a position that far
    from the arm's."""
    frames = []
    for k in range(count):
        kind = k % (3 if far is None else 4)
        data = bytearray(rng.integers(0, 256, 8, dtype=np.uint8).tobytes())
        if kind == 0:
            data[0] = (data[0] & 0xF0) | ((can_id + 1 + rng.integers(0, 15)) & 0xF)
            frames.append(can.Message(arbitration_id=master_id, data=data, is_extended_id=False))
        elif kind == 1:
            frames.append(can.Message(arbitration_id=master_id, data=data[:int(rng.integers(0, 8))],
                                      is_extended_id=False))
        elif kind == 2:
            frames.append(can.Message(arbitration_id=master_id, is_remote_frame=True, dlc=8, is_extended_id=False))
        else:
            status = int(rng.choice([protocol.STATUS_OVER_CURRENT, protocol.STATUS_DISABLED, 0xF]))
            data = protocol.encode_feedback(protocol.Feedback(can_id & 0xF, status, far, 0.0, 0.0, 30, 30), limits)
            frames.append(can.Message(arbitration_id=master_id, data=data, is_extended_id=False))
    return frames


def test_noise_on_a_feedback_id_is_rejected_counted_reported_and_not_logged_per_frame(rig, capfd):
    r = rig()
    track(r)
    noise = can.Bus(interface="virtual", channel=r.channel)
    rng = np.random.default_rng(12)
    # 6.9 rad away: for joint1's DM4340 at its VMAX of 10 rad/s, 0.6 s from the arm at rest
    frames = noise_frames(rng, 200, 0x11, 1, r.arm.limits(1), far=6.9) + \
        noise_frames(rng, 200, 0x12, 2, r.arm.limits(2))
    frames = [frames[k] for k in rng.permutation(len(frames))]
    rejected = r.bridge.frames_rejected
    noisy = time.monotonic()
    armed = []
    try:
        for burst in np.array_split(np.arange(len(frames)), 100):
            for k in burst:
                noise.send(frames[k])
            r.command(["joint1", "joint2"], [0.0, 0.0])
            r.spin(0.004)
            armed.append(r.bridge.supervisor.may_track)
    finally:
        noise.shutdown()
    track(r)
    # every frame read (a cycle reads at most MAX_FRAMES_PER_CYCLE), then a few more cycles
    assert r.spin(until=lambda: r.bridge.frames_rejected - rejected >= len(frames))
    keep_commanding(r, 5)
    assert r.bridge.frames_rejected - rejected == len(frames)
    # nothing of it was believed: no fault, tracking allowed throughout, no 6.9 rad in joint_states
    assert all(armed) and r.bridge.faults == [None, None]
    assert all(max(abs(q) for q in m.position) < 0.1 for m in r.states)
    assert max(f.kp for f in r.mit_frames(1, noisy)) == pytest.approx(20.0, abs=0.2)
    r.spin(1.1)
    bus = [s for a in r.diagnostics for s in a.status if s.name == "damiao_bridge: bus"][-1]
    assert bus.level == DiagnosticStatus.WARN and "frames ignored" in bus.message
    assert int({v.key: v.value for v in bus.values}["frames_rejected"]) == r.bridge.frames_rejected
    # 400 rejected frames: one log line per WARN_PERIOD_S at most (the rest counted)
    lines = capfd.readouterr().err.count("CAN frame ignored")
    assert 1 <= lines <= 1 + (time.monotonic() - noisy) // WARN_PERIOD_S


@pytest.mark.parametrize("service", ["enable", "disable", "clear_errors"])
def test_a_request_with_a_silent_motor_does_not_starve_the_others(rig, service):
    # silence is noticed after 0.4 s here: the request, not the silence, meets the motor first
    r = rig(feedback_timeout_cycles=200)
    if service == "enable":
        assert r.call("sysid/damiao/disable").success
    r.arm.set_silent(2)
    if service == "clear_errors":
        assert r.spin(until=lambda: r.bridge.faults[1] is not None)
    r.spin(0.02)
    start, called = len(r.frames), time.time()
    response = r.call(f"sysid/damiao/{service}")
    answered = time.time()
    assert not response.success and "joint2 (no answer to" in response.message
    special = {"enable": protocol.enable_frame(), "disable": protocol.disable_frame(),
               "clear_errors": protocol.clear_error_frame()}[service]
    requests = [k for k, _, data in r.frames_to(2) if k >= start and data == special]
    to_joint1 = [(k, stamp) for k, stamp, _ in r.frames_to(1) if k >= start and called <= stamp <= answered]
    # the request sent its frame for many cycles, and motor 1 got its own frame in every one of them
    assert len(requests) >= r.bridge.supervisor.request_cycles
    assert sum(requests[0] < k < requests[-1] for k, _ in to_joint1) >= len(requests) - 1
    # and never waited for long: no gap covers half of the request (a blocking request is one gap)
    gaps = np.diff([called] + [stamp for _, stamp in to_joint1] + [answered])
    print(f"{service}: {len(requests)} frames to the silent motor in {(answered - called) * 1e3:.0f} ms; "
          f"longest gap between frames to the other {gaps.max() * 1e3:.1f} ms")
    assert gaps.max() < 0.5 * (answered - called)


def test_topics_and_services_are_relative_to_the_namespace(rig):
    r = rig(namespace="arm_a")
    assert r.bridge.get_namespace() == "/arm_a"
    assert r.spin(until=lambda: len(r.states) > 5)        # on /arm_a/joint_states
    track(r, (0.05, 0.05))                                # from /arm_a/sysid/joint_command
    assert r.call("sysid/damiao/disable").success         # /arm_a/sysid/damiao/disable
    assert not r.arm.enabled(1) and not r.arm.enabled(2)
    names = dict(r.probe.get_topic_names_and_types())
    assert "/arm_a/joint_states" in names and "/joint_states" not in names
    assert r.spin(until=lambda: statuses(r, "arm_a/damiao_bridge: joint1"))


def random_junk(rng, master_ids, avoid, believable):
    """One random frame: any id but those in ``avoid`` (standard or extended), 0-8 bytes (a few
    CAN FD frames of up to 64), remote frames; on a feedback id (``master_ids``) an 8-byte payload
    carries a wrong motor-id nibble unless ``believable``, in which case it is a random payload
    with the right nibble (noise the screen cannot tell from the motor once in a while)."""
    kind = rng.random()
    if kind < 0.5:
        arbitration_id = int(rng.choice(master_ids))
    elif kind < 0.9:
        arbitration_id = int(rng.integers(0, 0x7FF))
        while arbitration_id in avoid:
            arbitration_id = int(rng.integers(0, 0x7FF))
    else:
        return can.Message(arbitration_id=int(rng.integers(0x800, 1 << 29)), is_extended_id=True,
                           data=rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8).tobytes())
    if rng.random() < 0.1:
        return can.Message(arbitration_id=arbitration_id, is_extended_id=False, is_remote_frame=True,
                           dlc=int(rng.integers(0, 9)))
    fd = rng.random() < 0.05
    length = int(rng.choice([12, 16, 24, 32, 48, 64])) if fd else int(rng.choice([8, 8, 8, *range(8)]))
    data = bytearray(rng.integers(0, 256, length, dtype=np.uint8).tobytes())
    if arbitration_id in master_ids and length == 8:
        motor_nibble = (arbitration_id - 0x10) & 0xF      # this rig: master id = can id + 0x10
        if believable:
            data[0] = (data[0] & 0xF0) | motor_nibble
        elif data[0] & 0xF == motor_nibble:
            data[0] ^= 0x1
    return can.Message(arbitration_id=arbitration_id, is_extended_id=False, is_fd=fd, data=bytes(data))


def test_fuzz_random_can_frames(rig):
    """Random frames in random bursts at the bridge while it tracks: it lives, its memory does
    not grow, every reply of the motors is used, what can be rejected is, and no motor gets a
    position gain once noise it could not tell from a motor has latched a fault."""
    import tracemalloc
    r = rig()
    track(r)
    rng = np.random.default_rng(20240612)
    noise = can.Bus(interface="virtual", channel=r.channel)
    masters = (0x11, 0x12)
    # junk addressed to the motors (their command ids, 0x7FF) would change what they do: this
    # test is about what the bridge makes of what it hears
    avoid = {1, 2, protocol.MANAGEMENT_ID, *masters}

    junk_sent = [0]     # frames the noise bus sent, whatever their id

    def quiet_counts():
        """(replies the motors sent, frames the bridge accepted, rejected) with nothing in flight:
        nobody spins (the bridge sends nothing), the motors have read every frame sent so far
        however late their thread runs, and the bridge reads all that waits for it, as a cycle
        starts by doing."""
        assert wait_until(lambda: r.arm.frames_received >= r.bridge.frames_sent + junk_sent[0])
        replies = r.arm.stats()["frames_sent"]     # under the emulator's lock: the last reply is out
        while r.bridge._receive():
            pass
        return replies, r.bridge.frames_received, r.bridge.frames_rejected

    def phase(seconds, believable, bursts_at_least):
        # as long as ``seconds`` and at least that many bursts: how much junk the bridge gets must
        # not depend on how fast a loaded machine runs this loop
        sent_to_masters = bursts = 0
        first_fault_frame = None
        always_armed = True
        end = time.monotonic() + seconds
        while time.monotonic() < end or bursts < bursts_at_least:
            for _ in range(int(rng.integers(1, 60))):
                msg = random_junk(rng, masters, avoid, believable)
                noise.send(msg)
                junk_sent[0] += 1
                sent_to_masters += msg.arbitration_id in masters and not msg.is_extended_id
            bursts += 1
            r.command(["joint1", "joint2"], [0.0, 0.0])
            r.executor.spin_once(timeout_sec=0.002)
            r.spin(float(rng.choice([0.0, 0.002, 0.004, 0.01])))
            always_armed &= r.bridge.supervisor.may_track
            if first_fault_frame is None and any(f is not None for f in r.bridge.faults):
                first_fault_frame = len(r.frames)     # every frame from here on was sent after the latch
        return sent_to_masters, bursts, first_fault_frame, always_armed

    def bridge_memory():
        """Bytes held by objects the bridge's code allocated while tracemalloc traced."""
        return sum(stat.size for stat in tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, "*/sysid_ros/damiao_bridge.py"),
             tracemalloc.Filter(True, "*/sysid_core/damiao/*")]).statistics("filename"))

    try:
        # 1. junk the protocol lets the bridge reject, interleaved with the motors' replies
        replies0, accepted0, rejected0 = quiet_counts()
        states0, cycles0 = len(r.states), r.bridge.cycles
        junk, bursts, fault_frame, always_armed = phase(0.8, believable=False, bursts_at_least=20)
        replies1, accepted1, rejected1 = quiet_counts()
        assert rejected1 - rejected0 == junk > 100 and bursts > 10
        assert accepted1 - accepted0 == replies1 - replies0 > 0      # every reply used, nothing else
        # noise changed nothing: never a fault, tracking allowed throughout, joint_states on
        assert fault_frame is None and always_armed
        track(r)
        assert len(r.states) - states0 >= 0.5 * (r.bridge.cycles - cycles0)

        # 2. the same and believable junk: some of it passes the screen, reads as a fault and
        # latches; memory traced (slow: tracemalloc hooks every allocation) in two halves
        replies1, accepted1, rejected1 = quiet_counts()
        tracemalloc.start()
        junk_a, _, fault_frame, _ = phase(0.4, believable=True, bursts_at_least=10)
        memory1 = bridge_memory()
        junk_b, _, fault_frame_b, _ = phase(0.4, believable=True, bursts_at_least=10)
        memory2 = bridge_memory()
        tracemalloc.stop()
        replies2, accepted2, rejected2 = quiet_counts()
    finally:
        tracemalloc.stop()
        noise.shutdown()
    assert (accepted2 - accepted1) + (rejected2 - rejected1) == (replies2 - replies1) + junk_a + junk_b
    assert accepted2 - accepted1 >= replies2 - replies1
    fault_frame = fault_frame if fault_frame is not None else fault_frame_b
    assert fault_frame is not None, "hundreds of believable frames and not one latched a fault"
    after = [decode_mit(data, r.arm.limits(arb)) for _, arb, data, _ in r.frames[fault_frame:]
             if arb in (1, 2) and data[:7] != b"\xff" * 7]
    assert after and max(f.kp for f in after) == 0.0
    assert r.bridge.cycles > cycles0 and len(r.states) > states0      # alive, still publishing
    print(f"fuzz: {r.bridge.cycles - cycles0} cycles, {rejected2 - rejected0} frames rejected, "
          f"{accepted2 - accepted0} accepted, {r.bridge.frames_other} on other ids; bridge memory "
          f"{memory1 / 1024:.1f} KiB after half the traced phase, {memory2 / 1024:.1f} KiB after all of it")
    assert memory2 - memory1 < 16 * 1024
