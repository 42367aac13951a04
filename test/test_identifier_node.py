"""The identifier node with real rclpy: recording /joint_states, /sysid/identify, /sysid/reset.

Every test runs its own nodes (unique names) in one rclpy context of this module and
spins an executor only until a condition holds or a timeout expires, so nothing can hang.
Behaviour is asserted on what the node handled and counted, never on how fast the machine is:
a test waits until the node has handled a message before it asserts what followed, and the
timeouts only catch hangs.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from conftest import ROBOTS, gravity_mujoco
from sysid_core import load_robot
from sysid_core.excitation.multisine import multisine
from sysid_core.excitation.trajectory import Trajectory
from sysid_core.identification.identify import identify
from sysid_core.identification.live_recording import gravity_torque
from sysid_core.identification.recording import Recording
from sysid_core.identification.residual import ResidualModel
from sysid_core.identification.run_size import automatic_decimation
from sysid_core.simulation import ideal_recording
from sysid_ros.identifier import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, SETTLE_RUN_ON_S, Identifier

NOMINAL = ROBOTS / "openarm_class.xml"
TRUTH = ROBOTS / "openarm_class_payload.xml"
T0 = 1000.0  # s, first header stamp (a robot's clock is not at zero)
TIMEOUT = 300.0  # s, a guard against hangs, not a speed target
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


# --------------------------------------------------------------------------- fixtures and helpers

@pytest.fixture
def executor(context):
    ex = SingleThreadedExecutor(context=context)
    yield ex
    ex.shutdown(timeout_sec=1.0)


class NodeFactory:
    """Creates nodes in the test's context and executor; destroys them (at the latest after the test)."""

    def __init__(self, context, executor):
        self.context, self.executor, self.alive = context, executor, []

    def __call__(self, factory, *args, **kwargs):
        node = factory(*args, context=self.context, **kwargs)
        self.executor.add_node(node)
        self.alive.append(node)
        return node

    def destroy(self, node):
        self.alive.remove(node)
        self.executor.remove_node(node)
        node.destroy_node()


@pytest.fixture
def nodes(context, executor):
    factory = NodeFactory(context, executor)
    yield factory
    for node in list(factory.alive):
        factory.destroy(node)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_identifier(nodes, namespace=None, **parameters):
    parameters.setdefault("model", str(NOMINAL))
    overrides = [Parameter(name, value=value) for name, value in parameters.items()]
    remap = ["-r", f"__ns:={namespace}"] if namespace else []
    return nodes(Identifier, parameter_overrides=overrides,
                 cli_args=["--ros-args", "-r", f"__node:={unique('identifier')}", *remap])


