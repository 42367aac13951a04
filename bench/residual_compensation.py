"""Residual compensation and transmission stiffness on elastic arms of the corpus, against their truth.

For each arm, ``sysid_core.simulation.elastic`` simulates it with an elastic transmission at
every joint and a gearbox the rigid model does not know: friction growing with the transmitted
torque (``LOAD_FRICTION`` of it, sign of the rotor's velocity) and a cogging ripple on the rotor
(``RIPPLE`` of the joint's RMS torque, 8 periods per radian). Each joint's stiffness makes its
RMS deflection about ``DEFLECTION`` rad under the excitation (a harmonic drive's few arcminutes),
its damping 5 % of critical for the rotor. Two multisine recordings (default measurement noise,
both encoders): training, seed 0, ``--training-duration`` s (default 90: a gearbox's ripple and
load friction span the whole joint space, which a half-minute multisine covers thinly), and
validation, seed 1, ``--duration`` s; they go through ``sysid-identify --recording train.csv
--validation-recording val.csv --residual gmm`` with default options. The multisines peak at
MAX_VELOCITY rad/s, or slower for an arm whose motors could not follow (column ``rad/s``: the
rigid inverse dynamics of each plan within TORQUE_MARGIN of the actuator limits).

Printed per arm: the worst stiffness error over the joints whose standard deviation is under
1.25 % (how many of n) and over all joints; the pooled validation RMSE without and with the
residual model and its reduction; per joint the reduction. Two more rows per arm: ``rigid``, the
plain arm simulated (MuJoCo's soft friction loss, which the default Coulomb-viscous law only
approximates: structure a residual model may rightly take up), and ``explained``, MuJoCo's
inverse dynamics of the arm without joint friction plus noise (nothing but noise is left: the
residual model must change nothing there). Asserts nothing.

Run: ``.venv/bin/python bench/residual_compensation.py [--arms openarm_class xarm7 ur5e] [--duration 30]
[--training-duration 90]``
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sysid_core.cli import main as sysid_identify  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.errors import TrackingError  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification import recording_files  # noqa: E402
from sysid_core.identification.recording import Recording  # noqa: E402
from sysid_core.simulation import (ComputedTorque, MeasurementNoise, ideal_recording, simulate,  # noqa: E402
                                   torque_limits)
from sysid_core.simulation.elastic import Transmission, simulate_elastic  # noqa: E402

ARMS = {"openarm_class": ROOT / "config" / "robots" / "openarm_class.xml",
        **{p.stem: p for p in sorted((ROOT / "test" / "models" / "real_arms").glob("*.xml"))}}
DEFLECTION = 1e-3  # rad RMS
LOAD_FRICTION = 0.04
RIPPLE = 0.02
RATE = 1000.0
MAX_VELOCITY = 1.0
# the excitation is slowed (by SLOW_DOWN steps) until the rigid inverse dynamics of every plan
# stays within this fraction of the arm's actuator limits: the simulated arm refuses a motion
# its motors cannot make (the UR5e's shoulder at 1 rad/s over its wide range)
TORQUE_MARGIN = 0.9
SLOW_DOWN = 0.9


def _gearbox(scale: np.ndarray):
    def torque(theta, dtheta, link):
        return -LOAD_FRICTION * np.abs(link) * np.tanh(dtheta / 0.05) + RIPPLE * scale * np.sin(8 * theta)
    return torque


def _recordings(duration: float, training: float) -> list:
    """(file stem, duration s, multisine seed, noise seed) of the training and validation recordings."""
    return [("train", training, 0, 10), ("val", duration, 1, 11)]


def _plans(robot, duration: float, training: float) -> tuple:
    """The multisines of ``_recordings`` (a list) and their max velocity, rad/s: MAX_VELOCITY
    or slower, until the rigid inverse dynamics of each plan (every 10th sample) needs at most
    TORQUE_MARGIN of the actuator limits."""
    inverse, limit = ComputedTorque(robot.model, RATE), torque_limits(robot.model)
    velocity = MAX_VELOCITY
    while True:
        plans = [multisine(robot.joint_range, length, RATE, seed=seed, max_velocity=velocity)
                 for _, length, seed, _ in _recordings(duration, training)]
        peak = np.max([np.abs([inverse.torque(q, dq, q, dq, ddq) for q, dq, ddq in
                               zip(p.q[::10], p.dq[::10], p.ddq[::10])]).max(axis=0) for p in plans], axis=0)
        if np.all(peak <= TORQUE_MARGIN * limit) or velocity < 0.1:
            return plans, velocity
        velocity *= SLOW_DOWN


def elastic_case(path: Path, duration: float, training: float, out: Path) -> dict:
    robot = load_robot(path)
    n = robot.n_joints
    runs = _recordings(duration, training)
    plans, velocity = _plans(robot, duration, training)
    inverse = ComputedTorque(robot.model, RATE)
    plan = plans[0]
    load = np.sqrt(np.mean([inverse.torque(q, dq, q, dq, ddq) ** 2 for q, dq, ddq in
                            zip(plan.q[::20], plan.dq[::20], plan.ddq[::20])], axis=0))
    stiffness = np.maximum(load / DEFLECTION, 20.0)
    rotor = np.where(robot.armature > 0, robot.armature, 1e-3 * np.maximum(load, 0.1))
    damping = 0.1 * np.sqrt(stiffness * rotor)
    transmission = Transmission(stiffness, damping, rotor)
    for (name, _, _, seed), plan in zip(runs, plans):
        recording = simulate_elastic(path, plan, transmission, robot.model, seed=seed, rotor_torque=_gearbox(load))
        recording_files.write_csv(out / f"{name}.csv", recording)
    document = _identify(path, out)
    k = np.array([j["transmission_stiffness"] if j["transmission_stiffness"] is not None else np.nan
                  for j in document["joints"]])
    std = np.array([j["transmission_stiffness_std"] if j["transmission_stiffness_std"] is not None else np.nan
                    for j in document["joints"]])
    error = np.abs(k / stiffness - 1)
    determined = std / stiffness < 0.0125
    return {"n": n, "error_determined": float(np.nanmax(error[determined])) if determined.any() else float("nan"),
            "determined": int(determined.sum()), "error_all": float(np.nanmax(error)), "velocity": velocity,
            **_residual(document)}


def rigid_case(path: Path, duration: float, training: float, out: Path) -> dict:
    """The plain arm simulated (MuJoCo's joint friction, which the default law approximates)."""
    robot = load_robot(path)
    plans, velocity = _plans(robot, duration, training)
    for (name, _, _, noise_seed), plan in zip(_recordings(duration, training), plans):
        recording_files.write_csv(out / f"{name}.csv", simulate(robot.model, plan, seed=noise_seed).recording)
    return {"n": robot.n_joints, "velocity": velocity, **_residual(_identify(path, out))}


def explained_case(path: Path, duration: float, training: float, out: Path) -> dict:
    """Data the rigid model explains but for the noise: MuJoCo's inverse dynamics of the arm
    without joint friction along the plan, the default measurement noise added."""
    robot = load_robot(path)
    model = copy.deepcopy(robot.model)
    model.dof_frictionloss[:] = model.dof_damping[:] = 0.0
    noise, rng = MeasurementNoise(), np.random.default_rng(3)
    plans, velocity = _plans(robot, duration, training)
    for (name, _, _, _), plan in zip(_recordings(duration, training), plans):
        exact = ideal_recording(model, plan, robot.joint_names)
        noisy = [a + s * rng.standard_normal(a.shape) for a, s in
                 ((exact.q, noise.q_std), (exact.dq, noise.dq_std), (exact.tau, noise.tau_std))]
        recording_files.write_csv(out / f"{name}.csv", Recording(exact.time, *noisy, exact.joint_names))
    return {"n": robot.n_joints, "velocity": velocity, **_residual(_identify(path, out))}


def _identify(path: Path, out: Path) -> dict:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = sysid_identify([str(path), "--recording", str(out / "train.csv"), "--validation-recording",
                                 str(out / "val.csv"), "--residual", "gmm", "--no-plots", "--output-dir",
                                 str(out / "result")])
    if status not in (0, 3):  # 3: a failed verdict still writes params.json, residual block included
        raise RuntimeError(f"sysid-identify exited {status}")
    return json.loads((out / "result" / "params.json").read_text())


def _residual(document: dict) -> dict:
    joints = document["residual"]["joints"]
    without = np.array([j["validation_rmse"]["without"] for j in joints])
    with_model = np.array([j["validation_rmse"]["with"] for j in joints])
    return {"without": float(np.sqrt(np.mean(without ** 2))), "with": float(np.sqrt(np.mean(with_model ** 2))),
            "per_joint": 1 - with_model / without, "applied": sum(j["applied"] for j in joints),
            "verdict": document["verdict"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=["openarm_class", "xarm7", "ur5e"], choices=sorted(ARMS))
    parser.add_argument("--duration", type=float, default=30.0, help="each recording, s (default 30)")
    parser.add_argument("--training-duration", type=float, default=90.0,
                        help="the training recording, s (default 90)")
    args = parser.parse_args()
    print(f"{args.training_duration:g} s train + {args.duration:g} s validation per arm at {RATE:g} Hz; stiffness for "
          f"{DEFLECTION * 1e3:g} mrad RMS deflection; gearbox: {LOAD_FRICTION:g} x |tau_link| friction, "
          f"{RIPPLE:g} x RMS torque ripple")
    print(f"{'arm':<14} {'case':<8} {'k err (det.)':>13} {'k err (all)':>11} {'val RMSE without':>16} "
          f"{'with':>8} {'reduction':>9} {'applied':>7} {'rad/s':>5}  per joint")
    for name in args.arms:
        for case, run in (("elastic", elastic_case), ("rigid", rigid_case), ("explained", explained_case)):
            began = time.perf_counter()
            try:
                with tempfile.TemporaryDirectory() as out:
                    r = run(ARMS[name], args.duration, args.training_duration, Path(out))
            except TrackingError as err:  # the rigid arm's simulation checks its limits
                print(f"{name:<14} {case:<8} not run: {err}", flush=True)
                continue
            k = (f"{100 * r['error_determined']:>6.2f} % ({r['determined']}/{r['n']})" if "determined" in r
                 else f"{'-':>13}")
            k_all = f"{100 * r['error_all']:>9.1f} %" if "error_all" in r else f"{'-':>11}"
            print(f"{name:<14} {case:<8} {k:>13} {k_all:>11} {r['without']:>14.4f} N m {r['with']:>8.4f} "
                  f"{100 * (1 - r['with'] / r['without']):>8.1f} % {r['applied']:>4}/{r['n']} {r['velocity']:>5.2f}  "
                  + " ".join(f"{100 * x:.0f}" for x in r["per_joint"])
                  + f"  verdict {r['verdict']} ({time.perf_counter() - began:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
