"""Condition number of the base regressor: optimized Fourier excitation vs random multisines.

For each bundled 7-DOF arm and both identification scopes, on the same duration, sample rate
and speed cap: the multisine of ``sysid-identify`` for several seeds, and one optimized
excitation (``optimize_excitation``, criterion ``condition``, within the motors' torque
limits) with a wall-clock budget. Prints the raw condition number (what params.json reports)
and the one with unit-norm columns, and whether the optimized one is at most half the
multisines' median. Asserts nothing.

Run: ``make bench`` or ``python bench/excitation_condition.py [--time-limit 90] [--seeds 5]``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sysid_core.damiao.protocol import motor_limits  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.excitation.design import optimize_excitation, regressor_condition  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig  # noqa: E402

DURATION = 20.0        # s
SAMPLE_RATE = 1000.0   # Hz
MAX_VELOCITY = 2.0     # rad/s, the sysid-identify default for both excitations
# Joint torque limits, N m: Franka Panda datasheet; the OpenArm class's Damiao motors
# (MIT-mode torque range of DM8009 x2, DM4340 x2, DM4310 x3).
TORQUE_LIMITS = {
    "panda_class": np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0]),
    "openarm_class": np.array([motor_limits(m).tmax for m in ["DM8009"] * 2 + ["DM4340"] * 2 + ["DM4310"] * 3]),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=90.0, help="optimizer budget per case, s (default 90)")
    parser.add_argument("--seeds", type=int, default=5, help="multisine seeds (default 5)")
    parser.add_argument("--robots", nargs="+", default=list(TORQUE_LIMITS), choices=list(TORQUE_LIMITS))
    parser.add_argument("--scopes", nargs="+", default=["terminal", "full"], choices=["terminal", "full"])
    args = parser.parse_args(argv)
    print(f"{DURATION:g} s at {SAMPLE_RATE:g} Hz, speed cap {MAX_VELOCITY:g} rad/s; optimizer budget "
          f"{args.time_limit:g} s per case; condition numbers of the base regressor (friction columns included)")
    header = f"{'arm':<15}{'scope':<10}{'excitation':<24}{'cond':>9}{'cond scaled':>13}"
    rows = []
    print(header)
    for name in args.robots:
        robot = load_robot(ROOT / "config" / "robots" / f"{name}.xml")
        for scope in args.scopes:
            config = IdentificationConfig(scope=scope)
            raw, scaled = [], []
            for seed in range(args.seeds):
                plan = multisine(robot.joint_range, DURATION, SAMPLE_RATE, seed=seed, max_velocity=MAX_VELOCITY)
                c, cs = regressor_condition(robot, plan, config)
                raw.append(c)
                scaled.append(cs)
                print(f"{name:<15}{scope:<10}{f'multisine seed {seed}':<24}{c:>9.1f}{cs:>13.2f}", flush=True)
            median, median_scaled = float(np.median(raw)), float(np.median(scaled))
            print(f"{name:<15}{scope:<10}{'multisine median':<24}{median:>9.1f}{median_scaled:>13.2f}")
            design = optimize_excitation(robot, DURATION, SAMPLE_RATE, config=config, criterion="condition", seed=0,
                                         time_limit_s=args.time_limit, max_velocity=MAX_VELOCITY,
                                         torque_limits=TORQUE_LIMITS[name])
            c, cs = design.condition_number, design.condition_number_scaled
            print(f"{name:<15}{scope:<10}{'optimized':<24}{c:>9.1f}{cs:>13.2f}   "
                  f"({design.restarts} starts, {design.iterations} iterations, {design.elapsed_s:.0f} s, "
                  f"limits met: {design.limits_met}, peak torque use "
                  f"{np.max(design.limit_usage['torque']):.0%})", flush=True)
            rows.append((name, scope, c / median, cs / median_scaled, c / min(raw)))
    print("\noptimized / multisine median (raw, scaled); optimized / best multisine (raw); raw <= half of median?")
    for name, scope, ratio, ratio_scaled, ratio_best in rows:
        print(f"{name:<15}{scope:<10}{ratio:>6.2f}{ratio_scaled:>7.2f}{ratio_best:>7.2f}   "
              f"{'yes' if ratio <= 0.5 else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
