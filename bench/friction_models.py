"""Friction-model RMSE table: which joint friction law explains a simulated 7-DOF arm best.

Plant: the OpenArm-class arm in MuJoCo at 1 kHz, PD + inverse-dynamics feed-forward tracking,
the project's default measurement noise, the MJCF's friction loss (Coulomb) and damping
(viscous), plus, in the "stribeck" case, a Stribeck peak applied every physics step
(simulation.StribeckFriction: static level twice the Coulomb level, Stribeck velocity
0.15 rad/s, Gaussian decay). The "control" case has the MJCF friction only (plain
Coulomb + viscous truth): a nonlinear law should not help there, and must not hurt much.

Each friction law identifies the terminal body and every joint's friction (terminal scope,
WLS) on one multisine excitation and is judged on another one (different seed): validation
torque RMSE overall and per joint, and its reduction against Coulomb + viscous with the same
sign smoothing (0.02 rad/s, ~ the velocity the torque filter smears the Coulomb step over)
and against the project's default Coulomb + viscous (sign). Deterministic (seeded).
Run: ``make bench`` or ``python bench/friction_models.py [--arm panda_class] [--duration 20]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# The nonlinear search makes many small least-squares solves on tall matrices: BLAS threads buy
# nothing there and, on a busy machine, their spin-waiting costs up to 20x. Before numpy loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sysid_core import load_robot  # noqa: E402
from sysid_core.dynamics.friction import FRICTION_MODELS, JointModel  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.simulation import MeasurementNoise, StribeckFriction, default_gains, simulate_tracking  # noqa: E402

STATIC_OVER_COULOMB = 2.0
STRIBECK_VELOCITY = 0.15  # rad/s


def recordings(robot, truth, duration: float, seed: int):
    kp, kd = default_gains(robot.model)

    def record(s, d):
        plan = multisine(robot.joint_range, d, 1000.0, seed=s, max_velocity=2.0)
        ff = robot.inverse_dynamics(plan.q, plan.dq, plan.ddq)
        return simulate_tracking(robot.model, plan, ff, kp, kd, MeasurementNoise(), seed=s, joint_friction=truth)

    return record(seed, duration), record(seed + 1000, duration / 2)


def table(robot, train, check, smoothing: float) -> list[str]:
    runs = [("coulomb_viscous (sign)", "coulomb_viscous", 0.0)] + [(m, m, smoothing) for m in FRICTION_MODELS]
    results = {}
    for label, model, smooth in runs:
        config = IdentificationConfig(friction_models=model, joint_model=JointModel(smoothing=smooth))
        started = time.perf_counter()
        metrics = identify(robot, train, config, validation=check).metrics
        results[label] = (metrics.validation_rmse, metrics.validation_rmse_per_joint, time.perf_counter() - started)
    ref_same, ref_sign = results["coulomb_viscous"][0], results["coulomb_viscous (sign)"][0]
    joints = [f"{j} [N m]" for j in robot.joint_names]
    header = ["model", "val RMSE [N m]", "vs C+V", "vs C+V sign"] + joints + ["fit [s]"]
    rows = [[label, f"{rmse:.4f}", f"{100 * (1 - rmse / ref_same):+.1f} %", f"{100 * (1 - rmse / ref_sign):+.1f} %"]
            + [f"{v:.4f}" for v in per_joint] + [f"{seconds:.1f}"]
            for label, (rmse, per_joint, seconds) in results.items()]
    widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
    fmt = lambda cells: "  ".join(c.ljust(w) if k == 0 else c.rjust(w)  # noqa: E731
                                  for k, (c, w) in enumerate(zip(cells, widths)))
    return [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", default="openarm_class", help="bundled model name (default openarm_class)")
    parser.add_argument("--duration", type=float, default=20.0, help="identification excitation, s (default 20)")
    parser.add_argument("--smoothing", type=float, default=0.02, help="Coulomb sign smoothing, rad/s (default 0.02)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    robot = load_robot(ROOT / "config" / "robots" / f"{args.arm}.xml")
    cases = [("stribeck", StribeckFriction(excess=(STATIC_OVER_COULOMB - 1.0) * robot.frictionloss,
                                           velocity=STRIBECK_VELOCITY)),
             ("control", None)]
    print(f"Friction models on {args.arm} ({robot.n_joints} joints): validation torque RMSE, terminal scope, WLS; "
          f"identification {args.duration:g} s, validation {args.duration / 2:g} s (other excitation), "
          f"seed {args.seed}")
    for case, truth in cases:
        started = time.perf_counter()
        train, check = recordings(robot, truth, args.duration, args.seed)
        what = ("MJCF friction loss + damping + Stribeck peak (static = "
                f"{STATIC_OVER_COULOMB:g} x Coulomb, v_s = {STRIBECK_VELOCITY} rad/s)" if truth is not None
                else "MJCF friction loss + damping only (Coulomb + viscous truth)")
        print(f"\n[{case}] truth: {what}; simulated in {time.perf_counter() - started:.1f} s")
        print("\n".join(table(robot, train, check, args.smoothing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
