"""Nonlinear joint friction models: formulas, separable least squares, identification, acceptance.

Oracles are independent of the code under test: hand-computed torques, synthetic data made
with known parameters, and a MuJoCo plant whose Stribeck friction is written in simulation.py
(StribeckFriction), not with the identification's feature functions.
"""
import json
import math
import re

import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core import load_robot
from sysid_core.cli import main
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.estimation import estimate
from sysid_core.dynamics.friction import (FRICTION_MODELS, FrictionModel, FrictionSelection, JointFriction, JointModel,
                                 fit_nonlinear, friction_regressor)
from sysid_core.identification.identify import IdentificationConfig, column_names, identify, predict_torque
from sysid_core.identification.recording import Recording
from sysid_core.simulation import (MeasurementNoise, StribeckFriction, default_gains, ideal_recording,
                                   simulate_tracking)


def torque(name, linear, nonlinear, dq, **kwargs):
    return JointFriction(FrictionModel(name, **kwargs), tuple(linear), tuple(nonlinear)).torque(np.array(dq, float))


# --------------------------------------------------------------------------- formulas, by hand

def test_coulomb_viscous_and_asymmetric_by_hand():
    np.testing.assert_allclose(torque("coulomb_viscous", (0.3, 0.1), (), [-2.0, 0.0, 0.5]),
                               [-0.3 - 0.2, 0.0, 0.3 + 0.05])
    # f+ 0.4, f- 0.25 (both opposing motion), viscous 0.1
    np.testing.assert_allclose(torque("asymmetric", (0.4, 0.25, 0.1), (), [0.5, -0.5, 0.0]),
                               [0.45, -0.30, 0.0])


def test_tanh_by_hand():
    # 0.5 tanh(0.05 / 0.05) + 0.2 * 0.05; tanh(1) = 0.7615941559557649
    np.testing.assert_allclose(torque("tanh", (0.5, 0.2), (0.05,), [0.05, -0.05, 0.0]),
                               [0.39079707797788245, -0.39079707797788245, 0.0], rtol=1e-12)


def test_stribeck_by_hand():
    # f_c 0.3, f_s - f_c 0.2, f_v 0.1, v_s 0.1: at 0.1 rad/s the excess has decayed by e^-1,
    # at -0.2 rad/s by e^-4 (exponent 2) or e^-2 (exponent 1)
    expected = [0.3 + 0.2 * math.exp(-1.0) + 0.01, -(0.3 + 0.2 * math.exp(-4.0)) - 0.02, 0.0]
    np.testing.assert_allclose(torque("stribeck", (0.3, 0.2, 0.1), (0.1, 2.0), [0.1, -0.2, 0.0]), expected,
                               rtol=1e-12)
    np.testing.assert_allclose(torque("stribeck", (0.3, 0.2, 0.1), (0.1, 1.0), [-0.2]),
                               [-(0.3 + 0.2 * math.exp(-2.0)) - 0.02], rtol=1e-12)
    # just above zero velocity the static level 0.5 N m holds
    np.testing.assert_allclose(torque("stribeck", (0.3, 0.2, 0.1), (0.1, 2.0), [1e-9]), [0.5], rtol=1e-9)


def test_high_low_speed_by_hand():
    lin = (0.3, 0.2, 0.1, 0.05, 0.01, 0.15, -0.04, 0.02)  # k_c1 k_c2 k_v1 k_v12 k_v13 k_v2 k_v22 k_v23
    dq = [0.05, 0.5, -0.5, -0.05, 0.0]
    # below lambda = 0.1: Coulomb only; above: + the direction's cubic law; tanh(dq/1e-4) = +-1
    expected = [0.3, 0.3 + 0.05 + 0.05 * 0.25 + 0.01 * 0.125, -0.2 - 0.075 - 0.04 * 0.25 - 0.02 * 0.125, -0.2, 0.0]
    np.testing.assert_allclose(torque("high_low_speed", lin, (0.1,), dq), expected, rtol=1e-12)
    # inside the tanh transition: k_c1 t (1 + t) / 2 with t = tanh(1)
    t = math.tanh(1.0)
    np.testing.assert_allclose(torque("high_low_speed", lin, (0.1,), [1e-4]), [0.3 * t * (1 + t) / 2], rtol=1e-12)


