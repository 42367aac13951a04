"""``sysid-identify``: identify an arm's payload and dynamics offline, from MuJoCo or from recordings.

The model is an MJCF or a URDF. With ``--recording`` (rosbag2 bags, CSV files) the data come
from the files and no simulation runs; otherwise from a MuJoCo simulation of the excitation.

Exit status: 0 on success (verdict good or doubtful), 2 for bad input (model, options,
data), 3 when the identification is ill-posed, its verdict is failed (then no updated model
is written; params.json says why) or its result would be unphysical (nothing unphysical
is ever written into a model file), or when the simulated arm did not make the planned
run (diverged, left its plan, saturated or hit a limit: ``TrackingError``), 130 when
interrupted (Ctrl-C).

Bad input is found before any work: every numeric option is checked, the output directory
must take files, the run must fit the machine's memory, and a replayed trajectory must lie
within the joint limits with derivatives that match its positions. The output directory
never mixes runs: the files of a previous run are removed just before this run writes its
first one.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

# The command line renders nothing. Without a GL backend MuJoCo's import skips GLFW, which
# starts a Python subprocess to read the library's version (about 0.07 s of every run). Set
# before MuJoCo is first imported (below); a MUJOCO_GL of the user's own is kept.
os.environ.setdefault("MUJOCO_GL", "disable")

import numpy as np  # noqa: E402 (after the GL backend)

from ..damiao.protocol import motor_limits
from ..dynamics.friction import FrictionSelection, JointModel, friction_torque
from ..dynamics.joint_physics import MujocoPhysics
from ..dynamics.model import load_robot
from ..errors import DataError, IdentificationError, SysidError, TrackingError
from ..excitation.criteria import CRITERIA
from ..excitation.friction_sweep import friction_sweep
from ..excitation.design import TORQUE_USAGE, optimize_excitation, slow_to_torque_limits
from ..excitation.multistart import search_workers
from ..excitation.multisine import multisine
from ..excitation.trajectory import load_trajectory, resample, sample_rate as trajectory_rate, save_trajectory
from ..identification.actuator import EffortGains, apply_effort_gains
from ..identification.filtering import FilterConfig
from ..identification.friction_curve import fit_friction_curves, friction_points
from ..identification.known_friction import (extrapolated_share, from_sweep, identify_with_known_friction,
                                            subtract_known, without_model_friction)
from ..identification.identify import (ESTIMATORS, SCOPES, IdentificationConfig, column_names, identify,
                                      on_hardware, predict_torque)
from ..identification.memory import FIXED_BYTES as _FIXED_BYTES, available_memory, memory_needed
from ..identification.memory import describe_bytes as _bytes
from ..identification.recording_files import STAMPS, read_recordings
from ..identification.residual import compensate
from ..identification.screening import lost_sample_notes, missing_in_stretches
from ..results.friction_report import (annotate_params, chosen_laws, format_friction, read_friction_sweep,
                                      write_friction_sweep)
from ..results.export import add_transmission, params_document, write_damiao_csv, write_params_json
from ..results.payload import frame_pose
from ..results.urdf_export import write_updated_robot
from ..results.plots import write_plots
from ..results.html_report import write_html_report
from ..results.report import format_result
from ..simulation import MeasurementNoise, ideal_recording, simulate, simulation_timing
from ..simulation.elastic import Gearbox, Transmission, simulate_elastic


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sysid-identify",
        description="Identify the terminal body (link + payload) or the whole arm of a MuJoCo or URDF "
                    "model, and joint friction, from a simulated excitation or from recordings.")
    parser.add_argument("model", type=Path, help="MJCF or URDF of the arm as you believe it is (the nominal model)")
    parser.add_argument("--mesh-dir", type=Path, help="mesh directory (default: the model's meshdir)")
    parser.add_argument("--duration", type=float, default=15.0, help="excitation length, s (default 15)")
    parser.add_argument("--sample-rate", type=float, default=1000.0, help="samples per second, Hz (default 1000)")
    parser.add_argument("--no-friction", action="store_true",
                        help="do not identify friction (the model's friction is taken as known)")
    parser.add_argument("--output-dir", type=Path, default=Path("sysid_output"), help="default ./sysid_output")
    parser.add_argument("--export-damiao", action="store_true", help="write damiao_trajectory.csv")
    parser.add_argument("--no-plots", action="store_true",
                        help="skip torque_fit.png, residuals.png and parameters.png (matplotlib); report.html "
                             "is still written, with its tables and without figures")
    parser.add_argument("--motor-type", action="append", default=[],
                        help="Damiao motor type per joint, repeat once per joint (with --export-damiao)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the excitation and the noise (default 0)")
    parser.add_argument("--scope", choices=SCOPES, default="terminal",
                        help="terminal: the last body + all joints' friction; full: all base parameters")
    parser.add_argument("--source", choices=("sim", "ideal"), default="sim",
                        help="sim: tracked simulation with measurement noise (default); ideal: mj_inverse on the plan")
    parser.add_argument("--truth-model", type=Path,
                        help="simulate this model instead (e.g. the arm with the real payload) and report errors")
    parser.add_argument("--terminal-body", help="override the detected terminal body")
    parser.add_argument("--estimator", choices=ESTIMATORS, default="consistent",
                        help="default consistent: Gautier's WLS, then the nearest physically consistent "
                             "parameters (a model file can hold them); wls: WLS alone, ols, ridge")
    parser.add_argument("--robust", action="store_true",
                        help="Huber IRLS: bounded weight for outlying torque samples (glitches, contacts)")
    parser.add_argument("--coulomb-smoothing", type=float, default=0.0,
                        help="tanh(dq/s) instead of sign(dq) for Coulomb friction, s in rad/s (default 0: sign)")
    parser.add_argument("--friction-model", default="coulomb_viscous", action=_Given,
                        help="friction law: coulomb_viscous (default), asymmetric, tanh, stribeck, stribeck_tanh "
                             "or high_low_speed for every joint, or a comma list with one per joint")
    parser.set_defaults(friction_model_given=False)
    parser.add_argument("--friction-from", type=Path, metavar="FILE",
                        help="fix each joint's friction at the law a friction sweep fitted (its friction_sweep.json: "
                             "the law it chose, or the one --friction-model names): subtracted from the measured "
                             "torque, the rest identified without friction terms; params.json reports the sweep's "
                             "friction")
    parser.add_argument("--max-velocity", type=float, default=2.0, help="excitation speed cap, rad/s (default 2)")
    parser.add_argument("--excitation", choices=("multisine", "optimized", "friction-sweep"),
                        help="multisine (default): random sinusoids; optimized: Fourier series at rest at both ends "
                             "that tells the most about the parameters of --scope, within the joint, torque and "
                             "collision limits; friction-sweep: each joint alone at a ladder of constant speeds up "
                             "to --max-velocity, both directions, and every friction law fitted to the measured "
                             "curve (friction_sweep.json, friction_sweep.png; no rigid-body identification)")
    parser.add_argument("--excitation-criterion", choices=CRITERIA,
                        help="what the optimized excitation maximises: payload (the terminal body's parameters; the "
                             "terminal scope's default), d_optimal (all base parameters; the full scope's default), "
                             "condition (scaled condition number) or weighted (Liu et al.)")
    parser.add_argument("--excitation-time-limit", type=float, default=60.0,
                        help="wall-clock budget of the optimized excitation's search, s (default 60)")
    parser.add_argument("--excitation-condition-cap", type=_condition_cap, default="auto", metavar="F",
                        help="hold the optimized excitation's condition number (unit-norm columns) under F times the "
                             "median of ten multisines' ('off': no cap; default: 0.4 for the d_optimal and payload "
                             "criteria, none for the others)")
    parser.add_argument("--excitation-clearance", type=_clearance, default=0.01, metavar="M",
                        help="smallest distance kept between the model's collision geoms by the optimized excitation, "
                             "m (default 0.01; 'off' ignores collision geometry)")
    parser.add_argument("--save-trajectory", type=Path,
                        help="write the identification excitation to this .json or .csv file (to replay it)")
    parser.add_argument("--trajectory", type=Path,
                        help="replay this saved .json/.csv excitation instead of generating one (resampled to "
                             "--sample-rate; --duration is then the file's)")
    parser.add_argument("--noise-scale", type=float, default=1.0,
                        help="multiplies the default measurement noise of the sim source (default 1)")
    parser.add_argument("--transmission-stiffness", type=float, nargs="+", metavar="K",
                        help="sim source: an elastic transmission at every joint, N m/rad (one value for all joints, "
                             "or one per joint): a rotor with the joint's armature drives the link through a spring, "
                             "the drive tracks on its motor side, and the recording carries both encoders")
    parser.add_argument("--transmission-damping", type=float, nargs="+", metavar="C",
                        help="with --transmission-stiffness: the transmission's damping, N m s/rad (one value or "
                             "one per joint; default 5 %% of sqrt(K))")
    parser.add_argument("--gearbox-load-friction", type=float, default=0.0, metavar="F",
                        help="with --transmission-stiffness: gearbox friction of F times the transmitted torque, "
                             "against the rotor's motion, which no rigid model knows (default 0)")
    parser.add_argument("--gearbox-ripple", type=float, nargs="+", metavar="R",
                        help="with --transmission-stiffness: a cogging ripple on the rotor, N m (one value or one "
                             "per joint), 8 periods per radian")
    parser.add_argument("--cutoff", type=float, default=10.0, help="low-pass cutoff of measured signals, Hz")
    parser.add_argument("--velocity-from-position", action="store_true",
                        help="differentiate the measured position instead of using the measured velocity")
    recorded = parser.add_argument_group(
        "recorded data", "identify from files instead of a simulation (the excitation options do not apply)")
    recorded.add_argument("--recording", type=Path, nargs="+", metavar="FILE",
                          help="rosbag2 bags (directory, .mcap or .db3) of sensor_msgs/JointState, or .csv files "
                               "(time,<joint>_position,<joint>_velocity,<joint>_effort,...); several files are "
                               "separate stretches; effort is the joint torque")
    recorded.add_argument("--effort-gains", type=Path, metavar="FILE",
                          help="effort gain file of a two-recording calibration (identification.actuator."
                               "EffortGains.save): each joint's effort is multiplied by its gain (true torque / "
                               "reported effort) before identification")
    recorded.add_argument("--topic", default="/joint_states", help="JointState topic in the bags (default /joint_states)")
    recorded.add_argument("--stamps", choices=STAMPS, default="header",
                          help="header: the messages' header stamps (default); receive: when the recorder got them")
    recorded.add_argument("--motor-topic", metavar="TOPIC",
                          help="JointState topic of the motor-side encoders in the bags (positions in joint units, "
                               "stamped like the joint states): identifies the transmissions and gives the residual "
                               "model the deflection")
    recorded.add_argument("--validation-fraction", type=float, default=0.2,
                          help="share of the recording, at its end, held out to validate the model (default 0.2; "
                               "0 uses everything)")
    recorded.add_argument("--validation-recording", type=Path, nargs="+", metavar="FILE",
                          help="validate on these recordings (bags or CSV, as --recording) instead of a share of "
                               "the training one, which is then used whole")
    parser.add_argument("--residual", choices=("none", "gmm"), default="none",
                        help="gmm: after the fit, learn per joint the torque it leaves unexplained (a Gaussian "
                             "mixture over q, dq and, when recorded, the transmission's deflection) and write "
                             "residual_model.json (default none)")
    parser.add_argument("--payload-frame",
                        help="frame of the params.json payload block: the terminal body (default) or a link fixed "
                             "to it, e.g. the flange frame a driver's set_payload expects")
    return parser


class _Given(argparse.Action):
    """Store the option's value and note that it was given (``<dest>_given``): with
    --friction-from an explicit --friction-model picks the law, its default does not."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def _clearance(text: str):
    """--excitation-clearance: a distance >= 0 m, or None for 'off'."""
    if text.strip().lower() == "off":
        return None
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a distance >= 0 m or 'off', got {text}")
    return value


