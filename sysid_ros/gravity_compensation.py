"""gravity_compensation: the arm floats on the identified model, to be guided by hand.

Every period (``rate_hz``, node clock) while active the node takes the newest complete
``joint_states`` and sends the feed-forward that carries the arm there
(``sysid_core.online.gravity_compensation``: the model's gravity torque, ``friction_compensation``
of its friction law above ``velocity_scale``, a push out of the last ``limit_margin`` of each
joint's range of ``limit_stiffness``), as parameter ``output`` says:

- ``joint_command`` (default): ``sysid/joint_command`` (JointState) with position NaN (no
  position target: the Damiao bridge and mujoco_sim drive such a joint with kp = 0, their own
  kd on the velocity target), velocity 0 and effort = the compensation.
- ``forward_effort``: the torques (std_msgs/Float64MultiArray) for a ros2_control
  forward_command_controller on ``<controller>/commands`` (``controller`` defaults to
  ``forward_effort_controller``), in the order of ``controller_joints`` (default: the model's),
  with the damping the drive does not add: tau = compensation - ``kd`` dq (kd one value per
  controller joint or one for all; it must be given, 0 for none). DANGEROUS as any effort
  output: the controller applies the last torque it got until another one comes.

The model: ``params`` (a params.json an identification wrote: ``load_live_model``, the
kinematics from the updated model beside it, or from ``model`` when that is given too), else
``model`` (a model file: its own inertia and friction, ``nominal_live_model``). A nominal model
knows no payload: the arm sags wherever its error exceeds the joints' static friction.

Safety, as the excitation player's: nothing is sent before a complete ``joint_states`` (every
joint of the model, finite values) has arrived; ``sysid/gravity_compensation/start`` refuses
while it is older than ``state_timeout_s`` (wall clock). While active, ``joint_states`` older than that ends the
compensation (an error is logged, ``active`` turns false): the node stops commanding, and the
Damiao bridge and mujoco_sim drop to damping only when commands stop (forward_effort: one last
command, the gravity torque at the last pose without damping, which the controller keeps
applying). ``sysid/gravity_compensation/stop`` holds the measured pose: position = that pose,
velocity 0, effort = its gravity torque (the bridge's kp pulls the arm back there; forward_effort:
the gravity torque at the measured pose, ``hold_kp`` (q_hold - q) and the damping), streamed
until start; without a fresh joint_states the forward_effort hold is the gravity torque at the
last pose, without feedback. On shutdown (Ctrl-C, SIGTERM) an active compensation is stopped
the same way, so the arm is left held.

``autostart`` (default false): start on the first complete joint_states.
``sysid/gravity_compensation/active`` (std_msgs/Bool, transient local): true while
compensating, false otherwise (published at start-up and on every change).
Names are relative, so the node runs under a namespace.
"""
import time

import numpy as np
from rclpy.duration import Duration as Timeout
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import SysidError
from sysid_core.online.gravity_compensation import CompensationConfig, compensation_torque
from sysid_core.online.live_model import load_live_model, nominal_live_model
from sysid_ros.entry_point import spin_node
from sysid_ros.trajectory_publisher import _controller_order

OUTPUTS = ('joint_command', 'forward_effort')
DEFAULT_CONTROLLER = 'forward_effort_controller'
DEFAULTS = CompensationConfig()
# longest wait at shutdown for the subscribers to acknowledge the last command (reliable QoS)
SHUTDOWN_ACK_S = 1.0
WARN_PERIOD_S = 5.0


