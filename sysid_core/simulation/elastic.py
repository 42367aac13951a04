"""Elastic transmissions: each joint driven through a spring and a damper from a rotor of its own.

A harmonic or planetary drive twists under load: the motor-side encoder (motor angle / gear
ratio) and the link-side one disagree by the deflection delta = q_link - q_motor, and the link
receives tau_link = -(k delta + c d(delta)/dt), not the motor's torque. ``elastic_plant`` builds
that arm from a model file with MuJoCo's own elements, so MuJoCo integrates the coupled system:

* per joint a rotor body beside the link (a child of the link's parent, in the link's frame)
  with a hinge on the joint's axis, named ``<joint>_rotor``, massless but for a negligible
  placeholder, carrying the joint's armature (the reflected rotor inertia: the model's, or
  ``Transmission.rotor_inertia``), its damping and its friction loss: what the motor and the
  gearbox's input side dissipate;
* the link hinge keeps its rigid body only (armature, damping and friction loss zero), so the
  torque the transmission passes equals the rigid-body inverse dynamics of the link side;
* a fixed tendon ``<joint>_transmission`` of length q_link - q_rotor with the transmission's
  stiffness and damping as its spring and damper, rest length zero.

The drive's torque acts on the rotor. ``simulate_elastic`` tracks a plan in MIT mode with the
drive's loop on its motor-side encoder (collocated, as a servo drive closes it), around the
nominal rigid model's feed-forward. It records what a double-encoder arm reports: the link-side position and
velocity, the motor-side position, the commanded torque, each with noise.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import mujoco
import numpy as np

from ..errors import DataError, TrackingError
from ..excitation.trajectory import Trajectory
from ..identification.recording import Recording
from . import (ComputedTorque, MeasurementNoise, SimulationTiming, _PLANT_DISABLED, _assess, _counted_divergence,
               _sample_rate, default_gains, measure, mit_torque, mujoco_warnings, simulation_timing)

ROTOR_SUFFIX = "_rotor"
TRANSMISSION_SUFFIX = "_transmission"
# the rotor body's own mass (kg) and principal inertia (kg m^2): MuJoCo wants moving bodies to
# have some; the rotor's inertia about its axis is the hinge's armature
_PLACEHOLDER_MASS = 1e-6
_PLACEHOLDER_INERTIA = 1e-9
MAX_PHASE_PER_STEP = 0.2
MAX_DECAY_PER_STEP = 0.5


@dataclass(frozen=True, eq=False)
class Transmission:
    """Per joint (n,): ``stiffness`` N m/rad (> 0), ``damping`` N m s/rad (>= 0) and
    ``rotor_inertia`` kg m^2 reflected to the joint (> 0), or None for the model's armature."""

    stiffness: np.ndarray
    damping: np.ndarray
    rotor_inertia: np.ndarray | None = None

    def torque(self, lag: np.ndarray, lag_rate: np.ndarray) -> np.ndarray:
        """The torque (n,) N m passed to the links when the rotors lead them by ``lag`` rad at
        ``lag_rate`` rad/s (the negated deflection and its rate), (n,) each."""
        return self.stiffness * lag + self.damping * lag_rate

    def checked(self, n: int) -> "Transmission":
        def array(value, name, positive):
            a = np.broadcast_to(np.asarray(value, dtype=float), (n,)).copy()
            if not np.all(np.isfinite(a)) or np.any(a <= 0 if positive else a < 0):
                raise ValueError(f"transmission {name} must be {n} finite values {'> 0' if positive else '>= 0'}, "
                                 f"got {np.asarray(value).tolist()}")
            return a
        return Transmission(array(self.stiffness, "stiffness", True), array(self.damping, "damping", False),
                            None if self.rotor_inertia is None else array(self.rotor_inertia, "rotor_inertia", True))


