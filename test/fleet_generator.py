"""A generated fleet of arms: recordings of many simulated arms on many dates, for sysid-fleet.

``generate_fleet(directory)`` writes a self-contained fleet directory and returns its truth::

    manifest.yaml                 options, robots, their models and recordings (paths relative to it)
    models/<arm>.xml | .urdf      copies of the corpus models: the nominal models identified
    logs/<robot>/<date>.csv       one recording a day; a rosbag2 MCAP directory logs/<robot>/<date>/
                                  for the robots in BAG_ROBOTS; <date>_a.csv and <date>_b.csv, two
                                  stretches SPLIT_GAP_S apart, for the date SPLIT names

Each robot is a corpus arm (test/models/real_arms; robot k is ARM_NAMES[k % 6]) and a PLANT its
model file does not know:

* a payload welded to its terminal body (arm_corpus.with_payload: a tilted box with an offset
  centre of mass), of mass PAYLOAD_SPREAD times arm_corpus.PAYLOAD_FRACTION of the arm's moving
  mass, mass and shape drawn per robot;
* joint friction tau_f = coulomb sign(dq) + viscous dq: per joint, coulomb COULOMB_FRACTION of the
  joint's torque scale (``torque_scales``: its largest gravity torque, N m) and viscous
  VISCOUS_FRACTION of it per rad/s, drawn per robot. The file's own damping and frictionloss are
  not in the plant: this law replaces them;
* rotor inertia (armature) ARMATURE_FACTOR times the file's, or ARMATURE_PER_TORQUE times the
  joint's torque scale where the file has none (iiwa14, z1, gen3).

A day's recording: the arm follows a multisine (excitation.multisine, seeded per robot and day,
centred on the home keyframe, every joint capped at MAX_VELOCITY) exactly. The joint torque is
MuJoCo's inverse dynamics of the plant along the plan (mj_inverse with the plant's armature and
the plan's exact acceleration; actuators, contacts and gravcomp off as simulation.plant_model
does) plus the friction law at that day's levels (``Drift``). Then Damiao-like measurement: torque
noise TORQUE_NOISE of each joint's RMS torque and a TORQUE_BITS field over +-TORQUE_RANGE times
its torque scale; position and velocity noise and quantisation (NOISE). No acceleration is
recorded (drives do not measure it). Times are wall clock (epoch s, UTC) on the recording's date:
DAY_START, plus ROBOT_STAGGER_S per robot.

Everything is drawn from ``seed``: the same seed gives byte-identical files.

Imports NumPy, MuJoCo, PyYAML, sysid_core and arm_corpus only (no test framework), so that bench
scripts can use it through sys.path as they use arm_corpus.
"""
from __future__ import annotations

import copy
import datetime
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import mujoco
import numpy as np
import yaml

from arm_corpus import BY_NAME, PAYLOAD_FRACTION, _moving_mass, with_payload
from sysid_core.dynamics.model import load_robot
from sysid_core.excitation.multisine import multisine
from sysid_core.excitation.trajectory import Trajectory
from sysid_core.identification.recording import Recording
from sysid_core.identification.recording_files import write_csv, write_rosbag
from sysid_core.simulation import MeasurementNoise, measure, plant_model, simulation_timing

# The fleet's arms, in turn. Each identifies in the terminal scope from one day of this excitation
# with a good verdict on every date (bench/fleet_generator.py).
ARM_NAMES = ("panda", "xarm7", "iiwa14", "ur5e", "z1", "gen3")
URDF_ROBOTS = frozenset({0})   # robots given by their arm's corpus URDF (the same arm, own joint names)
BAG_ROBOTS = frozenset({2})    # robots whose days are rosbag2 MCAP directories instead of CSV files
SPLIT = (1, 1)                 # (robot, day index): that date's recording is two files
SPLIT_GAP_S = 5.0              # s from the end of the first file to the start of the second
DAY_START = datetime.time(9, 0)  # UTC
ROBOT_STAGGER_S = 600.0        # robot k starts k times this later

