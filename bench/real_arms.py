"""The real-arm acceptance table: sysid-identify on every arm of the real-arm corpus, as a user runs it.

For each arm of test/models/real_arms (the file as published, unedited) a payload is welded to
its terminal body by test/arm_corpus.with_payload (tilted frame, offset centre of mass, full
inertia; about 5 % of the arm's moving mass) and written as the truth model. Then, through the
console script's own entry point (sysid_core.cli.main, default options unless named):

``ideal``  ``MODEL --truth-model TRUTH --source ideal``: mj_inverse of the truth along the plan;
``sim``    ``MODEL --truth-model TRUTH``: the default sim source (forward simulation under
           computed-torque control, measurement noise, 15 s at 1 kHz);
``full``   ``MODEL --truth-model TRUTH --scope full``: base parameters of the whole arm.

Printed per arm: the payload's mass error (%) and centre-of-mass error (mm) for ideal and sim
(the identified terminal body minus the model's own link, params.json's ``payload.added``,
against the welded payload), each run's verdict and exit status, the full scope's number of
inertial and armature base parameters against Pinocchio's regressor rank (with an armature
column per joint; one fewer where the file's rounded right angle leaves a dependency broken below
base_parameters.RANK_TOLERANCE, test_real_arm_models.ROUNDED_RIGHT_ANGLES), its Coulomb and
viscous ones against the two per joint (MuJoCo's soft frictionloss: a level that never saturates
in the arm's speed range is a combination of the others), whether its updated_model.xml compiles in MuJoCo, and the wall
time of each run (in process: imports excluded). Targets (TARGETS): ideal 0.5 % / 1 mm, sim
3 % / 5 mm. Asserts nothing.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/real_arms.py [arm ...]``
(about 10 minutes for the 17 arms on a quiet 2-core machine).
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

import pinocchio as pin  # noqa: E402

from arm_corpus import ARMS, with_payload  # noqa: E402
from sysid_core.cli import main as sysid_identify  # noqa: E402
from test_real_arm_models import ROUNDED_RIGHT_ANGLES, _pinocchio_rank  # noqa: E402

TARGETS = {"ideal": (0.5, 1.0), "sim": (3.0, 5.0)}  # mass %, CoM mm


def _run(arguments: list, output: Path) -> tuple[int, dict, float]:
    """(exit status, params.json or {}, wall s) of one sysid-identify run, its printout swallowed."""
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = sysid_identify([str(a) for a in arguments] + ["--no-plots", "--output-dir", str(output)])
    params = output / "params.json"
    return status, json.loads(params.read_text()) if params.is_file() else {}, time.perf_counter() - started


def _payload_errors(document: dict, payload: np.ndarray) -> tuple[float, float]:
    """Mass error % and CoM error mm of params.json's added body against the true payload."""
    added = document.get("payload", {}).get("added")
    if not added:
        return np.nan, np.nan
    mass = added["mass"]
    com = np.asarray(added["center_of_mass"], dtype=float)
    return 100.0 * (mass - payload[0]) / payload[0], 1000.0 * np.linalg.norm(com - payload[1:4] / payload[0])


def _base_counts(document: dict) -> tuple[int, int]:
    """(base parameters led by a body's inertial parameter or an armature, those led by a
    Coulomb or viscous term) of a full-scope params.json: the first is what Pinocchio's
    regressor with an armature column per joint can count; -1, -1 without a result."""
    names = [p["name"] for p in document.get("base_parameters", [])]
    if not names:
        return -1, -1
    joint = sum(name.rpartition(".")[2] in ("coulomb", "viscous") for name in names)
    return len(names) - joint, joint


def _compiles(path: Path) -> str:
    if not path.is_file():
        return "none"
    try:
        mujoco.MjModel.from_xml_path(str(path))
    except ValueError as err:
        return f"rejected ({str(err).splitlines()[0][:40]})"
    return "yes"


def main(names) -> None:
    work = Path(tempfile.mkdtemp(prefix="real_arms_bench_"))
    print(f"{'arm':14s} {'ideal mass%':>11s} {'CoM mm':>7s} {'verdict':>9s} {'sim mass%':>10s} {'CoM mm':>7s} "
          f"{'verdict':>9s} {'full/pin':>9s} {'fric/2n':>8s} {'verdict':>9s} {'compiles':>8s} "
          f"{'wall ideal/sim/full s':>22s}", flush=True)
    misses = []
    for arm in ARMS:
        if names and arm.name not in names:
            continue
        payload = with_payload(arm.path)
        truth = work / f"{arm.name}_payload.xml"
        truth.write_text(payload.xml)
        cells, walls = [], []
        for case, extra in (("ideal", ["--source", "ideal"]), ("sim", []), ("full", ["--scope", "full"])):
            out = work / arm.name / case
            status, document, wall = _run([arm.path, "--truth-model", truth, *extra], out)
            walls.append(wall)
            verdict = f"{document.get('verdict', '-')}/{status}"
            if case == "full":
                robot_model = mujoco.MjModel.from_xml_path(str(arm.path))
                rank, _, _ = _pinocchio_rank(pin.buildModelFromMJCF(str(arm.path)), robot_model)
                rigid, joint = _base_counts(document)
                compiles = _compiles(out / 'updated_model.xml')
                cells.append(f"{f'{rigid}/{rank}':>9s} {f'{joint}/{2 * robot_model.nv}':>8s} {verdict:>9s} "
                             f"{compiles:>8s}")
                # less the dependencies a rounded right angle in the file breaks below our rank tolerance
                if rigid != rank - ROUNDED_RIGHT_ANGLES.get(arm.name, 0) or status != 0 or compiles != "yes":
                    misses.append(f"{arm.name} full")
                continue
            mass, com = _payload_errors(document, payload.parameters)
            width = 11 if case == "ideal" else 10
            cells.append(f"{mass:+{width}.3f} {com:7.3f} {verdict:>9s}")
            if not (abs(mass) <= TARGETS[case][0] and com <= TARGETS[case][1] and status == 0):
                misses.append(f"{arm.name} {case}")
        print(f"{arm.name:14s} {' '.join(cells)} {'/'.join(f'{w:.1f}' for w in walls):>22s}", flush=True)
    print("\nverdict/exit status per run; targets: ideal 0.5 % and 1 mm, sim 3 % and 5 mm, full: as many inertial "
          "and armature base parameters as Pinocchio's rank (full/pin; one fewer on piper and doosan_m1013, whose "
          "files round a right angle) and a model MuJoCo compiles; fric/2n the "
          "Coulomb and viscous ones against two per joint (fewer where a frictionloss never saturates)")
    print("off target: " + (", ".join(misses) if misses else "none"))


if __name__ == "__main__":
    main(set(sys.argv[1:]))
