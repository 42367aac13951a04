"""The outputs of a friction sweep: friction_sweep.json, a text table and friction_sweep.png.

friction_sweep.json (``read_friction_sweep`` reads it back and checks it)::

    {"units": {"velocity": "rad/s", "torque": "N m"},
     "joints": [{"joint": name, "odd": bool,            # odd: mirrored from each speed's two directions
                 "velocity": [K], "torque": [K], "std": [K],   # the measured points, rad/s and N m
                 "laws": {law: {"parameters": {name: value}, "std": {name: value or null}, "rmse": N m}
                          or {"not_fitted": reason}},
                 "chosen": law or null, "chosen_by": how}]}

The laws are those of ``dynamics.friction`` (parameters in SI units, as params.json names them;
``std`` their standard deviations, null where the points do not determine them). ``chosen`` is
the law a later identification takes as the joint's known friction (``sysid-identify
--friction-from``): the one ``--friction-model`` named for the joint, else the one the points
support best (``friction_curve.choose_law``); null when no law qualifies. The figure plots each
joint's points with two standard errors and every fitted law, the chosen one thicker.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dynamics.friction import FRICTION_MODELS, FrictionModel, JointFriction
from ..errors import DataError
from ..identification.friction_curve import FrictionCurve, choose_law

CHOSEN_BY_DATA = "the points (Bayesian information criterion)"
CHOSEN_BY_OPTION = "--friction-model"


def chosen_laws(points, curves, named=None) -> list:
    """Per joint (law name or None, how it was chosen): the law ``named`` gives the joint ((n,)
    names, or None for none named; None where that law could not be fitted), else
    ``friction_curve.choose_law``."""
    out = []
    for k, (p, fitted) in enumerate(zip(points, curves)):
        if named is not None:
            law = named[k]
            out.append((law if isinstance(fitted.get(law), FrictionCurve) else None, CHOSEN_BY_OPTION))
        else:
            out.append((choose_law(p, fitted), CHOSEN_BY_DATA))
    return out


def friction_document(points, curves, chosen=None) -> dict:
    """The JSON document of the sweep: ``points`` FrictionPoints per joint, ``curves`` the
    matching {law: FrictionCurve or reason} per joint, ``chosen`` per joint (law or None, how;
    default ``chosen_laws(points, curves)``)."""
    chosen = chosen_laws(points, curves) if chosen is None else chosen
    joints = []
    for p, fitted, (law, how) in zip(points, curves, chosen):
        laws = {}
        for name, curve in fitted.items():
            if isinstance(curve, FrictionCurve):
                laws[name] = {"parameters": {k: float(v) for k, v in curve.friction.parameters.items()},
                              "std": {k: curve.std.get(k) for k in curve.friction.parameters},
                              "rmse": curve.rmse}
            else:
                laws[name] = {"not_fitted": curve}
        joints.append({"joint": p.joint, "odd": bool(p.odd), "velocity": p.velocity.tolist(),
                       "torque": p.torque.tolist(), "std": p.std.tolist(), "laws": laws,
                       "chosen": law, "chosen_by": how})
    return {"units": {"velocity": "rad/s", "torque": "N m"}, "joints": joints}


@dataclass(frozen=True, eq=False)
class SweptJoint:
    """One joint of a friction_sweep.json read back: ``joint`` name, ``velocity`` (K,) rad/s of
    its points, ``laws`` {law: FrictionCurve (parameter ``std`` None where not given) or the
    reason it was not fitted}, ``chosen`` law name or None."""

    joint: str
    velocity: np.ndarray
    laws: dict
    chosen: str | None


def _number(value, where: str, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DataError(f"{where} must be a finite number{' or null' if allow_none else ''}, got {value!r}")
    return float(value)


def _law(name: str, entry, where: str):
    """FrictionCurve or reason of one law's entry; DataError for anything else."""
    if not isinstance(entry, dict):
        raise DataError(f"{where} must be an object, got {type(entry).__name__}")
    if "not_fitted" in entry:
        if not isinstance(entry["not_fitted"], str):
            raise DataError(f"{where}.not_fitted must be a string")
        return entry["not_fitted"]
    if name not in FRICTION_MODELS:
        raise DataError(f"{where}: unknown friction law '{name}'; the identification knows {list(FRICTION_MODELS)}")
    model = FrictionModel(name)
    parameters = entry.get("parameters")
    if not isinstance(parameters, dict):
        raise DataError(f"{where} has neither 'parameters' (an object) nor 'not_fitted'")
    needed = list(model.linear_names) + list(model.nonlinear_names)
    allowed = set(needed) | ({"static"} if name in ("stribeck", "stribeck_tanh") else set())
    missing, extra = [k for k in needed if k not in parameters], sorted(set(parameters) - allowed)
    if missing or extra:
        raise DataError(f"{where}.parameters: " + "; ".join(
            part for part in (f"missing {missing}" if missing else "", f"not of this law {extra}" if extra else "")
            if part) + f" (the law's parameters are {needed})")
    values = {k: _number(parameters[k], f"{where}.parameters.{k}") for k in parameters}
    for k in model.nonlinear_names:  # velocity scales divide, an exponent shapes: > 0; a threshold >= 0
        if not (values[k] >= 0 if k == "threshold" else values[k] > 0):
            raise DataError(f"{where}.parameters.{k} must be {'>= 0' if k == 'threshold' else '> 0'}, "
                            f"got {values[k]}")
    std = entry.get("std", {})
    if not isinstance(std, dict) or sorted(set(std) - allowed):
        raise DataError(f"{where}.std must be an object of the law's parameters")
    std = {k: _number(std.get(k), f"{where}.std.{k}", allow_none=True) for k in allowed if k in parameters}
    if any(v is not None and v < 0 for v in std.values()):
        raise DataError(f"{where}.std: a standard deviation is negative")
    friction = JointFriction(model, tuple(values[k] for k in model.linear_names),
                             tuple(values[k] for k in model.nonlinear_names))
    return FrictionCurve(friction, _number(entry.get("rmse"), f"{where}.rmse"), std)


