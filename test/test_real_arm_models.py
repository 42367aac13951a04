"""The real-arm corpus (test/models/real_arms): every published arm loads, says what it is, and our
dynamics model agrees with independent oracles on it.

Oracles: MuJoCo's own joint-space dynamics (M(q) qacc + qfrc_bias), Pinocchio's joint-torque
regressor (base-parameter count) and RNEA on the URDFs, and the payload arm_corpus.with_payload
reports from the numbers it wrote into the truth model.
"""
import re
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from arm_corpus import ARMS, BY_NAME, DIRECTORY, HOME_KINDS, JOINT_TERMS, PAYLOAD_FRACTION, WEIGHTS, with_payload
from sysid_core import load_robot
from sysid_core.dynamics.friction import JointModel
from sysid_core.identification.identify import IdentificationConfig, structural_base_parameters

IDS = [arm.name for arm in ARMS]
URDF_ARMS = [arm for arm in ARMS if arm.urdf]
INTEGRATORS = {int(mujoco.mjtIntegrator.mjINT_EULER): "Euler", int(mujoco.mjtIntegrator.mjINT_RK4): "RK4",
               int(mujoco.mjtIntegrator.mjINT_IMPLICIT): "implicit",
               int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST): "implicitfast"}
# URDF (Pinocchio) against MJCF (MuJoCo) torques, relative: round-off, except that MuJoCo 3.3 (the
# Python 3.10 pin) stores a fullinertia diagonalised to only ~1e-6 relative (4.0: 1e-15), which moves
# torques by ~2e-9; gen3.urdf keeps Kinova's rounded rotations (1.5708, 3.1416), gen3.xml exact ones
URDF_TOLERANCE = {"gen3": 2e-4}
FULLINERTIA_TOLERANCE = 1e-8
SINGULAR = 1e-6      # smallest / largest singular value of the terminal body's Jacobian below which qpos0 is singular


def _states(model: mujoco.MjModel, count: int, seed: int):
    """Random (q, dq, ddq), each (count, nv): q inside the joint ranges (+-pi where unlimited)."""
    rng = np.random.default_rng(seed)
    lower = np.where(model.jnt_limited, model.jnt_range[:, 0], -np.pi)
    upper = np.where(model.jnt_limited, model.jnt_range[:, 1], np.pi)
    return (rng.uniform(lower, upper, (count, model.nv)), rng.uniform(-2.0, 2.0, (count, model.nv)),
            rng.uniform(-5.0, 5.0, (count, model.nv)))


def _moving_mass(model: mujoco.MjModel, body: int) -> float:
    """Mass of ``body`` and of every body welded to it (no joint in between), kg."""
    total = 0.0
    for b in range(1, model.nbody):
        a = b
        while a != body and a != 0 and model.body_jntnum[a] == 0:
            a = model.body_parentid[a]
        total += model.body_mass[b] if a == body else 0.0
    return total


# ---------------------------------------------------------------- the corpus and its README

def test_the_corpus_files_are_the_listed_arms():
    assert sorted(p.stem for p in DIRECTORY.glob("*.xml")) == sorted(BY_NAME)
    assert sorted(p.stem for p in (DIRECTORY / "urdf").glob("*.urdf")) == sorted(a.name for a in URDF_ARMS)


def test_the_corpus_covers_the_arms_users_have():
    assert len(ARMS) >= 12 and len(URDF_ARMS) >= 4
    assert {arm.dof for arm in ARMS} >= {5, 6, 7}
    assert {arm.home for arm in ARMS} == set(HOME_KINDS)
    assert {arm.weight for arm in ARMS} == set(WEIGHTS)
    for term in JOINT_TERMS:  # each joint term both present and absent somewhere
        assert any(term in arm.joint_terms for arm in ARMS) and any(term not in arm.joint_terms for arm in ARMS)
    assert {arm.actuator for arm in ARMS} == {"position", "general", "motor"}
    assert {arm.integrator for arm in ARMS} == {"Euler", "implicit", "implicitfast"}
    assert any(arm.gravcomp for arm in ARMS) and any(arm.keyframe is None for arm in ARMS)