def spin_until(executor, condition, timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        executor.spin_once(timeout_sec=0.02)
    return True


def call(executor, client_node, service: str, timeout: float = TIMEOUT) -> Trigger.Response:
    client = client_node.create_client(Trigger, service)
    try:
        assert spin_until(executor, client.service_is_ready), f"{service} not available"
        future = client.call_async(Trigger.Request())
        assert spin_until(executor, future.done, timeout), f"{service} did not answer within {timeout} s"
        return future.result()
    finally:
        client_node.destroy_client(client)


def plain_node(name, context):
    return rclpy.create_node(name, context=context)


@pytest.fixture(scope="module")
def data():
    """Noise-free torques of the arm with its payload along an 8 s, 500 Hz multisine."""
    nominal, truth = load_robot(NOMINAL), load_robot(TRUTH)
    plan = multisine(nominal.joint_range, 8.0, 500.0, seed=1, max_velocity=2.0)
    return nominal, truth, ideal_recording(truth.model, plan, truth.joint_names)


class Messages:
    """JointState messages of a recording: joints shuffled, one extra joint, header stamps."""

    def __init__(self, recording, seed=0, extra="gripper_finger"):
        rng = np.random.default_rng(seed)
        names = list(recording.joint_names) + [extra]
        self.order = rng.permutation(len(names))
        self.names = [names[k] for k in self.order]
        self.recording = recording

    def message(self, i: int, effort=None, stamp=None) -> JointState:
        rec = self.recording
        pick = (lambda row: np.append(row, 0.123)[self.order].tolist())
        msg = JointState()
        msg.name = self.names
        t = T0 + rec.time[i] if stamp is None else stamp
        msg.header.stamp.sec = int(t)
        msg.header.stamp.nanosec = int(round((t - int(t)) * 1e9))
        msg.position = pick(rec.q[i])
        msg.velocity = pick(rec.dq[i])
        msg.effort = pick(rec.tau[i] if effort is None else effort[i])
        return msg


def feed(node, messages):
    for msg in messages:
        node._on_joint_state(msg)


def handled(node, topic: str, wrap=None) -> list:
    """The messages ``node``'s subscription to ``topic`` (resolved name) has handled, appended as
    its callback returns; ``wrap(callback, msg)`` runs in its place when given."""
    subscription = next(s for s in node.subscriptions if s.topic_name == topic)
    seen, callback = [], subscription.callback
    run = wrap or (lambda cb, msg: cb(msg))

    def counted(msg):
        run(callback, msg)
        seen.append(msg)
    subscription.callback = counted
    return seen


def done_flag(nodes, topic="/sysid/done"):
    """A publisher of sysid/done as trajectory_publisher's: latched, depth 1."""
    return nodes(plain_node, unique("done_flag")).create_publisher(Bool, topic, LATCHED)


def identifications():
    """The threads identifying (sysid/identify's and identify_on_done's)."""
    return [thread for thread in threading.enumerate() if thread.name == "identify"]


def settling(node) -> bool:
    """Whether identify_on_done is waiting for the samples sent before a done flag."""
    return not node._settle_timer.is_canceled()


def buffer_snapshot(node):
    with node.live_recording.lock:
        return [a.copy() for a in node.buffer.chronological()]


# --------------------------------------------------------------------------- 1. end to end over DDS

def test_identifies_payload_from_published_joint_states(data, context, executor, nodes, tmp_path):
    nominal, truth, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path))
    publisher_node = nodes(plain_node, unique("joint_state_source"))
    client_node = nodes(plain_node, unique("identify_client"))
    # deep enough that no sample leaves the writer's history before it is acknowledged
    publisher = publisher_node.create_publisher(JointState, "/joint_states",
                                                QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE))
    assert spin_until(executor, lambda: publisher.get_subscription_count() >= 1)

    source = Messages(recording)
    total = recording.n_samples
    for start in range(0, total, 200):
        # batches well below the subscription's depth, spun until stored: nothing may be lost
        for i in range(start, min(start + 200, total)):
            publisher.publish(source.message(i))
        assert spin_until(executor, lambda: identifier.received >= min(start + 200, total)), \
            f"stuck at {identifier.received} of {min(start + 200, total)} samples"
    assert (identifier.received, identifier.stored, identifier.rejected) == (total, total, 0)

    response = call(executor, client_node, "/sysid/identify")
    assert response.success, response.message
    summary = json.loads(response.message)
    true = truth.nominal_parameters[truth.body_names.index("link7")]  # link7 + flange + payload
    assert summary["terminal_body"] == "link7"
    assert abs(summary["mass"] - true[0]) / true[0] < 0.005
    assert np.linalg.norm(np.array(summary["center_of_mass"]) - true[1:4] / true[0]) < 1e-3
    assert summary["n_samples"] > 0.9 * total and summary["updated_model"] is not None
    assert (tmp_path / "params.json").is_file() and (tmp_path / "updated_model.xml").is_file()
    assert identifier.stored == total  # identify keeps the recording

    # a subscriber that joins afterwards still gets the result (transient local)
    results = []
    late = nodes(plain_node, unique("late_listener"))
    late.create_subscription(String, "/sysid/result", lambda msg: results.append(msg.data),
                             QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    assert spin_until(executor, lambda: results)
    document = json.loads(results[-1])
    assert document["mass"] == summary["mass"] and document["source"] == "ros"
    assert document == json.loads((tmp_path / "params.json").read_text())
    assert summary["validation_rmse"] is None

    # the last quarter held out: identified on the rest, validated on it, as the core does it
    identifier.set_parameters([Parameter("validation_fraction", value=0.25)])
    response = call(executor, client_node, "/sysid/identify")
    assert response.success, response.message
    held_out = json.loads(response.message)
    # what the node recorded: no exact accelerations, those come from filtering
    head, tail = Recording(recording.time, recording.q, recording.dq, recording.tau,
                           recording.joint_names).split(0.25)
    expected = identify(nominal, head, identifier._config(nominal, head), validation=tail)
    # (the stamps went through ROS's sec/nanosec: equal to ~1e-9 s, not bit for bit)
    assert held_out["validation_rmse"] == pytest.approx(expected.metrics.validation_rmse, rel=1e-6)
    assert held_out["n_samples"] == expected.metrics.n_samples < summary["n_samples"]
    assert identifier.stored == total


# --------------------------------------------------------------------------- 2. another process

CLIENT_SCRIPT = textwrap.dedent("""
    import json, sys
    import rclpy
    from std_srvs.srv import Trigger
    rclpy.init()
    node = rclpy.create_node("reset_client_" + sys.argv[1])
    client = node.create_client(Trigger, "/sysid/reset")
    if not client.wait_for_service(timeout_sec=float(sys.argv[2])):
        print(json.dumps({"error": "service not found"})); sys.exit(1)
    future = client.call_async(Trigger.Request())
    rclpy.spin_until_future_complete(node, future, timeout_sec=float(sys.argv[2]))
    if not future.done():
        print(json.dumps({"error": "no answer"})); sys.exit(1)
    print(json.dumps({"success": future.result().success, "message": future.result().message}))
    node.destroy_node()
    rclpy.shutdown()
""")


def test_reset_from_another_process(data, executor, nodes, tmp_path):
    _, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path))
    source = Messages(recording)
    feed(identifier, (source.message(i) for i in range(300)))
    assert identifier.stored == 300

    # the ROS wheels re-exec Python through a .pth hook: sys.executable and the environment
    # (ROS_DOMAIN_ID from conftest) make the child join this test's domain
    child = subprocess.Popen([sys.executable, "-c", CLIENT_SCRIPT, uuid.uuid4().hex[:8], str(TIMEOUT)], env=os.environ,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the service answers only while this process spins
        finished = spin_until(executor, lambda: child.poll() is not None, timeout=3 * TIMEOUT)
        assert finished, f"client process did not finish within {3 * TIMEOUT} s"
        out, err = child.communicate(timeout=5.0)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, f"client failed: {out} {err}"
    reply = json.loads(out.strip().splitlines()[-1])
    assert reply["success"], reply
    assert (identifier.stored, identifier.received, identifier.rejected, identifier.overwritten) == (0, 0, 0, 0)


# --------------------------------------------------------------------------- 3. bad inputs

def _one_joint_moving(nominal):
    """Noise-free torques while only joint4 moves: most parameters are invisible."""
    single = multisine(nominal.joint_range[3:4], 8.0, 500.0, seed=0, max_velocity=2.0)
    num = len(single.time)
    q = np.tile(nominal.joint_range.mean(axis=1), (num, 1))
    dq, ddq = np.zeros((num, 7)), np.zeros((num, 7))
    q[:, 3], dq[:, 3], ddq[:, 3] = single.q[:, 0], single.dq[:, 0], single.ddq[:, 0]
    return ideal_recording(nominal.model, Trajectory(single.time, q, dq, ddq), nominal.joint_names)


def _case_messages(case, data):
    nominal, _, recording = data
    source = Messages(recording)
    n = recording.n_samples
    if case == "too_few":
        return [source.message(i) for i in range(500)]
    if case == "missing_joint":
        messages = [source.message(i) for i in range(n)]
        for msg in messages:
            keep = [k for k, name in enumerate(msg.name) if name != "joint3"]
            msg.name = [msg.name[k] for k in keep]
            for field in ("position", "velocity", "effort"):
                setattr(msg, field, [getattr(msg, field)[k] for k in keep])
        return messages
    if case == "rank_too_low":
        single = Messages(_one_joint_moving(nominal))
        return [single.message(i) for i in range(single.recording.n_samples)]
    return [source.message(i) for i in range(n)]  # good data; the parameters are wrong


BAD_CASES = {
    # case: (identifier parameters, expected fragment of the message)
    "too_few": ({}, "too few samples: 500 recorded"),
    "missing_joint": ({}, "lacks the model joints ['joint3']"),
    "rank_too_low": ({}, "rank"),
    "empty_model": ({"model": ""}, "parameter 'model' is empty"),
    "current_without_constants": ({"effort_mode": "current"}, "needs torque_constants"),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input_fails_cleanly_and_keeps_the_recording(case, data, executor, nodes, tmp_path):
    parameters, expected = BAD_CASES[case]
    identifier = make_identifier(nodes, output_dir=str(tmp_path), **parameters)
    client_node = nodes(plain_node, unique("bad_input_client"))
    messages = _case_messages(case, data)
    feed(identifier, messages)
    counters = (identifier.received, identifier.stored, identifier.rejected)
    before = buffer_snapshot(identifier) if identifier.buffer is not None else None

    response = call(executor, client_node, "/sysid/identify")
    assert not response.success
    assert expected in response.message, response.message
    assert "\n" not in response.message
    assert not (tmp_path / "params.json").exists()
    # the node is alive and its recording untouched
    assert (identifier.received, identifier.stored, identifier.rejected) == counters
    if before is not None:
        for old, new in zip(before, buffer_snapshot(identifier)):
            np.testing.assert_array_equal(old, new)
    if case == "missing_joint":
        assert counters == (len(messages), 0, len(messages))
    assert call(executor, client_node, "/sysid/reset").success


def test_bad_model_path_fails_then_recording_is_still_usable(data, executor, nodes, tmp_path):
    _, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path))
    client_node = nodes(plain_node, unique("model_client"))
    source = Messages(recording)
    feed(identifier, (source.message(i) for i in range(recording.n_samples)))

    missing = tmp_path / "no_such_arm.xml"
    assert identifier.set_parameters([Parameter("model", value=str(missing))])[0].successful
    response = call(executor, client_node, "/sysid/identify")
    assert not response.success and "model file not found" in response.message, response.message
    assert identifier.stored == recording.n_samples

    # the model is reloaded at the next identify; the recording was kept
    assert identifier.set_parameters([Parameter("model", value=str(NOMINAL))])[0].successful
    response = call(executor, client_node, "/sysid/identify")
    assert response.success, response.message


