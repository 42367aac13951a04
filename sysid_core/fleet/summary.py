"""What the fleet keeps of one robot's identification on one date."""
from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class PeriodSummary:
    """One robot's identification on one date. ``joint_names`` (n,); ``coulomb``, ``viscous`` (n,) N m and
    N m s/rad with their standard deviations ``coulomb_std``, ``viscous_std`` (n,) (NaN where unknown);
    ``verdict`` "good", "doubtful" or "failed" with ``reasons`` (str, ...); ``mass`` kg, ``mass_std`` kg,
    ``com`` (3,) m in the terminal body's frame, ``com_std_mm`` mm: the payload (terminal body) in the terminal
    scope, None otherwise; ``samples`` identified, ``hours`` of recording identified; ``params`` the
    params.json path relative to the output directory; ``error`` why the period could not be identified
    (then every number is NaN and verdict "failed")."""

    robot: str
    date: datetime.date
    joint_names: tuple
    coulomb: np.ndarray
    coulomb_std: np.ndarray
    viscous: np.ndarray
    viscous_std: np.ndarray
    verdict: str
    reasons: tuple = ()
    mass: float | None = None
    mass_std: float | None = None
    com: np.ndarray | None = None
    com_std_mm: float | None = None
    samples: int = 0
    hours: float = 0.0
    params: str = ""
    error: str | None = None
