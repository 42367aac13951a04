"""Optimized excitation: a finite Fourier series per joint shaped for a well-conditioned regressor.

Swevers et al. (1997) parametrise each joint's motion as a finite Fourier series with a
common base frequency f (omega = 2 pi f) and H harmonics:

    q_j(t)   = q0_j + sum_l [ a_jl / (omega l) sin(omega l t) - b_jl / (omega l) cos(omega l t) ]
    dq_j(t)  = sum_l [ a_jl cos(omega l t) + b_jl sin(omega l t) ]
    ddq_j(t) = sum_l [ -a_jl omega l sin(omega l t) + b_jl omega l cos(omega l t) ]

The motion is periodic, so a recording of whole periods can be averaged and every period
excites the same way. Rest at both ends (Liu et al., Actuators 2023, 12(12), 454) asks
sum_l a_jl = 0 (dq = 0), sum_l l b_jl = 0 (ddq = 0) and q0_j = q_start_j + sum_l b_jl / (omega l)
(q = q_start); periodicity gives the same at the end of every whole period. Here the two
linear conditions are built in: the optimizer moves free coordinates in their null space
(2 (H - 1) per joint), so every candidate is at rest at ``q_start`` by construction and only
the inequality limits remain as constraints.

The optimizer (SLSQP from random starts until the wall-clock budget is spent) minimises the
log of the condition number of the base regressor (the independent columns an identification
with the same IdentificationConfig estimates, friction included) on a grid of one period, or
the weighted sub-matrix criterion of Liu et al.:

    co = (w_a + w_v + w_g) cond(W*) + w_a cond(W*_a) + w_v cond(W*_v) + w_g cond(W*_g)

with W* = Omega^(1/2) W the regressor with joint j's rows divided by its torque noise standard
deviation, and W*_a, W*_v, W*_g its parts driven by acceleration (inertia, armature), velocity
(Coriolis and centrifugal, friction) and position alone (gravity, offset): W(q, 0, ddq) - W(q, 0, 0),
W(q, dq, 0) - W(q, 0, 0) and W(q, 0, 0), which add up to W(q, dq, ddq) exactly. A sub-matrix is
rank deficient by nature (gravity sees no inertia tensor), so its condition number is taken
over its own structural rank: sigma_1 / sigma_r.

Gradients: the regressor at all forward-difference perturbations comes from one vectorised
batch, and the derivative of a singular value is u' dW v (first-order perturbation), so no
decomposition per perturbation is needed.

Limits. Position (the range less a margin), velocity and acceleration are linear in the
coefficients: the optimizer moves coordinates y that a smooth map x_j = y_j (1 + u_j^k)^(-1/k)
turns into coefficients whose peak usage u_j (a p-norm of value / limit over a dense grid of
one period, at least the maximum) is below 1, so these limits hold at every step. The joint
torques of the nominal model (inverse dynamics: rigid bodies, armature, damping, Coulomb) on
the criterion grid are the only explicit constraints, one smooth maximum per joint. Every
limit is checked again on every sample of the returned trajectory, and a result that crosses
one between grid points is shrunk toward the rest pose until it does not.
"""
from __future__ import annotations

import time as _time
from dataclasses import dataclass

import mujoco
import numpy as np
import scipy.linalg

from ..dynamics.model import Robot
from ..identification.identify import (IdentificationConfig, base_regressor, column_names, model_parameter_vector,
                                       structural_base_parameters)
from .multisine import _center_and_half_range, _limit_array, _validate_range
from .trajectory import Trajectory

