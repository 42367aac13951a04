"""Damiao MIT-mode protocol codec: byte-exact frames, round trips, clamping, errors.

Expected bytes are built by hand from the layout in the reference
(shared/reference/damiao-mit-protocol.md), not from the codec under test.
"""
import dataclasses
import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysid_core.damiao import protocol as dm
from sysid_core.damiao.protocol import (
    FAULT_STATUSES, MOTOR_LIMITS, STATUS, Feedback, MitCommand, MotorLimits,
    clear_error_frame, command_id, decode_feedback, decode_mit, decode_register_reply,
    disable_frame, enable_frame, encode_feedback, encode_mit, motor_limits,
    read_register_frame, refresh_frame, save_registers_frame, save_zero_frame,
    write_register_frame,
)

DM4310 = motor_limits("DM4310")    # 12.5 rad, 30 rad/s, 10 N m
DM8009 = motor_limits("DM8009")    # 12.5 rad, 45 rad/s, 54 N m


def lsb(lo, hi, bits):
    return (hi - lo) / ((1 << bits) - 1)


def mit_bytes(p, v, kp, kd, t):
    """MIT payload from raw fields, straight from the reference table."""
    return bytes((p >> 8, p & 0xFF, v >> 4, (v & 0xF) << 4 | kp >> 8, kp & 0xFF,
                  kd >> 4, (kd & 0xF) << 4 | t >> 8, t & 0xFF))


def feedback_bytes(motor_id, status, p, v, t, t_mos, t_rotor):
    return bytes((status << 4 | motor_id, p >> 8, p & 0xFF, v >> 4, (v & 0xF) << 4 | t >> 8,
                  t & 0xFF, t_mos, t_rotor))


def raw_value(u, lo, hi, bits):
    return lo + u / ((1 << bits) - 1) * (hi - lo)


# --- MIT command: byte-exact vectors ---------------------------------------------------

def test_mit_bytes_helper_matches_reference_table():
    # distinct nibbles so every field lands visibly in its bytes
    assert mit_bytes(0x1234, 0xABC, 0xDEF, 0x123, 0x456) == bytes.fromhex("1234ABCDEF123456")


def test_encode_mit_range_ends():
    cmd = MitCommand(position=12.5, velocity=0.0, kp=500.0, kd=0.0, torque=10.0)
    # p 0xFFFF, v 0x7FF (2047.5 truncated), kp 0xFFF, kd 0x000, t 0xFFF
    assert encode_mit(cmd, DM4310) == bytes.fromhex("FFFF7FFFFF000FFF")
    cmd = MitCommand(position=-12.5, velocity=-30.0, kp=0.0, kd=5.0, torque=-10.0)
    assert encode_mit(cmd, DM4310) == bytes.fromhex("00000000 00FFF000".replace(" ", ""))


def test_encode_mit_hand_built_raw_fields():
    raws = (0x1234, 0xABC, 0xDEF, 0x123, 0x456)
    cmd = MitCommand(
        position=raw_value(raws[0], -12.5, 12.5, 16), velocity=raw_value(raws[1], -30, 30, 12),
        kp=raw_value(raws[2], 0, 500, 12), kd=raw_value(raws[3], 0, 5, 12),
        torque=raw_value(raws[4], -10, 10, 12))
    data = encode_mit(cmd, DM4310)
    assert data == bytes.fromhex("1234ABCDEF123456")
    assert dm.unpack_mit_raw(data) == raws


def test_encode_mit_example_vector():
    # p raw 0x8327, v 0x7FF, kp 0x7FF (250 -> 2047.5 truncated), kd 0x333, t 0x7FF
    cmd = MitCommand(position=raw_value(0x8327, -12.5, 12.5, 16), velocity=0.0, kp=250.0,
                     kd=raw_value(0x333, 0, 5, 12), torque=0.0)
    assert encode_mit(cmd, DM4310) == bytes((0x83, 0x27, 0x7F, 0xF7, 0xFF, 0x33, 0x37, 0xFF))


