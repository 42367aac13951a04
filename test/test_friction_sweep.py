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


# --- the sweep's friction fixed in the main identification (--friction-from) -------------------

PAYLOAD = ROBOTS / "openarm_class_payload.xml"


def _payload_errors(result, truth):
    """(relative mass error, centre-of-mass error m) of the terminal body against the truth model's."""
    got, true = result.terminal_parameters, truth.nominal_parameters[truth.terminal_index]
    return abs(got[0] / true[0] - 1), float(np.linalg.norm(got[1:4] / got[0] - true[1:4] / true[0]))


def test_friction_fixed_from_the_sweep_is_the_sweeps_and_the_payload_is_right(openarm, tmp_path):
    """A plant with a Stribeck peak on the proximal joints, which the default coulomb_viscous law
    cannot follow: swept, its laws written and read back, then fixed in the identification of a
    multisine. The result's friction is the file's, and the payload and the held-out torque are
    at least as good as with friction identified under the default law."""
    from sysid_core.dynamics.joint_physics import MujocoPhysics
    from sysid_core.excitation.multisine import multisine
    from sysid_core.identification.identify import IdentificationConfig, identify
    from sysid_core.identification.known_friction import from_sweep, identify_with_known_friction
    from sysid_core.results.friction_report import read_friction_sweep, write_friction_sweep
    from sysid_core.simulation import simulation_timing

    truth = load_robot(PAYLOAD)
    extra = StribeckFriction(excess=np.array([0.3, 0.3, 0.15, 0.15, 0.0, 0.0, 0.0]), velocity=0.1)

    def run(plan, seed):
        return simulate(truth.model, plan, nominal=openarm.model, joint_friction=extra, seed=seed,
                        joint_names=truth.joint_names).recording

    sweep = friction_sweep(np.clip(np.zeros(7), *openarm.joint_range.T), openarm.joint_range, 500.0, max_velocity=1.0)
    points = friction_points(run(sweep.trajectory, 0), sweep.segments)
    write_friction_sweep(tmp_path, points, [fit_friction_curves(p) for p in points], plots=False)
    swept = read_friction_sweep(tmp_path / "friction_sweep.json")
    known = from_sweep(swept, openarm.joint_names, "sweep")
    # the points choose a Stribeck law where the plant has a peak, and the chosen curve is the
    # plant's friction (MuJoCo's friction loss and damping, and the peak) over the speeds swept,
    # within 0.03 N m (5 % of joint1's level: the points themselves are off by up to 0.017 N m
    # there, the tracking lag under gravity not quite the same both ways)
    for j, (f, swept_joint) in enumerate(zip(known.frictions, swept)):
        assert (f.model.name in ("stribeck", "stribeck_tanh")) == (j < 4), f.model.name
        v = np.geomspace(np.abs(swept_joint.velocity).min(), 1.0, 50)
        plant = truth.frictionloss[j] + truth.damping[j] * v + extra(np.outer(v, np.ones(7)))[:, j]
        assert np.max(np.abs(f.torque(v) - plant)) < 0.03, (j, f.torque(v) - plant)

    rate = 500.0
    recording = run(multisine(openarm.joint_range, 8.0, rate, seed=3, max_velocity=1.0), 1)
    validation = run(multisine(openarm.joint_range, 5.0, rate, seed=4, max_velocity=1.0), 2)
    config = IdentificationConfig(physics=MujocoPhysics.simulation(truth.model, simulation_timing(truth.model, rate)
                                                                   .timestep))
    fixed = identify_with_known_friction(openarm, recording, config, known, validation)
    free = identify(openarm, recording, config, validation=validation)

    # the friction reported is the file's, parameter for parameter
    document = json.loads((tmp_path / "friction_sweep.json").read_text())
    for f, entry in zip(fixed.friction, document["joints"]):
        assert f.model.name == entry["chosen"]
        assert f.parameters == pytest.approx(entry["laws"][entry["chosen"]]["parameters"], rel=1e-12)
    assert fixed.coulomb == pytest.approx([f.coulomb_level for f in known.frictions])
    assert not any(name.endswith((".coulomb", ".viscous")) for name in fixed.column_names)
    assert fixed.verdict.level == "good", fixed.verdict.reasons

    # the payload (0.25 kg link + 0.5 kg) against the truth model: mass within 0.5 %, centre of
    # mass within 0.5 mm, and no worse than with friction identified (up to 0.05 % and 0.05 mm)
    mass, com = _payload_errors(fixed, truth)
    mass_free, com_free = _payload_errors(free, truth)
    assert mass < 0.005 and com < 0.5e-3, (mass, com)
    assert mass <= mass_free + 5e-4 and com <= com_free + 0.05e-3, (mass, com, mass_free, com_free)
    # the held-out torque, measured, against rigid body + the sweep's friction: the Stribeck peak
    # the default law misses is explained
    assert fixed.metrics.validation_relative_rmse < free.metrics.validation_relative_rmse