MAX_VELOCITY = 1.2             # rad/s, each joint's speed cap of the multisine
PAYLOAD_SPREAD = (0.6, 1.4)    # times PAYLOAD_FRACTION of the arm's moving mass, drawn per robot
COULOMB_FRACTION = (0.02, 0.05)  # of the joint's torque scale, drawn per robot and joint
VISCOUS_FRACTION = (0.02, 0.05)  # of the joint's torque scale per rad/s, drawn per robot and joint
ARMATURE_FACTOR = 1.3          # the plant's rotor inertia over the file's
# Where the file has no armature: kg m^2 per N m of torque scale (s^2). Panda's file gives 0.1 kg m^2
# on joints of 54 N m torque scale, 1.9e-3.
ARMATURE_PER_TORQUE = 2e-3
# A joint's torque scale is at least this fraction of the arm's largest: a flange joint that
# gravity never loads still has a motor, a gear and their friction.
SCALE_FLOOR = 0.05
# Damiao-like drives: position a 16-bit field over +-12.5 rad (3.8e-4 rad), velocity a 12-bit field
# over +-45 rad/s (0.022 rad/s), each with noise below a few counts; torque a 12-bit field over
# +-TORQUE_RANGE times the joint's torque scale (a drive sized for the joint's load; the recorded
# torques stay within 1.7 times it) with noise TORQUE_NOISE of the joint's RMS torque.
NOISE = MeasurementNoise(q_std=1e-4, dq_std=0.01, tau_std=0.0, q_resolution=3.8e-4, dq_resolution=0.022)
TORQUE_NOISE = 0.01
TORQUE_BITS = 12
TORQUE_RANGE = 2.0
TERMS = ("coulomb", "viscous")
GRAVITY = 9.81  # m/s^2, for the torque scales


@dataclass(frozen=True)
class Drift:
    """Wear of one joint: its ``term`` ("coulomb" or "viscous") rises by ``rate`` of its healthy
    level a day, linearly, from day index ``start`` (the first raised day):
    level(d) = healthy (1 + rate (d - start + 1)) for d >= start, the healthy level before.
    ``joint`` is the joint's index in the arm's order."""

    joint: int
    term: str
    start: int
    rate: float = 0.10

    def __post_init__(self):
        if self.term not in TERMS:
            raise ValueError(f"drift term must be one of {TERMS}, got '{self.term}'")
        if self.joint < 0 or self.start < 0:
            raise ValueError(f"drift joint and start are indices >= 0, got {self.joint} and {self.start}")

    def factor(self, days: int) -> np.ndarray:
        """(days,) the level over its healthy value on each day index."""
        return 1.0 + self.rate * np.maximum(0, np.arange(days) - self.start + 1)


# {robot index: Drift}: arm-02 (xarm7) shoulder Coulomb from day 6, arm-04 (ur5e) elbow viscous from
# day 8, arm-09 (iiwa14) shoulder viscous from day 5. Joints that carry the arm's load and move
# through the whole excitation; the identification sees these terms to 0.3-1.5 % from day to day
# (bench/fleet_generator.py, default fleet).
DRIFTS = {1: Drift(1, "coulomb", 6), 3: Drift(2, "viscous", 8), 8: Drift(1, "viscous", 5)}


@dataclass(frozen=True)
class DriftTruth:
    """A robot's drift by name: ``joint`` name, ``term``, ``since`` the first raised date, ``rate``
    per day (fraction of the healthy level)."""

    joint: str
    term: str
    since: datetime.date
    rate: float


@dataclass(frozen=True, eq=False)
class RobotTruth:
    """What one robot of the fleet really is.

    ``id`` its manifest id; ``index`` its place in the fleet; ``arm`` the corpus arm; ``model`` the
    model file (absolute path inside the fleet directory), ``urdf`` whether it is a URDF;
    ``joint_names`` (n,) the model's, the recordings' columns; ``terminal_body`` the model's
    terminal body; ``payload`` (10,) the welded payload's standard parameters [m, hx, hy, hz, Ixx,
    Ixy, Ixz, Iyy, Iyz, Izz] in that body's frame (kg, kg m, kg m^2, about the body origin);
    ``payload_seed`` what arm_corpus.with_payload drew its shape from; ``coulomb`` (n,) N m and
    ``viscous`` (n,) N m s/rad the healthy friction; ``armature`` (n,) kg m^2 the plant's rotor
    inertia; ``scale`` (n,) N m the torque scales the friction was drawn against;
    ``daily_coulomb``, ``daily_viscous`` (days, n) the levels on each date; ``drift`` (DriftTruth)
    or None; ``recordings`` (days,) tuples of each date's files (absolute paths, in time order);
    ``joint_range`` (n, 2) rad and ``center`` (n,) rad or None: the excitation's range and centre;
    ``split_day`` the day index recorded as two files, or None; ``seed`` (2,) day d's excitation
    is seeded [*seed, d].
    """

    id: str
    index: int
    arm: str
    model: Path
    urdf: bool
    joint_names: tuple
    terminal_body: str
    payload: np.ndarray
    payload_seed: int
    coulomb: np.ndarray
    viscous: np.ndarray
    armature: np.ndarray
    scale: np.ndarray
    daily_coulomb: np.ndarray
    daily_viscous: np.ndarray
    drift: DriftTruth | None
    recordings: tuple
    joint_range: np.ndarray
    center: np.ndarray | None
    split_day: int | None
    seed: tuple


