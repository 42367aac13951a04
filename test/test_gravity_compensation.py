"""Gravity compensation (sysid_core.online.gravity_compensation and the gravity_compensation
node) against MuJoCo and the virtual Damiao arm.

Oracles: MuJoCo's gravity torque (qfrc_bias at rest) of the model file and of the plant; the
plant's own friction law (the emulator's: frictionloss tanh(dq / COULOMB_SMOOTHING) + damping dq,
plus the Stribeck friction added here, which no model file knows); the MIT frames the emulated
motors received, decoded by the protocol codec.

The acceptance: the OpenArm-class arm carrying a 0.5 kg payload (the plant) is identified from an
excitation on the virtual Damiao arm (the same plant, through the protocol), the result written
and loaded as the node loads it, and the arm released in several poses under compensation. The
criterion is the physics of a joint on friction: under a constant torque error e a joint creeps
at the velocity where its friction plus the drive's damping equal e (the plant's friction is a
smooth law of the velocity, so any error moves it, slowly while e is below the static friction).
An identified model's error is bounded by its validation RMSE, so its drift over T is at most T
times the creep speed of that error (plus the frame's quantisation); the nominal model misses
the payload by more than the static friction on some joint, and drifts beyond that bound.
"""
import itertools
import os
import time

import can
import mujoco
import numpy as np
import pytest
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger

from conftest import ROBOTS, ROOT, emulator_answers_in_time, interrupt, start_node
from sysid_core.damiao import protocol as dm
from sysid_core.damiao.arm import DamiaoArm
from sysid_core.damiao.emulated_plant import COULOMB_SMOOTHING
from sysid_core.damiao.emulator import VirtualDamiaoArm, emulated_motors
from sysid_core.damiao.mit_run import drive_virtual_arm
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine
from sysid_core.identification import actuator as act
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.online.gravity_compensation import (CompensationConfig, compensation_torque, float_virtual_arm,
                                                    friction_compensation, limit_push)
from sysid_core.online.live_model import load_live_model, nominal_live_model
from sysid_core.results.export import params_document, write_params_json, write_updated_model
from sysid_core.simulation import StribeckFriction
from sysid_ros.damiao_bridge import DamiaoBridge
from sysid_ros.gravity_compensation import GravityCompensation
from sysid_ros.mujoco_sim import MujocoSim

NOMINAL = ROBOTS / "openarm_class.xml"
PLANT = ROBOTS / "openarm_class_payload.xml"
LAYOUT = yaml.safe_load((ROOT / "config" / "openarm_class_damiao.yaml").read_text())["damiao_bridge"]["ros__parameters"]
RATE = LAYOUT["control_rate_hz"]          # 250 Hz: the virtual arm's rate
FLOAT_S = 5.0                             # simulated seconds each release floats
# release poses, rad: inside every joint's range and its limit margin, the arm held out
POSES = {"elbow bent": [0.0, 0.3, 0.0, 1.2, 0.0, 0.3, 0.0],
         "reaching forward": [0.8, 0.2, 0.3, 1.0, 0.2, 0.4, 0.3],
         "out to the side": [0.3, 1.0, -0.5, 0.8, 0.5, -0.4, 0.2]}
_channels = itertools.count()


def damiao_arm() -> DamiaoArm:
    p = LAYOUT
    return DamiaoArm.build(p["joint_names"], p["motor_types"], p["can_ids"], p["master_ids"], p["kp"], p["kd"],
                           p["joint_lower_limits"], p["joint_upper_limits"])


def mujoco_gravity(model: mujoco.MjModel, q) -> np.ndarray:
    """(n,) N m: MuJoCo's bias force at rest, the gravity torque of ``model`` at q."""
    data = mujoco.MjData(model)
    data.qpos[:] = q
    mujoco.mj_forward(model, data)
    return data.qfrc_bias.copy()


def plant_friction() -> StribeckFriction:
    """Friction of the plant beyond its file's (a Stribeck peak at rest, 40 % of the file's
    Coulomb level more while moving): unknown to the nominal model, left to the identification."""
    f_c = mujoco.MjModel.from_xml_path(str(PLANT)).dof_frictionloss
    return StribeckFriction(excess=0.5 * f_c, velocity=0.1, coulomb=0.4 * f_c)


