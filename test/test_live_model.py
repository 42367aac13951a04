"""The identified arm the online wing evaluates (sysid_core.online.live_model) is the
identification's own: built from the result in memory or read back from what an identification
wrote (params.json and the updated model), its torque equals ``identify.predict_torque`` for a real
arm's friction laws and for a MuJoCo simulation's physics; the payload it reports is params.json's;
a file that is no identification of the arm is refused."""
import json

import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core.dynamics.joint_physics import MujocoPhysics
from sysid_core.dynamics.model import load_robot
from sysid_core.errors import DataError
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify, on_hardware, predict_torque
from sysid_core.online.live_model import added_payload, live_model, load_live_model, nominal_live_model
from sysid_core.results.export import params_document, write_params_json
from sysid_core.results.urdf_export import write_updated_robot
from sysid_core.simulation import simulate, simulation_timing

RATE = 500.0


@pytest.fixture(scope="module")
def arm():
    robot = load_robot(ROBOTS / "openarm_class.xml")
    truth = load_robot(ROBOTS / "openarm_class_payload.xml")
    run = simulate(truth.model, multisine(robot.joint_range, 8.0, RATE, seed=1, max_velocity=1.0), nominal=robot.model,
                   seed=0)
    return robot, truth, run.recording


def _states(robot, count=200):
    rng = np.random.default_rng(0)
    q = robot.joint_range.mean(axis=1) + 0.3 * rng.standard_normal((count, robot.n_joints))
    return q, rng.standard_normal((count, robot.n_joints)), 3.0 * rng.standard_normal((count, robot.n_joints))


@pytest.mark.parametrize("case", ["coulomb_viscous", "stribeck_tanh", "mujoco"])
def test_the_torque_is_the_identifications_from_memory_and_from_its_files(arm, tmp_path, case):
    robot, truth, recording = arm
    if case == "mujoco":
        physics = MujocoPhysics.simulation(truth.model, simulation_timing(truth.model, RATE).timestep)
        result = identify(robot, recording, IdentificationConfig(physics=physics))
        expected = result
    else:
        result = identify(robot, recording, IdentificationConfig(friction_models=case))
        expected = on_hardware(robot, result)
    write_params_json(tmp_path / "params.json", params_document(result, robot, "simulation"))
    write_updated_robot(tmp_path, robot, result)
    q, dq, ddq = _states(robot)
    reference = predict_torque(robot, expected, q, dq, ddq)
    for model in (live_model(robot, result), load_live_model(tmp_path / "params.json")):
        assert (model.physics is not None) == (case == "mujoco")
        np.testing.assert_allclose(model.torque(q, dq, ddq), reference, rtol=0, atol=1e-12 * np.abs(reference).max())
        np.testing.assert_allclose(model.gravity(q), predict_torque(robot, expected, q, 0 * q, 0 * q),
                                   atol=1e-9)


def test_the_payload_is_params_jsons(arm, tmp_path):
    """The tracked body's payload (added_payload) of the identified terminal body is params.json's
    ``payload.added``, in the payload frame; the model's own link comes back from the file."""
    robot, _, recording = arm
    result = identify(robot, recording, IdentificationConfig())
    document = params_document(result, robot, "simulation", payload_frame="flange")
    write_params_json(tmp_path / "params.json", document)
    write_updated_robot(tmp_path, robot, result)
    model = load_live_model(tmp_path / "params.json")
    np.testing.assert_allclose(model.bare_terminal, robot.nominal_parameters[robot.terminal_index], atol=1e-12)
    body = added_payload(model, model.parameters[robot.terminal_index], "flange")
    added = document["payload"]["added"]
    assert body.frame == "flange"
    assert body.mass == pytest.approx(added["mass"], abs=1e-12)
    np.testing.assert_allclose(body.com, added["center_of_mass"], atol=1e-12)
    # a nominal model's terminal body carries no payload
    assert added_payload(nominal_live_model(robot), robot.nominal_parameters[robot.terminal_index]).mass == 0.0


@pytest.mark.parametrize("change, message", [
    (lambda doc: doc.pop("bodies"), "no params.json"),
    (lambda doc: doc["bodies"].pop(), "lacks"),
    (lambda doc: doc["joints"][0].update(armature=None), "armature must be a finite number"),
    (lambda doc: doc["friction_models"]["joint1"].update(model="nonsense"), "friction law of joint1"),
])
def test_a_file_that_is_no_identification_of_the_arm_is_refused(arm, tmp_path, change, message):
    robot, _, recording = arm
    result = identify(robot, recording, IdentificationConfig())
    document = params_document(result, robot, "simulation")
    write_updated_robot(tmp_path, robot, result)
    change(document)
    (tmp_path / "params.json").write_text(json.dumps(document))
    with pytest.raises(DataError, match=message):
        load_live_model(tmp_path / "params.json")
