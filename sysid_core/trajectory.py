"""Planned joint trajectories: what an excitation asks the arm to do."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