def test_friction_regressor_is_block_diagonal_and_joint_major():
    models = (FrictionModel("stribeck"), FrictionModel("coulomb_viscous"))
    dq = np.array([[0.2, -0.3], [-0.1, 0.4]])
    cols = friction_regressor(dq, models, [(0.1, 2.0), ()])
    assert cols.shape == (2, 2, 5)
    assert np.all(cols[:, 0, 3:] == 0) and np.all(cols[:, 1, :3] == 0)
    np.testing.assert_allclose(cols[0, 0, :3], [1.0, math.exp(-4.0), 0.2])
    np.testing.assert_allclose(cols[1, 1, 3:], [1.0, 0.4])


def test_stribeck_truth_of_the_simulation_by_hand():
    f = StribeckFriction(excess=0.2, velocity=0.1, coulomb=0.3, viscous=0.1, sign_velocity=1e-6)
    np.testing.assert_allclose(f(np.array([0.1, -0.2])), [0.3 + 0.2 * math.exp(-1.0) + 0.01,
                                                          -(0.3 + 0.2 * math.exp(-4.0)) - 0.02], rtol=1e-9)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("make, message", [
    (lambda: FrictionModel("lugre"), "unknown friction model 'lugre'"),
    (lambda: FrictionModel("stribeck", velocity=-0.1), "velocity must be"),
    (lambda: FrictionModel("tanh", velocity=0.0), "velocity must be"),
    (lambda: FrictionModel("coulomb_viscous", velocity=0.1), "has no velocity parameter"),
    (lambda: FrictionModel("stribeck", exponent=0.0), "exponent must be > 0"),
    (lambda: FrictionSelection("stribeck,,tanh"), "empty friction model name"),
    (lambda: FrictionSelection((1, 2)), "names or FrictionModel"),
    (lambda: FrictionSelection(("stribeck", "tanh")).for_joints(7), "2 friction models given for 7 joints"),
    (lambda: IdentificationConfig(friction_models="stribeck", joint_model=JointModel(())), "need friction identified"),
    (lambda: StribeckFriction(excess=-1.0, velocity=0.1), "excess must be finite and >= 0"),
])
def test_bad_input_errors(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_selection_forms():
    assert FrictionSelection().is_default
    assert FrictionSelection("stribeck").for_joints(3) == (FrictionModel("stribeck"),) * 3
    assert [m.name for m in FrictionSelection("tanh, stribeck").models] == ["tanh", "stribeck"]
    assert FrictionSelection(FrictionModel("tanh", velocity=0.02)).models[0].free == ()
    assert FrictionModel("stribeck", exponent=None).free == ("stribeck_velocity", "exponent")
    assert IdentificationConfig(friction_models="asymmetric").friction_models == FrictionSelection("asymmetric")
    assert set(FRICTION_MODELS) == {"coulomb_viscous", "asymmetric", "tanh", "stribeck", "stribeck_tanh",
                                    "high_low_speed"}


# --------------------------------------------------------------------------- separable least squares

def _synthetic(truth_models, truth_nonlinear, noise=0.0, seed=0):
    """Two joints, three shared 'inertial' columns, the friction of known laws; (fixed, y, dq, beta)."""
    t = np.arange(0.0, 20.0, 0.005)
    dq = np.stack([1.2 * np.sin(2 * np.pi * 0.23 * t) + 0.3 * np.sin(2 * np.pi * 0.61 * t + 1.0),
                   0.9 * np.sin(2 * np.pi * 0.31 * t + 0.5) + 0.4 * np.sin(2 * np.pi * 0.47 * t)], axis=1)
    fixed = np.stack([np.stack([np.cos(0.7 * t), np.sin(1.3 * t), np.ones_like(t)], axis=1),
                      np.stack([0.5 * np.sin(0.9 * t), np.cos(0.4 * t), 0.2 * np.ones_like(t)], axis=1)], axis=1)
    beta = np.array([1.5, -0.7, 0.4])
    linear = {"stribeck": (0.35, 0.25, 0.2), "tanh": (0.3, 0.15)}
    y = fixed @ beta
    for j, (name, nl) in enumerate(zip(truth_models, truth_nonlinear)):
        if name == "stribeck":  # written out here, not with the module's features
            f_c, excess, f_v = linear[name]
            v_s, delta = nl
            y[:, j] += (f_c + excess * np.exp(-(np.abs(dq[:, j]) / v_s) ** delta)) * np.sign(dq[:, j]) + f_v * dq[:, j]
        else:
            f_c, f_v = linear[name]
            y[:, j] += f_c * np.tanh(dq[:, j] / nl[0]) + f_v * dq[:, j]
    y += np.random.default_rng(seed).normal(0.0, noise, y.shape)
    return fixed, y, dq


def _solve(w, y):
    return estimate(w, y, "wls")


def test_separable_least_squares_recovers_nonlinear_parameters_without_noise():
    fixed, y, dq = _synthetic(("stribeck", "tanh"), [(0.12, 2.0), (0.04,)])
    models = (FrictionModel("stribeck"), FrictionModel("tanh"))
    found = fit_nonlinear(fixed, y, dq, models, _solve)
    np.testing.assert_allclose(found[0], (0.12, 2.0), rtol=1e-4)
    np.testing.assert_allclose(found[1], (0.04,), rtol=1e-4)
    # the exponent too, when it is free
    fixed, y, dq = _synthetic(("stribeck", "tanh"), [(0.15, 1.4), (0.04,)])
    found = fit_nonlinear(fixed, y, dq, (FrictionModel("stribeck", exponent=None), models[1]), _solve)
    np.testing.assert_allclose(found[0], (0.15, 1.4), rtol=1e-3)


def test_separable_least_squares_with_noise_is_close_and_deterministic():
    fixed, y, dq = _synthetic(("stribeck", "tanh"), [(0.12, 2.0), (0.04,)], noise=0.02, seed=5)
    models = (FrictionModel("stribeck"), FrictionModel("tanh"))
    found = fit_nonlinear(fixed, y, dq, models, _solve)
    assert found[0][0] == pytest.approx(0.12, rel=0.1) and found[0][1] == 2.0  # exponent given: untouched
    assert found[1][0] == pytest.approx(0.04, rel=0.15)
    assert fit_nonlinear(fixed, y, dq, models, _solve) == found


# --------------------------------------------------------------------------- through identify()

@pytest.fixture(scope="module")
def exact_panda(tmp_path_factory):
    """Panda-class arm without MuJoCo's friction loss, inverse dynamics along a plan, plus a
    Stribeck friction torque written here: data the stribeck model explains exactly."""
    path = tmp_path_factory.mktemp("exact") / "panda.xml"
    path.write_text(re.sub(r'\s+frictionloss="[^"]*"', "", (ROBOTS / "panda_class.xml").read_text()))
    robot = load_robot(path)
    plan = multisine(robot.joint_range, 8.0, 250.0, seed=3, max_velocity=2.0)
    rec = ideal_recording(robot.model, plan, robot.joint_names)  # rigid body + armature + damping
    f_c = np.linspace(0.6, 0.15, robot.n_joints)
    excess, v_s = 0.8 * f_c, 0.15
    extra = (f_c + excess * np.exp(-(np.abs(rec.dq) / v_s) ** 2)) * np.sign(rec.dq)
    rec = Recording(rec.time, rec.q, rec.dq, rec.tau + extra, rec.joint_names, ddq=rec.ddq)
    return robot, rec, f_c, excess, v_s


def test_identify_recovers_stribeck_parameters_on_exact_data(exact_panda):
    robot, rec, f_c, excess, v_s = exact_panda
    result = identify(robot, rec, IdentificationConfig(estimator="ols", friction_models="stribeck"))
    params = [f.parameters for f in result.friction]
    np.testing.assert_allclose([p["coulomb"] for p in params], f_c, rtol=1e-4)
    np.testing.assert_allclose([p["stribeck"] for p in params], excess, rtol=1e-3)
    np.testing.assert_allclose([p["stribeck_velocity"] for p in params], v_s, rtol=1e-3)
    np.testing.assert_allclose([p["viscous"] for p in params], robot.damping, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(result.coulomb, f_c, rtol=1e-4)  # the Coulomb level summary
    assert result.metrics.rmse < 1e-6
    np.testing.assert_allclose(predict_torque(robot, result, rec.q, rec.dq, rec.ddq), rec.tau, atol=1e-5)


def test_stribeck_law_of_filtered_data_recovers_the_truth(tmp_path):
    """mj_inverse torques of the OpenArm class (no MuJoCo friction loss) plus a Stribeck law
    written in simulation.py (static 1.5 x Coulomb, 0.1 rad/s, sign smoothed at 0.02 rad/s),
    accelerations NOT given: the identification filters torque and states at 10 Hz. The law is
    the stribeck_tanh model's own, so only the filtering can make it miss: filter(f(dq)) is not
    f(filter(dq)); evaluated on the filtered velocity, the static level came out 0.03-0.42 N m
    off and the viscous coefficient up to 0.005 N m s/rad."""
    f_c = load_robot(ROBOTS / "openarm_class.xml").frictionloss
    path = tmp_path / "openarm.xml"
    path.write_text(re.sub(r'\s+frictionloss="[^"]*"', "", (ROBOTS / "openarm_class.xml").read_text()))
    robot = load_robot(path)
    plan = multisine(robot.joint_range, 8.0, 250.0, seed=3, max_velocity=1.0)
    rec = ideal_recording(robot.model, plan, robot.joint_names)  # rigid body + armature + damping
    truth = StribeckFriction(excess=0.5 * f_c, velocity=0.1, coulomb=f_c)
    rec = Recording(rec.time, rec.q, rec.dq, rec.tau + truth(rec.dq), rec.joint_names)   # ddq left to the filter
    result = identify(robot, rec, IdentificationConfig(friction_models="stribeck_tanh"))
    params = [f.parameters for f in result.friction]
    np.testing.assert_allclose(result.viscous, robot.damping, atol=5e-4)
    np.testing.assert_allclose([p["static"] for p in params], 1.5 * f_c, atol=5e-3)
    np.testing.assert_allclose([p["stribeck_velocity"] for p in params], 0.1, rtol=0.02)
    np.testing.assert_allclose([p["tanh_velocity"] for p in params], 0.02, rtol=0.05)


def test_per_joint_selection(exact_panda):
    robot, rec, *_ = exact_panda
    chosen = ("stribeck", "tanh", "asymmetric", "coulomb_viscous", "high_low_speed", "stribeck", "coulomb_viscous")
    config = IdentificationConfig(estimator="ols", friction_models=",".join(chosen))
    names = column_names(robot, config)
    # the terminal body, every joint's armature, then each joint's friction law
    assert names[10:17] == tuple(f"joint{j}.armature" for j in range(1, 8))
    assert names[17:20] == ("joint1.coulomb", "joint1.stribeck", "joint1.viscous")
    assert "joint3.coulomb_pos" in names and "joint5.cubic_neg" in names and "joint4.coulomb" in names
    result = identify(robot, rec, config)
    assert tuple(f.model.name for f in result.friction) == chosen
    assert result.friction[0].parameters["stribeck_velocity"] == pytest.approx(0.15, rel=1e-3)
    assert len(result.friction[1].nonlinear) == 1 and len(result.friction[4].nonlinear) == 1
    with pytest.raises(ValueError, match="3 friction models given for 7 joints"):
        identify(robot, rec, IdentificationConfig(friction_models="stribeck,tanh,asymmetric"))


def test_default_model_keeps_the_linear_path(exact_panda):
    robot, rec, *_ = exact_panda
    plain = identify(robot, rec, IdentificationConfig(estimator="ols"))
    named = identify(robot, rec, IdentificationConfig(estimator="ols", friction_models="coulomb_viscous"))
    assert plain.column_names == named.column_names
    np.testing.assert_array_equal(plain.standard, named.standard)
    assert all(f.model.name == "coulomb_viscous" for f in plain.friction)
    np.testing.assert_array_equal([f.parameters["coulomb"] for f in plain.friction], plain.coulomb)


def test_cli_friction_model_option(tmp_path, capsys):
    model = str(ROBOTS / "openarm_class.xml")
    out = tmp_path / "out"
    assert main([model, "--duration", "4", "--sample-rate", "250", "--source", "ideal", "--no-plots",
                 "--friction-model", "stribeck", "--output-dir", str(out)]) == 0
    doc = json.loads((out / "params.json").read_text())
    assert doc["friction_models"]["joint1"]["model"] == "stribeck"
    assert set(doc["friction_models"]["joint1"]["parameters"]) == {
        "coulomb", "stribeck", "viscous", "stribeck_velocity", "exponent", "static"}
    assert doc["friction_parameter_units"]["stribeck_velocity"] == "rad/s"
    assert "Friction models" in capsys.readouterr().out
    assert main([model, "--friction-model", "lugre", "--output-dir", str(tmp_path / "bad")]) == 2
    assert "unknown friction model 'lugre'" in capsys.readouterr().err


# --------------------------------------------------------------------------- acceptance on a simulated arm

def test_simulation_friction_hook_is_neutral_when_zero():
    robot = load_robot(ROBOTS / "openarm_class.xml")
    plan = multisine(robot.joint_range, 0.3, 1000.0, seed=0, max_velocity=1.0)
    ff = robot.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    kp, kd = default_gains(robot.model)
    args = (robot.model, plan, ff, kp, kd, MeasurementNoise.off())
    plain = simulate_tracking(*args)
    hooked = simulate_tracking(*args, joint_friction=lambda dq: np.zeros_like(dq))
    np.testing.assert_array_equal(plain.tau, hooked.tau)
    stribeck = simulate_tracking(*args, joint_friction=StribeckFriction(excess=0.3, velocity=0.1))
    assert np.max(np.abs(stribeck.tau - plain.tau)) > 0.05  # the controller had to work against it


def test_stribeck_model_cuts_validation_rmse_on_simulated_7dof_arm():
    """OpenArm-class arm in MuJoCo: MJCF friction loss (Coulomb) and damping plus a Stribeck peak
    applied every step (static level twice the Coulomb level, v_s = 0.15 rad/s). Identified on
    one excitation, validated on another: the Stribeck law's RMSE is >= 20 % below the
    Coulomb + viscous WLS fit's, with a sign(dq) Coulomb term (the default) and with a
    tanh-smoothed one (0.02 rad/s, about the smear of the torque filter)."""
    robot = load_robot(ROBOTS / "openarm_class.xml")
    truth = StribeckFriction(excess=robot.frictionloss, velocity=0.15)
    kp, kd = default_gains(robot.model)

    def record(seed, duration):
        plan = multisine(robot.joint_range, duration, 1000.0, seed=seed, max_velocity=2.0)
        ff = robot.inverse_dynamics(plan.q, plan.dq, plan.ddq)
        return simulate_tracking(robot.model, plan, ff, kp, kd, MeasurementNoise(), seed=seed, joint_friction=truth)

    train, check = record(1, 15.0), record(2, 7.5)

    def rmse(model, smoothing=0.0):
        config = IdentificationConfig(friction_models=model, joint_model=JointModel(smoothing=smoothing))
        return identify(robot, train, config, validation=check).metrics.validation_rmse

    stribeck = rmse("stribeck_tanh")
    baselines = {"sign": rmse("coulomb_viscous"), "tanh 0.02": rmse("coulomb_viscous", 0.02)}
    assert all(stribeck <= 0.8 * b for b in baselines.values()), (stribeck, baselines)
