"""Writing identification results: params.json, an updated MJCF model, a Damiao trajectory CSV.

``params.json`` is a superset of the reference robot-sysid tool's schema (its keys keep
their meaning: the terminal body's mass, first moment ``center_of_mass_moment`` =
m c in kg m, inertia about the body-frame origin, the terminal joint's friction,
RMSE, condition number, number of base parameters), extended with the verdict, every
joint, every moving body, the base parameters, physical consistency and, when the true
model is known, the errors.

The updated model is the input MJCF with identified ``<inertial>`` elements; nothing
physically impossible is ever written, nor anything from a result whose verdict is
failed, and the copy is reloaded and checked before it replaces anything.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from ..damiao.protocol import _normalise as _motor_name
from ..damiao.protocol import motor_limits
from ..dynamics.friction import FrictionModel, JointFriction
from ..dynamics.friction import PARAMETER_UNITS as _FRICTION_UNITS
from ..dynamics.inertia import PARAMETER_NAMES, consistency_violations, to_com_inertia
from ..errors import DataError, IdentificationError, ModelError
from ..identification.transmission import identify_transmission, rigid_link_torque
from .payload import payload_document

_INERTIA_KEYS = PARAMETER_NAMES[4:]  # Ixx, Ixy, Ixz, Iyy, Iyz, Izz

UNITS = {
    "mass": "kg",
    "center_of_mass_moment": "kg m",
    "first_moment": "kg m",
    "center_of_mass": "m",
    "inertia_tensor": "kg m^2 (about the body-frame origin, body-frame axes)",
    "coulomb_friction": "N m (N for slide joints)",
    "viscous_friction": "N m s/rad (N s/m for slide joints)",
    "armature": "kg m^2 (kg for slide joints)",
    "offset": "N m (N for slide joints)",
    "stiffness": "N m/rad (N/m for slide joints)",
    "rmse": "N m (N for slide joints)",
    "condition_number": "1",
    "com_error_mm": "mm",
    "percent": "%",
    "payload": "kg, m, kg m^2 (inertia about the centre of mass, in the payload frame's axes)",
}


# --------------------------------------------------------------------------- params.json

def _num(value):
    """A plain Python float for JSON; None for inf/NaN (JSON has no such numbers)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _nums(values) -> list:
    return [_num(v) for v in np.asarray(values, dtype=float).reshape(-1)]


def _inertia_dict(theta) -> dict:
    return {k: _num(theta[4 + i]) for i, k in enumerate(_INERTIA_KEYS)}


def _com(theta):
    """Centre of mass h/m (3,) in m, or None when the mass is not positive."""
    return _nums(np.asarray(theta[1:4]) / theta[0]) if theta[0] > 0 else None


def _body_entry(name: str, theta, identified: bool) -> dict:
    return {"name": name, "mass": _num(theta[0]), "first_moment": _nums(theta[1:4]),
            "center_of_mass": _com(theta), "inertia_tensor": _inertia_dict(theta),
            "identified": bool(identified)}


def _check_same_model(result, robot) -> None:
    if tuple(result.body_names) != tuple(robot.body_names) or tuple(result.joint_names) != tuple(robot.joint_names):
        raise ValueError("the identification result does not belong to this robot model: moving bodies "
                         f"{list(result.body_names)} / joints {list(result.joint_names)} versus "
                         f"{list(robot.body_names)} / {list(robot.joint_names)}")


