"""The friction sweep: its plan against its own definition, the curves it measures against the
friction the simulated arm was given, and the console script's outputs."""
import json

import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core.cli import main
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.friction_sweep import friction_sweep
from sysid_core.identification.friction_curve import FrictionCurve, fit_friction_curves, friction_points
from sysid_core.simulation import StribeckFriction, simulate

OPENARM = ROBOTS / "openarm_class.xml"


@pytest.fixture(scope="module")
def openarm():
    return load_robot(OPENARM)


def test_each_cruise_is_one_joint_at_one_speed_over_the_same_positions_both_ways(openarm):
    rate = 500.0
    sweep = friction_sweep(np.zeros(7), openarm.joint_range, rate, joints=[1, 3], max_velocity=0.8, speeds=5)
    plan = sweep.trajectory
    # positions and velocities are each other's integral and derivative (trapezoid, per sample)
    assert np.allclose(np.diff(plan.q, axis=0), 0.5 * (plan.dq[1:] + plan.dq[:-1]) / rate, atol=2e-6)
    assert np.allclose(np.diff(plan.dq, axis=0), 0.5 * (plan.ddq[1:] + plan.ddq[:-1]) / rate, atol=2e-4)
    lo, hi = openarm.joint_range.T
    # within the limits from where it starts (joint4 at its lower one), then 0.1 rad inside them
    assert np.all(plan.q >= lo) and np.all(plan.q <= hi)
    after = plan.q[sweep.segments[0].start:]
    assert np.all(after >= lo + 0.1 - 1e-9) and np.all(after <= hi - 0.1 + 1e-9)
    assert np.allclose(plan.dq[[0, -1]], 0) and np.allclose(plan.ddq[[0, -1]], 0)
    assert np.max(np.abs(plan.dq)) <= 0.8 + 1e-9  # the repositioning moves too
    by_speed = {}
    for s in sweep.segments:
        rows = slice(s.start, s.stop)
        assert np.allclose(plan.dq[rows, s.joint], s.velocity) and np.allclose(plan.ddq[rows], 0)
        others = [j for j in range(7) if j != s.joint]
        assert np.allclose(plan.dq[rows][:, others], 0)
        by_speed.setdefault((s.joint, abs(s.velocity)), []).append(np.sort(plan.q[rows, s.joint]))
    assert {j for j, _ in by_speed} == {1, 3} and all(len(v) == 2 for v in by_speed.values())
    for (_, speed), (up, down) in by_speed.items():  # the same positions, to the sample grid
        assert up.size == down.size and np.allclose(up, down, rtol=0, atol=speed / rate + 1e-9)


def test_the_measured_curve_is_the_arms_friction(openarm):
    extra = StribeckFriction(excess=0.3, velocity=0.1)
    sweep = friction_sweep(np.zeros(7), openarm.joint_range, 500.0, joints=[1], max_velocity=1.0, speeds=8)
    run = simulate(openarm.model, sweep.trajectory, joint_friction=extra, seed=0)
    (points,) = friction_points(run.recording, sweep.segments)
    v = points.velocity
    # the truth: MuJoCo's friction loss and damping of the joint, and the plant's Stribeck excess
    truth = openarm.frictionloss[1] * np.sign(v) + openarm.damping[1] * v + extra(v)
    assert points.odd and v.size >= 12
    assert np.all(np.abs(points.torque - truth) < 0.01), (points.torque, truth)
    curves = fit_friction_curves(points)
    stribeck = curves["stribeck_tanh"]
    assert isinstance(stribeck, FrictionCurve) and stribeck.rmse < 0.01
    p = stribeck.friction.parameters
    assert abs(p["stribeck"] / 0.3 - 1) < 0.1 and abs(p["stribeck_velocity"] / 0.1 - 1) < 0.1
    assert abs(p["coulomb"] - openarm.frictionloss[1]) < 0.02 and abs(p["viscous"] - openarm.damping[1]) < 0.02
    # the Coulomb-viscous law misses the peak the sweep shows
    assert curves["coulomb_viscous"].rmse > 5 * stribeck.rmse


def test_sysid_identify_friction_sweep_writes_its_curves(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(OPENARM), "--excitation", "friction-sweep", "--max-velocity", "0.5", "--sample-rate", "250",
                 "--output-dir", str(out)]) == 0
    document = json.loads((out / "friction_sweep.json").read_text())
    assert [j["joint"] for j in document["joints"]] == list(load_robot(OPENARM).joint_names)
    for joint in document["joints"]:
        assert len(joint["velocity"]) >= 8 and "coulomb_viscous" in joint["laws"]
    assert (out / "friction_sweep.png").stat().st_size > 0
    assert main([str(OPENARM), "--excitation", "friction-sweep", "--duration", "10", "--output-dir", str(out)]) == 2
    assert "--duration: not with --excitation friction-sweep" in capsys.readouterr().err
