"""The real-arm corpus: published arm models in test/models/real_arms, what each one exercises,
and truth models with a welded payload.

``ARMS`` lists every corpus arm with its metadata (declared here, checked against the files by
test/test_real_arm_models.py, and shown per arm in test/models/real_arms/README.md).
``with_payload`` builds a truth model: the arm with a payload welded to its terminal body, and the
payload's standard parameters in that body's frame, computed here from what was written into the
model (the oracle for tests and for bench/real_arms.py).

Imports only NumPy and MuJoCo, so that a bench script can use it without the test suite.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import mujoco
import numpy as np

DIRECTORY = Path(__file__).resolve().parent / "models" / "real_arms"
JOINT_TERMS = ("armature", "damping", "frictionloss", "stiffness")
HOME_KINDS = ("straight-up", "singular", "bent")
WEIGHTS = ("light", "medium", "heavy")
# A payload's mass relative to the arm's moving mass. The corpus arms' rated payloads are 0.1 (Lite 6)
# to 0.6 (Gen3) of their moving mass, about 0.3 on most: this is some 15 % of what an arm may carry.
PAYLOAD_FRACTION = 0.05


@dataclass(frozen=True)
class Arm:
    """One corpus arm, as published (see test/models/real_arms/README.md).

    ``name`` the file stem; ``dof`` hinge joints; ``weight`` light (most links 50-300 g), medium or
    heavy (a link over 10 kg); ``home`` what qpos0 is: straight-up (singular, the arm stretched
    along its first axis), singular (another singular pose: stretched sideways or folded) or bent;
    ``joint_terms`` the MuJoCo joint terms non-zero on some joint; ``actuator`` the published
    actuators: position (<position> servos), general (affine servos written as <general>) or motor
    (torque motors, whether written as <motor> or as a <general> with no bias);
    ``integrator`` and ``timestep`` the option; ``terminal_body`` the deepest moving body (where a
    payload goes); ``gravcomp`` whether any body has gravity compensation; ``keyframe`` the home
    keyframe's name or None; ``urdf`` whether urdf/<name>.urdf exists; ``notes`` what else is special.
    """

    name: str
    title: str
    dof: int
    weight: str
    home: str
    joint_terms: frozenset
    actuator: str
    integrator: str
    terminal_body: str
    timestep: float = 0.002
    gravcomp: bool = False
    keyframe: str | None = "home"
    urdf: bool = False
    notes: str = ""

    @property
    def path(self) -> Path:
        return DIRECTORY / f"{self.name}.xml"

    @property
    def urdf_path(self) -> Path | None:
        return DIRECTORY / "urdf" / f"{self.name}.urdf" if self.urdf else None


def _terms(*names: str) -> frozenset:
    return frozenset(names)


ARMS = (
    Arm("ur5e", "Universal Robots UR5e", 6, "medium", "singular", _terms("armature", "damping"), "position",
        "Euler", "wrist_3_link", urdf=True,
        notes="inertials and frames from UR's own description (full inertia tensors); zero pose stretched "
              "sideways, wrist singular"),
    Arm("ur10e", "Universal Robots UR10e", 6, "heavy", "singular", _terms("armature", "damping"), "position",
        "Euler", "wrist_3_link",
        notes="damping 350 N m s/rad on the shoulder; zero pose stretched sideways; primitive collision geoms"),
    Arm("iiwa14", "KUKA LBR iiwa 14", 7, "medium", "straight-up", _terms(), "general", "implicitfast", "link7",
        notes="no joint terms at all; sphere collision geoms"),
    Arm("panda", "Franka Emika Panda", 7, "medium", "straight-up", _terms("armature", "damping"), "general",
        "implicit", "link7", urdf=True,
        notes="hand and fingers welded (0.76 kg); qpos0 outside joint4's range; forcerange 12 N m on joints 5-7"),
    Arm("fr3", "Franka Research 3", 7, "medium", "straight-up", _terms("armature", "damping", "frictionloss"),
        "position", "implicitfast", "fr3_link7",
        notes="qpos0 outside the ranges of joints 4 and 6; inheritrange servos"),
    Arm("gen3", "Kinova Gen3", 7, "medium", "straight-up", _terms(), "position", "implicitfast", "bracelet_link",
        keyframe="home", urdf=True,
        notes="four unlimited joints; link 2 5.4 mm off joint 1's axis; servos with kv"),
    Arm("xarm7", "UFACTORY xArm7", 7, "medium", "singular", _terms("armature", "damping", "frictionloss"),
        "general", "implicitfast", "link7",
        notes="gripper welded (0.76 kg with its links); frictionloss 1 N m on every joint"),
    Arm("lite6", "UFACTORY Lite 6", 6, "medium", "singular", _terms("armature", "damping"), "position",
        "implicitfast", "link6",
        notes="kp 2000 kv 200 servos on a 7 kg arm"),
    Arm("sawyer", "Rethink Robotics Sawyer", 7, "medium", "singular", _terms("armature", "damping", "frictionloss"),
        "general", "implicit", "right_l6",
        notes="armature 1 kg m^2 on every joint (2600 times the wrist's own inertia); head welded to the "
              "first link; primitive collision geoms"),
    Arm("z1", "Unitree Z1", 6, "medium", "bent", _terms("damping", "frictionloss"), "motor", "Euler", "link06",
        keyframe=None, urdf=True,
        notes="torque motors (general, gain 1, no limits); no keyframe; qpos0 folded at joint limits"),
    Arm("piper", "AgileX PiPER", 6, "light", "singular", _terms(*JOINT_TERMS), "general", "Euler", "link6",
        notes="stiffness 1 N m/rad on every joint (springref 0); qpos0 folded on the limits of joints 2-3; "
              "gripper welded"),
    Arm("so_arm100", "TheRobotStudio SO-ARM100", 5, "light", "bent", _terms("armature", "frictionloss"),
        "position", "Euler", "Fixed_Jaw",
        notes="armature 0.1 and frictionloss 0.1 on 60-160 g links; dampratio servos; euler poses"),
    Arm("koch_low_cost", "Low-cost robot arm (Koch v1.1)", 5, "light", "bent",
        _terms("armature", "damping", "frictionloss"), "position", "Euler", "gripper_static_finger",
        notes="armature 0.5 on 20-64 g links (100 to 10^5 times their own inertia); negative joint axes; "
              "stiffness 0 written out"),
    Arm("wx250s", "Trossen WidowX 250 6DOF", 6, "light", "singular", _terms("armature", "frictionloss"), "position",
        "implicitfast", "wx250s/gripper_link",
        notes="'/' in body names; gripper link inertia 3e-3 kg m^2 on a 110 g link; fingers welded at home"),
    Arm("vx300s", "Trossen ViperX 300 6DOF (ALOHA)", 6, "medium", "singular",
        _terms("armature", "damping", "frictionloss"), "position", "Euler", "gripper_link", keyframe=None,
        notes="system-identified joint terms (damping up to 20, frictionloss up to 2); no keyframe"),
    Arm("arx_l5", "ARX L5", 6, "medium", "bent", _terms("armature", "frictionloss"), "position", "implicitfast",
        "link6", gravcomp=True,
        notes="gravcomp=1 on the welded fingers; qpos0 on the limits of joints 2-3"),
    Arm("doosan_m1013", "Doosan Robotics M1013", 6, "heavy", "straight-up", _terms("damping"), "position",
        "Euler", "link_6", keyframe=None,
        notes="damping 180 N m s/rad; kp 10000 servos; no keyframe"),
)

BY_NAME = {arm.name: arm for arm in ARMS}


def arm(name: str) -> Arm:
    """The corpus arm called ``name`` (its file stem)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no corpus arm '{name}'; arms are {sorted(BY_NAME)}") from None


