"""The identified arm as the online wing evaluates it, sample batch after sample batch.

A LiveModel is the rigid bodies' standard parameters, the joints' armature, friction laws, offset
and spring, and what the identification measured of its own error (the validation RMSE per
joint): what ``identify.predict_torque`` gives for the result. For a real arm's identification
a joint's friction is a function of its velocity; for one from a MuJoCo simulation (params.json's
``physics``) the joints are MuJoCo's, as the identification fitted them (its frictionloss
constraint is no function of the velocity alone: evaluated with the velocity's law, a simulated
arm's model would be off by its friction levels wherever a joint turns). It is built from an IdentificationResult in memory (``live_model``) or from what an
identification wrote (``load_live_model``: params.json, the updated model and the residual model
beside it), or from a model file alone (``nominal_live_model``: its own inertia, armature,
damping and friction loss, no figure of its error).

Batches are cheap and single samples are not: a call costs a few hundred NumPy operations
whatever its size (about 0.3 ms for the torque and 0.8 ms for M(q) of a 7-joint arm), then a few
microseconds per sample. Callers that run at a driver's rate evaluate the samples that arrived
since their last call together.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dynamics import friction
from ..dynamics.inertia import from_com_inertia, transform_parameters
from ..dynamics.joint_physics import MujocoPhysics
from ..dynamics.model import Robot, load_robot
from ..errors import DataError
from ..identification.residual import ResidualModel
from ..results.payload import body_inertia, frame_pose

# the files an identification writes beside params.json, in the order looked for
UPDATED_MODELS = ("updated_model.xml", "updated_model.urdf")
RESIDUAL_FILE = "residual_model.json"


@dataclass(frozen=True)
class LiveModel:
    """The arm's model for online use.

    ``robot`` the kinematics (its own inertial values are not used); ``parameters`` (nb, 10)
    the moving bodies' standard parameters [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] in
    ``robot.body_names`` order; ``armature``, ``offset`` N m, ``stiffness`` N m/rad (n,);
    ``frictions`` (n,) friction.JointFriction; ``residual`` a ResidualModel added to the torque
    (None: none; one that takes the transmission's deflection is used only where the deflection
    is given); ``sigma`` (n,) N m the identification's validation RMSE per joint (its training
    RMSE when it had no validation; None for a nominal model); ``verdict`` the
    identification's (None for a nominal model); ``source`` where it came from;
    ``bare_terminal`` (10,) the terminal body without what the identification found bolted to it
    (the model file's own link): a payload is the terminal body minus this (None: unknown);
    ``physics`` the MuJoCo physics of an identification from a simulation (joint_physics: its
    frictionloss constraint and implicit damping, as the identification modelled them, for
    Coulomb + viscous joints), None for a real arm's."""

    robot: Robot
    parameters: np.ndarray
    armature: np.ndarray
    offset: np.ndarray
    stiffness: np.ndarray
    frictions: tuple
    residual: ResidualModel | None = None
    sigma: np.ndarray | None = None
    verdict: str | None = None
    source: str = ""
    bare_terminal: np.ndarray | None = None
    physics: MujocoPhysics | None = None

    @property
    def n_joints(self) -> int:
        return self.robot.n_joints

    @property
    def joint_names(self) -> tuple:
        return self.robot.joint_names

    def torque(self, q, dq, ddq, parameters=None, deflection=None) -> np.ndarray:
        """Joint torques (N, n) N m at q, dq, ddq (N, n) rad, rad/s, rad/s^2: rigid bodies
        (``parameters`` (nb, 10) instead of the model's, e.g. a payload's terminal body),
        armature, friction, offset, spring and the residual model's correction (one that takes
        the transmission's ``deflection`` (N, n) rad, q less the motor side, only with it)."""
        q, dq, ddq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, ddq))
        theta = self.parameters if parameters is None else np.asarray(parameters, dtype=float)
        tau = self.robot.regressor(q, dq, ddq) @ theta.reshape(-1) + self.joint_torque(q, dq, ddq)
        if self.residual is not None and (deflection is not None or not self.residual.needs("deflection")):
            deflection = None if deflection is None else np.atleast_2d(np.asarray(deflection, dtype=float))
            tau = tau + self.residual.predict_for(self.joint_names, q, dq, deflection, tau)
        return tau

    def joint_torque(self, q, dq, ddq) -> np.ndarray:
        """The joints' own terms (N, n) N m: armature ddq + friction(dq) + offset + stiffness (q -
        springref)."""
        q, dq, ddq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, ddq))
        if self._constraint:
            return self._simulated_joint_torque(q, dq, ddq)
        return (self.armature * ddq + friction.friction_torque(dq, self.frictions) + self.offset
                + self.stiffness * (q - self.robot.springref))

    @property
    def _constraint(self) -> bool:
        """Whether the joints are MuJoCo's (``physics``), with Coulomb + viscous laws, as an
        identification from a simulation models them."""
        return self.physics is not None and all(f.model.name == "coulomb_viscous" for f in self.frictions)

    def _simulated_joint_torque(self, q, dq, ddq) -> np.ndarray:
        """joint_torque as MuJoCo applies the joints' terms: friction loss through its constraint
        (at the identified levels, with the identified arm's inverse inertia at qpos0), damping
        and springs where its integrator puts them."""
        coulomb = np.array([f.coulomb_level for f in self.frictions])
        viscous = np.array([f.viscous_level for f in self.frictions])
        features = self.robot.joint_features(friction.TERMS, q, dq, ddq, self.frictions[0].smoothing, self.physics,
                                             coulomb, self.robot.inverse_inertia_diagonal(self.parameters,
                                                                                          self.armature),
                                             self.parameters, self.armature, viscous)
        values = {"coulomb": coulomb, "viscous": viscous, "armature": self.armature, "offset": self.offset,
                  "stiffness": self.stiffness}
        return sum(values[t] * features[t] for t in friction.TERMS)

    def friction_torque(self, dq) -> np.ndarray:
        """The friction laws' torques (N, n) N m at dq (N, n) rad/s."""
        return friction.friction_torque(dq, self.frictions)

    def gravity(self, q) -> np.ndarray:
        """The torque (N, n) N m that holds q (N, n) at rest: gravity, offset and spring."""
        q = np.atleast_2d(np.asarray(q, dtype=float))
        zero = np.zeros_like(q)
        return self.robot.regressor(q, zero, zero) @ self.parameters.reshape(-1) + self.offset \
            + self.stiffness * (q - self.robot.springref)

    def mass_matrix(self, q) -> np.ndarray:
        """M(q) (N, n, n) kg m^2 at q (N, n), armature included."""
        return self.robot.mass_matrix(q, self.parameters, self.armature)


