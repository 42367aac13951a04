"""The outputs of a friction sweep: friction_sweep.json, a text table and friction_sweep.png.

friction_sweep.json: per joint its measured points (``velocity`` rad/s, ``torque`` N m, ``std``
N m, ``odd``: mirrored from each speed's two directions) and per friction law either its fitted
parameters (SI units, as params.json names them) with the RMSE of the fit, or why it could not
be fitted. The figure plots each joint's points with two standard errors and every fitted law.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..identification.friction_curve import FrictionCurve


def friction_document(points, curves) -> dict:
    """The JSON document of the sweep: ``points`` FrictionPoints per joint, ``curves`` the
    matching {law: FrictionCurve or reason} per joint."""
    joints = []
    for p, fitted in zip(points, curves):
        laws = {}
        for name, curve in fitted.items():
            if isinstance(curve, FrictionCurve):
                laws[name] = {"parameters": {k: float(v) for k, v in curve.friction.parameters.items()},
                              "rmse": curve.rmse}
            else:
                laws[name] = {"not_fitted": curve}
        joints.append({"joint": p.joint, "odd": bool(p.odd), "velocity": p.velocity.tolist(),
                       "torque": p.torque.tolist(), "std": p.std.tolist(), "laws": laws})
    return {"units": {"velocity": "rad/s", "torque": "N m"}, "joints": joints}


def format_friction(points, curves) -> str:
    """Per joint: the number of points and each law's RMSE, best first."""
    lines = []
    for p, fitted in zip(points, curves):
        good = sorted(((c.rmse, n) for n, c in fitted.items() if isinstance(c, FrictionCurve)))
        laws = ", ".join(f"{n} {r:.3g}" for r, n in good) or "none fitted"
        lines.append(f"  {p.joint}: {p.velocity.size} points from {p.velocity.min():+.3g} to "
                     f"{p.velocity.max():+.3g} rad/s; RMSE N m: {laws}")
    return "\n".join(lines)


def write_friction_sweep(output_dir, points, curves, plots: bool = True) -> list:
    """Write friction_sweep.json (and friction_sweep.png with ``plots``) into ``output_dir``;
    returns the paths written."""
    output_dir = Path(output_dir)
    path = output_dir / "friction_sweep.json"
    path.write_text(json.dumps(friction_document(points, curves), indent=1) + "\n")
    written = [path]
    if plots:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        figure = Figure(figsize=(8.0, max(2.5, 2.2 * len(points))), constrained_layout=True)
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(points), 1, squeeze=False)[:, 0]
        for ax, p, fitted in zip(axes, points, curves):
            ax.errorbar(p.velocity, p.torque, yerr=2 * p.std, fmt="o", color="0.2", ms=3, label="measured")
            grid = np.linspace(p.velocity.min(), p.velocity.max(), 400)
            for name, curve in fitted.items():
                if isinstance(curve, FrictionCurve):
                    ax.plot(grid, curve.friction.torque(grid), lw=1.0, label=f"{name} ({curve.rmse:.2g} N m)")
            ax.set_ylabel(f"{p.joint} [N m]")
            ax.axhline(0.0, color="0.8", lw=0.5)
            ax.legend(fontsize=6, loc="upper left")
        axes[-1].set_xlabel("velocity [rad/s]")
        figure.savefig(output_dir / "friction_sweep.png", dpi=110)
        written.append(output_dir / "friction_sweep.png")
    return written
