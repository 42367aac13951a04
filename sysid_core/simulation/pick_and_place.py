"""A pick-and-place cell: the arm at its everyday work, and a payload that changes on the way.

What an arm does between identifications is no excitation: it moves between the few poses of
its cell and waits at them. ``cell_poses`` draws such a cell from the joint ranges: three
stations (home, pick, place) and an approach pose above each workpiece station, the wrist
turned differently at the pick and at the place station (a part is picked in one orientation
and set down in another). ``pick_and_place_plan`` strings them into the cycle

    home -> above pick -> pick -> above pick -> above place -> place -> above place -> (home)

of rest-to-rest quintic moves (minimum jerk between rest poses: ``excitation.multisine.
transition``; each move as short as ``max_velocity`` allows, and at least one second), with a
pause at every pose: ``pause_s`` at the stations, where a gripper closes, opens or the cell
waits for the next part, ``via_pause_s`` at the approach poses. The cycle repeats for the
requested duration.

``simulate_pick_and_place`` runs the plant (``simulation.plant_model``: what ``simulate``
runs) under the MIT-mode PD + feed-forward law, as ``simulate_tracking`` does, and changes the
terminal body's inertial parameters at given instants, between two control samples: a tool
change, or a part taken by the gripper. The body's ``body_mass``, ``body_ipos``, ``body_iquat``
and ``body_inertia`` are rewritten and the model's derived constants recomputed
(``mj_setConst``: subtree masses and the inverse weights the friction-loss constraint scales
with); MuJoCo's dynamics read these fields at every step, so the next step already carries the
new body. The feed-forward is the caller's, sample by sample: one computed without the part is
a controller nobody told what the gripper holds, whose PD loop takes up the difference.

Hinge and slide joints only, as everywhere in the simulation wing; trajectory columns in MuJoCo
dof order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mujoco
import numpy as np

from ..dynamics.inertia import from_com_inertia, to_com_inertia
from ..errors import DataError
from ..excitation.multisine import transition, transition_duration
from ..excitation.trajectory import Trajectory
from ..identification.recording import Recording
from . import MeasurementNoise, TrackingQuality, _per_joint, _prepare, _run, mit_torque

POSE_NAMES = ("home", "above_pick", "pick", "above_place", "place")
STATIONS = ("home", "pick", "place")
# one cycle, as pose names; it closes back to its first pose
CYCLE = ("home", "above_pick", "pick", "above_pick", "above_place", "place", "above_place")
# Stations are drawn in this middle part of each joint's range (fractions of the range): a cell
# is laid out where the arm has room on every side, not at its end stops.
STATION_SPAN = (0.25, 0.75)
# The wrist (the last WRIST_JOINTS joints) holds the part differently at the pick and at the
# place station: one side of the wrist's middle range at the pick, the other at the place, so
# each wrist joint turns by at least WRIST_TURN of its range between the two.
WRIST_JOINTS = 3
WRIST_TURN = 0.3
# An approach pose is its station with the joints before the wrist moved by this fraction of
# their range (up to it, sign drawn): lifting the part clear of the fixture.
APPROACH_OFFSET = 0.06


@dataclass(frozen=True, eq=False)
class CellPoses:
    """The poses of a cell: ``names`` (P,) and joint positions ``q`` (P, n) rad (m for slides)."""

    names: tuple
    q: np.ndarray

    def pose(self, name: str) -> np.ndarray:
        return self.q[self.names.index(name)]


def cell_poses(joint_range, seed=0) -> CellPoses:
    """A pick-and-place cell within ``joint_range`` (n, 2) rad (finite limits), drawn from ``seed``.

    Stations home, pick and place: each joint uniform in STATION_SPAN of its range, except the
    last WRIST_JOINTS joints (all of them on an arm of WRIST_JOINTS joints or fewer, none on a
    single joint) at pick and place: one in [0.15, 0.5 - WRIST_TURN / 2] of its range, the other
    in [0.5 + WRIST_TURN / 2, 0.85], the side drawn per joint. Approach poses above_pick and
    above_place: their station with the joints before the wrist moved by up to APPROACH_OFFSET
    of their range. Returns CellPoses named POSE_NAMES."""
    rng = np.asarray(joint_range, dtype=float)
    if rng.ndim != 2 or rng.shape[1] != 2 or not np.all(np.isfinite(rng)) or np.any(rng[:, 0] >= rng[:, 1]):
        raise ValueError(f"joint_range must be (n, 2) finite with lower < upper, got {rng.tolist()}")
    n = rng.shape[0]
    lower, width = rng[:, 0], rng[:, 1] - rng[:, 0]
    gen = np.random.default_rng(seed)
    wrist = np.zeros(n, dtype=bool)
    wrist[max(0, n - WRIST_JOINTS):] = n > 1
    fraction = {name: gen.uniform(*STATION_SPAN, n) for name in STATIONS}
    low_side = gen.random(n) < 0.5
    near = gen.uniform(0.15, 0.5 - WRIST_TURN / 2, n)
    far = gen.uniform(0.5 + WRIST_TURN / 2, 0.85, n)
    fraction["pick"] = np.where(wrist, np.where(low_side, near, far), fraction["pick"])
    fraction["place"] = np.where(wrist, np.where(low_side, far, near), fraction["place"])
    q = {name: lower + f * width for name, f in fraction.items()}
    for station in ("pick", "place"):
        lift = np.where(wrist, 0.0, gen.uniform(-APPROACH_OFFSET, APPROACH_OFFSET, n) * width)
        q["above_" + station] = q[station] + lift
    return CellPoses(POSE_NAMES, np.array([q[name] for name in POSE_NAMES]))


@dataclass(frozen=True, eq=False)
class PickAndPlacePlan:
    """A cell's cycle sampled at one rate. ``trajectory`` the joints' plan; ``moving`` (N,) bool
    whether the plan moves at each sample (False in the pauses); ``pose`` (N,) int the index in
    ``poses.names`` of the pose the arm rests at or moves to; ``arrivals`` (k,) s the start of
    every pause and ``arrival_pose`` (k,) int its pose."""

    trajectory: Trajectory
    moving: np.ndarray
    pose: np.ndarray
    arrivals: np.ndarray
    arrival_pose: np.ndarray
    poses: CellPoses

    def arrivals_at(self, name: str) -> np.ndarray:
        """The start (s) of every pause at pose ``name``."""
        return self.arrivals[self.arrival_pose == self.poses.names.index(name)]

    def motion_time(self, start: float, end) -> np.ndarray:
        """Seconds the plan moves between ``start`` and each of ``end`` (s, scalar or (k,)):
        sample periods at moving samples, the pauses left out."""
        time = self.trajectory.time
        period = time[1] - time[0]
        moved = np.concatenate([[0.0], np.cumsum(self.moving[:-1] * period)])  # at each sample
        return np.interp(end, time, moved) - np.interp(start, time, moved)


def pick_and_place_plan(poses: CellPoses, sample_rate: float, duration: float, max_velocity=1.0,
                        pause_s: float = 0.5, via_pause_s: float = 0.1) -> PickAndPlacePlan:
    """The cycle CYCLE over ``poses`` (CellPoses with the POSE_NAMES poses), repeated from home
    for ``duration`` s at ``sample_rate`` Hz.

    Each move: ``transition`` at rest between the poses, its duration ``transition_duration``
    with ``max_velocity`` rad/s (scalar or (n,): every joint's peak speed, 1.875 times its mean)
    rounded up to the grid. Each pose is held still for ``pause_s`` s at a station (home, pick,
    place) and ``via_pause_s`` s at an approach pose, rounded to the grid. The plan starts at
    rest at home (a pause) and is cut to round(duration * sample_rate) + 1 samples.
    """
    if not (np.isfinite(sample_rate) and sample_rate > 0 and np.isfinite(duration) and duration > 0):
        raise ValueError(f"sample_rate and duration must be > 0, got {sample_rate} Hz, {duration} s")
    if not (pause_s >= 0 and via_pause_s >= 0):
        raise ValueError(f"pauses must be >= 0 s, got {pause_s}, {via_pause_s}")
    missing = [name for name in CYCLE if name not in poses.names]
    if missing:
        raise ValueError(f"the cell has no pose {missing}")
    rate = float(sample_rate)
    num = int(round(duration * rate)) + 1
    index = [poses.names.index(name) for name in CYCLE]
    q_parts, dq_parts, ddq_parts, moving_parts, pose_parts, arrivals, arrival_pose = [], [], [], [], [], [], []
    count, k = 0, 0
    while count < num:
        here, there = index[k % len(index)], index[(k + 1) % len(index)]
        hold = int(round((pause_s if poses.names[here] in STATIONS else via_pause_s) * rate))
        if hold:
            arrivals.append(count / rate)
            arrival_pose.append(here)
            q_parts.append(np.repeat(poses.q[here][None], hold, axis=0))
            dq_parts.append(np.zeros((hold, poses.q.shape[1])))
            ddq_parts.append(np.zeros((hold, poses.q.shape[1])))
            moving_parts.append(np.zeros(hold, dtype=bool))
            pose_parts.append(np.full(hold, here))
            count += hold
        periods = int(np.ceil(transition_duration(poses.q[here], poses.q[there], max_velocity) * rate - 1e-9))
        move = transition(poses.q[here], np.zeros_like(poses.q[here]), poses.q[there], np.zeros_like(poses.q[here]),
                          periods / rate, rate)
        # the move's last sample is the next pose at rest: the next pause's (or move's) first
        q_parts.append(move.q[:-1])
        dq_parts.append(move.dq[:-1])
        ddq_parts.append(move.ddq[:-1])
        moving = np.ones(periods, dtype=bool)
        moving[0] = False  # at rest, about to leave
        moving_parts.append(moving)
        pose_parts.append(np.full(periods, there))
        count += periods
        k += 1
    q, dq, ddq = (np.concatenate(parts)[:num] for parts in (q_parts, dq_parts, ddq_parts))
    trajectory = Trajectory(time=np.arange(num) / rate, q=q, dq=dq, ddq=ddq)
    arrivals = np.array(arrivals)
    keep = arrivals < trajectory.time[-1]
    return PickAndPlacePlan(trajectory, np.concatenate(moving_parts)[:num], np.concatenate(pose_parts)[:num],
                            arrivals[keep], np.array(arrival_pose, dtype=int)[keep], poses)


@dataclass(frozen=True, eq=False)
class BodyChange:
    """What is added to a body at ``time`` s: ``parameters`` (10,) standard parameters [m, hx,
    hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] (kg, kg m, kg m^2) about the body's frame origin in its
    axes, e.g. a payload's; negative to take one away again."""

    time: float
    parameters: np.ndarray


@dataclass(frozen=True, eq=False)
class PickAndPlaceRun:
    """A simulated run with its changes. ``recording`` what the drives report; ``quality`` how
    well the arm followed the plan; ``change_times`` (k,) s the sample at which each change took
    effect (the torque of that sample acted on the new body); ``body_parameters`` (k + 1, 10) the
    changed body's own standard parameters before the first change and after each."""

    recording: Recording
    quality: TrackingQuality
    change_times: np.ndarray
    body_parameters: np.ndarray


def body_standard_parameters(model: mujoco.MjModel, body: int) -> np.ndarray:
    """MuJoCo body ``body``'s own inertial parameters (10,), about its frame origin in its axes,
    from body_mass, body_ipos, body_iquat and body_inertia."""
    rotation = np.empty(9)
    mujoco.mju_quat2Mat(rotation, model.body_iquat[body])
    rotation = rotation.reshape(3, 3)
    inertia = rotation @ np.diag(model.body_inertia[body]) @ rotation.T
    return from_com_inertia(float(model.body_mass[body]), model.body_ipos[body], inertia)


def set_body_parameters(model: mujoco.MjModel, body: int, parameters) -> None:
    """Write ``parameters`` (10,) (about the body's origin, in its axes) into MuJoCo body
    ``body`` of ``model`` in place: body_mass, body_ipos, the principal axes body_iquat and
    moments body_inertia, then the constants derived from them (``mj_setConst``, on a scratch
    MjData). DataError for parameters that are no rigid body (MuJoCo needs a positive mass and
    principal moments that satisfy the triangle inequality)."""
    theta = np.asarray(parameters, dtype=float)
    try:
        com = to_com_inertia(theta)
    except ValueError as exc:
        raise DataError(f"body {body}: {exc}") from None
    moments, axes = np.linalg.eigh(0.5 * (com.inertia + com.inertia.T))
    if moments[0] <= 0 or moments[0] + moments[1] < moments[2] * (1 - 1e-9):
        raise DataError(f"body {body}: principal moments {moments.tolist()} are no rigid body's")
    if np.linalg.det(axes) < 0:
        axes[:, 0] = -axes[:, 0]
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, axes.reshape(-1))
    model.body_mass[body] = com.mass
    model.body_ipos[body] = com.com
    model.body_iquat[body] = quat
    model.body_inertia[body] = moments
    mujoco.mj_setConst(model, mujoco.MjData(model))


