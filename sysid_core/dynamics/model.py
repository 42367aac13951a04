"""Loading a fixed-base arm (MJCF or URDF, a file or its text) into the arrays the regressor works on.

A *moving body* is a MuJoCo body with at least one joint. Bodies without a
joint are welded to their parent: their mass is merged into the nearest moving
ancestor (or dropped when welded to the world), so the regressor has one
10-parameter block per moving body. Hinge and slide joints only; serial
chains and trees. A URDF's links are MuJoCo bodies of the same names (see
``urdf``: links on fixed joints are welded bodies, inertials exactly as written).
"""
from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from ..errors import ModelError
from . import friction, urdf
from .inertia import from_com_inertia, transform_parameters
from .joint_physics import FrictionLossConstraint, MujocoPhysics
from .mass_matrix import mass_matrix
from .regressor import joint_torque_regressor
from .tree import HINGE, SLIDE, KinematicTree

_TYPE_NAMES = {int(mujoco.mjtJoint.mjJNT_FREE): "free", int(mujoco.mjtJoint.mjJNT_BALL): "ball"}


def _body_pose(data: mujoco.MjData, body: int) -> tuple[np.ndarray, np.ndarray]:
    return data.xmat[body].reshape(3, 3).copy(), data.xpos[body].copy()


def _compile(path: Path | None, mesh_dir: str | Path | None, text: str | None = None) -> mujoco.MjModel:
    """An MJCF file (or its ``text``, then ``path`` is None) compiled by MuJoCo."""
    where = path if path is not None else "(text)"
    try:
        spec = mujoco.MjSpec.from_file(str(path)) if text is None else mujoco.MjSpec.from_string(text)
        if mesh_dir is not None:
            mesh_dir = Path(mesh_dir)
            if not mesh_dir.is_dir():
                raise ModelError(f"mesh directory not found: {mesh_dir}")
            spec.meshdir = str(mesh_dir.resolve())
        return spec.compile()
    except ValueError as err:
        message = " ".join(str(err).split())
        hint = ""
        if "opening file" in message and "ParseXML" not in message:
            hint = " (a mesh or other asset is missing: check the file names or pass --mesh-dir)"
        raise ModelError(f"cannot load MuJoCo model {where}: {message}{hint}") from None


def _moving_ancestor(model: mujoco.MjModel, body: int) -> int:
    """Nearest body at or above ``body`` that carries a joint; 0 (world) if none."""
    while body != 0 and model.body_jntnum[body] == 0:
        body = model.body_parentid[body]
    return body


def _body_parameters(model: mujoco.MjModel) -> np.ndarray:
    """Each body's own standard parameters (nbody, 10) in its frame, as MuJoCo compiled them."""
    local = np.zeros((model.nbody, 10))
    for body in range(1, model.nbody):
        # body inertia at its CoM with principal axes body_iquat, in the body frame
        rot_i = np.empty(9)
        mujoco.mju_quat2Mat(rot_i, model.body_iquat[body])
        rot_i = rot_i.reshape(3, 3)
        inertia_com = rot_i @ np.diag(model.body_inertia[body]) @ rot_i.T
        local[body] = from_com_inertia(model.body_mass[body], model.body_ipos[body], inertia_com)
    return local


def _merged_parameters(model, data, moving_ids, body_parameters):
    """Standard parameters (nb, 10) per moving body, welded descendants merged in, from each
    body's own ``body_parameters`` (nbody, 10).

    Uses MuJoCo's own kinematics at qpos0 for the relative placement of welded bodies,
    which is constant by definition.
    """
    index = {b: i for i, b in enumerate(moving_ids)}
    theta = np.zeros((len(moving_ids), 10))
    own = np.zeros((len(moving_ids), 10))
    merged = [[] for _ in moving_ids]
    for body in range(1, model.nbody):
        owner = _moving_ancestor(model, body)
        if owner == 0:
            continue
        i = index[owner]
        local = body_parameters[body]
        r_owner, p_owner = _body_pose(data, owner)
        r_body, p_body = _body_pose(data, body)
        theta[i] += transform_parameters(local, r_owner.T @ r_body, r_owner.T @ (p_body - p_owner))
        if body != owner:
            merged[i].append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or f"body{body}")
        else:
            own[i] = local
    return theta, own, tuple(tuple(m) for m in merged)


