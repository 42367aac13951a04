"""The nominal model from the ``robot_description`` topic, as robot_state_publisher publishes it.

robot_state_publisher publishes the URDF text once, on ``robot_description`` (std_msgs/String)
with transient-local durability: a subscriber with the same durability gets it whenever it
joins, a volatile one never does. ``RobotDescription`` subscribes that way, loads the first
message that loads (URDF or MJCF text, through ``sysid_core.load_robot``) and hands the Robot to
its owner; a message that does not load is logged and the next one awaited (a corrected
description republished), one that arrives after a model loaded is ignored (a model must not
change under a running excitation or a recording). trajectory_publisher and the identifier both
take their model this way when their ``model`` parameter is empty.
"""
from __future__ import annotations

from typing import Callable

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from sysid_core.dynamics.model import Robot, load_robot
from sysid_core.errors import SysidError

# robot_state_publisher's publisher: reliable, transient local, depth 1
QOS = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


class RobotDescription:
    """Waits for ``topic`` (relative: follows the node's namespace) and calls ``on_robot(robot)``
    once, from the executor, with the model ``load_robot(text)`` loads from the first message
    that loads.

    ``robot`` is the loaded Robot and ``text`` the description it came from (None before: an
    owner that loads with other options, such as a terminal body, loads ``text`` again);
    ``error`` why the last message did not load (None when none failed); ``waiting`` the line to
    answer "why not ready" with meanwhile (the owner logs it when it starts waiting).
    """

    def __init__(self, node: Node, on_robot: Callable[[Robot], None], topic: str = 'robot_description'):
        self.robot: Robot | None = None
        self.text: str | None = None
        self.error: str | None = None
        self._node, self._on_robot = node, on_robot
        self._subscription = node.create_subscription(String, topic, self._on_message, QOS)
        self.topic = self._subscription.topic_name
        self.waiting = (f'waiting for the model on {self.topic} (std_msgs/String, transient local, as '
                        f'robot_state_publisher publishes it; or set the model parameter)')

    def _on_message(self, msg: String):
        if self.robot is not None:
            if msg.data != self.text:
                self._node.get_logger().warning(
                    f'{self.topic}: a new description arrived and is ignored: the model is loaded; '
                    f'restart the node to use it', throttle_duration_sec=5.0)
            return
        try:
            if not msg.data.strip():
                raise SysidError('the message is empty')
            robot = load_robot(msg.data)
        except SysidError as exc:
            self.error = f'cannot load the model from {self.topic}: {exc}'
            self._node.get_logger().error(self.error)
            return
        self.robot, self.text, self.error = robot, msg.data, None
        self._node.get_logger().info(
            f'model from {self.topic}: {robot.source_format.upper()} with {robot.n_joints} joints '
            f'{list(robot.joint_names)}')
        self._on_robot(robot)
