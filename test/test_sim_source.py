"""The sim source on real published arms (test/models/real_arms, see test/arm_corpus.py).

Every corpus arm is simulated as published, unedited, with default options: MuJoCo's 2 ms
timestep, servo actuators, gravcomp where the file has it. Oracles: a copy of each file with its
actuators and gravcomp deleted by hand; the refusal messages checked against the plan's own
figures; sysid-identify's exit status.
"""
import dataclasses
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from arm_corpus import ARMS, arm, with_payload
from sysid_core.cli import main
from sysid_core.dynamics.model import load_robot
from sysid_core.errors import TrackingError
from sysid_core.excitation.design import TORQUE_USAGE, slow_to_torque_limits
from sysid_core.excitation.multisine import multisine
from sysid_core.excitation.trajectory import Trajectory, save_trajectory
from sysid_core.simulation import (TRACKING_TOLERANCE_FLOOR, MeasurementNoise, ideal_recording, simulate,
                                   simulate_tracking, simulation_timing)

IDS = [a.name for a in ARMS]
RATE = 1000.0


def _plan(robot, duration=1.0, seed=0, max_velocity=2.0):
    """The CLI's default excitation, short: a multisine slowed to the file's torque limits."""
    return slow_to_torque_limits(lambda v: multisine(robot.joint_range, duration, RATE, seed=seed, max_velocity=v),
                                 robot, max_velocity)[0]


def _without_actuators_and_gravcomp(path) -> mujoco.MjModel:
    """The file at ``path`` with its actuators (and what refers to them) and gravcomp deleted by hand."""
    root = ET.parse(path).getroot()
    for section in root.findall("actuator"):
        root.remove(section)
    for key in root.iter("key"):
        key.attrib.pop("ctrl", None)
    for element in root.iter():
        element.attrib.pop("gravcomp", None)
        element.attrib.pop("actuatorgravcomp", None)
    bare = mujoco.MjModel.from_xml_string(ET.tostring(root, encoding="unicode"))
    assert bare.nu == 0 and not np.any(bare.body_gravcomp)
    return bare


@pytest.mark.parametrize("corpus_arm", ARMS, ids=IDS)
def test_the_sim_source_runs_on_every_arm_as_published(corpus_arm):
    robot = load_robot(corpus_arm.path)
    # every corpus arm ships MuJoCo's 2 ms: at 1 kHz the plant steps 1 ms, once per sample
    timing = simulation_timing(robot.model, RATE)
    assert robot.model.opt.timestep == corpus_arm.timestep == 0.002
    assert (timing.timestep, timing.substeps, timing.changed) == (0.001, 1, True)
    plan = _plan(robot)
    # The controller knows the arm: only the torque held over each sample and the simulator's
    # implicit damping (an extra d * timestep of inertia the controller does not know) separate
    # the motion from the plan: 0.06 mrad on most arms, 2 mrad where 100-200 N m s/rad of damping
    # meets wrists without armature (z1, doosan_m1013). Bound: half the refusal floor.
    known = simulate(robot.model, plan, noise=MeasurementNoise.off()).quality
    assert np.all(known.max_error < 0.5 * TRACKING_TOLERANCE_FLOOR), known.notes()[0]
    # The arm carries a payload the controller does not know, as a real arm would; noise on.
    truth = mujoco.MjModel.from_xml_string(with_payload(corpus_arm.path).xml)
    run = simulate(truth, plan, nominal=robot.model, seed=0)
    assert run.recording.n_samples == len(plan.time)
    assert np.all(run.quality.max_error < run.quality.tolerance) and np.all(run.quality.torque_usage <= 1.0)
    # a healthy run says nothing against itself in the verdict
    assert run.recording.quality_notes == (), run.recording.quality_notes


