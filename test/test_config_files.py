"""The bundled parameter files: every key is a parameter its node declares, every layout is valid.

A misspelt key in a ROS 2 parameter file is silently ignored by the node (it keeps its
default), so the files are checked against the nodes themselves.
"""
import os
import sys
from pathlib import Path

import pytest
import yaml
from rclpy.parameter import Parameter

from sysid_core.damiao.arm import DamiaoArm
from sysid_core.damiao.emulator import VirtualDamiaoArm, emulated_motors
from sysid_ros.damiao_bridge import DamiaoBridge
from sysid_ros.identifier import Identifier
from sysid_ros.mujoco_sim import MujocoSim
from sysid_ros.trajectory_publisher import TrajectoryPublisher

CONFIG = Path(__file__).resolve().parents[1] / "config"
FILES = sorted(CONFIG.glob("*.yaml"))
NODES = {"trajectory_publisher": TrajectoryPublisher, "identifier": Identifier, "mujoco_sim": MujocoSim}


def sections(path):
    return {node: body["ros__parameters"] for node, body in yaml.safe_load(path.read_text()).items()}


def test_every_file_configures_known_nodes():
    assert FILES
    for path in FILES:
        unknown = set(sections(path)) - set(NODES) - {"damiao_bridge"}
        assert not unknown, f"{path.name}: sections for unknown nodes {unknown}"


@pytest.mark.parametrize("node_name", sorted(NODES))
def test_keys_are_declared_parameters(context, node_name):
    # without a model the nodes stay up (reporting the error), with every parameter declared
    node = NODES[node_name](context=context)
    try:
        for path in FILES:
            for key in sections(path).get(node_name, {}):
                assert node.has_parameter(key), f"{path.name}: {node_name} has no parameter '{key}'"
    finally:
        node.destroy_node()


@pytest.mark.parametrize("path", [p for p in FILES if "damiao_bridge" in sections(p)], ids=lambda p: p.name)
def test_damiao_layouts_are_valid(path):
    p = sections(path)["damiao_bridge"]
    arm = DamiaoArm.build(p["joint_names"], p["motor_types"], p["can_ids"], p["master_ids"], p["kp"], p["kd"],
                          p["joint_lower_limits"], p["joint_upper_limits"], p.get("directions"),
                          p.get("position_offsets"))
    assert arm.n == len(p["joint_names"])


def test_damiao_keys_are_declared_parameters(context):
    """The virtual arm's file starts a real bridge; both files' keys must be its parameters."""
    virtual = sections(CONFIG / "openarm_class_damiao.yaml")["damiao_bridge"]
    channel = f"config_test_{os.getpid()}"
    motors = emulated_motors(virtual)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    arm = VirtualDamiaoArm(CONFIG / "robots" / "openarm_class.xml", motors, channel=channel)
    arm.start()
    try:
        values = {**virtual, "can_channel": channel}
        bridge = DamiaoBridge(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
        try:
            for path in FILES:
                for key in sections(path).get("damiao_bridge", {}):
                    assert bridge.has_parameter(key), f"{path.name}: damiao_bridge has no parameter '{key}'"
        finally:
            bridge.destroy_node()
    finally:
        arm.stop()
        sys.setswitchinterval(interval)
