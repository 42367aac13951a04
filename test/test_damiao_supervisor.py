"""The Damiao arm's supervision rules, cycle by cycle, without bus or clock.

Each test plays the motors' side by hand: which frames the supervisor asks for (payloads from
the protocol codec, tested on its own) and the statuses the motors report back, as the
reference says a DM-J drive answers (shared/reference/damiao-mit-protocol.md: one reply per frame,
enable from disabled only, a fault until clear error).
"""
import numpy as np
import pytest

from sysid_core.damiao import protocol as dm
from sysid_core.damiao.protocol import Feedback, encode_feedback, motor_limits, resolution
from sysid_core.damiao.supervisor import (CLEAR, DISABLE, ENABLE, FEEDBACK_LATENCY_S, Supervisor,
                                          screen_feedback, tracked_joints)

NAMES = ("joint1", "joint2", "joint3")
CYCLES = 5


class Motors:
    """Drives answering like DM-J motors: each frame gets one reply with the drive's status."""

    def __init__(self, n=3):
        self.status = [dm.STATUS_DISABLED] * n
        self.silent = set()

    def answer(self, supervisor, frames):
        """Apply one cycle's frames ({joint: payload}; the others get a regular frame) and
        feed the replies to ``supervisor``."""
        for j, status in enumerate(self.status):
            payload = frames.get(j)
            if payload == dm.enable_frame() and status == dm.STATUS_DISABLED:
                self.status[j] = dm.STATUS_ENABLED
            elif payload == dm.disable_frame() and status == dm.STATUS_ENABLED:
                self.status[j] = dm.STATUS_DISABLED
            elif payload == dm.clear_error_frame() and status not in (dm.STATUS_ENABLED, dm.STATUS_DISABLED):
                self.status[j] = dm.STATUS_DISABLED
            if j not in self.silent:
                supervisor.feedback(j, self.status[j])


def run(supervisor, motors, kind, limit=50):
    request = supervisor.start(kind)
    for _ in range(limit):
        if request.done:
            return request
        motors.answer(supervisor, supervisor.cycle())
    raise AssertionError(f"{kind} did not end within {limit} cycles")


def enabled_arm():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    assert run(s, m, ENABLE).succeeded
    assert s.may_track and m.status == [dm.STATUS_ENABLED] * 3
    return s, m


def test_enable_sends_one_frame_per_motor_per_cycle_until_confirmed():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    request = s.start(ENABLE)
    frames = s.cycle()
    assert frames == {0: dm.enable_frame(), 1: dm.enable_frame(), 2: dm.enable_frame()}
    assert not s.may_track                      # nothing confirmed yet
    m.answer(s, frames)
    assert s.cycle() == {} and request.succeeded and s.may_track


def test_a_fault_that_clears_itself_stays_latched_until_clear():
    s, m = enabled_arm()
    s.feedback(1, dm.STATUS_OVER_CURRENT)
    assert s.faults[1] == "fault 0xA (over-current)" and not s.may_track
    assert s.new_faults() == [(1, "fault 0xA (over-current)")]
    for _ in range(100):                        # the drive reports enabled again by itself
        s.feedback(1, dm.STATUS_ENABLED)
        assert s.cycle() == {} and not s.may_track
    assert s.new_faults() == []                 # logged once
    request = run(s, m, CLEAR)
    assert request.succeeded and request.joints == (1,) and s.may_track
    assert s.faults == [None] * 3


@pytest.mark.parametrize("status", [dm.STATUS_DISABLED, 0x2, 0x5, 0x7, 0xF])
def test_any_status_but_enabled_while_driving_is_a_fault(status):
    s, m = enabled_arm()
    s.feedback(2, status)
    assert s.faults[2] is not None and not s.may_track
    assert (dm.status_text(status) in s.faults[2])


@pytest.mark.parametrize("status", [0x5, 0xF, dm.STATUS_OVER_VOLTAGE])
def test_undefined_or_fault_status_while_disabled_is_a_fault(status):
    s = Supervisor(NAMES, CYCLES)
    s.feedback(0, dm.STATUS_DISABLED)
    s.feedback(0, dm.STATUS_ENABLED)           # a late reply to a frame sent before a disable: fine
    assert s.faults == [None] * 3
    s.feedback(0, status)
    assert s.faults[0] is not None
    # enable is refused while a fault is latched: nothing is sent
    request = s.start(ENABLE)
    assert request.done and "faults latched: joint1" in request.refused and s.cycle() == {}


