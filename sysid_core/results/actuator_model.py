"""The identified actuator written into an MJCF model: joint physics and one motor per joint.

``write_actuator_model`` sets each joint's ``armature``, ``damping`` and ``frictionloss`` to the
identified values and gives it one ``<motor>`` whose control is the drive's torque as it
reports it (the MIT law's output): ``gear`` = the effort gain (true torque / reported effort)
and ``ctrlrange`` = +-TMAX, the motor's torque limit, with ``ctrllimited``. Actuators the file
already had on those joints are removed (they would drive the joint twice). MuJoCo compiles
the result before it replaces anything, and the compiled values are checked against what
was meant to be written.
"""
from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np

from ..errors import IdentificationError, ModelError
from .export import _fmt, _parse, _relocate_assets, _serialize, _split_source

# MJCF actuator elements that name a joint through their "joint" attribute
_ACTUATOR_TAGS = ("motor", "position", "velocity", "intvelocity", "damper", "cylinder", "muscle", "adhesion",
                  "general", "plugin")
MOTOR_PREFIX = "sysid_motor_"


def write_actuator_model(source_path, output_path, joint_names, armature, damping, frictionloss, effort_gains,
                         torque_limits) -> Path:
    """Copy the MJCF ``source_path`` to ``output_path`` with the actuator of every named joint.

    ``joint_names`` (n,); ``armature`` (n,) kg m^2, ``damping`` (n,) N m s/rad, ``frictionloss``
    (n,) N m (all >= 0), ``effort_gains`` (n,) > 0, ``torque_limits`` (n,) N m > 0 (the drive's
    TMAX: the motor's ctrlrange). ``output_path`` may be ``source_path``. IdentificationError,
    before anything is written, for a value that is not physically possible, a joint the file
    does not define, or a copy MuJoCo does not compile to these values. Returns the output path.
    """
    source_path, output_path = Path(source_path), Path(output_path)
    names = tuple(joint_names)
    values = {k: np.asarray(v, dtype=float) for k, v in
              (("armature", armature), ("damping", damping), ("frictionloss", frictionloss),
               ("gear", effort_gains), ("limit", torque_limits))}
    for key, v in values.items():
        if v.shape != (len(names),) or not np.all(np.isfinite(v)):
            raise IdentificationError(f"{key} must be {len(names)} finite values, got {v.tolist()}")
        least_ok = v > 0 if key in ("gear", "limit") else v >= 0
        if not np.all(least_ok):
            bad = [f"{j} {x:g}" for j, x, ok in zip(names, v, least_ok) if not ok]
            raise IdentificationError(f"refusing to write {key} {', '.join(bad)}: not physically possible")
    data = source_path.read_bytes()
    encoding, prolog, epilog = _split_source(data)
    try:
        root = _parse(data)
    except ET.ParseError as err:
        raise ModelError(f"cannot parse {source_path}: {err}") from None
    joints = {}
    for element in root.iter("joint"):
        if element.get("name") in names:
            joints.setdefault(element.get("name"), []).append(element)
    missing = [j for j in names if len(joints.get(j, ())) != 1]
    if missing:
        raise IdentificationError(f"joints {missing} are not defined exactly once in {source_path}")
    for j, name in enumerate(names):
        element = joints[name][0]
        for key in ("armature", "damping", "frictionloss"):
            element.set(key, _fmt(values[key][j]))

    for section in root.findall("actuator"):
        for element in list(section):
            if element.tag in _ACTUATOR_TAGS and element.get("joint") in names:
                section.remove(element)
    section = root.find("actuator")
    if section is None:
        section = ET.SubElement(root, "actuator")
        section.text, section.tail = "\n    ", "\n"
    for j, name in enumerate(names):
        motor = ET.SubElement(section, "motor", {
            "name": MOTOR_PREFIX + name, "joint": name, "gear": _fmt(values["gear"][j]), "ctrllimited": "true",
            "ctrlrange": f"{_fmt(-values['limit'][j])} {_fmt(values['limit'][j])}"})
        motor.tail = "\n    " if j + 1 < len(names) else "\n  "

    source_dir = source_path.resolve().parent
    output_path.parent.mkdir(parents=True, exist_ok=True)
    if output_path.parent.resolve() != source_dir:
        _relocate_assets(root, source_dir, None)
    root.tail = None
    text: list = []
    _serialize(root, text)
    encoded = (prolog + "".join(text) + epilog).encode(encoding, errors="xmlcharrefreplace")
    fd, tmp = tempfile.mkstemp(dir=output_path.parent, prefix=f".{output_path.stem}.", suffix=".xml")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(encoded)
        _verify(Path(tmp), names, values)
        os.replace(tmp, output_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output_path


def _verify(path: Path, names: tuple, values: dict) -> None:
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as err:
        raise IdentificationError(f"MuJoCo does not compile the actuator model: {err}") from None
    for j, name in enumerate(names):
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        dof = model.jnt_dofadr[jid]
        aid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, MOTOR_PREFIX + name)
        got = {"armature": model.dof_armature[dof], "damping": model.dof_damping[dof],
               "frictionloss": model.dof_frictionloss[dof], "gear": model.actuator_gear[aid, 0] if aid >= 0 else np.nan,
               "limit": model.actuator_ctrlrange[aid, 1] if aid >= 0 else np.nan}
        for key, value in got.items():
            if not abs(value - values[key][j]) <= 1e-9 * max(1.0, abs(values[key][j])):
                raise IdentificationError(f"the actuator model compiles joint '{name}' {key} to {value!r} instead "
                                          f"of {values[key][j]!r}; nothing was written")
