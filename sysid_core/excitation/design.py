"""Optimized excitation: a finite Fourier series per joint that tells the most about the parameters.

Swevers et al. (1997) parametrise each joint's motion as a finite Fourier series with a
common base frequency f (omega = 2 pi f) and H harmonics:

    q_j(t)   = q0_j + sum_l [ a_jl / (omega l) sin(omega l t) - b_jl / (omega l) cos(omega l t) ]
    dq_j(t)  = sum_l [ a_jl cos(omega l t) + b_jl sin(omega l t) ]
    ddq_j(t) = sum_l [ -a_jl omega l sin(omega l t) + b_jl omega l cos(omega l t) ]

The motion is periodic, so a recording of whole periods can be averaged and every period
excites the same way. Rest at both ends (Liu et al., Actuators 2023, 12(12), 454) asks
sum_l a_jl = 0 (dq = 0), sum_l l b_jl = 0 (ddq = 0) and q0_j = q_start_j + sum_l b_jl / (omega l)
(q = q_start); periodicity gives the same at the end of every whole period. Here the two
linear conditions are built in: the optimizer moves free coordinates x in their null space
(2 (H - 1) per joint, rad/s), so every candidate is at rest at ``q_start`` by construction.

Criterion (``criteria``): D-optimality of the base parameters, D-optimality of the terminal
body's parameters with the joint terms as nuisance (``payload``), the column-scaled condition
number, or Liu et al.'s weighted sub-matrix criterion, on a grid of one period.

Condition cap. D-optimality maximises the volume of the information, not its smallest
direction: on most 6- and 7-joint arms it leaves the base regressor's condition number with
unit-norm columns (what the identification reports) at 0.5-0.8 of the multisine's, and the
condition number itself, minimised, gives worse estimates (Panda: base-parameter error 0.73
times the multisine's against D-optimality's 0.40) and is not smooth. So ``d_optimal`` keeps its
criterion and holds a smooth upper bound of that condition number (``criteria.log_condition_bound``)
under a cap, CONDITION_CAP_FRACTION of the median of the CLI's multisines, as one more SLSQP
constraint: D-optimality within the cap. Points are ranked by the criterion plus a penalty over
the cap, so a start over it still counts and the result is never worse than the best start.
``payload`` is capped too, by default: in the terminal scope the condition number is set by each
joint's Coulomb and viscous columns (the manual's condition cap, doc/concepts/identification.md),
which only velocities that dwell near zero between bursts bring under a cap. That motion tells
less about the payload than the uncapped design's (``condition_cap=None``,
``--excitation-condition-cap off``); the cap is the default in both scopes all the same: here it
separates each joint's Coulomb and viscous columns, so the joint friction identified alongside
the payload is well determined too. Under a cap there, half the random starts are such motions
(DWELL_SHARE), a local search from over the cap first brings the bound under it, and the series
has TERMINAL_CAP_HARMONICS harmonics, not 8: the bursts need the band.

Gradients. q, dq, ddq on the grid are linear in x (one joint's coordinates move that joint
only), and each criterion gives its matrix gradient dV/dW; what remains is how the regressor
changes with each joint's position, velocity and acceleration at each grid sample: 3 n forward
differences of the regressor, in one vectorised batch (the acceleration one exact: W is linear in
ddq), 3 to 8 times cheaper than forward differences in x (2 (H - 1) n = 14 n of them). The
design's Coulomb columns use tanh(dq / 0.02 rad/s) for sign(dq), or the criterion would jump
wherever a grid sample's velocity changes sign.

Constraints, all on grids of one period: position (the range less a margin), velocity and
acceleration, linear in x, as one smooth peak usage per joint (a p-norm over a dense grid of
value / limit: convex, at least the maximum, so that usage <= 1 keeps them); the nominal model's
joint torques (inverse dynamics: rigid bodies, armature, damping, Coulomb) within a share of the
torque limits, one smooth maximum per joint (Kreisselmeier-Steinhauser); and, when the model has
collision geometry, the clearance between the geoms MuJoCo would collide (``clearance``), one
smooth minimum. SLSQP works on x itself with these 2 n (+ 1) constraints.

Search (``multistart``): starts are random coefficients scaled into every limit (towards rest
until the torques and clearance hold), so each local search begins feasible; rounds of two local
searches, the second warm-started near the best design so far, on one or two processes, until
the wall-clock budget is spent. Finalists (the best of each search and the best start) are
sampled at the requested rate, checked on every sample (a result that crosses a limit between
grid points is shrunk toward rest until it does not) and scored again there; the best of them is
returned, so the result is never worse than the best start, measured the same way.

Why the starts are scaled into every limit and the search works on x itself: on a heavily
damped arm (UR10e: damping 350 N m s/rad, force range 330 N m, so the shoulder cannot move
faster than about 0.5 rad/s) a search whose random starts ignore the torque limits peaks at
1.9-2.7 times them on the first three joints, and limits imposed by squashing the coordinates,
y (1 + u^k)^(-1/k), have a derivative along a joint's amplitude of 0.007-0.07 where the start's
usage u exceeds 1 (0.5-1 where it does not): the torque constraint's gradient then has almost
no component that reduces the amplitude, SLSQP's linearised constraints are incompatible, and
the search ends at whatever feasible point it met by chance, which the final check shrinks
toward rest; a "best start" taken among infeasible starts is one no plan can reach. Hence
feasible starts, x itself as the search's variables, and the best finalist as the result.
"""
from __future__ import annotations

import time as _time
from dataclasses import dataclass, replace

import mujoco
import numpy as np

from ..dynamics.friction import JointModel
from ..dynamics.model import Robot
from ..identification.identify import (IdentificationConfig, base_regressor, column_names, model_parameter_vector,
                                       structural_base_parameters)
from . import multistart
from .clearance import Clearance
from .criteria import CRITERIA, log_condition_bound, log_condition_scaled, log_det_information, weighted_condition
from .multisine import _center_and_half_range, _limit_array, _validate_range, multisine
from .trajectory import Trajectory