def _condition_cap(text: str):
    """--excitation-condition-cap: a fraction > 0 of the multisines' median, 'off' (None) or 'auto'."""
    word = text.strip().lower()
    if word in ("off", "auto"):
        return None if word == "off" else word
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a fraction > 0 of the multisines' condition number, "
                                         f"'off' or 'auto', got {text}")
    return value


# options of the simulated excitation: meaningless with --recording
_SIMULATION_OPTIONS = ("duration", "sample_rate", "source", "excitation", "excitation_criterion",
                       "excitation_time_limit", "excitation_clearance", "excitation_condition_cap", "save_trajectory",
                       "trajectory", "noise_scale", "max_velocity", "export_damiao", "motor_type",
                       "transmission_stiffness", "transmission_damping", "gearbox_load_friction", "gearbox_ripple")
# the elastic arm of the sim source: meaningless without --transmission-stiffness
_ELASTIC_OPTIONS = ("transmission_damping", "gearbox_load_friction", "gearbox_ripple")


def _check_recording_options(args: argparse.Namespace) -> None:
    """SysidError for options that do not apply to the data source chosen."""
    parser = build_parser()
    if args.recording:
        given = [f"--{name.replace('_', '-')}" for name in _SIMULATION_OPTIONS
                 if getattr(args, name) != parser.get_default(name)]
        if given:
            raise SysidError(f"{', '.join(given)}: for a simulated run only; with --recording the data come "
                             "from the files and no simulation runs: leave them out")
        if not 0.0 <= args.validation_fraction < 1.0:
            raise SysidError(f"--validation-fraction must be in [0, 1), got {args.validation_fraction}")
        if args.validation_recording and args.validation_fraction != parser.get_default("validation_fraction"):
            raise SysidError("--validation-fraction and --validation-recording: give one (the validation is either "
                             "a share of the recording or recordings of its own)")
    else:
        given = [f"--{name.replace('_', '-')}" for name in ("topic", "stamps", "validation_fraction", "effort_gains",
                                                            "validation_recording", "motor_topic")
                 if getattr(args, name) != parser.get_default(name)]
        if given:
            raise SysidError(f"{', '.join(given)} only apply with --recording")
        elastic = [f"--{name.replace('_', '-')}" for name in _ELASTIC_OPTIONS
                   if getattr(args, name) != parser.get_default(name)]
        if elastic and args.transmission_stiffness is None:
            raise SysidError(f"{', '.join(elastic)}: need --transmission-stiffness (an elastic transmission)")
        if args.transmission_stiffness is not None and args.source != "sim":
            raise SysidError("--transmission-stiffness: the sim source only (--source ideal is the rigid model's "
                             "inverse dynamics)")