def _sweep_file(tmp_path, truth_model):
    out = tmp_path / "sweep"
    assert main([str(OPENARM), "--truth-model", str(truth_model), "--excitation", "friction-sweep",
                 "--max-velocity", "1", "--sample-rate", "250", "--no-plots", "--output-dir", str(out)]) == 0
    return out / "friction_sweep.json"


def test_sysid_identify_friction_from_reports_the_sweeps_friction(tmp_path, capsys):
    """End to end: an arm whose joints have 1.5 times the model's friction loss and 1.6 times its
    damping, with a 0.5 kg payload; the sweep's friction fixed, the payload identified."""
    truth_model = tmp_path / "truth.xml"
    truth_model.write_text(_scaled_friction(PAYLOAD.read_text(), 1.5, 1.6))
    truth, model = load_robot(truth_model), load_robot(PAYLOAD)
    assert np.allclose(truth.frictionloss, 1.5 * model.frictionloss) and np.allclose(truth.damping, 1.6 * model.damping)
    sweep = _sweep_file(tmp_path, truth_model)
    out = tmp_path / "fixed"
    status = main([str(OPENARM), "--truth-model", str(truth_model), "--duration", "8", "--max-velocity", "1",
                   "--seed", "2", "--no-plots", "--friction-from", str(sweep), "--output-dir", str(out)])
    assert status == 0, capsys.readouterr().err
    params = json.loads((out / "params.json").read_text())
    document = json.loads(sweep.read_text())
    for entry in document["joints"]:
        reported = params["friction_models"][entry["joint"]]
        law = entry["laws"][entry["chosen"]]
        assert reported["model"] == entry["chosen"]
        assert reported["parameters"] == pytest.approx(law["parameters"], rel=1e-12)
        assert reported["std"] == law["std"] and "friction sweep" in reported["source"]
    assert params["friction_from"]["mode"] == "fix" and params["friction_from"]["file"] == str(sweep)
    # the sweep's Coulomb levels are the truth's friction loss (1.5 times the model's), within 10 %
    # (the light wrist joints' sweeps keep only their faster points)
    for joint in params["joints"]:
        k = truth.joint_names.index(joint["name"])
        assert abs(joint["coulomb_friction"] / truth.frictionloss[k] - 1) < 0.1, joint
    assert abs(params["error"]["mass_percent"]) < 1.0 and params["error"]["com_error_mm"] < 1.0
    assert params["verdict"] != "failed"


def _scaled_friction(text: str, loss: float, damping: float) -> str:
    """The MJCF ``text`` with every joint's frictionloss and damping multiplied."""
    import re

    def scale(match):
        return f'damping="{float(match.group(1)) * damping:g}" frictionloss="{float(match.group(2)) * loss:g}"'
    out, count = re.subn(r'damping="([\d.]+)" frictionloss="([\d.]+)"', scale, text)
    assert count == 7
    return out


def test_sysid_identify_refuses_a_friction_file_that_does_not_fit(tmp_path, capsys):
    sweep = _sweep_file(tmp_path, PAYLOAD)
    document = json.loads(sweep.read_text())

    def refused(name, change, extra=(), expect=""):
        edited = json.loads(json.dumps(document))
        change(edited)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(edited))
        status = main([str(OPENARM), "--duration", "2", "--source", "ideal", "--no-plots", "--friction-from", str(path),
                       "--output-dir", str(tmp_path / "out")] + list(extra))
        err = capsys.readouterr().err
        assert status == 2 and err.startswith("error:") and "Traceback" not in err, err
        assert expect in err, err
        assert not (tmp_path / "out" / "params.json").exists()

    def rename(d):
        for j in d["joints"]:
            j["joint"] = "other_" + j["joint"]

    refused("other_arm", rename, expect="a sweep of another arm?")
    refused("joint_missing", lambda d: d["joints"].pop(3), expect="no friction for the model's joints ['joint4']")
    refused("unknown_law", lambda d: d["joints"][0]["laws"].update(lugre={"parameters": {"sigma0": 1.0}, "rmse": 0.0}),
            expect="unknown friction law 'lugre'")
    refused("wrong_parameters", lambda d: d["joints"][0]["laws"]["coulomb_viscous"]["parameters"].pop("viscous"),
            expect="missing ['viscous']")
    refused("not_a_number", lambda d: d["joints"][1]["laws"]["coulomb_viscous"]["parameters"].update(coulomb="x"),
            expect="coulomb must be a finite number")
    refused("no_joints", lambda d: d.pop("joints"), expect="not a friction sweep")
    refused("no_chosen", lambda d: d["joints"][2].update(chosen=None), expect="no chosen friction law")
    # a law the sweep did not fit, asked for by name
    refused("not_fitted", lambda d: d["joints"][0]["laws"].update(stribeck={"not_fitted": "too few points"}),
            ["--friction-model", "stribeck"], expect="'stribeck' not fitted: too few points")
    # options that contradict a friction fixed from a sweep
    refused("no_friction", lambda d: None, ["--no-friction"], expect="not with --no-friction")
    refused("residual", lambda d: None, ["--residual", "gmm"], expect="not with --residual gmm")
