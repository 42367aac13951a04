"""Identification on what users record: real arms whose model files know neither their joint
friction nor their rotors' inertia, tracked by PD + feed-forward, with noise, delay and (some)
quantised feedback.

Oracles: the truth each recording was simulated from (test/hardware_corpus.py: the welded
payload's parameters computed from the numbers written, the friction law and armature the plant
applied), and, for the estimator, WLS itself where it is already physically consistent.
"""
import json
import subprocess
from functools import lru_cache

import mujoco
import numpy as np
import pytest

from arm_corpus import ARMS, BY_NAME, with_payload
from conftest import console_script, source_environment
from hardware_corpus import CONTROLLERS, MATCHED_LAW, errors, hardware_recording
from sysid_core import load_robot
from sysid_core.dynamics.inertia import consistency_violations
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.identification.recording_files import read_recordings, write_csv
from sysid_core.simulation import MeasurementNoise, StribeckFriction, default_gains, ideal_recording, simulate_tracking
from test_identifier_node import call, executor, make_identifier, nodes, plain_node, unique  # noqa: F401

NAMES = [arm.name for arm in ARMS]
# A Damiao arm's feedback fields: the light and the small medium arms such motors drive
QUANTISED = ("z1", "piper", "so_arm100", "wx250s", "vx300s", "arx_l5")


@lru_cache(maxsize=None)
def _cases(name: str, directory: str, quantised: bool = False) -> tuple:
    """The arm's hardware-like recording under each controller (CONTROLLERS order)."""
    return tuple(hardware_recording(name, directory, controller, quantised=quantised) for controller in CONTROLLERS)