def live_model(robot: Robot, result, residual: ResidualModel | None = None, source: str = "") -> LiveModel:
    """The LiveModel of an IdentificationResult ``result`` of ``robot`` (``residual`` its
    ResidualModel, if any)."""
    if tuple(result.joint_names) != tuple(robot.joint_names) or tuple(result.body_names) != tuple(robot.body_names):
        raise ValueError("the identification result does not belong to this robot model")
    frictions = tuple(result.friction) if result.friction is not None else tuple(
        friction.JointFriction(friction.FrictionModel(), (float(c), float(v)), (), result.config.joint_model.smoothing)
        for c, v in zip(result.coulomb, result.viscous))
    metrics = result.metrics
    sigma = metrics.validation_rmse_per_joint if metrics.validation_rmse_per_joint is not None \
        else metrics.rmse_per_joint
    stiffness = result.stiffness if result.stiffness is not None else robot.stiffness
    return LiveModel(robot, np.array(result.body_parameters, dtype=float), np.array(result.armature, dtype=float),
                     np.array(result.offset, dtype=float), np.array(stiffness, dtype=float), frictions, residual,
                     None if sigma is None else np.array(sigma, dtype=float),
                     None if result.verdict is None else result.verdict.level, source,
                     np.array(robot.nominal_parameters[robot.terminal_index], dtype=float), result.config.physics)


