"""Identification of an arm's inertial parameters and joint friction from a recording.

Two scopes:

``terminal``
    The arm is known from the model except its terminal body (link plus whatever is
    bolted to it). Its 10 standard parameters and the friction of every joint are
    estimated from the torques of ALL joints: the proximal joints carry the
    payload's weight, which is what makes its mass and first moment identifiable.
``full``
    Base parameters of the whole arm plus friction and armature of every joint.

Pipeline: filter the measurements (unless accelerations are exact), build the
regressor, find the base parameters on random well-spread states (so rank
deficiencies are structural), estimate them, map back to standard parameters
closest to the nominal model, measure the fit and judge the result (verdict.py).

The joint terms follow the physics of the data's source (``IdentificationConfig.physics``):
a real joint (None) or MuJoCo's (joint_physics.MujocoPhysics: frictionloss as its soft
constraint, damping where its integrator applies it). Joint springs (MJCF stiffness and
springref) are a known torque from the model unless identified.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..dynamics import friction
from ..dynamics.inertia import PARAMETER_NAMES, consistency_violations
from ..dynamics.joint_physics import MujocoPhysics
from ..dynamics.model import Robot
from ..errors import DataError
from . import estimation
from .base_parameters import BaseParameters, base_parameters
from .consistency import consistency_distance, consistent_parameters, realisable_floor
from .estimation import Estimate, estimate
from .filtering import FilterConfig, prepare
from .recording import Recording
from .verdict import Evidence, Verdict, judge

SCOPES = ("terminal", "full")
# "consistent": Gautier's WLS for the base parameters, then the physically consistent standard
# set nearest to them (what the full scope always does), in either scope
ESTIMATORS = estimation.ESTIMATORS + ("consistent",)
# At most this many passes of the estimate when MuJoCo's frictionloss constraint depends on
# what is being identified (its saturation level, the arm's inertia at qpos0): each pass
# redoes only the joint columns and the linear solve.
FRICTIONLOSS_PASSES = 4
FRICTIONLOSS_TOLERANCE = 1e-6  # relative change of the constraint's parameters that ends the passes


@dataclass(frozen=True)
class IdentificationConfig:
    """Choices of an identification run.

    ``scope`` terminal or full; ``joint_model`` the per-joint terms (armature is added in
    the full scope when absent); ``estimator`` ols, ridge, wls or consistent (WLS, then the
    physically consistent standard parameters nearest it; the full scope always ends so);
    ``robust`` Huber IRLS weighting of every equation against outliers (not with ridge);
    ``filter`` the
    measured-signal processing; ``seed`` for the random states of the base-parameter
    analysis. ``friction_models`` each joint's friction law (friction.FrictionSelection; a
    name, a comma list, a FrictionModel or a tuple of them are accepted): anything but
    coulomb_viscous replaces the coulomb and viscous terms of the joint model. ``physics``
    where the data came from: None for a real arm (the default), or a
    joint_physics.MujocoPhysics when MuJoCo computed them (``MujocoPhysics.inverse(model)``
    for mj_inverse, ``MujocoPhysics.simulation(model, timestep)`` for forward simulation):
    only then are MuJoCo's frictionloss constraint and implicit damping modelled.
    """

    scope: str = "terminal"
    joint_model: friction.JointModel = field(default_factory=friction.JointModel)
    estimator: str = "wls"
    ridge_alpha: float = 1e-6
    robust: bool = False
    filter: FilterConfig = field(default_factory=FilterConfig)
    seed: int = 0
    friction_models: friction.FrictionSelection = field(default_factory=friction.FrictionSelection)
    physics: MujocoPhysics | None = None

    def __post_init__(self):
        if self.physics is not None and not isinstance(self.physics, MujocoPhysics):
            raise ValueError(f"physics must be None (hardware) or a MujocoPhysics, got {self.physics!r}")
        if not isinstance(self.friction_models, friction.FrictionSelection):
            object.__setattr__(self, "friction_models", friction.FrictionSelection(self.friction_models))
        if not self.friction_models.is_default and not {"coulomb", "viscous"} <= set(self.joint_model.terms):
            raise ValueError("friction models other than coulomb_viscous replace the coulomb and viscous terms: "
                             "they need friction identified (joint model terms 'coulomb' and 'viscous')")
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope '{self.scope}'; choose one of {SCOPES}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown estimator '{self.estimator}'; choose one of {ESTIMATORS}")
        if self.robust and self.estimator == "ridge":
            raise ValueError("robust weighting is not available with the ridge estimator")


def _base_estimator(config: IdentificationConfig) -> str:
    return "wls" if config.estimator == "consistent" else config.estimator


@dataclass(frozen=True, eq=False)
class Metrics:
    """Quality of a fit. Torque RMSE in N m: ``rmse_per_joint`` (n,) and pooled ``rmse``;
    ``condition_number`` of the base regressor on this data with columns scaled to unit norm
    (unit-free: it measures how well the motion excites the parameters) and
    ``condition_number_raw`` of the unscaled one (it mixes units, kg with kg m^2); ``rank`` the
    number of base parameters; validation figures when a separate validation recording was
    given, else None. ``relative_*`` each joint's RMSE over the RMS of its measured torque
    (n,), and ``relative_rmse``/``validation_relative_rmse`` pooled over the joints (the
    residual's norm over the torque's); unitless, 0.05 means the model misses 5 % of it.
    """

    rmse_per_joint: np.ndarray
    rmse: float
    condition_number: float
    condition_number_raw: float
    rank: int
    n_samples: int
    validation_rmse_per_joint: np.ndarray | None = None
    validation_rmse: float | None = None
    relative_rmse_per_joint: np.ndarray | None = None
    validation_relative_rmse_per_joint: np.ndarray | None = None
    relative_rmse: float | None = None
    validation_relative_rmse: float | None = None


@dataclass(frozen=True, eq=False)
class IdentificationResult:
    """Everything an identification produced, in SI units.

    ``column_names`` (p,) name the identified standard parameters ``<body>.<param>`` and
    ``<joint>.<term>``; ``standard`` (p,) their values, the solution consistent with the
    base estimate that stays closest to the nominal model. ``body_parameters`` (nb, 10)
    are the standard inertial parameters of every moving body afterwards (nominal where
    not identified); ``coulomb``, ``viscous``, ``armature``, ``offset``, ``stiffness`` (n,) the
    joint terms afterwards (nominal model values where not identified, 0 for offsets); with a nonlinear
    friction law, coulomb and viscous are its Coulomb level and linear viscous coefficient
    (means of the two directions where they differ). ``friction`` (n,) friction.JointFriction:
    each joint's friction law with all its parameters (what predict_torque uses). ``verdict``
    whether the result can be trusted (verdict.Verdict: good, doubtful or failed, with reasons).
    """

    scope: str
    config: IdentificationConfig
    joint_names: tuple
    body_names: tuple
    terminal_body: str
    terminal_joint: str
    column_names: tuple
    standard: np.ndarray
    base: BaseParameters
    estimate: Estimate
    body_parameters: np.ndarray
    coulomb: np.ndarray
    viscous: np.ndarray
    armature: np.ndarray
    offset: np.ndarray
    metrics: Metrics
    friction: tuple | None = None
    verdict: Verdict | None = None
    stiffness: np.ndarray | None = None

    @property
    def terminal_parameters(self) -> np.ndarray:
        """The terminal body's identified standard parameters (10,)."""
        return self.body_parameters[self.body_names.index(self.terminal_body)]


