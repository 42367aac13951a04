"""``report.html``: one self-contained page of an identification, written beside params.json.

Sections in reading order: the verdict and its reasons; the terminal body (payload) against the
model and, when known, the truth; each joint's friction law with its curve; the torque fit and
its residuals over time; validation; the base parameters; the excitation; the recording's
quality; transmissions and the residual model when the run has them. Every number comes from
the params.json document (export.params_document), as the text report's do, so page, table and
file never disagree; the figures are drawn from the result and the recordings.

The page fetches nothing: figures are PNGs in ``data:`` URIs and the style sheet is inline, so
the file opens offline, from a mail or an archive. Every trace is cut to at most MAX_POINTS
points (the smallest and largest sample of each stretch of consecutive samples, so peaks and
the envelope stay where a stride would alias them), and the measured and predicted torque are
drawn over DETAIL_S s only (the residual over all of it): a 10-minute 1 kHz run of a 7-joint arm
makes a page of about 1 MB.
"""
from __future__ import annotations

import base64
import html
import importlib.util
import io
from pathlib import Path

import numpy as np

from ..errors import SysidError
from .export import _atomic_write, _joint_frictions
from .report import (RESIDUAL_HEADER, TRANSMISSION_HEADER, _INERTIA, _g, residual_input_kinds,
                     residual_rows, transmission_rows)

MAX_POINTS = 2000  # per trace: the width of a figure in pixels, and small files for long runs
DETAIL_S = 20.0  # s of measured and predicted torque shown sample by sample; the residual shows all
DPI = 90  # the figures' resolution: sharp on a screen at ~10 inch wide, a few hundred kB each
POORLY_DETERMINED_PERCENT = 10.0  # relative standard deviation flagged, as in plots and the text report
FRICTION_POINTS = 401  # velocities each friction curve is evaluated at (odd: one at zero)
GRID_COLUMNS = 4  # friction curves per row

_LEVEL_TEXT = {"good": "GOOD", "doubtful": "DOUBTFUL", "failed": "FAILED"}

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:1.5em auto;max-width:72em;
 padding:0 1em;color:#1d1d1f;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;
 margin-top:1.8em}h3{font-size:1em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.88em}
th,td{border:1px solid #d0d0d0;padding:.2em .55em;vertical-align:top}th{background:#f2f2f2;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}td.code{font-family:monospace;
 font-size:.95em}
