"""Both encoders of DM-J*-2EC motors: the virtual arm's elastic transmission and registers 80/81,
the read schedule and pairing (sysid_core.damiao.dual_encoder), and the bridge's motor_states.

Oracles: the emulator's true link and rotor positions (MuJoCo's state), MuJoCo's own inverse
dynamics of the rigid arm for the static load, hand-computed schedules and unwrapping, and a
monitor bus that sees every frame the bridge sends. Counts are checked against cycles and
simulated time, never against the wall clock: the suite runs on slow, loaded machines.
"""
import math
import time
import uuid

import can
import mujoco
import numpy as np
import pytest
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from sysid_core.damiao import protocol as dm
from sysid_core.damiao.dual_encoder import DualEncoderReader, bus_load, max_rate, unwrap_near
from sysid_core.damiao.emulator import EmulatedMotor, VirtualDamiaoArm
from sysid_core.damiao.protocol import MitCommand, motor_limits, resolution
from sysid_core.simulation.elastic import Transmission
from sysid_ros.identifier import Identifier

from conftest import MODELS, ROBOTS, emulator_answers_in_time
from test_damiao_bridge import Rig as BridgeRig

VERTICAL = str(MODELS / "planar_2r_vertical.xml")    # gravity in the plane of motion
OPENARM = str(ROBOTS / "openarm_class.xml")
# a transmission of the 2R arm (which has no armature of its own: the rotors' inertia is given)
STIFFNESS = np.array([200.0, 120.0])
TRANSMISSION = Transmission(stiffness=STIFFNESS, damping=np.array([5.0, 2.0]), rotor_inertia=np.array([0.02, 0.01]))
KP, KD = np.array([20.0, 10.0]), np.array([2.0, 0.6])
# hanging straight down (link 1 along -y) is the rest pose; this one loads both joints
HANG = np.array([-math.pi / 2, 0.0])
POSE = HANG + np.array([0.3, 0.3])
TYPES = ("DM4340", "DM4310")
LIMITS = tuple(motor_limits(t) for t in TYPES)


def pos_lsb(lim):
    return resolution(-lim.pmax, lim.pmax, dm.POSITION_BITS)


def wrap(x):
    return x - 2 * math.pi * math.floor((x + math.pi) / (2 * math.pi))


def gravity_torque(path, q):
    """Joint torques (n,) N m that hold the rigid arm of ``path`` at rest at ``q``: MuJoCo's mj_inverse."""
    model = mujoco.MjModel.from_xml_path(path)
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_inverse(model, data)
    return data.qfrc_inverse.copy()


# --- the virtual arm with a transmission ---------------------------------------------------------

class Host:
    """A manual-mode virtual arm and a host bus on a private channel."""

    def __init__(self, path, motors, **kwargs):
        self.channel = f"dual-{uuid.uuid4().hex}"
        self.arm = VirtualDamiaoArm(path, motors, channel=self.channel, realtime=False, **kwargs)
        self.arm.start()
        self.bus = can.Bus(interface="virtual", channel=self.channel)

    def exchange(self, arbitration_id, data):
        self.bus.send(can.Message(arbitration_id=arbitration_id, data=bytes(data), is_extended_id=False))
        self.arm.poll()
        replies = []
        while (msg := self.bus.recv(timeout=0)) is not None:
            replies.append(msg)
        assert len(replies) == 1, replies
        return replies[0]

    def read(self, can_id, rid):
        reply = self.exchange(*dm.read_register_frame(can_id, rid))
        can_id_back, op, rid_back, value = dm.decode_register_reply(reply.data)
        assert (can_id_back, op, rid_back) == (can_id, dm.OP_READ, rid)
        return value

    def hold(self, can_ids, limits, q_motor, kp, kd, tau):
        """Enable the motors and send each its MIT hold (motor units); returns the feedbacks."""
        out = []
        for i, can_id in enumerate(can_ids):
            self.exchange(can_id, dm.enable_frame())
            msg = self.exchange(can_id, dm.encode_mit(MitCommand(q_motor[i], 0.0, kp[i], kd[i], tau[i]), limits[i]))
            out.append(dm.decode_feedback(msg.data, limits[i]))
        return out

    def close(self):
        self.arm.stop()
        self.bus.shutdown()


