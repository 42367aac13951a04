"""Writing identified parameters back into the URDF a robot was loaded from: ``updated_model.urdf``.

Only numbers change, everything else stays byte for byte (comments, attribute order and
quotes, whitespace, elements we do not touch): the file is edited as text at the byte
offsets the XML parser reports, never re-serialised.

- each identified link's ``<inertial>``: ``origin xyz`` at the centre of mass, ``mass``, and
  ``inertia`` about the centre of mass in the inertial frame's axes (its ``rpy`` is kept, the
  tensor is rotated into it), as URDF defines it. The value is the identified total of the
  moving body minus the links fixed to it, which keep their own inertials (as the MJCF
  export does for welded bodies). A link without ``<inertial>`` gets one.
- each joint's ``<dynamics damping friction>`` from the identified viscous and Coulomb
  friction (only the terms identified; with a nonlinear friction law, its linear viscous
  coefficient and Coulomb level: URDF has no other).

Nothing physically impossible is written: an inconsistent inertia or a negative friction
raises IdentificationError and no file is written; the copy is reloaded (load_robot) and
checked against the identification before it replaces anything.

For a URDF input no ``updated_model.xml`` is written: MuJoCo's MJCF writer keeps six
significant digits, so a saved compiled model would no longer be the URDF's kinematics and
inertias; ``updated_model.urdf`` itself loads in every tool of this package (and MuJoCo).
"""
from __future__ import annotations

import re
import xml.parsers.expat as expat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dynamics import urdf
from ..dynamics.inertia import to_com_inertia
from ..errors import IdentificationError, ModelError
from .export import _atomic_write, own_values_to_write, write_updated_model

_INERTIA_KEYS = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
_INERTIA_INDEX = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


def _fmt(x: float) -> str:
    return "%.12g" % (float(x) + 0.0)  # "+ 0.0": no "-0"


@dataclass
class _Element:
    """An element's place in the file: ``start`` at '<', ``tag_end`` just after its start
    tag's '>', ``end`` just after its end tag (or = tag_end when self-closing)."""

    tag: str
    attrs: dict
    start: int
    tag_end: int = -1
    end: int = -1
    parent: "_Element | None" = None
    children: list = None

    @property
    def empty(self) -> bool:
        return self.end == self.tag_end


def _tag_end(data: bytes, start: int) -> int:
    """Index just after the '>' closing the tag that starts at ``start`` (quotes respected)."""
    quote = None
    for i in range(start, len(data)):
        c = data[i:i + 1]
        if quote:
            if c == quote:
                quote = None
        elif c in (b'"', b"'"):
            quote = c
        elif c == b">":
            return i + 1
    raise ModelError("unterminated tag in the URDF")


def _elements(data: bytes) -> _Element:
    """The element tree of ``data`` with byte spans (the root element)."""
    parser = expat.ParserCreate()
    stack: list = []
    root: list = []

    def start(tag, attrs):
        element = _Element(tag, attrs, parser.CurrentByteIndex, children=[],
                           parent=stack[-1] if stack else None)
        element.tag_end = _tag_end(data, element.start)
        if stack:
            stack[-1].children.append(element)
        else:
            root.append(element)
        stack.append(element)

    def end(tag):
        element = stack.pop()
        index = parser.CurrentByteIndex
        if data[element.tag_end - 2:element.tag_end] == b"/>":
            element.end = element.tag_end
        else:
            element.end = _tag_end(data, index)

    parser.StartElementHandler, parser.EndElementHandler = start, end
    try:
        parser.Parse(data, True)
    except expat.ExpatError as err:
        raise ModelError(f"cannot parse the URDF: {err}") from None
    return root[0]


def _child(element: _Element, tag: str):
    return next((c for c in element.children if c.tag == tag), None)


def _indent(data: bytes, position: int) -> bytes:
    """The whitespace between the start of the line holding ``position`` and ``position``."""
    line_start = data.rfind(b"\n", 0, position) + 1
    prefix = data[line_start:position]
    return prefix if not prefix.strip() else b""