def test_stale_disabled_reply_during_enable_is_not_a_fault():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    s.start(ENABLE)
    frames = s.cycle()
    for j in range(3):                          # replies to frames sent before the enable
        s.feedback(j, dm.STATUS_DISABLED)
    assert s.faults == [None] * 3
    m.answer(s, frames)
    assert s.cycle() == {} and s.may_track


def test_a_silent_motor_fails_the_enable_after_the_frame_budget_and_the_others_keep_their_frames():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    m.silent.add(1)
    request = s.start(ENABLE)
    sent = []
    while not request.done:
        frames = s.cycle()
        sent.append(frames)
        m.answer(s, frames)
        s.lost(1, "no feedback")               # the node reports it silent: the request decides
    # the healthy motors got their enable once, then regular frames; the silent one CYCLES enables
    assert [sorted(f) for f in sent] == [[0, 1, 2]] + [[1]] * (CYCLES - 1) + [[]]
    assert request.failed == {1: f"no answer to enable ({CYCLES} frames)"} and request.silent == [1]
    assert s.faults[1] == f"no answer to enable ({CYCLES} frames)" and not s.may_track
    assert s.new_faults() == [(1, f"no answer to enable ({CYCLES} frames)")]


def test_a_motor_that_faults_during_enable_fails_it_at_once():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    m.status[2] = dm.STATUS_OVERLOAD
    request = run(s, m, ENABLE)
    assert request.failed == {2: "fault 0xE (overload)"} and s.faults[2] == "fault 0xE (overload)"


def test_clear_then_enable_and_a_motor_still_faulted():
    s, m = enabled_arm()
    m.status[0] = dm.STATUS_UNDER_VOLTAGE
    s.feedback(0, dm.STATUS_UNDER_VOLTAGE)
    m.silent.add(2)
    s.lost(2, "no feedback for 3 cycles")
    request = s.start(CLEAR)
    assert request.joints == (0, 2)
    frames = s.cycle()
    assert frames == {0: dm.clear_error_frame(), 2: dm.clear_error_frame()}
    m.answer(s, frames)
    assert s.cycle() == {0: dm.enable_frame(), 2: dm.clear_error_frame()}   # 0: cleared, now enable
    while not request.done:
        m.answer(s, s.cycle())
    assert request.failed == {2: f"no answer to clear error ({CYCLES} frames)"}
    assert s.faults[0] is None and s.faults[2] is not None and not s.may_track
    m.silent.clear()
    assert run(s, m, CLEAR).succeeded and s.may_track


def test_clear_while_disabled_leaves_the_motors_disabled():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    m.status[1] = dm.STATUS_COIL_OVER_TEMPERATURE
    m.answer(s, {})
    assert s.faults[1] is not None
    request = run(s, m, CLEAR)
    assert request.succeeded and m.status == [dm.STATUS_DISABLED] * 3 and not s.enabled


def test_disable_interrupts_a_running_request_and_must_get_through():
    s, m = Supervisor(NAMES, CYCLES), Motors()
    m.silent.add(0)
    enable = s.start(ENABLE)
    m.answer(s, s.cycle())
    disable = s.start(DISABLE)
    assert enable.done and enable.failed == {0: "interrupted by disable"}
    assert not s.enabled and s.cycle() == {j: dm.disable_frame() for j in range(3)}
    # busy: nothing else starts while the disable runs
    assert "busy: disable" in s.start(ENABLE).refused and "busy" in s.start(CLEAR).refused
    while not disable.done:
        m.answer(s, s.cycle())
    assert disable.failed == {0: f"no answer to disable ({CYCLES} frames)"}
    assert m.status[1:] == [dm.STATUS_DISABLED] * 2


def test_clear_with_nothing_latched_does_nothing():
    s, m = enabled_arm()
    request = s.start(CLEAR)
    assert request.done and request.succeeded and request.joints == () and s.cycle() == {}


