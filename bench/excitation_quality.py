"""Does the optimized excitation give better parameters than the multisine? On the real-arm corpus.

For each arm of test/models/real_arms and each scope, excitations of the same duration at 1 kHz
for the nominal (published) arm:

* the multisine of ``sysid-identify`` for seeds s = 0..S-1, capped at 2 rad/s and slowed until the
  nominal torques fit 80 % of the file's actuator limits (``slow_to_torque_limits``, as the CLI);
* ``optimize_excitation`` (the scope's default criterion or ``--criteria``, the CLI's default time
  limit unless ``--time-limit``, on the processes the CLI would use), within the same limits, for
  design seeds d = 0..D-1 (``--design-seeds``, default 1: one design per arm and scope, as a
  user would run it once).

Each is scored by the condition number of its base regressor (raw and with unit-norm columns) and
by the estimates it gives: the arm with the payload of ``arm_corpus.with_payload`` welded on is
the truth; its joint torques along the plan (MuJoCo's inverse dynamics, ``ideal_recording``; the
identification models MuJoCo's joint physics as the CLI's ideal source does) plus Gaussian noise
of ``--noise-scale`` times the default 0.02 N m (noise seed 1000 + s) are identified by WLS with
Coulomb and viscous friction in the scope. The optimized plan of noise seed s is design s mod D,
so with D < S one design meets several noise draws (the noise's spread, not the search's).
Errors:

* terminal scope, the payload (the identified terminal body minus the nominal one): mass error
  relative to the payload's mass, centre-of-mass error (mm), and the error of its inertia about its
  centre of mass relative to the true one (Frobenius norms);
* full scope, the base parameters: ||S (beta_hat - beta)|| / ||S beta||, S each base column's RMS on
  random states (an error in units of the torque it makes).

Prints medians with their spread (25th-75th percentile) and the ratios optimized / multisine of
the medians; the design's targets are condition ratios <= 0.5 on every arm and error ratios
<= 0.7 on at least three arms. Asserts nothing. The whole corpus with 10 designs takes hours on two
cores (one search of up to the time limit per arm, scope and design seed): ``--arms``, ``--seeds``,
``--design-seeds``, ``--scopes``, ``--time-limit`` select less, and ``--cache DIR`` keeps each design
so that a run can be split or repeated.

Run: ``.venv/bin/python bench/excitation_quality.py [--arms ur10e iiwa14] [--seeds 10]
[--design-seeds 10] [--scopes terminal full] [--time-limit 60] [--criteria default condition]
[--cache /tmp/excitation_designs] [--information]``.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))  # the corpus and its payload helper

from arm_corpus import ARMS, arm, with_payload  # noqa: E402
from sysid_core.cli import _cap_arguments, _condition_cap  # noqa: E402 (the CLI's --excitation-condition-cap)
from sysid_core.dynamics.friction import JointModel  # noqa: E402
from sysid_core.dynamics.inertia import to_com_inertia  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.dynamics.joint_physics import MujocoPhysics  # noqa: E402
from sysid_core.excitation.design import (TORQUE_USAGE, default_criterion, optimize_excitation,  # noqa: E402
                                          regressor_condition, slow_to_torque_limits)
from sysid_core.excitation.criteria import CRITERIA  # noqa: E402
from sysid_core.excitation.trajectory import Trajectory  # noqa: E402
from sysid_core.excitation.multistart import search_workers  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification.identify import (IdentificationConfig, base_regressor, column_names,  # noqa: E402
                                                identify, model_parameter_vector, structural_base_parameters)
from sysid_core.identification.recording import Recording  # noqa: E402
from sysid_core.simulation import MeasurementNoise, ideal_recording, simulation_timing  # noqa: E402

DURATION = 15.0        # s, the CLI's default
SAMPLE_RATE = 1000.0   # Hz
MAX_VELOCITY = 2.0     # rad/s, the CLI's default
TIME_LIMIT = 60.0      # s, the CLI's default --excitation-time-limit


def slowed_multisine(robot, seed: int, duration: float):
    """The CLI's multisine: capped at MAX_VELOCITY, slowed until its nominal torques fit the actuators."""
    plan, _, _ = slow_to_torque_limits(
        lambda v: multisine(robot.joint_range, duration, SAMPLE_RATE, seed=seed, max_velocity=v), robot, MAX_VELOCITY)
    return plan