def test_refused_model_file_still_reports_the_identification(data, executor, nodes, tmp_path):
    _, _, recording = data
    # MuJoCo would ignore written inertials under inertiafromgeom="true": export refuses
    model = tmp_path / "from_geoms.xml"
    model.write_text(NOMINAL.read_text().replace('<compiler angle="radian"',
                                                 '<compiler inertiafromgeom="true" angle="radian"'))
    identifier = make_identifier(nodes, model=str(model), output_dir=str(tmp_path / "out"))
    source = Messages(recording)
    feed(identifier, (source.message(i) for i in range(recording.n_samples)))
    response = call(executor, nodes(plain_node, unique("refused_client")), "/sysid/identify")
    assert not response.success, "no usable model came out"
    summary = json.loads(response.message)
    assert summary["verdict"] == "good"  # the parameters are fine; the file could not take them
    assert summary["updated_model"] is None and "inertiafromgeom" in summary["updated_model_error"]
    assert (tmp_path / "out" / "params.json").is_file() and not (tmp_path / "out" / "updated_model.xml").exists()


def test_invalid_parameters_are_rejected_with_a_reason(nodes):
    identifier = make_identifier(nodes)
    for name, value, reason in [("scope", "nope", "scope must be one of"),
                                ("estimator", "magic", "estimator must be one of"),
                                ("effort_mode", "volts", "effort_mode must be one of"),
                                ("friction_terms", ["stiction"], "friction_terms"),
                                ("cutoff_hz", -1.0, "cutoff_hz"),
                                ("decimation", -1, "decimation"),
                                ("torque_constants", [0.1, float("nan")], "torque_constants"),
                                ("buffer_capacity", 10, "read-only"),
                                ("residual", "mlp", "residual must be one of")]:
        result = identifier.set_parameters([Parameter(name, value=value)])[0]
        assert not result.successful, name
        assert reason in result.reason, result.reason
    assert identifier.get_parameter("scope").value == "terminal"
    assert identifier.set_parameters([Parameter("scope", value="full")])[0].successful


