"""Identification on hardware-like recordings of the real-arm corpus, against what the arm really is.

For each arm of test/arm_corpus.py, each controller and each scope, test/hardware_corpus.py
simulates the arm as hardware (a welded payload, joint friction with a Stribeck peak on every
third arm, rotor armature, PD + feed-forward tracking from the nominal model, one sample of
feedback delay under the MIT law, per-joint measurement noise, optionally Damiao quantisation).
The user's model is the published file without joint friction, damping and armature. It is
identified from the first 75 % of the recording and validated on the last 25 %, with the
default options (``default``: the coulomb_viscous law) and with the friction law of the plant's
form (``matched``: tanh, or stribeck_tanh on a Stribeck arm; hardware_corpus.MATCHED_LAW).

Printed per run: the worst Coulomb and viscous errors relative to the truth over the joints,
the worst relative armature error over the joints whose armature is a base parameter of its own
(how many of n), the payload's mass (%) and centre-of-mass (mm) errors, the validation relative
RMSE, the verdict, and what is beyond hardware_corpus's tolerances (friction 10 % + 0.03,
armature 15 %, payload 3 % and 5 mm). Asserts nothing.

Run: ``.venv/bin/python bench/hardware_recordings.py [--arms gen3 z1] [--laws matched] [--quantised]``
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# many small solves: BLAS threads buy nothing here and cost a lot on a busy machine
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from arm_corpus import ARMS  # noqa: E402
from hardware_corpus import CONTROLLERS, DEFAULT_DURATION, MATCHED_LAW, errors, hardware_recording  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402

SCOPES = ("terminal", "full")
LAWS = ("default", "matched")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", metavar="ARM", help="corpus arms (default: all 17)")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION,
                        help=f"recording length, s, the last 25 %% held out (default {DEFAULT_DURATION:g})")
    parser.add_argument("--controllers", nargs="+", choices=CONTROLLERS, default=list(CONTROLLERS))
    parser.add_argument("--scopes", nargs="+", choices=SCOPES, default=list(SCOPES))
    parser.add_argument("--laws", nargs="+", choices=LAWS, default=list(LAWS))
    parser.add_argument("--quantised", action="store_true", help="Damiao MIT feedback resolutions")
    parser.add_argument("--seed", type=int, default=0, help="plan and noise seed (the truth is the arm's)")
    args = parser.parse_args(argv)
    known = [a.name for a in ARMS]
    unknown = sorted(set(args.arms or ()) - set(known))
    if unknown:
        parser.error(f"unknown arms {unknown}; corpus arms: {known}")
    arms = [name for name in known if not args.arms or name in args.arms]

    directory = Path(tempfile.mkdtemp(prefix="hardware_recordings_"))
    print(f"{args.duration:g} s at 1 kHz, seed {args.seed}{', quantised' if args.quantised else ''}")
    print(f"{'arm':13s} {'controller':13s} {'plant':8s} {'law':13s} {'scope':8s} {'coulomb':>7s} {'viscous':>7s} "
          f"{'armature':>8s} {'own':>4s} {'mass %':>7s} {'CoM mm':>6s} {'val rel':>7s} {'id s':>5s}  verdict; beyond",
          flush=True)
    tally = {}  # (law, scope) -> [runs, within every tolerance, verdict good]
    for name in arms:
        for controller in args.controllers:
            case = hardware_recording(name, directory, controller, duration=args.duration, quantised=args.quantised,
                                      seed=args.seed)
            robot = case.robot()
            train, validation = case.split()
            for law in args.laws:
                friction = MATCHED_LAW[case.stribeck] if law == "matched" else "coulomb_viscous"
                for scope in args.scopes:
                    started = time.perf_counter()
                    result = identify(robot, train, IdentificationConfig(scope=scope, friction_models=friction),
                                      validation=validation)
                    wall = time.perf_counter() - started
                    found = errors(case, robot, result)
                    beyond = found.failures(case)
                    own = np.isfinite(found.armature)
                    counts = tally.setdefault((law, scope), [0, 0, 0])
                    counts[0] += 1
                    counts[1] += not beyond
                    counts[2] += result.verdict.level == "good"
                    print(f"{name:13s} {controller:13s} {'stribeck' if case.stribeck else 'cv':8s} {friction:13s} "
                          f"{scope:8s} {np.max(found.coulomb / case.coulomb):7.1%} "
                          f"{np.max(found.viscous / case.viscous):7.1%} "
                          f"{np.max(found.armature[own]) if own.any() else np.nan:8.1%} {own.sum():>2d}/{own.size} "
                          f"{100 * found.mass:+7.2f} {found.com_mm:6.2f} "
                          f"{result.metrics.validation_relative_rmse:7.4f} {wall:5.2f}  {result.verdict.level}"
                          f"{'; ' + ', '.join(beyond) if beyond else ''}", flush=True)
    print()
    for (law, scope), (runs, within, good) in tally.items():
        print(f"summary: {law} law, {scope} scope: {within}/{runs} runs within every tolerance, {good}/{runs} "
              "verdicts good")
    return 0


if __name__ == "__main__":
    sys.exit(main())