def column_names(robot: Robot, config: IdentificationConfig) -> tuple:
    """Names of the standard-parameter columns identified under ``config``."""
    bodies = [robot.terminal_body] if config.scope == "terminal" else robot.body_names
    inertial = tuple(f"{b}.{p}" for b in bodies for p in PARAMETER_NAMES)
    names = inertial + friction.column_names(robot.joint_names, _joint_model(config))
    models = _friction_models(robot, config)
    return names if models is None else names + friction.friction_column_names(robot.joint_names, models)


def _friction_models(robot: Robot, config: IdentificationConfig):
    """Each joint's friction law (n,) FrictionModel, or None on the plain coulomb_viscous path."""
    return None if config.friction_models.is_default else config.friction_models.for_joints(robot.n_joints)


def _joint_model(config: IdentificationConfig) -> friction.JointModel:
    terms = config.joint_model.terms
    if config.scope == "full" and "armature" not in terms:
        terms = terms + ("armature",)
    if config.scope == "terminal":  # armature is known from the model there
        terms = tuple(t for t in terms if t != "armature")
    if not config.friction_models.is_default:  # the friction laws' own columns take their place
        terms = tuple(t for t in terms if t not in ("coulomb", "viscous"))
    return friction.JointModel(terms, config.joint_model.smoothing)


