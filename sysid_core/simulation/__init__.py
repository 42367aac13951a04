"""Synthetic recordings from MuJoCo: the ground truth identification is checked against.

Two sources. ``ideal_recording`` evaluates MuJoCo's inverse dynamics on the planned
states: noise-free torques consistent with the plan, exact accelerations included.
``simulate`` runs MuJoCo forward while a computed-torque controller that knows only the
nominal model drives the joints, as a real arm would execute the plan, and records what
the arm's sensors would report: states and commanded torques with noise and
quantisation, and no accelerations. ``simulate_tracking`` does the same under a given
PD + feed-forward law (the MIT mode of Damiao-class drives), optionally on feedback delayed
by whole samples (a command computed from the previous cycle's feedback, as over CAN).

Both simulate the *plant* (``plant_model``), the arm file as a real arm would behave:

* the model's own actuators are switched off (``disableflags`` actuation). Published arms
  carry position or affine servos; left on with ctrl = 0 they pull every joint toward zero
  with forces no recording sees. Disabling the flag, rather than zeroing gains, covers every
  actuator type (bias terms, activation dynamics, velocity feedback) with one bit and leaves
  the file's actuators readable (their force ranges are the arm's torque limits, checked);
* bodies' ``gravcomp`` is zeroed: a real arm has no free anti-gravity force, its motors
  carry the weight and a recording sees that torque;
* contacts are off (``disableflags`` contact). Published collision geometry is coarse
  (capsules around links), and a random excitation inside the joint limits grazes it on
  most arms; a contact force in the data is one no rigid-body model can explain. Instead
  the recorded motion is checked against the file's collision geometry, and what would
  have touched is reported (``TrackingQuality.collisions``): the plan is not safe to replay
  on hardware, but the simulated data are valid;
* joint limits stay on: a real arm has end stops, and a run that reaches one is refused.

Timing: the control and sample instants are the trajectory's samples. When the model's
timestep does not divide the sample period, the plant integrates with the largest timestep
that does and is no longer than the file's (``simulation_timing``). The sample rate is
what the user asked for, what the data, the filters and the Damiao export assume and the
rate the controller runs at, so it is kept; a shorter MuJoCo step only integrates the same
physics more finely (MuJoCo arm models ship 2 ms timesteps for speed, not for realism).

Every simulated run is checked before anything identifies it (``TrackingError`` otherwise):
a plan inside the joint ranges, no divergence, no joint beyond its limits, no torque beyond the
actuators' limits, and the tracking error of each joint within ``TRACKING_TOLERANCE_FRACTION``
of the joint's planned excursion plus ``TRACKING_TOLERANCE_FLOOR``. ``TrackingQuality``
reports the figures.

Hinge and slide joints only (qpos and qvel have the same size); trajectory columns are
in MuJoCo dof order.
"""
from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import mujoco
import numpy as np

from ..errors import DataError, TrackingError
from ..excitation.design import actuator_torque_limits
from ..excitation.trajectory import Trajectory
from ..identification.recording import QualityNote, Recording

# Divergence shows up as these warnings: MuJoCo then resets the state instead of propagating NaN.
_DIVERGENCE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                        mujoco.mjtWarning.mjWARN_BADQACC)
_DIVERGENCE_INDEX = tuple(int(w) for w in _DIVERGENCE_WARNINGS)
_RATIO_TOLERANCE = 1e-6
_PROGRESS_STEP = 0.05
_INTEGRATORS = {int(mujoco.mjtIntegrator.mjINT_EULER): "Euler", int(mujoco.mjtIntegrator.mjINT_RK4): "RK4",
                int(mujoco.mjtIntegrator.mjINT_IMPLICIT): "implicit",
                int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST): "implicitfast"}
_PLANT_DISABLED = int(mujoco.mjtDisableBit.mjDSBL_ACTUATION) | int(mujoco.mjtDisableBit.mjDSBL_CONTACT)

# Computed-torque bandwidth: 20 Hz, at most sample_rate / 50. Measured on published 7-DOF arms
# whose payload is unknown to the controller (3-10 % of the arm's mass on a wrist of 1e-3 kg m^2),
# 20 Hz keeps the tracking error to a few hundredths of a radian where 8 Hz lets the last joint
# wander by 0.3-0.9 rad. With the torque held over a sample period T, the discrete loop keeps
# its margin while 2 zeta w T stays small (0.25 at rate / 50), so a plant up to several times
# lighter than the nominal model is still tracked stably.
DEFAULT_BANDWIDTH_HZ = 20.0
_BANDWIDTH_PER_SAMPLE_RATE = 1.0 / 50.0

# A run is refused when a joint's tracking error exceeds this fraction of its planned excursion
# (peak to peak) plus the floor (rad, m for slides): the arm then no longer made the motion the
# excitation was designed for. Healthy runs stay orders of magnitude below (1e-4-1e-2 rad, see
# bench/README.md, The simulation source); the failures this catches are of the size of the
# motion itself.
TRACKING_TOLERANCE_FRACTION = 0.1
TRACKING_TOLERANCE_FLOOR = 0.01
# A run accepted with a tracking error above this fraction of its tolerance is marked doubtful
# in the verdict of what it gives.
DOUBTFUL_FRACTION = 0.5
# The recorded motion is checked against the collision geometry every this many seconds.
_COLLISION_CHECK_PERIOD = 0.01
# Joint-limit check: a position beyond the limit by more than rounding is a hit (MuJoCo's limit
# constraint pushes as soon as the joint crosses it).
_LIMIT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class MeasurementNoise:
    """The default measurement noise of the project: zero-mean Gaussian, independent per channel.

    q_std = 1e-4 rad: about the quantisation noise of a 14-bit output-side encoder (LSB/sqrt(12)).
    dq_std = 5e-3 rad/s: a velocity the drive estimates from encoder differences at ~1 kHz.
    tau_std = 0.02 N m: a motor-current torque estimate or a joint torque sensor.
    A resolution > 0 (rad, rad/s, N m) rounds the noisy value to that quantum, as an encoder
    count or a 12/16-bit protocol field does; 0 leaves the value continuous.
    ``MeasurementNoise.off()`` is noise-free.
    """

    q_std: float = 1e-4
    dq_std: float = 5e-3
    tau_std: float = 0.02
    q_resolution: float = 0.0
    dq_resolution: float = 0.0
    tau_resolution: float = 0.0

    def __post_init__(self):
        for name, value in vars(self).items():
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"MeasurementNoise.{name} must be a finite number >= 0, got {value}")

    @classmethod
    def off(cls) -> "MeasurementNoise":
        return cls(q_std=0.0, dq_std=0.0, tau_std=0.0)