def plant_friction_law(dq) -> np.ndarray:
    """The plant's whole friction (..., n) N m at dq (..., n) rad/s, as the emulator applies it."""
    model = mujoco.MjModel.from_xml_path(str(PLANT))
    dq = np.asarray(dq, dtype=float)
    return (model.dof_frictionloss * np.tanh(dq / COULOMB_SMOOTHING) + model.dof_damping * dq
            + plant_friction()(dq))


# --- the core: its terms against MuJoCo ---------------------------------------------------------

@pytest.fixture(scope="module")
def nominal():
    return nominal_live_model(load_robot(NOMINAL))


def test_at_rest_in_mid_range_the_compensation_is_the_gravity_torque(nominal):
    model = mujoco.MjModel.from_xml_path(str(NOMINAL))
    rng = np.random.default_rng(0)
    lower, upper = nominal.robot.joint_range.T
    config = CompensationConfig()
    q = rng.uniform(lower + config.limit_margin, upper - config.limit_margin, (20, 7))
    tau = compensation_torque(nominal, q, np.zeros_like(q), config)
    expected = np.array([mujoco_gravity(model, qi) for qi in q])
    # the regressor against MuJoCo's own dynamics: equal to rounding
    np.testing.assert_allclose(tau, expected, atol=1e-9)


def test_friction_is_compensated_by_its_fraction_once_moving_and_not_at_rest(nominal):
    model = mujoco.MjModel.from_xml_path(str(NOMINAL))
    config = CompensationConfig(friction_fraction=0.5, velocity_scale=0.1)
    dq = np.outer([-1.0, -0.3, -0.05, 0.0, 0.05, 0.3, 1.0], np.ones(7))
    got = friction_compensation(nominal, dq, config)
    # the file's friction: frictionloss sign(dq) + damping dq, faded in as tanh(|dq| / v_s)
    law = model.dof_frictionloss * np.sign(dq) + model.dof_damping * dq
    np.testing.assert_allclose(got, 0.5 * law * np.tanh(np.abs(dq) / 0.1), atol=1e-12)
    assert np.all(got[3] == 0.0)                                    # at rest: none
    assert np.all(np.abs(got) <= 0.5 * np.abs(law) + 1e-12)         # never more than the fraction
    assert np.all(np.abs(got[[0, 6]] - 0.5 * law[[0, 6]]) < 1e-7 * np.abs(law[[0, 6]]) + 1e-12)   # 10 v_s: all of it
    none = CompensationConfig(friction_fraction=0.0)
    assert np.all(friction_compensation(nominal, dq, none) == 0.0)


def test_a_joint_in_the_limit_margin_is_pushed_out_and_not_helped_toward_the_limit(nominal):
    config = CompensationConfig(friction_fraction=0.5, limit_margin=0.1, limit_stiffness=20.0)
    lower, upper = nominal.robot.joint_range.T
    mid = 0.5 * (lower + upper)
    j = 3                                                           # the elbow, range [0, 2.4]
    depths = np.array([0.0, 0.025, 0.05, 0.1, 0.3])                 # into the lower margin (0.3: beyond the limit)
    q = np.tile(mid, (5, 1))
    q[:, j] = lower[j] + 0.1 - depths
    push = limit_push(nominal.robot.joint_range, q, config)
    np.testing.assert_allclose(push[:, j], 20.0 * np.minimum(depths, 0.1))   # away from the lower limit
    assert np.all(np.delete(push, j, axis=1) == 0.0)
    q_up = np.tile(mid, (1, 1))
    q_up[0, j] = upper[j] - 0.05
    assert limit_push(nominal.robot.joint_range, q_up, config)[0, j] == pytest.approx(-1.0)
    # the friction compensation toward the limit fades with the depth; away from it, it stays
    gravity = nominal.gravity(q)
    toward = compensation_torque(nominal, q, np.full((5, 7), -1.0), config) - gravity - push
    away = compensation_torque(nominal, q, np.full((5, 7), 1.0), config) - gravity - push
    full_toward = friction_compensation(nominal, np.full((5, 7), -1.0), config)[:, j]
    np.testing.assert_allclose(toward[:, j], full_toward * (1 - np.minimum(depths, 0.1) / 0.1), atol=1e-12)
    np.testing.assert_allclose(away[:, j], friction_compensation(nominal, np.full((5, 7), 1.0), config)[:, j])