def _terminal_body(model: mujoco.MjModel, body) -> int:
    if body is None:
        return int(model.jnt_bodyid[model.njnt - 1])
    found = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
    if found < 0:
        raise ValueError(f"body '{body}' is not in the model")
    return int(found)


def simulate_pick_and_place(model: mujoco.MjModel, trajectory: Trajectory, feedforward, kp, kd,
                            changes=(), body: str | None = None,
                            noise: MeasurementNoise = MeasurementNoise(), seed=None, joint_names=None,
                            joint_friction: Callable[[np.ndarray], np.ndarray] | None = None,
                            delay_samples: int = 0) -> PickAndPlaceRun:
    """The plant of ``model`` tracking ``trajectory`` in MIT mode while ``body`` (a MuJoCo body
    name; default the body of the last joint, the terminal body) changes as ``changes``
    (BodyChange, ...) say.

    As ``simulate_tracking``: tau_i = kp (q_des_i - q) + kd (dq_des_i - dq) + feedforward_i
    (N, n) N m, on the state ``delay_samples`` samples old; ``joint_friction`` extra plant
    friction; ``noise`` added to what is recorded (``seed``); the same checks (TrackingError
    for a limit hit, a divergence, a run that did not follow its plan). A change takes effect
    at the first sample at or after its time, before that sample's torque acts; the changed
    body must stay a rigid body (DataError otherwise). ``model`` itself is not changed.
    """
    if isinstance(delay_samples, (bool, np.bool_)) or not isinstance(delay_samples, (int, np.integer)) \
            or delay_samples < 0:
        raise ValueError(f"delay_samples must be an int >= 0, got {delay_samples!r}")
    names = _prepare(model, trajectory, joint_names)
    time = np.asarray(trajectory.time, dtype=float)
    num, n = len(time), model.nv
    ff = np.asarray(feedforward, dtype=float)
    if ff.shape != (num, n) or not np.all(np.isfinite(ff)):
        raise DataError(f"feedforward must be finite of shape ({num}, {n}), got {ff.shape}")
    kp, kd = _per_joint(kp, n, "kp", "N m/rad"), _per_joint(kd, n, "kd", "N m s/rad")
    changes = sorted(changes, key=lambda c: c.time)
    # the plant is a copy of ``model`` with its timing: the same bodies
    target = _terminal_body(model, body)
    at = [int(np.searchsorted(time, c.time - 1e-9 * (time[1] - time[0]))) for c in changes]
    bodies = [body_standard_parameters(model, target)]
    for change in changes:
        bodies.append(bodies[-1] + np.asarray(change.parameters, dtype=float))
    q_des, dq_des = np.asarray(trajectory.q, dtype=float), np.asarray(trajectory.dq, dtype=float)
    pending = [0]

    def law(i, q, dq):
        return mit_torque(q, dq, q_des[i], dq_des[i], ff[i], kp, kd)

    def change_body(i, plant):
        while pending[0] < len(changes) and at[pending[0]] <= i:
            pending[0] += 1
            set_body_parameters(plant, target, bodies[pending[0]])

    run = _run(model, trajectory, law, noise, seed, names, None, joint_friction, int(delay_samples), change_body)
    change_times = np.array([time[i] if i < num else np.inf for i in at])
    return PickAndPlaceRun(run.recording, run.quality, change_times, np.array(bodies))
