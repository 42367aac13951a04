"""Hardware-like recordings of the real-arm corpus: what a user's arm records and its file does not know.

``hardware_recording(arm, directory, controller)`` simulates one corpus arm (test/arm_corpus.py)
as a real arm behaves and records it as its drives would report it. The user's model is the
published file with the joint terms a URDF does not carry set to 0 on every joint
(``frictionloss``, ``damping``, ``armature``; bodies, springs, ranges and actuators as
published), written to ``directory``. The arm really is:

* loaded: the payload of ``arm_corpus.with_payload`` welded to its terminal body;
* rubbing: friction applied explicitly per joint (``simulation.StribeckFriction``, tanh sign over
  0.02 rad/s; MuJoCo's frictionloss and damping are 0 in the plant, its frictionloss being a
  soft constraint a real joint does not have). Coulomb c = U(0.04, 0.10) s N m, s the joint's
  torque scale: its RMS torque along a reference plan (the nominal model's inverse dynamics of
  a 30 s multisine at 100 Hz, seeded by the arm) but at least 5 % of the arm's largest, as a
  wrist drive of the arm's class rubs whatever its own link weighs. Viscous b =
  U(0.5, 1.5) c / RMS(dq) N m s/rad: comparable to the Coulomb level at the plan's speed.
  Stribeck on every third arm in ARMS order (or as asked): static friction above the Coulomb
  level by U(0.3, 0.8) c N m, Stribeck velocity U(0.05, 0.2) rad/s, Gaussian shape. The
  Coulomb level a Coulomb + viscous fit is compared with is ``coulomb``: the excess is extra;
* driven through gears: armature (reflected rotor inertia) a = f max(M, phi M_max) kg m^2,
  M the nominal mass-matrix diagonal averaged over the reference plan, M_max the arm's
  largest: f = U(0.1, 0.4) and phi = 0.01 on medium and heavy arms, f = U(1, 3) and
  phi = 0.05 on light ones, whose rotors reflected through 200-300:1 gears dwarf their links.
  The floor makes rotors dominate the distal joints, as on real arms;
* controlled by PD + feed-forward (not computed torque): tau = kp (q_des - q) + kd (dq_des - dq)
  + tau_ff, tau_ff the nominal model's inverse dynamics of the plan (it knows neither payload,
  friction nor armature). Gains are tuned on the arm itself, as a user tunes them: per joint
  kp = M' w^2, kd = 2 zeta w M', M' the arm's own (loaded, geared) mass-matrix diagonal
  averaged over the reference plan. ``mit`` (Damiao MIT mode): 8 Hz, zeta 0.9, the command
  computed from the previous cycle's feedback (one sample of delay, as over CAN). On an arm
  whose joints are all Damiao-sized (M' <= DAMIAO_MAX_INERTIA: every light arm and the small
  medium ones) the gains fit the protocol's fields, kd <= 5 and kp <= 500, kp lowered with a
  capped kd to keep zeta >= DAMIAO_MIN_DAMPING, as OpenArm's shoulders run (kp 150, kd 4.5,
  config/damiao_arm.yaml). Heavier arms keep their gains: no Damiao motor drives them, and
  clamped they would not follow the plan.
  ``trajectory_pd`` (ros2_control joint_trajectory_controller on an effort interface with the
  same feed-forward): 16 Hz, zeta 0.8, no delay (read, update, write in one cycle).
  Either law acts on the true state (noisy feedback would only add torque the recording holds
  anyway: the recorded torque is the one the drive applied).

Measurement noise, per joint, Gaussian: q 1e-4 rad, dq 5e-3 rad/s (``MeasurementNoise``'s
defaults) and tau r / 4096 N m (a motor current sense resolving its range in ~12 bits), at least
3e-4 N m (the current LSB of the smallest hobby servos). r is the drive's torque range: the
file's limit (``simulation.torque_limits``), at most 8 s (a file's limit far above anything the
joint carries, such as Panda-sized 35-87 N m on 0.2 kg hobby arms, is no drive's rating), 8 s
where the file has none. ``quantised=True`` adds the Damiao MIT feedback fields as resolutions:
position 16 bits over +-PMAX, velocity and torque 12 bits over +-VMAX and +-TMAX of the
smallest of DAMIAO_MOTORS whose TMAX covers r (beyond 200 N m: a 12-bit field over +-r).

Excitation: ``multisine`` over the nominal joint ranges, capped at MAX_VELOCITY rad/s and slowed
until the nominal torque stays within TORQUE_SHARE of the actuator limits (room for the payload,
friction, armature and feedback). Everything is deterministic: the truth per arm (seeded by its
name), the plan and the noise per (arm, ``seed``).

Imports only NumPy, MuJoCo and sysid_core, so that bench scripts can use it without the tests.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from arm_corpus import ARMS, arm as corpus_arm, with_payload
from sysid_core.damiao.protocol import KD_MAX, KP_MAX, MOTOR_LIMITS, POSITION_BITS, TORQUE_BITS, VELOCITY_BITS
from sysid_core.dynamics.model import Robot, load_robot
from sysid_core.excitation.design import slow_to_torque_limits
from sysid_core.excitation.multisine import multisine
from sysid_core.excitation.trajectory import Trajectory
from sysid_core.identification import recording_files
from sysid_core.identification.recording import Recording
from sysid_core.simulation import (MeasurementNoise, StribeckFriction, ideal_recording, measure, simulate_tracking,
                                   torque_limits)

CONTROLLERS = ("mit", "trajectory_pd")
# The friction law whose form the plant's is (its Coulomb step is a tanh over 0.02 rad/s): tanh
# for Coulomb + viscous arms, stribeck_tanh for those with a Stribeck peak
MATCHED_LAW = {False: "tanh", True: "stribeck_tanh"}
# What an identification of a case must recover: each joint's Coulomb level and viscous
# coefficient within 10 % of the truth plus 0.03 N m (N m s/rad), its armature within 15 % where
# it is a base parameter of its own, the payload's mass within 3 % and its centre of mass within
# 5 mm
FRICTION_TOLERANCE = (0.10, 0.03)
ARMATURE_TOLERANCE = 0.15
MASS_TOLERANCE, COM_TOLERANCE_MM = 0.03, 5.0
DEFAULT_DURATION = 30.0      # s: 22.5 s to identify from, 7.5 s held out (the last 25 %)
VALIDATION_FRACTION = 0.25
MAX_VELOCITY = 1.5           # rad/s
TORQUE_SHARE = 0.6
REFERENCE_DURATION, REFERENCE_RATE = 30.0, 100.0   # s, Hz: the plan the truth is scaled on
STRIBECK_ARMS = frozenset(a.name for a in ARMS[2::3])
# (bandwidth Hz, damping ratio, feedback delay in samples) per controller
GAINS = {"mit": (8.0, 0.9, 1), "trajectory_pd": (16.0, 0.8, 0)}
# kg m^2: kd 5 N m s/rad damps 1 kg m^2 to zeta 0.3 at 1.3 Hz; a heavier joint lags its plan by
# a good part of the refusal threshold under Damiao gains
DAMIAO_MAX_INERTIA = 1.0
DAMIAO_MIN_DAMPING = 0.3     # OpenArm's shoulders: kp 150, kd 4.5 on about 0.4 kg m^2
DAMIAO_MOTORS = ("DM4310", "DM4340", "DM8009", "DM6248", "DM10010L")
TAU_STD_FLOOR = 3e-4         # N m
CURRENT_SENSE_STEPS = 4096
RANGE_PER_SCALE = 8.0


@dataclass(frozen=True)
class HardwareNoise:
    """Per-joint measurement noise (n,) each: Gaussian std and resolution (0: continuous) of
    q rad, dq rad/s, tau N m, as ``MeasurementNoise`` but joint by joint."""

    q_std: np.ndarray
    dq_std: np.ndarray
    tau_std: np.ndarray
    q_resolution: np.ndarray
    dq_resolution: np.ndarray
    tau_resolution: np.ndarray


@dataclass(frozen=True, eq=False)
class HardwareCase:
    """One hardware-like recording and its truth; joints (n,) in the model's dof order.

    ``nominal_path`` the user's model (the published file, joint friction, damping and armature
    0); ``truth_xml`` the plant (payload welded, the truth armature written, friction and damping
    0: friction is ``friction``); ``payload`` (10,) [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]
    of the payload in the terminal body's frame (kg, kg m, kg m^2 about the body origin);
    ``coulomb`` N m, ``viscous`` N m s/rad, ``armature`` kg m^2; ``stribeck_excess`` N m and
    ``stribeck_velocity`` rad/s, None without Stribeck; ``friction`` the law the plant applied;
    ``kp`` N m/rad, ``kd`` N m s/rad, ``delay_samples`` the controller's; ``plan`` what it
    tracked; ``recording`` what the drives reported; ``noise`` what was added to it;
    ``max_velocity`` rad/s the plan's speed cap.
    """

    arm: str
    controller: str
    nominal_path: Path
    truth_xml: str
    payload: np.ndarray
    coulomb: np.ndarray
    viscous: np.ndarray
    armature: np.ndarray
    stribeck_excess: np.ndarray | None
    stribeck_velocity: np.ndarray | None
    friction: StribeckFriction
    kp: np.ndarray
    kd: np.ndarray
    delay_samples: int
    plan: Trajectory
    recording: Recording
    noise: HardwareNoise
    max_velocity: float

    @property
    def stribeck(self) -> bool:
        return self.stribeck_excess is not None

    def robot(self) -> Robot:
        """The user's model, loaded."""
        return load_robot(self.nominal_path)

    def split(self, fraction: float = VALIDATION_FRACTION) -> tuple[Recording, Recording]:
        """(train, validation): the validation is the last ``fraction`` of the recording."""
        return self.recording.split(fraction)

    def write_csv(self, path) -> Path:
        return recording_files.write_csv(path, self.recording)

    def write_rosbag(self, path, **options) -> Path:
        """A rosbag2 directory ``path`` (options of ``recording_files.write_rosbag``)."""
        return recording_files.write_rosbag(path, self.recording, **options)