@pytest.mark.parametrize("changes, message", [
    (dict(friction_fraction=1.5), "friction_fraction must be in [0, 1]"),
    (dict(velocity_scale=0.0), "velocity_scale must be > 0"),
    (dict(limit_margin=-0.1), "limit_margin must be >= 0"),
    (dict(limit_stiffness=(1.0, -2.0)), "limit_stiffness must be finite values >= 0"),
])
def test_bad_settings_are_refused(changes, message):
    with pytest.raises(ValueError) as err:
        CompensationConfig(**changes)
    assert message in str(err.value)
    with pytest.raises(ValueError, match="limit_stiffness has 2 values for 7 joints"):
        CompensationConfig(limit_stiffness=(1.0, 2.0)).stiffness(7)


# --- the acceptance: drift of a released arm on the virtual Damiao arm -------------------------

def excitation(seed: int, duration: float):
    """An excitation on the virtual arm of the plant, fed forward with the nominal model (what
    a user has before identifying), corrected for the MIT loop's sampling as an identification
    of Damiao replies is (identification.actuator.mit_loop_correction; no command delay here)."""
    robot = load_robot(NOMINAL)
    plan = multisine(robot.joint_range, duration, RATE, seed=seed, max_velocity=1.0)
    profile, _ = excitation_with_approach_and_rest(plan.q.mean(axis=0), plan, RATE, 1.0, robot.joint_range)
    run = drive_virtual_arm(mujoco.MjModel.from_xml_path(str(PLANT)), damiao_arm(), profile,
                            robot.inverse_dynamics(profile.q, profile.dq, profile.ddq), joint_friction=plant_friction())
    return act.mit_loop_correction(run.recording, run.commands, 0.0)


@pytest.fixture(scope="module")
def identified(tmp_path_factory):
    """params.json + updated_model.xml of the plant's identification; its path."""
    robot = load_robot(NOMINAL)
    result = identify(robot, excitation(0, 10.0), IdentificationConfig(), validation=excitation(1, 5.0))
    assert result.verdict.level == "good", result.verdict
    out = tmp_path_factory.mktemp("identified")
    write_params_json(out / "params.json", params_document(result, robot, "virtual Damiao arm"))
    write_updated_model(robot.path, out / "updated_model.xml", robot, result)
    return out / "params.json"


def creep_speed(error, model, config, kd) -> np.ndarray:
    """The fastest steady velocity (n,) rad/s each joint of the plant reaches from rest under a
    torque error of at most ``error`` (n,) N m, floating under ``model``'s compensation on
    motors of damping ``kd`` (n,) (their frames' kd, decoded).

    A joint stops accelerating where the plant's friction plus kd v equal what pushes it: the
    error and, once its reported velocity leaves zero (true velocity beyond half a 12-bit step:
    the reply reports the centre of its step, and zero is a step's centre), the friction
    compensation at the largest velocity it may report (v plus half a step). The smallest such
    v on a fine grid, rounded up; inf where none below 10 rad/s."""
    arm = damiao_arm()
    half_step = np.array([0.5 * dm.resolution(-lim.vmax, lim.vmax, dm.VELOCITY_BITS) for lim in arm.limits])
    v = np.geomspace(1e-7, 10.0, 20001)[:, None] * np.ones(7)
    resisting = plant_friction_law(v) + kd * v
    reported = v + half_step
    help_ = np.where(v < half_step, 0.0, np.abs(friction_compensation(model, reported, config)))
    stops = resisting >= error + help_
    return np.array([v[np.argmax(stops[:, j]), j] if stops[:, j].any() else np.inf for j in range(7)])