def test_a_run_near_its_refusal_is_doubtful():
    """Accepted, but with little room: the note travels with the recording into the verdict."""
    ur5e = load_robot(arm("ur5e").path)
    quality = simulate(ur5e.model, _plan(ur5e, duration=0.5), noise=MeasurementNoise.off()).quality
    assert quality.quality_notes() == ()
    lagging = quality.max_error.copy()
    lagging[2] = 0.6 * quality.tolerance[2]       # 60 % of the refusal threshold
    notes = dataclasses.replace(quality, max_error=lagging).quality_notes()
    assert [n.level for n in notes] == ["doubtful"]
    assert f"joint '{quality.joint_names[2]}'" in notes[0].message and "60%" in notes[0].message
    assert dataclasses.replace(quality, max_error=0.49 * quality.tolerance).quality_notes() == ()


@pytest.mark.parametrize("corpus_arm", ARMS, ids=IDS)
def test_published_actuators_and_gravcomp_have_no_effect(corpus_arm):
    published = mujoco.MjModel.from_xml_path(str(corpus_arm.path))
    bare = _without_actuators_and_gravcomp(corpus_arm.path)
    assert published.nu > 0
    plan = _plan(load_robot(corpus_arm.path), duration=0.5)
    ours = simulate(published, plan, noise=MeasurementNoise.off()).recording
    oracle = simulate(bare, plan, noise=MeasurementNoise.off()).recording
    for name in ("q", "dq", "tau"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(oracle, name))
    np.testing.assert_array_equal(ideal_recording(published, plan).tau, ideal_recording(bare, plan).tau)


def test_a_plan_outside_reach_is_refused():
    gen3 = load_robot(arm("gen3").path)
    plan = _plan(gen3)
    j = gen3.joint_names.index("joint_2")  # limited to +-2.24 rad
    q = plan.q.copy()
    q[250:260, j] = 2.5
    with pytest.raises(TrackingError, match=r"joint 'joint_2' to 2\.5 at t=0\.250 s, 0\.26 beyond its upper limit"):
        simulate(gen3.model, Trajectory(plan.time, q, plan.dq, plan.ddq))


def test_absurd_gains_are_refused():
    iiwa = load_robot(arm("iiwa14").path)
    plan = _plan(iiwa)
    feedforward = iiwa.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    with pytest.raises(TrackingError, match=r"simulation diverged at joint '\w+' between t=0\.\d{4} s") as info:
        simulate_tracking(iiwa.model, plan, feedforward, kp=1e6, kd=1e3)
    assert info.value.joint in iiwa.joint_names and info.value.time < 0.1


def test_a_plan_beyond_the_actuators_is_refused():
    # UR10e as published: 350 and 200 N m s/rad of damping against 330 and 150 N m force ranges.
    # The multisine at 2 rad/s (not slowed to the limits) needs several times what the elbow has.
    ur10e = load_robot(arm("ur10e").path)
    plan = multisine(ur10e.joint_range, 1.0, RATE, seed=0, max_velocity=2.0)
    needed = np.abs(ur10e.inverse_dynamics(plan.q, plan.dq, plan.ddq)).max(axis=0)
    with pytest.raises(TrackingError, match=r"joint '\w+' needed -?\d+\.?\d* N m at t=\d\.\d{3} s, \d+% of its "
                                            r"\d+ N m actuator limit") as info:
        simulate(ur10e.model, plan)
    j = ur10e.joint_names.index(info.value.joint)
    assert info.value.size == pytest.approx(needed[j], rel=0.05)
    # the default excitation is slowed until the nominal torques fit
    slowed = _plan(ur10e)
    assert np.abs(ur10e.inverse_dynamics(slowed.q, slowed.dq, slowed.ddq)).max() <= TORQUE_USAGE * 330.0


def test_cli_exits_3_on_a_run_the_arm_cannot_make(tmp_path, capsys):
    ur10e = load_robot(arm("ur10e").path)
    fast = tmp_path / "fast.json"
    save_trajectory(fast, multisine(ur10e.joint_range, 2.0, RATE, seed=0, max_velocity=2.0), ur10e.joint_names)
    status = main([str(arm("ur10e").path), "--trajectory", str(fast), "--no-plots", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 3
    assert err.startswith("error: joint '") and "N m actuator limit" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "params.json").exists()
