"""Gravity compensation on the virtual Damiao arm: how far a released arm drifts, identified
model against nominal one.

The plant: the OpenArm-class arm with a 0.5 kg payload (config/robots/openarm_class_payload.xml)
behind emulated DM-J motors (the gains and layout of config/openarm_class_damiao.yaml, 250 Hz),
its friction a law of the velocity (the file's frictionloss and damping) plus a Stribeck friction
no model file knows (a static peak of half the Coulomb level more, 40 % more Coulomb level). The
identified model: a 20 s and a 5 s multisine on that plant (nominal feed-forward), corrected for
the MIT loop's sampling, identified (terminal scope), written (params.json, updated_model.xml)
and loaded as the node loads it. The nominal model: config/robots/openarm_class.xml (no payload).
Each pose: the arm released at rest and floated for ``--duration`` s of simulated time under
``sysid_core.online.gravity_compensation.float_virtual_arm`` (no position target, kp 0), drift =
max over time of |q - q_release| per joint. Also: the identified model's gravity error at each pose
against MuJoCo's (qfrc_bias of the plant), the drift at several friction fractions, and the cost
of one call of ``compensation_torque``.

    .venv/bin/python bench/gravity_compensation.py [--duration 10] [--fractions 0 0.5 1]
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sysid_core.damiao.arm import DamiaoArm  # noqa: E402
from sysid_core.damiao.mit_run import drive_virtual_arm  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine  # noqa: E402
from sysid_core.identification import actuator as act  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.online.gravity_compensation import (CompensationConfig, compensation_torque,  # noqa: E402
                                                    float_virtual_arm)
from sysid_core.online.live_model import load_live_model, nominal_live_model  # noqa: E402
from sysid_core.results.export import params_document, write_params_json, write_updated_model  # noqa: E402
from sysid_core.simulation import StribeckFriction  # noqa: E402

ROBOTS = ROOT / "config" / "robots"
NOMINAL, PLANT = ROBOTS / "openarm_class.xml", ROBOTS / "openarm_class_payload.xml"
RATE = 250.0
POSES = {"hanging, elbow bent": [0.0, 0.3, 0.0, 1.2, 0.0, 0.3, 0.0],
         "reaching forward": [0.8, 0.2, 0.3, 1.0, 0.2, 0.4, 0.3],
         "out to the side": [0.3, 1.0, -0.5, 0.8, 0.5, -0.4, 0.2],
         "forward and up": [1.4, 0.4, 0.6, 0.6, -0.4, 0.2, -0.3],
         "across the body": [0.5, 0.0, 1.0, 1.6, 1.0, -0.5, 0.8]}


def damiao_arm() -> DamiaoArm:
    p = yaml.safe_load((ROOT / "config" / "openarm_class_damiao.yaml").read_text())["damiao_bridge"]["ros__parameters"]
    return DamiaoArm.build(p["joint_names"], p["motor_types"], p["can_ids"], p["master_ids"], p["kp"], p["kd"],
                           p["joint_lower_limits"], p["joint_upper_limits"])


def plant_friction() -> StribeckFriction:
    f_c = mujoco.MjModel.from_xml_path(str(PLANT)).dof_frictionloss
    return StribeckFriction(excess=0.5 * f_c, velocity=0.1, coulomb=0.4 * f_c)


def identified_model(work: Path):
    robot = load_robot(NOMINAL)
    plant = mujoco.MjModel.from_xml_path(str(PLANT))

    def excitation(seed, duration):
        plan = multisine(robot.joint_range, duration, RATE, seed=seed, max_velocity=1.0)
        profile, _ = excitation_with_approach_and_rest(plan.q.mean(axis=0), plan, RATE, 1.0, robot.joint_range)
        feedforward = robot.inverse_dynamics(profile.q, profile.dq, profile.ddq)
        run = drive_virtual_arm(plant, damiao_arm(), profile, feedforward, joint_friction=plant_friction())
        return act.mit_loop_correction(run.recording, run.commands, 0.0)
    start = time.perf_counter()
    result = identify(robot, excitation(0, 20.0), IdentificationConfig(), validation=excitation(1, 5.0))
    write_params_json(work / "params.json", params_document(result, robot, "virtual Damiao arm"))
    write_updated_model(robot.path, work / "updated_model.xml", robot, result)
    print(f"identified in {time.perf_counter() - start:.1f} s (excitations included), verdict {result.verdict.level}")
    return load_live_model(work / "params.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="simulated seconds each release floats")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.5, 1.0],
                        help="friction compensation fractions tried with the identified model")
    args = parser.parse_args()
    arm = damiao_arm()
    plant = mujoco.MjModel.from_xml_path(str(PLANT))
    data = mujoco.MjData(plant)
    models = {"identified": identified_model(Path(tempfile.mkdtemp(prefix="gravity_compensation_"))),
              "nominal": nominal_live_model(load_robot(NOMINAL))}
    sigma = models["identified"].sigma
    print("validation RMSE per joint (N m):", np.array2string(sigma, precision=4))
    print(f"\ndrift over {args.duration:g} s simulated, max |q - q_release| per joint (mrad), friction fraction 0.5")
    for name, pose in POSES.items():
        q0 = np.array(pose)
        data.qpos[:] = q0
        mujoco.mj_forward(plant, data)
        print(f"{name} {pose}")
        for label, model in models.items():
            error = model.gravity(q0)[0] - data.qfrc_bias
            run = float_virtual_arm(plant, arm, model, q0, args.duration, RATE, joint_friction=plant_friction())
            drift = np.array2string(1e3 * run.drift(), precision=2, suppress_small=True)
            print(f"  {label:10s} gravity error (N m) {np.array2string(error, precision=3, suppress_small=True)}")
            print(f"  {'':10s} drift (mrad)        {drift}   max {1e3 * run.drift().max():.2f}, "
                  f"kp sent max {run.kp.max():g}")
    print("\nidentified model, max drift over the poses (mrad) by friction fraction:")
    for fraction in args.fractions:
        config = CompensationConfig(friction_fraction=fraction)
        worst = max(float_virtual_arm(plant, arm, models["identified"], np.array(pose), args.duration, RATE, config,
                                      joint_friction=plant_friction()).drift().max() for pose in POSES.values())
        print(f"  {fraction:4.2f}: {1e3 * worst:.2f}")
    model, q0 = models["identified"], np.array(POSES["reaching forward"])
    for batch in (1, 10):
        q, dq = np.tile(q0, (batch, 1)), np.full((batch, 7), 0.2)
        compensation_torque(model, q, dq)
        reps = 2000 // batch
        start = time.perf_counter()
        for _ in range(reps):
            compensation_torque(model, q, dq)
        print(f"compensation_torque, {batch} sample(s) per call: {1e6 * (time.perf_counter() - start) / reps:.0f} us "
              "per call")


if __name__ == "__main__":
    main()