def _joint_terms(xml: str, armature: dict | None = None) -> str:
    """``xml`` with frictionloss, damping and armature 0 on every joint of the worldbody, or
    armature ``armature[name]`` kg m^2 (every other attribute as written)."""
    root = ET.fromstring(xml)
    for joint in root.find("worldbody").iter("joint"):
        joint.set("frictionloss", "0")
        joint.set("damping", "0")
        joint.set("armature", repr(float((armature or {}).get(joint.get("name"), 0.0))))
    return ET.tostring(root, encoding="unicode")


def _mass_diagonal(robot: Robot, q: np.ndarray, parameters=None, armature=None) -> np.ndarray:
    """The joint-space mass-matrix diagonal (n,) kg m^2 averaged over the positions q (N, n) rad,
    of ``robot``'s bodies and armature or the given ones (Robot.mass_matrix)."""
    return np.diagonal(robot.mass_matrix(q, parameters, armature), axis1=1, axis2=2).mean(axis=0)


def _plan(robot: Robot, duration: float, rate: float, seed) -> tuple[Trajectory, float]:
    def make(velocity):
        return multisine(robot.joint_range, duration, rate, seed=seed, max_velocity=velocity)
    plan, velocity, _ = slow_to_torque_limits(make, robot, MAX_VELOCITY, usage=TORQUE_SHARE)
    return plan, velocity