CRITERIA = ("condition", "scaled_condition", "weighted")
# Criterion grid: samples of one period per cycle of the highest harmonic. The condition
# number converges quickly with the sampling of a smooth periodic signal; 24 is within a few
# percent of the densely sampled value at a fraction of the cost.
SAMPLES_PER_CYCLE = 24
# Grid of the (cheap, linear) position, velocity and acceleration constraints, same unit.
CONSTRAINT_SAMPLES_PER_CYCLE = 200
# Share of the torque limits the search may use: the rest absorbs peaks between the points of
# its (coarse) grid, so the final dense check rarely has to shrink the result.
SEARCH_TORQUE_FRACTION = 0.98
# Sharpness of the smooth max that turns a torque limit on every grid sample into one smooth
# constraint per joint (Kreisselmeier-Steinhauser); it overestimates the peak usage by
# log(samples near the peak) / KS_SHARPNESS, about 2 % here.
KS_SHARPNESS = 100.0
# Order of the p-norm that measures a joint's smooth peak usage of its position, velocity and
# acceleration limits (it exceeds the maximum by a factor (samples near the peak)^(1/p), a
# few percent), and sharpness k of the squashing y (1 + u^k)^(-1/k) that keeps it below 1.
USAGE_NORM = 200.0
SQUASH_SHARPNESS = 12.0
# Forward-difference step on the free coordinates (relative, rad/s): small enough that a Coulomb
# sign rarely flips within it, large enough against the round-off of u' M v.
_FD_STEP = 1e-6
_FEASIBLE_TOL = 1e-6
_RANK_TOL = 1e-9
_MAX_SHRINK_STEPS = 60


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
    is the sum over the actuators driving it of |gear| times the smaller bound magnitude of
    forcerange (when force-limited) or, for a plain motor, of |gain| times
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



# A plan's nominal torques may use this fraction of the actuators' limits: the rest is for what
# the nominal model does not know (a payload) and for the tracking controller's corrections.
TORQUE_USAGE = 0.8
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
    (coefficients). ``criterion`` and ``criterion_value``: what was minimised, on the search
    grid; ``initial_criterion_value``: the best of the random starting points. Condition
    numbers of the base regressor on the returned trajectory: ``condition_number`` and
    ``condition_number_scaled`` (unit-norm columns). ``iterations`` SLSQP iterations over all
    ``restarts``; ``elapsed_s`` wall time. ``limits_met``: every sample of ``trajectory``
    within all limits; ``limit_usage`` kind -> (n,) peak over the samples of value / limit
    (position: |q - centre| / half-width of the range less the margin), <= 1 within limits,
    0 where a joint has no such limit.
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


def regressor_condition(robot: Robot, trajectory: Trajectory, config: IdentificationConfig | None = None,
                        max_samples: int = 2000) -> tuple[float, float]:
    """Condition number of the base regressor along ``trajectory``: (raw, unit-norm columns).

    The independent columns of ``config`` (default IdentificationConfig(): terminal scope with
    Coulomb and viscous friction) on at most ``max_samples`` samples taken at a uniform stride
    (the condition number of a smooth trajectory barely changes with denser sampling).
    """
    config = IdentificationConfig() if config is None else config
    if max_samples < 2:
        raise ValueError(f"max_samples must be >= 2, got {max_samples}")
    num = np.shape(trajectory.q)[0]
    stride = max(1, int(np.ceil(num / max_samples)))
    q, dq, ddq = (np.asarray(a, dtype=float)[::stride] for a in (trajectory.q, trajectory.dq, trajectory.ddq))
    columns, _ = base_regressor(robot, config, q, dq, ddq)
    raw, scaled = _condition_numbers(columns.reshape(1, -1, columns.shape[-1]))
    return float(raw[0]), float(scaled[0])


def _extreme_triplets(matrix: np.ndarray, rank: int | None):
    """(u, sigma, v) of the largest and of the rank-th singular value of ``matrix`` (rows, r).

    From the eigenvectors of the small Gram matrix: far cheaper than an SVD of the tall matrix,
    and accurate to about
    eps * cond^2 relative, plenty for the search (the results are reported with an SVD).
    """
    matrix = np.ascontiguousarray(matrix)
    cols = matrix.shape[-1]
    rank = cols if rank is None else rank
    # einsum, not BLAS: a threaded BLAS call waits for its threads to be scheduled, which on
    # a busy machine costs more than the product itself at these sizes
    eig, vec = np.linalg.eigh(np.einsum("ij,ik->jk", matrix, matrix))      # ascending
    out = []
    for k in (cols - 1, cols - rank):
        sigma = float(np.sqrt(max(eig[k], 0.0)))
        u = np.einsum("ij,j->i", matrix, vec[:, k]) / sigma if sigma > 0 else np.zeros(matrix.shape[0])
        out.append((u, sigma, vec[:, k]))
    return out[0], out[1]


