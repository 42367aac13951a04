"""The figures the verdict is computed from, on good runs and on deliberately bad ones.

For every arm of the real-arm corpus (test/models/real_arms, a payload welded to its terminal
body by test/arm_corpus.with_payload) and the two bundled arms, an 8 s multisine at 500 Hz is
recorded from the truth model and identified with the nominal model (terminal scope; each
case with WLS alone and with the consistent estimator, the CLI's default, marked /c):

``good``        the run as a user makes it: MuJoCo's inverse dynamics of the truth along the plan
                with the default measurement noise (MeasurementNoise()) on q, dq and tau, and no
                accelerations (the filter pipeline derives them);
``noise x100``, ``noise x1e6``  the same with 100 and a million times the noise;
``no motion``   the speed cap at 1e-9 rad/s (the arm does not move);
``swapped``     the torques of two joints exchanged (a wiring or naming mistake);
``wrong arm``   the nominal model's known links 30 % heavier than the truth's.

It prints one row per run (the verdict and its figures: pooled held-out relative RMSE,
scaled condition number, lowest per-joint motion-to-noise ratio, the terminal mass's relative
standard deviation and the CoM's standard deviation, the consistent step's shift per base
parameter in standard deviations, and the true errors of mass and CoM) and,
per figure, the range over the good runs against the range over each kind of bad run: the
thresholds in sysid_core/identification/verdict.py sit between them. Asserts nothing.

With ``--full`` the same runs identify the full scope (base parameters, always made physically
consistent; the good, noise x100, swapped and wrong-arm kinds).

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/verdict_thresholds.py [--full] [arm ...]``
(about 4 minutes for all arms in the terminal scope on a loaded 2-core machine; OpenBLAS's
threads make the small solves here ten times slower when the cores are busy).
"""
from __future__ import annotations

import copy
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from arm_corpus import ARMS, with_payload  # noqa: E402
from sysid_core import load_robot  # noqa: E402
from sysid_core.dynamics.joint_physics import MujocoPhysics  # noqa: E402
from sysid_core.errors import SysidError  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.identification.recording import Recording  # noqa: E402
from sysid_core.simulation import MeasurementNoise, ideal_recording, measure  # noqa: E402

DURATION_S, RATE_HZ = 8.0, 500.0
BUNDLED = {"panda_class": "panda_class_payload", "openarm_class": "openarm_class_payload"}
KINDS = ("good", "noise x100", "noise x1e6", "no motion", "swapped", "wrong arm")
# every kind with WLS alone and with the consistent estimator ("/c"), whose result is
# always physical: what catches a bad run when the physical-consistency check cannot
CASES = tuple(k + suffix for k in KINDS for suffix in ("", "/c"))


def _arms(names):
    """(name, nominal path, truth path, payload parameters or None) of the arms to run."""
    out = []
    work = Path(tempfile.mkdtemp(prefix="verdict_bench_"))
    for arm in ARMS:
        if names and arm.name not in names:
            continue
        payload = with_payload(arm.path)
        truth = work / f"{arm.name}_payload.xml"
        truth.write_text(payload.xml)
        out.append((arm.name, arm.path, truth, payload.parameters))
    for name, truth in BUNDLED.items():
        if not names or name in names:
            out.append((name, ROOT / "config" / "robots" / f"{name}.xml",
                        ROOT / "config" / "robots" / f"{truth}.xml", None))
    return out


def _noisy(recording: Recording, scale: float, seed: int) -> Recording:
    noise, gen = MeasurementNoise(), np.random.default_rng(seed)
    return Recording(recording.time, measure(recording.q, scale * noise.q_std, 0.0, gen),
                     measure(recording.dq, scale * noise.dq_std, 0.0, gen),
                     measure(recording.tau, scale * noise.tau_std, 0.0, gen), recording.joint_names)


def _heavier(robot):
    """The nominal robot with every body but the terminal one 30 % heavier (mass, h, I)."""
    wrong = copy.copy(robot)
    theta = robot.nominal_parameters.copy()
    others = [i for i in range(robot.n_bodies) if i != robot.terminal_index]
    theta[others] *= 1.3
    object.__setattr__(wrong, "nominal_parameters", theta)
    return wrong