def test_zero_stamps_fall_back_to_the_node_clock_in_sim_time(data, executor, nodes, tmp_path):
    _, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path), use_sim_time=True, min_samples=0)
    clock_node = nodes(plain_node, unique("clock_source"))
    clock = clock_node.create_publisher(Clock, "/clock", 10)
    source = Messages(recording)
    unstamped = source.message(0, stamp=0.0)
    assert (unstamped.header.stamp.sec, unstamped.header.stamp.nanosec) == (0, 0)

    for sim_time in (50.0, 50.5):
        clock.publish(Clock(clock=Time(sec=int(sim_time), nanosec=int(round(sim_time % 1 * 1e9)))))
        assert spin_until(executor, lambda: identifier.get_clock().now().nanoseconds == round(sim_time * 1e9))
        feed(identifier, [unstamped, unstamped])
    time_s = identifier.buffer.chronological()[0]
    # a batch shares its receive time: kept (test_identifier_input.py: identify spreads it back)
    np.testing.assert_array_equal(time_s, [50.0, 50.0, 50.5, 50.5])
    assert identifier.rejected == 0


# --------------------------------------------------------------------------- 4. bounded memory

def test_memory_is_bounded_by_the_buffer_capacity(nodes):
    capacity, fed, n = 600_000, 650_000, 7
    identifier = make_identifier(nodes, buffer_capacity=capacity)
    buffer = identifier.buffer
    assert buffer.nbytes == capacity * (1 + 3 * n) * 8

    msg = JointState()
    msg.name = [f"joint{j}" for j in range(n, 0, -1)]  # reversed order
    msg.position, msg.velocity, msg.effort = [0.0] * n, [0.0] * n, [0.0] * n
    stamp, position = msg.header.stamp, msg.position
    callback = identifier._on_joint_state
    started = time.perf_counter()
    for i in range(fed):
        # mutate one message instead of building 650000
        stamp.sec, stamp.nanosec = 100 + i // 1000, (i % 1000) * 1_000_000
        position[0] = i  # joint7
        callback(msg)
    elapsed = time.perf_counter() - started
    print(f"\n{fed} JointState callbacks in {elapsed:.2f} s ({1e6 * elapsed / fed:.2f} us each)")

    assert (identifier.received, identifier.stored, identifier.overwritten) == (fed, capacity, fed - capacity)
    assert identifier.buffer is buffer and buffer.nbytes == capacity * (1 + 3 * n) * 8
    time_s, q, _, _ = buffer.chronological()
    np.testing.assert_array_equal(q[[0, -1], 6], [fed - capacity, fed - 1])  # oldest dropped, in order
    assert np.all(np.diff(time_s) > 0)