def read_friction_sweep(path) -> list:
    """SweptJoint per joint of the friction_sweep.json at ``path``, in the file's order.
    DataError naming the file and the entry when it is not such a document (see the module's
    docstring): unreadable, not JSON, a key missing or of the wrong type, a joint twice, an
    unknown law, a law's parameters not its own, a number not finite, a chosen law not fitted."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except OSError as err:
        raise DataError(f"{path}: cannot be read: {err.strerror or err}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: not a JSON file ({err})") from None
    if not isinstance(document, dict) or not isinstance(document.get("joints"), list) or not document["joints"]:
        raise DataError(f"{path}: not a friction sweep (friction_sweep.json): no 'joints' list")
    if document.get("units") != {"velocity": "rad/s", "torque": "N m"}:
        raise DataError(f"{path}: 'units' must be {{'velocity': 'rad/s', 'torque': 'N m'}}, got {document.get('units')!r}")
    out = []
    for k, entry in enumerate(document["joints"]):
        where = f"{path}: joints[{k}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("joint"), str):
            raise DataError(f"{where} has no joint name ('joint')")
        where = f"{path}: joint '{entry['joint']}'"
        if entry["joint"] in [j.joint for j in out]:
            raise DataError(f"{where} appears twice")
        velocity = entry.get("velocity")
        if not isinstance(velocity, list) or not velocity:
            raise DataError(f"{where}: 'velocity' must be a non-empty list of the points' velocities")
        velocity = np.array([_number(v, f"{where}.velocity[{i}]") for i, v in enumerate(velocity)])
        laws = entry.get("laws")
        if not isinstance(laws, dict):
            raise DataError(f"{where}: 'laws' must be an object")
        laws = {name: _law(name, law, f"{where}.laws.{name}") for name, law in laws.items()}
        chosen = entry.get("chosen")
        if chosen is not None and not isinstance(laws.get(chosen), FrictionCurve):
            raise DataError(f"{where}: the chosen law {chosen!r} is not among its fitted laws "
                            f"{[n for n, c in laws.items() if isinstance(c, FrictionCurve)]}")
        out.append(SweptJoint(entry["joint"], velocity, laws, chosen))
    return out


def format_friction(points, curves, chosen=None) -> str:
    """Per joint: the number of points, each law's RMSE, best first, and the chosen law
    (``chosen`` as friction_document's; default ``chosen_laws``)."""
    chosen = chosen_laws(points, curves) if chosen is None else chosen
    lines = []
    for p, fitted, (law, how) in zip(points, curves, chosen):
        good = sorted(((c.rmse, n) for n, c in fitted.items() if isinstance(c, FrictionCurve)))
        laws = ", ".join(f"{n} {r:.3g}" for r, n in good) or "none fitted"
        lines.append(f"  {p.joint}: {p.velocity.size} points from {p.velocity.min():+.3g} to "
                     f"{p.velocity.max():+.3g} rad/s; RMSE N m: {laws}; chosen: {law or 'none'} (by {how})")
    return "\n".join(lines)


def write_friction_sweep(output_dir, points, curves, plots: bool = True, chosen=None) -> list:
    """Write friction_sweep.json (and friction_sweep.png with ``plots``) into ``output_dir``;
    ``chosen`` as friction_document's. Returns the paths written."""
    output_dir = Path(output_dir)
    path = output_dir / "friction_sweep.json"
    chosen = chosen_laws(points, curves) if chosen is None else chosen
    path.write_text(json.dumps(friction_document(points, curves, chosen), indent=1, allow_nan=False) + "\n")
    written = [path]
    if plots:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        figure = Figure(figsize=(8.0, max(2.5, 2.2 * len(points))), constrained_layout=True)
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(points), 1, squeeze=False)[:, 0]
        for ax, p, fitted, (law, _) in zip(axes, points, curves, chosen):
            ax.errorbar(p.velocity, p.torque, yerr=2 * p.std, fmt="o", color="0.2", ms=3, label="measured")
            grid = np.linspace(p.velocity.min(), p.velocity.max(), 400)
            for name, curve in fitted.items():
                if isinstance(curve, FrictionCurve):
                    ax.plot(grid, curve.friction.torque(grid), lw=2.0 if name == law else 1.0,
                            label=f"{name} ({curve.rmse:.2g} N m)" + (", chosen" if name == law else ""))
            ax.set_ylabel(f"{p.joint} [N m]")
            ax.axhline(0.0, color="0.8", lw=0.5)
            ax.legend(fontsize=6, loc="upper left")
        axes[-1].set_xlabel("velocity [rad/s]")
        figure.savefig(output_dir / "friction_sweep.png", dpi=110)
        written.append(output_dir / "friction_sweep.png")
    return written