@pytest.fixture
def host():
    hosts = []

    def make(*args, **kwargs):
        hosts.append(Host(*args, **kwargs))
        return hosts[-1]
    yield make
    for h in hosts:
        h.close()


def two_motors(direction=1, offset=0.0):
    return [EmulatedMotor("joint1", TYPES[0], 1, 0x11),
            EmulatedMotor("joint2", TYPES[1], 2, 0x12, direction=direction, position_offset=offset)]


def test_registers_and_feedback_of_the_elastic_arm_under_a_static_load(host):
    # joint2's motor turned round and offset so that its output-shaft angle crosses +-pi
    direction, offset = -1, 3.5
    h = host(VERTICAL, two_motors(direction, offset), transmission=TRANSMISSION, drive_gains=(KP, KD),
             initial_positions=POSE)
    # the timestep: the file's 1 ms is short enough for the spring and these gains, not for the
    # MIT frame's largest (the default), which need it cut in whole substeps
    assert h.arm._dt == 1e-3
    fastest = VirtualDamiaoArm(VERTICAL, two_motors(), realtime=False, transmission=TRANSMISSION)._dt
    assert fastest < 1e-3 and 1e-3 / fastest == pytest.approx(round(1e-3 / fastest), abs=1e-9)
    load = gravity_torque(VERTICAL, POSE)
    sign = np.array([1.0, direction])
    motor_target = sign * (POSE - np.array([0.0, offset]))
    h.hold((1, 2), LIMITS, motor_target, KP, KD, sign * load)
    h.arm.advance(6.0)
    q, motor_q = h.arm.q, h.arm.motor_q
    assert np.abs(h.arm.dq).max() < 1e-4 and np.abs(h.arm.motor_dq).max() < 1e-4     # at rest
    # the transmission passes the static load: k delta = -load at the link's pose
    deflection = q - motor_q
    expected = -gravity_torque(VERTICAL, q) / STIFFNESS
    assert np.all(np.abs(expected) > 0.005)
    np.testing.assert_allclose(deflection, expected, rtol=0.03)
    # registers: 80 the rotor, 81 the link wrapped into [-pi, pi), both in the motor's units
    offsets = np.array([0.0, offset])
    for i, can_id in enumerate((1, 2)):
        p_m, xout = h.read(can_id, dm.RID_MOTOR_POSITION), h.read(can_id, dm.RID_OUTPUT_POSITION)
        assert p_m == pytest.approx(sign[i] * (motor_q[i] - offsets[i]), abs=1e-6)
        assert -math.pi <= xout < math.pi + 1e-6
        assert xout == pytest.approx(wrap(sign[i] * (q[i] - offsets[i])), abs=1e-6)
        # feedback reports the motor side, within the 16-bit quantum (not the link: delta >> quantum)
        fb = dm.decode_feedback(h.exchange(*dm.refresh_frame(can_id)).data, LIMITS[i])
        assert abs(fb.position - p_m) <= pos_lsb(LIMITS[i]) + 1e-6
        assert abs(deflection[i]) > 10 * pos_lsb(LIMITS[i])
    # joint2's output angle is past +pi: xout wrapped by one turn, p_m not
    assert sign[1] * (q[1] - offset) > math.pi and h.read(2, dm.RID_OUTPUT_POSITION) < 0
    # the encoders are read-only: a write is answered with the value and changes nothing
    frame = dm.write_register_frame(1, dm.RID_MOTOR_POSITION, 1.0, allow_unknown=True)
    assert dm.decode_register_reply(h.exchange(*frame).data)[3] == pytest.approx(motor_q[0], abs=1e-6)


