"""Damiao motor limit table."""
import dataclasses

import pytest

from sysid_core.damiao.protocol import MOTOR_LIMITS, MotorLimits, motor_limits


@pytest.mark.parametrize("name, pmax, vmax, tmax", [
    ("DM3507", 12.566, 50, 5), ("DM4310", 12.5, 30, 10), ("DM4310_48V", 12.5, 50, 10),
    ("DM4340", 12.5, 10, 28), ("DM4340_48V", 12.5, 10, 28), ("DM6006", 12.5, 45, 20),
    ("DM8006", 12.5, 45, 40), ("DM8009", 12.5, 45, 54), ("DM10010L", 12.5, 25, 200),
    ("DM10010", 12.5, 20, 200), ("DMH3510", 12.5, 280, 1), ("DMH6215", 12.5, 45, 10),
    ("DMG6220", 12.5, 45, 10), ("DM6248", 12.566, 20, 120),
])
def test_reference_table(name, pmax, vmax, tmax):
    assert motor_limits(name) == MotorLimits(pmax, vmax, tmax)


def test_every_entry_is_positive():
    assert len(MOTOR_LIMITS) == 14
    for limits in MOTOR_LIMITS.values():
        assert limits.pmax > 0 and limits.vmax > 0 and limits.tmax > 0


def test_case_insensitive():
    assert motor_limits("dm4340") is MOTOR_LIMITS["DM4340"]
    assert motor_limits(" Dm4340_48v ") is MOTOR_LIMITS["DM4340_48V"]
    assert motor_limits("dm10010l") is MOTOR_LIMITS["DM10010L"]


def test_unknown_type_lists_known_types():
    with pytest.raises(ValueError) as err:
        motor_limits("DM9999")
    message = str(err.value)
    assert "DM9999" in message
    assert all(name in message for name in MOTOR_LIMITS)


def test_limits_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        motor_limits("DM4310").tmax = 100.0
