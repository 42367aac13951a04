"""Block-wise time-stamp intervals against NumPy on the whole np.diff (the oracle), bit for bit."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sysid_core.identification import intervals
from sysid_core.identification.filtering import missing_samples, uniform_sample_rate


def _stamps(kind: str, n: int, rng) -> np.ndarray:
    if kind == "timer":  # a steady timer: a handful of distinct rounded intervals
        return 3.0 + 1e-3 * np.arange(n)
    if kind == "jitter":  # every interval distinct
        return np.cumsum(1e-3 + 1e-5 * rng.standard_normal(n))
    if kind == "alternating":  # a strided sample of it sees one value only
        return np.cumsum(np.where(np.arange(n) % 2 == 0, 0.9e-3, 1.1e-3))
    if kind == "lost":  # whole periods missing, as a driver that drops messages
        return np.cumsum(rng.choice([1e-3, 2e-3, 3e-3], size=n, p=[0.6, 0.3, 0.1]))
    if kind == "clustered":  # ties and a continuum around the middle
        dt = np.full(n, 1e-3)
        dt[n // 2:] = rng.uniform(0.99e-3, 1.01e-3, n - n // 2)
        dt[::37] = rng.uniform(0.5e-3, 2e-3, dt[::37].size)
        return np.cumsum(dt)
    raise ValueError(kind)


KINDS = ("timer", "jitter", "alternating", "lost", "clustered")


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks, samples and gathers a few hundred intervals long, so that a test of a few
    thousand stamps crosses block edges, narrows its bracket and samples again."""
    monkeypatch.setattr(intervals, "INTERVAL_BLOCK", 256)
    monkeypatch.setattr(intervals, "_SAMPLE", 32)
    monkeypatch.setattr(intervals, "_GATHER", 64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [5001, 5002])
def test_median_and_order_statistics_equal_numpy(small_blocks, kind, n):
    time = _stamps(kind, n, np.random.default_rng(n))
    dt = np.diff(time)
    assert intervals.median_interval(time) == np.median(dt)
    ordered = np.sort(dt)
    ranks = (0, 1, 17, dt.size // 3, dt.size // 2, dt.size - 2, dt.size - 1)
    assert np.array_equal(intervals._order_statistics(time, ranks), ordered[list(ranks)])


@pytest.mark.parametrize("kind", KINDS)
def test_extremes_and_counts_equal_numpy(small_blocks, kind):
    time = _stamps(kind, 3001, np.random.default_rng(7))
    dt = np.diff(time)
    period = np.median(dt)
    worst = int(np.argmax(np.abs(dt - period)))
    assert intervals.largest_deviation(time, period) == (worst, dt[worst])
    assert intervals.longest_interval(time) == (int(np.argmax(dt)), dt.max())
    assert np.array_equal(intervals.intervals_longer(time, 1.5 * period), np.flatnonzero(dt > 1.5 * period))
    periods = np.rint(dt / period)
    assert intervals.lost_periods(time, period) == int(np.sum(periods[periods >= 2] - 1))
    assert missing_samples(time) == int(np.sum(periods[periods >= 2] - 1))
    assert intervals.increasing(time)
    time[2900] = time[2899]
    assert not intervals.increasing(time)


def test_short_recordings_take_numpy_itself():
    time = np.array([0.0, 0.001, 0.0025, 0.0031])
    assert intervals.median_interval(time) == np.median(np.diff(time))
    assert intervals.intervals_longer(np.array([0.0]), 1.0).size == 0


def test_the_sample_rate_of_a_long_recording_needs_no_copy_of_its_stamps():
    """Finding the rate of 4 million stamps (32 MB) must not make an array of their size, as
    np.diff, np.median's copy and abs(dt - period) each did (the hour-long recording's peak).
    In a fresh process: tracemalloc counts every thread's allocations, and the suite's nodes
    leave threads behind."""
    code = """if True:
        import tracemalloc
        import numpy as np
        from sysid_core.identification.filtering import missing_samples, uniform_sample_rate
        time = 1e-3 * np.arange(4_000_000) + 1e-6 * np.random.default_rng(0).standard_normal(4_000_000)
        tracemalloc.start()
        rate = uniform_sample_rate(time)
        missing_samples(time)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert rate == 1.0 / np.median(np.diff(time)), rate
        print(peak / time.nbytes)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 1 / 8