def test_the_elastic_openarm_holds_its_gravity_load_with_its_friction_law(host):
    # the file's damping and friction loss move to the rotors (frictionloss="law", the default)
    types = ("DM8009", "DM8009", "DM4340", "DM4340", "DM4310", "DM4310", "DM4310")
    motors = [EmulatedMotor(f"joint{i + 1}", t, i + 1, 0x11 + i) for i, t in enumerate(types)]
    k = np.array([3000.0, 3000.0, 1500.0, 1500.0, 400.0, 400.0, 400.0])
    kp, kd = np.array([100.0, 100.0, 50.0, 50.0, 20.0, 20.0, 20.0]), np.array([3.0, 3.0, 1.5, 1.5, 0.5, 0.5, 0.5])
    pose = np.array([0.5, 0.4, 0.3, 1.0, 0.2, 0.3, 0.1])
    h = host(OPENARM, motors, transmission=Transmission(k, np.ones(7)), drive_gains=(kp, kd), initial_positions=pose)
    h.hold(range(1, 8), [motor_limits(t) for t in types], pose, kp, kd, gravity_torque(OPENARM, pose))
    h.arm.advance(2.0)
    deflection = h.arm.q - h.arm.motor_q
    expected = -gravity_torque(OPENARM, h.arm.q) / k
    big = np.abs(expected) > 1e-4
    np.testing.assert_allclose(deflection[big], expected[big], rtol=0.03)
    np.testing.assert_allclose(deflection, expected, atol=5e-6)


def test_rigid_arm_answers_both_encoder_registers_with_its_one_position(host):
    h = host(VERTICAL, two_motors(-1, -3.0), initial_positions=POSE)
    q = h.arm.q
    np.testing.assert_array_equal(h.arm.motor_q, q)
    assert h.read(1, dm.RID_MOTOR_POSITION) == pytest.approx(q[0], abs=1e-6)
    assert h.read(1, dm.RID_OUTPUT_POSITION) == pytest.approx(wrap(q[0]), abs=1e-6)
    assert h.read(2, dm.RID_MOTOR_POSITION) == pytest.approx(-(q[1] + 3.0), abs=1e-6)
    assert h.read(2, dm.RID_OUTPUT_POSITION) == pytest.approx(wrap(-(q[1] + 3.0)), abs=1e-6)


def test_a_transmission_needs_a_model_file():
    with pytest.raises(ValueError, match="file"):
        VirtualDamiaoArm(mujoco.MjModel.from_xml_path(VERTICAL), two_motors(), realtime=False,
                         transmission=TRANSMISSION)
    with pytest.raises(ValueError, match="drive_gains"):
        VirtualDamiaoArm(VERTICAL, two_motors(), realtime=False, transmission=TRANSMISSION, drive_gains=(KP,))


# --- schedule, pairing, unwrapping ---------------------------------------------------------------

def run_cycles(reader, cycles, answer=None):
    """Drive ``reader`` for ``cycles`` cycles; each read is answered in the next cycle by
    ``answer(joint, rid)`` (a value, or None for no reply). Returns (reads [(cycle, joint, rid)],
    completed [(cycle, joint, delta)])."""
    reads, completed, waiting = [], [], []
    for c in range(cycles):
        for joint, rid in waiting:
            value = None if answer is None else answer(joint, rid)
            if value is not None:
                reader.reply(joint, rid, value)
        waiting = []
        completed += [(c, j, d) for j, d in reader.end_receive(np.zeros(reader.n)).items()]
        read = reader.request()
        if read is not None:
            reads.append((c, *read))
            waiting.append(read)
    return reads, completed


def test_schedule_one_read_per_cycle_pairs_back_to_back_round_robin_at_the_rate():
    reader = DualEncoderReader([1, -1, 1], rate_hz=10.0, control_rate_hz=500.0, timeout_cycles=3)
    reads, completed = run_cycles(reader, 1000, answer=lambda j, rid: 0.0)
    cycles = [c for c, _, _ in reads]
    assert len(set(cycles)) == len(cycles)                  # never two reads in a cycle
    # each pair: RID 80 then RID 81 in the next cycle; motors in turn
    starts = [(c, j) for c, j, rid in reads if rid == dm.RID_MOTOR_POSITION]
    seconds = {(c, j) for c, j, rid in reads if rid == dm.RID_OUTPUT_POSITION}
    assert all((c + 1, j) in seconds for c, j in starts) and len(seconds) == len(starts)
    assert [j for _, j in starts] == [k % 3 for k in range(len(starts))]
    # 1000 cycles at 500 Hz are 2 s: 20 pairs per motor at 10 Hz, evenly spaced (500 / 30 cycles)
    assert len(starts) == reader.pairs_due(1000) == reader.pairs_started == 60
    assert np.ptp(np.diff([c for c, _ in starts])) <= 1
    assert reader.pairs_completed == 60 - reader.in_flight() and reader.reads_lost == 0
    assert len(completed) == reader.pairs_completed