def _run(name, nominal_path, truth_path, case, scope="terminal", seed=0):
    case, consistent = case.removesuffix("/c"), case.endswith("/c")
    robot = load_robot(nominal_path)
    truth = load_robot(truth_path, terminal_body=robot.terminal_body)
    speed = 1e-9 if case == "no motion" else 2.0
    plan = multisine(robot.joint_range, DURATION_S, RATE_HZ, seed=seed, max_velocity=speed)
    check = multisine(robot.joint_range, 5.0, RATE_HZ, seed=seed + 1000, max_velocity=speed)
    scale = {"noise x100": 100.0, "noise x1e6": 1e6}.get(case, 1.0)
    recording = _noisy(ideal_recording(truth.model, plan, truth.joint_names), scale, seed)
    validation = _noisy(ideal_recording(truth.model, check, truth.joint_names), scale, seed + 1)
    if case == "swapped":
        swap = lambda r: Recording(r.time, r.q, r.dq, r.tau[:, [1, 0] + list(range(2, r.tau.shape[1]))],  # noqa: E731
                                   r.joint_names)
        recording, validation = swap(recording), swap(validation)
    if case == "wrong arm":
        robot = _heavier(robot)
    config = IdentificationConfig(scope=scope, physics=MujocoPhysics.inverse(truth.model),
                                  estimator="consistent" if consistent else "wls")
    result = identify(robot, recording, config, validation=validation)
    e = result.verdict.evidence
    true = truth.nominal_parameters[truth.terminal_index]
    got = result.terminal_parameters
    mass_err = 100.0 * (got[0] - true[0]) / true[0]
    com_err = 1000.0 * np.linalg.norm(got[1:4] / got[0] - true[1:4] / true[0]) if got[0] > 0 else np.inf
    missing = np.inf if scope == "terminal" else np.nan  # the full scope has no payload figures
    shift = np.nan if e.consistency_distance is None else e.consistency_distance / np.sqrt(result.base.rank)
    return result.verdict, {"relative_rmse": e.relative_rmse, "condition": e.condition_number,
                            "motion_snr": float(np.min(e.motion_snr)),
                            "mass_std_%": missing if e.mass_relative_std is None else 100 * e.mass_relative_std,
                            "com_std_mm": missing if e.com_std_mm is None else e.com_std_mm, "shift": shift,
                            "mass_err_%": mass_err, "com_err_mm": com_err}


def main(names, scope="terminal") -> None:
    cases = CASES if scope == "terminal" else ("good", "noise x100", "swapped", "wrong arm")
    rows = []
    print(f"{'arm':15s} {'case':13s} {'verdict':8s} {'rel.RMSE':>9s} {'cond':>9s} {'min SNR':>9s} {'mass std%':>9s} "
          f"{'CoM std mm':>10s} {'shift':>9s} {'mass err%':>9s} {'CoM err mm':>10s}  first reason", flush=True)
    for name, nominal, truth, _ in _arms(names):
        for case in cases:
            started = time.perf_counter()
            try:
                verdict, figures = _run(name, nominal, truth, case, scope)
            except SysidError as err:
                print(f"{name:15s} {case:13s} error: {err}", flush=True)
                continue
            rows.append((case, verdict.level, figures))
            f = figures
            print(f"{name:15s} {case:13s} {verdict.level:8s} {f['relative_rmse']:9.3g} {f['condition']:9.3g} "
                  f"{f['motion_snr']:9.3g} {f['mass_std_%']:9.3g} {f['com_std_mm']:10.3g} {f['shift']:9.3g} {f['mass_err_%']:+9.3g} "
                  f"{f['com_err_mm']:10.3g}  {(verdict.reasons or ('',))[0][:90]} ({time.perf_counter() - started:.1f} s)",
                  flush=True)
    print("\nper figure: range over the good runs, and over each kind of bad run")
    for key in ("relative_rmse", "condition", "motion_snr", "mass_std_%", "com_std_mm", "shift"):
        parts = []
        for case in cases:
            values = [r[2][key] for r in rows if r[0] == case and not np.isnan(r[2][key])]
            if values:
                parts.append(f"{case} {min(values):.3g}..{max(values):.3g}")
        print(f"  {key:14s} " + "; ".join(parts))
    print("\nverdicts: " + "; ".join(
        f"{case}: " + ", ".join(f"{lvl} {sum(1 for r in rows if r[0] == case and r[1] == lvl)}"
                                for lvl in ("good", "doubtful", "failed")) for case in cases))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main({a for a in arguments if a != "--full"}, "full" if "--full" in arguments else "terminal")
