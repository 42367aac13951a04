"""model_monitor as users start it: the node's outputs are the core's on the same samples, bad
samples are refused and counted without stopping the stream, a new identification announced on
sysid/result is loaded, and the executable runs in a process of its own under a namespace.

The arm: config/robots/openarm_class_payload.xml simulated (its payload unknown to the nominal
openarm_class.xml) and identified from one run; the monitor then watches a second run of other
motion, fed as joint_states with the simulation's stamps."""
import json
import time

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String

from conftest import ROBOTS, interrupt, start_node
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.identification.residual import fit_residual_model
from sysid_core.online.live_model import load_live_model
from sysid_core.online.monitor import monitor_start, monitor_step
from sysid_core.results.export import params_document, write_params_json
from sysid_core.results.urdf_export import write_updated_robot
from sysid_core.simulation import simulate
from sysid_ros.model_monitor import ModelMonitor

RATE = 500.0
CHUNK = 100  # joint states published at once: the monitor's queue holds 1000
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    """(params.json path, the work run's Recording) of the identified arm."""
    robot = load_robot(ROBOTS / "openarm_class.xml")
    truth = load_robot(ROBOTS / "openarm_class_payload.xml")
    excitation = multisine(robot.joint_range, 8.0, RATE, seed=1, max_velocity=1.0)
    result = identify(robot, simulate(truth.model, excitation, nominal=robot.model, seed=0).recording,
                      IdentificationConfig(), validation=simulate(
                          truth.model, multisine(robot.joint_range, 4.0, RATE, seed=2, max_velocity=1.0),
                          nominal=robot.model, seed=1).recording)
    out = tmp_path_factory.mktemp("identified")
    write_params_json(out / "params.json", params_document(result, robot, "simulation"))
    write_updated_robot(out, robot, result)
    work = simulate(truth.model, multisine(robot.joint_range, 3.0, RATE, seed=3, max_velocity=0.8),
                    nominal=robot.model, seed=2).recording
    return out / "params.json", work


def _messages(recording, names=None):
    names = list(names or recording.joint_names)
    for i, t in enumerate(recording.time):
        msg = JointState(name=names, position=recording.q[i].tolist(), velocity=recording.dq[i].tolist(),
                         effort=recording.tau[i].tolist())
        # stamps well away from zero, as a driver's clock gives them
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(round((100.0 + t) * 1e9)), 1_000_000_000)
        yield msg


class Probe:
    """A node that publishes joint states to, and collects the outputs of, a monitor."""

    def __init__(self, context, monitor, namespace=""):
        self.monitor = monitor
        self.node = Node(f"probe_{id(self)}", namespace=namespace, context=context)
        self.executor = SingleThreadedExecutor(context=context)
        for node in (monitor, self.node):
            self.executor.add_node(node)
        self.states = self.node.create_publisher(JointState, "joint_states", 1000)
        self.result = self.node.create_publisher(String, "sysid/result", LATCHED)
        self.predicted, self.external, self.contact = [], [], []
        self.node.create_subscription(JointState, "sysid/predicted_effort", self.predicted.append, 10000)
        self.node.create_subscription(JointState, "sysid/external_effort", self.external.append, 10000)
        self.node.create_subscription(Bool, "sysid/contact", self.contact.append, LATCHED)

    def feed(self, messages, until, limit=120.0):
        """Publish ``messages``, in chunks the monitor's queue holds, and spin until ``until()``."""
        deadline = time.monotonic() + limit  # a guard against hangs, not a speed target
        messages = list(messages)
        for start in range(0, len(messages), CHUNK):
            for msg in messages[start:start + CHUNK]:
                self.states.publish(msg)
            sent = min(start + CHUNK, len(messages))
            while self.monitor.received < sent and time.monotonic() < deadline:
                self.executor.spin_once(timeout_sec=0.05)
        while not until() and time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.05)

    def close(self):
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()


