"""The identifier node against bad and unusual input and its recording workflow, with real
rclpy nodes: one bad sample never spoils the rest, receive-stamped batches, a clock that jumps
back, memory refused up front, a failed verdict answers success=false, the model from
robot_description, the recording saved as MCAP identifies to the same numbers, the payload as
geometry_msgs/Inertia, and a seeded fuzz of JointState junk.

Harness (nodes, executor, spin_until, call, Messages) from test_identifier_node.py.
"""
import json

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Inertia
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String

from conftest import MODELS
from sysid_core import load_robot
from sysid_core.dynamics.inertia import to_com_inertia
from sysid_core.excitation.multisine import multisine
from sysid_core.identification import run_size, screening
from sysid_core.identification.identify import identify
from sysid_core.identification.live_recording import MAX_NAME_LAYOUTS
from sysid_core.identification.recording_files import read_rosbag
from sysid_core.simulation import ideal_recording
from sysid_ros import identifier as identifier_module
from sysid_ros.identifier import EXIT_FAILED
from test_identifier_node import (T0, TRUTH, Messages, call, data, executor, feed, handled,  # noqa: F401
                                  make_identifier, nodes, plain_node, spin_until, unique)

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def link7_truth(truth):
    return truth.nominal_parameters[truth.body_names.index("link7")]  # link7 + flange + payload


def publish_all(executor, identifier, publisher, messages, batch=200):
    """Publish ``messages`` in batches well below the queue depths, each spun until received."""
    start = identifier.received
    for k in range(0, len(messages), batch):
        for msg in messages[k:k + batch]:
            publisher.publish(msg)
        expected = start + min(k + batch, len(messages))
        assert spin_until(executor, lambda: identifier.received >= expected), \
            f"stuck at {identifier.received} of {expected} messages"


def joint_state_publisher(executor, nodes):
    node = nodes(plain_node, unique("joint_state_source"))
    publisher = node.create_publisher(JointState, "/joint_states",
                                      QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE))
    assert spin_until(executor, lambda: publisher.get_subscription_count() >= 1)
    return publisher


# --------------------------------------------------------------------------- one bad sample

def test_one_bad_sample_of_each_kind_is_refused_and_the_rest_identifies(data, executor, nodes, tmp_path):
    _, truth, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path), plots=False)
    publisher = joint_state_publisher(executor, nodes)
    source = Messages(recording)
    n = recording.n_samples
    messages = [source.message(i) for i in range(n)]
    nan_effort = recording.tau.copy()
    nan_effort[1234, 5] = np.nan
    messages[1234] = source.message(1234, effort=nan_effort)              # joint6's effort is NaN: lost
    messages[1500], messages[1501] = messages[1501], messages[1500]        # 1500 arrives late: lost
    twice = source.message(2000)
    twice.name = [twice.name[0]] + list(twice.name[:-1])                   # a joint named twice
    infinite = source.message(2500)
    infinite.position[source.names.index("joint2")] = float("inf")         # an extra copy, position inf
    for at, extra in sorted([(1001, source.message(1000)), (2001, twice), (2501, infinite)], reverse=True):
        messages.insert(at, extra)                                         # 1000 again: a repeated stamp
    publish_all(executor, identifier, publisher, messages)
    assert (identifier.received, identifier.stored, identifier.rejected) == (n + 3, n - 2, 5)

    response = call(executor, nodes(plain_node, unique("client")), "/sysid/identify")
    assert response.success, response.message
    summary = json.loads(response.message)
    true = link7_truth(truth)
    assert abs(summary["mass"] - true[0]) / true[0] < 0.005
    assert np.linalg.norm(np.array(summary["center_of_mass"]) - true[1:4] / true[0]) < 1e-3
    rejections = summary["rejections"]
    assert {k: v["count"] for k, v in rejections.items()} == {
        screening.STAMP_ORDER: 2, screening.NON_FINITE: 2, screening.DUPLICATE_NAMES: 1}
    # the index (message number since the reset) and the value
    assert rejections[screening.NON_FINITE]["first"] == "message 1236: effort of joint6 is nan"
    assert rejections[screening.NON_FINITE]["last"] == "message 2504: position of joint2 is inf"
    assert rejections[screening.STAMP_ORDER]["first"] == "message 1002: stamp repeated"
    assert "1003.000000000 s is " in rejections[screening.STAMP_ORDER]["last"]  # sample 1500 at 500 Hz
    assert rejections[screening.DUPLICATE_NAMES]["first"].endswith(f"joint names ['{source.names[0]}'] appear "
                                                                   "more than once")
    assert summary["rejected_samples"] == 5 and summary["stretches"] == 1 and summary["verdict"] != "failed"


