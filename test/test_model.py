"""Loading MJCF arms: terminal detection, welded bodies, and clear errors on bad input."""
import mujoco
import numpy as np
import pytest

from conftest import BUNDLED, MODELS, ROBOTS
from sysid_core import ModelError, load_robot
from sysid_core.dynamics.inertia import consistency_violations


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_bundled_arms_load_with_seven_joints_and_valid_bodies(path):
    robot = load_robot(path)
    assert robot.n_joints == 7 and robot.n_bodies == 7
    assert robot.terminal_body == "link7" and robot.terminal_joint == "joint7"
    for theta in robot.nominal_parameters:
        assert consistency_violations(theta) == []


def test_welded_payload_is_merged_into_terminal_body():
    bare = load_robot(ROBOTS / "panda_class.xml")
    loaded = load_robot(ROBOTS / "panda_class_payload.xml")
    assert "payload" in loaded.merged_bodies[-1]
    model = loaded.model
    payload = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "payload")
    assert loaded.nominal_parameters[-1, 0] == pytest.approx(bare.nominal_parameters[-1, 0] + model.body_mass[payload])
    np.testing.assert_allclose(loaded.nominal_parameters[:-1], bare.nominal_parameters[:-1])
    np.testing.assert_allclose(loaded.own_parameters[-1], bare.own_parameters[-1])


def test_merged_first_moment_matches_mujoco_subtree_com():
    """Independent oracle: MuJoCo's subtree CoM of link7 at any pose."""
    robot = load_robot(ROBOTS / "panda_class_payload.xml")
    model, data = robot.model, mujoco.MjData(robot.model)
    data.qpos[:] = np.clip(0.3, *robot.joint_range.T)
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    body = robot.body_ids[-1]
    theta = robot.nominal_parameters[-1]
    com_world = data.xpos[body] + data.xmat[body].reshape(3, 3) @ (theta[1:4] / theta[0])
    np.testing.assert_allclose(com_world, data.subtree_com[body], atol=1e-12)
    assert theta[0] == pytest.approx(model.body_subtreemass[body])


def test_terminal_override_by_body_joint_and_welded_name():
    path = ROBOTS / "panda_class_payload.xml"
    assert load_robot(path, terminal_body="link5").terminal_joint == "joint5"
    assert load_robot(path, terminal_joint="joint6").terminal_body == "link6"
    assert load_robot(path, terminal_body="payload").terminal_body == "link7"


@pytest.mark.parametrize("kwargs, pattern", [
    ({"terminal_body": "nope"}, "terminal body 'nope' is not in the model"),
    ({"terminal_joint": "nope"}, "terminal joint 'nope' is not in the model"),
    ({"terminal_body": "link0"}, "welded to the world"),
])
def test_unknown_override_names(kwargs, pattern):
    with pytest.raises(ModelError, match=pattern):
        load_robot(ROBOTS / "panda_class.xml", **kwargs)


@pytest.mark.parametrize("name, pattern", [
    ("free_joint.xml", "only hinge and slide joints.*free"),
    ("ball_joint.xml", "only hinge and slide joints.*ball"),
    ("no_joints.xml", "has no joints"),
    ("malformed.xml", "cannot load MuJoCo model.*XML"),
    ("missing_mesh.xml", "nonexistent.stl.*mesh"),
])
def test_bad_models_give_clear_errors(name, pattern):
    with pytest.raises(ModelError, match=pattern):
        load_robot(MODELS / "bad" / name)


def test_missing_file_and_missing_mesh_dir():
    with pytest.raises(ModelError, match="model file not found"):
        load_robot(MODELS / "does_not_exist.xml")
    with pytest.raises(ModelError, match="mesh directory not found"):
        load_robot(ROBOTS / "panda_class.xml", mesh_dir="/nonexistent/meshes")


def test_tree_support_and_ref():
    robot = load_robot(MODELS / "tree_arm.xml")
    # each joint moves exactly its own body and the bodies below it
    assert robot.tree.support.any(axis=1).all()
    assert len(robot.joint_names) == 5