def _truth_sections(result, truth, terminal_theta) -> tuple[dict, dict]:
    # Imported here so that exporting does not depend on the whole identification pipeline.
    from ..identification.identify import model_parameter_vector

    body = result.terminal_body
    if body not in truth.body_names:
        raise ValueError(f"the truth model has no moving body '{body}'; its moving bodies are {list(truth.body_names)}")
    missing = [j for j in result.joint_names if j not in truth.joint_names]
    if missing:
        raise ValueError(f"the truth model lacks the joints {missing}")
    true_theta = truth.nominal_parameters[truth.body_names.index(body)]
    jidx = [truth.joint_names.index(j) for j in result.joint_names]
    beta_truth = result.base.projection @ model_parameter_vector(truth, result.column_names)
    truth_doc = {
        "body_name": body,
        "mass": _num(true_theta[0]),
        "first_moment": _nums(true_theta[1:4]),
        "center_of_mass": _com(true_theta),
        "inertia_tensor": _inertia_dict(true_theta),
        "coulomb_friction": {j: _num(truth.frictionloss[k]) for j, k in zip(result.joint_names, jidx)},
        "viscous_friction": {j: _num(truth.damping[k]) for j, k in zip(result.joint_names, jidx)},
        "armature": {j: _num(truth.armature[k]) for j, k in zip(result.joint_names, jidx)},
        "base_parameters": {n: _num(v) for n, v in zip(result.base.names, beta_truth)},
    }

    def percent(est, true):
        # relative error is undefined for a zero true value: report null, not inf
        return _num(100.0 * abs(est - true) / abs(true)) if true != 0 else None

    com_error = None
    if terminal_theta[0] > 0 and true_theta[0] > 0:
        com_error = 1000.0 * float(np.linalg.norm(terminal_theta[1:4] / terminal_theta[0] - true_theta[1:4] / true_theta[0]))
    error = {
        "mass_abs": _num(abs(terminal_theta[0] - true_theta[0])),
        "mass_percent": percent(terminal_theta[0], true_theta[0]),
        "com_error_mm": _num(com_error),
        "first_moment_abs": _nums(np.abs(terminal_theta[1:4] - true_theta[1:4])),
        "inertia_abs": {k: _num(abs(terminal_theta[4 + i] - true_theta[4 + i])) for i, k in enumerate(_INERTIA_KEYS)},
        "coulomb_abs": {j: _num(abs(result.coulomb[i] - truth.frictionloss[k]))
                        for i, (j, k) in enumerate(zip(result.joint_names, jidx))},
        "viscous_abs": {j: _num(abs(result.viscous[i] - truth.damping[k]))
                        for i, (j, k) in enumerate(zip(result.joint_names, jidx))},
        "base_parameter_error_percent": {n: percent(v, t) for n, v, t in
                                         zip(result.base.names, result.estimate.values, beta_truth)},
    }
    return truth_doc, error


def written_part(result, robot, body: str) -> np.ndarray:
    """The parameters (10,) a model file's ``<inertial>`` of ``body`` holds: the identified body
    less the welded bodies merged into it, which keep their own inertials."""
    i = robot.body_names.index(body)
    return np.asarray(result.body_parameters[i], dtype=float) - robot.welded_parameters[i]


def _violations(result, robot) -> dict:
    """{body: reasons} why a body, or the part of it a model file holds, is not a real body."""
    out = {}
    for i, body in enumerate(result.body_names):
        reasons = consistency_violations(result.body_parameters[i])
        if not reasons and robot.merged_bodies[i] and f"{body}.m" in result.column_names:
            reasons = [f"less its welded bodies {list(robot.merged_bodies[i])}: {r}"
                       for r in consistency_violations(written_part(result, robot, body))]
        out[body] = reasons
    return out


def _physics(config) -> dict:
    """Where the data came from: hardware, or MuJoCo with the artefacts that were modelled."""
    physics = config.physics
    if physics is None:
        return {"source": "hardware"}
    return {"source": "mujoco", "timestep": physics.timestep, "integrator": physics.integrator,
            "eulerdamp": physics.eulerdamp, "simulated": physics.simulated,
            "damping_delay": physics.damping_delay}


