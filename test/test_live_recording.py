"""The recording a recorder makes from a stream of joint samples (LiveRecording), without ROS:
hand-built message streams with known bad messages, the counts they give, the snapshot equal to
what was fed, the ring wrapping around, and snapshots taken while samples arrive."""
import sys
import threading
from array import array

import numpy as np
import pytest

from conftest import ROBOTS, gravity_mujoco
from sysid_core import DataError, load_robot
from sysid_core.identification import screening
from sysid_core.identification.live_recording import (MAX_NAME_LAYOUTS, RECEIVE_STAMPED, LiveRecording, SampleBuffer,
                                                      gravity_torque, joint_torque, saved_recording)
from sysid_core.identification.recording import Recording
from sysid_core.identification.recording_files import LoadedRecording

JOINTS = ("j1", "j2", "j3")
NAMES = ("j3", "extra", "j1", "j2")  # the message's order: shuffled, one joint not recorded
T0_NS = 1_000 * 10**9  # a robot's clock is not at zero
PERIOD_NS = 2_000_000  # 500 Hz


def values(i: int) -> np.ndarray:
    """q, dq, effort (3, 3) of sample ``i`` in JOINTS order: each value names its sample and joint."""
    j = np.arange(1, 4) / 10
    return np.array([i + j, -(i + j), 1000 + i + j])


def message(i: int, stamp_ns: int | None = None, names=NAMES, extra=7.0, unstamped=False) -> tuple:
    """The arguments of LiveRecording.add for sample ``i``: fields in ``names`` order, as
    array.array('d') as rclpy hands them."""
    table = dict(zip(JOINTS, values(i).T))
    fields = [array("d", [table[name][k] if name in table else extra for name in names]) for k in range(3)]
    return (tuple(names), T0_NS + i * PERIOD_NS if stamp_ns is None else stamp_ns, *fields, unstamped)


def seconds(stamp_ns: int) -> float:
    """A stamp in s as a ROS stamp's sec + 1e-9 nanosec gives it."""
    return stamp_ns // 10**9 + 1e-9 * (stamp_ns % 10**9)


def recording(capacity: int = 1000) -> LiveRecording:
    live = LiveRecording(capacity)
    live.start(JOINTS)
    return live


def expected(samples) -> tuple:
    """time (N,) s, q, dq, effort (N, 3) of samples ``samples`` as fed by ``message``."""
    rows = np.array([values(i) for i in samples])
    return np.array([seconds(T0_NS + i * PERIOD_NS) for i in samples]), rows[:, 0], rows[:, 1], rows[:, 2]


# --------------------------------------------------------------------------- what is kept


def test_the_snapshot_is_what_was_fed_in_the_recording_joint_order():
    live = recording()
    for i in range(200):
        assert live.add(*message(i)) is None
    snap, counts = live.snapshot(min_samples=200, source="/joint_states")
    assert snap.joint_names == JOINTS
    for got, want in zip((snap.time, snap.q, snap.dq, snap.tau), expected(range(200))):
        np.testing.assert_array_equal(got, want)
    assert (counts.received, counts.recorded, counts.rejected, counts.overwritten) == (200, 200, 0, 0)
    assert (counts.stretches, counts.missing, counts.rejections) == (1, 0, {})
    assert (live.received, live.stored, live.rejected) == (200, 200, 0)


def test_holes_in_the_stamps_are_counted_as_missing():
    live = recording()
    lost = {50, 51, 52, 120}
    for i in range(200):
        if i not in lost:
            live.add(*message(i))
    snap, counts = live.snapshot(min_samples=1, source="/joint_states")
    assert (counts.recorded, counts.missing, counts.stretches) == (196, 4, 1)
    np.testing.assert_array_equal(snap.q, expected([i for i in range(200) if i not in lost])[1])


def test_the_ring_keeps_the_latest_samples_in_order_when_it_wraps_around():
    live = recording(capacity=7)
    for i in range(5):
        live.add(*message(i))
    assert (live.stored, live.overwritten) == (5, 0)
    for i in range(5, 19):  # 19 samples into 7 rows: the ring wrapped twice, its head mid-array
        live.add(*message(i))
    assert (live.received, live.stored, live.overwritten) == (19, 7, 12)
    assert live.buffer.head == 19 % 7 != 0
    time_s, q, dq, effort = live.buffer.chronological()
    for got, want in zip((time_s, q, dq, effort), expected(range(12, 19))):
        np.testing.assert_array_equal(got, want)
    snap, counts = live.snapshot(min_samples=7, source="t")
    np.testing.assert_array_equal(snap.q, expected(range(12, 19))[1])
    assert (counts.received, counts.recorded, counts.overwritten) == (19, 7, 12)


