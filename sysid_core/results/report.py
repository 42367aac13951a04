"""A readable, plain-text summary of an identification for the terminal.

Everything shown comes from the params.json document (export.params_document), so the
printed table and the file can never disagree. No colours: the text may be piped to a file.
"""
from __future__ import annotations

import math

_INERTIA = ("Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz")
_AXES = ("x", "y", "z")


def _g(value, spec: str = ".6g") -> str:
    """A number for a table cell; n/a for missing (null) values."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def _diff(identified, truth, spec: str = "+.6g") -> str:
    if identified is None or truth is None:
        return "n/a"
    return format(identified - truth, spec)


def _table(header: list, rows: list, left: int = 1, indent: str = "  ") -> list:
    """Lines of an aligned table: the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[c])) for r in [header] + rows) for c in range(len(header))]

    def line(cells):
        parts = [str(c).ljust(w) if k < left else str(c).rjust(w) for k, (c, w) in enumerate(zip(cells, widths))]
        return (indent + "  ".join(parts)).rstrip()

    return [line(header), indent + "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _terminal_rows(doc: dict, truth: dict | None, error: dict | None) -> list:
    mm = lambda v: None if v is None else 1000.0 * v  # noqa: E731 -- metres to millimetres
    com = doc.get("center_of_mass")
    rows = []

    def row(label, unit, value, true=None, err=None, spec=".6g"):
        cells = [label, unit, _g(value, spec)]
        if truth is not None:
            cells += [_g(true, spec), err if err is not None else _diff(value, true, "+" + spec)]
        rows.append(cells)

    t_com = truth.get("center_of_mass") if truth else None
    mass_err = None
    if truth is not None:
        pct = error.get("mass_percent") if error else None
        mass_err = _diff(doc["mass"], truth["mass"]) + ("" if pct is None else f" ({pct:.2f} %)")
    row("mass", "kg", doc["mass"], truth and truth["mass"], mass_err)
    for k, axis in enumerate(_AXES):
        row(f"centre of mass {axis}", "mm", mm(com[k]) if com else None,
            mm(t_com[k]) if t_com else None, spec=".3f")
    if truth is not None:
        rows.append(["centre of mass error |dc|", "mm", "", "", _g(error.get("com_error_mm"), ".3f")])
    for k, axis in enumerate(_AXES):
        row(f"first moment h{axis}", "kg m", doc["center_of_mass_moment"][k],
            truth["first_moment"][k] if truth else None)
    for key in _INERTIA:
        row(f"inertia {key} (origin)", "kg m^2", doc["inertia_tensor"][key],
            truth["inertia_tensor"][key] if truth else None)
    return rows


def _friction_lines(doc: dict) -> list:
    """Each joint's friction law and parameters (one line when every joint is coulomb_viscous)."""
    models = doc.get("friction_models") or {}
    if not models:
        return []
    if all(m["model"] == "coulomb_viscous" for m in models.values()):
        return ["  friction model: coulomb_viscous on every joint (coulomb and viscous columns above)"]
    units = doc.get("friction_parameter_units") or {}
    rows = [[joint, m["model"],
             ", ".join(f"{k} {_g(v, '.4g')}" + (f" {units[k]}" if units.get(k, "1") != "1" else "")
                       for k, v in m["parameters"].items())] for joint, m in models.items()]
    return ["", "Friction models"] + _table(["joint", "model", "parameters"], rows, left=3)


TRANSMISSION_HEADER = ["joint", "stiffness [N m/rad]", "std", "damping [N m s/rad]", "std", "encoder offset [mrad]"]
RESIDUAL_HEADER = ["joint", "applied", "components", "validation RMSE without [N m]", "with [N m]", "change [%]"]


def transmission_rows(doc: dict) -> list:
    """The cells (TRANSMISSION_HEADER) of each joint whose transmission params.json ``doc``
    carries; none without both encoders. The text report and report.html both show them."""
    return [[j["name"], _g(j["transmission_stiffness"]), _g(j.get("transmission_stiffness_std"), ".2g"),
             _g(j.get("transmission_damping")), _g(j.get("transmission_damping_std"), ".2g"),
             _g(None if j.get("deflection_offset") is None else 1e3 * j["deflection_offset"], ".3g")]
            for j in doc["joints"] if "transmission_stiffness" in j]


def residual_rows(block: dict) -> list:
    """The cells (RESIDUAL_HEADER) of each joint of params.json's ``residual`` block: applied
    or not, its components, the validation RMSE without and with the model and the change."""
    rows = []
    for j in block["joints"]:
        validation = j.get("validation_rmse")
        without, with_model = (validation["without"], validation["with"]) if validation else (None, None)
        change = (f"{100 * (with_model / without - 1):+.1f}" if validation and without else "n/a")
        rows.append([j["joint"], "yes" if j["applied"] else "no", str(j["components"]), _g(without, ".4g"),
                     _g(with_model, ".4g"), change])
    return rows


def residual_input_kinds(block: dict) -> list:
    """The kinds of input (q, dq, torque, deflection) the joints of a ``residual`` block take, in order."""
    return list(dict.fromkeys(name.split(":", 1)[0] for j in block["joints"] for name in j.get("inputs", ())))


def _transmission_lines(doc: dict) -> list:
    """Each joint's transmission, when the recording had both encoders."""
    rows = transmission_rows(doc)
    if not rows:
        return [] if not doc.get("transmission_notes") else ["", "Transmissions"] + [
            f"  {note}" for note in doc["transmission_notes"]]
    return (["", "Transmissions (from both encoders)"] + _table(TRANSMISSION_HEADER, rows, left=1)
            + [f"  {note}" for note in doc.get("transmission_notes") or []])


def _residual_lines(doc: dict) -> list:
    """The residual model per joint: applied or not and why, the validation RMSE without and with it."""
    block = doc.get("residual")
    if not block:
        return []
    if "error" in block:
        return ["", f"Residual model: none ({block['error']})"]
    return (["", f"Residual model ({block['kind']}, {block['file']}; inputs per joint: "
                 f"{', '.join(residual_input_kinds(block))})"]
            + _table(RESIDUAL_HEADER, residual_rows(block), left=2)
            + [f"  {j['joint']}: {j['reason']}" for j in block["joints"] if j.get("reason")])


def format_result(result, document: dict) -> str:
    """The result table printed after an identification, as one string (no trailing newline).

    The first line is the verdict with its first reason; a failed run says its numbers are
    not to be used.

    ``result`` the IdentificationResult, ``document`` its params_document (with ``truth``
    and ``error`` sections when the true model was given). Units are in the headers.
    """
    doc = document
    truth, error = doc.get("truth"), doc.get("error")
    reasons = doc.get("verdict_reasons") or []
    lines = [f"Verdict: {doc['verdict'].upper()}" + (f": {reasons[0]}" if reasons else "")]
    lines += [f"  also: {r}" for r in reasons[1:]]
    if doc["verdict"] == "failed":
        lines.append("  Do not use the numbers below: they are shown to diagnose the run.")
    lines += [f"Identification: scope {doc['scope']}, estimator {doc['estimator']}, "
              f"{doc['n_samples']} samples, source {doc['source']}"]
    if doc.get("held_at_model"):
        lines.append(f"  held at the model's values (the data cannot see them): {', '.join(doc['held_at_model'])}")
    for entry in doc.get("lumped") or []:
        lines.append(f"  not separable on any motion (the value is one split of the sum; expressions in "
                     f"params.json): {entry}")
    lines.append("")

    merged = doc.get("merged_bodies") or []
    welded = f"; welded bodies merged: {', '.join(merged)}" if merged else ""
    lines.append(f"Terminal body '{doc['body_name']}' (joint '{doc['joint_name']}'{welded})")
    header = ["quantity", "unit", "identified"] + (["truth", "error (id - truth)"] if truth else [])
    lines += _table(header, _terminal_rows(doc, truth, error), left=2)
    if doc["scope"] == "full":
        # in the full scope single bodies are not identifiable on their own: only base
        # parameters are; say so before anyone reads the rows above as a payload estimate
        lines += ["  (full scope: one physically consistent split of the base parameters among the bodies;",
                  "   to identify a payload use --scope terminal, and judge the full scope by its base",
                  "   parameters and validation RMSE)"]

    if doc["scope"] == "full":
        lines += ["", "Bodies (identified standard parameters, welded bodies merged)"]
        rows = []
        for body in doc["bodies"]:
            com = body["center_of_mass"] or [None] * 3
            rows.append([body["name"], _g(body["mass"])] + [_g(None if c is None else 1000.0 * c, ".3f") for c in com]
                        + ["yes" if doc["physically_consistent"][body["name"]] else "NO"])
        lines += _table(["body", "mass [kg]", "com x [mm]", "com y [mm]", "com z [mm]", "consistent"], rows)

    lines += ["", "Joints"]
    header = ["joint", "coulomb [N m]", "viscous [N m s/rad]", "armature [kg m^2]", "offset [N m]", "RMSE [N m]"]
    if doc.get("validation_rmse_per_joint"):
        header += ["validation RMSE [N m]", "validation rel. [%]"]
    if truth:
        header += ["coulomb truth [N m]", "viscous truth [N m s/rad]"]
    rows = []
    for joint in doc["joints"]:
        name = joint["name"]
        cells = [name, _g(joint["coulomb_friction"]), _g(joint["viscous_friction"]), _g(joint["armature"]),
                 _g(joint["offset"]), _g(joint["rmse"])]
        if doc.get("validation_rmse_per_joint"):
            relative = (doc.get("validation_relative_rmse_per_joint") or {}).get(name)
            cells += [_g(doc["validation_rmse_per_joint"].get(name)),
                      "n/a" if relative is None else f"{100 * relative:.1f}"]
        if truth:
            cells += [_g(truth["coulomb_friction"].get(name)), _g(truth["viscous_friction"].get(name))]
        rows.append(cells)
    lines += _table(header, rows)
    lines += _friction_lines(doc)
    lines += _transmission_lines(doc)
    lines += _residual_lines(doc)

    n_standard = len(result.column_names)
    summary = [
        ("base parameters", f"{doc['n_base_params']} (of {n_standard} standard parameters)"),
        ("condition number", f"{_g(doc['condition_number'])} (columns scaled to unit norm; unscaled: "
                             f"{_g(doc['condition_number_raw'])})"),
        ("torque RMSE [N m]", _g(doc["rmse"])),
        ("validation RMSE [N m]", _g(doc["validation_rmse"]) if doc["validation_rmse"] is not None
         else "n/a (no validation recording)"),
    ]
    if error and error.get("base_parameter_error_percent"):
        worst = max(((v, k) for k, v in error["base_parameter_error_percent"].items() if v is not None), default=None)
        if worst is not None:
            summary.append(("largest base-parameter error", f"{worst[0]:.3g} % ({worst[1]})"))
    poor = [p["name"] for p in doc["base_parameters"]
            if p["relative_std_percent"] is None or p["relative_std_percent"] > 10.0]
    if poor:
        shown = ", ".join(poor[:8]) + (f", ... ({len(poor)} in all)" if len(poor) > 8 else "")
        summary.append(("poorly determined (rel. std > 10 %)", shown))
    bad = doc.get("consistency_violations") or {}
    summary.append(("physically consistent", "yes" if not bad else
                    "NO: " + "; ".join(f"{b}: {', '.join(r)}" for b, r in bad.items())))
    width = max(len(k) for k, _ in summary)
    lines.append("")
    lines += [f"{k.ljust(width)}  {v}" for k, v in summary]
    return "\n".join(lines)