def test_identified_compensation_holds_a_released_arm_that_the_nominal_one_lets_sag(identified):
    arm = damiao_arm()
    plant = mujoco.MjModel.from_xml_path(str(PLANT))
    identified_model = load_live_model(identified)
    nominal_model = nominal_live_model(load_robot(NOMINAL))
    config = CompensationConfig()
    sigma = identified_model.sigma
    # the frames' decoded kd, and half a torque step: what the frame leaves of t_ff at rest
    kd = np.array([dm.uint_to_float(dm.float_to_uint(k, dm.KD_MIN, dm.KD_MAX, dm.KD_BITS), dm.KD_MIN, dm.KD_MAX,
                                    dm.KD_BITS) for k in arm.kd])
    torque_step = np.array([dm.resolution(-lim.tmax, lim.tmax, dm.TORQUE_BITS) for lim in arm.limits])
    bound = FLOAT_S * creep_speed(sigma + 0.5 * torque_step, identified_model, config, kd)
    static = np.abs(plant_friction_law(np.geomspace(1e-4, 1.0, 2001)[:, None] * np.ones(7))).max(axis=0)
    report = []
    for name, pose in POSES.items():
        q0 = np.array(pose)
        truth = mujoco_gravity(plant, q0)
        # the identification's error figure covers its gravity error here (what the bound rests on)
        assert np.all(np.abs(identified_model.gravity(q0)[0] - truth) <= sigma), name
        # the nominal model misses the payload by more than the static friction on some joint:
        # nothing holds that joint, it slides until its error falls below the friction
        nominal_error = np.abs(nominal_model.gravity(q0)[0] - truth) - 0.5 * torque_step
        assert np.any(nominal_error > static), name

        held = float_virtual_arm(plant, arm, identified_model, q0, FLOAT_S, RATE, config,
                                 joint_friction=plant_friction())
        sagged = float_virtual_arm(plant, arm, nominal_model, q0, FLOAT_S, RATE, config,
                                   joint_friction=plant_friction())
        assert held.time[-1] >= FLOAT_S - 1.5 / RATE       # the whole run, in simulated time
        for run in (held, sagged):
            # no position gain went out, and every position target was within the joint range
            assert np.all(run.kp == 0.0)
            assert np.all((run.p_des >= arm.lower) & (run.p_des <= arm.upper))
        report.append((name, held.drift(), sagged.drift()))
        np.testing.assert_array_less(held.drift(), bound, err_msg=name)
        assert sagged.drift().max() > bound.max(), name
    print("\nbound (rad):", np.round(bound, 4))
    for name, held_drift, sagged_drift in report:
        print(f"{name}: identified {np.round(held_drift, 4)}, nominal {np.round(sagged_drift, 3)}")


# --- the node ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def context(context):
    with emulator_answers_in_time():
        yield context


class Graph:
    """Nodes spun by one executor, and a probe node that publishes and listens."""

    def __init__(self, context):
        self.context = context
        self.executor = SingleThreadedExecutor(context=context)
        self.probe = Node(f"probe_{os.getpid()}_{next(_channels)}", context=context)
        self.executor.add_node(self.probe)
        self.nodes = []
        self.states, self.efforts, self.active = [], [], []
        self.probe.create_subscription(JointState, "joint_states", self.states.append, 100)
        self.probe.create_subscription(Bool, "sysid/gravity_compensation/active", lambda m: self.active.append(m.data),
                                       QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.state_pub = self.probe.create_publisher(JointState, "joint_states", 10)
        self.command_pub = self.probe.create_publisher(JointState, "sysid/joint_command", 10)

    def add(self, node):
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def listen_efforts(self, topic):
        self.probe.create_subscription(Float64MultiArray, topic, lambda m: self.efforts.append(np.array(m.data)), 100)

    def spin(self, seconds=0.0, until=None, limit=60.0, each=None):
        """Spin for ``seconds``, or until ``until()`` (False if it never held within ``limit`` s,
        a bound that only catches a hang); ``each()`` after every round."""
        deadline = time.monotonic() + (seconds if until is None else limit)
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.002)
            if each is not None:
                each()
            if until is not None and until():
                return True
        return until is None

    def call(self, service):
        client = self.probe.create_client(Trigger, service)
        assert client.wait_for_service(timeout_sec=5.0)
        future = client.call_async(Trigger.Request())
        assert self.spin(until=future.done)
        self.probe.destroy_client(client)
        return future.result()

    def close(self):
        """Destroy the nodes (the bridge disables its motors) and the executor; once."""
        nodes, self.nodes, self.probe = self.nodes + ([self.probe] if self.probe else []), [], None
        for node in reversed(nodes):
            self.executor.remove_node(node)
            node.destroy_node()
        if nodes:
            self.executor.shutdown()