def test_a_sample_buffer_filled_exactly_to_capacity_reads_back_without_wrapping():
    buffer = SampleBuffer(3, ("a",))
    for k in range(3):
        buffer.next_row()[:] = [k, 10 + k, 20 + k, 30 + k]
    assert (buffer.head, buffer.size, buffer.overwritten) == (0, 3, 0)
    time_s, q, dq, effort = buffer.chronological()
    np.testing.assert_array_equal(time_s, [0, 1, 2])
    np.testing.assert_array_equal(np.hstack([q, dq, effort]), [[10, 20, 30], [11, 21, 31], [12, 22, 32]])
    assert q.flags.c_contiguous and not np.shares_memory(q, buffer.data)


# --------------------------------------------------------------------------- what is refused


def test_each_bad_message_is_refused_on_its_own_counted_by_kind_with_the_first_and_last():
    live = recording()
    good = list(range(10))
    stream = [message(i) for i in good]
    nan_effort = message(10)
    nan_effort[4][NAMES.index("j2")] = float("nan")
    inf_position = message(10)
    inf_position[2][NAMES.index("j1")] = float("-inf")
    twice = message(10, names=("j3", "j1", "j1", "j2"))
    lacking = message(10, names=("j3", "j1"))
    short = (NAMES, T0_NS + 10 * PERIOD_NS, array("d", [0.0] * 4), array("d", [0.0] * 3), array("d", [0.0] * 4))
    empty = (NAMES, T0_NS + 10 * PERIOD_NS, array("d", [0.0] * 4), array("d"), array("d"))
    bad = [  # (message, kind, text), fed after the good ones in this order: message 11, 12, ...
        (message(9), screening.STAMP_ORDER, "stamp repeated"),
        (message(8), screening.STAMP_ORDER, "is 0.002 s before the last kept"),
        (nan_effort, screening.NON_FINITE, "effort of j2 is nan"),
        (inf_position, screening.NON_FINITE, "position of j1 is -inf"),
        (twice, screening.DUPLICATE_NAMES, "joint names ['j1'] appear more than once"),
        (lacking, screening.MISSING_JOINTS, "lacks the model joints ['j2']"),
        (short, screening.INCOMPLETE, "position/velocity/effort have 4/3/4 values for 4 names"),
        (empty, screening.INCOMPLETE, "no velocity/effort values"),
        (message(10, unstamped=True), screening.STAMP_KIND, "no header stamp in a recording of stamped messages"),
    ]
    for args in stream:
        assert live.add(*args) is None
    for k, (args, kind, text) in enumerate(bad):
        number = len(stream) + k + 1
        got = live.add(*args)
        assert got[0] == kind and got[1].startswith(f"message {number}: ") and text in got[1], got
    assert live.add(*message(10)) is None  # the stream goes on

    assert (live.received, live.rejected, live.stored) == (len(stream) + len(bad) + 1, len(bad), 11)
    assert live.last_rejection == f"message {len(stream) + len(bad)}: no header stamp in a recording of stamped " \
                                  "messages"
    counts = {kind: sum(1 for _, k, _ in bad if k == kind) for _, kind, _ in bad}
    assert {kind: entry["count"] for kind, entry in live.rejections.items()} == counts
    assert live.rejections[screening.NON_FINITE]["first"] == "message 13: effort of j2 is nan"
    assert live.rejections[screening.NON_FINITE]["last"] == "message 14: position of j1 is -inf"
    snap, snap_counts = live.snapshot(min_samples=1, source="t")
    np.testing.assert_array_equal(snap.tau, expected(range(11))[3])
    assert snap_counts.rejections == live.rejections and snap_counts.rejections is not live.rejections


def test_only_the_recorded_joints_must_be_finite_and_an_overflowing_sum_is_no_fault():
    live = recording()
    live.add(*message(0, extra=float("nan")))  # the joint not recorded is not looked at
    huge = message(1)
    for name in ("j1", "j2", "j3"):
        huge[2][NAMES.index(name)] = 1.5e308  # each finite, their sum is not
    assert live.add(*huge) is None
    assert (live.stored, live.rejected) == (2, 0)
    np.testing.assert_array_equal(live.buffer.chronological()[1][1], [1.5e308] * 3)