# --------------------------------------------------------------------------- 5. effort semantics


def test_current_and_gravity_compensated_efforts_give_the_torque_result(data, executor, nodes, tmp_path):
    nominal, _, recording = data
    client_node = nodes(plain_node, unique("effort_client"))
    kt = np.array([0.12, 0.12, 0.09, 0.09, 0.075, 0.075, 0.075])  # N m/A
    gear = np.array([6.0, 6.0, 9.0, 9.0, 10.0, 10.0, 10.0])
    efforts = {
        "torque": ({}, recording.tau),
        "current": ({"torque_constants": kt.tolist(), "gear_ratios": gear.tolist()}, recording.tau / (kt * gear)),
        "gravity_compensated": ({}, recording.tau - gravity_mujoco(nominal.model, recording.q)),
    }
    documents = {}
    for mode, (extra, effort) in efforts.items():
        identifier = make_identifier(nodes, output_dir=str(tmp_path / mode), effort_mode=mode, **extra)
        source = Messages(recording)
        feed(identifier, (source.message(i, effort=effort) for i in range(recording.n_samples)))
        response = call(executor, client_node, "/sysid/identify")
        assert response.success, f"{mode}: {response.message}"
        assert json.loads(response.message)["effort_mode"] == mode
        documents[mode] = json.loads((tmp_path / mode / "params.json").read_text())
        nodes.destroy(identifier)  # one /sysid/identify server at a time

    reference = documents["torque"]
    for mode in ("current", "gravity_compensated"):
        doc = documents[mode]
        np.testing.assert_allclose(doc["mass"], reference["mass"], rtol=1e-7)
        np.testing.assert_allclose(doc["center_of_mass_moment"], reference["center_of_mass_moment"], rtol=1e-6,
                                   atol=1e-10)
        np.testing.assert_allclose(list(doc["inertia_tensor"].values()), list(reference["inertia_tensor"].values()),
                                   rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose([j["viscous_friction"] for j in doc["joints"]],
                                   [j["viscous_friction"] for j in reference["joints"]], rtol=1e-6, atol=1e-9)


def test_residual_model_next_to_params_json(data, executor, nodes, tmp_path):
    _, _, recording = data
    client_node = nodes(plain_node, unique("residual_client"))
    identifier = make_identifier(nodes, output_dir=str(tmp_path), residual="gmm", validation_fraction=0.25)
    source = Messages(recording)
    feed(identifier, (source.message(i) for i in range(recording.n_samples)))
    response = call(executor, client_node, "/sysid/identify")
    assert response.success, response.message
    summary = json.loads(response.message)
    assert summary["residual_model"] == str(tmp_path / "residual_model.json")
    block = json.loads((tmp_path / "params.json").read_text())["residual"]
    assert [j["joint"] for j in block["joints"]] == list(recording.joint_names) and not block["deflection"]
    # every joint has its held-out and validation figures; the validation RMSE without the
    # model is the fit's own
    document = json.loads((tmp_path / "params.json").read_text())
    for joint in block["joints"]:
        assert joint["heldout_rmse"]["without"] > 0 and joint["validation_rmse"]["with"] > 0
        assert joint["validation_rmse"]["without"] == pytest.approx(
            document["validation_rmse_per_joint"][joint["joint"]], rel=0.05)
    model = ResidualModel.from_dict(json.loads((tmp_path / "residual_model.json").read_text()))
    assert model.joint_names == tuple(recording.joint_names)
    nodes.destroy(identifier)


# --------------------------------------------------------------------------- identify_on_done


def test_identify_on_done_runs_once_per_finished_excitation(data, executor, nodes, tmp_path):
    """What auto_identify of sim_identify.launch.py relies on: the latched done flag. Each flag
    is handled before the next is published (depth 1: one not taken yet would be replaced)."""
    _, _, recording = data
    node = make_identifier(nodes, output_dir=str(tmp_path), identify_on_done=True)
    messages = Messages(recording)
    feed(node, [messages.message(i) for i in range(recording.n_samples)])
    flags = handled(node, "/sysid/done")
    done = done_flag(nodes)
    results = []
    listener = nodes(rclpy.create_node, unique("result_listener"))
    listener.create_subscription(String, "/sysid/result", lambda msg: results.append(msg.data), LATCHED)

    def publish(flag: bool):
        done.publish(Bool(data=flag))
        count = len(flags) + 1
        assert spin_until(executor, lambda: len(flags) == count), f"sysid/done {flag} not handled"

    publish(False)
    assert not settling(node) and not results  # not done yet: nothing to identify
    publish(True)
    assert spin_until(executor, lambda: len(results) == 1), "no identification after done"
    assert (tmp_path / "params.json").is_file()
    publish(True)  # still done: no second run
    assert not settling(node)
    publish(False)  # a new excitation starts
    assert not settling(node)
    publish(True)  # and finishes
    assert spin_until(executor, lambda: len(results) == 2), "no identification after the second run"
    assert spin_until(executor, lambda: not identifications())  # its figures written


def test_identify_on_done_waits_for_quiet_or_for_a_sample_stamped_after_the_flag(data, executor, nodes, tmp_path,
                                                                                  capfd):
    """The wait for the samples measured before the flag, its ticks run by hand: one tick without
    a new sample is not quiet yet (it may run before the executor took what was queued
    meanwhile), two are; samples stamped before the flag's arrival plus SETTLE_RUN_ON_S keep it
    waiting however many ticks they take, the first stamped later ends it (a source that never
    stops). The node's clock is simulated: the flag arrives at a known time."""
    _, _, recording = data
    node = make_identifier(nodes, output_dir=str(tmp_path), identify_on_done=True, plots=False, use_sim_time=True)
    clock = nodes(plain_node, unique("clock_source")).create_publisher(Clock, "/clock", 10)
    arrival = 2000.0  # s, the node's clock when the flag arrives
    clock.publish(Clock(clock=Time(sec=int(arrival))))
    assert spin_until(executor, lambda: node.get_clock().now().nanoseconds == round(arrival * 1e9))
    messages = Messages(recording)

    def flag(value: bool):
        node._on_done(Bool(data=value))

    flag(True)  # nothing recorded: a quick refusal
    node._on_settle_timer()
    assert settling(node)
    node._on_settle_timer()
    assert not settling(node)
    assert spin_until(executor, lambda: not identifications())
    flag(False)

    # a steady source at 500 Hz: sample 3000 measured 1 ms after the flag arrived, 3999 is the
    # last measured within SETTLE_RUN_ON_S of it
    start = arrival + 1e-3 - recording.time[3000]
    assert start + recording.time[3999] < arrival + SETTLE_RUN_ON_S <= start + recording.time[4000]
    feed(node, [messages.message(i, stamp=start + recording.time[i]) for i in range(3000)])
    flag(True)
    for i in range(3000, 4000):
        feed(node, [messages.message(i, stamp=start + recording.time[i])])
        if i % 50 == 0:  # a tick every 0.1 s of the source's time: never quiet
            node._on_settle_timer()
            assert settling(node)
    node._on_settle_timer()
    assert settling(node)
    feed(node, [messages.message(4000, stamp=start + recording.time[4000])])
    node._on_settle_timer()
    assert not settling(node)
    assert spin_until(executor, lambda: not identifications())
    answers = re.findall(rf"\[{node.get_name()}\]: identify_on_done: (.*)", capfd.readouterr().err)
    assert len(answers) == 2 and "too few samples: none recorded" in answers[0], answers
    summary = json.loads(answers[1])
    assert summary["received_samples"] == summary["recorded_samples"] == recording.n_samples
    assert summary["missing_samples"] == 0


def test_identify_on_done_identifies_every_sample_sent_before_the_flag(data, executor, nodes, tmp_path, capfd):
    """However long the queue takes to drain: the node takes 1 ms per message here, as a loaded
    machine would, so the samples published before sysid/done arrive over twice SETTLE_RUN_ON_S
    after it; none may be left out (their stamps are far behind the node's clock: only the quiet
    ends the wait)."""
    _, _, recording = data
    n = recording.n_samples
    assert n * 1e-3 > 2 * SETTLE_RUN_ON_S
    node = make_identifier(nodes, output_dir=str(tmp_path), identify_on_done=True, exit_when_done=True,
                           plots=False)
    handled(node, "/joint_states", wrap=lambda callback, msg: (time.sleep(1e-3), callback(msg)))
    # deep enough that no sample leaves the writer's history before it is acknowledged
    publisher = nodes(plain_node, unique("joint_state_source")).create_publisher(
        JointState, "/joint_states", QoSProfile(depth=n, reliability=ReliabilityPolicy.RELIABLE))
    done = done_flag(nodes)
    assert spin_until(executor, lambda: publisher.get_subscription_count() >= 1 and done.get_subscription_count() >= 1)
    source = Messages(recording)
    for i in range(n):
        publisher.publish(source.message(i))
    done.publish(Bool(data=True))
    assert spin_until(executor, node.finished.done), "identify_on_done did not finish the node"
    answer = re.search(rf"\[{node.get_name()}\]: identify_on_done: (.*)", capfd.readouterr().err).group(1)
    assert answer.startswith("{"), answer
    summary = json.loads(answer)
    assert summary["received_samples"] == summary["recorded_samples"] == n
    assert node.finished.result() == EXIT_OK


def test_exit_when_done_under_a_namespace_with_the_truth_and_lost_samples(data, executor, nodes, tmp_path):
    """What exit_when_done of sim_identify.launch.py relies on, under a namespace: the node
    answers sysid/done of its own namespace only, identifies what arrived (a few samples were
    lost on the way, and it says how many), compares with the truth model, then finishes."""
    _, truth, recording = data
    node = make_identifier(nodes, namespace="/robot1", output_dir=str(tmp_path), identify_on_done=True,
                           exit_when_done=True, truth_model=str(TRUTH))
    messages = Messages(recording)
    lost = set(range(1000, 1003)) | set(range(2500, 2530))  # a short and a long hole
    feed(node, [messages.message(i) for i in range(recording.n_samples) if i not in lost])
    assert [s.topic_name for s in node.subscriptions if s.topic_name.endswith("sysid/done")] == ["/robot1/sysid/done"]
    flags = handled(node, "/robot1/sysid/done")
    elsewhere, done = done_flag(nodes), done_flag(nodes, "/robot1/sysid/done")
    heard = []  # another graph's run ends, as a node of that graph hears it: not ours
    nodes(plain_node, unique("other_graph")).create_subscription(Bool, "/sysid/done", heard.append, LATCHED)
    elsewhere.publish(Bool(data=True))
    assert spin_until(executor, lambda: heard)
    done.publish(Bool(data=False))
    assert spin_until(executor, lambda: flags)
    assert [flag.data for flag in flags] == [False] and not settling(node)
    assert not node.finished.done() and not (tmp_path / "params.json").exists()

    done.publish(Bool(data=True))
    assert spin_until(executor, node.finished.done), "identify_on_done did not finish the node"
    assert node.finished.result() == EXIT_OK
    assert (tmp_path / "updated_model.xml").is_file() and (tmp_path / "torque_fit.png").is_file()
    document = json.loads((tmp_path / "params.json").read_text())
    true = truth.nominal_parameters[truth.body_names.index("link7")]
    assert document["truth"]["mass"] == pytest.approx(true[0])
    assert document["error"]["mass_percent"] < 0.5
    # the service of the namespace answers the same, with the counts and the truth
    summary = json.loads(call(executor, nodes(plain_node, unique("ns_client")), "/robot1/sysid/identify").message)
    assert (summary["recorded_samples"], summary["missing_samples"]) == (recording.n_samples - 33, 33)
    assert summary["truth"]["mass_error_percent"] == pytest.approx(document["error"]["mass_percent"])
    assert summary["truth"]["com_error_mm"] < 1.0


def test_exit_when_done_reports_bad_input_in_the_exit_status(data, executor, nodes, tmp_path):
    _, _, recording = data
    node = make_identifier(nodes, output_dir=str(tmp_path), identify_on_done=True, exit_when_done=True)
    messages = Messages(recording)
    feed(node, [messages.message(i) for i in range(500)])  # too few
    done_flag(nodes).publish(Bool(data=True))
    assert spin_until(executor, node.finished.done)
    assert node.finished.result() == EXIT_BAD_INPUT
    assert not (tmp_path / "params.json").exists()


def test_the_recording_goes_on_while_identifying(data, executor, nodes, tmp_path):
    _, _, recording = data
    identifier = make_identifier(nodes, output_dir=str(tmp_path))
    publisher_node = nodes(plain_node, unique("joint_state_source"))
    publisher = publisher_node.create_publisher(JointState, "/joint_states",
                                                QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE))
    assert spin_until(executor, lambda: publisher.get_subscription_count() >= 1)
    source = Messages(recording)
    half = recording.n_samples // 2
    feed(identifier, (source.message(i) for i in range(half)))

    client = nodes(plain_node, unique("identify_client")).create_client(Trigger, "/sysid/identify")
    assert spin_until(executor, client.service_is_ready)
    # white box: holding the lock stands for a long identification, so the test does not race it
    with identifier._identify_lock:
        future = client.call_async(Trigger.Request())
        assert spin_until(executor, lambda: any(t.name == "identify" for t in threading.enumerate()))
        for i in range(half, recording.n_samples):  # the rest arrives over DDS meanwhile
            publisher.publish(source.message(i))
        assert spin_until(executor, lambda: identifier.stored == recording.n_samples or future.done())
        assert not future.done() and identifier.stored == recording.n_samples, \
            "the pending identification stopped the recording"
    assert spin_until(executor, future.done)
    answer = json.loads(future.result().message)
    assert answer["recorded_samples"] == recording.n_samples
    assert identifier.rejected == 0