def test_the_ceiling_reads_every_cycle_and_a_faster_rate_is_refused():
    assert max_rate(7, 500.0) == pytest.approx(500.0 / 14)
    reader = DualEncoderReader([1] * 7, rate_hz=max_rate(7, 500.0), control_rate_hz=500.0, timeout_cycles=3)
    reads, _ = run_cycles(reader, 140, answer=lambda j, rid: 0.0)
    assert [c for c, _, _ in reads] == list(range(140))
    with pytest.raises(ValueError, match=r"motor_states_hz 40 needs 560 register reads .* at most 35.7143 Hz"):
        DualEncoderReader([1] * 7, rate_hz=40.0, control_rate_hz=500.0, timeout_cycles=3)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="motor_states_hz"):
            DualEncoderReader([1] * 7, rate_hz=bad, control_rate_hz=500.0, timeout_cycles=3)
    with pytest.raises(ValueError, match="timeout_cycles"):
        DualEncoderReader([1], rate_hz=1.0, control_rate_hz=500.0, timeout_cycles=0)


def test_bus_load_figures():
    load = bus_load(7, 500.0, 10.0)
    np.testing.assert_allclose(load["mit"], [0.777, 0.84, 0.945])
    np.testing.assert_allclose(load["reads"], [0.03108, 0.0336, 0.0378])


def test_unwrap_across_pi_and_direction():
    assert unwrap_near(-3.13, 3.13) == pytest.approx(-3.13 + 2 * math.pi)
    assert unwrap_near(3.13, -3.13) == pytest.approx(3.13 - 2 * math.pi)
    assert unwrap_near(0.5, 0.5 + 4 * math.pi) == pytest.approx(0.5 + 4 * math.pi)
    # motor side at 3.13 rad (multi-turn p_m), output shaft 0.0232 rad ahead of it: xout reads it
    # wrapped to -3.13; joint 1 is turned round (direction -1)
    reader = DualEncoderReader([1, -1], rate_hz=50.0, control_rate_hz=500.0, timeout_cycles=2)
    link = 3.13 + 0.0232
    values = {dm.RID_MOTOR_POSITION: 3.13, dm.RID_OUTPUT_POSITION: wrap(link)}
    assert values[dm.RID_OUTPUT_POSITION] < 0
    _, completed = run_cycles(reader, 12, answer=lambda j, rid: values[rid] + 2 * math.pi * 3 * (rid == 80))
    deltas = {j: d for _, j, d in completed}
    assert deltas[0] == pytest.approx(0.0232, abs=1e-9)
    assert deltas[1] == pytest.approx(-0.0232, abs=1e-9)


def test_pairing_carries_p_m_to_the_instant_xout_was_sampled():
    # the arm turns at 1 rad/s; at 500 Hz the registers are 2 ms apart: 2 mrad of travel, ten
    # times the 0.2 mrad deflection, is taken out using the feedback of each reply's cycle
    reader = DualEncoderReader([1], rate_hz=50.0, control_rate_hz=500.0, timeout_cycles=2)
    assert reader.request() == (0, dm.RID_MOTOR_POSITION)        # sampled at t = 0
    reader.reply(0, dm.RID_MOTOR_POSITION, 1.0)
    assert reader.end_receive([1.0]) == {}
    assert reader.request() == (0, dm.RID_OUTPUT_POSITION)       # sampled 2 ms later
    reader.reply(0, dm.RID_OUTPUT_POSITION, 1.002 + 0.0002)
    assert reader.end_receive([1.002]) == {0: pytest.approx(0.0002, abs=1e-12)}