@dataclass(frozen=True)
class StribeckFriction:
    """A plant's Stribeck friction beyond MuJoCo's own, for ``simulate_tracking(joint_friction=...)``.

    ``f(dq) = (coulomb + excess exp(-(|dq| / velocity)^exponent)) tanh(dq / sign_velocity) + viscous dq``,
    per joint, N m for dq in rad/s: ``excess`` N m the static level above the Coulomb level
    (the Stribeck peak at rest), ``velocity`` rad/s the Stribeck velocity, ``exponent`` the
    shape (2: Gaussian), ``coulomb`` N m and ``viscous`` N m s/rad extra Coulomb and viscous
    levels (0 by default: the MJCF's frictionloss and damping already provide them).
    ``sign_velocity`` rad/s smooths the sign: the torque is applied explicitly, once per step,
    and a discontinuous one would chatter around zero velocity. Scalars or (n,) arrays.
    Written here independently of the identification's friction models: it is the truth.
    """

    excess: object
    velocity: object
    exponent: object = 2.0
    coulomb: object = 0.0
    viscous: object = 0.0
    sign_velocity: float = 0.02

    def __post_init__(self):
        for name in ("excess", "velocity", "exponent", "coulomb", "viscous"):
            value = np.asarray(getattr(self, name), dtype=float)
            if not np.all(np.isfinite(value)) or np.any(value < 0):
                raise ValueError(f"StribeckFriction.{name} must be finite and >= 0, got {value.tolist()}")
        if np.any(np.asarray(self.velocity, dtype=float) <= 0) or np.any(np.asarray(self.exponent, dtype=float) <= 0):
            raise ValueError("StribeckFriction velocity and exponent must be > 0")
        if not self.sign_velocity > 0:
            raise ValueError(f"StribeckFriction.sign_velocity must be > 0 rad/s, got {self.sign_velocity}")

    def __call__(self, dq) -> np.ndarray:
        """Friction torque N m opposing dq (rad/s), the shape of dq broadcast with the parameters."""
        dq = np.asarray(dq, dtype=float)
        level = self.coulomb + self.excess * np.exp(-np.power(np.abs(dq) / self.velocity, self.exponent))
        return level * np.tanh(dq / self.sign_velocity) + self.viscous * dq


def _model_joint_names(model: mujoco.MjModel) -> tuple:
    return tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"
                 for j in range(model.njnt))


def _check_model(model: mujoco.MjModel) -> None:
    if model.nq != model.nv:
        raise ValueError(f"model has nq={model.nq} != nv={model.nv}: only hinge and slide joints are supported")


def _check_trajectory(model: mujoco.MjModel, trajectory: Trajectory) -> int:
    num = np.shape(trajectory.time)[0] if np.ndim(trajectory.time) == 1 else -1
    for name in ("q", "dq", "ddq"):
        arr = np.asarray(getattr(trajectory, name))
        if arr.shape != (num, model.nv):
            raise DataError(f"trajectory {name} has shape {arr.shape}, expected ({num}, {model.nv}) "
                            f"for {num} samples of a model with {model.nv} dofs")
        if not np.all(np.isfinite(arr)):
            raise DataError(f"trajectory {name} contains NaN or infinite values")
    if num < 2:
        raise DataError(f"trajectory needs at least 2 samples, got {num}")
    return num


def _joint_names(model, joint_names) -> tuple:
    names = _model_joint_names(model) if joint_names is None else tuple(joint_names)
    if len(names) != model.nv:
        raise ValueError(f"{len(names)} joint names given for a model with {model.nv} dofs")
    return names


def _sample_rate(time) -> float:
    """Samples per second (Hz) of a uniform time grid (N,) s; DataError when it is not uniform."""
    dt = np.diff(np.asarray(time, dtype=float))
    period = float(np.median(dt))
    if not period > 0 or np.max(np.abs(dt - period)) > 1e-9 + 1e-6 * period:
        raise DataError("trajectory time stamps are not uniformly spaced")
    return 1.0 / period


def _limit_interval(model: mujoco.MjModel) -> np.ndarray:
    """(n, 2) positions between which no joint-limit constraint acts (rad, m); +-inf when unlimited.

    MuJoCo's limit acts once a joint is closer to its range end than its ``margin``."""
    limited = model.jnt_limited.astype(bool)
    margin = model.jnt_margin
    low = np.where(limited, model.jnt_range[:, 0] + margin, -np.inf)
    high = np.where(limited, model.jnt_range[:, 1] - margin, np.inf)
    interval = np.empty((model.nv, 2))
    interval[model.jnt_dofadr] = np.column_stack([low, high])
    return interval


