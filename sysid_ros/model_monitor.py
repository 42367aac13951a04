"""model_monitor: the identified model, live, while the arm does its work.

The model: ``params`` (a params.json an identification wrote; the updated model and the
residual_model.json beside it are used), else ``model`` (a model file: its own values, for a
nominal model alone), else the text published on ``robot_description``. When ``params`` names a
file that does not exist yet (an identifier's output beside it in a launch), the node starts on
the nominal model and loads ``params`` as soon as the identifier publishes ``sysid/result``; a
new result reloads it, so the monitor always checks the latest identification.

Subscribes
    joint_states (sensor_msgs/JointState, position, velocity and effort, matched by name), or
    with ``state_blocks`` mujoco_sim's sysid/joint_state_block; samples whose stamp is not after
    the last one, that lack a joint, or carry NaN are refused and counted (diagnostics).
    motor_states (sensor_msgs/JointState, position): a double-encoder arm's motor side, each
    message stamped like the joint state it belongs to (any subset of the joints); used when the
    residual model takes the transmission's deflection (q - motor side, held between reads).
    sysid/result (std_msgs/String, transient local): the identifier's result; reloads ``params``.
Publishes, per input sample, stamped as the input
    sysid/predicted_effort (sensor_msgs/JointState, effort): the model's torque at the causally
    filtered state (sysid_core.online.monitor; delayed by the filter at ``cutoff_hz``).
    sysid/external_effort (sensor_msgs/JointState, effort): the external joint torque of the
    generalized-momentum observer of gain ``observer_gain``.
and
    sysid/contact (std_msgs/Bool, transient local): on every change; True while the external
    torque of some joint is outside ``contact_k`` times its validation RMSE (``contact_sigma``
    overrides it; without either, no contact is reported, and the log says why).
    sysid/payload (geometry_msgs/Inertia, transient local) and sysid/payload_changed
    (std_msgs/String, JSON: mass, centre of mass, inertia, their standard deviations, stamp),
    with ``track_payload``: the terminal body's payload tracked live
    (sysid_core.online.payload_tracking), published when it has converged to a different one;
    the payload is the tracked body minus the model's own link, in ``payload_frame``.
    /diagnostics (diagnostic_msgs/DiagnosticArray, every ``diagnostics_period_s``): per joint the
    running torque RMSE against the prediction and the validation RMSE; WARN "model no longer
    holds" while some joint's RMSE has stayed beyond ``drift_factor`` times its validation RMSE
    for ``drift_time_s``.
Services
    sysid/payload/reset (std_srvs/Trigger): forget the tracked payload, back to the model's.

Samples are evaluated ``batch_size`` at a time: a batch's cost is mostly fixed (see
sysid_core.online.live_model), so a 1 kHz stream is kept up with by batches of a few samples, at
the price of that many samples of latency (bench/monitor_node.py). A stream faster than that (a
simulation many times faster than real time) queues up to JOINT_STATES_DEPTH messages, which
the node works through later; beyond them the oldest are lost. Names are relative, except
/diagnostics.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Inertia, Vector3
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import Trigger

from sysid_core.dynamics.model import load_robot
from sysid_core.errors import SysidError
from sysid_core.online.live_model import added_payload, load_live_model, nominal_live_model
from sysid_core.online.monitor import MonitorConfig, monitor_start, monitor_step
from sysid_core.online.payload_tracking import PayloadTrackingConfig, payload_reset, payload_start, payload_step
from sysid_core.results.payload import with_consistent_inertia
from sysid_ros.entry_point import spin_node
from sysid_ros.robot_description import RobotDescription

# samples whose stamps give the stream's rate (the filters' design) before monitoring starts
START_SAMPLES = 20
# a bursty 1 kHz stream on a loaded machine arrives in bunches: room for a second of it
JOINT_STATES_DEPTH = 1000
WARN_PERIOD_S = 5.0
FLUSH_S = 0.05
# joint states kept by stamp for the motor side read at the same instant (a second at 200 Hz)
RECENT_SAMPLES = 200
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


def _default(name: str):
    """MonitorConfig's default of ``name``: the node's parameter defaults are the core's."""
    return {f.name: f.default for f in dataclasses.fields(MonitorConfig)}[name]