@dataclass(frozen=True, eq=False)
class Gearbox:
    """What a real gearbox adds on the rotor that no rigid-body model with joint friction knows:
    friction growing with the torque it transmits, ``load_friction`` of ``|tau_link|`` (a fraction,
    >= 0), against the rotor's velocity (its sign smoothed over ``smoothing`` rad/s), and a
    cogging ripple ``ripple`` (n,) N m sin(``ripple_per_rad`` theta). ``torque`` is a
    ``simulate_elastic`` rotor torque."""

    load_friction: float = 0.0
    ripple: np.ndarray | float = 0.0
    ripple_per_rad: float = 8.0
    smoothing: float = 0.05

    def __post_init__(self):
        ripple = np.asarray(self.ripple, dtype=float)
        if not (np.isfinite(self.load_friction) and self.load_friction >= 0 and np.all(np.isfinite(ripple))
                and np.isfinite(self.ripple_per_rad) and self.smoothing > 0):
            raise ValueError(f"a gearbox needs load_friction >= 0, a finite ripple and ripple_per_rad and "
                             f"smoothing > 0, got {self}")

    def torque(self, theta: np.ndarray, dtheta: np.ndarray, tau_link: np.ndarray) -> np.ndarray:
        """(n,) N m on the rotor at rotor position theta rad, velocity dtheta rad/s and
        transmitted torque tau_link N m, (n,) each."""
        return (-self.load_friction * np.abs(tau_link) * np.tanh(dtheta / self.smoothing)
                + self.ripple * np.sin(self.ripple_per_rad * theta))


@dataclass(frozen=True, eq=False)
class ElasticPlant:
    """The compiled elastic arm, simulated as ``plant_model`` runs a rigid one (actuators,
    contacts and gravcomp off, ``timing``'s timestep). Per joint of ``joint_names`` (n,): the
    qpos and dof addresses of the link hinge and of its rotor hinge."""

    model: mujoco.MjModel
    timing: SimulationTiming
    joint_names: tuple
    link_qpos: np.ndarray
    link_dof: np.ndarray
    rotor_qpos: np.ndarray
    rotor_dof: np.ndarray
    transmission: Transmission


