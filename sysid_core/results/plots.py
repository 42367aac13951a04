"""PNG figures of an identification, written next to params.json.

``torque_fit.png``: measured and predicted torque per joint (on the validation recording when
there is one, else on the identification data); ``residuals.png``: their difference per
joint, with its RMSE; ``parameters.png``: the base parameters with two standard deviations and
their relative standard deviation. Matplotlib's object API with the Agg canvas: no pyplot
state and no change of the process's backend.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..dynamics.model import Robot
from ..identification.identify import IdentificationResult, fitted_torque
from ..identification.recording import Recording
from ..identification.residual import residual_samples

MAX_POINTS = 4000  # per line: a 10-minute 1 kHz recording would only blacken the figure
POORLY_DETERMINED_PERCENT = 10.0


def _figure(rows: int, width: float = 10.0, row_height: float = 1.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(width, max(2.5, row_height * rows)), constrained_layout=True)
    FigureCanvasAgg(figure)
    return figure


def _every(num: int) -> slice:
    return slice(None, None, max(1, -(-num // MAX_POINTS)))


def torque_samples(robot: Robot, result: IdentificationResult, recording: Recording):
    """(time (M,) s, measured (M, n) N m, predicted (M, n) N m) on ``recording`` as the
    identification saw it: filtered, trimmed and decimated with ``result.config.filter``."""
    parts = list(fitted_torque(robot, result, recording))
    return tuple(np.concatenate(a) for a in zip(*((s.time, s.tau, predicted) for s, predicted in parts)))


def torque_figure(robot: Robot, result: IdentificationResult, recording: Recording, title: str):
    """Measured and predicted torque per joint; axes j holds lines [measured, predicted]."""
    time, measured, predicted = torque_samples(robot, result, recording)
    keep = _every(time.size)
    figure = _figure(robot.n_joints)
    axes = figure.subplots(robot.n_joints, 1, sharex=True, squeeze=False)[:, 0]
    for j, ax in enumerate(axes):
        ax.plot(time[keep] - time[0], measured[keep, j], color="0.35", lw=1.0, label="measured")
        ax.plot(time[keep] - time[0], predicted[keep, j], color="tab:orange", lw=1.0, label="predicted")
        ax.set_ylabel(f"{robot.joint_names[j]}\n[N m]", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(loc="upper right", fontsize=7, ncol=2)
    axes[0].set_title(title, fontsize=9)
    axes[-1].set_xlabel("time [s]")
    return figure


def residual_figure(robot: Robot, result: IdentificationResult, recording: Recording, title: str,
                    residual_model=None):
    """Residual (measured - predicted) per joint with its RMSE in the label; with
    ``residual_model`` (a ``residual.ResidualModel`` of this result) also what is left once its
    correction is added, with that RMSE."""
    time, measured, predicted = torque_samples(robot, result, recording)
    residual = measured - predicted
    rmse = np.sqrt(np.mean(residual**2, axis=0))
    corrected = None
    if residual_model is not None:
        rows = residual_samples(robot, result, recording)
        left = rows["residual"] - residual_model.predict(rows["q"], rows["dq"], rows["deflection"], rows["torque"])
        corrected = (rows["time"], left, np.sqrt(np.mean(left ** 2, axis=0)))
    keep = _every(time.size)
    figure = _figure(robot.n_joints)
    axes = figure.subplots(robot.n_joints, 1, sharex=True, squeeze=False)[:, 0]
    for j, ax in enumerate(axes):
        ax.plot(time[keep] - time[0], residual[keep, j], color="tab:red", lw=0.8, label="rigid body + friction")
        label = f"RMSE {rmse[j]:.3g} N m"
        if corrected is not None:
            t, left, left_rmse = corrected
            every = _every(t.size)
            ax.plot(t[every] - time[0], left[every, j], color="tab:blue", lw=0.8, label="with the residual model")
            label += f", with the residual model {left_rmse[j]:.3g} N m"
        ax.axhline(0.0, color="0.6", lw=0.5)
        ax.set_ylabel(f"{robot.joint_names[j]}\n[N m]", fontsize=8)
        ax.text(0.99, 0.9, label, transform=ax.transAxes, ha="right", va="top", fontsize=7)
        ax.tick_params(labelsize=7)
    if corrected is not None:
        axes[0].legend(loc="upper left", fontsize=7, ncol=2)
    axes[0].set_title(title, fontsize=9)
    axes[-1].set_xlabel("time [s]")
    return figure


def parameter_figure(result: IdentificationResult):
    """Base parameters with +-2 standard deviations (symlog scale: they span decades) and their
    relative standard deviation in percent, poorly determined ones (> 10 %) in red."""
    values, std, relative = result.estimate.values, result.estimate.std, result.estimate.relative_std
    names = list(result.base.names)
    index = np.arange(len(names))
    figure = _figure(2, width=max(8.0, 0.22 * len(names)), row_height=3.0)
    top, bottom = figure.subplots(2, 1, sharex=True)
    top.errorbar(index, values, yerr=2 * std, fmt="o", ms=3, lw=1, color="tab:blue")
    floor = float(np.min(np.abs(values[values != 0]), initial=1e-6))
    top.set_yscale("symlog", linthresh=floor)
    top.set_ylabel("value (SI) +- 2 std", fontsize=8)
    top.set_title(f"{len(names)} base parameters ({result.scope} scope, {result.estimate.method})", fontsize=9)
    shown = np.where(np.isfinite(relative), relative, np.nan)
    colours = ["tab:red" if r > POORLY_DETERMINED_PERCENT else "tab:green" for r in np.nan_to_num(shown, nan=np.inf)]
    bottom.bar(index, shown, color=colours)
    bottom.axhline(POORLY_DETERMINED_PERCENT, color="0.4", lw=0.8, ls="--")
    bottom.set_yscale("log")
    bottom.set_ylabel("relative std [%]", fontsize=8)
    bottom.set_xticks(index)
    bottom.set_xticklabels(names, rotation=90, fontsize=6)
    for ax in (top, bottom):
        ax.tick_params(axis="y", labelsize=7)
    return figure


def write_plots(output_dir, robot: Robot, result: IdentificationResult, recording: Recording,
                validation: Recording | None = None, residual_model=None) -> list[Path]:
    """Write torque_fit.png, residuals.png and parameters.png into ``output_dir``; returns the paths.

    The torque figures show ``validation`` when given (what the model predicts on data it did
    not see), else ``recording``; residuals.png also what ``residual_model`` leaves, if given.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    shown = validation if validation is not None else recording
    what = "validation recording (not used to identify)" if validation is not None else "identification recording"
    figures = {
        "torque_fit.png": torque_figure(robot, result, shown, f"Torque: measured vs predicted, {what}"),
        "residuals.png": residual_figure(robot, result, shown, f"Residual torque, {what}", residual_model),
        "parameters.png": parameter_figure(result),
    }
    paths = []
    for name, figure in figures.items():
        figure.savefig(output_dir / name, dpi=110)
        paths.append(output_dir / name)
    return paths