@pytest.fixture(scope="module")
def corpus_directory(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hardware"))


def _identify(case, scope, friction_models="coulomb_viscous", estimator="consistent"):
    robot = case.robot()
    train, validation = case.split()
    config = IdentificationConfig(scope=scope, friction_models=friction_models, estimator=estimator)
    return robot, identify(robot, train, config, validation=validation)


def _scopes():
    for name in NAMES:
        for scope in ("terminal", "full"):
            # an 11 g payload on links of 20-64 g: its mass shares base parameters with their first
            # moments, which the model holds to 10 % (consistency.LINK_ACCURACY); 4-5 % off
            marks = [pytest.mark.xfail(strict=True, reason="the full scope reads an 11 g payload 4-5 % heavy")] \
                if (name, scope) == ("koch_low_cost", "full") else []
            yield pytest.param(name, scope, marks=marks, id=f"{name}-{scope}")


@pytest.mark.parametrize("name, scope", list(_scopes()))
def test_friction_armature_and_payload_of_every_arm(corpus_directory, name, scope):
    """Every corpus arm under both controllers, identified with the friction law of the plant's
    form: each joint's Coulomb level and viscous coefficient within 10 % + 0.03, its armature
    within 15 % wherever it is a base parameter of its own, the payload within 3 % and 5 mm, and
    a good verdict."""
    for case in _cases(name, corpus_directory):
        robot, result = _identify(case, scope, MATCHED_LAW[case.stribeck])
        assert errors(case, robot, result).failures(case) == [], case.controller
        assert result.verdict.level == "good", (case.controller, result.verdict.reasons)


@pytest.mark.parametrize("name", NAMES)
def test_default_options_judge_good_data_good(corpus_directory, name):
    """The default options (coulomb_viscous friction, whatever the plant's law) never call a good
    recording failed, in either scope, and find the payload in the terminal scope."""
    for case in _cases(name, corpus_directory):
        for scope in ("terminal", "full"):
            robot, result = _identify(case, scope)
            assert result.verdict.level == "good", (case.controller, scope, result.verdict.reasons)
            if scope == "terminal":
                found = errors(case, robot, result)
                assert abs(found.mass) < 0.03 and found.com_mm < 5.0, (case.controller, found.mass, found.com_mm)


@pytest.mark.parametrize("name", QUANTISED)
def test_quantised_damiao_feedback(corpus_directory, name):
    """The same arms reporting through Damiao MIT feedback fields (16-bit position, 12-bit
    velocity and torque over the motor's range): the terminal scope keeps every tolerance."""
    for case in _cases(name, corpus_directory, quantised=True):
        assert np.any(case.noise.dq_resolution > 0)
        robot, result = _identify(case, "terminal", MATCHED_LAW[case.stribeck])
        assert errors(case, robot, result).failures(case) == [], case.controller
        assert result.verdict.level == "good", (case.controller, result.verdict.reasons)


def test_consistent_equals_wls_where_wls_is_already_consistent(corpus_directory):
    """Where the unconstrained estimate is a real body with non-negative friction and armature,
    the consistent estimator returns it: the model's zeros pull on nothing the data determine."""
    checked = []
    for name in NAMES:
        case = _cases(name, corpus_directory)[0]
        robot, free = _identify(case, "terminal", estimator="wls")
        own = free.terminal_parameters - robot.welded_parameters[robot.terminal_index]
        if consistency_violations(own) or np.any(free.standard[10:] <= 0):
            continue
        _, held = _identify(case, "terminal")
        np.testing.assert_allclose(held.standard, free.standard, rtol=1e-6, atol=1e-9 * np.abs(free.standard).max())
        assert held.verdict.level == "good"
        checked.append(name)
    assert len(checked) >= len(NAMES) // 2, checked


def _gen3_recording(duration: float):
    """The user's case: a Kinova Gen3 whose file has no friction and no armature, with a 0.83 kg
    payload, Coulomb 0.3 / 0.1 N m (joints 1-4 / 5-7), viscous 0.1 N m s/rad, armature 0.04 /
    0.012 kg m^2, tracking a multisine under joint PD with the nominal feed-forward, default noise."""
    payload = with_payload(BY_NAME["gen3"].path, mass=0.83)
    truth = mujoco.MjModel.from_xml_string(payload.xml)
    big = np.arange(truth.nv) < 4
    truth.dof_armature[:] = np.where(big, 0.04, 0.012)
    coulomb = np.where(big, 0.3, 0.1)
    robot = load_robot(BY_NAME["gen3"].path)
    plan = multisine(robot.joint_range, duration, 1000.0, seed=0, max_velocity=2.0)
    kp, kd = default_gains(truth, 8.0)
    recording = simulate_tracking(truth, plan, ideal_recording(robot.model, plan).tau, kp, kd, MeasurementNoise(),
                                  seed=1, joint_names=robot.joint_names,
                                  joint_friction=StribeckFriction(0.0, 1.0, coulomb=coulomb, viscous=0.1))
    return robot, payload.parameters, coulomb, truth.dof_armature.copy(), recording


@pytest.mark.parametrize("scope", ["terminal", "full"])
def test_a_gen3_recording_through_sysid_identify_with_default_options(tmp_path, scope):
    """60 s at 1 kHz as a CSV, ``sysid-identify MODEL --recording train.csv --validation-fraction
    0.25`` and nothing else: friction within 10 %, armature within 15 %, the payload within 3 % and
    5 mm, verdict good."""
    robot, payload, coulomb, armature, recording = _gen3_recording(60.0)
    write_csv(tmp_path / "train.csv", recording)
    done = subprocess.run([str(console_script("sysid-identify")), str(BY_NAME["gen3"].path), "--recording",
                           str(tmp_path / "train.csv"), "--validation-fraction", "0.25", "--scope", scope,
                           "--no-plots", "--output-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env=source_environment())
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "out" / "params.json").read_text())
    assert doc["verdict"] == "good", doc["verdict_reasons"]
    joints = doc["joints"]
    np.testing.assert_allclose([j["coulomb_friction"] for j in joints], coulomb, rtol=0.1)
    np.testing.assert_allclose([j["viscous_friction"] for j in joints], 0.1, rtol=0.1)
    separable = [k for k, j in enumerate(joints) if not any(e.startswith(f"{j['name']}.armature:")
                                                             for e in doc["lumped"])]
    assert len(separable) >= 5
    np.testing.assert_allclose(np.array([j["armature"] for j in joints])[separable], armature[separable], rtol=0.15)
    added = doc["payload"]["added"]
    assert added["mass"] == pytest.approx(payload[0], rel=0.03)
    assert 1000 * np.linalg.norm(np.array(added["center_of_mass"]) - payload[1:4] / payload[0]) < 5.0


def test_csv_and_bag_identify_as_the_recording_and_the_node_identifies_the_bag(corpus_directory, tmp_path, executor,
                                                                             nodes):
    """A hardware-like recording written as CSV and as an MCAP bag reads back to the same
    identification; the identifier node, given the bag and the friction law of the plant's form,
    answers with the same payload as identify() and a good verdict, every tolerance kept."""
    case = _cases("fr3", corpus_directory)[0]
    robot = case.robot()
    config = IdentificationConfig()
    direct = identify(robot, case.recording, config)
    for path in (case.write_csv(tmp_path / "run.csv"), case.write_rosbag(tmp_path / "bag")):
        loaded = read_recordings([path], robot.joint_names)
        assert loaded.recording.n_samples == case.recording.n_samples and not loaded.dropped
        again = identify(robot, loaded.recording, config)
        np.testing.assert_allclose(again.standard, direct.standard, rtol=1e-6, atol=1e-12)

    identifier = make_identifier(nodes, model=str(case.nominal_path), recording=str(tmp_path / "bag"),
                                 output_dir=str(tmp_path / "node"), plots=False,
                                 friction_model=MATCHED_LAW[case.stribeck])
    answer = json.loads(call(executor, nodes(plain_node, unique("client")), "/sysid/identify", timeout=120.0).message)
    doc = json.loads((tmp_path / "node" / "params.json").read_text())
    assert doc["verdict"] == "good", doc["verdict_reasons"]
    loaded = read_recordings([tmp_path / "bag"], robot.joint_names).recording
    expected = identify(robot, loaded, identifier._config(robot, loaded))
    assert answer["mass"] == pytest.approx(expected.terminal_parameters[0], rel=1e-9)
    added = doc["payload"]["added"]
    assert added["mass"] == pytest.approx(case.payload[0], rel=0.03)
    assert 1000 * np.linalg.norm(np.array(added["center_of_mass"]) - case.payload[1:4] / case.payload[0]) < 5.0
    assert doc["friction_models"]["fr3_joint1"]["model"] == MATCHED_LAW[case.stribeck]
    np.testing.assert_allclose([j["coulomb_friction"] for j in doc["joints"]], case.coulomb, rtol=0.1, atol=0.03)
    np.testing.assert_allclose([j["viscous_friction"] for j in doc["joints"]], case.viscous, rtol=0.1, atol=0.03)
