"""The control loop's record and the figures bench/damiao_loop.py draws from it, on hand-built times."""
import numpy as np
import pytest

from sysid_core.damiao.loop_record import LoopRecord, longest_gaps, percentiles, period_figures

MS = 1e-3


def test_period_figures_of_a_late_cycle_and_a_skipped_period():
    # 2 ms period: on time, 0.3 ms late, back on the grid, a period skipped (the next cycle
    # 0.5 ms after its slot), on time
    start = np.array([0.0, 2.0, 4.3, 6.0, 10.5, 12.0]) * MS
    f = period_figures(start, 2 * MS)
    np.testing.assert_allclose(f["jitter"], np.array([0.0, 0.3, 0.3, 2.5, 0.5]) * MS, atol=1e-12)
    assert (f["cycles"], f["expected"], f["overruns"], f["missed"]) == (6, 7, 1, 1)


def test_a_late_cycle_is_no_overrun_until_it_is_a_period_late():
    # due at 2 ms: started 1.9 ms late, the timer still runs the one due at 4 ms (at once)
    f = period_figures(np.array([0.0, 3.9, 4.0, 6.0, 8.0]) * MS, 2 * MS)
    assert (f["overruns"], f["missed"]) == (0, 0)
    # 2.1 ms late, the period of the one due at 4 ms is gone: skipped
    f = period_figures(np.array([0.0, 4.1, 6.0, 8.0]) * MS, 2 * MS)
    assert (f["overruns"], f["missed"]) == (1, 1)


def test_a_loop_that_runs_fast_misses_nothing():
    f = period_figures(np.arange(11) * 1.95 * MS, 2 * MS)
    assert (f["missed"], f["overruns"], f["expected"]) == (0, 0, 11)


def test_period_figures_need_two_cycles_and_a_period():
    with pytest.raises(ValueError):
        period_figures([1.0], 0.002)
    with pytest.raises(ValueError):
        period_figures([1.0, 1.002], 0.0)


def test_longest_gaps_count_the_window_edges():
    times = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    got = np.array([[1, 0, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 0]], dtype=bool)
    # receiver 0: events at 1, 3, 4 in [0.5, 4]; receiver 1: at 3 only; receiver 2: none
    np.testing.assert_allclose(longest_gaps(times, got, 0.5, 4.0), [2.0, 2.5, 3.5])
    with pytest.raises(ValueError):
        longest_gaps(times, got[:3], 0.0, 4.0)


def test_percentiles_skip_what_is_not_finite():
    assert percentiles([np.nan, 1.0, 3.0, np.inf], (0, 100)) == [1.0, 3.0]
    assert np.isnan(percentiles([np.nan], (50,))[0])


def test_loop_record_rings_keep_the_newest_oldest_first():
    record = LoopRecord(4, 3)
    for k in range(6):
        record.cycle(float(k), k + 0.25)
    start, busy = record.cycles_since(2)
    np.testing.assert_array_equal(start, [2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(busy, [0.25] * 4)
    assert record.cycles_since(6)[0].size == 0
    with pytest.raises(ValueError, match="read it more often"):
        record.cycles_since(1)          # overwritten
    with pytest.raises(ValueError):
        record.cycles_since(7)          # not recorded yet


def test_loop_record_ages_of_the_joints_published():
    record = LoopRecord(4, 3)
    stamps = np.array([10.0, 10.5, 9.0])
    record.message(11.0, stamps, np.array([0, 2]))     # joint 1 left out
    record.message(12.0, stamps, np.arange(3))
    np.testing.assert_array_equal(record.ages_since(0), [[1.0, np.nan, 2.0], [2.0, 1.5, 3.0]])
    assert record.messages == 2