# --- screen_feedback ---------------------------------------------------------------------------

LIMITS = motor_limits("DM4310")


def frame(can_id, position, status=dm.STATUS_ENABLED):
    return encode_feedback(Feedback(can_id & 0xF, status, position, 0.0, 0.0, 30, 30), LIMITS)


def test_screen_feedback_checks_length_id_nibble_and_reach():
    good = frame(0x12, 0.3)
    feedback, why = screen_feedback(good, 0x12, LIMITS)
    assert why == "" and abs(feedback.position - 0.3) <= resolution(-12.5, 12.5, 16)
    assert screen_feedback(good[:7], 0x12, LIMITS) == (None, "7 bytes, not 8")
    assert screen_feedback(good, 0x13, LIMITS)[1] == "motor id nibble 0x2, expected 0x3"
    # the worked example of the reference: 11 83 27 7F F7 FF 00 00 from motor 1
    assert screen_feedback(bytes.fromhex("1183277FF7FF0000"), 0x01, motor_limits("DM4310"))[0].status == 1
    # no farther than VMAX (30 rad/s) allows in the time since the last frame, plus the latency margin
    reach = LIMITS.vmax * (0.002 + FEEDBACK_LATENCY_S)
    assert screen_feedback(frame(2, 0.3 + 0.9 * reach), 2, LIMITS, previous=0.3, elapsed=0.002)[0] is not None
    feedback, why = screen_feedback(frame(2, 0.3 + 1.1 * reach), 2, LIMITS, previous=0.3, elapsed=0.002)
    assert feedback is None and "more than VMAX 30 rad/s allows" in why
    # after a long silence anything within reach of VMAX is believed
    assert screen_feedback(frame(2, 6.9), 2, LIMITS, previous=0.0, elapsed=1.0)[0] is not None


def test_random_frames_pass_the_screen_rarely():
    rng = np.random.default_rng(0)
    junk = rng.integers(0, 256, size=(20000, 8), dtype=np.uint8)
    passed = sum(screen_feedback(bytes(row), 0x12, LIMITS, previous=0.0, elapsed=0.002)[0] is not None
                 for row in junk)
    # nibble 1/16 times a 2 * 1.56 rad window out of 25 rad: about 0.8 %
    assert passed / len(junk) < 1 / 16 * (2 * LIMITS.vmax * 0.052 / 25.0) * 1.5


# --- which joints follow their command --------------------------------------------------------

LOWER, UPPER = np.array([-1.0, -1.0, -1.0]), np.array([1.0, 1.0, 1.0])


def tracked(q_command, q_measured=(0.0, 0.0, 0.0), received=(9.95, 9.95, 9.95), may_track=True, armed_at=5.0,
            now=10.0, timeout=0.1, max_error=0.3):
    return tracked_joints(may_track, np.array(received), armed_at, now, timeout, np.array(q_command, dtype=float),
                          np.array(q_measured), LOWER, UPPER, max_error)


def test_a_command_without_position_target_is_never_too_far():
    nan = np.nan
    # joint 1 commanded 0.5 rad away: too far; joints 2 and 3 have no position target, however
    # far the arm is from anything (joint 3 measured beyond its limit)
    track, far = tracked([0.5, nan, nan], q_measured=[0.0, 0.9, 3.0])
    np.testing.assert_array_equal(track, [False, True, True])
    np.testing.assert_array_equal(far, [True, False, False])
    # the target is clamped to the limits before the comparison
    track, far = tracked([5.0, 5.0, nan], q_measured=[0.8, 0.5, 0.0])
    np.testing.assert_array_equal(track, [True, False, True])
    # no check at all with max_error 0
    assert tracked([5.0, nan, 0.0], max_error=0.0)[0].all()


def test_a_command_without_position_target_goes_stale_and_waits_for_tracking_like_any():
    nan = np.nan
    # older than the timeout, received before tracking was allowed, never received
    track, far = tracked([nan, nan, nan], received=(9.85, 4.9, -np.inf))
    assert not track.any() and not far.any()
    # tracking not allowed (a fault, a request): nothing, NaN or not
    assert not tracked([nan, 0.0, nan], may_track=False)[0].any()
    assert tracked([nan, 0.0, nan])[0].all()
