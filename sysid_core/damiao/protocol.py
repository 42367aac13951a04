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

The second half of the module is the MIT-mode protocol codec: pure functions from SI
values to 8-byte CAN payloads and back (encode_mit/decode_mit, decode_feedback/
encode_feedback, the special enable/disable/zero/clear-error frames, state refresh and
register read/write/save frames on 0x7FF). It does not import python-can; the bridge wraps
the payloads into can.Message. Invalid input (NaN, wrong payload length, unknown register
writes) raises ValueError instead of reaching the bus.
"""
from __future__ import annotations

import math
import numbers
import operator
import struct
from dataclasses import dataclass
from typing import NamedTuple, Union

import numpy as np


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


# ---------------------------------------------------------------------------------------
# MIT-mode protocol codec: pure functions, bytes in and bytes out.
#
# Written from the facts in shared/reference/damiao-mit-protocol.md. python-can is not
# imported here: the bridge wraps (arbitration id, payload) pairs into can.Message.
# ---------------------------------------------------------------------------------------

Bytes = Union[bytes, bytearray, memoryview]

FRAME_LENGTH = 8
"""Every frame of this protocol carries exactly 8 data bytes."""

MANAGEMENT_ID = 0x7FF
"""Arbitration id of state refresh and register read/write/save frames."""

POSITION_BITS = 16
VELOCITY_BITS = 12
KP_BITS = 12
KD_BITS = 12
TORQUE_BITS = 12

KP_MIN, KP_MAX = 0.0, 500.0
KD_MIN, KD_MAX = 0.0, 5.0

# Guard against floating-point error when truncating: x = decode(u) must encode back to u,
# although (x - min) / (max - min) * (2^N - 1) may come out as u - 1e-12. Only values within
# one millionth of an LSB below an integer are rounded up; everything else truncates.
_TRUNCATION_GUARD = 1e-6
# the largest raw value of each field width
_FULL = {bits: (1 << bits) - 1 for bits in {POSITION_BITS, VELOCITY_BITS, KP_BITS, KD_BITS, TORQUE_BITS}}


class Frame(NamedTuple):
    """One CAN frame: 11-bit arbitration id and its 8-byte payload."""

    arbitration_id: int
    data: bytes


# --- fixed-point mapping ---------------------------------------------------------------

def _check_finite(name: str, value) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if math.isnan(x):
        raise ValueError(f"{name} is NaN; refusing to encode it")
    if math.isinf(x):
        raise ValueError(f"{name} is infinite ({x}); refusing to encode it")
    return x


def float_to_uint(x: float, lo: float, hi: float, bits: int) -> int:
    """Map ``x`` in [lo, hi] onto an unsigned ``bits``-bit integer: clamp, then truncate.

    u = (x - lo) / (hi - lo) * (2^bits - 1), truncated toward zero (see _TRUNCATION_GUARD).
    Values outside [lo, hi] encode as the range end. NaN and infinities raise ValueError.
    """
    x = _check_finite("value", x)
    if not hi > lo:
        raise ValueError(f"empty range [{lo}, {hi}]")
    return _to_uint(x, lo, hi, (1 << bits) - 1)


def _to_uint(x: float, lo: float, hi: float, full: int) -> int:
    # float_to_uint of a checked value and range (the codec checks each field once)
    u = math.floor((min(max(x, lo), hi) - lo) / (hi - lo) * full + _TRUNCATION_GUARD)
    return min(max(u, 0), full)


def uint_to_float(u: int, lo: float, hi: float, bits: int) -> float:
    """Inverse of float_to_uint: x = lo + u / (2^bits - 1) * (hi - lo)."""
    full = (1 << bits) - 1
    if not 0 <= u <= full:
        raise ValueError(f"raw value {u} does not fit in {bits} bits")
    return lo + u / full * (hi - lo)


def resolution(lo: float, hi: float, bits: int) -> float:
    """One LSB of the mapping: (hi - lo) / (2^bits - 1)."""
    return (hi - lo) / ((1 << bits) - 1)


def _check_limits(limits: MotorLimits) -> MotorLimits:
    for name in ("pmax", "vmax", "tmax"):
        value = getattr(limits, name)
        # type() first: the numbers.Real check is slow, and this runs for every frame
        if not ((type(value) is float or isinstance(value, numbers.Real)) and math.isfinite(value) and value > 0):
            raise ValueError(f"MotorLimits.{name} must be a positive finite number, got {value!r}")
    return limits


def _payload(data: Bytes, what: str) -> bytes:
    if type(data) is bytes and len(data) == FRAME_LENGTH:
        return data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes-like, got {type(data).__name__}")
    data = bytes(data)
    if len(data) != FRAME_LENGTH:
        raise ValueError(f"{what} must be {FRAME_LENGTH} bytes, got {len(data)}")
    return data


# --- MIT command frame -----------------------------------------------------------------

@dataclass(frozen=True)
class MitCommand:
    """One MIT-mode command. SI units: rad, rad/s, N m/rad, N m s/rad, N m.

    The motor applies T = kp * (position - p) + kd * (velocity - v) + torque.
    """

    position: float
    velocity: float
    kp: float
    kd: float
    torque: float


def encode_mit(command: MitCommand, limits: MotorLimits) -> bytes:
    """8-byte MIT command payload (send it to arbitration id ``command_id(can_id)``).

    Each field is clamped to its range (position +-PMAX, velocity +-VMAX, kp [0, 500],
    kd [0, 5], torque +-TMAX) and truncated. NaN or infinite fields raise ValueError.
    """
    _check_limits(limits)
    p = _check_finite("MitCommand.position", command.position)
    v = _check_finite("MitCommand.velocity", command.velocity)
    kp = _check_finite("MitCommand.kp", command.kp)
    kd = _check_finite("MitCommand.kd", command.kd)
    t = _check_finite("MitCommand.torque", command.torque)
    # the fields back to back, big-endian: p 16 bits, then v, kp, kd, t 12 bits each
    return ((_to_uint(p, -limits.pmax, limits.pmax, _FULL[POSITION_BITS]) << 48)
            | (_to_uint(v, -limits.vmax, limits.vmax, _FULL[VELOCITY_BITS]) << 36)
            | (_to_uint(kp, KP_MIN, KP_MAX, _FULL[KP_BITS]) << 24)
            | (_to_uint(kd, KD_MIN, KD_MAX, _FULL[KD_BITS]) << 12)
            | _to_uint(t, -limits.tmax, limits.tmax, _FULL[TORQUE_BITS])).to_bytes(FRAME_LENGTH, "big")


def unpack_mit_raw(data: Bytes) -> tuple[int, int, int, int, int]:
    """Raw fixed-point fields (position, velocity, kp, kd, torque) of an MIT command payload."""
    d = _payload(data, "MIT command payload")
    p = (d[0] << 8) | d[1]
    v = (d[2] << 4) | (d[3] >> 4)
    kp = ((d[3] & 0xF) << 8) | d[4]
    kd = (d[5] << 4) | (d[6] >> 4)
    t = ((d[6] & 0xF) << 8) | d[7]
    return p, v, kp, kd, t


def decode_mit(data: Bytes, limits: MotorLimits) -> MitCommand:
    """Inverse of encode_mit (used by the virtual motor and for round-trip tests)."""
    _check_limits(limits)
    p, v, kp, kd, t = unpack_mit_raw(data)
    return MitCommand(
        position=uint_to_float(p, -limits.pmax, limits.pmax, POSITION_BITS),
        velocity=uint_to_float(v, -limits.vmax, limits.vmax, VELOCITY_BITS),
        kp=uint_to_float(kp, KP_MIN, KP_MAX, KP_BITS),
        kd=uint_to_float(kd, KD_MIN, KD_MAX, KD_BITS),
        torque=uint_to_float(t, -limits.tmax, limits.tmax, TORQUE_BITS),
    )


def decode_mit_payloads(payloads, limits: MotorLimits) -> np.ndarray:
    """``decode_mit`` of many payloads at once: (K, 8) uint8 -> (K, 5) float, columns
    position, velocity, kp, kd, torque (the same values, bit for bit). For command logs."""
    _check_limits(limits)
    d = np.asarray(payloads, dtype=np.uint8).reshape(-1, FRAME_LENGTH).astype(np.int64)
    raw = ((d[:, 0] << 8) | d[:, 1], (d[:, 2] << 4) | (d[:, 3] >> 4), ((d[:, 3] & 0xF) << 8) | d[:, 4],
           (d[:, 5] << 4) | (d[:, 6] >> 4), ((d[:, 6] & 0xF) << 8) | d[:, 7])
    ranges = ((-limits.pmax, limits.pmax, POSITION_BITS), (-limits.vmax, limits.vmax, VELOCITY_BITS),
              (KP_MIN, KP_MAX, KP_BITS), (KD_MIN, KD_MAX, KD_BITS), (-limits.tmax, limits.tmax, TORQUE_BITS))
    return np.column_stack([lo + u / ((1 << bits) - 1) * (hi - lo) for u, (lo, hi, bits) in zip(raw, ranges)])


# --- feedback frame --------------------------------------------------------------------

STATUS_DISABLED = 0x0
STATUS_ENABLED = 0x1
STATUS_OVER_VOLTAGE = 0x8
STATUS_UNDER_VOLTAGE = 0x9
STATUS_OVER_CURRENT = 0xA
STATUS_MOSFET_OVER_TEMPERATURE = 0xB
STATUS_COIL_OVER_TEMPERATURE = 0xC
STATUS_COMMUNICATION_LOST = 0xD
STATUS_OVERLOAD = 0xE

STATUS: dict[int, str] = {
    STATUS_DISABLED: "disabled",
    STATUS_ENABLED: "enabled",
    STATUS_OVER_VOLTAGE: "over-voltage",
    STATUS_UNDER_VOLTAGE: "under-voltage",
    STATUS_OVER_CURRENT: "over-current",
    STATUS_MOSFET_OVER_TEMPERATURE: "MOSFET over-temperature",
    STATUS_COIL_OVER_TEMPERATURE: "coil over-temperature",
    STATUS_COMMUNICATION_LOST: "communication lost (CAN timeout)",
    STATUS_OVERLOAD: "overload",
}
"""Status nibble (high nibble of feedback D0) -> description."""

FAULT_STATUSES: frozenset[int] = frozenset(range(0x8, 0xF))
"""Status codes 0x8..0xE: a fault took the motor out of enable; clear error, then enable."""


@dataclass(frozen=True)
class Feedback:
    """One decoded feedback frame. SI units: rad, rad/s, N m; temperatures in deg C.

    ``motor_id`` is only the low 4 bits of the motor's id: route replies by the
    arbitration id (MST_ID) instead.
    """

    motor_id: int
    status: int
    position: float
    velocity: float
    torque: float
    mosfet_temperature: int
    rotor_temperature: int

    @property
    def fault(self) -> bool:
        """True when the status is one of the fault codes 0x8..0xE."""
        return self.status in FAULT_STATUSES

    @property
    def enabled(self) -> bool:
        return self.status == STATUS_ENABLED

    @property
    def status_text(self) -> str:
        return status_text(self.status)


def status_text(status: int) -> str:
    """Description of a status code; unknown codes read "unknown status 0x..."."""
    return STATUS.get(status, f"unknown status 0x{status:X}")


def unpack_feedback_raw(data: Bytes) -> tuple[int, int, int, int, int, int, int]:
    """Raw fields of a feedback payload.

    Returns (motor_id, status, position, velocity, torque, mosfet_temperature, rotor_temperature).
    """
    d = _payload(data, "feedback payload")
    return (
        d[0] & 0xF, d[0] >> 4,
        (d[1] << 8) | d[2],
        (d[3] << 4) | (d[4] >> 4),
        ((d[4] & 0xF) << 8) | d[5],
        d[6], d[7],
    )


def decode_feedback(data: Bytes, limits: MotorLimits) -> Feedback:
    """Decode an 8-byte feedback payload with the motor's PMAX/VMAX/TMAX."""
    _check_limits(limits)
    motor_id, status, p, v, t, t_mos, t_rotor = unpack_feedback_raw(data)
    return Feedback(
        motor_id=motor_id,
        status=status,
        position=uint_to_float(p, -limits.pmax, limits.pmax, POSITION_BITS),
        velocity=uint_to_float(v, -limits.vmax, limits.vmax, VELOCITY_BITS),
        torque=uint_to_float(t, -limits.tmax, limits.tmax, TORQUE_BITS),
        mosfet_temperature=t_mos,
        rotor_temperature=t_rotor,
    )