def annotate_params(document: dict, known, shares: dict) -> dict:
    """Mark in a params.json ``document`` (export.params_document) the friction that came from a
    sweep (identification.known_friction.KnownFriction ``known``): per joint its laws'
    standard deviations and source, and ``friction_from`` with the file, the mode, per joint the
    fastest speed the sweep measured and the speed its law counts as measured up to
    (KnownFriction.reach; rad/s), and ``shares`` {"identification"/"validation": (n,) share of
    the samples faster than that}. Returns the document, changed in place."""
    source = f"friction sweep {known.source}"
    for name, std in zip(known.joint_names, known.std):
        entry = document["friction_models"][name]
        entry["std"] = {k: (None if std.get(k) is None else float(std[k])) for k in entry["parameters"]}
        entry["source"] = source
    for joint in document["joints"]:
        if joint["name"] in known.joint_names:
            joint["friction_source"] = source
    document["friction_from"] = {
        "file": str(known.source), "mode": "fix",
        "note": "each joint's friction is the law the friction sweep fitted, fixed: subtracted from the measured "
                "torque before the rigid-body fit and not estimated again; its standard deviations are the "
                "sweep's, and those of the other parameters are conditional on it",
        "fastest_measured_speed": {j: float(v) for j, v in zip(known.joint_names, known.speed)},
        "measured_up_to": {j: float(v) for j, v in zip(known.joint_names, known.reach)},
        "extrapolated_share": {what: {j: float(v) for j, v in zip(known.joint_names, share)}
                               for what, share in shares.items()},
    }
    return document
