"""URDF robot descriptions through MuJoCo's compiler, without losing mass to its import rules.

MuJoCo compiles URDF, but its defaults are made for simulation, not for identification:
``fusestatic`` merges links on fixed joints into their parent (their names, which
``<inertial>`` elements and exports refer to, disappear), ``discardvisual``/``strippath``
and the mesh look-up make a ``package://`` mesh reference fail the whole load, a
``<mujoco><compiler>`` element in the URDF may turn on ``balanceinertia``,
``boundmass``/``boundinertia``, ``settotalmass`` or ``inertiafromgeom`` (each rewrites
inertials), and the compiler refuses a moving link whose composite inertia is zero (a link
without ``<inertial>``, a point mass) or breaks the triangle inequality.

Here geometry is dropped before compiling (dynamics needs none), every link stays a body
of its own (links on fixed joints are merged into their moving parent by ``model.py``,
exactly as their inertials say), and the inertials the robot is identified against are
read from the URDF itself (:func:`link_parameters`, URDF semantics: no ``<inertial>`` means
no mass). Where MuJoCo refuses a moving link's inertia, the *simulation* model alone gets
the smallest change that compiles (:data:`MIN_MASS`, :data:`MIN_INERTIA`, or the triangle
inequality restored); the change is reported, and the nominal parameters keep the URDF's
values. ``<mimic>`` joints load as independent joints (as in MuJoCo and Pinocchio).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

from ..errors import ModelError
from .inertia import from_com_inertia, to_com_inertia

# Smallest mass (kg) and added principal moment (kg m^2) of a moving link MuJoCo refuses as
# massless or flat: far below any real link (grams, 1e-5 kg m^2), large enough for its compiler.
MIN_MASS = 1e-6
MIN_INERTIA = 1e-9

_GEOMETRY = ("visual", "collision")
_INERTIA_KEYS = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")


def parse(text: str, where: str) -> ET.Element:
    """The ``<robot>`` root of a URDF text; ModelError naming ``where`` if it is not one."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ModelError(f"cannot parse URDF {where}: {err}") from None
    if root.tag != "robot":
        raise ModelError(f"{where} is not a URDF: its root element is <{root.tag}>, not <robot>")
    return root


def rpy_matrix(rpy) -> np.ndarray:
    """Rotation (3, 3) of URDF roll-pitch-yaw angles (rad): Rz(yaw) Ry(pitch) Rx(roll)."""
    r, p, y = (float(a) for a in rpy)
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _numbers(element: ET.Element, key: str, count: int, default, where: str) -> np.ndarray:
    text = element.get(key) if element is not None else None
    if text is None:
        if default is None:
            raise ModelError(f"{where}: <{element.tag}> lacks the attribute '{key}'")
        return np.asarray(default, dtype=float)
    try:
        values = np.array([float(v) for v in text.split()])
    except ValueError:
        values = np.array([])
    if values.shape != (count,) or not np.all(np.isfinite(values)):
        raise ModelError(f"{where}: {key}=\"{text}\" is not {count} finite number(s)")
    return values