def _evidence(verdict) -> dict:
    e = verdict.evidence
    if e is None:
        return {}
    return {"relative_rmse": _num(e.relative_rmse), "validated": bool(e.validated),
            "condition_number": _num(e.condition_number),
            "motion_snr": {j: _num(v) for j, v in zip(e.joint_names, e.motion_snr)},
            "mass_relative_std": _num(e.mass_relative_std), "com_std_mm": _num(e.com_std_mm),
            "consistency_distance": _num(e.consistency_distance)}


def _per_joint(result, values) -> dict | None:
    return None if values is None else {j: _num(values[i]) for i, j in enumerate(result.joint_names)}


def _joint_frictions(result) -> tuple:
    """Each joint's JointFriction: the result's own, else its Coulomb and viscous terms."""
    if getattr(result, "friction", None) is not None:
        return tuple(result.friction)
    smoothing = result.config.joint_model.smoothing
    return tuple(JointFriction(FrictionModel(), (float(c), float(v)), (), smoothing)
                 for c, v in zip(result.coulomb, result.viscous))


def params_document(result, robot, source: str, truth=None, payload_frame: str | None = None) -> dict:
    """The params.json document (a dict of JSON-ready values) for ``result`` on ``robot``.

    ``result`` an IdentificationResult of ``robot``; ``source`` describes where the data
    came from (a recording path, "simulation", ...); ``truth`` an optional Robot loaded
    from the true model (same moving bodies and joints) to add ``truth`` and ``error``.
    ``payload`` is the terminal body in ROS terms (payload.payload_document), in
    ``payload_frame`` (default: the terminal body's frame).
    All numbers are plain floats in SI units (see the ``units`` key); inf/NaN become null.
    ``verdict`` (good, doubtful, failed) and ``verdict_reasons`` come first.
    """
    _check_same_model(result, robot)
    if result.verdict is None:
        raise ValueError("the identification result carries no verdict (identify() gives every result one)")
    metrics = result.metrics
    ti = result.body_names.index(result.terminal_body)
    tj = result.joint_names.index(result.terminal_joint)
    theta = np.asarray(result.body_parameters[ti], dtype=float)
    identified = {b: f"{b}.m" in result.column_names for b in result.body_names}
    violations = _violations(result, robot)
    rmse_joint = np.asarray(metrics.rmse_per_joint, dtype=float)
    stiffness = result.stiffness if result.stiffness is not None else robot.stiffness
    doc = {
        "verdict": result.verdict.level,
        "verdict_reasons": list(result.verdict.reasons),
        # --- the reference tool's keys, same meaning ---
        "joint_name": result.terminal_joint,
        "mass": _num(theta[0]),
        "center_of_mass_moment": _nums(theta[1:4]),
        "inertia_tensor": _inertia_dict(theta),
        "coulomb_friction": _num(result.coulomb[tj]),
        "viscous_friction": _num(result.viscous[tj]),
        "rmse": _num(metrics.rmse),
        "condition_number": _num(metrics.condition_number),
        "n_base_params": int(result.base.rank),
        # --- extensions ---
        "held_at_model": list(result.held),
        "lumped": list(result.lumped),
        "scope": result.scope,
        "estimator": result.config.estimator,
        "base_estimator": result.estimate.method,
        "robust": bool(result.config.robust),
        "source": str(source),
        "physics": _physics(result.config),
        "body_name": result.terminal_body,
        "merged_bodies": list(robot.merged_bodies[ti]),
        "center_of_mass": _com(theta),
        "condition_number_raw": _num(metrics.condition_number_raw),
        "rank": int(metrics.rank),
        "n_samples": int(metrics.n_samples),
        "units": dict(UNITS),
        "joints": [{"name": j, "coulomb_friction": _num(result.coulomb[i]), "viscous_friction": _num(result.viscous[i]),
                    "armature": _num(result.armature[i]), "offset": _num(result.offset[i]),
                    "stiffness": _num(stiffness[i]), "rmse": _num(rmse_joint[i])}
                   for i, j in enumerate(result.joint_names)],
        "rmse_per_joint": _per_joint(result, rmse_joint),
        "validation_rmse": _num(metrics.validation_rmse),
        "validation_rmse_per_joint": _per_joint(result, metrics.validation_rmse_per_joint),
        "relative_rmse_per_joint": _per_joint(result, metrics.relative_rmse_per_joint),
        "validation_relative_rmse_per_joint": _per_joint(result, metrics.validation_relative_rmse_per_joint),
        "relative_rmse": _num(metrics.relative_rmse),
        "validation_relative_rmse": _num(metrics.validation_relative_rmse),
        "verdict_evidence": _evidence(result.verdict),
        "base_parameters": [{"name": n, "expression": e, "value": _num(v), "std": _num(s), "relative_std_percent": _num(r)}
                            for n, e, v, s, r in zip(result.base.names, result.base.expressions, result.estimate.values,
                                                     result.estimate.std, result.estimate.relative_std)],
        "bodies": [_body_entry(b, result.body_parameters[i], identified[b]) for i, b in enumerate(result.body_names)],
        "physically_consistent": {b: not violations[b] for b in result.body_names},
        "consistency_violations": {b: v for b, v in violations.items() if v},
    }
    # each joint's friction law and all its parameters (the joints' coulomb_friction and
    # viscous_friction stay its Coulomb level and linear viscous coefficient)
    doc["friction_models"] = {j: {"model": f.model.name, "parameters": {k: _num(v) for k, v in f.parameters.items()},
                                  "smoothing": _num(f.smoothing)}
                              for j, f in zip(result.joint_names, _joint_frictions(result))}
    used = {k for entry in doc["friction_models"].values() for k in entry["parameters"]}
    doc["friction_parameter_units"] = {k: u for k, u in _FRICTION_UNITS.items() if k in used}
    doc["payload"] = payload_document(result, robot, payload_frame)
    if truth is not None:
        doc["truth"], doc["error"] = _truth_sections(result, truth, theta)
    return doc


