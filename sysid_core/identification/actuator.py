"""The actuator between the controller and the joint: a Damiao-class drive in MIT mode.

What identifying such an arm needs beyond the rigid bodies and friction:

``estimate_delay``
    The time from sending a command to the motor acting on it (bus, adapter, firmware), from
    the reported torque: each reply is the MIT law T = kp (p_des - q) + kd (v_des - dq) + t_ff
    of the command the motor was holding, at the state it reports, so the command that
    explains a reply names the delay.
``mit_loop_correction``
    Between two commands p_des (and v_des, t_ff) stand still while the joint moves on: the
    torque the motor applies is a sawtooth around the smooth torque that moves the arm, and
    a reply samples it at one point of each period. Sampled s after the command took effect,
    in a period T, the sample exceeds the smooth torque by (T/2 - s) dH/dt, where
    H = kp p_des + kd v_des + t_ff is the held part of the law (kp dq T/2 when the reply comes
    as the command takes effect: read as viscous friction kp / 2f if left in the data).
``calibrate_effort_gains``
    The reported torque is the firmware's estimate (current x torque constant x gear): off
    by a per-joint factor g = true torque / reported effort. One identification over two
    recordings of the same arm, alone and with a payload of known mass (and, if known, centre
    of mass), with the arm's parameters shared: g_j tau_j = W beta + payload torque. The
    payload's known torque sets the scale the arm alone cannot.

Everything is joint side (rad, rad/s, N m) and in the recording's joint order.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..dynamics.model import Robot
from ..errors import DataError
from . import estimation
from .identify import IdentificationConfig, identify, regression_blocks, structural_base_parameters
from .recording import Recording

_TIME_EPS = 1e-6         # s: stamps of one clock compared with this slack
# A reply names its command only when that command's law explains it clearly better than the
# neighbours': by this many torque quanta at least (the 12-bit feedback's resolution).
_UNAMBIGUOUS_QUANTA = 3.0
_COMMAND_LOG_FORMAT = "sysid_ros command log 1"


@dataclass(frozen=True, eq=False)
class CommandLog:
    """MIT commands as the motors decode them, joint side.

    ``time`` (K,) s the instants they were sent (the recording's clock); ``q_des`` (K, n) rad,
    ``dq_des`` (K, n) rad/s, ``tau_ff`` (K, n) N m (reported-effort units), ``kp`` (K, n)
    N m/rad, ``kd`` (K, n) N m s/rad; ``joint_names`` (n,).
    """

    time: np.ndarray
    q_des: np.ndarray
    dq_des: np.ndarray
    tau_ff: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    joint_names: tuple

    def __post_init__(self):
        k, n = len(self.time), len(self.joint_names)
        for name in ("q_des", "dq_des", "tau_ff", "kp", "kd"):
            if np.shape(getattr(self, name)) != (k, n):
                raise DataError(f"command log {name} has shape {np.shape(getattr(self, name))}, expected ({k}, {n})")
            if not np.all(np.isfinite(getattr(self, name))):
                raise DataError(f"command log {name} contains NaN or infinite values")
        if k < 3 or not np.all(np.diff(self.time) > 0):
            raise DataError("a command log needs at least 3 commands at strictly increasing times")

    @property
    def held(self) -> np.ndarray:
        """H = kp q_des + kd dq_des + tau_ff (K, n) N m: the part of the law a command holds."""
        return self.kp * self.q_des + self.kd * self.dq_des + self.tau_ff

    @property
    def period(self) -> float:
        """Median command period, s."""
        return float(np.median(np.diff(self.time)))

    def select(self, joint_names) -> "CommandLog":
        """Columns reordered to ``joint_names``; DataError naming what is missing."""
        missing = [j for j in joint_names if j not in self.joint_names]
        if missing:
            raise DataError(f"joints {missing} are not in the command log ({list(self.joint_names)})")
        idx = [self.joint_names.index(j) for j in joint_names]
        return CommandLog(self.time, *(np.asarray(getattr(self, a))[:, idx]
                                       for a in ("q_des", "dq_des", "tau_ff", "kp", "kd")), tuple(joint_names))

    def law(self, k, q, dq) -> np.ndarray:
        """The MIT law of commands ``k`` (index array) at states q, dq (broadcast), N m."""
        return self.kp[k] * (self.q_des[k] - q) + self.kd[k] * (self.dq_des[k] - dq) + self.tau_ff[k]

    def save(self, path, effort_gains=None) -> Path:
        """Write the log as a NumPy .npz archive (``load`` reads it back, exactly).

        ``effort_gains`` (n,) the gains the logging bridge applied (its published efforts are
        gain x reported, and so are tau_ff, kp and kd here); None: none applied (ones).
        """
        path = Path(path)
        if path.suffix != ".npz":
            raise DataError(f"a command log is an .npz file, got '{path.name}'")
        gains = np.ones(len(self.joint_names)) if effort_gains is None else np.asarray(effort_gains, dtype=float)
        if gains.shape != (len(self.joint_names),):
            raise DataError(f"command log: {gains.size} effort gains for {len(self.joint_names)} joints")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:   # np.savez would append .npz to a name without it
            np.savez(f, format=np.array(_COMMAND_LOG_FORMAT), time=self.time, q_des=self.q_des,
                     dq_des=self.dq_des, tau_ff=self.tau_ff, kp=self.kp, kd=self.kd,
                     joint_names=np.array(self.joint_names, dtype=str), effort_gains=gains)
        return path

    @classmethod
    def load(cls, path) -> "CommandLog":
        """Read a log ``save`` wrote; DataError for anything else (a missing file, another archive)."""
        return cls._read(path)[0]

    @staticmethod
    def saved_effort_gains(path) -> np.ndarray:
        """The effort gains (n,) the bridge applied while logging the file ``path`` (ones: none)."""
        return CommandLog._read(path)[1]

    @classmethod
    def _read(cls, path):
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                if str(f["format"]) != _COMMAND_LOG_FORMAT:
                    raise KeyError("format")
                log = cls(*(np.asarray(f[k], dtype=float) for k in ("time", "q_des", "dq_des", "tau_ff", "kp", "kd")),
                          tuple(str(j) for j in f["joint_names"]))
                return log, np.asarray(f["effort_gains"], dtype=float)
        except FileNotFoundError:
            raise DataError(f"command log not found: {path}") from None
        except DataError as err:
            raise DataError(f"{path}: {err}") from None
        except (OSError, ValueError, KeyError, TypeError, EOFError) as err:
            raise DataError(f"{path} is not a command log (.npz written by CommandLog.save: "
                            f"{type(err).__name__}: {err})") from None


@dataclass(frozen=True)
class DelayEstimate:
    """``delay`` s from sending a command to the motor acting on it (median over every reply
    that names its command); ``per_joint`` (n,) s the same per joint (NaN where no reply did);
    ``used`` (n,) how many replies of each joint named their command."""

    delay: float
    per_joint: np.ndarray
    used: np.ndarray


def estimate_delay(recording: Recording, commands: CommandLog, max_delay: float = 0.05,
                   torque_resolution=0.0) -> DelayEstimate:
    """The command-to-action delay, from which command's law explains each reported torque.

    For every reply i and joint j, the commands sent in [t_i - max_delay, t_i] are candidates;
    the one whose law at the reported state is nearest the reported torque names the delay
    t_i - t_k, if it is nearer than every other candidate by ``_UNAMBIGUOUS_QUANTA`` torque
    quanta (``torque_resolution`` (n,) or scalar N m, e.g. the feedback's 12-bit step; at
    least 1e-6 N m). A joint at rest gives no answer (its commands do not differ).
    DataError when no reply names its command.
    """
    commands = commands.select(recording.joint_names)
    n = len(recording.joint_names)
    t = np.asarray(recording.time, dtype=float)
    depth = int(math.ceil(max_delay / commands.period)) + 2
    last = np.searchsorted(commands.time, t + _TIME_EPS, side="right") - 1
    k = last[:, None] - np.arange(depth)[None, :]                          # (N, m) candidate commands
    valid = (k >= 0) & (t[:, None] - commands.time[np.maximum(k, 0)] <= max_delay + _TIME_EPS)
    kk = np.maximum(k, 0)
    error = np.abs(commands.law(kk, recording.q[:, None, :], recording.dq[:, None, :]) - recording.tau[:, None, :])
    error = np.where(valid[:, :, None], error, np.inf)                     # (N, m, n)
    order = np.sort(error, axis=1)
    best = np.argmin(error, axis=1)                                       # (N, n)
    margin = _UNAMBIGUOUS_QUANTA * np.maximum(np.broadcast_to(np.asarray(torque_resolution, dtype=float), (n,)),
                                              1e-6)
    clear = np.isfinite(order[:, 0]) & (order[:, 1] - order[:, 0] > margin) & (order[:, 0] < margin)
    lag = t[:, None] - commands.time[np.take_along_axis(kk, best, axis=1)]
    per_joint = np.array([np.median(lag[clear[:, j], j]) if clear[:, j].any() else np.nan for j in range(n)])
    used = clear.sum(axis=0)
    if not used.any():
        raise DataError("no reported torque can be matched to a command: is this the command log of this "
                        "recording, and did the arm move?")
    return DelayEstimate(float(np.median(lag[clear])), per_joint, used)


def mit_loop_correction(recording: Recording, commands: CommandLog, delay: float) -> Recording:
    """The recording with each sampled torque moved to the smooth torque that moved the arm.

    Command k acts from t_k + ``delay`` (s) until the next one does. A reply at t_i samples the
    command k acting then, s = t_i - t_k - delay into its period T = t_(k+1) - t_k; its torque
    becomes tau_i + (s - T/2) dH/dt (H = kp q_des + kd dq_des + tau_ff, its rate taken from the
    command log). Samples before the first command acts are dropped. Torques stay in the
    recording's units (reported effort).
    """
    commands = commands.select(recording.joint_names)
    t = np.asarray(recording.time, dtype=float)
    k = np.searchsorted(commands.time + delay, t + _TIME_EPS, side="right") - 1
    keep = (k >= 0) & (k < len(commands.time) - 1)
    if not keep.any():
        raise DataError("no sample of the recording falls while a logged command acts: wrong delay or log")
    rec = recording.rows(np.flatnonzero(keep))
    k = k[keep]
    period = commands.time[k + 1] - commands.time[k]
    s = rec.time - commands.time[k] - delay
    rate = np.gradient(commands.held, commands.time, axis=0)[k]
    return replace(rec, tau=rec.tau + (s - 0.5 * period)[:, None] * rate)


def apply_effort_gains(recording: Recording, gains: "EffortGains") -> Recording:
    """The recording with true joint torques: each reported effort times its joint's gain."""
    g = gains.for_joints(recording.joint_names)
    return replace(recording, tau=recording.tau * g)


# --------------------------------------------------------------------------- effort gains

COM_NEEDED = ("the calibration mass's centre of mass is needed (in the frame of the body it is fixed to, m): "
              "estimated from the same data, it takes the gains' scale with it (5-20 % low on the virtual arm, "
              "with standard deviations under 2 % that do not show it); measure it (CAD, a balance, a "
              "symmetric mass at a known point)")


@dataclass(frozen=True)
class KnownPayload:
    """A payload added for the calibration: ``mass`` kg; ``com`` (3,) m its centre of mass in
    the frame of the body it is fixed to (the robot's terminal body); its inertia is estimated.

    Both are needed (ValueError naming COM_NEEDED otherwise): with the first moment estimated
    as well, the known mass alone barely fixes the scale of the gains, which on the virtual arm
    came out 5-20 % low with standard deviations of 0.5-2 % that did not show it."""

    mass: float
    com: tuple | None = None

    def __post_init__(self):
        if not (math.isfinite(self.mass) and self.mass > 0):
            raise ValueError(f"payload mass must be positive and finite, got {self.mass}")
        if self.com is None:
            raise ValueError(COM_NEEDED)
        if np.shape(self.com) != (3,) or not np.all(np.isfinite(self.com)):
            raise ValueError(f"payload com must be three finite numbers (m), got {self.com}")


@dataclass(frozen=True, eq=False)
class EffortGains:
    """Per-joint effort gains g (n,) = true joint torque / reported effort, with their standard
    deviations ``std`` (n,); ``delay`` s the command delay seen while calibrating (None if not
    estimated); ``source`` a line saying where they came from."""

    joint_names: tuple
    gains: np.ndarray
    std: np.ndarray
    delay: float | None = None
    source: str = ""

    def __post_init__(self):
        n = len(self.joint_names)
        if np.shape(self.gains) != (n,) or np.shape(self.std) != (n,):
            raise ValueError(f"effort gains need one gain and one std per joint ({n})")
        if not (np.all(np.isfinite(self.gains)) and np.all(np.asarray(self.gains) > 0)):
            raise ValueError(f"effort gains must be positive and finite, got {np.asarray(self.gains).tolist()}")

    def for_joints(self, joint_names) -> np.ndarray:
        """Gains (n,) in ``joint_names`` order; DataError naming joints the calibration lacks."""
        missing = [j for j in joint_names if j not in self.joint_names]
        if missing:
            raise DataError(f"no effort gain for joints {missing}; the calibration has {list(self.joint_names)}")
        return np.array([self.gains[self.joint_names.index(j)] for j in joint_names], dtype=float)

    def to_dict(self) -> dict:
        return {"effort_gains": {j: {"gain": float(g), "std": float(s)}
                                 for j, g, s in zip(self.joint_names, self.gains, self.std)},
                "delay_s": self.delay, "source": self.source,
                "meaning": "true joint torque = gain * reported effort"}

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path) -> "EffortGains":
        """Read a file ``save`` wrote; DataError for anything else."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
            table = doc["effort_gains"]
            names = tuple(table)
            return cls(names, np.array([float(table[j]["gain"]) for j in names]),
                       np.array([float(table[j].get("std", 0.0)) for j in names]),
                       None if doc.get("delay_s") is None else float(doc["delay_s"]), str(doc.get("source", "")))
        except FileNotFoundError:
            raise DataError(f"effort gain file not found: {path}") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise DataError(f"{path} is not an effort gain file ({type(err).__name__}: {err})") from None


def _payload_columns(robot: Robot, samples: Recording, payload: KnownPayload):
    """The payload's known torque (N, n) and the columns (N, n, 6) of what is unknown about it
    (its inertia about the terminal body's origin)."""
    t = robot.terminal_index
    columns = robot.regressor(samples.q, samples.dq, samples.ddq)[..., 10 * t:10 * t + 10]
    known = payload.mass * columns[..., 0] + columns[..., 1:4] @ (payload.mass * np.asarray(payload.com, dtype=float))
    return known, columns[..., 4:]


# calibrate_effort_gains: rounds of (nonlinear friction of the gain-scaled recording, gains) until the
# gains move by less than this share of their standard deviation, and at most this many rounds
GAIN_SETTLED = 0.1
GAIN_ROUNDS = 4


def calibrate_effort_gains(robot: Robot, alone: Recording, loaded: Recording, payload: KnownPayload,
                           config: IdentificationConfig | None = None, delay: float | None = None) -> EffortGains:
    """Per-joint effort gains from the same arm recorded alone and with a known payload.

    ``alone``, ``loaded``: recordings whose torques are the reported efforts (MIT-loop
    corrected where that matters, see ``mit_loop_correction``). One least-squares problem over
    both: g_j tau_j = W(q, dq, ddq) beta + K (+ the payload's torque in ``loaded``), with the
    arm's base parameters beta (full scope of ``config``: every body, friction, armature)
    shared, the payload's unknown parts free, and its known mass (and centre of mass) as the
    only absolute scale. A friction law with nonlinear parameters (Stribeck, tanh) takes them
    from an identification of ``alone`` scaled by the gains, the two found in turn (first
    unscaled) until the gains move by less than GAIN_SETTLED of their standard deviations (at
    most GAIN_ROUNDS rounds): unscaled, each joint's torque is off by its gain, which the arm's
    shared inertial parameters cannot absorb, and the laws' velocities come out wrong (on the
    virtual arm's joint 1, a DM8009, 0.5 and 0.13 rad/s for a Stribeck velocity of 0.1 and a
    sign velocity of 0.02: the DM8009 gains 0.3-0.4 % low, a payload mass 1.7 % low; one round
    later 0.03 % and 0.1 %). Equations are weighted by each joint's residual level; the standard
    deviations are widened by the residual's correlation time.
    DataError for unusable data.
    """
    config = IdentificationConfig(scope="full", estimator="wls") if config is None else config
    config = replace(config, scope="full", estimator="wls", robust=False)
    nonlinear = any(m.nonlinear_names for m in config.friction_models.for_joints(robot.n_joints)) \
        and not config.friction_models.is_default
    base = structural_base_parameters(robot, config)
    source = f"two-recording calibration, payload {payload.mass:g} kg at {list(np.round(payload.com, 4))} m"
    if not nonlinear:
        return EffortGains(robot.joint_names, *_effort_gains(robot, alone, loaded, payload, config, base), delay,
                           source)
    gains = None
    for _ in range(GAIN_ROUNDS):
        scaled = alone if gains is None else apply_effort_gains(alone, gains)
        values = tuple(f.nonlinear for f in identify(robot, scaled, config).friction)
        found = EffortGains(robot.joint_names, *_effort_gains(robot, alone, loaded, payload, config, base, values),
                            delay, source)
        settled = gains is not None and np.all(np.abs(found.gains - gains.gains) <= GAIN_SETTLED * found.std)
        gains = found
        if settled:
            return gains
    # still moving: say so where the gains are kept (the JSON's source line)
    return replace(gains, source=f"{source}; the gains still moved after {GAIN_ROUNDS} rounds with the friction laws")


def _effort_gains(robot: Robot, alone: Recording, loaded: Recording, payload: KnownPayload,
                  config: IdentificationConfig, base, nonlinear=None) -> tuple:
    """calibrate_effort_gains' least squares at given nonlinear friction values: gains (n,), std (n,)."""
    names = robot.joint_names
    n = robot.n_joints
    blocks, targets = [], []
    for recording, with_payload in ((alone, False), (loaded, True)):
        # the friction laws' columns filtered as the torque was (identify.regression_blocks)
        parts = list(regression_blocks(robot, recording, config, base, nonlinear))
        join = (lambda field: np.concatenate([getattr(s, field) for s, _, _ in parts]))
        samples = Recording(join("time"), join("q"), join("dq"), join("tau"), names, join("ddq"))
        if samples.n_samples < 50:
            raise DataError(f"too few samples to calibrate effort gains: {samples.n_samples}")
        w, known = (np.concatenate([part[k] for part in parts]) for k in (1, 2))
        num = samples.n_samples
        gain_cols = np.zeros((num, n, n))
        gain_cols[:, np.arange(n), np.arange(n)] = samples.tau
        blocks.append((gain_cols, -w, with_payload, samples))
        targets.append(known)
    pay_known, pay_cols = _payload_columns(robot, blocks[1][3], payload)
    k = pay_cols.shape[2]
    rows = []
    for (gain_cols, neg_w, with_payload, samples), known in zip(blocks, targets):
        extra = -pay_cols if with_payload else np.zeros(gain_cols.shape[:2] + (k,))
        rows.append((np.concatenate([gain_cols, neg_w, extra], axis=2),
                     known + (pay_known if with_payload else 0.0)))
    a = np.concatenate([r[0] for r in rows])                # (N, n, p)
    y = np.concatenate([r[1] for r in rows])                # (N, n)
    # per-joint weights from a first, unweighted fit
    first = np.linalg.lstsq(a.reshape(-1, a.shape[2]), y.reshape(-1), rcond=None)[0]
    sigma = np.sqrt(np.mean((y - a @ first) ** 2, axis=0))
    sigma = np.maximum(sigma, 1e-9 * max(float(sigma.max()), 1e-12))
    aw, yw = a / sigma[None, :, None], y / sigma
    x, *_ = np.linalg.lstsq(aw.reshape(-1, a.shape[2]), yw.reshape(-1), rcond=None)
    residual = yw - aw @ x
    dof = max(residual.size - a.shape[2], 1)
    variance = float(np.sum(residual ** 2)) / dof
    inflation = estimation.correlation_time(residual)
    covariance = np.linalg.pinv(aw.reshape(-1, a.shape[2]).T @ aw.reshape(-1, a.shape[2])) * variance * inflation
    gains, std = x[:n], np.sqrt(np.maximum(np.diag(covariance)[:n], 0.0))
    if not (np.all(np.isfinite(gains)) and np.all(gains > 0)):
        raise DataError(f"the effort gains came out {np.round(gains, 4).tolist()}: the recordings do not "
                        "determine them (did the payload move every joint's torque?)")
    return gains, std
