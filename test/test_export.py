"""Exporters: params.json, the updated MJCF model, the Damiao trajectory CSV, the text report."""
from __future__ import annotations

import json
import os
import stat
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest

from sysid_core.errors import IdentificationError
from sysid_core.identification.estimation import Estimate
from sysid_core.results.export import params_document, write_damiao_csv, write_params_json, write_updated_model
from sysid_core.identification.verdict import Verdict
from sysid_core.identification.identify import (IdentificationConfig, IdentificationResult, Metrics, column_names,
                                       model_parameter_vector, structural_base_parameters)
from sysid_core.dynamics.inertia import from_com_inertia
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.trajectory import Trajectory
from sysid_core.results.report import format_result

ROOT = Path(__file__).resolve().parent.parent
PANDA = ROOT / "config" / "robots" / "panda_class.xml"
PANDA_PAYLOAD = ROOT / "config" / "robots" / "panda_class_payload.xml"
TREE = ROOT / "test" / "models" / "tree_arm.xml"
PLANAR = ROOT / "test" / "models" / "planar_2r.xml"

REFERENCE_KEYS = {"joint_name", "mass", "center_of_mass_moment", "inertia_tensor", "coulomb_friction",
                  "viscous_friction", "rmse", "condition_number", "n_base_params"}
EXTENSION_KEYS = {"verdict", "verdict_reasons", "scope", "estimator", "base_estimator", "source", "physics",
                  "body_name", "center_of_mass", "condition_number_raw", "rank",
                  "n_samples", "units", "joints", "rmse_per_joint", "validation_rmse", "validation_rmse_per_joint",
                  "base_parameters", "bodies", "physically_consistent"}


def make_result(robot, scope="terminal", body_parameters=None, validation=False, cond=123.4) -> IdentificationResult:
    """An IdentificationResult of ``robot`` as identify() would build it, with chosen body parameters."""
    config = IdentificationConfig(scope=scope)
    names = column_names(robot, config)
    base = structural_base_parameters(robot, config)
    body = robot.nominal_parameters.copy() if body_parameters is None else np.array(body_parameters, dtype=float)
    standard = model_parameter_vector(robot, names)
    bodies = [robot.terminal_body] if scope == "terminal" else list(robot.body_names)
    for k, name in enumerate(bodies):
        standard[10 * k:10 * k + 10] = body[robot.body_names.index(name)]
    values = base.projection @ standard
    est = Estimate(values, np.diag((1e-2 * np.abs(values) + 1e-9) ** 2), np.full(robot.n_joints, 0.01), "wls")
    n = robot.n_joints
    metrics = Metrics(np.linspace(0.01, 0.02, n), 0.015, cond, 12.5, base.rank, 5000,
                      np.full(n, 0.03) if validation else None, 0.03 if validation else None)
    return IdentificationResult(
        scope=scope, config=config, joint_names=robot.joint_names, body_names=robot.body_names,
        terminal_body=robot.terminal_body, terminal_joint=robot.terminal_joint, column_names=names,
        standard=standard, base=base, estimate=est, body_parameters=body, coulomb=robot.frictionloss.copy(),
        viscous=robot.damping.copy(), armature=robot.armature.copy(), offset=np.zeros(n), metrics=metrics,
        verdict=Verdict("good", ()))


def extra_mass(mass=0.3, com=(0.01, -0.02, 0.05), diag=(4e-4, 5e-4, 6e-4)) -> np.ndarray:
    """A small valid rigid body's parameters (10,): adding it keeps any body physically consistent."""
    return from_com_inertia(mass, np.array(com), np.diag(diag))