def test_a_lost_reply_drops_the_pair_and_a_late_one_is_ignored():
    reader = DualEncoderReader([1, 1], rate_hz=25.0, control_rate_hz=500.0, timeout_cycles=3)
    assert reader.request() == (0, dm.RID_MOTOR_POSITION)
    reader.reply(0, dm.RID_MOTOR_POSITION, 0.1)
    assert reader.end_receive([0.1, 0.0]) == {}
    assert reader.request() == (0, dm.RID_OUTPUT_POSITION)      # sent in cycle 1: never answered
    for _ in range(2):
        assert reader.end_receive([0.1, 0.0]) == {} and reader.in_flight() == 1
        assert reader.request() is None
    assert reader.end_receive([0.1, 0.0]) == {}                  # 3 cycles after it was sent
    assert (reader.reads_lost, reader.pairs_dropped, reader.in_flight()) == (1, 1, 0)
    assert not reader.reply(0, dm.RID_OUTPUT_POSITION, 0.1)      # too late
    assert not reader.reply(1, dm.RID_MOTOR_POSITION, 0.1)       # never asked
    assert reader.replies_unexpected == 2
    # the next pair (the other motor) goes on as usual
    _, completed = run_cycles(reader, 30, answer=lambda j, rid: 0.5 if rid == 81 else 0.25)
    assert {j for _, j, _ in completed} == {0, 1} and all(d == pytest.approx(0.25) for _, _, d in completed)
    assert reader.pairs_completed + reader.pairs_dropped + reader.in_flight() == reader.pairs_started


def test_a_duplicate_reply_is_ignored():
    reader = DualEncoderReader([1], rate_hz=50.0, control_rate_hz=500.0, timeout_cycles=2)
    reader.request()
    assert reader.reply(0, dm.RID_MOTOR_POSITION, 0.1)
    assert not reader.reply(0, dm.RID_MOTOR_POSITION, 0.2)
    assert not reader.reply(0, dm.RID_OUTPUT_POSITION, 0.2)      # not asked yet
    assert reader.replies_unexpected == 2


# --- the bridge against the virtual elastic arm --------------------------------------------------

BRIDGE_KP, BRIDGE_KD = [60.0, 30.0], [4.0, 1.5]
LAYOUT = {
    "joint_names": ["joint1", "joint2"], "motor_types": list(TYPES), "can_ids": [1, 2],
    "master_ids": [0x11, 0x12], "kp": BRIDGE_KP, "kd": BRIDGE_KD,
    "joint_lower_limits": [-2.5, -2.5], "joint_upper_limits": [2.5, 2.5],
    "control_rate_hz": 500.0, "command_timeout_s": 0.1, "read_limits_from_motor": False,
    # the emulated motors answer from a thread of this process, which a loaded machine may hold
    # up for several cycles: silence (and a read's reply) is given up only after 0.1 s
    "feedback_timeout_cycles": 50,
}


@pytest.fixture(scope="module")
def context(context):
    with emulator_answers_in_time():
        yield context


class Rig(BridgeRig):
    """The elastic virtual arm in real time, the bridge (started by ``start_bridge``), a probe
    node listening to motor_states too, and a bus monitor (test_damiao_bridge's rig)."""

    def __init__(self, context, **parameters):
        super().__init__(context, motors=two_motors(), start_bridge=False, model=VERTICAL, layout=LAYOUT,
                         arm_options=dict(transmission=TRANSMISSION, drive_gains=(BRIDGE_KP, BRIDGE_KD),
                                          initial_positions=POSE), **parameters)
        self.motor_states = []
        self.probe.create_subscription(JointState, "motor_states", self.motor_states.append, 1000)

    def start_bridge(self):
        self.bridge = self.make_bridge()
        self.executor.add_node(self.bridge)
        return self.bridge

    def spin_until(self, condition, limit=60.0):
        """Spin, commanding the hold, until ``condition()``; False after ``limit`` s (a hang)."""
        effort = gravity_torque(VERTICAL, POSE)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self.command_pub.publish(JointState(name=["joint1", "joint2"], position=POSE.tolist(),
                                                effort=effort.tolist()))
            self.executor.spin_once(timeout_sec=0.002)
            self.drain()
            if condition():
                return True
        return False


@pytest.fixture
def rig(context):
    rigs = []

    def make(**parameters):
        rigs.append(Rig(context, **parameters))
        return rigs[-1]
    yield make
    for r in rigs:
        r.close()


def stamp_of(msg):
    return msg.header.stamp.sec, msg.header.stamp.nanosec