def inertial_frame(inertial: ET.Element, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(origin xyz (3,) m, rotation (3, 3)) of an ``<inertial>``'s frame in its link's frame."""
    origin = inertial.find("origin")
    if origin is None:
        return np.zeros(3), np.eye(3)
    return (_numbers(origin, "xyz", 3, (0, 0, 0), where), rpy_matrix(_numbers(origin, "rpy", 3, (0, 0, 0), where)))


def link_parameters(root: ET.Element, where: str = "URDF") -> dict:
    """Each link's standard parameters (10,) in its own frame, as its ``<inertial>`` says.

    URDF's ``<inertia>`` is about the centre of mass (the inertial origin) in the inertial
    frame's axes; it is rotated into the link frame and moved to the link origin. A link
    without ``<inertial>`` has no mass (zeros), as URDF defines it. ModelError for a missing
    or malformed mass or inertia, a negative or non-finite mass, duplicate link names.
    """
    params = {}
    for link in root.findall("link"):
        name = link.get("name")
        if not name:
            raise ModelError(f"{where}: a <link> has no name")
        if name in params:
            raise ModelError(f"{where}: link '{name}' is defined twice")
        inertial = link.find("inertial")
        if inertial is None:
            params[name] = np.zeros(10)
            continue
        here = f"{where}, link '{name}'"
        mass_element, inertia_element = inertial.find("mass"), inertial.find("inertia")
        if mass_element is None or inertia_element is None:
            raise ModelError(f"{here}: <inertial> needs <mass> and <inertia>")
        mass = float(_numbers(mass_element, "value", 1, None, here)[0])
        if mass < 0:
            raise ModelError(f"{here}: mass {mass:g} kg is negative")
        ixx, ixy, ixz, iyy, iyz, izz = (float(_numbers(inertia_element, k, 1, None, here)[0]) for k in _INERTIA_KEYS)
        com, rotation = inertial_frame(inertial, here)
        inertia = rotation @ np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]]) @ rotation.T
        params[name] = from_com_inertia(mass, com, inertia)
    return params


_JOINT_TYPES = ("revolute", "continuous", "prismatic", "fixed")


def check_joints(root: ET.Element, where: str = "URDF") -> None:
    """ModelError unless every joint is revolute, continuous, prismatic or fixed (a fixed-base arm)."""
    bad = [f"'{j.get('name')}' ({j.get('type')})" for j in root.findall("joint") if j.get("type") not in _JOINT_TYPES]
    if bad:
        raise ModelError(f"{where}: only revolute, continuous, prismatic and fixed joints of a fixed-base arm "
                         f"are supported; found {', '.join(bad)}")


def _geometry_free(root: ET.Element) -> str:
    """The URDF text without <visual> and <collision> elements (so without mesh references)."""
    root = ET.fromstring(ET.tostring(root))  # a copy: the caller's tree stays whole
    for link in root.iter("link"):
        for child in [c for c in link if c.tag in _GEOMETRY]:
            link.remove(child)
    return ET.tostring(root, encoding="unicode")


def _identification_compiler(spec: mujoco.MjSpec) -> None:
    """Compiler settings that keep every link and its inertial as written (whatever a
    <mujoco><compiler> element in the URDF asked for)."""
    compiler = spec.compiler
    compiler.fusestatic = False
    compiler.balanceinertia = False
    compiler.boundmass = 0.0
    compiler.boundinertia = 0.0
    compiler.settotalmass = -1.0
    compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_AUTO  # no geoms: no effect


def _set_body_inertia(body, theta: np.ndarray) -> None:
    """Give a spec body the inertial theta (10,) (mass > 0) as MuJoCo stores it: CoM, principal
    moments and their axes."""
    com = to_com_inertia(theta)
    moments, axes = np.linalg.eigh(com.inertia)
    if np.linalg.det(axes) < 0:
        axes[:, 0] = -axes[:, 0]
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, axes.reshape(-1))
    body.mass = com.mass
    body.ipos = com.com
    body.iquat = quat
    body.inertia = moments
    body.fullinertia = [np.nan, 0, 0, 0, 0, 0]
    body.explicitinertial = True


def _compilable(theta: np.ndarray, reason: str) -> tuple[np.ndarray, str]:
    """The smallest change of a moving link's theta (10,) that MuJoCo's compiler accepts
    after it refused it for ``reason``; returns it and what was changed."""
    if "A + B >= C" in reason:
        com = to_com_inertia(theta)
        moments, axes = np.linalg.eigh(com.inertia)
        moments[:2] += 0.5 * (moments[2] - moments[0] - moments[1]) + MIN_INERTIA  # a + b > c, same axes
        return (from_com_inertia(com.mass, com.com, axes @ np.diag(moments) @ axes.T),
                "principal moments raised to satisfy the triangle inequality")
    if theta[0] < MIN_MASS:
        return (from_com_inertia(MIN_MASS, np.zeros(3), MIN_INERTIA * np.eye(3)),
                f"massless: given {MIN_MASS:g} kg and {MIN_INERTIA:g} kg m^2")
    com = to_com_inertia(theta)
    return (from_com_inertia(com.mass, com.com, com.inertia + MIN_INERTIA * np.eye(3)),
            f"no rotational inertia: {MIN_INERTIA:g} kg m^2 added")


_ELEMENT = re.compile(r"Element name '([^']*)'")


def compile_urdf(root: ET.Element, where: str, inertials: dict) -> tuple[mujoco.MjModel, dict]:
    """(model, adjustments): the URDF compiled by MuJoCo without geometry, every link a body.

    ``inertials`` are the links' parameters (link_parameters). ``adjustments`` maps each
    moving link whose inertia MuJoCo refused to what the simulation model got instead.
    ModelError with MuJoCo's message when it still does not compile.
    """
    check_joints(root, where)
    try:
        spec = mujoco.MjSpec.from_string(_geometry_free(root))
    except ValueError as err:
        raise ModelError(f"cannot load URDF {where}: {' '.join(str(err).split())}") from None
    _identification_compiler(spec)
    changed, reasons = {}, {}
    while True:
        try:
            model = spec.compile()
        except ValueError as err:
            text = " ".join(str(err).split())
            match = _ELEMENT.search(text)
            name = match.group(1) if match else None
            refusable = "moving bodies must be larger than mjMINVAL" in text or "A + B >= C" in text
            # each link is changed at most twice (triangle inequality, then a flat or massless one)
            if not refusable or name not in inertials or len(reasons.get(name, ())) >= 2:
                raise ModelError(f"cannot load URDF {where}: {text}") from None
            changed[name], reason = _compilable(changed.get(name, inertials[name]), text)
            reasons.setdefault(name, []).append(reason)
            _set_body_inertia(spec.body(name), changed[name])
        else:
            return model, {name: "; ".join(r) for name, r in reasons.items()}