def _plain(value):
    """True when ``value`` holds only JSON-native Python types."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (bool, int, float, str)


# --------------------------------------------------------------------------- params.json

def test_params_document_is_a_json_superset_of_the_reference_schema(tmp_path):
    robot = load_robot(PANDA_PAYLOAD)
    result = make_result(robot, validation=True)
    doc = params_document(result, robot, source="simulation")
    assert REFERENCE_KEYS <= doc.keys() and EXTENSION_KEYS <= doc.keys()
    assert "truth" not in doc and "error" not in doc
    assert _plain(doc)
    json.dumps(doc, allow_nan=False)
    # reference meanings: terminal joint, terminal body (welded payload merged), first moment h = m c
    theta = robot.nominal_parameters[robot.terminal_index]
    assert doc["joint_name"] == "joint7" and doc["body_name"] == "link7"
    assert doc["mass"] == pytest.approx(0.74 + 1.5)
    assert doc["center_of_mass_moment"] == pytest.approx(theta[1:4].tolist())
    assert doc["center_of_mass"] == pytest.approx((theta[1:4] / theta[0]).tolist())
    assert list(doc["inertia_tensor"]) == ["Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz"]
    assert doc["inertia_tensor"]["Iyz"] == pytest.approx(theta[8])
    assert doc["coulomb_friction"] == pytest.approx(0.12) and doc["viscous_friction"] == pytest.approx(0.2)
    assert doc["n_base_params"] == result.base.rank
    assert [j["name"] for j in doc["joints"]] == list(robot.joint_names)
    assert set(doc["joints"][0]) == {"name", "coulomb_friction", "viscous_friction", "armature", "offset", "stiffness",
                                     "rmse"}
    assert doc["verdict"] == "good" and doc["verdict_reasons"] == []
    assert doc["physics"] == {"source": "hardware"}
    assert doc["rmse_per_joint"]["joint7"] == pytest.approx(0.02)
    assert doc["validation_rmse"] == pytest.approx(0.03)
    assert set(doc["validation_rmse_per_joint"]) == set(robot.joint_names)
    assert len(doc["base_parameters"]) == result.base.rank
    assert set(doc["base_parameters"][0]) == {"name", "expression", "value", "std", "relative_std_percent"}
    assert [b["name"] for b in doc["bodies"]] == list(robot.body_names)
    assert [b["identified"] for b in doc["bodies"]] == [b == "link7" for b in robot.body_names]
    assert all(doc["physically_consistent"].values())
    assert doc["merged_bodies"] == ["flange", "payload"]

    path = tmp_path / "out" / "params.json"
    write_params_json(path, doc)
    assert json.loads(path.read_text()) == doc


def test_params_document_nulls_for_absent_and_infinite_values():
    robot = load_robot(PLANAR)
    values = np.zeros(10)
    values[0] = -1.0  # an impossible identified body is reported, not hidden
    body = robot.nominal_parameters.copy()
    body[1] = values
    doc = params_document(make_result(robot, body_parameters=body, cond=np.inf), robot, source="x.mcap")
    assert doc["condition_number"] is None
    assert doc["validation_rmse"] is None and doc["validation_rmse_per_joint"] is None
    assert doc["center_of_mass"] is None  # mass <= 0: undefined
    assert doc["physically_consistent"]["link2"] is False
    assert "not positive" in doc["consistency_violations"]["link2"][0]
    json.dumps(doc, allow_nan=False)


def test_params_document_truth_and_error():
    robot = load_robot(PANDA)  # the nominal arm, without payload
    truth = load_robot(PANDA_PAYLOAD)  # payload welded to the flange: merged into link7
    t = robot.terminal_index
    body = robot.nominal_parameters.copy()
    body[t] = truth.nominal_parameters[t]
    doc = params_document(make_result(robot, body_parameters=body), robot, "sim", truth=truth)
    assert doc["truth"]["mass"] == pytest.approx(2.24)
    assert doc["error"]["mass_abs"] == pytest.approx(0.0, abs=1e-12)
    assert doc["error"]["com_error_mm"] == pytest.approx(0.0, abs=1e-9)
    assert set(doc["error"]["inertia_abs"]) == {"Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz"}
    assert len(doc["error"]["first_moment_abs"]) == 3
    assert set(doc["truth"]["coulomb_friction"]) == set(robot.joint_names)
    assert set(doc["error"]["base_parameter_error_percent"]) == set(doc["truth"]["base_parameters"])
    assert all(v is None or v < 1e-8 for v in doc["error"]["base_parameter_error_percent"].values())

    # a 10 % heavier estimate with the CoM moved by (3, 4, 0) mm
    com = truth.nominal_parameters[t, 1:4] / 2.24 + np.array([0.003, 0.004, 0.0])
    body[t] = 1.1 * truth.nominal_parameters[t]
    body[t, 1:4] = body[t, 0] * com
    doc = params_document(make_result(robot, body_parameters=body), robot, "sim", truth=truth)
    assert doc["error"]["mass_percent"] == pytest.approx(10.0)
    assert doc["error"]["mass_abs"] == pytest.approx(0.224)
    assert doc["error"]["com_error_mm"] == pytest.approx(5.0)
    json.dumps(doc, allow_nan=False)


def test_format_result_tables():
    robot = load_robot(PANDA)
    truth = load_robot(PANDA_PAYLOAD)
    result = make_result(robot, body_parameters=truth.nominal_parameters, validation=True)
    text = format_result(result, params_document(result, robot, "sim", truth=truth))
    assert "\x1b[" not in text  # no colours
    for needle in ("link7", "mass", "kg", "centre of mass x", "mm", "kg m^2", "coulomb [N m]",
                   "viscous [N m s/rad]", "armature", "RMSE [N m]", "truth", "error", "base parameters",
                   "condition number", "validation RMSE"):
        assert needle in text, needle
    joint_lines = [l for l in text.splitlines() if l.strip().startswith("joint")]
    assert len(joint_lines) >= robot.n_joints
    # aligned: every row of the joint table has the same length as its header line
    rows = [l for l in text.splitlines() if l.startswith("  joint")]
    assert len({len(l) for l in rows}) == 1

    plain = format_result(result, params_document(result, robot, "sim"))
    assert "truth" not in plain
    full = make_result(load_robot(TREE), scope="full")
    assert "Bodies" in format_result(full, params_document(full, load_robot(TREE), "sim"))


# --------------------------------------------------------------------------- updated model

def _count(path: Path, tag: str) -> int:
    return sum(1 for _ in ET.parse(path).getroot().iter(tag))


def _check_reload(path: Path, result, bodies):
    reloaded = load_robot(path)
    for name in bodies:
        got = reloaded.nominal_parameters[reloaded.body_names.index(name)]
        want = result.body_parameters[result.body_names.index(name)]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9 * max(1.0, abs(want).max()))


def test_terminal_with_welded_payload_keeps_payload_inertial(tmp_path):
    robot = load_robot(PANDA_PAYLOAD)
    t = robot.terminal_index
    body = robot.nominal_parameters.copy()
    body[t] = body[t] + extra_mass()  # identified composite: link7 + flange + payload + 0.3 kg
    result = make_result(robot, body_parameters=body)
    out = write_updated_model(PANDA_PAYLOAD, tmp_path / "updated_model.xml", robot, result)
    assert out == tmp_path / "updated_model.xml"
    _check_reload(out, result, ["link7"])

    updated = load_robot(out)
    # payload keeps its own inertial; link7's own body took the remainder
    np.testing.assert_allclose(updated.own_parameters[t], robot.own_parameters[t] + extra_mass(), atol=1e-9)
    model = mujoco.MjModel.from_xml_path(str(out))
    payload = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "payload")
    assert model.body_mass[payload] == pytest.approx(1.5)
    text = out.read_text()
    assert '<inertial pos="0.02 -0.01 0.06" mass="1.5" fullinertia="0.00275819 0.00300936 0.00170745' in text
    # other bodies untouched
    for name in robot.body_names[:-1]:
        np.testing.assert_allclose(updated.nominal_parameters[updated.body_names.index(name)],
                                   robot.nominal_parameters[robot.body_names.index(name)], atol=1e-12)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_get_the_permissions_of_the_users_umask(tmp_path, umask):
    robot = load_robot(PANDA_PAYLOAD)
    result = make_result(robot, body_parameters=robot.nominal_parameters.copy())
    previous = os.umask(umask)
    try:
        write_params_json(tmp_path / "params.json", {"mass": 1.0})
        write_updated_model(PANDA_PAYLOAD, tmp_path / "updated_model.xml", robot, result)
        (tmp_path / "plain.txt").write_text("")  # what open() creates: the oracle
    finally:
        os.umask(previous)
    expected = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert expected == 0o666 & ~umask
    for name in ("params.json", "updated_model.xml"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == expected, name


def test_updated_model_preserves_everything_else(tmp_path):
    robot = load_robot(PANDA_PAYLOAD)
    result = make_result(robot)
    out = write_updated_model(PANDA_PAYLOAD, tmp_path / "m.xml", robot, result)
    text = out.read_text()
    assert text.startswith('<?xml version="1.0"?>')
    assert "Panda-class 7-DOF arm" in text  # comment before the root element
    assert "flange: massless frame welded to link7" in text  # comment inside
    assert "use this keyframe as a valid home pose" in text
    for tag in ("geom", "body", "motor", "site", "key", "joint"):
        assert _count(out, tag) == _count(PANDA_PAYLOAD, tag), tag
    assert _count(out, "inertial") == _count(PANDA_PAYLOAD, "inertial")
    # attribute order kept on an untouched element
    assert '<joint name="joint7" range="-2.8973 2.8973" armature="0.06" damping="0.2" frictionloss="0.12"' in text
    # the identification comment sits right before link7
    comment = ("<!-- sysid_ros: body 'link7' identified (scope terminal, estimator consistent), "
               "torque RMSE 0.015 N m, verdict good -->")
    assert comment in text
    after = text.split(comment, 1)[1].lstrip()
    assert after.startswith('<body name="link7"')
    # the written inertial is in MuJoCo's fullinertia order
    root = ET.parse(out).getroot()
    link7 = next(b for b in root.iter("body") if b.get("name") == "link7")
    inertial = link7.find("inertial")
    assert list(inertial.attrib) == ["pos", "mass", "fullinertia"]
    assert len(inertial.get("fullinertia").split()) == 6
    _check_reload(out, result, ["link7"])

    # a second run on the output replaces the comment instead of stacking another
    again = write_updated_model(out, tmp_path / "m2.xml", load_robot(out), make_result(load_robot(out)))
    assert again.read_text().count("sysid_ros: body 'link7'") == 1


def test_no_declaration_stays_without_one(tmp_path):
    src = tmp_path / "arm.xml"
    src.write_text(PLANAR.read_text().split("\n", 1)[1])  # drop <?xml ...?>
    robot = load_robot(src)
    out = write_updated_model(src, tmp_path / "out.xml", robot, make_result(robot))
    assert not out.read_text().lstrip().startswith("<?xml")
    assert out.read_text().lstrip().startswith("<!-- Planar 2R")


def test_full_scope_writes_every_moving_body(tmp_path):
    robot = load_robot(TREE)
    body = robot.nominal_parameters * 1.1  # scaling keeps every body physically consistent
    result = make_result(robot, scope="full", body_parameters=body)
    out = write_updated_model(TREE, tmp_path / "tree.xml", robot, result)
    _check_reload(out, result, robot.body_names)
    text = out.read_text()
    for name in robot.body_names:
        assert f"sysid_ros: body '{name}' identified (scope full" in text
    assert "sysid_ros: body 'tool_b'" not in text and "sysid_ros: body 'mount'" not in text
    # welded tool_b keeps its inertial, the world-welded mount too
    model = mujoco.MjModel.from_xml_path(str(out))
    for name, mass in (("tool_b", 0.25), ("mount", 3.0)):
        assert model.body_mass[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)] == pytest.approx(mass)
    assert "welded: no joint, carries its own mass" in text


def test_body_without_inertial_gets_one(tmp_path):
    src = tmp_path / "geom_inertia.xml"
    src.write_text("""<mujoco model="g">
  <worldbody>
    <body name="a">
      <joint name="j1" type="hinge" axis="0 0 1"/>
      <geom type="box" size="0.1 0.05 0.02" pos="0.1 0 0" density="1000"/>
      <body name="b" pos="0.2 0 0">
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" density="1000"/>
      </body>
    </body>
  </worldbody>
