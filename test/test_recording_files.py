"""Recordings in files: rosbag2 bags written with rosbags' own writer identify like the samples
they hold, screening drops bad messages with counts, CSV and bag round trips, separate stretches,
and sysid-identify --recording end to end (exit 2 on bad files)."""
import json

import numpy as np
import pytest
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from conftest import MODELS, ROBOTS, run_python
from sysid_core import DataError, load_robot
from sysid_core.cli import main
from sysid_core.dynamics.friction import JointModel
from sysid_core.excitation.multisine import multisine
from sysid_core.identification import recording_files as rf
from sysid_core.identification.filtering import prepare
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.identification.recording import Recording
from sysid_core.simulation import ideal_recording

TYPES = get_typestore(Stores.ROS2_HUMBLE)  # another distribution's store than the reader's
JOINT_STATE = "sensor_msgs/msg/JointState"
EPOCH_NS = 1_717_171_717_000_000_000
CONFIG = IdentificationConfig(scope="terminal", joint_model=JointModel(("coulomb", "viscous")))


@pytest.fixture(scope="module")
def arm():
    """The URDF arm and a measured-like recording of it (no ddq, noise on every signal)."""
    robot = load_robot(MODELS / "urdf" / "panda_class_payload.urdf")
    plan = multisine(robot.joint_range, 4.0, 250.0, seed=7, max_velocity=2.0)
    exact = ideal_recording(robot.model, plan, robot.joint_names)
    rng = np.random.default_rng(1)
    noisy = [a + s * rng.standard_normal(a.shape) for a, s in ((exact.q, 1e-4), (exact.dq, 1e-3), (exact.tau, 0.02))]
    return robot, Recording(exact.time, *noisy, robot.joint_names)


def message(stamp_ns, names, position, velocity, effort):
    types = TYPES.types
    stamp = types["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
    msg = types[JOINT_STATE](header=types["std_msgs/msg/Header"](stamp=stamp, frame_id="base"), name=list(names),
                             position=np.asarray(position, float), velocity=np.asarray(velocity, float),
                             effort=np.asarray(effort, float))
    return TYPES.serialize_cdr(msg, JOINT_STATE)


def write_bag(path, messages, storage=StoragePlugin.MCAP, other_topic=True):
    """A bag written with rosbags' own Writer: (receive ns, raw JointState) on /joint_states and,
    interleaved, std_msgs/String on /chatter."""
    with Writer(path, version=9, storage_plugin=storage) as writer:
        joints = writer.add_connection("/joint_states", JOINT_STATE, typestore=TYPES)
        chatter = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=TYPES) if other_topic else None
        for receive_ns, raw in messages:
            writer.write(joints, receive_ns, raw)
            if chatter is not None:
                text = TYPES.types["std_msgs/msg/String"](data="x" * 64)
                writer.write(chatter, receive_ns, TYPES.serialize_cdr(text, "std_msgs/msg/String"))


def driver_messages(recording, delay_ns=300_000):
    """The recording as a driver would publish it: joints in another order plus a gripper
    joint, header stamps at sampling, received ``delay_ns`` later."""
    order = list(reversed(recording.joint_names)) + ["gripper"]
    idx = [recording.joint_names.index(j) for j in order[:-1]]
    out = []
    for k, t in enumerate(recording.time):
        stamp = EPOCH_NS + int(round(t * 1e9))
        fields = [np.append(np.asarray(a)[k, idx], 0.01) for a in (recording.q, recording.dq, recording.tau)]
        out.append((stamp + delay_ns, message(stamp, order, *fields)))
    return out