def read_recorded(args: argparse.Namespace, robot, paths) -> tuple:
    """(Recording, LoadedRecording, samples missing from the stamps or None) of the recording files
    ``paths`` read with ``args``' topics and stamps, effort gains applied and the samples lost
    before they were recorded noted (what --recording gives, for sysid-fleet too)."""
    loaded = read_recordings(paths, robot.joint_names, topic=args.topic, stamps=args.stamps,
                             motor_topic=args.motor_topic)
    recording, missing = _with_effort_gains(args, loaded.recording), None
    if args.stamps == "header":  # receive stamps have no holes to count: a late message is not a lost one
        # samples lost before they were recorded (holes in the stamps of each file): the verdict says so
        missing = missing_in_stretches(recording, loaded.stretches)
        recording = dataclasses.replace(recording, quality_notes=recording.quality_notes + lost_sample_notes(
            missing, recording.n_samples, ", ".join(str(p) for p in loaded.files)))
    return recording, loaded, missing


def _recorded_data(args: argparse.Namespace, robot):
    """(identification, validation or None) from the --recording files, the validation the last
    --validation-fraction of the samples."""
    recording, loaded, missing = read_recorded(args, robot, args.recording)
    summary = loaded.summary() + ("" if missing is None else f"; {missing} missing from the stamps")
    print(f"Read {', '.join(str(p) for p in loaded.files)}: {summary}")
    if args.effort_gains is not None:
        print(f"Effort gains from {args.effort_gains}: " + ", ".join(
            f"{j} {g:.4f}" for j, g in zip(robot.joint_names,
                                           EffortGains.load(args.effort_gains).for_joints(robot.joint_names))))
    if args.validation_recording:
        held = read_recordings(args.validation_recording, robot.joint_names, topic=args.topic, stamps=args.stamps,
                               motor_topic=args.motor_topic)
        print(f"Validation: {', '.join(str(p) for p in held.files)}: {held.summary()}")
        return recording, _with_effort_gains(args, held.recording)
    if args.validation_fraction > 0:
        return recording.split(args.validation_fraction)
    return recording, None


def _with_effort_gains(args: argparse.Namespace, recording):
    if args.effort_gains is None:
        return recording
    return apply_effort_gains(recording, EffortGains.load(args.effort_gains))


