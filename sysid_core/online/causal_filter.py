"""Causal low-pass filtering of a stream of joint samples, batch after batch, and the
acceleration from it.

Online, no sample after the current one exists: the identification's zero-phase filter
(filtfilt) cannot be used. A Butterworth low-pass of ``order`` at ``cutoff_hz`` runs forward
only, its state carried from one batch to the next, so that a stream cut into batches of any
size gives the same samples as the whole stream at once. Every signal that is compared with
another (the measured torque and the model's prediction from the filtered state) goes through
the same filter and so carries the same delay (the filter's group delay, about 0.9 / (2 pi
cutoff) s for order 2 at low frequency: 7 ms at 20 Hz). The acceleration is the backward
difference of the filtered velocity (half a sample more delay).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import signal


@lru_cache(maxsize=64)
def _butterworth_sections(rate_hz: float, cutoff_hz: float, order: int) -> np.ndarray:
    """(order / 2 rounded up, 6) the second-order sections of a Butterworth low-pass of ``order``
    at ``cutoff_hz`` Hz for samples at ``rate_hz`` Hz, designed once per setting: a design costs
    0.1-0.35 ms, more than filtering a batch, and the online loops need it for every batch. The
    one array is shared by every caller: not to be modified (it is left writable because
    scipy.signal.sosfilt refuses read-only sections)."""
    return signal.butter(order, cutoff_hz, fs=rate_hz, output="sos")


@dataclass(frozen=True)
class StreamFilter:
    """A causal low-pass for (N, k) batches at ``rate_hz``; ``cutoff_hz`` 0 passes samples
    through unchanged. ``sos`` its second-order sections."""

    rate_hz: float
    cutoff_hz: float = 20.0
    order: int = 2

    def __post_init__(self):
        if not (np.isfinite(self.rate_hz) and self.rate_hz > 0):
            raise ValueError(f"rate_hz must be > 0, got {self.rate_hz}")
        if not (np.isfinite(self.cutoff_hz) and 0 <= self.cutoff_hz < 0.5 * self.rate_hz):
            raise ValueError(f"cutoff_hz must be in [0, rate_hz / 2 = {0.5 * self.rate_hz:g}), got {self.cutoff_hz}")
        if int(self.order) != self.order or self.order < 1:
            raise ValueError(f"order must be an int >= 1, got {self.order}")

    @property
    def sos(self) -> np.ndarray | None:
        """(sections, 6) the second-order sections, None when it passes through; designed once
        per (rate, cutoff, order) and shared (see _butterworth_sections)."""
        if self.cutoff_hz == 0:
            return None
        # butter takes fs and the cutoff as float64 whatever their type: the key's float() loses nothing
        return _butterworth_sections(float(self.rate_hz), float(self.cutoff_hz), int(self.order))

    def start(self, first: np.ndarray) -> np.ndarray | None:
        """The state (sections, 2, k) of a filter that has seen ``first`` (k,) forever (no
        start-up transient); None when it passes through."""
        sos = self.sos
        if sos is None:
            return None
        first = np.asarray(first, dtype=float)
        return signal.sosfilt_zi(sos)[:, :, None] * first[None, None, :]

    def apply(self, state: np.ndarray | None, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(filtered (N, k), the new state) of the batch x (N, k) from ``state`` (start())."""
        x = np.asarray(x, dtype=float)
        if state is None:
            return x.copy(), None
        y, state = signal.sosfilt(self.sos, x, axis=0, zi=state)
        return y, state


def backward_difference(previous: np.ndarray, x: np.ndarray, dt: np.ndarray) -> np.ndarray:
    """(x_i - x_{i-1}) / dt_i (N, k) of a batch x (N, k) whose sample before is ``previous`` (k,);
    dt (N,) s the intervals."""
    x = np.asarray(x, dtype=float)
    before = np.vstack([np.asarray(previous, dtype=float)[None], x[:-1]])
    return (x - before) / np.asarray(dt, dtype=float)[:, None]
