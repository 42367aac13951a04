"""Parameter errors against the truth on the bundled 7-DOF arms at three noise levels.

For each arm (Panda class with 1.5 kg, OpenArm class with 0.5 kg on the last link) the truth
model (with the payload) is simulated tracking a 15 s multisine at 1 kHz, measured with the
default noise times 1, 4 and 16, and identified with the nominal model (without the payload)
in the terminal scope (link + payload and every joint's friction) by WLS and by the
consistent estimator, and in the full scope. Errors are against the truth model's own
parameters: the composite mass and centre of mass, the inertia about the centre of mass
(largest entry error over the largest entry), every joint's Coulomb and viscous friction
(median relative error; MuJoCo's frictionloss is a soft constraint, not exactly Coulomb), the
base parameters (median error in their standard deviations: about 0.7 if the noise were the
only error), and the validation RMSE on a different excitation. Prints numbers; asserts nothing.

Run: ``make bench`` or ``.venv/bin/python bench/parameter_errors.py``.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sysid_core import load_robot  # noqa: E402
from sysid_core.dynamics.inertia import consistency_violations, to_com_inertia  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify, model_parameter_vector  # noqa: E402
from sysid_core.simulation import MeasurementNoise, default_gains, simulate_tracking  # noqa: E402

ARMS = ("panda_class", "openarm_class")
NOISE_SCALES = (1.0, 4.0, 16.0)
DURATION_S, RATE_HZ, SEED = 15.0, 1000.0, 1
CONFIGS = {
    "terminal, wls": IdentificationConfig(scope="terminal", estimator="wls"),
    "terminal, consistent": IdentificationConfig(scope="terminal", estimator="consistent"),
    "full, wls + consistent": IdentificationConfig(scope="full"),
}


def _record(truth, nominal, plan, noise, seed):
    kp, kd = default_gains(truth.model)
    feedforward = nominal.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    return simulate_tracking(truth.model, plan, feedforward, kp, kd, noise, seed=seed, joint_names=truth.joint_names)


def _errors(result, truth) -> dict:
    """Errors against the truth. The full scope identifies base parameters: a single body's
    mass is not identifiable there (only combinations are), so its body errors are not shown
    and the base parameters are compared instead (median error in standard deviations)."""
    true_body = truth.nominal_parameters[truth.body_names.index(result.terminal_body)]
    body = result.terminal_parameters
    com, true_com = body[1:4] / body[0], true_body[1:4] / true_body[0]
    inertia, true_inertia = to_com_inertia(body).inertia, to_com_inertia(true_body).inertia
    true_base = result.base.projection @ model_parameter_vector(truth, result.column_names)
    full = result.scope == "full"
    return {
        "mass %": "-" if full else 100 * (body[0] - true_body[0]) / true_body[0],
        "CoM mm": "-" if full else 1000 * np.linalg.norm(com - true_com),
        "I_com %": "-" if full else 100 * np.abs(inertia - true_inertia).max() / np.abs(true_inertia).max(),
        "coulomb %": 100 * np.median(np.abs(result.coulomb - truth.frictionloss) / truth.frictionloss),
        "viscous %": 100 * np.median(np.abs(result.viscous - truth.damping) / truth.damping),
        "base err/std": np.median(np.abs(result.estimate.values - true_base) / result.estimate.std),
        "val RMSE": result.metrics.validation_rmse,
        "consistent": "yes" if not any(consistency_violations(b) for b in result.body_parameters) else "NO",
    }


def main() -> int:
    default = MeasurementNoise()
    columns = ("mass %", "CoM mm", "I_com %", "coulomb %", "viscous %", "base err/std", "val RMSE", "consistent")
    print(f"{DURATION_S:g} s multisine at {RATE_HZ:g} Hz, seed {SEED}; default noise q {default.q_std:g} rad, "
          f"dq {default.dq_std:g} rad/s, tau {default.tau_std:g} N m\n")
    for arm in ARMS:
        nominal = load_robot(ROOT / "config" / "robots" / f"{arm}.xml")
        truth = load_robot(ROOT / "config" / "robots" / f"{arm}_payload.xml")
        plan = multisine(nominal.joint_range, DURATION_S, RATE_HZ, seed=SEED, max_velocity=1.5)
        check = multisine(nominal.joint_range, 6.0, RATE_HZ, seed=SEED + 100, max_velocity=1.5)
        print(f"{arm} (payload: {truth.nominal_parameters[-1][0] - nominal.nominal_parameters[-1][0]:.2f} kg on "
              f"'{nominal.terminal_body}')")
        print(f"  {'noise':>5}  {'identification':<24}" + "".join(f"{c:>13}" for c in columns) + f"{'time s':>8}")
        for scale in NOISE_SCALES:
            noise = MeasurementNoise(q_std=scale * default.q_std, dq_std=scale * default.dq_std,
                                     tau_std=scale * default.tau_std)
            recording = _record(truth, nominal, plan, noise, SEED)
            validation = _record(truth, nominal, check, noise, SEED + 100)
            for label, config in CONFIGS.items():
                started = time.perf_counter()
                result = identify(nominal, recording, replace(config, seed=SEED), validation=validation)
                elapsed = time.perf_counter() - started
                errors = _errors(result, truth)
                cells = "".join(f"{v:>13}" if isinstance(v, str) else f"{v:>13.3g}" for v in errors.values())
                print(f"  {scale:>5g}  {label:<24}{cells}{elapsed:>8.1f}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