def _write_model_files(args: argparse.Namespace, robot, result) -> int:
    """The updated model beside params.json: updated_model.urdf for a URDF input (no
    updated_model.xml then: see results.urdf_export), else updated_model.xml. 0 or 3."""
    name = "updated_model.urdf" if robot.source_format == "urdf" else "updated_model.xml"
    if result.verdict.level == "failed":
        print(f"error: identification failed, {name} not written: " + "; ".join(result.verdict.reasons),
              file=sys.stderr)
        return 3
    try:
        write_updated_robot(args.output_dir, robot, result)
    except IdentificationError as err:
        print(f"error: {name} not written: {err}", file=sys.stderr)
        return 3
    return 0


def _describe_model(args: argparse.Namespace, robot) -> None:
    """Say what was loaded (and what of a URDF was not); ValueError for an unknown --payload-frame."""
    if args.payload_frame is not None:
        frame_pose(robot, args.payload_frame)
    print(f"Loaded {args.model}: {robot.n_joints} joints, terminal body '{robot.terminal_body}' "
          f"(joint '{robot.terminal_joint}')")
    if robot.source_format == "urdf":
        print("  URDF: geometry (meshes) not loaded, not needed for dynamics" +
              ("; --mesh-dir unused" if args.mesh_dir is not None else ""))
        for link, change in robot.simulation_adjustments.items():
            print(f"  note: MuJoCo refuses link '{link}' as written ({change}) in the simulation model only; "
                  "identification uses the URDF's values")


# --- bad input, found before any work ------------------------------------------------------

# (attribute, option, lower bound, bound included): every numeric option, finite and in range
_NUMERIC_OPTIONS = (
    ("duration", "--duration", 0.0, False),
    ("sample_rate", "--sample-rate", 0.0, False),
    ("max_velocity", "--max-velocity", 0.0, False),
    ("excitation_time_limit", "--excitation-time-limit", 0.0, False),
    ("cutoff", "--cutoff", 0.0, False),
    ("coulomb_smoothing", "--coulomb-smoothing", 0.0, True),
    ("noise_scale", "--noise-scale", 0.0, True),
    ("seed", "--seed", 0, True),
)
# what a replayed trajectory may differ from its own integrated derivatives, relative, in
# units of the trapezoid rule's error (omega h)^2 / 12 at its frequency content: room for
# harmonics well above that content
_DERIVATIVE_SLACK = 100.0


def check_options(args: argparse.Namespace) -> None:
    """Every numeric option finite and in its range, the cutoff below the Nyquist frequency;
    SysidError naming each option that is not."""
    problems = []
    for attr, option, low, inclusive in _NUMERIC_OPTIONS:
        value = getattr(args, attr)
        if not (math.isfinite(value) and (value >= low if inclusive else value > low)):
            what = "an integer" if isinstance(value, int) else "a finite number"
            problems.append(f"{option} must be {what} {'>=' if inclusive else '>'} {low:g}, got {value:g}")
    rate, cutoff = args.sample_rate, args.cutoff
    if math.isfinite(rate) and rate > 0 and math.isfinite(cutoff) and cutoff >= rate / 2:
        problems.append(f"--cutoff {cutoff:g} Hz must be below half the sample rate ({rate / 2:g} Hz)")
    if problems:
        raise SysidError("; ".join(problems))


def check_size(robot, config: IdentificationConfig, duration: float, rate: float) -> None:
    """The excitation's sample count fits the machine's memory: SysidError with the numbers
    otherwise, before anything is allocated."""
    samples = math.floor(max(duration, 5.0) * rate) + 1     # the validation run lasts at least 5 s
    needed = memory_needed(robot, config, samples)
    available = available_memory()
    if available is not None and needed > available:
        room = max(available - _FIXED_BYTES, 0) / (needed - _FIXED_BYTES) * samples   # samples that fit
        remedy = (f"shorten --duration (about {room / rate:.3g} s fit at this rate) or lower --sample-rate"
                  if room / rate >= 5.0 else f"lower --sample-rate (about {room / max(duration, 5.0):.3g} Hz fit)")
        raise SysidError(f"{duration:g} s at {rate:g} Hz ({samples:.3g} samples of {robot.n_joints} joints, "
                         f"{len(column_names(robot, config))} parameters) needs about {_bytes(needed)} of memory "
                         f"to identify; this machine has {_bytes(available)} available: {remedy}")


