"""DamiaoArm: layout validation, the joint <-> motor mapping and command clamping."""
import numpy as np
import pytest

from sysid_core.damiao.arm import DamiaoArm, registers_to_limits
from sysid_core.damiao.protocol import MotorLimits, decode_mit, encode_mit, motor_limits, resolution, unpack_mit_raw

LAYOUT = dict(joint_names=["j1", "j2", "j3"], motor_types=["DM8009", "DM4340", "DM4310"],
              can_ids=[1, 2, 3], master_ids=[0x11, 0x12, 0x13], kp=[100.0, 50.0, 10.0], kd=[2.0, 1.0, 0.5],
              lower=[-1.5, -0.2, -1.6], upper=[3.0, 2.8, 1.6])


def arm(**changes):
    return DamiaoArm.build(**{**LAYOUT, **changes})


def test_defaults_come_from_the_motor_table():
    a = arm()
    assert a.limits == tuple(motor_limits(t) for t in LAYOUT["motor_types"])
    np.testing.assert_array_equal(a.directions, [1, 1, 1])
    np.testing.assert_array_equal(a.position_offsets, [0, 0, 0])


@pytest.mark.parametrize("changes, expected", [
    (dict(kp=[1.0, 2.0]), "3 joint_names ['j1', 'j2', 'j3'] but kp has 2"),
    (dict(motor_types=["DM8009", "DM9999", "DM4310"]), "unknown Damiao motor type 'DM9999'"),
    (dict(can_ids=[1, 1, 3]), "can_ids has duplicates"),
    (dict(master_ids=[0x11, 0, 0x13]), "master_ids ['0x0'] are outside"),
    (dict(master_ids=[0x11, 3, 0x13]), "ids ['0x3'] are both a command id and a feedback"),
    (dict(kp=[600.0, 50.0, 10.0]), "j1: kp 600 and kd 2 must lie in [0, 500]"),
    (dict(kd=[0.0, 1.0, 0.5]), "j1: kp 100 with kd 0"),
    (dict(lower=[3.0, -0.2, -1.6]), "j1: lower limit 3 is not below upper limit 3"),
    (dict(directions=[1, 2, 1]), "directions must be +1 or -1"),
    (dict(position_offsets=[0.0, 13.0, 0.0]), "j2: joint limits [-0.2, 2.8] map to motor positions"),
    (dict(joint_names=["j1", "j1", "j3"]), "joint_names has duplicates: ['j1']"),
    (dict(lower=[-1.5, float("nan"), -1.6]), "lower must be finite"),
])
def test_bad_layouts_name_the_problem(changes, expected):
    with pytest.raises(ValueError, match="invalid Damiao arm configuration|joint_names") as err:
        arm(**changes)
    assert expected in str(err.value)


def test_every_problem_is_listed_at_once():
    with pytest.raises(ValueError) as err:
        arm(can_ids=[1, 1, 3], kd=[0.0, 1.0, 0.5])
    assert "duplicates" in str(err.value) and "kd 0" in str(err.value)


def test_register_limits_must_cover_the_joint_range():
    with pytest.raises(ValueError, match="outside the motor's \\+-PMAX 2"):
        arm().with_limits([MotorLimits(2.0, 45.0, 54.0), motor_limits("DM4340"), motor_limits("DM4310")])
    with pytest.raises(ValueError, match="not positive finite"):
        registers_to_limits(12.5, float("nan"), 10.0)


def test_mapping_with_direction_and_offset_round_trips_through_the_frame():
    a = arm(directions=[1, -1, 1], position_offsets=[0.0, 0.3, -0.1])
    q_des, dq_des, tau = np.array([0.5, 1.0, 0.2]), np.array([0.1, -0.4, 0.3]), np.array([5.0, -3.0, 0.5])
    commands, clamped = a.commands(q_des, dq_des, tau, np.ones(3, dtype=bool))
    assert not clamped.any()
    # motor side: p = d (q - offset), v = d dq, t = d tau
    np.testing.assert_allclose([c.position for c in commands], [0.5, -0.7, 0.3])
    np.testing.assert_allclose([c.velocity for c in commands], [0.1, 0.4, 0.3])
    np.testing.assert_allclose([c.torque for c in commands], [5.0, 3.0, 0.5])
    # through the bytes and back to the joint side, within one quantum of each field
    decoded = [decode_mit(encode_mit(c, lim), lim) for c, lim in zip(commands, a.limits)]
    q, dq, t = a.to_joint([d.position for d in decoded], [d.velocity for d in decoded], [d.torque for d in decoded])
    for got, want, bits, field in ((q, q_des, 16, "pmax"), (dq, dq_des, 12, "vmax"), (t, tau, 12, "tmax")):
        quantum = np.array([resolution(-getattr(lim, field), getattr(lim, field), bits) for lim in a.limits])
        assert np.all(np.abs(got - want) <= quantum)


