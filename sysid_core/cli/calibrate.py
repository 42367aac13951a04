"""``sysid-calibrate-effort``: per-joint effort gains of a Damiao arm (true joint torque / the
effort its motors report), from the same excitation recorded twice with damiao_bridge, alone and
with a known mass, and the command log of each run.

Exit status: 0 gains written (each good or doubtful), 2 bad input, 3 a gain not determined (no
file written), 130 interrupted.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

from ..dynamics.friction import JointModel
from ..dynamics.model import load_robot
from ..errors import DataError, IdentificationError, SysidError
from ..identification.actuator import (COM_NEEDED, CommandLog, KnownPayload, calibrate_effort_gains, estimate_delay,
                                       mit_loop_correction)
from ..identification.filtering import FilterConfig, prepare
from ..identification.identify import IdentificationConfig
from ..identification.recording_files import STAMPS, read_recordings

# a gain known to within this (one standard deviation, relative) is good; beyond FAILED_STD it
# is not known at all and no file is written
GOOD_STD = 0.01
FAILED_STD = 0.10
# a joint the payload barely loads: the gain is the payload's torque over what the motor
# reported of it, so errors of a torque estimate that scale with the motor's range (offsets,
# cogging, the feedback's 12-bit steps) weigh on it in proportion to TMAX / payload torque;
# under this share of TMAX (RMS) a gain is doubtful whatever its std says (joint5 of the
# OpenArm class with a 0.5 kg mass: 1.9 %, the others 3.1-5.4 %)
MIN_LOAD_OF_TMAX = 0.025
# the feedback's torque field: 12 bits over +-TMAX
TORQUE_STEPS = (1 << 12) - 1


def build_calibration_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sysid-calibrate-effort",
        description="Per-joint effort gains (true joint torque / reported effort) of a Damiao arm, from the same "
                    "excitation recorded twice with damiao_bridge, alone and with a known mass, and the command "
                    "logs the bridge saved (sysid/damiao/save_commands). Writes the gain file damiao_bridge "
                    "(effort_gains_file) and sysid-identify (--effort-gains) take.")
    parser.add_argument("model", type=Path, help="MJCF or URDF of the arm without the calibration mass")
    parser.add_argument("--recording", type=Path, required=True, metavar="FILE",
                        help="the arm alone: a rosbag2 bag (directory, .mcap, .db3) of JointState, or a .csv")
    parser.add_argument("--commands", type=Path, required=True, metavar="FILE",
                        help="the command log (.npz) saved by the bridge after --recording")
    parser.add_argument("--recording-with-mass", type=Path, required=True, metavar="FILE",
                        help="the same excitation with the mass fixed to --body")
    parser.add_argument("--commands-with-mass", type=Path, required=True, metavar="FILE",
                        help="the command log saved after --recording-with-mass")
    parser.add_argument("--mass", type=float, required=True, help="the added mass, kg (weighed)")
    parser.add_argument("--com", type=float, nargs=3, metavar=("X", "Y", "Z"),
                        help="its centre of mass in the frame of --body, m (needed: estimated from the same data, "
                             "it takes the gains' scale with it)")
    parser.add_argument("--body", help="the body the mass is fixed to (default: the model's terminal body)")
    parser.add_argument("--output", type=Path, default=Path("effort_gains.json"),
                        help="gain file to write (default ./effort_gains.json)")
    parser.add_argument("--mesh-dir", type=Path, help="mesh directory (default: the model's meshdir)")
    parser.add_argument("--topic", default="/joint_states", help="JointState topic in the bags (default /joint_states)")
    parser.add_argument("--stamps", choices=STAMPS, default="header",
                        help="header: the messages' header stamps (default, the clock of the command log); receive")
    parser.add_argument("--friction-model", default="tanh",
                        help="friction law of the arm during the calibration (default tanh; see sysid-identify)")
    parser.add_argument("--cutoff", type=float, default=10.0, help="low-pass cutoff of measured signals, Hz")
    parser.add_argument("--max-delay", type=float, default=0.05,
                        help="longest command-to-action delay searched, s (default 0.05)")
    return parser


def _torque_step(tau: np.ndarray) -> np.ndarray:
    """Per joint (n,), the smallest step between the distinct reported efforts: the feedback's
    quantum (12 bits of +-TMAX) in a recording of the bridge; tiny for unquantised data."""
    steps = []
    for column in np.asarray(tau, dtype=float).T:
        gaps = np.diff(np.unique(column))
        gaps = gaps[gaps > 1e-9 * max(float(np.abs(column).max()), 1e-12)]
        steps.append(float(gaps.min()) if gaps.size else 0.0)
    return np.array(steps)


def _calibration_data(args: argparse.Namespace, robot, recording_path: Path, log_path: Path):
    """(recording on the command log's clock, MIT-loop corrected; delay estimate) of one run."""
    loaded = read_recordings([recording_path], robot.joint_names, topic=args.topic, stamps=args.stamps)
    recording = dataclasses.replace(loaded.recording, time=loaded.recording.time + loaded.origins[0])
    commands = CommandLog.load(log_path)
    applied = CommandLog.saved_effort_gains(log_path)
    if not np.all(applied == 1.0):
        raise SysidError(f"{log_path}: the bridge applied effort gains {np.round(applied, 4).tolist()} while "
                         "logging; calibrate from recordings made without effort_gains_file (reported efforts)")
    commands = commands.select(robot.joint_names)
    overlap = min(recording.time[-1], commands.time[-1]) - max(recording.time[0], commands.time[0])
    if overlap <= 0:
        raise SysidError(f"{recording_path} ({recording.time[0]:.3f} to {recording.time[-1]:.3f} s) and the command "
                         f"log {log_path} ({commands.time[0]:.3f} to {commands.time[-1]:.3f} s) do not overlap in "
                         "time: save the commands right after recording (the bridge keeps command_log_seconds), "
                         "with the bag's header stamps (--stamps header)")
    try:
        delay = estimate_delay(recording, commands, args.max_delay, torque_resolution=_torque_step(recording.tau))
    except DataError as err:
        raise SysidError(f"{recording_path} with {log_path}: {err}") from None
    print(f"Read {recording_path}: {loaded.summary()}; {len(commands.time)} commands in {log_path}, "
          f"{1 / commands.period:.0f} Hz; delay {delay.delay * 1e3:.2f} ms "
          f"({int(delay.used.sum())} replies named their command)")
    return mit_loop_correction(recording, commands, delay.delay), delay, _torque_step(recording.tau)


def _payload_torque(robot, loaded, payload: KnownPayload, config: IdentificationConfig) -> np.ndarray:
    """Per joint (n,): RMS of the payload's known torque in the loaded recording, N m (centre
    of mass at the body origin when not given)."""
    samples = prepare(loaded, config.filter)
    t = robot.terminal_index
    columns = robot.regressor(samples.q, samples.dq, samples.ddq)[..., 10 * t:10 * t + 4]
    known = payload.mass * columns[..., 0] + columns[..., 1:4] @ (payload.mass * np.asarray(payload.com, dtype=float))
    return np.sqrt(np.mean(known ** 2, axis=0))


def calibrate(args: argparse.Namespace) -> int:
    """The calibration; exit status 0 (every gain good or doubtful: file written) or 3 (failed)."""
    for value, option, low in ((args.cutoff, "--cutoff", 0.0), (args.max_delay, "--max-delay", 0.0)):
        if not (math.isfinite(value) and value > low):
            raise SysidError(f"{option} must be a finite number > {low:g}, got {value:g}")
    if args.com is None:
        raise SysidError(f"--com X Y Z: {COM_NEEDED}")
    payload = KnownPayload(args.mass, tuple(args.com))
    if args.output.suffix.lower() != ".json" or not args.output.resolve().parent.is_dir():
        raise SysidError(f"--output {args.output}: a .json file in an existing directory")
    robot = load_robot(args.model, terminal_body=args.body, mesh_dir=args.mesh_dir)
    print(f"Loaded {args.model}: {robot.n_joints} joints, the mass on '{robot.terminal_body}'")
    config = IdentificationConfig(scope="full", estimator="wls",
                                  joint_model=JointModel(("coulomb", "viscous", "armature")),
                                  friction_models=args.friction_model, filter=FilterConfig(cutoff_hz=args.cutoff))
    alone, delay_alone, _ = _calibration_data(args, robot, args.recording, args.commands)
    loaded, delay_loaded, step = _calibration_data(args, robot, args.recording_with_mass, args.commands_with_mass)
    # TMAX from the feedback's quantum; unknown (NaN) for data that are not the motor's 12-bit replies
    tmax = np.where(step > 0, 0.5 * TORQUE_STEPS * step, np.nan)
    print(f"Calibrating ({payload.mass:g} kg at {list(payload.com)} m, friction {args.friction_model})", flush=True)
    try:
        gains = calibrate_effort_gains(robot, alone, loaded, payload, config,
                                       delay=0.5 * (delay_alone.delay + delay_loaded.delay))
    except DataError as err:
        print(f"error: calibration failed, {args.output} not written: {err}", file=sys.stderr)
        return 3
    share = _payload_torque(robot, loaded, payload, config) / tmax
    relative = gains.std / gains.gains
    verdicts = []
    for j, name in enumerate(robot.joint_names):
        why = []
        if relative[j] > FAILED_STD:
            why.append(f"std {relative[j]:.1%} > {FAILED_STD:.0%}: not determined")
        elif relative[j] > GOOD_STD:
            why.append(f"std {relative[j]:.2%} > {GOOD_STD:.0%}")
        if share[j] < MIN_LOAD_OF_TMAX:
            why.append(f"barely loaded: the mass makes {share[j]:.1%} of TMAX {tmax[j]:.3g} N m "
                       f"(< {MIN_LOAD_OF_TMAX:.1%})")
        level = "failed" if relative[j] > FAILED_STD else "doubtful" if why else "good"
        verdicts.append((level, "; ".join(why)))
    print(f"{'joint':<12} {'gain':>8} {'std':>8} {'std %':>7} {'load %':>7}  verdict "
          "(load: the mass's RMS torque over the motor's TMAX)")
    for j, name in enumerate(robot.joint_names):
        level, why = verdicts[j]
        print(f"{name:<12} {gains.gains[j]:8.4f} {gains.std[j]:8.4f} {100 * relative[j]:7.2f} {100 * share[j]:7.1f}  "
              + level + (f" ({why})" if why else ""))
    levels = {level for level, _ in verdicts}
    overall = "failed" if "failed" in levels else "doubtful" if "doubtful" in levels else "good"
    flagged = [f"{robot.joint_names[j]}: {why}" for j, (level, why) in enumerate(verdicts) if level != "good"]
    print(f"verdict: {overall}" + (f" ({'; '.join(flagged)})" if flagged else ""))
    if overall == "failed":
        print(f"error: effort gains not determined, {args.output} not written: mount the mass so that every joint "
              "feels it (off the wrist axes) and record longer or faster", file=sys.stderr)
        return 3
    dataclasses.replace(gains, source=f"{gains.source}; {args.recording}, {args.recording_with_mass}; "
                                      f"verdict {overall}" + (f" ({'; '.join(flagged)})" if flagged else "")
                        ).save(args.output)
    print(f"Effort gains written to {args.output}: damiao_bridge effort_gains_file:={args.output}, "
          f"or sysid-identify --effort-gains {args.output} for recordings of a bridge without it")
    return 0


def calibrate_main(argv=None) -> int:
    """``sysid-calibrate-effort``: exit 0 (gains written, good or doubtful), 2 bad input, 3 not determined."""
    args = build_calibration_parser().parse_args(argv)
    try:
        return calibrate(args)
    except KeyboardInterrupt:
        print("sysid-calibrate-effort: interrupted", file=sys.stderr)
        return 130
    except IdentificationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except (SysidError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