</mujoco>
""")
    robot = load_robot(src)
    body = robot.nominal_parameters.copy()
    body[1] = body[1] + extra_mass()
    result = make_result(robot, body_parameters=body)
    out = write_updated_model(src, tmp_path / "out.xml", robot, result)
    _check_reload(out, result, ["b"])
    b = next(e for e in ET.parse(out).getroot().iter("body") if e.get("name") == "b")
    assert b[0].tag == "inertial"
    assert "\n        <inertial" in out.read_text()  # indented like its siblings


def _refuse(tmp_path, robot, own_value, reason):
    """Writing ``own_value`` into the terminal body must fail with ``reason`` and leave no file."""
    t = robot.terminal_index
    body = robot.nominal_parameters.copy()
    body[t] = own_value + (robot.nominal_parameters[t] - robot.own_parameters[t])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(IdentificationError) as err:
        write_updated_model(robot.path, out_dir / "m.xml", robot, make_result(robot, body_parameters=body))
    assert robot.terminal_body in str(err.value) and reason in str(err.value)
    assert list(out_dir.iterdir()) == []
    return str(err.value)


def test_refuses_negative_mass(tmp_path):
    robot = load_robot(PANDA_PAYLOAD)
    theta = robot.own_parameters[robot.terminal_index].copy()
    theta[0] = -0.5
    message = _refuse(tmp_path, robot, theta, "mass -0.5 kg is not positive")
    assert "flange" in message and "payload" in message  # says the welded share was subtracted


def test_refuses_non_positive_definite_inertia(tmp_path):
    robot = load_robot(PLANAR)
    _refuse(tmp_path, robot, from_com_inertia(1.0, np.zeros(3), np.diag([0.01, 0.01, -0.001])),
            "not positive definite")


def test_refuses_triangle_inequality_violation(tmp_path):
    robot = load_robot(PLANAR)
    _refuse(tmp_path, robot, from_com_inertia(1.0, np.array([0.1, 0, 0]), np.diag([0.001, 0.001, 0.003])),
            "triangle inequality")


def test_refuses_nan(tmp_path):
    robot = load_robot(PLANAR)
    theta = robot.own_parameters[1].copy()
    theta[5] = np.nan
    _refuse(tmp_path, robot, theta, "NaN")


def test_refuses_identified_composite_below_welded_share(tmp_path):
    # consistent composite, but lighter than the welded payload alone: link7 would need negative mass
    robot = load_robot(PANDA_PAYLOAD)
    body = robot.nominal_parameters.copy()
    body[robot.terminal_index] = extra_mass(mass=1.0)
    out = tmp_path / "m.xml"
    with pytest.raises(IdentificationError, match="link7.*not positive"):
        write_updated_model(PANDA_PAYLOAD, out, robot, make_result(robot, body_parameters=body))
    assert not out.exists()


def test_refuses_inertiafromgeom_true(tmp_path):
    src = tmp_path / "a.xml"
    src.write_text(PLANAR.read_text().replace('<compiler angle="radian"', '<compiler inertiafromgeom="true" angle="radian"'))
    robot = load_robot(src)
    with pytest.raises(IdentificationError, match="inertiafromgeom"):
        write_updated_model(src, tmp_path / "b.xml", robot, make_result(robot))
    assert not (tmp_path / "b.xml").exists()


def test_refuses_body_defined_in_an_include(tmp_path):
    (tmp_path / "part.xml").write_text("""<mujoco>
  <body name="b2" pos="0.1 0 0">
    <joint name="j2" type="hinge" axis="0 1 0"/>
    <inertial pos="0.05 0 0" mass="1" diaginertia="0.01 0.01 0.002"/>
  </body>