tr.poor td{background:#fdecea}.muted{color:#666}.note{color:#444;font-size:.9em}
.verdict{border-radius:6px;padding:.6em 1em;margin:1em 0;border:2px solid}
.verdict h2{border:none;margin:.1em 0 .3em;font-size:1.35em}
.good{background:#e8f5e9;border-color:#2e7d32}.good h2{color:#1b5e20}
.doubtful{background:#fff8e1;border-color:#f9a825}.doubtful h2{color:#8d6e00}
.failed{background:#fdecea;border-color:#c62828}.failed h2{color:#b71c1c}
.level-doubtful{color:#8d6e00;font-weight:600}.level-failed{color:#b71c1c;font-weight:600}
img{max-width:100%;height:auto;display:block;margin:.5em 0}
nav{font-size:.88em}nav a{margin-right:.8em}
"""


# --------------------------------------------------------------------------- HTML pieces

def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _cell(value, css: str) -> str:
    return f'<td class="{css}">{_e(value)}</td>' if css else f"<td>{_e(value)}</td>"


def _table(header: list, rows: list, text_columns: int = 1, row_classes=None, code_columns=()) -> str:
    """An HTML table: the first ``text_columns`` columns text, the rest numbers (right-aligned);
    ``code_columns`` indices of text columns in a monospace font (expressions). ``row_classes``
    one CSS class (or "") per row."""
    out = ["<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    for k, row in enumerate(rows):
        css = row_classes[k] if row_classes else ""
        out.append(f'<tr class="{css}">' if css else "<tr>")
        out.append("".join(_cell(c, "n" if i >= text_columns else "code" if i in code_columns else "")
                           for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _facts(rows) -> str:
    """A two-column table of (label, value) rows."""
    return ('<table class="facts"><tbody>'
            + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</tbody></table>")


def _section(key: str, title: str, body: list) -> str:
    return f'<section id="{key}"><h2>{_e(title)}</h2>\n' + "\n".join(body) + "\n</section>"


def _p(text: str, css: str = "") -> str:
    return f'<p class="{css}">{_e(text)}</p>' if css else f"<p>{_e(text)}</p>"


def _list(items, css: str = "") -> str:
    if not items:
        return ""
    return (f'<ul class="{css}">' if css else "<ul>") + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


def _percent(value, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(100.0 * value, spec)


def _mm(value):
    return None if value is None else 1000.0 * value


# --------------------------------------------------------------------------- figures

def _decimate(time: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS):
    """(time (m,), values (m,)) of one trace with m <= max_points: every sample when they fit,
    else the smallest and the largest sample of each of max_points // 2 stretches of consecutive
    samples, in time order. ``time`` (M,) s, ``values`` (M,)."""
    num = time.size
    if num <= max_points:
        return time, values
    buckets = max_points // 2
    size = -(-num // buckets)
    # the last value repeated to fill the last stretch: it adds no new extreme
    padded = np.concatenate([values, np.full(buckets * size - num, values[-1])]).reshape(buckets, size)
    start = np.arange(buckets) * size
    low, high = start + padded.argmin(axis=1), start + padded.argmax(axis=1)
    index = np.minimum(np.sort(np.stack([low, high], axis=1), axis=1).reshape(-1), num - 1)
    return time[index], values[index]


def _png(figure, alt: str) -> str:
    """``figure`` as an <img> with the PNG in a data: URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _friction_figure(robot, result, document: dict, recording):
    """Each joint's identified friction law, torque N m over the velocities the recording reached
    (rad/s), the truth's Coulomb and viscous law dashed when params.json has it."""
    from .plots import _figure
    names = list(result.joint_names)
    frictions = _joint_frictions(result)
    dq = np.asarray(recording.select(names).dq, dtype=float)
    truth = document.get("truth")
    n = len(names)
    cols = min(GRID_COLUMNS, n)
    rows = -(-n // cols)
    figure = _figure(rows, width=2.6 * cols, row_height=2.1)
    axes = figure.subplots(rows, cols, squeeze=False).reshape(-1)
    for j, ax in enumerate(axes):
        if j >= n:
            ax.set_axis_off()
            continue
        low, high = float(np.min(dq[:, j])), float(np.max(dq[:, j]))
        reach = max(abs(low), abs(high))
        if not reach > 0:  # the joint never moved: show its law on a nominal range
            low, high = -1.0, 1.0
        # symmetric about zero so that the Coulomb step sits at a sample; the recorded range marked
        span = max(abs(low), abs(high))
        velocity = np.linspace(-span, span, FRICTION_POINTS)
        ax.plot(velocity, frictions[j].torque(velocity), color="tab:blue", lw=1.2, label="identified")
        if truth is not None:
            c, v = truth["coulomb_friction"].get(names[j]), truth["viscous_friction"].get(names[j])
            if c is not None and v is not None:
                ax.plot(velocity, c * np.sign(velocity) + v * velocity, color="0.3", lw=1.0, ls="--",
                        label="truth")
        ax.axvspan(low, high, color="tab:green", alpha=0.08, lw=0)
        ax.axhline(0.0, color="0.7", lw=0.5)
        ax.axvline(0.0, color="0.7", lw=0.5)
        ax.set_title(f"{names[j]} ({document['friction_models'][names[j]]['model']})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("velocity [rad/s]", fontsize=7)
        ax.set_ylabel("torque [N m]", fontsize=7)
    axes[0].legend(fontsize=6, loc="upper left")
    return figure


def _time_figure(names: list, time: np.ndarray, traces: list, ylabel: str, title: str, texts=None,
                 row_height: float = 1.6):
    """One axes per joint over time (s from the first sample): ``traces`` [(values (M, n),
    label, colour)], each cut by _decimate; ``texts`` optional per-joint annotations; rows
    ``row_height`` inch high."""
    from .plots import _figure
    figure = _figure(len(names), row_height=row_height)
    axes = figure.subplots(len(names), 1, sharex=True, squeeze=False)[:, 0]
    t = time - time[0]
    for j, ax in enumerate(axes):
        for values, label, colour in traces:
            x, y = _decimate(t, values[:, j])
            ax.plot(x, y, color=colour, lw=0.8, label=label)
        ax.set_ylabel(f"{names[j]}\n{ylabel}", fontsize=8)
        ax.tick_params(labelsize=7)
        if texts is not None:
            ax.text(0.99, 0.95, texts[j], transform=ax.transAxes, ha="right", va="top", fontsize=7,
                    bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
    if any(label for _, label, _ in traces):
        axes[0].legend(loc="upper left", fontsize=7, ncol=len(traces))
    axes[0].set_title(title, fontsize=9)
    axes[-1].set_xlabel("time [s]")
    return figure


def _torque_figures(robot, result, shown, what: str) -> tuple:
    """(measured vs predicted over DETAIL_S s from the middle of ``shown``, residual over all of it)."""
    from .plots import torque_samples
    time, measured, predicted = torque_samples(robot, result, shown)
    names = list(robot.joint_names)
    residual = measured - predicted
    rmse = np.sqrt(np.mean(residual ** 2, axis=0))
    window = np.ones(time.size, dtype=bool)
    span = time[-1] - time[0]
    detail = f"all {span:.1f} s"
    if span > DETAIL_S:
        middle = time[0] + 0.5 * span
        window = np.abs(time - middle) <= 0.5 * DETAIL_S
        detail = f"{DETAIL_S:g} s from the middle of {span:.1f} s; the residual below covers all of it"
    fit = _time_figure(names, time[window], [(measured[window], "measured", "0.35"),
                                             (predicted[window], "predicted", "tab:orange")],
                       "[N m]", f"Torque, measured and predicted: {what} ({detail})")
    residuals = _time_figure(names, time, [(residual, "", "tab:red")], "[N m]",
                             f"Residual torque (measured - predicted): {what}",
                             texts=[f"RMSE {r:.3g} N m" for r in rmse])
    for ax in residuals.axes:
        ax.axhline(0.0, color="0.6", lw=0.5)
    return fit, residuals


def _excitation_figure(robot, recording):
    """Each joint's position over the identification recording, one axes per joint (many
    joints on one axes tangle over a long run)."""
    names = list(robot.joint_names)
    data = recording.select(names)
    return _time_figure(names, data.time, [(data.q, "", "tab:blue")], "[rad]",
                        "Joint positions of the identification recording", row_height=1.0)


class _Figures:
    """Draws figures into <img> tags, or says why a figure is missing (no matplotlib, data it
    cannot be drawn from); the report is written either way."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.missing = None if enabled else "figures not drawn (asked for none)"
        if enabled and importlib.util.find_spec("matplotlib") is None:  # optional for the core
            self.missing = "figures not drawn: matplotlib is not installed"

    def __call__(self, draw, alt: str) -> list:
        if self.missing is not None:
            return [_p(self.missing, "note muted")]
        try:
            drawn = draw()
        except (ValueError, SysidError, FloatingPointError, np.linalg.LinAlgError) as err:
            return [_p(f"{alt}: not drawn ({err})", "note")]
        return [_png(f, alt) for f in (drawn if isinstance(drawn, tuple) else (drawn,))]


# --------------------------------------------------------------------------- sections

def _verdict_section(document: dict) -> str:
    level = document["verdict"]
    reasons = document.get("verdict_reasons") or []
    body = [f'<h2>Verdict: {_LEVEL_TEXT.get(level, _e(level.upper()))}</h2>']
    if reasons:
        body.append(_list(reasons))
    else:
        body.append(_p("No reason for doubt: the fit, its validation and the data passed every check."))
    if level == "failed":
        body.append("<p><strong>Do not use the numbers below: they are shown to diagnose the run. "
                    "No updated model was written.</strong></p>")
    return f'<section id="verdict" class="verdict {_e(level)}">' + "\n".join(body) + "</section>"


def _summary_facts(document: dict) -> str:
    validation = document.get("validation_rmse")
    bad = document.get("consistency_violations") or {}
    rows = [
        ("scope, estimator", f"{document['scope']}, {document['estimator']}"
                             + (" (robust)" if document.get("robust") else "")),
        ("source", document["source"] + (f" ({document['physics']['source']})"
                                         if document.get("physics") else "")),
        ("rows identified", f"{document['n_samples']}"),
        ("torque RMSE", f"{_g(document['rmse'], '.4g')} N m ({_percent(document.get('relative_rmse'), '.2f')} % "
                        "of the torque's RMS)"),
        ("validation RMSE", "n/a (no validation data)" if validation is None else
         f"{_g(validation, '.4g')} N m ({_percent(document.get('validation_relative_rmse'), '.2f')} %)"),
        ("condition number", f"{_g(document['condition_number'], '.4g')} (unit-norm columns; raw "
                             f"{_g(document['condition_number_raw'], '.4g')})"),
        ("physically consistent", "yes" if not bad else
         "NO: " + "; ".join(f"{b}: {', '.join(r)}" for b, r in bad.items())),
    ]
    return _facts(rows)


def _payload_section(robot, result, document: dict) -> str:
    truth, error = document.get("truth"), document.get("error")
    body_name = document["body_name"]
    model_theta = np.asarray(robot.nominal_parameters[robot.body_names.index(body_name)], dtype=float)
    model_com = (model_theta[1:4] / model_theta[0]).tolist() if model_theta[0] > 0 else [None] * 3
    com = document.get("center_of_mass") or [None] * 3
    t_com = (truth.get("center_of_mass") if truth else None) or [None] * 3
    header = ["quantity", "unit", "identified", "model"] + (["truth", "error (identified - truth)"] if truth else [])
    rows = []

    def row(label, unit, value, model, true=None, spec=".6g", extra=""):
        cells = [label, unit, _g(value, spec), _g(model, spec)]
        if truth:
            err = "n/a" if value is None or true is None else format(value - true, "+" + spec)
            cells += [_g(true, spec), err + extra]
        rows.append(cells)

    mass_pct = error.get("mass_percent") if error else None
    row("mass", "kg", document["mass"], float(model_theta[0]), truth and truth["mass"],
        extra="" if mass_pct is None else f" ({mass_pct:.2f} %)")
    for k, axis in enumerate("xyz"):
        row(f"centre of mass {axis}", "mm", _mm(com[k]), _mm(model_com[k]), _mm(t_com[k]), spec=".3f")
    if truth:
        rows.append(["centre of mass error |dc|", "mm", "", "", "", _g(error.get("com_error_mm"), ".3f")])
    for k, axis in enumerate("xyz"):
        row(f"first moment h{axis}", "kg m", document["center_of_mass_moment"][k], float(model_theta[1 + k]),
            truth["first_moment"][k] if truth else None)
    for i, key in enumerate(_INERTIA):
        row(f"inertia {key} (body origin)", "kg m^2", document["inertia_tensor"][key], float(model_theta[4 + i]),
            truth["inertia_tensor"][key] if truth else None)
    merged = document.get("merged_bodies") or []
    body = [_p(f"Body '{body_name}' turned by joint '{document['joint_name']}'"
               + (f"; welded bodies merged into it: {', '.join(merged)}" if merged else "")
               + ". Model: the nominal model's own values for this body.",
               "note"),
            _table(header, rows, text_columns=2)]
    if document["scope"] == "full":
        body.append(_p("Full scope: single bodies are not identifiable on their own, only base parameters are; "
                       "the rows above are one physically consistent split of them. To identify a payload use "
                       "the terminal scope.", "note"))
    payload = document.get("payload")
    if payload:
        added = payload.get("added") or {}
        keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
        prow = []
        for label, block in (("terminal body (whole)", payload), ("added (identified - model)", added)):
            c = block.get("center_of_mass") or [None] * 3
            inertia = block.get("inertia") or {}
            prow.append([label, _g(block.get("mass"), ".5g")] + [_g(_mm(v), ".2f") for v in c]
                        + [_g(inertia.get(k), ".4g") for k in keys]
                        + ["yes" if block.get("physically_consistent") else "NO"])
        body.append(f"<h3>As a driver's payload setting takes it (frame '{_e(payload.get('frame'))}')</h3>")
        body.append(_table(["", "mass [kg]", "com x [mm]", "com y [mm]", "com z [mm]"]
                           + [f"{k} [kg m^2]" for k in keys] + ["consistent"], prow))
        body.append(_p("Inertia about the centre of mass, in the frame's axes.", "note muted"))
    if document["scope"] == "full":
        brows = []
        for entry in document["bodies"]:
            c = entry["center_of_mass"] or [None] * 3
            brows.append([entry["name"], _g(entry["mass"], ".5g")] + [_g(_mm(v), ".2f") for v in c]
                         + ["yes" if document["physically_consistent"][entry["name"]] else "NO",
                            "yes" if entry["identified"] else "no (model)"])
        body += ["<h3>Bodies (welded bodies merged)</h3>",
                 _table(["body", "mass [kg]", "com x [mm]", "com y [mm]", "com z [mm]", "consistent", "identified"],
                        brows)]
    return _section("payload", "Payload / terminal body", body)


def _friction_section(robot, result, document: dict, recording, figures: _Figures) -> str:
    models = document.get("friction_models") or {}
    units = document.get("friction_parameter_units") or {}
    truth = document.get("truth")
    header = ["joint", "law", "parameters", "Coulomb level [N m]", "viscous [N m s/rad]", "armature [kg m^2]",
              "offset [N m]"] + (["truth Coulomb [N m]", "truth viscous [N m s/rad]"] if truth else [])
    rows = []
    for joint in document["joints"]:
        name = joint["name"]
        model = models.get(name, {"model": "coulomb_viscous", "parameters": {}})
        parameters = ", ".join(f"{k} {_g(v, '.4g')}" + (f" {units[k]}" if units.get(k, "1") != "1" else "")
                               for k, v in model["parameters"].items())
        cells = [name, model["model"] + (f" ({model['source']})" if model.get("source") else ""), parameters,
                 _g(joint["coulomb_friction"], ".4g"), _g(joint["viscous_friction"], ".4g"),
                 _g(joint["armature"], ".4g"), _g(joint["offset"], ".4g")]
        if truth:
            cells += [_g(truth["coulomb_friction"].get(name), ".4g"), _g(truth["viscous_friction"].get(name), ".4g")]
        rows.append(cells)
    body = [_table(header, rows, text_columns=3)]
    source = document.get("friction_from")
    if source:
        body.append(_p(f"Friction fixed from {source['file']}: {source['note']}.", "note"))
    if (document.get("physics") or {}).get("source") == "mujoco":
        body.append(_p("The data come from MuJoCo: its frictionloss constraint and implicit damping were modelled "
                       "as it applies them; the curves show each law as a real joint would follow it.", "note"))
    body += figures(lambda: _friction_figure(robot, result, document, recording), "Friction curves per joint")
    body.append(_p("Torque of each joint's identified law over velocity; the shaded band is the velocity range "
                   "the identification recording reached (outside it the law is extrapolated).", "note muted"))
    return _section("friction", "Friction per joint", body)


def _torque_section(robot, result, recording, validation, figures: _Figures) -> str:
    shown = validation if validation is not None else recording
    what = ("validation recording (not used to identify)" if validation is not None
            else "identification recording")
    body = [_p(f"Shown on the {what}, filtered, trimmed and decimated as the identification saw its data.", "note")]
    body += figures(lambda: _torque_figures(robot, result, shown, what), "Torque fit and residuals")
    return _section("torque", "Torque fit and residuals", body)


def _validation_section(document: dict) -> str:
    fit = document.get("rmse_per_joint") or {}
    fit_rel = document.get("relative_rmse_per_joint") or {}
    held = document.get("validation_rmse_per_joint") or {}
    held_rel = document.get("validation_relative_rmse_per_joint") or {}
    header = ["joint", "fit RMSE [N m]", "fit relative [%]"]
    if held:
        header += ["validation RMSE [N m]", "validation relative [%]"]
    rows = []
    for joint in document["joints"]:
        name = joint["name"]
        cells = [name, _g(fit.get(name), ".4g"), _percent(fit_rel.get(name), ".2f")]
        if held:
            cells += [_g(held.get(name), ".4g"), _percent(held_rel.get(name), ".2f")]
        rows.append(cells)
    total = ["all joints", _g(document["rmse"], ".4g"), _percent(document.get("relative_rmse"), ".2f")]
    if held:
        total += [_g(document["validation_rmse"], ".4g"), _percent(document.get("validation_relative_rmse"), ".2f")]
    rows.append(total)
    body = [_table(header, rows)]
    body.append(_p("Relative: the RMSE over the RMS of the measured torque." + (
        "" if held else " No validation data: the fit was judged on the data it was fitted to."), "note muted"))
    return _section("validation", "Validation", body)


def _base_section(result, document: dict, figures: _Figures) -> str:
    from .plots import parameter_figure
    truth = document.get("truth")
    error = document.get("error") or {}
    true_values = (truth or {}).get("base_parameters") or {}
    errors = error.get("base_parameter_error_percent") or {}
    header = ["name", "expression", "value (SI)", "std", "relative std [%]"]
    if truth:
        header += ["truth", "error [%]"]
    rows, classes = [], []
    for p in document["base_parameters"]:
        rel = p["relative_std_percent"]
        cells = [p["name"], p["expression"], _g(p["value"], ".6g"), _g(p["std"], ".3g"), _g(rel, ".3g")]
        if truth:
            cells += [_g(true_values.get(p["name"]), ".6g"), _g(errors.get(p["name"]), ".3g")]
        rows.append(cells)
        classes.append("poor" if rel is None or rel > POORLY_DETERMINED_PERCENT else "")
    poor = sum(1 for c in classes if c)
    body = [_p(f"{document['n_base_params']} base parameters (the combinations of the "
               f"{len(result.column_names)} standard parameters the data can determine), estimator "
               f"{document.get('base_estimator', document['estimator'])}; {poor} poorly determined "
               f"(relative standard deviation above {POORLY_DETERMINED_PERCENT:g} %, highlighted).", "note")]
    if document.get("held_at_model"):
        body.append(_p("Held at the model's values (the data cannot see them): "
                       + ", ".join(document["held_at_model"]), "note"))
    if document.get("lumped"):
        body.append("<p class=\"note\">Not separable on any motion (the value is one split of the sum):</p>"
                    + _list(document["lumped"], "note"))
    body += figures(lambda: parameter_figure(result), "Base parameters with two standard deviations")
    body.append(_table(header, rows, text_columns=2, row_classes=classes, code_columns=(1,)))
    return _section("base", "Base parameters", body)


def _excitation_section(robot, document: dict, recording, excitation, figures: _Figures) -> str:
    data = recording.select(list(robot.joint_names))
    duration = float(data.time[-1] - data.time[0]) if data.n_samples > 1 else 0.0
    rate = 1.0 / float(np.median(np.diff(data.time))) if data.n_samples > 1 else float("nan")
    rows = list(excitation or [])
    rows += [
        ("identification recording", f"{data.n_samples} samples over {duration:.1f} s, {_g(rate, '.4g')} Hz "
                                     "(median step)"),
        ("condition number", f"{_g(document['condition_number'], '.4g')} with unit-norm columns, "
                             f"{_g(document['condition_number_raw'], '.4g')} raw (of the identification's "
                             "base regressor on these data)"),
    ]
    body = [_facts(rows)]
    if not any(label == "design" for label, _ in rows):
        body.append(_p("No excitation design is attached to this run (a multisine, a replayed trajectory or a "
                       "recording made elsewhere): what an optimized design gained over the multisines is "
                       "known only where the design was made (sysid-identify --excitation optimized). The "
                       "condition number above is the identification's own, on the recorded data.", "note"))
    q, dq = data.q, data.dq
    jrows = [[name, _g(float(np.min(q[:, j])), ".3f"), _g(float(np.max(q[:, j])), ".3f"),
              _g(float(np.ptp(q[:, j])), ".3f"), _g(float(np.max(np.abs(dq[:, j]))), ".3f")]
             for j, name in enumerate(robot.joint_names)]
    body.append(_table(["joint", "lowest [rad]", "highest [rad]", "range [rad]", "fastest [rad/s]"], jrows))
    body += figures(lambda: _excitation_figure(robot, recording), "Joint paths over time")
    return _section("excitation", "Excitation", body)


def _quality_section(document: dict, recording, validation, notes) -> str:
    body = []
    quality = [("identification", n) for n in recording.quality_notes]
    if validation is not None:
        quality += [("validation", n) for n in validation.quality_notes if n not in recording.quality_notes]
    if quality:
        rows = [[what, note.level, note.message] for what, note in quality]
        table = _table(["recording", "level", "note"], rows, text_columns=3)
        for level in ("doubtful", "failed"):
            table = table.replace(f"<td>{level}</td>", f'<td class="level-{level}">{level}</td>')
        body.append(table)
    else:
        body.append(_p("The recording's source reported nothing wrong with the data (tracking, saturation, lost "
                       "samples)."))
    if notes:
        body += ["<h3>Recording</h3>", _list(notes)]
    gaps = _gaps(recording)
    if gaps:
        body.append(_p(gaps, "note"))
    evidence = document.get("verdict_evidence") or {}
    if evidence:
        snr = evidence.get("motion_snr") or {}
        rows = [
            ("relative RMSE", f"{_percent(evidence.get('relative_rmse'), '.2f')} % ("
                              + ("validation" if evidence.get("validated") else "fit, no validation") + ")"),
            ("condition number", _g(evidence.get("condition_number"), ".4g")),
            ("mass relative std", f"{_percent(evidence.get('mass_relative_std'), '.3g')} %"),
            ("centre of mass std", f"{_g(evidence.get('com_std_mm'), '.3g')} mm"),
            ("distance to consistency", _g(evidence.get("consistency_distance"), ".3g")),
        ]
        if snr:
            rows.append(("motion signal-to-noise per joint", ", ".join(f"{j} {_g(v, '.3g')}" for j, v in snr.items())))
        body += ["<h3>What the verdict was computed from</h3>", _facts(rows)]
    return _section("quality", "Recording quality", body)


def _gaps(recording) -> str:
    """One line on the holes in the identification recording's time stamps, or ''."""
    if recording.n_samples < 3:
        return ""
    step = np.diff(recording.time)
    median = float(np.median(step))
    holes = step > 1.5 * median
    if not holes.any():
        return ""
    lost = int(np.sum(np.round(step[holes] / median) - 1))
    return (f"The identification recording has {int(holes.sum())} holes in its time stamps (about {lost} samples "
            f"at its median step of {1e3 * median:.3g} ms), the longest {float(step.max()):.3g} s.")


def _transmission_section(document: dict) -> str:
    rows = transmission_rows(document)
    notes = document.get("transmission_notes") or []
    if not rows and not notes:
        return ""
    body = [_table(TRANSMISSION_HEADER, rows)] if rows else []
    body.append(_list(notes, "note"))
    return _section("transmissions", "Transmissions (from both encoders)", body)


def _residual_section(document: dict) -> str:
    block = document.get("residual")
    if not block:
        return ""
    if "error" in block:
        return _section("residual", "Residual model", [_p(f"None: {block['error']}")])
    body = [_p(f"{block['kind']} in {block['file']}; inputs per joint {', '.join(residual_input_kinds(block))}: "
               "the torque the rigid-body fit leaves unexplained, learnt per joint.", "note"),
            _table(RESIDUAL_HEADER, residual_rows(block), text_columns=2),
            _list([f"{j['joint']}: {j['reason']}" for j in block["joints"] if j.get("reason")], "note")]
    return _section("residual", "Residual model", body)


# --------------------------------------------------------------------------- the page

_SECTIONS = (("payload", "Payload"), ("friction", "Friction"), ("torque", "Torque fit"),
             ("validation", "Validation"), ("base", "Base parameters"), ("excitation", "Excitation"),
             ("quality", "Quality"), ("transmissions", "Transmissions"), ("residual", "Residual model"))


def html_report(robot, result, document: dict, recording, validation=None, notes=(), figures: bool = True,
                excitation=None) -> str:
    """The report page as one HTML string (see write_html_report)."""
    draw = _Figures(figures)
    sections = [
        _payload_section(robot, result, document),
        _friction_section(robot, result, document, recording, draw),
        _torque_section(robot, result, recording, validation, draw),
        _validation_section(document),
        _base_section(result, document, draw),
        _excitation_section(robot, document, recording, excitation, draw),
        _quality_section(document, recording, validation, notes),
        _transmission_section(document),
        _residual_section(document),
    ]
    present = [s for s in sections if s]
    links = " ".join(f'<a href="#{key}">{_e(label)}</a>' for key, label in _SECTIONS
                     if any(s.startswith(f'<section id="{key}"') for s in present))
    title = f"Identification of '{document['body_name']}': {document['verdict']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Identification: {_e(document['scope'])} scope, terminal body '{_e(document['body_name'])}'</h1>",
        _p(f"Source: {document['source']}", "muted"),
        _verdict_section(document),
        _summary_facts(document),
        f"<nav>{links}</nav>",
        *present,
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_html_report(path, robot, result, document: dict, recording, validation=None, notes=(),
                      figures: bool = True, excitation=None) -> Path:
    """Write ``report.html`` (one self-contained file) of an identification; returns its path.

    ``robot`` the nominal Robot identified, ``result`` its IdentificationResult, ``document``
    the params.json document of both (export.params_document, with what was added to it:
    transmissions, residual model, friction source); ``recording`` the identification
    recording (robot joints; the friction curves' velocity range and the excitation figure),
    ``validation`` the validation recording or None (the torque figures show it when given,
    else ``recording``). ``notes`` lines on the recording from its source (counts of received,
    rejected and lost samples); ``excitation`` (label, text) rows describing the excitation
    (an optimized design's criterion and its condition number against the multisines').
    ``figures`` False leaves the figures out (tables only); without matplotlib they are left
    out with a note. The file is replaced atomically.
    """
    path = Path(path)
    page = html_report(robot, result, document, recording, validation, notes, figures, excitation)
    _atomic_write(path, page.encode("utf-8"))
    return path