# The criterion each scope is designed for unless one is asked: the terminal body's parameters
# in the terminal scope, all base parameters in the full scope (bench/excitation_quality.py).
DEFAULT_CRITERIA = {"terminal": "payload", "full": "d_optimal"}
# The criteria designed under a cap on the unit-norm-column condition number (module docstring):
# CONDITION_CAP_FRACTION of the median of CAP_MULTISINE_SEEDS of the CLI's multisines of the same
# duration, speed cap and torque limits (0.4 rather than a round half: the smooth bound and the
# design grid are not the identification's samples, so the cap keeps a margin).
CAPPED_CRITERIA = ("d_optimal", "payload")
CONDITION_CAP_FRACTION = 0.4
# The multisines' condition numbers scatter by a factor of 3 between seeds (Panda: 14-46): the
# median of ten is stable. They are sampled at (at most) CAP_REFERENCE_RATE Hz: the multisine's
# band ends at 0.6 Hz, and its condition number is the same to 1e-4 at 1 kHz.
CAP_MULTISINE_SEEDS = 10
CAP_REFERENCE_RATE = 100.0
# Sharpness of the soft maximum and minimum of the log eigenvalues in that bound: it exceeds the
# log condition number by at most log(r) / CAP_SHARPNESS (0.14 for r = 62), usually far less.
CAP_SHARPNESS = 30.0
# A design over the cap is ranked by the criterion plus this times the bound's excess over the
# log cap: 0.1 (a condition number 10 % over the cap) outweighs the criterion's differences
# between good designs, so a design within the cap wins whenever a search found one.
CAP_PENALTY = 10.0
# Criterion grid: samples of one period per cycle of the highest harmonic. The criteria converge
# quickly with the sampling of a smooth periodic signal; 24 is within a few percent of the densely
# sampled value at a fraction of the cost.
SAMPLES_PER_CYCLE = 24
# Grid of the (cheap, linear) position, velocity and acceleration constraints, same unit.
CONSTRAINT_SAMPLES_PER_CYCLE = 200
# Share of the torque limits the nominal torques may use: the rest is for what the nominal model
# does not know (a payload) and for the tracking controller's corrections.
TORQUE_SHARE = 0.8
# Of that share, what the search may use on its grid: the rest absorbs peaks between grid points,
# so the final check on every sample rarely has to shrink the result.
SEARCH_TORQUE_FRACTION = 0.98
# Smallest distance kept between collision geoms (m), when the model has any.
DEFAULT_CLEARANCE = 0.01
# Sharpness of the smooth max that turns a torque limit on every grid sample into one smooth
# constraint per joint (Kreisselmeier-Steinhauser); it overestimates the peak usage by
# log(samples near the peak) / KS_SHARPNESS, about 2 % here.
KS_SHARPNESS = 100.0
# The same for the smallest clearance, 1/m: it underestimates it by log(pairs near it) / 1000 m,
# a few millimetres. Pairs more than _CLEARANCE_GRADIENT_BAND beyond the clearance weigh less
# than e^-20 in it: their gradients are not computed.
CLEARANCE_SHARPNESS = 1000.0
_CLEARANCE_GRADIENT_BAND = 0.02
# Order of the p-norm that measures a joint's smooth peak usage of its position, velocity and
# acceleration limits (it exceeds the maximum by a factor (samples near the peak)^(1/p), a
# few percent).
USAGE_NORM = 200.0
# Random starts: each joint's peak usage of its position, velocity and acceleration limits drawn
# in this range; warm starts: the incumbent plus Gaussian noise of this share of each joint's RMS
# coefficient.
START_USAGE = (0.3, 0.9)
WARM_SPREAD = 0.3
# Under a cap in the terminal scope, this share of the random starts are dwelling ones: each
# joint goes out and back once a period, its velocity two Gaussian pulses of opposite sign at
# random times, DWELL_WIDTH / (pi H) periods wide (one standard deviation), projected onto the
# series. The cap there is set by each joint's Coulomb and viscous pair, sqrt((1 + rho) / (1 - rho))
# with rho = mean |dq| / RMS dq (the manual's condition cap, doc/concepts/identification.md): the
# velocities of random coefficients are near Gaussian (pairs 2.2-3.8, median 3.0 with 8
# harmonics), these dwell near zero between the pulses (1.7-2.2, median 1.85; narrower pulses
# ring in the band, four pulses dwell less: 2.2).
DWELL_SHARE = 0.5
DWELL_WIDTH = 0.8
# Harmonics of the series: DEFAULT_HARMONICS, and TERMINAL_CAP_HARMONICS under a cap in the
# terminal scope, whose pairs ask for velocities that dwell near zero between bursts: a band of
# 8 harmonics rounds the bursts off. With 16 (60 s budget, seed 0, cap 0.4) the UR10e's design
# reaches 0.48 of the multisines' condition number (8: 0.51; payload criterion 1.20 against 0.91)
# and the Panda's 0.41 (8: 0.44) with the same payload criterion (-0.52; 8: -0.53).
DEFAULT_HARMONICS = 8
TERMINAL_CAP_HARMONICS = 16
# The local search's first step moves x by this share of its size; points within NEAR_FEASIBLE of
# the constraints (SLSQP approaches them from outside) are scaled into them to count.
STEP_FRACTION = 0.1
NEAR_FEASIBLE = 0.05
# Finalists checked on every sample besides the best start.
FINALISTS = 3
# At most this many samples of the returned trajectory score it (a uniform stride).
SCORE_SAMPLES = 2000
# Forward-difference step of the regressor in each joint's position (rad) and velocity (rad/s).
_FD_STEP = 1e-6
# The design's Coulomb columns are tanh(dq / COULOMB_SMOOTHING) (rad/s) instead of sign(dq): the
# same information, but a criterion that does not jump where a grid sample's velocity changes sign.
COULOMB_SMOOTHING = 0.02
_FEASIBLE_TOL = 1e-6
_RANK_TOL = 1e-9
_MAX_SHRINK_STEPS = 60
_BISECTION_STEPS = 12
# what SLSQP sees for a design whose information matrix is singular (inf)
_SINGULAR_VALUE = 1e3


@dataclass(frozen=True, eq=False)
class FourierSeries:
    """Finite Fourier series per joint (Swevers' form).

    ``base_frequency`` Hz; ``a``, ``b`` (n, H) rad/s: the velocity amplitudes of
    cos(omega l t) and sin(omega l t), l = 1..H; ``offset`` (n,) rad: q0, the mean position.
    """

    base_frequency: float
    a: np.ndarray
    b: np.ndarray
    offset: np.ndarray

    @property
    def period(self) -> float:
        """Period of the motion, s."""
        return 1.0 / self.base_frequency

    def evaluate(self, time) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, dq, ddq (N, n) at ``time`` (N,) s: the series and its exact derivatives."""
        t = np.asarray(time, dtype=float).reshape(-1)
        harmonics = np.arange(1, self.a.shape[1] + 1)
        w = 2 * np.pi * self.base_frequency * harmonics                   # (H,) rad/s
        arg = t[:, None] * w[None]                                        # (N, H) rad
        sin, cos = np.sin(arg), np.cos(arg)
        q = self.offset + sin @ (self.a / w).T - cos @ (self.b / w).T
        dq = cos @ self.a.T + sin @ self.b.T
        ddq = -sin @ (self.a * w).T + cos @ (self.b * w).T
        return q, dq, ddq

    def trajectory(self, duration: float, sample_rate: float) -> Trajectory:
        """The series sampled at ``sample_rate`` Hz over [0, duration] s (both ends are samples)."""
        if not np.isfinite(sample_rate) or sample_rate <= 0:
            raise ValueError(f"sample_rate must be a finite number of Hz > 0, got {sample_rate}")
        if not np.isfinite(duration) or duration <= 0:
            raise ValueError(f"duration must be a finite number of seconds > 0, got {duration}")
        num = int(round(duration * sample_rate)) + 1
        time = np.arange(num) / sample_rate
        q, dq, ddq = self.evaluate(time)
        return Trajectory(time=time, q=q, dq=dq, ddq=ddq)


def _null_basis(harmonics: int) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal bases (H, H - 1) of {a: sum a_l = 0} and {b: sum l b_l = 0}."""
    import scipy.linalg  # here, as scipy.optimize below: a design needs SciPy, an identification does not
    ones = np.ones((1, harmonics))
    weighted = np.arange(1, harmonics + 1, dtype=float)[None]
    return scipy.linalg.null_space(ones), scipy.linalg.null_space(weighted)


def rest_to_rest_series(free, start, base_frequency: float) -> FourierSeries:
    """The Fourier series at rest at ``start`` at t = 0 and every whole period.

    free: (n, 2 (H - 1)) coordinates, rad/s: the first H - 1 per joint span the cosine
    amplitudes a with sum_l a_l = 0, the last H - 1 the sine amplitudes b with
    sum_l l b_l = 0 (orthonormal bases, so the coordinates are amplitudes too).
    start: (n,) rad; base_frequency: Hz > 0. H >= 2.
    """
    free = np.atleast_2d(np.asarray(free, dtype=float))
    start = np.asarray(start, dtype=float).reshape(-1)
    n, twice = free.shape
    if twice < 2 or twice % 2:
        raise ValueError(f"free must have shape (n, 2 (H - 1)) with H >= 2, got {free.shape}")
    if start.shape != (n,):
        raise ValueError(f"start must have shape ({n},), got {start.shape}")
    if not np.isfinite(base_frequency) or base_frequency <= 0:
        raise ValueError(f"base_frequency must be a finite number of Hz > 0, got {base_frequency}")
    harmonics = twice // 2 + 1
    basis_a, basis_b = _null_basis(harmonics)
    a = free[:, :harmonics - 1] @ basis_a.T
    b = free[:, harmonics - 1:] @ basis_b.T
    w = 2 * np.pi * base_frequency * np.arange(1, harmonics + 1)
    return FourierSeries(float(base_frequency), a, b, start + (b / w).sum(axis=1))


def _linear_maps(harmonics: int, base_frequency: float, time: np.ndarray):
    """Matrices (G, 2 (H - 1)) mapping one joint's free coordinates to q - q_start, dq, ddq at ``time``."""
    basis_a, basis_b = _null_basis(harmonics)
    w = 2 * np.pi * base_frequency * np.arange(1, harmonics + 1)
    arg = time[:, None] * w[None]
    sin, cos = np.sin(arg), np.cos(arg)
    dev = np.hstack([(sin / w) @ basis_a, -((cos - 1.0) / w) @ basis_b])
    vel = np.hstack([cos @ basis_a, sin @ basis_b])
    acc = np.hstack([(-sin * w) @ basis_a, (cos * w) @ basis_b])
    return dev, vel, acc


