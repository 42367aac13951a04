"""Per-joint regressor columns: friction, rotor inertia, springs and torque offset.

Each term contributes one parameter per joint and acts only on its own joint:
``coulomb`` f_c * sign(dq) (tanh(dq / smoothing) when smoothing > 0; MuJoCo's soft
constraint where the data come from MuJoCo, see joint_physics), ``viscous`` f_v * dq,
``armature`` I_a * ddq (rotor inertia reflected through the gear), ``offset`` a constant
torque (sensor bias, gravity of an unmodelled part), ``stiffness`` k * (q - springref) (a
spring). In MuJoCo terms: frictionloss, damping, armature and stiffness.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TERMS = ("coulomb", "viscous", "armature", "offset", "stiffness")
UNITS = {"coulomb": "N m", "viscous": "N m s/rad", "armature": "kg m^2", "offset": "N m", "stiffness": "N m/rad"}


@dataclass(frozen=True)
class JointModel:
    """Which per-joint terms to identify; ``smoothing`` rad/s for the Coulomb sign (0: sign)."""

    terms: tuple = ("coulomb", "viscous")
    smoothing: float = 0.0

    def __post_init__(self):
        unknown = [t for t in self.terms if t not in TERMS]
        if unknown:
            raise ValueError(f"unknown joint terms {unknown}; choose from {TERMS}")
        if self.smoothing < 0:
            raise ValueError("Coulomb smoothing must be >= 0 rad/s")


def coulomb_feature(dq: np.ndarray, smoothing: float = 0.0) -> np.ndarray:
    """sign(dq), or tanh(dq / smoothing) for smoothing > 0; same shape as dq."""
    return np.sign(dq) if smoothing == 0.0 else np.tanh(dq / smoothing)


def joint_features(terms, q, dq, ddq, springref=0.0, smoothing: float = 0.0, coulomb=None,
                   damping_delay: float = 0.0, spring_delay: float = 0.0) -> dict:
    """{term: (N, n)} the torque of each term in ``terms`` per unit of its parameter.

    q, dq, ddq (N, n) rad, rad/s, rad/s^2; ``springref`` (n,) rad; ``coulomb`` a Coulomb shape
    (N, n) to use instead of coulomb_feature(dq, smoothing) (MuJoCo's soft friction);
    ``damping_delay``/``spring_delay`` s: damping acts at dq + delay * ddq and the spring at
    q + delay * (dq + delay * ddq) (MuJoCo's implicit integration, see joint_physics).
    """
    make = {
        "coulomb": lambda: coulomb_feature(dq, smoothing) if coulomb is None else coulomb,
        "viscous": lambda: dq + damping_delay * ddq if damping_delay else dq,
        "armature": lambda: ddq,
        "offset": lambda: np.ones_like(dq),
        "stiffness": lambda: (q - springref) + (spring_delay * (dq + spring_delay * ddq) if spring_delay else 0.0),
    }
    return {t: np.asarray(make[t](), dtype=float) for t in terms}


def diagonal_columns(features: dict, terms) -> np.ndarray:
    """Columns (N, n, len(terms) * n): term-major, joint-minor, diagonal in the joints.

    Column ``t * n + j`` holds term t of joint j (``features[term]`` (N, n)) and is non-zero
    only in row j.
    """
    terms = tuple(terms)
    if not terms:
        shape = next(iter(features.values())).shape if features else (0, 0)
        return np.zeros(shape + (0,))
    num, n = features[terms[0]].shape
    # joint-major, samples last (a view, like the inertial regressor): each joint's columns are
    # contiguous rows for the per-joint factorisations of estimation.ReducedForm
    out = np.zeros((n, len(terms) * n, num))
    diag = np.arange(n)
    for t, term in enumerate(terms):
        out[diag, t * n + diag] = np.asarray(features[term]).T
    return out.transpose(2, 0, 1)


def joint_regressor(dq: np.ndarray, ddq: np.ndarray, model: JointModel, q=None, springref=0.0) -> np.ndarray:
    """Columns (N, n, len(terms) * n) of ``model``'s terms as a real joint has them (see
    diagonal_columns for the layout); ``q`` (N, n) rad is needed for the stiffness term."""
    dq, ddq = np.atleast_2d(dq), np.atleast_2d(ddq)
    if "stiffness" in model.terms and q is None:
        raise ValueError("the stiffness term needs the joint positions q")
    return diagonal_columns(joint_features(model.terms, q, dq, ddq, springref, model.smoothing), model.terms)


def column_names(joint_names, model: JointModel) -> tuple:
    """Names ``<joint>.<term>`` of joint_regressor's columns."""
    return tuple(f"{j}.{t}" for t in model.terms for j in joint_names)


# --------------------------------------------------------------------------- friction models
#
# Per-joint friction laws tau_f(dq): dq in rad/s (m/s for slide joints), tau_f in N m (N).
# Each law is linear in its "linear" parameters, which join the inertial parameters in the
# one least-squares solve, and may have a few "nonlinear" parameters (a velocity scale, an
# exponent, a threshold), found by separable least squares (``fit_nonlinear``).

FRICTION_MODELS = ("coulomb_viscous", "asymmetric", "tanh", "stribeck", "stribeck_tanh", "high_low_speed")

_LINEAR = {
    "coulomb_viscous": ("coulomb", "viscous"),
    "asymmetric": ("coulomb_pos", "coulomb_neg", "viscous"),
    "tanh": ("coulomb", "viscous"),
    "stribeck": ("coulomb", "stribeck", "viscous"),
    "stribeck_tanh": ("coulomb", "stribeck", "viscous"),
    "high_low_speed": ("coulomb_pos", "coulomb_neg", "viscous_pos", "quadratic_pos", "cubic_pos",
                       "viscous_neg", "quadratic_neg", "cubic_neg"),
}
_NONLINEAR = {"coulomb_viscous": (), "asymmetric": (), "tanh": ("tanh_velocity",),
              "stribeck": ("stribeck_velocity", "exponent"),
              "stribeck_tanh": ("stribeck_velocity", "exponent", "tanh_velocity"), "high_low_speed": ("threshold",)}

PARAMETER_UNITS = {
    "coulomb": "N m", "coulomb_pos": "N m", "coulomb_neg": "N m", "stribeck": "N m", "static": "N m",
    "viscous": "N m s/rad", "viscous_pos": "N m s/rad", "viscous_neg": "N m s/rad",
    "quadratic_pos": "N m s^2/rad^2", "quadratic_neg": "N m s^2/rad^2",
    "cubic_pos": "N m s^3/rad^3", "cubic_neg": "N m s^3/rad^3",
    "tanh_velocity": "rad/s", "stribeck_velocity": "rad/s", "threshold": "rad/s", "exponent": "1",
}

# Parameters a physical joint may well have negative: the polynomial terms of the high/low-speed
# model bend the viscous curve either way; a "static minus Coulomb" excess is normally >= 0 but
# nothing in the data forces it.
SIGNED_PARAMETERS = ("stribeck", "quadratic_pos", "cubic_pos", "quadratic_neg", "cubic_neg")

# Nonlinear parameters where they are not estimated and no value is given (structural analysis,
# first guess), as fractions of the joint's velocity scale (95th percentile of |dq|) when data
# are at hand; the exponent is absolute.
_DEFAULT_VALUE = {"tanh_velocity": 0.05, "stribeck_velocity": 0.1, "exponent": 2.0, "threshold": 0.05}
_RELATIVE_START = {"tanh_velocity": 0.03, "stribeck_velocity": 0.1, "threshold": 0.05}
# Bounds of the search, relative to the velocity scale (velocities) or absolute (exponent).
_RELATIVE_BOUNDS = {"tanh_velocity": (1e-4, 0.5), "stribeck_velocity": (1e-3, 1.0)}
_EXPONENT_BOUNDS = (0.3, 4.0)
GRID_SIZE = 8
SEARCH_SAMPLES = 2000  # samples the nonlinear search uses (every k-th); the final solve uses all
MAX_EVALUATIONS = 40  # residual evaluations of the least-squares refinement, at most (plus Jacobians)


@dataclass(frozen=True)
class FrictionModel:
    """One joint's friction law (dq rad/s, torques N m; m/s and N for a slide joint).

    ``name`` one of FRICTION_MODELS, with s(dq) = sign(dq) or tanh(dq / smoothing) (the
    JointModel's Coulomb smoothing):

    ``coulomb_viscous``
        f_c s(dq) + f_v dq. Linear: coulomb f_c [N m], viscous f_v [N m s/rad].
    ``asymmetric``
        f_c+ max(s, 0) + f_c- min(s, 0) + f_v dq: a Coulomb level per direction (both positive
        for friction opposing motion). Linear: coulomb_pos, coulomb_neg [N m], viscous
        [N m s/rad].
    ``tanh``
        f_c tanh(dq / v_t) + f_v dq. Linear: coulomb, viscous; nonlinear: tanh_velocity v_t
        [rad/s] (``velocity``; None: estimated).
    ``stribeck``
        ``(f_c + (f_s - f_c) exp(-(|dq| / v_s)^delta)) s(dq) + f_v dq``. Linear: coulomb f_c,
        stribeck = f_s - f_c [N m] (static minus Coulomb level), viscous f_v; nonlinear:
        stribeck_velocity v_s [rad/s] (``velocity``; None: estimated) and exponent delta [1]
        (``exponent``; None: estimated).
    ``stribeck_tanh``
        the same with s(dq) = tanh(dq / v_t), v_t (tanh_velocity [rad/s]) always estimated: a
        measured Coulomb step is never sharp (torque filtering, compliance, MuJoCo's soft
        friction loss) and v_t takes that up, leaving the Stribeck term to the peak.
    ``high_low_speed``
        Liu et al., Actuators 2023, 12(454), eq. (9): with t = tanh(dq / eps),
        p = (1 + t)/2, m = (1 - t)/2 and ``H = [|dq| >= lambda]``::

            dq >= 0:  k_c1 t p + H (k_v1 p dq + k_v12 dq^2 + k_v13 dq^3)
            dq <  0:  k_c2 t m + H (k_v2 m dq + k_v22 dq^2 + k_v23 dq^3)

        Coulomb only below the threshold lambda, Coulomb plus a cubic viscous law above it,
        each direction its own coefficients. Linear: coulomb_pos k_c1, coulomb_neg k_c2 [N m],
        viscous_pos/neg [N m s/rad], quadratic_pos/neg [N m s^2/rad^2], cubic_pos/neg
        [N m s^3/rad^3]; nonlinear: threshold lambda [rad/s] (``velocity``; None: estimated on
        a grid, the residual being a step function of it); ``eps`` [rad/s] the paper's 1e-4.
    """

    name: str = "coulomb_viscous"
    velocity: float | None = None
    exponent: float | None = 2.0
    eps: float = 1e-4

    def __post_init__(self):
        if self.name not in FRICTION_MODELS:
            raise ValueError(f"unknown friction model '{self.name}'; choose from {FRICTION_MODELS}")
        if self.velocity is not None:
            if self.name in ("coulomb_viscous", "asymmetric"):
                raise ValueError(f"friction model '{self.name}' has no velocity parameter")
            least = 0.0 if self.name == "high_low_speed" else np.nextafter(0.0, 1.0)
            if not np.isfinite(self.velocity) or self.velocity < least:
                raise ValueError(f"{self.name} velocity must be a finite number "
                                 f"{'>= 0' if least == 0 else '> 0'} rad/s, got {self.velocity}")
        if self.exponent is not None and not (np.isfinite(self.exponent) and self.exponent > 0):
            raise ValueError(f"Stribeck exponent must be > 0 (or None to estimate it), got {self.exponent}")
        if not (np.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be > 0 rad/s, got {self.eps}")

    @property
    def linear_names(self) -> tuple:
        return _LINEAR[self.name]

    @property
    def nonlinear_names(self) -> tuple:
        return _NONLINEAR[self.name]

    @property
    def fixed(self) -> dict:
        """The nonlinear parameters given a value, {name: value}; the others are estimated."""
        if self.name in ("stribeck", "stribeck_tanh"):
            given = {"stribeck_velocity": self.velocity, "exponent": self.exponent}
        elif self.name == "tanh":
            given = {"tanh_velocity": self.velocity}
        elif self.name == "high_low_speed":
            given = {"threshold": self.velocity}
        else:
            given = {}
        return {k: float(v) for k, v in given.items() if v is not None}

    @property
    def free(self) -> tuple:
        """Names of the nonlinear parameters to estimate."""
        return tuple(k for k in self.nonlinear_names if k not in self.fixed)

    def values(self, nonlinear=None) -> tuple:
        """All nonlinear values in ``nonlinear_names`` order: given ones, else ``nonlinear``
        (a tuple in the same order, or None for the defaults)."""
        if nonlinear is not None:
            if len(nonlinear) != len(self.nonlinear_names):
                raise ValueError(f"{self.name} takes {len(self.nonlinear_names)} nonlinear values "
                                 f"{self.nonlinear_names}, got {len(nonlinear)}")
            return tuple(float(v) for v in nonlinear)
        return tuple(self.fixed.get(k, _DEFAULT_VALUE[k]) for k in self.nonlinear_names)


def parse_friction_models(text) -> tuple:
    """FrictionModels from ``"stribeck"`` or ``"stribeck,tanh,..."`` (one name per joint)."""
    names = [t.strip() for t in str(text).split(",")]
    if any(not t for t in names):
        raise ValueError(f"empty friction model name in '{text}'")
    return tuple(FrictionModel(t) for t in names)


@dataclass(frozen=True)
class FrictionSelection:
    """The friction law of every joint: one FrictionModel for all joints or one per joint.

    Built from a model name (``"stribeck"``), a comma list (``"stribeck,tanh,..."``, one per
    joint), a FrictionModel or a sequence of names/FrictionModels; stored as ``models``, a
    tuple of FrictionModel of length 1 (all joints) or n (joint order of the robot model).
    """

    models: tuple = (FrictionModel(),)

    def __post_init__(self):
        value = self.models
        if isinstance(value, str):
            value = parse_friction_models(value)
        elif isinstance(value, FrictionModel):
            value = (value,)
        value = tuple(FrictionModel(v) if isinstance(v, str) else v for v in value)
        if not value or not all(isinstance(v, FrictionModel) for v in value):
            raise ValueError(f"friction models must be names or FrictionModel objects, got {self.models!r}")
        object.__setattr__(self, "models", value)

    @property
    def is_default(self) -> bool:
        """True when every joint has today's coulomb_viscous law (the plain linear path)."""
        return all(m.name == "coulomb_viscous" for m in self.models)

    def for_joints(self, n: int) -> tuple:
        """The n per-joint models; ValueError when the count is neither 1 nor n."""
        if len(self.models) == 1:
            return self.models * n
        if len(self.models) != n:
            raise ValueError(f"{len(self.models)} friction models given for {n} joints: give one for all "
                             f"joints or exactly one per joint")
        return self.models


def features(model: FrictionModel, dq, nonlinear=None, smoothing: float = 0.0) -> np.ndarray:
    """The columns of ``model``'s linear parameters, (..., len(linear_names)), for dq (...) rad/s.

    ``nonlinear`` the nonlinear values (``model.values`` order; None: given or default values);
    ``smoothing`` rad/s the Coulomb sign smoothing (see coulomb_feature). The torque is
    ``features(...) @ linear``.
    """
    dq = np.asarray(dq, dtype=float)
    values = dict(zip(model.nonlinear_names, model.values(nonlinear)))
    if model.name == "coulomb_viscous":
        cols = [coulomb_feature(dq, smoothing), dq]
    elif model.name == "asymmetric":
        s = coulomb_feature(dq, smoothing)
        cols = [np.maximum(s, 0.0), np.minimum(s, 0.0), dq]
    elif model.name == "tanh":
        cols = [np.tanh(dq / values["tanh_velocity"]), dq]
    elif model.name in ("stribeck", "stribeck_tanh"):
        s = np.tanh(dq / values["tanh_velocity"]) if model.name == "stribeck_tanh" else coulomb_feature(dq, smoothing)
        decay = np.exp(-(np.abs(dq) / values["stribeck_velocity"]) ** values["exponent"])
        cols = [s, decay * s, dq]
    else:  # high_low_speed
        t = np.tanh(dq / model.eps)
        pos = dq >= 0.0
        w_pos, w_neg = 0.5 * (1.0 + t), 0.5 * (1.0 - t)
        high = np.abs(dq) >= values["threshold"]
        h_pos, h_neg = (pos & high).astype(float), (~pos & high).astype(float)
        dq2, dq3 = dq * dq, dq * dq * dq
        cols = [np.where(pos, t * w_pos, 0.0), np.where(pos, 0.0, t * w_neg),
                h_pos * w_pos * dq, h_pos * dq2, h_pos * dq3, h_neg * w_neg * dq, h_neg * dq2, h_neg * dq3]
    return np.stack(cols, axis=-1)


def friction_regressor(dq, models, nonlinear=None, smoothing: float = 0.0) -> np.ndarray:
    """Friction columns (N, n, P) of n joints, joint-major: joint j's linear parameters are
    consecutive (P = total of len(linear_names)) and non-zero only in row j.

    dq (N, n) rad/s; models (n,) FrictionModel; nonlinear (n,) per-joint value tuples or None.
    """
    return spread_friction(packed_friction(dq, models, nonlinear, smoothing), models)


def packed_friction(dq, models, nonlinear=None, smoothing: float = 0.0) -> np.ndarray:
    """friction_regressor's non-zero entries (N, P): column p of joint j at joint j's own
    velocity. A filter applied along the samples to these (P columns, not n P) gives the
    filtered regressor through ``spread_friction``."""
    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    widths = [len(m.linear_names) for m in models]
    out = np.zeros((dq.shape[0], sum(widths)))
    start = 0
    for j, model in enumerate(models):  # a handful of joints; samples are vectorised
        out[:, start:start + widths[j]] = features(model, dq[:, j], None if nonlinear is None else nonlinear[j],
                                                   smoothing)
        start += widths[j]
    return out


def spread_friction(packed: np.ndarray, models) -> np.ndarray:
    """The regressor layout (N, n, P) of ``packed_friction``'s columns (N, P)."""
    rows = np.repeat(np.arange(len(models)), [len(m.linear_names) for m in models])
    out = np.zeros((packed.shape[0], len(models), packed.shape[1]))
    out[:, rows, np.arange(packed.shape[1])] = packed
    return out


def friction_column_names(joint_names, models) -> tuple:
    """Names ``<joint>.<parameter>`` of friction_regressor's columns."""
    return tuple(f"{j}.{p}" for j, m in zip(joint_names, models) for p in m.linear_names)


def nominal_value(parameter: str, frictionloss: float, damping: float) -> float:
    """A MuJoCo joint's value of a friction parameter: Coulomb levels = frictionloss, viscous
    coefficients = damping, the rest (Stribeck excess, polynomial terms) 0."""
    if parameter.startswith("coulomb"):
        return float(frictionloss)
    if parameter.startswith("viscous"):
        return float(damping)
    return 0.0


@dataclass(frozen=True)
class JointFriction:
    """One joint's identified friction: ``model``, ``linear`` values (model.linear_names order,
    SI units) and ``nonlinear`` values (model.nonlinear_names order), ``smoothing`` rad/s."""

    model: FrictionModel
    linear: tuple
    nonlinear: tuple = ()
    smoothing: float = 0.0

    @property
    def parameters(self) -> dict:
        """{name: value} of all parameters, plus ``static`` = coulomb + stribeck (Stribeck)."""
        out = dict(zip(self.model.linear_names, self.linear))
        out.update(zip(self.model.nonlinear_names, self.nonlinear))
        if self.model.name in ("stribeck", "stribeck_tanh"):
            out["static"] = out["coulomb"] + out["stribeck"]
        return out

    @property
    def coulomb_level(self) -> float:
        """Coulomb level N m (mean of the two directions where they differ)."""
        p = self.parameters
        return p["coulomb"] if "coulomb" in p else 0.5 * (p["coulomb_pos"] + p["coulomb_neg"])

    @property
    def viscous_level(self) -> float:
        """Linear viscous coefficient N m s/rad (mean of the two directions where they differ)."""
        p = self.parameters
        return p["viscous"] if "viscous" in p else 0.5 * (p["viscous_pos"] + p["viscous_neg"])

    def torque(self, dq) -> np.ndarray:
        """Friction torque N m for dq (...) rad/s, same shape."""
        return features(self.model, dq, self.nonlinear, self.smoothing) @ np.asarray(self.linear, dtype=float)


def friction_torque(dq, frictions) -> np.ndarray:
    """Friction torques (N, n) N m of n joints (``frictions`` (n,) JointFriction) at dq (N, n) rad/s."""
    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    return np.stack([f.torque(dq[:, j]) for j, f in enumerate(frictions)], axis=1)


# --------------------------------------------------------------------------- separable least squares

def _velocity_scale(dq_j: np.ndarray) -> float:
    scale = float(np.percentile(np.abs(dq_j), 95)) if dq_j.size else 0.0
    return scale if scale > 0 else 1.0


def _search_space(name: str, dq_j: np.ndarray):
    """(start, lower, upper, grid (GRID_SIZE,), smooth) of one free nonlinear parameter."""
    scale = _velocity_scale(dq_j)
    if name == "exponent":
        # no grid: the exponent shapes the decay, its velocity sets where; refined by least squares
        return 2.0, _EXPONENT_BOUNDS[0], _EXPONENT_BOUNDS[1], np.full(GRID_SIZE, 2.0), True
    if name == "threshold":
        # the residual is a step function of lambda: candidates are low quantiles of |dq| (and 0)
        grid = np.concatenate([[0.0], np.quantile(np.abs(dq_j), np.linspace(0.01, 0.3, GRID_SIZE - 1))])
        return _RELATIVE_START[name] * scale, 0.0, float(grid[-1]), grid, False
    lo, hi = (b * scale for b in _RELATIVE_BOUNDS[name])
    grid = np.geomspace(max(lo, 3e-3 * scale), 0.5 * hi, GRID_SIZE)
    return _RELATIVE_START[name] * scale, lo, hi, grid, True


def fit_nonlinear(fixed_columns, target, dq, models, solve, smoothing: float = 0.0, independent=None,
                  max_evaluations: int = MAX_EVALUATIONS, columns=None) -> tuple:
    """Nonlinear friction parameters of every joint by separable least squares.

    The torque model is [fixed_columns | friction_regressor(dq, models, x)] @ beta, linear in
    beta for given nonlinear parameters x. For each trial x, beta comes from ``solve``
    (the identification's own estimator: ``solve(W (N, n, r), y (N, n)) -> Estimate``, weights
    included), and the residual y - W beta, divided per joint by the residual standard
    deviations of the first solve (fixed, so that every x is judged in the same metric), is
    what x minimises:

    1. a grid pass: every parameter's GRID_SIZE candidates (relative to the joint's 95th
       percentile of ``|dq|``), all joints at once, each joint keeping the candidate that leaves
       its own torque residual smallest (friction acts on its own joint's torque); one sweep
       per kind of parameter, in turn (the exponent keeps its start, 2);
    2. ``scipy.optimize.least_squares`` (trust region, bounded, in log space for velocities)
       over the smooth parameters jointly; a threshold (a step in the model) keeps its grid value.

    fixed_columns (N, n, p0): the columns not depending on x (inertial, armature, offset);
    target (N, n) N m; dq (N, n) rad/s; models (n,) FrictionModel; ``independent`` indices of
    the concatenated columns to keep (base parameters), default all. Only every k-th sample is
    used (about SEARCH_SAMPLES). ``columns`` (nonlinear values (n,) tuples -> (N, n, P)) the
    friction columns at the rows of fixed_columns, when they are not friction_regressor(dq, ...)
    (e.g. filtered like the measured torque; identify._fit_friction). Deterministic. Returns (n,)
    tuples of all nonlinear values (``model.nonlinear_names`` order; given values untouched).
    """
    from scipy.optimize import least_squares

    dq = np.atleast_2d(np.asarray(dq, dtype=float))
    stride = max(1, int(np.ceil(dq.shape[0] / SEARCH_SAMPLES)))
    fixed_s, y, dq_s = fixed_columns[::stride], np.asarray(target, dtype=float)[::stride], dq[::stride]
    free = [(j, k) for j, m in enumerate(models) for k in m.free]
    if not free:
        return tuple(m.values() for m in models)
    spaces = [_search_space(k, dq_s[:, j]) for j, k in free]
    x = np.array([s[0] for s in spaces])

    def assemble(xv):
        values = [dict(zip(m.nonlinear_names, m.values())) for m in models]
        for (j, k), v in zip(free, xv):
            values[j][k] = float(v)
        return [tuple(v[k] for k in m.nonlinear_names) for v, m in zip(values, models)]

    def fit(xv):
        values = assemble(xv)
        friction = (friction_regressor(dq_s, models, values, smoothing) if columns is None
                    else columns(values)[::stride])
        w = np.concatenate([fixed_s, friction], axis=2)
        if independent is not None:
            w = w[..., independent]
        est = solve(w, y)
        return est, y - w @ est.values

    first, _ = fit(x)
    sigma = np.maximum(np.asarray(first.residual_std, dtype=float), 1e-12 * max(float(np.max(first.residual_std)), 1e-300))

    # 1. grid pass, all joints at once: one sweep per kind of parameter (a joint's first free
    # parameter, its second, ...), the kinds in turn
    kind = np.array([sum(1 for f in free[:i] if f[0] == free[i][0]) for i in range(len(free))])
    for r in np.unique(kind):
        members = [i for i in np.flatnonzero(kind == r) if free[i][1] != "exponent"]
        if not members:
            continue
        costs = []
        for g in range(GRID_SIZE):
            trial = x.copy()
            trial[members] = [spaces[i][3][g] for i in members]
            costs.append(np.sum((fit(trial)[1] / sigma) ** 2, axis=0))  # (n,) per joint
        costs = np.array(costs)
        for i in members:
            x[i] = spaces[i][3][int(np.argmin(costs[:, free[i][0]]))]

    # 2. least-squares refinement of the smooth parameters
    smooth = [i for i, s in enumerate(spaces) if s[4]]
    if smooth:
        log = np.array([free[i][1] != "exponent" for i in smooth])
        lower = np.array([spaces[i][1] for i in smooth])
        upper = np.array([spaces[i][2] for i in smooth])
        to_z = lambda v: np.where(log, np.log(np.maximum(v, 1e-300)), v)  # noqa: E731
        from_z = lambda z: np.where(log, np.exp(z), z)  # noqa: E731
        z_lo, z_hi = to_z(lower), to_z(upper)
        z0 = np.clip(to_z(x[smooth]), z_lo + 1e-9 * (z_hi - z_lo), z_hi - 1e-9 * (z_hi - z_lo))

        def residual(z):
            trial = x.copy()
            trial[smooth] = from_z(z)
            return fit(trial)[1] / sigma  # (N', n)

        # Jacobian by forward differences, one residual evaluation per *kind* of parameter rather
        # than per parameter: joint j's parameters act on joint j's torque (the coupling through
        # the shared inertial estimate is second order), so all joints are perturbed at once and
        # each joint's rows are credited to its own parameter.
        joints = np.array([free[i][0] for i in smooth])
        rank = np.array([sum(1 for i2 in smooth[:k] if free[i2][0] == free[i][0]) for k, i in enumerate(smooth)])
        last = {}  # least_squares asks for the Jacobian where it has just evaluated the residual

        def residual_cached(z):
            key = z.tobytes()
            if key not in last:
                last.clear()
                last[key] = residual(z)
            return last[key]

        def jacobian(z):
            base_r = residual_cached(z)
            jac = np.zeros(base_r.shape + (len(z),))  # (N', n, parameters)
            for g in np.unique(rank):
                cols = np.flatnonzero(rank == g)
                h = 1e-4 * np.maximum(1.0, np.abs(z[cols]))
                h = np.where(z[cols] + h > z_hi[cols], -h, h)  # stay inside the bounds
                trial = z.copy()
                trial[cols] += h
                diff = residual(trial) - base_r
                jac[:, joints[cols], cols] = diff[:, joints[cols]] / h
            return jac.reshape(base_r.size, len(z))

        solution = least_squares(lambda z: residual_cached(z).reshape(-1), z0, jac=jacobian, bounds=(z_lo, z_hi),
                                 method="trf", x_scale=1.0, ftol=1e-6, xtol=1e-6, gtol=1e-8,
                                 max_nfev=max_evaluations)
        x[smooth] = from_z(solution.x)
    return tuple(assemble(x))
