"""Identification of an arm's inertial parameters and joint friction from a recording.

Two scopes:

``terminal``
    The arm's links are known from the model except its terminal body (link plus whatever
    is bolted to it). Its 10 standard parameters and the friction and armature of every
    joint are estimated from the torques of ALL joints: the proximal joints carry the
    payload's weight, which is what makes its mass and first moment identifiable.
``full``
    Base parameters of the whole arm plus friction and armature of every joint.

In either scope a joint term the model does not give (friction, a rotor's inertia: zero in
nearly every URDF) is unknown, not zero: the model only fills in what the data leave
undetermined (consistency.prior_scale). An identified joint term that shares a base parameter
with other columns cannot be told apart from them on any motion: ``IdentificationResult.lumped``
names it with what it is lumped with.

Pipeline: find the base parameters on random well-spread states (so rank deficiencies are
structural); then, block by block of samples, filter the measurements (unless accelerations
are exact), build the regressor of the base columns and fold it into the reduced form of the
estimators (estimation.ReducedForm: per-joint QR triangles, O(n r^2) whatever the length);
estimate, map back to standard parameters closest to the nominal model, measure the fit (from
the same reduced form) and judge the result (verdict.py). Memory is a few blocks, not the
recording: 10 minutes at 1 kHz and 60 minutes need the same.

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
from ..dynamics.regressor import BLOCK
from . import estimation, filtering
from .base_parameters import BaseParameters, base_parameters
from .consistency import consistency_distance, consistent_parameters, realisable_floor
from .estimation import Estimate, ReducedForm, estimate, estimate_reduced
from .filtering import FilterConfig, VelocityWindow, prepared_sizes, prepared_windows, stretch_edges
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
# A joint whose frictionloss constraint saturates on less than this mean square of the samples
# (the saturated part, filtered) has its level held at the model's: the data cannot see it
SATURATED_SHARE = 0.01
# rows between the mass matrices computed along a window (_mass_along)
MASS_STRIDE = 10
# The data go through in blocks of BLOCK samples (the regressor's own block). Passes after the
# first (frictionloss, IRLS, the residual's correlation) reuse each block's samples and
# inertial columns when all of them fit in CACHE_BYTES; longer recordings are filtered and
# their regressor computed again in every pass, so memory never grows with their length.
CACHE_BYTES = 64e6
# The residual's correlation time is measured on at most this many samples: all of them for a
# shorter recording, else the first BLOCK of evenly spread blocks of prepared_blocks.
CORRELATION_SAMPLES = 65536
# The nonlinear friction search filters every trial law over the blocks it reads: all of a
# recording up to this many prepared rows, else evenly spread blocks of this many rows in all.
SEARCH_ROWS = 65536
NOISE_BLOCK = 1 << 18  # samples per stretch of velocity_noise


@dataclass(frozen=True)
class IdentificationConfig:
    """Choices of an identification run.

    ``scope`` terminal or full; ``joint_model`` the per-joint terms (armature is added when
    absent: a rotor's reflected inertia is unknown to nearly every model file; not in the
    terminal scope of data from MuJoCo ``physics``, which applied the file's); ``estimator``
    ols, ridge, wls or consistent (the default, as sysid-identify's and the identifier node's:
    WLS, then the physically consistent standard parameters nearest it, the model filling in
    only what the data leave undetermined; the full scope always ends so);
    ``robust`` Huber IRLS weighting of every equation against outliers (not with ridge);
    ``filter`` the
    measured-signal processing (with forward_acceleration for forward-simulated ``physics``); ``seed`` for the random states of the base-parameter
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
    estimator: str = "consistent"
    ridge_alpha: float = 1e-6
    robust: bool = False
    filter: FilterConfig = field(default_factory=FilterConfig)
    seed: int = 0
    friction_models: friction.FrictionSelection = field(default_factory=friction.FrictionSelection)
    physics: MujocoPhysics | None = None

    def __post_init__(self):
        if self.physics is not None and not isinstance(self.physics, MujocoPhysics):
            raise ValueError(f"physics must be None (hardware) or a MujocoPhysics, got {self.physics!r}")
        if self.physics is not None and self.physics.simulated and not self.filter.forward_acceleration:
            # forward simulation applies a sample's torque over the step that follows it
            object.__setattr__(self, "filter", replace(self.filter, forward_acceleration=True))
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
    ``held`` names of identified columns the data could not see, held at the model's values
    (a frictionloss level whose MuJoCo constraint never saturates in the recording).
    ``lumped`` (str, ...) for each identified joint term that is not a base parameter of its
    own, ``"<joint>.<term>: in base parameters <name>, ..."`` (their expressions are
    ``base.expressions``): no motion tells it apart from the other columns there (e.g. an
    armature and the inertia of the link its joint turns); its value is the split
    consistency.prior_scale gives.
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
    held: tuple = ()
    lumped: tuple = ()

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
    # a real arm's rotor inertia reflected through its gear: no model file knows it. Data MuJoCo
    # made applied the armature of the file it simulated, which the terminal scope takes from
    # the model: identified there, it would enter the frictionloss constraint's weight, which on
    # a light wrist outweighs the link nine times over, and blur its linearisation
    if "armature" not in terms and (config.scope == "full" or config.physics is None):
        terms = terms + ("armature",)
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
    diagonal at qpos0 (None: the model's).

    With ``gradient`` the passes linearise the force in the parameters (Gauss-Newton) instead
    of holding it at this state: dD/dparameter (n, p) of the identified columns at their values
    ``at`` (p,), and ``pinned`` (n,) the joints whose level the data cannot see (their
    constraint never saturates), held at ``level``. A plain fixed point diverges where D
    outweighs the identified inertia (z1's light wrist without armature: nine times), and a
    level's column that carries the linear zone trades with damping and inertia there."""

    level: np.ndarray | None = None
    invweight0: np.ndarray | None = None
    gradient: np.ndarray | None = None
    at: np.ndarray | None = None
    pinned: np.ndarray | None = None
    parameters: np.ndarray | None = None
    armature: np.ndarray | None = None
    damping: np.ndarray | None = None


def _columns(robot: Robot, config: IdentificationConfig, q, dq, ddq, nonlinear=None,
             constraint: _Constraint = _Constraint(), friction_columns=None):
    """Regressor of the identified columns (N, n, p) and the torque of everything known (N, n).

    The one place where a sample's columns are built (from _inertial_columns and
    _joint_columns). ``nonlinear`` (n,) per-joint nonlinear friction values (None: given or
    default values); ``constraint`` MuJoCo's frictionloss state (default the model's; only
    with MuJoCo physics); ``friction_columns`` the friction laws' columns of filtered data
    (_friction_block), None for the laws at dq."""
    inertial, known = _inertial_columns(robot, config, q, dq, ddq)
    joint, joint_known = _joint_columns(robot, config, q, dq, ddq, nonlinear, constraint, friction_columns)
    return np.concatenate([inertial, joint], axis=2), known + joint_known


def _inertial_columns(robot: Robot, config: IdentificationConfig, q, dq, ddq):
    """The rigid bodies' part of ``_columns``: the identified bodies' columns (N, n, 10 b) and
    the torque (N, n) of the bodies known from the model (all but the terminal one in the
    terminal scope)."""
    return _inertial_split(robot, config, robot.regressor(q, dq, ddq))


def _inertial_split(robot: Robot, config: IdentificationConfig, inertial: np.ndarray):
    """``_inertial_columns`` from the regressor (N, n, 10 nb) of the samples."""
    if config.scope == "full":
        return inertial, np.zeros(inertial.shape[:2])
    t = robot.terminal_index
    known_theta = robot.nominal_parameters.copy()
    known_theta[t] = 0.0
    return inertial[..., 10 * t:10 * t + 10], _contract(inertial, known_theta.reshape(-1))


def _contract(columns: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """columns (N, n, k) @ theta (k,) -> (N, n); matrix-vector products over the regressor's own
    (n, k, N) memory when it is laid out so (as robot.regressor returns it)."""
    inner = columns.transpose(1, 2, 0)
    if not inner.flags.c_contiguous:
        return columns @ theta
    return np.matmul(theta, inner).T


def _joint_columns(robot: Robot, config: IdentificationConfig, q, dq, ddq, nonlinear=None,
                   constraint: _Constraint = _Constraint(), friction_columns=None):
    """The joint terms' part of ``_columns``: their columns (N, n, k) and the torque (N, n) of
    the terms the model knows (every term not identified, at the model's value).
    ``friction_columns`` the friction's columns when they are not those of dq and ddq
    (_friction_block of filtered data): the laws' (N, n, P), or the default law's Coulomb
    parts (_friction_block)."""
    joint_model = _joint_model(config)
    models = _friction_models(robot, config)
    # the friction laws' own columns replace the model's coulomb and viscous terms
    replaced = ("coulomb", "viscous") if models is not None else ()
    known_terms = [t for t in friction.TERMS if t not in joint_model.terms and t not in replaced]
    terms = tuple(joint_model.terms) + tuple(known_terms)
    given = models is None and friction_columns is not None
    features = robot.joint_features(tuple(t for t in terms if not (given and t == "coulomb")), q, dq, ddq,
                                    joint_model.smoothing, config.physics, constraint.level, constraint.invweight0,
                                    constraint.parameters, constraint.armature, constraint.damping)
    known = np.zeros(np.shape(q))
    if given:
        features["coulomb"], linear = friction_columns
        if constraint.gradient is not None and linear is not None:
            # linearised: the level's column is where the constraint saturates, D (ddq + B dq)
            # where it does not is known at this state, and so is a pinned joint's level
            invweight0 = robot.model.dof_invweight0 if constraint.invweight0 is None else constraint.invweight0
            known = known + robot.frictionloss_constraint.weight(invweight0) * linear
            if "coulomb" in joint_model.terms and constraint.pinned is not None:
                known = known + np.where(constraint.pinned, constraint.level, 0.0) * features["coulomb"]
    values = robot.joint_values
    for term in known_terms:
        if np.any(values[term]):
            known = known + values[term] * features[term]
    blocks = [friction.diagonal_columns(features, joint_model.terms)]
    if models is not None:
        blocks.append(friction.friction_regressor(dq, models, nonlinear, joint_model.smoothing)
                      if friction_columns is None else friction_columns)
    return (blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=2)), known


def _friction_block(robot: Robot, config: IdentificationConfig, window: VelocityWindow, nonlinear=None,
                    constraint: _Constraint = _Constraint()):
    """The friction's columns of a block of prepared samples, filtered as its torque was
    (VelocityWindow.filtered): a nonlinear law of the filtered velocity is not the filtered
    law. The difference, a Stribeck peak or a Coulomb step smeared by a 10 Hz filter, went into
    the other parameters: -0.1 N m s/rad in the OpenArm class's viscous coefficients; on a
    light arm whose motors' armature dwarfs its links, 6 % of an 11 g payload's mass.

    The laws' columns (rows, n, P); for the default coulomb_viscous law with MuJoCo physics
    (Coulomb column, linear), each (rows, n): the frictionloss constraint's shape in
    ``constraint``'s state (its saturated part only when the passes linearise, see
    _Constraint) and ddq + B dq where it does not saturate (FrictionLossConstraint.parts: the
    part of the torque that moves with D); None on hardware."""
    models = _friction_models(robot, config)
    if models is not None:
        smoothing = config.joint_model.smoothing
        return friction.spread_friction(
            window.filtered(lambda dq: friction.packed_friction(dq, models, nonlinear, smoothing)), models)
    if config.physics is None:
        return window.filtered(lambda dq: friction.coulomb_feature(dq, config.joint_model.smoothing)), None
    level = robot.frictionloss if constraint.level is None else constraint.level
    invweight0 = robot.model.dof_invweight0 if constraint.invweight0 is None else constraint.invweight0
    law = robot.frictionloss_constraint
    # the clipped shape (a fixed point's column) until the passes linearise, then the saturated part
    scale = 0.0 if constraint.gradient is not None else np.where(level > 0, law.weight(invweight0), 0.0) / \
        np.where(level > 0, level, 1.0)

    acceleration = window.ddq
    damping = robot.damping if constraint.damping is None else constraint.damping
    if config.physics.damping_delay > 0 and np.any(damping):
        acceleration = config.physics.constraint_acceleration(
            window.ddq, _mass_along(robot, window.q, constraint.parameters, constraint.armature), damping)

    def shape_and_linear(dq):
        saturated, linear = law.parts(dq, acceleration, level, invweight0, config.physics.timestep)
        return np.stack([saturated + scale * linear, linear], axis=-1)

    parts = window.filtered(shape_and_linear)
    return parts[..., 0], parts[..., 1]


def _saturated_share(robot: Robot, config: IdentificationConfig, stream: "_Stream") -> np.ndarray:
    """Per joint (n,): the mean square of the saturated part of MuJoCo's frictionloss
    constraint over the prepared rows, in the model's state (1: always saturated, 0: never)."""
    total, rows, number = np.zeros(robot.n_joints), 0, None
    for at, _, _, _, window, _ in stream.inertial():
        if at != number:
            number = at
            saturated = _friction_block(robot, config, window, constraint=_Constraint(gradient=np.zeros(0)))[0]
            total += np.sum(saturated ** 2, axis=0)
            rows += saturated.shape[0]
    return total / max(rows, 1)


def _lumped(base: BaseParameters, names, first: int, held=()) -> tuple:
    """``IdentificationResult.lumped`` for the columns ``names[first:]`` (the joint terms) but
    those ``held`` at the model's values."""
    # coefficients below 1e-3 are what the rounded right angles of a published model leave
    # (base_parameters.RANK_TOLERANCE): a millionth of a rotor's inertia in a Coulomb level
    uses = np.abs(base.projection) >= 1e-3
    out = []
    for column in range(first, len(names)):
        if names[column] in held:
            continue
        rows = np.flatnonzero(uses[:, column])
        if len(rows) == 1 and np.count_nonzero(uses[rows[0]]) == 1:
            continue
        out.append(f"{names[column]}: " + ("no motion moves its torque" if not len(rows) else
                                           "in base parameters " + ", ".join(base.names[k] for k in rows)))
    return tuple(out)


def _mass_along(robot: Robot, q, parameters, armature) -> np.ndarray:
    """M(q) (W, n, n) along a filtered path q (W, n): computed every MASS_STRIDE rows and
    interpolated linearly between (q is low-passed: M changes by parts in 1e4 over a stride)."""
    rows = np.arange(np.shape(q)[0])
    at = np.unique(np.append(rows[::MASS_STRIDE], rows[-1]))
    mass = robot.mass_matrix(np.asarray(q)[at], parameters, armature)
    right = np.clip(np.searchsorted(at, rows, side="right"), 1, len(at) - 1)
    left = right - 1
    span = np.maximum(at[right] - at[left], 1)
    weight = ((rows - at[left]) / span)[:, None, None]
    # mass[left] (1 - weight) + mass[right] weight, the same operations in two (W, n, n) buffers
    out, share = np.take(mass, left, axis=0), np.take(mass, right, axis=0)
    out *= 1.0 - weight
    share *= weight
    out += share
    return out


def _block_rows(block, rows):
    """The rows ``rows`` (a slice) of a _friction_block (None stays None)."""
    if block is None:
        return None
    if isinstance(block, tuple):
        return tuple(None if part is None else part[rows] for part in block)
    return block[rows]


def _fit_friction(robot: Robot, config: IdentificationConfig, stream: "_Stream", base: BaseParameters):
    """Nonlinear friction parameters (n,) tuples by separable least squares around the run's own
    estimator, or None when no joint's law has any to estimate. The search reads every k-th
    sample (friction.SEARCH_SAMPLES of them) of _Stream.search_windows, and every trial law's
    columns are filtered over those blocks' windows, as the torque was."""
    models = _friction_models(robot, config)
    if models is None or not any(m.free for m in models):
        return None
    blocks = stream.search_windows()
    stride = max(1, int(np.ceil(sum(s.n_samples for _, s, _ in blocks) / friction.SEARCH_SAMPLES)))
    picked = []  # (samples, their block's VelocityWindow, the picked rows of the block)
    for at, samples, window in blocks:
        rows = np.arange((-at) % stride, samples.n_samples, stride)
        if rows.size:
            picked.append((samples.rows(rows), window, rows))
    join = (lambda field: np.concatenate([getattr(s, field) for s, _, _ in picked]))
    q, dq, ddq, tau = join("q"), join("dq"), join("ddq"), join("tau")
    # the equations the quantised velocity cannot tell stay out of the search too (_Stream.columns)
    kept = np.concatenate([_resolved_rows(window, rows) for _, window, rows in picked])
    columns, known = _columns(robot, config, q, dq, ddq)
    width = sum(len(m.linear_names) for m in models)  # the friction block comes last

    def solve(w, y):
        return estimate(w, y, _base_estimator(config), config.ridge_alpha, robust=config.robust)

    def friction_columns(nonlinear):
        # every trial's law goes through the filter on the picked samples' windows
        return kept[..., None] * np.concatenate([_friction_block(robot, config, window, nonlinear)[rows]
                                                 for _, window, rows in picked])

    return friction.fit_nonlinear(kept[..., None] * columns[..., :columns.shape[2] - width], kept * (tau - known),
                                  dq, models, solve, config.joint_model.smoothing, base.independent,
                                  columns=friction_columns)


def _resolved_rows(window: VelocityWindow, rows) -> np.ndarray:
    """(len(rows), n) 1.0 for the equations kept, 0.0 for those VelocityWindow.resolved leaves out;
    ``rows`` index the window's prepared block."""
    resolved = window.resolved()
    if resolved is None:
        return np.ones((len(rows),) + np.shape(window.dq)[1:])
    return resolved[rows].astype(float)


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


class _Stream:
    """The identification's data, block by block: the prepared samples of ``recording`` (blocks of
    at most BLOCK rows), their inertial columns and the columns of the base parameters.

    Every pass reads the recording again (filtering and regressor), except when the blocks of
    the whole recording fit in CACHE_BYTES: then the first pass keeps the samples and inertial
    columns of every block and the later passes only rebuild the joint columns. ``whole`` False:
    the recording is a part of the data (identification.parts), which may keep few rows or none.
    """

    def __init__(self, robot: Robot, config: IdentificationConfig, recording: Recording, whole: bool = True):
        self.robot, self.config, self.recording, self.whole = robot, config, recording, whole
        # rows per filtered block: about FILTER_BLOCK recorded samples (a decimated row stands for
        # ``decimation`` of them, all of which are filtered), in whole regressor blocks
        self.filter_block = max(BLOCK, filtering.FILTER_BLOCK // (BLOCK * config.filter.decimation) * BLOCK)
        self.sizes = prepared_sizes(recording, config.filter, self.filter_block)
        self.count = sum(self.sizes)
        width = 10 * (1 if config.scope == "terminal" else robot.n_bodies) + 8
        self._cache = [] if self.count * robot.n_joints * width * 8 <= CACHE_BYTES else None
        self._cached = False

    def samples(self, select=None):
        """(block number, Recording of at most BLOCK prepared rows, the prepared block's
        VelocityWindow, the rows' first row in that block), in order; ``select`` a container
        of the numbers of the prepared_blocks to read, and only the first BLOCK rows of each
        (default: all rows of all)."""
        numbers = range(len(self.sizes)) if select is None else sorted(select)
        for number, (block, window) in zip(numbers, prepared_windows(self.recording, self.config.filter,
                                                                     self.filter_block, select, self.whole)):
            for start in range(0, block.n_samples if select is None else 1, BLOCK):
                yield number, block.rows(slice(start, start + BLOCK)), window, start

    def search_windows(self) -> list:
        """(first row number, Recording, VelocityWindow) of the prepared blocks the nonlinear
        friction search reads: all of them up to SEARCH_ROWS rows, else blocks of BLOCK rows
        spread evenly over the recording (every trial law is filtered over their windows, so
        the search's cost stays bounded)."""
        spread, block = None, self.filter_block
        if self.count > SEARCH_ROWS:
            block = BLOCK
            last = len(prepared_sizes(self.recording, self.config.filter, block)) - 1
            spread = set(np.unique(np.linspace(0, last, SEARCH_ROWS // BLOCK).round().astype(int)).tolist())
        sizes = prepared_sizes(self.recording, self.config.filter, block)
        starts = np.concatenate(([0], np.cumsum(sizes))).astype(int)
        numbers = range(len(sizes)) if spread is None else sorted(spread)
        return [(int(starts[k]), samples, window) for k, (samples, window) in
                zip(numbers, prepared_windows(self.recording, self.config.filter, block, spread))]

    def inertial(self, select=None):
        """(block number, samples, inertial columns (B, n, 10 k), torque of the known bodies (B, n),
        the prepared block's VelocityWindow, the samples' first row in that block). The columns
        are written over by the next block unless the stream caches them: use them before that."""
        if self._cached:
            first = {}  # the first BLOCK of each selected prepared block, as samples() reads them
            for item in self._cache:
                if select is None or (item[0] in select and first.setdefault(item[0], item) is item):
                    yield item
            return
        keep = self._cache is not None and select is None
        items, spent = [], {}  # the last regressor result of each block length, written over unless kept
        for number, samples, window, start in self.samples(select):
            regressor = self.robot.regressor(samples.q, samples.dq, samples.ddq, out=spent.pop(samples.n_samples, None))
            if not keep:
                spent[samples.n_samples] = regressor
            inertial, known = _inertial_split(self.robot, self.config, regressor)
            item = (number, samples, inertial, known, window, start)
            if keep:
                items.append(item)
            yield item
        if keep:
            self._cache, self._cached = items, True

    def columns(self, base: BaseParameters, nonlinear=None, constraint: _Constraint = _Constraint(), select=None,
                resolved_only: bool = True, instrumented: bool = False):
        """(samples, base columns W (B, n, r), target y = tau - known torque (B, n)) per block.
        With ``resolved_only`` the equations whose friction a quantised velocity cannot tell
        (VelocityWindow.resolved) are zero rows of W and y, and zero in the samples' tau: they
        carry nothing into a reduced form, which does not count them (ReducedForm.equations).
        With ``instrumented`` each item has a fourth part: the same equations (W', y') at the
        window's independent second acceleration (VelocityWindow.instrument), None where there
        is none (the cross product's other factor, estimation.cross_product)."""
        split = int(np.searchsorted(base.independent, self._inertial_width))
        ours, theirs = base.independent[:split], base.independent[split:] - self._inertial_width

        def assemble(inertial, joint):
            # joint-major, samples last (the regressor's own layout): each joint's columns are
            # contiguous rows, which ReducedForm.add copies as they are; used as a (B, n, r) view
            columns = np.empty((joint.shape[1], ours.size + theirs.size, joint.shape[0]))
            np.take(inertial.transpose(1, 2, 0), ours, axis=1, out=columns[:, :ours.size], mode="clip")
            np.take(joint.transpose(1, 2, 0), theirs, axis=1, out=columns[:, ours.size:], mode="clip")
            return columns

        # MuJoCo's frictionloss linearised in the parameters its D depends on (Gauss-Newton in
        # them): a plain fixed point diverges where D outweighs them (z1's light wrist: 9 times)
        slope = None if constraint.gradient is None else constraint.gradient[:, base.independent]
        number, block = None, None  # a prepared block's filtered friction columns, for its sub-blocks
        for at, samples, inertial, known, window, start in self.inertial(select):
            if at != number:
                number, block = at, _friction_block(self.robot, self.config, window, nonlinear, constraint)
                resolved = window.resolved() if resolved_only else None
                instrument = window.instrument_rows() if instrumented else None
            part = _block_rows(block, slice(start, start + samples.n_samples))
            joint, joint_known = _joint_columns(self.robot, self.config, samples.q, samples.dq, samples.ddq,
                                                nonlinear, constraint, part)
            columns = assemble(inertial, joint)
            target = samples.tau - known - joint_known
            if slope is not None and isinstance(part, tuple) and part[1] is not None:
                linear = part[1]
                columns += slope[:, :, None] * linear.T[:, None, :]
                target = target + linear * (constraint.gradient @ constraint.at)
            other = None
            if instrument is not None:
                # linear in the acceleration: only what depends on it moves (the slope's part does not)
                ddq = instrument[start:start + samples.n_samples]
                inertial_i, known_i = _inertial_columns(self.robot, self.config, samples.q, samples.dq, ddq)
                joint_i, joint_known_i = _joint_columns(self.robot, self.config, samples.q, samples.dq, ddq,
                                                        nonlinear, constraint, part)
                other = [columns + assemble(inertial_i - inertial, joint_i - joint),
                         target - (known_i - known) - (joint_known_i - joint_known)]
            if resolved is not None:
                kept = resolved[start:start + samples.n_samples]
                columns *= kept.T[:, None, :]
                target = np.where(kept, target, 0.0)
                samples = replace(samples, tau=np.where(kept, samples.tau, 0.0))
                if other is not None:
                    other = [other[0] * kept.T[:, None, :], np.where(kept, other[1], 0.0)]
            if instrumented:
                yield samples, columns.transpose(2, 0, 1), target, \
                    None if other is None else (other[0].transpose(2, 0, 1), other[1])
            else:
                yield samples, columns.transpose(2, 0, 1), target

    @property
    def _inertial_width(self) -> int:
        return 10 * (1 if self.config.scope == "terminal" else self.robot.n_bodies)

    def correlation_blocks(self) -> set | None:
        """The prepared blocks the residual's correlation time is measured on (None: all)."""
        return correlation_blocks(self.count, len(self.sizes))


def correlation_blocks(count: int, blocks: int) -> set | None:
    """Which of ``blocks`` prepared blocks of ``count`` rows in all the residual's correlation
    time is measured on (the first BLOCK rows of each); None: every row."""
    if count <= CORRELATION_SAMPLES:
        return None
    wanted = max(1, CORRELATION_SAMPLES // BLOCK)
    return set(np.unique(np.linspace(0, blocks - 1, wanted).round().astype(int)).tolist())


def _constraint_state(robot: Robot, config: IdentificationConfig, body_parameters, coulomb, armature, damping,
                      names=None, standard=None) -> _Constraint:
    """MuJoCo's frictionloss state of an identified model: its Coulomb levels (where identified)
    and the inverse inertia diagonal of its bodies and armature at qpos0; with ``names`` and
    ``standard`` (the identified columns and their values) also D's gradient in them."""
    level = coulomb if "coulomb" in _joint_model(config).terms else None
    invweight0 = robot.inverse_inertia_diagonal(body_parameters, armature)
    if standard is None:
        return _Constraint(level, invweight0, parameters=body_parameters, armature=armature, damping=damping)
    by_inertia, by_armature = robot.inverse_inertia_gradient(body_parameters, armature)
    gradient = np.zeros((robot.n_joints, len(names)))
    bodies = [robot.terminal_index] if config.scope == "terminal" else range(robot.n_bodies)
    for k, b in enumerate(bodies):
        gradient[:, 10 * k:10 * k + 10] = by_inertia[:, 10 * b:10 * b + 10]
    for j, joint in enumerate(robot.joint_names):
        if f"{joint}.armature" in names:
            gradient[:, names.index(f"{joint}.armature")] = by_armature[:, j]
    # D = imp / ((1 - imp) w): dD/dw = -D/w
    weight = robot.frictionloss_constraint.weight(invweight0)
    return _Constraint(level, invweight0, gradient * (-weight / invweight0)[:, None], np.asarray(standard, dtype=float),
                       parameters=body_parameters, armature=armature, damping=damping)


def _uses_constraint(robot: Robot, config: IdentificationConfig) -> bool:
    """Whether MuJoCo's frictionloss constraint is part of the model: MuJoCo data, and friction
    either identified as the coulomb term or known from the model."""
    if config.physics is None or not config.friction_models.is_default:
        return False
    return "coulomb" in _joint_model(config).terms or bool(np.any(robot.frictionloss > 0))


def fitted_torque(robot: Robot, result: IdentificationResult, recording: Recording, whole: bool = True):
    """The identified model against ``recording`` as an identification sees it: filtered,
    trimmed and decimated with ``result.config.filter``, the friction filtered as the torque is
    (_friction_block). Yields (samples (a Recording, ddq filled), predicted torque (B, n) N m)
    per block of at most BLOCK rows. ``whole`` False: ``recording`` is a part of the data
    (filtering.prepared_windows)."""
    config = result.config
    nonlinear = None if _friction_models(robot, config) is None else tuple(f.nonlinear for f in result.friction)
    for check, window in prepared_windows(recording.select(robot.joint_names), config.filter, whole=whole):
        friction_columns = _friction_block(robot, config, window, nonlinear, _result_constraint(robot, result))
        for start in range(0, check.n_samples, BLOCK):
            part = check.rows(slice(start, start + BLOCK))
            columns = _block_rows(friction_columns, slice(start, start + BLOCK))
            yield part, _predicted(robot, result, part.q, part.dq, part.ddq, columns)


def on_hardware(robot: Robot, result: IdentificationResult) -> IdentificationResult:
    """``result`` as a real arm's model (``config.physics`` None: a joint's friction, not
    MuJoCo's constraint), with the columns a hardware identification has: those it did not
    identify (the terminal scope's armature, for data MuJoCo made) at their values, the model's."""
    config = replace(result.config, physics=None)
    names = column_names(robot, config)
    values = dict(zip(result.column_names, result.standard))
    standard = np.array([values.get(name, nominal) for name, nominal in
                         zip(names, model_parameter_vector(robot, names))])
    return replace(result, config=config, column_names=names, standard=standard)


def predict_torque(robot: Robot, result: IdentificationResult, q, dq, ddq, residual=None,
                   motor_q=None) -> np.ndarray:
    """Joint torques (N, n) N m of the identified model at q, dq, ddq (N, n): rigid bodies plus
    joint terms, with the physics the data came from (``result.config.physics``; replace it by
    None for what a real arm of these parameters needs). With ``residual`` (a
    ``residual.ResidualModel``, e.g. loaded from residual_model.json) its correction is added,
    evaluated at q, dq, this torque and, for a model that takes the deflection, q - ``motor_q``
    (N, n) rad, the motor-side positions (DataError without them)."""
    q, dq, ddq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, ddq))
    torque = _predicted(robot, result, q, dq, ddq)
    if residual is None:
        return torque
    deflection = None if motor_q is None else q - np.atleast_2d(np.asarray(motor_q, dtype=float))
    return torque + residual.predict_for(robot.joint_names, q, dq, deflection, torque)


def _predicted(robot: Robot, result: IdentificationResult, q, dq, ddq, friction_columns=None) -> np.ndarray:
    """predict_torque; ``friction_columns`` the friction's columns of filtered data
    (_friction_block), None for the law at dq and ddq."""
    config = result.config
    nonlinear = None
    if _friction_models(robot, config) is not None:
        nonlinear = tuple(f.nonlinear for f in result.friction)
    columns, known = _columns(robot, config, q, dq, ddq, nonlinear, _result_constraint(robot, result),
                              friction_columns)
    return known + columns @ result.standard


def _result_constraint(robot: Robot, result: IdentificationResult) -> _Constraint:
    """MuJoCo's frictionloss state of an identification's result (the default where unused)."""
    if not _uses_constraint(robot, result.config):
        return _Constraint()
    return _constraint_state(robot, result.config, result.body_parameters, result.coulomb, result.armature,
                             result.viscous)


def _rmse(residual_sq: np.ndarray, torque_sq: np.ndarray, count) -> tuple[np.ndarray, float, np.ndarray, float]:
    """Per joint (n,) and pooled RMSE from the residual's sum of squares per joint (n,) over
    ``count`` samples (or (n,) equations per joint), and both relative to the torque's RMS (its
    sum of squares (n,))."""
    count = np.maximum(np.broadcast_to(np.asarray(count, dtype=float), np.shape(residual_sq)), 1.0)
    per_joint = np.sqrt(residual_sq / count)
    scale = np.sqrt(torque_sq / count)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(scale > 0, per_joint / scale, np.inf)
    pooled, total = float(np.sqrt(np.sum(residual_sq) / np.sum(count))), \
        float(np.sqrt(np.sum(torque_sq) / np.sum(count)))
    return per_joint, pooled, relative, pooled / total if total > 0 else float("inf")


def velocity_noise_levels(recording: Recording, config: FilterConfig = FilterConfig()) -> list:
    """Per-joint white-noise levels (n,) rad/s of a recording's raw velocity, one per piece: 1.4826
    MAD of the second differences over sqrt(6), in every stretch between gaps of lost samples
    (filtering.stretch_edges: a difference across a gap is no noise) and, in longer stretches,
    every NOISE_BLOCK samples (memory stays bounded). The level of the recording is their
    median (on stationary noise the same figure); several files' levels are those of each.
    A smooth motion's second differences at a driver's sample rate are far below any sensor's
    noise; noise-free data give ~0. A stretch of fewer than 3 samples has none.
    """
    dq = np.asarray(recording.dq)
    edges = stretch_edges(recording, config) if recording.n_samples > 1 else np.array([0, recording.n_samples])
    levels = []
    for first, end in zip(edges[:-1], edges[1:]):
        for start in range(first, max(end - 2, first), NOISE_BLOCK):
            # joints first: the medians partition contiguous rows, not a strided column each
            part = np.ascontiguousarray(np.asarray(dq[start:min(start + NOISE_BLOCK + 2, end)], dtype=float).T)
            second = part[:, 2:] - 2.0 * part[:, 1:-1] + part[:, :-2]
            second -= np.median(second, axis=1, keepdims=True)
            levels.append(1.4826 * np.median(np.abs(second, out=second), axis=1) / np.sqrt(6.0))
    return levels


def velocity_noise(levels: list, n: int) -> np.ndarray:
    """The noise level (n,) rad/s of a recording from its velocity_noise_levels (zeros if none)."""
    return np.median(levels, axis=0) if levels else np.zeros(n)


def _evidence(robot: Robot, config: IdentificationConfig, noise: np.ndarray, motion: np.ndarray,
              est: Estimate, base: BaseParameters, standard: np.ndarray, body_parameters: np.ndarray,
              metrics: Metrics, consistent: bool) -> Evidence:
    """The figures the verdict is computed from (verdict.Evidence): ``noise`` (n,) the raw
    velocity's noise level, ``motion`` (n,) the prepared velocity's RMS about its mean."""
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
    determine the base parameters. The recording's arrays are only read, block by block
    (BLOCK samples; views of a caller's buffer are fine, nothing of their size is copied or
    built): memory is a few blocks whatever the length (see _Stream); with ``config.robust``
    one (N, n) residual array more. ``recording.quality_notes`` (and the validation's) end
    in the verdict. The stages are those of identification.parts, which runs them on data
    split into parts (several files, several machines).
    """
    recording = recording.select(robot.joint_names)
    stream = _Stream(robot, config, recording)
    names = column_names(robot, config)
    check_sample_count(robot, config, stream.count)
    base = structural_base_parameters(robot, config)
    nonlinear = _fit_friction(robot, config, stream, base)  # None unless a friction law has some
    nominal = model_parameter_vector(robot, names)
    joint_model = _joint_model(config)
    n = robot.n_joints

    def solve(constraint: _Constraint, base: BaseParameters):
        """One pass: the reduced form, the estimate, standard parameters; the torque's sum of
        squares (n,) and the velocity's spread on the way."""
        reduced, cross, torque_sq, motion = reduce_stream(stream, base, nonlinear, constraint)
        reduced = reduced if cross is None else reduced.crossed(cross)
        est = estimate_reduced(reduced, _base_estimator(config), config.ridge_alpha, config.robust,
                               lambda: ((c, t) for _, c, t in stream.columns(base, nonlinear, constraint)))
        return reduced, est, _nearest_nominal(nominal, base, est), torque_sq, motion

    constraint, held = _Constraint(), ()
    reduced, est, standard, torque_sq, motion = solve(constraint, base)
    if _uses_constraint(robot, config):
        # MuJoCo's frictionloss force depends on the friction level and on the arm's inertia at
        # qpos0 (through dof_invweight0), both being identified: pass again, linearised at the
        # estimate (_Constraint), until they settle (the inertia depends on base parameters
        # only, so the minimum-norm standard set is as good as any). A level whose constraint
        # never saturates in the model's state is invisible in the data: held at the model's.
        level, weight = robot.frictionloss, robot.model.dof_invweight0
        pinned, linearise = np.zeros(n, dtype=bool), True
        if "coulomb" in joint_model.terms:
            pinned = _saturated_share(robot, config, stream) < SATURATED_SHARE
            wanted = [f"{j}.coulomb" for j, p in zip(robot.joint_names, pinned) if p]
            base_held, held = base.holding(wanted, names)
            # a level that stands for a group of columns cannot be held alone: then the fixed point
            # (one that is a combination of others, as where its linear zone is one of armature and
            # damping, leaves that combination)
            linearise = len(held) == len(wanted)
            base, held = (base_held, held) if linearise else (base, ())
            pinned &= linearise
        for number in range(FRICTIONLOSS_PASSES):
            terms = _terms_of(robot, config, standard)
            state = _constraint_state(robot, config, _bodies_of(robot, config, standard), terms["coulomb"],
                                      terms["armature"], terms["viscous"], *((names, standard) if linearise else ()))
            new_level = level if state.level is None else np.where(pinned, level, np.maximum(state.level, 0.0))
            change = max(np.max(np.abs(state.invweight0 / weight - 1.0)),
                         np.max(np.abs(new_level - level) / np.maximum(np.abs(level), 1e-12)))
            if (number or not linearise) and change < FRICTIONLOSS_TOLERANCE:  # the first pass was not linearised
                break
            level, weight = new_level, state.invweight0
            constraint = replace(state, level=level if state.level is not None else None, pinned=pinned)
            reduced, est, standard, torque_sq, motion = solve(constraint, base)
    est = widened(est, [target - _contract(columns, est.values) for _, columns, target in
                        stream.columns(base, nonlinear, constraint, stream.correlation_blocks())])
    result = concluded(robot, config, base, est, reduced, torque_sq, nonlinear, held)
    if validation is not None:
        result = validated(result, *validation_sums(robot, result, validation))
    notes = tuple(recording.quality_notes) + (() if validation is None else
                                              tuple(n for n in validation.quality_notes
                                                    if n not in recording.quality_notes))
    return judged(robot, result, velocity_noise(velocity_noise_levels(recording, config.filter), n), motion.rms,
                  notes)


def check_sample_count(robot: Robot, config: IdentificationConfig, count: int) -> None:
    """DataError unless ``count`` prepared samples can identify the parameters of ``config``."""
    names = column_names(robot, config)
    minimum = max(50, 3 * len(names))
    if count < minimum:
        raise DataError(f"too few samples: {count} after filtering, at least {minimum} are needed "
                        f"to identify {len(names)} parameters")


def reduce_stream(stream: "_Stream", base: BaseParameters, nonlinear=None, constraint: _Constraint = _Constraint()):
    """One pass over a _Stream's data: (its reduced form, the cross product of a quantised
    velocity's two accelerations (n, r + 1, r + 1) or None, the torque's sum of squares (n,),
    the prepared velocity's _Spread)."""
    n = stream.robot.n_joints
    reduced, torque_sq, motion, cross = ReducedForm.empty(n, base.rank), np.zeros(n), _Spread(n), None
    for samples, columns, target, other in stream.columns(base, nonlinear, constraint, instrumented=True):
        reduced = reduced.add(columns, target)
        if other is not None:
            # a quantised velocity: the products across the two sensors' accelerations
            # (VelocityWindow.instrument), whose noise, unlike either's own, averages out
            cross = estimation.cross_product(columns, target, *other) + (0.0 if cross is None else cross)
        torque_sq += np.sum(samples.tau ** 2, axis=0)
        motion.add(samples.dq)
    return reduced, cross, torque_sq, motion


def _nearest_nominal(nominal: np.ndarray, base: BaseParameters, est: Estimate) -> np.ndarray:
    """The standard parameters (p,) of the base estimate nearest the nominal ones: full rank in
    practice; otherwise the nominal values fill what the data cannot see."""
    return nominal + np.linalg.pinv(base.projection) @ (est.values - base.projection @ nominal)


def _bodies(robot: Robot, config: IdentificationConfig) -> list:
    return [robot.terminal_body] if config.scope == "terminal" else list(robot.body_names)


def _terms_of(robot: Robot, config: IdentificationConfig, standard: np.ndarray) -> dict:
    """The joint terms (n,) each of standard parameters ``standard`` (the model's where not identified)."""
    n, n_inertial = robot.n_joints, 10 * len(_bodies(robot, config))
    out = {"coulomb": robot.frictionloss.copy(), "viscous": robot.damping.copy(),
           "armature": robot.armature.copy(), "offset": np.zeros(n), "stiffness": robot.stiffness.copy()}
    for t, term in enumerate(_joint_model(config).terms):
        out[term] = standard[n_inertial + t * n: n_inertial + (t + 1) * n].copy()
    return out


def _bodies_of(robot: Robot, config: IdentificationConfig, standard: np.ndarray) -> np.ndarray:
    """Every body's standard parameters (nb, 10) of ``standard`` (the model's where not identified)."""
    out = robot.nominal_parameters.copy()
    for k, body in enumerate(_bodies(robot, config)):
        out[robot.body_names.index(body)] = standard[10 * k:10 * k + 10]
    return out


def widened(est: Estimate, residuals: list) -> Estimate:
    """``est`` with its covariance widened by the correlation time of ``residuals`` (arrays (B, n),
    in order): neighbouring samples of filtered data (and of smooth model errors) are not
    independent, and standard deviations must mean what they say."""
    return replace(est, covariance=est.covariance * estimation.correlation_time(np.concatenate(residuals)))


def concluded(robot: Robot, config: IdentificationConfig, base: BaseParameters, est: Estimate, reduced: ReducedForm,
              torque_sq: np.ndarray, nonlinear=None, held: tuple = ()) -> IdentificationResult:
    """The result of an estimate (its covariance widened): standard parameters (the physically
    consistent ones with ``consistent``), joint terms and the fit on the identification data,
    from the reduced form and the torque's sum of squares (n,). No validation, no verdict yet."""
    names = column_names(robot, config)
    nominal = model_parameter_vector(robot, names)
    bodies = _bodies(robot, config)
    n_inertial = 10 * len(bodies)
    standard = _nearest_nominal(nominal, base, est)
    if config.scope == "full" or config.estimator == "consistent":
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
                                         nonnegative=signed, floor=floor,
                                         modelled=[b != robot.terminal_body for b in bodies])

    body_parameters = _bodies_of(robot, config, standard)
    terms = _terms_of(robot, config, standard)
    frictions = _joint_frictions(robot, config, names, standard, terms, nonlinear)
    terms["coulomb"] = np.array([f.coulomb_level for f in frictions])
    terms["viscous"] = np.array([f.viscous_level for f in frictions])

    # the fit of the parameters delivered: the consistent ones where they differ from the estimate;
    # residual and torque sums of squares from the reduced form (the torque's: a zero model)
    rmse_joint, rmse, relative, pooled = _rmse(reduced.residual_sums(base.projection @ standard),
                                               torque_sq, reduced.counts)
    cond, cond_raw = estimation.condition_numbers(estimation.triangle(reduced.stacked())[:base.rank, :base.rank])
    metrics = Metrics(rmse_joint, rmse, cond, cond_raw, base.rank, reduced.n_samples,
                      relative_rmse_per_joint=relative, relative_rmse=pooled)
    return IdentificationResult(
        scope=config.scope, config=config, joint_names=robot.joint_names, body_names=robot.body_names,
        terminal_body=robot.terminal_body, terminal_joint=robot.terminal_joint, column_names=names,
        standard=standard, base=base, estimate=est, body_parameters=body_parameters,
        coulomb=terms["coulomb"], viscous=terms["viscous"], armature=terms["armature"], offset=terms["offset"],
        metrics=metrics, friction=frictions, stiffness=terms["stiffness"], held=held,
        lumped=_lumped(base, names, n_inertial, held))


def validation_sums(robot: Robot, result: IdentificationResult, validation: Recording, whole: bool = True) -> tuple:
    """The identified model against ``validation``: (residual sum of squares (n,) N^2 m^2, the
    torque's (n,), samples), over its prepared rows (fitted_torque, ``whole`` as there)."""
    n = robot.n_joints
    residual_sq, torque_sq, count = np.zeros(n), np.zeros(n), 0
    for part, predicted in fitted_torque(robot, result, validation, whole):
        residual_sq += np.sum((part.tau - predicted) ** 2, axis=0)
        torque_sq += np.sum(part.tau ** 2, axis=0)
        count += part.n_samples
    return residual_sq, torque_sq, count


def validated(result: IdentificationResult, residual_sq: np.ndarray, torque_sq: np.ndarray,
              count: int) -> IdentificationResult:
    """``result`` with its validation figures from validation_sums."""
    val_joint, val, val_relative, val_pooled = _rmse(residual_sq, torque_sq, count)
    return replace(result, metrics=replace(
        result.metrics, validation_rmse_per_joint=val_joint, validation_rmse=val,
        validation_relative_rmse_per_joint=val_relative, validation_relative_rmse=val_pooled))


def judged(robot: Robot, result: IdentificationResult, noise: np.ndarray, motion: np.ndarray,
           notes: tuple = ()) -> IdentificationResult:
    """``result`` with its verdict: ``noise`` (n,) rad/s the raw velocity's noise level, ``motion``
    (n,) rad/s the prepared velocity's RMS about its mean, ``notes`` the data's QualityNotes."""
    config = result.config
    evidence = _evidence(robot, config, noise, motion, result.estimate, result.base, result.standard,
                         result.body_parameters, result.metrics,
                         config.scope == "full" or config.estimator == "consistent")
    return replace(result, verdict=judge(evidence, notes))


class _Spread:
    """Running per-joint RMS about the mean (n,) of a signal given in blocks (B, n) (sums shifted
    by the first block's mean, against cancellation)."""

    def __init__(self, n: int):
        self.count, self.shift = 0, None
        self.total, self.squares = np.zeros(n), np.zeros(n)

    def merged(self, other: "_Spread") -> "_Spread":
        """The spread of this signal followed by ``other``'s (the sums moved to this one's shift)."""
        if other.shift is None:
            return self
        if self.shift is None:
            return other
        out = _Spread(self.total.size)
        move = other.shift - self.shift  # other's sums about self.shift
        out.count, out.shift = self.count + other.count, self.shift
        out.total = self.total + other.total + other.count * move
        out.squares = self.squares + other.squares + 2.0 * move * other.total + other.count * move ** 2
        return out

    def add(self, x: np.ndarray) -> None:
        if self.shift is None:
            self.shift = np.mean(x, axis=0)
        centred = x - self.shift
        self.count += x.shape[0]
        self.total += np.sum(centred, axis=0)
        self.squares += np.sum(centred ** 2, axis=0)

    @property
    def rms(self) -> np.ndarray:
        mean = self.total / self.count
        return np.sqrt(np.maximum(self.squares / self.count - mean ** 2, 0.0))


def regression_blocks(robot: Robot, recording: Recording, config: IdentificationConfig, base: BaseParameters,
                      nonlinear=None):
    """What an identification regresses on, block by block of prepared samples (at most BLOCK
    rows each): (samples (a Recording, ddq filled), base columns W (B, n, r), the torque of
    everything known (B, n) N m). The friction laws' columns are filtered like the torque
    (VelocityWindow); ``nonlinear`` as in base_regressor. DataError for unusable data."""
    for samples, columns, target in _Stream(robot, config, recording.select(robot.joint_names)).columns(
            base, nonlinear, resolved_only=False):
        yield samples, columns, samples.tau - target


def base_regressor(robot: Robot, config: IdentificationConfig, q, dq, ddq,
                   base: BaseParameters | None = None, nonlinear=None) -> tuple[np.ndarray, np.ndarray]:
    """Regressor of the base parameters (N, n, r) and the torque of everything known (N, n), N m.

    The independent columns of the identified standard parameters under ``config`` (those of
    ``structural_base_parameters`` unless ``base`` is given): what an identification on these
    states would estimate. q, dq, ddq (N, n) rad, rad/s, rad/s^2. The nominal model's joint
    torques are ``regressor @ (base.projection @ model_parameter_vector(robot, names)) + known``.
    ``nonlinear`` (n,) tuples: the friction laws' nonlinear values (e.g. an identification's
    ``f.nonlinear for f in result.friction``; None: given or default values).
    """
    base = structural_base_parameters(robot, config) if base is None else base
    columns, known = _columns(robot, config, q, dq, ddq, nonlinear)
    return columns[..., base.independent], known