def nominal_live_model(robot: Robot, source: str = "") -> LiveModel:
    """The LiveModel of a model file's own values: its inertia, armature, damping (viscous) and
    friction loss (Coulomb, sign(dq)); no validation figure (``sigma`` None)."""
    frictions = tuple(friction.JointFriction(friction.FrictionModel(), (float(c), float(v)))
                      for c, v in zip(robot.frictionloss, robot.damping))
    return LiveModel(robot, np.array(robot.nominal_parameters, dtype=float), np.array(robot.armature, dtype=float),
                     np.zeros(robot.n_joints), np.array(robot.stiffness, dtype=float), frictions,
                     source=source or str(robot.path or ""),
                     bare_terminal=np.array(robot.nominal_parameters[robot.terminal_index], dtype=float))


def _number(value, where: str) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise DataError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def load_live_model(params_path, model=None, residual=True) -> LiveModel:
    """The LiveModel an identification wrote: ``params_path`` its params.json, whose bodies,
    joints, friction laws and validation RMSE are used; the kinematics from ``model`` (a model
    file; default the updated model beside params.json, updated_model.xml or .urdf); the residual
    model beside it (residual_model.json) unless ``residual`` is False, or from ``residual`` when
    it is a path. Raises DataError for a file that is no identification of that arm."""
    params_path = Path(params_path)
    try:
        doc = json.loads(params_path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{params_path}: {exc}") from None
    if not isinstance(doc, dict) or not all(k in doc for k in ("bodies", "joints", "body_name")):
        raise DataError(f"{params_path} is no params.json of an identification (bodies, joints, body_name)")
    if model is None:
        found = [params_path.with_name(name) for name in UPDATED_MODELS if params_path.with_name(name).is_file()]
        if not found:
            raise DataError(f"no updated model ({' or '.join(UPDATED_MODELS)}) beside {params_path}: give the model")
        model = found[0]
    robot = load_robot(model, terminal_body=doc["body_name"])
    bodies = {entry.get("name"): entry for entry in doc["bodies"] if isinstance(entry, dict)}
    joints = {entry.get("name"): entry for entry in doc["joints"] if isinstance(entry, dict)}
    missing = [b for b in robot.body_names if b not in bodies] + [j for j in robot.joint_names if j not in joints]
    if missing:
        raise DataError(f"{params_path} is not of the arm of {model}: it lacks {missing}")
    parameters = np.empty((robot.n_bodies, 10))
    for i, name in enumerate(robot.body_names):
        entry, inertia = bodies[name], bodies[name].get("inertia_tensor") or {}
        values = [entry.get("mass"), *(entry.get("first_moment") or [None] * 3),
                  *(inertia.get(k) for k in ("Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz"))]
        parameters[i] = [_number(v, f"{params_path}: body {name}") for v in values]
    armature, offset, stiffness = (np.array([_number(joints[j].get(key), f"{params_path}: joint {j} {key}")
                                             for j in robot.joint_names]) for key in ("armature", "offset", "stiffness"))
    frictions = tuple(_joint_friction(doc, j, joints[j], params_path) for j in robot.joint_names)
    sigma = doc.get("validation_rmse_per_joint") or doc.get("rmse_per_joint")
    sigma = None if not isinstance(sigma, dict) or any(sigma.get(j) is None for j in robot.joint_names) \
        else np.array([_number(sigma[j], f"{params_path}: rmse of {j}") for j in robot.joint_names])
    found = None
    if residual is not False:
        path = params_path.with_name(RESIDUAL_FILE) if residual is True else Path(residual)
        if path.is_file() or residual is not True:
            try:
                found = ResidualModel.from_dict(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise DataError(f"residual model {path}: {exc}") from None
            if set(found.joint_names) - set(robot.joint_names):
                raise DataError(f"residual model {path} is of the joints {list(found.joint_names)}, the model has "
                                f"{list(robot.joint_names)}")
    verdict = doc.get("verdict")
    return LiveModel(robot, parameters, armature, offset, stiffness, frictions, found, sigma,
                     verdict if isinstance(verdict, str) else None, str(params_path),
                     _bare_terminal(doc, robot, parameters[robot.terminal_index]), _physics(doc, params_path))


def _physics(doc: dict, where) -> MujocoPhysics | None:
    """params.json's ``physics`` block as a MujocoPhysics (None: hardware)."""
    block = doc.get("physics")
    if not isinstance(block, dict) or block.get("source") != "mujoco":
        return None
    try:
        return MujocoPhysics(float(block["timestep"]), str(block["integrator"]), bool(block["eulerdamp"]),
                             bool(block["simulated"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: physics block {block}: {exc}") from None


def _bare_terminal(doc: dict, robot: Robot, identified: np.ndarray) -> np.ndarray | None:
    """The model's own terminal link of a params.json: the identified terminal body minus its
    ``payload.added`` block (given at its centre of mass in ``payload.frame``); None when the
    block has no centre of mass (the identification added no mass) or is missing."""
    payload = doc.get("payload")
    added = payload.get("added") if isinstance(payload, dict) else None
    if not isinstance(added, dict) or added.get("center_of_mass") is None or added.get("inertia") is None:
        return None
    try:
        i = added["inertia"]
        inertia = np.array([[i["ixx"], i["ixy"], i["ixz"]], [i["ixy"], i["iyy"], i["iyz"]],
                            [i["ixz"], i["iyz"], i["izz"]]], dtype=float)
        theta = from_com_inertia(float(added["mass"]), np.array(added["center_of_mass"], dtype=float), inertia)
    except (KeyError, TypeError, ValueError):
        return None
    frame = payload.get("frame") or robot.terminal_body
    if frame != robot.terminal_body:
        rotation, origin = frame_pose(robot, frame)  # the frame's pose in the terminal body's
        theta = transform_parameters(theta, rotation, origin)
    return identified - theta


def _joint_friction(doc: dict, joint: str, entry: dict, where) -> friction.JointFriction:
    """A joint's friction law from params.json: its ``friction_models`` entry, else its Coulomb
    and viscous values."""
    law = (doc.get("friction_models") or {}).get(joint)
    if law is None:
        return friction.JointFriction(friction.FrictionModel(),
                                      (_number(entry.get("coulomb_friction"), f"{where}: {joint} coulomb_friction"),
                                       _number(entry.get("viscous_friction"), f"{where}: {joint} viscous_friction")))
    try:
        model = friction.FrictionModel(law["model"])
        values = law["parameters"]
        linear = tuple(_number(values[k], f"{where}: {joint} {k}") for k in model.linear_names)
        nonlinear = tuple(_number(values[k], f"{where}: {joint} {k}") for k in model.nonlinear_names)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: friction law of {joint}: {exc}") from None
    return friction.JointFriction(model, linear, nonlinear, float(law.get("smoothing", 0.0) or 0.0))


def added_payload(model: LiveModel, theta, frame: str | None = None):
    """The payload of a terminal body ``theta`` (10,): theta minus ``model.bare_terminal`` (theta
    itself when that is unknown), as a results.payload.BodyInertia in ``frame`` (default the
    terminal body's; else a link fixed to it, e.g. the flange a driver expects)."""
    theta = np.asarray(theta, dtype=float)
    added = theta if model.bare_terminal is None else theta - model.bare_terminal
    frame = frame or model.robot.terminal_body
    if frame != model.robot.terminal_body:
        rotation, origin = frame_pose(model.robot, frame)
        added = transform_parameters(added, rotation.T, -rotation.T @ origin)
    return body_inertia(added, frame)