@pytest.fixture
def graph(context):
    made = []

    def make():
        made.append(Graph(context))
        return made[-1]
    yield make
    for g in made:
        g.close()


def node(context, **parameters) -> GravityCompensation:
    return GravityCompensation(context=context, parameter_overrides=[Parameter(k, value=v)
                                                                     for k, v in parameters.items()])


def test_forward_effort_sends_the_gravity_torque_and_damping_and_stops_on_stale_states(graph, context):
    g = graph()
    names = ["joint7", "joint6", "joint5", "joint4", "joint3", "joint2", "joint1"]    # the controller's order
    gc_node = g.add(node(context, model=str(NOMINAL), output="forward_effort", controller_joints=names, kd=[0.5],
                         hold_kp=[10.0], friction_compensation=0.0, rate_hz=100.0, state_timeout_s=0.2))
    order = [int(j[-1]) - 1 for j in names]
    mj = mujoco.MjModel.from_xml_path(str(NOMINAL))
    q = np.array(POSES["reaching forward"])
    dq = np.linspace(-0.2, 0.2, 7)

    def publish(q, dq, joints=tuple(f"joint{j + 1}" for j in range(7))):
        shuffle = [3, 0, 6, 1, 5, 2, 4] if len(joints) == 7 else range(len(joints))   # any order, by name
        g.state_pub.publish(JointState(name=[joints[i] for i in shuffle], position=[float(q[i]) for i in shuffle],
                                       velocity=[float(dq[i]) for i in shuffle]))
    # no complete joint_states yet: nothing starts, nothing is sent
    assert not g.call("sysid/gravity_compensation/start").success
    publish(q[:6], dq[:6], joints=tuple(f"joint{j + 1}" for j in range(6)))
    g.spin(0.2)
    response = g.call("sysid/gravity_compensation/start")
    assert not response.success and "no complete joint_states" in response.message
    publish(q, dq)
    assert g.spin(until=lambda: gc_node._q is not None)
    response = g.call("sysid/gravity_compensation/start")
    assert not response.success and "no subscriber on /forward_effort_controller/commands" in response.message
    g.listen_efforts("forward_effort_controller/commands")
    assert g.spin(until=lambda: gc_node._command_pub.get_subscription_count() > 0)
    assert g.spin(until=lambda: (publish(q, dq), g.call("sysid/gravity_compensation/start").success)[1])
    assert g.spin(until=lambda: (publish(q, dq), len(g.efforts) >= 5)[1])
    # MuJoCo's gravity torque of the file, minus kd dq, in the controller's order
    np.testing.assert_allclose(g.efforts[-1], (mujoco_gravity(mj, q) - 0.5 * dq)[order], atol=1e-9)

    # stop: the hold pulls back to the pose of the stop, against gravity where the arm is now
    assert g.call("sysid/gravity_compensation/stop").success
    q_hold = gc_node.hold[0].copy()
    q_moved, dq_moved = q + 0.05, -dq
    count = len(g.efforts)
    assert g.spin(until=lambda: (publish(q_moved, dq_moved), len(g.efforts) >= count + 5
                                 and np.allclose(gc_node._q, q_moved))[1])
    np.testing.assert_allclose(q_hold, q)
    np.testing.assert_allclose(g.efforts[-1], (mujoco_gravity(mj, q_moved) + 10.0 * (q_hold - q_moved)
                                               - 0.5 * dq_moved)[order], atol=1e-9)

    # active again, then joint_states stops: after state_timeout_s (wall clock) the node stops
    # commanding, its last command the gravity torque at the last pose, without damping
    assert g.spin(until=lambda: (publish(q_moved, dq_moved), g.call("sysid/gravity_compensation/start").success)[1])
    assert g.spin(until=lambda: gc_node.mode == "idle")
    # not before state_timeout_s after the last joint_states the node received
    assert time.monotonic() - gc_node._measured_at >= 0.2
    g.spin(0.3)                             # what was sent has arrived
    last = len(g.efforts)
    g.spin(0.3)
    assert len(g.efforts) == last           # nothing more is sent
    np.testing.assert_allclose(g.efforts[-1], mujoco_gravity(mj, q_moved)[order], atol=1e-9)
    assert g.active == [False, True, False, True, False]
    response = g.call("sysid/gravity_compensation/start")
    assert not response.success and "older than state_timeout_s" in response.message

    # shut down while active: the arm is left held at the measured pose (the controller keeps
    # the last command: the weight there, and the damping)
    assert g.spin(until=lambda: (publish(q, dq), g.call("sysid/gravity_compensation/start").success)[1])
    g.nodes.remove(gc_node)
    g.executor.remove_node(gc_node)
    gc_node.destroy_node()
    g.spin(0.3)
    np.testing.assert_allclose(g.efforts[-1], (mujoco_gravity(mj, q) - 0.5 * dq)[order], atol=1e-9)
    assert g.active[-2:] == [True, False]


