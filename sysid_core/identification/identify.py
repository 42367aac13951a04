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
closest to the nominal model, and measure the fit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..dynamics import friction
from ..dynamics.inertia import PARAMETER_NAMES
from ..dynamics.model import Robot
from ..errors import DataError
from . import estimation
from .base_parameters import BaseParameters, base_parameters
from .consistency import consistent_parameters
from .estimation import Estimate, estimate
from .filtering import FilterConfig, prepare
from .recording import Recording

SCOPES = ("terminal", "full")
# "consistent": Gautier's WLS for the base parameters, then the physically consistent standard
# set nearest to them (what the full scope always does), in either scope
ESTIMATORS = estimation.ESTIMATORS + ("consistent",)


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
    coulomb_viscous replaces the coulomb and viscous terms of the joint model.
    """

    scope: str = "terminal"
    joint_model: friction.JointModel = field(default_factory=friction.JointModel)
    estimator: str = "wls"
    ridge_alpha: float = 1e-6
    robust: bool = False
    filter: FilterConfig = field(default_factory=FilterConfig)
    seed: int = 0
    friction_models: friction.FrictionSelection = field(default_factory=friction.FrictionSelection)

    def __post_init__(self):
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
    ``condition_number`` of the base regressor on this data (independent columns only)
    and ``condition_number_scaled`` after scaling columns to unit norm (unit-free);
    ``rank`` the number of base parameters; validation figures when a separate
    validation recording was given, else None. ``relative_*`` (n,): each joint's RMSE over
    the RMS of its measured torque (unitless; 0.05 means the model misses 5 % of it).
    """

    rmse_per_joint: np.ndarray
    rmse: float
    condition_number: float
    condition_number_scaled: float
    rank: int
    n_samples: int
    validation_rmse_per_joint: np.ndarray | None = None
    validation_rmse: float | None = None
    relative_rmse_per_joint: np.ndarray | None = None
    validation_relative_rmse_per_joint: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class IdentificationResult:
    """Everything an identification produced, in SI units.

    ``column_names`` (p,) name the identified standard parameters ``<body>.<param>`` and
    ``<joint>.<term>``; ``standard`` (p,) their values, the solution consistent with the
    base estimate that stays closest to the nominal model. ``body_parameters`` (nb, 10)
    are the standard inertial parameters of every moving body afterwards (nominal where
    not identified); ``coulomb``, ``viscous``, ``armature``, ``offset`` (n,) the joint terms
    afterwards (nominal model values where not identified, 0 for offsets); with a nonlinear
    friction law, coulomb and viscous are its Coulomb level and linear viscous coefficient
    (means of the two directions where they differ). ``friction`` (n,) friction.JointFriction:
    each joint's friction law with all its parameters (what predict_torque uses).
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
    bodies merged; coulomb = frictionloss, viscous = damping, armature, offset = 0)."""
    values = []
    joint_terms = {"coulomb": robot.frictionloss, "viscous": robot.damping, "armature": robot.armature,
                   "offset": np.zeros(robot.n_joints)}
    for name in names:
        owner, _, what = name.rpartition(".")
        if what in PARAMETER_NAMES:
            values.append(robot.nominal_parameters[robot.body_names.index(owner), PARAMETER_NAMES.index(what)])
        else:
            j = robot.joint_names.index(owner)
            values.append(joint_terms[what][j] if what in joint_terms else
                          friction.nominal_value(what, robot.frictionloss[j], robot.damping[j]))
    return np.array(values)


def _columns(robot: Robot, config: IdentificationConfig, q, dq, ddq, nonlinear=None):
    """Regressor of the identified columns (N, n, p) and the torque of everything known (N, n).

    ``nonlinear`` (n,) per-joint nonlinear friction values (None: given or default values)."""
    joint_model = _joint_model(config)
    models = _friction_models(robot, config)
    inertial = robot.regressor(q, dq, ddq)
    if config.scope == "terminal":
        t = robot.terminal_index
        known_theta = robot.nominal_parameters.copy()
        known_theta[t] = 0.0
        known = inertial @ known_theta.reshape(-1)
        inertial = inertial[..., 10 * t:10 * t + 10]
    else:
        known = np.zeros(np.shape(q))
    # joint terms not identified keep the model's values
    model_terms = {"coulomb": robot.frictionloss * friction.coulomb_feature(dq, joint_model.smoothing),
                   "viscous": robot.damping * dq, "armature": robot.armature * ddq}
    for term, torque in model_terms.items():
        if term not in joint_model.terms and not (models is not None and term in ("coulomb", "viscous")):
            known = known + torque
    blocks = [inertial, friction.joint_regressor(dq, ddq, joint_model)]
    if models is not None:
        blocks.append(friction.friction_regressor(dq, models, nonlinear, joint_model.smoothing))
    columns = np.concatenate(blocks, axis=2)
    return columns, known


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
    sing = np.linalg.svd(matrix, compute_uv=False)
    norms = np.linalg.norm(matrix, axis=0)
    sing_scaled = np.linalg.svd(matrix / np.where(norms > 0, norms, 1.0), compute_uv=False)
    ratio = (lambda s: float(s[0] / s[-1]) if s[-1] > 0 else float("inf"))
    return ratio(sing), ratio(sing_scaled)


