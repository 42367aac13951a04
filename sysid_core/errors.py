"""Exceptions raised by sysid_core.

Every error a user can cause (a wrong file, bad data, an unidentifiable
problem) is one of these, so the CLI and the ROS nodes can report it as a
message instead of a traceback.
"""


class SysidError(Exception):
    """Base class of every error sysid_core raises on bad input."""


class ModelError(SysidError):
    """The robot model cannot be loaded or is not a fixed-base arm we handle."""


class DataError(SysidError):
    """Measured or planned data are unusable (shape, NaN, too few samples)."""


class IdentificationError(SysidError):
    """The identification problem is ill-posed (rank too low) or its result is unphysical."""
