"""The size of an identification over a long recording, settled before the work starts: the
decimation that keeps the rows to what the filtered signals hold (``automatic_decimation``),
and whether the machine has the memory for it (``check_memory``): a run too big is refused
with the numbers, not killed half-way with whatever it had not saved yet.
"""
from __future__ import annotations

import math

from ..dynamics.model import Robot
from ..errors import DataError
from .identify import IdentificationConfig, column_names
from .memory import available_memory, describe_bytes, memory_needed

# decimation 0 (automatic): about this many rows per identification, but never fewer rows per
# second than ROWS_PER_CUTOFF times cutoff_hz: the filtered signals hold nothing faster, so
# the rows dropped add no information, only time (the regression is linear in the rows)
TARGET_ROWS = 20_000
ROWS_PER_CUTOFF = 5.0
# doubles per recorded sample and joint the filtering holds besides the regressor (resampled
# copy, filtered q, dq, tau, ddq, the zero-phase filter's padded temporaries): an estimate
FILTER_DOUBLES = 16


def automatic_decimation(n_samples: int, sample_rate: float, cutoff_hz: float) -> int:
    """Decimation that keeps about TARGET_ROWS of ``n_samples`` (at ``sample_rate`` Hz), but at
    least ROWS_PER_CUTOFF * ``cutoff_hz`` rows per second."""
    finest = max(1, int(sample_rate / (ROWS_PER_CUTOFF * cutoff_hz)))
    return int(min(max(1, math.ceil(n_samples / TARGET_ROWS)), finest))


def check_memory(robot: Robot, config: IdentificationConfig, samples: int, remedy: str) -> None:
    """DataError when identifying ``samples`` samples of ``robot`` with ``config`` would need
    more memory than the machine has available: the numbers, then ``remedy`` (what to do)."""
    rows = math.ceil(samples / config.filter.decimation)
    needed = memory_needed(robot, config, rows) + FILTER_DOUBLES * 8 * samples * robot.n_joints
    available = available_memory()
    if available is not None and needed > available:
        raise DataError(
            f"identifying {samples} samples (decimation {config.filter.decimation}: {rows} rows of "
            f"{robot.n_joints} joints, {len(column_names(robot, config))} parameters) needs about "
            f"{describe_bytes(needed)} of memory; this machine has {describe_bytes(available)} available: {remedy}")