def measured_feedback(feedback: Feedback, limits: MotorLimits) -> Feedback:
    """A decoded feedback frame with its position, velocity and torque at the centre of the
    interval their raw values stand for. A motor encodes a measurement by truncation (the
    reference encoders clamp, then truncate), so the true value lies in [decoded, decoded + one
    LSB) and the decoded one is half an LSB low on average: a DM8009 at rest reports -0.011 rad/s
    and 0.013 N m less than it has, a bias an identification reads as friction. The top code (a
    clamped value) stays at the range's end."""
    _check_limits(limits)

    def centre(x, limit, bits):
        step = resolution(-limit, limit, bits)
        return min(x + 0.5 * step, limit) if x < limit - 0.5 * step else x

    return Feedback(feedback.motor_id, feedback.status, centre(feedback.position, limits.pmax, POSITION_BITS),
                    centre(feedback.velocity, limits.vmax, VELOCITY_BITS),
                    centre(feedback.torque, limits.tmax, TORQUE_BITS),
                    feedback.mosfet_temperature, feedback.rotor_temperature)


def _as_int(value):
    # an integer (Python or NumPy), not a bool; None otherwise
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _nibble(name: str, value) -> int:
    v = _as_int(value)
    if v is None or not 0 <= v <= 0xF:
        raise ValueError(f"{name} must be an integer in 0..15, got {value!r}")
    return v