@pytest.mark.parametrize("parameters, message", [
    (dict(), "give 'params'"),
    (dict(model=str(NOMINAL), output="forward_position"), "unknown output 'forward_position'"),
    (dict(model=str(NOMINAL), output="forward_effort"), "output forward_effort needs kd"),
    (dict(model=str(NOMINAL), limit_stiffness=[1.0, 2.0]), "limit_stiffness has 2 values for 7 joints"),
    (dict(model=str(NOMINAL), friction_compensation=2.0), "friction_compensation must be in [0, 1]"),
    (dict(params="/nonexistent/params.json"), "cannot load the model"),
])
def test_bad_parameters_stop_the_start(context, parameters, message):
    with pytest.raises(ValueError) as err:
        node(context, **parameters)
    assert message in str(err.value)


def test_the_simulator_floats_a_joint_commanded_without_position_target(graph, context):
    """mujoco_sim in MIT mode (the virtual arm's gains) under the node, in step on the simulated
    clock. The plant is the model file itself and the sensors are exact, on purpose: once the
    arm has stopped (it sags a little before the first command) the compensation is exactly its
    weight, so it stays put, and the torque it reports is the feed-forward alone: no kp term
    toward any position."""
    g = graph()
    q0 = np.array(POSES["elbow bent"])
    sim = g.add(MujocoSim(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in dict(
        model=str(NOMINAL), realtime=False, rate_hz=RATE, kp=LAYOUT["kp"], kd=LAYOUT["kd"],
        initial_positions=q0.tolist(), q_noise=0.0, dq_noise=0.0, tau_noise=0.0).items()]))
    g.add(node(context, model=str(NOMINAL), rate_hz=RATE, use_sim_time=True, autostart=True, state_timeout_s=1.0))
    settled = []
    assert g.spin(until=lambda: (settled.append(np.array(g.states[-1].position)) if not settled
                                 and g.states and sim.sim_time >= 0.5 else None, sim.sim_time >= 2.0)[1], limit=120.0)
    assert not sim.arm.stale.any() and sim.error is None       # the NaN commands were taken, and kept coming
    q = np.array(g.states[-1].position)
    # at rest (rounding only: a stopped arm in equilibrium), the weight alone in the torque
    assert np.abs(q - settled[0]).max() < 1e-9 and np.abs(g.states[-1].velocity).max() < 1e-9
    np.testing.assert_allclose(g.states[-1].effort, mujoco_gravity(mujoco.MjModel.from_xml_path(str(NOMINAL)), q),
                               atol=1e-6)