def test_bridge_publishes_the_measured_deflection_on_motor_states(rig):
    rate = 25.0
    r = rig(motor_states_hz=rate)
    bridge = r.start_bridge()
    reader = bridge.dual_encoder
    assert reader is not None and reader.rate_hz == rate
    assert r.spin_until(lambda: bridge.tracking.all())
    # settle on the hold: 4 s of simulated time
    settled = r.arm.sim_time + 4.0
    assert r.spin_until(lambda: r.arm.sim_time >= settled)
    assert bridge.tracking.all() and not any(bridge.faults)

    # the window: 600 control cycles, the monitor holding every frame the bridge sent in them
    r.drain()
    frames0, motor0 = len(r.frames), len(r.motor_states)
    cycles0, reader_cycles0, sent0, started0 = bridge.cycles, reader.cycles, reader.reads_sent, reader.pairs_started
    truth = []

    def window_done():
        truth.append((time.time(), *(r.arm.q - r.arm.motor_q)))   # wall clock: the stamps' clock
        return bridge.cycles - cycles0 >= 600
    assert r.spin_until(window_done)
    cycles = bridge.cycles - cycles0
    r.drain()
    window = r.frames[frames0:]
    # what the probe has not heard yet of the window's messages: a few more spins, no cycle missed
    published = bridge.motor_states_published
    assert r.spin_until(lambda: len(r.motor_states) >= published)

    # MIT frames kept coming: one tracking frame to each motor every cycle, reads in between
    tokens = ["R" if arb == dm.MANAGEMENT_ID and data[2] == dm.OP_READ else arb for _, arb, data, _ in window
              if arb in (1, 2) or arb == dm.MANAGEMENT_ID]
    mit = [t for t in tokens if t != "R"]
    assert mit == [1, 2] * cycles
    assert all(tokens[k - 1] == 2 for k, t in enumerate(tokens) if t == "R")   # after a round, alone
    for _, arb, data, _ in window:
        if arb in (1, 2):
            command = dm.decode_mit(data, LIMITS[arb - 1])
            assert command.kp == pytest.approx(BRIDGE_KP[arb - 1], abs=0.2)   # tracking, not damping
    reads = tokens.count("R")
    assert reads == reader.reads_sent - sent0 > 0
    # the rate, on cycle counts: n * rate / control rate pairs start per cycle, two reads each
    started = reader.pairs_started - started0
    assert started == reader.pairs_due(reader.cycles) - reader.pairs_due(reader_cycles0)
    assert abs(started - cycles * 2 * rate / 500.0) <= 1
    assert abs(reads - 2 * started) <= 1

    # every motor_states message has the stamp of a joint_states message, and the difference of
    # the two is the true deflection of that time (the stamp: the bus time of the replies)
    truth = np.array(truth)
    assert np.all(np.abs(truth[:, 1:]) > 0.005) and np.ptp(truth[:, 1:], axis=0).max() < 1e-3

    def true_deflection(stamp, j):
        """[min, max] of the deflection of joint ``j`` sampled within 50 ms of ``stamp`` (s)
        (the nearest samples when none is: a loaded machine may not spin that often)."""
        near = np.abs(truth[:, 0] - stamp) <= 0.05
        if near.sum() < 2:
            near = np.argsort(np.abs(truth[:, 0] - stamp))[:2]
        return truth[near, 1 + j].min(), truth[near, 1 + j].max()
    by_stamp = {stamp_of(m): m for m in r.states}
    assert len(by_stamp) == len(r.states)
    counts = {"joint1": 0, "joint2": 0}
    lsb = max(pos_lsb(lim) for lim in LIMITS)
    for msg in r.motor_states[motor0:]:
        state = by_stamp[stamp_of(msg)]
        assert not msg.velocity and not msg.effort and 1 <= len(msg.name) <= 2
        for name, position in zip(msg.name, msg.position):
            j = list(state.name).index(name)
            measured = state.position[j] - position
            low, high = true_deflection(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, j)
            assert low - lsb <= measured <= high + lsb, (name, measured, low, high)
            counts[name] += 1
    # one message entry per completed pair; nearly none dropped on an idle bus
    assert sum(counts.values()) >= started - 2 * (reader.pairs_dropped + 2)
    assert reader.pairs_dropped <= max(2, 0.1 * reader.pairs_started)
    assert abs(counts["joint1"] - counts["joint2"]) <= 2 + reader.pairs_dropped
    assert len(r.motor_states) == bridge.motor_states_published
    # and every entry the bridge published reached the probe with its joint_states
    assert sum(len(m.name) for m in r.motor_states) == reader.pairs_completed - len(bridge._deflections)