class _Edits:
    """Non-overlapping byte replacements of one file, applied at the end."""

    def __init__(self, data: bytes):
        self.data = data
        self.items: list = []

    def replace(self, start: int, end: int, text: bytes) -> None:
        self.items.append((start, end, text))

    def set_attribute(self, element: _Element, name: str, value: str) -> None:
        tag = self.data[element.start:element.tag_end]
        match = re.search(rb"(\s" + re.escape(name.encode()) + rb"\s*=\s*)([\"'])(.*?)\2", tag, re.DOTALL)
        if match:
            self.replace(element.start + match.start(3), element.start + match.end(3), value.encode())
        else:  # after the last attribute, before '>' or '/>'
            close = element.tag_end - (2 if tag.endswith(b"/>") else 1)
            while self.data[close - 1:close].isspace():
                close -= 1
            self.replace(close, close, f' {name}="{value}"'.encode())

    def apply(self) -> bytes:
        out, last = [], len(self.data)
        for start, end, text in sorted(self.items, key=lambda item: item[0], reverse=True):
            if end > last:
                raise AssertionError("overlapping URDF edits")  # a bug, not bad input
            out.append(self.data[end:last])
            out.append(text)
            last = start
        out.append(self.data[:last])
        return b"".join(reversed(out))


def _unit(data: bytes, element: _Element) -> bytes:
    """One level of indentation as the file uses it (from the element's children), else 2 spaces."""
    own = _indent(data, element.start)
    for child in element.children:
        inner = _indent(data, child.start)
        if len(inner) > len(own) and inner.startswith(own):
            return inner[len(own):]
    return b"  "


def _insert_child(edits: _Edits, element: _Element, lines: list, first: bool) -> None:
    """Insert ``lines`` (bytes, one element's text each) as the first or last child of ``element``."""
    data = edits.data
    own = _indent(data, element.start)
    inner = own + _unit(data, element)
    text = b"".join(b"\n" + inner + line for line in lines)
    if element.empty:  # <link name="x"/> -> <link name="x">...</link>
        head = data[element.start:element.tag_end - 2].rstrip()
        edits.replace(element.start, element.end, head + b">" + text + b"\n" + own + f"</{element.tag}>".encode())
    elif first:
        edits.replace(element.tag_end, element.tag_end, text)
    else:
        close = data.rfind(b"<", element.tag_end, element.end)  # the end tag
        before = close
        while before > element.tag_end and data[before - 1:before] in (b" ", b"\t"):
            before -= 1
        if data[before - 1:before] == b"\n":  # end tag on its own line: insert before that line break
            edits.replace(before - 1, before - 1, text)
        else:
            edits.replace(close, close, text + b"\n" + own)


def _inertia_values(theta: np.ndarray, rotation: np.ndarray) -> tuple[np.ndarray, float, dict]:
    """(CoM (3,) in the link frame, mass, {ixx..izz} about the CoM in the inertial frame's axes)."""
    com = to_com_inertia(theta)
    inertia = rotation.T @ com.inertia @ rotation
    return com.com, com.mass, {k: inertia[i, j] for k, (i, j) in zip(_INERTIA_KEYS, _INERTIA_INDEX)}


def _edit_inertial(edits: _Edits, link: _Element, theta: np.ndarray, where: str) -> None:
    data = edits.data
    inertial = _child(link, "inertial")
    if inertial is None:
        com, mass, inertia = _inertia_values(theta, np.eye(3))
        unit = _unit(data, link).decode()
        lines = ["<inertial>",
                 f'{unit}<origin xyz="{" ".join(_fmt(v) for v in com)}" rpy="0 0 0"/>',
                 f'{unit}<mass value="{_fmt(mass)}"/>',
                 f"{unit}<inertia " + " ".join(f'{k}="{_fmt(v)}"' for k, v in inertia.items()) + "/>",
                 "</inertial>"]
        _insert_child(edits, link, [line.encode() for line in lines], first=True)
        return
    origin = _child(inertial, "origin")
    rotation = np.eye(3)
    if origin is not None and "rpy" in origin.attrs:  # valid: the robot loaded from this text
        rotation = urdf.rpy_matrix([float(v) for v in origin.attrs["rpy"].split()])
    com, mass, inertia = _inertia_values(theta, rotation)
    xyz = " ".join(_fmt(v) for v in com)
    if origin is not None:
        edits.set_attribute(origin, "xyz", xyz)
    else:
        _insert_child(edits, inertial, [f'<origin xyz="{xyz}" rpy="0 0 0"/>'.encode()], first=True)
    for tag in ("mass", "inertia"):
        if _child(inertial, tag) is None:
            raise ModelError(f"{where}: link '{link.attrs.get('name')}' has an <inertial> without <{tag}>")
    edits.set_attribute(_child(inertial, "mass"), "value", _fmt(mass))
    for key, value in inertia.items():
        edits.set_attribute(_child(inertial, "inertia"), key, _fmt(value))