def test_the_arm_floats_through_the_damiao_bridge_and_stop_holds_it(graph, context, identified):
    """The node, the Damiao bridge and the virtual arm of the plant in one process: the arm is
    brought to a pose by position commands, released under compensation, stopped."""
    g = graph()
    channel = f"gravity_test_{os.getpid()}_{next(_channels)}"
    arm = VirtualDamiaoArm(str(PLANT), emulated_motors(LAYOUT), channel=channel, joint_friction=plant_friction())
    arm.start()
    monitor = can.Bus(interface="virtual", channel=channel)
    frames = []          # (sim time of the arm when drained, id, payload)
    try:
        # feedback_timeout_cycles, command_timeout_s and state_timeout_s: one process on a loaded
        # machine may hold a thread up for tens of milliseconds, and this test is about the commands
        # that go out, not about the watchdogs (test_damiao_bridge and the test above have those)
        g.add(DamiaoBridge(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in {
            **LAYOUT, "can_channel": channel, "feedback_timeout_cycles": 50, "command_timeout_s": 0.5}.items()]))
        float_node = g.add(node(context, params=str(identified), rate_hz=RATE, state_timeout_s=0.5))
        model = float_node.model

        def drain():
            while (msg := monitor.recv(timeout=0)) is not None:
                frames.append((arm.sim_time, msg.arbitration_id, bytes(msg.data)))
        assert g.spin(until=lambda: len(g.states) > 5, each=drain)
        # to the pose by position commands (the bridge's kp), from where the arm hangs
        q_from, q_to = np.array(g.states[-1].position), np.array(POSES["elbow bent"])
        t0 = arm.sim_time

        def ramp():
            s = min((arm.sim_time - t0) / 2.0, 1.0)
            shape, rate = 0.5 - 0.5 * np.cos(np.pi * s), 0.5 * np.pi * np.sin(np.pi * s) / 2.0
            q = q_from + (q_to - q_from) * shape
            g.command_pub.publish(JointState(name=list(LAYOUT["joint_names"]), position=q.tolist(),
                                             velocity=((q_to - q_from) * rate).tolist(),
                                             effort=model.gravity(q)[0].tolist()))
            drain()
        assert g.spin(until=lambda: arm.sim_time >= t0 + 2.5, each=ramp, limit=120.0)
        assert np.abs(arm.q - q_to).max() < 0.05

        # released: only the node commands from here
        assert g.call("sysid/gravity_compensation/start").success
        released, q_release = arm.sim_time, arm.q
        path = []
        assert g.spin(until=lambda: arm.sim_time >= released + 2.0, limit=120.0,
                      each=lambda: (drain(), path.append(arm.q)))
        floated = arm.sim_time - released
        response = g.call("sysid/gravity_compensation/stop")
        assert response.success, response.message
        stopped, q_hold = arm.sim_time, float_node.hold[0].copy()
        assert g.spin(until=lambda: arm.sim_time >= stopped + 1.0, limit=120.0, each=drain)
        drain()

        arm_model = damiao_arm()
        kd = np.array([dm.uint_to_float(dm.float_to_uint(k, dm.KD_MIN, dm.KD_MAX, dm.KD_BITS), dm.KD_MIN,
                                        dm.KD_MAX, dm.KD_BITS) for k in arm_model.kd])
        for j, can_id in enumerate(arm_model.can_ids):
            limits = arm.limits(can_id)
            mit = [(t, data) for t, arb, data in frames if arb == can_id and data[:7] != b"\xff" * 7]
            floating = [data for t, data in mit if released <= t < stopped]
            holding = [data for t, data in mit if t >= stopped]
            # floating: after the last position command still in force at the start, every frame
            # has its kp bytes zero and a position target inside the joint range
            kp_raw = [dm.unpack_mit_raw(d)[2] for d in floating]
            since = next(i for i, kp in enumerate(kp_raw) if kp == 0)
            assert len(kp_raw) - since >= 0.5 * floated * RATE      # most of the bridge's rounds
            assert all(kp == 0 for kp in kp_raw[since:]), LAYOUT["joint_names"][j]
            decoded = [dm.decode_mit(d, limits) for d in floating[since:]]
            assert all(arm_model.lower[j] <= f.position <= arm_model.upper[j] for f in decoded)
            assert all(f.kd == pytest.approx(kd[j]) for f in decoded)
            # stopped: the bridge's kp toward the pose of the stop
            held = [dm.decode_mit(d, limits) for d in holding]
            since = next(i for i, f in enumerate(held) if f.kp > 0)
            q_step = dm.resolution(-limits.pmax, limits.pmax, dm.POSITION_BITS)
            assert all(abs(f.position - q_hold[j]) <= q_step for f in held[since:])
            assert all(f.kp == pytest.approx(LAYOUT["kp"][j], abs=0.2) for f in held[since:])
        # the arm held by the feed-forward alone: within the creep the identified model's error
        # and the frame's quantisation allow (the bound of the virtual-arm test above)
        torque_step = np.array([dm.resolution(-lim.tmax, lim.tmax, dm.TORQUE_BITS) for lim in arm_model.limits])
        bound = floated * creep_speed(model.sigma + 0.5 * torque_step, model, float_node.config, kd)
        drift = np.abs(np.array(path) - q_release).max(axis=0)
        print(f"\nfloated {floated:.2f} s: drift {np.round(drift, 4)} rad, bound {np.round(bound, 4)}")
        np.testing.assert_array_less(drift, bound)
        # the hold keeps the arm at the pose of the stop: a position loop of stiffness kp holds a
        # joint within (its torque error + its static friction) / kp, plus a step of the position
        static = np.abs(plant_friction_law(np.geomspace(1e-4, 1.0, 2001)[:, None] * np.ones(7))).max(axis=0)
        q_steps = np.array([dm.resolution(-lim.pmax, lim.pmax, dm.POSITION_BITS) for lim in arm_model.limits])
        np.testing.assert_array_less(np.abs(arm.q - q_hold),
                                     q_steps + (model.sigma + torque_step + static) / np.array(LAYOUT["kp"]))
        assert g.active == [False, True, False]
    finally:
        g.close()             # before the arm: the bridge disables its motors
        monitor.shutdown()
        arm.stop()