def elastic_plant(path, transmission: Transmission, sample_rate: float, drive_gains=None) -> ElasticPlant:
    """The arm of the MJCF or URDF file ``path`` with an elastic transmission at every hinge
    (see the module docstring), for control and samples at ``sample_rate`` Hz. ``drive_gains``
    (kp (n,) N m/rad, kd (n,) N m s/rad) of a drive loop closed on the rotor at every MuJoCo
    step, if any: the timestep is short enough for the rotor's fastest motion under the spring
    and those gains together."""
    spec = mujoco.MjSpec.from_file(str(Path(path)))
    rigid = spec.compile()
    joints = [j for j in spec.joints if j.type == mujoco.mjtJoint.mjJNT_HINGE]
    if len(joints) != rigid.njnt or rigid.nq != rigid.nv:
        raise DataError(f"{path}: an elastic transmission needs an arm of hinge joints only")
    names = tuple(j.name for j in joints)
    tr = transmission.checked(len(names))
    for i, joint in enumerate(joints):
        link = joint.parent
        rotor = link.parent.add_body(name=joint.name + ROTOR_SUFFIX, pos=link.pos, quat=link.quat,
                                     mass=_PLACEHOLDER_MASS, inertia=[_PLACEHOLDER_INERTIA] * 3)
        armature = float(rigid.dof_armature[rigid.jnt_dofadr[rigid.joint(joint.name).id]])
        inertia = armature if tr.rotor_inertia is None else float(tr.rotor_inertia[i])
        if inertia <= 0:
            raise DataError(f"joint '{joint.name}' has no armature in {path}: give the rotor inertia")
        rotor.add_joint(name=joint.name + ROTOR_SUFFIX, type=mujoco.mjtJoint.mjJNT_HINGE, pos=joint.pos,
                        axis=joint.axis, armature=inertia, damping=joint.damping, frictionloss=joint.frictionloss,
                        limited=mujoco.mjtLimited.mjLIMITED_FALSE)
        joint.armature, joint.frictionloss = 0.0, 0.0
        joint.damping = np.zeros_like(np.asarray(joint.damping, dtype=float))  # MuJoCo 4: a polynomial's terms
        tendon = spec.add_tendon(name=joint.name + TRANSMISSION_SUFFIX, stiffness=[float(tr.stiffness[i]), 0, 0],
                                 damping=[float(tr.damping[i]), 0, 0], springlength=[0.0, 0.0])
        tendon.wrap_joint(joint.name, 1.0)
        tendon.wrap_joint(joint.name + ROTOR_SUFFIX, -1.0)
    model = spec.compile()
    timing = simulation_timing(rigid, sample_rate)
    # the spring and the drive's gains act explicitly on the rotor: its fastest oscillation,
    # sqrt((k + kp) / J) rad/s, gets at most MAX_PHASE_PER_STEP rad per step, and its velocity
    # decays by at most MAX_DECAY_PER_STEP of itself per step under the damping (c + kd) / J
    rotor_inertia = np.array([model.dof_armature[model.jnt_dofadr[model.joint(n + ROTOR_SUFFIX).id]]
                              for n in names])
    kp, kd = (np.zeros(len(names)), np.zeros(len(names))) if drive_gains is None else drive_gains
    # and so do the link's, on the spring alone (the lightest link is often the stiffest mode)
    link_inertia = _link_inertia(model, np.array([model.jnt_dofadr[model.joint(n).id] for n in names]))
    rates = np.concatenate([np.sqrt((tr.stiffness + kp) / rotor_inertia) / MAX_PHASE_PER_STEP,
                            np.sqrt(tr.stiffness / link_inertia) / MAX_PHASE_PER_STEP,
                            (tr.damping + kd) / rotor_inertia / MAX_DECAY_PER_STEP,
                            tr.damping / link_inertia / MAX_DECAY_PER_STEP])
    substeps = max(timing.substeps, int(np.ceil(float(np.max(rates)) / timing.sample_rate)))
    if substeps > timing.substeps:
        timing = replace(timing, substeps=substeps, timestep=1.0 / (timing.sample_rate * substeps),
                         shortened_for="the transmissions' fastest motion")
    model.opt.timestep = timing.timestep
    model.opt.disableflags |= _PLANT_DISABLED
    model.body_gravcomp[:] = 0.0

    def address(kind, suffix=""):
        return np.array([getattr(model, kind)[model.joint(name + suffix).id] for name in names], dtype=int)
    return ElasticPlant(model=model, timing=timing, joint_names=names, link_qpos=address("jnt_qposadr"),
                        link_dof=address("jnt_dofadr"), rotor_qpos=address("jnt_qposadr", ROTOR_SUFFIX),
                        rotor_dof=address("jnt_dofadr", ROTOR_SUFFIX), transmission=tr)


def _link_inertia(model: mujoco.MjModel, dofs: np.ndarray) -> np.ndarray:
    """The joint-space inertia's diagonal (len(dofs),) at ``dofs`` in the model's reference pose."""
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    unit, column = np.zeros(model.nv), np.zeros(model.nv)
    out = np.empty(len(dofs))
    for i, dof in enumerate(dofs):
        unit[:] = 0.0
        unit[dof] = 1.0
        mujoco.mj_mulM(model, data, column, unit)
        out[i] = column[dof]
    return out