def _temperature_byte(name: str, value) -> int:
    # one unsigned byte of deg C: round, clamp to 0..255
    x = _check_finite(name, value)
    return min(max(int(round(x)), 0), 0xFF)


def encode_feedback(feedback: Feedback, limits: MotorLimits) -> bytes:
    """8-byte feedback payload (for the virtual motor). Inverse of decode_feedback.

    Position/velocity/torque are clamped and truncated like commands; temperatures are
    rounded to whole deg C and clamped to 0..255; motor_id (low 4 bits of the id) and
    status must be integers in 0..15. NaN raises ValueError.
    """
    _check_limits(limits)
    motor_id = _nibble("Feedback.motor_id", feedback.motor_id)
    status = _nibble("Feedback.status", feedback.status)
    p = _check_finite("Feedback.position", feedback.position)
    v = _check_finite("Feedback.velocity", feedback.velocity)
    t = _check_finite("Feedback.torque", feedback.torque)
    # byte 0, then p 16 bits, v and t 12 bits each, the two temperature bytes: big-endian
    return ((((status << 4) | motor_id) << 56)
            | (_to_uint(p, -limits.pmax, limits.pmax, _FULL[POSITION_BITS]) << 40)
            | (_to_uint(v, -limits.vmax, limits.vmax, _FULL[VELOCITY_BITS]) << 28)
            | (_to_uint(t, -limits.tmax, limits.tmax, _FULL[TORQUE_BITS]) << 16)
            | (_temperature_byte("Feedback.mosfet_temperature", feedback.mosfet_temperature) << 8)
            | _temperature_byte("Feedback.rotor_temperature", feedback.rotor_temperature)).to_bytes(FRAME_LENGTH, "big")


