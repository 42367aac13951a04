"""launch_testing: ros2_control_excite.launch.py streams positions to a forward_command_controller
from the measured pose (needs launch_testing; test_ros2_control_output.py covers the node without it)."""
import time
import unittest
from pathlib import Path

import numpy as np
import pytest

launch_testing = pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import rclpy  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JOINTS = [f"joint{i}" for i in range(1, 8)]


@pytest.mark.launch_test
def generate_test_description():
    arguments = {"model": str(ROOT / "config" / "robots" / "openarm_class.xml"), "controller": "arm_controller"}
    return launch.LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(ROOT / "launch" / "ros2_control_excite.launch.py")),
                                 launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestRos2ControlExciteLaunch(unittest.TestCase):

    def test_start_streams_positions_from_the_measured_pose(self):
        rclpy.init()
        try:
            node = rclpy.create_node("ros2_control_excite_client")
            commands = []
            node.create_subscription(Float64MultiArray, "/arm_controller/commands",
                                     lambda m: commands.append(list(m.data)), 100)
            states = node.create_publisher(JointState, "/joint_states", 10)
            q_now = [0.1, 0.2, 0.0, 0.5, 0.0, 0.1, 0.0]
            client = node.create_client(Trigger, "/sysid/start")
            self.assertTrue(client.wait_for_service(timeout_sec=60.0))
            deadline = time.monotonic() + 60.0
            result = None
            while result is None or not result.success:  # until the pose arrived and discovery matched
                self.assertLess(time.monotonic(), deadline, result and result.message)
                states.publish(JointState(name=JOINTS, position=q_now))
                future = client.call_async(Trigger.Request())
                while not future.done():
                    rclpy.spin_once(node, timeout_sec=0.1)
                result = future.result()
            while len(commands) < 50 and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.1)
            self.assertGreaterEqual(len(commands), 50)
            np.testing.assert_allclose(commands[0], q_now, atol=1e-3)  # the approach starts where the arm is
            self.assertTrue(node.create_client(Trigger, "/sysid/stop").wait_for_service(timeout_sec=10.0))
        finally:
            rclpy.shutdown()