def model_parameter_vector(robot: Robot, names) -> np.ndarray:
    """A model's own value for each named column (inertial from the MJCF bodies, welded
    bodies merged; coulomb = frictionloss, viscous = damping, armature, offset = 0, stiffness)."""
    values = []
    joint_terms = robot.joint_values
    for name in names:
        owner, _, what = name.rpartition(".")
        if what in PARAMETER_NAMES:
            values.append(robot.nominal_parameters[robot.body_names.index(owner), PARAMETER_NAMES.index(what)])
        else:
            j = robot.joint_names.index(owner)
            values.append(joint_terms[what][j] if what in joint_terms else
                          friction.nominal_value(what, robot.frictionloss[j], robot.damping[j]))
    return np.array(values)


@dataclass(frozen=True, eq=False)
class _Constraint:
    """What MuJoCo's frictionloss constraint force depends on beyond the motion: the friction
    ``level`` (n,) N m where it saturates and ``invweight0`` (n,), the arm's inverse inertia
    diagonal at qpos0 (None: the model's)."""

    level: np.ndarray | None = None
    invweight0: np.ndarray | None = None


def _columns(robot: Robot, config: IdentificationConfig, q, dq, ddq, nonlinear=None,
             constraint: _Constraint = _Constraint()):
    """Regressor of the identified columns (N, n, p) and the torque of everything known (N, n).

    The one place where a sample's columns are built (from _inertial_columns and
    _joint_columns). ``nonlinear`` (n,) per-joint nonlinear friction values (None: given or
    default values); ``constraint`` MuJoCo's frictionloss state (default the model's; only
    with MuJoCo physics)."""
    inertial, known = _inertial_columns(robot, config, q, dq, ddq)
    joint, joint_known = _joint_columns(robot, config, q, dq, ddq, nonlinear, constraint)
    return np.concatenate([inertial, joint], axis=2), known + joint_known


def _inertial_columns(robot: Robot, config: IdentificationConfig, q, dq, ddq):
    """The rigid bodies' part of ``_columns``: the identified bodies' columns (N, n, 10 b) and
    the torque (N, n) of the bodies known from the model (all but the terminal one in the
    terminal scope)."""
    inertial = robot.regressor(q, dq, ddq)
    if config.scope == "full":
        return inertial, np.zeros(np.shape(q))
    t = robot.terminal_index
    known_theta = robot.nominal_parameters.copy()
    known_theta[t] = 0.0
    return inertial[..., 10 * t:10 * t + 10], inertial @ known_theta.reshape(-1)


def _joint_columns(robot: Robot, config: IdentificationConfig, q, dq, ddq, nonlinear=None,
                   constraint: _Constraint = _Constraint()):
    """The joint terms' part of ``_columns``: their columns (N, n, k) and the torque (N, n) of
    the terms the model knows (every term not identified, at the model's value)."""
    joint_model = _joint_model(config)
    models = _friction_models(robot, config)
    # the friction laws' own columns replace the model's coulomb and viscous terms
    replaced = ("coulomb", "viscous") if models is not None else ()
    known_terms = [t for t in friction.TERMS if t not in joint_model.terms and t not in replaced]
    features = robot.joint_features(tuple(joint_model.terms) + tuple(known_terms), q, dq, ddq,
                                    joint_model.smoothing, config.physics, constraint.level, constraint.invweight0)
    values = robot.joint_values
    known = np.zeros(np.shape(q))
    for term in known_terms:
        if np.any(values[term]):
            known = known + values[term] * features[term]
    blocks = [friction.diagonal_columns(features, joint_model.terms)]
    if models is not None:
        blocks.append(friction.friction_regressor(dq, models, nonlinear, joint_model.smoothing))
    return np.concatenate(blocks, axis=2), known