def test_the_identifier_records_the_deflection_the_bridge_measures(rig):
    """bridge -> motor_states (a few joints per message, at the register reads' rate) ->
    identifier: each entry lands on the joint state of its stamp, NaN elsewhere, none refused."""
    r = rig(motor_states_hz=25.0)
    identifier = Identifier(context=r.context, parameter_overrides=[Parameter("model", value=VERTICAL)])
    r.executor.add_node(identifier)
    try:
        bridge = r.start_bridge()
        assert r.spin_until(lambda: bridge.tracking.all())
        settled = r.arm.sim_time + 3.0
        assert r.spin_until(lambda: r.arm.sim_time >= settled)
        r.executor.remove_node(bridge)  # no more cycles: what was published can all arrive
        live = identifier.live_recording
        assert r.spin_until(lambda: live.received >= bridge.published and
                            live.motor_received >= bridge.motor_states_published == len(r.motor_states))
        recording, counts = live.snapshot(1, "joint_states")
        assert counts.motor["rejected"] == 0 and counts.motor["received"] == bridge.motor_states_published > 10
        states = {stamp_of(m): m for m in r.states}
        expected = np.full(recording.motor_q.shape, np.nan)
        for msg in r.motor_states:
            (row,) = np.flatnonzero(recording.time == msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)
            state = states[stamp_of(msg)]
            for name, position in zip(msg.name, msg.position):
                expected[row, recording.joint_names.index(name)] = position
                j = list(state.name).index(name)
                # q - motor_q is the deflection the bridge measured
                assert recording.q[row, recording.joint_names.index(name)] - position == \
                    pytest.approx(state.position[j] - position, abs=1e-12)
        np.testing.assert_array_equal(recording.motor_q, expected)
    finally:
        r.executor.remove_node(identifier)
        identifier.destroy_node()


def test_register_replies_are_never_taken_for_feedback(rig):
    r = rig(motor_states_hz=10.0)
    bridge = r.start_bridge()
    assert r.spin_until(lambda: bridge.tracking.all())
    noise = can.Bus(interface="virtual", channel=r.channel)
    rejected, ignored, unexpected = bridge.frames_rejected, bridge.register_replies_ignored, \
        bridge.dual_encoder.replies_unexpected
    try:
        # read and write replies of registers nobody asked for, echoing the motor's id; as
        # feedback, byte 0 (0x01, 0x02) would read "disabled" and latch a fault
        for can_id, master in ((1, 0x11), (2, 0x12)):
            for op, rid in ((dm.OP_READ, dm.RID_PMAX), (dm.OP_WRITE, dm.RID_TIMEOUT), (dm.OP_READ, 77)):
                data = dm.encode_register_reply(can_id, op, rid, 3 if rid == dm.RID_TIMEOUT else 1.5)
                noise.send(can.Message(arbitration_id=master, data=data, is_extended_id=False))
    finally:
        noise.shutdown()
    assert r.spin_until(lambda: bridge.register_replies_ignored - ignored >= 6)
    cycles = bridge.cycles
    assert r.spin_until(lambda: bridge.cycles - cycles >= 20)
    assert bridge.register_replies_ignored - ignored == 6 and bridge.frames_rejected == rejected
    assert bridge.dual_encoder.replies_unexpected - unexpected == 4     # the reads offered to the reader
    assert not any(bridge.faults) and bridge.tracking.all()


def test_a_rate_above_one_read_per_cycle_stops_the_start(rig):
    # 2 motors at 500 Hz: 125 Hz per motor at most
    r = rig(motor_states_hz=200.0)
    with pytest.raises(ValueError, match=r"motor_states_hz 200 needs 800 register reads .* at most 125 Hz"):
        r.start_bridge()
    assert not r.arm.enabled(1) and not r.arm.enabled(2)
    r2 = rig(motor_states_hz=-1.0)
    with pytest.raises(ValueError, match="motor_states_hz must be >= 0"):
        r2.start_bridge()