class GravityCompensation(Node):
    """The node. Public for tests: ``model`` (the LiveModel), ``config`` (CompensationConfig),
    ``mode`` ('idle', 'active' or 'holding'), ``hold`` ((q, dq, effort) of the hold, or None),
    ``controller_joints`` (forward_effort's joint order), ``sent`` (commands sent)."""

    def __init__(self, **kwargs):
        super().__init__('gravity_compensation', **kwargs)
        self.declare_parameter('params', '')
        self.declare_parameter('model', '')
        self.declare_parameter('output', 'joint_command')
        self.declare_parameter('controller', '')
        self.declare_parameter('controller_joints', Parameter.Type.STRING_ARRAY)
        self.declare_parameter('rate_hz', 200.0)
        self.declare_parameter('kd', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('hold_kp', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('friction_compensation', DEFAULTS.friction_fraction)
        self.declare_parameter('velocity_scale', DEFAULTS.velocity_scale)
        self.declare_parameter('limit_margin', DEFAULTS.limit_margin)
        self.declare_parameter('limit_stiffness', [float(DEFAULTS.limit_stiffness)])
        self.declare_parameter('state_timeout_s', 0.1)
        self.declare_parameter('autostart', False)

        self.mode = 'idle'
        self.hold = None
        self.sent = 0
        self._q = self._dq = None          # (n,) latest complete state, model joint order
        self._measured_at = None           # time.monotonic() of it
        self._index = None                 # (names of the last joint_states, model joint -> message index)
        self._output = self.get_parameter('output').value
        self._rate = float(self.get_parameter('rate_hz').value)
        self._state_timeout = float(self.get_parameter('state_timeout_s').value)
        self._autostart = bool(self.get_parameter('autostart').value)
        if self._output not in OUTPUTS:
            raise ValueError(f"unknown output '{self._output}' (supported: {', '.join(OUTPUTS)})")
        if not (np.isfinite(self._rate) and self._rate > 0 and np.isfinite(self._state_timeout)
                and self._state_timeout > 0):
            raise ValueError(f'rate_hz and state_timeout_s must be > 0, got {self._rate} and {self._state_timeout}')
        self.model = self._load_model()
        n = self.model.n_joints
        try:
            self.config = CompensationConfig(
                float(self.get_parameter('friction_compensation').value),
                float(self.get_parameter('velocity_scale').value), float(self.get_parameter('limit_margin').value),
                tuple(self.get_parameter('limit_stiffness').value))
            self.config.stiffness(n)   # one value or one per joint, else ValueError now
        except ValueError as exc:   # in the parameters' names
            raise ValueError(str(exc).replace('friction_fraction', 'friction_compensation')) from None
        self.controller_joints, self._order = _controller_order(self._optional('controller_joints'),
                                                                 self.model.joint_names)
        self._kd = self._hold_kp = None
        if self._output == 'forward_effort':
            self._kd = self._gain('kd', required=True)
            self._hold_kp = self._gain('hold_kp', required=False)
            controller = self.get_parameter('controller').value or DEFAULT_CONTROLLER
            self._command_pub = self.create_publisher(Float64MultiArray, f'{controller}/commands', 10)
        else:
            self._command_pub = self.create_publisher(JointState, 'sysid/joint_command', 10)
        self._names = list(self.model.joint_names)
        self._free = [float('nan')] * n
        self._zero = [0.0] * n
        self._active_pub = self.create_publisher(
            Bool, 'sysid/gravity_compensation/active', QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self._active_pub.publish(Bool(data=False))
        # only the newest state matters
        self.create_subscription(JointState, 'joint_states', self._on_joint_states, 1)
        self.create_service(Trigger, 'sysid/gravity_compensation/start', self._on_start)
        self.create_service(Trigger, 'sysid/gravity_compensation/stop', self._on_stop)
        self.create_timer(1.0 / self._rate, self._on_timer)
        sigma = ('no validation figure (a nominal model)' if self.model.sigma is None else
                 'validation RMSE ' + ', '.join(f'{e:.3g}' for e in self.model.sigma) + ' N m')
        self.get_logger().info(
            f'gravity compensation of {n} joints with {self.model.source} ({sigma}) to {self._command_pub.topic_name} '
            f'at {self._rate:g} Hz: friction {self.config.friction_fraction:g} above {self.config.velocity_scale:g} '
            f'rad/s, limit margin {self.config.limit_margin:g} rad; '
            + ('starts on the first joint_states' if self._autostart else 'call sysid/gravity_compensation/start'))

    # --- set-up -----------------------------------------------------------------------------

    def _load_model(self):
        """The LiveModel of ``params`` (with ``model``'s kinematics if given) or of ``model``."""
        params, model = self.get_parameter('params').value, self.get_parameter('model').value
        try:
            if params:
                return load_live_model(params, model=model or None)
            if model:
                return nominal_live_model(load_robot(model))
        except (SysidError, OSError) as exc:
            raise ValueError(f'cannot load the model: {exc}') from None
        raise ValueError("give 'params' (a params.json an identification wrote) or 'model' (a model file)")

    def _optional(self, name):
        try:
            return self.get_parameter(name).value
        except ParameterUninitializedException:
            return None

    def _gain(self, name: str, required: bool) -> np.ndarray:
        """forward_effort gain ``name`` (n,) in model joint order, from one value per controller
        joint or one for all (not given: ValueError if ``required``, else zero)."""
        n = self.model.n_joints
        value = self._optional(name)
        if value is None or len(value) == 0:
            if required:
                raise ValueError(f'output forward_effort needs {name} (N m s/rad, one per controller joint '
                                 f'{list(self.controller_joints)} or one for all; 0 for none)')
            return np.zeros(n)
        gain = np.array(value, dtype=float)
        gain = np.full(n, gain[0]) if gain.size == 1 else gain
        if gain.shape != (n,) or not np.all(np.isfinite(gain)) or np.any(gain < 0):
            raise ValueError(f'{name} must hold 1 or {n} finite values >= 0, got {list(value)}')
        model_order = np.empty(n)
        model_order[self._order] = gain
        return model_order

    # --- callbacks --------------------------------------------------------------------------

    def _on_joint_states(self, msg: JointState):
        names = tuple(msg.name)
        if self._index is None or self._index[0] != names:
            where = {name: i for i, name in enumerate(names)}
            missing = [j for j in self.model.joint_names if j not in where]
            self._index = (names, None if missing else np.array([where[j] for j in self.model.joint_names]))
            if missing:
                self.get_logger().error(f'joint_states lacks joints {missing} of the model (it has {list(names)}): '
                                        'wrong model or robot?', throttle_duration_sec=WARN_PERIOD_S)
        index = self._index[1]
        if index is None or len(msg.position) != len(names):
            return
        q = np.asarray(msg.position, dtype=float)[index]
        dq = np.asarray(msg.velocity, dtype=float)[index] if len(msg.velocity) == len(names) else None
        if not (np.all(np.isfinite(q)) and (dq is None or np.all(np.isfinite(dq)))):
            # not a state to compute a torque from: it does not count as fresh either
            self.get_logger().warning('joint_states with NaN or infinite values ignored',
                                      throttle_duration_sec=WARN_PERIOD_S)
            return
        self._q, self._dq = q, dq
        self._measured_at = time.monotonic()
        if self._autostart and self.mode == 'idle':
            self._autostart = False
            ok, message = self.start()
            (self.get_logger().info if ok else self.get_logger().error)(f'autostart: {message}')

    def _on_timer(self):
        if self.mode == 'active':
            if self._stale():
                self._end(f'joint_states older than state_timeout_s {self._state_timeout:g} s: gravity '
                          'compensation stopped, no more commands (the drives fall back to damping)')
                return
            self._send_compensation()
        elif self.mode == 'holding':
            self._send_hold()

    def _on_start(self, request, response):
        response.success, response.message = self.start()
        return response

    def _on_stop(self, request, response):
        response.success, response.message = self.stop()
        return response

    # --- actions ----------------------------------------------------------------------------

    def start(self) -> tuple[bool, str]:
        """Start floating the arm; returns (success, message)."""
        if self._q is None:
            return False, 'no complete joint_states received yet'
        if self._stale():
            return False, f'joint_states is older than state_timeout_s {self._state_timeout:g} s'
        if self._output == 'forward_effort':
            if self._command_pub.get_subscription_count() == 0:
                return False, f'no subscriber on {self._command_pub.topic_name}: start the controller first'
            if self._dq is None and np.any(self._kd > 0):
                return False, 'joint_states carries no velocity: kd needs it'
        self.mode = 'active'
        self.hold = None
        self._active_pub.publish(Bool(data=True))
        self._send_compensation()
        return True, 'gravity compensation active: the arm floats'

    def stop(self) -> tuple[bool, str]:
        """Hold the measured pose against gravity; returns (success, message)."""
        if self._q is None:
            return False, 'no complete joint_states received yet: no pose to hold'
        q = self._q.copy()
        was_active = self.mode == 'active'
        self.hold = (q, np.zeros_like(q), self.model.gravity(q)[0])
        self.mode = 'holding'
        if was_active:
            self._active_pub.publish(Bool(data=False))
        self._send_hold()
        return True, 'stopped: holding the measured pose'

    def _end(self, why: str):
        """Stop commanding (the state went stale)."""
        self.mode = 'idle'
        self._active_pub.publish(Bool(data=False))
        self.get_logger().error(why)
        if self._output == 'forward_effort':
            # the controller keeps its last command: make it the weight at the last pose, no damping
            self._publish_effort(self.model.gravity(self._q)[0])

    def _stale(self) -> bool:
        return time.monotonic() - self._measured_at > self._state_timeout

    # --- commands ---------------------------------------------------------------------------

    def _send_compensation(self):
        dq = self._dq if self._dq is not None else np.zeros_like(self._q)
        tau = compensation_torque(self.model, self._q, dq, self.config)[0]
        if self._output == 'forward_effort':
            self._publish_effort(tau - self._kd * dq)
            return
        msg = JointState(name=self._names, position=self._free, velocity=self._zero, effort=tau.tolist())
        msg.header.stamp = self.get_clock().now().to_msg()
        self._command_pub.publish(msg)
        self.sent += 1

    def _send_hold(self):
        q, dq, effort = self.hold
        if self._output == 'forward_effort':
            if self._stale():   # no feedback on an old state: the weight at the last pose alone
                self._publish_effort(self.model.gravity(self._q)[0])
            else:
                velocity = self._dq if self._dq is not None else np.zeros_like(q)
                self._publish_effort(self.model.gravity(self._q)[0] + self._hold_kp * (q - self._q)
                                     - self._kd * velocity)
            return
        msg = JointState(name=self._names, position=q.tolist(), velocity=dq.tolist(), effort=effort.tolist())
        msg.header.stamp = self.get_clock().now().to_msg()
        self._command_pub.publish(msg)
        self.sent += 1

    def _publish_effort(self, tau: np.ndarray):
        self._command_pub.publish(Float64MultiArray(data=tau[self._order].tolist()))
        self.sent += 1

    # --- shutdown ---------------------------------------------------------------------------

    def destroy_node(self):
        """Leave the arm held: an active compensation ends in a hold of the measured pose, sent
        once more and waited for (the context must still be alive: spin_node(...,
        publishes_on_shutdown=True) keeps it on a signal)."""
        if self.context.ok() and getattr(self, 'mode', 'idle') != 'idle' and self._q is not None:
            if self.mode == 'active':
                self.stop()
            self._send_hold()
            self._command_pub.wait_for_all_acked(Timeout(seconds=SHUTDOWN_ACK_S))
            self.get_logger().info('shut down: arm left held at the measured pose')
        super().destroy_node()


def main(args=None) -> int:
    return spin_node(GravityCompensation, args, publishes_on_shutdown=True)


if __name__ == '__main__':
    main()
