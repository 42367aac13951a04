"""The intervals between a recording's time stamps, block by block.

A 60-minute recording at 1 kHz has 3.6 million intervals: ``np.diff`` of its stamps, the copy
``np.median`` sorts and ``abs(dt - period)`` would be three 29 MB temporaries, freed again at
once, and they would set the identification's peak memory. Every function here reads the stamps
in blocks of INTERVAL_BLOCK intervals instead and returns what ``np.diff`` followed by the same
NumPy reduction returns, bit for bit: an interval is the same subtraction ``np.diff`` does.
"""
from __future__ import annotations

import numpy as np

# Intervals per block: 0.5 MB of float64, whatever the recording's length.
INTERVAL_BLOCK = 1 << 16
# Intervals an order statistic samples to place its pivots, and the most it keeps between them.
_SAMPLE = 1 << 13
_GATHER = 1 << 16


def interval_blocks(time: np.ndarray, lo: float = -np.inf, hi: float = np.inf):
    """(start, dt): ``np.diff(time)[start:start + len(dt)]`` block by block, time (N,) s; with
    ``lo``/``hi``, only the intervals strictly between them, in order (``start`` is then the
    index of the block's first interval, not of the first one kept)."""
    count = time.shape[0] - 1
    for start in range(0, count, INTERVAL_BLOCK):
        stop = min(start + INTERVAL_BLOCK, count)
        dt = time[start + 1:stop + 1] - time[start:stop]
        if lo > -np.inf or hi < np.inf:
            dt = dt[(dt > lo) & (dt < hi)]
        yield start, dt


def median_interval(time: np.ndarray) -> float:
    """``np.median(np.diff(time))`` s, for time (N,) s with N >= 2, in memory that does not grow
    with N: the middle order statistic(s) of the intervals, averaged as np.median does."""
    count = time.shape[0] - 1
    if count <= INTERVAL_BLOCK:
        return float(np.median(np.diff(time)))
    return float(np.mean(_order_statistics(time, ((count - 1) // 2, count // 2))))


def _order_statistics(time: np.ndarray, ranks: tuple) -> np.ndarray:
    """The intervals of ``ranks`` (positions from 0 in ascending order), (len(ranks),) s.

    Two pivots taken from a sample of the intervals around the ranks' places split one pass over
    the intervals into: below the lower pivot, equal to it, strictly between the two (kept, when
    few enough), equal to the upper one, above it. On stamps from a timer the answers equal a
    pivot or lie between them, and one pass finds them; otherwise each part that holds ranks
    still open is searched the same way, with a new sample drawn from inside it.
    """
    count = time.shape[0] - 1
    step = max(1, count // _SAMPLE)
    values = {}
    # open searches: (lo, hi, intervals <= lo, intervals < hi, ranks, sorted sample from (lo, hi))
    searches = [(-np.inf, np.inf, 0, count, sorted(set(ranks)), np.sort(time[1:count + 1:step] - time[0:count:step]))]
    while searches:
        lo, hi, below, under, pending, sample = searches.pop()
        # the ranks' places in the sample, widened by 4 standard deviations of a sample quantile
        place = (np.array([pending[0], pending[-1]]) - below) / (under - below) * sample.shape[0]
        spread = 2.0 * np.sqrt(sample.shape[0]) + 1.0
        p1 = sample[int(np.clip(place[0] - spread, 0, sample.shape[0] - 1))]
        p2 = sample[int(np.clip(place[1] + spread, 0, sample.shape[0] - 1))]
        n_lt = n_eq1 = n_eq2 = n_in = 0
        kept = []
        for _, dt in interval_blocks(time, lo, hi):
            n_lt += np.count_nonzero(dt < p1)
            n_eq1 += np.count_nonzero(dt == p1)
            n_eq2 += np.count_nonzero(dt == p2) if p2 > p1 else 0
            inside = dt[(dt > p1) & (dt < p2)]
            n_in += inside.shape[0]
            if n_in <= _GATHER:
                kept.append(inside)
        # intervals <= each edge: [p1 - 0, p1, p2 - 0, p2]
        edges = below + np.cumsum([n_lt, n_eq1, n_in, n_eq2])
        if n_in <= _GATHER:
            kept = np.sort(np.concatenate(kept))
        for rank in pending:
            if edges[0] <= rank < edges[1]:
                values[rank] = float(p1)
            elif edges[2] <= rank < edges[3]:
                values[rank] = float(p2)
            elif edges[1] <= rank < edges[2] and n_in <= _GATHER:
                values[rank] = float(kept[rank - edges[1]])
        for lo_, hi_, below_, under_ in ((lo, p1, below, edges[0]), (p1, p2, edges[1], edges[2]),
                                        (p2, hi, edges[3], under)):
            held = [rank for rank in pending if rank not in values and below_ <= rank < under_]
            if held:
                every = (under_ - below_) // _SAMPLE + 1
                sample = np.sort(np.concatenate(list(_every(interval_blocks(time, lo_, hi_), every))))
                searches.append((lo_, hi_, int(below_), int(under_), held, sample))
    return np.array([values[rank] for rank in ranks])


def _every(blocks, every: int):
    """Every ``every``-th interval of ``blocks`` ((start, dt) pairs), counting across blocks."""
    seen = 0
    for _, dt in blocks:
        yield dt[(-seen) % every::every]
        seen += dt.shape[0]


def largest_deviation(time: np.ndarray, period: float) -> tuple:
    """(index i, interval) of the interval time[i + 1] - time[i] farthest from ``period`` s (the
    first such, as np.argmax picks), time (N,) s with N >= 2."""
    best, where = -1.0, 0
    for start, dt in interval_blocks(time):
        i = int(np.argmax(np.abs(dt - period)))
        if abs(dt[i] - period) > best:
            best, where = abs(dt[i] - period), start + i
    return where, float(time[where + 1] - time[where])


def longest_interval(time: np.ndarray) -> tuple:
    """(index i, interval) of the longest interval time[i + 1] - time[i] (the first such)."""
    best, where = -np.inf, 0
    for start, dt in interval_blocks(time):
        i = int(np.argmax(dt))
        if dt[i] > best:
            best, where = dt[i], start + i
    return where, float(time[where + 1] - time[where])


def intervals_longer(time: np.ndarray, limit: float) -> np.ndarray:
    """(K,) int: the indices i of the intervals time[i + 1] - time[i] longer than ``limit`` s."""
    found = [start + np.flatnonzero(dt > limit) for start, dt in interval_blocks(time)]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.intp)


def lost_periods(time: np.ndarray, period: float) -> int:
    """Sum over the intervals of about k >= 2 periods of k - 1: the samples a steady timer of
    ``period`` s did not record."""
    lost = 0
    for _, dt in interval_blocks(time):
        periods = np.rint(dt / period)
        lost += int(np.sum(periods[periods >= 2] - 1))
    return lost


def increasing(time: np.ndarray) -> bool:
    """Whether time (N,) is strictly increasing."""
    return all(bool(np.all(dt > 0)) for _, dt in interval_blocks(time))