@dataclass(frozen=True, eq=False)
class Fleet:
    """A generated fleet: ``directory``, its ``manifest`` (manifest.yaml), ``dates`` (days,)
    datetime.date, ``robots`` (RobotTruth, ...); ``seconds`` of motion recorded a day at
    ``rate_hz``; ``noise`` whether measurement noise was applied."""

    directory: Path
    manifest: Path
    dates: tuple
    robots: tuple
    seconds: float
    rate_hz: float
    noise: bool


def torque_scales(model: mujoco.MjModel, poses: int = 64, seed: int = 0) -> np.ndarray:
    """Each joint's torque scale (n,) N m: its largest gravity torque over ``poses`` random poses
    in the joint ranges (+-pi where unlimited) with gravity along each world axis in turn (a
    vertical first axis, which gravity never loads, gets the torque of carrying the arm sideways:
    what its motor and gear are sized for), floored at SCALE_FLOOR of the largest joint's."""
    model = copy.deepcopy(model)
    data = mujoco.MjData(model)
    lower = np.where(model.jnt_limited, model.jnt_range[:, 0], -np.pi)
    upper = np.where(model.jnt_limited, model.jnt_range[:, 1], np.pi)
    states = np.random.default_rng(seed).uniform(lower, upper, (poses, model.nv))
    scale = np.zeros(model.nv)
    for gravity in GRAVITY * np.eye(3):
        model.opt.gravity[:] = gravity
        for q in states:
            data.qpos[:] = q
            data.qvel[:] = 0.0
            mujoco.mj_forward(model, data)
            scale = np.maximum(scale, np.abs(data.qfrc_bias))
    return np.maximum(scale, SCALE_FLOOR * scale.max())


def plant(payload_xml: str, armature: np.ndarray, rate_hz: float) -> mujoco.MjModel:
    """The plant of a robot for mj_inverse: the arm with its payload (arm_corpus.with_payload's
    XML), simulation.plant_model's switches (actuators, contacts and gravcomp off), the plant's
    ``armature`` (n,) kg m^2, no damping or frictionloss (``friction_torque`` is added instead)."""
    model = mujoco.MjModel.from_xml_string(payload_xml)
    model.dof_armature[:] = armature
    model.dof_damping[:] = 0.0
    model.dof_frictionloss[:] = 0.0
    return plant_model(model, simulation_timing(model, rate_hz))


def inverse_dynamics(model: mujoco.MjModel, q: np.ndarray, dq: np.ndarray, ddq: np.ndarray) -> np.ndarray:
    """MuJoCo's inverse dynamics (N, n) N m of ``model`` along q, dq, ddq (N, n) rad, rad/s, rad/s^2."""
    data = mujoco.MjData(model)
    tau = np.empty_like(q)
    for i in range(len(q)):
        data.qpos[:], data.qvel[:], data.qacc[:] = q[i], dq[i], ddq[i]
        mujoco.mj_inverse(model, data)
        tau[i] = data.qfrc_inverse
    return tau


def friction_torque(dq: np.ndarray, coulomb: np.ndarray, viscous: np.ndarray) -> np.ndarray:
    """The plant's friction law (N, n) N m: coulomb sign(dq) + viscous dq; dq (N, n) rad/s,
    coulomb (n,) N m, viscous (n,) N m s/rad."""
    return coulomb * np.sign(dq) + viscous * dq