@pytest.mark.parametrize("n_samples, rate, cutoff, expected", [
    (5_000, 1000.0, 10.0, 1),       # short: every row
    (23_744, 1000.0, 10.0, 2),      # the 20 s excitation of sim_identify
    (600_000, 1000.0, 10.0, 20),    # 10 min: 30000 rows, 5 per second per Hz of cutoff
    (600_000, 1000.0, 50.0, 4),     # a higher cutoff keeps more
    (100_000, 250.0, 10.0, 5),      # the virtual Damiao arm's rate
])
def test_automatic_decimation_bounds_the_rows_but_not_below_the_filter_band(n_samples, rate, cutoff, expected):
    assert automatic_decimation(n_samples, rate, cutoff) == expected


def test_a_failed_verdict_answers_false_writes_no_model_and_fails_the_exit(data, executor, nodes, tmp_path):
    """The arm never moves (it holds its pose against gravity, the sensors only see noise): a
    result comes out, but its verdict is failed. The answer carries the verdict, params.json
    says it, no model is written and none of an earlier run is left; exit_when_done ends with 3."""
    nominal, _, recording = data
    rng = np.random.default_rng(3)
    n, dof = recording.n_samples, nominal.n_joints
    q = np.tile(recording.q[0], (n, 1)) + 1e-4 * rng.standard_normal((n, dof))
    held = Recording(recording.time, q, 1e-3 * rng.standard_normal((n, dof)),
                     gravity_torque(nominal, q) + 0.01 * rng.standard_normal((n, dof)), recording.joint_names)
    (tmp_path / "updated_model.xml").write_text("<mujoco/>")  # what an earlier run wrote
    node = make_identifier(nodes, output_dir=str(tmp_path), identify_on_done=True, exit_when_done=True)
    messages = Messages(held)
    feed(node, (messages.message(i) for i in range(n)))
    done_flag(nodes).publish(Bool(data=True))
    assert spin_until(executor, node.finished.done), "identify_on_done did not finish the node"
    assert node.finished.result() == EXIT_FAILED
    assert not (tmp_path / "updated_model.xml").exists()
    assert json.loads((tmp_path / "params.json").read_text())["verdict"] == "failed"

    response = call(executor, nodes(plain_node, unique("verdict_client")), "/sysid/identify")
    assert not response.success
    summary = json.loads(response.message)
    assert summary["verdict"] == "failed" and summary["verdict_reasons"], summary
    assert summary["updated_model"] is None and "verdict is failed" in summary["updated_model_error"]