</mujoco>
""")
    src = tmp_path / "main.xml"
    src.write_text("""<mujoco>
  <worldbody>
    <body name="b1">
      <joint name="j1" type="hinge" axis="0 0 1"/>
      <inertial pos="0.05 0 0" mass="1" diaginertia="0.01 0.01 0.002"/>
      <include file="part.xml"/>
    </body>
  </worldbody>
</mujoco>
""")
    robot = load_robot(src)
    assert robot.terminal_body == "b2"
    with pytest.raises(IdentificationError, match=r"'b2'.*include"):
        write_updated_model(src, tmp_path / "out.xml", robot, make_result(robot))
    assert not (tmp_path / "out.xml").exists()
    # the full scope fails on b2 as well, before touching anything
    with pytest.raises(IdentificationError, match="'b2'"):
        write_updated_model(src, tmp_path / "out.xml", robot, make_result(robot, scope="full"))
    assert not (tmp_path / "out.xml").exists()


def test_reload_mismatch_removes_the_file(tmp_path):
    # boundmass makes MuJoCo raise every mass below 5 kg: the check after writing must catch it
    src = tmp_path / "a.xml"
    src.write_text(PLANAR.read_text().replace('<compiler angle="radian"', '<compiler boundmass="5" angle="radian"'))
    robot = load_robot(src)
    result = make_result(robot, body_parameters=load_robot(PLANAR).nominal_parameters)
    out_dir = tmp_path / "out"
    with pytest.raises(IdentificationError, match="reloads as"):
        write_updated_model(src, out_dir / "b.xml", robot, result)
    assert list(out_dir.iterdir()) == []


def _tetrahedron_stl(path: Path) -> None:
    """A binary STL of a 0.1 m corner tetrahedron, outward normals."""
    v = np.array([[0, 0, 0], [0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]], dtype=np.float32)
    faces = [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)]
    data = bytearray(b"tetrahedron for sysid_ros tests".ljust(80, b" "))
    data += struct.pack("<I", len(faces))
    for a, b, c in faces:
        normal = np.cross(v[b] - v[a], v[c] - v[a])
        data += struct.pack("<12fH", *(normal / np.linalg.norm(normal)), *v[a], *v[b], *v[c], 0)
    path.write_bytes(bytes(data))


MESH_MODEL = """<?xml version="1.0" encoding="utf-8"?>
<mujoco model="mesh_arm">
  {compiler}
  <asset>
    <mesh name="tet" file="tet.stl"/>
  </asset>
  <worldbody>
    <body name="link1">
      <joint name="j1" type="hinge" axis="0 0 1"/>
      <inertial pos="0.05 0 0" mass="1" diaginertia="0.01 0.01 0.002"/>
      <geom type="mesh" mesh="tet" contype="0" conaffinity="0"/>
      <body name="link2" pos="0.2 0 0">
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="mesh" mesh="tet" density="2000" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("compiler, mesh_sub", [('<compiler angle="radian" meshdir="meshes"/>', "meshes"),
                                                ("", "."),
                                                ('<compiler assetdir="assets"/>', "assets")])