def test_the_readme_table_matches_the_corpus():
    text = (DIRECTORY / "README.md").read_text()
    text = text[text.index("## The arms"):]
    text = text[:text.index("\n## ", 1)]
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    assert sorted(rows) == sorted(BY_NAME)
    for name, cells in rows.items():
        arm = BY_NAME[name]
        _, dof, weight, home, terms, actuator, integrator, timestep, keyframe, urdf = cells[:10]
        assert int(dof) == arm.dof and weight == arm.weight and home == arm.home, name
        assert (set() if terms == "none" else {t.strip() for t in terms.split(",")}) == set(arm.joint_terms), name
        assert actuator == arm.actuator and integrator == arm.integrator, name
        assert float(timestep) == arm.timestep and keyframe == (arm.keyframe or "none"), name
        assert urdf == ("yes" if arm.urdf else "no"), name


# ---------------------------------------------------------------- each file, against its metadata

@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_the_file_says_where_it_comes_from_and_has_no_meshes(arm):
    text = arm.path.read_text()
    header = text[:text.index("<mujoco")]
    assert "Source" in header and "commit" in header and "Changed:" in header
    assert re.search(r"BSD-3-Clause|Apache-2\.0|MIT", header)
    root = ET.fromstring(text)
    assert root.find(".//mesh") is None and not [e for e in root.iter() if "file" in e.attrib]
    assert not [g for g in root.iter("geom") if g.get("type") == "mesh"]


@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_the_file_compiles_loads_and_matches_its_metadata(arm):
    model = mujoco.MjModel.from_xml_path(str(arm.path))
    robot = load_robot(arm.path)
    assert model.njnt == model.nv == arm.dof == robot.n_joints
    assert set(model.jnt_type.tolist()) == {int(mujoco.mjtJoint.mjJNT_HINGE)}
    assert robot.terminal_body == arm.terminal_body

    present = {term for term in ("armature", "damping", "frictionloss") if getattr(model, f"dof_{term}").any()}
    present |= {"stiffness"} if model.jnt_stiffness.any() else set()
    assert present == set(arm.joint_terms)
    assert INTEGRATORS[int(model.opt.integrator)] == arm.integrator and model.opt.timestep == arm.timestep
    assert bool(model.body_gravcomp.any()) == arm.gravcomp

    # one published actuator per joint, of the declared element; servos are affine, motors have no bias
    tags = {e.tag for e in ET.fromstring(arm.path.read_text()).find("actuator")}
    assert tags == ({"general"} if arm.actuator == "motor" else {arm.actuator})
    assert model.nu == arm.dof and sorted(model.actuator_trnid[:, 0]) == list(range(arm.dof))
    affine = int(mujoco.mjtBias.mjBIAS_AFFINE)
    assert set(model.actuator_biastype.tolist()) == ({int(mujoco.mjtBias.mjBIAS_NONE)} if arm.actuator == "motor"
                                                    else {affine})

    keys = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_KEY, k) for k in range(model.nkey)]
    assert (arm.keyframe in keys) if arm.keyframe else keys == []
    if arm.keyframe:  # a published home pose lies inside the published joint ranges
        qpos = model.key_qpos[keys.index(arm.keyframe)]
        limited = model.jnt_limited.astype(bool)
        assert np.all(qpos[limited] >= model.jnt_range[limited, 0]) and np.all(qpos[limited] <= model.jnt_range[limited, 1])

    masses = [_moving_mass(model, b) for b in robot.body_ids]
    weight = "heavy" if max(masses) > 10.0 else "light" if np.median(masses) < 0.3 else "medium"
    assert weight == arm.weight, masses


@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_the_declared_home_pose_kind_is_what_the_jacobian_says(arm):
    """Singular: the terminal body's 6 x n Jacobian at qpos0 loses rank; straight-up: singular with the
    terminal body on the first joint's axis (within 10 % of its distance from the axis's anchor)."""
    model = mujoco.MjModel.from_xml_path(str(arm.path))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, arm.terminal_body)
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    mujoco.mj_jacBody(model, data, jacp, jacr, body)
    sing = np.linalg.svd(np.vstack([jacp, jacr]), compute_uv=False)
    singular = sing[-1] < SINGULAR * sing[0]
    offset = data.xpos[body] - data.xanchor[0]
    along = abs(offset @ data.xaxis[0])
    kind = ("straight-up" if singular and along > 0.9 * np.linalg.norm(offset) else
            "singular" if singular else "bent")
    assert kind == arm.home


