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


class TrackingError(DataError):
    """The arm did not do what was planned, so its recording must not be identified.

    It diverged, did not follow the plan, needed more torque than its actuators have or hit a
    joint limit. The data exist and are finite, but a model identified from them would
    describe a run the arm could not make: the CLI exits 3 (result not trustworthy), not 2.
    ``joint`` (name), ``time`` (s) and ``size`` (in the unit the message states) locate the
    worst violation when there is one, else None.
    """

    def __init__(self, message: str, joint: str | None = None, time: float | None = None,
                 size: float | None = None):
        super().__init__(message)
        self.joint, self.time, self.size = joint, time, size