def _build_tree(model, data, moving_ids) -> KinematicTree:
    index = {b: i for i, b in enumerate(moving_ids)}
    nb, n = len(moving_ids), model.njnt
    parent = np.full(nb, -1)
    fixed_rotation = np.empty((nb, 3, 3))
    fixed_translation = np.empty((nb, 3))
    for i, body in enumerate(moving_ids):
        anc = _moving_ancestor(model, model.body_parentid[body])
        r_body, p_body = _body_pose(data, body)
        if anc == 0:
            fixed_rotation[i], fixed_translation[i] = r_body, p_body
        else:
            parent[i] = index[anc]
            r_anc, p_anc = _body_pose(data, anc)
            fixed_rotation[i] = r_anc.T @ r_body
            fixed_translation[i] = r_anc.T @ (p_body - p_anc)
    joint_body = np.array([index[b] for b in model.jnt_bodyid])
    joint_type = np.where(model.jnt_type == int(mujoco.mjtJoint.mjJNT_HINGE), HINGE, SLIDE)
    support = np.zeros((n, nb), dtype=bool)
    for i in range(nb):
        b = i
        while b != -1:
            support[joint_body == b, i] = True
            b = parent[b]
    body_joints = tuple(tuple(np.flatnonzero(joint_body == i)) for i in range(nb))
    return KinematicTree(
        parent=parent, fixed_rotation=fixed_rotation, fixed_translation=fixed_translation,
        joint_body=joint_body, joint_type=joint_type, joint_axis=model.jnt_axis.copy(),
        joint_pos=model.jnt_pos.copy(), joint_ref=model.qpos0.copy(), support=support,
        body_joints=body_joints)