def _temporary_file(directory: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """mkstemp in ``directory``, with the permissions a file created by open() gets (0666
    minus the umask) instead of mkstemp's 0600: it replaces the result file under its name."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    umask = os.umask(0o022)  # the only way to read it; set back at once
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, tmp


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory, so readers
    never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary_file(path.parent, f".{path.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_params_json(path, document: dict) -> None:
    """Write a params_document as indented JSON (atomically). Refuses NaN/inf values."""
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    _atomic_write(Path(path), text.encode("utf-8"))


# --------------------------------------------------------------------------- updated model

_PROLOG_ITEM = re.compile(r"\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>", re.DOTALL)
_ENCODING = re.compile(rb"^(?:\xef\xbb\xbf)?\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")
_DIRS = ("meshdir", "texturedir", "assetdir")


def _fmt(x: float) -> str:
    # 10 significant digits keep the reload check (1e-6 relative) far inside its tolerance;
    # "+ 0.0" turns -0.0 into 0.0
    return "%.10g" % (float(x) + 0.0)


def _split_source(data: bytes):
    """(encoding, prolog, epilog) of an XML file: the text before the root element
    (declaration, comments, DOCTYPE) and after it, which ElementTree would drop."""
    match = _ENCODING.match(data)
    encoding = match.group(1).decode("ascii") if match else "utf-8"
    text = data.decode("utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding)
    pos = 0
    while (item := _PROLOG_ITEM.match(text, pos)) is not None:
        pos = item.end()
    prolog = text[:pos]
    root_tag = re.match(r"<\s*([^\s/>]+)", text[pos:])
    epilog = ""
    if root_tag:
        ends = list(re.finditer(r"</\s*" + re.escape(root_tag.group(1)) + r"\s*>", text))
        if ends:
            epilog = text[ends[-1].end():]
    return encoding, prolog, epilog


def _parse(data: bytes) -> ET.Element:
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True, insert_pis=True))
    parser.feed(data)
    return parser.close()


def _escape(text: str, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if attribute:
        text = text.replace('"', "&quot;").replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#09;")
    return text


def _serialize(element: ET.Element, out: list) -> None:
    """Write ``element`` like the source files are written: ``<tag a="1"/>`` for empty
    elements (ElementTree would write ``<tag a="1" />`` and turn every line into a diff)."""
    if element.tag is ET.Comment:
        out.append(f"<!--{element.text or ''}-->")
    elif element.tag is ET.ProcessingInstruction:
        out.append(f"<?{element.text or ''}?>")
    else:
        attrs = "".join(f' {k}="{_escape(str(v), True)}"' for k, v in element.attrib.items())
        if len(element) == 0 and not element.text:
            out.append(f"<{element.tag}{attrs}/>")
        else:
            out.append(f"<{element.tag}{attrs}>")
            if element.text:
                out.append(_escape(element.text))
            for child in element:
                _serialize(child, out)
            out.append(f"</{element.tag}>")
    if element.tail:
        out.append(_escape(element.tail))


def _parent_map(root: ET.Element) -> dict:
    return {child: parent for parent in root.iter() for child in parent}


def _leading_whitespace(parent: ET.Element, index: int) -> str:
    """The whitespace that precedes child ``index`` of ``parent`` (its indentation)."""
    text = parent.text if index == 0 else parent[index - 1].tail
    return text if text is not None and not text.strip() else "\n"


def _inertial_element(theta: np.ndarray) -> ET.Element:
    com = to_com_inertia(theta)
    inertia = com.inertia
    # MuJoCo's fullinertia order: Ixx Iyy Izz Ixy Ixz Iyz, about the CoM, body-frame axes
    full = (inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1], inertia[0, 2], inertia[1, 2])
    element = ET.Element("inertial")
    element.set("pos", " ".join(_fmt(v) for v in com.com))
    element.set("mass", _fmt(com.mass))
    element.set("fullinertia", " ".join(_fmt(v) for v in full))
    return element


def _set_inertial(body: ET.Element, theta: np.ndarray, indent: str) -> None:
    """Replace (or add as first child) ``body``'s <inertial>; ``indent`` is the body's own
    indentation, used only when the body had no children to copy the layout from."""
    new = _inertial_element(theta)
    for index, child in enumerate(body):
        if child.tag == "inertial":
            new.tail = child.tail
            body.remove(child)
            body.insert(index, new)
            return
    # no <inertial>: MuJoCo derived the inertia from the geoms; an explicit one takes
    # precedence under inertiafromgeom="auto" (the default)
    if len(body):
        new.tail = body.text if body.text is not None and not body.text.strip() else "\n" + indent + "  "
    else:
        body.text = "\n" + indent + "  "
        new.tail = "\n" + indent
    body.insert(0, new)


def _comment_before(parent: ET.Element, element: ET.Element, text: str) -> None:
    index = list(parent).index(element)
    # a previous run's comment is replaced, not stacked
    if index > 0 and parent[index - 1].tag is ET.Comment and (parent[index - 1].text or "").strip().startswith("sysid_ros:"):
        parent.remove(parent[index - 1])
        index -= 1
    comment = ET.Comment(" " + text.replace("--", "- -") + " ")
    # the comment takes the element's indentation, without any blank line between them
    comment.tail = "\n" + _leading_whitespace(parent, index).rsplit("\n", 1)[-1]
    parent.insert(index, comment)


def _compiler_settings(root: ET.Element) -> dict:
    """Effective <compiler> attributes of the main file (a later element overrides)."""
    settings = {}
    for compiler in root.iter("compiler"):
        settings.update(compiler.attrib)
    return settings


def _relocate_assets(root: ET.Element, source_dir: Path, mesh_dir) -> None:
    """Make the copy's asset look-up independent of where it is written: absolute
    meshdir/texturedir/assetdir pointing at the source's resolved directories and
    absolute <include> paths."""
    for include in root.iter("include"):
        file = include.get("file")
        if file and not Path(file).is_absolute():
            include.set("file", str((source_dir / file).resolve()))
    # included files may hold the assets: they resolve against the main file's directories
    uses_files = any("file" in e.attrib for e in root.iter())
    if not uses_files and mesh_dir is None:
        return
    settings = _compiler_settings(root)
    asset = settings.get("assetdir", "")
    resolved = {
        "assetdir": source_dir / asset,
        # MuJoCo: meshdir/texturedir take precedence over assetdir, which applies to both
        "meshdir": Path(mesh_dir) if mesh_dir is not None else source_dir / settings.get("meshdir", asset),
        "texturedir": source_dir / settings.get("texturedir", asset),
    }
    compilers = list(root.iter("compiler"))
    for compiler in compilers:
        for key in _DIRS:
            compiler.attrib.pop(key, None)
    if not compilers:
        first = ET.Element("compiler")
        first.tail = _leading_whitespace(root, 0)
        root.insert(0, first)
        compilers = [first]
    for key in _DIRS:
        compilers[0].set(key, str(resolved[key].resolve()) + os.sep)


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def own_values_to_write(result, robot) -> dict:
    """Body name -> the parameters (10,) to write into its own <inertial>.

    The identified values include the body's welded descendants; those keep their own
    inertials in the file, so the body gets the identified total minus their share.
    IdentificationError for a result whose verdict is failed or a part that is not a real body.
    """
    if result.verdict is not None and result.verdict.level == "failed":
        raise IdentificationError("refusing to write a model from a failed identification: "
                                  + "; ".join(result.verdict.reasons))
    bodies = [result.terminal_body] if result.scope == "terminal" else list(result.body_names)
    values = {}
    for name in bodies:
        own = written_part(result, robot, name)
        reasons = consistency_violations(own)
        if reasons:
            merged = robot.merged_bodies[robot.body_names.index(name)]
            detail = (f" (identified total minus the welded bodies {list(merged)} that keep their own inertials)"
                      if merged else "")
            raise IdentificationError(
                f"refusing to write body '{name}': its parameters{detail} are not physically consistent: "
                + "; ".join(reasons))
        values[name] = own
    return values


def _verify(path: Path, written: dict, result, mesh_dir) -> None:
    from ..dynamics.model import load_robot

    try:
        reloaded = load_robot(path, mesh_dir=mesh_dir)
    except ModelError as err:
        raise IdentificationError(f"the updated model does not load: {err}") from None
    groups = (slice(0, 1), slice(1, 4), slice(4, 10))
    for name in written:
        target = np.asarray(result.body_parameters[result.body_names.index(name)], dtype=float)
        got = reloaded.nominal_parameters[reloaded.body_names.index(name)]
        # relative per group (mass, first moment, inertia): entries of one group share a scale
        for g in groups:
            scale = max(float(np.max(np.abs(target[g]))), 1e-12)
            if float(np.max(np.abs(got[g] - target[g]))) > 1e-6 * scale:
                raise IdentificationError(
                    f"the updated model's body '{name}' reloads as {np.round(got, 9).tolist()} instead of the "
                    f"identified {np.round(target, 9).tolist()} (a <compiler> option such as boundmass, "
                    "boundinertia or balanceinertia may alter inertials); nothing was written")


def write_updated_model(source_path, output_path, robot, result, mesh_dir=None) -> Path:
    """Write a copy of the MJCF ``source_path`` with the identified inertials to ``output_path``.

    Terminal scope: the terminal body's ``<inertial>``; full scope: every moving body's.
    A body's written inertial is its identified total minus its welded descendants (which
    keep their own), as ``<inertial pos mass fullinertia>`` about the CoM in body axes.
    Comments, attribute order, other elements and the XML declaration (only if present)
    are kept; asset paths are made absolute when the copy lives in another directory.
    ``mesh_dir`` is the mesh directory override the robot was loaded with, if any.

    Raises IdentificationError, before writing anything, when the result's verdict is failed,
    a value is not physically consistent, a body is not defined in this file (e.g. in an <include>d one), the
    compiler would ignore or rescale inertials, or the reloaded copy does not reproduce
    ``result.body_parameters``. Returns the output path.
    """
    _check_same_model(result, robot)
    source_path, output_path = Path(source_path), Path(output_path)
    values = own_values_to_write(result, robot)
    data = source_path.read_bytes()
    encoding, prolog, epilog = _split_source(data)
    try:
        root = _parse(data)
    except ET.ParseError as err:
        raise ModelError(f"cannot parse {source_path}: {err}") from None

    settings = _compiler_settings(root)
    if settings.get("inertiafromgeom", "auto").strip().lower() == "true":
        raise IdentificationError(
            f"{source_path} sets <compiler inertiafromgeom=\"true\">: MuJoCo would ignore written inertials; "
            "set it to \"auto\" (or remove it) and give the bodies explicit <inertial> elements")
    if _positive(settings.get("settotalmass", "-1")):
        raise IdentificationError(
            f"{source_path} sets <compiler settotalmass>: MuJoCo would rescale every written mass; remove it first")

    parents = _parent_map(root)
    estimator = result.config.estimator
    rmse = result.metrics.rmse
    for name in values:
        found = [b for b in root.iter("body") if b.get("name") == name]
        if len(found) != 1:
            where = ("is not defined in this file (it may come from an <include>d file or be generated "
                     "by <replicate>/<attach>); edit that file instead" if not found else
                     f"is defined {len(found)} times")
            raise IdentificationError(f"cannot write body '{name}': it {where} ({source_path})")
        body = found[0]
        parent = parents[body]
        indent = _leading_whitespace(parent, list(parent).index(body)).rsplit("\n", 1)[-1]
        _set_inertial(body, values[name], indent)
        _comment_before(parent, body,
                        f"sysid_ros: body '{name}' identified (scope {result.scope}, estimator {estimator}), "
                        f"torque RMSE {rmse:.6g} N m, verdict "
                        f"{result.verdict.level if result.verdict is not None else 'none'}")

    source_dir = source_path.resolve().parent
    output_path.parent.mkdir(parents=True, exist_ok=True)
    if output_path.parent.resolve() != source_dir or mesh_dir is not None:
        _relocate_assets(root, source_dir, mesh_dir)

    root.tail = None
    body_text: list = []
    _serialize(root, body_text)
    text = prolog + "".join(body_text) + epilog
    encoded = text.encode(encoding, errors="xmlcharrefreplace")
    # Check the copy where it will live (relative paths resolve the same) before it
    # replaces anything: a failed check leaves no file behind.
    fd, tmp = _temporary_file(output_path.parent, f".{output_path.stem}.", ".xml")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(encoded)
        _verify(Path(tmp), values, result, None)
        os.replace(tmp, output_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output_path


# --------------------------------------------------------------------------- Damiao CSV

def write_damiao_csv(path, trajectory, torque, motor_types, can_ids=None, joint_names=None) -> dict:
    """Write a trajectory as a Damiao MIT-mode playback CSV, clamped to each motor's limits.

    ``trajectory`` a Trajectory (time (N,) s, q (N, n) rad, dq (N, n) rad/s); ``torque``
    (N, n) N m feed-forward; ``motor_types`` n Damiao type names (see damiao.MOTOR_LIMITS);
    ``can_ids`` n command IDs (default 1..n); ``joint_names`` n names for the ``# joints=``
    line and the returned keys (default: joint indices).

    File: one ``# motor_type=T,can_id=I,mode=MIT`` line per joint, ``# joints=...``, then
    ``time,j0_pos,j0_vel,j0_tau,...`` and rows (time 3 decimals, values 6 decimals).
    Returns {joint name or index: percent of samples where any of position, velocity or
    torque was clamped}. Raises ValueError on count/shape mismatches, unknown motor types
    or non-finite values.
    """
    time = np.asarray(trajectory.time, dtype=float)
    q = np.atleast_2d(np.asarray(trajectory.q, dtype=float))
    dq = np.atleast_2d(np.asarray(trajectory.dq, dtype=float))
    torque = np.asarray(torque, dtype=float)
    num, n = q.shape
    motor_types = list(motor_types)
    if len(motor_types) != n:
        raise ValueError(f"{len(motor_types)} motor type(s) given but the trajectory has {n} joints: "
                         f"{n} are needed, one per joint in order")
    if torque.shape != (num, n) or dq.shape != (num, n) or time.shape != (num,):
        raise ValueError(f"torque shape {torque.shape} (velocity {dq.shape}, time {time.shape}) does not match "
                         f"the trajectory's {num} samples x {n} joints")
    can_ids = list(range(1, n + 1)) if can_ids is None else [int(c) for c in can_ids]
    if len(can_ids) != n:
        raise ValueError(f"{len(can_ids)} CAN ids given for {n} joints")
    if len(set(can_ids)) != n or not all(0 < c <= 0x7FF for c in can_ids):
        raise ValueError(f"CAN ids {can_ids} must be distinct 11-bit ids in 1..0x7FF")
    names = list(range(n)) if joint_names is None else [str(j) for j in joint_names]
    if len(names) != n:
        raise ValueError(f"{len(names)} joint names given for {n} joints")
    for label, values in (("time", time), ("position", q), ("velocity", dq), ("torque", torque)):
        if not np.all(np.isfinite(values)):
            raise ValueError(f"the {label} contains NaN or infinite values; refusing to write motor commands")
    limits = [motor_limits(t) for t in motor_types]

    channels = np.empty((num, n, 3))
    clamped = np.zeros((num, n), dtype=bool)
    for j, lim in enumerate(limits):
        for c, (values, bound) in enumerate(((q[:, j], lim.pmax), (dq[:, j], lim.vmax), (torque[:, j], lim.tmax))):
            channels[:, j, c] = np.clip(values, -bound, bound)
            clamped[:, j] |= np.abs(values) > bound
    percent = 100.0 * clamped.mean(axis=0) if num else np.zeros(n)

    lines = [f"# motor_type={_motor_name(t)},can_id={c},mode=MIT" for t, c in zip(motor_types, can_ids)]
    lines.append("# joints=" + ",".join(str(j) if joint_names is not None else f"j{j}" for j in names))
    lines.append(",".join(["time"] + [f"j{j}_{s}" for j in range(n) for s in ("pos", "vel", "tau")]))
    flat = channels.reshape(num, 3 * n)
    for k in range(num):
        lines.append(f"{time[k]:.3f}," + ",".join(f"{v:.6f}" for v in flat[k] + 0.0))
    _atomic_write(Path(path), ("\n".join(lines) + "\n").encode("utf-8"))
    return {name: float(p) for name, p in zip(names, percent)}


def add_transmission(document: dict, robot, result, recording, filter_config) -> str | None:
    """Identify the transmissions of a double-encoder ``recording`` (joint torque, robot joint
    order) under the rigid-body ``result`` and put the figures into params.json's ``joints``
    entries (matched by name), the notes, if any, into ``transmission_notes``. Returns a
    warning when none could be identified (the rigid-body result stands without them), else None."""
    try:
        estimate = identify_transmission(recording.select(robot.joint_names), rigid_link_torque(robot, result),
                                         filter_config)
    except DataError as err:
        document["transmission_notes"] = [f"not identified: {err}"]
        return f"transmission not identified: {err}"
    figures = {entry.pop("joint"): entry for entry in estimate.as_dicts()}
    for joint in document["joints"]:
        joint.update(figures.get(joint["name"], {}))
    if estimate.notes:
        document["transmission_notes"] = list(estimate.notes)
