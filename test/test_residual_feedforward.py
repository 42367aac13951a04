"""A residual model at work in a node: trajectory_publisher adds the correction of the
residual_model.json beside its model file to the feed-forward it sends, exactly what
ResidualModel.predict_for gives at the planned motion and the model's torque; a model that needs
the measured deflection, or a file that is no residual model of the arm, is not used silently."""
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from sysid_core.dynamics.model import load_robot
from sysid_core.identification.residual import ResidualModel, fit_residual_model
from sysid_ros.trajectory_publisher import TrajectoryPublisher

OPENARM = Path(__file__).resolve().parents[1] / "config" / "robots" / "openarm_class.xml"


def _model(robot, deflection: bool) -> ResidualModel:
    """A residual model of the arm's joints that every joint applies: a friction-like residual
    growing with the load, learnt from synthetic samples."""
    rng = np.random.default_rng(0)
    n, count = robot.n_joints, 6000
    t = np.arange(count) / 500.0
    q = 0.5 * np.sin(np.outer(t, 0.7 + 0.1 * np.arange(n)) + rng.uniform(0, 6, n))
    dq = np.gradient(q, t, axis=0)
    torque = 5.0 * np.sin(q) + 0.5 * dq
    residual = 0.1 * np.abs(torque) * np.tanh(dq / 0.05) + 0.005 * rng.standard_normal(q.shape)
    model = fit_residual_model(robot.joint_names, q, dq, residual, torque=torque, components=(2, 4),
                               deflection=1e-3 * np.tanh(torque) if deflection else None)
    assert all(j.applied for j in model.joints), [j.reason for j in model.joints]
    return model


def _publisher(context, model_path, **params):
    return TrajectoryPublisher(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in dict(
        model=str(model_path), duration=2.0, rate_hz=200.0, autostart=False, preview=False, **params).items()])


def _started(context, pub, robot):
    """Give ``pub`` a measured pose and start its run."""
    probe = Node(f"probe_{id(pub)}", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(pub)
    executor.add_node(probe)
    state_pub = probe.create_publisher(JointState, "joint_states", 10)
    deadline = time.monotonic() + 60.0
    while pub._q_measured is None:
        assert time.monotonic() < deadline, "no joint_states reached the publisher"
        state_pub.publish(JointState(name=list(robot.joint_names), position=robot.joint_range.mean(axis=1).tolist()))
        executor.spin_once(timeout_sec=0.05)
    ok, message = pub.start()
    executor.shutdown(timeout_sec=1.0)
    probe.destroy_node()
    assert ok, message


def test_the_feed_forward_carries_the_residual_model_beside_the_model(context, tmp_path):
    robot = load_robot(OPENARM)
    model_path = Path(shutil.copy(OPENARM, tmp_path / "updated_model.xml"))
    model = _model(robot, deflection=False)
    (tmp_path / "residual_model.json").write_text(json.dumps(model.as_dict()))
    pub = _publisher(context, model_path)
    try:
        assert pub.error is None and pub.residual is not None
        _started(context, pub, robot)
        profile = pub.profile
        rigid = robot.inverse_dynamics(profile.q, profile.dq, profile.ddq)
        correction = ResidualModel.from_dict(model.as_dict()).predict_for(robot.joint_names, profile.q, profile.dq,
                                                                          torque=rigid)
        assert np.abs(correction).max() > 0.05  # the run moves where the model corrects
        np.testing.assert_allclose(pub.feedforward, rigid + correction, rtol=0, atol=1e-9)
    finally:
        pub.destroy_node()
    # 'none': the model file alone
    pub = _publisher(context, model_path, residual_model="none")
    try:
        assert pub.error is None and pub.residual is None
    finally:
        pub.destroy_node()


def test_a_residual_model_that_needs_the_deflection_is_left_out(context, tmp_path):
    robot = load_robot(OPENARM)
    path = tmp_path / "double_encoder_model.json"
    path.write_text(json.dumps(_model(robot, deflection=True).as_dict()))
    pub = _publisher(context, OPENARM, residual_model=str(path))
    try:
        assert pub.error is None and pub.residual is None
    finally:
        pub.destroy_node()


@pytest.mark.parametrize("content, message", [
    ("not json", "residual_model"),
    (json.dumps({"kind": "gmm", "joints": []}), "is of the joints"),
])
def test_a_file_that_is_no_residual_model_of_the_arm_stops_the_node_from_playing(context, tmp_path, content,
                                                                                  message):
    path = tmp_path / "residual_model.json"
    path.write_text(content)
    pub = _publisher(context, OPENARM, residual_model=str(path))
    try:
        assert pub.error is not None and message in pub.error
        ok, why = pub.start()
        assert not ok and message in why
    finally:
        pub.destroy_node()
