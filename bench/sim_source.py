"""The sim source on the real-arm corpus: tracking, divergence, speed and the payload found.

For every published arm of test/models/real_arms (MuJoCo's 2 ms timestep, servo actuators,
gravcomp where published), carrying the payload of ``arm_corpus.with_payload`` that the
controller does not know:

* plan: the CLI's default excitation, a ``--duration`` multisine at 1 kHz capped at 2 rad/s and
  slowed until the nominal torques fit the file's actuator limits (``slow to``: the cap used);
* ``simulate`` (computed torque, what ``--source sim`` runs): the worst joint's RMS and peak
  tracking error, the peak torque use, and the wall time per simulated second;
* the former controller, PD gains from the diagonal of the mass matrix at qpos0 with the nominal
  feed-forward (``simulate_tracking`` + ``default_gains``), on the same plant at 1 kHz and at the
  file's own 2 ms step (500 Hz): ``diverged at t`` or its peak error;
* with ``--identify``: ``sysid-identify MODEL --truth-model PAYLOAD_MODEL`` (default options,
  ``--source sim``): the exit status and the payload's mass (percent of the terminal body with
  payload) and centre-of-mass errors.

Prints one row per arm; asserts nothing. Wall times are figures of the machine and its load.
Run: ``.venv/bin/python bench/sim_source.py [--duration 15] [--identify] [ARM ...]``.
"""
from __future__ import annotations

import argparse
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
sys.path.insert(0, str(ROOT / "test"))  # the corpus and its payload helper

from arm_corpus import ARMS, arm, with_payload  # noqa: E402
from sysid_core import load_robot  # noqa: E402
from sysid_core.cli import main as sysid_identify  # noqa: E402
from sysid_core.errors import TrackingError  # noqa: E402
from sysid_core.excitation.design import slow_to_torque_limits  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.simulation import default_gains, simulate, simulate_tracking  # noqa: E402

MAX_VELOCITY = 2.0  # rad/s, the CLI's default


def _former(truth: mujoco.MjModel, robot, rate: float, duration: float) -> str:
    """The former controller at ``rate`` Hz: 'diverged at t=..' or its peak tracking error."""
    plan = slow_to_torque_limits(lambda v: multisine(robot.joint_range, duration, rate, seed=0, max_velocity=v),
                                 robot, MAX_VELOCITY)[0]
    feedforward = robot.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    try:
        rec = simulate_tracking(truth, plan, feedforward, *default_gains(robot.model), seed=0)
    except TrackingError as err:
        if "diverged" in str(err):
            return f"diverged t={err.time:.2f} s"
        return f"refused ({err.joint}: {err.size:.2g})"
    return f"peak {np.abs(rec.q - plan.q).max():.2g} rad"


def _identify(path: Path, truth_xml: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        truth = Path(tmp) / "truth.xml"
        truth.write_text(truth_xml)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = sysid_identify([str(path), "--truth-model", str(truth), "--no-plots", "--output-dir", tmp])
        params = Path(tmp) / "params.json"
        if not params.exists():
            return f"exit {status}"
        error = json.loads(params.read_text())["error"]
        return f"exit {status}, mass {error['mass_percent']:.2f} %, CoM {error['com_error_mm']:.2f} mm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="*", help="corpus arm names (default: all)")
    parser.add_argument("--duration", type=float, default=15.0, help="excitation length, s (default 15)")
    parser.add_argument("--identify", action="store_true", help="also run sysid-identify --source sim")
    args = parser.parse_args()
    print(f"{'arm':14s} {'slow to':>8s} {'RMS err':>9s} {'peak err':>9s} {'worst joint':>14s} {'torque':>7s} "
          f"{'wall/sim':>8s}  former PD 1 kHz / 500 Hz" + ("  |  sysid-identify --source sim" if args.identify else ""))
    for corpus_arm in [arm(name) for name in args.arms] if args.arms else ARMS:
        robot = load_robot(corpus_arm.path)
        payload = with_payload(corpus_arm.path)
        truth = mujoco.MjModel.from_xml_string(payload.xml)
        plan, velocity, _ = slow_to_torque_limits(
            lambda v: multisine(robot.joint_range, args.duration, 1000.0, seed=0, max_velocity=v), robot, MAX_VELOCITY)
        started = time.perf_counter()
        try:
            quality = simulate(truth, plan, nominal=robot.model, seed=0).quality
        except TrackingError as err:
            print(f"{corpus_arm.name:14s} {velocity:8.3g} refused: {err}")
            continue
        wall = (time.perf_counter() - started) / args.duration
        j = int(np.argmax(quality.max_error / quality.tolerance))
        row = (f"{corpus_arm.name:14s} {velocity:8.3g} {quality.rms_error[j]:9.2g} {quality.max_error[j]:9.2g} "
               f"{quality.joint_names[j]:>14.14s} {quality.torque_usage.max():7.0%} {wall:8.3f}  "
               f"{_former(truth, robot, 1000.0, args.duration)} / {_former(truth, robot, 500.0, args.duration)}")
        if args.identify:
            row += f"  |  {_identify(corpus_arm.path, payload.xml)}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