@dataclass(frozen=True, eq=False)
class Robot:
    """A fixed-base arm ready for identification.

    Joints are in MuJoCo dof order (n of them); moving bodies in model order (nb).
    ``nominal_parameters`` (nb, 10) are the model's standard parameters with welded
    bodies merged; ``own_parameters`` (nb, 10) those of each body alone, so the welded
    share is their difference; ``merged_bodies`` names the welded bodies per moving body.
    Joint properties (n,): ``armature`` kg m^2 (or kg), ``damping`` N m s/rad,
    ``frictionloss`` N m, ``stiffness`` N m/rad toward ``springref`` rad, ``joint_range``
    (n, 2) rad or m (inf when unlimited); ``frictionloss_constraint`` how MuJoCo applies the
    frictionloss (joint_physics.FrictionLossConstraint; only where data come from MuJoCo).

    ``source_format`` is "mjcf" or "urdf"; ``description`` the URDF text a URDF robot was
    loaded from (what exports edit); ``simulation_adjustments`` {link: what changed} for the
    moving links whose URDF inertia MuJoCo refuses: ``model`` (what simulations run) has the
    change, ``nominal_parameters`` the URDF's values.
    """

    path: Path | None
    model: mujoco.MjModel
    tree: KinematicTree
    joint_names: tuple
    body_names: tuple
    body_ids: np.ndarray
    merged_bodies: tuple
    terminal_body: str
    terminal_joint: str
    gravity: np.ndarray
    nominal_parameters: np.ndarray
    own_parameters: np.ndarray
    armature: np.ndarray
    damping: np.ndarray
    frictionloss: np.ndarray
    joint_range: np.ndarray
    stiffness: np.ndarray
    springref: np.ndarray
    frictionloss_constraint: FrictionLossConstraint
    source_format: str = "mjcf"
    description: str | None = None
    simulation_adjustments: dict = field(default_factory=dict)

    @property
    def n_joints(self) -> int:
        return self.tree.n_joints

    @property
    def n_bodies(self) -> int:
        return self.tree.n_bodies

    @property
    def terminal_index(self) -> int:
        """Index of the terminal body among the moving bodies."""
        return self.body_names.index(self.terminal_body)

    @property
    def welded_parameters(self) -> np.ndarray:
        """(nb, 10) the welded bodies merged into each moving body (zeros where none): what a
        model file keeps in their own inertials."""
        return self.nominal_parameters - self.own_parameters

    @property
    def joint_values(self) -> dict:
        """{term: (n,)} the model's value of every per-joint term (friction.TERMS): coulomb =
        frictionloss, viscous = damping, armature, offset = 0, stiffness."""
        return {"coulomb": self.frictionloss, "viscous": self.damping, "armature": self.armature,
                "offset": np.zeros(self.n_joints), "stiffness": self.stiffness}

    def regressor(self, q, dq, ddq, out=None) -> np.ndarray:
        """Inertial joint-torque regressor Y, shape (N, n, 10 nb).

        q, dq, ddq: (N, n) or (n,) in rad, rad/s, rad/s^2 (m for slides). ``Y @ theta``
        with theta the stacked (nb*10,) standard parameters gives the rigid-body joint
        torques in N m (N for slides), gravity included. ``out``: an earlier result for N
        samples, overwritten and returned (saves paging in fresh memory on every call).
        """
        return joint_torque_regressor(self.tree, self.gravity, q, dq, ddq, out)

    def inverse_inertia_diagonal(self, parameters=None, armature=None) -> np.ndarray:
        """diag(M(qpos0)^-1) (n,): MuJoCo's dof_invweight0 for these inertial ``parameters``
        (nb, 10) and ``armature`` (n,) (default the model's), which frictionloss's constraint
        force depends on."""
        theta = (self.nominal_parameters if parameters is None else np.asarray(parameters)).reshape(-1)
        armature = self.armature if armature is None else np.asarray(armature, dtype=float)
        n = self.n_joints
        q = np.tile(self.tree.joint_ref, (n + 1, 1))
        ddq = np.vstack([np.eye(n), np.zeros(n)])
        torque = self.regressor(q, np.zeros_like(q), ddq) @ theta
        mass = (torque[:n] - torque[n]).T + np.diag(armature)  # column j: M e_j
        return np.diag(np.linalg.inv(0.5 * (mass + mass.T)))

    def mass_matrix(self, q, parameters=None, armature=None) -> np.ndarray:
        """M(q) (N, n, n) kg m^2 at q (N, n) of these inertial ``parameters`` (nb, 10) and
        ``armature`` (n,) (defaults the model's): column j is the torque of a unit acceleration
        of joint j at rest, less gravity's (``mass_matrix.mass_matrix``: sum_b J_b^T I_b J_b)."""
        return mass_matrix(self.tree, self.nominal_parameters if parameters is None else parameters,
                           self.armature if armature is None else armature, np.atleast_2d(np.asarray(q, dtype=float)))

    def inverse_inertia_gradient(self, parameters=None, armature=None) -> tuple:
        """The derivatives of inverse_inertia_diagonal: (d w / d theta (n, 10 nb) in the
        regressor's column order, d w / d armature (n, n)), from dM^-1 = -M^-1 dM M^-1 with M
        linear in both."""
        theta = (self.nominal_parameters if parameters is None else np.asarray(parameters)).reshape(-1)
        armature = self.armature if armature is None else np.asarray(armature, dtype=float)
        n = self.n_joints
        q = np.tile(self.tree.joint_ref, (n + 1, 1))
        columns = self.regressor(q, np.zeros_like(q), np.vstack([np.eye(n), np.zeros(n)]))
        unit = columns[:n] - columns[n]  # (k, r, i): row r, column k of dM/d theta_i
        mass = np.einsum("kri,i->rk", unit, theta) + np.diag(armature)
        inverse = np.linalg.inv(0.5 * (mass + mass.T))
        return -np.einsum("jr,kri,kj->ji", inverse, unit, inverse), -inverse ** 2

    def joint_features(self, terms, q, dq, ddq, smoothing: float = 0.0, physics: MujocoPhysics | None = None,
                       frictionloss=None, invweight0=None, parameters=None, armature=None, damping=None) -> dict:
        """{term: (N, n)} the torque per unit parameter of each joint term (friction.joint_features).

        Without ``physics`` (hardware) Coulomb friction is sign(dq) (tanh with ``smoothing``);
        with MuJoCo ``physics`` it is MuJoCo's frictionloss constraint per unit of the level
        ``frictionloss`` (n,) (default the model's) with ``invweight0`` (n,) (default the
        model's), at the acceleration it saw (MujocoPhysics.constraint_acceleration, from the
        inertial ``parameters`` (nb, 10), ``armature`` and ``damping`` (n,), defaults the
        model's), and damping and springs act where MuJoCo's integrator puts them."""
        coulomb = None
        if physics is not None and "coulomb" in terms:
            damping = self.damping if damping is None else damping
            seen = ddq if physics.damping_delay == 0 or not np.any(damping) else physics.constraint_acceleration(
                ddq, self.mass_matrix(q, parameters, armature), damping)
            coulomb = self.frictionloss_constraint.shape(
                dq, seen, self.frictionloss if frictionloss is None else frictionloss,
                self.model.dof_invweight0 if invweight0 is None else invweight0, physics.timestep)
        return friction.joint_features(terms, q, dq, ddq, self.springref, smoothing, coulomb,
                                       0.0 if physics is None else physics.damping_delay,
                                       0.0 if physics is None else physics.spring_delay)

    def inverse_dynamics(self, q, dq, ddq, parameters=None, physics: MujocoPhysics | None = None) -> np.ndarray:
        """Joint torques (N, n) N m of the model: rigid body plus armature, damping, springs and
        Coulomb friction.

        ``parameters`` (nb, 10) overrides the nominal inertial parameters. Without ``physics``
        (a real arm) Coulomb friction is frictionloss * sign(dq); with MuJoCo ``physics`` the
        joint terms are what MuJoCo applies (joint_physics): mj_inverse's torques for
        ``MujocoPhysics.inverse(model)``.
        """
        theta = self.nominal_parameters if parameters is None else np.asarray(parameters)
        q, dq, ddq = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, dq, ddq))
        tau = self.regressor(q, dq, ddq) @ theta.reshape(-1)
        values = self.joint_values
        features = self.joint_features(friction.TERMS, q, dq, ddq, physics=physics, parameters=theta)
        return tau + sum(values[t] * features[t] for t in friction.TERMS)