def _fit_friction(robot: Robot, config: IdentificationConfig, samples, base: BaseParameters):
    """Nonlinear friction parameters (n,) tuples by separable least squares around the run's own
    estimator, or None when no joint's law has any to estimate."""
    models = _friction_models(robot, config)
    if models is None or not any(m.free for m in models):
        return None
    columns, known = _columns(robot, config, samples.q, samples.dq, samples.ddq)
    width = sum(len(m.linear_names) for m in models)  # the friction block comes last

    def solve(w, y):
        return estimate(w, y, _base_estimator(config), config.ridge_alpha, robust=config.robust)

    return friction.fit_nonlinear(columns[..., :columns.shape[2] - width], samples.tau - known, samples.dq, models,
                                  solve, config.joint_model.smoothing, base.independent)


def _joint_frictions(robot: Robot, config: IdentificationConfig, names, standard, terms, nonlinear) -> tuple:
    """Each joint's JointFriction from the standard parameters (coulomb_viscous from ``terms``)."""
    smoothing = config.joint_model.smoothing
    models = _friction_models(robot, config)
    if models is None:
        return tuple(friction.JointFriction(friction.FrictionModel(), (float(c), float(v)), (), smoothing)
                     for c, v in zip(terms["coulomb"], terms["viscous"]))
    values = dict(zip(names, standard))
    nonlinear = tuple(m.values() for m in models) if nonlinear is None else nonlinear
    return tuple(friction.JointFriction(m, tuple(float(values[f"{j}.{p}"]) for p in m.linear_names),
                                        tuple(nonlinear[k]), smoothing)
                 for k, (j, m) in enumerate(zip(robot.joint_names, models)))


def _random_states(robot: Robot, count: int, seed: int):
    rng = np.random.default_rng(seed)
    lower, upper = robot.joint_range[:, 0], robot.joint_range[:, 1]
    lower = np.where(np.isfinite(lower), lower, -np.pi)
    upper = np.where(np.isfinite(upper), upper, np.pi)
    q = rng.uniform(lower, upper, (count, robot.n_joints))
    dq = rng.uniform(-2.0, 2.0, (count, robot.n_joints))
    ddq = rng.uniform(-5.0, 5.0, (count, robot.n_joints))
    return q, dq, ddq


def structural_base_parameters(robot: Robot, config: IdentificationConfig) -> BaseParameters:
    """Base parameters of the identification problem itself, independent of any trajectory."""
    names = column_names(robot, config)
    count = max(400, 4 * len(names))
    columns, _ = _columns(robot, config, *_random_states(robot, count, config.seed))
    return base_parameters(columns.reshape(-1, len(names)), names)


def _condition(matrix: np.ndarray) -> tuple[float, float]:
    """(unit-scaled, raw) condition numbers of ``matrix`` (rows, r)."""
    sing = np.linalg.svd(matrix, compute_uv=False)
    norms = np.linalg.norm(matrix, axis=0)
    sing_scaled = np.linalg.svd(matrix / np.where(norms > 0, norms, 1.0), compute_uv=False)
    ratio = (lambda s: float(s[0] / s[-1]) if s[-1] > 0 else float("inf"))
    return ratio(sing_scaled), ratio(sing)


def _constraint_state(robot: Robot, config: IdentificationConfig, body_parameters, coulomb, armature) -> _Constraint:
    """MuJoCo's frictionloss state of an identified model: its Coulomb levels (where identified)
    and the inverse inertia diagonal of its bodies and armature at qpos0."""
    level = coulomb if "coulomb" in _joint_model(config).terms else None
    return _Constraint(level, robot.inverse_inertia_diagonal(body_parameters, armature))


def _uses_constraint(robot: Robot, config: IdentificationConfig) -> bool:
    """Whether MuJoCo's frictionloss constraint is part of the model: MuJoCo data, and friction
    either identified as the coulomb term or known from the model."""
    if config.physics is None or not config.friction_models.is_default:
        return False
    return "coulomb" in _joint_model(config).terms or bool(np.any(robot.frictionloss > 0))


