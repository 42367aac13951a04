"""launch_testing: damiao_identify.launch.py on a machine without the arm (needs launch_testing).

The bridge cannot open a CAN interface that does not exist: it must exit with status 1 and
a one-line reason, while the rest of the graph (trajectory_publisher, identifier) starts.
The real-hardware path is covered in one process by test_damiao_bridge.py and the virtual
arm of test_sim_identify.py (python-can's virtual bus does not cross processes).
"""
import time
import unittest
from pathlib import Path

import pytest

launch_testing = pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.launch_test
def generate_test_description():
    arguments = {"can_channel": "sysid_no_such_can", "auto_identify": "false"}
    return launch.LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(ROOT / "launch" / "damiao_identify.launch.py")),
                                 launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestWithoutTheArm(unittest.TestCase):

    def test_identifier_and_trajectory_publisher_serve(self):
        rclpy.init()
        try:
            node = rclpy.create_node("damiao_launch_client")
            for service in ("/sysid/identify", "/sysid/start"):
                self.assertTrue(node.create_client(Trigger, service).wait_for_service(timeout_sec=30.0), service)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.2)
        finally:
            rclpy.shutdown()

    def test_bridge_reports_the_missing_interface(self, proc_output):
        proc_output.assertWaitFor("cannot open CAN bus socketcan:sysid_no_such_can", timeout=30, stream="stderr")


@launch_testing.post_shutdown_test()
class TestExit(unittest.TestCase):

    def test_bridge_exits_1(self, proc_info):
        bridge = [p for p in proc_info.process_names() if "damiao_bridge" in p]
        self.assertTrue(bridge)
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[1], process=bridge[0])
