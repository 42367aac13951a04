"""The identified terminal body in ROS terms: what geometry_msgs/Inertia and robot drivers' payload
settings carry (mass, centre of mass, inertia about the centre of mass, in a named frame).

Two readings of one identification: ``identified``, the terminal body as a whole (link plus
whatever is bolted to it), and ``added``, that minus the model's own terminal body: the
payload, when the model (the URDF a driver or controller already uses) is the bare arm.
"""
from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from ..dynamics.inertia import consistency_violations, to_com_inertia, transform_parameters

_KEYS = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
_INDEX = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


@dataclass(frozen=True)
class BodyInertia:
    """One rigid body in ``frame``: ``mass`` kg, ``com`` (3,) m, ``inertia`` (3, 3) kg m^2 about
    the centre of mass in the frame's axes (geometry_msgs/Inertia: m, com, ixx..izz). ``com``
    and ``inertia`` are None when the mass is not positive (no centre of mass)."""

    frame: str
    mass: float
    com: np.ndarray | None
    inertia: np.ndarray | None
    physically_consistent: bool

    def as_dict(self) -> dict:
        """JSON-ready: frame, mass, center_of_mass [x, y, z], inertia {ixx, ixy, ixz, iyy, iyz, izz}."""
        return {"frame": self.frame, "mass": float(self.mass),
                "center_of_mass": None if self.com is None else [float(v) for v in self.com],
                "inertia": None if self.inertia is None else
                {k: float(self.inertia[i, j]) for k, (i, j) in zip(_KEYS, _INDEX)},
                "physically_consistent": bool(self.physically_consistent)}


def body_inertia(theta, frame: str) -> BodyInertia:
    """theta (10,) (about the frame's origin, in its axes) as a BodyInertia."""
    theta = np.asarray(theta, dtype=float)
    consistent = not consistency_violations(theta)
    if not theta[0] > 0:
        return BodyInertia(frame, float(theta[0]), None, None, consistent)
    com = to_com_inertia(theta)
    return BodyInertia(frame, com.mass, com.com, com.inertia, consistent)


def with_consistent_inertia(body: BodyInertia, margin: float = 1e-6) -> BodyInertia:
    """``body`` with its inertia about the centre of mass replaced by the nearest physically
    consistent one, mass and centre of mass kept: the eigenvalues of the second moment
    S = tr(I)/2 - I (a rigid body's is positive semi-definite: I positive with the triangle
    inequalities) raised to at least ``margin`` times the largest, nearest in the Frobenius norm
    of S. A payload's inertia is the least determined part of an identification; a driver still
    needs one it can use. ``body`` itself when already consistent; ValueError without a mass."""
    if body.com is None:
        raise ValueError(f"mass {body.mass:.6g} kg is not positive: no inertia to correct")
    if body.physically_consistent:
        return body
    second = 0.5 * np.trace(body.inertia) * np.eye(3) - body.inertia
    eigval, eigvec = np.linalg.eigh(second)
    eigval = np.maximum(eigval, max(margin * float(np.max(np.abs(eigval))), 1e-15))
    second = (eigvec * eigval) @ eigvec.T
    return BodyInertia(body.frame, body.mass, body.com, np.trace(second) * np.eye(3) - second, True)


def frame_pose(robot, frame: str) -> tuple[np.ndarray, np.ndarray]:
    """(rotation (3, 3), origin (3,)) of body ``frame`` in the terminal body's frame; ``frame`` is
    the terminal body or a body welded to it (a URDF link on fixed joints below it: flange, tool0).
    ValueError otherwise."""
    model = robot.model
    terminal = int(robot.body_ids[robot.terminal_index])
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, frame)
    welded = frame in robot.merged_bodies[robot.terminal_index]
    if body < 0 or not (body == terminal or welded):
        choices = [robot.terminal_body, *robot.merged_bodies[robot.terminal_index]]
        raise ValueError(f"payload frame '{frame}' is not the terminal body or fixed to it; choose one of {choices}")
    data = mujoco.MjData(model)
    data.qpos[:] = model.qpos0
    mujoco.mj_kinematics(model, data)
    r_t, p_t = data.xmat[terminal].reshape(3, 3), data.xpos[terminal]
    r_b, p_b = data.xmat[body].reshape(3, 3), data.xpos[body]
    return r_t.T @ r_b, r_t.T @ (p_b - p_t)


def terminal_inertia(result, robot, frame: str | None = None) -> tuple[BodyInertia, BodyInertia]:
    """(identified, added): the terminal body of ``result`` as a whole, and minus the model's own
    terminal body (``robot.nominal_parameters``, fixed links included), both in ``frame`` (default:
    the terminal body's own frame; else a link fixed to it, e.g. the flange a driver expects)."""
    i = result.body_names.index(result.terminal_body)
    identified = np.asarray(result.body_parameters[i], dtype=float)
    added = identified - robot.nominal_parameters[robot.body_names.index(result.terminal_body)]
    frame = frame or result.terminal_body
    if frame != result.terminal_body:
        rotation, origin = frame_pose(robot, frame)
        # parameters given in the terminal frame, expressed in `frame` (whose pose in it is rotation, origin)
        identified, added = (transform_parameters(t, rotation.T, -rotation.T @ origin) for t in (identified, added))
    return body_inertia(identified, frame), body_inertia(added, frame)


def payload_document(result, robot, frame: str | None = None) -> dict:
    """The params.json ``payload`` block: the identified terminal body and the ``added`` part."""
    identified, added = terminal_inertia(result, robot, frame)
    block = identified.as_dict()
    block["added"] = {k: v for k, v in added.as_dict().items() if k != "frame"}
    return block