def _monitor(context, namespace="", **params):
    return ModelMonitor(context=context, namespace=namespace,
                        parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_the_node_publishes_what_the_core_computes_on_the_same_samples(context, arm):
    params, work = arm
    monitor = _monitor(context, params=str(params), batch_size=7, track_payload=False)
    probe = Probe(context, monitor)
    try:
        count = len(work.time)
        # the last batch, short of batch_size, goes when the stream pauses
        probe.feed(_messages(work), lambda: min(len(probe.predicted), len(probe.external)) >= count - 1)
        live = load_live_model(params)
        config, _ = monitor._monitor
        state = monitor_start(live, config, 0.0, work.q[0], work.dq[0], work.tau[0])
        t = np.round(work.time * 1e9) * 1e-9
        state, step = monitor_step(live, config, state, t[1:], work.q[1:], work.dq[1:], work.tau[1:])
        got = len(probe.predicted)
        assert got == count - 1
        predicted = np.array([m.effort for m in probe.predicted])
        external = np.array([m.effort for m in probe.external[:got]])
        np.testing.assert_allclose(predicted, step.predicted[:got], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(external, step.external[:got], rtol=1e-9, atol=1e-9)
        # stamped as the input
        stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in probe.predicted]
        np.testing.assert_allclose(stamps, 100.0 + work.time[1:got + 1], atol=1e-9)
        assert list(probe.predicted[0].name) == list(live.joint_names)
        # the identified model on motion of its own kind: no contact, and it holds
        assert not any(m.data for m in probe.contact)
        assert monitor.holds and monitor.refused == {}
    finally:
        probe.close()
        monitor.destroy_node()


def test_bad_samples_are_refused_and_counted_and_the_stream_goes_on(context, arm):
    params, work = arm
    monitor = _monitor(context, params=str(params), batch_size=1, track_payload=False)
    probe = Probe(context, monitor)
    try:
        messages = list(_messages(work))[:200]
        bad_nan = JointState(name=list(messages[50].name), position=list(messages[50].position),
                             velocity=list(messages[50].velocity), effort=[float("nan")] + list(messages[50].effort[1:]))
        bad_nan.header.stamp = messages[50].header.stamp
        missing = JointState(name=list(messages[51].name[1:]), position=list(messages[51].position[1:]),
                             velocity=list(messages[51].velocity[1:]), effort=list(messages[51].effort[1:]))
        missing.header.stamp = messages[51].header.stamp
        stream = messages[:50] + [bad_nan, missing] + messages[50:100] + [messages[10]] + messages[100:]
        probe.feed(stream, lambda: monitor.processed >= 199)
        assert monitor.processed == 199  # every good sample but the first (the observer's start)
        kinds = monitor.refused
        assert sum(kinds.values()) == 3, kinds
        assert kinds.get("NaN or infinite values") == 1 and kinds.get("stamped at or before the previous sample") == 1
    finally:
        probe.close()
        monitor.destroy_node()


def test_a_result_announced_by_the_identifier_is_loaded_under_a_namespace(context, arm, tmp_path):
    params, work = arm
    target = tmp_path / "params.json"
    monitor = _monitor(context, namespace="/arm7", params=str(target), model=str(ROBOTS / "openarm_class.xml"),
                       track_payload=False)
    probe = Probe(context, monitor, namespace="/arm7")
    try:
        assert monitor.live.source.endswith("openarm_class.xml") and monitor.live.sigma is None
        probe.feed(list(_messages(work))[:100], lambda: monitor.processed >= 99)
        assert monitor.rmse is not None  # the nominal model monitored (no band: nothing judged)
        for name in ("params.json", "updated_model.xml"):
            (tmp_path / name).write_bytes((params.parent / name).read_bytes())
        probe.result.publish(String(data=json.dumps({"verdict": "good"})))
        probe.feed([], lambda: monitor.live.source == str(target))
        assert monitor.live.source == str(target) and monitor.live.sigma is not None
        monitor._publish_diagnostics()  # between the models: waiting for samples, not an error
        probe.feed(list(_messages(work))[100:], lambda: monitor.processed >= 200)
        assert monitor.processed >= 200 and probe.predicted
        assert probe.predicted[0].header.stamp.sec >= 100
    finally:
        probe.close()
        monitor.destroy_node()


def test_the_executable_runs_in_a_process_of_its_own(context, arm):
    params, work = arm
    namespace = "/monitor_process"
    process = start_node("model_monitor", "-r", f"__ns:={namespace}", "-p", f"params:={params}", "-p",
                         "batch_size:=5")
    node = Node("process_probe", namespace=namespace, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    received = []
    node.create_subscription(JointState, "sysid/predicted_effort", received.append, 1000)
    states = node.create_publisher(JointState, "joint_states", 1000)
    try:
        deadline = time.monotonic() + 120.0  # a guard against hangs, not a speed target
        while states.get_subscription_count() == 0 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert states.get_subscription_count() == 1, "the monitor never subscribed"
        for msg in list(_messages(work))[:300]:
            states.publish(msg)
            executor.spin_once(timeout_sec=0.0)
        while len(received) < 250 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert len(received) >= 250, f"{len(received)} predictions received"
        assert all(len(m.effort) == 7 and np.all(np.isfinite(m.effort)) for m in received)
    finally:
        status = interrupt(process)
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
    output = process.stdout.read()
    assert status == 0, output
    assert "monitoring with" in output, output


def test_a_residual_model_of_the_deflection_applies_once_motor_states_give_it(context, arm, tmp_path):
    """A residual model that takes the deflection (q - motor side, from motor_states stamped like
    a joint state) is left out of the prediction until the motor side of every joint has been
    read, then applied with the deflection held: the node's prediction is the core's without the
    model up to one sample and the core's with that deflection from it on."""
    params, work = arm
    for name in ("params.json", "updated_model.xml"):
        (tmp_path / name).write_bytes((params.parent / name).read_bytes())
    # a residual of the deflection alone, learnt over this motion
    trained = 1e-3 * np.sin(np.outer(work.time, 1.3 + 0.1 * np.arange(len(work.joint_names))))
    residual = fit_residual_model(work.joint_names, work.q, work.dq, 50.0 * trained, deflection=trained,
                                  components=(2, 4))
    (tmp_path / "residual_model.json").write_text(json.dumps(residual.as_dict()))
    live = load_live_model(tmp_path / "params.json")
    monitor = _monitor(context, params=str(tmp_path / "params.json"), batch_size=5, track_payload=False)
    probe = Probe(context, monitor)
    motor_pub = probe.node.create_publisher(JointState, "motor_states", 10)
    try:
        assert monitor.live.residual is not None and monitor.live.residual.needs("deflection")
        messages = list(_messages(work))
        probe.feed(messages[:400], lambda: monitor.received >= 400)
        deflection = np.full(len(work.joint_names), 5e-4)
        motor = JointState(name=list(work.joint_names), position=(work.q[399] - deflection).tolist())
        motor.header.stamp = messages[399].header.stamp
        motor_pub.publish(motor)
        deadline = time.monotonic() + 60.0
        while np.isnan(monitor._deflection).any() and time.monotonic() < deadline:
            probe.executor.spin_once(timeout_sec=0.05)
        probe.feed(messages[400:], lambda: len(probe.predicted) >= len(messages) - 1)
        got = np.array([m.effort for m in probe.predicted])
        config = monitor._monitor[0]
        t = np.round(work.time * 1e9) * 1e-9
        outputs = []
        for held in (None, np.tile(deflection, (len(t) - 1, 1))):
            state = monitor_start(live, config, 0.0, work.q[0], work.dq[0], work.tau[0])
            outputs.append(monitor_step(live, config, state, t[1:], work.q[1:], work.dq[1:], work.tau[1:], held)[1])
        without, with_model = outputs[0].predicted, outputs[1].predicted
        assert np.abs(with_model - without).max() > 1e-3  # the residual model changes the prediction
        switch = int(np.argmax(np.abs(got - without).max(axis=1) > 1e-9))
        assert 399 <= switch < len(got) - 100
        np.testing.assert_allclose(got[:switch], without[:switch], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got[switch:], with_model[switch:], rtol=1e-9, atol=1e-9)
    finally:
        probe.close()
        monitor.destroy_node()
