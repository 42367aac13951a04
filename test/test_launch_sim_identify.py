"""launch_testing: sim_identify.launch.py end to end (needs a ROS 2 install with launch_testing).

Runs the three nodes with the simulator faster than real time and auto_identify, then
checks the identified payload against the truth model. Skipped where launch_testing is
not installed (a bare machine with the PyPI wheels); there test_sim_identify.py covers
the same graph in one process.
"""
import json
import tempfile
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
from rclpy.qos import DurabilityPolicy, QoSProfile  # noqa: E402
from std_msgs.msg import String  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "config" / "robots"
OUTPUT = Path(tempfile.mkdtemp(prefix="sysid_launch_"))


def _short_config() -> str:
    text = (ROOT / "config" / "openarm_class.yaml").read_text().replace("duration: 20.0", "duration: 10.0")
    path = OUTPUT / "params.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.launch_test
def generate_test_description():
    arguments = {"model": str(ROBOTS / "openarm_class.xml"), "truth_model": str(ROBOTS / "openarm_class_payload.xml"),
                 "config": _short_config(), "output_dir": str(OUTPUT), "realtime": "false", "auto_identify": "true"}
    return launch.LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(ROOT / "launch" / "sim_identify.launch.py")),
                                 launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestSimIdentify(unittest.TestCase):

    def test_payload_identified_and_published(self):
        rclpy.init()
        try:
            node = rclpy.create_node("sim_identify_launch_listener")
            results = []
            latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
            node.create_subscription(String, "/sysid/result", lambda msg: results.append(msg.data), latched)
            deadline = time.monotonic() + 180.0
            while not results and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.5)
            self.assertTrue(results, "no /sysid/result within 180 s")
            document = json.loads(results[-1])
            truth_mass = 0.25 + 0.5  # link7 + payload of openarm_class_payload.xml
            self.assertLess(abs(document["mass"] - truth_mass) / truth_mass, 0.03)
            self.assertNotEqual(document["verdict"], "failed", document["verdict_reasons"])
            self.assertTrue((OUTPUT / "params.json").is_file())
            self.assertTrue((OUTPUT / "updated_model.xml").is_file())
        finally:
            rclpy.shutdown()


@launch_testing.post_shutdown_test()
class TestCleanShutdown(unittest.TestCase):

    def test_every_node_ends_cleanly_on_shutdown(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
