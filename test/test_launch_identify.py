"""launch_testing: identify.launch.py starts the identifier with its services (needs launch_testing)."""
import time
import unittest
from pathlib import Path

import pytest

launch_testing = pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import rclpy  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.launch_test
def generate_test_description():
    arguments = {"model": str(ROOT / "config" / "robots" / "panda_class.xml"), "joint_states": "/robot/joint_states"}
    return launch.LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(ROOT / "launch" / "identify.launch.py")),
                                 launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestIdentifyLaunch(unittest.TestCase):

    def test_identify_without_data_fails_cleanly_and_node_stays_up(self):
        rclpy.init()
        try:
            node = rclpy.create_node("identify_launch_client")
            client = node.create_client(Trigger, "/sysid/identify")
            self.assertTrue(client.wait_for_service(timeout_sec=30.0))
            future = client.call_async(Trigger.Request())
            deadline = time.monotonic() + 30.0
            while not future.done() and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.5)
            self.assertFalse(future.result().success)
            self.assertIn("samples", future.result().message)
            # still serving after the failed call
            self.assertTrue(node.create_client(Trigger, "/sysid/reset").wait_for_service(timeout_sec=10.0))
        finally:
            rclpy.shutdown()