def test_mesh_paths_fixed_when_written_elsewhere(tmp_path, compiler, mesh_sub):
    src_dir = tmp_path / "src"
    (src_dir / mesh_sub).mkdir(parents=True, exist_ok=True)
    _tetrahedron_stl(src_dir / mesh_sub / "tet.stl")
    src = src_dir / "arm.xml"
    src.write_text(MESH_MODEL.format(compiler=compiler))
    robot = load_robot(src)
    body = robot.nominal_parameters.copy()
    body[1] = body[1] + extra_mass()
    result = make_result(robot, body_parameters=body)

    out = write_updated_model(src, tmp_path / "elsewhere" / "deeper" / "arm_updated.xml", robot, result)
    _check_reload(out, result, ["link2"])
    meshdir = next(ET.parse(out).getroot().iter("compiler")).get("meshdir")
    assert Path(meshdir).is_absolute() and Path(meshdir).resolve() == (src_dir / mesh_sub).resolve()
    assert out.read_text().startswith('<?xml version="1.0" encoding="utf-8"?>')

    # next to the source, nothing about asset paths changes
    same = write_updated_model(src, src_dir / "arm_same_dir.xml", robot, result)
    assert str(tmp_path) not in same.read_text()
    _check_reload(same, result, ["link2"])


# --------------------------------------------------------------------------- Damiao CSV