def test_a_clock_jumping_back_starts_a_new_stretch_and_loses_nothing(data, executor, nodes, tmp_path):
    _, truth, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path), plots=False)
    source = Messages(recording)
    n = recording.n_samples
    future = source.message(999, stamp=T0 + 5e4)  # one message stamped 14 hours ahead
    future.header.stamp.nanosec += 1
    restarted = [source.message(i, stamp=T0 - 100.0 + recording.time[i]) for i in range(2000, n)]  # driver restart
    feed(identifier, [source.message(i) for i in range(1000)] + [future] +
         [source.message(i) for i in range(1000, 2000)] + restarted)
    assert (identifier.rejected, identifier.stored) == (0, n + 1)
    response = call(executor, nodes(plain_node, unique("client")), "/sysid/identify")
    assert response.success, response.message
    summary = json.loads(response.message)
    assert summary["stretches"] == 3 and summary["missing_samples"] == 0
    true = link7_truth(truth)
    assert abs(summary["mass"] - true[0]) / true[0] < 0.005


# --------------------------------------------------------------------------- receive-stamped batches

def test_receive_stamped_batches_are_not_gaps(data, executor, nodes, tmp_path):
    """A driver without header stamps, delivered in batches (2 to 40 ms apart): identify spreads
    each batch back at the measured rate instead of cutting the recording at every batch."""
    _, truth, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path), use_sim_time=True, plots=False)
    clock = nodes(plain_node, unique("clock_source")).create_publisher(Clock, "/clock", 10)
    source = Messages(recording)
    send = 50.0 + recording.time
    rng = np.random.default_rng(5)
    flush, k, batches = send[0], 0, 0
    while k < recording.n_samples:
        flush += rng.uniform(2e-3, 40e-3)
        j = int(np.searchsorted(send, flush, side="right"))
        if j == k:
            continue
        ns = int(round(flush * 1e9))
        clock.publish(Clock(clock=Time(sec=ns // 10**9, nanosec=ns % 10**9)))
        assert spin_until(executor, lambda: identifier.get_clock().now().nanoseconds == ns)
        feed(identifier, [source.message(i, stamp=0.0) for i in range(k, j)])
        k, batches = j, batches + 1
    assert identifier.rejected == 0 and identifier.stored == recording.n_samples and batches > 150
    response = call(executor, nodes(plain_node, unique("client")), "/sysid/identify")
    assert response.success, response.message
    summary = json.loads(response.message)
    true = link7_truth(truth)
    assert abs(summary["mass"] - true[0]) / true[0] < 0.01
    assert summary["n_samples"] > 0.8 * recording.n_samples and summary["missing_samples"] is None


# --------------------------------------------------------------------------- memory, verdict

def test_an_identification_bigger_than_the_memory_is_refused_up_front(data, executor, nodes, tmp_path, monkeypatch):
    _, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path), decimation=1)
    feed(identifier, [Messages(recording).message(i) for i in range(recording.n_samples)])
    monkeypatch.setattr(run_size, "available_memory", lambda: 100 * 2 ** 20)
    monkeypatch.setattr(identifier_module, "identify", lambda *a, **k: pytest.fail("identify ran"))
    response = call(executor, nodes(plain_node, unique("client")), "/sysid/identify")
    assert not response.success
    assert f"identifying {recording.n_samples} samples (decimation 1" in response.message, response.message
    assert "100 MiB available" in response.message and "save the recording" in response.message
    assert identifier.stored == recording.n_samples and not (tmp_path / "params.json").exists()


def test_a_failed_verdict_answers_false_and_leaves_no_model(data, executor, nodes, tmp_path):
    """Efforts of the wrong sign after `ros2 param set` (torque constants negated): the data
    contradict any real arm; success=false, the verdict's reasons, no updated model (the
    previous run's removed), nothing published."""
    _, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path), estimator="wls", plots=False)
    feed(identifier, [Messages(recording).message(i) for i in range(recording.n_samples)])
    results = []
    listener = nodes(plain_node, unique("listener"))
    listener.create_subscription(String, "/sysid/result", lambda msg: results.append(msg.data), LATCHED)
    client = nodes(plain_node, unique("client"))
    assert call(executor, client, "/sysid/identify").success
    assert spin_until(executor, lambda: len(results) == 1) and (tmp_path / "updated_model.xml").is_file()

    assert identifier.set_parameters([Parameter("effort_mode", value="current"),
                                      Parameter("torque_constants", value=[-1.0] * 7)])[0].successful
    response = call(executor, client, "/sysid/identify")
    assert not response.success
    summary = json.loads(response.message)
    assert summary["verdict"] == "failed" and summary["mass"] < 0
    assert any("not physically consistent" in reason for reason in summary["verdict_reasons"])
    assert summary["updated_model"] is None and "verdict is failed" in summary["updated_model_error"]
    assert not (tmp_path / "updated_model.xml").exists()
    assert json.loads((tmp_path / "params.json").read_text())["verdict"] == "failed"
    late = []  # the last result published, as a subscriber joining now gets it: still the first run's
    nodes(plain_node, unique("late_listener")).create_subscription(String, "/sysid/result",
                                                                   lambda msg: late.append(msg.data), LATCHED)
    assert spin_until(executor, lambda: late)
    assert late == results[:1] and summary["payload"] is None