@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3], ids=["mcap", "sqlite3"])
def test_bag_written_by_rosbags_identifies_like_the_recording(arm, tmp_path, storage):
    robot, recording = arm
    write_bag(tmp_path / "bag", driver_messages(recording), storage)
    loaded = rf.read_rosbag(tmp_path / "bag", robot.joint_names)
    assert loaded.messages == recording.n_samples and loaded.dropped == {}
    got = loaded.recording
    assert got.joint_names == robot.joint_names
    np.testing.assert_allclose(got.time, recording.time, rtol=0, atol=1e-12)
    for name in ("q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(got, name), getattr(recording, name))
    a, b = identify(robot, recording, CONFIG), identify(robot, got, CONFIG)
    np.testing.assert_allclose(b.body_parameters, a.body_parameters, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.c_[b.coulomb, b.viscous], np.c_[a.coulomb, a.viscous], rtol=1e-9, atol=1e-12)


def test_a_bag_file_alone_and_receive_stamps(arm, tmp_path):
    robot, recording = arm
    write_bag(tmp_path / "bag", driver_messages(recording.rows(slice(0, 300)), delay_ns=250_000))
    (mcap,) = (tmp_path / "bag").glob("*.mcap")
    header = rf.read_rosbag(mcap, robot.joint_names).recording  # the storage file without metadata.yaml
    receive = rf.read_rosbag(tmp_path / "bag", robot.joint_names, stamps="receive").recording
    np.testing.assert_allclose(receive.time, header.time, atol=1e-12)  # a constant delay, times from 0
    np.testing.assert_array_equal(receive.q, header.q)


def test_bad_messages_are_dropped_and_counted(tmp_path):
    names = ("a", "b")
    good = lambda k: (EPOCH_NS + k * 10**6, names, [k, k], [0.1, 0.2], [1.0, 2.0])  # noqa: E731
    raw = [good(k) for k in range(10)]
    raw[2] = (raw[2][0], names, [1, 2], [], [1, 2])                   # no velocity
    raw[3] = (raw[3][0], names, [1, 2], [1, 2], [1])                 # mismatched lengths
    raw[4] = (raw[4][0], ("a", "a"), [1, 2], [1, 2], [1, 2])         # duplicate names
    raw[5] = (raw[5][0], names, [np.nan, 2], [1, 2], [1, 2])         # NaN
    raw[7] = (raw[6][0], *raw[7][1:])                                 # repeated stamp
    raw.append((EPOCH_NS, names, [0, 0], [0, 0], [0, 0]))             # backwards
    raw.append((0, names, [0, 0], [0, 0], [0, 0]))                    # no header stamp
    raw.append((EPOCH_NS + 99 * 10**6, ("a",), [1], [1], [1]))        # joint b missing
    write_bag(tmp_path / "bag", [(EPOCH_NS + i, message(*m)) for i, m in enumerate(raw)])
    loaded = rf.read_rosbag(tmp_path / "bag", names)
    assert loaded.recording.n_samples == 5 and loaded.messages == 13
    np.testing.assert_array_equal(loaded.recording.q[:, 0], [0, 1, 6, 8, 9])
    assert loaded.dropped == {
        "without velocity values": 1,
        "with position/velocity/effort lengths that differ from the names'": 1,
        "with duplicate joint names": 1,
        "with NaN or infinite values": 1,
        "with a stamp repeated or earlier than the previous one": 2,
        "with a zero header stamp (the driver does not stamp: try --stamps receive)": 1,
        "without the joints ['b']": 1,
    }
    assert "5 samples of 2 joints kept from 13 messages; dropped: 1 without velocity values" in loaded.summary()


def test_bag_errors_are_clear(arm, tmp_path):
    robot, recording = arm
    write_bag(tmp_path / "bag", driver_messages(recording.rows(slice(0, 20))))
    with pytest.raises(DataError, match=r"has no topic /states; its topics: /chatter \(std_msgs/msg/String\), "
                                        r"/joint_states \(sensor_msgs/msg/JointState\)"):
        rf.read_rosbag(tmp_path / "bag", robot.joint_names, topic="/states")
    with pytest.raises(DataError, match="carries std_msgs/msg/String, not sensor_msgs/msg/JointState"):
        rf.read_rosbag(tmp_path / "bag", robot.joint_names, topic="/chatter")
    with pytest.raises(DataError, match=r"no usable joint states.*20 messages, dropped: 20 without the joints \['x'\]"):
        rf.read_rosbag(tmp_path / "bag", ("joint1", "x"))
    (tmp_path / "junk.mcap").write_bytes(b"not a bag at all")
    with pytest.raises(DataError, match="cannot read bag .*junk.mcap"):
        rf.read_rosbag(tmp_path / "junk.mcap", robot.joint_names)


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_write_rosbag_read_back_by_rosbags(arm, tmp_path, storage):
    robot, recording = arm
    part = recording.rows(slice(0, 50))
    rf.write_rosbag(tmp_path / "bag", part, storage=storage, start_ns=EPOCH_NS)
    with Reader(tmp_path / "bag") as reader:
        assert [c.msgtype for c in reader.connections] == [JOINT_STATE]
        msgs = [(t, TYPES.deserialize_cdr(raw, JOINT_STATE)) for _, t, raw in reader.messages()]
    assert len(msgs) == 50 and msgs[3][1].name == list(robot.joint_names)
    assert msgs[3][0] == EPOCH_NS + round(part.time[3] * 1e9)
    assert msgs[3][1].header.stamp.sec * 10**9 + msgs[3][1].header.stamp.nanosec == msgs[3][0]
    np.testing.assert_array_equal(np.array([m.effort for _, m in msgs]), part.tau)
    back = rf.read_rosbag(tmp_path / "bag").recording
    np.testing.assert_array_equal(back.dq, part.dq)
    with pytest.raises(DataError, match="exists already"):
        rf.write_rosbag(tmp_path / "bag", part)


def test_csv_round_trip_and_hand_written_csv(arm, tmp_path):
    robot, recording = arm
    rf.write_csv(tmp_path / "r.csv", recording)
    back = rf.read_csv(tmp_path / "r.csv", robot.joint_names)
    assert back.dropped == {} and back.recording.joint_names == robot.joint_names
    np.testing.assert_allclose(back.recording.time, recording.time, atol=1e-12)
    for name in ("q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(back.recording, name), getattr(recording, name))
    (tmp_path / "hand.csv").write_text(
        "# exported from a logger\n"
        "time,b_effort,a_position,note,a_velocity,b_position,a_effort,b_velocity\n"
        "0.000,2,0.1,x,1,0.2,1,2\n"
        "0.001,2,0.2,x,1,,1,2\n"          # empty cell
        "0.002,2,nan,x,1,0.2,1,2\n"       # NaN
        "0.002,2,0.3,x,1,0.2,1,2\n"       # repeated time
        "0.003,2,0.4,x,1,0.3,1,2\n")
    hand = rf.read_csv(tmp_path / "hand.csv", ("a", "b"))
    np.testing.assert_array_equal(hand.recording.q, [[0.1, 0.2], [0.3, 0.2], [0.4, 0.3]])
    assert hand.dropped == {"with a missing or non-numeric value": 1, "with NaN or infinite values": 1}
    with pytest.raises(DataError, match=r"the columns \['c_position', 'c_velocity', 'c_effort'\] are missing"):
        rf.read_csv(tmp_path / "hand.csv", ("a", "c"))
    (tmp_path / "nohead.csv").write_text("1,2,3\n")
    with pytest.raises(DataError, match="no header with a 'time' column"):
        rf.read_csv(tmp_path / "nohead.csv")


def test_csv_chunks_read_in_bulk_equal_the_rows_screened_one_by_one(arm, tmp_path, monkeypatch):
    """Clean chunks go through NumPy's parser at once, a chunk with a bad row goes row by row: the
    samples, stamps and counts equal reading every row one by one (the oracle: bulk reading off)."""
    robot, recording = arm
    path = rf.write_csv(tmp_path / "r.csv", recording)
    lines = path.read_text().splitlines(keepends=True)
    lines[500] = lines[500].replace(",", ",nan,", 1).replace(",nan,", ",", 1).replace(",", ",x", 1)  # non-numeric
    lines[900] = lines[899]  # a repeated stamp
    path.write_text("".join(lines))
    monkeypatch.setattr(rf, "CSV_CHUNK", 256)
    extend, taken = rf.JointStateLog.extend, []
    monkeypatch.setattr(rf.JointStateLog, "extend", lambda self, *a: taken.append(extend(self, *a)) or taken[-1])
    bulk = rf.read_csv(path, robot.joint_names)
    chunks = -(-recording.n_samples // 256)
    assert sum(taken) == chunks - 2 >= 2  # every chunk in bulk but the two with a bad row
    monkeypatch.setattr(rf.JointStateLog, "extend", lambda self, stamps, values: False)
    one_by_one = rf.read_csv(path, robot.joint_names)
    assert bulk.dropped == one_by_one.dropped == {"with a missing or non-numeric value": 1,
                                                  "with a stamp repeated or earlier than the previous one": 1}
    assert bulk.messages == one_by_one.messages == recording.n_samples
    for name in ("time", "q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(bulk.recording, name), getattr(one_by_one.recording, name))


def test_csv_with_motor_side_positions(arm, tmp_path):
    robot, recording = arm
    motor = recording.q - 1e-3 * np.tanh(recording.tau)  # a deflection under load
    double = Recording(recording.time, recording.q, recording.dq, recording.tau, recording.joint_names, motor_q=motor)
    rf.write_csv(tmp_path / "double.csv", double)
    back = rf.read_csv(tmp_path / "double.csv", robot.joint_names).recording
    np.testing.assert_array_equal(back.motor_q, motor)
    np.testing.assert_array_equal(back.tau, recording.tau)
    assert rf.read_csv(tmp_path / "double.csv", robot.joint_names[:2]).recording.motor_q.shape == \
        (recording.n_samples, 2)
    (tmp_path / "hand.csv").write_text(
        "time,a_position,a_velocity,a_effort,a_motor_position,b_position,b_velocity,b_effort,b_motor_position\n"
        "0.000,0.1,1,1,0.09,0.2,2,2,0.19\n"
        "0.001,0.2,1,1,,0.2,2,2,0.19\n"      # a motor side not measured at this sample
        "0.002,0.3,1,1,inf,0.2,2,2,0.19\n"   # infinite
        "0.003,0.4,1,1,0.39,0.3,2,2,0.29\n"
        "0.004,0.5,,1,0.49,0.3,2,2,0.29\n")  # no velocity
    hand = rf.read_csv(tmp_path / "hand.csv", ("a", "b"))
    np.testing.assert_array_equal(hand.recording.motor_q, [[0.09, 0.19], [np.nan, 0.19], [0.39, 0.29]])
    assert hand.dropped == {"with a missing or non-numeric value": 1, "with NaN or infinite values": 1}
    # written back, the unmeasured cell stays unmeasured
    rf.write_csv(tmp_path / "hand_back.csv", hand.recording)
    np.testing.assert_array_equal(rf.read_csv(tmp_path / "hand_back.csv").recording.motor_q, hand.recording.motor_q)
    (tmp_path / "half.csv").write_text(
        "time,a_position,a_velocity,a_effort,a_motor_position,b_position,b_velocity,b_effort\n0,0,0,0,0,0,0,0\n")
    with pytest.raises(DataError, match=r"\['b_motor_position'\] as well"):
        rf.read_csv(tmp_path / "half.csv", ("a", "b"))
    with pytest.raises(DataError, match="with and without motor-side positions"):
        rf.concatenate([double, recording])


def test_bag_with_a_motor_side_topic(arm, tmp_path):
    robot, recording = arm
    motor = recording.q - 1e-3 * np.tanh(recording.tau)
    double = Recording(recording.time, recording.q, recording.dq, recording.tau, recording.joint_names, motor_q=motor)
    rf.write_rosbag(tmp_path / "bag", double, start_ns=EPOCH_NS, motor_topic="/motor_states")
    back = rf.read_rosbag(tmp_path / "bag", robot.joint_names, motor_topic="/motor_states").recording
    np.testing.assert_array_equal(back.motor_q, motor)
    assert rf.read_rosbag(tmp_path / "bag", robot.joint_names).recording.motor_q is None
    with pytest.raises(DataError, match="has no topic /motors"):
        rf.read_rosbag(tmp_path / "bag", robot.joint_names, motor_topic="/motors")
    with pytest.raises(DataError, match="--stamps header"):
        rf.read_rosbag(tmp_path / "bag", robot.joint_names, stamps="receive", motor_topic="/motor_states")
    # by hand: a motor-side message missing, one without joint b, one stamped apart: not measured there
    types = TYPES.types
    header, stamp_type = types["std_msgs/msg/Header"], types["builtin_interfaces/msg/Time"]
    with Writer(tmp_path / "hand", version=9) as writer:
        states = writer.add_connection("/joint_states", JOINT_STATE, typestore=TYPES)
        motors = writer.add_connection("/motor_states", JOINT_STATE, typestore=TYPES)
        for k in range(6):
            stamp = EPOCH_NS + k * 1_000_000
            stamped = header(stamp=stamp_type(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id="")
            msg = types[JOINT_STATE](header=stamped, name=["a", "b"], position=np.array([0.1 * k, 0.2]),
                                     velocity=np.ones(2), effort=np.ones(2))
            writer.write(states, stamp, TYPES.serialize_cdr(msg, JOINT_STATE))
            if k == 2:
                continue
            names = ["a"] if k == 3 else ["b", "a"]
            off = 500 if k == 4 else 0
            stamped = header(stamp=stamp_type(sec=stamp // 10**9, nanosec=stamp % 10**9 + off), frame_id="")
            msg = types[JOINT_STATE](header=stamped, name=names, position=np.array([0.19, 0.1 * k - 0.01][-len(names):]),
                                     velocity=np.zeros(0), effort=np.zeros(0))
            writer.write(motors, stamp + off, TYPES.serialize_cdr(msg, JOINT_STATE))
    hand = rf.read_rosbag(tmp_path / "hand", ("a", "b"), motor_topic="/motor_states")
    nan = np.nan
    np.testing.assert_allclose(hand.recording.motor_q, [[-0.01, 0.19], [0.09, 0.19], [nan, nan], [0.29, nan],
                                                        [nan, nan], [0.49, 0.19]])
    assert hand.dropped == {}
    # written again, each sample's motor-side message names the joints measured there
    rf.write_rosbag(tmp_path / "again", hand.recording, start_ns=EPOCH_NS, motor_topic="/motor_states")
    np.testing.assert_array_equal(rf.read_rosbag(tmp_path / "again", ("a", "b"), motor_topic="/motor_states")
                                  .recording.motor_q, hand.recording.motor_q)


def test_files_are_separate_stretches_never_filtered_across_the_seam(arm):
    robot, recording = arm
    first, second = recording.rows(slice(0, 500)), recording.rows(slice(500, None))
    # the second file starts where the first did: overlapping times, as two bags of one session may not
    second = Recording(second.time - second.time[0], second.q, second.dq, second.tau, second.joint_names)
    joined, starts = rf.concatenate([first, second])
    assert starts == (0, 500) and joined.n_samples == recording.n_samples
    assert np.all(np.diff(joined.time) > 0)
    whole, parts = prepare(joined), [prepare(first), prepare(second)]
    for name in ("q", "dq", "ddq", "tau"):
        np.testing.assert_allclose(getattr(whole, name), np.concatenate([getattr(p, name) for p in parts]),
                                   rtol=0, atol=1e-12)


def bare_arm(tmp_path):
    """panda_class_payload.urdf without its payload link: the arm as its owner's URDF has it."""
    text = (MODELS / "urdf" / "panda_class_payload.urdf").read_text()
    start, end = text.index("  <!-- payload:"), text.index("</robot>")
    path = tmp_path / "panda_class.urdf"
    path.write_text(text[:start] + text[end:])
    return path


def test_cli_identifies_a_bag_like_the_recording(arm, tmp_path):
    """The payload arm recorded, identified offline against the bare arm's URDF."""
    _, recording = arm
    robot = load_robot(bare_arm(tmp_path))
    write_bag(tmp_path / "bag", driver_messages(recording))
    out = tmp_path / "out"
    result = run_python("-m", "sysid_core.cli", str(robot.path),
                        "--recording", str(tmp_path / "bag"), "--validation-fraction", "0.25", "--no-plots",
                        "--estimator", "consistent", "--output-dir", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"{recording.n_samples} samples of 7 joints kept from {recording.n_samples} messages" in result.stdout
    params = json.loads((out / "params.json").read_text())
    head, tail = recording.split(0.25)
    config = IdentificationConfig(scope="terminal", estimator="consistent",
                                  joint_model=JointModel(("coulomb", "viscous")))
    expected = identify(robot, head, config, validation=tail)
    assert params["mass"] == pytest.approx(expected.terminal_parameters[0], rel=1e-9)
    assert params["validation_rmse"] == pytest.approx(expected.metrics.validation_rmse, rel=1e-9)
    assert params["payload"]["frame"] == "link7" and params["source"] == str(tmp_path / "bag")
    # the payload: 1.5 kg bolted under the flange, within the noise
    assert params["payload"]["added"]["mass"] == pytest.approx(1.5, abs=0.05)
    updated = load_robot(out / "updated_model.urdf")
    np.testing.assert_allclose(updated.nominal_parameters[-1], expected.terminal_parameters, rtol=1e-9, atol=1e-12)
    assert not (out / "updated_model.xml").exists()


def test_cli_counts_samples_lost_before_the_bag_and_says_so(arm, tmp_path, capsys):
    """A bag whose driver lost messages before they were recorded (every tenth of the middle half:
    holes in the header stamps, 2.5 % of the samples): the run counts them and its verdict is
    doubtful (above 1 % lost; the filters bridge the holes); the whole bag has none and no note."""
    robot, recording = arm
    messages = driver_messages(recording)
    middle = range(len(messages) // 4, 3 * len(messages) // 4)
    lost = {k for k in middle if k % 10 == 0}
    write_bag(tmp_path / "lossy", [m for k, m in enumerate(messages) if k not in lost], other_topic=False)
    out = tmp_path / "out"
    code = main([str(robot.path), "--recording", str(tmp_path / "lossy"), "--no-plots", "--output-dir", str(out)])
    printed = capsys.readouterr().out
    assert f"; {len(lost)} missing from the stamps" in printed
    params = json.loads((out / "params.json").read_text())
    assert code == 0 and params["verdict"] == "doubtful"
    share = 100 * len(lost) / len(messages)
    assert any(f"{len(lost)} of {len(messages)} samples ({share:.1f} %)" in r and "never arrived" in r
               for r in params["verdict_reasons"])
    write_bag(tmp_path / "whole", messages, other_topic=False)
    main([str(robot.path), "--recording", str(tmp_path / "whole"), "--no-plots", "--output-dir", str(out)])
    assert "; 0 missing from the stamps" in capsys.readouterr().out
    assert not any("never arrived" in r for r in json.loads((out / "params.json").read_text())["verdict_reasons"])


@pytest.mark.parametrize("extra, pattern", [
    (["--recording", "/nonexistent/bag"], "recording not found: /nonexistent/bag"),
    (["--recording", "BAG", "--topic", "/nothing"], "has no topic /nothing"),
    (["--recording", "BAG", "--duration", "3"], "--duration: for a simulated run only"),
    (["--recording", "BAG", "--validation-fraction", "1.5"], "--validation-fraction must be in [0, 1)"),
    (["--topic", "/joint_states_2"], "--topic only apply with --recording"),
    (["--recording", "BAG", "--payload-frame", "link3"], "payload frame 'link3' is not the terminal body"),
    (["--recording", "BAG", "--effort-gains", "/nonexistent/gains.json"], "effort gain file not found"),
    (["--effort-gains", "/nonexistent/gains.json"], "--effort-gains only apply with --recording"),
])
def test_cli_bad_recordings_exit_2(arm, tmp_path, capsys, extra, pattern):
    robot, recording = arm
    write_bag(tmp_path / "bag", driver_messages(recording.rows(slice(0, 20))), other_topic=False)
    extra = [str(tmp_path / "bag") if x == "BAG" else x for x in extra]
    status = main([str(ROBOTS / "panda_class.xml"), *extra, "--no-plots", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error:") and "Traceback" not in err
    assert pattern in err


def test_console_script_exits_2_on_a_file_that_is_no_bag(tmp_path):
    (tmp_path / "junk.mcap").write_bytes(b"not a bag at all")
    result = run_python("-m", "sysid_core.cli", str(ROBOTS / "panda_class.xml"), "--recording",
                        str(tmp_path / "junk.mcap"), "--no-plots", "--output-dir", str(tmp_path / "out"), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: cannot read bag") and "Traceback" not in result.stderr