class ModelMonitor(Node):
    """Public for tests: ``live`` (the LiveModel in use, None until one loads), ``error`` (why
    none did), ``received`` (joint states that arrived), ``refused`` ({reason: count}),
    ``processed`` (samples evaluated), ``contact``,
    ``holds`` and ``rmse`` (the latest monitor step's), ``payload`` (the BodyInertia published last)."""

    def __init__(self, **kwargs):
        super().__init__('model_monitor', **kwargs)
        self.declare_parameter('params', '')
        self.declare_parameter('model', '')
        self.declare_parameter('observer_gain', _default('observer_gain'))
        self.declare_parameter('contact_k', _default('contact_k'))
        self.declare_parameter('contact_sigma', Parameter.Type.DOUBLE_ARRAY)
        self.declare_parameter('cutoff_hz', _default('cutoff_hz'))
        self.declare_parameter('drift_window_s', _default('drift_window_s'))
        self.declare_parameter('drift_factor', _default('drift_factor'))
        self.declare_parameter('drift_time_s', _default('drift_time_s'))
        self.declare_parameter('batch_size', 8)
        self.declare_parameter('track_payload', True)
        self.declare_parameter('payload_frame', '')
        self.declare_parameter('state_blocks', False)
        self.declare_parameter('diagnostics_period_s', 1.0)

        self.live = self.error = None
        self.refused = {}
        self.received = self.processed = 0
        self.contact = False
        self.holds = True
        self.rmse = self.payload = None
        self._batch = max(1, int(self.get_parameter('batch_size').value))
        self._track_payload = bool(self.get_parameter('track_payload').value)
        self._frame = self.get_parameter('payload_frame').value or None
        self._pending = []            # (stamp ns, q, dq, tau, deflection) not evaluated yet
        self._recent = {}             # stamp ns -> q of the newest samples, for motor_states to meet
        self._deflection = None       # (n,) rad q - motor side at the latest read (NaN: never read)
        self._index = None            # (names of the last message, model joint -> message index)
        self._origin_ns = None        # stamp of the first sample: times are seconds after it
        self._last_ns = None
        self._monitor = self._tracker = None   # (config, state) of each, once started
        self._description = None

        self._predicted_pub = self.create_publisher(JointState, 'sysid/predicted_effort', 100)
        self._external_pub = self.create_publisher(JointState, 'sysid/external_effort', 100)
        self._contact_pub = self.create_publisher(Bool, 'sysid/contact', LATCHED)
        self._payload_pub = self.create_publisher(Inertia, 'sysid/payload', LATCHED)
        self._changed_pub = self.create_publisher(String, 'sysid/payload_changed', 10)
        # the one global topic diagnostics tools read; the status names carry the namespace
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._diagnostics_name = self.get_fully_qualified_name().lstrip('/')
        if self.get_parameter('state_blocks').value:
            self.create_subscription(Float64MultiArray, 'sysid/joint_state_block', self._on_state_block,
                                     JOINT_STATES_DEPTH)
        else:
            self.create_subscription(JointState, 'joint_states', self._on_joint_states, JOINT_STATES_DEPTH)
        self.create_subscription(JointState, 'motor_states', self._on_motor_states, JOINT_STATES_DEPTH)
        self.create_subscription(String, 'sysid/result', self._on_result, LATCHED)
        self.create_service(Trigger, 'sysid/payload/reset', self._on_payload_reset)
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(float(self.get_parameter('diagnostics_period_s').value), self._publish_diagnostics,
                          clock=steady)
        # a batch short of batch_size waits at most this long when the stream pauses or ends
        self.create_timer(FLUSH_S, self._flush, clock=steady)
        self._load()

    # --- the model --------------------------------------------------------------------------

    def _load(self):
        params, model = self.get_parameter('params').value, self.get_parameter('model').value
        try:
            if params and Path(params).is_file():
                self._use(load_live_model(params))
            elif model:
                self._use(nominal_live_model(load_robot(model)))
            elif not params:
                self._description = RobotDescription(self, lambda robot: self._use(nominal_live_model(robot)))
                self.get_logger().info(self._description.waiting)
            if params and not Path(params).is_file():
                self.get_logger().info(f'{params} does not exist yet: loaded when sysid/result announces it'
                                       + ('' if model else '; nothing is monitored until then'))
        except (SysidError, ValueError) as exc:
            self.error = str(exc)
            self.get_logger().error(f'no model: {exc}')

    def _use(self, live):
        """Monitor with ``live`` from the next sample on (a new model restarts the filters)."""
        self.live, self.error = live, None
        self._index = None
        self._monitor = self._tracker = None
        self.rmse, self.holds = None, True
        if self.contact:  # what the old model saw is no contact the new one judged
            self.contact = False
            self._contact_pub.publish(Bool(data=False))
        self._pending.clear()
        self._recent.clear()
        self._deflection = np.full(live.n_joints, np.nan)
        self._origin_ns = self._last_ns = None
        self.get_logger().info(f'monitoring with {live.source or "the model"}'
                               + (f' (verdict {live.verdict})' if live.verdict else ''))
        if live.sigma is None and not self._contact_sigma():
            self.get_logger().warning('the model has no validation RMSE and contact_sigma is not set: no contact is '
                                      'reported and the running RMSE is not judged')

    def _on_result(self, msg: String):
        params = self.get_parameter('params').value
        if not params:
            return
        try:
            self._use(load_live_model(params))
        except (SysidError, ValueError) as exc:
            self.get_logger().error(f'a new identification was announced but {params} does not load: {exc}; '
                                    'the model in use is kept')

    def _contact_sigma(self):
        try:
            value = self.get_parameter('contact_sigma').value
        except ParameterUninitializedException:
            return None
        return None if not value else np.asarray(value, dtype=float)

    # --- input ------------------------------------------------------------------------------

    def _refuse(self, reason: str):
        self.refused[reason] = self.refused.get(reason, 0) + 1
        self.get_logger().warning(f'joint state refused: {reason} ({self.refused[reason]} so far)',
                                  throttle_duration_sec=WARN_PERIOD_S)

    def _on_joint_states(self, msg: JointState):
        self.received += 1
        if self.live is None:
            return
        names = tuple(msg.name)
        if self._index is None or self._index[0] != names:
            where = {name: i for i, name in enumerate(names)}
            if len(where) != len(names) or any(j not in where for j in self.live.joint_names):
                self._refuse(f'names {list(names)} lack joints of the model {list(self.live.joint_names)} '
                             'or repeat one')
                return
            self._index = (names, np.array([where[j] for j in self.live.joint_names]))
        index = self._index[1]
        if not (len(msg.position) == len(msg.velocity) == len(msg.effort) == len(names)):
            self._refuse('position, velocity and effort must all be given for every joint')
            return
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self._add(stamp, np.asarray(msg.position)[index], np.asarray(msg.velocity)[index],
                  np.asarray(msg.effort)[index])

    def _on_state_block(self, msg: Float64MultiArray):
        """mujoco_sim's rows [stamp ns, q (n), dq (n), effort (n), (motor side (n))]."""
        if self.live is None:
            return
        dims = msg.layout.dim
        names = tuple(dims[1].label.split(',')) if len(dims) == 2 else ()
        n = len(names)
        width = dims[1].size if len(dims) == 2 else 0
        if not names or width not in (1 + 3 * n, 1 + 4 * n) or len(msg.data) != dims[0].size * width \
                or any(j not in names for j in self.live.joint_names):
            self._refuse('a state block whose layout does not describe the model\'s joints')
            return
        rows = np.frombuffer(msg.data).reshape(dims[0].size, width)
        index = np.array([names.index(j) for j in self.live.joint_names])
        for row in rows:
            if width == 1 + 4 * n:  # the simulation's motor side, measured at every sample
                self._deflection = row[1 + index] - row[1 + 3 * n + index]
            self._add(int(row[0]), row[1 + index], row[1 + n + index], row[1 + 2 * n + index])

    def _add(self, stamp_ns: int, q, dq, tau):
        if stamp_ns == 0:
            self._refuse('no header stamp')
            return
        if self._last_ns is not None and stamp_ns <= self._last_ns:
            self._refuse('stamped at or before the previous sample')
            return
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(dq)) and np.all(np.isfinite(tau))):
            self._refuse('NaN or infinite values')
            return
        self._last_ns = stamp_ns
        self._recent[stamp_ns] = q
        if len(self._recent) > RECENT_SAMPLES:
            del self._recent[next(iter(self._recent))]
        self._pending.append((stamp_ns, q, dq, tau, self._deflection.copy()))
        if len(self._pending) >= (START_SAMPLES if self._monitor is None else self._batch):
            self._process()

    def _on_motor_states(self, msg: JointState):
        """The deflection of the named joints at the joint state of the same stamp."""
        if self.live is None:
            return
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        q = self._recent.get(stamp)
        if q is None or len(msg.position) != len(msg.name):
            self._refuse('motor_states without a joint state of its stamp, or without positions')
            return
        for name, position in zip(msg.name, msg.position):
            if name in self.live.joint_names and np.isfinite(position):
                j = self.live.joint_names.index(name)
                self._deflection[j] = q[j] - position

    # --- evaluation -------------------------------------------------------------------------

    def _flush(self):
        if self._pending and self._monitor is not None:
            self._process()

    def _process(self):
        stamps = np.array([p[0] for p in self._pending], dtype=np.int64)
        q, dq, tau, deflection = (np.array([p[k] for p in self._pending], dtype=float) for k in (1, 2, 3, 4))
        self._pending.clear()
        if self._origin_ns is None:
            self._origin_ns = int(stamps[0])
        t = (stamps - self._origin_ns) * 1e-9
        try:
            if self._monitor is None:
                self._start(t, q, dq, tau)
                stamps, t, q, dq, tau, deflection = stamps[1:], t[1:], q[1:], dq[1:], tau[1:], deflection[1:]
            config, state = self._monitor
            # a residual model of the deflection applies once every joint's has been read
            measured = deflection if np.all(np.isfinite(deflection)) else None
            state, step = monitor_step(self.live, config, state, t, q, dq, tau, measured)
            self._monitor = (config, state)
        except (SysidError, ValueError) as exc:
            self.get_logger().error(f'monitoring stopped: {exc}', throttle_duration_sec=WARN_PERIOD_S)
            self._monitor = self._tracker = None
            self._origin_ns = None
            return
        self.processed += len(t)
        self._publish_samples(stamps, step)
        if self._tracker is not None:
            config, state = self._tracker
            state, found = payload_step(self.live, config, state, t, q, dq, tau)
            self._tracker = (config, state)
            if found.changed:
                self._publish_payload(found, int(stamps[-1]))

    def _start(self, t, q, dq, tau):
        """Start the monitor (and the payload tracker) at the first sample, at the stream's rate."""
        rate = 1.0 / float(np.median(np.diff(t)))
        sigma = self._contact_sigma()
        config = MonitorConfig(rate_hz=rate, observer_gain=float(self.get_parameter('observer_gain').value),
                               contact_k=float(self.get_parameter('contact_k').value),
                               cutoff_hz=float(self.get_parameter('cutoff_hz').value),
                               drift_window_s=float(self.get_parameter('drift_window_s').value),
                               drift_factor=float(self.get_parameter('drift_factor').value),
                               drift_time_s=float(self.get_parameter('drift_time_s').value), sigma=sigma)
        if sigma is None and self.live.sigma is None:
            # contact and drift need a band: an infinite one reports neither
            config = dataclasses.replace(config, sigma=np.full(self.live.n_joints, np.inf))
        self._monitor = (config, monitor_start(self.live, config, t[0], q[0], dq[0], tau[0]))
        if self._track_payload:
            tracking = PayloadTrackingConfig(rate_hz=rate)
            self._tracker = (tracking, payload_start(self.live, tracking, t[0], q[0], dq[0], tau[0]))
        self.get_logger().info(f'monitoring {self.live.n_joints} joints at {rate:.1f} Hz')

    def _publish_samples(self, stamps, step):
        names = list(self.live.joint_names)
        for i, stamp in enumerate(stamps):
            header_stamp = JointState().header.stamp
            header_stamp.sec, header_stamp.nanosec = divmod(int(stamp), 1_000_000_000)
            for publisher, values in ((self._predicted_pub, step.predicted[i]), (self._external_pub, step.external[i])):
                msg = JointState(name=names, effort=values.tolist())
                msg.header.stamp = header_stamp
                publisher.publish(msg)
            if bool(step.contact[i]) != self.contact:
                self.contact = bool(step.contact[i])
                self._contact_pub.publish(Bool(data=self.contact))
                self.get_logger().info(f'contact {"detected" if self.contact else "released"} at '
                                       f'{int(stamp) * 1e-9:.3f} s')
        self.rmse = step.rmse
        if step.holds != self.holds:
            self.holds = bool(step.holds)
            if self.holds:
                self.get_logger().info('the model holds again')
            else:
                joints = [j for j, d in zip(names, step.drifting) if d]
                self.get_logger().warning(f'the model no longer holds: the torque RMSE of {joints} has stayed beyond '
                                          'its validation figure')

    def _publish_payload(self, found, stamp_ns: int):
        body = added_payload(self.live, found.payload, self._frame)
        if body.com is None:
            self.get_logger().warning(f'the tracked terminal body carries {body.mass:.3g} kg less than the model\'s '
                                      'own link: no payload published')
            return
        body = with_consistent_inertia(body)
        self.payload = body
        i = body.inertia
        self._payload_pub.publish(Inertia(m=float(body.mass), com=Vector3(
            x=float(body.com[0]), y=float(body.com[1]), z=float(body.com[2])),
            ixx=float(i[0, 0]), ixy=float(i[0, 1]), ixz=float(i[0, 2]), iyy=float(i[1, 1]), iyz=float(i[1, 2]),
            izz=float(i[2, 2])))
        std = found.payload_std
        event = {**body.as_dict(), 'stamp': stamp_ns * 1e-9, 'mass_std': float(std[0]),
                 'first_moment_std': [float(v) for v in std[1:4]]}
        self._changed_pub.publish(String(data=json.dumps(event)))
        self.get_logger().info(f'payload changed: {body.mass:.3f} kg (std {std[0]:.3f}) at centre of mass '
                               f'{np.round(body.com, 4).tolist()} m in {body.frame}')

    # --- services and diagnostics -----------------------------------------------------------

    def _on_payload_reset(self, request, response):
        if self._tracker is None:
            response.success, response.message = False, 'no payload is being tracked (no model or no samples yet)'
            return response
        config, state = self._tracker
        self._tracker = (config, payload_reset(self.live, config, state))
        response.success, response.message = True, 'payload estimate reset to the model\'s terminal body'
        return response

    def _publish_diagnostics(self):
        values = {'samples': str(self.processed), 'contact': str(self.contact).lower()}
        values.update({f'refused: {k}': str(v) for k, v in self.refused.items()})
        if self.live is None:
            level, message = DiagnosticStatus.ERROR, f'no model: {self.error or "waiting for one"}'
        elif self.rmse is None or self._monitor is None:
            level, message = DiagnosticStatus.OK, 'waiting for joint_states'
        else:
            sigma = self._monitor[0].sigma if self._monitor[0].sigma is not None else self.live.sigma
            for j, name in enumerate(self.live.joint_names):
                values[f'{name} rmse'] = f'{self.rmse[j]:.4g}'
                values[f'{name} validation rmse'] = f'{sigma[j]:.4g}'
            level, message = ((DiagnosticStatus.OK, 'model holds') if self.holds else
                              (DiagnosticStatus.WARN, 'model no longer holds'))
            if self.payload is not None:
                values['payload mass'] = f'{self.payload.mass:.4g}'
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status.append(DiagnosticStatus(level=level, name=f'{self._diagnostics_name}: model', message=message,
                                             hardware_id=self.live.source if self.live else '',
                                             values=[KeyValue(key=k, value=v) for k, v in values.items()]))
        self._diagnostics_pub.publish(array)


def main(args=None) -> int:
    return spin_node(ModelMonitor, args)


if __name__ == '__main__':
    raise SystemExit(main())