def _check_plan_within_limits(model: mujoco.MjModel, trajectory: Trajectory, names: tuple) -> None:
    """TrackingError naming the joint, the time and the excess when the plan leaves a joint's
    range: the simulated arm would run into its end stop (e.g. a plan made for the nominal model
    played on a truth model with narrower limits)."""
    interval = _limit_interval(model)
    q = np.asarray(trajectory.q, dtype=float)
    excess = np.maximum(interval[:, 0] - q, q - interval[:, 1])
    if np.all(excess <= _LIMIT_TOLERANCE):
        return
    i, j = np.unravel_index(int(np.argmax(excess)), excess.shape)
    side = "lower" if q[i, j] < interval[j, 0] else "upper"
    bound = interval[j, 0] if side == "lower" else interval[j, 1]
    raise TrackingError(f"the plan takes joint '{names[j]}' to {q[i, j]:.4g} at t={trajectory.time[i]:.3f} s, "
                        f"{excess[i, j]:.3g} beyond its {side} limit {bound:.4g} (rad, m for slides): the arm "
                        "cannot follow it", names[j], float(trajectory.time[i]), float(excess[i, j]))


# --- the plant: what is simulated, at which timestep -------------------------------------------

@dataclass(frozen=True)
class SimulationTiming:
    """How MuJoCo integrates a run sampled at ``sample_rate``.

    sample_rate: samples (and control updates) per second, Hz. timestep: the MuJoCo timestep
    the plant integrates with, s; substeps: MuJoCo steps per sample (timestep * substeps is
    the sample period). model_timestep: the file's timestep, s. integrator: the model's,
    as MJCF spells it (Euler, RK4, implicit, implicitfast). implicit_damping: whether the
    integrator applies joint damping at the end-of-step velocity (implicit, implicitfast,
    and Euler unless the model disables ``eulerdamp``): in data sampled from such a run a
    joint's damping d (N m s/rad) then acts like an extra armature of d * timestep (kg m^2).
    shortened_for: what shortened the timestep beyond the sample period's need, if anything.
    """

    sample_rate: float
    timestep: float
    substeps: int
    integrator: str
    model_timestep: float
    implicit_damping: bool
    shortened_for: str = ""

    @property
    def changed(self) -> bool:
        """Whether the plant's timestep differs from the file's."""
        return self.timestep != self.model_timestep

    def describe(self) -> str:
        """One line for the user: what the simulation integrates with, and why when it differs."""
        period_ms = 1e3 / self.sample_rate
        steps = f"{self.substeps} step{'s' if self.substeps > 1 else ''} of {self.timestep * 1e3:.4g} ms"
        why = (f"shortened for {self.shortened_for}" if self.shortened_for else
               f"the model's {self.model_timestep * 1e3:.4g} ms timestep does not divide the {period_ms:.4g} ms "
               f"sample period: shortened" if self.changed else "the model's timestep")
        return f"MuJoCo: {steps} per sample at {self.sample_rate:g} Hz ({why}), {self.integrator} integrator"


def simulation_timing(model: mujoco.MjModel, sample_rate: float) -> SimulationTiming:
    """The timestep and substeps a simulation sampled at ``sample_rate`` (Hz) really uses.

    The file's timestep when it divides the sample period; otherwise period / k with the
    smallest k that makes it no longer than the file's (2 ms at 1 kHz: 1 ms, one step per
    sample). Never longer than the file's: the model's author chose that as the stability
    limit. Raises ValueError for a sample rate that is not a finite number > 0.
    """
    if not (np.isfinite(sample_rate) and sample_rate > 0):
        raise ValueError(f"sample rate must be a finite number > 0 Hz, got {sample_rate}")
    model_timestep = float(model.opt.timestep)
    period = 1.0 / float(sample_rate)
    ratio = period / model_timestep
    steps = int(round(ratio))
    if steps >= 1 and abs(ratio - steps) <= _RATIO_TOLERANCE:
        timestep = model_timestep
    else:
        steps = max(1, math.ceil(ratio - _RATIO_TOLERANCE))
        timestep = period / steps
    integrator = int(model.opt.integrator)
    implicit = (integrator in (int(mujoco.mjtIntegrator.mjINT_IMPLICIT), int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST))
                or (integrator == int(mujoco.mjtIntegrator.mjINT_EULER)
                    and not model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)))
    return SimulationTiming(sample_rate=float(sample_rate), timestep=timestep, substeps=steps,
                            integrator=_INTEGRATORS.get(integrator, str(integrator)),
                            model_timestep=model_timestep, implicit_damping=bool(implicit))


def plant_model(model: mujoco.MjModel, timing: SimulationTiming) -> mujoco.MjModel:
    """A copy of ``model`` as the simulation runs it (see the module docstring): ``timing``'s
    timestep, the model's actuators and contacts disabled, every body's gravcomp zero.
    ``model`` itself is not changed."""
    _check_model(model)
    plant = copy.deepcopy(model)
    plant.opt.timestep = timing.timestep
    plant.opt.disableflags |= _PLANT_DISABLED
    plant.body_gravcomp[:] = 0.0
    return plant


def torque_limits(model: mujoco.MjModel) -> np.ndarray:
    """Each joint's torque limit (n,) N m (N for slides) from the file's actuators, inf where it
    gives none: ``|gear|`` times forcerange, or ``|gain|`` times ctrlrange for a plain motor, capped by
    the joint's actuatorfrcrange (``excitation.design.actuator_torque_limits``)."""
    limits = actuator_torque_limits(model)
    return np.full(model.nv, np.inf) if limits is None else limits


# --- controllers ------------------------------------------------------------------------------