def actuator_torque_limits(robot: Robot | mujoco.MjModel) -> np.ndarray | None:
    """Symmetric joint torque limits (n,) N m (N for slides) from the model's actuators, or None.

    ``robot``: a Robot or its compiled MuJoCo model (hinge and slide joints). A joint's limit
    is the sum over the actuators driving it of ``|gear|`` times the smaller bound magnitude of
    forcerange (when force-limited) or, for a plain motor, of ``|gain|`` times
    ctrlrange (when control-limited); a joint ``actuatorfrcrange`` caps it further. Joints
    without any such limit get inf; None when no joint has one.
    """
    model = robot if isinstance(robot, mujoco.MjModel) else robot.model
    limits = np.zeros(model.nv)
    limited = np.zeros(model.nv, dtype=bool)
    unlimited = np.zeros(model.nv, dtype=bool)
    for k in range(model.nu):
        if model.actuator_trntype[k] != mujoco.mjtTrn.mjTRN_JOINT:
            continue
        dof = model.jnt_dofadr[model.actuator_trnid[k, 0]]
        gear = abs(model.actuator_gear[k, 0])
        bound = np.inf
        if model.actuator_forcelimited[k]:
            bound = min(bound, np.min(np.abs(model.actuator_forcerange[k])))
        plain_motor = (model.actuator_gaintype[k] == mujoco.mjtGain.mjGAIN_FIXED
                       and model.actuator_biastype[k] == mujoco.mjtBias.mjBIAS_NONE)
        if model.actuator_ctrllimited[k] and plain_motor:
            bound = min(bound, abs(model.actuator_gainprm[k, 0]) * np.min(np.abs(model.actuator_ctrlrange[k])))
        if np.isfinite(bound):
            limits[dof] += gear * bound
            limited[dof] = True
        else:
            unlimited[dof] = True
    result = np.where(limited & ~unlimited, limits, np.inf)
    for j in range(model.njnt):
        if model.jnt_actfrclimited[j]:
            dof = model.jnt_dofadr[j]
            result[dof] = min(result[dof], np.min(np.abs(model.jnt_actfrcrange[j])))
    return None if np.all(np.isinf(result)) else result


def default_criterion(config: IdentificationConfig) -> str:
    """The criterion an excitation for ``config`` is designed for: ``payload`` in the terminal
    scope (the terminal body's 10 parameters, friction as nuisance), ``d_optimal`` in the full scope."""
    return DEFAULT_CRITERIA[config.scope]


# the name the multisine's slowing (and the CLI) know the share of the torque limits by
TORQUE_USAGE = TORQUE_SHARE
# each retry slows the plan by a factor in [_MIN_SLOWDOWN, _MAX_SLOWDOWN]: at most ~35 tries from 2 rad/s
_MIN_SLOWDOWN, _MAX_SLOWDOWN = 0.3, 0.9


def slow_to_torque_limits(make_plan, robot: Robot, max_velocity: float, torque_limits=None,
                          usage: float = TORQUE_USAGE, min_velocity: float = 0.05) -> tuple[Trajectory, float, float]:
    """The fastest plan ``make_plan(v)`` (v rad/s, at most ``max_velocity``) whose nominal
    inverse-dynamics torques stay within ``usage`` of the actuators' torque limits.

    ``make_plan``: v -> Trajectory, e.g. a multisine capped at v (a lower cap also shrinks its
    amplitude, so gravity torques fall with it). torque_limits: (n,) N m, inf for none; None
    takes ``actuator_torque_limits(robot)``. Published arms carry joint damping of hundreds of
    N m s/rad that alone exceeds their force range at 1-2 rad/s. Returns (plan, v, peak usage):
    v = max_velocity when the first plan fits or the model gives no limits; the slowest plan
    tried (v = min_velocity) when none fits, for the caller to refuse or report.
    """
    limits = actuator_torque_limits(robot) if torque_limits is None else np.asarray(torque_limits, dtype=float)
    velocity = float(max_velocity)
    while True:
        plan = make_plan(velocity)
        if limits is None:
            return plan, velocity, 0.0
        tau = robot.inverse_dynamics(plan.q, plan.dq, plan.ddq)
        peak = float(np.max(np.abs(tau) / limits))
        if peak <= usage or velocity <= min_velocity:
            return plan, velocity, peak
        velocity = max(min_velocity, velocity * min(_MAX_SLOWDOWN, max(_MIN_SLOWDOWN, usage / peak)))


@dataclass(frozen=True, eq=False)
class ExcitationDesign:
    """Result of ``optimize_excitation``.

    ``trajectory``: the series sampled at the requested rate (time (N,) s; q, dq, ddq (N, n)),
    at rest at ``series.evaluate(0)`` at both ends. ``series``: its FourierSeries
    (coefficients). ``criterion``: what was minimised; ``criterion_value`` its value on the
    returned trajectory (at most SCORE_SAMPLES samples of it; lower is better: -(1/r) log det of
    the unit-free information matrix, or the log of a condition number);
    ``initial_criterion_value`` the same for the best start after the same checks: never lower.
    Condition numbers of the base regressor on the returned trajectory: ``condition_number``
    and ``condition_number_scaled`` (unit-norm columns). ``restarts`` local searches,
    ``iterations`` SLSQP iterations over all of them, ``evaluations`` criterion evaluations,
    ``workers`` processes, ``elapsed_s`` wall time. ``condition_cap``: the cap on the
    unit-norm-column condition number the design was held under (None: none), and
    ``reference_condition`` the multisines' median it was derived from (None when given as a
    number); with a cap, ``criterion_value`` and ``initial_criterion_value`` add CAP_PENALTY
    times the smooth bound's excess over the log cap (nothing within it). ``limits_met``: every
    sample of ``trajectory`` within all limits; ``limit_usage`` kind -> (n,) peak over the samples of
    value / limit (position: ``|q - centre|`` / half-width of the range less the margin; torque:
    the nominal torque over the share of the limit it may use), <= 1 within limits, 0 where a
    joint has no such limit; with collision geometry ``clearance`` (1,): the clearance asked
    for over the smallest distance between geoms. ``min_clearance`` that distance (m), None
    without collision geometry.
    """

    trajectory: Trajectory
    series: FourierSeries
    criterion: str
    criterion_value: float
    initial_criterion_value: float
    condition_number: float
    condition_number_scaled: float
    iterations: int
    restarts: int
    elapsed_s: float
    limits_met: bool
    limit_usage: dict
    evaluations: int = 0
    workers: int = 1
    min_clearance: float | None = None
    condition_cap: float | None = None
    reference_condition: float | None = None


