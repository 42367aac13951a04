"""Planned joint trajectories: what an excitation asks the arm to do, and their files.

A saved trajectory replays the same excitation later, on another machine or on the real arm:
``save_trajectory`` writes time, q, dq and ddq per joint with the joint names, as JSON (floats
written by repr, so reloading gives the same bits) or CSV (``%.17g``, which round-trips a
double too); ``load_trajectory`` reads either back and checks it.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError

FORMAT = "sysid_ros trajectory"
FORMAT_VERSION = 1
# Samples closer to uniform than this fraction of a period count as a uniform grid.
_UNIFORM_TOLERANCE = 1e-6


@dataclass(frozen=True, eq=False)
class Trajectory:
    """Joint positions and their exact derivatives on a uniform time grid.

    ``time`` (N,) s from 0; ``q`` (N, n) rad (m for slides), ``dq`` (N, n) rad/s,
    ``ddq`` (N, n) rad/s^2.
    """

    time: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray


def _checked(time, q, dq, ddq, joint_names, source: str) -> tuple[Trajectory, tuple]:
    """A Trajectory from raw arrays, or DataError naming ``source`` and what is wrong."""
    names = tuple(str(n) for n in joint_names)
    if not names:
        raise DataError(f"{source}: no joints")
    if len(set(names)) != len(names):
        raise DataError(f"{source}: duplicate joint names {list(names)}")
    try:
        time = np.asarray(time, dtype=float)
        arrays = [np.asarray(a, dtype=float) for a in (q, dq, ddq)]
    except (TypeError, ValueError) as exc:
        raise DataError(f"{source}: values are not numbers of one consistent shape ({exc})") from None
    if time.ndim != 1 or time.shape[0] < 2:
        raise DataError(f"{source}: time must hold at least 2 samples, got shape {time.shape}")
    for label, arr in zip(("q", "dq", "ddq"), arrays):
        if arr.shape != (time.shape[0], len(names)):
            raise DataError(f"{source}: {label} has shape {arr.shape}, expected ({time.shape[0]}, {len(names)})")
    for label, arr in zip(("time", "q", "dq", "ddq"), [time] + arrays):
        if not np.all(np.isfinite(arr)):
            raise DataError(f"{source}: {label} contains NaN or infinite values")
    step = np.diff(time)
    if np.any(step <= 0):
        first = int(np.flatnonzero(step <= 0)[0])
        raise DataError(f"{source}: time is not increasing at sample {first + 1} "
                        f"({time[first]!r} s then {time[first + 1]!r} s)")
    period = (time[-1] - time[0]) / (time.shape[0] - 1)
    if np.max(np.abs(step - period)) > _UNIFORM_TOLERANCE * period:
        raise DataError(f"{source}: samples are not uniformly spaced in time")
    return Trajectory(time=time - time[0], q=arrays[0], dq=arrays[1], ddq=arrays[2]), names


def sample_rate(trajectory: Trajectory) -> float:
    """Sample rate (Hz) of a uniformly sampled trajectory."""
    time = np.asarray(trajectory.time, dtype=float)
    return (time.shape[0] - 1) / (time[-1] - time[0])


def save_trajectory(path, trajectory: Trajectory, joint_names) -> Path:
    """Write ``trajectory`` to ``path`` (.json or .csv) with its ``joint_names`` (n,).

    JSON: {"format", "version", "joint_names", "sample_rate", "time", "q", "dq", "ddq"} with
    q, dq, ddq as lists of rows (one per sample). CSV: header ``time,q_<joint>...,dq_<joint>...,
    ddq_<joint>...``, one row per sample. Units: s, rad (m), rad/s, rad/s^2. Raises ValueError
    for another suffix, DataError for a trajectory that would not load back.
    Returns the path written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise ValueError(f"trajectory file must end in .json or .csv, got '{path.name}'")
    checked, names = _checked(trajectory.time, trajectory.q, trajectory.dq, trajectory.ddq, joint_names,
                              "trajectory to save")
    if suffix == ".json":
        document = {"format": FORMAT, "version": FORMAT_VERSION, "joint_names": list(names),
                    "sample_rate": sample_rate(checked), "time": checked.time.tolist(),
                    "q": checked.q.tolist(), "dq": checked.dq.tolist(), "ddq": checked.ddq.tolist()}
        path.write_text(json.dumps(document))
    else:
        header = ["time"] + [f"{kind}_{name}" for kind in ("q", "dq", "ddq") for name in names]
        table = np.column_stack([checked.time, checked.q, checked.dq, checked.ddq])
        np.savetxt(path, table, fmt="%.17g", delimiter=",", header=",".join(header), comments="")
    return path


def _read_json(path: Path):
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise DataError(f"{path}: expected a JSON object")
    missing = [key for key in ("joint_names", "time", "q", "dq", "ddq") if key not in document]
    if missing:
        raise DataError(f"{path}: missing {', '.join(missing)}")
    names = document["joint_names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{path}: joint_names must be a list of strings")
    return document["time"], document["q"], document["dq"], document["ddq"], names