def test_decode_mit_hand_built():
    cmd = decode_mit(bytes.fromhex("1234ABCDEF123456"), DM8009)
    assert cmd.position == pytest.approx(raw_value(0x1234, -12.5, 12.5, 16), abs=1e-12)
    assert cmd.velocity == pytest.approx(raw_value(0xABC, -45, 45, 12), abs=1e-12)
    assert cmd.kp == pytest.approx(0xDEF / 4095 * 500, abs=1e-12)
    assert cmd.kd == pytest.approx(0x123 / 4095 * 5, abs=1e-12)
    assert cmd.torque == pytest.approx(raw_value(0x456, -54, 54, 12), abs=1e-12)


def test_decode_mit_payloads_is_decode_mit_of_each():
    import numpy as np
    payloads = np.random.default_rng(0).integers(0, 256, (500, 8), dtype=np.uint8)
    payloads[0] = list(bytes.fromhex("1234ABCDEF123456"))
    fields = ("position", "velocity", "kp", "kd", "torque")
    expected = [[getattr(decode_mit(bytes(row), DM8009), f) for f in fields] for row in payloads]
    assert dm.decode_mit_payloads(payloads, DM8009).tolist() == expected      # bit for bit


def test_truncation_not_rounding():
    step = lsb(-12.5, 12.5, 16)
    cmd = MitCommand(position=-12.5 + 100.9 * step, velocity=0, kp=0, kd=0, torque=0)
    assert dm.unpack_mit_raw(encode_mit(cmd, DM4310))[0] == 100
    step = lsb(0, 500, 12)
    cmd = MitCommand(position=0, velocity=0, kp=7.99 * step, kd=0, torque=0)
    assert dm.unpack_mit_raw(encode_mit(cmd, DM4310))[2] == 7


def test_commanded_zero_decodes_slightly_below_zero():
    data = encode_mit(MitCommand(0.0, 0.0, 0.0, 0.0, 0.0), DM4310)
    p, v, kp, kd, t = dm.unpack_mit_raw(data)
    assert (p, v, t) == (0x7FFF, 0x7FF, 0x7FF) and (kp, kd) == (0, 0)
    cmd = decode_mit(data, DM4310)
    assert -lsb(-12.5, 12.5, 16) < cmd.position < 0
    assert -lsb(-30, 30, 12) < cmd.velocity < 0
    assert -lsb(-10, 10, 12) < cmd.torque < 0
    assert cmd.kp == 0.0 and cmd.kd == 0.0


@pytest.mark.parametrize("field, value, index, raw", [
    ("position", 100.0, 0, 0xFFFF), ("position", -13.0, 0, 0x0000),
    ("velocity", 31.0, 1, 0xFFF), ("velocity", -1e9, 1, 0x000),
    ("kp", 1000.0, 2, 0xFFF), ("kp", -1.0, 2, 0x000),
    ("kd", 5.5, 3, 0xFFF), ("kd", -0.1, 3, 0x000),
    ("torque", 10.01, 4, 0xFFF), ("torque", -500.0, 4, 0x000),
])
def test_clamping_to_range_ends(field, value, index, raw):
    cmd = dataclasses.replace(MitCommand(0.0, 0.0, 0.0, 0.0, 0.0), **{field: value})
    assert dm.unpack_mit_raw(encode_mit(cmd, DM4310))[index] == raw
    # beyond the range encodes exactly like the range end
    end = {"position": 12.5, "velocity": 30.0, "kp": 500.0, "kd": 5.0, "torque": 10.0}[field]
    end = end if raw else (0.0 if field in ("kp", "kd") else -end)
    assert encode_mit(cmd, DM4310) == encode_mit(dataclasses.replace(cmd, **{field: end}), DM4310)