def _crafted():
    time = np.arange(8) * 0.001
    q = np.zeros((8, 2))
    dq = np.zeros((8, 2))
    tau = np.zeros((8, 2))
    # joint 0 on a DM4310 (12.5 rad, 30 rad/s, 10 N m): samples 1, 2, 3 clamped
    q[1, 0], q[2, 0], dq[3, 0], tau[1, 0] = 13.0, -13.0, 31.0, 11.0
    # joint 1 on a DM4340 (12.5 rad, 10 rad/s, 28 N m): exactly at a limit is not clamped, sample 5 is
    dq[7, 1], tau[5, 1], q[4, 1] = 10.0, -28.5, 12.5
    return Trajectory(time, q, dq, np.zeros((8, 2))), tau


def _read_csv(path: Path):
    lines = path.read_text().splitlines()
    comments = [l for l in lines if l.startswith("#")]
    rows = [l.split(",") for l in lines if not l.startswith("#")]
    return comments, rows[0], rows[1:]


def test_damiao_csv_clamping_and_format(tmp_path):
    traj, tau = _crafted()
    path = tmp_path / "damiao_trajectory.csv"
    percent = write_damiao_csv(path, traj, tau, ["DM4310", "dm4340"])
    assert percent == {0: pytest.approx(37.5), 1: pytest.approx(12.5)}
    comments, header, rows = _read_csv(path)
    assert comments == ["# motor_type=DM4310,can_id=1,mode=MIT", "# motor_type=DM4340,can_id=2,mode=MIT",
                        "# joints=j0,j1"]
    assert header == ["time", "j0_pos", "j0_vel", "j0_tau", "j1_pos", "j1_vel", "j1_tau"]
    assert len(rows) == 8
    assert rows[1] == ["0.001", "12.500000", "0.000000", "10.000000", "0.000000", "0.000000", "0.000000"]
    assert rows[2][1] == "-12.500000" and rows[3][2] == "30.000000"
    assert rows[5][6] == "-28.000000" and rows[7][5] == "10.000000" and rows[4][4] == "12.500000"
    values = np.array([[float(x) for x in r] for r in rows])
    assert np.all(np.abs(values[:, [1, 4]]) <= 12.5)