def _edit_dynamics(edits: _Edits, joint: _Element, values: dict) -> None:
    dynamics = _child(joint, "dynamics")
    if dynamics is None:
        text = "<dynamics " + " ".join(f'{k}="{_fmt(v)}"' for k, v in values.items()) + "/>"
        _insert_child(edits, joint, [text.encode()], first=False)
        return
    for key, value in values.items():
        edits.set_attribute(dynamics, key, _fmt(value))


def _friction_to_write(result) -> dict:
    """{joint: {"damping": viscous, "friction": Coulomb}} for the terms identified; IdentificationError
    for a negative or non-finite value."""
    terms = set(result.config.joint_model.terms)
    if not result.config.friction_models.is_default:
        terms |= {"coulomb", "viscous"}
    keys = [(k, t) for k, t in (("damping", "viscous"), ("friction", "coulomb")) if t in terms]
    values = {}
    for i, joint in enumerate(result.joint_names):
        entry = {k: float(getattr(result, t)[i]) for k, t in keys}
        bad = {k: v for k, v in entry.items() if not (np.isfinite(v) and v >= 0)}
        if bad:
            raise IdentificationError(
                f"refusing to write joint '{joint}': identified {', '.join(f'{k} {v:.6g}' for k, v in bad.items())} "
                "is negative (physically impossible; the data cannot tell it from zero: identify with "
                "--estimator consistent, which keeps friction non-negative)")
        if entry:
            values[joint] = entry
    return values


def _verify(text: str, result, written: dict, friction: dict) -> None:
    from ..dynamics.model import load_robot
    try:
        reloaded = load_robot(text)
    except ModelError as err:
        raise IdentificationError(f"the updated URDF does not load: {err}") from None
    groups = (slice(0, 1), slice(1, 4), slice(4, 10))
    for name in written:
        target = np.asarray(result.body_parameters[result.body_names.index(name)], dtype=float)
        got = reloaded.nominal_parameters[reloaded.body_names.index(name)]
        for g in groups:
            scale = max(float(np.max(np.abs(target[g]))), 1e-12)
            if float(np.max(np.abs(got[g] - target[g]))) > 1e-9 * scale:
                raise IdentificationError(f"the updated URDF's link '{name}' reloads as {np.round(got, 9).tolist()} "
                                          f"instead of the identified {np.round(target, 9).tolist()}; nothing written")
    for joint, entry in friction.items():
        j = reloaded.joint_names.index(joint)
        for key, got in (("damping", reloaded.damping[j]), ("friction", reloaded.frictionloss[j])):
            if key in entry and abs(got - entry[key]) > 1e-9 * max(abs(entry[key]), 1e-12):
                raise IdentificationError(f"the updated URDF's joint '{joint}' reloads with {key} {got} instead of "
                                          f"{entry[key]}; nothing written")


def updated_urdf(robot, result) -> str:
    """The text of ``robot``'s URDF (robot.description) with the identified inertials and
    joint friction of ``result``; IdentificationError (nothing returned) for an impossible
    value or a copy that does not reload as identified."""
    if robot.source_format != "urdf" or robot.description is None:
        raise ValueError("the robot was not loaded from a URDF")
    values = own_values_to_write(result, robot)
    friction = _friction_to_write(result)
    data = robot.description.encode("utf-8")
    root = _elements(data)
    where = str(robot.path) if robot.path is not None else "the URDF"
    links = {c.attrs.get("name"): c for c in root.children if c.tag == "link"}
    joints = {c.attrs.get("name"): c for c in root.children if c.tag == "joint"}
    edits = _Edits(data)
    for name, theta in values.items():
        _edit_inertial(edits, links[name], theta, where)
    for name, entry in friction.items():
        _edit_dynamics(edits, joints[name], entry)
    text = edits.apply().decode("utf-8")
    _verify(text, result, values, friction)
    return text


def write_updated_urdf(output_path, robot, result) -> Path:
    """Write updated_urdf(robot, result) to ``output_path`` atomically; returns the path."""
    output_path = Path(output_path)
    _atomic_write(output_path, updated_urdf(robot, result).encode("utf-8"))
    return output_path


def write_updated_robot(output_dir, robot, result, mesh_dir=None) -> Path:
    """The updated model beside params.json, in the input's format: ``updated_model.urdf`` for
    a URDF robot, ``updated_model.xml`` (write_updated_model) for an MJCF one. Returns its path."""
    output_dir = Path(output_dir)
    if robot.source_format == "urdf":
        return write_updated_urdf(output_dir / "updated_model.urdf", robot, result)
    if robot.path is None:
        raise ValueError("an MJCF robot loaded from text has no file to update")
    return write_updated_model(robot.path, output_dir / "updated_model.xml", robot, result, mesh_dir=mesh_dir)