def optimized(name, robot, config, criterion, seed, args, workers):
    """Arm ``name``'s optimized plan (from ``args.cache`` when it holds it) and its search's wall time, s."""
    path = None
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
        cap = (f"_cap{args.condition_cap:g}" if isinstance(args.condition_cap, float) else
               "" if args.condition_cap == "auto" else "_nocap")
        path = args.cache / f"{name}_{config.scope}_{criterion}_{seed}_{args.duration:g}s_{args.time_limit:g}s{cap}.npz"
        if path.is_file():
            data = np.load(path)
            return Trajectory(data["time"], data["q"], data["dq"], data["ddq"]), float(data["wall"])
    started = time.perf_counter()
    design = optimize_excitation(robot, args.duration, SAMPLE_RATE, config=config, criterion=criterion, seed=seed,
                                 time_limit_s=args.time_limit, max_velocity=MAX_VELOCITY, workers=workers,
                                 **_cap_arguments(args.condition_cap))
    wall = time.perf_counter() - started
    plan = design.trajectory
    if path is not None:
        np.savez_compressed(path, time=plan.time, q=plan.q, dq=plan.dq, ddq=plan.ddq, wall=wall)
    return plan, wall


def recording(truth, plan, source: str, noise_std: float, seed: int) -> Recording:
    """The truth arm's torques along ``plan`` plus Gaussian noise (N m)."""
    if source == "mujoco":
        tau = ideal_recording(truth.model, plan, truth.joint_names).tau
    else:
        tau = truth.inverse_dynamics(plan.q, plan.dq, plan.ddq)
    tau = tau + np.random.default_rng(seed).normal(0.0, noise_std, tau.shape)
    return Recording(plan.time, plan.q, plan.dq, tau, truth.joint_names, plan.ddq)


def payload_errors(theta_hat, theta_true, theta_link) -> tuple[float, float, float]:
    """(mass error / payload mass, CoM error mm, relative inertia error at the CoM) of the payload."""
    true = to_com_inertia(theta_true - theta_link)
    added = theta_hat - theta_link
    mass = abs(added[0] - true.mass) / true.mass
    if not added[0] > 0:  # no centre of mass to compare
        return mass, np.inf, np.inf
    est = to_com_inertia(added)
    com = 1000.0 * float(np.linalg.norm(est.com - true.com))
    return mass, com, float(np.linalg.norm(est.inertia - true.inertia) / np.linalg.norm(true.inertia))


def base_error(robot, truth, config, result, scale) -> float:
    """||S (beta_hat - beta)|| / ||S beta|| of the base parameters."""
    names = column_names(robot, config)
    beta = result.base.projection @ model_parameter_vector(truth, names)
    return float(np.linalg.norm(scale * (result.estimate.values - beta)) / np.linalg.norm(scale * beta))


def predicted_errors(robot, truth, config, plan, noise_std, theta_true, link, scale) -> tuple:
    """What ``payload_errors`` (terminal scope) or ``base_error`` (full scope) should be about, from
    the information in ``plan`` alone (Cramer-Rao): the standard deviations of least squares on
    every sample of ``plan`` with white torque noise of ``noise_std`` N m (no filter, no model
    error). Terminal scope: (sd of the mass / payload mass, 1000 |sd of h| / terminal body's mass
    (mm, the CoM's), |sd of the inertia entries| (Frobenius) / |payload's inertia at its CoM|), a
    parameter that is not a base column of its own counted as 0; full scope: (sqrt(tr(S C S)) /
    ||S beta||,), C the base parameters' covariance; inf where the plan's information is singular."""
    base = structural_base_parameters(robot, config)
    columns, _ = base_regressor(robot, config, plan.q, plan.dq, plan.ddq, base=base)
    flat = columns.reshape(-1, columns.shape[-1])
    try:
        cov = noise_std ** 2 * np.linalg.inv(flat.T @ flat)
    except np.linalg.LinAlgError:  # a base parameter the plan does not excite at all
        return (np.inf,) if config.scope == "full" else (np.inf, np.inf, np.inf)
    if config.scope == "full":
        beta = base.projection @ model_parameter_vector(truth, column_names(robot, config))
        return (float(np.sqrt(np.sum(np.diag(cov) * scale ** 2)) / np.linalg.norm(scale * beta)),)
    prefix = robot.terminal_body + "."
    variance = {name[len(prefix):]: cov[k, k] for k, name in enumerate(base.names) if name.startswith(prefix)}

    def sd(keys, weights=None):
        weights = weights or [1.0] * len(keys)
        return float(np.sqrt(sum(w * variance.get(k, 0.0) for k, w in zip(keys, weights))))
    true = to_com_inertia(theta_true - link)
    inertia = sd(["Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz"], [1, 2, 2, 1, 2, 1])  # off-diagonals twice
    return (sd(["m"]) / true.mass, 1000.0 * sd(["hx", "hy", "hz"]) / theta_true[0],
            inertia / float(np.linalg.norm(true.inertia)))


