"""URDF in: load_robot against an independent URDF reader (Pinocchio), MuJoCo's import rules
neutralised, and the URDF/MJCF twins of one arm giving the same regressor and identification."""
import re

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from conftest import MODELS, ROBOTS
from sysid_core import ModelError, load_robot
from sysid_core.dynamics import urdf
from sysid_core.dynamics.friction import JointModel
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.simulation import ideal_recording

URDFS = sorted((MODELS / "urdf").glob("*.urdf")) + sorted((MODELS / "real_arms" / "urdf").glob("*.urdf"))
# Pinocchio's dynamic parameters [m, mc, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] in our order [.., Ixz, Iyy, ..]
PIN_TO_OURS = np.array([0, 1, 2, 3, 4, 5, 7, 6, 8, 9])


def pinocchio_view(robot, model):
    """Pinocchio's joint index (1..) of each of our joints, the parameters (nb, 10) of the
    moving bodies in our order and a function giving Pinocchio's regressor in our layout."""
    names = list(model.names)
    joints = [names.index(j) for j in robot.joint_names]
    # our moving bodies carry one joint each on these arms: Pinocchio's joint bodies in the same order
    theta = np.array([model.inertias[j].toDynamicParameters()[PIN_TO_OURS] for j in joints])
    data = model.createData()
    rows = [model.joints[j].idx_v for j in joints]
    cols = np.concatenate([(j - 1) * 10 + PIN_TO_OURS for j in joints])

    def regressor(q, dq, ddq):
        out = np.empty((len(q), robot.n_joints, 10 * robot.n_bodies))
        for k in range(len(q)):
            qp, vp, ap = pin.neutral(model), np.zeros(model.nv), np.zeros(model.nv)
            for i, j in enumerate(joints):
                joint = model.joints[j]
                if joint.nq == 2:  # continuous joints are (cos, sin) in Pinocchio
                    qp[joint.idx_q:joint.idx_q + 2] = np.cos(q[k, i]), np.sin(q[k, i])
                else:
                    qp[joint.idx_q] = q[k, i]
                vp[joint.idx_v], ap[joint.idx_v] = dq[k, i], ddq[k, i]
            out[k] = pin.computeJointTorqueRegressor(model, data, qp, vp, ap)[np.ix_(rows, cols)]
        return out
    return theta, regressor


def random_states(robot, count=25, seed=0):
    rng = np.random.default_rng(seed)
    low = np.where(np.isfinite(robot.joint_range[:, 0]), robot.joint_range[:, 0], -np.pi)
    high = np.where(np.isfinite(robot.joint_range[:, 1]), robot.joint_range[:, 1], np.pi)
    return (rng.uniform(low, high, (count, robot.n_joints)), rng.uniform(-2, 2, (count, robot.n_joints)),
            rng.uniform(-5, 5, (count, robot.n_joints)))


def assert_same_as_pinocchio(robot, model):
    assert robot.n_joints == model.nv and robot.n_bodies == model.njoints - 1
    theta, regressor = pinocchio_view(robot, model)
    # same mass (and first moment, inertia) per moving body, fixed links merged in
    np.testing.assert_allclose(robot.nominal_parameters, theta, rtol=0, atol=1e-12)
    q, dq, ddq = random_states(robot)
    np.testing.assert_allclose(robot.regressor(q, dq, ddq), regressor(q, dq, ddq), rtol=0, atol=1e-9)


def test_the_arm_urdfs_are_here():
    names = {p.name for p in URDFS}
    assert {"ur5e.urdf", "fer.urdf", "panda_class_payload.urdf"} <= names


@pytest.mark.parametrize("path", URDFS, ids=lambda p: p.stem)
def test_real_arm_urdfs_match_pinocchio(path):
    """Meshes (package://), a fixed joint to world, massive fixed links, links without
    <inertial>: same total mass per moving body and the same regressor as Pinocchio."""
    robot = load_robot(path)
    assert robot.source_format == "urdf" and robot.description == path.read_text()
    assert_same_as_pinocchio(robot, pin.buildModelFromUrdf(str(path)))


def test_mujoco_alone_cannot_load_these_urdfs():
    """What load_robot is for: MuJoCo's plain URDF import fails on the mesh references."""
    with pytest.raises(ValueError, match="package"):
        mujoco.MjModel.from_xml_path(str(MODELS / "urdf" / "ur5e.urdf"))