def day_plan(robot: RobotTruth, day: int, seconds: float, rate_hz: float) -> Trajectory:
    """The motion of ``robot`` on day index ``day``: a multisine of ``seconds`` at ``rate_hz`` (on the
    split day SPLIT_GAP_S longer: the arm keeps moving while nothing records), seeded [*seed, day]."""
    duration = seconds + (SPLIT_GAP_S if day == robot.split_day else 0.0)
    return multisine(robot.joint_range, duration, rate_hz, seed=[*robot.seed, day], max_velocity=MAX_VELOCITY,
                     center=robot.center)


def generate_fleet(directory, robots: int = 12, days: int = 14, seconds: float = 20.0, rate_hz: float = 200.0,
                   drifts: dict = DRIFTS, seed: int = 0, start: datetime.date = datetime.date(2026, 11, 1),
                   noise: bool = True) -> Fleet:
    """Write a fleet of ``robots`` arms recorded on ``days`` consecutive dates from ``start`` into
    ``directory`` (created; it must be absent or empty) and return its truth.

    ``seconds`` of motion recorded a day at ``rate_hz`` Hz; ``drifts`` {robot index: Drift} (entries
    of robots beyond ``robots`` are ignored; a start beyond ``days`` never shows); ``seed`` draws
    everything (payloads, friction, excitations, noise); ``noise`` False records the exact
    torque and state. The manifest's options are {scope: terminal}.
    """
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty: a fleet is written to a new directory")
    for k, drift in drifts.items():
        arm = BY_NAME[ARM_NAMES[k % len(ARM_NAMES)]]
        if k < robots and drift.joint >= arm.dof:
            raise ValueError(f"drift of robot {k}: joint index {drift.joint}, but {arm.name} has {arm.dof} joints")
    (directory / "models").mkdir(parents=True, exist_ok=True)
    dates = tuple(start + datetime.timedelta(days=d) for d in range(days))
    truths, entries = [], []
    for k in range(robots):
        truth, entry = _robot(directory, k, dates, float(seconds), float(rate_hz), drifts.get(k), seed, noise)
        truths.append(truth)
        entries.append(entry)
    manifest = directory / "manifest.yaml"
    manifest.write_text(yaml.dump({"options": {"scope": "terminal"}, "robots": entries}, Dumper=_Dumper,
                                  sort_keys=False))
    return Fleet(directory, manifest, dates, tuple(truths), float(seconds), float(rate_hz), bool(noise))


class _Dumper(yaml.SafeDumper):
    """Safe YAML that writes every date out (no anchors and aliases for repeated values)."""

    def ignore_aliases(self, data):
        return True