def test_a_clock_jumping_back_starts_a_new_stretch_and_keeps_the_sample():
    live = recording()
    for i in range(10):
        live.add(*message(i))
    back = T0_NS - 5 * 10**9  # the driver restarted: its clock 5 s earlier
    event = live.add(*message(10, stamp_ns=back))
    assert event[0] == screening.NEW_STRETCH and event[1].startswith("message 11: stamp 995.000000000 s")
    for k in range(1, 10):
        assert live.add(*message(10 + k, stamp_ns=back + k * PERIOD_NS)) is None
    # a little back from the new stretch's last: out of order, refused
    assert live.add(*message(20, stamp_ns=back + 3 * PERIOD_NS))[0] == screening.STAMP_ORDER
    snap, counts = live.snapshot(min_samples=1, source="t")
    assert (counts.recorded, counts.stretches, counts.rejected, counts.missing) == (20, 2, 1, 0)
    np.testing.assert_array_equal(snap.q, expected(range(20))[1])
    assert np.all(np.diff(snap.time) > 0)  # joined with a seam


def test_unstamped_messages_share_their_receive_time_and_a_stamped_one_is_refused():
    live = recording()
    receive = T0_NS + 5 * 10**8
    event = live.add(*message(0, stamp_ns=receive, unstamped=True))
    assert event[0] == RECEIVE_STAMPED and live.receive_stamped
    assert live.add(*message(1, stamp_ns=receive, unstamped=True)) is None  # a batch: one receive time
    assert live.add(*message(2, stamp_ns=receive - 1, unstamped=True))[0] == screening.STAMP_ORDER
    refused = live.add(*message(2, stamp_ns=receive + 10**6))
    assert refused == (screening.STAMP_KIND, "message 4: a header stamp in a recording of unstamped messages "
                                             "(receive times)")
    np.testing.assert_array_equal(live.buffer.chronological()[0], [1000.5, 1000.5])
    live.clear()
    assert not live.receive_stamped and live.add(*message(0)) is None  # a new recording may be stamped


def test_refused_before_screening_and_the_name_lists_remembered_are_bounded():
    live = recording()
    assert live.refuse(screening.NO_MODEL, "no model loaded (why)") == (screening.NO_MODEL,
                                                                        "message 1: no model loaded (why)")
    for k in range(3 * MAX_NAME_LAYOUTS):  # a new name list every message
        live.add(*message(k, names=NAMES + (f"x{k}",)))
        assert len(live._layouts) <= MAX_NAME_LAYOUTS
    assert (live.received, live.rejected, live.stored) == (1 + 3 * MAX_NAME_LAYOUTS, 1, 3 * MAX_NAME_LAYOUTS)


# --------------------------------------------------------------------------- start, clear, snapshot


def test_clear_forgets_the_samples_and_counters_and_start_keeps_a_buffer_of_the_same_joints():
    live = recording(capacity=10)
    for i in range(5):
        live.add(*message(i))
    live.add(*message(3))  # refused
    buffer = live.buffer
    live.start(JOINTS)
    assert live.buffer is buffer and live.stored == 5
    live.clear()
    assert (live.received, live.rejected, live.stored, live.overwritten, live.rejections) == (0, 0, 0, 0, {})
    assert live.buffer is buffer
    assert live.add(*message(0)) is None  # stamps start again: no "before the last kept"
    live.start(("j1", "j2"))
    assert live.buffer is not buffer and live.joint_names == ("j1", "j2") and live.stored == 0
    live.add(*message(1))
    np.testing.assert_array_equal(live.buffer.chronological()[1], [values(1)[0, :2]])


def test_a_snapshot_with_too_few_samples_says_how_many_arrived_and_why_they_were_refused():
    live = LiveRecording(10)
    with pytest.raises(DataError, match=r"none recorded from /js \(0 received\)"):
        live.snapshot(1, "/js")
    live.start(JOINTS)
    live.add(*message(0))
    live.add(*message(0))
    with pytest.raises(DataError, match=r"1 recorded \(2 received, 1 rejected \(last: message 2: stamp repeated\)\), "
                                        "min_samples is 5"):
        live.snapshot(5, "/js")
    assert live.stored == 1  # the recording is left as it was