def test_the_executable_floats_the_arm_and_leaves_it_held_on_ctrl_c(context):
    """``python -m sysid_ros.gravity_compensation`` under a namespace, as ``ros2 run`` starts it:
    with autostart it answers a pose with NaN positions and the model's gravity torque there
    (MuJoCo's), and Ctrl-C ends it with status 0 after a last command holding that pose."""
    namespace = "/floating"
    process = start_node("gravity_compensation", "-r", f"__ns:={namespace}", "-p", f"model:={NOMINAL}",
                         "-p", "autostart:=true", "-p", "state_timeout_s:=5.0")
    probe = Node("gravity_process_probe", namespace=namespace, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(probe)
    commands = []
    probe.create_subscription(JointState, "sysid/joint_command", commands.append, 100)
    states = probe.create_publisher(JointState, "joint_states", 10)
    robot = load_robot(NOMINAL)
    pose = robot.joint_range.mean(axis=1) + 0.2
    try:
        deadline = time.monotonic() + 120.0  # a guard against hangs, not a speed target
        while not commands and time.monotonic() < deadline:
            states.publish(JointState(name=list(robot.joint_names), position=pose.tolist(),
                                      velocity=[0.0] * robot.n_joints, effort=[0.0] * robot.n_joints))
            executor.spin_once(timeout_sec=0.05)
        assert commands, "no command from the process"
        floating = commands[-1]
        assert np.all(np.isnan(floating.position)) and np.allclose(floating.velocity, 0.0)
        np.testing.assert_allclose(floating.effort, mujoco_gravity(robot.model, pose), atol=1e-6)
    finally:
        status = interrupt(process)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
    executor.shutdown(timeout_sec=1.0)
    probe.destroy_node()
    output = process.stdout.read()
    assert status == 0, output
    held = commands[-1]
    np.testing.assert_allclose(held.position, pose, atol=1e-12)
    np.testing.assert_allclose(held.effort, mujoco_gravity(robot.model, pose), atol=1e-6)