def _gravity(model: mujoco.MjModel) -> np.ndarray:
    if model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_GRAVITY:
        return np.zeros(3)
    return model.opt.gravity.copy()


def _resolve_terminal(model, tree, moving_ids, names, terminal_body, terminal_joint):
    joint_names = names["joint"]
    if terminal_joint is not None:
        if terminal_joint not in joint_names:
            raise ModelError(f"terminal joint '{terminal_joint}' is not in the model; joints are {list(joint_names)}")
        body = tree.joint_body[joint_names.index(terminal_joint)]
        return body, terminal_joint
    if terminal_body is not None:
        body_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, terminal_body)
        if body_id < 0:
            raise ModelError(f"terminal body '{terminal_body}' is not in the model")
        owner = _moving_ancestor(model, body_id)
        if owner == 0:
            raise ModelError(f"terminal body '{terminal_body}' is welded to the world and never moves")
        body = moving_ids.index(owner)
    else:
        depth = np.zeros(tree.n_bodies, dtype=int)
        for b in range(tree.n_bodies):  # parents come first in model order
            depth[b] = 0 if tree.parent[b] < 0 else depth[tree.parent[b]] + 1
        body = int(np.flatnonzero(depth == depth.max())[-1])
    return body, joint_names[tree.body_joints[body][-1]]


def _source(source) -> tuple[Path | None, bytes | None]:
    """(path, None) for a file name, (None, data) for the text of a model."""
    if isinstance(source, bytes):
        return None, source
    if isinstance(source, str) and source.lstrip().startswith("<"):
        return None, source.encode("utf-8")
    path = Path(source)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    return path, None


def _root_tag(data: bytes) -> str | None:
    """The root element's tag, or None when the XML does not parse (the compiler says why)."""
    try:
        for _, element in ET.iterparse(io.BytesIO(data), events=("start",)):
            return element.tag
    except ET.ParseError:
        return None
    return None