def test_exit_when_done_after_a_failed_verdict_exits_3(data, executor, nodes, tmp_path):
    _, _, recording = data
    node = make_identifier(nodes, output_dir=str(tmp_path), identify_on_done=True, exit_when_done=True,
                           plots=False, effort_mode="current", torque_constants=[-1.0] * 7)
    feed(node, [Messages(recording).message(i) for i in range(recording.n_samples)])
    nodes(plain_node, unique("done")).create_publisher(Bool, "/sysid/done", LATCHED).publish(Bool(data=True))
    assert spin_until(executor, node.finished.done)
    assert node.finished.result() == EXIT_FAILED


# --------------------------------------------------------------------------- ROS workflow

def test_the_model_from_robot_description_and_the_payload_as_inertia(executor, nodes, tmp_path):
    """A URDF arm (robot_state_publisher's latched robot_description, the bare arm), its payload
    identified and published as geometry_msgs/Inertia, checked against the URDF with the payload."""
    truth = load_robot(MODELS / "urdf" / "panda_class_payload.urdf")
    text = (MODELS / "urdf" / "panda_class_payload.urdf").read_text()
    bare = text[:text.index("  <!-- payload:")] + text[text.index("</robot>"):]
    plan = multisine(truth.joint_range, 6.0, 500.0, seed=3, max_velocity=2.0)
    recording = ideal_recording(truth.model, plan, truth.joint_names)

    describer = nodes(plain_node, unique("robot_state_publisher"))
    describer.create_publisher(String, "/robot_description", LATCHED).publish(String(data=bare))
    identifier = make_identifier(nodes, model="", output_dir=str(tmp_path), plots=False)
    assert spin_until(executor, lambda: identifier.buffer is not None), "robot_description not taken"
    feed(identifier, [Messages(recording).message(i) for i in range(recording.n_samples)])
    response = call(executor, nodes(plain_node, unique("client")), "/sysid/identify")
    assert response.success, response.message
    summary = json.loads(response.message)
    assert summary["updated_model"] == str(tmp_path / "updated_model.urdf")
    assert load_robot(tmp_path / "updated_model.urdf").joint_names == truth.joint_names

    payloads = []
    late = nodes(plain_node, unique("driver"))
    late.create_subscription(Inertia, "/sysid/payload", payloads.append, LATCHED)
    assert spin_until(executor, lambda: payloads)
    payload = payloads[-1]
    nominal = load_robot(bare)
    body = truth.body_names.index(summary["terminal_body"])
    true = to_com_inertia(truth.nominal_parameters[body] - nominal.nominal_parameters[body])
    assert payload.m == pytest.approx(true.mass, rel=0.01)
    com = np.array([payload.com.x, payload.com.y, payload.com.z])
    assert np.linalg.norm(com - true.com) < 2e-3
    assert summary["payload"]["mass"] == payload.m and summary["payload"]["frame"] == summary["terminal_body"]
    inertia = np.array([[payload.ixx, payload.ixy, payload.ixz], [payload.ixy, payload.iyy, payload.iyz],
                        [payload.ixz, payload.iyz, payload.izz]])
    assert np.all(np.linalg.eigvalsh(inertia) > 0)