def _robot(directory: Path, k: int, dates: tuple, seconds: float, rate_hz: float, drift: Drift | None,
           seed: int, noise: bool) -> tuple:
    """(RobotTruth, manifest entry) of robot ``k``, its model copied and recordings written."""
    arm = BY_NAME[ARM_NAMES[k % len(ARM_NAMES)]]
    source = arm.urdf_path if k in URDF_ROBOTS and arm.urdf else arm.path
    model_path = directory / "models" / source.name
    if not model_path.exists():
        shutil.copyfile(source, model_path)  # the corpus files need no assets (meshes are not loaded)
    robot = load_robot(model_path)
    nominal = mujoco.MjModel.from_xml_path(str(arm.path))  # the URDF's twin: the plant is built from it

    rng = np.random.default_rng([seed, k])
    mass = PAYLOAD_FRACTION * _moving_mass(nominal) * rng.uniform(*PAYLOAD_SPREAD)
    payload_seed = int(rng.integers(2**31))
    payload = with_payload(arm.path, mass=mass, seed=payload_seed)
    scale = torque_scales(nominal)
    coulomb = rng.uniform(*COULOMB_FRACTION, nominal.nv) * scale
    viscous = rng.uniform(*VISCOUS_FRACTION, nominal.nv) * scale
    armature = np.where(nominal.dof_armature > 0, ARMATURE_FACTOR * nominal.dof_armature, ARMATURE_PER_TORQUE * scale)
    model = plant(payload.xml, armature, rate_hz)
    tau_quantum = 2.0 * TORQUE_RANGE * scale / 2**TORQUE_BITS

    days = len(dates)
    daily = {"coulomb": np.tile(coulomb, (days, 1)), "viscous": np.tile(viscous, (days, 1))}
    drift_truth = None
    if drift is not None:
        daily[drift.term][:, drift.joint] *= drift.factor(days)
        drift_truth = DriftTruth(robot.joint_names[drift.joint], drift.term,
                                 dates[0] + datetime.timedelta(days=drift.start), drift.rate)
    robot_id = f"arm-{k + 1:02d}"
    joint_range = np.column_stack([np.where(nominal.jnt_limited, nominal.jnt_range[:, i], s * np.inf)
                                   for i, s in ((0, -1), (1, 1))])
    truth = RobotTruth(robot_id, k, arm.name, model_path, source.suffix == ".urdf", robot.joint_names,
                       robot.terminal_body, payload.parameters, payload_seed, coulomb, viscous, armature, scale,
                       daily["coulomb"], daily["viscous"], drift_truth, (), joint_range, _center(arm, nominal),
                       SPLIT[1] if SPLIT[0] == k else None, (seed, k))

    logs = directory / "logs" / robot_id
    logs.mkdir(parents=True, exist_ok=True)
    files, listed = [], []
    for d, date in enumerate(dates):
        plan = day_plan(truth, d, seconds, rate_hz)
        tau = inverse_dynamics(model, plan.q, plan.dq, plan.ddq)
        tau += friction_torque(plan.dq, daily["coulomb"][d], daily["viscous"][d])
        q, dq = plan.q, plan.dq
        stretches = _stretches(plan.time, seconds, d == truth.split_day)
        if noise:
            gen = np.random.default_rng([seed, k, d])
            rms = np.sqrt(np.mean(tau[np.concatenate(stretches)] ** 2, axis=0))  # of what is recorded
            tau = np.round((tau + gen.standard_normal(tau.shape) * TORQUE_NOISE * rms) / tau_quantum) * tau_quantum
            q = measure(q, NOISE.q_std, NOISE.q_resolution, gen)
            dq = measure(dq, NOISE.dq_std, NOISE.dq_resolution, gen)
        origin = datetime.datetime.combine(date, DAY_START, datetime.timezone.utc).timestamp() + ROBOT_STAGGER_S * k
        day_files = []
        for part, rows in enumerate(stretches):
            recording = Recording(origin + plan.time[rows], q[rows], dq[rows], tau[rows], robot.joint_names)
            name = date.isoformat() + (f"_{'ab'[part]}" if len(stretches) > 1 else "")
            path = (write_rosbag(logs / name, recording, storage="mcap") if k in BAG_ROBOTS
                    else write_csv(logs / f"{name}.csv", recording))
            day_files.append(path)
            listed.append({"path": path.relative_to(directory).as_posix(), "date": date})
        files.append(tuple(day_files))
    entry = {"id": robot_id, "model": model_path.relative_to(directory).as_posix(), "recordings": listed}
    return replace(truth, recordings=tuple(files)), entry


def _stretches(time: np.ndarray, seconds: float, split: bool) -> list:
    """Row indices of each file of a day: all rows; or, split, those of the first half of
    ``seconds`` and those from SPLIT_GAP_S after the first half's last sample."""
    if not split:
        return [np.arange(len(time))]
    first = np.flatnonzero(time < 0.5 * seconds)
    return [first, np.flatnonzero(time >= time[first[-1]] + SPLIT_GAP_S)]


def _center(arm, model: mujoco.MjModel) -> np.ndarray | None:
    """The excitation's centre (n,) rad: the home keyframe's pose with each limited joint's value
    clipped into the middle half of its range (a home near a stop, as gen3's elbow 0.3 rad from its
    limit, leaves that joint too little room: its friction would drown in the velocity noise);
    None where the arm has no keyframe (the multisine then centres on the middle of the ranges)."""
    if arm.keyframe is None:
        return None
    home = model.key_qpos[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, arm.keyframe)].copy()
    lower, upper = model.jnt_range[:, 0], model.jnt_range[:, 1]
    quarter = 0.25 * (upper - lower)
    return np.where(model.jnt_limited, np.clip(home, lower + quarter, upper - quarter), home)