def column_scale(robot, config, seed: int = 0) -> np.ndarray:
    """Each base column's RMS on random states within the joint ranges (2 rad/s, 10 rad/s^2)."""
    gen = np.random.default_rng(seed)
    lo = np.where(np.isfinite(robot.joint_range[:, 0]), robot.joint_range[:, 0], -np.pi)
    hi = np.where(np.isfinite(robot.joint_range[:, 1]), robot.joint_range[:, 1], np.pi)
    count = 2000
    q = gen.uniform(lo, hi, (count, robot.n_joints))
    dq = gen.uniform(-MAX_VELOCITY, MAX_VELOCITY, q.shape)
    ddq = gen.uniform(-10.0, 10.0, q.shape)
    cols, _ = base_regressor(robot, config, q, dq, ddq)
    return np.sqrt(np.mean(cols ** 2, axis=(0, 1)))


def spread(values) -> str:
    """'median [p25, p75]' of a list of numbers."""
    v = np.asarray(values, dtype=float)
    return f"{np.median(v):.3g} [{np.percentile(v, 25):.3g}, {np.percentile(v, 75):.3g}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=[a.name for a in ARMS], help="corpus arms (default: all)")
    parser.add_argument("--scopes", nargs="+", default=["terminal", "full"], choices=["terminal", "full"])
    parser.add_argument("--seeds", type=int, default=10,
                        help="multisine and noise seeds per arm and scope (default 10)")
    parser.add_argument("--design-seeds", type=int, default=1,
                        help="optimized designs per arm and scope, seeds 0..D-1 (default 1)")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="optimizer budget per design, s")
    parser.add_argument("--duration", type=float, default=DURATION, help="excitation length, s (default 15)")
    parser.add_argument("--noise-scale", type=float, default=3.0, help="times the default 0.02 N m (default 3)")
    parser.add_argument("--torques", choices=("mujoco", "model"), default="mujoco",
                        help="truth torques: MuJoCo's inverse dynamics (default) or the identification model's")
    parser.add_argument("--criteria", nargs="+", default=["default"], choices=("default",) + CRITERIA,
                        help="optimizer criteria to compare; 'default' is the scope's default criterion (the default)")
    parser.add_argument("--condition-cap", type=_condition_cap, default="auto",
                        help="auto: the criterion's default cap (d_optimal, payload: 0.4 of the multisines' condition "
                             "number); off: none; F: F times the multisines' (as --excitation-condition-cap)")
    parser.add_argument("--workers", type=int, default=None,
                        help="optimizer processes, 1 or 2 (default: search_workers, as the CLI)")
    parser.add_argument("--conditioning-only", action="store_true", help="condition numbers only, no identification")
    parser.add_argument("--information", action="store_true",
                        help="also the errors the plans' information predicts (Cramer-Rao, predicted_errors)")
    parser.add_argument("--cache", type=Path, default=None, help="directory keeping the optimized designs")
    parser.add_argument("--verbose", action="store_true", help="print every seed's figures")
    args = parser.parse_args(argv)
    design_seeds = min(args.design_seeds, args.seeds)
    noise = MeasurementNoise().tau_std * args.noise_scale
    workers = search_workers(args.time_limit) if args.workers is None else args.workers
    print(f"{args.duration:g} s at {SAMPLE_RATE:g} Hz, {MAX_VELOCITY:g} rad/s, nominal torques within "
          f"{TORQUE_USAGE:.0%} of the actuator limits; optimizer budget {args.time_limit:g} s on {workers} process(es); "
          f"torques: {args.torques}, noise {noise:g} N m; {args.seeds} multisine/noise seeds, {design_seeds} designs",
          flush=True)
    summary = []
    for name in args.arms:
        corpus_arm = arm(name)
        robot = load_robot(corpus_arm.path)
        payload = with_payload(corpus_arm.path)
        truth = load_robot(payload.xml)
        link = robot.nominal_parameters[robot.terminal_index]
        theta_true = truth.nominal_parameters[truth.terminal_index]
        physics = None
        if args.torques == "mujoco":  # the identification models MuJoCo's joint physics, as the CLI's ideal source
            physics = MujocoPhysics.inverse(truth.model, simulation_timing(truth.model, SAMPLE_RATE).timestep)
        for scope in args.scopes:
            config = IdentificationConfig(scope=scope, joint_model=JointModel(("coulomb", "viscous")), estimator="wls")
            fit_config = replace(config, physics=physics)
            scale = column_scale(robot, config)
            # the fit's own base: MuJoCo's joint physics can take a column out of it (Z1: joint6.coulomb)
            fit_scale = scale if physics is None else column_scale(robot, fit_config)
            criteria = [default_criterion(config) if c == "default" else c for c in args.criteria]
            criteria = list(dict.fromkeys(c for c in criteria if not (c == "payload" and scope == "full")))
            designs = {c: [optimized(name, robot, config, c, d, args, workers) for d in range(design_seeds)]
                       for c in criteria}
            rows = {k: [] for k in ["multisine"] + criteria}
            predicted = {k: [] for k in rows}
            for seed in range(args.seeds):
                plans = {"multisine": (slowed_multisine(robot, seed, args.duration), 0.0)}
                plans.update({c: designs[c][seed % design_seeds] for c in criteria})
                for label, (plan, wall) in plans.items():
                    if label != "multisine" and seed >= design_seeds and args.conditioning_only:
                        continue
                    cond, cond_scaled = regressor_condition(robot, plan, config)
                    errors = ()
                    if not args.conditioning_only:
                        rec = recording(truth, plan, args.torques, noise, 1000 + seed)
                        result = identify(robot, rec, fit_config)
                        if scope == "terminal":
                            errors = payload_errors(result.terminal_parameters, theta_true, link)
                        else:
                            errors = (base_error(robot, truth, config, result, fit_scale),)
                    rows[label].append((cond, cond_scaled) + errors)
                    if args.information and (label == "multisine" or seed < design_seeds):
                        predicted[label].append(predicted_errors(robot, truth, config, plan, noise, theta_true, link,
                                                                 scale))
                    if args.verbose:
                        print(f"  {name} {scope} seed {seed} {label:<10} cond {cond:9.1f} scaled {cond_scaled:7.2f} "
                              f"errors {' '.join(f'{e:.3g}' for e in errors)}" + (f"  ({wall:.0f} s)" if wall else "")
                              + (f"  predicted {' '.join(f'{e:.3g}' for e in predicted[label][-1])}"
                                 if args.information and predicted[label] else ""), flush=True)
            base_rows = np.array(rows["multisine"])
            for criterion in criteria:
                opt = np.array(rows[criterion])
                ratios = np.median(opt, axis=0) / np.median(base_rows, axis=0)
                summary.append((name, scope, criterion, base_rows, opt, ratios))
                labels = ["cond", "scaled"] + ([] if args.conditioning_only else
                                               ["mass", "com mm", "inertia"] if scope == "terminal" else ["base err"])
                print(f"{name:<14}{scope:<9}{criterion:<10}" + "  ".join(
                    f"{lab} {spread(base_rows[:, k])} -> {spread(opt[:, k])} ({ratios[k]:.2f})"
                    for k, lab in enumerate(labels)), flush=True)
                if args.information:
                    base_pred, opt_pred = np.array(predicted["multisine"]), np.array(predicted[criterion])
                    print(f"{'':<23}{criterion:<10}predicted " + "  ".join(
                        f"{lab} {spread(base_pred[:, k])} -> {spread(opt_pred[:, k])} "
                        f"({np.median(opt_pred[:, k]) / np.median(base_pred[:, k]):.2f})"
                        for k, lab in enumerate(["mass", "com mm", "inertia"] if scope == "terminal" else ["base err"])),
                          flush=True)

    print("\n| arm | scope | criterion | cond multisine | cond optimized | ratio (raw / scaled) | "
          "error multisine | error optimized | error ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, scope, criterion, base_rows, opt, ratios in summary:
        if len(ratios) == 2:
            err_base = err_opt = err_ratio = "-"
        elif scope == "terminal":
            err_base = f"mass {spread(base_rows[:, 2])}, CoM {spread(base_rows[:, 3])} mm, I {spread(base_rows[:, 4])}"
            err_opt = f"mass {spread(opt[:, 2])}, CoM {spread(opt[:, 3])} mm, I {spread(opt[:, 4])}"
            err_ratio = " / ".join(f"{r:.2f}" for r in ratios[2:])
        else:
            err_base, err_opt, err_ratio = spread(base_rows[:, 2]), spread(opt[:, 2]), f"{ratios[2]:.2f}"
        print(f"| {name} | {scope} | {criterion} | {spread(base_rows[:, 0])} / {spread(base_rows[:, 1])} | "
              f"{spread(opt[:, 0])} / {spread(opt[:, 1])} | {ratios[0]:.2f} / {ratios[1]:.2f} | {err_base} | "
              f"{err_opt} | {err_ratio} |")
    for scope in args.scopes:
        for criterion in sorted({s[2] for s in summary if s[1] == scope}):
            chosen = [s for s in summary if s[1] == scope and s[2] == criterion]
            cond_ok = sum(s[5][0] <= 0.5 for s in chosen)
            scaled_ok = sum(s[5][1] <= 0.5 for s in chosen)
            err_ok = sum(len(s[5]) > 2 and np.all(s[5][2:] <= 0.7) for s in chosen)
            print(f"{scope} {criterion}: condition <= 0.5 x multisine on {cond_ok}/{len(chosen)} arms (raw), "
                  f"{scaled_ok}/{len(chosen)} (scaled)"
                  + ("" if args.conditioning_only else f"; every error <= 0.7 x on {err_ok}/{len(chosen)} arms"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