def mit_torque(q, dq, q_des, dq_des, tau_ff, kp, kd) -> np.ndarray:
    """The MIT-mode joint law of Damiao-class drives: tau = kp (q_des - q) + kd (dq_des - dq) + tau_ff.

    Arrays broadcast: q, q_des rad; dq, dq_des rad/s; tau_ff N m; kp N m/rad; kd N m s/rad.
    Returns tau in N m with the broadcast shape.
    """
    return kp * (q_des - q) + kd * (dq_des - dq) + tau_ff


class ComputedTorque:
    """Computed-torque joint control with the model the controller knows (the nominal model).

    ``torque``: tau = ID(q, dq, ddq_des + kp (q_des - q) + kd (dq_des - dq)), MuJoCo's inverse
    dynamics of the nominal model (rigid body, armature, damping, springs, friction loss) at
    the measured state. ``feedback_torque``: tau = tau_ff + M(q) (kp (q_des - q) + kd (dq_des - dq))
    around a feed-forward computed elsewhere (MIT-style commands). Either way every joint's
    error obeys e'' + kd e' + kp e = 0 when the model is right, whatever the arm's inertia and
    its conditioning: kp = w^2 (1/s^2), kd = 2 zeta w (1/s), w = 2 pi ``bandwidth_hz``
    (default: DEFAULT_BANDWIDTH_HZ, at most sample_rate / 50). This is why it replaces PD
    gains from the diagonal of the mass matrix, which are stable only while the matrix stays
    close to its diagonal (not on 7-DOF arms without armature, and not at 500 Hz).

    The nominal model is used as the plant is (``plant_model``: no gravcomp, no actuators, no
    contacts, the timestep chosen for ``sample_rate``). Holds a scratch MjData: one
    controller per simulation.
    """

    def __init__(self, model: mujoco.MjModel, sample_rate: float, bandwidth_hz: float | None = None,
                 damping_ratio: float = 1.0):
        timing = simulation_timing(model, sample_rate)
        if bandwidth_hz is None:
            bandwidth_hz = min(DEFAULT_BANDWIDTH_HZ, timing.sample_rate * _BANDWIDTH_PER_SAMPLE_RATE)
        if not (np.isfinite(bandwidth_hz) and bandwidth_hz > 0 and np.isfinite(damping_ratio) and damping_ratio > 0):
            raise ValueError(f"bandwidth_hz and damping_ratio must be finite and > 0, got {bandwidth_hz}, "
                             f"{damping_ratio}")
        self.model = plant_model(model, timing)
        self.bandwidth_hz = float(bandwidth_hz)
        omega = 2 * np.pi * self.bandwidth_hz
        self.kp, self.kd = omega ** 2, 2 * damping_ratio * omega
        self._data = mujoco.MjData(self.model)
        self._out = np.zeros(self.model.nv)
        # views of the scratch state made once (every MjData attribute read builds a new array)
        # and a buffer for the feedback: ``torque`` runs at every sample of a simulation
        self._qpos, self._qvel, self._qacc = self._data.qpos, self._data.qvel, self._data.qacc
        self._qfrc_inverse = self._data.qfrc_inverse
        self._error = np.empty(self.model.nv)

    def torque(self, q, dq, q_des, dq_des, ddq_des) -> np.ndarray:
        """Joint torques (n,) N m for the state q (rad), dq (rad/s) and the plan's sample (n,) each."""
        return self._torque(q, dq, q_des, dq_des, ddq_des).copy()

    def _torque(self, q, dq, q_des, dq_des, ddq_des) -> np.ndarray:
        """``torque`` in the controller's scratch (n,) N m, overwritten by the next call."""
        qacc, error = self._qacc, self._error
        self._qpos[:] = q
        self._qvel[:] = dq
        # ddq_des + kp (q_des - q) + kd (dq_des - dq), in this order (the same rounding), in place
        np.subtract(q_des, q, out=error)
        np.multiply(self.kp, error, out=error)
        np.add(ddq_des, error, out=qacc)
        np.subtract(dq_des, dq, out=error)
        np.multiply(self.kd, error, out=error)
        np.add(qacc, error, out=qacc)
        mujoco.mj_inverse(self.model, self._data)
        return self._qfrc_inverse

    def feedback_torque(self, q, dq, q_des, dq_des, tau_ff) -> np.ndarray:
        """tau_ff + M(q) (kp (q_des - q) + kd (dq_des - dq)), (n,) N m: feedback in acceleration,
        scaled by the nominal joint-space inertia at q (armature included)."""
        data = self._data
        data.qpos[:] = q
        mujoco.mj_fwdPosition(self.model, data)  # the mass matrix at q (mj_mulM reads data.qM)
        mujoco.mj_mulM(self.model, data, self._out, self.kp * (q_des - q) + self.kd * (dq_des - dq))
        return tau_ff + self._out