@pytest.mark.parametrize("lost, level", [
    (set(range(10, 4000, 10)), "doubtful"),  # every tenth sample: 10 %
    # six holes of 0.8 s, 60 % of the run (a leap of over screening.CLOCK_JUMP_S would be a
    # pause of the source, a new stretch, nothing lost)
    ({i for k in range(6) for i in range(300 + 600 * k, 700 + 600 * k)}, "failed"),
])
def test_lost_samples_reach_the_verdict(lost, level, data, executor, nodes, tmp_path):
    _, _, recording = data
    assert recording.n_samples == 4001
    node = make_identifier(nodes, output_dir=str(tmp_path), min_samples=1000)
    messages = Messages(recording)
    feed(node, (messages.message(i) for i in range(recording.n_samples) if i not in lost))
    response = call(executor, nodes(plain_node, unique("lost_client")), "/sysid/identify")
    summary = json.loads(response.message)
    assert summary["missing_samples"] == len(lost)
    assert summary["verdict"] == level and any("never arrived" in r for r in summary["verdict_reasons"]), summary
    # a doubtful result is usable: its model is written
    assert response.success == (level == "doubtful") == (tmp_path / "updated_model.xml").is_file()


def test_report_html_next_to_params_json_after_the_answer(data, executor, nodes, tmp_path):
    """report.html is written after the answer, by the identifying thread, with the node's counts;
    with report_html false it is not (and the previous one is removed)."""
    _, _, recording = data
    node = make_identifier(nodes, output_dir=str(tmp_path), plots=False)
    messages = Messages(recording)
    feed(node, (messages.message(i) for i in range(recording.n_samples) if i != 100))
    client = nodes(plain_node, unique("report_client"))
    summary = json.loads(call(executor, client, "/sysid/identify").message)
    assert summary["report_html"] == str(tmp_path / "report.html")
    assert spin_until(executor, lambda: not identifications())  # written by the identifying thread
    page = (tmp_path / "report.html").read_text()
    assert page.index('<section id="verdict" class="verdict good"') < page.index('<section id="payload"')
    assert f"{recording.n_samples - 1} samples recorded of {recording.n_samples - 1} received" in page
    assert "1 missing from the stamps" in page and "https://" not in page
    node.set_parameters([Parameter("report_html", value=False)])
    summary = json.loads(call(executor, client, "/sysid/identify").message)
    assert spin_until(executor, lambda: not identifications())
    assert summary["report_html"] is None and not (tmp_path / "report.html").exists()
