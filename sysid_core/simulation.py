"""Synthetic recordings from MuJoCo: the ground truth identification is checked against.

Two sources. ``ideal_recording`` evaluates MuJoCo's inverse dynamics on the planned
states: noise-free torques consistent with the plan, exact accelerations included.
``simulate_tracking`` runs MuJoCo forward with a PD + feedforward joint controller,
as a real arm would execute the plan, and records what the arm's sensors would report:
states and applied torques with noise and quantisation, and no accelerations.

Hinge and slide joints only (qpos and qvel have the same size); trajectory columns are
in MuJoCo dof order.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import mujoco
import numpy as np

from .errors import DataError
from .excitation.trajectory import Trajectory
from .identification.recording import Recording

# Divergence shows up as these warnings: MuJoCo then resets the state instead of propagating NaN.
_DIVERGENCE_WARNINGS = (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL,
                        mujoco.mjtWarning.mjWARN_BADQACC)
_DIVERGENCE_INDEX = tuple(int(w) for w in _DIVERGENCE_WARNINGS)
_RATIO_TOLERANCE = 1e-6
_PROGRESS_STEP = 0.05


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

    f(dq) = (coulomb + excess exp(-(|dq| / velocity)^exponent)) tanh(dq / sign_velocity) + viscous dq,
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


def ideal_recording(model: mujoco.MjModel, trajectory: Trajectory, joint_names=None) -> Recording:
    """Noise-free torques that realise the plan exactly, from MuJoCo's inverse dynamics.

    For every sample, qpos/qvel/qacc = planned q (rad), dq (rad/s), ddq (rad/s^2) and the
    torque (N, n) N m is ``qfrc_inverse``: rigid body, armature, damping and the soft
    friction-loss constraint force (equal to Coulomb friction once the joint slides).
    ``joint_names`` (n,) default to the model's. The Recording carries ddq = the planned ddq.
    Bodies with ``gravcomp`` are computed without it (on a copy of the model): MuJoCo's
    gravity compensation is a simulator force no real arm has, and the simulated plant runs
    without it too.
    """
    _check_model(model)
    if np.any(model.body_gravcomp):
        model = copy.copy(model)  # MjModel copies are deep
        model.body_gravcomp[:] = 0.0
    num = _check_trajectory(model, trajectory)
    names = _joint_names(model, joint_names)
    q, dq, ddq = (np.asarray(a, dtype=float) for a in (trajectory.q, trajectory.dq, trajectory.ddq))
    data = mujoco.MjData(model)
    tau = np.empty((num, model.nv))
    # MuJoCo's inverse dynamics is the oracle here and takes one state at a time.
    for i in range(num):
        data.qpos[:] = q[i]
        data.qvel[:] = dq[i]
        data.qacc[:] = ddq[i]
        mujoco.mj_inverse(model, data)
        tau[i] = data.qfrc_inverse
    return Recording(time=np.asarray(trajectory.time, dtype=float).copy(), q=q.copy(), dq=dq.copy(),
                     tau=tau, joint_names=names, ddq=ddq.copy())


def default_gains(model: mujoco.MjModel, bandwidth_hz: float = 8.0,
                  damping_ratio: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """Stiff but stable decoupled PD gains (kp (n,) N m/rad, kd (n,) N m s/rad).

    Each joint is treated as an inertia M_jj (the diagonal of the joint-space mass matrix at
    qpos0, which already includes the armature) closed to a second-order loop of natural
    frequency ``bandwidth_hz`` and ``damping_ratio``: kp = M_jj w^2, kd = 2 zeta w M_jj.
    8 Hz lies well above the 0.1-0.6 Hz excitation (small tracking error) and well below a
    1 kHz control rate (kd dt / M_jj ~ 0.09, far from the explicit-integration limit of 2).
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


def substeps_per_period(model: mujoco.MjModel, period: float) -> int:
    """MuJoCo steps per control period (s): the period must be a whole multiple of the timestep."""
    ratio = period / model.opt.timestep
    if ratio < 1 - _RATIO_TOLERANCE:
        raise ValueError(f"model timestep {model.opt.timestep} s is longer than the sample period {period} s; "
                         "lower the timestep or the trajectory's sample rate")
    steps = int(round(ratio))
    if abs(ratio - steps) > _RATIO_TOLERANCE:
        raise ValueError(f"sample period {period} s is not an integer multiple of the model timestep "
                         f"{model.opt.timestep} s (ratio {ratio}); choose a sample rate that divides 1/timestep")
    return steps


def _substeps(model: mujoco.MjModel, time: np.ndarray) -> int:
    """MuJoCo steps per sample; the samples must lie on a multiple of the model timestep."""
    dt = np.diff(time)
    period = float(np.median(dt))
    if np.max(np.abs(dt - period)) > 1e-9 + 1e-6 * period:
        raise DataError("trajectory time stamps are not uniformly spaced")
    return substeps_per_period(model, period)


def mit_torque(q, dq, q_des, dq_des, tau_ff, kp, kd) -> np.ndarray:
    """The MIT-mode joint law of Damiao-class drives: tau = kp (q_des - q) + kd (dq_des - dq) + tau_ff.

    Arrays broadcast: q, q_des rad; dq, dq_des rad/s; tau_ff N m; kp N m/rad; kd N m s/rad.
    Returns tau in N m with the broadcast shape.
    """
    return kp * (q_des - q) + kd * (dq_des - dq) + tau_ff