def check_replayed_trajectory(plan, robot, path: Path) -> None:
    """A trajectory file fit to replay on ``robot``: inside every limited joint's range, and
    dq, ddq the derivatives of q (integrated by the trapezoid rule over each sample step,
    they must reproduce the steps of q, dq within a tolerance that grows with the step
    (omega h)^2 for the trajectory's frequency content omega). SysidError otherwise."""
    lower, upper = robot.joint_range[:, 0], robot.joint_range[:, 1]
    slack = 1e-6      # rad (m): the round-off of a saved file
    outside = np.flatnonzero(((plan.q < lower - slack) | (plan.q > upper + slack)).any(axis=0))
    if outside.size:
        j = int(outside[0])
        worst = plan.q[:, j][np.argmax(np.maximum(lower[j] - plan.q[:, j], plan.q[:, j] - upper[j]))]
        raise SysidError(f"--trajectory {path}: joint '{robot.joint_names[j]}' reaches {worst:.4g}, outside its "
                         f"limits [{lower[j]:.4g}, {upper[j]:.4g}]"
                         + (f" (and {outside.size - 1} more joints)" if outside.size > 1 else "")
                         + ": the arm would hit its stops; scale the trajectory into the range")
    h = float(plan.time[1] - plan.time[0])
    # the frequency content from q alone (acceleration over excursion), not from the
    # derivatives in doubt
    excursion = np.sqrt(np.mean((plan.q - plan.q.mean(axis=0)) ** 2))
    acceleration = np.sqrt(np.mean(np.diff(plan.q, 2, axis=0) ** 2)) / h ** 2
    omega = np.sqrt(acceleration / excursion) if excursion > 0 else 0.0
    tolerance = min(max(_DERIVATIVE_SLACK * (omega * h) ** 2 / 12, 1e-6), 0.5)
    for name, x, dx in (("dq", plan.q, plan.dq), ("ddq", plan.dq, plan.ddq)):
        steps = np.diff(x, axis=0)
        trapezoid = 0.5 * h * (dx[1:] + dx[:-1])
        scale = np.maximum(np.sqrt(np.mean(steps ** 2, axis=0)), np.sqrt(np.mean(trapezoid ** 2, axis=0)))
        error = np.sqrt(np.mean((steps - trapezoid) ** 2, axis=0)) / np.maximum(scale, 1e-300)
        error[scale == 0] = 0.0
        if np.any(error > tolerance):
            j = int(np.argmax(error))
            of = "q" if name == "dq" else "dq"
            raise SysidError(f"--trajectory {path}: {name} of joint '{robot.joint_names[j]}' is not the derivative "
                             f"of its {of}: integrated over the {1 / h:g} Hz samples it misses the steps of {of} by "
                             f"{error[j]:.1%} (tolerance {tolerance:.2g} at this sample rate)")


# --- outputs ----------------------------------------------------------------------------------

OUTPUTS = ("params.json", "updated_model.xml", "updated_model.urdf", "damiao_trajectory.csv", "torque_fit.png", "residuals.png",
           "parameters.png", "residual_model.json", "friction_sweep.json", "friction_sweep.png", "report.html")
"""Every file a run may write into --output-dir."""