# ---------------------------------------------------------------- dynamics against independent oracles

@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_regressor_plus_armature_is_mujocos_inverse_dynamics(arm):
    """Y(q, dq, ddq) theta + armature ddq == M(q) ddq + qfrc_bias (MuJoCo's mass matrix, armature
    included, and bias forces) to 1e-9 relative. Passive forces (damping, springs, gravcomp) and
    constraint forces (frictionloss, limits) are not part of it: they are the joint-physics terms
    the identification models apart (see test_gravcomp_cancels_the_weight_our_model_counts)."""
    robot = load_robot(arm.path)
    model = robot.model
    data = mujoco.MjData(model)
    q, dq, ddq = _states(model, 20, seed=len(arm.name))
    ours = robot.regressor(q, dq, ddq) @ robot.nominal_parameters.reshape(-1) + robot.armature * ddq
    theirs = np.empty_like(q)
    for k in range(len(q)):
        data.qpos[:], data.qvel[:] = q[k], dq[k]
        mujoco.mj_forward(model, data)
        inertial = np.empty(model.nv)
        mujoco.mj_mulM(model, data, inertial, ddq[k])
        theirs[k] = inertial + data.qfrc_bias
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9 * np.abs(theirs).max())


def test_gravcomp_cancels_the_weight_our_model_counts():
    """ARX L5's welded fingers carry gravcomp="1": MuJoCo adds, as a passive force, exactly the
    gravity torque of their mass that the rigid-body model (and the regressor) counts. A simulation
    of this arm therefore never shows the fingers' weight, only their inertia."""
    arm = next(a for a in ARMS if a.gravcomp)
    robot = load_robot(arm.path)
    model, data = robot.model, mujoco.MjData(robot.model)
    t = robot.terminal_index
    welded = np.zeros_like(robot.nominal_parameters)
    welded[t] = robot.nominal_parameters[t] - robot.own_parameters[t]
    assert welded[t, 0] > 0.1  # the two fingers, 65 g each
    still = np.zeros(model.nv)
    for qk in _states(model, 5, seed=3)[0]:
        data.qpos[:] = qk
        mujoco.mj_forward(model, data)
        weight = robot.regressor(qk, still, still)[0] @ welded.reshape(-1)
        np.testing.assert_allclose(data.qfrc_gravcomp, weight, rtol=0, atol=1e-12)
        assert np.abs(weight).max() > 1e-3


def _pinocchio_rank(pin_model, model: mujoco.MjModel) -> tuple[int, float, float]:
    """Rank of Pinocchio's joint-torque regressor with one armature column per joint, over 300 random
    states of ``model``; columns scaled by the arm's size L (mass L^2, first moment L) so that units do
    not decide, none rescaled by its own norm (that would blow round-off up into a direction).
    Returns the rank and the relative singular values on either side of the cut (1e-9)."""
    length = sum(np.linalg.norm(model.body_pos[b]) for b in range(1, model.nbody))
    q, dq, ddq = _states(model, 300, seed=1)
    data = pin_model.createData()
    blocks = [np.hstack([pin.computeJointTorqueRegressor(pin_model, data, _pinocchio_q(pin_model, qk), v, a),
                         np.diag(a)]) for qk, v, a in zip(q, dq, ddq)]
    units = np.concatenate([np.tile([length**2, length, length, length, 1, 1, 1, 1, 1, 1], pin_model.njoints - 1),
                            np.ones(pin_model.nv)])
    sing = np.linalg.svd(np.vstack(blocks) * units, compute_uv=False)
    relative = sing / sing[0]
    rank = int(np.sum(relative > 1e-9))
    return rank, relative[rank - 1], relative[rank] if rank < len(relative) else 0.0