def default_gains(model: mujoco.MjModel, bandwidth_hz: float = 8.0,
                  damping_ratio: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """Decoupled PD gains (kp (n,) N m/rad, kd (n,) N m s/rad) for the MIT-mode law.

    Each joint is treated as an inertia M_jj (the diagonal of the joint-space mass matrix at
    qpos0, which already includes the armature) closed to a second-order loop of natural
    frequency ``bandwidth_hz`` and ``damping_ratio``: kp = M_jj w^2, kd = 2 zeta w M_jj.
    Stable at 1 kHz on arms whose mass matrix stays close to its diagonal (armature, few
    joints); on 7-DOF arms without armature the explicit loop's eig(T M^-1 Kd) nears or
    passes 2 and it diverges (see ``ComputedTorque``, what ``simulate`` uses).
    """
    _check_model(model)
    if bandwidth_hz <= 0 or damping_ratio <= 0:
        raise ValueError("bandwidth_hz and damping_ratio must be > 0")
    data = mujoco.MjData(model)
    data.qpos[:] = model.qpos0
    mujoco.mj_forward(model, data)
    # diagonal of M by products with unit vectors: mj_mulM keeps one signature across
    # MuJoCo 3.x and 4.x, unlike mj_fullM
    m_jj = np.empty(model.nv)
    unit, column = np.zeros(model.nv), np.zeros(model.nv)
    for j in range(model.nv):
        unit[:] = 0.0
        unit[j] = 1.0
        mujoco.mj_mulM(model, data, column, unit)
        m_jj[j] = column[j]
    omega = 2 * np.pi * bandwidth_hz
    return m_jj * omega ** 2, 2 * damping_ratio * omega * m_jj


def _per_joint(value, n: int, name: str, unit: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    arr = np.full(n, float(arr)) if arr.ndim == 0 else arr
    if arr.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and >= 0 {unit}, got {arr.tolist()}")
    return arr


# --- stepping ---------------------------------------------------------------------------------

def diverged(data: mujoco.MjData) -> bool:
    """Whether MuJoCo has reported a diverging state since ``data`` was made or reset.

    MuJoCo resets a diverged state to qpos0 rather than propagating NaN, so the warning
    counters are the evidence.
    """
    return _counted_divergence(data.warning.number)  # one array read: this runs once per control period


def _counted_divergence(counts: np.ndarray) -> bool:
    """Whether MuJoCo's warning counters ``data.warning.number`` (a view, may be kept) hold a divergence."""
    return bool(counts[_DIVERGENCE_INDEX[0]] or counts[_DIVERGENCE_INDEX[1]] or counts[_DIVERGENCE_INDEX[2]])


def _diverging_dof(data: mujoco.MjData) -> int:
    """The dof MuJoCo named in its latest divergence warning (its ``lastinfo``)."""
    for index in _DIVERGENCE_INDEX[::-1]:
        if data.warning.number[index]:
            return int(data.warning.lastinfo[index])
    return -1


def step(model: mujoco.MjModel, data: mujoco.MjData, tau, substeps: int = 1) -> None:
    """Apply joint torques tau (nv,) N m as ``qfrc_applied`` and hold them for ``substeps`` mj_step calls.

    The model is stepped as given: pass a ``plant_model`` so its actuators and gravcomp do
    not act. Raises DataError when MuJoCo reports divergence (see ``diverged``).
    """
    start = data.time  # MuJoCo resets the clock with the state when it diverges
    data.qfrc_applied[:] = tau
    for _ in range(substeps):
        mujoco.mj_step(model, data)
    if diverged(data):
        raise DataError(f"simulation diverged within {substeps} step(s) after t={start:.4f} s")


@contextmanager
def mujoco_warnings():
    """Collect MuJoCo's warning texts instead of letting it print them and append to MUJOCO_LOG.TXT.

    The handler is process-global: the previous one is restored on exit.
    """
    messages: list[str] = []
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(messages.append)
    try:
        yield messages
    finally:
        mujoco.set_mju_user_warning(previous)


def measure(x: np.ndarray, std: float, resolution: float, gen: np.random.Generator) -> np.ndarray:
    """What a sensor reports for the true values x (any shape): x plus zero-mean Gaussian noise of
    standard deviation ``std``, rounded to a multiple of ``resolution`` when it is > 0 (same units)."""
    y = x + gen.normal(0.0, std, size=x.shape) if std > 0 else x.copy()
    return np.round(y / resolution) * resolution if resolution > 0 else y


# --- what a run did ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Collision:
    """Two bodies whose collision geometry the recorded motion made overlap (contacts are off
    in the plant). ``first_time`` s of the first overlap seen, ``depth`` m the deepest."""

    body1: str
    body2: str
    first_time: float
    depth: float


@dataclass(frozen=True, eq=False)
class TrackingQuality:
    """How well a simulated run followed its plan, per joint (n,) in ``joint_names`` order.

    rms_error, max_error: tracking error ``|q - q_planned|``, RMS and peak, rad (m for slides);
    max_error_time: s, when the peak occurred. tolerance: the peak error above which the run
    is refused (TRACKING_TOLERANCE_FRACTION of the planned peak-to-peak excursion plus
    TRACKING_TOLERANCE_FLOOR). torque_limit: N m from the file's actuators, inf where it
    gives none; torque_usage: peak ``|commanded torque|`` / torque_limit (0 where unlimited).
    collisions: body pairs the motion made overlap. timing: how MuJoCo integrated the run.
    ``notes()`` gives one line per finding, for a report's data-quality notes.
    """

    joint_names: tuple
    rms_error: np.ndarray
    max_error: np.ndarray
    max_error_time: np.ndarray
    tolerance: np.ndarray
    torque_limit: np.ndarray
    torque_usage: np.ndarray
    collisions: tuple
    timing: SimulationTiming

    def notes(self) -> tuple[str, ...]:
        """Human-readable findings: the worst tracking, the torque use, collisions, the timing."""
        j = int(np.argmax(self.max_error / self.tolerance))
        lines = [f"tracking: worst joint '{self.joint_names[j]}', RMS error {self.rms_error[j]:.2g}, "
                 f"peak {self.max_error[j]:.2g} at t={self.max_error_time[j]:.3f} s "
                 f"({100 * self.max_error[j] / self.tolerance[j]:.2g} % of the {self.tolerance[j]:.2g} refusal "
                 "threshold; "
                 "rad, m for slides)"]
        if np.any(np.isfinite(self.torque_limit)):
            k = int(np.argmax(self.torque_usage))
            lines.append(f"torque: peak use {100 * self.torque_usage[k]:.2g} % of the actuator limit on "
                         f"'{self.joint_names[k]}' ({self.torque_limit[k]:.4g} N m)")
        else:
            lines.append("torque: the model gives no actuator torque limits; none checked")
        for c in self.collisions:
            lines.append(f"collision: the motion makes '{c.body1}' and '{c.body2}' overlap from t={c.first_time:.3f} s "
                         f"(up to {c.depth * 1e3:.3g} mm in the model's collision geometry); contacts are off in "
                         "the simulation, a real arm would collide: do not replay this plan on hardware")
        lines.append(self.timing.describe())
        return tuple(lines)

    def quality_notes(self) -> tuple[QualityNote, ...]:
        """A doubtful note for the verdict when the run was accepted with little room: tracking
        error above DOUBTFUL_FRACTION of its refusal threshold (the arm barely made the motion
        the excitation was designed for). Torque within the actuator limits is not doubtful:
        the plant applied every commanded N m (a run beyond the limits is refused)."""
        ratio = self.max_error / self.tolerance
        j = int(np.argmax(ratio))
        if ratio[j] <= DOUBTFUL_FRACTION:
            return ()
        return (QualityNote("doubtful", f"joint '{self.joint_names[j]}' was {self.max_error[j]:.3g} rad (m) off its "
                                        f"plan at t={self.max_error_time[j]:.3f} s, {ratio[j]:.0%} of the refusal "
                                        "threshold: the arm barely followed the excitation"),)


@dataclass(frozen=True, eq=False)
class SimulatedRun:
    """A simulated recording and how well the arm followed the plan."""

    recording: Recording
    quality: TrackingQuality


def _collisions(model: mujoco.MjModel, time: np.ndarray, q: np.ndarray) -> tuple:
    """Body pairs whose collision geoms overlap at the positions q (N, n) rad, checked every
    _COLLISION_CHECK_PERIOD s with the file's own contact settings (exclusions, filters)."""
    if model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_CONTACT) or model.ngeom < 2:
        return ()
    stride = max(1, int(round(_COLLISION_CHECK_PERIOD / (time[1] - time[0]))))
    data = mujoco.MjData(model)
    found: dict = {}
    for i in range(0, len(time), stride):
        data.qpos[:] = q[i]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_collision(model, data)
        for c in range(data.ncon):
            depth = -float(data.contact.dist[c])
            if depth <= 0:  # within the margin only: not touching
                continue
            pair = tuple(sorted(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, model.geom_bodyid[g]) or
                                f"body{model.geom_bodyid[g]}" for g in data.contact.geom[c]))
            first, deepest = found.get(pair, (time[i], 0.0))
            found[pair] = (first, max(deepest, depth))
    return tuple(Collision(a, b, float(t), d) for (a, b), (t, d) in sorted(found.items(), key=lambda kv: kv[1][0]))