def _read_csv(path: Path):
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise DataError(f"{path}: empty file")
        header = [h.strip() for h in header]
        rows = [row for row in reader if row]
    if header[0] != "time":
        raise DataError(f"{path}: the first column must be 'time', got '{header[0]}'")
    names = [h[2:] for h in header if h.startswith("q_")]
    wanted = ["time"] + [f"{kind}_{name}" for kind in ("q", "dq", "ddq") for name in names]
    missing = [column for column in wanted if column not in header]
    if not names or missing:
        raise DataError(f"{path}: missing columns {missing or ['q_<joint>']} (expected time, then q_, dq_, "
                        f"ddq_ per joint)")
    try:
        table = np.array([[float(x) for x in row] for row in rows], dtype=float)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from None
    if table.ndim != 2 or table.shape[1] != len(header):
        raise DataError(f"{path}: every row must have {len(header)} values")
    column = {name: k for k, name in enumerate(header)}

    def block(kind):
        return table[:, [column[f"{kind}_{name}"] for name in names]]
    return table[:, column["time"]], block("q"), block("dq"), block("ddq"), names


def load_trajectory(path, joint_names=None) -> tuple[Trajectory, tuple]:
    """Read a trajectory written by ``save_trajectory`` (or by hand in the same layout).

    With ``joint_names`` (a model's joints), the file must hold exactly those joints; its
    columns are reordered to that order. Time is shifted to start at 0.
    Returns (trajectory, joint names). Raises DataError for a missing or unreadable file,
    missing columns or keys, NaN or infinite values, time not increasing or not uniform, or
    joints that differ from ``joint_names``; ValueError for a suffix other than .json/.csv.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise ValueError(f"trajectory file must end in .json or .csv, got '{path.name}'")
    if not path.is_file():
        raise DataError(f"trajectory file not found: {path}")
    try:
        time, q, dq, ddq, names = (_read_json if suffix == ".json" else _read_csv)(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    trajectory, names = _checked(time, q, dq, ddq, names, str(path))
    if joint_names is None:
        return trajectory, names
    wanted = tuple(joint_names)
    if set(wanted) != set(names) or len(wanted) != len(names):
        raise DataError(f"{path}: joints {list(names)} differ from the model's {list(wanted)}")
    order = [names.index(name) for name in wanted]
    return Trajectory(trajectory.time, trajectory.q[:, order], trajectory.dq[:, order],
                      trajectory.ddq[:, order]), wanted


def resample(trajectory: Trajectory, rate: float) -> Trajectory:
    """The trajectory on a uniform grid at ``rate`` Hz, by quintic Hermite interpolation.

    Between two samples the unique quintic matching q, dq and ddq at both ends: it reproduces
    every original sample exactly and keeps positions, velocities and accelerations continuous.
    The duration must be a whole number of new periods (so the last sample, often the rest
    pose, is kept); raises ValueError otherwise.
    """
    if not np.isfinite(rate) or rate <= 0:
        raise ValueError(f"rate must be a finite number of Hz > 0, got {rate}")
    time = np.asarray(trajectory.time, dtype=float)
    duration = time[-1] - time[0]
    periods = int(round(duration * rate))
    if periods < 1 or abs(duration * rate - periods) > 1e-6:
        raise ValueError(f"a duration of {duration!r} s is not a whole number of periods at {rate:g} Hz")
    old_rate = sample_rate(trajectory)
    if abs(old_rate / rate - 1.0) < 1e-12:
        return trajectory
    new_time = np.arange(periods + 1) / rate
    h = 1.0 / old_rate
    k = np.minimum((new_time * old_rate).astype(int), time.shape[0] - 2)
    s = ((new_time - k * h) / h)[:, None]
    q, dq, ddq = (np.asarray(a, dtype=float) for a in (trajectory.q, trajectory.dq, trajectory.ddq))
    # quintic Hermite basis on s in [0, 1] (values, first and second derivatives)
    s2, s3, s4, s5 = s ** 2, s ** 3, s ** 4, s ** 5
    basis = [1 - 10 * s3 + 15 * s4 - 6 * s5, s - 6 * s3 + 8 * s4 - 3 * s5, 0.5 * (s2 - 3 * s3 + 3 * s4 - s5),
             10 * s3 - 15 * s4 + 6 * s5, -4 * s3 + 7 * s4 - 3 * s5, 0.5 * (s3 - 2 * s4 + s5)]
    d1 = [-30 * s2 + 60 * s3 - 30 * s4, 1 - 18 * s2 + 32 * s3 - 15 * s4, 0.5 * (2 * s - 9 * s2 + 12 * s3 - 5 * s4),
          30 * s2 - 60 * s3 + 30 * s4, -12 * s2 + 28 * s3 - 15 * s4, 0.5 * (3 * s2 - 8 * s3 + 5 * s4)]
    d2 = [-60 * s + 180 * s2 - 120 * s3, -36 * s + 96 * s2 - 60 * s3, 0.5 * (2 - 18 * s + 36 * s2 - 20 * s3),
          60 * s - 180 * s2 + 120 * s3, -24 * s + 84 * s2 - 60 * s3, 0.5 * (6 * s - 24 * s2 + 20 * s3)]
    knots = [q[k], h * dq[k], h * h * ddq[k], q[k + 1], h * dq[k + 1], h * h * ddq[k + 1]]
    new_q = sum(b * v for b, v in zip(basis, knots))
    new_dq = sum(b * v for b, v in zip(d1, knots)) / h
    new_ddq = sum(b * v for b, v in zip(d2, knots)) / h ** 2
    return Trajectory(time=new_time, q=new_q, dq=new_dq, ddq=new_ddq)