def test_damiao_csv_names_and_can_ids(tmp_path):
    traj, tau = _crafted()
    path = tmp_path / "t.csv"
    percent = write_damiao_csv(path, traj, tau, ["DM8009", "DM4340_48V"], can_ids=[5, 6],
                               joint_names=["shoulder", "elbow"])
    assert set(percent) == {"shoulder", "elbow"}
    assert percent["shoulder"] == pytest.approx(25.0)  # DM8009 VMAX 45, TMAX 54: only the positions clip
    comments, header, _ = _read_csv(path)
    assert comments == ["# motor_type=DM8009,can_id=5,mode=MIT", "# motor_type=DM4340_48V,can_id=6,mode=MIT",
                        "# joints=shoulder,elbow"]
    assert header[1] == "j0_pos"


def test_damiao_csv_errors(tmp_path):
    traj, tau = _crafted()
    path = tmp_path / "t.csv"
    with pytest.raises(ValueError, match="1 motor type.*2 joints.*2 are needed"):
        write_damiao_csv(path, traj, tau, ["DM4310"])
    with pytest.raises(ValueError, match="unknown Damiao motor type 'DM9999'.*DM4310"):
        write_damiao_csv(path, traj, tau, ["DM4310", "DM9999"])
    with pytest.raises(ValueError, match="torque shape"):
        write_damiao_csv(path, traj, tau[:, :1], ["DM4310", "DM4310"])
    with pytest.raises(ValueError, match="CAN ids"):
        write_damiao_csv(path, traj, tau, ["DM4310", "DM4310"], can_ids=[1])
    bad = tau.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        write_damiao_csv(path, traj, bad, ["DM4310", "DM4310"])
    assert not path.exists()


def test_mesh_dir_override_is_written_into_the_copy(tmp_path):
    # the robot only loads with --mesh-dir; the copy must load without it
    meshes = tmp_path / "elsewhere_meshes"
    meshes.mkdir()
    _tetrahedron_stl(meshes / "tet.stl")
    src = tmp_path / "arm.xml"
    src.write_text(MESH_MODEL.format(compiler='<compiler meshdir="missing"/>'))
    robot = load_robot(src, mesh_dir=meshes)
    result = make_result(robot)
    out = write_updated_model(src, tmp_path / "arm_updated.xml", robot, result, mesh_dir=meshes)
    _check_reload(out, result, ["link2"])
    assert Path(next(ET.parse(out).getroot().iter("compiler")).get("meshdir")).resolve() == meshes.resolve()