def _assess(plant: mujoco.MjModel, model: mujoco.MjModel, timing: SimulationTiming, names: tuple,
            time: np.ndarray, q_plan: np.ndarray, q: np.ndarray, tau: np.ndarray) -> TrackingQuality:
    """The run's TrackingQuality, or TrackingError for a joint-limit hit, a torque beyond the
    actuators' limits or a tracking error beyond tolerance (checked in this order: a limit hit
    or a saturation explains the tracking error that usually comes with it)."""
    interval = _limit_interval(plant)
    excess = np.maximum(interval[:, 0] - q, q - interval[:, 1])
    if np.any(excess > _LIMIT_TOLERANCE):
        hits = np.argwhere(excess > _LIMIT_TOLERANCE)
        i, j = hits[np.argmin(hits[:, 0])]  # the first hit in time
        deepest = float(excess[:, j].max())
        raise TrackingError(f"joint '{names[j]}' hit its {'lower' if q[i, j] < interval[j, 0] else 'upper'} limit at "
                            f"t={time[i]:.3f} s and went up to {deepest:.3g} rad (m) beyond it: the arm ran into its "
                            "end stop, the recording holds forces no model explains", names[j], float(time[i]), deepest)
    limit = torque_limits(model)
    usage = np.where(np.isfinite(limit), np.abs(tau).max(axis=0) / limit, 0.0)
    if np.any(usage > 1.0):
        j = int(np.argmax(usage))
        i = int(np.argmax(np.abs(tau[:, j])))
        raise TrackingError(f"joint '{names[j]}' needed {tau[i, j]:.4g} N m at t={time[i]:.3f} s, {usage[j]:.0%} of "
                            f"its {limit[j]:.4g} N m actuator limit: the arm could not make this motion (slow the "
                            "excitation down, e.g. --max-velocity)", names[j], float(time[i]), float(abs(tau[i, j])))
    error = np.abs(q - q_plan)
    tolerance = TRACKING_TOLERANCE_FRACTION * np.ptp(q_plan, axis=0) + TRACKING_TOLERANCE_FLOOR
    peak_index = np.argmax(error, axis=0)
    max_error = error[peak_index, np.arange(len(names))]
    if np.any(max_error > tolerance):
        j = int(np.argmax(max_error / tolerance))
        raise TrackingError(f"joint '{names[j]}' was {max_error[j]:.3g} rad (m) off its plan at "
                            f"t={time[peak_index[j]]:.3f} s, beyond the {tolerance[j]:.3g} tolerance "
                            f"({TRACKING_TOLERANCE_FRACTION:.0%} of its planned excursion + "
                            f"{TRACKING_TOLERANCE_FLOOR:g}): the arm did not follow the plan",
                            names[j], float(time[peak_index[j]]), float(max_error[j]))
    return TrackingQuality(joint_names=names, rms_error=np.sqrt(np.mean(error ** 2, axis=0)), max_error=max_error,
                           max_error_time=time[peak_index].copy(), tolerance=tolerance, torque_limit=limit,
                           torque_usage=usage, collisions=_collisions(model, time, q), timing=timing)


