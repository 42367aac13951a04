"""Damiao DM-J motors driven in MIT mode: host-side facts about their command ranges.

In MIT mode every command and feedback value is a fixed-point number mapped linearly
onto a symmetric range: position onto [-PMAX, PMAX] rad, velocity onto [-VMAX, VMAX]
rad/s, torque onto [-TMAX, TMAX] N m. A value outside its range is clamped by the
encoder, so a planned trajectory must fit inside these ranges to be played back as planned.

The table below holds the commonly published defaults per motor type. It is a
convenience for planning only: the motor's own registers are the final word. Read
PMAX, VMAX and TMAX (register IDs 21, 22 and 23) from each motor at start-up and use
those; a host whose limits differ from the registers encodes commands and decodes
feedback with the wrong scale.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MotorLimits:
    """MIT-mode mapping ranges of one motor type: values span [-x, x].

    ``pmax`` rad (output-shaft position), ``vmax`` rad/s, ``tmax`` N m. TMAX is the
    range of the torque encoding, often above the torque the motor can really deliver.
    """

    pmax: float
    vmax: float
    tmax: float


# Defaults (PMAX rad, VMAX rad/s, TMAX N m), first column of the reference table.
# Published sources disagree on several entries; the registers decide (see module docs):
#   DM3507      one source 12.5 / 30 / 10
#   DM4310_48V  one source VMAX 30
#   DM4340      several sources VMAX 8
#   DM4340_48V  one source VMAX 20, another 8
#   DM6006      vendor CAN-FD examples TMAX 12
#   DM8006      vendor CAN-FD examples TMAX 20
#   DM8009      TMAX 54 is the mapping range; the real peak torque is about 40 N m
MOTOR_LIMITS: dict[str, MotorLimits] = {
    "DM3507": MotorLimits(12.566, 50.0, 5.0),
    "DM4310": MotorLimits(12.5, 30.0, 10.0),
    "DM4310_48V": MotorLimits(12.5, 50.0, 10.0),
    "DM4340": MotorLimits(12.5, 10.0, 28.0),
    "DM4340_48V": MotorLimits(12.5, 10.0, 28.0),
    "DM6006": MotorLimits(12.5, 45.0, 20.0),
    "DM8006": MotorLimits(12.5, 45.0, 40.0),
    "DM8009": MotorLimits(12.5, 45.0, 54.0),
    "DM10010L": MotorLimits(12.5, 25.0, 200.0),
    "DM10010": MotorLimits(12.5, 20.0, 200.0),
    "DMH3510": MotorLimits(12.5, 280.0, 1.0),
    "DMH6215": MotorLimits(12.5, 45.0, 10.0),
    "DMG6220": MotorLimits(12.5, 45.0, 10.0),
    "DM6248": MotorLimits(12.566, 20.0, 120.0),
}


def _normalise(name: str) -> str:
    # "dm4340-48v", " DM4340_48V " and "DM4340_48V" all name the same motor
    return str(name).strip().upper().replace("-", "_")


def motor_limits(name: str) -> MotorLimits:
    """Default MIT-mode limits of the motor type ``name`` (case-insensitive, e.g. "dm4340").

    Raises ValueError naming the known types when ``name`` is not in MOTOR_LIMITS.
    """
    key = _normalise(name)
    try:
        return MOTOR_LIMITS[key]
    except KeyError:
        known = ", ".join(MOTOR_LIMITS)
        raise ValueError(f"unknown Damiao motor type '{name}'; known types: {known}") from None