class _OutOfTime(Exception):
    pass


class _Problem:
    """The search problem. The optimizer moves unconstrained coordinates y (n * 2 (H - 1),);
    ``squash`` maps them to free coordinates x (rad/s) that keep position, velocity and
    acceleration within their limits on a dense grid, so only the torque limits (nonlinear)
    remain as constraints. Caches the last point and tracks the best feasible one."""

    def __init__(self, robot, config, criterion, weights, noise_std, harmonics, base_frequency, start,
                 lower, upper, v_max, a_max, tau_max, deadline):
        self.robot, self.config, self.criterion = robot, config, criterion
        self.n, self.dim_joint = robot.n_joints, 2 * (harmonics - 1)
        self.dim = self.n * self.dim_joint
        self.start = start
        self.room_up, self.room_down = upper - start, start - lower      # rad, inf where unlimited
        self.deadline = deadline
        period = 1.0 / base_frequency
        # criterion grid offset by half a step: the rest samples (dq = 0 exactly, where a
        # Coulomb sign flips on round-off) are not on it; periodicity makes one period enough
        g = SAMPLES_PER_CYCLE * harmonics
        self.maps = _linear_maps(harmonics, base_frequency, (np.arange(g) + 0.5) * period / g)
        gc = CONSTRAINT_SAMPLES_PER_CYCLE * harmonics
        self.dense = _linear_maps(harmonics, base_frequency, np.arange(gc) * period / gc)
        self.base = structural_base_parameters(robot, config)
        self.beta_nominal = self.base.projection @ model_parameter_vector(robot, column_names(robot, config))
        self.row_weight = 1.0 / noise_std                                  # Omega^(1/2), per joint
        self.weights = weights
        self.v_lim, self.a_lim = v_max, a_max
        self.t_lim = tau_max * SEARCH_TORQUE_FRACTION
        self.torque_limited = bool(np.any(np.isfinite(tau_max)))
        self.part_ranks = self._part_ranks() if criterion == "weighted" else None
        self._cache = {}
        self.best = None       # (log criterion, y) of the best feasible point evaluated
        self.least_bad = None  # (torque violation, y) while none is feasible

    # --- states ---------------------------------------------------------------------------

    def _states(self, xs: np.ndarray, maps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, dq, ddq (m, G, n) of a batch xs (m, dim) on the grid of ``maps``."""
        coords = xs.reshape(xs.shape[0], self.n, self.dim_joint)
        dev, vel, acc = (np.einsum("gk,mjk->mgj", mat, coords) for mat in maps)
        return self.start + dev, vel, acc

    def usage(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Smooth peak usage (n,) of each joint's position, velocity and acceleration limits
        on the dense grid, and its gradient (n, d) with respect to the joint's coordinates.

        The p-norm over samples and kinds of value / limit: at least the largest, positively
        homogeneous of degree 1 in the joint's coordinates, smooth.
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

    def squash(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x = y_j (1 + u_j^k)^(-1/k) per joint with u_j its usage: the usage of x is below 1.
        Returns x (dim,) and the Jacobian blocks (n, d, d) of x_j with respect to y_j."""
        u, du = self.usage(y)
        k = SQUASH_SHARPNESS
        with np.errstate(over="ignore"):
            uk = u ** k
            phi = np.where(np.isfinite(uk), (1.0 + uk) ** (-1.0 / k), 1.0 / np.where(u > 0, u, 1.0))
            dphi = np.where(np.isfinite(uk), -u ** (k - 1) * (1.0 + uk) ** (-1.0 / k - 1.0), -1.0 / np.where(u > 0, u, 1.0) ** 2)
        coords = y.reshape(self.n, self.dim_joint)
        x = (coords * phi[:, None]).reshape(-1)
        jac = phi[:, None, None] * np.eye(self.dim_joint) + dphi[:, None, None] * coords[:, :, None] * du[:, None, :]
        return x, jac

    def _part_ranks(self) -> tuple[int, int, int]:
        """Structural ranks of the acceleration, velocity and gravity parts, on random states."""
        gen = np.random.default_rng(self.config.seed)
        lo = np.where(np.isfinite(self.room_down), self.start - self.room_down, -np.pi)
        hi = np.where(np.isfinite(self.room_up), self.start + self.room_up, np.pi)
        count = max(200, 4 * self.base.rank)
        q = gen.uniform(lo, hi, (1, count, self.n))
        parts, _ = self._parts(q, gen.uniform(-2, 2, q.shape), gen.uniform(-5, 5, q.shape))
        ranks = []
        for part in parts:
            mat = part[0]
            norms = np.linalg.norm(mat, axis=0)
            s = np.linalg.svd(mat[:, norms > 0] / norms[norms > 0], compute_uv=False)
            ranks.append(int(np.sum(s > _RANK_TOL * s[0])) if s.size and s[0] > 0 else 0)
        return tuple(ranks)

    def _parts(self, q, dq, ddq):
        """Acceleration, velocity and gravity parts (m, G n, r) of the base regressor, unweighted,
        and the torque of everything known (m, G, n), from one batched regressor call."""
        m, g, n = q.shape
        zero = np.zeros_like(q)
        stacked = [np.concatenate(a, axis=0).reshape(-1, n) for a in ((q, q, q), (zero, dq, zero), (zero, zero, ddq))]
        cols, known = base_regressor(self.robot, self.config, *stacked, base=self.base)
        gravity, velocity, acceleration = (c.reshape(m, g * n, -1) for c in np.split(cols, 3, axis=0))
        k_gravity, k_velocity, k_acceleration = (k.reshape(m, g, n) for k in np.split(known, 3, axis=0))
        return (acceleration - gravity, velocity - gravity, gravity), k_acceleration + k_velocity - k_gravity

    # --- evaluation ---------------------------------------------------------------------------

    def _batch(self, xs: np.ndarray) -> tuple[list, np.ndarray]:
        """Criterion terms and the nominal joint torques (m, G, n) N m of a batch xs (m, dim).

        Terms: (weight, rank, matrices (m, rows, r)); the criterion is the sum of weight times
        sigma_1 / sigma_rank of each term's matrix (rank None: all columns).
        """
        if _time.perf_counter() > self.deadline:
            raise _OutOfTime
        q, dq, ddq = self._states(xs, self.maps)
        m, g, n = q.shape
        if self.criterion == "weighted":
            parts, known = self._parts(q, dq, ddq)
            columns = parts[0] + parts[1] + parts[2]
            torque = (columns @ self.beta_nominal).reshape(m, g, n) + known
            # Omega^(1/2) W: each joint's rows divided by its noise standard deviation
            rows = self.row_weight[np.tile(np.arange(n), g)][None, :, None]
            terms = [(float(np.sum(self.weights)), None, columns * rows)]
            terms += [(w, rank, part * rows) for w, part, rank in zip(self.weights, parts, self.part_ranks)
                      if w > 0 and rank > 0]
        else:
            cols, known = base_regressor(self.robot, self.config, q.reshape(-1, n), dq.reshape(-1, n),
                                         ddq.reshape(-1, n), base=self.base)
            torque = (cols @ self.beta_nominal + known).reshape(m, g, n)
            cols = cols.reshape(m, g * n, -1)
            if self.criterion == "scaled_condition":
                norms = np.linalg.norm(cols, axis=1, keepdims=True)
                cols = cols / np.where(norms > 0, norms, 1.0)
            terms = [(1.0, None, cols)]
        return terms, torque

    def _torque_slack(self, torque: np.ndarray):
        """Kreisselmeier-Steinhauser aggregate of 1 - |torque| / limit over the grid, per joint.

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

    def _point(self, y: np.ndarray) -> dict:
        key = y.tobytes()
        entry = self._cache.get(key)
        if entry is None:
            x, squash_jac = self.squash(y)
            terms, torque = self._batch(x[None])
            # singular triplets of the extremes: the gradient needs them (first-order perturbation)
            triplets, total = [], 0.0
            for weight, rank, mats in terms:
                top, bottom = _extreme_triplets(mats[0], rank)
                cond = top[1] / bottom[1] if bottom[1] > 0 else np.inf
                triplets.append((weight, cond, top, bottom))
                total += weight * cond
            slack, slack_torque = self._torque_slack(torque[0])
            value = float(np.log(total)) if np.isfinite(total) else 1e3  # rank lost: far worse than any
            entry = {"x": x, "squash_jac": squash_jac, "value": value, "total": total, "triplets": triplets,
                     "torque": torque[0], "slack": slack, "slack_torque": slack_torque}
            self._cache = {key: entry}
            violation = float(np.sum(np.maximum(-slack, 0.0)))
            if violation <= _FEASIBLE_TOL:
                if self.best is None or value < self.best[0]:
                    self.best = (value, y.copy())
            elif self.best is None and (self.least_bad is None or violation < self.least_bad[0]):
                self.least_bad = (violation, y.copy())
        return entry

    def _to_y(self, entry: dict, grad_x: np.ndarray) -> np.ndarray:
        """Chain rule through ``squash``: (..., dim) in x to (..., dim) in y."""
        blocks = grad_x.reshape(grad_x.shape[:-1] + (self.n, self.dim_joint))
        return np.einsum("...ji,jik->...jk", blocks, entry["squash_jac"]).reshape(grad_x.shape)

    def _gradients(self, y: np.ndarray) -> dict:
        entry = self._point(y)
        if "grad" not in entry:
            # forward differences of the matrices (not of the condition numbers: a singular value
            # of a perturbed matrix is u' M v to first order, with the base point's vectors, so no
            # SVD per perturbation), all perturbations in one vectorised regressor batch
            x = entry["x"]
            step = _FD_STEP * (1.0 + np.abs(x))
            terms, torque = self._batch(x[None] + np.diag(step))
            grad = np.zeros(self.dim)
            if np.isfinite(entry["total"]):
                for (weight, _, mats), (_, cond, top, bottom) in zip(terms, entry["triplets"]):
                    d_top = (np.einsum("kij,i,j->k", mats, top[0], top[2], optimize=False) - top[1]) / step
                    d_bottom = (np.einsum("kij,i,j->k", mats, bottom[0], bottom[2], optimize=False)
                                - bottom[1]) / step
                    grad += weight * cond * (d_top / top[1] - d_bottom / bottom[1])
                grad /= entry["total"]
            entry["grad"] = self._to_y(entry, grad)
            d_torque = (torque - entry["torque"]) / step[:, None, None]                    # (dim, G, n)
            entry["slack_jac"] = self._to_y(entry, np.einsum("kgj,gj->jk", d_torque, entry["slack_torque"]))
        return entry

    def fun(self, y):
        return self._point(y)["value"]

    def criterion_of(self, y: np.ndarray) -> float:
        """The criterion (not its log; inf when a rank is lost) at coordinates y (dim,)."""
        return self._point(y)["total"]

    def criterion_at(self, x: np.ndarray) -> float:
        """The criterion (not its log) at free coordinates x (dim,)."""
        terms, _ = self._batch(x[None])
        total = 0.0
        for weight, rank, mats in terms:
            sing = np.linalg.svd(mats[0], compute_uv=False)
            last = (mats.shape[-1] if rank is None else rank) - 1
            total += weight * (sing[0] / sing[last] if sing[last] > 0 else np.inf)
        return float(total)

    def jac(self, y):
        return self._gradients(y)["grad"]

    def slack(self, y):
        return self._point(y)["slack"]

    def slack_jac(self, y):
        return self._gradients(y)["slack_jac"]

    # --- starting points ----------------------------------------------------------------------

    def random_start(self, gen: np.random.Generator) -> np.ndarray:
        """Random coordinates, each joint scaled to a usage of 0.5-1.5 (squashed: 0.5-0.9)."""
        y = gen.standard_normal(self.dim)
        u, _ = self.usage(y)
        target = gen.uniform(0.5, 1.5, self.n)
        scale = np.where(u > 0, target / np.where(u > 0, u, 1.0), 1.0)
        return (y.reshape(self.n, -1) * scale[:, None]).reshape(-1)


def _limit_usage(robot, trajectory, lower, upper, v_max, a_max, tau_max) -> dict:
    """kind -> (n,) peak of value / limit over every sample (0 where unlimited)."""
    centre = np.where(np.isfinite(upper - lower), 0.5 * (upper + lower), 0.0)
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
    return usage


def optimize_excitation(robot: Robot, duration: float, sample_rate: float, *,
                        config: IdentificationConfig | None = None, criterion: str = "condition",
                        n_harmonics: int = 8, base_frequency: float = 0.1, start=None,
                        position_margin: float = 0.05, max_velocity=2.0, max_acceleration=10.0,
                        torque_limits="model", weights=(1.0, 1.0, 1.0), joint_noise_std=None,
                        seed=None, time_limit_s: float = 60.0, max_restarts: int | None = None,
                        max_iterations: int = 100) -> ExcitationDesign:
    """Fourier excitation of ``duration`` s at ``sample_rate`` Hz with a well-conditioned regressor.

    robot: the nominal model (its regressor, joint ranges and inverse dynamics).
    config: which parameters the excitation is for (scope, joint terms); default
    IdentificationConfig() (terminal scope, Coulomb and viscous friction).
    criterion: ``condition`` (sigma_max / sigma_min of the base regressor), ``scaled_condition``
    (the same with unit-norm columns) or ``weighted`` (Liu et al.'s sub-matrix criterion, with
    ``weights`` (w_a, w_v, w_g) >= 0 and ``joint_noise_std`` (n,) N m, default all 1).
    n_harmonics H >= 2; base_frequency Hz: rounded to a whole number of periods in ``duration``
    (at least one), so the trajectory ends at rest where it starts. The defaults (8 harmonics
    of 0.1 Hz) span 0.1-0.8 Hz, a little above the multisine's band.
    start: (n,) rad, the rest pose at both ends; default the centre of each joint's range (one
    unit inside a one-sided limit, 0 for unlimited joints). It must lie strictly inside the
    range less ``position_margin`` (rad, kept from each finite limit).
    max_velocity rad/s, max_acceleration rad/s^2: scalars or (n,), None for no limit.
    torque_limits: (n,) N m (inf for none), None for none, or ``"model"``: the actuator limits
    of the MJCF (``actuator_torque_limits``), none if it has none. Torques are the nominal
    model's inverse dynamics (rigid bodies, armature, damping, Coulomb friction).
    seed: for the random starting points; with the same seed and a search that ends before
    ``time_limit_s`` (``max_restarts`` reached) the result is identical.
    time_limit_s: wall-clock budget of the search, s (the final dense check comes on top);
    max_restarts: number of SLSQP runs from random starts (default: as many as fit in time);
    max_iterations: per run.
    Returns an ExcitationDesign. Raises ValueError for bad arguments, including a start pose
    whose gravity torque already exceeds the torque limits.
    """
    import scipy.optimize  # here: SciPy's optimize costs a quarter second to import, and only this needs it
    started = _time.perf_counter()
    config = IdentificationConfig() if config is None else config
    if criterion not in CRITERIA:
        raise ValueError(f"unknown criterion '{criterion}'; choose one of {CRITERIA}")
    if not np.isfinite(duration) or duration <= 0:
        raise ValueError(f"duration must be a finite number of seconds > 0, got {duration}")
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a finite number of Hz > 0, got {sample_rate}")
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
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (3,) or np.any(~np.isfinite(weights)) or np.any(weights < 0) or not np.any(weights > 0):
        raise ValueError(f"weights must be 3 finite values >= 0, not all zero, got {weights.tolist()}")
    noise_std = np.ones(n) if joint_noise_std is None else np.asarray(joint_noise_std, dtype=float)
    if noise_std.shape != (n,) or np.any(~np.isfinite(noise_std)) or np.any(noise_std <= 0):
        raise ValueError(f"joint_noise_std must be {n} finite values > 0 N m")
    zero = np.zeros((1, n))
    static = np.abs(robot.inverse_dynamics(start[None], zero, zero)[0])
    over = np.flatnonzero(static > tau_max)
    if over.size:
        raise ValueError(f"the gravity torque at the start pose already exceeds the torque limits of joints "
                         f"{[robot.joint_names[j] for j in over]}: {static[over].round(3).tolist()} N m")

    problem = _Problem(robot, config, criterion, weights, noise_std, n_harmonics, base_frequency, start,
                       lower, upper, v_max, a_max, tau_max, started + time_limit_s)
    gen = np.random.default_rng(seed)
    constraints = [{"type": "ineq", "fun": problem.slack, "jac": problem.slack_jac}] if problem.torque_limited else []
    iterations = restarts = 0
    initial = np.inf
    try:
        while max_restarts is None or restarts < max_restarts:
            y0 = problem.random_start(gen)
            initial = min(initial, float(problem.criterion_of(y0)))
            restarts += 1
            counter = {"nit": 0}

            def count(_y, counter=counter):
                counter["nit"] += 1
            try:
                scipy.optimize.minimize(problem.fun, y0, jac=problem.jac, method="SLSQP", constraints=constraints,
                                        callback=count, options={"maxiter": max_iterations, "ftol": 1e-6})
            finally:
                iterations += counter["nit"]
    except _OutOfTime:
        pass
    problem.deadline = np.inf
    if problem.best is not None:
        x = problem.squash(problem.best[1])[0]
    elif problem.least_bad is not None:
        x = problem.squash(problem.least_bad[1])[0]
    else:  # out of time before the first evaluation: stay at rest
        x = np.zeros(problem.dim)

    # the search saw grid points only: check every sample and shrink toward rest if needed
    free = x.reshape(n, -1)
    total = periods / base_frequency
    for _ in range(_MAX_SHRINK_STEPS):
        series = rest_to_rest_series(free, start, base_frequency)
        trajectory = _exact_ends(series.trajectory(total, sample_rate), start)
        usage = _limit_usage(robot, trajectory, lower, upper, v_max, a_max, tau_max)
        worst = max(float(np.max(u)) for u in usage.values())
        if worst <= 1.0:
            break
        free = free * min(0.995, 1.0 / worst)
    limits_met = worst <= 1.0
    value = problem.criterion_at(free.reshape(-1))
    cond, cond_scaled = regressor_condition(robot, trajectory, config)
    return ExcitationDesign(
        trajectory=trajectory, series=series, criterion=criterion, criterion_value=value,
        initial_criterion_value=initial, condition_number=cond, condition_number_scaled=cond_scaled,
        iterations=iterations, restarts=restarts, elapsed_s=_time.perf_counter() - started,
        limits_met=limits_met, limit_usage=usage)


def _exact_ends(trajectory: Trajectory, start: np.ndarray) -> Trajectory:
    """The series meets the rest conditions up to rounding; make the first and last samples exact."""
    q, dq, ddq = trajectory.q.copy(), trajectory.dq.copy(), trajectory.ddq.copy()
    q[[0, -1]] = start
    dq[[0, -1]] = 0.0
    ddq[[0, -1]] = 0.0
    return Trajectory(trajectory.time, q, dq, ddq)