def test_snapshots_taken_while_samples_arrive_are_consistent():
    """The identification thread copies the ring while the subscription writes it: every
    snapshot is a run of consecutive samples, each row whole."""
    live = recording(capacity=500)
    for i in range(10):
        live.add(*message(i))
    snapshots, stop, failures = [], threading.Event(), []

    def take():
        try:
            while not stop.is_set():
                snap, counts = live.snapshot(min_samples=3, source="t")
                # which sample each row is, from its time; then every value of the row must be that sample's
                i = np.round((snap.time - seconds(T0_NS)) / (PERIOD_NS * 1e-9))
                assert np.all(np.diff(i) == 1), "not a run of consecutive samples"
                j = np.arange(1, 4) / 10
                np.testing.assert_allclose(snap.time, seconds(T0_NS) + i * PERIOD_NS * 1e-9, rtol=0, atol=1e-9)
                np.testing.assert_array_equal(np.hstack([snap.q, snap.dq, snap.tau]),
                                              np.hstack([i[:, None] + j, -(i[:, None] + j), 1000 + i[:, None] + j]))
                assert counts.received >= i[-1] + 1 and counts.stretches == 1
                snapshots.append(snap.n_samples)
        except BaseException as err:  # noqa: BLE001 -- reported by the main thread
            failures.append(err)

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns often, inside add and snapshot too
    thread = threading.Thread(target=take)
    thread.start()
    i = 10
    try:
        while len(snapshots) < 300 and not failures and i < 2_000_000:  # the bound only catches a hang
            live.add(*message(i))
            i += 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switching)
    assert not failures, failures[0]
    assert len(snapshots) >= 300 and live.received == i and live.rejected == 0


# --------------------------------------------------------------------------- saved recordings, effort


def test_a_saved_recording_is_counted_as_a_live_one():
    # two files, 10 s apart (a seam); the sample at 0.006 s of the first never arrived
    t = np.r_[0.0, 0.002, 0.004, 0.008, 0.010, 10 + np.arange(5) * 0.002]
    z = np.zeros((10, 3))
    loaded = LoadedRecording(Recording(t, z, z, z, JOINTS), messages=12, dropped={"with NaN or infinite values": 2},
                             stretches=(0, 5))
    snap, counts = saved_recording(loaded, min_samples=10, source="bag")
    np.testing.assert_array_equal(snap.time[:5], t[:5])
    assert (counts.received, counts.recorded, counts.rejected, counts.overwritten) == (12, 10, 2, 0)
    assert counts.rejections == {"with NaN or infinite values": {"count": 2}}
    assert (counts.stretches, counts.missing) == (2, 1)
    with pytest.raises(DataError, match="too few samples: 10 in bag, min_samples is 11"):
        saved_recording(loaded, min_samples=11, source="bag")


def test_effort_as_joint_torque_in_each_mode():
    robot = load_robot(ROBOTS / "openarm_class.xml")
    rng = np.random.default_rng(0)
    n = robot.n_joints
    q = rng.uniform(robot.joint_range[:, 0], robot.joint_range[:, 1], size=(25, n))
    effort = rng.normal(size=(25, n))
    measured = Recording(np.arange(25) * 1e-3, q, np.zeros((25, n)), effort, robot.joint_names)
    np.testing.assert_array_equal(joint_torque(measured, robot, "torque"), effort)
    kt, gear = rng.uniform(0.05, 0.2, n), rng.uniform(5, 10, n)
    np.testing.assert_allclose(joint_torque(measured, robot, "current", list(kt), list(gear)), effort * kt * gear,
                               rtol=1e-15)
    np.testing.assert_allclose(joint_torque(measured, robot, "current", list(kt)), effort * kt, rtol=1e-15)
    with pytest.raises(ValueError, match="needs torque_constants with one value per model joint"):
        joint_torque(measured, robot, "current", None, list(gear))
    with pytest.raises(ValueError, match="needs gear_ratios with one value per model joint"):
        joint_torque(measured, robot, "current", list(kt), [1.0])
    gravity = gravity_mujoco(robot.model, q)
    np.testing.assert_allclose(joint_torque(measured, robot, "gravity_compensated"), effort + gravity, atol=1e-9)
    # evaluated in blocks of GRAVITY_CHUNK samples: the same numbers as in one block
    many = gravity_torque(robot, np.repeat(q, 500, axis=0))
    np.testing.assert_allclose(many.reshape(25, 500, n), np.repeat(gravity, 500, axis=0).reshape(25, 500, n),
                               atol=1e-9)


# --------------------------------------------------------------------------- blocks of samples


def block(samples, names=NAMES) -> tuple:
    """The arguments of LiveRecording.add_block for the samples ``samples``, built from ``message``."""
    fed = [message(i, names=names) for i in samples]
    return (tuple(names), np.array([f[1] for f in fed], dtype=np.int64),
            *(np.array([f[k] for f in fed]) for k in (2, 3, 4)))


