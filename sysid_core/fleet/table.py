"""``fleet.csv``: every robot's identification on every date, one row per robot, date and joint.

Columns (COLUMNS): robot, date (ISO 8601), joint, the joint's Coulomb level and viscous coefficient with
their standard deviations (N m, N m s/rad), the period's verdict and its reasons, the payload (terminal
body) mass and its standard deviation (kg), centre of mass (m, in the terminal body's frame) and its
standard deviation (mm), the samples and hours identified, the params.json path and the error. The
period's columns (verdict to error) repeat on each of its joints' rows. A cell is empty for None (no
payload in the full scope, no error); floats are written as Python's repr (the shortest text that reads
back to the same double; ``nan`` and ``inf`` as such), so read_fleet_csv returns exactly what was written.
``reasons`` is a JSON list of strings (empty cell for none), so any text survives (an empty ``error``
text reads back as None, the one thing that does not). A period without
joints (identification impossible before the model was read) is one row with an empty joint and empty
joint columns. Rows are sorted by robot, then date, then the period's joint order.
"""
from __future__ import annotations

import csv
import datetime
import io
import json
from pathlib import Path

import numpy as np

from ..results.export import _atomic_write
from .summary import PeriodSummary

COLUMNS = ("robot", "date", "joint", "coulomb", "coulomb_std", "viscous", "viscous_std", "verdict", "reasons",
           "mass", "mass_std", "com_x", "com_y", "com_z", "com_std_mm", "samples", "hours", "params", "error")
_JOINT_ARRAYS = ("coulomb", "coulomb_std", "viscous", "viscous_std")


def _number(value) -> str:
    return "" if value is None else repr(float(value))


def _optional(text: str):
    return None if text == "" else float(text)


def _rows(summary: PeriodSummary) -> list:
    com = [None] * 3 if summary.com is None else [float(x) for x in np.asarray(summary.com, dtype=float)]
    period = [summary.verdict, json.dumps(list(summary.reasons)) if summary.reasons else "",
              _number(summary.mass), _number(summary.mass_std), *(_number(x) for x in com),
              _number(summary.com_std_mm), str(int(summary.samples)), _number(summary.hours), summary.params,
              "" if summary.error is None else summary.error]
    head = [summary.robot, summary.date.isoformat()]
    if not summary.joint_names:
        return [head + ["", "", "", "", ""] + period]
    arrays = [np.asarray(getattr(summary, name), dtype=float).reshape(-1) for name in _JOINT_ARRAYS]
    return [head + [joint] + [_number(a[j]) for a in arrays] + period
            for j, joint in enumerate(summary.joint_names)]


def write_fleet_csv(path, summaries) -> Path:
    """Write ``fleet.csv`` (see the module docstring) of ``summaries`` (PeriodSummary, any order); the file
    is replaced atomically. Returns its path. Raises ValueError when a robot has two periods on one date."""
    path = Path(path)
    ordered = sorted(summaries, key=lambda s: (s.robot, s.date))
    keys = [(s.robot, s.date) for s in ordered]
    if len(set(keys)) != len(keys):
        raise ValueError("a robot has two periods on one date")
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for summary in ordered:
        writer.writerows(_rows(summary))
    _atomic_write(path, buffer.getvalue().encode("utf-8"))
    return path


def read_fleet_csv(path) -> list:
    """The PeriodSummaries of a ``fleet.csv`` written by write_fleet_csv, in its row order (robot, date).
    Raises ValueError on a file with other columns or a period whose rows disagree."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = tuple(next(reader, ()))
        if header != COLUMNS:
            raise ValueError(f"{path}: not a fleet table (columns {header})")
        groups = {}  # (robot, date) -> rows, in file order
        for line, row in enumerate(reader, start=2):
            if len(row) != len(COLUMNS):
                raise ValueError(f"{path}:{line}: {len(row)} cells, expected {len(COLUMNS)}")
            groups.setdefault((row[0], row[1]), []).append(dict(zip(COLUMNS, row)))
    out = []
    for (robot, date), rows in groups.items():
        period = COLUMNS[COLUMNS.index("verdict"):]
        first = rows[0]
        if any(tuple(r[c] for c in period) != tuple(first[c] for c in period) for r in rows[1:]):
            raise ValueError(f"{path}: the rows of {robot} on {date} disagree on the period's columns")
        joints = [r for r in rows if r["joint"] != ""]
        com = [_optional(first[c]) for c in ("com_x", "com_y", "com_z")]
        out.append(PeriodSummary(
            robot=robot, date=datetime.date.fromisoformat(date), joint_names=tuple(r["joint"] for r in joints),
            **{name: np.array([float(r[name]) for r in joints], dtype=float) for name in _JOINT_ARRAYS},
            verdict=first["verdict"], reasons=tuple(json.loads(first["reasons"])) if first["reasons"] else (),
            mass=_optional(first["mass"]), mass_std=_optional(first["mass_std"]),
            com=None if all(c is None for c in com) else np.array(com, dtype=float),
            com_std_mm=_optional(first["com_std_mm"]), samples=int(first["samples"]),
            hours=float(first["hours"]), params=first["params"],
            error=None if first["error"] == "" else first["error"]))
    return out
