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

from . import friction
from .base_parameters import BaseParameters, base_parameters
from .consistency import consistent_parameters
from .errors import DataError
from .estimation import Estimate, estimate
from .filtering import FilterConfig, prepare
from .inertia import PARAMETER_NAMES
from .model import Robot
from .recording import Recording

SCOPES = ("terminal", "full")


@dataclass(frozen=True)
class IdentificationConfig:
    """Choices of an identification run.

    ``scope`` terminal or full; ``joint_model`` the per-joint terms (armature is added in
    the full scope when absent); ``estimator`` ols, ridge or wls; ``filter`` the
    measured-signal processing; ``seed`` for the random states of the base-parameter
    analysis.
    """

    scope: str = "terminal"
    joint_model: friction.JointModel = field(default_factory=friction.JointModel)
    estimator: str = "wls"
    ridge_alpha: float = 1e-6
    filter: FilterConfig = field(default_factory=FilterConfig)
    seed: int = 0

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope '{self.scope}'; choose one of {SCOPES}")


@dataclass(frozen=True, eq=False)
class Metrics:
    """Quality of a fit. Torque RMSE in N m: ``rmse_per_joint`` (n,) and pooled ``rmse``;
    ``condition_number`` of the base regressor on this data (independent columns only)
    and ``condition_number_scaled`` after scaling columns to unit norm (unit-free);
    ``rank`` the number of base parameters; validation figures when a separate
    validation recording was given, else None.
    """

    rmse_per_joint: np.ndarray
    rmse: float
    condition_number: float
    condition_number_scaled: float
    rank: int
    n_samples: int
    validation_rmse_per_joint: np.ndarray | None = None
    validation_rmse: float | None = None


@dataclass(frozen=True, eq=False)
class IdentificationResult:
    """Everything an identification produced, in SI units.

    ``column_names`` (p,) name the identified standard parameters ``<body>.<param>`` and
    ``<joint>.<term>``; ``standard`` (p,) their values, the solution consistent with the
    base estimate that stays closest to the nominal model. ``body_parameters`` (nb, 10)
    are the standard inertial parameters of every moving body afterwards (nominal where
    not identified); ``coulomb``, ``viscous``, ``armature``, ``offset`` (n,) the joint terms
    afterwards (nominal model values where not identified, 0 for offsets).
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

    @property
    def terminal_parameters(self) -> np.ndarray:
        """The terminal body's identified standard parameters (10,)."""
        return self.body_parameters[self.body_names.index(self.terminal_body)]


def column_names(robot: Robot, config: IdentificationConfig) -> tuple:
    """Names of the standard-parameter columns identified under ``config``."""
    bodies = [robot.terminal_body] if config.scope == "terminal" else robot.body_names
    inertial = tuple(f"{b}.{p}" for b in bodies for p in PARAMETER_NAMES)
    return inertial + friction.column_names(robot.joint_names, _joint_model(config))


def _joint_model(config: IdentificationConfig) -> friction.JointModel:
    terms = config.joint_model.terms
    if config.scope == "full" and "armature" not in terms:
        terms = terms + ("armature",)
    if config.scope == "terminal":  # armature is known from the model there
        terms = tuple(t for t in terms if t != "armature")
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
            values.append(joint_terms[what][robot.joint_names.index(owner)])
    return np.array(values)


def _columns(robot: Robot, config: IdentificationConfig, q, dq, ddq):
    """Regressor of the identified columns (N, n, p) and the torque of everything known (N, n)."""
    joint_model = _joint_model(config)
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
        if term not in joint_model.terms:
            known = known + torque
    columns = np.concatenate([inertial, friction.joint_regressor(dq, ddq, joint_model)], axis=2)
    return columns, known


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
    coulomb = friction.coulomb_feature(dq, result.config.joint_model.smoothing)
    return rigid + result.coulomb * coulomb + result.viscous * dq + result.armature * ddq + result.offset


def _rmse(residual: np.ndarray) -> tuple[np.ndarray, float]:
    return np.sqrt(np.mean(residual**2, axis=0)), float(np.sqrt(np.mean(residual**2)))


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
    columns, known = _columns(robot, config, samples.q, samples.dq, samples.ddq)
    base_columns = columns[..., base.independent]
    target = samples.tau - known
    est = estimate(base_columns, target, config.estimator, config.ridge_alpha)

    nominal = model_parameter_vector(robot, names)
    if config.scope == "full":
        # many standard sets share these base values: take the physically consistent one
        # nearest the data, pulled to the nominal model only where the data are silent
        standard = consistent_parameters(base.projection, est.values, est.covariance, nominal, robot.n_bodies)
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

    rmse_joint, rmse = _rmse(target - base_columns @ est.values)
    cond, cond_scaled = _condition(base_columns.reshape(-1, base.rank))
    metrics = Metrics(rmse_joint, rmse, cond, cond_scaled, base.rank, samples.n_samples)
    result = IdentificationResult(
        scope=config.scope, config=config, joint_names=robot.joint_names, body_names=robot.body_names,
        terminal_body=robot.terminal_body, terminal_joint=robot.terminal_joint, column_names=names,
        standard=standard, base=base, estimate=est, body_parameters=body_parameters,
        coulomb=terms["coulomb"], viscous=terms["viscous"], armature=terms["armature"], offset=terms["offset"],
        metrics=metrics)
    if validation is None:
        return result
    check = prepare(validation.select(robot.joint_names), config.filter)
    val_joint, val = _rmse(check.tau - predict_torque(robot, result, check.q, check.dq, check.ddq))
    return replace(result, metrics=replace(metrics, validation_rmse_per_joint=val_joint, validation_rmse=val))