# --- special frames --------------------------------------------------------------------

CMD_ENABLE = 0xFC
CMD_DISABLE = 0xFD
CMD_SAVE_ZERO = 0xFE
CMD_CLEAR_ERROR = 0xFB


def _check_can_id(can_id) -> int:
    # 11-bit standard id; 0x7FF is the management channel and cannot be a motor id
    v = _as_int(can_id)
    if v is None or not 0 <= v < MANAGEMENT_ID:
        raise ValueError(f"motor CAN id must be an integer in 0x000..0x7FE, got {can_id!r}")
    return v


def command_id(can_id: int) -> int:
    """Arbitration id of MIT command and special frames for a motor: its CAN_ID (ESC_ID).

    MIT mode adds no offset (other modes add 0x100/0x200/0x300).
    """
    return _check_can_id(can_id)


def _special(code: int) -> bytes:
    return b"\xff" * 7 + bytes((code,))


def enable_frame() -> bytes:
    """Payload FF..FF FC: enable. Send to command_id(can_id); vendors repeat it a few times."""
    return _special(CMD_ENABLE)


def disable_frame() -> bytes:
    """Payload FF..FF FD: disable."""
    return _special(CMD_DISABLE)


def save_zero_frame() -> bytes:
    """Payload FF..FF FE: store the current position as zero (disable first)."""
    return _special(CMD_SAVE_ZERO)