def test_robot_description_that_does_not_load_is_answered_and_the_first_that_loads_is_kept(executor, nodes, tmp_path):
    """The identifier takes robot_description as trajectory_publisher does (sysid_ros.robot_description):
    why a description did not load is in the answer, the first that loads is the model (terminal_body
    still applies to it), and a different one later is ignored: the recording keeps its model."""
    identifier = make_identifier(nodes, namespace="/described", model="", output_dir=str(tmp_path), plots=False)
    client = nodes(plain_node, unique("client"))
    describer = nodes(plain_node, unique("robot_state_publisher"))
    description = describer.create_publisher(String, "/described/robot_description", LATCHED)
    assert spin_until(executor, lambda: description.get_subscription_count() >= 1)
    description.publish(String(data="<robot name='broken'><link name='base'/></robot>"))
    assert spin_until(executor, lambda: identifier._description.error is not None)
    response = call(executor, client, "/described/sysid/identify")
    assert not response.success and identifier.buffer is None
    assert "parameter 'model' is empty and cannot load the model from /described/robot_description" \
        in response.message, response.message

    panda = (MODELS / "urdf" / "panda_class_payload.urdf").read_text()
    description.publish(String(data=panda))
    assert spin_until(executor, lambda: identifier.buffer is not None), "the corrected description was not taken"
    joints = load_robot(panda).joint_names
    assert identifier.buffer.joint_names == joints
    identifier.set_parameters([Parameter("terminal_body", value="link6")])
    assert identifier._robot_for_parameters().terminal_body == "link6"

    descriptions = handled(identifier, "/described/robot_description")
    description.publish(String(data=(MODELS / "urdf" / "ur5e.urdf").read_text()))
    assert spin_until(executor, lambda: descriptions)
    assert identifier.buffer.joint_names == joints
    assert identifier._robot_for_parameters().joint_names == joints


def test_the_saved_recording_identifies_to_the_same_numbers(data, executor, nodes, tmp_path):
    nominal, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path / "live"), plots=False,
                                 save_path=str(tmp_path / "bag"))
    feed(identifier, [Messages(recording).message(i) for i in range(recording.n_samples)])
    client = nodes(plain_node, unique("client"))
    live = json.loads(call(executor, client, "/sysid/identify").message)
    live_doc = json.loads((tmp_path / "live" / "params.json").read_text())

    response = call(executor, client, "/sysid/save_recording")
    assert response.success and response.message == str(tmp_path / "bag"), response.message
    assert list((tmp_path / "bag").glob("*.mcap"))
    loaded = read_rosbag(tmp_path / "bag", nominal.joint_names)
    assert loaded.recording.n_samples == recording.n_samples and not loaded.dropped
    result = identify(nominal, loaded.recording, identifier._config(nominal, loaded.recording))

    def values(document):
        return np.array([b["value"] for b in document["base_parameters"]])
    np.testing.assert_allclose(values(live_doc), result.estimate.values, rtol=1e-9, atol=1e-12)
    assert live["mass"] == pytest.approx(result.terminal_parameters[0], rel=1e-9)

    # the node itself, from the bag of parameter 'recording'
    identifier.set_parameters([Parameter("recording", value=str(tmp_path / "bag")),
                               Parameter("output_dir", value=str(tmp_path / "offline"))])
    offline = json.loads(call(executor, client, "/sysid/identify").message)
    offline_doc = json.loads((tmp_path / "offline" / "params.json").read_text())
    np.testing.assert_allclose(values(offline_doc), values(live_doc), rtol=1e-9, atol=1e-12)
    assert offline["mass"] == pytest.approx(live["mass"], rel=1e-9)
    assert offline_doc["source"] == str(tmp_path / "bag") and offline["received_samples"] == recording.n_samples
    # a second save to the same path is refused, saying why
    response = call(executor, client, "/sysid/save_recording")
    assert not response.success and "exists already" in response.message