def predict_torque(robot: Robot, result: IdentificationResult, q, dq, ddq) -> np.ndarray:
    """Joint torques (N, n) N m of the identified model at q, dq, ddq (N, n): rigid bodies plus
    joint terms, with the physics the data came from (``result.config.physics``; replace it by
    None for what a real arm of these parameters needs)."""
    q, dq, ddq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, ddq))
    config = result.config
    nonlinear = None
    if _friction_models(robot, config) is not None:
        nonlinear = tuple(f.nonlinear for f in result.friction)
    constraint = _Constraint()
    if _uses_constraint(robot, config):
        constraint = _constraint_state(robot, config, result.body_parameters, result.coulomb, result.armature)
    columns, known = _columns(robot, config, q, dq, ddq, nonlinear, constraint)
    return known + columns @ result.standard


def _rmse(residual: np.ndarray, torque: np.ndarray) -> tuple[np.ndarray, float, np.ndarray, float]:
    """Per joint (n,) and pooled RMSE of ``residual`` (N, n), and both relative to ``torque``'s RMS."""
    per_joint = np.sqrt(np.mean(residual**2, axis=0))
    scale = np.sqrt(np.mean(np.asarray(torque)**2, axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(scale > 0, per_joint / scale, np.inf)
    pooled, total = float(np.sqrt(np.mean(residual**2))), float(np.sqrt(np.mean(np.asarray(torque)**2)))
    return per_joint, pooled, relative, pooled / total if total > 0 else float("inf")


def velocity_noise(dq) -> np.ndarray:
    """Per-joint white-noise level (n,) rad/s of a raw velocity recording dq (N, n): 1.4826 MAD
    of the second differences over sqrt(6). A smooth motion's second differences at a
    driver's sample rate are far below any sensor's noise; noise-free data give ~0."""
    second = np.diff(np.asarray(dq, dtype=float), n=2, axis=0)
    if second.shape[0] == 0:
        return np.zeros(np.shape(dq)[1])
    return 1.4826 * np.median(np.abs(second - np.median(second, axis=0)), axis=0) / np.sqrt(6.0)


def _evidence(robot: Robot, config: IdentificationConfig, recording: Recording, samples: Recording,
              est: Estimate, base: BaseParameters, standard: np.ndarray, body_parameters: np.ndarray,
              metrics: Metrics, consistent: bool) -> Evidence:
    """The figures the verdict is computed from (verdict.Evidence)."""
    noise = velocity_noise(recording.dq)
    motion = np.sqrt(np.mean((samples.dq - samples.dq.mean(axis=0)) ** 2, axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        snr = np.where(noise > 0, motion / np.where(noise > 0, noise, 1.0), np.where(motion > 0, np.inf, 0.0))
    mass_rel = com_std = None
    if config.scope == "terminal":
        # covariance of the terminal body's standard parameters: theta = nominal + P^+ (beta - P nominal)
        spread = np.linalg.pinv(base.projection)[:10]
        cov = spread @ est.covariance @ spread.T
        mass = float(standard[0])
        if mass > 0:
            mass_rel = float(np.sqrt(max(cov[0, 0], 0.0)) / mass)
            # c = h / m: dc = (dh - c dm) / m
            jac = np.hstack([-standard[1:4, None] / mass**2, np.eye(3) / mass])
            com_std = 1000.0 * float(np.sqrt(max(np.trace(jac @ cov[:4, :4] @ jac.T), 0.0)))
    bodies = [robot.terminal_body] if config.scope == "terminal" else list(robot.body_names)
    inconsistent = {}
    for body in bodies:
        i = robot.body_names.index(body)
        reasons = consistency_violations(body_parameters[i] - robot.welded_parameters[i])
        if reasons:
            inconsistent[body + (" (less its welded bodies)" if robot.merged_bodies[i] else "")] = reasons
    distance = consistency_distance(base.projection, est.values, est.covariance, standard) if consistent else None
    relative = metrics.validation_relative_rmse
    validated = relative is not None
    return Evidence(
        scope=config.scope, relative_rmse=relative if validated else metrics.relative_rmse, validated=validated,
        condition_number=metrics.condition_number, joint_names=robot.joint_names, motion_snr=snr,
        base_relative_std_percent=np.asarray(est.relative_std, dtype=float), mass_relative_std=mass_rel,
        com_std_mm=com_std, inconsistent=inconsistent, consistency_distance=distance,
        finite=bool(np.all(np.isfinite(standard)) and np.all(np.isfinite(est.values))))


def identify(robot: Robot, recording: Recording, config: IdentificationConfig = IdentificationConfig(),
             validation: Recording | None = None) -> IdentificationResult:
    """Identify ``robot``'s parameters from ``recording`` (and report on ``validation``).

    The recording's joints are matched to the model by name. Raises DataError for unusable
    data (missing joints, too few samples) and IdentificationError when the data cannot
    determine the base parameters.
    """
    recording = recording.select(robot.joint_names)
    samples = prepare(recording, config.filter)
    names = column_names(robot, config)
    minimum = max(50, 3 * len(names))
    if samples.n_samples < minimum:
        raise DataError(f"too few samples: {samples.n_samples} after filtering, at least {minimum} are needed "
                        f"to identify {len(names)} parameters")
    base = structural_base_parameters(robot, config)
    nonlinear = _fit_friction(robot, config, samples, base)  # None unless a friction law has some
    nominal = model_parameter_vector(robot, names)
    bodies = [robot.terminal_body] if config.scope == "terminal" else list(robot.body_names)
    joint_model = _joint_model(config)
    n_inertial = 10 * len(bodies)

    def solve(columns, known):
        est = estimate(columns[..., base.independent], samples.tau - known, _base_estimator(config),
                       config.ridge_alpha, robust=config.robust)
        # full rank in practice; otherwise the nominal values fill what the data cannot see
        return est, nominal + np.linalg.pinv(base.projection) @ (est.values - base.projection @ nominal)

    def terms_of(standard):
        out = {"coulomb": robot.frictionloss.copy(), "viscous": robot.damping.copy(),
               "armature": robot.armature.copy(), "offset": np.zeros(robot.n_joints), "stiffness": robot.stiffness.copy()}
        for t, term in enumerate(joint_model.terms):
            out[term] = standard[n_inertial + t * robot.n_joints: n_inertial + (t + 1) * robot.n_joints].copy()
        return out

    def bodies_of(standard):
        out = robot.nominal_parameters.copy()
        for k, body in enumerate(bodies):
            out[robot.body_names.index(body)] = standard[10 * k:10 * k + 10]
        return out

    inertial, inertial_known = _inertial_columns(robot, config, samples.q, samples.dq, samples.ddq)
    joint, joint_known = _joint_columns(robot, config, samples.q, samples.dq, samples.ddq, nonlinear)
    columns, known = np.concatenate([inertial, joint], axis=2), inertial_known + joint_known
    est, standard = solve(columns, known)
    if _uses_constraint(robot, config):
        # MuJoCo's frictionloss force depends on the friction level and on the arm's inertia at
        # qpos0 (through dof_invweight0), both being identified: pass again with the estimate's
        # until they settle (the inertia depends on base parameters only, so the minimum-norm
        # standard set is as good as any)
        level, weight = robot.frictionloss, robot.model.dof_invweight0
        for _ in range(FRICTIONLOSS_PASSES):
            terms = terms_of(standard)
            state = _constraint_state(robot, config, bodies_of(standard), terms["coulomb"], terms["armature"])
            new_level = level if state.level is None else np.maximum(state.level, 0.0)
            change = max(np.max(np.abs(state.invweight0 / weight - 1.0)),
                         np.max(np.abs(new_level - level) / np.maximum(np.abs(level), 1e-12)))
            if change < FRICTIONLOSS_TOLERANCE:
                break
            level, weight = new_level, state.invweight0
            joint, joint_known = _joint_columns(robot, config, samples.q, samples.dq, samples.ddq, nonlinear,
                                                _Constraint(level, weight))
            columns, known = np.concatenate([inertial, joint], axis=2), inertial_known + joint_known
            est, standard = solve(columns, known)
    base_columns = columns[..., base.independent]
    target = samples.tau - known
    # neighbouring samples of filtered data (and of smooth model errors) are not independent:
    # widen the covariance by the residual's correlation time so that standard deviations mean
    # what they say
    inflation = estimation.correlation_time(target - base_columns @ est.values)
    est = replace(est, covariance=est.covariance * inflation)

    consistent = config.scope == "full" or config.estimator == "consistent"
    if consistent:
        # many standard sets share these base values: take the physically consistent one
        # nearest the data, pulled to the nominal model only where the data are silent, with
        # a margin that keeps what a model file holds (the body less its welded parts) real
        # friction levels, armature and springs cannot be negative; offsets and the higher-order
        # or excess terms of the nonlinear friction laws can
        free = ("offset",) + friction.SIGNED_PARAMETERS
        signed = [name.rpartition(".")[2] not in free for name in names[n_inertial:]]
        index = [robot.body_names.index(b) for b in bodies]
        floor = realisable_floor(robot.nominal_parameters[index], robot.welded_parameters[index])
        standard = consistent_parameters(base.projection, est.values, est.covariance, nominal, len(bodies),
                                         nonnegative=signed, floor=floor)

    body_parameters = bodies_of(standard)
    terms = terms_of(standard)
    frictions = _joint_frictions(robot, config, names, standard, terms, nonlinear)
    terms["coulomb"] = np.array([f.coulomb_level for f in frictions])
    terms["viscous"] = np.array([f.viscous_level for f in frictions])

    # the fit of the parameters delivered: the consistent ones where they differ from the estimate
    rmse_joint, rmse, relative, pooled = _rmse(target - base_columns @ (base.projection @ standard), samples.tau)
    cond, cond_raw = _condition(base_columns.reshape(-1, base.rank))
    metrics = Metrics(rmse_joint, rmse, cond, cond_raw, base.rank, samples.n_samples,
                      relative_rmse_per_joint=relative, relative_rmse=pooled)
    result = IdentificationResult(
        scope=config.scope, config=config, joint_names=robot.joint_names, body_names=robot.body_names,
        terminal_body=robot.terminal_body, terminal_joint=robot.terminal_joint, column_names=names,
        standard=standard, base=base, estimate=est, body_parameters=body_parameters,
        coulomb=terms["coulomb"], viscous=terms["viscous"], armature=terms["armature"], offset=terms["offset"],
        metrics=metrics, friction=frictions, stiffness=terms["stiffness"])
    if validation is not None:
        check = prepare(validation.select(robot.joint_names), config.filter)
        val_joint, val, val_relative, val_pooled = _rmse(
            check.tau - predict_torque(robot, result, check.q, check.dq, check.ddq), check.tau)
        metrics = replace(metrics, validation_rmse_per_joint=val_joint, validation_rmse=val,
                          validation_relative_rmse_per_joint=val_relative, validation_relative_rmse=val_pooled)
    notes = tuple(recording.quality_notes) + (() if validation is None else
                                              tuple(n for n in validation.quality_notes
                                                    if n not in recording.quality_notes))
    evidence = _evidence(robot, config, recording, samples, est, base, standard, body_parameters, metrics,
                         consistent)
    return replace(result, metrics=metrics, verdict=judge(evidence, notes))


def base_regressor(robot: Robot, config: IdentificationConfig, q, dq, ddq,
                   base: BaseParameters | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Regressor of the base parameters (N, n, r) and the torque of everything known (N, n), N m.

    The independent columns of the identified standard parameters under ``config`` (those of
    ``structural_base_parameters`` unless ``base`` is given): what an identification on these
    states would estimate. q, dq, ddq (N, n) rad, rad/s, rad/s^2. The nominal model's joint
    torques are ``regressor @ (base.projection @ model_parameter_vector(robot, names)) + known``.
    """
    base = structural_base_parameters(robot, config) if base is None else base
    columns, known = _columns(robot, config, q, dq, ddq)
    return columns[..., base.independent], known