def clear_error_frame() -> bytes:
    """Payload FF..FF FB: clear a fault; enable again afterwards."""
    return _special(CMD_CLEAR_ERROR)


# --- management frames on 0x7FF: refresh and registers ---------------------------------

OP_REFRESH = 0xCC
OP_READ = 0x33
OP_WRITE = 0x55
OP_SAVE = 0xAA

RID_MST_ID = 7        # feedback arbitration id (never 0)
RID_ESC_ID = 8        # command arbitration id (the motor's CAN_ID)
RID_TIMEOUT = 9       # watchdog, units of 50 us
RID_CTRL_MODE = 10    # 1 MIT, 2 POS_VEL, 3 VEL, 4 POS_FORCE
RID_PMAX = 21
RID_VMAX = 22
RID_TMAX = 23
RID_CAN_BR = 35       # 0=125k 1=200k 2=250k 3=500k 4=1M 5=2M 6=2.5M 7=3.2M 8=4M 9=5M
RID_MOTOR_POSITION = 80   # motor-side position
RID_OUTPUT_POSITION = 81  # output-shaft position

CTRL_MODE_MIT = 1
CTRL_MODE_POS_VEL = 2
CTRL_MODE_VEL = 3
CTRL_MODE_POS_FORCE = 4

CAN_BITRATES: dict[int, int] = {
    0: 125_000, 1: 200_000, 2: 250_000, 3: 500_000, 4: 1_000_000,
    5: 2_000_000, 6: 2_500_000, 7: 3_200_000, 8: 4_000_000, 9: 5_000_000,
}
"""can_br register code -> bit rate (bit/s)."""

UINT32_REGISTERS: frozenset[int] = frozenset((7, 8, 9, 10, 13, 14, 15, 16, 35, 36))
"""RIDs holding uint32; every other register holds float32. Both little-endian."""

WRITABLE_REGISTERS: frozenset[int] = frozenset((
    RID_MST_ID, RID_ESC_ID, RID_TIMEOUT, RID_CTRL_MODE, RID_PMAX, RID_VMAX, RID_TMAX, RID_CAN_BR,
))
"""Registers write_register_frame accepts without ``allow_unknown=True``: the documented ones."""


def _id_bytes(can_id: int) -> bytes:
    can_id = _check_can_id(can_id)
    return bytes((can_id & 0xFF, can_id >> 8))


