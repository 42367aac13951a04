"""The timing of a control loop, recorded by the loop itself, and the figures drawn from it.

``LoopRecord`` is what the Damiao bridge keeps for benches (bench/damiao_loop.py): rings
preallocated at start-up and written in place, so recording costs the loop two clock reads
and a few stores per cycle, one (n,) subtraction per published message. The functions below
turn what was read out of it into the bench's figures; they are free of clocks and buses so
each definition is testable alone.
"""
from __future__ import annotations

import math

import numpy as np


class LoopRecord:
    """Rings of the newest ``size`` cycles and ``size`` published messages of ``n`` joints.

    Cycle k (row k % size): ``start`` time.monotonic() s when it began, ``busy`` s until it
    ended. Message m (row m % size): ``age`` (n,) s from each joint's reply (the bus stamp of
    the frame it was decoded from) to the publication, NaN for a joint the message left out.
    ``cycles`` and ``messages`` count what was ever recorded.
    """

    def __init__(self, size: int, n: int):
        if size < 1 or n < 1:
            raise ValueError(f"a loop record needs size >= 1 and n >= 1, got {size} and {n}")
        self.size, self.n = int(size), int(n)
        self.start = np.zeros(self.size)
        self.busy = np.zeros(self.size)
        self.age = np.full((self.size, self.n), np.nan)
        self.cycles = self.messages = 0

    def cycle(self, start: float, end: float) -> None:
        """Record a cycle that ran from ``start`` to ``end`` (time.monotonic() s)."""
        row = self.cycles % self.size
        self.start[row] = start
        self.busy[row] = end - start
        self.cycles += 1

    def message(self, now: float, stamps: np.ndarray, published: np.ndarray) -> None:
        """Record a message published at ``now`` s of the joints ``published`` (indices)
        whose replies carry the bus ``stamps`` (n,) s, on the clock of ``now``."""
        row = self.age[self.messages % self.size]
        row[:] = np.nan
        row[published] = now - stamps[published]
        self.messages += 1

    def cycles_since(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, busy) copies of cycles ``first`` .. ``cycles - 1``, oldest first; ValueError
        if the ring no longer holds them all."""
        return tuple(self._since(first, self.cycles, (self.start, self.busy)))

    def ages_since(self, first: int) -> np.ndarray:
        """(m, n) copy of the ages of messages ``first`` .. ``messages - 1``, oldest first."""
        return self._since(first, self.messages, (self.age,))[0]

    def _since(self, first: int, count: int, rings) -> list:
        if not 0 <= first <= count:
            raise ValueError(f"asked from {first}, but {count} were recorded")
        if count - first > self.size:
            raise ValueError(f"{count - first} asked, the ring holds the newest {self.size}: read it more often")
        rows = np.arange(first, count) % self.size
        return [ring[rows] for ring in rings]


def period_figures(start, period: float) -> dict:
    """Figures of a loop meant to start a cycle every ``period`` s, from the start times
    (K,) s of consecutive cycles (a steady clock), K >= 2.

    * ``jitter`` (K - 1,): ``|start[k] - start[k-1] - period|``, s.
    * ``overruns``: cycles that started more than two periods after the one before them, i.e.
      more than one period after they were due: a whole period passed without a cycle (a
      timer on a fixed grid skips such periods rather than run them back to back).
    * ``missed``: periods of the span start[0] .. start[-1] in which no cycle ran:
      round((start[-1] - start[0]) / period) - (K - 1), at least 0.
    * ``cycles`` K, ``expected``: cycles the span holds at the nominal rate.
    """
    start = np.asarray(start, dtype=float)
    if start.ndim != 1 or start.size < 2 or not period > 0:
        raise ValueError(f"need two start times or more and a positive period, got {start.size} and {period}")
    intervals = np.diff(start)
    expected = int(round((start[-1] - start[0]) / period)) + 1
    return {"jitter": np.abs(intervals - period), "overruns": int(np.count_nonzero(intervals > 2.0 * period)),
            "missed": max(expected - start.size, 0), "cycles": int(start.size), "expected": expected}


def longest_gaps(times, got, begin: float, end: float) -> np.ndarray:
    """For each of n receivers, the longest time (s) within [begin, end] without an event.

    ``times`` (K,) s, increasing: when each round was sent; ``got`` (K, n) bool: which
    receivers got an event in that round. The edges count: a receiver that got nothing in the
    span went ``end - begin`` without.
    """
    times = np.asarray(times, dtype=float)
    got = np.asarray(got, dtype=bool)
    if got.ndim != 2 or got.shape[0] != times.size:
        raise ValueError(f"got must be (K, n) with K = {times.size}, got shape {got.shape}")
    inside = (times >= begin) & (times <= end)
    gaps = np.empty(got.shape[1])
    for j in range(got.shape[1]):
        at = np.concatenate(([begin], times[inside & got[:, j]], [end]))
        gaps[j] = np.diff(at).max()
    return gaps


def percentiles(values, qs=(50, 99, 100)) -> list:
    """The ``qs`` percentiles of the finite ``values``; NaN for each when there are none."""
    values = np.asarray(values, dtype=float).ravel()
    values = values[np.isfinite(values)]
    return [float(np.percentile(values, q)) if values.size else math.nan for q in qs]