def _drive_motor(torque_range: float) -> tuple[float, float, float]:
    """(pmax rad, vmax rad/s, tmax N m) of the smallest DAMIAO_MOTORS covering ``torque_range``."""
    for name in sorted(DAMIAO_MOTORS, key=lambda m: MOTOR_LIMITS[m].tmax):
        limits = MOTOR_LIMITS[name]
        if limits.tmax >= torque_range:
            return limits.pmax, limits.vmax, limits.tmax
    largest = MOTOR_LIMITS[max(DAMIAO_MOTORS, key=lambda m: MOTOR_LIMITS[m].tmax)]
    return largest.pmax, largest.vmax, torque_range


def _gains(controller: str, inertia: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    bandwidth, zeta, delay = GAINS[controller]
    omega = 2 * np.pi * bandwidth
    kp, kd = inertia * omega ** 2, 2 * zeta * omega * inertia
    if controller == "mit" and inertia.max() <= DAMIAO_MAX_INERTIA:
        kd = np.minimum(kd, KD_MAX)
        # a capped kd damps less: lower kp until the loop keeps DAMIAO_MIN_DAMPING
        kp = np.minimum.reduce([kp, np.full_like(kp, KP_MAX), kd ** 2 / (4 * DAMIAO_MIN_DAMPING ** 2 * inertia)])
    return kp, kd, delay


def hardware_recording(arm_name: str, directory, controller: str = "mit", duration: float = DEFAULT_DURATION,
                       rate: float = 1000.0, stribeck: bool | None = None, quantised: bool = False,
                       seed: int = 0) -> HardwareCase:
    """Simulate corpus arm ``arm_name`` as hardware (see the module docstring) and record it.

    ``directory`` receives the user's model ``<arm>_nominal.xml``. ``controller`` one of
    CONTROLLERS; ``duration`` s and ``rate`` Hz of the recording; ``stribeck`` None: the arm's
    own (every third arm of ARMS, STRIBECK_ARMS), True or False to force; ``quantised`` the
    Damiao feedback resolutions; ``seed`` the plan's and the noise's (the truth is the arm's).
    Raises sysid_core.errors.TrackingError when the arm does not follow the plan.
    """
    if controller not in CONTROLLERS:
        raise ValueError(f"controller must be one of {CONTROLLERS}, got '{controller}'")
    arm = corpus_arm(arm_name)
    key = zlib.crc32(arm.name.encode())
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    nominal_path = directory / f"{arm.name}_nominal.xml"
    nominal_path.write_text(_joint_terms(arm.path.read_text()))
    robot = load_robot(nominal_path)
    n = robot.n_joints

    # the truth: scaled on a reference plan that depends on the arm alone
    reference, _ = _plan(robot, REFERENCE_DURATION, REFERENCE_RATE, key)
    tau_rms = np.sqrt(np.mean(ideal_recording(robot.model, reference).tau ** 2, axis=0))
    dq_rms = np.sqrt(np.mean(reference.dq ** 2, axis=0))
    scale = np.maximum(tau_rms, 0.05 * tau_rms.max())
    mass = _mass_diagonal(robot, reference.q)
    draw = np.random.default_rng(key)
    coulomb = draw.uniform(0.04, 0.10, n) * scale
    viscous = draw.uniform(0.5, 1.5, n) * coulomb / dq_rms
    excess, velocity = draw.uniform(0.3, 0.8, n) * coulomb, draw.uniform(0.05, 0.2, n)
    light = arm.weight == "light"
    fraction = draw.uniform(1.0, 3.0, n) if light else draw.uniform(0.1, 0.4, n)
    armature = fraction * np.maximum(mass, (0.05 if light else 0.01) * mass.max())
    stribeck = arm.name in STRIBECK_ARMS if stribeck is None else bool(stribeck)
    friction = StribeckFriction(excess if stribeck else 0.0, velocity, coulomb=coulomb, viscous=viscous)

    payload = with_payload(arm.path)
    truth_xml = _joint_terms(payload.xml, dict(zip(robot.joint_names, armature)))
    truth = mujoco.MjModel.from_xml_string(truth_xml)
    loaded = robot.nominal_parameters.copy()
    loaded[robot.terminal_index] += payload.parameters  # the payload in the terminal body's frame
    kp, kd, delay = _gains(controller, _mass_diagonal(robot, reference.q, loaded, armature))

    limit = torque_limits(robot.model)
    torque_range = np.minimum(limit, RANGE_PER_SCALE * scale)  # inf limits give way to the scale
    plain = MeasurementNoise()
    noise = HardwareNoise(np.full(n, plain.q_std), np.full(n, plain.dq_std),
                          np.maximum(torque_range / CURRENT_SENSE_STEPS, TAU_STD_FLOOR), *np.zeros((3, n)))
    if quantised:
        fields = np.array([_drive_motor(r) for r in torque_range])
        noise = HardwareNoise(noise.q_std, noise.dq_std, noise.tau_std,
                              2 * fields[:, 0] / (2 ** POSITION_BITS - 1), 2 * fields[:, 1] / (2 ** VELOCITY_BITS - 1),
                              2 * fields[:, 2] / (2 ** TORQUE_BITS - 1))

    plan, max_velocity = _plan(robot, duration, rate, [key, seed])
    feedforward = ideal_recording(robot.model, plan).tau
    clean = simulate_tracking(truth, plan, feedforward, kp, kd, MeasurementNoise.off(), joint_names=robot.joint_names,
                              joint_friction=friction, delay_samples=delay)
    gen = np.random.default_rng([key, seed, 1])
    measured = {}
    for name in ("q", "dq", "tau"):
        true, std, res = getattr(clean, name), getattr(noise, f"{name}_std"), getattr(noise, f"{name}_resolution")
        measured[name] = np.column_stack([measure(true[:, j], std[j], res[j], gen) for j in range(n)])
    recording = Recording(clean.time, measured["q"], measured["dq"], measured["tau"], clean.joint_names,
                          quality_notes=clean.quality_notes)
    return HardwareCase(arm.name, controller, nominal_path, truth_xml, payload.parameters, coulomb, viscous, armature,
                        excess if stribeck else None, velocity if stribeck else None, friction, kp, kd, delay, plan,
                        recording, noise, max_velocity)


@dataclass(frozen=True, eq=False)
class Errors:
    """How far an identification of a case is from its truth: ``coulomb`` N m and ``viscous``
    N m s/rad (n,) absolute, ``armature`` (n,) relative (NaN where the joint's armature is not a
    base parameter of its own: ``IdentificationResult.lumped``), ``mass`` relative and ``com_mm``
    of the payload (the identified terminal body less the model's, against the welded payload)."""

    coulomb: np.ndarray
    viscous: np.ndarray
    armature: np.ndarray
    mass: float
    com_mm: float

    def failures(self, case: HardwareCase) -> list:
        """What is beyond the tolerances above, one line each (empty: everything within)."""
        out = []
        relative, absolute = FRICTION_TOLERANCE
        for name, error, truth in (("coulomb", self.coulomb, case.coulomb), ("viscous", self.viscous, case.viscous)):
            beyond = np.flatnonzero(error > relative * truth + absolute)
            out += [f"{name} of joint {j}: error {error[j]:.3g} on {truth[j]:.3g}" for j in beyond]
        out += [f"armature of joint {j}: {self.armature[j]:.1%}" for j in
                np.flatnonzero(np.nan_to_num(self.armature) > ARMATURE_TOLERANCE)]
        if abs(self.mass) > MASS_TOLERANCE:
            out.append(f"payload mass {self.mass:+.2%}")
        if self.com_mm > COM_TOLERANCE_MM:
            out.append(f"payload centre of mass {self.com_mm:.3g} mm")
        return out


def errors(case: HardwareCase, robot: Robot, result) -> Errors:
    """``Errors`` of ``result``, an identification of ``case`` with its model ``robot``."""
    lumped = {entry.partition(":")[0] for entry in result.lumped}
    separable = np.array([f"{j}.armature" not in lumped for j in robot.joint_names])
    armature = np.where(separable, np.abs(result.armature - case.armature) / case.armature, np.nan)
    found = result.terminal_parameters - robot.nominal_parameters[robot.terminal_index]
    com = found[1:4] / found[0] - case.payload[1:4] / case.payload[0] if found[0] > 0 else np.full(3, np.inf)
    return Errors(np.abs(result.coulomb - case.coulomb), np.abs(result.viscous - case.viscous), armature,
                  float(found[0] / case.payload[0] - 1.0), float(1000.0 * np.linalg.norm(com)))