def test_fixed_links_are_welded_bodies_of_their_moving_parent():
    ur5e = load_robot(MODELS / "urdf" / "ur5e.urdf")
    assert ur5e.terminal_body == "wrist_3_link" and ur5e.merged_bodies[-1] == ("flange", "tool0")
    fer = load_robot(MODELS / "urdf" / "fer.urdf", terminal_body="fer_hand")
    assert fer.terminal_body == "fer_link7" and "fer_hand" in fer.merged_bodies[-1]
    hand = 0.73
    assert fer.nominal_parameters[-1, 0] == pytest.approx(0.35973 + hand, abs=1e-12)
    assert fer.own_parameters[-1, 0] == pytest.approx(0.35973, abs=1e-12)


def test_published_fer_link4_breaks_the_triangle_inequality_only_the_simulation_is_changed():
    """Franka's published link4 inertia has principal moments with a + b < c: MuJoCo refuses it.
    The simulation model gets the smallest fix; the nominal parameters keep the published values."""
    robot = load_robot(MODELS / "urdf" / "fer.urdf")
    assert set(robot.simulation_adjustments) == {"fer_link4"}
    assert "triangle" in robot.simulation_adjustments["fer_link4"]
    body = robot.body_ids[robot.body_names.index("fer_link4")]
    assert robot.model.body_mass[body] == pytest.approx(2.2037)
    a, b, c = np.sort(robot.model.body_inertia[body])
    assert a + b >= c


EDGE_CASES = """<?xml version="1.0"?>
<robot name="edge_cases">
  <mujoco>
    <compiler fusestatic="true" balanceinertia="true" boundmass="0.5" boundinertia="0.01"
              settotalmass="100" inertiafromgeom="true" discardvisual="false"/>
  </mujoco>
  <link name="base"/>
  <joint name="a" type="continuous">
    <parent link="base"/><child link="dummy"/>
    <origin xyz="0 0 0.3" rpy="0.2 -0.1 0.4"/><axis xyz="0 0 1"/>
  </joint>
  <link name="dummy"/>
  <joint name="b" type="revolute">
    <parent link="dummy"/><child link="arm"/>
    <origin xyz="0 0 0" rpy="1.5707963267948966 0 0"/><axis xyz="0 0 1"/>
    <limit lower="-2" upper="2" effort="10" velocity="2"/>
  </joint>
  <link name="arm">
    <inertial>
      <origin xyz="0.1 0.02 -0.01" rpy="0.3 0.2 0.1"/>
      <mass value="1.2"/>
      <inertia ixx="0.004" ixy="0.0002" ixz="-0.0001" iyy="0.003" iyz="0.0003" izz="0.002"/>
    </inertial>
    <visual><geometry><mesh filename="package://nowhere/arm.dae"/></geometry></visual>
  </link>
  <joint name="arm_motor_joint" type="fixed">
    <parent link="arm"/><child link="arm_motor"/>
    <origin xyz="0.25 0 0" rpy="0 1.5707963267948966 0"/>
  </joint>
  <link name="arm_motor">
    <inertial>
      <origin xyz="0 0 0.02"/>
      <mass value="0.6"/>
      <inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"/>
    </inertial>
    <collision><geometry><box size="0.05 0.05 0.05"/></geometry></collision>
  </link>
  <joint name="c" type="prismatic">
    <parent link="arm_motor"/><child link="slider"/>
    <origin xyz="0 0 0.05"/><axis xyz="1 0 0"/>
    <limit lower="-0.1" upper="0.1" effort="50" velocity="0.5"/>
  </joint>
  <link name="slider">
    <inertial><origin xyz="0 0.03 0"/><mass value="0.3"/>
      <inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"/></inertial>
  </link>
  <joint name="d" type="revolute">
    <parent link="slider"/><child link="tip"/>
    <origin xyz="0 0 0.1"/><axis xyz="0 1 0"/>
    <limit lower="-1" upper="1" effort="5" velocity="1"/>
  </joint>
  <link name="tip"/>
</robot>
"""


def test_edge_cases_as_pinocchio_reads_them(tmp_path):
    """A <mujoco><compiler> asking for fusestatic, balanceinertia, boundmass, settotalmass and
    inertiafromgeom; a massless moving link, a point mass on a fixed joint, a point-mass slider, a
    massless last link, a continuous joint, rotated inertial frames: nominal parameters and
    regressor as Pinocchio's; the simulation model changed only where MuJoCo refuses."""
    path = tmp_path / "edge_cases.urdf"
    path.write_text(EDGE_CASES)
    robot = load_robot(path)
    assert robot.joint_names == ("a", "b", "c", "d") and robot.merged_bodies[1] == ("arm_motor",)
    np.testing.assert_allclose(robot.nominal_parameters[:, 0], [0.0, 1.8, 0.3, 0.0], atol=1e-12)
    assert set(robot.simulation_adjustments) == {"dummy", "slider", "tip"}
    assert np.isinf(robot.joint_range[0]).all()
    assert_same_as_pinocchio(robot, pin.buildModelFromUrdf(str(path)))
    # the text loads like the file
    text_robot = load_robot(EDGE_CASES)
    assert text_robot.path is None and text_robot.description == EDGE_CASES
    np.testing.assert_array_equal(text_robot.nominal_parameters, robot.nominal_parameters)