def test_commands_are_clamped_to_joint_and_motor_limits():
    a = arm()
    commands, clamped = a.commands(np.array([5.0, 0.0, -2.0]), np.array([0.0, 50.0, 0.0]),
                                   np.array([0.0, 0.0, -30.0]), np.ones(3, dtype=bool))
    assert [c.position for c in commands] == [3.0, 0.0, -1.6]      # joint limits
    assert commands[1].velocity == 10.0                            # DM4340 VMAX
    assert commands[2].torque == -10.0                             # DM4310 TMAX
    np.testing.assert_array_equal(clamped, [True, True, True])


def test_joints_not_tracked_get_damping_only():
    a = arm()
    commands, clamped = a.commands(np.array([np.nan, 1.0, 0.2]), np.array([np.nan, 0.5, 0.1]),
                                   np.array([np.nan, 4.0, 0.3]), np.array([False, False, True]))
    for c, kd in zip(commands[:2], LAYOUT["kd"]):
        assert (c.kp, c.velocity, c.torque, c.kd) == (0.0, 0.0, 0.0, kd)
    assert (commands[2].kp, commands[2].kd) == (10.0, 0.5)
    assert not clamped.any()


def test_a_joint_without_position_target_gets_kp_zero_and_its_measured_position():
    a = arm(directions=[1, -1, 1], position_offsets=[0.0, 0.3, 0.0])
    nan = float("nan")
    q_measured = np.array([0.4, 1.0, 5.0])           # joint 3 measured beyond its upper limit 1.6
    commands, clamped = a.commands(np.array([nan, 1.2, nan]), np.array([0.0, 0.0, 50.0]),
                                   np.array([2.0, 1.0, -30.0]), np.ones(3, dtype=bool), q_measured)
    frames = [encode_mit(c, lim) for c, lim in zip(commands, a.limits)]
    raw_kp = [unpack_mit_raw(f)[2] for f in frames]
    assert raw_kp[0] == 0 and raw_kp[2] == 0 and raw_kp[1] > 0     # kp bytes zero without a target
    # p_des: the measured position clamped to the joint range, motor side (direction, offset)
    assert commands[0].position == 0.4 and commands[2].position == 1.6
    assert commands[1].position == pytest.approx(-(1.2 - 0.3)) and commands[1].kp == 50.0
    assert [c.kd for c in commands] == LAYOUT["kd"]
    # velocity and torque clamped as a tracked joint's; the position beyond the range is not a clamp
    decoded = decode_mit(frames[2], a.limits[2])
    assert commands[2].velocity == 30.0 and decoded.velocity == 30.0 and decoded.torque == -10.0
    np.testing.assert_array_equal(clamped, [False, False, True])
    # no measured position: the middle of the range
    commands, _ = a.commands(np.array([nan, nan, nan]), np.zeros(3), np.zeros(3), np.ones(3, dtype=bool))
    np.testing.assert_allclose([c.position for c in commands], [0.75, -(1.3 - 0.3), 0.0])
    # not tracked: damping only, NaN or not
    commands, _ = a.commands(np.array([nan, nan, nan]), np.ones(3), np.ones(3), np.zeros(3, dtype=bool), q_measured)
    assert all((c.kp, c.velocity, c.torque) == (0.0, 0.0, 0.0) for c in commands)


@pytest.mark.parametrize("motor", ["DM8009", "DM4340", "DM4310"])
def test_a_floating_joint_gets_the_torque_asked_at_rest_despite_the_frame_truncation(motor):
    """The motor's law T = kp (p - q) + kd (v_des - dq) + t_ff, from the frame's bytes (the
    codec), at rest: the torque asked within half a step of the 12-bit torque field, where the
    truncated fields alone would leave up to a step of t_ff and kd x half a velocity step."""
    a = DamiaoArm.build(["j"], [motor], [1], [0x11], [0.0], [4.5], [-1.0], [1.0])
    lim = a.limits[0]
    step = resolution(-lim.tmax, lim.tmax, 12)
    asked = np.linspace(-0.9 * lim.tmax, 0.9 * lim.tmax, 301)
    applied = []
    for tau in asked:
        commands, _ = a.commands(np.array([np.nan]), np.zeros(1), np.array([tau]), np.ones(1, dtype=bool),
                                 np.zeros(1))
        f = decode_mit(encode_mit(commands[0], lim), lim)
        applied.append(f.kp * (f.position - 0.0) + f.kd * (f.velocity - 0.0) + f.torque)
    error = np.array(applied) - asked
    assert np.abs(error).max() <= 0.5 * step + 1e-9
    # the truncation's bias is gone: errors on both sides, centred
    assert error.min() < 0 < error.max() and abs(error.mean()) < 0.1 * step
