"""URDF out: updated_model.urdf carries the identified inertials and friction, reloads (load_robot and
Pinocchio) as identified, changes nothing else, and refuses impossible values."""
import difflib
import re

import numpy as np
import pinocchio as pin
import pytest

from conftest import MODELS
from sysid_core import IdentificationError, load_robot
from sysid_core.dynamics.friction import JointModel
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.results.urdf_export import updated_urdf, write_updated_robot, write_updated_urdf
from sysid_core.simulation import ideal_recording
from test_urdf import EDGE_CASES, PIN_TO_OURS

PAYLOAD_URDF = (MODELS / "urdf" / "panda_class_payload.urdf").read_text()
# the bare arm as its owner's URDF has it, with some hand-made formatting in link7's inertial
BARE_URDF = (PAYLOAD_URDF[:PAYLOAD_URDF.index("  <!-- payload:")] + "</robot>\n").replace(
    '<mass value="0.74"/>', "<mass   value = '0.74' />")


def pinocchio_parameters(text, joints):
    model = pin.buildModelFromXML(text)
    names = list(model.names)
    return np.array([model.inertias[names.index(j)].toDynamicParameters()[PIN_TO_OURS] for j in joints])


def skeleton(line: str) -> str:
    """A line with its numbers blanked: what must not change."""
    return re.sub(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", "#", line)


def identified(nominal, truth, scope, estimator="consistent", terms=("coulomb", "viscous")):
    plan = multisine(nominal.joint_range, 3.0, 200.0, seed=11, max_velocity=2.0)
    recording = ideal_recording(truth.model, plan, truth.joint_names)
    return identify(nominal, recording, IdentificationConfig(scope=scope, estimator=estimator,
                                                             joint_model=JointModel(terms)))


@pytest.fixture(scope="module")
def payload_run():
    nominal, truth = load_robot(BARE_URDF), load_robot(PAYLOAD_URDF)
    return nominal, identified(nominal, truth, "terminal")


def test_terminal_scope_writes_the_payload_into_link7_and_nothing_else(payload_run):
    nominal, result = payload_run
    text = updated_urdf(nominal, result)
    # the payload is found: 0.74 kg link + 1.5 kg payload (MuJoCo's soft friction loss: not exact)
    assert result.terminal_parameters[0] == pytest.approx(2.24, rel=0.01)
    reloaded = load_robot(text)
    np.testing.assert_allclose(reloaded.nominal_parameters, result.body_parameters, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(reloaded.damping, result.viscous, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(reloaded.frictionloss, result.coulomb, rtol=1e-9, atol=1e-12)
    # an independent reader agrees
    np.testing.assert_allclose(pinocchio_parameters(text, nominal.joint_names), result.body_parameters,
                               rtol=1e-9, atol=1e-12)
    before, after = BARE_URDF.splitlines(), text.splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after)  # every joint already had <dynamics>: edits only
    assert len(changed) == 3 + 7  # link7's origin, mass, inertia; the seven <dynamics>
    assert all(skeleton(a) == skeleton(b) for a, b in changed)
    assert "<mass   value = '2.24" in text  # the file's own quoting and spacing
    assert all(re.search(r"<(origin|mass|inertia|dynamics)\b", b) for _, b in changed)


def test_written_file_and_the_dispatch_by_format(payload_run, tmp_path):
    nominal, result = payload_run
    path = write_updated_robot(tmp_path, nominal, result)
    assert path == tmp_path / "updated_model.urdf" and not (tmp_path / "updated_model.xml").exists()
    assert path.read_text() == updated_urdf(nominal, result)


def test_full_scope_rotates_into_each_inertial_frame():
    """UR5e links have rotated inertial frames (rpy kept): every link written, read back by Pinocchio."""
    nominal = load_robot(MODELS / "urdf" / "ur5e.urdf")
    result = identified(nominal, nominal, "full")
    text = updated_urdf(nominal, result)
    np.testing.assert_allclose(pinocchio_parameters(text, nominal.joint_names), result.body_parameters,
                               rtol=1e-8, atol=1e-12)
    assert text.count('rpy="1.5707963267948966 0 0"/>') == nominal.description.count('rpy="1.5707963267948966 0 0"/>')
    # joints without <dynamics> get one, indented like their siblings
    assert '    <limit lower="-6.283185307179586" upper="6.283185307179586" effort="150" velocity="3.14159"/>\n' \
           '    <dynamics damping="' in text
    diff = [line for line in difflib.ndiff(nominal.description.splitlines(), text.splitlines()) if line[:1] in "+-"]
    assert all(re.search(r"<(origin|mass|inertia|dynamics)\b", line) for line in diff)


def test_a_link_without_inertial_gets_one():
    """The massless last link of EDGE_CASES (self-closing <link name="tip"/>) carrying a tool."""
    tool = ('<link name="tip">\n    <inertial><origin xyz="0.01 0 0.04"/><mass value="0.4"/>\n'
            '      <inertia ixx="2e-4" ixy="0" ixz="0" iyy="3e-4" iyz="0" izz="1e-4"/></inertial>\n  </link>')
    nominal = load_robot(EDGE_CASES)
    truth = load_robot(EDGE_CASES.replace('<link name="tip"/>', tool))
    result = identified(nominal, truth, "terminal", terms=("viscous",))
    text = updated_urdf(nominal, result)
    assert result.terminal_parameters[0] == pytest.approx(0.4, rel=1e-6)
    assert '  <link name="tip">\n    <inertial>\n      <origin xyz="' in text and text.endswith("  </link>\n</robot>\n")
    np.testing.assert_allclose(load_robot(text).nominal_parameters[-1], result.terminal_parameters, rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(pinocchio_parameters(text, nominal.joint_names)[-1], result.terminal_parameters,
                               rtol=1e-9, atol=1e-12)
    # only viscous friction was identified: damping written, no friction attribute invented
    assert '<dynamics damping="' in text and 'friction="' not in text


def test_impossible_values_are_refused_and_nothing_is_written(payload_run, tmp_path):
    nominal, result = payload_run
    negative = type(result)(**{**result.__dict__, "coulomb": result.coulomb - 1.0})
    with pytest.raises(IdentificationError, match="refusing to write joint 'joint1': identified friction -"):
        write_updated_urdf(tmp_path / "updated_model.urdf", nominal, negative)
    theta = result.body_parameters.copy()
    theta[-1, 4] = -1.0  # Ixx about the origin negative: no real body
    broken = type(result)(**{**result.__dict__, "body_parameters": theta})
    with pytest.raises(IdentificationError, match="refusing to write body 'link7'.*not physically consistent"):
        write_updated_urdf(tmp_path / "updated_model.urdf", nominal, broken)
    assert list(tmp_path.iterdir()) == []


def test_an_mjcf_robot_is_not_a_urdf(payload_run):
    _, result = payload_run
    with pytest.raises(ValueError, match="not loaded from a URDF"):
        updated_urdf(load_robot(MODELS / "tree_arm.xml"), result)
