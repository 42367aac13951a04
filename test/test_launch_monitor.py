"""launch_testing: monitor.launch.py end to end (needs a ROS 2 install with launch_testing).

The simulated arm is excited in real time (the monitor watches an arm's stream, not a simulation
running many times faster) and identified as sim_identify.launch.py does it, with model_monitor
beside the three nodes under a namespace. Once the identifier has published its result, the
excitation is played again: the monitor must then be watching with the identified model (its
diagnostics name the params.json), publish a prediction for the samples, find no contact and say
that the model holds. Skipped where launch_testing is not installed.
"""
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
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "config" / "robots"
OUTPUT = Path(tempfile.mkdtemp(prefix="sysid_monitor_launch_"))
NAMESPACE = "/monitored"
TIMEOUT_S = 300.0  # a guard against hangs, not a speed target


def _short_config() -> str:
    text = (ROOT / "config" / "openarm_class.yaml").read_text().replace("duration: 20.0", "duration: 10.0")
    path = OUTPUT / "params.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.launch_test
def generate_test_description():
    arguments = {"model": str(ROBOTS / "openarm_class.xml"), "truth_model": str(ROBOTS / "openarm_class_payload.xml"),
                 "config": _short_config(), "output_dir": str(OUTPUT), "realtime": "true", "auto_identify": "true",
                 "namespace": NAMESPACE}
    return launch.LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(ROOT / "launch" / "monitor.launch.py")),
                                 launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestMonitor(unittest.TestCase):

    def test_the_identified_model_watches_the_replayed_excitation(self):
        rclpy.init()
        try:
            node = rclpy.create_node("monitor_launch_listener", namespace=NAMESPACE)
            latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
            results, predictions, contacts, statuses = [], [], [], []
            node.create_subscription(String, "sysid/result", lambda msg: results.append(msg.data), latched)
            node.create_subscription(JointState, "sysid/predicted_effort", predictions.append, 1000)
            node.create_subscription(Bool, "sysid/contact", lambda msg: contacts.append(msg.data), latched)
            node.create_subscription(DiagnosticArray, "/diagnostics", lambda msg: statuses.extend(
                s for s in msg.status if "model_monitor" in s.name), 10)
            deadline = time.monotonic() + TIMEOUT_S

            def spin_until(condition):
                while not condition() and time.monotonic() < deadline:
                    rclpy.spin_once(node, timeout_sec=0.2)
                return condition()

            self.assertTrue(spin_until(lambda: results), "no sysid/result")
            start = node.create_client(Trigger, "sysid/start")
            self.assertTrue(start.wait_for_service(timeout_sec=30.0))
            predictions.clear()
            statuses.clear()
            future = start.call_async(Trigger.Request())
            self.assertTrue(spin_until(future.done) and future.result().success)
            # a few seconds of the replay, then the monitor's judgement of it
            self.assertTrue(spin_until(lambda: len(predictions) >= 3000), f"{len(predictions)} predictions")
            self.assertTrue(spin_until(lambda: any(s.hardware_id.endswith("params.json") for s in statuses)),
                            [s.hardware_id for s in statuses])
            latest = [s for s in statuses if s.hardware_id.endswith("params.json")][-1]
            self.assertEqual(latest.level, DiagnosticStatus.OK, latest.message)
            self.assertNotIn(True, contacts)
        finally:
            rclpy.shutdown()


@launch_testing.post_shutdown_test()
class TestCleanShutdown(unittest.TestCase):

    def test_every_node_ends_cleanly_on_shutdown(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