def _pinocchio_q(pin_model, q):
    """Our joint angles as Pinocchio's configuration (continuous joints are cos/sin pairs)."""
    parts = []
    for j in range(1, pin_model.njoints):
        angle = q[j - 1]
        parts += [np.cos(angle), np.sin(angle)] if pin_model.joints[j].nq == 2 else [angle]
    return np.array(parts)


# Base parameters Pinocchio's rank counts and ours does not: a right angle written rounded in the
# published file (Piper's quaternion 0.499998/0.500002: 4e-6 rad; Doosan's: 2e-4 rad) breaks the
# dependency of link2.Izz on joint2.armature by a residual below base_parameters.RANK_TOLERANCE
# (3.1e-6, 2.9e-4 of the column): mathematically independent, unidentifiable from any recording.
ROUNDED_RIGHT_ANGLES = {"piper": 1, "doosan_m1013": 1}


@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_full_scope_base_parameter_count_matches_pinocchio(arm):
    """structural_base_parameters (full scope, armature, no friction terms) finds as many base
    parameters as the rank of Pinocchio's regressor built from the same MJCF, and from the URDF where
    that is the same arm to round-off, less the dependencies a rounded right angle breaks
    (ROUNDED_RIGHT_ANGLES); the cut between kept and dropped singular values is clear by
    two orders of magnitude or more (ur5e's smallest dropped one, 2.5e-11, comes from UR's
    1.570796327 rad for pi/2: a dependency broken by 2e-10 rad is structural)."""
    robot = load_robot(arm.path)
    ours = structural_base_parameters(robot, IdentificationConfig(scope="full", joint_model=JointModel(terms=())))
    models = [pin.buildModelFromMJCF(str(arm.path))]
    if arm.urdf and arm.name not in URDF_TOLERANCE:
        models.append(pin.buildModelFromUrdf(str(arm.urdf_path)))
    for pin_model in models:
        assert pin_model.nv == robot.n_joints
        rank, kept, dropped = _pinocchio_rank(pin_model, robot.model)
        assert kept > 1e-8 and dropped < 1e-10, (kept, dropped)
        assert ours.rank == rank - ROUNDED_RIGHT_ANGLES.get(arm.name, 0)


def test_gen3_urdfs_rounded_rotations_add_three_nearly_unidentifiable_base_parameters():
    """Kinova's URDF rounds pi/2 to 1.5708: three dependencies of the exact arm break by 4e-6 rad, so
    its regressor has three more singular values, 1e-7 to 1e-5 of the largest (real_arms/README.md, URDFs)."""
    model = mujoco.MjModel.from_xml_path(str(BY_NAME["gen3"].path))
    exact, _, _ = _pinocchio_rank(pin.buildModelFromMJCF(str(BY_NAME["gen3"].path)), model)
    rounded, kept, dropped = _pinocchio_rank(pin.buildModelFromUrdf(str(BY_NAME["gen3"].urdf_path)), model)
    assert rounded == exact + 3 and 1e-7 < kept < 1e-5 and dropped < 1e-12


# ---------------------------------------------------------------- truth models with a payload

@pytest.mark.parametrize("arm", ARMS, ids=IDS)
def test_payload_oracle_is_the_truth_models_terminal_body_minus_the_bare_arms(arm, tmp_path):
    payload = with_payload(arm.path)
    truth_path = tmp_path / f"{arm.name}_payload.xml"
    truth_path.write_text(payload.xml)
    truth, bare = load_robot(truth_path), load_robot(arm.path)
    assert payload.body == arm.terminal_body == truth.terminal_body
    t = bare.terminal_index
    np.testing.assert_allclose(truth.nominal_parameters[t] - bare.nominal_parameters[t], payload.parameters,
                               rtol=0, atol=1e-9 * np.abs(payload.parameters).max())
    np.testing.assert_array_equal(np.delete(truth.nominal_parameters, t, 0), np.delete(bare.nominal_parameters, t, 0))
    # a real payload: mass scaled to the arm, centre of mass off the flange, tilted full inertia
    m, h, inertia = payload.parameters[0], payload.parameters[1:4], payload.parameters[4:]
    moving = sum(_moving_mass(bare.model, b) for b in bare.body_ids)
    assert m == pytest.approx(PAYLOAD_FRACTION * moving)
    assert np.linalg.norm(h / m) > 1e-3
    assert np.all(np.abs(inertia[[1, 2, 4]]) > 1e-6 * np.abs(inertia[[0, 3, 5]]).max())
    assert with_payload(arm.path).xml == payload.xml  # deterministic per arm