def _urdf_model(data: bytes, where: str):
    """(model, body parameters (nbody, 10) from the URDF's inertials, adjustments)."""
    root = urdf.parse(data, where)
    inertials = urdf.link_parameters(root, where)
    model, adjustments = urdf.compile_urdf(root, where, inertials)
    compiled = _body_parameters(model)
    local = np.zeros((model.nbody, 10))
    for body in range(1, model.nbody):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body)
        local[body] = inertials[name]
        if name in adjustments:
            continue
        # a MuJoCo import rule we do not neutralise would show here; the simulation model
        # must be the URDF's own
        scale = max(float(np.max(np.abs(local[body]))), 1e-12)
        if float(np.max(np.abs(compiled[body] - local[body]))) > 1e-9 * scale:
            raise ModelError(f"{where}: MuJoCo compiled link '{name}' as {np.round(compiled[body], 9).tolist()}, "
                             f"not as its <inertial> says ({np.round(local[body], 9).tolist()})")
    return model, local, adjustments


def load_robot(source, terminal_body: str | None = None, terminal_joint: str | None = None,
               mesh_dir=None) -> Robot:
    """Load a fixed-base arm from an MJCF or URDF file, or from its text (a string starting with '<').

    The format is the root element's: <mujoco> or <robot>. A URDF loads without its
    geometry (``mesh_dir`` is then unused), each link's mass exactly as its <inertial>
    says (see ``urdf``). The terminal body is the deepest joint-carrying body (the last one
    in model order on ties) unless ``terminal_body`` (a body name; a welded body resolves to
    the moving body it is welded to) or ``terminal_joint`` names it. Raises ModelError with
    a readable message for missing or malformed files, free or ball joints, no joints,
    unknown names.
    """
    path, data = _source(source)
    where = str(path) if path is not None else "(text)"
    if data is None:
        data = path.read_bytes()
    source_format = "urdf" if _root_tag(data) == "robot" else "mjcf"
    adjustments, description = {}, None
    if source_format == "urdf":
        model, local, adjustments = _urdf_model(data, where)
        try:
            description = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError(f"{where}: a URDF must be UTF-8 text") from None
    else:
        model = _compile(path, mesh_dir, None if path is not None else data.decode("utf-8"))
        local = _body_parameters(model)
    if model.njnt == 0:
        raise ModelError(f"{where} has no joints: nothing to identify")
    bad = [(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}", _TYPE_NAMES[t])
           for j, t in enumerate(model.jnt_type.tolist()) if t in _TYPE_NAMES]
    if bad:
        listed = ", ".join(f"'{n}' ({t})" for n, t in bad)
        raise ModelError(f"{where}: only hinge and slide joints of a fixed-base arm are supported; found {listed}")
    kin = mujoco.MjData(model)
    kin.qpos[:] = model.qpos0
    mujoco.mj_kinematics(model, kin)
    moving_ids = [b for b in range(1, model.nbody) if model.body_jntnum[b] > 0]
    tree = _build_tree(model, kin, moving_ids)
    theta, own, merged = _merged_parameters(model, kin, moving_ids, local)
    names = {
        "joint": tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}" for j in range(model.njnt)),
        "body": tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}" for b in moving_ids),
    }
    term_body, term_joint = _resolve_terminal(model, tree, moving_ids, names, terminal_body, terminal_joint)
    limited = model.jnt_limited.astype(bool)
    joint_range = np.where(limited[:, None], model.jnt_range, [-np.inf, np.inf])
    return Robot(
        path=path, model=model, tree=tree, joint_names=names["joint"], body_names=names["body"],
        body_ids=np.array(moving_ids), merged_bodies=merged, terminal_body=names["body"][term_body],
        terminal_joint=term_joint, gravity=_gravity(model), nominal_parameters=theta, own_parameters=own,
        armature=model.dof_armature.copy(), damping=model.dof_damping.copy(),
        frictionloss=model.dof_frictionloss.copy(), joint_range=joint_range,
        stiffness=model.jnt_stiffness[model.dof_jntid].copy(),
        springref=model.qpos_spring[model.jnt_qposadr[model.dof_jntid]].copy(),
        frictionloss_constraint=FrictionLossConstraint.from_model(model), source_format=source_format,
        description=description, simulation_adjustments=adjustments)