class Payload(NamedTuple):
    """A truth model: ``xml`` the arm with a payload welded to ``body``; ``parameters`` (10,) the
    payload's standard parameters [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] in ``body``'s frame
    (h = m c, inertia about the body origin; kg, kg m, kg m^2)."""

    xml: str
    parameters: np.ndarray
    body: str


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    """A rotation matrix (3, 3) from a random unit quaternion, tilted by at least 20 degrees."""
    while True:
        quat = rng.standard_normal(4)
        quat /= np.linalg.norm(quat)
        if 2 * np.arccos(min(1.0, abs(quat[0]))) > np.radians(20):
            break
    mat = np.empty(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


def _reach(model: mujoco.MjModel, body: int) -> float:
    """Sum of the body offsets from ``body`` down to the world: the arm's size scale, m."""
    total = 0.0
    while body != 0:
        total += float(np.linalg.norm(model.body_pos[body]))
        body = model.body_parentid[body]
    return total


def _moving_mass(model: mujoco.MjModel) -> float:
    """Mass of every body that moves (is on a joint or welded to one that is), kg."""
    moving = 0.0
    for b in range(1, model.nbody):
        a = b
        while a != 0 and model.body_jntnum[a] == 0:
            a = model.body_parentid[a]
        if a != 0:
            moving += float(model.body_mass[b])
    return moving


def with_payload(path, body: str | None = None, mass: float | None = None, seed: int | None = None) -> Payload:
    """The arm at ``path`` with a payload welded to ``body`` (default: the arm's terminal body).

    The payload is deterministic per arm (seeded by the file name unless ``seed`` is given): a box of
    random proportions, mass ``PAYLOAD_FRACTION`` of the arm's moving mass unless ``mass`` (kg) is
    given, its frame tilted by a random rotation and offset by about 8 % of the arm's reach, its
    centre of mass offset again within it, its principal axes turned again (a full tensor with
    off-diagonal terms in any frame of the arm). The payload body is inserted into the published XML, every number of the arm kept as
    written (mujoco.MjSpec.to_xml would rewrite the whole arm with 6 significant digits, so the truth
    arm would no longer be the published one); the result is compiled with mujoco.MjSpec before it is
    returned. The XML has no assets and compiles on its own.
    """
    path = Path(path)
    bare = mujoco.MjModel.from_xml_path(str(path))
    if body is None:
        if path.stem not in BY_NAME:
            raise ValueError(f"{path}: not a corpus arm; name the body to weld the payload to")
        body = BY_NAME[path.stem].terminal_body
    body_id = mujoco.mj_name2id(bare, mujoco.mjtObj.mjOBJ_BODY, body)
    if body_id < 0:
        raise ValueError(f"{path} has no body '{body}'")

    rng = np.random.default_rng(zlib.crc32(path.stem.encode()) if seed is None else seed)
    reach = _reach(bare, body_id)
    mass = PAYLOAD_FRACTION * _moving_mass(bare) if mass is None else float(mass)
    if not mass > 0:
        raise ValueError(f"payload mass must be positive, got {mass}")

    frame_rot = _random_rotation(rng)                    # payload frame in the body frame
    frame_pos = 0.08 * reach * rng.uniform(0.5, 1.0) * _unit(rng)
    side = 0.06 * reach * rng.uniform(0.6, 1.4, 3)       # box edge lengths, m
    com = 0.2 * side * rng.uniform(-1.0, 1.0, 3)         # centre of mass in the payload frame
    principal = mass / 12.0 * np.array([side[1]**2 + side[2]**2, side[0]**2 + side[2]**2,
                                        side[0]**2 + side[1]**2])
    axes = _random_rotation(rng)                         # principal axes in the payload frame
    inertia = axes @ np.diag(principal) @ axes.T         # about the CoM, payload frame
    quat, axes_quat = np.empty(4), np.empty(4)
    mujoco.mju_mat2Quat(quat, frame_rot.reshape(-1))
    mujoco.mju_mat2Quat(axes_quat, axes.reshape(-1))

    tree = ET.parse(path, ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))
    parent = next(e for e in tree.getroot().iter("body") if e.get("name") == body)
    element = ET.SubElement(parent, "body", name="payload", pos=_text(frame_pos), quat=_text(quat))
    # principal axes and moments rather than fullinertia: MuJoCo 3.3's compiler diagonalises a
    # fullinertia only to about 1e-6 relative, which would blur the oracle
    ET.SubElement(element, "inertial", pos=_text(com), quat=_text(axes_quat), mass=_text([mass]),
                  diaginertia=_text(principal))
    xml = ET.tostring(tree.getroot(), encoding="unicode")
    mujoco.MjSpec.from_string(xml).compile()  # raises if MuJoCo would reject the truth model

    # The oracle, from the numbers written above (parallel-axis theorem in the body frame).
    c = frame_pos + frame_rot @ com
    inertia_body = frame_rot @ inertia @ frame_rot.T + mass * (c @ c * np.eye(3) - np.outer(c, c))
    parameters = np.array([mass, *(mass * c), inertia_body[0, 0], inertia_body[0, 1], inertia_body[0, 2],
                           inertia_body[1, 1], inertia_body[1, 2], inertia_body[2, 2]])
    return Payload(xml, parameters, body)


def _text(values) -> str:
    """Numbers as XML attribute text, every digit kept (repr round-trips a double exactly)."""
    return " ".join(repr(float(v)) for v in values)


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(3)
    return v / np.linalg.norm(v)