def predict_torque(robot: Robot, result: IdentificationResult, q, dq, ddq) -> np.ndarray:
    """Joint torques (N, n) of the identified model: rigid bodies plus joint terms."""
    q, dq, ddq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, ddq))
    rigid = robot.regressor(q, dq, ddq) @ result.body_parameters.reshape(-1)
    if result.friction is not None and any(f.model.name != "coulomb_viscous" for f in result.friction):
        return rigid + friction.friction_torque(dq, result.friction) + result.armature * ddq + result.offset
    coulomb = friction.coulomb_feature(dq, result.config.joint_model.smoothing)
    return rigid + result.coulomb * coulomb + result.viscous * dq + result.armature * ddq + result.offset


def _rmse(residual: np.ndarray, torque: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """Per joint (n,) and pooled RMSE of ``residual`` (N, n), and per joint relative to ``torque``'s RMS."""
    per_joint = np.sqrt(np.mean(residual**2, axis=0))
    scale = np.sqrt(np.mean(np.asarray(torque)**2, axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(scale > 0, per_joint / scale, np.inf)
    return per_joint, float(np.sqrt(np.mean(residual**2))), relative


def identify(robot: Robot, recording: Recording, config: IdentificationConfig = IdentificationConfig(),
             validation: Recording | None = None) -> IdentificationResult:
    """Identify ``robot``'s parameters from ``recording`` (and report on ``validation``).

    The recording's joints are matched to the model by name. Raises DataError for unusable
    data (missing joints, too few samples) and IdentificationError when the data cannot
    determine the base parameters.
    """
    samples = prepare(recording.select(robot.joint_names), config.filter)
    names = column_names(robot, config)
    minimum = max(50, 3 * len(names))
    if samples.n_samples < minimum:
        raise DataError(f"too few samples: {samples.n_samples} after filtering, at least {minimum} are needed "
                        f"to identify {len(names)} parameters")
    base = structural_base_parameters(robot, config)
    nonlinear = _fit_friction(robot, config, samples, base)  # None unless a friction law has some
    columns, known = _columns(robot, config, samples.q, samples.dq, samples.ddq, nonlinear)
    base_columns = columns[..., base.independent]
    target = samples.tau - known
    est = estimate(base_columns, target, _base_estimator(config), config.ridge_alpha, robust=config.robust)

    nominal = model_parameter_vector(robot, names)
    if config.scope == "full" or config.estimator == "consistent":
        # many standard sets share these base values: take the physically consistent one
        # nearest the data, pulled to the nominal model only where the data are silent
        n_bodies = robot.n_bodies if config.scope == "full" else 1
        # friction levels and armature cannot be negative; offsets and the higher-order or
        # excess terms of the nonlinear friction laws can
        free = ("offset",) + friction.SIGNED_PARAMETERS
        signed = [name.rpartition(".")[2] not in free for name in names[10 * n_bodies:]]
        standard = consistent_parameters(base.projection, est.values, est.covariance, nominal, n_bodies,
                                         nonnegative=signed)
    else:
        # full rank in practice; otherwise the nominal values fill what the data cannot see
        standard = nominal + np.linalg.pinv(base.projection) @ (est.values - base.projection @ nominal)

    body_parameters = robot.nominal_parameters.copy()
    bodies = [robot.terminal_body] if config.scope == "terminal" else list(robot.body_names)
    for k, body in enumerate(bodies):
        body_parameters[robot.body_names.index(body)] = standard[10 * k:10 * k + 10]
    terms = {"coulomb": robot.frictionloss.copy(), "viscous": robot.damping.copy(),
             "armature": robot.armature.copy(), "offset": np.zeros(robot.n_joints)}
    joint_model = _joint_model(config)
    offset = 10 * len(bodies)
    for t, term in enumerate(joint_model.terms):
        terms[term] = standard[offset + t * robot.n_joints: offset + (t + 1) * robot.n_joints].copy()
    frictions = _joint_frictions(robot, config, names, standard, terms, nonlinear)
    terms["coulomb"] = np.array([f.coulomb_level for f in frictions])
    terms["viscous"] = np.array([f.viscous_level for f in frictions])

    # the fit of the parameters delivered: the consistent ones where they differ from the estimate
    rmse_joint, rmse, relative = _rmse(target - base_columns @ (base.projection @ standard), samples.tau)
    cond, cond_scaled = _condition(base_columns.reshape(-1, base.rank))
    metrics = Metrics(rmse_joint, rmse, cond, cond_scaled, base.rank, samples.n_samples,
                      relative_rmse_per_joint=relative)
    result = IdentificationResult(
        scope=config.scope, config=config, joint_names=robot.joint_names, body_names=robot.body_names,
        terminal_body=robot.terminal_body, terminal_joint=robot.terminal_joint, column_names=names,
        standard=standard, base=base, estimate=est, body_parameters=body_parameters,
        coulomb=terms["coulomb"], viscous=terms["viscous"], armature=terms["armature"], offset=terms["offset"],
        metrics=metrics, friction=frictions)
    if validation is None:
        return result
    check = prepare(validation.select(robot.joint_names), config.filter)
    val_joint, val, val_relative = _rmse(check.tau - predict_torque(robot, result, check.q, check.dq, check.ddq),
                                         check.tau)
    return replace(result, metrics=replace(metrics, validation_rmse_per_joint=val_joint, validation_rmse=val,
                                           validation_relative_rmse_per_joint=val_relative))


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