def test_link_parameters_rotate_the_inertial_frame():
    root = urdf.parse(EDGE_CASES, "edge")
    theta = urdf.link_parameters(root, "edge")["arm"]
    rotation = urdf.rpy_matrix((0.3, 0.2, 0.1))
    inertia = np.array([[0.004, 0.0002, -0.0001], [0.0002, 0.003, 0.0003], [-0.0001, 0.0003, 0.002]])
    expected = pin.Inertia(1.2, np.array([0.1, 0.02, -0.01]), rotation @ inertia @ rotation.T)
    np.testing.assert_allclose(theta, expected.toDynamicParameters()[PIN_TO_OURS], atol=1e-15)
    # URDF's rpy is the fixed-axis X-Y-Z rotation Pinocchio's rpyToMatrix gives
    np.testing.assert_allclose(rotation, pin.rpy.rpyToMatrix(0.3, 0.2, 0.1), atol=1e-15)


@pytest.mark.parametrize("change, pattern", [
    (lambda t: t.replace('<mass value="1.2"/>', '<mass value="-1.2"/>'), "mass -1.2 kg is negative"),
    (lambda t: t.replace('<mass value="1.2"/>', ""), "needs <mass> and <inertia>"),
    (lambda t: t.replace('ixx="0.004"', 'ixx="abc"'), "ixx=\"abc\" is not 1 finite"),
    (lambda t: t.replace('ixx="0.004"', ""), "lacks the attribute 'ixx'"),
    (lambda t: t.replace("</robot>", "<link name=\"arm\"/></robot>"), "link 'arm' is defined twice"),
    (lambda t: t.replace("</robot>", ""), "cannot parse URDF"),
    (lambda t: t.replace('type="prismatic"', 'type="floating"'), r"only revolute, continuous.*'c' \(floating\)"),
])
def test_bad_urdfs_give_clear_errors(change, pattern):
    with pytest.raises(ModelError, match=pattern):
        load_robot(change(EDGE_CASES))


# ------------------------------------------------------------------ URDF and MJCF twins


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """panda_class_payload as MJCF (armature removed: URDF has none) and as URDF."""
    tmp = tmp_path_factory.mktemp("twins")
    mjcf = tmp / "panda_class_payload.xml"
    mjcf.write_text(re.sub(r'\s+armature="[^"]*"', "", (ROBOTS / "panda_class_payload.xml").read_text()))
    return load_robot(mjcf), load_robot(MODELS / "urdf" / "panda_class_payload.urdf")


def test_urdf_and_mjcf_of_one_arm_give_the_same_regressor(twins):
    from_mjcf, from_urdf = twins
    assert from_mjcf.joint_names == from_urdf.joint_names and from_mjcf.body_names == from_urdf.body_names
    np.testing.assert_allclose(from_urdf.nominal_parameters, from_mjcf.nominal_parameters, rtol=0, atol=1e-12)
    for attribute in ("damping", "frictionloss", "armature", "joint_range", "gravity"):
        np.testing.assert_allclose(getattr(from_urdf, attribute), getattr(from_mjcf, attribute), atol=1e-12)
    q, dq, ddq = random_states(from_mjcf, count=50)
    np.testing.assert_allclose(from_urdf.regressor(q, dq, ddq), from_mjcf.regressor(q, dq, ddq), rtol=0, atol=1e-9)


def test_urdf_and_mjcf_of_one_arm_give_the_same_identification(twins):
    from_mjcf, from_urdf = twins
    plan = multisine(from_mjcf.joint_range, 4.0, 200.0, seed=5, max_velocity=2.0)
    recording = ideal_recording(from_mjcf.model, plan, from_mjcf.joint_names)
    config = IdentificationConfig(scope="terminal", estimator="wls", joint_model=JointModel(("viscous", "coulomb")))
    a, b = identify(from_mjcf, recording, config), identify(from_urdf, recording, config)
    np.testing.assert_allclose(b.body_parameters, a.body_parameters, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.viscous, a.viscous, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.coulomb, a.coulomb, rtol=1e-9, atol=1e-12)
    assert b.metrics.rmse == pytest.approx(a.metrics.rmse, rel=1e-6, abs=1e-12)
