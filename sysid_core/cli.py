"""``sysid-identify``: identify an arm's payload and dynamics offline from MuJoCo.

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
from .excitation.multisine import multisine
from .excitation.trajectory import load_trajectory, resample, sample_rate as trajectory_rate, save_trajectory
from .identification.filtering import FilterConfig
from .identification.identify import ESTIMATORS, SCOPES, IdentificationConfig, identify, predict_torque
from .results.export import params_document, write_damiao_csv, write_params_json, write_updated_model
from .results.plots import write_plots
from .results.report import format_result
from .simulation import MeasurementNoise, default_gains, ideal_recording, simulate_tracking


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sysid-identify",
        description="Identify the terminal body (link + payload) or the whole arm of a MuJoCo "
                    "model, and joint friction, from excitation data.")
    parser.add_argument("model", type=Path, help="MJCF of the arm as you believe it is (the nominal model)")
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
                        help="multisine (default): random sinusoids; optimized: Fourier series at rest at both ends, "
                             "optimized for the condition number of the base regressor within the joint limits")
    parser.add_argument("--excitation-time-limit", type=float, default=60.0,
                        help="wall-clock budget of the optimized excitation's search, s (default 60)")
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
    return parser


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
    if args.trajectory is not None:
        if args.excitation is not None:
            raise SysidError("--trajectory replays a saved excitation: leave out --excitation")
        plan, _ = load_trajectory(args.trajectory, robot.joint_names)
        print(f"Replaying {args.trajectory}: {plan.time[-1]:g} s at {trajectory_rate(plan):g} Hz"
              + (f", resampled to {args.sample_rate:g} Hz" if abs(trajectory_rate(plan) / args.sample_rate - 1) > 1e-9
                 else ""))
        plan = resample(plan, args.sample_rate)
    elif args.excitation == "optimized":
        from .excitation.design import optimize_excitation  # SciPy's optimizers: only when asked for
        print(f"Optimizing a Fourier excitation ({args.duration:g} s at {args.sample_rate:g} Hz, seed {args.seed}, "
              f"up to {args.excitation_time_limit:g} s)", flush=True)
        # torque limits: the Damiao motors' when named, else the model's actuator limits (if any)
        torque = "model" if len(args.motor_type) != robot.n_joints else [motor_limits(m).tmax for m in args.motor_type]
        terms = () if args.no_friction else ("coulomb", "viscous")
        design = optimize_excitation(
            robot, args.duration, args.sample_rate, seed=args.seed, time_limit_s=args.excitation_time_limit,
            max_velocity=args.max_velocity, torque_limits=torque,
            config=IdentificationConfig(scope=args.scope, joint_model=JointModel(terms, args.coulomb_smoothing)))
        print(f"  condition number {design.condition_number:.1f} (from {design.initial_criterion_value:.1f} at the "
              f"best start; {design.restarts} starts, {design.iterations} iterations, {design.elapsed_s:.1f} s); "
              f"limits met: {design.limits_met}")
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
    robot = load_robot(args.model, terminal_body=args.terminal_body, mesh_dir=args.mesh_dir)
    print(f"Loaded {args.model}: {robot.n_joints} joints, terminal body '{robot.terminal_body}' "
          f"(joint '{robot.terminal_joint}')")
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

    terms = () if args.no_friction else ("coulomb", "viscous")
    config = IdentificationConfig(scope=args.scope, estimator=args.estimator, robust=args.robust,
                                  joint_model=JointModel(terms, args.coulomb_smoothing), friction_models=args.friction_model,
                                  filter=FilterConfig(cutoff_hz=args.cutoff, velocity_from_position=args.velocity_from_position), seed=args.seed)
    print(f"Identifying ({args.scope} scope, {args.estimator})")
    result = identify(robot, recording, config, validation=validation)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    document = params_document(result, robot, source=args.source, truth=truth)
    write_params_json(args.output_dir / "params.json", document)
    print(format_result(result, document))
    if not args.no_plots:
        try:
            write_plots(args.output_dir, robot, result, recording, validation)
        except ImportError as err:  # matplotlib is optional for the core
            print(f"warning: no plots ({err}); install matplotlib or pass --no-plots", file=sys.stderr)
    status = 0
    try:
        write_updated_model(args.model, args.output_dir / "updated_model.xml", robot, result)
    except IdentificationError as err:
        print(f"error: updated_model.xml not written: {err}", file=sys.stderr)
        status = 3
    if args.export_damiao:
        torque = predict_torque(robot, result, plan.q, plan.dq, plan.ddq)
        clamped = write_damiao_csv(args.output_dir / "damiao_trajectory.csv", plan, torque, args.motor_type)
        print("Damiao export, samples clamped per joint: " +
              ", ".join(f"{k} {v:.1f}%" for k, v in clamped.items()))
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