def test_payload_rejects_a_body_the_arm_does_not_have():
    with pytest.raises(ValueError, match="no body 'flange'"):
        with_payload(ARMS[0].path, body="flange")


# ---------------------------------------------------------------- URDFs of the same arms

@pytest.mark.parametrize("arm", URDF_ARMS, ids=[a.name for a in URDF_ARMS])
def test_urdf_is_the_same_arm_as_the_mjcf(arm):
    """Pinocchio's URDF parser reads the file; with the joints in the same order, its RNEA equals
    MuJoCo's rigid-body inverse dynamics of the MJCF (1e-8, or the rounding a file is known to carry),
    and no mass is lost (fixed links' masses merged, the world-fixed ones into the universe)."""
    model = mujoco.MjModel.from_xml_path(str(arm.path))
    data = mujoco.MjData(model)
    pin_model = pin.buildModelFromUrdf(str(arm.urdf_path))
    pin_data = pin_model.createData()
    names = [name.removeprefix("panda_") for name in list(pin_model.names)[1:]]
    assert names == [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(model.njnt)]
    assert sum(inertia.mass for inertia in pin_model.inertias) == pytest.approx(model.body_mass.sum(), rel=1e-12)
    tolerance = URDF_TOLERANCE.get(arm.name, FULLINERTIA_TOLERANCE)
    q, dq, ddq = _states(model, 20, seed=7)
    for k in range(len(q)):
        data.qpos[:], data.qvel[:] = q[k], dq[k]
        mujoco.mj_forward(model, data)
        data.qacc[:] = ddq[k]
        rigid = np.empty(model.nv)
        mujoco.mj_rne(model, data, 1, rigid)
        theirs = pin.rnea(pin_model, pin_data, _pinocchio_q(pin_model, q[k]), dq[k], ddq[k])
        np.testing.assert_allclose(theirs, rigid, rtol=0, atol=tolerance * np.abs(rigid).max())


def test_the_urdfs_carry_what_the_loader_must_cope_with():
    """What the URDF loader is tested on: package:// meshes that do not exist, a fixed joint from
    `world`, fixed-joint links with mass, links with no <inertial>, a file with no world link."""
    roots = {arm.name: ET.parse(arm.urdf_path).getroot() for arm in URDF_ARMS}

    def meshes(root):
        return [m.get("filename") for m in root.iter("mesh")]

    def fixed_children(root):
        return {j.find("child").get("link") for j in root.iter("joint") if j.get("type") == "fixed"}

    def with_mass(root):
        return {link.get("name") for link in root.iter("link") if link.find("inertial") is not None}

    for name in ("ur5e", "z1", "panda"):
        assert meshes(roots[name]) and all(f.startswith("package://") for f in meshes(roots[name]))
        assert not any((DIRECTORY / "urdf" / f.removeprefix("package://")).exists() for f in meshes(roots[name]))
        assert any(j.find("parent").get("link") == "world" and j.get("type") == "fixed" for j in roots[name].iter("joint"))
    assert meshes(roots["gen3"]) == [] and not any(link.get("name") == "world" for link in roots["gen3"].iter("link"))
    assert {"panda_hand", "panda_leftfinger", "panda_rightfinger"} <= fixed_children(roots["panda"]) & with_mass(roots["panda"])
    assert "base_link_inertia" in fixed_children(roots["ur5e"]) & with_mass(roots["ur5e"])
    for name in ("ur5e", "panda", "gen3"):
        links = {link.get("name") for link in roots[name].iter("link")}
        assert links - with_mass(roots[name]) - {"world"}, name  # massless frames such as tool0 or link8