# --- the sources ------------------------------------------------------------------------------

def ideal_recording(model: mujoco.MjModel, trajectory: Trajectory, joint_names=None) -> Recording:
    """Noise-free torques that realise the plan exactly, from MuJoCo's inverse dynamics of the plant.

    For every sample, qpos/qvel/qacc = planned q (rad), dq (rad/s), ddq (rad/s^2) and the
    torque (N, n) N m is ``qfrc_inverse`` of ``plant_model`` (no gravcomp, no contacts; the
    timestep ``simulation_timing`` picks for the plan's rate, which sets the soft constraints):
    rigid body, armature, damping, springs and the soft friction-loss constraint force (equal
    to Coulomb friction once the joint slides). ``joint_names`` (n,) default to the model's.
    The Recording carries ddq = the planned ddq. TrackingError when the plan leaves a joint's range.
    """
    _check_model(model)
    num = _check_trajectory(model, trajectory)
    names = _joint_names(model, joint_names)
    _check_plan_within_limits(model, trajectory, names)
    plant = plant_model(model, simulation_timing(model, _sample_rate(trajectory.time)))
    q, dq, ddq = (np.asarray(a, dtype=float) for a in (trajectory.q, trajectory.dq, trajectory.ddq))
    data = mujoco.MjData(plant)
    tau = np.empty((num, model.nv))
    # MuJoCo's inverse dynamics is the oracle here and takes one state at a time.
    for i in range(num):
        data.qpos[:] = q[i]
        data.qvel[:] = dq[i]
        data.qacc[:] = ddq[i]
        mujoco.mj_inverse(plant, data)
        tau[i] = data.qfrc_inverse
    return Recording(time=np.asarray(trajectory.time, dtype=float).copy(), q=q.copy(), dq=dq.copy(),
                     tau=tau, joint_names=names, ddq=ddq.copy())


def _run(model: mujoco.MjModel, trajectory: Trajectory, law: Callable[[int, np.ndarray, np.ndarray], np.ndarray],
         noise: MeasurementNoise, seed, names: tuple, progress, joint_friction, delay: int = 0,
         before_sample: Callable[[int, mujoco.MjModel], None] | None = None) -> SimulatedRun:
    """Simulate the plant of ``model`` under ``law(i, q, dq) -> tau`` (N m) at every sample i,
    then check and measure what it recorded. q, dq are the plant's live state (``delay`` = 0) or
    its state at sample max(i - delay, 0), and tau is copied before the plant steps: the law must
    not keep q, dq, and may return a scratch array. ``before_sample(i, plant)``, when given, is
    called at each sample before anything else and may change the plant (a body picked up)."""
    num = len(trajectory.time)
    n = model.nv
    time = np.asarray(trajectory.time, dtype=float)
    timing = simulation_timing(model, _sample_rate(time))
    plant = plant_model(model, timing)
    steps = timing.substeps

    data = mujoco.MjData(plant)
    data.qpos[:] = trajectory.q[0]
    data.qvel[:] = trajectory.dq[0]
    # views made once: every MjData attribute read builds a new array, and this loop runs
    # N times at ~20 us of MuJoCo per sample
    qpos, qvel, applied, counts = data.qpos, data.qvel, data.qfrc_applied, data.warning.number
    mj_step = mujoco.mj_step
    q_true, dq_true, tau_cmd = (np.empty((num, n)) for _ in range(3))
    report_every = max(1, int(np.ceil(_PROGRESS_STEP * (num - 1))))

    with mujoco_warnings() as messages:
        for i in range(num):
            if before_sample is not None:
                before_sample(i, plant)
            q_true[i] = qpos
            dq_true[i] = qvel
            tau = tau_cmd[i]
            if delay:
                seen = max(i - delay, 0)
                tau[:] = law(i, q_true[seen], dq_true[seen])
            else:
                tau[:] = law(i, qpos, qvel)
            if i == num - 1:
                break
            # as ``step``: the torque held through the substeps, divergence caught at the sample
            # it happens (MuJoCo resets a diverged state to qpos0 and carries on)
            if joint_friction is None:
                applied[:] = tau
                for _ in range(steps):
                    mj_step(plant, data)
                failed = _counted_divergence(counts)
            else:
                for _ in range(steps):  # friction follows the velocity within the sample
                    applied[:] = tau - joint_friction(np.array(qvel))
                    mj_step(plant, data)
                    failed = _counted_divergence(counts)
                    if failed:
                        break
            if failed:
                dof = _diverging_dof(data)
                joint = names[dof] if 0 <= dof < n else None
                where = f" at joint '{joint}'" if joint else ""
                raise TrackingError(
                    f"simulation diverged{where} between t={time[i]:.4f} s and t={time[i + 1]:.4f} s "
                    f"(MuJoCo: {' '.join(messages) or 'bad state'}; peak |tau| {np.abs(tau).max():.3g} N m): the "
                    "controller's gains are too high for the timestep, or the feed-forward is wrong",
                    joint, float(time[i]), float(np.abs(tau).max()))
            if progress is not None and (i + 1) % report_every == 0 and i + 1 < num - 1:
                progress((i + 1) / (num - 1))
    if not (np.all(np.isfinite(q_true)) and np.all(np.isfinite(dq_true)) and np.all(np.isfinite(tau_cmd))):
        first = int(np.flatnonzero(~np.isfinite(np.hstack([q_true, dq_true, tau_cmd])).any(axis=1))[0])
        raise TrackingError(f"simulation diverged: non-finite state or torque at t={time[first]:.4f} s",
                            time=float(time[first]))
    quality = _assess(plant, model, timing, names, time, np.asarray(trajectory.q, dtype=float), q_true, tau_cmd)
    if progress is not None:
        progress(1.0)

    gen = np.random.default_rng(seed)
    recording = Recording(time=time.copy(),
                          q=measure(q_true, noise.q_std, noise.q_resolution, gen),
                          dq=measure(dq_true, noise.dq_std, noise.dq_resolution, gen),
                          tau=measure(tau_cmd, noise.tau_std, noise.tau_resolution, gen),
                          joint_names=names, quality_notes=quality.quality_notes())
    return SimulatedRun(recording, quality)