def _check_rid(rid) -> int:
    v = _as_int(rid)
    if v is None or not 0 <= v <= 0xFF:
        raise ValueError(f"register id must be an integer in 0..255, got {rid!r}")
    return v


def register_is_uint32(rid: int) -> bool:
    """True for uint32 registers (RIDs 7-10, 13-16, 35-36), False for float32 ones."""
    return _check_rid(rid) in UINT32_REGISTERS


def refresh_frame(can_id: int) -> Frame:
    """State refresh without motion: (0x7FF, [ID_L, ID_H, 0xCC, 0, 0, 0, 0, 0])."""
    return Frame(MANAGEMENT_ID, _id_bytes(can_id) + bytes((OP_REFRESH, 0, 0, 0, 0, 0)))


def read_register_frame(can_id: int, rid: int) -> Frame:
    """Register read: (0x7FF, [ID_L, ID_H, 0x33, RID, 0, 0, 0, 0])."""
    return Frame(MANAGEMENT_ID, _id_bytes(can_id) + bytes((OP_READ, _check_rid(rid), 0, 0, 0, 0)))


def _encode_register_value(rid: int, value) -> bytes:
    if rid in UINT32_REGISTERS:
        as_int = _as_int(value)
        if as_int is None:
            if isinstance(value, numbers.Real) and not isinstance(value, bool) \
                    and math.isfinite(value) and float(value).is_integer():
                as_int = int(value)
            else:
                raise ValueError(f"register {rid} holds a uint32; got {value!r}")
        value = as_int
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"register {rid} holds a uint32; {value} is out of range")
        return struct.pack("<I", value)
    x = _check_finite(f"register {rid} value", value)
    try:
        return struct.pack("<f", x)
    except OverflowError:
        raise ValueError(f"register {rid} value {x} does not fit a float32") from None


def _check_register_value(rid: int, value) -> None:
    # Semantic checks of the documented registers: a bad write here can cut the motor off the bus.
    if rid == RID_MST_ID and not 0 < value < MANAGEMENT_ID:
        raise ValueError(f"MST_ID must be in 0x001..0x7FE (never 0, 0x7FF is the management id), "
                         f"got {value!r}")
    if rid == RID_ESC_ID and not 0 <= value < MANAGEMENT_ID:
        raise ValueError(f"ESC_ID must be in 0x000..0x7FE, got {value!r}")
    if rid == RID_CTRL_MODE and value not in (1, 2, 3, 4):
        raise ValueError(f"CTRL_MODE must be 1 (MIT), 2, 3 or 4, got {value!r}")
    if rid == RID_CAN_BR and value not in CAN_BITRATES:
        raise ValueError(f"can_br must be a code in 0..9, got {value!r}")
    if rid in (RID_PMAX, RID_VMAX, RID_TMAX) and not value > 0:
        raise ValueError(f"register {rid} (PMAX/VMAX/TMAX) must be positive, got {value!r}")


def write_register_frame(can_id: int, rid: int, value, *, allow_unknown: bool = False) -> Frame:
    """Register write: (0x7FF, [ID_L, ID_H, 0x55, RID, d0..d3]); RAM only until saved.

    ``value`` is packed little-endian as uint32 or float32 by the RID rule. Registers outside
    WRITABLE_REGISTERS raise ValueError unless ``allow_unknown`` is set.
    """
    rid = _check_rid(rid)
    if rid not in WRITABLE_REGISTERS and not allow_unknown:
        raise ValueError(f"refusing to write unknown register {rid}; known writable registers: "
                         f"{sorted(WRITABLE_REGISTERS)} (pass allow_unknown=True to force)")
    payload = _encode_register_value(rid, value)
    _check_register_value(rid, struct.unpack("<I" if rid in UINT32_REGISTERS else "<f", payload)[0])
    return Frame(MANAGEMENT_ID, _id_bytes(can_id) + bytes((OP_WRITE, rid)) + payload)


