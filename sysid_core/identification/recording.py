"""Measured joint data, the input of every estimator."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from .intervals import INTERVAL_BLOCK, increasing

NOTE_LEVELS = ("doubtful", "failed")


@dataclass(frozen=True)
class QualityNote:
    """What the source of a recording knows about its quality, for the verdict of every result
    identified from it: ``level`` doubtful (worth a warning) or failed (the data cannot be
    trusted, e.g. the arm did not follow the plan), ``message`` one line saying what, where
    and how much ("joint2 lagged the plan by 0.31 rad at t=4.2 s")."""

    level: str
    message: str

    def __post_init__(self):
        if self.level not in NOTE_LEVELS:
            raise ValueError(f"quality note level must be one of {NOTE_LEVELS}, got '{self.level}'")


@dataclass(frozen=True, eq=False)
class Recording:
    """Samples of joint state and torque as a robot reports them.

    ``time`` (N,) s, strictly increasing; ``q`` (N, n) rad (m), ``dq`` (N, n) rad/s,
    ``tau`` (N, n) joint torque N m (N), the torque the actuators applied. ``ddq`` (N, n) rad/s^2
    only when it is known exactly (planned or simulated); estimators otherwise derive it
    from the measurements. ``motor_q`` (N, n) rad, when the arm has a motor-side encoder as
    well: the motor's position in joint units (motor angle / gear ratio, the joint's zero and
    sign), so that q - motor_q is the transmission's deflection; NaN where the motor side was not
    measured at that sample (a drive read slower than its joint state). ``joint_names`` (n,) give the
    column order. ``quality_notes``
    (QualityNote, ...) what the source found wrong with the data (tracking, saturation):
    they travel with every part of the recording and end in the verdict of what is
    identified from it.
    """

    time: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    joint_names: tuple
    ddq: np.ndarray | None = None
    quality_notes: tuple = ()
    motor_q: np.ndarray | None = None

    def __post_init__(self):
        object.__setattr__(self, "quality_notes", tuple(self.quality_notes))
        if not all(isinstance(note, QualityNote) for note in self.quality_notes):
            raise DataError("quality_notes must be QualityNote objects")
        n = len(self.joint_names)
        num = np.shape(self.time)[0] if np.ndim(self.time) == 1 else -1
        if num < 0:
            raise DataError(f"time must be one-dimensional, got shape {np.shape(self.time)}")
        arrays = {"q": self.q, "dq": self.dq, "tau": self.tau}
        if self.ddq is not None:
            arrays["ddq"] = self.ddq
        if self.motor_q is not None:
            arrays["motor_q"] = self.motor_q
        for name, arr in arrays.items():
            if np.shape(arr) != (num, n):
                raise DataError(f"{name} has shape {np.shape(arr)}, expected ({num}, {n}) for {n} joints")
        for name, arr in dict(arrays, time=self.time).items():
            arr = np.asarray(arr, dtype=float)
            if name == "motor_q":  # NaN: not measured at that sample; inf is no measurement at all
                arr = np.nan_to_num(arr, nan=0.0, posinf=np.inf, neginf=-np.inf)
            # block by block: a recording may be an hour long, and this runs on every one made
            blocks = range(0, num, INTERVAL_BLOCK)
            if not all(np.isfinite(arr[start:start + INTERVAL_BLOCK]).all() for start in blocks):
                bad = ~np.isfinite(arr)
                where = np.argwhere(bad)[0]
                raise DataError(f"{name} contains {int(bad.sum())} NaN or infinite values (first at index {tuple(where)})")
        if num > 1 and not increasing(np.asarray(self.time, dtype=float)):
            raise DataError("time stamps are not strictly increasing (dropped, repeated or out-of-order samples)")

    @property
    def n_samples(self) -> int:
        return int(np.shape(self.time)[0])

    def split(self, fraction: float) -> tuple["Recording", "Recording"]:
        """(head, tail): the tail is the last ``fraction`` (0 < fraction < 1) of the samples, e.g.
        a stretch of a non-repeating excitation held out to validate what the head identified."""
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"the split fraction must be in (0, 1), got {fraction}")
        cut = int(round((1.0 - fraction) * self.n_samples))
        return self.rows(slice(0, cut)), self.rows(slice(cut, None))

    def rows(self, index) -> "Recording":
        """The samples ``index`` (a slice or index array) picks, every signal alike."""
        pick = (lambda a: None if a is None else np.asarray(a)[index])
        return Recording(pick(self.time), pick(self.q), pick(self.dq), pick(self.tau), self.joint_names,
                         pick(self.ddq), self.quality_notes, pick(self.motor_q))

    def select(self, joint_names) -> "Recording":
        """Columns reordered to ``joint_names``; DataError naming what is missing. The same
        Recording (no copy) when the columns are already in that order."""
        joint_names = tuple(joint_names)
        if joint_names == tuple(self.joint_names):
            return self
        missing = [j for j in joint_names if j not in self.joint_names]
        if missing:
            raise DataError(f"joints {missing} of the model are not in the data; data has {list(self.joint_names)}")
        idx = [self.joint_names.index(j) for j in joint_names]
        pick = (lambda a: None if a is None else np.asarray(a)[:, idx])
        return Recording(self.time, pick(self.q), pick(self.dq), pick(self.tau), joint_names, pick(self.ddq),
                         self.quality_notes, pick(self.motor_q))