def check_output_dir(args: argparse.Namespace) -> None:
    """--output-dir exists or can be made, and takes files; none of OUTPUTS in it is an input
    of this run (it would be removed). SysidError otherwise, before any work."""
    out = args.output_dir
    inputs = {Path(p).resolve(): option for p, option in ((args.model, "the model"),
                                                          (args.truth_model, "--truth-model"),
                                                          (args.trajectory, "--trajectory"),
                                                          (args.friction_from, "--friction-from")) if p is not None}
    for name in OUTPUTS:
        clash = inputs.get((out / name).resolve())
        if clash is not None:
            raise SysidError(f"--output-dir {out}: this run writes {name} there, which is {clash} it reads; "
                             "choose another output directory")
    if out.exists() and not out.is_dir():
        raise SysidError(f"--output-dir {out} is a file, not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise SysidError(f"--output-dir {out} cannot be written: {err.strerror or err}") from None


def clear_previous_outputs(output_dir: Path) -> list:
    """Remove what a previous run left in ``output_dir`` (OUTPUTS), just before this run writes:
    whatever this run then writes, or fails to write, is never mixed with another run's files.
    Returns the paths removed."""
    removed = []
    for name in OUTPUTS:
        path = output_dir / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed


def _identification_config(args: argparse.Namespace) -> IdentificationConfig:
    terms = () if args.no_friction else ("coulomb", "viscous")
    return IdentificationConfig(
        scope=args.scope, estimator=args.estimator, robust=args.robust,
        joint_model=JointModel(terms, args.coulomb_smoothing), friction_models=args.friction_model,
        filter=FilterConfig(cutoff_hz=args.cutoff, velocity_from_position=args.velocity_from_position),
        seed=args.seed)


def _progress(label: str):
    last = [-1]

    def report(fraction: float) -> None:
        step = int(fraction * 10)
        if step != last[0]:
            last[0] = step
            print(f"  {label}: {fraction:4.0%}", flush=True)
    return report


def _multisine(args: argparse.Namespace, robot, duration: float, seed: int):
    """A multisine capped at --max-velocity, slowed until the nominal model's torques fit the
    file's actuator limits (a plan the arm cannot make would be refused by the sim source)."""
    def make(velocity):
        return multisine(robot.joint_range, duration, args.sample_rate, seed=seed, max_velocity=velocity)
    plan, velocity, usage = slow_to_torque_limits(make, robot, args.max_velocity)
    if velocity < args.max_velocity:
        print(f"  multisine slowed to {velocity:.3g} rad/s: its nominal torques then peak at {usage:.0%} of the "
              f"actuators' limits (at most {TORQUE_USAGE:.0%} leaves room for a payload and the controller)")
    return plan


def _cap_arguments(cap) -> dict:
    """optimize_excitation's cap arguments for --excitation-condition-cap ('auto', None or a fraction)."""
    if isinstance(cap, float):
        return {"condition_cap": "multisine", "cap_fraction": cap}
    return {"condition_cap": cap}


def _cap_text(design) -> str:
    """', cap C (a share of the multisines' R)' for a design held under a condition cap, else ''."""
    if design.condition_cap is None:
        return ""
    source = ("" if design.reference_condition is None else
              f": {design.condition_cap / design.reference_condition:.0%} of the multisines' "
              f"{design.reference_condition:.1f}")
    return f"; cap {design.condition_cap:.1f}{source}"


def _excitation_rows(args: argparse.Namespace, plan, design, check_plan) -> list:
    """(label, text) rows on the excitation for report.html: what made the plan and, for an
    optimized design, its criterion and condition number against the multisines' median."""
    span = f"{plan.time[-1] - plan.time[0]:g} s at {args.sample_rate:g} Hz"
    if args.trajectory is not None:
        rows = [("excitation", f"replayed {args.trajectory}, {span}")]
    elif design is None:
        rows = [("excitation", f"multisine, seed {args.seed}, {span}, up to {args.max_velocity:g} rad/s")]
    else:
        gain = ("no multisine reference (the design had no condition cap): its gain over the multisines is "
                "not known" if design.reference_condition is None else
                f"{design.reference_condition / design.condition_number_scaled:.2f} times lower than the "
                f"multisines' median {design.reference_condition:.1f}")
        rows = [("excitation", f"optimized Fourier series, seed {args.seed}, {span}"),
                ("design", f"{design.criterion} criterion {design.criterion_value:.3f} (best start "
                           f"{design.initial_criterion_value:.3f}); condition number on the plan "
                           f"{design.condition_number_scaled:.1f} with unit-norm columns "
                           f"({design.condition_number:.1f} raw){_cap_text(design)}; {gain}; limits met: "
                           f"{design.limits_met}")]
    return rows + [("validation run", f"multisine, seed {args.seed + 1000}, "
                                      f"{check_plan.time[-1] - check_plan.time[0]:g} s")]


def _excitation(args: argparse.Namespace, robot, config: IdentificationConfig):
    """The identification excitation: replayed from --trajectory, optimized, or a multisine,
    each checked for size (``check_size``) before it is made. Saved to --save-trajectory when given.
    Returns (plan, the ExcitationDesign of an optimized one or None)."""
    design = None
    target = args.save_trajectory
    if target is not None:  # fail now, not after a long optimization
        if target.suffix.lower() not in (".json", ".csv"):
            raise SysidError(f"--save-trajectory must end in .json or .csv, got '{target.name}'")
        if not target.resolve().parent.is_dir():
            raise SysidError(f"--save-trajectory: directory {target.parent} does not exist")
    if args.excitation != "optimized":
        given = [f"--{name.replace('_', '-')}"
                 for name in ("excitation_criterion", "excitation_clearance", "excitation_condition_cap")
                 if getattr(args, name) != build_parser().get_default(name)]
        if given:
            raise SysidError(f"{', '.join(given)}: for --excitation optimized only")
    if args.trajectory is None:
        check_size(robot, config, args.duration, args.sample_rate)
    if args.trajectory is not None:
        if args.excitation is not None:
            raise SysidError("--trajectory replays a saved excitation: leave out --excitation")
        plan, _ = load_trajectory(args.trajectory, robot.joint_names)
        check_replayed_trajectory(plan, robot, args.trajectory)
        check_size(robot, config, float(plan.time[-1]), args.sample_rate)
        print(f"Replaying {args.trajectory}: {plan.time[-1]:g} s at {trajectory_rate(plan):g} Hz"
              + (f", resampled to {args.sample_rate:g} Hz" if abs(trajectory_rate(plan) / args.sample_rate - 1) > 1e-9
                 else ""))
        plan = resample(plan, args.sample_rate)
    elif args.excitation == "optimized":
        print(f"Optimizing a Fourier excitation ({args.duration:g} s at {args.sample_rate:g} Hz, seed {args.seed}, "
              f"up to {args.excitation_time_limit:g} s)", flush=True)
        # torque limits: the Damiao motors' when named, else the model's actuator limits (if any)
        torque = "model" if len(args.motor_type) != robot.n_joints else [motor_limits(m).tmax for m in args.motor_type]
        workers = search_workers(args.excitation_time_limit)
        design = optimize_excitation(
            robot, args.duration, args.sample_rate, seed=args.seed, time_limit_s=args.excitation_time_limit,
            max_velocity=args.max_velocity, torque_limits=torque, criterion=args.excitation_criterion,
            min_clearance=args.excitation_clearance, workers=workers, config=config,
            **_cap_arguments(args.excitation_condition_cap))
        clearance = ("" if design.min_clearance is None else
                     f", geoms {design.min_clearance * 1000:.0f} mm apart or more")
        print(f"  {design.criterion} criterion {design.criterion_value:.3f} (best start "
              f"{design.initial_criterion_value:.3f}; {design.restarts} local searches on {workers} "
              f"process{'es' if workers > 1 else ''}, {design.iterations} iterations, {design.elapsed_s:.1f} s); "
              f"condition number {design.condition_number_scaled:.1f} with unit-norm columns "
              f"({design.condition_number:.1f} raw{_cap_text(design)}); limits met: {design.limits_met}{clearance}")
        plan = design.trajectory
    else:
        print(f"Generating multisine excitation ({args.duration:g} s at {args.sample_rate:g} Hz, seed {args.seed})")
        plan = _multisine(args, robot, args.duration, args.seed)
    if args.save_trajectory is not None:
        save_trajectory(args.save_trajectory, plan, robot.joint_names)
        print(f"Excitation saved to {args.save_trajectory}")
    return plan, design


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    check_options(args)
    _check_recording_options(args)
    check_output_dir(args)
    robot = load_robot(args.model, terminal_body=args.terminal_body, mesh_dir=args.mesh_dir)
    _describe_model(args, robot)
    truth = None
    if args.truth_model is not None:
        truth = load_robot(args.truth_model, terminal_body=args.terminal_body, mesh_dir=args.mesh_dir)
        if truth.joint_names != robot.joint_names:
            raise SysidError(f"truth model joints {list(truth.joint_names)} differ from the model's "
                             f"{list(robot.joint_names)}")
    if args.export_damiao:
        if len(args.motor_type) != robot.n_joints:
            raise SysidError(f"--export-damiao needs one --motor-type per joint: {robot.n_joints} joints, "
                             f"{len(args.motor_type)} given")
        for name in args.motor_type:
            motor_limits(name)
    plant = truth if truth is not None else robot
    config = _identification_config(args)
    known = _known_friction(args, robot)
    if args.recording:
        return _identify_recording(args, robot, truth, config, started, known)

    if args.excitation == "friction-sweep":
        return _friction_sweep(args, robot, plant, started)
    plan, design = _excitation(args, robot, config)
    check_plan = _multisine(args, robot, max(5.0, args.duration / 3), args.seed + 1000)

    timing = simulation_timing(plant.model, args.sample_rate)
    # the data come from MuJoCo: its frictionloss constraint (at the timestep the plant runs
    # with) and, for forward simulation, the damping its integrator applies at the end of each
    # step are part of the identification model
    source = MujocoPhysics.simulation if args.source == "sim" else MujocoPhysics.inverse
    config = dataclasses.replace(config, physics=source(plant.model, timing.timestep))

    if args.source == "ideal":
        print("Recording data: MuJoCo mj_inverse along the plan"
              + (f", truth model {args.truth_model}" if truth is not None else ""))
    else:
        print("Recording data: MuJoCo simulation under computed-torque control"
              + (f", truth model {args.truth_model}" if truth is not None else "") + f"\n  {timing.describe()}")
    recording = _record(args, robot, plant, plan, "identification run")
    validation = _record(args, robot, plant, check_plan, "validation run")

    result, status = _identify_and_write(args, robot, truth, config, recording, validation, args.source, known,
                                         _excitation_rows(args, plan, design, check_plan))
    if args.export_damiao and result.verdict.level != "failed":
        # feed-forward for real motors: a real joint's friction, not the simulator's
        if known is None:
            torque = predict_torque(robot, on_hardware(robot, result), plan.q, plan.dq, plan.ddq)
        else:  # the rigid part without the model file's friction, plus the sweep's
            bare = without_model_friction(robot)
            torque = predict_torque(bare, on_hardware(bare, result), plan.q, plan.dq, plan.ddq) \
                + friction_torque(plan.dq, result.friction)
        clamped = write_damiao_csv(args.output_dir / "damiao_trajectory.csv", plan, torque, args.motor_type)
        print("Damiao export, samples clamped per joint: " +
              ", ".join(f"{k} {v:.1f}%" for k, v in clamped.items()))
    print(f"Results saved to {args.output_dir}/ ({time.perf_counter() - started:.1f} s)")
    return status


def _record(args: argparse.Namespace, robot, plant, trajectory, label: str):
    """The recording of ``trajectory`` on ``plant`` as --source makes it: mj_inverse along the plan,
    or the plant simulated under a controller that knows only ``robot`` (as a real arm's would),
    with the default noise times --noise-scale; the run's notes printed."""
    if args.source == "ideal":
        return ideal_recording(plant.model, trajectory, plant.joint_names)
    default = MeasurementNoise()
    noise = MeasurementNoise(q_std=default.q_std * args.noise_scale, dq_std=default.dq_std * args.noise_scale,
                             tau_std=default.tau_std * args.noise_scale)
    if args.transmission_stiffness is not None:
        transmission, gearbox = _elastic_arm(args, plant)
        return simulate_elastic(plant.path, trajectory, transmission, robot.model, noise=noise, seed=args.seed,
                                rotor_torque=None if gearbox is None else gearbox.torque)
    run = simulate(plant.model, trajectory, nominal=robot.model, noise=noise, seed=args.seed,
                   joint_names=plant.joint_names, progress=_progress(label))
    for note in run.quality.notes()[:-1]:  # the last note is the timing, printed once by the caller
        print(f"  {label}: {note}")
    return run.recording


def _elastic_arm(args: argparse.Namespace, plant) -> tuple:
    """(Transmission, Gearbox or None) of --transmission-stiffness and the options with it, each
    one value for every joint of ``plant`` or one per joint; SysidError otherwise."""
    n = plant.n_joints

    def per_joint(values, option, default):
        values = np.asarray(default if values is None else values, dtype=float)
        if values.size not in (1, n):
            raise SysidError(f"{option}: one value or {n} (one per joint of {list(plant.joint_names)}), "
                             f"got {values.size}")
        return np.broadcast_to(values, (n,)).copy()
    stiffness = per_joint(args.transmission_stiffness, "--transmission-stiffness", None)
    damping = per_joint(args.transmission_damping, "--transmission-damping", 0.05 * np.sqrt(np.abs(stiffness)))
    try:
        transmission = Transmission(stiffness, damping).checked(n)
        gearbox = None
        if args.gearbox_load_friction or args.gearbox_ripple is not None:
            gearbox = Gearbox(args.gearbox_load_friction, per_joint(args.gearbox_ripple, "--gearbox-ripple", 0.0))
    except ValueError as err:
        raise SysidError(str(err)) from None
    return transmission, gearbox


def _known_friction(args: argparse.Namespace, robot):
    """--friction-from: every joint's friction from the sweep's file (known_friction.
    KnownFriction), read and checked before any work; None without the option. The law per
    joint is the file's chosen one, or --friction-model's when that is given."""
    if args.friction_from is None:
        return None
    conflicts = [option for option, given in (
        ("--no-friction (the model's friction known instead)", args.no_friction),
        ("--coulomb-smoothing (the sweep's laws have their own Coulomb shape)", args.coulomb_smoothing != 0),
        ("--residual gmm", args.residual != "none"),
        ("--excitation friction-sweep (it measures friction, it does not use it)",
         args.excitation == "friction-sweep")) if given]
    if conflicts:
        raise SysidError(f"--friction-from: not with {', '.join(conflicts)}")
    laws = None
    if args.friction_model_given:
        laws = tuple(m.name for m in FrictionSelection(args.friction_model).for_joints(robot.n_joints))
    known = from_sweep(read_friction_sweep(args.friction_from), robot.joint_names, str(args.friction_from), laws)
    print(f"Friction fixed from {args.friction_from}: " + ", ".join(
        f"{j} {f.model.name}" for j, f in zip(known.joint_names, known.frictions)))
    return known


def _friction_sweep(args: argparse.Namespace, robot, plant, started: float) -> int:
    """--excitation friction-sweep: the sweep simulated on the plant, its friction curves
    measured and every law fitted; friction_sweep.json and .png. 0, or 2 for options that do
    not apply."""
    given = [f"--{name.replace('_', '-')}" for name in ("duration", "trajectory", "export_damiao", "residual",
                                                        "friction_from")
             if getattr(args, name) != build_parser().get_default(name)]
    if given:
        raise SysidError(f"{', '.join(given)}: not with --excitation friction-sweep (its length follows from its "
                         "speeds, and it identifies friction only)")
    start = np.clip(np.zeros(robot.n_joints), *robot.joint_range.T)
    sweep = friction_sweep(start, robot.joint_range, args.sample_rate, max_velocity=args.max_velocity)
    print(f"Friction sweep: {len(sweep.segments)} cruises of {robot.n_joints} joints up to "
          f"{args.max_velocity:g} rad/s, {sweep.trajectory.time[-1]:.1f} s at {args.sample_rate:g} Hz")
    if args.save_trajectory is not None:
        save_trajectory(args.save_trajectory, sweep.trajectory, robot.joint_names)
        print(f"Sweep saved to {args.save_trajectory}")
    recording = _record(args, robot, plant, sweep.trajectory, "friction sweep")
    points = friction_points(recording, sweep.segments)
    curves = [fit_friction_curves(p) for p in points]
    # the law each joint's friction is later fixed at (--friction-from): --friction-model's when
    # given, else the one the points support best
    named = None
    if args.friction_model_given:
        laws = dict(zip(robot.joint_names, FrictionSelection(args.friction_model).for_joints(robot.n_joints)))
        named = [laws[p.joint].name for p in points]
    chosen = chosen_laws(points, curves, named)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    clear_previous_outputs(args.output_dir)
    write_friction_sweep(args.output_dir, points, curves, plots=not args.no_plots, chosen=chosen)
    print(format_friction(points, curves, chosen))
    print(f"Results saved to {args.output_dir}/ ({time.perf_counter() - started:.1f} s)")
    return 0


def _identify_and_write(args: argparse.Namespace, robot, truth, config, recording, validation, source: str,
                        known=None, excitation=()):
    """Identify, write params.json, the plots, report.html and the updated model; (result, exit
    status). ``known`` the joints' friction fixed from a sweep (--friction-from), None to identify
    it; ``excitation`` (label, text) rows on the excitation for the report."""
    print(f"Identifying ({args.scope} scope, {args.estimator}"
          + (f", friction fixed from {known.source})" if known is not None else ")"))
    if known is None:
        result = identify(robot, recording, config, validation=validation)
    else:
        result = identify_with_known_friction(robot, recording, config, known, validation)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    clear_previous_outputs(args.output_dir)
    document = params_document(result, robot, source=source, truth=truth, payload_frame=args.payload_frame)
    if known is not None:
        from_position = config.filter.velocity_from_position
        annotate_params(document, known, {what: extrapolated_share(data, known, from_position) for what, data in
                                          (("identification", recording), ("validation", validation))
                                          if data is not None})
    residual = None
    if recording.motor_q is not None:
        warning = add_transmission(document, robot, result, recording, config.filter)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    if args.residual == "gmm":
        print("Fitting the residual model (GMM per joint)")
        try:
            residual, document["residual"] = compensate(robot, result, recording, validation, seed=args.seed)
        except DataError as err:  # the rigid-body result stands without it
            document["residual"] = {"kind": "gmm", "error": str(err)}
            print(f"warning: no residual model: {err}", file=sys.stderr)
    write_params_json(args.output_dir / "params.json", document)
    if residual is not None:
        (args.output_dir / "residual_model.json").write_text(json.dumps(residual.as_dict(), indent=1) + "\n")
    print(format_result(result, document))
    if not args.no_plots:
        if known is not None:  # the figures show the rigid part: the torque less the sweep's friction
            recording, validation, robot = (
                subtract_known(recording, known, config.filter.velocity_from_position),
                None if validation is None else subtract_known(validation, known, config.filter.velocity_from_position),
                without_model_friction(robot))
        try:
            write_plots(args.output_dir, robot, result, recording, validation, residual)
        except ImportError as err:  # matplotlib is optional for the core
            print(f"warning: no plots ({err}); install matplotlib or pass --no-plots", file=sys.stderr)
    # always written, failed verdicts included (it says why); --no-plots leaves its figures out
    write_html_report(args.output_dir / "report.html", robot, result, document, recording, validation,
                      figures=not args.no_plots, excitation=excitation)
    return result, _write_model_files(args, robot, result)


def _identify_recording(args: argparse.Namespace, robot, truth, config, started: float, known=None) -> int:
    """The --recording path: the files identified, the same outputs as a simulated run."""
    recording, validation = _recorded_data(args, robot)
    source = ", ".join(str(p) for p in args.recording)
    _, status = _identify_and_write(args, robot, truth, config, recording, validation, source, known)
    print(f"Results saved to {args.output_dir}/ ({time.perf_counter() - started:.1f} s)")
    return status


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("sysid-identify: interrupted", file=sys.stderr)
        return 130
    except (IdentificationError, TrackingError) as err:  # a run the arm did not make: not trustworthy
        print(f"error: {err}", file=sys.stderr)
        return 3
    except (SysidError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: shorten --duration or lower --sample-rate", file=sys.stderr)
        return 2