def simulate_elastic(path, trajectory: Trajectory, transmission: Transmission, nominal: mujoco.MjModel,
                     noise: MeasurementNoise = MeasurementNoise(), seed=None, bandwidth_hz: float = 8.0,
                     rotor_torque: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None
                     ) -> Recording:
    """The elastic arm of ``path`` tracking ``trajectory`` (columns in the file's joint order)
    in MIT mode on its motor-side encoder, as a Damiao-class drive runs it.

    Each sample sets the drive's targets: the plan's q_des, dq_des and the feed-forward of the
    rigid ``nominal`` model's inverse dynamics (which knows no transmission); the drive closes
    tau = tau_ff + kp (q_des - theta) + kd (dq_des - dtheta) on the rotor's state theta at every
    MuJoCo step, as a drive's own loop runs many times faster than the bus (``default_gains`` of
    the nominal model at ``bandwidth_hz``). The arm starts at rest in the plan's first pose with
    each transmission deflected by its static load. Returns a Recording with q, dq of the link
    side, ``motor_q`` of the motor side and the drive's torque at each sample, ``noise``
    applied (``motor_q`` with the position noise). ``rotor_torque(theta, dtheta, tau_link)``
    (n,) each, rad, rad/s, N m: a torque (n,) N m the gearbox adds on the rotor at every MuJoCo
    step, e.g. friction that grows with the transmitted torque or a cogging ripple, which
    neither the nominal model nor a rigid-body fit knows. The run is checked as ``simulate``'s
    are, on the link side (joint limits, the drives' torque against the actuators' limits,
    tracking): TrackingError when it fails them or diverges, and the recording's quality notes
    say when it barely passed.
    """
    time = np.asarray(trajectory.time, dtype=float)
    rate = _sample_rate(time)
    n = nominal.nv
    if np.shape(trajectory.q)[1] != n:
        raise ValueError(f"the plan has {np.shape(trajectory.q)[1]} joints, the nominal model {n}")
    kp, kd = default_gains(nominal, bandwidth_hz)
    plant = elastic_plant(path, transmission, rate, (kp, kd))
    if len(plant.joint_names) != n:
        raise ValueError(f"the nominal model has {n} joints, the arm {len(plant.joint_names)}")
    inverse = ComputedTorque(nominal, rate)
    q_des, dq_des, ddq_des = (np.asarray(a, dtype=float) for a in (trajectory.q, trajectory.dq, trajectory.ddq))
    feedforward = np.array([inverse.torque(q_des[i], dq_des[i], q_des[i], dq_des[i], ddq_des[i])
                            for i in range(len(time))])
    model, data = plant.model, mujoco.MjData(plant.model)
    data.qpos[plant.link_qpos] = q_des[0]
    # the static deflection of the first pose: the rotor ahead of the link by its load / k
    data.qpos[plant.rotor_qpos] = q_des[0] + feedforward[0] / plant.transmission.stiffness
    num, steps = len(time), plant.timing.substeps
    q, dq, motor_q, tau = (np.empty((num, n)) for _ in range(4))
    applied = data.qfrc_applied
    counts = data.warning.number
    with mujoco_warnings():
        for i in range(num):
            q[i], dq[i] = data.qpos[plant.link_qpos], data.qvel[plant.link_dof]
            motor_q[i] = data.qpos[plant.rotor_qpos]
            for step in range(steps if i < num - 1 else 1):
                drive = mit_torque(data.qpos[plant.rotor_qpos], data.qvel[plant.rotor_dof], q_des[i], dq_des[i],
                                   feedforward[i], kp, kd)
                if step == 0:
                    tau[i] = drive
                    if i == num - 1:
                        break
                if rotor_torque is not None:
                    theta, dtheta = data.qpos[plant.rotor_qpos], data.qvel[plant.rotor_dof]
                    link = plant.transmission.torque(theta - data.qpos[plant.link_qpos],
                                                     dtheta - data.qvel[plant.link_dof])
                    drive = drive + rotor_torque(theta, dtheta, link)
                applied[plant.rotor_dof] = drive
                mujoco.mj_step(model, data)
            if _counted_divergence(counts) or not np.all(np.isfinite(data.qpos)):
                raise TrackingError(f"the elastic arm diverged after t={time[i]:.4f} s: the transmission is too "
                                    "stiff for the timestep, or the gains too high", None, float(time[i]),
                                    float(np.abs(tau[i]).max()))
    rigid = mujoco.MjSpec.from_file(str(Path(path))).compile()  # the file's limits and actuators
    quality = _assess(rigid, rigid, plant.timing, plant.joint_names, time, q_des, q, tau)
    gen = np.random.default_rng(seed)
    return Recording(time=time.copy(), q=measure(q, noise.q_std, noise.q_resolution, gen),
                     dq=measure(dq, noise.dq_std, noise.dq_resolution, gen),
                     tau=measure(tau, noise.tau_std, noise.tau_resolution, gen), joint_names=plant.joint_names,
                     motor_q=measure(motor_q, noise.q_std, noise.q_resolution, gen),
                     quality_notes=quality.quality_notes())
