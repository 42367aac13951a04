"""``sysid-identify``: identify an arm's payload and dynamics offline, from MuJoCo or from recordings.

The model is an MJCF or a URDF. With ``--recording`` (rosbag2 bags, CSV files) the data come
from the files and no simulation runs; otherwise from a MuJoCo simulation of the excitation.

Exit status: 0 on success, 2 for bad input (model, options, data), 3 when the
identification is ill-posed or its result would be unphysical (nothing unphysical
is ever written into a model file).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .damiao.protocol import motor_limits
from .dynamics.friction import JointModel
from .dynamics.model import load_robot
from .errors import IdentificationError, SysidError
from .excitation.criteria import CRITERIA
from .excitation.design import optimize_excitation
from .excitation.multistart import search_workers
from .excitation.multisine import multisine
from .excitation.trajectory import load_trajectory, resample, sample_rate as trajectory_rate, save_trajectory
from .identification.filtering import FilterConfig
from .identification.identify import ESTIMATORS, SCOPES, IdentificationConfig, identify, predict_torque
from .identification.recording_files import STAMPS, read_recordings
from .results.export import params_document, write_damiao_csv, write_params_json
from .results.payload import frame_pose
from .results.urdf_export import write_updated_robot
from .results.plots import write_plots
from .results.report import format_result
from .simulation import MeasurementNoise, default_gains, ideal_recording, simulate_tracking


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
                        help="skip torque_fit.png, residuals.png and parameters.png (matplotlib)")
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
    parser.add_argument("--estimator", choices=ESTIMATORS, default="wls",
                        help="default wls (Gautier); consistent: WLS, then the nearest physically consistent "
                             "parameters (what the full scope always writes)")
    parser.add_argument("--robust", action="store_true",
                        help="Huber IRLS: bounded weight for outlying torque samples (glitches, contacts)")
    parser.add_argument("--coulomb-smoothing", type=float, default=0.0,
                        help="tanh(dq/s) instead of sign(dq) for Coulomb friction, s in rad/s (default 0: sign)")
    parser.add_argument("--friction-model", default="coulomb_viscous",
                        help="friction law: coulomb_viscous (default), asymmetric, tanh, stribeck, stribeck_tanh "
                             "or high_low_speed for every joint, or a comma list with one per joint")
    parser.add_argument("--max-velocity", type=float, default=2.0, help="excitation speed cap, rad/s (default 2)")
    parser.add_argument("--excitation", choices=("multisine", "optimized"),
                        help="multisine (default): random sinusoids; optimized: Fourier series at rest at both ends "
                             "that tells the most about the parameters of --scope, within the joint, torque and "
                             "collision limits")
    parser.add_argument("--excitation-criterion", choices=CRITERIA,
                        help="what the optimized excitation maximises: payload (the terminal body's parameters; the "
                             "terminal scope's default), d_optimal (all base parameters; the full scope's default), "
                             "condition (scaled condition number) or weighted (Liu et al.)")
    parser.add_argument("--excitation-time-limit", type=float, default=60.0,
                        help="wall-clock budget of the optimized excitation's search, s (default 60)")
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
    parser.add_argument("--cutoff", type=float, default=10.0, help="low-pass cutoff of measured signals, Hz")
    parser.add_argument("--velocity-from-position", action="store_true",
                        help="differentiate the measured position instead of using the measured velocity")
    recorded = parser.add_argument_group(
        "recorded data", "identify from files instead of a simulation (the excitation options do not apply)")
    recorded.add_argument("--recording", type=Path, nargs="+", metavar="FILE",
                          help="rosbag2 bags (directory, .mcap or .db3) of sensor_msgs/JointState, or .csv files "
                               "(time,<joint>_position,<joint>_velocity,<joint>_effort,...); several files are "
                               "separate stretches; effort is the joint torque")
    recorded.add_argument("--topic", default="/joint_states", help="JointState topic in the bags (default /joint_states)")
    recorded.add_argument("--stamps", choices=STAMPS, default="header",
                          help="header: the messages' header stamps (default); receive: when the recorder got them")
    recorded.add_argument("--validation-fraction", type=float, default=0.2,
                          help="share of the recording, at its end, held out to validate the model (default 0.2; "
                               "0 uses everything)")
    parser.add_argument("--payload-frame",
                        help="frame of the params.json payload block: the terminal body (default) or a link fixed "
                             "to it, e.g. the flange frame a driver's set_payload expects")
    return parser


def _clearance(text: str):
    """--excitation-clearance: a distance >= 0 m, or None for 'off'."""
    if text.strip().lower() == "off":
        return None
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a distance >= 0 m or 'off', got {text}")
    return value


# options of the simulated excitation: meaningless with --recording
_SIMULATION_OPTIONS = ("duration", "sample_rate", "source", "excitation", "excitation_criterion",
                       "excitation_time_limit", "excitation_clearance", "save_trajectory",
                       "trajectory", "noise_scale", "max_velocity", "export_damiao", "motor_type")


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
    else:
        given = [f"--{name.replace('_', '-')}" for name in ("topic", "stamps", "validation_fraction")
                 if getattr(args, name) != parser.get_default(name)]
        if given:
            raise SysidError(f"{', '.join(given)} only apply with --recording")


def _recorded_data(args: argparse.Namespace, robot):
    """(identification, validation or None) from the --recording files, the validation the last
    --validation-fraction of the samples."""
    loaded = read_recordings(args.recording, robot.joint_names, topic=args.topic, stamps=args.stamps)
    print(f"Read {', '.join(str(p) for p in loaded.files)}: {loaded.summary()}")
    recording = loaded.recording
    if args.validation_fraction > 0:
        return recording.split(args.validation_fraction)
    return recording, None


def _write_model_files(args: argparse.Namespace, robot, result) -> int:
    """The updated model beside params.json: updated_model.urdf for a URDF input (no
    updated_model.xml then: see results.urdf_export), else updated_model.xml. 0 or 3."""
    name = "updated_model.urdf" if robot.source_format == "urdf" else "updated_model.xml"
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


def _progress(label: str):
    last = [-1]

    def report(fraction: float) -> None:
        step = int(fraction * 10)
        if step != last[0]:
            last[0] = step
            print(f"  {label}: {fraction:4.0%}", flush=True)
    return report


def _excitation(args: argparse.Namespace, robot):
    """The identification excitation: replayed from --trajectory, optimized, or a multisine.
    Saved to --save-trajectory when given."""
    target = args.save_trajectory
    if target is not None:  # fail now, not after a long optimization
        if target.suffix.lower() not in (".json", ".csv"):
            raise SysidError(f"--save-trajectory must end in .json or .csv, got '{target.name}'")
        if not target.resolve().parent.is_dir():
            raise SysidError(f"--save-trajectory: directory {target.parent} does not exist")
    if args.excitation != "optimized":
        given = [f"--{name.replace('_', '-')}" for name in ("excitation_criterion", "excitation_clearance")
                 if getattr(args, name) != build_parser().get_default(name)]
        if given:
            raise SysidError(f"{', '.join(given)}: for --excitation optimized only")
    if args.trajectory is not None:
        if args.excitation is not None:
            raise SysidError("--trajectory replays a saved excitation: leave out --excitation")
        plan, _ = load_trajectory(args.trajectory, robot.joint_names)
        print(f"Replaying {args.trajectory}: {plan.time[-1]:g} s at {trajectory_rate(plan):g} Hz"
              + (f", resampled to {args.sample_rate:g} Hz" if abs(trajectory_rate(plan) / args.sample_rate - 1) > 1e-9
                 else ""))
        plan = resample(plan, args.sample_rate)
    elif args.excitation == "optimized":
        print(f"Optimizing a Fourier excitation ({args.duration:g} s at {args.sample_rate:g} Hz, seed {args.seed}, "
              f"up to {args.excitation_time_limit:g} s)", flush=True)
        # torque limits: the Damiao motors' when named, else the model's actuator limits (if any)
        torque = "model" if len(args.motor_type) != robot.n_joints else [motor_limits(m).tmax for m in args.motor_type]
        terms = () if args.no_friction else ("coulomb", "viscous")
        workers = search_workers(args.excitation_time_limit)
        design = optimize_excitation(
            robot, args.duration, args.sample_rate, seed=args.seed, time_limit_s=args.excitation_time_limit,
            max_velocity=args.max_velocity, torque_limits=torque, criterion=args.excitation_criterion,
            min_clearance=args.excitation_clearance, workers=workers,
            config=IdentificationConfig(scope=args.scope, joint_model=JointModel(terms, args.coulomb_smoothing)))
        clearance = ("" if design.min_clearance is None else
                     f", geoms {design.min_clearance * 1000:.0f} mm apart or more")
        print(f"  {design.criterion} criterion {design.criterion_value:.3f} (best start "
              f"{design.initial_criterion_value:.3f}; {design.restarts} local searches on {workers} "
              f"process{'es' if workers > 1 else ''}, {design.iterations} iterations, {design.elapsed_s:.1f} s); "
              f"condition number {design.condition_number_scaled:.1f} with unit-norm columns "
              f"({design.condition_number:.1f} raw); limits met: {design.limits_met}{clearance}")
        plan = design.trajectory
    else:
        print(f"Generating multisine excitation ({args.duration:g} s at {args.sample_rate:g} Hz, seed {args.seed})")
        plan = multisine(robot.joint_range, args.duration, args.sample_rate, seed=args.seed,
                         max_velocity=args.max_velocity)
    if args.save_trajectory is not None:
        save_trajectory(args.save_trajectory, plan, robot.joint_names)
        print(f"Excitation saved to {args.save_trajectory}")
    return plan


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    _check_recording_options(args)
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
    if args.recording:
        return _identify_recording(args, robot, truth, started)

    plan = _excitation(args, robot)
    check_plan = multisine(robot.joint_range, max(5.0, args.duration / 3), args.sample_rate,
                           seed=args.seed + 1000, max_velocity=args.max_velocity)

    def record(trajectory, label):
        if args.source == "ideal":
            return ideal_recording(plant.model, trajectory, plant.joint_names)
        kp, kd = default_gains(plant.model)
        default = MeasurementNoise()
        noise = MeasurementNoise(q_std=default.q_std * args.noise_scale, dq_std=default.dq_std * args.noise_scale,
                                 tau_std=default.tau_std * args.noise_scale)
        feedforward = robot.inverse_dynamics(trajectory.q, trajectory.dq, trajectory.ddq)
        return simulate_tracking(plant.model, trajectory, feedforward, kp, kd, noise, seed=args.seed,
                                 joint_names=plant.joint_names, progress=_progress(label))

    source = "MuJoCo mj_inverse along the plan" if args.source == "ideal" else "MuJoCo simulation at 1 kHz"
    print(f"Recording data: {source}" + (f", truth model {args.truth_model}" if truth is not None else ""))
    recording = record(plan, "identification run")
    validation = record(check_plan, "validation run")

    result, status = _identify_and_write(args, robot, truth, recording, validation, args.source)
    if args.export_damiao:
        torque = predict_torque(robot, result, plan.q, plan.dq, plan.ddq)
        clamped = write_damiao_csv(args.output_dir / "damiao_trajectory.csv", plan, torque, args.motor_type)
        print("Damiao export, samples clamped per joint: " +
              ", ".join(f"{k} {v:.1f}%" for k, v in clamped.items()))
    print(f"Results saved to {args.output_dir}/ ({time.perf_counter() - started:.1f} s)")
    return status


def _identify_and_write(args: argparse.Namespace, robot, truth, recording, validation, source: str):
    """Identify, write params.json, the plots and the updated model; (result, exit status)."""
    terms = () if args.no_friction else ("coulomb", "viscous")
    config = IdentificationConfig(scope=args.scope, estimator=args.estimator, robust=args.robust,
                                  joint_model=JointModel(terms, args.coulomb_smoothing), friction_models=args.friction_model,
                                  filter=FilterConfig(cutoff_hz=args.cutoff, velocity_from_position=args.velocity_from_position), seed=args.seed)
    print(f"Identifying ({args.scope} scope, {args.estimator})")
    result = identify(robot, recording, config, validation=validation)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    document = params_document(result, robot, source=source, truth=truth, payload_frame=args.payload_frame)
    write_params_json(args.output_dir / "params.json", document)
    print(format_result(result, document))
    if not args.no_plots:
        try:
            write_plots(args.output_dir, robot, result, recording, validation)
        except ImportError as err:  # matplotlib is optional for the core
            print(f"warning: no plots ({err}); install matplotlib or pass --no-plots", file=sys.stderr)
    return result, _write_model_files(args, robot, result)


def _identify_recording(args: argparse.Namespace, robot, truth, started: float) -> int:
    """The --recording path: the files identified, the same outputs as a simulated run."""
    recording, validation = _recorded_data(args, robot)
    source = ", ".join(str(p) for p in args.recording)
    _, status = _identify_and_write(args, robot, truth, recording, validation, source)
    print(f"Results saved to {args.output_dir}/ ({time.perf_counter() - started:.1f} s)")
    return status


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except IdentificationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except (SysidError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