@pytest.mark.parametrize("field", ["position", "velocity", "kp", "kd", "torque"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_command_raises(field, bad):
    cmd = dataclasses.replace(MitCommand(0.0, 0.0, 10.0, 1.0, 0.0), **{field: bad})
    with pytest.raises(ValueError, match=field):
        encode_mit(cmd, DM4310)


def test_numpy_scalars_encode_like_floats():
    np = pytest.importorskip("numpy")
    a = MitCommand(np.float32(0.3), np.float64(-1.0), np.float64(20), np.float32(0.5), np.float64(2))
    b = MitCommand(float(np.float32(0.3)), -1.0, 20.0, float(np.float32(0.5)), 2.0)
    assert encode_mit(a, DM4310) == encode_mit(b, DM4310)


# --- feedback --------------------------------------------------------------------------

def test_worked_example():
    # reply to enable on ID 0x011, published in a bug report
    fb = decode_feedback(bytes.fromhex("1183277FF7FF0000"), DM4310)
    assert fb.status == 1 and fb.motor_id == 1
    assert fb.status_text == "enabled" and fb.enabled and not fb.fault
    assert fb.position == pytest.approx(0x8327 / 65535 * 25 - 12.5, abs=1e-12)
    assert abs(fb.position - 0.31) < 0.005                      # ~ +0.31 rad at PMAX 12.5
    assert abs(fb.velocity) <= lsb(-30, 30, 12)
    assert abs(fb.torque) <= lsb(-10, 10, 12)
    assert fb.mosfet_temperature == 0 and fb.rotor_temperature == 0
    assert dm.unpack_feedback_raw(bytes.fromhex("1183277FF7FF0000")) == (1, 1, 0x8327, 0x7FF, 0x7FF, 0, 0)


def test_feedback_hand_built_fields():
    data = feedback_bytes(0x5, 0xA, 0x1234, 0xABC, 0xDEF, 45, 60)
    assert data == bytes.fromhex("A5 12 34 AB CD EF 2D 3C".replace(" ", ""))
    fb = decode_feedback(data, DM8009)
    assert (fb.motor_id, fb.status) == (5, 0xA)
    assert fb.position == pytest.approx(raw_value(0x1234, -12.5, 12.5, 16), abs=1e-12)
    assert fb.velocity == pytest.approx(raw_value(0xABC, -45, 45, 12), abs=1e-12)
    assert fb.torque == pytest.approx(raw_value(0xDEF, -54, 54, 12), abs=1e-12)
    assert (fb.mosfet_temperature, fb.rotor_temperature) == (45, 60)
    assert fb.fault and fb.status_text == "over-current"
    assert encode_feedback(fb, DM8009) == data


def test_encode_feedback_example():
    fb = Feedback(motor_id=1, status=1, position=raw_value(0x8327, -12.5, 12.5, 16),
                  velocity=0.0, torque=0.0, mosfet_temperature=0, rotor_temperature=0)
    assert encode_feedback(fb, DM4310) == bytes.fromhex("1183277FF7FF0000")


def test_encode_feedback_clamps_and_rounds():
    fb = Feedback(motor_id=15, status=0, position=-99.0, velocity=99.0, torque=-99.0,
                  mosfet_temperature=36.6, rotor_temperature=300)
    assert encode_feedback(fb, DM4310) == feedback_bytes(15, 0, 0x0000, 0xFFF, 0x000, 37, 255)
    fb = dataclasses.replace(fb, mosfet_temperature=-5)
    assert encode_feedback(fb, DM4310)[6] == 0


@pytest.mark.parametrize("change", [
    {"position": math.nan}, {"velocity": math.nan}, {"torque": math.nan},
    {"mosfet_temperature": math.nan}, {"rotor_temperature": math.nan},
    {"motor_id": 16}, {"motor_id": -1}, {"status": 0x10}, {"status": 1.0}, {"motor_id": True},
])
def test_encode_feedback_rejects_bad_fields(change):
    fb = Feedback(1, 1, 0.0, 0.0, 0.0, 30, 30)
    with pytest.raises(ValueError):
        encode_feedback(dataclasses.replace(fb, **change), DM4310)


EXPECTED_STATUS = {
    0x0: ("disabled", False), 0x1: ("enabled", False), 0x8: ("over-voltage", True),
    0x9: ("under-voltage", True), 0xA: ("over-current", True),
    0xB: ("MOSFET over-temperature", True), 0xC: ("coil over-temperature", True),
    0xD: ("communication lost (CAN timeout)", True), 0xE: ("overload", True),
}


@pytest.mark.parametrize("code", range(16))
def test_every_status_code(code):
    fb = decode_feedback(feedback_bytes(3, code, 0x7FFF, 0x7FF, 0x7FF, 25, 26), DM4310)
    assert fb.status == code and fb.motor_id == 3
    if code in EXPECTED_STATUS:
        text, fault = EXPECTED_STATUS[code]
        assert STATUS[code] == text and fb.status_text == text
        assert fb.fault is fault and (code in FAULT_STATUSES) is fault
    else:
        assert code not in STATUS and code not in FAULT_STATUSES
        assert not fb.fault and fb.status_text == f"unknown status 0x{code:X}"
    assert fb.enabled is (code == 1)


def test_status_tables():
    assert set(STATUS) == set(EXPECTED_STATUS)
    assert FAULT_STATUSES == frozenset({0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE})


# --- wrong lengths, wrong types, bad limits --------------------------------------------

DECODERS = [
    lambda d: decode_mit(d, DM4310), lambda d: decode_feedback(d, DM4310), decode_register_reply,
    dm.unpack_mit_raw, dm.unpack_feedback_raw,
]


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("length", [0, 7, 9, 64])
def test_wrong_length_raises(decode, length):
    with pytest.raises(ValueError, match="8 bytes"):
        decode(bytes([0x33] * length))


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("data", [8, "11 83 27 7F F7 FF 00 00", None])
def test_non_bytes_raises(decode, data):
    # bytes(8) would silently be eight zero bytes: ints are refused
    with pytest.raises(TypeError):
        decode(data)


def test_bytearray_and_memoryview_accepted():
    data = bytes.fromhex("1183277FF7FF0000")
    ref = decode_feedback(data, DM4310)
    assert decode_feedback(bytearray(data), DM4310) == ref
    assert decode_feedback(memoryview(data), DM4310) == ref


@pytest.mark.parametrize("limits", [MotorLimits(0.0, 30, 10), MotorLimits(12.5, -1, 10),
                                    MotorLimits(12.5, 30, math.nan), MotorLimits(12.5, 30, math.inf)])
def test_bad_limits_raise(limits):
    with pytest.raises(ValueError, match="MotorLimits"):
        encode_mit(MitCommand(0, 0, 0, 0, 0), limits)
    with pytest.raises(ValueError, match="MotorLimits"):
        decode_feedback(bytes(8), limits)


def test_dataclasses_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MitCommand(0, 0, 0, 0, 0).kp = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        Feedback(1, 1, 0, 0, 0, 0, 0).status = 0


# --- round trips -----------------------------------------------------------------------

LIMITS = st.sampled_from(sorted(MOTOR_LIMITS.values(), key=repr))


def _finite(lo, hi):
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(limits=LIMITS, data=st.data())
def test_mit_round_trip_within_one_lsb(limits, data):
    ranges = {"position": (-limits.pmax, limits.pmax, 16), "velocity": (-limits.vmax, limits.vmax, 12),
              "kp": (0.0, 500.0, 12), "kd": (0.0, 5.0, 12), "torque": (-limits.tmax, limits.tmax, 12)}
    values = {name: data.draw(_finite(lo, hi), label=name) for name, (lo, hi, _) in ranges.items()}
    decoded = decode_mit(encode_mit(MitCommand(**values), limits), limits)
    for name, (lo, hi, bits) in ranges.items():
        x, y = values[name], getattr(decoded, name)
        step = lsb(lo, hi, bits)
        # truncation: decoded lies at most one LSB below the command, never above it
        assert x - step - 1e-9 <= y <= x + 1e-6 * step + 1e-12, (name, x, y)


@settings(max_examples=300, deadline=None)
@given(limits=LIMITS, position=_finite(-1e6, 1e6), velocity=_finite(-1e6, 1e6),
       torque=_finite(-1e6, 1e6))
def test_feedback_round_trip_clamps_then_within_one_lsb(limits, position, velocity, torque):
    fb = Feedback(7, 1, position, velocity, torque, 40, 41)
    out = decode_feedback(encode_feedback(fb, limits), limits)
    for x, y, m, bits in ((position, out.position, limits.pmax, 16),
                          (velocity, out.velocity, limits.vmax, 12),
                          (torque, out.torque, limits.tmax, 12)):
        x = min(max(x, -m), m)
        assert abs(y - x) <= lsb(-m, m, bits) + 1e-9
    assert (out.motor_id, out.status, out.mosfet_temperature, out.rotor_temperature) == (7, 1, 40, 41)


def test_measured_feedback_is_unbiased_where_the_decoded_one_is_half_an_lsb_low():
    """True values spread over the range, encoded as a motor does (clamp, truncate): decoded they
    are half an LSB low on average, measured_feedback is within half an LSB of each and unbiased;
    the top code (a clamped value) stays at the range's end."""
    import numpy as np
    rng = np.random.default_rng(3)
    for limits in (DM4310, DM8009):
        truth = rng.uniform(-0.99, 0.99, (2000, 3)) * [limits.pmax, limits.vmax, limits.tmax]
        steps = [lsb(-m, m, bits) for m, bits in ((limits.pmax, 16), (limits.vmax, 12), (limits.tmax, 12))]
        decoded, measured = [], []
        for p, v, t in truth:
            fb = decode_feedback(encode_feedback(Feedback(1, 1, p, v, t, 30, 30), limits), limits)
            decoded.append((fb.position, fb.velocity, fb.torque))
            out = dm.measured_feedback(fb, limits)
            measured.append((out.position, out.velocity, out.torque))
        low, error = (np.array(decoded) - truth) / steps, (np.array(measured) - truth) / steps
        assert np.all(np.abs(error) <= 0.5 + 1e-6)
        assert np.all(np.abs(low.mean(axis=0) + 0.5) < 0.05) and np.all(np.abs(error.mean(axis=0)) < 0.05)
        top = dm.measured_feedback(decode_feedback(encode_feedback(Feedback(1, 1, 99.0, 99.0, 99.0, 30, 30), limits),
                                                   limits), limits)
        assert (top.position, top.velocity, top.torque) == (limits.pmax, limits.vmax, limits.tmax)


@settings(max_examples=300, deadline=None)
@given(limits=LIMITS, data=st.binary(min_size=8, max_size=8))
def test_bytes_round_trip_is_exact(limits, data):
    # decode -> encode reproduces every payload: what the virtual motor relies on
    assert encode_mit(decode_mit(data, limits), limits) == data
    assert encode_feedback(decode_feedback(data, limits), limits) == data


@pytest.mark.parametrize("name", sorted(MOTOR_LIMITS))
def test_every_code_survives_decode_encode(name):
    limits = MOTOR_LIMITS[name]
    for lo, hi, bits in ((-limits.pmax, limits.pmax, 16), (-limits.vmax, limits.vmax, 12),
                         (-limits.tmax, limits.tmax, 12), (0.0, 500.0, 12), (0.0, 5.0, 12)):
        bad = [u for u in range(1 << bits)
               if dm.float_to_uint(dm.uint_to_float(u, lo, hi, bits), lo, hi, bits) != u]
        assert not bad, (lo, hi, bits, bad[:5])


# --- special frames --------------------------------------------------------------------

@pytest.mark.parametrize("make, last", [(enable_frame, 0xFC), (disable_frame, 0xFD),
                                        (save_zero_frame, 0xFE), (clear_error_frame, 0xFB)])
def test_special_frames(make, last):
    assert make() == bytes([0xFF] * 7 + [last])
    assert isinstance(make(), bytes) and len(make()) == 8


def test_special_frame_constants():
    assert enable_frame() == bytes.fromhex("FFFFFFFFFFFFFFFC")
    assert disable_frame() == bytes.fromhex("FFFFFFFFFFFFFFFD")
    assert save_zero_frame() == bytes.fromhex("FFFFFFFFFFFFFFFE")
    assert clear_error_frame() == bytes.fromhex("FFFFFFFFFFFFFFFB")


@pytest.mark.parametrize("can_id", [0x000, 0x001, 0x008, 0x011, 0x123, 0x7FE])
def test_command_id_is_can_id(can_id):
    assert command_id(can_id) == can_id


@pytest.mark.parametrize("can_id", [-1, 0x7FF, 0x800, 1.0, True, "1", None])
def test_bad_can_id_raises(can_id):
    with pytest.raises(ValueError, match="CAN id"):
        command_id(can_id)
    with pytest.raises(ValueError, match="CAN id"):
        refresh_frame(can_id)


# --- management frames on 0x7FF -------------------------------------------------------

def test_refresh_frame():
    assert refresh_frame(0x01) == (0x7FF, bytes.fromhex("0100CC0000000000"))
    frame = refresh_frame(0x123)
    assert frame.arbitration_id == 0x7FF and frame.data == bytes.fromhex("2301CC0000000000")
    arbitration_id, data = refresh_frame(0x7FE)
    assert (arbitration_id, data) == (0x7FF, bytes.fromhex("FE07CC0000000000"))


def test_read_register_frame():
    assert read_register_frame(0x01, dm.RID_PMAX) == (0x7FF, bytes.fromhex("0100331500000000"))
    assert read_register_frame(0x123, dm.RID_MST_ID) == (0x7FF, bytes.fromhex("2301330700000000"))
    assert read_register_frame(0x02, 80) == (0x7FF, bytes.fromhex("0200335000000000"))
    assert read_register_frame(0x02, 200).data[3] == 200     # reads of any RID are harmless


def test_write_register_frame_uint32():
    assert write_register_frame(0x01, dm.RID_CTRL_MODE, dm.CTRL_MODE_MIT) == \
        (0x7FF, bytes.fromhex("0100550A01000000"))
    assert write_register_frame(0x123, dm.RID_MST_ID, 0x133) == \
        (0x7FF, bytes((0x23, 0x01, 0x55, 0x07)) + struct.pack("<I", 0x133))
    assert write_register_frame(0x01, dm.RID_TIMEOUT, 0x01020304).data == \
        bytes.fromhex("0100550904030201")
    assert write_register_frame(0x01, dm.RID_CAN_BR, 4.0).data == bytes.fromhex("0100552304000000")


def test_write_register_frame_float32():
    assert write_register_frame(0x01, dm.RID_PMAX, 12.5) == \
        (0x7FF, bytes((0x01, 0x00, 0x55, 0x15)) + struct.pack("<f", 12.5))
    assert write_register_frame(0x01, dm.RID_PMAX, 12.5).data == bytes.fromhex("0100551500004841")
    assert write_register_frame(0x02, dm.RID_TMAX, 54).data[4:] == struct.pack("<f", 54.0)


def test_save_registers_frame():
    assert save_registers_frame(0x01) == (0x7FF, bytes.fromhex("0100AA0100000000"))
    assert save_registers_frame(0x123) == (0x7FF, bytes.fromhex("2301AA0100000000"))


@pytest.mark.parametrize("rid, value", [
    (dm.RID_PMAX, math.nan), (dm.RID_VMAX, math.inf), (dm.RID_TMAX, -1.0), (dm.RID_VMAX, 0.0),
    (dm.RID_PMAX, 1e39),                                   # overflows float32
    (dm.RID_CTRL_MODE, 0), (dm.RID_CTRL_MODE, 5), (dm.RID_CTRL_MODE, 1.5),
    (dm.RID_CAN_BR, 10), (dm.RID_MST_ID, 0), (dm.RID_MST_ID, 0x7FF), (dm.RID_ESC_ID, 0x7FF),
    (dm.RID_TIMEOUT, -1), (dm.RID_TIMEOUT, 1 << 32), (dm.RID_TIMEOUT, "10"), (dm.RID_TIMEOUT, True),
])
def test_write_register_rejects_bad_values(rid, value):
    with pytest.raises(ValueError):
        write_register_frame(0x01, rid, value)


@pytest.mark.parametrize("rid", [0, 13, 24, 36, 80, 81, 255])
def test_write_unknown_register_raises_unless_allowed(rid):
    with pytest.raises(ValueError, match="unknown register"):
        write_register_frame(0x01, rid, 1)
    frame = write_register_frame(0x01, rid, 1, allow_unknown=True)
    packed = struct.pack("<I", 1) if rid in (13, 36) else struct.pack("<f", 1.0)
    assert frame.data == bytes((0x01, 0x00, 0x55, rid)) + packed


@pytest.mark.parametrize("rid", [-1, 256, 1.0, None])
def test_bad_rid_raises(rid):
    with pytest.raises(ValueError, match="register id"):
        read_register_frame(0x01, rid)
    with pytest.raises(ValueError, match="register id"):
        write_register_frame(0x01, rid, 1, allow_unknown=True)


def test_register_type_rule():
    uint32 = {7, 8, 9, 10, 13, 14, 15, 16, 35, 36}
    for rid in range(256):
        assert dm.register_is_uint32(rid) is (rid in uint32)


def test_decode_register_reply_uint32():
    data = bytes((0x01, 0x00, 0x33, 0x07)) + struct.pack("<I", 0x11)
    can_id, op, rid, value = decode_register_reply(data)
    assert (can_id, op, rid, value) == (0x01, 0x33, dm.RID_MST_ID, 0x11)
    assert isinstance(value, int)
    data = bytes((0x23, 0x01, 0x55, 0x0A)) + struct.pack("<I", 1)
    assert decode_register_reply(data) == (0x123, 0x55, dm.RID_CTRL_MODE, 1)
    big = bytes((0x02, 0x00, 0x33, 0x09)) + struct.pack("<I", 0xDEADBEEF)
    assert decode_register_reply(big)[3] == 0xDEADBEEF


def test_decode_register_reply_float32():
    data = bytes((0x01, 0x00, 0x33, 0x15)) + struct.pack("<f", 12.5)
    can_id, op, rid, value = decode_register_reply(data)
    assert (can_id, op, rid, value) == (0x01, 0x33, dm.RID_PMAX, 12.5)
    assert isinstance(value, float)
    data = bytes((0x01, 0x00, 0x33, 0x16)) + struct.pack("<f", 30.0)
    assert decode_register_reply(data)[3] == 30.0
    data = bytes((0x01, 0x00, 0x33, 0x51)) + struct.pack("<f", -3.25)   # RID 81 output position
    assert decode_register_reply(data)[3] == -3.25


def test_register_write_then_reply_round_trip():
    for rid, value in ((dm.RID_TMAX, 54.0), (dm.RID_ESC_ID, 0x08), (dm.RID_CAN_BR, 9)):
        frame = write_register_frame(0x08, rid, value)
        assert decode_register_reply(frame.data) == (0x08, dm.OP_WRITE, rid, value)


@pytest.mark.parametrize("op", [0xCC, 0xAA, 0x00, 0xFF])
def test_decode_register_reply_rejects_other_ops(op):
    with pytest.raises(ValueError, match="register reply"):
        decode_register_reply(bytes((0x01, 0x00, op, 0x07, 0, 0, 0, 0)))