@pytest.mark.parametrize("capacity", [1000, 7])
def test_a_block_is_kept_as_its_samples_one_by_one(capacity):
    # blocks of 5 through a ring of 7 rows wrap around inside a block; the oracle is the same
    # samples fed one message at a time
    blocks, singles = recording(capacity), recording(capacity)
    for start in range(0, 23, 5):
        assert blocks.add_block(*block(range(start, min(start + 5, 23)))) == []
    for i in range(23):
        assert singles.add(*message(i)) is None
    a, b = blocks.buffer.chronological(), singles.buffer.chronological()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert (blocks.received, blocks.stored, blocks.overwritten) == (singles.received, singles.stored,
                                                                    singles.overwritten) == (23, min(23, capacity),
                                                                                             max(0, 23 - capacity))


def test_a_block_larger_than_the_ring_keeps_its_newest_samples():
    live = recording(4)
    live.add_block(*block(range(10)))
    time_s, q, _, _ = live.buffer.chronological()
    np.testing.assert_array_equal(q, expected(range(6, 10))[1])
    assert (live.stored, live.overwritten, live.received) == (4, 6, 10)


def test_a_block_with_bad_samples_is_screened_sample_by_sample():
    live = recording()
    names, stamps, q, dq, effort = block(range(6))
    q[2, 0] = np.nan            # a NaN on a recorded joint: that sample alone is refused
    stamps[4] = stamps[3]       # a stamp that does not increase: refused
    reports = live.add_block(names, stamps, q, dq, effort)
    assert [kind for kind, _ in reports] == [screening.NON_FINITE, screening.STAMP_ORDER]
    assert reports[0][1].startswith("message 3:") and reports[1][1].startswith("message 5:")
    assert (live.received, live.rejected, live.stored) == (6, 2, 4)
    np.testing.assert_array_equal(live.buffer.chronological()[1], expected([0, 1, 3, 5])[1])
    # a later clean block goes on after the last sample kept
    assert live.add_block(*block(range(6, 9))) == [] and live.stored == 7


def test_a_block_that_cannot_serve_the_joints_is_refused_whole():
    live = recording()
    reports = live.add_block(*block(range(3), names=("j1", "j2", "other")))
    assert [kind for kind, _ in reports] == [screening.MISSING_JOINTS] * 3
    assert (live.received, live.rejected, live.stored) == (3, 3, 0)


def test_motor_side_positions_are_screened_and_matched_to_their_joint_states_by_stamp():
    """A double-encoder arm's motor side: any subset of the joints per message, matched by stamp;
    a joint state without one has NaN there (not measured), bad motor-side messages are refused
    and counted apart from the joint states."""
    live = LiveRecording(100)
    live.start(JOINTS)
    assert live.motor is None  # no second ring until the first motor-side message
    for i in range(10):
        assert live.add(*message(i)) is None
    stamp = [T0_NS + i * PERIOD_NS for i in range(10)]
    assert live.add_motor(("j1", "j2", "j3", "extra"), stamp[0], [0.1, 0.2, 0.3, 9.0]) is None
    assert live.add_motor(("j2",), stamp[1], [1.2]) is None                     # one joint read this time
    kind, _ = live.add_motor(("j1", "j2", "j3"), stamp[2], [0.1, np.nan, 0.3])  # refused whole
    assert kind == screening.NON_FINITE
    assert live.add_motor(("j3", "j1"), stamp[4], [4.3, 4.1]) is None
    assert live.add_motor(("other",), stamp[5], [1.0])[0] == screening.MISSING_JOINTS
    assert live.add_motor(("j1", "j1"), stamp[6], [1.0, 2.0])[0] == screening.DUPLICATE_NAMES
    assert live.add_motor(("j1",), stamp[3], [1.0])[0] == screening.STAMP_ORDER  # earlier than the last kept
    assert live.add_motor(("j1",), 0, [1.0])[0] == screening.STAMP_ORDER       # unstamped: nothing to match
    assert live.add_motor(("j1", "j2", "j3"), stamp[9] + 1, [9.1, 9.2, 9.3]) is None  # no joint state of its stamp
    recording, counts = live.snapshot(1, "joint_states")
    nan = np.nan
    expected = np.full((10, 3), nan)
    expected[0], expected[1, 1], expected[4, [0, 2]] = [0.1, 0.2, 0.3], 1.2, [4.1, 4.3]
    np.testing.assert_array_equal(recording.motor_q, expected)
    assert counts.motor["received"] == 9 and counts.motor["rejected"] == 5 and counts.motor["matched"] == 1
    assert counts.rejected == 0 and counts.received == 10  # the joint states' counts are their own
    # with the joints' columns through select, and forgotten on clear
    np.testing.assert_array_equal(recording.select(("j3", "j1")).motor_q, expected[:, [2, 0]])
    live.clear()
    assert live.motor_received == 0 and live.motor.size == 0
    for i in range(3):
        live.add(*message(i))
    assert live.snapshot(1, "joint_states")[0].motor_q is None