def _prepare(model, trajectory, joint_names) -> tuple:
    _check_model(model)
    _check_trajectory(model, trajectory)
    names = _joint_names(model, joint_names)
    _check_plan_within_limits(model, trajectory, names)
    return names


def simulate(model: mujoco.MjModel, trajectory: Trajectory, nominal: mujoco.MjModel | None = None,
             noise: MeasurementNoise = MeasurementNoise(), seed=None, joint_names=None,
             progress: Callable[[float], None] | None = None,
             joint_friction: Callable[[np.ndarray], np.ndarray] | None = None,
             bandwidth_hz: float | None = None) -> SimulatedRun:
    """The sim source: the plant of ``model`` tracks ``trajectory`` under computed-torque control.

    At every sample i (the control and measurement instants, uniform at the trajectory's rate)
    the controller reads the true state and commands ``ComputedTorque(nominal).torque`` for the
    plan's sample i (nominal: the model the controller knows, default ``model`` itself; same
    dofs), held through ``simulation_timing``'s substeps as ``qfrc_applied``. The simulation
    starts at the plan's q[0], dq[0]. The recorded torque is the commanded one, as a motor
    reports it; q, dq and tau get ``noise`` after the run (``seed`` seeds it).
    progress: called with the completed fraction in [0, 1] about every 5 % of the run.
    joint_friction: extra plant friction f(qvel (n,) rad/s) -> (n,) N m opposing the motion
    (e.g. ``StribeckFriction``), re-evaluated every MuJoCo step; the controller does not know it.
    bandwidth_hz: of the controller (default DEFAULT_BANDWIDTH_HZ, at most sample_rate / 50).
    Returns the Recording (N samples, time as planned, ddq=None) and its TrackingQuality.
    Raises TrackingError for a plan outside the joint limits and for a run that diverged, hit
    a limit, saturated an actuator or did not follow the plan.
    """
    names = _prepare(model, trajectory, joint_names)
    nominal = model if nominal is None else nominal
    if nominal.nv != model.nv:
        raise ValueError(f"the nominal model has {nominal.nv} dofs, the simulated one {model.nv}")
    controller = ComputedTorque(nominal, _sample_rate(trajectory.time), bandwidth_hz)
    q_des, dq_des, ddq_des = (np.asarray(a, dtype=float) for a in (trajectory.q, trajectory.dq, trajectory.ddq))

    def law(i, q, dq):  # the torque in the controller's scratch: _run copies it at once
        return controller._torque(q, dq, q_des[i], dq_des[i], ddq_des[i])
    return _run(model, trajectory, law, noise, seed, names, progress, joint_friction)


def simulate_tracking(model: mujoco.MjModel, trajectory: Trajectory, feedforward, kp, kd,
                      noise: MeasurementNoise = MeasurementNoise(), seed=None, joint_names=None,
                      progress: Callable[[float], None] | None = None,
                      joint_friction: Callable[[np.ndarray], np.ndarray] | None = None,
                      delay_samples: int = 0) -> Recording:
    """Like ``simulate``, under the MIT-mode PD + feed-forward law instead of computed torque.

    tau_i = kp (q_des_i - q) + kd (dq_des_i - dq) + feedforward_i at every sample i.
    feedforward: (N, n) N m, typically the nominal model's inverse dynamics of the plan.
    kp (N m/rad), kd (N m s/rad): scalars or (n,); see ``default_gains``.
    delay_samples: feedback delay, an int >= 0: the law at sample i sees the true state q, dq of
    sample i - delay_samples (of sample 0 while i < delay_samples), as a drive commanded over a
    bus from the previous cycle's feedback; 0 (default) the state at sample i. The recording
    pairs each sample's state with the torque applied from that sample on, as the drive reports
    them. Same plant, timing, noise, checks and errors as ``simulate``; returns only the Recording.
    """
    if isinstance(delay_samples, (bool, np.bool_)) or not isinstance(delay_samples, (int, np.integer)) \
            or delay_samples < 0:
        raise ValueError(f"delay_samples must be an int >= 0, got {delay_samples!r}")
    names = _prepare(model, trajectory, joint_names)
    num, n = len(trajectory.time), model.nv
    ff = np.asarray(feedforward, dtype=float)
    if ff.shape != (num, n):
        raise DataError(f"feedforward has shape {ff.shape}, expected ({num}, {n})")
    if not np.all(np.isfinite(ff)):
        raise DataError("feedforward contains NaN or infinite values")
    kp = _per_joint(kp, n, "kp", "N m/rad")
    kd = _per_joint(kd, n, "kd", "N m s/rad")
    q_des, dq_des = np.asarray(trajectory.q, dtype=float), np.asarray(trajectory.dq, dtype=float)

    def law(i, q, dq):
        return mit_torque(q, dq, q_des[i], dq_des[i], ff[i], kp, kd)
    return _run(model, trajectory, law, noise, seed, names, progress, joint_friction, int(delay_samples)).recording