# --------------------------------------------------------------------------- fuzz

def junk(rng, names, last_good_s):
    """One random JointState a good one never is: wrong lengths or names, a NaN/inf, a zero,
    repeated or earlier stamp; or complete but stamped far (> CLOCK_JUMP_S) from the stream."""
    msg = JointState()
    kind = rng.integers(4)
    if kind == 0:  # random names and lengths
        pool = list(names) + [f"x{k}" for k in range(4)]
        msg.name = [pool[k] for k in rng.integers(len(pool), size=rng.integers(0, 11))]
        sizes = rng.integers(0, 11, size=3)
    else:  # every joint, maybe one twice
        msg.name = list(rng.permutation(names)) + ([names[rng.integers(len(names))]] if kind == 1 else [])
        sizes = [len(msg.name)] * 3
    values = [rng.normal(size=s) for s in sizes]
    if kind == 2 or rng.random() < 0.5:
        field = values[rng.integers(3)]
        if field.size:
            field[rng.integers(field.size)] = rng.choice([np.nan, np.inf, -np.inf])
    msg.position, msg.velocity, msg.effort = (v.tolist() for v in values)
    how = rng.integers(5)
    stamp = (0.0 if how == 0 else last_good_s if how == 1 else last_good_s - rng.uniform(1e-6, 0.9) if how == 2
             else last_good_s - rng.uniform(2.0, 900.0) if how == 3 else last_good_s + rng.uniform(2.0, 1e5))
    ns = int(round(stamp * 1e9))
    msg.header.stamp.sec, msg.header.stamp.nanosec = ns // 10**9, ns % 10**9
    return msg


def test_fuzzed_joint_states_keep_the_node_alive_bounded_and_every_good_sample(data, executor, nodes):
    _, _, recording = data
    capacity, good_count = 6000, 3000
    identifier = make_identifier(nodes, buffer_capacity=capacity)
    buffer = identifier.buffer
    publisher = joint_state_publisher(executor, nodes)
    source = Messages(recording)
    rng = np.random.default_rng(12)
    messages, good = [], []
    for i in range(good_count):
        last = T0 + recording.time[i - 1] if i else T0 - 1.0
        messages.extend(junk(rng, recording.joint_names, last) for _ in range(rng.integers(0, 3)))
        messages.append(source.message(i))
        good.append(i)
    publish_all(executor, identifier, publisher, messages)
    assert identifier.received == len(messages) > 1.5 * good_count

    assert identifier.buffer is buffer and buffer.nbytes == capacity * (1 + 3 * 7) * 8  # no growth
    live = identifier.live_recording
    assert len(live._layouts) <= MAX_NAME_LAYOUTS and len(live.rejections) <= 8
    assert identifier.rejected + identifier.stored == identifier.received and identifier.rejected > good_count // 2
    with live.lock:
        time_s, q, dq, effort = (a.copy() for a in buffer.chronological())
    kept = {round(t, 6): k for k, t in enumerate(time_s)}
    for i in good:
        k = kept.get(round(T0 + recording.time[i], 6))
        assert k is not None, f"good sample {i} lost"
        np.testing.assert_array_equal(q[k], recording.q[i])
        np.testing.assert_array_equal(effort[k], recording.tau[i])
    assert call(executor, nodes(plain_node, unique("client")), "/sysid/reset").success  # alive, answering
