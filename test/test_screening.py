"""Screening samples as they arrive, and send times of receive-stamped batches (the pure parts of
the identifier's recording; the node's tests are in test_identifier_input.py)."""
import numpy as np
import pytest

from sysid_core import DataError
from sysid_core.identification import screening
from sysid_core.identification.filtering import FilterConfig, MAX_GAP_PERIODS, prepare
from sysid_core.identification.receive_times import nominal_period, send_times
from sysid_core.identification.recording import Recording

NAMES = ("joint1", "joint2")


def test_a_bad_value_is_named_with_its_field_joint_and_value():
    values = np.array([0.1, 0.2, 0.0, 0.0, 1.0, np.inf])
    assert screening.non_finite(values, NAMES) == "effort of joint2 is inf"
    values[2] = np.nan
    assert screening.non_finite(values, NAMES) == "velocity of joint1 is nan"
    assert screening.non_finite(np.zeros(6), NAMES) is None


def test_duplicate_names_are_named():
    assert screening.duplicate_names(["a", "b", "a", "a", "c", "b"]) == "joint names ['a', 'b'] appear more than once"
    assert screening.duplicate_names(["a", "b"]) is None


@pytest.mark.parametrize("stamp, last, equal_allowed, kind", [
    (1_000_000_001, 1_000_000_000, False, None),
    (1_000_000_000, None, False, None),
    (1_000_000_000, 1_000_000_000, False, screening.STAMP_ORDER),        # repeated
    (1_000_000_000, 1_000_000_000, True, None),                          # a batch of receive times
    (999_000_000, 1_000_000_000, False, screening.STAMP_ORDER),          # out of order
    (999_000_000, 1_000_000_000, True, screening.STAMP_ORDER),
    (0, 2_000_000_001, False, screening.NEW_STRETCH),                     # > CLOCK_JUMP_S back
])
def test_stamps_must_follow_the_last_kept(stamp, last, equal_allowed, kind):
    fault = screening.stamp_fault(stamp, last, equal_allowed)
    assert (fault and fault[0]) == kind
    if kind == screening.STAMP_ORDER and stamp != last:
        assert f"{stamp * 1e-9:.9f}" in fault[1] and f"{last * 1e-9:.9f}" in fault[1]


def batched(send, rng, flush_ms=(2.0, 40.0)):
    """Receive times of messages sent at ``send``: delivered in batches, each flushed at a random
    interval after the previous flush, holding everything sent by then."""
    receive = np.empty_like(send)
    flush, k = send[0], 0
    while k < send.size:
        flush += rng.uniform(*flush_ms) * 1e-3
        j = np.searchsorted(send, flush, side="right")
        receive[k:j] = flush  # all at once
        k = max(j, k)
    return receive


def test_batches_are_spread_back_at_the_measured_rate_and_a_pause_stays_a_gap():
    rng = np.random.default_rng(3)
    period = 1 / 500
    send = np.concatenate([np.arange(4000) * period, 10.0 + np.arange(3000) * period])  # a 2 s pause
    receive = batched(send, rng)
    # taken as sample times, receive times are runs of repeats between gaps
    assert np.mean(np.diff(receive) == 0) > 0.8
    assert nominal_period(receive) == pytest.approx(period, rel=2e-3)
    estimate = send_times(receive)
    assert np.all(np.diff(estimate) > 0)
    delay = estimate - send
    # never later than received, never earlier than sent by more than the rate's error adds up
    assert np.all(estimate <= receive) and np.all(delay >= -0.03) and np.all(delay <= 0.04 + 1e-12)
    # gaps filtering cuts at: the pause, and before the last batch of each stretch (no later message
    # says how long it waited): a few samples, not thousands
    gaps = np.flatnonzero(np.diff(estimate) > MAX_GAP_PERIODS * period)
    assert 3999 in gaps and all(3999 - 30 < k <= 3999 or k > 6999 - 30 for k in gaps), gaps
    # the filtering sees two stretches (the pause), not thousands: prepare keeps nearly every sample
    t = estimate
    recording = Recording(t, np.sin(t)[:, None], np.cos(t)[:, None], np.sin(t)[:, None], ("joint1",))
    prepared = prepare(recording, FilterConfig(cutoff_hz=10.0))
    assert prepared.n_samples > 0.85 * send.size
    # the receive times themselves (a nanosecond apart within a batch) would be cut at every flush
    ticks = receive + np.arange(receive.size) * 1e-9
    assert np.sum(np.diff(ticks) > MAX_GAP_PERIODS * np.median(np.diff(ticks))) > 500


def test_a_steady_delivery_is_left_as_received():
    receive = 5.0 + np.arange(1000) * 1e-3
    np.testing.assert_allclose(send_times(receive), receive, rtol=0, atol=1e-12)


def test_stretches_are_split_short_ones_dropped_and_joined_with_seams():
    """A driver restarted (its clock 97 s back) after a sample stamped 400 s ahead."""
    t = np.concatenate([100 + np.arange(8) * 0.01, [500.0], 3 + np.arange(11) * 0.01])
    q = np.arange(t.size, dtype=float)[:, None]
    joined, starts = screening.joined_stretches(t, q, q, q, ("joint1",))
    assert starts == (0, 8) and joined.n_samples == 19   # the lone sample at 500 s is dropped
    np.testing.assert_array_equal(joined.q[:, 0], np.r_[0:8, 9:20])
    np.testing.assert_array_equal(joined.time[:8], t[:8])
    assert np.all(np.diff(joined.time) > 0) and joined.time[8] - joined.time[7] > 1.0  # a seam prepare cuts at
    with pytest.raises(DataError, match="too few samples"):
        screening.joined_stretches(t[:2], q[:2], q[:2], q[:2], ("joint1",))
    # receive times: a batch shares its time, a step back still splits
    receive = np.array([1.0, 1.0, 1.0, 1.01, 1.02, 1.02, 0.5, 0.51, 0.52, 0.52])
    z = np.zeros((10, 1))
    joined, starts = screening.joined_stretches(receive, z, z, z, ("joint1",), receive_stamped=True)
    assert starts == (0, 6) and joined.n_samples == 10
