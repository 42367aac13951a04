"""The terminal body in ROS terms (geometry_msgs/Inertia's mass, CoM, inertia about the CoM, frame):
checked against Pinocchio's inertias and the payload's own URDF numbers."""
from types import SimpleNamespace

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from conftest import MODELS
from sysid_core import load_robot
from sysid_core.dynamics.inertia import consistency_violations, from_com_inertia
from sysid_core.results.payload import (BodyInertia, body_inertia, payload_document, terminal_inertia,
                                        with_consistent_inertia)

PAYLOAD_URDF = MODELS / "urdf" / "panda_class_payload.urdf"
BARE_URDF = PAYLOAD_URDF.read_text()[:PAYLOAD_URDF.read_text().index("  <!-- payload:")] + "</robot>\n"
# the payload link of panda_class_payload.urdf, in the flange frame (its joint has no offset)
PAYLOAD_MASS, PAYLOAD_COM = 1.5, np.array([0.02, -0.01, 0.06])
PAYLOAD_INERTIA = np.array([[0.00275819, -0.000138798, 6.15778e-05], [-0.000138798, 0.00300936, 0.000321334],
                            [6.15778e-05, 0.000321334, 0.00170745]])


@pytest.fixture(scope="module")
def arms():
    truth, bare = load_robot(PAYLOAD_URDF), load_robot(BARE_URDF)
    # an identification that found the truth exactly
    result = SimpleNamespace(body_names=truth.body_names, terminal_body=truth.terminal_body,
                             body_parameters=truth.nominal_parameters)
    return truth, bare, result


@pytest.mark.parametrize("frame", [None, "flange", "payload"])
def test_identified_terminal_body_as_pinocchio_sees_it(arms, frame):
    truth, bare, result = arms
    model = pin.buildModelFromUrdf(str(PAYLOAD_URDF))
    inertia = model.inertias[model.getJointId("joint7")]  # link7 + flange + payload, joint frame = link7
    if frame is not None:
        inertia = model.frames[model.getFrameId(frame)].placement.actInv(inertia)
    identified, _ = terminal_inertia(result, truth, frame)
    assert identified.frame == (frame or "link7") and identified.physically_consistent
    assert identified.mass == pytest.approx(inertia.mass, abs=1e-12)
    np.testing.assert_allclose(identified.com, inertia.lever, atol=1e-12)
    np.testing.assert_allclose(identified.inertia, inertia.inertia, atol=1e-12)


def test_added_is_the_payload_as_its_urdf_says(arms):
    truth, bare, result = arms
    _, added = terminal_inertia(result, bare, "flange")
    assert added.mass == pytest.approx(PAYLOAD_MASS, abs=1e-12) and added.physically_consistent
    np.testing.assert_allclose(added.com, PAYLOAD_COM, atol=1e-12)
    np.testing.assert_allclose(added.inertia, PAYLOAD_INERTIA, atol=1e-12)
    block = payload_document(result, bare, "flange")
    assert block["frame"] == "flange" and block["added"]["mass"] == pytest.approx(1.5)
    assert block["added"]["inertia"]["iyz"] == pytest.approx(0.000321334, abs=1e-12)
    assert set(block["inertia"]) == {"ixx", "ixy", "ixz", "iyy", "iyz", "izz"}


def test_no_payload_has_no_centre_of_mass(arms):
    truth, _, result = arms
    _, added = terminal_inertia(result, truth)  # identified == the model: nothing added
    assert added.mass == 0 and added.com is None and added.inertia is None and not added.physically_consistent


def test_payload_frame_must_be_fixed_to_the_terminal_body(arms):
    _, bare, result = arms
    with pytest.raises(ValueError, match=r"payload frame 'link3' is not the terminal body or fixed to it; "
                                         r"choose one of \['link7', 'flange'\]"):
        terminal_inertia(result, bare, "link3")


def _compiles(mass, inertia) -> bool:
    """Whether MuJoCo's compiler takes a body of this mass and full inertia (its own check)."""
    values = " ".join(f"{inertia[i, j]:.17g}" for i, j in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)))
    xml = (f'<mujoco><worldbody><body><freejoint/><inertial pos="0 0 0" mass="{mass}" fullinertia="{values}"/>'
           '</body></worldbody></mujoco>')
    try:
        mujoco.MjModel.from_xml_string(xml)
    except ValueError:
        return False
    return True


def test_an_inconsistent_payload_inertia_becomes_the_nearest_consistent_one():
    rng = np.random.default_rng(3)
    for _ in range(20):
        # a payload inertia off by the noise of a poorly determined identification
        noise = rng.normal(scale=0.002, size=(3, 3))
        raw = body_inertia(from_com_inertia(PAYLOAD_MASS, PAYLOAD_COM, PAYLOAD_INERTIA + noise + noise.T), "flange")
        fixed = with_consistent_inertia(raw)
        assert fixed.mass == raw.mass and np.array_equal(fixed.com, raw.com)
        theta = from_com_inertia(fixed.mass, fixed.com, fixed.inertia)
        assert fixed.physically_consistent and not consistency_violations(theta)
        assert _compiles(fixed.mass, fixed.inertia)
        if raw.physically_consistent:
            assert fixed is raw
            continue
        assert not _compiles(raw.mass, raw.inertia)
        # nearest: no closer consistent inertia among random ones around the raw one
        second = (lambda i: 0.5 * np.trace(i) * np.eye(3) - i)
        distance = np.linalg.norm(second(fixed.inertia) - second(raw.inertia))
        for _ in range(200):
            candidate = fixed.inertia + rng.normal(scale=distance, size=(3, 3))
            candidate = 0.5 * (candidate + candidate.T)
            if not consistency_violations(from_com_inertia(raw.mass, raw.com, candidate)):
                assert np.linalg.norm(second(candidate) - second(raw.inertia)) >= distance - 1e-12
    massless = BodyInertia("flange", 0.0, None, None, False)
    with pytest.raises(ValueError, match="not positive"):
        with_consistent_inertia(massless)