def _condition_numbers(matrices: np.ndarray, rank: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """sigma_1 / sigma_rank of a stack (m, rows, r), raw and with unit-norm columns (zero columns kept)."""
    rank = matrices.shape[-1] if rank is None else rank
    norms = np.linalg.norm(matrices, axis=1, keepdims=True)
    scaled = matrices / np.where(norms > 0, norms, 1.0)
    out = []
    for mats in (matrices, scaled):
        s = np.linalg.svd(mats, compute_uv=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.where(s[:, rank - 1] > 0, s[:, 0] / s[:, rank - 1], np.inf))
    return out[0], out[1]


def _subsampled(trajectory: Trajectory, max_samples: int):
    """q, dq, ddq of at most ``max_samples`` samples at a uniform stride."""
    if max_samples < 2:
        raise ValueError(f"max_samples must be >= 2, got {max_samples}")
    stride = max(1, int(np.ceil(np.shape(trajectory.q)[0] / max_samples)))
    return tuple(np.asarray(a, dtype=float)[::stride] for a in (trajectory.q, trajectory.dq, trajectory.ddq))


def regressor_condition(robot: Robot, trajectory: Trajectory, config: IdentificationConfig | None = None,
                        max_samples: int = SCORE_SAMPLES, base=None) -> tuple[float, float]:
    """Condition number of the base regressor along ``trajectory``: (raw, unit-norm columns).

    The independent columns of ``config`` (default IdentificationConfig(): terminal scope with
    Coulomb and viscous friction; ``base`` its structural_base_parameters when already known)
    on at most ``max_samples`` samples taken at a uniform stride (the condition number of a
    smooth trajectory barely changes with denser sampling).
    """
    config = IdentificationConfig() if config is None else config
    columns, _ = base_regressor(robot, config, *_subsampled(trajectory, max_samples), base=base)
    raw, scaled = _condition_numbers(columns.reshape(1, -1, columns.shape[-1]))
    return float(raw[0]), float(scaled[0])


class _Problem:
    """The design problem on free coordinates x (n * 2 (H - 1),) rad/s: the criterion and the
    constraints (each >= 0 when met) on grids of one period, their gradients, feasible starts
    and a local search. Caches the last point; tracks the best feasible point of a search."""

    def __init__(self, robot, config, criterion, weights, noise_std, harmonics, base_frequency, start,
                 lower, upper, v_max, a_max, tau_max, clearance, condition_cap=None):
        self.robot, self.criterion = robot, criterion
        # designed for the arm's own joint physics (a real arm's: what the plan will be run on),
        # whatever source the identification's data will later come from
        config = replace(config, physics=None)
        # the regressor the design sees: Coulomb's sign smoothed, or the criterion would jump
        # wherever a grid sample's velocity changes sign
        smoothing = max(config.joint_model.smoothing, COULOMB_SMOOTHING)
        self.config = replace(config, joint_model=JointModel(config.joint_model.terms, smoothing))
        self.n, self.dim_joint = robot.n_joints, 2 * (harmonics - 1)
        self.dim = self.n * self.dim_joint
        self.start_pose = start
        self.room_up, self.room_down = upper - start, start - lower      # rad, inf where unlimited
        self.deadline = np.inf
        period = 1.0 / base_frequency
        # criterion grid offset by half a step: the rest samples (dq = 0 exactly, where a
        # Coulomb sign flips on round-off) are not on it; periodicity makes one period enough
        g = SAMPLES_PER_CYCLE * harmonics
        self.maps = _linear_maps(harmonics, base_frequency, (np.arange(g) + 0.5) * period / g)
        gc = CONSTRAINT_SAMPLES_PER_CYCLE * harmonics
        self.dense = _linear_maps(harmonics, base_frequency, np.arange(gc) * period / gc)
        self.base = structural_base_parameters(robot, config)
        self.beta_nominal = self.base.projection @ model_parameter_vector(robot, column_names(robot, config))
        self.row_weight = np.mean(noise_std) / noise_std                    # Sigma^(-1/2), relative
        self.weights = weights
        self.v_lim, self.a_lim = v_max, a_max
        self.t_lim = tau_max * SEARCH_TORQUE_FRACTION
        self.torque_limited = bool(np.any(np.isfinite(tau_max)))
        self.clearance = clearance if clearance is not None and clearance.active else None
        # the cap on the unit-norm-column condition number: a constraint for SLSQP, a penalty
        # in the value that ranks points (so a start over the cap still counts)
        self.log_cap = None if condition_cap is None else float(np.log(condition_cap))
        # in the terminal scope the cap binds hardest (the joints' friction pairs): dwelling starts,
        # and a local search from over the cap first brings the bound under it (``_under_cap``)
        self.terminal_cap = self.log_cap is not None and config.scope == "terminal"
        # the terminal body's columns come first in the terminal scope
        self.interest = np.flatnonzero(self.base.independent < 10) if criterion == "payload" else None
        self.scale = self._reference_scale()
        self.part_ranks = self._part_ranks() if criterion == "weighted" else None
        self._cache = (None, None)
        self.best = self.near = (np.inf, None)
        self.evaluations = 0

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = (None, None)
        return state

    # --- states and matrices --------------------------------------------------------------

    def _random_states(self, gen: np.random.Generator, count: int):
        """Random states (1, count, n) within the limits (unlimited: +-pi, 2 rad/s, 10 rad/s^2)."""
        lo = np.where(np.isfinite(self.room_down), self.start_pose - self.room_down, self.start_pose - np.pi)
        hi = np.where(np.isfinite(self.room_up), self.start_pose + self.room_up, self.start_pose + np.pi)
        v = np.where(np.isfinite(self.v_lim), self.v_lim, 2.0)
        a = np.where(np.isfinite(self.a_lim), self.a_lim, 10.0)
        shape = (1, count, self.n)
        return gen.uniform(lo, hi, shape), gen.uniform(-v, v, shape), gen.uniform(-a, a, shape)

    def _reference_scale(self) -> np.ndarray:
        """Each base column's RMS (r,) on random states within the limits: the unit of the
        information matrix (it shifts the D-criteria by a constant, which makes them unit-free)."""
        q, dq, ddq = self._random_states(np.random.default_rng(self.config.seed), max(400, 4 * self.base.rank))
        columns, _ = base_regressor(self.robot, self.config, q[0], dq[0], ddq[0], base=self.base)
        rms = np.sqrt(np.mean(columns ** 2, axis=(0, 1)))
        return np.where(rms > 0, rms, 1.0)

    def _part_ranks(self) -> tuple[int, int, int]:
        """Structural ranks of the acceleration, velocity and gravity parts, on random states."""
        states = self._random_states(np.random.default_rng(self.config.seed), max(200, 4 * self.base.rank))
        parts, _ = self._parts(*states)
        ranks = []
        for part in parts:
            mat = part[0]
            norms = np.linalg.norm(mat, axis=0)
            s = np.linalg.svd(mat[:, norms > 0] / norms[norms > 0], compute_uv=False)
            ranks.append(int(np.sum(s > _RANK_TOL * s[0])) if s.size and s[0] > 0 else 0)
        return tuple(ranks)

    def _parts(self, q, dq, ddq):
        """Acceleration, velocity and gravity parts (m, G n, r) of the base regressor of the
        states (m, G, n), and the torque of everything known (m, G, n), from one regressor call."""
        m, g, n = q.shape
        zero = np.zeros_like(q)
        stacked = [np.concatenate(a, axis=0).reshape(-1, n) for a in ((q, q, q), (zero, dq, zero), (zero, zero, ddq))]
        cols, known = base_regressor(self.robot, self.config, *stacked, base=self.base)
        gravity, velocity, acceleration = (c.reshape(m, g * n, -1) for c in np.split(cols, 3, axis=0))
        k_gravity, k_velocity, k_acceleration = (k.reshape(m, g, n) for k in np.split(known, 3, axis=0))
        return (acceleration - gravity, velocity - gravity, gravity), k_acceleration + k_velocity - k_gravity

    def _states(self, xs: np.ndarray, maps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, dq, ddq (m, G, n) of a batch xs (m, dim) on the grid of ``maps``."""
        coords = xs.reshape(xs.shape[0], self.n, self.dim_joint)
        dev, vel, acc = (np.einsum("gk,mjk->mgj", mat, coords) for mat in maps)
        return self.start_pose + dev, vel, acc

    def _matrices(self, q, dq, ddq) -> tuple[list, np.ndarray]:
        """The criterion's matrices [(m, G n, r)] and the nominal joint torques (m, G, n) N m of
        states (m, G, n): [W] or, for ``weighted``, [W, W_a, W_v, W_g]."""
        m, g, n = q.shape
        if self.criterion == "weighted":
            parts, known = self._parts(q, dq, ddq)
            whole = parts[0] + parts[1] + parts[2]
            return [whole, *parts], (whole @ self.beta_nominal).reshape(m, g, n) + known
        cols, known = base_regressor(self.robot, self.config, q.reshape(-1, n), dq.reshape(-1, n),
                                     ddq.reshape(-1, n), base=self.base)
        return [cols.reshape(m, g * n, -1)], (cols @ self.beta_nominal + known).reshape(m, g, n)

    def _cap(self, matrices: list) -> tuple[float, np.ndarray | None]:
        """The cap's slack log cap - bound (>= 0 within it; 0 without a cap) of one state set's
        matrices [(rows, r)], and its matrix gradient with respect to W (None without a cap)."""
        if self.log_cap is None:
            return 0.0, None
        bound, grad = log_condition_bound(matrices[0], CAP_SHARPNESS)
        if not np.isfinite(bound):
            return -_SINGULAR_VALUE, np.zeros_like(matrices[0])
        return self.log_cap - bound, -grad

    def _merit(self, value: float, cap_slack: float) -> float:
        """What ranks points: the criterion plus CAP_PENALTY times the excess over the cap."""
        return value + CAP_PENALTY * max(0.0, -cap_slack)

    def _criterion(self, matrices: list) -> tuple[float, list]:
        """The criterion of one state set's matrices [(rows, r)] and its matrix gradients."""
        if self.criterion == "condition":
            value, grad = log_condition_scaled(matrices[0])
            return value, [grad]
        if self.criterion == "weighted":
            return weighted_condition(matrices, self.weights, self.part_ranks, self.row_weight)
        value, grad = log_det_information(matrices[0], self.row_weight, self.scale, self.interest)
        return value, [grad]

    def score(self, trajectory: Trajectory) -> float:
        """The criterion (with the cap's penalty) on (at most SCORE_SAMPLES samples of) a trajectory."""
        q, dq, ddq = _subsampled(trajectory, SCORE_SAMPLES)
        matrices, _ = self._matrices(q[None], dq[None], ddq[None])
        matrices = [m[0] for m in matrices]
        return self._merit(float(self._criterion(matrices)[0]), self._cap(matrices)[0])

    # --- constraints ----------------------------------------------------------------------

    def usage(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Smooth peak usage (n,) of each joint's position, velocity and acceleration limits
        on the dense grid, and its gradient (n, d) with respect to the joint's coordinates.

        The p-norm over samples and kinds of value / limit: at least the largest, positively
        homogeneous of degree 1 and convex in the joint's coordinates, smooth.
        """
        coords = x.reshape(self.n, self.dim_joint)
        dev_map, vel_map, acc_map = self.dense
        dev, vel, acc = (mat @ coords.T for mat in self.dense)             # (G, n) each
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(dev > 0, self.room_up, -self.room_down)         # signed: dev / room >= 0
            z = np.concatenate([dev / room, np.abs(vel) / self.v_lim, np.abs(acc) / self.a_lim])   # (3G, n)
            dz_scale = np.concatenate([1.0 / room, np.sign(vel) / self.v_lim, np.sign(acc) / self.a_lim])
        z = np.where(np.isfinite(z), z, 0.0)
        dz_scale = np.where(np.isfinite(dz_scale), dz_scale, 0.0)
        top = np.max(z, axis=0)
        safe_top = np.where(top > 0, top, 1.0)
        ratio = z / safe_top
        u = safe_top * np.sum(ratio ** USAGE_NORM, axis=0) ** (1.0 / USAGE_NORM) * (top > 0)
        # d u / d z_i = (z_i / u)^(p - 1), then d z_i / d coords = dz_scale_i * row_i
        dz = (np.where(u > 0, z / np.where(u > 0, u, 1.0), 0.0) ** (USAGE_NORM - 1)) * dz_scale   # (3G, n)
        rows = np.concatenate([dev_map, vel_map, acc_map])                   # (3G, d)
        return u, dz.T @ rows

    def _torque_slack(self, torque: np.ndarray):
        """Kreisselmeier-Steinhauser aggregate of ``1 - |torque| / limit`` over the grid, per joint.

        torque (G, n) N m. Returns slack (n,) (a smooth, conservative min: >= 0 means within the
        limit on the grid; 1 where unlimited) and d slack / d torque (G, n).
        """
        limited = np.isfinite(self.t_lim)
        limit = np.where(limited, self.t_lim, 1.0)
        z = np.concatenate([torque, -torque]) / limit - 1.0
        top = np.max(z, axis=0)
        e = np.exp(KS_SHARPNESS * (z - top))
        total = np.sum(e, axis=0)
        slack = np.where(limited, -(top + np.log(total) / KS_SHARPNESS), 1.0)
        weights = np.where(limited, e / total / limit, 0.0)
        half = torque.shape[0]
        return slack, -(weights[:half] - weights[half:])

    def _clearance_slack(self, q: np.ndarray):
        """Smooth minimum of (distance - clearance) over the geom pairs and grid samples q (G, n),
        in units of the band (>= 0: clear), and its gradient (G, n) with respect to q."""
        clear = self.clearance
        samples, dist, grad = clear.distances(q, gradient_below=clear.clearance + _CLEARANCE_GRADIENT_BAND)
        # the band's edge stands for every pair beyond it: the minimum is continuous as pairs enter
        z = np.concatenate([dist - clear.clearance, [clear.band]])
        low = np.min(z)
        e = np.exp(-CLEARANCE_SHARPNESS * (z - low))
        total = np.sum(e)
        slack = low - np.log(total) / CLEARANCE_SHARPNESS
        dslack = np.zeros(q.shape)
        np.add.at(dslack, samples, (e[:-1] / total)[:, None] * grad)
        return slack / clear.band, dslack / clear.band

    def _slacks(self, q: np.ndarray, torque: np.ndarray) -> np.ndarray:
        """Torque and clearance constraints (each >= 0 when met) at grid states q, torque (G, n)."""
        parts = [self._torque_slack(torque)[0]] if self.torque_limited else []
        if self.clearance is not None:
            parts.append([self._clearance_slack(q)[0]])
        return np.concatenate(parts) if parts else np.zeros(0)

    # --- evaluation -----------------------------------------------------------------------

    def _point(self, x: np.ndarray) -> dict:
        key = x.tobytes()
        if self._cache[0] == key:
            return self._cache[1]
        if _time.monotonic() > self.deadline:
            raise multistart.OutOfTime
        q, dq, ddq = self._states(x[None], self.maps)
        matrices, torque = self._matrices(q, dq, ddq)
        value, grads = self._criterion([m[0] for m in matrices])
        cap_slack, cap_grad = self._cap([m[0] for m in matrices])
        u, du = self.usage(x)
        constraints, entry = [1.0 - u], {}
        if self.torque_limited:
            slack, entry["d_torque_slack"] = self._torque_slack(torque[0])
            constraints.append(slack)
        if self.clearance is not None:
            slack, entry["d_clearance_slack"] = self._clearance_slack(q[0])
            constraints.append([slack])
        limits = np.concatenate(constraints)
        # SLSQP sees the cap as one more constraint; feasibility (which points count) is the limits'
        constraints = limits if cap_grad is None else np.append(limits, cap_slack)
        merit = self._merit(value, cap_slack)
        entry.update(x=x.copy(), value=merit, criterion=value, grads=grads, cap_grad=cap_grad,
                     states=(q[0], dq[0], ddq[0]), matrices=[m[0] for m in matrices], torque=torque[0], du=du,
                     constraints=constraints, limits=limits)
        self._cache = (key, entry)
        self.evaluations += 1
        violation = -float(np.min(limits, initial=0.0))
        if np.isfinite(merit) and violation <= _FEASIBLE_TOL and merit < self.best[0]:
            self.best = (merit, x.copy())
        elif np.isfinite(merit) and violation <= NEAR_FEASIBLE and merit < self.near[0]:
            self.near = (merit, x.copy())
        return entry

    def _gradients(self, x: np.ndarray) -> dict:
        entry = self._point(x)
        if "grad" in entry:
            return entry
        q, dq, ddq = entry["states"]
        g, n = q.shape
        # each joint's position, velocity and acceleration stepped in turn: (3 n, G, n) states;
        # W is linear in ddq, so a unit step there is exact
        steps = np.concatenate([np.full((2 * n, g), _FD_STEP), np.ones((n, g))])          # (3n, G)
        batch = [np.repeat(a[None], 3 * n, axis=0) for a in (q, dq, ddq)]
        for kind in range(3):
            for j in range(n):
                batch[kind][kind * n + j, :, j] += steps[kind * n + j]
        matrices, torque = self._matrices(*batch)
        # directional derivative of the criterion along each step, per grid sample: (3n, G)
        along, along_cap = np.zeros((3 * n, g)), np.zeros((3 * n, g))
        for k, (mats, base, grad) in enumerate(zip(matrices, entry["matrices"], entry["grads"])):
            diff = mats.reshape(3 * n, g, -1) - base.reshape(g, -1)
            along += np.einsum("mgc,gc->mg", diff, grad.reshape(g, -1), optimize=False)
            if k == 0 and entry["cap_grad"] is not None:  # the cap is on the whole regressor W
                along_cap += np.einsum("mgc,gc->mg", diff, entry["cap_grad"].reshape(g, -1), optimize=False)
        along /= steps
        along_cap /= steps
        maps = self.maps

        def to_x(per_state):  # (3, n, G, ...) derivatives with respect to the states -> x
            return sum(np.einsum("jg...,gd->...jd", per_state[k], maps[k], optimize=False) for k in range(3))

        grad = to_x(along.reshape(3, n, g)).reshape(-1) if np.isfinite(entry["criterion"]) else np.zeros(self.dim)
        import scipy.linalg  # on first use, as in _null_basis
        blocks = [-scipy.linalg.block_diag(*entry["du"])]                       # usage: joint-local
        if self.torque_limited:
            d_torque = (torque - entry["torque"][None]) / steps[:, :, None]     # (3n, G, n)
            per_state = d_torque * entry["d_torque_slack"][None]                 # slack of joint l: (3n, G, l)
            blocks.append(to_x(per_state.reshape(3, n, g, n)).reshape(n, -1))
        if self.clearance is not None:
            d_q = entry["d_clearance_slack"]                                     # (G, n)
            blocks.append(np.einsum("gj,gd->jd", d_q, maps[0]).reshape(1, -1))
        if entry["cap_grad"] is not None:
            blocks.append(to_x(along_cap.reshape(3, n, g)).reshape(1, -1))
        entry["grad"], entry["jac"] = grad, np.concatenate(blocks)
        return entry

    def fun(self, x):
        """The criterion SLSQP minimises (the cap is its constraint, not a penalty here)."""
        value = self._point(x)["criterion"]
        return value if np.isfinite(value) else _SINGULAR_VALUE

    def jac(self, x):
        return self._gradients(x)["grad"]

    def constraints(self, x):
        return self._point(x)["constraints"]

    def constraints_jac(self, x):
        return self._gradients(x)["jac"]

    # --- starts and local search -------------------------------------------------------------

    def _feasible_on_grid(self, x: np.ndarray) -> bool:
        """Every constraint met on its grid (no criterion evaluated)."""
        if _time.monotonic() > self.deadline:
            raise multistart.OutOfTime
        if np.any(self.usage(x)[0] > 1.0):
            return False
        q, dq, ddq = (s[0] for s in self._states(x[None], self.maps))
        torque = self.robot.inverse_dynamics(q, dq, ddq)
        return bool(np.all(self._slacks(q, torque) >= 0))

    def _scaled_into_limits(self, x: np.ndarray) -> np.ndarray:
        """x scaled toward rest (bisection on a common factor in [0, 1]) until every constraint
        holds on the grid; x itself when it does."""
        if self._feasible_on_grid(x):
            return x
        low, high = 0.0, 1.0
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if self._feasible_on_grid(mid * x) else (low, mid)
        return low * x

    def start(self, gen: np.random.Generator, incumbent=None) -> np.ndarray:
        """A start within every limit on the grid: random coordinates with each joint's peak
        usage of its linear limits in START_USAGE, or the incumbent perturbed by WARM_SPREAD;
        then scaled toward rest (bisection on a common factor) until the torques and the
        clearance hold. Raises multistart.OutOfTime past the deadline."""
        if incumbent is None:
            dwell = self.terminal_cap and gen.uniform() < DWELL_SHARE
            coords = self._dwelling(gen) if dwell else gen.standard_normal((self.n, self.dim_joint))
            u, _ = self.usage(coords.reshape(-1))
            target = gen.uniform(*START_USAGE, self.n)
        else:
            base = np.asarray(incumbent, dtype=float).reshape(self.n, self.dim_joint)
            spread = np.sqrt(np.mean(base ** 2, axis=1, keepdims=True))
            coords = base + WARM_SPREAD * spread * gen.standard_normal(base.shape)
            u, _ = self.usage(coords.reshape(-1))
            target = np.minimum(u, 1.0)
        coords = coords * np.where(u > 0, target / np.where(u > 0, u, 1.0), 1.0)[:, None]
        return self._scaled_into_limits(coords.reshape(-1))

    def _dwelling(self, gen: np.random.Generator) -> np.ndarray:
        """Coordinates (n, d) of an out-and-back motion per joint: velocity pulses of opposite sign
        at random times (DWELL_WIDTH), least squares on the criterion grid."""
        vel_map = self.maps[1]
        phase = (np.arange(vel_map.shape[0]) + 0.5) / vel_map.shape[0]    # the grid, in periods
        width = DWELL_WIDTH / (np.pi * (self.dim_joint // 2 + 1))
        times = gen.uniform(0.0, 1.0, (2, self.n))
        offset = (phase[:, None, None] - times[None] + 0.5) % 1.0 - 0.5      # periodic distance (G, 2, n)
        targets = np.einsum("gkn,k->gn", np.exp(-0.5 * (offset / width) ** 2), np.array([1.0, -1.0]))
        return np.linalg.lstsq(vel_map, targets, rcond=None)[0].T

    def local_search(self, x0: np.ndarray, max_iterations: int, deadline: float):
        """SLSQP from x0 until it converges, ``max_iterations`` or the deadline (``_slsqp``: the
        criterion scaled to a first step of STEP_FRACTION of x's size). SLSQP approaches the
        constraints from outside; the best point within NEAR_FEASIBLE of them is scaled toward
        rest until it meets them on the grid.
        Returns (x0, its value (inf if infeasible), best feasible x or None, its value,
        iterations, evaluations, message)."""
        self.deadline, self.best, self.near, self.evaluations = deadline, (np.inf, None), (np.inf, None), 0
        counter = {"nit": 0}

        def count(_x):
            counter["nit"] += 1
        start_value, message = np.inf, "time limit"
        try:
            entry = self._point(x0)  # the start counts even if the budget ends in its first gradient
            if np.all(entry["limits"] >= -_FEASIBLE_TOL):
                start_value = entry["value"]
            x = x0  # phase one moves it; x0 stays the start the search reports
            if self.terminal_cap and entry["constraints"][-1] < 0:
                x = self._under_cap(x0, max_iterations // 2, count)
            result = self._slsqp(self.fun, self.jac, x, self.constraints, self.constraints_jac, max_iterations,
                                 count)
            message = str(result.message)
        except multistart.OutOfTime:
            pass
        self.deadline = np.inf  # the repair below is part of this search's result
        best_value, best_x = self.best
        if self.near[1] is not None and self.near[0] < best_value:
            repaired = self._scaled_into_limits(self.near[1])
            value = self._point(repaired)["value"]
            if value < best_value:
                best_value, best_x = value, repaired
        return x0, start_value, best_x, best_value, counter["nit"], self.evaluations, message

    def _slsqp(self, fun, jac, x0, constraints, constraints_jac, max_iterations: int, callback):
        """SLSQP minimising ``fun`` from x0 within constraints >= 0, the objective scaled so that the
        first step (a gradient step: SLSQP's first Hessian estimate is the identity) moves x by
        STEP_FRACTION of its size, not by the gradient's size in rad/s. Returns SciPy's result."""
        import scipy.optimize  # imported by design() already: a name here, not a load
        size = np.linalg.norm(jac(x0))
        factor = STEP_FRACTION * max(np.linalg.norm(x0), 1e-3) / size if size > 0 else 1.0
        return scipy.optimize.minimize(
            lambda x: factor * fun(x), x0, jac=lambda x: factor * jac(x), method="SLSQP", callback=callback,
            options={"maxiter": max_iterations, "ftol": 1e-6 * factor},
            constraints=[{"type": "ineq", "fun": constraints, "jac": constraints_jac}])

    def _under_cap(self, x0: np.ndarray, max_iterations: int, callback) -> np.ndarray:
        """Phase one of a local search that starts over the cap: SLSQP on the cap's bound alone,
        within the limits, until a point is under the cap or ``max_iterations``. Returns where it
        ended (every point it saw is ranked as usual)."""
        def excess(x):
            return -self._point(x)["constraints"][-1]

        def excess_grad(x):
            return -self._gradients(x)["jac"][-1]

        def stop(x):
            callback(x)
            if excess(x) <= 0:
                raise _UnderCap(np.array(x, dtype=float))
        try:
            return self._slsqp(excess, excess_grad, x0, lambda x: self._point(x)["limits"],
                               lambda x: self._gradients(x)["jac"][:-1], max_iterations, stop).x
        except _UnderCap as under:
            return under.args[0]


class _UnderCap(Exception):
    """Ends a local search's phase one at the first point under the cap."""


def _limit_usage(robot, trajectory, lower, upper, v_max, a_max, tau_max, clearance) -> tuple[dict, float | None]:
    """kind -> (n,) peak of value / limit over every sample (0 where unlimited), and the smallest
    distance between collision geoms (m; None without ``clearance``)."""
    finite = np.isfinite(upper - lower)
    centre = np.zeros_like(lower)
    centre[finite] = 0.5 * (upper[finite] + lower[finite])  # (inf + -inf of an unlimited joint is nan)
    half = 0.5 * (upper - lower)
    torque = robot.inverse_dynamics(trajectory.q, trajectory.dq, trajectory.ddq)
    peaks = {"position": (np.max(np.abs(trajectory.q - centre), axis=0), half),
             "velocity": (np.max(np.abs(trajectory.dq), axis=0), v_max),
             "acceleration": (np.max(np.abs(trajectory.ddq), axis=0), a_max),
             "torque": (np.max(np.abs(torque), axis=0), tau_max)}
    usage = {kind: np.where(np.isfinite(limit), peak / limit, 0.0) for kind, (peak, limit) in peaks.items()}
    # a one-sided position range: check each bound separately
    one_sided = ~np.isfinite(half) & (np.isfinite(lower) | np.isfinite(upper))
    if np.any(one_sided):
        beyond = np.maximum(np.max(trajectory.q - upper, axis=0), np.max(lower - trajectory.q, axis=0))
        usage["position"] = np.where(one_sided, np.where(beyond > 0, np.inf, 0.0), usage["position"])
    if clearance is None:
        return usage, None
    nearest = float(np.min(clearance.minimum(trajectory.q)))
    usage["clearance"] = np.array([clearance.clearance / nearest if nearest > 0 else np.inf])
    return usage, nearest


def optimize_excitation(robot: Robot, duration: float, sample_rate: float, *,
                        config: IdentificationConfig | None = None, criterion: str | None = None,
                        n_harmonics: int | None = None, base_frequency: float = 0.1, start=None,
                        position_margin: float = 0.05, max_velocity=2.0, max_acceleration=10.0,
                        torque_limits="model", torque_share: float = TORQUE_SHARE,
                        min_clearance: float | None = DEFAULT_CLEARANCE, weights=(1.0, 1.0, 1.0),
                        joint_noise_std=None, seed=None, time_limit_s: float = 60.0,
                        max_restarts: int | None = None, max_iterations: int = 100,
                        workers: int = 1, condition_cap="auto",
                        cap_fraction: float = CONDITION_CAP_FRACTION) -> ExcitationDesign:
    """Fourier excitation of ``duration`` s at ``sample_rate`` Hz that tells the most about the
    parameters ``config`` identifies.

    robot: the nominal model (its regressor, joint ranges, inverse dynamics, collision geoms).
    config: which parameters the excitation is for (scope, joint terms); default
    IdentificationConfig() (terminal scope, Coulomb and viscous friction).
    criterion: ``d_optimal`` (information about all base parameters), ``payload`` (about the
    terminal body's parameters, the joint terms as nuisance; terminal scope only), ``condition``
    (sigma_max / sigma_min of the base regressor with unit-norm columns) or ``weighted`` (Liu et
    al.'s sub-matrix criterion, with ``weights`` (w_a, w_v, w_g) >= 0); see ``criteria``. None:
    ``default_criterion(config)``. ``joint_noise_std`` (n,) N m, default all equal: each joint's
    torque noise, which weighs its rows.
    n_harmonics H >= 2, default DEFAULT_HARMONICS (8), TERMINAL_CAP_HARMONICS (16) in the terminal
    scope under a cap; base_frequency Hz: rounded to a whole number of periods in ``duration``
    (at least one), so the trajectory ends at rest where it starts. 8 harmonics of 0.1 Hz
    span 0.1-0.8 Hz, a little above the multisine's band; 16 reach 1.6 Hz.
    start: (n,) rad, the rest pose at both ends; default the centre of each joint's range (one
    unit inside a one-sided limit, 0 for unlimited joints). It must lie strictly inside the
    range less ``position_margin`` (rad, kept from each finite limit).
    max_velocity rad/s, max_acceleration rad/s^2: scalars or (n,), None for no limit.
    torque_limits: (n,) N m (inf for none), None for none, or ``"model"``: the actuator limits
    of the MJCF (``actuator_torque_limits``), none if it has none; the nominal torques (rigid
    bodies, armature, damping, Coulomb friction) may use ``torque_share`` of them.
    min_clearance: m, kept between every pair of geoms MuJoCo would collide (when the model has
    collision geometry; pairs already nearer at the start pose are refused); None: not checked.
    seed: for the starting points; with the same seed and a search that ends before
    ``time_limit_s`` (``max_restarts`` reached) the result is identical, on one process or two.
    time_limit_s: wall-clock budget of the search, s (model analysis and the cap's multisines
    before it and the final checks after it come on top, and one start when the budget ends
    before any is scored); max_restarts: number of local searches (default: as many as
    fit in time); max_iterations: SLSQP iterations per local search. workers: 1, or 2 to run
    every other local search in a helper process (``multistart.search_workers`` says when that
    pays); the helper is started by multiprocessing's spawn, which imports the calling script's
    main module: call from under ``if __name__ == "__main__":``, as multiprocessing asks.
    condition_cap: the largest condition number of the base regressor with unit-norm columns
    (what the identification reports) the design may have, held as a constraint on a smooth
    bound of it (``criteria.log_condition_bound``) and, where no search meets it, a penalty
    in the value that ranks the designs: a number > 1, ``"multisine"`` (``cap_fraction``, default
    CONDITION_CAP_FRACTION, times the median of CAP_MULTISINE_SEEDS of the CLI's multisines of the
    same duration, rate, speed cap and torque limits, ``multisine_condition``), None (no cap), or
    ``"auto"``: ``"multisine"`` for the criteria of CAPPED_CRITERIA (``d_optimal``, ``payload``),
    None for the others.
    Returns an ExcitationDesign. Raises ValueError for bad arguments, including a start pose
    whose gravity torque already exceeds the torque limits or whose geoms are nearer than
    ``min_clearance``.
    """
    import scipy.optimize  # here: SciPy's optimize costs a quarter second to import, and only this needs it
    started = _time.perf_counter()
    config = IdentificationConfig() if config is None else config
    criterion = default_criterion(config) if criterion is None else criterion
    if criterion not in CRITERIA:
        raise ValueError(f"unknown criterion '{criterion}'; choose one of {CRITERIA}")
    if criterion == "payload" and config.scope != "terminal":
        raise ValueError("the payload criterion designs for the terminal body's parameters: it needs the terminal "
                         "scope (use d_optimal or condition for the full scope)")
    if not np.isfinite(duration) or duration <= 0:
        raise ValueError(f"duration must be a finite number of seconds > 0, got {duration}")
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a finite number of Hz > 0, got {sample_rate}")
    if isinstance(condition_cap, str) and condition_cap == "auto":
        condition_cap = "multisine" if criterion in CAPPED_CRITERIA else None
    if n_harmonics is None:
        n_harmonics = (TERMINAL_CAP_HARMONICS if config.scope == "terminal" and condition_cap is not None
                       else DEFAULT_HARMONICS)
    if int(n_harmonics) != n_harmonics or n_harmonics < 2:
        raise ValueError(f"n_harmonics must be an integer >= 2, got {n_harmonics}")
    n_harmonics = int(n_harmonics)
    if not np.isfinite(base_frequency) or base_frequency <= 0:
        raise ValueError(f"base_frequency must be a finite number of Hz > 0, got {base_frequency}")
    periods = max(1, int(round(duration * base_frequency)))
    base_frequency = periods / duration
    if n_harmonics * base_frequency >= sample_rate / 2:
        raise ValueError(f"the highest harmonic {n_harmonics * base_frequency:g} Hz must be below the "
                         f"Nyquist frequency {sample_rate / 2:g} Hz")
    if not (time_limit_s > 0):
        raise ValueError(f"time_limit_s must be > 0, got {time_limit_s}")
    if not np.isfinite(time_limit_s) and max_restarts is None:
        raise ValueError("give a finite time_limit_s or max_restarts: the search would never end")
    if max_restarts is not None and max_restarts < 1:
        raise ValueError(f"max_restarts must be >= 1, got {max_restarts}")
    if workers not in (1, 2):
        raise ValueError(f"workers must be 1 or 2, got {workers}")
    if not 0 < torque_share <= 1:
        raise ValueError(f"torque_share must be in (0, 1], got {torque_share}")
    if not (np.isfinite(cap_fraction) and cap_fraction > 0):
        raise ValueError(f"cap_fraction must be a finite number > 0, got {cap_fraction}")
    if not np.isfinite(position_margin) or position_margin < 0:
        raise ValueError(f"position_margin must be >= 0 rad, got {position_margin}")
    n = robot.n_joints
    rng = _validate_range(robot.joint_range)
    lower, upper = rng[:, 0] + position_margin, rng[:, 1] - position_margin
    narrow = np.flatnonzero(~(lower < upper))
    if narrow.size:
        raise ValueError(f"position_margin {position_margin} rad leaves no range for joints "
                         f"{[robot.joint_names[j] for j in narrow]}")
    if start is None:
        start, _ = _center_and_half_range(rng, None)
    start = np.asarray(start, dtype=float)
    if start.shape != (n,) or not np.all(np.isfinite(start)):
        raise ValueError(f"start must be {n} finite joint positions (rad), got shape {start.shape}")
    outside = np.flatnonzero(~((start > lower) & (start < upper)))
    if outside.size:
        raise ValueError(f"start lies outside the joint range less the {position_margin} rad margin for joints "
                         f"{[robot.joint_names[j] for j in outside]}")
    v_max = _limit_array(max_velocity, n, "max_velocity", "rad/s")
    a_max = _limit_array(max_acceleration, n, "max_acceleration", "rad/s^2")
    if isinstance(torque_limits, str):
        if torque_limits != "model":
            raise ValueError(f"torque_limits must be (n,) N m, None or 'model', got '{torque_limits}'")
        torque_limits = actuator_torque_limits(robot)
    tau_max = np.full(n, np.inf) if torque_limits is None else np.asarray(torque_limits, dtype=float)
    if tau_max.shape != (n,) or np.any(np.isnan(tau_max)) or np.any(tau_max <= 0):
        raise ValueError(f"torque_limits must be {n} values > 0 N m (inf for none), got {tau_max.tolist()}")
    tau_design = tau_max * torque_share
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (3,) or np.any(~np.isfinite(weights)) or np.any(weights < 0) or not np.any(weights > 0):
        raise ValueError(f"weights must be 3 finite values >= 0, not all zero, got {weights.tolist()}")
    noise_std = np.ones(n) if joint_noise_std is None else np.asarray(joint_noise_std, dtype=float)
    if noise_std.shape != (n,) or np.any(~np.isfinite(noise_std)) or np.any(noise_std <= 0):
        raise ValueError(f"joint_noise_std must be {n} finite values > 0 N m")
    zero = np.zeros((1, n))
    static = np.abs(robot.inverse_dynamics(start[None], zero, zero)[0])
    over = np.flatnonzero(static > tau_design)
    if over.size:
        raise ValueError(f"the gravity torque at the start pose already exceeds {torque_share:.0%} of the torque "
                         f"limits of joints {[robot.joint_names[j] for j in over]}: "
                         f"{static[over].round(3).tolist()} N m")
    clearance = None
    if min_clearance is not None:
        clearance = Clearance(robot.model, min_clearance)
        clearance = clearance if clearance.active else None
    if clearance is not None:
        near = [(d, g1, g2) for d, g1, g2 in clearance.pairs(start) if d < min_clearance]
        if near:
            dist, g1, g2 = min(near)
            raise ValueError(f"at the start pose geoms {_geom_name(robot.model, g1)} and {_geom_name(robot.model, g2)} "
                             f"are {dist * 1000:.1f} mm apart, nearer than min_clearance "
                             f"{min_clearance * 1000:g} mm: pass another start or min_clearance=None")

    reference = None
    if isinstance(condition_cap, str):
        if condition_cap != "multisine":
            raise ValueError(f"condition_cap must be a number > 1, 'multisine', 'auto' or None, "
                             f"got '{condition_cap}'")
        reference = multisine_condition(robot, duration, min(sample_rate, CAP_REFERENCE_RATE), config,
                                        max_velocity=v_max, torque_limits=tau_max, torque_share=torque_share)
        condition_cap = cap_fraction * reference
    if condition_cap is not None:
        condition_cap = float(condition_cap)
        if not condition_cap > 1:  # also refuses nan; inf is no cap
            raise ValueError(f"condition_cap must be > 1 (a condition number), got {condition_cap}")
        condition_cap = condition_cap if np.isfinite(condition_cap) else None

    problem = _Problem(robot, config, criterion, weights, noise_std, n_harmonics, base_frequency, start,
                       lower, upper, v_max, a_max, tau_design, clearance, condition_cap)
    deadline = _time.monotonic() + time_limit_s
    results = multistart.run(problem, seed, deadline, max_restarts, max_iterations, workers)
    problem.deadline = np.inf

    # finalists: the best points on the grid and the best start, checked and scored on every sample
    total = periods / base_frequency
    candidates = sorted([(r.best_value, r.index, r.best_x) for r in results if r.best_x is not None] +
                        [(r.start_value, r.index, r.start_x) for r in results if np.isfinite(r.start_value)],
                        key=lambda c: (c[0], c[1]))
    starts = sorted([(r.start_value, r.index, r.start_x) for r in results if np.isfinite(r.start_value)],
                    key=lambda c: (c[0], c[1]))
    finalists = candidates[:FINALISTS] + [s for s in starts[:1] if not any(s is c for c in candidates[:FINALISTS])]
    if not finalists:  # the budget ended before any start was scored: one start on top of it, not rest
        x0 = problem.start(np.random.default_rng(seed))
        finalists = [(problem._point(x0)["value"], -1, x0)]

    def finish(x):
        free = x.reshape(n, -1)
        for _ in range(_MAX_SHRINK_STEPS):
            series = rest_to_rest_series(free, start, base_frequency)
            trajectory = _exact_ends(series.trajectory(total, sample_rate), start)
            usage, nearest = _limit_usage(robot, trajectory, lower, upper, v_max, a_max, tau_design, clearance)
            worst = max(float(np.max(u)) for u in usage.values())
            if worst <= 1.0:
                break
            free = free * min(0.995, 1.0 / worst)
        return series, trajectory, usage, nearest, worst <= 1.0, problem.score(trajectory)

    finished = [finish(x) for _, _, x in finalists]
    scores = [(not f[4], f[5] if np.isfinite(f[5]) else np.inf, k) for k, f in enumerate(finished)]
    series, trajectory, usage, nearest, limits_met, value = finished[min(scores)[2]]
    start_scores = [f[5] for f, c in zip(finished, finalists) if starts and c is starts[0]]
    cond, cond_scaled = regressor_condition(robot, trajectory, config)
    return ExcitationDesign(
        trajectory=trajectory, series=series, criterion=criterion, criterion_value=value,
        initial_criterion_value=start_scores[0] if start_scores else np.inf, condition_number=cond,
        condition_number_scaled=cond_scaled, iterations=sum(r.iterations for r in results), restarts=len(results),
        elapsed_s=_time.perf_counter() - started, limits_met=limits_met, limit_usage=usage,
        evaluations=sum(r.evaluations for r in results), workers=workers, min_clearance=nearest,
        condition_cap=condition_cap, reference_condition=reference)


def multisine_condition(robot: Robot, duration: float, sample_rate: float, config: IdentificationConfig,
                        max_velocity=2.0, torque_limits=None, torque_share: float = TORQUE_SHARE,
                        seeds: int = CAP_MULTISINE_SEEDS) -> float:
    """Median condition number (unit-norm columns) of the base regressor of ``config`` along the
    CLI's multisines of seeds 0..seeds-1: ``duration`` s at ``sample_rate`` Hz, capped at the
    slowest of ``max_velocity`` (rad/s, scalar or (n,); None or inf: 2 rad/s) and slowed until
    the nominal torques fit ``torque_share`` of ``torque_limits`` (n,) N m (inf or None: none)."""
    speeds = np.atleast_1d(np.asarray(2.0 if max_velocity is None else max_velocity, dtype=float))
    speed = float(np.min(speeds)) if np.all(np.isfinite(speeds)) else 2.0
    limits = None if torque_limits is None else np.asarray(torque_limits, dtype=float)
    if limits is not None and not np.any(np.isfinite(limits)):
        limits = None
    base = structural_base_parameters(robot, config)
    values = []
    for seed in range(seeds):
        def make(v, seed=seed):
            return multisine(robot.joint_range, duration, sample_rate, seed=seed, max_velocity=v)
        if limits is None:
            plan = make(speed)
        else:
            plan, _, _ = slow_to_torque_limits(make, robot, speed, torque_limits=limits, usage=torque_share)
        values.append(regressor_condition(robot, plan, config, base=base)[1])
    return float(np.median(values))


def _geom_name(model: mujoco.MjModel, geom: int) -> str:
    name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom)
    body = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, model.geom_bodyid[geom])
    return f"'{name}'" if name else f"#{geom} of body '{body}'"


def _exact_ends(trajectory: Trajectory, start: np.ndarray) -> Trajectory:
    """The series meets the rest conditions up to rounding; make the first and last samples exact."""
    q, dq, ddq = trajectory.q.copy(), trajectory.dq.copy(), trajectory.ddq.copy()
    q[[0, -1]] = start
    dq[[0, -1]] = 0.0
    ddq[[0, -1]] = 0.0
    return Trajectory(trajectory.time, q, dq, ddq)