def save_registers_frame(can_id: int) -> Frame:
    """Save registers to flash: (0x7FF, [ID_L, ID_H, 0xAA, 0x01, 0, 0, 0, 0]).

    Only while disabled; the flash endures about 10,000 saves.
    """
    return Frame(MANAGEMENT_ID, _id_bytes(can_id) + bytes((OP_SAVE, 0x01, 0, 0, 0, 0)))


def decode_register_reply(data: Bytes) -> tuple[int, int, int, Union[int, float]]:
    """Decode a register reply [ID_L, ID_H, 0x33|0x55, RID, d0..d3] -> (can_id, op, rid, value).

    ``value`` is an int for uint32 registers and a float for float32 ones. Replies arrive on
    MST_ID like feedback frames; the caller must know it awaits a reply. Any op other than
    0x33/0x55 raises ValueError.
    """
    d = _payload(data, "register reply")
    can_id = d[0] | (d[1] << 8)
    op, rid = d[2], d[3]
    if op not in (OP_READ, OP_WRITE):
        raise ValueError(f"not a register reply: op byte 0x{op:02X} is neither "
                         f"0x33 (read) nor 0x55 (write)")
    if rid in UINT32_REGISTERS:
        value: Union[int, float] = struct.unpack("<I", d[4:8])[0]
    else:
        value = struct.unpack("<f", d[4:8])[0]
    return can_id, op, rid, value


# --- the motor's side of the management channel (used by the virtual motor) -----------

class ManagementRequest(NamedTuple):
    """A decoded 0x7FF frame [ID_L, ID_H, op, RID, d0..d3] as a motor sees it.

    ``can_id`` names the motor addressed (its ESC_ID); ``op`` is OP_REFRESH, OP_READ, OP_WRITE
    or OP_SAVE; ``rid`` is byte 3 (the register for read/write, 0x01 for save, 0 for refresh);
    ``data`` the raw 4 bytes d0..d3 (decode a written value with ``register_value``).
    """

    can_id: int
    op: int
    rid: int
    data: bytes


MANAGEMENT_OPS: frozenset[int] = frozenset((OP_REFRESH, OP_READ, OP_WRITE, OP_SAVE))


def decode_management_frame(data: Bytes) -> ManagementRequest:
    """Split an 8-byte 0x7FF payload into (can_id, op, rid, d0..d3).

    Raises ValueError for a wrong length or an op byte outside MANAGEMENT_OPS.
    """
    d = _payload(data, "management frame")
    if d[2] not in MANAGEMENT_OPS:
        raise ValueError(f"unknown management op byte 0x{d[2]:02X}; known: "
                         f"{', '.join(f'0x{op:02X}' for op in sorted(MANAGEMENT_OPS))}")
    return ManagementRequest(d[0] | (d[1] << 8), d[2], d[3], d[4:8])


def register_value(rid: int, data: Bytes) -> Union[int, float]:
    """Value of register ``rid`` from its 4 little-endian data bytes: int (uint32) or float (float32)."""
    raw = bytes(data)
    if len(raw) != 4:
        raise ValueError(f"a register value is 4 bytes, got {len(raw)}")
    return struct.unpack("<I" if register_is_uint32(rid) else "<f", raw)[0]


def encode_register_reply(can_id: int, op: int, rid: int, value) -> bytes:
    """8-byte register reply [ID_L, ID_H, op, RID, d0..d3] (the motor's side; send it on MST_ID).

    Inverse of decode_register_reply. ``op`` is OP_READ or OP_WRITE; ``value`` is packed as
    uint32 or float32 by the RID rule (ValueError if it does not fit, or is NaN/infinite).
    """
    if op not in (OP_READ, OP_WRITE):
        raise ValueError(f"a register reply carries op 0x33 (read) or 0x55 (write), got {op!r}")
    rid = _check_rid(rid)
    return _id_bytes(can_id) + bytes((op, rid)) + _encode_register_value(rid, value)