def diverged(data: mujoco.MjData) -> bool:
    """Whether MuJoCo has reported a diverging state since ``data`` was made or reset.

    MuJoCo resets a diverged state to qpos0 rather than propagating NaN, so the warning
    counters are the evidence.
    """
    counts = data.warning.number  # one array read: this runs once per control period
    return bool(counts[_DIVERGENCE_INDEX[0]] or counts[_DIVERGENCE_INDEX[1]] or counts[_DIVERGENCE_INDEX[2]])


def step(model: mujoco.MjModel, data: mujoco.MjData, tau, substeps: int = 1) -> None:
    """Apply joint torques tau (nv,) N m as ``qfrc_applied`` and hold them for ``substeps`` mj_step calls.

    The model's actuators are left alone (set ``data.ctrl`` to 0 for a torque-driven arm).
    Raises DataError when MuJoCo reports divergence (see ``diverged``).
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


def simulate_tracking(model: mujoco.MjModel, trajectory: Trajectory, feedforward, kp, kd,
                      noise: MeasurementNoise = MeasurementNoise(), seed=None, joint_names=None,
                      progress: Callable[[float], None] | None = None,
                      joint_friction: Callable[[np.ndarray], np.ndarray] | None = None) -> Recording:
    """Forward-simulate the arm tracking ``trajectory`` under PD + feedforward control.

    At every sample i (the control and measurement instants, uniform at the trajectory's
    sample rate) the controller reads the true state and commands
    tau_i = kp (q_des_i - q) + kd (dq_des_i - dq) + feedforward_i, held through
    ``round(1 / (sample_rate * timestep))`` MuJoCo steps and applied as ``qfrc_applied``
    (the model's actuators get ctrl = 0). The simulation starts at the plan's q[0], dq[0].

    feedforward: (N, n) N m, typically the nominal model's inverse dynamics of the plan.
    kp (N m/rad), kd (N m s/rad): scalars or (n,); see ``default_gains``.
    noise: added to the recorded q, dq and commanded tau after the run (``seed`` seeds it).
    progress: called with the completed fraction in [0, 1] about every 5 % of the run.
    joint_friction: extra friction of the plant beyond the MJCF's frictionloss and damping, e.g.
    a ``StribeckFriction``: f(qvel (n,) rad/s) -> (n,) N m, the torque opposing the motion;
    -f(qvel) is added to the commanded torque in ``qfrc_applied`` before every MuJoCo step
    (re-evaluated each step, not held per sample). The recorded torque stays the commanded one,
    as a motor reports it.
    Returns a Recording (N samples, time as planned) with ddq=None: accelerations must
    come from the measurements. Raises DataError if the simulation diverges, ValueError
    for a timestep that does not divide the sample period or for bad gains.
    """
    _check_model(model)
    num = _check_trajectory(model, trajectory)
    names = _joint_names(model, joint_names)
    n = model.nv
    time = np.asarray(trajectory.time, dtype=float)
    ff = np.asarray(feedforward, dtype=float)
    if ff.shape != (num, n):
        raise DataError(f"feedforward has shape {ff.shape}, expected ({num}, {n})")
    if not np.all(np.isfinite(ff)):
        raise DataError("feedforward contains NaN or infinite values")
    kp = _per_joint(kp, n, "kp", "N m/rad")
    kd = _per_joint(kd, n, "kd", "N m s/rad")
    steps = _substeps(model, time)

    data = mujoco.MjData(model)
    data.qpos[:] = trajectory.q[0]
    data.qvel[:] = trajectory.dq[0]
    data.ctrl[:] = 0.0
    qpos, qvel = data.qpos, data.qvel
    q_des, dq_des = np.asarray(trajectory.q, dtype=float), np.asarray(trajectory.dq, dtype=float)
    q_true, dq_true, tau_cmd = (np.empty((num, n)) for _ in range(3))
    report_every = max(1, int(np.ceil(_PROGRESS_STEP * (num - 1))))

    with mujoco_warnings() as messages:
        for i in range(num):
            q_true[i] = qpos
            dq_true[i] = qvel
            tau = mit_torque(qpos, qvel, q_des[i], dq_des[i], ff[i], kp, kd)
            tau_cmd[i] = tau
            if i == num - 1:
                break
            try:
                if joint_friction is None:
                    step(model, data, tau, steps)
                else:
                    for _ in range(steps):  # friction follows the velocity within the sample
                        step(model, data, tau - joint_friction(np.array(qvel)), 1)
            except DataError:
                raise DataError(f"simulation diverged between t={time[i]:.4f} s and t={time[i + 1]:.4f} s "
                                f"(MuJoCo: {' '.join(messages) or 'bad state'}): the gains are too high "
                                "for the timestep, or the feedforward is wrong") from None
            if progress is not None and (i + 1) % report_every == 0 and i + 1 < num - 1:
                progress((i + 1) / (num - 1))
    if not (np.all(np.isfinite(q_true)) and np.all(np.isfinite(dq_true)) and np.all(np.isfinite(tau_cmd))):
        first = int(np.flatnonzero(~np.isfinite(np.hstack([q_true, dq_true, tau_cmd])).any(axis=1))[0])
        raise DataError(f"simulation diverged: non-finite state at t={time[first]:.4f} s")
    if progress is not None:
        progress(1.0)

    gen = np.random.default_rng(seed)
    return Recording(time=time.copy(),
                     q=measure(q_true, noise.q_std, noise.q_resolution, gen),
                     dq=measure(dq_true, noise.dq_std, noise.dq_resolution, gen),
                     tau=measure(tau_cmd, noise.tau_std, noise.tau_resolution, gen),
                     joint_names=names)
