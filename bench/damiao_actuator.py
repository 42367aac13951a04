"""Damiao actuator identification on the virtual arm with a known truth: a table.

Truth: the OpenArm-class arm behind emulated DM-J motors with effort gains 0.85-1.15, a command
delay of 5 ms and, with --stribeck, Stribeck friction on top of the model's own (static level
1.5 x the Coulomb level, Stribeck velocity 0.1 rad/s); the plant's friction is a law of the velocity
(--frictionloss constraint: MuJoCo's soft constraint instead). Per command rate: two 20 s excitations
(alone, and with 0.5 kg mounted off the wrist axes), the delay found from the replies, the
MIT-loop correction, the two-recording gain calibration, the payload identified with the
gains, the full arm identified with them, its actuator model written, compiled and replayed.

    .venv/bin/python bench/damiao_actuator.py [--stribeck] [--frictionloss law|constraint] [--duration 20] [--rates 250 500]
"""
import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import mujoco
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sysid_core.damiao.arm import DamiaoArm  # noqa: E402
from sysid_core.damiao.mit_run import drive_virtual_arm, replay_commands  # noqa: E402
from sysid_core.dynamics.friction import JointModel  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine  # noqa: E402
from sysid_core.identification import actuator as act  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.results.actuator_model import write_actuator_model  # noqa: E402
from sysid_core.results.export import write_updated_model  # noqa: E402
from sysid_core.simulation import StribeckFriction  # noqa: E402

ROBOTS = ROOT / "config" / "robots"
GAINS = np.array([0.87, 1.12, 0.93, 1.06, 0.85, 1.15, 0.96])
DELAY = 0.005


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stribeck", action="store_true", help="add Stribeck friction to the plant")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[250.0, 500.0])
    parser.add_argument("--frictionloss", choices=("law", "constraint"), default="law",
                        help="the plant's frictionloss: a law of the velocity (the default, as a motor's) "
                             "or MuJoCo's soft constraint")
    args = parser.parse_args()
    p = yaml.safe_load((ROOT / "config" / "openarm_class_damiao.yaml").read_text())["damiao_bridge"]["ros__parameters"]
    arm = DamiaoArm.build(p["joint_names"], p["motor_types"], p["can_ids"], p["master_ids"], p["kp"], p["kd"],
                          p["joint_lower_limits"], p["joint_upper_limits"])
    robot = load_robot(ROBOTS / "openarm_class.xml")
    work = Path(tempfile.mkdtemp(prefix="damiao_actuator_"))
    payload_path = work / "payload.xml"
    payload_path.write_text((ROBOTS / "openarm_class_payload.xml").read_text().replace(
        '<inertial pos="0.01 0.015 0.04" mass="0.5"', '<inertial pos="0.07 0.05 0.03" mass="0.5"'))
    loaded = load_robot(payload_path)
    payload = loaded.nominal_parameters[loaded.terminal_index] - robot.nominal_parameters[robot.terminal_index]
    known = act.KnownPayload(float(payload[0]), tuple(payload[1:4] / payload[0]))
    model = "stribeck_tanh" if args.stribeck else "tanh"
    full = IdentificationConfig(scope="full", joint_model=JointModel(("coulomb", "viscous", "armature")),
                                friction_models=model)
    print(f"truth: gains {GAINS.tolist()}, delay {DELAY * 1e3:g} ms, "
          f"{'Stribeck friction (static 1.5 x Coulomb, 0.1 rad/s)' if args.stribeck else 'model friction only'}, "
          f"frictionloss as {'a law of the velocity' if args.frictionloss == 'law' else 'MuJoCo constraint'}; "
          f"{args.duration:g} s excitations; identification friction law {model}")
    for rate in args.rates:
        started = time.perf_counter()
        runs = []
        for path, seed in ((ROBOTS / "openarm_class.xml", 0), (payload_path, 1)):
            plan = multisine(robot.joint_range, args.duration, rate, seed=seed, max_velocity=1.0)
            profile, _ = excitation_with_approach_and_rest(plan.q.mean(axis=0), plan, rate, 1.0, robot.joint_range)
            ff = robot.inverse_dynamics(profile.q, profile.dq, profile.ddq)
            truth = mujoco.MjModel.from_xml_path(str(path))
            friction = (StribeckFriction(excess=0.5 * truth.dof_frictionloss, velocity=0.1)
                        if args.stribeck else None)
            runs.append(drive_virtual_arm(truth, arm, profile, ff, effort_gains=GAINS, delay=DELAY,
                                          joint_friction=friction, frictionloss=args.frictionloss))
        recorded = time.perf_counter() - started
        delays = [act.estimate_delay(r.recording, r.commands, torque_resolution=0.03) for r in runs]
        alone, with_payload = (act.mit_loop_correction(r.recording, r.commands, d.delay) for r, d in zip(runs, delays))
        gains = act.calibrate_effort_gains(robot, alone, with_payload, known, full, delays[0].delay)
        terminal = IdentificationConfig(friction_models=model)
        mass = identify(robot, act.apply_effort_gains(with_payload, gains), terminal).terminal_parameters[0] \
            - robot.nominal_parameters[robot.terminal_index, 0]
        raw = identify(robot, act.apply_effort_gains(runs[0].recording, gains), full)
        result = identify(robot, act.apply_effort_gains(alone, gains), replace(full, estimator="consistent"))
        out = work / f"updated_model_{rate:g}.xml"
        write_updated_model(ROBOTS / "openarm_class.xml", out, robot, result)
        write_actuator_model(out, out, robot.joint_names, result.armature, result.viscous, result.coulomb,
                             gains.gains, [lim.tmax for lim in arm.limits])
        q = replay_commands(mujoco.MjModel.from_xml_path(str(out)), runs[0].commands, delays[0].delay,
                            runs[0].recording)
        rmse = np.sqrt(np.mean((q - runs[0].recording.q) ** 2, axis=0))
        print(f"\n{rate:g} Hz: delay found {delays[0].delay * 1e3:.3f} ms; payload mass {mass:.4f} kg "
              f"(truth {payload[0]:g}, {100 * (mass / payload[0] - 1):+.2f} %); recordings {recorded:.1f} s wall, "
              f"all {time.perf_counter() - started:.1f} s (loaded machine)")
        print(f"{'joint':8}{'gain err %':>11}{'std %':>8}{'visc raw':>10}{'visc corr':>10}{'truth':>8}"
              f"{'rollout rmse rad':>18}")
        for j, name in enumerate(robot.joint_names):
            print(f"{name:8}{100 * (gains.gains[j] / GAINS[j] - 1):>+11.3f}{100 * gains.std[j] / GAINS[j]:>8.3f}"
                  f"{raw.viscous[j]:>10.4f}{result.viscous[j]:>10.4f}{robot.damping[j]:>8.3f}{rmse[j]:>18.5f}")


if __name__ == "__main__":
    main()
