"""The terminal scope's condition number against its lower bound from each joint's friction pair.

In the terminal scope the base regressor holds, per joint j, a Coulomb column sign(dq_j) and a
viscous column dq_j, nonzero on joint j's rows only. With unit norms their Gram matrix is
[[1, rho], [rho, 1]], rho = mean |dq_j| / RMS dq_j, so the pair's condition number is
sqrt((1 + rho) / (1 - rho)) (4.4 for a sinusoid, 3.0 for Gaussian velocities), and the singular
values of any set of columns lie between the whole matrix's extreme ones: the condition number
with unit-norm columns is at least the largest pair's. This prints, for the multisines of seeds
0..S-1 and the optimized designs of ``--criteria`` (from ``--cache`` as bench/excitation_quality.py
keeps them, or designed here), the whole matrix's condition number, each joint's pair's (SVD),
the formula's for the largest, and whether the bound holds. Asserts nothing.

Run: ``.venv/bin/python bench/excitation_friction_pairs.py [--arm panda] [--seeds 3]
[--criteria payload condition] [--condition-cap auto|off|F] [--cache /tmp/excitation_designs]``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "test"))

from arm_corpus import arm  # noqa: E402
from excitation_quality import DURATION, TIME_LIMIT, optimized, slowed_multisine  # noqa: E402
from sysid_core.cli import _condition_cap  # noqa: E402 (the CLI's --excitation-condition-cap)
from sysid_core.dynamics.friction import JointModel  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.excitation.criteria import CRITERIA  # noqa: E402
from sysid_core.excitation.design import SCORE_SAMPLES, _subsampled  # noqa: E402
from sysid_core.excitation.multistart import search_workers  # noqa: E402
from sysid_core.identification.identify import (IdentificationConfig, base_regressor,  # noqa: E402
                                                structural_base_parameters)


def condition(matrix: np.ndarray) -> float:
    s = np.linalg.svd(matrix, compute_uv=False)
    return float(s[0] / s[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", default="panda")
    parser.add_argument("--seeds", type=int, default=3, help="multisine seeds (default 3)")
    parser.add_argument("--criteria", nargs="+", default=["payload", "condition"], choices=CRITERIA)
    parser.add_argument("--cache", type=Path, default=None, help="bench/excitation_quality.py's design directory")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    parser.add_argument("--condition-cap", type=_condition_cap, default="auto",
                        help="the designs' condition cap: auto, off or a fraction, as bench/excitation_quality.py's")
    args = parser.parse_args(argv)
    args.duration = DURATION
    robot = load_robot(arm(args.arm).path)
    config = IdentificationConfig(scope="terminal", joint_model=JointModel(("coulomb", "viscous")), estimator="wls")
    base = structural_base_parameters(robot, config)
    plans = {f"multisine {s}": slowed_multisine(robot, s, DURATION) for s in range(args.seeds)}
    for criterion in args.criteria:
        plans[criterion] = optimized(args.arm, robot, config, criterion, 0, args, search_workers(args.time_limit))[0]
    for label, plan in plans.items():
        q, dq, ddq = _subsampled(plan, SCORE_SAMPLES)
        columns, _ = base_regressor(robot, config, q, dq, ddq, base=base)
        unit = columns.reshape(-1, base.rank)
        unit = unit / np.linalg.norm(unit, axis=0)
        pairs = [condition(unit[:, [base.names.index(f"{name}.coulomb"), base.names.index(f"{name}.viscous")]])
                 for name in robot.joint_names]
        k = int(np.argmax(pairs))
        rho = np.mean(np.abs(dq[:, k])) / np.sqrt(np.mean(dq[:, k] ** 2))
        whole = condition(unit)
        print(f"{label:<12} whole {whole:5.2f}  largest pair {pairs[k]:5.2f} (joint {k + 1}, "
              f"sqrt((1+rho)/(1-rho)) = {np.sqrt((1 + rho) / (1 - rho)):5.2f})  pairs "
              f"{' '.join(f'{p:.2f}' for p in pairs)}  bound holds: {whole >= pairs[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
